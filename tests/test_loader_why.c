/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Why each task is stuck, from outside: stb-bpf-loader against why_target
 * reads waits, owners, creators and deadlocks (of 2 and 3 bthreads over
 * mutexes, a join cycle, one through a registered pthread) from nothing but
 * the task table and the target's memory, in text and JSON; none under heavy
 * mutex churn; --stuck keeps only the long-stuck. Needs root (77 otherwise).
 */
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
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

/* The run's exit status and stderr for extra arguments (NULL-terminated
 * after the pid's); r must be freed. */
static void loader_run(struct run *r, const char *a1, const char *a2, const char *a3)
{
	run_loader(r, "--pid", pid_arg(&wt.t), "--timeout", CAPTURE_TIMEOUT, a1, a2, a3, NULL);
}

static void check_scenario(enum why_dl dl, const char *const *extra)
{
	why_start(&wt, dl, extra, NULL);
	int pid = (int)wt.t.pid;
	char *text = loader_out("text", NULL, NULL);
	why_check_text(text, &wt);
	why_check_header(text, "stb-bpf-loader snapshot", pid);
	why_check_holders_text(text, &wt, false);
	free(text);
	char *json = loader_out("json", NULL, NULL);
	struct ts_json *doc = why_parse_json(json);
	why_check_json(doc, &wt);
	why_check_header_json(doc, pid);
	why_check_holders_json(doc, &wt, false);
	why_check_schema(json, "--loader", NULL);
	ts_json_free(doc);
	free(json);
	if (dl != WHY_DL_NONE) {
		/* A filter that leaves the members out of the report: the graph is
		 * then read by a scan of its own (the full one feeds it), and a
		 * line says that a cycle exists elsewhere and how to see it. */
		char *ready = loader_out("text", "--state", "ready");
		if (strstr(ready, "Found ") || strstr(ready, "is not in this report") ||
		    !strstr(ready, "\n# 1 deadlock among tasks not selected here: run without "
				   "--bthread, --state and --stuck to see it\n"))
			fail_msg("not one line for a deadlock of tasks not selected:\n%.6000s", ready);
		free(ready);
		json = loader_out("json", "--state", "ready");
		doc = why_parse_json(json);
		assert_int_equal(ts_json_get(doc, "deadlocks")->n, 0);
		assert_int_equal(ts_json_u64(doc, "deadlocks_elsewhere", 99), 1);
		why_check_schema(json, "--loader", NULL);
		ts_json_free(doc);
		free(json);
		/* One member asked for: the cycle, every member named, with its
		 * stack (the others are added: it waits on them). */
		char id[24];
		snprintf(id, sizeof(id), "%" PRIu64, wt.dlids[wt.ndl - 1]);
		char *one = loader_out("text", "--bthread", id);
		const char *found = strstr(one, "Found ");
		if (!found || strncmp(found, "Found 1 deadlock:\n", 18) != 0 ||
		    strstr(found, "is not in this report"))
			fail_msg("no \"Found 1 deadlock:\" of stacks with --bthread %s:\n%.6000s", id,
				 one);
		for (unsigned i = 0; i < wt.ndl; i++) {
			char line[1024];
			if (!why_text_line(found, wt.dlids[i], line, sizeof(line)) ||
			    !strstr(line, "\"why "))
				fail_msg("deadlock member %" PRIu64 " missing or unnamed with --bthread:"
					 "\n%s", wt.dlids[i], found);
			const char *st = strchr(strstr(found, line), '\n');
			if (strncmp(st + 1, "#0 0x", 5) != 0)
				fail_msg("deadlock member %" PRIu64 " without its stack:\n%s",
					 wt.dlids[i], found);
		}
		free(one);
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
 * tickers (blocked 5 ms at a time) are not, nor -- the watchdog's meaning --
 * fd waiters (the idle connections, the debug listener) and sleepers; but
 * the holders the stuck ones wait on are, after them, with their stacks;
 * nothing is stuck for 10 minutes. */
static void test_stuck(void **state)
{
	(void)state;
	static const char *const args[] = {"--spin", "60000", "--tickers", "8", "--fds", "4",
					   "--http", NULL};
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
	/* Idle by design: never stuck, nor waited on. */
	for (unsigned i = 0; i < wt.fdwaiters->n; i++)
		if (why_text_line(text, wt.fdwaiters->ids[i], line, sizeof(line)))
			fail_msg("fd waiter reported as stuck: %s", line);
	if (why_text_line(text, wt.fd, line, sizeof(line)) || strstr(text, "\"stb debug http"))
		fail_msg("an fd wait (a connection, the debug listener) reported as stuck:\n%s",
			 text);
	/* The sleeper is waited on (the joiner is stuck): added, not selected. */
	const char *added = strstr(text, "\n# not selected, shown because the tasks above wait on "
					 "them:\n\n");
	assert_non_null(added);
	char want[64];
	snprintf(want, sizeof(want), "\nbthread %" PRIu64 " ", wt.sleep);
	const char *sl = strstr(text, want);
	if (!sl || sl < added)
		fail_msg("the sleeper is selected as stuck, or missing:\n%s", text);
	why_check_holders_text(text, &wt, true);
	free(text);
	char *json = loader_out("json", "--stuck", "2");
	struct ts_json *doc = why_parse_json(json);
	why_check_holders_json(doc, &wt, true);
	why_check_schema(json, "--loader", NULL);
	/* Every selected task is stuck as --stuck says; every added one is waited on. */
	for (const struct ts_json *t = ts_json_get(doc, "tasks")->child; t; t = t->next) {
		const struct ts_json *w = ts_json_get(t, "wait");
		const char *kind = w ? ts_json_str(w, "kind") : "none";
		if (ts_json_get(t, "selected"))
			continue;
		if (!strcmp(kind, "fd") || !strcmp(kind, "sleep"))
			fail_msg("task %" PRIu64 " waiting on %s selected as stuck",
				 ts_json_u64(t, "id", 0), kind);
	}
	ts_json_free(doc);
	free(json);
	text = loader_out("text", "--stuck", "600");
	if (strstr(text, "bthread "))
		fail_msg("tasks stuck for 10 minutes in a target 3 s old:\n%s", text);
	free(text);
	why_stop(&wt);
}

/* --bthread: the tasks it mentions are named from the table (the creator
 * of the child, the joined bthread, which is added with its stack); a
 * number that is not a bthread of the process is named, exit 1, nothing
 * written; text that is not a number is a usage error. */
static void test_filtered(void **state)
{
	(void)state;
	why_start(&wt, WHY_DL_NONE, NULL, NULL);
	char id[24], want[160], line[1024];
	snprintf(id, sizeof(id), "%" PRIu64, wt.child);
	char *text = loader_out("text", "--bthread", id);
	snprintf(want, sizeof(want), "\ncreated by creator_fn+0x");
	if (!strstr(text, want))
		fail_msg("no created-by line:\n%s", text);
	snprintf(want, sizeof(want), " in bthread %" PRIu64 " \"why creator\"\n", wt.creator);
	if (!strstr(text, want))
		fail_msg("the creator is not named with --bthread:\n%s", text);
	if (strstr(text, "\n# not selected"))
		fail_msg("a task added for a child that waits on nothing:\n%s", text);
	free(text);
	snprintf(id, sizeof(id), "%" PRIu64, wt.joiner);
	text = loader_out("text", "--bthread", id);
	assert_true(why_text_line(text, wt.joiner, line, sizeof(line)));
	snprintf(want, sizeof(want), " waiting on join of bthread %" PRIu64 " \"why sleep\" [suspended, ",
		 wt.sleep);
	if (!strstr(line, want))
		fail_msg("the joined bthread is not named with --bthread: %s", line);
	const char *added = strstr(text, "\n# not selected, shown because the tasks above wait on "
					 "them:\n\n");
	if (!added || !why_text_line(added, wt.sleep, line, sizeof(line)) ||
	    !strstr(added, " sleep_fn+0x"))
		fail_msg("the joined bthread is not shown with its stack:\n%s", text);
	free(text);

	const uint64_t none[] = {12345, (99ull << 32) | (uint32_t)wt.owner, 0};
	for (unsigned i = 0; i < 3; i++) {
		struct run r;
		snprintf(id, sizeof(id), "%" PRIu64, none[i]);
		loader_run(&r, "--bthread", id, NULL);
		snprintf(want, sizeof(want), "no bthread %s in process %d", id, (int)wt.t.pid);
		expect_exit(&r, 1, want);
		assert_int_equal(r.p.out.len, 0);
		run_free(&r);
	}
	struct run r;
	loader_run(&r, "--bthread", "12345x", NULL);
	expect_exit(&r, 64, "--bthread: '12345x' is not a bthread id");
	run_free(&r);
	why_stop(&wt);
}

/* The text of file path in dir (malloc'd). */
static char *dir_file(const char *dir, const char *name)
{
	char *path = NULL;
	assert_true(asprintf(&path, "%s/%s", dir, name) > 0);
	char *text = why_read_file(path);
	free(path);
	return text;
}

/* The names of the loader's files in dir, sorted (oldest first); their number. */
static unsigned every_files(const char *dir, char names[][96], unsigned max)
{
	unsigned n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return 0; /* not made yet */
	for (struct dirent *e; (e = readdir(d));)
		if (strncmp(e->d_name, "stb-", 4) == 0 && n < max && strlen(e->d_name) < 96)
			snprintf(names[n++], 96, "%s", e->d_name);
	closedir(d);
	qsort(names, n, 96, (int (*)(const void *, const void *))strcmp);
	return n;
}

/* Starts the loader in continuous mode into a new dir with extra arguments
 * and waits for n files. */
static void every_start(struct ts_proc *p, char *dir, size_t len, const char *what,
			const char *a1, const char *a2, const char *a3)
{
	snprintf(dir, len, "%s/why-every-%s-%d", ts_tmpdir(), what, (int)getpid());
	char *cmd = NULL;
	assert_true(asprintf(&cmd, "rm -rf '%s'", dir) > 0);
	assert_int_equal(system(cmd), 0);
	free(cmd);
	char *argv[16] = {loader_path, "--pid", (char *)pid_arg(&wt.t), "--every",
			  "200ms", "--out-dir", dir, "--timeout", CAPTURE_TIMEOUT, (char *)a1,
			  (char *)a2, (char *)a3, NULL};
	assert_int_equal(ts_proc_start(p, argv, NULL, NULL, NULL), 0);
}

static unsigned every_wait(struct ts_proc *p, const char *dir, unsigned n)
{
	char names[64][96];
	unsigned have = 0;
	for (int waited = 0; waited < 30000 && (have = every_files(dir, names, 64)) < n;
	     waited += 50)
		ts_proc_pump(p, 50);
	if (have < n)
		fail_msg("continuous mode: %u files of %u after 30 s: %s", have, n, p->err.p);
	return have;
}

static void every_stop(struct ts_proc *p)
{
	assert_int_equal(kill(p->pid, SIGTERM), 0);
	assert_int_equal(ts_proc_wait(p, 30000), 0);
	if (ts_proc_exit_code(p) != 0)
		fail_msg("continuous mode: exit %d: %s", ts_proc_exit_code(p), p->err.p);
	ts_proc_free(p);
}

/* Text output starts with one line -- program, pid, time, tasks by state,
 * table slots used -- and JSON carries the same; so do the files of
 * continuous mode, each with its own time. */
static void test_header(void **state)
{
	(void)state;
	why_start(&wt, WHY_DL_NONE, NULL, NULL);
	int pid = (int)wt.t.pid;
	char *text = loader_out("text", "--group", NULL);
	why_check_header(text, "stb-bpf-loader snapshot", pid);
	free(text);
	text = loader_out("text", "--state", "running");
	why_check_header(text, "stb-bpf-loader snapshot", pid); /* the whole process's census */
	free(text);
	for (int json = 0; json < 2; json++) {
		struct ts_proc p;
		char dir[4200], names[64][96];
		every_start(&p, dir, sizeof(dir), json ? "json" : "text", "--format",
			    json ? "json" : "text", NULL);
		every_wait(&p, dir, 2);
		every_stop(&p);
		unsigned n = every_files(dir, names, 64);
		uint64_t last = 0;
		for (unsigned i = 0; i < n; i++) {
			char *f = dir_file(dir, names[i]);
			uint64_t t;
			if (json) {
				struct ts_json *doc = why_parse_json(f);
				why_check_header_json(doc, pid);
				t = ts_json_u64(doc, "time_ns", 0);
				ts_json_free(doc);
			} else {
				why_check_header(f, "stb-bpf-loader snapshot", pid);
				const char *at = strstr(f, " at ") + 4;
				int y, mo, d, h, mi, s, ms;
				assert_int_equal(sscanf(at, "%d-%d-%d %d:%d:%d.%d", &y, &mo, &d, &h, &mi,
							&s, &ms), 7);
				t = ((((uint64_t)h * 60 + (uint64_t)mi) * 60 + (uint64_t)s) * 1000 +
				     (uint64_t)ms) * 1000000ull;
			}
			if (i && t <= last)
				fail_msg("%s: its time is not after the previous file's", names[i]);
			last = t;
			free(f);
		}
	}
	why_stop(&wt);
}

/* The leak view: bthreads by creation site -- the site of the leak with its
 * file:line, count, ages and states -- in text and JSON; with --every, the
 * growth of each site between two snapshots. */
static void test_leaks(void **state)
{
	(void)state;
	static const char *const args[] = {"--leak", "30", NULL};
	why_start(&wt, WHY_DL_NONE, args, NULL);
	int pid = (int)wt.t.pid;
	char *text = loader_out("text", "--leaks", NULL);
	why_check_header(text, "stb-bpf-loader snapshot", pid);
	const char *site = strstr(text, "\n30 bthreads created by leak_spawn+0x");
	if (!site)
		fail_msg("no site of the 30 leaked bthreads:\n%s", text);
	const char *eol = strchr(site + 1, '\n');
	char first[512];
	snprintf(first, sizeof(first), "%.*s", (int)(eol - site - 1), site + 1);
	const char *at = strstr(first, " at ");
	if (!at || !strstr(at, "why_target.c:") || atoi(strrchr(at, ':') + 1) <= 0)
		fail_msg("the site has no file:line: %s", first);
	if (strncmp(eol, "\n  oldest ", 10) != 0 || !strstr(eol, ", median ") ||
	    !strstr(eol, "; 30 suspended\n"))
		fail_msg("no ages and states of the site: %.200s", eol);
	if (strstr(text, "#0 "))
		fail_msg("stacks in the leak view:\n%s", text);
	free(text);

	char *json = loader_out("json", "--leaks", NULL);
	why_check_schema(json, "--loader", NULL);
	struct ts_json *doc = why_parse_json(json);
	why_check_header_json(doc, pid);
	const struct ts_json *s = why_json_site(doc, "leak_spawn");
	assert_int_equal(ts_json_u64(s, "count", 0), 30);
	assert_int_equal(ts_json_u64(ts_json_get(s, "states"), "suspended", 0), 30);
	assert_int_equal(ts_json_u64(s, "aged", 0), 30);
	assert_non_null(strstr(ts_json_str(s, "file"), "why_target.c"));
	assert_true(ts_json_u64(s, "line", 0) > 0);
	double oldest = strtod(ts_json_get(s, "oldest_s")->str, NULL);
	double median = strtod(ts_json_get(s, "median_s")->str, NULL);
	assert_true(oldest >= median && median >= 0 && oldest < 120);
	assert_null(ts_json_get(s, "growth")); /* one snapshot: no growth */
	ts_json_free(doc);
	free(json);

	/* Continuous mode: 20 more leak between two snapshots. */
	struct ts_proc p;
	char dir[4200], names[64][96];
	every_start(&p, dir, sizeof(dir), "leaks", "--leaks", "--format", "json");
	unsigned before = every_wait(&p, dir, 1);
	char reply[64];
	assert_int_equal(ts_ltarget_cmd(&wt.t, "leak 20", reply, sizeof(reply)), 0);
	assert_string_equal(reply, "leak rc=0");
	every_wait(&p, dir, before + 2);
	every_stop(&p);
	unsigned n = every_files(dir, names, 64);
	int64_t grown = 0;
	uint64_t count = 0;
	for (unsigned i = 0; i < n; i++) {
		char *f = dir_file(dir, names[i]);
		why_check_schema(f, "--loader", NULL);
		doc = why_parse_json(f);
		s = why_json_site(doc, "leak_spawn");
		count = ts_json_u64(s, "count", 0);
		const struct ts_json *g = ts_json_get(s, "growth");
		if (i == 0 && g)
			fail_msg("the first snapshot has a growth");
		if (i > 0) {
			if (!g || !ts_json_get(doc, "growth_s"))
				fail_msg("%s: no growth", names[i]);
			grown += strtoll(g->str, NULL, 10);
		}
		ts_json_free(doc);
		free(f);
	}
	if (count != 50 || grown != 20)
		fail_msg("the leak grew by %" PRId64 " to %" PRIu64 " across %u snapshots (want 20, 50)",
			 grown, count, n);
	why_stop(&wt);
}

/* -v lists every member of a group: its id, name and, when the members'
 * waits differ, its own ("waiting on fd 9 for EPOLLIN"). */
static void test_members(void **state)
{
	(void)state;
	static const char *const args[] = {"--fds", "5", NULL};
	why_start(&wt, WHY_DL_NONE, args, NULL);
	char *text = loader_out("text", "--group", NULL);
	const char *g = strstr(text, "\n5 bthreads [suspended, ");
	if (!g || !strstr(g, " waiting on fds for EPOLLIN (several)\n  names \"fd waiter 1\" "
			     "\xe2\x80\xa6 \"fd waiter 5\"\n"))
		fail_msg("no group of the 5 fd waiters:\n%s", text);
	free(text);
	text = loader_out("text", "--group", "-v");
	g = strstr(text, "\n5 bthreads [suspended, ");
	assert_non_null(g);
	const char *l = strchr(g + 1, '\n') + 1;
	for (unsigned i = 0; i < 5; i++) {
		/* In the group, in any order: one line per member. */
		char want[160];
		snprintf(want, sizeof(want), "  %" PRIu64 " \"fd waiter %u\" waiting on fd %" PRIu64
			 " for EPOLLIN\n", wt.fdwaiters->ids[i], i + 1, wt.fdnums->ids[i]);
		const char *m = strstr(l, want);
		if (!m || m > strstr(l, "\n#0 "))
			fail_msg("member %u not listed with -v:\n%s", i + 1, g);
	}
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
		cmocka_unit_test_teardown(test_filtered, why_teardown),
		cmocka_unit_test_teardown(test_header, why_teardown),
		cmocka_unit_test_teardown(test_leaks, why_teardown),
		cmocka_unit_test_teardown(test_members, why_teardown),
	};
	return loader_checks_main(tests, sizeof(tests) / sizeof(tests[0]), "test_loader_why");
}
