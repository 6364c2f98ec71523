/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Remembered walks (walkmemo.h): a hash set (several records under one
 * key) from a walk's start (registers, limits, copy length) to the words it
 * read and the frames it delivered. The walk of a cached CFA rule or frame pointer step computes
 * each address as sp or bp, or a word it read, plus a constant: given the
 * same start and the same words at the same offsets, a second copy makes it
 * read the same offsets and deliver the same frames, moved by the distance
 * between the copies: any multiple of 8 bytes (both copies are 8-byte
 * aligned, and the only alignment a walk tests is 8 bytes: colored stacks of
 * tasks parked alike lie at different offsets in their pages).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hashset.h"
#include "symbols/walkmemo.h"
#include "unwind/modules.h"

/* What a walk is looked up by: the sink's limits, the copy's length, the
 * registers the walk may use. */
enum { KEY_LEN, KEY_FLAGS, KEY_SKIP, KEY_MAX, KEY_NFRAMES, KEY_DEPTH, KEY_IP, KEY_SP, KEY_BP,
       KEY_REG_BITS, NKEY };
/* Words a remembered walk may have read. */
#define MAX_READS 512u
/* Walks of one key tried before walking. */
#define MAX_TRIES 8u
/* Give up once this many lookups found fewer than one hit in HIT_RATIO. */
#define OFF_AFTER 4096u
#define HIT_RATIO 8u
/* A read's word offset carries whether its value pointed into the copy. */
#define IN_COPY 0x80000000u

struct rec {
	uint64_t hash;
	uint64_t addr, len; /* the copy it was walked from */
	uint32_t nreads;
	uint32_t nfr; /* frames stored */
	int rc;
	unsigned n, phys;
	bool truncated;
	uint64_t key[NKEY];
	uint32_t *at;   /* nreads word offsets (| IN_COPY) ... */
	uint64_t *val;  /* ... and the values read there, relative when IN_COPY */
	struct stb_frame *frames;
	uint64_t data[]; /* frames, val, at */
};

struct stb_walkmemo {
	struct rec **recs;
	size_t n, cap;          /* records, room for them */
	struct stb_hashset set; /* indices into recs, by key */
	size_t max_bytes;
	uint64_t gen; /* the module table the records were walked with */
	struct stb_walkmemo_stats st;
	uint32_t log[MAX_READS]; /* the walk being remembered */
};

struct stb_walkmemo *stb_walkmemo_new(size_t max_bytes)
{
	struct stb_walkmemo *m = calloc(1, sizeof(*m));
	if (!m)
		goto fail;
	m->max_bytes = max_bytes ? max_bytes : STB_WALKMEMO_DEFAULT_BYTES;
	return m;
fail:
	stb_walkmemo_free(m);
	errno = ENOMEM;
	return NULL;
}

static void clear(struct stb_walkmemo *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->recs[i]);
	m->n = 0;
	stb_hashset_clear(&m->set);
	m->st.bytes = 0;
}

void stb_walkmemo_free(struct stb_walkmemo *m)
{
	if (!m)
		return;
	clear(m);
	stb_hashset_free(&m->set);
	free(m->recs);
	free(m);
}

void stb_walkmemo_reset(struct stb_walkmemo *m)
{
	if (!m)
		return;
	clear(m);
	memset(&m->st, 0, sizeof(m->st));
	m->gen = 0;
}

struct stb_walkmemo_stats stb_walkmemo_stats(const struct stb_walkmemo *m)
{
	struct stb_walkmemo_stats z = {0};
	return m ? m->st : z;
}

/* w relative to the copy [addr, addr + len] when it points there (*in). */
static uint64_t norm(uint64_t w, uint64_t addr, uint64_t len, bool *in)
{
	*in = w - addr <= len;
	return *in ? w - addr : w;
}

static uint64_t make_key(uint64_t *k, const struct stb_regs *regs,
			 const struct stb_stack_copy *copy, const struct stb_frame_sink *sink,
			 unsigned depth)
{
	bool in_sp, in_bp;
	k[KEY_LEN] = copy->len;
	k[KEY_FLAGS] = regs->flags;
	k[KEY_SKIP] = sink->skip;
	k[KEY_MAX] = sink->max;
	k[KEY_NFRAMES] = sink->frames ? sink->nframes : 0;
	k[KEY_DEPTH] = depth;
	k[KEY_IP] = regs->ip;
	k[KEY_SP] = norm(regs->sp, copy->addr, copy->len, &in_sp);
	k[KEY_BP] = norm(regs->bp, copy->addr, copy->len, &in_bp);
	k[KEY_REG_BITS] = (uint64_t)in_sp | (uint64_t)in_bp << 1;
	uint64_t h = 0x243f6a8885a308d3ull;
	for (unsigned i = 0; i < NKEY; i++)
		h = stb_hash_mix(h, k[i]);
	return h;
}

/* Whether copy holds, at every word r's walk read, what r's copy held. */
static bool same_reads(const struct rec *r, const struct stb_stack_copy *copy)
{
	const uint8_t *b = copy->bytes;
	for (uint32_t i = 0; i < r->nreads; i++) {
		uint32_t at = r->at[i] & ~IN_COPY;
		uint64_t w;
		bool in;
		memcpy(&w, b + (size_t)at * 8, 8);
		w = norm(w, copy->addr, copy->len, &in);
		if (w != r->val[i] || in != ((r->at[i] & IN_COPY) != 0))
			return false;
	}
	return true;
}

static const struct rec *find(const struct stb_walkmemo *m, uint64_t hash, const uint64_t *key,
			      const struct stb_stack_copy *copy)
{
	unsigned tries = 0;
	uint32_t step = 0;
	for (int64_t i; tries < MAX_TRIES && (i = stb_hashset_next(&m->set, hash, &step)) >= 0;) {
		const struct rec *r = m->recs[i];
		if (r->hash != hash || memcmp(r->key, key, sizeof(r->key)) != 0)
			continue;
		if (same_reads(r, copy))
			return r;
		tries++;
	}
	return NULL;
}

static uint64_t rec_rehash(const void *ctx, uint32_t idx)
{
	const struct stb_walkmemo *m = ctx;
	return m->recs[idx]->hash;
}

/* Records of one key are kept side by side: a new one goes to the end of
 * its probe sequence. */
static bool rec_never(const void *ctx, uint32_t idx, const void *key)
{
	(void)ctx;
	(void)idx;
	(void)key;
	return false;
}

static void store(struct stb_walkmemo *m, uint64_t hash, const uint64_t *key, unsigned nreads,
		  const struct stb_stack_copy *copy, const struct stb_frame_sink *sink, int rc)
{
	size_t nfr = sink->n;
	size_t size = sizeof(struct rec) + nfr * sizeof(struct stb_frame) + nreads * 12;
	if (m->st.bytes + size > m->max_bytes)
		return;
	struct rec *r = malloc(size);
	if (!r)
		return;
	r->hash = hash;
	r->addr = copy->addr;
	r->len = copy->len;
	r->nreads = nreads;
	r->nfr = (uint32_t)nfr;
	r->rc = rc;
	r->n = sink->n;
	r->phys = sink->phys;
	r->truncated = sink->truncated;
	memcpy(r->key, key, sizeof(r->key));
	r->frames = (struct stb_frame *)(void *)r->data;
	r->val = (uint64_t *)(void *)(r->frames + nfr);
	r->at = (uint32_t *)(void *)(r->val + nreads);
	if (nfr)
		memcpy(r->frames, sink->frames, nfr * sizeof(struct stb_frame));
	const uint8_t *b = copy->bytes;
	for (unsigned i = 0; i < nreads; i++) {
		uint64_t w;
		bool in;
		memcpy(&w, b + (size_t)m->log[i] * 8, 8);
		r->val[i] = norm(w, copy->addr, copy->len, &in);
		r->at[i] = m->log[i] | (in ? IN_COPY : 0);
	}
	if (m->n >= UINT32_MAX - 1 || stb_hashset_reserve(&m->set, m, rec_rehash) != 0 ||
	    stb_grow(&m->recs, &m->cap, m->n + 1, sizeof(*m->recs)) != 0) {
		free(r);
		return;
	}
	uint32_t *slot = stb_hashset_find(&m->set, hash, m, rec_never, NULL);
	m->recs[m->n] = r;
	*slot = (uint32_t)++m->n;
	m->set.n++;
	m->st.stored++;
	m->st.bytes += size;
}

/* Delivers r's walk into sink for the copy at addr. */
static int replay(const struct rec *r, uint64_t addr, struct stb_frame_sink *sink)
{
	for (uint32_t i = 0; i < r->nfr && sink->frames; i++) {
		struct stb_frame f = r->frames[i];
		if (f.sp - r->addr <= r->len)
			f.sp = f.sp - r->addr + addr;
		sink->frames[i] = f;
	}
	sink->n = r->n;
	sink->phys = r->phys;
	sink->truncated = r->truncated;
	return r->rc;
}

static bool usable(const struct stb_walkmemo *m, const struct stb_stack_copy *copy,
		   const struct stb_frame_sink *sink)
{
	return m && !m->st.off && copy && copy->bytes && copy->len &&
	       copy->len <= STB_WALKMEMO_MAX_COPY && !(copy->addr & 7) && !(copy->len & 7) &&
	       !sink->sym && !sink->on_frame && !sink->inline_frames && !sink->n &&
	       !sink->phys && !sink->truncated && !sink->stopped && !sink->timed_out;
}

/* Whether a frame's ip is a word that points into the copy: where it leads
 * (a module or none) depends on where the copy is. */
static bool ip_in_copy(const struct stb_stack_copy *copy, const struct stb_frame_sink *sink)
{
	size_t nfr = sink->frames ? (sink->n < sink->nframes ? sink->n : sink->nframes) : 0;
	if (nfr < sink->n)
		return true; /* frames not seen: cannot tell */
	for (size_t i = 0; i < nfr; i++)
		if (sink->frames[i].ip - copy->addr <= copy->len)
			return true;
	return false;
}

/* Ends that depend on nothing but the key (not on time or budgets). */
static bool end_is_settled(unsigned end, const struct stb_frame_sink *sink)
{
	switch (end) {
	case STB_UNW_END_BOTTOM:
	case STB_UNW_END_DEPTH:
	case STB_UNW_END_NO_INFO:
	case STB_UNW_END_UNREADABLE:
	case STB_UNW_END_BAD_FRAME:
		return true;
	case STB_UNW_END_CALLBACK: /* the sink's depth limit, not its deadline */
		return sink->truncated && !sink->timed_out && !sink->stopped;
	default:
		return false;
	}
}

int stb_walkmemo_walk(struct stb_walkmemo *m, struct stb_unw_proc *unw,
		      const struct stb_regs *regs, const struct stb_stack_copy *copy,
		      struct stb_frame_sink *sink)
{
	struct stb_regs r = *regs;
	r.flags |= STB_UNW_COPY_ONLY;
	unsigned depth = stb_frame_sink_depth(sink);
	struct stb_unw_budget b = {.max_frames = depth};
	if (!unw || !usable(m, copy, sink))
		return stb_unw_walk_budget(unw, &r, copy, sink->skip, &b, stb_frame_sink_add, sink,
					   NULL);
	struct stb_mods *mods = stb_unw_proc_mods(unw);
	uint64_t gen = stb_mods_gen(mods);
	if (gen != m->gen) {
		clear(m);
		m->gen = gen;
	}
	uint64_t key[NKEY];
	uint64_t hash = make_key(key, &r, copy, sink, depth);
	m->st.lookups++;
	const struct rec *hit = find(m, hash, key, copy);
	if (hit) {
		m->st.hits++;
		return replay(hit, copy->addr, sink);
	}
	if (m->st.lookups >= OFF_AFTER && m->st.hits * HIT_RATIO < m->st.lookups) {
		m->st.off = true;
		clear(m);
		return stb_unw_walk_budget(unw, &r, copy, sink->skip, &b, stb_frame_sink_add, sink,
					   NULL);
	}
	b.read_log = m->log;
	b.read_log_cap = MAX_READS;
	struct stb_unw_result res;
	int rc = stb_unw_walk_budget(unw, &r, copy, sink->skip, &b, stb_frame_sink_add, sink, &res);
	if (rc >= 0 && res.replayable && end_is_settled(res.end, sink) &&
	    stb_mods_gen(mods) == gen && !ip_in_copy(copy, sink))
		store(m, hash, key, res.read_logged, copy, sink, rc);
	return rc;
}
