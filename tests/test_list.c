/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_list_*: add, stop and join many bthreads together; joins publish a
 * JOIN wait naming the list; a list that outgrows its capacity drops the
 * finished bthreads instead of growing; errors for lists never initialized.
 */
#include "test_util.h"

#include <pthread.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>

#include "test_internal.h"

static void *stb_sleep_until_stopped(void *arg)
{
	int *done = arg;
	while (bthread_usleep(10000000) == 0)
		;
	__atomic_fetch_add(done, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void *stb_quick(void *arg)
{
	__atomic_fetch_add((int *)arg, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void test_stop_and_join(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	enum { N = 100 };
	bthread_list_t list;
	assert_int_equal(bthread_list_init(&list, 0, 0), 0);
	int done = 0;
	for (int i = 0; i < N; i++) {
		bthread_t t;
		assert_int_equal(bthread_start_background(&t, &BTHREAD_ATTR_SMALL,
							  stb_sleep_until_stopped, &done), 0);
		assert_int_equal(bthread_list_add(&list, t), 0);
	}
	/* As bRPC: 0 (a failed start's id) is accepted, and nothing is added. */
	assert_int_equal(bthread_list_add(&list, INVALID_BTHREAD), 0);
	stb_test_sleep_ms(20);
	assert_int_equal(__atomic_load_n(&done, __ATOMIC_ACQUIRE), 0);
	uint64_t t0 = stb_now_ns();
	assert_int_equal(bthread_list_stop(&list), 0);
	assert_int_equal(bthread_list_join(&list), 0);
	assert_int_equal(done, N);
	assert_true(stb_test_ms_since(t0) < 5000.0);
	/* Joined: the list is empty again. */
	assert_int_equal(bthread_list_join(&list), 0);
	bthread_list_destroy(&list);
	assert_null(list.impl);
	bthread_list_destroy(&list); /* twice: nothing */
	STB_TEST_END();
}

/* The joiner's wait block names the list and the bthread it joins. */
struct stb_lj {
	bthread_list_t *list;
	int rc;
};

static void *stb_list_joiner(void *arg)
{
	struct stb_lj *j = arg;
	j->rc = bthread_list_join(j->list);
	return NULL;
}

static void test_join_publishes(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	int *b = butex_create();
	assert_non_null(b);
	bthread_list_t list;
	assert_int_equal(bthread_list_init(&list, 8, 8), 0);
	bthread_t waiter;
	assert_int_equal(bthread_start_background(&waiter, NULL, stb_sleep_until_stopped,
						  &(int){0}), 0);
	assert_int_equal(bthread_list_add(&list, waiter), 0);
	struct stb_lj j = {.list = &list};
	bthread_t joiner;
	assert_int_equal(bthread_start_background(&joiner, NULL, stb_list_joiner, &j), 0);
	struct stb_task *jt = stb_task_lookup(joiner);
	assert_non_null(jt);
	assert_true(STB_WAIT_UNTIL(stb_task_state(jt) == STB_TASK_SUSPENDED, 5000));
	assert_int_equal(STB_ABI_WAIT_KIND(jt->pub->wait_word), STB_WAIT_JOIN);
	assert_int_equal(jt->pub->wait_object, (uint64_t)(uintptr_t)&list);
	assert_int_equal(jt->pub->wait_owner, waiter);
	/* Lists are not thread-safe: the joiner owns it now; stop the bthread directly. */
	assert_int_equal(bthread_stop(waiter), 0);
	assert_int_equal(bthread_join(joiner, NULL), 0);
	assert_int_equal(j.rc, 0);
	bthread_list_destroy(&list);
	butex_destroy(b);
	STB_TEST_END();
}

/* 100,000 short-lived bthreads added one by one: the list stays small. */
static void test_drops_finished(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	enum { N = STB_TEST_TSAN_SCALE(100000, 3000) };
	bthread_list_t list;
	assert_int_equal(bthread_list_init(&list, 0, 0), 0);
	int ran = 0;
	for (int i = 0; i < N; i++) {
		bthread_t t;
		assert_int_equal(bthread_start_background(&t, &BTHREAD_ATTR_SMALL, stb_quick, &ran), 0);
		assert_int_equal(bthread_list_add(&list, t), 0);
		if (i % 1000 == 999)
			assert_true(STB_WAIT_UNTIL(__atomic_load_n(&ran, __ATOMIC_ACQUIRE) == i + 1,
						   5000));
	}
	/* impl's first two words: the array and its length (list.c). */
	size_t n = ((size_t *)list.impl)[1];
	print_message("    %d added, %zu kept\n", N, n);
	assert_true(n < 4096);
	assert_int_equal(bthread_list_join(&list), 0);
	assert_int_equal(ran, N);
	bthread_list_destroy(&list);
	STB_TEST_END();
}

static void test_errors(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	bthread_list_t list = {0};
	assert_int_equal(bthread_list_init(NULL, 0, 0), EINVAL);
	assert_int_equal(bthread_list_add(&list, 1), EINVAL);
	assert_int_equal(bthread_list_stop(&list), EINVAL);
	assert_int_equal(bthread_list_join(&list), EINVAL);
	assert_int_equal(bthread_list_add(NULL, 1), EINVAL);
	bthread_list_destroy(NULL);
	bthread_list_destroy(&list);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_stop_and_join),
		cmocka_unit_test(test_join_publishes),
		cmocka_unit_test(test_drops_finished),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
