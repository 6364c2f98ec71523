/* SPDX-License-Identifier: Apache-2.0 */
/*
 * butex: the futex-like primitive every blocking bthread call is built on. A
 * butex is a 32-bit integer that callers change with atomic operations, plus
 * a list of bthreads (or pthreads) waiting for it to change.
 */
#ifndef STB_BTHREAD_BUTEX_H
#define STB_BTHREAD_BUTEX_H

#include <time.h>

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
 * no limit) or until bthread_stop. Returns 0 when woken; -1 with errno
 * EWOULDBLOCK (value != expected), ETIMEDOUT, or EINTR (stopped).
 */
STB_EXPORT int butex_wait(void *butex, int expected, const struct timespec *abstime);

/* Wakes one waiter. Returns the number woken (0 or 1). Does not block. */
STB_EXPORT int butex_wake(void *butex);

/* Wakes every waiter. Returns the number woken. Does not block. */
STB_EXPORT int butex_wake_all(void *butex);

STB_END_DECLS

#endif /* STB_BTHREAD_BUTEX_H */
