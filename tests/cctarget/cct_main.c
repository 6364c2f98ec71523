/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The compiler-variant target of test_cc_targets, built by CMake with the
 * compiler and flags of each variant (clang and gcc, DWARF 4 and 5, -O0 and
 * -O2, with and without frame pointers, PIE or not): bthreads parked in
 * known chains (C with an inlined function, C++, through a shared library)
 * and one spinning, ids on stdout (the protocol of tests/support/ltarget.h),
 * and in-process dumps on command:
 *   dump FORMAT FILE   stb_dump with file:line (text, json, pprof, folded) -> "dumped N"
 *   quit               ends every chain -> "bye"
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>
#include <stb/abi.h>
#include <stb/stb.h>

#include "cct.h"

/* Exported by libbthread (docs/abi.md); not in a public header. */
extern struct stb_abi_header *stb_task_table;

volatile int cct_sink;
static int *cct_quit_butex; /* 0 until quit */
static atomic_int cct_stop;
static atomic_ullong cct_spins;

/* ---- the chains: each marked position is what a trace must show ---- */

CCT_FN void cct_park(void)
{
	while (__atomic_load_n(cct_quit_butex, __ATOMIC_ACQUIRE) == 0)
		butex_wait(cct_quit_butex, 0, NULL); /* @cct:park */
}

CCT_FN void cct_c_leaf(void)
{
	cct_park(); /* @cct:c_leaf */
	CCT_NO_TAIL();
}

CCT_INLINE void cct_c_inl(int n)
{
	if (n)
		cct_c_leaf(); /* @cct:c_inl */
	cct_sink = cct_sink + n;
}

CCT_FN void cct_c_mid(int n)
{
	cct_c_inl(n); /* @cct:c_mid */
	CCT_NO_TAIL();
}

CCT_FN void *cct_c_task(void *arg)
{
	cct_c_mid(1); /* @cct:c_task */
	CCT_NO_TAIL();
	return arg;
}

CCT_FN void *cct_lib_task(void *arg)
{
	cct_lib_entry(cct_park); /* @cct:lib_task */
	CCT_NO_TAIL();
	return arg;
}

CCT_FN void cct_spin_loop(void)
{
	while (!atomic_load_explicit(&cct_stop, memory_order_acquire)) /* @cct:spin_lo */
		atomic_fetch_add_explicit(&cct_spins, 1, memory_order_relaxed); /* @cct:spin_hi */
}

CCT_INLINE void cct_spin_inl(void)
{
	cct_spin_loop(); /* @cct:spin_inl */
	CCT_NO_TAIL();
}

CCT_FN void *cct_spin_task(void *arg)
{
	cct_spin_inl(); /* @cct:spin_task */
	CCT_NO_TAIL();
	return arg;
}

/* Never called: --gc-sections drops it (the gc variant), and the linker
 * leaves the ranges its DWARF gives at 0. */
__attribute__((noinline)) int cct_unused(int n)
{
	for (int i = 0; i < n; i++)
		cct_c_inl(i);
	return cct_sink;
}

/* ---- main ---- */

static unsigned cct_state(bthread_t id)
{
	struct stb_abi_header *h = __atomic_load_n(&stb_task_table, __ATOMIC_ACQUIRE);
	uint32_t slot = STB_ABI_SLOT(id);
	if (!h || slot >= h->task_capacity)
		return STB_TASK_DESTROYED;
	struct stb_abi_task *p = (struct stb_abi_task *)((char *)h + STB_ABI_TASK_OFFSET(slot));
	if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id)
		return STB_TASK_DESTROYED;
	return STB_ABI_STATE(__atomic_load_n(&p->word, __ATOMIC_ACQUIRE));
}

static void cct_sleep_ms(unsigned ms)
{
	struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000l};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* "dump FORMAT FILE": the in-process report (file:line is the default). */
static void cct_dump(const char *args)
{
	char fmt[16], path[512];
	if (sscanf(args, "%15s %511s", fmt, path) != 2 || stb_format_from_name(fmt) < 0) {
		printf("error usage: dump FORMAT FILE\n");
		return;
	}
	FILE *f = fopen(path, "w");
	if (!f) {
		printf("error %s: %s\n", path, strerror(errno));
		return;
	}
	struct stb_dump_opts o = {.format = stb_format_from_name(fmt)};
	int n = stb_dump(f, &o);
	if (fclose(f) != 0 && n >= 0)
		n = -errno;
	if (n < 0)
		printf("error stb_dump: %s\n", strerror(-n));
	else
		printf("dumped %d\n", n);
}

int main(void)
{
	static const struct {
		const char *name;
		void *(*fn)(void *);
		bool parks;
	} chains[] = {
		{"c", cct_c_task, true},
		{"cxx", cct_cxx_task, true},
		{"lib", cct_lib_task, true},
		{"spin", cct_spin_task, false},
	};
	enum { NCHAINS = sizeof(chains) / sizeof(chains[0]) };
	bthread_t ids[NCHAINS];
	char line[1024];

	setvbuf(stdout, NULL, _IOLBF, 0);
	/* A loaded 2-CPU machine must not time the spinner's capture out. */
	if (stb_set_signal_trace_timeout_ms(5000) != 0) {
		fprintf(stderr, "cct: stb_set_signal_trace_timeout_ms failed\n");
		return 1;
	}
	cct_quit_butex = butex_create();
	if (!cct_quit_butex) {
		fprintf(stderr, "cct: butex_create failed\n");
		return 1;
	}
	*cct_quit_butex = 0;
	for (unsigned i = 0; i < NCHAINS; i++) {
		if (bthread_start_background(&ids[i], NULL, chains[i].fn, NULL) != 0) {
			fprintf(stderr, "cct: bthread_start_background failed\n");
			return 1;
		}
	}
	/* Ready once every parking chain is suspended and the spinner spins. */
	for (unsigned waited = 0;; waited += 2) {
		bool ok = atomic_load(&cct_spins) > 0;
		for (unsigned i = 0; i < NCHAINS && ok; i++)
			ok = !chains[i].parks || cct_state(ids[i]) == STB_TASK_SUSPENDED;
		if (ok)
			break;
		if (waited > 20000) {
			fprintf(stderr, "cct: the chains did not settle within 20 s\n");
			return 1;
		}
		cct_sleep_ms(2);
	}
	printf("pid %d\n", (int)getpid());
	for (unsigned i = 0; i < NCHAINS; i++)
		printf("ids %s %llu\n", chains[i].name, (unsigned long long)ids[i]);
	printf("ready\n");
	while (fgets(line, sizeof(line), stdin)) {
		line[strcspn(line, "\n")] = '\0';
		if (strncmp(line, "dump ", 5) == 0) {
			cct_dump(line + 5);
		} else if (strcmp(line, "quit") == 0) {
			break;
		} else {
			printf("error unknown command: %s\n", line);
		}
	}
	atomic_store(&cct_stop, 1);
	__atomic_store_n(cct_quit_butex, 1, __ATOMIC_RELEASE);
	butex_wake_all(cct_quit_butex);
	for (unsigned i = 0; i < NCHAINS; i++)
		bthread_join(ids[i], NULL);
	butex_destroy(cct_quit_butex);
	printf("bye\n");
	return 0;
}
