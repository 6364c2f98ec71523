/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A report's tasks as a profile (writers.h): each task, or each group of
 * identical stacks, one sample of the profile builder (pprof.h), written as
 * pprof, folded stacks or a flame graph (flamegraph.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "report/pprof.h"
#include "report/why.h"
#include "report/writers.h"
#include "table/syscall.h"

/* The stack of task t. */
static int64_t pp_task_stack(struct stb_pprof *p, const struct stb_report_task *t)
{
	uint64_t buf[256];
	char sig[192];
	uint64_t *ips = t->nframes <= 256 ? buf : malloc(t->nframes * sizeof(*ips));
	if (!ips)
		return -ENOMEM;
	unsigned n = 0;
	for (unsigned i = 0; t->err >= 0 && i < t->nframes; i++)
		if (!(t->frames[i].flags & STB_FRAME_F_INLINED))
			ips[n++] = t->frames[i].ip; /* inline frames are found again */
	struct stb_pprof_stack s = {
		.ips = ips, .n = n,
		.first_exact = stb_report_task_exact(t),
		.leaf = t->err < 0 ? STB_PPROF_NOTE_FAILED : n == 0 ? STB_PPROF_NOTE_NO_STACK : NULL,
		.root = t->err >= 0 && t->truncated ? STB_PPROF_NOTE_TRUNCATED : NULL,
	};
	const struct stb_report_signal *signal = stb_report_more(t)->signal;
	if (signal && !s.leaf) {
		/* A core's fatal signal: where it was taken, the leaf. */
		char what[160];
		stb_report_signal_text(signal, what, sizeof(what));
		snprintf(sig, sizeof(sig), "[killed by %s]", what);
		s.leaf = sig;
	}
	int64_t rc = stb_pprof_stack(p, &s);
	if (ips != buf)
		free(ips);
	return rc;
}

/* The state label: a running task blocked in a system call has its own,
 * "syscall", and the threads of the process "thread" (folded stacks and
 * flame graphs start with it). */
static const char *pp_state(const struct stb_report_task *t)
{
	return t->is_thread ? "thread" : t->in_syscall ? "syscall" : stb_state_name(t->state);
}

static int pp_add_task(struct stb_pprof *p, const struct stb_report *r,
			   const struct stb_report_task *t)
{
	char id[24], wbuf[3][32], call[64], addr[24];
	const char *wkeys[3], *wvals[3];
	struct stb_pprof_label l[14];
	unsigned n = 0;
	int64_t one = 1;
	const struct stb_report_more *more = stb_report_more(t);
	if (t->is_thread && more->task)
		return 0; /* its stack is its task's sample */
	int64_t st = pp_task_stack(p, t);
	if (st < 0)
		return (int)st;
	snprintf(id, sizeof(id), "%" PRIu64, t->id);
	if (!t->is_thread)
		l[n++] = (struct stb_pprof_label){.key = "bthread_id", .str = id};
	l[n++] = (struct stb_pprof_label){.key = "state", .str = pp_state(t)};
	if (t->in_syscall) {
		stb_syscall_format(call, sizeof(call), more->syscall_nr, more->syscall_arg0);
		l[n++] = (struct stb_pprof_label){.key = "syscall", .str = call};
	}
	if (t->tid)
		l[n++] = (struct stb_pprof_label){.key = t->is_thread ? "tid" : "worker_tid",
						  .num = t->tid};
	if (stb_report_task_name(t)[0])
		l[n++] = (struct stb_pprof_label){.key = "name", .str = t->name};
	if (t->is_pthread || t->is_thread)
		l[n++] = (struct stb_pprof_label){.key = "kind",
						  .str = t->is_thread ? "thread" : "pthread"};
	if (more->signal) {
		const char *sn = stb_report_signal_name(more->signal->signo);
		l[n++] = (struct stb_pprof_label){.key = "signal", .str = sn ? sn : "unknown"};
		if (more->signal->has_addr) {
			snprintf(addr, sizeof(addr), "0x%" PRIx64, more->signal->addr);
			l[n++] = (struct stb_pprof_label){.key = "fault_addr", .str = addr};
		}
	}
	if (t->state == STB_TASK_SUSPENDED && t->since_ns && r->now_ns > t->since_ns)
		l[n++] = (struct stb_pprof_label){.key = "blocked",
						  .num = (int64_t)(r->now_ns - t->since_ns),
						  .unit = "nanoseconds"};
	if (t->err < 0)
		l[n++] = (struct stb_pprof_label){.key = "error",
						  .str = stb_report_task_error(t)};
	unsigned nw = stb_why_labels(t, wkeys, wvals, wbuf);
	for (unsigned i = 0; i < nw; i++)
		l[n++] = (struct stb_pprof_label){.key = wkeys[i], .str = wvals[i]};
	int64_t rc = stb_pprof_sample(p, (uint32_t)st, l, n, &one);
	return rc < 0 ? (int)rc : 0;
}

static int pp_add_group(struct stb_pprof *p, const struct stb_report_task *lead)
{
	if (lead->is_thread && stb_report_more(lead)->task)
		return 0; /* its stack is its task's sample */
	int64_t st = pp_task_stack(p, lead);
	if (st < 0)
		return (int)st;
	size_t n = 2 + lead->group_count;
	struct stb_pprof_label *l = calloc(n, sizeof(*l));
	char (*ids)[24] = calloc(lead->group_count, sizeof(*ids));
	int rc = -ENOMEM;
	if (!l || !ids)
		goto cleanup;
	l[0] = (struct stb_pprof_label){.key = "state", .str = pp_state(lead)};
	size_t k = 1;
	if (lead->wait.kind != STB_WAIT_NONE) /* a group has one wait kind */
		l[k++] = (struct stb_pprof_label){.key = "wait_kind",
						  .str = stb_wait_kind_name(lead->wait.kind)};
	size_t first = k;
	for (const struct stb_report_task *m = lead; m && k < n; m = m->group_next, k++) {
		if (m->is_thread) {
			l[k] = (struct stb_pprof_label){.key = "tid", .num = m->tid};
			continue;
		}
		snprintf(ids[k - first], sizeof(ids[k - first]), "%" PRIu64, m->id);
		l[k] = (struct stb_pprof_label){.key = "bthread_id", .str = ids[k - first]};
	}
	int64_t count = lead->group_count;
	int64_t s = stb_pprof_sample(p, (uint32_t)st, l, (unsigned)k, &count);
	rc = s < 0 ? (int)s : 0;
cleanup:
	free(l);
	free(ids);
	return rc;
}

static int pp_comment(void *arg, const char *line)
{
	return stb_pprof_comment(arg, line);
}

/* The tasks the report could not trace, beyond the table's capacity: one
 * sample of their count, so that no format leaves them out silently. */
static int pp_add_beyond(struct stb_pprof *p, uint64_t n)
{
	struct stb_pprof_stack s = {.leaf = STB_PPROF_NOTE_UNTRACEABLE};
	int64_t st = stb_pprof_stack(p, &s);
	if (st < 0)
		return (int)st;
	struct stb_pprof_label l = {.key = "state", .str = "untraceable"};
	int64_t count = n > INT64_MAX ? INT64_MAX : (int64_t)n;
	int64_t rc = stb_pprof_sample(p, (uint32_t)st, &l, 1, &count);
	return rc < 0 ? (int)rc : 0;
}

int stb_report_pprof(const struct stb_report *r, struct stb_report_task *tasks, size_t n,
		     const struct stb_format_info *f)
{
	if (!r || !r->out || (n && !tasks) || !f || !f->write_profile)
		return -EINVAL;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	/* The time of the tasks when the producer knows it, else of the writing. */
	int64_t t = r->meta && r->meta->time_ns && r->meta->time_ns <= INT64_MAX
			    ? (int64_t)r->meta->time_ns
			    : (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	struct stb_pprof_opts o = {
		.nvalues = 1, .types = {{"bthreads", "count"}}, .default_type = 0,
		.time_ns = t, .sym = r->sym,
		.unw = r->unw, .sym_deadline = r->sym_deadline, .hide_runtime = !r->runtime_frames,
	};
	struct stb_report_task **leaders = NULL;
	struct stb_pprof *p = stb_pprof_new(&o);
	int rc = -ENOMEM;
	if (!p)
		goto cleanup;
	if ((rc = stb_report_meta_lines(r->meta, pp_comment, p)) != 0)
		goto cleanup;
	if (r->group && f->format == STB_FORMAT_PPROF) {
		size_t ng;
		leaders = stb_report_group(tasks, n, &ng);
		if (!leaders) {
			rc = -ENOMEM;
			goto cleanup;
		}
		for (size_t g = 0; g < ng; g++) {
			/* What took a core's fatal signal stands alone, with its labels. */
			bool alone = stb_report_more(leaders[g])->signal || leaders[g]->is_thread;
			if ((rc = alone ? pp_add_task(p, r, leaders[g]) : pp_add_group(p, leaders[g])) != 0)
				goto cleanup;
		}
	} else {
		for (size_t i = 0; i < n; i++)
			if ((rc = pp_add_task(p, r, &tasks[i])) != 0)
				goto cleanup;
	}
	if (r->meta && r->meta->beyond_capacity &&
	    (rc = pp_add_beyond(p, r->meta->beyond_capacity)) != 0)
		goto cleanup;
	/* The comments of pprof hold the metadata already (meta_lines). */
	const struct stb_profile_out po = {
	    .root_key = "state", .title = "bthreads by stack", .unit = "bthreads", .meta = r->meta,
	};
	rc = f->write_profile(p, r->out, &po);
cleanup:
	free(leaders);
	stb_pprof_free(p);
	return rc;
}
