/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bthread API: M:N threads (bthreads) on worker pthreads, with mutexes,
 * condition variables, sleeps and fd waits that suspend only the calling
 * bthread. Source-compatible with bRPC's bthread C API where names overlap.
 */
#ifndef STB_BTHREAD_BTHREAD_H
#define STB_BTHREAD_BTHREAD_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <bthread/errno.h>
#include <bthread/types.h>
#include <stb/export.h>

STB_BEGIN_DECLS

/*
 * errno and suspension: a bthread may resume on another worker thread after
 * any call that can suspend it, and glibc declares __errno_location() const,
 * so a compiler may reuse an errno address computed before such a call. The
 * runtime sets errno after the switch, on the right thread; read it in a
 * separate (non-inlined) function, or compile bthread code with
 * -D__const__=__unused__ as bRPC recommends, if it is read right after a call
 * in the same expression sequence.
 */


/* Sets *attr to BTHREAD_ATTR_NORMAL. Returns 0, or EINVAL if attr is NULL. */
STB_EXPORT int bthread_attr_init(bthread_attr_t *attr);
/* Nothing to release; returns 0 (EINVAL if attr is NULL). */
STB_EXPORT int bthread_attr_destroy(bthread_attr_t *attr);
/*
 * Stores the attributes bthread bt was started with (name as copied at
 * start) in *attr. Returns 0, or -1 with errno EINVAL (as bRPC) when bt is
 * not a live bthread or attr is NULL. Thread-safe; does not block.
 */
STB_EXPORT int bthread_getattr(bthread_t bt, bthread_attr_t *attr);

/*
 * Starts fn(arg) in a new bthread and stores its id in *tid (tid may be NULL).
 * bthread_start_urgent: when called from a bthread of the same worker pool,
 * the caller is queued and the new bthread runs at once on this worker.
 * bthread_start_background: the new bthread is queued. From a pthread both
 * queue it. attr NULL means BTHREAD_ATTR_NORMAL; attr->tag picks the worker
 * pool (BTHREAD_TAG_INVALID: the caller's). The stack is allocated here, so a
 * bthread that started always has its own stack. Thread-safe; does not block.
 * Returns 0; EINVAL (fn NULL, bad stack type or tag); ENOMEM (no memory for
 * the task); EAGAIN (no stack could be mapped: the process is out of
 * address space or of mappings; a message on stderr names vm.max_map_count);
 * EPERM after bthread_stop_world.
 */
STB_EXPORT int bthread_start_urgent(bthread_t *tid, const bthread_attr_t *attr,
				    void *(*fn)(void *), void *arg);
STB_EXPORT int bthread_start_background(bthread_t *tid, const bthread_attr_t *attr,
					void *(*fn)(void *), void *arg);

/*
 * Waits until bthread bt finishes; when ret is not NULL stores fn's return
 * value (or bthread_exit's argument) there, as pthread_join does, or NULL once
 * that result was reclaimed (the finished bthread's slot was reused and that
 * later bthread finished too). (bRPC always stores NULL: a bRPC program reads
 * only what its own function returned.) Blocks the calling bthread (or pthread); not ended by
 * bthread_stop or bthread_interrupt. When join returns, bt is gone: it is no
 * longer traceable (bthread_stack_trace gives -ESRCH). Returns 0 (also for a
 * bthread that finished long ago), or EINVAL if bt was never returned by
 * bthread_start_* or is the caller itself.
 */
STB_EXPORT int bthread_join(bthread_t bt, void **ret);

/*
 * Ends the calling bthread with retval; never returns. Frames above it are not
 * unwound (no C++ destructors). From a pthread it is pthread_exit(retval).
 */
STB_EXPORT void bthread_exit(void *retval) __attribute__((noreturn));

/* Id of the calling bthread; 0 when called from a pthread. */
STB_EXPORT bthread_t bthread_self(void);

/* Non-zero when t1 and t2 name the same bthread. */
STB_EXPORT int bthread_equal(bthread_t t1, bthread_t t2);

/*
 * Lets other ready bthreads of the pool run; the caller is queued behind
 * them. From a pthread (or a BTHREAD_ATTR_PTHREAD bthread) it is
 * sched_yield(). Returns 0.
 */
STB_EXPORT int bthread_yield(void);

/*
 * Suspends the calling bthread for at least microseconds (a pthread or a
 * BTHREAD_ATTR_PTHREAD bthread sleeps in the kernel, not interruptible); 0
 * microseconds is bthread_yield. Returns 0; -1 when the sleep was
 * interrupted, with errno ESTOP when the bthread was stopped (bthread_stop),
 * EINTR otherwise (bthread_interrupt). An interrupt that came while the
 * bthread did not wait ends its next wait at once; as bRPC, it ends only that
 * one: a stopped bthread's later sleeps sleep.
 */
STB_EXPORT int bthread_usleep(uint64_t microseconds);

/*
 * Sets the number of worker pthreads, all pools together. num must be in
 * [BTHREAD_MIN_CONCURRENCY, BTHREAD_MAX_CONCURRENCY] (else EINVAL). Before
 * the runtime starts (the first bthread call) the first call sets the value
 * and later ones may only raise it (a lower value is ignored, returns 0).
 * Afterwards it may only grow: new workers are added to the pools in turn;
 * a lower value returns EPERM. The default is 8 + BTHREAD_EPOLL_THREAD_NUM,
 * as bRPC, or $STB_CONCURRENCY (1 .. 1024: an expert override that may go
 * below BTHREAD_MIN_CONCURRENCY). Returns 0, EINVAL, EPERM or EAGAIN (a
 * worker pthread could not be created). Thread-safe.
 */
STB_EXPORT int bthread_setconcurrency(int num);
/* Number of worker pthreads, all pools (the configured value before start). */
STB_EXPORT int bthread_getconcurrency(void);
/*
 * Workers of pool tag (0 for a pool that never started). Returns EPERM
 * before the runtime started, EINVAL for a tag out of [0, BTHREAD_TAG_MAX).
 */
STB_EXPORT int bthread_getconcurrency_by_tag(bthread_tag_t tag);
/*
 * Grows pool tag to num workers (starting the pool if needed: pools start on
 * the first use of their tag; bRPC refuses, EINVAL, a tag beyond its
 * task_group_ntags flag, which a bRPC program raises first). Returns 0
 * (also for BTHREAD_TAG_INVALID: nothing done), EINVAL (tag or num out of
 * range), EPERM (num below the pool's size) or EAGAIN.
 */
STB_EXPORT int bthread_setconcurrency_by_tag(int num, bthread_tag_t tag);
/* Tag of the calling worker's pool; BTHREAD_TAG_DEFAULT on other threads. */
STB_EXPORT bthread_tag_t bthread_self_tag(void);

/*
 * Wakes bthread tid from what it waits in: butex_wait (and so condition
 * variables, semaphores...) returns -1/EINTR, an fd wait 0 (as bRPC's),
 * bthread_usleep -1 with EINTR (ESTOP when stopped); mutex locks, joins and
 * bthread_connect are not affected (they keep waiting). When tid does not
 * wait, its next such wait returns at once (that one only). Returns 0, or
 * EINVAL when tid is not a live bthread. Thread-safe, does not block. (C++:
 * an overload takes a tag, as bRPC's default argument.)
 */
STB_EXPORT int bthread_interrupt(bthread_t tid);

/*
 * Asks bthread tid to stop: bthread_stopped(tid) becomes non-zero and tid is
 * interrupted (bthread_interrupt): its current bthread_usleep, or its next
 * one, returns -1/ESTOP (later ones sleep, as bRPC's), a current butex_wait
 * -1/EINTR. Does not end the bthread.
 * Thread-safe, does not block. Returns 0, or EINVAL when tid is not a live
 * bthread (never started, or finished).
 */
STB_EXPORT int bthread_stop(bthread_t tid);
/* Non-zero if tid was stopped or does not run any more (finished, or never was); 0 otherwise. */
STB_EXPORT int bthread_stopped(bthread_t tid);

/*
 * bthread_list_*: a set of bthreads to stop and join together. Not
 * thread-safe (one thread uses a list at a time). init returns 0, ENOMEM or
 * EINVAL (list NULL; size hints are ignored); destroy frees it (no join);
 * add returns 0 (also for tid 0, INVALID_BTHREAD: nothing is added, as
 * bRPC), ENOMEM or EINVAL (list not initialized); stop and join return 0 or
 * EINVAL (list not initialized). join blocks until every
 * bthread added finished, and empties the list. A list drops finished
 * bthreads when it grows, so it stays as large as the live ones.
 */
STB_EXPORT int bthread_list_init(bthread_list_t *list, unsigned size, unsigned conflict_size);
STB_EXPORT void bthread_list_destroy(bthread_list_t *list);
STB_EXPORT int bthread_list_add(bthread_list_t *list, bthread_t tid);
STB_EXPORT int bthread_list_stop(bthread_list_t *list);
STB_EXPORT int bthread_list_join(bthread_list_t *list);

/*
 * CPU time consumed by the calling bthread, in ns, when the runtime counts it
 * ($STB_CPU_CLOCK=1 at start: two CLOCK_THREAD_CPUTIME_ID reads per switch);
 * 0 otherwise and on pthreads. Thread-safe; does not block.
 */
STB_EXPORT uint64_t bthread_cpu_clock_ns(void);

/*
 * Span callbacks for tracing frameworks. create_fn runs in the creator when a
 * bthread is started with BTHREAD_INHERIT_SPAN and returns the new bthread's
 * span context (NULL: none); when such a bthread ends, end_fn runs on it and
 * then destroy_fn(span). All three set, or all NULL to turn spans off.
 * Returns 0, or -1 with errno EINVAL when only some are NULL. Call once at
 * initialization, before such bthreads start.
 */
typedef void *(*bthread_create_span_fn)(void);
typedef void (*bthread_destroy_span_fn)(void *);
typedef void (*bthread_end_span_fn)(void);
STB_EXPORT int bthread_set_span_funcs(bthread_create_span_fn create_fn,
				      bthread_destroy_span_fn destroy_fn,
				      bthread_end_span_fn end_fn);

/* ---- mutex ---- */

/*
 * A mutex that suspends a contending bthread (or blocks a pthread). Not
 * recursive. init returns 0 or ENOMEM; destroy returns 0 (the mutex must be
 * unlocked); lock returns 0; trylock 0 or EBUSY; timedlock 0 or ETIMEDOUT
 * (abstime is CLOCK_REALTIME, NULL waits forever); unlock 0. All return EINVAL
 * for an uninitialized mutex.
 */
STB_EXPORT int bthread_mutex_init(bthread_mutex_t *m, const bthread_mutexattr_t *attr);
STB_EXPORT int bthread_mutex_destroy(bthread_mutex_t *m);
STB_EXPORT int bthread_mutex_lock(bthread_mutex_t *m);
STB_EXPORT int bthread_mutex_trylock(bthread_mutex_t *m);
STB_EXPORT int bthread_mutex_timedlock(bthread_mutex_t *m, const struct timespec *abstime);
STB_EXPORT int bthread_mutex_unlock(bthread_mutex_t *m);

/* ---- condition variable ---- */

/*
 * Condition variable for bthread_mutex_t. wait/timedwait unlock m, suspend,
 * and lock m again before returning; spurious wake-ups are possible. The
 * first wait binds the cond to its mutex for good: a wait with another mutex
 * returns EINVAL at once, m still locked (as bRPC). init returns 0 or
 * ENOMEM; timedwait returns 0 or ETIMEDOUT (abstime is CLOCK_REALTIME);
 * signal/broadcast return 0. EINVAL for an uninitialized cond or mutex.
 */
STB_EXPORT int bthread_cond_init(bthread_cond_t *c, const bthread_condattr_t *attr);
STB_EXPORT int bthread_cond_destroy(bthread_cond_t *c);
STB_EXPORT int bthread_cond_wait(bthread_cond_t *c, bthread_mutex_t *m);
STB_EXPORT int bthread_cond_timedwait(bthread_cond_t *c, bthread_mutex_t *m,
				      const struct timespec *abstime);
STB_EXPORT int bthread_cond_signal(bthread_cond_t *c);
STB_EXPORT int bthread_cond_broadcast(bthread_cond_t *c);

STB_END_DECLS

#if defined(__cplusplus)
/* bRPC declares bthread_interrupt(tid, tag = BTHREAD_TAG_DEFAULT); the tag is not needed. */
inline int bthread_interrupt(bthread_t tid, bthread_tag_t tag)
{
	(void)tag;
	return bthread_interrupt(tid);
}
#endif

/* Calls whose bRPC counterparts live in bthread/unstable.h (fd waits, ...). */
#include <bthread/unstable.h>

/*
 * ==== Mutex attributes, read-write locks, semaphores, barriers, once and
 * bthread-local storage (the synchronization module). As bRPC: return 0 or
 * an errno value; every blocking call suspends only the calling bthread (a
 * pthread blocks) and can be called from bthreads and pthreads alike. Waits
 * show in the tracers with their kind, object and, for locks, the owner.
 */
STB_BEGIN_DECLS

/* ---- mutex attributes ---- */
/* Default attributes (contention sampling on: accepted, stb samples nothing). */
STB_EXPORT int bthread_mutexattr_init(bthread_mutexattr_t *attr);
STB_EXPORT int bthread_mutexattr_disable_csite(bthread_mutexattr_t *attr);
STB_EXPORT int bthread_mutexattr_destroy(bthread_mutexattr_t *attr);

/* ---- read-write locks ---- */
/*
 * init: 0, EINVAL, ENOMEM; attr NULL = writer preference. rdlock/wrlock
 * wait (a stop does not end the wait); try* return EBUSY instead of
 * waiting; timed* return ETIMEDOUT at abstime (CLOCK_REALTIME). unlock
 * releases the caller's read or write lock (EPERM when it is not locked).
 * With writer preference a blocked writer keeps new readers out; a writer's
 * unlock lets in every reader waiting then, and the last reader out lets in
 * one writer. Not recursive. destroy: the lock must be free.
 */
STB_EXPORT int bthread_rwlock_init(bthread_rwlock_t *rwlock, const bthread_rwlockattr_t *attr);
STB_EXPORT int bthread_rwlock_destroy(bthread_rwlock_t *rwlock);
STB_EXPORT int bthread_rwlock_rdlock(bthread_rwlock_t *rwlock);
STB_EXPORT int bthread_rwlock_tryrdlock(bthread_rwlock_t *rwlock);
STB_EXPORT int bthread_rwlock_timedrdlock(bthread_rwlock_t *rwlock,
					  const struct timespec *abstime);
STB_EXPORT int bthread_rwlock_wrlock(bthread_rwlock_t *rwlock);
STB_EXPORT int bthread_rwlock_trywrlock(bthread_rwlock_t *rwlock);
STB_EXPORT int bthread_rwlock_timedwrlock(bthread_rwlock_t *rwlock,
					  const struct timespec *abstime);
STB_EXPORT int bthread_rwlock_unlock(bthread_rwlock_t *rwlock);
/* Preference: BTHREAD_RWLOCK_PREFER_READER_NP or _WRITER_NP / _WRITER_NONRECURSIVE_NP. */
STB_EXPORT int bthread_rwlockattr_init(bthread_rwlockattr_t *attr);
STB_EXPORT int bthread_rwlockattr_destroy(bthread_rwlockattr_t *attr);
STB_EXPORT int bthread_rwlockattr_getkind_np(const bthread_rwlockattr_t *attr, int *pref);
STB_EXPORT int bthread_rwlockattr_setkind_np(bthread_rwlockattr_t *attr, int pref);

/* ---- semaphores ---- */
/*
 * A counting semaphore starting at value. wait takes one unit, waiting
 * while there is none (a stop does not end the wait); trywait: EAGAIN
 * instead; timedwait: ETIMEDOUT at abstime (CLOCK_REALTIME). post/post_n
 * add 1/n units and wake as many waiters (post_n of 0: nothing, 0, as bRPC;
 * EINVAL beyond INT32_MAX). init: 0, EINVAL, ENOMEM.
 */
STB_EXPORT int bthread_sem_init(bthread_sem_t *sem, unsigned value);
STB_EXPORT int bthread_sem_disable_csite(bthread_sem_t *sem);
STB_EXPORT int bthread_sem_destroy(bthread_sem_t *sem);
STB_EXPORT int bthread_sem_wait(bthread_sem_t *sem);
STB_EXPORT int bthread_sem_timedwait(bthread_sem_t *sem, const struct timespec *abstime);
STB_EXPORT int bthread_sem_trywait(bthread_sem_t *sem);
STB_EXPORT int bthread_sem_post(bthread_sem_t *sem);
STB_EXPORT int bthread_sem_post_n(bthread_sem_t *sem, size_t n);

/* ---- barriers ---- */
/*
 * count (>= 1) callers of wait meet: the last to arrive releases them all;
 * wait returns BTHREAD_BARRIER_SERIAL_THREAD to one of each cycle and 0 to
 * the others. A stop does not end the wait. init: 0, EINVAL, ENOMEM.
 */
STB_EXPORT int bthread_barrier_init(bthread_barrier_t *barrier,
				    const bthread_barrierattr_t *attr, unsigned count);
STB_EXPORT int bthread_barrier_destroy(bthread_barrier_t *barrier);
STB_EXPORT int bthread_barrier_wait(bthread_barrier_t *barrier);

/* ---- once ---- */
/*
 * Runs init_routine exactly once per control; concurrent callers wait (as
 * bthreads, without blocking their workers) until it returned. 0, EINVAL.
 */
STB_EXPORT int bthread_once(bthread_once_t *once_control, void (*init_routine)(void));

/* ---- bthread-local storage ---- */
/*
 * A key names a slot in every bthread's (and every pthread's) table. The
 * destructor, when not NULL, runs on a thread's non-NULL value when that
 * bthread or pthread exits (up to 4 rounds when destructors set values
 * again), not when the key is deleted. create: 0, EINVAL, EAGAIN (no key
 * left). delete: 0 or EINVAL; values of a deleted key are never returned
 * again (bRPC's documented contract; its code may return them). setspecific: 0, EINVAL (invalid key), ENOMEM. getspecific: the
 * caller's value, NULL for none or an invalid key. Thread-safe.
 */
STB_EXPORT int bthread_key_create(bthread_key_t *key, void (*destructor)(void *data));
STB_EXPORT int bthread_key_delete(bthread_key_t key);
STB_EXPORT int bthread_setspecific(bthread_key_t key, void *data);
STB_EXPORT void *bthread_getspecific(bthread_key_t key);

STB_END_DECLS

#include <bthread/id.h>

#if defined(__cplusplus)
#include <bthread/mutex.h>
#include <ostream>
#include <string>
#include <vector>

/* The tracer's C calls (declared again, identically, by stb/stb.h, which
 * includes this header: including it here would be circular). */
extern "C" {
STB_EXPORT bthread_t bthread_init_for_pthread_stack_trace(void);
STB_EXPORT int bthread_stack_trace(bthread_t tid, char *buf, size_t size);
}

namespace bthread {
/* bRPC's C++ names of the tracer calls (stb/stb.h has the C ones). */
inline void init_for_pthread_stack_trace()
{
	bthread_init_for_pthread_stack_trace();
}
/*
 * The stack of bthread tid as text; when it cannot be traced, bRPC's error
 * text: "No frame\nError message:\n" and the reason, "bthread=N not exist
 * now" for a bthread that finished (or never was).
 */
inline std::string stack_trace(bthread_t tid)
{
	std::vector<char> buf(4096);
	for (int round = 0; round < 4; round++) {
		const int n = bthread_stack_trace(tid, buf.data(), buf.size());
		if (n < 0) {
			const std::string who = "bthread=" + std::to_string(tid);
			std::string why;
			switch (-n) {
			case ESRCH:
				why = who + " not exist now";
				break;
			case ETIMEDOUT:
				why = who + ": its running stack was not captured in time "
					    "(STB_SIGNAL_TRACE_TIMEOUT_MS; the trace signal blocked?)";
				break;
			case EPERM:
				why = who + ": the trace signal's handler was replaced";
				break;
			case EBUSY:
				why = who + ": another tracer held it all along";
				break;
			default:
				why = who + ": trace failed, error " + std::to_string(-n);
				break;
			}
			return "No frame\nError message:\n" + why;
		}
		if ((size_t)n < buf.size())
			return std::string(buf.data(), (size_t)n);
		buf.resize((size_t)n + 1);
	}
	return std::string(buf.data());
}
inline void stack_trace(std::ostream &os, bthread_t tid)
{
	os << stack_trace(tid);
}
} // namespace bthread
#endif /* __cplusplus */

#endif /* STB_BTHREAD_BTHREAD_H */
