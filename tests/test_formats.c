/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Output formats of the tracer (runtime/stacks/report/pprof.c, runtime/stacks/report.c): folded
 * stacks checked line by line, pprof read back with `go tool pprof -raw`,
 * JSON checked against docs/json.md (tests/check_json_schema.py). Without
 * arguments: stb_dump in this process; with --loader: stb-bpf-loader on
 * profile_target (needs root; exits 77 without privilege unless
 * STB_REQUIRE_BPF=1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>
#include <stb/abi.h>
#include <stb/stb.h>

#include "fmt_chains.h"
#include <dirent.h>
#include <errno.h>
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
#include "trace_util.h"

#define NA 5
#define NB 3

static char why[4096];

/* ---- helpers ---- */

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	struct ts_buf b = {0};
	ts_buf_add(&b, "", 0);
	char buf[8192];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		ts_buf_add(&b, buf, n);
	fclose(f);
	if (len)
		*len = b.len;
	return b.p;
}

static void tmp_path(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", ts_tmpdir(), name);
}

/* Asserts that text has exactly this line. */
static void assert_has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = text; p && *p;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		if (len == n && strncmp(p, line, n) == 0)
			return;
		p = nl ? nl + 1 : NULL;
	}
	fail_msg("missing line:\n  %s\nin:\n%s", line, text);
}

/* Every line of folded text is "frame(;frame)* count" with a positive count. */
static void assert_folded_shape(const char *text)
{
	int lines = 0;
	for (const char *p = text; *p;) {
		const char *nl = strchr(p, '\n');
		assert_non_null(nl);
		const char *sp = p;
		for (const char *q = p; q < nl; q++)
			if (*q == ' ')
				sp = q;
		assert_true(sp > p);
		char *end;
		long long c = strtoll(sp + 1, &end, 10);
		if (end != nl || c <= 0)
			fail_msg("bad folded line: %.*s", (int)(nl - p), p);
		assert_true(memchr(p, ';', (size_t)(sp - p)) || sp > p);
		lines++;
		p = nl + 1;
	}
	assert_true(lines > 0);
}

/* How many times needle occurs in text. */
static unsigned count_of(const char *text, const char *needle)
{
	unsigned n = 0;
	for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

static void check_json(const char *file, const char *opts)
{
	const char *py = ts_env("STB_PYTHON3", "python3");
	const char *checker = ts_env("STB_JSON_CHECKER", "check_json_schema.py");
	char *argv[5] = {(char *)py, (char *)checker, (char *)file, NULL, NULL};
	char o1[32] = "", o2[32] = "";
	if (opts && *opts) {
		sscanf(opts, "%31s %31s", o1, o2);
		argv[3] = o1;
		if (o2[0]) {
			char *a5[6] = {(char *)py, (char *)checker, (char *)file, o1, o2, NULL};
			char *err = NULL;
			int rc = ts_run(a5, NULL, &err, 60);
			if (rc != 0)
				fail_msg("%s %s: exit %d: %s", checker, file, rc, err);
			free(err);
			return;
		}
	}
	char *err = NULL;
	int rc = ts_run(argv, NULL, &err, 60);
	if (rc != 0)
		fail_msg("%s %s: exit %d: %s", checker, file, rc, err);
	free(err);
}

/* The sample of bthread id (one bthread_id label equal to it), or NULL. */
static const struct ts_sample *sample_of(const struct ts_prof *p, uint64_t id)
{
	char ids[24];
	snprintf(ids, sizeof(ids), "%" PRIu64, id);
	const struct ts_sample *found = NULL;
	for (int i = 0; i < p->ns; i++) {
		if (ts_sample_has_label(&p->s[i], "bthread_id", ids)) {
			if (found)
				fail_msg("two samples for bthread %s", ids);
			found = &p->s[i];
		}
	}
	return found;
}

/* Checks the per-task sample of a parked chain task. */
static void check_chain_sample(const struct ts_prof *p, uint64_t id, const char *name,
			       const char *chain_suffix)
{
	const struct ts_sample *s = sample_of(p, id);
	char stack[4096];
	if (!s)
		fail_msg("no sample with bthread_id:[%" PRIu64 "]", id);
	ts_sample_stack(p, s, stack, sizeof(stack));
	assert_int_equal(s->nv, 1);
	assert_int_equal(s->v[0], 1);
	if (!ts_sample_has_label(s, "state", "suspended") || !ts_sample_has_label(s, "name", name))
		fail_msg("bthread %" PRIu64 ": labels %s", id, s->labels);
	size_t n = strlen(stack), k = strlen(chain_suffix);
	if (n < k || strcmp(stack + n - k, chain_suffix) != 0 || !strstr(stack, "park;"))
		fail_msg("bthread %" PRIu64 ": stack %s does not end with park..%s", id, stack,
			 chain_suffix);
}

#define SUFFIX_A "fmt_a3;fmt_a2;fmt_a1;stb_task_entry;stb_ctx_trampoline"
#define PREFIX_A "suspended;stb_ctx_trampoline;stb_task_entry;fmt_a1;fmt_a2;fmt_a3;park;"
#define PREFIX_B "suspended;stb_ctx_trampoline;stb_task_entry;fmt_b1;fmt_b2;park;"

static bool starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}
#define SUFFIX_B "fmt_b2;fmt_b1;stb_task_entry;stb_ctx_trampoline"

static void check_grouped(const struct ts_prof *p, const uint64_t *ids, int n, const char *suffix)
{
	char want[24], stack[4096];
	snprintf(want, sizeof(want), "%" PRIu64, ids[0]);
	for (int i = 0; i < p->ns; i++) {
		const struct ts_sample *s = &p->s[i];
		if (!ts_sample_has_label(s, "bthread_id", want))
			continue;
		assert_int_equal(s->v[0], n);
		assert_int_equal(ts_sample_label_count(s, "bthread_id"), n);
		for (int k = 0; k < n; k++) {
			snprintf(want, sizeof(want), "%" PRIu64, ids[k]);
			assert_true(ts_sample_has_label(s, "bthread_id", want));
		}
		assert_true(ts_sample_has_label(s, "state", "suspended"));
		ts_sample_stack(p, s, stack, sizeof(stack));
		size_t len = strlen(stack), k = strlen(suffix);
		assert_true(len >= k && strcmp(stack + len - k, suffix) == 0);
		return;
	}
	fail_msg("no grouped sample for %s", want);
}

/* A mapping of the module whose file name starts with base has a hex build
 * id and symbolized functions. */
static void check_mapping(const struct ts_prof *p, const char *base)
{
	for (int i = 0; i < p->nm; i++) {
		const struct ts_map *m = &p->m[i];
		const char *slash = strrchr(m->file, '/');
		if (strncmp(slash ? slash + 1 : m->file, base, strlen(base)) != 0)
			continue;
		assert_true(strlen(m->build_id) >= 16);
		assert_true(strspn(m->build_id, "0123456789abcdef") == strlen(m->build_id));
		assert_non_null(strstr(m->bits, "[FN]"));
		return;
	}
	fail_msg("no mapping for %s among %d", base, p->nm);
}

/* ---- in-process: stb_dump ---- */

static bthread_t ida[NA], idb[NB];

static bool suspended(bthread_t id)
{
	struct stb_trace_info info;
	struct stb_trace_opts o = {.no_symbols = 1};
	return stb_trace(id, &o, NULL, 0, &info) >= 0 && info.state == STB_TASK_SUSPENDED;
}

static int chains_start(void **state)
{
	(void)state;
	ts_tmpdir();
	fmt_gate = butex_create();
	if (!fmt_gate)
		return -1;
	bthread_attr_t attr;
	bthread_attr_init(&attr);
	bthread_attr_set_name(&attr, "chain-a");
	for (int i = 0; i < NA; i++)
		if (bthread_start_background(&ida[i], &attr, fmt_a1, NULL) != 0)
			return -1;
	bthread_attr_set_name(&attr, "chain-b");
	for (int i = 0; i < NB; i++)
		if (bthread_start_background(&idb[i], &attr, fmt_b1, NULL) != 0)
			return -1;
	bthread_attr_destroy(&attr);
	for (int i = 0; i < NA; i++)
		if (!STB_WAIT_UNTIL(suspended(ida[i]), 10000))
			return -1;
	for (int i = 0; i < NB; i++)
		if (!STB_WAIT_UNTIL(suspended(idb[i]), 10000))
			return -1;
	return 0;
}

static int chains_stop(void **state)
{
	(void)state;
	fmt_chains_release();
	for (int i = 0; i < NA; i++)
		bthread_join(ida[i], NULL);
	for (int i = 0; i < NB; i++)
		bthread_join(idb[i], NULL);
	return 0;
}

/* "suspended;root;...;leaf" from stb_trace with inline frames (the
 * reference for the folded writer). */
static void folded_reference(bthread_t id, char *buf, size_t size)
{
	struct stb_frame f[64];
	struct stb_trace_opts o = {.max_depth = 64, .inline_frames = 1, .runtime_frames = 1};
	struct stb_trace_info info;
	int n = stb_trace(id, &o, f, 64, &info);
	assert_true(n > 5);
	assert_int_equal(info.state, STB_TASK_SUSPENDED);
	size_t len = (size_t)snprintf(buf, size, "suspended");
	for (int i = n - 1; i >= 0; i--) {
		assert_non_null(f[i].symbol);
		len += (size_t)snprintf(buf + len, size - len, ";%s", f[i].symbol);
	}
	assert_true(len < size);
}

static char *dump_to_file(int format, int group, const char *name, char *path, size_t size)
{
	tmp_path(path, size, name);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	/* The exact stacks checked here include the runtime's own frames. */
	struct stb_dump_opts o = {.format = format, .group = group, .runtime_frames = 1};
	int n = stb_dump(f, &o);
	assert_int_equal(fclose(f), 0);
	if (n < NA + NB)
		fail_msg("stb_dump(format %d) returned %d", format, n);
	return path;
}

static void test_dump_folded(void **state)
{
	(void)state;
	char ref[2048], line[2100], path[256];
	STB_TEST_BEGIN(60);
	dump_to_file(STB_FORMAT_FOLDED, 0, "dump.folded", path, sizeof(path));
	char *text = read_file(path, NULL);
	assert_non_null(text);
	assert_folded_shape(text);
	/* The chains, exactly: state root, frames root first, counts summed. */
	folded_reference(ida[0], ref, sizeof(ref));
	assert_true(starts_with(ref, PREFIX_A));
	snprintf(line, sizeof(line), "%s %d", ref, NA);
	assert_has_line(text, line);
	folded_reference(idb[0], ref, sizeof(ref));
	assert_true(starts_with(ref, PREFIX_B));
	snprintf(line, sizeof(line), "%s %d", ref, NB);
	assert_has_line(text, line);
	/* group changes nothing for folded output. */
	char path2[256];
	dump_to_file(STB_FORMAT_FOLDED, 1, "dump-g.folded", path2, sizeof(path2));
	char *text2 = read_file(path2, NULL);
	assert_non_null(text2);
	assert_has_line(text2, line);
	free(text2);
	/* By default the runtime's own frames are left out. */
	tmp_path(path2, sizeof(path2), "dump-default.folded");
	FILE *f = fopen(path2, "wb");
	assert_non_null(f);
	struct stb_dump_opts o = {.format = STB_FORMAT_FOLDED};
	assert_true(stb_dump(f, &o) >= NA + NB);
	assert_int_equal(fclose(f), 0);
	text2 = read_file(path2, NULL);
	assert_non_null(text2);
	snprintf(line, sizeof(line), "suspended;fmt_a1;fmt_a2;fmt_a3;park;butex_wait %d", NA);
	assert_has_line(text2, line);
	assert_null(strstr(text2, "stb_jump_stack"));
	assert_null(strstr(text2, "stb_ctx_trampoline"));
	free(text2);
	free(text);
	STB_TEST_END();
}

static void test_dump_pprof(void **state)
{
	(void)state;
	char path[256];
	struct ts_prof p;
	STB_TEST_BEGIN(180);
	dump_to_file(STB_FORMAT_PPROF, 0, "dump.pb.gz", path, sizeof(path));
	size_t len;
	char *raw = read_file(path, &len);
	assert_non_null(raw);
	assert_true(len > 20 && (unsigned char)raw[0] == 0x1f && (unsigned char)raw[1] == 0x8b);
	free(raw);
	if (ts_pprof_raw(path, &p, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	assert_string_equal(p.types, "bthreads/count[dflt]");
	assert_non_null(strstr(p.comments, "stb_dump of pid"));
	for (int i = 0; i < NA; i++)
		check_chain_sample(&p, ida[i], "chain-a", SUFFIX_A);
	for (int i = 0; i < NB; i++)
		check_chain_sample(&p, idb[i], "chain-b", SUFFIX_B);
	/* Every sample is one task. */
	for (int i = 0; i < p.ns; i++)
		assert_int_equal(p.s[i].v[0], 1);
	check_mapping(&p, "test_formats");
	ts_prof_free(&p);
	STB_TEST_END();
}

static void test_dump_pprof_grouped(void **state)
{
	(void)state;
	char path[256];
	struct ts_prof p;
	STB_TEST_BEGIN(180);
	dump_to_file(STB_FORMAT_PPROF, 1, "dump-g.pb.gz", path, sizeof(path));
	if (ts_pprof_raw(path, &p, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	check_grouped(&p, ida, NA, SUFFIX_A);
	check_grouped(&p, idb, NB, SUFFIX_B);
	ts_prof_free(&p);
	STB_TEST_END();
}

static void test_dump_json(void **state)
{
	(void)state;
	char path[256], path2[256], want[64];
	STB_TEST_BEGIN(60);
	dump_to_file(STB_FORMAT_JSON, 0, "dump.json", path, sizeof(path));
	check_json(path, "");
	char *text = read_file(path, NULL);
	assert_non_null(text);
	snprintf(want, sizeof(want), "{\"id\": %" PRIu64 ", \"kind\": \"bthread\"", ida[0]);
	assert_non_null(strstr(text, want));
	assert_non_null(strstr(text, "\"function\": \"fmt_a3\""));
	free(text);
	dump_to_file(STB_FORMAT_JSON, 1, "dump-g.json", path2, sizeof(path2));
	check_json(path2, "--grouped");
	STB_TEST_END();
}

/* ---- where in the program: file:line, inline frames, no runtime frame ---- */

static bthread_mutex_t fmt_mu;
static int fmt_inl_line; /* the line of fmt_inl_lock's call of bthread_mutex_lock */

/* Inlined into fmt_m1: a logical frame of the program at fmt_m1's address. */
static inline __attribute__((always_inline)) void fmt_inl_lock(void)
{
	fmt_inl_line = __LINE__ + 1;
	bthread_mutex_lock(&fmt_mu);
	bthread_mutex_unlock(&fmt_mu);
}

STB_FMT_FN static void *fmt_m1(void *arg)
{
	fmt_inl_lock();
	STB_FMT_NO_TAIL();
	return arg;
}

/* stb_dump of the tasks in state mask, in format, into a string. */
static char *dump_string(int format, bool runtime_frames, bool no_lines)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	struct stb_dump_opts o = {.format = format, .runtime_frames = runtime_frames,
				  .no_lines = no_lines, .state_mask = 1u << STB_TASK_SUSPENDED};
	assert_true(stb_dump(f, &o) >= NA + NB + 1);
	assert_int_equal(fclose(f), 0);
	return buf;
}

/* The line of text that starts with prefix, as a new string (NULL: none). */
static char *line_starting(const char *text, const char *prefix)
{
	size_t n = strlen(prefix);
	for (const char *p = text; p && *p;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		if (len >= n && strncmp(p, prefix, n) == 0)
			return strndup(p, len);
		p = nl ? nl + 1 : NULL;
	}
	return NULL;
}

/* No folded line names the same function twice in a row. */
static void assert_no_repeat(const char *folded)
{
	char *copy = strdup(folded);
	for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
		char *sp = strrchr(line, ' ');
		if (sp)
			*sp = '\0';
		const char *prev = "";
		size_t plen = 0;
		for (char *f = line; f;) {
			char *semi = strchr(f, ';');
			size_t len = semi ? (size_t)(semi - f) : strlen(f);
			if (len == plen && strncmp(f, prev, len) == 0)
				fail_msg("frame %.*s repeated in: %s", (int)len, f, line);
			prev = f;
			plen = len;
			f = semi ? semi + 1 : NULL;
		}
	}
	free(copy);
}

/*
 * A bthread in bthread_mutex_lock, called from fmt_inl_lock, inlined into
 * fmt_m1: every format shows bthread_mutex_lock first, never the runtime's
 * internals inlined into it (mutex_timedlock) nor a frame twice; text has
 * file:line by default (created by too), the inlined call as a frame of its
 * own, and none of it with no_lines; JSON has every logical frame.
 */
static void test_dump_frames(void **state)
{
	(void)state;
	char want[512];
	STB_TEST_BEGIN(120);
	assert_int_equal(bthread_mutex_init(&fmt_mu, NULL), 0);
	assert_int_equal(bthread_mutex_lock(&fmt_mu), 0); /* held by this pthread */
	bthread_t id;
	assert_int_equal(bthread_start_background(&id, NULL, fmt_m1, NULL), 0);
	assert_true(STB_WAIT_UNTIL(suspended(id), 10000));

	/* Folded: exactly the program's frames and the call it waits in. */
	char *folded = dump_string(STB_FORMAT_FOLDED, false, false);
	assert_has_line(folded, "suspended;fmt_m1;fmt_inl_lock;bthread_mutex_lock 1");
	assert_no_repeat(folded);
	free(folded);
	folded = dump_string(STB_FORMAT_FOLDED, true, false);
	assert_no_repeat(folded);
	char *m = line_starting(folded, "suspended;stb_ctx_trampoline;stb_task_entry;fmt_m1;"
				"fmt_inl_lock;bthread_mutex_lock;");
	if (!m || count_of(m, "mutex_timedlock") > 1)
		fail_msg("the runtime's frames of the mutex wait: %s\n%s", m ? m : "none", folded);
	free(m);
	free(folded);

	/* pprof: the same stack, leaf first. */
	char path[256];
	tmp_path(path, sizeof(path), "frames.pb.gz");
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	struct stb_dump_opts po = {.format = STB_FORMAT_PPROF};
	assert_true(stb_dump(f, &po) > 0);
	assert_int_equal(fclose(f), 0);
	struct ts_prof p;
	if (ts_pprof_raw(path, &p, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	const struct ts_sample *s = sample_of(&p, id);
	assert_non_null(s);
	char stack[4096];
	ts_sample_stack(&p, s, stack, sizeof(stack));
	assert_string_equal(stack, "bthread_mutex_lock;fmt_inl_lock;fmt_m1");
	ts_prof_free(&p);

	/* Text: file:line by default. */
	char *text = dump_string(STB_FORMAT_TEXT, false, false);
	char *sec = strstr(text, "waiting on mutex");
	assert_non_null(sec);
	char *l0 = line_starting(sec, "#0 0x"), *l1 = line_starting(sec, "#1 0x");
	char *l2 = line_starting(sec, "#2 0x"), *cb = line_starting(sec, "created by ");
	if (!l0 || !strstr(l0, " bthread_mutex_lock+0x") || !strstr(l0, " at ") ||
	    !strstr(l0, "mutex.c:"))
		fail_msg("frame 0: %s\n%s", l0 ? l0 : "none", sec);
	snprintf(want, sizeof(want), " fmt_inl_lock [inlined] at ");
	if (!l1 || !strstr(l1, want) || !strstr(l1, "test_formats.c:"))
		fail_msg("frame 1: %s\n%s", l1 ? l1 : "none", sec);
	snprintf(want, sizeof(want), "test_formats.c:%d", fmt_inl_line);
	assert_non_null(strstr(l1, want));
	if (!l2 || !strstr(l2, " fmt_m1+0x") || !strstr(l2, "test_formats.c:"))
		fail_msg("frame 2: %s\n%s", l2 ? l2 : "none", sec);
	if (!cb || !strstr(cb, " at ") || !strstr(cb, "test_formats.c:"))
		fail_msg("created by: %s\n%s", cb ? cb : "none", sec);
	assert_null(strstr(text, "mutex_timedlock"));
	free(l0);
	free(l1);
	free(l2);
	free(cb);
	free(text);
	text = dump_string(STB_FORMAT_TEXT, false, true);
	assert_null(strstr(text, "[inlined]"));
	assert_null(strstr(text, "test_formats.c:"));
	assert_non_null(strstr(text, " fmt_m1+0x"));
	free(text);

	/* JSON: every logical frame, the inlined one flagged. */
	tmp_path(path, sizeof(path), "frames.json");
	f = fopen(path, "w");
	assert_non_null(f);
	struct stb_dump_opts jo = {.format = STB_FORMAT_JSON};
	assert_true(stb_dump(f, &jo) > 0);
	assert_int_equal(fclose(f), 0);
	check_json(path, "");
	char *json = read_file(path, NULL);
	snprintf(want, sizeof(want), "{\"id\": %" PRIu64 ",", (uint64_t)id);
	char *t = strstr(json, want);
	assert_non_null(t);
	char *fr = strstr(t, "\"frames\": [");
	assert_non_null(fr);
	char *e = strstr(fr, "]}");
	assert_non_null(e);
	*e = '\0';
	const char *a = strstr(fr, "\"function\": \"bthread_mutex_lock\"");
	const char *b = strstr(fr, "\"function\": \"fmt_inl_lock\"");
	const char *c = strstr(fr, "\"function\": \"fmt_m1\"");
	if (!a || !b || !c || !(a < b && b < c) || count_of(fr, "\"inlined\": true") != 1 ||
	    count_of(fr, "\"ip\"") != 3 || strstr(fr, "mutex_timedlock"))
		fail_msg("JSON frames: %s", fr);
	*e = ']';
	char *created = strstr(t, "\"created_by\"");
	assert_non_null(created);
	assert_true(strstr(created, "\"file\"") && strstr(created, "\"file\"") < fr);
	free(json);

	assert_int_equal(bthread_mutex_unlock(&fmt_mu), 0);
	assert_int_equal(bthread_join(id, NULL), 0);
	bthread_mutex_destroy(&fmt_mu);
	STB_TEST_END();
}

static void test_dump_bad_format(void **state)
{
	(void)state;
	struct stb_dump_opts o = {.format = 99};
	FILE *f = fopen("/dev/null", "w");
	assert_non_null(f);
	assert_int_equal(stb_dump(f, &o), -EINVAL);
	o.format = -1;
	assert_int_equal(stb_dump(f, &o), -EINVAL);
	fclose(f);
}

/* ---- stb-bpf-loader on profile_target ---- */

static struct ts_ptarget tgt;
static uint64_t tida[NA], tidb[NB], tspin;
static char fold_a[2048], fold_b[2048];

static void parse_ids(const char *list, uint64_t *ids, int n)
{
	const char *p = list;
	for (int i = 0; i < n; i++) {
		char *end;
		ids[i] = strtoull(p, &end, 10);
		p = *end == ',' ? end + 1 : end;
	}
}

static int target_start(void **state)
{
	(void)state;
	char buf[256];
	ts_tmpdir();
	if (ts_ptarget_start(&tgt, "chains") != 0)
		return -1;
	if (!ts_ptarget_field(&tgt, "a", buf, sizeof(buf)))
		return -1;
	parse_ids(buf, tida, NA);
	if (!ts_ptarget_field(&tgt, "b", buf, sizeof(buf)))
		return -1;
	parse_ids(buf, tidb, NB);
	if (!ts_ptarget_field(&tgt, "spin", buf, sizeof(buf)))
		return -1;
	tspin = strtoull(buf, NULL, 10);
	if (!ts_ptarget_field(&tgt, "fold_a", fold_a, sizeof(fold_a)) ||
	    !ts_ptarget_field(&tgt, "fold_b", fold_b, sizeof(fold_b)))
		return -1;
	return 0;
}

static int target_stop(void **state)
{
	(void)state;
	return ts_ptarget_stop(&tgt) == 0 ? 0 : -1;
}

/* Runs the loader on the target with extra arguments; returns its exit status.
 * A long --timeout: on a loaded machine the spinner's worker may wait for a
 * CPU longer than the default 100 ms before its capture. */
static int loader(char **out, char **err, const char *a1, const char *a2, const char *a3,
		  const char *a4, const char *a5)
{
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)tgt.pid);
	char *argv[] = {(char *)ts_env("STB_LOADER", "stb-bpf-loader"), "--pid", pid, "--timeout",
			"10000", "--runtime-frames", (char *)a1, (char *)a2, (char *)a3, (char *)a4,
			(char *)a5, NULL};
	return ts_run(argv, out, err, 120);
}

static void test_loader_folded(void **state)
{
	(void)state;
	char *out = NULL, *err = NULL, line[2100];
	STB_TEST_BEGIN(150);
	int rc = loader(&out, &err, "--format", "folded", NULL, NULL, NULL);
	if (rc != 0)
		fail_msg("loader exit %d: %s", rc, err);
	assert_folded_shape(out);
	/* The target's own tracer (inline frames included) is the reference. */
	assert_true(starts_with(fold_a, PREFIX_A));
	assert_true(starts_with(fold_b, PREFIX_B));
	snprintf(line, sizeof(line), "%s %d", fold_a, NA);
	assert_has_line(out, line);
	snprintf(line, sizeof(line), "%s %d", fold_b, NB);
	assert_has_line(out, line);
	assert_has_line(out, "running;stb_ctx_trampoline;stb_task_entry;spin_outer;spin_leaf 1");
	free(out);
	free(err);
	STB_TEST_END();
}

static void check_loader_profile(const char *path, bool grouped)
{
	struct ts_prof p;
	char stack[4096], ids[24];
	if (ts_pprof_raw(path, &p, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	assert_string_equal(p.types, "bthreads/count[dflt]");
	if (grouped) {
		check_grouped(&p, tida, NA, SUFFIX_A);
		check_grouped(&p, tidb, NB, SUFFIX_B);
	} else {
		for (int i = 0; i < NA; i++)
			check_chain_sample(&p, tida[i], "chain-a", SUFFIX_A);
		for (int i = 0; i < NB; i++)
			check_chain_sample(&p, tidb[i], "chain-b", SUFFIX_B);
		/* The spinner, captured on its worker by BPF: exact leaf, worker tid. */
		const struct ts_sample *s = sample_of(&p, tspin);
		assert_non_null(s);
		ts_sample_stack(&p, s, stack, sizeof(stack));
		assert_string_equal(stack, "spin_leaf;spin_outer;stb_task_entry;stb_ctx_trampoline");
		assert_true(ts_sample_has_label(s, "state", "running"));
		assert_true(ts_sample_has_label(s, "name", "spinner"));
		assert_int_equal(ts_sample_label_count(s, "worker_tid"), 1);
	}
	snprintf(ids, sizeof(ids), "pid %d", (int)tgt.pid);
	assert_non_null(strstr(p.comments, ids));
	check_mapping(&p, "profile_target");
	check_mapping(&p, "libbthread.so");
	ts_prof_free(&p);
}

static void test_loader_pprof(void **state)
{
	(void)state;
	char path[256], *err = NULL;
	STB_TEST_BEGIN(300);
	tmp_path(path, sizeof(path), "loader.prof");
	int rc = loader(NULL, &err, "--format", "pprof", "-o", path, NULL);
	if (rc != 0)
		fail_msg("loader exit %d: %s", rc, err);
	free(err);
	check_loader_profile(path, false);
	/* -o *.pb.gz chooses pprof by itself; --group gives one sample per stack. */
	tmp_path(path, sizeof(path), "loader-g.pb.gz");
	rc = loader(NULL, &err, "--group", "-o", path, NULL, NULL);
	if (rc != 0)
		fail_msg("loader exit %d: %s", rc, err);
	free(err);
	check_loader_profile(path, true);
	/* To standard output when it is not a terminal. */
	char *out = NULL;
	rc = loader(&out, &err, "--format", "pprof", NULL, NULL, NULL);
	assert_int_equal(rc, 0);
	assert_true((unsigned char)out[0] == 0x1f && (unsigned char)out[1] == 0x8b);
	free(out);
	free(err);
	STB_TEST_END();
}

static void test_loader_json(void **state)
{
	(void)state;
	char path[256], *err = NULL, want[64];
	STB_TEST_BEGIN(150);
	tmp_path(path, sizeof(path), "loader.json");
	int rc = loader(NULL, &err, "--format", "json", "-o", path, NULL);
	if (rc != 0)
		fail_msg("loader exit %d: %s", rc, err);
	free(err);
	check_json(path, "--loader");
	char *text = read_file(path, NULL);
	assert_non_null(text);
	snprintf(want, sizeof(want), "{\"id\": %" PRIu64 ", \"kind\": \"bthread\"", tspin);
	assert_non_null(strstr(text, want));
	assert_non_null(strstr(text, "\"capture\": \"bpf\""));
	free(text);
	tmp_path(path, sizeof(path), "loader-g.json");
	/* (--no-threads: the threads of the process have a stack each.) */
	rc = loader(NULL, &err, "--format=json", "--group", "--no-threads", "-o", path);
	if (rc != 0)
		fail_msg("loader exit %d: %s", rc, err);
	free(err);
	check_json(path, "--loader --grouped");
	/* The stack once per group (with its ids), never per task. */
	text = read_file(path, NULL);
	assert_non_null(text);
	unsigned nframes = count_of(text, "\"frames\": ["), nids = count_of(text, "\"ids\": [");
	unsigned ntasks = count_of(text, "\"kind\": \"bthread\"") +
			  count_of(text, "\"kind\": \"pthread\"");
	if (nframes == 0 || nframes != nids || nframes >= ntasks)
		fail_msg("grouped JSON: %u frames arrays, %u groups, %u tasks", nframes, nids, ntasks);
	free(text);
	STB_TEST_END();
}

/* --format flamegraph: one self-contained page (tests/check_flamegraph.py:
 * well-formed, no external resource, its tree consistent) naming the
 * target's frames, split by state like the folded output. */
static void test_loader_flamegraph(void **state)
{
	(void)state;
	char path[256], *err = NULL, *out = NULL;
	STB_TEST_BEGIN(150);
	tmp_path(path, sizeof(path), "loader-fg.html");
	int rc = loader(NULL, &err, "--format", "flamegraph", "-o", path, NULL);
	if (rc != 0)
		fail_msg("loader exit %d: %s", rc, err);
	free(err);
	const char *py = ts_env("STB_PYTHON3", "python3");
	const char *checker = ts_env("STB_FG_CHECKER", "check_flamegraph.py");
	char *argv[] = {(char *)py, (char *)checker, path, "running", "spin_leaf", "spin_outer",
			"stb_task_entry", NULL};
	rc = ts_run(argv, &out, &err, 60);
	if (rc != 0)
		fail_msg("%s %s: exit %d: %s", checker, path, rc, err);
	assert_non_null(strstr(out, "names "));
	free(out);
	free(err);
	STB_TEST_END();
}

/* Continuous mode: --every writes complete, timestamped files into
 * --out-dir, keeps the --keep newest, leaves no temporary file behind and
 * exits 0 on SIGTERM. */
static void test_loader_every(void **state)
{
	(void)state;
	char dir[256], pid[16], prefix[40];
	STB_TEST_BEGIN(150);
	tmp_path(dir, sizeof(dir), "every");
	assert_true(mkdir(dir, 0700) == 0 || errno == EEXIST);
	snprintf(pid, sizeof(pid), "%d", (int)tgt.pid);
	snprintf(prefix, sizeof(prefix), "stb-%s-", pid);
	char *argv[] = {(char *)ts_env("STB_LOADER", "stb-bpf-loader"), "--pid", pid, "--timeout",
			"10000", "--every", "200ms", "--out-dir", dir, "--keep", "2", "--format",
			"folded", NULL};
	struct ts_proc pr;
	assert_int_equal(ts_proc_start(&pr, argv, NULL, NULL, NULL), 0);
	/* Wait for the first two files, then for several more snapshots, so that
	 * rotation has work to do. */
	int files = 0;
	for (int waited = 0; waited < 20000 && files < 2; waited += 100) {
		ts_proc_pump(&pr, 100);
		files = 0;
		DIR *d = opendir(dir);
		assert_non_null(d);
		for (struct dirent *e; (e = readdir(d));)
			if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
				files++;
		closedir(d);
	}
	if (files < 2)
		fail_msg("--every 200ms: %d files after 20 s: %s", files, pr.err.p);
	for (int i = 0; i < 10; i++)
		ts_proc_pump(&pr, 100);
	assert_int_equal(kill(pr.pid, SIGTERM), 0);
	assert_int_equal(ts_proc_wait(&pr, 30000), 0);
	if (ts_proc_exit_code(&pr) != 0)
		fail_msg("--every exit %d: %s", ts_proc_exit_code(&pr), pr.err.p);
	int ours = 0, other = 0;
	DIR *d = opendir(dir);
	assert_non_null(d);
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.' && (!e->d_name[1] || !strcmp(e->d_name, "..")))
			continue;
		size_t n = strlen(e->d_name);
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || n < 8 ||
		    strcmp(e->d_name + n - 7, ".folded") != 0) {
			other++;
			continue;
		}
		ours++;
		char path[600];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		char *text = read_file(path, NULL);
		assert_non_null(text);
		assert_folded_shape(text);
		/* By default without the runtime's own frames. */
		assert_has_line(text, "running;spin_outer;spin_leaf 1");
		assert_has_line(text, "suspended;fmt_a1;fmt_a2;fmt_a3;park;butex_wait 5");
		free(text);
	}
	closedir(d);
	if (ours != 2 || other != 0)
		fail_msg("--keep 2: %d snapshot files and %d others in %s", ours, other, dir);
	ts_proc_free(&pr);
	STB_TEST_END();
}

/* Continuous mode takes again the stacks of tasks that have not run since
 * the previous snapshot (-v says how many), and traces again every task that
 * ran: a bthread moving between two sleeps (flip_a, flip_b) is seen in both
 * across the snapshots, in exactly one of them in each. */
static void test_loader_every_reuse(void **state)
{
	(void)state;
	char dir[256], pid[16];
	STB_TEST_BEGIN(150);
	struct ts_ptarget ft;
	if (ts_ptarget_start(&ft, "flip") != 0)
		fail_msg("cannot start profile_target flip");
	tmp_path(dir, sizeof(dir), "every-reuse");
	assert_true(mkdir(dir, 0700) == 0 || errno == EEXIST);
	snprintf(pid, sizeof(pid), "%d", (int)ft.pid);
	char *argv[] = {(char *)ts_env("STB_LOADER", "stb-bpf-loader"), "--pid", pid, "--timeout",
			"10000", "--every", "100ms", "--out-dir", dir, "--keep", "1000", "--format",
			"folded", "-v", NULL};
	struct ts_proc pr;
	assert_int_equal(ts_proc_start(&pr, argv, NULL, NULL, NULL), 0);
	unsigned wrote = 0;
	for (int waited = 0; waited < 30000 && wrote < 16; waited += 100) {
		ts_proc_pump(&pr, 100);
		wrote = pr.err.p ? count_of(pr.err.p, ": wrote ") : 0;
	}
	assert_int_equal(kill(pr.pid, SIGTERM), 0);
	assert_int_equal(ts_proc_wait(&pr, 30000), 0);
	if (ts_proc_exit_code(&pr) != 0 || wrote < 16)
		fail_msg("--every 100ms: exit %d, %u files: %s", ts_proc_exit_code(&pr), wrote,
			 pr.err.p);
	/* The five parked chain tasks at least, in most snapshots after the first. */
	unsigned reused = 0;
	for (const char *p = pr.err.p; (p = strstr(p, "stb-bpf-loader: ")); p++) {
		unsigned n;
		if (sscanf(p, "stb-bpf-loader: %u tasks had not run since", &n) == 1 && n >= 5)
			reused++;
	}
	if (reused < wrote / 2)
		fail_msg("%u of %u snapshots took stacks again: %s", reused, wrote, pr.err.p);
	unsigned in_a = 0, in_b = 0, files = 0;
	DIR *d = opendir(dir);
	assert_non_null(d);
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		char path[600];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		char *text = read_file(path, NULL);
		assert_non_null(text);
		assert_folded_shape(text);
		assert_has_line(text, "suspended;fmt_a1;fmt_a2;fmt_a3;park;butex_wait 5");
		unsigned a = count_of(text, ";flip;flip_a;"), b = count_of(text, ";flip;flip_b;");
		unsigned other = count_of(text, ";flip ") + count_of(text, ";flip;bthread_");
		if (a + b + other != 1)
			fail_msg("%s: the flip bthread %u + %u + %u times:\n%s", path, a, b, other, text);
		in_a += a;
		in_b += b;
		files++;
		unlink(path);
		free(text);
	}
	closedir(d);
	rmdir(dir);
	if (in_a == 0 || in_b == 0)
		fail_msg("%u files: flip_a in %u, flip_b in %u (a task that ran must be traced "
			 "again)", files, in_a, in_b);
	ts_proc_free(&pr);
	assert_int_equal(ts_ptarget_stop(&ft), 0);
	STB_TEST_END();
}

static void test_loader_format_errors(void **state)
{
	(void)state;
	char *out = NULL, *err = NULL, pid[16];
	STB_TEST_BEGIN(60);
	/* Binary pprof is never written to a terminal; the message names the fix. */
	snprintf(pid, sizeof(pid), "%d", (int)tgt.pid);
	char *argv[] = {(char *)ts_env("STB_LOADER", "stb-bpf-loader"), "--pid", pid, "--format",
			"pprof", NULL};
	int rc = ts_run_pty(argv, &out, 60);
	assert_int_equal(rc, 64);
	assert_non_null(strstr(out, "terminal"));
	assert_non_null(strstr(out, "-o FILE"));
	free(out);
	rc = loader(&out, &err, "--format", "xml", NULL, NULL, NULL);
	assert_int_equal(rc, 64);
	assert_non_null(strstr(err, "--format"));
	assert_non_null(strstr(err, "folded"));
	free(out);
	free(err);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--loader") == 0) {
		int rc = ts_require_privilege("test_formats --loader");
		if (rc)
			return rc;
		const struct CMUnitTest tests[] = {
			cmocka_unit_test(test_loader_folded),
			cmocka_unit_test(test_loader_pprof),
			cmocka_unit_test(test_loader_json),
			cmocka_unit_test(test_loader_flamegraph),
			cmocka_unit_test(test_loader_every),
			cmocka_unit_test(test_loader_every_reuse),
			cmocka_unit_test(test_loader_format_errors),
		};
		return cmocka_run_group_tests_name("loader", tests, target_start, target_stop);
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dump_folded),
		cmocka_unit_test(test_dump_pprof),
		cmocka_unit_test(test_dump_pprof_grouped),
		cmocka_unit_test(test_dump_json),
		cmocka_unit_test(test_dump_frames),
		cmocka_unit_test(test_dump_bad_format),
	};
	return cmocka_run_group_tests_name("stb_dump", tests, chains_start, chains_stop);
}
