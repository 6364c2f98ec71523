/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the synchronization primitives (mutex, rwlock, sem, barrier, once,
 * bthread_id, CountdownEvent) share: the public butex pointer <-> internal
 * butex (the caller's owner word is stb_owner_self(), internal.h), the wait
 * descriptors they publish, and the address-hashed parking butexes of the
 * primitives that have no butex of their own (once).
 */
#ifndef STB_RUNTIME_CORE_SYNC_H
#define STB_RUNTIME_CORE_SYNC_H

#include "internal.h"

/* The internal butex whose value a public butex pointer points at. */
static inline struct stb_butex *stb_butex_of_value(const void *value)
{
	return (struct stb_butex *)((char *)value - offsetof(struct stb_butex, value));
}


/* A wait descriptor of kind on object; owner word address (0 = none) goes to extra. */
static inline struct stb_wait stb_wait_make(unsigned kind, const void *object,
					    const uint64_t *owner_word)
{
	struct stb_wait w = {.word = STB_ABI_WAIT_WORD(kind, 0, 0, 0),
			     .object = (uint64_t)(uintptr_t)object};
	if (owner_word) {
		w.owner = __atomic_load_n(owner_word, __ATOMIC_RELAXED);
		w.extra = (uint64_t)(uintptr_t)owner_word;
	}
	return w;
}

/*
 * The parking butex for address addr (one of a fixed set, hashed by
 * address). A waiter reads its value, re-checks its condition, then waits
 * for the value to change; a waker increments it and wakes all. Distinct
 * objects may share one: wake-ups can be spurious. NULL only when the set
 * could not be allocated at first use (ENOMEM).
 */
struct stb_butex *stb_park_butex(const void *addr);
/* Increments addr's parking butex and wakes every waiter on it. */
void stb_park_wake_all(const void *addr);

/* The internal short lock at a public `unsigned lock` member. */
static inline struct stb_lock *stb_lock_at(unsigned *word)
{
	_Static_assert(sizeof(struct stb_lock) == sizeof(unsigned), "lock is one word");
	return (struct stb_lock *)(void *)word;
}

#endif /* STB_RUNTIME_CORE_SYNC_H */
