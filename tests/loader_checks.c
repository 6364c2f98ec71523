/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The helpers of the stb-bpf-loader tests (loader_checks.h).
 */
#include <ctype.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "loader_checks.h"

char loader_path[PATH_MAX];
char loader_test_path[PATH_MAX];
char target_path[PATH_MAX];
char target_nofp_path[PATH_MAX];

/*
 * Targets started by the current test, killed by the teardown if it failed.
 * A failed check longjmps out of the test, so the test's own struct
 * lu_target is gone by then: keep what the teardown needs here.
 */
static struct {
	const struct ts_ltarget *t;
	pid_t pid;
	int to_fd, from_fd;
} live[4];

struct ts_ltarget *target_start(struct ts_ltarget *t, const char *path, const char *const *args,
				char *const env[])
{
	int rc = ts_ltarget_start(t, path, args, env);
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

void target_forget(struct ts_ltarget *t)
{
	for (unsigned i = 0; i < sizeof(live) / sizeof(live[0]); i++)
		if (live[i].t == t)
			live[i].t = NULL;
}

int teardown(void **state)
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

uint64_t chain_id(const struct ts_ltarget *t, const char *chain, unsigned i)
{
	const struct ts_chain *c = ts_ltarget_chain(t, chain);
	if (!c || i >= c->n)
		fail_msg("target reported no %s bthread #%u", chain, i);
	return c->ids[i];
}

uint64_t stat_of(struct ts_ltarget *t, const char *key)
{
	uint64_t v = ts_ltarget_stat(t, key);
	if (v == UINT64_MAX)
		fail_msg("target %d does not answer", (int)t->pid);
	return v;
}

/* The target received no signal, its heartbeat still advances, and it ends
 * cleanly with every bthread joined. */
void target_finish(struct ts_ltarget *t, unsigned expect_joined)
{
	assert_int_equal(stat_of(t, "signals"), 0);
	uint64_t hb = stat_of(t, "heartbeat");
	uint64_t deadline = ts_now_ns() + 5000000000ull;
	while (stat_of(t, "heartbeat") == hb && ts_now_ns() < deadline)
		ts_sleep_ms(5);
	assert_true(stat_of(t, "heartbeat") > hb);
	char bye[256];
	int code = ts_ltarget_quit(t, bye, sizeof(bye));
	target_forget(t);
	if (code != 0 || strncmp(bye, "bye ", 4) != 0)
		fail_msg("target quit: exit %d, last line '%s'", code, bye);
	assert_int_equal(ts_field(bye, "signals"), 0);
	assert_int_equal(ts_field(bye, "joined"), expect_joined);
}

/* ---- running the loader ---- */

bool run_loader_all_frames = true;

/* Runs the loader with pre() in the child; args NULL-terminated. */
void run_loader_v(struct run *r, ts_pre_exec_fn pre, void *pre_arg, va_list ap)
{
	char *argv[64];
	int n = 0;
	argv[n++] = loader_path;
	const char *a;
	while ((a = va_arg(ap, const char *)) != NULL && n < 62) {
		argv[n++] = (char *)a;
		if (n == 3 && (strcmp(argv[1], "--pid") == 0 || strcmp(argv[1], "--core") == 0) &&
		    run_loader_all_frames)
			argv[n++] = "--runtime-frames";
	}
	argv[n] = NULL;
	int rc = ts_proc_start(&r->p, argv, NULL, pre, pre_arg);
	if (rc != 0)
		fail_msg("cannot start %s: %s", loader_path, strerror(-rc));
	if (ts_proc_wait(&r->p, LOADER_TIMEOUT_MS) != 0)
		fail_msg("the loader ran longer than %d ms", LOADER_TIMEOUT_MS);
	r->code = ts_proc_exit_code(&r->p);
	r->out = r->p.out.p;
	r->err = r->p.err.p;
}

void run_loader(struct run *r, ...)
{
	va_list ap;
	va_start(ap, r);
	run_loader_v(r, NULL, NULL, ap);
	va_end(ap);
}

void run_loader_pre(struct run *r, ts_pre_exec_fn pre, void *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	run_loader_v(r, pre, arg, ap);
	va_end(ap);
}

void run_free(struct run *r)
{
	ts_proc_free(&r->p);
}

/* Sanitizer reports in a loader built with them. */
bool sanitizer_report(const char *err)
{
	return strstr(err, "Sanitizer") || strstr(err, "runtime error:");
}

void expect_exit(const struct run *r, int code, const char *msg)
{
	if (r->code != code || (msg && !strstr(r->err, msg)) || sanitizer_report(r->err))
		fail_msg("loader exit %d (want %d), stderr:\n%s\n(want it to contain '%s')",
			 r->code, code, r->err, msg ? msg : "");
}

/* ---- the text output ---- */

/* Function name of a frame line "#k 0xADDR name+0xoff", maybe followed by
 * " at file:line" ("??" if none). */
void frame_fn(const char *line, char *fn, size_t len)
{
	const char *p = strchr(line, ' ');
	p = p ? strchr(p + 1, ' ') : NULL;
	snprintf(fn, len, "%s", p ? p + 1 : "??");
	for (char *at = strstr(fn, " at "), *next; at; at = next) {
		next = strstr(at + 1, " at ");
		if (!next)
			*at = '\0';
	}
	char *plus = strrchr(fn, '+');
	if (plus && strncmp(plus, "+0x", 3) == 0)
		*plus = '\0';
	if (strncmp(fn, "??", 2) == 0)
		snprintf(fn, len, "??");
}

void parse_text(const char *text, struct tout *o)
{
	memset(o, 0, sizeof(*o));
	struct ttask *cur = NULL;
	const char *s = text;
	bool threads = false; /* in the thread section: not parsed here */
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
		if (strncmp(line, "# the runtime's own frames", 26) == 0) {
			o->runtime_hint = true;
			continue;
		}
		if (strncmp(line, "# ", 2) == 0 && strstr(line, "the output is partial")) {
			o->partial = true;
			continue;
		}
		if (strncmp(line, "# ", 2) == 0 && strstr(line, " of the process")) {
			threads = true; /* every thread of the process, after the tasks */
			o->threads = true;
			continue;
		}
		if (threads)
			continue;
		if (strncmp(line, "# ", 2) == 0) {
			if (o->n == 0 && !o->header[0]) /* the header line */
				snprintf(o->header, sizeof(o->header), "%s", line);
			continue;
		}
		if (!cur) {
			assert_true(o->n < MAX_TASKS);
			cur = &o->t[o->n++];
			memset(cur, 0, sizeof(*cur));
			unsigned count;
			char kind[16];
			/* "N bthreads [state, min .. max] waiting on ..."; the ids
			 * follow on "  ids" lines. */
			if (sscanf(line, "%u %15s [%31[^],]", &count, kind, cur->state) == 3 &&
			    (strncmp(kind, "task", 4) == 0 || strncmp(kind, "bthread", 7) == 0 ||
			     strncmp(kind, "pthread", 7) == 0)) {
				cur->group = true;
				cur->count = count;
			} else if (sscanf(line, "%15s %" SCNu64, kind, &cur->id) == 2 &&
				   (strcmp(kind, "bthread") == 0 || strcmp(kind, "pthread") == 0)) {
				cur->pthread = strcmp(kind, "pthread") == 0;
				const char *q = strchr(line, '"');
				const char *b = line;
				if (q) {
					sscanf(q + 1, "%47[^\"]", cur->name);
					b = strchr(q + 1, '"');
					b = b ? b : line;
				}
				/* The task's own bracket: a wait clause may name an owner's. */
				b = strchr(b, '[');
				assert_non_null(b);
				sscanf(b + 1, "%31[^],]", cur->state);
			} else {
				fail_msg("unexpected line in the loader's output: '%s'", line);
			}
			continue;
		}
		/* "  ids 1 2 ... and N more" ("  id 1"), or with -v a line per
		 * member: "  ID "name" [its wait]". */
		const char *ids = NULL;
		if (cur->group && strncmp(line, "  ids ", 6) == 0)
			ids = line + 5;
		else if (cur->group && strncmp(line, "  id ", 5) == 0)
			ids = line + 4;
		if (cur->group && line[0] == ' ' && line[1] == ' ' && isdigit((unsigned char)line[2])) {
			if (cur->nids < MAX_TASKS)
				cur->ids[cur->nids++] = strtoull(line + 2, NULL, 10);
			continue;
		}
		if (line[0] == ' ' && strstr(line, " holds "))
			continue; /* what it holds that others wait on */
		if (ids) {
			char *end;
			for (;;) {
				uint64_t id = strtoull(ids, &end, 10);
				if (end == ids || cur->nids == MAX_TASKS)
					break;
				cur->ids[cur->nids++] = id;
				ids = end;
			}
			continue;
		}
		if (line[0] == '#') {
			/* A call inlined into the next frame: the frames are the
			 * physical ones, as --max-depth counts them. */
			if (strstr(line, " [inlined]"))
				cur->inlined++;
			else if (cur->nframes < MAX_FRAMES)
				frame_fn(line, cur->frames[cur->nframes++], sizeof(cur->frames[0]));
		} else if (strncmp(line, "(trace failed: ", 15) == 0) {
			cur->failed = true;
			snprintf(cur->error, sizeof(cur->error), "%s", line + 15);
		} else if (strncmp(line, "(no stack", 9) == 0) {
			cur->no_stack = true;
		} else if (sscanf(line, "(%u more frame", &cur->not_shown) == 1 ||
			   strncmp(line, "(over ", 6) == 0 || strncmp(line, "(more frames", 12) == 0) {
			cur->truncated = true;
		} else if (strncmp(line, "created by ", 11) == 0) {
			snprintf(cur->created_by, sizeof(cur->created_by), "%.159s", line + 11);
		} else if (cur->group && (strncmp(line, "  name \"", 8) == 0 ||
					  strncmp(line, "  names \"", 9) == 0)) {
			continue;
		} else {
			fail_msg("unexpected line in a task section: '%s'", line);
		}
	}
}

const struct ttask *text_task(const struct tout *o, uint64_t id)
{
	for (unsigned i = 0; i < o->n; i++)
		if (!o->t[i].group && o->t[i].id == id)
			return &o->t[i];
	return NULL;
}

/* Does name match pattern (alternatives separated by '|')? */
bool fn_match(const char *name, const char *pattern)
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
bool frames_have(char (*frames)[96], unsigned n, const char *const *want)
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

void dump_frames(const char *what, uint64_t id, char (*frames)[96], unsigned n)
{
	print_error("%s %" PRIu64 ": %u frames:\n", what, id, n);
	for (unsigned i = 0; i < n; i++)
		print_error("  #%u %s\n", i, frames[i]);
}

/* ---- expected chains ---- */

const char *const chain_butex[] = {"butex_wait",      "ltgt_butex_leaf", "ltgt_butex_mid",
				   "ltgt_butex_main", "stb_task_entry",  NULL};
const char *const chain_sleep[] = {"bthread_usleep",  "ltgt_sleep_leaf", "ltgt_sleep_mid",
				   "ltgt_sleep_main", "stb_task_entry",  NULL};
const char *const chain_mutex[] = {"bthread_mutex_lock|bthread_mutex_timedlock",
				   "ltgt_mutex_leaf",
				   "ltgt_mutex_mid",
				   "ltgt_mutex_main",
				   "stb_task_entry",
				   NULL};
const char *const chain_fd[] = {"bthread_fd_wait|bthread_fd_timedwait",
				"ltgt_fd_leaf",
				"ltgt_fd_mid",
				"ltgt_fd_main",
				"stb_task_entry",
				NULL};
const char *const chain_spin[] = {"ltgt_spin_leaf", "ltgt_spin_mid", "ltgt_spin_main",
				  "stb_task_entry", NULL};
const char *const chain_yield_ready[] = {"bthread_yield",   "ltgt_yield_leaf", "ltgt_yield_mid",
					 "ltgt_yield_main", "stb_task_entry",  NULL};
const char *const chain_yield_any[] = {"ltgt_yield_mid", "ltgt_yield_main", "stb_task_entry", NULL};
const char *const chain_pthread[] = {"ltgt_pthread_leaf", "ltgt_pthread_mid", "ltgt_pthread_main",
				     "start_thread", NULL};
const char *const chain_heartbeat[] = {"bthread_usleep", "ltgt_heartbeat_main", "stb_task_entry",
				       NULL};

const struct expect expects[NEXPECTS] = {
    {"butex", chain_butex, "suspended", "context"}, {"sleep", chain_sleep, "suspended", "context"},
    {"mutex", chain_mutex, "suspended", "context"}, {"fd", chain_fd, "suspended", "context"},
    {"spin", chain_spin, "running", "bpf"},         {"pthread", chain_pthread, "running", "bpf"},
    {"yield", chain_yield_any, NULL, NULL},         {"heartbeat", NULL, NULL, NULL},
};

void check_text_task(const struct tout *o, const struct ts_ltarget *tg, const struct expect *e,
		     unsigned i)
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
	if (frames && !frames_have((char(*)[96])t->frames, t->nframes, frames)) {
		dump_frames(e->chain, id, (char(*)[96])t->frames, t->nframes);
		fail_msg("%s task %" PRIu64 ": expected frames missing", e->chain, id);
	}
}

/* The whole default target in text form. */
void check_text_all(const struct tout *o, const struct ts_ltarget *tg)
{
	assert_int_equal(o->n, DEFAULT_TASKS);
	for (unsigned k = 0; k < sizeof(expects) / sizeof(expects[0]); k++) {
		const struct ts_chain *c = ts_ltarget_chain(tg, expects[k].chain);
		assert_non_null(c);
		for (unsigned i = 0; i < c->n; i++)
			check_text_task(o, tg, &expects[k], i);
	}
}

/* ---- the JSON output ---- */

struct ts_json *parse_json(const char *text)
{
	const char *err = NULL;
	struct ts_json *j = ts_json_parse(text, &err);
	if (!j)
		fail_msg("the loader's JSON does not parse (%s):\n%s", err ? err : "?", text);
	assert_string_equal(ts_json_str(j, "schema"), "stb-stacks/1");
	return j;
}

const struct ts_json *json_task(const struct ts_json *doc, uint64_t id)
{
	const struct ts_json *tasks = ts_json_get(doc, "tasks");
	assert_non_null(tasks);
	for (const struct ts_json *t = tasks->child; t; t = t->next)
		if (ts_json_u64(t, "id", 0) == id)
			return t;
	return NULL;
}

/* Function names of a task's frames; checks every frame's "source". */
unsigned json_frames(const struct ts_json *t, char (*frames)[96], char (*sources)[8])
{
	const struct ts_json *fr = ts_json_get(t, "frames");
	assert_non_null(fr);
	unsigned n = 0;
	for (const struct ts_json *f = fr->child; f && n < MAX_FRAMES; f = f->next, n++) {
		const char *fn = ts_json_str(f, "function");
		const char *src = ts_json_str(f, "source");
		assert_non_null(ts_json_str(f, "ip"));
		if (!src || (strcmp(src, "dwarf") != 0 && strcmp(src, "fp") != 0))
			fail_msg("frame %u has source '%s'", n, src ? src : "(none)");
		snprintf(frames[n], 96, "%s", fn ? fn : "??");
		snprintf(sources[n], 8, "%s", src);
	}
	return n;
}

/* Checks one task of a JSON document; nofp: the target has no frame
 * pointers, so its own frames must come from DWARF. */
void check_json_task(const struct ts_json *doc, const struct ts_ltarget *tg, const struct expect *e,
		     unsigned i, bool nofp)
{
	uint64_t id = chain_id(tg, e->chain, i);
	const struct ts_json *t = json_task(doc, id);
	if (!t)
		fail_msg("%s task %" PRIu64 " missing from the JSON", e->chain, id);
	const char *err = ts_json_str(t, "error");
	if (err)
		fail_msg("%s task %" PRIu64 ": %s", e->chain, id, err);
	const char *kind = ts_json_str(t, "kind");
	const char *state = ts_json_str(t, "state");
	const char *capture = ts_json_str(t, "capture");
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
		assert_true(ts_json_u64(t, "tid", 0) > 0);
	} else if (strcmp(state, "suspended") == 0 || strcmp(state, "ready") == 0) {
		assert_string_equal(capture, "context");
	}
	if (e->capture && strcmp(capture, e->capture) != 0)
		fail_msg("%s task %" PRIu64 ": captured by '%s', want '%s'", e->chain, id, capture,
			 e->capture);
	assert_int_equal(ts_json_bool(t, "truncated"), 0);
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
			if (strncmp(frames[k], "ltgt_", 5) == 0 &&
			    strcmp(sources[k], "dwarf") != 0) {
				dump_frames(e->chain, id, frames, n);
				fail_msg(
				    "frame %u (%s) of a -fomit-frame-pointer function has source "
				    "%s",
				    k, frames[k], sources[k]);
			}
		}
	}
}

void check_json_all(const struct ts_json *doc, const struct ts_ltarget *tg, bool nofp)
{
	assert_int_equal(ts_json_u64(doc, "pid", 0), (uint64_t)tg->pid);
	assert_string_equal(ts_json_str(doc, "capture"), "bpf+context");
	assert_int_equal(ts_json_bool(doc, "complete"), 1);
	assert_int_equal(ts_json_u64(doc, "abi_version", 0), STB_ABI_VERSION);
	assert_int_equal(ts_json_get(doc, "tasks")->n, DEFAULT_TASKS);
	for (unsigned k = 0; k < sizeof(expects) / sizeof(expects[0]); k++) {
		const struct ts_chain *c = ts_ltarget_chain(tg, expects[k].chain);
		assert_non_null(c);
		for (unsigned i = 0; i < c->n; i++)
			check_json_task(doc, tg, &expects[k], i, nofp);
	}
}

static char pidbuf[32];

const char *pid_arg(const struct ts_ltarget *t)
{
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)t->pid);
	return pidbuf;
}

const char *const blocker_args[] = {"--blocker", "1",         "--yield", "0", "--spin",
				    "0",         "--pthread", "0",       NULL};

/* ---- missing privileges ---- */

int caps_get(struct __user_cap_data_struct d[2])
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	memset(d, 0, 2 * sizeof(*d));
	return (int)syscall(SYS_capget, &h, d);
}

/* In the child: drop CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN for good (also
 * from the bounding set, or exec as root would give them back), keep the
 * rest, CAP_SYS_PTRACE included. */
int drop_bpf_caps(void *arg)
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
int become_nobody(void *arg)
{
	(void)arg;
	if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 ||
	    setresuid(65534, 65534, 65534) != 0)
		return -errno;
	return 0;
}

/* Effective capabilities of a process started with pre(), read from its
 * /proc/self/status. */
uint64_t child_caps(ts_pre_exec_fn pre)
{
	char *argv[] = {"grep", "^CapEff:", "/proc/self/status", NULL};
	struct ts_proc p;
	assert_int_equal(ts_proc_start(&p, argv, NULL, pre, NULL), 0);
	assert_int_equal(ts_proc_wait(&p, 10000), 0);
	assert_int_equal(ts_proc_exit_code(&p), 0);
	uint64_t caps = strtoull(p.out.p + strlen("CapEff:"), NULL, 16);
	ts_proc_free(&p);
	return caps;
}

bool privileged(void)
{
	struct __user_cap_data_struct d[2];
	if (caps_get(d) != 0)
		return false;
	uint64_t eff = (uint64_t)d[0].effective | ((uint64_t)d[1].effective << 32);
	bool bpf = (eff >> CAP_SYS_ADMIN & 1) || ((eff >> CAP_BPF & 1) && (eff >> CAP_PERFMON & 1));
	return bpf && (eff >> CAP_SYS_PTRACE & 1) && (eff >> CAP_SETUID & 1) &&
	       (eff >> CAP_SETPCAP & 1);
}

int loader_checks_main(const struct CMUnitTest *tests, size_t n, const char *name)
{
	const char *req = getenv("STB_REQUIRE_BPF");
	bool require = req && strcmp(req, "1") == 0;
	ts_path(loader_path, sizeof(loader_path), "STB_LOADER", "../loader/stb-bpf-loader");
	ts_path(loader_test_path, sizeof(loader_test_path), "STB_LOADER_TEST",
		"../loader/stb-bpf-loader-test");
	ts_path(target_path, sizeof(target_path), "STB_LOADER_TARGET", "loader_target");
	ts_path(target_nofp_path, sizeof(target_nofp_path), "STB_LOADER_TARGET_NOFP",
		"loader_target_nofp");
	if (!privileged()) {
		fprintf(stderr,
			"%s: needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE, "
			"CAP_SETUID, CAP_SETPCAP)%s\n",
			name, require ? "; STB_REQUIRE_BPF=1: failing" : ": skipped");
		return require ? 1 : 77;
	}
	signal(SIGPIPE, SIG_IGN);
	return _cmocka_run_group_tests(name, tests, n, NULL, NULL);
}
