/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by test_loader and bench_loader (no cmocka here): starting
 * and driving loader_target over its line protocol, running a program (the
 * loader, gdb) with its output captured and a time limit, and a small JSON
 * parser for the loader's --format json documents.
 */
#ifndef STB_TESTS_LOADER_UTIL_H
#define STB_TESTS_LOADER_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LU_FN static __attribute__((unused))

LU_FN uint64_t lu_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

LU_FN void lu_sleep_ms(unsigned ms)
{
	struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000l};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- growing byte buffer ---- */

struct lu_buf {
	char *p;
	size_t len, cap;
};

LU_FN int lu_buf_add(struct lu_buf *b, const void *data, size_t n)
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

LU_FN void lu_buf_free(struct lu_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* ---- running a program ---- */

/* Runs in the child between fork and exec (e.g. drops privileges); returns
 * 0 or -errno (the child then exits 126). */
typedef int (*lu_pre_exec_fn)(void *arg);

struct lu_proc {
	pid_t pid;
	int out_fd, err_fd; /* -1 once drained */
	struct lu_buf out, err;
	int status;         /* waitpid status once reaped */
	bool reaped;
	struct rusage ru;   /* its resource usage once reaped */
};

/* Starts argv[0] (a path, or a name looked up in PATH) with stdin from
 * /dev/null and stdout/stderr on pipes. env: extra "K=V" strings or NULL.
 * Returns 0 or -errno. */
LU_FN int lu_proc_start(struct lu_proc *p, char *const argv[], char *const env[],
			lu_pre_exec_fn pre, void *pre_arg)
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
LU_FN bool lu_proc_pump(struct lu_proc *p, int wait_ms)
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
		lu_buf_add(is_out ? &p->out : &p->err, chunk, (size_t)k);
	}
	return p->out_fd >= 0 || p->err_fd >= 0;
}

/* Reads the child's output until both pipes close and reaps it, for at most
 * timeout_ms (then SIGKILLs it). Returns 0, or -ETIMEDOUT after a kill. */
LU_FN int lu_proc_wait(struct lu_proc *p, int timeout_ms)
{
	uint64_t deadline = lu_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int rc = 0;
	for (;;) {
		uint64_t now = lu_now_ns();
		if (now >= deadline && rc == 0) {
			kill(p->pid, SIGKILL);
			rc = -ETIMEDOUT;
		}
		int wait_ms = rc ? 1000 : (int)((deadline - now) / 1000000u) + 1;
		if (!lu_proc_pump(p, wait_ms))
			break;
	}
	if (!p->out.p)
		lu_buf_add(&p->out, "", 0);
	if (!p->err.p)
		lu_buf_add(&p->err, "", 0);
	while (wait4(p->pid, &p->status, 0, &p->ru) < 0 && errno == EINTR)
		;
	p->reaped = true;
	return rc;
}

/* Reads the child's output until its stderr contains needle (true), or
 * timeout_ms passed or both pipes closed (false). Does not reap it. */
LU_FN bool lu_proc_wait_for(struct lu_proc *p, const char *needle, int timeout_ms)
{
	uint64_t deadline = lu_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	while (!(p->err.p && strstr(p->err.p, needle))) {
		uint64_t now = lu_now_ns();
		if (now >= deadline)
			return false;
		if (!lu_proc_pump(p, (int)((deadline - now) / 1000000u) + 1))
			return p->err.p && strstr(p->err.p, needle);
	}
	return true;
}

/* Exit code, or 128 + signal. */
LU_FN int lu_proc_exit_code(const struct lu_proc *p)
{
	if (WIFEXITED(p->status))
		return WEXITSTATUS(p->status);
	if (WIFSIGNALED(p->status))
		return 128 + WTERMSIG(p->status);
	return -1;
}

LU_FN void lu_proc_free(struct lu_proc *p)
{
	if (p->out_fd >= 0)
		close(p->out_fd);
	if (p->err_fd >= 0)
		close(p->err_fd);
	if (!p->reaped && p->pid > 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
	}
	lu_buf_free(&p->out);
	lu_buf_free(&p->err);
	p->out_fd = p->err_fd = -1;
	p->reaped = true;
}

/* ---- loader_target ---- */

#define LU_MAX_CHAINS 16
#define LU_MAX_IDS 16

struct lu_chain {
	char name[32];
	unsigned n;
	uint64_t ids[LU_MAX_IDS];
};

struct lu_target {
	pid_t pid;
	int to_fd;     /* its stdin */
	int from_fd;   /* its stdout */
	char pend[4096]; /* read from from_fd, not yet returned as lines */
	size_t npend;
	struct lu_chain chains[LU_MAX_CHAINS];
	unsigned nchains;
	bool reaped;
	int status;
};

/* Reads one line from t (without the newline) within timeout_ms. 0 or -errno. */
LU_FN int lu_target_line(struct lu_target *t, char *line, size_t len, int timeout_ms)
{
	uint64_t deadline = lu_now_ns() + (uint64_t)timeout_ms * 1000000ull;
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
		uint64_t now = lu_now_ns();
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
LU_FN int lu_target_start(struct lu_target *t, const char *path, const char *const *args,
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
		int rc = lu_target_line(t, line, sizeof(line), 30000);
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
		if (strncmp(line, "ids ", 4) == 0 && t->nchains < LU_MAX_CHAINS) {
			struct lu_chain *c = &t->chains[t->nchains++];
			char *save = NULL, *tok = strtok_r(line + 4, " ", &save);
			snprintf(c->name, sizeof(c->name), "%s", tok ? tok : "");
			while ((tok = strtok_r(NULL, " ", &save)) && c->n < LU_MAX_IDS)
				c->ids[c->n++] = strtoull(tok, NULL, 10);
		}
	}
}

LU_FN const struct lu_chain *lu_target_chain(const struct lu_target *t, const char *name)
{
	for (unsigned i = 0; i < t->nchains; i++)
		if (strcmp(t->chains[i].name, name) == 0)
			return &t->chains[i];
	return NULL;
}

/* Sends one command line and reads the one-line answer. 0 or -errno. */
LU_FN int lu_target_cmd(struct lu_target *t, const char *cmd, char *reply, size_t len)
{
	char line[256];
	int n = snprintf(line, sizeof(line), "%s\n", cmd);
	if (write(t->to_fd, line, (size_t)n) != n)
		return -EPIPE;
	return lu_target_line(t, reply, len, 60000);
}

/* Value of key=V in a reply line (0 when absent). */
LU_FN uint64_t lu_field(const char *line, const char *key)
{
	size_t k = strlen(key);
	for (const char *p = line; (p = strstr(p, key)) != NULL; p += k) {
		if ((p == line || p[-1] == ' ') && p[k] == '=')
			return strtoull(p + k + 1, NULL, 0);
	}
	return 0;
}

/* One counter from "stats", or UINT64_MAX if the target does not answer. */
LU_FN uint64_t lu_target_stat(struct lu_target *t, const char *key)
{
	char reply[1024];
	if (lu_target_cmd(t, "stats", reply, sizeof(reply)) != 0 || strncmp(reply, "stats ", 6) != 0)
		return UINT64_MAX;
	return lu_field(reply, key);
}

/* Quits the target: *bye receives its last line. Returns its exit code, or
 * -errno when it did not answer (it is killed then). */
LU_FN int lu_target_quit(struct lu_target *t, char *bye, size_t len)
{
	int rc = lu_target_cmd(t, "quit", bye, len);
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
LU_FN void lu_target_kill(struct lu_target *t)
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

/* ---- JSON ---- */

enum lu_json_type { LU_JNULL, LU_JBOOL, LU_JNUM, LU_JSTR, LU_JARR, LU_JOBJ };

struct lu_json {
	enum lu_json_type type;
	char *str;             /* STR: the string; NUM: the number's text; OBJ member: key */
	char *key;             /* member of an object: its name */
	bool b;
	struct lu_json *child; /* ARR/OBJ: first element */
	struct lu_json *next;  /* next sibling */
	unsigned n;            /* ARR/OBJ: element count */
};

struct lu_json_parser {
	const char *s;
	const char *err;
};

LU_FN void lu_json_free(struct lu_json *j)
{
	while (j) {
		struct lu_json *next = j->next;
		lu_json_free(j->child);
		free(j->str);
		free(j->key);
		free(j);
		j = next;
	}
}

static struct lu_json *lu_json_value(struct lu_json_parser *p, int depth);

static void lu_json_ws(struct lu_json_parser *p)
{
	while (*p->s == ' ' || *p->s == '\n' || *p->s == '\t' || *p->s == '\r')
		p->s++;
}

static char *lu_json_string(struct lu_json_parser *p)
{
	struct lu_buf b = {0};
	if (*p->s != '"') {
		p->err = "expected a string";
		return NULL;
	}
	p->s++;
	while (*p->s && *p->s != '"') {
		char c = *p->s++;
		if (c == '\\') {
			char e = *p->s++;
			switch (e) {
			case 'n': c = '\n'; break;
			case 't': c = '\t'; break;
			case 'r': c = '\r'; break;
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'u': {
				unsigned v = 0;
				for (int i = 0; i < 4; i++) {
					char h = *p->s++;
					v = v * 16 + (unsigned)(h >= 'a' ? h - 'a' + 10 : h >= 'A' ? h - 'A' + 10 : h - '0');
				}
				c = v < 0x80 ? (char)v : '?';
				break;
			}
			case '"': case '\\': case '/': c = e; break;
			default:
				p->err = "bad escape";
				lu_buf_free(&b);
				return NULL;
			}
		}
		lu_buf_add(&b, &c, 1);
	}
	if (*p->s != '"') {
		p->err = "unterminated string";
		lu_buf_free(&b);
		return NULL;
	}
	p->s++;
	if (!b.p)
		lu_buf_add(&b, "", 0);
	return b.p;
}

static struct lu_json *lu_json_value(struct lu_json_parser *p, int depth)
{
	lu_json_ws(p);
	if (depth > 64) {
		p->err = "too deep";
		return NULL;
	}
	struct lu_json *j = calloc(1, sizeof(*j));
	if (!j) {
		p->err = "out of memory";
		return NULL;
	}
	char c = *p->s;
	if (c == '{' || c == '[') {
		j->type = c == '{' ? LU_JOBJ : LU_JARR;
		char close = c == '{' ? '}' : ']';
		p->s++;
		lu_json_ws(p);
		struct lu_json **tail = &j->child;
		if (*p->s == close) {
			p->s++;
			return j;
		}
		for (;;) {
			char *key = NULL;
			lu_json_ws(p);
			if (j->type == LU_JOBJ) {
				key = lu_json_string(p);
				lu_json_ws(p);
				if (!key || *p->s != ':') {
					free(key);
					p->err = p->err ? p->err : "expected ':'";
					lu_json_free(j);
					return NULL;
				}
				p->s++;
			}
			struct lu_json *v = lu_json_value(p, depth + 1);
			if (!v) {
				free(key);
				lu_json_free(j);
				return NULL;
			}
			v->key = key;
			*tail = v;
			tail = &v->next;
			j->n++;
			lu_json_ws(p);
			if (*p->s == ',') {
				p->s++;
				continue;
			}
			if (*p->s == close) {
				p->s++;
				return j;
			}
			p->err = "expected ',' or a closing bracket";
			lu_json_free(j);
			return NULL;
		}
	}
	if (c == '"') {
		j->type = LU_JSTR;
		j->str = lu_json_string(p);
		if (!j->str) {
			lu_json_free(j);
			return NULL;
		}
		return j;
	}
	if (strncmp(p->s, "true", 4) == 0 || strncmp(p->s, "false", 5) == 0) {
		j->type = LU_JBOOL;
		j->b = c == 't';
		p->s += j->b ? 4 : 5;
		return j;
	}
	if (strncmp(p->s, "null", 4) == 0) {
		j->type = LU_JNULL;
		p->s += 4;
		return j;
	}
	if (c == '-' || (c >= '0' && c <= '9')) {
		const char *start = p->s;
		while (*p->s && strchr("+-0123456789.eE", *p->s))
			p->s++;
		j->type = LU_JNUM;
		j->str = strndup(start, (size_t)(p->s - start));
		return j;
	}
	p->err = "unexpected character";
	lu_json_free(j);
	return NULL;
}

/* Parses a whole document. NULL on error (*err, when not NULL, says why). */
LU_FN struct lu_json *lu_json_parse(const char *text, const char **err)
{
	struct lu_json_parser p = {.s = text, .err = NULL};
	struct lu_json *j = lu_json_value(&p, 0);
	if (j) {
		lu_json_ws(&p);
		if (*p.s) {
			p.err = "trailing characters";
			lu_json_free(j);
			j = NULL;
		}
	}
	if (err)
		*err = p.err;
	return j;
}

LU_FN const struct lu_json *lu_json_get(const struct lu_json *obj, const char *key)
{
	if (!obj || obj->type != LU_JOBJ)
		return NULL;
	for (const struct lu_json *m = obj->child; m; m = m->next)
		if (m->key && strcmp(m->key, key) == 0)
			return m;
	return NULL;
}

/* String member (NULL when absent or not a string). */
LU_FN const char *lu_json_str(const struct lu_json *obj, const char *key)
{
	const struct lu_json *m = lu_json_get(obj, key);
	return m && m->type == LU_JSTR ? m->str : NULL;
}

/* Unsigned number member (def when absent). */
LU_FN uint64_t lu_json_u64(const struct lu_json *obj, const char *key, uint64_t def)
{
	const struct lu_json *m = lu_json_get(obj, key);
	return m && m->type == LU_JNUM ? strtoull(m->str, NULL, 10) : def;
}

/* Boolean member (-1 when absent). */
LU_FN int lu_json_bool(const struct lu_json *obj, const char *key)
{
	const struct lu_json *m = lu_json_get(obj, key);
	return m && m->type == LU_JBOOL ? m->b : -1;
}

#endif /* STB_TESTS_LOADER_UTIL_H */
