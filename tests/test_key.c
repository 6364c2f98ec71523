/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread-local storage: values per bthread and per pthread, invalid and
 * deleted keys, index reuse, destructors at bthread and pthread exit (with
 * rounds when a destructor sets a value again), key_create2 arguments, the
 * key limit, keytable pools (a table handed from one bthread to the next
 * without destructors, destructors at pool destroy, reserve).
 */
#include <pthread.h>

#include <bthread/bthread.h>

#include "sync_util.h"

static int dtor_calls;
static void count_dtor(void *p)
{
	(void)p;
	__atomic_fetch_add(&dtor_calls, 1, __ATOMIC_ACQ_REL);
}

struct own {
	bthread_key_t key;
	void *value;
};

static void *set_get(void *arg)
{
	struct own *o = arg;
	STB_EXPECT(bthread_getspecific(o->key) == NULL);
	STB_EXPECT_EQ(bthread_setspecific(o->key, o->value), 0);
	bthread_usleep(1000); /* may resume on another worker */
	STB_EXPECT(bthread_getspecific(o->key) == o->value);
	return NULL;
}

static void test_per_thread_values_and_dtors(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	bthread_key_t k;
	assert_int_equal(bthread_key_create(&k, count_dtor), 0);
	dtor_calls = 0;
	enum { N = 8 };
	struct own o[2 * N];
	bthread_t b[N];
	pthread_t p[N];
	for (int i = 0; i < N; i++) {
		o[i] = (struct own){k, (void *)(intptr_t)(i + 1)};
		o[N + i] = (struct own){k, (void *)(intptr_t)(100 + i)};
		assert_int_equal(bthread_start_background(&b[i], NULL, set_get, &o[i]), 0);
		assert_int_equal(pthread_create(&p[i], NULL, set_get, &o[N + i]), 0);
	}
	for (int i = 0; i < N; i++) {
		assert_int_equal(bthread_join(b[i], NULL), 0);
		assert_int_equal(pthread_join(p[i], NULL), 0);
	}
	assert_int_equal(dtor_calls, 2 * N); /* every bthread and pthread at its exit */
	/* The main thread's value is its own. */
	assert_null(bthread_getspecific(k));
	assert_int_equal(bthread_setspecific(k, &k), 0);
	assert_ptr_equal(bthread_getspecific(k), &k);
	assert_int_equal(bthread_setspecific(k, NULL), 0);
	assert_int_equal(bthread_key_delete(k), 0);
	STB_TEST_END();
}

static void test_invalid_and_reused_keys(void **state)
{
	(void)state;
	bthread_key_t k, k2;
	assert_int_equal(bthread_key_create(&k, NULL), 0);
	assert_int_equal(bthread_setspecific(k, (void *)1), 0);
	bthread_key_t bad = {k.index, k.version + 7};
	assert_int_equal(bthread_setspecific(bad, (void *)2), EINVAL);
	assert_null(bthread_getspecific(bad));
	assert_int_equal(bthread_setspecific(INVALID_BTHREAD_KEY, (void *)2), EINVAL);
	assert_int_equal(bthread_key_delete(k), 0);
	assert_int_equal(bthread_key_delete(k), EINVAL);
	assert_null(bthread_getspecific(k)); /* a deleted key's value is gone */
	assert_int_equal(bthread_setspecific(k, (void *)3), EINVAL);
	assert_int_equal(bthread_key_create(&k2, NULL), 0);
	assert_int_equal(k2.index, k.index);
	assert_true(k2.version != k.version);
	assert_null(bthread_getspecific(k2));
	assert_int_equal(bthread_key_delete(k2), 0);
	assert_int_equal(bthread_key_create(NULL, NULL), EINVAL);
}

static bthread_key_t again_key;
static int again_rounds;
static void set_again(void *p)
{
	STB_EXPECT(bthread_getspecific(again_key) == NULL);
	if (__atomic_add_fetch(&again_rounds, 1, __ATOMIC_ACQ_REL) % 10 < 3)
		STB_EXPECT_EQ(bthread_setspecific(again_key, p), 0);
}

static void *set_once(void *arg)
{
	STB_EXPECT_EQ(bthread_setspecific(again_key, arg), 0);
	return NULL;
}

static void test_dtor_sets_again(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	assert_int_equal(bthread_key_create(&again_key, set_again), 0);
	const bthread_attr_t *attrs[2] = {NULL, &BTHREAD_ATTR_PTHREAD};
	for (int i = 0; i < 2; i++) {
		again_rounds = 0;
		bthread_t b;
		assert_int_equal(bthread_start_background(&b, attrs[i], set_once, &again_rounds), 0);
		assert_int_equal(bthread_join(b, NULL), 0);
		assert_int_equal(again_rounds, 3); /* set twice more, then left NULL */
	}
	again_rounds = 0;
	pthread_t p;
	assert_int_equal(pthread_create(&p, NULL, set_once, &again_rounds), 0);
	assert_int_equal(pthread_join(p, NULL), 0);
	assert_int_equal(again_rounds, 3);
	assert_int_equal(bthread_key_delete(again_key), 0);
	STB_TEST_END();
}

static const void *dtor2_arg;
static void dtor2(void *p, const void *arg)
{
	(void)p;
	dtor2_arg = arg;
}

static void test_create2_and_limit(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	bthread_key_t k;
	static int marker;
	assert_int_equal(bthread_key_create2(&k, dtor2, &marker), 0);
	bthread_t b;
	assert_int_equal(bthread_start_background(&b, NULL, set_get, &(struct own){k, &k}), 0);
	assert_int_equal(bthread_join(b, NULL), 0);
	assert_ptr_equal(dtor2_arg, &marker);
	assert_int_equal(bthread_key_delete(k), 0);
	/* 992 keys at most (bRPC's limit), then EAGAIN; deleting gives them back. */
	static bthread_key_t all[1000];
	int n = 0;
	while (n < 1000 && bthread_key_create(&all[n], NULL) == 0)
		n++;
	assert_int_equal(n, 992);
	assert_int_equal(bthread_key_create(&k, NULL), EAGAIN);
	for (int i = 0; i < n; i++)
		assert_int_equal(bthread_key_delete(all[i]), 0);
	assert_int_equal(bthread_key_create(&k, NULL), 0);
	assert_int_equal(bthread_key_delete(k), 0);
	STB_TEST_END();
}

static bthread_key_t pool_key;
static void *pool_user(void *arg)
{
	void **expect = arg;
	STB_EXPECT(bthread_getspecific(pool_key) == expect[0]);
	if (!expect[0])
		STB_EXPECT_EQ(bthread_setspecific(pool_key, expect[1]), 0);
	return NULL;
}

static void *make_value(const void *args)
{
	return (void *)args;
}

static void test_pool(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	assert_int_equal(bthread_key_create(&pool_key, count_dtor), 0);
	dtor_calls = 0;
	bthread_keytable_pool_t pool;
	bthread_keytable_pool_stat_t st;
	assert_int_equal(bthread_keytable_pool_init(&pool), 0);
	assert_int_equal(bthread_keytable_pool_getstat(&pool, &st), 0);
	assert_int_equal(st.nfree, 0);
	bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
	attr.keytable_pool = &pool;
	void *first[2] = {NULL, (void *)0x11};
	bthread_t b;
	assert_int_equal(bthread_start_background(&b, &attr, pool_user, first), 0);
	assert_int_equal(bthread_join(b, NULL), 0);
	assert_int_equal(dtor_calls, 0); /* the table went back to the pool */
	assert_int_equal(bthread_keytable_pool_getstat(&pool, &st), 0);
	assert_int_equal(st.nfree, 1);
	void *second[2] = {(void *)0x11, NULL};
	attr.stack_type = BTHREAD_STACKTYPE_PTHREAD;
	assert_int_equal(bthread_start_background(&b, &attr, pool_user, second), 0);
	assert_int_equal(bthread_join(b, NULL), 0);
	assert_int_equal(bthread_keytable_pool_getstat(&pool, &st), 0);
	assert_int_equal(st.nfree, 1);
	bthread_keytable_pool_reserve(&pool, 3, pool_key, make_value, (void *)0x22);
	assert_int_equal(bthread_keytable_pool_getstat(&pool, &st), 0);
	assert_int_equal(st.nfree, 3);
	assert_int_equal(get_thread_local_keytable_list_length(&pool), 0);
	assert_int_equal(bthread_keytable_pool_destroy(&pool), 0);
	assert_int_equal(dtor_calls, 3); /* destroy ran the tables' destructors */
	assert_int_equal(bthread_keytable_pool_getstat(&pool, &st), 0);
	assert_int_equal(st.nfree, 0);
	/* A bthread of a destroyed pool frees its own table at exit. */
	attr.stack_type = BTHREAD_STACKTYPE_NORMAL;
	void *third[2] = {NULL, (void *)0x33};
	assert_int_equal(bthread_start_background(&b, &attr, pool_user, third), 0);
	assert_int_equal(bthread_join(b, NULL), 0);
	assert_int_equal(dtor_calls, 4);
	assert_int_equal(bthread_key_delete(pool_key), 0);
	assert_int_equal(bthread_keytable_pool_init(NULL), EINVAL);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_per_thread_values_and_dtors),
		cmocka_unit_test(test_invalid_and_reused_keys),
		cmocka_unit_test(test_dtor_sets_again),
		cmocka_unit_test(test_create2_and_limit),
		cmocka_unit_test(test_pool),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
