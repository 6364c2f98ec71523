/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Target of bench/bench_profile.sh: Y bthreads calling bthread_yield() in a
 * loop (the throughput the profiler must not disturb) and S bthreads asleep
 * (off-CPU tasks the profiler snapshots every tick). Every 100 ms it prints
 * "<CLOCK_REALTIME ns> <yields so far>" on stdout; it exits when stdin
 * closes. Usage: bench_profile_target [YIELDERS [SLEEPERS]] (default 8 1000).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bthread/bthread.h>

#define STB_BENCH_SLOTS 64

/* One counter per yielder, each on its own cache line. */
static struct {
	uint64_t n;
	char pad[56];
} stb_bench_count[STB_BENCH_SLOTS];
static volatile bool stb_bench_stop;

static void *stb_bench_yielder(void *arg)
{
	uint64_t *n = &stb_bench_count[(uintptr_t)arg % STB_BENCH_SLOTS].n;
	while (!stb_bench_stop) {
		bthread_yield();
		__atomic_store_n(n, *n + 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void *stb_bench_sleeper(void *arg)
{
	(void)arg;
	while (!stb_bench_stop)
		bthread_usleep(3600u * 1000000u);
	return NULL;
}

static bool stb_bench_parse(const char *s, unsigned long max, unsigned long *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (!*s || *s == '-' || *end || errno || v > max)
		return false;
	*out = v;
	return true;
}

int main(int argc, char **argv)
{
	unsigned long yielders = 8, sleepers = 1000;
	if (argc > 3 || (argc > 1 && !stb_bench_parse(argv[1], STB_BENCH_SLOTS, &yielders)) ||
	    (argc > 2 && !stb_bench_parse(argv[2], 100000, &sleepers)) || yielders == 0) {
		fprintf(stderr, "usage: bench_profile_target [YIELDERS (1..%d) [SLEEPERS]]\n",
			STB_BENCH_SLOTS);
		return 64;
	}
	for (unsigned long i = 0; i < sleepers; i++) {
		bthread_t t;
		if (bthread_start_background(&t, NULL, stb_bench_sleeper, NULL) != 0)
			return 1;
	}
	for (unsigned long i = 0; i < yielders; i++) {
		bthread_t t;
		if (bthread_start_background(&t, NULL, stb_bench_yielder, (void *)(uintptr_t)i) != 0)
			return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (;;) {
		struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
		int r = poll(&pfd, 1, 100);
		if (r > 0) {
			char c;
			if (read(STDIN_FILENO, &c, 1) <= 0)
				break;
		}
		uint64_t total = 0;
		for (unsigned long i = 0; i < yielders; i++)
			total += __atomic_load_n(&stb_bench_count[i].n, __ATOMIC_RELAXED);
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		printf("%" PRIu64 " %" PRIu64 "\n",
		       (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec, total);
	}
	stb_bench_stop = true;
	return 0;
}
