/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A reader's view of a task table (include/stb/abi.h) that it must not trust:
 * the table of another process, of a core file, or the own one. One header
 * check, one range-checked copy of a task entry, one scan of the live tasks --
 * for stb_dump, the debug endpoint, stb-bpf-loader and its profiler. Every
 * size, count, state and kind is checked before it is used; the scan reads
 * only the slots that exist and spends memory on live tasks only.
 */
#ifndef STB_RUNTIME_STACKS_TABLE_TVIEW_H
#define STB_RUNTIME_STACKS_TABLE_TVIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stb/abi.h"

/* What a checked header says (copied out: the live header is never trusted
 * again). */
struct stb_tview_info {
	unsigned abi_version;
	uint32_t capacity; /* task slots, 1 .. STB_ABI_MAX_CAPACITY */
	uint32_t backing;  /* enum stb_abi_backing */
	uint32_t pid;
	uint64_t table_addr;
	uint64_t table_size; /* == STB_ABI_TABLE_SIZE(capacity) */
	uint32_t trace_signal;
	uint32_t flags;
};

/*
 * Checks header h (a copy) as the table of a backing of real_size bytes (0:
 * unknown). Returns 0 and fills *info; -ENOENT without the magic (not a stb
 * table, or one still being created); -EPROTO when version, entry size,
 * region sizes, capacity, table size or backing are not what this reader
 * understands, or the backing is smaller than the table; why[len] names the
 * field and both values. Pure; thread-safe.
 */
int stb_tview_check_header(const struct stb_abi_header *h, uint64_t real_size,
			   struct stb_tview_info *info, char *why, size_t len);

/* Counters of a live header, re-read and clamped (the target may change
 * them at any time). *clamped (may be NULL) is set when a value was out of
 * range: slot_hwm > capacity, nworkers > max_workers. */
uint32_t stb_tview_hwm(const struct stb_abi_header *h, const struct stb_tview_info *info,
		       bool *clamped);
uint32_t stb_tview_nworkers(const struct stb_abi_header *h, bool *clamped);

/*
 * Where a table's worker entries are. A bthread's word says READY or
 * READY_NO_STACK while it runs (abi.h, "Running"): only the worker entry
 * whose current names it tells it from a queued one. n is re-read from
 * hdr->nworkers (clamped) when hdr is set (a live table), else fixed.
 */
struct stb_tview_wsrc {
	const struct stb_abi_worker *w; /* entries 0 .. n-1; NULL: none known */
	const struct stb_abi_header *hdr;
	uint32_t n;
};

/* The worker entries at one moment: what each worker's current named
 * (12 KiB: allocate it, do not put it on a bthread's stack). */
struct stb_tview_workers {
	uint32_t n;
	uint64_t cur[STB_ABI_MAX_WORKERS];
	uint32_t tid[STB_ABI_MAX_WORKERS];
};

/* Reads the worker entries of src now into *ws (n = 0 without entries).
 * Thread-safe; reads with acquire loads. */
void stb_tview_workers_read(const struct stb_tview_wsrc *src, struct stb_tview_workers *ws);

/*
 * How the workers in ws name bthread id: STB_TASK_RUNNING (a worker's current
 * is id), STB_TASK_ABOUT_TO_RUN (id | STB_ABI_CURRENT_SWITCHING: on its way
 * in) or STB_TASK_UNUSED (none: not on a worker); *worker (may be NULL) is
 * that worker's index. Pure.
 */
unsigned stb_tview_named(const struct stb_tview_workers *ws, uint64_t id, uint32_t *worker);

/*
 * stb_tview_named on the live entries, read now: what a stack copy's
 * validation asks before and after the copy (abi.h). Thread-safe.
 */
unsigned stb_tview_named_now(const struct stb_tview_wsrc *src, uint64_t id, uint32_t *worker);

/* stb_tview_task.bad */
#define STB_TVIEW_BAD_STATE 0x01u  /* state >= STB_TASK_NSTATES */
#define STB_TVIEW_BAD_KIND 0x02u   /* wait kind >= STB_WAIT_NKINDS */
#define STB_TVIEW_BAD_WORKER 0x04u /* a bthread's word says RUNNING or ABOUT_TO_RUN
				      (only a worker's current may: abi.h) */
#define STB_TVIEW_BAD_STACK 0x08u  /* stack_lo >= stack_hi once it has a stack */
#define STB_TVIEW_BAD_NAME 0x10u   /* name not NUL-terminated (cut) */

/* A range-checked copy of one task entry (taken at one moment: the entry may change
 * while it is copied; seq says which run it belongs to). */
struct stb_tview_task {
	uint64_t id;
	uint64_t word;  /* as read: a running bthread's says READY */
	unsigned state; /* the task's state: STB_ABI_STATE(word), or for a bthread
			   that a worker names RUNNING / ABOUT_TO_RUN (abi.h);
			   valid only without BAD_STATE */
	uint32_t seq;
	uint32_t flags; /* STB_ABI_TASK_F_* */
	uint32_t worker, tid; /* where it runs: the naming worker's index and tid
				 (STB_ABI_MAX_WORKERS, 0: none); a registered
				 pthread's entry's own */
	uint32_t tag;
	uint64_t since_ns;
	uint64_t stack_lo, stack_hi;
	unsigned wait_kind; /* STB_WAIT_NONE when out of range (BAD_KIND) */
	uint64_t wait_word, wait_object, wait_owner, wait_deadline, wait_extra;
	uint64_t creator_id, creator_ip;
	uint32_t creator_tid;
	char name[STB_ABI_NAME_LEN]; /* always NUL-terminated */
	unsigned bad;                /* STB_TVIEW_BAD_* */
};

/* Copies entry p into *v, range-checking every field; a bthread whose word
 * says READY or READY_NO_STACK is RUNNING or ABOUT_TO_RUN when ws (NULL:
 * none) names it. Does not write p. Thread-safe; reads p with relaxed atomic
 * loads (word with acquire). */
void stb_tview_read_task(const struct stb_tview_workers *ws, const struct stb_abi_task *p,
			 struct stb_tview_task *v);

/* stb_tview_read_task with the worker entries of src read after p's word
 * (stb_tview_named_now): for one task at a time. */
void stb_tview_read_task_now(const struct stb_tview_wsrc *src, const struct stb_abi_task *p,
			     struct stb_tview_task *v);

/* Is a task in this copy live (an id, a state that is not unused/destroyed)? */
bool stb_tview_live(const struct stb_tview_task *v);

/*
 * Where the entries come from. entry(ctx, slot, &next) returns the entry of
 * slot, or NULL when the slots [slot, next) hold nothing (never written: a
 * hole of a memfd, private memory not mapped); next must be > slot. An entry
 * stays valid while the slots asked for stay in its window (aligned, of
 * window slots) or the next one asked for: a reader that keeps entries (a
 * batch of traces) is done with them before it moves on to a third window.
 * window 0: entries stay valid as long as the source.
 */
struct stb_tview_src {
	struct stb_abi_task *(*entry)(void *ctx, uint32_t slot, uint32_t *next);
	void *ctx;
	uint32_t nslots; /* scan [0, nslots): min(slot_hwm, capacity) */
	struct stb_tview_wsrc workers; /* the table's worker entries */
	uint32_t window; /* slots of a window of entries; 0: one for everything */
};

/* The entry of slot in src, NULL when its window cannot be mapped. */
struct stb_abi_task *stb_tview_at(const struct stb_tview_src *src, uint32_t slot);

/* The first entry of src at or after *slot, which is set to its slot; NULL
 * past the end. Slots whose window cannot be mapped are skipped. Iterate
 * with: for (slot = 0; (p = stb_tview_next(src, &slot)); slot++). */
struct stb_abi_task *stb_tview_next(const struct stb_tview_src *src, uint32_t *slot);

/* Called for each live task whose state is in the mask: p is the entry (valid
 * during the call), v its checked copy. Return non-zero to stop the scan. */
typedef int (*stb_tview_scan_fn)(void *arg, uint32_t slot, struct stb_abi_task *p,
				 const struct stb_tview_task *v);

/* The live tasks of a table by state (a report's header line). */
struct stb_tview_census {
	uint64_t by_state[STB_TASK_NSTATES]; /* states in range only */
	uint64_t pthreads;                   /* registered pthreads among them */
};

struct stb_tview_scan_result {
	struct stb_tview_census census; /* every live task read, whatever the mask
					   and the deadline (not past a stop) */
	uint64_t visited; /* live tasks passed to fn */
	uint64_t left;    /* live tasks in the mask not passed to fn: the deadline */
	uint64_t invalid; /* live tasks with a state out of range (passed to fn
			     only when state_mask is 0) */
	bool stopped;     /* fn returned non-zero */
};

/*
 * Calls fn for every live task of src in slot order whose state is in
 * state_mask (bit 1u << state; 0 = every state, out-of-range states
 * included); the states of bthreads as the worker entries said when the scan
 * began (read once, then each task's entry). Past deadline (CLOCK_MONOTONIC ns; 0 = none; read before every
 * 16th call of fn) fn is not called any more: the rest of the table is only
 * counted, in r->left. fn NULL: every live task is only counted (the
 * census). Memory: a snapshot of the worker entries (12 KiB).
 * Returns 0 (r filled). Thread-safety: as src->entry.
 */
int stb_tview_scan(const struct stb_tview_src *src, unsigned state_mask, uint64_t deadline,
		   stb_tview_scan_fn fn, void *arg, struct stb_tview_scan_result *r);

#endif /* STB_RUNTIME_STACKS_TABLE_TVIEW_H */
