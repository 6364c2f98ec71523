/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader's snapshot (loader.h): every selected task of the target
 * traced once by the trace driver -- suspended and ready ones from their saved
 * context read with process_vm_readv, running ones by the capture backend
 * (running.h) -- then unwound, symbolized and written in the chosen format.
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
#include <time.h>
#include <unistd.h>

#include "collect/taskwhy.h"
#include "loader.h"
#include "postmortem.h"
#include "report/formats.h"
#include "report/stackset.h"
#include "running.h"
#include "symbols/frames.h"
#include "symbols/symbolize.h"
#include "table/deadlock.h"
#include "table/driver.h"
#include "table/tview.h"
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
	struct stb_driver drv;
	uint8_t *buf;
	struct stb_frame *scratch;     /* STB_REPORT_WALK_MAX frames */
	struct stb_report_task *tasks; /* grows with the live tasks (new_task) */
	size_t n, cap, tasks_bytes;
	struct stb_stackset *stacks;   /* the tasks' stacks, each stored once */
	struct stb_walkmemo *memo;     /* walks of copies alike but for where they lie */
	struct pending *pend;          /* queued for tracing: STB_DRIVER_MANY_MAX */
	struct stb_driver_job jobs[STB_DRIVER_MANY_MAX];
	unsigned npend, njobs;
	/* Continuous mode: the stacks of the previous snapshot's ready and
	 * suspended tasks, by id (open addressing), and this snapshot's. A task
	 * with the same id and run sequence has not run since: its stack is the
	 * same (abi.h) and is not copied or unwound again. */
	struct known *known, *next_known;
	size_t known_cap, next_cap, next_n;
	uint64_t reused;
	bool stop; /* the target exited, or out of memory: no more tasks */
	uint64_t trace_end; /* no task is started after this */
	uint64_t now; /* CLOCK_MONOTONIC when the tracing started, or of the core (--stuck) */
	struct stb_deadlocks dl; /* this snapshot's deadlocks */
	struct stb_deadlock_scan *dls; /* fed by the scan of the tasks, NULL: search apart */
	bool target_gone;
	int err; /* -ENOMEM */
	uint64_t failed, finished, missing, not_traced;
	/* -v: how long tasks were held (lease taken to released). */
	uint64_t hold_max_ns, hold_sum_ns;
	unsigned nhold;
	uint64_t open_ns, write_ns; /* -v: the core's opening, the output's writing */
};

struct pending;
static int flush(struct stb_snapshot_session *S);

/* What a ready or suspended task's trace gave, while its run sequence stays. */
struct known {
	uint64_t id; /* 0: empty */
	uint32_t seq;
	struct stb_stackset_entry *stack;
	unsigned nframes, beyond;
	bool truncated, beyond_more;
};

/* Fault injection for tests: keep the lease as a stuck loader would. */
static void hold_fault(void *arg)
{
	const struct stb_loader_opts *o = arg;
	struct timespec ts = {o->fault_hold_ms / 1000, (long)(o->fault_hold_ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* A task between the scan and its place in the report: traced in batches of
 * up to STB_DRIVER_MANY_MAX (one system call copies their stacks). */
struct pending {
	struct stb_report_task t;
	char error[128];
	struct stb_abi_task *p;
	struct stb_tview_task v;
	bool keep;     /* traced (or failed) and selected: goes into the report */
	bool reusable; /* copied while ready/suspended with run sequence seq */
	uint32_t seq;
};

static size_t known_slot(uint64_t id, size_t cap)
{
	uint64_t h = id * 0x9e3779b97f4a7c15ull;
	return (size_t)(h >> 32) & (cap - 1);
}

static const struct known *known_find(const struct stb_snapshot_session *S, uint64_t id)
{
	if (!S->known_cap)
		return NULL;
	for (size_t i = known_slot(id, S->known_cap);; i = (i + 1) & (S->known_cap - 1)) {
		if (S->known[i].id == id)
			return &S->known[i];
		if (!S->known[i].id)
			return NULL;
	}
}

/* Remembers task t (traced with run sequence seq) for the next snapshot;
 * without memory it is simply traced again then. */
static void known_add(struct stb_snapshot_session *S, const struct stb_report_task *t,
		      uint32_t seq)
{
	if (2 * (S->next_n + 1) > S->next_cap) {
		size_t cap = S->next_cap ? 2 * S->next_cap : 1024;
		struct known *k = calloc(cap, sizeof(*k));
		if (!k)
			return;
		for (size_t i = 0; i < S->next_cap; i++) {
			if (!S->next_known[i].id)
				continue;
			size_t j = known_slot(S->next_known[i].id, cap);
			while (k[j].id)
				j = (j + 1) & (cap - 1);
			k[j] = S->next_known[i];
		}
		free(S->next_known);
		S->next_known = k;
		S->next_cap = cap;
	}
	size_t j = known_slot(t->id, S->next_cap);
	while (S->next_known[j].id && S->next_known[j].id != t->id)
		j = (j + 1) & (S->next_cap - 1);
	S->next_n += !S->next_known[j].id;
	S->next_known[j] = (struct known){.id = t->id,
					  .seq = seq,
					  .stack = t->stack,
					  .nframes = t->nframes,
					  .beyond = t->beyond,
					  .truncated = t->truncated != 0,
					  .beyond_more = t->beyond_more};
}

/* This snapshot's tasks become the known ones; the stacks no task holds now
 * are freed. */
static void known_turn(struct stb_snapshot_session *S)
{
	free(S->known);
	S->known = S->next_known;
	S->known_cap = S->next_cap;
	S->next_known = NULL;
	S->next_cap = S->next_n = 0;
	stb_stackset_sweep(S->stacks);
}

/* The task records live in a mapping of their own, grown with mremap (no
 * copy) and in transparent huge pages where the system allows them (the
 * "madvise" mode) once they are many: 100,000 records fault ~20 times
 * instead of 7,000 (a fault costs ~6 us here). */
#define STB_SNAPSHOT_TASKS_FIRST ((size_t)64 << 10)
#define STB_SNAPSHOT_TASKS_HUGE ((size_t)4 << 20) /* small runs: no 2 MiB page to clear */

static struct stb_report_task *new_task(struct stb_snapshot_session *S)
{
	if (S->n == S->cap) {
		size_t bytes = S->tasks_bytes ? S->tasks_bytes * 2 : STB_SNAPSHOT_TASKS_FIRST;
		void *m = S->tasks ? mremap(S->tasks, S->tasks_bytes, bytes, MREMAP_MAYMOVE)
				   : mmap(NULL, bytes, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m == MAP_FAILED) {
			S->err = -ENOMEM;
			return NULL;
		}
		if (bytes >= STB_SNAPSHOT_TASKS_HUGE) /* a hint: its failure changes nothing */
			madvise(m, bytes, MADV_HUGEPAGE);
		S->tasks = m;
		S->tasks_bytes = bytes;
		S->cap = bytes / sizeof(*S->tasks);
	}
	return &S->tasks[S->n];
}

/* The entry of worker w: in the target's mapped header region, or as the
 * core holds it; NULL when there is none. */
static const struct stb_abi_worker *worker_entry(const struct stb_snapshot_session *S, uint32_t w)
{
	if (w >= STB_ABI_MAX_WORKERS)
		return NULL;
	if (S->pm)
		return &S->pm->workers[w];
	if (STB_ABI_WORKER_OFFSET(w) + sizeof(struct stb_abi_worker) > S->tg->hdr_size)
		return NULL;
	return (const struct stb_abi_worker *)((const char *)S->tg->hdr + STB_ABI_WORKER_OFFSET(w));
}

/* What task q's record needs from its trace (capt, rc): state, capture,
 * whether it is still selected (q->keep). Returns true when it has a stack
 * to unwind. */
static bool settle(struct stb_snapshot_session *S, struct pending *q,
		   const struct stb_capture *capt, int rc, bool traced)
{
	struct stb_report_task *t = &q->t;
	const struct stb_tview_task *v = &q->v;
	const struct stb_loader_opts *o = S->o;
	if (S->stop)
		return false;
	if (traced) {
		S->nhold++;
		S->hold_sum_ns += capt->lease_ns;
		S->hold_max_ns = capt->lease_ns > S->hold_max_ns ? capt->lease_ns : S->hold_max_ns;
	}
	if (traced && o->verbose > 1) {
		fprintf(stderr, "stb-bpf-loader: task %" PRIu64 " %s: held %.1f us", v->id,
			stb_state_name(capt->state), (double)capt->lease_ns / 1e3);
		if (capt->mode == STB_TRACE_BPF)
			fprintf(stderr, ", BPF request to record %.1f us, program %.1f us",
				(double)S->run.last_wait_ns / 1e3, (double)capt->held_ns / 1e3);
		fputc('\n', stderr);
	}
	if (capt->target_gone || (rc == -ESRCH && S->tg && !stb_target_alive(S->tg))) {
		S->target_gone = true;
		S->stop = true;
		return false;
	}
	if (rc == -ESRCH) {
		S->finished++; /* finished meanwhile (its slot may be reused): not selected */
		return false;
	}
	unsigned st = capt->state ? capt->state : v->state; /* 0: failed before reading it */
	t->state = st < STB_TASK_NSTATES ? st : STB_TASK_UNUSED;
	if (o->state_mask && !(o->state_mask & (1u << t->state)))
		return false; /* moved out of the selected states meanwhile */
	t->mode = capt->mode;
	t->tid = capt->tid ? capt->tid
			   : (t->state == STB_TASK_RUNNING || t->is_pthread ? v->tid : 0);
	stb_report_task_why_recheck(t, q->p);
	if (o->stuck_ns && stb_report_stuck_ns(t, S->now) < o->stuck_ns)
		return false; /* it moved on meanwhile: not stuck */
	q->keep = true;
	if (rc != 0) {
		t->err = rc;
		S->failed++;
		return false;
	}
	return capt->mode != STB_TRACE_NO_STACK;
}

/* Continuous mode: a ready or suspended task whose run sequence has not
 * changed since the previous snapshot traced it has the same stack, which
 * is taken again (the word is read once more after the wait block, as a
 * copy would be validated). Returns true when q is done so. */
static bool reuse(struct stb_snapshot_session *S, struct pending *q)
{
	const struct stb_tview_task *v = &q->v;
	if (!S->tg || (v->state != STB_TASK_READY && v->state != STB_TASK_SUSPENDED))
		return false;
	const struct known *k = known_find(S, v->id);
	if (!k || k->seq != v->seq)
		return false;
	struct stb_capture capt = {.mode = STB_TRACE_CONTEXT, .state = v->state, .seq = v->seq};
	uint64_t w2 = __atomic_load_n(&q->p->word, __ATOMIC_ACQUIRE);
	if (__atomic_load_n(&q->p->id, __ATOMIC_ACQUIRE) != v->id || w2 != v->word)
		return false; /* it ran, or is about to: trace it */
	if (settle(S, q, &capt, 0, false)) {
		struct stb_report_task *t = &q->t;
		stb_stackset_hold(S->stacks, k->stack);
		t->stack = k->stack;
		t->frames = k->stack->frames;
		t->nframes = k->nframes;
		t->beyond = k->beyond;
		t->truncated = k->truncated;
		t->beyond_more = k->beyond_more;
		q->reusable = true;
		q->seq = v->seq;
	}
	S->reused++;
	return true;
}

/* A job is traced: what its record needs from the snapshot, its frames. */
static void job_done(void *arg, struct stb_driver_job *j)
{
	struct stb_snapshot_session *S = arg;
	struct pending *q = j->arg;
	struct stb_report_task *t = &q->t;
	const struct stb_capture *capt = &j->capt;
	const struct stb_loader_opts *o = S->o;
	if (!settle(S, q, capt, j->rc, true))
		return;
	/* The whole stack is walked (up to STB_REPORT_WALK_MAX frames) so that
	 * the report can say how many frames it does not show; the runtime's
	 * own frames do not count against --max-depth (report/model.h). */
	struct stb_frame_sink sink = {
	    .frames = S->scratch,
	    .nframes = STB_REPORT_WALK_MAX,
	    .max = STB_REPORT_WALK_MAX,
	    .deadline = S->trace_end,
	};
	stb_deadline_phase("unwinding a stack");
	stb_capture_unwind(S->unw, S->memo, capt, &sink);
	unsigned keep = stb_report_keep(o->max_depth);
	keep = sink.n < keep ? sink.n : keep;
	t->truncated = sink.truncated || sink.timed_out;
	t->beyond = sink.n - keep;
	t->beyond_more = sink.truncated;
	if (!keep)
		return;
	/* Tasks with the same stack share one copy of it (stackset.h). */
	t->stack = stb_stackset_add(S->stacks, S->scratch, keep, stb_report_stack_key(t));
	if (t->stack) {
		t->frames = t->stack->frames;
		q->reusable = capt->mode == STB_TRACE_CONTEXT;
		q->seq = capt->seq;
	} else if ((t->frames = malloc(keep * sizeof(*t->frames))) != NULL) {
		memcpy(t->frames, S->scratch, keep * sizeof(*t->frames));
	} else {
		S->err = -ENOMEM;
		S->stop = true;
		q->keep = false;
		return;
	}
	t->nframes = keep;
}

/* Queues task v->id of entry p for tracing, unless it is not selected. Returns
 * 1 when the run must stop. */
static int queue_task(struct stb_snapshot_session *S, struct stb_abi_task *p,
		      const struct stb_tview_task *v)
{
	const struct stb_loader_opts *o = S->o;
	struct pending *q = &S->pend[S->npend];
	struct stb_report_task *t = &q->t;
	memset(t, 0, sizeof(*t));
	t->id = v->id;
	memcpy(t->name, v->name, sizeof(t->name));
	t->is_pthread = (v->flags & STB_ABI_TASK_F_PTHREAD) != 0;
	t->state = v->state < STB_TASK_NSTATES ? v->state : STB_TASK_UNUSED;
	/* Why it is there, read before the trace (which then must not see it move). */
	stb_report_task_why(t, p, worker_entry(S, v->worker), &S->mem);
	if (o->stuck_ns && stb_report_stuck_ns(t, S->now) < o->stuck_ns)
		return 0; /* not stuck: not selected */
	q->p = p;
	q->v = *v;
	q->keep = false;
	q->reusable = false;
	q->error[0] = '\0';
	if (reuse(S, q))
		return ++S->npend == STB_DRIVER_MANY_MAX ? flush(S) : 0;
	S->jobs[S->njobs++] = (struct stb_driver_job){
	    .p = p,
	    .id = v->id,
	    .deadline = S->trace_end,
	    .timeout_ns = (uint64_t)o->timeout_ms * 1000000u,
	    .err = q->error,
	    .errlen = sizeof(q->error),
	    .arg = q,
	};
	return ++S->npend == STB_DRIVER_MANY_MAX ? flush(S) : 0;
}

/* Traces the queued tasks and adds the selected ones to the report, in the
 * order of the scan. Returns 1 when the run must stop. */
static int flush(struct stb_snapshot_session *S)
{
	stb_deadline_phase("tracing tasks");
	stb_driver_trace_many(&S->drv, S->jobs, S->njobs, job_done, S);
	for (unsigned k = 0; k < S->npend; k++) {
		struct pending *q = &S->pend[k];
		struct stb_report_task *t = NULL;
		if (!q->keep)
			continue;
		if (S->stop || !(t = new_task(S))) {
			if (!q->t.stack)
				free(q->t.frames);
			S->stop = true;
			continue;
		}
		*t = q->t;
		if (t->err < 0 && q->error[0])
			t->error = strdup(q->error); /* NULL: strerror(-err) */
		if (q->reusable && S->o->every_ns)
			known_add(S, t, q->seq);
		S->n++;
	}
	S->npend = S->njobs = 0;
	return S->stop;
}

static int scan_fn(void *arg, uint32_t slot, struct stb_abi_task *p, const struct stb_tview_task *v)
{
	struct stb_snapshot_session *S = arg;
	if (S->dls)
		stb_deadlock_scan_add(S->dls, slot, p, v);
	return queue_task(S, p, v);
}

/* --bthread ids: each looked up in its slot. */
static void trace_ids(struct stb_snapshot_session *S)
{
	const struct stb_loader_opts *o = S->o;
	uint32_t capacity = S->info->capacity;
	for (unsigned i = 0; i < o->nids && !S->stop; i++) {
		uint64_t id = o->ids[i];
		uint32_t slot = STB_ABI_SLOT(id);
		if (slot >= capacity) {
			fprintf(stderr,
				"stb-bpf-loader: bthread %" PRIu64 " is beyond the table "
				"capacity (%u) and cannot be traced from outside\n",
				id, capacity);
			S->missing++;
			continue;
		}
		if (stb_now_ns() >= S->trace_end) {
			S->not_traced += o->nids - i;
			break;
		}
		struct stb_abi_task *p = S->pm ? stb_postmortem_task(S->pm, slot)
					       : stb_target_task(S->tg, slot);
		struct stb_tview_task v;
		if (p)
			stb_tview_read_task_now(&S->drv.workers, p, &v);
		if (!p || v.id != id || !stb_tview_live(&v)) {
			fprintf(stderr,
				"stb-bpf-loader: bthread %" PRIu64 " does not exist or has "
				"finished\n",
				id);
			S->missing++;
			continue;
		}
		/* One at a time: each is looked up again when it is its turn. */
		if (queue_task(S, p, &v) == 0 && S->npend)
			flush(S);
	}
}

static void print_summary(const struct stb_snapshot_session *S, uint64_t t0, uint64_t t1)
{
	const struct stb_running *r = &S->run;
	if (S->pm)
		fprintf(stderr,
			"stb-bpf-loader: core opened (notes, table, modules) in %.3f ms; output "
			"written in %.3f ms\n",
			(double)S->open_ns / 1e6, (double)S->write_ns / 1e6);
	fprintf(stderr, "stb-bpf-loader: %zu tasks traced in %.3f ms (%" PRIu64 " failed)%s\n",
		S->n, (double)(t1 - t0) / 1e6, S->failed,
		r->prog    ? ", BPF loaded"
		: r->tried ? ", context mode only"
			   : ", no BPF needed");
	struct stb_walkmemo_stats ms = stb_walkmemo_stats(S->memo);
	if (ms.hits)
		fprintf(stderr,
			"stb-bpf-loader: %" PRIu64 " of %" PRIu64 " stacks walked once for "
			"all alike (%" PRIu64 " walks remembered, %.1f KiB)\n",
			ms.hits, ms.lookups, ms.stored, (double)ms.bytes / 1024);
	if (S->nhold)
		fprintf(stderr, "stb-bpf-loader: tasks held %.1f us at most, %.1f us on average\n",
			(double)S->hold_max_ns / 1e3, (double)S->hold_sum_ns / S->nhold / 1e3);
	if (S->reused)
		fprintf(stderr,
			"stb-bpf-loader: %" PRIu64 " tasks had not run since the previous snapshot: "
			"their stacks were not copied again\n",
			S->reused);
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
	S->scratch = calloc(STB_REPORT_WALK_MAX, sizeof(*S->scratch));
	S->pend = calloc(STB_DRIVER_MANY_MAX, sizeof(*S->pend));
	S->stacks = stb_stackset_new();
	S->memo = stb_walkmemo_new(0);
	if (!S->buf || !S->scratch || !S->pend || !S->stacks || !S->memo ||
	    (S->tg && stb_running_init(&S->run, S->tg, o->verbose) != 0)) {
		fprintf(stderr, "stb-bpf-loader: out of memory\n");
		goto fail;
	}
	if (S->tg) {
		stb_target_mem(S->tg, &S->mem);
		stb_running_ops(&S->run, &S->ops);
	}
	S->drv = (struct stb_driver){
	    .mem = &S->mem,
	    .capture = &S->ops,
	    .flags = S->tg ? STB_DRIVER_F_LEASE : 0,
	    .buf = S->buf,
	    .cap = STB_SNAPSHOT_COPY_MAX,
	    .workers = S->pm ? stb_postmortem_workers(S->pm) : stb_target_workers(S->tg),
	};
	if (o->fault_hold_ms) {
		S->drv.on_hold = hold_fault;
		S->drv.on_hold_arg = (void *)S->o;
	}
	return S;
fail:
	stb_snapshot_close(S);
	return NULL;
}

/* Forgets the previous snapshot's tasks and counters. */
static void session_reset(struct stb_snapshot_session *S)
{
	for (size_t i = 0; i < S->n; i++) {
		if (!S->tasks[i].stack)
			free(S->tasks[i].frames);
		free((char *)S->tasks[i].error);
	}
	if (S->stacks)
		stb_stackset_next(S->stacks);
	stb_walkmemo_reset(S->memo);
	free(S->next_known);
	S->next_known = NULL;
	S->next_cap = S->next_n = 0;
	S->reused = 0;
	S->n = 0;
	S->npend = S->njobs = 0;
	S->err = 0;
	S->stop = false;
	S->failed = S->finished = S->missing = S->not_traced = 0;
	S->hold_max_ns = S->hold_sum_ns = 0;
	S->nhold = 0;
	stb_deadlocks_free(&S->dl);
	stb_deadlock_scan_free(S->dls);
	S->dls = NULL;
}

int stb_snapshot_once(struct stb_snapshot_session *S, uint64_t start_ns, FILE *out,
		      struct stb_run_result *res)
{
	memset(res, 0, sizeof(*res));
	session_reset(S);
	S->o_run.start_ns = start_ns;
	const struct stb_loader_opts *o = S->o;
	S->trace_end = stb_loader_deadline(o) - stb_loader_reserve_ns(o);

	/* The tasks. */
	uint64_t t0 = stb_now_ns();
	S->now = S->pm ? stb_postmortem_now(S->pm) : t0;
	if (o->stuck_ns && !S->now) {
		fprintf(stderr, "stb-bpf-loader: --stuck cannot select from this core: every worker "
				"was parked when it was written, and the core does not say when that "
				"was (trace it without --stuck: tasks are shown without times)\n");
		return STB_EXIT_FAIL;
	}
	bool hwm_clamped = false;
	struct stb_tview_scan_result scan = {0};
	if (o->nids) {
		trace_ids(S);
	} else {
		struct stb_tview_src src = S->pm ? stb_postmortem_src(S->pm, &hwm_clamped)
						 : stb_target_src(S->tg, &hwm_clamped);
		/* A live target's whole table is read once for both the tasks and
		 * the wait-for graph, when the scan passes every task with an edge. */
		if (!S->pm && (!o->state_mask ||
			       (o->state_mask & STB_DEADLOCK_STATES) == STB_DEADLOCK_STATES))
			S->dls = stb_deadlock_scan_new(&src, &S->mem);
		stb_tview_scan(&src, o->state_mask, S->trace_end, scan_fn, S, &scan);
		if (S->npend)
			flush(S);
		S->not_traced = scan.left;
	}
	uint64_t t1 = stb_now_ns();
	if (S->err) {
		fprintf(stderr, "stb-bpf-loader: out of memory after %zu tasks\n", S->n);
		return STB_EXIT_FAIL;
	}
	if (S->tg && !stb_target_alive(S->tg))
		S->target_gone = true;
	res->target_gone = S->target_gone;

	/* The deadlocks of the whole table, each edge validated again. */
	stb_deadline_phase("searching deadlocks");
	uint64_t dl_end = stb_loader_deadline(o) - stb_loader_reserve_ns(o) / 2;
	bool searched = false;
	if (S->target_gone) {
		/* Nothing to validate cycles against. */
	} else if (S->dls && !scan.left && !scan.stopped) {
		searched = stb_deadlock_scan_end(S->dls, false, dl_end, &S->dl) == 0;
	} else {
		struct stb_tview_src all =
		    S->pm ? stb_postmortem_src_again(S->pm) : stb_target_src(S->tg, NULL);
		searched = stb_deadlock_find(&all, &S->mem, dl_end, &S->dl) == 0;
	}
	stb_deadlock_scan_free(S->dls);
	S->dls = NULL;

	/* What the report says about the run. */
	const struct stb_tview_info *ti = S->info;
	char note_bpf[320], note_untraceable[192], note_hwm[192], note_invalid[160], partial[192];
	struct stb_report_meta meta = {
	    .producer = S->pm ? "stb-bpf-loader core" : "stb-bpf-loader snapshot",
	    .pid = S->pm ? (int)S->pm->core->pid : (int)o->pid,
	    .comm = S->pm ? S->pm->comm : S->tg->comm,
	    .table = true,
	    .abi_version = ti->abi_version,
	    .table_capacity = ti->capacity,
	    .untraceable = __atomic_load_n(&S->hdr->untraceable, __ATOMIC_RELAXED),
	    .capture = S->pm ? "core" : stb_running_mode(&S->run),
	    .run = true,
	    .complete = !S->target_gone && !S->not_traced && !(S->pm && S->pm->missing),
	    .not_traced = S->not_traced,
	    .failed = S->failed,
	    .finished = S->finished,
	};
	if (S->target_gone) {
		meta.partial = "the target exited during the trace";
	} else if (S->pm && S->pm->missing && !S->not_traced) {
		snprintf(partial, sizeof(partial),
			 "the core file is truncated: %" PRIu64 " table entries are not in it",
			 S->pm->missing);
		meta.partial = partial;
	} else if (S->not_traced) {
		snprintf(partial, sizeof(partial),
			 "the run's deadline (--deadline %" PRIu64 " s) came "
			 "first: %" PRIu64 " selected tasks were not traced",
			 (uint64_t)(o->deadline_ns / 1000000000u), S->not_traced);
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
		snprintf(note_untraceable, sizeof(note_untraceable),
			 "%" PRIu64 " bthreads were created beyond the table capacity (%u) and are "
			 "untraceable from outside (raise STB_TABLE_CAPACITY)",
			 meta.untraceable, ti->capacity);
		stb_report_meta_note(&meta, note_untraceable);
	}
	if (hwm_clamped) {
		snprintf(note_hwm, sizeof(note_hwm),
			 "the table header claims %" PRIu64 " slots in "
			 "use, more than its capacity: only its %u slots were read",
			 (uint64_t)(__atomic_load_n(&S->hdr->slot_hwm, __ATOMIC_RELAXED) + 0),
			 ti->capacity);
		stb_report_meta_note(&meta, note_hwm);
	}
	if (scan.invalid) {
		snprintf(note_invalid, sizeof(note_invalid),
			 "%" PRIu64 " table entries have a state "
			 "out of range (a corrupt table)",
			 scan.invalid);
		stb_report_meta_note(&meta, note_invalid);
	}
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
	struct stb_report r = {
	    .out = out,
	    .sym = S->sym,
	    .unw = S->unw,
	    .stacks = S->stacks,
	    .group = o->group,
	    .meta = &meta,
	    .now_ns = S->pm ? stb_postmortem_now(S->pm)
			   : (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec,
	    .sym_deadline = stb_loader_sym_deadline(o),
	    .max_depth = o->max_depth,
	    .runtime_frames = o->runtime_frames,
	    .lines = o->lines,
	    .runtime_hint = "--runtime-frames",
	    .deadlocks = searched ? &S->dl : NULL,
	    .all_ids = o->verbose > 0,
	};
	stb_deadline_phase("writing the output");
	uint64_t write0 = stb_now_ns();
	int rc = stb_report_write(&r, S->tasks, S->n, o->format);
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
	known_turn(S);
	if (o->verbose)
		print_summary(S, t0, t1);
	if (S->target_gone)
		fprintf(stderr,
			"stb-bpf-loader: process %d exited during the trace; output is "
			"partial\n",
			(int)o->pid);
	else if (S->not_traced || (S->pm && S->pm->missing))
		fprintf(stderr, "stb-bpf-loader: %s; output is partial\n", partial);
	if (S->failed)
		fprintf(stderr,
			"stb-bpf-loader: %" PRIu64 " of %zu tasks could not be traced (see "
			"their errors)\n",
			S->failed, S->n);
	res->tasks = S->n;
	bool ok = meta.complete && !S->missing && !S->failed;
	return ok ? STB_EXIT_OK : STB_EXIT_FAIL;
}

bool stb_snapshot_target_alive(struct stb_snapshot_session *S)
{
	return !S->target_gone && S->tg && stb_target_alive(S->tg);
}

void stb_snapshot_close(struct stb_snapshot_session *S)
{
	if (!S)
		return;
	session_reset(S);
	if (S->tasks)
		munmap(S->tasks, S->tasks_bytes);
	free(S->known);
	free(S->next_known);
	stb_stackset_free(S->stacks);
	stb_walkmemo_free(S->memo);
	free(S->pend);
	free(S->scratch);
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
