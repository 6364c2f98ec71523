/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_mutex_t and bthread_cond_t on top of butexes. Mutex value: 0 free,
 * 1 locked, 2 locked with (possible) waiters. The condition variable is a
 * sequence butex that waiters sleep on and signal/broadcast bump.
 */
#include "internal.h"

static struct stb_butex *stb_butex_from(void *value)
{
	return (struct stb_butex *)((char *)value - offsetof(struct stb_butex, value));
}

int bthread_mutex_init(bthread_mutex_t *m, const bthread_mutexattr_t *attr)
{
	(void)attr;
	if (!m)
		return EINVAL;
	struct stb_butex *b = stb_butex_new();
	if (!b)
		return ENOMEM;
	m->butex = (unsigned *)&b->value;
	m->reserved = NULL;
	return 0;
}

int bthread_mutex_destroy(bthread_mutex_t *m)
{
	if (!m || !m->butex)
		return EINVAL;
	stb_butex_free(stb_butex_from(m->butex));
	m->butex = NULL;
	return 0;
}

int bthread_mutex_trylock(bthread_mutex_t *m)
{
	if (!m || !m->butex)
		return EINVAL;
	unsigned z = 0;
	return __atomic_compare_exchange_n(m->butex, &z, 1, false, __ATOMIC_ACQUIRE,
					   __ATOMIC_RELAXED) ? 0 : EBUSY;
}

/* Takes the mutex, marking it contended; deadline 0 waits forever. */
static int stb_mutex_lock_contended(bthread_mutex_t *m, uint64_t deadline)
{
	struct stb_butex *b = stb_butex_from(m->butex);
	const struct stb_wait why = {.word = STB_ABI_WAIT_WORD(STB_WAIT_MUTEX, 0, 0, 0),
				     .object = (uint64_t)(uintptr_t)m};
	while (__atomic_exchange_n(m->butex, 2, __ATOMIC_ACQUIRE) != 0) {
		int rc = stb_butex_wait_mono(b, 2, deadline, &why);
		if (rc == ETIMEDOUT || rc == ENOMEM)
			return rc;
	}
	return 0;
}

int bthread_mutex_timedlock(bthread_mutex_t *m, const struct timespec *abstime)
{
	if (!m || !m->butex)
		return EINVAL;
	unsigned z = 0;
	if (__atomic_compare_exchange_n(m->butex, &z, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return 0;
	uint64_t deadline = stb_abstime_to_mono(abstime);
	return stb_mutex_lock_contended(m, deadline);
}

int bthread_mutex_lock(bthread_mutex_t *m)
{
	return bthread_mutex_timedlock(m, NULL);
}

int bthread_mutex_unlock(bthread_mutex_t *m)
{
	if (!m || !m->butex)
		return EINVAL;
	if (__atomic_exchange_n(m->butex, 0, __ATOMIC_RELEASE) == 2)
		stb_butex_wake(stb_butex_from(m->butex), false);
	return 0;
}

int bthread_cond_init(bthread_cond_t *c, const bthread_condattr_t *attr)
{
	(void)attr;
	if (!c)
		return EINVAL;
	struct stb_butex *b = stb_butex_new();
	if (!b)
		return ENOMEM;
	c->seq = &b->value;
	c->m = NULL;
	return 0;
}

int bthread_cond_destroy(bthread_cond_t *c)
{
	if (!c || !c->seq)
		return EINVAL;
	stb_butex_free(stb_butex_from(c->seq));
	c->seq = NULL;
	return 0;
}

int bthread_cond_timedwait(bthread_cond_t *c, bthread_mutex_t *m, const struct timespec *abstime)
{
	if (!c || !c->seq || !m || !m->butex)
		return EINVAL;
	uint64_t deadline = stb_abstime_to_mono(abstime);
	int seq = __atomic_load_n(c->seq, __ATOMIC_ACQUIRE);
	bthread_mutex_unlock(m);
	const struct stb_wait why = {.word = STB_ABI_WAIT_WORD(STB_WAIT_COND, 0, 0, 0),
				     .object = (uint64_t)(uintptr_t)c,
				     .extra = (uint64_t)(uintptr_t)m};
	int rc = stb_butex_wait_mono(stb_butex_from(c->seq), seq, deadline, &why);
	/* Other waiters may sleep on the mutex: relock as contended. */
	stb_mutex_lock_contended(m, 0);
	return rc == ETIMEDOUT ? ETIMEDOUT : 0;
}

int bthread_cond_wait(bthread_cond_t *c, bthread_mutex_t *m)
{
	return bthread_cond_timedwait(c, m, NULL);
}

int bthread_cond_signal(bthread_cond_t *c)
{
	if (!c || !c->seq)
		return EINVAL;
	__atomic_fetch_add(c->seq, 1, __ATOMIC_RELEASE);
	stb_butex_wake(stb_butex_from(c->seq), false);
	return 0;
}

int bthread_cond_broadcast(bthread_cond_t *c)
{
	if (!c || !c->seq)
		return EINVAL;
	__atomic_fetch_add(c->seq, 1, __ATOMIC_RELEASE);
	stb_butex_wake(stb_butex_from(c->seq), true);
	return 0;
}
