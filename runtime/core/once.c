/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_once, and the parking butexes of primitives that have no butex of
 * their own (a once control is a plain zero-initialized word). State: 0 not
 * run, 1 running, 2 running with waiters, 3 done. Waiters park on the butex
 * their control's address hashes to.
 */
#include <stdlib.h>

#include "sync.h"

#define ONCE_NOT_RUN 0u
#define ONCE_RUNNING 1u
#define ONCE_WAITERS 2u
#define ONCE_DONE 3u

#define PARK_BUCKETS 64u

static struct stb_butex *park[PARK_BUCKETS];
static pthread_once_t park_once = PTHREAD_ONCE_INIT;

static void park_init(void)
{
	for (unsigned i = 0; i < PARK_BUCKETS; i++) {
		park[i] = stb_butex_new();
		if (!park[i]) {
			for (unsigned j = 0; j < i; j++)
				stb_butex_free(park[j]);
			return; /* park[0] stays NULL: ENOMEM */
		}
	}
}

struct stb_butex *stb_park_butex(const void *addr)
{
	pthread_once(&park_once, park_init);
	uintptr_t h = (uintptr_t)addr;
	h ^= h >> 17;
	h *= 0x9e3779b97f4a7c15ull;
	return park[0] ? park[(h >> 32) % PARK_BUCKETS] : NULL;
}

void stb_park_wake_all(const void *addr)
{
	struct stb_butex *b = stb_park_butex(addr);
	if (!b)
		return;
	__atomic_fetch_add(&b->value, 1, __ATOMIC_SEQ_CST);
	stb_butex_wake(b, true);
}

int bthread_once(bthread_once_t *once_control, void (*init_routine)(void))
{
	if (!once_control || !init_routine)
		return EINVAL;
	unsigned *st = &once_control->state;
	unsigned s = __atomic_load_n(st, __ATOMIC_ACQUIRE);
	if (STB_LIKELY(s == ONCE_DONE))
		return 0;
	s = ONCE_NOT_RUN;
	if (__atomic_compare_exchange_n(st, &s, ONCE_RUNNING, false, __ATOMIC_ACQUIRE,
					__ATOMIC_ACQUIRE)) {
		init_routine();
		if (__atomic_exchange_n(st, ONCE_DONE, __ATOMIC_SEQ_CST) == ONCE_WAITERS)
			stb_park_wake_all(once_control);
		return 0;
	}
	struct stb_butex *b = stb_park_butex(once_control);
	const struct stb_wait why = stb_wait_make(STB_WAIT_ONCE, once_control, NULL);
	for (;;) {
		s = __atomic_load_n(st, __ATOMIC_ACQUIRE);
		if (s == ONCE_DONE)
			return 0;
		if (s == ONCE_RUNNING &&
		    !__atomic_compare_exchange_n(st, &s, ONCE_WAITERS, false, __ATOMIC_SEQ_CST,
						 __ATOMIC_ACQUIRE))
			continue;
		if (!b) { /* no parking butex: poll */
			bthread_usleep(1000);
			continue;
		}
		const int seq = __atomic_load_n(&b->value, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(st, __ATOMIC_SEQ_CST) == ONCE_DONE)
			return 0;
		stb_butex_wait_mono(b, seq, 0, &why);
	}
}
