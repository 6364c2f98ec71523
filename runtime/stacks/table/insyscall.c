/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Running-but-blocked tasks and threads (insyscall.h):
 * /proc/PID/task/TID/syscall gives the user sp and pc at the system call;
 * the stack is stable while the call blocks (the thread's run counts say it
 * did not run meanwhile). rbp is not published there, so
 * the frame-pointer chain is found by scanning for a saved rbp whose
 * neighbour is a return address after a call.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "table/insyscall.h"

#define STB_INSYSCALL_RED_ZONE 128u
#define STB_INSYSCALL_SCAN 16384u /* bytes scanned above the last DWARF frame */

int stb_insyscall_capture(const struct stb_mem *mem, int pid, int tid, uint64_t stack_lo,
			  uint64_t stack_hi, void *buf, size_t cap, struct stb_capture *capt)
{
	struct stb_syscall_regs sc, again;
	/* How much it has run, before and after: a thread that woke, ran and
	 * blocked again at the same sp and pc (a loop around one call) may
	 * have changed its stack during the copy. */
	struct stb_syscall_ran ran, ran_again;
	bool ran_known = stb_syscall_ran(pid, tid, &ran) == 0;
	int rc = stb_syscall_read(pid, tid, &sc);
	if (rc != 0)
		return rc == -EPROTO ? -EAGAIN : rc;
	uint64_t sp = sc.sp, pc = sc.pc;
	if (sp <= STB_INSYSCALL_RED_ZONE || (stack_hi && (sp >= stack_hi || sp < stack_lo)))
		return -EAGAIN; /* not on its stack (its scheduler's, a signal stack): not this way */
	uint64_t from = sp - STB_INSYSCALL_RED_ZONE;
	size_t len = cap;
	if (stack_hi && stack_hi - from < cap)
		len = (size_t)(stack_hi - from);
	rc = mem->read(mem->ctx, from, buf, len);
	if (rc == -EFAULT && !stack_hi) {
		/* The stack's top is not known: as much of it as is mapped, read
		 * from the red zone to the end of sp's page, then page by page. */
		size_t got = 0, step = 4096 - (size_t)(from & 4095);
		while (got < len && mem->read(mem->ctx, from + got, (char *)buf + got,
					      step < len - got ? step : len - got) == 0) {
			got += step < len - got ? step : len - got;
			step = 4096;
		}
		len = got;
		rc = len > STB_INSYSCALL_RED_ZONE ? 0 : -EFAULT;
	}
	if (rc != 0)
		return rc;
	/* Still blocked in the same call: the copy is consistent. */
	rc = stb_syscall_read(pid, tid, &again);
	if (rc != 0)
		return rc == -EPROTO || rc == -EAGAIN ? -EBUSY : rc;
	if (again.nr != sc.nr || again.sp != sp || again.pc != pc ||
	    (ran_known && (stb_syscall_ran(pid, tid, &ran_again) != 0 || ran_again.ns != ran.ns ||
			   ran_again.times != ran.times)))
		return -EBUSY; /* it moved (or ran) during the copy: again */
	memset(&capt->regs, 0, sizeof(capt->regs));
	capt->regs.ip = pc;
	capt->regs.sp = sp;
	capt->regs.flags = STB_UNW_COPY_ONLY;
	capt->copy.addr = from;
	capt->copy.bytes = buf;
	capt->copy.len = len;
	capt->cut = stack_hi && from + len < stack_hi ? STB_CUT_COPY : STB_CUT_NONE;
	capt->mode = STB_TRACE_SYSCALL;
	capt->tid = (uint32_t)tid;
	capt->in_syscall = true;
	capt->syscall_nr = sc.nr > UINT32_MAX ? UINT32_MAX : (uint32_t)sc.nr;
	capt->syscall_arg0 = sc.args[0];
	capt->unwind = stb_insyscall_unwind;
	capt->unwind_ctx = (void *)mem;
	return 0;
}

static int copy_u64(const struct stb_stack_copy *c, uint64_t addr, uint64_t *v)
{
	if (addr < c->addr || addr - c->addr > c->len || c->len - (addr - c->addr) < 8)
		return -EFAULT;
	memcpy(v, (const char *)c->bytes + (addr - c->addr), 8);
	return 0;
}

enum { STB_RET_NO = 0, STB_RET_INDIRECT = 1, STB_RET_DIRECT = 2 };

/* A call to a PLT stub goes where its GOT slot points (the call being
 * blocked has run through it: the slot is bound). Returns that, or addr. */
static uint64_t plt_target(const struct stb_mem *mem, uint64_t addr)
{
	uint8_t c[11];
	if (mem->read(mem->ctx, addr, c, sizeof(c)) != 0)
		return addr;
	unsigned at = 0;
	if (c[0] == 0xf3 && c[1] == 0x0f && c[2] == 0x1e && c[3] == 0xfa)
		at = 4; /* endbr64 */
	if (c[at] == 0xf2)
		at++; /* bnd */
	if (at + 6 > sizeof(c) || c[at] != 0xff || c[at + 1] != 0x25)
		return addr; /* not jmp *rel32(%rip) */
	int32_t rel;
	memcpy(&rel, c + at + 2, sizeof(rel));
	uint64_t slot = addr + at + 6 + (uint64_t)(int64_t)rel, fn;
	if (mem->read(mem->ctx, slot, &fn, sizeof(fn)) != 0 || fn == 0)
		return addr;
	return fn;
}

/* Is ret a return address: inside a module, right after a call instruction?
 * For a direct call (rel32), *target is the function it called (through its
 * PLT stub). */
static int return_kind(struct stb_unw_proc *unw, const struct stb_mem *mem, uint64_t ret,
			   uint64_t *target)
{
	struct stb_unw_module_info mi;
	uint8_t code[7];
	if (ret < 8 || stb_unw_proc_module(unw, ret, &mi) != 0)
		return STB_RET_NO;
	if (mem->read(mem->ctx, ret - 7, code, sizeof(code)) != 0)
		return STB_RET_NO;
	if (code[2] == 0xe8) { /* call rel32 */
		int32_t rel;
		memcpy(&rel, code + 3, sizeof(rel));
		*target = ret + (uint64_t)(int64_t)rel;
		*target = plt_target(mem, *target);
		return STB_RET_DIRECT;
	}
	if (code[5] == 0xff && (code[6] & 0x38) == 0x10) /* call *%reg */
		return STB_RET_INDIRECT;
	if (code[4] == 0xff && (code[5] & 0x38) == 0x10) /* call *disp8(%reg) */
		return STB_RET_INDIRECT;
	if (code[1] == 0xff && (code[2] & 0x38) == 0x10) /* call *disp32(%reg) */
		return STB_RET_INDIRECT;
	return STB_RET_NO;
}

/* A direct call to code at most this far before the callee's ip is taken as
 * a call to the callee's function when its CFI gives no function start. */
#define STB_INSYSCALL_FN_SPAN 65536u
/* Bytes of a called function searched for a jump to the callee's start. */
#define STB_INSYSCALL_TAIL_SCAN 64u

/* Does the code at fn jump to `to` within its first bytes? A wrapper that
 * tail-calls its body (e.g. a sanitizer's interceptor jumping to its
 * ".part.0") is a call to that body. Any jmp/jcc whose target is exactly
 * `to` counts: a false match inside another instruction would have to hit
 * that one address. */
static bool jumps_to(const struct stb_mem *mem, uint64_t fn, uint64_t to)
{
	uint8_t c[STB_INSYSCALL_TAIL_SCAN];
	if (fn == to)
		return true;
	if (mem->read(mem->ctx, fn, c, sizeof(c)) != 0)
		return false;
	for (unsigned i = 0; i < sizeof(c); i++) {
		int32_t rel32;
		if (c[i] == 0xe9 && i + 5 <= sizeof(c)) { /* jmp rel32 */
			memcpy(&rel32, c + i + 1, 4);
			if (fn + i + 5 + (uint64_t)(int64_t)rel32 == to)
				return true;
		} else if (c[i] == 0xeb && i + 2 <= sizeof(c)) { /* jmp rel8 */
			if (fn + i + 2 + (uint64_t)(int64_t)(int8_t)c[i + 1] == to)
				return true;
		} else if (c[i] == 0x0f && i + 6 <= sizeof(c) && (c[i + 1] & 0xf0) == 0x80) {
			memcpy(&rel32, c + i + 2, 4); /* jcc rel32 */
			if (fn + i + 6 + (uint64_t)(int64_t)rel32 == to)
				return true;
		}
	}
	return false;
}

/* Forwards the DWARF walk's frames, remembering the last one. */
struct fwd {
	stb_unw_frame_fn fn;
	void *arg;
	unsigned n;
	struct stb_unw_frame last;
	bool stop;
};

static int fwd_frame(const struct stb_unw_frame *f, void *arg)
{
	struct fwd *w = arg;
	w->n++;
	w->last = *f;
	w->stop = w->fn(f, w->arg) != 0;
	return w->stop;
}

int stb_insyscall_unwind(void *mem_ctx, struct stb_unw_proc *unw, const struct stb_capture *s,
			 unsigned max, stb_unw_frame_fn fn, void *arg)
{
	const struct stb_mem *mem = mem_ctx;
	const struct stb_regs *regs = &s->regs;
	const struct stb_stack_copy *copy = &s->copy;
	struct fwd w = {.fn = fn, .arg = arg};
	int rc = stb_unw_walk(unw, regs, copy, 0, max, fwd_frame, &w);
	if (rc < 0)
		return rc;
	if (w.n == 0 || w.n >= max || w.stop)
		return (int)w.n;
	/* The walk stopped where rbp was needed: find the frame record of the
	 * last frame above its stack pointer and follow the chain from there.
	 * A record whose return address follows a direct call to the last
	 * frame's function (its PLT stub resolved, or a wrapper that jumps to
	 * it) is taken first; otherwise the lowest plausible one (stale records
	 * of earlier calls can look plausible, not like that). */
	uint64_t callee_ip = w.last.ip;
	/* The last frame's function, from its CFI (a return address is looked
	 * up at ret - 1; frame 0's pc is exact). */
	uint64_t fn_lo = 0, fn_hi = 0;
	bool fn_known = stb_unw_proc_function(unw, w.n > 1 ? callee_ip - 1 : callee_ip, &fn_lo,
					      &fn_hi) == 0;
	uint64_t from = w.last.sp ? w.last.sp : regs->sp;
	uint64_t hi = copy->addr + copy->len;
	uint64_t pick = 0, pick_bp = 0, pick_ret = 0;
	unsigned pick_fit = 0;
	for (uint64_t x = (from + 7) & ~(uint64_t)7; x + 16 <= hi && x < from + STB_INSYSCALL_SCAN;
	     x += 8) {
		uint64_t saved_bp, ret, target = 0;
		if (copy_u64(copy, x, &saved_bp) || copy_u64(copy, x + 8, &ret))
			break;
		if (saved_bp != 0 && (saved_bp <= x || saved_bp >= hi))
			continue;
		int kind = return_kind(unw, mem, ret, &target);
		if (kind == STB_RET_NO)
			continue;
		/* A call to the last frame's function (through its PLT stub or
		 * a wrapper that tail-calls it) is taken at once; then a call to
		 * code just before it; then any other plausible record; last, a
		 * record that returns into the last frame's own function: one of
		 * its earlier callees left it (its own record returns into its
		 * caller -- unless it recurses). The lowest of the best. */
		unsigned fit = 2;
		if (kind == STB_RET_DIRECT && fn_known && jumps_to(mem, target, fn_lo))
			fit = 4;
		else if (kind == STB_RET_DIRECT && target <= callee_ip &&
			 callee_ip - target < STB_INSYSCALL_FN_SPAN)
			fit = 3;
		if (fn_known && ret - 1 >= fn_lo && ret - 1 < fn_hi && fit < 4)
			fit = 1;
		if (fit > pick_fit) {
			pick = x;
			pick_bp = saved_bp;
			pick_ret = ret;
			pick_fit = fit;
		}
		if (fit == 4)
			break;
	}
	if (pick) {
		struct stb_regs fp = {.ip = pick_ret, .sp = pick + 16, .bp = pick_bp,
				      .flags = STB_UNW_IP_IS_RETURN | STB_UNW_COPY_ONLY};
		/* Frame-pointer frames: the walk gives them how = STB_FRAME_FP. */
		rc = stb_unw_walk_fp(unw, &fp, copy, 0, max - w.n, fn, arg);
		if (rc > 0)
			w.n += (unsigned)rc;
	}
	return (int)w.n;
}
