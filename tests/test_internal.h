/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test helpers that look inside the runtime (tests linking bthread_static):
 * the number of waiters queued on a butex, so that a test can wait until a
 * bthread or pthread is really blocked instead of sleeping and hoping.
 */
#ifndef STB_TESTS_TEST_INTERNAL_H
#define STB_TESTS_TEST_INTERNAL_H

#include "internal.h"

/* Waiters queued on the butex whose value (as returned by butex_create) is at value. */
static inline int stb_test_butex_waiters(const void *value)
{
	struct stb_butex *b =
		(struct stb_butex *)((char *)value - offsetof(struct stb_butex, value));
	int n = 0;
	stb_lock(&b->lock);
	for (struct stb_waiter *w = b->head.next; w != &b->head; w = w->next)
		n++;
	stb_unlock(&b->lock);
	return n;
}

#endif /* STB_TESTS_TEST_INTERNAL_H */
