/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The types and constants of the bthread API (bRPC's bthread/types.h): ids,
 * attributes, stack types and the opaque objects of the synchronization
 * primitives. Included by bthread/bthread.h; usable on its own.
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
