/* SPDX-License-Identifier: Apache-2.0 */
/*
 * butex: the futex-like primitive every blocking bthread call is built on. A
 * butex is a 32-bit integer that callers change with atomic operations, plus
 * a list of bthreads (or pthreads) waiting for it to change. The C functions
 * are global; C++ gets bRPC's namespace bthread API over them.
 */
#ifndef STB_BTHREAD_BUTEX_H
#define STB_BTHREAD_BUTEX_H

#include <stddef.h>
#include <time.h>

#include <bthread/errno.h>
#include <bthread/types.h>
#include <stb/export.h>

STB_BEGIN_DECLS

/*
 * Creates a butex with value 0. The returned pointer points at the 32-bit
 * value (use __atomic builtins or C11 atomics on it). Returns NULL with errno
 * ENOMEM. Thread-safe.
 */
STB_EXPORT void *butex_create(void);

/*
 * Releases a butex. Nobody may wait on it any more; a late butex_wake on a
 * destroyed butex is harmless (the memory is pooled, never unmapped). Accepts
 * NULL.
 */
STB_EXPORT void butex_destroy(void *butex);

/*
 * If the value is still expected, suspends the calling bthread (or blocks the
 * pthread) until woken by butex_wake*, until abstime (CLOCK_REALTIME, NULL =
 * no limit) or until bthread_stop/bthread_interrupt. Returns 0 when woken; -1
 * with errno EWOULDBLOCK (value != expected), ETIMEDOUT, or EINTR
 * (interrupted). Waiters are woken first come, first served.
 */
STB_EXPORT int butex_wait(void *butex, int expected, const struct timespec *abstime);

/* Wakes one waiter. Returns the number woken (0 or 1). Does not block. */
STB_EXPORT int butex_wake(void *butex);

/* Wakes up to n waiters (n 0: none). Returns the number woken. Does not block. */
STB_EXPORT int butex_wake_n(void *butex, size_t n);

/* Wakes every waiter. Returns the number woken. Does not block. */
STB_EXPORT int butex_wake_all(void *butex);

/*
 * Wakes every waiter except bthread excluded (0: wakes all). Returns the
 * number woken. Does not block.
 */
STB_EXPORT int butex_wake_except(void *butex, bthread_t excluded);

/*
 * Wakes one waiter of butex1 and moves the others to butex2's list (they then
 * wait for butex2, as if they had called butex_wait on it). Returns the number
 * woken (0 or 1). Does not block.
 */
STB_EXPORT int butex_requeue(void *butex1, void *butex2);

STB_END_DECLS

#if defined(__cplusplus)
namespace bthread {

/* Waits shorter than this many microseconds time out at once (as bRPC). */
static const int64_t MIN_SLEEP_US = 2;

inline void *butex_create()
{
	return ::butex_create();
}

/* butex_create with the value typed as T (an int-sized type). */
template <typename T> T *butex_create_checked()
{
	static_assert(sizeof(T) == sizeof(int), "a butex holds an int-sized value");
	return static_cast<T *>(::butex_create());
}

inline void butex_destroy(void *butex)
{
	::butex_destroy(butex);
}

/* nosignal is accepted for bRPC's signature; woken bthreads are always scheduled. */
inline int butex_wake(void *butex, bool nosignal = false)
{
	(void)nosignal;
	return ::butex_wake(butex);
}

inline int butex_wake_n(void *butex, size_t n, bool nosignal = false)
{
	(void)nosignal;
	return ::butex_wake_n(butex, n);
}

inline int butex_wake_all(void *butex, bool nosignal = false)
{
	(void)nosignal;
	return ::butex_wake_all(butex);
}

inline int butex_wake_except(void *butex, bthread_t excluded)
{
	return ::butex_wake_except(butex, excluded);
}

inline int butex_requeue(void *butex1, void *butex2)
{
	return ::butex_requeue(butex1, butex2);
}

/* prepend is accepted for bRPC's signature; waiters are always queued last. */
inline int butex_wait(void *butex, int expected, const timespec *abstime, bool prepend = false)
{
	(void)prepend;
	return ::butex_wait(butex, expected, abstime);
}

} /* namespace bthread */
#endif /* __cplusplus */

#endif /* STB_BTHREAD_BUTEX_H */
