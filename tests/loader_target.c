/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Target of test_loader_* and bench_loader: bthreads parked in known call
 * chains (butex, sleep, mutex, cond, fd, join, yield, spin, blocking read, a
 * spin 64 KiB deep), plain pthreads (one spinning, one asleep), a registered
 * pthread, a heartbeat and a counter of every signal received; ids on stdout,
 * line commands on stdin (ltgt_usage). Built with and without frame pointers.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>
#include <stb/abi.h>
#include <stb/stb.h>

#include "util.h"

/* Exported by libbthread (docs/abi.md); not in a public header. */
extern struct stb_abi_header *stb_task_table;

/* No inlining, cloning or IPA: every chain function keeps its own frame and
 * its own symbol. The empty asm after each call prevents tail calls. */
#define LTGT_FN STB_NOIPA __attribute__((used))
#define LTGT_NO_TAIL() __asm__ volatile("" ::: "memory")

#define LTGT_MAX_IDS 256
#define LTGT_MAX_MANY 4000000

/* ---- state ---- */

static atomic_int ltgt_stop;
static atomic_ullong ltgt_signals;
static atomic_ullong ltgt_heartbeat;
static atomic_ullong ltgt_yields;
static atomic_ullong ltgt_spins;
static atomic_ullong ltgt_pthread_spins;
static atomic_ullong ltgt_deep_spins;
static atomic_ullong ltgt_spin_max_gap_ns; /* longest pause seen by the spin loop */
static atomic_ullong ltgt_hb_max_gap_ns;   /* longest time between two heartbeats */
static atomic_int ltgt_woken;          /* butex / many waiters woken normally */
static atomic_int ltgt_blocker_in_read;
static atomic_int ltgt_blocker_done;
static atomic_ullong ltgt_blocker_release_ns;
static atomic_ullong ltgt_blocker_done_ns;
static atomic_ullong ltgt_pthread_id;

static int *ltgt_chain_butex;          /* value 0 until quit */
static int *ltgt_many_butex;
static bthread_mutex_t ltgt_mutex;
static bthread_mutex_t ltgt_cond_mutex;
static bthread_cond_t ltgt_cond;
static int ltgt_fd_pipe[2] = {-1, -1};
static int ltgt_block_pipe[2] = {-1, -1};

static uint64_t ltgt_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- signals: count every catchable one ---- */

static void ltgt_on_signal(int sig)
{
	(void)sig;
	atomic_fetch_add(&ltgt_signals, 1);
}

static void ltgt_catch_signals(void)
{
	for (int sig = 1; sig < NSIG; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = ltgt_on_signal;
		sa.sa_flags = SA_RESTART;
		/* A fault signal is counted, then kills the process as usual. */
		if (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE)
			sa.sa_flags |= SA_RESETHAND;
		sigemptyset(&sa.sa_mask);
		sigaction(sig, &sa, NULL); /* glibc-reserved signals fail: fine */
	}
}

/* ---- butex_wait chain ---- */

LTGT_FN static int ltgt_butex_leaf(void)
{
	int rc;
	while ((rc = butex_wait(ltgt_chain_butex, 0, NULL)) == 0 &&
	       __atomic_load_n(ltgt_chain_butex, __ATOMIC_ACQUIRE) == 0)
		;
	LTGT_NO_TAIL();
	return rc;
}

LTGT_FN static int ltgt_butex_mid(void)
{
	int rc = ltgt_butex_leaf();
	LTGT_NO_TAIL();
	return rc;
}

LTGT_FN static void *ltgt_butex_main(void *arg)
{
	(void)arg;
	ltgt_butex_mid();
	LTGT_NO_TAIL();
	atomic_fetch_add(&ltgt_woken, 1);
	return NULL;
}

/* ---- many suspended bthreads (benchmark): one butex ---- */

LTGT_FN static int ltgt_many_leaf(void)
{
	int rc;
	while ((rc = butex_wait(ltgt_many_butex, 0, NULL)) == 0 &&
	       __atomic_load_n(ltgt_many_butex, __ATOMIC_ACQUIRE) == 0)
		;
	LTGT_NO_TAIL();
	return rc;
}

LTGT_FN static int ltgt_many_mid(void)
{
	int rc = ltgt_many_leaf();
	LTGT_NO_TAIL();
	return rc;
}

LTGT_FN static void *ltgt_many_main(void *arg)
{
	(void)arg;
	ltgt_many_mid();
	LTGT_NO_TAIL();
	atomic_fetch_add(&ltgt_woken, 1);
	return NULL;
}

/* ---- bthread_usleep chain (woken by bthread_stop at quit) ---- */

LTGT_FN static int ltgt_sleep_leaf(void)
{
	int rc = bthread_usleep(3600ull * 1000000ull);
	LTGT_NO_TAIL();
	return rc;
}

LTGT_FN static int ltgt_sleep_mid(void)
{
	int rc = ltgt_sleep_leaf();
	LTGT_NO_TAIL();
	return rc;
}

LTGT_FN static void *ltgt_sleep_main(void *arg)
{
	(void)arg;
	ltgt_sleep_mid();
	LTGT_NO_TAIL();
	return NULL;
}

/* ---- bthread_mutex_lock chain (main holds the mutex until quit) ---- */

LTGT_FN static int ltgt_mutex_leaf(void)
{
	int rc = bthread_mutex_lock(&ltgt_mutex);
	LTGT_NO_TAIL();
	if (rc == 0)
		bthread_mutex_unlock(&ltgt_mutex);
	return rc;
}

LTGT_FN static int ltgt_mutex_mid(void)
{
	int rc = ltgt_mutex_leaf();
	LTGT_NO_TAIL();
	return rc;
}

LTGT_FN static void *ltgt_mutex_main(void *arg)
{
	(void)arg;
	ltgt_mutex_mid();
	LTGT_NO_TAIL();
	return NULL;
}

/* ---- bthread_cond_wait chain (broadcast at quit) ---- */

LTGT_FN static int ltgt_cond_leaf(void)
{
	int rc = bthread_mutex_lock(&ltgt_cond_mutex);
	while (rc == 0 && !atomic_load(&ltgt_stop))
		rc = bthread_cond_wait(&ltgt_cond, &ltgt_cond_mutex);
	LTGT_NO_TAIL();
	bthread_mutex_unlock(&ltgt_cond_mutex);
	return rc;
}

LTGT_FN static int ltgt_cond_mid(void)
{
	int rc = ltgt_cond_leaf();
	LTGT_NO_TAIL();
	return rc;
}

LTGT_FN static void *ltgt_cond_main(void *arg)
{
	(void)arg;
	ltgt_cond_mid();
	LTGT_NO_TAIL();
	return NULL;
}

/* ---- bthread_join chain: joins a bthread of its own that waits on the
 * chain butex (named "ltgt-joinee", not in any chain) ---- */

LTGT_FN static void *ltgt_joinee_main(void *arg)
{
	(void)arg;
	ltgt_butex_mid();
	LTGT_NO_TAIL();
	return NULL;
}

LTGT_FN static int ltgt_join_leaf(bthread_t t)
{
	int rc = bthread_join(t, NULL);
	LTGT_NO_TAIL();
	return rc;
}

LTGT_FN static int ltgt_join_mid(bthread_t t)
{
	int rc = ltgt_join_leaf(t);
	LTGT_NO_TAIL();
	return rc;
}

LTGT_FN static void *ltgt_join_main(void *arg)
{
	(void)arg;
	bthread_t t;
	bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
	bthread_attr_set_name(&attr, "ltgt-joinee");
	if (bthread_start_background(&t, &attr, ltgt_joinee_main, NULL) == 0)
		ltgt_join_mid(t);
	LTGT_NO_TAIL();
	return NULL;
}

/* ---- bthread_fd_wait chain (an empty pipe; quit writes to it) ---- */

LTGT_FN static int ltgt_fd_leaf(void)
{
	int rc = bthread_fd_wait(ltgt_fd_pipe[0], EPOLLIN);
	LTGT_NO_TAIL();
	return rc;
}

LTGT_FN static int ltgt_fd_mid(void)
{
	int rc = ltgt_fd_leaf();
	LTGT_NO_TAIL();
	return rc;
}

LTGT_FN static void *ltgt_fd_main(void *arg)
{
	(void)arg;
	ltgt_fd_mid();
	LTGT_NO_TAIL();
	return NULL;
}

/* ---- bthread_yield loop ---- */

LTGT_FN static int ltgt_yield_leaf(void)
{
	int rc = bthread_yield();
	LTGT_NO_TAIL();
	atomic_fetch_add_explicit(&ltgt_yields, 1, memory_order_relaxed);
	return rc;
}

LTGT_FN static void ltgt_yield_mid(void)
{
	while (!atomic_load_explicit(&ltgt_stop, memory_order_relaxed))
		ltgt_yield_leaf();
	LTGT_NO_TAIL();
}

LTGT_FN static void *ltgt_yield_main(void *arg)
{
	(void)arg;
	ltgt_yield_mid();
	LTGT_NO_TAIL();
	return NULL;
}

/* ---- spin loop (always running) ---- */

/*
 * ltgt_spin_redzone(n): n pause instructions, spun where a compiled epilogue
 * would be after `pop %rbx`: the CFI still says rbx is saved at CFA-16, a
 * slot now below sp, in the red zone. A sample there is unwound only if the
 * capture copied the red zone (the BPF program and the signal handler do).
 */
void ltgt_spin_redzone(unsigned long n);
__asm__(".text\n"
	".p2align 4\n"
	".globl ltgt_spin_redzone\n"
	".type ltgt_spin_redzone, @function\n"
	"ltgt_spin_redzone:\n"
	".cfi_startproc\n"
	"	push %rbx\n"
	".cfi_def_cfa_offset 16\n"
	".cfi_offset %rbx, -16\n"
	"	xor %ebx, %ebx\n"
	"	pop %rbx\n"
	".cfi_def_cfa_offset 8\n"
	"1:	pause\n"
	"	sub $1, %rdi\n"
	"	jnz 1b\n"
	"	ret\n"
	".cfi_endproc\n"
	".size ltgt_spin_redzone, .-ltgt_spin_redzone\n");

LTGT_FN static void ltgt_spin_leaf(void)
{
	volatile unsigned long n = 0; /* gives the leaf a frame */
	uint64_t last = ltgt_now_ns();
	while (!atomic_load_explicit(&ltgt_stop, memory_order_relaxed)) {
		n++;
		ltgt_spin_redzone(64);
		if ((n & 0xf) == 0) {
			atomic_fetch_add_explicit(&ltgt_spins, 1, memory_order_relaxed);
			uint64_t now = ltgt_now_ns();
			if (now - last > atomic_load_explicit(&ltgt_spin_max_gap_ns,
							      memory_order_relaxed))
				atomic_store(&ltgt_spin_max_gap_ns, now - last);
			last = now;
		}
	}
	LTGT_NO_TAIL();
}

LTGT_FN static void ltgt_spin_mid(void)
{
	ltgt_spin_leaf();
	LTGT_NO_TAIL();
}

LTGT_FN static void *ltgt_spin_main(void *arg)
{
	(void)arg;
	ltgt_spin_mid();
	LTGT_NO_TAIL();
	return NULL;
}

/* ---- a spin 64 KiB deep: frames past the BPF program's 32 KiB copy ---- */

#define LTGT_DEEP_LEVELS 64

LTGT_FN static void ltgt_deep_leaf(void)
{
	volatile unsigned long n = 0;
	while (!atomic_load_explicit(&ltgt_stop, memory_order_relaxed)) {
		if ((++n & 0xfff) == 0)
			atomic_fetch_add_explicit(&ltgt_deep_spins, 1, memory_order_relaxed);
	}
	LTGT_NO_TAIL();
}

/* 1 KiB of locals per level (no frame pointer in the -fomit-frame-pointer
 * build: only DWARF over a copy of them finds the callers). */
LTGT_FN static int ltgt_deep_rec(int level)
{
	volatile char pad[1024];
	pad[0] = (char)level;
	pad[sizeof(pad) - 1] = 0;
	if (level > 0)
		pad[1] = (char)ltgt_deep_rec(level - 1);
	else
		ltgt_deep_leaf();
	LTGT_NO_TAIL();
	return pad[0] + pad[1] + pad[sizeof(pad) - 1];
}

LTGT_FN static void *ltgt_deep_main(void *arg)
{
	(void)arg;
	ltgt_deep_rec(LTGT_DEEP_LEVELS);
	LTGT_NO_TAIL();
	return NULL;
}

/* ---- plain pthreads (no tasks): one spinning, one asleep in nanosleep ---- */

static atomic_ullong ltgt_plain_spins;
static atomic_int ltgt_plain_asleep;
static atomic_int ltgt_plain_tid[2];

LTGT_FN static void ltgt_plain_spin_leaf(void)
{
	volatile unsigned long n = 0;
	while (!atomic_load_explicit(&ltgt_stop, memory_order_relaxed))
		if ((++n & 0xfff) == 0)
			atomic_fetch_add_explicit(&ltgt_plain_spins, 1, memory_order_relaxed);
	LTGT_NO_TAIL();
}

LTGT_FN static void *ltgt_plain_spin_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "ltgt-plain-spin");
	atomic_store(&ltgt_plain_tid[0], (int)syscall(SYS_gettid));
	ltgt_plain_spin_leaf();
	LTGT_NO_TAIL();
	return NULL;
}

LTGT_FN static void ltgt_plain_sleep_leaf(void)
{
	atomic_store(&ltgt_plain_asleep, 1);
	while (!atomic_load_explicit(&ltgt_stop, memory_order_relaxed)) {
		/* Asleep nearly all the time; quit waits 0.5 s at most. */
		struct timespec ts = {0, 500000000};
		nanosleep(&ts, NULL);
	}
	LTGT_NO_TAIL();
}

LTGT_FN static void *ltgt_plain_sleep_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "ltgt-plain-nap");
	atomic_store(&ltgt_plain_tid[1], (int)syscall(SYS_gettid));
	ltgt_plain_sleep_leaf();
	LTGT_NO_TAIL();
	return NULL;
}

/* ---- abort-starting: a core with a thread that has not run yet ---- */

static void *ltgt_unstarted_main(void *arg)
{
	(void)arg;
	abort(); /* never reached: the core is written before it runs */
}

/* Reads the first line of /proc/self/task/TID/NAME into buf; false when
 * the file is gone or empty. */
static bool ltgt_task_line(long tid, const char *name, char *buf, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/task/%ld/%s", tid, name);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	bool ok = fgets(buf, (int)len, f) != NULL;
	fclose(f);
	return ok;
}

/* True when a thread of this process other than the caller may still be
 * where a clone left it (the loader would call it starting): never put on
 * a CPU yet (/proc/self/task/TID/schedstat: its third number, the times it
 * ran, is 0; /proc's "syscall" says "running" of any runnable thread), or
 * in a clone system call. A thread created lazily just before (the fd
 * dispatcher, at the fd chain's first wait) may not have run yet on a busy
 * machine. */
static bool ltgt_others_starting(void)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return false;
	bool starting = false;
	long self = (long)syscall(SYS_gettid);
	struct dirent *e;
	while (!starting && (e = readdir(d))) {
		char *end, buf[128];
		long tid = strtol(e->d_name, &end, 10);
		if (*end || tid <= 0 || tid == self)
			continue;
		unsigned long long ns, wait_ns, times;
		if (ltgt_task_line(tid, "schedstat", buf, sizeof(buf)) &&
		    sscanf(buf, "%llu %llu %llu", &ns, &wait_ns, &times) == 3 && times == 0)
			starting = true;
		if (ltgt_task_line(tid, "syscall", buf, sizeof(buf))) {
			long nr = strtol(buf, &end, 10);
			if (end != buf && (nr == SYS_clone || nr == SYS_clone3))
				starting = true;
		}
	}
	closedir(d);
	return starting;
}

/* Creates a thread that cannot run before this one aborts: both on this
 * CPU only, this one SCHED_FIFO, which the new one (of the same priority,
 * inherited) does not preempt; abort() then dumps core with the new thread
 * as its clone made it, the only one so (the others have run: waited for
 * up to 15 s, within the 20 s the test gives the reply). Prints "starting
 * TID" first; "error ..." when it cannot. */
static void ltgt_abort_starting(void)
{
	uint64_t until = ltgt_now_ns() + 15000000000ull;
	while (ltgt_others_starting()) {
		if (ltgt_now_ns() > until) {
			printf("error a thread has not run for 15 s\n");
			return;
		}
		usleep(1000);
	}
	int cpu = sched_getcpu();
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu < 0 ? 0 : cpu, &set);
	struct sched_param sp = {.sched_priority = 1};
	if (sched_setaffinity(0, sizeof(set), &set) != 0 ||
	    sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
		printf("error sched: %s\n", strerror(errno));
		return;
	}
	pthread_t th;
	clockid_t cid;
	if (pthread_create(&th, NULL, ltgt_unstarted_main, NULL) != 0 ||
	    pthread_getcpuclockid(th, &cid) != 0) {
		printf("error pthread_create\n");
		return;
	}
	/* A thread's CPU clock is ~tid << 3 | 6 (the kernel's clockid ABI). */
	printf("starting %d\n", (int)~(cid >> 3));
	fflush(stdout);
	abort();
}

/* ---- heartbeat ---- */

LTGT_FN static void *ltgt_heartbeat_main(void *arg)
{
	(void)arg;
	uint64_t last = ltgt_now_ns();
	while (!atomic_load_explicit(&ltgt_stop, memory_order_relaxed)) {
		bthread_usleep(1000);
		atomic_fetch_add(&ltgt_heartbeat, 1);
		uint64_t now = ltgt_now_ns();
		if (now - last > atomic_load_explicit(&ltgt_hb_max_gap_ns, memory_order_relaxed))
			atomic_store(&ltgt_hb_max_gap_ns, now - last);
		last = now;
	}
	LTGT_NO_TAIL();
	return NULL;
}

/* ---- a bthread RUNNING but off-CPU: a raw blocking read on its worker ---- */

LTGT_FN static void ltgt_block_leaf(void)
{
	char c;
	atomic_store(&ltgt_blocker_in_read, 1);
	while (read(ltgt_block_pipe[0], &c, 1) < 0 && errno == EINTR)
		;
	LTGT_NO_TAIL();
}

/* A stale frame record for the loader's frame-record scan (offcpu.c) to
 * avoid: ltgt_block_decoy has ltgt_block_leaf's frame layout and leaves, where
 * the leaf's uninitialised locals will lie, a saved rbp and a return address
 * after an indirect call, as earlier calls on a reused stack do. */
static uintptr_t ltgt_decoy_ret;

LTGT_FN static void ltgt_decoy_callee(void)
{
	ltgt_decoy_ret = (uintptr_t)__builtin_return_address(0);
	LTGT_NO_TAIL();
}

static void (*volatile ltgt_decoy_fn)(void) = ltgt_decoy_callee;

LTGT_FN static void ltgt_block_decoy(void)
{
	volatile uintptr_t rec[4];
	ltgt_decoy_fn();
	for (int i = 0; i < 4; i += 2) {
		rec[i] = (uintptr_t)__builtin_frame_address(0);
		rec[i + 1] = ltgt_decoy_ret;
	}
	__asm__ volatile("" : : "r"(rec) : "memory");
}

LTGT_FN static void ltgt_block_mid(void)
{
	ltgt_block_decoy();
	LTGT_NO_TAIL();
	ltgt_block_leaf();
	LTGT_NO_TAIL();
	/* Leaves RUNNING: passes the STB gate (waits there while a lease holds). */
	bthread_usleep(1000);
	LTGT_NO_TAIL();
}

LTGT_FN static void *ltgt_block_main(void *arg)
{
	(void)arg;
	ltgt_block_mid();
	LTGT_NO_TAIL();
	atomic_store(&ltgt_blocker_done_ns, ltgt_now_ns());
	atomic_store(&ltgt_blocker_done, 1);
	return NULL;
}

/* ---- a bthread that ends at once (its id is then stale) ---- */

LTGT_FN static void *ltgt_finished_main(void *arg)
{
	LTGT_NO_TAIL();
	return arg;
}

/* ---- registered pthread spinning in a known chain ---- */

/* --pthread 2: the pthread calls sched_yield() in its loop and shares CPU 0
 * with a hog, so it is mostly runnable inside sched_yield, not on a CPU. */
static int ltgt_pthread_yields;

LTGT_FN static void ltgt_pthread_leaf(void)
{
	volatile unsigned long n = 0;
	while (!atomic_load_explicit(&ltgt_stop, memory_order_relaxed)) {
		n++;
		if (ltgt_pthread_yields) {
			sched_yield();
			atomic_fetch_add_explicit(&ltgt_pthread_spins, 1, memory_order_relaxed);
		} else if ((n & 0xfff) == 0) {
			atomic_fetch_add_explicit(&ltgt_pthread_spins, 1, memory_order_relaxed);
		}
	}
	LTGT_NO_TAIL();
}

static void ltgt_pin_cpu0(void)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(0, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void *ltgt_hog_main(void *arg)
{
	(void)arg;
	ltgt_pin_cpu0();
	volatile unsigned long n = 0;
	while (!atomic_load_explicit(&ltgt_stop, memory_order_relaxed))
		n++;
	return NULL;
}

LTGT_FN static void ltgt_pthread_mid(void)
{
	ltgt_pthread_leaf();
	LTGT_NO_TAIL();
}

LTGT_FN static void *ltgt_pthread_main(void *arg)
{
	(void)arg;
	/* The registration takes the thread's name. */
	pthread_setname_np(pthread_self(), "ltgt-pthread");
	if (ltgt_pthread_yields)
		ltgt_pin_cpu0();
	bthread_t id = bthread_init_for_pthread_stack_trace();
	if (id == 0) {
		fprintf(stderr, "loader_target: bthread_init_for_pthread_stack_trace: %s\n",
			strerror(errno));
		exit(1);
	}
	atomic_store(&ltgt_pthread_id, id);
	ltgt_pthread_mid();
	LTGT_NO_TAIL();
	return NULL;
}

/* ---- setup ---- */

struct ltgt_opts {
	int workers;
	int butex, sleep, mutex, cond, fd, join, yield, spin, heartbeat, blocker, pthread, deep;
	int plain; /* 1: two plain pthreads, one spinning, one asleep */
	long many;
	int finished;     /* bthreads that ran and were joined before "ready" */
	int fake_abi;     /* >0: publish a fake table with this ABI version */
};

struct ltgt_chain {
	const char *name;
	void *(*fn)(void *);
	int n;
	unsigned stack_type;
	bthread_t ids[LTGT_MAX_IDS];
	unsigned want_state; /* state to reach before "ready"; 0: any live state */
};

static void ltgt_usage(void)
{
	fprintf(stderr,
		"usage: loader_target [--workers N] [--butex N] [--sleep N] [--mutex N] [--fd N]\n"
		"                     [--cond N] [--join N] (each joiner also starts an\n"
		"                     \"ltgt-joinee\" bthread waiting on the butex)\n"
		"                     [--yield N] [--spin N] [--heartbeat N] [--blocker N]\n"
		"                     [--pthread 0|1|2] [--many N] [--finished N] [--fake-abi VERSION]\n"
		"                     [--deep 0|1] (a bthread spinning 65 frames of 1 KiB deep)\n"
		"                     [--plain 0|1] (pthreads that are no tasks: ltgt-plain-spin\n"
		"                     spins, ltgt-plain-nap sleeps in nanosleep)\n"
		"--pthread 2: the pthread loops in sched_yield() on CPU 0 beside a hog thread.\n"
		"Prints 'pid P', one 'ids CHAIN ID...' line per chain, then 'ready'.\n"
		"Commands on stdin, one per line, each answered by one line:\n"
		"  stats          stats signals=S heartbeat=H yields=Y spins=N pthread_spins=N\n"
		"                 gate_giveups=G gate_waits=W gate_wait_ns=NS blocker_in_read=0|1\n"
		"                 blocker_done=0|1 blocker_wait_ns=NS blocker_done_at_ns=T\n"
		"                 spin_max_gap_ns=NS hb_max_gap_ns=NS (CLOCK_MONOTONIC times;\n"
		"                 the longest pauses seen by the spin loop and the heartbeat)\n"
		"  gapreset       ok (both gaps start again from 0)\n"
		"  lease ID       lease 0xWORD (the task's trace word in the table)\n"
		"  state ID       state NAME\n"
		"  hold ID MS     hold 0xWORD: takes the task's lease for MS ms, as another\n"
		"                 tracer would (hold busy: someone holds it)\n"
		"  unhold ID      unhold 0|-1 (gives that lease back)\n"
		"  release        ok (the blocker's read returns)\n"
		"  dump           dump tasks=N ns=NS (in-process stb_dump to /dev/null)\n"
		"  trace ID       trace rc=R mode=M held_ns=NS ns=NS (in-process stb_trace)\n"
		"  abort          (no answer) abort(): the process dumps core\n"
		"  abort-starting starting TID: creates thread TID, which cannot run before\n"
		"                 the process aborts (SCHED_FIFO on one CPU): its core has\n"
		"                 a thread that has not started\n"
		"  quit           bye signals=S heartbeat=H joined=N woken=N (everything ends)\n");
}

static int ltgt_parse(int argc, char **argv, struct ltgt_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->workers = 4;
	o->butex = 3;
	o->sleep = 2;
	o->mutex = 1;
	o->fd = 1;
	o->yield = 2;
	o->spin = 1;
	o->heartbeat = 1;
	o->blocker = 0;
	o->pthread = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (i + 1 >= argc) {
			ltgt_usage();
			return -1;
		}
		long v = strtol(argv[++i], NULL, 10);
		if (strcmp(a, "--workers") == 0)
			o->workers = (int)v;
		else if (strcmp(a, "--butex") == 0)
			o->butex = (int)v;
		else if (strcmp(a, "--sleep") == 0)
			o->sleep = (int)v;
		else if (strcmp(a, "--mutex") == 0)
			o->mutex = (int)v;
		else if (strcmp(a, "--fd") == 0)
			o->fd = (int)v;
		else if (strcmp(a, "--cond") == 0)
			o->cond = (int)v;
		else if (strcmp(a, "--join") == 0)
			o->join = (int)v;
		else if (strcmp(a, "--yield") == 0)
			o->yield = (int)v;
		else if (strcmp(a, "--spin") == 0)
			o->spin = (int)v;
		else if (strcmp(a, "--heartbeat") == 0)
			o->heartbeat = (int)v;
		else if (strcmp(a, "--blocker") == 0)
			o->blocker = (int)v;
		else if (strcmp(a, "--pthread") == 0)
			o->pthread = (int)v;
		else if (strcmp(a, "--finished") == 0)
			o->finished = (int)v;
		else if (strcmp(a, "--many") == 0)
			o->many = v;
		else if (strcmp(a, "--fake-abi") == 0)
			o->fake_abi = (int)v;
		else if (strcmp(a, "--deep") == 0)
			o->deep = (int)v;
		else if (strcmp(a, "--plain") == 0)
			o->plain = (int)v;
		else {
			ltgt_usage();
			return -1;
		}
	}
	if (o->butex > LTGT_MAX_IDS || o->sleep > LTGT_MAX_IDS || o->mutex > 1 || o->fd > 1 ||
	    o->cond < 0 || o->cond > LTGT_MAX_IDS || o->join < 0 || o->join > LTGT_MAX_IDS ||
	    o->yield > LTGT_MAX_IDS || o->spin > LTGT_MAX_IDS || o->heartbeat > 1 ||
	    o->blocker > 1 || o->pthread > 2 || o->deep < 0 || o->deep > 1 || o->plain < 0 ||
	    o->plain > 1 || o->finished < 0 ||
	    o->finished > LTGT_MAX_IDS ||
	    o->many < 0 || o->many > LTGT_MAX_MANY ||
	    o->workers < 1 || o->workers > 64) {
		ltgt_usage();
		return -1;
	}
	return 0;
}

/* A process with a "stb_tasks" memfd whose header has the magic and another
 * ABI version: what a loader meets in a process built with another stb. */
static int ltgt_fake_abi(int version)
{
	size_t size = STB_ABI_TABLE_SIZE(64);
	int fd = memfd_create(STB_ABI_TABLE_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
		perror("loader_target: memfd");
		return 1;
	}
	struct stb_abi_header *h = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED) {
		perror("loader_target: mmap");
		return 1;
	}
	h->abi_version = (uint32_t)version;
	h->entry_size = STB_ABI_ENTRY_SIZE;
	h->header_entries = STB_ABI_HEADER_ENTRIES;
	h->max_workers = STB_ABI_MAX_WORKERS;
	h->task_capacity = 64;
	h->pid = (uint32_t)getpid();
	h->backing = STB_ABI_BACKING_MEMFD;
	h->table_addr = (uint64_t)(uintptr_t)h;
	h->table_size = size;
	__atomic_store_n(&h->magic, STB_ABI_MAGIC, __ATOMIC_RELEASE);
	printf("pid %d\nready\n", (int)getpid());
	fflush(stdout);
	char line[256];
	while (fgets(line, sizeof(line), stdin)) {
		if (strncmp(line, "quit", 4) == 0)
			break;
		printf("error fake target\n");
		fflush(stdout);
	}
	printf("bye signals=%llu\n", (unsigned long long)atomic_load(&ltgt_signals));
	return 0;
}

static struct stb_abi_task *ltgt_entry(bthread_t id)
{
	struct stb_abi_header *h = __atomic_load_n(&stb_task_table, __ATOMIC_ACQUIRE);
	uint32_t slot = STB_ABI_SLOT(id);
	if (!h || slot >= h->task_capacity)
		return NULL;
	return (struct stb_abi_task *)((char *)h + STB_ABI_TASK_OFFSET(slot));
}

/* The state the loader will see (abi.h, "Running"): a bthread whose word
 * says READY runs while a worker's current names it. */
static unsigned ltgt_state(bthread_t id)
{
	struct stb_abi_task *p = ltgt_entry(id);
	if (!p || __atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id)
		return STB_TASK_DESTROYED;
	unsigned st = STB_ABI_STATE(__atomic_load_n(&p->word, __ATOMIC_ACQUIRE));
	struct stb_abi_header *h = __atomic_load_n(&stb_task_table, __ATOMIC_ACQUIRE);
	uint32_t n = __atomic_load_n(&h->nworkers, __ATOMIC_ACQUIRE);
	for (uint32_t w = 0; STB_ABI_RUNNABLE(st) && w < n && w < STB_ABI_MAX_WORKERS; w++) {
		const struct stb_abi_worker *e =
		    (const struct stb_abi_worker *)((char *)h + STB_ABI_WORKER_OFFSET(w));
		if (__atomic_load_n(&e->current, __ATOMIC_ACQUIRE) == id)
			return STB_TASK_RUNNING;
	}
	return st;
}

static void ltgt_sleep_ms(unsigned ms)
{
	struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000l};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Waits until every chain's tasks reached their state and the loops run. */
static int ltgt_settle(struct ltgt_chain *chains, int nchains, bthread_t *many, long nmany,
		       const struct ltgt_opts *o)
{
	uint64_t deadline = ltgt_now_ns() + 20ull * 1000000000ull;
	for (;;) {
		bool ok = true;
		for (int c = 0; c < nchains && ok; c++)
			for (int i = 0; i < chains[c].n && ok; i++)
				if (chains[c].want_state &&
				    ltgt_state(chains[c].ids[i]) != chains[c].want_state)
					ok = false;
		for (long i = 0; i < nmany && ok; i++)
			if (ltgt_state(many[i]) != STB_TASK_SUSPENDED)
				ok = false;
		if (o->spin && atomic_load(&ltgt_spins) == 0)
			ok = false;
		if (o->yield && atomic_load(&ltgt_yields) == 0)
			ok = false;
		if (o->heartbeat && atomic_load(&ltgt_heartbeat) == 0)
			ok = false;
		if (o->pthread && atomic_load(&ltgt_pthread_spins) == 0)
			ok = false;
		if (o->blocker && !atomic_load(&ltgt_blocker_in_read))
			ok = false;
		if (o->deep && atomic_load(&ltgt_deep_spins) == 0)
			ok = false;
		if (o->plain && (!atomic_load(&ltgt_plain_spins) || !atomic_load(&ltgt_plain_asleep)))
			ok = false;
		if (ok)
			return 0;
		if (ltgt_now_ns() > deadline)
			return -1;
		ltgt_sleep_ms(2);
	}
}

static void ltgt_stats(void)
{
	struct stb_stats st;
	memset(&st, 0, sizeof(st));
	stb_get_stats(&st);
	uint64_t rel = atomic_load(&ltgt_blocker_release_ns);
	uint64_t done = atomic_load(&ltgt_blocker_done_ns);
	printf("stats signals=%llu heartbeat=%llu yields=%llu spins=%llu pthread_spins=%llu "
	       "gate_giveups=%" PRIu64 " gate_waits=%" PRIu64 " gate_wait_ns=%" PRIu64
	       " blocker_in_read=%d "
	       "blocker_done=%d blocker_wait_ns=%" PRIu64 " blocker_done_at_ns=%" PRIu64
	       " spin_max_gap_ns=%llu hb_max_gap_ns=%llu\n",
	       (unsigned long long)atomic_load(&ltgt_signals),
	       (unsigned long long)atomic_load(&ltgt_heartbeat),
	       (unsigned long long)atomic_load(&ltgt_yields),
	       (unsigned long long)atomic_load(&ltgt_spins),
	       (unsigned long long)atomic_load(&ltgt_pthread_spins), st.gate_giveups, st.gate_waits,
	       st.gate_wait_ns,
	       atomic_load(&ltgt_blocker_in_read), atomic_load(&ltgt_blocker_done),
	       done && rel && done > rel ? done - rel : 0, done,
	       (unsigned long long)atomic_load(&ltgt_spin_max_gap_ns),
	       (unsigned long long)atomic_load(&ltgt_hb_max_gap_ns));
}

/* The lease word of the last "hold". */
static uint64_t ltgt_held;

/* Takes task id's lease like another tracer (abi.h: deadline >> 10 << 16 |
 * tracer id), so that a loader must wait for it. */
static void ltgt_hold(bthread_t id, unsigned ms)
{
	struct stb_abi_task *p = ltgt_entry(id);
	uint64_t deadline = ltgt_now_ns() + (uint64_t)ms * 1000000ull;
	__u64 word = STB_ABI_LEASE_ENCODE(deadline, 0xfffeu), zero = 0;
	if (p && __atomic_compare_exchange_n(&p->trace, &zero, word, false, __ATOMIC_SEQ_CST,
					     __ATOMIC_RELAXED)) {
		ltgt_held = word;
		printf("hold 0x%" PRIx64 "\n", (uint64_t)word);
	} else {
		printf("hold busy\n");
	}
}

/* In-process stb_dump of every task to /dev/null, timed. */
static void ltgt_dump(void)
{
	FILE *null = fopen("/dev/null", "we");
	if (!null) {
		printf("dump error %s\n", strerror(errno));
		return;
	}
	uint64_t t0 = ltgt_now_ns();
	int n = stb_dump(null, NULL);
	uint64_t t1 = ltgt_now_ns();
	fclose(null);
	printf("dump tasks=%d ns=%" PRIu64 "\n", n, t1 - t0);
}

/* In-process stb_trace of one task (signal mode for a running one), timed. */
static void ltgt_trace(bthread_t id)
{
	struct stb_frame frames[64];
	struct stb_trace_info info;
	struct stb_trace_opts opts;
	memset(&opts, 0, sizeof(opts));
	opts.no_symbols = 1;
	uint64_t t0 = ltgt_now_ns();
	int rc = stb_trace(id, &opts, frames, 64, &info);
	uint64_t t1 = ltgt_now_ns();
	printf("trace rc=%d mode=%u held_ns=%" PRIu64 " ns=%" PRIu64 "\n", rc, info.mode,
	       info.held_ns, t1 - t0);
}

int main(int argc, char **argv)
{
	struct ltgt_opts o;
	if (ltgt_parse(argc, argv, &o) != 0)
		return 2;
	ltgt_catch_signals();
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (o.fake_abi)
		return ltgt_fake_abi(o.fake_abi);

	if (bthread_setconcurrency(o.workers) != 0) {
		fprintf(stderr, "loader_target: bthread_setconcurrency(%d) failed\n", o.workers);
		return 1;
	}
	ltgt_chain_butex = butex_create();
	ltgt_many_butex = butex_create();
	if (!ltgt_chain_butex || !ltgt_many_butex || bthread_mutex_init(&ltgt_mutex, NULL) != 0 ||
	    bthread_mutex_init(&ltgt_cond_mutex, NULL) != 0 || bthread_cond_init(&ltgt_cond, NULL) != 0 ||
	    pipe2(ltgt_fd_pipe, O_CLOEXEC) != 0 || pipe2(ltgt_block_pipe, O_CLOEXEC) != 0) {
		fprintf(stderr, "loader_target: setup failed: %s\n", strerror(errno));
		return 1;
	}
	/* The mutex chain blocks on a mutex that main holds until quit. */
	bthread_mutex_lock(&ltgt_mutex);

	struct ltgt_chain chains[] = {
		{"butex", ltgt_butex_main, o.butex, BTHREAD_STACKTYPE_NORMAL, {0}, STB_TASK_SUSPENDED},
		{"sleep", ltgt_sleep_main, o.sleep, BTHREAD_STACKTYPE_NORMAL, {0}, STB_TASK_SUSPENDED},
		{"mutex", ltgt_mutex_main, o.mutex, BTHREAD_STACKTYPE_NORMAL, {0}, STB_TASK_SUSPENDED},
		{"fd", ltgt_fd_main, o.fd, BTHREAD_STACKTYPE_NORMAL, {0}, STB_TASK_SUSPENDED},
		{"cond", ltgt_cond_main, o.cond, BTHREAD_STACKTYPE_NORMAL, {0}, STB_TASK_SUSPENDED},
		{"join", ltgt_join_main, o.join, BTHREAD_STACKTYPE_NORMAL, {0}, STB_TASK_SUSPENDED},
		{"yield", ltgt_yield_main, o.yield, BTHREAD_STACKTYPE_NORMAL, {0}, 0},
		{"spin", ltgt_spin_main, o.spin, BTHREAD_STACKTYPE_NORMAL, {0}, STB_TASK_RUNNING},
		{"heartbeat", ltgt_heartbeat_main, o.heartbeat, BTHREAD_STACKTYPE_NORMAL, {0}, 0},
		{"blocker", ltgt_block_main, o.blocker, BTHREAD_STACKTYPE_NORMAL, {0},
		 STB_TASK_RUNNING},
		{"deep", ltgt_deep_main, o.deep, BTHREAD_STACKTYPE_NORMAL, {0}, STB_TASK_RUNNING},
	};
	int nchains = (int)(sizeof(chains) / sizeof(chains[0]));
	char names[sizeof(chains) / sizeof(chains[0])][32];
	for (int c = 0; c < nchains; c++) {
		snprintf(names[c], sizeof(names[c]), "ltgt-%s", chains[c].name);
		bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
		attr.stack_type = chains[c].stack_type;
		bthread_attr_set_name(&attr, names[c]);
		for (int i = 0; i < chains[c].n; i++) {
			if (bthread_start_background(&chains[c].ids[i], &attr, chains[c].fn, NULL) != 0) {
				fprintf(stderr, "loader_target: cannot start a %s bthread\n",
					chains[c].name);
				return 1;
			}
		}
	}
	bthread_t *many = NULL;
	if (o.many) {
		many = calloc((size_t)o.many, sizeof(*many));
		bthread_attr_t attr = BTHREAD_ATTR_SMALL;
		bthread_attr_set_name(&attr, "ltgt-many");
		for (long i = 0; many && i < o.many; i++) {
			if (bthread_start_background(&many[i], &attr, ltgt_many_main, NULL) != 0) {
				fprintf(stderr, "loader_target: cannot start many[%ld]\n", i);
				return 1;
			}
		}
		if (!many) {
			fprintf(stderr, "loader_target: out of memory\n");
			return 1;
		}
	}
	bthread_t finished[LTGT_MAX_IDS];
	for (int i = 0; i < o.finished; i++) {
		if (bthread_start_background(&finished[i], NULL, ltgt_finished_main, NULL) != 0 ||
		    bthread_join(finished[i], NULL) != 0) {
			fprintf(stderr, "loader_target: a finished bthread failed\n");
			return 1;
		}
	}
	pthread_t pth, hog;
	ltgt_pthread_yields = o.pthread == 2;
	if (ltgt_pthread_yields && pthread_create(&hog, NULL, ltgt_hog_main, NULL) != 0) {
		fprintf(stderr, "loader_target: pthread_create failed\n");
		return 1;
	}
	if (o.pthread) {
		if (pthread_create(&pth, NULL, ltgt_pthread_main, NULL) != 0) {
			fprintf(stderr, "loader_target: pthread_create failed\n");
			return 1;
		}
	}
	pthread_t plain[2];
	if (o.plain && (pthread_create(&plain[0], NULL, ltgt_plain_spin_main, NULL) != 0 ||
			pthread_create(&plain[1], NULL, ltgt_plain_sleep_main, NULL) != 0)) {
		fprintf(stderr, "loader_target: pthread_create failed\n");
		return 1;
	}
	if (ltgt_settle(chains, nchains, many, o.many, &o) != 0) {
		fprintf(stderr, "loader_target: the chains did not settle within 20 s\n");
		for (int c = 0; c < nchains; c++)
			for (int i = 0; i < chains[c].n; i++)
				fprintf(stderr, "  %s %" PRIu64 ": %s\n", chains[c].name, chains[c].ids[i],
					stb_state_name(ltgt_state(chains[c].ids[i])));
		return 1;
	}
	printf("pid %d\n", (int)getpid());
	for (int c = 0; c < nchains; c++) {
		if (!chains[c].n)
			continue;
		printf("ids %s", chains[c].name);
		for (int i = 0; i < chains[c].n; i++)
			printf(" %" PRIu64, chains[c].ids[i]);
		printf("\n");
	}
	if (o.pthread)
		printf("ids pthread %llu\n", (unsigned long long)atomic_load(&ltgt_pthread_id));
	if (o.plain) /* tids: these threads are no tasks */
		printf("ids plain %d %d\n", atomic_load(&ltgt_plain_tid[0]),
		       atomic_load(&ltgt_plain_tid[1]));
	if (o.finished) {
		printf("ids finished");
		for (int i = 0; i < o.finished; i++)
			printf(" %" PRIu64, finished[i]);
		printf("\n");
	}
	if (o.many)
		printf("ids many %ld %" PRIu64 " %" PRIu64 "\n", o.many, many[0], many[o.many - 1]);
	printf("ready\n");

	char line[256];
	while (fgets(line, sizeof(line), stdin)) {
		unsigned long long id = 0;
		unsigned ms = 0;
		if (strncmp(line, "stats", 5) == 0) {
			ltgt_stats();
		} else if (sscanf(line, "lease %llu", &id) == 1) {
			struct stb_abi_task *p = ltgt_entry(id);
			printf("lease 0x%" PRIx64 "\n",
			       p ? (uint64_t)__atomic_load_n(&p->trace, __ATOMIC_ACQUIRE) : 0);
		} else if (sscanf(line, "hold %llu %u", &id, &ms) == 2) {
			ltgt_hold(id, ms);
		} else if (sscanf(line, "unhold %llu", &id) == 1) {
			struct stb_abi_task *p = ltgt_entry(id);
			__u64 w = ltgt_held;
			printf("unhold %d\n", p && w && __atomic_compare_exchange_n(
							&p->trace, &w, 0, false, __ATOMIC_SEQ_CST,
							__ATOMIC_RELAXED) ? 0 : -1);
		} else if (sscanf(line, "state %llu", &id) == 1) {
			printf("state %s\n", stb_state_name(ltgt_state(id)));
		} else if (strncmp(line, "release", 7) == 0) {
			atomic_store(&ltgt_blocker_release_ns, ltgt_now_ns());
			ssize_t n = write(ltgt_block_pipe[1], "x", 1);
			printf(n == 1 ? "ok\n" : "error write\n");
		} else if (strncmp(line, "gapreset", 8) == 0) {
			atomic_store(&ltgt_spin_max_gap_ns, 0);
			atomic_store(&ltgt_hb_max_gap_ns, 0);
			printf("ok\n");
		} else if (strncmp(line, "dump", 4) == 0) {
			ltgt_dump();
		} else if (sscanf(line, "trace %llu", &id) == 1) {
			ltgt_trace(id);
		} else if (strncmp(line, "abort-starting", 14) == 0) {
			ltgt_abort_starting();
		} else if (strncmp(line, "abort", 5) == 0) {
			abort(); /* the counting handler returns; abort() then dumps core */
		} else if (strncmp(line, "quit", 4) == 0) {
			break;
		} else {
			printf("error unknown command\n");
		}
	}

	/* Quit (or the driver went away): end every chain and join it. */
	atomic_store(&ltgt_stop, 1);
	__atomic_store_n(ltgt_chain_butex, 1, __ATOMIC_RELEASE);
	butex_wake_all(ltgt_chain_butex);
	__atomic_store_n(ltgt_many_butex, 1, __ATOMIC_RELEASE);
	butex_wake_all(ltgt_many_butex);
	bthread_mutex_unlock(&ltgt_mutex);
	bthread_mutex_lock(&ltgt_cond_mutex);
	bthread_cond_broadcast(&ltgt_cond);
	bthread_mutex_unlock(&ltgt_cond_mutex);
	if (write(ltgt_fd_pipe[1], "x", 1) != 1)
		return 1;
	if (o.blocker && !atomic_load(&ltgt_blocker_release_ns) &&
	    write(ltgt_block_pipe[1], "x", 1) != 1)
		return 1;
	for (int i = 0; i < o.sleep; i++)
		bthread_stop(chains[1].ids[i]);
	int joined = 0;
	for (int c = 0; c < nchains; c++)
		for (int i = 0; i < chains[c].n; i++)
			joined += bthread_join(chains[c].ids[i], NULL) == 0;
	for (long i = 0; i < o.many; i++)
		joined += bthread_join(many[i], NULL) == 0;
	if (o.pthread)
		joined += pthread_join(pth, NULL) == 0;
	if (ltgt_pthread_yields)
		pthread_join(hog, NULL);
	if (o.plain) {
		pthread_join(plain[0], NULL);
		pthread_join(plain[1], NULL);
	}
	printf("bye signals=%llu heartbeat=%llu joined=%d woken=%d\n",
	       (unsigned long long)atomic_load(&ltgt_signals),
	       (unsigned long long)atomic_load(&ltgt_heartbeat), joined, atomic_load(&ltgt_woken));
	free(many);
	return 0;
}
