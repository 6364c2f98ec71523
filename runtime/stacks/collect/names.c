/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The collector's pool of task names (names.h): distinct names copied once
 * into chunks, found again through the project's hash set.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collect/names.h"

#define STB_NAMES_CHUNK ((size_t)64 << 10)

static uint64_t name_rehash(const void *ctx, uint32_t idx)
{
	return ((const struct stb_names *)ctx)->names[idx].hash;
}

struct key {
	const char *s;
	size_t len;
	uint64_t hash;
};

static bool name_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct stb_names *p = ctx;
	const struct key *k = key;
	const struct stb_name *e = &p->names[idx];
	return e->hash == k->hash && strncmp(e->s, k->s, k->len) == 0 && e->s[k->len] == '\0';
}

/* Room for n bytes at the end of the last chunk; NULL without memory. */
static char *room(struct stb_names *p, size_t n)
{
	if (!p->nchunks || p->used + n > STB_NAMES_CHUNK) {
		if (stb_grow(&p->chunks, &p->capchunks, p->nchunks + 1, sizeof(*p->chunks)) != 0)
			return NULL;
		char *c = malloc(STB_NAMES_CHUNK);
		if (!c)
			return NULL;
		p->chunks[p->nchunks++] = c;
		p->used = 0;
	}
	char *at = p->chunks[p->nchunks - 1] + p->used;
	p->used += n;
	return at;
}

const char *stb_names_intern(struct stb_names *p, const char *s, size_t len)
{
	const char *end = memchr(s, '\0', len);
	struct key k = {.s = s, .len = end ? (size_t)(end - s) : len};
	if (k.len >= STB_NAMES_CHUNK)
		k.len = STB_NAMES_CHUNK - 1;
	k.hash = stb_fnv1a64_add(STB_FNV1A64_BASIS, s, k.len);
	if (p->n >= UINT32_MAX - 1 || stb_hashset_reserve(&p->set, p, name_rehash) != 0)
		goto nomem;
	uint32_t *slot = stb_hashset_find(&p->set, k.hash, p, name_eq, &k);
	if (*slot)
		return p->names[*slot - 1].s;
	if (stb_grow(&p->names, &p->cap, p->n + 1, sizeof(*p->names)) != 0)
		goto nomem;
	char *c = room(p, k.len + 1);
	if (!c)
		goto nomem;
	memcpy(c, s, k.len);
	c[k.len] = '\0';
	p->names[p->n] = (struct stb_name){.s = c, .hash = k.hash};
	*slot = (uint32_t)++p->n;
	p->set.n++;
	return c;
nomem:
	errno = ENOMEM;
	return NULL;
}

void stb_names_clear(struct stb_names *p)
{
	for (size_t i = 1; i < p->nchunks; i++)
		free(p->chunks[i]);
	p->nchunks = p->nchunks ? 1 : 0;
	p->used = 0;
	p->n = 0;
	if (p->set.slot)
		memset(p->set.slot, 0, (size_t)p->set.cap * sizeof(*p->set.slot));
	p->set.n = 0;
}

void stb_names_free(struct stb_names *p)
{
	for (size_t i = 0; i < p->nchunks; i++)
		free(p->chunks[i]);
	free(p->chunks);
	free(p->names);
	stb_hashset_free(&p->set);
	memset(p, 0, sizeof(*p));
}
