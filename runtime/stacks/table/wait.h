/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Why a task is where it is, as its table entry says (include/stb/abi.h): its
 * wait block (what it waits on, who holds it, since when), its creator, and
 * how long a running bthread has run without a switch (the monitor's worker
 * entries). One reader for stb_dump, the debug endpoint, the watchdog and
 * stb-bpf-loader; everything is validated against the task's word as abi.h
 * says and range-checked (the entry may belong to a hostile target).
 */
#ifndef STB_RUNTIME_STACKS_TABLE_WAIT_H
#define STB_RUNTIME_STACKS_TABLE_WAIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stb/abi.h"

/* A task's wait as read from its entry; kind STB_WAIT_NONE: it does not
 * wait (or the block was not valid when read). */
struct stb_wait_view {
	unsigned kind;      /* enum stb_wait_kind, < STB_WAIT_NKINDS */
	unsigned flags;     /* STB_ABI_WAIT_F_* */
	uint32_t events;    /* FD: the events waited for */
	int32_t fd;         /* FD: the descriptor */
	uint64_t object;    /* what it waits on (0: none) */
	uint64_t owner;     /* STB_ABI_OWNER_* when it blocked; JOIN: the joined bthread */
	uint64_t deadline;  /* CLOCK_MONOTONIC ns, 0 = none */
	uint64_t extra;     /* COND: its mutex; MUTEX, RWLOCK_*, ID: the owner word's address */
};

/* When a wait was read, and the words that made it valid (what
 * stb_wait_current checks again); kept apart from the view, which a report
 * holds for every task. */
struct stb_wait_seen {
	uint64_t since_ns;  /* CLOCK_MONOTONIC_COARSE when it blocked, 0 = unknown */
	uint64_t word;      /* the task word the block was valid with */
	uint64_t wait_word; /* and its wait word */
};

/*
 * Reads the wait block of entry p: valid for a suspended task (word read
 * before and after the block, unchanged) and for a registered pthread (or a
 * bthread on its worker's stack) whose wait kind is not NONE while it runs
 * (wait word read before and after, unchanged). Fills
 * *w and returns true; otherwise w->kind is STB_WAIT_NONE and it returns
 * false. Reads only; thread-safe.
 */
bool stb_wait_read(const struct stb_abi_task *p, struct stb_wait_view *w,
		   struct stb_wait_seen *seen);

/* Is w (read with seen) still p's current wait (task word and wait word
 * unchanged)? */
bool stb_wait_current(const struct stb_abi_task *p, const struct stb_wait_view *w,
		      const struct stb_wait_seen *seen);

/* Do waits of this kind name an owner word at extra (MUTEX, RWLOCK_*, ID)? */
bool stb_wait_has_owner_word(unsigned kind);

/* Name of a wait kind ("mutex", "fd", ...); "none" for NONE, "invalid" out
 * of range. */
const char *stb_wait_kind_name(unsigned kind);

/* Who started a task, and when (abi.h creator fields, created_ns). */
struct stb_creator {
	uint64_t id;  /* bthread (or registered pthread) id; 0: another thread */
	uint64_t ip;  /* return address of the start call; 0: unknown */
	uint32_t tid; /* kernel tid of the starting thread */
	uint64_t created_ns; /* CLOCK_MONOTONIC_COARSE of the start; 0: unknown */
};

/* Reads the creator of task id from entry p, and when it started it: valid
 * while the entry holds id (read before and after). Returns true with *c
 * filled (something of it known). */
bool stb_wait_creator(const struct stb_abi_task *p, uint64_t id, struct stb_creator *c);

/* The execution queue task id consumes now, as entry p says (abi.h execq;
 * valid while the entry holds id: read before and after); 0 when none. */
uint64_t stb_wait_execq(const struct stb_abi_task *p, uint64_t id);

/*
 * Since when bthread id with run sequence seq has run on worker entry w
 * without a switch (CLOCK_MONOTONIC ns, as the monitor published it), or 0
 * when the entry does not name that run (another task, another run, not
 * published yet, or torn). Reads only; thread-safe.
 */
uint64_t stb_wait_running_since(const struct stb_abi_worker *w, uint64_t id, uint32_t seq);

#endif /* STB_RUNTIME_STACKS_TABLE_WAIT_H */
