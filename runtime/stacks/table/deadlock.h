/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wait-for graph of a task table: its cycles (deadlocks), and what each
 * task holds that others wait on. A task that
 * waits on a mutex, a write-locked rwlock or a locked bthread_id points at
 * the owner its owner word names now; one that joins points at the joined
 * bthread. Each task waits on one thing, so the graph is functional and its
 * cycles are found in linear time (a task that waits for what it holds
 * itself is a cycle of one). Before a cycle is reported every member
 * is read again -- same id, same task word (it has not run since), same wait,
 * same owner word -- so a graph that moves while it is read gives no false
 * cycle. Work and memory are bounded (a hostile table can claim anything):
 * at most STB_DEADLOCK_MAX_NODES waiting tasks are followed, by a deadline.
 */
#ifndef STB_RUNTIME_STACKS_TABLE_DEADLOCK_H
#define STB_RUNTIME_STACKS_TABLE_DEADLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "table/driver.h"
#include "table/tview.h"
#include "table/wait.h"

#define STB_DEADLOCK_MAX_NODES (1u << 20) /* waiting tasks followed at most */
#define STB_DEADLOCK_MAX_CYCLE 4096u      /* members of one reported cycle at most */
/* The states (1u << STB_TASK_*) in which a task can have a wait-for edge. */
#define STB_DEADLOCK_STATES (1u << STB_TASK_SUSPENDED | 1u << STB_TASK_RUNNING)

/* One member of a cycle: it waits (wait) on what held_by holds. */
struct stb_deadlock_member {
	uint64_t id;
	uint32_t slot;
	bool is_pthread;
	struct stb_wait_view wait;
	uint64_t word;     /* its task word when the wait was read */
	uint64_t since_ns; /* when it blocked, 0 = unknown */
	uint64_t held_by; /* the next member's id */
};

/* What a task holds that others wait on: the waiters' edges to it, by
 * object. */
struct stb_deadlock_hold {
	uint64_t owner;   /* the holder's task id */
	uint64_t object;  /* the mutex, rwlock or bthread_id (as its waiters name it) */
	unsigned kind;    /* STB_WAIT_MUTEX, STB_WAIT_RWLOCK_WR (an rwlock held for
			     writing: its readers and writers wait) or STB_WAIT_ID */
	uint64_t waiting; /* tasks waiting on it now */
};

struct stb_deadlocks {
	struct stb_deadlock_member *members; /* the cycles, one after the other */
	size_t nmembers;
	size_t *starts; /* cycle c is members[starts[c] .. starts[c + 1]) */
	size_t ncycles;
	struct stb_deadlock_hold *holds; /* sorted by owner, then kind and object */
	size_t nholds;
	uint64_t waiting;  /* tasks with a wait-for edge */
	uint64_t moved;    /* cycles dropped because a member moved meanwhile */
	bool partial;      /* the deadline or STB_DEADLOCK_MAX_NODES ended the search */
};

/*
 * Finds the deadlocks and the holds of the table src (entries read as
 * tview.h says; the entry of a slot is looked up again to validate), reading
 * owner words with mem (8 aligned bytes each; a read that fails is no edge),
 * until deadline (CLOCK_MONOTONIC ns; 0 = none); *census (may be NULL)
 * receives the live tasks its scan read, by state. Returns 0 with *out
 * filled (free it with stb_deadlocks_free), or -ENOMEM. Cycles through
 * unregistered pthreads cannot be seen (nothing says what they wait on), nor
 * what they hold. Thread-safety: as src->entry and mem->read.
 */
int stb_deadlock_find(const struct stb_tview_src *src, const struct stb_mem *mem,
		      uint64_t deadline, struct stb_deadlocks *out,
		      struct stb_tview_census *census);

/*
 * The same search fed by a scan of the caller's own, so that one pass over
 * the table serves both: stb_deadlock_scan_new keeps a copy of src (members
 * are looked up again in it) and mem; NULL + errno on ENOMEM. Hand every
 * live task of the scan to stb_deadlock_scan_add (any state: it keeps those
 * with a wait-for edge, as stb_deadlock_find reads them); it returns non-zero
 * once it takes no more (STB_DEADLOCK_MAX_NODES, or out of memory), which
 * need not stop the caller's scan. stb_deadlock_scan_end finds the cycles as
 * stb_deadlock_find does (partial: the scan did not see every task) and
 * returns 0 or -ENOMEM; stb_deadlock_scan_free accepts NULL. One thread at a
 * time per scan object.
 */
struct stb_deadlock_scan;
struct stb_deadlock_scan *stb_deadlock_scan_new(const struct stb_tview_src *src,
						const struct stb_mem *mem);
int stb_deadlock_scan_add(struct stb_deadlock_scan *f, uint32_t slot, struct stb_abi_task *p,
			  const struct stb_tview_task *v);
int stb_deadlock_scan_end(struct stb_deadlock_scan *f, bool partial, uint64_t deadline,
			  struct stb_deadlocks *out);
void stb_deadlock_scan_free(struct stb_deadlock_scan *f);

/* Frees what stb_deadlock_find allocated; accepts NULL. */
void stb_deadlocks_free(struct stb_deadlocks *d);

/* What task owner holds that others wait on: *n entries (0: nothing; d may
 * be NULL), sorted by kind and object. */
const struct stb_deadlock_hold *stb_deadlock_holds(const struct stb_deadlocks *d,
						   uint64_t owner, size_t *n);

/* Cycle c's members and their number. */
static inline const struct stb_deadlock_member *stb_deadlock_cycle(const struct stb_deadlocks *d,
								  size_t c, size_t *n)
{
	*n = d->starts[c + 1] - d->starts[c];
	return d->members + d->starts[c];
}

#endif /* STB_RUNTIME_STACKS_TABLE_DEADLOCK_H */
