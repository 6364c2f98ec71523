/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The set of unique stacks (stackset.h): the stacks in an array, found by
 * their frames' ips and unwinder flags through the project's hash set,
 * swept by generation.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hashset.h"
#include "report/stackset.h"

struct stb_stackset {
	struct stb_stackset_entry **all; /* the stacks, in the order they came */
	size_t n, cap, nframes;          /* stacks, room for them, frames */
	struct stb_hashset set;          /* indices into all, by frames */
	size_t json;                     /* bytes of JSON kept in the stacks */
	uint32_t gen;
};

/* The flags the unwinder sets (symbolization adds STB_FRAME_F_MISMATCH). */
#define WALK_FLAGS(f) ((f) & ~(unsigned)STB_FRAME_F_MISMATCH)

struct stb_stackset *stb_stackset_new(void)
{
	struct stb_stackset *s = calloc(1, sizeof(*s));
	if (!s)
		errno = ENOMEM;
	return s;
}

static void entry_free(struct stb_stackset *s, struct stb_stackset_entry *k)
{
	s->nframes -= k->n;
	s->json -= k->json ? k->json_len : 0;
	free(k->json);
	free(k);
}

void stb_stackset_clear(struct stb_stackset *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		entry_free(s, s->all[i]);
	s->n = 0;
	stb_hashset_clear(&s->set);
}

void stb_stackset_free(struct stb_stackset *s)
{
	if (!s)
		return;
	stb_stackset_clear(s);
	stb_hashset_free(&s->set);
	free(s->all);
	free(s);
}

static uint64_t frames_hash(const struct stb_frame *f, unsigned n, uint32_t key)
{
	uint64_t h = stb_hash_mix(key, n);
	for (unsigned i = 0; i < n; i++)
		h = stb_hash_mix(h, f[i].ip ^ ((uint64_t)WALK_FLAGS(f[i].flags) << 56));
	return h;
}

/* What a stack is looked up by. */
struct lookup {
	const struct stb_frame *frames;
	unsigned n;
	uint32_t key;
	uint64_t hash;
};

static uint64_t entry_rehash(const void *ctx, uint32_t idx)
{
	const struct stb_stackset *s = ctx;
	return s->all[idx]->hash;
}

static bool entry_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct stb_stackset_entry *k = ((const struct stb_stackset *)ctx)->all[idx];
	const struct lookup *l = key;
	if (k->hash != l->hash || k->n != l->n || k->key != l->key)
		return false;
	for (unsigned i = 0; i < l->n; i++)
		if (k->frames[i].ip != l->frames[i].ip ||
		    WALK_FLAGS(k->frames[i].flags) != WALK_FLAGS(l->frames[i].flags))
			return false;
	return true;
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
	struct lookup l = {.frames = frames, .n = n, .key = key, .hash = frames_hash(frames, n, key)};
	if (s->n >= UINT32_MAX - 1 || stb_hashset_reserve(&s->set, s, entry_rehash) != 0 ||
	    stb_grow(&s->all, &s->cap, s->n + 1, sizeof(*s->all)) != 0) {
		errno = ENOMEM;
		return NULL;
	}
	uint32_t *slot = stb_hashset_find(&s->set, l.hash, s, entry_eq, &l);
	if (*slot) {
		struct stb_stackset_entry *k = s->all[*slot - 1];
		stb_stackset_hold(s, k);
		return k;
	}
	struct stb_stackset_entry *k = malloc(sizeof(*k) + (size_t)n * sizeof(k->frames[0]));
	if (!k) {
		errno = ENOMEM;
		return NULL;
	}
	memset(k, 0, sizeof(*k));
	k->hash = l.hash;
	k->key = key;
	k->gen = s->gen;
	k->n = n;
	k->refs = 1;
	for (unsigned i = 0; i < n; i++) {
		k->frames[i] = frames[i];
		k->frames[i].sp = 0;
	}
	s->all[s->n] = k;
	*slot = (uint32_t)++s->n;
	s->set.n++;
	s->nframes += n;
	return k;
}

void stb_stackset_next(struct stb_stackset *s)
{
	s->gen++;
}

void stb_stackset_sweep(struct stb_stackset *s)
{
	size_t kept = 0;
	for (size_t i = 0; i < s->n; i++) {
		if (s->all[i]->gen == s->gen)
			s->all[kept++] = s->all[i];
		else
			entry_free(s, s->all[i]);
	}
	if (kept == s->n)
		return;
	/* The survivors, indexed again (a sweep is linear anyway). */
	s->n = kept;
	stb_hashset_clear(&s->set);
	for (size_t i = 0; i < kept; i++) {
		struct stb_stackset_entry *k = s->all[i];
		struct lookup l = {.frames = k->frames, .n = k->n, .key = k->key, .hash = k->hash};
		uint32_t *slot = stb_hashset_find(&s->set, k->hash, s, entry_eq, &l);
		*slot = (uint32_t)i + 1;
		s->set.n++;
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
