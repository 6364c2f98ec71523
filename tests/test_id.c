/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_id: lock/trylock/unlock and the lock word values, errors run at
 * once or queued until unlock (in order), about_to_destroy, join waking at
 * destroy, ranged ids, cancel, stale ids, lists, and the published ID wait
 * naming the locker.
 */
#include <pthread.h>

#include <bthread/bthread.h>

#include "sync_util.h"

static int seen[16], nseen;
static int record_error(bthread_id_t id, void *data, int code)
{
	(void)data;
	seen[nseen++] = code;
	return bthread_id_unlock(id);
}

static void test_lock_and_errors(void **state)
{
	(void)state;
	bthread_id_t id;
	int x = 5;
	assert_int_equal(bthread_id_create(&id, &x, record_error), 0);
	const uint32_t v = (uint32_t)id.value;
	assert_int_equal(stb_id_value(id), v);
	void *data = NULL;
	assert_int_equal(bthread_id_lock(id, &data), 0);
	assert_ptr_equal(data, &x);
	assert_int_equal(stb_id_value(id), v + 1);
	assert_int_equal(bthread_id_trylock(id, NULL), EBUSY);
	assert_int_equal(bthread_id_cancel(id), EPERM); /* locked: bRPC's code */
	nseen = 0;
	assert_int_equal(bthread_id_error(id, 7), 0); /* queued: it is locked */
	assert_int_equal(bthread_id_error(id, 8), 0);
	assert_int_equal(nseen, 0);
	assert_int_equal(bthread_id_unlock(id), 0); /* runs 7, whose unlock runs 8 */
	assert_int_equal(nseen, 2);
	assert_int_equal(seen[0], 7);
	assert_int_equal(seen[1], 8);
	assert_int_equal(stb_id_value(id), v);
	assert_int_equal(bthread_id_error(id, 9), 0); /* unlocked: runs now */
	assert_int_equal(nseen, 3);
	assert_int_equal(bthread_id_unlock(id), EPERM);
	assert_int_equal(bthread_id_cancel(id), 0);
	assert_int_equal(stb_id_value(id), v + 4);
	assert_int_equal(bthread_id_lock(id, NULL), EINVAL);
	assert_int_equal(bthread_id_error(id, 1), EINVAL);
	assert_int_equal(bthread_id_join(id), 0);
	bthread_id_t never = {((uint64_t)0x7fffffff << 32) | 1};
	assert_int_equal(bthread_id_lock(never, NULL), EINVAL);
	assert_int_equal(bthread_id_join(never), EINVAL);
	assert_int_equal(bthread_id_create_ranged(&id, NULL, NULL, 0), EINVAL);
	assert_int_equal(bthread_id_create_ranged(&id, NULL, NULL, 1025), EINVAL);
}

static void *lock_it(void *arg)
{
	bthread_id_t id = *(bthread_id_t *)arg;
	return (void *)(intptr_t)bthread_id_lock(id, NULL);
}

static void *join_it(void *arg)
{
	return (void *)(intptr_t)bthread_id_join(*(bthread_id_t *)arg);
}

static void test_waits_published(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	bthread_id_t id;
	assert_int_equal(bthread_id_create_ranged(&id, NULL, NULL, 3), 0);
	bthread_id_t id2 = {id.value + 2};
	assert_int_equal(bthread_id_lock(id2, NULL), 0);
	bthread_t locker, joiner;
	assert_int_equal(bthread_start_background(&locker, NULL, lock_it, &id), 0);
	assert_int_equal(bthread_start_background(&joiner, NULL, join_it, &id), 0);
	assert_true(stb_test_parked(locker, STB_WAIT_ID, 5000));
	assert_true(stb_test_parked(joiner, STB_WAIT_ID, 5000));
	struct stb_test_wait w = stb_test_wait_of(locker);
	assert_true(w.object == id.value);
	assert_true(w.owner == stb_test_tid_owner());
	assert_true(w.extra != 0);
	assert_true(*(uint64_t *)(uintptr_t)w.extra == stb_test_tid_owner());
	assert_int_equal(bthread_id_about_to_destroy(id), 0); /* the locker gets EPERM */
	void *rc;
	assert_int_equal(bthread_join(locker, &rc), 0);
	assert_int_equal((intptr_t)rc, EPERM);
	assert_int_equal(bthread_id_lock(id, NULL), EPERM);
	assert_int_equal(stb_test_wait_of(joiner).kind, STB_WAIT_ID);
	assert_int_equal(bthread_id_unlock_and_destroy(id), 0);
	assert_int_equal(bthread_join(joiner, &rc), 0);
	assert_int_equal((intptr_t)rc, 0);
	assert_int_equal(stb_id_value(id2), (uint32_t)id.value + 6);
	STB_TEST_END();
}

static int list_hits;
static int list_error(bthread_id_t id, void *data, int code)
{
	(void)data;
	STB_EXPECT_EQ(code, ECONNRESET);
	__atomic_fetch_add(&list_hits, 1, __ATOMIC_ACQ_REL);
	return bthread_id_unlock_and_destroy(id);
}

static void test_list(void **state)
{
	(void)state;
	bthread_id_list_t list;
	assert_int_equal(bthread_id_list_init(&list, 4, 4), 0);
	bthread_id_t ids[40];
	for (int i = 0; i < 40; i++) {
		assert_int_equal(bthread_id_create(&ids[i], NULL, list_error), 0);
		assert_int_equal(bthread_id_list_add(&list, ids[i]), 0);
	}
	bthread_id_list_t other;
	assert_int_equal(bthread_id_list_init(&other, 0, 0), 0);
	bthread_id_list_swap(&list, &other);
	assert_int_equal(bthread_id_list_reset(&list, ECONNRESET), 0);
	assert_int_equal(list_hits, 0);
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	assert_int_equal(bthread_id_list_reset_pthreadsafe(&other, ECONNRESET, &mu), 0);
	assert_int_equal(list_hits, 40);
	for (int i = 0; i < 40; i++)
		assert_int_equal(bthread_id_trylock(ids[i], NULL), EINVAL);
	assert_int_equal(bthread_id_list_reset_pthreadsafe(&other, ECONNRESET, NULL), EINVAL);
	bthread_id_list_destroy(&list);
	bthread_id_list_destroy(&other);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lock_and_errors),
		cmocka_unit_test(test_waits_published),
		cmocka_unit_test(test_list),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
