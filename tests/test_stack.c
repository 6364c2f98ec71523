/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread stacks: each class gives about its documented usable size; the
 * first frames of stacks carved one after another start at different cache
 * lines of a page (colors), and the table publishes that top; a
 * bthread overflowing BTHREAD_ATTR_SMALL dies of SIGSEGV on the guard page,
 * with guard markers (MADV_GUARD_INSTALL) and with mprotect guards; a million
 * parked small bthreads fit the default vm.max_map_count; and when the
 * mapping budget is used up, bthread_start_* fails with EAGAIN and a message
 * naming vm.max_map_count while the runtime goes on. The deaths and the
 * budget run in children (this binary with --overflow, --budget), which set
 * the test-only knobs of bthread_test before the first stack; sanitizers are
 * told (handle_segv=0) to leave SIGSEGV alone.
 */
#include "test_util.h"

#include <signal.h>
#include <sys/wait.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>

#include "test_internal.h"

/* Test-only knobs of stack.c (bthread_test). */
extern int stb_test_stack_force_mprotect;
extern long stb_test_stack_map_budget;

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

/* ---- colors ---- */

#define STB_COLOR_TASKS 64

struct stb_color_seen {
	const char *lo, *top, *local;
	uint64_t pub_lo, pub_hi;
};

static struct stb_color_seen stb_colors[STB_COLOR_TASKS];
static int *stb_color_butex;

static void *stb_color_main(void *arg)
{
	struct stb_color_seen *c = arg;
	volatile char here = 0;
	struct stb_task *t = stb_task_self();
	c->lo = t->stack->lo;
	c->top = t->stack->top;
	c->local = (const char *)&here;
	c->pub_lo = __atomic_load_n(&t->pub->stack_lo, __ATOMIC_RELAXED);
	c->pub_hi = __atomic_load_n(&t->pub->stack_hi, __ATOMIC_RELAXED);
	while (__atomic_load_n(stb_color_butex, __ATOMIC_ACQUIRE) == 0)
		butex_wait(stb_color_butex, 0, NULL);
	return NULL;
}

/*
 * 64 small bthreads alive at once: every one has at least its class's 32 KiB
 * from its lowest byte to its top, its frames below that top, the top on a
 * cache line and published as its stack_hi -- and the tops spread over many
 * lines of a page (a fresh process carves 32 colors in turn; stacks pooled by
 * the tests before may bring others).
 */
static void test_stack_colors(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	stb_color_butex = butex_create();
	assert_non_null(stb_color_butex);
	bthread_t tids[STB_COLOR_TASKS];
	for (int i = 0; i < STB_COLOR_TASKS; i++)
		assert_int_equal(bthread_start_background(&tids[i], &BTHREAD_ATTR_SMALL,
							  stb_color_main, &stb_colors[i]),
				 0);
	assert_true(STB_WAIT_UNTIL(stb_test_butex_waiters(stb_color_butex) == STB_COLOR_TASKS,
				   10000));
	bool seen[4096 / 64] = {false};
	unsigned colors = 0;
	for (int i = 0; i < STB_COLOR_TASKS; i++) {
		const struct stb_color_seen *c = &stb_colors[i];
		assert_true(c->top - c->lo >= 32 << 10);
		assert_true(c->top - c->lo <= (32 << 10) + 4096);
		assert_int_equal((uintptr_t)c->top % 64, 0);
		assert_true(c->local > c->lo && c->local < c->top);
		if (stb_table_task(0)) { /* a table: the entry says the same */
			assert_true(c->pub_lo == (uint64_t)(uintptr_t)c->lo);
			assert_true(c->pub_hi == (uint64_t)(uintptr_t)c->top);
		}
		unsigned line = (unsigned)((uintptr_t)c->top % 4096 / 64);
		colors += !seen[line];
		seen[line] = true;
	}
	print_message("    %d small stacks alive: their tops on %u distinct lines of a page\n",
		      STB_COLOR_TASKS, colors);
	assert_true(colors >= 16);
	__atomic_store_n(stb_color_butex, 1, __ATOMIC_RELEASE);
	butex_wake_all(stb_color_butex);
	for (int i = 0; i < STB_COLOR_TASKS; i++)
		assert_int_equal(bthread_join(tids[i], NULL), 0);
	butex_destroy(stb_color_butex);
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
	stb_guard_hi = t->stack->top;
	/* The handler needs a stack of its own on this worker thread. */
	static char altstack[64 << 10];
	stack_t ss = {.ss_sp = altstack, .ss_size = sizeof(altstack), .ss_flags = 0};
	if (sigaltstack(&ss, NULL) != 0)
		return (void *)1;
	ssize_t w = write(STDOUT_FILENO, "recursing\n", 10);
	(void)w;
	return (void *)(intptr_t)stb_recurse_ptr(0);
}

static int stb_overflow_child(bool mprotect_guards)
{
	stb_test_stack_force_mprotect = mprotect_guards;
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

static void guard_page_overflow(const char *mode)
{
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
		execl("/proc/self/exe", "test_stack", mode, (char *)NULL);
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
	/* Its class's size at least, with at most the page of its color above. */
	assert_true(hi - lo >= 32u << 10 && hi - lo <= (32u << 10) + 4096);
	assert_true(fault < lo);
	assert_true(fault >= lo - 4096);
	STB_TEST_END();
}

/* Guard markers of MADV_GUARD_INSTALL (this kernel), then mprotect guards. */
static void test_guard_page_overflow(void **state)
{
	(void)state;
	guard_page_overflow("--overflow");
}

static void test_guard_page_overflow_mprotect(void **state)
{
	(void)state;
	guard_page_overflow("--overflow-mprotect");
}

/* ---- a million parked small bthreads ---- */

/* The mappings of this process (lines of /proc/self/maps). */
static long stb_count_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return -1;
	long n = 0;
	int c;
	while ((c = getc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

static long stb_max_map_count(void)
{
	long v = -1;
	FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static int *stb_park_butex;
static long stb_parked;

static void *stb_park_here(void *arg)
{
	(void)arg;
	__atomic_fetch_add(&stb_parked, 1, __ATOMIC_RELAXED);
	while (__atomic_load_n(stb_park_butex, __ATOMIC_ACQUIRE) == 0)
		butex_wait(stb_park_butex, 0, NULL);
	return NULL;
}

/*
 * 1,000,000 BTHREAD_ATTR_SMALL bthreads parked at once (100,000 under ASan,
 * still far beyond the ~32,000 guarded stacks that mprotect guards allow
 * with the default vm.max_map_count; 4,000 under TSan, which cannot track
 * more than 8,128 fibers), each on its own stack.
 */
static void test_million_parked_small(void **state)
{
	(void)state;
	enum { N = STB_TEST_TSAN_SCALE(STB_TEST_SCALE(1000000, 100000), 4000) };
	STB_TEST_BEGIN(STB_TEST_SCALE(300, 600));
	long max = stb_max_map_count();
	bthread_t *tids = malloc(N * sizeof(*tids));
	assert_non_null(tids);
	stb_park_butex = butex_create();
	assert_non_null(stb_park_butex);
	__atomic_store_n(&stb_parked, 0, __ATOMIC_RELEASE);
	uint64_t t0 = stb_now_ns();
	for (long i = 0; i < N; i++) {
		int rc = bthread_start_background(&tids[i], &BTHREAD_ATTR_SMALL, stb_park_here, NULL);
		if (rc != 0)
			fail_msg("start #%ld of %d: %d (%s)", i, N, rc, strerror(rc));
	}
	double start_ms = stb_test_ms_since(t0);
	assert_true(STB_WAIT_UNTIL(stb_test_butex_waiters(stb_park_butex) == N, 240000));
	double park_ms = stb_test_ms_since(t0);
	long maps = stb_count_maps();
	print_message("    %d small bthreads parked: started in %.0f ms, all parked after %.0f ms; "
		      "%ld mappings (vm.max_map_count %ld)\n",
		      N, start_ms, park_ms, maps, max);
	assert_true(maps > 0 && maps < 20000);
	assert_true(max < 0 || maps < max / 2);
	__atomic_store_n(stb_park_butex, 1, __ATOMIC_RELEASE);
	assert_int_equal(butex_wake_all(stb_park_butex), N);
	for (long i = 0; i < N; i++)
		assert_int_equal(bthread_join(tids[i], NULL), 0);
	print_message("    woken and joined after %.0f ms\n", stb_test_ms_since(t0));
	butex_destroy(stb_park_butex);
	free(tids);
	STB_TEST_END();
}

/* ---- out of mappings: a clean failure ---- */

static void *stb_budget_park(void *arg)
{
	int *b = arg;
	while (__atomic_load_n(b, __ATOMIC_ACQUIRE) == 0)
		butex_wait(b, 0, NULL);
	return NULL;
}

static void *stb_budget_ping(void *arg)
{
	__atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Child (--budget): mprotect guards with a budget of 64 mappings. Starts
 * parked bthreads until a start fails; prints "started N err E" on stdout.
 * Then the runtime must go on: a BTHREAD_ATTR_PTHREAD bthread (no stack)
 * still runs, the parked ones are woken and joined, and a new start reuses a
 * freed stack. Exit 0 when all of that held.
 */
static int stb_budget_child(void)
{
	stb_test_stack_force_mprotect = 1;
	stb_test_stack_map_budget = 64;
	int *b = butex_create();
	if (!b)
		return 10;
	enum { MAX = 1000 };
	static bthread_t tids[MAX];
	int n = 0, err = 0;
	while (n < MAX) {
		err = bthread_start_background(&tids[n], &BTHREAD_ATTR_SMALL, stb_budget_park, b);
		if (err != 0)
			break;
		n++;
	}
	printf("started %d err %d\n", n, err);
	fflush(stdout);
	/* A second failure in a row is just as clean (and not reported again). */
	bthread_t t;
	if (bthread_start_background(&t, NULL, stb_budget_park, b) != EAGAIN)
		return 11;
	int ran = 0;
	if (bthread_start_background(&t, &BTHREAD_ATTR_PTHREAD, stb_budget_ping, &ran) != 0 ||
	    bthread_join(t, NULL) != 0 || !ran)
		return 12;
	__atomic_store_n(b, 1, __ATOMIC_RELEASE);
	butex_wake_all(b);
	for (int i = 0; i < n; i++)
		if (bthread_join(tids[i], NULL) != 0)
			return 13;
	ran = 0;
	if (bthread_start_background(&t, &BTHREAD_ATTR_SMALL, stb_budget_ping, &ran) != 0 ||
	    bthread_join(t, NULL) != 0 || !ran)
		return 14;
	return 0;
}

static void test_out_of_mappings(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	int out[2], err[2];
	assert_int_equal(pipe(out), 0);
	assert_int_equal(pipe(err), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(out[1], STDOUT_FILENO);
		dup2(err[1], STDERR_FILENO);
		close(out[0]);
		close(out[1]);
		close(err[0]);
		close(err[1]);
		execl("/proc/self/exe", "test_stack", "--budget", (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	char text[512], msg[4096];
	size_t tl = 0, ml = 0;
	ssize_t k;
	while ((k = read(out[0], text + tl, sizeof(text) - 1 - tl)) > 0)
		tl += (size_t)k;
	while ((k = read(err[0], msg + ml, sizeof(msg) - 1 - ml)) > 0)
		ml += (size_t)k;
	text[tl] = '\0';
	msg[ml] = '\0';
	close(out[0]);
	close(err[0]);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	print_message("    child: %s    stderr: %s", text, msg);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	int n = -1, e = -1;
	assert_int_equal(sscanf(text, "started %d err %d", &n, &e), 2);
	assert_int_equal(e, EAGAIN);
	/* 64 mappings: one slab and two per guarded stack. */
	assert_true(n >= 20 && n <= 32);
	assert_non_null(strstr(msg, "vm.max_map_count"));
	assert_non_null(strstr(msg, "MADV_GUARD_INSTALL"));
	/* Said once, not for every failed start. */
	assert_null(strstr(strstr(msg, "vm.max_map_count") + 1, "stb: cannot start"));
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--overflow") == 0)
		return stb_overflow_child(false);
	if (argc > 1 && strcmp(argv[1], "--overflow-mprotect") == 0)
		return stb_overflow_child(true);
	if (argc > 1 && strcmp(argv[1], "--budget") == 0)
		return stb_budget_child();
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stack_sizes),
		cmocka_unit_test(test_stack_colors),
		cmocka_unit_test(test_guard_page_overflow),
		cmocka_unit_test(test_guard_page_overflow_mprotect),
		cmocka_unit_test(test_out_of_mappings),
		cmocka_unit_test(test_million_parked_small),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
