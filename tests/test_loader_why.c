/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Why each task is stuck, from outside: stb-bpf-loader against why_target
 * reads waits, owners, creators and deadlocks (of 2 and 3 bthreads over
 * mutexes, a join cycle, one through a registered pthread) from nothing but
 * the task table and the target's memory, in text and JSON; none under heavy
 * mutex churn; --stuck keeps only the long-stuck. Needs root (77 otherwise).
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "loader_checks.h"
#include "support/pprof_raw.h"
#include "support/env.h"
#include "support/proc.h"
#include "why_checks.h"

static struct why_target wt;

static int why_teardown(void **state)
{
	(void)state;
	why_stop(&wt);
	return 0;
}

/* The loader's output for wt in fmt with extra arguments (NULL-terminated). */
static char *loader_out(const char *fmt, const char *a1, const char *a2)
{
	struct run r;
	run_loader(&r, "--pid", pid_arg(&wt.t), "--format", fmt, "--timeout", CAPTURE_TIMEOUT, a1,
		   a2, NULL);
	expect_exit(&r, 0, NULL);
	char *out = strdup(r.out);
	assert_non_null(out);
	run_free(&r);
	return out;
}

static void check_scenario(enum why_dl dl, const char *const *extra)
{
	why_start(&wt, dl, extra, NULL);
	char *text = loader_out("text", NULL, NULL);
	why_check_text(text, &wt);
	free(text);
	char *json = loader_out("json", NULL, NULL);
	struct ts_json *doc = why_parse_json(json);
	why_check_json(doc, &wt);
	why_check_schema(json, "--loader", NULL);
	ts_json_free(doc);
	free(json);
	if (dl != WHY_DL_NONE) {
		/* A filter that leaves the members out of the report: the graph is
		 * then read by a scan of its own (the full one feeds it). */
		char *ready = loader_out("text", "--state", "ready");
		const char *found = strstr(ready, "Found ");
		if (!found || strncmp(found, "Found 1 deadlock:\n", 18) != 0)
			fail_msg("no \"Found 1 deadlock:\" with --state ready:\n%.6000s", ready);
		for (unsigned i = 0; i < wt.ndl; i++) {
			char want[64];
			snprintf(want, sizeof(want), " %" PRIu64 " [", wt.dlids[i]);
			if (!strstr(found, want))
				fail_msg("deadlock member %" PRIu64 " missing with --state ready:\n%s",
					 wt.dlids[i], found);
		}
		free(ready);
	}
	why_stop(&wt);
}

static void test_waits(void **state)
{
	(void)state;
	static const char *const args[] = {"--execq", NULL};
	check_scenario(WHY_DL_NONE, args); /* with an execution queue */
}

static void test_deadlock_mutex2(void **state)
{
	(void)state;
	check_scenario(WHY_DL_MUTEX2, NULL);
}

static void test_deadlock_mutex3(void **state)
{
	(void)state;
	check_scenario(WHY_DL_MUTEX3, NULL);
}

static void test_deadlock_join(void **state)
{
	(void)state;
	check_scenario(WHY_DL_JOIN, NULL);
}

static void test_deadlock_pthread(void **state)
{
	(void)state;
	check_scenario(WHY_DL_PTHREAD, NULL);
}

/* pprof from outside: the mutex waiter's sample carries wait_kind, the
 * mutex's address as wait_object and its owner's id, as go tool pprof reads
 * them; the sleeper's carries wait_kind sleep and no owner. */
static void test_pprof_labels(void **state)
{
	(void)state;
	why_start(&wt, WHY_DL_NONE, NULL, NULL);
	char path[] = "/tmp/stb-why-pprof-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	char *out = loader_out("pprof", "-o", path);
	free(out);
	struct ts_prof p;
	char why[512], id[32], obj[32], owner[32];
	if (ts_pprof_raw(path, &p, why, sizeof(why)) != 0)
		fail_msg("go tool pprof cannot read the profile: %s", why);
	snprintf(id, sizeof(id), "%" PRIu64, wt.waiter);
	snprintf(obj, sizeof(obj), "0x%" PRIx64, wt.objs[0]);
	snprintf(owner, sizeof(owner), "%" PRIu64, wt.owner);
	bool waiter = false, sleeper = false;
	for (int i = 0; i < p.ns; i++) {
		const struct ts_sample *s = &p.s[i];
		if (ts_sample_has_label(s, "bthread_id", id)) {
			waiter = true;
			if (!ts_sample_has_label(s, "wait_kind", "mutex") ||
			    !ts_sample_has_label(s, "wait_object", obj) ||
			    !ts_sample_has_label(s, "owner", owner))
				fail_msg("the mutex waiter's labels: %s (want mutex %s owner %s)",
					 s->labels, obj, owner);
		}
		snprintf(id, sizeof(id), "%" PRIu64, wt.sleep);
		if (ts_sample_has_label(s, "bthread_id", id)) {
			sleeper = true;
			if (!ts_sample_has_label(s, "wait_kind", "sleep") ||
			    ts_sample_label_count(s, "owner") != 0)
				fail_msg("the sleeper's labels: %s", s->labels);
		}
		snprintf(id, sizeof(id), "%" PRIu64, wt.waiter);
	}
	if (!waiter || !sleeper)
		fail_msg("no sample of the mutex waiter (%d) or the sleeper (%d)", waiter, sleeper);
	ts_prof_free(&p);
	unlink(path);
	why_stop(&wt);
}

/* Heavy mutex churn read from outside: the graph moves under the loader's
 * reads, and it must never report a cycle. */
static void test_churn(void **state)
{
	(void)state;
	static const char *const args[] = {"--churn", "64", NULL};
	why_start(&wt, WHY_DL_NONE, args, NULL);
	for (int i = 0; i < 10; i++) {
		char *out = loader_out(i & 1 ? "json" : "text", i & 2 ? "--group" : NULL, NULL);
		if (i & 1) {
			struct ts_json *doc = why_parse_json(out);
			const struct ts_json *d = ts_json_get(doc, "deadlocks");
			assert_non_null(d);
			if (d->n)
				fail_msg("a false deadlock under churn: %s", strstr(out, "\"deadlocks\""));
			ts_json_free(doc);
		} else if (strstr(out, "Found ")) {
			fail_msg("a false deadlock under churn:\n%s", strstr(out, "Found "));
		}
		free(out);
	}
	why_stop(&wt);
}

/* --stuck: a bthread spinning for 2 s and more and the long blocked are in;
 * tickers (blocked 5 ms at a time) are not; nothing is stuck for 10 minutes. */
static void test_stuck(void **state)
{
	(void)state;
	static const char *const args[] = {"--spin", "60000", "--tickers", "8", NULL};
	why_start(&wt, WHY_DL_NONE, args, NULL);
	ts_sleep_ms(2300);
	char *text = loader_out("text", "--stuck", "2");
	char line[1024];
	if (!why_text_line(text, wt.spin, line, sizeof(line)) || !strstr(line, "[running, "))
		fail_msg("the spinning bthread is not in the --stuck 2 report:\n%s", text);
	if (!why_text_line(text, wt.waiter, line, sizeof(line)))
		fail_msg("the mutex waiter is not in the --stuck 2 report:\n%s", text);
	for (unsigned i = 0; i < wt.tickers->n; i++)
		if (why_text_line(text, wt.tickers->ids[i], line, sizeof(line)))
			fail_msg("ticker %" PRIu64 " reported as stuck: %s", wt.tickers->ids[i], line);
	free(text);
	text = loader_out("text", "--stuck", "600");
	if (strstr(text, "bthread "))
		fail_msg("tasks stuck for 10 minutes in a target 3 s old:\n%s", text);
	free(text);
	why_stop(&wt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_waits, why_teardown),
		cmocka_unit_test_teardown(test_deadlock_mutex2, why_teardown),
		cmocka_unit_test_teardown(test_deadlock_mutex3, why_teardown),
		cmocka_unit_test_teardown(test_deadlock_join, why_teardown),
		cmocka_unit_test_teardown(test_deadlock_pthread, why_teardown),
		cmocka_unit_test_teardown(test_churn, why_teardown),
		cmocka_unit_test_teardown(test_pprof_labels, why_teardown),
		cmocka_unit_test_teardown(test_stuck, why_teardown),
	};
	return loader_checks_main(tests, sizeof(tests) / sizeof(tests[0]), "test_loader_why");
}
