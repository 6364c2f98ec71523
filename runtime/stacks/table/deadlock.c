/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cycles of a table's wait-for graph, validated before they are
 * reported (deadlock.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hashset.h"
#include "table/deadlock.h"
#include "util.h"

#define NONE UINT32_MAX

/* A waiting task with a wait-for edge, as first read. */
struct node {
	uint64_t id, word, wait_word, object, extra;
	uint64_t owner; /* who holds what it waits on (a task id) */
	uint32_t slot;
	uint32_t next;  /* the owner's node, NONE: no such waiting task */
	uint32_t mark;  /* the walk that visited it, 0: none yet */
	bool pthread;
};

struct stb_deadlock_scan {
	struct stb_tview_src src; /* a copy: entries are looked up again in it */
	const struct stb_mem *mem;
	uint64_t deadline;
	struct node *nodes;
	size_t n, cap;
	bool partial;
	int err;
};

/* The owner word at addr now (0 when it cannot be read). */
static uint64_t owner_now(const struct stb_mem *mem, uint64_t addr)
{
	uint64_t v = 0;
	if (!addr || (addr & 7) || mem->read(mem->ctx, addr, &v, sizeof(v)) != 0)
		return 0;
	return v;
}

/* The owner of w's object now: a task id, or 0 (none, unknown, a pthread
 * that is not registered). */
static uint64_t edge_owner(const struct stb_mem *mem, const struct stb_wait_view *w)
{
	uint64_t o = 0;
	if (stb_wait_has_owner_word(w->kind))
		o = owner_now(mem, w->extra);
	else if (w->kind == STB_WAIT_JOIN)
		o = w->owner;
	return STB_ABI_OWNER_IS_TID(o) ? 0 : o;
}

int stb_deadlock_scan_add(struct stb_deadlock_scan *f, uint32_t slot, struct stb_abi_task *p,
			  const struct stb_tview_task *v)
{
	if (f->err)
		return 1;
	if ((v->bad & STB_TVIEW_BAD_STATE) || !(STB_DEADLOCK_STATES & (1u << v->state)))
		return 0;
	bool pthread = (v->flags & STB_ABI_TASK_F_PTHREAD) != 0;
	struct stb_wait_view w;
	struct stb_wait_seen seen;
	if (!stb_wait_read(p, &w, &seen) || (!stb_wait_has_owner_word(w.kind) && w.kind != STB_WAIT_JOIN))
		return 0;
	uint64_t owner = edge_owner(f->mem, &w);
	if (!owner)
		return 0; /* its own id: it locked what it waits for, a cycle of one */
	if (f->n == STB_DEADLOCK_MAX_NODES) {
		f->partial = true;
		return 1;
	}
	if (stb_grow(&f->nodes, &f->cap, f->n + 1, sizeof(*f->nodes)) != 0) {
		f->err = -ENOMEM;
		return 1;
	}
	f->nodes[f->n++] = (struct node){
		.id = v->id, .word = seen.word, .wait_word = seen.wait_word, .object = w.object,
		.extra = w.extra, .owner = owner, .slot = slot, .next = NONE, .pthread = pthread,
	};
	return 0;
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

/* Links every node to its owner's node (an id -> node hash). */
static int link_nodes(struct stb_deadlock_scan *f)
{
	size_t cap = 16;
	while (cap < f->n * 2)
		cap <<= 1;
	uint32_t *tab = malloc(cap * sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	memset(tab, 0xff, cap * sizeof(*tab));
	for (size_t i = 0; i < f->n; i++) {
		size_t k = mix(f->nodes[i].id) & (cap - 1);
		while (tab[k] != NONE && f->nodes[tab[k]].id != f->nodes[i].id)
			k = (k + 1) & (cap - 1);
		if (tab[k] == NONE)
			tab[k] = (uint32_t)i; /* a duplicate id (a corrupt table) keeps the first */
	}
	for (size_t i = 0; i < f->n; i++) {
		size_t k = mix(f->nodes[i].owner) & (cap - 1);
		while (tab[k] != NONE && f->nodes[tab[k]].id != f->nodes[i].owner)
			k = (k + 1) & (cap - 1);
		f->nodes[i].next = tab[k];
	}
	free(tab);
	return 0;
}

/* Reads member node x again: same task, same run, same wait, same owner. */
static bool still(const struct stb_deadlock_scan *f, const struct node *x,
		  struct stb_deadlock_member *m)
{
	struct stb_abi_task *p = stb_tview_at(&f->src, x->slot);
	if (!p || __atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != x->id)
		return false;
	struct stb_wait_view w;
	struct stb_wait_seen seen;
	if (!stb_wait_read(p, &w, &seen) || seen.word != x->word || seen.wait_word != x->wait_word ||
	    w.object != x->object || w.extra != x->extra || edge_owner(f->mem, &w) != x->owner ||
	    __atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != x->id)
		return false;
	if (m)
		*m = (struct stb_deadlock_member){.id = x->id, .slot = x->slot,
						  .is_pthread = x->pthread, .wait = w,
						  .word = seen.word, .since_ns = seen.since_ns,
						  .held_by = x->owner};
	return true;
}

static int add_cycle(struct stb_deadlock_scan *f, struct stb_deadlocks *d, uint32_t head,
		     size_t len)
{
	size_t have = d->nmembers, ncap = have + len;
	struct stb_deadlock_member *m = realloc(d->members, ncap * sizeof(*m));
	if (!m)
		return -ENOMEM;
	d->members = m;
	size_t *s = realloc(d->starts, (d->ncycles + 2) * sizeof(*s));
	if (!s)
		return -ENOMEM;
	d->starts = s;
	uint32_t x = head;
	bool ok = true;
	for (size_t i = 0; i < len && ok; i++, x = f->nodes[x].next)
		ok = still(f, &f->nodes[x], &m[have + i]);
	/* Once more, the words only: every member stayed where it was. */
	x = head;
	for (size_t i = 0; i < len && ok; i++, x = f->nodes[x].next)
		ok = still(f, &f->nodes[x], NULL);
	if (!ok) {
		d->moved++;
		return 0;
	}
	d->starts[d->ncycles] = have;
	d->ncycles++;
	d->starts[d->ncycles] = have + len;
	d->nmembers = have + len;
	return 0;
}

static unsigned hold_kind(uint64_t wait_word)
{
	unsigned k = STB_ABI_WAIT_KIND(wait_word);
	return k == STB_WAIT_RWLOCK_RD ? STB_WAIT_RWLOCK_WR : k;
}

static int hold_cmp(const void *x, const void *y)
{
	const struct stb_deadlock_hold *a = x, *b = y;
	if (a->owner != b->owner)
		return a->owner < b->owner ? -1 : 1;
	if (a->kind != b->kind)
		return a->kind < b->kind ? -1 : 1;
	return a->object < b->object ? -1 : a->object > b->object;
}

/* What each owner holds that others wait on: the edges of the waits on a
 * mutex, an rwlock or a bthread_id, by owner and object, counted. */
static int find_holds(const struct stb_deadlock_scan *f, struct stb_deadlocks *d)
{
	size_t n = 0;
	for (size_t i = 0; i < f->n; i++)
		n += stb_wait_has_owner_word(STB_ABI_WAIT_KIND(f->nodes[i].wait_word));
	if (!n)
		return 0;
	struct stb_deadlock_hold *h = malloc(n * sizeof(*h));
	if (!h)
		return -ENOMEM;
	n = 0;
	for (size_t i = 0; i < f->n; i++) {
		const struct node *x = &f->nodes[i];
		if (stb_wait_has_owner_word(STB_ABI_WAIT_KIND(x->wait_word)))
			h[n++] = (struct stb_deadlock_hold){.owner = x->owner, .object = x->object,
							    .kind = hold_kind(x->wait_word),
							    .waiting = 1};
	}
	qsort(h, n, sizeof(*h), hold_cmp);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (k && hold_cmp(&h[k - 1], &h[i]) == 0)
			h[k - 1].waiting++;
		else
			h[k++] = h[i];
	}
	d->holds = h;
	d->nholds = k;
	return 0;
}

const struct stb_deadlock_hold *stb_deadlock_holds(const struct stb_deadlocks *d,
						   uint64_t owner, size_t *n)
{
	*n = 0;
	if (!d || !d->nholds)
		return NULL;
	size_t lo = 0, hi = d->nholds;
	while (lo < hi) { /* the first of owner's */
		size_t mid = lo + (hi - lo) / 2;
		if (d->holds[mid].owner < owner)
			lo = mid + 1;
		else
			hi = mid;
	}
	size_t end = lo;
	while (end < d->nholds && d->holds[end].owner == owner)
		end++;
	*n = end - lo;
	return *n ? &d->holds[lo] : NULL;
}

/* Walks the functional graph once; every cycle met is validated and kept. */
static int find_cycles(struct stb_deadlock_scan *f, struct stb_deadlocks *d)
{
	uint32_t walk = 0;
	for (size_t i = 0; i < f->n; i++) {
		if (f->nodes[i].mark)
			continue;
		if ((++walk & 1023) == 0 && f->deadline && stb_now_ns() >= f->deadline) {
			f->partial = true;
			return 0;
		}
		uint32_t x = (uint32_t)i;
		while (x != NONE && !f->nodes[x].mark) {
			f->nodes[x].mark = walk;
			x = f->nodes[x].next;
		}
		if (x == NONE || f->nodes[x].mark != walk)
			continue; /* ends outside the graph, or in an older walk */
		size_t len = 1;
		for (uint32_t y = f->nodes[x].next; y != x; y = f->nodes[y].next)
			len++;
		if (len > STB_DEADLOCK_MAX_CYCLE) {
			f->partial = true;
			continue;
		}
		int rc = add_cycle(f, d, x, len);
		if (rc)
			return rc;
	}
	return 0;
}

static int collect(void *arg, uint32_t slot, struct stb_abi_task *p,
		   const struct stb_tview_task *v)
{
	return stb_deadlock_scan_add(arg, slot, p, v);
}

struct stb_deadlock_scan *stb_deadlock_scan_new(const struct stb_tview_src *src,
						const struct stb_mem *mem)
{
	struct stb_deadlock_scan *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->src = *src;
	f->mem = mem;
	return f;
}

int stb_deadlock_scan_end(struct stb_deadlock_scan *f, bool partial, uint64_t deadline,
			  struct stb_deadlocks *out)
{
	memset(out, 0, sizeof(*out));
	int rc = f->err;
	if (rc)
		goto cleanup;
	f->deadline = deadline;
	if (partial)
		f->partial = true;
	out->waiting = f->n;
	if (f->n && ((rc = find_holds(f, out)) != 0 || (rc = link_nodes(f)) != 0 ||
		     (rc = find_cycles(f, out)) != 0))
		goto cleanup;
	out->partial = f->partial;
cleanup:
	if (rc)
		stb_deadlocks_free(out);
	return rc;
}

void stb_deadlock_scan_free(struct stb_deadlock_scan *f)
{
	if (!f)
		return;
	free(f->nodes);
	free(f);
}

int stb_deadlock_find(const struct stb_tview_src *src, const struct stb_mem *mem,
		      uint64_t deadline, struct stb_deadlocks *out,
		      struct stb_tview_census *census)
{
	memset(out, 0, sizeof(*out));
	struct stb_deadlock_scan *f = stb_deadlock_scan_new(src, mem);
	if (!f)
		return -ENOMEM;
	struct stb_tview_scan_result res;
	stb_tview_scan(src, STB_DEADLOCK_STATES, deadline, collect, f, &res);
	int rc = stb_deadlock_scan_end(f, res.left != 0, deadline, out);
	stb_deadlock_scan_free(f);
	if (census)
		*census = res.census;
	return rc;
}

void stb_deadlocks_free(struct stb_deadlocks *d)
{
	if (!d)
		return;
	free(d->members);
	free(d->starts);
	free(d->holds);
	memset(d, 0, sizeof(*d));
}
