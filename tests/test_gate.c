/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The STB gate as shipped (bthread_static: no test hook in it). A lease taken
 * in a task's table entry, as a tracer takes it, forces the task's next
 * switch into the gate's window, on the path users run: the switch to a
 * queued task stops before its worker names it, the switch away from a
 * running task stops before its word says SUSPENDING -- each through the
 * inlined bthread_yield and through stb_jump_stack (a block, an exit) --
 * until the lease is released or its deadline passes (the runtime breaks it).
 * Meanwhile the table says exactly where the task is, and a stack copy taken
 * under the lease validates and holds the task's saved context.
 */
#include "test_util.h"

#include <pthread.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>
#include <stb/stb.h>

#include "internal.h"
#include "table/hold.h"
#include "unwind/unwind.h"
#include "test_internal.h"

#define HOLD_MS 60u

/* A task of the test: counts its turns, yields or spins, blocks or exits. */
struct task {
	bthread_t id;
	long turns;
	int mode;  /* what it does: MODE_* */
	int go;    /* spinners: leave the spin */
	int *butex; /* MODE_SPIN_BLOCK: waits here after the spin */
	int stop;
};

enum { MODE_YIELD, MODE_SPIN_YIELD, MODE_SPIN_BLOCK, MODE_SPIN_EXIT };

static void *task_main(void *arg)
{
	struct task *t = arg;
	t->id = bthread_self();
	while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
		__atomic_fetch_add(&t->turns, 1, __ATOMIC_RELEASE);
		switch (t->mode) {
		case MODE_YIELD:
			bthread_yield();
			break;
		default:
			/* Runs until told to go on: the lease is taken meanwhile. */
			while (!__atomic_load_n(&t->go, __ATOMIC_ACQUIRE))
				__builtin_ia32_pause();
			__atomic_store_n(&t->go, 2, __ATOMIC_RELEASE); /* at the switch now */
			if (t->mode == MODE_SPIN_EXIT)
				return NULL;
			if (t->mode == MODE_SPIN_BLOCK)
				while (__atomic_load_n(t->butex, __ATOMIC_ACQUIRE) == 0)
					butex_wait(t->butex, 0, NULL);
			else
				bthread_yield();
			t->mode = MODE_YIELD;
			break;
		}
	}
	return NULL;
}

static struct stb_abi_task *entry_of(bthread_t id)
{
	struct stb_task *t = stb_task_lookup(id);
	return t ? t->pub : NULL;
}

static unsigned word_state(const struct stb_abi_task *p)
{
	return STB_ABI_STATE(__atomic_load_n(&p->word, __ATOMIC_ACQUIRE));
}

/* A lease on p that ends at deadline, taken as a tracer takes it (abi.h). */
static uint64_t take(struct stb_abi_task *p, uint64_t deadline)
{
	uint64_t lease = STB_ABI_LEASE_ENCODE(deadline, 0x77);
	__u64 z = 0;
	return __atomic_compare_exchange_n(&p->trace, &z, lease, false, __ATOMIC_SEQ_CST,
					   __ATOMIC_RELAXED)
		       ? lease
		       : 0;
}

static void give(struct stb_abi_task *p, uint64_t lease)
{
	__u64 mine = lease;
	assert_true(__atomic_compare_exchange_n(&p->trace, &mine, 0, false, __ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED));
}

static int copy_read(void *ctx, uint64_t addr, void *dst, size_t len)
{
	(void)ctx;
	/* Another task's stack: its frames' redzones are no error of ours. */
	stb_unw_copy_raw(dst, (const void *)(uintptr_t)addr, len);
	return 0;
}

/* Copies the held, off-CPU task's stack as a tracer does: it validates, and
 * its switch frame returns where the entry says. */
static void check_copy(struct stb_abi_task *p, bthread_t id, uint64_t lease)
{
	static uint8_t buf[256 << 10];
	const struct stb_tview_wsrc ws = {.w = stb_table_worker(0), .hdr = stb_table_workers_header()};
	struct stb_regs regs;
	struct stb_stack_copy copy;
	uint64_t w1 = __atomic_load_n(&p->word, __ATOMIC_ACQUIRE);
	assert_int_equal(stb_hold_copy_context(p, id, w1, lease, &ws, copy_read, NULL, buf,
					       sizeof(buf), &regs, &copy),
			 0);
	struct stb_abi_switch_frame f;
	assert_true(copy.len >= sizeof(f));
	memcpy(&f, copy.bytes, sizeof(f));
	assert_int_equal(f.ret, __atomic_load_n(&p->ip, __ATOMIC_RELAXED));
	assert_int_equal(regs.sp, __atomic_load_n(&p->sp, __ATOMIC_RELAXED));
}

static void start(struct task *t, int mode, int *butex)
{
	memset(t, 0, sizeof(*t));
	t->mode = mode;
	t->butex = butex;
	bthread_t id;
	assert_int_equal(bthread_start_background(&id, NULL, task_main, t), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&t->turns, __ATOMIC_ACQUIRE) > 0, 5000));
}

static void finish(struct task *t)
{
	__atomic_store_n(&t->stop, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&t->go, 1, __ATOMIC_RELEASE);
	assert_int_equal(bthread_join(t->id, NULL), 0);
}

/*
 * The switch to a queued task: a spins on the one worker while b waits in
 * its queue (ready, named by no worker); b's lease is taken; then a switches
 * away (yield: the inlined switch; block: stb_jump_stack) and its worker
 * stops at b's gate.
 */
static void gate_in(int leaver_mode)
{
	/* Fresh for each test: after a failure the last ones may still run. */
	struct task *ta = calloc(2, sizeof(*ta)), *tb = ta + 1;
	assert_non_null(ta);
	int *butex = butex_create();
	assert_non_null(butex);
	start(tb, MODE_YIELD, NULL);
	start(ta, leaver_mode, butex);
	struct stb_abi_task *pb = entry_of(tb->id), *pa = entry_of(ta->id);
	assert_int_equal(stb_test_state(pa), STB_TASK_RUNNING);
	assert_int_equal(stb_test_state(pb), STB_TASK_READY);
	struct stb_stats s0, s1;
	stb_get_stats(&s0);
	uint64_t lease = take(pb, stb_now_ns() + 10000000000ull);
	assert_true(lease != 0);
	__atomic_store_n(&ta->go, 1, __ATOMIC_RELEASE);
	/* The worker picks b after a's switch away: a's word says SUSPENDING,
	 * b is not named (ready), and b does not run. */
	assert_true(STB_WAIT_UNTIL(word_state(pa) == STB_TASK_SUSPENDING, 5000));
	long turns = __atomic_load_n(&tb->turns, __ATOMIC_ACQUIRE);
	stb_test_sleep_ms(HOLD_MS);
	assert_int_equal(word_state(pa), STB_TASK_SUSPENDING);
	assert_int_equal(stb_test_state(pb), STB_TASK_READY);
	assert_int_equal(__atomic_load_n(&tb->turns, __ATOMIC_ACQUIRE), turns);
	check_copy(pb, tb->id, lease);
	give(pb, lease);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&tb->turns, __ATOMIC_ACQUIRE) > turns, 5000));
	stb_get_stats(&s1);
	assert_true(s1.gate_waits > s0.gate_waits);
	assert_true(s1.gate_wait_ns - s0.gate_wait_ns >= (HOLD_MS - 10) * 1000000ull);
	assert_int_equal(s1.gate_giveups, s0.gate_giveups);
	__atomic_store_n(butex, 1, __ATOMIC_RELEASE);
	butex_wake_all(butex);
	finish(ta);
	finish(tb);
	butex_destroy(butex);
	free(ta);
}

static void test_gate_in_yield(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	gate_in(MODE_SPIN_YIELD);
	STB_TEST_END();
}

static void test_gate_in_block(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	gate_in(MODE_SPIN_BLOCK);
	STB_TEST_END();
}

/*
 * The switch away from a running task: held spins on the one worker (named by
 * it, running) while its lease is taken, then switches away (yield, block or
 * exit) and stops at its gate, still running: named, its word not SUSPENDING.
 * deadline_ms 0: the lease is given back after HOLD_MS; else it ends then and
 * the runtime breaks it.
 */
static void gate_out(int mode, unsigned deadline_ms)
{
	struct task *to = calloc(2, sizeof(*to)), *th = to + 1;
	assert_non_null(to);
	int *butex = butex_create();
	assert_non_null(butex);
	start(to, MODE_YIELD, NULL);
	start(th, mode, butex);
	struct stb_abi_task *p = entry_of(th->id);
	assert_true(STB_WAIT_UNTIL(stb_test_state(p) == STB_TASK_RUNNING, 5000));
	uint64_t seq = STB_ABI_SEQ(__atomic_load_n(&p->word, __ATOMIC_ACQUIRE));
	struct stb_stats s0, s1;
	stb_get_stats(&s0);
	uint64_t until = deadline_ms ? deadline_ms * 1000000ull : 10000000000ull;
	uint64_t lease = take(p, stb_now_ns() + until);
	assert_true(lease != 0);
	__atomic_store_n(&th->go, 1, __ATOMIC_RELEASE);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&th->go, __ATOMIC_ACQUIRE) == 2, 5000));
	long turns = __atomic_load_n(&to->turns, __ATOMIC_ACQUIRE);
	stb_test_sleep_ms(deadline_ms ? deadline_ms / 3 : HOLD_MS);
	/* At the gate: running, not yet leaving; the other task waits. */
	assert_int_equal(stb_test_state(p), STB_TASK_RUNNING);
	assert_int_equal(STB_ABI_SEQ(__atomic_load_n(&p->word, __ATOMIC_ACQUIRE)), seq);
	assert_int_equal(__atomic_load_n(&to->turns, __ATOMIC_ACQUIRE), turns);
	if (!deadline_ms)
		give(p, lease);
	/* Through the gate: its run ended (a new seq, or gone), the other runs. */
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&to->turns, __ATOMIC_ACQUIRE) > turns, 5000));
	assert_true(__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != th->id ||
		    STB_ABI_SEQ(__atomic_load_n(&p->word, __ATOMIC_ACQUIRE)) != seq ||
		    word_state(p) == STB_TASK_DESTROYED);
	stb_get_stats(&s1);
	assert_true(s1.gate_waits > s0.gate_waits);
	if (deadline_ms) {
		/* Its lease ran out: broken by the runtime, which went on. */
		assert_true(s1.gate_giveups > s0.gate_giveups);
		assert_true(__atomic_load_n(&p->trace, __ATOMIC_ACQUIRE) != lease);
	} else {
		assert_int_equal(s1.gate_giveups, s0.gate_giveups);
	}
	__atomic_store_n(butex, 1, __ATOMIC_RELEASE);
	butex_wake_all(butex);
	finish(to);
	finish(th);
	butex_destroy(butex);
	free(to);
}

static void test_gate_out_yield(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	gate_out(MODE_SPIN_YIELD, 0);
	STB_TEST_END();
}

static void test_gate_out_block(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	gate_out(MODE_SPIN_BLOCK, 0);
	STB_TEST_END();
}

static void test_gate_out_exit(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	gate_out(MODE_SPIN_EXIT, 0);
	STB_TEST_END();
}

static void test_gate_giveup(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	gate_out(MODE_SPIN_YIELD, 90);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	/* One worker: the task at the gate holds the only one, nothing else
	 * runs meanwhile, and where each task is stays known. */
	setenv("STB_CONCURRENCY", "1", 1);
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gate_in_yield), cmocka_unit_test(test_gate_in_block),
		cmocka_unit_test(test_gate_out_yield), cmocka_unit_test(test_gate_out_block),
		cmocka_unit_test(test_gate_out_exit), cmocka_unit_test(test_gate_giveup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
