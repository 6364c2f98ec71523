/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one collector (collect.h): a pass over a table, its tasks traced in
 * batches through the trace driver, their stacks interned, reused or handed
 * to the producer, the deadlocks searched.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "collect/collect.h"
#include "collect/copier.h"
#include "collect/names.h"
#include "collect/taskwhy.h"
#include "hashset.h"
#include "symbols/frames.h"
#include "symbols/walkmemo.h"
#include "util.h"

/* The task records live in a mapping of their own, grown with mremap (no
 * copy). Not in huge pages: where the hypervisor takes freed memory back
 * (free page reporting), a fresh 2 MiB page costs the loader ~5 ms to
 * fault, six times as much as its 512 small pages (docs/benchmarks.md, "A
 * million bthreads"). */
#define STB_COLLECT_TASKS_FIRST ((size_t)64 << 10)

/* Copies made on the copier's thread (opts.pipeline): tasks per batch, and
 * each batch's buffer (a stack that does not fit is traced alone). */
#define STB_COLLECT_PIPE_BATCH 512u

#define STB_COLLECT_PIPE_BUF ((size_t)2 << 20)

/* With a copier, the records' pages are faulted in this far ahead of the
 * last record (tasks_ahead): a few batches' worth, never much more memory
 * than the result needs. */
#define STB_COLLECT_AHEAD ((size_t)1 << 20)

/* A task between the scan and its place in the report: traced in batches of
 * up to STB_DRIVER_MANY_MAX (one read copies their stacks), or
 * STB_COLLECT_PIPE_BATCH when a copier copies them. */
struct pending {
	struct stb_collect_task ct;
	struct stb_report_more more; /* ct.t.more while it is pending */
	char error[128];
	struct stb_abi_task *p;
	struct stb_tview_task v;
	struct stb_wait_seen seen; /* the words its why was read with (taskwhy.h) */
	bool keep;     /* traced (or failed, or late) and selected */
	bool reusable; /* copied while ready or suspended, stack kept */
};

/* A stack that may serve a later pass: task id ran no more since run seq. */
struct reuse {
	uint32_t slot; /* the key */
	uint64_t id;
	uint32_t seq;
	uint64_t pass; /* the last pass that stored or reused it */
	struct stb_stackset_entry *stack;
	unsigned nframes, beyond;
	bool truncated, beyond_more;
	unsigned char truncated_why;
	int64_t user[2];
};

/* A set of task ids: in an array, found through a hash set. */
struct idset {
	uint64_t *v;
	size_t n, cap;
	struct stb_hashset set;
};

struct stb_collector {
	struct stb_collect_src src;
	struct stb_stackset *stacks;
	struct stb_walkmemo *memo;
	struct stb_frame *scratch; /* one walk: STB_REPORT_WALK_MAX frames */
	/* The batch being filled, b[cur]; with a copier, b[cur ^ 1] is the one
	 * before: being copied (inflight) while this one fills, handed over
	 * next. */
	struct batch {
		struct pending *pend;
		struct stb_driver_job *jobs;
		unsigned npend, njobs;
		void *buf; /* its copies (a copier's batch) */
	} b[2];
	unsigned cur;
	unsigned bcap;             /* tasks each batch has room for */
	struct stb_copier *copier; /* set up by the first pass that asks for one */
	bool piped;                /* this pass's batches are copied by the copier */
	bool inflight;
	uint32_t window; /* the source window of the pending entries */
	struct stb_report_task *tasks;
	size_t n, cap, tasks_bytes;
	struct stb_names names; /* the tasks' names */
	struct mores *mores;    /* the tasks' more (model.h), newest block first */
	struct reuse *reuse;
	size_t nreuse, capreuse;
	struct stb_hashset reuse_set;
	uint64_t pass, forgot; /* this pass; the first pass REUSE_ANY may use */
	/* Holders (opts.holders): tasks[0 .. nset) by id (indices into tasks:
	 * no copy of a million ids), the ids looked up to be added, the tasks
	 * named (refs; refids: their ids). */
	struct stb_hashset taskset;
	struct idset tried, refids;
	size_t nset;
	struct stb_report_ref *refs;
	size_t nrefs, caprefs;
	bool adding; /* take() adds holders: not selected, not filtered */
	/* The pass. */
	const struct stb_collect_opts *o;
	struct stb_collect_result *res;
	struct stb_deadlocks dl;
	struct stb_deadlock_scan *dls;
	struct stb_tview_src scan; /* the table as this pass scans it */
	uint64_t now;
	unsigned walk_max, keep;
	bool intern; /* stacks into c->stacks (always without each()) */
	unsigned batch; /* tasks queued at most: one when each() gets scratch */
	bool stop, late;
};

static int pipe_setup(struct stb_collector *c);

/* ---- reusable stacks, by slot ---- */

static uint64_t reuse_hash(const void *ctx, uint32_t idx)
{
	const struct stb_collector *c = ctx;
	return stb_hash_u64(c->reuse[idx].slot);
}

static bool reuse_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct stb_collector *c = ctx;
	return c->reuse[idx].slot == *(const uint32_t *)key;
}

static struct reuse *reuse_find(const struct stb_collector *c, uint32_t slot)
{
	int64_t i = stb_hashset_get(&c->reuse_set, stb_hash_u64(slot), c, reuse_eq, &slot);
	return i < 0 ? NULL : &c->reuse[i];
}

/* Keeps q's stack for a later pass; without memory it is traced again then. */
static void reuse_store(struct stb_collector *c, const struct pending *q)
{
	const struct stb_report_task *t = &q->ct.t;
	uint32_t slot = q->ct.slot;
	if (stb_hashset_reserve(&c->reuse_set, c, reuse_hash) != 0)
		return;
	uint32_t *s = stb_hashset_find(&c->reuse_set, stb_hash_u64(slot), c, reuse_eq, &slot);
	if (!*s) {
		if (c->nreuse >= UINT32_MAX - 1 ||
		    stb_grow(&c->reuse, &c->capreuse, c->nreuse + 1, sizeof(*c->reuse)) != 0)
			return;
		*s = (uint32_t)++c->nreuse;
		c->reuse_set.n++;
	}
	c->reuse[*s - 1] = (struct reuse){
	    .slot = slot, .id = t->id, .seq = q->ct.seq, .pass = c->pass, .stack = t->stack,
	    .nframes = t->nframes, .beyond = t->beyond, .truncated = t->truncated != 0,
	    .truncated_why = (unsigned char)t->truncated_why,
	    .beyond_more = t->beyond_more, .user = {q->ct.user[0], q->ct.user[1]}};
}

/* Drops the stacks the next pass may not reuse (REUSE_LAST: those this
 * pass did not store or reuse): memory stays with the live tasks. */
static void reuse_prune(struct stb_collector *c)
{
	size_t kept = 0;
	for (size_t i = 0; i < c->nreuse; i++)
		if (c->reuse[i].pass == c->pass)
			c->reuse[kept++] = c->reuse[i];
	if (kept == c->nreuse)
		return;
	c->nreuse = kept;
	stb_hashset_clear(&c->reuse_set);
	for (size_t i = 0; i < kept; i++) {
		uint32_t *s = stb_hashset_find(&c->reuse_set, stb_hash_u64(c->reuse[i].slot), c,
					       reuse_eq, &c->reuse[i].slot);
		*s = (uint32_t)i + 1;
		c->reuse_set.n++;
	}
}

void stb_collector_forget(struct stb_collector *c)
{
	c->forgot = c->pass + 1;
	stb_walkmemo_reset(c->memo);
}

/* ---- one task ---- */

bool stb_collect_stuck(const struct stb_collect_opts *o, const struct stb_report_task *t,
		       uint64_t now)
{
	if (!o->stuck_ns)
		return true;
	if (t->wait.kind == STB_WAIT_FD || t->wait.kind == STB_WAIT_SLEEP)
		return false; /* idle by design (collect.h) */
	if (t->is_pthread && t->wait.kind == STB_WAIT_NONE)
		return false; /* a registered pthread running on its own: unknown */
	return stb_report_stuck_ns(t, now) >= o->stuck_ns;
}

void stb_collect_entry(const struct stb_collect_src *src, struct stb_abi_task *p,
		       const struct stb_tview_task *v, struct stb_report_task *t,
		       struct stb_report_more *more, struct stb_wait_seen *why)
{
	memset(t, 0, sizeof(*t));
	memset(more, 0, sizeof(*more));
	t->more = more;
	t->id = v->id;
	t->name = v->name; /* v's copy: the caller's, interned when kept */
	t->is_pthread = (v->flags & STB_ABI_TASK_F_PTHREAD) != 0;
	t->state = v->state < STB_TASK_NSTATES ? v->state : STB_TASK_UNUSED;
	/* Why it is there, read before the trace (which then must not see it move). */
	if (why)
		stb_report_task_why(t, more, p,
				    src->worker ? src->worker(src->ctx, v->worker) : NULL,
				    src->owners, why);
}

/* Where running task t (entry copy v) runs: its worker (a bthread). */
static void on_worker(struct stb_report_task *t, const struct stb_tview_task *v)
{
	if (t->state == STB_TASK_RUNNING && !t->is_pthread && v->worker < STB_ABI_MAX_WORKERS) {
		t->on_worker = true;
		t->worker = v->worker;
	}
}

static bool gone(const struct stb_collector *c)
{
	const struct stb_mem *m = c->src.drv.mem;
	return m->alive && !m->alive(m->ctx);
}

/* What task q's record needs from its trace (capt, rc): state, capture,
 * whether it is still selected (q->keep). true: it has a stack to unwind. */
static bool settle(struct stb_collector *c, struct pending *q, const struct stb_capture *capt,
		   int rc, bool traced)
{
	struct stb_report_task *t = &q->ct.t;
	const struct stb_tview_task *v = &q->v;
	const struct stb_collect_opts *o = c->o;
	if (c->stop)
		return false;
	if (traced) {
		struct stb_collect_result *r = c->res;
		r->held++;
		r->held_sum_ns += capt->lease_ns;
		r->held_max_ns = capt->lease_ns > r->held_max_ns ? capt->lease_ns : r->held_max_ns;
		if (o->traced)
			o->traced(o->arg, v->id, rc, capt);
	}
	if (capt->target_gone || (rc == -ESRCH && gone(c))) {
		c->res->target_gone = true;
		c->stop = true;
		return false;
	}
	if (rc == -ESRCH) {
		c->res->finished++; /* finished meanwhile (its slot may be reused) */
		return false;
	}
	unsigned st = capt->state ? capt->state : v->state; /* 0: failed before reading it */
	t->state = st < STB_TASK_NSTATES ? st : STB_TASK_UNUSED;
	if (o->state_mask && !t->added && !(o->state_mask & (1u << t->state)))
		return false; /* moved out of the selected states meanwhile */
	t->mode = capt->mode;
	t->tid = capt->tid ? capt->tid
			   : (t->state == STB_TASK_RUNNING || t->is_pthread ? v->tid : 0);
	on_worker(t, v);
	if (capt->in_syscall && t->state == STB_TASK_RUNNING) {
		t->in_syscall = true;
		q->more.syscall_nr = capt->syscall_nr;
		q->more.syscall_arg0 = capt->syscall_arg0;
	}
	if (!o->no_why)
		stb_report_task_why_recheck(t, &q->more, q->p, &q->seen);
	if (!t->added && !stb_collect_stuck(o, t, c->now))
		return false; /* it moved on meanwhile: not stuck */
	q->keep = true;
	q->ct.seq = capt->seq;
	if (rc != 0) {
		t->err = rc;
		c->res->failed++;
		return false;
	}
	return capt->mode != STB_TRACE_NO_STACK;
}

/* A ready or suspended task whose run sequence has not changed since a
 * pass traced it has the same stack, taken again (its word read once more
 * after the wait block, as a copy would be validated). true: q is done. */
static bool reuse_try(struct stb_collector *c, struct pending *q)
{
	const struct stb_tview_task *v = &q->v;
	unsigned mode = c->o->reuse;
	if (mode == STB_COLLECT_REUSE_NONE ||
	    (v->state != STB_TASK_READY && v->state != STB_TASK_SUSPENDED))
		return false;
	const struct reuse *k = reuse_find(c, q->ct.slot);
	if (!k || k->id != v->id || k->seq != v->seq ||
	    (mode == STB_COLLECT_REUSE_LAST ? k->pass + 1 != c->pass : k->pass < c->forgot))
		return false;
	uint64_t w2 = __atomic_load_n(&q->p->word, __ATOMIC_ACQUIRE);
	if (__atomic_load_n(&q->p->id, __ATOMIC_ACQUIRE) != v->id || w2 != v->word)
		return false; /* it ran, or is about to: trace it */
	struct stb_capture capt = {.mode = STB_TRACE_CONTEXT, .state = v->state, .seq = v->seq};
	struct stb_report_task *t = &q->ct.t;
	if (settle(c, q, &capt, 0, false)) {
		if (k->stack)
			stb_stackset_hold(c->stacks, k->stack);
		t->stack = k->stack;
		t->frames = k->stack ? k->stack->frames : NULL;
		t->nframes = k->stack ? k->nframes : 0;
		t->beyond = k->beyond;
		t->truncated = k->truncated;
		t->truncated_why = k->truncated_why;
		t->beyond_more = k->beyond_more;
		q->reusable = true;
	}
	q->ct.reused = true;
	q->ct.user[0] = k->user[0];
	q->ct.user[1] = k->user[1];
	c->res->reused++;
	return true;
}

/* Walks capt into t's frames (interned, or scratch for each()). *reusable:
 * the stack may serve a later pass. false: out of memory (the pass stops). */
static bool walk_into(struct stb_collector *c, struct stb_report_task *t,
		      const struct stb_capture *capt, bool *reusable)
{
	const struct stb_collect_opts *o = c->o;
	/* The whole stack is walked (up to walk_max frames) so that the report
	 * can say how many frames it does not show; keep are kept. */
	struct stb_frame_sink sink = {
	    .frames = c->scratch,
	    .nframes = c->walk_max,
	    .max = c->walk_max,
	    .deadline = o->walk_end ? o->walk_end : o->trace_end,
	};
	if (o->phase)
		o->phase("unwinding a stack");
	stb_capture_unwind(c->src.unw, c->memo, capt, &sink);
	unsigned keep = sink.n < c->keep ? sink.n : c->keep;
	/* A copy that ends before the stack's top may miss frames, or have
	 * them from a chain nothing checked: truncated, and why. */
	unsigned cut = capt->cut < STB_CUT_NKINDS ? capt->cut : STB_CUT_COPY;
	t->truncated = sink.truncated || sink.timed_out || cut;
	t->truncated_why = sink.timed_out ? STB_REPORT_TRUNC_DEADLINE
			   : cut	  ? cut
			   : sink.truncated ? STB_REPORT_TRUNC_WALK_MAX
					    : STB_REPORT_TRUNC_NONE;
	t->beyond = sink.n - keep;
	t->beyond_more = sink.truncated;
	if (!keep)
		return true;
	bool context = capt->mode == STB_TRACE_CONTEXT;
	if (!c->intern) {
		t->frames = c->scratch; /* handed to each() before the next walk */
		*reusable = context;
	} else if ((t->stack = stb_stackset_add(c->stacks, c->scratch, keep,
						stb_report_stack_key(t))) != NULL) {
		/* Tasks with the same stack share one copy of it. */
		t->frames = t->stack->frames;
		*reusable = context;
	} else if ((t->frames = malloc(keep * sizeof(*t->frames))) != NULL) {
		memcpy(t->frames, c->scratch, keep * sizeof(*t->frames));
	} else {
		c->res->err = -ENOMEM;
		c->stop = true;
		return false;
	}
	t->nframes = keep;
	return true;
}

/* A job is traced: what its record needs from the capture, its frames. */
static void job_done(void *arg, struct stb_driver_job *j)
{
	struct stb_collector *c = arg;
	struct pending *q = j->arg;
	if (!settle(c, q, &j->capt, j->rc, true))
		return;
	if (!walk_into(c, &q->ct.t, &j->capt, &q->reusable))
		q->keep = false;
}

/* ---- what few tasks have (stb_report_more), in blocks ---- */

#define STB_COLLECT_MORES 256u

struct mores {
	struct mores *next;
	unsigned n;
	struct stb_report_more v[STB_COLLECT_MORES];
};

/* A copy of m kept until the pass ends (its error then freed: m's is given
 * over); NULL without memory. */
static const struct stb_report_more *more_keep(struct stb_collector *c,
					       const struct stb_report_more *m)
{
	if (!c->mores || c->mores->n == STB_COLLECT_MORES) {
		struct mores *b = malloc(sizeof(*b));
		if (!b)
			return NULL;
		b->next = c->mores;
		b->n = 0;
		c->mores = b;
	}
	struct stb_report_more *k = &c->mores->v[c->mores->n++];
	*k = *m;
	return k;
}

static void mores_clear(struct stb_collector *c)
{
	while (c->mores) {
		struct mores *b = c->mores;
		for (unsigned i = 0; i < b->n; i++)
			free((char *)b->v[i].error);
		c->mores = b->next;
		free(b);
	}
}

/* Room for need records in the result's mapping. 0 or -ENOMEM. */
static int tasks_room(struct stb_collector *c, size_t need)
{
	if (need <= c->cap)
		return 0;
	size_t bytes = c->tasks_bytes ? c->tasks_bytes : STB_COLLECT_TASKS_FIRST;
	while (bytes / sizeof(*c->tasks) < need) {
		if (bytes > SIZE_MAX / 2)
			return -ENOMEM;
		bytes *= 2;
	}
	if (c->copier && c->tasks)
		stb_copier_ahead(c->copier, NULL, NULL); /* the mapping may move */
	void *m = c->tasks ? mremap(c->tasks, c->tasks_bytes, bytes, MREMAP_MAYMOVE)
			   : mmap(NULL, bytes, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return -ENOMEM;
	c->tasks = m;
	c->tasks_bytes = bytes;
	c->cap = bytes / sizeof(*c->tasks);
	return 0;
}

/* The next record of the result, NULL without memory. */
static struct stb_report_task *new_task(struct stb_collector *c)
{
	return tasks_room(c, c->n + 1) == 0 ? &c->tasks[c->n] : NULL;
}

/* With a copier: the records the next batches fill are faulted in on its
 * threads when they have nothing to copy (a little ahead of the last one,
 * never past the slots the scan reads). */
static void tasks_ahead(struct stb_collector *c)
{
	size_t want = c->n + STB_COLLECT_AHEAD / sizeof(*c->tasks);
	size_t most = (size_t)c->scan.nslots + 64;
	if (want > most)
		want = most;
	if (want <= c->n || tasks_room(c, want) != 0)
		return; /* new_task says so, when it comes to it */
	stb_copier_ahead(c->copier, c->tasks + c->n, c->tasks + want);
}

/* Hands a selected task q over: to each(), or into the result. */
static void deliver(struct stb_collector *c, struct pending *q)
{
	const struct stb_collect_opts *o = c->o;
	struct stb_report_task *t = &q->ct.t;
	bool own = !t->stack && t->frames && t->frames != c->scratch; /* a malloc'd copy */
	if (o->each) {
		if (t->err < 0 && q->error[0])
			q->more.error = q->error;
		if (o->each(o->arg, &q->ct) != 0)
			c->stop = true;
		q->more.error = NULL;
		if (own)
			free(t->frames);
		if (q->reusable && !q->ct.forget && o->reuse)
			reuse_store(c, q);
		return;
	}
	struct stb_report_task *d = c->stop ? NULL : new_task(c);
	if (!d) {
		if (own)
			free(t->frames);
		if (!c->stop)
			c->res->err = -ENOMEM;
		c->stop = true;
		return;
	}
	*d = *t;
	d->more = NULL;
	/* One copy of each name for the whole result; the rest of what few
	 * tasks have apart (the error's text its own: NULL, strerror(-err)). */
	if (d->err < 0 && q->error[0])
		q->more.error = strdup(q->error);
	if (!(d->name = stb_names_intern(&c->names, q->v.name, sizeof(q->v.name))) ||
	    (!stb_report_more_empty(&q->more) && !(d->more = more_keep(c, &q->more)))) {
		free((char *)q->more.error);
		q->more.error = NULL;
		if (own)
			free(t->frames);
		c->res->err = -ENOMEM;
		c->stop = true;
		return;
	}
	q->more.error = NULL;
	c->res->added += d->added;
	if (q->reusable && o->reuse)
		reuse_store(c, q);
	c->n++;
}

/* Traces the tasks of batch b whose copies are made (or not: they are traced
 * alone now) and hands the selected ones over, in the order of the scan. */
static void finish(struct stb_collector *c, struct batch *b)
{
	const struct stb_collect_opts *o = c->o;
	if (b->njobs && !c->stop) {
		if (o->phase)
			o->phase("tracing tasks");
		stb_driver_finish_many(&c->src.drv, b->jobs, b->njobs, job_done, c);
	}
	for (unsigned k = 0; k < b->npend; k++) {
		struct pending *q = &b->pend[k];
		if (q->keep && !c->stop)
			deliver(c, q);
		else if (!q->ct.t.stack && q->ct.t.frames != c->scratch)
			free(q->ct.t.frames);
	}
	b->npend = b->njobs = 0;
}

/* The batch being filled is complete. Without a copier it is copied and
 * handed over now. With one, the copier takes it, and the batch before it
 * (copied meanwhile) is handed over while the copier works. */
static void flush(struct stb_collector *c)
{
	struct batch *b = &c->b[c->cur];
	if (!c->piped) {
		if (b->njobs)
			stb_driver_copy_many(&c->src.drv, b->jobs, b->njobs, c->src.drv.buf,
					     c->src.drv.cap);
		finish(c, b);
		return;
	}
	if (c->inflight) {
		stb_copier_wait(c->copier);
		c->inflight = false;
	}
	if (b->njobs && !c->stop) {
		tasks_ahead(c);
		stb_copier_start(c->copier, &c->src.drv, b->jobs, b->njobs, b->buf,
				 STB_COLLECT_PIPE_BUF);
		c->inflight = true;
	}
	finish(c, &c->b[c->cur ^ 1]);
	c->cur ^= 1;
}

/* Every task queued is handed over (the scan leaves a window, or ends). */
static void drain(struct stb_collector *c)
{
	flush(c);
	if (c->piped)
		flush(c); /* the batch the first one gave the copier */
}

/* Is a task of this state reached after trace_end late (LATE_PASS)? One
 * without a stack costs no copy: it is traced all the same. */
static bool late_now(struct stb_collector *c, unsigned state)
{
	const struct stb_collect_opts *o = c->o;
	if (state == STB_TASK_CREATED || state == STB_TASK_READY_NO_STACK)
		return false;
	if (!c->late && o->trace_end && stb_now_ns() >= o->trace_end)
		c->late = true;
	return c->late;
}

/* The window of the scan source slot lies in (tview.h: entries of the
 * pending batch stay valid until the scan leaves their window). */
static uint32_t window_of(const struct stb_collector *c, uint32_t slot)
{
	return c->scan.window ? slot / c->scan.window : 0;
}

/* Takes task v->id of entry p (slot) into the pass, unless it is not
 * selected. Returns non-zero when the pass must stop. */
static int take(struct stb_collector *c, uint32_t slot, struct stb_abi_task *p,
		const struct stb_tview_task *v)
{
	const struct stb_collect_opts *o = c->o;
	if ((c->b[0].npend || c->b[1].npend) && c->window != window_of(c, slot))
		drain(c); /* the entries of a batch stay valid within their window */
	if (c->stop)
		return 1;
	struct batch *b = &c->b[c->cur];
	struct pending *q = &b->pend[b->npend];
	memset(&q->ct, 0, sizeof(q->ct));
	stb_collect_entry(&c->src, p, v, &q->ct.t, &q->more, o->no_why ? NULL : &q->seen);
	q->ct.t.added = c->adding;
	if (!c->adding && !stb_collect_stuck(o, &q->ct.t, c->now))
		return 0; /* not stuck: not selected */
	q->ct.slot = slot;
	q->ct.seq = v->seq;
	q->p = p;
	q->v = *v;
	q->ct.t.name = q->v.name;
	q->keep = false;
	q->reusable = false;
	q->error[0] = '\0';
	c->window = window_of(c, slot);
	struct stb_report_task *t = &q->ct.t;
	if (!o->stacks) {
		/* The entry's fields only. */
		t->mode = STB_TRACE_NO_STACK;
		if (v->state == STB_TASK_RUNNING || t->is_pthread)
			t->tid = v->tid;
		on_worker(t, v);
		q->keep = true;
	} else if (reuse_try(c, q)) {
		/* Its stack from an earlier pass. */
	} else if (o->late == STB_COLLECT_LATE_STOP && o->trace_end &&
		   stb_now_ns() >= o->trace_end) {
		c->res->at_slot = slot; /* the scan stops; what is queued is traced */
		return 1;
	} else if (o->late == STB_COLLECT_LATE_PASS && late_now(c, v->state)) {
		if (!c->res->late++)
			c->res->at_slot = slot;
		q->ct.late = true;
		q->keep = true;
	} else {
		b->jobs[b->njobs++] = (struct stb_driver_job){
		    .p = p,
		    .id = v->id,
		    .deadline = o->trace_end ? o->trace_end : UINT64_MAX,
		    .timeout_ns = o->timeout_ns,
		    .err = q->error,
		    .errlen = sizeof(q->error),
		    .arg = q,
		};
	}
	if (++b->npend == c->batch)
		flush(c);
	return c->stop;
}

static int scan_fn(void *arg, uint32_t slot, struct stb_abi_task *p, const struct stb_tview_task *v)
{
	struct stb_collector *c = arg;
	if (c->dls)
		stb_deadlock_scan_add(c->dls, slot, p, v);
	if (c->o->no_pthreads && (v->flags & STB_ABI_TASK_F_PTHREAD))
		return 0;
	return take(c, slot, p, v);
}

/* The source from slot first on (the scan of a pass that starts there). */
struct from {
	struct stb_tview_src src;
	uint32_t first;
};

static struct stb_abi_task *from_entry(void *ctx, uint32_t slot, uint32_t *next)
{
	struct from *f = ctx;
	if (slot < f->first) {
		*next = f->first;
		return NULL;
	}
	return f->src.entry(f->src.ctx, slot, next);
}

/* The whole table, from opts.first_slot around to it. */
static void scan_table(struct stb_collector *c, struct stb_tview_scan_result *all)
{
	const struct stb_collect_opts *o = c->o;
	c->scan = c->src.tasks(c->src.ctx, &c->res->clamped, false);
	/* The table is read once for both the tasks and the wait-for graph when
	 * the scan passes every task with an edge. */
	if (o->deadlocks && !o->nids &&
	    (!o->state_mask || (o->state_mask & STB_DEADLOCK_STATES) == STB_DEADLOCK_STATES))
		c->dls = stb_deadlock_scan_new(&c->scan, c->src.owners ? c->src.owners
									 : c->src.drv.mem);
	uint64_t deadline = o->late == STB_COLLECT_LATE_COUNT ? o->trace_end : 0;
	uint32_t first = o->first_slot < c->scan.nslots ? o->first_slot : 0;
	struct from tail = {.src = c->scan, .first = first};
	struct stb_tview_src from = c->scan;
	from.entry = from_entry;
	from.ctx = &tail;
	struct stb_tview_scan_result r;
	stb_tview_scan(&from, o->state_mask, deadline, scan_fn, c, all);
	if (first && !all->stopped && !c->stop) {
		struct stb_tview_src head = c->scan;
		head.nslots = first;
		stb_tview_scan(&head, o->state_mask, deadline, scan_fn, c, &r);
		all->visited += r.visited;
		all->left += r.left;
		all->invalid += r.invalid;
		all->stopped = r.stopped;
		for (unsigned st = 0; st < STB_TASK_NSTATES; st++)
			all->census.by_state[st] += r.census.by_state[st];
		all->census.pthreads += r.census.pthreads;
	}
	drain(c);
}

/* The entry of live task id in its slot, with its checked copy *v (valid
 * until the next call on the source); NULL when id is no live task of the
 * table (*beyond: its slot is beyond the table's capacity). */
static struct stb_abi_task *lookup(const struct stb_collector *c, uint64_t id,
				   struct stb_tview_task *v, bool *beyond)
{
	*beyond = false;
	if ((id >> 32) == 0)
		return NULL; /* no version: no bthread_t ever issued */
	uint32_t slot = STB_ABI_SLOT(id);
	if (slot >= c->src.capacity) {
		*beyond = true;
		return NULL;
	}
	struct stb_abi_task *p = c->src.task(c->src.ctx, slot);
	if (!p)
		return NULL;
	stb_tview_read_task_now(&c->src.drv.workers, p, v);
	return v->id == id && stb_tview_live(v) ? p : NULL;
}

/* The ids asked for, each looked up in its slot when it is its turn. */
static void scan_ids(struct stb_collector *c)
{
	const struct stb_collect_opts *o = c->o;
	struct stb_collect_result *res = c->res;
	c->scan = (struct stb_tview_src){0};
	for (unsigned i = 0; i < o->nids && !c->stop; i++) {
		uint64_t id = o->ids[i];
		uint32_t slot = STB_ABI_SLOT(id);
		if (o->trace_end && stb_now_ns() >= o->trace_end) {
			res->not_traced += o->nids - i;
			break;
		}
		struct stb_tview_task v;
		bool beyond;
		struct stb_abi_task *p = lookup(c, id, &v, &beyond);
		if (!p) {
			res->missing++;
			if (o->missing)
				o->missing(o->arg, id, beyond);
			continue;
		}
		if (o->state_mask &&
		    ((v.bad & STB_TVIEW_BAD_STATE) || !(o->state_mask & (1u << v.state))))
			continue; /* not in the selected states */
		res->visited++;
		take(c, slot, p, &v);
		drain(c); /* one at a time: the next is looked up in its turn */
	}
}

/* ---- the threads ---- */

/* Threads looked at at most (the rest is counted in threads_left). */
#define STB_COLLECT_THREADS_MAX 16384u

static int cmp_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	return a < b ? -1 : a > b;
}

/* What runs on a thread: a worker (its index, the bthread it runs) or a
 * registered pthread (its task id), and that task's system call (copied:
 * the records move as the result grows). */
struct role {
	uint32_t tid;
	uint32_t worker; /* UINT32_MAX: not a worker */
	uint64_t task;   /* 0: none */
	bool in_syscall;
	uint32_t syscall_nr;
	uint64_t syscall_arg0;
};

static void role_call(struct role *r, const struct stb_report_task *t)
{
	r->in_syscall = t->in_syscall;
	r->syscall_nr = stb_report_more(t)->syscall_nr;
	r->syscall_arg0 = stb_report_more(t)->syscall_arg0;
}

static int role_by_tid(const void *x, const void *y)
{
	const struct role *a = x, *b = y;
	return a->tid < b->tid ? -1 : a->tid > b->tid;
}

static int role_by_task(const void *x, const void *y)
{
	const struct role *a = x, *b = y;
	return a->task < b->task ? -1 : a->task > b->task;
}

/* The roles of the target's threads, sorted by tid: its workers' entries,
 * and one pass over the tasks collected. *n: how many. NULL without memory. */
static struct role *roles_of(struct stb_collector *c, size_t *n)
{
	size_t k = 0, cap = STB_ABI_MAX_WORKERS + 16;
	struct role *r = malloc(cap * sizeof(*r));
	if (!r)
		return NULL;
	for (uint32_t w = 0; c->src.worker && w < STB_ABI_MAX_WORKERS; w++) {
		const struct stb_abi_worker *e = c->src.worker(c->src.ctx, w);
		uint32_t tid = e ? __atomic_load_n(&e->tid, __ATOMIC_RELAXED) : 0;
		if (!tid)
			continue;
		/* What it names, switching to it or on its stack (abi.h). */
		uint64_t cur = STB_ABI_CURRENT_ID(__atomic_load_n(&e->current, __ATOMIC_ACQUIRE));
		bool runs = __atomic_load_n(&e->state, __ATOMIC_RELAXED) == STB_WORKER_RUNNING;
		r[k++] = (struct role){.tid = tid, .worker = w, .task = runs ? cur : 0};
	}
	size_t nw = k;
	qsort(r, nw, sizeof(*r), role_by_task);
	for (size_t i = 0; i < c->n; i++) {
		const struct stb_report_task *t = &c->tasks[i];
		if (t->is_thread)
			continue;
		if (t->is_pthread && t->tid) {
			if (k == cap) {
				struct role *g = cap < SIZE_MAX / 2 / sizeof(*r)
						     ? realloc(r, 2 * cap * sizeof(*r))
						     : NULL;
				if (!g)
					break; /* the rest: threads of their own */
				r = g;
				cap *= 2;
			}
			r[k] = (struct role){.tid = t->tid, .worker = UINT32_MAX, .task = t->id};
			role_call(&r[k++], t);
			continue;
		}
		struct role key = {.task = t->id}, *w = nw && t->state == STB_TASK_RUNNING
							 ? bsearch(&key, r, nw, sizeof(*r), role_by_task)
							 : NULL;
		if (w)
			role_call(w, t);
	}
	qsort(r, k, sizeof(*r), role_by_tid);
	*n = k;
	return r;
}

/* One thread into record t and its more m: its name, what runs there, its
 * stack. */
static void thread_fill(struct stb_collector *c, uint32_t tid, const struct role *role,
			struct stb_report_task *t, struct stb_report_more *m)
{
	const struct stb_collect_opts *o = c->o;
	memset(t, 0, sizeof(*t));
	t->is_thread = true;
	t->id = STB_ABI_OWNER_TID(tid);
	t->tid = tid;
	t->state = STB_TASK_RUNNING;
	char comm[STB_ABI_NAME_LEN] = "";
	if (c->src.thread_name)
		c->src.thread_name(c->src.ctx, tid, comm, sizeof(comm));
	if (!(t->name = stb_names_intern(&c->names, comm, sizeof(comm)))) {
		c->res->err = -ENOMEM;
		c->stop = true;
		return;
	}
	if (role) {
		m->task = role->task;
		t->on_worker = role->worker != UINT32_MAX;
		t->worker = role->worker;
		/* The bthread it runs (or the pthread it is) blocks in a call. */
		t->in_syscall = role->in_syscall;
		m->syscall_nr = role->syscall_nr;
		m->syscall_arg0 = role->syscall_arg0;
	}
	const struct stb_capture_ops *ops = c->src.drv.capture;
	if (m->task || !ops || !ops->capture_thread || !o->stacks)
		return; /* its stack is its task's (or none is wanted) */
	uint64_t now = stb_now_ns(), deadline = o->trace_end ? o->trace_end : UINT64_MAX;
	if (o->timeout_ns && now + o->timeout_ns < deadline)
		deadline = now + o->timeout_ns;
	struct stb_capture capt;
	char err[128] = "";
	int rc;
	do {
		memset(&capt, 0, sizeof(capt));
		rc = ops->capture_thread(ops->ctx, tid, deadline, c->src.drv.buf, c->src.drv.cap,
					 &capt, err, sizeof(err));
	} while (rc == -EAGAIN && stb_now_ns() < deadline);
	if (rc == 0) {
		t->mode = capt.mode;
		t->in_syscall = capt.in_syscall;
		m->syscall_nr = capt.syscall_nr;
		m->syscall_arg0 = capt.syscall_arg0;
		t->starting = capt.starting;
		bool reusable;
		walk_into(c, t, &capt, &reusable);
		return;
	}
	if (rc == -ESRCH && !err[0]) {
		t->err = 0; /* it exited meanwhile: no stack */
		return;
	}
	t->err = rc < 0 ? rc : -EIO;
	if (!err[0])
		snprintf(err, sizeof(err), "%s", rc == -EAGAIN ? "it did not settle in time"
								: strerror(-t->err));
	m->error = strdup(err);
	c->res->failed++;
}

static void thread_one(struct stb_collector *c, uint32_t tid, const struct role *role,
		       struct stb_report_task *t)
{
	struct stb_report_more m = {0};
	thread_fill(c, tid, role, t, &m);
	if (!stb_report_more_empty(&m) && !(t->more = more_keep(c, &m))) {
		free((char *)m.error);
		c->res->err = -ENOMEM;
		c->stop = true;
	}
}

/* Every thread of the target after the tasks (opts.threads). */
static void collect_threads(struct stb_collector *c)
{
	const struct stb_collect_opts *o = c->o;
	struct stb_collect_result *res = c->res;
	uint32_t *tids = malloc(STB_COLLECT_THREADS_MAX * sizeof(*tids));
	if (!tids) {
		res->err = -ENOMEM;
		return;
	}
	if (o->phase)
		o->phase("reading the threads");
	int n = c->src.threads(c->src.ctx, tids, STB_COLLECT_THREADS_MAX);
	size_t nroles = 0;
	struct role *roles = roles_of(c, &nroles);
	if (!roles) {
		free(tids);
		res->err = -ENOMEM;
		return;
	}
	unsigned k = n < 0 ? 0 : (unsigned)n < STB_COLLECT_THREADS_MAX ? (unsigned)n
								    : STB_COLLECT_THREADS_MAX;
	if (n > (int)k)
		res->threads_left += (unsigned)n - k;
	qsort(tids, k, sizeof(*tids), cmp_u32);
	for (unsigned i = 0; i < k && !c->stop; i++) {
		if (o->trace_end && stb_now_ns() >= o->trace_end) {
			res->threads_left += k - i;
			break;
		}
		if (gone(c)) {
			res->target_gone = true;
			break;
		}
		struct stb_report_task *t = new_task(c);
		if (!t) {
			res->err = -ENOMEM;
			break;
		}
		struct role key = {.tid = tids[i]};
		const struct role *role = bsearch(&key, roles, nroles, sizeof(*roles), role_by_tid);
		thread_one(c, tids[i], role, t);
		c->n++;
		res->threads++;
	}
	free(roles);
	free(tids);
}

/* ---- holders and names ---- */

static uint64_t idset_hash(const void *ctx, uint32_t idx)
{
	const struct idset *s = ctx;
	return stb_hash_u64(s->v[idx]);
}

static bool idset_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct idset *s = ctx;
	return s->v[idx] == *(const uint64_t *)key;
}

/* Adds id to s: 1 when it is new, 0 when it was there, -ENOMEM. */
static int idset_add(struct idset *s, uint64_t id)
{
	if (s->n >= UINT32_MAX - 1 || stb_hashset_reserve(&s->set, s, idset_hash) != 0 ||
	    stb_grow(&s->v, &s->cap, s->n + 1, sizeof(*s->v)) != 0)
		return -ENOMEM;
	uint32_t *e = stb_hashset_find(&s->set, stb_hash_u64(id), s, idset_eq, &id);
	if (*e)
		return 0;
	s->v[s->n] = id;
	*e = (uint32_t)++s->n;
	s->set.n++;
	return 1;
}

static void idset_clear(struct idset *s)
{
	stb_hashset_clear(&s->set);
	s->n = 0;
}

static void idset_free(struct idset *s)
{
	stb_hashset_free(&s->set);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

static uint64_t task_hash(const void *ctx, uint32_t idx)
{
	const struct stb_collector *c = ctx;
	return stb_hash_u64(c->tasks[idx].id);
}

static bool task_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct stb_collector *c = ctx;
	return c->tasks[idx].id == *(const uint64_t *)key;
}

/* Is task id in the result? (The set is brought up to date first.) false
 * without memory: the caller then adds or names a task twice at worst. */
static bool in_result(struct stb_collector *c, uint64_t id)
{
	for (; c->nset < c->n; c->nset++) {
		uint64_t k = c->tasks[c->nset].id;
		if (c->nset >= UINT32_MAX - 1 || stb_hashset_reserve(&c->taskset, c, task_hash) != 0)
			return false;
		uint32_t *e = stb_hashset_find(&c->taskset, stb_hash_u64(k), c, task_eq, &k);
		if (!*e) {
			*e = (uint32_t)c->nset + 1;
			c->taskset.n++;
		}
	}
	return stb_hashset_get(&c->taskset, stb_hash_u64(id), c, task_eq, &id) >= 0;
}

/* Adds the tasks the result's tasks wait on, and those they wait on, until
 * trace_end: each traced as the selected ones, marked added. */
static void add_holders(struct stb_collector *c)
{
	const struct stb_collect_opts *o = c->o;
	c->adding = true;
	for (size_t i = 0; i < c->n && !c->stop; i++) {
		uint64_t id = stb_report_waits_for(&c->tasks[i]);
		if (!id || in_result(c, id) || idset_add(&c->tried, id) != 1)
			continue; /* there, or looked up already (or no memory) */
		if (o->trace_end && stb_now_ns() >= o->trace_end)
			break; /* the rest are named only (add_refs) */
		struct stb_tview_task v;
		bool beyond;
		struct stb_abi_task *p = lookup(c, id, &v, &beyond);
		if (!p)
			continue;
		take(c, STB_ABI_SLOT(id), p, &v);
		drain(c);
	}
	c->adding = false;
}

/* Names task id from the table when the result does not hold it (a ref
 * with an empty name and no kind: not a live task). */
static void add_ref(struct stb_collector *c, uint64_t id)
{
	if (!id || STB_ABI_OWNER_IS_TID(id) || in_result(c, id) ||
	    stb_grow(&c->refs, &c->caprefs, c->nrefs + 1, sizeof(*c->refs)) != 0 ||
	    idset_add(&c->refids, id) != 1)
		return;
	struct stb_report_ref *r = &c->refs[c->nrefs++];
	memset(r, 0, sizeof(*r));
	r->id = id;
	struct stb_tview_task v;
	bool beyond;
	if (lookup(c, id, &v, &beyond)) {
		r->is_pthread = (v.flags & STB_ABI_TASK_F_PTHREAD) != 0;
		memcpy(r->name, v.name, sizeof(r->name));
	}
}

static int ref_cmp(const void *x, const void *y)
{
	const struct stb_report_ref *a = x, *b = y;
	return a->id < b->id ? -1 : a->id > b->id;
}

/* The names of the tasks the result mentions but does not hold: creators,
 * owners not traced, members of its deadlocks; sorted by id. */
static void add_refs(struct stb_collector *c)
{
	for (size_t i = 0; i < c->n; i++) {
		add_ref(c, c->tasks[i].creator.id);
		add_ref(c, stb_report_waits_for(&c->tasks[i]));
	}
	for (size_t k = 0; k < c->dl.nmembers; k++)
		add_ref(c, c->dl.members[k].id);
	if (c->nrefs > 1)
		qsort(c->refs, c->nrefs, sizeof(*c->refs), ref_cmp);
}

/* Forgets the previous pass's tasks and deadlocks. */
static void pass_reset(struct stb_collector *c)
{
	for (size_t i = 0; i < c->n; i++)
		if (!c->tasks[i].stack)
			free(c->tasks[i].frames);
	c->n = 0;
	mores_clear(c);
	stb_names_clear(&c->names);
	if (c->inflight) /* a pass that ended early (none does: each drains) */
		stb_copier_wait(c->copier);
	c->inflight = false;
	for (unsigned k = 0; k < 2; k++)
		c->b[k].npend = c->b[k].njobs = 0;
	c->stop = c->late = false;
	stb_hashset_clear(&c->taskset);
	idset_clear(&c->tried);
	idset_clear(&c->refids);
	c->nset = c->nrefs = 0;
	stb_deadlock_scan_free(c->dls);
	c->dls = NULL;
	stb_deadlocks_free(&c->dl);
}

int stb_collect(struct stb_collector *c, const struct stb_collect_opts *o,
		struct stb_collect_result *res)
{
	memset(res, 0, sizeof(*res));
	pass_reset(c);
	c->pass++;
	c->o = o;
	c->res = res;
	c->now = o->now ? o->now : stb_now_ns();
	c->walk_max = o->walk_max ? o->walk_max : STB_REPORT_WALK_MAX;
	if (c->walk_max > STB_REPORT_WALK_MAX)
		c->walk_max = STB_REPORT_WALK_MAX;
	c->keep = o->keep && o->keep < c->walk_max ? o->keep : c->walk_max;
	c->intern = o->intern || !o->each;
	/* Without a stackset each walk is handed over before the next one. */
	c->batch = c->intern ? STB_DRIVER_MANY_MAX : 1;
	c->piped = c->intern && o->pipeline && c->src.drv.mem->read_many && pipe_setup(c) == 0;
	if (c->piped)
		c->batch = STB_COLLECT_PIPE_BATCH;
	stb_stackset_next(c->stacks);

	struct stb_tview_scan_result scan = {0};
	if (o->nids)
		scan_ids(c);
	else
		scan_table(c, &scan);
	res->visited += scan.visited;
	res->not_traced += scan.left;
	res->invalid = scan.invalid;
	res->stopped = c->stop || scan.stopped;
	if (!res->target_gone && gone(c))
		res->target_gone = true;
	/* The census: read by the scan of the whole table. */
	if (!o->nids && !scan.stopped && !o->each) {
		res->census = true;
		res->tasks_by_state = scan.census;
	}
	bool holders = o->holders && !o->each && !res->target_gone && !res->err;
	if (holders && !res->stopped)
		add_holders(c);

	/* The deadlocks of the whole table, each edge validated again. */
	if (o->deadlocks && !res->target_gone && !res->err) {
		if (o->phase)
			o->phase("searching deadlocks");
		int rc;
		if (c->dls && !scan.left && !res->stopped && !res->err) {
			rc = stb_deadlock_scan_end(c->dls, false, o->deadlock_end, &c->dl);
		} else {
			struct stb_tview_src all = c->src.tasks(c->src.ctx, NULL, true);
			struct stb_tview_census census;
			rc = stb_deadlock_find(&all, c->src.owners ? c->src.owners : c->src.drv.mem,
					       o->deadlock_end, &c->dl, &census);
			if (rc == 0 && !res->census && !o->each) {
				res->census = true;
				res->tasks_by_state = census;
			}
		}
		res->deadlocks = rc == 0 ? &c->dl : NULL;
	}
	stb_deadlock_scan_free(c->dls);
	c->dls = NULL;
	if (!res->census && !o->each && !res->target_gone) {
		/* A pass that read part of the table: the rest only counted. */
		struct stb_tview_src all = c->src.tasks(c->src.ctx, NULL, true);
		struct stb_tview_scan_result r;
		stb_tview_scan(&all, 0, 0, NULL, NULL, &r);
		res->census = true;
		res->tasks_by_state = r.census;
	}
	/* The threads, after the tasks (a registered pthread's record is found
	 * among them). */
	if (o->threads && c->src.threads && !o->nids && !o->state_mask && !o->stuck_ns &&
	    !o->each && !res->target_gone && !res->err && !c->stop)
		collect_threads(c);
	if (holders) {
		add_refs(c);
		res->refs = c->refs;
		res->nrefs = c->nrefs;
	}
	if (c->copier) /* no pages past the last record */
		stb_copier_ahead(c->copier, NULL, NULL);
	/* The stacks no task holds now (nor a reusable one of this pass). */
	stb_stackset_sweep(c->stacks);
	if (o->reuse == STB_COLLECT_REUSE_LAST)
		reuse_prune(c);
	res->tasks = c->tasks;
	res->n = c->n;
	c->o = NULL;
	c->res = NULL;
	return 0;
}

/* ---- the collector ---- */

/* Room for n tasks in each batch. 0 or -ENOMEM (the room stays as it was). */
static int batches_grow(struct stb_collector *c, unsigned n)
{
	for (unsigned k = 0; k < 2 && c->bcap < n; k++) {
		struct batch *b = &c->b[k];
		struct pending *p = realloc(b->pend, n * sizeof(*p));
		if (!p)
			return -ENOMEM;
		b->pend = p;
		struct stb_driver_job *j = realloc(b->jobs, n * sizeof(*j));
		if (!j)
			return -ENOMEM;
		b->jobs = j;
	}
	if (c->bcap < n)
		c->bcap = n;
	return 0;
}

/* The copier, its batches and their buffers (once for the collector's
 * life). 0, or -errno: the passes copy by themselves. */
static int pipe_setup(struct stb_collector *c)
{
	if (c->copier)
		return 0;
	if (batches_grow(c, STB_COLLECT_PIPE_BATCH) != 0)
		return -ENOMEM;
	for (unsigned k = 0; k < 2; k++)
		if (!c->b[k].buf && !(c->b[k].buf = malloc(STB_COLLECT_PIPE_BUF)))
			return -ENOMEM;
	/* Half the CPUs copy, up to 4: the collector's own thread is busy too
	 * (on 2 CPUs a second copier made a million-task run 1.0 -> 1.2-1.4 s;
	 * more cores were not measured). */
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned threads = cpus >= 8 ? 4u : cpus >= 2 ? (unsigned)cpus / 2 : 1u;
	c->copier = stb_copier_new(threads);
	return c->copier ? 0 : -errno;
}

struct stb_collector *stb_collector_new(const struct stb_collect_src *src, size_t memo_bytes)
{
	struct stb_collector *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->src = *src;
	c->stacks = stb_stackset_new();
	c->memo = stb_walkmemo_new(memo_bytes);
	c->scratch = calloc(STB_REPORT_WALK_MAX, sizeof(*c->scratch));
	if (!c->stacks || !c->memo || !c->scratch || batches_grow(c, STB_DRIVER_MANY_MAX) != 0) {
		stb_collector_free(c);
		errno = ENOMEM;
		return NULL;
	}
	return c;
}

void stb_collector_free(struct stb_collector *c)
{
	if (!c)
		return;
	pass_reset(c);
	stb_copier_free(c->copier); /* before the records it may fault in go */
	if (c->tasks)
		munmap(c->tasks, c->tasks_bytes);
	stb_names_free(&c->names);
	free(c->reuse);
	stb_hashset_free(&c->reuse_set);
	stb_hashset_free(&c->taskset);
	idset_free(&c->tried);
	idset_free(&c->refids);
	free(c->refs);
	stb_stackset_free(c->stacks);
	stb_walkmemo_free(c->memo);
	for (unsigned k = 0; k < 2; k++) {
		free(c->b[k].pend);
		free(c->b[k].jobs);
		free(c->b[k].buf);
	}
	free(c->scratch);
	free(c);
}

struct stb_stackset *stb_collector_stacks(struct stb_collector *c)
{
	return c->stacks;
}

struct stb_walkmemo *stb_collector_memo(struct stb_collector *c)
{
	return c->memo;
}
