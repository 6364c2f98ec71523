/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread stacks: each class gives about its documented usable size, and a
 * bthread overflowing BTHREAD_ATTR_SMALL dies of SIGSEGV on the guard page.
 * The death runs in a child (this binary with --overflow) whose handler
 * reports fault address and stack bounds, then re-raises; sanitizers are told
 * (handle_segv=0) to leave SIGSEGV alone.
 */
#include "test_util.h"

#include <signal.h>
#include <sys/wait.h>

#include <bthread/bthread.h>

#include "internal.h"

/* ---- stack sizes ---- */

struct stb_use_job {
	size_t bytes; /* stack to use in one frame */
	int ok;
};

static __attribute__((noinline)) int stb_touch(volatile char *buf, size_t n)
{
	int sum = 0;
	for (size_t i = 0; i < n; i += 512)
		buf[i] = (char)i;
	for (size_t i = 0; i < n; i += 512)
		sum += buf[i];
	return sum;
}

static void *stb_use_stack(void *arg)
{
	struct stb_use_job *j = arg;
	volatile char *buf = __builtin_alloca(j->bytes);
	stb_touch(buf, j->bytes);
	/* The bthread's own stack, not its worker's, holds the frame. */
	struct stb_task *t = stb_task_self();
	const char *p = (const char *)buf;
	j->ok = t && t->stack && p >= (const char *)t->stack->lo &&
		p + j->bytes <= (const char *)t->stack->lo + t->stack->size;
	return NULL;
}

static void test_stack_sizes(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	/* Room left for the runtime's and the sanitizers' own frames. */
	const struct {
		const bthread_attr_t *attr;
		size_t use;
	} cases[] = {
		{&BTHREAD_ATTR_SMALL, 20u << 10},
		{&BTHREAD_ATTR_NORMAL, 900u << 10},
		{NULL, 900u << 10},
		{&BTHREAD_ATTR_LARGE, 7u << 20},
	};
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct stb_use_job j = {.bytes = cases[i].use};
		bthread_t t;
		assert_int_equal(bthread_start_background(&t, cases[i].attr, stb_use_stack, &j), 0);
		assert_int_equal(bthread_join(t, NULL), 0);
		assert_int_equal(j.ok, 1);
	}
	STB_TEST_END();
}

/* ---- the overflow child ---- */

static const char *volatile stb_guard_lo;   /* lowest usable byte of the stack */
static const char *volatile stb_guard_hi;

static void stb_put_hex(char **p, uint64_t v)
{
	static const char digits[] = "0123456789abcdef";
	*(*p)++ = '0';
	*(*p)++ = 'x';
	for (int s = 60; s >= 0; s -= 4)
		*(*p)++ = digits[(v >> s) & 0xf];
}

static void stb_put_str(char **p, const char *s)
{
	while (*s)
		*(*p)++ = *s++;
}

/* Async-signal-safe: reports "fault=<addr> lo=<lo> hi=<hi>", then dies of SIGSEGV. */
static void stb_segv_report(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	char line[128], *p = line;
	stb_put_str(&p, "fault=");
	stb_put_hex(&p, (uint64_t)(uintptr_t)si->si_addr);
	stb_put_str(&p, " lo=");
	stb_put_hex(&p, (uint64_t)(uintptr_t)stb_guard_lo);
	stb_put_str(&p, " hi=");
	stb_put_hex(&p, (uint64_t)(uintptr_t)stb_guard_hi);
	*p++ = '\n';
	ssize_t w = write(STDOUT_FILENO, line, (size_t)(p - line));
	(void)w;
	signal(sig, SIG_DFL);
	raise(sig);
}

static int (*volatile stb_recurse_ptr)(int depth);

/* Small frames (a guard page is 4 KiB): each one is touched, none is skipped. */
static __attribute__((noinline)) int stb_recurse(int depth)
{
	volatile char frame[256];
	frame[0] = (char)depth;
	frame[255] = (char)depth;
	return stb_recurse_ptr(depth + 1) + frame[0] + frame[255];
}

static void *stb_overflow_main(void *arg)
{
	(void)arg;
	struct stb_task *t = stb_task_self();
	stb_guard_lo = t->stack->lo;
	stb_guard_hi = (const char *)t->stack->lo + t->stack->size;
	/* The handler needs a stack of its own on this worker thread. */
	static char altstack[64 << 10];
	stack_t ss = {.ss_sp = altstack, .ss_size = sizeof(altstack), .ss_flags = 0};
	if (sigaltstack(&ss, NULL) != 0)
		return (void *)1;
	ssize_t w = write(STDOUT_FILENO, "recursing\n", 10);
	(void)w;
	return (void *)(intptr_t)stb_recurse_ptr(0);
}

static int stb_overflow_child(void)
{
	stb_recurse_ptr = stb_recurse;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = stb_segv_report;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, NULL);
	bthread_t t;
	if (bthread_start_background(&t, &BTHREAD_ATTR_SMALL, stb_overflow_main, NULL) != 0)
		return 2;
	bthread_join(t, NULL);
	return 3; /* survived: the test fails */
}

/* Appends opt to the sanitizer option variable name (keeping what is set). */
static void stb_add_sanitizer_opt(const char *name, const char *opt)
{
	const char *old = getenv(name);
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s%s%s", old && *old ? old : "", old && *old ? ":" : "", opt);
	setenv(name, buf, 1);
}

static void test_guard_page_overflow(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	int out[2];
	assert_int_equal(pipe(out), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(out[1], STDOUT_FILENO);
		close(out[0]);
		close(out[1]);
		/* Let SIGSEGV reach our handler / the default action, not a sanitizer report. */
		stb_add_sanitizer_opt("ASAN_OPTIONS", "handle_segv=0:detect_leaks=0");
		stb_add_sanitizer_opt("TSAN_OPTIONS", "handle_segv=0");
		stb_add_sanitizer_opt("UBSAN_OPTIONS", "handle_segv=0");
		execl("/proc/self/exe", "test_stack", "--overflow", (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	char text[512];
	size_t len = 0;
	for (;;) {
		ssize_t k = read(out[0], text + len, sizeof(text) - 1 - len);
		if (k <= 0)
			break;
		len += (size_t)k;
	}
	text[len] = '\0';
	close(out[0]);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	print_message("    child: %s", text);
	if (!WIFSIGNALED(status))
		fail_msg("child exited with %d instead of dying", WEXITSTATUS(status));
	assert_int_equal(WTERMSIG(status), SIGSEGV);
	assert_non_null(strstr(text, "recursing\n"));
	/* It died on the guard page just below its stack. */
	unsigned long long fault = 0, lo = 0, hi = 0;
	const char *f = strstr(text, "fault=");
	assert_non_null(f);
	assert_int_equal(sscanf(f, "fault=%llx lo=%llx hi=%llx", &fault, &lo, &hi), 3);
	assert_int_equal(hi - lo, 32u << 10);
	assert_true(fault < lo);
	assert_true(fault >= lo - 4096);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--overflow") == 0)
		return stb_overflow_child();
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stack_sizes),
		cmocka_unit_test(test_guard_page_overflow),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
