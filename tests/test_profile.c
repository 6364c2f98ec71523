/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader --profile on profile_target (one bthread spinning in hot(),
 * 100 sleeping in cold()): pprof read back with `go tool pprof -raw` (on-CPU
 * samples tagged with bthreads are hot, off-CPU snapshots count every cold
 * task on every tick), folded and JSON output, Ctrl-C, lost ring-buffer
 * samples, the progress line, strict option parsing. Needs root: exits 77
 * without privilege unless STB_REQUIRE_BPF=1 (then it fails).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/env.h"
#include "support/pprof_raw.h"
#include "support/proc.h"
#include "support/ptarget.h"
#include "test_util.h"

#define NCOLD 100

static struct ts_ptarget tgt;
static uint64_t hot_id;
static char why[4096];

static const char *loader_path(void)
{
	return ts_env("STB_LOADER", "stb-bpf-loader");
}

static void tmp_path(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", ts_tmpdir(), name);
}

static int target_start(void **state)
{
	(void)state;
	char buf[64];
	ts_tmpdir();
	if (ts_ptarget_start(&tgt, "profile") != 0 || !ts_ptarget_field(&tgt, "hot", buf, sizeof(buf)))
		return -1;
	hot_id = strtoull(buf, NULL, 10);
	return 0;
}

static int target_stop(void **state)
{
	(void)state;
	return ts_ptarget_stop(&tgt) == 0 ? 0 : -1;
}

/* Runs the loader with --pid and up to 8 more arguments (NULL-terminated). */
static int run_loader(char **out, char **err, int timeout_s, ...)
{
	char pid[16];
	char *argv[12] = {(char *)loader_path(), "--pid", pid};
	int n = 3;
	va_list ap;
	snprintf(pid, sizeof(pid), "%d", (int)tgt.pid);
	va_start(ap, timeout_s);
	for (const char *a; n < 11 && (a = va_arg(ap, const char *)) != NULL;)
		argv[n++] = (char *)a;
	va_end(ap);
	argv[n] = NULL;
	return ts_run(argv, out, err, timeout_s);
}

/* The stats comment's "key=value" of a profile. */
static long long stat_of(const struct ts_prof *p, const char *key)
{
	long long v = ts_stat(p->comments, key);
	if (v < 0)
		fail_msg("no %s= in the comments: %s", key, p->comments);
	return v;
}

static bool stack_has(const struct ts_prof *p, const struct ts_sample *s, const char *func)
{
	char stack[8192], pat[160];
	ts_sample_stack(p, s, stack, sizeof(stack));
	snprintf(pat, sizeof(pat), ";%s;", func);
	char wrapped[8200];
	snprintf(wrapped, sizeof(wrapped), ";%s;", stack);
	return strstr(wrapped, pat) != NULL;
}

/*
 * The checks shared by the profile tests. Sample types: samples/count,
 * cpu/nanoseconds, wall/nanoseconds. On-CPU samples: cpu = wall = count x
 * period and a worker_tid; those tagged with a bthread and in hot() carry its
 * id and name. Off-CPU samples in cold(): every cold task on every tick, with
 * its labels. Adds the on-CPU samples tagged with a bthread, and those in
 * hot(), to *tagged and *in_hot (the ratio is checked by the caller once
 * there are enough of them: a loaded machine may give hot() little CPU).
 */
static void check_profile(const struct ts_prof *p, unsigned freq, int64_t *tagged,
			  int64_t *in_hot)
{
	assert_string_equal(p->types, "samples/count cpu/nanoseconds wall/nanoseconds[dflt]");
	long long ticks = stat_of(p, "ticks"), missed = stat_of(p, "missed_ticks");
	long long oncpu = stat_of(p, "oncpu_samples"), lost = stat_of(p, "lost_samples");
	int64_t period = 1000000000 / freq;
	int64_t tag = 0, hot = 0, cold = 0, sched = 0, oncpu_sum = 0, lost_sum = 0;
	char hot_ids[24];
	snprintf(hot_ids, sizeof(hot_ids), "%" PRIu64, hot_id);
	for (int i = 0; i < p->ns; i++) {
		const struct ts_sample *s = &p->s[i];
		assert_int_equal(s->nv, 3);
		if (ts_sample_has_label(s, "state", "lost")) {
			lost_sum += s->v[0];
			continue;
		}
		if (s->v[1] > 0) {
			assert_int_equal(s->v[1], s->v[0] * period);
			assert_int_equal(s->v[2], s->v[0] * period);
			assert_int_equal(ts_sample_label_count(s, "worker_tid"), 1);
			oncpu_sum += s->v[0];
			if (ts_sample_label_count(s, "bthread_id") == 1) {
				tag += s->v[0];
				if (stack_has(p, s, "hot")) {
					hot += s->v[0];
					assert_true(ts_sample_has_label(s, "bthread_id", hot_ids));
					assert_true(ts_sample_has_label(s, "name", "hot"));
				}
			} else {
				assert_true(ts_sample_has_label(s, "state", "scheduler"));
				sched += s->v[0];
			}
			continue;
		}
		assert_int_equal(s->v[2], s->v[0] * period);
		assert_int_equal(ts_sample_label_count(s, "worker_tid"), 0);
		if (stack_has(p, s, "cold")) {
			assert_true(ts_sample_has_label(s, "state", "suspended"));
			assert_true(ts_sample_has_label(s, "name", "cold"));
			assert_int_equal(ts_sample_label_count(s, "bthread_id"), 1);
			assert_true(stack_has(p, s, "bthread_usleep"));
			cold += s->v[0];
		}
	}
	print_message("profile: %lld ticks (%lld missed), %lld on-CPU samples (%lld with a bthread, "
		      "%lld in hot, %lld scheduler), %lld lost, %lld cold snapshots\n", ticks, missed,
		      oncpu, (long long)tag, (long long)hot, (long long)sched, lost, (long long)cold);
	assert_int_equal(oncpu_sum, oncpu);
	assert_int_equal(lost_sum, lost);
	/* Each snapshot counts every cold task once per tick it stands for. */
	assert_true(ticks > 0);
	if (cold != NCOLD * (ticks + missed))
		fail_msg("cold: %lld snapshots, want %d x %lld ticks", (long long)cold, NCOLD,
			 ticks + missed);
	*tagged += tag;
	*in_hot += hot;
}

/* >= 90 % of the on-CPU samples tagged with a bthread are in hot(). */
static void check_hot_ratio(int64_t tagged, int64_t in_hot)
{
	if (in_hot * 100 < tagged * 90)
		fail_msg("%lld of %lld on-CPU samples with a bthread are in hot (< 90 %%)",
			 (long long)in_hot, (long long)tagged);
}

#define MIN_TAGGED 20

static void test_profile_pprof(void **state)
{
	(void)state;
	char path[256], *err = NULL;
	int64_t tagged = 0, in_hot = 0;
	STB_TEST_BEGIN(300);
	tmp_path(path, sizeof(path), "prof.pb.gz");
	/* Profiles of 2 s until hot() got enough CPU to judge the ratio. */
	for (int attempt = 0; attempt < 5 && tagged < MIN_TAGGED; attempt++) {
		struct ts_prof p;
		uint64_t t0 = ts_now_ms();
		int rc = run_loader(NULL, &err, 120, "--profile", "--duration", "2s", "--freq", "99",
				    "-o", path, NULL);
		uint64_t took = ts_now_ms() - t0;
		if (rc != 0)
			fail_msg("loader exit %d: %s", rc, err);
		assert_non_null(strstr(err, "profiled pid"));
		free(err);
		assert_true(took >= 2000);
		if (ts_pprof_raw(path, &p, why, sizeof(why)) != 0)
			fail_msg("%s", why);
		check_profile(&p, 99, &tagged, &in_hot);
		/* 2 s at 99 Hz: 198 ticks, each counted once (late ones included). */
		long long ticks = stat_of(&p, "ticks") + stat_of(&p, "missed_ticks");
		if (ticks < 197 || ticks > 199)
			fail_msg("%lld ticks in 2 s at 99 Hz", ticks);
		assert_non_null(strstr(p.comments, "99 Hz"));
		ts_prof_free(&p);
	}
	if (tagged < MIN_TAGGED)
		fail_msg("only %lld on-CPU samples with a bthread in 5 profiles of 2 s",
			 (long long)tagged);
	check_hot_ratio(tagged, in_hot);
	STB_TEST_END();
}

/*
 * Folded: every cold task on every tick in one line, the hot one on CPU. By
 * default without the runtime's frames: the cold line is exactly
 * "suspended;cold;bthread_usleep" (no stb_task_entry below, no switch or
 * butex internals above, none of those inlined into bthread_usleep); with
 * --runtime-frames, all of them.
 */
static void check_folded(bool runtime_frames)
{
	char *out = NULL, *err = NULL;
	int rc = run_loader(&out, &err, 120, "--profile", "--duration", "1s", "--freq", "50",
			    runtime_frames ? "--runtime-frames" : NULL, NULL);
	if (rc != 0)
		fail_msg("loader exit %d: %s", rc, err);
	/* "... in N ticks (M missed) ..." on stderr */
	const char *t = strstr(err, " ticks (");
	assert_non_null(t);
	const char *q = t;
	while (q > err && q[-1] >= '0' && q[-1] <= '9')
		q--;
	long long ticks = strtoll(q, NULL, 10), missed = strtoll(t + 8, NULL, 10);
	long long cold = -1, hot = 0;
	const char *cold_line = runtime_frames
					? "suspended;stb_ctx_trampoline;stb_task_entry;cold;bthread_usleep;"
					: "suspended;cold;bthread_usleep";
	const char *hot_line = runtime_frames ? "running;stb_ctx_trampoline;stb_task_entry;hot;"
					      : "running;hot;";
	bool jump = false;
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		char *sp = strrchr(line, ' ');
		assert_non_null(sp);
		long long n = strtoll(sp + 1, NULL, 10);
		*sp = '\0';
		if (runtime_frames ? strncmp(line, cold_line, strlen(cold_line)) == 0
				   : strcmp(line, cold_line) == 0) {
			assert_int_equal(cold, -1); /* one line: all cold tasks share the stack */
			cold = n;
		}
		if (strncmp(line, hot_line, strlen(hot_line)) == 0)
			hot += n;
		jump |= strstr(line, "stb_jump_stack") != NULL;
		if (!runtime_frames && strncmp(line, "scheduler;", 10) != 0 &&
		    (strstr(line, ";stb_") || strstr(line, "_inline")))
			fail_msg("a runtime frame in: %s", line);
	}
	if (cold != NCOLD * (ticks + missed))
		fail_msg("cold line: %lld, want %d x %lld ticks:\n%s", cold, NCOLD, ticks + missed,
			 out);
	assert_true(hot > 0);
	assert_int_equal(jump, runtime_frames);
	free(out);
	free(err);
}

static void test_profile_folded(void **state)
{
	(void)state;
	STB_TEST_BEGIN(240);
	check_folded(false);
	check_folded(true);
	STB_TEST_END();
}

/* The function names of `go tool pprof ARGS -top FILE`, in its order. */
static unsigned pprof_top(const char *file, const char *index, char (*names)[128], unsigned max)
{
	const char *go = ts_env("STB_GO", "go");
	char *argv[] = {(char *)go, "tool", "pprof", (char *)index, "-top", (char *)file, NULL};
	char *out = NULL, *err = NULL;
	int rc = ts_run(argv, &out, &err, 120);
	if (rc != 0)
		fail_msg("go tool pprof %s -top: exit %d: %s", index, rc, err);
	const char *p = strstr(out, "flat  flat%");
	assert_non_null(p);
	unsigned n = 0;
	for (p = strchr(p, '\n'); p && p[1] && n < max; p = strchr(p + 1, '\n')) {
		/* "      flat  flat%   sum%        cum   cum%  name" */
		char f[5][32];
		int k = 0;
		if (sscanf(p + 1, "%31s %31s %31s %31s %31s %n", f[0], f[1], f[2], f[3], f[4], &k) != 5)
			break;
		const char *e = strchr(p + 1 + k, '\n');
		snprintf(names[n++], 128, "%.*s", e ? (int)(e - p - 1 - k) : 127, p + 1 + k);
	}
	if (n == 0)
		fail_msg("no entry in the output of go tool pprof %s -top:\n%s", index, out);
	free(out);
	free(err);
	return n;
}

static void check_not_runtime(const char *name)
{
	if (strncmp(name, "stb_", 4) == 0 || strstr(name, "_inline") || strstr(name, "(inline)"))
		fail_msg("go tool pprof -top lists the runtime's %s", name);
}

/*
 * What `go tool pprof -top` shows first is the program's code, not the
 * runtime's (stb_jump_stack, jump_stack_inline, stb_ctx_trampoline, ...): in
 * the default wall view, the calls the bthreads wait in (bthread_usleep:
 * cold) and hot(); on-CPU only (-sample_index=cpu, as docs/profiling.md
 * says), hot() first.
 */
static void test_profile_top(void **state)
{
	(void)state;
	char path[256], *err = NULL;
	STB_TEST_BEGIN(180);
	tmp_path(path, sizeof(path), "top.pb.gz");
	int rc = run_loader(NULL, &err, 120, "--profile", "--duration", "2s", "-o", path, NULL);
	if (rc != 0)
		fail_msg("loader exit %d: %s", rc, err);
	free(err);
	char names[64][128];
	unsigned n = pprof_top(path, "-sample_index=wall", names, 64);
	/* hot() is below -top's node fraction beside 100 sleepers. */
	bool cold = false;
	for (unsigned i = 0; i < n; i++) {
		check_not_runtime(names[i]);
		cold |= strcmp(names[i], "cold") == 0;
	}
	assert_string_equal(names[0], "bthread_usleep"); /* 100 cold tasks, every tick */
	assert_true(cold);
	n = pprof_top(path, "-sample_index=cpu", names, 64);
	bool hot = false;
	for (unsigned i = 0; i < n; i++) {
		check_not_runtime(names[i]);
		hot |= strcmp(names[i], "hot") == 0;
	}
	if (strcmp(names[0], "hot_work") != 0 && strcmp(names[0], "hot") != 0)
		fail_msg("on-CPU, the first of -top is %s, not hot_work", names[0]);
	assert_true(hot);
	STB_TEST_END();
}

static void test_profile_json(void **state)
{
	(void)state;
	char path[256], *err = NULL;
	STB_TEST_BEGIN(120);
	tmp_path(path, sizeof(path), "prof.json");
	int rc = run_loader(NULL, &err, 120, "--profile", "--duration", "500ms", "--format", "json",
			    "-o", path, NULL);
	if (rc != 0)
		fail_msg("loader exit %d: %s", rc, err);
	free(err);
	const char *py = ts_env("STB_PYTHON3", "python3");
	const char *checker = ts_env("STB_JSON_CHECKER", "check_json_schema.py");
	char *argv[] = {(char *)py, (char *)checker, path, "--loader", NULL};
	rc = ts_run(argv, NULL, &err, 60);
	if (rc != 0)
		fail_msg("%s: %s", checker, err);
	free(err);
	STB_TEST_END();
}

/* SIGINT ends the profile early and the file is still complete. */
static void test_profile_sigint(void **state)
{
	(void)state;
	char path[256], pid[16];
	struct ts_prof p;
	STB_TEST_BEGIN(120);
	tmp_path(path, sizeof(path), "sigint.pb.gz");
	snprintf(pid, sizeof(pid), "%d", (int)tgt.pid);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		int nul = open("/dev/null", O_RDWR);
		dup2(nul, 0);
		dup2(nul, 1);
		dup2(nul, 2);
		execl(loader_path(), loader_path(), "--pid", pid, "--profile", "--duration", "60s",
		      "-o", path, (char *)NULL);
		_exit(127);
	}
	sleep(2);
	uint64_t t0 = ts_now_ms();
	kill(child, SIGINT);
	int rc = ts_wait_pid(child, ts_now_ms() + 30000);
	assert_int_equal(rc, 0);
	assert_true(ts_now_ms() - t0 < 10000);
	if (ts_pprof_raw(path, &p, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	assert_non_null(strstr(p.comments, "(interrupted)"));
	assert_true(stat_of(&p, "ticks") > 0);
	int64_t tagged = 0, in_hot = 0;
	check_profile(&p, 99, &tagged, &in_hot);
	if (tagged >= MIN_TAGGED)
		check_hot_ratio(tagged, in_hot);
	ts_prof_free(&p);
	STB_TEST_END();
}

/* CPU time (utime + stime) of process pid in seconds. */
static double cpu_seconds(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')');
	unsigned long long ut = 0, st = 0;
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
			  &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/*
 * Lost samples: the loader is stopped while hot() runs for 1.5 s of CPU at
 * 1000 Hz, more than the 16 MiB ring buffer holds (~490 records); the loss
 * is reported on stderr and in the profile, never dropped silently.
 */
static void test_profile_lost(void **state)
{
	(void)state;
	char path[256], pid[16], errpath[256];
	struct ts_prof p;
	STB_TEST_BEGIN(200);
	tmp_path(path, sizeof(path), "lost.pb.gz");
	tmp_path(errpath, sizeof(errpath), "lost.stderr");
	snprintf(pid, sizeof(pid), "%d", (int)tgt.pid);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		int nul = open("/dev/null", O_RDWR);
		int e = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(nul, 0);
		dup2(nul, 1);
		dup2(e, 2);
		execl(loader_path(), loader_path(), "--pid", pid, "--profile", "--duration", "120s",
		      "--freq", "1000", "-o", path, (char *)NULL);
		_exit(127);
	}
	sleep(2); /* sampling */
	assert_int_equal(kill(child, SIGSTOP), 0);
	double c0 = cpu_seconds(tgt.pid);
	assert_true(c0 >= 0);
	uint64_t until = ts_now_ms() + 100000;
	while (cpu_seconds(tgt.pid) - c0 < 1.5 && ts_now_ms() < until)
		usleep(100000);
	assert_true(cpu_seconds(tgt.pid) - c0 >= 1.5);
	kill(child, SIGCONT);
	sleep(1);
	kill(child, SIGINT);
	int rc = ts_wait_pid(child, ts_now_ms() + 60000);
	assert_int_equal(rc, 0);
	if (ts_pprof_raw(path, &p, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	long long lost = stat_of(&p, "lost_samples");
	if (lost <= 0)
		fail_msg("no lost samples after 1.5 s of CPU at 1000 Hz with the loader stopped");
	char want[128];
	snprintf(want, sizeof(want), "%lld on-CPU samples were lost", lost);
	assert_non_null(strstr(p.comments, want));
	int found = 0;
	for (int i = 0; i < p.ns; i++) {
		if (!ts_sample_has_label(&p.s[i], "state", "lost"))
			continue;
		found++;
		assert_int_equal(p.s[i].v[0], lost);
		assert_int_equal(p.s[i].v[1], lost * 1000000);
		char stack[256];
		ts_sample_stack(&p, &p.s[i], stack, sizeof(stack));
		assert_string_equal(stack, "[lost: ring buffer full]");
	}
	assert_int_equal(found, 1);
	ts_prof_free(&p);
	FILE *f = fopen(errpath, "re");
	assert_non_null(f);
	char buf[8192];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	snprintf(want, sizeof(want), "warning: %lld on-CPU samples were lost", lost);
	if (!strstr(buf, want))
		fail_msg("stderr lacks \"%s\": %s", want, buf);
	STB_TEST_END();
}

/* The progress line appears when stderr is a terminal (and only then). */
static void test_profile_progress(void **state)
{
	(void)state;
	char path[256], pid[16], *out = NULL, *err = NULL;
	STB_TEST_BEGIN(120);
	tmp_path(path, sizeof(path), "progress.folded");
	snprintf(pid, sizeof(pid), "%d", (int)tgt.pid);
	char *argv[] = {(char *)loader_path(), "--pid", pid, "--profile", "--duration", "1s",
			"-o", path, NULL};
	int rc = ts_run_pty(argv, &out, 60);
	assert_int_equal(rc, 0);
	if (!strstr(out, "\rstb-bpf-loader: profiling pid") || !strstr(out, " lost"))
		fail_msg("no progress line on the terminal: %s", out);
	free(out);
	rc = run_loader(NULL, &err, 60, "--profile", "--duration", "1s", "-o", path, NULL);
	assert_int_equal(rc, 0);
	assert_null(strstr(err, "\r"));
	free(err);
	STB_TEST_END();
}

/* Strict parsing: bad values exit 64 naming the option; good ones get past
 * parsing (then fail on a process that does not exist: exit 1). */
static void test_profile_args(void **state)
{
	(void)state;
	static const char *const bad[][6] = {
		{"--profile", "--duration", "10x", NULL},
		{"--profile", "--duration", "1.5s", NULL},
		{"--profile", "--duration", "-1", NULL},
		{"--profile", "--duration", "0", NULL},
		{"--profile", "--duration", "", NULL},
		{"--profile", "--duration", "s", NULL},
		{"--profile", "--duration", "25h", NULL},
		{"--profile", "--duration", "99999999999999999999999", NULL},
		{"--profile", "--freq", "0", NULL},
		{"--profile", "--freq", "1001", NULL},
		{"--profile", "--freq", "99hz", NULL},
		{"--duration", "5s", NULL},
		{"--freq", "99", NULL},
		{"--profile", "--format", "text", NULL},
		{"--profile", "--group", NULL},
		{"--profile", "--state", "running", NULL},
		{"--profile", "--bthread", "4294967296", NULL},
	};
	static const char *const good[][6] = {
		{"--profile", "--duration", "500ms", NULL},
		{"--profile", "--duration", "2m", "--freq", "1000", NULL},
		{"--profile", "--duration", "30", "--freq", "1", NULL},
		{"--profile", "--format", "json", NULL},
	};
	STB_TEST_BEGIN(60);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *argv[10] = {(char *)loader_path(), "--pid", "1"};
		int n = 3;
		for (int k = 0; bad[i][k]; k++)
			argv[n++] = (char *)bad[i][k];
		argv[n] = NULL;
		char *err = NULL;
		int rc = ts_run(argv, NULL, &err, 30);
		if (rc != 64 || !strstr(err, "stb-bpf-loader: --"))
			fail_msg("%s %s %s: exit %d: %s", bad[i][0], bad[i][1] ? bad[i][1] : "",
				 bad[i][1] && bad[i][2] ? bad[i][2] : "", rc, err);
		free(err);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		char *argv[10] = {(char *)loader_path(), "--pid", "2147483647"};
		int n = 3;
		for (int k = 0; good[i][k]; k++)
			argv[n++] = (char *)good[i][k];
		argv[n] = NULL;
		char *err = NULL;
		int rc = ts_run(argv, NULL, &err, 30);
		if (rc != 1 || !strstr(err, "no such process"))
			fail_msg("%s %s %s: exit %d: %s", good[i][0], good[i][1], good[i][2], rc, err);
		free(err);
	}
	/* --help shows the new options with examples. */
	char *argv[] = {(char *)loader_path(), "--help", NULL};
	char *out = NULL;
	assert_int_equal(ts_run(argv, &out, NULL, 30), 0);
	assert_non_null(strstr(out, "--profile --duration 10s --freq 99 -o prof.pb.gz"));
	assert_non_null(strstr(out, "--format folded"));
	free(out);
	STB_TEST_END();
}

int main(void)
{
	int rc = ts_require_privilege("test_profile");
	if (rc)
		return rc;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_profile_args),
		cmocka_unit_test(test_profile_pprof),
		cmocka_unit_test(test_profile_folded),
		cmocka_unit_test(test_profile_top),
		cmocka_unit_test(test_profile_json),
		cmocka_unit_test(test_profile_sigint),
		cmocka_unit_test(test_profile_progress),
		cmocka_unit_test(test_profile_lost),
	};
	return cmocka_run_group_tests_name("profile", tests, target_start, target_stop);
}
