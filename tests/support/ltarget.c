/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test support (support/ltarget.h): loader_target driven over its line
 * protocol.
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

#include "ltarget.h"
#include "proc.h"

/* Reads one line from t (without the newline) within timeout_ms. 0 or -errno. */
int ts_ltarget_line(struct ts_ltarget *t, char *line, size_t len, int timeout_ms)
{
	uint64_t deadline = ts_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	for (;;) {
		char *nl = memchr(t->pend, '\n', t->npend);
		if (nl) {
			size_t n = (size_t)(nl - t->pend);
			size_t k = n < len - 1 ? n : len - 1;
			memcpy(line, t->pend, k);
			line[k] = '\0';
			memmove(t->pend, nl + 1, t->npend - n - 1);
			t->npend -= n + 1;
			return 0;
		}
		if (t->npend == sizeof(t->pend))
			return -E2BIG;
		uint64_t now = ts_now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		struct pollfd pf = {.fd = t->from_fd, .events = POLLIN};
		int n = poll(&pf, 1, (int)((deadline - now) / 1000000u) + 1);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n <= 0)
			continue;
		ssize_t k = read(t->from_fd, t->pend + t->npend, sizeof(t->pend) - t->npend);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -EPIPE;
		t->npend += (size_t)k;
	}
}

/* Starts loader_target at path with args (NULL-terminated, may be NULL) and
 * extra environment env (NULL or NULL-terminated "K=V"); reads its report up
 * to "ready". Returns 0 or -errno. */
int ts_ltarget_start(struct ts_ltarget *t, const char *path, const char *const *args,
		     char *const env[])
{
	int in[2], out[2];
	memset(t, 0, sizeof(*t));
	t->to_fd = t->from_fd = -1;
	if (pipe2(in, O_CLOEXEC) != 0)
		return -errno;
	if (pipe2(out, O_CLOEXEC) != 0) {
		int e = -errno;
		close(in[0]);
		close(in[1]);
		return e;
	}
	t->pid = fork();
	if (t->pid < 0) {
		int e = -errno;
		close(in[0]);
		close(in[1]);
		close(out[0]);
		close(out[1]);
		return e;
	}
	if (t->pid == 0) {
		const char *argv[32];
		int n = 0;
		argv[n++] = path;
		for (int i = 0; args && args[i] && n < 31; i++)
			argv[n++] = args[i];
		argv[n] = NULL;
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		for (int i = 0; env && env[i]; i++)
			putenv(env[i]);
		execv(path, (char *const *)argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	t->to_fd = in[1];
	t->from_fd = out[0];
	char line[1024];
	for (;;) {
		int rc = ts_ltarget_line(t, line, sizeof(line), 30000);
		if (rc != 0)
			return rc;
		if (strcmp(line, "ready") == 0)
			return 0;
		int pid;
		if (sscanf(line, "pid %d", &pid) == 1) {
			if (pid != t->pid)
				return -EPROTO;
			continue;
		}
		if (strncmp(line, "ids ", 4) == 0 && t->nchains < TS_MAX_CHAINS) {
			struct ts_chain *c = &t->chains[t->nchains++];
			char *save = NULL, *tok = strtok_r(line + 4, " ", &save);
			snprintf(c->name, sizeof(c->name), "%s", tok ? tok : "");
			while ((tok = strtok_r(NULL, " ", &save)) && c->n < TS_MAX_IDS)
				c->ids[c->n++] = strtoull(tok, NULL, 10);
		}
	}
}

const struct ts_chain *ts_ltarget_chain(const struct ts_ltarget *t, const char *name)
{
	for (unsigned i = 0; i < t->nchains; i++)
		if (strcmp(t->chains[i].name, name) == 0)
			return &t->chains[i];
	return NULL;
}

/* Sends one command line and reads the one-line answer. 0 or -errno. */
int ts_ltarget_cmd(struct ts_ltarget *t, const char *cmd, char *reply, size_t len)
{
	char line[256];
	int n = snprintf(line, sizeof(line), "%s\n", cmd);
	if (write(t->to_fd, line, (size_t)n) != n)
		return -EPIPE;
	return ts_ltarget_line(t, reply, len, 60000);
}

/* Value of key=V in a reply line (0 when absent). */
uint64_t ts_field(const char *line, const char *key)
{
	size_t k = strlen(key);
	for (const char *p = line; (p = strstr(p, key)) != NULL; p += k) {
		if ((p == line || p[-1] == ' ') && p[k] == '=')
			return strtoull(p + k + 1, NULL, 0);
	}
	return 0;
}

/* One counter from "stats", or UINT64_MAX if the target does not answer. */
uint64_t ts_ltarget_stat(struct ts_ltarget *t, const char *key)
{
	char reply[1024];
	if (ts_ltarget_cmd(t, "stats", reply, sizeof(reply)) != 0 ||
	    strncmp(reply, "stats ", 6) != 0)
		return UINT64_MAX;
	return ts_field(reply, key);
}

/* Quits the target: *bye receives its last line. Returns its exit code, or
 * -errno when it did not answer (it is killed then). */
int ts_ltarget_quit(struct ts_ltarget *t, char *bye, size_t len)
{
	int rc = ts_ltarget_cmd(t, "quit", bye, len);
	if (t->to_fd >= 0)
		close(t->to_fd);
	t->to_fd = -1;
	if (rc != 0)
		kill(t->pid, SIGKILL);
	while (waitpid(t->pid, &t->status, 0) < 0 && errno == EINTR)
		;
	t->reaped = true;
	close(t->from_fd);
	t->from_fd = -1;
	if (rc != 0)
		return rc;
	return WIFEXITED(t->status) ? WEXITSTATUS(t->status) : 128 + WTERMSIG(t->status);
}

/* Kills and reaps the target (after a failed check, or on purpose). */
void ts_ltarget_kill(struct ts_ltarget *t)
{
	if (t->pid > 0 && !t->reaped) {
		kill(t->pid, SIGKILL);
		while (waitpid(t->pid, &t->status, 0) < 0 && errno == EINTR)
			;
		t->reaped = true;
	}
	if (t->to_fd >= 0)
		close(t->to_fd);
	t->to_fd = -1;
	if (t->from_fd >= 0)
		close(t->from_fd);
	t->from_fd = -1;
}
