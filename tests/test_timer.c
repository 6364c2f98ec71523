/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Timers seen through bthread_usleep and bthread_stop: sleep accuracy, many
 * concurrent sleepers finishing in about one period, stop waking a sleeper
 * early with ESTOP (only that sleep, as bRPC: later ones sleep), a stop
 * before the sleep ending the first one, bthread_stopped before/after stop
 * and after finish, and a stopped butex_wait returning EINTR.
 * bthread_timer_add/del: callbacks run on the timer thread in deadline order,
 * del before the run (0), after it (EINVAL), while it runs (1 at once, as
 * bRPC, even under a lock the callback waits for), from the callback itself.
 * The timer thread and the fd dispatcher ask for short slices and no timer
 * slack (their latency under load: bench/bench_latency.c).
 */
#include "test_util.h"

#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>

#include "test_internal.h"

/* Waits until bthread t is asleep in bthread_usleep (queued on its sleep butex). */
static bool stb_test_wait_asleep(bthread_t t)
{
	struct stb_task *task = stb_task_lookup(t);
	return task && STB_WAIT_UNTIL(stb_test_butex_waiters(&task->sleep->value) == 1, 5000);
}

struct stb_sleep_job {
	int *gate; /* when set: wait until *gate != 0 first */
	uint64_t us;
	int rc;
	int err;
	double took_ms;
	int started;
	int again;        /* after a failed sleep, sleep once more: */
	int rc2, err2;    /* its result */
	double took2_ms;
};

static void *stb_sleep_run(void *arg)
{
	struct stb_sleep_job *j = arg;
	while (j->gate && __atomic_load_n(j->gate, __ATOMIC_ACQUIRE) == 0)
		butex_wait(j->gate, 0, NULL);
	__atomic_store_n(&j->started, 1, __ATOMIC_RELEASE);
	uint64_t t0 = stb_now_ns();
	j->rc = bthread_usleep(j->us);
	j->err = j->rc ? stb_test_errno() : 0;
	j->took_ms = stb_test_ms_since(t0);
	if (j->again && j->rc != 0) {
		t0 = stb_now_ns();
		j->rc2 = bthread_usleep(j->us);
		j->err2 = j->rc2 ? stb_test_errno() : 0;
		j->took2_ms = stb_test_ms_since(t0);
	}
	return NULL;
}

static int stb_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/*
 * Every sleep lasts at least what was asked. The upper bound (asked + 50 ms)
 * is checked on the shortest of 5 sleeps: on this loaded 2-CPU machine one
 * sleep can be late for reasons that have nothing to do with the timers.
 */
static void test_usleep_accuracy(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	enum { SAMPLES = 5 };
	const uint64_t us[] = {10000, 1000, 30000};
	for (unsigned i = 0; i < sizeof(us) / sizeof(us[0]); i++) {
		double took[SAMPLES];
		for (int k = 0; k < SAMPLES; k++) {
			struct stb_sleep_job j = {.us = us[i]};
			bthread_t t;
			assert_int_equal(bthread_start_background(&t, &BTHREAD_ATTR_SMALL,
								  stb_sleep_run, &j),
					 0);
			assert_int_equal(bthread_join(t, NULL), 0);
			assert_int_equal(j.rc, 0);
			assert_true(j.took_ms >= (double)us[i] / 1000.0);
			took[k] = j.took_ms;
		}
		qsort(took, SAMPLES, sizeof(took[0]), stb_cmp_double);
		print_message("    usleep(%llu) in a bthread: min %.2f ms, median %.2f ms\n",
			      (unsigned long long)us[i], took[0], took[SAMPLES / 2]);
		assert_true(took[0] < (double)us[i] / 1000.0 + 50.0);
	}
	/* From this pthread: a plain sleep. */
	double took[SAMPLES];
	for (int k = 0; k < SAMPLES; k++) {
		struct stb_sleep_job p = {.us = 10000};
		stb_sleep_run(&p);
		assert_int_equal(p.rc, 0);
		assert_true(p.took_ms >= 10.0);
		took[k] = p.took_ms;
	}
	qsort(took, SAMPLES, sizeof(took[0]), stb_cmp_double);
	assert_true(took[0] < 60.0);
	/* 0 returns at once. */
	struct stb_sleep_job z = {.us = 0};
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_sleep_run, &z), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(z.rc, 0);
	assert_true(z.took_ms < 1000.0);
	STB_TEST_END();
}

/* A sleeping bthread does not hold its worker: others run meanwhile. */
static int stb_spins_done;

static void *stb_spin_work(void *arg)
{
	(void)arg;
	for (int i = 0; i < 1000; i++)
		bthread_yield();
	__atomic_store_n(&stb_spins_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void test_usleep_does_not_block_worker(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	/* More sleepers than workers: each would block one worker if usleep blocked. */
	enum { N = 8 };
	struct stb_sleep_job j[N];
	bthread_t t[N], w;
	memset(j, 0, sizeof(j));
	for (int i = 0; i < N; i++) {
		j[i].us = 1000000;
		assert_int_equal(bthread_start_background(&t[i], NULL, stb_sleep_run, &j[i]), 0);
	}
	for (int i = 0; i < N; i++)
		assert_true(STB_WAIT_UNTIL(__atomic_load_n(&j[i].started, __ATOMIC_ACQUIRE), 5000));
	uint64_t t0 = stb_now_ns();
	assert_int_equal(bthread_start_background(&w, NULL, stb_spin_work, NULL), 0);
	assert_int_equal(bthread_join(w, NULL), 0);
	double spin_ms = stb_test_ms_since(t0);
	assert_int_equal(__atomic_load_n(&stb_spins_done, __ATOMIC_ACQUIRE), 1);
	/* It finished while the sleepers were still asleep (blocked workers: >= 1 s). */
	assert_true(spin_ms < 800.0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(bthread_join(t[i], NULL), 0);
		assert_int_equal(j[i].rc, 0);
	}
	STB_TEST_END();
}

static void test_many_sleepers(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	enum { N = STB_TEST_TSAN_SCALE(2000, 200) };
	struct stb_sleep_job *j = calloc(N, sizeof(*j));
	bthread_t *t = calloc(N, sizeof(*t));
	assert_non_null(j);
	assert_non_null(t);
	/* All wait at a gate first, so that they sleep at the same time. */
	int *gate = butex_create();
	assert_non_null(gate);
	for (int i = 0; i < N; i++) {
		j[i].gate = gate;
		j[i].us = 100000;
		assert_int_equal(bthread_start_background(&t[i], &BTHREAD_ATTR_SMALL, stb_sleep_run, &j[i]),
				 0);
	}
	uint64_t t0 = stb_now_ns();
	__atomic_store_n(gate, 1, __ATOMIC_RELEASE);
	butex_wake_all(gate);
	for (int i = 0; i < N; i++)
		assert_int_equal(bthread_join(t[i], NULL), 0);
	double total = stb_test_ms_since(t0);
	print_message("    %d concurrent 100 ms sleeps took %.0f ms in all\n", N, total);
	for (int i = 0; i < N; i++) {
		assert_int_equal(j[i].rc, 0);
		assert_true(j[i].took_ms >= 100.0);
	}
	/* About one period, not N of them (nor N / workers: 100 s). */
	assert_true(total < STB_TEST_SCALE(1500.0, 5000.0));
	free(j);
	free(t);
	butex_destroy(gate);
	STB_TEST_END();
}

/* ---- stop ---- */

static void *stb_stop_from_bthread(void *arg)
{
	return (void *)(intptr_t)bthread_stop(*(const bthread_t *)arg);
}

static void test_stop_wakes_sleeper(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	for (int from_bthread = 0; from_bthread < 2; from_bthread++) {
		struct stb_sleep_job j = {.us = 10000000, .again = 1};
		bthread_t t;
		assert_int_equal(bthread_start_background(&t, NULL, stb_sleep_run, &j), 0);
		assert_true(stb_test_wait_asleep(t));
		j.us = 10000; /* the second sleep: 10 ms */
		assert_false(bthread_stopped(t));
		uint64_t t0 = stb_now_ns();
		if (from_bthread) {
			bthread_t s;
			void *rc = (void *)-1;
			assert_int_equal(bthread_start_urgent(&s, NULL, stb_stop_from_bthread, &t), 0);
			assert_int_equal(bthread_join(s, &rc), 0);
			assert_int_equal((intptr_t)rc, 0);
		} else {
			assert_int_equal(bthread_stop(t), 0);
		}
		assert_true(bthread_stopped(t));
		assert_int_equal(bthread_join(t, NULL), 0);
		assert_true(stb_test_ms_since(t0) < 3000.0);
		assert_int_equal(j.rc, -1);
		assert_int_equal(j.err, ESTOP);
		assert_true(j.took_ms < 2000.0);
		/* Only the interrupted sleep fails (as bRPC): the next one sleeps. */
		assert_int_equal(j.rc2, 0);
		assert_true(j.took2_ms >= 9.0);
		/* Finished: still reported stopped; stopping it again is EINVAL (as bRPC). */
		assert_true(bthread_stopped(t));
		assert_int_equal(bthread_stop(t), EINVAL);
	}
	STB_TEST_END();
}

/* A stop before the sleep ends the first sleep at once (ESTOP); as bRPC, the
 * later ones sleep; the bthread runs on. */
struct stb_stopped_job {
	int go;
	int rc[3];
	int err[3];
	double took_ms[3];
	int after; /* ran code after the sleeps */
};

static void *stb_stopped_run(void *arg)
{
	struct stb_stopped_job *j = arg;
	while (!__atomic_load_n(&j->go, __ATOMIC_ACQUIRE))
		bthread_yield();
	for (int i = 0; i < 3; i++) {
		uint64_t t0 = stb_now_ns();
		j->rc[i] = bthread_usleep(i == 0 ? 5000000 : 5000);
		j->err[i] = j->rc[i] ? stb_test_errno() : 0;
		j->took_ms[i] = stb_test_ms_since(t0);
	}
	j->after = 1;
	return (void *)0x5;
}

static void test_stopped_before_sleep(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	struct stb_stopped_job j;
	memset(&j, 0, sizeof(j));
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_stopped_run, &j), 0);
	assert_false(bthread_stopped(t));
	assert_int_equal(bthread_stop(t), 0); /* while it spins in yields */
	assert_true(bthread_stopped(t));
	__atomic_store_n(&j.go, 1, __ATOMIC_RELEASE);
	void *ret = NULL;
	assert_int_equal(bthread_join(t, &ret), 0);
	assert_ptr_equal(ret, (void *)0x5);
	assert_int_equal(j.after, 1);
	assert_int_equal(j.rc[0], -1);
	assert_int_equal(j.err[0], ESTOP);
	assert_true(j.took_ms[0] < 1000.0);
	for (int i = 1; i < 3; i++) {
		assert_int_equal(j.rc[i], 0);
		assert_true(j.took_ms[i] >= 4.5);
	}
	STB_TEST_END();
}

static void test_stop_invalid(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	assert_int_equal(bthread_stop(0), EINVAL);
	assert_int_equal(bthread_stop(((bthread_t)1 << 32) | 0x7ffffff0u), EINVAL);
	bthread_t t;
	struct stb_sleep_job j = {.us = 1000};
	assert_int_equal(bthread_start_background(&t, NULL, stb_sleep_run, &j), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(bthread_stop(t + ((bthread_t)1000 << 32)), EINVAL);
	/* A finished, unstopped bthread counts as stopped; stopping it is EINVAL. */
	assert_true(bthread_stopped(t));
	assert_int_equal(bthread_stop(t), EINVAL);
	assert_int_equal(j.rc, 0);
	STB_TEST_END();
}

/* A stopped butex_wait returns -1/EINTR; the next wait is an ordinary one. */
struct stb_bw_job {
	int *butex;
	int rc1, err1, rc2, err2;
	double took1_ms;
	int waiting;
};

static void *stb_bw_run(void *arg)
{
	struct stb_bw_job *j = arg;
	uint64_t t0 = stb_now_ns();
	__atomic_store_n(&j->waiting, 1, __ATOMIC_RELEASE);
	j->rc1 = butex_wait(j->butex, 0, NULL);
	j->err1 = j->rc1 ? stb_test_errno() : 0;
	j->took1_ms = stb_test_ms_since(t0);
	struct timespec abs = stb_realtime_after_ms(30);
	j->rc2 = butex_wait(j->butex, 0, &abs);
	j->err2 = j->rc2 ? stb_test_errno() : 0;
	return NULL;
}

static void test_stop_interrupts_butex_wait(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	int *b = butex_create();
	assert_non_null(b);
	struct stb_bw_job j = {.butex = b};
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_bw_run, &j), 0);
	/* Stop it while it is really queued on the butex (the "current" wait). */
	assert_true(STB_WAIT_UNTIL(stb_test_butex_waiters(b) == 1, 5000));
	stb_test_sleep_ms(30);
	assert_int_equal(bthread_stop(t), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(j.rc1, -1);
	assert_int_equal(j.err1, EINTR);
	assert_true(j.took1_ms >= 25.0 && j.took1_ms < 2000.0);
	assert_int_equal(j.rc2, -1);
	assert_int_equal(j.err2, ETIMEDOUT);
	/* The interrupted waiter is gone from the butex. */
	assert_int_equal(butex_wake_all(b), 0);
	butex_destroy(b);
	STB_TEST_END();
}

/* A stopped bthread blocked in a mutex still gets the mutex: lock returns 0. */
struct stb_ml_job {
	bthread_mutex_t *m;
	int waiting;
	int rc;
	int got;
};

static void *stb_ml_run(void *arg)
{
	struct stb_ml_job *j = arg;
	__atomic_store_n(&j->waiting, 1, __ATOMIC_RELEASE);
	j->rc = bthread_mutex_lock(j->m);
	__atomic_store_n(&j->got, 1, __ATOMIC_RELEASE);
	if (j->rc == 0)
		bthread_mutex_unlock(j->m);
	return NULL;
}

static void test_stop_does_not_break_mutex(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	bthread_mutex_t m;
	assert_int_equal(bthread_mutex_init(&m, NULL), 0);
	assert_int_equal(bthread_mutex_lock(&m), 0);
	struct stb_ml_job j = {.m = &m};
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_ml_run, &j), 0);
	assert_true(STB_WAIT_UNTIL(stb_test_butex_waiters(m.butex) == 1, 5000));
	assert_int_equal(bthread_stop(t), 0);
	stb_test_sleep_ms(30);
	/* Still blocked: the stop did not hand it the mutex. */
	assert_int_equal(__atomic_load_n(&j.got, __ATOMIC_ACQUIRE), 0);
	assert_int_equal(bthread_mutex_unlock(&m), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(j.rc, 0);
	assert_int_equal(j.got, 1);
	assert_int_equal(bthread_mutex_destroy(&m), 0);
	STB_TEST_END();
}

/* Stopping many sleepers at once wakes each exactly once and early. */
static void test_stop_many_sleepers(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	enum { N = STB_TEST_TSAN_SCALE(500, 100) };
	struct stb_sleep_job *j = calloc(N, sizeof(*j));
	bthread_t *t = calloc(N, sizeof(*t));
	assert_non_null(j);
	assert_non_null(t);
	for (int i = 0; i < N; i++) {
		j[i].us = 20000000;
		assert_int_equal(bthread_start_background(&t[i], &BTHREAD_ATTR_SMALL, stb_sleep_run, &j[i]),
				 0);
	}
	for (int i = 0; i < N; i++)
		assert_true(stb_test_wait_asleep(t[i]));
	uint64_t t0 = stb_now_ns();
	for (int i = 0; i < N; i++)
		assert_int_equal(bthread_stop(t[i]), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(bthread_join(t[i], NULL), 0);
	assert_true(stb_test_ms_since(t0) < 3000.0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(j[i].rc, -1);
		assert_int_equal(j[i].err, ESTOP);
	}
	free(j);
	free(t);
	STB_TEST_END();
}

/* ---- bthread_timer_add / bthread_timer_del ---- */

struct stb_tm_job {
	int order[4];
	int n;          /* callbacks that started */
	int recorded;   /* callbacks that recorded (release: order[] and tid are set) */
	pid_t tid;
	int *gate;          /* the callback waits until *gate != 0 */
	int running, done;
	int gate_ready;     /* the del-caller holds stb_tm_mutex */
	bthread_timer_t self_id;
	int self_del;       /* bthread_timer_del of itself from the callback */
};

static struct stb_tm_job stb_tm;

static void stb_tm_record(void *arg)
{
	int i = __atomic_fetch_add(&stb_tm.n, 1, __ATOMIC_ACQ_REL);
	if (i < 4)
		stb_tm.order[i] = (int)(intptr_t)arg;
	stb_tm.tid = (pid_t)syscall(SYS_gettid);
	__atomic_fetch_add(&stb_tm.recorded, 1, __ATOMIC_RELEASE);
}

static void test_timer_add_del(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	memset(&stb_tm, 0, sizeof(stb_tm));
	bthread_timer_t a, b, c, d;
	assert_int_equal(bthread_timer_add(NULL, stb_realtime_after_ms(10), stb_tm_record, NULL),
			 EINVAL);
	assert_int_equal(bthread_timer_add(&a, stb_realtime_after_ms(10), NULL, NULL), EINVAL);
	/* Added out of order; c is cancelled before it runs. */
	assert_int_equal(bthread_timer_add(&b, stb_realtime_after_ms(60), stb_tm_record,
					   (void *)2), 0);
	assert_int_equal(bthread_timer_add(&a, stb_realtime_after_ms(30), stb_tm_record,
					   (void *)1), 0);
	assert_int_equal(bthread_timer_add(&c, stb_realtime_after_ms(40), stb_tm_record,
					   (void *)9), 0);
	/* A deadline in the past runs at once. */
	struct timespec past;
	clock_gettime(CLOCK_REALTIME, &past);
	past.tv_sec -= 5;
	assert_int_equal(bthread_timer_add(&d, past, stb_tm_record, (void *)0), 0);
	assert_true(a != 0 && b != 0 && c != 0 && d != 0 && a != b);
	assert_int_equal(bthread_timer_del(c), 0);
	assert_int_equal(bthread_timer_del(c), EINVAL); /* gone */
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&stb_tm.recorded, __ATOMIC_ACQUIRE) == 3, 5000));
	stb_test_sleep_ms(60);
	assert_int_equal(__atomic_load_n(&stb_tm.recorded, __ATOMIC_ACQUIRE), 3);
	assert_int_equal(stb_tm.order[0], 0);
	assert_int_equal(stb_tm.order[1], 1);
	assert_int_equal(stb_tm.order[2], 2);
	/* On the timer thread, not on this one. */
	assert_true(stb_tm.tid != (pid_t)syscall(SYS_gettid));
	assert_int_equal(bthread_timer_del(a), EINVAL); /* already ran */
	assert_int_equal(bthread_timer_del(0), EINVAL);
	assert_int_equal(bthread_timer_del(0x7fffffff00000001ull), EINVAL);
	STB_TEST_END();
}

static void stb_tm_block(void *arg)
{
	(void)arg;
	__atomic_store_n(&stb_tm.running, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(stb_tm.gate, __ATOMIC_ACQUIRE))
		stb_test_sleep_ms(1);
	stb_test_sleep_ms(20);
	__atomic_store_n(&stb_tm.done, 1, __ATOMIC_RELEASE);
}

struct stb_del_job {
	bthread_timer_t id;
	int rc;
	int done_seen;
	int finished;
};

static void *stb_tm_del_run(void *arg)
{
	struct stb_del_job *j = arg;
	j->rc = bthread_timer_del(j->id);
	j->done_seen = __atomic_load_n(&stb_tm.done, __ATOMIC_ACQUIRE);
	__atomic_store_n(&j->finished, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * del of a running timer returns 1 at once (as bRPC), from a bthread and a
 * pthread -- also while the caller holds a mutex that the callback waits for
 * (a del that waited for the callback would never return there).
 */
static bthread_mutex_t stb_tm_mutex;

static void stb_tm_lock_cb(void *arg)
{
	(void)arg;
	__atomic_store_n(&stb_tm.running, 1, __ATOMIC_RELEASE);
	/* Bounded: a del that waited for this callback returns after 3 s. */
	struct timespec abs = stb_realtime_after_ms(3000);
	if (bthread_mutex_timedlock(&stb_tm_mutex, &abs) == 0)
		bthread_mutex_unlock(&stb_tm_mutex);
	__atomic_store_n(&stb_tm.done, 1, __ATOMIC_RELEASE);
}

static void *stb_tm_del_locked(void *arg)
{
	struct stb_del_job *j = arg;
	bthread_mutex_lock(&stb_tm_mutex);
	__atomic_store_n(&stb_tm.gate_ready, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&stb_tm.running, __ATOMIC_ACQUIRE))
		stb_test_sleep_ms(1);
	stb_test_sleep_ms(5); /* the callback blocks on the mutex by now */
	bthread_timer_t id;
	while (!(id = __atomic_load_n(&j->id, __ATOMIC_ACQUIRE))) /* stored after the add */
		stb_test_sleep_ms(1);
	j->rc = bthread_timer_del(id);
	j->done_seen = __atomic_load_n(&stb_tm.done, __ATOMIC_ACQUIRE);
	__atomic_store_n(&j->finished, 1, __ATOMIC_RELEASE);
	bthread_mutex_unlock(&stb_tm_mutex);
	return NULL;
}

static void test_timer_del_running(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	for (int kind = 0; kind < 2; kind++) {
		memset(&stb_tm, 0, sizeof(stb_tm));
		int gate = 0;
		stb_tm.gate = &gate;
		struct stb_del_job j = {0};
		assert_int_equal(bthread_timer_add(&j.id, stb_realtime_after_ms(1), stb_tm_block, NULL),
				 0);
		assert_true(STB_WAIT_UNTIL(__atomic_load_n(&stb_tm.running, __ATOMIC_ACQUIRE), 5000));
		bthread_t t = 0;
		pthread_t pt;
		if (kind == 0)
			assert_int_equal(bthread_start_background(&t, NULL, stb_tm_del_run, &j), 0);
		else
			assert_int_equal(pthread_create(&pt, NULL, stb_tm_del_run, &j), 0);
		/* Returns while the callback still runs (it waits for the gate). */
		bool finished = STB_WAIT_UNTIL(__atomic_load_n(&j.finished, __ATOMIC_ACQUIRE), 2000);
		__atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
		if (kind == 0)
			assert_int_equal(bthread_join(t, NULL), 0);
		else
			assert_int_equal(pthread_join(pt, NULL), 0);
		assert_true(finished);
		assert_int_equal(j.rc, 1);
		assert_int_equal(j.done_seen, 0);
		assert_true(STB_WAIT_UNTIL(__atomic_load_n(&stb_tm.done, __ATOMIC_ACQUIRE), 5000));
		assert_int_equal(bthread_timer_del(j.id), EINVAL);
	}
	/* The caller holds the mutex the running callback waits for. */
	assert_int_equal(bthread_mutex_init(&stb_tm_mutex, NULL), 0);
	for (int kind = 0; kind < 2; kind++) {
		memset(&stb_tm, 0, sizeof(stb_tm));
		struct stb_del_job j = {0};
		bthread_t t = 0;
		pthread_t pt;
		if (kind == 0)
			assert_int_equal(bthread_start_background(&t, NULL, stb_tm_del_locked, &j), 0);
		else
			assert_int_equal(pthread_create(&pt, NULL, stb_tm_del_locked, &j), 0);
		assert_true(STB_WAIT_UNTIL(__atomic_load_n(&stb_tm.gate_ready, __ATOMIC_ACQUIRE), 5000));
		bthread_timer_t id;
		assert_int_equal(bthread_timer_add(&id, stb_realtime_after_ms(1), stb_tm_lock_cb, NULL),
				 0);
		__atomic_store_n(&j.id, id, __ATOMIC_RELEASE);
		bool finished = STB_WAIT_UNTIL(__atomic_load_n(&j.finished, __ATOMIC_ACQUIRE), 2000);
		if (kind == 0)
			assert_int_equal(bthread_join(t, NULL), 0);
		else
			assert_int_equal(pthread_join(pt, NULL), 0);
		assert_true(finished);
		assert_int_equal(j.rc, 1);
		assert_int_equal(j.done_seen, 0);
		assert_true(STB_WAIT_UNTIL(__atomic_load_n(&stb_tm.done, __ATOMIC_ACQUIRE), 5000));
	}
	assert_int_equal(bthread_mutex_destroy(&stb_tm_mutex), 0);
	STB_TEST_END();
}

static void stb_tm_self(void *arg)
{
	(void)arg;
	stb_tm.self_del = bthread_timer_del(__atomic_load_n(&stb_tm.self_id, __ATOMIC_ACQUIRE));
	__atomic_store_n(&stb_tm.done, 1, __ATOMIC_RELEASE);
}

static void test_timer_del_from_callback(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	memset(&stb_tm, 0, sizeof(stb_tm));
	bthread_timer_t id;
	/* The id is stored before the callback can read it: 20 ms ahead. */
	assert_int_equal(bthread_timer_add(&id, stb_realtime_after_ms(20), stb_tm_self, NULL), 0);
	__atomic_store_n(&stb_tm.self_id, id, __ATOMIC_RELEASE);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&stb_tm.done, __ATOMIC_ACQUIRE), 5000));
	assert_int_equal(stb_tm.self_del, 1); /* running: itself, no wait */
	STB_TEST_END();
}

/* ---- the runtime's wake-up threads ---- */

/* The kernel's struct sched_attr (SCHED_ATTR_SIZE_VER1). */
struct stb_test_sched_attr {
	uint32_t size, policy;
	uint64_t flags;
	int32_t nice;
	uint32_t priority;
	uint64_t runtime, deadline, period;
	uint32_t util_min, util_max;
};

static uint64_t stb_slice_of(pid_t tid)
{
	struct stb_test_sched_attr a;
	memset(&a, 0, sizeof(a));
	if (syscall(SYS_sched_getattr, tid, &a, sizeof(a), 0) != 0)
		return 0;
	return a.runtime;
}

/* Does this kernel keep a fair thread's requested slice (Linux 6.12+)? */
static void *stb_probe_slice(void *arg)
{
	struct stb_test_sched_attr a;
	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.policy = SCHED_OTHER;
	a.runtime = 200000;
	*(bool *)arg = syscall(SYS_sched_setattr, 0, &a, 0) == 0 &&
		       stb_slice_of(stb_gettid()) == 200000;
	return NULL;
}

/* The thread of this process named name, or 0. */
static pid_t stb_thread_named(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	pid_t found = 0;
	struct dirent *de;
	while (d && !found && (de = readdir(d))) {
		char path[320], comm[32] = "";
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && strncmp(comm, name, strlen(name)) == 0 &&
		    comm[strlen(name)] == '\n')
			found = (pid_t)atoi(de->d_name);
		fclose(f);
	}
	if (d)
		closedir(d);
	return found;
}

static long stb_slack_of(pid_t tid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/task/%d/timerslack_ns", (int)tid);
	FILE *f = fopen(path, "r");
	long v = -1;
	if (f && fscanf(f, "%ld", &v) != 1)
		v = -1;
	if (f)
		fclose(f);
	return v;
}

static void test_wake_threads_slices(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	/* Both threads exist after a timer and a bthread_close. */
	bthread_timer_t id;
	assert_int_equal(bthread_timer_add(&id, stb_realtime_after_ms(10000), stb_tm_record, NULL), 0);
	assert_int_equal(bthread_timer_del(id), 0);
	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(bthread_close(p[0]), 0);
	close(p[1]);
	bool slices = false;
	pthread_t pt;
	assert_int_equal(pthread_create(&pt, NULL, stb_probe_slice, &slices), 0);
	assert_int_equal(pthread_join(pt, NULL), 0);
	const char *const names[] = {"bthread_timer", "bthread_epoll"};
	for (int i = 0; i < 2; i++) {
		pid_t tid = 0;
		assert_true(STB_WAIT_UNTIL((tid = stb_thread_named(names[i])) != 0, 2000));
		if (slices && stb_slice_of(tid) != STB_WAKE_FAST_SLICE_NS)
			fail_msg("%s: slice %" PRIu64 " ns, want %u", names[i], stb_slice_of(tid),
				 STB_WAKE_FAST_SLICE_NS);
		long slack = stb_slack_of(tid);
		if (slack != -1 && slack != 1) /* -1: no such file on this kernel */
			fail_msg("%s: timer slack %ld ns, want 1", names[i], slack);
	}
	print_message("    custom slices %s on this kernel\n", slices ? "kept" : "not supported");
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_usleep_accuracy),
		cmocka_unit_test(test_usleep_does_not_block_worker),
		cmocka_unit_test(test_many_sleepers),
		cmocka_unit_test(test_stop_wakes_sleeper),
		cmocka_unit_test(test_stopped_before_sleep),
		cmocka_unit_test(test_stop_invalid),
		cmocka_unit_test(test_stop_interrupts_butex_wait),
		cmocka_unit_test(test_stop_does_not_break_mutex),
		cmocka_unit_test(test_stop_many_sleepers),
		cmocka_unit_test(test_timer_add_del),
		cmocka_unit_test(test_timer_del_running),
		cmocka_unit_test(test_timer_del_from_callback),
		cmocka_unit_test(test_wake_threads_slices),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
