/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: runtime/stacks/symbols/walkmemo.c with the real unwinder of this
 * process. A remembered walk must give exactly what walking gives, for the
 * copy it was walked from, that copy moved up by 16 pages and 0 to 2,040
 * bytes (8-byte steps: another offset in its page, as colored stacks lie),
 * and the moved copy with one word changed. Input: a selector byte (ip, walk kind), the depth
 * limit, the index and new value of the changed word, bp, a mode byte, then
 * the stack's words. A word whose top byte is 0xaa becomes an address in a
 * function of this process (return addresses with real CFI), 0xbb a pointer
 * into the stack. Mode bit 0: the stack is instead a real one of this
 * process (captured once, 2 KiB from a leaf three calls deep), the input's
 * words XORed into it.
 */
#include "fuzz.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../unw_capture.h"
#include "symbols/frames.h"
#include "symbols/symbolize.h"
#include "symbols/walkmemo.h"
#include "unwind/unwind.h"

#define BASE 0x7f5500000000ull  /* where the copy lies (never read: only the copy is) */
#define DELTA (16ull * 4096)    /* the moved copy: this, plus 8 x the changed word's index byte */
#define MAX_WORDS 512u
#define MAXF 64u

/* The symbolizer is never asked (sinks without symbols). */
bool stb_sym_fill_frame(struct stb_sym *s, int flags, struct stb_frame *f,
			struct stb_sym_info *si)
{
	(void)s;
	(void)flags;
	(void)f;
	(void)si;
	return false;
}

static volatile int fz_sink;
#define REAL_WORDS 256u
static struct stb_regs fz_real_regs;
static uint64_t fz_real[REAL_WORDS];

__attribute__((noinline)) static int fz_leaf(int x)
{
	UNW_TEST_CAPTURE(&fz_real_regs);
	/* Not memcpy: ASan poisons the redzones of the frames above. */
	stb_unw_copy_raw(fz_real, (const void *)(uintptr_t)fz_real_regs.sp, sizeof(fz_real));
	fz_sink = x;
	return x + 1;
}

__attribute__((noinline)) static int fz_mid(int x)
{
	int r = fz_leaf(x + 1);
	fz_sink = r;
	return r + 1;
}

__attribute__((noinline)) static int fz_top(int x)
{
	int r = fz_mid(x + 1);
	fz_sink = r;
	return r + 1;
}

static int fz_cmp(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/* Code with CFI of this process and of libc. */
static uint64_t fz_code(unsigned i)
{
	const uint64_t fns[8] = {
	    (uint64_t)(uintptr_t)fz_leaf, (uint64_t)(uintptr_t)fz_mid,
	    (uint64_t)(uintptr_t)fz_top,  (uint64_t)(uintptr_t)LLVMFuzzerTestOneInput,
	    (uint64_t)(uintptr_t)qsort,   (uint64_t)(uintptr_t)memcpy,
	    (uint64_t)(uintptr_t)fz_cmp,  (uint64_t)(uintptr_t)strtoul,
	};
	return fns[i & 7];
}

static uint64_t fz_word(uint64_t w, uint64_t base, size_t len)
{
	if (w >> 56 == 0xaa)
		return fz_code((unsigned)w) + ((w >> 8) & 0x3ff);
	if (w >> 56 == 0xbb)
		return base + (w & 0xffff) % (len + 64);
	return w;
}

struct fz_walk {
	struct stb_frame f[MAXF];
	struct stb_frame_sink sink;
	int rc;
};

static void fz_walk(struct fz_walk *w, struct stb_walkmemo *m, struct stb_unw_proc *unw,
		    const struct stb_regs *regs, const struct stb_stack_copy *copy, unsigned max)
{
	memset(w, 0, sizeof(*w));
	w->sink = (struct stb_frame_sink){.frames = w->f, .nframes = MAXF, .max = max};
	w->rc = stb_walkmemo_walk(m, unw, regs, copy, &w->sink);
}

static void fz_same(const struct fz_walk *a, const struct fz_walk *b)
{
	bool same = a->rc == b->rc && a->sink.n == b->sink.n && a->sink.phys == b->sink.phys &&
		    a->sink.truncated == b->sink.truncated;
	for (unsigned i = 0; same && i < a->sink.n && i < MAXF; i++)
		same = a->f[i].ip == b->f[i].ip && a->f[i].sp == b->f[i].sp &&
		       a->f[i].flags == b->f[i].flags;
	if (!same)
		abort(); /* the remembered walk differs from the walk */
}

static uint64_t fz_move(uint64_t w, uint64_t from, uint64_t len, uint64_t delta)
{
	return w - from <= len ? w + delta : w;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct stb_unw_proc *unw;
	static uint64_t words[MAX_WORDS], moved[MAX_WORDS];
	if (!unw) {
		fz_sink = fz_top(1);
		unw = stb_unw_proc_new(0);
		if (!unw)
			abort();
	}
	if (size < 21 + 8)
		return 0;
	uint8_t sel = data[0];
	unsigned max = 1u + data[1] % MAXF;
	uint64_t change_val, bp;
	memcpy(&change_val, data + 4, 8);
	memcpy(&bp, data + 12, 8);
	bool real = data[20] & 1;
	size_t n = (size - 21) / 8;
	if (n > (real ? REAL_WORDS : MAX_WORDS))
		n = real ? REAL_WORDS : MAX_WORDS;
	uint64_t base = real ? fz_real_regs.sp : BASE;
	size_t len = (real ? REAL_WORDS : n) * 8;
	if (real)
		memcpy(words, fz_real, sizeof(fz_real));
	for (size_t i = 0; i < n; i++) {
		uint64_t w;
		memcpy(&w, data + 21 + 8 * i, 8);
		words[i] = real ? words[i] ^ w : fz_word(w, BASE, len);
	}
	if (real)
		n = REAL_WORDS;
	struct stb_regs regs = {
	    .ip = fz_code(sel) + (sel >> 3) * 3,
	    .sp = BASE,
	    .bp = fz_word(bp, BASE, len),
	    .flags = (sel & 0x40 ? STB_UNW_IP_IS_RETURN : 0u) | (sel & 0x80 ? STB_UNW_FP_CHAIN : 0u),
	};
	if (real) {
		regs = fz_real_regs;
		regs.flags = sel & 0x80 ? STB_UNW_FP_CHAIN : 0u;
	}
	struct stb_stack_copy copy = {.addr = base, .bytes = words, .len = len};
	uint64_t delta = DELTA + 8u * data[2];
	for (size_t i = 0; i < n; i++)
		moved[i] = fz_move(words[i], base, len, delta);
	struct stb_regs mregs = regs;
	mregs.sp = fz_move(regs.sp, base, len, delta);
	mregs.bp = fz_move(regs.bp, base, len, delta);
	struct stb_stack_copy mcopy = {.addr = base + delta, .bytes = moved, .len = len};

	struct stb_walkmemo *m = stb_walkmemo_new(0);
	if (!m)
		abort();
	static struct fz_walk plain, memo;
	fz_walk(&plain, NULL, unw, &regs, &copy, max);
	fz_walk(&memo, m, unw, &regs, &copy, max);
	fz_same(&plain, &memo);
	fz_walk(&memo, m, unw, &regs, &copy, max); /* served, if it was remembered */
	fz_same(&plain, &memo);
	fz_walk(&plain, NULL, unw, &mregs, &mcopy, max);
	fz_walk(&memo, m, unw, &mregs, &mcopy, max);
	fz_same(&plain, &memo);
	/* One word of the moved copy changed. */
	size_t at = data[2] % n;
	moved[at] = real ? moved[at] ^ change_val : fz_word(change_val, base + delta, len);
	fz_walk(&plain, NULL, unw, &mregs, &mcopy, max);
	fz_walk(&memo, m, unw, &mregs, &mcopy, max);
	fz_same(&plain, &memo);
	stb_walkmemo_free(m);
	return 0;
}
