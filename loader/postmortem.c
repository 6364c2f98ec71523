/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader --core (postmortem.h): finds the task table among the
 * core's segments (the memfd "stb_tasks" first, then every segment that
 * starts with the magic), checks it with the live reader's header check,
 * serves its entries, the core's memory and its threads' registers to the
 * trace driver, and builds the module registry from NT_FILE. When there is
 * no table, says why as precisely as the core allows.
 */
#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "encode/escape.h"
#include "postmortem.h"
#include "symbols/frames.h"
#include "symbols/symbolize.h"
#include "table/insyscall.h"
#include "unwind/modules.h"
#include "unwind/unwind.h"
#include "util.h"

/* Bytes of a running task's stack copied below its sp (the red zone). */
#define REDZONE 128u
/* A thread's stack copied from the core for its walk, at most. */
#define THREAD_COPY_MAX (256u << 10)
/* What to do about stacks that are not in a core. */
#define STACK_FIX                                                                        \
	"gdb's gcore of a live process leaves out the stacks behind the runtime's guard " \
	"pages (MADV_GUARD_INSTALL, Linux 6.13+): save the process with "                \
	"stb-bpf-loader --pid PID --save FILE instead (or start it with "                \
	"STB_STACK_GUARDS=mprotect before taking gcore), or trace it live with --pid "    \
	"(stb-bpf-loader(8), POST-MORTEM)"
/* ... and about those not in a core the kernel wrote on a fatal signal (it
 * dumps guarded stacks: what left them out is the process's filter). */
#define STACK_FIX_KERNEL                                                                 \
	"the kernel left them out: the process's /proc/PID/coredump_filter lacks private " \
	"anonymous memory (bit 0; the default 0x33 has it) -- set it back before the "    \
	"next crash, or save a live process with stb-bpf-loader --pid PID --save FILE "   \
	"(stb-bpf-loader(8), POST-MORTEM)"

static void note(struct stb_postmortem *pm, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void note(struct stb_postmortem *pm, const char *fmt, ...)
{
	if (pm->nnotes >= STB_POSTMORTEM_MAX_NOTES)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(pm->notes[pm->nnotes++], sizeof(pm->notes[0]), fmt, ap);
	va_end(ap);
}

static bool has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

/* ---- finding the table ---- */

/* Does segment s start with a table header that names s as its table?
 * 1 yes (*h filled), 0 no. */
static int table_at(const struct stb_corefile *c, const struct stb_corefile_seg *s,
		    struct stb_abi_header *h)
{
	uint64_t magic;
	if (s->filesz < sizeof(*h) || stb_corefile_read((void *)c, s->vaddr, &magic, 8) != 0 ||
	    magic != STB_ABI_MAGIC || stb_corefile_read((void *)c, s->vaddr, h, sizeof(*h)) != 0)
		return 0;
	return h->table_addr == s->vaddr;
}

/* Why a core without a table has none: err says it. */
static void no_table(const struct stb_corefile *c, const char *path, const char *comm, char *err,
		     size_t errlen)
{
	const struct stb_corefile_map *memfd = NULL, *map = NULL, *lib = NULL;
	for (size_t i = 0; i < c->nfiles; i++) {
		const struct stb_corefile_map *f = &c->files[i];
		const char *base = strrchr(f->path, '/');
		if (!memfd && has_prefix(f->path, "/memfd:" STB_ABI_TABLE_NAME))
			memfd = f;
		else if (!map && strcmp(f->path, "anon_inode:bpf-map") == 0)
			map = f;
		else if (!lib && base && has_prefix(base + 1, "libbthread"))
			lib = f;
	}
	const char *cut = c->truncated ? " (the core file is also truncated)" : "";
	const struct stb_corefile_seg *ms = memfd ? stb_corefile_seg_at(c, memfd->start) : NULL;
	if (ms && ms->cut) {
		stb_say(
		    err, errlen,
		    "the core file %s is truncated (%" PRIu64
		    " bytes): the task table of process %u "
		    "(%s) at 0x%" PRIx64 " lies beyond its end. Was the core cut by a size limit "
		    "(ulimit -c, RLIMIT_CORE, systemd-coredump's ProcessSizeMax) or a full disk? "
		    "See docs/postmortem.md",
		    path, c->size, c->pid, comm, memfd->start);
	} else if (memfd) {
		stb_say(err, errlen,
			"the core of process %u (%s) does not hold its task table (memfd "
			"\"" STB_ABI_TABLE_NAME "\" at 0x%" PRIx64 ", %" PRIu64
			" bytes, not dumped)%s: the process's "
			"coredump_filter left shared memory out. Keep bit 1 (shared anonymous "
			"memory) set, "
			"as the default 0x33 does (echo 0x33 > /proc/PID/coredump_filter), then "
			"take the "
			"core again (docs/postmortem.md)",
			c->pid, comm, memfd->start, memfd->end - memfd->start, cut);
	} else if (map) {
		stb_say(
		    err, errlen,
		    "the core of process %u (%s) does not hold its task table: the process kept it "
		    "in a BPF map (STB_TABLE=bpf), whose memory the kernel never writes into a "
		    "core "
		    "(VM_DONTDUMP). Run it with the default table, a memfd (unset STB_TABLE), to "
		    "read "
		    "its bthreads from a core (docs/postmortem.md)%s",
		    c->pid, comm, cut);
	} else if (lib) {
		stb_say(err, errlen,
			"the core of process %u (%s) maps %s but holds no stb task table: it "
			"started no "
			"bthread, or its table was left out of the core -- a BPF-map table "
			"(STB_TABLE=bpf) "
			"is never dumped, a memfd one needs bit 1 of coredump_filter "
			"(docs/postmortem.md)%s",
			c->pid, comm, lib->path, cut);
	} else {
		stb_say(err, errlen,
			"%s: process %u (%s) is not a stb runtime: its core holds no "
			"\"" STB_ABI_TABLE_NAME
			"\" task table (is the program linked with libbthread built with tracer "
			"support?)%s",
			path, c->pid, comm, cut);
	}
}

/* Finds the table: 0 with pm->info/hdr set, or -errno with err set. */
static int find_table(struct stb_postmortem *pm, uint64_t deadline, char *err, size_t errlen)
{
	const struct stb_corefile *c = pm->core;
	char comm[64];
	stb_text_escape(comm, sizeof(comm), pm->comm, strlen(pm->comm));
	const struct stb_corefile_seg *found = NULL;
	/* Where the kernel and gdb name it: the memfd mapping. */
	for (size_t i = 0; i < c->nfiles && !found; i++) {
		const struct stb_corefile_map *f = &c->files[i];
		const struct stb_corefile_seg *s = stb_corefile_seg_at(c, f->start);
		if (has_prefix(f->path, "/memfd:" STB_ABI_TABLE_NAME) && s && s->vaddr == f->start &&
		    table_at(c, s, &pm->hdr))
			found = s;
	}
	/* Else any segment that starts with the magic (a table in a BPF map
	 * that gdb was told to dump, a core without NT_FILE). */
	for (size_t i = 0; i < c->nsegs && !found; i++) {
		if ((i & 1023) == 0 && stb_now_ns() >= deadline) {
			stb_say(err, errlen,
				"the run's deadline passed while the core was searched for its "
				"task table");
			return -ETIMEDOUT;
		}
		if (table_at(c, &c->segs[i], &pm->hdr))
			found = &c->segs[i];
	}
	if (!found) {
		no_table(c, pm->path, comm, err, errlen);
		return -ENOENT;
	}
	char why[256];
	int rc = stb_tview_check_header(&pm->hdr, 0, &pm->info, why, sizeof(why));
	if (rc) {
		stb_say(
		    err, errlen,
		    "the core of process %u (%s) has a task table this stb-bpf-loader cannot read: "
		    "%s (use the loader built with the target's libbthread)",
		    c->pid, comm, why);
		return -EPROTO;
	}
	/* The header and worker entries, as dumped (a worker not in the core
	 * stays zero: its running task then has no thread). */
	pm->workers = calloc(STB_ABI_MAX_WORKERS, sizeof(*pm->workers));
	pm->win = malloc(STB_POSTMORTEM_WINDOW_SLOTS * sizeof(*pm->win));
	pm->win_prev = malloc(STB_POSTMORTEM_WINDOW_SLOTS * sizeof(*pm->win_prev));
	if (!pm->workers || !pm->win || !pm->win_prev) {
		stb_say(err, errlen, "out of memory");
		return -ENOMEM;
	}
	uint64_t base = pm->info.table_addr;
	if (stb_corefile_read(pm->core, base + STB_ABI_WORKER_OFFSET(0), pm->workers,
			  STB_ABI_MAX_WORKERS * sizeof(*pm->workers)) != 0) {
		for (unsigned w = 0; w < STB_ABI_MAX_WORKERS; w++)
			if (stb_corefile_read(pm->core, base + STB_ABI_WORKER_OFFSET(w), &pm->workers[w],
					  sizeof(pm->workers[w])) != 0)
				memset(&pm->workers[w], 0, sizeof(pm->workers[w]));
	}
	return 0;
}

/* ---- entries ---- */

static int read_entry(struct stb_postmortem *pm, uint32_t slot, struct stb_abi_task *dst)
{
	return stb_corefile_read(pm->core, pm->info.table_addr + STB_ABI_TASK_OFFSET(slot), dst,
			     sizeof(*dst));
}

struct stb_abi_task *stb_postmortem_task(struct stb_postmortem *pm, uint32_t slot)
{
	if (slot >= pm->info.capacity || read_entry(pm, slot, &pm->one) != 0)
		return NULL;
	return &pm->one;
}

static struct stb_abi_task *src_entry(void *ctx, uint32_t slot, uint32_t *next)
{
	struct stb_postmortem *pm = ctx;
	*next = slot + 1;
	if (slot < pm->win_lo || slot >= pm->win_hi) {
		/* The window before stays as it was until the next move: a reader
		 * may still hold its entries (a batch of traces). */
		struct stb_abi_task *w = pm->win_prev;
		pm->win_prev = pm->win;
		pm->win = w;
		uint32_t lo = slot & ~(STB_POSTMORTEM_WINDOW_SLOTS - 1);
		uint32_t hi = lo + STB_POSTMORTEM_WINDOW_SLOTS;
		if (hi > pm->nslots || hi < lo)
			hi = pm->nslots;
		pm->win_lo = lo;
		pm->win_hi = hi;
		pm->win_single = stb_corefile_read(pm->core,
					       pm->info.table_addr + STB_ABI_TASK_OFFSET(lo),
					       pm->win, (size_t)(hi - lo) * sizeof(*pm->win)) != 0;
	}
	struct stb_abi_task *p = &pm->win[slot - pm->win_lo];
	if (pm->win_single && read_entry(pm, slot, p) != 0) {
		if (!pm->again)
			pm->missing++; /* a truncated core: this entry is not in it */
		return NULL;
	}
	return p;
}

struct stb_tview_src stb_postmortem_src(struct stb_postmortem *pm, bool *clamped)
{
	pm->nslots = stb_tview_hwm(&pm->hdr, &pm->info, clamped);
	pm->win_lo = pm->win_hi = 0;
	pm->missing = 0;
	pm->again = false;
	return (struct stb_tview_src){.entry = src_entry, .ctx = pm, .nslots = pm->nslots,
				      .window = STB_POSTMORTEM_WINDOW_SLOTS,
				      .workers = stb_postmortem_workers(pm)};
}

struct stb_tview_src stb_postmortem_src_again(struct stb_postmortem *pm)
{
	pm->again = true;
	pm->nslots = stb_tview_hwm(&pm->hdr, &pm->info, NULL);
	return (struct stb_tview_src){.entry = src_entry, .ctx = pm, .nslots = pm->nslots,
				      .window = STB_POSTMORTEM_WINDOW_SLOTS,
				      .workers = stb_postmortem_workers(pm)};
}

struct stb_tview_wsrc stb_postmortem_workers(const struct stb_postmortem *pm)
{
	return (struct stb_tview_wsrc){.w = pm->workers, .n = stb_tview_nworkers(&pm->hdr, NULL)};
}

static struct stb_tview_src collect_tasks(void *ctx, bool *clamped, bool again)
{
	return again ? stb_postmortem_src_again(ctx) : stb_postmortem_src(ctx, clamped);
}

static struct stb_abi_task *collect_task(void *ctx, uint32_t slot)
{
	return stb_postmortem_task(ctx, slot);
}

static const struct stb_abi_worker *collect_worker(void *ctx, uint32_t w)
{
	struct stb_postmortem *pm = ctx;
	return w < STB_ABI_MAX_WORKERS ? &pm->workers[w] : NULL;
}

/* The core's threads (collect.h, threads): every NT_PRSTATUS, and those a
 * saved core lists without registers. */
static int collect_threads(void *ctx, uint32_t *tids, unsigned max)
{
	const struct stb_corefile *c = ((struct stb_postmortem *)ctx)->core;
	for (size_t i = 0; i < c->nthreads && i < max; i++)
		tids[i] = c->threads[i].tid;
	return c->nthreads < INT32_MAX ? (int)c->nthreads : INT32_MAX;
}

/* A thread's name: a saved core's list has them, other cores do not. */
static void collect_thread_name(void *ctx, uint32_t tid, char *name, size_t len)
{
	const struct stb_corefile_thread *th =
	    stb_corefile_thread_any(((struct stb_postmortem *)ctx)->core, tid);
	snprintf(name, len, "%s", th ? th->name : "");
}

void stb_postmortem_collect_src(struct stb_postmortem *pm, struct stb_collect_src *src)
{
	*src = (struct stb_collect_src){.tasks = collect_tasks, .task = collect_task,
					.worker = collect_worker, .threads = collect_threads,
					.thread_name = collect_thread_name, .ctx = pm,
					.capacity = pm->info.capacity, .owners = &pm->mem};
}

/* ---- running tasks: their threads' registers ---- */

static int pm_unwind(void *ctx, struct stb_unw_proc *unw, const struct stb_capture *s,
		     unsigned max_depth, stb_unw_frame_fn fn, void *arg)
{
	(void)ctx;
	/* The core does not move: beyond the copy, the unwinder reads it. */
	return stb_unw_walk(unw, &s->regs, &s->copy, 0, max_depth, fn, arg);
}

/* The thread of a worker of the core whose stack pointer is in [lo, hi): the
 * worker that a task a core froze mid-switch was leaving. NULL: none. */
static const struct stb_corefile_thread *worker_on_stack(const struct stb_postmortem *pm,
							 uint64_t lo, uint64_t hi)
{
	uint32_t n = stb_tview_nworkers(&pm->hdr, NULL);
	for (uint32_t w = 0; w < n && lo < hi; w++) {
		const struct stb_corefile_thread *th =
		    pm->workers[w].tid ? stb_corefile_thread_of(pm->core, pm->workers[w].tid) : NULL;
		if (th && th->regs.sp >= lo && th->regs.sp < hi)
			return th;
	}
	return NULL;
}

/* A thread that has not started (corefile.h: starting): its one frame,
 * the instruction it will run first (capt's unwind). */
static int pm_unwind_starting(void *ctx, struct stb_unw_proc *unw, const struct stb_capture *s,
			      unsigned max_depth, stb_unw_frame_fn fn, void *arg)
{
	(void)ctx;
	(void)unw;
	(void)max_depth;
	struct stb_unw_frame f = {.ip = s->regs.ip, .sp = s->regs.sp, .how = STB_FRAME_DWARF};
	fn(&f, arg);
	return 1;
}

/* Thread th as a capture (the core's registers and a copy of its stack from
 * just below sp, within its segment and, when sp is on it, the task's stack
 * [lo, hi)) into capt, the copy in buf[cap]. A thread blocked in a system
 * call says so; one a saved core read from /proc (only ip and sp known) is
 * unwound as the live loader unwinds it (table/insyscall.h); a stack the
 * core holds only in part is cut (the saved core's note says why, else:
 * the core ends before the task's stack does). A thread caught before its
 * first instruction has no stack yet: its capture is its one frame, never
 * an error (the core holds all there is of it). 0, or -ENODATA with err set
 * when its stack is not in the core. */
static int thread_capture(struct stb_postmortem *pm, const struct stb_corefile_thread *th,
			  uint64_t lo, uint64_t hi, void *buf, size_t cap, struct stb_capture *capt,
			  char *err, size_t errlen)
{
	memset(&capt->regs, 0, sizeof(capt->regs));
	capt->regs = th->regs;
	capt->regs.flags = 0; /* the interrupted instruction */
	capt->tid = th->tid;
	if (th->starting && th->has_regs && !(th->flags & STB_COREFILE_THREAD_SP_ONLY)) {
		/* Nothing to copy: what lies at sp is not its (a stack the C
		 * library reuses holds an exited thread's frames). No error
		 * either, so the run stays complete: an untraceable task fails
		 * it because frames it has are missing from the output; this
		 * thread has none yet (docs/postmortem.md). */
		capt->copy = (struct stb_stack_copy){.addr = th->regs.sp, .bytes = buf, .len = 0};
		capt->mode = STB_TRACE_CORE;
		capt->starting = true;
		capt->unwind = pm_unwind_starting;
		capt->unwind_ctx = pm;
		return 0;
	}
	uint64_t sp = th->regs.sp, from = sp >= REDZONE ? sp - REDZONE : 0;
	const struct stb_corefile_seg *s = stb_corefile_seg_at(pm->core, sp);
	size_t len = 0;
	bool short_of_top = false;
	if (s && sp - s->vaddr < s->filesz) {
		if (from < s->vaddr)
			from = s->vaddr;
		uint64_t end = s->vaddr + s->filesz;
		bool on_task = lo < hi && sp >= lo && sp < hi;
		if (on_task && hi < end)
			end = hi;
		short_of_top = on_task && end < hi;
		len = end - from < cap ? (size_t)(end - from) : cap;
		if (stb_corefile_read(pm->core, from, buf, len) != 0)
			len = 0;
	}
	/* A running stack holds return addresses near sp: zeros mean that the
	 * dumper could not read it (gdb's gcore and guard pages). */
	size_t off = (size_t)(sp - from), n = len > off ? len - off : 0;
	n = n < 512 ? n : 512;
	const uint8_t *b = (const uint8_t *)buf + off;
	bool zero = n >= 64;
	for (size_t i = 0; zero && i < n; i++)
		zero = b[i] == 0;
	if (!len || zero) {
		stb_say(err, errlen,
			"its stack is not in the core (%s at sp 0x%" PRIx64 "): see the note",
			len ? "zeros" : "nothing", sp);
		return -ENODATA;
	}
	capt->copy = (struct stb_stack_copy){.addr = from, .bytes = buf, .len = len};
	capt->mode = STB_TRACE_CORE;
	capt->tid = th->tid;
	capt->cut = th->cut ? th->cut : short_of_top ? STB_CUT_COPY : STB_CUT_NONE;
	capt->in_syscall = th->in_syscall;
	capt->syscall_nr = th->syscall_nr;
	capt->syscall_arg0 = th->syscall_arg0;
	if (th->flags & STB_COREFILE_THREAD_SP_ONLY) {
		capt->unwind = stb_insyscall_unwind;
		capt->unwind_ctx = &pm->mem;
	} else {
		capt->unwind = pm_unwind;
		capt->unwind_ctx = pm;
	}
	return 0;
}

/* A thread that is no task (capture_thread of driver.h): its registers in
 * the core. */
static int pm_capture_thread(void *ctx, uint32_t tid, uint64_t deadline, void *buf, size_t cap,
			     struct stb_capture *capt, char *err, size_t errlen)
{
	struct stb_postmortem *pm = ctx;
	(void)deadline;
	const struct stb_corefile_thread *th = stb_corefile_thread_of(pm->core, tid);
	if (!th) {
		stb_say(err, errlen,
			"its registers are not in the core (the save could not read its stack)");
		return -ENOENT;
	}
	memset(capt, 0, sizeof(*capt));
	capt->state = STB_TASK_RUNNING;
	return thread_capture(pm, th, 0, 0, buf, cap, capt, err, errlen);
}

static int pm_capture(void *ctx, struct stb_abi_task *p, uint64_t id, uint64_t w1,
		      const struct stb_run_at *at, uint64_t deadline, void *buf, size_t cap,
		      struct stb_capture *capt, char *err, size_t errlen)
{
	struct stb_postmortem *pm = ctx;
	struct stb_tview_task v;
	(void)id;
	(void)w1;
	(void)deadline;
	stb_tview_read_task(NULL, p, &v);
	unsigned st = at->state;
	bool switching = st == STB_TASK_ABOUT_TO_RUN || st == STB_TASK_SUSPENDING;
	/* Where it ran: the worker whose current names it, or a registered
	 * pthread's own entry (the driver found it: abi.h, "Running"). */
	uint32_t tid = at->tid;
	const struct stb_corefile_thread *th = NULL;
	if (!(v.flags & STB_ABI_TASK_F_PTHREAD) && at->worker >= STB_ABI_MAX_WORKERS) {
		/* Leaving its worker (SUSPENDING): no worker names it any more;
		 * the one whose thread is still on its stack was leaving it. */
		th = switching ? worker_on_stack(pm, v.stack_lo, v.stack_hi) : NULL;
		if (!th) {
			stb_say(err, errlen,
				"the task was %s when the core was written (a switch in "
				"progress) and no worker's thread was on its stack: no "
				"consistent context",
				stb_state_name(st));
			return -EPROTO;
		}
		tid = th->tid;
	}
	if (!th)
		th = stb_corefile_thread_of(pm->core, tid);
	if (!th) {
		stb_say(err, errlen, "its thread %u is not in the core (no registers)", tid);
		return -ENOENT;
	}
	/* Mid-switch: the worker's registers are the task's only when the
	 * worker is on the task's stack (switched to it, not yet away). */
	if (switching && !(v.stack_lo < v.stack_hi && th->regs.sp >= v.stack_lo &&
			   th->regs.sp < v.stack_hi)) {
		stb_say(err, errlen,
			"the task was %s when the core was written (a switch in progress) and its "
			"worker's thread %u was not on its stack (sp 0x%" PRIx64 "): no consistent "
			"context",
			stb_state_name(st), tid, th->regs.sp);
		return -EPROTO;
	}
	int rc = thread_capture(pm, th, v.stack_lo, v.stack_hi, buf, cap, capt, err, errlen);
	if (rc == 0)
		capt->tid = tid;
	return rc;
}

/* ---- modules ---- */

static int build_mods(struct stb_postmortem *pm, const struct stb_loader_opts *o, char *err,
		      size_t errlen)
{
	const struct stb_corefile *c = pm->core;
	/* Every mapping: the segments, and the files that gdb's gcore leaves
	 * out of them (code), whose executable bit is then not known. */
	size_t nmaps = 0, cap = c->nsegs + c->nfiles;
	struct stb_mods_map *maps = calloc(cap ? cap : 1, sizeof(*maps));
	if (!maps) {
		stb_say(err, errlen, "out of memory");
		return -ENOMEM;
	}
	const char *exe_path = NULL;
	const struct stb_corefile_map *prog = stb_corefile_map_at(c, c->at_entry ? c->at_entry : c->at_phdr);
	if (prog)
		exe_path = prog->path;
	else if (c->nfiles)
		exe_path = c->files[0].path;
	for (size_t i = 0, k = 0; i < c->nsegs || k < c->nfiles;) {
		const struct stb_corefile_seg *s = i < c->nsegs ? &c->segs[i] : NULL;
		const struct stb_corefile_map *f = k < c->nfiles ? &c->files[k] : NULL;
		struct stb_mods_map *m = &maps[nmaps++];
		if (f && (!s || f->start < s->vaddr)) {
			*m = (struct stb_mods_map){
			    .start = f->start, .end = f->end, .off = f->off, .exec = -1, .path = f->path};
			k++;
			continue;
		}
		*m = (struct stb_mods_map){.start = s->vaddr, .end = s->vaddr + s->memsz,
					   .exec = (s->flags & PF_X) != 0};
		if (c->at_vdso && s->vaddr == c->at_vdso) {
			m->path = "[vdso]";
		} else if (f && f->start == s->vaddr) {
			m->path = f->path;
			m->off = f->off;
			k++;
		}
		i++;
	}
	struct stb_mods_frozen fz = {
	    .maps = maps,
	    .nmaps = nmaps,
	    .read = stb_corefile_read,
	    .ctx = pm->core,
	    .sysroot = o->sysroot,
	    .exe_path = exe_path,
	    .exe = o->exe,
	};
	pm->mods = stb_mods_new_frozen(&fz);
	int e = errno;
	free(maps);
	if (pm->mods)
		pm->unw = stb_unw_proc_new_mods(pm->mods);
	if (pm->unw)
		pm->sym = stb_sym_new_mods(pm->mods);
	if (!pm->mods || !pm->unw || !pm->sym) {
		stb_say(err, errlen, "cannot read the modules of the core: %s",
			strerror(pm->mods ? errno : e));
		return -ENOMEM;
	}
	return 0;
}

/* Up to three paths of the modules with one of flags (and no other module
 * of a flag in skip), and their count. */
static unsigned mods_with(const struct stb_modtab *t, unsigned flags, unsigned skip, char *list,
			  size_t len)
{
	unsigned n = 0;
	size_t k = 0;
	list[0] = '\0';
	for (size_t i = 0; i < t->nmods; i++) {
		const struct stb_mod *m = &t->mods[i];
		if (!(m->flags & flags) || (m->flags & skip) || !m->path || m->path[0] != '/')
			continue;
		if (n++ < 3 && k < len) {
			char esc[160];
			stb_text_escape(esc, sizeof(esc), m->path, strlen(m->path));
			k += (size_t)snprintf(list + k, len - k, "%s%s", k ? ", " : "", esc);
		}
	}
	if (n > 3 && k < len)
		snprintf(list + k, len - k, " and %u more", n - 3);
	return n;
}

static void module_notes(struct stb_postmortem *pm)
{
	const struct stb_modtab *t = stb_mods_acquire(pm->mods);
	char list[256];
	unsigned n = mods_with(t, STB_UNW_MOD_CHANGED, 0, list, sizeof(list));
	if (n)
		note(pm,
		     "%u module%s on this machine differ%s from the one%s in the core (build id): "
		     "%s; frames there have no symbols ([build id mismatch]): give the crashed "
		     "system's files with --sysroot DIR (and --exe PROGRAM)",
		     n, n == 1 ? "" : "s", n == 1 ? "s" : "", n == 1 ? "" : "s", list);
	n = mods_with(t, STB_UNW_MOD_NO_FILE, STB_UNW_MOD_CHANGED, list, sizeof(list));
	if (n)
		note(pm,
		     "%u module%s of the core %s not found on this machine: %s; frames there have "
		     "no symbols (--sysroot DIR, --exe PROGRAM)",
		     n, n == 1 ? "" : "s", n == 1 ? "was" : "were", list);
	n = mods_with(t, STB_UNW_MOD_UNVERIFIED, 0, list, sizeof(list));
	if (n)
		note(pm,
		     "%u module%s could not be checked against the core (no build id in it): %s; "
		     "their symbols are those of the files on this machine",
		     n, n == 1 ? "" : "s", list);
	stb_mods_release(t);
}

/* ---- the core ---- */

struct stb_postmortem *stb_postmortem_open(const struct stb_loader_opts *o, char *err,
					   size_t errlen)
{
	struct stb_postmortem *pm = calloc(1, sizeof(*pm));
	int rc = 0;
	if (!pm) {
		stb_say(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	pm->path = o->core;
	pm->core = stb_corefile_open(o->core, err, errlen);
	if (!pm->core) {
		rc = errno;
		goto cleanup;
	}
	memcpy(pm->comm, pm->core->comm, sizeof(pm->comm));
	rc = -find_table(pm, stb_loader_deadline(o), err, errlen);
	if (rc)
		goto cleanup;
	rc = -build_mods(pm, o, err, errlen);
	if (rc)
		goto cleanup;
	pm->mem = (struct stb_mem){.read = stb_corefile_read, .ctx = pm->core, .flags = STB_MEM_F_FROZEN};
	pm->ops = (struct stb_capture_ops){
	    .capture = pm_capture, .capture_thread = pm_capture_thread, .ctx = pm};
cleanup:
	if (rc) {
		stb_postmortem_close(pm);
		errno = rc;
		return NULL;
	}
	return pm;
}

void stb_postmortem_close(struct stb_postmortem *pm)
{
	if (!pm)
		return;
	stb_sym_free(pm->sym);
	stb_unw_proc_free(pm->unw);
	stb_mods_unref(pm->mods);
	stb_corefile_close(pm->core);
	free(pm->workers);
	free(pm->win);
	free(pm->win_prev);
	free(pm->order);
	free(pm->thread_frames);
	free(pm);
}

/* ---- the fatal signal ---- */

/* Unwinds thread th of the core into record t (is_thread). 0 or -ENOMEM. */
static int thread_record(struct stb_postmortem *pm, const struct stb_corefile_thread *th,
			 unsigned keep, struct stb_report_task *t, struct stb_report_more *m)
{
	memset(t, 0, sizeof(*t));
	memset(m, 0, sizeof(*m));
	t->more = m;
	t->is_thread = true;
	t->id = STB_ABI_OWNER_TID(th->tid);
	t->tid = th->tid;
	t->state = STB_TASK_RUNNING;
	t->mode = STB_TRACE_CORE;
	t->name = th->name; /* the core's, which outlives the report */
	uint8_t *buf = malloc(THREAD_COPY_MAX);
	free(pm->thread_frames);
	pm->thread_frames = calloc(keep ? keep : 1, sizeof(*pm->thread_frames));
	if (!buf || !pm->thread_frames) {
		free(buf);
		return -ENOMEM;
	}
	struct stb_capture capt = {0};
	int rc = thread_capture(pm, th, 0, 0, buf, THREAD_COPY_MAX, &capt, pm->thread_err,
				sizeof(pm->thread_err));
	if (rc == 0) {
		struct stb_frame_sink sink = {.frames = pm->thread_frames, .nframes = keep,
					      .max = keep};
		rc = stb_capture_unwind(pm->unw, NULL, &capt, &sink);
		if (rc >= 0) {
			t->in_syscall = capt.in_syscall;
			m->syscall_nr = capt.syscall_nr;
			m->syscall_arg0 = capt.syscall_arg0;
			t->starting = capt.starting;
			t->frames = pm->thread_frames;
			t->nframes = sink.n;
			t->truncated = sink.truncated || sink.timed_out || capt.cut;
			t->truncated_why = sink.timed_out ? STB_REPORT_TRUNC_DEADLINE
					   : capt.cut	  ? capt.cut
					   : sink.truncated ? STB_REPORT_TRUNC_WALK_MAX
							    : STB_REPORT_TRUNC_NONE;
			t->beyond_more = sink.truncated;
			rc = 0;
		} else {
			stb_say(pm->thread_err, sizeof(pm->thread_err), "its stack cannot be unwound: %s",
				strerror(-rc));
		}
	}
	if (rc < 0) {
		t->err = rc;
		m->error = pm->thread_err;
	}
	free(buf);
	return 0;
}

int stb_postmortem_crash(struct stb_postmortem *pm, struct stb_report_task *tasks, size_t n,
			 bool thread, unsigned keep, struct stb_report_task **out, size_t *nout)
{
	const struct stb_corefile *c = pm->core;
	*out = tasks;
	*nout = n;
	/* Stacks that are not in the core (a gcore and the stacks' guard pages):
	 * the notes name the fix. */
	pm->nostack = 0;
	for (size_t i = 0; i < n; i++)
		pm->nostack += tasks[i].err == -ENODATA;
	pm->ntraced = n;
	if (!stb_corefile_fatal(c))
		return 0;
	pm->signal = (struct stb_report_signal){
	    .signo = c->signo, .code = c->sig_code, .has_addr = c->sig_has_addr,
	    .addr = c->sig_addr, .has_sender = c->sig_has_sender, .sender_pid = c->sig_pid,
	    .sender_uid = c->sig_uid, .tid = c->sig_tid};
	pm->has_signal = true;
	/* The task that ran on the thread the signal was delivered to: a
	 * running bthread (its worker's thread) or a registered pthread. */
	size_t at = n, thread_at = n;
	for (size_t i = 0; i < n && at == n; i++) {
		const struct stb_report_task *t = &tasks[i];
		if (t->is_thread) {
			/* The thread section's record of it, when no task ran there. */
			if (t->tid == c->sig_tid && !stb_report_more(t)->task && thread_at == n)
				thread_at = i;
			continue;
		}
		if (t->tid == c->sig_tid && !t->added &&
		    (t->state == STB_TASK_RUNNING || t->is_pthread || t->mode == STB_TRACE_CORE))
			at = i;
	}
	if (at == n && thread_at < n) {
		at = thread_at; /* moved first, out of the thread section */
	} else if (at == n) {
		/* None: a thread that is no task (a plain pthread, a worker
		 * between tasks). It is shown when the run selects running
		 * tasks without naming ids. */
		const struct stb_corefile_thread *th = stb_corefile_thread_of(c, c->sig_tid);
		if (!th || !thread)
			return 0;
	}
	free(pm->order);
	pm->order = malloc((n + 1) * sizeof(*pm->order));
	if (!pm->order)
		return -ENOMEM;
	size_t k = 0;
	if (at < n && tasks[at].is_thread) {
		pm->order[k] = tasks[at];
	} else if (at < n) {
		pm->order[k] = tasks[at];
		pm->signal.task = tasks[at].id;
		pm->signal_pthread = tasks[at].is_pthread != 0;
	} else if (thread_record(pm, stb_corefile_thread_of(c, c->sig_tid), keep, &pm->order[k],
				 &pm->sig_more) != 0) {
		return -ENOMEM;
	}
	/* Its more, with the signal (the collector's stays as it was). */
	if (pm->order[k].more != &pm->sig_more)
		pm->sig_more = *stb_report_more(&pm->order[k]);
	pm->sig_more.signal = &pm->signal;
	pm->order[k++].more = &pm->sig_more;
	for (size_t i = 0; i < n; i++)
		if (i != at)
			pm->order[k++] = tasks[i];
	*out = pm->order;
	*nout = k;
	return 0;
}

const struct stb_report_signal *stb_postmortem_signal(const struct stb_postmortem *pm)
{
	return pm->has_signal ? &pm->signal : NULL;
}

/* The monitor passes every few milliseconds while a worker is not parked,
 * and sleeps once all are: only then does its last pass date the core. */
static bool monitor_awake(const struct stb_postmortem *pm)
{
	uint32_t n = stb_tview_nworkers(&pm->hdr, NULL);
	for (uint32_t w = 0; w < n; w++)
		if (pm->workers[w].state != STB_WORKER_PARKED && pm->workers[w].state != STB_WORKER_STOPPED)
			return true;
	return false;
}

uint64_t stb_postmortem_now(const struct stb_postmortem *pm)
{
	return monitor_awake(pm) ? pm->hdr.monitor_ns : 0;
}

void stb_postmortem_notes(struct stb_postmortem *pm, struct stb_report_meta *meta)
{
	const struct stb_corefile *c = pm->core;
	pm->nnotes = 0;
	if (pm->has_signal) {
		char sig[160];
		stb_report_signal_text(&pm->signal, sig, sizeof(sig));
		if (pm->signal.task)
			note(pm,
			     "core of process %u, written on %s, taken by %s %" PRIu64
			     " on thread %u (shown first)",
			     c->pid, sig, pm->signal_pthread ? "pthread" : "bthread", pm->signal.task,
			     pm->signal.tid);
		else
			note(pm,
			     "core of process %u, written on %s, taken by thread %u, which ran no "
			     "task%s",
			     c->pid, sig, pm->signal.tid,
			     pm->order ? " (shown first)" : " (not selected)");
	} else if (c->signo > 0 && c->signo < NSIG && stb_corefile_fatal(c)) {
		const char *abbrev = sigabbrev_np(c->signo);
		note(pm, "core of process %u, written on signal %d (SIG%s) in thread %u", c->pid,
		     c->signo, abbrev ? abbrev : "?", c->sig_tid);
	}
	if (!stb_postmortem_now(pm))
		note(pm, "how long tasks were blocked is not shown: every worker was parked when the "
			 "core was written, and the core does not say since when");
	if (pm->nostack)
		note(pm,
		     "%" PRIu64 " of %" PRIu64 " stacks are not in the core: %s", pm->nostack,
		     (uint64_t)pm->ntraced, stb_corefile_fatal(c) ? STACK_FIX_KERNEL : STACK_FIX);
	module_notes(pm);
	if (c->truncated || pm->missing)
		note(pm,
		     "the core file is truncated (%" PRIu64 " bytes)%s: stacks in its missing part are "
		     "cut short",
		     c->size,
		     pm->missing ? "; table entries missing from it were left out" : "");
	for (unsigned i = 0; i < pm->nnotes; i++)
		stb_report_meta_note(meta, pm->notes[i]);
}
