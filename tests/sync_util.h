/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers of the synchronization-module tests (static library): what a task
 * publishes about its wait (kind, object, owner, owner word address), and
 * waiting until a bthread is really parked in a given kind of wait.
 */
#ifndef STB_TESTS_SYNC_UTIL_H
#define STB_TESTS_SYNC_UTIL_H

#include "test_internal.h"
#include "test_util.h"

struct stb_test_wait {
	unsigned state;
	unsigned kind;
	uint64_t object, owner, extra;
};

/* The published wait of bthread tid (kind STB_WAIT_NONE when not suspended). */
static inline struct stb_test_wait stb_test_wait_of(bthread_t tid)
{
	struct stb_test_wait w = {0};
	struct stb_task *t = stb_task_lookup(tid);
	if (!t)
		return w;
	const struct stb_abi_task *p = t->pub;
	uint64_t word = __atomic_load_n(&p->word, __ATOMIC_ACQUIRE);
	w.state = STB_ABI_STATE(word);
	if (w.state != STB_TASK_SUSPENDED)
		return w;
	w.kind = STB_ABI_WAIT_KIND(__atomic_load_n(&p->wait_word, __ATOMIC_RELAXED));
	w.object = __atomic_load_n(&p->wait_object, __ATOMIC_RELAXED);
	w.owner = __atomic_load_n(&p->wait_owner, __ATOMIC_RELAXED);
	w.extra = __atomic_load_n(&p->wait_extra, __ATOMIC_RELAXED);
	return w;
}

/* True once tid is suspended in a wait of kind within ms milliseconds. */
static inline bool stb_test_parked(bthread_t tid, unsigned kind, unsigned ms)
{
	return STB_WAIT_UNTIL(stb_test_wait_of(tid).kind == kind, ms);
}

/* The owner word a pthread that runs no bthread records (abi.h encoding). */
static inline uint64_t stb_test_tid_owner(void)
{
	return STB_ABI_OWNER_TID(stb_gettid());
}

#endif /* STB_TESTS_SYNC_UTIL_H */
