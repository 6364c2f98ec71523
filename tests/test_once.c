/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_once: the routine runs exactly once while many bthreads and
 * pthreads call at the same time; none returns before it finished; the
 * waiters are parked (published ONCE wait), not spinning; errors.
 */
#include <pthread.h>

#include <bthread/bthread.h>

#include "sync_util.h"

static bthread_once_t once = BTHREAD_ONCE_INIT;
static int runs, done, bad, parked;

enum { NB = 32, NP = 4 };
static bthread_t b[NB];
/* The bthreads that called bthread_once, as they record themselves (the
 * routine must not read b[], which the test's thread is still writing). */
static bthread_t callers[NB];
static int ncallers;

static bool any_parked(void)
{
	int n = __atomic_load_n(&ncallers, __ATOMIC_ACQUIRE);
	for (int i = 0; i < n && i < NB; i++) {
		bthread_t id = __atomic_load_n(&callers[i], __ATOMIC_ACQUIRE);
		if (id && stb_test_wait_of(id).kind == STB_WAIT_ONCE)
			return true;
	}
	return false;
}

/* Runs until it has seen another caller parked in its ONCE wait (at least
 * 100 ms, at most 20 s: the callers may be slow to come, under TSan). */
static void init_routine(void)
{
	__atomic_fetch_add(&runs, 1, __ATOMIC_ACQ_REL);
	bthread_usleep(100 * 1000);
	for (int i = 0; i < 20000 && !any_parked(); i++)
		bthread_usleep(1000);
	__atomic_store_n(&parked, any_parked(), __ATOMIC_RELEASE);
	__atomic_store_n(&done, 1, __ATOMIC_RELEASE);
}

static void *caller(void *arg)
{
	(void)arg;
	bthread_t self = bthread_self();
	if (self) {
		int k = __atomic_fetch_add(&ncallers, 1, __ATOMIC_ACQ_REL);
		if (k < NB)
			__atomic_store_n(&callers[k], self, __ATOMIC_RELEASE);
	}
	STB_EXPECT_EQ(bthread_once(&once, init_routine), 0);
	if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE))
		__atomic_fetch_add(&bad, 1, __ATOMIC_ACQ_REL);
	return NULL;
}

static void test_once_concurrent(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	pthread_t p[NP];
	for (int i = 0; i < NB; i++)
		assert_int_equal(bthread_start_background(&b[i], NULL, caller, NULL), 0);
	for (int i = 0; i < NP; i++)
		assert_int_equal(pthread_create(&p[i], NULL, caller, NULL), 0);
	/* While the routine runs, the other bthreads are parked in ONCE waits:
	 * the routine itself looks (a fixed window would be missed when
	 * starting the threads takes longer, as under TSan). */
	for (int i = 0; i < NB; i++)
		assert_int_equal(bthread_join(b[i], NULL), 0);
	for (int i = 0; i < NP; i++)
		assert_int_equal(pthread_join(p[i], NULL), 0);
	assert_int_equal(runs, 1);
	assert_int_equal(bad, 0);
	assert_true(__atomic_load_n(&parked, __ATOMIC_ACQUIRE));
	assert_int_equal(once.state, 3);
	assert_int_equal(bthread_once(&once, init_routine), 0);
	assert_int_equal(runs, 1);
	assert_int_equal(bthread_once(NULL, init_routine), EINVAL);
	assert_int_equal(bthread_once(&once, NULL), EINVAL);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_once_concurrent),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
