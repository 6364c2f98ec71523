/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sync_util.h for C++ tests (internal.h is C only): whether a bthread is
 * parked in a kind of wait, and the object it published.
 */
#include "sync_util.h"

bool stb_test_c_parked(bthread_t tid, unsigned kind, unsigned ms);
uint64_t stb_test_c_wait_object(bthread_t tid);
uint64_t stb_test_c_now_ns(void);

bool stb_test_c_parked(bthread_t tid, unsigned kind, unsigned ms)
{
	return stb_test_parked(tid, kind, ms);
}

uint64_t stb_test_c_wait_object(bthread_t tid)
{
	return stb_test_wait_of(tid).object;
}

uint64_t stb_test_c_now_ns(void)
{
	return stb_now_ns();
}

/* ---- execution queues (test_execq.cpp) ---- */

uint64_t stb_test_c_execq_of(bthread_t tid);
bthread_t stb_test_c_execq_task(uint64_t queue, bool pthread);
unsigned stb_test_c_wait_kind(bthread_t tid, uint64_t *object);

/* The execution queue task tid's entry says it consumes (abi.h execq). */
uint64_t stb_test_c_execq_of(bthread_t tid)
{
	struct stb_task *t = stb_task_lookup(tid);
	return t ? __atomic_load_n(&t->pub->execq, __ATOMIC_ACQUIRE) : 0;
}

/* A live task (a registered pthread when pthread) whose entry names queue, or 0. */
bthread_t stb_test_c_execq_task(uint64_t queue, bool pthread)
{
	for (uint32_t s = 0; s < stb_task_slots(); s++) {
		struct stb_task *t = stb_task_at(s);
		if (!t)
			continue;
		const struct stb_abi_task *p = t->pub;
		unsigned st = STB_ABI_STATE(__atomic_load_n(&p->word, __ATOMIC_ACQUIRE));
		bool is_pthread = (__atomic_load_n(&p->flags, __ATOMIC_RELAXED) &
				   STB_ABI_TASK_F_PTHREAD) != 0;
		if (st != STB_TASK_UNUSED && st != STB_TASK_DESTROYED && is_pthread == pthread &&
		    __atomic_load_n(&p->execq, __ATOMIC_ACQUIRE) == queue)
			return __atomic_load_n(&p->id, __ATOMIC_RELAXED);
	}
	return 0;
}

/* The wait kind task tid publishes now, suspended or a thread blocked while
 * its entry says running (and its object). */
unsigned stb_test_c_wait_kind(bthread_t tid, uint64_t *object)
{
	struct stb_task *t = stb_task_lookup(tid);
	if (!t)
		return STB_WAIT_NONE;
	const struct stb_abi_task *p = t->pub;
	unsigned st = STB_ABI_STATE(__atomic_load_n(&p->word, __ATOMIC_ACQUIRE));
	if (st != STB_TASK_SUSPENDED && st != STB_TASK_RUNNING)
		return STB_WAIT_NONE;
	uint64_t w = __atomic_load_n(&p->wait_word, __ATOMIC_ACQUIRE);
	if (object)
		*object = __atomic_load_n(&p->wait_object, __ATOMIC_RELAXED);
	return STB_ABI_WAIT_KIND(w);
}
