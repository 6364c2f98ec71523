/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The trace driver (driver.h): one state machine over the abi.h task entry
 * for every tracer and backend.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "stb/stb.h"
#include "table/driver.h"
#include "table/hold.h"
#include "util.h"

#if defined(STB_TEST_HOOKS)
void (*stb_driver_test_hold)(void *arg);
void *stb_driver_test_hold_arg;
#define HELD()                                                             \
	do {                                                               \
		if (stb_driver_test_hold)                                  \
			stb_driver_test_hold(stb_driver_test_hold_arg);    \
	} while (0)
#else
#define HELD() ((void)0)
#endif

static void relax(unsigned spins)
{
	if (spins < 100)
		__builtin_ia32_pause();
	else
		sched_yield();
}

/* Does the copy of a saved context end before its stack's top (the buffer's
 * limit)? Read under the lease: stack_hi is the one the copy was planned with. */
static unsigned cut_of(struct stb_abi_task *p, const struct stb_capture *capt)
{
	uint64_t hi = __atomic_load_n(&p->stack_hi, __ATOMIC_RELAXED);
	return capt->copy.addr + capt->copy.len < hi ? STB_CUT_COPY : STB_CUT_NONE;
}

/* The copy of a ready or suspended task's saved context. */
static int copy_context(const struct stb_driver *d, struct stb_abi_task *p, uint64_t id,
			uint64_t w1, uint64_t lease, struct stb_capture *capt, char *err,
			size_t errlen)
{
	int rc = stb_hold_copy_context(p, id, w1, lease, &d->workers, d->mem->read, d->mem->ctx,
				       d->buf, d->cap, &capt->regs, &capt->copy);
	if (rc == 0 && (d->mem->flags & STB_MEM_F_FROZEN)) {
		/* abi.h: the switch frame ends at sp and its ret is the published
		 * ip. A memory image without the stack (not dumped, or zeros where
		 * a dumper could not read) fails this. */
		struct stb_abi_switch_frame f = {0};
		uint64_t ip = __atomic_load_n(&p->ip, __ATOMIC_RELAXED);
		if (capt->copy.len >= sizeof(f))
			memcpy(&f, capt->copy.bytes, sizeof(f));
		if (f.ret != ip) {
			rc = -ENODATA;
			stb_say(err, errlen,
				"its stack is not in the core (no return address 0x%" PRIx64
				" at sp 0x%" PRIx64 "): see docs/postmortem.md",
				ip, capt->copy.addr + STB_ABI_SWITCH_FRAME);
			return rc;
		}
	}
	if (rc == 0) {
		capt->mode = STB_TRACE_CONTEXT;
		capt->cut = cut_of(p, capt);
		return 0;
	}
	if (rc == -EAGAIN || rc == -ETIMEDOUT)
		return -EAGAIN; /* moved, or our lease is about to end: again */
	if (rc == -ESRCH && __atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) {
		stb_say(err, errlen,
			"bthread %" PRIu64 " finished during the trace (its slot was "
			"reused)",
			id);
		return -ESRCH;
	}
	if (d->mem->alive && !d->mem->alive(d->mem->ctx)) {
		capt->target_gone = true;
		stb_say(err, errlen, "the target exited");
		return -ESRCH;
	}
	if (rc == -EPROTO) {
		stb_say(err, errlen,
			"its table entry is inconsistent: saved sp 0x%" PRIx64
			" is outside its stack [0x%" PRIx64 ", 0x%" PRIx64 ")",
			(uint64_t)__atomic_load_n(&p->sp, __ATOMIC_RELAXED),
			(uint64_t)__atomic_load_n(&p->stack_lo, __ATOMIC_RELAXED),
			(uint64_t)__atomic_load_n(&p->stack_hi, __ATOMIC_RELAXED));
		return rc;
	}
	stb_say(err, errlen, "cannot read the stack: %s", strerror(-rc));
	return rc;
}

bool stb_run_at_moved(const struct stb_run_at *at, const struct stb_abi_task *p, uint64_t id,
		      uint64_t w1)
{
	if (__atomic_load_n(&p->word, __ATOMIC_ACQUIRE) != w1)
		return true;
	if (at->worker >= STB_ABI_MAX_WORKERS || !at->workers || !at->workers->w)
		return false;
	uint32_t w;
	return stb_tview_named_now(at->workers, id, &w) != at->state || w != at->worker;
}

/*
 * The state of task id from its word w1 (abi.h, "Running"): a bthread whose
 * word says READY or READY_NO_STACK runs where a worker names it (*at
 * filled); RUNNING or ABOUT_TO_RUN in a bthread's word is a lie
 * (STB_TASK_NSTATES: out of range). A registered pthread's word says it.
 */
static unsigned task_state(const struct stb_driver *d, const struct stb_abi_task *p, uint64_t id,
			   uint64_t w1, struct stb_run_at *at)
{
	unsigned st = STB_ABI_STATE(w1);
	*at = (struct stb_run_at){.state = st, .worker = STB_ABI_MAX_WORKERS,
				  .workers = &d->workers};
	if (__atomic_load_n(&p->flags, __ATOMIC_RELAXED) & STB_ABI_TASK_F_PTHREAD) {
		uint32_t w = __atomic_load_n(&p->worker, __ATOMIC_RELAXED);
		at->worker = w < STB_ABI_MAX_WORKERS ? STB_ABI_MAX_WORKERS : w;
		at->tid = __atomic_load_n(&p->tid, __ATOMIC_RELAXED);
		return st;
	}
	if (st == STB_TASK_RUNNING || st == STB_TASK_ABOUT_TO_RUN)
		return STB_TASK_NSTATES;
	if (!STB_ABI_RUNNABLE(st))
		return st;
	uint32_t w = STB_ABI_MAX_WORKERS;
	unsigned how = stb_tview_named_now(&d->workers, id, &w);
	if (how == STB_TASK_UNUSED)
		return st;
	at->state = how;
	at->worker = w;
	at->tid = __atomic_load_n(&d->workers.w[w].tid, __ATOMIC_RELAXED);
	return how;
}

int stb_driver_trace(const struct stb_driver *d, struct stb_abi_task *p, uint64_t id,
		     uint64_t deadline, struct stb_capture *capt, char *err, size_t errlen)
{
	bool lease_mode = (d->flags & STB_DRIVER_F_LEASE) && !(d->mem->flags & STB_MEM_F_FROZEN);
	bool no_wait = (d->flags & STB_DRIVER_F_NO_WAIT) || (d->mem->flags & STB_MEM_F_FROZEN);
	uint64_t start = stb_now_ns(), lease = 0, held_from = 0, held_ns = 0;
	unsigned st = STB_TASK_UNUSED;
	int rc;

	memset(capt, 0, sizeof(*capt));
	if (errlen)
		err[0] = '\0';
	if (lease_mode) {
		rc = stb_hold_acquire(p, id, deadline, &lease);
		if (rc == -ESRCH) {
			stb_say(err, errlen, "bthread %" PRIu64 " has finished", id);
			return rc;
		}
		if (rc != 0) {
			stb_say(err, errlen, "another tracer held the task for the whole timeout");
			return rc;
		}
		held_from = stb_now_ns();
		HELD();
	}
	for (unsigned spins = 0;; spins++) {
		if (lease_mode && spins) {
			if (!lease)
				held_from = stb_now_ns(); /* held again from here */
			rc = lease ? stb_hold_refresh(p, id, deadline, &lease)
				   : stb_hold_acquire(p, id, deadline, &lease);
			if (rc == -EBUSY) {
				stb_say(err, errlen,
					"another tracer held the task for the whole timeout");
				break;
			}
		} else {
			rc = 0;
		}
		if (rc != 0 || __atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) {
			stb_say(err, errlen, "bthread %" PRIu64 " has finished", id);
			rc = -ESRCH;
			break;
		}
		uint64_t w1 = __atomic_load_n(&p->word, __ATOMIC_ACQUIRE);
		struct stb_run_at at;
		st = task_state(d, p, id, w1, &at);
		capt->state = st;
		capt->seq = STB_ABI_SEQ(w1);
		switch (st) {
		case STB_TASK_READY:
		case STB_TASK_SUSPENDED:
			if (!lease_mode && (d->mem->flags & STB_MEM_F_FAULTS)) {
				stb_say(err, errlen,
					"no lease: this memory cannot be copied safely");
				rc = -EINVAL;
				break;
			}
			rc = copy_context(d, p, id, w1, lease, capt, err, errlen);
			break;
		case STB_TASK_RUNNING:
			if (no_wait && !(d->mem->flags & STB_MEM_F_FROZEN) && !d->capture) {
				rc = -EAGAIN;
				goto out; /* on a CPU now: not off-CPU */
			}
			if (!d->capture) {
				stb_say(err, errlen, "running: not captured (%s)",
					d->no_capture ? d->no_capture
						      : "no capture of running tasks here");
				rc = -ENOTSUP;
				break;
			}
			/* The capture copies the stack on the task's own thread (or from
			 * its registers): holding it meanwhile would only stop it at its
			 * gate if it tried to switch, and the capture would show that
			 * wait. The next attempt, if any, takes the lease again. */
			if (lease) {
				held_ns += stb_now_ns() - held_from;
				stb_hold_release(p, lease);
				lease = 0;
			}
			rc = d->capture->capture(d->capture->ctx, p, id, w1, &at, deadline, d->buf,
						 d->cap, capt, err, errlen);
			capt->state = st;
			break;
		case STB_TASK_CREATED:
		case STB_TASK_READY_NO_STACK:
			capt->mode = STB_TRACE_NO_STACK;
			rc = 0;
			break;
		case STB_TASK_UNUSED:
		case STB_TASK_DESTROYED:
			stb_say(err, errlen, "bthread %" PRIu64 " has finished", id);
			rc = -ESRCH;
			break;
		case STB_TASK_ABOUT_TO_RUN:
		case STB_TASK_SUSPENDING:
			rc = -EAGAIN; /* a switch is in progress */
			/* A core froze it there: its worker's registers are all there
			 * is (the capture says whether they are on its stack). */
			if ((d->mem->flags & STB_MEM_F_FROZEN) && d->capture) {
				rc = d->capture->capture(d->capture->ctx, p, id, w1, &at, deadline,
							 d->buf, d->cap, capt, err, errlen);
				capt->state = st;
				goto out;
			}
			break;
		default:
			if (st == STB_TASK_NSTATES && STB_ABI_STATE(w1) < STB_TASK_NSTATES)
				stb_say(err, errlen,
					"its table entry is inconsistent: a bthread's word says %s "
					"(only a worker's current may)",
					stb_state_name(STB_ABI_STATE(w1)));
			else
				stb_say(err, errlen,
					"its table entry is inconsistent: state %u is out of range",
					STB_ABI_STATE(w1));
			rc = -EPROTO;
			break;
		}
		if (rc != -EAGAIN)
			break;
		capt->retries++;
		if (no_wait && (spins >= 1 || (d->mem->flags & STB_MEM_F_FROZEN))) {
			if (d->mem->flags & STB_MEM_F_FROZEN) {
				stb_say(err, errlen, "the task was %s: no consistent context",
					stb_state_name(st));
				rc = -ETIMEDOUT;
			}
			break;
		}
		if (stb_now_ns() >= deadline) {
			stb_say(err, errlen,
				"the task did not settle within %" PRIu64 " ms (state %s)",
				(deadline - start + 500000) / 1000000, stb_state_name(st));
			rc = -ETIMEDOUT;
			break;
		}
		relax(spins);
	}
out:
	if (lease) {
		/* If the runtime broke our lease, the copy was validated anyway. */
		held_ns += stb_now_ns() - held_from;
		stb_hold_release(p, lease);
	}
	capt->lease_ns = held_ns;
	if (capt->mode == STB_TRACE_CONTEXT)
		capt->held_ns = held_ns;
	if (rc != 0)
		capt->mode = STB_TRACE_NO_STACK;
	return rc;
}

/* When job's trace must end if it starts at now. */
static uint64_t job_deadline(const struct stb_driver_job *j, uint64_t now)
{
	if (!j->timeout_ns || now + j->timeout_ns >= j->deadline)
		return j->deadline;
	return now + j->timeout_ns;
}

/* Takes job's lease and plans its copy into buf + *used (packed, 16-byte
 * aligned) when the task is ready or suspended and its stack fits; false
 * (nothing held) when it must be traced alone. */
static bool batch_plan(const struct stb_driver *d, struct stb_driver_job *j, uint64_t now,
		       size_t cap, size_t *used)
{
	memset(&j->capt, 0, sizeof(j->capt));
	if (stb_hold_try(j->p, now, job_deadline(j, now), &j->lease) != 0)
		return false;
	j->held_from = now;
	HELD();
	bool ok = false;
	if (__atomic_load_n(&j->p->id, __ATOMIC_ACQUIRE) == j->id) {
		j->w1 = __atomic_load_n(&j->p->word, __ATOMIC_ACQUIRE);
		unsigned st = STB_ABI_STATE(j->w1);
		size_t room = cap - *used;
		ok = (st == STB_TASK_READY || st == STB_TASK_SUSPENDED) &&
		     stb_hold_copy_plan(j->p, j->id, j->w1, j->lease, &d->workers, now,
					d->cap < cap ? d->cap : cap, &j->plan) == 0 &&
		     j->plan.len <= room;
	}
	if (!ok) {
		stb_hold_release(j->p, j->lease);
		j->batch_ns = 0;
		return false;
	}
	*used += (j->plan.len + 15u) & ~(size_t)15u;
	return true;
}

/* Validates a batched copy (got: whether the read got it whole) and gives
 * the lease back. */
static void batch_check(const struct stb_driver *d, struct stb_driver_job *j, void *bytes,
			bool got, uint64_t now)
{
	struct stb_capture *capt = &j->capt;
	int rc = stb_hold_copy_check(j->p, j->id, j->w1, &d->workers, &j->plan, bytes,
				     got ? 0 : -EFAULT, &capt->regs, &capt->copy);
	unsigned cut = rc == 0 ? cut_of(j->p, capt) : STB_CUT_NONE; /* still held */
	uint64_t held = now - j->held_from;
	stb_hold_release(j->p, j->lease);
	j->copied = rc == 0;
	if (!j->copied) {
		j->batch_ns = held;
		return;
	}
	capt->state = STB_ABI_STATE(j->w1);
	capt->seq = STB_ABI_SEQ(j->w1);
	capt->mode = STB_TRACE_CONTEXT;
	capt->cut = cut;
	capt->lease_ns = capt->held_ns = held;
	if (j->errlen)
		j->err[0] = '\0';
	j->rc = 0;
}

void stb_driver_copy_many(const struct stb_driver *d, struct stb_driver_job *jobs, unsigned n,
			  void *buf, size_t cap)
{
	for (unsigned i = 0; i < n; i++) {
		jobs[i].copied = false;
		jobs[i].batch_ns = 0;
	}
	/* Every batched copy is made under its task's lease: memory that can
	 * fault is as safe to read here as alone. */
	if (!(d->flags & STB_DRIVER_F_LEASE) || !d->mem->read_many || n < 2 ||
	    (d->mem->flags & STB_MEM_F_FROZEN))
		return;
	size_t used = 0;
	for (unsigned i = 0; i < n && used < cap;) {
		/* One read of up to STB_MEM_SEGS_MAX stacks: the leases are held
		 * for that one read only. One clock read for them: the leases end
		 * no later than they would by each its own, and each copy is
		 * validated by the word (hold.h). */
		struct stb_mem_seg segs[STB_MEM_SEGS_MAX];
		unsigned of[STB_MEM_SEGS_MAX], ns = 0;
		uint64_t now = stb_now_ns();
		for (; i < n && ns < STB_MEM_SEGS_MAX; i++) {
			struct stb_driver_job *j = &jobs[i];
			size_t at = used;
			if (!batch_plan(d, j, now, cap, &used))
				continue;
			segs[ns] = (struct stb_mem_seg){
			    .addr = j->plan.from, .dst = (char *)buf + at, .len = j->plan.len};
			of[ns++] = i;
		}
		unsigned got = ns ? d->mem->read_many(d->mem->ctx, segs, ns) : 0;
		now = stb_now_ns();
		for (unsigned k = 0; k < ns; k++)
			batch_check(d, &jobs[of[k]], segs[k].dst, k < got, now);
	}
}

void stb_driver_finish_many(const struct stb_driver *d, struct stb_driver_job *jobs, unsigned n,
			    stb_driver_done_fn done, void *arg)
{
	for (unsigned i = 0; i < n; i++)
		if (jobs[i].copied)
			done(arg, &jobs[i]);
	/* The others alone, each copied to the start of d->buf (after the
	 * copied ones are done with: they may be there). */
	for (unsigned i = 0; i < n; i++) {
		struct stb_driver_job *j = &jobs[i];
		if (j->copied)
			continue;
		j->rc = stb_driver_trace(d, j->p, j->id, job_deadline(j, stb_now_ns()), &j->capt,
					 j->err, j->errlen);
		j->capt.lease_ns += j->batch_ns;
		done(arg, j);
	}
}

void stb_driver_trace_many(const struct stb_driver *d, struct stb_driver_job *jobs, unsigned n,
			   stb_driver_done_fn done, void *arg)
{
	for (; n > STB_DRIVER_MANY_MAX; jobs += STB_DRIVER_MANY_MAX, n -= STB_DRIVER_MANY_MAX)
		stb_driver_trace_many(d, jobs, STB_DRIVER_MANY_MAX, done, arg);
	stb_driver_copy_many(d, jobs, n, d->buf, d->cap);
	stb_driver_finish_many(d, jobs, n, done, arg);
}

int stb_capture_unwind(struct stb_unw_proc *unw, struct stb_walkmemo *memo,
			const struct stb_capture *capt, struct stb_frame_sink *sink)
{
	if (capt->mode == STB_TRACE_NO_STACK)
		return 0;
	sink->first_exact = !(capt->regs.flags & STB_UNW_IP_IS_RETURN);
	int rc;
	if (capt->unwind) {
		rc = capt->unwind(capt->unwind_ctx, unw, capt, stb_frame_sink_depth(sink),
				  stb_frame_sink_add, sink);
	} else {
		/* Only the copy: the live stack has moved on since (a deeper stack
		 * than the copy ends the trace rather than mixing in newer frames). */
		rc = stb_walkmemo_walk(memo, unw, &capt->regs, &capt->copy, sink);
	}
	return rc < 0 ? rc : (int)sink->n;
}
