/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Target of test_why, test_loader_why and test_watchdog: bthreads in known
 * wait graphs -- a mutex held by a named bthread, one held by a plain
 * pthread, an fd wait, a sleep, a cond wait, a join, a creator chain, and on
 * request deadlocks (2 and 3 bthreads over mutexes, a join cycle, one through
 * a registered pthread), heavy mutex churn, a spin and yielders. Speaks the
 * line protocol of tests/support/ltarget.h: "pid P", "ids NAME ID..." (also
 * "ids objects" -- the mutexes' addresses -- and "ids info TID FD PORT"),
 * "ready"; commands on stdin.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <bthread/bthread.h>
#include <stb/stb.h>

#include "util.h"

#define WT_FN STB_NOIPA __attribute__((used))

#define WT_FOREVER_US (3600ull * 1000000ull)

static atomic_int wt_held; /* how many hold their first lock */
static atomic_int wt_stop; /* churn, spin, yield: end */
static atomic_ullong wt_churn_ops;

static bthread_mutex_t wt_owned;   /* held by the "owner" bthread */
static bthread_mutex_t wt_tidheld; /* held by a plain pthread */
static bthread_mutex_t wt_condm;
static bthread_cond_t wt_cond;
static bthread_mutex_t wt_dl[3];   /* deadlock mutexes */
static bthread_mutex_t wt_churn_m[4];
static int wt_pipe[2] = {-1, -1};
static atomic_ullong wt_join_ids[2];

static uint64_t wt_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bthread_t start(void *(*fn)(void *), void *arg, const char *name)
{
	bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
	bthread_attr_set_name(&attr, name);
	bthread_t t = 0;
	if (bthread_start_background(&t, &attr, fn, arg) != 0) {
		fprintf(stderr, "why_target: cannot start %s\n", name);
		exit(1);
	}
	return t;
}

/* ---- healthy waits ---- */

WT_FN static void *owner_fn(void *arg)
{
	(void)arg;
	bthread_mutex_lock(&wt_owned);
	bthread_usleep(WT_FOREVER_US); /* holds it while sleeping */
	bthread_mutex_unlock(&wt_owned);
	return NULL;
}

WT_FN static void *waiter_fn(void *arg)
{
	(void)arg;
	bthread_mutex_lock(&wt_owned);
	bthread_mutex_unlock(&wt_owned);
	return NULL;
}

WT_FN static void *tidwaiter_fn(void *arg)
{
	(void)arg;
	bthread_mutex_lock(&wt_tidheld);
	bthread_mutex_unlock(&wt_tidheld);
	return NULL;
}

WT_FN static void *fd_fn(void *arg)
{
	(void)arg;
	bthread_fd_wait(wt_pipe[0], EPOLLIN);
	return NULL;
}

WT_FN static void *sleep_fn(void *arg)
{
	(void)arg;
	bthread_usleep(100ull * 1000000ull);
	return NULL;
}

WT_FN static void *cond_fn(void *arg)
{
	(void)arg;
	bthread_mutex_lock(&wt_condm);
	bthread_cond_wait(&wt_cond, &wt_condm);
	bthread_mutex_unlock(&wt_condm);
	return NULL;
}

WT_FN static void *child_fn(void *arg)
{
	(void)arg;
	bthread_usleep(WT_FOREVER_US);
	return NULL;
}

static bthread_t wt_child;

WT_FN static void *creator_fn(void *arg)
{
	(void)arg;
	bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
	bthread_attr_set_name(&attr, "why child");
	bthread_t t;
	if (bthread_start_background(&t, &attr, child_fn, NULL) == 0) /* the creator's call */
		wt_child = t;
	bthread_usleep(WT_FOREVER_US);
	return NULL;
}

WT_FN static void *joiner_fn(void *arg)
{
	bthread_join((bthread_t)(uintptr_t)arg, NULL);
	return NULL;
}

/* A plain (unregistered) pthread that holds wt_tidheld. */
static atomic_int wt_tid;

static void *tidholder_fn(void *arg)
{
	(void)arg;
	bthread_mutex_lock(&wt_tidheld);
	atomic_store(&wt_tid, (int)gettid());
	while (!atomic_load(&wt_stop))
		usleep(10000);
	return NULL;
}

/* ---- deadlocks ---- */

struct party {
	int first, second; /* wt_dl indices */
	int n;             /* parties of this deadlock */
};

static void wait_parties(int n)
{
	atomic_fetch_add(&wt_held, 1);
	while (atomic_load(&wt_held) < n)
		bthread_usleep(1000);
}

WT_FN static void *dl_fn(void *arg)
{
	const struct party *p = arg;
	bthread_mutex_lock(&wt_dl[p->first]);
	wait_parties(p->n);
	bthread_mutex_lock(&wt_dl[p->second]); /* never returns */
	return NULL;
}

WT_FN static void *joincycle_fn(void *arg)
{
	int me = (int)(uintptr_t)arg;
	while (!atomic_load(&wt_join_ids[1 - me]))
		bthread_usleep(1000);
	bthread_join((bthread_t)atomic_load(&wt_join_ids[1 - me]), NULL);
	return NULL;
}

/* A registered pthread holding wt_dl[0] that then locks wt_dl[1]. */
static atomic_ullong wt_pthread_id;

static void *dl_pthread_fn(void *arg)
{
	(void)arg;
	atomic_store(&wt_pthread_id, bthread_init_for_pthread_stack_trace());
	bthread_mutex_lock(&wt_dl[0]);
	atomic_fetch_add(&wt_held, 1);
	while (atomic_load(&wt_held) < 2)
		usleep(1000);
	bthread_mutex_lock(&wt_dl[1]);
	return NULL;
}

/* ---- load ---- */

WT_FN static void *churn_fn(void *arg)
{
	unsigned i = (unsigned)(uintptr_t)arg;
	while (!atomic_load(&wt_stop)) {
		/* Two locks in a global order: contention, never a cycle. */
		unsigned a = i % 4, b = (i + 1 + i / 4) % 4;
		if (a > b) {
			unsigned t = a;
			a = b;
			b = t;
		}
		bthread_mutex_lock(&wt_churn_m[a]);
		if (b != a)
			bthread_mutex_lock(&wt_churn_m[b]);
		atomic_fetch_add(&wt_churn_ops, 1);
		if (b != a)
			bthread_mutex_unlock(&wt_churn_m[b]);
		bthread_mutex_unlock(&wt_churn_m[a]);
		if ((i++ & 7) == 0)
			bthread_yield();
	}
	return NULL;
}

WT_FN static void *ticker_fn(void *arg)
{
	(void)arg;
	while (!atomic_load(&wt_stop))
		bthread_usleep(5000);
	return NULL;
}

WT_FN static void *conn_fn(void *arg)
{
	(void)arg;
	bthread_usleep(WT_FOREVER_US);
	return NULL;
}

WT_FN static void *spin_fn(void *arg)
{
	uint64_t end = wt_now_ns() + (uint64_t)(uintptr_t)arg * 1000000ull;
	volatile uint64_t x = 0;
	while (wt_now_ns() < end && !atomic_load(&wt_stop))
		x++;
	return NULL;
}

WT_FN static void *yield_fn(void *arg)
{
	uint64_t end = wt_now_ns() + (uint64_t)(uintptr_t)arg * 1000000ull;
	while (wt_now_ns() < end && !atomic_load(&wt_stop))
		bthread_yield();
	return NULL;
}

static void usage(void)
{
	fprintf(stderr,
		"Usage: why_target [--deadlock2] [--deadlock3] [--joincycle] [--pthread]\n"
		"                  [--churn N] [--many N] [--tickers N] [--spin MS] [--yield N MS]\n"
		"                  [--http]\n"
		"Prints 'pid P', 'ids NAME ID...' (objects: mutex addresses; info: holder tid,\n"
		"fd, http port), then 'ready'.\n"
		"Commands: 'dump FORMAT GROUP STUCK_MS ALL_IDS PATH' (stb_dump into PATH:\n"
		"dump rc=N),\n"
		"'churn' (churn ops=N), 'quit' (bye; the process exits at once).\n");
}

static void print_ids(const char *name, const bthread_t *ids, unsigned n)
{
	printf("ids %s", name);
	for (unsigned i = 0; i < n; i++)
		printf(" %" PRIu64, (uint64_t)ids[i]);
	printf("\n");
}

/* Lets every task reach its wait. */
static void settle(void)
{
	bthread_usleep(200000);
}

int main(int argc, char **argv)
{
	bool dl2 = false, dl3 = false, joincycle = false, pth = false, http = false;
	long churn = 0, spin_ms = 0, nyield = 0, yield_ms = 0, many = 0, ntick = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--deadlock2") == 0)
			dl2 = true;
		else if (strcmp(argv[i], "--deadlock3") == 0)
			dl3 = true;
		else if (strcmp(argv[i], "--joincycle") == 0)
			joincycle = true;
		else if (strcmp(argv[i], "--pthread") == 0)
			pth = true;
		else if (strcmp(argv[i], "--http") == 0)
			http = true;
		else if (strcmp(argv[i], "--churn") == 0 && i + 1 < argc)
			churn = strtol(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--tickers") == 0 && i + 1 < argc)
			ntick = strtol(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--many") == 0 && i + 1 < argc)
			many = strtol(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--spin") == 0 && i + 1 < argc)
			spin_ms = strtol(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--yield") == 0 && i + 2 < argc) {
			nyield = strtol(argv[++i], NULL, 10);
			yield_ms = strtol(argv[++i], NULL, 10);
		} else {
			usage();
			return 64;
		}
	}
	if ((dl2 + dl3 + joincycle + pth) > 1) {
		fprintf(stderr, "why_target: one deadlock per process\n");
		return 64;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	bthread_mutex_init(&wt_owned, NULL);
	bthread_mutex_init(&wt_tidheld, NULL);
	bthread_mutex_init(&wt_condm, NULL);
	bthread_cond_init(&wt_cond, NULL);
	for (int i = 0; i < 3; i++)
		bthread_mutex_init(&wt_dl[i], NULL);
	for (int i = 0; i < 4; i++)
		bthread_mutex_init(&wt_churn_m[i], NULL);
	if (pipe(wt_pipe) != 0)
		return 1;

	pthread_t tidholder;
	pthread_create(&tidholder, NULL, tidholder_fn, NULL);
	while (!atomic_load(&wt_tid))
		usleep(1000);

	bthread_t owner = start(owner_fn, NULL, "why owner");
	bthread_usleep(20000); /* it holds wt_owned now */
	bthread_t waiter = start(waiter_fn, NULL, "why waiter");
	bthread_t tidwaiter = start(tidwaiter_fn, NULL, "why tidwaiter");
	bthread_t fdw = start(fd_fn, NULL, "why fd");
	bthread_t sleeper = start(sleep_fn, NULL, "why sleep");
	bthread_t condw = start(cond_fn, NULL, "why cond");
	bthread_t creator = start(creator_fn, NULL, "why creator");
	bthread_t joiner = start(joiner_fn, (void *)(uintptr_t)sleeper, "why joiner");
	while (!wt_child)
		bthread_usleep(1000);

	static struct party parties[3];
	bthread_t dl[3] = {0};
	int ndl = 0;
	if (dl2 || dl3) {
		ndl = dl2 ? 2 : 3;
		for (int i = 0; i < ndl; i++) {
			parties[i] = (struct party){i, (i + 1) % ndl, ndl};
			dl[i] = start(dl_fn, &parties[i], "why deadlock");
		}
	}
	if (joincycle) {
		ndl = 2;
		for (int i = 0; i < 2; i++) {
			dl[i] = start(joincycle_fn, (void *)(uintptr_t)i, "why joincycle");
			atomic_store(&wt_join_ids[i], dl[i]);
		}
	}
	pthread_t dlp;
	if (pth) {
		ndl = 2;
		pthread_create(&dlp, NULL, dl_pthread_fn, NULL);
		while (!atomic_load(&wt_pthread_id))
			usleep(1000);
		static struct party px = {1, 0, 2};
		dl[0] = (bthread_t)atomic_load(&wt_pthread_id);
		dl[1] = start(dl_fn, &px, "why deadlock");
	}
	bthread_t churners[256];
	if (churn > 256)
		churn = 256;
	for (long i = 0; i < churn; i++)
		churners[i] = start(churn_fn, (void *)(uintptr_t)i, "why churn");
	bthread_t conns[2];
	for (long i = 0; i < many && i < 100000; i++) {
		char name[32];
		snprintf(name, sizeof(name), "conn %ld", i + 1);
		bthread_t t = start(conn_fn, NULL, name);
		if (i == 0)
			conns[0] = t;
		conns[1] = t;
	}
	bthread_t tickers[16];
	if (ntick > 16)
		ntick = 16;
	for (long i = 0; i < ntick; i++)
		tickers[i] = start(ticker_fn, NULL, "why ticker");
	bthread_t spinner = 0;
	if (spin_ms)
		spinner = start(spin_fn, (void *)(uintptr_t)spin_ms, "why spin");
	bthread_t yielders[64];
	if (nyield > 64)
		nyield = 64;
	for (long i = 0; i < nyield; i++)
		yielders[i] = start(yield_fn, (void *)(uintptr_t)yield_ms, "why yield");
	uint16_t port = 0;
	if (http && stb_debug_http_start(0, &port) != 0)
		return 1;
	settle();

	printf("pid %d\n", (int)getpid());
	print_ids("owner", &owner, 1);
	print_ids("waiter", &waiter, 1);
	print_ids("tidwaiter", &tidwaiter, 1);
	print_ids("fd", &fdw, 1);
	print_ids("sleep", &sleeper, 1);
	print_ids("cond", &condw, 1);
	print_ids("creator", &creator, 1);
	print_ids("child", &wt_child, 1);
	print_ids("joiner", &joiner, 1);
	if (ndl)
		print_ids("deadlock", dl, (unsigned)ndl);
	if (churn)
		print_ids("churn", churners, (unsigned)(churn > 16 ? 16 : churn));
	if (many)
		print_ids("many", conns, 2); /* the first and the last */
	if (ntick)
		print_ids("tickers", tickers, (unsigned)ntick);
	if (spin_ms)
		print_ids("spin", &spinner, 1);
	if (nyield)
		print_ids("yield", yielders, (unsigned)(nyield > 16 ? 16 : nyield));
	/* Addresses and numbers in decimal: "ids" lines are all the protocol has. */
	const bthread_t objs[] = {(uintptr_t)&wt_owned, (uintptr_t)&wt_tidheld,
				  (uintptr_t)&wt_cond, (uintptr_t)&wt_condm,
				  (uintptr_t)&wt_dl[0], (uintptr_t)&wt_dl[1], (uintptr_t)&wt_dl[2]};
	print_ids("objects", objs, 7);
	const bthread_t info[] = {(bthread_t)atomic_load(&wt_tid), (bthread_t)wt_pipe[0], port};
	print_ids("info", info, 3);
	printf("ready\n");

	char line[4200];
	while (fgets(line, sizeof(line), stdin)) {
		char fmt[16], path[4096];
		int group, all_ids;
		unsigned long stuck_ms;
		if (sscanf(line, "dump %15s %d %lu %d %4095s", fmt, &group, &stuck_ms, &all_ids,
			   path) == 5) {
			FILE *f = fopen(path, "w");
			struct stb_dump_opts o = {.group = group, .format = stb_format_from_name(fmt),
						  .stuck_ns = stuck_ms * 1000000ull,
						  .all_ids = all_ids};
			int rc = f ? stb_dump(f, &o) : -errno;
			if (f)
				fclose(f);
			printf("dump rc=%d\n", rc);
		} else if (strncmp(line, "churn", 5) == 0) {
			printf("churn ops=%llu\n", (unsigned long long)atomic_load(&wt_churn_ops));
		} else if (strncmp(line, "quit", 4) == 0) {
			printf("bye\n");
			fflush(stdout);
			_exit(0); /* deadlocked bthreads cannot be joined */
		} else {
			printf("error unknown command\n");
		}
	}
	_exit(0);
}
