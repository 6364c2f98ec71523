/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_barrier_t: count waiters meet, then all go on. The last arrival
 * of a cycle bumps the cycle butex and wakes the others.
 */
#include "sync.h"

int bthread_barrier_init(bthread_barrier_t *barrier, const bthread_barrierattr_t *attr,
			 unsigned count)
{
	(void)attr;
	if (!barrier || count == 0)
		return EINVAL;
	struct stb_butex *b = stb_butex_new();
	if (!b)
		return ENOMEM;
	barrier->count = count;
	barrier->arrived = 0;
	barrier->lock = 0;
	barrier->gen = &b->value;
	return 0;
}

int bthread_barrier_destroy(bthread_barrier_t *barrier)
{
	if (!barrier || !barrier->gen)
		return EINVAL;
	stb_butex_free(stb_butex_of_value(barrier->gen));
	barrier->gen = NULL;
	return 0;
}

int bthread_barrier_wait(bthread_barrier_t *barrier)
{
	if (!barrier || !barrier->gen)
		return EINVAL;
	struct stb_lock *l = stb_lock_at(&barrier->lock);
	struct stb_butex *b = stb_butex_of_value(barrier->gen);
	stb_lock(l);
	if (++barrier->arrived == barrier->count) {
		barrier->arrived = 0;
		__atomic_fetch_add(barrier->gen, 1, __ATOMIC_RELEASE);
		stb_unlock(l);
		stb_butex_wake(b, true);
		return BTHREAD_BARRIER_SERIAL_THREAD;
	}
	const int gen = __atomic_load_n(barrier->gen, __ATOMIC_RELAXED);
	stb_unlock(l);
	const struct stb_wait why = stb_wait_make(STB_WAIT_BARRIER, barrier, NULL);
	/* Only the end of the cycle ends the wait (not a stop, not a spurious wake). */
	while (__atomic_load_n(barrier->gen, __ATOMIC_ACQUIRE) == gen)
		stb_butex_wait_mono(b, gen, 0, &why);
	return 0;
}
