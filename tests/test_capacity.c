/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A shared task table smaller than the number of live bthreads
 * (STB_TABLE_CAPACITY=64 in the test's environment): starting more never
 * fails, the extra tasks are counted as untraceable and the runtime says so
 * once on stderr, they are still traced in process, and stb-bpf-loader (when
 * given, as root) exits 1 saying how many it cannot see, in every format.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "bthread/bthread.h"
#include "bthread/butex.h"
#include "stb/abi.h"
#include "stb/stb.h"

#define STB_CAP_TASKS 300

extern struct stb_abi_header *stb_task_table;

static int *stb_gate_butex;

__attribute__((noinline)) static void stb_cap_wait(void)
{
	while (__atomic_load_n(stb_gate_butex, __ATOMIC_ACQUIRE) == 0)
		butex_wait(stb_gate_butex, 0, NULL);
	__asm__ volatile("");
}

__attribute__((noinline)) static void *stb_cap_main(void *arg)
{
	stb_cap_wait();
	__asm__ volatile("");
	return arg;
}

static bool stb_has_frame(const struct stb_frame *f, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (f[i].symbol && strcmp(f[i].symbol, name) == 0)
			return true;
	return false;
}

/* Runs the loader on ourselves with --state suspended and the format fmt;
 * returns its stdout (caller frees) or NULL, its exit status in *code and
 * its stderr in err[errlen]. */
static char *stb_run_loader(const char *loader, const char *fmt, int *code, char *err,
			    size_t errlen)
{
	char errpath[] = "/tmp/stb_test_capacity_err_XXXXXX";
	int efd = mkstemp(errpath);
	if (efd < 0)
		return NULL;
	unlink(errpath);
	int p[2];
	if (pipe(p) != 0)
		return NULL;
	pid_t pid = fork();
	if (pid == 0) {
		char spid[16];
		snprintf(spid, sizeof(spid), "%d", (int)getppid());
		dup2(p[1], 1);
		dup2(efd, 2);
		close(p[0]);
		close(p[1]);
		execl(loader, loader, "--pid", spid, "--state", "suspended", "--format", fmt,
		      (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	size_t cap = 1 << 20, len = 0;
	char *out = malloc(cap);
	ssize_t n;
	while (out && (n = read(p[0], out + len, cap - 1 - len)) > 0)
		len += (size_t)n;
	close(p[0]);
	int status;
	waitpid(pid, &status, 0);
	ssize_t e = pread(efd, err, errlen - 1, 0);
	err[e > 0 ? e : 0] = '\0';
	close(efd);
	if (!out)
		return NULL;
	out[len] = '\0';
	*code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
	return out;
}

/* How often needle is in text. */
static unsigned stb_count(const char *text, const char *needle)
{
	unsigned n = 0;
	for (const char *q = strstr(text, needle); q; q = strstr(q + 1, needle))
		n++;
	return n;
}

static void test_beyond_capacity(void **state)
{
	(void)state;
	/* The runtime's stderr, from before its start. */
	char errpath[] = "/tmp/stb_test_capacity_rt_XXXXXX";
	int efd = mkstemp(errpath);
	assert_true(efd >= 0);
	unlink(errpath);
	int saved = dup(2);
	assert_true(saved >= 0);
	assert_int_equal(dup2(efd, 2), 2);
	stb_gate_butex = butex_create();
	assert_non_null(stb_gate_butex);
	bthread_t *ids = calloc(STB_CAP_TASKS, sizeof(*ids));
	assert_non_null(ids);
	for (int i = 0; i < STB_CAP_TASKS; i++)
		assert_int_equal(bthread_start_background(&ids[i], &BTHREAD_ATTR_SMALL, stb_cap_main,
							  (void *)(intptr_t)i), 0);
	assert_non_null(stb_task_table);
	assert_int_equal(stb_task_table->task_capacity, 64);
	/* Once, naming the variable, whatever the number of tasks beyond. */
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	char rt[4096];
	ssize_t k = pread(efd, rt, sizeof(rt) - 1, 0);
	close(efd);
	rt[k > 0 ? k : 0] = '\0';
	if (stb_count(rt, "more bthreads than the task table's 64 slots") != 1 ||
	    !strstr(rt, "STB_TABLE_CAPACITY="))
		fail_msg("the runtime's stderr: %s", rt);

	/* Wait until every task is blocked. */
	for (int i = 0; i < STB_CAP_TASKS; i++) {
		struct stb_trace_info info;
		struct stb_frame fr[32];
		int n;
		for (int tries = 0;; tries++) {
			n = stb_trace(ids[i], NULL, fr, 32, &info);
			if (n > 0 && info.state == STB_TASK_SUSPENDED && stb_has_frame(fr, n, "stb_cap_wait"))
				break;
			assert_true(tries < 2000);
			usleep(1000);
		}
		/* Tasks beyond the capacity are traced in process all the same. */
		assert_true(stb_has_frame(fr, n, "stb_cap_main"));
	}
	struct stb_stats st;
	assert_int_equal(stb_get_stats(&st), 0);
	uint32_t beyond = 0;
	for (int i = 0; i < STB_CAP_TASKS; i++)
		beyond += STB_ABI_SLOT(ids[i]) >= 64;
	assert_true(beyond >= STB_CAP_TASKS - 64);
	assert_true(st.untraceable >= beyond);

	const char *loader = getenv("STB_LOADER");
	if (loader && *loader && geteuid() == 0) {
		/* Exit 1, and how many, in every format: 300 tasks and a few of
		 * the runtime's own need 512 slots. */
		char want[96], err[4096];
		snprintf(want, sizeof(want), "%u bthreads were created beyond the table capacity (64)",
			 (unsigned)st.untraceable);
		int code;
		char *out = stb_run_loader(loader, "text", &code, err, sizeof(err));
		assert_non_null(out);
		assert_int_equal(code, 1);
		if (!strstr(out, want) || !strstr(out, "STB_TABLE_CAPACITY=512") ||
		    !strstr(err, want) || !strstr(out, "the output is partial"))
			fail_msg("text: %s\nstderr: %s", out, err);
		/* The traceable ones are all there. */
		assert_non_null(strstr(out, "stb_cap_wait"));
		free(out);
		out = stb_run_loader(loader, "json", &code, err, sizeof(err));
		assert_non_null(out);
		assert_int_equal(code, 1);
		char count[64];
		snprintf(count, sizeof(count), "\"untraceable\": %u", (unsigned)st.untraceable);
		if (!strstr(out, count) || !strstr(out, "\"complete\": false") || !strstr(out, want))
			fail_msg("json: %s", out);
		free(out);
		out = stb_run_loader(loader, "folded", &code, err, sizeof(err));
		assert_non_null(out);
		assert_int_equal(code, 1);
		snprintf(count, sizeof(count), "untraceable;[beyond the table capacity] %u",
			 (unsigned)st.untraceable);
		if (!strstr(out, count))
			fail_msg("folded: %s", out);
		free(out);
	}

	__atomic_store_n(stb_gate_butex, 1, __ATOMIC_RELEASE);
	butex_wake_all(stb_gate_butex);
	for (int i = 0; i < STB_CAP_TASKS; i++) {
		void *ret = NULL;
		assert_int_equal(bthread_join(ids[i], &ret), 0);
		assert_ptr_equal(ret, (void *)(intptr_t)i);
	}
	free(ids);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_beyond_capacity),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
