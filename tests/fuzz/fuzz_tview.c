/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target of the table reader and the trace driver (runtime/stacks/
 * tview.c, driver.c, hold.c, frames.c): the input is a task table -- a
 * header, then task entries -- followed by "stack" bytes that the memory
 * backend serves. Every header is checked, every entry read and scanned
 * with a state mask from the input, and traced by the driver on a frozen
 * target (no waiting) with the stack bytes as the target's memory; the
 * deadlock search runs over the same table (owner words in the stack bytes)
 * and every cycle it reports must close. Then the collector makes two
 * passes over it with options from the input (the whole table from a slot,
 * or ids; stuck tests, reuse, late tasks, each()), and what it keeps must
 * stay within the table and its limits. Each entry's "why" (wait block,
 * creator, execution queue and its queued count, read from the stack bytes)
 * is read as the collector reads it.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "collect/collect.h"
#include "collect/taskwhy.h"
#include "fuzz.h"
#include "symbols/frames.h"
#include "symbols/symbolize.h"
#include "table/deadlock.h"
#include "table/driver.h"
#include "table/tview.h"

#define FT_MAX_TASKS 64u
#define FT_STACK_BASE 0x7f0000000000ull

struct input {
	const uint8_t *stack;
	size_t len;
};

static int mem_read(void *ctx, uint64_t addr, void *dst, size_t len)
{
	const struct input *in = ctx;
	if (addr < FT_STACK_BASE || addr - FT_STACK_BASE > in->len ||
	    in->len - (addr - FT_STACK_BASE) < len)
		return -14; /* -EFAULT */
	memcpy(dst, in->stack + (addr - FT_STACK_BASE), len);
	return 0;
}

/* What the code under test calls outside it: the symbolizer (never: no
 * symbols here), the walk memo (a walk of one frame from the registers),
 * the unwinder's part of a copy (registers only). */
bool stb_sym_fill_frame(struct stb_sym *s, int flags, struct stb_frame *f, struct stb_sym_info *si)
{
	(void)s;
	(void)flags;
	(void)f;
	(void)si;
	return false;
}

int stb_sym_lookup(struct stb_sym *s, uint64_t ip, int flags, struct stb_sym_info *out)
{
	(void)s;
	(void)ip;
	(void)flags;
	(void)out;
	return -2; /* -ENOENT */
}

struct stb_walkmemo *stb_walkmemo_new(size_t max_bytes)
{
	(void)max_bytes;
	static int memo;
	return (struct stb_walkmemo *)&memo;
}

void stb_walkmemo_free(struct stb_walkmemo *m)
{
	(void)m;
}

void stb_walkmemo_reset(struct stb_walkmemo *m)
{
	(void)m;
}

int stb_walkmemo_walk(struct stb_walkmemo *m, struct stb_unw_proc *unw,
		      const struct stb_regs *regs, const struct stb_stack_copy *copy,
		      struct stb_frame_sink *sink)
{
	(void)m;
	(void)unw;
	(void)copy;
	/* One frame per walk, from the registers: something to intern. */
	struct stb_unw_frame f = {.ip = regs->ip, .sp = regs->sp};
	stb_frame_sink_add(&f, sink);
	return (int)sink->n;
}

void stb_unw_regs_from_switch(struct stb_regs *regs, uint64_t ip, uint64_t sp, uint64_t bp,
			      const struct stb_stack_copy *copy)
{
	(void)copy;
	memset(regs, 0, sizeof(*regs));
	regs->ip = ip;
	regs->sp = sp;
	regs->bp = bp;
	regs->flags = STB_UNW_IP_IS_RETURN;
}

struct table {
	struct stb_abi_task *t;
	uint32_t n;
};

static struct stb_abi_task *entry(void *ctx, uint32_t slot, uint32_t *next)
{
	struct table *tb = ctx;
	*next = slot + 1 + (slot % 7 == 6 ? 3 : 0); /* and some holes */
	return slot < tb->n ? &tb->t[slot] : NULL;
}

static int visit(void *arg, uint32_t slot, struct stb_abi_task *p, const struct stb_tview_task *v)
{
	const struct stb_driver *d = arg;
	(void)slot;
	static uint8_t buf[4096];
	struct stb_capture capt;
	char err[160];
	struct stb_driver dd = *d;
	dd.buf = buf;
	dd.cap = sizeof(buf);
	if (stb_driver_trace(&dd, p, v->id, 0, &capt, err, sizeof(err)) == 0 &&
	    capt.mode == STB_TRACE_CONTEXT && capt.copy.len > sizeof(buf))
		__builtin_trap(); /* never more than the buffer */
	return 0;
}

static struct stb_tview_src coll_tasks(void *ctx, bool *clamped, bool again)
{
	(void)again;
	if (clamped)
		*clamped = false;
	return *(const struct stb_tview_src *)ctx;
}

static struct table *coll_table;

static struct stb_abi_task *coll_task(void *ctx, uint32_t slot)
{
	(void)ctx;
	return slot < coll_table->n ? &coll_table->t[slot] : NULL;
}

/* each(): every task handed over is one of the table's, its frames within
 * the limit; some stacks are kept for the next pass, some not. */
static int coll_each(void *arg, struct stb_collect_task *ct)
{
	const struct table *tb = arg;
	if (ct->slot >= tb->n + 16 || ct->t.nframes > 4)
		__builtin_trap();
	ct->user[0] = ct->slot;
	ct->forget = (ct->slot & 3) == 0;
	return 0;
}

/* Two passes of the collector over the table, as bits of the input say. */
static void collect(struct table *tb, struct stb_tview_src *src, const struct stb_mem *mem,
		    unsigned bits, const struct stb_abi_task *tasks, uint32_t n)
{
	static uint8_t buf[4096];
	coll_table = tb;
	struct stb_collect_src cs = {
	    .tasks = coll_tasks, .task = coll_task, .ctx = src, .capacity = tb->n + 8,
	    .owners = mem,
	    .drv = {.mem = mem, .flags = STB_DRIVER_F_LEASE, .buf = buf, .cap = sizeof(buf)},
	};
	struct stb_collector *c = stb_collector_new(&cs, 0);
	if (!c)
		return;
	uint64_t ids[3] = {n ? tasks[0].id : 1, n > 1 ? tasks[1].id : 2, 4294967296ull};
	struct stb_collect_opts o = {
	    .ids = bits & 1 ? ids : NULL,
	    .nids = bits & 1 ? 3 : 0,
	    .first_slot = (bits >> 1) & 15,
	    .state_mask = bits & 32 ? 1u << STB_TASK_SUSPENDED | 1u << STB_TASK_READY : 0,
	    .stacks = !(bits & 64),
	    .stuck_ns = bits & 128 ? 1000 : 0,
	    .holders = (bits & 256) != 0,
	    .now = 1ull << 40,
	    .walk_max = 5,
	    .keep = 4,
	    .late = (bits >> 9) % 3,
	    .reuse = (bits >> 11) % 3,
	    .intern = (bits & 8192) != 0,
	    .deadlocks = (bits & 16384) != 0,
	    .each = bits & 32768 ? coll_each : NULL,
	    .arg = tb,
	};
	for (int pass = 0; pass < 2; pass++) {
		struct stb_collect_result r;
		stb_collect(c, &o, &r);
		if (r.n > tb->n + 16 || (o.each && r.n))
			__builtin_trap();
		uint64_t added = 0;
		for (size_t i = 0; i < r.n; i++) {
			if (r.tasks[i].nframes > 4 || (r.tasks[i].nframes && !r.tasks[i].frames))
				__builtin_trap();
			added += r.tasks[i].added;
		}
		/* Holders: added tasks counted, each id once; the names sorted. */
		if (added != r.added || (added && !o.holders))
			__builtin_trap();
		for (size_t i = 0; i < r.n && o.holders; i++)
			for (size_t k = i + 1; k < r.n; k++)
				if (r.tasks[i].id == r.tasks[k].id && r.tasks[k].added)
					__builtin_trap();
		for (size_t i = 1; i < r.nrefs; i++)
			if (r.refs[i - 1].id >= r.refs[i].id)
				__builtin_trap();
		uint64_t live = 0;
		for (unsigned st = 0; st < STB_TASK_NSTATES; st++)
			live += r.tasks_by_state.by_state[st];
		if (r.census && (live > n || r.tasks_by_state.pthreads > live))
			__builtin_trap();
		for (size_t k = 0; r.deadlocks && k < r.deadlocks->ncycles; k++) {
			size_t len;
			const struct stb_deadlock_member *m = stb_deadlock_cycle(r.deadlocks, k, &len);
			for (size_t i = 0; i < len; i++)
				if (m[i].held_by != m[(i + 1) % len].id)
					__builtin_trap();
		}
	}
	stb_collector_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct stb_abi_task tasks[FT_MAX_TASKS];
	static struct stb_abi_worker workers[FT_MAX_TASKS];
	struct stb_abi_header h;
	if (size < sizeof(h) + 8)
		return 0;
	memcpy(&h, data, sizeof(h));
	uint64_t real;
	memcpy(&real, data + sizeof(h), 8);
	data += sizeof(h) + 8;
	size -= sizeof(h) + 8;
	struct stb_tview_info info;
	char why[256];
	stb_tview_check_header(&h, real, &info, why, sizeof(why));
	stb_tview_hwm(&h, &info, NULL);
	stb_tview_nworkers(&h, NULL);

	uint32_t n = (uint32_t)(size / sizeof(struct stb_abi_task));
	if (n > FT_MAX_TASKS)
		n = FT_MAX_TASKS;
	memcpy(tasks, data, n * sizeof(struct stb_abi_task));
	struct input in = {.stack = data + n * sizeof(struct stb_abi_task),
			   .len = size - n * sizeof(struct stb_abi_task)};
	/* The worker entries: the first nworkers entries read as workers (a
	 * worker's current lies where a task's id is), so that the same bytes
	 * name tasks as running or switching, or name nothing. */
	_Static_assert(sizeof(workers[0]) == sizeof(tasks[0]), "entries");
	memcpy(workers, tasks, n * sizeof(tasks[0]));
	struct stb_tview_wsrc ws = {.w = workers, .n = h.nworkers < n ? h.nworkers : n};
	struct stb_tview_workers *snap = malloc(sizeof(*snap));
	if (!snap)
		return 0;
	stb_tview_workers_read(&ws, snap);
	for (uint32_t i = 0; i < n; i++) {
		struct stb_tview_task v, v2;
		stb_tview_read_task(snap, &tasks[i], &v);
		stb_tview_read_task_now(&ws, &tasks[i], &v2);
		if (v.state != v2.state || v.worker != v2.worker || v.tid != v2.tid)
			__builtin_trap(); /* the snapshot and the live entries agree here */
		if (!(v.flags & STB_ABI_TASK_F_PTHREAD) && v.worker < STB_ABI_MAX_WORKERS &&
		    v.state != STB_TASK_RUNNING && v.state != STB_TASK_ABOUT_TO_RUN)
			__builtin_trap(); /* a worker only ever makes a bthread run */
		if (v.name[sizeof(v.name) - 1] != '\0' || v.wait_kind >= STB_WAIT_NKINDS ||
		    (!(v.bad & STB_TVIEW_BAD_STATE) && v.state >= STB_TASK_NSTATES))
			__builtin_trap();
	}
	struct stb_mem mem = {.read = mem_read, .ctx = &in, .flags = STB_MEM_F_FROZEN};
	for (uint32_t i = 0; i < n; i++) {
		struct stb_report_task rt;
		struct stb_report_more mo;
		memset(&rt, 0, sizeof(rt));
		memset(&mo, 0, sizeof(mo));
		rt.id = tasks[i].id;
		struct stb_wait_seen seen;
		stb_report_task_why(&rt, &mo, &tasks[i], NULL, &mem, &seen);
		if (rt.wait.kind >= STB_WAIT_NKINDS || (mo.execq_queued_known && (mo.execq & 63)) ||
		    (mo.wait_queued_known && rt.wait.kind != STB_WAIT_EXECQ))
			__builtin_trap();
	}
	free(snap);
	struct stb_driver d = {.mem = &mem, .flags = STB_DRIVER_F_LEASE | STB_DRIVER_F_NO_WAIT,
			       .workers = ws};
	struct table tb = {.t = tasks, .n = n};
	struct stb_tview_src src = {.entry = entry, .ctx = &tb, .nslots = (uint32_t)h.slot_hwm,
				    .workers = ws};
	if (src.nslots > n + 16)
		src.nslots = n + 16;
	struct stb_tview_scan_result r;
	stb_tview_scan(&src, (unsigned)h.flags, 0, visit, &d, &r);

	struct stb_deadlocks dl;
	if (stb_deadlock_find(&src, &mem, 0, &dl, NULL) == 0) {
		for (size_t c = 0; c < dl.ncycles; c++) {
			size_t k;
			const struct stb_deadlock_member *m = stb_deadlock_cycle(&dl, c, &k);
			/* A cycle of one is a task waiting for what it holds itself. */
			if (k == 0)
				__builtin_trap();
			for (size_t i = 0; i < k; i++)
				if (m[i].held_by != m[(i + 1) % k].id)
					__builtin_trap(); /* a cycle that does not close */
		}
		stb_deadlocks_free(&dl);
	}

	collect(&tb, &src, &mem, h.flags >> 16, tasks, n);

	/* The frame sink fed with the entries' words as frames. */
	struct stb_frame frames[8];
	struct stb_frame_sink s = {.frames = frames, .nframes = h.pid % 9, .max = h.nworkers % 12};
	for (uint32_t i = 0; i < n; i++) {
		struct stb_unw_frame f = {
		    .ip = tasks[i].ip, .sp = tasks[i].sp, .how = (unsigned)tasks[i].flags & 1};
		if (stb_frame_sink_add(&f, &s))
			break;
	}
	if (s.n > (s.max ? s.max : STB_UNW_DEFAULT_DEPTH))
		__builtin_trap();
	return 0;
}
