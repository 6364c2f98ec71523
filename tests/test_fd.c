/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_fd_wait / bthread_fd_timedwait: readability of a pipe and of a
 * socketpair, writability of a socket (also after it was full), hang-up,
 * ETIMEDOUT on an empty pipe, EINVAL for bad arguments, EPERM for a regular
 * file, many bthreads each waiting on its own pipe; bthread_close against a
 * waiter in every order (also in a fresh process, before the runtime's epoll
 * fd exists, and as the first waiter of a range of fds makes its entries),
 * and the runtime's own descriptors refused.
 */
#include "test_util.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <bthread/bthread.h>
#include <bthread/butex.h>

struct stb_fdw_job {
	int fd;
	unsigned events;
	int timeout_ms; /* 0: bthread_fd_wait */
	int rc;
	int err;
	double took_ms;
	int waiting;
	int ready_after; /* poll(2) saw the event when the wait returned */
	int done;
	int want;       /* test_invalid: the errno expected */
};

static int stb_done(const struct stb_fdw_job *j)
{
	return __atomic_load_n(&j->done, __ATOMIC_ACQUIRE);
}

static int stb_poll_now(int fd, unsigned events)
{
	struct pollfd p = {.fd = fd, .events = 0};
	if (events & EPOLLIN)
		p.events |= POLLIN;
	if (events & EPOLLOUT)
		p.events |= POLLOUT;
	return poll(&p, 1, 0) == 1 ? 1 : 0;
}

static void *stb_fdw_run(void *arg)
{
	struct stb_fdw_job *j = arg;
	/* t0 first: whoever waits for "waiting" then acts after t0. */
	uint64_t t0 = stb_now_ns();
	__atomic_store_n(&j->waiting, 1, __ATOMIC_RELEASE);
	if (j->timeout_ms) {
		struct timespec abs = stb_realtime_after_ms((uint64_t)j->timeout_ms);
		j->rc = bthread_fd_timedwait(j->fd, j->events, &abs);
	} else {
		j->rc = bthread_fd_wait(j->fd, j->events);
	}
	j->err = j->rc ? stb_test_errno() : 0;
	j->took_ms = stb_test_ms_since(t0);
	j->ready_after = stb_poll_now(j->fd, j->events);
	__atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Starts a waiter, lets it block for ~delay_ms, then runs action. */
static void stb_wait_then(struct stb_fdw_job *j, bthread_t *t, unsigned delay_ms)
{
	assert_int_equal(bthread_start_background(t, &BTHREAD_ATTR_SMALL, stb_fdw_run, j), 0);
	assert_true(STB_WAIT_UNTIL(__atomic_load_n(&j->waiting, __ATOMIC_ACQUIRE), 5000));
	stb_test_sleep_ms(delay_ms);
}

static void test_pipe_readable(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	int p[2];
	assert_int_equal(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
	for (int round = 0; round < 3; round++) {
		struct stb_fdw_job j = {.fd = p[0], .events = EPOLLIN, .timeout_ms = round == 2 ? 5000 : 0};
		bthread_t t;
		stb_wait_then(&j, &t, 30);
		/* Nothing written yet: still waiting. */
		assert_int_equal(stb_done(&j), 0);
		char c = (char)('a' + round);
		assert_int_equal(write(p[1], &c, 1), 1);
		assert_int_equal(bthread_join(t, NULL), 0);
		assert_int_equal(j.rc, 0);
		assert_true(j.took_ms >= 25.0);
		assert_true(j.took_ms < 2000.0);
		assert_int_equal(j.ready_after, 1);
		char r = 0;
		assert_int_equal(read(p[0], &r, 1), 1);
		assert_int_equal(r, c);
	}
	/* Already readable: returns at once. */
	assert_int_equal(write(p[1], "x", 1), 1);
	struct stb_fdw_job j = {.fd = p[0], .events = EPOLLIN};
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_fdw_run, &j), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(j.rc, 0);
	assert_true(j.took_ms < 1000.0);
	char r;
	assert_int_equal(read(p[0], &r, 1), 1);
	close(p[0]);
	close(p[1]);
	STB_TEST_END();
}

static void test_pipe_timeout(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	int p[2];
	assert_int_equal(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
	for (int i = 0; i < 2; i++) {
		struct stb_fdw_job j = {.fd = p[0], .events = EPOLLIN, .timeout_ms = 50};
		bthread_t t;
		assert_int_equal(bthread_start_background(&t, NULL, stb_fdw_run, &j), 0);
		assert_int_equal(bthread_join(t, NULL), 0);
		assert_int_equal(j.rc, -1);
		assert_int_equal(j.err, ETIMEDOUT);
		assert_true(j.took_ms >= 49.0);
		assert_true(j.took_ms < 1000.0);
	}
	/* After timeouts the fd still works. */
	struct stb_fdw_job j = {.fd = p[0], .events = EPOLLIN, .timeout_ms = 5000};
	bthread_t t;
	stb_wait_then(&j, &t, 20);
	assert_int_equal(write(p[1], "y", 1), 1);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(j.rc, 0);
	close(p[0]);
	close(p[1]);
	STB_TEST_END();
}

static void test_socketpair(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	/* A fresh socket is writable at once. */
	struct stb_fdw_job w = {.fd = sv[0], .events = EPOLLOUT, .timeout_ms = 2000};
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_fdw_run, &w), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(w.rc, 0);
	assert_true(w.took_ms < 1000.0);
	/* EPOLLIN after the peer writes. */
	struct stb_fdw_job r = {.fd = sv[1], .events = EPOLLIN};
	stb_wait_then(&r, &t, 30);
	assert_int_equal(write(sv[0], "ping", 4), 4);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(r.rc, 0);
	assert_true(r.took_ms >= 25.0);
	char buf[8];
	assert_int_equal(read(sv[1], buf, sizeof(buf)), 4);

	/* Fill sv[0]: EPOLLOUT waits until the peer drains it. */
	static char chunk[65536];
	size_t filled = 0;
	for (;;) {
		ssize_t k = write(sv[0], chunk, sizeof(chunk));
		if (k < 0) {
			assert_int_equal(errno, EAGAIN);
			break;
		}
		filled += (size_t)k;
	}
	assert_true(filled > 0);
	assert_int_equal(stb_poll_now(sv[0], EPOLLOUT), 0);
	struct stb_fdw_job o = {.fd = sv[0], .events = EPOLLOUT, .timeout_ms = 5000};
	stb_wait_then(&o, &t, 30);
	size_t drained = 0;
	while (drained < filled) {
		ssize_t k = read(sv[1], chunk, sizeof(chunk));
		if (k <= 0)
			break;
		drained += (size_t)k;
	}
	assert_int_equal(drained, filled);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(o.rc, 0);
	assert_true(o.took_ms >= 25.0);
	assert_int_equal(o.ready_after, 1);

	/* The peer closing wakes a reader (EPOLLHUP is always reported). */
	struct stb_fdw_job h = {.fd = sv[0], .events = EPOLLIN};
	stb_wait_then(&h, &t, 30);
	close(sv[1]);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(h.rc, 0);
	assert_int_equal(read(sv[0], buf, sizeof(buf)), 0);
	close(sv[0]);
	STB_TEST_END();
}

/*
 * A reader and a writer of one socket wait at once: each returns only when
 * its own direction is ready (an EPOLLIN event must not end the EPOLLOUT wait).
 */
static void test_both_directions(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	static char chunk[65536];
	while (write(sv[0], chunk, sizeof(chunk)) > 0)
		;
	struct stb_fdw_job in = {.fd = sv[0], .events = EPOLLIN, .timeout_ms = 5000};
	struct stb_fdw_job out = {.fd = sv[0], .events = EPOLLOUT, .timeout_ms = 5000};
	bthread_t ti, to;
	stb_wait_then(&in, &ti, 0);
	stb_wait_then(&out, &to, 30);
	assert_int_equal(stb_done(&in), 0);
	assert_int_equal(stb_done(&out), 0);
	/* sv[0] becomes readable: the reader must return with data there. */
	assert_int_equal(write(sv[1], "z", 1), 1);
	assert_true(STB_WAIT_UNTIL(stb_done(&in), 5000));
	assert_int_equal(in.rc, 0);
	assert_int_equal(in.ready_after, 1);
	/* That event was not the writer's: it must still be waiting. */
	stb_test_sleep_ms(30);
	assert_int_equal(stb_done(&out), 0);
	assert_int_equal(stb_poll_now(sv[0], EPOLLOUT), 0);
	/* Drain the peer: the writer must return with space there. */
	while (read(sv[1], chunk, sizeof(chunk)) > 0)
		;
	assert_int_equal(bthread_join(to, NULL), 0);
	assert_int_equal(bthread_join(ti, NULL), 0);
	assert_int_equal(out.rc, 0);
	assert_int_equal(stb_poll_now(sv[0], EPOLLOUT), 1);
	close(sv[0]);
	close(sv[1]);
	STB_TEST_END();
}

static void test_invalid(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	int closed = p[0];
	close(p[0]);
	close(p[1]);
	/* EINVAL for a negative fd or nothing to wait for (EPOLLET alone used to
	 * block a pthread forever), EBADF for a closed fd (as bRPC). */
	struct stb_fdw_job jobs[] = {
		{.fd = -1, .events = EPOLLIN, .want = EINVAL},
		{.fd = -5, .events = EPOLLIN, .timeout_ms = 100, .want = EINVAL},
		{.fd = closed, .events = EPOLLIN, .want = EBADF},
		{.fd = closed, .events = EPOLLIN, .timeout_ms = 100, .want = EBADF},
		{.fd = 0, .events = 0, .want = EINVAL},
		{.fd = 0, .events = EPOLLET, .want = EINVAL},
		{.fd = 0, .events = EPOLLET | EPOLLONESHOT, .timeout_ms = 100, .want = EINVAL},
	};
	for (unsigned i = 0; i < sizeof(jobs) / sizeof(jobs[0]); i++) {
		/* From a bthread, then from this pthread. */
		bthread_t t;
		assert_int_equal(bthread_start_background(&t, NULL, stb_fdw_run, &jobs[i]), 0);
		assert_int_equal(bthread_join(t, NULL), 0);
		assert_int_equal(jobs[i].rc, -1);
		assert_int_equal(jobs[i].err, jobs[i].want);
		struct stb_fdw_job pj = jobs[i];
		stb_fdw_run(&pj);
		assert_int_equal(pj.rc, -1);
		assert_int_equal(pj.err, jobs[i].want);
	}
	STB_TEST_END();
}

/* Many bthreads, each on its own pipe; woken in a shuffled order. */
static void test_many_pipes(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	enum { N = 200 };
	static int pipes[N][2];
	static struct stb_fdw_job jobs[N];
	static bthread_t t[N];
	memset(jobs, 0, sizeof(jobs));
	for (int i = 0; i < N; i++) {
		assert_int_equal(pipe2(pipes[i], O_NONBLOCK | O_CLOEXEC), 0);
		jobs[i].fd = pipes[i][0];
		jobs[i].events = EPOLLIN;
		jobs[i].timeout_ms = 10000;
		assert_int_equal(bthread_start_background(&t[i], &BTHREAD_ATTR_SMALL, stb_fdw_run,
							  &jobs[i]),
				 0);
	}
	for (int i = 0; i < N; i++)
		assert_true(STB_WAIT_UNTIL(__atomic_load_n(&jobs[i].waiting, __ATOMIC_ACQUIRE), 5000));
	stb_test_sleep_ms(30);
	/* Wake the odd ones only: the even ones must keep waiting. */
	for (int i = 1; i < N; i += 2)
		assert_int_equal(write(pipes[i][1], "o", 1), 1);
	for (int i = 1; i < N; i += 2)
		assert_true(STB_WAIT_UNTIL(stb_done(&jobs[i]), 5000));
	stb_test_sleep_ms(30);
	for (int i = 0; i < N; i += 2)
		assert_int_equal(stb_done(&jobs[i]), 0);
	for (int i = N - 2; i >= 0; i -= 2)
		assert_int_equal(write(pipes[i][1], "e", 1), 1);
	for (int i = 0; i < N; i++) {
		assert_int_equal(bthread_join(t[i], NULL), 0);
		assert_int_equal(jobs[i].rc, 0);
		assert_int_equal(jobs[i].ready_after, 1);
		char c;
		assert_int_equal(read(pipes[i][0], &c, 1), 1);
		assert_int_equal(c, (i & 1) ? 'o' : 'e');
		close(pipes[i][0]);
		close(pipes[i][1]);
	}
	STB_TEST_END();
}

/* A regular file: epoll cannot watch it, so a bthread's wait fails with
 * EPERM (as bRPC's); a pthread's poll(2) says it is ready. */
static void test_regular_file(void **state)
{
	(void)state;
	STB_TEST_BEGIN(10);
	char path[] = "/tmp/stb_test_fd_XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	struct stb_fdw_job j = {.fd = fd, .events = EPOLLIN, .timeout_ms = 5000};
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_fdw_run, &j), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(j.rc, -1);
	assert_int_equal(j.err, EPERM);
	assert_true(j.took_ms < 1000.0);
	struct stb_fdw_job pj = {.fd = fd, .events = EPOLLIN, .timeout_ms = 5000};
	stb_fdw_run(&pj);
	assert_int_equal(pj.rc, 0);
	close(fd);
	STB_TEST_END();
}

/* bthread_close wakes a waiting bthread (its wait returns 0); so do a stop
 * and an interrupt (0, as bRPC's: the caller checks its fd again). */
static void test_close_and_stop(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	int p[2];
	assert_int_equal(pipe(p), 0);
	struct stb_fdw_job j = {.fd = p[0], .events = EPOLLIN, .timeout_ms = 5000};
	bthread_t t;
	stb_wait_then(&j, &t, 30);
	assert_int_equal(bthread_close(p[0]), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(j.rc, 0);
	assert_true(j.took_ms < 1000.0);
	/* The fd is gone now. */
	assert_int_equal(bthread_fd_wait(p[0], EPOLLIN), -1);
	assert_int_equal(stb_test_errno(), EBADF);
	assert_int_equal(bthread_close(p[1]), 0);
	assert_int_equal(bthread_close(p[1]), -1);
	assert_int_equal(stb_test_errno(), EBADF);
	assert_int_equal(bthread_close(-1), -1);
	assert_int_equal(stb_test_errno(), EBADF);
	/* A stop and an interrupt end a wait at once, with 0. */
	for (int stop = 0; stop < 2; stop++) {
		assert_int_equal(pipe(p), 0);
		struct stb_fdw_job k = {.fd = p[0], .events = EPOLLIN, .timeout_ms = 5000};
		stb_wait_then(&k, &t, 30);
		assert_int_equal(stop ? bthread_stop(t) : bthread_interrupt(t), 0);
		assert_int_equal(bthread_join(t, NULL), 0);
		assert_int_equal(k.rc, 0);
		assert_true(k.took_ms < 1000.0);
		assert_int_equal(k.ready_after, 0); /* nothing to read: woken all the same */
		close(p[0]);
		close(p[1]);
	}
	STB_TEST_END();
}

/*
 * bthread_close and a waiting bthread in every order: the close first (the
 * wait fails with EBADF), the wait first (it returns 0), and both racing from
 * two threads with a random head start. A wait never outlives the close: it
 * returns 0 or EBADF, never its timeout; a later wait on the closed number
 * is EBADF, from a bthread and from a pthread.
 */
struct stb_closer {
	int fd;
	unsigned spin;
	int rc, err;
};

static void *stb_close_after(void *arg)
{
	struct stb_closer *c = arg;
	for (unsigned i = 0; i < c->spin; i++)
		bthread_yield();
	c->rc = bthread_close(c->fd);
	c->err = c->rc ? stb_test_errno() : 0;
	return NULL;
}

static void stb_expect_closed(int fd)
{
	struct stb_fdw_job later = {.fd = fd, .events = EPOLLIN, .timeout_ms = 2000};
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_fdw_run, &later), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(later.rc, -1);
	assert_int_equal(later.err, EBADF);
	struct stb_fdw_job pj = {.fd = fd, .events = EPOLLIN, .timeout_ms = 2000};
	stb_fdw_run(&pj);
	assert_int_equal(pj.rc, -1);
	assert_int_equal(pj.err, EBADF);
}

static void test_close_orders(void **state)
{
	(void)state;
	STB_TEST_BEGIN(60);
	int p[2];
	/* Closed before the wait starts. */
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(bthread_close(p[0]), 0);
	stb_expect_closed(p[0]);
	close(p[1]);
	/* Closed while it waits. */
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	struct stb_fdw_job j = {.fd = p[0], .events = EPOLLIN, .timeout_ms = 5000};
	bthread_t t;
	stb_wait_then(&j, &t, 20);
	assert_int_equal(bthread_close(p[0]), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(j.rc, 0);
	stb_expect_closed(p[0]);
	close(p[1]);
	/* Racing: the closer (a bthread or this pthread) and the waiter start
	 * together, the closer after a few yields. */
	srand(42);
	const int rounds = STB_TEST_SCALE(400, 100);
	int woken = 0, refused = 0;
	for (int i = 0; i < rounds; i++) {
		assert_int_equal(pipe2(p, O_CLOEXEC), 0);
		struct stb_fdw_job w = {.fd = p[0], .events = EPOLLIN, .timeout_ms = 5000};
		struct stb_closer c = {.fd = p[0], .spin = (unsigned)rand() % 4};
		bthread_t tw, tc = 0;
		assert_int_equal(bthread_start_background(&tw, NULL, stb_fdw_run, &w), 0);
		if (i & 1)
			assert_int_equal(bthread_start_background(&tc, NULL, stb_close_after, &c), 0);
		else
			stb_close_after(&c);
		if (tc)
			assert_int_equal(bthread_join(tc, NULL), 0);
		assert_int_equal(bthread_join(tw, NULL), 0);
		assert_int_equal(c.rc, 0);
		if (w.rc != 0 && w.err != EBADF)
			fail_msg("round %d: the wait ended with %d/%d (%.0f ms), not 0 or EBADF", i,
				 w.rc, w.err, w.took_ms);
		woken += w.rc == 0;
		refused += w.rc != 0;
		if (i % 50 == 0)
			stb_expect_closed(p[0]);
		close(p[1]);
	}
	print_message("    %d races: %d waits woken by the close, %d refused (EBADF)\n", rounds,
		      woken, refused);
	STB_TEST_END();
}

/* The fds of this process whose /proc/self/fd link starts with prefix. */
static int stb_fds_named(const char *prefix, int *out, int max)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return 0;
	int n = 0, dfd = dirfd(d);
	struct dirent *de;
	while ((de = readdir(d)) && n < max) {
		char path[64], link[256];
		int fd = atoi(de->d_name);
		if (de->d_name[0] == '.' || fd == dfd)
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		ssize_t k = readlink(path, link, sizeof(link) - 1);
		if (k <= 0)
			continue;
		link[k] = '\0';
		if (strncmp(link, prefix, strlen(prefix)) == 0)
			out[n++] = fd;
	}
	closedir(d);
	return n;
}

/*
 * The runtime's own descriptors (its epoll fd, the task table's memfd) are
 * never a user's: a wait on such a number (a stale copy of a closed fd) fails
 * with EBADF instead of waiting on them, and bthread_close leaves them open.
 */
static void test_runtime_fds_refused(void **state)
{
	(void)state;
	STB_TEST_BEGIN(20);
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(bthread_close(p[0]), 0); /* the epoll fd exists after a close */
	close(p[1]);
	int own[8], n = 0;
	int ep[4];
	int nep = stb_fds_named("anon_inode:[eventpoll]", ep, 4);
	assert_int_equal(nep, 1); /* this test opens none itself */
	own[n++] = ep[0];
	n += stb_fds_named("/memfd:stb_tasks", own + n, 1);
	assert_int_equal(n, 2);
	for (int i = 0; i < n; i++) {
		struct stb_fdw_job j = {.fd = own[i], .events = EPOLLIN, .timeout_ms = 1000};
		bthread_t t;
		assert_int_equal(bthread_start_background(&t, NULL, stb_fdw_run, &j), 0);
		assert_int_equal(bthread_join(t, NULL), 0);
		assert_int_equal(j.rc, -1);
		assert_int_equal(j.err, EBADF);
		struct stb_fdw_job pj = {.fd = own[i], .events = EPOLLIN | EPOLLOUT, .timeout_ms = 1000};
		stb_fdw_run(&pj);
		assert_int_equal(pj.rc, -1);
		assert_int_equal(pj.err, EBADF);
		assert_int_equal(bthread_close(own[i]), -1);
		assert_int_equal(stb_test_errno(), EBADF);
		assert_true(fcntl(own[i], F_GETFD) >= 0); /* still open */
	}
	/* Waits still work. */
	assert_int_equal(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
	struct stb_fdw_job j = {.fd = p[0], .events = EPOLLIN, .timeout_ms = 5000};
	bthread_t t;
	stb_wait_then(&j, &t, 10);
	assert_int_equal(write(p[1], "x", 1), 1);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(j.rc, 0);
	close(p[0]);
	close(p[1]);
	STB_TEST_END();
}

/*
 * bRPC's FDTest.close_should_wakeup_waiter in a fresh process (the runtime's
 * epoll fd does not exist yet): a bthread starts a 50 ms wait on a pipe and
 * the creator closes it at once -- or, with first_close, the wait starts only
 * after the close returned. The wait ends with 0 or EBADF (never EINVAL: an
 * epoll fd created after the close took the number), and a later wait on
 * that number is EBADF (never a wait on the runtime's epoll fd, which would
 * time out). Exit code 0, or the step that failed.
 */
struct stb_gated_job {
	int *gate;
	struct stb_fdw_job j;
};

static void *stb_gated_run(void *arg)
{
	struct stb_gated_job *g = arg;
	while (g->gate && !__atomic_load_n(g->gate, __ATOMIC_ACQUIRE))
		butex_wait(g->gate, 0, NULL);
	return stb_fdw_run(&g->j);
}

static int stb_close_race_child(bool close_first)
{
	int p[2];
	if (pipe(p) != 0)
		return 10;
	int *gate = close_first ? butex_create() : NULL;
	struct stb_gated_job g = {.gate = gate,
				  .j = {.fd = p[0], .events = EPOLLIN, .timeout_ms = 50}};
	bthread_t t;
	if (bthread_start_urgent(&t, NULL, stb_gated_run, &g) != 0)
		return 11;
	if (bthread_close(p[0]) != 0)
		return 12;
	if (gate) {
		__atomic_store_n(gate, 1, __ATOMIC_RELEASE);
		butex_wake(gate);
	}
	if (bthread_join(t, NULL) != 0)
		return 13;
	if (g.j.rc != 0 && g.j.err != EBADF) {
		fprintf(stderr, "close race: the wait ended with %d/%d\n", g.j.rc, g.j.err);
		return 14;
	}
	if (close_first && g.j.rc != -1)
		return 15;
	struct timespec abs = stb_realtime_after_ms(1000);
	if (bthread_fd_timedwait(p[0], EPOLLIN, &abs) != -1 || stb_test_errno() != EBADF) {
		fprintf(stderr, "close race: a later wait was not EBADF (errno %d)\n",
			stb_test_errno());
		return 16;
	}
	struct stb_fdw_job later = {.fd = p[0], .events = EPOLLIN, .timeout_ms = 1000};
	if (bthread_start_background(&t, NULL, stb_fdw_run, &later) != 0 ||
	    bthread_join(t, NULL) != 0)
		return 17;
	if (later.rc != -1 || later.err != EBADF) {
		fprintf(stderr, "close race: a later bthread wait ended with %d/%d\n", later.rc,
			later.err);
		return 18;
	}
	return bthread_close(p[1]) == 0 ? 0 : 19;
}

/*
 * close(2) as the runtime calls it, for one test: on a thread that set
 * close_delay_ns it waits that long first. bthread_close looks at the
 * fd's entry, then closes: the wait widens the window between the two to
 * one a first waiter can surely use. Otherwise the next close (libc's, or
 * a sanitizer's).
 */
static _Thread_local uint64_t close_delay_ns;

/* Default visibility: exported, so that libbthread's close binds to it. */
__attribute__((visibility("default"))) int close(int fd)
{
	static int (*next)(int);
	if (!__atomic_load_n(&next, __ATOMIC_ACQUIRE)) {
		int (*f)(int);
		*(void **)&f = dlsym(RTLD_NEXT, "close");
		if (!f)
			abort();
		__atomic_store_n(&next, f, __ATOMIC_RELEASE);
	}
	if (close_delay_ns) {
		uint64_t until = stb_now_ns() + close_delay_ns;
		while (stb_now_ns() < until)
			;
	}
	return __atomic_load_n(&next, __ATOMIC_ACQUIRE)(fd);
}

/*
 * The close racing the first wait on an fd of a range no bthread waited on
 * yet (the runtime makes the entries of 1,024 fds at a time, at the first
 * wait): the waiter makes the entries and arms the fd while the closer,
 * its close(2) 0.5 ms late, closes it. The wait ends with 0 or EBADF,
 * never with its timeout (armed after the closer looked for the entry and
 * before the fd was closed, not woken). A round in each range of its own,
 * as many as RLIMIT_NOFILE allows (raised to its hard limit), up to 48.
 * Exit code 0, or the step that failed.
 */
static int stb_close_race_ranges_child(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 30;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	for (uint64_t r = 0; r < 48; r++) {
		/* High in range r: its chunk of entries is made by this round. */
		uint64_t want = r * 1024 + 1000;
		if (want >= rl.rlim_cur) {
			if (r)
				break;
			want = rl.rlim_cur - 1;
		}
		int p[2];
		if (pipe(p) != 0)
			return 31;
		int fd = (int)want;
		if (fd <= p[1] || dup2(p[0], fd) != fd)
			return 32;
		close(p[0]);
		struct stb_fdw_job j = {.fd = fd, .events = EPOLLIN, .timeout_ms = 200};
		bthread_t t;
		if (bthread_start_urgent(&t, NULL, stb_fdw_run, &j) != 0)
			return 33;
		while (!__atomic_load_n(&j.waiting, __ATOMIC_ACQUIRE))
			;
		close_delay_ns = 500000;
		int rc = bthread_close(fd);
		close_delay_ns = 0;
		if (rc != 0)
			return 34;
		if (bthread_join(t, NULL) != 0)
			return 35;
		if (j.rc != 0 && j.err != EBADF) {
			fprintf(stderr, "close race, range %" PRIu64 ": the wait ended with %d/%d\n",
				r, j.rc, j.err);
			return 36;
		}
		close(p[1]);
	}
	return 0;
}

/* Runs this program n times with mode (its main's first argument): each
 * must exit 0 within 10 s; else the step it failed at. */
static void stb_run_children(const char *const *modes, int n)
{
	for (int run = 0; run < n; run++) {
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			execl("/proc/self/exe", "test_fd", modes[run], (char *)NULL);
			_exit(127);
		}
		/* Bounded: a child that hangs is killed and counts as a failure. */
		int status = 0;
		bool exited = STB_WAIT_UNTIL(waitpid(pid, &status, WNOHANG) == pid, 10000);
		if (!exited) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fail_msg("run %d (%s): the child hung", run, modes[run]);
		}
		assert_true(WIFEXITED(status));
		if (WEXITSTATUS(status) != 0)
			fail_msg("run %d (%s): the child failed at step %d", run, modes[run],
				 WEXITSTATUS(status));
	}
}

static void test_close_race_fresh_process(void **state)
{
	(void)state;
	STB_TEST_BEGIN(120);
	/* Run 0: the close surely first; then the race as bRPC's test has it. */
	const char *modes[11] = {"--close-first"};
	for (int i = 1; i < 11; i++)
		modes[i] = "--close-race";
	stb_run_children(modes, 11);
	STB_TEST_END();
}

static void test_close_race_first_waiter(void **state)
{
	(void)state;
	STB_TEST_BEGIN(120);
	const char *modes[8];
	for (int i = 0; i < 8; i++)
		modes[i] = "--close-race-ranges";
	stb_run_children(modes, 8);
	STB_TEST_END();
}

struct stb_conn_job {
	struct sockaddr_in addr;
	int timeout_ms; /* 0: bthread_connect */
	int rc, err;
	int blocking_kept;
};

static void *stb_conn_run(void *arg)
{
	struct stb_conn_job *j = arg;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	int before = fcntl(fd, F_GETFL);
	if (j->timeout_ms) {
		struct timespec abs = stb_realtime_after_ms((uint64_t)j->timeout_ms);
		j->rc = bthread_timed_connect(fd, (struct sockaddr *)&j->addr, sizeof(j->addr), &abs);
	} else {
		j->rc = bthread_connect(fd, (struct sockaddr *)&j->addr, sizeof(j->addr));
	}
	j->err = j->rc ? stb_test_errno() : 0;
	j->blocking_kept = fcntl(fd, F_GETFL) == before;
	close(fd);
	return NULL;
}

/*
 * bthread_connect / bthread_timed_connect from a bthread and a pthread: a
 * local listener connects, keeping the socket's blocking mode; a full
 * accept queue times out (or is refused); a closed port is refused.
 */
static void test_connect(void **state)
{
	(void)state;
	STB_TEST_BEGIN(30);
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	socklen_t len = sizeof(a);
	assert_int_equal(getsockname(l, (struct sockaddr *)&a, &len), 0);
	assert_int_equal(listen(l, 16), 0);
	for (int kind = 0; kind < 2; kind++) {
		for (int timed = 0; timed < 2; timed++) {
			struct stb_conn_job j = {.addr = a, .timeout_ms = timed ? 5000 : 0};
			if (kind == 0) {
				bthread_t t;
				assert_int_equal(bthread_start_background(&t, NULL, stb_conn_run, &j), 0);
				assert_int_equal(bthread_join(t, NULL), 0);
			} else {
				stb_conn_run(&j);
			}
			assert_int_equal(j.rc, 0);
			assert_true(j.blocking_kept);
			int c = accept(l, NULL, NULL);
			assert_true(c >= 0);
			close(c);
		}
	}
	/* A full accept queue (backlog 0: one queued connection). */
	assert_int_equal(listen(l, 0), 0);
	struct stb_conn_job fill = {.addr = a, .timeout_ms = 5000};
	int q = socket(AF_INET, SOCK_STREAM, 0);
	struct timespec abs = stb_realtime_after_ms(5000);
	assert_int_equal(bthread_timed_connect(q, (struct sockaddr *)&a, sizeof(a), &abs), 0);
	fill.timeout_ms = 50;
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, NULL, stb_conn_run, &fill), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(fill.rc, -1);
	assert_true(fill.err == ETIMEDOUT || fill.err == ECONNREFUSED);
	assert_true(fill.blocking_kept);
	close(q);
	close(l);
	/* Nobody listens any more. */
	struct stb_conn_job refused = {.addr = a};
	assert_int_equal(bthread_start_background(&t, NULL, stb_conn_run, &refused), 0);
	assert_int_equal(bthread_join(t, NULL), 0);
	assert_int_equal(refused.rc, -1);
	assert_int_equal(refused.err, ECONNREFUSED);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
	/* The children race on the number of a closed fd, which any open in
	 * the process may take meanwhile: glibc's malloc reads
	 * /sys/devices/system/cpu/online when a ninth thread makes its arena
	 * (a worker starting late on a busy machine), unless the number of
	 * arenas is set. */
	if (argc > 1 && strncmp(argv[1], "--close-", 8) == 0)
		mallopt(M_ARENA_MAX, 8);
	if (argc > 1 && strcmp(argv[1], "--close-race") == 0)
		return stb_close_race_child(false);
	if (argc > 1 && strcmp(argv[1], "--close-first") == 0)
		return stb_close_race_child(true);
	if (argc > 1 && strcmp(argv[1], "--close-race-ranges") == 0)
		return stb_close_race_ranges_child();
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pipe_readable),
		cmocka_unit_test(test_pipe_timeout),
		cmocka_unit_test(test_socketpair),
		cmocka_unit_test(test_both_directions),
		cmocka_unit_test(test_invalid),
		cmocka_unit_test(test_many_pipes),
		cmocka_unit_test(test_regular_file),
		cmocka_unit_test(test_close_and_stop),
		cmocka_unit_test(test_close_orders),
		cmocka_unit_test(test_runtime_fds_refused),
		cmocka_unit_test(test_close_race_fresh_process),
		cmocka_unit_test(test_close_race_first_waiter),
		cmocka_unit_test(test_connect),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
