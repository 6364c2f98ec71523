/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Code of other compilers: tests/cctarget built by each variant's compiler
 * and flags ($STB_CC_VARIANTS, tests/CMakeLists.txt), traced in process
 * (stb_dump, asked over the target's protocol) or, with --loader, by
 * stb-bpf-loader (root: 77 unless STB_REQUIRE_BPF=1). In text, JSON,
 * pprof and folded output every frame of the known chains is there, with
 * the file:line its source marks ("@cct:NAME") and the inlined calls; the
 * JSON frames' addresses give what addr2line -i gives.
 */
#include <errno.h>
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
#include "support/ltarget.h"
#include "support/pprof_raw.h"
#include "support/proc.h"

#define MAX_VARIANTS 16
#define MAX_MARKS 64
#define MAX_LFRAMES 96

/* ---- what the target's source says ---- */

struct mark {
	char name[32];
	char file[32]; /* basename */
	int line;
};

static struct mark marks[MAX_MARKS];
static unsigned nmarks;

/* One logical frame a chain must show, innermost first. */
struct want {
	const char *fn;
	const char *mark;    /* its position */
	const char *mark_hi; /* non-NULL: anywhere from mark to mark_hi (a running loop) */
	bool inlined;
};

struct chain {
	const char *name;
	bool running; /* captured running: frame 0 is the interrupted instruction */
	struct want w[8];
};

/* From the target's innermost frame of its own (above it: the runtime's
 * butex_wait, or nothing for the spinner) to the bthread's function. */
static const struct chain chains[] = {
	{"c", false,
	 {{"cct_park", "park", NULL, false},
	  {"cct_c_leaf", "c_leaf", NULL, false},
	  {"cct_c_inl", "c_inl", NULL, true},
	  {"cct_c_mid", "c_mid", NULL, false},
	  {"cct_c_task", "c_task", NULL, false}}},
	{"cxx", false,
	 {{"cct_park", "park", NULL, false},
	  {"cct::Guard::Guard(int)", "cxx_guard", NULL, true},
	  {"cct::Runner::run(int)", "cxx_run", NULL, false},
	  {"cct_cxx_task", "cxx_task", NULL, false}}},
	{"lib", false,
	 {{"cct_park", "park", NULL, false},
	  {"cct_lib_leaf", "lib_leaf", NULL, false},
	  {"cct_lib_inl", "lib_inl", NULL, true},
	  {"cct_lib_entry", "lib_entry", NULL, false},
	  {"cct_lib_task", "lib_task", NULL, false}}},
	{"spin", true,
	 {{"cct_spin_loop", "spin_lo", "spin_hi", false},
	  {"cct_spin_inl", "spin_inl", NULL, true},
	  {"cct_spin_task", "spin_task", NULL, false}}},
};
#define NCHAINS (sizeof(chains) / sizeof(chains[0]))

static unsigned chain_len(const struct chain *c)
{
	unsigned n = 0;
	while (n < 8 && c->w[n].fn)
		n++;
	return n;
}

static const struct mark *mark_of(const char *name)
{
	for (unsigned i = 0; i < nmarks; i++)
		if (strcmp(marks[i].name, name) == 0)
			return &marks[i];
	fail_msg("no marker @cct:%s in the target's sources", name);
	return NULL;
}

/* Reads the "@cct:NAME" markers of the target's sources in dir. */
static void marks_load(const char *dir)
{
	static const char *const files[] = {"cct_main.c", "cct_cxx.cpp", "cct_lib.c"};
	for (unsigned f = 0; f < 3; f++) {
		char path[PATH_MAX], line[1024];
		snprintf(path, sizeof(path), "%s/%s", dir, files[f]);
		FILE *in = fopen(path, "r");
		if (!in) {
			fprintf(stderr, "test_cc_targets: %s: %s\n", path, strerror(errno));
			exit(1);
		}
		for (int no = 1; fgets(line, sizeof(line), in); no++) {
			const char *m = strstr(line, "@cct:");
			if (!m || nmarks == MAX_MARKS)
				continue;
			struct mark *k = &marks[nmarks++];
			size_t n = strcspn(m + 5, " */\n");
			snprintf(k->name, sizeof(k->name), "%.*s", (int)n, m + 5);
			snprintf(k->file, sizeof(k->file), "%s", files[f]);
			k->line = no;
		}
		fclose(in);
	}
}

/* Does file:line (file a path) match want w? */
static bool at_mark(const struct want *w, const char *file, int line)
{
	const struct mark *lo = mark_of(w->mark), *hi = w->mark_hi ? mark_of(w->mark_hi) : lo;
	const char *base = file ? strrchr(file, '/') : NULL;
	base = base ? base + 1 : file;
	return base && strcmp(base, lo->file) == 0 && line >= lo->line && line <= hi->line;
}

static void want_str(const struct want *w, char *buf, size_t size)
{
	const struct mark *m = mark_of(w->mark);
	if (w->mark_hi)
		snprintf(buf, size, "%s%s at %s:%d-%d", w->fn, w->inlined ? " [inlined]" : "", m->file,
			 m->line, mark_of(w->mark_hi)->line);
	else
		snprintf(buf, size, "%s%s at %s:%d", w->fn, w->inlined ? " [inlined]" : "", m->file,
			 m->line);
}

/* ---- the variants and the run ---- */

struct variant {
	char name[64];
	char path[PATH_MAX];
	bool nofp; /* built without frame pointers: frames must come from CFI */
};

static struct variant variants[MAX_VARIANTS];
static unsigned nvariants;
static bool use_loader;
static char loader[PATH_MAX];
static char addr2line[PATH_MAX];
static struct ts_ltarget *live; /* killed by the teardown after a failed check */

/* A logical frame as read back from an output. */
struct lframe {
	char fn[256];
	char file[512];
	int line;
	bool inlined;
};

/* What one output said of one task. */
struct lstack {
	struct lframe f[MAX_LFRAMES];
	unsigned n;
};

static void lstack_dump(const char *what, const struct lstack *s)
{
	fprintf(stderr, "%s (%u frames):\n", what, s->n);
	for (unsigned i = 0; i < s->n; i++)
		fprintf(stderr, "  %s%s at %s:%d\n", s->f[i].fn, s->f[i].inlined ? " [inlined]" : "",
			s->f[i].file[0] ? s->f[i].file : "??", s->f[i].line);
}

/*
 * Checks the logical frames of s (innermost first) against chain c: from
 * the first frame of c's innermost function on, every frame of c in order,
 * with its position. with_lines: positions are checked.
 */
static void check_chain(const char *what, const struct lstack *s, const struct chain *c, bool with_lines)
{
	unsigned start = 0;
	while (start < s->n && strcmp(s->f[start].fn, c->w[0].fn) != 0)
		start++;
	if (start == s->n) {
		lstack_dump(what, s);
		fail_msg("%s: chain %s: no frame %s", what, c->name, c->w[0].fn);
	}
	unsigned k = start;
	for (unsigned i = 0; i < chain_len(c); i++) {
		const struct want *w = &c->w[i];
		char ws[256];
		want_str(w, ws, sizeof(ws));
		if (k >= s->n) {
			lstack_dump(what, s);
			fail_msg("%s: chain %s ends before %s", what, c->name, ws);
		}
		const struct lframe *f = &s->f[k++];
		bool ok = strcmp(f->fn, w->fn) == 0 && f->inlined == w->inlined &&
			  (!with_lines || at_mark(w, f->file, f->line));
		if (!ok) {
			lstack_dump(what, s);
			fail_msg("%s: chain %s frame %u is %s%s at %s:%d, the source says %s", what, c->name,
				 k - 1, f->fn, f->inlined ? " [inlined]" : "", f->file[0] ? f->file : "??",
				 f->line, ws);
		}
	}
}

/* ---- text (--lines) ---- */

/* Frames of task id in a text report: "#N 0xIP NAME+0xOFF [inlined] at FILE:LINE". */
static void text_stack(const char *text, uint64_t id, struct lstack *s)
{
	bool in = false;
	memset(s, 0, sizeof(*s));
	for (const char *l = text; l && *l;) {
		const char *nl = strchr(l, '\n');
		size_t len = nl ? (size_t)(nl - l) : strlen(l);
		char line[2048];
		snprintf(line, sizeof(line), "%.*s", (int)len, l);
		l = nl ? nl + 1 : NULL;
		if (strncmp(line, "bthread ", 8) == 0 || strncmp(line, "pthread ", 8) == 0) {
			in = strtoull(line + 8, NULL, 10) == id;
			continue;
		}
		if (!in || line[0] != '#' || s->n == MAX_LFRAMES)
			continue;
		struct lframe *f = &s->f[s->n++];
		memset(f, 0, sizeof(*f));
		char *p = strchr(line, ' ');          /* before the ip */
		p = p ? strchr(p + 1, ' ') : NULL;   /* before the name */
		if (!p)
			continue;
		p++;
		size_t n = strcspn(p, " ");
		snprintf(f->fn, sizeof(f->fn), "%.*s", (int)n, p);
		char *plus = strrchr(f->fn, '+');
		if (plus && strncmp(plus, "+0x", 3) == 0)
			*plus = '\0';
		f->inlined = strstr(p + n, " [inlined]") != NULL;
		char *at = strstr(p + n, " at ");
		if (at) {
			char *colon = strrchr(at + 4, ':');
			if (colon) {
				*colon = '\0';
				f->line = atoi(colon + 1);
			}
			snprintf(f->file, sizeof(f->file), "%s", at + 4);
		}
	}
}

static void check_text(const char *what, const char *text, const struct ts_ltarget *t)
{
	for (unsigned c = 0; c < NCHAINS; c++) {
		struct lstack s;
		const struct ts_chain *tc = ts_ltarget_chain(t, chains[c].name);
		assert_non_null(tc);
		text_stack(text, tc->ids[0], &s);
		check_chain(what, &s, &chains[c], true);
	}
}

/* ---- JSON, and addr2line on its addresses ---- */

/* addr2line -i -f -C: the logical frames at module_offset off of module. */
static void addr2line_stack(const char *module, uint64_t off, struct lstack *s)
{
	char addr[32];
	snprintf(addr, sizeof(addr), "0x%" PRIx64, off);
	char *argv[] = {addr2line, "-i", "-f", "-C", "-e", (char *)module, addr, NULL};
	char *out = NULL;
	memset(s, 0, sizeof(*s));
	if (ts_run(argv, &out, NULL, 60) != 0)
		fail_msg("addr2line -e %s %s failed", module, addr);
	char *save = NULL;
	for (char *fn = strtok_r(out, "\n", &save); fn && s->n < MAX_LFRAMES;
	     fn = strtok_r(NULL, "\n", &save)) {
		char *pos = strtok_r(NULL, "\n", &save);
		if (!pos)
			break;
		struct lframe *f = &s->f[s->n++];
		memset(f, 0, sizeof(*f));
		snprintf(f->fn, sizeof(f->fn), "%s", fn);
		char *colon = strrchr(pos, ':');
		if (colon) {
			*colon = '\0';
			f->line = atoi(colon + 1); /* "N (discriminator D)" reads as N */
		}
		snprintf(f->file, sizeof(f->file), "%s", pos);
		f->inlined = true;
	}
	if (s->n)
		s->f[s->n - 1].inlined = false; /* the function they are inlined into */
	free(out);
}

static void check_json(const char *what, const char *text, const struct ts_ltarget *t,
		       const struct variant *v)
{
	const char *err = NULL;
	struct ts_json *doc = ts_json_parse(text, &err);
	if (!doc)
		fail_msg("%s: not JSON (%s)", what, err ? err : "?");
	const struct ts_json *tasks = ts_json_get(doc, "tasks");
	assert_non_null(tasks);
	for (unsigned c = 0; c < NCHAINS; c++) {
		const struct chain *ch = &chains[c];
		const struct ts_chain *tc = ts_ltarget_chain(t, ch->name);
		const struct ts_json *task = NULL;
		assert_non_null(tc);
		for (const struct ts_json *x = tasks->child; x; x = x->next)
			if (ts_json_u64(x, "id", 0) == tc->ids[0])
				task = x;
		if (!task)
			fail_msg("%s: no task %" PRIu64 " (chain %s)", what, tc->ids[0], ch->name);
		const char *state = ts_json_str(task, "state");
		const struct ts_json *frames = ts_json_get(task, "frames");
		assert_non_null(frames);
		struct lstack s;
		memset(&s, 0, sizeof(s));
		unsigned first = UINT_MAX, idx = 0;
		for (const struct ts_json *f = frames->child; f && s.n < MAX_LFRAMES; f = f->next, idx++) {
			struct lframe *l = &s.f[s.n++];
			const char *fn = ts_json_str(f, "function"), *file = ts_json_str(f, "file");
			memset(l, 0, sizeof(*l));
			snprintf(l->fn, sizeof(l->fn), "%s", fn ? fn : "??");
			snprintf(l->file, sizeof(l->file), "%s", file ? file : "");
			l->line = (int)ts_json_u64(f, "line", 0);
			l->inlined = ts_json_bool(f, "inlined") == 1;
			if (first == UINT_MAX && fn && strcmp(fn, ch->w[0].fn) == 0)
				first = idx;
		}
		check_chain(what, &s, ch, true);
		/* Each of the chain's physical frames (the last frame of an
		 * address): what addr2line -i says of its address is the chain's
		 * logical frames there; without frame pointers the frames come from
		 * the CFI. */
		unsigned w = 0;
		idx = 0;
		for (const struct ts_json *f = frames->child; f; f = f->next, idx++) {
			if (idx < first || ts_json_bool(f, "inlined") == 1)
				continue;
			if (w >= chain_len(ch))
				break;
			const char *module = ts_json_str(f, "module"), *mo = ts_json_str(f, "module_offset");
			const char *src = ts_json_str(f, "source");
			if (!module || !mo)
				fail_msg("%s: chain %s frame %u has no module", what, ch->name, idx);
			bool exact = ch->running && idx == 0 && state && strcmp(state, "running") == 0;
			uint64_t off = strtoull(mo, NULL, 16) - (exact ? 0 : 1);
			struct lstack a;
			addr2line_stack(module, off, &a);
			unsigned k = 0;
			for (; k < a.n && w < chain_len(ch); k++, w++) {
				char ws[256];
				want_str(&ch->w[w], ws, sizeof(ws));
				if (strcmp(a.f[k].fn, ch->w[w].fn) != 0 || a.f[k].inlined != ch->w[w].inlined ||
				    !at_mark(&ch->w[w], a.f[k].file, a.f[k].line)) {
					lstack_dump("addr2line -i", &a);
					fail_msg("%s: chain %s: addr2line -i at %s+0x%" PRIx64
						 " says %s at %s:%d, the source %s",
						 what, ch->name, module, off, a.f[k].fn, a.f[k].file,
						 a.f[k].line, ws);
				}
			}
			if (k != a.n) {
				lstack_dump("addr2line -i", &a);
				fail_msg("%s: chain %s: addr2line shows more frames than the chain", what,
					 ch->name);
			}
			if (v->nofp && (!src || strcmp(src, "dwarf") != 0))
				fail_msg("%s: chain %s frame %u (%s) found by '%s' in code without frame "
					 "pointers", what, ch->name, idx, ts_json_str(f, "function"),
					 src ? src : "?");
		}
		if (w != chain_len(ch))
			fail_msg("%s: chain %s: the JSON frames cover %u of its %u logical frames", what,
				 ch->name, w, chain_len(ch));
	}
	ts_json_free(doc);
}

/* ---- pprof (go tool pprof -raw) and folded ---- */

static void check_pprof(const char *what, const char *file, const struct ts_ltarget *t)
{
	struct ts_prof p;
	char why[512];
	memset(&p, 0, sizeof(p));
	if (ts_pprof_raw(file, &p, why, sizeof(why)) != 0)
		fail_msg("%s: %s", what, why);
	for (unsigned c = 0; c < NCHAINS; c++) {
		const struct ts_chain *tc = ts_ltarget_chain(t, chains[c].name);
		char id[32];
		const struct ts_sample *smp = NULL;
		snprintf(id, sizeof(id), "%" PRIu64, tc->ids[0]);
		for (int i = 0; i < p.ns; i++)
			if (ts_sample_has_label(&p.s[i], "bthread_id", id))
				smp = &p.s[i];
		if (!smp)
			fail_msg("%s: no sample with bthread_id %s (chain %s)", what, id, chains[c].name);
		struct lstack s;
		memset(&s, 0, sizeof(s));
		for (int i = 0; i < smp->nloc; i++) {
			const struct ts_loc *l = ts_prof_loc(&p, smp->loc[i]);
			assert_non_null(l);
			for (int k = 0; k < l->nfunc && s.n < MAX_LFRAMES; k++) {
				struct lframe *f = &s.f[s.n++];
				memset(f, 0, sizeof(*f));
				snprintf(f->fn, sizeof(f->fn), "%s", l->func[k]);
				snprintf(f->file, sizeof(f->file), "%s", l->pos[k]);
				char *colon = strrchr(f->file, ':');
				if (colon) {
					*colon = '\0';
					f->line = atoi(colon + 1);
				}
				f->inlined = k + 1 < l->nfunc;
			}
		}
		check_chain(what, &s, &chains[c], true);
	}
	ts_prof_free(&p);
}

/* Folded stacks: the chain's functions, outermost first, in one line. */
static void check_folded(const char *what, const char *text)
{
	for (unsigned c = 0; c < NCHAINS; c++) {
		char want[1024];
		size_t len = 0;
		for (unsigned i = chain_len(&chains[c]); i-- > 0;)
			len += (size_t)snprintf(want + len, sizeof(want) - len, ";%s", chains[c].w[i].fn);
		if (!strstr(text, want)) {
			fprintf(stderr, "%s:\n%s\n", what, text);
			fail_msg("%s: no stack with \"%s\" (chain %s)", what, want + 1, chains[c].name);
		}
	}
}

/* ---- producing the outputs ---- */

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	struct ts_buf b = {0};
	char buf[8192];
	size_t n;
	if (!f)
		fail_msg("%s: %s", path, strerror(errno));
	ts_buf_add(&b, "", 0);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		ts_buf_add(&b, buf, n);
	fclose(f);
	return b.p;
}

/* The target's report in format fmt into file path: stb_dump in it, or the
 * loader on it (text with --lines). */
static void report(struct ts_ltarget *t, const char *fmt, const char *path)
{
	if (!use_loader) {
		char cmd[PATH_MAX + 64], reply[512];
		snprintf(cmd, sizeof(cmd), "dump %s %s", fmt, path);
		if (ts_ltarget_cmd(t, cmd, reply, sizeof(reply)) != 0 || strncmp(reply, "dumped ", 7) != 0)
			fail_msg("%s: %s", cmd, reply);
		return;
	}
	char pid[16], *err = NULL;
	snprintf(pid, sizeof(pid), "%d", (int)t->pid);
	/* --timeout: the spinner is captured on its CPU, which others may hold. */
	char *argv[] = {loader, "--pid", pid, "--timeout", "5000", "--format", (char *)fmt, "-o",
			(char *)path, strcmp(fmt, "text") == 0 ? "--lines" : NULL, NULL};
	int rc = ts_run(argv, NULL, &err, 120);
	if (rc != 0)
		fail_msg("stb-bpf-loader --pid %s --format %s exited %d:\n%s", pid, fmt, rc,
			 err ? err : "");
	free(err);
}

static void test_variant(void **state)
{
	const struct variant *v = *state;
	static struct ts_ltarget t;
	char what[128], path[PATH_MAX], bye[64];
	const char *how = use_loader ? "stb-bpf-loader" : "stb_dump";

	if (access(v->path, X_OK) != 0)
		fail_msg("%s: %s (not built?)", v->path, strerror(errno));
	int rc = ts_ltarget_start(&t, v->path, NULL, NULL);
	if (rc != 0)
		fail_msg("cannot start %s: %s", v->path, strerror(-rc));
	live = &t;
	static const char *const fmts[] = {"text", "json", "pprof", "folded"};
	for (unsigned i = 0; i < 4; i++) {
		snprintf(path, sizeof(path), "%s/%s.%s", ts_tmpdir(), v->name, fmts[i]);
		snprintf(what, sizeof(what), "%s %s of %s", how, fmts[i], v->name);
		report(&t, fmts[i], path);
		if (i == 2) {
			check_pprof(what, path, &t);
			continue;
		}
		char *text = slurp(path);
		if (i == 0)
			check_text(what, text, &t);
		else if (i == 1)
			check_json(what, text, &t, v);
		else
			check_folded(what, text);
		free(text);
	}
	live = NULL;
	assert_int_equal(ts_ltarget_quit(&t, bye, sizeof(bye)), 0);
	assert_string_equal(bye, "bye");
}

static int teardown(void **state)
{
	(void)state;
	if (live)
		ts_ltarget_kill(live);
	live = NULL;
	return 0;
}

int main(int argc, char **argv)
{
	const char *list = getenv("STB_CC_VARIANTS"), *missing = getenv("STB_CC_MISSING");
	const char *src = getenv("STB_CC_SOURCES");
	static struct CMUnitTest tests[MAX_VARIANTS];

	use_loader = argc > 1 && strcmp(argv[1], "--loader") == 0;
	if (missing && missing[strspn(missing, " ")]) {
		fprintf(stderr, "test_cc_targets: the build found no %s: the compiler-variant targets "
				"were not built (install it and configure again)\n", missing);
		return 1;
	}
	if (!list || !src) {
		fprintf(stderr, "test_cc_targets: STB_CC_VARIANTS and STB_CC_SOURCES are not set "
				"(run it with ctest)\n");
		return 1;
	}
	snprintf(addr2line, sizeof(addr2line), "%s", ts_env("STB_ADDR2LINE", "addr2line"));
	if (!addr2line[0])
		snprintf(addr2line, sizeof(addr2line), "addr2line");
	marks_load(src);
	char *copy = strdup(list), *save = NULL;
	assert_non_null(copy);
	for (char *tok = strtok_r(copy, ":", &save); tok && nvariants < MAX_VARIANTS;
	     tok = strtok_r(NULL, ":", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq)
			continue;
		/* "name=path" or "name=path=nofp" */
		struct variant *v = &variants[nvariants];
		char *eq2 = strchr(eq + 1, '=');
		snprintf(v->name, sizeof(v->name), "%.*s", (int)(eq - tok), tok);
		snprintf(v->path, sizeof(v->path), "%.*s", (int)(eq2 ? eq2 - eq - 1 : (long)strlen(eq + 1)),
			 eq + 1);
		v->nofp = eq2 && strcmp(eq2 + 1, "nofp") == 0;
		tests[nvariants] = (struct CMUnitTest){
		    .name = variants[nvariants].name, .test_func = test_variant, .teardown_func = teardown,
		    .initial_state = &variants[nvariants]};
		nvariants++;
	}
	if (nvariants == 0) {
		fprintf(stderr, "test_cc_targets: no variant in STB_CC_VARIANTS\n");
		return 1;
	}
	if (use_loader) {
		int rc = ts_require_privilege("test_cc_targets --loader");
		if (rc != 0)
			return rc;
		ts_path(loader, sizeof(loader), "STB_LOADER", "../loader/stb-bpf-loader");
	}
	signal(SIGPIPE, SIG_IGN);
	ts_tmpdir();
	int rc = _cmocka_run_group_tests(use_loader ? "test_cc_targets --loader" : "test_cc_targets",
					 tests, nvariants, NULL, NULL);
	free(copy);
	return rc;
}
