/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_barrier_t: nobody passes before all count arrived, exactly one
 * BTHREAD_BARRIER_SERIAL_THREAD per cycle over many cycles with bthreads
 * and pthreads, errors, the published BARRIER wait.
 */
#include <pthread.h>

#include <bthread/bthread.h>

#include "sync_util.h"

#define PARTIES 6
#define CYCLES STB_TEST_SCALE(300, 50)

static bthread_barrier_t bar;
static int arrived[CYCLES];
static int serial[CYCLES];

static void *party(void *arg)
{
	(void)arg;
	for (int c = 0; c < CYCLES; c++) {
		__atomic_fetch_add(&arrived[c], 1, __ATOMIC_ACQ_REL);
		int rc = bthread_barrier_wait(&bar);
		STB_EXPECT(rc == 0 || rc == BTHREAD_BARRIER_SERIAL_THREAD);
		if (rc == BTHREAD_BARRIER_SERIAL_THREAD)
			__atomic_fetch_add(&serial[c], 1, __ATOMIC_ACQ_REL);
		/* Past the barrier: everyone of this cycle had arrived. */
		STB_EXPECT_EQ(__atomic_load_n(&arrived[c], __ATOMIC_ACQUIRE), PARTIES);
	}
	return NULL;
}

static void test_cycles_mixed(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	assert_int_equal(bthread_barrier_init(&bar, NULL, PARTIES), 0);
	bthread_t b[PARTIES / 2];
	pthread_t p[PARTIES / 2];
	for (int i = 0; i < PARTIES / 2; i++) {
		assert_int_equal(bthread_start_background(&b[i], NULL, party, NULL), 0);
		assert_int_equal(pthread_create(&p[i], NULL, party, NULL), 0);
	}
	for (int i = 0; i < PARTIES / 2; i++) {
		assert_int_equal(bthread_join(b[i], NULL), 0);
		assert_int_equal(pthread_join(p[i], NULL), 0);
	}
	for (int c = 0; c < CYCLES; c++)
		assert_int_equal(serial[c], 1);
	assert_int_equal(bthread_barrier_destroy(&bar), 0);
	STB_TEST_END();
}

static void *one_wait(void *arg)
{
	return (void *)(intptr_t)bthread_barrier_wait(arg);
}

static void test_wait_published_and_errors(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	assert_int_equal(bthread_barrier_init(&bar, NULL, 0), EINVAL);
	assert_int_equal(bthread_barrier_init(NULL, NULL, 2), EINVAL);
	assert_int_equal(bthread_barrier_init(&bar, NULL, 2), 0);
	bthread_t b;
	assert_int_equal(bthread_start_background(&b, NULL, one_wait, &bar), 0);
	assert_true(stb_test_parked(b, STB_WAIT_BARRIER, 5000));
	assert_true(stb_test_wait_of(b).object == (uint64_t)(uintptr_t)&bar);
	bthread_stop(b); /* a stop does not end a barrier wait */
	stb_test_sleep_ms(20);
	assert_int_equal(stb_test_wait_of(b).kind, STB_WAIT_BARRIER);
	int rc = bthread_barrier_wait(&bar);
	void *ret;
	assert_int_equal(bthread_join(b, &ret), 0);
	assert_true((rc == BTHREAD_BARRIER_SERIAL_THREAD) != ((intptr_t)ret == BTHREAD_BARRIER_SERIAL_THREAD));
	assert_int_equal(bthread_barrier_init(&bar, NULL, 1), 0);
	assert_int_equal(bthread_barrier_wait(&bar), BTHREAD_BARRIER_SERIAL_THREAD);
	assert_int_equal(bthread_barrier_destroy(&bar), 0);
	assert_int_equal(bthread_barrier_wait(&bar), EINVAL);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cycles_mixed),
		cmocka_unit_test(test_wait_published_and_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
