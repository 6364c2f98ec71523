/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The in-process tracer on single tasks: bthreads blocked in each primitive,
 * yielding and running; registered pthreads; every task state (switch windows
 * via the test hook) and the gate lease; depth/skip/callback; self traces;
 * errors; a blocked trace signal and a replaced handler. One worker, then two.
 */
#include "test_util.h"
#include "trace_util.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/syscall.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>
#include <stb/stb.h>

#include "internal.h" /* stb_task_*, stb_table_task, stb_test_switch_hook */
#include "test_internal.h" /* stb_test_state */

#define STB_NFRAMES 128
#define STB_SENTINEL_IP 0xdeadbeefull
/* Default trace timeout outside the timeout tests: 2 CPUs may be shared. */
#define STB_GENEROUS_MS 5000
/* Timeout set before the runtime starts: far from the built-in 50 ms, so that
 * only a lower bound is checked (a loaded machine only makes traces slower). */
#define STB_BEFORE_START_MS 1000

static const char *const stb_chain[] = {"stb_chain_f3", "stb_chain_f2", "stb_chain_f1"};
static const char *const stb_pth_chain[] = {"stb_pth_f3", "stb_pth_f2", "stb_pth_f1"};

/* ---- bthreads blocked in a known chain ---- */

enum stb_kind {
	STB_K_BUTEX,
	STB_K_USLEEP,
	STB_K_MUTEX,
	STB_K_COND,
	STB_K_FD,
	STB_K_YIELD,
	STB_K_SPIN,
	STB_K_NAP, /* short sleeps in a loop: switches often */
};

/*
 * One bthread running stb_chain_f1 -> f2 -> f3, then blocking as kind says.
 * Tests keep these (and struct stb_pth) in static storage: when a check
 * fails, the threads using them outlive the test function.
 */
struct stb_blk {
	enum stb_kind kind;
	int stop;
	int started;
	uint32_t tid;           /* kernel thread of the worker when f3 started */
	void *butex;
	bthread_mutex_t *mutex; /* STB_K_MUTEX: held by the test */
	bthread_mutex_t cm;     /* STB_K_COND */
	bthread_cond_t cv;
	int fd;                 /* STB_K_FD: read end of an empty pipe */
	bthread_t id;
};

static bool stb_blk_stopped(struct stb_blk *b)
{
	return __atomic_load_n(&b->stop, __ATOMIC_ACQUIRE) != 0;
}

STB_NOIPA static void stb_chain_f3(struct stb_blk *b)
{
	b->tid = (uint32_t)syscall(SYS_gettid);
	__atomic_store_n(&b->started, 1, __ATOMIC_RELEASE);
	switch (b->kind) {
	case STB_K_BUTEX:
		while (!stb_blk_stopped(b)) {
			butex_wait(b->butex, 0, NULL);
			STB_NO_TAIL();
		}
		break;
	case STB_K_USLEEP:
		while (!stb_blk_stopped(b)) {
			bthread_usleep(30u * 1000u * 1000u); /* ended by bthread_stop */
			STB_NO_TAIL();
		}
		break;
	case STB_K_MUTEX:
		bthread_mutex_lock(b->mutex);
		STB_NO_TAIL();
		bthread_mutex_unlock(b->mutex);
		break;
	case STB_K_COND:
		bthread_mutex_lock(&b->cm);
		while (!stb_blk_stopped(b)) {
			bthread_cond_wait(&b->cv, &b->cm);
			STB_NO_TAIL();
		}
		bthread_mutex_unlock(&b->cm);
		break;
	case STB_K_FD:
		while (!stb_blk_stopped(b)) {
			bthread_fd_wait(b->fd, EPOLLIN);
			STB_NO_TAIL();
		}
		break;
	case STB_K_YIELD:
		while (!stb_blk_stopped(b)) {
			bthread_yield();
			STB_NO_TAIL();
		}
		break;
	case STB_K_SPIN:
		while (!stb_blk_stopped(b))
			__asm__ volatile("pause");
		break;
	case STB_K_NAP:
		while (!stb_blk_stopped(b)) {
			bthread_usleep(200);
			STB_NO_TAIL();
		}
		break;
	}
	STB_NO_TAIL();
}

STB_NOIPA static void stb_chain_f2(struct stb_blk *b)
{
	stb_chain_f3(b);
	STB_NO_TAIL();
}

STB_NOIPA static void *stb_chain_f1(void *arg)
{
	stb_chain_f2(arg);
	STB_NO_TAIL();
	return NULL;
}

static void stb_blk_init(struct stb_blk *b, enum stb_kind kind)
{
	memset(b, 0, sizeof(*b));
	b->kind = kind;
	b->fd = -1;
	if (kind == STB_K_BUTEX)
		b->butex = butex_create();
	if (kind == STB_K_COND) {
		bthread_mutex_init(&b->cm, NULL);
		bthread_cond_init(&b->cv, NULL);
	}
}

static int stb_blk_start(struct stb_blk *b, const bthread_attr_t *attr)
{
	return bthread_start_background(&b->id, attr ? attr : &BTHREAD_ATTR_NORMAL, stb_chain_f1, b);
}

/* Ends the blocking loop of b and joins it. */
static void stb_blk_finish(struct stb_blk *b, int wfd)
{
	__atomic_store_n(&b->stop, 1, __ATOMIC_RELEASE);
	switch (b->kind) {
	case STB_K_BUTEX:
		__atomic_store_n((int *)b->butex, 1, __ATOMIC_RELEASE);
		butex_wake_all(b->butex);
		break;
	case STB_K_USLEEP:
		bthread_stop(b->id);
		break;
	case STB_K_COND:
		bthread_mutex_lock(&b->cm);
		bthread_cond_broadcast(&b->cv);
		bthread_mutex_unlock(&b->cm);
		break;
	case STB_K_FD: {
		char c = 'x';
		assert_int_equal(write(wfd, &c, 1), 1);
		break;
	}
	default:
		break;
	}
	assert_int_equal(bthread_join(b->id, NULL), 0);
	if (b->kind == STB_K_BUTEX)
		butex_destroy(b->butex);
	if (b->kind == STB_K_COND) {
		bthread_cond_destroy(&b->cv);
		bthread_mutex_destroy(&b->cm);
	}
}

/* The state of id as a tracer reads it from the table (abi.h, "Running"). */
static unsigned stb_state_of(bthread_t id)
{
	struct stb_task *t = stb_task_lookup(id);
	return t ? stb_test_state(t->pub) : STB_TASK_UNUSED;
}

/* How the table says it (abi.h, "Running"): SUSPENDING in the task's word;
 * ABOUT_TO_RUN as a worker's current with the switching bit, the word still
 * READY or READY_NO_STACK. */
static void stb_check_published(bthread_t id, const struct stb_abi_task *pub, unsigned want)
{
	unsigned st = STB_ABI_STATE(__atomic_load_n(&pub->word, __ATOMIC_ACQUIRE));
	int named = 0, named_switching = 0;
	uint32_t n = __atomic_load_n(&stb_table_workers_header()->nworkers, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t c = __atomic_load_n(&stb_table_worker(i)->current, __ATOMIC_ACQUIRE);
		named += c == id;
		named_switching += c == (id | STB_ABI_CURRENT_SWITCHING);
	}
	if (want == STB_TASK_ABOUT_TO_RUN) {
		assert_true(STB_ABI_RUNNABLE(st));
		assert_int_equal(named_switching, 1);
		assert_int_equal(named, 0);
	} else {
		assert_int_equal(st, want);
		assert_int_equal(named_switching, 0);
	}
}

static void stb_frames_poison(struct stb_frame *f, size_t n)
{
	memset(f, 0, n * sizeof(*f));
	for (size_t i = 0; i < n; i++)
		f[i].ip = STB_SENTINEL_IP;
}

/* Every frame, the runtime's own included. */
static const struct stb_trace_opts stb_full = {.runtime_frames = 1};

/* A runtime function, hidden by default (the chain's own are stb_chain_*). */
static bool stb_is_runtime(const char *sym)
{
	return sym && strncmp(sym, "stb_", 4) == 0 && strncmp(sym, "stb_chain_", 10) != 0 &&
	       strncmp(sym, "stb_self_", 9) != 0;
}

/*
 * The default view of a bthread's stack (as every report): no runtime frame;
 * the chain f3 -> f2 -> f1 ends the stack (stb_task_entry and
 * stb_ctx_trampoline hidden); above f3 only the public calls of prims (the
 * one it waits in first), or f3 at frame 0 when at_leaf.
 */
static bool stb_check_view(const struct stb_frame *f, int n, const char *const *chain,
			   const char *const *prims, int nprims, bool at_leaf, char *why,
			   size_t size)
{
	if (!stb_frames_check_chain(f, n, chain, 3, NULL, 0, at_leaf, false, why, size))
		return false;
	int i0 = stb_frames_find(f, n, chain[0], 0);
	if (i0 + 3 != n) {
		snprintf(why, size, "%s is not the last frame", chain[2]);
		goto fail;
	}
	for (int i = 0; i < n; i++) {
		if (stb_is_runtime(f[i].symbol)) {
			snprintf(why, size, "frame %d is the runtime's %s", i, f[i].symbol);
			goto fail;
		}
	}
	for (int i = 0; nprims > 0 && i < i0; i++) {
		bool prim = false;
		for (int k = 0; k < nprims; k++)
			prim = prim || stb_sym_is(f[i].symbol, prims[k]);
		if (!prim) {
			snprintf(why, size, "frame %d above %s is not %s", i, chain[0], prims[0]);
			goto fail;
		}
	}
	if (nprims > 0 && i0 == 0) {
		snprintf(why, size, "no %s above %s", prims[0], chain[0]);
		goto fail;
	}
	return true;
fail:
	stb_frames_describe(f, n, why, size);
	return false;
}

/*
 * Traces id with frames and as text and checks: mode, state, the chain
 * f3 -> f2 -> f1 with one of prims right above f3 (none: not checked), f3 at
 * frame 0 when at_leaf, the bthread's bottom frames (stb_full), and, by
 * default, the same without the runtime's frames, in frames and in text.
 */
static void stb_check_trace(bthread_t id, unsigned mode, unsigned state, const char *const *prims,
			    int nprims, bool at_leaf)
{
	struct stb_frame fr[STB_NFRAMES];
	struct stb_trace_info info;
	char why[2048];
	stb_frames_poison(fr, STB_NFRAMES);
	int n = stb_trace(id, &stb_full, fr, STB_NFRAMES, &info);
	if (n <= 0)
		fail_msg("stb_trace(%llu) = %d (%s)", (unsigned long long)id, n, info.error);
	assert_int_equal(info.mode, mode);
	assert_int_equal(info.state, state);
	assert_int_equal(info.nframes, (uint32_t)n);
	assert_true(info.id == id);
	assert_int_equal(info.truncated, 0);
	assert_int_equal(info.is_pthread, 0);
	assert_string_equal(info.error, "");
	assert_true(fr[n].ip == STB_SENTINEL_IP);
	if (!stb_frames_check_chain(fr, n, stb_chain, 3, prims, nprims, at_leaf, true, why,
				    sizeof(why)))
		fail_msg("wrong stack: %s", why);
	for (int i = 0; i < n; i++)
		assert_non_null(fr[i].module);

	/* By default without the runtime's frames. */
	struct stb_frame dv[STB_NFRAMES];
	stb_frames_poison(dv, STB_NFRAMES);
	int dn = stb_trace(id, NULL, dv, STB_NFRAMES, &info);
	if (dn <= 0)
		fail_msg("stb_trace(%llu) = %d (%s)", (unsigned long long)id, dn, info.error);
	assert_int_equal(info.nframes, (uint32_t)dn);
	assert_int_equal(info.truncated, 0);
	assert_true(dv[dn].ip == STB_SENTINEL_IP);
	if (!stb_check_view(dv, dn, stb_chain, prims, nprims, at_leaf, why, sizeof(why)))
		fail_msg("default view: %s", why);

	/* A suspended task gives the same frames every time; a running one the
	 * same functions (it spins in f3). */
	char text[8192];
	int len = bthread_stack_trace(id, text, sizeof(text));
	assert_true(len > 0);
	assert_int_equal((size_t)len, strlen(text));
	bool same = mode == STB_TRACE_CONTEXT && state == STB_TASK_SUSPENDED;
	if (same || at_leaf) {
		if (stb_text_check(text, dv, dn, why, sizeof(why)) != dn)
			fail_msg("text: %s\n%s", why, text);
	} else {
		if (stb_text_check(text, NULL, 0, why, sizeof(why)) < 3)
			fail_msg("text: %s\n%s", why, text);
		assert_non_null(strstr(text, " stb_chain_f3+0x"));
	}
	/* The runtime's frames in text too, once asked for. */
	assert_int_equal(stb_set_trace_runtime_frames(1), 0);
	len = bthread_stack_trace(id, text, sizeof(text));
	assert_int_equal(stb_set_trace_runtime_frames(0), 0);
	if (same && stb_text_check(text, fr, n, why, sizeof(why)) != n)
		fail_msg("text with the runtime's frames: %s\n%s", why, text);
	if (!strstr(text, " stb_ctx_trampoline+0x"))
		fail_msg("text with the runtime's frames:\n%s", text);
}

/* ---- configuration (before the runtime starts) ---- */

static void test_config(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	assert_int_equal(stb_set_signal_trace_timeout_ms(0), -EINVAL);
	assert_int_equal(stb_set_signal_trace_timeout_ms(60001), -EINVAL);
	/* Set before the runtime starts: must survive its start (measured by
	 * test_timeout_set_before_start; not the built-in 50 ms). */
	assert_int_equal(stb_set_signal_trace_timeout_ms(STB_BEFORE_START_MS), 0);
	assert_int_equal(stb_set_trace_signal(0), -EINVAL);
	assert_int_equal(stb_set_trace_signal(SIGKILL), -EINVAL);
	assert_int_equal(stb_set_trace_signal(SIGRTMAX + 1), -EINVAL);
	assert_int_equal(stb_set_trace_signal(SIGRTMAX - 3), 0);
	assert_int_equal(stb_table_set_capacity(0), -EINVAL);
	assert_int_equal(stb_table_set_capacity(STB_ABI_MAX_CAPACITY + 1), -EINVAL);
	assert_int_equal(stb_table_set_capacity(STB_ABI_DEFAULT_CAPACITY), 0);
	assert_string_equal(stb_state_name(STB_TASK_READY_NO_STACK), "ready-without-stack");
	assert_string_equal(stb_state_name(STB_TASK_SUSPENDED), "suspended");
	assert_string_equal(stb_state_name(STB_TASK_NSTATES), "invalid");
	/* Starting the runtime fixes the table size. */
	bthread_t t;
	static struct stb_blk b;
	stb_blk_init(&b, STB_K_NAP);
	__atomic_store_n(&b.stop, 1, __ATOMIC_RELEASE);
	assert_int_equal(stb_blk_start(&b, NULL), 0);
	t = b.id;
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(stb_table_set_capacity(1000), -EBUSY);
	assert_int_equal(bthread_getconcurrency(), 1);
	STB_TEST_END();
}

/* ---- every state ---- */

static void *stb_nothing(void *arg)
{
	return arg;
}

/* CREATED exists only inside bthread_start_*: allocate a task by hand. */
static void test_state_created(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	struct stb_task *t = stb_task_alloc(&BTHREAD_ATTR_SMALL, stb_nothing, NULL);
	assert_non_null(t);
	bthread_t id = stb_task_id(t);
	/* Not CREATED yet: its entry still shows the slot's previous state
	 * until the creator is published and it is set CREATED, as
	 * bthread_start_* does. */
	assert_int_not_equal(stb_task_state(t), STB_TASK_CREATED);
	stb_task_set_state(t, STB_TASK_CREATED);
	assert_int_equal(stb_task_state(t), STB_TASK_CREATED);
	struct stb_frame fr[4];
	struct stb_trace_info info;
	stb_frames_poison(fr, 4);
	assert_int_equal(stb_trace(id, NULL, fr, 4, &info), 0);
	assert_int_equal(info.mode, STB_TRACE_NO_STACK);
	assert_int_equal(info.state, STB_TASK_CREATED);
	assert_int_equal(info.nframes, 0);
	assert_true(fr[0].ip == STB_SENTINEL_IP);
	char text[256];
	const char *want = "(no stack: created)\n";
	assert_int_equal(bthread_stack_trace(id, text, sizeof(text)), (int)strlen(want));
	assert_string_equal(text, want);
	stb_task_set_state(t, STB_TASK_DESTROYED);
	stb_task_release(t);
	assert_int_equal(stb_trace(id, NULL, fr, 4, &info), -ESRCH);
	STB_TEST_END();
}

/*
 * One worker: B blocks (suspended), Y yields, S spins and keeps the worker,
 * so Y waits in the queue (ready) and N, started in the background, has no
 * stack yet (ready-without-stack). Then all finish (destroyed).
 */
static void test_states_one_worker(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	static struct stb_blk bb, by, bs;
	stb_blk_init(&bb, STB_K_BUTEX);
	stb_blk_init(&by, STB_K_YIELD);
	stb_blk_init(&bs, STB_K_SPIN);
	assert_int_equal(stb_blk_start(&bb, NULL), 0);
	assert_true(STB_WAIT_UNTIL(stb_state_of(bb.id) == STB_TASK_SUSPENDED, 5000));
	assert_int_equal(stb_blk_start(&by, NULL), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&by.started, __ATOMIC_ACQUIRE), 5000));
	assert_int_equal(stb_blk_start(&bs, NULL), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&bs.started, __ATOMIC_ACQUIRE), 5000));
	assert_int_equal(stb_state_of(by.id), STB_TASK_READY);
	assert_int_equal(stb_state_of(bs.id), STB_TASK_RUNNING);

	bthread_t nid;
	bthread_attr_t bg = BTHREAD_ATTR_SMALL;
	bg.flags |= BTHREAD_NOSIGNAL;
	assert_int_equal(bthread_start_background(&nid, &bg, stb_nothing, NULL), 0);
	assert_int_equal(stb_state_of(nid), STB_TASK_READY_NO_STACK);

	/* ready-without-stack: nothing to read. */
	struct stb_frame fr[8];
	struct stb_trace_info info;
	stb_frames_poison(fr, 8);
	assert_int_equal(stb_trace(nid, NULL, fr, 8, &info), 0);
	assert_int_equal(info.mode, STB_TRACE_NO_STACK);
	assert_int_equal(info.state, STB_TASK_READY_NO_STACK);
	assert_int_equal(info.nframes, 0);
	assert_string_equal(info.error, "");
	assert_true(fr[0].ip == STB_SENTINEL_IP);
	char text[256];
	const char *want = "(no stack: ready-without-stack)\n";
	assert_int_equal(bthread_stack_trace(nid, text, sizeof(text)), (int)strlen(want));
	assert_string_equal(text, want);

	/* ready: a yielded task in the queue, read from its saved context. */
	static const char *const yield_prims[] = {"bthread_yield"};
	stb_check_trace(by.id, STB_TRACE_CONTEXT, STB_TASK_READY, yield_prims, 1, false);
	/* running: captured by the signal handler, leaf frame included. */
	stb_check_trace(bs.id, STB_TRACE_SIGNAL, STB_TASK_RUNNING, NULL, 0, true);
	/* suspended. */
	static const char *const butex_prims[] = {"butex_wait"};
	stb_check_trace(bb.id, STB_TRACE_CONTEXT, STB_TASK_SUSPENDED, butex_prims, 1, false);
	/* Still the same after all that: nobody moved. */
	assert_int_equal(stb_state_of(nid), STB_TASK_READY_NO_STACK);
	assert_int_equal(stb_state_of(by.id), STB_TASK_READY);

	stb_blk_finish(&bs, -1);
	stb_blk_finish(&by, -1);
	stb_blk_finish(&bb, -1);
	assert_int_equal(bthread_join(nid, NULL), 0);

	/* destroyed: -ESRCH, with a reason. */
	bthread_t done[] = {bb.id, by.id, bs.id, nid};
	for (size_t i = 0; i < sizeof(done) / sizeof(done[0]); i++) {
		/* join returns once the result is published; the bthread then still
		 * runs its exit path (waking joiners) until it switches out. */
		assert_true(STB_WAIT_UNTIL(stb_state_of(done[i]) == STB_TASK_DESTROYED, 5000));
		assert_int_equal(stb_trace(done[i], NULL, fr, 8, &info), -ESRCH);
		assert_true(info.error[0] != '\0');
		assert_int_equal(bthread_stack_trace(done[i], text, sizeof(text)), -ESRCH);
	}
	/* A slot reused by a new bthread does not make the old id traceable. */
	static struct stb_blk bz;
	stb_blk_init(&bz, STB_K_BUTEX);
	assert_int_equal(stb_blk_start(&bz, NULL), 0);
	assert_true(STB_WAIT_UNTIL(stb_state_of(bz.id) == STB_TASK_SUSPENDED, 5000));
	for (size_t i = 0; i < sizeof(done) / sizeof(done[0]); i++)
		assert_int_equal(stb_trace(done[i], NULL, fr, 8, &info), -ESRCH);
	assert_true(stb_trace(bz.id, NULL, fr, 8, &info) > 0);
	stb_blk_finish(&bz, -1);
	/* Never issued. */
	assert_int_equal(stb_trace(0, NULL, fr, 8, &info), -ESRCH);
	assert_true(info.error[0] != '\0');
	assert_int_equal(stb_trace(((bthread_t)7 << 32) | 3000000u, NULL, fr, 8, &info), -ESRCH);
	STB_TEST_END();
}

/* ---- the ABOUT_TO_RUN / SUSPENDING windows (test hook) ---- */

static bthread_t stb_hook_id;
static unsigned stb_hook_want;
static int stb_hook_armed, stb_hook_parked, stb_hook_release;

/* Runs on the worker inside the switch: parks there once for the chosen task. */
static void stb_hook_park(struct stb_task *t, unsigned st)
{
	if (st != __atomic_load_n(&stb_hook_want, __ATOMIC_ACQUIRE) ||
	    stb_task_id(t) != __atomic_load_n(&stb_hook_id, __ATOMIC_ACQUIRE))
		return;
	if (!__atomic_exchange_n(&stb_hook_armed, 0, __ATOMIC_ACQ_REL))
		return;
	__atomic_store_n(&stb_hook_parked, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&stb_hook_release, __ATOMIC_ACQUIRE))
		sched_yield();
	__atomic_store_n(&stb_hook_parked, 2, __ATOMIC_RELEASE);
}

struct stb_bg_trace {
	bthread_t id;
	int timeout_ms;
	int entered, done;
	int rc;
	struct stb_trace_info info;
	struct stb_frame fr[STB_NFRAMES];
};

static void *stb_bg_trace_main(void *arg)
{
	struct stb_bg_trace *bt = arg;
	struct stb_trace_opts o = {.timeout_ms = bt->timeout_ms, .runtime_frames = 1};
	__atomic_store_n(&bt->entered, 1, __ATOMIC_RELEASE);
	bt->rc = stb_trace(bt->id, &o, bt->fr, STB_NFRAMES, &bt->info);
	__atomic_store_n(&bt->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void stb_check_window(unsigned want)
{
	static struct stb_blk b;
	stb_blk_init(&b, STB_K_NAP);
	assert_int_equal(stb_blk_start(&b, NULL), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&b.started, __ATOMIC_ACQUIRE), 5000));

	__atomic_store_n(&stb_hook_id, b.id, __ATOMIC_RELEASE);
	__atomic_store_n(&stb_hook_want, want, __ATOMIC_RELEASE);
	__atomic_store_n(&stb_hook_release, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&stb_hook_parked, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&stb_hook_armed, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&stb_test_switch_hook, stb_hook_park, __ATOMIC_SEQ_CST);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&stb_hook_parked, __ATOMIC_ACQUIRE) == 1, 5000));

	/* (a) Readers see the window: the task and its shared-table entry. */
	assert_int_equal(stb_state_of(b.id), want);
	struct stb_abi_task *pub = stb_table_task((uint32_t)b.id);
	assert_non_null(pub);
	stb_check_published(b.id, pub, want);
	assert_true(__atomic_load_n(&pub->id, __ATOMIC_ACQUIRE) == b.id);

	/* (b) A trace shorter than the window times out, with nothing delivered. */
	struct stb_frame fr[8];
	struct stb_trace_info info;
	struct stb_trace_opts o = {.timeout_ms = 30};
	stb_frames_poison(fr, 8);
	uint64_t t0 = stb_now_ns();
	int rc = stb_trace(b.id, &o, fr, 8, &info);
	double ms = stb_test_ms_since(t0);
	assert_int_equal(rc, -ETIMEDOUT);
	assert_true(ms >= 29.0 && ms < 10000.0);
	assert_int_equal(info.state, want);
	assert_int_equal(info.nframes, 0);
	assert_true(info.error[0] != '\0');
	assert_true(fr[0].ip == STB_SENTINEL_IP);
	assert_int_equal(__atomic_load_n(&stb_hook_parked, __ATOMIC_ACQUIRE), 1);
	/* The lease was given back. */
	assert_true(__atomic_load_n(&pub->trace, __ATOMIC_ACQUIRE) == 0);

	/* (b) A longer trace waits for the window to end, then succeeds. */
	struct stb_bg_trace *bt = calloc(1, sizeof(*bt));
	assert_non_null(bt);
	bt->id = b.id;
	bt->timeout_ms = 10000;
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, stb_bg_trace_main, bt), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&bt->entered, __ATOMIC_ACQUIRE), 5000));
	stb_test_sleep_ms(50);
	assert_int_equal(__atomic_load_n(&bt->done, __ATOMIC_ACQUIRE), 0);
	assert_int_equal(__atomic_load_n(&stb_hook_parked, __ATOMIC_ACQUIRE), 1);
	__atomic_store_n(&stb_hook_release, 1, __ATOMIC_RELEASE);
	assert_int_equal(pthread_join(th, NULL), 0);
	__atomic_store_n(&stb_test_switch_hook, NULL, __ATOMIC_SEQ_CST);
	if (bt->rc <= 0)
		fail_msg("trace after the window: %d (%s)", bt->rc, bt->info.error);
	assert_true(bt->info.mode == STB_TRACE_SIGNAL || bt->info.mode == STB_TRACE_CONTEXT);
	char why[2048];
	if (!stb_frames_check_chain(bt->fr, bt->rc, stb_chain, 3, NULL, 0, false, true, why,
				    sizeof(why)))
		fail_msg("wrong stack after the window: %s", why);
	free(bt);
	stb_blk_finish(&b, -1);
}

static void test_state_about_to_run(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	stb_check_window(STB_TASK_ABOUT_TO_RUN);
	STB_TEST_END();
}

static void test_state_suspending(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	stb_check_window(STB_TASK_SUSPENDING);
	STB_TEST_END();
}

/* ---- the gate: a lease taken directly in the table entry (as the loader does) ---- */

static uint64_t stb_lease(uint64_t deadline_ns)
{
	return STB_ABI_LEASE_ENCODE(deadline_ns, 0x5eedu);
}

static void test_gate_holds_task(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	struct stb_stats s0, s1, s2;
	stb_get_stats(&s0);
	static struct stb_blk b;
	stb_blk_init(&b, STB_K_BUTEX);
	assert_int_equal(stb_blk_start(&b, NULL), 0);
	assert_true(STB_WAIT_UNTIL(stb_state_of(b.id) == STB_TASK_SUSPENDED, 5000));
	struct stb_abi_task *pub = stb_table_task((uint32_t)b.id);
	assert_non_null(pub);

	/* Held: the woken task stays READY at the gate until the lease is returned. */
	uint64_t lease = stb_lease(stb_now_ns() + 10ull * 1000000000ull);
	__u64 z = 0;
	assert_true(__atomic_compare_exchange_n(&pub->trace, &z, lease, false, __ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED));
	uint32_t seq0 = STB_ABI_SEQ(__atomic_load_n(&pub->word, __ATOMIC_ACQUIRE));
	__atomic_store_n(&b.stop, 1, __ATOMIC_RELEASE);
	__atomic_store_n((int *)b.butex, 1, __ATOMIC_RELEASE);
	assert_int_equal(butex_wake_all(b.butex), 1);
	stb_test_sleep_ms(100);
	uint64_t w = __atomic_load_n(&pub->word, __ATOMIC_ACQUIRE);
	assert_int_equal(STB_ABI_STATE(w), STB_TASK_READY);
	assert_int_equal(STB_ABI_SEQ(w), seq0);
	assert_int_equal(stb_state_of(b.id), STB_TASK_READY); /* no worker names it */
	__u64 mine = lease;
	assert_true(__atomic_compare_exchange_n(&pub->trace, &mine, 0, false, __ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED));
	assert_int_equal(bthread_join(b.id, NULL), 0);
	stb_get_stats(&s1);
	/* Counted once it passed (how long depends on when its worker got there). */
	assert_true(s1.gate_waits > s0.gate_waits);
	assert_true(s1.gate_wait_ns > s0.gate_wait_ns);
	assert_true(s1.gate_giveups == s0.gate_giveups);
	butex_destroy(b.butex);

	/* A lease that is never returned is broken at its deadline. */
	stb_blk_init(&b, STB_K_BUTEX);
	assert_int_equal(stb_blk_start(&b, NULL), 0);
	assert_true(STB_WAIT_UNTIL(stb_state_of(b.id) == STB_TASK_SUSPENDED, 5000));
	pub = stb_table_task((uint32_t)b.id);
	uint64_t t0 = stb_now_ns();
	lease = stb_lease(t0 + 150ull * 1000000u);
	z = 0;
	assert_true(__atomic_compare_exchange_n(&pub->trace, &z, lease, false, __ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED));
	__atomic_store_n(&b.stop, 1, __ATOMIC_RELEASE);
	__atomic_store_n((int *)b.butex, 1, __ATOMIC_RELEASE);
	butex_wake_all(b.butex);
	assert_int_equal(bthread_join(b.id, NULL), 0);
	double ms = stb_test_ms_since(t0);
	assert_true(ms >= 140.0);
	assert_true(__atomic_load_n(&pub->trace, __ATOMIC_ACQUIRE) == 0);
	stb_get_stats(&s2);
	assert_int_equal(s2.gate_giveups, s1.gate_giveups + 1);
	butex_destroy(b.butex);
	STB_TEST_END();
}

/* ---- more workers from here on ---- */

static void test_grow_workers(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	assert_int_equal(bthread_setconcurrency(BTHREAD_MIN_CONCURRENCY), 0);
	assert_int_equal(bthread_getconcurrency(), BTHREAD_MIN_CONCURRENCY);
	STB_TEST_END();
}

/* A bthread blocked in one primitive: context mode, the primitive above f3. */
static void stb_check_blocked(enum stb_kind kind, const char *const *prims, int nprims)
{
	static struct stb_blk b;
	stb_blk_init(&b, kind);
	static bthread_mutex_t m;
	int p[2] = {-1, -1};
	if (kind == STB_K_MUTEX) {
		assert_int_equal(bthread_mutex_init(&m, NULL), 0);
		assert_int_equal(bthread_mutex_lock(&m), 0); /* held by this pthread */
		b.mutex = &m;
	}
	if (kind == STB_K_FD) {
		assert_int_equal(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
		b.fd = p[0];
	}
	assert_int_equal(stb_blk_start(&b, NULL), 0);
	assert_true(STB_WAIT_UNTIL(stb_state_of(b.id) == STB_TASK_SUSPENDED, 5000));
	for (int i = 0; i < 3; i++)
		stb_check_trace(b.id, STB_TRACE_CONTEXT, STB_TASK_SUSPENDED, prims, nprims, false);
	if (kind == STB_K_MUTEX)
		assert_int_equal(bthread_mutex_unlock(&m), 0);
	stb_blk_finish(&b, p[1]);
	if (kind == STB_K_MUTEX)
		bthread_mutex_destroy(&m);
	if (p[0] >= 0) {
		close(p[0]);
		close(p[1]);
	}
}

static void test_blocked_butex_wait(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	static const char *const prims[] = {"butex_wait"};
	stb_check_blocked(STB_K_BUTEX, prims, 1);
	STB_TEST_END();
}

static void test_blocked_usleep(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	static const char *const prims[] = {"bthread_usleep"};
	stb_check_blocked(STB_K_USLEEP, prims, 1);
	STB_TEST_END();
}

/*
 * bthread_mutex_lock, bthread_cond_wait and bthread_fd_wait end in a tail
 * call to their timed variant (runtime/core/mutex.c, fd.c), so the frame above
 * the caller is the timed variant: both public names are accepted.
 */
static void test_blocked_mutex_lock(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	static const char *const prims[] = {"bthread_mutex_lock", "bthread_mutex_timedlock"};
	stb_check_blocked(STB_K_MUTEX, prims, 2);
	STB_TEST_END();
}

static void test_blocked_cond_wait(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	static const char *const prims[] = {"bthread_cond_wait", "bthread_cond_timedwait"};
	stb_check_blocked(STB_K_COND, prims, 2);
	STB_TEST_END();
}

static void test_blocked_fd_wait(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	static const char *const prims[] = {"bthread_fd_wait", "bthread_fd_timedwait"};
	stb_check_blocked(STB_K_FD, prims, 2);
	STB_TEST_END();
}

/* More yielders than workers: traced in the queue (context) and running (signal). */
static void test_yield(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	enum { NY = 2 * BTHREAD_MIN_CONCURRENCY };
	static struct stb_blk b[NY];
	for (int i = 0; i < NY; i++) {
		stb_blk_init(&b[i], STB_K_YIELD);
		assert_int_equal(stb_blk_start(&b[i], NULL), 0);
	}
	for (int i = 0; i < NY; i++)
		assert_true(STB_WAIT_UNTIL(__atomic_load_n(&b[i].started, __ATOMIC_ACQUIRE), 5000));
	static const char *const prims[] = {"bthread_yield"};
	unsigned ready = 0, running = 0;
	char why[2048];
	for (int i = 0; i < 5000 && (ready < 20 || running < 5); i++) {
		struct stb_frame fr[STB_NFRAMES];
		struct stb_trace_info info;
		int n = stb_trace(b[i % NY].id, &stb_full, fr, STB_NFRAMES, &info);
		if (n <= 0)
			fail_msg("stb_trace of a yielder = %d (%s)", n, info.error);
		if (info.mode == STB_TRACE_CONTEXT) {
			assert_int_equal(info.state, STB_TASK_READY);
			ready++;
			if (!stb_frames_check_chain(fr, n, stb_chain, 3, prims, 1, false, true, why,
						    sizeof(why)))
				fail_msg("yielder in the queue: %s", why);
		} else {
			assert_int_equal(info.mode, STB_TRACE_SIGNAL);
			assert_int_equal(info.state, STB_TASK_RUNNING);
			running++;
			if (!stb_frames_check_chain(fr, n, stb_chain, 3, NULL, 0, false, true, why,
						    sizeof(why)))
				fail_msg("running yielder: %s", why);
		}
	}
	print_message("yielders traced: %u ready, %u running\n", ready, running);
	assert_true(ready >= 20);
	/* By default, without the runtime's frames: in the queue, bthread_yield
	 * is frame 0; running, the runtime's frames it may be in are hidden. */
	for (int i = 0, seen = 0; seen < 20; i++) {
		assert_true(i < 5000);
		struct stb_frame fr[STB_NFRAMES];
		struct stb_trace_info info;
		int n = stb_trace(b[i % NY].id, NULL, fr, STB_NFRAMES, &info);
		if (n <= 0)
			fail_msg("stb_trace of a yielder = %d (%s)", n, info.error);
		bool queued = info.mode == STB_TRACE_CONTEXT;
		seen += queued;
		if (!stb_check_view(fr, n, stb_chain, prims, queued ? 1 : 0, false, why, sizeof(why)))
			fail_msg("yielder (%s): %s", queued ? "ready" : "running", why);
	}
	char text[8192];
	assert_true(bthread_stack_trace(b[0].id, text, sizeof(text)) > 0);
	if (stb_text_check(text, NULL, 0, why, sizeof(why)) < 3)
		fail_msg("text: %s\n%s", why, text);
	for (int i = 0; i < NY; i++)
		stb_blk_finish(&b[i], -1);
	STB_TEST_END();
}

/* A running bthread: signal mode, the interrupted leaf (f3) is frame 0. */
static void test_running_spin(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	static struct stb_blk b;
	stb_blk_init(&b, STB_K_SPIN);
	assert_int_equal(stb_blk_start(&b, NULL), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&b.started, __ATOMIC_ACQUIRE), 5000));
	for (int i = 0; i < 20; i++) {
		stb_check_trace(b.id, STB_TRACE_SIGNAL, STB_TASK_RUNNING, NULL, 0, true);
		struct stb_frame fr[STB_NFRAMES];
		struct stb_trace_info info;
		int n = stb_trace(b.id, &stb_full, fr, STB_NFRAMES, &info);
		/* Exactly: f3 (exact ip), f2, f1, stb_task_entry, stb_ctx_trampoline. */
		assert_int_equal(n, 5);
		assert_true(fr[0].offset > 0);
		/* By default: f3, f2, f1. */
		n = stb_trace(b.id, NULL, fr, STB_NFRAMES, &info);
		assert_int_equal(n, 3);
		assert_true(fr[0].offset > 0);
		assert_int_equal(info.tid, b.tid);
		assert_true(info.held_ns > 0 && info.held_ns < 1000000000ull);
	}
	stb_blk_finish(&b, -1);
	STB_TEST_END();
}

/* ---- registered pthreads ---- */

enum stb_pth_kind { STB_P_SPIN, STB_P_READ };

struct stb_pth {
	enum stb_pth_kind kind;
	int block_signal;
	int fd;
	int stop, started;
	bthread_t id, id2;
	uint32_t tid;
};

STB_NOIPA static void stb_pth_f3(struct stb_pth *p)
{
	__atomic_store_n(&p->started, 1, __ATOMIC_RELEASE);
	if (p->kind == STB_P_SPIN) {
		while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
			__asm__ volatile("pause");
	} else {
		char c;
		ssize_t r = read(p->fd, &c, 1);
		(void)r;
		STB_NO_TAIL();
	}
	STB_NO_TAIL();
}

STB_NOIPA static void stb_pth_f2(struct stb_pth *p)
{
	stb_pth_f3(p);
	STB_NO_TAIL();
}

STB_NOIPA static void stb_pth_f1(struct stb_pth *p)
{
	stb_pth_f2(p);
	STB_NO_TAIL();
}

static void *stb_pth_main(void *arg)
{
	struct stb_pth *p = arg;
	p->tid = (uint32_t)syscall(SYS_gettid);
	if (p->block_signal) {
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, SIGRTMAX - 3);
		pthread_sigmask(SIG_BLOCK, &set, NULL);
	}
	p->id = bthread_init_for_pthread_stack_trace();
	p->id2 = bthread_init_for_pthread_stack_trace();
	stb_pth_f1(p);
	if (p->block_signal) {
		/* The late capture request is still pending: let it in. */
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, SIGRTMAX - 3);
		pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	}
	return NULL;
}

static void stb_pth_start(struct stb_pth *p, pthread_t *th)
{
	assert_int_equal(pthread_create(th, NULL, stb_pth_main, p), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&p->started, __ATOMIC_ACQUIRE), 5000));
	assert_true(p->id != 0);
	assert_true(p->id == p->id2);
}

static void stb_check_pthread_trace(struct stb_pth *p, bool at_leaf)
{
	struct stb_frame fr[STB_NFRAMES];
	struct stb_trace_info info;
	char why[2048];
	int n = stb_trace(p->id, NULL, fr, STB_NFRAMES, &info);
	if (n <= 0)
		fail_msg("trace of a registered pthread = %d (%s)", n, info.error);
	/* Blocked in read(2), which a signal does not cut short (SA_RESTART):
	 * the handler's registers, exact. */
	assert_int_equal(info.mode, STB_TRACE_SIGNAL);
	assert_int_equal(info.state, STB_TASK_RUNNING);
	assert_int_equal(info.is_pthread, 1);
	assert_int_equal(info.tid, p->tid);
	if (!stb_frames_check_chain(fr, n, stb_pth_chain, 3, NULL, 0, at_leaf, false, why,
				    sizeof(why)))
		fail_msg("registered pthread: %s", why);
	int i1 = stb_frames_find(fr, n, "stb_pth_f1", 0);
	assert_true(i1 + 1 < n && stb_sym_is(fr[i1 + 1].symbol, "stb_pth_main"));
	char text[8192];
	int len = bthread_stack_trace(p->id, text, sizeof(text));
	assert_true(len > 0);
	if (stb_text_check(text, NULL, 0, why, sizeof(why)) < 4)
		fail_msg("text: %s\n%s", why, text);
	assert_non_null(strstr(text, " stb_pth_f2+0x"));
}

/* The timeout set before the runtime started survived its start. */
static void test_timeout_set_before_start(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	static struct stb_pth p;
	p = (struct stb_pth){.kind = STB_P_SPIN, .block_signal = 1, .fd = -1};
	pthread_t th;
	stb_pth_start(&p, &th);
	struct stb_trace_info info;
	uint64_t t0 = stb_now_ns();
	int rc = stb_trace(p.id, NULL, NULL, 0, &info);
	double ms = stb_test_ms_since(t0);
	__atomic_store_n(&p.stop, 1, __ATOMIC_RELEASE);
	/* The rest runs with a timeout that a loaded machine cannot exceed. */
	assert_int_equal(stb_set_signal_trace_timeout_ms(STB_GENEROUS_MS), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(rc, -ETIMEDOUT);
	if (ms < STB_BEFORE_START_MS - 1)
		fail_msg("default timeout: %.1f ms, want the %d ms set before start", ms,
			 STB_BEFORE_START_MS);
	STB_TEST_END();
}

static void test_pthread_running(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	static struct stb_pth p;
	p = (struct stb_pth){.kind = STB_P_SPIN, .fd = -1};
	pthread_t th;
	stb_pth_start(&p, &th);
	for (int i = 0; i < 10; i++)
		stb_check_pthread_trace(&p, true);
	/* Still the same id from the thread's point of view. */
	__atomic_store_n(&p.stop, 1, __ATOMIC_RELEASE);
	assert_int_equal(pthread_join(th, NULL), 0);
	struct stb_trace_info info;
	assert_int_equal(stb_trace(p.id, NULL, NULL, 0, &info), -ESRCH);
	assert_true(info.error[0] != '\0');
	char text[64];
	assert_int_equal(bthread_stack_trace(p.id, text, sizeof(text)), -ESRCH);
	STB_TEST_END();
}

static void test_pthread_blocked(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	int fds[2];
	assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
	static struct stb_pth p;
	p = (struct stb_pth){.kind = STB_P_READ, .fd = fds[0]};
	pthread_t th;
	stb_pth_start(&p, &th);
	/* Wait until the thread sleeps in read() (the leaf is in libc then). */
	bool in_read = false;
	for (int i = 0; i < 500 && !in_read; i++) {
		struct stb_frame fr[STB_NFRAMES];
		int n = stb_trace(p.id, NULL, fr, STB_NFRAMES, NULL);
		assert_true(n > 0);
		in_read = fr[0].module && !stb_sym_is(fr[0].symbol, "stb_pth_f3") &&
			  stb_frames_find(fr, n, "stb_pth_f3", 1) > 0;
		if (!in_read)
			stb_test_sleep_ms(2);
	}
	assert_true(in_read);
	for (int i = 0; i < 10; i++)
		stb_check_pthread_trace(&p, false);
	/* The thread registers itself again: the same id. */
	bthread_t id = p.id;
	char c = 'x';
	assert_int_equal(write(fds[1], &c, 1), 1);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(stb_trace(id, NULL, NULL, 0, NULL), -ESRCH);
	close(fds[0]);
	close(fds[1]);
	STB_TEST_END();
}

static void *stb_register_in_bthread(void *arg)
{
	int *err = arg;
	errno = 0;
	bthread_t id = bthread_init_for_pthread_stack_trace();
	*err = id == 0 ? errno : -1;
	return NULL;
}

static void test_pthread_register_errors(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	int err = 0;
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_register_in_bthread, &err), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(err, EINVAL);
	STB_TEST_END();
}

/* ---- self traces ---- */

struct stb_self {
	int n;
	struct stb_trace_info info;
	struct stb_frame fr[STB_NFRAMES];
	char text[8192];
	int len;
};

STB_NOIPA static void stb_self_f3(struct stb_self *s)
{
	s->n = stb_trace(bthread_self() ? bthread_self() : bthread_init_for_pthread_stack_trace(),
			 NULL, s->fr, STB_NFRAMES, &s->info);
	STB_NO_TAIL();
	s->len = bthread_stack_trace(bthread_self() ? bthread_self()
						    : bthread_init_for_pthread_stack_trace(),
				     s->text, sizeof(s->text));
	STB_NO_TAIL();
}

STB_NOIPA static void stb_self_f2(struct stb_self *s)
{
	stb_self_f3(s);
	STB_NO_TAIL();
}

STB_NOIPA static void *stb_self_f1(void *arg)
{
	stb_self_f2(arg);
	STB_NO_TAIL();
	return NULL;
}

static const char *const stb_self_chain[] = {"stb_self_f3", "stb_self_f2", "stb_self_f1"};

static void stb_check_self(struct stb_self *s, bool bthread)
{
	char why[2048];
	if (s->n <= 0)
		fail_msg("self trace = %d (%s)", s->n, s->info.error);
	assert_int_equal(s->info.mode, STB_TRACE_SELF);
	assert_int_equal(s->info.state, STB_TASK_RUNNING);
	/* A bthread's bottom frames are the runtime's: hidden. */
	if (bthread ? !stb_check_view(s->fr, s->n, stb_self_chain, NULL, 0, true, why, sizeof(why))
		    : !stb_frames_check_chain(s->fr, s->n, stb_self_chain, 3, NULL, 0, true, false, why,
					      sizeof(why)))
		fail_msg("self trace: %s", why);
	assert_true(s->len > 0);
	if (stb_text_check(s->text, NULL, 0, why, sizeof(why)) < 3)
		fail_msg("self text: %s\n%s", why, s->text);
	/* The first line is the caller of bthread_stack_trace. */
	const char *hit = strstr(s->text, " stb_self_f3+0x");
	assert_true(strncmp(s->text, "#0 0x", 5) == 0);
	assert_true(hit != NULL && hit < strchr(s->text, '\n'));
}

static void *stb_self_pthread(void *arg)
{
	return stb_self_f1(arg);
}

static void test_self_trace(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	struct stb_self *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_self_f1, s), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	stb_check_self(s, true);
	memset(s, 0, sizeof(*s));
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, stb_self_pthread, s), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	stb_check_self(s, false);
	assert_int_equal(s->info.is_pthread, 1);
	free(s);
	STB_TEST_END();
}

/* ---- depth, skip, callback ---- */

#define STB_REC_DEPTH 64

static void *stb_rec_butex;

STB_NOIPA static int stb_rec(int n)
{
	if (n > 0) {
		int r = stb_rec(n - 1);
		STB_NO_TAIL();
		return r + 1;
	}
	while (__atomic_load_n((int *)stb_rec_butex, __ATOMIC_ACQUIRE) == 0)
		butex_wait(stb_rec_butex, 0, NULL);
	return 0;
}

static void *stb_rec_main(void *arg)
{
	(void)arg;
	stb_rec(STB_REC_DEPTH - 1);
	STB_NO_TAIL();
	return NULL;
}

struct stb_cb {
	unsigned calls, stop_after;
	uint64_t ips[STB_NFRAMES];
};

static int stb_cb_frame(const struct stb_frame *f, void *arg)
{
	struct stb_cb *c = arg;
	if (c->calls < STB_NFRAMES)
		c->ips[c->calls] = f->ip;
	c->calls++;
	return c->stop_after && c->calls >= c->stop_after;
}

static void test_depth_skip_callback(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	stb_rec_butex = butex_create();
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_rec_main, NULL), 0);
	assert_true(STB_WAIT_UNTIL(stb_state_of(t) == STB_TASK_SUSPENDED, 5000));

	static struct stb_frame full[STB_NFRAMES + 1], fr[STB_NFRAMES + 1];
	struct stb_trace_info info;
	struct stb_trace_opts o = {.max_depth = STB_NFRAMES, .runtime_frames = 1};
	int n = stb_trace(t, &o, full, STB_NFRAMES, &info);
	/* 64 recursion frames, stb_rec_main, the bottom two, the primitive and the runtime. */
	assert_true(n > STB_REC_DEPTH + 4 && n < STB_NFRAMES);
	assert_int_equal(info.truncated, 0);
	int nrec = 0;
	for (int i = 0; i < n; i++)
		nrec += stb_sym_is(full[i].symbol, "stb_rec");
	assert_int_equal(nrec, STB_REC_DEPTH);
	assert_true(stb_sym_is(full[n - 1].symbol, "stb_ctx_trampoline"));
	assert_true(stb_sym_is(full[n - 3].symbol, "stb_rec_main"));

	/* Default depth: 64 frames, truncated: butex_wait and 63 of the
	 * recursion (the runtime's frames hidden, and not counted). */
	stb_frames_poison(fr, STB_NFRAMES + 1);
	assert_int_equal(stb_trace(t, NULL, fr, STB_NFRAMES, &info), 64);
	assert_int_equal(info.truncated, 1);
	assert_int_equal(info.nframes, 64);
	assert_true(fr[64].ip == STB_SENTINEL_IP);
	assert_true(stb_sym_is(fr[0].symbol, "butex_wait"));
	for (int i = 1; i < 64; i++)
		assert_true(stb_sym_is(fr[i].symbol, "stb_rec"));
	/* ... and so for any depth, the frames of the full walk from butex_wait on. */
	int api = stb_frames_find(full, n, "butex_wait", 0);
	assert_true(api > 0);
	struct stb_cb dcb = {.stop_after = 0};
	struct stb_trace_opts dv = {.max_depth = 2, .on_frame = stb_cb_frame, .arg = &dcb};
	stb_frames_poison(fr, STB_NFRAMES + 1);
	assert_int_equal(stb_trace(t, &dv, fr, STB_NFRAMES, &info), 2);
	assert_int_equal(info.truncated, 1);
	assert_int_equal(dcb.calls, 2);
	assert_true(fr[0].ip == full[api].ip && fr[1].ip == full[api + 1].ip);
	assert_true(dcb.ips[0] == full[api].ip && dcb.ips[1] == full[api + 1].ip);
	assert_true(fr[2].ip == STB_SENTINEL_IP);
	dv = (struct stb_trace_opts){.max_depth = STB_NFRAMES, .no_symbols = 1};
	assert_int_equal(stb_trace(t, &dv, fr, STB_NFRAMES, &info), n - api - 2);
	for (int i = 0; i < n - api - 2; i++) {
		assert_true(fr[i].ip == full[api + i].ip);
		assert_null(fr[i].symbol);
	}

	/* max_depth 4: exactly the 4 innermost. */
	stb_frames_poison(fr, STB_NFRAMES + 1);
	o.max_depth = 4;
	assert_int_equal(stb_trace(t, &o, fr, STB_NFRAMES, &info), 4);
	assert_int_equal(info.truncated, 1);
	assert_int_equal(info.nframes, 4);
	assert_true(fr[4].ip == STB_SENTINEL_IP);
	for (int i = 0; i < 4; i++)
		assert_true(fr[i].ip == full[i].ip);

	/* skip 2 drops the 2 innermost. */
	stb_frames_poison(fr, STB_NFRAMES + 1);
	o.max_depth = STB_NFRAMES;
	o.skip = 2;
	assert_int_equal(stb_trace(t, &o, fr, STB_NFRAMES, &info), n - 2);
	assert_int_equal(info.truncated, 0);
	for (int i = 0; i < n - 2; i++) {
		assert_true(fr[i].ip == full[i + 2].ip);
		assert_true(stb_sym_is(fr[i].symbol, full[i + 2].symbol));
	}
	/* skip 2 and depth 4 together. */
	o.max_depth = 4;
	assert_int_equal(stb_trace(t, &o, fr, STB_NFRAMES, &info), 4);
	assert_int_equal(info.truncated, 1);
	for (int i = 0; i < 4; i++)
		assert_true(fr[i].ip == full[i + 2].ip);

	/* A callback that says stop after 3 frames. */
	struct stb_cb cb = {.stop_after = 3};
	stb_frames_poison(fr, STB_NFRAMES + 1);
	struct stb_trace_opts oc = {.max_depth = STB_NFRAMES, .on_frame = stb_cb_frame, .arg = &cb,
				    .runtime_frames = 1};
	assert_int_equal(stb_trace(t, &oc, fr, STB_NFRAMES, &info), 3);
	assert_int_equal(cb.calls, 3);
	assert_int_equal(info.nframes, 3);
	assert_int_equal(info.truncated, 1);
	assert_true(fr[3].ip == STB_SENTINEL_IP);
	for (int i = 0; i < 3; i++)
		assert_true(cb.ips[i] == full[i].ip && fr[i].ip == full[i].ip);
	/* A callback that never stops sees every frame, even without an array. */
	memset(&cb, 0, sizeof(cb));
	assert_int_equal(stb_trace(t, &oc, NULL, 0, &info), n);
	assert_int_equal(cb.calls, (unsigned)n);
	assert_int_equal(info.truncated, 0);
	for (int i = 0; i < n; i++)
		assert_true(cb.ips[i] == full[i].ip);
	/* no_symbols: same addresses, no names. */
	struct stb_trace_opts on = {.max_depth = STB_NFRAMES, .no_symbols = 1, .runtime_frames = 1};
	assert_int_equal(stb_trace(t, &on, fr, STB_NFRAMES, &info), n);
	for (int i = 0; i < n; i++) {
		assert_true(fr[i].ip == full[i].ip);
		assert_null(fr[i].symbol);
	}
	/* A frames array shorter than the stack is not overrun. */
	stb_frames_poison(fr, STB_NFRAMES + 1);
	assert_int_equal(stb_trace(t, &o, fr, 2, &info) >= 2, 1);
	assert_true(fr[2].ip == STB_SENTINEL_IP);

	__atomic_store_n((int *)stb_rec_butex, 1, __ATOMIC_RELEASE);
	butex_wake_all(stb_rec_butex);
	assert_int_equal(bthread_join(t, NULL), 0);
	butex_destroy(stb_rec_butex);
	STB_TEST_END();
}

/* ---- inline frames against the depth limit ---- */

static void *stb_inl_butex;

STB_NOIPA static void stb_inl_leaf(void)
{
	while (__atomic_load_n((int *)stb_inl_butex, __ATOMIC_ACQUIRE) == 0)
		butex_wait(stb_inl_butex, 0, NULL);
	STB_NO_TAIL();
}

static inline __attribute__((always_inline)) void stb_inl_mid(void)
{
	stb_inl_leaf();
	STB_NO_TAIL();
}

STB_NOIPA static void *stb_inl_main(void *arg)
{
	(void)arg;
	stb_inl_mid(); /* an inlined call: two logical frames at one address */
	STB_NO_TAIL();
	return NULL;
}

/*
 * With inline frames, the depth limit counts logical frames: never more than
 * max_depth delivered, never one written past nframes, whatever the depth
 * (a physical frame that expands to two must not overshoot the limit).
 */
static void test_inline_depth(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	stb_inl_butex = butex_create();
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_inl_main, NULL), 0);
	assert_true(STB_WAIT_UNTIL(stb_state_of(t) == STB_TASK_SUSPENDED, 5000));
	static struct stb_frame full[STB_NFRAMES + 1], fr[STB_NFRAMES + 1];
	struct stb_trace_info info;
	struct stb_trace_opts o = {.max_depth = STB_NFRAMES, .inline_frames = 1, .runtime_frames = 1};
	int n = stb_trace(t, &o, full, STB_NFRAMES, &info);
	assert_true(n > 4 && n < STB_NFRAMES);
	int inl = -1;
	for (int i = 0; i < n; i++)
		if ((full[i].flags & STB_FRAME_F_INLINED) && stb_sym_is(full[i].symbol, "stb_inl_mid"))
			inl = i;
	if (inl < 0)
		fail_msg("no inline frame stb_inl_mid in the stack (no debug info?)");
	assert_true(stb_sym_is(full[inl + 1].symbol, "stb_inl_main"));
	for (unsigned d = 1; d <= (unsigned)n + 1; d++) {
		stb_frames_poison(fr, STB_NFRAMES + 1);
		o.max_depth = d;
		int k = stb_trace(t, &o, fr, d, &info);
		unsigned want = d < (unsigned)n ? d : (unsigned)n;
		if (k != (int)want || info.nframes != want || fr[d].ip != STB_SENTINEL_IP)
			fail_msg("max_depth %u: %d frames (%u), frame %u %s", d, k, info.nframes, d,
				 fr[d].ip == STB_SENTINEL_IP ? "untouched" : "written");
		assert_int_equal(info.truncated, d < (unsigned)n);
		for (unsigned i = 0; i < want; i++)
			assert_true(fr[i].ip == full[i].ip && fr[i].flags == full[i].flags);
	}
	/* By default the program's inline frame stays, the runtime's frames go
	 * (those inlined into butex_wait too): exactly 4 frames. */
	struct stb_trace_opts od = {.max_depth = STB_NFRAMES, .inline_frames = 1};
	int dn = stb_trace(t, &od, fr, STB_NFRAMES, &info);
	char why[1024] = "";
	stb_frames_describe(fr, dn > 0 ? dn : 0, why, sizeof(why));
	if (dn != 4 || !stb_sym_is(fr[0].symbol, "butex_wait") || fr[0].flags & STB_FRAME_F_INLINED ||
	    !stb_sym_is(fr[1].symbol, "stb_inl_leaf") || !stb_sym_is(fr[2].symbol, "stb_inl_mid") ||
	    !(fr[2].flags & STB_FRAME_F_INLINED) || !stb_sym_is(fr[3].symbol, "stb_inl_main"))
		fail_msg("default view with inline frames: %d frames%s", dn, why);
	__atomic_store_n((int *)stb_inl_butex, 1, __ATOMIC_RELEASE);
	butex_wake_all(stb_inl_butex);
	assert_int_equal(bthread_join(t, NULL), 0);
	butex_destroy(stb_inl_butex);
	STB_TEST_END();
}

/* ---- text buffer edge cases and argument errors ---- */

static void test_text_buffers_and_errors(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	static struct stb_blk b;
	stb_blk_init(&b, STB_K_BUTEX);
	assert_int_equal(stb_blk_start(&b, NULL), 0);
	assert_true(STB_WAIT_UNTIL(stb_state_of(b.id) == STB_TASK_SUSPENDED, 5000));
	char full[8192], small[17];
	int len = bthread_stack_trace(b.id, full, sizeof(full));
	assert_true(len > 40 && (size_t)len == strlen(full));
	/* Cut like snprintf: full length returned, NUL-terminated prefix. */
	memset(small, 'Z', sizeof(small));
	assert_int_equal(bthread_stack_trace(b.id, small, 16), len);
	assert_int_equal(strlen(small), 15);
	assert_memory_equal(small, full, 15);
	assert_int_equal(small[16], 'Z');
	/* Every size, each line formatted in place or cut: the same prefix, and
	 * nothing written past the NUL. */
	static char cut[8192];
	for (int size = 1; size <= len + 200 && size <= (int)sizeof(cut); size++) {
		memset(cut, 'Z', sizeof(cut));
		assert_int_equal(bthread_stack_trace(b.id, cut, (size_t)size), len);
		int k = len < size ? len : size - 1;
		assert_memory_equal(cut, full, (size_t)k);
		assert_int_equal(cut[k], '\0');
		for (int i = k + 1; i < (int)sizeof(cut); i++)
			if (cut[i] != 'Z')
				fail_msg("size %d: byte %d written past the NUL", size, i);
	}
	assert_int_equal(bthread_stack_trace(b.id, NULL, 0), len);
	assert_int_equal(bthread_stack_trace(b.id, NULL, 10), -EINVAL);
	stb_blk_finish(&b, -1);
	STB_TEST_END();
}

/* ---- the trace signal blocked in the target thread ---- */

static void test_signal_blocked(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	struct stb_stats s0, s1;
	stb_get_stats(&s0);
	static struct stb_pth p;
	p = (struct stb_pth){.kind = STB_P_SPIN, .block_signal = 1, .fd = -1};
	pthread_t th;
	stb_pth_start(&p, &th);
	struct stb_frame fr[8];
	struct stb_trace_info info;
	assert_int_equal(stb_set_signal_trace_timeout_ms(50), 0);
	stb_frames_poison(fr, 8);
	uint64_t t0 = stb_now_ns();
	int rc = stb_trace(p.id, NULL, fr, 8, &info);
	double ms = stb_test_ms_since(t0);
	assert_int_equal(rc, -ETIMEDOUT);
	assert_true(ms >= 49.0 && ms < 5000.0);
	if (!strstr(info.error, "blocked"))
		fail_msg("info.error does not say the signal is blocked: \"%s\"", info.error);
	assert_true(fr[0].ip == STB_SENTINEL_IP);
	/* A per-call timeout wins over the default. */
	assert_int_equal(stb_set_signal_trace_timeout_ms(20000), 0);
	struct stb_trace_opts o = {.timeout_ms = 10};
	t0 = stb_now_ns();
	rc = stb_trace(p.id, &o, fr, 8, &info);
	ms = stb_test_ms_since(t0);
	assert_int_equal(rc, -ETIMEDOUT);
	assert_true(ms >= 9.0 && ms < 10000.0);
	assert_int_equal(stb_set_signal_trace_timeout_ms(50), 0);
	char text[256];
	assert_int_equal(bthread_stack_trace(p.id, text, sizeof(text)), -ETIMEDOUT);
	stb_get_stats(&s1);
	assert_true(s1.signal_timeouts >= s0.signal_timeouts + 3);
	assert_int_equal(stb_set_signal_trace_timeout_ms(STB_GENEROUS_MS), 0);
	/* Other tasks are still traced meanwhile. */
	static struct stb_blk b;
	stb_blk_init(&b, STB_K_SPIN);
	assert_int_equal(stb_blk_start(&b, NULL), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&b.started, __ATOMIC_ACQUIRE), 5000));
	stb_check_trace(b.id, STB_TRACE_SIGNAL, STB_TASK_RUNNING, NULL, 0, true);
	stb_blk_finish(&b, -1);
	/* The thread unblocks the signal (the stale requests arrive and are ignored). */
	__atomic_store_n(&p.stop, 1, __ATOMIC_RELEASE);
	assert_int_equal(pthread_join(th, NULL), 0);
	STB_TEST_END();
}

/*
 * A capture request that gets no reply in time, as when its thread gets no
 * CPU on a busy machine (the test hook leaves it unsent), is asked once more:
 * the trace succeeds after the first timeout. Unanswered twice, the error
 * says what is known -- no reply within the timeout, the signal neither
 * blocked nor ignored there, how to raise it -- never that it is blocked.
 */
static void test_signal_late(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	static struct stb_blk b;
	stb_blk_init(&b, STB_K_SPIN);
	assert_int_equal(stb_blk_start(&b, NULL), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&b.started, __ATOMIC_ACQUIRE), 5000));
	assert_int_equal(stb_set_signal_trace_timeout_ms(300), 0);
	struct stb_stats s0, s1;
	stb_get_stats(&s0);
	__atomic_store_n(&stb_test_unanswered_signals, 1, __ATOMIC_RELEASE);
	struct stb_frame fr[STB_NFRAMES];
	struct stb_trace_info info;
	uint64_t t0 = stb_now_ns();
	int n = stb_trace(b.id, NULL, fr, STB_NFRAMES, &info);
	double ms = stb_test_ms_since(t0);
	if (n != 3)
		fail_msg("a late handler: stb_trace = %d (%s)", n, info.error);
	assert_int_equal(info.mode, STB_TRACE_SIGNAL);
	assert_true(ms >= 299.0); /* the first request timed out */
	stb_get_stats(&s1);
	assert_int_equal(s1.signal_timeouts, s0.signal_timeouts + 1);
	assert_int_equal(__atomic_load_n(&stb_test_unanswered_signals, __ATOMIC_ACQUIRE), 0);

	/* Unanswered twice: -ETIMEDOUT, and why. */
	__atomic_store_n(&stb_test_unanswered_signals, 2, __ATOMIC_RELEASE);
	t0 = stb_now_ns();
	n = stb_trace(b.id, NULL, fr, STB_NFRAMES, &info);
	ms = stb_test_ms_since(t0);
	assert_int_equal(n, -ETIMEDOUT);
	assert_true(ms >= 599.0); /* asked twice */
	if (!strstr(info.error, "no reply") || !strstr(info.error, " in 300 ms, asked twice") ||
	    !strstr(info.error, "not blocked or ignored") ||
	    !strstr(info.error, "STB_SIGNAL_TRACE_TIMEOUT_MS raises it") ||
	    strstr(info.error, "is blocked") || strstr(info.error, "blocked or ignored?"))
		fail_msg("the error of a handler late twice: \"%s\"", info.error);
	assert_true(ms < 10000.0);
	stb_get_stats(&s0);
	assert_int_equal(s0.signal_timeouts, s1.signal_timeouts + 2);
	assert_int_equal(__atomic_load_n(&stb_test_unanswered_signals, __ATOMIC_ACQUIRE), 0);
	stb_check_trace(b.id, STB_TRACE_SIGNAL, STB_TASK_RUNNING, NULL, 0, true);
	assert_int_equal(stb_set_signal_trace_timeout_ms(STB_GENEROUS_MS), 0);
	stb_blk_finish(&b, -1);
	STB_TEST_END();
}

static void test_stats(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	struct stb_stats s0, s1;
	assert_int_equal(stb_get_stats(&s0), 0);
	static struct stb_blk bb, bs;
	stb_blk_init(&bb, STB_K_BUTEX);
	stb_blk_init(&bs, STB_K_SPIN);
	assert_int_equal(stb_blk_start(&bb, NULL), 0);
	assert_int_equal(stb_blk_start(&bs, NULL), 0);
	assert_true(STB_WAIT_UNTIL(stb_state_of(bb.id) == STB_TASK_SUSPENDED, 5000));
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&bs.started, __ATOMIC_ACQUIRE), 5000));
	for (int i = 0; i < 10; i++) {
		assert_true(stb_trace(bb.id, NULL, NULL, 0, NULL) > 0);
		assert_true(stb_trace(bs.id, NULL, NULL, 0, NULL) > 0);
	}
	assert_int_equal(stb_get_stats(&s1), 0);
	assert_true(s1.traces >= s0.traces + 20);
	assert_true(s1.signal_captures >= s0.signal_captures + 10);
	assert_int_equal(s1.untraceable, 0);
	stb_blk_finish(&bs, -1);
	stb_blk_finish(&bb, -1);
	STB_TEST_END();
}

/* ---- the application replaces the trace signal's handler (last test) ---- */

static int stb_app_signals;

static void stb_app_handler(int sig)
{
	(void)sig;
	__atomic_fetch_add(&stb_app_signals, 1, __ATOMIC_RELAXED);
}

static void test_handler_replaced(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	static struct stb_blk bs, bb;
	stb_blk_init(&bs, STB_K_SPIN);
	stb_blk_init(&bb, STB_K_BUTEX);
	assert_int_equal(stb_blk_start(&bs, NULL), 0);
	assert_int_equal(stb_blk_start(&bb, NULL), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&bs.started, __ATOMIC_ACQUIRE), 5000));
	assert_true(STB_WAIT_UNTIL(stb_state_of(bb.id) == STB_TASK_SUSPENDED, 5000));
	/* Works before; the handler is installed by now, so the signal is fixed. */
	assert_true(stb_trace(bs.id, NULL, NULL, 0, NULL) > 0);
	assert_int_equal(stb_set_trace_signal(SIGRTMAX - 4), -EBUSY);
	assert_int_equal(stb_set_signal_trace_timeout_ms(20000), 0);

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = stb_app_handler;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGRTMAX - 3, &sa, NULL), 0);

	static struct stb_pth p;
	p = (struct stb_pth){.kind = STB_P_SPIN, .fd = -1};
	pthread_t th;
	stb_pth_start(&p, &th);
	struct stb_frame fr[8];
	struct stb_trace_info info;
	bthread_t running[] = {bs.id, p.id};
	for (size_t i = 0; i < 2; i++) {
		stb_frames_poison(fr, 8);
		uint64_t t0 = stb_now_ns();
		assert_int_equal(stb_trace(running[i], NULL, fr, 8, &info), -EPERM);
		/* At once, not after the (20 s) timeout. */
		assert_true(stb_test_ms_since(t0) < 10000.0);
		if (!strstr(info.error, "replaced"))
			fail_msg("info.error does not say the handler was replaced: \"%s\"",
				 info.error);
		assert_true(fr[0].ip == STB_SENTINEL_IP);
		char text[64];
		assert_int_equal(bthread_stack_trace(running[i], text, sizeof(text)), -EPERM);
	}
	/* No signal reached the application's handler; suspended tasks still trace. */
	assert_int_equal(__atomic_load_n(&stb_app_signals, __ATOMIC_RELAXED), 0);
	static const char *const prims[] = {"butex_wait"};
	stb_check_trace(bb.id, STB_TRACE_CONTEXT, STB_TASK_SUSPENDED, prims, 1, false);
	/* The program runs on. */
	__atomic_store_n(&p.stop, 1, __ATOMIC_RELEASE);
	assert_int_equal(pthread_join(th, NULL), 0);
	stb_blk_finish(&bs, -1);
	stb_blk_finish(&bb, -1);
	STB_TEST_END();
}

/* Setup of the tests after test_timeout_set_before_start: whatever an earlier
 * (failed) test left, traces get a timeout that load cannot exceed. */
static int stb_generous_timeout(void **state)
{
	(void)state;
	return stb_set_signal_trace_timeout_ms(STB_GENEROUS_MS);
}

int main(void)
{
	/* Before the first bthread call: the state tests need one busy worker
	 * (below BTHREAD_MIN_CONCURRENCY only through the expert override). */
	setenv("STB_CONCURRENCY", "1", 1);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config),
		cmocka_unit_test(test_timeout_set_before_start),
		cmocka_unit_test_setup(test_state_created, stb_generous_timeout),
		cmocka_unit_test_setup(test_states_one_worker, stb_generous_timeout),
		cmocka_unit_test_setup(test_state_about_to_run, stb_generous_timeout),
		cmocka_unit_test_setup(test_state_suspending, stb_generous_timeout),
		cmocka_unit_test_setup(test_gate_holds_task, stb_generous_timeout),
		/* From here on: two workers. */
		cmocka_unit_test_setup(test_grow_workers, stb_generous_timeout),
		cmocka_unit_test_setup(test_blocked_butex_wait, stb_generous_timeout),
		cmocka_unit_test_setup(test_blocked_usleep, stb_generous_timeout),
		cmocka_unit_test_setup(test_blocked_mutex_lock, stb_generous_timeout),
		cmocka_unit_test_setup(test_blocked_cond_wait, stb_generous_timeout),
		cmocka_unit_test_setup(test_blocked_fd_wait, stb_generous_timeout),
		cmocka_unit_test_setup(test_yield, stb_generous_timeout),
		cmocka_unit_test_setup(test_running_spin, stb_generous_timeout),
		cmocka_unit_test_setup(test_pthread_running, stb_generous_timeout),
		cmocka_unit_test_setup(test_pthread_blocked, stb_generous_timeout),
		cmocka_unit_test_setup(test_pthread_register_errors, stb_generous_timeout),
		cmocka_unit_test_setup(test_self_trace, stb_generous_timeout),
		cmocka_unit_test_setup(test_depth_skip_callback, stb_generous_timeout),
		cmocka_unit_test_setup(test_inline_depth, stb_generous_timeout),
		cmocka_unit_test_setup(test_text_buffers_and_errors, stb_generous_timeout),
		cmocka_unit_test_setup(test_signal_blocked, stb_generous_timeout),
		cmocka_unit_test_setup(test_signal_late, stb_generous_timeout),
		cmocka_unit_test_setup(test_stats, stb_generous_timeout),
		/* Last: the trace signal's handler cannot be re-installed. */
		cmocka_unit_test_setup(test_handler_replaced, stb_generous_timeout),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
