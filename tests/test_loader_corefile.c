/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader --core: loader_target aborts (a kernel-written core, with
 * and without frame pointers) or is dumped live by gcore; every chain must come
 * out of the core complete and in order, running ones from their thread's
 * registers, and every thread of the core has its frames or names its task;
 * one created but not yet run (abort-starting) is "starting", no error.
 * why_target aborted in a mutex deadlock and in a join cycle: its
 * waits, owners and deadlocks come out of the core as from a live trace.
 * Truncated, foreign and non-core files give their messages. crash_target
 * faults in a bthread and in a plain pthread: the task or thread that took
 * the signal comes first, flagged with it and its fault address, in every
 * format. stb-bpf-loader --pid P --save FILE of a default target: --core
 * FILE gives what a live snapshot gives.
 * Sets kernel.core_pattern for the run and restores it (77 when it cannot).
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "loader_checks.h"
#include "why_checks.h"

#define CORE_PATTERN "/proc/sys/kernel/core_pattern"

static char saved_pattern[4096];
static bool pattern_set;
static char core_dir[PATH_MAX];
static char crash_path[PATH_MAX];

static const char *const chain_cond[] = {"bthread_cond_wait", "ltgt_cond_leaf", "ltgt_cond_mid",
					 "ltgt_cond_main", "stb_task_entry", NULL};
static const char *const chain_join[] = {"bthread_join", "ltgt_join_leaf", "ltgt_join_mid",
					 "ltgt_join_main", "stb_task_entry", NULL};
static const char *const chain_joinee[] = {"butex_wait", "ltgt_butex_leaf", "ltgt_butex_mid",
					   "ltgt_joinee_main", "stb_task_entry", NULL};

/* What a core of loader_target --cond 1 --join 1 must show. */
static const struct expect core_expects[] = {
    {"butex", chain_butex, "suspended", "context"}, {"sleep", chain_sleep, "suspended", "context"},
    {"mutex", chain_mutex, "suspended", "context"}, {"fd", chain_fd, "suspended", "context"},
    {"cond", chain_cond, "suspended", "context"},   {"join", chain_join, "suspended", "context"},
    {"spin", chain_spin, "running", "core"},        {"pthread", chain_pthread, "running", "core"},
};

/* No yielders: a core freezes a task mid-switch as it is (about-to-run,
 * suspending), with no consistent context to unwind from. */
static const char *const core_args[] = {"--cond", "1", "--join", "1", "--yield", "0", NULL};
#define CORE_TASKS (DEFAULT_TASKS + 3u - 2u) /* + cond, join, its joinee; - 2 yield */

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t n = strlen(s);
	ssize_t w = write(fd, s, n);
	int e = w == (ssize_t)n ? 0 : (w < 0 ? -errno : -EIO);
	if (close(fd) != 0 && e == 0)
		e = -errno;
	return e;
}

static void restore_pattern(void)
{
	if (pattern_set && write_file(CORE_PATTERN, saved_pattern) == 0)
		pattern_set = false;
}

/* core_pattern -> core_dir/core.%p, RLIMIT_CORE unlimited (inherited by the
 * targets). 0, or a reason in why. */
static int setup_cores(char *why, size_t len)
{
	FILE *f = fopen(CORE_PATTERN, "re");
	if (!f) {
		snprintf(why, len, "cannot read %s: %s", CORE_PATTERN, strerror(errno));
		return -1;
	}
	size_t n = fread(saved_pattern, 1, sizeof(saved_pattern) - 1, f);
	fclose(f);
	saved_pattern[n] = 0;
	char tmpl[] = "/tmp/stb-core-test.XXXXXX";
	if (!mkdtemp(tmpl)) {
		snprintf(why, len, "mkdtemp: %s", strerror(errno));
		return -1;
	}
	snprintf(core_dir, sizeof(core_dir), "%s", tmpl);
	struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
	if (setrlimit(RLIMIT_CORE, &rl) != 0) {
		snprintf(why, len, "setrlimit(RLIMIT_CORE): %s", strerror(errno));
		return -1;
	}
	char pat[PATH_MAX + 16];
	snprintf(pat, sizeof(pat), "%s/core.%%p", core_dir);
	pattern_set = true; /* restore even after a partial write */
	atexit(restore_pattern);
	int rc = write_file(CORE_PATTERN, pat);
	if (rc != 0) {
		pattern_set = false;
		snprintf(why, len, "cannot set %s: %s", CORE_PATTERN, strerror(-rc));
		return -1;
	}
	return 0;
}

static void core_path(char *buf, size_t len, const char *prefix, pid_t pid)
{
	snprintf(buf, len, "%s/%s.%d", core_dir, prefix, (int)pid);
}

/* Runs argv (NULL-terminated) with its output to /dev/null; its exit code. */
static int run_quiet(char *const argv[], int timeout_s)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	int st = 0;
	uint64_t deadline = ts_now_ns() + (uint64_t)timeout_s * 1000000000ull;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			break;
		if (ts_now_ns() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			fail_msg("%s did not end within %d s", argv[0], timeout_s);
		}
		ts_sleep_ms(10);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Waits for the target to die of SIGABRT with a core: its path into core. */
static void target_core(struct ts_ltarget *t, char *core, size_t len)
{
	int st = 0;
	uint64_t deadline = ts_now_ns() + 60000000000ull;
	while (waitpid(t->pid, &st, WNOHANG) != t->pid) {
		if (ts_now_ns() > deadline)
			fail_msg("the target did not abort within 60 s");
		ts_sleep_ms(10);
	}
	target_forget(t);
	close(t->to_fd);
	close(t->from_fd);
	t->reaped = true;
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT || !WCOREDUMP(st))
		fail_msg("the target did not dump core on SIGABRT (status 0x%x)", st);
	core_path(core, len, "core", t->pid);
	struct stat sb;
	if (stat(core, &sb) != 0)
		fail_msg("no core at %s: %s", core, strerror(errno));
}

/* Makes the target abort; waits for its core. */
static void target_abort(struct ts_ltarget *t, char *core, size_t len)
{
	assert_int_equal(write(t->to_fd, "abort\n", 6), 6);
	target_core(t, core, len);
}

static void check_core_task(const struct ts_json *doc, const struct ts_ltarget *tg,
			    const struct expect *e, unsigned i, bool nofp)
{
	uint64_t id = chain_id(tg, e->chain, i);
	const struct ts_json *t = json_task(doc, id);
	if (!t)
		fail_msg("%s task %" PRIu64 " missing from the core's JSON", e->chain, id);
	const char *err = ts_json_str(t, "error");
	if (err)
		fail_msg("%s task %" PRIu64 ": %s", e->chain, id, err);
	const char *state = ts_json_str(t, "state");
	const char *capture = ts_json_str(t, "capture");
	assert_non_null(state);
	assert_non_null(capture);
	if (e->state && strcmp(state, e->state) != 0)
		fail_msg("%s task %" PRIu64 " is %s, want %s", e->chain, id, state, e->state);
	if (strcmp(state, "running") == 0) {
		assert_string_equal(capture, "core"); /* its thread's NT_PRSTATUS */
		assert_true(ts_json_u64(t, "tid", 0) > 0);
	} else {
		assert_string_equal(capture, "context");
	}
	assert_int_equal(ts_json_bool(t, "truncated"), 0);
	char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
	unsigned n = json_frames(t, frames, sources);
	const char *const *want = e->frames;
	if (strcmp(e->chain, "yield") == 0 && strcmp(state, "ready") == 0)
		want = chain_yield_ready;
	if (!frames_have(frames, n, want)) {
		dump_frames(e->chain, id, frames, n);
		fail_msg("%s task %" PRIu64 ": expected frames missing", e->chain, id);
	}
	for (unsigned k = 0; nofp && k < n; k++) {
		if (strncmp(frames[k], "ltgt_", 5) == 0 && strcmp(sources[k], "dwarf") != 0) {
			dump_frames(e->chain, id, frames, n);
			fail_msg("frame %u (%s) of a -fomit-frame-pointer function has source %s",
				 k, frames[k], sources[k]);
		}
	}
}

/* The core's threads in doc: each with its frames, or naming the task it
 * runs, none failed. A thread caught before it ran is "starting" with its
 * one frame in the C library's clone; starting_tid: that thread (0: any
 * may be, as the fd dispatcher when the abort comes right after its
 * creation -- nothing else is). */
static void check_core_threads(const struct ts_json *doc, uint32_t starting_tid)
{
	const struct ts_json *threads = ts_json_get(doc, "threads");
	assert_non_null(threads);
	assert_true(threads->n > 1);
	bool found = false;
	for (const struct ts_json *t = threads->child; t; t = t->next) {
		uint64_t tid = ts_json_u64(t, "tid", 0);
		const char *err = ts_json_str(t, "error");
		if (err)
			fail_msg("thread %" PRIu64 " of the core: %s", tid, err);
		char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
		unsigned n = json_frames(t, frames, sources);
		bool runs_task = ts_json_get(t, "bthread") || ts_json_get(t, "pthread");
		if (runs_task ? n != 0 : n == 0)
			fail_msg("thread %" PRIu64 " of the core: %u frames%s", tid, n,
				 runs_task ? " beside its task's" : "");
		bool starting = ts_json_get(t, "starting") != NULL;
		if (starting) {
			assert_int_equal(ts_json_bool(t, "starting"), 1);
			if (starting_tid && tid != starting_tid)
				fail_msg("thread %" PRIu64 " is reported starting, not %u", tid,
					 starting_tid);
			if (n != 1 || !fn_match(frames[0], "clone3|__clone3"))
				fail_msg("starting thread %" PRIu64 ": %u frames, the first %s", tid,
					 n, n ? frames[0] : "none");
			assert_string_equal(ts_json_str(t, "capture"), "core");
			assert_null(ts_json_get(t, "syscall"));
		}
		if (starting_tid && tid == starting_tid) {
			if (!starting)
				fail_msg("thread %u, created but not run, is not reported starting",
					 starting_tid);
			found = true;
		}
	}
	if (starting_tid && !found)
		fail_msg("thread %u, created but not run, is not in the core's threads", starting_tid);
}

/* The loader on a core of tg: JSON with every chain and thread, and text
 * with as many tasks. starting_tid: as check_core_threads. */
static void check_core(const char *core, const struct ts_ltarget *tg, bool nofp,
		       uint32_t starting_tid)
{
	struct run r;
	run_loader(&r, "--core", core, "--format", "json", NULL);
	if (r.code != 0) {
		/* The whole output, for the failure's cause (cmocka cuts long messages). */
		FILE *f = fopen("test_loader_corefile.failed.json", "we");
		if (f) {
			fputs(r.out, f);
			fclose(f);
		}
		print_error("the loader's output on %s: test_loader_corefile.failed.json\n", core);
	}
	struct ts_json *doc = parse_json(r.out);
	/* The heartbeat wakes every few ms: the abort may catch it mid-switch,
	 * which the loader must say (exit 1, that task's error). */
	unsigned midswitch = 0;
	for (const struct ts_json *t = ts_json_get(doc, "tasks")->child; t; t = t->next) {
		const char *name = ts_json_str(t, "name"), *err = ts_json_str(t, "error");
		if (err && name && strcmp(name, "ltgt-heartbeat") == 0 &&
		    strstr(err, "no consistent context"))
			midswitch++;
	}
	if (midswitch && strstr(r.err, "1 of "))
		r.code = r.code == 1 ? 0 : r.code;
	expect_exit(&r, 0, NULL);
	assert_int_equal(ts_json_u64(doc, "pid", 0), (uint64_t)tg->pid);
	assert_string_equal(ts_json_str(doc, "capture"), "core");
	assert_int_equal(ts_json_bool(doc, "complete"), 1);
	assert_int_equal(ts_json_u64(doc, "abi_version", 0), STB_ABI_VERSION);
	assert_int_equal(ts_json_get(doc, "tasks")->n, CORE_TASKS);
	for (unsigned k = 0; k < sizeof(core_expects) / sizeof(core_expects[0]); k++) {
		const struct ts_chain *c = ts_ltarget_chain(tg, core_expects[k].chain);
		assert_non_null(c);
		for (unsigned i = 0; i < c->n; i++)
			check_core_task(doc, tg, &core_expects[k], i, nofp);
	}
	const struct ts_chain *jc = ts_ltarget_chain(tg, "join");
	assert_non_null(jc);
	/* The joinee is not in any chain: find it by its name. */
	const struct ts_json *tasks = ts_json_get(doc, "tasks");
	bool joinee = false;
	for (const struct ts_json *t = tasks->child; t; t = t->next) {
		const char *name = ts_json_str(t, "name");
		if (!name || strcmp(name, "ltgt-joinee") != 0)
			continue;
		char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
		unsigned n = json_frames(t, frames, sources);
		assert_true(frames_have(frames, n, chain_joinee));
		joinee = true;
	}
	assert_true(joinee);
	check_core_threads(doc, starting_tid);
	ts_json_free(doc);
	run_free(&r);

	run_loader(&r, "--core", core, "--group", NULL);
	expect_exit(&r, 0, NULL);
	assert_non_null(strstr(r.out, "ltgt_cond_leaf"));
	run_free(&r);
	run_loader(&r, "--core", core, "--state", "running", "-f", "json", NULL);
	expect_exit(&r, 0, NULL);
	doc = parse_json(r.out);
	for (const struct ts_json *t = ts_json_get(doc, "tasks")->child; t; t = t->next)
		assert_string_equal(ts_json_str(t, "state"), "running");
	ts_json_free(doc);
	run_free(&r);
}

static void abort_and_check(const char *path, bool nofp)
{
	struct ts_ltarget tg;
	target_start(&tg, path, core_args, NULL);
	char core[PATH_MAX + 32];
	target_abort(&tg, core, sizeof(core));
	check_core(core, &tg, nofp, 0);
	/* The other build as --exe: a different build id, reported, no symbols
	 * from it. */
	struct run r;
	run_loader(&r, "--core", core, "--exe", nofp ? target_path : target_nofp_path, NULL);
	if (r.code != 0 && r.code != 1)
		fail_msg("--exe of the other build: exit %d:\n%s", r.code, r.err);
	assert_non_null(strstr(r.out, "differs from the one in the core (build id)"));
	assert_non_null(strstr(r.out, "[build id mismatch]"));
	assert_null(strstr(r.out, "ltgt_butex_leaf"));
	run_free(&r);
	unlink(core);
}

static void test_core_abort(void **state)
{
	(void)state;
	abort_and_check(target_path, false);
}

static void test_core_abort_nofp(void **state)
{
	(void)state;
	abort_and_check(target_nofp_path, true);
}

/* A core written while a thread was created but had not run yet (the target
 * holds the CPU with SCHED_FIFO until it aborts): that thread is "starting",
 * one frame, no error, and the run is complete (exit 0); the rest as any
 * abort's. */
static void test_core_starting(void **state)
{
	(void)state;
	struct ts_ltarget tg;
	target_start(&tg, target_path, core_args, NULL);
	assert_int_equal(write(tg.to_fd, "abort-starting\n", 15), 15);
	char line[256] = "";
	int rc = ts_ltarget_line(&tg, line, sizeof(line), 20000);
	int tid = 0;
	if (rc != 0 || sscanf(line, "starting %d", &tid) != 1 || tid <= 0)
		fail_msg("abort-starting: '%s' (%s)", line, rc ? strerror(-rc) : "no tid");
	char core[PATH_MAX + 32];
	target_core(&tg, core, sizeof(core));
	check_core(core, &tg, false, (uint32_t)tid);

	struct run r;
	run_loader(&r, "--core", core, NULL);
	expect_exit(&r, 0, NULL);
	char head[64];
	snprintf(head, sizeof(head), "\nthread %d [starting: created, not run yet]\n#0 ", tid);
	const char *at = strstr(r.out, head);
	if (!at)
		fail_msg("no '%s' in:\n%s", head + 1, r.out);
	const char *eol = strchr(at + strlen(head), '\n');
	const char *fn = strstr(at + strlen(head), "clone3");
	if (!eol || !fn || fn > eol || strncmp(eol + 1, "#1 ", 3) == 0)
		fail_msg("thread %d: not its one frame in clone3:\n%s", tid, at + 1);
	assert_null(strstr(r.out, "not in the core"));
	run_free(&r);
	unlink(core);
}

/* gcore of a live target: it runs on afterwards. gdb stops copying a mapping
 * at its first unreadable page, so the target keeps its stack guards as
 * mappings of their own (docs/postmortem.md). */
static void test_core_gcore(void **state)
{
	(void)state;
#if defined(__SANITIZE_ADDRESS__)
	/* gdb copies ASan's whole shadow (a 6.6 TB sparse file: it ignores
	 * MADV_DONTDUMP): gcore of a sanitized target is left to the plain build. */
	print_message("gcore of an ASan target: not run in a sanitizer build\n");
	skip();
#endif
	static char guards_env[] = "STB_STACK_GUARDS=mprotect";
	char *const env[] = {guards_env, NULL};
	struct ts_ltarget tg;
	target_start(&tg, target_path, core_args, env);
	char prefix[PATH_MAX + 8], core[PATH_MAX + 32], pid[16];
	snprintf(prefix, sizeof(prefix), "%s/gcore", core_dir);
	snprintf(pid, sizeof(pid), "%d", (int)tg.pid);
	char *argv[] = {"gcore", "-o", prefix, pid, NULL};
	int rc = run_quiet(argv, 120);
	if (rc != 0)
		fail_msg("gcore -o %s %s: exit %d (is gdb installed? .ci/install-deps.sh)", prefix,
			 pid, rc);
	core_path(core, sizeof(core), "gcore", tg.pid);
	check_core(core, &tg, false, 0);
	assert_int_equal(stat_of(&tg, "signals"), 0);
	unlink(core);
	/* teardown() kills the target */
}

/* gcore of a target with the default stack guards: on Linux 6.13+ the
 * stacks behind MADV_GUARD_INSTALL guards are not in it; the loader must
 * say so once, naming the fix. (An older kernel's gcore holds them: the
 * trace is complete.) */
static void test_core_gcore_default(void **state)
{
	(void)state;
#if defined(__SANITIZE_ADDRESS__)
	print_message("gcore of an ASan target: not run in a sanitizer build\n");
	skip();
#endif
	struct ts_ltarget tg;
	target_start(&tg, target_path, core_args, NULL);
	char prefix[PATH_MAX + 32], core[PATH_MAX + 64], pid[16];
	snprintf(prefix, sizeof(prefix), "%s/gcore-default", core_dir);
	snprintf(pid, sizeof(pid), "%d", (int)tg.pid);
	char *argv[] = {"gcore", "-o", prefix, pid, NULL};
	int rc = run_quiet(argv, 120);
	if (rc != 0)
		fail_msg("gcore -o %s %s: exit %d", prefix, pid, rc);
	core_path(core, sizeof(core), "gcore-default", tg.pid);
	struct run r;
	run_loader(&r, "--core", core, NULL);
	if (r.code == 0) {
		print_message("this kernel's gcore holds the guarded stacks\n");
	} else {
		expect_exit(&r, 1, NULL);
		const char *note = strstr(r.out, "# note: ");
		const char *fix = strstr(r.out, "stacks are not in the core: gdb's gcore");
		if (!note || !fix || !strstr(fix, "STB_STACK_GUARDS=mprotect") ||
		    !strstr(r.out, "its stack is not in the core"))
			fail_msg("a gcore without the stacks: no note naming the fix:\n%s", r.out);
	}
	run_free(&r);
	unlink(core);
}

/* A core the kernel wrote for a process whose coredump_filter leaves out
 * private anonymous memory (the stacks): the note names the filter, not
 * gcore. */
static void test_core_filter(void **state)
{
	(void)state;
	struct ts_ltarget tg;
	target_start(&tg, target_path, core_args, NULL);
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/coredump_filter", (int)tg.pid);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_true(fputs("0x32\n", f) >= 0); /* the default 0x33 without bit 0 */
	assert_int_equal(fclose(f), 0);
	char core[PATH_MAX + 32];
	target_abort(&tg, core, sizeof(core));
	struct run r;
	run_loader(&r, "--core", core, NULL);
	expect_exit(&r, 1, NULL);
	const char *fix = strstr(r.out, "stacks are not in the core: the kernel left them out");
	if (!fix || !strstr(fix, "coredump_filter") || strstr(r.out, "gdb's gcore"))
		fail_msg("a kernel core without the stacks: no note naming the filter:\n%s", r.out);
	run_free(&r);
	unlink(core);
}

/* Copies of core cut at several sizes: each gives a clean error or a
 * partial trace that names the truncation, never a crash. */
static void cut_and_check(const char *core, off_t size)
{
	char cut[PATH_MAX + 32];
	const off_t sizes[] = {0, 40, 4096, 65536, size / 2, size - 4096};
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		snprintf(cut, sizeof(cut), "%s/cut", core_dir);
		int in = open(core, O_RDONLY | O_CLOEXEC);
		int out = open(cut, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		assert_true(in >= 0 && out >= 0);
		char buf[65536];
		off_t left = sizes[i];
		while (left > 0) {
			ssize_t n = read(in, buf, left < (off_t)sizeof(buf) ? (size_t)left : sizeof(buf));
			assert_true(n > 0);
			assert_int_equal(write(out, buf, (size_t)n), n);
			left -= n;
		}
		close(in);
		close(out);
		struct run r;
		run_loader(&r, "--core", cut, NULL);
		if (sanitizer_report(r.err))
			fail_msg("sanitizer report on a core cut at %lld bytes:\n%s",
				 (long long)sizes[i], r.err);
		/* Cut where no task's memory lies, every task is traced (exit 0);
		 * cut in the tasks' stacks, some fail (exit 1); cut before the
		 * table, nothing is traced (exit 1). Always: the output or the
		 * error names the truncation. */
		bool noted = strstr(r.out, "# note: the core file is truncated") != NULL;
		if (r.code != 0 && r.code != 1)
			fail_msg("a core cut at %lld bytes: exit %d:\n%s", (long long)sizes[i],
				 r.code, r.err);
		if (!noted && (r.code == 0 || (!strstr(r.err, "truncated") &&
					       !strstr(r.err, "not a core"))))
			fail_msg("a core cut at %lld bytes: no message naming it (exit %d):\n%s",
				 (long long)sizes[i], r.code, r.err);
		run_free(&r);
	}
	unlink(cut);
}

/* The wait of task t as "kind object" (object: the address, or none). */
static void wait_of(const struct ts_json *t, char *buf, size_t len)
{
	const struct ts_json *w = ts_json_get(t, "wait");
	const char *kind = w ? ts_json_str(w, "kind") : NULL, *obj = w ? ts_json_str(w, "object") : NULL;
	snprintf(buf, len, "%s %s", kind ? kind : "-", obj ? obj : "-");
}

/* A live JSON snapshot of tg into *live, then --pid --save core (without
 * the report options: --runtime-frames goes with --core) into *r, which
 * must succeed. */
static void live_then_save(struct ts_ltarget *tg, const char *core, struct run *live,
			   struct run *r)
{
	run_loader(live, "--pid", pid_arg(tg), "--timeout", CAPTURE_TIMEOUT, "-f", "json", NULL);
	expect_exit(live, 0, NULL);
	bool all_frames = run_loader_all_frames;
	run_loader_all_frames = false;
	run_loader(r, "--pid", pid_arg(tg), "--timeout", CAPTURE_TIMEOUT, "--save", core, NULL);
	run_loader_all_frames = all_frames;
	expect_exit(r, 0, NULL);
}

/* --pid P --save FILE of a target with the default settings (its stacks
 * behind MADV_GUARD_INSTALL guards where the kernel has them, which gcore
 * cannot copy): --core FILE gives every chain, and the same tasks, states,
 * waits and frames as a live snapshot of the same target. The file is 0600,
 * not overwritten without --overwrite, and cut or corrupted it gives clean
 * errors. */
static void test_core_save(void **state)
{
	(void)state;
	struct ts_ltarget tg;
	target_start(&tg, target_path, core_args, NULL);
	char core[PATH_MAX + 32];
	snprintf(core, sizeof(core), "%s/saved.%d", core_dir, (int)tg.pid);
	struct run live, r;
	live_then_save(&tg, core, &live, &r);
	if (!strstr(r.err, "read it with --core"))
		fail_msg("--save: no summary:\n%s", r.err);
	run_free(&r);
	struct stat sb;
	assert_int_equal(stat(core, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0600);
	check_core(core, &tg, false, 0);

	/* The same tasks, states, waits and frames as the live snapshot (the
	 * heartbeat moves between the two: its state and wait may differ). */
	run_loader(&r, "--core", core, "-f", "json", NULL);
	expect_exit(&r, 0, NULL);
	struct ts_json *ldoc = parse_json(live.out), *cdoc = parse_json(r.out);
	assert_int_equal(ts_json_get(ldoc, "tasks")->n, ts_json_get(cdoc, "tasks")->n);
	for (const struct ts_json *t = ts_json_get(ldoc, "tasks")->child; t; t = t->next) {
		uint64_t id = ts_json_u64(t, "id", 0);
		const struct ts_json *c = json_task(cdoc, id);
		const char *name = ts_json_str(t, "name");
		if (!c)
			fail_msg("task %" PRIu64 " (%s) of the live snapshot is not in the saved core",
				 id, name ? name : "?");
		if (name && strcmp(name, "ltgt-heartbeat") == 0)
			continue;
		assert_string_equal(ts_json_str(t, "state"), ts_json_str(c, "state"));
		char lw[128], cw[128];
		wait_of(t, lw, sizeof(lw));
		wait_of(c, cw, sizeof(cw));
		if (strcmp(lw, cw) != 0)
			fail_msg("task %" PRIu64 " (%s) waits on %s live, on %s in the saved core", id,
				 name ? name : "?", lw, cw);
		char lf[MAX_FRAMES][96], cf[MAX_FRAMES][96], ls[MAX_FRAMES][8], cs[MAX_FRAMES][8];
		unsigned ln = json_frames(t, lf, ls), cn = json_frames(c, cf, cs);
		/* A running task's frames move (check_core checked its chain). */
		bool running = strcmp(ts_json_str(t, "state"), "running") == 0;
		if (ln != cn && !running) {
			dump_frames("live", id, lf, ln);
			dump_frames("saved", id, cf, cn);
			fail_msg("task %" PRIu64 ": %u frames live, %u in the saved core", id, ln, cn);
		}
		for (unsigned k = 0; k < ln && k < cn && !running; k++)
			if (strcmp(lf[k], cf[k]) != 0)
				fail_msg("task %" PRIu64 " frame %u: %s live, %s in the saved core", id,
					 k, lf[k], cf[k]);
	}
	ts_json_free(ldoc);
	ts_json_free(cdoc);
	run_free(&r);
	run_free(&live);

	/* Not overwritten without --overwrite; replaced with it. */
	bool all_frames = run_loader_all_frames;
	run_loader_all_frames = false;
	run_loader(&r, "--pid", pid_arg(&tg), "--save", core, NULL);
	expect_exit(&r, 1, NULL);
	assert_non_null(strstr(r.err, "exists: give --overwrite to replace it"));
	run_free(&r);
	run_loader(&r, "--pid", pid_arg(&tg), "--timeout", CAPTURE_TIMEOUT, "--save", core,
		   "--overwrite", NULL);
	expect_exit(&r, 0, NULL);
	run_free(&r);
	/* Options that do not go with it. */
	run_loader(&r, "--pid", pid_arg(&tg), "--save", core, "--group", NULL);
	expect_exit(&r, 64, "--save writes a core file");
	run_free(&r);
	run_loader(&r, "--core", core, "--overwrite", NULL);
	expect_exit(&r, 64, "need --save");
	run_free(&r);
	run_loader_all_frames = all_frames;

	/* Cut short, and with its program headers pointing out of the file. */
	assert_int_equal(stat(core, &sb), 0);
	cut_and_check(core, sb.st_size);
	char bad[PATH_MAX + 32];
	snprintf(bad, sizeof(bad), "%s/saved-bad", core_dir);
	int in = open(core, O_RDONLY | O_CLOEXEC), out = open(bad, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(in >= 0 && out >= 0);
	static char buf[1 << 16];
	ssize_t n;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		assert_int_equal(write(out, buf, (size_t)n), n);
	uint64_t phoff = UINT64_MAX - 8; /* e_phoff */
	assert_int_equal(pwrite(out, &phoff, sizeof(phoff), 32), (ssize_t)sizeof(phoff));
	close(in);
	close(out);
	run_loader(&r, "--core", bad, NULL);
	expect_exit(&r, 1, "truncated or malformed");
	run_free(&r);
	unlink(bad);
	unlink(core);
}

/* A thread record of doc's "threads" named name, NULL when there is none. */
static const struct ts_json *json_thread_named(const struct ts_json *doc, const char *name)
{
	const struct ts_json *th = ts_json_get(doc, "threads");
	for (const struct ts_json *t = th ? th->child : NULL; t; t = t->next) {
		const char *n = ts_json_str(t, "name");
		if (n && strcmp(n, name) == 0)
			return t;
	}
	return NULL;
}

/* Saved, a running bthread 65 KiB deep in code without frame pointers
 * (past the BPF program's 32 KiB copy: the live loader reads the rest) has
 * the same frames in --core of the file as live, and says so when cut; the
 * threads that run no task are in the file with their names, states and
 * stacks: a plain pthread spinning, one asleep in nanosleep. */
static void test_core_save_deep(void **state)
{
	(void)state;
	static const char *const args[] = {"--deep", "1", "--plain", "1", NULL};
	struct ts_ltarget tg;
	target_start(&tg, target_nofp_path, args, NULL);
	const struct ts_chain *deep = ts_ltarget_chain(&tg, "deep");
	assert_non_null(deep);
	char core[PATH_MAX + 32];
	snprintf(core, sizeof(core), "%s/saved-deep.%d", core_dir, (int)tg.pid);
	struct run live, r;
	live_then_save(&tg, core, &live, &r);
	run_free(&r);
	run_loader(&r, "--core", core, "-f", "json", NULL);
	expect_exit(&r, 0, NULL);
	struct ts_json *ldoc = parse_json(live.out), *cdoc = parse_json(r.out);

	/* The deep spinner: it stays at one depth, so its frames are fixed. */
	const struct ts_json *lt = json_task(ldoc, deep->ids[0]), *ct = json_task(cdoc, deep->ids[0]);
	assert_non_null(lt);
	assert_non_null(ct);
	if (ts_json_str(ct, "error"))
		fail_msg("the deep bthread in the saved core: %s", ts_json_str(ct, "error"));
	char lf[MAX_FRAMES][96], cf[MAX_FRAMES][96], ls[MAX_FRAMES][8], cs[MAX_FRAMES][8];
	unsigned ln = json_frames(lt, lf, ls), cn = json_frames(ct, cf, cs);
	unsigned rec = 0;
	for (unsigned k = 0; k < ln; k++)
		rec += strcmp(lf[k], "ltgt_deep_rec") == 0;
	if (rec < 40)
		fail_msg("live: the deep bthread shows %u ltgt_deep_rec frames of 65", rec);
	if (ln != cn || ts_json_u64(lt, "frames_not_shown", 0) != ts_json_u64(ct, "frames_not_shown", 0)) {
		dump_frames("live", deep->ids[0], lf, ln);
		dump_frames("saved", deep->ids[0], cf, cn);
		fail_msg("the deep bthread: %u frames (%" PRIu64 " not shown) live, %u (%" PRIu64
			 ") in the saved core",
			 ln, ts_json_u64(lt, "frames_not_shown", 0), cn,
			 ts_json_u64(ct, "frames_not_shown", 0));
	}
	for (unsigned k = 0; k < ln; k++)
		if (strcmp(lf[k], cf[k]) != 0)
			fail_msg("the deep bthread, frame %u: %s live, %s in the saved core", k, lf[k],
				 cf[k]);
	const char *lw = ts_json_str(lt, "truncated_why"), *cw = ts_json_str(ct, "truncated_why");
	assert_int_equal(ts_json_bool(lt, "truncated"), ts_json_bool(ct, "truncated"));
	if ((lw != NULL) != (cw != NULL) || (lw && strcmp(lw, cw) != 0))
		fail_msg("the deep bthread is truncated by %s live, by %s in the saved core",
			 lw ? lw : "nothing", cw ? cw : "nothing");

	/* The plain pthreads: named, in their state, with their own frames. */
	static const struct {
		const char *name, *frame;
		bool syscall;
	} plain[] = {{"ltgt-plain-spin", "ltgt_plain_spin_leaf", false},
		     {"ltgt-plain-nap", "ltgt_plain_sleep_leaf", true}};
	for (unsigned i = 0; i < 2; i++) {
		const struct ts_json *l = json_thread_named(ldoc, plain[i].name);
		const struct ts_json *c = json_thread_named(cdoc, plain[i].name);
		if (!l || !c)
			fail_msg("thread %s is not in the %s", plain[i].name,
				 l ? "saved core" : "live snapshot");
		assert_int_equal(ts_json_u64(l, "tid", 0), ts_json_u64(c, "tid", 0));
		unsigned n = json_frames(c, cf, cs);
		bool has = false;
		for (unsigned k = 0; k < n; k++)
			has |= strcmp(cf[k], plain[i].frame) == 0;
		if (!has) {
			dump_frames(plain[i].name, ts_json_u64(c, "tid", 0), cf, n);
			fail_msg("thread %s in the saved core: no frame of %s", plain[i].name,
				 plain[i].frame);
		}
		const struct ts_json *sc = ts_json_get(c, "syscall");
		if (plain[i].syscall != (sc != NULL))
			fail_msg("thread %s in the saved core: %s a system call", plain[i].name,
				 sc ? "in" : "not in");
		if (sc && !strstr(ts_json_str(sc, "name") ? ts_json_str(sc, "name") : "", "nanosleep"))
			fail_msg("thread %s in the saved core: in %s, not nanosleep", plain[i].name,
				 ts_json_str(sc, "name") ? ts_json_str(sc, "name") : "?");
	}
	/* Every thread of the live snapshot, by tid and name. */
	const struct ts_json *lth = ts_json_get(ldoc, "threads");
	assert_non_null(lth);
	for (const struct ts_json *l = lth->child; l; l = l->next) {
		const char *name = ts_json_str(l, "name");
		const struct ts_json *c = name ? json_thread_named(cdoc, name) : NULL;
		if (!c && name)
			fail_msg("thread %s of the live snapshot is not in the saved core", name);
	}
	ts_json_free(ldoc);
	ts_json_free(cdoc);
	run_free(&r);
	run_free(&live);
	unlink(core);
}

/* Yielders switch all the time: a core catches some mid-switch (about to
 * run, suspending). Such a task is unwound from its worker's registers when
 * they are on its stack, else named as caught in a switch; every other
 * yielder is unwound as usual. Cores are taken until one shows a task
 * mid-switch (6 at most: the abort's timing decides). */
static void test_core_midswitch(void **state)
{
	(void)state;
	static const char *const args[] = {"--yield", "4", NULL};
	unsigned seen = 0, unwound = 0;
	for (unsigned attempt = 0; attempt < 6 && !seen; attempt++) {
		struct ts_ltarget tg;
		target_start(&tg, target_path, args, NULL);
		ts_sleep_ms(100);
		char core[PATH_MAX + 32];
		target_abort(&tg, core, sizeof(core));
		struct run r;
		run_loader(&r, "--core", core, "--format", "json", NULL);
		if (r.code != 0 && r.code != 1)
			fail_msg("exit %d on a core with yielders:\n%s", r.code, r.err);
		struct ts_json *doc = parse_json(r.out);
		const struct ts_chain *yc = ts_ltarget_chain(&tg, "yield");
		assert_non_null(yc);
		for (unsigned i = 0; i < yc->n; i++) {
			const struct ts_json *t = json_task(doc, yc->ids[i]);
			assert_non_null(t);
			const char *st = ts_json_str(t, "state"), *err = ts_json_str(t, "error");
			assert_non_null(st);
			bool mid = strcmp(st, "about-to-run") == 0 || strcmp(st, "suspending") == 0;
			seen += mid;
			if (err) {
				if (!mid || !strstr(err, "(a switch in progress)"))
					fail_msg("yielder %" PRIu64 " (%s): %s", yc->ids[i], st, err);
				continue;
			}
			char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
			unsigned n = json_frames(t, frames, sources);
			if (!frames_have(frames, n, chain_yield_any)) {
				dump_frames("yield", yc->ids[i], frames, n);
				fail_msg("yielder %" PRIu64 " (%s): its chain is missing", yc->ids[i], st);
			}
			if (mid) {
				assert_string_equal(ts_json_str(t, "capture"), "core");
				unwound++;
			}
		}
		ts_json_free(doc);
		run_free(&r);
		unlink(core);
	}
	print_message("tasks caught mid-switch: %u, unwound from their worker's registers: %u\n",
		      seen, unwound);
}

/* --sysroot: the modules of the core found under DIR by their paths (a
 * copy of the program and its libraries there), symbols from them. A
 * sysroot without them: the missing modules named, frames without symbols
 * (the files at the same paths on this machine are not used instead). */
static void test_core_sysroot(void **state)
{
	(void)state;
	struct ts_ltarget tg;
	target_start(&tg, target_path, core_args, NULL);
	char core[PATH_MAX + 32];
	target_abort(&tg, core, sizeof(core));
	char root[PATH_MAX + 16], cmd[6 * PATH_MAX];
	snprintf(root, sizeof(root), "%s/sysroot", core_dir);
	assert_int_equal(mkdir(root, 0700), 0);
	/* Nothing under root: the files on this machine are not used instead. */
	struct run r;
	run_loader(&r, "--core", core, "--sysroot", root, NULL);
	if (r.code != 0 && r.code != 1)
		fail_msg("--sysroot with an empty sysroot: exit %d:\n%s", r.code, r.err);
	if (!strstr(r.out, "not found on this machine"))
		fail_msg("an empty sysroot: no note of the missing modules:\n%.3000s", r.out);
	assert_null(strstr(r.out, "ltgt_butex_leaf"));
	run_free(&r);
	/* Now the program and its libraries under root. */
	const char *files[] = {target_path, NULL, NULL, NULL, NULL};
	char lib[PATH_MAX];
	snprintf(lib, sizeof(lib), "%s", ts_env("STB_LOADER", "stb-bpf-loader"));
	char *slash = strrchr(lib, '/');
	assert_non_null(slash);
	snprintf(slash, sizeof(lib) - (size_t)(slash - lib), "/../runtime/libbthread.so.0");
	char libreal[PATH_MAX];
	assert_non_null(realpath(lib, libreal));
	files[1] = libreal;
	files[2] = "/lib/x86_64-linux-gnu/libc.so.6";
	for (unsigned i = 0; files[i]; i++) {
		char real[PATH_MAX];
		assert_non_null(realpath(files[i], real));
		snprintf(cmd, sizeof(cmd), "mkdir -p '%s'\"$(dirname '%s')\" && cp '%s' '%s%s'", root,
			 real, real, root, real);
		if (system(cmd) != 0)
			fail_msg("cannot copy %s under %s", real, root);
	}
	run_loader(&r, "--core", core, "--sysroot", root, "--format", "json", NULL);
	if (r.code != 0 && r.code != 1)
		fail_msg("--sysroot: exit %d:\n%s", r.code, r.err);
	struct ts_json *doc = parse_json(r.out);
	const struct expect *e = &core_expects[0]; /* butex: program, libbthread */
	const struct ts_chain *c = ts_ltarget_chain(&tg, e->chain);
	assert_non_null(c);
	for (unsigned i = 0; i < c->n; i++) {
		const struct ts_json *t = json_task(doc, chain_id(&tg, e->chain, i));
		assert_non_null(t);
		char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
		unsigned n = json_frames(t, frames, sources);
		if (!frames_have(frames, n, e->frames)) {
			dump_frames(e->chain, c->ids[i], frames, n);
			fail_msg("--sysroot: the butex chain has no symbols from the sysroot's files");
		}
	}
	ts_json_free(doc);
	run_free(&r);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	assert_int_equal(system(cmd), 0);
	unlink(core);
}

static struct why_target wt;

static int why_teardown(void **state)
{
	why_stop(&wt);
	return teardown(state);
}

/* Sends w SIGABRT and waits for its core (in core, len bytes). */
static void why_abort(struct why_target *w, char *core, size_t len)
{
	pid_t pid = w->t.pid;
	assert_int_equal(kill(pid, SIGABRT), 0);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0)
		assert_int_equal(errno, EINTR);
	w->t.reaped = true;
	w->t.status = st;
	ts_ltarget_kill(&w->t); /* closes its pipes */
	w->started = false;
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT || !WCOREDUMP(st))
		fail_msg("why_target did not dump core on SIGABRT (status 0x%x)", st);
	core_path(core, len, "core", pid);
}

/* The loader's output on core in fmt (exit 0). */
static char *core_out(const char *core, const char *fmt)
{
	struct run r;
	run_loader(&r, "--core", core, "--format", fmt, NULL);
	expect_exit(&r, 0, NULL);
	char *out = strdup(r.out);
	assert_non_null(out);
	run_free(&r);
	return out;
}

/* why_target in scenario dl, aborted: the core's text and JSON reports hold
 * every wait, owner, creator and the deadlock, checked as the live ones are.
 * With a spinning bthread, the monitor dates the core: times are shown. */
static void why_core(enum why_dl dl, bool spin)
{
	static const char *const spin_args[] = {"--spin", "600000", "--execq", NULL};
	why_start(&wt, dl, spin ? spin_args : NULL, NULL);
	ts_sleep_ms(50); /* the monitor's first passes */
	char core[PATH_MAX + 32];
	why_abort(&wt, core, sizeof(core));
	char *text = core_out(core, "text");
	if (spin) {
		why_check_text(text, &wt);
	} else {
		/* Every worker parked: no times, the rest as live. */
		char line[1024], want[256];
		if (!why_text_line(text, wt.waiter, line, sizeof(line)))
			fail_msg("no mutex waiter in:\n%.4000s", text);
		snprintf(want, sizeof(want),
			 " waiting on mutex 0x%" PRIx64 " held by bthread %" PRIu64 " \"why owner\"",
			 wt.objs[0], wt.owner);
		if (!strstr(line, want))
			fail_msg("\"%s\" not in: %s", want, line);
		if (!strstr(text, "Found 1 deadlock:\n"))
			fail_msg("no deadlock found in the core:\n%.6000s", text);
		for (unsigned i = 0; i < wt.ndl; i++)
			if (!why_text_line(strstr(text, "Found 1 deadlock:\n"), wt.dlids[i], line,
					   sizeof(line)))
				fail_msg("deadlock member %" PRIu64 " missing", wt.dlids[i]);
	}
	bool timeless = strstr(text, "how long tasks were blocked is not shown") != NULL;
	if (spin && timeless)
		fail_msg("a core with a spinning bthread has no time:\n%.2000s", text);
	free(text);
	char *json = core_out(core, "json");
	struct ts_json *doc = why_parse_json(json);
	if (spin)
		why_check_json(doc, &wt);
	else
		assert_int_equal(ts_json_get(doc, "deadlocks")->n, 1);
	why_check_schema(json, "--loader", NULL);
	ts_json_free(doc);
	free(json);
	/* --stuck measures against the core's time: nothing is stuck for 10
	 * minutes in a target 1 s old; a core without a time says so. */
	struct run r;
	run_loader(&r, "--core", core, "--stuck", "600", NULL);
	if (!timeless) {
		expect_exit(&r, 0, NULL);
		/* (The deadlocks section names its members whatever --stuck says.) */
		const char *dl = strstr(r.out, "Found ");
		const char *b = strstr(r.out, "\nbthread ");
		if (b && (!dl || b < dl))
			fail_msg("tasks stuck for 10 minutes in a target 1 s old:\n%.3000s", r.out);
	} else {
		expect_exit(&r, 1, NULL);
		if (!strstr(r.err, "--stuck cannot select from this core"))
			fail_msg("--stuck on a core without a time: %s", r.err);
	}
	run_free(&r);
	unlink(core);
}

static void test_core_why_mutex(void **state)
{
	(void)state;
	why_core(WHY_DL_MUTEX2, true);
}

static void test_core_why_join(void **state)
{
	(void)state;
	why_core(WHY_DL_JOIN, false);
}

/* A core cut short, a core of a program without the runtime, a non-core. */
static void test_core_bad(void **state)
{
	(void)state;
	struct ts_ltarget tg;
	target_start(&tg, target_path, NULL, NULL);
	char core[PATH_MAX + 32];
	target_abort(&tg, core, sizeof(core));
	struct stat sb;
	assert_int_equal(stat(core, &sb), 0);
	cut_and_check(core, sb.st_size);
	unlink(core);

	/* A foreign core: sleep(1), no stb runtime. */
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execlp("sleep", "sleep", "60", (char *)NULL);
		_exit(127);
	}
	ts_sleep_ms(200);
	kill(pid, SIGSEGV);
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st) && WCOREDUMP(st));
	core_path(core, sizeof(core), "core", pid);
	struct run r;
	run_loader(&r, "--core", core, NULL);
	expect_exit(&r, 1, NULL);
	if (!strstr(r.err, "is not a stb runtime"))
		fail_msg("a core of sleep(1): %s", r.err);
	run_free(&r);
	unlink(core);

	run_loader(&r, "--core", "/proc/self/exe", NULL);
	expect_exit(&r, 1, NULL);
	assert_non_null(strstr(r.err, "not a core"));
	run_free(&r);
	run_loader(&r, "--core", "/nonexistent/core", NULL);
	expect_exit(&r, 1, NULL);
	assert_non_null(strstr(r.err, "cannot open the core file"));
	run_free(&r);
}

/* ---- crash cores: the task or thread that took the fatal signal ---- */

static const char *const chain_fault_bthread[] = {"ct_fault_leaf", "ct_fault_mid",
						  "ct_crasher_main", NULL};
static const char *const chain_fault_pthread[] = {"ct_fault_leaf", "ct_fault_mid",
						  "ct_thread_main", NULL};
static const char *const chain_ct_sleep[] = {"bthread_usleep", "ct_sleep_leaf", "ct_sleep_main",
					     NULL};

struct crash {
	pid_t pid;
	uint64_t who;   /* the crashing bthread's id, or the thread's tid */
	unsigned addr;  /* the fault address */
	uint64_t sleepers[8];
	unsigned nsleepers;
	char core[PATH_MAX + 32];
};

/* Runs crash_target mode until it dies of SIGSEGV with a core. */
static void crash_run(const char *mode, struct crash *c)
{
	memset(c, 0, sizeof(*c));
	int fds[2];
	assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		/* Sanitizers: the fault is the kernel's to handle (and dump). */
		ts_sanitizer_opt("ASAN_OPTIONS", "handle_segv=0");
		setenv("TSAN_OPTIONS", "handle_segv=0", 1);
		execl(crash_path, crash_path, mode, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	char out[4096];
	size_t len = 0;
	uint64_t deadline = ts_now_ns() + 60000000000ull;
	for (;;) {
		ssize_t n = read(fds[0], out + len, sizeof(out) - 1 - len);
		if (n <= 0 || len + (size_t)n >= sizeof(out) - 1) {
			if (n > 0)
				len += (size_t)n;
			break;
		}
		len += (size_t)n;
		if (ts_now_ns() > deadline)
			break;
	}
	out[len] = 0;
	close(fds[0]);
	int st = 0;
	while (waitpid(pid, &st, WNOHANG) != pid) {
		if (ts_now_ns() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			fail_msg("crash_target %s did not crash within 60 s", mode);
		}
		ts_sleep_ms(10);
	}
	c->pid = pid;
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV || !WCOREDUMP(st))
		fail_msg("crash_target %s did not dump core on SIGSEGV (status 0x%x): %s", mode, st,
			 out);
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		unsigned long long v;
		unsigned a;
		if (sscanf(line, "sleeper %llu", &v) == 1 && c->nsleepers < 8)
			c->sleepers[c->nsleepers++] = v;
		else if (sscanf(line, "crash bthread %llu 0x%x", &v, &a) == 2 ||
			 sscanf(line, "crash thread %llu 0x%x", &v, &a) == 2) {
			c->who = v;
			c->addr = a;
		}
	}
	assert_true(c->who != 0);
	assert_int_equal(c->nsleepers, 3);
	core_path(c->core, sizeof(c->core), "core", pid);
	struct stat sb;
	if (stat(c->core, &sb) != 0)
		fail_msg("no core at %s: %s", c->core, strerror(errno));
}

/* The "signal" member of a task, thread or the document: SIGSEGV at addr. */
static void check_signal_json(const struct ts_json *sig, unsigned addr)
{
	assert_non_null(sig);
	assert_int_equal(ts_json_u64(sig, "number", 0), SIGSEGV);
	assert_string_equal(ts_json_str(sig, "name"), "SIGSEGV");
	assert_int_equal(ts_json_u64(sig, "code", 0), 1); /* SEGV_MAPERR */
	assert_string_equal(ts_json_str(sig, "code_name"), "SEGV_MAPERR");
	char want[32];
	snprintf(want, sizeof(want), "0x%x", addr);
	assert_string_equal(ts_json_str(sig, "fault_addr"), want);
}

/* The first section of a text report (after the header and notes). */
static const char *first_section(const char *text)
{
	const char *p = text;
	while (*p == '#' || *p == '\n') {
		const char *nl = strchr(p, '\n');
		if (!nl)
			return p + strlen(p);
		p = nl + 1;
	}
	return p;
}

static void check_sleepers(const struct ts_json *doc, const struct crash *c)
{
	for (unsigned i = 0; i < c->nsleepers; i++) {
		const struct ts_json *t = json_task(doc, c->sleepers[i]);
		assert_non_null(t);
		assert_null(ts_json_get(t, "signal"));
		char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
		unsigned n = json_frames(t, frames, sources);
		if (!frames_have(frames, n, chain_ct_sleep)) {
			dump_frames("sleeper", c->sleepers[i], frames, n);
			fail_msg("sleeper %" PRIu64 ": expected frames missing", c->sleepers[i]);
		}
	}
}

/* A SIGSEGV in a bthread: that bthread first, flagged, in every format. */
static void test_core_crash_bthread(void **state)
{
	(void)state;
	struct crash c;
	crash_run("bthread", &c);
	struct run r;
	run_loader(&r, "--core", c.core, "-f", "json", NULL);
	expect_exit(&r, 0, NULL);
	why_check_schema(r.out, "--loader", NULL);
	struct ts_json *doc = parse_json(r.out);
	const struct ts_json *first = ts_json_get(doc, "tasks")->child;
	assert_non_null(first);
	assert_int_equal(ts_json_u64(first, "id", 0), c.who);
	assert_string_equal(ts_json_str(first, "state"), "running");
	assert_string_equal(ts_json_str(first, "capture"), "core");
	check_signal_json(ts_json_get(first, "signal"), c.addr);
	char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
	unsigned n = json_frames(first, frames, sources);
	if (n == 0 || strcmp(frames[0], "ct_fault_leaf") != 0 ||
	    !frames_have(frames, n, chain_fault_bthread)) {
		dump_frames("crasher", c.who, frames, n);
		fail_msg("the crashing bthread's stack is not the fault's");
	}
	const struct ts_json *dsig = ts_json_get(doc, "signal");
	check_signal_json(dsig, c.addr);
	assert_int_equal(ts_json_u64(dsig, "tid", 0), ts_json_u64(first, "tid", 1));
	assert_int_equal(ts_json_u64(dsig, "task", 0), c.who);
	uint64_t tid = ts_json_u64(dsig, "tid", 0);
	for (const struct ts_json *t = first->next; t; t = t->next)
		assert_null(ts_json_get(t, "signal"));
	/* Every thread of the core, none flagged: the crasher's thread names
	 * the bthread it ran. */
	const struct ts_json *threads = ts_json_get(doc, "threads");
	assert_non_null(threads);
	bool crasher_thread = false;
	for (const struct ts_json *t = threads->child; t; t = t->next) {
		assert_null(ts_json_get(t, "signal"));
		if (ts_json_u64(t, "tid", 0) == tid) {
			assert_int_equal(ts_json_u64(t, "bthread", 0), c.who);
			crasher_thread = true;
		}
	}
	assert_true(crasher_thread);
	check_sleepers(doc, &c);
	ts_json_free(doc);
	run_free(&r);

	/* Text: its section first, the signal on its header line. */
	char head[256], tail[256];
	snprintf(head, sizeof(head), "bthread %" PRIu64 " \"ct-crasher\" [running", c.who);
	snprintf(tail, sizeof(tail),
		 "tid %" PRIu64 "] -- killed by signal 11 (SIGSEGV, SEGV_MAPERR) at address 0x%x\n",
		 tid, c.addr);
	const char *want_note = "written on signal 11 (SIGSEGV, SEGV_MAPERR) at address";
	for (int grouped = 0; grouped < 2; grouped++) {
		if (grouped)
			run_loader(&r, "--core", c.core, "--group", NULL);
		else
			run_loader(&r, "--core", c.core, NULL);
		expect_exit(&r, 0, NULL);
		const char *sec = first_section(r.out);
		const char *eol = strchr(sec, '\n'), *t = strstr(sec, tail);
		if (strncmp(sec, head, strlen(head)) != 0 || !t || !eol || t > eol)
			fail_msg("%s text: the first section is not the crasher's:\n%s",
				 grouped ? "grouped" : "plain", r.out);
		assert_non_null(strstr(sec, "ct_fault_leaf"));
		assert_true(strstr(sec, "ct_fault_leaf") < strstr(sec, "ct_sleep_leaf"));
		assert_non_null(strstr(r.out, want_note));
		run_free(&r);
	}
	/* Folded stacks and pprof: the signal as the stack's leaf and labels. */
	run_loader(&r, "--core", c.core, "-f", "folded", NULL);
	expect_exit(&r, 0, NULL);
	const char *leaf = strstr(r.out, "ct_fault_leaf;[killed by signal 11 (SIGSEGV");
	if (!leaf)
		fail_msg("folded: no leaf naming the signal:\n%s", r.out);
	run_free(&r);
	unlink(c.core);
}

/* A SIGSEGV in a plain pthread: that thread first, unwound from its
 * registers, flagged. */
static void test_core_crash_pthread(void **state)
{
	(void)state;
	struct crash c;
	crash_run("pthread", &c);
	struct run r;
	run_loader(&r, "--core", c.core, "-f", "json", NULL);
	expect_exit(&r, 0, NULL);
	why_check_schema(r.out, "--loader", NULL);
	struct ts_json *doc = parse_json(r.out);
	/* Every thread of the core, the crasher first and alone flagged. */
	const struct ts_json *threads = ts_json_get(doc, "threads");
	assert_non_null(threads);
	assert_true(threads->n > 1);
	const struct ts_json *th = threads->child;
	for (const struct ts_json *t = th->next; t; t = t->next) {
		assert_null(ts_json_get(t, "signal"));
		assert_true(ts_json_u64(t, "tid", 0) != c.who);
	}
	assert_int_equal(ts_json_u64(th, "tid", 0), c.who);
	assert_string_equal(ts_json_str(th, "capture"), "core");
	assert_null(ts_json_str(th, "error"));
	check_signal_json(ts_json_get(th, "signal"), c.addr);
	char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
	unsigned n = json_frames(th, frames, sources);
	if (n == 0 || strcmp(frames[0], "ct_fault_leaf") != 0 ||
	    !frames_have(frames, n, chain_fault_pthread)) {
		dump_frames("thread", c.who, frames, n);
		fail_msg("the crashing thread's stack is not the fault's");
	}
	const struct ts_json *dsig = ts_json_get(doc, "signal");
	check_signal_json(dsig, c.addr);
	assert_int_equal(ts_json_u64(dsig, "tid", 0), c.who);
	assert_null(ts_json_get(dsig, "task"));
	for (const struct ts_json *t = ts_json_get(doc, "tasks")->child; t; t = t->next)
		assert_null(ts_json_get(t, "signal"));
	check_sleepers(doc, &c);
	ts_json_free(doc);
	run_free(&r);

	char head[160];
	snprintf(head, sizeof(head),
		 "thread %" PRIu64 " [running, tid %" PRIu64
		 "] -- killed by signal 11 (SIGSEGV, SEGV_MAPERR) at address 0x%x\n",
		 c.who, c.who, c.addr);
	for (int grouped = 0; grouped < 2; grouped++) {
		if (grouped)
			run_loader(&r, "--core", c.core, "--group", NULL);
		else
			run_loader(&r, "--core", c.core, NULL);
		expect_exit(&r, 0, NULL);
		const char *sec = first_section(r.out);
		if (strncmp(sec, head, strlen(head)) != 0)
			fail_msg("%s text: the first section is not the thread's:\n%s",
				 grouped ? "grouped" : "plain", r.out);
		assert_non_null(strstr(sec, "ct_thread_main"));
		assert_true(strstr(sec, "ct_fault_leaf") < strstr(sec, "ct_sleep_leaf"));
		run_free(&r);
	}
	/* Filters that leave running tasks out leave the thread out. */
	run_loader(&r, "--core", c.core, "--state", "suspended", "-f", "json", NULL);
	expect_exit(&r, 0, NULL);
	doc = parse_json(r.out);
	assert_null(ts_json_get(doc, "threads"));
	ts_json_free(doc);
	run_free(&r);
	run_loader(&r, "--core", c.core, "-f", "folded", NULL);
	expect_exit(&r, 0, NULL);
	if (!strstr(r.out, "ct_fault_leaf;[killed by signal 11 (SIGSEGV"))
		fail_msg("folded: no leaf naming the signal:\n%s", r.out);
	run_free(&r);
	unlink(c.core);
}

int main(void)
{
	const char *req = getenv("STB_REQUIRE_BPF");
	bool require = req && strcmp(req, "1") == 0;
	char why[512];
	if (geteuid() != 0 || setup_cores(why, sizeof(why)) != 0) {
		fprintf(stderr, "test_loader_corefile: cannot direct core dumps (%s)%s\n",
			geteuid() != 0 ? "needs root to set kernel.core_pattern" : why,
			require ? "; STB_REQUIRE_BPF=1: failing" : ": skipped");
		return require ? 1 : 77;
	}
	ts_path(crash_path, sizeof(crash_path), "STB_CRASH_TARGET", "crash_target");
#if defined(__SANITIZE_ADDRESS__)
	/* A sanitized target dumps no core unless told to (its shadow is
	 * terabytes): allow it, without the shadow. Inherited by the targets. */
	ts_sanitizer_opt("ASAN_OPTIONS", "disable_coredump=0:use_madv_dontdump=1");
#endif
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_core_abort, teardown),
	    cmocka_unit_test_teardown(test_core_abort_nofp, teardown),
	    cmocka_unit_test_teardown(test_core_starting, teardown),
	    cmocka_unit_test_teardown(test_core_gcore, teardown),
	    cmocka_unit_test_teardown(test_core_gcore_default, teardown),
	    cmocka_unit_test_teardown(test_core_filter, teardown),
	    cmocka_unit_test_teardown(test_core_save, teardown),
	    cmocka_unit_test_teardown(test_core_save_deep, teardown),
	    cmocka_unit_test_teardown(test_core_midswitch, teardown),
	    cmocka_unit_test_teardown(test_core_sysroot, teardown),
	    cmocka_unit_test_teardown(test_core_why_mutex, why_teardown),
	    cmocka_unit_test_teardown(test_core_why_join, why_teardown),
	    cmocka_unit_test_teardown(test_core_bad, teardown),
	    cmocka_unit_test_teardown(test_core_crash_bthread, teardown),
	    cmocka_unit_test_teardown(test_core_crash_pthread, teardown),
	};
	int rc = loader_checks_main(tests, sizeof(tests) / sizeof(tests[0]), "test_loader_corefile");
	restore_pattern();
	rmdir(core_dir);
	return rc;
}
