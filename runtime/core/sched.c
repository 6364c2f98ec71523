/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Workers and scheduling: one scheduler per worker pthread with a lock-free
 * work-stealing run queue, a bounded remote queue for tasks made ready by other
 * threads, a parking lot that wakes one idle worker at a time, and
 * stb_jump_stack(), the single function that switches stacks. Also the public
 * bthread start/join/yield/exit/stop calls.
 */
#include <sched.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if defined(STB_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(STB_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

/* ---- run queues ---- */

#define STB_RQ_CAP 4096u
#define STB_REMOTE_CAP 1024u

/*
 * The worker's own queue: only its worker pushes (at bottom); the worker and
 * thieves take from top with a CAS, so it is FIFO and yields are fair.
 */
struct stb_rq {
	uint64_t top STB_ALIGNED_CL;
	uint64_t bottom STB_ALIGNED_CL;
	struct stb_task *buf[STB_RQ_CAP] STB_ALIGNED_CL;
};

static bool stb_rq_push(struct stb_rq *q, struct stb_task *t)
{
	uint64_t b = __atomic_load_n(&q->bottom, __ATOMIC_RELAXED);
	uint64_t top = __atomic_load_n(&q->top, __ATOMIC_ACQUIRE);
	if (b - top >= STB_RQ_CAP)
		return false;
	__atomic_store_n(&q->buf[b & (STB_RQ_CAP - 1)], t, __ATOMIC_RELAXED);
	__atomic_store_n(&q->bottom, b + 1, __ATOMIC_RELEASE);
	return true;
}

static struct stb_task *stb_rq_pop(struct stb_rq *q)
{
	uint64_t top = __atomic_load_n(&q->top, __ATOMIC_ACQUIRE);
	for (;;) {
		uint64_t b = __atomic_load_n(&q->bottom, __ATOMIC_ACQUIRE);
		if (top >= b)
			return NULL;
		struct stb_task *t = __atomic_load_n(&q->buf[top & (STB_RQ_CAP - 1)], __ATOMIC_RELAXED);
		/* A stale top fails the CAS, so a slot overwritten meanwhile is never used. */
		if (__atomic_compare_exchange_n(&q->top, &top, top + 1, false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			return t;
	}
}

/* Bounded multi-producer multi-consumer queue (per-cell sequence numbers). */
struct stb_cell {
	uint64_t seq;
	struct stb_task *task;
};

struct stb_mpmc {
	uint64_t enq STB_ALIGNED_CL;
	uint64_t deq STB_ALIGNED_CL;
	struct stb_cell cells[STB_REMOTE_CAP] STB_ALIGNED_CL;
};

static void stb_mpmc_init(struct stb_mpmc *q)
{
	for (uint64_t i = 0; i < STB_REMOTE_CAP; i++)
		q->cells[i].seq = i;
}

static bool stb_mpmc_push(struct stb_mpmc *q, struct stb_task *t)
{
	uint64_t pos = __atomic_load_n(&q->enq, __ATOMIC_RELAXED);
	struct stb_cell *c;
	for (;;) {
		c = &q->cells[pos & (STB_REMOTE_CAP - 1)];
		uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
		int64_t diff = (int64_t)(seq - pos);
		if (diff == 0) {
			if (__atomic_compare_exchange_n(&q->enq, &pos, pos + 1, true, __ATOMIC_RELAXED,
							__ATOMIC_RELAXED))
				break;
		} else if (diff < 0) {
			return false;
		} else {
			pos = __atomic_load_n(&q->enq, __ATOMIC_RELAXED);
		}
	}
	__atomic_store_n(&c->task, t, __ATOMIC_RELAXED);
	__atomic_store_n(&c->seq, pos + 1, __ATOMIC_RELEASE);
	return true;
}

static struct stb_task *stb_mpmc_pop(struct stb_mpmc *q)
{
	uint64_t pos = __atomic_load_n(&q->deq, __ATOMIC_RELAXED);
	struct stb_cell *c;
	for (;;) {
		c = &q->cells[pos & (STB_REMOTE_CAP - 1)];
		uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
		int64_t diff = (int64_t)(seq - (pos + 1));
		if (diff == 0) {
			if (__atomic_compare_exchange_n(&q->deq, &pos, pos + 1, true, __ATOMIC_RELAXED,
							__ATOMIC_RELAXED))
				break;
		} else if (diff < 0) {
			return NULL;
		} else {
			pos = __atomic_load_n(&q->deq, __ATOMIC_RELAXED);
		}
	}
	struct stb_task *t = __atomic_load_n(&c->task, __ATOMIC_RELAXED);
	__atomic_store_n(&c->seq, pos + STB_REMOTE_CAP, __ATOMIC_RELEASE);
	return t;
}

/* ---- workers ---- */

struct stb_worker {
	/* Owned by the worker thread. */
	struct stb_task *cur;          /* task on the CPU, NULL in the scheduler */
	struct stb_task *prev;         /* task just switched away from */
	struct stb_task *pending;      /* worker-stack task the scheduler must run */
	stb_post_fn post_fn;           /* action to run right after the next switch */
	void *post_arg;
	struct stb_ctx main_ctx;       /* the worker's own (pthread) stack */
	struct stb_abi_worker *pub;
	uint32_t index;
	pid_t tid;
	uint64_t rng;
	uint32_t picks;                /* stb_find_task calls, for remote-queue fairness */
	void *main_stack_lo;
	size_t main_stack_size;
	jmp_buf exit_jmp;              /* bthread_exit of a worker-stack task */
	pthread_t thread;
#if defined(STB_ASAN)
	void *asan_fake_stack;
#endif
#if defined(STB_TSAN)
	void *tsan_fiber;
#endif
	struct stb_abi_worker own_pub;
	struct stb_rq rq;
	struct stb_mpmc remote;
};

static __thread struct stb_worker *stb_tls_worker __attribute__((tls_model("initial-exec")));

static struct stb_worker *stb_workers[STB_ABI_MAX_WORKERS];
static uint32_t stb_nworkers;           /* started */
static int stb_concurrency_req;         /* requested before start, 0 = default */
static pthread_once_t stb_init_once = PTHREAD_ONCE_INIT;
static int stb_init_err;
static pthread_mutex_t stb_workers_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t stb_remote_rr;

/* Overflow for the rare case where every queue is full. */
static struct stb_lock stb_ovf_lock;
static struct stb_task *stb_ovf_head, *stb_ovf_tail;
static uint64_t stb_ovf_count;

/* Parking lot: sleepers wait on stb_park_seq; each signal wakes one. */
static uint32_t stb_park_seq;
static uint32_t stb_park_sleepers;
/* Idle workers spinning for work before they park: no need to wake anyone. */
static uint32_t stb_spinning;
#define STB_SPIN_NS 20000u

/*
 * Re-reads the thread-local worker. Must be used after every stack switch: a
 * bthread may resume on a different worker thread than it left.
 */
__attribute__((noinline)) struct stb_worker *stb_worker_self(void)
{
	struct stb_worker *w = stb_tls_worker;
	__asm__ volatile("" : "+r"(w));
	return w;
}

struct stb_task *stb_task_self(void)
{
	struct stb_worker *w = stb_worker_self();
	return w ? w->cur : NULL;
}

bool stb_can_suspend(void)
{
	struct stb_worker *w = stb_worker_self();
	return w && w->cur && !(w->cur->flags & STB_TASK_F_WORKER_STACK);
}

struct stb_task *stb_worker_current(struct stb_worker *w)
{
	return w->cur;
}

static inline void stb_full_fence(void)
{
#if defined(STB_TSAN)
	static uint32_t dummy; /* TSan does not support fences: a seq_cst RMW is one */
	__atomic_fetch_add(&dummy, 0, __ATOMIC_SEQ_CST);
#else
	__asm__ volatile("lock orq $0, (%%rsp)" ::: "memory", "cc");
#endif
}

/*
 * The wake-up protocol. Invariant: a queued task is always seen by a worker
 * that is awake or will wake. It is kept by four rules:
 * 1. stb_sched_ready queues the task first and signals after: the full fence
 *    in stb_sched_signal orders the queue store before the loads of
 *    stb_spinning and stb_park_sleepers.
 * 2. stb_sched_signal skips the futex wake only when some worker spins
 *    (stb_spinning > 0: it will see the task, by rule 3) or when no worker is
 *    parked (every worker is awake and looks into the queues again before it
 *    parks, by rule 4).
 * 3. A spinner may absorb the signals of many tasks but takes only one. So a
 *    worker that leaves the idle state with a task (found while spinning, in
 *    the re-check before parking, or after a wake-up) calls stb_sched_signal
 *    before it runs the task: the baton passes to another worker for the
 *    tasks still queued, and with k queued tasks the chain wakes up to k
 *    workers. A worker woken from the parking lot spins first, so it counts
 *    as a spinner while it looks.
 * 4. A worker parks only after it announced itself (stb_park_sleepers, seq_cst)
 *    and looked into every queue once more; a signal bumps stb_park_seq
 *    before the wake, so a wake between the re-check and the futex wait makes
 *    the wait return at once.
 */
void stb_sched_signal(void)
{
	stb_full_fence();
	if (__atomic_load_n(&stb_spinning, __ATOMIC_RELAXED) != 0 ||
	    __atomic_load_n(&stb_park_sleepers, __ATOMIC_RELAXED) == 0)
		return;
	__atomic_fetch_add(&stb_park_seq, 1, __ATOMIC_SEQ_CST);
	stb_futex_wake(&stb_park_seq, 1);
}

static void stb_ovf_push(struct stb_task *t)
{
	t->next = NULL;
	stb_lock(&stb_ovf_lock);
	if (stb_ovf_tail)
		stb_ovf_tail->next = t;
	else
		stb_ovf_head = t;
	stb_ovf_tail = t;
	__atomic_fetch_add(&stb_ovf_count, 1, __ATOMIC_RELEASE);
	stb_unlock(&stb_ovf_lock);
}

static struct stb_task *stb_ovf_pop(void)
{
	if (__atomic_load_n(&stb_ovf_count, __ATOMIC_ACQUIRE) == 0)
		return NULL;
	stb_lock(&stb_ovf_lock);
	struct stb_task *t = stb_ovf_head;
	if (t) {
		stb_ovf_head = t->next;
		if (!stb_ovf_head)
			stb_ovf_tail = NULL;
		__atomic_fetch_sub(&stb_ovf_count, 1, __ATOMIC_RELAXED);
	}
	stb_unlock(&stb_ovf_lock);
	return t;
}

void stb_sched_ready(struct stb_task *t, bool nosignal)
{
	struct stb_worker *w = stb_worker_self();
	if (!(w && stb_rq_push(&w->rq, t))) {
		uint32_t n = __atomic_load_n(&stb_nworkers, __ATOMIC_ACQUIRE);
		uint32_t start = __atomic_fetch_add(&stb_remote_rr, 1, __ATOMIC_RELAXED);
		bool done = false;
		for (uint32_t i = 0; i < n && !done; i++)
			done = stb_mpmc_push(&stb_workers[(start + i) % n]->remote, t);
		if (!done)
			stb_ovf_push(t);
	}
	if (!nosignal)
		stb_sched_signal();
}

static uint64_t stb_rand(struct stb_worker *w)
{
	uint64_t x = w->rng;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	w->rng = x;
	return x;
}

/* Every this many picks the remote queue and the overflow go first. */
#define STB_REMOTE_FAIR_PICKS 61u

static struct stb_task *stb_find_task(struct stb_worker *w)
{
	struct stb_task *t;
	/*
	 * Tasks made ready by other threads (timers, fd events, pthreads) wait in
	 * the remote queue; a local queue that never empties (bthreads that keep
	 * yielding) must not starve them.
	 */
	if (STB_UNLIKELY(++w->picks % STB_REMOTE_FAIR_PICKS == 0)) {
		t = stb_mpmc_pop(&w->remote);
		if (!t)
			t = stb_ovf_pop();
		/* Nor may a worker stuck in a long-running bthread strand the tasks
		 * queued behind it while this one keeps busy: take one of them. */
		uint32_t n = __atomic_load_n(&stb_nworkers, __ATOMIC_ACQUIRE);
		if (!t && n > 1) {
			struct stb_worker *v = stb_workers[stb_rand(w) % n];
			if (v != w)
				t = stb_rq_pop(&v->rq);
		}
		if (t)
			return t;
	}
	t = stb_rq_pop(&w->rq);
	if (t)
		return t;
	t = stb_mpmc_pop(&w->remote);
	if (t)
		return t;
	t = stb_ovf_pop();
	if (t)
		return t;
	uint32_t n = __atomic_load_n(&stb_nworkers, __ATOMIC_ACQUIRE);
	if (n <= 1)
		return NULL;
	uint32_t start = (uint32_t)(stb_rand(w) % n);
	for (uint32_t i = 0; i < n; i++) {
		struct stb_worker *v = stb_workers[(start + i) % n];
		if (v == w)
			continue;
		t = stb_rq_pop(&v->rq);
		if (!t)
			t = stb_mpmc_pop(&v->remote);
		if (t)
			return t;
	}
	return NULL;
}

/* ---- switching ---- */

static void stb_task_entry(void *arg);

/* Gives a task that never ran its stack and initial context. */
static void stb_prepare_first_run(struct stb_task *t)
{
	if (t->stack || (t->flags & STB_TASK_F_WORKER_STACK))
		return;
	t->stack = stb_stack_get(t->stack_type);
	if (!t->stack) {
		/* Out of memory or mappings: run it on the worker's stack instead. */
		t->flags |= STB_TASK_F_WORKER_STACK;
		t->pub->flags |= STB_ABI_TASK_F_WORKER_STACK;
		return;
	}
	stb_ctx_make((struct stb_ctx *)&t->pub->sp, t->stack->lo, t->stack->size, stb_task_entry, t);
#if STB_TRACER
	t->pub->stack_lo = (uint64_t)(uintptr_t)t->stack->lo;
	t->pub->stack_hi = (uint64_t)(uintptr_t)t->stack->lo + t->stack->size;
#endif
}

/* Runs after every switch, on the resumed context: finishes both halves. */
static inline __attribute__((always_inline)) void stb_after_switch(void)
{
	struct stb_worker *w = stb_worker_self();
	struct stb_task *cur = w->cur;
#if defined(STB_TSAN)
	/* nothing: the fiber switch already synchronized */
#endif
	if (cur) {
#if STB_TRACER
		/* Store only what changed: a task mostly stays on its worker. The
		 * private copy keeps the entry's second cache line untouched. */
		if (STB_UNLIKELY(cur->last_worker != w->index + 1)) {
			cur->last_worker = w->index + 1;
			__atomic_store_n(&cur->pub->worker, w->index, __ATOMIC_RELAXED);
			__atomic_store_n(&cur->pub->tid, (uint32_t)w->tid, __ATOMIC_RELAXED);
		}
		__atomic_store_n(&w->pub->current, stb_task_id(cur), __ATOMIC_RELEASE);
		if (w->pub->state != STB_WORKER_RUNNING)
			__atomic_store_n(&w->pub->state, STB_WORKER_RUNNING, __ATOMIC_RELAXED);
#endif
		stb_task_set_state(cur, STB_TASK_RUNNING);
	} else {
#if STB_TRACER
		__atomic_store_n(&w->pub->current, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&w->pub->state, STB_WORKER_SCHEDULING, __ATOMIC_RELAXED);
#endif
	}
	stb_post_fn post = w->post_fn;
	if (post) {
		w->post_fn = NULL;
		post(w, w->prev, w->post_arg);
	}
}

static struct stb_ctx *stb_task_ctx(struct stb_task *t)
{
	return (struct stb_ctx *)&t->pub->sp;
}

/*
 * The single place where a worker switches stacks: from task `from` (NULL:
 * the worker's scheduler context) to task `to` (NULL: the scheduler). This is
 * the tracer's interception point: both state changes below pass the STB gate.
 */
static void stb_jump_stack(struct stb_worker *w, struct stb_task *from, struct stb_task *to,
			   bool from_finished)
{
	struct stb_ctx *fctx = from ? stb_task_ctx(from) : &w->main_ctx;
	struct stb_ctx *tctx = to ? stb_task_ctx(to) : &w->main_ctx;
	if (from)
		stb_task_set_state(from, STB_TASK_SUSPENDING);
	if (to)
		stb_task_set_state(to, STB_TASK_ABOUT_TO_RUN);
	w->prev = from;
	w->cur = to;
#if defined(STB_ASAN)
	const void *bottom = to ? to->stack->lo : w->main_stack_lo;
	size_t size = to ? to->stack->size : w->main_stack_size;
	void **save = from ? &from->asan_fake_stack : &w->asan_fake_stack;
	__sanitizer_start_switch_fiber(from_finished ? NULL : save, bottom, size);
#else
	(void)from_finished;
#endif
#if defined(STB_TSAN)
	if (to && !to->tsan_fiber)
		to->tsan_fiber = __tsan_create_fiber(0);
	__tsan_switch_to_fiber(to ? to->tsan_fiber : w->tsan_fiber, 0);
#endif
	stb_ctx_jump(fctx, tctx);
	/* Resumed: locals above describe an older switch; use the worker. */
#if defined(STB_ASAN)
	{
		struct stb_worker *rw = stb_worker_self();
		void *fake = rw->cur ? rw->cur->asan_fake_stack : rw->asan_fake_stack;
		__sanitizer_finish_switch_fiber(fake, NULL, NULL);
	}
#endif
	stb_after_switch();
}

static void stb_post_ready(struct stb_worker *w, struct stb_task *prev, void *arg)
{
	(void)w;
	(void)arg;
	stb_task_set_state(prev, STB_TASK_READY);
	stb_sched_ready(prev, false);
}

static void stb_post_finish(struct stb_worker *w, struct stb_task *prev, void *arg)
{
	(void)w;
	(void)arg;
	stb_task_set_state(prev, STB_TASK_DESTROYED);
#if defined(STB_TSAN)
	if (prev->tsan_fiber) {
		__tsan_destroy_fiber(prev->tsan_fiber);
		prev->tsan_fiber = NULL;
	}
#endif
	stb_stack_put(prev->stack);
	prev->stack = NULL;
	stb_task_release(prev);
}

/* Leaves the current bthread for the next runnable one (or the scheduler). */
static void stb_switch_out(struct stb_worker *w, stb_post_fn post, void *arg, bool finished)
{
	struct stb_task *from = w->cur;
	struct stb_task *to = stb_find_task(w);
	if (to) {
		stb_prepare_first_run(to);
		if (to->flags & STB_TASK_F_WORKER_STACK) {
			w->pending = to;
			to = NULL;
		}
	}
	w->post_fn = post;
	w->post_arg = arg;
	stb_jump_stack(w, from, to, finished);
}

void stb_sched_suspend(stb_post_fn post, void *arg)
{
	struct stb_worker *w = stb_worker_self();
	stb_switch_out(w, post, arg, false);
}

/* Records the result for joiners and wakes them. */
static void stb_task_publish_exit(struct stb_task *t, void *ret)
{
	struct stb_butex *j = t->join;
	stb_lock(&j->lock);
	t->ret = ret;
	t->ret_version = t->version;
	__atomic_store_n(&j->value, (int)t->version, __ATOMIC_RELEASE);
	stb_unlock(&j->lock);
	stb_butex_wake(j, true);
}

static __attribute__((noreturn)) void stb_task_exit(struct stb_task *t, void *ret)
{
	stb_task_publish_exit(t, ret);
	struct stb_worker *w = stb_worker_self();
	if (t->flags & STB_TASK_F_WORKER_STACK)
		longjmp(w->exit_jmp, 1);
	stb_switch_out(w, stb_post_finish, NULL, true);
	__builtin_unreachable();
}

static void stb_task_entry(void *arg)
{
	struct stb_task *t = arg;
#if defined(STB_ASAN)
	__sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
	stb_after_switch();
	void *ret = t->fn(t->arg);
	stb_task_exit(t, ret);
}

/* Runs a BTHREAD_ATTR_PTHREAD task directly on the worker's stack. */
static void stb_run_on_worker_stack(struct stb_worker *w, struct stb_task *t)
{
#if STB_TRACER
	t->pub->stack_lo = (uint64_t)(uintptr_t)w->main_stack_lo;
	t->pub->stack_hi = (uint64_t)(uintptr_t)w->main_stack_lo + w->main_stack_size;
	t->pub->worker = w->index;
	t->pub->tid = (uint32_t)w->tid;
#endif
	stb_task_set_state(t, STB_TASK_ABOUT_TO_RUN);
	w->cur = t;
#if STB_TRACER
	__atomic_store_n(&w->pub->current, stb_task_id(t), __ATOMIC_RELEASE);
#endif
	stb_task_set_state(t, STB_TASK_RUNNING);
	if (setjmp(w->exit_jmp) == 0) {
		void *ret = t->fn(t->arg);
		stb_task_publish_exit(t, ret);
	}
	w = stb_worker_self();
	stb_task_set_state(t, STB_TASK_SUSPENDING);
	w->cur = NULL;
#if STB_TRACER
	__atomic_store_n(&w->pub->current, 0, __ATOMIC_RELEASE);
#endif
	stb_task_set_state(t, STB_TASK_DESTROYED);
	stb_task_release(t);
}

/* Parks the worker unless the re-check finds a task (rule 4 above). */
static struct stb_task *stb_park(struct stb_worker *w)
{
	__atomic_fetch_add(&stb_park_sleepers, 1, __ATOMIC_SEQ_CST);
	uint32_t seq = __atomic_load_n(&stb_park_seq, __ATOMIC_SEQ_CST);
	struct stb_task *t = stb_find_task(w);
	if (!t) {
#if STB_TRACER
		__atomic_store_n(&w->pub->state, STB_WORKER_PARKED, __ATOMIC_RELAXED);
#endif
		stb_futex_wait(&stb_park_seq, seq, NULL);
#if STB_TRACER
		__atomic_store_n(&w->pub->state, STB_WORKER_SCHEDULING, __ATOMIC_RELAXED);
#endif
	}
	__atomic_fetch_sub(&stb_park_sleepers, 1, __ATOMIC_SEQ_CST);
	return t;
}

/*
 * The idle path of a worker that found no task: spin a little (a hand-off then
 * costs no futex wake), then park; after a wake-up spin again. Returns a task,
 * having passed the baton on (rule 3 above).
 */
static struct stb_task *idle_wait(struct stb_worker *w)
{
	for (;;) {
		struct stb_task *t;
		__atomic_fetch_add(&stb_spinning, 1, __ATOMIC_SEQ_CST);
		uint64_t until = stb_now_ns() + STB_SPIN_NS;
		do {
			for (int i = 0; i < 32; i++)
				stb_cpu_relax();
			t = stb_find_task(w);
		} while (!t && stb_now_ns() < until);
		__atomic_fetch_sub(&stb_spinning, 1, __ATOMIC_SEQ_CST);
		if (!t)
			t = stb_park(w);
		if (t) {
			stb_sched_signal();
			return t;
		}
	}
}

static void *stb_worker_main(void *arg)
{
	struct stb_worker *w = arg;
	stb_tls_worker = w;
	w->tid = stb_gettid();
	pthread_attr_t pa;
	if (pthread_getattr_np(pthread_self(), &pa) == 0) {
		pthread_attr_getstack(&pa, &w->main_stack_lo, &w->main_stack_size);
		pthread_attr_destroy(&pa);
	}
#if defined(STB_TSAN)
	w->tsan_fiber = __tsan_get_current_fiber();
#endif
#if STB_TRACER
	__atomic_store_n(&w->pub->tid, (uint32_t)w->tid, __ATOMIC_RELAXED);
	__atomic_store_n(&w->pub->state, STB_WORKER_SCHEDULING, __ATOMIC_RELEASE);
#endif
	char name[16];
	snprintf(name, sizeof(name), "bthread_w%u", w->index);
	pthread_setname_np(pthread_self(), name);

	for (;;) {
		struct stb_task *t = w->pending;
		w->pending = NULL;
		if (!t)
			t = stb_find_task(w);
		if (!t)
			t = idle_wait(w);
		stb_prepare_first_run(t);
		if (t->flags & STB_TASK_F_WORKER_STACK)
			stb_run_on_worker_stack(w, t);
		else
			stb_jump_stack(w, NULL, t, false);
	}
	return NULL;
}

static int stb_default_concurrency(void)
{
	const char *env = getenv("STB_CONCURRENCY");
	if (env && *env) {
		char *end;
		errno = 0;
		long v = strtol(env, &end, 10);
		if (errno == 0 && *end == '\0' && v >= 1 && v <= (long)STB_ABI_MAX_WORKERS)
			return (int)v;
		fprintf(stderr, "stb: ignoring STB_CONCURRENCY=%s (want 1..%u)\n", env,
			STB_ABI_MAX_WORKERS);
	}
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	if (n < 2)
		n = 2;
	if (n > (long)STB_ABI_MAX_WORKERS)
		n = STB_ABI_MAX_WORKERS;
	return (int)n;
}

/* Starts workers up to n. Called with stb_workers_lock held. */
static int stb_start_workers(uint32_t n)
{
	while (stb_nworkers < n) {
		uint32_t i = stb_nworkers;
		struct stb_worker *w;
		if (posix_memalign((void **)&w, STB_CACHELINE, sizeof(*w)) != 0)
			return ENOMEM;
		memset(w, 0, sizeof(*w));
		w->index = i;
		w->rng = 0x9e3779b97f4a7c15ull * (i + 1);
		stb_mpmc_init(&w->remote);
		w->pub = stb_table_worker(i);
		if (!w->pub)
			w->pub = &w->own_pub;
		stb_workers[i] = w;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setstacksize(&attr, 8u << 20);
		int rc = pthread_create(&w->thread, &attr, stb_worker_main, w);
		pthread_attr_destroy(&attr);
		if (rc != 0) {
			stb_workers[i] = NULL;
			free(w);
			return rc;
		}
		__atomic_store_n(&stb_nworkers, i + 1, __ATOMIC_RELEASE);
#if STB_TRACER
		if (stb_table.hdr)
			__atomic_store_n(&stb_table.hdr->nworkers, i + 1, __ATOMIC_RELEASE);
#endif
	}
	return 0;
}

static void stb_runtime_init_once(void)
{
	int rc = stb_table_init();
	if (rc != 0)
		fprintf(stderr, "stb: no shared task table (%s); bthreads cannot be traced from "
				"outside this process\n", strerror(-rc));
#if STB_TRACER
	stb_tracer_attach();
#endif
	int n = __atomic_load_n(&stb_concurrency_req, __ATOMIC_ACQUIRE);
	if (n <= 0)
		n = stb_default_concurrency();
	pthread_mutex_lock(&stb_workers_lock);
	stb_init_err = stb_start_workers((uint32_t)n);
	pthread_mutex_unlock(&stb_workers_lock);
}

int stb_runtime_init(void)
{
	if (STB_LIKELY(__atomic_load_n(&stb_nworkers, __ATOMIC_ACQUIRE) != 0))
		return 0;
	pthread_once(&stb_init_once, stb_runtime_init_once);
	return __atomic_load_n(&stb_nworkers, __ATOMIC_ACQUIRE) ? 0 : (stb_init_err ? stb_init_err : EAGAIN);
}

/* ---- public API ---- */

int bthread_attr_init(bthread_attr_t *attr)
{
	if (!attr)
		return EINVAL;
	*attr = BTHREAD_ATTR_NORMAL;
	return 0;
}

int bthread_attr_destroy(bthread_attr_t *attr)
{
	return attr ? 0 : EINVAL;
}

int bthread_attr_set_name(bthread_attr_t *attr, const char *name)
{
	if (!attr)
		return EINVAL;
	attr->name = name;
	return 0;
}

static int stb_start(bthread_t *tid, const bthread_attr_t *attr, void *(*fn)(void *), void *arg,
		     bool urgent)
{
	if (!fn)
		return EINVAL;
	if (!attr)
		attr = &BTHREAD_ATTR_NORMAL;
	if (attr->stack_type > BTHREAD_STACKTYPE_LARGE)
		return EINVAL;
	int rc = stb_runtime_init();
	if (rc != 0)
		return rc;
	struct stb_task *t = stb_task_alloc(attr, fn, arg);
	if (!t)
		return errno == EAGAIN ? EAGAIN : ENOMEM;
	if (tid)
		*tid = stb_task_id(t);
	stb_task_set_state(t, STB_TASK_READY_NO_STACK);
	if (urgent && stb_can_suspend() && !(t->flags & STB_TASK_F_WORKER_STACK)) {
		struct stb_worker *w = stb_worker_self();
		stb_prepare_first_run(t);
		if (!(t->flags & STB_TASK_F_WORKER_STACK)) {
			w->post_fn = stb_post_ready;
			w->post_arg = NULL;
			stb_jump_stack(w, w->cur, t, false);
			return 0;
		}
	}
	stb_sched_ready(t, (t->flags & STB_TASK_F_NOSIGNAL) != 0);
	return 0;
}

int bthread_start_urgent(bthread_t *tid, const bthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	return stb_start(tid, attr, fn, arg, true);
}

int bthread_start_background(bthread_t *tid, const bthread_attr_t *attr, void *(*fn)(void *),
			     void *arg)
{
	return stb_start(tid, attr, fn, arg, false);
}

int bthread_yield(void)
{
	if (!stb_can_suspend()) {
		sched_yield();
		return 0;
	}
	struct stb_worker *w = stb_worker_self();
	struct stb_task *to = stb_find_task(w);
	if (!to)
		return 0;
	stb_prepare_first_run(to);
	if (to->flags & STB_TASK_F_WORKER_STACK) {
		w->pending = to;
		to = NULL;
	}
	w->post_fn = stb_post_ready;
	w->post_arg = NULL;
	stb_jump_stack(w, w->cur, to, false);
	return 0;
}

bthread_t bthread_self(void)
{
	struct stb_task *t = stb_task_self();
	return t ? stb_task_id(t) : 0;
}

int bthread_equal(bthread_t t1, bthread_t t2)
{
	return t1 == t2;
}

void bthread_exit(void *retval)
{
	struct stb_task *t = stb_task_self();
	if (!t)
		pthread_exit(retval);
	stb_task_exit(t, retval);
}

int bthread_join(bthread_t id, void **ret)
{
	struct stb_task *t = stb_task_lookup(id);
	if (!t)
		return EINVAL;
	if (id == bthread_self())
		return EINVAL;
	uint32_t v = (uint32_t)(id >> 32);
	struct stb_butex *j = t->join;
	const struct stb_wait why = {.word = STB_ABI_WAIT_WORD(STB_WAIT_JOIN, 0, 0, 0),
				     .owner = id};
	for (;;) {
		int fin = __atomic_load_n(&j->value, __ATOMIC_ACQUIRE);
		if ((int32_t)((uint32_t)fin - v) >= 0)
			break;
		stb_butex_wait_mono(j, fin, 0, &why);
	}
	stb_lock(&j->lock);
	uint32_t rv = t->ret_version;
	void *r = t->ret;
	stb_unlock(&j->lock);
	if (rv != v)
		return ESRCH;
	if (ret)
		*ret = r;
	return 0;
}

int bthread_setconcurrency(int num)
{
	if (num < 1 || num > (int)STB_ABI_MAX_WORKERS)
		return EINVAL;
	pthread_mutex_lock(&stb_workers_lock);
	int rc = 0;
	uint32_t n = __atomic_load_n(&stb_nworkers, __ATOMIC_ACQUIRE);
	if (n == 0)
		__atomic_store_n(&stb_concurrency_req, num, __ATOMIC_RELEASE);
	else if ((uint32_t)num < n)
		rc = EPERM;
	else
		rc = stb_start_workers((uint32_t)num);
	pthread_mutex_unlock(&stb_workers_lock);
	return rc;
}

int bthread_getconcurrency(void)
{
	uint32_t n = __atomic_load_n(&stb_nworkers, __ATOMIC_ACQUIRE);
	if (n)
		return (int)n;
	int req = __atomic_load_n(&stb_concurrency_req, __ATOMIC_ACQUIRE);
	return req > 0 ? req : stb_default_concurrency();
}

int bthread_stop(bthread_t id)
{
	struct stb_task *t = stb_task_lookup(id);
	if (!t)
		return EINVAL;
	uint32_t v = (uint32_t)(id >> 32);
	if (__atomic_load_n(&t->version, __ATOMIC_ACQUIRE) != v)
		return 0; /* finished */
	__atomic_store_n(&t->stopped, v, __ATOMIC_SEQ_CST);
	stb_butex_interrupt(t, v);
	return 0;
}

int bthread_stopped(bthread_t id)
{
	struct stb_task *t = stb_task_lookup(id);
	if (!t)
		return 1;
	uint32_t v = (uint32_t)(id >> 32);
	if (__atomic_load_n(&t->version, __ATOMIC_ACQUIRE) != v)
		return 1;
	int fin = __atomic_load_n(&t->join->value, __ATOMIC_ACQUIRE);
	if ((int32_t)((uint32_t)fin - v) >= 0)
		return 1;
	return __atomic_load_n(&t->stopped, __ATOMIC_ACQUIRE) == v;
}
