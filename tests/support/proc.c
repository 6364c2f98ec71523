/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Running programs from tests (support/proc.h): with stdin from /dev/null,
 * stdout and stderr captured (pipes or a pseudo-terminal), an optional hook
 * between fork and exec, a time limit, the exit status and resource usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"

uint64_t ts_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ts_sleep_ms(unsigned ms)
{
	struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000l};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int ts_buf_add(struct ts_buf *b, const void *data, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

void ts_buf_free(struct ts_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* Starts argv[0] (a path, or a name looked up in PATH) with stdin from
 * /dev/null and stdout/stderr on pipes. env: extra "K=V" strings or NULL.
 * Returns 0 or -errno. */
int ts_proc_start(struct ts_proc *p, char *const argv[], char *const env[], ts_pre_exec_fn pre,
		  void *pre_arg)
{
	int out[2], err[2];
	memset(p, 0, sizeof(*p));
	p->out_fd = p->err_fd = -1;
	if (pipe2(out, O_CLOEXEC) != 0)
		return -errno;
	if (pipe2(err, O_CLOEXEC) != 0) {
		int e = -errno;
		close(out[0]);
		close(out[1]);
		return e;
	}
	p->pid = fork();
	if (p->pid < 0) {
		int e = -errno;
		close(out[0]);
		close(out[1]);
		close(err[0]);
		close(err[1]);
		return e;
	}
	if (p->pid == 0) {
		int null = open("/dev/null", O_RDONLY);
		if (null >= 0)
			dup2(null, STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		dup2(err[1], STDERR_FILENO);
		for (int i = 0; env && env[i]; i++)
			putenv(env[i]);
		if (pre && pre(pre_arg) != 0)
			_exit(126);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	p->out_fd = out[0];
	p->err_fd = err[0];
	return 0;
}

/* Waits up to wait_ms for output of the child and appends what arrived.
 * Returns false once both of its pipes are closed. */
bool ts_proc_pump(struct ts_proc *p, int wait_ms)
{
	struct pollfd pf[2];
	int n = 0;
	if (p->out_fd >= 0)
		pf[n++] = (struct pollfd){.fd = p->out_fd, .events = POLLIN};
	if (p->err_fd >= 0)
		pf[n++] = (struct pollfd){.fd = p->err_fd, .events = POLLIN};
	if (n == 0)
		return false;
	if (poll(pf, (nfds_t)n, wait_ms) < 0)
		return errno == EINTR;
	for (int i = 0; i < n; i++) {
		if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		char chunk[65536];
		ssize_t k = read(pf[i].fd, chunk, sizeof(chunk));
		if (k < 0 && errno == EINTR)
			continue;
		bool is_out = pf[i].fd == p->out_fd;
		if (k <= 0) {
			close(pf[i].fd);
			if (is_out)
				p->out_fd = -1;
			else
				p->err_fd = -1;
			continue;
		}
		ts_buf_add(is_out ? &p->out : &p->err, chunk, (size_t)k);
	}
	return p->out_fd >= 0 || p->err_fd >= 0;
}

/* Reads the child's output until both pipes close and reaps it, for at most
 * timeout_ms (then SIGKILLs it). Returns 0, or -ETIMEDOUT after a kill. */
int ts_proc_wait(struct ts_proc *p, int timeout_ms)
{
	uint64_t deadline = ts_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int rc = 0;
	for (;;) {
		uint64_t now = ts_now_ns();
		if (now >= deadline && rc == 0) {
			kill(p->pid, SIGKILL);
			rc = -ETIMEDOUT;
		}
		int wait_ms = rc ? 1000 : (int)((deadline - now) / 1000000u) + 1;
		if (!ts_proc_pump(p, wait_ms))
			break;
	}
	if (!p->out.p)
		ts_buf_add(&p->out, "", 0);
	if (!p->err.p)
		ts_buf_add(&p->err, "", 0);
	while (wait4(p->pid, &p->status, 0, &p->ru) < 0 && errno == EINTR)
		;
	p->reaped = true;
	return rc;
}

/* Reads the child's output until its stderr contains needle (true), or
 * timeout_ms passed or both pipes closed (false). Does not reap it. */
bool ts_proc_wait_for(struct ts_proc *p, const char *needle, int timeout_ms)
{
	uint64_t deadline = ts_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	while (!(p->err.p && strstr(p->err.p, needle))) {
		uint64_t now = ts_now_ns();
		if (now >= deadline)
			return false;
		if (!ts_proc_pump(p, (int)((deadline - now) / 1000000u) + 1))
			return p->err.p && strstr(p->err.p, needle);
	}
	return true;
}

/* Exit code, or 128 + signal. */
int ts_proc_exit_code(const struct ts_proc *p)
{
	if (WIFEXITED(p->status))
		return WEXITSTATUS(p->status);
	if (WIFSIGNALED(p->status))
		return 128 + WTERMSIG(p->status);
	return -1;
}

void ts_proc_free(struct ts_proc *p)
{
	if (p->out_fd >= 0)
		close(p->out_fd);
	if (p->err_fd >= 0)
		close(p->err_fd);
	if (!p->reaped && p->pid > 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
	}
	ts_buf_free(&p->out);
	ts_buf_free(&p->err);
	p->out_fd = p->err_fd = -1;
	p->reaped = true;
}

uint64_t ts_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Waits for pid up to deadline_ms (ts_now_ms clock); kills it after. Returns
 * the exit status, 128 + signal, or -1. */
int ts_wait_pid(pid_t pid, uint64_t deadline_ms)
{
	int st;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR)
			return -1;
		if (ts_now_ms() > deadline_ms) {
			fprintf(stderr, "ts_wait_pid: pid %d timed out: killing it\n", (int)pid);
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return 128 + SIGKILL;
		}
		usleep(10000);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/*
 * Runs argv with stdout and stderr on a new pseudo-terminal; everything
 * written to it goes to *out. Returns the exit status as ts_run.
 */
int ts_run_pty(char *const argv[], char **out, int timeout_s)
{
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0)
		return -1;
	const char *slave = ptsname(m);
	if (!slave)
		return -1;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int s = open(slave, O_RDWR | O_NOCTTY);
		int nul = open("/dev/null", O_RDWR);
		dup2(nul, 0);
		dup2(s, 1);
		dup2(s, 2);
		execvp(argv[0], argv);
		_exit(127);
	}
	struct ts_buf b = {0};
	ts_buf_add(&b, "", 0);
	uint64_t deadline = ts_now_ms() + (uint64_t)timeout_s * 1000u;
	int rc = -1;
	for (;;) {
		struct pollfd pfd = {.fd = m, .events = POLLIN};
		if (poll(&pfd, 1, 50) > 0) {
			char buf[4096];
			ssize_t n = read(m, buf, sizeof(buf));
			if (n > 0) {
				ts_buf_add(&b, buf, (size_t)n);
				continue;
			}
		}
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid) {
			rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			/* Whatever is still buffered in the terminal. */
			for (;;) {
				struct pollfd p2 = {.fd = m, .events = POLLIN};
				char buf[4096];
				ssize_t n;
				if (poll(&p2, 1, 50) <= 0 || (n = read(m, buf, sizeof(buf))) <= 0)
					break;
				ts_buf_add(&b, buf, (size_t)n);
			}
			break;
		}
		if (ts_now_ms() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			rc = 128 + SIGKILL;
			break;
		}
	}
	close(m);
	*out = b.p;
	return rc;
}

int ts_run(char *const argv[], char **out, char **err, int timeout_s)
{
	struct ts_proc p;
	if (ts_proc_start(&p, argv, NULL, NULL, NULL) != 0)
		return -1;
	ts_proc_wait(&p, timeout_s * 1000);
	int rc = ts_proc_exit_code(&p);
	if (out) {
		*out = p.out.p;
		p.out.p = NULL;
	}
	if (err) {
		*err = p.err.p;
		p.err.p = NULL;
	}
	ts_proc_free(&p);
	return rc;
}
