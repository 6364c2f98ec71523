/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The project's one hash set and one growth helper, header-only: the set
 * holds indices into its owner's array of elements (stored + 1, 0 is an
 * empty slot), found by linear probing, at most half full, doubled when
 * needed; the owner hashes and compares its elements (callbacks). FNV-1a
 * 64 for byte strings, a mixer for keys made of words. No state of its own.
 */
#ifndef STB_RUNTIME_COMMON_HASHSET_H
#define STB_RUNTIME_COMMON_HASHSET_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* FNV-1a, 64 bits: the offset basis and the prime. */
#define STB_FNV1A64_BASIS 14695981039346656037ull
#define STB_FNV1A64_PRIME 1099511628211ull

/* h folded with the n bytes at p (start with STB_FNV1A64_BASIS). */
static inline uint64_t stb_fnv1a64_add(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= STB_FNV1A64_PRIME;
	}
	return h;
}

/* h combined with the 64-bit word v, every bit of both spread over the
 * result (for keys made of words: addresses, ids, indices). */
static inline uint64_t stb_hash_mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	h *= 0xff51afd7ed558ccdull;
	return h ^ (h >> 33);
}

/* A 64-bit key spread over every bit (a multiply and a fold). */
static inline uint64_t stb_hash_u64(uint64_t v)
{
	v *= 0x9e3779b97f4a7c15ull;
	return v ^ (v >> 32);
}

/*
 * Makes room in *arr (elements of size bytes, *cap of them) for need
 * elements: the capacity doubles from 16 until it holds them. Returns 0, or
 * -ENOMEM (nothing changed; also when the size would overflow).
 */
static inline int stb_grow(void *arr, size_t *cap, size_t need, size_t size)
{
	void **a = arr;
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 16;
	while (c < need) {
		if (c > SIZE_MAX / 2 / size)
			return -ENOMEM;
		c *= 2;
	}
	void *g = realloc(*a, c * size);
	if (!g)
		return -ENOMEM;
	*a = g;
	*cap = c;
	return 0;
}

struct stb_hashset {
	uint32_t *slot; /* element index + 1; 0: empty */
	uint32_t cap;   /* a power of two, or 0 */
	uint32_t n;     /* elements in the set */
};

/* The hash of element idx of the owner ctx, and whether it equals key. */
typedef uint64_t (*stb_hashset_hash_fn)(const void *ctx, uint32_t idx);
typedef bool (*stb_hashset_eq_fn)(const void *ctx, uint32_t idx, const void *key);

/* Makes room for one more element (rehashing with hf). 0 or -ENOMEM. */
static inline int stb_hashset_reserve(struct stb_hashset *s, const void *ctx,
				      stb_hashset_hash_fn hf)
{
	if ((uint64_t)(s->n + 1) * 2 <= s->cap)
		return 0;
	if (s->cap > UINT32_MAX / 4)
		return -ENOMEM;
	uint32_t nc = s->cap ? s->cap * 2 : 64;
	uint32_t *slot = calloc(nc, sizeof(*slot));
	if (!slot)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->cap; i++) {
		uint32_t v = s->slot[i];
		if (!v)
			continue;
		uint32_t k = (uint32_t)hf(ctx, v - 1) & (nc - 1);
		while (slot[k])
			k = (k + 1) & (nc - 1);
		slot[k] = v;
	}
	free(s->slot);
	s->slot = slot;
	s->cap = nc;
	return 0;
}

/*
 * The slot holding an element equal to key (hash h), or the empty slot where
 * it goes: *slot is then 0; store the new element's index + 1 there and
 * count it (n++). Call stb_hashset_reserve first: the set must not be full.
 */
static inline uint32_t *stb_hashset_find(const struct stb_hashset *s, uint64_t h, const void *ctx,
					 stb_hashset_eq_fn eq, const void *key)
{
	uint32_t mask = s->cap - 1;
	for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
		uint32_t v = s->slot[i];
		if (!v || eq(ctx, v - 1, key))
			return &s->slot[i];
	}
}

/* Like stb_hashset_find for a lookup only: the element's index, or -1. */
static inline int64_t stb_hashset_get(const struct stb_hashset *s, uint64_t h, const void *ctx,
				      stb_hashset_eq_fn eq, const void *key)
{
	if (!s->cap)
		return -1;
	uint32_t v = *stb_hashset_find(s, h, ctx, eq, key);
	return v ? (int64_t)v - 1 : -1;
}

/*
 * The elements along h's probe sequence, one per call, for a set that keeps
 * several elements under one key (their eq() says which one is wanted):
 * start with *step = 0; returns an element's index, or -1 once an empty
 * slot (or the whole set) is reached. Insert such an element at the slot
 * stb_hashset_find gives with an eq() that is never true.
 */
static inline int64_t stb_hashset_next(const struct stb_hashset *s, uint64_t h, uint32_t *step)
{
	if (*step >= s->cap)
		return -1;
	uint32_t v = s->slot[((uint32_t)h + *step) & (s->cap - 1)];
	(*step)++;
	return v ? (int64_t)v - 1 : -1;
}

/* Empties s (its slots stay allocated). */
static inline void stb_hashset_clear(struct stb_hashset *s)
{
	if (s->slot)
		memset(s->slot, 0, (size_t)s->cap * sizeof(*s->slot));
	s->n = 0;
}

/* Frees the slots; s is empty and usable again. */
static inline void stb_hashset_free(struct stb_hashset *s)
{
	free(s->slot);
	memset(s, 0, sizeof(*s));
}

#endif /* STB_RUNTIME_COMMON_HASHSET_H */
