/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests of runtime/stacks/unwind/unwind.c: DWARF and frame-pointer walks of a captured
 * context (own process, frame-pointer and -fomit-frame-pointer code, another
 * process), depth/skip/stop semantics, failing reads, switch-frame registers,
 * module lookup and refresh after dlopen.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "symbols/symbolize.h"
#include "unw_capture.h"
#include "unwind/unwind.h"
#include "util.h"

#define UNW_TEST_STACK (8u * 1024 * 1024)
#define UNW_TEST_MAXF 128

struct unw_test_capture {
	struct stb_regs regs;
	uint64_t stack_hi;
	uint8_t *copy; /* [regs.sp, stack_hi) */
	size_t len;
	void *stack;   /* the chain's thread stack, PROT_NONE once it ended */
	int remote_fd; /* helper: publish regs here, then block */
	int chain;     /* 0: f1->f2->f3, 1: g1->g2->g3 (no frame pointers), 2: qsort */
};

int unw_test_f1(struct unw_test_capture *c, int x);
int unw_test_f2(struct unw_test_capture *c, int x);
int unw_test_f3(struct unw_test_capture *c, int x);
int unw_test_capture_here(struct unw_test_capture *c);
int unw_test_nofp_g1(struct unw_test_capture *c, int x);
void *unw_test_runner(void *arg);

static volatile int unw_test_sink;

/* What f3 / capture_here do after capturing. */
static void unw_test_after_capture(struct unw_test_capture *c)
{
	if (c->remote_fd >= 0) {
		char b;
		/* Helper process: hand regs + stack end to the parent, then wait
		 * until it closes our stdin. */
		if (write(c->remote_fd, &c->regs, sizeof(c->regs)) != (ssize_t)sizeof(c->regs) ||
		    write(c->remote_fd, &c->stack_hi, sizeof(c->stack_hi)) != (ssize_t)sizeof(c->stack_hi))
			_exit(3);
		while (read(0, &b, 1) > 0)
			;
		return;
	}
	c->len = c->stack_hi - c->regs.sp;
	c->copy = malloc(c->len);
	if (c->copy)
		stb_unw_copy_raw(c->copy, (const void *)(uintptr_t)c->regs.sp, c->len);
}

STB_NOINLINE_NOCLONE int unw_test_capture_here(struct unw_test_capture *c)
{
	UNW_TEST_CAPTURE(&c->regs);
	unw_test_after_capture(c);
	return unw_test_sink + 1;
}

STB_NOINLINE_NOCLONE int unw_test_f3(struct unw_test_capture *c, int x)
{
	UNW_TEST_CAPTURE(&c->regs);
	unw_test_after_capture(c);
	unw_test_sink = x;
	return x + 1;
}

STB_NOINLINE_NOCLONE int unw_test_f2(struct unw_test_capture *c, int x)
{
	int r = unw_test_f3(c, x + 1);
	unw_test_sink = r;
	return r + 2;
}

STB_NOINLINE_NOCLONE int unw_test_f1(struct unw_test_capture *c, int x)
{
	int r = unw_test_f2(c, x + 1);
	unw_test_sink = r;
	return r + 3;
}

static struct unw_test_capture *unw_test_qsort_capture;

/* Captures from inside libc's qsort (code without frame pointers). */
static int unw_test_cmp(const void *a, const void *b)
{
	if (unw_test_qsort_capture) {
		unw_test_capture_here(unw_test_qsort_capture);
		unw_test_qsort_capture = NULL;
	}
	return *(const int *)a - *(const int *)b;
}

STB_NOINLINE_NOCLONE void *unw_test_runner(void *arg)
{
	struct unw_test_capture *c = arg;
	int r, v[64];

	if (c->chain == 2) {
		for (int i = 0; i < 64; i++)
			v[i] = (i * 37) % 64;
		unw_test_qsort_capture = c;
		qsort(v, 64, sizeof(v[0]), unw_test_cmp);
		r = v[3];
	} else {
		r = c->chain ? unw_test_nofp_g1(c, 1) : unw_test_f1(c, 1);
	}
	unw_test_sink = r;
	return NULL;
}

/* Runs the chain on a thread whose stack is made inaccessible afterwards (and
 * stays reserved), so that any read outside the copy faults. */
static void unw_test_run_chain(struct unw_test_capture *c, int chain)
{
	pthread_attr_t a;
	pthread_t t;
	void *stack;

	memset(c, 0, sizeof(*c));
	c->remote_fd = -1;
	c->chain = chain;
	stack = mmap(NULL, UNW_TEST_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(stack != MAP_FAILED);
	c->stack_hi = (uint64_t)(uintptr_t)stack + UNW_TEST_STACK;
	assert_int_equal(pthread_attr_init(&a), 0);
	assert_int_equal(pthread_attr_setstack(&a, stack, UNW_TEST_STACK), 0);
	assert_int_equal(pthread_create(&t, &a, unw_test_runner, c), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	pthread_attr_destroy(&a);
	assert_int_equal(mprotect(stack, UNW_TEST_STACK, PROT_NONE), 0);
	c->stack = stack;
	assert_non_null(c->copy);
}

static void unw_test_release(struct unw_test_capture *c)
{
	munmap(c->stack, UNW_TEST_STACK);
	free(c->copy);
}

struct unw_test_frames {
	unsigned n, stop_at;
	struct stb_unw_frame f[UNW_TEST_MAXF];
};

static int unw_test_collect(const struct stb_unw_frame *f, void *arg)
{
	struct unw_test_frames *fr = arg;

	if (fr->n < UNW_TEST_MAXF)
		fr->f[fr->n] = *f;
	fr->n++;
	return fr->stop_at && fr->n == fr->stop_at;
}

static struct stb_stack_copy unw_test_copy_of(const struct unw_test_capture *c)
{
	return (struct stb_stack_copy){ .addr = c->regs.sp, .bytes = c->copy, .len = c->len };
}

/* Function name of frame i ("?" when unknown). */
static const char *unw_test_name(struct stb_sym *s, const struct unw_test_frames *fr, unsigned i)
{
	struct stb_sym_info info;

	if (stb_sym_lookup(s, fr->f[i].ip, i > 0, &info) < 0 || !info.function)
		return "?";
	return info.function;
}

static void unw_test_expect(struct stb_sym *s, const struct unw_test_frames *fr, unsigned first, ...)
{
	va_list ap;
	const char *want;
	unsigned i = first;

	va_start(ap, first);
	while ((want = va_arg(ap, const char *))) {
		assert_true(i < fr->n);
		const char *got = unw_test_name(s, fr, i);
		if (strcmp(got, want) != 0)
			fail_msg("frame %u: got %s, want %s", i, got, want);
		i++;
	}
	va_end(ap);
}

/* The walk ended by itself at the thread's first frames, in libc
 * (start_thread, clone3: names need libc's debug symbols, modules do not). */
static void unw_test_expect_bottom(struct stb_sym *s, const struct unw_test_frames *fr)
{
	struct stb_sym_info info;

	assert_true(fr->n >= 2 && fr->n < STB_UNW_DEFAULT_DEPTH);
	for (unsigned i = fr->n - 2; i < fr->n; i++) {
		stb_sym_lookup(s, fr->f[i].ip, 1, &info);
		assert_non_null(info.module);
		if (!strstr(info.module, "libc.so"))
			fail_msg("frame %u of %u is in %s, not libc", i, fr->n, info.module);
	}
}

/* The cached-rule walk and a walk stepping every frame with libunwind agree. */
static void unw_test_same_as_libunwind(struct stb_unw_proc *p, const struct stb_regs *regs,
				       const struct stb_stack_copy *copy, const struct unw_test_frames *fast)
{
	struct unw_test_frames slow = { 0 };
	struct stb_regs r = *regs;

	r.flags |= STB_UNW_LIBUNWIND_ONLY;
	stb_unw_walk(p, &r, copy, 0, 0, unw_test_collect, &slow);
	assert_int_equal(slow.n, fast->n);
	for (unsigned i = 0; i < fast->n; i++) {
		assert_int_equal(slow.f[i].ip, fast->f[i].ip);
		assert_int_equal(slow.f[i].sp, fast->f[i].sp);
	}
}

/* (a) A chain with frame pointers: DWARF and FP walks both find every frame. */
static void test_fp_chain(void **state)
{
	struct unw_test_capture c;
	struct unw_test_frames d = { 0 }, f = { 0 };
	struct stb_unw_proc *p;
	struct stb_sym *s;

	(void)state;
	unw_test_run_chain(&c, 0);
	struct stb_stack_copy copy = unw_test_copy_of(&c);
	p = stb_unw_proc_new(0);
	assert_non_null(p);
	s = stb_sym_new(0);
	assert_non_null(s);

	int n = stb_unw_walk(p, &c.regs, &copy, 0, 0, unw_test_collect, &d);
	assert_int_equal(n, (int)d.n);
	unw_test_expect(s, &d, 0, "unw_test_f3", "unw_test_f2", "unw_test_f1", "unw_test_runner", NULL);
	unw_test_expect_bottom(s, &d);
	assert_int_equal(d.f[0].ip, c.regs.ip);
	assert_int_equal(d.f[0].sp, c.regs.sp);
	for (unsigned i = 1; i < 4; i++) {
		assert_int_equal(d.f[i].how, STB_FRAME_DWARF);
		assert_true(d.f[i].sp > d.f[i - 1].sp);
	}
	unw_test_same_as_libunwind(p, &c.regs, &copy, &d);

	n = stb_unw_walk_fp(p, &c.regs, &copy, 0, 0, unw_test_collect, &f);
	assert_int_equal(n, (int)f.n);
	assert_true(n >= 4);
	unw_test_expect(s, &f, 0, "unw_test_f3", "unw_test_f2", "unw_test_f1", "unw_test_runner", NULL);
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(f.f[i].ip, d.f[i].ip);
		assert_int_equal(f.f[i].sp, d.f[i].sp);
		assert_int_equal(f.f[i].how, STB_FRAME_FP);
	}

	struct stb_unw_stats st;
	stb_unw_proc_stats(p, &st);
	assert_int_equal(st.walks, 3);
	assert_true(st.copy_reads > 0);
	assert_true(st.image_reads > 0);
	assert_int_equal(st.frames, 2 * d.n + f.n);
	stb_sym_free(s);
	stb_unw_proc_free(p);
	unw_test_release(&c);
}

/* (b) Code without frame pointers and with garbage in rbp: CFI alone. */
static void test_nofp_chain(void **state)
{
	static const uint8_t fp_prologue[4] = { 0x55, 0x48, 0x89, 0xe5 }; /* push %rbp; mov %rsp,%rbp */
	static const uint8_t endbr64[4] = { 0xf3, 0x0f, 0x1e, 0xfa };
	struct unw_test_capture c;
	struct unw_test_frames d = { 0 }, f = { 0 };
	struct stb_unw_proc *p;
	struct stb_sym *s;
	const uint8_t *code = (const uint8_t *)(uintptr_t)unw_test_nofp_g1;

	(void)state;
	/* The build really omitted the frame pointer there. */
	if (memcmp(code, endbr64, 4) == 0)
		code += 4;
	assert_memory_not_equal(code, fp_prologue, 4);

	unw_test_run_chain(&c, 1);
	struct stb_stack_copy copy = unw_test_copy_of(&c);
	p = stb_unw_proc_new(0);
	assert_non_null(p);
	s = stb_sym_new(0);
	assert_non_null(s);

	stb_unw_walk(p, &c.regs, &copy, 0, 0, unw_test_collect, &d);
	unw_test_expect(s, &d, 0, "unw_test_capture_here", "unw_test_nofp_g3", "unw_test_nofp_g2",
			"unw_test_nofp_g1", "unw_test_runner", NULL);
	unw_test_expect_bottom(s, &d);
	for (unsigned i = 1; i < 5; i++)
		assert_int_equal(d.f[i].how, STB_FRAME_DWARF);
	unw_test_same_as_libunwind(p, &c.regs, &copy, &d);

	/* The rbp chain breaks right after g3. */
	stb_unw_walk_fp(p, &c.regs, &copy, 0, 0, unw_test_collect, &f);
	assert_true(f.n >= 1 && f.n <= 2);
	for (unsigned i = 0; i < f.n; i++)
		assert_string_not_equal(unw_test_name(s, &f, i), "unw_test_nofp_g1");
	stb_sym_free(s);
	stb_unw_proc_free(p);
	unw_test_release(&c);
}

/* Through library code built without frame pointers (qsort's internals in
 * libc, or a sanitizer runtime's qsort interceptor). */
static void test_through_libc(void **state)
{
	struct unw_test_capture c;
	struct unw_test_frames d = { 0 };
	struct stb_sym_info info;
	unsigned i, in_lib = 0;

	(void)state;
	unw_test_run_chain(&c, 2);
	struct stb_stack_copy copy = unw_test_copy_of(&c);
	struct stb_unw_proc *p = stb_unw_proc_new(0);
	assert_non_null(p);
	struct stb_sym *s = stb_sym_new(0);
	assert_non_null(s);
	stb_unw_walk(p, &c.regs, &copy, 0, 0, unw_test_collect, &d);
	unw_test_expect(s, &d, 0, "unw_test_capture_here", "unw_test_cmp", NULL);
	for (i = 2; i < d.n; i++) {
		if (strcmp(unw_test_name(s, &d, i), "unw_test_runner") == 0)
			break;
		stb_sym_lookup(s, d.f[i].ip, 1, &info);
		assert_non_null(info.module); /* a real frame, not garbage */
		in_lib += strstr(info.module, "/test_unwind") == NULL;
	}
	assert_true(i < d.n); /* reached the runner through qsort */
	assert_true(in_lib >= 1);
	unw_test_expect_bottom(s, &d);
	unw_test_same_as_libunwind(p, &c.regs, &copy, &d);
	stb_sym_free(s);
	stb_unw_proc_free(p);
	unw_test_release(&c);
}

/* (c) max_depth, skip and a callback that stops the walk. */
static void test_depth_skip_stop(void **state)
{
	struct unw_test_capture c;
	struct unw_test_frames all = { 0 }, d = { 0 };
	struct stb_unw_stats before, after;
	struct stb_unw_proc *p;

	(void)state;
	unw_test_run_chain(&c, 0);
	struct stb_stack_copy copy = unw_test_copy_of(&c);
	p = stb_unw_proc_new(0);
	assert_non_null(p);
	assert_true(stb_unw_walk(p, &c.regs, &copy, 0, 0, unw_test_collect, &all) >= 6);

	for (int fp = 0; fp < 2; fp++) {
		int (*walk)(struct stb_unw_proc *, const struct stb_regs *, const struct stb_stack_copy *, unsigned,
			    unsigned, stb_unw_frame_fn, void *) = fp ? stb_unw_walk_fp : stb_unw_walk;

		/* Exactly max_depth frames, and no unwinding step beyond them. */
		memset(&d, 0, sizeof(d));
		stb_unw_proc_stats(p, &before);
		assert_int_equal(walk(p, &c.regs, &copy, 0, 4, unw_test_collect, &d), 4);
		stb_unw_proc_stats(p, &after);
		assert_int_equal(d.n, 4);
		assert_int_equal(after.steps - before.steps, 3);
		for (unsigned i = 0; i < 4; i++)
			assert_int_equal(d.f[i].ip, all.f[i].ip);

		/* skip drops the innermost frames; max_depth counts delivered ones. */
		memset(&d, 0, sizeof(d));
		stb_unw_proc_stats(p, &before);
		assert_int_equal(walk(p, &c.regs, &copy, 2, 2, unw_test_collect, &d), 2);
		stb_unw_proc_stats(p, &after);
		assert_int_equal(after.steps - before.steps, 3);
		assert_int_equal(d.f[0].ip, all.f[2].ip);
		assert_int_equal(d.f[1].ip, all.f[3].ip);

		/* A non-zero return stops right there. */
		memset(&d, 0, sizeof(d));
		d.stop_at = 2;
		assert_int_equal(walk(p, &c.regs, &copy, 0, 0, unw_test_collect, &d), 2);
		assert_int_equal(d.n, 2);

		/* Skipping more frames than exist delivers none. */
		memset(&d, 0, sizeof(d));
		assert_int_equal(walk(p, &c.regs, &copy, 1000, 0, unw_test_collect, &d), 0);
		assert_int_equal(d.n, 0);
	}
	assert_int_equal(stb_unw_walk(NULL, &c.regs, &copy, 0, 0, unw_test_collect, &d), -EINVAL);
	assert_int_equal(stb_unw_walk(p, NULL, &copy, 0, 0, unw_test_collect, &d), -EINVAL);
	assert_int_equal(stb_unw_walk_fp(p, &c.regs, &copy, 0, 0, NULL, &d), -EINVAL);
	stb_unw_proc_free(p);
	unw_test_release(&c);
}

/* (d) Another process: regs published through a pipe, stack copied with
 * process_vm_readv, modules from its /proc/PID/maps. */
static void test_remote(void **state)
{
	int to_child[2], from_child[2], status;
	struct stb_regs regs;
	uint64_t stack_hi;
	struct unw_test_frames d = { 0 }, f = { 0 };
	pid_t pid;

	(void)state;
	assert_int_equal(pipe(to_child), 0);
	assert_int_equal(pipe(from_child), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(to_child[0], 0);
		dup2(from_child[1], 1);
		close(to_child[1]);
		close(from_child[0]);
		execl("/proc/self/exe", "test_unwind", "--unwind-helper", (char *)NULL);
		_exit(127);
	}
	close(to_child[0]);
	close(from_child[1]);
	assert_int_equal(read(from_child[0], &regs, sizeof(regs)), (ssize_t)sizeof(regs));
	assert_int_equal(read(from_child[0], &stack_hi, sizeof(stack_hi)), (ssize_t)sizeof(stack_hi));

	size_t len = stack_hi - regs.sp;
	uint8_t *buf = malloc(len);
	assert_non_null(buf);
	struct iovec l = { .iov_base = buf, .iov_len = len };
	struct iovec r = { .iov_base = (void *)(uintptr_t)regs.sp, .iov_len = len };
	assert_int_equal(process_vm_readv(pid, &l, 1, &r, 1, 0), (ssize_t)len);
	struct stb_stack_copy copy = { .addr = regs.sp, .bytes = buf, .len = len };

	struct stb_unw_proc *p = stb_unw_proc_new(pid);
	assert_non_null(p);
	struct stb_sym *s = stb_sym_new(pid);
	assert_non_null(s);
	struct stb_unw_module_info mi;
	assert_int_equal(stb_unw_proc_module(p, regs.ip, &mi), 0);
	assert_non_null(strstr(mi.path, "test_unwind"));
	assert_int_equal(mi.flags & (STB_UNW_MOD_FP_ONLY | STB_UNW_MOD_CHANGED), 0);
	assert_int_equal(mi.build_id_len, 20);
	/* A live target's unwind tables are read at their first use only. */
	struct stb_unw_stats st;
	stb_unw_proc_stats(p, &st);
	assert_int_equal(st.tables_read, 0);

	stb_unw_walk(p, &regs, &copy, 0, 0, unw_test_collect, &d);
	unw_test_expect(s, &d, 0, "unw_test_f3", "unw_test_f2", "unw_test_f1", "unw_test_runner", NULL);
	unw_test_expect_bottom(s, &d);
	unw_test_same_as_libunwind(p, &regs, &copy, &d);
	stb_unw_walk_fp(p, &regs, &copy, 0, 0, unw_test_collect, &f);
	unw_test_expect(s, &f, 0, "unw_test_f3", "unw_test_f2", "unw_test_f1", "unw_test_runner", NULL);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(f.f[i].ip, d.f[i].ip);

	/* Whole walk served from the copy and the local file images. */
	stb_unw_proc_stats(p, &st);
	assert_int_equal(st.target_read_failures, 0);
	assert_true(st.image_reads > 0);
	/* This program's tables and libc's (the bottom frames), not those of
	 * the other modules mapped (libdw, libelf, cmocka, ...). */
	assert_true(st.tables_read >= 1 && st.tables_read <= 3);
	uint64_t read_once = st.tables_read;

	/* Without the copy every stack read goes to the (live) target. */
	memset(&d, 0, sizeof(d));
	stb_unw_walk(p, &regs, NULL, 0, 0, unw_test_collect, &d);
	unw_test_expect(s, &d, 0, "unw_test_f3", "unw_test_f2", "unw_test_f1", "unw_test_runner", NULL);
	stb_unw_proc_stats(p, &st);
	assert_true(st.target_reads > 0);

	/* COPY_ONLY: nothing is read from the target, so without the copy the
	 * walk cannot leave the first frame; with it, all frames are found. */
	struct stb_unw_stats st2;
	struct stb_regs ro = regs;
	ro.flags |= STB_UNW_COPY_ONLY;
	memset(&d, 0, sizeof(d));
	assert_int_equal(stb_unw_walk(p, &ro, NULL, 0, 0, unw_test_collect, &d), 1);
	memset(&d, 0, sizeof(d));
	stb_unw_walk(p, &ro, &copy, 0, 0, unw_test_collect, &d);
	unw_test_expect(s, &d, 0, "unw_test_f3", "unw_test_f2", "unw_test_f1", "unw_test_runner", NULL);
	stb_unw_proc_stats(p, &st2);
	assert_int_equal(st2.target_reads, st.target_reads);
	/* libunwind finds the tables read at first use through the walk's
	 * reads: from the local copies, never from the target. */
	ro.flags |= STB_UNW_LIBUNWIND_ONLY;
	memset(&d, 0, sizeof(d));
	stb_unw_walk(p, &ro, &copy, 0, 0, unw_test_collect, &d);
	unw_test_expect(s, &d, 0, "unw_test_f3", "unw_test_f2", "unw_test_f1", "unw_test_runner", NULL);
	stb_unw_proc_stats(p, &st2);
	assert_int_equal(st2.target_reads, st.target_reads);
	assert_int_equal(st2.tables_read, read_once); /* each module's once */

	stb_sym_free(s);
	stb_unw_proc_free(p);
	close(to_child[1]); /* the helper returns and exits */
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(from_child[0]);
	free(buf);

	errno = 0;
	assert_null(stb_unw_proc_new(pid)); /* reaped: no such process */
	assert_int_equal(errno, ESRCH);
}

/* (e) Reads outside the copy that hit unmapped memory end the walk cleanly. */
static void test_unmapped_reads(void **state)
{
	struct unw_test_capture c;
	struct unw_test_frames d = { 0 };
	struct stb_unw_stats before, after;
	struct stb_unw_proc *p;

	(void)state;
	unw_test_run_chain(&c, 0); /* its stack is inaccessible now */
	p = stb_unw_proc_new(0);
	assert_non_null(p);

	for (int fp = 0; fp < 2; fp++) {
		/* A copy too short for the first frame: the rest faults. */
		struct stb_stack_copy copy = { .addr = c.regs.sp, .bytes = c.copy, .len = 8 };
		memset(&d, 0, sizeof(d));
		stb_unw_proc_stats(p, &before);
		int n = fp ? stb_unw_walk_fp(p, &c.regs, &copy, 0, 0, unw_test_collect, &d)
			   : stb_unw_walk(p, &c.regs, &copy, 0, 0, unw_test_collect, &d);
		stb_unw_proc_stats(p, &after);
		assert_true(n >= 1 && n <= 3);
		assert_int_equal(d.f[0].ip, c.regs.ip);
		assert_true(after.target_read_failures > before.target_read_failures);
	}

	/* Registers pointing at nothing at all. */
	struct stb_regs bad = { .ip = 0x1000, .sp = 0x2000, .bp = 0x2010 };
	memset(&d, 0, sizeof(d));
	assert_int_equal(stb_unw_walk(p, &bad, NULL, 0, 0, unw_test_collect, &d), 1);
	memset(&d, 0, sizeof(d));
	assert_int_equal(stb_unw_walk_fp(p, &bad, NULL, 0, 0, unw_test_collect, &d), 1);
	/* ip 0 is the bottom of every stack. */
	bad.ip = 0;
	memset(&d, 0, sizeof(d));
	assert_int_equal(stb_unw_walk(p, &bad, NULL, 0, 0, unw_test_collect, &d), 0);
	stb_unw_proc_free(p);
	unw_test_release(&c);
}

/* A context as published by the context switch: ip is a return address. */
static void test_switch_regs(void **state)
{
	struct unw_test_capture c;
	struct unw_test_frames all = { 0 }, d = { 0 };
	struct stb_regs regs;
	struct stb_unw_proc *p;
	struct stb_sym *s;
	uint64_t words[8];

	(void)state;
	/* Saved registers are read from below sp (abi.h). */
	for (unsigned i = 0; i < 8; i++)
		words[i] = 0x1000 + i;
	struct stb_stack_copy fake = { .addr = 0x7000, .bytes = words, .len = sizeof(words) };
	stb_unw_regs_from_switch(&regs, 0x1234, 0x7000 + 64, 0x5678, &fake);
	assert_int_equal(regs.flags, STB_UNW_IP_IS_RETURN);
	assert_int_equal(regs.ip, 0x1234);
	assert_int_equal(regs.bp, 0x5678);
	assert_int_equal(regs.bx, 0x1000 + 5);  /* sp - 24 */
	assert_int_equal(regs.r12, 0x1000 + 4); /* sp - 32 */
	assert_int_equal(regs.r15, 0x1000 + 1); /* sp - 56 */
	stb_unw_regs_from_switch(&regs, 0x1234, 0x7000 + 16, 0x5678, &fake);
	assert_int_equal(regs.bx, 0); /* not covered by the copy: unknown */

	unw_test_run_chain(&c, 0);
	struct stb_stack_copy copy = unw_test_copy_of(&c);
	p = stb_unw_proc_new(0);
	assert_non_null(p);
	s = stb_sym_new(0);
	assert_non_null(s);
	stb_unw_walk(p, &c.regs, &copy, 0, 0, unw_test_collect, &all);
	assert_true(all.n >= 4);
	/* Resume "as if f3 had returned": in f2, at f3's return address, with
	 * f2's rbp (saved by f3's prologue at f3's rbp). */
	uint64_t f2_bp;
	memcpy(&f2_bp, c.copy + (c.regs.bp - c.regs.sp), 8);
	stb_unw_regs_from_switch(&regs, all.f[1].ip, all.f[1].sp, f2_bp, &copy);
	stb_unw_walk(p, &regs, &copy, 0, 0, unw_test_collect, &d);
	unw_test_expect(s, &d, 0, "unw_test_f2", "unw_test_f1", "unw_test_runner", NULL);
	assert_int_equal(d.f[0].ip, all.f[1].ip);
	assert_int_equal(d.f[1].ip, all.f[2].ip);
	memset(&d, 0, sizeof(d));
	stb_unw_walk_fp(p, &regs, &copy, 0, 0, unw_test_collect, &d);
	unw_test_expect(s, &d, 0, "unw_test_f2", "unw_test_f1", "unw_test_runner", NULL);
	stb_sym_free(s);
	stb_unw_proc_free(p);
	unw_test_release(&c);
}

/* Module lookup, and a module loaded after stb_unw_proc_new. */
static void test_modules_refresh(void **state)
{
	struct stb_unw_module_info mi;
	struct stb_unw_stats before, after;
	struct stb_unw_proc *p;

	(void)state;
	p = stb_unw_proc_new(0);
	assert_non_null(p);
	assert_int_equal(stb_unw_proc_module(p, (uint64_t)(uintptr_t)unw_test_f1, &mi), 0);
	assert_non_null(strstr(mi.path, "test_unwind"));
	assert_int_equal(mi.build_id_len, 20);
	assert_int_equal(mi.flags & STB_UNW_MOD_FP_ONLY, 0);
	assert_true(mi.lo <= (uint64_t)(uintptr_t)unw_test_f1 && (uint64_t)(uintptr_t)unw_test_f1 < mi.hi);
	assert_int_equal(stb_unw_proc_module(p, (uint64_t)(uintptr_t)getpid, &mi), 0);
	assert_non_null(strstr(mi.path, "libc.so"));
	assert_int_equal(stb_unw_proc_module(p, getauxval(AT_SYSINFO_EHDR) + 0x800, &mi), 0);
	assert_string_equal(mi.path, "[vdso]");
	assert_true(mi.flags & STB_UNW_MOD_VDSO);
	assert_int_equal(mi.flags & STB_UNW_MOD_FP_ONLY, 0);
	assert_int_equal(stb_unw_proc_module(p, 0x10, &mi), -ENOENT);

	void *h = dlopen("libcrypt.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h)
		skip();
	uint64_t fn = (uint64_t)(uintptr_t)dlsym(h, "crypt");
	assert_true(fn != 0);
	if (stb_unw_proc_module(p, fn, &mi) == 0) {
		/* Loaded before the test began (by a library): nothing to check. */
		dlclose(h);
		stb_unw_proc_free(p);
		skip();
	}
	/* A walk that meets an ip in no known module refreshes the table. */
	struct timespec ts = { 0, 3 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	stb_unw_proc_stats(p, &before);
	struct stb_regs regs = { .ip = fn, .sp = 0x2000 };
	struct unw_test_frames d = { 0 };
	stb_unw_walk(p, &regs, NULL, 0, 0, unw_test_collect, &d);
	stb_unw_proc_stats(p, &after);
	assert_int_equal(after.refreshes, before.refreshes + 1);
	assert_int_equal(stb_unw_proc_module(p, fn, &mi), 0);
	assert_non_null(strstr(mi.path, "libcrypt"));
	assert_int_equal(mi.flags & STB_UNW_MOD_FP_ONLY, 0);
	/* Unloaded: gone after an explicit refresh. */
	dlclose(h);
	if (!dlopen("libcrypt.so.1", RTLD_NOW | RTLD_NOLOAD)) {
		assert_int_equal(stb_unw_proc_refresh(p), 0);
		assert_int_equal(stb_unw_proc_module(p, fn, &mi), -ENOENT);
	}
	stb_unw_proc_free(p);
	stb_unw_proc_free(NULL);
}

/* Several threads walking one proc at once. */
struct unw_test_mt {
	struct stb_unw_proc *p;
	struct unw_test_capture *c;
	const struct unw_test_frames *want;
	int bad;
};

static void *unw_test_mt_main(void *arg)
{
	struct unw_test_mt *m = arg;
	struct stb_stack_copy copy = unw_test_copy_of(m->c);

	for (int i = 0; i < 2000; i++) {
		struct unw_test_frames d = { 0 };
		stb_unw_walk(m->p, &m->c->regs, &copy, 0, 0, unw_test_collect, &d);
		if (d.n != m->want->n)
			m->bad++;
		for (unsigned k = 0; k < d.n && k < m->want->n; k++)
			if (d.f[k].ip != m->want->f[k].ip || d.f[k].sp != m->want->f[k].sp ||
			    d.f[k].how != m->want->f[k].how)
				m->bad++;
		if (i % 500 == 0)
			stb_unw_proc_refresh(m->p);
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct unw_test_capture c;
	struct unw_test_frames want = { 0 };
	struct unw_test_mt m[4];
	pthread_t t[4];

	(void)state;
	unw_test_run_chain(&c, 0);
	struct stb_stack_copy copy = unw_test_copy_of(&c);
	struct stb_unw_proc *p = stb_unw_proc_new(0);
	assert_non_null(p);
	stb_unw_walk(p, &c.regs, &copy, 0, 0, unw_test_collect, &want);
	assert_true(want.n >= 6);
	for (int i = 0; i < 4; i++) {
		m[i] = (struct unw_test_mt){ .p = p, .c = &c, .want = &want };
		assert_int_equal(pthread_create(&t[i], NULL, unw_test_mt_main, &m[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(m[i].bad, 0);
	}
	stb_unw_proc_free(p);
	unw_test_release(&c);
}

/* Helper mode for test_remote: run the chain and block in f3. */
static int unw_test_helper(void)
{
	static struct unw_test_capture c;
	pthread_attr_t a;
	pthread_t t;
	void *stack = mmap(NULL, UNW_TEST_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (stack == MAP_FAILED)
		return 2;
	c.remote_fd = 1;
	c.stack_hi = (uint64_t)(uintptr_t)stack + UNW_TEST_STACK;
	if (pthread_attr_init(&a) || pthread_attr_setstack(&a, stack, UNW_TEST_STACK) ||
	    pthread_create(&t, &a, unw_test_runner, &c) || pthread_join(t, NULL))
		return 2;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--unwind-helper") == 0)
		return unw_test_helper();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fp_chain),
		cmocka_unit_test(test_nofp_chain),
		cmocka_unit_test(test_through_libc),
		cmocka_unit_test(test_depth_skip_stop),
		cmocka_unit_test(test_remote),
		cmocka_unit_test(test_unmapped_reads),
		cmocka_unit_test(test_switch_regs),
		cmocka_unit_test(test_modules_refresh),
		cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
