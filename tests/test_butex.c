/* SPDX-License-Identifier: Apache-2.0 */
/*
 * butex: wake counts (one, all, none), EWOULDBLOCK when the value differs,
 * ETIMEDOUT with an abstime, and waiters from bthreads and pthreads mixed.
 * Links the static library to count the waiters queued on a butex, so that
 * every wake count is exact rather than timing-dependent.
 */
#include "test_util.h"

#include <pthread.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>

#include "test_internal.h"

#define STB_WAIT_WAITERS(butex, n) STB_WAIT_UNTIL(stb_test_butex_waiters(butex) == (n), 5000)

/* One waiter's job: wait on butex for expected, record what happened. */
struct stb_waiter_job {
	int *butex;
	int expected;
	int timeout_ms;    /* 0: no abstime; < 0: an abstime 1 s in the past */
	int rc;            /* butex_wait's return */
	int err;           /* errno when rc == -1 */
	double waited_ms;
	int done;
};

static void *stb_waiter_run(void *arg)
{
	struct stb_waiter_job *j = arg;
	struct timespec abs;
	if (j->timeout_ms > 0) {
		abs = stb_realtime_after_ms((uint64_t)j->timeout_ms);
	} else if (j->timeout_ms < 0) {
		clock_gettime(CLOCK_REALTIME, &abs);
		abs.tv_sec -= 1;
	}
	uint64_t t0 = stb_now_ns();
	j->rc = butex_wait(j->butex, j->expected, j->timeout_ms ? &abs : NULL);
	j->err = j->rc ? stb_test_errno() : 0;
	j->waited_ms = stb_test_ms_since(t0);
	__atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Runs a waiter job in a bthread (kind 0) or a pthread (kind 1). */
struct stb_runner {
	int kind;
	bthread_t bt;
	pthread_t pt;
};

static void stb_runner_start(struct stb_runner *r, int kind, struct stb_waiter_job *j)
{
	r->kind = kind;
	if (kind == 0)
		assert_int_equal(bthread_start_background(&r->bt, &BTHREAD_ATTR_SMALL, stb_waiter_run, j),
				 0);
	else
		assert_int_equal(pthread_create(&r->pt, NULL, stb_waiter_run, j), 0);
}

static void stb_runner_join(struct stb_runner *r)
{
	if (r->kind == 0)
		assert_int_equal(bthread_join(r->bt, NULL), 0);
	else
		assert_int_equal(pthread_join(r->pt, NULL), 0);
}

static int stb_jobs_done(const struct stb_waiter_job *jobs, int n)
{
	int d = 0;
	for (int i = 0; i < n; i++)
		d += __atomic_load_n(&jobs[i].done, __ATOMIC_ACQUIRE);
	return d;
}

static void test_create_and_value(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	int *b = butex_create();
	assert_non_null(b);
	assert_int_equal(*b, 0);
	/* Wakes without waiters wake nobody. */
	assert_int_equal(butex_wake(b), 0);
	assert_int_equal(butex_wake_all(b), 0);
	assert_int_equal(butex_wake(NULL), 0);
	errno = 0;
	assert_int_equal(butex_wait(NULL, 0, NULL), -1);
	assert_int_equal(errno, EINVAL);
	butex_destroy(b);
	butex_destroy(NULL);
	STB_TEST_END();
}

static void test_wouldblock(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	int *b = butex_create();
	assert_non_null(b);
	__atomic_store_n(b, 5, __ATOMIC_RELEASE);
	/* From this pthread. */
	errno = 0;
	assert_int_equal(butex_wait(b, 4, NULL), -1);
	assert_int_equal(errno, EWOULDBLOCK);
	/* From a bthread, also with an abstime. */
	struct stb_waiter_job j[2] = {{.butex = b, .expected = 0},
				      {.butex = b, .expected = 6, .timeout_ms = 5000}};
	struct stb_runner r[2];
	for (int i = 0; i < 2; i++) {
		stb_runner_start(&r[i], 0, &j[i]);
		stb_runner_join(&r[i]);
		assert_int_equal(j[i].rc, -1);
		assert_int_equal(j[i].err, EWOULDBLOCK);
		assert_true(j[i].waited_ms < 1000.0);
	}
	assert_int_equal(stb_test_butex_waiters(b), 0);
	butex_destroy(b);
	STB_TEST_END();
}

static void test_timeout(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	int *b = butex_create();
	assert_non_null(b);
	/* A bthread and a pthread, 50 ms each, at the same time. */
	struct stb_waiter_job j[2] = {{.butex = b, .timeout_ms = 50}, {.butex = b, .timeout_ms = 50}};
	struct stb_runner r[2];
	for (int i = 0; i < 2; i++)
		stb_runner_start(&r[i], i, &j[i]);
	for (int i = 0; i < 2; i++) {
		stb_runner_join(&r[i]);
		assert_int_equal(j[i].rc, -1);
		assert_int_equal(j[i].err, ETIMEDOUT);
		assert_true(j[i].waited_ms >= 49.0);
		assert_true(j[i].waited_ms < 1000.0);
	}
	/* A deadline in the past times out at once, from both kinds. */
	for (int i = 0; i < 2; i++) {
		struct stb_waiter_job past = {.butex = b, .timeout_ms = -1};
		stb_runner_start(&r[i], i, &past);
		stb_runner_join(&r[i]);
		assert_int_equal(past.rc, -1);
		assert_int_equal(past.err, ETIMEDOUT);
		assert_true(past.waited_ms < 1000.0);
	}
	/* A timed-out waiter left nothing queued behind. */
	assert_int_equal(stb_test_butex_waiters(b), 0);
	assert_int_equal(butex_wake_all(b), 0);
	butex_destroy(b);
	STB_TEST_END();
}

/* butex_wake wakes exactly one waiter; wake_all returns how many it woke. */
static void test_wake_counts(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	enum { N = 16 };
	int *b = butex_create();
	assert_non_null(b);
	/* One waiter. */
	struct stb_waiter_job one = {.butex = b};
	struct stb_runner r1;
	stb_runner_start(&r1, 0, &one);
	assert_true(STB_WAIT_WAITERS(b, 1));
	assert_int_equal(butex_wake(b), 1);
	stb_runner_join(&r1);
	assert_int_equal(one.rc, 0);
	assert_int_equal(butex_wake(b), 0);

	/* N waiters: wake takes one at a time, wake_all the rest. */
	struct stb_waiter_job jobs[N];
	struct stb_runner rs[N];
	memset(jobs, 0, sizeof(jobs));
	for (int i = 0; i < N; i++) {
		jobs[i].butex = b;
		stb_runner_start(&rs[i], 0, &jobs[i]);
	}
	assert_true(STB_WAIT_WAITERS(b, N));
	for (int k = 1; k <= 3; k++) {
		assert_int_equal(butex_wake(b), 1);
		assert_true(STB_WAIT_UNTIL(stb_jobs_done(jobs, N) == k, 5000));
		stb_test_sleep_ms(20);
		assert_int_equal(stb_jobs_done(jobs, N), k);
		assert_int_equal(stb_test_butex_waiters(b), N - k);
	}
	assert_int_equal(butex_wake_all(b), N - 3);
	for (int i = 0; i < N; i++) {
		stb_runner_join(&rs[i]);
		assert_int_equal(jobs[i].rc, 0);
	}
	assert_int_equal(butex_wake_all(b), 0);
	butex_destroy(b);
	STB_TEST_END();
}

/* 5,000 bthreads (300 under TSan) parked on one butex are all woken by one wake_all. */
static void test_wake_all_many(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	enum { N = STB_TEST_TSAN_SCALE(5000, 300) };
	int *b = butex_create();
	assert_non_null(b);
	struct stb_waiter_job *jobs = calloc(N, sizeof(*jobs));
	struct stb_runner *rs = calloc(N, sizeof(*rs));
	assert_non_null(jobs);
	assert_non_null(rs);
	for (int i = 0; i < N; i++) {
		jobs[i].butex = b;
		stb_runner_start(&rs[i], 0, &jobs[i]);
	}
	assert_true(STB_WAIT_UNTIL(stb_test_butex_waiters(b) == N, 10000));
	assert_int_equal(butex_wake_all(b), N);
	for (int i = 0; i < N; i++) {
		stb_runner_join(&rs[i]);
		assert_int_equal(jobs[i].rc, 0);
	}
	free(jobs);
	free(rs);
	butex_destroy(b);
	STB_TEST_END();
}

/* Waiters of both kinds on one butex; woken from a pthread and from a bthread. */
struct stb_waker_job {
	int *butex;
	int all;
	int woken;
};

static void *stb_waker_run(void *arg)
{
	struct stb_waker_job *w = arg;
	__atomic_store_n(w->butex, 1, __ATOMIC_RELEASE);
	w->woken = w->all ? butex_wake_all(w->butex) : butex_wake(w->butex);
	return NULL;
}

static void test_mixed_waiters(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	enum { N = 8 };
	for (int round = 0; round < 4; round++) {
		int *b = butex_create();
		assert_non_null(b);
		struct stb_waiter_job jobs[N];
		struct stb_runner rs[N];
		memset(jobs, 0, sizeof(jobs));
		for (int i = 0; i < N; i++) {
			jobs[i].butex = b;
			jobs[i].timeout_ms = (round & 2) ? 10000 : 0; /* timed waits too */
			stb_runner_start(&rs[i], i & 1, &jobs[i]);
		}
		assert_true(STB_WAIT_WAITERS(b, N));
		/* Rounds 0 and 2 wake from a bthread, 1 and 3 from a pthread. */
		struct stb_waker_job wk = {.butex = b, .all = 1};
		if (round & 1) {
			pthread_t pt;
			assert_int_equal(pthread_create(&pt, NULL, stb_waker_run, &wk), 0);
			assert_int_equal(pthread_join(pt, NULL), 0);
		} else {
			bthread_t bt;
			assert_int_equal(bthread_start_urgent(&bt, NULL, stb_waker_run, &wk), 0);
			assert_int_equal(bthread_join(bt, NULL), 0);
		}
		assert_int_equal(wk.woken, N);
		for (int i = 0; i < N; i++) {
			stb_runner_join(&rs[i]);
			assert_int_equal(jobs[i].rc, 0);
			assert_true(jobs[i].waited_ms < 5000.0);
		}
		assert_int_equal(stb_test_butex_waiters(b), 0);
		butex_destroy(b);
	}
	STB_TEST_END();
}

/* Pthread and bthread waiters woken one at a time: one per butex_wake. */
static void test_wake_one_mixed(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	enum { N = 6 };
	int *b = butex_create();
	assert_non_null(b);
	struct stb_waiter_job jobs[N];
	struct stb_runner rs[N];
	memset(jobs, 0, sizeof(jobs));
	for (int i = 0; i < N; i++) {
		jobs[i].butex = b;
		stb_runner_start(&rs[i], i % 2, &jobs[i]);
	}
	assert_true(STB_WAIT_WAITERS(b, N));
	for (int i = 0; i < N; i++) {
		assert_int_equal(butex_wake(b), 1);
		assert_true(STB_WAIT_UNTIL(stb_jobs_done(jobs, N) == i + 1, 5000));
		stb_test_sleep_ms(10);
		assert_int_equal(stb_jobs_done(jobs, N), i + 1);
		assert_int_equal(stb_test_butex_waiters(b), N - i - 1);
	}
	assert_int_equal(butex_wake(b), 0);
	for (int i = 0; i < N; i++) {
		stb_runner_join(&rs[i]);
		assert_int_equal(jobs[i].rc, 0);
	}
	butex_destroy(b);
	STB_TEST_END();
}

/* A timed waiter woken just before its deadline reports 0, not ETIMEDOUT. */
static void test_wake_before_timeout(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	int *b = butex_create();
	assert_non_null(b);
	for (int kind = 0; kind < 2; kind++) {
		struct stb_waiter_job j = {.butex = b, .timeout_ms = 2000};
		struct stb_runner r;
		stb_runner_start(&r, kind, &j);
		assert_true(STB_WAIT_WAITERS(b, 1));
		assert_int_equal(butex_wake(b), 1);
		stb_runner_join(&r);
		assert_int_equal(j.rc, 0);
		assert_true(j.waited_ms < 1500.0);
	}
	butex_destroy(b);
	STB_TEST_END();
}

/*
 * bthread_stop ends a butex_wait at once with EINTR, in a bthread on its own
 * stack and in a BTHREAD_ATTR_PTHREAD one (which waits on its worker's
 * stack), whether the stop comes while it waits or before it starts waiting.
 */
static void test_stop_interrupts_wait(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	int *b = butex_create();
	assert_non_null(b);
	const bthread_attr_t *attrs[2] = {&BTHREAD_ATTR_SMALL, &BTHREAD_ATTR_PTHREAD};
	for (int k = 0; k < 2; k++) {
		struct stb_waiter_job j = {.butex = b, .timeout_ms = 5000};
		bthread_t t;
		assert_int_equal(bthread_start_background(&t, attrs[k], stb_waiter_run, &j), 0);
		assert_true(STB_WAIT_WAITERS(b, 1));
		assert_int_equal(bthread_stop(t), 0);
		assert_int_equal(bthread_join(t, NULL), 0);
		assert_int_equal(j.rc, -1);
		assert_int_equal(j.err, EINTR);
		assert_true(j.waited_ms < 1000.0);
		assert_int_equal(stb_test_butex_waiters(b), 0);
	}
	butex_destroy(b);
	STB_TEST_END();
}

/* A stopped bthread's next butex_wait returns EINTR without sleeping. */
struct stb_stop_self_job {
	int *butex;
	int rc, err;
};

static void *stb_stop_self_run(void *arg)
{
	struct stb_stop_self_job *j = arg;
	bthread_stop(bthread_self());
	struct timespec abs = stb_realtime_after_ms(5000);
	j->rc = butex_wait(j->butex, 0, &abs);
	j->err = j->rc ? stb_test_errno() : 0;
	return NULL;
}

static void test_stop_before_wait(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	int *b = butex_create();
	assert_non_null(b);
	const bthread_attr_t *attrs[2] = {&BTHREAD_ATTR_SMALL, &BTHREAD_ATTR_PTHREAD};
	for (int k = 0; k < 2; k++) {
		struct stb_stop_self_job j = {.butex = b};
		bthread_t t;
		uint64_t t0 = stb_now_ns();
		assert_int_equal(bthread_start_background(&t, attrs[k], stb_stop_self_run, &j), 0);
		assert_int_equal(bthread_join(t, NULL), 0);
		assert_true(stb_test_ms_since(t0) < 1000.0);
		assert_int_equal(j.rc, -1);
		assert_int_equal(j.err, EINTR);
	}
	butex_destroy(b);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_and_value),
		cmocka_unit_test(test_wouldblock),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_wake_counts),
		cmocka_unit_test(test_wake_all_many),
		cmocka_unit_test(test_mixed_waiters),
		cmocka_unit_test(test_wake_one_mixed),
		cmocka_unit_test(test_wake_before_timeout),
		cmocka_unit_test(test_stop_interrupts_wait),
		cmocka_unit_test(test_stop_before_wait),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
