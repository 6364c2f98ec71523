/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unwinding a BPF record (bpf/record.h): the registers and stack copy of the
 * record for the DWARF walk, then the recorded frame-pointer chain beyond it.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include <string.h>

#include "record_unwind.h"

struct stb_record_walk {
	stb_unw_frame_fn fn;
	void *arg;
	unsigned n;
	uint64_t last_ip;
	bool stop;
};

static int record_frame(const struct stb_unw_frame *f, void *arg)
{
	struct stb_record_walk *w = arg;
	w->n++;
	w->last_ip = f->ip;
	w->stop = w->fn(f, w->arg) != 0;
	return w->stop;
}

/* Delivers rec->frames[from ..] as frame-pointer frames. */
static void record_chain(const struct stb_record *rec, unsigned from, unsigned max,
			     struct stb_record_walk *w)
{
	for (unsigned k = from; k < rec->nframes && k < STB_RECORD_MAX_FRAMES; k++) {
		if (w->n >= max || w->stop)
			return;
		struct stb_unw_frame f = {.ip = rec->frames[k], .sp = 0, .how = STB_FRAME_FP};
		record_frame(&f, w);
	}
}

unsigned stb_record_unwind(struct stb_unw_proc *unw, const struct stb_record *rec,
			   size_t size, unsigned max, stb_unw_frame_fn fn, void *arg)
{
	struct stb_record_walk w = {.fn = fn, .arg = arg};
	struct stb_regs regs;
	struct stb_stack_copy copy;
	if (stb_record_copy(rec, size, &regs, &copy) == 0) {
		regs.flags = STB_UNW_COPY_ONLY;
		stb_unw_walk(unw, &regs, &copy, 0, max, record_frame, &w);
	}
	if (w.n == 0) {
		record_chain(rec, 0, max, &w);
		return w.n;
	}
	for (unsigned k = 0; k < rec->nframes && k < STB_RECORD_MAX_FRAMES; k++) {
		if (rec->frames[k] == w.last_ip) {
			record_chain(rec, k + 1, max, &w);
			break;
		}
	}
	return w.n;
}

int stb_record_copy(const struct stb_record *rec, size_t size, struct stb_regs *regs,
		    struct stb_stack_copy *copy)
{
	if ((rec->flags & STB_RECORD_F_NO_STACK) || !rec->stack_size ||
	    rec->stack_size > STB_RECORD_STACK_MAX || STB_RECORD_HDR_SIZE + rec->stack_size > size)
		return -ENODATA;
	unsigned below = rec->red_zone_len <= STB_RECORD_RED_ZONE ? rec->red_zone_len : 0;
	if (rec->regs.sp < below)
		return -ENODATA;
	*regs = (struct stb_regs){
	    .ip = rec->regs.ip, .sp = rec->regs.sp, .bp = rec->regs.bp, .bx = rec->regs.bx,
	    .r12 = rec->regs.r12, .r13 = rec->regs.r13, .r14 = rec->regs.r14, .r15 = rec->regs.r15};
	/* red_zone[] ends where stack[] begins (bpf/record.h). */
	*copy = (struct stb_stack_copy){.addr = rec->regs.sp - below, .bytes = rec->stack - below,
					.len = rec->stack_size + below};
	return 0;
}
