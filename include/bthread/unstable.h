/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The part of the bthread API that bRPC keeps in bthread/unstable.h: waits on
 * file descriptors, connect and close, timers on the timer thread, flushing
 * NOSIGNAL starts, worker start functions, stopping the runtime. Included
 * by bthread/bthread.h.
 */
#ifndef STB_BTHREAD_UNSTABLE_H
#define STB_BTHREAD_UNSTABLE_H

#include <pthread.h>
#include <sys/socket.h>
#include <time.h>

#include <bthread/errno.h>
#include <bthread/types.h>
#include <stb/export.h>

STB_BEGIN_DECLS

/*
 * Wakes workers for the bthreads started with BTHREAD_NOSIGNAL by the
 * calling thread (they were queued, but no idle worker was woken). Does not
 * block.
 */
STB_EXPORT void bthread_flush(void);

/*
 * Marks the calling bthread as about to quit: when it is queued again (a
 * yield, an urgent start) no idle worker is woken for it. No effect in a
 * bthread started with BTHREAD_NEVER_QUIT. Returns 0, or EPERM on a thread
 * that is not a bthread.
 */
STB_EXPORT int bthread_about_to_quit(void);

/*
 * Runs on_timer(arg) on the timer thread at or after abstime (CLOCK_REALTIME)
 * and stores the timer's id in *id. Keep on_timer short: it delays the other
 * timers. Returns 0, EINVAL (id or on_timer NULL) or ENOMEM. Thread-safe.
 */
STB_EXPORT int bthread_timer_add(bthread_timer_t *id, struct timespec abstime,
				 void (*on_timer)(void *), void *arg);
/*
 * Cancels timer id. Returns 0 when it was removed before it ran; 1 at once
 * when its callback is running (as bRPC: it does not wait for the callback
 * to return, so it may be called under a lock the callback takes); EINVAL
 * when id is unknown or the timer has already run. Does not block.
 */
STB_EXPORT int bthread_timer_del(bthread_timer_t id);

/* ---- fd waits ---- */
/*
 * Suspends the calling bthread until fd has one of events (EPOLLIN, EPOLLOUT,
 * EPOLLPRI, EPOLLRDHUP; EPOLLERR and EPOLLHUP are always reported; EPOLLET
 * and EPOLLONESHOT are accepted and have no effect) or, for the timed form,
 * until abstime (CLOCK_REALTIME; NULL waits forever). A pthread caller blocks
 * in poll(2). Returns 0 when an event occurred, when bthread_close closed fd,
 * or when the waiting bthread was interrupted (bthread_interrupt or
 * bthread_stop; as bRPC: check the fd again); -1 with errno: EINVAL (fd < 0,
 * or no event to wait for), EBADF (not an open fd, or closed by
 * bthread_close), EPERM (epoll(7) cannot watch fd: a regular file or a
 * directory, as bRPC), ETIMEDOUT, ENOMEM. Only one bthread may wait on a
 * given fd at a time per direction (EPOLLIN / EPOLLOUT).
 */
STB_EXPORT int bthread_fd_wait(int fd, unsigned events);
STB_EXPORT int bthread_fd_timedwait(int fd, unsigned events, const struct timespec *abstime);

/*
 * Closes fd, waking every bthread waiting on it in bthread_fd_*wait or
 * bthread_connect (their waits return 0, as bRPC); a wait that starts after
 * it (or while it closes) fails with EBADF. Pthreads waiting in poll(2) are
 * not woken. Use instead of close(2) on fds that bthreads wait on. Starts the
 * runtime's fd dispatcher first (its epoll fd never takes the number freed
 * here). Returns close(2)'s result; -1 with EBADF for fd < 0, for a
 * concurrent bthread_close of the same fd, and for a number that is the
 * runtime's own (left open).
 */
STB_EXPORT int bthread_close(int fd);

/*
 * connect(2) that suspends the calling bthread instead of blocking (the
 * socket is made non-blocking for the call and restored). Not ended by
 * bthread_stop/bthread_interrupt (as bRPC). Returns 0 or -1 with errno
 * (connect's, or ETIMEDOUT when abstime, CLOCK_REALTIME, passed).
 */
STB_EXPORT int bthread_connect(int sockfd, const struct sockaddr *serv_addr, socklen_t addrlen);
STB_EXPORT int bthread_timed_connect(int sockfd, const struct sockaddr *serv_addr,
				     socklen_t addrlen, const struct timespec *abstime);

/*
 * Functions every worker pthread started afterwards runs first (the tagged
 * one gets the worker's tag); both run when both are set. Returns 0, or
 * EINVAL for NULL.
 */
STB_EXPORT int bthread_set_worker_startfn(void (*start_fn)(void));
STB_EXPORT int bthread_set_tagged_worker_startfn(void (*start_fn)(bthread_tag_t));

/*
 * Stops the runtime: every worker quits once it finds no work, and the call
 * waits for them (from a worker: for the others). Bthreads still blocked
 * never run again; later bthread_start_* fail with EPERM. For the end of
 * main(). Does not return before the workers exited.
 */
STB_EXPORT void bthread_stop_world(void);

STB_END_DECLS

/*
 * ==== bthread-local storage: keys with an argument for the destructor and
 * keytable pools (the synchronization module, runtime/core/key.c).
 */
STB_BEGIN_DECLS

/* bthread_key_create with a destructor that also gets dtor_args. */
STB_EXPORT int bthread_key_create2(bthread_key_t *key, void (*destructor)(void *data,
									 const void *dtor_args),
				   const void *dtor_args);

/*
 * A pool of key tables for bthreads started with attr.keytable_pool: such a
 * bthread takes a table from the pool at its first bthread_getspecific /
 * setspecific and gives it back, values and all, without running
 * destructors, when it ends. destroy runs the destructors of the tables in
 * the pool (as if each were the caller's table) and frees them; bthreads
 * ending later free their tables themselves. 0 or EINVAL. getstat: nfree = tables in the pool.
 */
STB_EXPORT int bthread_keytable_pool_init(bthread_keytable_pool_t *pool);
STB_EXPORT int bthread_keytable_pool_destroy(bthread_keytable_pool_t *pool);
STB_EXPORT int bthread_keytable_pool_getstat(bthread_keytable_pool_t *pool,
					     bthread_keytable_pool_stat_t *stat);
/* bRPC keeps per-thread lists of free tables; stb one list per pool: 0 (EINVAL for NULL). */
STB_EXPORT int get_thread_local_keytable_list_length(bthread_keytable_pool_t *pool);
/* Fills pool up to nfree tables, each with key set to ctor(args) (stops when ctor returns NULL). */
STB_EXPORT void bthread_keytable_pool_reserve(bthread_keytable_pool_t *pool, size_t nfree,
					      bthread_key_t key, void *ctor(const void *args),
					      const void *args);

STB_END_DECLS

#endif /* STB_BTHREAD_UNSTABLE_H */
