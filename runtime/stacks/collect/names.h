/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The task names of a collector's result, each distinct name stored once
 * (a million tasks of one name cost one copy, not a million): the report
 * records point into the pool, which lives until it is cleared.
 */
#ifndef STB_RUNTIME_STACKS_COLLECT_NAMES_H
#define STB_RUNTIME_STACKS_COLLECT_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "hashset.h"

struct stb_names {
	char **chunks;          /* the bytes, in chunks of STB_NAMES_CHUNK */
	size_t nchunks, capchunks;
	size_t used;            /* bytes used of the last chunk */
	struct stb_name {
		const char *s;
		uint64_t hash;
	} *names;               /* the distinct names, by index */
	size_t n, cap;
	struct stb_hashset set; /* indices into names */
};

/*
 * The pooled copy of the NUL-terminated s (at most len bytes are read; a
 * longer one is cut): the same pointer for equal names until
 * stb_names_clear. Returns NULL without memory (errno ENOMEM). Not
 * thread-safe; does not block.
 */
const char *stb_names_intern(struct stb_names *p, const char *s, size_t len);

/* Forgets every name (pointers handed out become invalid); keeps one chunk. */
void stb_names_clear(struct stb_names *p);

/* Frees the pool (a zeroed struct is an empty pool). */
void stb_names_free(struct stb_names *p);

#endif /* STB_RUNTIME_STACKS_COLLECT_NAMES_H */
