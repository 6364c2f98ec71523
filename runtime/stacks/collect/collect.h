/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one collector: every report of tasks is gathered here -- stb_dump, the
 * debug endpoint and the watchdog in process, stb-bpf-loader's snapshot (a
 * live target, --every, --core) and its profiler's off-CPU pass. A pass
 * scans the table (or looks up the ids asked for), reads each task's wait
 * block, tests whether it is stuck, traces it through the trace driver --
 * batched, or reused when it has not run since the last pass -- checks that
 * it did not move meanwhile, unwinds and interns its stack (stackset.h),
 * searches the table's deadlocks, and leaves the report model
 * (report/model.h). Nothing the table says is trusted (tview.h, driver.h).
 */
#ifndef STB_RUNTIME_STACKS_COLLECT_COLLECT_H
#define STB_RUNTIME_STACKS_COLLECT_COLLECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "report/model.h"
#include "report/stackset.h"
#include "stb/abi.h"
#include "table/deadlock.h"
#include "table/driver.h"
#include "table/tview.h"

/*
 * Where a collector's tasks come from: one target (this process, another
 * one, a core file), set up by its producer and valid while the collector
 * is. The driver's buffer must hold STB_DRIVER_MANY_MAX stacks' worth for
 * batches to pay (a smaller one traces more of them alone).
 */
struct stb_collect_src {
	/* The slots in use now as a scan source (*clamped: the header claimed
	 * more than its capacity; may be NULL); again: a second scan of the same
	 * pass (the deadlock search), whose gaps were counted already. */
	struct stb_tview_src (*tasks)(void *ctx, bool *clamped, bool again);
	/* The entry of slot, valid until the next call on the source; NULL when
	 * it cannot be read. */
	struct stb_abi_task *(*task)(void *ctx, uint32_t slot);
	/* Worker w's entry (what the monitor published), NULL when unknown. */
	const struct stb_abi_worker *(*worker)(void *ctx, uint32_t w);
	/* The target's threads: up to max tids into tids, returning how many
	 * there are (more than max: the rest is left out) or -errno; and one
	 * thread's name (NUL-terminated, "" when unknown). NULL: threads are
	 * not collected. Captured with drv.capture->capture_thread. */
	int (*threads)(void *ctx, uint32_t *tids, unsigned max);
	void (*thread_name)(void *ctx, uint32_t tid, char *name, size_t len);
	void *ctx;
	uint32_t capacity; /* slots of the published table: ids beyond are not in it */
	/* Owner words of mutexes, rwlocks and ids are read again with this
	 * (NULL: the owner seen when the task blocked). */
	const struct stb_mem *owners;
	struct stb_driver drv; /* how one task is traced */
	struct stb_unw_proc *unw;
};

/* stb_collect_opts.late: what becomes of the tasks the pass reaches after
 * its trace_end. */
enum {
	STB_COLLECT_LATE_COUNT = 0, /* counted in not_traced, nothing else */
	STB_COLLECT_LATE_STOP,      /* the scan stops there (at_slot says where) */
	STB_COLLECT_LATE_PASS,      /* handed to each() untraced (late set), unless
				       their stack can be reused or they have none */
};

/* stb_collect_opts.reuse: which earlier traces a task's stack may be taken
 * from (the same id and run sequence: it has not run since, so its stack is
 * the same; abi.h). Only ready and suspended tasks are reused. */
enum {
	STB_COLLECT_REUSE_NONE = 0,
	STB_COLLECT_REUSE_LAST, /* the previous pass's (resident snapshots) */
	STB_COLLECT_REUSE_ANY,  /* any pass's since stb_collector_forget (the profiler) */
};

/* One collected task as each() sees it. */
struct stb_collect_task {
	struct stb_report_task t; /* the report's record; its frames are valid
				     during the call (the interned stack's, or
				     scratch without a stackset) */
	uint32_t slot;
	uint32_t seq;             /* the run sequence its stack belongs to */
	bool reused;              /* taken from an earlier pass (not traced) */
	bool late;                /* reached after trace_end: not traced */
	/* The consumer's words kept with a reusable stack: read them when
	 * reused, set them to keep something with it (the profiler's ids in its
	 * own builder); forget: do not reuse this stack next time. */
	int64_t user[2];
	bool forget;
};

struct stb_collect_opts {
	const uint64_t *ids; /* just these tasks, each looked up in its slot */
	unsigned nids;       /* 0: the whole table */
	uint32_t first_slot; /* the table from this slot, wrapping around */
	unsigned state_mask; /* 1u << state to include; 0: every state */
	bool no_pthreads;    /* registered pthreads left out */
	bool stacks;         /* trace each task (else: its entry's fields only) */
	bool no_why;         /* leave the why-members out (no stuck test either) */
	uint64_t stuck_ns;   /* only tasks stuck this long (stb_collect_stuck) */
	uint64_t now;        /* CLOCK_MONOTONIC of the stuck test (0: the pass's start) */
	unsigned walk_max;   /* frames walked per stack (the rest is not counted);
				0: STB_REPORT_WALK_MAX */
	unsigned keep;       /* frames kept per stack, the rest counted in beyond;
				0: walk_max */
	uint64_t timeout_ns; /* one task's trace at most (0: until trace_end) */
	uint64_t trace_end;  /* CLOCK_MONOTONIC: no trace starts after it (0: none) */
	uint64_t walk_end;   /* CLOCK_MONOTONIC: walks end there (0: trace_end) */
	unsigned late;       /* STB_COLLECT_LATE_* */
	unsigned reuse;      /* STB_COLLECT_REUSE_* */
	bool intern;         /* stacks into the collector's stackset (else each()
				gets them in scratch, valid during the call);
				always without each() */
	bool pipeline;       /* with intern: the stacks of the next batch are copied on
				a thread of the collector's (copier.h) while it unwinds
				this one -- for a source whose memory may be read from
				another thread (the loader's target); the passes copy by
				themselves when the thread cannot be had */
	bool deadlocks;      /* search the table's wait-for graph: its deadlocks, and
				what each task holds that others wait on */
	bool holders;        /* without each(): add to the result every task a selected
				one waits on (stb_report_waits_for), and those they wait
				on, traced as the selected ones (but never after
				trace_end), marked added; and the names (refs) of the
				tasks the result mentions but does not hold (creators,
				owners) */
	bool threads;        /* every thread of the target too (src->threads), after
				the tasks, each a record with is_thread set: a worker
				running a bthread, and a registered pthread, name that
				task instead of a stack of their own. Whole-table
				passes only (not with ids, state_mask or stuck_ns) */
	uint64_t deadlock_end; /* CLOCK_MONOTONIC: the search ends by then (0: none) */
	/* Every selected task, once traced (or reused, late, failed); NULL: kept
	 * in the result. Non-zero: stop the pass. */
	int (*each)(void *arg, struct stb_collect_task *ct);
	/* Each trace made, with the driver's return code (held and capture
	 * times: -vv), NULL: none. */
	void (*traced)(void *arg, uint64_t id, int rc, const struct stb_capture *capt);
	/* Each id of ids that is not a live task of the table (beyond: its
	 * slot is beyond the table's capacity: it may be one, untraceable),
	 * NULL: none. */
	void (*missing)(void *arg, uint64_t id, bool beyond);
	void *arg;
	/* What the pass is doing now, a string literal (a deadline's message),
	 * NULL: not told. */
	void (*phase)(const char *what);
};

/* What a pass found. tasks (without each()) and deadlocks stay valid until
 * the next pass or stb_collector_free. */
struct stb_collect_result {
	struct stb_report_task *tasks;
	size_t n;
	const struct stb_deadlocks *deadlocks; /* the table's; NULL: not searched */
	struct stb_report_ref *refs; /* holders: tasks named but not in tasks, by id */
	size_t nrefs;
	bool census;          /* the live tasks were all read: census is set */
	struct stb_tview_census tasks_by_state; /* the table's live tasks */
	uint64_t added;       /* tasks in tasks because selected ones wait on them */
	uint64_t visited;     /* live tasks of the selection looked at */
	uint64_t not_traced;  /* selected tasks left out: trace_end (LATE_COUNT) */
	uint64_t invalid;     /* live entries with a state out of range */
	uint64_t failed;      /* tasks whose trace failed (kept with their error) */
	uint64_t finished;    /* tasks that finished while the pass went on */
	uint64_t missing;     /* ids that are not live tasks */
	uint64_t reused;      /* stacks taken from an earlier pass */
	uint64_t late;        /* tasks reached after trace_end (LATE_PASS) */
	uint64_t threads;     /* threads among tasks (is_thread; the last ones) */
	uint64_t threads_left; /* threads not collected: beyond the bound, or the deadline */
	uint64_t held, held_sum_ns, held_max_ns; /* traces and how long each held its task */
	uint32_t at_slot;     /* LATE_STOP, LATE_PASS: the first slot reached late
				 (where the next pass should start) */
	bool clamped;         /* the header claimed more slots than its capacity */
	bool stopped;         /* each() or the target's exit ended the pass */
	bool target_gone;     /* the target exited */
	int err;              /* -ENOMEM: the pass ended early (tasks so far kept) */
};

struct stb_collector;

/*
 * A collector of src's tasks (the struct is copied; what it points to is
 * borrowed). stackset: keep the interned stacks from pass to pass (a
 * resident producer), else they live until the next pass. memo_bytes: memory
 * for remembered walks (walkmemo.h; 0: its default). NULL + errno (ENOMEM).
 * Not thread-safe: one producer.
 */
struct stb_collector *stb_collector_new(const struct stb_collect_src *src, size_t memo_bytes);

/* Frees c and everything of its passes; accepts NULL. */
void stb_collector_free(struct stb_collector *c);

/*
 * One pass as o says (see above), into *res (its earlier contents are not
 * read). Returns 0 (res filled, maybe
 * partial: res->err, target_gone, not_traced), or -ENOMEM when nothing could
 * be set up. Memory grows with the selected tasks and their distinct
 * stacks; every trace and walk is bounded by o's deadlines and the driver's
 * and unwinder's budgets. May block until o->trace_end (or each trace's
 * timeout). Not thread-safe for one collector.
 */
int stb_collect(struct stb_collector *c, const struct stb_collect_opts *o,
		struct stb_collect_result *res);

/* The interned stacks of c (its report writes their JSON once), and the
 * walk memo's statistics. */
struct stb_stackset *stb_collector_stacks(struct stb_collector *c);
struct stb_walkmemo *stb_collector_memo(struct stb_collector *c);

/* Forgets every reusable stack (a new profile). */
void stb_collector_forget(struct stb_collector *c);

/*
 * The parts of a pass that a check without traces shares (the watchdog's):
 * stb_collect_entry fills t and its more (t->more = more) -- id, state,
 * kind, name (pointing into v), and why when asked (why: where the words it
 * was read with go, for stb_report_task_why_recheck; NULL: not asked) --
 * from entry p (its checked copy v); stb_collect_stuck says whether t is
 * selected by o->stuck_ns at now (CLOCK_MONOTONIC): always when it is 0.
 * Read only.
 *
 * Stuck, the one meaning of --stuck, stb_dump_opts.stuck_ns, the debug
 * endpoint's ?stuck= and the watchdog: blocked for stuck_ns or more on
 * anything but an fd or a sleep, or running that long without a switch (a
 * bthread that starves its worker). Waits on an fd (idle keep-alive
 * connections, listeners, the debug endpoint) and sleeps (back-offs,
 * periodic jobs) are how a healthy server waits: never stuck; nor are ready
 * tasks, nor registered pthreads outside a bthread call (what they do is
 * not known).
 */
void stb_collect_entry(const struct stb_collect_src *src, struct stb_abi_task *p,
		       const struct stb_tview_task *v, struct stb_report_task *t,
		       struct stb_report_more *more, struct stb_wait_seen *why);
bool stb_collect_stuck(const struct stb_collect_opts *o, const struct stb_report_task *t,
		       uint64_t now);

#endif /* STB_RUNTIME_STACKS_COLLECT_COLLECT_H */
