/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Workers and scheduling: worker pools (tags), one scheduler per worker
 * pthread with a lock-free work-stealing run queue, a bounded remote queue for
 * tasks made ready by other threads, a parking lot per pool that wakes one
 * idle worker at a time, and the single code that switches stacks
 * (jump_stack_inline: stb_jump_stack(), inlined in bthread_yield). Also the
 * public bthread start/join/yield/exit/stop/
 * interrupt calls and the concurrency, tag and worker-start settings.
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

static inline __attribute__((always_inline)) bool stb_rq_push(struct stb_rq *q, struct stb_task *t)
{
	uint64_t b = __atomic_load_n(&q->bottom, __ATOMIC_RELAXED);
	uint64_t top = __atomic_load_n(&q->top, __ATOMIC_ACQUIRE);
	if (b - top >= STB_RQ_CAP)
		return false;
	__atomic_store_n(&q->buf[b & (STB_RQ_CAP - 1)], t, __ATOMIC_RELAXED);
	__atomic_store_n(&q->bottom, b + 1, __ATOMIC_RELEASE);
	return true;
}

static inline __attribute__((always_inline)) struct stb_task *stb_rq_pop(struct stb_rq *q)
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

/* ---- workers and pools ---- */

#define STB_MAX_WORKERS BTHREAD_MAX_CONCURRENCY
_Static_assert(STB_MAX_WORKERS <= STB_ABI_MAX_WORKERS, "every worker has a table entry");
#define STB_DEFAULT_CONCURRENCY (8 + (int)BTHREAD_EPOLL_THREAD_NUM) /* as bRPC */

struct stb_pool;

struct stb_worker {
	/* Owned by the worker thread. */
	struct stb_task *cur;          /* task on the CPU, NULL in the scheduler */
	struct stb_task *prev;         /* task just switched away from */
	struct stb_task *pending;      /* worker-stack task the scheduler must run */
	stb_post_fn post_fn;           /* action to run right after the next switch */
	void *post_arg;
	struct stb_ctx main_ctx;       /* the worker's own (pthread) stack */
	struct stb_abi_worker *pub;
	struct stb_pool *pool;
	uint32_t index;                /* over all pools: its table entry */
	pid_t tid;
	uint64_t rng;
	uint32_t fair_left;            /* stb_find_task calls until the next fair pick */
	uint64_t cpu_in;               /* thread CPU time when cur was switched in (STB_CPU_CLOCK) */
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
	struct stb_rq rq;
	struct stb_mpmc remote;
};

/*
 * A worker pool (bthread_tag_t): its workers steal only from each other, and
 * a task of the pool is queued only on them. Pools are created on first use
 * and never freed.
 */
struct stb_pool {
	/* Parking lot: sleepers wait on park_seq; each signal wakes one. */
	uint32_t park_seq STB_ALIGNED_CL;
	uint32_t park_sleepers;
	/* Idle workers spinning for work before they park: no need to wake anyone. */
	uint32_t spinning;
	int tag;
	uint32_t nworkers STB_ALIGNED_CL; /* started (release; workers[] below it are set) */
	uint32_t remote_rr;
	/* Overflow for the rare case where every queue of the pool is full. */
	struct stb_lock ovf_lock;
	struct stb_task *ovf_head, *ovf_tail;
	uint64_t ovf_count;
	struct stb_worker *workers[STB_MAX_WORKERS];
};

/*
 * The switch path writes only lines its worker owns at that moment (abi.h,
 * "Running"): lines of its own struct before the queues, its queue but the
 * top (thieves take tasks with a CAS there), its table entry's first line,
 * and of the task that leaves the first line of its struct and the first two
 * of its entry (word, sp/ip/bp; the wait block). Nothing of the task it
 * switches to, of another worker, of the monitor or of the runtime at large.
 * The layout keeps those lines apart from what others write:
 */
_Static_assert(offsetof(struct stb_rq, top) == 0 && offsetof(struct stb_rq, bottom) == STB_CACHELINE,
	       "a queue's top, which thieves write, has a line of its own");
_Static_assert(offsetof(struct stb_worker, rq) % STB_CACHELINE == 0,
	       "a worker's own fields end before its queues' lines");
_Static_assert(sizeof(struct stb_task) % STB_CACHELINE == 0,
	       "tasks share no line (a chunk of them is page-aligned)");
_Static_assert(offsetof(struct stb_task, seq_word) < STB_CACHELINE &&
		   offsetof(struct stb_task, yield_published) < STB_CACHELINE,
	       "what the switch writes in the leaving task is on its first line");
_Static_assert(offsetof(struct stb_task, stopped) >= STB_CACHELINE &&
		   offsetof(struct stb_task, interrupted) >= STB_CACHELINE &&
		   offsetof(struct stb_task, wait_butex) >= STB_CACHELINE &&
		   offsetof(struct stb_task, waiter) >= STB_CACHELINE &&
		   offsetof(struct stb_task, free_next) >= STB_CACHELINE &&
		   offsetof(struct stb_task, next) >= STB_CACHELINE &&
		   offsetof(struct stb_task, ret) >= STB_CACHELINE &&
		   offsetof(struct stb_task, ret_version) >= STB_CACHELINE,
	       "what other threads write in a task (stop, wakers, joiners, free lists) is not on "
	       "its first line");

#if defined(STB_TEST_HOOKS)
/*
 * The check of the above in test builds (tests/test_switch_lines.c): with
 * stb_test_sw_check set, every store of the switch path (STB_SW_NOTE) is
 * checked against those lines; stb_test_sw_plant adds a store to the entry
 * of the task switched to, the kind of store the check must catch.
 */
int stb_test_sw_check, stb_test_sw_plant;
uint64_t stb_test_sw_stores, stb_test_sw_fast, stb_test_sw_bad;
const char *stb_test_sw_bad_what;

/* Do the lines of [a, a + len) lie within [lo, lo + size)? */
static bool sw_in(uintptr_t a, size_t len, const void *lo, size_t size)
{
	uintptr_t first = a & ~(uintptr_t)(STB_CACHELINE - 1);
	uintptr_t end = (a + len + STB_CACHELINE - 1) & ~(uintptr_t)(STB_CACHELINE - 1);
	return first >= (uintptr_t)lo && end <= (uintptr_t)lo + size;
}

static __attribute__((noinline, cold)) void sw_note(struct stb_worker *w,
						    const struct stb_task *from, const void *p,
						    size_t len, const char *what)
{
	uintptr_t a = (uintptr_t)p;
	__atomic_fetch_add(&stb_test_sw_stores, 1, __ATOMIC_RELAXED);
	bool ok = sw_in(a, len, w, offsetof(struct stb_worker, rq)) ||
		  sw_in(a, len, &w->rq.bottom, sizeof(w->rq) - offsetof(struct stb_rq, bottom)) ||
		  sw_in(a, len, w->pub, STB_CACHELINE) ||
		  (from && (sw_in(a, len, from, STB_CACHELINE) ||
			    sw_in(a, len, from->pub, 2 * STB_CACHELINE)));
	if (!ok) {
		__atomic_store_n(&stb_test_sw_bad_what, what, __ATOMIC_RELAXED);
		__atomic_fetch_add(&stb_test_sw_bad, 1, __ATOMIC_RELAXED);
	}
}
#define STB_SW_NOTE(w, from, p, what)                                                    \
	do {                                                                             \
		if (STB_UNLIKELY(stb_test_sw_check))                                     \
			sw_note(w, from, p, sizeof(*(p)), what);                         \
	} while (0)
#else
#define STB_SW_NOTE(w, from, p, what) ((void)0)
#endif

static __thread struct stb_worker *stb_tls_worker __attribute__((tls_model("initial-exec")));
/* Registered pthread (tracer) of this thread; its entry takes its wait blocks. */
static __thread struct stb_task *stb_tls_ptask __attribute__((tls_model("initial-exec")));
static __thread pid_t stb_tls_tid __attribute__((tls_model("initial-exec")));
/* Pool that NOSIGNAL starts of this (non-worker) thread went to, for bthread_flush. */
static __thread struct stb_pool *stb_tls_nosignal_pool;

static struct stb_pool *stb_pools[BTHREAD_TAG_MAX];
static uint32_t stb_nworkers;           /* started, all pools */
static int stb_concurrency_req;         /* requested before start, 0 = default */
static bool stb_concurrency_set;        /* bthread_setconcurrency was called before start */
static pthread_once_t stb_init_once = PTHREAD_ONCE_INIT;
static int stb_init_err;
static bool stb_started;                /* the default pool exists */
static int stb_world_stopped;           /* bthread_stop_world */
/* Serializes pool creation, worker starts and the concurrency settings. */
static pthread_mutex_t stb_workers_lock = PTHREAD_MUTEX_INITIALIZER;
static void (*stb_worker_startfn)(void);
static void (*stb_tagged_worker_startfn)(bthread_tag_t);
/* At most this many workers spin at once (half the CPUs): more would only take CPU from busy ones. */
static uint32_t stb_spin_max = 1;
/* CPU time accounting (STB_CPU_CLOCK=1). */
static bool stb_cpu_clock;
/* Some task may need switch_hooks (sticky): CPU clock on, or a BTHREAD_LOG_CONTEXT_SWITCH start. */
static bool stb_switch_hooks_on;
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

/* One read of the thread's worker (nothing in here switches; noinline, so no
 * caller keeps its TLS address across a switch of its own). */
__attribute__((noinline)) struct stb_task *stb_task_self(void)
{
	struct stb_worker *w = stb_tls_worker;
	return w ? w->cur : NULL;
}

__thread struct stb_task *const *stb_tls_cur __attribute__((tls_model("initial-exec")));

/* stb_owner_self() on a thread that runs no bthread now. */
__attribute__((noinline)) uint64_t stb_owner_self_slow(void)
{
	static __thread uint64_t tid_owner __attribute__((tls_model("initial-exec")));
	struct stb_worker *w = stb_tls_worker;
	struct stb_task *t = w ? w->cur : NULL;
	if (!t)
		t = stb_tls_ptask; /* a registered pthread has an id too */
	if (t)
		return t->id;
	if (STB_UNLIKELY(!tid_owner))
		tid_owner = STB_ABI_OWNER_TID(stb_gettid());
	return tid_owner;
}

bool stb_can_suspend(void)
{
	struct stb_worker *w = stb_worker_self();
	return w && w->cur && !(w->cur->flags & STB_TASK_F_WORKER_STACK);
}

__attribute__((noinline)) struct stb_task *stb_task_current(void)
{
	struct stb_worker *w = stb_tls_worker;
	struct stb_task *t = w ? w->cur : NULL;
	return t ? t : stb_tls_ptask;
}

void stb_pthread_task_set(struct stb_task *t)
{
	stb_tls_ptask = t;
}

pid_t stb_tid_self(void)
{
	if (STB_UNLIKELY(stb_tls_tid == 0))
		stb_tls_tid = stb_gettid();
	return stb_tls_tid;
}

struct stb_task *stb_worker_current(struct stb_worker *w)
{
	return w->cur;
}

bool stb_task_running_here(const struct stb_task *t)
{
	struct stb_worker *w = stb_tls_worker;
	if (w) {
		/* The worker's own stores, seen in program order from its thread. */
		return w->cur == t &&
		       __atomic_load_n(&w->pub->current, __ATOMIC_RELAXED) == stb_task_id(t);
	}
	return t == stb_tls_ptask && stb_task_state(t) == STB_TASK_RUNNING;
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
 * The wake-up protocol, per pool. Invariant: a queued task is always seen by
 * a worker that is awake or will wake. It is kept by four rules:
 * 1. stb_sched_ready queues the task first and signals after: the full fence
 *    in pool_signal orders the queue store before the loads of spinning and
 *    park_sleepers.
 * 2. pool_signal skips the futex wake only when some worker spins
 *    (spinning > 0: it will see the task, by rule 3) or when no worker is
 *    parked (every worker is awake and looks into the queues again before it
 *    parks, by rule 4).
 * 3. A spinner may absorb the signals of many tasks but takes only one. So a
 *    worker that leaves the idle state with a task (found while spinning, in
 *    the re-check before parking, or after a wake-up) looks, after it stopped
 *    counting as spinner or sleeper (seq_cst), whether any queue of the pool
 *    still holds a task, and if so signals before it runs its own: the baton
 *    passes to another worker for the tasks still queued, and with k queued
 *    tasks the chain wakes up to k workers. (A task queued after that look
 *    signals for itself: it sees no spinner.) A worker woken from the
 *    parking lot spins first, so it counts as a spinner while it looks.
 * 4. A worker parks only after it announced itself (park_sleepers, seq_cst)
 *    and looked into every queue once more; a signal bumps park_seq before
 *    the wake, so a wake between the re-check and the futex wait makes the
 *    wait return at once.
 * 5. A worker that queued a task in its own pool does not signal when that
 *    pool has one worker (pool_signal_own): the only one that could run the
 *    task is itself, awake. A worker added later starts awake and looks into
 *    the queues before it parks (rule 4).
 * 6. A yield queues its caller on its own, awake worker without signalling
 *    (STB_POST_YIELD): the worker popped the task it switches to from a queue
 *    of the pool, so the pool holds no more queued tasks than before, and
 *    each of those was signalled for when it was queued (rules 1-3) or is on
 *    this awake worker. The caller is seen by this worker at its next pick,
 *    and by a spinning or woken worker through stealing. A task started by
 *    bthread_start_urgent is not queued, so its caller, queued instead,
 *    signals as any new task does.
 * (BTHREAD_NOSIGNAL starts skip rule 1 on purpose; bthread_flush signals.)
 */
static void pool_signal(struct stb_pool *p)
{
	stb_full_fence();
	if (__atomic_load_n(&p->spinning, __ATOMIC_RELAXED) != 0 ||
	    __atomic_load_n(&p->park_sleepers, __ATOMIC_RELAXED) == 0)
		return;
	__atomic_fetch_add(&p->park_seq, 1, __ATOMIC_SEQ_CST);
	stb_futex_wake(&p->park_seq, 1);
}

/* pool_signal after worker w queued a task in its own pool (rule 5). */
static inline __attribute__((always_inline)) void pool_signal_own(struct stb_worker *w)
{
	struct stb_pool *p = w->pool;
	if (__atomic_load_n(&p->nworkers, __ATOMIC_RELAXED) > 1)
		pool_signal(p);
}

static void ovf_push(struct stb_pool *p, struct stb_task *t)
{
	t->next = NULL;
	stb_lock(&p->ovf_lock);
	if (p->ovf_tail)
		p->ovf_tail->next = t;
	else
		p->ovf_head = t;
	p->ovf_tail = t;
	__atomic_fetch_add(&p->ovf_count, 1, __ATOMIC_RELEASE);
	stb_unlock(&p->ovf_lock);
}

static struct stb_task *ovf_pop(struct stb_pool *p)
{
	if (__atomic_load_n(&p->ovf_count, __ATOMIC_ACQUIRE) == 0)
		return NULL;
	stb_lock(&p->ovf_lock);
	struct stb_task *t = p->ovf_head;
	if (t) {
		p->ovf_head = t->next;
		if (!p->ovf_head)
			p->ovf_tail = NULL;
		__atomic_fetch_sub(&p->ovf_count, 1, __ATOMIC_RELAXED);
	}
	stb_unlock(&p->ovf_lock);
	return t;
}

/* Queues t in pool p on a worker's remote queue (or the overflow). */
static __attribute__((noinline)) void pool_push_remote(struct stb_pool *p, struct stb_task *t)
{
	uint32_t n = __atomic_load_n(&p->nworkers, __ATOMIC_ACQUIRE);
	uint32_t start = __atomic_fetch_add(&p->remote_rr, 1, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < n; i++)
		if (stb_mpmc_push(&p->workers[(start + i) % n]->remote, t))
			return;
	ovf_push(p, t);
}

/* Queues t in its pool: on the caller's worker when it belongs to it, else remotely. */
void stb_sched_ready(struct stb_task *t, bool nosignal)
{
	struct stb_pool *p = stb_pools[t->tag];
	struct stb_worker *w = stb_worker_self();
	if (STB_LIKELY(w && w->pool == p)) {
		if (STB_UNLIKELY(!stb_rq_push(&w->rq, t)))
			pool_push_remote(p, t);
		if (!nosignal)
			pool_signal_own(w);
		return;
	}
	pool_push_remote(p, t);
	if (!nosignal)
		pool_signal(p);
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

/*
 * stb_find_task's rest: the fair pick (fair: every STB_REMOTE_FAIR_PICKS-th
 * call, before the own queue) or, when the own queue is empty, the remote
 * queue, the overflow and the other workers' queues.
 */
static __attribute__((noinline)) struct stb_task *find_task_slow(struct stb_worker *w, bool fair)
{
	struct stb_pool *p = w->pool;
	struct stb_task *t;
	if (fair) {
		/*
		 * Tasks made ready by other threads (timers, fd events, pthreads)
		 * wait in the remote queue; a local queue that never empties
		 * (bthreads that keep yielding) must not starve them.
		 */
		w->fair_left = STB_REMOTE_FAIR_PICKS;
		t = stb_mpmc_pop(&w->remote);
		if (!t)
			t = ovf_pop(p);
		/* Nor may a worker stuck in a long-running bthread strand the tasks
		 * queued behind it while this one keeps busy: take one of them. */
		uint32_t n = __atomic_load_n(&p->nworkers, __ATOMIC_ACQUIRE);
		if (!t && n > 1) {
			struct stb_worker *v = p->workers[stb_rand(w) % n];
			if (v != w)
				t = stb_rq_pop(&v->rq);
		}
		if (t)
			return t;
		t = stb_rq_pop(&w->rq);
		if (t)
			return t;
	}
	t = stb_mpmc_pop(&w->remote);
	if (t)
		return t;
	t = ovf_pop(p);
	if (t)
		return t;
	uint32_t n = __atomic_load_n(&p->nworkers, __ATOMIC_ACQUIRE);
	if (n <= 1)
		return NULL;
	uint32_t start = (uint32_t)(stb_rand(w) % n);
	for (uint32_t i = 0; i < n; i++) {
		struct stb_worker *v = p->workers[(start + i) % n];
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

/* The next task for worker w, or NULL. Inline: its common case is one pop. */
static inline __attribute__((always_inline)) struct stb_task *stb_find_task(struct stb_worker *w)
{
	STB_SW_NOTE(w, w->cur, &w->fair_left, "the worker's fair countdown");
	if (STB_UNLIKELY(--w->fair_left == 0))
		return find_task_slow(w, true);
	struct stb_task *t = stb_rq_pop(&w->rq);
	if (STB_LIKELY(t != NULL))
		return t;
	return find_task_slow(w, false);
}

/* ---- switching ---- */

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * The rare work at a switch, on the resumed side: CPU time accounting of the
 * task that left (prev) and of the one that runs now (cur), and
 * BTHREAD_LOG_CONTEXT_SWITCH. Runs at every switch once any task needed it
 * (stb_switch_hooks_on). Returns w, so that the hot path keeps nothing live
 * across the call.
 */
static __attribute__((noinline, cold)) struct stb_worker *switch_hooks(struct stb_worker *w)
{
	struct stb_task *cur = w->cur, *prev = w->prev;
	uint64_t now = 0;
	if ((prev && (prev->flags & STB_TASK_F_CPU_CLOCK)) ||
	    (cur && (cur->flags & STB_TASK_F_CPU_CLOCK)))
		now = thread_cpu_ns();
	if (prev && (prev->flags & STB_TASK_F_CPU_CLOCK))
		prev->cpu_ns += now - w->cpu_in;
	if (cur && (cur->flags & STB_TASK_F_CPU_CLOCK))
		w->cpu_in = now;
	if (cur && (cur->flags & STB_TASK_F_LOG_SWITCH))
		fprintf(stderr, "bthread %llu switched in on worker %u (tag %d)\n",
			(unsigned long long)cur->id, w->index, w->pool->tag);
	return w;
}

/*
 * Runs after every switch, on the resumed context: finishes both halves. w is
 * the worker that jumped here (what stb_ctx_jump hands over: this thread's);
 * cur is w->cur, the resumed context itself: the task that left from here
 * (or starts), NULL for the scheduler. Known at most call sites once inlined.
 */
static inline __attribute__((always_inline)) void stb_after_switch(struct stb_worker *w,
								   struct stb_task *cur)
{
	if (cur) {
#if STB_TRACER
		/* On cur's stack now: the worker names it without the switching
		 * bit (abi.h). Its own line only; cur's entry is not written. */
		STB_SW_NOTE(w, w->prev, &w->pub->current, "the worker's current, after");
		__atomic_store_n(&w->pub->current, stb_task_id(cur), __ATOMIC_RELEASE);
#endif
	} else {
#if STB_TRACER
		/* current was reset before the jump. */
		__atomic_store_n(&w->pub->state, STB_WORKER_SCHEDULING, __ATOMIC_RELAXED);
#endif
	}
	if (STB_UNLIKELY(__atomic_load_n(&stb_switch_hooks_on, __ATOMIC_RELAXED)))
		w = switch_hooks(w);
	stb_post_fn post = w->post_fn;
	if (post) {
		STB_SW_NOTE(w, w->prev, &w->post_fn, "the worker's post");
		w->post_fn = NULL;
		post(w, w->prev, w->post_arg);
	}
}

static struct stb_ctx *stb_task_ctx(struct stb_task *t)
{
	return (struct stb_ctx *)&t->pub->sp;
}

#if STB_TRACER
/* What worker w's current says while it switches to `to` (NULL: its loop). */
static inline uint64_t switching_word(const struct stb_task *to)
{
	return to ? stb_task_id(to) | STB_ABI_CURRENT_SWITCHING : 0;
}

/*
 * The gates of a switch one task at a time, when a tracer holds from or to
 * (and in test builds, for the switch hook). Returns w, so that the hot path
 * keeps only w and from live across the call (it reloads to from w).
 */
static __attribute__((noinline, cold)) struct stb_worker *
switch_gates_slow(struct stb_worker *w, struct stb_task *from, struct stb_task *to)
{
	if (from)
		stb_task_set_state(from, STB_TASK_SUSPENDING);
	if (to)
		stb_task_gate_in(to);
	__atomic_store_n(&w->pub->current, switching_word(to), __ATOMIC_RELEASE);
#if defined(STB_TEST_HOOKS)
	if (to && STB_UNLIKELY(stb_test_switch_hook != NULL))
		stb_test_switch_hook(to, STB_TASK_ABOUT_TO_RUN);
#endif
	w->prev = from;
	w->cur = to;
	return w;
}
#endif

/*
 * The single place where a worker switches stacks: from task `from` (NULL:
 * the worker's scheduler context) to task `to` (NULL: the scheduler). This is
 * the tracer's interception point: both changes below pass the STB gate.
 * What it writes (abi.h, "Running"): from's word (SUSPENDING) and the
 * worker's own entry (current) before the jump, from's sp/ip/bp in the jump,
 * current again after it -- lines that this worker owns now; to's entry and
 * struct are only read. Called through stb_jump_stack(), except by
 * bthread_yield, the hottest caller, which has it inlined.
 */
static inline __attribute__((always_inline)) void
jump_stack_inline(struct stb_worker *w, struct stb_task *from, struct stb_task *to,
		  bool from_finished)
{
	struct stb_ctx *fctx = &w->main_ctx, *tctx = &w->main_ctx;
#if STB_TRACER
	/*
	 * from -> SUSPENDING and the worker naming to, as stb_task_set_state and
	 * switch_gates_slow do, with one test of both leases. Loading to's lease
	 * before from's store changes nothing a reader can tell: x86 lets a load
	 * pass an earlier store anyway.
	 */
	struct stb_abi_task *fp = NULL;
	uint64_t held = 0;
	if (from) {
		fp = from->pub;
		fctx = (struct stb_ctx *)&fp->sp;
		held = __atomic_load_n(&fp->trace, __ATOMIC_ACQUIRE);
	}
	if (to) {
		struct stb_abi_task *tp = to->pub;
		tctx = (struct stb_ctx *)&tp->sp;
		held |= __atomic_load_n(&tp->trace, __ATOMIC_ACQUIRE);
	}
#if defined(STB_TEST_HOOKS)
	/* The switch hook is called in the slow path: with one set, every
	 * switch goes there; without, the fast path runs as shipped. */
	held |= __atomic_load_n(&stb_test_switch_hook, __ATOMIC_RELAXED) != NULL;
#endif
	if (STB_UNLIKELY(held != 0)) {
		/* Only w and from (live across the jump anyway) across the call. */
		w = switch_gates_slow(w, from, to);
		to = w->cur;
		fctx = from ? stb_task_ctx(from) : &w->main_ctx;
		tctx = to ? stb_task_ctx(to) : &w->main_ctx;
	} else {
		if (from) {
			STB_SW_NOTE(w, from, &fp->word, "the leaving task's word");
			__atomic_store_n(&fp->word, stb_task_word(from, STB_TASK_SUSPENDING),
					 __ATOMIC_RELEASE);
			STB_SW_NOTE(w, from, &from->seq_word, "the leaving task's seq");
			from->seq_word += 1ull << 32; /* the run ends: the next word's seq */
		}
		STB_SW_NOTE(w, from, &w->pub->current, "the worker's current");
		__atomic_store_n(&w->pub->current, switching_word(to), __ATOMIC_RELEASE);
#if defined(STB_TEST_HOOKS)
		if (STB_UNLIKELY(stb_test_sw_check)) {
			__atomic_fetch_add(&stb_test_sw_fast, 1, __ATOMIC_RELAXED);
			if (to && stb_test_sw_plant) {
				/* A write to the entry switched to: the check must catch it. */
				struct stb_abi_task *tp = to->pub;
				STB_SW_NOTE(w, from, &tp->word, "planted: the entry switched to");
				__atomic_store_n(&tp->word, __atomic_load_n(&tp->word, __ATOMIC_RELAXED),
						 __ATOMIC_RELAXED);
			}
		}
#endif
		STB_SW_NOTE(w, from, &w->prev, "the worker's prev");
		w->prev = from;
		STB_SW_NOTE(w, from, &w->cur, "the worker's cur");
		w->cur = to;
	}
	STB_SW_NOTE(w, from, fctx, "the leaving context (sp, ip, bp)");
#else
	if (from)
		fctx = stb_task_ctx(from);
	if (to)
		tctx = stb_task_ctx(to);
	w->prev = from;
	w->cur = to;
#endif
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
	/* Resumed: the worker is the one the jump back here hands over (a
	 * bthread may resume on another one); of the locals above only the
	 * context that left, from, still holds: it is what runs again now. */
	w = stb_ctx_jump(fctx, tctx, w);
#if defined(STB_ASAN)
	__sanitizer_finish_switch_fiber(from ? from->asan_fake_stack : w->asan_fake_stack, NULL,
					NULL);
#endif
	stb_after_switch(w, from);
}

/*
 * The switch as a function of its own: the innermost runtime frame of every
 * suspended task, the one the reports name (and hide). A task that yielded
 * has bthread_yield there instead.
 */
static __attribute__((noinline)) void stb_jump_stack(struct stb_worker *w, struct stb_task *from,
						    struct stb_task *to, bool from_finished)
{
	jump_stack_inline(w, from, to, from_finished);
}

/* stb_post_ready's arg when the task must be queued without a signal. */
#define STB_POST_YIELD ((void *)1)    /* after a yield: wake-up rule 6 */
#define STB_POST_NOSIGNAL ((void *)2) /* the caller of an urgent BTHREAD_NOSIGNAL start */

/* stb_post_ready's rare half: w's own queue is full. The task may land on
 * another worker's remote queue, where rule 6 does not hold: a yield signals
 * too. */
static __attribute__((noinline, cold)) void post_ready_remote(struct stb_worker *w,
							      struct stb_task *prev, void *arg)
{
	pool_push_remote(w->pool, prev);
	if (arg != STB_POST_NOSIGNAL && !prev->about_to_quit)
		pool_signal_own(w);
}

/*
 * Post-switch action of a yield (or of an urgent start's caller): queue it
 * again, on this worker. arg NULL: and wake an idle worker for it; non-NULL:
 * without -- STB_POST_YIELD after a yield (wake-up rule 6), STB_POST_NOSIGNAL
 * for the caller of an urgent start of a BTHREAD_NOSIGNAL bthread (as bRPC:
 * NOSIGNAL applies to the caller, which thus stays here until the new
 * bthread gives the worker up).
 */
static void stb_post_ready(struct stb_worker *w, struct stb_task *prev, void *arg)
{
#if STB_TRACER
	struct stb_abi_task *pp = prev->pub;
	uint64_t word = stb_task_word(prev, STB_TASK_READY);
	/* The wait block of a READY task says why it is not running (abi.h).
	 * Written once per run of yields: a task that yields in a loop leaves
	 * the entry's second cache line alone. */
	if (STB_UNLIKELY(!prev->yield_published)) {
		STB_SW_NOTE(w, prev, &prev->yield_published, "the leaving task's yield mark");
		prev->yield_published = true;
		STB_SW_NOTE(w, prev, &pp->wait_word, "the leaving task's wait kind");
		__atomic_store_n(&pp->wait_word, STB_ABI_WAIT_WORD(STB_WAIT_YIELD, 0, 0, 0),
				 __ATOMIC_RELAXED);
	}
	/* What stb_task_set_state(prev, STB_TASK_READY) stores (no gate). */
	STB_SW_NOTE(w, prev, &pp->word, "the leaving task's word, after");
	__atomic_store_n(&pp->word, word, __ATOMIC_RELEASE);
#endif
	STB_SW_NOTE(w, prev, &w->rq.bottom, "the worker's queue bottom");
	STB_SW_NOTE(w, prev,
		    &w->rq.buf[__atomic_load_n(&w->rq.bottom, __ATOMIC_RELAXED) & (STB_RQ_CAP - 1)],
		    "the worker's queue cell");
	/* prev ran here, so it belongs to this worker's pool: queue it locally.
	 * Both paths end in a tail call: nothing stays live across a call. */
	if (STB_UNLIKELY(!stb_rq_push(&w->rq, prev))) {
		post_ready_remote(w, prev, arg);
		return;
	}
	if (STB_LIKELY(arg == NULL && !prev->about_to_quit))
		pool_signal_own(w);
}

/*
 * Records the finished occupant's result for joiners and wakes them. Runs
 * after the task was marked DESTROYED (a joiner that returns finds it gone)
 * and before its slot goes back to the free list.
 */
static void task_publish_exit(struct stb_task *t)
{
	struct stb_butex *j = t->join;
	stb_lock(&j->lock);
	t->ret = t->exit_ret;
	t->ret_version = t->version;
	__atomic_store_n(&j->value, (int)t->version, __ATOMIC_RELEASE);
	stb_unlock(&j->lock);
	stb_butex_wake(j, true);
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
	task_publish_exit(prev);
	stb_task_release(prev);
}

/* Leaves the current bthread for the next runnable one (or the scheduler). */
static void stb_switch_out(struct stb_worker *w, stb_post_fn post, void *arg, bool finished)
{
	struct stb_task *from = w->cur;
	struct stb_task *to = stb_find_task(w);
	if (to && (to->flags & STB_TASK_F_WORKER_STACK)) {
		w->pending = to;
		to = NULL;
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

/* ---- spans ---- */

static bthread_create_span_fn stb_span_create;
static bthread_destroy_span_fn stb_span_destroy;
static bthread_end_span_fn stb_span_end;

int bthread_set_span_funcs(bthread_create_span_fn create_fn, bthread_destroy_span_fn destroy_fn,
			   bthread_end_span_fn end_fn)
{
	bool all = create_fn && destroy_fn && end_fn;
	bool none = !create_fn && !destroy_fn && !end_fn;
	if (!all && !none) {
		errno = EINVAL;
		return -1;
	}
	/* The three are read together by starting and ending bthreads. */
	__atomic_store_n(&stb_span_end, end_fn, __ATOMIC_RELAXED);
	__atomic_store_n(&stb_span_destroy, destroy_fn, __ATOMIC_RELAXED);
	__atomic_store_n(&stb_span_create, create_fn, __ATOMIC_RELEASE);
	return 0;
}

/*
 * What a finishing bthread does on its own stack (or its worker's) before it
 * is marked DESTROYED: bthread-local storage destructors, the span, the log.
 */
static void task_exit_hooks(struct stb_task *t)
{
	if (t->keytable && stb_keys_task_exit)
		stb_keys_task_exit(t);
	if (t->span) {
		bthread_end_span_fn end = __atomic_load_n(&stb_span_end, __ATOMIC_ACQUIRE);
		bthread_destroy_span_fn destroy = __atomic_load_n(&stb_span_destroy, __ATOMIC_ACQUIRE);
		if (end)
			end();
		if (destroy)
			destroy(t->span);
		t->span = NULL;
	}
	if (t->attr.flags & BTHREAD_LOG_START_AND_FINISH)
		fprintf(stderr, "bthread %llu finished\n", (unsigned long long)t->id);
}

static __attribute__((noreturn)) void stb_task_exit(struct stb_task *t, void *ret)
{
	t->exit_ret = ret;
	task_exit_hooks(t);
	struct stb_worker *w = stb_worker_self();
	if (t->flags & STB_TASK_F_WORKER_STACK)
		longjmp(w->exit_jmp, 1);
	stb_switch_out(w, stb_post_finish, NULL, true);
	__builtin_unreachable();
}

/* First frame of a bthread: w is the worker whose jump started it. */
static void stb_task_entry(void *arg, void *w)
{
	struct stb_task *t = arg;
#if defined(STB_ASAN)
	__sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
	stb_after_switch(w, t);
	void *ret = t->fn(t->arg);
	stb_task_exit(t, ret);
}

/* Runs a BTHREAD_ATTR_PTHREAD task directly on the worker's stack. */
static void stb_run_on_worker_stack(struct stb_worker *w, struct stb_task *t)
{
#if STB_TRACER
	t->pub->stack_lo = (uint64_t)(uintptr_t)w->main_stack_lo;
	t->pub->stack_hi = (uint64_t)(uintptr_t)w->main_stack_lo + w->main_stack_size;
#endif
	stb_task_gate_in(t);
	w->cur = t;
#if STB_TRACER
	/* No stack switch: on its stack (the worker's) at once. */
	__atomic_store_n(&w->pub->current, stb_task_id(t), __ATOMIC_RELEASE);
	__atomic_store_n(&w->pub->state, STB_WORKER_RUNNING, __ATOMIC_RELAXED);
#endif
	w->prev = NULL;
	if (STB_UNLIKELY(__atomic_load_n(&stb_switch_hooks_on, __ATOMIC_RELAXED)))
		w = switch_hooks(w);
	if (setjmp(w->exit_jmp) == 0) {
		t->exit_ret = t->fn(t->arg);
		task_exit_hooks(t);
	}
	w = stb_worker_self();
	stb_task_set_state(t, STB_TASK_SUSPENDING);
	w->cur = NULL;
#if STB_TRACER
	__atomic_store_n(&w->pub->current, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&w->pub->state, STB_WORKER_SCHEDULING, __ATOMIC_RELAXED);
#endif
	stb_task_set_state(t, STB_TASK_DESTROYED);
	task_publish_exit(t);
	stb_task_release(t);
}

/*
 * True if some queue of pool p holds a task (rule 3 above). Called after the
 * caller's seq_cst decrement of spinning or park_sleepers.
 */
static bool pool_has_work(struct stb_pool *p)
{
	if (__atomic_load_n(&p->ovf_count, __ATOMIC_SEQ_CST) != 0)
		return true;
	uint32_t n = __atomic_load_n(&p->nworkers, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n; i++) {
		struct stb_worker *v = p->workers[i];
		if (__atomic_load_n(&v->rq.bottom, __ATOMIC_SEQ_CST) !=
			    __atomic_load_n(&v->rq.top, __ATOMIC_SEQ_CST) ||
		    __atomic_load_n(&v->remote.enq, __ATOMIC_SEQ_CST) !=
			    __atomic_load_n(&v->remote.deq, __ATOMIC_SEQ_CST))
			return true;
	}
	return false;
}

/* Parks the worker unless the re-check finds a task (rule 4 above). */
static struct stb_task *stb_park(struct stb_worker *w)
{
	struct stb_pool *p = w->pool;
	__atomic_fetch_add(&p->park_sleepers, 1, __ATOMIC_SEQ_CST);
	uint32_t seq = __atomic_load_n(&p->park_seq, __ATOMIC_SEQ_CST);
	struct stb_task *t = stb_find_task(w);
	if (!t && !__atomic_load_n(&stb_world_stopped, __ATOMIC_ACQUIRE)) {
		/* Asleep, it starts nothing: its slots and stacks serve others. */
		stb_task_cache_flush();
		stb_stack_cache_flush();
#if STB_TRACER
		__atomic_store_n(&w->pub->state, STB_WORKER_PARKED, __ATOMIC_RELAXED);
#endif
		stb_futex_wait(&p->park_seq, seq, NULL);
#if STB_TRACER
		__atomic_store_n(&w->pub->state, STB_WORKER_SCHEDULING, __ATOMIC_RELAXED);
		stb_monitor_kick();
#endif
	}
	__atomic_fetch_sub(&p->park_sleepers, 1, __ATOMIC_SEQ_CST);
	return t;
}

/*
 * The idle path of a worker that found no task: spin a little (a hand-off then
 * costs no futex wake), then park; after a wake-up spin again. Returns a task,
 * having passed the baton on (rule 3 above); NULL when the world stopped.
 */
static struct stb_task *idle_wait(struct stb_worker *w)
{
	struct stb_pool *p = w->pool;
	for (;;) {
		struct stb_task *t = NULL;
		if (__atomic_load_n(&p->spinning, __ATOMIC_RELAXED) < stb_spin_max) {
			__atomic_fetch_add(&p->spinning, 1, __ATOMIC_SEQ_CST);
			uint64_t until = stb_now_ns() + STB_SPIN_NS;
			do {
				for (int i = 0; i < 32; i++)
					stb_cpu_relax();
				t = stb_find_task(w);
			} while (!t && stb_now_ns() < until);
			__atomic_fetch_sub(&p->spinning, 1, __ATOMIC_SEQ_CST);
		}
		if (!t)
			t = stb_park(w);
		if (t) {
			if (pool_has_work(p))
				pool_signal(p);
			return t;
		}
		if (__atomic_load_n(&stb_world_stopped, __ATOMIC_ACQUIRE))
			return NULL;
	}
}

static void *stb_worker_main(void *arg)
{
	struct stb_worker *w = arg;
	stb_tls_worker = w;
	stb_tls_cur = &w->cur;
	w->tid = stb_gettid();
	stb_tls_tid = w->tid;
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
	__atomic_store_n(&w->pub->tag, (uint32_t)w->pool->tag, __ATOMIC_RELAXED);
	__atomic_store_n(&w->pub->state, STB_WORKER_SCHEDULING, __ATOMIC_RELEASE);
	stb_monitor_kick(); /* the monitor may have gone to sleep before it started */
#endif
	stb_task_cache_start();
	stb_stack_cache_start();
	char name[16];
	snprintf(name, sizeof(name), "bthread_w%u", w->index);
	pthread_setname_np(pthread_self(), name);
	void (*startfn)(void) = __atomic_load_n(&stb_worker_startfn, __ATOMIC_ACQUIRE);
	void (*tagged)(bthread_tag_t) = __atomic_load_n(&stb_tagged_worker_startfn, __ATOMIC_ACQUIRE);
	if (startfn)
		startfn();
	if (tagged)
		tagged(w->pool->tag);

	for (;;) {
		struct stb_task *t = w->pending;
		w->pending = NULL;
		if (!t)
			t = stb_find_task(w);
		if (!t)
			t = idle_wait(w);
		if (!t)
			break; /* bthread_stop_world */
		if (t->flags & STB_TASK_F_WORKER_STACK) {
			stb_run_on_worker_stack(w, t);
		} else {
#if STB_TRACER
			/* Running tasks until the loop resumes (stb_after_switch). */
			__atomic_store_n(&w->pub->state, STB_WORKER_RUNNING, __ATOMIC_RELAXED);
#endif
			stb_jump_stack(w, NULL, t, false);
		}
	}
	stb_task_cache_flush();
	stb_stack_cache_flush();
#if STB_TRACER
	__atomic_store_n(&w->pub->state, STB_WORKER_STOPPED, __ATOMIC_RELEASE);
#endif
	return NULL;
}

/* $STB_CONCURRENCY (1 .. BTHREAD_MAX_CONCURRENCY), else bRPC's default. */
static int stb_default_concurrency(void)
{
	const char *env = getenv("STB_CONCURRENCY");
	if (env && *env) {
		char *end;
		errno = 0;
		long v = strtol(env, &end, 10);
		if (errno == 0 && *end == '\0' && v >= 1 && v <= STB_MAX_WORKERS)
			return (int)v;
		fprintf(stderr, "stb: ignoring STB_CONCURRENCY=%s (want 1..%d)\n", env,
			STB_MAX_WORKERS);
	}
	return STB_DEFAULT_CONCURRENCY;
}

/* Starts one more worker in pool p. Called with stb_workers_lock held. 0 or errno. */
static int pool_add_worker(struct stb_pool *p)
{
	uint32_t index = stb_nworkers;
	if (index >= STB_MAX_WORKERS)
		return EAGAIN;
	if (__atomic_load_n(&stb_world_stopped, __ATOMIC_ACQUIRE))
		return EPERM;
	struct stb_worker *w;
	if (posix_memalign((void **)&w, STB_CACHELINE, sizeof(*w)) != 0)
		return ENOMEM;
	memset(w, 0, sizeof(*w));
	w->index = index;
	w->pool = p;
	w->rng = 0x9e3779b97f4a7c15ull * (index + 1);
	w->fair_left = STB_REMOTE_FAIR_PICKS;
	stb_mpmc_init(&w->remote);
	w->pub = stb_table_worker(index);
	uint32_t n = p->nworkers;
#if STB_TRACER
	/* Counted before it can name a task: a tracer that reads nworkers and
	 * then the entries misses no running bthread (abi.h). A failed start
	 * leaves an entry that names nothing; the next start takes its index. */
	struct stb_abi_header *wh = stb_table_workers_header();
	if (__atomic_load_n(&wh->nworkers, __ATOMIC_RELAXED) < index + 1)
		__atomic_store_n(&wh->nworkers, index + 1, __ATOMIC_SEQ_CST);
#endif
	p->workers[n] = w;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 8u << 20);
	int rc = pthread_create(&w->thread, &attr, stb_worker_main, w);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		p->workers[n] = NULL;
		free(w);
		return rc == EAGAIN ? EAGAIN : rc;
	}
	__atomic_store_n(&p->nworkers, n + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&stb_nworkers, index + 1, __ATOMIC_RELEASE);
#if STB_TRACER
	stb_monitor_kick(); /* it may run already, unseen by a monitor gone idle */
#endif
	return 0;
}

/* Grows pool p to n workers. Called with stb_workers_lock held. */
static int pool_grow(struct stb_pool *p, uint32_t n)
{
	while (p->nworkers < n) {
		int rc = pool_add_worker(p);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* Pool of tag, created with nworkers workers if it does not exist. Lock held. */
static struct stb_pool *pool_create_locked(int tag, uint32_t nworkers, int *err)
{
	struct stb_pool *p = stb_pools[tag];
	if (p)
		return p;
	if (posix_memalign((void **)&p, STB_CACHELINE, sizeof(*p)) != 0) {
		*err = ENOMEM;
		return NULL;
	}
	memset(p, 0, sizeof(*p));
	p->tag = tag;
	int rc = pool_grow(p, nworkers);
	if (p->nworkers == 0) {
		/* No worker at all: the pool cannot run anything. */
		free(p);
		*err = rc ? rc : EAGAIN;
		return NULL;
	}
	__atomic_store_n(&stb_pools[tag], p, __ATOMIC_RELEASE);
	return p;
}

/* The pool of tag, started with BTHREAD_MIN_CONCURRENCY workers on first use. NULL + errno. */
static struct stb_pool *pool_get(int tag)
{
	struct stb_pool *p = __atomic_load_n(&stb_pools[tag], __ATOMIC_ACQUIRE);
	if (STB_LIKELY(p))
		return p;
	int err = 0;
	pthread_mutex_lock(&stb_workers_lock);
	p = pool_create_locked(tag, BTHREAD_MIN_CONCURRENCY, &err);
	pthread_mutex_unlock(&stb_workers_lock);
	if (!p)
		errno = err;
	return p;
}

static void stb_runtime_init_once(void)
{
	int rc = stb_table_init();
	if (rc != 0)
		fprintf(stderr, "stb: no shared task table (%s); bthreads cannot be traced from "
				"outside this process\n", strerror(-rc));
#if STB_TRACER
	stb_tracer_attach();
	rc = stb_monitor_start();
	if (rc != 0)
		fprintf(stderr, "stb: no monitor thread (%s): run times of running bthreads are "
				"not published\n", strerror(rc));
#endif
	const char *cc = getenv("STB_CPU_CLOCK");
	stb_cpu_clock = cc && strcmp(cc, "1") == 0;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	stb_spin_max = ncpu >= 2 ? (uint32_t)ncpu / 2 : 1;
	pthread_mutex_lock(&stb_workers_lock);
	int n = stb_concurrency_set ? stb_concurrency_req : stb_default_concurrency();
	int err = 0;
	if (pool_create_locked(BTHREAD_TAG_DEFAULT, (uint32_t)n, &err))
		__atomic_store_n(&stb_started, true, __ATOMIC_RELEASE);
	stb_init_err = err;
	pthread_mutex_unlock(&stb_workers_lock);
}

int stb_runtime_init(void)
{
	if (STB_LIKELY(__atomic_load_n(&stb_started, __ATOMIC_ACQUIRE)))
		return 0;
	pthread_once(&stb_init_once, stb_runtime_init_once);
	return __atomic_load_n(&stb_started, __ATOMIC_ACQUIRE) ? 0
							       : (stb_init_err ? stb_init_err : EAGAIN);
}

/* ---- public API: starting ---- */

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

void bthread_attr_set_name(bthread_attr_t *attr, const char *name)
{
	if (!attr)
		return;
	size_t n = name ? strnlen(name, BTHREAD_NAME_MAX_LENGTH) : 0;
	memcpy(attr->name, name ? name : "", n);
	attr->name[n] = '\0';
}

int bthread_getattr(bthread_t bt, bthread_attr_t *attr)
{
	struct stb_task *t = stb_task_live(bt);
	if (!t || !attr || (t->flags & STB_TASK_F_PTHREAD)) {
		errno = EINVAL; /* bRPC: -1 and errno, unlike most bthread_* calls */
		return -1;
	}
	*attr = t->attr;
	return 0;
}

/*
 * Creator of a new task: the bthread or registered pthread that starts it
 * (what stb_task_current() says, from the caller's worker w, NULL on a
 * pthread), and the tag it runs in.
 */
static inline __attribute__((always_inline)) void task_set_creator(struct stb_task *t,
								 struct stb_worker *w, int tag,
								 void *ip)
{
#if STB_TRACER
	struct stb_task *c = w && w->cur ? w->cur : stb_tls_ptask;
	struct stb_abi_task *p = t->pub;
	uint64_t cid = c ? stb_task_id(c) : 0;
	uint32_t tid = w ? (uint32_t)w->tid : (uint32_t)stb_tid_self();
	__atomic_store_n(&p->tag, (uint32_t)tag, __ATOMIC_RELAXED);
	__atomic_store_n(&p->creator_id, cid, __ATOMIC_RELAXED);
	__atomic_store_n(&p->creator_ip, (uint64_t)(uintptr_t)ip, __ATOMIC_RELAXED);
	__atomic_store_n(&p->creator_tid, tid, __ATOMIC_RELAXED);
	/* The coarse clock (a read of the vDSO's page, no TSC): on the line of
	 * the creator fields, which the start writes anyway. */
	__atomic_store_n(&p->created_ns, stb_now_coarse_ns(), __ATOMIC_RELAXED);
#else
	(void)t;
	(void)w;
	(void)tag;
	(void)ip;
#endif
}

/* Ends a task that never ran (its start failed). */
static void task_abort(struct stb_task *t)
{
	stb_stack_put(t->stack);
	t->stack = NULL;
	stb_task_set_state(t, STB_TASK_DESTROYED);
	task_publish_exit(t);
	stb_task_release(t);
}

static int stb_start(bthread_t *tid, const bthread_attr_t *attr, void *(*fn)(void *), void *arg,
		     bool urgent, void *caller_ip)
{
	if (!fn)
		return EINVAL;
	if (!attr)
		attr = &BTHREAD_ATTR_NORMAL;
	if (attr->stack_type > BTHREAD_STACKTYPE_LARGE || attr->tag < BTHREAD_TAG_INVALID ||
	    attr->tag >= BTHREAD_TAG_MAX)
		return EINVAL;
	int rc = stb_runtime_init();
	if (rc != 0)
		return rc;
	if (STB_UNLIKELY(__atomic_load_n(&stb_world_stopped, __ATOMIC_ACQUIRE)))
		return EPERM;
	struct stb_worker *w = stb_worker_self();
	int tag = attr->tag != BTHREAD_TAG_INVALID ? attr->tag : (w ? w->pool->tag : 0);
	struct stb_pool *pool = pool_get(tag);
	if (!pool)
		return errno == ENOMEM ? ENOMEM : EAGAIN;
	struct stb_task *t = stb_task_alloc(attr, fn, arg);
	if (!t)
		return errno == EAGAIN ? EAGAIN : ENOMEM;
	t->tag = tag;
	if (STB_UNLIKELY(stb_cpu_clock))
		t->flags |= STB_TASK_F_CPU_CLOCK;
	if (STB_UNLIKELY((t->flags & STB_TASK_F_SWITCH_HOOKS) && !stb_switch_hooks_on))
		__atomic_store_n(&stb_switch_hooks_on, true, __ATOMIC_RELAXED);
	task_set_creator(t, w, tag, caller_ip);
	stb_task_set_state(t, STB_TASK_CREATED);
	if (!(t->flags & STB_TASK_F_WORKER_STACK)) {
		/* The stack now, in the caller: a failure is the caller's, never a worker's. */
		t->stack = stb_stack_get(attr->stack_type);
		if (!t->stack) {
			int err = errno == ENOMEM ? ENOMEM : EAGAIN;
			task_abort(t);
			return err;
		}
		size_t size = (size_t)((char *)t->stack->top - (char *)t->stack->lo);
		stb_ctx_make(stb_task_ctx(t), t->stack->lo, size, stb_task_entry, t);
#if STB_TRACER
		t->pub->stack_lo = (uint64_t)(uintptr_t)t->stack->lo;
		t->pub->stack_hi = (uint64_t)(uintptr_t)t->stack->top;
#endif
	}
	if (attr->flags & BTHREAD_INHERIT_SPAN) {
		bthread_create_span_fn create = __atomic_load_n(&stb_span_create, __ATOMIC_ACQUIRE);
		if (create)
			t->span = create();
	}
	bthread_t id = stb_task_id(t);
	if (tid)
		*tid = id;
	if (attr->flags & BTHREAD_LOG_START_AND_FINISH)
		fprintf(stderr, "bthread %llu started\n", (unsigned long long)id);
	stb_task_set_state(t, STB_TASK_READY_NO_STACK);
	bool nosignal = (t->flags & STB_TASK_F_NOSIGNAL) != 0;
	if (urgent && w && w->pool == pool && stb_can_suspend() &&
	    !(t->flags & STB_TASK_F_WORKER_STACK)) {
		w->post_fn = stb_post_ready;
		w->post_arg = nosignal ? STB_POST_NOSIGNAL : NULL;
		stb_jump_stack(w, w->cur, t, false);
		return 0;
	}
	if (nosignal && !w)
		stb_tls_nosignal_pool = pool;
	stb_sched_ready(t, nosignal);
	return 0;
}

int bthread_start_urgent(bthread_t *tid, const bthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	return stb_start(tid, attr, fn, arg, true, __builtin_return_address(0));
}

int bthread_start_background(bthread_t *tid, const bthread_attr_t *attr, void *(*fn)(void *),
			     void *arg)
{
	return stb_start(tid, attr, fn, arg, false, __builtin_return_address(0));
}

void bthread_flush(void)
{
	struct stb_worker *w = stb_worker_self();
	struct stb_pool *p = w ? w->pool : stb_tls_nosignal_pool;
	if (!w)
		stb_tls_nosignal_pool = NULL;
	if (p)
		pool_signal(p);
}

int bthread_about_to_quit(void)
{
	struct stb_task *t = stb_task_self();
	if (!t)
		return EPERM;
	if (!(t->attr.flags & BTHREAD_NEVER_QUIT))
		t->about_to_quit = true;
	return 0;
}

/* ---- public API: running bthreads ---- */

/* bthread_yield's rare case: the next task runs on the worker's stack. */
static __attribute__((noinline, cold)) void yield_to_scheduler(struct stb_worker *w,
							       struct stb_task *self,
							       struct stb_task *pending)
{
	w->pending = pending;
	w->post_fn = stb_post_ready;
	w->post_arg = STB_POST_YIELD;
	stb_jump_stack(w, self, NULL, false);
}

int bthread_yield(void)
{
	struct stb_worker *w = stb_worker_self();
	struct stb_task *self = w ? w->cur : NULL;
	if (!self || (self->flags & STB_TASK_F_WORKER_STACK)) {
		sched_yield();
		return 0;
	}
	struct stb_task *to = stb_find_task(w);
	if (!to) {
#if STB_TRACER
		/* No switch: tell the monitor that this is not a stall (abi.h). */
		__atomic_store_n(&w->pub->yields, w->pub->yields + 1, __ATOMIC_RELAXED);
#endif
		return 0;
	}
	if (STB_UNLIKELY(to->flags & STB_TASK_F_WORKER_STACK)) {
		yield_to_scheduler(w, self, to);
		return 0;
	}
	STB_SW_NOTE(w, self, &w->post_fn, "the worker's post");
	w->post_fn = stb_post_ready;
	STB_SW_NOTE(w, self, &w->post_arg, "the worker's post argument");
	w->post_arg = STB_POST_YIELD;
	jump_stack_inline(w, self, to, false);
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

int stb_join(bthread_t id, void **ret, const struct stb_wait *why)
{
	struct stb_task *t = stb_task_lookup(id);
	if (!t)
		return EINVAL;
	if (id == bthread_self())
		return EINVAL;
	uint32_t v = (uint32_t)(id >> 32);
	struct stb_butex *j = t->join;
	struct stb_wait plain;
	if (!why) {
		plain = (struct stb_wait){.word = STB_ABI_WAIT_WORD(STB_WAIT_JOIN, 0, 0, 0),
					  .owner = id};
		why = &plain;
	}
	for (;;) {
		int fin = __atomic_load_n(&j->value, __ATOMIC_ACQUIRE);
		if ((int32_t)((uint32_t)fin - v) >= 0)
			break;
		/* EINTR (an interrupt) or a stale wake: joins are not interruptible. */
		stb_butex_wait_mono(j, fin, 0, why);
	}
	stb_lock(&j->lock);
	uint32_t rv = t->ret_version;
	void *r = t->ret;
	stb_unlock(&j->lock);
	if (ret)
		*ret = rv == v ? r : NULL;
	return 0;
}

int bthread_join(bthread_t id, void **ret)
{
	return stb_join(id, ret, NULL);
}

int bthread_interrupt(bthread_t id)
{
	struct stb_task *t = stb_task_live(id);
	if (!t)
		return EINVAL;
	stb_butex_interrupt(t, (uint32_t)(id >> 32));
	return 0;
}

int bthread_stop(bthread_t id)
{
	struct stb_task *t = stb_task_live(id);
	if (!t)
		return EINVAL;
	uint32_t v = (uint32_t)(id >> 32);
	__atomic_store_n(&t->stopped, v, __ATOMIC_SEQ_CST);
	stb_butex_interrupt(t, v);
	return 0;
}

int bthread_stopped(bthread_t id)
{
	struct stb_task *t = stb_task_live(id);
	if (!t)
		return 1;
	return __atomic_load_n(&t->stopped, __ATOMIC_ACQUIRE) == (uint32_t)(id >> 32);
}

uint64_t bthread_cpu_clock_ns(void)
{
	struct stb_worker *w = stb_worker_self();
	if (!w || !w->cur || !stb_cpu_clock)
		return 0;
	return w->cur->cpu_ns + (thread_cpu_ns() - w->cpu_in);
}

/* ---- public API: workers ---- */

static uint32_t pools_total(void)
{
	return __atomic_load_n(&stb_nworkers, __ATOMIC_ACQUIRE);
}

int bthread_setconcurrency(int num)
{
	if (num < BTHREAD_MIN_CONCURRENCY || num > BTHREAD_MAX_CONCURRENCY)
		return EINVAL;
	int rc = 0;
	pthread_mutex_lock(&stb_workers_lock);
	if (!__atomic_load_n(&stb_started, __ATOMIC_ACQUIRE)) {
		/* As bRPC: the first call sets the value, later ones may only raise it. */
		if (!stb_concurrency_set || num > stb_concurrency_req)
			__atomic_store_n(&stb_concurrency_req, num, __ATOMIC_RELEASE);
		stb_concurrency_set = true;
		goto cleanup;
	}
	uint32_t total = pools_total();
	if ((uint32_t)num < total) {
		rc = EPERM;
		goto cleanup;
	}
	/* New workers go to the pools in turn. */
	for (int tag = 0; pools_total() < (uint32_t)num; tag = (tag + 1) % BTHREAD_TAG_MAX) {
		struct stb_pool *p = stb_pools[tag];
		if (!p)
			continue;
		rc = pool_add_worker(p);
		if (rc != 0)
			break;
	}
cleanup:
	pthread_mutex_unlock(&stb_workers_lock);
	return rc;
}

int bthread_getconcurrency(void)
{
	if (__atomic_load_n(&stb_started, __ATOMIC_ACQUIRE))
		return (int)pools_total();
	pthread_mutex_lock(&stb_workers_lock);
	int n = stb_concurrency_set ? stb_concurrency_req : stb_default_concurrency();
	pthread_mutex_unlock(&stb_workers_lock);
	return n;
}

int bthread_getconcurrency_by_tag(bthread_tag_t tag)
{
	if (tag < 0 || tag >= BTHREAD_TAG_MAX)
		return EINVAL;
	if (!__atomic_load_n(&stb_started, __ATOMIC_ACQUIRE))
		return EPERM;
	struct stb_pool *p = __atomic_load_n(&stb_pools[tag], __ATOMIC_ACQUIRE);
	return p ? (int)__atomic_load_n(&p->nworkers, __ATOMIC_ACQUIRE) : 0;
}

int bthread_setconcurrency_by_tag(int num, bthread_tag_t tag)
{
	if (tag == BTHREAD_TAG_INVALID)
		return 0;
	if (tag < 0 || tag >= BTHREAD_TAG_MAX || num < BTHREAD_MIN_CONCURRENCY ||
	    num > BTHREAD_MAX_CONCURRENCY)
		return EINVAL;
	int rc = stb_runtime_init();
	if (rc != 0)
		return rc;
	pthread_mutex_lock(&stb_workers_lock);
	struct stb_pool *p = stb_pools[tag];
	if (p && p->nworkers > (uint32_t)num)
		rc = EPERM;
	else if (p)
		rc = pool_grow(p, (uint32_t)num);
	else if (!pool_create_locked(tag, (uint32_t)num, &rc))
		rc = rc ? rc : EAGAIN;
	else if (stb_pools[tag]->nworkers < (uint32_t)num)
		rc = EAGAIN;
	pthread_mutex_unlock(&stb_workers_lock);
	return rc;
}

bthread_tag_t bthread_self_tag(void)
{
	struct stb_worker *w = stb_worker_self();
	return w ? w->pool->tag : BTHREAD_TAG_DEFAULT;
}

int bthread_set_worker_startfn(void (*start_fn)(void))
{
	if (!start_fn)
		return EINVAL;
	__atomic_store_n(&stb_worker_startfn, start_fn, __ATOMIC_RELEASE);
	return 0;
}

int bthread_set_tagged_worker_startfn(void (*start_fn)(bthread_tag_t))
{
	if (!start_fn)
		return EINVAL;
	__atomic_store_n(&stb_tagged_worker_startfn, start_fn, __ATOMIC_RELEASE);
	return 0;
}

void bthread_stop_world(void)
{
	if (!__atomic_load_n(&stb_started, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&stb_workers_lock);
	bool first = !__atomic_exchange_n(&stb_world_stopped, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&stb_workers_lock);
	if (!first)
		return;
	struct stb_worker *self = stb_worker_self();
	for (int tag = 0; tag < BTHREAD_TAG_MAX; tag++) {
		struct stb_pool *p = __atomic_load_n(&stb_pools[tag], __ATOMIC_ACQUIRE);
		if (!p)
			continue;
		__atomic_fetch_add(&p->park_seq, 1, __ATOMIC_SEQ_CST);
		stb_futex_wake(&p->park_seq, INT32_MAX);
	}
	/* Pools and workers are frozen now: no new worker can start. */
	for (int tag = 0; tag < BTHREAD_TAG_MAX; tag++) {
		struct stb_pool *p = __atomic_load_n(&stb_pools[tag], __ATOMIC_ACQUIRE);
		uint32_t n = p ? __atomic_load_n(&p->nworkers, __ATOMIC_ACQUIRE) : 0;
		for (uint32_t i = 0; i < n; i++)
			if (p->workers[i] != self)
				pthread_join(p->workers[i]->thread, NULL);
	}
}
