/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader against live loader_target processes: the stacks of every
 * kind of task (text, JSON, BPF captures, with and without frame pointers),
 * grouping, filters, missing ids, running tasks blocked in a system call.
 * Exits 77 unprivileged.
 */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "loader_checks.h"

/* ---- stacks ---- */

/* For both table backings: the default memfd and the BPF map. */
static void test_stacks_text(void **state)
{
	(void)state;
	static char map_env[] = "STB_TABLE=bpf";
	char *const envs[2][2] = {{NULL, NULL}, {map_env, NULL}};
	for (int b = 0; b < 2; b++) {
		struct ts_ltarget tg;
		target_start(&tg, target_path, NULL, envs[b]);
		uint64_t hb0 = stat_of(&tg, "heartbeat");
		struct run r;
		run_loader(&r, "--pid", pid_arg(&tg), "--timeout", CAPTURE_TIMEOUT, NULL);
		expect_exit(&r, 0, NULL);
		struct tout *o = malloc(sizeof(*o));
		assert_non_null(o);
		parse_text(r.out, o);
		assert_false(o->note);
		assert_false(o->partial);
		check_text_all(o, &tg);
		assert_true(stat_of(&tg, "heartbeat") > hb0);
		free(o);
		run_free(&r);
		target_finish(&tg, DEFAULT_TASKS);
	}
}

static void run_json_stacks(const char *path, bool nofp, int rounds)
{
	struct ts_ltarget tg;
	target_start(&tg, path, NULL, NULL);
	for (int i = 0; i < rounds; i++) {
		struct run r;
		run_loader(&r, "--pid", pid_arg(&tg), "--format", "json", "--timeout",
			   CAPTURE_TIMEOUT, NULL);
		expect_exit(&r, 0, NULL);
		struct ts_json *doc = parse_json(r.out);
		check_json_all(doc, &tg, nofp);
		ts_json_free(doc);
		run_free(&r);
		assert_int_equal(stat_of(&tg, "signals"), 0);
	}
	target_finish(&tg, DEFAULT_TASKS);
}

static void test_stacks_json(void **state)
{
	(void)state;
	run_json_stacks(target_path, false, 2);
}

/* Without frame pointers in the target: complete stacks of running tasks
 * only come from DWARF unwinding of the captured stack bytes. */
static void test_stacks_json_nofp(void **state)
{
	(void)state;
	run_json_stacks(target_nofp_path, true, 3);
}

/* --state running several times: every capture of a running task is a BPF
 * one with the whole chain, in both builds. */
static void test_running_repeated(void **state)
{
	(void)state;
	const char *paths[] = {target_path, target_nofp_path};
	for (int b = 0; b < 2; b++) {
		struct ts_ltarget tg;
		target_start(&tg, paths[b], NULL, NULL);
		unsigned in_redzone = 0;
		for (int i = 0; i < 5; i++) {
			struct run r;
			run_loader(&r, "--pid", pid_arg(&tg), "--state", "running", "--format", "json",
				   "--timeout", CAPTURE_TIMEOUT, NULL);
			expect_exit(&r, 0, NULL);
			struct ts_json *doc = parse_json(r.out);
			check_json_task(doc, &tg, &expects[4], 0, b == 1); /* spin */
			check_json_task(doc, &tg, &expects[5], 0, b == 1); /* pthread */
			const struct ts_json *t = json_task(doc, chain_id(&tg, "spin", 0));
			const struct ts_json *f0 = ts_json_get(t, "frames")->child;
			const char *fn = f0 ? ts_json_str(f0, "function") : NULL;
			in_redzone += fn && strcmp(fn, "ltgt_spin_redzone") == 0;
			ts_json_free(doc);
			run_free(&r);
		}
		/* The spinner spends nearly all its time there: the whole chain
		 * above was unwound through a register saved in the red zone. */
		assert_true(in_redzone >= 1);
		target_finish(&tg, DEFAULT_TASKS);
	}
}

/* ---- grouping and filters ---- */

/* The frames of a JSON task that are not inlined calls. */
static unsigned physical_frames(const struct ts_json *t)
{
	unsigned n = 0;
	for (const struct ts_json *f = ts_json_get(t, "frames")->child; f; f = f->next)
		n += ts_json_bool(f, "inlined") == 0;
	return n;
}

static const struct ttask *text_group_with(const struct tout *o, uint64_t id)
{
	for (unsigned i = 0; i < o->n; i++)
		for (unsigned k = 0; o->t[i].group && k < o->t[i].nids; k++)
			if (o->t[i].ids[k] == id)
				return &o->t[i];
	return NULL;
}

static bool ids_equal(const uint64_t *a, unsigned na, const uint64_t *b, unsigned nb)
{
	if (na != nb)
		return false;
	for (unsigned i = 0; i < na; i++) {
		bool found = false;
		for (unsigned k = 0; k < nb && !found; k++)
			found = a[i] == b[k];
		if (!found)
			return false;
	}
	return true;
}

static void test_group(void **state)
{
	(void)state;
	struct ts_ltarget tg;
	target_start(&tg, target_path, NULL, NULL);
	const struct ts_chain *butex = ts_ltarget_chain(&tg, "butex");
	const struct ts_chain *sleep = ts_ltarget_chain(&tg, "sleep");
	assert_non_null(butex);
	assert_non_null(sleep);

	struct run r;
	/* -v: the butex chain's three stacks were walked once (walkmemo.h). */
	run_loader(&r, "--pid", pid_arg(&tg), "--group", "-v", "--timeout", CAPTURE_TIMEOUT, NULL);
	expect_exit(&r, 0, NULL);
	unsigned long hits = 0, lookups = 0;
	const char *memo = strstr(r.err, "stb-bpf-loader: ");
	while (memo && sscanf(memo, "stb-bpf-loader: %lu of %lu stacks walked once", &hits,
			      &lookups) != 2)
		memo = strstr(memo + 1, "stb-bpf-loader: ");
	assert_non_null(memo);
	assert_true(hits >= 2 && hits < lookups);
	struct tout *o = malloc(sizeof(*o));
	assert_non_null(o);
	parse_text(r.out, o);
	unsigned total = 0;
	for (unsigned i = 0; i < o->n; i++) {
		assert_true(o->t[i].group);
		assert_int_equal(o->t[i].count, o->t[i].nids);
		total += o->t[i].count;
	}
	assert_int_equal(total, DEFAULT_TASKS);
	const struct ttask *g = text_group_with(o, butex->ids[0]);
	assert_non_null(g);
	assert_int_equal(g->count, 3);
	assert_true(ids_equal(g->ids, g->nids, butex->ids, butex->n));
	assert_string_equal(g->state, "suspended");
	assert_true(frames_have((char (*)[96])g->frames, g->nframes, chain_butex));
	g = text_group_with(o, sleep->ids[0]);
	assert_non_null(g);
	assert_int_equal(g->count, 2);
	assert_true(ids_equal(g->ids, g->nids, sleep->ids, sleep->n));
	assert_true(frames_have((char (*)[96])g->frames, g->nframes, chain_sleep));
	/* Most populous group first. */
	assert_int_equal(o->t[0].count, 3);
	run_free(&r);

	run_loader(&r, "--pid", pid_arg(&tg), "--group", "--format", "json", "--timeout",
		   CAPTURE_TIMEOUT, NULL);
	expect_exit(&r, 0, NULL);
	struct ts_json *doc = parse_json(r.out);
	const struct ts_json *groups = ts_json_get(doc, "groups");
	assert_non_null(groups);
	bool found = false;
	unsigned gtotal = 0;
	for (const struct ts_json *gr = groups->child; gr; gr = gr->next) {
		const struct ts_json *ids = ts_json_get(gr, "ids");
		assert_non_null(ids);
		assert_int_equal(ts_json_u64(gr, "count", 0), ids->n);
		gtotal += ids->n;
		uint64_t v[MAX_TASKS];
		unsigned n = 0;
		for (const struct ts_json *x = ids->child; x && n < MAX_TASKS; x = x->next)
			v[n++] = strtoull(x->str, NULL, 10);
		if (ids_equal(v, n, butex->ids, butex->n)) {
			found = true;
			assert_string_equal(ts_json_str(gr, "state"), "suspended");
			char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
			unsigned nf = json_frames(gr, frames, sources);
			assert_true(frames_have(frames, nf, chain_butex));
		}
	}
	assert_true(found);
	assert_int_equal(gtotal, DEFAULT_TASKS);
	ts_json_free(doc);
	run_free(&r);
	free(o);
	target_finish(&tg, DEFAULT_TASKS);
}

static void test_filters(void **state)
{
	(void)state;
	struct ts_ltarget tg;
	target_start(&tg, target_path, NULL, NULL);
	struct run r;

	/* --state running: only running tasks, spin and pthread among them. */
	run_loader(&r, "--pid", pid_arg(&tg), "--state", "running", "--format", "json",
		   "--timeout", CAPTURE_TIMEOUT, NULL);
	expect_exit(&r, 0, NULL);
	struct ts_json *doc = parse_json(r.out);
	for (const struct ts_json *t = ts_json_get(doc, "tasks")->child; t; t = t->next)
		assert_string_equal(ts_json_str(t, "state"), "running");
	assert_non_null(json_task(doc, chain_id(&tg, "spin", 0)));
	assert_non_null(json_task(doc, chain_id(&tg, "pthread", 0)));
	assert_null(json_task(doc, chain_id(&tg, "butex", 0)));
	ts_json_free(doc);
	run_free(&r);

	/* --state suspended: the blocked chains, not the spinners. */
	run_loader(&r, "--pid", pid_arg(&tg), "--state", "suspended", "--format", "json", NULL);
	expect_exit(&r, 0, NULL);
	doc = parse_json(r.out);
	for (const struct ts_json *t = ts_json_get(doc, "tasks")->child; t; t = t->next)
		assert_string_equal(ts_json_str(t, "state"), "suspended");
	for (unsigned k = 0; k < 4; k++) /* butex, sleep, mutex, fd */
		for (unsigned i = 0; i < ts_ltarget_chain(&tg, expects[k].chain)->n; i++)
			check_json_task(doc, &tg, &expects[k], i, false);
	assert_null(json_task(doc, chain_id(&tg, "spin", 0)));
	assert_null(json_task(doc, chain_id(&tg, "pthread", 0)));
	ts_json_free(doc);
	run_free(&r);

	/* --max-depth 3: at most 3 frames (the calls inlined into one come with
	 * it), the rest reported as cut. */
	run_loader(&r, "--pid", pid_arg(&tg), "--max-depth", "3", "--format", "json", "--timeout",
		   CAPTURE_TIMEOUT, NULL);
	expect_exit(&r, 0, NULL);
	doc = parse_json(r.out);
	assert_int_equal(ts_json_get(doc, "tasks")->n, DEFAULT_TASKS);
	for (const struct ts_json *t = ts_json_get(doc, "tasks")->child; t; t = t->next) {
		assert_non_null(ts_json_get(t, "frames"));
		assert_true(physical_frames(t) <= 3);
	}
	/* Every chain is deeper than 3 frames. */
	const struct ts_json *bt = json_task(doc, chain_id(&tg, "butex", 0));
	assert_int_equal(physical_frames(bt), 3);
	assert_int_equal(ts_json_bool(bt, "truncated"), 1);
	const struct ts_json *sp = json_task(doc, chain_id(&tg, "spin", 0));
	assert_int_equal(physical_frames(sp), 3);
	assert_int_equal(ts_json_bool(sp, "truncated"), 1);
	ts_json_free(doc);
	run_free(&r);
	run_loader(&r, "--pid", pid_arg(&tg), "--max-depth", "3", "--state", "suspended", NULL);
	expect_exit(&r, 0, NULL);
	struct tout *o = malloc(sizeof(*o));
	assert_non_null(o);
	parse_text(r.out, o);
	for (unsigned i = 0; i < o->n; i++) {
		assert_true(o->t[i].nframes <= 3);
		assert_true(o->t[i].truncated);
	}
	run_free(&r);

	/* --bthread (repeatable): exactly those, in that order. */
	char a[32], b[32], c[32];
	snprintf(a, sizeof(a), "%" PRIu64, chain_id(&tg, "sleep", 1));
	snprintf(b, sizeof(b), "%" PRIu64, chain_id(&tg, "spin", 0));
	snprintf(c, sizeof(c), "%" PRIu64, chain_id(&tg, "pthread", 0));
	run_loader(&r, "--pid", pid_arg(&tg), "--bthread", a, "--bthread", b, "--bthread", c,
		   "--timeout", CAPTURE_TIMEOUT, NULL);
	expect_exit(&r, 0, NULL);
	parse_text(r.out, o);
	assert_int_equal(o->n, 3);
	assert_true(o->t[0].id == chain_id(&tg, "sleep", 1));
	assert_true(o->t[1].id == chain_id(&tg, "spin", 0));
	assert_true(o->t[2].id == chain_id(&tg, "pthread", 0));
	check_text_task(o, &tg, &expects[1], 1);
	check_text_task(o, &tg, &expects[4], 0);
	check_text_task(o, &tg, &expects[5], 0);
	run_free(&r);
	free(o);
	target_finish(&tg, DEFAULT_TASKS);
}

/*
 * A running bthread blocked in read(2) on its worker is never on a CPU, so
 * the BPF program cannot see it: its stack comes from the sp/pc that
 * /proc/PID/task/TID/syscall shows and the frame chain found on its stack.
 */
static void test_running_in_syscall(void **state)
{
	(void)state;
	struct ts_ltarget tg;
	target_start(&tg, target_path, blocker_args, NULL);
	uint64_t blocker = chain_id(&tg, "blocker", 0);
	char id[32];
	snprintf(id, sizeof(id), "%" PRIu64, blocker);
	struct run r;
	run_loader(&r, "--pid", pid_arg(&tg), "--bthread", id, "--format", "json", NULL);
	expect_exit(&r, 0, NULL);
	struct ts_json *doc = parse_json(r.out);
	const struct ts_json *t = json_task(doc, blocker);
	assert_non_null(t);
	assert_string_equal(ts_json_str(t, "state"), "running");
	assert_string_equal(ts_json_str(t, "capture"), "syscall");
	assert_null(ts_json_str(t, "error"));
	/* A state of its own: the call, and the worker it blocks. */
	const struct ts_json *sc = ts_json_get(t, "syscall");
	assert_non_null(sc);
	assert_string_equal(ts_json_str(sc, "name"), "read");
	assert_int_equal(ts_json_u64(sc, "nr", UINT64_MAX), 0);
	uint64_t fd = ts_json_u64(sc, "fd", UINT64_MAX);
	assert_true(fd > 2 && fd < 1024);
	uint64_t worker = ts_json_u64(t, "worker", UINT64_MAX);
	assert_true(worker < 4);
	char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
	unsigned n = json_frames(t, frames, sources);
	static const char *const want[] = {"ltgt_block_leaf", "ltgt_block_mid", "ltgt_block_main",
					   "stb_task_entry", NULL};
	if (!frames_have(frames, n, want)) {
		dump_frames("blocker", blocker, frames, n);
		fail_msg("blocker: expected frames missing");
	}
	assert_string_equal(frames[n - 1], "stb_ctx_trampoline");
	/* The stale record that ltgt_block_decoy left in the leaf's locals. */
	for (unsigned k = 0; k < n; k++)
		if (strcmp(frames[k], "ltgt_block_decoy") == 0)
			fail_msg("blocker: frame %u comes from a stale frame record", k);
	ts_json_free(doc);
	run_free(&r);
	/* Text, grouped, --stuck, folded: "[in system call read(FD), T] --
	 * blocks worker W (tid N)". */
	char bracket[64], pins[64];
	snprintf(bracket, sizeof(bracket), "[in system call read(%" PRIu64 "), ", fd);
	snprintf(pins, sizeof(pins), "] \xe2\x80\x94 blocks worker %" PRIu64 " (tid ", worker);
	const char *const modes[][4] = {{"--bthread", id, NULL}, {"--group", NULL},
					{"--stuck", "50ms", "--group", NULL}};
	for (unsigned m = 0; m < 3; m++) {
		run_loader(&r, "--pid", pid_arg(&tg), modes[m][0], modes[m][1], modes[m][2], NULL);
		expect_exit(&r, 0, NULL);
		const char *line = strstr(r.out, bracket);
		const char *eol = line ? strchr(line, '\n') : NULL;
		const char *p = line ? strstr(line, pins) : NULL;
		if (!line || !p || (eol && p > eol))
			fail_msg("%s: no \"%s ... %s\" line:\n%s", modes[m][0], bracket, pins, r.out);
		run_free(&r);
	}
	run_loader(&r, "--pid", pid_arg(&tg), "--bthread", id, "--format", "folded", NULL);
	expect_exit(&r, 0, NULL);
	if (strncmp(r.out, "syscall;", 8) != 0 || !strstr(r.out, "ltgt_block_leaf"))
		fail_msg("folded: %s", r.out);
	run_free(&r);
	char reply[64];
	assert_int_equal(ts_ltarget_cmd(&tg, "release", reply, sizeof(reply)), 0);
	target_finish(&tg, BLOCKER_TASKS);
}

/*
 * A running thread that keeps calling sched_yield() beside a hog on its CPU
 * spends most of its time runnable inside that call, off the CPU: the BPF
 * sample lands in the kernel, takes the user registers saved at the system
 * call, and the whole chain is still unwound from there (never reported as
 * blocked in a syscall: /proc shows only sleeping threads' calls).
 */
static void test_running_in_sched_yield(void **state)
{
	(void)state;
	static const char *const args[] = {"--pthread", "2", "--yield", "0", "--spin", "0", NULL};
	struct ts_ltarget tg;
	target_start(&tg, target_path, args, NULL);
	char id[32];
	uint64_t pth = chain_id(&tg, "pthread", 0);
	snprintf(id, sizeof(id), "%" PRIu64, pth);
	for (int round = 0; round < 5; round++) {
		struct run r;
		run_loader(&r, "--pid", pid_arg(&tg), "--bthread", id, "--format", "json",
			   "--timeout", CAPTURE_TIMEOUT, NULL);
		expect_exit(&r, 0, NULL);
		struct ts_json *doc = parse_json(r.out);
		const struct ts_json *t = json_task(doc, pth);
		assert_non_null(t);
		assert_null(ts_json_str(t, "error"));
		assert_string_equal(ts_json_str(t, "state"), "running");
		assert_string_equal(ts_json_str(t, "capture"), "bpf");
		char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
		unsigned n = json_frames(t, frames, sources);
		if (!frames_have(frames, n, chain_pthread)) {
			dump_frames("pthread", pth, frames, n);
			fail_msg("pthread in sched_yield: expected frames missing");
		}
		ts_json_free(doc);
		run_free(&r);
	}
	target_finish(&tg, 9u); /* butex 3, sleep 2, mutex, fd, heartbeat, pthread */
}

/* A bthread id that never existed and one that has finished: exit 1; the
 * ids that exist are still printed. */
static void test_missing_bthread(void **state)
{
	(void)state;
	static const char *const args[] = {"--finished", "1", NULL};
	struct ts_ltarget tg;
	target_start(&tg, target_path, args, NULL);
	char never[32], done[32], ok[32];
	snprintf(never, sizeof(never), "%" PRIu64, (uint64_t)((1ull << 32) | 40000u));
	snprintf(done, sizeof(done), "%" PRIu64, chain_id(&tg, "finished", 0));
	snprintf(ok, sizeof(ok), "%" PRIu64, chain_id(&tg, "butex", 1));
	const char *cases[][2] = {{never, ok}, {done, ok}};
	for (int i = 0; i < 2; i++) {
		struct run r;
		run_loader(&r, "--pid", pid_arg(&tg), "--bthread", cases[i][0], "--bthread",
			   cases[i][1], NULL);
		char want[96];
		snprintf(want, sizeof(want), "no bthread %s in process %d", cases[i][0], (int)tg.pid);
		expect_exit(&r, 1, want);
		struct tout *o = malloc(sizeof(*o));
		assert_non_null(o);
		parse_text(r.out, o);
		assert_int_equal(o->n, 1);
		check_text_task(o, &tg, &expects[0], 1);
		free(o);
		run_free(&r);
	}
	target_finish(&tg, DEFAULT_TASKS);
}

/*
 * A running bthread 64 KiB deep, past the BPF program's 32 KiB copy, in both
 * builds: without frame pointers only DWARF over the whole stack finds the
 * outer frames (the rest is read after the capture and checked against it).
 * Every frame, down to stb_ctx_trampoline, and not truncated.
 */
static void test_deep_running(void **state)
{
	(void)state;
	static const char *const args[] = {"--deep", "1", "--spin", "0", "--yield", "0", NULL};
	const char *paths[] = {target_path, target_nofp_path};
	for (int b = 0; b < 2; b++) {
		struct ts_ltarget tg;
		target_start(&tg, paths[b], args, NULL);
		char id[32];
		snprintf(id, sizeof(id), "%" PRIu64, chain_id(&tg, "deep", 0));
		for (int round = 0; round < 3; round++) {
			struct run r;
			run_loader(&r, "--pid", pid_arg(&tg), "--bthread", id, "--format", "json",
				   "--max-depth", "200", "--timeout", CAPTURE_TIMEOUT, NULL);
			expect_exit(&r, 0, NULL);
			struct ts_json *doc = parse_json(r.out);
			const struct ts_json *t = json_task(doc, chain_id(&tg, "deep", 0));
			assert_non_null(t);
			assert_string_equal(ts_json_str(t, "capture"), "bpf");
			char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
			unsigned n = json_frames(t, frames, sources);
			unsigned levels = 0;
			for (unsigned k = 0; k < n; k++)
				levels += fn_match(frames[k], "ltgt_deep_rec");
			if (levels != 65 || !n || strcmp(frames[n - 1], "stb_ctx_trampoline") != 0 ||
			    ts_json_bool(t, "truncated") != 0) {
				dump_frames("deep", chain_id(&tg, "deep", 0), frames, n);
				fail_msg("%s build: %u of 65 levels, truncated %s", b ? "nofp" : "fp",
					 levels, ts_json_str(t, "truncated_why") ?: "(no why)");
			}
			ts_json_free(doc);
			run_free(&r);
		}
		target_finish(&tg, 10u); /* butex 3, sleep 2, mutex, fd, heartbeat, pthread, deep */
	}
}

/* The thread of tid in the "threads" array of doc, or NULL. */
static const struct ts_json *json_thread(const struct ts_json *doc, uint64_t tid)
{
	const struct ts_json *a = ts_json_get(doc, "threads");
	for (const struct ts_json *t = a ? a->child : NULL; t; t = t->next)
		if (ts_json_u64(t, "tid", 0) == tid)
			return t;
	return NULL;
}

/*
 * Every thread of the process, after the tasks: the main thread blocked in
 * read(0) with its frames down to main, the workers (each naming the
 * bthread it runs), the runtime's threads, a registered pthread naming its
 * task, a plain pthread spinning (captured by BPF on its tid) and one
 * asleep (from /proc) with their chains; in text, grouped and JSON
 * (checked against the schema); --no-threads leaves them out.
 */
static void test_threads(void **state)
{
	(void)state;
	static const char *const args[] = {"--plain", "1", NULL};
	struct ts_ltarget tg;
	target_start(&tg, target_path, args, NULL);
	uint64_t spin = chain_id(&tg, "plain", 0), nap = chain_id(&tg, "plain", 1);
	struct run r;
	run_loader(&r, "--pid", pid_arg(&tg), "--format", "json", "--timeout", CAPTURE_TIMEOUT,
		   NULL);
	expect_exit(&r, 0, NULL);
	char path[] = "/tmp/stb-test-threads-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, r.out, strlen(r.out)), (ssize_t)strlen(r.out));
	close(fd);
	const char *py = getenv("STB_PYTHON3"), *checker = getenv("STB_JSON_CHECKER");
	if (!py || !*py || !checker || !*checker)
		fail_msg("STB_PYTHON3 and STB_JSON_CHECKER are needed (python3)");
	char cmd[PATH_MAX * 3];
	snprintf(cmd, sizeof(cmd), "%s %s %s --loader", py, checker, path);
	assert_int_equal(system(cmd), 0);
	unlink(path);
	struct ts_json *doc = parse_json(r.out);
	char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
	/* The main thread, in fgets on its stdin. */
	const struct ts_json *t = json_thread(doc, (uint64_t)tg.pid);
	assert_non_null(t);
	assert_string_equal(ts_json_str(ts_json_get(t, "syscall"), "name"), "read");
	unsigned n = json_frames(t, frames, sources);
	static const char *const main_chain[] = {"main", NULL};
	if (!frames_have(frames, n, main_chain)) {
		dump_frames("main thread", (uint64_t)tg.pid, frames, n);
		fail_msg("main thread: no main frame");
	}
	/* The plain pthreads. */
	t = json_thread(doc, spin);
	assert_non_null(t);
	assert_string_equal(ts_json_str(t, "name"), "ltgt-plain-spin");
	assert_string_equal(ts_json_str(t, "capture"), "bpf");
	n = json_frames(t, frames, sources);
	static const char *const spin_chain[] = {"ltgt_plain_spin_leaf", "ltgt_plain_spin_main",
						 NULL};
	if (!frames_have(frames, n, spin_chain)) {
		dump_frames("plain spin", spin, frames, n);
		fail_msg("spinning plain pthread: its chain is missing");
	}
	t = json_thread(doc, nap);
	assert_non_null(t);
	assert_string_equal(ts_json_str(t, "capture"), "syscall");
	assert_non_null(strstr(ts_json_str(ts_json_get(t, "syscall"), "name"), "nanosleep"));
	n = json_frames(t, frames, sources);
	static const char *const nap_chain[] = {"ltgt_plain_sleep_leaf", "ltgt_plain_sleep_main",
						NULL};
	if (!frames_have(frames, n, nap_chain)) {
		dump_frames("plain nap", nap, frames, n);
		fail_msg("sleeping plain pthread: its chain is missing");
	}
	/* Workers name what they run; the registered pthread its task. */
	unsigned workers = 0, running = 0;
	const struct ts_json *a = ts_json_get(doc, "threads");
	for (t = a->child; t; t = t->next) {
		const char *name = ts_json_str(t, "name");
		if (name && strncmp(name, "bthread_w", 9) == 0) {
			assert_true(ts_json_u64(t, "worker", UINT64_MAX) < 4);
			workers++;
			running += ts_json_u64(t, "bthread", 0) == chain_id(&tg, "spin", 0);
		}
		if (ts_json_u64(t, "pthread", 0))
			assert_int_equal(ts_json_u64(t, "pthread", 0), chain_id(&tg, "pthread", 0));
	}
	if (workers != 4 || running != 1)
		fail_msg("%u of 4 workers in the threads, %u running the spinning bthread:\n%.6000s",
			 workers, running, r.out);
	ts_json_free(doc);
	run_free(&r);
	/* Text and grouped: a section of their own, after the tasks. */
	const char *const modes[][2] = {{"--timeout", CAPTURE_TIMEOUT}, {"--group", NULL}};
	for (unsigned m = 0; m < 2; m++) {
		run_loader(&r, "--pid", pid_arg(&tg), modes[m][0], modes[m][1], NULL);
		expect_exit(&r, 0, NULL);
		const char *sec = strstr(r.out, "threads of the process (--no-threads hides them):");
		if (!sec || !strstr(sec, "\"ltgt-plain-nap\"") || !strstr(sec, "ltgt_plain_sleep_leaf") ||
		    !strstr(sec, "\"bthread_w") || strstr(r.out, "bthread ") > sec)
			fail_msg("%s: no thread section after the tasks:\n%s", modes[m][0], r.out);
		run_free(&r);
	}
	run_loader(&r, "--pid", pid_arg(&tg), "--no-threads", NULL);
	expect_exit(&r, 0, NULL);
	assert_null(strstr(r.out, "of the process"));
	assert_null(strstr(r.out, "ltgt-plain"));
	run_free(&r);
	target_finish(&tg, DEFAULT_TASKS);
}

/* 100,000 parked bthreads with the default settings: every one of them is
 * in the table, and so in the loader's report (a table of 65,536 slots left
 * a third out). */
static void test_many_default_capacity(void **state)
{
	(void)state;
	static const char *const args[] = {"--many", "100000", NULL};
	struct ts_ltarget tg;
	target_start(&tg, target_path, args, NULL);
	struct run r;
	run_loader(&r, "--pid", pid_arg(&tg), "--group", "--state", "suspended", NULL);
	expect_exit(&r, 0, NULL);
	if (!strstr(r.out, "100000 bthreads [suspended") || strstr(r.out, "# note:"))
		fail_msg("grouped output of 100,000 parked bthreads:\n%.2000s", r.out);
	run_free(&r);
	run_loader(&r, "--pid", pid_arg(&tg), "--state", "suspended", "--format", "json", NULL);
	expect_exit(&r, 0, NULL);
	/* (100,000 tasks: too many for the tests' JSON parser) */
	const char *u = strstr(r.out, "\"untraceable\": ");
	if (!u || u[15] != '0' || (u[16] >= '0' && u[16] <= '9') ||
	    !strstr(r.out, "\"complete\": true"))
		fail_msg("JSON of 100,000 parked bthreads:\n%.2000s", r.out);
	run_free(&r);
	target_finish(&tg, DEFAULT_TASKS + 100000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_stacks_text, teardown),
		cmocka_unit_test_teardown(test_stacks_json, teardown),
		cmocka_unit_test_teardown(test_stacks_json_nofp, teardown),
		cmocka_unit_test_teardown(test_running_repeated, teardown),
		cmocka_unit_test_teardown(test_group, teardown),
		cmocka_unit_test_teardown(test_filters, teardown),
		cmocka_unit_test_teardown(test_missing_bthread, teardown),
		cmocka_unit_test_teardown(test_running_in_syscall, teardown),
		cmocka_unit_test_teardown(test_running_in_sched_yield, teardown),
		cmocka_unit_test_teardown(test_deep_running, teardown),
		cmocka_unit_test_teardown(test_threads, teardown),
		cmocka_unit_test_teardown(test_many_default_capacity, teardown),
	};
	return loader_checks_main(tests, sizeof(tests) / sizeof(tests[0]), "test_loader_stacks");
}
