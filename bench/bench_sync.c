/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Synchronization-module benchmarks against the pthread equivalents in the
 * same run (rounds alternate, medians reported): uncontended mutex
 * lock+unlock, rwlock read and write throughput with 2 threads, key set+get,
 * get alone and set alone,
 * semaphore ping-pong hand-off. Not a test (docs/benchmarks.md).
 */
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bthread/bthread.h>

#define MAX_ROUNDS 64

static int rounds = 7;
static double secs = 0.3;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(const double *v)
{
	double s[MAX_ROUNDS];
	memcpy(s, v, (size_t)rounds * sizeof(*v));
	qsort(s, (size_t)rounds, sizeof(*s), cmp);
	return rounds % 2 ? s[rounds / 2] : (s[rounds / 2 - 1] + s[rounds / 2]) / 2;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "bench_sync: %s failed: %s\n", what, strerror(rc));
	exit(1);
}

#define CHECK(call)                                                                        \
	do {                                                                               \
		int rc_ = (call);                                                          \
		if (rc_ != 0)                                                              \
			die(#call, rc_);                                                   \
	} while (0)

/* One line: both medians, the ratio (>1: the bthread side is better). */
static void report(const char *name, const char *unit, bool higher_better, const double *b,
		   const double *p, const char *pdesc)
{
	double mb = median(b), mp = median(p);
	printf("%-22s bthread %10.4g %-7s | %-22s %10.4g %-7s | ratio %.3g\n", name, mb, unit,
	       pdesc, mp, unit, higher_better ? mb / mp : mp / mb);
	fflush(stdout);
}

/* Runs fn(arg) in a bthread and waits for it. */
static void in_bthread(void *(*fn)(void *), void *arg)
{
	bthread_t t;
	CHECK(bthread_start_background(&t, NULL, fn, arg));
	CHECK(bthread_join(t, NULL));
}

/* ---- uncontended mutex lock+unlock (ns) ---- */
#define LOCK_ITERS 2000000L

static void *bmutex_loop(void *arg)
{
	bthread_mutex_t m;
	CHECK(bthread_mutex_init(&m, NULL));
	double t0 = now();
	for (long i = 0; i < LOCK_ITERS; i++) {
		bthread_mutex_lock(&m);
		bthread_mutex_unlock(&m);
	}
	*(double *)arg = (now() - t0) * 1e9 / LOCK_ITERS;
	bthread_mutex_destroy(&m);
	return NULL;
}

static void *pmutex_loop(void *arg)
{
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	double t0 = now();
	for (long i = 0; i < LOCK_ITERS; i++) {
		pthread_mutex_lock(&m);
		pthread_mutex_unlock(&m);
	}
	*(double *)arg = (now() - t0) * 1e9 / LOCK_ITERS;
	return NULL;
}

static void bench_mutex(void)
{
	double b[MAX_ROUNDS], p[MAX_ROUNDS];
	for (int r = 0; r < rounds; r++) {
		in_bthread(bmutex_loop, &b[r]);
		pmutex_loop(&p[r]);
	}
	report("mutex lock+unlock", "ns", false, b, p, "pthread_mutex_t");
}

/* ---- rwlock throughput, 2 threads (ops/s) ---- */
struct rw_arg {
	bthread_rwlock_t *brw;
	pthread_rwlock_t *prw;
	bool write;
	volatile bool *stop;
	long ops;
};

static void *brw_loop(void *arg)
{
	struct rw_arg *a = arg;
	long n = 0;
	while (!*a->stop) {
		for (int i = 0; i < 256; i++) {
			if (a->write)
				bthread_rwlock_wrlock(a->brw);
			else
				bthread_rwlock_rdlock(a->brw);
			bthread_rwlock_unlock(a->brw);
		}
		n += 256;
	}
	a->ops = n;
	return NULL;
}

static void *prw_loop(void *arg)
{
	struct rw_arg *a = arg;
	long n = 0;
	while (!*a->stop) {
		for (int i = 0; i < 256; i++) {
			if (a->write)
				pthread_rwlock_wrlock(a->prw);
			else
				pthread_rwlock_rdlock(a->prw);
			pthread_rwlock_unlock(a->prw);
		}
		n += 256;
	}
	a->ops = n;
	return NULL;
}

static double rw_round(bool bthreads, bool write)
{
	bthread_rwlock_t brw;
	pthread_rwlock_t prw = PTHREAD_RWLOCK_INITIALIZER;
	CHECK(bthread_rwlock_init(&brw, NULL));
	volatile bool stop = false;
	struct rw_arg a[2] = {{&brw, &prw, write, &stop, 0}, {&brw, &prw, write, &stop, 0}};
	bthread_t bt[2];
	pthread_t pt[2];
	for (int i = 0; i < 2; i++) {
		if (bthreads)
			CHECK(bthread_start_background(&bt[i], NULL, brw_loop, &a[i]));
		else
			CHECK(pthread_create(&pt[i], NULL, prw_loop, &a[i]));
	}
	double t0 = now();
	struct timespec ts = {0, (long)(secs * 1e9)};
	nanosleep(&ts, NULL);
	stop = true;
	for (int i = 0; i < 2; i++) {
		if (bthreads)
			CHECK(bthread_join(bt[i], NULL));
		else
			CHECK(pthread_join(pt[i], NULL));
	}
	double el = now() - t0;
	bthread_rwlock_destroy(&brw);
	return (double)(a[0].ops + a[1].ops) / el;
}

static void bench_rwlock(bool write)
{
	double b[MAX_ROUNDS], p[MAX_ROUNDS];
	for (int r = 0; r < rounds; r++) {
		b[r] = rw_round(true, write);
		p[r] = rw_round(false, write);
	}
	report(write ? "rwlock write, 2 thr" : "rwlock read, 2 thr", "ops/s", true, b, p,
	       "pthread_rwlock_t");
}

/* ---- key get/set (ns per get+set) ---- */
#define KEY_ITERS 5000000L

static bthread_key_t bkey;
static pthread_key_t pkey;

/* The three loops: set+get (checked), get alone, set alone; ns per iteration
 * into out[0..2]. */
static void *bkey_loop(void *arg)
{
	double *out = arg, t0 = now();
	for (long i = 0; i < KEY_ITERS; i++) {
		bthread_setspecific(bkey, (void *)i);
		if (bthread_getspecific(bkey) != (void *)i)
			die("bthread_getspecific", 0);
	}
	out[0] = (now() - t0) * 1e9 / KEY_ITERS;
	uintptr_t sum = 0;
	t0 = now();
	for (long i = 0; i < KEY_ITERS; i++) {
		sum += (uintptr_t)bthread_getspecific(bkey);
		__asm__ volatile("" : "+r"(sum));
	}
	out[1] = (now() - t0) * 1e9 / KEY_ITERS;
	t0 = now();
	for (long i = 0; i < KEY_ITERS; i++)
		bthread_setspecific(bkey, (void *)(i + (long)(sum & 1)));
	out[2] = (now() - t0) * 1e9 / KEY_ITERS;
	return NULL;
}

static void *pkey_loop(void *arg)
{
	double *out = arg, t0 = now();
	for (long i = 0; i < KEY_ITERS; i++) {
		pthread_setspecific(pkey, (void *)i);
		if (pthread_getspecific(pkey) != (void *)i)
			die("pthread_getspecific", 0);
	}
	out[0] = (now() - t0) * 1e9 / KEY_ITERS;
	uintptr_t sum = 0;
	t0 = now();
	for (long i = 0; i < KEY_ITERS; i++) {
		sum += (uintptr_t)pthread_getspecific(pkey);
		__asm__ volatile("" : "+r"(sum));
	}
	out[1] = (now() - t0) * 1e9 / KEY_ITERS;
	t0 = now();
	for (long i = 0; i < KEY_ITERS; i++)
		pthread_setspecific(pkey, (void *)(i + (long)(sum & 1)));
	out[2] = (now() - t0) * 1e9 / KEY_ITERS;
	return NULL;
}

static void bench_key(void)
{
	CHECK(bthread_key_create(&bkey, NULL));
	CHECK(pthread_key_create(&pkey, NULL));
	double b[3][MAX_ROUNDS], p[3][MAX_ROUNDS], bo[3], po[3];
	for (int r = 0; r < rounds; r++) {
		in_bthread(bkey_loop, bo);
		pkey_loop(po);
		for (int k = 0; k < 3; k++) {
			b[k][r] = bo[k];
			p[k][r] = po[k];
		}
	}
	report("key set+get", "ns", false, b[0], p[0], "pthread_{set,get}specific");
	report("key get", "ns", false, b[1], p[1], "pthread_getspecific");
	report("key set", "ns", false, b[2], p[2], "pthread_setspecific");
	bthread_key_delete(bkey);
	pthread_key_delete(pkey);
}

/* ---- semaphore ping-pong (ns per one-way hand-off) ---- */
#define PING_ITERS 200000L

struct ping {
	bthread_sem_t bs[2];
	sem_t ps[2];
	int side;
};

static void *bping(void *arg)
{
	struct ping *pg = (struct ping *)((char *)arg - ((uintptr_t)arg & 1));
	int me = (uintptr_t)arg & 1;
	for (long i = 0; i < PING_ITERS; i++) {
		if (me == 0)
			bthread_sem_post(&pg->bs[1]);
		bthread_sem_wait(&pg->bs[me]);
		if (me == 1)
			bthread_sem_post(&pg->bs[0]);
	}
	return NULL;
}

static void *pping(void *arg)
{
	struct ping *pg = (struct ping *)((char *)arg - ((uintptr_t)arg & 1));
	int me = (uintptr_t)arg & 1;
	for (long i = 0; i < PING_ITERS; i++) {
		if (me == 0)
			sem_post(&pg->ps[1]);
		sem_wait(&pg->ps[me]);
		if (me == 1)
			sem_post(&pg->ps[0]);
	}
	return NULL;
}

static double ping_round(bool bthreads)
{
	static struct ping pg __attribute__((aligned(8)));
	for (int i = 0; i < 2; i++) {
		CHECK(bthread_sem_init(&pg.bs[i], 0));
		CHECK(sem_init(&pg.ps[i], 0, 0));
	}
	double t0 = now();
	if (bthreads) {
		bthread_t t[2];
		for (int i = 0; i < 2; i++)
			CHECK(bthread_start_background(&t[i], NULL, bping, (char *)&pg + i));
		for (int i = 0; i < 2; i++)
			CHECK(bthread_join(t[i], NULL));
	} else {
		pthread_t t[2];
		for (int i = 0; i < 2; i++)
			CHECK(pthread_create(&t[i], NULL, pping, (char *)&pg + i));
		for (int i = 0; i < 2; i++)
			CHECK(pthread_join(t[i], NULL));
	}
	double el = now() - t0;
	for (int i = 0; i < 2; i++) {
		bthread_sem_destroy(&pg.bs[i]);
		sem_destroy(&pg.ps[i]);
	}
	return el * 1e9 / (2.0 * PING_ITERS);
}

static void bench_sem(void)
{
	double b[MAX_ROUNDS], p[MAX_ROUNDS];
	for (int r = 0; r < rounds; r++) {
		b[r] = ping_round(true);
		p[r] = ping_round(false);
	}
	report("sem hand-off", "ns", false, b, p, "sem_t");
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--secs") && i + 1 < argc)
			secs = atof(argv[++i]);
		else {
			fprintf(stderr, "usage: bench_sync [--rounds N (1-%d)] [--secs S]\n"
					"  e.g. bench_sync --rounds 9\n", MAX_ROUNDS);
			return 64;
		}
	}
	if (rounds < 1 || rounds > MAX_ROUNDS || secs <= 0) {
		fprintf(stderr, "bench_sync: --rounds 1-%d, --secs > 0\n", MAX_ROUNDS);
		return 64;
	}
	char load[64] = "?";
	FILE *lf = fopen("/proc/loadavg", "r");
	if (lf) {
		if (!fgets(load, sizeof(load), lf))
			strcpy(load, "?");
		load[strcspn(load, "\n")] = '\0';
		fclose(lf);
	}
	printf("bench_sync: %d workers, %ld CPUs, load average %s, %d rounds (medians); ratio > 1: "
	       "bthread better\n",
	       bthread_getconcurrency(), sysconf(_SC_NPROCESSORS_ONLN), load, rounds);
	bench_mutex();
	bench_rwlock(false);
	bench_rwlock(true);
	bench_key();
	bench_sem();
	return 0;
}
