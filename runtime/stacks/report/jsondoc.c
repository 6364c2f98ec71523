/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The JSON documents of a report (docs/json.md): "stb-stacks/1", every task
 * with its stack or, grouped, every distinct stack once with its tasks, and
 * "stb-tasks/1", the task list without stacks. A stack that tasks share is
 * written once and spliced for each.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "encode/json.h"
#include "report/leaks.h"
#include "report/model.h"
#include "report/why.h"
#include "report/writers.h"
#include "symbols/symbolize.h"

static const char *const mode_names[] = {"none", "context", "signal", "self", "bpf", "syscall",
					 "core"};


/* The members of a frame (one object); an inline frame has no offset. */
static void json_frame(struct stb_json *j, const struct stb_frame *f, const char *function,
		       const char *file, int line, bool inlined)
{
	stb_json_object(j);
	stb_json_kv_hex(j, "ip", f->ip);
	if (function) {
		stb_json_kv_string(j, "function", function);
		if (!inlined)
			stb_json_kv_u64(j, "offset", f->offset);
	}
	if (f->module) {
		stb_json_kv_string(j, "module", f->module);
		stb_json_kv_hex(j, "module_offset", f->module_offset);
	}
	if (f->build_id)
		stb_json_kv_string(j, "build_id", f->build_id);
	if (file) {
		stb_json_kv_string(j, "file", file);
		stb_json_kv_i64(j, "line", line);
	}
	if (f->flags & STB_FRAME_F_MISMATCH)
		stb_json_kv_bool(j, "module_mismatch", true);
	stb_json_kv_bool(j, "inlined", inlined);
	stb_json_kv_string(j, "source", (f->flags & STB_FRAME_F_FP) ? "fp" : "dwarf");
	stb_json_end(j);
}

/* Every logical frame: the calls inlined at an address (inlined: true),
 * then the function they were inlined into. */
static void json_frames(const struct stb_report *r, struct stb_json *j, struct stb_report_task *t)
{
	stb_report_symbolize(r, t, true);
	stb_json_array(j);
	for (unsigned i = 0; i < t->nframes; i++) {
		const struct stb_frame *f = &t->frames[i];
		struct stb_sym_info si;
		unsigned ninl = stb_report_frame_inlines(r, t, i, &si);
		for (unsigned k = 0; k < ninl; k++)
			json_frame(j, f, si.inlines[k].function, si.inlines[k].file,
				   si.inlines[k].line, true);
		json_frame(j, f, f->symbol, f->file, f->line,
			   (f->flags & STB_FRAME_F_INLINED) != 0);
	}
	stb_json_end(j);
}

/* The frames of a stack that tasks share, written once by the same writer
 * (kept in the stackset, within its budget) and spliced for each. false:
 * not kept; write them. */
static bool json_frames_shared(const struct stb_report *r, struct stb_json *j,
			       struct stb_report_task *t)
{
	struct stb_stackset_entry *k = t->stack;
	if (!k || !r->stacks || k->refs < 2 || !k->viewed || t->frames != k->frames + k->first)
		return false;
	if (k->json && k->json_depth != j->depth)
		return false;
	if (!k->json) {
		char *text = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&text, &len);
		if (!f)
			return false;
		struct stb_json v;
		stb_json_init_value(&v, f, j);
		json_frames(r, &v, t);
		int rc = stb_json_value_finish(&v);
		if (fclose(f) != 0 || rc != 0 || !stb_stackset_json_room(r->stacks, len)) {
			free(text);
			return false;
		}
		k->json = text;
		k->json_len = len;
		k->json_depth = j->depth;
	}
	stb_json_splice(j, k->json, k->json_len);
	return true;
}

/* The members of a task object up to (not including) "truncated". */
static void json_task_head(const struct stb_why *w, struct stb_json *j,
			   struct stb_report_task *t)
{
	stb_json_kv_u64(j, "id", t->id);
	stb_json_kv_string(j, "kind", t->is_pthread ? "pthread" : "bthread");
	stb_json_kv_string(j, "name", stb_report_task_name(t));
	stb_json_kv_string(j, "state", stb_state_name(t->state));
	stb_json_kv_string(j, "capture", t->mode < sizeof(mode_names) / sizeof(mode_names[0])
						 ? mode_names[t->mode] : "none");
	if (t->tid)
		stb_json_kv_u64(j, "tid", t->tid);
	const struct stb_report_signal *signal = stb_report_more(t)->signal;
	if (signal) {
		stb_json_key(j, "signal");
		stb_report_signal_json(j, signal, false);
	}
	stb_why_json_task(w, j, t);
	if (t->err < 0)
		stb_json_kv_string(j, "error", stb_report_task_error(t));
}

/* The members describing the stack shown: of a task, or once for a group
 * (its first member's, as the text shows). */
static void json_stack(const struct stb_report *r, struct stb_json *j, struct stb_report_task *t)
{
	if (t->hidden)
		stb_json_kv_u64(j, "runtime_frames_hidden", t->hidden);
	if (t->not_shown)
		stb_json_kv_u64(j, "frames_not_shown", t->not_shown);
	stb_json_kv_bool(j, "truncated", t->truncated != 0);
	const char *why = t->truncated ? stb_report_trunc_name(t->truncated_why) : NULL;
	if (why)
		stb_json_kv_string(j, "truncated_why", why);
	stb_json_key(j, "frames");
	if (!json_frames_shared(r, j, t))
		json_frames(r, j, t);
}

/* A thread of the process that is no task (model.h: is_thread), with its
 * stack: an object of "threads" -- a worker names the bthread it runs, a
 * registered pthread's thread its task (whose stack is in "tasks"). */
static void json_thread(const struct stb_report *r, const struct stb_why *w, struct stb_json *j,
			struct stb_report_task *t)
{
	stb_json_object(j);
	stb_json_kv_u64(j, "tid", t->tid);
	stb_json_kv_string(j, "name", stb_report_task_name(t));
	stb_json_kv_string(j, "state", stb_state_name(t->state));
	stb_json_kv_string(j, "capture", t->mode < sizeof(mode_names) / sizeof(mode_names[0])
						 ? mode_names[t->mode] : "none");
	const struct stb_report_more *m = stb_report_more(t);
	if (m->task)
		stb_json_kv_u64(j, t->on_worker ? "bthread" : "pthread", m->task);
	if (m->signal) {
		stb_json_key(j, "signal");
		stb_report_signal_json(j, m->signal, false);
	}
	stb_why_json_task(w, j, t); /* worker, syscall */
	if (t->starting)
		stb_json_kv_bool(j, "starting", true);
	if (t->err < 0)
		stb_json_kv_string(j, "error", stb_report_task_error(t));
	json_stack(r, j, t);
	stb_json_end(j);
}

/* A document of schema: its metadata, then the array "tasks" opened. */
static void doc_begin(struct stb_json *j, const struct stb_report *r, const char *schema)
{
	stb_json_init(j, r->out);
	stb_json_object(j);
	stb_json_kv_string(j, "schema", schema);
	stb_report_meta_json(j, r->meta);
	stb_json_key(j, "tasks");
	stb_json_array(j);
}

/* Grouped, a task carries no frames but the index of its group, and the
 * group its members' ids and the stack, once. */
int stb_report_json(const struct stb_report *r, struct stb_report_task *tasks, size_t n,
		    const struct stb_format_info *f)
{
	(void)f;
	struct stb_json j;
	struct stb_why w;
	size_t ng = 0;
	struct stb_report_task **leaders = NULL;
	uint32_t *group_of = NULL;
	if (r->group) {
		leaders = stb_report_group(tasks, n, &ng);
		group_of = malloc((n ? n : 1) * sizeof(*group_of));
		if (!leaders || !group_of) {
			free(leaders);
			free(group_of);
			return -ENOMEM;
		}
		/* A thread that is no task is not grouped: "threads" has its stack. */
		size_t k = 0;
		for (size_t g = 0; g < ng; g++)
			if (!leaders[g]->is_thread)
				leaders[k++] = leaders[g];
		ng = k;
		for (size_t g = 0; g < ng; g++)
			for (struct stb_report_task *m = leaders[g]; m; m = m->group_next)
				group_of[m - tasks] = (uint32_t)g;
	}
	stb_why_init(&w, r, tasks, n);
	doc_begin(&j, r, "stb-stacks/1");
	size_t nthreads = 0;
	for (size_t i = 0; i < n; i++) {
		if (tasks[i].is_thread) {
			nthreads++;
			continue;
		}
		stb_json_object(&j);
		json_task_head(&w, &j, &tasks[i]);
		if (r->group)
			stb_json_kv_u64(&j, "group", group_of[i]);
		else
			json_stack(r, &j, &tasks[i]);
		stb_json_end(&j);
	}
	stb_json_end(&j);
	if (r->group) {
		stb_json_key(&j, "groups");
		stb_json_array(&j);
		for (size_t g = 0; g < ng; g++) {
			struct stb_report_task *t = leaders[g];
			stb_json_object(&j);
			if (t->added)
				stb_json_kv_bool(&j, "selected", false);
			stb_json_kv_u64(&j, "count", t->group_count);
			stb_json_kv_string(&j, "state", stb_state_name(t->state));
			const struct stb_report_signal *signal = stb_report_more(t)->signal;
			if (signal) {
				stb_json_key(&j, "signal");
				stb_report_signal_json(&j, signal, false);
			}
			stb_why_json_group(&w, &j, t);
			stb_json_key(&j, "ids");
			stb_json_array(&j);
			for (struct stb_report_task *m = t; m; m = m->group_next)
				stb_json_u64(&j, m->id);
			stb_json_end(&j);
			json_stack(r, &j, t);
			stb_json_end(&j);
		}
		stb_json_end(&j);
	}
	if (nthreads) {
		stb_json_key(&j, "threads");
		stb_json_array(&j);
		for (size_t i = 0; i < n; i++)
			if (tasks[i].is_thread)
				json_thread(r, &w, &j, &tasks[i]);
		stb_json_end(&j);
	}
	stb_why_json_deadlocks(&w, &j);
	stb_json_end(&j);
	stb_why_fini(&w);
	free(leaders);
	free(group_of);
	return stb_json_finish(&j);
}


int stb_report_json_list(const struct stb_report *r, struct stb_report_task *tasks, size_t n)
{
	struct stb_why w;
	stb_why_init(&w, r, tasks, n);
	struct stb_json j;
	doc_begin(&j, r, "stb-tasks/1");
	for (size_t i = 0; i < n; i++) {
		if (tasks[i].is_thread)
			continue;
		stb_json_object(&j);
		json_task_head(&w, &j, &tasks[i]);
		stb_json_end(&j);
	}
	stb_json_end(&j);
	stb_json_end(&j);
	stb_why_fini(&w);
	return stb_json_finish(&j);
}


int stb_report_json_leaks(const struct stb_report *r, const struct stb_leaks *l)
{
	struct stb_why w;
	stb_why_init(&w, r, NULL, 0);
	struct stb_json j;
	stb_json_init(&j, r->out);
	stb_json_object(&j);
	stb_json_kv_string(&j, "schema", "stb-leaks/1");
	stb_report_meta_json(&j, r->meta);
	stb_json_kv_u64(&j, "bthreads", l->bthreads);
	if (l->has_prev) {
		stb_json_key(&j, "growth_s");
		stb_json_fixed3(&j, (double)(l->now_ns > l->prev_ns ? l->now_ns - l->prev_ns : 0) / 1e9);
	}
	stb_json_key(&j, "sites");
	stb_json_array(&j);
	for (size_t i = 0; i < l->n; i++) {
		const struct stb_leak_site *s = &l->sites[i];
		stb_json_object(&j);
		if (s->ip)
			stb_why_json_site(&w, &j, s->ip);
		stb_json_kv_u64(&j, "count", s->count);
		stb_json_key(&j, "states");
		stb_json_object(&j);
		for (unsigned st = 0; st < STB_TASK_NSTATES; st++)
			if (s->by_state[st])
				stb_json_kv_u64(&j, stb_state_name(st), s->by_state[st]);
		stb_json_end(&j);
		if (s->aged) {
			stb_json_kv_u64(&j, "aged", s->aged);
			stb_json_key(&j, "oldest_s");
			stb_json_fixed3(&j, (double)s->oldest_ns / 1e9);
			stb_json_key(&j, "median_s");
			stb_json_fixed3(&j, (double)s->median_ns / 1e9);
		}
		if (l->has_prev)
			stb_json_kv_i64(&j, "growth", s->growth);
		stb_json_end(&j);
	}
	stb_json_end(&j);
	stb_json_end(&j);
	stb_why_fini(&w);
	return stb_json_finish(&j);
}
