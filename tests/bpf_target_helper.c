/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Target process of test_bpf_prog: builds a task table by hand with the
 * include/stb/abi.h layout (a BPF_F_MMAPABLE array map or a memfd, both named
 * stb_tasks), publishes worker 0 = a thread running one bthread id, and makes
 * that thread spin in known function chains. Counts every signal it receives.
 * Usage: bpf_target_helper map|memfd; protocol in bpf_target_helper.h.
 */
#include "bpf_target_helper.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <linux/bpf.h>

#include <stb/abi.h>

#include "util.h"

#define HELPER_STACK_SIZE (512u * 1024u)
#define HELPER_PATTERN_WORDS 5120u   /* 40 KiB: deeper than one stack copy */
#define HELPER_HOLE_BYTES (64u * 1024u)
#define HELPER_READ_BYTES (1u << 20)

/* Each function in its own section: the linker's __start_/__stop_ symbols give
 * its exact address range. noipa: no inlining, cloning or IPA. */
#define HELPER_FN(name) STB_NOIPA __attribute__((section("stb_fn_" #name)))
#define HELPER_RANGE(name)                                                     \
	extern const char __start_stb_fn_##name[], __stop_stb_fn_##name[]

HELPER_RANGE(spin_a);
HELPER_RANGE(spin_b);
HELPER_RANGE(spin_c);
HELPER_RANGE(kspin_a);
HELPER_RANGE(kspin_b);
HELPER_RANGE(kspin_c);
HELPER_RANGE(hole_a);

static _Atomic int helper_want = STB_HELPER_CMD_USER; /* chain the worker should run */
static _Atomic unsigned int helper_gen;    /* bumped by every chain command */
static _Atomic unsigned int helper_in_gen; /* generation spin_c is spinning in */
static _Atomic unsigned long long helper_signals;
static _Atomic unsigned long long helper_spins;
static _Atomic uint64_t helper_pattern_addr;
static _Atomic uint64_t helper_hole_lo;
static volatile unsigned long helper_sink;
static unsigned char *helper_table;
static int helper_zero_fd = -1;
static unsigned char helper_read_buf[HELPER_READ_BYTES];

static void helper_on_signal(int sig)
{
	(void)sig;
	atomic_fetch_add(&helper_signals, 1);
}

static void helper_catch_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = helper_on_signal;
	sa.sa_flags = SA_RESETHAND | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	for (int sig = 1; sig < NSIG; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		sigaction(sig, &sa, NULL); /* glibc-reserved signals fail: fine */
	}
}

static struct stb_abi_task *helper_task(unsigned int slot)
{
	return (struct stb_abi_task *)(helper_table + STB_ABI_TASK_OFFSET(slot));
}

static struct stb_abi_worker *helper_worker(unsigned int w)
{
	return (struct stb_abi_worker *)(helper_table + STB_ABI_WORKER_OFFSET(w));
}

/* Entered by the innermost function of a chain: the generation to spin in,
 * or 0 when the chain is not (or no longer) the wanted one. The command
 * handler stores helper_want before it bumps helper_gen. */
static unsigned int helper_enter(int mode)
{
	unsigned int gen = atomic_load(&helper_gen);

	if (atomic_load(&helper_want) != mode)
		return 0;
	atomic_store(&helper_in_gen, gen);
	return gen;
}

/* spin_c: the innermost frame; spins until the next chain command. GCC 12
 * gives a leaf function that uses no stack no frame even with
 * -fno-omit-frame-pointer (its caller would then be missing from the fp
 * chain): the volatile local gives spin_c a frame. */
HELPER_FN(spin_c) static void spin_c(int mode)
{
	unsigned int gen = helper_enter(mode);
	volatile unsigned long spins = 0;

	while (gen && atomic_load_explicit(&helper_gen, memory_order_relaxed) == gen)
		spins++;
	atomic_fetch_add(&helper_spins, spins);
}

HELPER_FN(spin_b) static void spin_b(int mode)
{
	spin_c(mode);
	helper_sink++; /* no tail call: keeps spin_b's frame */
}

/* The 40 KiB pattern makes the stack above spin_c deeper than one copy. */
HELPER_FN(spin_a) static void spin_a(void)
{
	volatile uint64_t pattern[HELPER_PATTERN_WORDS];

	for (unsigned int i = 0; i < HELPER_PATTERN_WORDS; i++)
		pattern[i] = STB_HELPER_PATTERN(i);
	atomic_store(&helper_pattern_addr, (uint64_t)(uintptr_t)pattern);
	spin_b(STB_HELPER_CMD_USER);
	helper_sink += pattern[0];
}

/* kspin_c: spins in read(2) of /dev/zero, issued by an inline syscall so that
 * the user ip stays inside kspin_c. */
HELPER_FN(kspin_c) static void kspin_c(void)
{
	unsigned int gen = helper_enter(STB_HELPER_CMD_KERNEL);
	volatile unsigned long spins = 0; /* gives kspin_c a frame, see spin_c */

	while (gen && atomic_load_explicit(&helper_gen, memory_order_relaxed) == gen) {
		long ret;

		__asm__ __volatile__("syscall"
				     : "=a"(ret)
				     : "0"((long)SYS_read), "D"((long)helper_zero_fd),
				       "S"(helper_read_buf), "d"((long)sizeof(helper_read_buf))
				     : "rcx", "r11", "memory");
		(void)ret;
		spins++;
	}
	atomic_fetch_add(&helper_spins, spins);
}

HELPER_FN(kspin_b) static void kspin_b(void)
{
	kspin_c();
	helper_sink++;
}

HELPER_FN(kspin_a) static void kspin_a(void)
{
	kspin_b();
	helper_sink++;
}

/* hole_a: a frame with one page dropped from memory (MADV_DONTNEED) that is
 * never touched again, so the stack copy must stop there. */
HELPER_FN(hole_a) static void hole_a(void)
{
	volatile unsigned char buf[HELPER_HOLE_BYTES];
	uintptr_t lo;

	for (unsigned int i = 0; i < HELPER_HOLE_BYTES; i += 512)
		buf[i] = (unsigned char)i;
	lo = ((uintptr_t)buf + 4095u + 4096u) & ~(uintptr_t)4095u;
	if (madvise((void *)lo, 4096, MADV_DONTNEED) != 0)
		lo = 0;
	atomic_store(&helper_hole_lo, (uint64_t)lo);
	spin_b(STB_HELPER_CMD_HOLE);
	helper_sink += buf[0];
}

static void *helper_worker_main(void *arg)
{
	struct stb_abi_worker *w = helper_worker(0);
	pid_t tid = (pid_t)syscall(SYS_gettid);

	(void)arg;
	w->tid = (__u32)tid;
	w->state = STB_WORKER_RUNNING;
	/* On its stack now: the worker names it (abi.h, "Running"). */
	__atomic_store_n(&w->current, STB_HELPER_ID_RUNNING, __ATOMIC_RELEASE);
	for (;;) {
		int want = atomic_load(&helper_want);

		if (want == STB_HELPER_CMD_QUIT)
			break;
		if (want == STB_HELPER_CMD_KERNEL)
			kspin_a();
		else if (want == STB_HELPER_CMD_HOLE)
			hole_a();
		else
			spin_a();
	}
	return NULL;
}

static int helper_write(const void *buf, size_t len)
{
	const unsigned char *p = buf;

	while (len) {
		ssize_t n = write(STDOUT_FILENO, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Switches the worker to chain cmd and waits until it spins there. */
static void helper_switch(int cmd)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = 100000 };
	unsigned int gen;

	atomic_store(&helper_want, cmd);
	gen = atomic_fetch_add(&helper_gen, 1) + 1;
	while (atomic_load(&helper_in_gen) != gen)
		nanosleep(&ts, NULL);
}

/* Creates the table; returns its fd (map or memfd) or -1. */
static int helper_table_create(enum stb_abi_backing backing, size_t size)
{
	int fd;

	if (backing == STB_ABI_BACKING_BPF_MAP) {
		union bpf_attr attr;

		memset(&attr, 0, sizeof(attr));
		attr.map_type = BPF_MAP_TYPE_ARRAY;
		attr.key_size = 4;
		attr.value_size = STB_ABI_ENTRY_SIZE;
		attr.max_entries = STB_ABI_TASK_BASE + STB_HELPER_CAPACITY;
		attr.map_flags = BPF_F_MMAPABLE;
		strncpy(attr.map_name, STB_ABI_TABLE_NAME, sizeof(attr.map_name) - 1);
		fd = (int)syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof(attr));
	} else {
		fd = memfd_create(STB_ABI_TABLE_NAME, MFD_CLOEXEC);
		if (fd >= 0 && ftruncate(fd, (off_t)size) != 0) {
			close(fd);
			fd = -1;
		}
	}
	return fd;
}

int main(int argc, char **argv)
{
	enum stb_abi_backing backing;
	struct stb_helper_info info;
	struct stb_helper_reply reply;
	struct stb_abi_header *h;
	struct stb_abi_task *t;
	pthread_attr_t attr;
	pthread_t thread;
	void *stack;
	size_t size;
	int fd;

	if (argc != 2 || (strcmp(argv[1], "map") != 0 && strcmp(argv[1], "memfd") != 0)) {
		fprintf(stderr, "usage: %s map|memfd\n", argv[0]);
		return 2;
	}
	helper_catch_signals();
	backing = strcmp(argv[1], "map") == 0 ? STB_ABI_BACKING_BPF_MAP : STB_ABI_BACKING_MEMFD;
	size = (STB_ABI_TABLE_SIZE(STB_HELPER_CAPACITY) + 4095u) & ~(size_t)4095u;
	fd = helper_table_create(backing, size);
	if (fd < 0) {
		perror("bpf_target_helper: table");
		return 1;
	}
	helper_table = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	helper_zero_fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	stack = mmap(NULL, HELPER_STACK_SIZE, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (helper_table == MAP_FAILED || stack == MAP_FAILED || helper_zero_fd < 0) {
		perror("bpf_target_helper: setup");
		return 1;
	}
	memset(helper_read_buf, 1, sizeof(helper_read_buf));

	/* Tasks: one RUNNING on worker 0, one SUSPENDED. */
	t = helper_task(STB_HELPER_SLOT_RUNNING);
	t->id = STB_HELPER_ID_RUNNING;
	t->stack_lo = (__u64)(uintptr_t)stack;
	t->stack_hi = (__u64)(uintptr_t)stack + HELPER_STACK_SIZE;
	strcpy(t->name, "spinner");
	/* Ready, and worker 0 switching to it until its thread runs. */
	t->word = (1ull << 32) | STB_TASK_READY;
	helper_worker(0)->current = STB_HELPER_ID_RUNNING | STB_ABI_CURRENT_SWITCHING;
	t = helper_task(STB_HELPER_SLOT_SUSPENDED);
	t->id = STB_HELPER_ID_SUSPENDED;
	t->stack_lo = 0x1000;
	t->stack_hi = 0x2000;
	strcpy(t->name, "sleeper");
	t->word = (4ull << 32) | STB_TASK_SUSPENDED;

	h = (struct stb_abi_header *)helper_table;
	h->abi_version = STB_ABI_VERSION;
	h->entry_size = STB_ABI_ENTRY_SIZE;
	h->header_entries = STB_ABI_HEADER_ENTRIES;
	h->max_workers = STB_ABI_MAX_WORKERS;
	h->task_capacity = STB_HELPER_CAPACITY;
	h->nworkers = 1;
	h->pid = (__u32)getpid();
	h->backing = backing;
	h->table_addr = (__u64)(uintptr_t)helper_table;
	h->table_size = STB_ABI_TABLE_SIZE(STB_HELPER_CAPACITY);
	h->slot_hwm = STB_HELPER_SLOT_SUSPENDED + 1;
	__atomic_store_n(&h->magic, STB_ABI_MAGIC, __ATOMIC_RELEASE);

	if (pthread_attr_init(&attr) != 0 ||
	    pthread_attr_setstack(&attr, stack, HELPER_STACK_SIZE) != 0 ||
	    pthread_create(&thread, &attr, helper_worker_main, NULL) != 0) {
		fprintf(stderr, "bpf_target_helper: cannot start the worker\n");
		return 1;
	}
	helper_switch(STB_HELPER_CMD_USER);

	memset(&info, 0, sizeof(info));
	info.magic = STB_HELPER_MAGIC;
	info.pid = (__s32)getpid();
	info.tid = (__s32)helper_worker(0)->tid;
	info.table_fd = backing == STB_ABI_BACKING_BPF_MAP ? fd : -1;
	info.backing = backing;
	info.table_addr = h->table_addr;
	info.table_size = h->table_size;
	info.stack_lo = (__u64)(uintptr_t)stack;
	info.stack_hi = (__u64)(uintptr_t)stack + HELPER_STACK_SIZE;
#define HELPER_SET_FN(idx, name)                                                  \
	do {                                                                       \
		info.fn[idx][0] = (__u64)(uintptr_t)__start_stb_fn_##name;         \
		info.fn[idx][1] = (__u64)(uintptr_t)__stop_stb_fn_##name;          \
	} while (0)
	HELPER_SET_FN(STB_HELPER_FN_SPIN_A, spin_a);
	HELPER_SET_FN(STB_HELPER_FN_SPIN_B, spin_b);
	HELPER_SET_FN(STB_HELPER_FN_SPIN_C, spin_c);
	HELPER_SET_FN(STB_HELPER_FN_KSPIN_A, kspin_a);
	HELPER_SET_FN(STB_HELPER_FN_KSPIN_B, kspin_b);
	HELPER_SET_FN(STB_HELPER_FN_KSPIN_C, kspin_c);
	HELPER_SET_FN(STB_HELPER_FN_HOLE_A, hole_a);
#undef HELPER_SET_FN
	if (helper_write(&info, sizeof(info)) != 0)
		return 1;

	for (;;) {
		unsigned char cmd;
		ssize_t n = read(STDIN_FILENO, &cmd, 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			cmd = STB_HELPER_CMD_QUIT; /* the test went away */
		memset(&reply, 0, sizeof(reply));
		reply.magic = STB_HELPER_MAGIC;
		reply.cmd = cmd;
		switch (cmd) {
		case STB_HELPER_CMD_USER:
		case STB_HELPER_CMD_KERNEL:
		case STB_HELPER_CMD_HOLE:
			atomic_store(&helper_pattern_addr, 0);
			atomic_store(&helper_hole_lo, 0);
			helper_switch(cmd);
			reply.pattern_addr = atomic_load(&helper_pattern_addr);
			reply.pattern_len = reply.pattern_addr ? HELPER_PATTERN_WORDS * 8u : 0;
			reply.hole_lo = atomic_load(&helper_hole_lo);
			reply.hole_hi = reply.hole_lo ? reply.hole_lo + 4096u : 0;
			break;
		case STB_HELPER_CMD_READY:
			/* Queued: no worker names it (its word says READY anyway). */
			__atomic_store_n(&helper_worker(0)->current, 0, __ATOMIC_RELEASE);
			break;
		case STB_HELPER_CMD_RUNNING:
			__atomic_store_n(&helper_worker(0)->current, STB_HELPER_ID_RUNNING,
					 __ATOMIC_RELEASE);
			break;
		case STB_HELPER_CMD_QUIT:
			atomic_store(&helper_want, STB_HELPER_CMD_QUIT);
			atomic_fetch_add(&helper_gen, 1);
			pthread_join(thread, NULL);
			reply.signals = atomic_load(&helper_signals);
			reply.spins = atomic_load(&helper_spins);
			helper_write(&reply, sizeof(reply));
			return 0;
		default:
			fprintf(stderr, "bpf_target_helper: unknown command %d\n", cmd);
			return 1;
		}
		if (helper_write(&reply, sizeof(reply)) != 0)
			return 1;
	}
}
