/* SPDX-License-Identifier: Apache-2.0 */
/*
 * End-to-end tests of stb-bpf-loader against live loader_target processes:
 * stacks of every kind of task (text, JSON, BPF captures), grouping, filters,
 * no signal to the target, a SIGKILLed loader, a target dying mid-trace, every
 * error exit, the fallbacks without BPF/ptrace. Exits 77 unprivileged.
 */
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include <stb/abi.h>

#include "loader_util.h"

#define LOADER_TIMEOUT_MS 60000 /* a loader run that takes longer is a failure */
#define CAPTURE_TIMEOUT "5000"  /* --timeout for runs that capture running tasks */

static char loader_path[PATH_MAX];
static char loader_test_path[PATH_MAX]; /* the build with the test hooks */
static char target_path[PATH_MAX];
static char target_nofp_path[PATH_MAX];

/*
 * Targets started by the current test, killed by the teardown if it failed.
 * A failed check longjmps out of the test, so the test's own struct
 * lu_target is gone by then: keep what the teardown needs here.
 */
static struct {
	const struct lu_target *t;
	pid_t pid;
	int to_fd, from_fd;
} live[4];

static struct lu_target *target_start(struct lu_target *t, const char *path,
				      const char *const *args, char *const env[])
{
	int rc = lu_target_start(t, path, args, env);
	if (rc != 0)
		fail_msg("cannot start %s: %s", path, strerror(-rc));
	for (unsigned i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
		if (!live[i].t) {
			live[i].t = t;
			live[i].pid = t->pid;
			live[i].to_fd = t->to_fd;
			live[i].from_fd = t->from_fd;
			break;
		}
	}
	return t;
}

static void target_forget(struct lu_target *t)
{
	for (unsigned i = 0; i < sizeof(live) / sizeof(live[0]); i++)
		if (live[i].t == t)
			live[i].t = NULL;
}

static int teardown(void **state)
{
	(void)state;
	for (unsigned i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
		if (!live[i].t)
			continue;
		kill(live[i].pid, SIGKILL);
		while (waitpid(live[i].pid, NULL, 0) < 0 && errno == EINTR)
			;
		close(live[i].to_fd);
		close(live[i].from_fd);
		live[i].t = NULL;
	}
	return 0;
}

static uint64_t chain_id(const struct lu_target *t, const char *chain, unsigned i)
{
	const struct lu_chain *c = lu_target_chain(t, chain);
	if (!c || i >= c->n)
		fail_msg("target reported no %s bthread #%u", chain, i);
	return c->ids[i];
}

static uint64_t stat_of(struct lu_target *t, const char *key)
{
	uint64_t v = lu_target_stat(t, key);
	if (v == UINT64_MAX)
		fail_msg("target %d does not answer", (int)t->pid);
	return v;
}

/* The target received no signal, its heartbeat still advances, and it ends
 * cleanly with every bthread joined. */
static void target_finish(struct lu_target *t, unsigned expect_joined)
{
	assert_int_equal(stat_of(t, "signals"), 0);
	uint64_t hb = stat_of(t, "heartbeat");
	uint64_t deadline = lu_now_ns() + 5000000000ull;
	while (stat_of(t, "heartbeat") == hb && lu_now_ns() < deadline)
		lu_sleep_ms(5);
	assert_true(stat_of(t, "heartbeat") > hb);
	char bye[256];
	int code = lu_target_quit(t, bye, sizeof(bye));
	target_forget(t);
	if (code != 0 || strncmp(bye, "bye ", 4) != 0)
		fail_msg("target quit: exit %d, last line '%s'", code, bye);
	assert_int_equal(lu_field(bye, "signals"), 0);
	assert_int_equal(lu_field(bye, "joined"), expect_joined);
}

/* ---- running the loader ---- */

struct run {
	struct lu_proc p;
	int code;
	const char *out, *err;
};

/* Runs the loader with pre() in the child; args NULL-terminated. */
static void run_loader_v(struct run *r, lu_pre_exec_fn pre, void *pre_arg, va_list ap)
{
	char *argv[64];
	int n = 0;
	argv[n++] = loader_path;
	const char *a;
	while ((a = va_arg(ap, const char *)) != NULL && n < 63)
		argv[n++] = (char *)a;
	argv[n] = NULL;
	int rc = lu_proc_start(&r->p, argv, NULL, pre, pre_arg);
	if (rc != 0)
		fail_msg("cannot start %s: %s", loader_path, strerror(-rc));
	if (lu_proc_wait(&r->p, LOADER_TIMEOUT_MS) != 0)
		fail_msg("the loader ran longer than %d ms", LOADER_TIMEOUT_MS);
	r->code = lu_proc_exit_code(&r->p);
	r->out = r->p.out.p;
	r->err = r->p.err.p;
}

static void run_loader(struct run *r, ...)
{
	va_list ap;
	va_start(ap, r);
	run_loader_v(r, NULL, NULL, ap);
	va_end(ap);
}

static void run_loader_pre(struct run *r, lu_pre_exec_fn pre, void *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	run_loader_v(r, pre, arg, ap);
	va_end(ap);
}

static void run_free(struct run *r)
{
	lu_proc_free(&r->p);
}

/* Sanitizer reports in a loader built with them. */
static bool sanitizer_report(const char *err)
{
	return strstr(err, "Sanitizer") || strstr(err, "runtime error:");
}

static void expect_exit(const struct run *r, int code, const char *msg)
{
	if (r->code != code || (msg && !strstr(r->err, msg)) || sanitizer_report(r->err))
		fail_msg("loader exit %d (want %d), stderr:\n%s\n(want it to contain '%s')", r->code,
			 code, r->err, msg ? msg : "");
}

/* ---- the text output ---- */

#define MAX_TASKS 64
#define MAX_FRAMES 80

struct ttask {
	bool pthread, group;
	uint64_t id;
	uint64_t ids[MAX_TASKS]; /* group members */
	unsigned nids, count;
	char name[48], state[32];
	bool failed, no_stack, truncated;
	char error[512];
	unsigned nframes;
	char frames[MAX_FRAMES][96];
};

struct tout {
	bool note; /* a "# note:" line */
	bool partial;
	unsigned n;
	struct ttask t[MAX_TASKS];
};

/* Function name of a frame line "#k 0xADDR name+0xoff" ("??" if none). */
static void frame_fn(const char *line, char *fn, size_t len)
{
	const char *p = strchr(line, ' ');
	p = p ? strchr(p + 1, ' ') : NULL;
	snprintf(fn, len, "%s", p ? p + 1 : "??");
	char *plus = strrchr(fn, '+');
	if (plus && strncmp(plus, "+0x", 3) == 0)
		*plus = '\0';
	if (strncmp(fn, "??", 2) == 0)
		snprintf(fn, len, "??");
}

static void parse_text(const char *text, struct tout *o)
{
	memset(o, 0, sizeof(*o));
	struct ttask *cur = NULL;
	const char *s = text;
	while (*s) {
		const char *e = strchr(s, '\n');
		size_t len = e ? (size_t)(e - s) : strlen(s);
		char line[512];
		snprintf(line, sizeof(line), "%.*s", (int)(len < 511 ? len : 511), s);
		s += len + (e ? 1 : 0);
		if (line[0] == '\0') {
			cur = NULL;
			continue;
		}
		if (strncmp(line, "# note:", 7) == 0) {
			o->note = true;
			continue;
		}
		if (strncmp(line, "# the target exited", 19) == 0) {
			o->partial = true;
			continue;
		}
		if (!cur) {
			assert_true(o->n < MAX_TASKS);
			cur = &o->t[o->n++];
			memset(cur, 0, sizeof(*cur));
			unsigned count;
			char kind[16];
			if (sscanf(line, "%u %15s [%31[^]]]:", &count, kind, cur->state) == 3 &&
			    (strcmp(kind, "task") == 0 || strcmp(kind, "tasks") == 0)) {
				cur->group = true;
				cur->count = count;
				const char *ids = strchr(line, ':') + 1;
				char *end;
				for (;;) {
					uint64_t id = strtoull(ids, &end, 10);
					if (end == ids || cur->nids == MAX_TASKS)
						break;
					cur->ids[cur->nids++] = id;
					ids = end;
				}
			} else if (sscanf(line, "%15s %" SCNu64, kind, &cur->id) == 2 &&
				   (strcmp(kind, "bthread") == 0 || strcmp(kind, "pthread") == 0)) {
				cur->pthread = strcmp(kind, "pthread") == 0;
				const char *q = strchr(line, '"');
				if (q)
					sscanf(q + 1, "%47[^\"]", cur->name);
				const char *b = strrchr(line, '[');
				assert_non_null(b);
				sscanf(b + 1, "%31[^],]", cur->state);
			} else {
				fail_msg("unexpected line in the loader's output: '%s'", line);
			}
			continue;
		}
		if (line[0] == '#') {
			if (cur->nframes < MAX_FRAMES)
				frame_fn(line, cur->frames[cur->nframes++], sizeof(cur->frames[0]));
		} else if (strncmp(line, "(trace failed: ", 15) == 0) {
			cur->failed = true;
			snprintf(cur->error, sizeof(cur->error), "%s", line + 15);
		} else if (strncmp(line, "(no stack", 9) == 0) {
			cur->no_stack = true;
		} else if (strcmp(line, "(more frames not shown)") == 0) {
			cur->truncated = true;
		} else {
			fail_msg("unexpected line in a task section: '%s'", line);
		}
	}
}

static const struct ttask *text_task(const struct tout *o, uint64_t id)
{
	for (unsigned i = 0; i < o->n; i++)
		if (!o->t[i].group && o->t[i].id == id)
			return &o->t[i];
	return NULL;
}

/* Does name match pattern (alternatives separated by '|')? */
static bool fn_match(const char *name, const char *pattern)
{
	size_t n = strlen(name);
	for (const char *p = pattern; p;) {
		const char *bar = strchr(p, '|');
		size_t k = bar ? (size_t)(bar - p) : strlen(p);
		if (k == n && strncmp(p, name, n) == 0)
			return true;
		p = bar ? bar + 1 : NULL;
	}
	return false;
}

/* Do the frames hold want[0..] as a contiguous run, innermost first? */
static bool frames_have(char (*frames)[96], unsigned n, const char *const *want)
{
	unsigned k = 0;
	while (want[k])
		k++;
	for (unsigned i = 0; i + k <= n; i++) {
		unsigned j = 0;
		while (j < k && fn_match(frames[i + j], want[j]))
			j++;
		if (j == k)
			return true;
	}
	return false;
}

static void dump_frames(const char *what, uint64_t id, char (*frames)[96], unsigned n)
{
	print_error("%s %" PRIu64 ": %u frames:\n", what, id, n);
	for (unsigned i = 0; i < n; i++)
		print_error("  #%u %s\n", i, frames[i]);
}

/* ---- expected chains ---- */

static const char *const chain_butex[] = {"butex_wait", "ltgt_butex_leaf", "ltgt_butex_mid",
					  "ltgt_butex_main", "stb_task_entry", NULL};
static const char *const chain_sleep[] = {"bthread_usleep", "ltgt_sleep_leaf", "ltgt_sleep_mid",
					  "ltgt_sleep_main", "stb_task_entry", NULL};
static const char *const chain_mutex[] = {"bthread_mutex_lock|bthread_mutex_timedlock",
					  "ltgt_mutex_leaf", "ltgt_mutex_mid", "ltgt_mutex_main",
					  "stb_task_entry", NULL};
static const char *const chain_fd[] = {"bthread_fd_wait|bthread_fd_timedwait", "ltgt_fd_leaf",
				       "ltgt_fd_mid", "ltgt_fd_main", "stb_task_entry", NULL};
static const char *const chain_spin[] = {"ltgt_spin_leaf", "ltgt_spin_mid", "ltgt_spin_main",
					 "stb_task_entry", NULL};
static const char *const chain_yield_ready[] = {"bthread_yield", "ltgt_yield_leaf",
						"ltgt_yield_mid", "ltgt_yield_main",
						"stb_task_entry", NULL};
static const char *const chain_yield_any[] = {"ltgt_yield_mid", "ltgt_yield_main",
					      "stb_task_entry", NULL};
static const char *const chain_pthread[] = {"ltgt_pthread_leaf", "ltgt_pthread_mid",
					    "ltgt_pthread_main", "start_thread", NULL};
static const char *const chain_heartbeat[] = {"bthread_usleep", "ltgt_heartbeat_main",
					      "stb_task_entry", NULL};

struct expect {
	const char *chain;       /* loader_target chain name */
	const char *const *frames;
	const char *state;       /* NULL: any */
	const char *capture;     /* JSON capture; NULL: any */
};

static const struct expect expects[] = {
	{"butex", chain_butex, "suspended", "context"},
	{"sleep", chain_sleep, "suspended", "context"},
	{"mutex", chain_mutex, "suspended", "context"},
	{"fd", chain_fd, "suspended", "context"},
	{"spin", chain_spin, "running", "bpf"},
	{"pthread", chain_pthread, "running", "bpf"},
	{"yield", chain_yield_any, NULL, NULL},
	{"heartbeat", NULL, NULL, NULL},
};

/* Tasks in the default loader_target: 3 butex, 2 sleep, mutex, fd, 2 yield,
 * spin, heartbeat, pthread. */
#define DEFAULT_TASKS 12u

static void check_text_task(const struct tout *o, const struct lu_target *tg,
			    const struct expect *e, unsigned i)
{
	uint64_t id = chain_id(tg, e->chain, i);
	const struct ttask *t = text_task(o, id);
	if (!t)
		fail_msg("%s task %" PRIu64 " missing from the output", e->chain, id);
	if (t->failed)
		fail_msg("%s task %" PRIu64 ": trace failed: %s", e->chain, id, t->error);
	assert_int_equal(t->pthread, strcmp(e->chain, "pthread") == 0);
	if (e->state && strcmp(t->state, e->state) != 0)
		fail_msg("%s task %" PRIu64 " is %s, want %s", e->chain, id, t->state, e->state);
	char want_name[48];
	snprintf(want_name, sizeof(want_name), "ltgt-%s", e->chain);
	assert_string_equal(t->name, want_name);
	const char *const *frames = e->frames;
	if (strcmp(e->chain, "yield") == 0 && strcmp(t->state, "ready") == 0)
		frames = chain_yield_ready;
	if (strcmp(e->chain, "heartbeat") == 0 && strcmp(t->state, "suspended") == 0)
		frames = chain_heartbeat;
	if (frames && !frames_have((char (*)[96])t->frames, t->nframes, frames)) {
		dump_frames(e->chain, id, (char (*)[96])t->frames, t->nframes);
		fail_msg("%s task %" PRIu64 ": expected frames missing", e->chain, id);
	}
}

/* The whole default target in text form. */
static void check_text_all(const struct tout *o, const struct lu_target *tg)
{
	assert_int_equal(o->n, DEFAULT_TASKS);
	for (unsigned k = 0; k < sizeof(expects) / sizeof(expects[0]); k++) {
		const struct lu_chain *c = lu_target_chain(tg, expects[k].chain);
		assert_non_null(c);
		for (unsigned i = 0; i < c->n; i++)
			check_text_task(o, tg, &expects[k], i);
	}
}

/* ---- the JSON output ---- */

static struct lu_json *parse_json(const char *text)
{
	const char *err = NULL;
	struct lu_json *j = lu_json_parse(text, &err);
	if (!j)
		fail_msg("the loader's JSON does not parse (%s):\n%s", err ? err : "?", text);
	assert_string_equal(lu_json_str(j, "schema"), "stb-stacks/1");
	return j;
}

static const struct lu_json *json_task(const struct lu_json *doc, uint64_t id)
{
	const struct lu_json *tasks = lu_json_get(doc, "tasks");
	assert_non_null(tasks);
	for (const struct lu_json *t = tasks->child; t; t = t->next)
		if (lu_json_u64(t, "id", 0) == id)
			return t;
	return NULL;
}

/* Function names of a task's frames; checks every frame's "source". */
static unsigned json_frames(const struct lu_json *t, char (*frames)[96], char (*sources)[8])
{
	const struct lu_json *fr = lu_json_get(t, "frames");
	assert_non_null(fr);
	unsigned n = 0;
	for (const struct lu_json *f = fr->child; f && n < MAX_FRAMES; f = f->next, n++) {
		const char *fn = lu_json_str(f, "function");
		const char *src = lu_json_str(f, "source");
		assert_non_null(lu_json_str(f, "ip"));
		if (!src || (strcmp(src, "dwarf") != 0 && strcmp(src, "fp") != 0))
			fail_msg("frame %u has source '%s'", n, src ? src : "(none)");
		snprintf(frames[n], 96, "%s", fn ? fn : "??");
		snprintf(sources[n], 8, "%s", src);
	}
	return n;
}

/* Checks one task of a JSON document; nofp: the target has no frame
 * pointers, so its own frames must come from DWARF. */
static void check_json_task(const struct lu_json *doc, const struct lu_target *tg,
			    const struct expect *e, unsigned i, bool nofp)
{
	uint64_t id = chain_id(tg, e->chain, i);
	const struct lu_json *t = json_task(doc, id);
	if (!t)
		fail_msg("%s task %" PRIu64 " missing from the JSON", e->chain, id);
	const char *err = lu_json_str(t, "error");
	if (err)
		fail_msg("%s task %" PRIu64 ": %s", e->chain, id, err);
	const char *kind = lu_json_str(t, "kind");
	const char *state = lu_json_str(t, "state");
	const char *capture = lu_json_str(t, "capture");
	assert_non_null(kind);
	assert_non_null(state);
	assert_non_null(capture);
	assert_string_equal(kind, strcmp(e->chain, "pthread") == 0 ? "pthread" : "bthread");
	if (e->state)
		assert_string_equal(state, e->state);
	/* How a stack was taken follows from the state it was read in: a running
	 * task on a CPU is a BPF capture; one whose thread sleeps in a system
	 * call (the heartbeat on the timer lock, say) is read from there. */
	if (strcmp(state, "running") == 0) {
		if (strcmp(capture, "bpf") != 0 && strcmp(capture, "syscall") != 0)
			fail_msg("%s task %" PRIu64 ": running, captured by '%s'", e->chain, id,
				 capture);
		assert_true(lu_json_u64(t, "tid", 0) > 0);
	} else if (strcmp(state, "suspended") == 0 || strcmp(state, "ready") == 0) {
		assert_string_equal(capture, "context");
	}
	if (e->capture && strcmp(capture, e->capture) != 0)
		fail_msg("%s task %" PRIu64 ": captured by '%s', want '%s'", e->chain, id, capture,
			 e->capture);
	assert_int_equal(lu_json_bool(t, "truncated"), 0);
	char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
	unsigned n = json_frames(t, frames, sources);
	const char *const *want = e->frames;
	if (strcmp(e->chain, "yield") == 0 && strcmp(state, "ready") == 0)
		want = chain_yield_ready;
	if (strcmp(e->chain, "heartbeat") == 0 && strcmp(state, "suspended") == 0)
		want = chain_heartbeat;
	if (want && !frames_have(frames, n, want)) {
		dump_frames(e->chain, id, frames, n);
		fail_msg("%s task %" PRIu64 ": expected frames missing", e->chain, id);
	}
	if (nofp) {
		for (unsigned k = 0; k < n; k++) {
			if (strncmp(frames[k], "ltgt_", 5) == 0 && strcmp(sources[k], "dwarf") != 0) {
				dump_frames(e->chain, id, frames, n);
				fail_msg("frame %u (%s) of a -fomit-frame-pointer function has source "
					 "%s", k, frames[k], sources[k]);
			}
		}
	}
}

static void check_json_all(const struct lu_json *doc, const struct lu_target *tg, bool nofp)
{
	assert_int_equal(lu_json_u64(doc, "pid", 0), (uint64_t)tg->pid);
	assert_string_equal(lu_json_str(doc, "capture"), "bpf+context");
	assert_int_equal(lu_json_bool(doc, "complete"), 1);
	assert_int_equal(lu_json_u64(doc, "abi_version", 0), STB_ABI_VERSION);
	assert_int_equal(lu_json_get(doc, "tasks")->n, DEFAULT_TASKS);
	for (unsigned k = 0; k < sizeof(expects) / sizeof(expects[0]); k++) {
		const struct lu_chain *c = lu_target_chain(tg, expects[k].chain);
		assert_non_null(c);
		for (unsigned i = 0; i < c->n; i++)
			check_json_task(doc, tg, &expects[k], i, nofp);
	}
}

static char pidbuf[32];

static const char *pid_arg(const struct lu_target *t)
{
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)t->pid);
	return pidbuf;
}

/* ---- stacks ---- */

static void test_stacks_text(void **state)
{
	(void)state;
	struct lu_target tg;
	target_start(&tg, target_path, NULL, NULL);
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

static void run_json_stacks(const char *path, bool nofp, int rounds)
{
	struct lu_target tg;
	target_start(&tg, path, NULL, NULL);
	for (int i = 0; i < rounds; i++) {
		struct run r;
		run_loader(&r, "--pid", pid_arg(&tg), "--format", "json", "--timeout",
			   CAPTURE_TIMEOUT, NULL);
		expect_exit(&r, 0, NULL);
		struct lu_json *doc = parse_json(r.out);
		check_json_all(doc, &tg, nofp);
		lu_json_free(doc);
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
		struct lu_target tg;
		target_start(&tg, paths[b], NULL, NULL);
		unsigned in_redzone = 0;
		for (int i = 0; i < 5; i++) {
			struct run r;
			run_loader(&r, "--pid", pid_arg(&tg), "--state", "running", "--format", "json",
				   "--timeout", CAPTURE_TIMEOUT, NULL);
			expect_exit(&r, 0, NULL);
			struct lu_json *doc = parse_json(r.out);
			check_json_task(doc, &tg, &expects[4], 0, b == 1); /* spin */
			check_json_task(doc, &tg, &expects[5], 0, b == 1); /* pthread */
			const struct lu_json *t = json_task(doc, chain_id(&tg, "spin", 0));
			const struct lu_json *f0 = lu_json_get(t, "frames")->child;
			const char *fn = f0 ? lu_json_str(f0, "function") : NULL;
			in_redzone += fn && strcmp(fn, "ltgt_spin_redzone") == 0;
			lu_json_free(doc);
			run_free(&r);
		}
		/* The spinner spends nearly all its time there: the whole chain
		 * above was unwound through a register saved in the red zone. */
		assert_true(in_redzone >= 1);
		target_finish(&tg, DEFAULT_TASKS);
	}
}

/* ---- grouping and filters ---- */

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
	struct lu_target tg;
	target_start(&tg, target_path, NULL, NULL);
	const struct lu_chain *butex = lu_target_chain(&tg, "butex");
	const struct lu_chain *sleep = lu_target_chain(&tg, "sleep");
	assert_non_null(butex);
	assert_non_null(sleep);

	struct run r;
	run_loader(&r, "--pid", pid_arg(&tg), "--group", "--timeout", CAPTURE_TIMEOUT, NULL);
	expect_exit(&r, 0, NULL);
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
	struct lu_json *doc = parse_json(r.out);
	const struct lu_json *groups = lu_json_get(doc, "groups");
	assert_non_null(groups);
	bool found = false;
	unsigned gtotal = 0;
	for (const struct lu_json *gr = groups->child; gr; gr = gr->next) {
		const struct lu_json *ids = lu_json_get(gr, "ids");
		assert_non_null(ids);
		assert_int_equal(lu_json_u64(gr, "count", 0), ids->n);
		gtotal += ids->n;
		uint64_t v[MAX_TASKS];
		unsigned n = 0;
		for (const struct lu_json *x = ids->child; x && n < MAX_TASKS; x = x->next)
			v[n++] = strtoull(x->str, NULL, 10);
		if (ids_equal(v, n, butex->ids, butex->n)) {
			found = true;
			assert_string_equal(lu_json_str(gr, "state"), "suspended");
			char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
			unsigned nf = json_frames(gr, frames, sources);
			assert_true(frames_have(frames, nf, chain_butex));
		}
	}
	assert_true(found);
	assert_int_equal(gtotal, DEFAULT_TASKS);
	lu_json_free(doc);
	run_free(&r);
	free(o);
	target_finish(&tg, DEFAULT_TASKS);
}

static void test_filters(void **state)
{
	(void)state;
	struct lu_target tg;
	target_start(&tg, target_path, NULL, NULL);
	struct run r;

	/* --state running: only running tasks, spin and pthread among them. */
	run_loader(&r, "--pid", pid_arg(&tg), "--state", "running", "--format", "json",
		   "--timeout", CAPTURE_TIMEOUT, NULL);
	expect_exit(&r, 0, NULL);
	struct lu_json *doc = parse_json(r.out);
	for (const struct lu_json *t = lu_json_get(doc, "tasks")->child; t; t = t->next)
		assert_string_equal(lu_json_str(t, "state"), "running");
	assert_non_null(json_task(doc, chain_id(&tg, "spin", 0)));
	assert_non_null(json_task(doc, chain_id(&tg, "pthread", 0)));
	assert_null(json_task(doc, chain_id(&tg, "butex", 0)));
	lu_json_free(doc);
	run_free(&r);

	/* --state suspended: the blocked chains, not the spinners. */
	run_loader(&r, "--pid", pid_arg(&tg), "--state", "suspended", "--format", "json", NULL);
	expect_exit(&r, 0, NULL);
	doc = parse_json(r.out);
	for (const struct lu_json *t = lu_json_get(doc, "tasks")->child; t; t = t->next)
		assert_string_equal(lu_json_str(t, "state"), "suspended");
	for (unsigned k = 0; k < 4; k++) /* butex, sleep, mutex, fd */
		for (unsigned i = 0; i < lu_target_chain(&tg, expects[k].chain)->n; i++)
			check_json_task(doc, &tg, &expects[k], i, false);
	assert_null(json_task(doc, chain_id(&tg, "spin", 0)));
	assert_null(json_task(doc, chain_id(&tg, "pthread", 0)));
	lu_json_free(doc);
	run_free(&r);

	/* --max-depth 3: at most 3 frames, the rest reported as cut. */
	run_loader(&r, "--pid", pid_arg(&tg), "--max-depth", "3", "--format", "json", "--timeout",
		   CAPTURE_TIMEOUT, NULL);
	expect_exit(&r, 0, NULL);
	doc = parse_json(r.out);
	assert_int_equal(lu_json_get(doc, "tasks")->n, DEFAULT_TASKS);
	for (const struct lu_json *t = lu_json_get(doc, "tasks")->child; t; t = t->next) {
		const struct lu_json *fr = lu_json_get(t, "frames");
		assert_non_null(fr);
		assert_true(fr->n <= 3);
	}
	/* Every chain is deeper than 3 frames. */
	const struct lu_json *bt = json_task(doc, chain_id(&tg, "butex", 0));
	assert_int_equal(lu_json_get(bt, "frames")->n, 3);
	assert_int_equal(lu_json_bool(bt, "truncated"), 1);
	const struct lu_json *sp = json_task(doc, chain_id(&tg, "spin", 0));
	assert_int_equal(lu_json_get(sp, "frames")->n, 3);
	assert_int_equal(lu_json_bool(sp, "truncated"), 1);
	lu_json_free(doc);
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

/* ---- a SIGKILLed loader, a target that exits mid-trace ---- */

static const char *const blocker_args[] = {"--blocker", "1", "--yield", "0", "--spin", "0",
					   "--pthread", "0", NULL};
/* butex 3, sleep 2, mutex, fd, heartbeat, blocker */
#define BLOCKER_TASKS 9u

/* Waits until the task's lease word is set; returns it. */
static uint64_t wait_lease(struct lu_target *tg, uint64_t id, struct lu_proc *loader)
{
	char cmd[64], reply[128];
	snprintf(cmd, sizeof(cmd), "lease %" PRIu64, id);
	uint64_t deadline = lu_now_ns() + 20000000000ull;
	for (;;) {
		assert_int_equal(lu_target_cmd(tg, cmd, reply, sizeof(reply)), 0);
		uint64_t lease = strtoull(reply + 6, NULL, 16);
		if (lease)
			return lease;
		if (lu_now_ns() > deadline)
			fail_msg("the loader never took the lease of %" PRIu64, id);
		if (waitpid(loader->pid, NULL, WNOHANG) == loader->pid)
			fail_msg("the loader ended before taking the lease");
		lu_sleep_ms(2);
	}
}

static uint64_t lease_deadline_ns(uint64_t lease)
{
	return STB_ABI_LEASE_DEADLINE(lease);
}

/*
 * A running bthread blocked in read(2) on its worker is never on a CPU, so
 * the BPF program cannot see it: its stack comes from the sp/pc that
 * /proc/PID/task/TID/syscall shows and the frame chain found on its stack.
 */
static void test_running_in_syscall(void **state)
{
	(void)state;
	struct lu_target tg;
	target_start(&tg, target_path, blocker_args, NULL);
	uint64_t blocker = chain_id(&tg, "blocker", 0);
	char id[32];
	snprintf(id, sizeof(id), "%" PRIu64, blocker);
	struct run r;
	run_loader(&r, "--pid", pid_arg(&tg), "--bthread", id, "--format", "json", NULL);
	expect_exit(&r, 0, NULL);
	struct lu_json *doc = parse_json(r.out);
	const struct lu_json *t = json_task(doc, blocker);
	assert_non_null(t);
	assert_string_equal(lu_json_str(t, "state"), "running");
	assert_string_equal(lu_json_str(t, "capture"), "syscall");
	assert_null(lu_json_str(t, "error"));
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
	lu_json_free(doc);
	run_free(&r);
	char reply[64];
	assert_int_equal(lu_target_cmd(&tg, "release", reply, sizeof(reply)), 0);
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
	struct lu_target tg;
	target_start(&tg, target_path, args, NULL);
	char id[32];
	uint64_t pth = chain_id(&tg, "pthread", 0);
	snprintf(id, sizeof(id), "%" PRIu64, pth);
	for (int round = 0; round < 5; round++) {
		struct run r;
		run_loader(&r, "--pid", pid_arg(&tg), "--bthread", id, "--format", "json",
			   "--timeout", CAPTURE_TIMEOUT, NULL);
		expect_exit(&r, 0, NULL);
		struct lu_json *doc = parse_json(r.out);
		const struct lu_json *t = json_task(doc, pth);
		assert_non_null(t);
		assert_null(lu_json_str(t, "error"));
		assert_string_equal(lu_json_str(t, "state"), "running");
		assert_string_equal(lu_json_str(t, "capture"), "bpf");
		char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
		unsigned n = json_frames(t, frames, sources);
		if (!frames_have(frames, n, chain_pthread)) {
			dump_frames("pthread", pth, frames, n);
			fail_msg("pthread in sched_yield: expected frames missing");
		}
		lu_json_free(doc);
		run_free(&r);
	}
	target_finish(&tg, 9u); /* butex 3, sleep 2, mutex, fd, heartbeat, pthread */
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
	struct lu_target tg;
	target_start(&tg, target_path, blocker_args, NULL);
	uint64_t blocker = chain_id(&tg, "blocker", 0);
	uint64_t giveups0 = stat_of(&tg, "gate_giveups");
	char id[32];
	snprintf(id, sizeof(id), "%" PRIu64, blocker);
	/* The fault injection exists only in the test build of the loader. */
	char *argv[] = {loader_test_path, "--pid", (char *)pid_arg(&tg), "--bthread", id,
			"--timeout", "3000", NULL};
	char *env[] = {"STB_LOADER_FAULT_HOLD_MS=20000", NULL};
	struct lu_proc lp;
	uint64_t started = lu_now_ns();
	assert_int_equal(lu_proc_start(&lp, argv, env, NULL, NULL), 0);
	uint64_t lease = wait_lease(&tg, blocker, &lp);
	/* The lease ends within the trace's --timeout (the loader may take
	 * shorter ones and renew them). */
	uint64_t deadline = lease_deadline_ns(lease);
	assert_true(deadline > started && deadline < lu_now_ns() + 3100000000ull);

	assert_int_equal(kill(lp.pid, SIGKILL), 0);
	lu_proc_wait(&lp, 10000);
	assert_true(WIFSIGNALED(lp.status) && WTERMSIG(lp.status) == SIGKILL);
	lu_proc_free(&lp);
	char reply[128];
	snprintf(reply, sizeof(reply), "lease %" PRIu64, blocker);
	assert_int_equal(lu_target_cmd(&tg, reply, reply, sizeof(reply)), 0);
	assert_true(strtoull(reply + 6, NULL, 16) == lease); /* nobody released it */

	/* While the blocker is held, the other bthreads run on. */
	uint64_t hb = stat_of(&tg, "heartbeat"), limit = lu_now_ns() + 5000000000ull;
	while (stat_of(&tg, "heartbeat") == hb && lu_now_ns() < limit)
		lu_sleep_ms(2);
	assert_true(stat_of(&tg, "heartbeat") > hb);

	/* The blocker's read returns; it leaves RUNNING through the gate. */
	assert_int_equal(lu_target_cmd(&tg, "release", reply, sizeof(reply)), 0);
	assert_string_equal(reply, "ok");
	limit = (deadline > lu_now_ns() ? deadline : lu_now_ns()) + 5000000000ull;
	while (stat_of(&tg, "blocker_done") == 0 && lu_now_ns() < limit)
		lu_sleep_ms(5);
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
	assert_int_equal(lu_target_cmd(&tg, reply, reply, sizeof(reply)), 0);
	assert_string_equal(reply, "lease 0x0");

	/* Fully working: a new loader traces everything. */
	struct run r;
	run_loader(&r, "--pid", pid_arg(&tg), "--format", "json", "--timeout", CAPTURE_TIMEOUT,
		   NULL);
	expect_exit(&r, 0, NULL);
	struct lu_json *doc = parse_json(r.out);
	for (unsigned k = 0; k < 4; k++)
		for (unsigned i = 0; i < lu_target_chain(&tg, expects[k].chain)->n; i++)
			check_json_task(doc, &tg, &expects[k], i, false);
	assert_int_equal(lu_json_get(doc, "tasks")->n, BLOCKER_TASKS - 1); /* blocker ended */
	lu_json_free(doc);
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
	struct lu_target tg;
	target_start(&tg, target_path, NULL, NULL);
	uint64_t first = chain_id(&tg, "butex", 0), held = chain_id(&tg, "butex", 1);
	uint64_t third = chain_id(&tg, "sleep", 0);
	char a[32], b[32], c[32], cmd[64], reply[128];
	snprintf(a, sizeof(a), "%" PRIu64, first);
	snprintf(b, sizeof(b), "%" PRIu64, held);
	snprintf(c, sizeof(c), "%" PRIu64, third);
	snprintf(cmd, sizeof(cmd), "hold %" PRIu64 " 60000", held);
	assert_int_equal(lu_target_cmd(&tg, cmd, reply, sizeof(reply)), 0);
	assert_true(strncmp(reply, "hold 0x", 7) == 0);
	char *argv[] = {loader_path, "--pid", (char *)pid_arg(&tg), "--bthread", a, "--bthread", b,
			"--bthread", c, "--timeout", "1500", "-vv", "--format",
			json ? "json" : "text", NULL};
	struct lu_proc lp;
	assert_int_equal(lu_proc_start(&lp, argv, NULL, NULL, NULL), 0);
	char first_done[96];
	snprintf(first_done, sizeof(first_done), "task %" PRIu64 " suspended: held", first);
	if (!lu_proc_wait_for(&lp, first_done, 30000))
		fail_msg("the loader did not trace the first task: %s", lp.err.p ? lp.err.p : "");
	lu_sleep_ms(50); /* it is spinning on the held lease now */
	lu_target_kill(&tg);
	target_forget(&tg);
	assert_true(WIFSIGNALED(tg.status));
	assert_int_equal(lu_proc_wait(&lp, LOADER_TIMEOUT_MS), 0);
	int code = lu_proc_exit_code(&lp);
	if (code != 1 || !strstr(lp.err.p, "exited during the trace") || sanitizer_report(lp.err.p))
		fail_msg("loader exit %d, stderr:\n%s", code, lp.err.p);
	if (json) {
		struct lu_json *doc = parse_json(lp.out.p);
		assert_int_equal(lu_json_bool(doc, "complete"), 0);
		const struct lu_json *t = json_task(doc, first);
		assert_non_null(t);
		assert_null(lu_json_str(t, "error"));
		char frames[MAX_FRAMES][96], sources[MAX_FRAMES][8];
		unsigned n = json_frames(t, frames, sources);
		assert_true(frames_have(frames, n, chain_butex));
		t = json_task(doc, held);
		assert_non_null(t);
		assert_non_null(lu_json_str(t, "error"));
		assert_int_equal(lu_json_get(t, "frames")->n, 0);
		t = json_task(doc, third);
		assert_true(!t || lu_json_str(t, "error"));
		lu_json_free(doc);
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
	lu_proc_free(&lp);
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

/* ---- bad input ---- */

static void test_usage_errors(void **state)
{
	(void)state;
	static const struct {
		const char *args[6];
		const char *msg;
	} cases[] = {
		{{NULL}, "--pid is required"},
		{{"--bthread", "4294967296", NULL}, "--pid is required"},
		{{"--pid", "abc", NULL}, "--pid: 'abc'"},
		{{"--pid", "0", NULL}, "--pid: '0'"},
		{{"--pid", "-5", NULL}, "--pid: '-5'"},
		{{"--pid", "99999999999", NULL}, "--pid: '99999999999'"},
		{{"--pid", "12x", NULL}, "--pid: '12x'"},
		{{"--pid", "1", "--bthread", "7", NULL}, "--bthread: '7'"},
		{{"--pid", "1", "--bthread", "x1", NULL}, "--bthread: 'x1'"},
		{{"--pid", "1", "--max-depth", "0", NULL}, "--max-depth: '0'"},
		{{"--pid", "1", "--max-depth", "5000", NULL}, "--max-depth: '5000'"},
		{{"--pid", "1", "--timeout", "0", NULL}, "--timeout: '0'"},
		{{"--pid", "1", "--timeout", "1s", NULL}, "--timeout: '1s'"},
		{{"--pid", "1", "--state", "sleeping", NULL}, "unknown state 'sleeping'"},
		{{"--pid", "1", "--frob", NULL}, "unknown option --frob"},
		{{"--pid", "1", "-z", NULL}, "unknown option"},
		{{"--pid", "1", "--format", "xml", NULL}, "--format: 'xml'"},
		{{"--pid", "1", "--format", NULL}, "needs a value"},
		{{"--pid", "1", "extra", NULL}, "unexpected argument 'extra'"},
		{{"--pid", "1", "--all", "--bthread", "4294967296", NULL}, "exclude each other"},
	};
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *argv[8];
		int n = 0;
		argv[n++] = loader_path;
		for (int k = 0; cases[i].args[k]; k++)
			argv[n++] = (char *)cases[i].args[k];
		argv[n] = NULL;
		struct lu_proc p;
		assert_int_equal(lu_proc_start(&p, argv, NULL, NULL, NULL), 0);
		assert_int_equal(lu_proc_wait(&p, LOADER_TIMEOUT_MS), 0);
		int code = lu_proc_exit_code(&p);
		if (code != 64 || !strstr(p.err.p, cases[i].msg) || p.out.len != 0 ||
		    sanitizer_report(p.err.p))
			fail_msg("case %u (%s ...): exit %d, stderr '%s' (want 64 and '%s')", i,
				 cases[i].args[0] ? cases[i].args[0] : "no args", code, p.err.p,
				 cases[i].msg);
		lu_proc_free(&p);
	}
	struct run r;
	run_loader(&r, "--help", NULL);
	expect_exit(&r, 0, NULL);
	assert_non_null(strstr(r.out, "Usage: stb-bpf-loader --pid PID"));
	run_free(&r);
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

static void test_no_such_process(void **state)
{
	(void)state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	assert_int_equal(waitpid(pid, NULL, 0), pid); /* reaped: the pid is free */
	char p[32];
	snprintf(p, sizeof(p), "%d", (int)pid);
	struct run r;
	run_loader(&r, "--pid", p, NULL);
	expect_exit(&r, 1, "no such process");
	assert_int_equal(r.p.out.len, 0);
	run_free(&r);
}

static void test_not_stb_runtime(void **state)
{
	(void)state;
	char *argv[] = {"sleep", "60", NULL};
	struct lu_proc s;
	assert_int_equal(lu_proc_start(&s, argv, NULL, NULL, NULL), 0);
	lu_sleep_ms(50); /* let it exec */
	char p[32];
	snprintf(p, sizeof(p), "%d", (int)s.pid);
	struct run r;
	run_loader(&r, "--pid", p, NULL);
	lu_proc_free(&s);
	expect_exit(&r, 1, "not a stb runtime");
	run_free(&r);
}

static void test_abi_mismatch(void **state)
{
	(void)state;
	static const char *const args[] = {"--fake-abi", "7", NULL};
	struct lu_target tg;
	target_start(&tg, target_path, args, NULL);
	struct run r;
	run_loader(&r, "--pid", pid_arg(&tg), NULL);
	char want[64];
	snprintf(want, sizeof(want), "understands ABI version %u", STB_ABI_VERSION);
	expect_exit(&r, 1, "ABI version 7");
	expect_exit(&r, 1, want);
	run_free(&r);
	char bye[128];
	assert_int_equal(lu_target_quit(&tg, bye, sizeof(bye)), 0);
	target_forget(&tg);
	assert_int_equal(lu_field(bye, "signals"), 0);
}

/* A bthread id that never existed and one that has finished: exit 1; the
 * ids that exist are still printed. */
static void test_missing_bthread(void **state)
{
	(void)state;
	static const char *const args[] = {"--finished", "1", NULL};
	struct lu_target tg;
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
		snprintf(want, sizeof(want), "bthread %s does not exist or has finished", cases[i][0]);
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

/* ---- missing privileges ---- */

static int caps_get(struct __user_cap_data_struct d[2])
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	memset(d, 0, 2 * sizeof(*d));
	return (int)syscall(SYS_capget, &h, d);
}

/* In the child: drop CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN for good (also
 * from the bounding set, or exec as root would give them back), keep the
 * rest, CAP_SYS_PTRACE included. */
static int drop_bpf_caps(void *arg)
{
	(void)arg;
	static const int caps[] = {CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN};
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct d[2];
	if (caps_get(d) != 0)
		return -errno;
	for (unsigned i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		if (prctl(PR_CAPBSET_DROP, caps[i], 0, 0, 0) != 0)
			return -errno;
		d[caps[i] >> 5].effective &= ~(1u << (caps[i] & 31));
		d[caps[i] >> 5].permitted &= ~(1u << (caps[i] & 31));
		d[caps[i] >> 5].inheritable &= ~(1u << (caps[i] & 31));
	}
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	return syscall(SYS_capset, &h, d) == 0 ? 0 : -errno;
}

/* In the child: become nobody (no capabilities at all). */
static int become_nobody(void *arg)
{
	(void)arg;
	if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 ||
	    setresuid(65534, 65534, 65534) != 0)
		return -errno;
	return 0;
}

/* Effective capabilities of a process started with pre(), read from its
 * /proc/self/status. */
static uint64_t child_caps(lu_pre_exec_fn pre)
{
	char *argv[] = {"grep", "^CapEff:", "/proc/self/status", NULL};
	struct lu_proc p;
	assert_int_equal(lu_proc_start(&p, argv, NULL, pre, NULL), 0);
	assert_int_equal(lu_proc_wait(&p, 10000), 0);
	assert_int_equal(lu_proc_exit_code(&p), 0);
	uint64_t caps = strtoull(p.out.p + strlen("CapEff:"), NULL, 16);
	lu_proc_free(&p);
	return caps;
}

/* Without CAP_BPF/CAP_PERFMON/CAP_SYS_ADMIN but with CAP_SYS_PTRACE: context
 * mode only, with a warning and a note; suspended stacks still complete; the
 * running bthreads on a CPU fail, so exit 1. For both table backings (BPF map
 * and memfd). */
static void test_no_bpf_caps(void **state)
{
	(void)state;
	uint64_t caps = child_caps(drop_bpf_caps);
	assert_false(caps >> CAP_BPF & 1);
	assert_false(caps >> CAP_PERFMON & 1);
	assert_false(caps >> CAP_SYS_ADMIN & 1);
	assert_true(caps >> CAP_SYS_PTRACE & 1);

	static char memfd_env[] = "STB_TABLE=memfd";
	char *const envs[2][2] = {{NULL, NULL}, {memfd_env, NULL}};
	for (int b = 0; b < 2; b++) {
		struct lu_target tg;
		target_start(&tg, target_path, NULL, envs[b]);
		struct run r;
		run_loader_pre(&r, drop_bpf_caps, NULL, "--pid", pid_arg(&tg), NULL);
		expect_exit(&r, 1, "warning: BPF unavailable");
		expect_exit(&r, 1, "context mode only");
		expect_exit(&r, 1, "could not be traced");
		assert_true(strncmp(r.out, "# note: ", 8) == 0);
		struct tout *o = malloc(sizeof(*o));
		assert_non_null(o);
		parse_text(r.out, o);
		assert_true(o->note);
		assert_int_equal(o->n, DEFAULT_TASKS);
		for (unsigned k = 0; k < 4; k++) /* the suspended chains */
			for (unsigned i = 0; i < lu_target_chain(&tg, expects[k].chain)->n; i++)
				check_text_task(o, &tg, &expects[k], i);
		const struct ttask *t = text_task(o, chain_id(&tg, "spin", 0));
		assert_non_null(t);
		assert_true(t->failed);
		assert_non_null(strstr(t->error, "not captured"));
		free(o);
		run_free(&r);

		/* Only suspended bthreads asked for: BPF is never needed, never
		 * loaded, and its absence is no warning. */
		run_loader_pre(&r, drop_bpf_caps, NULL, "--pid", pid_arg(&tg), "--format", "json",
			       "--state", "suspended", NULL);
		expect_exit(&r, 0, NULL);
		assert_null(strstr(r.err, "warning"));
		struct lu_json *doc = parse_json(r.out);
		assert_string_equal(lu_json_str(doc, "capture"), "context");
		for (unsigned k = 0; k < 4; k++)
			for (unsigned i = 0; i < lu_target_chain(&tg, expects[k].chain)->n; i++)
				check_json_task(doc, &tg, &expects[k], i, false);
		lu_json_free(doc);
		run_free(&r);
		target_finish(&tg, DEFAULT_TASKS);
	}
}

/* In the child: every call of system call *(long *)arg fails with EPERM (a
 * seccomp filter). */
static int block_syscall(void *arg)
{
	long nr = *(const long *)arg;
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (__u32)nr, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof(filter) / sizeof(filter[0]), .filter = filter};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0)
		return -errno;
	return 0;
}

/* bpf(2) or perf_event_open(2) refused: context mode only; the running
 * bthreads on a CPU fail, so exit 1. */
static void run_blocked_syscall(long nr, const char *warning)
{
	struct lu_target tg;
	target_start(&tg, target_path, NULL, NULL);
	struct run r;
	run_loader_pre(&r, block_syscall, &nr, "--pid", pid_arg(&tg), "--format", "json", NULL);
	expect_exit(&r, 1, warning);
	struct lu_json *doc = parse_json(r.out);
	assert_string_equal(lu_json_str(doc, "capture"), "context-only");
	for (unsigned k = 0; k < 4; k++)
		for (unsigned i = 0; i < lu_target_chain(&tg, expects[k].chain)->n; i++)
			check_json_task(doc, &tg, &expects[k], i, false);
	const struct lu_json *t = json_task(doc, chain_id(&tg, "spin", 0));
	assert_non_null(t);
	assert_non_null(strstr(lu_json_str(t, "error"), "not captured"));
	lu_json_free(doc);
	run_free(&r);
	target_finish(&tg, DEFAULT_TASKS);
}

/* No bpf(2) at all, as on kernels before 6.5 for a process without CAP_BPF
 * (even BPF_OBJ_GET_INFO_BY_FD is refused under
 * kernel.unprivileged_bpf_disabled): the table, a BPF map since the target is
 * root, is still found and mapped; suspended stacks are printed. */
static void test_no_bpf_syscall(void **state)
{
	(void)state;
	run_blocked_syscall(SYS_bpf, "warning: BPF unavailable");
}

/* BPF loads but perf events cannot be opened. */
static void test_no_perf_events(void **state)
{
	(void)state;
	run_blocked_syscall(SYS_perf_event_open, "warning: perf events unavailable");
}

static void test_no_ptrace(void **state)
{
	(void)state;
	assert_int_equal(child_caps(become_nobody), 0);
	struct lu_target tg;
	target_start(&tg, target_path, NULL, NULL);
	struct run r;
	run_loader_pre(&r, become_nobody, NULL, "--pid", pid_arg(&tg), NULL);
	expect_exit(&r, 1, "CAP_SYS_PTRACE");
	assert_int_equal(r.p.out.len, 0);
	run_free(&r);
	target_finish(&tg, DEFAULT_TASKS);
}

/* ---- main ---- */

static bool privileged(void)
{
	struct __user_cap_data_struct d[2];
	if (caps_get(d) != 0)
		return false;
	uint64_t eff = (uint64_t)d[0].effective | ((uint64_t)d[1].effective << 32);
	bool bpf = (eff >> CAP_SYS_ADMIN & 1) || ((eff >> CAP_BPF & 1) && (eff >> CAP_PERFMON & 1));
	return bpf && (eff >> CAP_SYS_PTRACE & 1) && (eff >> CAP_SETUID & 1) &&
	       (eff >> CAP_SETPCAP & 1);
}

static void path_from_env(char *dst, const char *env, const char *sibling)
{
	const char *v = getenv(env);
	if (v && *v) {
		snprintf(dst, PATH_MAX, "%s", v);
		return;
	}
	char self[PATH_MAX - 64];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	snprintf(dst, PATH_MAX, "%s/%s", self, sibling);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_usage_errors, teardown),
		cmocka_unit_test_teardown(test_fault_knob_test_only, teardown),
		cmocka_unit_test_teardown(test_no_such_process, teardown),
		cmocka_unit_test_teardown(test_not_stb_runtime, teardown),
		cmocka_unit_test_teardown(test_abi_mismatch, teardown),
		cmocka_unit_test_teardown(test_stacks_text, teardown),
		cmocka_unit_test_teardown(test_stacks_json, teardown),
		cmocka_unit_test_teardown(test_stacks_json_nofp, teardown),
		cmocka_unit_test_teardown(test_running_repeated, teardown),
		cmocka_unit_test_teardown(test_group, teardown),
		cmocka_unit_test_teardown(test_filters, teardown),
		cmocka_unit_test_teardown(test_missing_bthread, teardown),
		cmocka_unit_test_teardown(test_running_in_syscall, teardown),
		cmocka_unit_test_teardown(test_running_in_sched_yield, teardown),
		cmocka_unit_test_teardown(test_loader_killed, teardown),
		cmocka_unit_test_teardown(test_target_exits_text, teardown),
		cmocka_unit_test_teardown(test_target_exits_json, teardown),
		cmocka_unit_test_teardown(test_no_bpf_caps, teardown),
		cmocka_unit_test_teardown(test_no_bpf_syscall, teardown),
		cmocka_unit_test_teardown(test_no_perf_events, teardown),
		cmocka_unit_test_teardown(test_no_ptrace, teardown),
	};
	const char *req = getenv("STB_REQUIRE_BPF");
	bool require = req && strcmp(req, "1") == 0;
	path_from_env(loader_path, "STB_LOADER", "../loader/stb-bpf-loader");
	path_from_env(loader_test_path, "STB_LOADER_TEST", "../loader/stb-bpf-loader-test");
	path_from_env(target_path, "STB_LOADER_TARGET", "loader_target");
	path_from_env(target_nofp_path, "STB_LOADER_TARGET_NOFP", "loader_target_nofp");
	if (!privileged()) {
		fprintf(stderr, "test_loader: needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE, "
				"CAP_SETUID, CAP_SETPCAP)%s\n",
			require ? "; STB_REQUIRE_BPF=1: failing" : ": skipped");
		return require ? 1 : 77;
	}
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
