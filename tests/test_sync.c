/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_mutex_t and bthread_cond_t: exclusion under contention (a counter
 * that loses updates without it), trylock/timedlock results, EINVAL when
 * uninitialized, signal waking exactly one waiter, broadcast all, timedwait
 * timing, the mutex held when a wait returns; bRPC's lock word values, the
 * owner word and the published MUTEX wait (owner, owner word address),
 * mutex attributes. Links the static library to
 * count the waiters queued on a cond.
 */
#include "test_util.h"

#include <pthread.h>

#include <bthread/bthread.h>

#include "sync_util.h"

/* Waiters queued on the butex behind a bthread_cond_t. */
static int stb_test_cond_waiters(const bthread_cond_t *c)
{
	return stb_test_butex_waiters(c->seq);
}

/* Waiters queued on the butex behind a bthread_mutex_t. */
static int stb_test_mutex_waiters(const bthread_mutex_t *m)
{
	return stb_test_butex_waiters(m->butex);
}

/* A mutex is locked (by anyone) iff its word is not 0. */
static bool stb_test_mutex_locked(const bthread_mutex_t *m)
{
	return __atomic_load_n(m->butex, __ATOMIC_ACQUIRE) != 0;
}

/* ---- mutual exclusion ---- */

static bthread_mutex_t stb_cnt_mutex;
static long stb_cnt_value; /* plain: only the mutex protects it */
static int stb_cnt_inside;

struct stb_cnt_args {
	long iters;
	int yield_every; /* yield inside the critical section every n increments */
};

static void *stb_cnt_worker(void *arg)
{
	const struct stb_cnt_args *a = arg;
	for (long i = 0; i < a->iters; i++) {
		int rc = bthread_mutex_lock(&stb_cnt_mutex);
		if (rc != 0) {
			stb_test_record_fail(__FILE__, __LINE__, "lock rc %d", rc);
			return NULL;
		}
		STB_EXPECT_EQ(__atomic_fetch_add(&stb_cnt_inside, 1, __ATOMIC_ACQ_REL), 0);
		/* Read, give up the CPU, write back: any overlap loses an update. */
		long v = stb_cnt_value;
		if (i % a->yield_every == 0)
			bthread_yield();
		stb_cnt_value = v + 1;
		__atomic_fetch_sub(&stb_cnt_inside, 1, __ATOMIC_ACQ_REL);
		STB_EXPECT_EQ(bthread_mutex_unlock(&stb_cnt_mutex), 0);
	}
	return NULL;
}

static void test_mutex_counter_exact(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	enum { NTHREADS = 100 };
	struct stb_cnt_args args = {.iters = STB_TEST_TSAN_SCALE(10000, 1000), .yield_every = 1};
	assert_int_equal(bthread_mutex_init(&stb_cnt_mutex, NULL), 0);
	stb_cnt_value = 0;
	bthread_t t[NTHREADS];
	uint64_t t0 = stb_now_ns();
	/* Held while starting: no bthread can finish (and free its slot) early. */
	assert_int_equal(bthread_mutex_lock(&stb_cnt_mutex), 0);
	for (int i = 0; i < NTHREADS; i++)
		assert_int_equal(bthread_start_background(&t[i], &BTHREAD_ATTR_SMALL, stb_cnt_worker,
							  &args),
				 0);
	assert_int_equal(bthread_mutex_unlock(&stb_cnt_mutex), 0);
	for (int i = 0; i < NTHREADS; i++)
		assert_int_equal(bthread_join(t[i], NULL), 0);
	print_message("    %d bthreads x %ld locked increments (yield inside): %.0f ms\n", NTHREADS,
		      args.iters, stb_test_ms_since(t0));
	assert_int_equal(stb_cnt_value, NTHREADS * args.iters);
	assert_false(stb_test_mutex_locked(&stb_cnt_mutex));
	assert_int_equal(bthread_mutex_destroy(&stb_cnt_mutex), 0);
	STB_TEST_END();
}

static void *stb_cnt_pthread(void *arg)
{
	return stb_cnt_worker(arg);
}

/* The same mutex shared by bthreads and pthreads. */
static void test_mutex_counter_mixed(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	enum { NB = 20, NP = 3 };
	struct stb_cnt_args args = {.iters = STB_TEST_TSAN_SCALE(5000, 500), .yield_every = 4};
	assert_int_equal(bthread_mutex_init(&stb_cnt_mutex, NULL), 0);
	stb_cnt_value = 0;
	bthread_t bt[NB];
	pthread_t pt[NP];
	assert_int_equal(bthread_mutex_lock(&stb_cnt_mutex), 0);
	for (int i = 0; i < NP; i++)
		assert_int_equal(pthread_create(&pt[i], NULL, stb_cnt_pthread, &args), 0);
	for (int i = 0; i < NB; i++)
		assert_int_equal(bthread_start_background(&bt[i], NULL, stb_cnt_worker, &args), 0);
	assert_int_equal(bthread_mutex_unlock(&stb_cnt_mutex), 0);
	for (int i = 0; i < NB; i++)
		assert_int_equal(bthread_join(bt[i], NULL), 0);
	for (int i = 0; i < NP; i++)
		assert_int_equal(pthread_join(pt[i], NULL), 0);
	assert_int_equal(stb_cnt_value, (NB + NP) * args.iters);
	assert_int_equal(bthread_mutex_destroy(&stb_cnt_mutex), 0);
	STB_TEST_END();
}

/* ---- trylock, timedlock ---- */

struct stb_lock_job {
	bthread_mutex_t *m;
	int op;          /* 0 trylock, 1 timedlock */
	int timeout_ms;
	int rc;
	double took_ms;
	bool held_after; /* the mutex was locked when the call returned */
};

static void *stb_lock_job_run(void *arg)
{
	struct stb_lock_job *j = arg;
	uint64_t t0 = stb_now_ns();
	if (j->op == 0) {
		j->rc = bthread_mutex_trylock(j->m);
	} else {
		struct timespec abs = stb_realtime_after_ms((uint64_t)j->timeout_ms);
		j->rc = bthread_mutex_timedlock(j->m, &abs);
	}
	j->took_ms = stb_test_ms_since(t0);
	j->held_after = stb_test_mutex_locked(j->m);
	if (j->rc == 0)
		STB_EXPECT_EQ(bthread_mutex_unlock(j->m), 0);
	return NULL;
}

/* Runs a lock job in a bthread (kind 0) or a pthread (kind 1) and waits for it. */
static void stb_lock_job_do(struct stb_lock_job *j, int kind)
{
	if (kind == 0) {
		bthread_t t;
		assert_int_equal(bthread_start_background(&t, NULL, stb_lock_job_run, j), 0);
		assert_int_equal(bthread_join(t, NULL), 0);
	} else {
		pthread_t t;
		assert_int_equal(pthread_create(&t, NULL, stb_lock_job_run, j), 0);
		assert_int_equal(pthread_join(t, NULL), 0);
	}
}

static void test_trylock(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	bthread_mutex_t m;
	assert_int_equal(bthread_mutex_init(&m, NULL), 0);
	assert_int_equal(bthread_mutex_trylock(&m), 0);
	/* Not recursive: the holder gets EBUSY too. */
	assert_int_equal(bthread_mutex_trylock(&m), EBUSY);
	for (int kind = 0; kind < 2; kind++) {
		struct stb_lock_job j = {.m = &m, .op = 0};
		stb_lock_job_do(&j, kind);
		assert_int_equal(j.rc, EBUSY);
	}
	assert_int_equal(bthread_mutex_unlock(&m), 0);
	for (int kind = 0; kind < 2; kind++) {
		struct stb_lock_job j = {.m = &m, .op = 0};
		stb_lock_job_do(&j, kind);
		assert_int_equal(j.rc, 0);
		assert_true(j.held_after);
	}
	assert_false(stb_test_mutex_locked(&m));
	assert_int_equal(bthread_mutex_destroy(&m), 0);
	STB_TEST_END();
}

static void test_timedlock(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	bthread_mutex_t m;
	assert_int_equal(bthread_mutex_init(&m, NULL), 0);
	assert_int_equal(bthread_mutex_lock(&m), 0);
	for (int kind = 0; kind < 2; kind++) {
		struct stb_lock_job j = {.m = &m, .op = 1, .timeout_ms = 50};
		stb_lock_job_do(&j, kind);
		assert_int_equal(j.rc, ETIMEDOUT);
		assert_true(j.took_ms >= 49.0);
		assert_true(j.took_ms < 1000.0);
	}
	/* An abstime in the past on a locked mutex: at once. */
	struct timespec past;
	clock_gettime(CLOCK_REALTIME, &past);
	past.tv_sec -= 1;
	assert_int_equal(bthread_mutex_timedlock(&m, &past), ETIMEDOUT);
	/* Released before the deadline: the blocked waiter gets it. */
	struct stb_lock_job j = {.m = &m, .op = 1, .timeout_ms = 5000};
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_lock_job_run, &j), 0);
	assert_true(STB_WAIT_UNTIL(stb_test_mutex_waiters(&m) == 1, 5000));
	stb_test_sleep_ms(20);
	assert_int_equal(bthread_mutex_unlock(&m), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(j.rc, 0);
	assert_true(j.took_ms >= 20.0);
	assert_true(j.took_ms < 4000.0);
	/* Free mutex: timedlock takes it at once; NULL abstime waits forever. */
	assert_int_equal(bthread_mutex_timedlock(&m, &past), 0);
	assert_int_equal(bthread_mutex_unlock(&m), 0);
	assert_int_equal(bthread_mutex_timedlock(&m, NULL), 0);
	assert_int_equal(bthread_mutex_unlock(&m), 0);
	assert_int_equal(bthread_mutex_destroy(&m), 0);
	STB_TEST_END();
}

static void test_uninitialized(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	bthread_mutex_t m;
	memset(&m, 0, sizeof(m));
	struct timespec abs = stb_realtime_after_ms(10);
	assert_int_equal(bthread_mutex_lock(&m), EINVAL);
	assert_int_equal(bthread_mutex_trylock(&m), EINVAL);
	assert_int_equal(bthread_mutex_timedlock(&m, &abs), EINVAL);
	assert_int_equal(bthread_mutex_unlock(&m), EINVAL);
	assert_int_equal(bthread_mutex_destroy(&m), EINVAL);
	assert_int_equal(bthread_mutex_lock(NULL), EINVAL);
	assert_int_equal(bthread_mutex_init(NULL, NULL), EINVAL);
	/* Destroyed counts as uninitialized. */
	assert_int_equal(bthread_mutex_init(&m, NULL), 0);
	assert_int_equal(bthread_mutex_destroy(&m), 0);
	assert_int_equal(bthread_mutex_lock(&m), EINVAL);

	bthread_cond_t c;
	memset(&c, 0, sizeof(c));
	bthread_mutex_t ok;
	assert_int_equal(bthread_mutex_init(&ok, NULL), 0);
	assert_int_equal(bthread_mutex_lock(&ok), 0);
	assert_int_equal(bthread_cond_wait(&c, &ok), EINVAL);
	assert_int_equal(bthread_cond_timedwait(&c, &ok, &abs), EINVAL);
	assert_int_equal(bthread_cond_signal(&c), EINVAL);
	assert_int_equal(bthread_cond_broadcast(&c), EINVAL);
	assert_int_equal(bthread_cond_destroy(&c), EINVAL);
	assert_int_equal(bthread_cond_init(NULL, NULL), EINVAL);
	/* A valid cond with an uninitialized mutex. */
	assert_int_equal(bthread_cond_init(&c, NULL), 0);
	assert_int_equal(bthread_cond_timedwait(&c, &m, &abs), EINVAL);
	/* The failed waits left ok locked and untouched. */
	assert_true(stb_test_mutex_locked(&ok));
	assert_int_equal(bthread_mutex_unlock(&ok), 0);
	assert_int_equal(bthread_cond_destroy(&c), 0);
	assert_int_equal(bthread_cond_signal(&c), EINVAL);
	assert_int_equal(bthread_mutex_destroy(&ok), 0);
	STB_TEST_END();
}

/*
 * The first wait binds a cond to its mutex (as bRPC): a wait with another
 * mutex fails with EINVAL at once, that mutex still locked, also after the
 * first waiter left; the bound one keeps working.
 */
static void *stb_cond_timed_waiter(void *arg)
{
	bthread_cond_t *c = ((void **)arg)[0];
	bthread_mutex_t *m = ((void **)arg)[1];
	bthread_mutex_lock(m);
	struct timespec abs = stb_realtime_after_ms(20);
	intptr_t rc = bthread_cond_timedwait(c, m, &abs);
	bthread_mutex_unlock(m);
	return (void *)rc;
}

static void test_cond_binds_mutex(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	bthread_cond_t c;
	bthread_mutex_t m1, m2;
	assert_int_equal(bthread_cond_init(&c, NULL), 0);
	assert_int_equal(bthread_mutex_init(&m1, NULL), 0);
	assert_int_equal(bthread_mutex_init(&m2, NULL), 0);
	void *args[2] = {&c, &m1};
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_cond_timed_waiter, args), 0);
	void *rc = NULL;
	assert_int_equal(bthread_join(t, &rc), 0);
	assert_int_equal((intptr_t)rc, ETIMEDOUT);
	/* Bound to m1 now (its waiter left long ago). */
	assert_int_equal(bthread_mutex_lock(&m2), 0);
	struct timespec abs = stb_realtime_after_ms(5000);
	uint64_t t0 = stb_now_ns();
	assert_int_equal(bthread_cond_timedwait(&c, &m2, &abs), EINVAL);
	assert_int_equal(bthread_cond_wait(&c, &m2), EINVAL);
	assert_true(stb_test_ms_since(t0) < 1000.0);
	assert_true(stb_test_mutex_locked(&m2));
	assert_int_equal(bthread_mutex_unlock(&m2), 0);
	assert_int_equal(bthread_mutex_lock(&m1), 0);
	abs = stb_realtime_after_ms(10);
	assert_int_equal(bthread_cond_timedwait(&c, &m1, &abs), ETIMEDOUT);
	assert_true(stb_test_mutex_locked(&m1));
	assert_int_equal(bthread_mutex_unlock(&m1), 0);
	assert_int_equal(bthread_cond_destroy(&c), 0);
	assert_int_equal(bthread_mutex_destroy(&m1), 0);
	assert_int_equal(bthread_mutex_destroy(&m2), 0);
	STB_TEST_END();
}

/* ---- condition variable ---- */

struct stb_cv {
	bthread_mutex_t m;
	bthread_cond_t c;
	int entered; /* waiters that reached the wait */
	int woke;    /* waiters that returned from one wait */
	int inside;  /* holders of m among the waiters (must stay <= 1) */
	int bad_unlocked;
};

static void *stb_cv_waiter(void *arg)
{
	struct stb_cv *s = arg;
	STB_EXPECT_EQ(bthread_mutex_lock(&s->m), 0);
	__atomic_fetch_add(&s->entered, 1, __ATOMIC_ACQ_REL);
	/* One wait, no predicate loop: this counts raw wake-ups. */
	STB_EXPECT_EQ(bthread_cond_wait(&s->c, &s->m), 0);
	if (!stb_test_mutex_locked(&s->m))
		__atomic_fetch_add(&s->bad_unlocked, 1, __ATOMIC_ACQ_REL);
	STB_EXPECT_EQ(__atomic_fetch_add(&s->inside, 1, __ATOMIC_ACQ_REL), 0);
	__atomic_fetch_add(&s->woke, 1, __ATOMIC_ACQ_REL);
	bthread_yield(); /* hold the mutex across a switch */
	__atomic_fetch_sub(&s->inside, 1, __ATOMIC_ACQ_REL);
	STB_EXPECT_EQ(bthread_mutex_unlock(&s->m), 0);
	return NULL;
}

static void *stb_cv_waiter_pthread(void *arg)
{
	return stb_cv_waiter(arg);
}

static void stb_cv_init(struct stb_cv *s)
{
	memset(s, 0, sizeof(*s));
	assert_int_equal(bthread_mutex_init(&s->m, NULL), 0);
	assert_int_equal(bthread_cond_init(&s->c, NULL), 0);
}

static void stb_cv_destroy(struct stb_cv *s)
{
	assert_int_equal(bthread_cond_destroy(&s->c), 0);
	assert_int_equal(bthread_mutex_destroy(&s->m), 0);
}

static int stb_load(const int *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* Signal wakes exactly one of N queued waiters, and only once the mutex is free. */
static void test_cond_signal_wakes_one(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	enum { N = 8 };
	static struct stb_cv s;
	stb_cv_init(&s);
	bthread_t t[N];
	for (int i = 0; i < N; i++)
		assert_int_equal(bthread_start_background(&t[i], &BTHREAD_ATTR_SMALL, stb_cv_waiter, &s),
				 0);
	assert_true(STB_WAIT_UNTIL(stb_test_cond_waiters(&s.c) == N, 5000));
	assert_int_equal(stb_load(&s.entered), N);
	for (int k = 1; k <= 3; k++) {
		/* Signal while holding the mutex: the woken one must wait for it. */
		assert_int_equal(bthread_mutex_lock(&s.m), 0);
		assert_int_equal(bthread_cond_signal(&s.c), 0);
		stb_test_sleep_ms(20);
		assert_int_equal(stb_load(&s.woke), k - 1);
		assert_int_equal(bthread_mutex_unlock(&s.m), 0);
		assert_true(STB_WAIT_UNTIL(stb_load(&s.woke) == k, 5000));
		stb_test_sleep_ms(20);
		assert_int_equal(stb_load(&s.woke), k);
		assert_int_equal(stb_test_cond_waiters(&s.c), N - k);
	}
	/* Broadcast wakes all the others. */
	assert_int_equal(bthread_cond_broadcast(&s.c), 0);
	assert_true(STB_WAIT_UNTIL(stb_load(&s.woke) == N, 5000));
	for (int i = 0; i < N; i++)
		assert_int_equal(bthread_join(t[i], NULL), 0);
	assert_int_equal(stb_load(&s.bad_unlocked), 0);
	assert_int_equal(stb_test_cond_waiters(&s.c), 0);
	/* Nobody waits: signal and broadcast are no-ops. */
	assert_int_equal(bthread_cond_signal(&s.c), 0);
	assert_int_equal(bthread_cond_broadcast(&s.c), 0);
	stb_cv_destroy(&s);
	STB_TEST_END();
}

/* Broadcast wakes every waiter, bthreads and pthreads. */
static void test_cond_broadcast_wakes_all(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	enum { NB = 40, NP = 4 };
	static struct stb_cv s;
	stb_cv_init(&s);
	bthread_t bt[NB];
	pthread_t pt[NP];
	for (int i = 0; i < NB; i++)
		assert_int_equal(bthread_start_background(&bt[i], &BTHREAD_ATTR_SMALL, stb_cv_waiter,
							  &s),
				 0);
	for (int i = 0; i < NP; i++)
		assert_int_equal(pthread_create(&pt[i], NULL, stb_cv_waiter_pthread, &s), 0);
	assert_true(STB_WAIT_UNTIL(stb_test_cond_waiters(&s.c) == NB + NP, 5000));
	assert_int_equal(bthread_cond_broadcast(&s.c), 0);
	assert_true(STB_WAIT_UNTIL(stb_load(&s.woke) == NB + NP, 5000));
	for (int i = 0; i < NB; i++)
		assert_int_equal(bthread_join(bt[i], NULL), 0);
	for (int i = 0; i < NP; i++)
		assert_int_equal(pthread_join(pt[i], NULL), 0);
	assert_int_equal(stb_load(&s.bad_unlocked), 0);
	stb_cv_destroy(&s);
	STB_TEST_END();
}

struct stb_tw_job {
	bthread_mutex_t *m;
	bthread_cond_t *c;
	int timeout_ms;
	int rc;
	double took_ms;
	bool held_after;
	int other_trylock; /* trylock by another thread while the waiter holds m */
};

static void *stb_trylock_once(void *arg)
{
	bthread_mutex_t *m = arg;
	int rc = bthread_mutex_trylock(m);
	if (rc == 0)
		bthread_mutex_unlock(m);
	return (void *)(intptr_t)rc;
}

static void *stb_tw_run(void *arg)
{
	struct stb_tw_job *j = arg;
	STB_EXPECT_EQ(bthread_mutex_lock(j->m), 0);
	struct timespec abs = stb_realtime_after_ms((uint64_t)j->timeout_ms);
	uint64_t t0 = stb_now_ns();
	j->rc = bthread_cond_timedwait(j->c, j->m, &abs);
	j->took_ms = stb_test_ms_since(t0);
	j->held_after = stb_test_mutex_locked(j->m);
	/* Someone else cannot take it now. */
	pthread_t pt;
	void *r = NULL;
	if (pthread_create(&pt, NULL, stb_trylock_once, j->m) == 0 && pthread_join(pt, &r) == 0)
		j->other_trylock = (int)(intptr_t)r;
	else
		j->other_trylock = -1;
	STB_EXPECT_EQ(bthread_mutex_unlock(j->m), 0);
	return NULL;
}

static void test_cond_timedwait(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	bthread_mutex_t m;
	bthread_cond_t c;
	assert_int_equal(bthread_mutex_init(&m, NULL), 0);
	assert_int_equal(bthread_cond_init(&c, NULL), 0);
	for (int kind = 0; kind < 2; kind++) {
		struct stb_tw_job j = {.m = &m, .c = &c, .timeout_ms = 50};
		if (kind == 0) {
			bthread_t t;
			assert_int_equal(bthread_start_background(&t, NULL, stb_tw_run, &j), 0);
			assert_int_equal(bthread_join(t, NULL), 0);
		} else {
			pthread_t t;
			assert_int_equal(pthread_create(&t, NULL, stb_tw_run, &j), 0);
			assert_int_equal(pthread_join(t, NULL), 0);
		}
		assert_int_equal(j.rc, ETIMEDOUT);
		assert_true(j.took_ms >= 49.0);
		assert_true(j.took_ms < 1000.0);
		assert_true(j.held_after);
		assert_int_equal(j.other_trylock, EBUSY);
	}
	/* Signaled before the deadline: returns 0 early, mutex held. */
	struct stb_tw_job j = {.m = &m, .c = &c, .timeout_ms = 5000};
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_tw_run, &j), 0);
	assert_true(STB_WAIT_UNTIL(stb_test_cond_waiters(&c) == 1, 5000));
	assert_int_equal(bthread_cond_signal(&c), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(j.rc, 0);
	assert_true(j.took_ms < 2500.0);
	assert_true(j.held_after);
	assert_int_equal(j.other_trylock, EBUSY);
	assert_false(stb_test_mutex_locked(&m));
	assert_int_equal(bthread_cond_destroy(&c), 0);
	assert_int_equal(bthread_mutex_destroy(&m), 0);
	STB_TEST_END();
}

/* A bounded queue with two conds: items pass through in order, none lost. */
enum { STB_PC_CAP = 4 };
struct stb_pc {
	bthread_mutex_t m;
	bthread_cond_t not_empty, not_full;
	long buf[STB_PC_CAP];
	int head, len;
	long next_expected;
	long bad;
};

static void *stb_pc_producer(void *arg)
{
	struct stb_pc *q = arg;
	for (long i = 0; i < STB_TEST_TSAN_SCALE(20000, 2000); i++) {
		bthread_mutex_lock(&q->m);
		while (q->len == STB_PC_CAP)
			bthread_cond_wait(&q->not_full, &q->m);
		q->buf[(q->head + q->len) % STB_PC_CAP] = i;
		q->len++;
		bthread_cond_signal(&q->not_empty);
		bthread_mutex_unlock(&q->m);
	}
	return NULL;
}

static void *stb_pc_consumer(void *arg)
{
	struct stb_pc *q = arg;
	for (long i = 0; i < STB_TEST_TSAN_SCALE(20000, 2000); i++) {
		bthread_mutex_lock(&q->m);
		while (q->len == 0)
			bthread_cond_wait(&q->not_empty, &q->m);
		long v = q->buf[q->head];
		q->head = (q->head + 1) % STB_PC_CAP;
		q->len--;
		if (v != q->next_expected)
			q->bad++;
		q->next_expected = v + 1;
		bthread_cond_signal(&q->not_full);
		bthread_mutex_unlock(&q->m);
	}
	return NULL;
}

static void test_cond_producer_consumer(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	/* bthread->bthread, bthread->pthread, pthread->bthread. */
	for (int mode = 0; mode < 3; mode++) {
		static struct stb_pc q;
		memset(&q, 0, sizeof(q));
		assert_int_equal(bthread_mutex_init(&q.m, NULL), 0);
		assert_int_equal(bthread_cond_init(&q.not_empty, NULL), 0);
		assert_int_equal(bthread_cond_init(&q.not_full, NULL), 0);
		bthread_t bp = 0, bc = 0;
		pthread_t pp, pc;
		if (mode == 2)
			assert_int_equal(pthread_create(&pp, NULL, stb_pc_producer, &q), 0);
		else
			assert_int_equal(bthread_start_background(&bp, NULL, stb_pc_producer, &q), 0);
		if (mode == 1)
			assert_int_equal(pthread_create(&pc, NULL, stb_pc_consumer, &q), 0);
		else
			assert_int_equal(bthread_start_background(&bc, NULL, stb_pc_consumer, &q), 0);
		if (mode == 2)
			assert_int_equal(pthread_join(pp, NULL), 0);
		else
			assert_int_equal(bthread_join(bp, NULL), 0);
		if (mode == 1)
			assert_int_equal(pthread_join(pc, NULL), 0);
		else
			assert_int_equal(bthread_join(bc, NULL), 0);
		assert_int_equal(q.bad, 0);
		assert_int_equal(q.next_expected, STB_TEST_TSAN_SCALE(20000, 2000));
		assert_int_equal(q.len, 0);
		assert_int_equal(bthread_cond_destroy(&q.not_full), 0);
		assert_int_equal(bthread_cond_destroy(&q.not_empty), 0);
		assert_int_equal(bthread_mutex_destroy(&q.m), 0);
	}
	STB_TEST_END();
}

/* ---- bRPC's lock word, the owner word, the published wait ---- */

static void *stb_lock_unlock(void *arg)
{
	bthread_mutex_t *m = arg;
	STB_EXPECT_EQ(bthread_mutex_lock(m), 0);
	STB_EXPECT_EQ(m->owner.word, bthread_self());
	STB_EXPECT_EQ(bthread_mutex_unlock(m), 0);
	return NULL;
}

static void *stb_hold_mutex(void *arg)
{
	bthread_mutex_t *m = arg;
	STB_EXPECT_EQ(bthread_mutex_lock(m), 0);
	bthread_usleep(100 * 1000);
	STB_EXPECT_EQ(bthread_mutex_unlock(m), 0);
	return NULL;
}

static void test_mutex_owner_and_wait(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	bthread_mutexattr_t attr;
	assert_int_equal(bthread_mutexattr_init(&attr), 0);
	assert_true(attr.enable_csite);
	assert_int_equal(bthread_mutexattr_disable_csite(&attr), 0);
	assert_false(attr.enable_csite);
	bthread_mutex_t m;
	assert_int_equal(bthread_mutex_init(&m, &attr), 0);
	assert_false(m.enable_csite);
	assert_int_equal(bthread_mutexattr_destroy(&attr), 0);
	assert_int_equal(bthread_mutexattr_init(NULL), EINVAL);

	/* A pthread holds it: owner word = its flagged tid; lock word 1. */
	assert_int_equal(m.owner.word, 0);
	assert_int_equal(bthread_mutex_lock(&m), 0);
	assert_int_equal(*m.butex, 1);
	assert_true(m.owner.word == stb_test_tid_owner());
	bthread_t b;
	assert_int_equal(bthread_start_background(&b, NULL, stb_lock_unlock, &m), 0);
	assert_true(stb_test_parked(b, STB_WAIT_MUTEX, 5000));
	struct stb_test_wait w = stb_test_wait_of(b);
	assert_true(w.object == (uint64_t)(uintptr_t)&m);
	assert_true(w.owner == stb_test_tid_owner());
	assert_true(w.extra == (uint64_t)(uintptr_t)&m.owner.word);
	assert_int_equal(*m.butex, 257); /* bRPC: locked and contended */
	assert_int_equal(bthread_mutex_unlock(&m), 0);
	assert_int_equal(bthread_join(b, NULL), 0);
	assert_int_equal(*m.butex, 0);
	assert_int_equal(m.owner.word, 0);

	/* A bthread holds it: a waiting bthread names it as the owner. */
	bthread_t holder, waiter;
	assert_int_equal(bthread_start_background(&holder, NULL, stb_hold_mutex, &m), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&m.owner.word, __ATOMIC_RELAXED) == holder,
				   5000));
	assert_int_equal(bthread_start_background(&waiter, NULL, stb_lock_unlock, &m), 0);
	assert_true(stb_test_parked(waiter, STB_WAIT_MUTEX, 5000));
	assert_true(stb_test_wait_of(waiter).owner == holder);
	assert_int_equal(bthread_join(holder, NULL), 0);
	assert_int_equal(bthread_join(waiter, NULL), 0);
	assert_int_equal(bthread_mutex_destroy(&m), 0);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_uninitialized),
		cmocka_unit_test(test_trylock),
		cmocka_unit_test(test_timedlock),
		cmocka_unit_test(test_mutex_counter_exact),
		cmocka_unit_test(test_mutex_counter_mixed),
		cmocka_unit_test(test_cond_binds_mutex),
		cmocka_unit_test(test_cond_signal_wakes_one),
		cmocka_unit_test(test_cond_broadcast_wakes_all),
		cmocka_unit_test(test_cond_timedwait),
		cmocka_unit_test(test_cond_producer_consumer),
		cmocka_unit_test(test_mutex_owner_and_wait),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
