/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The types and constants of the bthread API (bRPC's bthread/types.h): ids,
 * attributes and their flags, stack types, worker tags, limits, and the
 * opaque objects of the synchronization primitives. Included by
 * bthread/bthread.h; usable on its own, from C and C++.
 */
#ifndef STB_BTHREAD_TYPES_H
#define STB_BTHREAD_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include <stb/export.h>

STB_BEGIN_DECLS

/*
 * A bthread id: (version << 32) | slot. The version changes when the bthread
 * finishes, so an id of a finished bthread never names a later one. 0 is never
 * a valid id.
 */
typedef uint64_t bthread_t;
#define INVALID_BTHREAD ((bthread_t)0)

/*
 * Worker pools ("tags"): a bthread runs only on workers of its tag, and a
 * woken bthread goes back to a worker of its tag. Tags are 0 ..
 * BTHREAD_TAG_MAX - 1; a pool's workers start when the tag is first used.
 */
typedef int bthread_tag_t;
#define BTHREAD_TAG_INVALID ((bthread_tag_t)-1)
#define BTHREAD_TAG_DEFAULT ((bthread_tag_t)0)
#define BTHREAD_TAG_MAX 64 /* stb: number of tags */

struct sockaddr;

typedef unsigned bthread_stacktype_t;
#define BTHREAD_STACKTYPE_UNKNOWN 0u
#define BTHREAD_STACKTYPE_PTHREAD 1u /* run on the worker's own stack */
#define BTHREAD_STACKTYPE_SMALL 2u   /* 32 KiB */
#define BTHREAD_STACKTYPE_NORMAL 3u  /* 1 MiB */
#define BTHREAD_STACKTYPE_LARGE 4u   /* 8 MiB */

typedef unsigned bthread_attrflags_t;
/* Log (to stderr) when the bthread starts and when it finishes. */
#define BTHREAD_LOG_START_AND_FINISH 8u
/* Log (to stderr) every time the bthread is switched in. */
#define BTHREAD_LOG_CONTEXT_SWITCH 16u
/* Queue the bthread but do not wake an idle worker (see bthread_flush). */
#define BTHREAD_NOSIGNAL 32u
/* bthread_about_to_quit() has no effect in this bthread. */
#define BTHREAD_NEVER_QUIT 64u
/* The new bthread gets a span from the create function of bthread_set_span_funcs. */
#define BTHREAD_INHERIT_SPAN 128u
/* Accepted for bRPC compatibility; scheduled like any other bthread. */
#define BTHREAD_GLOBAL_PRIORITY 256u

/* Longest name kept by bthread_attr_set_name (bytes, without the NUL). */
#define BTHREAD_NAME_MAX_LENGTH 31
/* stb: longest task name kept in the task table (including the NUL). */
#define BTHREAD_NAME_MAX 64

/*
 * A pool of bthread-local storage tables (bthread/unstable.h,
 * bthread_keytable_pool_*): bthreads started with attr.keytable_pool take
 * their table from it and give it back when they finish. Initialize with
 * bthread_keytable_pool_init; the members belong to the implementation
 * (bRPC's, with impl in place of its rwlock, so that the header needs no
 * POSIX feature macros).
 */
typedef struct {
	void *impl;
	void *list;
	void *free_keytables;
	size_t size;
	int destroyed;
} bthread_keytable_pool_t;

typedef struct {
	size_t nfree;
} bthread_keytable_pool_stat_t;

/*
 * Attributes for starting a bthread. Copy one of the BTHREAD_ATTR_* constants
 * or call bthread_attr_init(). name (set with bthread_attr_set_name) is
 * copied at start and shown by the stack tracer. tag BTHREAD_TAG_INVALID
 * runs the bthread in the pool of the starting worker (tag 0 from a pthread).
 */
typedef struct bthread_attr_t {
	bthread_stacktype_t stack_type;
	bthread_attrflags_t flags;
	bthread_keytable_pool_t *keytable_pool;
	bthread_tag_t tag;
	char name[BTHREAD_NAME_MAX_LENGTH + 1];
#if defined(__cplusplus)
	/* attr = BTHREAD_STACKTYPE_* | flags */
	void operator=(unsigned stacktype_and_flags)
	{
		stack_type = (stacktype_and_flags & 7u);
		flags = (stacktype_and_flags & ~7u);
		keytable_pool = NULL;
		tag = BTHREAD_TAG_INVALID;
		name[0] = '\0';
	}
	/* BTHREAD_ATTR_NORMAL | BTHREAD_NOSIGNAL; the stack-type bits are ignored. */
	bthread_attr_t operator|(unsigned other_flags) const
	{
		bthread_attr_t tmp = *this;
		tmp.flags |= (other_flags & ~7u);
		return tmp;
	}
#endif
} bthread_attr_t;

/*
 * Copies name (up to BTHREAD_NAME_MAX_LENGTH bytes) into attr->name; NULL
 * name clears it. Does nothing when attr is NULL. Thread-safe on distinct attrs.
 */
STB_EXPORT void bthread_attr_set_name(bthread_attr_t *attr, const char *name);

/* Runs on the worker's stack; blocking calls block the worker pthread. */
static const bthread_attr_t BTHREAD_ATTR_PTHREAD = {BTHREAD_STACKTYPE_PTHREAD, 0, NULL,
						    BTHREAD_TAG_INVALID, {0}};
static const bthread_attr_t BTHREAD_ATTR_SMALL = {BTHREAD_STACKTYPE_SMALL, 0, NULL,
						  BTHREAD_TAG_INVALID, {0}};
static const bthread_attr_t BTHREAD_ATTR_NORMAL = {BTHREAD_STACKTYPE_NORMAL, 0, NULL,
						   BTHREAD_TAG_INVALID, {0}};
static const bthread_attr_t BTHREAD_ATTR_LARGE = {BTHREAD_STACKTYPE_LARGE, 0, NULL,
						  BTHREAD_TAG_INVALID, {0}};
/* Logs start, finish and every switch (stderr). */
static const bthread_attr_t BTHREAD_ATTR_DEBUG = {
	BTHREAD_STACKTYPE_NORMAL, BTHREAD_LOG_START_AND_FINISH | BTHREAD_LOG_CONTEXT_SWITCH, NULL,
	BTHREAD_TAG_INVALID, {0}};

/* Limits, as bRPC. */
#define BTHREAD_EPOLL_THREAD_NUM ((size_t)1)
#define BTHREAD_ATOMIC_INIT ((bthread_t)0)
/* Worker pthreads: bthread_setconcurrency accepts [MIN, MAX]. */
#define BTHREAD_MIN_CONCURRENCY (3 + (int)BTHREAD_EPOLL_THREAD_NUM)
#define BTHREAD_MAX_CONCURRENCY 1024
/* bRPC's parking-lot limits; stb has one parking lot per worker pool. */
#define BTHREAD_MIN_PARKINGLOT 4
#define BTHREAD_MAX_PARKINGLOT 1024

/* A set of bthreads to stop and join together (bthread_list_*). */
typedef struct {
	void *impl;
	/* Unused, kept for bRPC's layout. */
	unsigned head;
	unsigned size;
	unsigned conflict_head;
	unsigned conflict_size;
} bthread_list_t;

/* A timer of bthread_timer_add; never 0. */
typedef uint64_t bthread_timer_t;

/* ---- mutex and condition variable ---- */
typedef struct {
	unsigned *butex;
	void *reserved;
} bthread_mutex_t;
typedef struct {
	int reserved;
} bthread_mutexattr_t;
typedef struct {
	bthread_mutex_t *m;
	int *seq;
} bthread_cond_t;
typedef struct {
	int reserved;
} bthread_condattr_t;

STB_END_DECLS

#endif /* STB_BTHREAD_TYPES_H */
