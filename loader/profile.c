/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader --profile (profile.h): the sampling loop. Every tick (1/freq
 * s) it drains the BPF ring buffer of on-CPU samples (DWARF-unwound from the
 * record's stack copy, tagged with the worker's current bthread) and makes an
 * off-CPU pass over every suspended/ready bthread, re-unwinding only tasks
 * whose run sequence changed since the pass that last saw them. Lost samples are
 * counted and written into the profile. Design: docs/profiling.md.
 */
#include "collect/collect.h"
#include "loader.h"
#include "profile.h"
#include "record_unwind.h"
#include "symbols/frames.h"
#include "table/driver.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bpf_prog.h"
#include "encode/escape.h"
#include "report/formats.h"
#include "report/pprof.h"
#include "symbols/symbolize.h"
#include "table/tview.h"
#include "target.h"
#include "unwind/unwind.h"
#include "util.h"

#define STB_PROF_COPY_MAX (256u << 10)
#define STB_PROF_RINGBUF (16u << 20)
#define STB_PROF_PROGRESS_NS 250000000ull
#define STB_PROF_SYNC_NS 1000000000ull        /* new workers */
#define STB_PROF_ALIVE_NS 100000000ull
/* Share of a tick that off-CPU unwinding may use; beyond it, tasks whose
 * stack changed are counted under STB_PROF_NOTE_BUDGET. */
#define STB_PROF_BUDGET_PCT 50u

#define STB_PROF_NOTE_BUDGET "[not unwound: over the per-tick budget]"
#define STB_PROF_NOTE_TOO_MANY "[dropped: too many distinct stacks]"
/* Memory of a profile is bounded whatever the target does (ids that change
 * every tick, stacks rewritten under the copy): beyond these, samples lose
 * their per-task labels (bthread_id, worker_tid, name) and new stacks become
 * STB_PROF_NOTE_TOO_MANY. */
#define STB_PROF_MAX_SAMPLES 100000u
#define STB_PROF_MAX_STACKS 50000u
#define STB_PROF_NOTE_LOST "[lost: ring buffer full]"

/* Value indices: samples/count, cpu/nanoseconds, wall/nanoseconds. */
enum { STB_PV_SAMPLES, STB_PV_CPU, STB_PV_WALL, STB_PV_N };

struct stb_prof {
	struct stb_loader_opts o_run; /* the options, start_ns of this profile */
	const struct stb_loader_opts *o;
	struct stb_target *tg;
	struct stb_unw_proc *unw;
	struct stb_sym *sym;
	struct stb_bpf_prog *cap;
	struct stb_pprof *pp;
	uint8_t *buf;
	uint64_t *ips;
	unsigned nips;
	struct stb_frame *frames; /* one unwind's frames (nips of them) */
	struct stb_mem mem;
	/* The off-CPU passes: copies without lease or waiting, the stacks of
	 * tasks that have not run since the pass that unwound them reused (by
	 * slot: it grows with the live tasks, not with slot_hwm). */
	struct stb_collector *coll;
	uint32_t rotor;         /* where the next pass starts scanning */
	uint64_t unwind_end;    /* no unwind runs beyond this (the duration) */
	/* One pass's state, for the scan callback. */
	uint64_t snap_weight;
	bool snap_count;
	int64_t snap_v[3];
	uint64_t period_ns;
	int64_t nostack;        /* stack id of STB_PPROF_NOTE_NO_STACK */
	int64_t overbudget;     /* stack id of STB_PROF_NOTE_BUDGET */
	int64_t failed;         /* stack id of STB_PPROF_NOTE_FAILED */
	int64_t too_many;       /* stack id of STB_PROF_NOTE_TOO_MANY */
	uint64_t unlabelled, dropped_stacks; /* samples past the memory bounds */
	int err;                /* first builder error */
	bool target_gone;
	uint64_t untraceable; /* the last profile's bthreads beyond the table capacity */
	struct stb_bpf_prog_stats cs_base; /* the program's counters at the last profile's end */
	/* counters */
	uint64_t oncpu, oncpu_tagged, oncpu_sched, oncpu_kernel;
	uint64_t offcpu, ticks, missed_ticks, unwinds, reused, over_budget, copy_failed;
};

static volatile sig_atomic_t stb_prof_stop;

void stb_profile_stop(void)
{
	stb_prof_stop = 1;
}

static void prof_on_signal(int sig)
{
	(void)sig;
	stb_prof_stop = 1;
}


/* ---- labels and samples ---- */

static void prof_task_name(struct stb_prof *P, uint64_t id, char *name, size_t size)
{
	const struct stb_abi_task *p = stb_target_task(P->tg, STB_ABI_SLOT(id));
	name[0] = '\0';
	struct stb_tview_task v;
	if (!p)
		return;
	stb_tview_read_task(NULL, p, &v);
	if (v.id == id)
		snprintf(name, size, "%s", v.name);
}

/* Adds values to (stack, labels of the task). Returns the sample or -errno. */
static int64_t prof_sample(struct stb_prof *P, int64_t stack, uint64_t id, unsigned state,
			       uint32_t tid, const int64_t *values)
{
	char ids[24], name[STB_ABI_NAME_LEN];
	struct stb_pprof_label l[4];
	unsigned n = 0;
	if (stb_pprof_nsamples(P->pp) >= STB_PROF_MAX_SAMPLES) {
		/* Bounded memory: the state is kept, the task is not. */
		P->unlabelled++;
		tid = 0;
		if (id)
			state = state < STB_TASK_NSTATES ? state : STB_TASK_UNUSED;
		l[n++] = (struct stb_pprof_label){.key = "state",
						  .str = id ? stb_state_name(state) : "scheduler"};
		int64_t rc = stb_pprof_sample(P->pp, (uint32_t)stack, l, n, values);
		if (rc < 0 && !P->err)
			P->err = (int)rc;
		return rc;
	}
	if (id) {
		snprintf(ids, sizeof(ids), "%" PRIu64, id);
		l[n++] = (struct stb_pprof_label){.key = "bthread_id", .str = ids};
	}
	l[n++] = (struct stb_pprof_label){.key = "state",
					  .str = id ? stb_state_name(state) : "scheduler"};
	if (tid)
		l[n++] = (struct stb_pprof_label){.key = "worker_tid", .num = tid};
	if (id) {
		prof_task_name(P, id, name, sizeof(name));
		if (name[0])
			l[n++] = (struct stb_pprof_label){.key = "name", .str = name};
	}
	int64_t rc = stb_pprof_sample(P->pp, (uint32_t)stack, l, n, values);
	if (rc < 0 && !P->err)
		P->err = (int)rc;
	return rc;
}

static int64_t prof_stack(struct stb_prof *P, const uint64_t *ips, unsigned n, bool exact,
			      const char *leaf)
{
	struct stb_pprof_stack s = {
		.ips = ips, .n = n, .first_exact = exact, .leaf = leaf,
		.root = n >= P->o->max_depth ? STB_PPROF_NOTE_TRUNCATED : NULL,
	};
	int64_t rc = stb_pprof_stack(P->pp, &s);
	if (rc == -ENOSPC) {
		P->dropped_stacks++;
		return P->too_many;
	}
	if (rc < 0 && !P->err)
		P->err = (int)rc;
	return rc;
}

/* ---- on-CPU samples ---- */

/* The ips of n frames into P->ips. */
static unsigned prof_ips(struct stb_prof *P, unsigned n, const struct stb_frame *frames)
{
	for (unsigned i = 0; i < n; i++)
		P->ips[i] = frames[i].ip;
	return n;
}

static int prof_on_record(void *arg, const struct stb_record *rec, size_t size)
{
	struct stb_prof *P = arg;
	if (rec->kind != STB_RECORD_MODE_SAMPLE)
		return 0;
	P->oncpu++;
	bool task = !(rec->flags & STB_RECORD_F_NO_TASK) && rec->id;
	if (task)
		P->oncpu_tagged++;
	else
		P->oncpu_sched++;
	bool kernel = (rec->flags & STB_RECORD_F_KERNEL) != 0;
	P->oncpu_kernel += kernel;
	struct stb_frame_sink sink = {.frames = P->frames, .nframes = P->nips, .max = P->nips,
				      .deadline = P->unwind_end};
	stb_record_unwind(P->unw, rec, size, stb_frame_sink_depth(&sink), stb_frame_sink_add, &sink);
	unsigned n = prof_ips(P, sink.n, P->frames);
	int64_t st = prof_stack(P, P->ips, n, true, kernel ? STB_PPROF_NOTE_KERNEL
							       : n ? NULL : STB_PPROF_NOTE_NO_STACK);
	if (st < 0)
		return 0;
	int64_t v[STB_PV_N] = {1, (int64_t)P->period_ns, (int64_t)P->period_ns};
	prof_sample(P, st, task ? rec->id : 0, STB_ABI_STATE(rec->word) < STB_TASK_NSTATES
			? STB_ABI_STATE(rec->word) : STB_TASK_RUNNING, rec->tid, v);
	return 0;
}

/* ---- the off-CPU pass ---- */

/* What a reusable stack keeps for the profile (stb_collect_task.user): its
 * stack in the builder, and the sample of (stack, labels with state). */
#define STB_PROF_USER(sample, state) (((sample) + 1) * 16 + (int64_t)(state))
#define STB_PROF_USER_SAMPLE(u) ((u) / 16 - 1)
#define STB_PROF_USER_STATE(u) ((unsigned)((u) % 16))

/*
 * One task of an off-CPU pass (the collector's each()). Tasks are copied
 * and unwound by the trace driver without a lease (STB_DRIVER_F_NO_WAIT, no
 * STB_DRIVER_F_LEASE): a lease would make the task wait at its gate if a
 * worker picked it meanwhile -- for as long as this loader is descheduled,
 * on a busy machine -- and the profiler must never delay the target; a task
 * that runs during the copy is simply on a CPU now (the on-CPU samples see
 * it). The copy is validated all the same (include/stb/abi.h).
 */
static int prof_offcpu_task(void *arg, struct stb_collect_task *ct)
{
	struct stb_prof *P = arg;
	const struct stb_report_task *t = &ct->t;
	unsigned st = t->state;
	uint64_t id = t->id, weight = P->snap_weight;
	const int64_t *v = P->snap_v;
	if (ct->reused) {
		/* Not run since a pass unwound it: same stack, count it again. */
		if (!P->snap_count)
			return 0; /* priming: cached already */
		int64_t stack = ct->user[0], smp = STB_PROF_USER_SAMPLE(ct->user[1]);
		if (STB_PROF_USER_STATE(ct->user[1]) == st && smp >= 0)
			stb_pprof_sample_add(P->pp, (uint32_t)smp, v);
		else
			smp = prof_sample(P, stack, id, st, 0, v);
		ct->user[1] = STB_PROF_USER(smp, st);
		P->reused++;
		P->offcpu += weight;
		return 0;
	}
	if (ct->late) {
		/* Over the tick's budget: counted, unwound on a later tick. */
		P->over_budget++;
		P->offcpu += weight;
		prof_sample(P, P->overbudget, id, st, 0, v);
		ct->forget = true;
		return 0;
	}
	int64_t stack;
	if (t->err == -EAGAIN) {
		ct->forget = true; /* it moved: not off-CPU now */
		return 0;
	} else if (t->err < 0) {
		P->copy_failed++;
		stack = P->failed;
	} else if (t->mode == STB_TRACE_NO_STACK) {
		stack = P->nostack;
	} else {
		P->unwinds++;
		unsigned n = prof_ips(P, t->nframes, t->frames);
		stack = prof_stack(P, P->ips, n, false, n ? NULL : STB_PPROF_NOTE_NO_STACK);
	}
	int64_t smp = -1;
	if (P->snap_count) {
		P->offcpu += weight;
		smp = prof_sample(P, stack, id, st, 0, v);
	}
	ct->user[0] = stack;
	ct->user[1] = STB_PROF_USER(smp, st);
	ct->forget = stack < 0 || stack == P->failed; /* try again next time */
	return 0;
}

/* One wall-clock pass over every bthread that is off-CPU: suspended and
 * ready ones with their stacks, created / ready-without-stack ones without.
 * count false: only fill the cache (the priming pass before the clock starts,
 * so that the first tick does not pay for every unwind and symbol table).
 * Starts at the rotor (where the previous tick ran out of budget). */
static void prof_offcpu_pass(struct stb_prof *P, uint64_t budget_end, uint64_t weight, bool count)
{
	const unsigned mask = 1u << STB_TASK_SUSPENDED | 1u << STB_TASK_READY |
			      1u << STB_TASK_CREATED | 1u << STB_TASK_READY_NO_STACK;
	P->snap_weight = weight;
	P->snap_count = count;
	P->snap_v[STB_PV_SAMPLES] = (int64_t)weight;
	P->snap_v[STB_PV_CPU] = 0;
	P->snap_v[STB_PV_WALL] = (int64_t)(weight * P->period_ns);
	const struct stb_collect_opts co = {
	    .first_slot = P->rotor,
	    .state_mask = mask,
	    .no_pthreads = true, /* registered pthreads are always "running" */
	    .stacks = true,
	    .no_why = true,
	    .walk_max = P->nips,
	    .keep = P->nips,
	    .timeout_ns = 1, /* one attempt: the task is off-CPU now, or not */
	    .trace_end = budget_end,
	    .walk_end = P->unwind_end,
	    /* Priming stops at its budget (the ticks do the rest); a tick counts
	     * what it reaches late, to be unwound from there next time. */
	    .late = count ? STB_COLLECT_LATE_PASS : STB_COLLECT_LATE_STOP,
	    .reuse = STB_COLLECT_REUSE_ANY,
	    .each = prof_offcpu_task,
	    .arg = P,
	};
	struct stb_collect_result r;
	stb_collect(P->coll, &co, &r);
	if (r.target_gone)
		P->target_gone = true;
	if (r.err && !P->err)
		P->err = r.err;
	P->rotor = count && r.late ? r.at_slot : 0; /* next tick starts there */
}

/* ---- setup, loop, output ---- */

static int prof_open_capture(struct stb_prof *P)
{
	struct stb_bpf_prog_opts co;
	stb_target_bpf_prog_opts(P->tg, STB_RECORD_MODE_SAMPLE, &co);
	stb_bpf_prog_log(P->o->verbose > 0); /* the failure is explained below, once */
	co.period_ns = P->period_ns;
	co.ringbuf_bytes = STB_PROF_RINGBUF;
	co.sample_stack = true;
	P->cap = stb_bpf_prog_open(P->tg->pid, &co);
	if (!P->cap) {
		int err = errno;
		fprintf(stderr, "stb-bpf-loader: --profile needs the BPF capture program to sample "
				"on-CPU stacks, and it could not be loaded: %s\n",
			stb_bpf_prog_strerror(-err));
		return -err;
	}
	int rc = stb_bpf_prog_sync_workers(P->cap);
	if (rc < 0) {
		fprintf(stderr, "stb-bpf-loader: cannot open perf events on the workers of process "
				"%d: %s%s\n", (int)P->o->pid, stb_bpf_prog_strerror(rc),
			rc == -EPERM || rc == -EACCES
				? " (run as root or with CAP_PERFMON, or CAP_SYS_ADMIN)" : "");
		return rc;
	}
	return 0;
}

static void prof_progress(const struct stb_prof *P, uint64_t elapsed, uint64_t lost)
{
	fprintf(stderr, "\rstb-bpf-loader: profiling pid %d: %.1f / %.1f s, %" PRIu64
			" on-CPU samples, %" PRIu64 " off-CPU snapshots, %" PRIu64 " lost   ",
		(int)P->o->pid, (double)elapsed / 1e9, (double)P->o->duration_ns / 1e9, P->oncpu,
		P->offcpu, lost);
	fflush(stderr);
}

static int prof_write(struct stb_prof *P, FILE *out, uint64_t elapsed, uint64_t lost,
			  const struct stb_bpf_prog_stats *cs)
{
	/* Short lines (stb_pprof_comment wraps longer ones): pprof draws each
	 * comment as one line of its legend. */
	char line[768];
	char comm[64];
	stb_text_escape(comm, sizeof(comm), P->tg->comm, strlen(P->tg->comm));
	snprintf(line, sizeof(line), "stb-bpf-loader --profile of pid %d (%s): %u Hz for %.3f s%s",
		 (int)P->o->pid, comm, P->o->freq, (double)elapsed / 1e9,
		 stb_prof_stop ? " (interrupted)" : P->target_gone ? " (target exited)" : "");
	stb_pprof_set_duration(P->pp, (int64_t)elapsed);
	int rc = stb_pprof_comment(P->pp, line);
	static const char *const legend[] = {
		"samples/count: on-CPU samples + off-CPU snapshots",
		"cpu/nanoseconds: on-CPU time; wall/nanoseconds: on-CPU + off-CPU time",
		"an on-CPU sample is 1/freq s of one bthread; an off-CPU snapshot of a bthread "
		"stands for 1/freq s per tick (a late snapshot also covers the ticks it missed)",
		"labels: bthread_id, state (running, suspended, ready, ..., scheduler = no "
		"current bthread, lost), worker_tid (on-CPU), name",
		"on-CPU time only: go tool pprof -sample_index=cpu",
	};
	for (size_t i = 0; rc == 0 && i < sizeof(legend) / sizeof(legend[0]); i++)
		rc = stb_pprof_comment(P->pp, legend[i]);
	if (rc == 0 && !P->o->runtime_frames)
		rc = stb_pprof_comment(P->pp, "the runtime's own frames (stb_jump_stack, "
					      "stb_sched_suspend, ..., stb_task_entry) are hidden: "
					      "--runtime-frames keeps them");
	/* The counters: one "stats:" comment line, and JSON's stats object. */
	const struct stb_report_stat stats[] = {
		{"oncpu_samples", P->oncpu}, {"oncpu_tagged", P->oncpu_tagged},
		{"oncpu_scheduler", P->oncpu_sched}, {"oncpu_kernel", P->oncpu_kernel},
		{"lost_samples", lost}, {"read_errors", (uint64_t)cs->read_err}, {"ticks", P->ticks},
		{"missed_ticks", P->missed_ticks}, {"offcpu_snapshots", P->offcpu},
		{"unwinds", P->unwinds}, {"reused", P->reused}, {"over_budget", P->over_budget},
		{"copy_failed", P->copy_failed}, {"unlabelled", P->unlabelled},
		{"dropped_stacks", P->dropped_stacks},
	};
	const size_t nstats = sizeof(stats) / sizeof(stats[0]);
	size_t len = (size_t)snprintf(line, sizeof(line), "stats:");
	for (size_t i = 0; i < nstats && len < sizeof(line); i++)
		len += (size_t)snprintf(line + len, sizeof(line) - len, " %s=%" PRIu64, stats[i].key,
					stats[i].value);
	if (rc == 0)
		rc = stb_pprof_comment(P->pp, line);
	/* Bthreads beyond the table capacity: their off-CPU time is missing. */
	char untraceable[320] = "";
	uint64_t beyond = __atomic_load_n(&P->tg->hdr->untraceable, __ATOMIC_RELAXED);
	P->untraceable = beyond;
	if (beyond) {
		stb_loader_untraceable_note(untraceable, sizeof(untraceable), beyond,
					    P->tg->info.capacity);
		if (rc == 0)
			rc = stb_pprof_comment(P->pp, untraceable);
	}
	if (rc == 0 && (P->unlabelled || P->dropped_stacks)) {
		snprintf(line, sizeof(line),
			 "the profile reached its memory bounds (%u distinct samples, %u distinct "
			 "stacks): %" PRIu64 " samples lost their task labels, %" PRIu64 " stacks are "
			 "under " STB_PROF_NOTE_TOO_MANY, STB_PROF_MAX_SAMPLES, STB_PROF_MAX_STACKS,
			 P->unlabelled, P->dropped_stacks);
		rc = stb_pprof_comment(P->pp, line);
	}
	if (rc == 0 && lost) {
		snprintf(line, sizeof(line),
			 "%" PRIu64 " on-CPU samples were lost (ring buffer full); they are counted "
			 "under the frame " STB_PROF_NOTE_LOST " with state lost", lost);
		rc = stb_pprof_comment(P->pp, line);
		struct stb_pprof_stack s = {.leaf = STB_PROF_NOTE_LOST};
		int64_t st = stb_pprof_stack(P->pp, &s);
		struct stb_pprof_label l = {.key = "state", .str = "lost"};
		int64_t v[STB_PV_N] = {(int64_t)lost, (int64_t)(lost * P->period_ns),
				       (int64_t)(lost * P->period_ns)};
		if (st < 0 || stb_pprof_sample(P->pp, (uint32_t)st, &l, 1, v) < 0)
			rc = -ENOMEM;
	}
	if (rc != 0)
		return rc;
	struct stb_report_meta meta = {
		.producer = "stb-bpf-loader --profile", .pid = (int)P->o->pid, .comm = P->tg->comm,
		.table = true, .abi_version = P->tg->info.abi_version,
		.table_capacity = P->tg->info.capacity, .untraceable = beyond,
		.freq_hz = P->o->freq, .run = true, .complete = !P->target_gone && !beyond,
		.partial = P->target_gone ? "the target exited during the profile"
			   : beyond	  ? "bthreads beyond the table capacity are not in it"
					  : NULL,
		.stats = stats, .nstats = nstats,
	};
	if (beyond)
		stb_report_meta_note(&meta, untraceable);
	const struct stb_profile_out po = {
		.root_key = "state", .value = STB_PV_SAMPLES, .title = "on-CPU and off-CPU samples",
		.unit = "samples", .meta = &meta,
	};
	const struct stb_format_info *f = stb_format_get(P->o->format);
	return f && f->write_profile ? f->write_profile(P->pp, out, &po) : -EINVAL;
}

/* What stays from one profile to the next: the target, its modules and
 * symbols, the buffers and the BPF program. Prints why it failed. */
static int prof_setup(struct stb_prof *P)
{
	const struct stb_loader_opts *o = P->o;
	char err[512];
	P->period_ns = 1000000000ull / o->freq;
	stb_deadline_phase("opening the target's table");
	P->tg = stb_target_open(o->pid, err, sizeof(err));
	if (!P->tg) {
		fprintf(stderr, "stb-bpf-loader: %s\n", err);
		return -1;
	}
	stb_deadline_phase("reading the target's modules");
	P->unw = stb_unw_proc_new(o->pid);
	P->sym = P->unw ? stb_sym_new_mods(stb_unw_proc_mods(P->unw)) : NULL;
	P->nips = o->max_depth;
	P->ips = calloc(P->nips, sizeof(*P->ips));
	P->frames = calloc(P->nips, sizeof(*P->frames));
	P->buf = malloc(STB_PROF_COPY_MAX);
	stb_target_mem(P->tg, &P->mem);
	if (!P->unw || !P->sym || !P->ips || !P->frames || !P->buf) {
		fprintf(stderr, "stb-bpf-loader: cannot read the modules of process %d: %s\n",
			(int)o->pid, strerror(errno));
		return -1;
	}
	struct stb_collect_src src;
	stb_target_collect_src(P->tg, NULL, &src);
	src.drv = (struct stb_driver){.mem = &P->mem, .flags = STB_DRIVER_F_NO_WAIT,
				      .buf = P->buf, .cap = STB_PROF_COPY_MAX,
				      .workers = stb_target_workers(P->tg)};
	src.unw = P->unw;
	P->coll = stb_collector_new(&src, 0);
	if (!P->coll) {
		fprintf(stderr, "stb-bpf-loader: out of memory\n");
		return -1;
	}
	return prof_open_capture(P) != 0 ? -1 : 0;
}

static void prof_teardown(struct stb_prof *P)
{
	stb_bpf_prog_close(P->cap);
	stb_pprof_free(P->pp);
	stb_collector_free(P->coll);
	free(P->buf);
	free(P->frames);
	free(P->ips);
	stb_sym_free(P->sym);
	stb_unw_proc_free(P->unw);
	stb_target_close(P->tg);
}

/* Forgets the previous profile: its builder, the cache of its stacks, the
 * counters. */
static void prof_reset(struct stb_prof *P)
{
	stb_pprof_free(P->pp);
	P->pp = NULL;
	stb_collector_forget(P->coll);
	P->rotor = 0;
	P->err = 0;
	P->unlabelled = P->dropped_stacks = 0;
	P->oncpu = P->oncpu_tagged = P->oncpu_sched = P->oncpu_kernel = 0;
	P->offcpu = P->ticks = P->missed_ticks = P->unwinds = P->reused = 0;
	P->over_budget = P->copy_failed = 0;
}

/* One profile from now, written to out. *written: the profile was written
 * (maybe partial). Returns the exit status. */
static int prof_once(struct stb_prof *P, FILE *out, bool *written)
{
	const struct stb_loader_opts *o = P->o;
	bool progress = isatty(STDERR_FILENO) && !o->every_ns;
	*written = false;
	prof_reset(P);
	/* Until the sampling starts, unwinds are bounded by the run's deadline. */
	P->unwind_end = stb_loader_deadline(o) - stb_loader_reserve_ns(o);
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	struct stb_pprof_opts po = {
		.nvalues = STB_PV_N,
		.types = {{"samples", "count"}, {"cpu", "nanoseconds"}, {"wall", "nanoseconds"}},
		.default_type = STB_PV_WALL,
		.period_type = {"wall", "nanoseconds"},
		.period = (int64_t)P->period_ns,
		.time_ns = (int64_t)wall.tv_sec * 1000000000 + wall.tv_nsec,
		.sym = P->sym, .unw = P->unw, .max_stacks = STB_PROF_MAX_STACKS,
		.sym_deadline = stb_loader_sym_deadline(o), .hide_runtime = !o->runtime_frames,
	};
	P->pp = stb_pprof_new(&po);
	struct stb_pprof_stack nostack = {.leaf = STB_PPROF_NOTE_NO_STACK};
	struct stb_pprof_stack budget = {.leaf = STB_PROF_NOTE_BUDGET};
	struct stb_pprof_stack failed = {.leaf = STB_PPROF_NOTE_FAILED};
	struct stb_pprof_stack too_many = {.leaf = STB_PROF_NOTE_TOO_MANY};
	if (!P->pp || (P->nostack = stb_pprof_stack(P->pp, &nostack)) < 0 ||
	    (P->overbudget = stb_pprof_stack(P->pp, &budget)) < 0 ||
	    (P->failed = stb_pprof_stack(P->pp, &failed)) < 0 ||
	    (P->too_many = stb_pprof_stack(P->pp, &too_many)) < 0) {
		fprintf(stderr, "stb-bpf-loader: out of memory\n");
		return 1;
	}

	/* Prime the off-CPU cache (modules, unwind tables, the stacks of tasks
	 * that stay blocked) before sampling and the clock start. */
	uint64_t p0 = stb_now_ns();
	uint64_t prime = o->deadline_ns / 10 < 2000000000ull ? o->deadline_ns / 10 : 2000000000ull;
	stb_deadline_phase("priming the off-CPU cache");
	prof_offcpu_pass(P, p0 + prime, 0, false);
	if (o->verbose)
		fprintf(stderr, "stb-bpf-loader: primed the off-CPU cache: %" PRIu64 " stacks unwound "
				"in %.1f ms; sampling %d workers\n", P->unwinds,
			(double)(stb_now_ns() - p0) / 1e6, stb_bpf_prog_sync_workers(P->cap));
	int rc = stb_bpf_prog_sample_start(P->cap);
	if (rc != 0) {
		fprintf(stderr, "stb-bpf-loader: cannot start sampling: %s\n",
			stb_bpf_prog_strerror(rc));
		return 1;
	}
	uint64_t t0 = stb_now_ns(), end = t0 + o->duration_ns;
	/* --duration holds even while a stack is unwound. */
	uint64_t trace_end = P->unwind_end;
	P->unwind_end = end < trace_end ? end : trace_end;
	stb_deadline_phase("profiling");
	uint64_t tick = P->period_ns, next = t0 + tick;
	uint64_t next_progress = t0 + STB_PROF_PROGRESS_NS, next_sync = t0 + STB_PROF_SYNC_NS;
	uint64_t next_alive = t0 + STB_PROF_ALIVE_NS;
	struct stb_bpf_prog_stats cs;
	memset(&cs, 0, sizeof(cs));
	uint64_t stop_at;
	for (;;) {
		uint64_t now = stb_now_ns();
		bool done = stb_prof_stop || P->target_gone || now >= end;
		uint64_t limit = now < end ? now : end;
		if (stb_bpf_prog_sample_poll(P->cap, prof_on_record, P) < 0 &&
		    !stb_target_alive(P->tg))
			P->target_gone = true;
		if (next <= limit && !P->target_gone) {
			/* A late pass (the loader was not scheduled in time) stands
			 * for the ticks it missed as well, so that every tick of the
			 * profile is counted exactly once, the last ones included. */
			uint64_t weight = 1 + (limit - next) / tick;
			prof_offcpu_pass(P, now + tick * STB_PROF_BUDGET_PCT / 100u, weight, true);
			P->ticks++;
			P->missed_ticks += weight - 1;
			next += weight * tick;
			now = stb_now_ns();
		}
		if (done) {
			stop_at = limit;
			break;
		}
		if (now >= next_alive) {
			if (!stb_target_alive(P->tg))
				P->target_gone = true;
			next_alive = now + STB_PROF_ALIVE_NS;
		}
		if (now >= next_sync) {
			stb_bpf_prog_sync_workers(P->cap);
			next_sync = now + STB_PROF_SYNC_NS;
		}
		if (progress && now >= next_progress) {
			stb_bpf_prog_stats_read(P->cap, &cs);
			prof_progress(P, now - t0, (uint64_t)cs.rb_full);
			next_progress = now + STB_PROF_PROGRESS_NS;
		}
		uint64_t wake = next < end ? next : end;
		struct timespec ts = {.tv_sec = (time_t)(wake / 1000000000ull),
				      .tv_nsec = (long)(wake % 1000000000ull)};
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL); /* EINTR: checked above */
	}
	uint64_t elapsed = stop_at - t0;
	P->unwind_end = trace_end; /* the last samples */
	stb_deadline_phase("writing the profile");
	stb_bpf_prog_sample_stop(P->cap);
	stb_bpf_prog_sample_poll(P->cap, prof_on_record, P);
	/* The counters of this profile only (they add up over a session). */
	struct stb_bpf_prog_stats before = P->cs_base;
	stb_bpf_prog_stats_read(P->cap, &cs);
	P->cs_base = cs;
	uint64_t lost = cs.rb_full - before.rb_full;
	cs.read_err -= before.read_err;
	cs.runs -= before.runs;
	cs.records -= before.records;
	cs.rb_full = lost;
	if (progress) {
		prof_progress(P, elapsed, lost);
		fputc('\n', stderr);
	}
	if (P->err) {
		fprintf(stderr, "stb-bpf-loader: building the profile failed: %s\n", strerror(-P->err));
		return 1;
	}
	rc = prof_write(P, out, elapsed, lost, &cs);
	*written = true;
	if (rc != 0 || fflush(out) != 0 || ferror(out)) {
		fprintf(stderr, "stb-bpf-loader: writing the profile failed: %s\n",
			rc ? strerror(-rc) : strerror(errno));
		*written = false;
		return 1;
	}
	if (!o->every_ns || o->verbose)
		fprintf(stderr, "stb-bpf-loader: profiled pid %d for %.2f s at %u Hz%s: %" PRIu64
				" on-CPU samples (%" PRIu64 " with a bthread, %" PRIu64 " in the "
				"scheduler), %" PRIu64 " lost; %" PRIu64 " off-CPU snapshots in %" PRIu64
				" ticks (%" PRIu64 " missed), %" PRIu64 " unwound, %" PRIu64
				" reused, %" PRIu64 " over budget%s%s\n",
			(int)o->pid, (double)elapsed / 1e9, o->freq,
			stb_prof_stop ? " (interrupted)" : "", P->oncpu, P->oncpu_tagged,
			P->oncpu_sched, lost, P->offcpu, P->ticks, P->missed_ticks, P->unwinds,
			P->reused, P->over_budget, o->output ? "; wrote " : "",
			o->output ? o->output : "");
	if (o->verbose)
		fprintf(stderr, "stb-bpf-loader: BPF program: %" PRIu64 " runs, %" PRIu64 " records, %"
				PRIu64 " ring buffer full, %" PRIu64 " table read errors; %zu distinct "
				"samples in the profile\n", (uint64_t)cs.runs, (uint64_t)cs.records,
			lost, (uint64_t)cs.read_err, stb_pprof_nsamples(P->pp));
	if (lost)
		fprintf(stderr, "stb-bpf-loader: warning: %" PRIu64 " on-CPU samples were lost "
				"because the ring buffer was full (the loader fell behind); they are "
				"in the profile as \"" STB_PROF_NOTE_LOST "\". Lower --freq.\n",
			lost);
	if (P->target_gone) {
		fprintf(stderr, "stb-bpf-loader: process %d exited during the profile; the "
				"profile covers the %.2f s before\n", (int)o->pid, (double)elapsed / 1e9);
		return 1;
	}
	if (P->untraceable) {
		char note[320];
		stb_loader_untraceable_note(note, sizeof(note), P->untraceable,
					    P->tg->info.capacity);
		fprintf(stderr, "stb-bpf-loader: %s\n", note);
		return 1;
	}
	return 0;
}

int stb_profile_run(const struct stb_loader_opts *o)
{
	struct stb_prof *P = calloc(1, sizeof(*P));
	int status = 1;
	FILE *out = stdout;
	struct stb_loader_out file = {0};
	struct sigaction old_int, old_term;
	bool handlers = false, written = false;

	if (!P) {
		fprintf(stderr, "stb-bpf-loader: out of memory\n");
		return 1;
	}
	P->o_run = *o;
	P->o = &P->o_run;
	if (o->output) {
		int rc = stb_loader_out_open(&file, o->output);
		if (rc != 0) {
			fprintf(stderr, "stb-bpf-loader: cannot write %s: %s\n", o->output,
				strerror(-rc));
			goto cleanup;
		}
		out = file.f;
	} else {
		stb_loader_out_buffer(out);
	}
	if (prof_setup(P) != 0)
		goto cleanup;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = prof_on_signal;
	sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C kills */
	sigemptyset(&sa.sa_mask);
	stb_prof_stop = 0;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	handlers = true;
	status = prof_once(P, out, &written);
cleanup:
	if (handlers) {
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGTERM, &old_term, NULL);
	}
	/* Nothing profiled: a file this run created is not left behind empty. */
	stb_loader_out_finish(&file, written);
	prof_teardown(P);
	free(P);
	return status;
}

struct stb_prof *stb_profile_open(const struct stb_loader_opts *o)
{
	struct stb_prof *P = calloc(1, sizeof(*P));
	if (!P) {
		fprintf(stderr, "stb-bpf-loader: out of memory\n");
		return NULL;
	}
	P->o_run = *o;
	P->o = &P->o_run;
	if (prof_setup(P) != 0) {
		stb_profile_close(P);
		return NULL;
	}
	return P;
}

int stb_profile_once(struct stb_prof *P, uint64_t start_ns, FILE *out,
		     struct stb_run_result *res)
{
	memset(res, 0, sizeof(*res));
	P->o_run.start_ns = start_ns;
	int status = prof_once(P, out, &res->written);
	res->write_failed = !res->written;
	res->target_gone = P->target_gone;
	return status;
}

bool stb_profile_target_alive(struct stb_prof *P)
{
	return !P->target_gone && stb_target_alive(P->tg);
}

void stb_profile_close(struct stb_prof *P)
{
	if (!P)
		return;
	prof_teardown(P);
	free(P);
}
