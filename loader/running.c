/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Capturing running tasks from outside (running.h): /proc/PID/task/TID/syscall
 * first, then the BPF program on the task's worker, a few milliseconds at a
 * time, until the trace's deadline.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "table/insyscall.h"
#include "record_unwind.h"
#include "running.h"
#include "stb/stb.h"
#include "util.h"

/* Sampling window of one BPF attempt: a task that does not run in it is
 * looked for in a blocking system call again. */
#define STB_RUNNING_SLICE_US 5000u
/* A running stack past the BPF copy (32 KiB) is read with process_vm_readv,
 * up to this many bytes from sp (the largest stack class, 8 MiB, and its
 * page of colors), the copy's last STB_RUNNING_OVERLAP bytes read again. */
#define STB_RUNNING_DEEP_MAX ((8u << 20) + (8u << 10))
#define STB_RUNNING_OVERLAP 512u

int stb_running_init(struct stb_running *r, struct stb_target *tg, int verbose)
{
	memset(r, 0, sizeof(*r));
	r->tg = tg;
	r->verbose = verbose;
	stb_target_mem(tg, &r->mem);
	r->rec = malloc(sizeof(*r->rec));
	return r->rec ? 0 : -ENOMEM;
}

void stb_running_fini(struct stb_running *r)
{
	stb_bpf_prog_close(r->prog);
	free(r->rec);
	free(r->deep);
	memset(r, 0, sizeof(*r));
}

static void open_prog(struct stb_running *r)
{
	stb_bpf_prog_log(r->verbose > 0);
	struct stb_bpf_prog_opts co;
	stb_target_bpf_prog_opts(r->tg, STB_RECORD_MODE_REQUEST, &co);
	r->prog = stb_bpf_prog_open(r->tg->pid, &co);
	if (!r->prog) {
		int err = errno;
		if (err == EPERM || err == EACCES)
			snprintf(r->note, sizeof(r->note),
				 "BPF unavailable: permission denied, needs root or "
				 "CAP_BPF+CAP_PERFMON (or CAP_SYS_ADMIN)");
		else
			snprintf(r->note, sizeof(r->note), "BPF unavailable: %s",
				 stb_bpf_prog_strerror(-err));
		return;
	}
	int rc = stb_bpf_prog_sync_workers(r->prog);
	if (rc < 0) {
		snprintf(r->note, sizeof(r->note), "perf events unavailable: %s%s",
			 stb_bpf_prog_strerror(rc),
			 rc == -EPERM || rc == -EACCES ? " (needs root or CAP_PERFMON)" : "");
		stb_bpf_prog_close(r->prog);
		r->prog = NULL;
	}
}

/* The program, loaded when the first running bthread needs it: a run in
 * which every bthread is off-CPU loads no BPF at all. The warning about a
 * missing capability is printed then, once. */
static struct stb_bpf_prog *prog(struct stb_running *r)
{
	if (!r->tried) {
		r->tried = true;
		open_prog(r);
		if (!r->prog)
			fprintf(stderr,
				"stb-bpf-loader: warning: %s; running bthreads will not be "
				"captured (context mode only)\n",
				r->note);
	}
	return r->prog;
}

const char *stb_running_mode(const struct stb_running *r)
{
	return r->prog ? "bpf+context" : r->tried ? "context-only" : "context";
}

static int record_unwind(void *ctx, struct stb_unw_proc *unw, const struct stb_capture *s,
			 unsigned max, stb_unw_frame_fn fn, void *arg)
{
	(void)s;
	return (int)stb_record_unwind(unw, ctx, sizeof(struct stb_record), max, fn, arg);
}

/* Reads len bytes at addr of the target into dst up to the first byte
 * that cannot be read. Returns the bytes read, or -errno (-ESRCH: gone). */
static ssize_t read_upto(const struct stb_running *r, uint64_t addr, void *dst, size_t len)
{
	struct iovec local = {.iov_base = dst, .iov_len = len};
	struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
	ssize_t n = process_vm_readv(r->tg->pid, &local, 1, &remote, 1, 0);
	return n < 0 ? -errno : n;
}

/*
 * The stack of running task id (entry p, word w1 when the capture began; p
 * NULL: a thread that is no task, whose stack's top is not known) past the
 * BPF copy of record rec: read from the target after the capture, and taken
 * only when it can be trusted -- the task still runs the same run (its word
 * unchanged, the worker of `at` still naming it: stb_run_at_moved; a thread:
 * not checked), and the bytes
 * read again at the end of the copy are the copy's (frames below them have
 * not returned past them: what the copy ends with still holds). What the
 * check cannot see: a run that returned past that point and called its way
 * back to the same bytes. Sets capt to registers and one copy (red zone,
 * record, the rest), or sets capt->cut and keeps the record's walk.
 */
static void deepen(struct stb_running *r, struct stb_abi_task *p, uint64_t id, uint64_t w1,
		   const struct stb_run_at *at, uint64_t deadline, struct stb_capture *capt)
{
	const struct stb_record *rec = r->rec;
	if (!(rec->flags & (STB_RECORD_F_STACK_LIMIT | STB_RECORD_F_STACK_FAULT)) ||
	    rec->stack_size > STB_RECORD_STACK_MAX || rec->red_zone_len > STB_RECORD_RED_ZONE)
		return;
	uint64_t sp = rec->regs.sp, hi = rec->stack_hi;
	if (hi <= sp || hi - sp <= rec->stack_size)
		return;
	uint64_t want = hi - sp;
	bool capped = want > STB_RUNNING_DEEP_MAX;
	if (capped)
		want = STB_RUNNING_DEEP_MAX;
	size_t below = rec->red_zone_len, overlap = rec->stack_size;
	if (overlap > STB_RUNNING_OVERLAP)
		overlap = STB_RUNNING_OVERLAP;
	if (overlap < 8 || stb_now_ns() >= deadline) {
		capt->cut = STB_CUT_COPY; /* nothing to check the rest against, or no time */
		return;
	}
	size_t total = below + (size_t)want;
	if (total > r->deep_cap) {
		void *m = realloc(r->deep, total);
		if (!m) {
			capt->cut = STB_CUT_COPY;
			return;
		}
		r->deep = m;
		r->deep_cap = total;
	}
	/* red_zone[] ends where stack[] begins (bpf/record.h). */
	uint8_t *d = r->deep;
	memcpy(d, rec->stack - below, below + rec->stack_size - overlap);
	uint64_t from = sp + rec->stack_size - overlap;
	size_t len = (size_t)(sp + want - from);
	ssize_t got = read_upto(r, from, d + below + rec->stack_size - overlap, len);
	/* Read after the copy: the same run, still named where it was. */
	bool same = !p || (!stb_run_at_moved(at, p, id, w1) &&
			   __atomic_load_n(&p->id, __ATOMIC_ACQUIRE) == id);
	/* A task's stack is readable to its top; a thread's, to its end. */
	if (got < (ssize_t)overlap || (p && (size_t)got != len)) {
		capt->cut = STB_CUT_UNREADABLE;
		return;
	}
	if (!p && (size_t)got < len) {
		capped = false; /* the thread's stack ends there */
		total = below + rec->stack_size - overlap + (size_t)got;
	}
	if (!same || memcmp(d + below + rec->stack_size - overlap,
			    rec->stack + rec->stack_size - overlap, overlap) != 0) {
		capt->cut = STB_CUT_MOVED;
		return;
	}
	capt->regs = (struct stb_regs){
		.ip = rec->regs.ip, .sp = sp, .bp = rec->regs.bp, .bx = rec->regs.bx,
		.r12 = rec->regs.r12, .r13 = rec->regs.r13, .r14 = rec->regs.r14,
		.r15 = rec->regs.r15, .flags = STB_UNW_COPY_ONLY,
	};
	capt->copy = (struct stb_stack_copy){.addr = sp - below, .bytes = d, .len = total};
	capt->unwind = NULL; /* one copy, walked as any other */
	capt->unwind_ctx = NULL;
	capt->cut = capped ? STB_CUT_COPY : STB_CUT_NONE;
}

/* Task id (entry p, word w1, found at `at`) blocked in a system call on its
 * thread tid: 0 with capt set, -EAGAIN when it moved meanwhile (the call
 * may be its thread's after it left), or -errno. */
static int in_syscall(struct stb_running *r, struct stb_abi_task *p, uint64_t id, uint64_t w1,
		      const struct stb_run_at *at, uint32_t tid, void *buf, size_t cap,
		      struct stb_capture *capt)
{
	uint64_t lo = __atomic_load_n(&p->stack_lo, __ATOMIC_RELAXED);
	uint64_t hi = __atomic_load_n(&p->stack_hi, __ATOMIC_RELAXED);
	int rc = stb_insyscall_capture(&r->mem, r->tg->pid, (int)tid, lo, hi, buf, cap, capt);
	if (rc == 0 && stb_run_at_moved(at, p, id, w1))
		return -EBUSY;
	return rc;
}

static int capture(void *ctx, struct stb_abi_task *p, uint64_t id, uint64_t w1,
		   const struct stb_run_at *at, uint64_t deadline, void *buf, size_t cap,
		   struct stb_capture *capt, char *err, size_t errlen)
{
	struct stb_running *r = ctx;
	bool pthread = (__atomic_load_n(&p->flags, __ATOMIC_RELAXED) & STB_ABI_TASK_F_PTHREAD) != 0;
	/* Where it runs: the worker entry that names it, or a pthread's own
	 * entry (the driver read them: abi.h, "Running"). */
	uint32_t worker = at->worker;
	uint32_t tid = at->tid;
	capt->tid = tid;
	if (!pthread && worker >= STB_ABI_MAX_WORKERS) {
		if (stb_run_at_moved(at, p, id, w1))
			return -EAGAIN;
		stb_say(err, errlen, "running, but no worker of the table names it");
		return -EPROTO;
	}
	if (tid == 0 || tid > INT32_MAX) {
		if (stb_run_at_moved(at, p, id, w1))
			return -EAGAIN;
		stb_say(err, errlen, "the table is inconsistent: running on thread %u", tid);
		return -EPROTO;
	}
	/* Blocked in a system call on its thread: nothing to sample. */
	int rc = in_syscall(r, p, id, w1, at, tid, buf, cap, capt);
	if (rc == 0)
		return 0;
	if (rc == -EBUSY)
		return -EAGAIN; /* it left the call meanwhile: read it again */
	if (rc == -ESRCH) {
		/* No such thread in the target: gone meanwhile, or the entry lies. */
		if (!stb_target_alive(r->tg)) {
			capt->target_gone = true;
			stb_say(err, errlen, "the target exited");
			return -ESRCH;
		}
		if (stb_run_at_moved(at, p, id, w1))
			return -EAGAIN;
		stb_say(err, errlen,
			"the table names thread %u, which is not a thread of the "
			"target",
			tid);
		return -EPROTO;
	}
	struct stb_bpf_prog *bp = prog(r);
	if (!bp) {
		stb_say(err, errlen, "running: not captured (%s)", r->note);
		return -ENOTSUP;
	}
	if (pthread) {
		/* Not a worker: a perf event on its own thread, for this capture. */
		worker = STB_ABI_MAX_WORKERS;
		rc = stb_bpf_prog_set_worker(bp, worker, (pid_t)tid);
		if (rc != 0) {
			stb_say(err, errlen, "cannot open a perf event on pthread %u: %s", tid,
				stb_bpf_prog_strerror(rc));
			return rc == -ESRCH ? -EAGAIN : rc;
		}
	}
	uint64_t now = stb_now_ns();
	uint64_t budget = now < deadline ? (deadline - now) / 1000u : 0;
	if (budget > STB_RUNNING_SLICE_US)
		budget = STB_RUNNING_SLICE_US;
	struct stb_bpf_prog_timing tm = {0};
	rc = stb_bpf_prog_request(bp, worker, id, (unsigned)budget, r->rec, &tm);
	if (pthread)
		stb_bpf_prog_set_worker(bp, worker, 0);
	if (rc == 0) {
		capt->mode = STB_TRACE_BPF;
		capt->tid = r->rec->tid;
		capt->unwind = record_unwind;
		capt->unwind_ctx = r->rec;
		capt->held_ns = r->rec->prog_ns;
		/* Deeper than the BPF copy: the rest from memory, checked. */
		deepen(r, p, id, w1, at, deadline, capt);
		if (tm.seen_ns > tm.arm_ns) {
			uint64_t wait = tm.seen_ns - tm.arm_ns;
			r->n++;
			r->last_wait_ns = wait;
			r->wait_sum_ns += wait;
			r->wait_max_ns = wait > r->wait_max_ns ? wait : r->wait_max_ns;
			r->prog_sum_ns += r->rec->prog_ns;
			r->prog_max_ns =
			    r->rec->prog_ns > r->prog_max_ns ? r->rec->prog_ns : r->prog_max_ns;
		}
		return 0;
	}
	if (rc == -ETIMEDOUT) {
		if (stb_run_at_moved(at, p, id, w1))
			return -EAGAIN; /* it moved: read it again */
		/* Never on a CPU: blocked in a system call on its thread? */
		rc = in_syscall(r, p, id, w1, at, tid, buf, cap, capt);
		if (rc == 0)
			return 0;
		if (rc == -EBUSY)
			return -EAGAIN;
		if (stb_now_ns() < deadline)
			return -EAGAIN;
		stb_say(err, errlen,
			"running on worker %u (tid %u) but not seen on a CPU within the "
			"timeout (machine overloaded?)",
			worker, tid);
		return -ETIMEDOUT;
	}
	if (rc == -ESRCH) {
		if (!stb_target_alive(r->tg)) {
			capt->target_gone = true;
			stb_say(err, errlen, "the target exited");
			return -ESRCH;
		}
		if (stb_run_at_moved(at, p, id, w1))
			return -EAGAIN;
		stb_say(err, errlen, "its thread %u is gone although the table says it runs there",
			tid);
		return -EPROTO;
	}
	stb_say(err, errlen, "BPF capture failed: %s", stb_bpf_prog_strerror(rc));
	return rc;
}

/* A thread that is no task (capture_thread of driver.h): blocked, from
 * /proc; on a CPU, by the BPF program on its tid. */
static int capture_thread(void *ctx, uint32_t tid, uint64_t deadline, void *buf, size_t cap,
			  struct stb_capture *capt, char *err, size_t errlen)
{
	struct stb_running *r = ctx;
	if (tid == 0 || tid > INT32_MAX) {
		stb_say(err, errlen, "thread id %u out of range", tid);
		return -EPROTO;
	}
	int rc = stb_insyscall_capture(&r->mem, r->tg->pid, (int)tid, 0, 0, buf, cap, capt);
	if (rc == 0)
		return 0;
	if (rc == -EBUSY)
		return -EAGAIN; /* it left the call meanwhile: again */
	if (rc == -ESRCH) {
		capt->target_gone = !stb_target_alive(r->tg);
		return -ESRCH; /* exited */
	}
	if (rc != -EAGAIN) {
		stb_say(err, errlen, "cannot read its stack: %s", strerror(-rc));
		return rc;
	}
	struct stb_bpf_prog *bp = prog(r);
	if (!bp) {
		stb_say(err, errlen, "running: not captured (%s)", r->note);
		return -ENOTSUP;
	}
	unsigned slot = STB_ABI_MAX_WORKERS;
	rc = stb_bpf_prog_set_worker(bp, slot, (pid_t)tid);
	if (rc != 0) {
		if (rc == -ESRCH)
			return -ESRCH;
		stb_say(err, errlen, "cannot open a perf event on thread %u: %s", tid,
			stb_bpf_prog_strerror(rc));
		return rc;
	}
	uint64_t now = stb_now_ns();
	uint64_t budget = now < deadline ? (deadline - now) / 1000u : 0;
	if (budget > STB_RUNNING_SLICE_US)
		budget = STB_RUNNING_SLICE_US;
	struct stb_bpf_prog_timing tm = {0};
	rc = stb_bpf_prog_request_thread(bp, slot, (pid_t)tid, (unsigned)budget, r->rec, &tm);
	stb_bpf_prog_set_worker(bp, slot, 0);
	if (rc == 0) {
		memset(capt, 0, sizeof(*capt));
		capt->mode = STB_TRACE_BPF;
		capt->tid = tid;
		capt->state = STB_TASK_RUNNING;
		capt->unwind = record_unwind;
		capt->unwind_ctx = r->rec;
		capt->held_ns = r->rec->prog_ns;
		/* Its stack past the copy, as far as it can be read. */
		deepen(r, NULL, 0, 0, NULL, deadline, capt);
		return 0;
	}
	if (rc == -ETIMEDOUT) {
		if (stb_now_ns() < deadline)
			return -EAGAIN; /* not on a CPU then: in a system call again? */
		stb_say(err, errlen, "neither blocked nor seen on a CPU within the timeout");
		return -ETIMEDOUT;
	}
	if (rc == -ESRCH)
		return -ESRCH;
	stb_say(err, errlen, "BPF capture failed: %s", stb_bpf_prog_strerror(rc));
	return rc;
}

void stb_running_ops(struct stb_running *r, struct stb_capture_ops *ops)
{
	*ops = (struct stb_capture_ops){
	    .capture = capture, .capture_thread = capture_thread, .ctx = r};
}
