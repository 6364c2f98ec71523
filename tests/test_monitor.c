/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the runtime publishes beyond the switch path: the creator (id, return
 * address of the start call, tid) and tag of every task, STB_WAIT_YIELD in
 * the wait block of a yielded task, the wait blocks of registered pthreads and
 * BTHREAD_ATTR_PTHREAD bthreads while they block (reset to NONE after), and
 * the monitor thread's run_seq/run_since_ns per worker and header.monitor_ns,
 * which stops while every worker is parked and resumes with work.
 */
#include "test_util.h"

#include <pthread.h>
#include <sys/syscall.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>
#include <stb/stb.h>

#include "test_internal.h"

static struct stb_abi_task *stb_entry(bthread_t id)
{
	struct stb_task *t = stb_task_lookup(id);
	return t ? t->pub : NULL;
}

/* ---- creator and tag ---- */

struct stb_creator {
	bthread_t child;
	bthread_t self;
	pid_t tid;
	int *gate;
};

static void *stb_wait_gate(void *arg)
{
	int *gate = arg;
	while (__atomic_load_n(gate, __ATOMIC_ACQUIRE) == 0)
		butex_wait(gate, 0, NULL);
	return NULL;
}

static __attribute__((noinline)) void *stb_parent(void *arg)
{
	struct stb_creator *c = arg;
	c->self = bthread_self();
	c->tid = (pid_t)syscall(SYS_gettid);
	bthread_start_background(&c->child, NULL, stb_wait_gate, c->gate);
	return NULL;
}

static void test_creator_and_tag(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	int *gate = butex_create();
	assert_non_null(gate);
	struct stb_creator c = {.gate = gate};
	bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
	attr.tag = 3;
	bthread_t parent;
	assert_int_equal(bthread_start_background(&parent, &attr, stb_parent, &c), 0);
	assert_int_equal(bthread_join(parent, NULL), 0);
	struct stb_abi_task *e = stb_entry(c.child);
	assert_non_null(e);
	/* (The table is read as a tracer reads it: atomically, never locked.) */
	assert_int_equal(__atomic_load_n(&e->creator_id, __ATOMIC_ACQUIRE), c.self);
	assert_int_equal(__atomic_load_n(&e->creator_tid, __ATOMIC_ACQUIRE), (uint32_t)c.tid);
	/* The return address of the start call lies in stb_parent. */
	uint64_t ip = __atomic_load_n(&e->creator_ip, __ATOMIC_ACQUIRE);
	assert_true(ip > (uint64_t)(uintptr_t)stb_parent);
	assert_true(ip < (uint64_t)(uintptr_t)stb_parent + 512);
	/* Inherited from its creator's pool. */
	assert_int_equal(__atomic_load_n(&e->tag, __ATOMIC_ACQUIRE), 3);
	/* From an unregistered pthread: no creator id, this thread's tid. */
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_wait_gate, gate), 0);
	e = stb_entry(t);
	assert_int_equal(__atomic_load_n(&e->creator_id, __ATOMIC_ACQUIRE), 0);
	assert_int_equal(__atomic_load_n(&e->creator_tid, __ATOMIC_ACQUIRE),
			 (uint32_t)syscall(SYS_gettid));
	assert_int_equal(__atomic_load_n(&e->tag, __ATOMIC_ACQUIRE), 0);
	/* The workers' entries name their pool. */
	bool seen3 = false;
	for (uint32_t i = 0; i < stb_table.hdr->nworkers; i++)
		seen3 |= __atomic_load_n(&stb_table_worker(i)->tag, __ATOMIC_ACQUIRE) == 3;
	assert_true(seen3);
	__atomic_store_n(gate, 1, __ATOMIC_RELEASE);
	butex_wake_all(gate);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(bthread_join(c.child, NULL), 0);
	butex_destroy(gate);
	STB_TEST_END();
}

/* ---- YIELD ---- */

static int stb_yield_stop;

static void *stb_yielder(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&stb_yield_stop, __ATOMIC_ACQUIRE))
		bthread_yield();
	return NULL;
}

static void test_yield_published(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	enum { N = 16 };
	bthread_t t[N];
	__atomic_store_n(&stb_yield_stop, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < N; i++)
		assert_int_equal(bthread_start_background(&t[i], NULL, stb_yielder, NULL), 0);
	int ready = 0, yield = 0;
	uint64_t end = stb_now_ns() + 2000000000ull;
	while (ready < 200 && stb_now_ns() < end) {
		for (int i = 0; i < N; i++) {
			struct stb_abi_task *e = stb_entry(t[i]);
			uint64_t w1 = __atomic_load_n(&e->word, __ATOMIC_ACQUIRE);
			uint64_t ww = __atomic_load_n(&e->wait_word, __ATOMIC_ACQUIRE);
			uint64_t w2 = __atomic_load_n(&e->word, __ATOMIC_ACQUIRE);
			if (w1 == w2 && STB_ABI_STATE(w1) == STB_TASK_READY) {
				ready++;
				yield += STB_ABI_WAIT_KIND(ww) == STB_WAIT_YIELD;
			}
		}
	}
	__atomic_store_n(&stb_yield_stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < N; i++)
		assert_int_equal(bthread_join(t[i], NULL), 0);
	print_message("    %d READY samples, %d said YIELD\n", ready, yield);
	assert_true(ready > 0);
	assert_int_equal(yield, ready);
	STB_TEST_END();
}

/* ---- wait blocks of threads that block while RUNNING ---- */

struct stb_blocker {
	int *butex;
	bthread_t id;        /* registered pthread: its id */
	int started, rc;
};

static void *stb_block_registered(void *arg)
{
	struct stb_blocker *b = arg;
	b->id = bthread_init_for_pthread_stack_trace();
	__atomic_store_n(&b->started, 1, __ATOMIC_RELEASE);
	struct timespec abs = stb_realtime_after_ms(10000);
	b->rc = butex_wait(b->butex, 0, &abs);
	/* After the wait: reset to NONE. */
	struct stb_abi_task *e = stb_entry(b->id);
	if (STB_ABI_WAIT_KIND(e->wait_word) != STB_WAIT_NONE)
		b->rc = 99;
	return NULL;
}

static void *stb_block_plain(void *arg)
{
	struct stb_blocker *b = arg;
	b->id = bthread_self();
	__atomic_store_n(&b->started, 1, __ATOMIC_RELEASE);
	b->rc = butex_wait(b->butex, 0, NULL);
	return NULL;
}

static void check_running_wait(struct stb_blocker *b, bool timed)
{
	struct stb_abi_task *e = stb_entry(b->id);
	assert_non_null(e);
	assert_true(STB_WAIT_UNTIL(STB_ABI_WAIT_KIND(__atomic_load_n(&e->wait_word,
								     __ATOMIC_ACQUIRE)) ==
					   STB_WAIT_BUTEX,
				   5000));
	assert_int_equal(stb_test_state(e), STB_TASK_RUNNING);
	assert_int_equal(__atomic_load_n(&e->wait_object, __ATOMIC_ACQUIRE),
			 (uint64_t)(uintptr_t)b->butex);
	uint64_t ww = __atomic_load_n(&e->wait_word, __ATOMIC_ACQUIRE);
	assert_int_equal((STB_ABI_WAIT_FLAGS(ww) & STB_ABI_WAIT_F_TIMED) != 0, timed);
	assert_true(!timed || __atomic_load_n(&e->wait_deadline, __ATOMIC_ACQUIRE) > stb_now_ns());
	assert_true(__atomic_load_n(&e->since_ns, __ATOMIC_ACQUIRE) > 0);
}

static void test_running_waiters_published(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	int *butex = butex_create();
	assert_non_null(butex);
	struct stb_blocker reg = {.butex = butex}, pa = {.butex = butex};
	pthread_t pt;
	assert_int_equal(pthread_create(&pt, NULL, stb_block_registered, &reg), 0);
	bthread_t bt;
	assert_int_equal(bthread_start_background(&bt, &BTHREAD_ATTR_PTHREAD, stb_block_plain, &pa),
			 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&reg.started, __ATOMIC_ACQUIRE) &&
					   __atomic_load_n(&pa.started, __ATOMIC_ACQUIRE),
				   5000));
	assert_true(reg.id != 0);
	check_running_wait(&reg, true);
	check_running_wait(&pa, false);
	assert_int_equal(butex_wake_all(butex), 2);
	assert_int_equal(pthread_join(pt, NULL), 0);
	assert_int_equal(bthread_join(bt, NULL), 0);
	assert_int_equal(reg.rc, 0);
	assert_int_equal(pa.rc, 0);
	butex_destroy(butex);
	STB_TEST_END();
}

/* ---- the monitor ---- */

static int stb_spin_stop;

static void *stb_spinner(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&stb_spin_stop, __ATOMIC_ACQUIRE))
		;
	return NULL;
}

static void test_monitor(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	bthread_t t;
	__atomic_store_n(&stb_spin_stop, 0, __ATOMIC_RELEASE);
	uint64_t t0 = stb_now_ns();
	assert_int_equal(bthread_start_background(&t, NULL, stb_spinner, NULL), 0);
	struct stb_abi_header *h = stb_table.hdr; /* the runtime runs now */
	assert_non_null(h);
	stb_test_sleep_ms(150);
	/* The spinner's worker: run_since_ns about when it started, monitor_ns fresh. */
	struct stb_abi_task *e = stb_entry(t);
	uint32_t seq = STB_ABI_SEQ(__atomic_load_n(&e->word, __ATOMIC_ACQUIRE));
	uint64_t now = stb_now_ns();
	int found = 0;
	uint32_t nw = __atomic_load_n(&h->nworkers, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < nw; i++) {
		struct stb_abi_worker *w = stb_table_worker(i);
		if (__atomic_load_n(&w->current, __ATOMIC_ACQUIRE) != t)
			continue;
		uint64_t s1 = __atomic_load_n(&w->run_since_ns, __ATOMIC_ACQUIRE);
		uint32_t rs = __atomic_load_n(&w->run_seq, __ATOMIC_ACQUIRE);
		uint64_t s2 = __atomic_load_n(&w->run_since_ns, __ATOMIC_ACQUIRE);
		assert_int_equal(s1, s2);
		assert_int_equal(rs, seq);
		print_message("    spinner on worker %u runs for %.0f ms by the monitor "
			      "(started %.0f ms ago)\n", i, (double)(now - s1) / 1e6,
			      (double)(now - t0) / 1e6);
		assert_true(now - s1 >= STB_TEST_SCALE(100000000ull, 1ull));
		assert_true(now - s1 <= now - t0);
		found++;
	}
	assert_int_equal(found, 1);
	/* Fresh: it goes on looking while the spinner runs (a monitor that
	 * stopped when the spinner started never writes again). Waited for, not
	 * timed: on a loaded 2-CPU machine the monitor may wait 100 ms and more
	 * for a CPU, which a bound of a few periods took for a stopped one. */
	assert_true(__atomic_load_n(&h->monitor_ns, __ATOMIC_ACQUIRE) != 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&h->monitor_ns, __ATOMIC_ACQUIRE) > now,
				   5000));
	__atomic_store_n(&stb_spin_stop, 1, __ATOMIC_RELEASE);
	assert_int_equal(bthread_join(t, NULL), 0);
	/* Nothing to run: every worker parks, the monitor sleeps -- 100 ms
	 * without a write (20 of its periods), seen within a few tries (a late
	 * last look of a monitor that waited for a CPU is no failure). */
	uint64_t m1 = 0, m2 = 1;
	for (int i = 0; i < 20 && m1 != m2; i++) {
		stb_test_sleep_ms(100);
		m1 = __atomic_load_n(&h->monitor_ns, __ATOMIC_ACQUIRE);
		stb_test_sleep_ms(100);
		m2 = __atomic_load_n(&h->monitor_ns, __ATOMIC_ACQUIRE);
	}
	assert_int_equal(m1, m2);
	/* Work again: it wakes up. */
	__atomic_store_n(&stb_spin_stop, 0, __ATOMIC_RELEASE);
	assert_int_equal(bthread_start_background(&t, NULL, stb_spinner, NULL), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&h->monitor_ns, __ATOMIC_ACQUIRE) > m2,
				   5000));
	__atomic_store_n(&stb_spin_stop, 1, __ATOMIC_RELEASE);
	assert_int_equal(bthread_join(t, NULL), 0);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_creator_and_tag),
		cmocka_unit_test(test_yield_published),
		cmocka_unit_test(test_running_waiters_published),
		cmocka_unit_test(test_monitor),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
