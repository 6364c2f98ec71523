/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test support (support/ptarget.h): tests/profile_target.c started and
 * stopped.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "env.h"
#include "proc.h"
#include "ptarget.h"

/* Starts `profile_target mode` and waits (20 s) for its "ready" line. 0 or -1. */
int ts_ptarget_start(struct ts_ptarget *t, const char *mode)
{
	const char *path = ts_env("STB_PROFILE_TARGET", "./profile_target");
	int in[2], out[2];
	memset(t, 0, sizeof(*t));
	if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0)
		return -1;
	t->pid = fork();
	if (t->pid < 0)
		return -1;
	if (t->pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		execl(path, path, mode, (char *)NULL);
		fprintf(stderr, "cannot run %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	t->in_fd = in[1];
	size_t len = 0;
	uint64_t deadline = ts_now_ms() + 20000;
	while (len + 1 < sizeof(t->ready) && ts_now_ms() < deadline) {
		struct pollfd pfd = {.fd = out[0], .events = POLLIN};
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		ssize_t n = read(out[0], t->ready + len, 1);
		if (n <= 0)
			break;
		if (t->ready[len] == '\n')
			break;
		len++;
	}
	t->ready[len] = '\0';
	close(out[0]);
	if (strncmp(t->ready, "ready", 5) != 0) {
		fprintf(stderr, "profile_target %s did not get ready (got \"%s\")\n", mode,
			t->ready);
		kill(t->pid, SIGKILL);
		waitpid(t->pid, NULL, 0);
		close(t->in_fd);
		t->pid = 0;
		return -1;
	}
	return 0;
}

/* Ends the target (closes its stdin) and reaps it. Returns its exit status. */
int ts_ptarget_stop(struct ts_ptarget *t)
{
	if (t->pid <= 0)
		return -1;
	close(t->in_fd);
	int rc = ts_wait_pid(t->pid, ts_now_ms() + 10000);
	t->pid = 0;
	return rc;
}

/* The value of "key=..." (up to a space) in the ready line, or NULL. */
const char *ts_ptarget_field(const struct ts_ptarget *t, const char *key, char *buf, size_t size)
{
	char pat[64];
	snprintf(pat, sizeof(pat), " %s=", key);
	const char *p = strstr(t->ready, pat);
	if (!p)
		return NULL;
	p += strlen(pat);
	size_t n = strcspn(p, " ");
	if (n >= size)
		n = size - 1;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return buf;
}
