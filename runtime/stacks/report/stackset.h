/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A set of unique stacks: a producer that traces many tasks stores each walk
 * here and the tasks with the same stack share one copy of its frames, which
 * the report then symbolizes and views once (report/model.c). Frames are stored
 * without their stack pointers (tasks with one stack differ only there). A
 * resident producer keeps the set from one snapshot to the next: each
 * snapshot is a generation, and the stacks no task used in it are swept.
 */
#ifndef STB_RUNTIME_STACKS_REPORT_STACKSET_H
#define STB_RUNTIME_STACKS_REPORT_STACKSET_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stb/stb.h"

/* One stored stack. frames[] is shared by every task holding it; the walk's
 * frames stay as stored (symbolization fills in their names, the report's
 * view of them is kept beside: frames[first .. first + shown)). */
struct stb_stackset_entry {
	uint64_t hash;     /* of its frames and key */
	uint32_t key;      /* the producer's flags the view depends on (stb_stackset_add) */
	uint32_t gen;      /* the last generation that used it */
	unsigned n;        /* frames stored */
	unsigned refs;     /* the tasks holding it in this generation */
	/* The report's view of it, computed once for every task (model.c): the
	 * same for every report of the set (one producer, one set of options). */
	bool viewed;
	unsigned first, shown, hidden, not_shown;
	bool inexact, truncated;
	unsigned char truncated_why; /* enum stb_report_trunc of the view */
	bool view_hashed;  /* view_hash is the hash of the view's ips (grouping) */
	uint64_t view_hash;
	char *json;        /* its frames as JSON, written once (jsondoc.c); freed with it */
	size_t json_len;
	unsigned json_depth;
	struct stb_frame frames[];
};

struct stb_stackset;

/* An empty set; NULL + errno (ENOMEM). */
struct stb_stackset *stb_stackset_new(void);

/* Frees s and every stack in it; NULL is fine. */
void stb_stackset_free(struct stb_stackset *s);

/*
 * The stored stack equal to frames[0..n) (same ips and unwinder flags) with
 * the same key (the producer's own bits: what else the report's view of the
 * stack depends on, e.g. whether frame 0 is exact and how many frames were
 * left out); stored now when there is none. Counts a task holding it in
 * this generation. Returns it, or NULL (ENOMEM) -- the caller then keeps its
 * own copy. Not thread-safe (one producer).
 */
struct stb_stackset_entry *stb_stackset_add(struct stb_stackset *s,
					    const struct stb_frame *frames, unsigned n,
					    uint32_t key);

/* Counts one more task holding k (taken from an earlier generation) in this one. */
void stb_stackset_hold(struct stb_stackset *s, struct stb_stackset_entry *k);

/* Starts a new generation (no stack is held in it yet). */
void stb_stackset_next(struct stb_stackset *s);

/* Frees the stacks no task held in this generation. */
void stb_stackset_sweep(struct stb_stackset *s);

/* Frees every stack (the tasks sharing them must be gone); NULL is fine. */
void stb_stackset_clear(struct stb_stackset *s);

/* Counts len bytes of JSON kept in the set; false (nothing counted) when the
 * set keeps STB_STACKSET_JSON_MAX already. */
#define STB_STACKSET_JSON_MAX (16u << 20)
bool stb_stackset_json_room(struct stb_stackset *s, size_t len);

/* Stacks and frames stored (for -v and tests). */
size_t stb_stackset_count(const struct stb_stackset *s, size_t *frames);

#endif /* STB_RUNTIME_STACKS_REPORT_STACKSET_H */
