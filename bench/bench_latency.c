/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Wake-up and timer latency, quiet and under load, side by side in one run
 * (docs/benchmarks.md, "Latency under load"): how late a timed wait returns
 * after its deadline -- a pthread's futex wait (the kernel's own timer: the
 * floor), a bthread's timed butex_wait and bthread_usleep (the runtime's
 * timer thread, then a parked worker) -- and how long a bthread parked in a
 * butex takes to run after a pthread wakes it. Rounds alternate quiet and
 * loaded (busy pthreads, one per CPU, at the same priority); percentiles of
 * every sample of each kind, and the ratios loaded/quiet and bthread/pthread.
 * Not a test: the figures depend on the machine and what else runs on it.
 */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>

#define MAX_SAMPLES 20000

enum kind { K_FUTEX, K_BUTEX, K_USLEEP, K_WAKE, K_NKINDS };
static const char *const kind_names[K_NKINDS] = {
	"pthread futex wait (kernel timer)", "bthread timed butex_wait", "bthread_usleep",
	"butex_wake -> parked bthread runs"};

struct series {
	double us[MAX_SAMPLES];
	int n;
};

static struct series results[2][K_NKINDS]; /* [loaded][kind] */

static struct {
	int rounds;
	int samples;     /* per kind per round */
	long wait_us;    /* the timed waits' length */
	int hogs;        /* busy pthreads under load (0: one per CPU) */
} cfg = {.rounds = 6, .samples = 200, .wait_us = 1000, .hogs = 0};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct timespec realtime_in_ns(uint64_t ns)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t t = (uint64_t)ts.tv_nsec + ns;
	ts.tv_sec += (time_t)(t / 1000000000u);
	ts.tv_nsec = (long)(t % 1000000000u);
	return ts;
}

static void add(int loaded, enum kind k, double us)
{
	struct series *s = &results[loaded][k];
	if (s->n < MAX_SAMPLES)
		s->us[s->n++] = us;
}

/* ---- the load ---- */

static atomic_int hog_stop;

static void *hog(void *arg)
{
	(void)arg;
	volatile uint64_t x = 0;
	while (!atomic_load_explicit(&hog_stop, memory_order_relaxed))
		x++;
	return NULL;
}

/* ---- the measurements ---- */

/* A pthread: futex waits with a relative timeout on a word nobody changes. */
static void measure_futex(int loaded)
{
	uint32_t word = 0;
	for (int i = 0; i < cfg.samples; i++) {
		struct timespec rel = {0, cfg.wait_us * 1000};
		uint64_t deadline = now_ns() + (uint64_t)cfg.wait_us * 1000u;
		syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &rel, NULL, 0);
		add(loaded, K_FUTEX, (double)(now_ns() - deadline) / 1e3);
	}
}

struct bjob {
	int loaded;
	int *butex;
};

/* A bthread: timed butex waits, then sleeps. */
static void *timed_waits(void *arg)
{
	struct bjob *j = arg;
	for (int i = 0; i < cfg.samples; i++) {
		uint64_t deadline = now_ns() + (uint64_t)cfg.wait_us * 1000u;
		struct timespec abs = realtime_in_ns((uint64_t)cfg.wait_us * 1000u);
		butex_wait(j->butex, 0, &abs);
		add(j->loaded, K_BUTEX, (double)(now_ns() - deadline) / 1e3);
	}
	for (int i = 0; i < cfg.samples; i++) {
		uint64_t deadline = now_ns() + (uint64_t)cfg.wait_us * 1000u;
		bthread_usleep((uint64_t)cfg.wait_us);
		add(j->loaded, K_USLEEP, (double)(now_ns() - deadline) / 1e3);
	}
	return NULL;
}

/* A bthread parked in butex_wait; this pthread wakes it and times how long
 * it takes to run (it stores the time it ran). */
static _Atomic uint64_t woke_at;
static atomic_int waits_for; /* the value the parked bthread waits to change */

static void *parked(void *arg)
{
	int *b = arg;
	for (;;) {
		int v = __atomic_load_n(b, __ATOMIC_ACQUIRE);
		if (v < 0)
			return NULL;
		atomic_store(&waits_for, v);
		while (__atomic_load_n(b, __ATOMIC_ACQUIRE) == v)
			butex_wait(b, v, NULL);
		atomic_store(&woke_at, now_ns());
	}
}

static void measure_wake(int loaded)
{
	int *b = butex_create();
	*b = 0;
	bthread_t t;
	if (bthread_start_background(&t, NULL, parked, b) != 0)
		exit(1);
	atomic_store(&waits_for, -1);
	for (int i = 0; i < cfg.samples; i++) {
		/* Let it park (and the workers go idle) before the wake. */
		struct timespec pause = {0, cfg.wait_us * 1000};
		while (atomic_load(&waits_for) != i)
			nanosleep(&pause, NULL);
		nanosleep(&pause, NULL);
		atomic_store(&woke_at, 0);
		uint64_t t0 = now_ns();
		__atomic_fetch_add(b, 1, __ATOMIC_RELEASE);
		butex_wake(b);
		uint64_t at;
		while (!(at = atomic_load(&woke_at)))
			sched_yield();
		add(loaded, K_WAKE, (double)(at - t0) / 1e3);
	}
	__atomic_store_n(b, -1, __ATOMIC_RELEASE);
	butex_wake(b);
	bthread_join(t, NULL);
	butex_destroy(b);
}

static void round_once(int loaded)
{
	int nhogs = cfg.hogs ? cfg.hogs : (int)sysconf(_SC_NPROCESSORS_ONLN);
	pthread_t h[64];
	if (nhogs > 64)
		nhogs = 64;
	atomic_store(&hog_stop, 0);
	for (int i = 0; loaded && i < nhogs; i++)
		pthread_create(&h[i], NULL, hog, NULL);
	if (loaded)
		usleep(20000); /* the hogs run */
	measure_futex(loaded);
	int *b = butex_create();
	*b = 0;
	struct bjob j = {.loaded = loaded, .butex = b};
	bthread_t t;
	if (bthread_start_background(&t, NULL, timed_waits, &j) != 0)
		exit(1);
	bthread_join(t, NULL);
	butex_destroy(b);
	measure_wake(loaded);
	atomic_store(&hog_stop, 1);
	for (int i = 0; loaded && i < nhogs; i++)
		pthread_join(h[i], NULL);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(struct series *s, double p)
{
	if (!s->n)
		return 0;
	int i = (int)(p / 100.0 * (s->n - 1) + 0.5);
	return s->us[i];
}

static void usage(void)
{
	fprintf(stderr,
		"Usage: bench_latency [--rounds N] [--samples N] [--wait-us N] [--hogs N]\n"
		"Rounds alternate quiet and loaded (N busy pthreads; default one per CPU).\n"
		"Prints, for each kind of wait, the lateness percentiles in microseconds\n"
		"quiet and loaded, and the ratios loaded/quiet and bthread/pthread.\n"
		"Example: flock -x /work/notes/quiet.lock build/bench/bench_latency --rounds 8\n");
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--rounds") && v)
			cfg.rounds = atoi(v), i++;
		else if (!strcmp(a, "--samples") && v)
			cfg.samples = atoi(v), i++;
		else if (!strcmp(a, "--wait-us") && v)
			cfg.wait_us = atol(v), i++;
		else if (!strcmp(a, "--hogs") && v)
			cfg.hogs = atoi(v), i++;
		else if (!strcmp(a, "--help")) {
			usage();
			return 0;
		} else {
			usage();
			return 64;
		}
	}
	if (cfg.rounds < 1 || cfg.samples < 1 || cfg.wait_us < 10 ||
	    (long)cfg.rounds * cfg.samples / 2 > MAX_SAMPLES) {
		usage();
		return 64;
	}
	printf("bench_latency: %d rounds (quiet and loaded in turn) x %d samples of each kind,\n"
	       "waits of %ld us, %d busy pthreads under load, %ld CPUs, %d workers\n",
	       cfg.rounds, cfg.samples, cfg.wait_us,
	       cfg.hogs ? cfg.hogs : (int)sysconf(_SC_NPROCESSORS_ONLN),
	       sysconf(_SC_NPROCESSORS_ONLN), bthread_getconcurrency());
	for (int r = 0; r < cfg.rounds; r++)
		round_once(r & 1);
	printf("\nlateness in us (how long after the deadline, or after the wake, it ran):\n");
	printf("%-36s %-6s %8s %8s %8s %8s\n", "", "", "p50", "p90", "p99", "max");
	double p99[2][K_NKINDS];
	for (int k = 0; k < K_NKINDS; k++) {
		for (int l = 0; l < 2; l++) {
			struct series *s = &results[l][k];
			qsort(s->us, (size_t)s->n, sizeof(double), cmp);
			p99[l][k] = pct(s, 99);
			printf("%-36s %-6s %8.1f %8.1f %8.1f %8.1f\n", l ? "" : kind_names[k],
			       l ? "loaded" : "quiet", pct(s, 50), pct(s, 90), p99[l][k],
			       s->n ? s->us[s->n - 1] : 0);
		}
	}
	printf("\nratios of p99 (median ratios in parentheses):\n");
	for (int k = 0; k < K_NKINDS; k++) {
		double q50 = pct(&results[0][k], 50), l50 = pct(&results[1][k], 50);
		printf("  %-36s loaded/quiet %6.2f (%5.2f)", kind_names[k],
		       p99[0][k] > 0 ? p99[1][k] / p99[0][k] : 0, q50 > 0 ? l50 / q50 : 0);
		if (k == K_BUTEX || k == K_USLEEP)
			printf("   vs pthread: quiet %5.2f, loaded %5.2f",
			       p99[0][K_FUTEX] > 0 ? p99[0][k] / p99[0][K_FUTEX] : 0,
			       p99[1][K_FUTEX] > 0 ? p99[1][k] / p99[1][K_FUTEX] : 0);
		printf("\n");
	}
	return 0;
}
