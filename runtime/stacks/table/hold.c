/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lease handling and validated stack copies for tracers (see hold.h and the
 * invariants in include/stb/abi.h). No runtime state is used: the loader links
 * this file too.
 */
#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <time.h>

#include "table/hold.h"
#include "util.h"


uint64_t stb_hold_lease(uint64_t deadline)
{
	static uint32_t ids;
	uint32_t id = __atomic_add_fetch(&ids, 1, __ATOMIC_RELAXED) & 0xffffu;
	if (id == 0)
		id = 1;
	return STB_ABI_LEASE_ENCODE(deadline, id);
}

int stb_hold_try(struct stb_abi_task *p, uint64_t now, uint64_t deadline, uint64_t *lease)
{
	uint64_t until = now + STB_HOLD_LEASE_NS;
	uint64_t word = stb_hold_lease(until < deadline ? until : deadline);
	__u64 cur = __atomic_load_n(&p->trace, __ATOMIC_ACQUIRE); /* the field's type: clang checks it */
	/* A lease past its deadline protects nobody -- its holder checks it
	 * before it relies on it, and the task's gate breaks it too -- and one
	 * whose tracer died (a loader killed mid-run) would keep every later
	 * tracer out of a task that never reaches its gate again: taken over. */
	if (cur && now < STB_ABI_LEASE_DEADLINE(cur))
		return -EBUSY;
	if (!__atomic_compare_exchange_n(&p->trace, &cur, word, false, __ATOMIC_SEQ_CST,
					 __ATOMIC_RELAXED))
		return -EBUSY;
	*lease = word;
	return 0;
}

int stb_hold_acquire(struct stb_abi_task *p, uint64_t id, uint64_t deadline, uint64_t *lease)
{
	for (unsigned spins = 0;; spins++) {
		if (stb_hold_try(p, stb_now_ns(), deadline, lease) == 0)
			return 0;
		if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id)
			return -ESRCH;
		if (stb_now_ns() >= deadline)
			return -EBUSY;
		if (spins < 100)
			__builtin_ia32_pause();
		else
			sched_yield();
	}
}

int stb_hold_refresh(struct stb_abi_task *p, uint64_t id, uint64_t deadline, uint64_t *lease)
{
	uint64_t cur = __atomic_load_n(&p->trace, __ATOMIC_ACQUIRE);
	uint64_t ends = STB_ABI_LEASE_DEADLINE(*lease);
	if (cur == *lease && stb_now_ns() + STB_HOLD_MARGIN_NS < ends)
		return 0;
	stb_hold_release(p, *lease);
	return stb_hold_acquire(p, id, deadline, lease);
}

int stb_hold_release(struct stb_abi_task *p, uint64_t lease)
{
	__u64 expected = lease;
	if (__atomic_compare_exchange_n(&p->trace, &expected, 0, false, __ATOMIC_RELEASE,
					__ATOMIC_RELAXED))
		return 0;
	return -ETIMEDOUT;
}

int stb_hold_copy_plan(struct stb_abi_task *p, uint64_t id, uint64_t w1, uint64_t lease,
		       const struct stb_tview_wsrc *ws, uint64_t now, size_t cap,
		       struct stb_hold_plan *pl)
{
	/* While our lease holds, the task cannot pass a gate: the fields below
	 * are consistent and its stack stays mapped (docs/abi.md). */
	uint64_t ends = STB_ABI_LEASE_DEADLINE(lease);
	if (lease && (__atomic_load_n(&p->trace, __ATOMIC_ACQUIRE) != lease ||
		      now + STB_HOLD_MARGIN_NS >= ends))
		return -ETIMEDOUT;
	/* Named by a worker: running (it passed its gate before our lease) or
	 * on its way in; its saved context is not what it runs on. */
	if (stb_tview_named_now(ws, id, NULL) != STB_TASK_UNUSED)
		return -EAGAIN;
	uint64_t sp = __atomic_load_n(&p->sp, __ATOMIC_RELAXED);
	uint64_t ip = __atomic_load_n(&p->ip, __ATOMIC_RELAXED);
	uint64_t bp = __atomic_load_n(&p->bp, __ATOMIC_RELAXED);
	uint64_t lo = __atomic_load_n(&p->stack_lo, __ATOMIC_RELAXED);
	uint64_t hi = __atomic_load_n(&p->stack_hi, __ATOMIC_RELAXED);
	if (sp < STB_ABI_SWITCH_FRAME || sp - STB_ABI_SWITCH_FRAME < lo || sp > hi || lo >= hi) {
		/* Read while it moved, or the entry itself is wrong: tell which. */
		__asm__ volatile("" ::: "memory");
		uint64_t w2 = __atomic_load_n(&p->word, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&p->id, __ATOMIC_RELAXED) != id)
			return -ESRCH;
		return w2 == w1 ? -EPROTO : -EAGAIN;
	}
	pl->ip = ip;
	pl->sp = sp;
	pl->bp = bp;
	pl->from = sp - STB_ABI_SWITCH_FRAME;
	pl->len = hi - pl->from < cap ? (size_t)(hi - pl->from) : cap;
	return 0;
}

int stb_hold_copy_check(struct stb_abi_task *p, uint64_t id, uint64_t w1,
			const struct stb_tview_wsrc *ws, const struct stb_hold_plan *pl, void *buf,
			int read_rc, struct stb_regs *regs, struct stb_stack_copy *copy)
{
	/* x86 does not reorder loads; the read is opaque to the compiler, and
	 * the barrier keeps the workers' currents and the second read of word
	 * after the copy. A run that changed a byte the copy read is named by
	 * its worker before that byte changed; if it ended since, its word left
	 * w1's seq before the worker named another task (abi.h): one of the
	 * two checks below sees it. */
	__asm__ volatile("" ::: "memory");
	if (stb_tview_named_now(ws, id, NULL) != STB_TASK_UNUSED)
		return __atomic_load_n(&p->id, __ATOMIC_RELAXED) != id ? -ESRCH : -EAGAIN;
	uint64_t w2 = __atomic_load_n(&p->word, __ATOMIC_SEQ_CST);
	unsigned st = STB_ABI_STATE(w2);
	if (__atomic_load_n(&p->id, __ATOMIC_RELAXED) != id)
		return -ESRCH;
	if (STB_ABI_SEQ(w2) != STB_ABI_SEQ(w1) || (st != STB_TASK_READY && st != STB_TASK_SUSPENDED))
		return -EAGAIN;
	if (read_rc != 0)
		return read_rc;
	copy->addr = pl->from;
	copy->bytes = buf;
	copy->len = pl->len;
	stb_unw_regs_from_switch(regs, pl->ip, pl->sp, pl->bp, copy);
	return 0;
}

int stb_hold_copy_context(struct stb_abi_task *p, uint64_t id, uint64_t w1, uint64_t lease,
			  const struct stb_tview_wsrc *ws, stb_hold_read_fn read, void *ctx,
			  void *buf, size_t cap, struct stb_regs *regs, struct stb_stack_copy *copy)
{
	struct stb_hold_plan pl;
	int rc = stb_hold_copy_plan(p, id, w1, lease, ws, lease ? stb_now_ns() : 0, cap, &pl);
	if (rc != 0)
		return rc;
	rc = read(ctx, pl.from, buf, pl.len);
	return stb_hold_copy_check(p, id, w1, ws, &pl, buf, rc, regs, copy);
}
