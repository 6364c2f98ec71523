/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Target process of test_formats and test_profile (traced by stb-bpf-loader):
 * bthreads parked in known call chains. "chains": 5 in fmt_a1 > fmt_a2 >
 * fmt_a3, 3 in fmt_b1 > fmt_b2 (waiting on a butex) and one spinning in
 * spin_outer > spin_leaf; "profile": one spinning in hot(), 100 sleeping in
 * cold(); "flip": the chains' bthreads parked, and one that sleeps 70 ms in
 * flip_a, then 70 ms in flip_b, and so on (continuous mode must see it move).
 * Prints "ready", the ids and (chains) the reference folded lines of the
 * chains on stdout, runs until stdin closes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>
#include <stb/stb.h>

#include "fmt_chains.h"

#define STB_NO_TAIL() __asm__ volatile("" ::: "memory")

#define NA 5
#define NB 3
#define NCOLD 100

static volatile uint64_t sink;

STB_NOIPA static void spin_leaf(void)
{
	while (!__atomic_load_n(&fmt_stop, __ATOMIC_ACQUIRE))
		sink = sink * 31 + 7;
	STB_NO_TAIL();
}

STB_NOIPA static void *spin_outer(void *arg)
{
	(void)arg;
	spin_leaf();
	STB_NO_TAIL();
	return NULL;
}

STB_NOIPA static void hot_work(void)
{
	for (int i = 0; i < 1000; i++)
		sink = sink * 31 + (uint64_t)i;
	STB_NO_TAIL();
}

STB_NOIPA static void *hot(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&fmt_stop, __ATOMIC_ACQUIRE))
		hot_work();
	STB_NO_TAIL();
	return NULL;
}

STB_NOIPA static void *cold(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&fmt_stop, __ATOMIC_ACQUIRE))
		bthread_usleep(3600u * 1000000u);
	STB_NO_TAIL();
	return NULL;
}

/*
 * The folded line (without the count) that the stack of suspended task id
 * must give: "suspended;" and the frames of the in-process tracer with inline
 * frames, root first. An independent reference for the loader's folded
 * output (another symbolization path, another writer).
 */
STB_NOIPA static void flip_a(void)
{
	bthread_usleep(70000);
	STB_NO_TAIL();
}

STB_NOIPA static void flip_b(void)
{
	bthread_usleep(70000);
	STB_NO_TAIL();
}

STB_NOIPA static void *flip(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&fmt_stop, __ATOMIC_ACQUIRE)) {
		flip_a();
		flip_b();
	}
	return NULL;
}

static void folded_reference(bthread_t id, char *buf, size_t size)
{
	struct stb_frame f[64];
	struct stb_trace_opts o = {.max_depth = 64, .inline_frames = 1, .runtime_frames = 1};
	struct stb_trace_info info;
	int n = stb_trace(id, &o, f, 64, &info);
	size_t len = (size_t)snprintf(buf, size, "%s", stb_state_name(info.state));
	for (int i = n - 1; i >= 0 && len < size; i--)
		len += (size_t)snprintf(buf + len, size - len, ";%s", f[i].symbol ? f[i].symbol : "?");
}

static bthread_t start(void *(*fn)(void *), const char *name)
{
	bthread_attr_t attr;
	bthread_t id;
	bthread_attr_init(&attr);
	bthread_attr_set_name(&attr, name);
	int rc = bthread_start_background(&id, &attr, fn, NULL);
	bthread_attr_destroy(&attr);
	if (rc != 0) {
		fprintf(stderr, "profile_target: bthread_start_background: %s\n", strerror(rc));
		exit(1);
	}
	return id;
}

int main(int argc, char **argv)
{
	if (argc != 2 || (strcmp(argv[1], "chains") != 0 && strcmp(argv[1], "profile") != 0 &&
			  strcmp(argv[1], "flip") != 0)) {
		fprintf(stderr, "usage: profile_target chains|profile|flip\n");
		return 64;
	}
	fmt_gate = butex_create();
	if (!fmt_gate)
		return 1;
	if (strcmp(argv[1], "chains") == 0) {
		bthread_t a[NA], b[NB];
		for (int i = 0; i < NA; i++)
			a[i] = start(fmt_a1, "chain-a");
		for (int i = 0; i < NB; i++)
			b[i] = start(fmt_b1, "chain-b");
		bthread_t s = start(spin_outer, "spinner");
		usleep(200000); /* all of them parked or spinning */
		printf("ready a=");
		for (int i = 0; i < NA; i++)
			printf("%s%" PRIu64, i ? "," : "", (uint64_t)a[i]);
		printf(" b=");
		for (int i = 0; i < NB; i++)
			printf("%s%" PRIu64, i ? "," : "", (uint64_t)b[i]);
		char fa[2048], fb[2048];
		folded_reference(a[0], fa, sizeof(fa));
		folded_reference(b[0], fb, sizeof(fb));
		printf(" spin=%" PRIu64 " fold_a=%s fold_b=%s\n", (uint64_t)s, fa, fb);
	} else if (strcmp(argv[1], "flip") == 0) {
		for (int i = 0; i < NA; i++)
			start(fmt_a1, "chain-a");
		bthread_t f = start(flip, "flip");
		usleep(200000);
		printf("ready flip=%" PRIu64 "\n", (uint64_t)f);
	} else {
		bthread_t h = start(hot, "hot");
		for (int i = 0; i < NCOLD; i++)
			start(cold, "cold");
		usleep(200000);
		printf("ready hot=%" PRIu64 " cold=%d\n", (uint64_t)h, NCOLD);
	}
	fflush(stdout);
	for (;;) {
		char c;
		ssize_t r = read(STDIN_FILENO, &c, 1);
		if (r == 0 || (r < 0 && errno != EINTR))
			break;
	}
	fmt_chains_release();
	return 0;
}
