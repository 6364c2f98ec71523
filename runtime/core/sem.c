/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_sem_t: a counting semaphore whose count is the value of a butex
 * (bRPC's layout). A waiter that finds 0 sleeps on the butex until a post
 * changes it; posts wake as many waiters as they add.
 */
#include "sync.h"

int bthread_sem_init(bthread_sem_t *sem, unsigned value)
{
	if (!sem)
		return EINVAL;
	struct stb_butex *b = stb_butex_new();
	if (!b)
		return ENOMEM;
	__atomic_store_n(&b->value, (int)value, __ATOMIC_RELAXED);
	sem->butex = (unsigned *)&b->value;
	sem->enable_csite = true;
	return 0;
}

int bthread_sem_disable_csite(bthread_sem_t *sem)
{
	if (!sem)
		return EINVAL;
	sem->enable_csite = false;
	return 0;
}

int bthread_sem_destroy(bthread_sem_t *sem)
{
	if (!sem || !sem->butex)
		return EINVAL;
	stb_butex_free(stb_butex_of_value(sem->butex));
	sem->butex = NULL;
	return 0;
}

/* Takes one unit if the count is positive. */
static bool sem_take(bthread_sem_t *sem)
{
	unsigned v = __atomic_load_n(sem->butex, __ATOMIC_RELAXED);
	while (v != 0) {
		if (__atomic_compare_exchange_n(sem->butex, &v, v - 1, true, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return true;
	}
	return false;
}

int bthread_sem_trywait(bthread_sem_t *sem)
{
	if (!sem || !sem->butex)
		return EINVAL;
	return sem_take(sem) ? 0 : EAGAIN;
}

int bthread_sem_timedwait(bthread_sem_t *sem, const struct timespec *abstime)
{
	if (!sem || !sem->butex)
		return EINVAL;
	if (sem_take(sem))
		return 0;
	uint64_t deadline = stb_abstime_to_mono(abstime);
	const struct stb_wait why = stb_wait_make(STB_WAIT_SEM, sem, NULL);
	struct stb_butex *b = stb_butex_of_value(sem->butex);
	for (;;) {
		if (sem_take(sem))
			return 0;
		/* EWOULDBLOCK: a post came first; EINTR (stop): bRPC waits on. */
		int rc = stb_butex_wait_mono(b, 0, deadline, &why);
		if (rc == ETIMEDOUT || rc == ENOMEM)
			return rc;
	}
}

int bthread_sem_wait(bthread_sem_t *sem)
{
	return bthread_sem_timedwait(sem, NULL);
}

int bthread_sem_post_n(bthread_sem_t *sem, size_t n)
{
	if (!sem || !sem->butex || n > (size_t)INT32_MAX)
		return EINVAL;
	if (n == 0)
		return 0; /* as bRPC: nothing to add */
	__atomic_fetch_add(sem->butex, (unsigned)n, __ATOMIC_RELEASE);
	struct stb_butex *b = stb_butex_of_value(sem->butex);
	for (size_t i = 0; i < n; i++)
		if (stb_butex_wake(b, false) == 0)
			break;
	return 0;
}

int bthread_sem_post(bthread_sem_t *sem)
{
	return bthread_sem_post_n(sem, 1);
}
