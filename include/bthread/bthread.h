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
/* Sets the name shown by the tracer; the string must outlive bthread_start_*. */
STB_EXPORT int bthread_attr_set_name(bthread_attr_t *attr, const char *name);

/*
 * Starts fn(arg) in a new bthread and stores its id in *tid (tid may be NULL).
 * bthread_start_urgent: when called from a bthread, the caller is queued and
 * the new bthread runs at once on this worker. bthread_start_background: the
 * new bthread is queued. From a pthread both queue it.
 * attr NULL means BTHREAD_ATTR_NORMAL. Thread-safe; does not block.
 * Returns 0, EINVAL (fn NULL or bad attr) or ENOMEM.
 */
STB_EXPORT int bthread_start_urgent(bthread_t *tid, const bthread_attr_t *attr,
				    void *(*fn)(void *), void *arg);
STB_EXPORT int bthread_start_background(bthread_t *tid, const bthread_attr_t *attr,
					void *(*fn)(void *), void *arg);

/*
 * Waits until bthread bt finishes; when ret is not NULL stores fn's return
 * value (or bthread_exit's argument) there. Blocks the calling bthread (or
 * pthread). Returns 0; EINVAL if bt was never returned by bthread_start_* or is
 * the caller itself; ESRCH if bt is stale: it finished and its result has been
 * reclaimed. A result is kept until the finished bthread's slot is reused and
 * that later bthread finished too; slots are reused oldest first and only
 * after 4096 other bthreads finished, so a result survives at least that long.
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
 * Lets other ready bthreads run; the caller is queued behind them. From a
 * pthread it is sched_yield(). Returns 0.
 */
STB_EXPORT int bthread_yield(void);

/*
 * Suspends the calling bthread for at least microseconds (a pthread sleeps).
 * Returns 0; -1 with errno ESTOP when the bthread was stopped (see
 * bthread_stop), also when stopped before the call.
 */
STB_EXPORT int bthread_usleep(uint64_t microseconds);

/*
 * Sets the number of worker pthreads. Before the runtime starts (the first
 * bthread call) any value in [1, 256] is taken; afterwards it may only grow.
 * Returns 0, EINVAL (out of range) or EPERM (decrease after start).
 * The default is the number of CPUs, at least 2, or $STB_CONCURRENCY.
 */
STB_EXPORT int bthread_setconcurrency(int num);
/* Number of worker pthreads (the configured value before start). */
STB_EXPORT int bthread_getconcurrency(void);

/*
 * Asks bthread tid to stop: bthread_stopped(tid) becomes non-zero, a current
 * or later bthread_usleep in it returns -1/ESTOP and a current butex_wait
 * returns -1/EINTR. Does not end the bthread. Thread-safe, does not block.
 * Returns 0, or EINVAL for an id that was never valid (a finished bthread
 * is fine: nothing happens).
 */
STB_EXPORT int bthread_stop(bthread_t tid);
/* Non-zero if tid was stopped or has finished; 0 otherwise. */
STB_EXPORT int bthread_stopped(bthread_t tid);

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
 * and lock m again before returning; spurious wake-ups are possible.
 * init returns 0 or ENOMEM; timedwait returns 0 or ETIMEDOUT (abstime is
 * CLOCK_REALTIME); signal/broadcast return 0. EINVAL for an uninitialized cond.
 */
STB_EXPORT int bthread_cond_init(bthread_cond_t *c, const bthread_condattr_t *attr);
STB_EXPORT int bthread_cond_destroy(bthread_cond_t *c);
STB_EXPORT int bthread_cond_wait(bthread_cond_t *c, bthread_mutex_t *m);
STB_EXPORT int bthread_cond_timedwait(bthread_cond_t *c, bthread_mutex_t *m,
				      const struct timespec *abstime);
STB_EXPORT int bthread_cond_signal(bthread_cond_t *c);
STB_EXPORT int bthread_cond_broadcast(bthread_cond_t *c);

STB_END_DECLS

/* Calls whose bRPC counterparts live in bthread/unstable.h (fd waits, ...). */
#include <bthread/unstable.h>

#endif /* STB_BTHREAD_BTHREAD_H */
