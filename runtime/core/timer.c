/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The timer thread: a binary min-heap of deadlines (CLOCK_MONOTONIC) guarded
 * by one mutex. Callbacks run on the timer thread without the lock held; the
 * runtime's own cancels (a timed wait's timer) that race with a running
 * callback wait for it to return, on a butex (a bthread is suspended, the
 * tracer sees why). Also the public bthread_timer_add/del (del never waits,
 * as bRPC's).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "internal.h"

struct stb_timer {
	uint64_t deadline;
	stb_timer_fn fn;
	void *arg;
	uint32_t gen;        /* id = gen << 32 | index + 1 */
	int32_t heap_pos;    /* -1 when not in the heap */
	uint32_t free_next;  /* index + 1 */
};

static pthread_mutex_t stb_timer_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stb_timer_cond;      /* the timer thread sleeps here */
/* Bumped when a callback returned: cancels wait on it for a running callback. */
static struct stb_butex *stb_timer_done;
static struct stb_timer *stb_timers;       /* entries, indexed by id */
static uint32_t stb_timers_cap;
static uint32_t stb_timer_free;            /* free entries list (index + 1) */
static uint32_t *stb_heap;                 /* entry indexes */
static uint32_t stb_heap_len;
static uint64_t stb_timer_running;         /* id whose callback runs now */
static uint64_t stb_timer_wake_at;         /* deadline the thread sleeps until, 0 = none */
static bool stb_timer_started;
static pthread_t stb_timer_thread;
static __thread bool stb_on_timer_thread;

static bool stb_heap_less(uint32_t a, uint32_t b)
{
	return stb_timers[stb_heap[a]].deadline < stb_timers[stb_heap[b]].deadline;
}

static void stb_heap_swap(uint32_t a, uint32_t b)
{
	uint32_t t = stb_heap[a];
	stb_heap[a] = stb_heap[b];
	stb_heap[b] = t;
	stb_timers[stb_heap[a]].heap_pos = (int32_t)a;
	stb_timers[stb_heap[b]].heap_pos = (int32_t)b;
}

static void stb_heap_up(uint32_t i)
{
	while (i > 0) {
		uint32_t p = (i - 1) / 2;
		if (!stb_heap_less(i, p))
			break;
		stb_heap_swap(i, p);
		i = p;
	}
}

static void stb_heap_down(uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < stb_heap_len && stb_heap_less(l, m))
			m = l;
		if (r < stb_heap_len && stb_heap_less(r, m))
			m = r;
		if (m == i)
			return;
		stb_heap_swap(i, m);
		i = m;
	}
}

static void stb_heap_remove(uint32_t pos)
{
	uint32_t last = --stb_heap_len;
	stb_timers[stb_heap[pos]].heap_pos = -1;
	if (pos != last) {
		stb_heap[pos] = stb_heap[last];
		stb_timers[stb_heap[pos]].heap_pos = (int32_t)pos;
		stb_heap_down(pos);
		stb_heap_up(pos);
	}
}

static void stb_timer_free_entry(uint32_t idx)
{
	stb_timers[idx].gen++;
	stb_timers[idx].free_next = stb_timer_free;
	stb_timer_free = idx + 1;
}

/* The kernel's struct sched_attr (SCHED_ATTR_SIZE_VER1; glibc has none). */
struct stb_sched_attr {
	uint32_t size;
	uint32_t sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime; /* SCHED_OTHER/BATCH: the requested slice (Linux 6.12+) */
	uint64_t sched_deadline;
	uint64_t sched_period;
	uint32_t sched_util_min;
	uint32_t sched_util_max;
};

void stb_thread_wake_fast(void)
{
	prctl(PR_SET_TIMERSLACK, 1ul, 0ul, 0ul, 0ul);
	struct stb_sched_attr a;
	memset(&a, 0, sizeof(a));
	if (syscall(SYS_sched_getattr, 0, &a, sizeof(a), 0) != 0 ||
	    (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH))
		return; /* a real-time or idle thread keeps what it has */
	a.size = sizeof(a);
	a.sched_flags = 0;
	a.sched_runtime = STB_WAKE_FAST_SLICE_NS;
	syscall(SYS_sched_setattr, 0, &a, 0); /* older kernels: no custom slice, no harm */
}

static void *stb_timer_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "bthread_timer");
	stb_thread_wake_fast();
	stb_on_timer_thread = true;
	pthread_mutex_lock(&stb_timer_lock);
	for (;;) {
		if (stb_heap_len == 0) {
			stb_timer_wake_at = 0;
			pthread_cond_wait(&stb_timer_cond, &stb_timer_lock);
			continue;
		}
		uint32_t idx = stb_heap[0];
		struct stb_timer *e = &stb_timers[idx];
		uint64_t now = stb_now_ns();
		if (e->deadline > now) {
			stb_timer_wake_at = e->deadline;
			struct timespec ts = {(time_t)(e->deadline / 1000000000u),
					      (long)(e->deadline % 1000000000u)};
			pthread_cond_timedwait(&stb_timer_cond, &stb_timer_lock, &ts);
			continue;
		}
		stb_heap_remove(0);
		uint64_t id = ((uint64_t)e->gen << 32) | (idx + 1);
		stb_timer_fn fn = e->fn;
		void *farg = e->arg;
		stb_timer_free_entry(idx);
		stb_timer_running = id;
		pthread_mutex_unlock(&stb_timer_lock);
		fn(farg);
		pthread_mutex_lock(&stb_timer_lock);
		stb_timer_running = 0;
		__atomic_fetch_add(&stb_timer_done->value, 1, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&stb_timer_lock);
		stb_butex_wake(stb_timer_done, true);
		pthread_mutex_lock(&stb_timer_lock);
	}
	return NULL;
}

/* Called with the lock held. */
static int stb_timer_start_locked(void)
{
	if (stb_timer_started)
		return 0;
	if (!stb_timer_done) {
		stb_timer_done = stb_butex_new();
		if (!stb_timer_done)
			return ENOMEM;
	}
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&stb_timer_cond, &ca);
	pthread_condattr_destroy(&ca);
	int rc = pthread_create(&stb_timer_thread, NULL, stb_timer_main, NULL);
	if (rc != 0)
		return rc;
	pthread_detach(stb_timer_thread);
	stb_timer_started = true;
	return 0;
}

static int stb_timer_grow(void)
{
	uint32_t cap = stb_timers_cap ? stb_timers_cap * 2 : 256;
	struct stb_timer *t = realloc(stb_timers, cap * sizeof(*t));
	if (!t)
		return ENOMEM;
	stb_timers = t;
	uint32_t *h = realloc(stb_heap, cap * sizeof(*h));
	if (!h)
		return ENOMEM;
	stb_heap = h;
	for (uint32_t i = cap; i-- > stb_timers_cap;) {
		memset(&stb_timers[i], 0, sizeof(stb_timers[i]));
		stb_timers[i].heap_pos = -1;
		stb_timers[i].free_next = stb_timer_free;
		stb_timer_free = i + 1;
	}
	stb_timers_cap = cap;
	return 0;
}

uint64_t stb_timer_add(uint64_t deadline, stb_timer_fn fn, void *arg)
{
	uint64_t id = 0;
	pthread_mutex_lock(&stb_timer_lock);
	if (stb_timer_start_locked() != 0)
		goto cleanup;
	if (!stb_timer_free && stb_timer_grow() != 0)
		goto cleanup;
	uint32_t idx = stb_timer_free - 1;
	struct stb_timer *e = &stb_timers[idx];
	stb_timer_free = e->free_next;
	e->deadline = deadline;
	e->fn = fn;
	e->arg = arg;
	e->heap_pos = (int32_t)stb_heap_len;
	stb_heap[stb_heap_len++] = idx;
	stb_heap_up(stb_heap_len - 1);
	id = ((uint64_t)e->gen << 32) | (idx + 1);
	/* Wake the thread only if this timer is now the earliest. */
	if (stb_heap[0] == idx && (stb_timer_wake_at == 0 || deadline < stb_timer_wake_at))
		pthread_cond_signal(&stb_timer_cond);
cleanup:
	pthread_mutex_unlock(&stb_timer_lock);
	return id;
}

int stb_timer_cancel(uint64_t id, bool wait)
{
	uint32_t idx = (uint32_t)id - 1;
	uint32_t gen = (uint32_t)(id >> 32);
	pthread_mutex_lock(&stb_timer_lock);
	if (idx < stb_timers_cap && stb_timers[idx].gen == gen && stb_timers[idx].heap_pos >= 0) {
		stb_heap_remove((uint32_t)stb_timers[idx].heap_pos);
		stb_timer_free_entry(idx);
		pthread_mutex_unlock(&stb_timer_lock);
		return 0;
	}
	if (stb_timer_running != id || stb_on_timer_thread || !wait) {
		/* Ran already, never was, the callback cancels itself, or the
		 * caller does not wait. */
		int rc = stb_timer_running == id ? 1 : -1;
		pthread_mutex_unlock(&stb_timer_lock);
		return rc;
	}
	/* Its callback runs now: wait until it returned, on the butex. */
	const struct stb_wait why = {.word = STB_ABI_WAIT_WORD(STB_WAIT_TIMER, 0, 0, 0),
				     .object = id};
	while (stb_timer_running == id) {
		int seq = __atomic_load_n(&stb_timer_done->value, __ATOMIC_ACQUIRE);
		pthread_mutex_unlock(&stb_timer_lock);
		stb_butex_wait_mono(stb_timer_done, seq, 0, &why);
		pthread_mutex_lock(&stb_timer_lock);
	}
	pthread_mutex_unlock(&stb_timer_lock);
	return 1;
}

/* ---- public API ---- */

int bthread_timer_add(bthread_timer_t *id, struct timespec abstime, void (*on_timer)(void *),
		      void *arg)
{
	if (!id || !on_timer)
		return EINVAL;
	uint64_t deadline = stb_abstime_to_mono(&abstime);
	uint64_t t = stb_timer_add(deadline, on_timer, arg);
	if (!t)
		return ENOMEM;
	*id = t;
	return 0;
}

int bthread_timer_del(bthread_timer_t id)
{
	if (id == 0)
		return EINVAL;
	int rc = stb_timer_cancel(id, false); /* 1 at once for a running callback, as bRPC */
	return rc < 0 ? EINVAL : rc;
}
