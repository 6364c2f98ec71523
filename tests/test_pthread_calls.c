/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every bthread call made from plain pthreads (the main thread and threads
 * created with pthread_create): start/join, self/yield/exit, usleep, mutex,
 * cond, butex and fd waits, stop, and hand-offs between pthreads and bthreads
 * in both directions. The runtime is started lazily by the first such call.
 */
#include "test_util.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>

/* Runs fn(arg) on a fresh pthread and returns its result. */
static void *stb_on_pthread(void *(*fn)(void *), void *arg)
{
	pthread_t t;
	void *ret = (void *)-1;
	assert_int_equal(pthread_create(&t, NULL, fn, arg), 0);
	assert_int_equal(pthread_join(t, &ret), 0);
	return ret;
}

static void *stb_return_arg(void *arg)
{
	return arg;
}

/* ---- start, join, self, yield, exit ---- */

static void *stb_start_join_body(void *arg)
{
	(void)arg;
	STB_EXPECT_EQ(bthread_self(), 0);
	STB_EXPECT_EQ(bthread_yield(), 0);
	for (int urgent = 0; urgent < 2; urgent++) {
		bthread_t t = 0;
		void *ret = NULL;
		int rc = urgent ? bthread_start_urgent(&t, NULL, stb_return_arg, (void *)0x42)
				: bthread_start_background(&t, NULL, stb_return_arg, (void *)0x42);
		STB_EXPECT_EQ(rc, 0);
		STB_EXPECT(t != 0);
		STB_EXPECT_EQ(bthread_join(t, &ret), 0);
		STB_EXPECT(ret == (void *)0x42);
	}
	STB_EXPECT_EQ(bthread_join(0, NULL), EINVAL);
	/* Default: the CPU count, at least 2 (unless $STB_CONCURRENCY says otherwise). */
	const char *env = getenv("STB_CONCURRENCY");
	STB_EXPECT(bthread_getconcurrency() >= (env && *env ? 1 : 2));
	return (void *)1;
}

static void test_first_call_from_pthread(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	/* The very first bthread call of this process, from a non-main pthread. */
	assert_ptr_equal(stb_on_pthread(stb_start_join_body, NULL), (void *)1);
	/* And from the main thread. */
	assert_ptr_equal(stb_start_join_body(NULL), (void *)1);
	STB_TEST_END();
}

static void *stb_exit_body(void *arg)
{
	(void)arg;
	bthread_exit((void *)0x99); /* pthread_exit on a pthread */
}

static void test_exit_on_pthread(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	assert_ptr_equal(stb_on_pthread(stb_exit_body, NULL), (void *)0x99);
	STB_TEST_END();
}

/* A bthread joined by several pthreads at once: each gets the result. */
struct stb_multi_join {
	bthread_t t;
	int *gate;
	void *ret[4];
	int rc[4];
};

static void *stb_gated_return(void *arg)
{
	int *gate = arg;
	while (__atomic_load_n(gate, __ATOMIC_ACQUIRE) == 0)
		butex_wait(gate, 0, NULL);
	return (void *)0x77;
}

struct stb_joiner {
	struct stb_multi_join *mj;
	int i;
};

static void *stb_joiner_run(void *arg)
{
	struct stb_joiner *j = arg;
	j->mj->rc[j->i] = bthread_join(j->mj->t, &j->mj->ret[j->i]);
	return NULL;
}

static void test_many_pthreads_join_one(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	struct stb_multi_join mj;
	memset(&mj, 0, sizeof(mj));
	mj.gate = butex_create();
	assert_non_null(mj.gate);
	assert_int_equal(bthread_start_background(&mj.t, NULL, stb_gated_return, mj.gate), 0);
	pthread_t pt[4];
	struct stb_joiner js[4];
	for (int i = 0; i < 4; i++) {
		js[i].mj = &mj;
		js[i].i = i;
		assert_int_equal(pthread_create(&pt[i], NULL, stb_joiner_run, &js[i]), 0);
	}
	stb_test_sleep_ms(30);
	__atomic_store_n(mj.gate, 1, __ATOMIC_RELEASE);
	/* 1 if the bthread already waits at the gate, 0 if it has not got there yet. */
	assert_true(butex_wake_all(mj.gate) <= 1);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(pt[i], NULL), 0);
		assert_int_equal(mj.rc[i], 0);
		assert_ptr_equal(mj.ret[i], (void *)0x77);
	}
	butex_destroy(mj.gate);
	STB_TEST_END();
}

/* ---- usleep ---- */

static void *stb_usleep_body(void *arg)
{
	(void)arg;
	/* Each sleep is long enough; the shortest of 3 is not far too long (loaded machine). */
	double best = 1e9;
	for (int i = 0; i < 3; i++) {
		uint64_t t0 = stb_now_ns();
		STB_EXPECT_EQ(bthread_usleep(20000), 0);
		double ms = stb_test_ms_since(t0);
		STB_EXPECT(ms >= 20.0);
		best = ms < best ? ms : best;
	}
	STB_EXPECT(best < 250.0);
	STB_EXPECT_EQ(bthread_usleep(0), 0);
	return NULL;
}

static void test_usleep_on_pthread(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	stb_on_pthread(stb_usleep_body, NULL);
	stb_usleep_body(NULL);
	STB_TEST_END();
}

/* ---- mutex and cond between pthreads and bthreads ---- */

struct stb_pingpong {
	bthread_mutex_t m;
	bthread_cond_t c;
	int turn;   /* 0: side A moves, 1: side B moves */
	int rounds;
	int done[2];
};

static void stb_pingpong_side(struct stb_pingpong *p, int me)
{
	for (int i = 0; i < p->rounds; i++) {
		STB_EXPECT_EQ(bthread_mutex_lock(&p->m), 0);
		while (p->turn != me)
			STB_EXPECT_EQ(bthread_cond_wait(&p->c, &p->m), 0);
		p->turn = !me;
		p->done[me]++;
		STB_EXPECT_EQ(bthread_cond_signal(&p->c), 0);
		STB_EXPECT_EQ(bthread_mutex_unlock(&p->m), 0);
	}
}

static void *stb_pingpong_a(void *arg)
{
	stb_pingpong_side(arg, 0);
	return NULL;
}

static void *stb_pingpong_b(void *arg)
{
	stb_pingpong_side(arg, 1);
	return NULL;
}

static void test_mutex_cond_pthread_bthread(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	/* A on a pthread, B on a bthread; then A on a bthread, B on a pthread; then both pthreads. */
	for (int mode = 0; mode < 3; mode++) {
		static struct stb_pingpong p;
		memset(&p, 0, sizeof(p));
		p.rounds = STB_TEST_SCALE(2000, 300);
		assert_int_equal(bthread_mutex_init(&p.m, NULL), 0);
		assert_int_equal(bthread_cond_init(&p.c, NULL), 0);
		pthread_t pa = 0, pb = 0;
		bthread_t ba = 0, bb = 0;
		if (mode == 1)
			assert_int_equal(bthread_start_background(&ba, NULL, stb_pingpong_a, &p), 0);
		else
			assert_int_equal(pthread_create(&pa, NULL, stb_pingpong_a, &p), 0);
		if (mode == 0)
			assert_int_equal(bthread_start_background(&bb, NULL, stb_pingpong_b, &p), 0);
		else
			assert_int_equal(pthread_create(&pb, NULL, stb_pingpong_b, &p), 0);
		if (ba)
			assert_int_equal(bthread_join(ba, NULL), 0);
		else
			assert_int_equal(pthread_join(pa, NULL), 0);
		if (bb)
			assert_int_equal(bthread_join(bb, NULL), 0);
		else
			assert_int_equal(pthread_join(pb, NULL), 0);
		assert_int_equal(p.done[0], p.rounds);
		assert_int_equal(p.done[1], p.rounds);
		assert_int_equal(bthread_cond_destroy(&p.c), 0);
		assert_int_equal(bthread_mutex_destroy(&p.m), 0);
	}
	STB_TEST_END();
}

static void *stb_mutex_body(void *arg)
{
	bthread_mutex_t *m = arg;
	STB_EXPECT_EQ(bthread_mutex_lock(m), 0);
	STB_EXPECT_EQ(bthread_mutex_trylock(m), EBUSY);
	STB_EXPECT_EQ(bthread_mutex_unlock(m), 0);
	STB_EXPECT_EQ(bthread_mutex_trylock(m), 0);
	struct timespec abs = stb_realtime_after_ms(30);
	uint64_t t0 = stb_now_ns();
	STB_EXPECT_EQ(bthread_mutex_timedlock(m, &abs), ETIMEDOUT);
	STB_EXPECT(stb_test_ms_since(t0) >= 29.0);
	STB_EXPECT_EQ(bthread_mutex_unlock(m), 0);
	bthread_cond_t c;
	STB_EXPECT_EQ(bthread_cond_init(&c, NULL), 0);
	STB_EXPECT_EQ(bthread_mutex_lock(m), 0);
	abs = stb_realtime_after_ms(30);
	t0 = stb_now_ns();
	STB_EXPECT_EQ(bthread_cond_timedwait(&c, m, &abs), ETIMEDOUT);
	STB_EXPECT(stb_test_ms_since(t0) >= 29.0);
	STB_EXPECT_EQ(bthread_mutex_trylock(m), EBUSY); /* held again after the wait */
	STB_EXPECT_EQ(bthread_mutex_unlock(m), 0);
	STB_EXPECT_EQ(bthread_cond_destroy(&c), 0);
	return NULL;
}

static void test_mutex_calls_on_pthread(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	bthread_mutex_t m;
	assert_int_equal(bthread_mutex_init(&m, NULL), 0);
	stb_on_pthread(stb_mutex_body, &m);
	stb_mutex_body(&m);
	assert_int_equal(bthread_mutex_destroy(&m), 0);
	STB_TEST_END();
}

/* ---- butex ---- */

struct stb_bx {
	int *b;
	int rc;
	int err;
	int done;
};

static void *stb_bx_wait(void *arg)
{
	struct stb_bx *x = arg;
	x->rc = butex_wait(x->b, 0, NULL);
	x->err = x->rc ? stb_test_errno() : 0;
	__atomic_store_n(&x->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Wakes the waiter without touching the value: retries until butex_wake
 * reports one woken (the waiter may not be queued yet on a loaded machine).
 * Returns the last butex_wake result.
 */
static void *stb_bx_wake(void *arg)
{
	struct stb_bx *x = arg;
	int n = 0;
	for (int i = 0; i < 5000 && n == 0; i++) {
		n = butex_wake(x->b);
		if (n == 0)
			bthread_usleep(1000);
	}
	return (void *)(intptr_t)n;
}

static void test_butex_pthread_bthread(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	/* pthread waits, bthread wakes; bthread waits, pthread wakes. */
	for (int mode = 0; mode < 2; mode++) {
		struct stb_bx x = {.b = butex_create()};
		assert_non_null(x.b);
		pthread_t pt;
		bthread_t bt;
		if (mode == 0)
			assert_int_equal(pthread_create(&pt, NULL, stb_bx_wait, &x), 0);
		else
			assert_int_equal(bthread_start_background(&bt, NULL, stb_bx_wait, &x), 0);
		stb_test_sleep_ms(30);
		assert_int_equal(__atomic_load_n(&x.done, __ATOMIC_ACQUIRE), 0);
		void *woken = NULL;
		if (mode == 0) {
			bthread_t w;
			assert_int_equal(bthread_start_background(&w, NULL, stb_bx_wake, &x), 0);
			assert_int_equal(bthread_join(w, &woken), 0);
			assert_int_equal(pthread_join(pt, NULL), 0);
		} else {
			woken = stb_on_pthread(stb_bx_wake, &x);
			assert_int_equal(bthread_join(bt, NULL), 0);
		}
		assert_int_equal((intptr_t)woken, 1);
		assert_int_equal(x.rc, 0);
		butex_destroy(x.b);
	}
	/* Timeout and EWOULDBLOCK on a pthread. */
	int *b = butex_create();
	assert_non_null(b);
	struct timespec abs = stb_realtime_after_ms(30);
	uint64_t t0 = stb_now_ns();
	assert_int_equal(butex_wait(b, 0, &abs), -1);
	assert_int_equal(errno, ETIMEDOUT);
	assert_true(stb_test_ms_since(t0) >= 29.0);
	assert_int_equal(butex_wait(b, 1, NULL), -1);
	assert_int_equal(errno, EWOULDBLOCK);
	butex_destroy(b);
	STB_TEST_END();
}

/* ---- fd waits ---- */

static void *stb_fd_body(void *arg)
{
	(void)arg;
	int p[2];
	if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0)
		return (void *)1;
	struct timespec abs = stb_realtime_after_ms(30);
	uint64_t t0 = stb_now_ns();
	STB_EXPECT_EQ(bthread_fd_timedwait(p[0], EPOLLIN, &abs), -1);
	STB_EXPECT_EQ(errno, ETIMEDOUT);
	STB_EXPECT(stb_test_ms_since(t0) >= 29.0);
	STB_EXPECT_EQ(bthread_fd_wait(p[1], EPOLLOUT), 0);
	STB_EXPECT_EQ(write(p[1], "a", 1), 1);
	STB_EXPECT_EQ(bthread_fd_wait(p[0], EPOLLIN), 0);
	close(p[0]);
	close(p[1]);
	STB_EXPECT_EQ(bthread_fd_wait(p[0], EPOLLIN), -1);
	STB_EXPECT_EQ(errno, EBADF);
	STB_EXPECT_EQ(bthread_fd_wait(0, EPOLLET), -1); /* nothing to wait for */
	STB_EXPECT_EQ(errno, EINVAL);
	STB_EXPECT_EQ(bthread_fd_wait(-1, EPOLLIN), -1);
	STB_EXPECT_EQ(errno, EINVAL);
	return NULL;
}

/* A pthread blocked in fd_wait is woken by a bthread writing. */
struct stb_fdx {
	int fd;
	int rc;
	int done;
};

static void *stb_fdx_wait(void *arg)
{
	struct stb_fdx *x = arg;
	x->rc = bthread_fd_wait(x->fd, EPOLLIN);
	__atomic_store_n(&x->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void *stb_write_byte(void *arg)
{
	return (void *)(intptr_t)write((int)(intptr_t)arg, "b", 1);
}

static void test_fd_wait_on_pthread(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	assert_null(stb_on_pthread(stb_fd_body, NULL));
	assert_null(stb_fd_body(NULL));
	int p[2];
	assert_int_equal(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
	struct stb_fdx x = {.fd = p[0]};
	pthread_t pt;
	assert_int_equal(pthread_create(&pt, NULL, stb_fdx_wait, &x), 0);
	stb_test_sleep_ms(30);
	assert_int_equal(__atomic_load_n(&x.done, __ATOMIC_ACQUIRE), 0);
	bthread_t w;
	void *n = NULL;
	assert_int_equal(bthread_start_background(&w, NULL, stb_write_byte, (void *)(intptr_t)p[1]), 0);
	assert_int_equal(bthread_join(w, &n), 0);
	assert_int_equal((intptr_t)n, 1);
	assert_int_equal(pthread_join(pt, NULL), 0);
	assert_int_equal(x.rc, 0);
	close(p[0]);
	close(p[1]);
	STB_TEST_END();
}

/* ---- stop from a pthread, stopped checks ---- */

static void *stb_sleep_long(void *arg)
{
	(void)arg;
	int rc = bthread_usleep(10000000);
	return (void *)(intptr_t)(rc == -1 ? stb_test_errno() : 0);
}

static void *stb_stop_body(void *arg)
{
	bthread_t t = *(bthread_t *)arg;
	STB_EXPECT_EQ(bthread_stopped(t), 0);
	STB_EXPECT_EQ(bthread_stop(t), 0);
	STB_EXPECT(bthread_stopped(t) != 0);
	return NULL;
}

static void test_stop_from_pthread(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_sleep_long, NULL), 0);
	stb_test_sleep_ms(30);
	uint64_t t0 = stb_now_ns();
	stb_on_pthread(stb_stop_body, &t);
	void *err = NULL;
	assert_int_equal(bthread_join(t, &err), 0);
	assert_int_equal((intptr_t)err, ESTOP);
	assert_true(stb_test_ms_since(t0) < 2000.0);
	STB_TEST_END();
}

/* ---- many pthreads starting and joining bthreads at once ---- */

enum { STB_SPAWNERS = 6, STB_SPAWNS = STB_TEST_TSAN_SCALE(2000, 200) };

struct stb_spawn_log {
	long base;
	bthread_t tid[STB_SPAWNS];
	int rc[STB_SPAWNS];
};

static void *stb_spawner(void *arg)
{
	struct stb_spawn_log *log = arg;
	for (long i = 0; i < STB_SPAWNS; i++) {
		void *want = (void *)(intptr_t)(log->base + i), *ret = NULL;
		log->rc[i] = bthread_start_background(&log->tid[i], &BTHREAD_ATTR_SMALL,
						      stb_return_arg, want);
		if (log->rc[i] != 0)
			continue;
		/* Joined at once, but other pthreads start bthreads meanwhile. */
		log->rc[i] = bthread_join(log->tid[i], &ret);
		if (log->rc[i] == 0 && ret != want)
			stb_test_record_fail(__FILE__, __LINE__, "ret %p want %p", ret, want);
	}
	return NULL;
}

/* True if some logged id has the same slot as t and a later version. */
static bool stb_slot_reused_later(struct stb_spawn_log *logs, int nlogs, bthread_t t)
{
	for (int k = 0; k < nlogs; k++)
		for (int i = 0; i < STB_SPAWNS; i++) {
			bthread_t u = logs[k].tid[i];
			if ((uint32_t)u == (uint32_t)t && (int32_t)((u >> 32) - (t >> 32)) > 0)
				return true;
		}
	return false;
}

static void test_concurrent_pthread_spawners(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	static struct stb_spawn_log logs[STB_SPAWNERS];
	pthread_t pt[STB_SPAWNERS];
	memset(logs, 0, sizeof(logs));
	for (long i = 0; i < STB_SPAWNERS; i++) {
		logs[i].base = i << 20;
		assert_int_equal(pthread_create(&pt[i], NULL, stb_spawner, &logs[i]), 0);
	}
	for (int i = 0; i < STB_SPAWNERS; i++)
		assert_int_equal(pthread_join(pt[i], NULL), 0);
	/* Every join returned 0 (ESRCH is not an answer of bthread_join any more). */
	long reclaimed = 0;
	for (int k = 0; k < STB_SPAWNERS; k++)
		for (int i = 0; i < STB_SPAWNS; i++) {
			if (logs[k].rc[i] == 0)
				continue;
			if (logs[k].rc[i] == ESRCH &&
			    stb_slot_reused_later(logs, STB_SPAWNERS, logs[k].tid[i])) {
				reclaimed++;
				continue;
			}
			fail_msg("spawner %d #%d: rc %d (id %#llx)", k, i, logs[k].rc[i],
				 (unsigned long long)logs[k].tid[i]);
		}
	print_message("    %d pthreads x %d start+join: %ld joins saw ESRCH (slot reused by "
		      "another pthread's bthread first)\n",
		      STB_SPAWNERS, STB_SPAWNS, reclaimed);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_call_from_pthread),
		cmocka_unit_test(test_exit_on_pthread),
		cmocka_unit_test(test_many_pthreads_join_one),
		cmocka_unit_test(test_usleep_on_pthread),
		cmocka_unit_test(test_mutex_cond_pthread_bthread),
		cmocka_unit_test(test_mutex_calls_on_pthread),
		cmocka_unit_test(test_butex_pthread_bthread),
		cmocka_unit_test(test_fd_wait_on_pthread),
		cmocka_unit_test(test_stop_from_pthread),
		cmocka_unit_test(test_concurrent_pthread_spawners),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
