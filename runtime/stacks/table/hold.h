/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tracer's side of the STB gate, shared by the in-process tracer and
 * stb-bpf-loader: taking and releasing a task's lease in its table entry and
 * copying a ready/suspended task's stack with the seqlock-style validation
 * described in include/stb/abi.h. Works on a table entry mapped in this
 * process (the own table, or a target's table mapped by the loader).
 */
#ifndef STB_RUNTIME_STACKS_TABLE_HOLD_H
#define STB_RUNTIME_STACKS_TABLE_HOLD_H

#include <stddef.h>
#include <stdint.h>

#include "stb/abi.h"
#include "table/tview.h"
#include "unwind/unwind.h"

/* Copies len bytes at target address addr into dst. Returns 0 or -errno. */
typedef int (*stb_hold_read_fn)(void *ctx, uint64_t addr, void *dst, size_t len);

/* Do not read fields or copy a stack when the lease ends sooner than this. */
#define STB_HOLD_MARGIN_NS 1000000u

/* A lease lasts this long; a tracer renews it between attempts. A tracer that
 * is preempted or dies therefore holds a task for at most this long. */
#define STB_HOLD_LEASE_NS 5000000u

/* A lease word (abi.h) for a hold that must end by deadline (CLOCK_MONOTONIC ns). */
uint64_t stb_hold_lease(uint64_t deadline);

/*
 * Takes task entry p's lease for bthread id, waiting until `deadline` while
 * another tracer holds it. The lease itself expires STB_HOLD_LEASE_NS from
 * now (or at deadline if sooner). Returns 0 (*lease set), -ESRCH when the
 * entry no longer holds id, -EBUSY when the deadline passed first.
 * Thread-safe; may spin/yield.
 */
int stb_hold_acquire(struct stb_abi_task *p, uint64_t id, uint64_t deadline, uint64_t *lease);

/* One attempt of stb_hold_acquire, the clock read at now: 0 (*lease set) or
 * -EBUSY when the entry is leased already (a lease whose deadline has passed
 * is taken over, as the task's gate would break it). Thread-safe; never
 * blocks. */
int stb_hold_try(struct stb_abi_task *p, uint64_t now, uint64_t deadline, uint64_t *lease);

/*
 * Makes sure *lease is still held with at least STB_HOLD_MARGIN_NS left,
 * taking a fresh one otherwise (the runtime may have broken an expired one).
 * Returns 0 or stb_hold_acquire's errors.
 */
int stb_hold_refresh(struct stb_abi_task *p, uint64_t id, uint64_t deadline, uint64_t *lease);

/* Gives the lease back. Returns 0, or -ETIMEDOUT if the runtime broke it. */
int stb_hold_release(struct stb_abi_task *p, uint64_t lease);

/*
 * With the lease held and word w1 read in state READY or SUSPENDED: checks
 * that no worker of ws names the task (abi.h: it would be running), copies the
 * stack from the saved sp (minus the switch frame) up to stack_hi, at most cap
 * bytes, into buf with read(), then checks that the task did not run meanwhile
 * (no worker names it, and its word is still w1's state and seq).
 * On success fills regs (stb_unw_regs_from_switch) and copy (addr/len; bytes =
 * buf) and returns 0. -EAGAIN: the task moved, read again; -ESRCH: the entry
 * holds another task now; -ETIMEDOUT: the lease is gone or about to expire;
 * -EPROTO: the entry is inconsistent although it did not change (sp outside
 * [stack_lo, stack_hi], or an empty stack): nothing was read;
 * other -errno from read(). lease 0: no lease is held (only for readers whose
 * read() cannot fault, e.g. process_vm_readv): the copy is validated all the
 * same, but the task may run meanwhile, so -EAGAIN is more frequent.
 */
int stb_hold_copy_context(struct stb_abi_task *p, uint64_t id, uint64_t w1, uint64_t lease,
			  const struct stb_tview_wsrc *ws, stb_hold_read_fn read, void *ctx,
			  void *buf, size_t cap, struct stb_regs *regs, struct stb_stack_copy *copy);

/*
 * stb_hold_copy_context in two halves, for a reader that copies many stacks
 * with one read: plan() reads and checks the saved registers and stack
 * bounds, the lease's time left as of now (its errors as above; nothing is
 * read) and says what to copy
 * (from, len <= cap); the caller copies [from, from + len) into buf; check()
 * then validates the copy as above, read_rc being the copy's 0 or -errno.
 */
struct stb_hold_plan {
	uint64_t ip, sp, bp; /* as saved at the switch */
	uint64_t from;       /* what to copy: [from, from + len) */
	size_t len;
};

int stb_hold_copy_plan(struct stb_abi_task *p, uint64_t id, uint64_t w1, uint64_t lease,
		       const struct stb_tview_wsrc *ws, uint64_t now, size_t cap,
		       struct stb_hold_plan *pl);
int stb_hold_copy_check(struct stb_abi_task *p, uint64_t id, uint64_t w1,
			const struct stb_tview_wsrc *ws, const struct stb_hold_plan *pl, void *buf,
			int read_rc, struct stb_regs *regs, struct stb_stack_copy *copy);

#endif /* STB_RUNTIME_STACKS_TABLE_HOLD_H */
