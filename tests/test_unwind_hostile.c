/* SPDX-License-Identifier: Apache-2.0 */
/*
 * runtime/stacks/unwind/unwind.c and symbolize.c against what a broken target can
 * do: shrink an ELF file it has mapped (a shared object dlopen'ed from a
 * memfd, then truncated), carry CFI that loops or overflows, make a walk
 * meet a return address in no module right after a frame in one (the
 * module table is rebuilt mid-walk), and exhaust the walk's budgets; and
 * callbacks that symbolize and rebuild the registry while a walk runs.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "symbols/symbolize.h"
#include "unwind/elf_image.h"
#include "unwind/unwind.h"
#include "util.h"

void unw_test_loopcfi(void);
void unw_test_bigcfi(void);
int unw_hostile_leaf(struct stb_regs *r, uint8_t **copy, size_t *len);
int unw_hostile_mid(struct stb_regs *r, uint8_t **copy, size_t *len);

#define MAXF 64

struct frames {
	unsigned n;
	struct stb_unw_frame f[MAXF];
};

static int collect(const struct stb_unw_frame *f, void *arg)
{
	struct frames *fr = arg;

	if (fr->n < MAXF)
		fr->f[fr->n] = *f;
	fr->n++;
	return 0;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------- helper */

/* The helper process: loads the DSO from a memfd, reports its function's
 * address, truncates the memfd on 't', exits at EOF. */
static int dso_helper(void)
{
	const char *path = getenv("STB_UNW_TEST_DSO");
	char buf[64 * 1024], name[64], c;
	int in, mfd;
	ssize_t n;

	if (!path || (in = open(path, O_RDONLY)) < 0)
		return 2;
	mfd = memfd_create("unw-dso", 0);
	if (mfd < 0)
		return 3;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(mfd, buf, (size_t)n) != n)
			return 4;
	close(in);
	snprintf(name, sizeof(name), "/proc/self/fd/%d", mfd);
	void *h = dlopen(name, RTLD_NOW);
	void *fn = h ? dlsym(h, "unw_dso_fn") : NULL;
	if (!fn) {
		fprintf(stderr, "dso helper: %s\n", dlerror());
		return 5;
	}
	uint64_t a = (uint64_t)(uintptr_t)fn;
	if (write(1, &a, sizeof(a)) != (ssize_t)sizeof(a))
		return 6;
	while (read(0, &c, 1) == 1) {
		if (c == 't' && ftruncate(mfd, 4096) < 0)
			return 7;
		if (write(1, "k", 1) != 1)
			return 8;
	}
	_exit(0); /* no destructors: the DSO's pages past 4 KiB are gone */
}

struct helper {
	pid_t pid;
	int to, from;
	uint64_t fn;
};

static void helper_start(struct helper *h)
{
	int to[2], from[2];

	assert_int_equal(pipe(to), 0);
	assert_int_equal(pipe(from), 0);
	h->pid = fork();
	assert_true(h->pid >= 0);
	if (h->pid == 0) {
		dup2(to[0], 0);
		dup2(from[1], 1);
		close(to[1]);
		close(from[0]);
		execl("/proc/self/exe", "test_unwind_hostile", "--dso-helper", (char *)NULL);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	h->to = to[1];
	h->from = from[0];
	assert_int_equal(read(h->from, &h->fn, sizeof(h->fn)), (ssize_t)sizeof(h->fn));
}

static void helper_cmd(struct helper *h, char c)
{
	char k;

	assert_int_equal(write(h->to, &c, 1), 1);
	assert_int_equal(read(h->from, &k, 1), 1);
}

static void helper_stop(struct helper *h)
{
	int status;

	close(h->to);
	assert_int_equal(waitpid(h->pid, &status, 0), h->pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(h->from);
}

/* ------------------------------------------------------- shrinking files */

/*
 * The target truncates the file of a module it has mapped (root cause 2 of
 * issue 14). Before: the unwinder had mapped that file and parsed it in
 * place, and so did libdwfl: the next read past the new end was SIGBUS in
 * the tracer. Now walks use the copies read before, libdwfl reads with
 * pread and gets an error, and a registry built after the truncation sees
 * a module without tables. A live target's tables are read at their first
 * use: a registry that had not needed them yet finds the file shrunk, and
 * its walks end there without them.
 */
static void test_target_shrinks_mapped_file(void **state)
{
	struct helper h;
	struct stb_unw_module_info mi;
	struct stb_sym_info si;
	struct frames d = {0};

	(void)state;
	helper_start(&h);
	struct stb_unw_proc *p = stb_unw_proc_new(h.pid);
	assert_non_null(p);
	struct stb_sym *s = stb_sym_new_mods(stb_unw_proc_mods(p));
	assert_non_null(s);
	assert_int_equal(stb_unw_proc_module(p, h.fn, &mi), 0);
	assert_non_null(strstr(mi.path, "memfd:unw-dso"));
	assert_int_equal(mi.flags & STB_UNW_MOD_FP_ONLY, 0); /* its tables were found */
	struct stb_unw_proc *unused = stb_unw_proc_new(h.pid); /* tables never read */
	assert_non_null(unused);

	/* The first walk reads the tables: the row is found, the step needs
	 * the stack at sp 0x1000, which is not mapped. */
	struct stb_regs r = {.ip = h.fn, .sp = 0x1000, .bp = 0};
	struct stb_unw_result res;
	assert_int_equal(stb_unw_walk_budget(p, &r, NULL, 0, NULL, collect, &d, &res), 1);
	assert_int_equal(res.end, STB_UNW_END_UNREADABLE);

	helper_cmd(&h, 't'); /* shrunk to 4 KiB under the target's mapping */

	/* The row of the DSO's function comes from the copy: no fault. */
	memset(&d, 0, sizeof(d));
	assert_int_equal(stb_unw_walk_budget(p, &r, NULL, 0, NULL, collect, &d, &res), 1);
	assert_int_equal(res.end, STB_UNW_END_UNREADABLE);
	/* Tables read only now, from the shrunk file: none, and no fault. */
	memset(&d, 0, sizeof(d));
	assert_int_equal(stb_unw_walk_budget(unused, &r, NULL, 0, NULL, collect, &d, &res), 1);
	assert_int_equal(res.end, STB_UNW_END_NO_INFO);
	stb_unw_proc_free(unused);
	/* libdwfl opens the file only now: reads past its end fail cleanly. */
	stb_sym_lookup(s, h.fn, 0, &si);
	assert_non_null(si.module);
	assert_non_null(strstr(si.module, "memfd:unw-dso"));
	stb_sym_free(s);
	stb_unw_proc_free(p);

	/* A registry built after the truncation: the module is known, without
	 * tables; walks and lookups still end cleanly. */
	p = stb_unw_proc_new(h.pid);
	assert_non_null(p);
	assert_int_equal(stb_unw_proc_module(p, h.fn, &mi), 0);
	assert_true(mi.flags & STB_UNW_MOD_FP_ONLY);
	memset(&d, 0, sizeof(d));
	assert_int_equal(stb_unw_walk(p, &r, NULL, 0, 0, collect, &d), 1);
	s = stb_sym_new_mods(stb_unw_proc_mods(p));
	assert_non_null(s);
	stb_sym_lookup(s, h.fn, STB_SYM_RETURN, &si);
	stb_sym_free(s);
	stb_unw_proc_free(p);
	helper_stop(&h);
}

/* ------------------------------------------------------------ hostile CFI */

/* The walk of a frame whose CFA expression loops forever (DW_OP_skip -3;
 * root cause 4: libunwind 1.6.2 never returned) ends with the expression
 * budget, quickly, on our evaluator and on libunwind alone. */
static void test_cfi_expression_loop(void **state)
{
	struct frames d;
	struct stb_unw_result res;
	uint8_t stack[256] = {0};

	(void)state;
	for (int remote = 0; remote < 2; remote++) {
		struct stb_unw_proc *p = stb_unw_proc_new(remote ? getpid() : 0);
		assert_non_null(p);
		for (int lu = 0; lu < 2; lu++) {
			struct stb_regs r = {.ip = (uint64_t)(uintptr_t)unw_test_loopcfi + 1,
					     .sp = (uint64_t)(uintptr_t)stack,
					     .bp = (uint64_t)(uintptr_t)stack + 64,
					     .flags = lu ? STB_UNW_LIBUNWIND_ONLY : 0};
			struct stb_stack_copy copy = {
			    .addr = r.sp, .bytes = stack, .len = sizeof(stack)};
			uint64_t t0 = stb_now_ns();
			memset(&d, 0, sizeof(d));
			assert_int_equal(
			    stb_unw_walk_budget(p, &r, &copy, 0, NULL, collect, &d, &res), 1);
			uint64_t ns = stb_now_ns() - t0;
			if (res.end != STB_UNW_END_EXPR_BUDGET)
				fail_msg("remote %d libunwind %d: ended with %s", remote, lu,
					 stb_unw_end_name(res.end));
			if (ns > 500ull * 1000 * 1000)
				fail_msg("remote %d libunwind %d: %llu ms", remote, lu,
					 (unsigned long long)(ns / 1000000));
		}
		/* An offset that overflows: the row is refused, the walk goes on
		 * with libunwind's guess or ends, without undefined behaviour. */
		struct stb_regs r = {.ip = (uint64_t)(uintptr_t)unw_test_bigcfi + 1,
				     .sp = (uint64_t)(uintptr_t)stack,
				     .bp = 0};
		struct stb_stack_copy copy = {.addr = r.sp, .bytes = stack, .len = sizeof(stack)};
		memset(&d, 0, sizeof(d));
		assert_true(stb_unw_walk_budget(p, &r, &copy, 0, NULL, collect, &d, &res) >= 1);
		stb_unw_proc_free(p);
	}
}

/* ------------------------------------------------- refresh in mid-walk */

/* Captures rip, rsp, rbp, rbx, r12..r15 here and copies the stack above. */
STB_NOINLINE_NOCLONE int unw_hostile_leaf(struct stb_regs *r, uint8_t **copy,
							size_t *len)
{
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
			 : "r"(r)
			 : "rax", "memory");
	r->flags = 0; /* an exact ip */
	*len = 4096;
	*copy = malloc(*len);
	if (*copy)
		stb_unw_copy_raw(*copy, (const void *)(uintptr_t)r->sp, *len);
	return 1;
}

STB_NOINLINE_NOCLONE int unw_hostile_mid(struct stb_regs *r, uint8_t **copy,
						       size_t *len)
{
	int x = unw_hostile_leaf(r, copy, len);
	__asm__ volatile("" ::: "memory");
	return x + 1;
}

/*
 * Frame 0 in a module, frame 1's return address in none (root cause 3):
 * the walk rebuilds the module table to look for it; the module it had
 * found for frame 0 belonged to the old table. Before, the walk kept that
 * pointer and libunwind's lookup of the next frame read the freed module
 * (ASan: heap-use-after-free). The remote path is used: there a rebuild
 * replaces the table whenever it is due.
 */
static void test_refresh_mid_walk(void **state)
{
	struct stb_regs r;
	uint8_t *copy;
	size_t len;
	struct frames d = {0};
	struct stb_unw_stats before, after;

	(void)state;
	assert_int_equal(unw_hostile_mid(&r, &copy, &len), 2);
	assert_non_null(copy);
	struct stb_unw_proc *p = stb_unw_proc_new(getpid());
	assert_non_null(p);
	struct stb_stack_copy sc = {.addr = r.sp, .bytes = copy, .len = len};
	assert_true(stb_unw_walk(p, &r, &sc, 0, 4, collect, &d) >= 2);
	/* Frame 1's return address lies at its sp - 8: point it at nothing. */
	uint64_t slot = d.f[1].sp - 8, nowhere = 0x1000;
	assert_true(slot >= r.sp && slot + 8 <= r.sp + len);
	memcpy(copy + (slot - r.sp), &nowhere, 8);

	sleep_ms(120); /* the rebuild is due (rate limit) */
	stb_unw_proc_stats(p, &before);
	memset(&d, 0, sizeof(d));
	assert_true(stb_unw_walk(p, &r, &sc, 0, 0, collect, &d) >= 2);
	stb_unw_proc_stats(p, &after);
	assert_int_equal(after.refreshes, before.refreshes + 1);
	assert_true(d.f[1].ip == nowhere);
	/* The new table serves lookups as the old one did. */
	struct stb_unw_module_info mi;
	assert_int_equal(stb_unw_proc_module(p, r.ip, &mi), 0);
	assert_non_null(strstr(mi.path, "test_unwind_hostile"));
	stb_unw_proc_free(p);
	free(copy);
}

/* ------------------------------------------------------ debug files */

static void sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		fail_msg("failed: %s", cmd);
}

/* file:line from a separate debug file found through .gnu_debuglink (the
 * symbolizer copies it into a sealed memfd and checks its build id first);
 * a debug file of another object under that name is not used. */
static void test_separate_debuginfo(void **state)
{
	char dir[] = "/tmp/stb-unw-dbg-XXXXXX", so[64], dbg[64];
	struct stb_sym_info si;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(so, sizeof(so), "%s/dso.so", dir);
	snprintf(dbg, sizeof(dbg), "%s/dso.debug", dir);
	for (int bad = 0; bad < 2; bad++) {
		sh("cp '%s' %s && objcopy --only-keep-debug %s %s && "
		   "objcopy --strip-debug --add-gnu-debuglink=%s %s",
		   getenv("STB_UNW_TEST_DSO"), so, so, dbg, dbg, so);
		if (bad) /* another object's debug file under that name */
			sh("objcopy --only-keep-debug /proc/%d/exe %s", (int)getpid(), dbg);
		void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
		assert_non_null(h);
		uint64_t fn = (uint64_t)(uintptr_t)dlsym(h, "unw_dso_fn");
		assert_true(fn != 0);
		struct stb_sym *s = stb_sym_new(0);
		assert_non_null(s);
		assert_int_equal(stb_sym_lookup(s, fn + 4, 0, &si), 0);
		assert_string_equal(si.function, "unw_dso_fn");
		if (bad) {
			assert_null(si.file);
		} else {
			assert_non_null(si.file);
			assert_non_null(strstr(si.file, "test_unwind_dso.c"));
			assert_true(si.line > 0);
		}
		stb_sym_free(s);
		dlclose(h);
		sh("rm -f %s %s", so, dbg);
	}
	rmdir(dir);
}

/* ------------------------------------------------- callbacks */

struct sym_cb {
	struct stb_unw_proc *p;
	struct stb_sym *s;
	unsigned n;
	const char *names[8];
};

static int sym_collect(const struct stb_unw_frame *f, void *arg)
{
	struct sym_cb *c = arg;
	struct stb_sym_info si;

	/* A forced rebuild of the registry the walk is using, then a lookup
	 * through the symbolizer that shares it. */
	assert_int_equal(stb_unw_proc_refresh(c->p), 0);
	stb_sym_lookup(c->s, f->ip, c->n ? STB_SYM_RETURN : 0, &si);
	if (c->n < 8)
		c->names[c->n] = si.function;
	c->n++;
	return 0;
}

/* The walk holds no lock while it calls back: a callback can symbolize
 * (the trace driver's frame sink does) and even rebuild the registry. */
static void test_callback_symbolizes(void **state)
{
	struct stb_regs r;
	uint8_t *copy;
	size_t len;

	(void)state;
	assert_int_equal(unw_hostile_mid(&r, &copy, &len), 2);
	for (int remote = 0; remote < 2; remote++) {
		struct sym_cb c = {.n = 0};
		c.p = stb_unw_proc_new(remote ? getpid() : 0);
		assert_non_null(c.p);
		c.s = stb_sym_new_mods(stb_unw_proc_mods(c.p));
		assert_non_null(c.s);
		struct stb_stack_copy sc = {.addr = r.sp, .bytes = copy, .len = len};
		assert_int_equal(stb_unw_walk(c.p, &r, &sc, 0, 3, sym_collect, &c), 3);
		assert_string_equal(c.names[0], "unw_hostile_leaf");
		assert_string_equal(c.names[1], "unw_hostile_mid");
		assert_string_equal(c.names[2], "test_callback_symbolizes");
		stb_sym_free(c.s);
		stb_unw_proc_free(c.p);
	}
	free(copy);
}

/* ------------------------------------------------------------- budgets */

static void test_budgets(void **state)
{
	struct stb_regs r;
	uint8_t *copy;
	size_t len;
	struct frames d = {0};
	struct stb_unw_result res;

	(void)state;
	assert_int_equal(unw_hostile_mid(&r, &copy, &len), 2);
	assert_non_null(copy);
	struct stb_unw_proc *p = stb_unw_proc_new(getpid());
	assert_non_null(p);

	/* No copy, a byte budget below one page: the first stack read is refused. */
	struct stb_unw_budget b = {.max_target_bytes = 1};
	assert_int_equal(stb_unw_walk_budget(p, &r, NULL, 0, &b, collect, &d, &res), 1);
	assert_int_equal(res.end, STB_UNW_END_BYTES);
	assert_int_equal(res.target_bytes, 0);
	/* A deadline already past: the first slow operation ends the walk. */
	b = (struct stb_unw_budget){.deadline_ns = stb_now_ns() - 1};
	memset(&d, 0, sizeof(d));
	assert_int_equal(stb_unw_walk_budget(p, &r, NULL, 0, &b, collect, &d, &res), 1);
	assert_int_equal(res.end, STB_UNW_END_DEADLINE);
	/* Frame budget and the reasons of the other ends. */
	b = (struct stb_unw_budget){.max_frames = 2};
	struct stb_stack_copy sc = {.addr = r.sp, .bytes = copy, .len = len};
	memset(&d, 0, sizeof(d));
	assert_int_equal(stb_unw_walk_budget(p, &r, &sc, 0, &b, collect, &d, &res), 2);
	assert_int_equal(res.end, STB_UNW_END_DEPTH);
	struct stb_regs fp = r;
	fp.flags |= STB_UNW_FP_CHAIN;
	memset(&d, 0, sizeof(d));
	assert_int_equal(stb_unw_walk_budget(p, &fp, &sc, 0, &b, collect, &d, &res), 2);
	assert_int_equal(res.end, STB_UNW_END_DEPTH);
	/* The whole stack from outside: ends at the bottom. */
	memset(&d, 0, sizeof(d));
	assert_true(stb_unw_walk_budget(p, &r, NULL, 0, NULL, collect, &d, &res) >= 3);
	if (res.end != STB_UNW_END_BOTTOM)
		fail_msg("ended with %s", stb_unw_end_name(res.end));
	assert_true(res.target_bytes > 0);
	struct stb_unw_stats st;
	stb_unw_proc_stats(p, &st);
	assert_int_equal(st.budget_ends, 2);
	assert_string_equal(stb_unw_end_name(STB_UNW_END_EXPR_BUDGET), "expression budget");
	assert_string_equal(stb_unw_end_name(1000), "unknown");
	stb_unw_proc_free(p);
	free(copy);
}

/* ------------------------------------------------------------ ELF reader */

struct mem_src {
	const uint8_t *p;
	size_t len;
};

static int mem_read(void *arg, uint64_t off, void *dst, size_t len)
{
	const struct mem_src *m = arg;

	if (off > m->len || len > m->len - off)
		return -EIO;
	memcpy(dst, m->p + off, len);
	return 0;
}

/* Our own executable, truncated at every 1/64 of its length and with its
 * headers corrupted: the reader refuses or loads, never reads outside. */
static void test_elf_reader_truncated(void **state)
{
	struct stat st;
	int fd = open("/proc/self/exe", O_RDONLY);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	uint8_t *img = malloc((size_t)st.st_size);
	assert_non_null(img);
	assert_int_equal(pread(fd, img, (size_t)st.st_size, 0), st.st_size);
	close(fd);

	/* The file offset of the executable PT_LOAD, as a mapping would have it. */
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)(const void *)img;
	const Elf64_Phdr *ph = (const Elf64_Phdr *)(const void *)(img + eh->e_phoff);
	uint64_t xoff = UINT64_MAX;
	for (unsigned i = 0; i < eh->e_phnum; i++)
		if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X))
			xoff = ph[i].p_offset & ~0xfffull;
	assert_true(xoff != UINT64_MAX);
	struct stb_elf_mod m;
	struct mem_src ms = {.p = img, .len = (size_t)st.st_size};
	struct stb_elf_src src = {.read = mem_read, .arg = &ms, .size = ms.len};
	uint64_t left = UINT64_MAX;
	/* The whole file. */
	assert_int_equal(stb_elf_mod_load(&src, 0x555555555000ull, xoff, &left, &m), 0);
	assert_true(m.has_table);
	assert_int_equal(m.build_id_len, 20);
	assert_true(m.exec_lo >= 0x555555555000ull && m.exec_lo < m.exec_hi);
	stb_elf_mod_free(&m);
	/* A byte budget too small for the tables. */
	left = 16;
	assert_int_equal(stb_elf_mod_load(&src, 0x555555555000ull, xoff, &left, &m), 0);
	assert_false(m.has_table);
	assert_true(m.flags & STB_ELF_TOO_BIG);
	stb_elf_mod_free(&m);
	for (unsigned k = 0; k < 64; k++) {
		src.size = ms.len = (size_t)st.st_size * k / 64;
		left = UINT64_MAX;
		if (stb_elf_mod_load(&src, 0x555555555000ull, xoff, &left, &m) == 0)
			stb_elf_mod_free(&m);
	}
	/* Tables located first, read later: the same tables, budget taken at
	 * once; a later read of a shrunk or changed object finds none. */
	struct stb_elf_mod eager;
	src.size = ms.len = (size_t)st.st_size;
	left = UINT64_MAX;
	assert_int_equal(stb_elf_mod_load(&src, 0x555555555000ull, xoff, &left, &eager), 0);
	uint64_t eager_left = left;
	struct stb_elf_src lazy = src;
	lazy.defer_tables = true;
	left = UINT64_MAX;
	assert_int_equal(stb_elf_mod_load(&lazy, 0x555555555000ull, xoff, &left, &m), 0);
	assert_true(m.tables_deferred);
	assert_false(m.has_table);
	assert_null(m.hdr.data);
	assert_true(left == eager_left);
	assert_int_equal(stb_elf_mod_load_tables(&src, &m), 0);
	assert_true(m.has_table && !m.tables_deferred);
	assert_true(m.table.count == eager.table.count && m.table.eh_frame == eager.table.eh_frame);
	assert_true(m.eh_frame.len == eager.eh_frame.len &&
		    memcmp(m.eh_frame.data, eager.eh_frame.data, m.eh_frame.len) == 0);
	assert_int_equal(stb_elf_mod_load_tables(&src, &m), 0); /* once: nothing more */
	stb_elf_mod_free(&m);
	left = 16; /* too small: found too big at once, as when read eagerly */
	assert_int_equal(stb_elf_mod_load(&lazy, 0x555555555000ull, xoff, &left, &m), 0);
	assert_false(m.tables_deferred);
	assert_true(m.flags & STB_ELF_TOO_BIG);
	stb_elf_mod_free(&m);
	left = UINT64_MAX;
	assert_int_equal(stb_elf_mod_load(&lazy, 0x555555555000ull, xoff, &left, &m), 0);
	struct mem_src shrunk = {.p = img, .len = (size_t)m.eh_frame_off + 8};
	struct stb_elf_src later = {.read = mem_read, .arg = &shrunk, .size = shrunk.len};
	assert_true(stb_elf_mod_load_tables(&later, &m) < 0);
	assert_false(m.has_table || m.tables_deferred);
	assert_int_equal(stb_elf_mod_load_tables(&src, &m), -EINVAL); /* given up for good */
	stb_elf_mod_free(&m);
	left = UINT64_MAX;
	assert_int_equal(stb_elf_mod_load(&lazy, 0x555555555000ull, xoff, &left, &m), 0);
	uint8_t *changed = malloc((size_t)st.st_size);
	assert_non_null(changed);
	memcpy(changed, img, (size_t)st.st_size);
	changed[m.hdr_off + 4] ^= 0x40; /* eh_frame_ptr points elsewhere now */
	struct mem_src cs = {.p = changed, .len = (size_t)st.st_size};
	struct stb_elf_src csrc = {.read = mem_read, .arg = &cs, .size = cs.len};
	assert_true(stb_elf_mod_load_tables(&csrc, &m) < 0);
	assert_false(m.has_table);
	stb_elf_mod_free(&m);
	free(changed);
	stb_elf_mod_free(&eager);
	/* Corrupted program headers: huge counts, offsets and sizes. */
	src.size = ms.len = (size_t)st.st_size;
	uint16_t phnum = 0xffff;
	memcpy(img + 56, &phnum, 2);
	assert_int_equal(stb_elf_mod_load(&src, 0x555555555000ull, xoff, &left, &m), -ENOEXEC);
	free(img);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--dso-helper") == 0)
		return dso_helper();
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_target_shrinks_mapped_file),
	    cmocka_unit_test(test_cfi_expression_loop),
	    cmocka_unit_test(test_refresh_mid_walk),
	    cmocka_unit_test(test_callback_symbolizes),
	    cmocka_unit_test(test_separate_debuginfo),
	    cmocka_unit_test(test_budgets),
	    cmocka_unit_test(test_elf_reader_truncated),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
