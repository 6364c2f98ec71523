/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader when things go wrong around it: a loader SIGKILLed while it
 * holds a task (the lease expires, the task goes on), a target that dies
 * mid-trace (partial output, exit 1), the fault injection that exists only in
 * the test build. Exits 77 unprivileged.
 */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "loader_checks.h"

/* ---- a SIGKILLed loader, a target that exits mid-trace ---- */

/* Waits until the task's lease word is set; returns it. */
static uint64_t wait_lease(struct ts_ltarget *tg, uint64_t id, struct ts_proc *loader)
{
	char cmd[64], reply[128];
	snprintf(cmd, sizeof(cmd), "lease %" PRIu64, id);
	uint64_t deadline = ts_now_ns() + 20000000000ull;
	for (;;) {
		assert_int_equal(ts_ltarget_cmd(tg, cmd, reply, sizeof(reply)), 0);
		uint64_t lease = strtoull(reply + 6, NULL, 16);
		if (lease)
			return lease;
		if (ts_now_ns() > deadline)
			fail_msg("the loader never took the lease of %" PRIu64, id);
		if (waitpid(loader->pid, NULL, WNOHANG) == loader->pid)
			fail_msg("the loader ended before taking the lease");
		ts_sleep_ms(2);
	}
}

static uint64_t lease_deadline_ns(uint64_t lease)
{
	return STB_ABI_LEASE_DEADLINE(lease);
}

/*
 * A loader holds the blocker and is SIGKILLed while it holds the lease
 * (STB_LOADER_FAULT_HOLD_MS keeps it there, as a stuck loader would). The
 * task is then stuck at the gate only until the lease deadline: the runtime
 * breaks the lease (gate_giveups), the task goes on, and the target stays
 * fully working.
 */
static void test_loader_killed(void **state)
{
	(void)state;
	struct ts_ltarget tg;
	target_start(&tg, target_path, blocker_args, NULL);
	uint64_t blocker = chain_id(&tg, "blocker", 0);
	uint64_t giveups0 = stat_of(&tg, "gate_giveups");
	char id[32];
	snprintf(id, sizeof(id), "%" PRIu64, blocker);
	/* The fault injection exists only in the test build of the loader. */
	char *argv[] = {loader_test_path, "--pid", (char *)pid_arg(&tg), "--bthread", id,
			"--timeout", "3000", NULL};
	char *env[] = {"STB_LOADER_FAULT_HOLD_MS=20000", NULL};
	struct ts_proc lp;
	uint64_t started = ts_now_ns();
	assert_int_equal(ts_proc_start(&lp, argv, env, NULL, NULL), 0);
	uint64_t lease = wait_lease(&tg, blocker, &lp);
	/* The lease ends within the trace's --timeout (the loader may take
	 * shorter ones and renew them). */
	uint64_t deadline = lease_deadline_ns(lease);
	assert_true(deadline > started && deadline < ts_now_ns() + 3100000000ull);

	assert_int_equal(kill(lp.pid, SIGKILL), 0);
	ts_proc_wait(&lp, 10000);
	assert_true(WIFSIGNALED(lp.status) && WTERMSIG(lp.status) == SIGKILL);
	ts_proc_free(&lp);
	char reply[128];
	snprintf(reply, sizeof(reply), "lease %" PRIu64, blocker);
	assert_int_equal(ts_ltarget_cmd(&tg, reply, reply, sizeof(reply)), 0);
	assert_true(strtoull(reply + 6, NULL, 16) == lease); /* nobody released it */

	/* While the blocker is held, the other bthreads run on. */
	uint64_t hb = stat_of(&tg, "heartbeat"), limit = ts_now_ns() + 5000000000ull;
	while (stat_of(&tg, "heartbeat") == hb && ts_now_ns() < limit)
		ts_sleep_ms(2);
	assert_true(stat_of(&tg, "heartbeat") > hb);

	/* The blocker's read returns; it leaves RUNNING through the gate. */
	assert_int_equal(ts_ltarget_cmd(&tg, "release", reply, sizeof(reply)), 0);
	assert_string_equal(reply, "ok");
	limit = (deadline > ts_now_ns() ? deadline : ts_now_ns()) + 5000000000ull;
	while (stat_of(&tg, "blocker_done") == 0 && ts_now_ns() < limit)
		ts_sleep_ms(5);
	assert_int_equal(stat_of(&tg, "blocker_done"), 1);
	uint64_t done_at = stat_of(&tg, "blocker_done_at_ns");
	print_message("  blocker held %.1f ms past the release, resumed %.2f ms after the lease "
		      "deadline\n", (double)stat_of(&tg, "blocker_wait_ns") / 1e6,
		      ((double)done_at - (double)deadline) / 1e6);
	/* Held until the lease ran out (the dead loader never released it), and
	 * not much longer (slack for a loaded machine). */
	assert_true(done_at >= deadline);
	assert_true(done_at < deadline + 2500000000ull);
	assert_int_equal(stat_of(&tg, "gate_giveups"), giveups0 + 1);
	snprintf(reply, sizeof(reply), "lease %" PRIu64, blocker);
	assert_int_equal(ts_ltarget_cmd(&tg, reply, reply, sizeof(reply)), 0);
	assert_string_equal(reply, "lease 0x0");

	/* Fully working: a new loader traces everything. */
	struct run r;
	run_loader(&r, "--pid", pid_arg(&tg), "--format", "json", "--timeout", CAPTURE_TIMEOUT,
		   NULL);
	expect_exit(&r, 0, NULL);
	struct ts_json *doc = parse_json(r.out);
	for (unsigned k = 0; k < 4; k++)
		for (unsigned i = 0; i < ts_ltarget_chain(&tg, expects[k].chain)->n; i++)
			check_json_task(doc, &tg, &expects[k], i, false);
	assert_int_equal(ts_json_get(doc, "tasks")->n, BLOCKER_TASKS - 1); /* blocker ended */
	ts_json_free(doc);
	run_free(&r);
	target_finish(&tg, BLOCKER_TASKS);
}

/*
 * The target dies while the loader waits at a task's gate: the task is held
 * by another tracer (the target takes its lease itself, "hold"), the loader
 * spins for it, the target is SIGKILLed. The stack read before is printed,
 * the rest fail, the output says it is partial; exit 1.
 */
static void run_target_exits(bool json)
{
	struct ts_ltarget tg;
	target_start(&tg, target_path, NULL, NULL);
	uint64_t first = chain_id(&tg, "butex", 0), held = chain_id(&tg, "butex", 1);
	uint64_t third = chain_id(&tg, "sleep", 0);
	char a[32], b[32], c[32], cmd[64], reply[128];
	snprintf(a, sizeof(a), "%" PRIu64, first);
	snprintf(b, sizeof(b), "%" PRIu64, held);
	snprintf(c, sizeof(c), "%" PRIu64, third);
	snprintf(cmd, sizeof(cmd), "hold %" PRIu64 " 60000", held);
	assert_int_equal(ts_ltarget_cmd(&tg, cmd, reply, sizeof(reply)), 0);
	assert_true(strncmp(reply, "hold 0x", 7) == 0);
	char *argv[] = {loader_path, "--pid", (char *)pid_arg(&tg), "--bthread", a, "--bthread", b,
			"--bthread", c, "--timeout", "1500", "-vv", "--runtime-frames", "--format",
			json ? "json" : "text", NULL};
	struct ts_proc lp;
	assert_int_equal(ts_proc_start(&lp, argv, NULL, NULL, NULL), 0);
	char first_done[96];
	snprintf(first_done, sizeof(first_done), "task %" PRIu64 " suspended: held", first);
	if (!ts_proc_wait_for(&lp, first_done, 30000))
		fail_msg("the loader did not trace the first task: %s", lp.err.p ? lp.err.p : "");
	ts_sleep_ms(50); /* it is spinning on the held lease now */
	ts_ltarget_kill(&tg);
	target_forget(&tg);
	assert_true(WIFSIGNALED(tg.status));
	assert_int_equal(ts_proc_wait(&lp, LOADER_TIMEOUT_MS), 0);
	int code = ts_proc_exit_code(&lp);
	if (code != 1 || !strstr(lp.err.p, "exited during the trace") || sanitizer_report(lp.err.p))
		fail_msg("loader exit %d, stderr:\n%s", code, lp.err.p);
	if (json) {
		struct ts_json *doc = parse_json(lp.out.p);
		assert_int_equal(ts_json_bool(doc, "complete"), 0);
		const struct ts_json *t = json_task(doc, first);
		assert_non_null(t);
		assert_null(ts_json_str(t, "error"));
		char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
		unsigned n = json_frames(t, frames, sources);
		assert_true(frames_have(frames, n, chain_butex));
		t = json_task(doc, held);
		assert_non_null(t);
		assert_non_null(ts_json_str(t, "error"));
		assert_int_equal(ts_json_get(t, "frames")->n, 0);
		t = json_task(doc, third);
		assert_true(!t || ts_json_str(t, "error"));
		ts_json_free(doc);
	} else {
		struct tout *o = malloc(sizeof(*o));
		assert_non_null(o);
		parse_text(lp.out.p, o);
		assert_true(o->partial);
		const struct ttask *t = text_task(o, first);
		assert_non_null(t);
		assert_false(t->failed);
		assert_true(frames_have((char (*)[96])t->frames, t->nframes, chain_butex));
		t = text_task(o, held);
		assert_non_null(t);
		assert_true(t->failed);
		assert_non_null(strstr(t->error, "another tracer"));
		t = text_task(o, third);
		assert_true(!t || t->failed);
		free(o);
	}
	ts_proc_free(&lp);
}

static void test_target_exits_text(void **state)
{
	(void)state;
	run_target_exits(false);
}

static void test_target_exits_json(void **state)
{
	(void)state;
	run_target_exits(true);
}

/* Does file path contain the bytes of s? */
static bool file_contains(const char *path, const char *s)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	size_t n = strlen(s), len = 0, cap = 0;
	char *buf = NULL;
	for (;;) {
		if (len + 65536 > cap) {
			cap = cap ? cap * 2 : 1 << 20;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		size_t k = fread(buf + len, 1, 65536, f);
		if (k == 0)
			break;
		len += k;
	}
	fclose(f);
	bool found = false;
	for (size_t i = 0; i + n <= len && !found; i++)
		found = memcmp(buf + i, s, n) == 0;
	free(buf);
	return found;
}

/* The fault injection of the tests is compiled into the test build only: the
 * installed root tool does not even know its name. */
static void test_fault_knob_test_only(void **state)
{
	(void)state;
	assert_true(file_contains(loader_test_path, "STB_LOADER_FAULT_HOLD_MS"));
	assert_false(file_contains(loader_path, "STB_LOADER_FAULT_HOLD_MS"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_fault_knob_test_only, teardown),
		cmocka_unit_test_teardown(test_loader_killed, teardown),
		cmocka_unit_test_teardown(test_target_exits_text, teardown),
		cmocka_unit_test_teardown(test_target_exits_json, teardown),
	};
	return loader_checks_main(tests, sizeof(tests) / sizeof(tests[0]), "test_loader_faults");
}
