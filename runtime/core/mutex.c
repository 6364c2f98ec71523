/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_mutex_t, its attributes and bthread_cond_t on top of butexes, and
 * the owner word every owned primitive records. Mutex value (bRPC's): 0 free,
 * 1 locked, 0x101 locked with (possible) waiters. The condition variable is a
 * sequence butex that waiters sleep on and signal/broadcast bump.
 */
#include "sync.h"

/* bRPC's lock word values (bthread_mutex_t.butex). */
#define STB_MUTEX_LOCKED 1u
#define STB_MUTEX_CONTENDED 0x101u

int bthread_mutexattr_init(bthread_mutexattr_t *attr)
{
	if (!attr)
		return EINVAL;
	attr->enable_csite = true;
	return 0;
}

int bthread_mutexattr_disable_csite(bthread_mutexattr_t *attr)
{
	if (!attr)
		return EINVAL;
	attr->enable_csite = false;
	return 0;
}

int bthread_mutexattr_destroy(bthread_mutexattr_t *attr)
{
	return attr ? 0 : EINVAL;
}

int bthread_mutex_init(bthread_mutex_t *m, const bthread_mutexattr_t *attr)
{
	if (!m)
		return EINVAL;
	struct stb_butex *b = stb_butex_new();
	if (!b)
		return ENOMEM;
	m->butex = (unsigned *)&b->value;
	m->csite.duration_ns = 0;
	m->csite.sampling_range = 0;
	m->enable_csite = attr ? attr->enable_csite : true;
	__atomic_store_n(&m->owner.word, 0, __ATOMIC_RELAXED);
	return 0;
}

int bthread_mutex_destroy(bthread_mutex_t *m)
{
	if (!m || !m->butex)
		return EINVAL;
	stb_butex_free(stb_butex_of_value(m->butex));
	m->butex = NULL;
	return 0;
}

/* The one extra store of the fast path: who holds m now. */
static inline void mutex_set_owner(bthread_mutex_t *m)
{
	__atomic_store_n(&m->owner.word, stb_owner_self(), __ATOMIC_RELAXED);
}

int bthread_mutex_trylock(bthread_mutex_t *m)
{
	if (!m || !m->butex)
		return EINVAL;
	unsigned z = 0;
	if (!__atomic_compare_exchange_n(m->butex, &z, STB_MUTEX_LOCKED, false, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED))
		return EBUSY;
	mutex_set_owner(m);
	return 0;
}

/*
 * Takes the mutex, marking it contended (its unlock then wakes a waiter);
 * deadline 0 waits forever. A stop (EINTR) does not end the wait, as in bRPC.
 */
static int mutex_lock_contended(bthread_mutex_t *m, uint64_t deadline)
{
	struct stb_butex *b = stb_butex_of_value(m->butex);
	while (__atomic_exchange_n(m->butex, STB_MUTEX_CONTENDED, __ATOMIC_ACQUIRE) &
	       STB_MUTEX_LOCKED) {
		const struct stb_wait why = stb_wait_make(STB_WAIT_MUTEX, m, &m->owner.word);
		int rc = stb_butex_wait_mono(b, (int)STB_MUTEX_CONTENDED, deadline, &why);
		if (rc == ETIMEDOUT || rc == ENOMEM)
			return rc;
	}
	mutex_set_owner(m);
	return 0;
}

/* Both entry points inline this: no call through the PLT on the fast path. */
static inline int mutex_timedlock(bthread_mutex_t *m, const struct timespec *abstime)
{
	if (!m || !m->butex)
		return EINVAL;
	unsigned z = 0;
	if (STB_LIKELY(__atomic_compare_exchange_n(m->butex, &z, STB_MUTEX_LOCKED, false,
						   __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))) {
		mutex_set_owner(m);
		return 0;
	}
	return mutex_lock_contended(m, stb_abstime_to_mono(abstime));
}

int bthread_mutex_timedlock(bthread_mutex_t *m, const struct timespec *abstime)
{
	return mutex_timedlock(m, abstime);
}

int bthread_mutex_lock(bthread_mutex_t *m)
{
	return mutex_timedlock(m, NULL);
}

int bthread_mutex_unlock(bthread_mutex_t *m)
{
	if (!m || !m->butex)
		return EINVAL;
	__atomic_store_n(&m->owner.word, 0, __ATOMIC_RELAXED);
	if (__atomic_exchange_n(m->butex, 0, __ATOMIC_RELEASE) != STB_MUTEX_LOCKED)
		stb_butex_wake(stb_butex_of_value(m->butex), false);
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
	stb_butex_free(stb_butex_of_value(c->seq));
	c->seq = NULL;
	return 0;
}

int bthread_cond_timedwait(bthread_cond_t *c, bthread_mutex_t *m, const struct timespec *abstime)
{
	if (!c || !c->seq || !m || !m->butex)
		return EINVAL;
	/* The first wait binds the cond to m (as bRPC's): another mutex is a bug. */
	bthread_mutex_t *bound = __atomic_load_n(&c->m, __ATOMIC_RELAXED);
	if (bound == NULL)
		__atomic_compare_exchange_n(&c->m, &bound, m, false, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED); /* on failure bound = the winner's */
	if (bound != NULL && bound != m)
		return EINVAL;
	uint64_t deadline = stb_abstime_to_mono(abstime);
	int seq = __atomic_load_n(c->seq, __ATOMIC_ACQUIRE);
	bthread_mutex_unlock(m);
	const struct stb_wait why = {.word = STB_ABI_WAIT_WORD(STB_WAIT_COND, 0, 0, 0),
				     .object = (uint64_t)(uintptr_t)c,
				     .extra = (uint64_t)(uintptr_t)m};
	int rc = stb_butex_wait_mono(stb_butex_of_value(c->seq), seq, deadline, &why);
	/* Other waiters may sleep on the mutex: relock as contended. */
	mutex_lock_contended(m, 0);
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
	stb_butex_wake(stb_butex_of_value(c->seq), false);
	return 0;
}

int bthread_cond_broadcast(bthread_cond_t *c)
{
	if (!c || !c->seq)
		return EINVAL;
	__atomic_fetch_add(c->seq, 1, __ATOMIC_RELEASE);
	stb_butex_wake(stb_butex_of_value(c->seq), true);
	return 0;
}
