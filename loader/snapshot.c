/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader's snapshot (loader.h): every selected task of the target
 * collected once (collect/collect.h) -- suspended and ready ones from their
 * saved context read with process_vm_readv, running ones by the capture
 * backend (running.h) -- then symbolized and written in the chosen format;
 * or, with --leaks, the entries only, viewed by creation site
 * (report/leaks.h) and compared with the previous snapshot.
 * With --core the target is a core file (postmortem.h): the same run on its
 * copy of the table, its memory and its threads' registers.
 * The run is bounded: per task by --timeout, as a whole by --deadline.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "collect/collect.h"
#include "loader.h"
#include "postmortem.h"
#include "report/formats.h"
#include "report/leaks.h"
#include "running.h"
#include "symbols/symbolize.h"
#include "symbols/walkmemo.h"
#include "target.h"
#include "unwind/unwind.h"
#include "util.h"

#define STB_SNAPSHOT_COPY_MAX (256u << 10)

struct stb_snapshot_session {
	struct stb_loader_opts o_run; /* the options, start_ns of this snapshot */
	const struct stb_loader_opts *o;
	struct stb_target *tg;     /* a live process, or */
	struct stb_postmortem *pm; /* a core file (--core) */
	const struct stb_tview_info *info;
	const struct stb_abi_header *hdr; /* its counters */
	struct stb_unw_proc *unw;
	struct stb_sym *sym;
	struct stb_running run;
	struct stb_mem mem;
	struct stb_capture_ops ops;
	uint8_t *buf;
	/* The collector, resident in continuous mode: the stacks of the previous
	 * snapshot's ready and suspended tasks are kept; a task with the same id
	 * and run sequence has not run since: its stack is the same (abi.h) and
	 * is not copied or unwound again. */
	struct stb_collector *coll;
	struct stb_collect_result res;
	uint64_t now; /* CLOCK_MONOTONIC when the tracing started, or of the core (--stuck) */
	uint64_t wall_ns; /* CLOCK_REALTIME then; of the core file's last write (--core) */
	uint64_t open_ns, write_ns; /* -v: the core's opening, the output's writing */
	struct stb_leaks prev;      /* --leaks: the previous snapshot's view (has_prev) */
	bool has_prev;
};

void stb_loader_untraceable_note(char *buf, size_t len, uint64_t n, uint32_t capacity)
{
	/* The capacity that would have held them, rounded up to a power of two. */
	uint64_t need = (uint64_t)capacity + n, want = 1;
	while (want < need)
		want <<= 1;
	if (want > STB_ABI_MAX_CAPACITY)
		snprintf(buf, len,
			 "%" PRIu64 " bthreads were created beyond the table capacity (%u): those "
			 "still live are not in this report, untraceable from outside (the table "
			 "holds at most %u: STB_TABLE_CAPACITY=%u)",
			 n, capacity, STB_ABI_MAX_CAPACITY, STB_ABI_MAX_CAPACITY);
	else
		snprintf(buf, len,
			 "%" PRIu64 " bthreads were created beyond the table capacity (%u): those "
			 "still live are not in this report, untraceable from outside (start the "
			 "process with STB_TABLE_CAPACITY=%" PRIu64 ")",
			 n, capacity, want);
}

/* -vv: one line per trace. */
static void traced(void *arg, uint64_t id, int rc, const struct stb_capture *capt)
{
	struct stb_snapshot_session *S = arg;
	(void)rc;
	if (S->o->verbose < 2)
		return;
	fprintf(stderr, "stb-bpf-loader: task %" PRIu64 " %s: held %.1f us", id,
		stb_state_name(capt->state), (double)capt->lease_ns / 1e3);
	if (capt->mode == STB_TRACE_BPF)
		fprintf(stderr, ", BPF request to record %.1f us, program %.1f us",
			(double)S->run.last_wait_ns / 1e3, (double)capt->held_ns / 1e3);
	fputc('\n', stderr);
}

/* The traced process's id (of the core's process with --core). */
static int target_pid(const struct stb_snapshot_session *S)
{
	return S->pm ? (int)S->pm->core->pid : (int)S->o->pid;
}

/* --bthread ids that are not there. */
static void missing(void *arg, uint64_t id, bool beyond)
{
	struct stb_snapshot_session *S = arg;
	if (beyond)
		fprintf(stderr,
			"stb-bpf-loader: bthread %" PRIu64 " is beyond the table "
			"capacity (%u) and cannot be traced from outside\n",
			id, S->info->capacity);
	else
		fprintf(stderr, "stb-bpf-loader: no bthread %" PRIu64 " in process %d (%s)\n", id,
			target_pid(S),
			S->pm ? "when its core file was written" : "it finished, or never existed");
}

static void print_summary(const struct stb_snapshot_session *S, uint64_t t0, uint64_t t1)
{
	const struct stb_running *r = &S->run;
	const struct stb_collect_result *res = &S->res;
	if (S->pm)
		fprintf(stderr,
			"stb-bpf-loader: core opened (notes, table, modules) in %.3f ms; output "
			"written in %.3f ms\n",
			(double)S->open_ns / 1e6, (double)S->write_ns / 1e6);
	fprintf(stderr, "stb-bpf-loader: %zu tasks traced in %.3f ms (%" PRIu64 " failed)%s\n",
		res->n, (double)(t1 - t0) / 1e6, res->failed,
		r->prog    ? ", BPF loaded"
		: r->tried ? ", context mode only"
			   : ", no BPF needed");
	struct stb_walkmemo_stats ms = stb_walkmemo_stats(stb_collector_memo(S->coll));
	if (ms.hits)
		fprintf(stderr,
			"stb-bpf-loader: %" PRIu64 " of %" PRIu64 " stacks walked once for "
			"all alike (%" PRIu64 " walks remembered, %.1f KiB)\n",
			ms.hits, ms.lookups, ms.stored, (double)ms.bytes / 1024);
	if (res->held)
		fprintf(stderr, "stb-bpf-loader: tasks held %.1f us at most, %.1f us on average\n",
			(double)res->held_max_ns / 1e3, (double)res->held_sum_ns / res->held / 1e3);
	if (res->reused)
		fprintf(stderr,
			"stb-bpf-loader: %" PRIu64 " tasks had not run since the previous snapshot: "
			"their stacks were not copied again\n",
			res->reused);
	if (r->n)
		fprintf(stderr,
			"stb-bpf-loader: %u BPF captures: request to record %.1f us at most, "
			"%.1f us on average; program %.1f us at most, %.1f us on average\n",
			r->n, (double)r->wait_max_ns / 1e3, (double)r->wait_sum_ns / r->n / 1e3,
			(double)r->prog_max_ns / 1e3, (double)r->prog_sum_ns / r->n / 1e3);
}

struct stb_snapshot_session *stb_snapshot_open(const struct stb_loader_opts *o)
{
	struct stb_snapshot_session *S = calloc(1, sizeof(*S));
	char err[640];
	if (!S) {
		fprintf(stderr, "stb-bpf-loader: out of memory\n");
		return NULL;
	}
	S->o_run = *o;
	S->o = &S->o_run;
	if (o->core) {
		stb_deadline_phase("reading the core file");
		uint64_t open0 = stb_now_ns();
		S->pm = stb_postmortem_open(o, err, sizeof(err));
		S->open_ns = stb_now_ns() - open0;
		if (!S->pm) {
			fprintf(stderr, "stb-bpf-loader: %s\n", err);
			goto fail;
		}
		S->info = &S->pm->info;
		S->hdr = &S->pm->hdr;
		S->unw = S->pm->unw;
		S->sym = S->pm->sym;
		S->mem = S->pm->mem;
		S->ops = S->pm->ops;
	} else {
		stb_deadline_phase("opening the target's table");
		S->tg = stb_target_open(o->pid, err, sizeof(err));
		if (!S->tg) {
			fprintf(stderr, "stb-bpf-loader: %s\n", err);
			goto fail;
		}
		S->info = &S->tg->info;
		S->hdr = S->tg->hdr;
		stb_deadline_phase("reading the target's modules");
		S->unw = stb_unw_proc_new(o->pid);
		S->sym = S->unw ? stb_sym_new_mods(stb_unw_proc_mods(S->unw)) : NULL;
		if (!S->unw || !S->sym) {
			fprintf(stderr, "stb-bpf-loader: cannot read the modules of process %d: %s\n",
				(int)o->pid, strerror(errno));
			goto fail;
		}
	}
	S->buf = malloc(STB_SNAPSHOT_COPY_MAX);
	if (!S->buf || (S->tg && stb_running_init(&S->run, S->tg, o->verbose) != 0)) {
		fprintf(stderr, "stb-bpf-loader: out of memory\n");
		goto fail;
	}
	struct stb_collect_src src;
	if (S->tg) {
		stb_target_mem(S->tg, &S->mem);
		stb_running_ops(&S->run, &S->ops);
		stb_target_collect_src(S->tg, &S->mem, &src);
	} else {
		stb_postmortem_collect_src(S->pm, &src);
	}
	src.drv = (struct stb_driver){
	    .mem = &S->mem,
	    .capture = &S->ops,
	    .flags = S->tg ? STB_DRIVER_F_LEASE : 0,
	    .buf = S->buf,
	    .cap = STB_SNAPSHOT_COPY_MAX,
	    .workers = S->tg ? stb_target_workers(S->tg) : stb_postmortem_workers(S->pm),
	};
	src.unw = S->unw;
	S->coll = stb_collector_new(&src, 0);
	if (!S->coll) {
		fprintf(stderr, "stb-bpf-loader: out of memory\n");
		goto fail;
	}
	return S;
fail:
	stb_snapshot_close(S);
	return NULL;
}

/* --leaks: the view of this snapshot's bthreads, and each site's growth
 * since the session's previous one (--every). 0 or -errno. */
static int write_leaks(struct stb_snapshot_session *S, const struct stb_report *r)
{
	struct stb_leaks l;
	int rc = stb_leaks_build(&l, S->res.tasks, S->res.n, r->now_ns, r);
	if (rc != 0)
		return rc;
	if (S->has_prev)
		stb_leaks_growth(&l, &S->prev);
	rc = stb_report_leaks(r, &l, S->o->format);
	stb_leaks_free(&S->prev);
	S->prev = l;
	S->has_prev = true;
	return rc;
}

int stb_snapshot_once(struct stb_snapshot_session *S, uint64_t start_ns, FILE *out,
		      struct stb_run_result *res)
{
	memset(res, 0, sizeof(*res));
	S->o_run.start_ns = start_ns;
	const struct stb_loader_opts *o = S->o;
	uint64_t trace_end = stb_loader_deadline(o) - stb_loader_reserve_ns(o);

	/* The tasks. */
	uint64_t t0 = stb_now_ns();
	S->now = S->pm ? stb_postmortem_now(S->pm) : t0;
	struct timespec wall = {0};
	struct stat st;
	if (!S->pm)
		clock_gettime(CLOCK_REALTIME, &wall);
	else if (stat(o->core, &st) == 0)
		wall = st.st_mtim;
	S->wall_ns = wall.tv_sec > 0 ? (uint64_t)wall.tv_sec * 1000000000ull +
					       (uint64_t)wall.tv_nsec
				     : 0;
	if (o->stuck_ns && !S->now) {
		fprintf(stderr, "stb-bpf-loader: --stuck cannot select from this core: every worker "
				"was parked when it was written, and the core does not say when that "
				"was (trace it without --stuck: tasks are shown without times)\n");
		return STB_EXIT_FAIL;
	}
	stb_walkmemo_reset(stb_collector_memo(S->coll));
	const struct stb_collect_opts co = {
	    .ids = o->ids,
	    .nids = o->nids,
	    .state_mask = o->state_mask,
	    .stacks = !o->leaks, /* the leak view needs the entries only */
	    .stuck_ns = o->stuck_ns,
	    .now = S->now,
	    /* The whole stack is walked (up to STB_REPORT_WALK_MAX frames) so
	     * that the report can say how many frames it does not show; the
	     * runtime's own frames do not count against --max-depth
	     * (report/model.h). */
	    .walk_max = STB_REPORT_WALK_MAX,
	    .keep = stb_report_keep(o->max_depth),
	    .timeout_ns = (uint64_t)o->timeout_ms * 1000000u,
	    .trace_end = trace_end,
	    .late = STB_COLLECT_LATE_COUNT,
	    /* Continuous mode: the stacks of tasks that have not run since the
	     * previous snapshot are not copied again. */
	    .reuse = S->tg && o->every_ns ? STB_COLLECT_REUSE_LAST : STB_COLLECT_REUSE_NONE,
	    .intern = true,
	    /* A live target: its stacks are copied on a thread of their own
	     * while the previous batch is unwound (a million stacks: the
	     * kernel's half of the run overlaps the rest). */
	    .pipeline = S->tg != NULL,
	    .holders = !o->leaks,
	    .deadlocks = !o->leaks,
	    .deadlock_end = stb_loader_deadline(o) - stb_loader_reserve_ns(o) / 2,
	    /* Every thread of the process, after the tasks of a whole snapshot. */
	    .threads = !o->no_threads,
	    .traced = traced,
	    .missing = missing,
	    .arg = S,
	    .phase = stb_deadline_phase,
	};
	struct stb_collect_result *cr = &S->res;
	stb_collect(S->coll, &co, cr);
	uint64_t t1 = stb_now_ns();
	if (cr->err) {
		fprintf(stderr, "stb-bpf-loader: out of memory after %zu tasks\n", cr->n);
		return STB_EXIT_FAIL;
	}
	res->target_gone = cr->target_gone;
	if (o->nids && cr->missing == o->nids) {
		/* Not one of the bthreads asked for is there: nothing to write. */
		return STB_EXIT_FAIL;
	}

	/* A core written on a fatal signal: what took it first. */
	struct stb_report_task *tasks = cr->tasks;
	size_t ntasks = cr->n;
	if (S->pm && !o->leaks &&
	    stb_postmortem_crash(S->pm, cr->tasks, cr->n,
				 !o->nids && !o->stuck_ns &&
				     (!o->state_mask || (o->state_mask & (1u << STB_TASK_RUNNING))),
				 stb_report_keep(o->max_depth), &tasks, &ntasks) != 0) {
		fprintf(stderr, "stb-bpf-loader: out of memory\n");
		return STB_EXIT_FAIL;
	}

	/* What the report says about the run. */
	const struct stb_tview_info *ti = S->info;
	char note_bpf[320], note_untraceable[320], note_hwm[192], note_invalid[160], partial[192];
	struct stb_report_meta meta = {
	    .producer = S->pm ? "stb-bpf-loader core" : "stb-bpf-loader snapshot",
	    .pid = target_pid(S),
	    .comm = S->pm ? S->pm->comm : S->tg->comm,
	    .time_ns = S->wall_ns,
	    .time_what = S->pm ? "core file written" : NULL,
	    .census = cr->census,
	    .tasks = cr->tasks_by_state,
	    .slots_used = stb_tview_hwm(S->hdr, S->info, NULL),
	    .table = true,
	    .abi_version = ti->abi_version,
	    .table_capacity = ti->capacity,
	    .untraceable = __atomic_load_n(&S->hdr->untraceable, __ATOMIC_RELAXED),
	    .capture = o->leaks ? NULL : S->pm ? "core" : stb_running_mode(&S->run),
	    .signal = S->pm ? stb_postmortem_signal(S->pm) : NULL,
	    .run = true,
	    .not_traced = cr->not_traced,
	    .failed = cr->failed,
	    .finished = cr->finished,
	};
	/* A run over the whole table misses the tasks beyond its capacity
	 * (--bthread ids beyond it are missing ones). */
	uint64_t beyond = o->nids ? 0 : meta.untraceable;
	meta.beyond_capacity = beyond;
	meta.complete = !cr->target_gone && !cr->not_traced && !(S->pm && S->pm->missing) &&
			!beyond;
	if (cr->target_gone) {
		meta.partial = "the target exited during the trace";
	} else if (S->pm && S->pm->missing && !cr->not_traced) {
		snprintf(partial, sizeof(partial),
			 "the core file is truncated: %" PRIu64 " table entries are not in it",
			 S->pm->missing);
		meta.partial = partial;
	} else if (cr->not_traced) {
		snprintf(partial, sizeof(partial),
			 "the run's deadline (--deadline %" PRIu64 " s) came "
			 "first: %" PRIu64 " selected tasks were not traced",
			 (uint64_t)(o->deadline_ns / 1000000000u), cr->not_traced);
		meta.partial = partial;
	} else if (beyond) {
		snprintf(partial, sizeof(partial),
			 "%" PRIu64 " bthreads were created beyond the table capacity (%u)", beyond,
			 ti->capacity);
		meta.partial = partial;
	}
	if (S->pm)
		stb_postmortem_notes(S->pm, &meta);
	if (S->run.tried && !S->run.prog) {
		snprintf(note_bpf, sizeof(note_bpf),
			 "%s; running bthreads are not captured "
			 "(context mode only)",
			 S->run.note);
		stb_report_meta_note(&meta, note_bpf);
	}
	if (meta.untraceable) {
		stb_loader_untraceable_note(note_untraceable, sizeof(note_untraceable),
					    meta.untraceable, ti->capacity);
		stb_report_meta_note(&meta, note_untraceable);
	}
	if (cr->clamped) {
		snprintf(note_hwm, sizeof(note_hwm),
			 "the table header claims %" PRIu64 " slots in "
			 "use, more than its capacity: only its %u slots were read",
			 (uint64_t)(__atomic_load_n(&S->hdr->slot_hwm, __ATOMIC_RELAXED) + 0),
			 ti->capacity);
		stb_report_meta_note(&meta, note_hwm);
	}
	if (cr->invalid) {
		snprintf(note_invalid, sizeof(note_invalid),
			 "%" PRIu64 " table entries have a state "
			 "out of range (a corrupt table)",
			 cr->invalid);
		stb_report_meta_note(&meta, note_invalid);
	}
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
	struct stb_report r = {
	    .out = out,
	    .sym = S->sym,
	    .unw = S->unw,
	    .stacks = stb_collector_stacks(S->coll),
	    .group = o->group,
	    .meta = &meta,
	    .now_ns = S->pm ? stb_postmortem_now(S->pm)
			   : (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec,
	    .sym_deadline = stb_loader_sym_deadline(o),
	    .max_depth = o->max_depth,
	    .runtime_frames = o->runtime_frames,
	    .lines = !o->no_lines,
	    .runtime_hint = "--runtime-frames",
	    .threads_hint = "--no-threads",
	    .deadlocks = cr->deadlocks,
	    .deadlock_hint = "run without --bthread, --state and --stuck to see it",
	    .refs = cr->refs,
	    .nrefs = cr->nrefs,
	    .all_ids = o->verbose > 0,
	};
	stb_deadline_phase("writing the output");
	uint64_t write0 = stb_now_ns();
	int rc = o->leaks ? write_leaks(S, &r) : stb_report_write(&r, tasks, ntasks, o->format);
	res->written = true;
	rc = fflush(out) != 0 && rc == 0 ? -errno : rc;
	S->write_ns = stb_now_ns() - write0;
	if (rc != 0 || ferror(out)) {
		fprintf(stderr, "stb-bpf-loader: writing the output failed: %s\n",
			strerror(rc      ? -rc
				 : errno ? errno
					 : EIO));
		res->write_failed = true;
		return STB_EXIT_FAIL;
	}
	if (stb_now_ns() >= r.sym_deadline)
		fprintf(stderr, "stb-bpf-loader: warning: the deadline came close while the output "
				"was written: some frames have no symbols\n");
	if (o->verbose)
		print_summary(S, t0, t1);
	if (cr->target_gone)
		fprintf(stderr,
			"stb-bpf-loader: process %d exited during the trace; output is "
			"partial\n",
			(int)o->pid);
	else if (cr->not_traced || (S->pm && S->pm->missing))
		fprintf(stderr, "stb-bpf-loader: %s; output is partial\n", partial);
	if (beyond)
		fprintf(stderr, "stb-bpf-loader: %s\n", note_untraceable);
	if (cr->failed)
		fprintf(stderr,
			"stb-bpf-loader: %" PRIu64 " of %zu tasks could not be traced (see "
			"their errors)\n",
			cr->failed, cr->n);
	res->tasks = cr->n;
	bool ok = meta.complete && !cr->missing && !cr->failed;
	return ok ? STB_EXIT_OK : STB_EXIT_FAIL;
}

bool stb_snapshot_target_alive(struct stb_snapshot_session *S)
{
	return !S->res.target_gone && S->tg && stb_target_alive(S->tg);
}

void stb_snapshot_close(struct stb_snapshot_session *S)
{
	if (!S)
		return;
	stb_collector_free(S->coll);
	stb_leaks_free(&S->prev);
	free(S->buf);
	stb_running_fini(&S->run);
	if (S->pm) {
		stb_postmortem_close(S->pm); /* owns unw and sym */
	} else {
		stb_sym_free(S->sym);
		stb_unw_proc_free(S->unw);
	}
	stb_target_close(S->tg);
	free(S);
}

int stb_snapshot_run(const struct stb_loader_opts *o)
{
	FILE *out = stdout;
	struct stb_loader_out file = {0};
	bool written = false;
	int status = STB_EXIT_FAIL;
	/* The output first: a bad -o fails before anything is traced. */
	if (o->output) {
		int rc = stb_loader_out_open(&file, o->output);
		if (rc != 0) {
			fprintf(stderr, "stb-bpf-loader: cannot write %s: %s\n", o->output,
				strerror(-rc));
			return STB_EXIT_FAIL;
		}
		out = file.f;
	} else {
		stb_loader_out_buffer(out);
	}
	struct stb_snapshot_session *S = stb_snapshot_open(o);
	if (S) {
		struct stb_run_result res;
		status = stb_snapshot_once(S, o->start_ns, out, &res);
		written = res.written;
	}
	/* Nothing traced: a file this run created is not left behind empty. */
	stb_loader_out_finish(&file, written);
	stb_snapshot_close(S);
	return status;
}
