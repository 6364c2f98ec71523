/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests of runtime/stacks/symbols/walkmemo.c: a remembered walk replayed for a copy
 * of the same stack elsewhere (whole pages away, or at another offset in its
 * page, as colored stacks are), and never for a copy that differs in what the
 * walk read (every word of a real stack changed in turn), other registers,
 * another module table, libunwind's steps, sinks and copies it must not
 * serve, its memory cap and giving up.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "symbols/frames.h"
#include "symbols/symbolize.h"
#include "symbols/walkmemo.h"
#include "unw_capture.h"
#include "unwind/modules.h"
#include "unwind/unwind.h"
#include "util.h"

#define WM_STACK (256u * 1024)
#define WM_MAXF 64
/* Where the moved copies are said to lie: 16 pages above the real one. */
#define WM_DELTA (16u * 4096)

struct wm_capture {
	struct stb_regs regs;
	uint64_t stack_hi;
	uint8_t *copy; /* [regs.sp, stack_hi) */
	size_t len;
};

int wm_f1(struct wm_capture *c, int x);
int wm_f2(struct wm_capture *c, int x);
int wm_f3(struct wm_capture *c, int x);

static volatile int wm_sink;

STB_NOINLINE_NOCLONE int wm_f3(struct wm_capture *c, int x)
{
	UNW_TEST_CAPTURE(&c->regs);
	c->len = c->stack_hi - c->regs.sp;
	c->copy = malloc(c->len);
	if (c->copy)
		memcpy(c->copy, (const void *)(uintptr_t)c->regs.sp, c->len);
	wm_sink = x;
	return x + 1;
}

STB_NOINLINE_NOCLONE int wm_f2(struct wm_capture *c, int x)
{
	int r = wm_f3(c, x + 1);
	wm_sink = r;
	return r + 2;
}

STB_NOINLINE_NOCLONE int wm_f1(struct wm_capture *c, int x)
{
	int r = wm_f2(c, x + 1);
	wm_sink = r;
	return r + 3;
}

static void *wm_runner(void *arg)
{
	wm_sink = wm_f1(arg, 1);
	return NULL;
}

/* The chain's stack on a thread of its own, copied when it was deepest. */
static void wm_capture_chain(struct wm_capture *c)
{
	pthread_attr_t a;
	pthread_t t;
	void *stack = mmap(NULL, WM_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(stack != MAP_FAILED);
	memset(c, 0, sizeof(*c));
	c->stack_hi = (uint64_t)(uintptr_t)stack + WM_STACK;
	assert_int_equal(pthread_attr_init(&a), 0);
	assert_int_equal(pthread_attr_setstack(&a, stack, WM_STACK), 0);
	assert_int_equal(pthread_create(&t, &a, wm_runner, c), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	pthread_attr_destroy(&a);
	munmap(stack, WM_STACK);
	assert_non_null(c->copy);
	assert_int_equal(c->len & 7, 0);
	assert_true(c->len <= STB_WALKMEMO_MAX_COPY);
}

/* A stack and its registers as a snapshot has them. */
struct wm_stack {
	struct stb_regs regs;
	struct stb_stack_copy copy;
	uint64_t *words;
};

static uint64_t wm_move(uint64_t w, uint64_t from, uint64_t len, uint64_t delta)
{
	return w - from <= len ? w + delta : w;
}

/* c's stack as if it lay delta bytes higher: every word and register that
 * points into it moved along. */
static void wm_stack_at(struct wm_stack *s, const struct wm_capture *c, uint64_t delta)
{
	uint64_t from = c->regs.sp, len = c->len;
	s->words = malloc(len);
	assert_non_null(s->words);
	memcpy(s->words, c->copy, len);
	for (size_t i = 0; i < len / 8; i++)
		s->words[i] = wm_move(s->words[i], from, len, delta);
	s->regs = c->regs;
	s->regs.sp = wm_move(c->regs.sp, from, len, delta);
	s->regs.bp = wm_move(c->regs.bp, from, len, delta);
	s->regs.bx = wm_move(c->regs.bx, from, len, delta);
	s->regs.r12 = wm_move(c->regs.r12, from, len, delta);
	s->regs.r13 = wm_move(c->regs.r13, from, len, delta);
	s->regs.r14 = wm_move(c->regs.r14, from, len, delta);
	s->regs.r15 = wm_move(c->regs.r15, from, len, delta);
	s->copy = (struct stb_stack_copy){.addr = from + delta, .bytes = s->words, .len = len};
}

struct wm_walk {
	struct stb_frame f[WM_MAXF];
	struct stb_frame_sink sink;
	int rc;
};

static void wm_walk(struct wm_walk *w, struct stb_walkmemo *m, struct stb_unw_proc *unw,
		    const struct wm_stack *s, unsigned max)
{
	memset(w, 0, sizeof(*w));
	w->sink = (struct stb_frame_sink){.frames = w->f, .nframes = WM_MAXF, .max = max};
	w->rc = stb_walkmemo_walk(m, unw, &s->regs, &s->copy, &w->sink);
}

/* The same result, frame for frame (ip, sp, flags). */
static bool wm_same(const struct wm_walk *a, const struct wm_walk *b)
{
	if (a->rc != b->rc || a->sink.n != b->sink.n || a->sink.phys != b->sink.phys ||
	    a->sink.truncated != b->sink.truncated)
		return false;
	for (unsigned i = 0; i < a->sink.n && i < WM_MAXF; i++)
		if (a->f[i].ip != b->f[i].ip || a->f[i].sp != b->f[i].sp ||
		    a->f[i].flags != b->f[i].flags)
			return false;
	return true;
}

static void assert_same(const struct wm_walk *a, const struct wm_walk *b)
{
	if (!wm_same(a, b)) {
		fprintf(stderr, "rc %d/%d n %u/%u phys %u/%u truncated %d/%d\n", a->rc, b->rc,
			a->sink.n, b->sink.n, a->sink.phys, b->sink.phys, a->sink.truncated,
			b->sink.truncated);
		for (unsigned i = 0; i < WM_MAXF && (i < a->sink.n || i < b->sink.n); i++)
			fprintf(stderr, "  #%u %#lx sp %#lx | %#lx sp %#lx\n", i,
				(unsigned long)a->f[i].ip, (unsigned long)a->f[i].sp,
				(unsigned long)b->f[i].ip, (unsigned long)b->f[i].sp);
		fail_msg("the remembered walk differs from the walk");
	}
}

struct wm_fixture {
	struct wm_capture c;
	struct wm_stack here, moved;
	struct stb_unw_proc *unw;
};

static int wm_setup(void **state)
{
	struct wm_fixture *fx = calloc(1, sizeof(*fx));
	assert_non_null(fx);
	wm_capture_chain(&fx->c);
	wm_stack_at(&fx->here, &fx->c, 0);
	wm_stack_at(&fx->moved, &fx->c, WM_DELTA);
	fx->unw = stb_unw_proc_new(0);
	assert_non_null(fx->unw);
	*state = fx;
	return 0;
}

static int wm_teardown(void **state)
{
	struct wm_fixture *fx = *state;
	stb_unw_proc_free(fx->unw);
	free(fx->here.words);
	free(fx->moved.words);
	free(fx->c.copy);
	free(fx);
	return 0;
}

/* The walk of our own frames, cut at 4 of them: f3, f2, f1, wm_runner. */
#define WM_OWN 4u

/* A second copy of the same stack elsewhere is answered without a walk, with
 * the frames its own walk gives (stack pointers moved). */
static void test_replay_moved(void **state)
{
	struct wm_fixture *fx = *state;
	struct stb_walkmemo *m = stb_walkmemo_new(0);
	assert_non_null(m);
	struct wm_walk first, plain, memo;
	wm_walk(&first, m, fx->unw, &fx->here, WM_OWN);
	assert_int_equal(first.sink.n, WM_OWN);
	assert_true(first.sink.truncated);
	assert_int_equal(first.f[0].ip, fx->c.regs.ip);
	struct stb_walkmemo_stats st = stb_walkmemo_stats(m);
	assert_int_equal(st.lookups, 1);
	assert_int_equal(st.hits, 0);
	assert_int_equal(st.stored, 1);
	assert_true(st.bytes > 0);

	wm_walk(&plain, NULL, fx->unw, &fx->moved, WM_OWN);
	wm_walk(&memo, m, fx->unw, &fx->moved, WM_OWN);
	st = stb_walkmemo_stats(m);
	assert_int_equal(st.lookups, 2);
	assert_int_equal(st.hits, 1);
	assert_same(&plain, &memo);
	for (unsigned i = 0; i < WM_OWN; i++) {
		assert_int_equal(memo.f[i].ip, first.f[i].ip);
		assert_int_equal(memo.f[i].sp, first.f[i].sp + WM_DELTA);
	}
	/* The first copy again: served, with its own stack pointers. */
	wm_walk(&memo, m, fx->unw, &fx->here, WM_OWN);
	assert_int_equal(stb_walkmemo_stats(m).hits, 2);
	assert_same(&first, &memo);

	/* The whole stack (through libc's thread start): whether or not the
	 * walk can be remembered, the answer is the walk's. */
	wm_walk(&first, m, fx->unw, &fx->here, 0);
	wm_walk(&plain, NULL, fx->unw, &fx->moved, 0);
	wm_walk(&memo, m, fx->unw, &fx->moved, 0);
	assert_true(first.sink.n > WM_OWN);
	assert_same(&plain, &memo);

	stb_walkmemo_reset(m);
	st = stb_walkmemo_stats(m);
	assert_int_equal(st.lookups + st.hits + st.stored + st.bytes, 0);
	wm_walk(&memo, m, fx->unw, &fx->moved, WM_OWN);
	assert_int_equal(stb_walkmemo_stats(m).hits, 0);
	stb_walkmemo_free(m);
	stb_walkmemo_free(NULL);
	stb_walkmemo_reset(NULL);
	assert_int_equal(stb_walkmemo_stats(NULL).lookups, 0);
}

/* Every word of the moved copy changed in turn, to values that keep or break
 * what the walk read (another address, a pointer into the copy, the
 * first copy's relative value as a plain number): the answer is always what
 * walking the changed copy gives, and both hits and misses happen. */
static void test_every_word_changed(void **state)
{
	struct wm_fixture *fx = *state;
	struct stb_walkmemo *m = stb_walkmemo_new(0);
	assert_non_null(m);
	size_t words = fx->c.len / 8;
	uint64_t hits = 0, misses = 0;
	struct wm_walk plain, memo;
	for (size_t i = 0; i < words; i++) {
		uint64_t orig = fx->moved.words[i], addr = fx->moved.copy.addr;
		const uint64_t vals[] = {0,
					 orig + 8,
					 orig ^ (1ull << 40),
					 addr + 8 * ((i + 3) % words),
					 fx->here.words[i] - fx->here.copy.addr,
					 fx->here.words[i]};
		for (size_t v = 0; v < sizeof(vals) / sizeof(vals[0]); v++) {
			if (vals[v] == orig)
				continue;
			stb_walkmemo_reset(m);
			struct wm_walk prime;
			wm_walk(&prime, m, fx->unw, &fx->here, WM_OWN);
			assert_int_equal(stb_walkmemo_stats(m).stored, 1);
			fx->moved.words[i] = vals[v];
			wm_walk(&plain, NULL, fx->unw, &fx->moved, WM_OWN);
			wm_walk(&memo, m, fx->unw, &fx->moved, WM_OWN);
			fx->moved.words[i] = orig;
			assert_same(&plain, &memo);
			if (stb_walkmemo_stats(m).hits)
				hits++;
			else
				misses++;
		}
	}
	/* Most words are not read (hits); the return addresses and saved frame
	 * pointers are (misses). */
	assert_true(hits > misses);
	assert_true(misses >= 2 * (WM_OWN - 1));
	stb_walkmemo_free(m);
}

/* The same stack at other offsets in its page (colored stacks: whole cache
 * lines apart, or any 8 bytes): answered from the memo, as walking gives. */
static void test_other_offset(void **state)
{
	struct wm_fixture *fx = *state;
	struct stb_walkmemo *m = stb_walkmemo_new(0);
	assert_non_null(m);
	struct wm_walk prime, plain, memo;
	wm_walk(&prime, m, fx->unw, &fx->here, WM_OWN);
	const uint64_t offs[] = {WM_DELTA + 16, WM_DELTA + 7 * 64, WM_DELTA - 1984, 8};
	for (unsigned i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		struct wm_stack off;
		wm_stack_at(&off, &fx->c, offs[i]);
		wm_walk(&plain, NULL, fx->unw, &off, WM_OWN);
		wm_walk(&memo, m, fx->unw, &off, WM_OWN);
		assert_same(&plain, &memo);
		assert_int_equal(stb_walkmemo_stats(m).hits, i + 1);
		free(off.words);
	}
	stb_walkmemo_free(m);
}

/* The same bytes with other registers or limits: walked. */
static void test_other_start(void **state)
{
	struct wm_fixture *fx = *state;
	struct stb_walkmemo *m = stb_walkmemo_new(0);
	assert_non_null(m);
	struct wm_walk prime, plain, memo;
	wm_walk(&prime, m, fx->unw, &fx->here, WM_OWN);

	/* Another bp: a plain number where the first had a pointer into it. */
	struct wm_stack bp = fx->moved;
	bp.regs.bp = fx->here.regs.bp - fx->here.copy.addr;
	wm_walk(&plain, NULL, fx->unw, &bp, WM_OWN);
	wm_walk(&memo, m, fx->unw, &bp, WM_OWN);
	assert_same(&plain, &memo);
	/* Another depth limit. */
	wm_walk(&plain, NULL, fx->unw, &fx->moved, WM_OWN - 1);
	wm_walk(&memo, m, fx->unw, &fx->moved, WM_OWN - 1);
	assert_same(&plain, &memo);
	assert_int_equal(stb_walkmemo_stats(m).hits, 0);
	stb_walkmemo_free(m);
}

/* A new module table forgets every walk. */
static void test_new_module_table(void **state)
{
	struct wm_fixture *fx = *state;
	struct stb_walkmemo *m = stb_walkmemo_new(0);
	assert_non_null(m);
	struct wm_walk prime, memo;
	wm_walk(&prime, m, fx->unw, &fx->here, WM_OWN);
	struct stb_mods *mods = stb_unw_proc_mods(fx->unw);
	uint64_t gen = stb_mods_gen(mods);
	void *h = dlopen("libcrypt.so.1", RTLD_NOW | RTLD_LOCAL);
	assert_non_null(h);
	assert_int_equal(stb_unw_proc_refresh(fx->unw), 0);
	dlclose(h);
	assert_true(stb_mods_gen(mods) != gen);
	wm_walk(&memo, m, fx->unw, &fx->moved, WM_OWN);
	struct stb_walkmemo_stats st = stb_walkmemo_stats(m);
	assert_int_equal(st.hits, 0);
	assert_int_equal(st.stored, 2);
	wm_walk(&memo, m, fx->unw, &fx->here, WM_OWN);
	assert_int_equal(stb_walkmemo_stats(m).hits, 1);
	stb_walkmemo_free(m);
}

static int wm_on_frame(const struct stb_frame *f, void *arg)
{
	(void)f;
	++*(unsigned *)arg;
	return 0;
}

/* Sinks that do more than keep frames, and copies it cannot key: walked. */
static void test_not_served(void **state)
{
	struct wm_fixture *fx = *state;
	struct stb_walkmemo *m = stb_walkmemo_new(0);
	assert_non_null(m);
	struct wm_walk w;
	wm_walk(&w, m, fx->unw, &fx->here, WM_OWN);
	assert_int_equal(stb_walkmemo_stats(m).lookups, 1);

	unsigned calls = 0;
	struct stb_frame f[WM_MAXF];
	struct stb_frame_sink s = {.frames = f, .nframes = WM_MAXF, .max = WM_OWN,
				   .on_frame = wm_on_frame, .arg = &calls};
	assert_int_equal(stb_walkmemo_walk(m, fx->unw, &fx->moved.regs, &fx->moved.copy, &s),
			 (int)WM_OWN + 1);
	assert_int_equal(calls, WM_OWN);
	struct stb_sym *sym = stb_sym_new_mods(stb_unw_proc_mods(fx->unw));
	assert_non_null(sym);
	s = (struct stb_frame_sink){.frames = f, .nframes = WM_MAXF, .max = WM_OWN, .sym = sym};
	stb_walkmemo_walk(m, fx->unw, &fx->moved.regs, &fx->moved.copy, &s);
	assert_int_equal(s.n, WM_OWN);
	assert_non_null(f[0].symbol);
	assert_string_equal(f[0].symbol, "wm_f3");
	stb_sym_free(sym);
	/* A sink without a frames array, of the same size as the walk remembered
	 * above: looked up under another key (never served frames), counted. */
	s = (struct stb_frame_sink){.nframes = WM_MAXF, .max = WM_OWN};
	stb_walkmemo_walk(m, fx->unw, &fx->moved.regs, &fx->moved.copy, &s);
	assert_int_equal(s.n, WM_OWN);
	assert_true(s.truncated);
	assert_int_equal(stb_walkmemo_stats(m).lookups, 2);
	assert_int_equal(stb_walkmemo_stats(m).hits, 0);
	/* A sink that already holds frames. */
	s = (struct stb_frame_sink){.frames = f, .nframes = WM_MAXF, .max = 2 * WM_OWN, .n = 1};
	stb_walkmemo_walk(m, fx->unw, &fx->moved.regs, &fx->moved.copy, &s);
	/* A copy at an odd address, one too long. */
	struct wm_stack odd = fx->moved;
	odd.copy.addr += 4;
	wm_walk(&w, m, fx->unw, &odd, WM_OWN);
	uint8_t *big = calloc(1, STB_WALKMEMO_MAX_COPY + 8);
	assert_non_null(big);
	memcpy(big, fx->moved.words, fx->c.len);
	struct wm_stack longer = fx->moved;
	longer.copy.bytes = big;
	longer.copy.len = STB_WALKMEMO_MAX_COPY + 8;
	wm_walk(&w, m, fx->unw, &longer, WM_OWN);
	assert_int_equal(w.sink.n, WM_OWN);
	free(big);
	struct stb_walkmemo_stats st = stb_walkmemo_stats(m);
	assert_int_equal(st.lookups, 2);
	assert_int_equal(st.hits, 0);
	/* libunwind's steps may read any register: looked up, never remembered. */
	struct wm_stack lu = fx->here;
	lu.regs.flags |= STB_UNW_LIBUNWIND_ONLY;
	struct wm_walk plain;
	wm_walk(&plain, NULL, fx->unw, &lu, WM_OWN);
	wm_walk(&w, m, fx->unw, &lu, WM_OWN);
	assert_same(&plain, &w);
	assert_int_equal(w.sink.n, WM_OWN);
	wm_walk(&w, m, fx->unw, &lu, WM_OWN);
	st = stb_walkmemo_stats(m);
	assert_int_equal(st.lookups, 4);
	assert_int_equal(st.stored, 1);
	assert_int_equal(st.hits, 0);
	stb_walkmemo_free(m);
}

/* No memory for walks: nothing remembered, every answer walked. Too few hits:
 * it stops looking (and keeps answering right). */
static void test_cap_and_giving_up(void **state)
{
	struct wm_fixture *fx = *state;
	struct stb_walkmemo *m = stb_walkmemo_new(1);
	assert_non_null(m);
	struct wm_walk plain, memo;
	wm_walk(&memo, m, fx->unw, &fx->here, WM_OWN);
	wm_walk(&plain, NULL, fx->unw, &fx->moved, WM_OWN);
	wm_walk(&memo, m, fx->unw, &fx->moved, WM_OWN);
	assert_same(&plain, &memo);
	struct stb_walkmemo_stats st = stb_walkmemo_stats(m);
	assert_int_equal(st.lookups, 2);
	assert_int_equal(st.stored + st.hits + st.bytes, 0);
	stb_walkmemo_free(m);

	/* Every lookup a new key (another depth limit each time). */
	m = stb_walkmemo_new(0);
	assert_non_null(m);
	unsigned n = 0;
	while (!stb_walkmemo_stats(m).off && n < 10000)
		wm_walk(&memo, m, fx->unw, &fx->here, 1 + n++ % 5000);
	st = stb_walkmemo_stats(m);
	assert_true(st.off);
	assert_int_equal(st.hits, 0);
	assert_int_equal(st.bytes, 0);
	assert_true(n <= 5000);
	wm_walk(&plain, NULL, fx->unw, &fx->moved, WM_OWN);
	wm_walk(&memo, m, fx->unw, &fx->moved, WM_OWN);
	assert_same(&plain, &memo);
	assert_int_equal(stb_walkmemo_stats(m).lookups, st.lookups);
	stb_walkmemo_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_replay_moved, wm_setup, wm_teardown),
		cmocka_unit_test_setup_teardown(test_every_word_changed, wm_setup, wm_teardown),
		cmocka_unit_test_setup_teardown(test_other_offset, wm_setup, wm_teardown),
		cmocka_unit_test_setup_teardown(test_other_start, wm_setup, wm_teardown),
		cmocka_unit_test_setup_teardown(test_new_module_table, wm_setup, wm_teardown),
		cmocka_unit_test_setup_teardown(test_not_served, wm_setup, wm_teardown),
		cmocka_unit_test_setup_teardown(test_cap_and_giving_up, wm_setup, wm_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
