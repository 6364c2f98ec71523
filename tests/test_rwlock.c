/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_rwlock_t: exclusion (writers never overlap anyone, readers share)
 * under bthreads and pthreads together; writer preference (a waiting writer
 * keeps new readers out) and reader preference by attribute; a writer's
 * unlock lets every waiting reader in at once; timeouts that leave nothing
 * behind; errors; the published RWLOCK_RD / RWLOCK_WR waits with the writer
 * as owner.
 */
#include <pthread.h>

#include <bthread/bthread.h>

#include "sync_util.h"

static bthread_rwlock_t rw;
static int readers_in, writers_in, max_readers;
static long writes;
static volatile bool stop;

static void *mixed_worker(void *arg)
{
	const bool writer = (intptr_t)arg & 1;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		if (writer) {
			STB_EXPECT_EQ(bthread_rwlock_wrlock(&rw), 0);
			STB_EXPECT_EQ(__atomic_fetch_add(&writers_in, 1, __ATOMIC_ACQ_REL), 0);
			STB_EXPECT_EQ(__atomic_load_n(&readers_in, __ATOMIC_ACQUIRE), 0);
			long v = writes;
			bthread_yield();
			writes = v + 1;
			__atomic_fetch_sub(&writers_in, 1, __ATOMIC_ACQ_REL);
		} else {
			STB_EXPECT_EQ(bthread_rwlock_rdlock(&rw), 0);
			int n = __atomic_add_fetch(&readers_in, 1, __ATOMIC_ACQ_REL);
			STB_EXPECT_EQ(__atomic_load_n(&writers_in, __ATOMIC_ACQUIRE), 0);
			int m = __atomic_load_n(&max_readers, __ATOMIC_RELAXED);
			while (n > m && !__atomic_compare_exchange_n(&max_readers, &m, n, true,
								     __ATOMIC_RELAXED,
								     __ATOMIC_RELAXED))
				;
			bthread_yield();
			__atomic_fetch_sub(&readers_in, 1, __ATOMIC_ACQ_REL);
		}
		STB_EXPECT_EQ(bthread_rwlock_unlock(&rw), 0);
	}
	return NULL;
}

static void test_exclusion_mixed(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	assert_int_equal(bthread_rwlock_init(&rw, NULL), 0);
	stop = false;
	writes = 0;
	enum { NB = 8, NP = 4 };
	bthread_t b[NB];
	pthread_t p[NP];
	for (intptr_t i = 0; i < NB; i++)
		assert_int_equal(bthread_start_background(&b[i], NULL, mixed_worker, (void *)i), 0);
	for (intptr_t i = 0; i < NP; i++)
		assert_int_equal(pthread_create(&p[i], NULL, mixed_worker, (void *)i), 0);
	stb_test_sleep_ms(STB_TEST_SCALE(500, 200));
	__atomic_store_n(&stop, true, __ATOMIC_RELEASE);
	for (int i = 0; i < NB; i++)
		assert_int_equal(bthread_join(b[i], NULL), 0);
	for (int i = 0; i < NP; i++)
		assert_int_equal(pthread_join(p[i], NULL), 0);
	assert_true(writes > 0);
	assert_true(max_readers >= 2); /* readers did share the lock */
	assert_int_equal(bthread_rwlock_trywrlock(&rw), 0); /* nothing left behind */
	assert_int_equal(bthread_rwlock_unlock(&rw), 0);
	assert_int_equal(bthread_rwlock_destroy(&rw), 0);
	STB_TEST_END();
}

static int order_seq;

struct locker {
	bthread_rwlock_t *rw;
	bool write;
	int order;
};

static void *lock_once(void *arg)
{
	struct locker *l = arg;
	STB_EXPECT_EQ(l->write ? bthread_rwlock_wrlock(l->rw) : bthread_rwlock_rdlock(l->rw), 0);
	__atomic_store_n(&l->order, __atomic_fetch_add(&order_seq, 1, __ATOMIC_ACQ_REL),
			 __ATOMIC_RELEASE);
	bthread_usleep(2000);
	STB_EXPECT_EQ(bthread_rwlock_unlock(l->rw), 0);
	return NULL;
}

/* Held for reading; a writer queues; then a reader arrives. */
static void preference_case(int kind, bool writer_first)
{
	bthread_rwlockattr_t attr;
	assert_int_equal(bthread_rwlockattr_init(&attr), 0);
	assert_int_equal(bthread_rwlockattr_setkind_np(&attr, kind), 0);
	bthread_rwlock_t l;
	assert_int_equal(bthread_rwlock_init(&l, &attr), 0);
	order_seq = 0;
	assert_int_equal(bthread_rwlock_rdlock(&l), 0);
	struct locker w = {&l, true, -1}, r = {&l, false, -1};
	bthread_t tw, tr;
	assert_int_equal(bthread_start_background(&tw, NULL, lock_once, &w), 0);
	assert_true(stb_test_parked(tw, STB_WAIT_RWLOCK_WR, 5000));
	struct stb_test_wait ww = stb_test_wait_of(tw);
	assert_true(ww.object == (uint64_t)(uintptr_t)&l);
	assert_true(ww.owner == 0); /* read-held: no writer to name */
	assert_true(ww.extra == (uint64_t)(uintptr_t)&l.writer);
	if (writer_first) {
		assert_int_equal(bthread_rwlock_tryrdlock(&l), EBUSY);
		assert_int_equal(bthread_start_background(&tr, NULL, lock_once, &r), 0);
		assert_true(stb_test_parked(tr, STB_WAIT_RWLOCK_RD, 5000));
	} else {
		assert_int_equal(bthread_rwlock_tryrdlock(&l), 0);
		assert_int_equal(bthread_rwlock_unlock(&l), 0);
		assert_int_equal(bthread_start_background(&tr, NULL, lock_once, &r), 0);
		assert_true(STB_WAIT_UNTIL(__atomic_load_n(&r.order, __ATOMIC_ACQUIRE) >= 0, 5000));
	}
	assert_int_equal(bthread_rwlock_unlock(&l), 0);
	assert_int_equal(bthread_join(tw, NULL), 0);
	assert_int_equal(bthread_join(tr, NULL), 0);
	if (writer_first)
		assert_true(w.order < r.order);
	else
		assert_true(r.order < w.order);
	assert_int_equal(bthread_rwlock_destroy(&l), 0);
}

static void test_preference(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	preference_case(BTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP, true);
	preference_case(BTHREAD_RWLOCK_PREFER_READER_NP, false);
	STB_TEST_END();
}

static int in_together;

static void *reader_hold(void *arg)
{
	bthread_rwlock_t *l = arg;
	STB_EXPECT_EQ(bthread_rwlock_rdlock(l), 0);
	__atomic_fetch_add(&in_together, 1, __ATOMIC_ACQ_REL);
	/* All get in before any leaves: they were let in together. */
	STB_EXPECT(STB_WAIT_UNTIL(__atomic_load_n(&in_together, __ATOMIC_ACQUIRE) == 6, 5000));
	STB_EXPECT_EQ(bthread_rwlock_unlock(l), 0);
	return NULL;
}

static void test_writer_unlock_admits_readers(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	bthread_rwlock_t l;
	assert_int_equal(bthread_rwlock_init(&l, NULL), 0);
	assert_int_equal(bthread_rwlock_wrlock(&l), 0);
	assert_true(l.writer == stb_test_tid_owner());
	in_together = 0;
	bthread_t r[4];
	pthread_t p[2];
	for (int i = 0; i < 4; i++) {
		assert_int_equal(bthread_start_background(&r[i], NULL, reader_hold, &l), 0);
		assert_true(stb_test_parked(r[i], STB_WAIT_RWLOCK_RD, 5000));
		struct stb_test_wait w = stb_test_wait_of(r[i]);
		assert_true(w.owner == stb_test_tid_owner());
		assert_true(w.extra == (uint64_t)(uintptr_t)&l.writer);
	}
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&p[i], NULL, reader_hold, &l), 0);
	assert_true(STB_WAIT_UNTIL(stb_test_butex_waiters(l.rd_seq) == 6, 5000));
	assert_int_equal(bthread_rwlock_unlock(&l), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(bthread_join(r[i], NULL), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_join(p[i], NULL), 0);
	assert_int_equal(l.writer, 0);
	assert_int_equal(bthread_rwlock_destroy(&l), 0);
	STB_TEST_END();
}

static void *timed_wr(void *arg)
{
	struct timespec ts = stb_realtime_after_ms(30);
	uint64_t t0 = stb_now_ns();
	STB_EXPECT_EQ(bthread_rwlock_timedwrlock(arg, &ts), ETIMEDOUT);
	STB_EXPECT(stb_test_ms_since(t0) >= 25);
	return NULL;
}

static void *timed_rd(void *arg)
{
	struct timespec ts = stb_realtime_after_ms(30);
	STB_EXPECT_EQ(bthread_rwlock_timedrdlock(arg, &ts), ETIMEDOUT);
	return NULL;
}

static void test_timeouts_leave_nothing(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	bthread_rwlock_t l;
	assert_int_equal(bthread_rwlock_init(&l, NULL), 0);
	assert_int_equal(bthread_rwlock_rdlock(&l), 0);
	bthread_t t[6];
	for (int i = 0; i < 6; i++)
		assert_int_equal(bthread_start_background(&t[i], NULL, timed_wr, &l), 0);
	for (int i = 0; i < 6; i++)
		assert_int_equal(bthread_join(t[i], NULL), 0);
	pthread_t p;
	assert_int_equal(pthread_create(&p, NULL, timed_wr, &l), 0);
	assert_int_equal(pthread_join(p, NULL), 0);
	/* No writer is waiting any more: readers get in at once. */
	assert_int_equal(l.state & ~0x1fffffffu, 0);
	assert_int_equal(bthread_rwlock_tryrdlock(&l), 0);
	assert_int_equal(bthread_rwlock_unlock(&l), 0);
	assert_int_equal(bthread_rwlock_unlock(&l), 0);
	assert_int_equal(bthread_rwlock_wrlock(&l), 0);
	assert_int_equal(bthread_start_background(&t[0], NULL, timed_rd, &l), 0);
	assert_int_equal(bthread_join(t[0], NULL), 0);
	assert_int_equal(bthread_rwlock_unlock(&l), 0);
	assert_int_equal(l.state, 0);
	assert_int_equal(bthread_rwlock_destroy(&l), 0);
	STB_TEST_END();
}

static void test_errors(void **state)
{
	(void)state;
	bthread_rwlock_t l = {0};
	assert_int_equal(bthread_rwlock_rdlock(&l), EINVAL);
	assert_int_equal(bthread_rwlock_init(NULL, NULL), EINVAL);
	assert_int_equal(bthread_rwlock_init(&l, NULL), 0);
	assert_int_equal(bthread_rwlock_unlock(&l), EPERM);
	assert_int_equal(bthread_rwlock_wrlock(&l), 0);
	assert_int_equal(bthread_rwlock_trywrlock(&l), EBUSY);
	assert_int_equal(bthread_rwlock_tryrdlock(&l), EBUSY);
	struct timespec past = {0, 0};
	assert_int_equal(bthread_rwlock_timedrdlock(&l, &past), ETIMEDOUT);
	assert_int_equal(bthread_rwlock_unlock(&l), 0);
	assert_int_equal(bthread_rwlock_timedrdlock(&l, &past), 0); /* free: taken at once */
	assert_int_equal(bthread_rwlock_unlock(&l), 0);
	assert_int_equal(bthread_rwlock_destroy(&l), 0);
	bthread_rwlockattr_t a;
	int kind = -1;
	assert_int_equal(bthread_rwlockattr_init(&a), 0);
	assert_int_equal(bthread_rwlockattr_getkind_np(&a, &kind), 0);
	assert_int_equal(kind, BTHREAD_RWLOCK_DEFAULT_NP);
	assert_int_equal(bthread_rwlockattr_setkind_np(&a, 42), EINVAL);
	assert_int_equal(bthread_rwlockattr_setkind_np(&a, BTHREAD_RWLOCK_PREFER_READER_NP), 0);
	assert_int_equal(bthread_rwlockattr_getkind_np(&a, &kind), 0);
	assert_int_equal(kind, BTHREAD_RWLOCK_PREFER_READER_NP);
	assert_int_equal(bthread_rwlockattr_destroy(&a), 0);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exclusion_mixed),
		cmocka_unit_test(test_preference),
		cmocka_unit_test(test_writer_unlock_admits_readers),
		cmocka_unit_test(test_timeouts_leave_nothing),
		cmocka_unit_test(test_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
