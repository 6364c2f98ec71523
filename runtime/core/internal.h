/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal structures of the bthread runtime shared between its files: tasks,
 * workers, butex waiters, stacks, timers and the small helpers (clocks,
 * futex, spin lock) they use. Nothing here is exported from libbthread.
 */
#ifndef STB_RUNTIME_CORE_INTERNAL_H
#define STB_RUNTIME_CORE_INTERNAL_H

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bthread/bthread.h"
#include "context.h"
#include "stb/abi.h"
#include "util.h"

#ifndef STB_TRACER
#define STB_TRACER 1
#endif

#define STB_LIKELY(x) __builtin_expect(!!(x), 1)
#define STB_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define STB_CACHELINE 64
#define STB_ALIGNED_CL __attribute__((aligned(STB_CACHELINE)))

#if defined(__SANITIZE_ADDRESS__)
#define STB_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define STB_TSAN 1
#endif

/* ---- small helpers ---- */

static inline void stb_cpu_relax(void)
{
	__builtin_ia32_pause();
}

static inline uint64_t stb_now_coarse_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Sets errno after a call that may have suspended the caller. glibc declares
 * __errno_location() const, so the compiler may reuse an errno address taken
 * before the switch, and a bthread can resume on another worker: errno would
 * land in that other thread. Not inlined, so the address is taken afresh.
 */
static __attribute__((noinline, unused)) void stb_errno_set(int e)
{
	errno = e;
}

/* Reads errno afresh (same reason: code that can suspend, loops that would hoist it). */
static __attribute__((noinline, unused)) int stb_errno_get(void)
{
	return errno;
}

/* CLOCK_REALTIME abstime -> CLOCK_MONOTONIC deadline in ns (0 if abstime NULL). */
uint64_t stb_abstime_to_mono(const struct timespec *abstime);

static inline long stb_futex_wait(uint32_t *addr, uint32_t expected, const struct timespec *rel)
{
	return syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, expected, rel, NULL, 0);
}

static inline long stb_futex_wake(uint32_t *addr, int n)
{
	return syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static inline pid_t stb_gettid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/*
 * A small lock for short critical sections (butex lists, overflow queue):
 * 0 free, 1 locked, 2 locked with sleepers. Never held across a switch.
 */
struct stb_lock {
	uint32_t v;
};
void stb_lock_slow(struct stb_lock *l);
static inline void stb_lock(struct stb_lock *l)
{
	uint32_t z = 0;
	if (STB_LIKELY(__atomic_compare_exchange_n(&l->v, &z, 1, false, __ATOMIC_ACQUIRE,
						   __ATOMIC_RELAXED)))
		return;
	stb_lock_slow(l);
}
static inline void stb_unlock(struct stb_lock *l)
{
	if (STB_UNLIKELY(__atomic_exchange_n(&l->v, 0, __ATOMIC_RELEASE) == 2))
		stb_futex_wake(&l->v, 1);
}

/* ---- stacks (stack.c) ---- */

struct stb_stack {
	void *lo;            /* lowest usable address (just above the guard page) */
	size_t size;         /* bytes mapped from lo: its class's size and the color room */
	void *top;           /* where its first frame starts: lo + size less its color;
				top - lo is at least its class's size */
	unsigned type;       /* BTHREAD_STACKTYPE_* */
	bool cold;           /* its pages were given back (MADV_DONTNEED) */
	struct stb_stack *next;
};

/*
 * Returns a stack of the given type (SMALL, NORMAL, LARGE; others: NORMAL)
 * from the pool or carved from a slab. NULL with errno EAGAIN when no stack
 * can be mapped (a message on stderr, rate-limited, names vm.max_map_count)
 * or ENOMEM. Thread-safe; never blocks on anything but a short lock.
 */
struct stb_stack *stb_stack_get(unsigned type);
/* Returns a stack to its pool (its pages are given back beyond the pool's warm part). Accepts NULL. */
void stb_stack_put(struct stb_stack *s);

/* ---- tasks (task.c) ---- */

/* struct stb_task.flags */
#define STB_TASK_F_NOSIGNAL 0x1u     /* start without waking an idle worker */
#define STB_TASK_F_WORKER_STACK 0x2u /* runs on its worker's stack (BTHREAD_ATTR_PTHREAD) */
#define STB_TASK_F_PTHREAD 0x4u      /* a pthread registered for tracing */
#define STB_TASK_F_LOG_SWITCH 0x8u   /* BTHREAD_LOG_CONTEXT_SWITCH */
#define STB_TASK_F_CPU_CLOCK 0x10u   /* count its CPU time ($STB_CPU_CLOCK=1) */
/* Anything to do at a switch beyond the state changes (one test of flags). */
#define STB_TASK_F_SWITCH_HOOKS (STB_TASK_F_LOG_SWITCH | STB_TASK_F_CPU_CLOCK)

struct stb_butex;
struct stb_waiter;
struct stb_wait;
struct stb_worker;

struct stb_task {
	struct stb_abi_task *pub;      /* table entry, or &own when untraceable */
	bthread_t id;                  /* version << 32 | slot of the current occupant */
	uint32_t slot;
	uint32_t version;              /* version of the current/last occupant */
	uint64_t seq_word;             /* run sequence number << 32 (mirrors pub->word) */
	bool yield_published;          /* pub->wait_word says STB_WAIT_YIELD (tracer builds) */
	uint32_t flags;
	int tag;                       /* worker pool */
	struct stb_stack *stack;
	void *(*fn)(void *);
	void *arg;
	void *ret;                     /* return value of the occupant ret_version */
	void *exit_ret;                /* return value of the current occupant, until published */
	uint32_t ret_version;
	uint32_t stopped;              /* version that bthread_stop() stopped (sticky) */
	uint32_t interrupted;          /* version whose next/current butex wait ends with EINTR */
	bool about_to_quit;            /* bthread_about_to_quit */
	struct stb_butex *wait_butex;  /* butex the task waits on, under that butex's lock */
	struct stb_waiter *waiter;     /* its waiter node, under the same lock */
	uint32_t free_next;            /* free chain link (slot + 1), 0 = end (task.c) */
	uint32_t chain_next;           /* first of a chain: the next chain (slot + 1) */
	uint32_t chain_tail;           /* first of a chain: its last slot + 1 */
	uint32_t chain_len;            /* first of a chain: its length */
	struct stb_task *next;         /* run-queue overflow link */
	struct stb_butex *join;        /* value = version of the last finished occupant */
	struct stb_butex *sleep;       /* private butex of bthread_usleep */
	bthread_attr_t attr;           /* as started (bthread_getattr) */
	void *keytable;                /* bthread-local storage (keys), NULL = none */
	void *span;                    /* span context (bthread_set_span_funcs), NULL = none */
	uint64_t cpu_ns;               /* CPU time before the current run (STB_CPU_CLOCK) */
#if defined(STB_ASAN)
	void *asan_fake_stack;
#endif
#if defined(STB_TSAN)
	void *tsan_fiber;
#endif
	struct stb_abi_task own;       /* published state when the slot is untraceable */
} STB_ALIGNED_CL; /* no line shared with a neighbour (sched.c) */

/*
 * Called on a finishing bthread (its own stack, or its worker's for
 * BTHREAD_ATTR_PTHREAD) before it is marked DESTROYED, when t->keytable is
 * set: runs the bthread-local storage destructors and frees or returns the
 * table. Defined by the bthread-local storage module (weak: absent when that
 * module is not linked).
 */
void stb_keys_task_exit(struct stb_task *t) __attribute__((weak));

/*
 * Allocates a task slot (new version) and publishes its id, name and flags;
 * the caller publishes its tag and creator, then sets it CREATED, and its
 * stack bounds before its first run. NULL+errno on ENOMEM.
 */
struct stb_task *stb_task_alloc(const bthread_attr_t *attr, void *(*fn)(void *), void *arg);
/* Returns a DESTROYED task's slot to the free list. */
void stb_task_release(struct stb_task *t);
/* Slots and stacks cached by the calling thread (a worker: no lock and no
 * shared line on most starts and exits). start: from now on; flush: give
 * them back (a worker that parks or stops). Not for other threads. */
void stb_task_cache_start(void);
void stb_task_cache_flush(void);
void stb_stack_cache_start(void);
void stb_stack_cache_flush(void);
/* The task with this id if the id was ever issued (it may have finished); NULL otherwise. */
struct stb_task *stb_task_lookup(bthread_t id);
/* The task of id if it has not finished yet; NULL otherwise (never issued, or finished). */
struct stb_task *stb_task_live(bthread_t id);
/* Task by slot, or NULL if the slot was never allocated. */
struct stb_task *stb_task_at(uint32_t slot);
/* Number of slots ever allocated. */
uint32_t stb_task_slots(void);

static inline bthread_t stb_task_id(const struct stb_task *t)
{
	return t->id;
}

#if defined(STB_TEST_HOOKS)
/* Test hook (bthread_test library only): called on the switching worker,
 * before the stack switch, after t's word said SUSPENDING (state
 * STB_TASK_SUSPENDING) or after the worker named t as the task it switches to
 * (state STB_TASK_ABOUT_TO_RUN: current = t | STB_ABI_CURRENT_SWITCHING). */
extern void (*stb_test_switch_hook)(struct stb_task *t, unsigned state);
/* Test hook (tracer/trace.c): the next stb_test_unanswered_signals signal
 * capture requests are not sent, as if their thread got no CPU before the
 * timeout. */
extern int stb_test_unanswered_signals;
#endif

void stb_gate_wait(struct stb_task *t);

/* The task word of t in state (the current run's seq). */
static inline uint64_t stb_task_word(const struct stb_task *t, unsigned state)
{
	return t->seq_word | state;
}

/*
 * The gate before a worker names t as the task it switches to (abi.h): a
 * plain load of the lease; waits while a trace is in progress.
 */
static inline void stb_task_gate_in(struct stb_task *t)
{
#if STB_TRACER
	if (STB_UNLIKELY(__atomic_load_n(&t->pub->trace, __ATOMIC_ACQUIRE) != 0))
		stb_gate_wait(t);
#else
	(void)t;
#endif
}

/*
 * Changes a task's word, everywhere but on the switch path: there sched.c
 * (jump_stack_inline, stb_post_ready) stores the words itself, the same.
 * Costs one release store when no tracer holds the task. SUSPENDING (a run ends) passes the gate first (a
 * plain load of the lease; waits while a trace is in progress) and is stored
 * with the run's seq; every later state carries seq + 1. A bthread's word
 * never says ABOUT_TO_RUN or RUNNING (abi.h: its worker's current does).
 */
static inline void stb_task_set_state(struct stb_task *t, unsigned state)
{
#if STB_TRACER
	struct stb_abi_task *p = t->pub;
	if (state == STB_TASK_SUSPENDING) {
		if (STB_UNLIKELY(__atomic_load_n(&p->trace, __ATOMIC_ACQUIRE) != 0))
			stb_gate_wait(t);
		__atomic_store_n(&p->word, stb_task_word(t, state), __ATOMIC_RELEASE);
		t->seq_word += 1ull << 32;
#if defined(STB_TEST_HOOKS)
		if (STB_UNLIKELY(stb_test_switch_hook != NULL))
			stb_test_switch_hook(t, state);
#endif
		return;
	}
	__atomic_store_n(&p->word, stb_task_word(t, state), __ATOMIC_RELEASE);
#else
	(void)t;
	(void)state;
#endif
}

/* The state t's word says (raw: a running bthread's word says READY or
 * READY_NO_STACK; stb_task_running_here() tells). */
static inline unsigned stb_task_state(const struct stb_task *t)
{
	return STB_ABI_STATE(__atomic_load_n(&t->pub->word, __ATOMIC_ACQUIRE));
}

/* ---- shared table (table.c) ---- */

struct stb_table {
	void *base;                    /* mapping, NULL when there is no table */
	size_t size;
	int fd;                        /* BPF map fd or memfd, -1 */
	uint32_t capacity;             /* task slots published */
	struct stb_abi_header *hdr;
};
extern struct stb_table stb_table;

/* Creates the table (BPF map, else memfd). Failure leaves every task untraceable. */
int stb_table_init(void);
/* Worker index's entry (index < STB_ABI_MAX_WORKERS): the table's, or without
 * a table one of a private array, so that the in-process tracer finds every
 * worker's current in one place either way. */
struct stb_abi_worker *stb_table_worker(uint32_t index);
/* The header whose nworkers counts the entries above: the table's, or a
 * private one without a table. */
struct stb_abi_header *stb_table_workers_header(void);
struct stb_abi_task *stb_table_task(uint32_t slot);   /* NULL beyond capacity */
void stb_table_count(__u64 *counter, uint64_t n);  /* atomic add to a header counter */
/* A task slot beyond the capacity: counted in header.untraceable, and said
 * once on stderr (naming STB_TABLE_CAPACITY). Thread-safe. */
void stb_table_untraceable(uint32_t slot);

/* ---- workers and scheduling (sched.c) ---- */

struct stb_worker;
typedef void (*stb_post_fn)(struct stb_worker *w, struct stb_task *prev, void *arg);

/* Starts the runtime if needed (idempotent, thread-safe). 0 or errno. */
int stb_runtime_init(void);
/* Current worker of this thread, or NULL on a non-worker pthread. */
struct stb_worker *stb_worker_self(void);
/* Task running on this thread (bthread or worker-stack task), or NULL. */
struct stb_task *stb_task_self(void);

/* Where this thread's worker keeps the task it runs (sched.c sets it when the
 * worker starts); NULL on other threads. */
extern __thread struct stb_task *const *stb_tls_cur __attribute__((tls_model("initial-exec")));

/*
 * stb_task_self() without a call, for the fast paths of keys and locks. Only
 * where nothing between the read and the use can switch: a bthread may
 * resume on another thread, and the compiler may keep a TLS address.
 */
static inline struct stb_task *stb_task_here(void)
{
	struct stb_task *const *cur = stb_tls_cur;
	return cur ? *cur : NULL;
}

/* The caller as an owner word (abi.h, STB_ABI_OWNER_*): its bthread's id (a
 * registered pthread's too), or its flagged kernel tid. Never 0. */
uint64_t stb_owner_self_slow(void);
static inline uint64_t stb_owner_self(void)
{
	struct stb_task *t = stb_task_here();
	return t ? t->id : stb_owner_self_slow();
}
/* True when the caller runs on its own bthread stack (can suspend). */
bool stb_can_suspend(void);
/*
 * The task whose table entry describes the calling thread: the running
 * bthread (also on a worker's stack) or the registered pthread; NULL for
 * other pthreads.
 */
struct stb_task *stb_task_current(void);
/* Sets (NULL: clears) the registered-pthread task of the calling thread (tracer). */
void stb_pthread_task_set(struct stb_task *t);
/* Kernel tid of the calling thread (cached). */
pid_t stb_tid_self(void);

/*
 * Makes t runnable (state READY or READY_NO_STACK must already be set) and
 * queues it in its pool: on the caller's worker when that is one of the pool,
 * otherwise on a worker's remote queue. Wakes an idle worker of the pool
 * unless nosignal. Never fails.
 */
void stb_sched_ready(struct stb_task *t, bool nosignal);

/*
 * Suspends the calling bthread: switches to the next runnable task (or the
 * worker's scheduler) and runs post(w, caller, arg) right after the caller's
 * context is saved. post decides where the caller goes (run queue, butex list,
 * nowhere when finished). Returns when the caller is resumed.
 */
void stb_sched_suspend(stb_post_fn post, void *arg);

/* Task on worker index w's current slot for signal mode (tracer). */
struct stb_task *stb_worker_current(struct stb_worker *w);

/*
 * True when t runs on the calling thread, past its switch: the bthread this
 * worker's published current names (not switching), or the calling thread's
 * registered pthread. For a signal handler on that thread (async-signal-safe).
 */
bool stb_task_running_here(const struct stb_task *t);

/* Joins id publishing why (NULL: a plain join). bthread_join's contract. */
int stb_join(bthread_t id, void **ret, const struct stb_wait *why);

/* ---- the monitor (monitor.c) ---- */

/* Starts the monitor thread if there is a table (once). 0 or errno. */
int stb_monitor_start(void);
/* A worker left its parking lot: wakes the monitor if it sleeps. Not on the switch path. */
void stb_monitor_kick(void);

/* ---- butex (butex.c) ---- */

struct stb_waiter {
	struct stb_waiter *prev, *next; /* in the butex list, under its lock */
	struct stb_butex *butex;
	struct stb_task *task;          /* waiting task; NULL for a plain pthread */
	bool pthread;                   /* blocks its thread on futex (pthread, worker stack) */
	uint32_t futex;                 /* pthread waiter: becomes 1 when woken */
	int expected;
	int result;                     /* 0, ETIMEDOUT, EINTR, EWOULDBLOCK */
	bool queued;                    /* in the list (under the butex lock) */
	uint64_t deadline;              /* CLOCK_MONOTONIC ns, 0 = none */
	uint64_t timer;                 /* timer id, 0 = none */
	const struct stb_wait *why;     /* published while suspended, NULL = butex */
};

struct stb_butex {
	int value;                      /* first: butex_create returns &value */
	struct stb_lock lock;
	struct stb_waiter head;         /* circular list sentinel */
	struct stb_butex *free_next;
};

/*
 * Why a task waits: what a blocking call publishes in the task's wait block
 * (include/stb/abi.h) when it suspends. word is STB_ABI_WAIT_WORD(kind, flags,
 * events, fd); object 0 means the butex itself; owner and extra as abi.h says
 * for the kind. The deadline comes from the wait itself.
 */
struct stb_wait {
	uint64_t word;
	uint64_t object;
	uint64_t owner;
	uint64_t extra;
};

struct stb_butex *stb_butex_new(void);
void stb_butex_free(struct stb_butex *b);
/*
 * butex_wait on an internal butex with a CLOCK_MONOTONIC deadline (0 = none).
 * why (NULL: a plain butex wait) is published in the caller's table entry
 * while it is suspended.
 */
int stb_butex_wait_mono(struct stb_butex *b, int expected, uint64_t deadline,
			const struct stb_wait *why);
int stb_butex_wake(struct stb_butex *b, bool all);
/* Wakes up to n waiters, skipping the bthread except (0: none). Returns the number woken. */
int stb_butex_wake_n(struct stb_butex *b, size_t n, bthread_t except);
/* Interrupts the current or next butex wait of t's occupant `version` (bthread_stop). */
void stb_butex_interrupt(struct stb_task *t, uint32_t version);

/* ---- timers (timer.c) ---- */

typedef void (*stb_timer_fn)(void *arg);
/* Runs fn(arg) on the timer thread at CLOCK_MONOTONIC deadline. Returns an id (never 0) or 0 on ENOMEM. */
uint64_t stb_timer_add(uint64_t deadline, stb_timer_fn fn, void *arg);
/*
 * Cancels a timer. Returns 0 if it was removed before running; 1 if its
 * callback was running: with wait, after it returned (a bthread waits on a
 * butex, a pthread on the timer lock; from the callback itself it returns at
 * once), else at once; -1 if the id is unknown or the timer already ran.
 */
int stb_timer_cancel(uint64_t id, bool wait);

/*
 * For the runtime's own threads that wake, work for microseconds and sleep
 * again (the timer thread, the fd dispatcher): asks the kernel for a short
 * slice (EEVDF's custom slice, Linux 6.12+, no privilege needed), so that on
 * a busy CPU they run at once instead of after the running thread's slice,
 * and for a timer slack of 1 ns (timers fire when due, not up to 50 us
 * later). Best effort; keeps the thread's policy and nice. Calling thread only.
 */
#define STB_WAKE_FAST_SLICE_NS 100000u
void stb_thread_wake_fast(void);

/* ---- fd waits (fd.c) ---- */
/* Nothing shared. */

/*
 * ---- the tracer's attach point ----
 * The runtime knows nothing of the in-process tracer (runtime/tracer/) but
 * this: when built with tracer support it calls stb_tracer_attach() once at
 * start-up, after the shared table exists and before the first worker runs,
 * and it never unmaps a stack while a tracer reads one (stb_stack_readers).
 */
#if STB_TRACER
/* Defined by the tracer: reads its configuration, installs its signals. */
void stb_tracer_attach(void);
#endif
/* Tracers copying a task's stack right now; owned by stack.c. A tracer
 * increments it (seq_cst) before it reads a stack address from the table and
 * decrements it when the copy is done. */
extern uint32_t stb_stack_readers;

#endif /* STB_RUNTIME_CORE_INTERNAL_H */
