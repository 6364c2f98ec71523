/* SPDX-License-Identifier: Apache-2.0 */
/*
 * In-process tracer costs (docs/benchmarks.md): idle cost (this file built with
 * bthread_static and bthread_notrace, run in alternate rounds), trace latency
 * and hold time, full dumps of 10,000/100,000 bthreads (--dump-sizes), grouped and
 * not, in the default table where they fit, and yield throughput
 * while a thread traces. Each measurement runs in a fresh child process;
 * `--child trace_loop N` runs text and structured traces untimed, for
 * callgrind's instruction counts.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>
#if STB_BENCH_TRACER
#include <stb/abi.h>
#include <stb/stb.h>

#include "util.h"
#endif

#if !defined(STB_BENCH_TRACER)
#error "STB_BENCH_TRACER must say which library this is linked with"
#endif

#define STB_TRACER_ONLY __attribute__((unused)) /* used by the tracer build only */
#define STB_NO_TAIL() __asm__ volatile("" ::: "memory")
#define STB_MAX_ROUNDS 64
#define STB_YIELDERS 200 /* 2 workers x 100 bthreads */

static double stb_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time of the calling thread: what a dump costs, apart from waiting for
 * a CPU on a shared machine. */
STB_TRACER_ONLY static double stb_thread_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void stb_die(const char *what, int rc)
{
	fprintf(stderr, "bench_trace: %s failed: %d (%s)\n", what, rc, strerror(rc < 0 ? -rc : rc));
	exit(1);
}

static int stb_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

STB_TRACER_ONLY static double stb_median(const double *v, int n)
{
	double t[STB_MAX_ROUNDS];
	memcpy(t, v, (size_t)n * sizeof(double));
	qsort(t, (size_t)n, sizeof(double), stb_cmp_double);
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

static int stb_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Sorts v and returns its q-quantile (0 <= q <= 1). */
STB_TRACER_ONLY static uint64_t stb_quantile(uint64_t *v, size_t n, double q, bool sorted)
{
	if (!sorted)
		qsort(v, n, sizeof(uint64_t), stb_cmp_u64);
	size_t i = (size_t)(q * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

/* ---- idle cost (both builds) ---- */

struct stb_counter {
	uint64_t n;
	char pad[56];
};

static struct stb_counter stb_yields[STB_YIELDERS];
static int stb_yield_stop;

/* Loop A: the count bumped by a load, an add and a store. */
static void *stb_yielder(void *arg)
{
	struct stb_counter *c = arg;
	while (!__atomic_load_n(&stb_yield_stop, __ATOMIC_RELAXED)) {
		bthread_yield();
		__atomic_store_n(&c->n, c->n + 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/* Loop B: the same with the count bumped by one add to memory. The runtime
 * code is the same for both; what the shape of the loop around bthread_yield
 * does to the built-in / built-out ratio is the point (docs/benchmarks.md). */
static void *stb_yielder_b(void *arg)
{
	struct stb_counter *c = arg;
	while (!__atomic_load_n(&stb_yield_stop, __ATOMIC_RELAXED)) {
		bthread_yield();
		__asm__ volatile("addq $1, %0" : "+m"(c->n));
	}
	return NULL;
}

static uint64_t stb_yield_sum(void)
{
	uint64_t s = 0;
	for (int i = 0; i < STB_YIELDERS; i++)
		s += __atomic_load_n(&stb_yields[i].n, __ATOMIC_RELAXED);
	return s;
}

static bthread_t stb_yielder_ids[STB_YIELDERS];

static void stb_yielders_start(void *(*loop)(void *))
{
	__atomic_store_n(&stb_yield_stop, 0, __ATOMIC_RELAXED);
	for (int i = 0; i < STB_YIELDERS; i++) {
		int rc = bthread_start_background(&stb_yielder_ids[i], &BTHREAD_ATTR_SMALL,
						  loop, &stb_yields[i]);
		if (rc)
			stb_die("bthread_start_background", rc);
	}
}

static void stb_yielders_stop(void)
{
	__atomic_store_n(&stb_yield_stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < STB_YIELDERS; i++)
		bthread_join(stb_yielder_ids[i], NULL);
}

/*
 * Nanoseconds the worker threads (bthread_w*) have spent on a CPU
 * (/proc/self/task/TID/schedstat). On a shared machine the wall-clock rate
 * depends on how much CPU the other jobs leave us; the rate per worker-CPU
 * second does not.
 */
static uint64_t stb_workers_cpu_ns(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	uint64_t sum = 0;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char path[64], comm[32] = "";
		snprintf(path, sizeof(path), "/proc/self/task/%.16s/comm", de->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = '\0';
		fclose(f);
		if (strncmp(comm, "bthread_w", 9) != 0)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%.16s/schedstat", de->d_name);
		f = fopen(path, "r");
		unsigned long long ns = 0;
		if (f && fscanf(f, "%llu", &ns) == 1)
			sum += ns;
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return sum;
}

/* Yields per second of all yielders over secs (they are running); *per_cpu_s
 * gets the yields per second of worker CPU time. */
static double stb_yield_rate(double secs, double *per_cpu_s)
{
	uint64_t y0 = stb_yield_sum(), c0 = stb_workers_cpu_ns();
	double t0 = stb_now();
	usleep((useconds_t)(secs * 1e6));
	uint64_t y1 = stb_yield_sum(), c1 = stb_workers_cpu_ns();
	double t1 = stb_now();
	*per_cpu_s = c1 > c0 ? (double)(y1 - y0) / ((double)(c1 - c0) * 1e-9) : 0;
	return (double)(y1 - y0) / (t1 - t0);
}

static void *stb_nothing(void *arg)
{
	return arg;
}

struct stb_create_ctx {
	double secs;
	uint64_t ops;
};

/* Batches of 100 start_background + join from a bthread, for secs. */
static void *stb_creator(void *arg)
{
	struct stb_create_ctx *c = arg;
	double end = stb_now() + c->secs;
	bthread_t ids[100];
	while (stb_now() < end) {
		for (int i = 0; i < 100; i++)
			if (bthread_start_background(&ids[i], &BTHREAD_ATTR_SMALL, stb_nothing, NULL))
				stb_die("bthread_start_background", errno);
		for (int i = 0; i < 100; i++)
			bthread_join(ids[i], NULL);
		c->ops += 100;
	}
	return NULL;
}

static int stb_child_idle(double secs)
{
	/* 2 workers: below BTHREAD_MIN_CONCURRENCY only through the expert override. */
	setenv("STB_CONCURRENCY", "2", 1);
	stb_yielders_start(stb_yielder);
	usleep(100000); /* warm-up */
	double yield_cpu;
	double yield = stb_yield_rate(secs, &yield_cpu);
	stb_yielders_stop();
	stb_yielders_start(stb_yielder_b);
	usleep(100000);
	double yield_b_cpu;
	double yield_b = stb_yield_rate(secs, &yield_b_cpu);
	stb_yielders_stop();

	struct stb_create_ctx c = {.secs = 0.1};
	bthread_t t;
	bthread_start_background(&t, NULL, stb_creator, &c); /* warm-up: stacks pooled */
	bthread_join(t, NULL);
	c.secs = secs;
	c.ops = 0;
	double t0 = stb_now();
	uint64_t c0 = stb_workers_cpu_ns();
	bthread_start_background(&t, NULL, stb_creator, &c);
	bthread_join(t, NULL);
	double create = (double)c.ops / (stb_now() - t0);
	double create_cpu = (double)c.ops / ((double)(stb_workers_cpu_ns() - c0) * 1e-9);
	printf("yield_per_s=%.0f yield_per_cpu_s=%.0f yield_b_per_s=%.0f yield_b_per_cpu_s=%.0f "
	       "create_join_per_s=%.0f create_join_per_cpu_s=%.0f\n",
	       yield, yield_cpu, yield_b, yield_b_cpu, create, create_cpu);
	return 0;
}

/*
 * Fixed work for instruction counts (valgrind --tool=callgrind, docs/benchmarks.md):
 * one worker, 100 bthreads that yield `yields` times each, then `batches`
 * batches of 100 start_background + join from a bthread. Deterministic
 * except for the idle worker's spinning: compare two runs that differ in one
 * count and divide the difference.
 */
struct stb_count_ctx {
	long yields;
	long batches;
};

static void *stb_count_yielder(void *arg)
{
	long n = ((struct stb_count_ctx *)arg)->yields;
	for (long i = 0; i < n; i++)
		bthread_yield();
	return NULL;
}

static void *stb_count_creator(void *arg)
{
	bthread_t ids[100];
	for (long b = 0; b < ((struct stb_count_ctx *)arg)->batches; b++) {
		for (int i = 0; i < 100; i++)
			if (bthread_start_background(&ids[i], &BTHREAD_ATTR_SMALL, stb_nothing, NULL))
				stb_die("bthread_start_background", errno);
		for (int i = 0; i < 100; i++)
			bthread_join(ids[i], NULL);
	}
	return NULL;
}

static int stb_child_idle_count(long yields, long batches)
{
	if (yields < 0 || batches < 0) {
		fprintf(stderr, "bench_trace: idle_count wants YIELDS BATCHES >= 0\n");
		return 2;
	}
	setenv("STB_CONCURRENCY", "1", 1);
	struct stb_count_ctx c = {.yields = yields, .batches = batches};
	bthread_t ids[100], t;
	for (int i = 0; i < 100; i++)
		if (bthread_start_background(&ids[i], &BTHREAD_ATTR_SMALL, stb_count_yielder, &c))
			stb_die("bthread_start_background", errno);
	for (int i = 0; i < 100; i++)
		bthread_join(ids[i], NULL);
	if (bthread_start_background(&t, NULL, stb_count_creator, &c))
		stb_die("bthread_start_background", errno);
	bthread_join(t, NULL);
	printf("yields=%ld create_join=%ld\n", yields * 100, batches * 100);
	return 0;
}

#if STB_BENCH_TRACER

/* ---- trace latency and hold time ---- */

static void *stb_lat_butex;
static int stb_spin_stop;

/* Five frames of our own: with the runtime's three above and the two at the
 * bottom, a suspended task has 10 frames. */
STB_NOIPA static void stb_c5(void)
{
	while (__atomic_load_n((int *)stb_lat_butex, __ATOMIC_ACQUIRE) == 0)
		butex_wait(stb_lat_butex, 0, NULL);
	STB_NO_TAIL();
}
STB_NOIPA static void stb_c4(void) { stb_c5(); STB_NO_TAIL(); }
STB_NOIPA static void stb_c3(void) { stb_c4(); STB_NO_TAIL(); }
STB_NOIPA static void stb_c2(void) { stb_c3(); STB_NO_TAIL(); }
STB_NOIPA static void *stb_c1(void *a) { (void)a; stb_c2(); STB_NO_TAIL(); return NULL; }

STB_NOIPA static void stb_spin_leaf(void)
{
	while (!__atomic_load_n(&stb_spin_stop, __ATOMIC_RELAXED))
		__asm__ volatile("pause");
	STB_NO_TAIL();
}
STB_NOIPA static void stb_s4(void) { stb_spin_leaf(); STB_NO_TAIL(); }
STB_NOIPA static void stb_s3(void) { stb_s4(); STB_NO_TAIL(); }
STB_NOIPA static void stb_s2(void) { stb_s3(); STB_NO_TAIL(); }
STB_NOIPA static void *stb_s1(void *a) { (void)a; stb_s2(); STB_NO_TAIL(); return NULL; }

struct stb_lat {
	uint64_t *lat, *held;
	unsigned n, frames, leaf;
};

static void stb_lat_run(bthread_t id, const struct stb_trace_opts *o, unsigned n,
			struct stb_lat *r, const char *leaf)
{
	struct stb_frame fr[64];
	struct stb_trace_info info;
	r->lat = calloc(n, sizeof(uint64_t));
	r->held = calloc(n, sizeof(uint64_t));
	r->n = n;
	r->leaf = 0;
	for (unsigned i = 0; i < n; i++) {
		uint64_t t0 = stb_now_ns();
		int rc = stb_trace(id, o, fr, 64, &info);
		r->lat[i] = stb_now_ns() - t0;
		if (rc <= 0)
			stb_die(info.error, rc);
		r->held[i] = info.held_ns;
		r->frames = (unsigned)rc;
		if (leaf && fr[0].symbol && strcmp(fr[0].symbol, leaf) == 0)
			r->leaf++;
	}
}

/* bthread_stack_trace (text, symbols, no file:line) of the same task, timed
 * the same way: what formatting adds to the structured trace. */
static void stb_lat_text(bthread_t id, unsigned n, struct stb_lat *r)
{
	char text[4096];
	r->lat = calloc(n, sizeof(uint64_t));
	r->held = calloc(n, sizeof(uint64_t));
	r->n = n;
	r->leaf = 0;
	r->frames = 0;
	for (unsigned i = 0; i < n; i++) {
		uint64_t t0 = stb_now_ns();
		int rc = bthread_stack_trace(id, text, sizeof(text));
		r->lat[i] = stb_now_ns() - t0;
		if (rc <= 0)
			stb_die("bthread_stack_trace", rc);
	}
	for (const char *p = text; (p = strchr(p, '\n')); p++)
		r->frames++;
}

static void stb_lat_print(const char *key, struct stb_lat *r)
{
	/* Sorting first: argument evaluation order is unspecified. */
	unsigned long long l50 = stb_quantile(r->lat, r->n, 0.5, false);
	unsigned long long l99 = stb_quantile(r->lat, r->n, 0.99, true);
	unsigned long long h50 = stb_quantile(r->held, r->n, 0.5, false);
	unsigned long long h99 = stb_quantile(r->held, r->n, 0.99, true);
	unsigned long long hmax = r->held[r->n - 1];
	printf("%s_frames=%u %s_lat_p50_ns=%llu %s_lat_p99_ns=%llu %s_held_p50_ns=%llu "
	       "%s_held_p99_ns=%llu %s_held_max_ns=%llu %s_leaf=%u %s_n=%u ",
	       key, r->frames, key, l50, key, l99, key, h50, key, h99, key, hmax, key, r->leaf, key,
	       r->n);
	free(r->lat);
	free(r->held);
}

/* Starts the suspended task (and the running one when run is not NULL) and
 * waits until both are where they are traced. */
static bthread_t stb_lat_start(bthread_t *run)
{
	setenv("STB_CONCURRENCY", "2", 1);
	stb_set_signal_trace_timeout_ms(5000);
	stb_lat_butex = butex_create();
	bthread_t sus;
	bthread_start_background(&sus, NULL, stb_c1, NULL);
	if (run)
		bthread_start_background(run, NULL, stb_s1, NULL);
	struct stb_trace_info info;
	for (int i = 0; i < 10000; i++) {
		if (stb_trace(sus, NULL, NULL, 0, &info) > 0 && info.state == STB_TASK_SUSPENDED &&
		    (!run ||
		     (stb_trace(*run, NULL, NULL, 0, &info) > 0 && info.mode == STB_TRACE_SIGNAL)))
			break;
		usleep(1000);
	}
	return sus;
}

/* n text then structured (symbols) traces of the suspended task, untimed:
 * what callgrind counts (docs/benchmarks.md, issue 13). */
static int stb_child_trace_loop(unsigned n)
{
	bthread_t sus = stb_lat_start(NULL);
	static char text[4096];
	struct stb_frame fr[64];
	struct stb_trace_info info;
	const struct stb_trace_opts sym = {0};
	for (unsigned i = 0; i < n; i++) {
		int rc = bthread_stack_trace(sus, text, sizeof(text));
		if (rc <= 0)
			stb_die("bthread_stack_trace", rc);
		rc = stb_trace(sus, &sym, fr, 64, &info);
		if (rc <= 0)
			stb_die(info.error, rc);
	}
	fputs(text, stdout);
	__atomic_store_n((int *)stb_lat_butex, 1, __ATOMIC_RELEASE);
	butex_wake_all(stb_lat_butex);
	bthread_join(sus, NULL);
	return 0;
}

static int stb_child_latency(unsigned n)
{
	bthread_t run;
	bthread_t sus = stb_lat_start(&run);
	struct stb_lat r;
	struct stb_trace_opts sym = {0}, nosym = {.no_symbols = 1};
	stb_lat_run(sus, &sym, 2000, &r, NULL); /* warm the caches */
	free(r.lat);
	free(r.held);
	stb_lat_run(sus, &sym, n, &r, NULL);
	stb_lat_print("suspended", &r);
	stb_lat_run(sus, &nosym, n, &r, NULL);
	stb_lat_print("suspended_nosym", &r);
	/* Text and structured in alternating blocks, so drift hits both. */
	uint64_t text_p50[5], sym_p50[5];
	for (int b = 0; b < 5; b++) {
		stb_lat_text(sus, n / 5, &r);
		text_p50[b] = stb_quantile(r.lat, r.n, 0.5, false);
		if (b < 4) {
			free(r.lat);
			free(r.held);
		}
		struct stb_lat q;
		stb_lat_run(sus, &sym, n / 5, &q, NULL);
		sym_p50[b] = stb_quantile(q.lat, q.n, 0.5, false);
		free(q.lat);
		free(q.held);
	}
	stb_lat_print("text", &r);
	double tr[5], tp[5], sp[5];
	for (int b = 0; b < 5; b++) {
		tr[b] = (double)text_p50[b] / (double)sym_p50[b];
		tp[b] = (double)text_p50[b];
		sp[b] = (double)sym_p50[b];
	}
	printf("text_ratio=%.3f text_block_p50_ns=%.0f sym_block_p50_ns=%.0f ", stb_median(tr, 5),
	       stb_median(tp, 5), stb_median(sp, 5));
	stb_lat_run(run, &sym, n / 4, &r, "stb_spin_leaf");
	stb_lat_print("running", &r);
	printf("\n");
	__atomic_store_n(&stb_spin_stop, 1, __ATOMIC_RELAXED);
	__atomic_store_n((int *)stb_lat_butex, 1, __ATOMIC_RELEASE);
	butex_wake_all(stb_lat_butex);
	bthread_join(sus, NULL);
	bthread_join(run, NULL);
	return 0;
}

/* ---- full dumps ---- */

static void *stb_dump_butex;
static unsigned stb_dump_entered;

STB_NOIPA static void stb_d3(void)
{
	__atomic_fetch_add(&stb_dump_entered, 1, __ATOMIC_RELAXED);
	while (__atomic_load_n((int *)stb_dump_butex, __ATOMIC_ACQUIRE) == 0)
		butex_wait(stb_dump_butex, 0, NULL);
	STB_NO_TAIL();
}
STB_NOIPA static void stb_d2(void) { stb_d3(); STB_NO_TAIL(); }
STB_NOIPA static void *stb_d1(void *a) { (void)a; stb_d2(); STB_NO_TAIL(); return NULL; }

static long stb_status_kb(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	size_t k = strlen(key);
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, key, k) == 0)
			v = strtol(line + k + 1, NULL, 10);
	if (f)
		fclose(f);
	return v;
}

static int stb_child_dump(unsigned n)
{
	/* The default table when the tasks fit in it (1,048,576 slots). */
	int rc = 0;
	if ((uint64_t)n + 4096 > STB_ABI_DEFAULT_CAPACITY)
		rc = stb_table_set_capacity(n + 4096);
	if (rc)
		stb_die("stb_table_set_capacity", rc);
	setenv("STB_CONCURRENCY", "2", 1);
	stb_set_signal_trace_timeout_ms(5000);
	stb_dump_butex = butex_create();
	bthread_t *ids = calloc(n, sizeof(bthread_t));
	/* Warm: the tracer's module tables and symbol cache exist before the
	 * first dump (set up with n stacks mapped, /proc/self/maps is long). */
	bthread_t w;
	bthread_start_background(&w, &BTHREAD_ATTR_SMALL, stb_d1, NULL);
	while (__atomic_load_n(&stb_dump_entered, __ATOMIC_RELAXED) < 1)
		usleep(1000);
	usleep(10000);
	char text[4096];
	if (bthread_stack_trace(w, text, sizeof(text)) <= 0)
		stb_die("bthread_stack_trace", -1);
	__atomic_store_n(&stb_dump_entered, 0, __ATOMIC_RELAXED);
	double t0 = stb_now();
	for (unsigned i = 0; i < n; i++) {
		rc = bthread_start_background(&ids[i], &BTHREAD_ATTR_SMALL, stb_d1, NULL);
		if (rc)
			stb_die("bthread_start_background (vm.max_map_count?)", rc);
	}
	while (__atomic_load_n(&stb_dump_entered, __ATOMIC_RELAXED) < n)
		usleep(1000);
	usleep(200000);
	double start_s = stb_now() - t0;
	FILE *null = fopen("/dev/null", "w");
	long rss_kb = stb_status_kb("VmRSS:");
	double dump_s[3], dump_cpu[3], group_s[3], group_cpu[3];
	int count = 0;
	for (int i = 0; i < 3; i++) {
		double d0 = stb_now(), c0 = stb_thread_cpu();
		count = stb_dump(null, NULL);
		dump_s[i] = stb_now() - d0;
		dump_cpu[i] = stb_thread_cpu() - c0;
		if (count < (int)n)
			stb_die("stb_dump (count)", count);
	}
	struct stb_dump_opts go = {.group = 1};
	for (int i = 0; i < 3; i++) {
		double g0 = stb_now(), c0 = stb_thread_cpu();
		if (stb_dump(null, &go) < (int)n)
			stb_die("stb_dump (grouped)", -1);
		group_s[i] = stb_now() - g0;
		group_cpu[i] = stb_thread_cpu() - c0;
	}
	/* How long each task is held: the same trace as the dump's, one by one. */
	uint64_t *held = calloc(n, sizeof(uint64_t));
	struct stb_trace_opts o = {.no_symbols = 1};
	struct stb_frame fr[64];
	struct stb_trace_info info;
	double h0 = stb_now();
	for (unsigned i = 0; i < n; i++) {
		rc = stb_trace(ids[i], &o, fr, 64, &info);
		if (rc <= 0)
			stb_die("stb_trace", rc);
		held[i] = info.held_ns;
	}
	double trace_all_s = stb_now() - h0;
	unsigned long long h50 = stb_quantile(held, n, 0.5, false);
	unsigned long long h99 = stb_quantile(held, n, 0.99, true);
	unsigned long long hmax = held[n - 1];
	printf("dump_first_s=%.4f dump_cpu_s=%.4f ", dump_s[0], stb_median(dump_cpu, 3));
	printf("tasks=%u start_s=%.3f dump_s=%.4f dump_min_s=%.4f grouped_s=%.4f "
	       "trace_all_s=%.4f held_p50_ns=%llu held_p99_ns=%llu held_max_ns=%llu "
	       "rss_mb=%ld hwm_mb=%ld parked_rss_mb=%ld grouped_cpu_s=%.4f grouped_max_s=%.4f\n",
	       n, start_s, stb_median(dump_s, 3),
	       dump_s[0] < dump_s[1] ? (dump_s[0] < dump_s[2] ? dump_s[0] : dump_s[2])
				     : (dump_s[1] < dump_s[2] ? dump_s[1] : dump_s[2]),
	       stb_median(group_s, 3), trace_all_s, h50, h99, hmax, stb_status_kb("VmRSS:") / 1024,
	       stb_status_kb("VmHWM:") / 1024, rss_kb / 1024, stb_median(group_cpu, 3),
	       group_s[0] > group_s[1] ? (group_s[0] > group_s[2] ? group_s[0] : group_s[2])
				       : (group_s[1] > group_s[2] ? group_s[1] : group_s[2]));
	fflush(stdout);
	_exit(0); /* 100,000 joins add nothing to the measurement */
}

/* ---- the program's yield throughput while a thread traces it ---- */

static int stb_tracer_stop;
static unsigned stb_tracer_pace_us;
static uint64_t stb_tracer_traces;

static void *stb_tracer_main(void *arg)
{
	(void)arg;
	uint64_t x = 0x9e3779b97f4a7c15ull;
	struct stb_frame fr[64];
	while (!__atomic_load_n(&stb_tracer_stop, __ATOMIC_RELAXED)) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (stb_trace(stb_yielder_ids[x % STB_YIELDERS], NULL, fr, 64, NULL) > 0)
			__atomic_fetch_add(&stb_tracer_traces, 1, __ATOMIC_RELAXED);
		if (stb_tracer_pace_us)
			usleep(stb_tracer_pace_us);
	}
	return NULL;
}

static double stb_traced_rate(double secs, unsigned pace_us, double *traces_per_s,
			      double *per_cpu_s)
{
	__atomic_store_n(&stb_tracer_stop, 0, __ATOMIC_RELAXED);
	stb_tracer_pace_us = pace_us;
	pthread_t th;
	pthread_create(&th, NULL, stb_tracer_main, NULL);
	usleep(20000);
	uint64_t n0 = __atomic_load_n(&stb_tracer_traces, __ATOMIC_RELAXED);
	double t0 = stb_now();
	double rate = stb_yield_rate(secs, per_cpu_s);
	*traces_per_s = (double)(__atomic_load_n(&stb_tracer_traces, __ATOMIC_RELAXED) - n0) /
			(stb_now() - t0);
	__atomic_store_n(&stb_tracer_stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	return rate;
}

static int stb_child_traced_yield(int rounds, double secs)
{
	setenv("STB_CONCURRENCY", "2", 1);
	stb_set_signal_trace_timeout_ms(5000);
	stb_yielders_start(stb_yielder);
	usleep(100000);
	double plain[STB_MAX_ROUNDS], cont[STB_MAX_ROUNDS], paced[STB_MAX_ROUNDS];
	double plain_c[STB_MAX_ROUNDS], cont_c[STB_MAX_ROUNDS], paced_c[STB_MAX_ROUNDS];
	double cont_tps[STB_MAX_ROUNDS], paced_tps[STB_MAX_ROUNDS];
	for (int r = 0; r < rounds; r++) {
		plain[r] = stb_yield_rate(secs, &plain_c[r]);
		cont[r] = stb_traced_rate(secs, 0, &cont_tps[r], &cont_c[r]);
		paced[r] = stb_traced_rate(secs, 1000, &paced_tps[r], &paced_c[r]);
	}
	stb_yielders_stop();
	double rc[STB_MAX_ROUNDS], rp[STB_MAX_ROUNDS], rcc[STB_MAX_ROUNDS], rpc[STB_MAX_ROUNDS];
	for (int r = 0; r < rounds; r++) {
		rc[r] = cont[r] / plain[r];
		rp[r] = paced[r] / plain[r];
		rcc[r] = cont_c[r] / plain_c[r];
		rpc[r] = paced_c[r] / plain_c[r];
	}
	printf("untraced_per_s=%.0f continuous_per_s=%.0f continuous_ratio=%.4f "
	       "continuous_traces_per_s=%.0f paced_per_s=%.0f paced_ratio=%.4f "
	       "paced_traces_per_s=%.0f untraced_per_cpu_s=%.0f continuous_per_cpu_s=%.0f "
	       "continuous_cpu_ratio=%.4f paced_per_cpu_s=%.0f paced_cpu_ratio=%.4f\n",
	       stb_median(plain, rounds), stb_median(cont, rounds), stb_median(rc, rounds),
	       stb_median(cont_tps, rounds), stb_median(paced, rounds), stb_median(rp, rounds),
	       stb_median(paced_tps, rounds), stb_median(plain_c, rounds),
	       stb_median(cont_c, rounds), stb_median(rcc, rounds), stb_median(paced_c, rounds),
	       stb_median(rpc, rounds));
	return 0;
}

/* ---- the driver ---- */

#if !defined(STB_BENCH_NOTRACE)
#error "STB_BENCH_NOTRACE must name the bthread_notrace build of this file"
#endif

/* Runs `exe args...` and returns its stdout (malloc'd), NULL on failure. */
static char *stb_run(const char *exe, char *const argv[])
{
	int p[2];
	if (pipe(p) != 0)
		return NULL;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		close(p[0]);
		close(p[1]);
		execv(exe, argv);
		_exit(127);
	}
	close(p[1]);
	size_t cap = 4096, len = 0;
	char *out = malloc(cap);
	ssize_t k;
	while ((k = read(p[0], out + len, cap - len - 1)) > 0) {
		len += (size_t)k;
		if (cap - len < 2)
			out = realloc(out, cap *= 2);
	}
	out[len] = '\0';
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "bench_trace: %s %s failed (status 0x%x)\n", exe, argv[1], st);
		free(out);
		return NULL;
	}
	return out;
}

static double stb_field(const char *out, const char *key)
{
	char k[128]; /* callers' keys are at most 95 bytes (STB_F's buffer) */
	snprintf(k, sizeof(k), "%s=", key);
	const char *p = out;
	while ((p = strstr(p, k)) && p != out && p[-1] != ' ' && p[-1] != '\n')
		p++;
	return p ? strtod(p + strlen(k), NULL) : -1;
}

static char stb_self_exe[4096];

static void stb_bench_idle(int rounds, const char *secs)
{
	double y[2][STB_MAX_ROUNDS], c[2][STB_MAX_ROUNDS], ry[STB_MAX_ROUNDS], rc[STB_MAX_ROUNDS];
	double yc[2][STB_MAX_ROUNDS], cc[2][STB_MAX_ROUNDS], ryc[STB_MAX_ROUNDS], rcc[STB_MAX_ROUNDS];
	double yb[2][STB_MAX_ROUNDS], ybc[2][STB_MAX_ROUNDS], ryb[STB_MAX_ROUNDS], rybc[STB_MAX_ROUNDS];
	const char *exe[2] = {stb_self_exe, STB_BENCH_NOTRACE};
	for (int r = 0; r < rounds; r++) {
		for (int k = 0; k < 2; k++) {
			int v = (r + k) % 2; /* alternate which build goes first */
			char *argv[] = {(char *)exe[v], "--child", "idle", (char *)secs, NULL};
			char *out = stb_run(exe[v], argv);
			if (!out)
				exit(1);
			y[v][r] = stb_field(out, "yield_per_s");
			c[v][r] = stb_field(out, "create_join_per_s");
			yc[v][r] = stb_field(out, "yield_per_cpu_s");
			yb[v][r] = stb_field(out, "yield_b_per_s");
			ybc[v][r] = stb_field(out, "yield_b_per_cpu_s");
			cc[v][r] = stb_field(out, "create_join_per_cpu_s");
			free(out);
		}
		ry[r] = y[0][r] / y[1][r];
		rc[r] = c[0][r] / c[1][r];
		ryc[r] = yc[0][r] / yc[1][r];
		ryb[r] = yb[0][r] / yb[1][r];
		rybc[r] = ybc[0][r] / ybc[1][r];
		rcc[r] = cc[0][r] / cc[1][r];
		fprintf(stderr,
			"  idle round %d: yield %.0f / %.0f, loop B %.0f / %.0f, create+join %.0f / "
			"%.0f\n",
			r, y[0][r], y[1][r], yb[0][r], yb[1][r], c[0][r], c[1][r]);
	}
	printf("## Idle cost (%d rounds, medians; built in = bthread_static, built out = "
	       "bthread_notrace)\n", rounds);
	printf("| | built in | built out | in / out (median of round ratios) |\n|---|---|---|---|\n");
	printf("| yield/s (2 workers x 100 bthreads) | %.0f | %.0f | %.4f |\n",
	       stb_median(y[0], rounds), stb_median(y[1], rounds), stb_median(ry, rounds));
	printf("| yield per worker-CPU-second | %.0f | %.0f | %.4f |\n",
	       stb_median(yc[0], rounds), stb_median(yc[1], rounds), stb_median(ryc, rounds));
	printf("| yield/s, loop B (count bumped by one add to memory) | %.0f | %.0f | %.4f |\n",
	       stb_median(yb[0], rounds), stb_median(yb[1], rounds), stb_median(ryb, rounds));
	printf("| yield per worker-CPU-second, loop B | %.0f | %.0f | %.4f |\n",
	       stb_median(ybc[0], rounds), stb_median(ybc[1], rounds), stb_median(rybc, rounds));
	printf("| create+join/s (batches of 100) | %.0f | %.0f | %.4f |\n",
	       stb_median(c[0], rounds), stb_median(c[1], rounds), stb_median(rc, rounds));
	printf("| create+join per worker-CPU-second | %.0f | %.0f | %.4f |\n\n",
	       stb_median(cc[0], rounds), stb_median(cc[1], rounds), stb_median(rcc, rounds));
}

static void stb_bench_latency(const char *n)
{
	char *argv[] = {stb_self_exe, "--child", "latency", (char *)n, NULL};
	char *out = stb_run(stb_self_exe, argv);
	if (!out)
		exit(1);
	printf("## Trace latency (%s traces each; running: a quarter of that)\n", n);
	printf("| task | frames | latency p50 | p99 | held p50 | held p99 | held max | leaf "
	       "frame 0 |\n|---|---|---|---|---|---|---|---|\n");
	static const char *const keys[] = {"suspended", "suspended_nosym", "text", "running"};
	for (int i = 0; i < 4; i++) {
		char k[96];
#define STB_F(name) (snprintf(k, sizeof(k), "%s_%s", keys[i], name), stb_field(out, k))
		printf("| %s | %.0f | %.2f us | %.2f us | %.2f us | %.2f us | %.2f us | %.0f of "
		       "%.0f |\n",
		       keys[i], STB_F("frames"), STB_F("lat_p50_ns") / 1e3, STB_F("lat_p99_ns") / 1e3,
		       STB_F("held_p50_ns") / 1e3, STB_F("held_p99_ns") / 1e3,
		       STB_F("held_max_ns") / 1e3, i == 3 ? STB_F("leaf") : 0.0,
		       i == 3 ? STB_F("n") : 0.0);
#undef STB_F
	}
	printf("\nbthread_stack_trace (text) / stb_trace (structured, symbols), median of 5 "
	       "alternating blocks: **%.2f×** (block p50s, median: text %.2f us, structured "
	       "%.2f us)\n\n",
	       stb_field(out, "text_ratio"), stb_field(out, "text_block_p50_ns") / 1e3,
	       stb_field(out, "sym_block_p50_ns") / 1e3);
	free(out);
}

static void stb_bench_dump(const char *sizes)
{
	printf("## Full dump to /dev/null (BTHREAD_ATTR_SMALL, suspended)\n");
	printf("| tasks | dump wall (median of 3) | fastest | first | dump CPU (median) | grouped "
	       "(median of 3) | slowest | grouped CPU | held p50 | held p99 | held max | RSS parked "
	       "| RSS peak |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", sizes);
	for (char *s = strtok(buf, ","); s; s = strtok(NULL, ",")) {
		char *argv[] = {stb_self_exe, "--child", "dump", s, NULL};
		char *out = stb_run(stb_self_exe, argv);
		if (!out)
			exit(1);
		printf("| %.0f | %.3f s | %.3f s | %.3f s | %.3f s | %.3f s | %.3f s | %.3f s | "
		       "%.2f us | %.2f us | %.2f us | %.0f MB | %.0f MB |\n",
		       stb_field(out, "tasks"), stb_field(out, "dump_s"), stb_field(out, "dump_min_s"),
		       stb_field(out, "dump_first_s"), stb_field(out, "dump_cpu_s"),
		       stb_field(out, "grouped_s"), stb_field(out, "grouped_max_s"),
		       stb_field(out, "grouped_cpu_s"), stb_field(out, "held_p50_ns") / 1e3,
		       stb_field(out, "held_p99_ns") / 1e3, stb_field(out, "held_max_ns") / 1e3,
		       stb_field(out, "parked_rss_mb"), stb_field(out, "hwm_mb"));
		free(out);
	}
	printf("\n");
}

static void stb_bench_traced_yield(const char *rounds, const char *secs)
{
	char *argv[] = {stb_self_exe, "--child", "traced_yield", (char *)rounds, (char *)secs, NULL};
	char *out = stb_run(stb_self_exe, argv);
	if (!out)
		exit(1);
	printf("## Yield throughput while a pthread traces random yielders (%s rounds, medians)\n",
	       rounds);
	printf("| tracer | yield/s | traced / untraced | yield per worker-CPU-s | traced / "
	       "untraced | traces/s |\n|---|---|---|---|---|---|\n");
	printf("| none | %.0f | 1 | %.0f | 1 | 0 |\n", stb_field(out, "untraced_per_s"),
	       stb_field(out, "untraced_per_cpu_s"));
	printf("| continuous | %.0f | %.4f | %.0f | %.4f | %.0f |\n",
	       stb_field(out, "continuous_per_s"), stb_field(out, "continuous_ratio"),
	       stb_field(out, "continuous_per_cpu_s"), stb_field(out, "continuous_cpu_ratio"),
	       stb_field(out, "continuous_traces_per_s"));
	printf("| one trace per ms | %.0f | %.4f | %.0f | %.4f | %.0f |\n\n",
	       stb_field(out, "paced_per_s"), stb_field(out, "paced_ratio"),
	       stb_field(out, "paced_per_cpu_s"), stb_field(out, "paced_cpu_ratio"),
	       stb_field(out, "paced_traces_per_s"));
	free(out);
}

/* 100,000 stacks need ~2 mappings each (stack + guard page). */
static void stb_raise_map_count(long want)
{
	FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
	long cur = 0;
	if (!f || fscanf(f, "%ld", &cur) != 1)
		cur = 0;
	if (f)
		fclose(f);
	if (cur >= want)
		return;
	if (geteuid() != 0) {
		fprintf(stderr, "bench_trace: vm.max_map_count is %ld; the 100,000-task dump needs "
				"~%ld (run as root or sysctl -w vm.max_map_count=%ld)\n",
			cur, want, want);
		return;
	}
	f = fopen("/proc/sys/vm/max_map_count", "w");
	if (f && fprintf(f, "%ld\n", want) > 0 && fclose(f) == 0)
		printf("(raised vm.max_map_count from %ld to %ld for the 100,000-task dump)\n\n", cur,
		       want);
	else
		fprintf(stderr, "bench_trace: cannot raise vm.max_map_count\n");
}

static void stb_usage(void)
{
	fprintf(stderr,
		"usage: bench_trace [--rounds N] [--secs S] [--traces N] [--dump-sizes A,B]\n"
		"                   [--only idle|latency|dump|traced]\n");
	exit(2);
}

#endif /* STB_BENCH_TRACER */

int main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
		if (strcmp(argv[2], "idle") == 0)
			return stb_child_idle(argc > 3 ? atof(argv[3]) : 0.5);
		if (strcmp(argv[2], "idle_count") == 0)
			return stb_child_idle_count(argc > 3 ? atol(argv[3]) : 1000,
						    argc > 4 ? atol(argv[4]) : 100);
#if STB_BENCH_TRACER
		if (strcmp(argv[2], "latency") == 0)
			return stb_child_latency(argc > 3 ? (unsigned)atoi(argv[3]) : 20000);
		if (strcmp(argv[2], "trace_loop") == 0)
			return stb_child_trace_loop(argc > 3 ? (unsigned)atoi(argv[3]) : 2000);
		if (strcmp(argv[2], "dump") == 0)
			return stb_child_dump(argc > 3 ? (unsigned)atoi(argv[3]) : 10000);
		if (strcmp(argv[2], "traced_yield") == 0)
			return stb_child_traced_yield(argc > 3 ? atoi(argv[3]) : 5,
						      argc > 4 ? atof(argv[4]) : 0.5);
#endif
		fprintf(stderr, "bench_trace: unknown child %s\n", argv[2]);
		return 2;
	}
#if STB_BENCH_TRACER
	const char *rounds = "7", *secs = "0.5", *traces = "20000", *sizes = "10000,100000";
	const char *only = NULL;
	for (int i = 1; i < argc; i++) {
		if (i + 1 >= argc)
			stb_usage();
		if (strcmp(argv[i], "--rounds") == 0)
			rounds = argv[++i];
		else if (strcmp(argv[i], "--secs") == 0)
			secs = argv[++i];
		else if (strcmp(argv[i], "--traces") == 0)
			traces = argv[++i];
		else if (strcmp(argv[i], "--dump-sizes") == 0)
			sizes = argv[++i];
		else if (strcmp(argv[i], "--only") == 0)
			only = argv[++i];
		else
			stb_usage();
	}
	int nr = atoi(rounds);
	if (nr < 1 || nr > STB_MAX_ROUNDS)
		stb_usage();
	ssize_t k = readlink("/proc/self/exe", stb_self_exe, sizeof(stb_self_exe) - 1);
	if (k <= 0)
		stb_die("readlink /proc/self/exe", errno);
	stb_self_exe[k] = '\0';
	double load[3] = {0};
	getloadavg(load, 3);
	printf("# bench_trace: %ld CPUs, load average %.2f %.2f %.2f at start\n\n",
	       sysconf(_SC_NPROCESSORS_ONLN), load[0], load[1], load[2]);
	fflush(stdout);
	if (!only || strcmp(only, "idle") == 0)
		stb_bench_idle(nr, secs);
	fflush(stdout);
	if (!only || strcmp(only, "latency") == 0)
		stb_bench_latency(traces);
	fflush(stdout);
	if (!only || strcmp(only, "dump") == 0) {
		stb_raise_map_count(262144);
		stb_bench_dump(sizes);
	}
	fflush(stdout);
	if (!only || strcmp(only, "traced") == 0)
		stb_bench_traced_yield(rounds, secs);
	getloadavg(load, 3);
	printf("# load average %.2f %.2f %.2f at the end\n", load[0], load[1], load[2]);
	return 0;
#else
	fprintf(stderr, "bench_trace_notrace: only --child idle or idle_count (run bench_trace)\n");
	return 2;
#endif
}
