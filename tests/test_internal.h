/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test helpers that look inside the runtime (tests linking bthread_static):
 * the number of waiters queued on a butex, so that a test can wait until a
 * bthread or pthread is really blocked instead of sleeping and hoping; the
 * state of a task as a tracer reads it from the table.
 */
#ifndef STB_TESTS_TEST_INTERNAL_H
#define STB_TESTS_TEST_INTERNAL_H

#include "internal.h"
#include "table/tview.h"

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

/* The state of the task whose entry is p as a tracer reads it (abi.h,
 * "Running": a bthread is RUNNING or ABOUT_TO_RUN while a worker's current
 * names it, whatever its word says), through the table's one reader. */
static inline unsigned stb_test_state(const struct stb_abi_task *p)
{
	const struct stb_tview_wsrc ws = {.w = stb_table_worker(0), .hdr = stb_table_workers_header()};
	struct stb_tview_task v;
	stb_tview_read_task_now(&ws, p, &v);
	return v.state;
}

#endif /* STB_TESTS_TEST_INTERNAL_H */
