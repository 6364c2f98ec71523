/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The table reader (runtime/stacks/table/tview.c) on tables that lie: header checks
 * (magic, version, sizes, capacity, backing, a backing smaller than the
 * header says), the counters clamped, task entries with states, wait kinds,
 * workers and names out of range, and the scan (holes, state filters with
 * out-of-range states, the deadline, stopping, no memory per slot).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "table/tview.h"
#include "util.h"

static void good_header(struct stb_abi_header *h, uint32_t cap)
{
	memset(h, 0, sizeof(*h));
	h->magic = STB_ABI_MAGIC;
	h->abi_version = STB_ABI_VERSION;
	h->entry_size = STB_ABI_ENTRY_SIZE;
	h->header_entries = STB_ABI_HEADER_ENTRIES;
	h->max_workers = STB_ABI_MAX_WORKERS;
	h->task_capacity = cap;
	h->backing = STB_ABI_BACKING_MEMFD;
	h->table_size = STB_ABI_TABLE_SIZE(cap);
}

static void check_bad(const struct stb_abi_header *h, uint64_t real, int want, const char *what)
{
	struct stb_tview_info info;
	char why[256] = "";
	int rc = stb_tview_check_header(h, real, &info, why, sizeof(why));
	if (rc != want || !strstr(why, what))
		fail_msg("rc %d (want %d), why \"%s\" (want \"%s\" in it)", rc, want, why, what);
}

static void test_header(void **state)
{
	(void)state;
	struct stb_abi_header h;
	struct stb_tview_info info;
	char why[256];
	good_header(&h, 64);
	assert_int_equal(
	    stb_tview_check_header(&h, STB_ABI_TABLE_SIZE(64), &info, why, sizeof(why)), 0);
	assert_int_equal(info.capacity, 64);
	assert_int_equal(stb_tview_check_header(&h, 0, &info, why, sizeof(why)), 0);

	h.magic = 0;
	check_bad(&h, 0, -ENOENT, "magic");
	good_header(&h, 64);
	h.abi_version = 7;
	check_bad(&h, 0, -EPROTO, "ABI version 7; this reader understands ABI version 3");
	good_header(&h, 64);
	h.entry_size = 128;
	check_bad(&h, 0, -EPROTO, "entry size 128");
	good_header(&h, 64);
	h.header_entries = 1;
	check_bad(&h, 0, -EPROTO, "header entries 1");
	good_header(&h, 64);
	h.max_workers = 100000;
	check_bad(&h, 0, -EPROTO, "max workers");
	/* 16 M slots: four times what any runtime may publish. */
	good_header(&h, STB_ABI_MAX_CAPACITY * 4);
	check_bad(&h, 0, -EPROTO, "capacity 16777216 is not in 1..4194304");
	good_header(&h, 0);
	check_bad(&h, 0, -EPROTO, "capacity 0");
	good_header(&h, 64);
	h.table_size = 1u << 30;
	check_bad(&h, 0, -EPROTO, "does not match its capacity");
	/* A memfd shrunk below what the header says. */
	good_header(&h, 64);
	check_bad(&h, 4096, -EPROTO, "holds 4096 bytes");
	good_header(&h, 64);
	h.backing = 77;
	check_bad(&h, 0, -EPROTO, "backing 77");
}

static void test_counters(void **state)
{
	(void)state;
	struct stb_abi_header h;
	struct stb_tview_info info;
	char why[64];
	bool clamped;
	good_header(&h, 64);
	assert_int_equal(stb_tview_check_header(&h, 0, &info, why, sizeof(why)), 0);
	h.slot_hwm = 10;
	assert_int_equal(stb_tview_hwm(&h, &info, &clamped), 10);
	assert_false(clamped);
	h.slot_hwm = UINT64_MAX;
	assert_int_equal(stb_tview_hwm(&h, &info, &clamped), 64);
	assert_true(clamped);
	/* The live header cannot move the checked capacity. */
	h.task_capacity = 1u << 30;
	assert_int_equal(stb_tview_hwm(&h, &info, NULL), 64);
	h.nworkers = 3;
	assert_int_equal(stb_tview_nworkers(&h, &clamped), 3);
	assert_false(clamped);
	h.nworkers = 100000;
	assert_int_equal(stb_tview_nworkers(&h, &clamped), STB_ABI_MAX_WORKERS);
	assert_true(clamped);
}

static void set_task(struct stb_abi_task *p, uint64_t id, unsigned state)
{
	memset(p, 0, sizeof(*p));
	p->id = id;
	p->word = (uint64_t)5 << 32 | state;
	p->stack_lo = 0x10000;
	p->stack_hi = 0x20000;
	strcpy(p->name, "t");
}

static void test_read_task(void **state)
{
	(void)state;
	struct stb_abi_task p;
	struct stb_tview_task v;
	set_task(&p, 1ull << 32, STB_TASK_SUSPENDED);
	p.wait_word = STB_ABI_WAIT_WORD(STB_WAIT_FD, 0, 1, 7);
	stb_tview_read_task(NULL, &p, &v);
	assert_int_equal(v.bad, 0);
	assert_int_equal(v.state, STB_TASK_SUSPENDED);
	assert_int_equal(v.seq, 5);
	assert_int_equal(v.wait_kind, STB_WAIT_FD);
	assert_true(stb_tview_live(&v));

	p.word = 37; /* what a loader used to shift 1u by */
	p.wait_word = STB_ABI_WAIT_WORD(200, 0, 0, 0);
	memset(p.name, 'A', sizeof(p.name));
	stb_tview_read_task(NULL, &p, &v);
	assert_true(v.bad & STB_TVIEW_BAD_STATE);
	assert_true(v.bad & STB_TVIEW_BAD_KIND);
	assert_true(v.bad & STB_TVIEW_BAD_NAME);
	assert_int_equal(v.wait_kind, STB_WAIT_NONE);
	assert_int_equal(strlen(v.name), sizeof(v.name) - 1);

	set_task(&p, 1ull << 32, STB_TASK_RUNNING);
	p.worker = 999;
	stb_tview_read_task(NULL, &p, &v);
	assert_true(v.bad & STB_TVIEW_BAD_WORKER);
	p.flags = STB_ABI_TASK_F_PTHREAD; /* pthreads run on no worker */
	stb_tview_read_task(NULL, &p, &v);
	assert_false(v.bad & STB_TVIEW_BAD_WORKER);

	set_task(&p, 1ull << 32, STB_TASK_READY);
	p.stack_lo = p.stack_hi;
	stb_tview_read_task(NULL, &p, &v);
	assert_true(v.bad & STB_TVIEW_BAD_STACK);

	/* Where a bthread runs is what the worker entries say (abi.h): its word
	 * says READY (or READY_NO_STACK) while a worker's current names it. */
	static struct stb_abi_worker w[3];
	memset(w, 0, sizeof(w));
	w[0].current = 7ull << 32 | 3; /* another task */
	w[1].current = 1ull << 32;
	w[1].tid = 4242;
	w[2].tid = 4343;
	struct stb_tview_wsrc src = {.w = w, .n = 3};
	struct stb_tview_workers *ws = malloc(sizeof(*ws));
	assert_non_null(ws);
	stb_tview_workers_read(&src, ws);
	set_task(&p, 1ull << 32, STB_TASK_READY);
	stb_tview_read_task(ws, &p, &v);
	assert_int_equal(v.bad, 0);
	assert_int_equal(v.state, STB_TASK_RUNNING);
	assert_int_equal(v.worker, 1);
	assert_int_equal(v.tid, 4242);
	stb_tview_read_task_now(&src, &p, &v);
	assert_int_equal(v.state, STB_TASK_RUNNING);
	assert_int_equal(v.tid, 4242);
	p.word = STB_TASK_READY_NO_STACK; /* its first run */
	stb_tview_read_task(ws, &p, &v);
	assert_int_equal(v.state, STB_TASK_RUNNING);
	/* Switching to it: about to run. */
	w[1].current = 0;
	w[2].current = 1ull << 32 | STB_ABI_CURRENT_SWITCHING;
	stb_tview_workers_read(&src, ws);
	set_task(&p, 1ull << 32, STB_TASK_READY);
	stb_tview_read_task(ws, &p, &v);
	assert_int_equal(v.state, STB_TASK_ABOUT_TO_RUN);
	assert_int_equal(v.worker, 2);
	assert_int_equal(v.tid, 4343);
	assert_int_equal(stb_tview_named(ws, 1ull << 32, NULL), STB_TASK_ABOUT_TO_RUN);
	/* Leaving (SUSPENDING), suspended, or another version of the slot: not
	 * running, whatever a worker still says. */
	w[2].current = 1ull << 32;
	stb_tview_workers_read(&src, ws);
	set_task(&p, 1ull << 32, STB_TASK_SUSPENDING);
	stb_tview_read_task(ws, &p, &v);
	assert_int_equal(v.state, STB_TASK_SUSPENDING);
	assert_int_equal(v.worker, STB_ABI_MAX_WORKERS);
	set_task(&p, 2ull << 32, STB_TASK_READY);
	stb_tview_read_task(ws, &p, &v);
	assert_int_equal(v.state, STB_TASK_READY);
	assert_int_equal(v.tid, 0);
	/* Not named: queued. No worker entries at all: the same. */
	set_task(&p, 5ull << 32, STB_TASK_READY);
	stb_tview_read_task(ws, &p, &v);
	assert_int_equal(v.state, STB_TASK_READY);
	stb_tview_read_task(NULL, &p, &v);
	assert_int_equal(v.state, STB_TASK_READY);
	/* Ids no task has (0, the switching bit) are never named. */
	w[0].current = STB_ABI_CURRENT_SWITCHING;
	stb_tview_workers_read(&src, ws);
	assert_int_equal(stb_tview_named(ws, 0, NULL), STB_TASK_UNUSED);
	assert_int_equal(stb_tview_named(ws, STB_ABI_CURRENT_SWITCHING, NULL), STB_TASK_UNUSED);
	assert_int_equal(stb_tview_named_now(&src, STB_ABI_CURRENT_SWITCHING, NULL),
			 STB_TASK_UNUSED);
	/* A live header's worker count bounds the entries read; a hostile one
	 * is clamped. */
	struct stb_abi_header h;
	memset(&h, 0, sizeof(h));
	h.nworkers = 2;
	src.hdr = &h;
	assert_int_equal(stb_tview_named_now(&src, 1ull << 32, NULL), STB_TASK_UNUSED);
	h.nworkers = 3;
	assert_int_equal(stb_tview_named_now(&src, 1ull << 32, NULL), STB_TASK_RUNNING);
	free(ws);

	set_task(&p, 0, STB_TASK_SUSPENDED);
	stb_tview_read_task(NULL, &p, &v);
	assert_false(stb_tview_live(&v));
	set_task(&p, 1ull << 32, STB_TASK_DESTROYED);
	stb_tview_read_task(NULL, &p, &v);
	assert_false(stb_tview_live(&v));
}

/* A synthetic table of NSLOT entries; slots [HOLE_LO, HOLE_HI) are a hole. */
#define NSLOT 4096u
#define HOLE_LO 1000u
#define HOLE_HI 3000u

struct table {
	struct stb_abi_task *t;
	unsigned entry_calls;
};

static struct stb_abi_task *table_entry(void *ctx, uint32_t slot, uint32_t *next)
{
	struct table *tb = ctx;
	tb->entry_calls++;
	if (slot >= HOLE_LO && slot < HOLE_HI) {
		*next = HOLE_HI;
		return NULL;
	}
	*next = slot + 1;
	return &tb->t[slot];
}

struct seen {
	unsigned n, stop_after;
	uint32_t last_slot;
	bool ordered;
};

static int count_fn(void *arg, uint32_t slot, struct stb_abi_task *p,
		    const struct stb_tview_task *v)
{
	struct seen *s = arg;
	(void)p;
	(void)v;
	if (s->n && slot <= s->last_slot)
		s->ordered = false;
	s->last_slot = slot;
	s->n++;
	return s->stop_after && s->n >= s->stop_after;
}

static void test_scan(void **state)
{
	(void)state;
	struct table tb = {.t = calloc(NSLOT, sizeof(struct stb_abi_task))};
	assert_non_null(tb.t);
	unsigned live = 0, bad = 0, suspended = 0;
	for (uint32_t s = 0; s < NSLOT; s++) {
		if (s >= HOLE_LO && s < HOLE_HI)
			continue;
		if (s % 3 == 0) {
			set_task(&tb.t[s], (1ull << 32) | s, STB_TASK_SUSPENDED);
			live++;
			suspended++;
		} else if (s % 3 == 1) {
			/* States out of range, 8 bits: 9 .. 255. */
			set_task(&tb.t[s], (1ull << 32) | s, STB_TASK_NSTATES + s % 247);
			live++;
			bad++;
		}
	}
	struct stb_tview_src src = {.entry = table_entry, .ctx = &tb, .nslots = NSLOT};
	struct stb_tview_scan_result r;
	struct seen s = {.ordered = true};
	assert_int_equal(stb_tview_scan(&src, 0, 0, count_fn, &s, &r), 0);
	assert_int_equal(s.n, live);
	assert_true(s.ordered);
	assert_int_equal(r.visited, live);
	assert_int_equal(r.invalid, bad);
	assert_int_equal(r.left, 0);
	/* The hole was skipped in one step. */
	assert_true(tb.entry_calls <= NSLOT - (HOLE_HI - HOLE_LO) + 1);

	/* A state filter never shifts by an out-of-range state (UBSan checks). */
	memset(&s, 0, sizeof(s));
	unsigned mask = 1u << STB_TASK_SUSPENDED | 1u << STB_TASK_RUNNING;
	stb_tview_scan(&src, mask, 0, count_fn, &s, &r);
	assert_int_equal(s.n, suspended);
	assert_int_equal(r.invalid, bad);

	/* Ready tasks that workers name are running: the filter sees them as
	 * the worker entries said when the scan began. */
	static struct stb_abi_worker w[4];
	memset(w, 0, sizeof(w));
	uint32_t ready[3] = {NSLOT - 2, NSLOT - 5, NSLOT - 8}; /* s % 3 == 2: not live yet */
	for (int i = 0; i < 3; i++)
		set_task(&tb.t[ready[i]], (1ull << 32) | ready[i], STB_TASK_READY);
	w[0].current = (1ull << 32) | ready[0];
	w[3].current = (1ull << 32) | ready[1] | STB_ABI_CURRENT_SWITCHING;
	src.workers = (struct stb_tview_wsrc){.w = w, .n = 4};
	memset(&s, 0, sizeof(s));
	stb_tview_scan(&src, 1u << STB_TASK_RUNNING, 0, count_fn, &s, &r);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.last_slot, ready[0]);
	memset(&s, 0, sizeof(s));
	stb_tview_scan(&src, 1u << STB_TASK_ABOUT_TO_RUN, 0, count_fn, &s, &r);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.last_slot, ready[1]);
	memset(&s, 0, sizeof(s));
	stb_tview_scan(&src, 1u << STB_TASK_READY, 0, count_fn, &s, &r);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.last_slot, ready[2]);
	for (int i = 0; i < 3; i++)
		memset(&tb.t[ready[i]], 0, sizeof(tb.t[0]));
	src.workers = (struct stb_tview_wsrc){0};

	/* A deadline in the past: nothing is visited, everything counted. */
	memset(&s, 0, sizeof(s));
	stb_tview_scan(&src, 0, 1, count_fn, &s, &r);
	assert_int_equal(s.n, 0);
	assert_int_equal(r.left, live);

	/* Stopped by the callback. */
	memset(&s, 0, sizeof(s));
	s.stop_after = 5;
	stb_tview_scan(&src, 0, 0, count_fn, &s, &r);
	assert_int_equal(s.n, 5);
	assert_true(r.stopped);

	/* A source whose next goes nowhere ends the scan. */
	struct stb_tview_src none = {.entry = table_entry, .ctx = &tb, .nslots = HOLE_HI};
	memset(&s, 0, sizeof(s));
	stb_tview_scan(&none, 0, 0, count_fn, &s, &r);
	assert_true(s.n < live);
	free(tb.t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_header),
	    cmocka_unit_test(test_counters),
	    cmocka_unit_test(test_read_task),
	    cmocka_unit_test(test_scan),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
