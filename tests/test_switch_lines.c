/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The switch path writes only the cache lines its worker owns at that moment
 * (include/stb/abi.h, "Running"; runtime/core/sched.c): its own struct and
 * table line, and the task that leaves -- never the task it switches to,
 * another worker, the monitor's line or the runtime at large. The test
 * library checks every store of the path against those lines while the
 * tasks below yield, start bthreads urgently and move between two workers;
 * a store planted where it must not be proves that the check catches one.
 */
#include "test_util.h"

#include <pthread.h>

#include <bthread/bthread.h>

#include "internal.h"

extern int stb_test_sw_check, stb_test_sw_plant;
extern uint64_t stb_test_sw_stores, stb_test_sw_fast, stb_test_sw_bad;
extern const char *stb_test_sw_bad_what;

static int stop;
static long steals;

static void *noop(void *arg)
{
	return arg;
}

/* Yields; every 64th time starts a bthread urgently (the caller is queued
 * after the new one ran: a switch with another post action) and joins it. */
static void *yielder(void *arg)
{
	(void)arg;
	uintptr_t self = (uintptr_t)stb_worker_self();
	for (long i = 0; !__atomic_load_n(&stop, __ATOMIC_ACQUIRE); i++) {
		if (i % 64 == 63) {
			bthread_t t;
			if (bthread_start_urgent(&t, NULL, noop, NULL) == 0)
				bthread_join(t, NULL);
		} else {
			bthread_yield();
		}
		uintptr_t now = (uintptr_t)stb_worker_self();
		if (now != self) {
			__atomic_fetch_add(&steals, 1, __ATOMIC_RELAXED);
			self = now;
		}
	}
	return NULL;
}

/* Runs 16 yielders on the two workers for ms; returns the stores checked. */
static uint64_t run(unsigned ms)
{
	enum { N = 16 };
	bthread_t t[N];
	__atomic_store_n(&stop, 0, __ATOMIC_RELEASE);
	uint64_t s0 = __atomic_load_n(&stb_test_sw_stores, __ATOMIC_RELAXED);
	for (int i = 0; i < N; i++)
		assert_int_equal(bthread_start_background(&t[i], NULL, yielder, NULL), 0);
	stb_test_sleep_ms(ms);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < N; i++)
		assert_int_equal(bthread_join(t[i], NULL), 0);
	return __atomic_load_n(&stb_test_sw_stores, __ATOMIC_RELAXED) - s0;
}

static void test_switch_writes_owned_lines(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	__atomic_store_n(&stb_test_sw_check, 1, __ATOMIC_RELEASE);
	uint64_t stores = run(300);
	uint64_t fast = __atomic_load_n(&stb_test_sw_fast, __ATOMIC_RELAXED);
	uint64_t bad = __atomic_load_n(&stb_test_sw_bad, __ATOMIC_RELAXED);
	print_message("    %llu stores on the switch path checked (%llu fast-path switches, "
		      "%ld moves between workers), %llu outside the owned lines%s%s\n",
		      (unsigned long long)stores, (unsigned long long)fast, steals,
		      (unsigned long long)bad, bad ? ": " : "",
		      bad ? stb_test_sw_bad_what : "");
	/* It looked: the shipped fast path ran, on both workers, with moves. */
	assert_true(stores > 1000);
	assert_true(fast > 100);
	assert_true(steals > 0);
	assert_int_equal(bad, 0);

	/* A store to the entry of the task switched to (what the switch wrote
	 * before ABI version 3) is caught. */
	__atomic_store_n(&stb_test_sw_plant, 1, __ATOMIC_RELEASE);
	run(50);
	__atomic_store_n(&stb_test_sw_plant, 0, __ATOMIC_RELEASE);
	bad = __atomic_load_n(&stb_test_sw_bad, __ATOMIC_RELAXED);
	print_message("    planted: %llu caught (%s)\n", (unsigned long long)bad,
		      bad ? stb_test_sw_bad_what : "none");
	assert_true(bad > 0);
	assert_string_equal(stb_test_sw_bad_what, "planted: the entry switched to");
	__atomic_store_n(&stb_test_sw_check, 0, __ATOMIC_RELEASE);
	STB_TEST_END();
}

int main(void)
{
	/* Two workers on any machine: tasks move between them by stealing. */
	setenv("STB_CONCURRENCY", "2", 1);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_switch_writes_owned_lines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
