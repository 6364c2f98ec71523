/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target of the deadlock search (runtime/stacks/table/deadlock.c): the input
 * is a table of up to 512 tasks (3 bytes each: state and kind, the owner's
 * slot, the owner's version and hostile bits) whose owner words may change
 * between reads. Checked against a brute-force search: every cycle reported
 * is a real one of the graph as it stood at every read, none twice, and every
 * real cycle whose owner words did not move is reported; and what each task
 * holds: every waiter on a mutex, an rwlock or a bthread_id counted once, by
 * owner and object, sorted.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "table/deadlock.h"

#define MAXN 512u
#define OWNER_BASE 0x7f0000000000ull

struct slot {
	uint64_t id, target;
	unsigned state, kind;
	bool flip; /* its owner word reads 0 after the first read */
};

struct graph {
	struct slot s[MAXN];
	uint32_t n;
	unsigned reads[MAXN];
	struct stb_abi_task scratch;
};

static const unsigned kinds[8] = {STB_WAIT_NONE,  STB_WAIT_MUTEX, STB_WAIT_JOIN,
				  STB_WAIT_ID,    STB_WAIT_RWLOCK_WR, STB_WAIT_RWLOCK_RD,
				  STB_WAIT_BUTEX, STB_WAIT_COND};

static struct stb_abi_task *entry(void *ctx, uint32_t slot, uint32_t *next)
{
	struct graph *g = ctx;
	*next = slot + 1;
	if (slot >= g->n)
		return NULL;
	const struct slot *s = &g->s[slot];
	struct stb_abi_task *p = &g->scratch;
	memset(p, 0, sizeof(*p));
	p->id = s->id;
	p->word = 5ull << 32 | s->state;
	p->since_ns = 1;
	p->stack_lo = 0x1000;
	p->stack_hi = 0x2000;
	p->wait_word = STB_ABI_WAIT_WORD(s->kind, 0, 0, 0);
	p->wait_object = 0x10000 + 64ull * (slot % 4); /* waiters share objects */
	if (s->kind == STB_WAIT_JOIN)
		p->wait_owner = s->target;
	else
		p->wait_extra = OWNER_BASE + 8ull * slot;
	return p;
}

static int mem_read(void *ctx, uint64_t addr, void *dst, size_t len)
{
	struct graph *g = ctx;
	if (len != 8 || addr < OWNER_BASE || (addr - OWNER_BASE) / 8 >= g->n)
		return -EFAULT;
	uint64_t slot = (addr - OWNER_BASE) / 8;
	uint64_t v = g->s[slot].flip && g->reads[slot]++ ? 0 : g->s[slot].target;
	memcpy(dst, &v, 8);
	return 0;
}

/* The slot x waits for (an edge of the graph), or UINT32_MAX. */
static uint32_t succ(const struct graph *g, uint32_t x)
{
	const struct slot *s = &g->s[x];
	bool waits = s->id && s->state == STB_TASK_SUSPENDED &&
		     (stb_wait_has_owner_word(s->kind) || s->kind == STB_WAIT_JOIN);
	if (!waits || !s->target || STB_ABI_OWNER_IS_TID(s->target))
		return UINT32_MAX;
	uint32_t y = STB_ABI_SLOT(s->target);
	if (y >= g->n || g->s[y].id != s->target || !g->s[y].id ||
	    g->s[y].state == STB_TASK_UNUSED || g->s[y].state == STB_TASK_DESTROYED)
		return UINT32_MAX;
	return y;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct graph g;
	memset(&g, 0, sizeof(g));
	g.n = (uint32_t)(size / 3 < MAXN ? size / 3 : MAXN);
	for (uint32_t i = 0; i < g.n; i++) {
		const uint8_t *b = data + 3 * i;
		struct slot *s = &g.s[i];
		s->id = (uint64_t)(1 + (b[0] >> 7)) << 32 | i;
		static const unsigned states[4] = {STB_TASK_SUSPENDED, STB_TASK_SUSPENDED,
						   STB_TASK_READY, STB_TASK_DESTROYED};
		s->state = states[(b[0] >> 5) & 3];
		s->kind = kinds[b[0] & 7];
		uint32_t to = ((uint32_t)b[1] | (uint32_t)(b[2] & 1) << 8) % (g.n ? g.n : 1);
		s->target = (uint64_t)(1 + ((b[2] >> 1) & 1)) << 32 | to;
		if (b[2] & 4)
			s->target = STB_ABI_OWNER_TID(to);
		s->flip = (b[2] & 0x18) == 0x18 && stb_wait_has_owner_word(s->kind);
		if ((b[0] & 0x18) == 0x18)
			s->id = 0; /* never used */
	}
	struct stb_tview_src src = {.entry = entry, .ctx = &g, .nslots = g.n};
	struct stb_mem mem = {.read = mem_read, .ctx = &g};
	struct stb_deadlocks d;
	if (stb_deadlock_find(&src, &mem, 0, &d, NULL) != 0)
		abort();
	static uint8_t member[MAXN];
	memset(member, 0, sizeof(member));
	for (size_t c = 0; c < d.ncycles; c++) {
		size_t n;
		const struct stb_deadlock_member *m = stb_deadlock_cycle(&d, c, &n);
		for (size_t i = 0; i < n; i++) {
			uint32_t x = m[i].slot;
			/* A real edge to the next member, of a slot not seen before,
			 * never one whose owner word moved. */
			if (x >= g.n || member[x] || g.s[x].flip || m[i].id != g.s[x].id ||
			    succ(&g, x) != m[(i + 1) % n].slot || m[i].held_by != m[(i + 1) % n].id)
				abort();
			member[x] = 1;
		}
	}
	/* Every node on a real cycle of the graph is reported, unless an owner
	 * word on that cycle moved. */
	for (uint32_t i = 0; i < g.n; i++) {
		uint32_t x = i;
		bool on = false, moved = g.s[i].flip;
		for (uint32_t step = 0; step < g.n && x != UINT32_MAX; step++) {
			x = succ(&g, x);
			if (x == i) {
				on = true;
				break;
			}
			if (x != UINT32_MAX)
				moved |= g.s[x].flip;
		}
		if ((on && !moved) != (member[i] != 0))
			abort();
	}
	if (d.partial)
		abort();
	/* Holds: each waiting edge to an owner, as read first, counted once. */
	uint64_t edges = 0, counted = 0;
	for (uint32_t i = 0; i < g.n; i++) {
		const struct slot *x = &g.s[i];
		edges += x->id && x->state == STB_TASK_SUSPENDED && stb_wait_has_owner_word(x->kind) &&
			 x->target && !STB_ABI_OWNER_IS_TID(x->target);
	}
	for (size_t i = 0; i < d.nholds; i++) {
		const struct stb_deadlock_hold *h = &d.holds[i];
		if (!h->waiting || (h->kind != STB_WAIT_MUTEX && h->kind != STB_WAIT_RWLOCK_WR &&
				    h->kind != STB_WAIT_ID))
			abort();
		if (i) {
			const struct stb_deadlock_hold *p = &d.holds[i - 1];
			if (p->owner > h->owner ||
			    (p->owner == h->owner &&
			     (p->kind > h->kind || (p->kind == h->kind && p->object >= h->object))))
				abort(); /* not sorted, or twice */
		}
		size_t n;
		const struct stb_deadlock_hold *run = stb_deadlock_holds(&d, h->owner, &n);
		if (!run || h < run || h >= run + n)
			abort();
		counted += h->waiting;
	}
	if (counted != edges)
		abort();
	stb_deadlocks_free(&d);
	return 0;
}
