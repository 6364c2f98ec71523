/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests of runtime/stacks/symbols/symbolize.c: static, exported, libc, vdso and C++ symbols,
 * offsets, return-address lookups, file:line and inline frames (nested C++
 * inlining against addr2line -i), the result cache and unknown addresses.
 */
#include <elf.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <cmocka.h>

#include "symbols/symbolize.h"
#include "util.h"

void *stb_test_cxx_frob_addr(void);
uint64_t stb_test_inl_guard_pc(void);
int stb_test_sym_exported(int x);

static volatile int sym_sink;
static volatile uint64_t sym_ra;
static int sym_static_line, sym_call_line, sym_inl_line, sym_inl_call_line;
static jmp_buf sym_jb;

static const int sym_static_decl_line = __LINE__ + 1;
STB_NOINLINE_NOCLONE static int sym_static_fn(int x)
{
	sym_static_line = sym_static_decl_line;
	return x * 7 + sym_sink;
}

STB_NOINLINE_NOCLONE int stb_test_sym_exported(int x)
{
	return x * 5 + sym_sink;
}

STB_NOINLINE_NOCLONE static void sym_callee(void)
{
	sym_ra = (uint64_t)(uintptr_t)__builtin_return_address(0);
	__asm__ volatile("" ::: "memory");
}

STB_NOINLINE_NOCLONE static int sym_caller(void)
{
	sym_call_line = __LINE__ + 1;
	sym_callee();
	return sym_sink + 1;
}

STB_NOINLINE_NOCLONE __attribute__((noreturn)) static void sym_noret(void)
{
	sym_ra = (uint64_t)(uintptr_t)__builtin_return_address(0);
	longjmp(sym_jb, 1);
}

/* The call is its last instruction: the return address is past its end. */
STB_NOINLINE_NOCLONE static void sym_noret_caller(void)
{
	sym_noret();
}

STB_NOINLINE_NOCLONE static uint64_t sym_get_ra(void)
{
	return (uint64_t)(uintptr_t)__builtin_return_address(0);
}

static inline __attribute__((always_inline)) uint64_t sym_inl_leaf(void)
{
	sym_inl_line = __LINE__ + 1;
	return sym_get_ra() + (uint64_t)sym_sink;
}

STB_NOINLINE_NOCLONE static uint64_t sym_inl_outer(void)
{
	sym_inl_call_line = __LINE__ + 1;
	uint64_t ra = sym_inl_leaf();
	return ra + (uint64_t)sym_sink;
}

static int sym_ends_with(const char *s, const char *suffix)
{
	size_t a = s ? strlen(s) : 0, b = strlen(suffix);
	return s && a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Address of a dynamic symbol of the vdso, from its section headers. */
static uint64_t sym_vdso_addr(const char *name)
{
	uint64_t base = getauxval(AT_SYSINFO_EHDR), bias = base;
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)(uintptr_t)base;
	const Elf64_Phdr *ph = (const Elf64_Phdr *)(uintptr_t)(base + eh->e_phoff);
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(uintptr_t)(base + eh->e_shoff);

	for (unsigned i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type == PT_LOAD) {
			bias = base - ph[i].p_vaddr;
			break;
		}
	}
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_type != SHT_DYNSYM)
			continue;
		const Elf64_Sym *sym = (const Elf64_Sym *)(uintptr_t)(base + sh[i].sh_offset);
		const char *str = (const char *)(uintptr_t)(base + sh[sh[i].sh_link].sh_offset);
		for (size_t k = 0; k < sh[i].sh_size / sizeof(*sym); k++)
			if (strcmp(str + sym[k].st_name, name) == 0 && sym[k].st_value)
				return sym[k].st_value + bias;
	}
	return 0;
}

static struct stb_sym *sym_new(void)
{
	struct stb_sym *s = stb_sym_new(0);
	assert_non_null(s);
	return s;
}

static void test_static_and_exported(void **state)
{
	struct stb_sym *s = sym_new();
	struct stb_sym_info info;
	uint64_t ip = (uint64_t)(uintptr_t)sym_static_fn;

	(void)state;
	sym_static_fn(1);
	assert_int_equal(stb_sym_lookup(s, ip, 0, &info), 0);
	assert_string_equal(info.function, "sym_static_fn");
	assert_int_equal(info.offset, 0);
	assert_true(sym_ends_with(info.module, "/test_symbolize"));
	assert_non_null(info.build_id);
	assert_int_equal(strlen(info.build_id), 40);
	assert_true(strspn(info.build_id, "0123456789abcdef") == 40);
	/* Built with -g: the first instruction is on one of its lines. */
	assert_true(sym_ends_with(info.file, "/test_symbolize.c"));
	assert_true(info.line >= sym_static_line && info.line <= sym_static_line + 4);
	assert_int_equal(info.ninline, 0);

	/* Offsets inside the function. */
	assert_int_equal(stb_sym_lookup(s, ip + 5, 0, &info), 0);
	assert_string_equal(info.function, "sym_static_fn");
	assert_int_equal(info.offset, 5);

	/* module_offset is the ELF virtual address: the same for both functions
	 * relative to each other as in memory. */
	struct stb_sym_info other;
	uint64_t ip2 = (uint64_t)(uintptr_t)stb_test_sym_exported;
	assert_int_equal(stb_sym_lookup(s, ip2, 0, &other), 0);
	assert_string_equal(other.function, "stb_test_sym_exported");
	assert_int_equal(other.offset, 0);
	assert_int_equal(other.module_offset - info.module_offset, ip2 - (ip + 5));
	assert_ptr_equal(other.module, info.module);
	stb_sym_free(s);
	stb_sym_free(NULL);
}

static void test_libc_and_vdso(void **state)
{
	struct stb_sym *s = sym_new();
	struct stb_sym_info info;

	(void)state;
	assert_int_equal(stb_sym_lookup(s, (uint64_t)(uintptr_t)getpid, 0, &info), 0);
	assert_non_null(strstr(info.function, "getpid"));
	assert_int_equal(info.offset, 0);
	assert_non_null(strstr(info.module, "libc.so.6"));
	assert_non_null(info.build_id);

	uint64_t v = sym_vdso_addr("__vdso_clock_gettime");
	assert_true(v != 0);
	assert_int_equal(stb_sym_lookup(s, v + 2, 0, &info), 0);
	if (strcmp(info.function, "__vdso_clock_gettime") != 0 && strcmp(info.function, "clock_gettime") != 0)
		fail_msg("vdso symbol is %s", info.function);
	assert_int_equal(info.offset, 2);
	assert_string_equal(info.module, "[vdso]");
	stb_sym_free(s);
}

static void test_return_address(void **state)
{
	struct stb_sym *s = sym_new();
	struct stb_sym_info ret, exact;

	(void)state;
	sym_caller();
	uint64_t ra = sym_ra;
	assert_int_equal(stb_sym_lookup(s, ra, 1, &ret), 0);
	assert_string_equal(ret.function, "sym_caller");
	assert_int_equal(ret.offset, ra - (uint64_t)(uintptr_t)sym_caller);
	assert_int_equal(ret.line, sym_call_line); /* the call, not what follows */
	assert_int_equal(stb_sym_lookup(s, ra, 0, &exact), 0);
	assert_int_equal(exact.module_offset, ret.module_offset);
	assert_int_equal(exact.offset, ret.offset);

	/* A call ending a function returns past it: only ip - 1 is inside. */
	if (setjmp(sym_jb) == 0)
		sym_noret_caller();
	ra = sym_ra;
	assert_int_equal(stb_sym_lookup(s, ra, 1, &ret), 0);
	assert_string_equal(ret.function, "sym_noret_caller");
	assert_int_equal(ret.offset, ra - (uint64_t)(uintptr_t)sym_noret_caller);
	int r = stb_sym_lookup(s, ra, 0, &exact);
	assert_true(r < 0 || strcmp(exact.function, "sym_noret_caller") != 0);
	stb_sym_free(s);
}

static void test_inline_frames(void **state)
{
	struct stb_sym *s = sym_new();
	struct stb_sym_info info;

	(void)state;
	uint64_t ra = sym_inl_outer();
	assert_int_equal(stb_sym_lookup(s, ra, 1, &info), 0);
	assert_string_equal(info.function, "sym_inl_outer");
	assert_int_equal(info.ninline, 1);
	assert_string_equal(info.inlines[0].function, "sym_inl_leaf");
	assert_true(sym_ends_with(info.inlines[0].file, "/test_symbolize.c"));
	assert_int_equal(info.inlines[0].line, sym_inl_line);
	/* The position in the real function is the inlined call. */
	assert_true(sym_ends_with(info.file, "/test_symbolize.c"));
	assert_int_equal(info.line, sym_inl_call_line);
	stb_sym_free(s);
}

/* One logical frame as addr2line -i -f -C prints it. */
struct sym_a2l {
	char fn[256], file[600];
	int line;
};

/* addr2line -i -f -C on our own executable at a module offset. */
static int sym_addr2line(uint64_t off, struct sym_a2l *out, int max)
{
	char cmd[128], fn[256], pos[600];
	int n = 0;

	snprintf(cmd, sizeof(cmd), "addr2line -i -f -C -e /proc/%d/exe 0x%llx", (int)getpid(),
		 (unsigned long long)off);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	while (n < max && fgets(fn, sizeof(fn), p) && fgets(pos, sizeof(pos), p)) {
		fn[strcspn(fn, "\n")] = 0;
		pos[strcspn(pos, "\n")] = 0;
		char *colon = strrchr(pos, ':');
		assert_non_null(colon);
		*colon = 0;
		snprintf(out[n].fn, sizeof(out[n].fn), "%s", fn);
		snprintf(out[n].file, sizeof(out[n].file), "%s", pos);
		out[n].line = atoi(colon + 1);
		n++;
	}
	assert_int_equal(pclose(p), 0);
	return n;
}

/* A guard's constructor inlined into a function inlined into another: the
 * same three logical frames as addr2line -i, innermost first, each with its
 * function and position. */
static void test_nested_inline_cxx(void **state)
{
	struct stb_sym *s = sym_new();
	struct stb_sym_info info;
	struct sym_a2l want[8];

	(void)state;
	uint64_t ra = stb_test_inl_guard_pc();
	assert_int_equal(stb_sym_lookup(s, ra, STB_SYM_RETURN, &info), 0);
	int n = sym_addr2line(info.module_offset - 1, want, 8);
	if (n != 3)
		fail_msg("test_symbolize_inline.cpp must inline two levels (addr2line sees %d frames)", n);
	assert_true(strstr(want[0].fn, "Guard::Guard") != NULL);
	assert_int_equal(info.ninline + 1, (unsigned)n);
	for (int i = 0; i < n; i++) {
		const char *fn = i < n - 1 ? info.inlines[i].function : info.function;
		const char *file = i < n - 1 ? info.inlines[i].file : info.file;
		int line = i < n - 1 ? info.inlines[i].line : info.line;
		if (!fn || strcmp(fn, want[i].fn) != 0)
			fail_msg("frame %d: function %s, addr2line says %s", i, fn ? fn : "(null)", want[i].fn);
		if (!file || strcmp(file, want[i].file) != 0 || line != want[i].line)
			fail_msg("frame %d (%s): %s:%d, addr2line says %s:%d", i, fn, file ? file : "(null)", line,
				 want[i].file, want[i].line);
	}
	stb_sym_free(s);
}

static void test_cxx_demangled(void **state)
{
	struct stb_sym *s = sym_new();
	struct stb_sym_info info;

	(void)state;
	assert_int_equal(stb_sym_lookup(s, (uint64_t)(uintptr_t)stb_test_cxx_frob_addr(), 0, &info), 0);
	assert_string_equal(info.function, "stbtest::Widget::frob(int)");
	assert_int_equal(info.offset, 0);
	assert_true(sym_ends_with(info.file, "/test_symbolize_cxx.cpp"));
	stb_sym_free(s);
}

static void test_unknown_cache_refresh(void **state)
{
	struct stb_sym *s = sym_new();
	struct stb_sym_info a, b;

	(void)state;
	assert_int_equal(stb_sym_lookup(s, 0x10, 0, &a), -ENOENT);
	assert_null(a.function);
	assert_null(a.module);
	assert_int_equal(stb_sym_lookup(s, 0x10, 1, &a), -ENOENT);
	assert_int_equal(stb_sym_lookup(NULL, 0x10, 0, &a), -EINVAL);

	/* Cached: the same strings again. */
	uint64_t ip = (uint64_t)(uintptr_t)sym_static_fn + 3;
	assert_int_equal(stb_sym_lookup(s, ip, 0, &a), 0);
	assert_int_equal(stb_sym_lookup(s, ip, 0, &b), 0);
	assert_ptr_equal(a.function, b.function);
	assert_ptr_equal(a.file, b.file);
	assert_memory_equal(&a, &b, sizeof(a));

	/* Strings returned before a refresh stay valid; lookups still work. */
	assert_int_equal(stb_sym_refresh(s), 0);
	assert_string_equal(a.function, "sym_static_fn");
	assert_int_equal(stb_sym_lookup(s, ip, 0, &b), 0);
	assert_string_equal(b.function, "sym_static_fn");
	assert_int_equal(b.offset, 3);

	errno = 0;
	assert_null(stb_sym_new(-1));
	assert_int_equal(errno, EINVAL);
	stb_sym_free(s);
}

struct sym_mt {
	struct stb_sym *s;
	int bad;
};

static void *sym_mt_main(void *arg)
{
	struct sym_mt *m = arg;
	struct stb_sym_info info;

	for (int i = 0; i < 2000; i++) {
		uint64_t ip = (uint64_t)(uintptr_t)sym_static_fn + (uint64_t)(i % 7);
		if (stb_sym_lookup(m->s, ip, i & 1, &info) != 0 && (i & 1) == 0)
			m->bad++;
		else if ((i & 1) == 0 && strcmp(info.function, "sym_static_fn") != 0)
			m->bad++;
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct sym_mt m[4];
	pthread_t t[4];
	struct stb_sym *s = sym_new();

	(void)state;
	for (int i = 0; i < 4; i++) {
		m[i] = (struct sym_mt){ .s = s };
		assert_int_equal(pthread_create(&t[i], NULL, sym_mt_main, &m[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(m[i].bad, 0);
	}
	stb_sym_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_static_and_exported),
		cmocka_unit_test(test_libc_and_vdso),
		cmocka_unit_test(test_return_address),
		cmocka_unit_test(test_inline_frames),
		cmocka_unit_test(test_nested_inline_cxx),
		cmocka_unit_test(test_cxx_demangled),
		cmocka_unit_test(test_unknown_cache_refresh),
		cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
