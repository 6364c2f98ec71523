/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The types and constants of the bthread API (bRPC's bthread/types.h): ids,
 * attributes, stack types and the opaque objects of the synchronization
 * primitives. Included by bthread/bthread.h; usable on its own.
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

typedef unsigned bthread_stacktype_t;
#define BTHREAD_STACKTYPE_UNKNOWN 0u
#define BTHREAD_STACKTYPE_PTHREAD 1u /* run on the worker's own stack */
#define BTHREAD_STACKTYPE_SMALL 2u   /* 32 KiB */
#define BTHREAD_STACKTYPE_NORMAL 3u  /* 1 MiB */
#define BTHREAD_STACKTYPE_LARGE 4u   /* 8 MiB */

typedef unsigned bthread_attrflags_t;
/* Background start: queue the bthread but do not wake an idle worker. */
#define BTHREAD_NOSIGNAL 32u

/* Longest task name kept (including the terminating NUL). */
#define BTHREAD_NAME_MAX 64

/*
 * Attributes for starting a bthread. Copy one of the BTHREAD_ATTR_* constants
 * or call bthread_attr_init(). name, when not NULL, is copied at start and
 * shown by the stack tracer.
 */
typedef struct bthread_attr_t {
	bthread_stacktype_t stack_type;
	bthread_attrflags_t flags;
	void *keytable_pool; /* accepted for bRPC compatibility, unused */
	int tag;             /* accepted for bRPC compatibility, unused */
	const char *name;
} bthread_attr_t;

/* Runs on the worker's stack; blocking calls block the worker pthread. */
static const bthread_attr_t BTHREAD_ATTR_PTHREAD = {BTHREAD_STACKTYPE_PTHREAD, 0, NULL, -1, NULL};
static const bthread_attr_t BTHREAD_ATTR_SMALL = {BTHREAD_STACKTYPE_SMALL, 0, NULL, -1, NULL};
static const bthread_attr_t BTHREAD_ATTR_NORMAL = {BTHREAD_STACKTYPE_NORMAL, 0, NULL, -1, NULL};
static const bthread_attr_t BTHREAD_ATTR_LARGE = {BTHREAD_STACKTYPE_LARGE, 0, NULL, -1, NULL};

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
