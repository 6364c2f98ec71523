/* SPDX-License-Identifier: Apache-2.0 */
/*
 * butex: a 32-bit value plus a list of waiters. A waiting bthread is queued
 * only after its context is saved (a post-switch action), so a wake can never
 * be lost or resume a task that is still on its CPU. Pthreads wait on a futex
 * in their waiter node. Butex memory is pooled and never returned to the OS.
 */
#include <stdlib.h>
#include <string.h>

#include "bthread/butex.h"
#include "internal.h"

#define STB_BUTEX_SLAB 256u

static struct stb_lock stb_butex_pool_lock;
static struct stb_butex *stb_butex_free_list;

static void stb_butex_reset(struct stb_butex *b)
{
	__atomic_store_n(&b->value, 0, __ATOMIC_RELAXED);
	b->head.next = b->head.prev = &b->head;
}

struct stb_butex *stb_butex_new(void)
{
	stb_lock(&stb_butex_pool_lock);
	struct stb_butex *b = stb_butex_free_list;
	if (!b) {
		struct stb_butex *slab = calloc(STB_BUTEX_SLAB, sizeof(*slab));
		if (!slab) {
			stb_unlock(&stb_butex_pool_lock);
			errno = ENOMEM;
			return NULL;
		}
		for (unsigned i = 1; i < STB_BUTEX_SLAB; i++) {
			slab[i].free_next = stb_butex_free_list;
			stb_butex_free_list = &slab[i];
		}
		b = &slab[0];
	} else {
		stb_butex_free_list = b->free_next;
	}
	stb_unlock(&stb_butex_pool_lock);
	stb_butex_reset(b);
	return b;
}

void stb_butex_free(struct stb_butex *b)
{
	if (!b)
		return;
	stb_lock(&stb_butex_pool_lock);
	b->free_next = stb_butex_free_list;
	stb_butex_free_list = b;
	stb_unlock(&stb_butex_pool_lock);
}

static void stb_waiter_link(struct stb_butex *b, struct stb_waiter *w)
{
	w->next = &b->head;
	w->prev = b->head.prev;
	b->head.prev->next = w;
	b->head.prev = w;
	w->queued = true;
}

static void stb_waiter_unlink(struct stb_waiter *w)
{
	w->prev->next = w->next;
	w->next->prev = w->prev;
	w->next = w->prev = NULL;
	w->queued = false;
}

/*
 * Unlinks a queued waiter, under its butex's lock, and forgets it in its
 * task (a bthread, or a BTHREAD_ATTR_PTHREAD bthread waiting on its worker's
 * stack; NULL for a plain pthread).
 */
static void waiter_detach(struct stb_waiter *w, int result)
{
	stb_waiter_unlink(w);
	w->result = result;
	struct stb_task *t = w->task;
	if (t) {
		__atomic_store_n(&t->wait_butex, NULL, __ATOMIC_RELAXED);
		t->waiter = NULL;
	}
}

/*
 * Resumes a detached waiter, outside the butex lock: makes a bthread runnable
 * again or wakes a pthread. A pthread waiter's node lives on its stack and may
 * vanish once futex is set: nothing reads it after that.
 */
static inline __attribute__((always_inline)) void waiter_resume(struct stb_waiter *w)
{
	if (!w->pthread) {
		struct stb_task *t = w->task;
		stb_task_set_state(t, STB_TASK_READY);
		stb_sched_ready(t, false);
	} else {
		__atomic_store_n(&w->futex, 1, __ATOMIC_RELEASE);
		stb_futex_wake(&w->futex, 1);
	}
}

/*
 * Locks the butex waiter w is queued on. butex_requeue may move a queued
 * waiter to another butex, so its butex is read again under the lock.
 */
static struct stb_butex *waiter_lock(struct stb_waiter *w)
{
	for (;;) {
		struct stb_butex *b = __atomic_load_n(&w->butex, __ATOMIC_ACQUIRE);
		stb_lock(&b->lock);
		if (__atomic_load_n(&w->butex, __ATOMIC_RELAXED) == b)
			return b;
		stb_unlock(&b->lock);
	}
}

static void stb_butex_timeout(void *arg)
{
	struct stb_waiter *w = arg;
	bool mine = false;
	struct stb_butex *b = waiter_lock(w);
	if (w->queued) {
		waiter_detach(w, ETIMEDOUT);
		mine = true;
	}
	stb_unlock(&b->lock);
	if (mine)
		waiter_resume(w);
}

/*
 * Takes a pending bthread_stop/bthread_interrupt of t (flag set for its
 * current version): true if the wait must end with EINTR. Under the lock of
 * the butex named in t->wait_butex (pairs with stb_butex_interrupt).
 */
static bool interrupt_take(struct stb_task *t)
{
	return __atomic_load_n(&t->interrupted, __ATOMIC_SEQ_CST) == t->version &&
	       __atomic_exchange_n(&t->interrupted, 0, __ATOMIC_SEQ_CST) == t->version;
}

#if STB_TRACER
/*
 * The wait block of the task's entry (abi.h). A suspending bthread writes it
 * before SUSPENDED; a thread that blocks while its entry says RUNNING (a
 * registered pthread, a BTHREAD_ATTR_PTHREAD bthread) writes wait_word last
 * (release) and resets it to STB_WAIT_NONE when the wait ends.
 */
static inline __attribute__((always_inline)) void wait_publish(struct stb_task *t,
								 const struct stb_waiter *w,
								 bool running)
{
	struct stb_abi_task *p = t->pub;
	t->yield_published = false;
	static const struct stb_wait plain = {.word = STB_ABI_WAIT_WORD(STB_WAIT_BUTEX, 0, 0, 0)};
	const struct stb_wait *why = w->why ? w->why : &plain;
	uint64_t word = why->word;
	if (w->deadline)
		word |= STB_ABI_WAIT_WORD(0, STB_ABI_WAIT_F_TIMED, 0, 0);
	__atomic_store_n(&p->since_ns, stb_now_coarse_ns(), __ATOMIC_RELAXED);
	__atomic_store_n(&p->wait_object, why->object ? why->object : (uint64_t)(uintptr_t)&w->butex->value, __ATOMIC_RELAXED);
	__atomic_store_n(&p->wait_owner, why->owner, __ATOMIC_RELAXED);
	__atomic_store_n(&p->wait_deadline, w->deadline, __ATOMIC_RELAXED);
	__atomic_store_n(&p->wait_extra, why->extra, __ATOMIC_RELAXED);
	if (running)
		__atomic_store_n(&p->wait_word, word, __ATOMIC_RELEASE);
	else
		__atomic_store_n(&p->wait_word, word, __ATOMIC_RELAXED);
}
#endif

/* Post-switch action of a waiting bthread: queue it, or resume it at once. */
static void stb_butex_post_wait(struct stb_worker *wk, struct stb_task *t, void *arg)
{
	(void)wk;
	struct stb_waiter *w = arg;
	struct stb_butex *b = w->butex;
#if STB_TRACER
	wait_publish(t, w, false);
#endif
	stb_task_set_state(t, STB_TASK_SUSPENDED);
	stb_lock(&b->lock);
	/* Publish where we wait before checking for a stop (pairs with interrupt). */
	__atomic_store_n(&t->wait_butex, b, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&b->value, __ATOMIC_RELAXED) != w->expected) {
		w->result = EWOULDBLOCK;
	} else if (interrupt_take(t)) {
		w->result = EINTR;
	} else {
		stb_waiter_link(b, w);
		t->waiter = w;
		if (w->deadline)
			w->timer = stb_timer_add(w->deadline, stb_butex_timeout, w);
		if (!w->deadline || w->timer) {
			stb_unlock(&b->lock);
			return;
		}
		/* No timer (out of memory): never sleep without the deadline. */
		stb_waiter_unlink(w);
		t->waiter = NULL;
		w->result = ENOMEM;
	}
	__atomic_store_n(&t->wait_butex, NULL, __ATOMIC_RELAXED);
	stb_unlock(&b->lock);
	waiter_resume(w);
}

/*
 * A wait that blocks the calling thread on a futex: plain pthreads, and
 * bthreads running on their worker's stack (t != NULL), which register their
 * waiter so that bthread_stop interrupts them as it does a suspended bthread.
 */
static int wait_on_futex(struct stb_waiter *w, struct stb_task *t)
{
	struct stb_butex *b = w->butex;
	stb_lock(&b->lock);
	if (__atomic_load_n(&b->value, __ATOMIC_RELAXED) != w->expected) {
		stb_unlock(&b->lock);
		return EWOULDBLOCK;
	}
	if (t) {
		__atomic_store_n(&t->wait_butex, b, __ATOMIC_SEQ_CST);
		if (interrupt_take(t)) {
			__atomic_store_n(&t->wait_butex, NULL, __ATOMIC_RELAXED);
			stb_unlock(&b->lock);
			return EINTR;
		}
		t->waiter = w;
	}
	stb_waiter_link(b, w);
	stb_unlock(&b->lock);
	for (;;) {
		if (__atomic_load_n(&w->futex, __ATOMIC_ACQUIRE))
			return w->result;
		struct timespec rel, *relp = NULL;
		if (w->deadline) {
			uint64_t now = stb_now_ns();
			if (now >= w->deadline) {
				b = waiter_lock(w);
				bool mine = w->queued;
				if (mine)
					waiter_detach(w, ETIMEDOUT);
				stb_unlock(&b->lock);
				if (mine)
					return ETIMEDOUT;
				/* A waker unlinked us: wait until it is done with w. */
				while (!__atomic_load_n(&w->futex, __ATOMIC_ACQUIRE))
					stb_futex_wait(&w->futex, 0, NULL);
				return w->result;
			}
			rel.tv_sec = (time_t)((w->deadline - now) / 1000000000u);
			rel.tv_nsec = (long)((w->deadline - now) % 1000000000u);
			relp = &rel;
		}
		stb_futex_wait(&w->futex, 0, relp);
	}
}

static int stb_butex_wait_pthread(struct stb_butex *b, int expected, uint64_t deadline,
				  const struct stb_wait *why)
{
	struct stb_waiter w;
	memset(&w, 0, sizeof(w));
	w.butex = b;
	w.task = stb_task_self(); /* a BTHREAD_ATTR_PTHREAD bthread, or NULL */
	w.pthread = true;
	w.expected = expected;
	w.deadline = deadline;
	w.why = why;
#if STB_TRACER
	struct stb_task *pt = stb_task_current();
	if (pt)
		wait_publish(pt, &w, true);
#endif
	int rc = wait_on_futex(&w, w.task);
#if STB_TRACER
	if (pt)
		__atomic_store_n(&pt->pub->wait_word, STB_ABI_WAIT_WORD(STB_WAIT_NONE, 0, 0, 0),
				 __ATOMIC_RELEASE);
#endif
	return rc;
}

int stb_butex_wait_mono(struct stb_butex *b, int expected, uint64_t deadline,
			const struct stb_wait *why)
{
	if (__atomic_load_n(&b->value, __ATOMIC_ACQUIRE) != expected)
		return EWOULDBLOCK;
	/* As bRPC, a wait shorter than MIN_SLEEP_US (2 us) times out at once. */
	if (deadline && stb_now_ns() + 2000u >= deadline)
		return ETIMEDOUT;
	if (!stb_can_suspend())
		return stb_butex_wait_pthread(b, expected, deadline, why);

	struct stb_waiter w;
	memset(&w, 0, sizeof(w));
	w.butex = b;
	w.task = stb_task_self();
	w.expected = expected;
	w.deadline = deadline;
	w.why = why;
	stb_sched_suspend(stb_butex_post_wait, &w);
	if (w.timer)
		stb_timer_cancel(w.timer, true); /* its callback uses w: wait for it */
	return w.result;
}

/* The common wake: the first waiter, if any. */
static int butex_wake_one(struct stb_butex *b)
{
	struct stb_waiter *w = NULL;
	stb_lock(&b->lock);
	if (b->head.next != &b->head) {
		w = b->head.next;
		waiter_detach(w, 0);
	}
	stb_unlock(&b->lock);
	if (!w)
		return 0;
	waiter_resume(w);
	return 1;
}

int stb_butex_wake_n(struct stb_butex *b, size_t n, bthread_t except)
{
	if (n == 1 && except == 0)
		return butex_wake_one(b);
	struct stb_waiter *list = NULL;
	int woken = 0;
	stb_lock(&b->lock);
	struct stb_waiter *w = b->head.next;
	while (w != &b->head && (size_t)woken < n) {
		struct stb_waiter *next = w->next;
		if (except && w->task && stb_task_id(w->task) == except) {
			w = next;
			continue;
		}
		waiter_detach(w, 0);
		w->next = list;
		list = w;
		woken++;
		w = next;
	}
	stb_unlock(&b->lock);
	/* Outside the lock. A node may vanish once its owner runs: read it first. */
	while (list) {
		w = list;
		list = w->next;
		waiter_resume(w);
	}
	return woken;
}

int stb_butex_wake(struct stb_butex *b, bool all)
{
	return stb_butex_wake_n(b, all ? SIZE_MAX : 1, 0);
}

/* Wakes one waiter of b1 and moves the others to b2. */
static int butex_requeue_impl(struct stb_butex *b1, struct stb_butex *b2)
{
	if (b1 == b2)
		return stb_butex_wake_n(b1, 1, 0);
	/* Both locks, in address order. */
	struct stb_butex *first = b1 < b2 ? b1 : b2, *second = b1 < b2 ? b2 : b1;
	stb_lock(&first->lock);
	stb_lock(&second->lock);
	struct stb_waiter *woken = NULL;
	if (b1->head.next != &b1->head) {
		woken = b1->head.next;
		waiter_detach(woken, 0);
	}
	while (b1->head.next != &b1->head) {
		struct stb_waiter *w = b1->head.next;
		stb_waiter_unlink(w);
		__atomic_store_n(&w->butex, b2, __ATOMIC_RELEASE);
		if (w->task && __atomic_load_n(&w->task->wait_butex, __ATOMIC_RELAXED) == b1)
			__atomic_store_n(&w->task->wait_butex, b2, __ATOMIC_SEQ_CST);
		stb_waiter_link(b2, w);
	}
	stb_unlock(&second->lock);
	stb_unlock(&first->lock);
	if (woken)
		waiter_resume(woken);
	return woken ? 1 : 0;
}

void stb_butex_interrupt(struct stb_task *t, uint32_t version)
{
	__atomic_store_n(&t->interrupted, version, __ATOMIC_SEQ_CST);
	struct stb_butex *b = __atomic_load_n(&t->wait_butex, __ATOMIC_SEQ_CST);
	if (!b)
		return;
	struct stb_waiter *w = NULL;
	stb_lock(&b->lock);
	if (__atomic_load_n(&t->wait_butex, __ATOMIC_RELAXED) == b && t->waiter &&
	    t->waiter->queued && __atomic_load_n(&t->version, __ATOMIC_ACQUIRE) == version &&
	    __atomic_exchange_n(&t->interrupted, 0, __ATOMIC_SEQ_CST) == version) {
		w = t->waiter;
		waiter_detach(w, EINTR);
	}
	stb_unlock(&b->lock);
	if (w)
		waiter_resume(w);
}

/* ---- public API ---- */

static struct stb_butex *stb_butex_of(void *butex)
{
	return (struct stb_butex *)((char *)butex - offsetof(struct stb_butex, value));
}

void *butex_create(void)
{
	struct stb_butex *b = stb_butex_new();
	return b ? &b->value : NULL;
}

void butex_destroy(void *butex)
{
	if (butex)
		stb_butex_free(stb_butex_of(butex));
}

int butex_wait(void *butex, int expected, const struct timespec *abstime)
{
	if (!butex) {
		errno = EINVAL;
		return -1;
	}
	int rc = stb_butex_wait_mono(stb_butex_of(butex), expected, stb_abstime_to_mono(abstime),
				     NULL);
	if (rc) {
		stb_errno_set(rc); /* may run on another worker now */
		return -1;
	}
	return 0;
}

int butex_wake(void *butex)
{
	return butex ? stb_butex_wake(stb_butex_of(butex), false) : 0;
}

int butex_wake_all(void *butex)
{
	return butex ? stb_butex_wake(stb_butex_of(butex), true) : 0;
}

int butex_wake_n(void *butex, size_t n)
{
	return butex ? stb_butex_wake_n(stb_butex_of(butex), n, 0) : 0;
}

int butex_wake_except(void *butex, bthread_t excluded)
{
	return butex ? stb_butex_wake_n(stb_butex_of(butex), SIZE_MAX, excluded) : 0;
}

int butex_requeue(void *butex1, void *butex2)
{
	if (!butex1 || !butex2)
		return 0;
	return butex_requeue_impl(stb_butex_of(butex1), stb_butex_of(butex2));
}

int bthread_usleep(uint64_t microseconds)
{
	struct stb_task *t = stb_task_self();
	if (!stb_can_suspend()) {
		struct timespec ts = {(time_t)(microseconds / 1000000u),
				      (long)(microseconds % 1000000u) * 1000};
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		return 0;
	}
	if (microseconds == 0)
		return bthread_yield(); /* as bRPC: a yield, no interrupt taken */
	uint64_t deadline = stb_now_ns() + microseconds * 1000u;
	if (deadline == 0)
		deadline = 1;
	static const struct stb_wait why = {.word = STB_ABI_WAIT_WORD(STB_WAIT_SLEEP, 0, 0, 0)};
	for (;;) {
		int v = __atomic_load_n(&t->sleep->value, __ATOMIC_ACQUIRE);
		int rc = stb_butex_wait_mono(t->sleep, v, deadline, &why);
		if (rc == ETIMEDOUT) {
			/* A wait of less than 2 us times out at once (the butex's
			 * minimum, as bRPC's): after a spurious wake that close to
			 * the deadline, the rest is yielded away, never cut short. */
			while (stb_now_ns() < deadline)
				bthread_yield();
			return 0;
		}
		if (rc == EINTR) {
			/* This sleep took the interrupt (bthread_stop, or one
			 * pending from before it began); later sleeps sleep, as
			 * bRPC's. ESTOP when the bthread was stopped. */
			bool stopped = __atomic_load_n(&t->stopped, __ATOMIC_ACQUIRE) == t->version;
			stb_errno_set(stopped ? ESTOP : EINTR); /* may run on another worker now */
			return -1;
		}
		/* Spurious (stale wake of the slot's butex): sleep on. */
	}
}
