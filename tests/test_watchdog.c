/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The in-process watchdog (stb_watchdog_start, $STB_WATCHDOG): a bthread
 * spinning without a switch is reported with its stack within twice the
 * threshold, a long-blocked one too; one report per episode, rate-limited;
 * nothing for bthreads that yield or for a healthy mutex churn; start, stop
 * and restart; the environment variable.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bthread/bthread.h"
#include "bthread/mutex.h"
#include "bthread/unstable.h"
#include "stb/stb.h"
#include "support/proc.h"

#define MS 1000000ull

/* What the callback received. */
static struct {
	pthread_mutex_t lock;
	unsigned n;
	uint64_t at_ns[16];
	uint64_t running[16], blocked[16], longest[16], in_syscall[16];
	char *text[16];
} got = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void on_report(const struct stb_watchdog_report *r, void *arg)
{
	assert_ptr_equal(arg, &got);
	assert_int_equal(strlen(r->text), r->len);
	pthread_mutex_lock(&got.lock);
	if (got.n < 16) {
		got.at_ns[got.n] = ts_now_ns();
		got.running[got.n] = r->running;
		got.blocked[got.n] = r->blocked;
		got.longest[got.n] = r->longest_ns;
		got.in_syscall[got.n] = r->in_syscall;
		got.text[got.n] = strdup(r->text);
	}
	got.n++;
	pthread_mutex_unlock(&got.lock);
}

/* Report i as received (a copy: asserts must not run with got.lock held). */
struct rep {
	uint64_t at_ns, running, blocked, longest, in_syscall;
	char text[65536];
};

static void snapshot(unsigned i, struct rep *r)
{
	pthread_mutex_lock(&got.lock);
	r->at_ns = got.at_ns[i];
	r->running = got.running[i];
	r->blocked = got.blocked[i];
	r->longest = got.longest[i];
	r->in_syscall = got.in_syscall[i];
	snprintf(r->text, sizeof(r->text), "%s", got.text[i] ? got.text[i] : "");
	pthread_mutex_unlock(&got.lock);
}

static struct rep rep0, rep1;

static unsigned reports(void)
{
	pthread_mutex_lock(&got.lock);
	unsigned n = got.n;
	pthread_mutex_unlock(&got.lock);
	return n;
}

static void reset(void)
{
	pthread_mutex_lock(&got.lock);
	for (unsigned i = 0; i < 16; i++) {
		free(got.text[i]);
		got.text[i] = NULL;
	}
	got.n = 0;
	pthread_mutex_unlock(&got.lock);
}

/* Waits until there are n reports (false at the deadline). */
static bool wait_reports(unsigned n, unsigned timeout_ms)
{
	uint64_t end = ts_now_ms() + timeout_ms;
	while (reports() < n) {
		if (ts_now_ms() >= end)
			return false;
		ts_sleep_ms(5);
	}
	return true;
}

/* ---- the workloads ---- */

static volatile int spin_stop;
static volatile uint64_t spin_started_ns;

/* Runs on a worker without ever switching until spin_stop. */
__attribute__((noinline)) static void *wdog_spin_hog(void *arg)
{
	(void)arg;
	spin_started_ns = ts_now_ns();
	while (!__atomic_load_n(&spin_stop, __ATOMIC_ACQUIRE))
		__asm__ volatile("pause");
	return NULL;
}

static int reader_pipe[2] = {-1, -1};

/* Pins its worker in read(2) until the pipe is written. */
__attribute__((noinline)) static void *wdog_reader(void *arg)
{
	(void)arg;
	char c;
	while (read(reader_pipe[0], &c, 1) < 0 && errno == EINTR)
		;
	return NULL;
}

static bthread_mutex_t held;

__attribute__((noinline)) static void *wdog_blocked_waiter(void *arg)
{
	(void)arg;
	bthread_mutex_lock(&held);
	bthread_mutex_unlock(&held);
	return NULL;
}

static volatile int churn_stop;

static void *yielder(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&churn_stop, __ATOMIC_ACQUIRE))
		bthread_yield();
	return NULL;
}

static bthread_mutex_t churn_mu;
static uint64_t churn_count;

static void *churner(void *arg)
{
	(void)arg;
	unsigned i = 0;
	while (!__atomic_load_n(&churn_stop, __ATOMIC_ACQUIRE)) {
		bthread_mutex_lock(&churn_mu);
		churn_count++;
		bthread_mutex_unlock(&churn_mu);
		if ((++i & 63) == 0)
			bthread_usleep(100);
	}
	return NULL;
}

/* ---- tests ---- */

static void test_start_stop(void **state)
{
	(void)state;
	assert_int_equal(stb_watchdog_stop(), -ESRCH);
	assert_int_equal(stb_watchdog_start(MS, on_report, &got), -EINVAL); /* below 10 ms */
	assert_int_equal(stb_watchdog_start(2 * 86400ull * 1000 * MS, NULL, NULL), -EINVAL);
	assert_int_equal(stb_watchdog_start(500 * MS, on_report, &got), 0);
	assert_int_equal(stb_watchdog_start(500 * MS, on_report, &got), -EALREADY);
	uint64_t t0 = ts_now_ns();
	assert_int_equal(stb_watchdog_stop(), 0);
	assert_true(ts_now_ns() - t0 < 5000 * MS); /* it wakes up at once */
	assert_int_equal(stb_watchdog_stop(), -ESRCH);
	assert_int_equal(stb_watchdog_start(500 * MS, on_report, &got), 0);
	assert_int_equal(stb_watchdog_stop(), 0);
	assert_int_equal(reports(), 0);
}

static void test_spin_reported_with_stack(void **state)
{
	(void)state;
	reset();
	const uint64_t threshold = 1000 * MS;
	assert_int_equal(stb_watchdog_start(threshold, on_report, &got), 0);
	spin_stop = 0;
	spin_started_ns = 0;
	bthread_t th;
	assert_int_equal(bthread_start_background(&th, NULL, wdog_spin_hog, NULL), 0);
	/* A 3 s spin: reported within 2x the threshold of its start, once. */
	bool caught = wait_reports(1, 3000);
	uint64_t started = spin_started_ns;
	uint64_t ran = started ? (ts_now_ns() - started) / MS : 3000;
	if (caught && ran < 3000)
		ts_sleep_ms((unsigned)(3000 - ran));
	__atomic_store_n(&spin_stop, 1, __ATOMIC_RELEASE);
	assert_int_equal(bthread_join(th, NULL), 0);
	ts_sleep_ms(600); /* checks after the spin ended: nothing new */
	assert_int_equal(stb_watchdog_stop(), 0);
	assert_true(caught);
	assert_true(started != 0);
	snapshot(0, &rep0);
	uint64_t after = rep0.at_ns - started;
	print_message("spin of 3 s reported %.3f s after it started (threshold 1 s)\n",
		      (double)after / 1e9);
	assert_true(after >= threshold);
	assert_true(after <= 2 * threshold);
	assert_int_equal(reports(), 1);
	assert_true(rep0.running >= 1);
	assert_true(rep0.longest >= threshold);
	assert_non_null(strstr(rep0.text, "stb watchdog"));
	assert_non_null(strstr(rep0.text, "without a switch"));
	if (!strstr(rep0.text, "wdog_spin_hog"))
		fail_msg("the report does not show the spinning bthread's stack:\n%s", rep0.text);
	reset();
}

/* A bthread blocked in read(2) on its worker runs without a switch: the
 * report gives it its state, the call and the worker it blocks. */
static void test_syscall_reported(void **state)
{
	(void)state;
	reset();
	assert_int_equal(pipe(reader_pipe), 0);
	bthread_t th;
	assert_int_equal(bthread_start_background(&th, NULL, wdog_reader, NULL), 0);
	assert_int_equal(stb_watchdog_start(300 * MS, on_report, &got), 0);
	bool caught = wait_reports(1, 3000);
	assert_int_equal(stb_watchdog_stop(), 0);
	assert_int_equal(write(reader_pipe[1], "x", 1), 1);
	assert_int_equal(bthread_join(th, NULL), 0);
	assert_true(caught);
	snapshot(0, &rep0);
	char want[64];
	snprintf(want, sizeof(want), "[in system call read(%d), ", reader_pipe[0]);
	close(reader_pipe[0]);
	close(reader_pipe[1]);
	if (!strstr(rep0.text, want) || !strstr(rep0.text, "blocks worker") ||
	    !strstr(rep0.text, "1 of them blocking their worker in a system call") ||
	    !strstr(rep0.text, "wdog_reader"))
		fail_msg("the report of a bthread in read():\n%s", rep0.text);
	assert_int_equal(rep0.in_syscall, 1);
	assert_true(rep0.running >= 1);
	reset();
}

static void test_blocked_once_per_episode_rate_limited(void **state)
{
	(void)state;
	reset();
	const uint64_t threshold = 200 * MS;
	assert_int_equal(bthread_mutex_init(&held, NULL), 0);
	bthread_mutex_lock(&held); /* by this pthread */
	assert_int_equal(stb_watchdog_start(threshold, on_report, &got), 0);
	bthread_t a, b;
	uint64_t t0 = ts_now_ns();
	assert_int_equal(bthread_start_background(&a, NULL, wdog_blocked_waiter, NULL), 0);
	assert_true(wait_reports(1, 5000));
	snapshot(0, &rep0);
	uint64_t first = rep0.at_ns;
	assert_true(first - t0 >= threshold);
	assert_true(rep0.blocked >= 1);
	assert_non_null(strstr(rep0.text, "mutex"));
	if (!strstr(rep0.text, "wdog_blocked_waiter"))
		fail_msg("the report does not show the blocked bthread's stack:\n%s", rep0.text);
	/* The same episode for 6 s (longer than the 5 s between reports): no
	 * second report. */
	ts_sleep_ms(6000);
	assert_int_equal(reports(), 1);
	/* A new episode right after one was reported: reported, but not before
	 * 5 s after the previous report. */
	bthread_mutex_unlock(&held);
	assert_int_equal(bthread_join(a, NULL), 0);
	bthread_mutex_lock(&held);
	assert_int_equal(bthread_start_background(&b, NULL, wdog_blocked_waiter, NULL), 0);
	uint64_t t1 = ts_now_ns();
	assert_true(wait_reports(2, 15000));
	snapshot(1, &rep1);
	uint64_t second = rep1.at_ns;
	print_message("blocked: first report %.3f s after the block; a new episode reported "
		      "%.3f s after it began, %.3f s after the first report\n",
		      (double)(first - t0) / 1e9, (double)(second - t1) / 1e9,
		      (double)(second - first) / 1e9);
	assert_true(second - t1 >= threshold);
	/* The block of a began 6 s + before b's: b is reported at the first
	 * check after it is stuck, the gap having passed. */
	assert_true(second - first >= 5000 * MS);
	assert_true(second - t1 <= 10 * threshold + 2000 * MS);
	ts_sleep_ms(1500);
	assert_int_equal(reports(), 2);
	bthread_mutex_unlock(&held);
	assert_int_equal(bthread_join(b, NULL), 0);
	assert_int_equal(stb_watchdog_stop(), 0);
	bthread_mutex_destroy(&held);
	reset();
}

static void test_rate_limit_between_episodes(void **state)
{
	(void)state;
	reset();
	const uint64_t threshold = 200 * MS;
	assert_int_equal(bthread_mutex_init(&held, NULL), 0);
	bthread_mutex_lock(&held);
	assert_int_equal(stb_watchdog_start(threshold, on_report, &got), 0);
	bthread_t a, b;
	assert_int_equal(bthread_start_background(&a, NULL, wdog_blocked_waiter, NULL), 0);
	assert_true(wait_reports(1, 5000));
	/* a is released and b gets stuck 1 s after the first report. */
	ts_sleep_ms(500);
	bthread_mutex_unlock(&held);
	assert_int_equal(bthread_join(a, NULL), 0);
	bthread_mutex_lock(&held);
	assert_int_equal(bthread_start_background(&b, NULL, wdog_blocked_waiter, NULL), 0);
	assert_true(wait_reports(2, 15000));
	snapshot(0, &rep0);
	snapshot(1, &rep1);
	uint64_t gap = rep1.at_ns - rep0.at_ns;
	print_message("two episodes 0.5 s apart reported %.3f s apart (at most one report per 5 s)\n",
		      (double)gap / 1e9);
	assert_true(gap >= 5000 * MS);
	assert_true(gap <= 9000 * MS);
	bthread_mutex_unlock(&held);
	assert_int_equal(bthread_join(b, NULL), 0);
	assert_int_equal(stb_watchdog_stop(), 0);
	bthread_mutex_destroy(&held);
	reset();
}

static void test_silent_for_yielders_and_churn(void **state)
{
	(void)state;
	reset();
	/* 2 s: on a loaded machine a worker thread may get no CPU for a
	 * while; the checks stay exact (no report at all). */
	const uint64_t threshold = 2000 * MS;
	assert_int_equal(bthread_mutex_init(&churn_mu, NULL), 0);
	assert_int_equal(stb_watchdog_start(threshold, on_report, &got), 0);
	churn_stop = 0;
	churn_count = 0;
	bthread_t th[12];
	for (int i = 0; i < 12; i++)
		assert_int_equal(bthread_start_background(&th[i], NULL, i < 4 ? yielder : churner,
							  NULL),
				 0);
	ts_sleep_ms(5000);
	__atomic_store_n(&churn_stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 12; i++)
		assert_int_equal(bthread_join(th[i], NULL), 0);
	/* A yielder alone on its worker: the only one, yields for 4 s. */
	churn_stop = 0;
	assert_int_equal(bthread_start_background(&th[0], NULL, yielder, NULL), 0);
	ts_sleep_ms(4000);
	__atomic_store_n(&churn_stop, 1, __ATOMIC_RELEASE);
	assert_int_equal(bthread_join(th[0], NULL), 0);
	assert_int_equal(stb_watchdog_stop(), 0);
	assert_true(churn_count > 1000);
	if (reports()) {
		snapshot(0, &rep0);
		fail_msg("the watchdog reported a healthy process:\n%s", rep0.text);
	}
	bthread_mutex_destroy(&churn_mu);
}

static bthread_mutex_t hm;
static volatile int holder_stop;

/* Holds hm while it sleeps (a lock held across a sleep, as in a bug). */
__attribute__((noinline)) static void *wdog_holder_fn(void *arg)
{
	(void)arg;
	bthread_mutex_lock(&hm);
	while (!__atomic_load_n(&holder_stop, __ATOMIC_ACQUIRE))
		bthread_usleep(20000);
	bthread_mutex_unlock(&hm);
	return NULL;
}

__attribute__((noinline)) static void *wdog_hm_waiter(void *arg)
{
	(void)arg;
	bthread_mutex_lock(&hm);
	bthread_mutex_unlock(&hm);
	return NULL;
}

/* Idle by design: waits on its fd, or sleeps, until told to end. */
__attribute__((noinline)) static void *wdog_idle_fd(void *arg)
{
	bthread_fd_wait((int)(intptr_t)arg, 1 /* EPOLLIN */);
	return NULL;
}

__attribute__((noinline)) static void *wdog_idle_sleeper(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&holder_stop, __ATOMIC_ACQUIRE))
		bthread_usleep(500000);
	return NULL;
}

static bthread_t start_named(void *(*fn)(void *), void *arg, const char *name)
{
	bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
	bthread_attr_set_name(&attr, name);
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, &attr, fn, arg), 0);
	return t;
}

/* The holder of the mutex two stuck bthreads wait on is in the report, by
 * name, with its stack and what it holds, though it only sleeps (not stuck
 * itself); idle fd waiters and sleepers are not. */
static void test_holder_shown(void **state)
{
	(void)state;
	reset();
	assert_int_equal(bthread_mutex_init(&hm, NULL), 0);
	holder_stop = 0;
	int p[2];
	assert_int_equal(pipe(p), 0);
	bthread_t holder = start_named(wdog_holder_fn, NULL, "wd holder");
	ts_sleep_ms(50); /* it holds hm */
	bthread_t w1 = start_named(wdog_hm_waiter, NULL, "wd waiter");
	bthread_t w2 = start_named(wdog_hm_waiter, NULL, "wd waiter");
	bthread_t fdw = start_named(wdog_idle_fd, (void *)(intptr_t)p[0], "wd idle fd");
	bthread_t sl = start_named(wdog_idle_sleeper, NULL, "wd idle sleeper");
	assert_int_equal(stb_watchdog_start(300 * MS, on_report, &got), 0);
	bool caught = wait_reports(1, 10000);
	assert_int_equal(stb_watchdog_stop(), 0);
	__atomic_store_n(&holder_stop, 1, __ATOMIC_RELEASE);
	assert_int_equal(write(p[1], "x", 1), 1);
	bthread_t all[] = {holder, w1, w2, fdw, sl};
	for (int i = 0; i < 5; i++)
		assert_int_equal(bthread_join(all[i], NULL), 0);
	close(p[0]);
	close(p[1]);
	bthread_mutex_destroy(&hm);
	assert_true(caught);
	snapshot(0, &rep0);
	char named[160], holds[160];
	snprintf(named, sizeof(named), "held by bthread %llu \"wd holder\" [suspended, ",
		 (unsigned long long)holder);
	const char *added = strstr(rep0.text, "\n# not selected, shown because the tasks above wait "
					      "on them:\n\n");
	snprintf(holds, sizeof(holds), "  holds mutex %p \xe2\x80\x94 2 waiting\n", (void *)&hm);
	if (!strstr(rep0.text, named) || !added || !strstr(added, "\"wd holder\"") ||
	    !strstr(added, holds) || !strstr(added, "wdog_holder_fn+0x"))
		fail_msg("the holder is not shown with its stack and what it holds:\n%s", rep0.text);
	if (strstr(rep0.text, "wdog_idle_fd") || strstr(rep0.text, "wdog_idle_sleeper"))
		fail_msg("an idle fd waiter or sleeper reported as stuck:\n%s", rep0.text);
	assert_int_equal(rep0.blocked, 2); /* the holder is not stuck */
	reset();
}

static void test_stopped_reports_nothing(void **state)
{
	(void)state;
	reset();
	assert_int_equal(stb_watchdog_start(100 * MS, on_report, &got), 0);
	assert_int_equal(stb_watchdog_stop(), 0);
	spin_stop = 0;
	bthread_t th;
	assert_int_equal(bthread_start_background(&th, NULL, wdog_spin_hog, NULL), 0);
	ts_sleep_ms(800);
	__atomic_store_n(&spin_stop, 1, __ATOMIC_RELEASE);
	assert_int_equal(bthread_join(th, NULL), 0);
	assert_int_equal(reports(), 0);
}

/* $STB_WATCHDOG: a child spins 1.5 s with STB_WATCHDOG=0.3; the report is on
 * its stderr. A bad value is named and ignored. */
static void test_env(void **state)
{
	(void)state;
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(n > 0);
	exe[n] = '\0';
	char *argv[] = {exe, "--child-spin", NULL};
	char *err = NULL;
	setenv("STB_WATCHDOG", "0.3", 1);
	int rc = ts_run(argv, NULL, &err, 120);
	unsetenv("STB_WATCHDOG");
	assert_int_equal(rc, 0);
	assert_non_null(err);
	if (!strstr(err, "==== stb watchdog") || !strstr(err, "wdog_spin_hog"))
		fail_msg("no watchdog report on the child's stderr:\n%s", err);
	free(err);
	err = NULL;
	setenv("STB_WATCHDOG", "soon", 1);
	rc = ts_run(argv, NULL, &err, 120);
	unsetenv("STB_WATCHDOG");
	assert_int_equal(rc, 0);
	assert_non_null(strstr(err, "ignoring STB_WATCHDOG=soon"));
	assert_null(strstr(err, "==== stb watchdog"));
	free(err);
}

static int child_spin(void)
{
	spin_stop = 0;
	bthread_t th;
	if (bthread_start_background(&th, NULL, wdog_spin_hog, NULL) != 0)
		return 1;
	ts_sleep_ms(1500);
	__atomic_store_n(&spin_stop, 1, __ATOMIC_RELEASE);
	return bthread_join(th, NULL) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--child-spin") == 0)
		return child_spin();
	/* Enough workers that one spinning leaves others to run. */
	bthread_setconcurrency(4);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_start_stop),
		cmocka_unit_test(test_spin_reported_with_stack),
		cmocka_unit_test(test_syscall_reported),
		cmocka_unit_test(test_blocked_once_per_episode_rate_limited),
		cmocka_unit_test(test_rate_limit_between_episodes),
		cmocka_unit_test(test_silent_for_yielders_and_churn),
		cmocka_unit_test(test_holder_shown),
		cmocka_unit_test(test_stopped_reports_nothing),
		cmocka_unit_test(test_env),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
