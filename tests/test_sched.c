/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Scheduling and the bthread lifecycle: urgent vs background start order,
 * yield fairness, join results and its EINVAL cases, joins of bthreads that
 * finished long ago, bthread_self and bthread_equal, concurrency settings,
 * 100,000 bthreads created and joined, BTHREAD_ATTR_PTHREAD bthreads, worker
 * pools (tags), bthread_getattr, bthread_interrupt, about_to_quit, the CPU
 * clock ($STB_CPU_CLOCK=1, set by main), spans, worker start functions,
 * NOSIGNAL + bthread_flush, and bthread_stop_world (in a child, --stop-world).
 * Starts with one worker on purpose ($STB_CONCURRENCY=1, the expert override
 * below BTHREAD_MIN_CONCURRENCY).
 */
#include "test_util.h"

#include <pthread.h>
#include <sys/wait.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>
#include <stb/stb.h>

/* ---- event log (order of execution) ---- */

static char stb_log_buf[64];
static unsigned stb_log_len;

static void stb_log_reset(void)
{
	memset(stb_log_buf, 0, sizeof(stb_log_buf));
	__atomic_store_n(&stb_log_len, 0, __ATOMIC_RELEASE);
}

static void stb_log_event(char c)
{
	unsigned i = __atomic_fetch_add(&stb_log_len, 1, __ATOMIC_ACQ_REL);
	if (i < sizeof(stb_log_buf) - 1)
		__atomic_store_n(&stb_log_buf[i], c, __ATOMIC_RELEASE);
}

static const char *stb_log_get(void)
{
	return stb_log_buf;
}

/* ---- single worker: start order ---- */

static void test_concurrency_before_start(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	/* main() set STB_CONCURRENCY=1 before anything else. */
	assert_int_equal(bthread_getconcurrency(), 1);
	assert_int_equal(BTHREAD_MIN_CONCURRENCY, 4);
	assert_int_equal(BTHREAD_MAX_CONCURRENCY, 1024);
	assert_int_equal(bthread_setconcurrency(0), EINVAL);
	assert_int_equal(bthread_setconcurrency(BTHREAD_MIN_CONCURRENCY - 1), EINVAL);
	assert_int_equal(bthread_setconcurrency(BTHREAD_MAX_CONCURRENCY + 1), EINVAL);
	assert_int_equal(bthread_setconcurrency(-3), EINVAL);
	assert_int_equal(bthread_getconcurrency(), 1);
	assert_int_equal(bthread_getconcurrency_by_tag(0), EPERM); /* not started yet */
	STB_TEST_END();
}

/* Child of the urgent test: its id must already be stored when it runs. */
static void *stb_urgent_child(void *arg)
{
	const bthread_t *tid = arg;
	STB_EXPECT(bthread_self() != 0);
	STB_EXPECT_EQ(bthread_self(), *tid);
	stb_log_event('c');
	return (void *)0x5eed;
}

static void *stb_urgent_parent(void *arg)
{
	(void)arg;
	bthread_t child = 0;
	stb_log_event('a');
	STB_EXPECT_EQ(bthread_start_urgent(&child, NULL, stb_urgent_child, &child), 0);
	stb_log_event('b');
	void *ret = NULL;
	STB_EXPECT_EQ(bthread_join(child, &ret), 0);
	STB_EXPECT(ret == (void *)0x5eed);
	/* Twice more with a small stack: the new bthread always runs first. */
	for (int i = 0; i < 2; i++) {
		STB_EXPECT_EQ(bthread_start_urgent(&child, &BTHREAD_ATTR_SMALL, stb_urgent_child,
						   &child), 0);
		stb_log_event('b');
		STB_EXPECT_EQ(bthread_join(child, NULL), 0);
	}
	return NULL;
}

static void test_urgent_runs_before_caller(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	stb_log_reset();
	bthread_t parent;
	assert_int_equal(bthread_start_background(&parent, NULL, stb_urgent_parent, NULL), 0);
	assert_int_equal(bthread_join(parent, NULL), 0);
	assert_string_equal(stb_log_get(), "acbcbcb");
	assert_int_equal(bthread_getconcurrency(), 1);
	STB_TEST_END();
}

static void *stb_bg_child(void *arg)
{
	stb_log_event((char)(uintptr_t)arg);
	return arg;
}

static void *stb_bg_parent(void *arg)
{
	(void)arg;
	bthread_t c1, c2, c3;
	bthread_attr_t nosignal = BTHREAD_ATTR_SMALL;
	nosignal.flags |= BTHREAD_NOSIGNAL;
	stb_log_event('a');
	STB_EXPECT_EQ(bthread_start_background(&c1, NULL, stb_bg_child, (void *)(uintptr_t)'x'), 0);
	stb_log_event('b');
	STB_EXPECT_EQ(bthread_start_background(&c2, &nosignal, stb_bg_child, (void *)(uintptr_t)'y'),
		      0);
	stb_log_event('c');
	/* Queued children run in start order once the caller gives up the worker. */
	void *r1 = NULL, *r2 = NULL;
	STB_EXPECT_EQ(bthread_join(c1, &r1), 0);
	STB_EXPECT_EQ(bthread_join(c2, &r2), 0);
	STB_EXPECT(r1 == (void *)(uintptr_t)'x');
	STB_EXPECT(r2 == (void *)(uintptr_t)'y');
	/* A yield lets a queued bthread run before the caller continues. */
	STB_EXPECT_EQ(bthread_start_background(&c3, NULL, stb_bg_child, (void *)(uintptr_t)'z'), 0);
	stb_log_event('d');
	STB_EXPECT_EQ(bthread_yield(), 0);
	stb_log_event('e');
	STB_EXPECT_EQ(bthread_join(c3, NULL), 0);
	return NULL;
}

static void test_background_start_queues(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	stb_log_reset();
	bthread_t parent;
	assert_int_equal(bthread_start_background(&parent, NULL, stb_bg_parent, NULL), 0);
	assert_int_equal(bthread_join(parent, NULL), 0);
	assert_string_equal(stb_log_get(), "abcxydze");
	STB_TEST_END();
}

/* Two bthreads yielding on one worker alternate strictly. */
static void *stb_yielder(void *arg)
{
	for (int i = 0; i < 5; i++) {
		stb_log_event((char)(uintptr_t)arg);
		STB_EXPECT_EQ(bthread_yield(), 0);
	}
	return NULL;
}

static void *stb_yield_parent(void *arg)
{
	(void)arg;
	bthread_t a, b;
	STB_EXPECT_EQ(bthread_start_background(&a, NULL, stb_yielder, (void *)(uintptr_t)'A'), 0);
	STB_EXPECT_EQ(bthread_start_background(&b, NULL, stb_yielder, (void *)(uintptr_t)'B'), 0);
	STB_EXPECT_EQ(bthread_join(a, NULL), 0);
	STB_EXPECT_EQ(bthread_join(b, NULL), 0);
	return NULL;
}

static void test_yield_is_fair(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	stb_log_reset();
	bthread_t p;
	assert_int_equal(bthread_start_background(&p, NULL, stb_yield_parent, NULL), 0);
	assert_int_equal(bthread_join(p, NULL), 0);
	assert_string_equal(stb_log_get(), "ABABABABAB");
	/* With nothing else to run, a yield returns at once. */
	assert_int_equal(bthread_yield(), 0);
	STB_TEST_END();
}

/* ---- join ---- */

static void *stb_return_arg(void *arg)
{
	return arg;
}

static int stb_exit_deep(int depth, void *value);
/* Through a pointer so that the compiler keeps real nested frames. */
static int (*volatile stb_exit_deep_ptr)(int, void *) = stb_exit_deep;

static __attribute__((noinline)) int stb_exit_deep(int depth, void *value)
{
	if (depth == 0)
		bthread_exit(value);
	int r = stb_exit_deep_ptr(depth - 1, value);
	__asm__ volatile("" : "+r"(r)::"memory"); /* not a tail call */
	return r + 1;
}

static void *stb_exits(void *arg)
{
	int r = stb_exit_deep_ptr(5, arg);
	return (void *)(intptr_t)(0xbad0 + r); /* never reached */
}

static void test_join_returns_results(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	bthread_t t;
	void *ret = NULL;
	assert_int_equal(bthread_start_background(&t, NULL, stb_return_arg, (void *)0x1234), 0);
	assert_int_equal(bthread_join(t, &ret), 0);
	assert_ptr_equal(ret, (void *)0x1234);
	/* Joining again before the slot is reused still yields the result. */
	ret = NULL;
	assert_int_equal(bthread_join(t, &ret), 0);
	assert_ptr_equal(ret, (void *)0x1234);

	assert_int_equal(bthread_start_urgent(&t, &BTHREAD_ATTR_SMALL, stb_exits, (void *)0x5678), 0);
	ret = NULL;
	assert_int_equal(bthread_join(t, &ret), 0);
	assert_ptr_equal(ret, (void *)0x5678);

	/* ret may be NULL. */
	assert_int_equal(bthread_start_background(&t, NULL, stb_return_arg, (void *)1), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	STB_TEST_END();
}

static void *stb_join_self(void *arg)
{
	(void)arg;
	return (void *)(intptr_t)bthread_join(bthread_self(), NULL);
}

static void test_join_invalid_ids(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	assert_int_equal(bthread_join(INVALID_BTHREAD, NULL), EINVAL);
	/* A slot that was never allocated. */
	assert_int_equal(bthread_join(((bthread_t)1 << 32) | 0x7ffffff0u, NULL), EINVAL);
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_return_arg, NULL), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	/* A real slot with a version never issued, and with version 0. */
	bthread_t forged = t + ((bthread_t)1000 << 32);
	assert_int_equal(bthread_join(forged, NULL), EINVAL);
	assert_int_equal(bthread_join(t & 0xffffffffu, NULL), EINVAL);
	/* Joining itself. */
	void *ret = NULL;
	assert_int_equal(bthread_start_background(&t, NULL, stb_join_self, NULL), 0);
	assert_int_equal(bthread_join(t, &ret), 0);
	assert_int_equal((intptr_t)ret, EINVAL);
	STB_TEST_END();
}

static void *stb_wait_flag(void *arg)
{
	int *b = arg;
	while (__atomic_load_n(b, __ATOMIC_ACQUIRE) == 0)
		butex_wait(b, 0, NULL);
	return (void *)7;
}

static void test_join_stale_id(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	bthread_t t1;
	void *ret = NULL;
	assert_int_equal(bthread_start_background(&t1, NULL, stb_return_arg, (void *)0x11), 0);
	assert_int_equal(bthread_join(t1, &ret), 0);
	assert_ptr_equal(ret, (void *)0x11);

	/*
	 * Slots are reused oldest first once more than 4096 freed ones wait.
	 * Start a bthread that stays blocked; if it did not get t1's slot, let it
	 * finish (its slot goes to the back of the queue) and try again, until
	 * t1's slot comes up.
	 */
	int *flag = butex_create();
	assert_non_null(flag);
	/* Earlier tests may have left ~100k freed slots ahead of t1's. */
	enum { MAX_TRIES = 400000 };
	bthread_t *held = calloc(1, sizeof(*held));
	assert_non_null(held);
	int n = 0;
	bool reused = false;
	for (int i = 0; i < MAX_TRIES && !reused; i++) {
		int *own = butex_create();
		assert_non_null(own);
		bthread_t h;
		assert_int_equal(bthread_start_background(&h, &BTHREAD_ATTR_SMALL, stb_wait_flag, own),
				 0);
		reused = (uint32_t)h == (uint32_t)t1;
		if (reused) {
			/* Keep this one blocked until the checks below; it waits on own. */
			held[0] = h;
			n = 1;
			flag = own;
			break;
		}
		__atomic_store_n(own, 1, __ATOMIC_RELEASE);
		butex_wake_all(own);
		assert_int_equal(bthread_join(h, NULL), 0);
		butex_destroy(own);
	}
	assert_true(reused);
	bthread_t t2 = held[n - 1];
	assert_true(t2 != t1);
	assert_false(bthread_equal(t1, t2));
	/* The new occupant has not finished: t1's result is still there. */
	ret = NULL;
	assert_int_equal(bthread_join(t1, &ret), 0);
	assert_ptr_equal(ret, (void *)0x11);
	assert_true(bthread_stopped(t1));
	assert_false(bthread_stopped(t2));

	__atomic_store_n(flag, 1, __ATOMIC_RELEASE);
	butex_wake_all(flag);
	for (int i = 0; i < n; i++) {
		ret = NULL;
		assert_int_equal(bthread_join(held[i], &ret), 0);
		assert_ptr_equal(ret, (void *)7);
	}
	/* The slot held a later bthread that finished: t1's result is gone, but
	 * joining it still succeeds at once, however long ago it finished. */
	ret = (void *)1;
	assert_int_equal(bthread_join(t1, &ret), 0);
	assert_null(ret);
	assert_int_equal(bthread_stop(t1), EINVAL);
	assert_int_equal(bthread_interrupt(t1), EINVAL);
	assert_true(bthread_stopped(t1));
	butex_destroy(flag);
	free(held);

	STB_TEST_END();
}

/*
 * Start t1 and join it, then start and join more bthreads one at a time until
 * one of them takes t1's slot; join(t1) must then return 0 with a NULL result
 * (reclaimed). Runs in a
 * bthread on the single worker: a finished bthread's slot is released before
 * its joiner runs again, so the loop is deterministic there.
 */
static void *stb_stale_loop(void *arg)
{
	(void)arg;
	bthread_t t1;
	void *ret = NULL;
	STB_EXPECT_EQ(bthread_start_background(&t1, NULL, stb_return_arg, (void *)0x21), 0);
	STB_EXPECT_EQ(bthread_join(t1, &ret), 0);
	STB_EXPECT(ret == (void *)0x21);
	long tries = 0;
	bool reused = false;
	while (tries < 10000 && !reused) {
		bthread_t t;
		ret = NULL;
		STB_EXPECT_EQ(bthread_start_background(&t, NULL, stb_return_arg, (void *)tries), 0);
		STB_EXPECT_EQ(bthread_join(t, &ret), 0);
		STB_EXPECT(ret == (void *)tries);
		reused = (uint32_t)t == (uint32_t)t1 && t != t1;
		tries++;
	}
	STB_EXPECT(reused);
	ret = (void *)1;
	STB_EXPECT_EQ(bthread_join(t1, &ret), 0);
	STB_EXPECT(ret == NULL);
	STB_EXPECT(bthread_stopped(t1));
	return (void *)tries;
}

static void test_join_stale_one_worker(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	assert_int_equal(bthread_getconcurrency(), 1);
	bthread_t p;
	void *tries = NULL;
	assert_int_equal(bthread_start_background(&p, NULL, stb_stale_loop, NULL), 0);
	assert_int_equal(bthread_join(p, &tries), 0);
	print_message("    t1's slot reused after %ld start+join\n", (long)(intptr_t)tries);
	STB_TEST_END();
}

static void *stb_report_self(void *arg)
{
	const bthread_t *tid = arg;
	STB_EXPECT(bthread_equal(bthread_self(), bthread_self()));
	/* Both start forms store the id before the new bthread can run. */
	STB_EXPECT(bthread_equal(bthread_self(), __atomic_load_n(tid, __ATOMIC_ACQUIRE)));
	return (void *)(uintptr_t)bthread_self();
}

static void test_self_and_equal(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	assert_int_equal(bthread_self(), 0);
	bthread_t a = 0, b = 0;
	void *ra = NULL, *rb = NULL;
	/* b is started after a was joined: it may take a's slot (then a != b still). */
	assert_int_equal(bthread_start_background(&a, NULL, stb_report_self, &a), 0);
	assert_int_equal(bthread_join(a, &ra), 0);
	assert_int_equal(bthread_start_urgent(&b, NULL, stb_report_self, &b), 0);
	assert_int_equal(bthread_join(b, &rb), 0);
	assert_true(a != 0 && b != 0);
	assert_int_equal((bthread_t)(uintptr_t)ra, a);
	assert_int_equal((bthread_t)(uintptr_t)rb, b);
	assert_true(bthread_equal(a, a));
	assert_false(bthread_equal(a, b));
	assert_int_equal(bthread_self(), 0);
	STB_TEST_END();
}

static void *stb_flag_set(void *arg)
{
	__atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void test_start_errors(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	bthread_t t = 0;
	assert_int_equal(bthread_start_background(&t, NULL, NULL, NULL), EINVAL);
	assert_int_equal(bthread_start_urgent(&t, NULL, NULL, NULL), EINVAL);
	bthread_attr_t bad = BTHREAD_ATTR_NORMAL;
	bad.stack_type = 99;
	assert_int_equal(bthread_start_background(&t, &bad, stb_return_arg, NULL), EINVAL);
	assert_int_equal(bthread_attr_init(NULL), EINVAL);
	assert_int_equal(bthread_attr_destroy(NULL), EINVAL);
	bthread_attr_t attr;
	memset(&attr, 0xff, sizeof(attr));
	assert_int_equal(bthread_attr_init(&attr), 0);
	assert_int_equal(attr.stack_type, BTHREAD_STACKTYPE_NORMAL);
	bthread_attr_set_name(&attr, "named");
	assert_string_equal(attr.name, "named");
	/* Copied, cut at BTHREAD_NAME_MAX_LENGTH. */
	char longname[100];
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	bthread_attr_set_name(&attr, longname);
	assert_int_equal(strlen(attr.name), BTHREAD_NAME_MAX_LENGTH);
	longname[0] = 'y';
	assert_int_equal(attr.name[0], 'x');
	bthread_attr_set_name(&attr, NULL);
	assert_string_equal(attr.name, "");
	bthread_attr_set_name(NULL, "x"); /* nothing happens */
	bthread_attr_set_name(&attr, "named");
	/* tid may be NULL. */
	int ran = 0;
	assert_int_equal(bthread_start_background(NULL, &attr, stb_flag_set, &ran), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&ran, __ATOMIC_ACQUIRE) == 1, 5000));
	assert_int_equal(bthread_attr_destroy(&attr), 0);
	STB_TEST_END();
}

/* ---- more workers ---- */

static int stb_par_running;

static void *stb_spin_until_both(void *arg)
{
	(void)arg;
	__atomic_fetch_add(&stb_par_running, 1, __ATOMIC_ACQ_REL);
	uint64_t end = stb_now_ns() + 5000000000ull;
	/* No yield: only a second worker can run the other one. */
	while (__atomic_load_n(&stb_par_running, __ATOMIC_ACQUIRE) < 2 && stb_now_ns() < end)
		;
	return (void *)(intptr_t)__atomic_load_n(&stb_par_running, __ATOMIC_ACQUIRE);
}

static void test_grow_concurrency(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	assert_int_equal(bthread_getconcurrency(), 1);
	assert_int_equal(bthread_getconcurrency_by_tag(0), 1);
	assert_int_equal(bthread_setconcurrency(4), 0);
	assert_int_equal(bthread_getconcurrency(), 4);
	assert_int_equal(bthread_getconcurrency_by_tag(0), 4);
	assert_int_equal(bthread_setconcurrency(2), EINVAL);
	assert_int_equal(bthread_setconcurrency(0), EINVAL);
	assert_int_equal(bthread_setconcurrency(4), 0);
	assert_int_equal(bthread_setconcurrency_by_tag(3, 0), EINVAL);
	assert_int_equal(bthread_setconcurrency_by_tag(4, BTHREAD_TAG_MAX), EINVAL);
	assert_int_equal(bthread_setconcurrency_by_tag(4, BTHREAD_TAG_INVALID), 0);
	assert_int_equal(bthread_getconcurrency(), 4);
	bthread_t a, b;
	void *ra = NULL, *rb = NULL;
	assert_int_equal(bthread_start_background(&a, NULL, stb_spin_until_both, NULL), 0);
	assert_int_equal(bthread_start_background(&b, NULL, stb_spin_until_both, NULL), 0);
	assert_int_equal(bthread_join(a, &ra), 0);
	assert_int_equal(bthread_join(b, &rb), 0);
	/* Both were on a CPU at the same time. */
	assert_int_equal((intptr_t)ra, 2);
	assert_int_equal((intptr_t)rb, 2);
	STB_TEST_END();
}

/* ---- many bthreads ---- */

enum { STB_MANY = STB_TEST_TSAN_SCALE(100000, 2000), STB_BATCH = STB_TEST_TSAN_SCALE(1000, 100) };

static void *stb_twice_plus_one(void *arg)
{
	return (void *)((uintptr_t)arg * 2 + 1);
}

struct stb_many_result {
	long bad;       /* failed starts, wrong results, unexpected join codes */
	long reclaimed; /* joins that returned 0 with the result reclaimed (NULL) */
};

/*
 * Joins tids[0..n) in order; tids[i] must return 2i+1. A join must return 0
 * with that value, except a NULL result when strict is false and a later
 * bthread in tids took the same slot (the documented reclaim: the only
 * bthreads started while this runs are these). A bthread whose slot was not
 * reused by a later one must always deliver its result.
 */
static struct stb_many_result stb_join_checked(const bthread_t *tids, long n, bool strict)
{
	struct stb_many_result r = {0, 0};
	uint32_t max_slot = 0;
	for (long i = 0; i < n; i++)
		if ((uint32_t)tids[i] > max_slot)
			max_slot = (uint32_t)tids[i];
	long *last = malloc(((size_t)max_slot + 1) * sizeof(*last));
	if (!last) {
		r.bad = n;
		return r;
	}
	for (long i = 0; i < n; i++)
		last[(uint32_t)tids[i]] = i;
	for (long i = 0; i < n; i++) {
		if (!tids[i])
			continue;
		void *ret = NULL;
		int rc = bthread_join(tids[i], &ret);
		bool reused_later = last[(uint32_t)tids[i]] > i;
		if (rc == 0 && (uintptr_t)ret == (uintptr_t)i * 2 + 1)
			continue;
		if (rc == 0 && ret == NULL && !strict && reused_later) {
			r.reclaimed++;
			continue;
		}
		if (r.bad++ < 5)
			stb_test_record_fail(__FILE__, __LINE__,
					     "join #%ld (id %#llx): rc %d ret %p, slot reused later: %d",
					     i, (unsigned long long)tids[i], rc, ret, reused_later);
	}
	free(last);
	return r;
}

/* Starts n bthreads (urgent or background), then joins them all. */
static struct stb_many_result stb_create_then_join(bthread_t *tids, long n, bool urgent,
						   bool strict)
{
	long bad_start = 0;
	for (long i = 0; i < n; i++) {
		void *arg = (void *)(uintptr_t)i;
		int rc = urgent ? bthread_start_urgent(&tids[i], &BTHREAD_ATTR_SMALL,
						       stb_twice_plus_one, arg)
				: bthread_start_background(&tids[i], &BTHREAD_ATTR_SMALL,
							   stb_twice_plus_one, arg);
		if (rc != 0) {
			if (bad_start++ < 5)
				stb_test_record_fail(__FILE__, __LINE__, "start #%ld: rc %d", i, rc);
			tids[i] = 0;
		}
	}
	struct stb_many_result r = stb_join_checked(tids, n, strict);
	r.bad += bad_start;
	return r;
}

static struct stb_many_result stb_many_out;

/* Runs in a bthread. arg: 0 all then join (strict), 1 urgent batches, 2 background batches. */
static void *stb_many_parent(void *arg)
{
	long mode = (long)(intptr_t)arg;
	bthread_t *tids = calloc(STB_MANY, sizeof(*tids));
	struct stb_many_result r = {STB_MANY, 0};
	if (tids && mode == 0) {
		r = stb_create_then_join(tids, STB_MANY, false, true);
	} else if (tids) {
		r.bad = 0;
		for (long b = 0; b < STB_MANY / STB_BATCH; b++) {
			struct stb_many_result k =
				stb_create_then_join(tids, STB_BATCH, mode == 1, false);
			r.bad += k.bad;
			r.reclaimed += k.reclaimed;
		}
	}
	free(tids);
	stb_many_out = r;
	return NULL;
}

/*
 * On the single worker a bthread that starts others in the background keeps
 * the CPU until it joins, so none finishes early and every result must still
 * be there when joined.
 */
static void test_100k_one_worker_strict(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	assert_int_equal(bthread_getconcurrency(), 1);
	bthread_t p;
	uint64_t t0 = stb_now_ns();
	assert_int_equal(bthread_start_background(&p, NULL, stb_many_parent, (void *)0), 0);
	assert_int_equal(bthread_join(p, NULL), 0);
	print_message("    %d bthreads started then joined by a bthread on 1 worker: %.0f ms\n",
		      STB_MANY, stb_test_ms_since(t0));
	assert_int_equal(stb_many_out.bad, 0);
	assert_int_equal(stb_many_out.reclaimed, 0);
	STB_TEST_END();
}

static void test_100k_create_then_join_from_pthread(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	bthread_t *tids = calloc(STB_MANY, sizeof(*tids));
	assert_non_null(tids);
	uint64_t t0 = stb_now_ns();
	struct stb_many_result r = stb_create_then_join(tids, STB_MANY, false, false);
	print_message("    %d bthreads started then joined from a pthread in %.0f ms "
		      "(%ld results reclaimed: NULL)\n",
		      STB_MANY, stb_test_ms_since(t0), r.reclaimed);
	free(tids);
	assert_int_equal(r.bad, 0);
	STB_TEST_END();
}

static void test_100k_from_bthread(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	const char *what[] = {"", "urgent batches", "background batches"};
	for (long mode = 1; mode < 3; mode++) {
		bthread_t p;
		uint64_t t0 = stb_now_ns();
		assert_int_equal(bthread_start_background(&p, NULL, stb_many_parent, (void *)mode), 0);
		assert_int_equal(bthread_join(p, NULL), 0);
		print_message("    %d bthreads from a bthread, %s of %d: %.0f ms "
			      "(%ld results reclaimed: NULL)\n",
			      STB_MANY, what[mode], STB_BATCH, stb_test_ms_since(t0),
			      stb_many_out.reclaimed);
		assert_int_equal(stb_many_out.bad, 0);
	}
	STB_TEST_END();
}

static void test_100k_batches_from_pthread(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	bthread_t tids[STB_BATCH];
	struct stb_many_result r = {0, 0};
	uint64_t t0 = stb_now_ns();
	for (long b = 0; b < STB_MANY / STB_BATCH; b++) {
		struct stb_many_result k = stb_create_then_join(tids, STB_BATCH, b & 1, false);
		r.bad += k.bad;
		r.reclaimed += k.reclaimed;
	}
	print_message("    %d bthreads in batches of %d from a pthread: %.0f ms "
		      "(%ld results reclaimed: NULL)\n",
		      STB_MANY, STB_BATCH, stb_test_ms_since(t0), r.reclaimed);
	assert_int_equal(r.bad, 0);
	STB_TEST_END();
}

static void *stb_gated_twice_plus_one(void *arg)
{
	const int *gate = *(int *const *)arg;
	while (__atomic_load_n(gate, __ATOMIC_ACQUIRE) == 0)
		butex_wait((void *)gate, 0, NULL);
	return (void *)((uintptr_t)((int *const *)arg)[1] * 2 + 1);
}

/*
 * 10,000 bthreads (500 under TSan) on two workers that cannot finish before
 * all are started: no slot is reused, so every result must be delivered.
 */
static void test_10k_blocked_then_join(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	enum { N = STB_TEST_TSAN_SCALE(10000, 500) };
	int *gate = butex_create();
	assert_non_null(gate);
	bthread_t *tids = calloc(N, sizeof(*tids));
	void **args = calloc(2 * N, sizeof(*args));
	assert_non_null(tids);
	assert_non_null(args);
	for (long i = 0; i < N; i++) {
		args[2 * i] = gate;
		args[2 * i + 1] = (void *)(uintptr_t)i;
		assert_int_equal(bthread_start_background(&tids[i], &BTHREAD_ATTR_SMALL,
							  stb_gated_twice_plus_one, &args[2 * i]),
				 0);
	}
	__atomic_store_n(gate, 1, __ATOMIC_RELEASE);
	butex_wake_all(gate);
	struct stb_many_result r = stb_join_checked(tids, N, true);
	free(args);
	free(tids);
	butex_destroy(gate);
	assert_int_equal(r.bad, 0);
	STB_TEST_END();
}

/* ---- BTHREAD_ATTR_PTHREAD ---- */

static bthread_mutex_t stb_ws_mutex;
static int stb_ws_held;   /* the normal bthread holds stb_ws_mutex */
static int stb_ws_shared; /* guarded by stb_ws_mutex */

static bool stb_on_this_pthread_stack(const void *p)
{
	pthread_attr_t pa;
	void *lo = NULL;
	size_t size = 0;
	if (pthread_getattr_np(pthread_self(), &pa) != 0)
		return false;
	pthread_attr_getstack(&pa, &lo, &size);
	pthread_attr_destroy(&pa);
	return (const char *)p >= (const char *)lo && (const char *)p < (const char *)lo + size;
}

static void *stb_ws_holder(void *arg)
{
	(void)arg;
	int local = 0;
	/* A normal bthread runs on its own stack, not its worker's. */
	STB_EXPECT(!stb_on_this_pthread_stack(&local));
	STB_EXPECT_EQ(bthread_mutex_lock(&stb_ws_mutex), 0);
	__atomic_store_n(&stb_ws_held, 1, __ATOMIC_RELEASE);
	STB_EXPECT_EQ(bthread_usleep(50000), 0);
	stb_ws_shared = 100;
	STB_EXPECT_EQ(bthread_mutex_unlock(&stb_ws_mutex), 0);
	return NULL;
}

static void *stb_ws_task(void *arg)
{
	const bthread_t *tid = arg;
	int local = 0;
	STB_EXPECT(stb_on_this_pthread_stack(&local));
	STB_EXPECT(bthread_self() != 0);
	STB_EXPECT_EQ(bthread_self(), __atomic_load_n(tid, __ATOMIC_ACQUIRE));
	/* Blocks the worker pthread; still a real sleep. */
	uint64_t t0 = stb_now_ns();
	STB_EXPECT_EQ(bthread_usleep(20000), 0);
	STB_EXPECT(stb_test_ms_since(t0) >= 20.0);
	STB_EXPECT_EQ(bthread_yield(), 0);
	/* Blocks in the mutex until the holder (on the other worker) unlocks. */
	STB_EXPECT_EQ(bthread_mutex_lock(&stb_ws_mutex), 0);
	STB_EXPECT_EQ(stb_ws_shared, 100);
	stb_ws_shared++;
	STB_EXPECT_EQ(bthread_mutex_unlock(&stb_ws_mutex), 0);
	bthread_exit((void *)0x77);
}

static void *stb_ws_plain(void *arg)
{
	int local = 0;
	STB_EXPECT(stb_on_this_pthread_stack(&local));
	return arg;
}

static void test_attr_pthread(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	assert_int_equal(bthread_mutex_init(&stb_ws_mutex, NULL), 0);
	bthread_t holder, ws = 0;
	assert_int_equal(bthread_start_background(&holder, NULL, stb_ws_holder, NULL), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&stb_ws_held, __ATOMIC_ACQUIRE) == 1, 5000));
	assert_int_equal(bthread_start_background(&ws, &BTHREAD_ATTR_PTHREAD, stb_ws_task, &ws), 0);
	void *ret = NULL;
	assert_int_equal(bthread_join(ws, &ret), 0);
	assert_ptr_equal(ret, (void *)0x77);
	assert_int_equal(bthread_join(holder, NULL), 0);
	assert_int_equal(stb_ws_shared, 101);
	/* Urgent start of a worker-stack bthread from a pthread queues it. */
	bthread_t t;
	assert_int_equal(bthread_start_urgent(&t, &BTHREAD_ATTR_PTHREAD, stb_ws_plain, (void *)3), 0);
	ret = NULL;
	assert_int_equal(bthread_join(t, &ret), 0);
	assert_ptr_equal(ret, (void *)3);
	/* Many of them mixed with normal bthreads. */
	bthread_t tids[200];
	for (int i = 0; i < 200; i++)
		assert_int_equal(bthread_start_background(&tids[i],
							  (i & 1) ? &BTHREAD_ATTR_PTHREAD
								  : &BTHREAD_ATTR_SMALL,
							  stb_twice_plus_one, (void *)(uintptr_t)i),
				 0);
	assert_int_equal(stb_join_checked(tids, 200, false).bad, 0);
	assert_int_equal(bthread_mutex_destroy(&stb_ws_mutex), 0);
	STB_TEST_END();
}

/*
 * A join returns only after the joined bthread is gone: its stack can no
 * longer be traced (-ESRCH). Each round a bthread waits on a butex while a
 * bthread and a pthread join it; when it is released it wakes the bthread
 * joiner first and then the pthread (a futex wake: microseconds), and the
 * bthread joiner, stolen by another worker, traces it meanwhile.
 */
static int *stb_gone_go;
static bthread_t stb_gone_target;
static int stb_gone_round;  /* round the pthread joiner should join, -1: quit */
static int stb_gone_joined; /* rounds the pthread joiner joined */

static void *stb_gone_wait(void *arg)
{
	(void)arg;
	while (__atomic_load_n(stb_gone_go, __ATOMIC_ACQUIRE) == 0)
		butex_wait(stb_gone_go, 0, NULL);
	return NULL;
}

static void *stb_gone_bjoin(void *arg)
{
	bthread_t t = (bthread_t)(uintptr_t)arg;
	char buf[256];
	if (bthread_join(t, NULL) != 0)
		return (void *)-1;
	int rc = bthread_stack_trace(t, buf, sizeof(buf));
	if (rc != -ESRCH) {
		fprintf(stderr, "bthread_stack_trace right after join = %d:\n%s", rc, buf);
		return (void *)1;
	}
	return NULL;
}

static void *stb_gone_pjoin(void *arg)
{
	(void)arg;
	for (int r = 0;; r++) {
		int want;
		while ((want = __atomic_load_n(&stb_gone_round, __ATOMIC_ACQUIRE)) != r && want != -1)
			sched_yield();
		if (want == -1)
			return NULL;
		bthread_join(__atomic_load_n(&stb_gone_target, __ATOMIC_ACQUIRE), NULL);
		__atomic_store_n(&stb_gone_joined, r + 1, __ATOMIC_RELEASE);
	}
}

static void test_join_after_gone(void **state)
{
	(void)state;
	STB_TEST_BEGIN(120);
	enum { ROUNDS = STB_TEST_SCALE(2000, 200) };
	if (bthread_getconcurrency() < 4)
		assert_int_equal(bthread_setconcurrency(4), 0);
	__atomic_store_n(&stb_gone_round, -2, __ATOMIC_RELEASE);
	pthread_t pj;
	assert_int_equal(pthread_create(&pj, NULL, stb_gone_pjoin, NULL), 0);
	long bad = 0;
	for (int r = 0; r < ROUNDS; r++) {
		stb_gone_go = butex_create();
		assert_non_null(stb_gone_go);
		bthread_t t, j;
		assert_int_equal(bthread_start_background(&t, NULL, stb_gone_wait, NULL), 0);
		__atomic_store_n(&stb_gone_target, t, __ATOMIC_RELEASE);
		assert_int_equal(bthread_start_background(&j, NULL, stb_gone_bjoin,
							  (void *)(uintptr_t)t),
				 0);
		stb_test_sleep_ms(0); /* let the bthread joiner queue first */
		__atomic_store_n(&stb_gone_round, r, __ATOMIC_RELEASE);
		struct timespec ts = {0, 200000};
		nanosleep(&ts, NULL);
		__atomic_store_n(stb_gone_go, 1, __ATOMIC_RELEASE);
		butex_wake_all(stb_gone_go);
		void *res = NULL;
		assert_int_equal(bthread_join(j, &res), 0);
		assert_true((intptr_t)res >= 0);
		bad += (long)(intptr_t)res;
		assert_true(STB_WAIT_UNTIL(__atomic_load_n(&stb_gone_joined, __ATOMIC_ACQUIRE) == r + 1,
					   5000));
		butex_destroy(stb_gone_go);
	}
	__atomic_store_n(&stb_gone_round, -1, __ATOMIC_RELEASE);
	assert_int_equal(pthread_join(pj, NULL), 0);
	assert_int_equal(bad, 0);
	STB_TEST_END();
}

/* ---- worker pools (tags) ---- */

struct stb_tag_job {
	int tags[3];    /* bthread_self_tag: start, after a sleep, after a butex wake */
	int *butex;
};

static void *stb_tag_run(void *arg)
{
	struct stb_tag_job *j = arg;
	j->tags[0] = bthread_self_tag();
	bthread_usleep(1000);
	j->tags[1] = bthread_self_tag();
	while (__atomic_load_n(j->butex, __ATOMIC_ACQUIRE) == 0)
		butex_wait(j->butex, 0, NULL);
	j->tags[2] = bthread_self_tag();
	return NULL;
}

static void *stb_tag_child_of(void *arg)
{
	/* tag INVALID: the pool of the starting worker. */
	bthread_t t;
	struct stb_tag_job *j = arg;
	if (bthread_start_urgent(&t, NULL, stb_tag_run, j) != 0)
		return (void *)1;
	return (void *)(intptr_t)bthread_join(t, NULL);
}

static void test_tags(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	assert_int_equal(bthread_self_tag(), BTHREAD_TAG_DEFAULT);
	assert_int_equal(bthread_getconcurrency_by_tag(BTHREAD_TAG_MAX), EINVAL);
	assert_int_equal(bthread_getconcurrency_by_tag(-1), EINVAL);
	assert_int_equal(bthread_getconcurrency_by_tag(7), 0); /* not started */
	int total = bthread_getconcurrency();
	assert_int_equal(bthread_setconcurrency_by_tag(5, 7), 0);
	assert_int_equal(bthread_getconcurrency_by_tag(7), 5);
	assert_int_equal(bthread_getconcurrency(), total + 5);
	assert_int_equal(bthread_setconcurrency_by_tag(4, 7), EPERM);
	assert_int_equal(bthread_setconcurrency_by_tag(5, 7), 0);
	/* A bad tag in attr. */
	bthread_attr_t bad = BTHREAD_ATTR_NORMAL;
	bad.tag = BTHREAD_TAG_MAX;
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, &bad, stb_tag_run, NULL), EINVAL);
	bad.tag = -2;
	assert_int_equal(bthread_start_background(&t, &bad, stb_tag_run, NULL), EINVAL);
	/* Tags 7 (grown above) and 9 (started on first use), and a child of a
	 * tag-9 bthread with tag INVALID: each stays in its pool, through a sleep
	 * and a butex wake from this pthread. */
	int *b = butex_create();
	assert_non_null(b);
	struct stb_tag_job j7 = {.butex = b}, j9 = {.butex = b}, jc = {.butex = b};
	bthread_attr_t a = BTHREAD_ATTR_NORMAL;
	a.tag = 7;
	bthread_t t7, t9, tc;
	assert_int_equal(bthread_start_background(&t7, &a, stb_tag_run, &j7), 0);
	a.tag = 9;
	assert_int_equal(bthread_start_urgent(&t9, &a, stb_tag_run, &j9), 0);
	assert_int_equal(bthread_start_background(&tc, &a, stb_tag_child_of, &jc), 0);
	assert_int_equal(bthread_getconcurrency_by_tag(9), BTHREAD_MIN_CONCURRENCY);
	bthread_attr_t got;
	assert_int_equal(bthread_getattr(t9, &got), 0);
	assert_int_equal(got.tag, 9);
	stb_test_sleep_ms(20);
	__atomic_store_n(b, 1, __ATOMIC_RELEASE);
	butex_wake_all(b);
	void *rc = (void *)1;
	assert_int_equal(bthread_join(t7, NULL), 0);
	assert_int_equal(bthread_join(t9, NULL), 0);
	assert_int_equal(bthread_join(tc, &rc), 0);
	assert_null(rc);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(j7.tags[i], 7);
		assert_int_equal(j9.tags[i], 9);
		assert_int_equal(jc.tags[i], 9);
	}
	butex_destroy(b);
	STB_TEST_END();
}

/* ---- bthread_getattr, bthread_interrupt, about_to_quit ---- */

struct stb_intr_job {
	int *butex;
	int sleep_rc, sleep_err;
	int wait_rc, wait_err;
	int quit_rc;
};

static void *stb_intr_run(void *arg)
{
	struct stb_intr_job *j = arg;
	j->quit_rc = bthread_about_to_quit();
	int rc = bthread_usleep(5000000);
	j->sleep_err = rc ? stb_test_errno() : 0;
	__atomic_store_n(&j->sleep_rc, rc, __ATOMIC_RELEASE);
	j->wait_rc = butex_wait(j->butex, 0, NULL);
	j->wait_err = j->wait_rc ? stb_test_errno() : 0;
	return NULL;
}

static void test_getattr_interrupt(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	bthread_attr_t attr = BTHREAD_ATTR_SMALL;
	attr.flags |= BTHREAD_NEVER_QUIT;
	bthread_attr_set_name(&attr, "interrupted");
	int *b = butex_create();
	assert_non_null(b);
	struct stb_intr_job j = {.butex = b};
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, &attr, stb_intr_run, &j), 0);
	bthread_attr_t got;
	memset(&got, 0xff, sizeof(got));
	assert_int_equal(bthread_getattr(t, &got), 0);
	assert_int_equal(got.stack_type, BTHREAD_STACKTYPE_SMALL);
	assert_int_equal(got.flags, BTHREAD_NEVER_QUIT);
	assert_string_equal(got.name, "interrupted");
	errno = 0;
	assert_int_equal(bthread_getattr(t, NULL), -1);
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_int_equal(bthread_getattr(0, &got), -1);
	assert_int_equal(errno, EINVAL);
	/* An interrupt ends the sleep with EINTR, and one before the wait ends it at once. */
	stb_test_sleep_ms(20);
	assert_int_equal(bthread_interrupt(t), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&j.sleep_rc, __ATOMIC_ACQUIRE) == -1, 5000));
	assert_int_equal(bthread_interrupt(t), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(j.quit_rc, 0);
	assert_int_equal(j.sleep_err, EINTR);
	assert_int_equal(j.wait_rc, -1);
	assert_int_equal(j.wait_err, EINTR);
	assert_false(bthread_stopped(t) == 0); /* finished */
	assert_int_equal(bthread_getattr(t, &got), -1);
	assert_int_equal(bthread_interrupt(t), EINVAL);
	assert_int_equal(bthread_interrupt(0), EINVAL);
	assert_int_equal(bthread_about_to_quit(), EPERM); /* a pthread */
	butex_destroy(b);
	STB_TEST_END();
}

/* ---- CPU clock, spans, worker start functions, flush ---- */

static uint64_t stb_thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * out[0..1]: the bthread's CPU clock around a 50 ms sleep; out[2..3] around a
 * 20 ms spin, out[4..5] the worker thread's CPU time around the same spin
 * (no switch in between: the same thread).
 */
static void *stb_cpu_run(void *arg)
{
	(void)arg;
	uint64_t *out = malloc(6 * sizeof(*out));
	if (!out)
		return NULL;
	out[0] = bthread_cpu_clock_ns();
	bthread_usleep(50000); /* not counted */
	out[1] = bthread_cpu_clock_ns();
	out[2] = bthread_cpu_clock_ns();
	out[4] = stb_thread_cpu_ns();
	uint64_t end = stb_now_ns() + 20000000;
	while (stb_now_ns() < end)
		;
	out[5] = stb_thread_cpu_ns();
	out[3] = bthread_cpu_clock_ns();
	return out;
}

static void test_cpu_clock(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	assert_int_equal(bthread_cpu_clock_ns(), 0); /* a pthread */
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_cpu_run, NULL), 0);
	uint64_t *v = NULL;
	assert_int_equal(bthread_join(t, (void **)&v), 0);
	assert_non_null(v);
	uint64_t spin = v[3] - v[2], thread = v[5] - v[4];
	print_message("    cpu clock: %llu ns over a 50 ms sleep; %llu ns over a 20 ms spin that "
		      "took the worker %llu ns\n",
		      (unsigned long long)(v[1] - v[0]), (unsigned long long)spin,
		      (unsigned long long)thread);
	assert_true(v[1] - v[0] < 10000000ull); /* the sleep costs (almost) no CPU */
	/* The spin counts as the worker's CPU time does (within 1 ms of reads). */
	assert_true(spin + 1000000ull >= thread && spin <= thread + 1000000ull);
	assert_true(thread > 0);
	free(v);
	STB_TEST_END();
}

static int stb_spans_created, stb_spans_ended, stb_spans_destroyed;
static void *stb_span_seen;

static void *stb_span_create_fn(void)
{
	__atomic_fetch_add(&stb_spans_created, 1, __ATOMIC_RELAXED);
	return (void *)0x5a5a;
}

static void stb_span_destroy_fn(void *span)
{
	stb_span_seen = span;
	__atomic_fetch_add(&stb_spans_destroyed, 1, __ATOMIC_RELAXED);
}

static void stb_span_end_fn(void)
{
	__atomic_fetch_add(&stb_spans_ended, 1, __ATOMIC_RELAXED);
}

static void test_spans(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	assert_int_equal(bthread_set_span_funcs(stb_span_create_fn, NULL, NULL), -1);
	assert_int_equal(stb_test_errno(), EINVAL);
	assert_int_equal(bthread_set_span_funcs(stb_span_create_fn, stb_span_destroy_fn,
						stb_span_end_fn), 0);
	bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
	attr.flags |= BTHREAD_INHERIT_SPAN;
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_flag_set, &(int){0}), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(stb_spans_created, 0); /* no INHERIT_SPAN: no span */
	assert_int_equal(bthread_start_background(&t, &attr, stb_flag_set, &(int){0}), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(stb_spans_created, 1);
	assert_int_equal(stb_spans_ended, 1);
	assert_int_equal(stb_spans_destroyed, 1);
	assert_ptr_equal(stb_span_seen, (void *)0x5a5a);
	assert_int_equal(bthread_set_span_funcs(NULL, NULL, NULL), 0);
	assert_int_equal(bthread_start_background(&t, &attr, stb_flag_set, &(int){0}), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(stb_spans_created, 1);
	STB_TEST_END();
}

static int stb_startfn_calls, stb_tagged_calls, stb_tagged_last;

static void stb_startfn(void)
{
	__atomic_fetch_add(&stb_startfn_calls, 1, __ATOMIC_RELAXED);
}

static void stb_tagged_startfn(bthread_tag_t tag)
{
	__atomic_fetch_add(&stb_tagged_calls, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&stb_tagged_last, tag, __ATOMIC_RELAXED);
}

/* Set by main before the runtime starts: every worker runs them first. */
static void test_worker_startfn(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	assert_int_equal(bthread_set_worker_startfn(NULL), EINVAL);
	assert_int_equal(bthread_set_tagged_worker_startfn(NULL), EINVAL);
	bthread_t t; /* the runtime runs (also when this test runs alone) */
	assert_int_equal(bthread_start_background(&t, NULL, stb_flag_set, &(int){0}), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	int n = bthread_getconcurrency();
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&stb_startfn_calls, __ATOMIC_RELAXED) == n,
				   5000));
	assert_int_equal(__atomic_load_n(&stb_tagged_calls, __ATOMIC_RELAXED), n);
	assert_int_equal(bthread_setconcurrency_by_tag(4, 11), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&stb_tagged_calls, __ATOMIC_RELAXED) == n + 4,
				   5000));
	assert_int_equal(__atomic_load_n(&stb_tagged_last, __ATOMIC_RELAXED), 11);
	STB_TEST_END();
}

/* NOSIGNAL from a pthread: queued, run once bthread_flush wakes a worker (or someone looks). */
static void test_nosignal_flush(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	enum { N = 50 };
	int ran[N];
	memset(ran, 0, sizeof(ran));
	bthread_attr_t attr = BTHREAD_ATTR_SMALL;
	attr.flags |= BTHREAD_NOSIGNAL;
	bthread_t t[N];
	for (int i = 0; i < N; i++)
		assert_int_equal(bthread_start_background(&t[i], &attr, stb_flag_set, &ran[i]), 0);
	bthread_flush();
	bthread_flush(); /* nothing left to flush: harmless */
	for (int i = 0; i < N; i++) {
		assert_int_equal(bthread_join(t[i], NULL), 0);
		assert_int_equal(ran[i], 1);
	}
	STB_TEST_END();
}

/* ---- bthread_stop_world (child) ---- */

static void *stb_forever(void *arg)
{
	int *b = arg;
	while (__atomic_load_n(b, __ATOMIC_ACQUIRE) == 0)
		butex_wait(b, 0, NULL);
	return NULL;
}

/* Child: workers running, one bthread blocked for good; stop_world returns; starts fail. */
static int stb_stop_world_child(void)
{
	int *b = butex_create();
	bthread_t t;
	int ran = 0;
	if (!b || bthread_start_background(&t, NULL, stb_forever, b) != 0 ||
	    bthread_start_background(&t, NULL, stb_flag_set, &ran) != 0 ||
	    bthread_join(t, NULL) != 0 || !ran)
		return 10;
	bthread_stop_world();
	bthread_stop_world(); /* twice: nothing more to do */
	if (bthread_start_background(&t, NULL, stb_flag_set, &ran) != EPERM)
		return 11;
	return 0;
}

static void test_stop_world(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl("/proc/self/exe", "test_sched", "--stop-world", (char *)NULL);
		_exit(127);
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--stop-world") == 0)
		return stb_stop_world_child();
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	/* Before the first bthread call: the order tests need a single worker. */
	setenv("STB_CONCURRENCY", "1", 1);
	setenv("STB_CPU_CLOCK", "1", 1);
	bthread_set_worker_startfn(stb_startfn);
	bthread_set_tagged_worker_startfn(stb_tagged_startfn);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_concurrency_before_start),
		cmocka_unit_test(test_urgent_runs_before_caller),
		cmocka_unit_test(test_background_start_queues),
		cmocka_unit_test(test_yield_is_fair),
		cmocka_unit_test(test_join_returns_results),
		cmocka_unit_test(test_join_invalid_ids),
		cmocka_unit_test(test_self_and_equal),
		cmocka_unit_test(test_join_stale_one_worker),
		cmocka_unit_test(test_start_errors),
		cmocka_unit_test(test_100k_one_worker_strict),
		/* From here on: four workers. */
		cmocka_unit_test(test_grow_concurrency),
		cmocka_unit_test(test_join_stale_id),
		cmocka_unit_test(test_100k_create_then_join_from_pthread),
		cmocka_unit_test(test_100k_from_bthread),
		cmocka_unit_test(test_100k_batches_from_pthread),
		cmocka_unit_test(test_10k_blocked_then_join),
		cmocka_unit_test(test_attr_pthread),
		cmocka_unit_test(test_join_after_gone),
		cmocka_unit_test(test_worker_startfn),
		cmocka_unit_test(test_tags),
		cmocka_unit_test(test_getattr_interrupt),
		cmocka_unit_test(test_cpu_clock),
		cmocka_unit_test(test_spans),
		cmocka_unit_test(test_nosignal_flush),
		cmocka_unit_test(test_stop_world),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
