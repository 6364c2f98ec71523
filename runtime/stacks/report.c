/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Text, grouped and JSON reports of traced tasks (see report.h). The same
 * code prints stb_dump's output and stb-bpf-loader's, so both look alike.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "stb/abi.h"
#include "symbolize.h"

static const char *const stb_state_names[STB_TASK_NSTATES] = {
	"unused", "created", "ready-without-stack", "ready", "about-to-run",
	"running", "suspending", "suspended", "destroyed",
};

const char *stb_state_name(unsigned state)
{
	return state < STB_TASK_NSTATES ? stb_state_names[state] : "invalid";
}

size_t stb_format_frame(char *buf, size_t size, unsigned idx, const struct stb_frame *f)
{
	/* Frames found by following frame pointers (beyond a stack copy) say so. */
	const char *how = (f->flags & STB_FRAME_F_FP) ? " [fp]" : "";
	if (f->symbol)
		return (size_t)snprintf(buf, size, "#%u 0x%016" PRIx64 " %s+0x%" PRIx64 "%s\n", idx,
					f->ip, f->symbol, f->offset, how);
	if (f->module) {
		const char *base = strrchr(f->module, '/');
		return (size_t)snprintf(buf, size, "#%u 0x%016" PRIx64 " ?? (%s+0x%" PRIx64 ")%s\n",
					idx, f->ip, base ? base + 1 : f->module, f->module_offset,
					how);
	}
	return (size_t)snprintf(buf, size, "#%u 0x%016" PRIx64 " ??%s\n", idx, f->ip, how);
}

static bool stb_report_first_exact(const struct stb_report_task *t)
{
	return t->mode == STB_TRACE_SIGNAL || t->mode == STB_TRACE_BPF ||
	       t->mode == STB_TRACE_SYSCALL;
}

void stb_report_symbolize(const struct stb_report *r, struct stb_report_task *t, bool with_source)
{
	if (!r->sym)
		return;
	bool exact = stb_report_first_exact(t);
	for (unsigned i = 0; i < t->nframes; i++) {
		struct stb_frame *f = &t->frames[i];
		if (!f->symbol && !f->module)
			r->sym(r->sym_ctx, f,
			       (i > 0 || !exact ? STB_SYM_RETURN : 0) |
				       (with_source ? 0 : STB_SYM_NO_SOURCE));
	}
}

static void stb_report_header(const struct stb_report *r, const struct stb_report_task *t)
{
	FILE *out = r->out;
	fprintf(out, "%s %" PRIu64, t->is_pthread ? "pthread" : "bthread", t->id);
	if (t->name[0])
		fprintf(out, " \"%s\"", t->name);
	fprintf(out, " [%s", stb_state_name(t->state));
	if (t->state == STB_TASK_SUSPENDED && t->since_ns && r->now_ns > t->since_ns)
		fprintf(out, ", %.3f s", (double)(r->now_ns - t->since_ns) / 1e9);
	if (t->tid && t->state == STB_TASK_RUNNING)
		fprintf(out, ", tid %u", t->tid);
	fprintf(out, "]\n");
}

static void stb_report_frames(const struct stb_report *r, struct stb_report_task *t)
{
	FILE *out = r->out;
	if (t->err < 0) {
		fprintf(out, "(trace failed: %s)\n", t->error[0] ? t->error : strerror(-t->err));
		return;
	}
	if (t->nframes == 0) {
		fprintf(out, "(no stack: %s)\n", stb_state_name(t->state));
		return;
	}
	stb_report_symbolize(r, t, false); /* text shows no file:line */
	char line[768];
	for (unsigned i = 0; i < t->nframes; i++) {
		stb_format_frame(line, sizeof(line), i, &t->frames[i]);
		fputs(line, out);
	}
	if (t->truncated)
		fprintf(out, "(more frames not shown)\n");
}

static uint64_t stb_report_hash(const struct stb_report_task *t)
{
	uint64_t h = 1469598103934665603ull ^ t->state ^ ((uint64_t)(t->err < 0) << 8);
	for (unsigned i = 0; i < t->nframes; i++) {
		h ^= t->frames[i].ip;
		h *= 1099511628211ull;
	}
	return h;
}

static bool stb_report_same(const struct stb_report_task *a, const struct stb_report_task *b)
{
	if (a->hash != b->hash || a->state != b->state || a->nframes != b->nframes ||
	    (a->err < 0) != (b->err < 0))
		return false;
	for (unsigned i = 0; i < a->nframes; i++)
		if (a->frames[i].ip != b->frames[i].ip)
			return false;
	return true;
}

static int stb_report_cmp(const void *x, const void *y)
{
	const struct stb_report_task *a = *(struct stb_report_task *const *)x;
	const struct stb_report_task *b = *(struct stb_report_task *const *)y;
	if (a->group_count != b->group_count)
		return a->group_count > b->group_count ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

struct stb_report_task **stb_report_group(struct stb_report_task *tasks, size_t n,
					  size_t *ngroups)
{
	size_t cap = 16;
	while (cap < n * 2)
		cap <<= 1;
	struct stb_report_task **tab = calloc(cap, sizeof(*tab));
	struct stb_report_task **leaders = calloc(n ? n : 1, sizeof(*leaders));
	size_t ng = 0;
	if (!tab || !leaders) {
		free(leaders);
		leaders = NULL;
		errno = ENOMEM;
		goto cleanup;
	}
	for (size_t i = 0; i < n; i++) {
		struct stb_report_task *t = &tasks[i];
		t->hash = stb_report_hash(t);
		t->group_next = NULL;
		t->group_tail = t;
		t->group_count = 1;
		size_t k = t->hash & (cap - 1);
		while (tab[k] && !stb_report_same(tab[k], t))
			k = (k + 1) & (cap - 1);
		if (tab[k]) {
			struct stb_report_task *lead = tab[k];
			lead->group_tail->group_next = t;
			lead->group_tail = t;
			lead->group_count++;
		} else {
			tab[k] = t;
			leaders[ng++] = t;
		}
	}
	qsort(leaders, ng, sizeof(*leaders), stb_report_cmp);
	*ngroups = ng;
cleanup:
	free(tab);
	return leaders;
}

int stb_report_text(const struct stb_report *r, struct stb_report_task *tasks, size_t n)
{
	if (!r->group) {
		for (size_t i = 0; i < n; i++) {
			stb_report_header(r, &tasks[i]);
			stb_report_frames(r, &tasks[i]);
			fputc('\n', r->out);
		}
		return 0;
	}
	size_t ng;
	struct stb_report_task **leaders = stb_report_group(tasks, n, &ng);
	if (!leaders)
		return -ENOMEM;
	for (size_t g = 0; g < ng; g++) {
		struct stb_report_task *t = leaders[g];
		fprintf(r->out, "%u %s [%s]:", t->group_count, t->group_count == 1 ? "task" : "tasks",
			stb_state_name(t->state));
		for (struct stb_report_task *m = t; m; m = m->group_next)
			fprintf(r->out, " %" PRIu64, m->id);
		fputc('\n', r->out);
		stb_report_frames(r, t);
		fputc('\n', r->out);
	}
	free(leaders);
	return 0;
}

/* ---- JSON ---- */

void stb_report_json_str(FILE *out, const char *s)
{
	fputc('"', out);
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c < 0x20)
			fprintf(out, "\\u%04x", c);
		else
			fputc(c, out);
	}
	fputc('"', out);
}

static const char *const stb_mode_names[] = {"none", "context", "signal", "self", "bpf", "syscall"};

static void stb_json_frames(const struct stb_report *r, struct stb_report_task *t)
{
	FILE *out = r->out;
	stb_report_symbolize(r, t, true);
	fprintf(out, "\"frames\": [");
	for (unsigned i = 0; i < t->nframes; i++) {
		const struct stb_frame *f = &t->frames[i];
		fprintf(out, "%s\n      {\"ip\": \"0x%" PRIx64 "\"", i ? "," : "", f->ip);
		if (f->symbol) {
			fprintf(out, ", \"function\": ");
			stb_report_json_str(out, f->symbol);
			fprintf(out, ", \"offset\": %" PRIu64, f->offset);
		}
		if (f->module) {
			fprintf(out, ", \"module\": ");
			stb_report_json_str(out, f->module);
			fprintf(out, ", \"module_offset\": \"0x%" PRIx64 "\"", f->module_offset);
		}
		if (f->build_id) {
			fprintf(out, ", \"build_id\": ");
			stb_report_json_str(out, f->build_id);
		}
		if (f->file) {
			fprintf(out, ", \"file\": ");
			stb_report_json_str(out, f->file);
			fprintf(out, ", \"line\": %d", f->line);
		}
		fprintf(out, ", \"inlined\": %s, \"source\": \"%s\"}",
			(f->flags & STB_FRAME_F_INLINED) ? "true" : "false",
			(f->flags & STB_FRAME_F_FP) ? "fp" : "dwarf");
	}
	fprintf(out, "%s]", t->nframes ? "\n    " : "");
}

/* The members of a task object up to (not including) "truncated". */
static void stb_json_task_head(const struct stb_report *r, const struct stb_report_task *t)
{
	FILE *out = r->out;
	fprintf(out, "    {\"id\": %" PRIu64 ", \"kind\": \"%s\", \"name\": ", t->id,
		t->is_pthread ? "pthread" : "bthread");
	stb_report_json_str(out, t->name);
	fprintf(out, ", \"state\": \"%s\", \"capture\": \"%s\"", stb_state_name(t->state),
		t->mode < sizeof(stb_mode_names) / sizeof(stb_mode_names[0]) ? stb_mode_names[t->mode]
									   : "none");
	if (t->tid)
		fprintf(out, ", \"tid\": %u", t->tid);
	if (t->state == STB_TASK_SUSPENDED && t->since_ns && r->now_ns > t->since_ns)
		fprintf(out, ", \"blocked_s\": %.3f", (double)(r->now_ns - t->since_ns) / 1e9);
	if (t->err < 0) {
		fprintf(out, ", \"error\": ");
		stb_report_json_str(out, t->error[0] ? t->error : strerror(-t->err));
	}
}

static void stb_json_task(const struct stb_report *r, struct stb_report_task *t)
{
	FILE *out = r->out;
	stb_json_task_head(r, t);
	fprintf(out, ", \"truncated\": %s,\n    ", t->truncated ? "true" : "false");
	stb_json_frames(r, t);
	fprintf(out, "}");
}

int stb_report_json(const struct stb_report *r, struct stb_report_task *tasks, size_t n,
		    const char *extra)
{
	FILE *out = r->out;
	fprintf(out, "{\n  \"schema\": \"stb-stacks/1\"%s,\n  \"tasks\": [\n", extra ? extra : "");
	for (size_t i = 0; i < n; i++) {
		stb_json_task(r, &tasks[i]);
		fprintf(out, "%s\n", i + 1 < n ? "," : "");
	}
	fprintf(out, "  ]");
	if (r->group) {
		size_t ng;
		struct stb_report_task **leaders = stb_report_group(tasks, n, &ng);
		if (!leaders)
			return -ENOMEM;
		fprintf(out, ",\n  \"groups\": [\n");
		for (size_t g = 0; g < ng; g++) {
			struct stb_report_task *t = leaders[g];
			fprintf(out, "    {\"count\": %u, \"state\": \"%s\", \"ids\": [", t->group_count,
				stb_state_name(t->state));
			for (struct stb_report_task *m = t; m; m = m->group_next)
				fprintf(out, "%" PRIu64 "%s", m->id, m->group_next ? ", " : "");
			fprintf(out, "],\n    ");
			stb_json_frames(r, t);
			fprintf(out, "}%s\n", g + 1 < ng ? "," : "");
		}
		fprintf(out, "  ]");
		free(leaders);
	}
	fprintf(out, "\n}\n");
	return 0;
}

/* ---- task lists (no stacks) ---- */

int stb_report_list(const struct stb_report *r, const struct stb_report_task *tasks, size_t n,
		    bool json, const char *extra)
{
	FILE *out = r->out;
	if (!json) {
		for (size_t i = 0; i < n; i++)
			stb_report_header(r, &tasks[i]);
		return 0;
	}
	fprintf(out, "{\n  \"schema\": \"stb-tasks/1\"%s,\n  \"tasks\": [\n", extra ? extra : "");
	for (size_t i = 0; i < n; i++) {
		stb_json_task_head(r, &tasks[i]);
		fprintf(out, "}%s\n", i + 1 < n ? "," : "");
	}
	fprintf(out, "  ]\n}\n");
	return 0;
}
