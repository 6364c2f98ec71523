/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The types and constants of the bthread API (bRPC's bthread/types.h): ids,
 * attributes and their flags, stack types, worker tags, limits, and the
 * opaque objects of the synchronization primitives. Included by
 * bthread/bthread.h; usable on its own, from C and C++.
 */
#ifndef STB_BTHREAD_TYPES_H
#define STB_BTHREAD_TYPES_H

#include <stdbool.h>
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
/*
 * bRPC's contention site of a mutex (sampled contention time). Kept for
 * source compatibility: stb records no contention samples, the fields stay 0.
 */
typedef struct {
	int64_t duration_ns;
	size_t sampling_range;
} bthread_contention_site_t;

/*
 * Who holds a mutex: one 64-bit word, 0 when free, otherwise the holder as
 * STB_ABI_OWNER_* (stb/abi.h) encodes it: a bthread_t, or a flagged kernel
 * tid for a pthread. Written by the holder (relaxed) right after it took the
 * lock and cleared before it releases it; tracers re-read it (wait_extra of
 * a MUTEX wait points here).
 */
typedef struct {
	uint64_t word;
} mutex_owner_t;

/*
 * butex is bRPC's: the lock word, 0 free, 1 locked, 257 (0x101) locked and
 * contended. The members' order and names are bRPC's.
 */
typedef struct bthread_mutex_t {
#if defined(__cplusplus)
	bthread_mutex_t() : butex(NULL), csite(), enable_csite(true), owner() {}
#endif
	unsigned *butex;
	bthread_contention_site_t csite;
	bool enable_csite;
	mutex_owner_t owner;
} bthread_mutex_t;

typedef struct {
	bool enable_csite;
} bthread_mutexattr_t;
typedef struct {
	bthread_mutex_t *m;
	int *seq;
} bthread_cond_t;
typedef struct {
	int reserved;
} bthread_condattr_t;

STB_END_DECLS

/*
 * ==== Semaphores, read-write locks, barriers, once, bthread-local keys and
 * bthread_id: the types of the synchronization module (runtime/core/sem.c,
 * rwlock.c, barrier.c, once.c, key.c, id.c). Members are private unless a
 * comment says otherwise; initialize each with its *_init function.
 */
STB_BEGIN_DECLS

/* Counting semaphore: *butex is the count (bRPC's layout). */
typedef struct {
	unsigned *butex;
	bool enable_csite;
} bthread_sem_t;

/* Reader/writer preference of a bthread_rwlock_t (glibc's values). */
#define BTHREAD_RWLOCK_PREFER_READER_NP 0
#define BTHREAD_RWLOCK_PREFER_WRITER_NP 1
#define BTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP 2
/* The default: a waiting writer keeps new readers out (bRPC's behaviour). */
#define BTHREAD_RWLOCK_DEFAULT_NP BTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP

typedef struct {
	int lockkind;
} bthread_rwlockattr_t;

typedef struct {
	unsigned state;       /* readers | flags (rwlock.c) */
	unsigned nrd_waiting; /* readers blocked, under lock */
	unsigned nwr_waiting; /* writers blocked, under lock */
	unsigned grant_gen;   /* generation of the last hand-off to readers */
	int *rd_seq;          /* butex readers wait on */
	int *wr_seq;          /* butex writers wait on */
	unsigned lock;        /* short internal lock, never held while blocked */
	int kind;             /* BTHREAD_RWLOCK_*_NP */
	uint64_t writer;      /* owner word of the write lock (mutex_owner_t encoding) */
} bthread_rwlock_t;

/* bthread_barrier_wait returns this to exactly one waiter per cycle. */
#define BTHREAD_BARRIER_SERIAL_THREAD (-1)

typedef struct {
	unsigned count;    /* waiters per cycle */
	unsigned arrived;  /* waiters of the current cycle, under lock */
	unsigned lock;     /* short internal lock */
	int *gen;          /* butex: cycle number */
} bthread_barrier_t;

typedef struct {
	int reserved;
} bthread_barrierattr_t;

/*
 * A once control: zero-initialized (a static, BTHREAD_ONCE_INIT, or in C++
 * the default constructor) before the first bthread_once on it.
 */
typedef struct bthread_once_t {
#if defined(__cplusplus)
	bthread_once_t(unsigned s = 0) : state(s) {}
#endif
	unsigned state;
} bthread_once_t;
#define BTHREAD_ONCE_INIT {0}

/* A bthread-local storage key (bRPC's members: index and version). */
typedef struct {
	uint32_t index;   /* slot in every key table */
	uint32_t version; /* ABA guard: changes when the key is deleted; 0 never valid */
} bthread_key_t;
static const bthread_key_t INVALID_BTHREAD_KEY = {0, 0};

/*
 * An RPC correlation id (bthread/id.h): value is (slot << 32) | version; a
 * ranged id covers [value, value + range).
 */
typedef struct {
	uint64_t value;
} bthread_id_t;
/* Never returned by bthread_id_create*; not to be confused with INVALID_BTHREAD. */
static const bthread_id_t INVALID_BTHREAD_ID = {0};

/* A list of bthread_id_t (bthread_id_list_*). bRPC's layout. */
typedef struct {
	void *impl;
	unsigned head;
	unsigned size;
	unsigned conflict_head;
	unsigned conflict_size;
} bthread_id_list_t;

STB_END_DECLS

#if defined(__cplusplus)
#include <ostream>
inline bool operator==(bthread_id_t a, bthread_id_t b) { return a.value == b.value; }
inline bool operator!=(bthread_id_t a, bthread_id_t b) { return !(a == b); }
inline bool operator<(bthread_id_t a, bthread_id_t b) { return a.value < b.value; }
inline bool operator>(bthread_id_t a, bthread_id_t b) { return b < a; }
inline bool operator<=(bthread_id_t a, bthread_id_t b) { return !(b < a); }
inline bool operator>=(bthread_id_t a, bthread_id_t b) { return !(a < b); }
inline std::ostream &operator<<(std::ostream &os, bthread_id_t id) { return os << id.value; }
#endif /* __cplusplus */

#endif /* STB_BTHREAD_TYPES_H */
