/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runtime-core benchmarks against their pthread equivalents in the same run:
 * context switch, yield throughput, create+join, mutex+cond and butex
 * ping-pong, timer add+del; rounds alternate bthread/pthread, medians reported. Built against
 * bthread_static (tracer in) and bthread_notrace (out); each benchmark runs in
 * a forked child with a fresh runtime and its own worker count. --scaling runs
 * yield and start+join at 1, 2, 4, ... workers up to the CPUs present, this
 * binary and the built-out one (or --against EXE) alternately, each
 * measurement in a fresh process, and prints the ratio per row.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>

/* STB_BENCH_TRACER: 1 when linked with bthread_static, 0 with bthread_notrace. */
#if !defined(STB_BENCH_TRACER)
#error "STB_BENCH_TRACER must say which library this is linked with"
#elif STB_BENCH_TRACER
#define STB_BENCH_VARIANT "bthread_static (tracer built in)"
#else
#define STB_BENCH_VARIANT "bthread_notrace (tracer built out)"
#endif

#define STB_BENCH_MAX_ROUNDS 64

struct stb_bench_cfg {
	int rounds;
	int workers; /* for the multi-worker benchmarks */
	int cpu;     /* CPU for the pinned context-switch benchmark */
	double secs; /* duration of one timed round (yield throughput) */
};

static struct stb_bench_cfg stb_cfg = {.rounds = 7, .workers = 2, .cpu = 0, .secs = 0.3};

static double stb_bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int stb_bench_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double stb_bench_median(const double *v, int n)
{
	double s[STB_BENCH_MAX_ROUNDS];
	memcpy(s, v, (size_t)n * sizeof(*v));
	qsort(s, (size_t)n, sizeof(*s), stb_bench_cmp);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void stb_bench_die(const char *what, int rc)
{
	fprintf(stderr, "bench_core: %s failed: %s\n", what, strerror(rc));
	exit(1);
}

#define STB_CHECK(call)                                                                    \
	do {                                                                               \
		int stb_rc_ = (call);                                                      \
		if (stb_rc_ != 0)                                                          \
			stb_bench_die(#call, stb_rc_ > 0 ? stb_rc_ : errno);               \
	} while (0)

static void stb_bench_pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	STB_CHECK(sched_setaffinity(0, sizeof(set), &set));
}

/*
 * Prints one result line: the medians of both sides, their ratio (how many
 * times better the bthread side is), and every round.
 */
static void stb_bench_report(const char *name, const char *unit, bool higher_better,
			     const char *bdesc, const double *b, const char *pdesc, const double *p)
{
	int n = stb_cfg.rounds;
	double mb = stb_bench_median(b, n), mp = stb_bench_median(p, n);
	double ratio = higher_better ? mb / mp : mp / mb;
	printf("%-10s %-44s %10.4g %-10s | %-34s %10.4g %-10s | bthread %.3gx better\n", name,
	       bdesc, mb, unit, pdesc, mp, unit, ratio);
	printf("%-10s   rounds bthread:", "");
	for (int i = 0; i < n; i++)
		printf(" %.4g", b[i]);
	printf("\n%-10s   rounds pthread:", "");
	for (int i = 0; i < n; i++)
		printf(" %.4g", p[i]);
	printf("\n");
	fflush(stdout);
}

static long stb_futex(uint32_t *addr, int op, uint32_t val)
{
	return syscall(SYS_futex, addr, op, val, NULL, NULL, 0);
}

/* ---- context switch: 2 bthreads yielding on 1 worker vs 2 pinned pthreads ---- */

static long stb_cs_iters = 1000000;

static void *stb_cs_yielder(void *arg)
{
	(void)arg;
	for (long i = 0; i < stb_cs_iters; i++)
		bthread_yield();
	return NULL;
}

/* Starts both yielders from a bthread so that they begin together. */
static void *stb_cs_parent(void *arg)
{
	double *ns = arg;
	bthread_t a, b;
	double t0 = stb_bench_now();
	STB_CHECK(bthread_start_background(&a, NULL, stb_cs_yielder, NULL));
	STB_CHECK(bthread_start_background(&b, NULL, stb_cs_yielder, NULL));
	STB_CHECK(bthread_join(a, NULL));
	STB_CHECK(bthread_join(b, NULL));
	*ns = (stb_bench_now() - t0) * 1e9 / (2.0 * (double)stb_cs_iters);
	return NULL;
}

static pthread_barrier_t stb_cs_barrier;

static void *stb_cs_pthread(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&stb_cs_barrier);
	for (long i = 0; i < stb_cs_iters / 4; i++)
		sched_yield();
	return NULL;
}

/*
 * The worker count of this child's fresh runtime: the expert override
 * $STB_CONCURRENCY, which (unlike bthread_setconcurrency) may go below
 * BTHREAD_MIN_CONCURRENCY. Before the first bthread call.
 */
static void stb_bench_workers(int n)
{
	char v[16];
	snprintf(v, sizeof(v), "%d", n);
	setenv("STB_CONCURRENCY", v, 1);
}

static void stb_bench_ctxswitch(void)
{
	/* Everything of this child -- the worker too -- on one CPU. */
	stb_bench_pin(stb_cfg.cpu);
	stb_bench_workers(1);
	double b[STB_BENCH_MAX_ROUNDS], p[STB_BENCH_MAX_ROUNDS];
	for (int r = 0; r < stb_cfg.rounds; r++) {
		bthread_t t;
		STB_CHECK(bthread_start_background(&t, NULL, stb_cs_parent, &b[r]));
		STB_CHECK(bthread_join(t, NULL));
		pthread_t x, y;
		STB_CHECK(pthread_barrier_init(&stb_cs_barrier, NULL, 3));
		STB_CHECK(pthread_create(&x, NULL, stb_cs_pthread, NULL));
		STB_CHECK(pthread_create(&y, NULL, stb_cs_pthread, NULL));
		pthread_barrier_wait(&stb_cs_barrier);
		double t0 = stb_bench_now();
		pthread_join(x, NULL);
		pthread_join(y, NULL);
		p[r] = (stb_bench_now() - t0) * 1e9 / (2.0 * (double)(stb_cs_iters / 4));
		pthread_barrier_destroy(&stb_cs_barrier);
	}
	char bdesc[64], pdesc[64];
	snprintf(bdesc, sizeof(bdesc), "2 bthreads yielding, 1 worker on CPU %d", stb_cfg.cpu);
	snprintf(pdesc, sizeof(pdesc), "2 pthreads sched_yield on CPU %d", stb_cfg.cpu);
	stb_bench_report("ctxswitch", "ns/switch", false, bdesc, b, pdesc, p);
}

/* ---- yield throughput: 100 yielders on N workers vs 100 pthreads ---- */

enum { STB_YIELDERS = 100 };
static int stb_y_go, stb_y_stop;
static long stb_y_total;

static void *stb_y_bthread(void *arg)
{
	int *gate = arg;
	while (__atomic_load_n(gate, __ATOMIC_ACQUIRE) == 0)
		butex_wait(gate, 0, NULL);
	long n = 0;
	while (!__atomic_load_n(&stb_y_stop, __ATOMIC_RELAXED)) {
		bthread_yield();
		n++;
	}
	__atomic_fetch_add(&stb_y_total, n, __ATOMIC_RELAXED);
	return NULL;
}

static void *stb_y_pthread(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&stb_y_go, __ATOMIC_ACQUIRE))
		sched_yield();
	long n = 0;
	while (!__atomic_load_n(&stb_y_stop, __ATOMIC_RELAXED)) {
		sched_yield();
		n++;
	}
	__atomic_fetch_add(&stb_y_total, n, __ATOMIC_RELAXED);
	return NULL;
}

static void stb_sleep_s(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static void stb_bench_yield(void)
{
	stb_bench_workers(stb_cfg.workers);
	double b[STB_BENCH_MAX_ROUNDS], p[STB_BENCH_MAX_ROUNDS];
	for (int r = 0; r < stb_cfg.rounds; r++) {
		bthread_t t[STB_YIELDERS];
		int *gate = butex_create();
		if (!gate)
			stb_bench_die("butex_create", ENOMEM);
		stb_y_total = 0;
		__atomic_store_n(&stb_y_stop, 0, __ATOMIC_RELEASE);
		for (int i = 0; i < STB_YIELDERS; i++)
			STB_CHECK(bthread_start_background(&t[i], &BTHREAD_ATTR_SMALL, stb_y_bthread,
							   gate));
		__atomic_store_n(gate, 1, __ATOMIC_RELEASE);
		butex_wake_all(gate);
		double t0 = stb_bench_now();
		stb_sleep_s(stb_cfg.secs);
		__atomic_store_n(&stb_y_stop, 1, __ATOMIC_RELEASE);
		double el = stb_bench_now() - t0;
		for (int i = 0; i < STB_YIELDERS; i++)
			bthread_join(t[i], NULL); /* ESRCH possible: the counts are in stb_y_total */
		b[r] = (double)__atomic_load_n(&stb_y_total, __ATOMIC_ACQUIRE) / el / 1e6;
		butex_destroy(gate);

		pthread_t pt[STB_YIELDERS];
		stb_y_total = 0;
		__atomic_store_n(&stb_y_go, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&stb_y_stop, 0, __ATOMIC_RELEASE);
		for (int i = 0; i < STB_YIELDERS; i++)
			STB_CHECK(pthread_create(&pt[i], NULL, stb_y_pthread, NULL));
		__atomic_store_n(&stb_y_go, 1, __ATOMIC_RELEASE);
		t0 = stb_bench_now();
		stb_sleep_s(stb_cfg.secs);
		__atomic_store_n(&stb_y_stop, 1, __ATOMIC_RELEASE);
		el = stb_bench_now() - t0;
		for (int i = 0; i < STB_YIELDERS; i++)
			pthread_join(pt[i], NULL);
		p[r] = (double)__atomic_load_n(&stb_y_total, __ATOMIC_ACQUIRE) / el / 1e6;
	}
	char bdesc[64], pdesc[64];
	snprintf(bdesc, sizeof(bdesc), "%d bthreads yielding, %d workers", STB_YIELDERS,
		 stb_cfg.workers);
	snprintf(pdesc, sizeof(pdesc), "%d pthreads sched_yield", STB_YIELDERS);
	stb_bench_report("yield", "M yields/s", true, bdesc, b, pdesc, p);
}

/* ---- create + join ---- */

static void *stb_noop(void *arg)
{
	return arg;
}

struct stb_cj_job {
	long n;
	int mode; /* 0 urgent, 1 background */
	double rate;
};

static double stb_cj_loop(long n, int mode)
{
	double t0 = stb_bench_now();
	for (long i = 0; i < n; i++) {
		bthread_t t;
		if (mode == 0)
			STB_CHECK(bthread_start_urgent(&t, NULL, stb_noop, NULL));
		else
			STB_CHECK(bthread_start_background(&t, NULL, stb_noop, NULL));
		/* Joined at once: 0, or ESRCH if its slot was reused already (no other starters here). */
		int rc = bthread_join(t, NULL);
		if (rc != 0 && rc != ESRCH)
			stb_bench_die("bthread_join", rc);
	}
	return (double)n / (stb_bench_now() - t0);
}

static void *stb_cj_parent(void *arg)
{
	struct stb_cj_job *j = arg;
	j->rate = stb_cj_loop(j->n, j->mode);
	return NULL;
}

static void stb_bench_create(void)
{
	stb_bench_workers(stb_cfg.workers);
	enum { NB = 200000, NP = 5000 };
	const char *names[3] = {"urgent start+join in a bthread", "background start+join in a bthread",
				"start+join from a pthread"};
	double b[3][STB_BENCH_MAX_ROUNDS], p[STB_BENCH_MAX_ROUNDS];
	for (int r = 0; r < stb_cfg.rounds; r++) {
		for (int mode = 0; mode < 2; mode++) {
			struct stb_cj_job j = {.n = NB, .mode = mode};
			bthread_t t;
			STB_CHECK(bthread_start_background(&t, NULL, stb_cj_parent, &j));
			STB_CHECK(bthread_join(t, NULL));
			b[mode][r] = j.rate / 1e3;
		}
		b[2][r] = stb_cj_loop(NB / 4, 1) / 1e3;
		double t0 = stb_bench_now();
		for (int i = 0; i < NP; i++) {
			pthread_t t;
			STB_CHECK(pthread_create(&t, NULL, stb_noop, NULL));
			STB_CHECK(pthread_join(t, NULL));
		}
		p[r] = (double)NP / (stb_bench_now() - t0) / 1e3;
	}
	for (int mode = 0; mode < 3; mode++)
		stb_bench_report(mode == 0 ? "create" : "", "k/s", true, names[mode], b[mode],
				 "pthread_create+pthread_join", p);
}

/* ---- ping-pong: mutex+cond and butex vs pthread mutex+cond and futex ---- */

enum { STB_PP_ROUNDS = 100000, STB_PP_PROUNDS = 20000 };

struct stb_pp_bt {
	bthread_mutex_t m;
	bthread_cond_t c;
	int turn;
	int *butex;
	long rounds;
};

struct stb_pp_side {
	struct stb_pp_bt *s;
	int me;
};

static void *stb_pp_cv_bthread(void *arg)
{
	struct stb_pp_side *x = arg;
	struct stb_pp_bt *s = x->s;
	for (long i = 0; i < s->rounds; i++) {
		bthread_mutex_lock(&s->m);
		while (s->turn != x->me)
			bthread_cond_wait(&s->c, &s->m);
		s->turn = !x->me;
		bthread_cond_signal(&s->c);
		bthread_mutex_unlock(&s->m);
	}
	return NULL;
}

static void *stb_pp_butex_bthread(void *arg)
{
	struct stb_pp_side *x = arg;
	struct stb_pp_bt *s = x->s;
	for (long i = 0; i < s->rounds; i++) {
		int want = (int)(2 * i + x->me), v;
		while ((v = __atomic_load_n(s->butex, __ATOMIC_ACQUIRE)) != want)
			butex_wait(s->butex, v, NULL);
		__atomic_store_n(s->butex, want + 1, __ATOMIC_RELEASE);
		butex_wake(s->butex);
	}
	return NULL;
}

/* Runs a bthread pair; returns ns per one-way hand-off. */
static double stb_pp_bthreads(void *(*fn)(void *), long rounds)
{
	struct stb_pp_bt s;
	memset(&s, 0, sizeof(s));
	s.rounds = rounds;
	STB_CHECK(bthread_mutex_init(&s.m, NULL));
	STB_CHECK(bthread_cond_init(&s.c, NULL));
	s.butex = butex_create();
	if (!s.butex)
		stb_bench_die("butex_create", ENOMEM);
	struct stb_pp_side sides[2] = {{&s, 0}, {&s, 1}};
	bthread_t t[2];
	double t0 = stb_bench_now();
	for (int i = 0; i < 2; i++)
		STB_CHECK(bthread_start_background(&t[i], NULL, fn, &sides[i]));
	for (int i = 0; i < 2; i++)
		bthread_join(t[i], NULL);
	double ns = (stb_bench_now() - t0) * 1e9 / (2.0 * (double)rounds);
	butex_destroy(s.butex);
	bthread_cond_destroy(&s.c);
	bthread_mutex_destroy(&s.m);
	return ns;
}

struct stb_pp_pt {
	pthread_mutex_t m;
	pthread_cond_t c;
	int turn;
	uint32_t futex;
	long rounds;
};

struct stb_pp_pside {
	struct stb_pp_pt *s;
	int me;
};

static void *stb_pp_cv_pthread(void *arg)
{
	struct stb_pp_pside *x = arg;
	struct stb_pp_pt *s = x->s;
	for (long i = 0; i < s->rounds; i++) {
		pthread_mutex_lock(&s->m);
		while (s->turn != x->me)
			pthread_cond_wait(&s->c, &s->m);
		s->turn = !x->me;
		pthread_cond_signal(&s->c);
		pthread_mutex_unlock(&s->m);
	}
	return NULL;
}

static void *stb_pp_futex_pthread(void *arg)
{
	struct stb_pp_pside *x = arg;
	struct stb_pp_pt *s = x->s;
	for (long i = 0; i < s->rounds; i++) {
		uint32_t want = (uint32_t)(2 * i + x->me), v;
		while ((v = __atomic_load_n(&s->futex, __ATOMIC_ACQUIRE)) != want)
			stb_futex(&s->futex, FUTEX_WAIT_PRIVATE, v);
		__atomic_store_n(&s->futex, want + 1, __ATOMIC_RELEASE);
		stb_futex(&s->futex, FUTEX_WAKE_PRIVATE, 1);
	}
	return NULL;
}

static double stb_pp_pthreads(void *(*fn)(void *), long rounds)
{
	struct stb_pp_pt s;
	memset(&s, 0, sizeof(s));
	s.rounds = rounds;
	pthread_mutex_init(&s.m, NULL);
	pthread_cond_init(&s.c, NULL);
	struct stb_pp_pside sides[2] = {{&s, 0}, {&s, 1}};
	pthread_t t[2];
	double t0 = stb_bench_now();
	for (int i = 0; i < 2; i++)
		STB_CHECK(pthread_create(&t[i], NULL, fn, &sides[i]));
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	double ns = (stb_bench_now() - t0) * 1e9 / (2.0 * (double)rounds);
	pthread_cond_destroy(&s.c);
	pthread_mutex_destroy(&s.m);
	return ns;
}

static void stb_bench_pingpong(void)
{
	stb_bench_workers(stb_cfg.workers);
	double bc[STB_BENCH_MAX_ROUNDS], pc[STB_BENCH_MAX_ROUNDS];
	double bb[STB_BENCH_MAX_ROUNDS], pb[STB_BENCH_MAX_ROUNDS];
	for (int r = 0; r < stb_cfg.rounds; r++) {
		bc[r] = stb_pp_bthreads(stb_pp_cv_bthread, STB_PP_ROUNDS);
		pc[r] = stb_pp_pthreads(stb_pp_cv_pthread, STB_PP_PROUNDS);
		bb[r] = stb_pp_bthreads(stb_pp_butex_bthread, STB_PP_ROUNDS);
		pb[r] = stb_pp_pthreads(stb_pp_futex_pthread, STB_PP_PROUNDS);
	}
	char bdesc[64];
	snprintf(bdesc, sizeof(bdesc), "bthread mutex+cond, 2 bthreads, %d workers",
		 stb_cfg.workers);
	stb_bench_report("mutex", "ns/handoff", false, bdesc, bc, "pthread mutex+cond, 2 pthreads",
			 pc);
	snprintf(bdesc, sizeof(bdesc), "butex wait/wake, 2 bthreads, %d workers", stb_cfg.workers);
	stb_bench_report("butex", "ns/handoff", false, bdesc, bb, "futex wait/wake, 2 pthreads", pb);
}

/* ---- timers: bthread_timer_add + bthread_timer_del vs POSIX timer_create/settime/delete ---- */

#define STB_TIMER_OPS 200000

static void stb_timer_noop(void *arg)
{
	(void)arg;
}

/* Adds a timer 10 s ahead and deletes it before it runs, from this pthread. */
static double stb_timer_bthread(void)
{
	struct timespec at;
	clock_gettime(CLOCK_REALTIME, &at);
	at.tv_sec += 10;
	double t0 = stb_bench_now();
	for (long i = 0; i < STB_TIMER_OPS; i++) {
		bthread_timer_t id;
		STB_CHECK(bthread_timer_add(&id, at, stb_timer_noop, NULL));
		if (bthread_timer_del(id) != 0)
			STB_CHECK(EINVAL);
	}
	return (stb_bench_now() - t0) * 1e9 / STB_TIMER_OPS;
}

/* The POSIX equivalent: a thread-notified timer armed 10 s ahead, then deleted. */
static double stb_timer_posix(void)
{
	struct sigevent sev;
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_NONE;
	struct itimerspec its;
	memset(&its, 0, sizeof(its));
	its.it_value.tv_sec = 10;
	double t0 = stb_bench_now();
	for (long i = 0; i < STB_TIMER_OPS; i++) {
		timer_t t;
		if (timer_create(CLOCK_MONOTONIC, &sev, &t) != 0 ||
		    timer_settime(t, 0, &its, NULL) != 0 || timer_delete(t) != 0)
			STB_CHECK(errno);
	}
	return (stb_bench_now() - t0) * 1e9 / STB_TIMER_OPS;
}

static void stb_bench_timer(void)
{
	double b[STB_BENCH_MAX_ROUNDS], p[STB_BENCH_MAX_ROUNDS];
	stb_timer_bthread(); /* warm-up: the timer thread and its heap */
	for (int r = 0; r < stb_cfg.rounds; r++) {
		b[r] = stb_timer_bthread();
		p[r] = stb_timer_posix();
	}
	stb_bench_report("timer", "ns/add+del", false, "bthread_timer_add + bthread_timer_del", b,
			 "timer_create+settime+delete", p);
}

/* ---- scaling: built in against built out, 1 .. CPUs workers ---- */

/*
 * Child modes of --scaling, one measurement per process (a fresh runtime):
 *   --child yield W SECS    100 bthreads (4 per worker beyond 25 workers)
 *                           yielding on W workers for SECS: "rate=" M yields/s
 *   --child create W L SECS L bthreads each looping bthread_start_urgent +
 *                           bthread_join of a no-op bthread for SECS on W
 *                           workers: "rate=" thousand start+joins/s, all loops
 */
static int *stb_sc_go; /* a butex (butex_create) */
static int stb_sc_stop;
static long stb_sc_total;

static void stb_sc_wait_go(void)
{
	while (!__atomic_load_n(stb_sc_go, __ATOMIC_ACQUIRE))
		butex_wait(stb_sc_go, 0, NULL);
}

static void *stb_sc_yielder(void *arg)
{
	(void)arg;
	stb_sc_wait_go();
	long n = 0;
	while (!__atomic_load_n(&stb_sc_stop, __ATOMIC_RELAXED)) {
		bthread_yield();
		n++;
	}
	__atomic_fetch_add(&stb_sc_total, n, __ATOMIC_RELAXED);
	return NULL;
}

static void *stb_sc_creator(void *arg)
{
	(void)arg;
	stb_sc_wait_go();
	long n = 0;
	while (!__atomic_load_n(&stb_sc_stop, __ATOMIC_RELAXED)) {
		bthread_t t;
		STB_CHECK(bthread_start_urgent(&t, NULL, stb_noop, NULL));
		int rc = bthread_join(t, NULL);
		if (rc != 0 && rc != ESRCH)
			stb_bench_die("bthread_join", rc);
		n++;
	}
	__atomic_fetch_add(&stb_sc_total, n, __ATOMIC_RELAXED);
	return NULL;
}

static double stb_sc_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Starts n bthreads running fn, lets them go together for secs, stops and
 * joins them; returns the operations counted per second, and per second of
 * the process's CPU time meanwhile in *per_cpu (robust against a virtual
 * machine's stolen time). */
static double stb_sc_run(void *(*fn)(void *), int n, double secs, double *per_cpu)
{
	bthread_t *t = calloc((size_t)n, sizeof(*t));
	if (!t)
		stb_bench_die("calloc", ENOMEM);
	stb_sc_go = butex_create();
	if (!stb_sc_go)
		stb_bench_die("butex_create", ENOMEM);
	for (int i = 0; i < n; i++)
		STB_CHECK(bthread_start_background(&t[i], &BTHREAD_ATTR_SMALL, fn, NULL));
	stb_sleep_s(0.02); /* every worker up */
	__atomic_store_n(stb_sc_go, 1, __ATOMIC_RELEASE);
	butex_wake_all(stb_sc_go);
	double t0 = stb_bench_now(), c0 = stb_sc_cpu();
	stb_sleep_s(secs);
	__atomic_store_n(&stb_sc_stop, 1, __ATOMIC_RELEASE);
	double el = stb_bench_now() - t0;
	for (int i = 0; i < n; i++)
		bthread_join(t[i], NULL);
	double cpu = stb_sc_cpu() - c0; /* includes the stop and joins: a little more */
	free(t);
	double total = (double)__atomic_load_n(&stb_sc_total, __ATOMIC_ACQUIRE);
	*per_cpu = cpu > 0 ? total / cpu : 0;
	return total / el;
}

static int stb_sc_child(int argc, char **argv)
{
	if (argc >= 5 && !strcmp(argv[2], "yield")) {
		int w = atoi(argv[3]);
		stb_bench_workers(w);
		int n = w > 25 ? 4 * w : STB_YIELDERS;
		double pc, r = stb_sc_run(stb_sc_yielder, n, atof(argv[4]), &pc);
		printf("rate=%.6f per_cpu=%.6f yielders=%d\n", r / 1e6, pc / 1e6, n);
		return 0;
	}
	if (argc >= 6 && !strcmp(argv[2], "create")) {
		stb_bench_workers(atoi(argv[3]));
		double pc, r = stb_sc_run(stb_sc_creator, atoi(argv[4]), atof(argv[5]), &pc);
		printf("rate=%.6f per_cpu=%.6f\n", r / 1e3, pc / 1e3);
		return 0;
	}
	fprintf(stderr, "bench_core: --child yield W SECS | create W LOOPS SECS\n");
	return 64;
}

/* Runs exe's child mode with args and returns its rate= value (-1: failed). */
static double stb_sc_measure(const char *exe, const char *mode, const char *a, const char *b,
			     const char *c)
{
	int p[2];
	if (pipe(p) != 0)
		return -1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		close(p[0]);
		close(p[1]);
		char *argv[] = {(char *)exe, "--child", (char *)mode, (char *)a, (char *)b,
				(char *)c, NULL};
		execv(exe, argv);
		_exit(127);
	}
	close(p[1]);
	char out[256];
	size_t len = 0;
	ssize_t k;
	while (len < sizeof(out) - 1 && (k = read(p[0], out + len, sizeof(out) - 1 - len)) > 0)
		len += (size_t)k;
	out[len] = '\0';
	close(p[0]);
	int st = 0;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "bench_core: %s --child %s %s failed (status 0x%x)\n", exe, mode, a,
			st);
		return -1;
	}
	const char *r = strstr(out, "rate=");
	return r ? strtod(r + 5, NULL) : -1;
}

struct stb_sc_cfg {
	int rounds;
	double secs;
	int max_workers;
	const char *exe[2]; /* built in (this binary), built out (or --against) */
};

/* Prints one table row: medians of both sides and the median of the rounds' ratios. */
static void stb_sc_cell(const double *in, const double *out, int n)
{
	double r[STB_BENCH_MAX_ROUNDS];
	for (int i = 0; i < n; i++)
		r[i] = in[i] / out[i];
	printf(" %.4g | %.4g | %.3f |", stb_bench_median(in, n), stb_bench_median(out, n),
	       stb_bench_median(r, n));
}

static int stb_bench_scaling(const struct stb_sc_cfg *c)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int max = c->max_workers > 0 ? c->max_workers : (int)(ncpu > 0 ? ncpu : 1);
	int ws[32], nw = 0;
	for (int w = 1; w < max && nw < 31; w *= 2)
		ws[nw++] = w;
	ws[nw++] = max;
	char secs[32];
	snprintf(secs, sizeof(secs), "%g", c->secs);
	printf("bench_core --scaling: %ld CPUs online; %d rounds of %s s, the two builds "
	       "alternately, each measurement a fresh process; medians, and the median of the "
	       "rounds' ratios\n",
	       ncpu, c->rounds, secs);
	printf("A = %s\nB = %s\n\n", c->exe[0], c->exe[1]);
	printf("| workers | yield A (M/s) | yield B | A ÷ B | start+join A (k/s), 1 loop | B | "
	       "A ÷ B | start+join A (k/s), a loop per worker | B | A ÷ B |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|\n");
	fflush(stdout);
	int failed = 0;
	for (int i = 0; i < nw; i++) {
		char w[16];
		snprintf(w, sizeof(w), "%d", ws[i]);
		double y[2][STB_BENCH_MAX_ROUNDS], c1[2][STB_BENCH_MAX_ROUNDS],
		    cw[2][STB_BENCH_MAX_ROUNDS];
		for (int r = 0; r < c->rounds; r++) {
			for (int k = 0; k < 2; k++) {
				int v = (r + k) % 2; /* which build goes first alternates */
				y[v][r] = stb_sc_measure(c->exe[v], "yield", w, secs, NULL);
				c1[v][r] = stb_sc_measure(c->exe[v], "create", w, "1", secs);
				cw[v][r] = stb_sc_measure(c->exe[v], "create", w, w, secs);
				if (y[v][r] < 0 || c1[v][r] < 0 || cw[v][r] < 0)
					failed = 1;
			}
			fprintf(stderr,
				"  %s workers, round %d: yield %.4g / %.4g, start+join %.4g / %.4g, "
				"%s loops %.4g / %.4g\n",
				w, r, y[0][r], y[1][r], c1[0][r], c1[1][r], w, cw[0][r], cw[1][r]);
		}
		printf("| %s |", w);
		stb_sc_cell(y[0], y[1], c->rounds);
		stb_sc_cell(c1[0], c1[1], c->rounds);
		stb_sc_cell(cw[0], cw[1], c->rounds);
		printf("\n");
		fflush(stdout);
	}
	return failed;
}

/* ---- driver ---- */

static const struct {
	const char *name;
	void (*run)(void);
} stb_benches[] = {
	{"ctxswitch", stb_bench_ctxswitch},
	{"yield", stb_bench_yield},
	{"create", stb_bench_create},
	{"pingpong", stb_bench_pingpong},
	{"timer", stb_bench_timer},
};

static void stb_bench_usage(int code)
{
	fprintf(code ? stderr : stdout,
		"usage: bench_core [--rounds N] [--workers N] [--cpu N] [--secs S] [name...]\n"
		"       bench_core --scaling [--rounds N] [--secs S] [--max-workers N] "
		"[--against EXE]\n"
		"names: ctxswitch yield create pingpong timer (default: all)\n"
		"--scaling: yield and start+join at 1, 2, 4, ... workers up to the CPUs online\n"
		"  (or --max-workers), this binary (A) against the tracer-less build of the\n"
		"  same source (B; --against EXE: any bench_core binary), alternately\n"
		"examples:\n"
		"  bench_core --rounds 9 yield create\n"
		"  bench_core --scaling --rounds 5\n"
		"  bench_core --scaling --against /path/to/other/build/bench/bench_core\n");
	exit(code);
}

/* Runs one benchmark in a forked child: a fresh runtime each time. */
static int stb_bench_run_child(void (*run)(void))
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		run();
		fflush(stdout);
		_exit(0);
	}
	int st = 0;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 1;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "--child"))
		return stb_sc_child(argc, argv);
	const char *only[8];
	int nonly = 0;
	bool scaling = false;
	struct stb_sc_cfg sc = {.rounds = 5, .secs = 0.3};
#if defined(STB_BENCH_NOTRACE)
	sc.exe[1] = STB_BENCH_NOTRACE;
#endif
	bool rounds_set = false, secs_set = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			stb_bench_usage(0);
		else if (!strcmp(argv[i], "--scaling"))
			scaling = true;
		else if (!strcmp(argv[i], "--max-workers") && i + 1 < argc)
			sc.max_workers = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--against") && i + 1 < argc)
			sc.exe[1] = argv[++i];
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc && (rounds_set = true))
			stb_cfg.rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--workers") && i + 1 < argc)
			stb_cfg.workers = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--cpu") && i + 1 < argc)
			stb_cfg.cpu = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--secs") && i + 1 < argc && (secs_set = true))
			stb_cfg.secs = atof(argv[++i]);
		else if (argv[i][0] == '-' || nonly == 8)
			stb_bench_usage(64);
		else
			only[nonly++] = argv[i];
	}
	if (stb_cfg.rounds < 1 || stb_cfg.rounds > STB_BENCH_MAX_ROUNDS || stb_cfg.workers < 1 ||
	    stb_cfg.secs <= 0)
		stb_bench_usage(64);
	if (scaling) {
		static char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n <= 0 || nonly > 0 || sc.max_workers < 0) {
			stb_bench_usage(64);
		}
		self[n] = '\0';
		sc.exe[0] = self;
		if (!sc.exe[1]) {
			fprintf(stderr, "bench_core: --scaling needs --against EXE in this build\n");
			return 64;
		}
		if (rounds_set)
			sc.rounds = stb_cfg.rounds;
		if (secs_set)
			sc.secs = stb_cfg.secs;
		return stb_bench_scaling(&sc);
	}
	char load[64] = "?";
	FILE *lf = fopen("/proc/loadavg", "r");
	if (lf) {
		if (!fgets(load, sizeof(load), lf))
			strcpy(load, "?");
		load[strcspn(load, "\n")] = '\0';
		fclose(lf);
	}
	printf("bench_core: library %s; %ld CPUs online; load average %s; %d rounds, "
	       "bthread and pthread measured alternately, medians shown\n",
	       STB_BENCH_VARIANT, sysconf(_SC_NPROCESSORS_ONLN), load, stb_cfg.rounds);
	int failed = 0;
	for (size_t k = 0; k < sizeof(stb_benches) / sizeof(stb_benches[0]); k++) {
		bool want = nonly == 0;
		for (int i = 0; i < nonly; i++)
			want |= !strcmp(only[i], stb_benches[k].name);
		if (want)
			failed |= stb_bench_run_child(stb_benches[k].run);
	}
	for (int i = 0; i < nonly; i++) {
		bool known = false;
		for (size_t k = 0; k < sizeof(stb_benches) / sizeof(stb_benches[0]); k++)
			known |= !strcmp(only[i], stb_benches[k].name);
		if (!known)
			stb_bench_usage(64);
	}
	return failed;
}
