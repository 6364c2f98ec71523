/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The set of unique stacks (stackset.h): a chained hash table of stacks keyed
 * by their frames' ips and unwinder flags, grown with what is stored, swept
 * by generation.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "report/stackset.h"

struct stb_stackset {
	struct stb_stackset_entry **tab;
	size_t cap, n, nframes; /* buckets (a power of 2), stacks, frames */
	size_t json;            /* bytes of JSON kept in the stacks */
	uint32_t gen;
};

/* The flags the unwinder sets (symbolization adds STB_FRAME_F_MISMATCH). */
#define WALK_FLAGS(f) ((f) & ~(unsigned)STB_FRAME_F_MISMATCH)

struct stb_stackset *stb_stackset_new(void)
{
	struct stb_stackset *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->cap = 256;
	s->tab = calloc(s->cap, sizeof(*s->tab));
	if (!s->tab) {
		free(s);
		errno = ENOMEM;
		return NULL;
	}
	return s;
}

static void entry_free(struct stb_stackset *s, struct stb_stackset_entry *k)
{
	s->n--;
	s->nframes -= k->n;
	s->json -= k->json ? k->json_len : 0;
	free(k->json);
	free(k);
}

void stb_stackset_clear(struct stb_stackset *s)
{
	if (!s)
		return;
	for (size_t b = 0; b < s->cap; b++) {
		for (struct stb_stackset_entry *k = s->tab[b], *next; k; k = next) {
			next = k->next;
			entry_free(s, k);
		}
		s->tab[b] = NULL;
	}
}

void stb_stackset_free(struct stb_stackset *s)
{
	if (!s)
		return;
	stb_stackset_clear(s);
	free(s->tab);
	free(s);
}

static uint64_t frames_hash(const struct stb_frame *f, unsigned n, uint32_t key)
{
	uint64_t h = 1469598103934665603ull ^ key ^ ((uint64_t)n << 32);
	for (unsigned i = 0; i < n; i++) {
		h ^= f[i].ip ^ ((uint64_t)WALK_FLAGS(f[i].flags) << 56);
		h *= 1099511628211ull;
	}
	return h ^ (h >> 29);
}

static bool stack_same(const struct stb_stackset_entry *k, uint64_t hash,
		       const struct stb_frame *f, unsigned n, uint32_t key)
{
	if (k->hash != hash || k->n != n || k->key != key)
		return false;
	for (unsigned i = 0; i < n; i++)
		if (k->frames[i].ip != f[i].ip ||
		    WALK_FLAGS(k->frames[i].flags) != WALK_FLAGS(f[i].flags))
			return false;
	return true;
}

/* Doubles the buckets when the chains grow long; on ENOMEM they stay. */
static void grow(struct stb_stackset *s)
{
	size_t cap = s->cap * 2;
	struct stb_stackset_entry **tab = calloc(cap, sizeof(*tab));
	if (!tab)
		return;
	for (size_t b = 0; b < s->cap; b++) {
		for (struct stb_stackset_entry *k = s->tab[b], *next; k; k = next) {
			next = k->next;
			k->next = tab[k->hash & (cap - 1)];
			tab[k->hash & (cap - 1)] = k;
		}
	}
	free(s->tab);
	s->tab = tab;
	s->cap = cap;
}

void stb_stackset_hold(struct stb_stackset *s, struct stb_stackset_entry *k)
{
	if (k->gen != s->gen) {
		k->gen = s->gen;
		k->refs = 0;
	}
	k->refs++;
}

struct stb_stackset_entry *stb_stackset_add(struct stb_stackset *s,
					    const struct stb_frame *frames, unsigned n,
					    uint32_t key)
{
	uint64_t hash = frames_hash(frames, n, key);
	for (struct stb_stackset_entry *k = s->tab[hash & (s->cap - 1)]; k; k = k->next) {
		if (stack_same(k, hash, frames, n, key)) {
			stb_stackset_hold(s, k);
			return k;
		}
	}
	struct stb_stackset_entry *k = malloc(sizeof(*k) + (size_t)n * sizeof(k->frames[0]));
	if (!k) {
		errno = ENOMEM;
		return NULL;
	}
	memset(k, 0, sizeof(*k));
	k->hash = hash;
	k->key = key;
	k->gen = s->gen;
	k->n = n;
	k->refs = 1;
	for (unsigned i = 0; i < n; i++) {
		k->frames[i] = frames[i];
		k->frames[i].sp = 0;
	}
	if (s->n >= s->cap)
		grow(s);
	k->next = s->tab[hash & (s->cap - 1)];
	s->tab[hash & (s->cap - 1)] = k;
	s->n++;
	s->nframes += n;
	return k;
}

void stb_stackset_next(struct stb_stackset *s)
{
	s->gen++;
}

void stb_stackset_sweep(struct stb_stackset *s)
{
	for (size_t b = 0; b < s->cap; b++) {
		struct stb_stackset_entry **pp = &s->tab[b];
		while (*pp) {
			struct stb_stackset_entry *k = *pp;
			if (k->gen == s->gen) {
				pp = &k->next;
				continue;
			}
			*pp = k->next;
			entry_free(s, k);
		}
	}
}

bool stb_stackset_json_room(struct stb_stackset *s, size_t len)
{
	if (len > STB_STACKSET_JSON_MAX - s->json)
		return false;
	s->json += len;
	return true;
}

size_t stb_stackset_count(const struct stb_stackset *s, size_t *frames)
{
	if (frames)
		*frames = s ? s->nframes : 0;
	return s ? s->n : 0;
}
