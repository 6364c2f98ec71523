/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Micro benchmark of runtime/stacks/unwind/unwind.c and runtime/stacks/symbols/symbolize.c: DWARF and
 * frame-pointer walks of a captured stack (10 and 64 frames deep, full and
 * depth-limited, with and without an explicit budget), through the pid-0
 * path and the remote path (the process treated as another one), and
 * symbolization cold vs cached, with its own registry or the unwinder's.
 * Usage: bench_unwind [iterations]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "symbols/symbolize.h"
#include "unwind/unwind.h"
#include "util.h"

#define BENCH_STACK (1024u * 1024)
#define BENCH_REPEAT 5

struct bench_capture {
	unsigned depth;
	struct stb_regs regs;
	uint64_t stack_hi;
	uint8_t *copy;
	size_t len;
};

static volatile int bench_sink;

int bench_rec(struct bench_capture *c, unsigned n);
void *bench_thread(void *arg);

STB_NOINLINE_NOCLONE int bench_rec(struct bench_capture *c, unsigned n)
{
	if (n > 0) {
		int r = bench_rec(c, n - 1);
		bench_sink = r;
		return r + 1;
	}
	__asm__ volatile("lea 0(%%rip), %%rax\n\t"
			 "mov %%rax, 0(%0)\n\t"
			 "mov %%rsp, 8(%0)\n\t"
			 "mov %%rbp, 16(%0)\n\t"
			 "mov %%rbx, 24(%0)\n\t"
			 "mov %%r12, 32(%0)\n\t"
			 "mov %%r13, 40(%0)\n\t"
			 "mov %%r14, 48(%0)\n\t"
			 "mov %%r15, 56(%0)\n\t"
			 :
			 : "r"(&c->regs)
			 : "rax", "memory");
	c->len = c->stack_hi - c->regs.sp;
	c->copy = malloc(c->len);
	if (c->copy)
		stb_unw_copy_raw(c->copy, (const void *)(uintptr_t)c->regs.sp, c->len);
	return bench_sink;
}

STB_NOINLINE_NOCLONE void *bench_thread(void *arg)
{
	struct bench_capture *c = arg;
	bench_sink = bench_rec(c, c->depth - 1); /* frames: depth x bench_rec */
	return NULL;
}

static int bench_capture(struct bench_capture *c, unsigned depth)
{
	pthread_attr_t a;
	pthread_t t;
	void *stack = mmap(NULL, BENCH_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (stack == MAP_FAILED)
		return -1;
	memset(c, 0, sizeof(*c));
	c->depth = depth;
	c->stack_hi = (uint64_t)(uintptr_t)stack + BENCH_STACK;
	if (pthread_attr_init(&a) || pthread_attr_setstack(&a, stack, BENCH_STACK) ||
	    pthread_create(&t, &a, bench_thread, c) || pthread_join(t, NULL))
		return -1;
	pthread_attr_destroy(&a);
	munmap(stack, BENCH_STACK);
	return c->copy ? 0 : -1;
}

static int bench_count(const struct stb_unw_frame *f, void *arg)
{
	(void)f;
	(*(unsigned *)arg)++;
	return 0;
}

typedef int (*bench_walk_fn)(struct stb_unw_proc *, const struct stb_regs *, const struct stb_stack_copy *,
			     unsigned, unsigned, stb_unw_frame_fn, void *);

/* stb_unw_walk with an explicit budget: a deadline 1 s ahead (one clock
 * read per walk besides the walk's own checks). */
static int bench_walk_budget(struct stb_unw_proc *p, const struct stb_regs *regs,
			     const struct stb_stack_copy *copy, unsigned skip, unsigned max_depth,
			     stb_unw_frame_fn fn, void *arg)
{
	struct stb_unw_budget b = { .max_frames = max_depth,
				    .deadline_ns = stb_now_ns() + 1000ull * 1000 * 1000 };
	return stb_unw_walk_budget(p, regs, copy, skip, &b, fn, arg, NULL);
}

static int bench_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Median over BENCH_REPEAT runs of the ns per walk. */
static double bench_walk(const char *what, bench_walk_fn walk, struct stb_unw_proc *p,
			 const struct bench_capture *c, unsigned max_depth, unsigned iters)
{
	struct stb_stack_copy copy = { .addr = c->regs.sp, .bytes = c->copy, .len = c->len };
	double r[BENCH_REPEAT];
	unsigned frames = 0;

	walk(p, &c->regs, &copy, 0, max_depth, bench_count, &frames); /* warm up */
	for (int k = 0; k < BENCH_REPEAT; k++) {
		uint64_t t0 = stb_now_ns();
		for (unsigned i = 0; i < iters; i++) {
			frames = 0;
			walk(p, &c->regs, &copy, 0, max_depth, bench_count, &frames);
		}
		r[k] = (double)(stb_now_ns() - t0) / iters;
	}
	qsort(r, BENCH_REPEAT, sizeof(r[0]), bench_cmp);
	printf("%-44s %3u frames %9.0f ns/walk %7.0f ns/frame\n", what, frames, r[BENCH_REPEAT / 2],
	       r[BENCH_REPEAT / 2] / frames);
	return r[BENCH_REPEAT / 2];
}

static void bench_walks(const char *label, struct stb_unw_proc *p, const struct bench_capture *c10,
			const struct bench_capture *c64, unsigned iters)
{
	char what[96];

	snprintf(what, sizeof(what), "%s dwarf 10 of 10-deep", label);
	bench_walk(what, stb_unw_walk, p, c10, 10, iters);
	snprintf(what, sizeof(what), "%s dwarf 10 of 10, budget+deadline", label);
	bench_walk(what, bench_walk_budget, p, c10, 10, iters);
	snprintf(what, sizeof(what), "%s dwarf 4 of 64-deep", label);
	double d4 = bench_walk(what, stb_unw_walk, p, c64, 4, iters);
	snprintf(what, sizeof(what), "%s dwarf 64 of 64-deep", label);
	double d64 = bench_walk(what, stb_unw_walk, p, c64, 64, iters / 4 + 1);
	printf("%-44s %.3f (must be <= 0.25)\n", "  ratio 4-of-64 / 64-of-64", d4 / d64);
	struct bench_capture lu = *c10;
	lu.regs.flags |= STB_UNW_LIBUNWIND_ONLY;
	snprintf(what, sizeof(what), "%s libunwind-only 10 of 10-deep", label);
	bench_walk(what, stb_unw_walk, p, &lu, 10, iters / 10 + 1);
	snprintf(what, sizeof(what), "%s fp 10 of 10-deep", label);
	bench_walk(what, stb_unw_walk_fp, p, c10, 10, iters);
	snprintf(what, sizeof(what), "%s fp 4 of 64-deep", label);
	bench_walk(what, stb_unw_walk_fp, p, c64, 4, iters);
	snprintf(what, sizeof(what), "%s fp 64 of 64-deep", label);
	bench_walk(what, stb_unw_walk_fp, p, c64, 64, iters);
}

struct bench_ips {
	unsigned n;
	uint64_t ip[80];
};

static int bench_collect(const struct stb_unw_frame *f, void *arg)
{
	struct bench_ips *b = arg;
	if (b->n < 80)
		b->ip[b->n++] = f->ip;
	return 0;
}

static void bench_symbolize(struct stb_unw_proc *p, const struct bench_capture *c, unsigned iters)
{
	struct stb_stack_copy copy = { .addr = c->regs.sp, .bytes = c->copy, .len = c->len };
	struct bench_ips ips = { 0 };
	struct stb_sym_info info;
	uint64_t t0;

	stb_unw_walk(p, &c->regs, &copy, 0, 0, bench_collect, &ips);
	t0 = stb_now_ns();
	struct stb_sym *s = stb_sym_new(0);
	if (!s)
		return;
	double t_new = (double)(stb_now_ns() - t0);
	t0 = stb_now_ns();
	for (unsigned i = 0; i < ips.n; i++)
		stb_sym_lookup(s, ips.ip[i], i > 0, &info);
	double t_cold = (double)(stb_now_ns() - t0);
	/* New addresses in modules already loaded. */
	unsigned n = 0;
	t0 = stb_now_ns();
	for (unsigned k = 1; k <= 16; k++)
		for (unsigned i = 0; i < ips.n; i++, n++)
			stb_sym_lookup(s, ips.ip[i] + k, 0, &info);
	double t_addr = (double)(stb_now_ns() - t0) / n;
	t0 = stb_now_ns();
	for (unsigned j = 0; j < iters; j++)
		for (unsigned i = 0; i < ips.n; i++)
			stb_sym_lookup(s, ips.ip[i], i > 0, &info);
	double t_hit = (double)(stb_now_ns() - t0) / ((double)iters * ips.n);
	printf("symbolize: stb_sym_new %.0f us; first %u lookups (modules cold) %.0f us total; "
	       "new address in a loaded module %.2f us; cached %.0f ns\n",
	       t_new / 1000, ips.n, t_cold / 1000, t_addr / 1000, t_hit);
	stb_sym_free(s);
	/* On the unwinder's registry: no scan of its own. */
	t0 = stb_now_ns();
	s = stb_sym_new_mods(stb_unw_proc_mods(p));
	if (s)
		printf("symbolize: stb_sym_new_mods on the unwinder's registry %.0f us\n",
		       (double)(stb_now_ns() - t0) / 1000);
	stb_sym_free(s);
}

int main(int argc, char **argv)
{
	unsigned iters = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 0) : 20000;
	struct bench_capture c10, c64;
	struct stb_unw_proc *self, *remote;

	if (bench_capture(&c10, 10) < 0 || bench_capture(&c64, 64) < 0) {
		fprintf(stderr, "capture failed\n");
		return 1;
	}
	uint64_t t0 = stb_now_ns();
	self = stb_unw_proc_new(0);
	double t_self = (double)(stb_now_ns() - t0);
	t0 = stb_now_ns();
	remote = stb_unw_proc_new(getpid());
	double t_remote = (double)(stb_now_ns() - t0);
	if (!self || !remote) {
		perror("stb_unw_proc_new");
		return 1;
	}
	printf("stb_unw_proc_new: pid 0 %.0f us, remote path %.0f us\n", t_self / 1000, t_remote / 1000);
	/* First walks on fresh procs: every rule computed from the CFI. */
	struct stb_stack_copy copy10 = { .addr = c10.regs.sp, .bytes = c10.copy, .len = c10.len };
	unsigned nf = 0;
	struct stb_unw_proc *fresh = stb_unw_proc_new(0);
	if (fresh) {
		t0 = stb_now_ns();
		stb_unw_walk(fresh, &c10.regs, &copy10, 0, 10, bench_count, &nf);
		printf("first walk on a fresh proc (rules cold): %u frames %.1f us\n", nf,
		       (double)(stb_now_ns() - t0) / 1000);
		stb_unw_proc_free(fresh);
	}
	bench_walks("pid0  ", self, &c10, &c64, iters);
	bench_walks("remote", remote, &c10, &c64, iters / 4 + 1);
	bench_symbolize(self, &c10, iters / 10 + 1);
	stb_unw_proc_free(self);
	stb_unw_proc_free(remote);
	free(c10.copy);
	free(c64.copy);
	return 0;
}
