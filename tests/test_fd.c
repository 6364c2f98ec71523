/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_fd_wait / bthread_fd_timedwait: readability of a pipe and of a
 * socketpair, writability of a socket (also after it was full), hang-up,
 * ETIMEDOUT on an empty pipe, EINVAL for bad arguments, and many bthreads
 * each waiting on its own pipe.
 */
#include "test_util.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <bthread/bthread.h>

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

/* A regular file is always ready. */
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
	assert_int_equal(j.rc, 0);
	assert_true(j.took_ms < 1000.0);
	close(fd);
	STB_TEST_END();
}

int main(int argc, char **argv)
{
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
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
