/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The deadlock search (runtime/stacks/table/deadlock.c) on synthetic and hostile
 * task tables: every cycle of the wait-for graph found exactly once, no false
 * one (owners that point to a free slot, to a reused slot, to the task itself
 * only when it really holds it; owner words and entries that change between
 * the reads), and bounded time and memory on long chains and huge tables;
 * and what each task holds that others wait on.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "table/deadlock.h"
#include "util.h"

/* Owner words live at fake target addresses: OWNER_BASE + 8 * slot. */
#define OWNER_BASE 0x7f0000000000ull
#define OBJ_BASE 0x7e0000000000ull

/* What a synthetic slot holds. */
struct slot {
	uint64_t id;
	unsigned state;
	unsigned kind;     /* STB_WAIT_* */
	uint64_t target;   /* MUTEX etc.: the owner word's value; JOIN: the joined id */
	uint32_t flags;    /* STB_ABI_TASK_F_* */
	uint64_t object;   /* what it waits on; 0: an object of its own */
};

struct graph {
	struct slot *s;
	uint32_t n;
	struct stb_abi_task scratch;
	/* Hostility: after `flip_after` reads of the owner word of slot
	 * flip_slot, it reads flip_value instead (UINT32_MAX: never). */
	uint32_t flip_slot;
	uint64_t flip_after, flip_value, reads;
	/* After `bump_after` lookups of slot bump_slot its run sequence changes. */
	uint32_t bump_slot;
	uint64_t bump_after, lookups;
	/* Generated slots: slot i waits on a mutex held by id of slot gen_next(i). */
	bool generated;
	uint32_t gen_n;
	uint64_t mem_reads;
};

static uint64_t mkid(uint32_t slot, uint32_t version)
{
	return (uint64_t)version << 32 | slot;
}

static void fill(struct stb_abi_task *p, uint32_t slot, const struct slot *s, uint32_t seq)
{
	memset(p, 0, sizeof(*p));
	p->id = s->id;
	p->word = (uint64_t)seq << 32 | s->state;
	p->flags = s->flags;
	p->since_ns = 1000000000ull;
	p->stack_lo = 0x1000;
	p->stack_hi = 0x2000;
	snprintf(p->name, sizeof(p->name), "t%u", slot);
	if (s->kind == STB_WAIT_NONE)
		return;
	p->wait_word = STB_ABI_WAIT_WORD(s->kind, 0, 0, 0);
	p->wait_object = s->object ? s->object : OBJ_BASE + 64ull * slot;
	if (s->kind == STB_WAIT_JOIN)
		p->wait_owner = s->target;
	else
		p->wait_extra = OWNER_BASE + 8ull * slot;
}

static struct stb_abi_task *entry(void *ctx, uint32_t slot, uint32_t *next)
{
	struct graph *g = ctx;
	*next = slot + 1;
	if (g->generated) {
		struct slot s = {.id = mkid(slot, 1), .state = STB_TASK_SUSPENDED,
				 .kind = STB_WAIT_MUTEX};
		fill(&g->scratch, slot, &s, 1);
		return &g->scratch;
	}
	if (slot >= g->n)
		return NULL;
	uint32_t seq = 7;
	if (slot == g->bump_slot && g->lookups++ >= g->bump_after)
		seq = 8;
	fill(&g->scratch, slot, &g->s[slot], seq);
	return &g->scratch;
}

static int mem_read(void *ctx, uint64_t addr, void *dst, size_t len)
{
	struct graph *g = ctx;
	g->mem_reads++;
	if (len != 8 || addr < OWNER_BASE || (addr - OWNER_BASE) % 8)
		return -EFAULT;
	uint64_t slot = (addr - OWNER_BASE) / 8, v;
	if (g->generated) {
		if (slot >= g->gen_n)
			return -EFAULT;
		v = mkid((uint32_t)((slot + 1) % g->gen_n), 1); /* one ring of them all */
	} else {
		if (slot >= g->n)
			return -EFAULT;
		v = g->s[slot].target;
		if (slot == g->flip_slot && g->reads++ >= g->flip_after)
			v = g->flip_value;
	}
	memcpy(dst, &v, 8);
	return 0;
}

static struct graph *graph_new(uint32_t n)
{
	struct graph *g = calloc(1, sizeof(*g));
	assert_non_null(g);
	g->s = calloc(n ? n : 1, sizeof(*g->s));
	assert_non_null(g->s);
	g->n = n;
	g->flip_slot = UINT32_MAX;
	g->bump_slot = UINT32_MAX;
	for (uint32_t i = 0; i < n; i++)
		g->s[i] = (struct slot){.id = mkid(i, 1), .state = STB_TASK_SUSPENDED};
	return g;
}

static void graph_free(struct graph *g)
{
	free(g->s);
	free(g);
}

/* Slot a waits, as kind, on what slot b holds (by b's id). */
static void edge(struct graph *g, uint32_t a, uint32_t b, unsigned kind)
{
	g->s[a].kind = kind;
	g->s[a].target = g->s[b].id;
}

static void find(struct graph *g, uint64_t deadline, struct stb_deadlocks *d)
{
	struct stb_tview_src src = {.entry = entry, .ctx = g, .nslots = g->generated ? g->gen_n : g->n};
	struct stb_mem mem = {.read = mem_read, .ctx = g};
	assert_int_equal(stb_deadlock_find(&src, &mem, deadline, d, NULL), 0);
}

/* As the loader does it: every live task of one scan of the whole table, in
 * any state, handed to the search, which may say it takes no more (the scan
 * goes on regardless). */
static int feed_one(void *arg, uint32_t slot, struct stb_abi_task *p,
		    const struct stb_tview_task *v)
{
	(void)stb_deadlock_scan_add(arg, slot, p, v);
	return 0;
}

static void find_fed(struct graph *g, struct stb_deadlocks *d)
{
	struct stb_tview_src src = {
	    .entry = entry, .ctx = g, .nslots = g->generated ? g->gen_n : g->n};
	struct stb_mem mem = {.read = mem_read, .ctx = g};
	struct stb_deadlock_scan *f = stb_deadlock_scan_new(&src, &mem);
	assert_non_null(f);
	struct stb_tview_scan_result res;
	stb_tview_scan(&src, 0, 0, feed_one, f, &res);
	assert_int_equal(stb_deadlock_scan_end(f, false, 0, d), 0);
	stb_deadlock_scan_free(f);
}

/* Every cycle of d is a real cycle of g's edges (each member held by the
 * next, the last by the first), members distinct; no member in two cycles. */
static void check_cycles(const struct graph *g, const struct stb_deadlocks *d)
{
	uint8_t *seen = calloc(g->n ? g->n : 1, 1);
	assert_non_null(seen);
	size_t total = 0;
	for (size_t c = 0; c < d->ncycles; c++) {
		size_t n;
		const struct stb_deadlock_member *m = stb_deadlock_cycle(d, c, &n);
		assert_true(n >= 1);
		total += n;
		for (size_t i = 0; i < n; i++) {
			assert_true(m[i].slot < g->n);
			const struct slot *s = &g->s[m[i].slot];
			assert_int_equal(m[i].id, s->id);
			assert_int_equal(m[i].held_by, s->target);
			assert_int_equal(m[i].held_by, m[(i + 1) % n].id);
			assert_int_equal(m[i].wait.kind, s->kind);
			assert_false(seen[m[i].slot]);
			seen[m[i].slot] = 1;
		}
	}
	assert_int_equal(total, d->nmembers);
	free(seen);
}

/* The true cycles of g, brute force: a waiting node is on a cycle when
 * following owners from it comes back to it within n steps. */
static size_t true_cycles(const struct graph *g, size_t *members)
{
	size_t cycles = 0, mem = 0;
	for (uint32_t i = 0; i < g->n; i++) {
		uint32_t x = i, min = i;
		bool back = false;
		for (uint32_t step = 0; step <= g->n; step++) {
			const struct slot *s = &g->s[x];
			if (s->kind == STB_WAIT_NONE || s->state != STB_TASK_SUSPENDED || !s->target ||
			    STB_ABI_OWNER_IS_TID(s->target))
				break;
			uint32_t y = STB_ABI_SLOT(s->target);
			if (y >= g->n || g->s[y].id != s->target || g->s[y].state == STB_TASK_DESTROYED ||
			    g->s[y].state == STB_TASK_UNUSED)
				break;
			if (y < min)
				min = y;
			if (y == i) {
				back = true;
				break;
			}
			x = y;
		}
		if (back) {
			mem++;
			if (min == i) /* counted once, at its lowest slot */
				cycles++;
		}
	}
	*members = mem;
	return cycles;
}

static void test_cycles_of_every_length(void **state)
{
	(void)state;
	static const unsigned kinds[] = {STB_WAIT_MUTEX, STB_WAIT_RWLOCK_WR, STB_WAIT_RWLOCK_RD,
					 STB_WAIT_ID, STB_WAIT_JOIN};
	for (uint32_t len = 1; len <= 8; len++) {
		/* A cycle of len, a tail of 3 leading into it, an idle task. */
		struct graph *g = graph_new(len + 4);
		for (uint32_t i = 0; i < len; i++)
			edge(g, i, (i + 1) % len, kinds[(i + len) % 5]);
		edge(g, len, len + 1, STB_WAIT_MUTEX);
		edge(g, len + 1, len + 2, STB_WAIT_JOIN);
		edge(g, len + 2, 0, STB_WAIT_MUTEX);
		struct stb_deadlocks d;
		find(g, 0, &d);
		assert_int_equal(d.ncycles, 1);
		assert_int_equal(d.nmembers, len);
		assert_false(d.partial);
		assert_int_equal(d.moved, 0);
		assert_int_equal(d.waiting, len + 3);
		check_cycles(g, &d);
		stb_deadlocks_free(&d);
		graph_free(g);
	}
}

static void test_hostile_owners(void **state)
{
	(void)state;
	struct graph *g = graph_new(16);
	/* 0 -> 1 where slot 1 is free (never used) or destroyed. */
	edge(g, 0, 1, STB_WAIT_MUTEX);
	g->s[1].state = STB_TASK_UNUSED;
	g->s[1].id = 0;
	g->s[0].target = mkid(1, 1);
	edge(g, 2, 3, STB_WAIT_MUTEX);
	edge(g, 3, 2, STB_WAIT_MUTEX);
	g->s[3].state = STB_TASK_DESTROYED; /* was in a cycle, finished */
	/* 4 -> slot 5 by version 1, but slot 5 now holds version 2 that waits on 4. */
	edge(g, 4, 5, STB_WAIT_MUTEX);
	g->s[5].id = mkid(5, 2);
	edge(g, 5, 4, STB_WAIT_MUTEX);
	/* Owners that are pthreads not registered, nonsense, out of range. */
	g->s[6].kind = STB_WAIT_MUTEX;
	g->s[6].target = STB_ABI_OWNER_TID(1234);
	g->s[7].kind = STB_WAIT_MUTEX;
	g->s[7].target = mkid(100000, 1);
	g->s[8].kind = STB_WAIT_JOIN;
	g->s[8].target = UINT64_MAX;
	/* Kinds without an owner never make edges, whatever their words say. */
	g->s[9].kind = STB_WAIT_BUTEX;
	g->s[9].target = g->s[10].id;
	g->s[10].kind = STB_WAIT_COND;
	g->s[10].target = g->s[9].id;
	/* A task that is not suspended (ready) does not wait. */
	edge(g, 11, 12, STB_WAIT_MUTEX);
	edge(g, 12, 11, STB_WAIT_MUTEX);
	g->s[12].state = STB_TASK_READY;
	struct stb_deadlocks d;
	find(g, 0, &d);
	assert_int_equal(d.ncycles, 0);
	assert_int_equal(d.nmembers, 0);
	assert_false(d.partial);
	stb_deadlocks_free(&d);

	/* The owner word names the waiter itself: it locked what it waits for
	 * (a non-recursive mutex locked twice) -- a deadlock of one. */
	edge(g, 13, 13, STB_WAIT_MUTEX);
	find(g, 0, &d);
	assert_int_equal(d.ncycles, 1);
	assert_int_equal(d.nmembers, 1);
	assert_int_equal(d.members[0].id, g->s[13].id);
	assert_int_equal(d.members[0].held_by, g->s[13].id);
	check_cycles(g, &d);
	stb_deadlocks_free(&d);
	graph_free(g);
}

static void test_registered_pthread_in_cycle(void **state)
{
	(void)state;
	struct graph *g = graph_new(3);
	edge(g, 0, 1, STB_WAIT_MUTEX);
	edge(g, 1, 2, STB_WAIT_ID);
	edge(g, 2, 0, STB_WAIT_MUTEX);
	/* A registered pthread blocks while its entry says running. */
	g->s[1].state = STB_TASK_RUNNING;
	g->s[1].flags = STB_ABI_TASK_F_PTHREAD;
	struct stb_deadlocks d;
	find(g, 0, &d);
	assert_int_equal(d.ncycles, 1);
	assert_int_equal(d.nmembers, 3);
	bool pthread = false;
	for (size_t i = 0; i < d.nmembers; i++)
		pthread |= d.members[i].is_pthread && d.members[i].id == g->s[1].id;
	assert_true(pthread);
	stb_deadlocks_free(&d);
	/* A running bthread (not a pthread) has no valid wait: no cycle. */
	g->s[1].flags = 0;
	find(g, 0, &d);
	assert_int_equal(d.ncycles, 0);
	stb_deadlocks_free(&d);
	graph_free(g);
}

static void test_moving_graph(void **state)
{
	(void)state;
	/* A 3-cycle whose owner word of slot 1 changes after the first read
	 * (the mutex was handed on): no cycle, counted as moved -- whether it
	 * changes before the validation or between its two reads. */
	for (uint64_t after = 1; after <= 2; after++) {
		struct graph *g = graph_new(3);
		edge(g, 0, 1, STB_WAIT_MUTEX);
		edge(g, 1, 2, STB_WAIT_MUTEX);
		edge(g, 2, 0, STB_WAIT_MUTEX);
		g->flip_slot = 1;
		g->flip_after = after;
		g->flip_value = 0; /* released */
		struct stb_deadlocks d;
		find(g, 0, &d);
		assert_int_equal(d.ncycles, 0);
		assert_int_equal(d.nmembers, 0);
		assert_int_equal(d.moved, 1);
		stb_deadlocks_free(&d);
		graph_free(g);
	}
	/* A member ran meanwhile (its run sequence changed at the re-read). */
	for (uint64_t after = 1; after <= 2; after++) {
		struct graph *g = graph_new(2);
		edge(g, 0, 1, STB_WAIT_JOIN);
		edge(g, 1, 0, STB_WAIT_MUTEX);
		g->bump_slot = 0;
		g->bump_after = after;
		struct stb_deadlocks d;
		find(g, 0, &d);
		assert_int_equal(d.ncycles, 0);
		assert_int_equal(d.moved, 1);
		stb_deadlocks_free(&d);
		graph_free(g);
	}
}

static void test_many_disjoint_cycles(void **state)
{
	(void)state;
	/* 3000 cycles of lengths 1..8 side by side, with chains into them. */
	uint32_t n = 0, want = 0, members = 0;
	for (uint32_t c = 0; c < 3000; c++)
		n += c % 8 + 1 + c % 3;
	struct graph *g = graph_new(n);
	uint32_t at = 0;
	for (uint32_t c = 0; c < 3000; c++) {
		uint32_t len = c % 8 + 1, tail = c % 3;
		for (uint32_t i = 0; i < len; i++)
			edge(g, at + i, at + (i + 1) % len, c & 1 ? STB_WAIT_JOIN : STB_WAIT_MUTEX);
		for (uint32_t i = 0; i < tail; i++)
			edge(g, at + len + i, i ? at + len + i - 1 : at, STB_WAIT_MUTEX);
		at += len + tail;
		want++;
		members += len;
	}
	struct stb_deadlocks d;
	find(g, 0, &d);
	assert_int_equal(d.ncycles, want);
	assert_int_equal(d.nmembers, members);
	check_cycles(g, &d);
	stb_deadlocks_free(&d);
	graph_free(g);
}

static void test_long_chain_and_ring(void **state)
{
	(void)state;
	const uint32_t n = 65536;
	struct graph *g = graph_new(n);
	for (uint32_t i = 0; i + 1 < n; i++)
		edge(g, i, i + 1, i & 1 ? STB_WAIT_JOIN : STB_WAIT_MUTEX);
	struct stb_deadlocks d;
	uint64_t t0 = stb_now_ns();
	find(g, 0, &d);
	uint64_t chain_ns = stb_now_ns() - t0;
	assert_int_equal(d.ncycles, 0);
	assert_int_equal(d.waiting, n - 1);
	assert_false(d.partial);
	/* Linear: each owner word read a bounded number of times. */
	assert_true(g->mem_reads <= 2ull * n);
	stb_deadlocks_free(&d);
	/* Closing the chain: one ring of 65,536, longer than a reported cycle
	 * may be -- not reported, and the result says the search is partial. */
	edge(g, n - 1, 0, STB_WAIT_MUTEX);
	find(g, 0, &d);
	assert_int_equal(d.ncycles, 0);
	assert_true(d.partial);
	stb_deadlocks_free(&d);
	/* A ring of exactly STB_DEADLOCK_MAX_CYCLE is reported, once. */
	for (uint32_t i = 0; i < n; i++)
		g->s[i].kind = STB_WAIT_NONE;
	for (uint32_t i = 0; i < STB_DEADLOCK_MAX_CYCLE; i++)
		edge(g, i, (i + 1) % STB_DEADLOCK_MAX_CYCLE, STB_WAIT_MUTEX);
	find(g, 0, &d);
	assert_int_equal(d.ncycles, 1);
	assert_int_equal(d.nmembers, STB_DEADLOCK_MAX_CYCLE);
	check_cycles(g, &d);
	stb_deadlocks_free(&d);
	/* Generous bound (a loaded machine, sanitizers): seconds, not minutes. */
	assert_true(chain_ns < 20ull * 1000000000u);
	graph_free(g);
}

static void test_random_graphs(void **state)
{
	(void)state;
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	for (int round = 0; round < 400; round++) {
		uint32_t n = 1 + (uint32_t)(seed % 200);
		struct graph *g = graph_new(n);
		for (uint32_t i = 0; i < n; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			uint32_t r = (uint32_t)(seed >> 33);
			if (r % 5 == 0)
				continue; /* not waiting */
			static const unsigned kinds[] = {STB_WAIT_MUTEX, STB_WAIT_JOIN, STB_WAIT_ID,
							 STB_WAIT_RWLOCK_WR};
			edge(g, i, (r >> 4) % n, kinds[(r >> 2) % 4]);
			if (r % 17 == 0)
				g->s[i].target = mkid((r >> 4) % n, 2); /* a stale version */
			if (r % 23 == 0)
				g->s[i].state = STB_TASK_READY;
			if (r % 29 == 0)
				g->s[i].target = STB_ABI_OWNER_TID(r);
		}
		size_t members;
		size_t want = true_cycles(g, &members);
		struct stb_deadlocks d;
		find(g, 0, &d);
		assert_int_equal(d.ncycles, want);
		assert_int_equal(d.nmembers, members);
		assert_false(d.partial);
		check_cycles(g, &d);
		stb_deadlocks_free(&d);
		/* The same from a scan that hands over every state. */
		find_fed(g, &d);
		assert_int_equal(d.ncycles, want);
		assert_int_equal(d.nmembers, members);
		assert_false(d.partial);
		check_cycles(g, &d);
		stb_deadlocks_free(&d);
		graph_free(g);
	}
}

/* What each task holds that others wait on: the waiters of one object
 * counted once per object, an rwlock's readers and writers together, sorted
 * by kind and object; nothing for joins, pthreads by tid, or tasks nobody
 * waits on; the same from a search fed by a scan; and the census of the
 * scan. */
static void test_holds(void **state)
{
	(void)state;
	struct graph *g = graph_new(12);
	const uint64_t A = OBJ_BASE + 0x10000, B = OBJ_BASE + 0x20000, R = OBJ_BASE + 0x30000,
		       I = 0x123456789ull;
	for (uint32_t i = 1; i <= 3; i++) { /* 1, 2, 3 wait on mutex A held by 0 */
		edge(g, i, 0, STB_WAIT_MUTEX);
		g->s[i].object = A;
	}
	edge(g, 5, 4, STB_WAIT_RWLOCK_RD); /* 5 reads, 6 writes rwlock R written by 4 */
	g->s[5].object = R;
	edge(g, 6, 4, STB_WAIT_RWLOCK_WR);
	g->s[6].object = R;
	edge(g, 7, 4, STB_WAIT_MUTEX); /* 4 holds mutex B too */
	g->s[7].object = B;
	edge(g, 8, 0, STB_WAIT_ID); /* and 0 a bthread_id */
	g->s[8].object = I;
	edge(g, 9, 4, STB_WAIT_JOIN);            /* a join holds nothing */
	g->s[10].kind = STB_WAIT_MUTEX;          /* held by a pthread not registered */
	g->s[10].target = STB_ABI_OWNER_TID(77);
	g->s[11].state = STB_TASK_READY;
	for (int fed = 0; fed < 2; fed++) {
		struct stb_deadlocks d;
		if (fed)
			find_fed(g, &d);
		else
			find(g, 0, &d);
		size_t n;
		const struct stb_deadlock_hold *h = stb_deadlock_holds(&d, g->s[0].id, &n);
		assert_int_equal(n, 2);
		assert_int_equal(h[0].kind, STB_WAIT_MUTEX);
		assert_int_equal(h[0].object, A);
		assert_int_equal(h[0].waiting, 3);
		assert_int_equal(h[0].owner, g->s[0].id);
		assert_int_equal(h[1].kind, STB_WAIT_ID);
		assert_int_equal(h[1].object, I);
		assert_int_equal(h[1].waiting, 1);
		h = stb_deadlock_holds(&d, g->s[4].id, &n);
		assert_int_equal(n, 2);
		assert_int_equal(h[0].kind, STB_WAIT_MUTEX);
		assert_int_equal(h[0].object, B);
		assert_int_equal(h[0].waiting, 1);
		assert_int_equal(h[1].kind, STB_WAIT_RWLOCK_WR);
		assert_int_equal(h[1].object, R);
		assert_int_equal(h[1].waiting, 2);
		for (uint32_t i = 1; i < 12; i++)
			if (i != 4)
				assert_null(stb_deadlock_holds(&d, g->s[i].id, &n));
		assert_null(stb_deadlock_holds(&d, STB_ABI_OWNER_TID(77), &n));
		assert_int_equal(n, 0);
		assert_null(stb_deadlock_holds(NULL, g->s[0].id, &n));
		assert_int_equal(d.ncycles, 0);
		stb_deadlocks_free(&d);
	}
	struct stb_tview_src src = {.entry = entry, .ctx = g, .nslots = g->n};
	struct stb_mem mem = {.read = mem_read, .ctx = g};
	struct stb_deadlocks d;
	struct stb_tview_census census;
	memset(&census, 0xff, sizeof(census));
	assert_int_equal(stb_deadlock_find(&src, &mem, 0, &d, &census), 0);
	assert_int_equal(census.by_state[STB_TASK_SUSPENDED], 11);
	assert_int_equal(census.by_state[STB_TASK_READY], 1);
	assert_int_equal(census.by_state[STB_TASK_RUNNING], 0);
	assert_int_equal(census.pthreads, 0);
	stb_deadlocks_free(&d);
	graph_free(g);
}

static void test_huge_table_bounded(void **state)
{
	(void)state;
	/* A table that claims more waiting tasks (in one ring) than the search
	 * follows: it takes STB_DEADLOCK_MAX_NODES of them and says so. */
	struct graph *g = graph_new(0);
	g->generated = true;
	g->gen_n = STB_DEADLOCK_MAX_NODES + 4096;
	struct stb_deadlocks d;
	find(g, 0, &d);
	assert_int_equal(d.ncycles, 0);
	assert_int_equal(d.waiting, STB_DEADLOCK_MAX_NODES);
	assert_true(d.partial);
	stb_deadlocks_free(&d);
	/* Fed by a scan that goes on past the bound: the same. */
	find_fed(g, &d);
	assert_int_equal(d.ncycles, 0);
	assert_int_equal(d.waiting, STB_DEADLOCK_MAX_NODES);
	assert_true(d.partial);
	stb_deadlocks_free(&d);
	/* With a deadline that has passed: it stops at once, partial. */
	g->mem_reads = 0;
	find(g, stb_now_ns() > 1 ? stb_now_ns() - 1 : 1, &d);
	assert_true(d.partial);
	assert_int_equal(d.ncycles, 0);
	assert_true(g->mem_reads < 1000);
	stb_deadlocks_free(&d);
	graph_free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cycles_of_every_length),
		cmocka_unit_test(test_hostile_owners),
		cmocka_unit_test(test_registered_pthread_in_cycle),
		cmocka_unit_test(test_moving_graph),
		cmocka_unit_test(test_many_disjoint_cycles),
		cmocka_unit_test(test_long_chain_and_ring),
		cmocka_unit_test(test_random_graphs),
		cmocka_unit_test(test_huge_table_bounded),
		cmocka_unit_test(test_holds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
