/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The part of the bthread API that bRPC keeps in bthread/unstable.h: waits on
 * file descriptors (and, as in bRPC, other calls outside the core API).
 * Included by bthread/bthread.h.
 */
#ifndef STB_BTHREAD_UNSTABLE_H
#define STB_BTHREAD_UNSTABLE_H

#include <time.h>

#include <bthread/types.h>
#include <stb/export.h>

STB_BEGIN_DECLS

/* ---- fd waits ---- */
/*
 * Suspends the calling bthread until fd has one of events (EPOLLIN, EPOLLOUT,
 * ...; EPOLLERR and EPOLLHUP are always reported) or, for the timed form, until
 * abstime (CLOCK_REALTIME; NULL waits forever). A pthread caller blocks in
 * poll(2). Returns 0 when an event occurred, -1 with errno: EINVAL (bad fd or
 * events), ETIMEDOUT, EINTR (the bthread was stopped, see bthread_stop),
 * ENOMEM. Only one bthread may wait on a given fd at a time
 * per direction (EPOLLIN / EPOLLOUT).
 */
STB_EXPORT int bthread_fd_wait(int fd, unsigned events);
STB_EXPORT int bthread_fd_timedwait(int fd, unsigned events, const struct timespec *abstime);

STB_END_DECLS

#endif /* STB_BTHREAD_UNSTABLE_H */
