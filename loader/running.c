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

#include "insyscall.h"
#include "record_unwind.h"
#include "running.h"
#include "stb/stb.h"
#include "util.h"

/* Sampling window of one BPF attempt: a task that does not run in it is
 * looked for in a blocking system call again. */
#define STB_RUNNING_SLICE_US 5000u

int stb_running_init(struct stb_running *r, struct stb_target *tg, int verbose)
{
	memset(r, 0, sizeof(*r));
	r->tg = tg;
	r->verbose = verbose;
	r->rec = malloc(sizeof(*r->rec));
	return r->rec ? 0 : -ENOMEM;
}

void stb_running_fini(struct stb_running *r)
{
	stb_bpf_prog_close(r->prog);
	free(r->rec);
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

/* Blocked in a system call on its thread: 0 with capt set, or -errno. */
static int in_syscall(struct stb_running *r, uint32_t tid, uint64_t stack_hi, void *buf, size_t cap,
		      struct stb_capture *capt)
{
	long nr = -1;
	int rc = stb_insyscall_read(r->tg, (pid_t)tid, stack_hi, buf, cap, &capt->regs, &capt->copy,
				    &nr);
	if (rc == 0) {
		capt->mode = STB_TRACE_SYSCALL;
		capt->tid = tid;
		capt->unwind = stb_insyscall_unwind;
		capt->unwind_ctx = r->tg;
	}
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
	uint64_t stack_hi = __atomic_load_n(&p->stack_hi, __ATOMIC_RELAXED);
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
	int rc = in_syscall(r, tid, stack_hi, buf, cap, capt);
	if (rc == 0)
		return 0;
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
		if (in_syscall(r, tid, stack_hi, buf, cap, capt) == 0)
			return 0;
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

void stb_running_ops(struct stb_running *r, struct stb_capture_ops *ops)
{
	*ops = (struct stb_capture_ops){.capture = capture, .ctx = r};
}
