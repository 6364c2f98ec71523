/* SPDX-License-Identifier: Apache-2.0 */
/*
 * No lost wake-ups: pairs of bthreads and pthreads hand a token back and forth
 * 1,000-2,000 times (TSan: 200) through mutex+cond, butex (also with racing
 * timeouts), a pipe and join, and do 200 sleeps and stop-vs-sleep races, while
 * other bthreads keep yielding. A stuck pair fails the test with each pair's
 * progress instead of hanging; a watchdog alarm backs that up.
 */
#include "test_util.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>

/*
 * Rounds through each wake-up primitive. A lost wake-up in a narrow window
 * needs many: with 200, a butex that skipped its value re-check before
 * sleeping went unnoticed; with 2,000 it was caught.
 */
enum {
	STB_HANDOFFS = STB_TEST_TSAN_SCALE(2000, 200), /* rounds through a wake-up primitive */
	/* Fewer through a pipe and start+join: their pthread sides and the epoll
	 * thread wait for a CPU that the yielding workers keep busy. */
	STB_SLOW_HANDOFFS = STB_TEST_TSAN_SCALE(1000, 200),
	STB_ROUNDS = 200,                             /* rounds of sleeps and stops */
	STB_PAIRS = 4,
	STB_NOISE = 8,
};

/* ---- background noise: bthreads that only yield ---- */

static int stb_noise_stop;
static long stb_noise_yields;
static bthread_t stb_noise_tids[STB_NOISE];

static void *stb_noise_run(void *arg)
{
	(void)arg;
	long n = 0;
	while (!__atomic_load_n(&stb_noise_stop, __ATOMIC_ACQUIRE)) {
		bthread_yield();
		n++;
	}
	__atomic_fetch_add(&stb_noise_yields, n, __ATOMIC_RELAXED);
	return NULL;
}

static void stb_noise_start(void)
{
	__atomic_store_n(&stb_noise_stop, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&stb_noise_yields, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < STB_NOISE; i++)
		assert_int_equal(bthread_start_background(&stb_noise_tids[i], &BTHREAD_ATTR_SMALL,
							  stb_noise_run, NULL),
				 0);
}

static void stb_noise_stop_all(void)
{
	__atomic_store_n(&stb_noise_stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < STB_NOISE; i++)
		assert_int_equal(bthread_join(stb_noise_tids[i], NULL), 0);
	assert_true(__atomic_load_n(&stb_noise_yields, __ATOMIC_ACQUIRE) > 0);
}

/* ---- pairs ---- */

struct stb_pair;
typedef void (*stb_side_fn)(struct stb_pair *p, int me, int round);

struct stb_pair {
	stb_side_fn step;   /* one hand-off: wait for my turn, pass the token */
	int rounds;
	int kinds[2];       /* 0 bthread, 1 pthread */
	int progress[2];    /* rounds completed by each side */
	int finished[2];
	/* primitive state */
	bthread_mutex_t m;
	bthread_cond_t c;
	int turn;
	int *butex;
	int pipes[2][2];    /* pipes[i]: towards side i */
	long timeouts;
	bthread_t tids[2];
	pthread_t pts[2];
};

struct stb_side {
	struct stb_pair *p;
	int me;
};

static struct stb_side stb_sides[STB_PAIRS][2];

static void *stb_side_run(void *arg)
{
	struct stb_side *s = arg;
	for (int r = 0; r < s->p->rounds; r++) {
		s->p->step(s->p, s->me, r);
		__atomic_store_n(&s->p->progress[s->me], r + 1, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&s->p->finished[s->me], 1, __ATOMIC_RELEASE);
	return NULL;
}

static int stb_pairs_finished(struct stb_pair *pairs)
{
	int n = 0;
	for (int i = 0; i < STB_PAIRS; i++)
		n += __atomic_load_n(&pairs[i].finished[0], __ATOMIC_ACQUIRE) +
		     __atomic_load_n(&pairs[i].finished[1], __ATOMIC_ACQUIRE);
	return n;
}

/*
 * Runs STB_PAIRS pairs with step under noise: pairs 0-1 are two bthreads,
 * pair 2 a bthread and a pthread, pair 3 a pthread and a bthread.
 */
static void stb_run_pairs(const char *what, int rounds, struct stb_pair *pairs, stb_side_fn step,
			  void (*init)(struct stb_pair *), void (*fini)(struct stb_pair *))
{
	static const int kinds[STB_PAIRS][2] = {{0, 0}, {0, 0}, {0, 1}, {1, 0}};
	stb_test_wd_note = what;
	stb_noise_start();
	uint64_t t0 = stb_now_ns();
	for (int i = 0; i < STB_PAIRS; i++) {
		memset(&pairs[i], 0, sizeof(pairs[i]));
		pairs[i].step = step;
		pairs[i].rounds = rounds;
		init(&pairs[i]);
		for (int me = 0; me < 2; me++) {
			pairs[i].kinds[me] = kinds[i][me];
			stb_sides[i][me].p = &pairs[i];
			stb_sides[i][me].me = me;
		}
		for (int me = 0; me < 2; me++) {
			if (kinds[i][me] == 0)
				assert_int_equal(bthread_start_background(&pairs[i].tids[me], NULL,
									  stb_side_run,
									  &stb_sides[i][me]),
						 0);
			else
				assert_int_equal(pthread_create(&pairs[i].pts[me], NULL, stb_side_run,
								&stb_sides[i][me]),
						 0);
		}
	}
	bool ok = STB_WAIT_UNTIL(stb_pairs_finished(pairs) == 2 * STB_PAIRS,
				 STB_TEST_SCALE(15000, 40000));
	if (!ok) {
		for (int i = 0; i < STB_PAIRS; i++)
			fprintf(stderr, "%s pair %d (%s/%s): rounds %d and %d of %d\n", what, i,
				kinds[i][0] ? "pthread" : "bthread",
				kinds[i][1] ? "pthread" : "bthread",
				__atomic_load_n(&pairs[i].progress[0], __ATOMIC_ACQUIRE),
				__atomic_load_n(&pairs[i].progress[1], __ATOMIC_ACQUIRE), rounds);
		fail_msg("%s: a hand-off never completed (lost wake-up)", what);
	}
	for (int i = 0; i < STB_PAIRS; i++) {
		for (int me = 0; me < 2; me++) {
			if (pairs[i].kinds[me] == 0) {
				/* The side finished (checked below): join returns 0 at once. */
				assert_int_equal(bthread_join(pairs[i].tids[me], NULL), 0);
			} else {
				assert_int_equal(pthread_join(pairs[i].pts[me], NULL), 0);
			}
			assert_int_equal(pairs[i].finished[me], 1);
			assert_int_equal(pairs[i].progress[me], rounds);
		}
		fini(&pairs[i]);
	}
	double ms = stb_test_ms_since(t0);
	stb_noise_stop_all();
	print_message("    %s: %d pairs x %d hand-offs in %.0f ms, noise %ld yields\n", what,
		      STB_PAIRS, rounds, ms, __atomic_load_n(&stb_noise_yields, __ATOMIC_ACQUIRE));
}

/* ---- mutex + cond ---- */

static void stb_cv_init(struct stb_pair *p)
{
	assert_int_equal(bthread_mutex_init(&p->m, NULL), 0);
	assert_int_equal(bthread_cond_init(&p->c, NULL), 0);
}

static void stb_cv_fini(struct stb_pair *p)
{
	assert_int_equal(p->turn, 0);
	assert_int_equal(bthread_cond_destroy(&p->c), 0);
	assert_int_equal(bthread_mutex_destroy(&p->m), 0);
}

static void stb_cv_step(struct stb_pair *p, int me, int round)
{
	(void)round;
	bthread_mutex_lock(&p->m);
	while (p->turn != me)
		bthread_cond_wait(&p->c, &p->m);
	p->turn = !me;
	/* Alternate signal and broadcast. */
	if (round & 1)
		bthread_cond_broadcast(&p->c);
	else
		bthread_cond_signal(&p->c);
	bthread_mutex_unlock(&p->m);
}

static void test_handoff_mutex_cond(void **state)
{
	(void)state;
	STB_TEST_BEGIN(STB_TEST_SCALE(30, 90));
	static struct stb_pair pairs[STB_PAIRS];
	stb_run_pairs("mutex+cond", STB_HANDOFFS, pairs, stb_cv_step, stb_cv_init, stb_cv_fini);
	STB_TEST_END();
}

/* ---- butex (untimed, and timed with racing timeouts) ---- */

static void stb_bx_init(struct stb_pair *p)
{
	p->butex = butex_create();
	assert_non_null(p->butex);
}

static void stb_bx_fini(struct stb_pair *p)
{
	assert_int_equal(*p->butex, 2 * p->rounds);
	butex_destroy(p->butex);
}

/* Side 0 moves the value from even to odd, side 1 from odd to even. */
static void stb_bx_handoff(struct stb_pair *p, int me, int round, int timeout_us)
{
	int want = 2 * round + me; /* value meaning "my turn" */
	for (;;) {
		int v = __atomic_load_n(p->butex, __ATOMIC_ACQUIRE);
		if (v == want)
			break;
		if (timeout_us) {
			struct timespec abs;
			clock_gettime(CLOCK_REALTIME, &abs);
			abs.tv_nsec += timeout_us * 1000l;
			if (abs.tv_nsec >= 1000000000l) {
				abs.tv_sec++;
				abs.tv_nsec -= 1000000000l;
			}
			if (butex_wait(p->butex, v, &abs) == -1 && stb_test_errno() == ETIMEDOUT)
				__atomic_fetch_add(&p->timeouts, 1, __ATOMIC_RELAXED);
		} else {
			butex_wait(p->butex, v, NULL);
		}
	}
	__atomic_store_n(p->butex, want + 1, __ATOMIC_RELEASE);
	/* Alternate wake and wake_all. */
	if (round & 1)
		butex_wake_all(p->butex);
	else
		butex_wake(p->butex);
}

static void stb_bx_step(struct stb_pair *p, int me, int round)
{
	stb_bx_handoff(p, me, round, 0);
}

static void stb_bx_timed_step(struct stb_pair *p, int me, int round)
{
	/* Timeouts between 20 and 150 us: they race with the wakes. */
	stb_bx_handoff(p, me, round, 20 + (round * 37 + me * 11) % 130);
}

static void test_handoff_butex(void **state)
{
	(void)state;
	STB_TEST_BEGIN(STB_TEST_SCALE(30, 90));
	static struct stb_pair pairs[STB_PAIRS];
	stb_run_pairs("butex", STB_HANDOFFS, pairs, stb_bx_step, stb_bx_init, stb_bx_fini);
	STB_TEST_END();
}

static void test_handoff_butex_timed(void **state)
{
	(void)state;
	STB_TEST_BEGIN(STB_TEST_SCALE(30, 90));
	static struct stb_pair pairs[STB_PAIRS];
	stb_run_pairs("butex with racing timeouts", STB_HANDOFFS, pairs, stb_bx_timed_step, stb_bx_init,
		      stb_bx_fini);
	long timeouts = 0;
	for (int i = 0; i < STB_PAIRS; i++)
		timeouts += pairs[i].timeouts;
	print_message("    (%ld waits timed out on the way)\n", timeouts);
	STB_TEST_END();
}

/* ---- pipe ---- */

static void stb_pipe_init(struct stb_pair *p)
{
	for (int i = 0; i < 2; i++)
		assert_int_equal(pipe2(p->pipes[i], O_NONBLOCK | O_CLOEXEC), 0);
	/* Side 0 holds the token first. */
	assert_int_equal(write(p->pipes[0][1], "t", 1), 1);
}

static void stb_pipe_fini(struct stb_pair *p)
{
	char c;
	/* The token is back with side 0, unread. */
	assert_int_equal(read(p->pipes[0][0], &c, 1), 1);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(read(p->pipes[i][0], &c, 1), -1);
		close(p->pipes[i][0]);
		close(p->pipes[i][1]);
	}
}

static void stb_pipe_step(struct stb_pair *p, int me, int round)
{
	(void)round;
	char c;
	for (;;) {
		ssize_t k = read(p->pipes[me][0], &c, 1);
		if (k == 1)
			break;
		if (bthread_fd_wait(p->pipes[me][0], EPOLLIN) != 0)
			stb_test_record_fail(__FILE__, __LINE__, "fd_wait errno %d", stb_test_errno());
	}
	if (write(p->pipes[!me][1], &c, 1) != 1)
		stb_test_record_fail(__FILE__, __LINE__, "write errno %d", errno);
}

static void test_handoff_pipe(void **state)
{
	(void)state;
	STB_TEST_BEGIN(STB_TEST_SCALE(30, 90));
	static struct stb_pair pairs[STB_PAIRS];
	stb_run_pairs("pipe", STB_SLOW_HANDOFFS, pairs, stb_pipe_step, stb_pipe_init, stb_pipe_fini);
	STB_TEST_END();
}

/* ---- join: each side runs a child bthread and joins it before passing the turn ---- */

static void *stb_join_child(void *arg)
{
	int *ran = arg;
	bthread_yield();
	__atomic_store_n(ran, 1, __ATOMIC_RELEASE);
	return arg;
}

static void stb_join_step(struct stb_pair *p, int me, int round)
{
	int want = 2 * round + me;
	int v;
	while ((v = __atomic_load_n(p->butex, __ATOMIC_ACQUIRE)) != want)
		butex_wait(p->butex, v, NULL);
	bthread_t t;
	void *ret = NULL;
	int ran = 0;
	int rc = bthread_start_urgent(&t, &BTHREAD_ATTR_SMALL, stb_join_child, &ran);
	if (rc == 0)
		rc = bthread_join(t, &ret);
	/* NULL: another pair's bthread took the finished child's slot first and
	 * finished too, so the result was reclaimed (documented). */
	if (rc != 0 || (ret != &ran && ret != NULL))
		stb_test_record_fail(__FILE__, __LINE__, "child rc %d ret %p", rc, ret);
	if (!__atomic_load_n(&ran, __ATOMIC_ACQUIRE))
		stb_test_record_fail(__FILE__, __LINE__, "join returned before the child ran");
	__atomic_store_n(p->butex, want + 1, __ATOMIC_RELEASE);
	butex_wake(p->butex);
}

static void test_handoff_join(void **state)
{
	(void)state;
	STB_TEST_BEGIN(STB_TEST_SCALE(30, 90));
	static struct stb_pair pairs[STB_PAIRS];
	stb_run_pairs("start+join", STB_SLOW_HANDOFFS, pairs, stb_join_step, stb_bx_init, stb_bx_fini);
	STB_TEST_END();
}

/* ---- sleepers ---- */

static void stb_nop_init(struct stb_pair *p)
{
	(void)p;
}

static void stb_nop_fini(struct stb_pair *p)
{
	(void)p;
}

static void stb_sleep_step(struct stb_pair *p, int me, int round)
{
	(void)p;
	uint64_t us = 10 + (uint64_t)((round * 53 + me * 29) % 300);
	uint64_t t0 = stb_now_ns();
	int rc = bthread_usleep(us);
	uint64_t took = stb_now_ns() - t0;
	if (rc != 0 || took < us * 1000u)
		stb_test_record_fail(__FILE__, __LINE__, "usleep(%llu): rc %d after %llu ns",
				     (unsigned long long)us, rc, (unsigned long long)took);
}

static void test_sleepers(void **state)
{
	(void)state;
	STB_TEST_BEGIN(STB_TEST_SCALE(30, 90));
	static struct stb_pair pairs[STB_PAIRS];
	stb_run_pairs("usleep", STB_ROUNDS, pairs, stb_sleep_step, stb_nop_init, stb_nop_fini);
	STB_TEST_END();
}

/* ---- stop racing with the sleep it interrupts ---- */

struct stb_sleeper {
	int err; /* errno of its usleep, -1 until it returns */
};

static void *stb_long_sleeper(void *arg)
{
	struct stb_sleeper *s = arg;
	int rc = bthread_usleep(30000000);
	__atomic_store_n(&s->err, rc == -1 ? stb_test_errno() : 0, __ATOMIC_RELEASE);
	return NULL;
}

static void stb_stop_step(struct stb_pair *p, int me, int round)
{
	(void)p;
	struct stb_sleeper s = {.err = -1};
	bthread_t t;
	if (bthread_start_background(&t, &BTHREAD_ATTR_SMALL, stb_long_sleeper, &s) != 0) {
		stb_test_record_fail(__FILE__, __LINE__, "start failed");
		return;
	}
	/* Stop before, during or just after it goes to sleep. */
	int spin = (round * 7 + me * 3) % 5;
	for (int i = 0; i < spin; i++)
		bthread_yield();
	if (bthread_stop(t) != 0)
		stb_test_record_fail(__FILE__, __LINE__, "stop failed");
	int rc = bthread_join(t, NULL);
	if (rc != 0)
		stb_test_record_fail(__FILE__, __LINE__, "join rc %d", rc);
	int err = __atomic_load_n(&s.err, __ATOMIC_ACQUIRE);
	if (err != ESTOP)
		stb_test_record_fail(__FILE__, __LINE__, "usleep ended with %d, not ESTOP", err);
}

static void test_stop_races(void **state)
{
	(void)state;
	STB_TEST_BEGIN(STB_TEST_SCALE(30, 90));
	static struct stb_pair pairs[STB_PAIRS];
	stb_run_pairs("stop vs usleep", STB_ROUNDS, pairs, stb_stop_step, stb_nop_init, stb_nop_fini);
	STB_TEST_END();
}

/* ---- mixed thread types on one mutex (the lost wake-up of a lone spinner) ---- */

/*
 * BTHREAD_ATTR_PTHREAD bthreads, normal bthreads and pthreads contend one
 * mutex; the holder sleeps 20 us while holding it, so the wake-up of the
 * holder races with the workers going idle. CPU burners beside them get the
 * workers preempted at every point of the idle path. Each round must finish;
 * a lost wake-up leaves the holder READY with every free worker parked.
 */
enum {
	STB_MIX_ROUNDS = STB_TEST_SCALE(60, 10),
	STB_MIX_ROUND_MS = 40,
	STB_MIX_PTHREAD_ATTR = 16, /* BTHREAD_ATTR_PTHREAD bthreads: each may block a worker */
	STB_MIX_NORMAL = 16,
	STB_MIX_PTHREADS = 16,
	STB_MIX_BURNERS = 2,
	STB_MIX_WORKERS = 2 * STB_MIX_PTHREAD_ATTR,
};

static bthread_mutex_t stb_mix_m;
static int stb_mix_stop;
static int stb_mix_done;
static long stb_mix_locks;

static void *stb_mix_loop(void *arg)
{
	(void)arg;
	long n = 0;
	while (!__atomic_load_n(&stb_mix_stop, __ATOMIC_ACQUIRE)) {
		bthread_mutex_lock(&stb_mix_m);
		bthread_usleep(20);
		bthread_mutex_unlock(&stb_mix_m);
		n++;
	}
	__atomic_fetch_add(&stb_mix_locks, n, __ATOMIC_RELAXED);
	__atomic_fetch_add(&stb_mix_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int stb_burn_stop;

static void *stb_burn(void *arg)
{
	(void)arg;
	volatile unsigned long x = 0;
	while (!__atomic_load_n(&stb_burn_stop, __ATOMIC_RELAXED))
		x++;
	return NULL;
}

static void test_mixed_types_one_mutex(void **state)
{
	(void)state;
	STB_TEST_BEGIN(STB_TEST_SCALE(120, 240));
	if (bthread_getconcurrency() < STB_MIX_WORKERS)
		assert_int_equal(bthread_setconcurrency(STB_MIX_WORKERS), 0);
	assert_int_equal(bthread_mutex_init(&stb_mix_m, NULL), 0);
	pthread_t burners[STB_MIX_BURNERS];
	__atomic_store_n(&stb_burn_stop, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < STB_MIX_BURNERS; i++)
		assert_int_equal(pthread_create(&burners[i], NULL, stb_burn, NULL), 0);
	enum { NB = STB_MIX_PTHREAD_ATTR + STB_MIX_NORMAL, NT = NB + STB_MIX_PTHREADS };
	long total = 0;
	for (int r = 0; r < STB_MIX_ROUNDS; r++) {
		__atomic_store_n(&stb_mix_stop, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&stb_mix_done, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&stb_mix_locks, 0, __ATOMIC_RELEASE);
		bthread_t tids[NB];
		pthread_t pts[STB_MIX_PTHREADS];
		for (int i = 0; i < STB_MIX_PTHREADS; i++)
			assert_int_equal(pthread_create(&pts[i], NULL, stb_mix_loop, NULL), 0);
		for (int i = 0; i < NB; i++) {
			const bthread_attr_t *a = i % 2 ? NULL : &BTHREAD_ATTR_PTHREAD;
			assert_int_equal(bthread_start_urgent(&tids[i], a, stb_mix_loop, NULL), 0);
		}
		stb_test_sleep_ms(STB_MIX_ROUND_MS);
		__atomic_store_n(&stb_mix_stop, 1, __ATOMIC_RELEASE);
		if (!STB_WAIT_UNTIL(__atomic_load_n(&stb_mix_done, __ATOMIC_ACQUIRE) == NT, 10000))
			fail_msg("round %d: %d of %d lockers finished after 10 s: the mutex holder "
				 "was never run again (lost wake-up)",
				 r, __atomic_load_n(&stb_mix_done, __ATOMIC_ACQUIRE), NT);
		for (int i = 0; i < NB; i++)
			assert_int_equal(bthread_join(tids[i], NULL), 0);
		for (int i = 0; i < STB_MIX_PTHREADS; i++)
			assert_int_equal(pthread_join(pts[i], NULL), 0);
		assert_true(__atomic_load_n(&stb_mix_locks, __ATOMIC_ACQUIRE) > 0);
		total += stb_mix_locks;
	}
	__atomic_store_n(&stb_burn_stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < STB_MIX_BURNERS; i++)
		assert_int_equal(pthread_join(burners[i], NULL), 0);
	assert_int_equal(bthread_mutex_destroy(&stb_mix_m), 0);
	print_message("    %d rounds of %d ms, %ld locks, %d workers, %d burners\n",
		      STB_MIX_ROUNDS, STB_MIX_ROUND_MS, total, bthread_getconcurrency(),
		      STB_MIX_BURNERS);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_handoff_mutex_cond),
		cmocka_unit_test(test_handoff_butex),
		cmocka_unit_test(test_handoff_butex_timed),
		cmocka_unit_test(test_handoff_pipe),
		cmocka_unit_test(test_handoff_join),
		cmocka_unit_test(test_sleepers),
		cmocka_unit_test(test_stop_races),
		cmocka_unit_test(test_mixed_types_one_mutex),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
