/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Why each task is stuck, in process: stb_dump (text, JSON, grouped,
 * stuck_ns) and the debug endpoint of why_target show every wait with its
 * object, owner (a bthread by id and name, a pthread by tid), fd and events,
 * time left, joined bthread, creator, and find its deadlocks -- of 2 and 3
 * bthreads over mutexes, a join cycle, one through a registered pthread --
 * and none under heavy mutex churn.
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

#include "support/env.h"
#include "support/proc.h"
#include "why_checks.h"

static struct why_target tg;

static int teardown(void **state)
{
	(void)state;
	why_stop(&tg);
	return 0;
}

/* stb_dump in the target into a file; its contents. */
static char *dump(const char *fmt, int group, unsigned stuck_ms, int all_ids)
{
	char path[4200], cmd[4400], reply[256];
	snprintf(path, sizeof(path), "%s/why-dump-%d.out", ts_tmpdir(), (int)getpid());
	snprintf(cmd, sizeof(cmd), "dump %s %d %u %d %s", fmt, group, stuck_ms, all_ids, path);
	assert_int_equal(ts_ltarget_cmd(&tg.t, cmd, reply, sizeof(reply)), 0);
	int rc = -1;
	if (sscanf(reply, "dump rc=%d", &rc) != 1 || rc < 0)
		fail_msg("stb_dump failed in the target: %s", reply);
	char *text = why_read_file(path);
	unlink(path);
	return text;
}

static void check_scenario(enum why_dl dl, const char *const *extra)
{
	why_start(&tg, dl, extra, NULL);
	char *text = dump("text", 0, 0, 0);
	why_check_text(text, &tg);
	why_check_header(text, "stb_dump", (int)tg.t.pid);
	why_check_holders_text(text, &tg, false);
	free(text);
	char *json = dump("json", 0, 0, 0);
	struct ts_json *doc = why_parse_json(json);
	why_check_json(doc, &tg);
	why_check_header_json(doc, (int)tg.t.pid);
	why_check_holders_json(doc, &tg, false);
	why_check_schema(json, NULL, NULL);
	ts_json_free(doc);
	free(json);
	why_stop(&tg);
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

/* Heavy mutex churn (locks taken in one order): never a deadlock, however
 * the graph moves while it is read. */
static void test_churn(void **state)
{
	(void)state;
	static const char *const args[] = {"--churn", "64", NULL};
	why_start(&tg, WHY_DL_NONE, args, NULL);
	char reply[128];
	assert_int_equal(ts_ltarget_cmd(&tg.t, "churn", reply, sizeof(reply)), 0);
	uint64_t before = ts_field(reply, "ops");
	for (int i = 0; i < 20; i++) {
		char *out = dump(i & 1 ? "json" : "text", i & 2, 0, 0);
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
	assert_int_equal(ts_ltarget_cmd(&tg.t, "churn", reply, sizeof(reply)), 0);
	assert_true(ts_field(reply, "ops") > before + 1000); /* it did churn meanwhile */
	why_stop(&tg);
}

/* stuck_ns: a spin of 2 s and more and the long blocked are in, tickers
 * (blocked for 5 ms at a time) are not, nor fd waiters and sleepers (the
 * watchdog's meaning); the holders the stuck ones wait on are added. */
static void test_stuck(void **state)
{
	(void)state;
	static const char *const args[] = {"--spin", "60000", "--tickers", "8", "--fds", "3",
					   "--http", NULL};
	why_start(&tg, WHY_DL_NONE, args, NULL);
	ts_sleep_ms(2300);
	char *text = dump("text", 0, 2000, 0);
	char line[1024];
	if (!why_text_line(text, tg.spin, line, sizeof(line)) || !strstr(line, "[running, "))
		fail_msg("the spinning bthread is not in the --stuck 2 s report:\n%s", text);
	double s = strtod(strstr(line, "[running, ") + 10, NULL);
	assert_true(s >= 2.0 && s < 60.0);
	assert_true(why_text_line(text, tg.waiter, line, sizeof(line)));
	for (unsigned i = 0; i < tg.tickers->n; i++)
		if (why_text_line(text, tg.tickers->ids[i], line, sizeof(line)))
			fail_msg("ticker %" PRIu64 " reported as stuck: %s", tg.tickers->ids[i], line);
	for (unsigned i = 0; i < tg.fdwaiters->n; i++)
		if (why_text_line(text, tg.fdwaiters->ids[i], line, sizeof(line)))
			fail_msg("fd waiter reported as stuck: %s", line);
	if (why_text_line(text, tg.fd, line, sizeof(line)) || strstr(text, "\"stb debug http"))
		fail_msg("an fd wait reported as stuck:\n%s", text);
	why_check_holders_text(text, &tg, true);
	free(text);
	char *json = dump("json", 0, 2000, 0);
	struct ts_json *doc = why_parse_json(json);
	why_check_holders_json(doc, &tg, true);
	why_check_schema(json, NULL, NULL);
	ts_json_free(doc);
	free(json);
	text = dump("text", 0, 600000, 0);
	if (strstr(text, "bthread "))
		fail_msg("tasks stuck for 10 minutes in a target 3 s old:\n%s", text);
	free(text);
	why_stop(&tg);
}

/* Grouped: one header per stack and wait, with count, time span, the first
 * ids and how many more, names summarised; JSON carries frames once. */
static void test_grouped(void **state)
{
	(void)state;
	static const char *const args[] = {"--many", "2000", NULL};
	why_start(&tg, WHY_DL_NONE, args, NULL);
	char *text = dump("text", 1, 0, 0);
	char want[128];
	const char *g = strstr(text, "2000 bthreads [suspended, ");
	if (!g)
		fail_msg("no group of the 2000 sleepers:\n%.3000s", text);
	/* A header that fits a screen: the count, state, times and wait on one
	 * line, the names on the next, then the first ids that fit 100 columns
	 * and how many more. */
	const char *eol = strchr(g, '\n');
	assert_true(eol - g <= 100);
	assert_true(eol - g > 9 && strncmp(eol - 9, " sleeping", 9) == 0);
	static const char summary[] = "  names \"conn 1\" \xe2\x80\xa6 \"conn 2000\"\n";
	if (strncmp(eol + 1, summary, strlen(summary)) != 0)
		fail_msg("names not summarised: %.200s", eol + 1);
	const char *ids = eol + 1 + strlen(summary);
	eol = strchr(ids, '\n');
	snprintf(want, sizeof(want), "  ids %" PRIu64 " ", tg.many_first);
	if (strncmp(ids, want, strlen(want)) != 0 || eol - ids > 100)
		fail_msg("not an ids line of at most 100 columns: %.300s", ids);
	unsigned shown = 0;
	for (const char *p = ids + 5; *p == ' ' && p[1] >= '0' && p[1] <= '9'; shown++)
		p = strchr(p + 1, ' ') ? strchr(p + 1, ' ') : eol;
	assert_true(shown >= 3 && shown <= 10);
	snprintf(want, sizeof(want), " and %u,%03u more\n", (2000 - shown) / 1000,
		 (2000 - shown) % 1000);
	if (strncmp(eol - strlen(want) + 1, want, strlen(want)) != 0)
		fail_msg("ids line does not end with \"%s\": %.300s", want, ids);
	/* Blocked times are never missing: under the clock's tick they are "<N ms". */
	if (strstr(text, "[suspended]"))
		fail_msg("a suspended group without its time:\n%.3000s", text);
	free(text);
	text = dump("text", 1, 0, 1); /* every member: its id and name, a line each */
	g = strstr(text, "2000 bthreads [suspended, ");
	assert_non_null(g);
	unsigned nids = 0;
	uint64_t last = 0;
	for (const char *line = strchr(g, '\n') + 1; line[0] == ' ' && line[2] >= '0' &&
						    line[2] <= '9';) {
		eol = strchr(line, '\n');
		assert_non_null(eol);
		char *end;
		last = strtoull(line + 2, &end, 10);
		char want[48];
		snprintf(want, sizeof(want), " \"conn %u\"\n", nids + 1);
		if (strncmp(end, want, strlen(want)) != 0)
			fail_msg("member %u: %.*s", nids + 1, (int)(eol - line), line);
		nids++;
		line = eol + 1;
	}
	assert_int_equal(nids, 2000);
	assert_true(last == tg.many_last);
	free(text);

	char *flat = dump("json", 0, 0, 0);
	char *json = dump("json", 1, 0, 0);
	why_check_schema(json, "--grouped", NULL);
	/* The runtime's frames hidden (the default), a flat task's stack is a
	 * few frames: grouped, 2000 of them are written once. */
	if (strlen(json) * 2 > strlen(flat))
		fail_msg("grouped JSON (%zu bytes) is not much smaller than the flat one (%zu)",
			 strlen(json), strlen(flat));
	unsigned nframes = 0, ngroups = 0;
	/* (The threads of the process, after the groups, each have a stack of
	 * their own.) */
	const char *threads = strstr(json, "\"threads\": ["), *groups = strstr(json, "\"groups\": [");
	for (const char *p = strstr(json, "\"frames\": ["); p; p = strstr(p + 1, "\"frames\": ["))
		nframes += !(threads && groups && threads > groups && p > threads);
	for (const char *p = strstr(json, "\"ids\": ["); p; p = strstr(p + 1, "\"ids\": ["))
		ngroups++;
	if (nframes != ngroups)
		fail_msg("grouped JSON: %u frames arrays for %u groups", nframes, ngroups);
	struct ts_json *doc = why_parse_json(json);
	const struct ts_json *t = why_json_task(doc, tg.many_first);
	assert_non_null(t);
	assert_null(ts_json_get(t, "frames"));
	unsigned gi = (unsigned)ts_json_u64(t, "group", 99999);
	const struct ts_json *grp = ts_json_get(doc, "groups")->child;
	for (unsigned i = 0; grp && i < gi; i++)
		grp = grp->next;
	assert_non_null(grp);
	assert_int_equal(ts_json_u64(grp, "count", 0), 2000);
	assert_non_null(ts_json_get(grp, "frames"));
	assert_non_null(ts_json_get(grp, "shortest_s"));
	assert_non_null(ts_json_get(grp, "longest_s"));
	assert_string_equal(ts_json_str(ts_json_get(grp, "wait"), "kind"), "sleep");
	const struct ts_json *names = ts_json_get(grp, "names");
	assert_int_equal(names->n, 2);
	assert_string_equal(names->child->str, "conn 1");
	assert_string_equal(names->child->next->str, "conn 2000");
	ts_json_free(doc);
	free(json);
	free(flat);
	why_stop(&tg);
}

/* The debug endpoint: /bthreads/all finds the deadlock in text and JSON;
 * ?stuck= filters, ?v=1 lists every id, bad values are 400. */
static void test_http(void **state)
{
	(void)state;
	static const char *const args[] = {"--http", "--execq", NULL};
	why_start(&tg, WHY_DL_MUTEX3, args, NULL);
	assert_true(tg.port > 0);
	char *body;
	assert_int_equal(why_http_get((unsigned)tg.port, "/bthreads/all", &body), 200);
	if (!strstr(body, "Found 1 deadlock:\n"))
		fail_msg("no deadlock on /bthreads/all:\n%.3000s", body);
	free(body);
	assert_int_equal(why_http_get((unsigned)tg.port, "/bthreads/all?format=json", &body), 200);
	struct ts_json *doc = why_parse_json(body);
	why_check_json(doc, &tg);
	why_check_schema(body, "--grouped", NULL);
	ts_json_free(doc);
	free(body);
	assert_int_equal(why_http_get((unsigned)tg.port, "/bthreads/all?stuck=600&v=1", &body),
			 200);
	if (strstr(body, " tasks [") || strstr(body, " bthreads ["))
		fail_msg("?stuck=600 listed tasks:\n%.2000s", body);
	/* The table's deadlock, of tasks not selected: one line, and where to look. */
	if (strstr(body, "Found ") ||
	    !strstr(body, "\n# 1 deadlock among tasks not selected here: /bthreads/all shows it\n"))
		fail_msg("not one line for the deadlock with ?stuck=600:\n%.2000s", body);
	free(body);
	/* The leak view, text and JSON. */
	assert_int_equal(why_http_get((unsigned)tg.port, "/bthreads/leaks", &body), 200);
	why_check_header(body, "stb debug http", (int)tg.t.pid);
	if (!strstr(body, " bthreads created by start+0x") || !strstr(body, "\n  oldest "))
		fail_msg("no leak view on /bthreads/leaks:\n%.2000s", body);
	free(body);
	assert_int_equal(why_http_get((unsigned)tg.port, "/bthreads/leaks?format=json", &body), 200);
	why_check_schema(body, NULL, NULL);
	free(body);
	assert_int_equal(why_http_get((unsigned)tg.port, "/bthreads/leaks?format=pprof", &body), 400);
	free(body);
	assert_int_equal(why_http_get((unsigned)tg.port, "/bthreads/all?stuck=abc", &body), 400);
	free(body);
	ts_sleep_ms(600); /* the waiter has been blocked for more than 0.5 s */
	assert_int_equal(why_http_get((unsigned)tg.port, "/bthreads?stuck=0.5", &body), 200);
	char line[1024];
	assert_true(why_text_line(body, tg.waiter, line, sizeof(line)));
	assert_non_null(strstr(line, " held by bthread "));
	free(body);
	why_stop(&tg);
}

/* stb_dump's leak view (leaks = 1): the bthreads by creation site, the
 * leak's with its file:line, count, ages and states, in text and JSON. */
static void test_leaks(void **state)
{
	(void)state;
	static const char *const args[] = {"--leak", "40", NULL};
	why_start(&tg, WHY_DL_NONE, args, NULL);
	char path[4200], cmd[4400], reply[256];
	snprintf(path, sizeof(path), "%s/why-leaks-%d.out", ts_tmpdir(), (int)getpid());
	for (int json = 0; json < 2; json++) {
		snprintf(cmd, sizeof(cmd), "leaks %s %s", json ? "json" : "text", path);
		assert_int_equal(ts_ltarget_cmd(&tg.t, cmd, reply, sizeof(reply)), 0);
		int rc = -1;
		if (sscanf(reply, "leaks rc=%d", &rc) != 1 || rc < 40)
			fail_msg("stb_dump's leak view failed in the target: %s", reply);
		char *out = why_read_file(path);
		if (json) {
			why_check_schema(out, NULL, NULL);
			struct ts_json *doc = why_parse_json(out);
			assert_int_equal(ts_json_u64(doc, "bthreads", 0), (uint64_t)rc);
			const struct ts_json *s = ts_json_get(doc, "sites")->child;
			assert_non_null(s); /* the most populous first */
			assert_string_equal(ts_json_str(s, "function"), "leak_spawn");
			assert_int_equal(ts_json_u64(s, "count", 0), 40);
			assert_non_null(strstr(ts_json_str(s, "file"), "why_target.c"));
			ts_json_free(doc);
		} else {
			why_check_header(out, "stb_dump", (int)tg.t.pid);
			const char *site = strstr(out, "\n\n40 bthreads created by leak_spawn+0x");
			if (!site || !strstr(site, "why_target.c:") ||
			    !strstr(site, "\n  oldest ") || !strstr(site, "; 40 suspended\n"))
				fail_msg("no site of the leak in stb_dump's leak view:\n%s", out);
		}
		free(out);
	}
	unlink(path);
	why_stop(&tg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_waits, teardown),
		cmocka_unit_test_teardown(test_deadlock_mutex2, teardown),
		cmocka_unit_test_teardown(test_deadlock_mutex3, teardown),
		cmocka_unit_test_teardown(test_deadlock_join, teardown),
		cmocka_unit_test_teardown(test_deadlock_pthread, teardown),
		cmocka_unit_test_teardown(test_churn, teardown),
		cmocka_unit_test_teardown(test_stuck, teardown),
		cmocka_unit_test_teardown(test_grouped, teardown),
		cmocka_unit_test_teardown(test_http, teardown),
		cmocka_unit_test_teardown(test_leaks, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
