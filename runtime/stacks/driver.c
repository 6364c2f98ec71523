/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The trace driver (driver.h): one state machine over the abi.h task entry
 * for every tracer and backend.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "hold.h"
#include "stb/stb.h"
#include "util.h"

static void say(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

static void relax(unsigned spins)
{
	if (spins < 100)
		__builtin_ia32_pause();
	else
		sched_yield();
}

/* The copy of a ready or suspended task's saved context. */
static int copy_context(const struct stb_driver *d, struct stb_abi_task *p, uint64_t id,
			uint64_t w1, uint64_t lease, struct stb_snapshot *snap, char *err,
			size_t errlen)
{
	int rc = stb_hold_copy_context(p, id, w1, lease, d->mem->read, d->mem->ctx, d->buf, d->cap,
				       &snap->regs, &snap->copy);
	if (rc == 0 && (d->mem->flags & STB_MEM_F_FROZEN)) {
		/* abi.h: the switch frame ends at sp and its ret is the published
		 * ip. A memory image without the stack (not dumped, or zeros where
		 * a dumper could not read) fails this. */
		struct stb_abi_switch_frame f = {0};
		uint64_t ip = __atomic_load_n(&p->ip, __ATOMIC_RELAXED);
		if (snap->copy.len >= sizeof(f))
			memcpy(&f, snap->copy.bytes, sizeof(f));
		if (f.ret != ip) {
			rc = -ENODATA;
			say(err, errlen,
			    "its stack is not in the core (no return address 0x%" PRIx64
			    " at sp 0x%" PRIx64 "): see docs/postmortem.md",
			    ip, snap->copy.addr + STB_ABI_SWITCH_FRAME);
			return rc;
		}
	}
	if (rc == 0) {
		snap->mode = STB_TRACE_CONTEXT;
		return 0;
	}
	if (rc == -EAGAIN || rc == -ETIMEDOUT)
		return -EAGAIN; /* moved, or our lease is about to end: again */
	if (rc == -ESRCH && __atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) {
		say(err, errlen,
		    "bthread %" PRIu64 " finished during the trace (its slot was "
		    "reused)",
		    id);
		return -ESRCH;
	}
	if (d->mem->alive && !d->mem->alive(d->mem->ctx)) {
		snap->target_gone = true;
		say(err, errlen, "the target exited");
		return -ESRCH;
	}
	if (rc == -EPROTO) {
		say(err, errlen,
		    "its table entry is inconsistent: saved sp 0x%" PRIx64
		    " is outside its stack [0x%" PRIx64 ", 0x%" PRIx64 ")",
		    (uint64_t)__atomic_load_n(&p->sp, __ATOMIC_RELAXED),
		    (uint64_t)__atomic_load_n(&p->stack_lo, __ATOMIC_RELAXED),
		    (uint64_t)__atomic_load_n(&p->stack_hi, __ATOMIC_RELAXED));
		return rc;
	}
	say(err, errlen, "cannot read the stack: %s", strerror(-rc));
	return rc;
}

int stb_driver_trace(const struct stb_driver *d, struct stb_abi_task *p, uint64_t id,
		     uint64_t deadline, struct stb_snapshot *snap, char *err, size_t errlen)
{
	bool lease_mode = (d->flags & STB_DRIVER_F_LEASE) && !(d->mem->flags & STB_MEM_F_FROZEN);
	bool no_wait = (d->flags & STB_DRIVER_F_NO_WAIT) || (d->mem->flags & STB_MEM_F_FROZEN);
	uint64_t start = stb_now_ns(), lease = 0, held_from = 0, held_ns = 0;
	unsigned st = STB_TASK_UNUSED;
	int rc;

	memset(snap, 0, sizeof(*snap));
	if (errlen)
		err[0] = '\0';
	if (lease_mode) {
		rc = stb_hold_acquire(p, id, deadline, &lease);
		if (rc == -ESRCH) {
			say(err, errlen, "bthread %" PRIu64 " has finished", id);
			return rc;
		}
		if (rc != 0) {
			say(err, errlen, "another tracer held the task for the whole timeout");
			return rc;
		}
		held_from = stb_now_ns();
		if (d->on_hold)
			d->on_hold(d->on_hold_arg);
	}
	for (unsigned spins = 0;; spins++) {
		if (lease_mode && spins) {
			if (!lease)
				held_from = stb_now_ns(); /* held again from here */
			rc = lease ? stb_hold_refresh(p, id, deadline, &lease)
				   : stb_hold_acquire(p, id, deadline, &lease);
			if (rc == -EBUSY) {
				say(err, errlen,
				    "another tracer held the task for the whole timeout");
				break;
			}
		} else {
			rc = 0;
		}
		if (rc != 0 || __atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) {
			say(err, errlen, "bthread %" PRIu64 " has finished", id);
			rc = -ESRCH;
			break;
		}
		uint64_t w1 = __atomic_load_n(&p->word, __ATOMIC_ACQUIRE);
		st = STB_ABI_STATE(w1);
		snap->state = st;
		snap->seq = STB_ABI_SEQ(w1);
		switch (st) {
		case STB_TASK_READY:
		case STB_TASK_SUSPENDED:
			if (!lease_mode && (d->mem->flags & STB_MEM_F_FAULTS)) {
				say(err, errlen, "no lease: this memory cannot be copied safely");
				rc = -EINVAL;
				break;
			}
			rc = copy_context(d, p, id, w1, lease, snap, err, errlen);
			break;
		case STB_TASK_RUNNING:
			if (no_wait && !(d->mem->flags & STB_MEM_F_FROZEN) && !d->capture) {
				rc = -EAGAIN;
				goto out; /* on a CPU now: not off-CPU */
			}
			if (!d->capture) {
				say(err, errlen, "running: not captured (%s)",
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
			rc = d->capture->capture(d->capture->ctx, p, id, w1, deadline, d->buf,
						 d->cap, snap, err, errlen);
			snap->state = st;
			break;
		case STB_TASK_CREATED:
		case STB_TASK_READY_NO_STACK:
			snap->mode = STB_TRACE_NO_STACK;
			rc = 0;
			break;
		case STB_TASK_UNUSED:
		case STB_TASK_DESTROYED:
			say(err, errlen, "bthread %" PRIu64 " has finished", id);
			rc = -ESRCH;
			break;
		case STB_TASK_ABOUT_TO_RUN:
		case STB_TASK_SUSPENDING:
			rc = -EAGAIN; /* a switch is in progress */
			/* A core froze it there: its worker's registers are all there
			 * is (the capture says whether they are on its stack). */
			if ((d->mem->flags & STB_MEM_F_FROZEN) && d->capture) {
				rc = d->capture->capture(d->capture->ctx, p, id, w1, deadline,
							 d->buf, d->cap, snap, err, errlen);
				snap->state = st;
				goto out;
			}
			break;
		default:
			say(err, errlen,
			    "its table entry is inconsistent: state %u is out of range", st);
			rc = -EPROTO;
			break;
		}
		if (rc != -EAGAIN)
			break;
		snap->retries++;
		if (no_wait && (spins >= 1 || (d->mem->flags & STB_MEM_F_FROZEN))) {
			if (d->mem->flags & STB_MEM_F_FROZEN) {
				say(err, errlen, "the task was %s: no consistent context",
				    stb_state_name(st));
				rc = -ETIMEDOUT;
			}
			break;
		}
		if (stb_now_ns() >= deadline) {
			say(err, errlen, "the task did not settle within %" PRIu64 " ms (state %s)",
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
	snap->lease_ns = held_ns;
	if (snap->mode == STB_TRACE_CONTEXT)
		snap->held_ns = held_ns;
	if (rc != 0)
		snap->mode = STB_TRACE_NO_STACK;
	return rc;
}

int stb_snapshot_unwind(struct stb_unw_proc *unw, const struct stb_snapshot *snap,
			struct stb_frame_sink *sink)
{
	if (snap->mode == STB_TRACE_NO_STACK)
		return 0;
	unsigned depth = stb_frame_sink_depth(sink);
	sink->first_exact = !(snap->regs.flags & STB_UNW_IP_IS_RETURN);
	int rc;
	if (snap->unwind) {
		rc = snap->unwind(snap->unwind_ctx, unw, snap, depth, stb_frame_sink_add, sink);
	} else {
		/* Only the copy: the live stack has moved on since (a deeper stack
		 * than the copy ends the trace rather than mixing in newer frames). */
		struct stb_regs regs = snap->regs;
		regs.flags |= STB_UNW_COPY_ONLY;
		rc = stb_unw_walk(unw, &regs, &snap->copy, sink->skip, depth, stb_frame_sink_add,
				  sink);
	}
	return rc < 0 ? rc : (int)sink->n;
}
