/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A shared task table smaller than the number of live bthreads
 * (STB_TABLE_CAPACITY=64 in the test's environment): starting more never
 * fails, the extra tasks are counted as untraceable, they are still traced in
 * process, and stb-bpf-loader (when given, as root) says how many it cannot see.
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

/* Runs the loader on ourselves; returns its stdout (caller frees) or NULL. */
static char *stb_run_loader(const char *loader)
{
	int p[2];
	if (pipe(p) != 0)
		return NULL;
	pid_t pid = fork();
	if (pid == 0) {
		char spid[16];
		snprintf(spid, sizeof(spid), "%d", (int)getppid());
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		execl(loader, loader, "--pid", spid, "--state", "suspended", (char *)NULL);
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
	if (!out)
		return NULL;
	out[len] = '\0';
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		free(out);
		return NULL;
	}
	return out;
}

static void test_beyond_capacity(void **state)
{
	(void)state;
	stb_gate_butex = butex_create();
	assert_non_null(stb_gate_butex);
	bthread_t *ids = calloc(STB_CAP_TASKS, sizeof(*ids));
	assert_non_null(ids);
	for (int i = 0; i < STB_CAP_TASKS; i++)
		assert_int_equal(bthread_start_background(&ids[i], &BTHREAD_ATTR_SMALL, stb_cap_main,
							  (void *)(intptr_t)i), 0);
	assert_non_null(stb_task_table);
	assert_int_equal(stb_task_table->task_capacity, 64);

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
		char *out = stb_run_loader(loader);
		assert_non_null(out);
		assert_non_null(strstr(out, "created beyond the table capacity (64)"));
		/* The traceable ones are all there. */
		assert_non_null(strstr(out, "stb_cap_wait"));
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
