/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader against a hostile target (hostile_target.c) in one mode
 * (argv[1]): every run -- text, JSON, a filtered and grouped folded snapshot,
 * pprof to a file, a short profile -- must end within its deadline with exit
 * status 0 or 1 and a clear message, no signal, no sanitizer report, at most
 * 256 MB of RSS, and output that a terminal and a JSON parser can take.
 * Exits 77 unprivileged.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/env.h"
#include "support/json_parse.h"
#include "support/proc.h"

#define DEADLINE_S 4
#define SLACK_MS 1500u
#define RSS_MAX_KB (256u << 10)

static char loader_path[PATH_MAX], target_path[PATH_MAX], lib_path[PATH_MAX],
    rss_exec_path[PATH_MAX];
static const char *mode;

/* What a mode must give (text run): exit status (-1: 0 or 1), a message on
 * stderr, and whether the run must end well before its deadline. */
struct want {
	const char *mode;
	int exit;
	const char *msg;
	bool quick;
};

static const struct want wants[] = {
    {"bad-magic", 1, "without the stb magic", true},
    {"bad-version", 1, "ABI version 99", true},
    {"bad-entry-size", 1, "entry size 64", true},
    {"bad-header-entries", 1, "header entries 0", true},
    {"bad-max-workers", 1, "max workers", true},
    {"bad-table-size", 1, "does not match its capacity", true},
    {"bad-backing", 1, "backing", true},
    {"small-memfd", 1, "its header claims", true},
    {"huge-capacity", 1, "capacity 16777216", true},
    {"max-capacity", 0, NULL, true},
    {"unsealed", 1, "not sealed against shrinking", true},
    {"truncate", 1, "not sealed against shrinking", true},
    {"hwm-beyond", -1, NULL, true},
    {"nworkers-beyond", -1, NULL, false},
    {"bad-states", 1, "could not be traced", true},
    {"bad-wait-kinds", -1, NULL, true},
    {"bad-workers", 1, "could not be traced", true},
    {"wild-stacks", 1, "could not be traced", true},
    {"changing-ids", -1, NULL, false},
    {"held-leases", 1, "were not traced", false},
    {"never-settle", -1, NULL, false},
    {"switching", 1, "were not traced", false},
    {"rewrite", -1, NULL, false},
    {"names", 0, NULL, true},
    {"running", -1, NULL, false},
    {"cfi-loop", -1, NULL, false},
    {"truncated-elf", -1, NULL, false},
    {"truncated-file", -1, NULL, false},
    {"deep-running", -1, NULL, false},
    {"threads", -1, NULL, false},
};

struct target {
	struct ts_proc p;
	pid_t pid;
};

/* hostile_target reads stdin to its end: /dev/null ends it at once, so it
 * is started with a pipe kept open by this process instead. */
static int keep_stdin(void *arg)
{
	int fd = *(int *)arg;
	return dup2(fd, STDIN_FILENO) < 0 ? -errno : 0;
}

static void target_start_piped(struct target *t, int *wr)
{
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	char *argv[] = {target_path, (char *)mode, lib_path, NULL};
	assert_int_equal(ts_proc_start(&t->p, argv, NULL, keep_stdin, &p[0]), 0);
	close(p[0]);
	*wr = p[1];
	uint64_t until = ts_now_ns() + 20000000000ull;
	while (!(t->p.out.p && strstr(t->p.out.p, "ready\n")) && ts_now_ns() < until)
		if (!ts_proc_pump(&t->p, 100))
			break;
	if (!t->p.out.p || !strstr(t->p.out.p, "ready\n"))
		fail_msg("hostile_target %s did not get ready: %s", mode,
			 t->p.err.p ? t->p.err.p : "");
	assert_int_equal(sscanf(t->p.out.p, "pid %d", &t->pid), 1);
}

static bool raw_controls(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c < 0x20 && c != '\n') || c == 0x7f)
			return true;
	}
	return false;
}

/* One loader run with args (NULL-terminated) and its checks. Returns the
 * exit status. */
static int run(const char *what, bool text, bool json, unsigned deadline_s, char **args)
{
	/* Through rss_exec: the loader's own peak RSS, not this process's. */
	char rss_file[PATH_MAX];
	snprintf(rss_file, sizeof(rss_file), "%s/rss", ts_tmpdir());
	char *argv[34];
	int n = 0;
	argv[n++] = rss_exec_path;
	argv[n++] = rss_file;
	argv[n++] = loader_path;
	for (int i = 0; args[i] && n < 33; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	struct ts_proc p;
	uint64_t t0 = ts_now_ns();
	assert_int_equal(ts_proc_start(&p, argv, NULL, NULL, NULL), 0);
	int rc = ts_proc_wait(&p, (int)(deadline_s * 1000u + SLACK_MS + 5000));
	uint64_t ms = (ts_now_ns() - t0) / 1000000u;
	int code = ts_proc_exit_code(&p);
	long rss_kb = -1;
	FILE *rf = fopen(rss_file, "r");
	if (!rf || fscanf(rf, "%ld", &rss_kb) != 1)
		fail_msg("%s: no peak RSS from rss_exec (exit %d)", what, code);
	fclose(rf);
	unlink(rss_file);
	const char *err = p.err.p ? p.err.p : "";
	print_message("  %-24s exit %d, %4" PRIu64 " ms, %5ld MB RSS: %.160s\n", what, code, ms,
		      rss_kb >> 10, strchr(err, '\n') ? err : "(no message)");
	if (rc != 0 || ms > deadline_s * 1000u + SLACK_MS)
		fail_msg("%s: ran %" PRIu64 " ms, past its %u s deadline", what, ms, deadline_s);
	if (code != 0 && code != 1)
		fail_msg("%s: exit status %d (a signal is 128 + n), stderr:\n%s", what, code, err);
	if (strstr(err, "Sanitizer") || strstr(err, "runtime error:"))
		fail_msg("%s: sanitizer report:\n%s", what, err);
	if (code == 1 && !strstr(err, "stb-bpf-loader: "))
		fail_msg("%s: exit 1 without a message", what);
	if ((unsigned long)rss_kb > RSS_MAX_KB)
		fail_msg("%s: %ld MB of RSS", what, rss_kb >> 10);
	if (raw_controls(err, strlen(err)))
		fail_msg("%s: a control byte on stderr", what);
	if (text && p.out.p && raw_controls(p.out.p, p.out.len))
		fail_msg("%s: a control byte in the text output", what);
	/* (A profile of ids that change every tick is large: the parser of the
	 * tests is slow; its validity is checked by smaller runs.) */
	if (json && p.out.len && p.out.len < (4u << 20)) {
		const char *why = NULL;
		struct ts_json *doc = ts_json_parse(p.out.p, &why);
		if (!doc)
			fail_msg("%s: invalid JSON (%s):\n%.400s", what, why, p.out.p);
		ts_json_free(doc);
	}
	ts_proc_free(&p);
	return code;
}

static void test_mode(void **state)
{
	(void)state;
	const struct want *w = NULL;
	for (size_t i = 0; i < sizeof(wants) / sizeof(wants[0]); i++)
		if (strcmp(wants[i].mode, mode) == 0)
			w = &wants[i];
	if (!w)
		fail_msg("unknown mode %s", mode);
	struct target t;
	int keep;
	target_start_piped(&t, &keep);
	char pid[16], dl[16], out[PATH_MAX];
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	snprintf(dl, sizeof(dl), "%u", DEADLINE_S);
	snprintf(out, sizeof(out), "%s/hostile-%s.pb.gz", ts_tmpdir(), mode);

	uint64_t t0 = ts_now_ns();
	char *text[] = {"--pid", pid, "--deadline", dl, NULL};
	int code = run("text", true, false, DEADLINE_S, text);
	uint64_t ms = (ts_now_ns() - t0) / 1000000u;
	if (w->exit >= 0 && code != w->exit)
		fail_msg("text: exit %d, want %d", code, w->exit);
	if (w->quick && ms > DEADLINE_S * 1000u / 2)
		fail_msg("text: %" PRIu64 " ms: this mode must not take the deadline", ms);
	char *json[] = {"--pid", pid, "--format", "json", "--deadline", dl, NULL};
	run("json", false, true, DEADLINE_S, json);
	char *filtered[] = {"--pid",  pid,          "--state", "running",   "--group", "--format",
			    "folded", "--deadline", dl,        "--timeout", "20",      NULL};
	run("running, grouped, folded", true, false, DEADLINE_S, filtered);
	char *pprof[] = {"--pid",       pid,    "--format",   "pprof", "-o", out,
			 "--max-depth", "1024", "--deadline", dl,      NULL};
	run("pprof -o", false, false, DEADLINE_S, pprof);
	char *profile[] = {"--pid",    pid,    "--profile",  "--duration", "1s",
			   "--format", "json", "--deadline", "5",          NULL};
	run("--profile 1s", false, true, 5, profile);
	if (w->msg) {
		/* The message of the text run, checked once more for the record. */
		struct ts_proc p;
		char *argv[] = {loader_path, "--pid", pid, "--deadline", dl, NULL};
		assert_int_equal(ts_proc_start(&p, argv, NULL, NULL, NULL), 0);
		ts_proc_wait(&p, DEADLINE_S * 1000 + (int)SLACK_MS + 5000);
		if (!p.err.p || !strstr(p.err.p, w->msg))
			fail_msg("text: stderr does not say \"%s\":\n%s", w->msg, p.err.p);
		ts_proc_free(&p);
	}
	/* The target survived all of it. */
	assert_int_equal(kill(t.pid, 0), 0);
	close(keep);
	ts_proc_wait(&t.p, 10000);
	ts_proc_free(&t.p);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test_hostile MODE\n");
		return 64;
	}
	mode = argv[1];
	ts_path(loader_path, sizeof(loader_path), "STB_LOADER", "../loader/stb-bpf-loader");
	ts_path(target_path, sizeof(target_path), "STB_HOSTILE_TARGET", "hostile_target");
	ts_path(lib_path, sizeof(lib_path), "STB_HOSTILE_LIB", "libhostile_lib.so");
	ts_path(rss_exec_path, sizeof(rss_exec_path), "STB_RSS_EXEC", "rss_exec");
	int rc = ts_require_privilege("test_hostile");
	if (rc)
		return rc;
#if defined(__SANITIZE_ADDRESS__)
	/* The loader's RSS is checked: ASan's quarantine of freed memory (256
	 * MB by default) would count as the loader's. */
	ts_sanitizer_opt("ASAN_OPTIONS", "quarantine_size_mb=8");
#endif
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_mode)};
	return _cmocka_run_group_tests(mode, tests, 1, NULL, NULL);
}
