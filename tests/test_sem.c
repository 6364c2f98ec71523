/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_sem_t: the count (bRPC's butex value), trywait EAGAIN, timedwait
 * ETIMEDOUT on time, post_n waking exactly n waiters, hand-off between
 * bthreads and pthreads without losing a unit, errors, the published SEM wait.
 */
#include <pthread.h>

#include <bthread/bthread.h>

#include "sync_util.h"

static bthread_sem_t sem;
static int taken;

static void *take_one(void *arg)
{
	(void)arg;
	STB_EXPECT_EQ(bthread_sem_wait(&sem), 0);
	__atomic_fetch_add(&taken, 1, __ATOMIC_ACQ_REL);
	return NULL;
}

static void test_count_and_errors(void **state)
{
	(void)state;
	assert_int_equal(bthread_sem_init(NULL, 0), EINVAL);
	assert_int_equal(bthread_sem_init(&sem, 2), 0);
	assert_int_equal(*sem.butex, 2);
	assert_int_equal(bthread_sem_trywait(&sem), 0);
	assert_int_equal(bthread_sem_wait(&sem), 0);
	assert_int_equal(bthread_sem_trywait(&sem), EAGAIN);
	assert_int_equal(bthread_sem_post_n(&sem, 0), 0); /* bRPC: a no-op */
	assert_int_equal(*sem.butex, 0);
	assert_int_equal(bthread_sem_post(&sem), 0);
	assert_int_equal(*sem.butex, 1);
	assert_int_equal(bthread_sem_disable_csite(&sem), 0);
	assert_int_equal(bthread_sem_destroy(&sem), 0);
	assert_int_equal(bthread_sem_wait(&sem), EINVAL);
}

static void *timed(void *arg)
{
	(void)arg;
	struct timespec ts = stb_realtime_after_ms(40);
	uint64_t t0 = stb_now_ns();
	STB_EXPECT_EQ(bthread_sem_timedwait(&sem, &ts), ETIMEDOUT);
	STB_EXPECT(stb_test_ms_since(t0) >= 35);
	return NULL;
}

static void test_timedwait(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	assert_int_equal(bthread_sem_init(&sem, 0), 0);
	bthread_t b;
	assert_int_equal(bthread_start_background(&b, NULL, timed, NULL), 0);
	assert_int_equal(bthread_join(b, NULL), 0);
	pthread_t p;
	assert_int_equal(pthread_create(&p, NULL, timed, NULL), 0);
	assert_int_equal(pthread_join(p, NULL), 0);
	assert_int_equal(*sem.butex, 0);
	assert_int_equal(bthread_sem_destroy(&sem), 0);
	STB_TEST_END();
}

static void test_post_n_wakes_n(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	assert_int_equal(bthread_sem_init(&sem, 0), 0);
	taken = 0;
	bthread_t b[5];
	for (int i = 0; i < 5; i++) {
		assert_int_equal(bthread_start_background(&b[i], NULL, take_one, NULL), 0);
		assert_true(stb_test_parked(b[i], STB_WAIT_SEM, 5000));
		assert_true(stb_test_wait_of(b[i]).object == (uint64_t)(uintptr_t)&sem);
	}
	assert_int_equal(bthread_sem_post_n(&sem, 3), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&taken, __ATOMIC_ACQUIRE) == 3, 5000));
	stb_test_sleep_ms(20);
	assert_int_equal(__atomic_load_n(&taken, __ATOMIC_ACQUIRE), 3);
	assert_int_equal(stb_test_butex_waiters(sem.butex), 2);
	assert_int_equal(bthread_sem_post_n(&sem, 2), 0);
	for (int i = 0; i < 5; i++)
		assert_int_equal(bthread_join(b[i], NULL), 0);
	assert_int_equal(*sem.butex, 0);
	assert_int_equal(bthread_sem_destroy(&sem), 0);
	STB_TEST_END();
}

#define HANDOFFS STB_TEST_SCALE(20000, 2000)

static void *poster(void *arg)
{
	(void)arg;
	for (int i = 0; i < HANDOFFS; i++)
		STB_EXPECT_EQ(bthread_sem_post(&sem), 0);
	return NULL;
}

static void *waiter(void *arg)
{
	(void)arg;
	for (int i = 0; i < HANDOFFS; i++)
		STB_EXPECT_EQ(bthread_sem_wait(&sem), 0);
	return NULL;
}

static void test_handoff_mixed(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	assert_int_equal(bthread_sem_init(&sem, 0), 0);
	bthread_t bp, bw;
	pthread_t pp, pw;
	assert_int_equal(bthread_start_background(&bw, NULL, waiter, NULL), 0);
	assert_int_equal(pthread_create(&pw, NULL, waiter, NULL), 0);
	assert_int_equal(bthread_start_background(&bp, NULL, poster, NULL), 0);
	assert_int_equal(pthread_create(&pp, NULL, poster, NULL), 0);
	assert_int_equal(bthread_join(bp, NULL), 0);
	assert_int_equal(pthread_join(pp, NULL), 0);
	assert_int_equal(bthread_join(bw, NULL), 0);
	assert_int_equal(pthread_join(pw, NULL), 0);
	assert_int_equal(*sem.butex, 0);
	assert_int_equal(bthread_sem_destroy(&sem), 0);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_count_and_errors),
		cmocka_unit_test(test_timedwait),
		cmocka_unit_test(test_post_n_wakes_n),
		cmocka_unit_test(test_handoff_mixed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
