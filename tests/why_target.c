/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Target of test_why, test_loader_why and test_watchdog: bthreads in known
 * wait graphs -- a mutex held by a named bthread, one held by a plain
 * pthread, an fd wait, a sleep, a cond wait, a join, a creator chain, an
 * rwlock write-locked by a sleeping bthread with a reader and a writer
 * waiting, a bthread_id locked by a sleeping bthread with a waiter, and on
 * request deadlocks (2 and 3 bthreads over mutexes, a join cycle, one through
 * a registered pthread), heavy mutex churn, a spin, yielders, bthreads each
 * waiting on an fd of its own, bthreads started at one site on command (a
 * leak) and an execution queue (its consumer asleep in its first task, three
 * queued, a joiner; through the C layer of bthread/execution_queue.h). Speaks
 * the line protocol of tests/support/ltarget.h: "pid P", "ids NAME ID..."
 * (also "ids objects" -- the mutexes', rwlock's and id's addresses -- and
 * "ids info TID FD PORT"), "ready"; commands on stdin.
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
#include <bthread/id.h>
#include <bthread/execution_queue.h>
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
static bthread_rwlock_t wt_rw;     /* write-locked by "why wrlocker" */
static bthread_id_t wt_id;         /* locked by "why idlocker" */
static int wt_pipe[2] = {-1, -1};
static atomic_ullong wt_join_ids[2];

static uint64_t wt_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Out of line with every compiler: the leak view names it as the creator. */
WT_FN static bthread_t start(void *(*fn)(void *), void *arg, const char *name)
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

WT_FN static void *wrlocker_fn(void *arg)
{
	(void)arg;
	bthread_rwlock_wrlock(&wt_rw);
	bthread_usleep(WT_FOREVER_US); /* holds it for writing while sleeping */
	bthread_rwlock_unlock(&wt_rw);
	return NULL;
}

WT_FN static void *reader_fn(void *arg)
{
	(void)arg;
	bthread_rwlock_rdlock(&wt_rw);
	bthread_rwlock_unlock(&wt_rw);
	return NULL;
}

WT_FN static void *writer_fn(void *arg)
{
	(void)arg;
	bthread_rwlock_wrlock(&wt_rw);
	bthread_rwlock_unlock(&wt_rw);
	return NULL;
}

WT_FN static void *idlocker_fn(void *arg)
{
	(void)arg;
	bthread_id_lock(wt_id, NULL);
	bthread_usleep(WT_FOREVER_US); /* holds it while sleeping */
	bthread_id_unlock(wt_id);
	return NULL;
}

WT_FN static void *idwaiter_fn(void *arg)
{
	(void)arg;
	if (bthread_id_lock(wt_id, NULL) == 0)
		bthread_id_unlock(wt_id);
	return NULL;
}

/* Each waits on the read end of a pipe of its own. */
WT_FN static void *fdwaiter_fn(void *arg)
{
	bthread_fd_wait((int)(intptr_t)arg, EPOLLIN);
	return NULL;
}

/* The leak: bthreads that never end, all started here. */
WT_FN static void *leaked_fn(void *arg)
{
	(void)arg;
	bthread_usleep(WT_FOREVER_US);
	return NULL;
}

WT_FN static int leak_spawn(unsigned n)
{
	bthread_attr_t attr = BTHREAD_ATTR_SMALL;
	bthread_attr_set_name(&attr, "why leaked");
	for (unsigned i = 0; i < n; i++) {
		bthread_t t;
		if (bthread_start_background(&t, &attr, leaked_fn, NULL) != 0) /* the leak's site */
			return -1;
	}
	return 0;
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

/* ---- an execution queue (--execq) ---- */

static uint64_t wt_execq_id;
static atomic_ullong wt_execq_consumer;

/* Its first task never ends: the consumer sleeps in it, the others queue. */
WT_FN static int execq_run(void *meta, void *fn, struct stb_execq_iter *it)
{
	(void)meta;
	(void)fn;
	if (!stb_execq_iter_valid(it))
		return 0;
	atomic_store(&wt_execq_consumer, bthread_self());
	bthread_usleep(WT_FOREVER_US);
	return 0;
}

static void execq_clear(struct stb_execq_node *n)
{
	(void)n;
}

WT_FN static void *execq_joiner_fn(void *arg)
{
	(void)arg;
	stb_execq_join(wt_execq_id); /* never stopped: waits for good */
	return NULL;
}

/* Starts the queue with 4 tasks; ids[] = consumer, joiner, queue address. */
static void execq_setup(bthread_t ids[3])
{
	const struct stb_execq_options o = {.attr = NULL};
	if (stb_execq_start(&wt_execq_id, &o, execq_run, execq_clear, NULL, NULL) != 0)
		exit(1);
	struct stb_execq *q = stb_execq_address(wt_execq_id);
	for (int i = 0; q && i < 4; i++) {
		struct stb_execq_node *n = stb_execq_node_alloc();
		if (!n)
			exit(1);
		stb_execq_push(q, n, false, false);
	}
	while (!atomic_load(&wt_execq_consumer))
		bthread_usleep(1000);
	ids[0] = (bthread_t)atomic_load(&wt_execq_consumer);
	ids[1] = start(execq_joiner_fn, NULL, "why execq joiner");
	ids[2] = (bthread_t)(uintptr_t)q;
	stb_execq_release(q);
}

static void usage(void)
{
	fprintf(stderr,
		"Usage: why_target [--deadlock2] [--deadlock3] [--joincycle] [--pthread]\n"
		"                  [--churn N] [--many N] [--tickers N] [--spin MS] [--yield N MS]\n"
		"                  [--fds N] [--leak N] [--http] [--execq]\n"
		"Prints 'pid P', 'ids NAME ID...' (objects: mutex, rwlock and id addresses;\n"
		"info: holder tid, fd, http port), then 'ready'.\n"
		"Commands: 'dump FORMAT GROUP STUCK_MS ALL_IDS PATH' (stb_dump into PATH:\n"
		"dump rc=N), 'leaks FORMAT PATH' (stb_dump's leak view: leaks rc=N),\n"
		"'leak N' (N more leaked bthreads: leak rc=0), 'churn' (churn ops=N),\n"
		"'quit' (bye; the process exits at once).\n");
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
	bool dl2 = false, dl3 = false, joincycle = false, pth = false, http = false, execq = false;
	long churn = 0, spin_ms = 0, nyield = 0, yield_ms = 0, many = 0, ntick = 0, nfds = 0,
	     nleak = 0;
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
		else if (strcmp(argv[i], "--execq") == 0)
			execq = true;
		else if (strcmp(argv[i], "--churn") == 0 && i + 1 < argc)
			churn = strtol(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--fds") == 0 && i + 1 < argc)
			nfds = strtol(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--leak") == 0 && i + 1 < argc)
			nleak = strtol(argv[++i], NULL, 10);
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
	bthread_rwlock_init(&wt_rw, NULL);
	if (bthread_id_create(&wt_id, NULL, NULL) != 0)
		return 1;
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
	bthread_t wrlocker = start(wrlocker_fn, NULL, "why wrlocker");
	bthread_t idlocker = start(idlocker_fn, NULL, "why idlocker");
	bthread_usleep(20000); /* they hold the rwlock and the id now */
	bthread_t rw[2] = {start(reader_fn, NULL, "why reader"), start(writer_fn, NULL, "why writer")};
	bthread_t idwaiter = start(idwaiter_fn, NULL, "why idwaiter");
	bthread_t fdws[16]; /* an "ids" line holds 16 */
	int fdnums[16];
	if (nfds > 16)
		nfds = 16;
	for (long i = 0; i < nfds; i++) {
		int p[2];
		if (pipe(p) != 0)
			return 1;
		char name[32];
		snprintf(name, sizeof(name), "fd waiter %ld", i + 1);
		fdnums[i] = p[0];
		fdws[i] = start(fdwaiter_fn, (void *)(intptr_t)p[0], name);
	}
	if (nleak > 0 && leak_spawn((unsigned)nleak) != 0)
		return 1;

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
	bthread_t execq_ids[3] = {0};
	if (execq)
		execq_setup(execq_ids);
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
	print_ids("wrlocker", &wrlocker, 1);
	print_ids("rwwaiters", rw, 2);
	print_ids("idlocker", &idlocker, 1);
	print_ids("idwaiter", &idwaiter, 1);
	if (nfds) {
		print_ids("fdwaiters", fdws, (unsigned)nfds);
		bthread_t nums[16];
		for (long i = 0; i < nfds; i++)
			nums[i] = (bthread_t)fdnums[i];
		print_ids("fdnums", nums, (unsigned)nfds);
	}
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
	if (execq)
		print_ids("execq", execq_ids, 3); /* consumer, joiner, queue address */
	/* Addresses and numbers in decimal: "ids" lines are all the protocol has. */
	const bthread_t objs[] = {(uintptr_t)&wt_owned, (uintptr_t)&wt_tidheld,
				  (uintptr_t)&wt_cond, (uintptr_t)&wt_condm,
				  (uintptr_t)&wt_dl[0], (uintptr_t)&wt_dl[1], (uintptr_t)&wt_dl[2],
				  (uintptr_t)&wt_rw, wt_id.value};
	print_ids("objects", objs, 9);
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
		} else if (sscanf(line, "leaks %15s %4095s", fmt, path) == 2) {
			FILE *f = fopen(path, "w");
			struct stb_dump_opts o = {.format = stb_format_from_name(fmt), .leaks = 1};
			int rc = f ? stb_dump(f, &o) : -errno;
			if (f)
				fclose(f);
			printf("leaks rc=%d\n", rc);
		} else if (sscanf(line, "leak %lu", &stuck_ms) == 1) {
			printf("leak rc=%d\n", leak_spawn((unsigned)stuck_ms));
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
