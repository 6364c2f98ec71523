/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests of runtime/stacks/symbols/symindex.c: the choice among nested symbols and
 * aliases, when it defers to libdwfl, hostile sizes and allocation failure,
 * the sorted search against a brute-force reading of its contract on random
 * symbol sets, and every answer against dwfl_module_addrinfo for each sized
 * symbol of every module of this process (libc, libdw, cmocka, the test).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>

#include "symbols/symindex.h"

/* An arena for the tests: every block on a list, freed at the end. */
struct arena {
	void *blocks[64];
	size_t n;
	size_t fail_after; /* 0: never fail; k: the k-th allocation fails */
	size_t calls;
};

static void *arena_alloc(void *ctx, size_t size)
{
	struct arena *a = ctx;
	if (a->fail_after && ++a->calls >= a->fail_after)
		return NULL;
	if (a->n == sizeof(a->blocks) / sizeof(a->blocks[0]))
		return NULL;
	return a->blocks[a->n++] = malloc(size);
}

static void arena_free(struct arena *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->blocks[i]);
	a->n = 0;
}

#define SYM(a, s, nm, o, sec, b)                                                           \
	{ .addr = (a), .size = (s), .name = (nm), .order = (o), .shndx = (sec), .bind = (b) }

static void expect(const struct stb_symidx *x, uint64_t addr, const char *name, uint64_t off)
{
	uint64_t got = ~0ull;
	const char *n = stb_symidx_find(x, addr, &got);
	if (!name) {
		if (n)
			fail_msg("%#llx: expected no answer, got %s+%#llx", (unsigned long long)addr, n,
				 (unsigned long long)got);
		return;
	}
	if (!n || strcmp(n, name) != 0 || got != off)
		fail_msg("%#llx: expected %s+%#llx, got %s+%#llx", (unsigned long long)addr, name,
			 (unsigned long long)off, n ? n : "(none)", (unsigned long long)got);
}

static void test_nested_and_aliases(void **state)
{
	(void)state;
	const struct stb_symidx_sym syms[] = {
	    SYM(0x1000, 0x1000, "outer", 1, 1, STB_SYMIDX_GLOBAL),
	    SYM(0x1400, 0x100, "inner", 2, 1, STB_SYMIDX_GLOBAL),
	    SYM(0x3000, 0x100, "alias_local", 3, 1, STB_SYMIDX_LOCAL),
	    SYM(0x3000, 0x100, "alias_weak", 4, 1, STB_SYMIDX_WEAK),
	    SYM(0x3000, 0x100, "alias_global", 5, 1, STB_SYMIDX_GLOBAL),
	    SYM(0x3000, 0x80, "alias_small", 7, 1, STB_SYMIDX_GLOBAL),
	    SYM(0x3000, 0x80, "alias_small_later", 8, 1, STB_SYMIDX_GLOBAL),
	    SYM(0x3000, 0x80, "alias_small_first", 6, 1, STB_SYMIDX_GLOBAL),
	    SYM(0x4000, 0x10, "w", 9, 1, STB_SYMIDX_WEAK),
	    SYM(0x4000, 0x10, "u", 10, 1, STB_SYMIDX_UNIQUE),
	    SYM(0x5000, 0, "label", 11, 1, STB_SYMIDX_GLOBAL),
	};
	struct arena a = {0};
	struct stb_symidx *x = stb_symidx_new(syms, sizeof(syms) / sizeof(syms[0]), arena_alloc, &a);
	assert_non_null(x);
	assert_int_equal(stb_symidx_count(x), 10);
	expect(x, 0xfff, NULL, 0);
	expect(x, 0x1000, "outer", 0);
	expect(x, 0x13ff, "outer", 0x3ff);
	expect(x, 0x1400, "inner", 0);
	expect(x, 0x14ff, "inner", 0xff);
	expect(x, 0x1500, "outer", 0x500);
	expect(x, 0x1fff, "outer", 0xfff);
	expect(x, 0x2000, NULL, 0);
	/* At one address: the smaller first, then global before weak before local. */
	expect(x, 0x3000, "alias_small_first", 0);
	expect(x, 0x307f, "alias_small_first", 0x7f);
	expect(x, 0x3080, "alias_global", 0x80);
	expect(x, 0x4004, "u", 4);
	/* A label without size is left to libdwfl. */
	expect(x, 0x5000, NULL, 0);
	expect(x, 0x5001, NULL, 0);
	arena_free(&a);
}

static void test_local_defers(void **state)
{
	(void)state;
	const struct stb_symidx_sym syms[] = {
	    /* A local inside a global: libdwfl looks at the global first. */
	    SYM(0x4000, 0x2000, "global_outer", 1, 1, STB_SYMIDX_GLOBAL),
	    SYM(0x5000, 0x100, "local_inner", 2, 1, STB_SYMIDX_LOCAL),
	    /* A local after a non-local label of its section: libdwfl may take the label. */
	    SYM(0x6800, 0, "global_label", 3, 2, STB_SYMIDX_GLOBAL),
	    SYM(0x7000, 0x100, "local_after_label", 4, 2, STB_SYMIDX_LOCAL),
	    /* A label of another section, and a local label, change nothing. */
	    SYM(0x7f00, 0, "other_section_label", 5, 9, STB_SYMIDX_WEAK),
	    SYM(0x7f80, 0, "local_label", 6, 3, STB_SYMIDX_LOCAL),
	    SYM(0x8000, 0x100, "local_alone", 7, 3, STB_SYMIDX_LOCAL),
	    /* An absolute label matches its own address only. */
	    SYM(0x9000, 0, "abs_label", 8, 0xfff1, STB_SYMIDX_GLOBAL),
	    SYM(0x9000, 0x100, "local_at_abs", 9, 4, STB_SYMIDX_LOCAL),
	};
	struct arena a = {0};
	struct stb_symidx *x = stb_symidx_new(syms, sizeof(syms) / sizeof(syms[0]), arena_alloc, &a);
	assert_non_null(x);
	expect(x, 0x4100, "global_outer", 0x100);
	expect(x, 0x5050, NULL, 0);
	expect(x, 0x5100, "global_outer", 0x1100);
	expect(x, 0x7010, NULL, 0);
	expect(x, 0x8010, "local_alone", 0x10);
	expect(x, 0x9000, NULL, 0);
	expect(x, 0x9001, "local_at_abs", 1);
	arena_free(&a);
}

static void test_hostile(void **state)
{
	(void)state;
	struct arena a = {0};
	/* Ends past 2^64 are cut there; a symbol spanning everything does not
	 * hide the ones inside it. */
	const struct stb_symidx_sym syms[] = {
	    SYM(0xfffffffffffff000ull, 0x100000, "wraps", 1, 1, STB_SYMIDX_GLOBAL),
	    SYM(0, UINT64_MAX, "everything", 2, 1, STB_SYMIDX_GLOBAL),
	    SYM(0x10, 0x10, "small", 3, 1, STB_SYMIDX_GLOBAL),
	};
	struct stb_symidx *x = stb_symidx_new(syms, 3, arena_alloc, &a);
	assert_non_null(x);
	expect(x, UINT64_MAX - 1, "wraps", 0xffe);
	expect(x, 0x18, "small", 8);
	expect(x, 0x20, "everything", 0x20);
	expect(x, UINT64_MAX, NULL, 0); /* [lo, 2^64 - 1): the last byte is out */
	/* No symbols: no answers. */
	struct stb_symidx *e = stb_symidx_new(syms, 0, arena_alloc, &a);
	assert_non_null(e);
	assert_int_equal(stb_symidx_count(e), 0);
	expect(e, 0x18, NULL, 0);
	assert_int_equal(stb_symidx_count(NULL), 0);
	/* Too many: refused before anything is read. */
	errno = 0;
	assert_null(stb_symidx_new(syms, (size_t)STB_SYMIDX_MAX_SYMS + 1, arena_alloc, &a));
	assert_int_equal(errno, E2BIG);
	/* Each allocation failing in turn. */
	for (size_t k = 1; k <= 4; k++) {
		struct arena f = {.fail_after = k};
		errno = 0;
		assert_null(stb_symidx_new(syms, 3, arena_alloc, &f));
		assert_int_equal(errno, ENOMEM);
		arena_free(&f);
	}
	arena_free(&a);
}

/* The contract of stb_symidx_find, read literally, over every symbol. */
static const char *brute_find(const struct stb_symidx_sym *s, size_t n, uint64_t addr,
			      uint64_t *off)
{
	const struct stb_symidx_sym *best = NULL;
	bool nonlocal = false;
	for (size_t i = 0; i < n; i++) {
		const struct stb_symidx_sym *c = &s[i];
		uint64_t end = c->addr + c->size < c->addr ? UINT64_MAX : c->addr + c->size;
		if (!c->size || c->addr > addr || addr >= end)
			continue;
		nonlocal |= c->bind != STB_SYMIDX_LOCAL;
		if (!best || c->addr > best->addr ||
		    (c->addr == best->addr &&
		     (c->bind > best->bind ||
		      (c->bind == best->bind &&
		       (c->size < best->size || (c->size == best->size && c->order < best->order))))))
			best = c;
	}
	if (!best)
		return NULL;
	if (best->bind == STB_SYMIDX_LOCAL) {
		if (nonlocal)
			return NULL;
		for (size_t i = 0; i < n; i++) {
			const struct stb_symidx_sym *l = &s[i];
			if (l->size || l->bind == STB_SYMIDX_LOCAL || l->addr > addr)
				continue;
			if (l->shndx >= 0xff00 ? l->addr == addr : l->shndx == best->shndx)
				return NULL;
		}
	}
	*off = addr - best->addr;
	return best->name;
}

static void test_random_against_contract(void **state)
{
	(void)state;
	enum { NSYMS = 300, NPROBES = 4000, SETS = 40 };
	static struct stb_symidx_sym syms[NSYMS];
	static char names[NSYMS][16];
	unsigned seed = 12345;
	size_t answered = 0, probes = 0;

	for (int set = 0; set < SETS; set++) {
		struct arena a = {0};
		for (unsigned i = 0; i < NSYMS; i++) {
			unsigned r = (unsigned)rand_r(&seed);
			snprintf(names[i], sizeof(names[i]), "s%u", i);
			/* Dense, so that nesting, aliases and labels all occur. */
			uint64_t addr = 0x1000 + (uint64_t)(rand_r(&seed) % 4096);
			uint64_t size = r % 5 == 0 ? 0 : (uint64_t)(rand_r(&seed) % (r % 7 == 0 ? 2048 : 64));
			syms[i] = (struct stb_symidx_sym){.addr = addr, .size = size, .name = names[i],
							  .order = (uint32_t)(rand_r(&seed) % 1000),
							  .shndx = r % 11 == 0 ? 0xfff1 : 1 + r % 3,
							  .bind = (uint8_t)((r >> 8) % 4)};
		}
		struct stb_symidx *x = stb_symidx_new(syms, NSYMS, arena_alloc, &a);
		assert_non_null(x);
		for (int p = 0; p < NPROBES; p++) {
			uint64_t addr = 0xf00 + (uint64_t)(rand_r(&seed) % 6500), o1 = 0, o2 = 0;
			const char *want = brute_find(syms, NSYMS, addr, &o1);
			const char *got = stb_symidx_find(x, addr, &o2);
			probes++;
			if (!want) {
				if (got)
					fail_msg("set %d %#llx: %s+%#llx, expected no answer", set,
						 (unsigned long long)addr, got, (unsigned long long)o2);
				continue;
			}
			answered++;
			if (!got || strcmp(want, got) != 0 || o1 != o2)
				fail_msg("set %d %#llx: %s+%#llx, expected %s+%#llx", set,
					 (unsigned long long)addr, got ? got : "(none)",
					 (unsigned long long)o2, want, (unsigned long long)o1);
		}
		arena_free(&a);
	}
	/* Both kinds of probes occurred. */
	assert_true(answered > probes / 10 && answered < probes);
}

struct dwfl_check {
	size_t modules, syms, probes, answered, libc;
	size_t libc_probes, libc_answered; /* the module that matters most */
};

static int check_module(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start,
			void *arg)
{
	(void)userdata;
	(void)start;
	struct dwfl_check *c = arg;
	struct arena a = {0};
	struct stb_symidx *x = stb_symidx_build(mod, arena_alloc, &a);
	int n = dwfl_module_getsymtab(mod);
	if (!x) {
		arena_free(&a);
		return DWARF_CB_OK; /* no symbols (the vdso may have few) */
	}
	size_t probes0 = c->probes, answered0 = c->answered;
	c->modules++;
	if (strstr(name, "libc.so"))
		c->libc++;
	for (int i = 1; i < n; i++) {
		GElf_Sym sym;
		GElf_Addr addr;
		const char *sname = dwfl_module_getsym_info(mod, i, &sym, &addr, NULL, NULL, NULL);
		if (!sname || !sym.st_size || GELF_ST_TYPE(sym.st_info) != STT_FUNC)
			continue;
		c->syms++;
		uint64_t probe[3] = {addr, addr + sym.st_size / 2, addr + sym.st_size - 1};
		for (int p = 0; p < 3; p++) {
			GElf_Off want_off = 0;
			GElf_Sym ws;
			uint64_t got_off = 0;
			const char *want =
			    dwfl_module_addrinfo(mod, probe[p], &want_off, &ws, NULL, NULL, NULL);
			const char *got = stb_symidx_find(x, probe[p], &got_off);
			c->probes++;
			if (!got)
				continue;
			c->answered++;
			if (!want || strcmp(want, got) != 0 || want_off != got_off)
				fail_msg("%s %#llx: the index says %s+%#llx, libdwfl %s+%#llx", name,
					 (unsigned long long)probe[p], got, (unsigned long long)got_off,
					 want ? want : "(none)", (unsigned long long)want_off);
		}
	}
	print_message("  %s: %zu of %zu probes answered\n", name, c->answered - answered0,
		      c->probes - probes0);
	if (strstr(name, "libc.so")) {
		c->libc_probes = c->probes - probes0;
		c->libc_answered = c->answered - answered0;
	}
	arena_free(&a);
	return DWARF_CB_OK;
}

static void test_matches_libdwfl(void **state)
{
	(void)state;
	static char *debuginfo_path;
	const Dwfl_Callbacks cb = {
	    .find_elf = dwfl_linux_proc_find_elf,
	    .find_debuginfo = dwfl_standard_find_debuginfo,
	    .debuginfo_path = &debuginfo_path,
	};
	Dwfl *d = dwfl_begin(&cb);
	assert_non_null(d);
	dwfl_report_begin(d);
	assert_int_equal(dwfl_linux_proc_report(d, getpid()), 0);
	assert_int_equal(dwfl_report_end(d, NULL, NULL), 0);
	struct dwfl_check c = {0};
	assert_int_equal(dwfl_getmodules(d, check_module, &c, 0), 0);
	dwfl_end(d);
	print_message("%zu modules, %zu functions, %zu probes, %zu answered by the index\n",
		      c.modules, c.syms, c.probes, c.answered);
	assert_true(c.libc == 1);
	assert_true(c.modules >= 4);
	assert_true(c.syms >= 2000);
	/* The index must answer nearly everything, or it saves nothing (the
	 * sanitizer runtimes nest local functions in global ones: it defers
	 * more there, and still agrees with libdwfl). */
	assert_true(c.libc_probes >= 1000 && c.libc_answered * 100 >= c.libc_probes * 99);
	assert_true(c.answered * 100 >= c.probes * 90);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_nested_and_aliases),
	    cmocka_unit_test(test_local_defers),
	    cmocka_unit_test(test_hostile),
	    cmocka_unit_test(test_random_against_contract),
	    cmocka_unit_test(test_matches_libdwfl),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
