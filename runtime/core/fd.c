/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_fd_wait: one epoll dispatcher thread. A waiting bthread arms its fd
 * with EPOLLONESHOT and sleeps on the fd's butex; the dispatcher bumps that
 * butex and wakes every waiter of the fd when an event arrives. A waiter whose
 * events were not among those reported (it waits for EPOLLOUT, another one
 * for EPOLLIN) arms the fd again and goes back to sleep. Also bthread_close
 * (wakes the fd's waiters) and bthread_connect on top of the fd waits. The
 * epoll fd exists before any bthread_close frees a number it could take, and
 * waits and closes refuse the runtime's own descriptors (EBADF).
 */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "internal.h"

#define STB_FD_CHUNK 1024u
#define STB_FD_MAX_CHUNKS 16384u /* fds up to 16 Mi */

struct stb_fd_entry {
	struct stb_lock lock;
	uint32_t events;          /* events armed for the current waiters */
	uint32_t seen;            /* events of the latest dispatch */
	uint32_t closes;          /* bthread_close calls on the fd (its waiters return 0) */
	bool closing;             /* bthread_close is between its wake-up and close(2) */
	struct stb_butex *butex;
};

/* The events a wait may ask for (EPOLLERR and EPOLLHUP are always reported). */
#define STB_FD_WAITABLE (EPOLLIN | EPOLLOUT | EPOLLPRI | EPOLLRDHUP)

static struct stb_fd_entry *stb_fd_chunks[STB_FD_MAX_CHUNKS];
static struct stb_lock stb_fd_grow_lock;
static pthread_once_t stb_fd_once = PTHREAD_ONCE_INIT;
static int stb_epfd = -1;
static int stb_fd_init_err;

static void *stb_fd_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "bthread_epoll");
	stb_thread_wake_fast();
	struct epoll_event evs[64];
	for (;;) {
		int n = epoll_wait(stb_epfd, evs, 64, -1);
		for (int i = 0; i < n; i++) {
			uint32_t fd = evs[i].data.u32;
			struct stb_fd_entry *e = &stb_fd_chunks[fd / STB_FD_CHUNK][fd % STB_FD_CHUNK];
			stb_lock(&e->lock);
			e->events = 0; /* EPOLLONESHOT disarmed it */
			e->seen = evs[i].events;
			__atomic_fetch_add(&e->butex->value, 1, __ATOMIC_RELEASE);
			stb_unlock(&e->lock);
			stb_butex_wake(e->butex, true);
		}
	}
	return NULL;
}

static void stb_fd_init_once(void)
{
	/* Atomic stores: stb_fd_is_runtime reads it without the once. */
	int epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0) {
		stb_fd_init_err = errno;
		return;
	}
	__atomic_store_n(&stb_epfd, epfd, __ATOMIC_RELEASE);
	pthread_t th;
	int rc = pthread_create(&th, NULL, stb_fd_main, NULL);
	if (rc != 0) {
		stb_fd_init_err = rc;
		__atomic_store_n(&stb_epfd, -1, __ATOMIC_RELEASE);
		close(epfd);
		return;
	}
	pthread_detach(th);
}

/*
 * Is fd one of the runtime's own descriptors (the epoll fd, the shared
 * table's)? A user's number is never one of them while they are open: a wait
 * or a close of such a number comes from a stale copy of a closed fd.
 */
static bool stb_fd_is_runtime(int fd)
{
	/* The table's fd is set before its header is published (release). */
	return fd == __atomic_load_n(&stb_epfd, __ATOMIC_ACQUIRE) ||
	       (__atomic_load_n(&stb_table.hdr, __ATOMIC_ACQUIRE) && fd == stb_table.fd);
}

/* The entry of fd, its chunk made if need be; NULL when fd is beyond the
 * chunks or no memory is left. */
static struct stb_fd_entry *stb_fd_entry(int fd)
{
	uint32_t ci = (uint32_t)fd / STB_FD_CHUNK;
	if (ci >= STB_FD_MAX_CHUNKS)
		return NULL;
	struct stb_fd_entry *chunk = __atomic_load_n(&stb_fd_chunks[ci], __ATOMIC_ACQUIRE);
	if (!chunk) {
		stb_lock(&stb_fd_grow_lock);
		chunk = stb_fd_chunks[ci];
		if (!chunk) {
			chunk = calloc(STB_FD_CHUNK, sizeof(*chunk));
			bool ok = chunk != NULL;
			for (uint32_t i = 0; ok && i < STB_FD_CHUNK; i++) {
				chunk[i].butex = stb_butex_new();
				ok = chunk[i].butex != NULL;
			}
			if (!ok) {
				for (uint32_t i = 0; chunk && i < STB_FD_CHUNK; i++)
					stb_butex_free(chunk[i].butex);
				free(chunk);
				chunk = NULL;
			} else {
				__atomic_store_n(&stb_fd_chunks[ci], chunk, __ATOMIC_RELEASE);
			}
		}
		stb_unlock(&stb_fd_grow_lock);
		if (!chunk)
			return NULL;
	}
	return &chunk[(uint32_t)fd % STB_FD_CHUNK];
}

/* Waits in poll(2) on a pthread. */
static int stb_fd_wait_pthread(int fd, unsigned events, const struct timespec *abstime)
{
	struct pollfd p = {.fd = fd, .events = 0};
	if (events & EPOLLIN)
		p.events |= POLLIN;
	if (events & EPOLLOUT)
		p.events |= POLLOUT;
	if (events & EPOLLPRI)
		p.events |= POLLPRI;
	if (events & EPOLLRDHUP)
		p.events |= POLLRDHUP;
	uint64_t deadline = stb_abstime_to_mono(abstime);
	for (;;) {
		int timeout = -1;
		if (deadline) {
			uint64_t now = stb_now_ns();
			if (now >= deadline) {
				errno = ETIMEDOUT;
				return -1;
			}
			timeout = (int)((deadline - now + 999999u) / 1000000u);
		}
		int n = poll(&p, 1, timeout);
		if (n > 0) {
			if (p.revents & POLLNVAL) {
				errno = EBADF;
				return -1;
			}
			return 0;
		}
		if (n < 0 && errno != EINTR)
			return -1;
	}
}

/*
 * The fd wait of a bthread or pthread. A bthread_stop or bthread_interrupt of
 * the waiting bthread ends it with 0 when wake_on_interrupt (bthread_fd_*wait,
 * as bRPC's: the caller checks its fd again); otherwise it waits on
 * (bthread_connect, as bRPC: a stopped bthread can still connect).
 */
static int fd_wait(int fd, unsigned events, const struct timespec *abstime, bool wake_on_interrupt)
{
	if (fd < 0 || !(events & STB_FD_WAITABLE)) {
		errno = EINVAL;
		return -1;
	}
	if (stb_fd_is_runtime(fd)) {
		errno = EBADF; /* a closed fd's number, now the runtime's */
		return -1;
	}
	if (!stb_can_suspend())
		return stb_fd_wait_pthread(fd, events, abstime);
	pthread_once(&stb_fd_once, stb_fd_init_once);
	if (stb_epfd < 0) {
		errno = stb_fd_init_err ? stb_fd_init_err : ENOMEM;
		return -1;
	}
	if (stb_fd_is_runtime(fd)) {
		errno = EBADF; /* the epoll fd took that number just now */
		return -1;
	}
	struct stb_fd_entry *e = stb_fd_entry(fd);
	if (!e) {
		errno = fd >= (int)(STB_FD_CHUNK * STB_FD_MAX_CHUNKS) ? EINVAL : ENOMEM;
		return -1;
	}
	uint64_t deadline = stb_abstime_to_mono(abstime);
	bool first = true;
	uint32_t closes = 0;
	for (;;) {
		stb_lock(&e->lock);
		if (e->closing || (!first && e->closes != closes)) {
			/* Closed meanwhile: woken (0), or closing now (EBADF). */
			bool woken = !first && e->closes != closes;
			stb_unlock(&e->lock);
			if (woken)
				return 0;
			stb_errno_set(EBADF);
			return -1;
		}
		if (first)
			closes = e->closes;
		first = false;
		int expected = __atomic_load_n(&e->butex->value, __ATOMIC_ACQUIRE);
		uint32_t want = e->events | (events & STB_FD_WAITABLE) | EPOLLONESHOT;
		struct epoll_event ev = {.events = want, .data.u32 = (uint32_t)fd};
		/* errno through the helpers: this loop can suspend and change workers. */
		int rc = epoll_ctl(stb_epfd, EPOLL_CTL_MOD, fd, &ev);
		if (rc != 0 && stb_errno_get() == ENOENT)
			rc = epoll_ctl(stb_epfd, EPOLL_CTL_ADD, fd, &ev);
		int err = rc != 0 ? stb_errno_get() : 0;
		if (rc == 0)
			e->events = want;
		stb_unlock(&e->lock);
		if (rc != 0) {
			/* As bRPC: EBADF for a closed fd, EPERM for one epoll cannot
			 * watch (a regular file, a directory). */
			stb_errno_set(err);
			return -1;
		}
		const struct stb_wait why = {
			.word = STB_ABI_WAIT_WORD(STB_WAIT_FD, 0, events, fd)};
		rc = stb_butex_wait_mono(e->butex, expected, deadline, &why);
		if (rc == EINTR) {
			if (wake_on_interrupt)
				return 0;
			continue;
		}
		if (rc != 0 && rc != EWOULDBLOCK) {
			stb_errno_set(rc); /* may run on another worker now */
			return -1;
		}
		/* A dispatch or a close happened: was it for us? (Else arm again:
		 * level-triggered.) */
		stb_lock(&e->lock);
		uint32_t seen = e->seen;
		bool closed = e->closes != closes;
		stb_unlock(&e->lock);
		if (closed || (seen & (events | EPOLLERR | EPOLLHUP)))
			return 0;
	}
}

int bthread_fd_timedwait(int fd, unsigned events, const struct timespec *abstime)
{
	return fd_wait(fd, events, abstime, true);
}

int bthread_fd_wait(int fd, unsigned events)
{
	return fd_wait(fd, events, NULL, true);
}

/*
 * close(2) of an fd that has no entry, as no memory was left for one: under
 * the lock that makes entries, so that a waiter's entry, and its arming of
 * fd, come after the close (and fail with EBADF). An fd beyond what a wait
 * accepts has no waiter to order.
 */
static int close_without_entry(int fd)
{
	uint32_t ci = (uint32_t)fd / STB_FD_CHUNK;
	if (ci >= STB_FD_MAX_CHUNKS)
		return close(fd);
	stb_lock(&stb_fd_grow_lock);
	bool made = stb_fd_chunks[ci] != NULL;
	int rc = made ? 0 : close(fd);
	int err = errno;
	stb_unlock(&stb_fd_grow_lock);
	if (made)
		return bthread_close(fd); /* made meanwhile: the entry's way */
	errno = err;
	return rc;
}

int bthread_close(int fd)
{
	if (fd < 0 || stb_fd_is_runtime(fd)) {
		errno = EBADF; /* close(-1)'s; or a stale copy of a closed fd */
		return -1;
	}
	/* The epoll fd first: created later, it could take the number freed
	 * here, and a waiter that still has it would then wait on it. */
	pthread_once(&stb_fd_once, stb_fd_init_once);
	/* The entry even if no bthread waited on fd yet: a first waiter may be
	 * making it now, and would arm fd just before a close that did not see
	 * it, then sleep past the close (epoll forgets a closed fd silently).
	 * Under the entry's lock the two are ordered. */
	struct stb_fd_entry *e = stb_fd_entry(fd);
	if (!e)
		return close_without_entry(fd);
	stb_lock(&e->lock);
	if (e->closing) {
		stb_unlock(&e->lock);
		errno = EBADF; /* a concurrent bthread_close of the same fd */
		return -1;
	}
	if (e->events)
		epoll_ctl(stb_epfd, EPOLL_CTL_DEL, fd, NULL);
	e->events = 0;
	e->closes++;
	/* Until close(2) returned, an arriving waiter fails (EBADF) rather than
	 * arming the fd and sleeping past the close. */
	e->closing = true;
	__atomic_fetch_add(&e->butex->value, 1, __ATOMIC_RELEASE);
	stb_unlock(&e->lock);
	stb_butex_wake(e->butex, true);
	int rc = close(fd);
	int err = errno;
	stb_lock(&e->lock);
	e->closing = false;
	stb_unlock(&e->lock);
	errno = err;
	return rc;
}

/* connect(2) of a non-blocking socket, then a wait for its completion. */
static int connect_wait(int sockfd, const struct sockaddr *addr, socklen_t len,
			const struct timespec *abstime)
{
	if (connect(sockfd, addr, len) == 0)
		return 0;
	if (stb_errno_get() != EINPROGRESS)
		return -1;
	if (fd_wait(sockfd, EPOLLOUT, abstime, false) != 0)
		return -1;
	int err = 0;
	socklen_t elen = sizeof(err);
	if (getsockopt(sockfd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
		return -1;
	if (err != 0) {
		stb_errno_set(err);
		return -1;
	}
	return 0;
}

int bthread_timed_connect(int sockfd, const struct sockaddr *serv_addr, socklen_t addrlen,
			  const struct timespec *abstime)
{
	if (!stb_can_suspend() && !abstime)
		return connect(sockfd, serv_addr, addrlen);
	int flags = fcntl(sockfd, F_GETFL);
	if (flags < 0)
		return -1;
	if (!(flags & O_NONBLOCK) && fcntl(sockfd, F_SETFL, flags | O_NONBLOCK) != 0)
		return -1;
	int rc = connect_wait(sockfd, serv_addr, addrlen, abstime);
	if (!(flags & O_NONBLOCK)) {
		int err = stb_errno_get();
		fcntl(sockfd, F_SETFL, flags);
		stb_errno_set(err);
	}
	return rc;
}

int bthread_connect(int sockfd, const struct sockaddr *serv_addr, socklen_t addrlen)
{
	return bthread_timed_connect(sockfd, serv_addr, addrlen, NULL);
}

/*
 * bRPC's debug builds count fd-wait retries in bthread::break_nums and its
 * fd test reads it; the symbol (an int) keeps such code linking.
 */
STB_EXPORT int stb_brpc_break_nums __asm__("_ZN7bthread10break_numsE");
int stb_brpc_break_nums;
