/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers of test_formats and test_profile: running commands with a timeout
 * (output captured, or on a pseudo-terminal), the profile_target process,
 * the privilege check, and a parser of `go tool pprof -raw` output (samples
 * with values, labels and location ids; locations with function names;
 * mappings; comments) so that tests check what pprof itself reads.
 */
#ifndef STB_TESTS_PROFILE_UTIL_H
#define STB_TESTS_PROFILE_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- environment ---- */

/* Path from environment variable name, or dflt. */
static inline const char *pu_env(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

/* Root-equivalent for the loader: CAP_SYS_PTRACE plus CAP_BPF+CAP_PERFMON
 * (or CAP_SYS_ADMIN), read from /proc/self/status. */
static inline bool pu_privileged(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	unsigned long long eff = 0;
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1)
			break;
	fclose(f);
	bool ptrace = (eff >> 19) & 1, admin = (eff >> 21) & 1;
	bool perfmon = (eff >> 38) & 1, bpf = (eff >> 39) & 1;
	return ptrace && (admin || (bpf && perfmon));
}

/*
 * The exit status for a test that needs the loader's privileges when it
 * lacks them: 77 (skipped), or 1 with STB_REQUIRE_BPF=1. 0 when privileged.
 */
static inline int pu_require_privilege(const char *test)
{
	if (pu_privileged())
		return 0;
	const char *req = getenv("STB_REQUIRE_BPF");
	if (req && strcmp(req, "1") == 0) {
		fprintf(stderr, "%s: STB_REQUIRE_BPF=1 but not privileged (needs root, or "
				"CAP_SYS_PTRACE + CAP_BPF + CAP_PERFMON): failing\n", test);
		return 1;
	}
	fprintf(stderr, "%s: not privileged (needs root, or CAP_SYS_PTRACE + CAP_BPF + "
			"CAP_PERFMON): skipped\n", test);
	return 77;
}

static char pu_tmpdir_path[64];
static pid_t pu_tmpdir_owner;

static inline int pu_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* Removes the temporary directory at exit (of the process that made it). */
static inline void pu_tmpdir_remove(void)
{
	if (pu_tmpdir_path[0] && getpid() == pu_tmpdir_owner)
		nftw(pu_tmpdir_path, pu_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A private temporary directory with HOME and GOCACHE pointing into it, so
 * that `go tool pprof` works for any user (root in CI); removed at exit.
 * Returns its path. */
static inline const char *pu_tmpdir(void)
{
	char *dir = pu_tmpdir_path;
	if (dir[0])
		return dir;
	snprintf(dir, sizeof(pu_tmpdir_path), "/tmp/stb-prof-test.XXXXXX");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		exit(1);
	}
	pu_tmpdir_owner = getpid();
	atexit(pu_tmpdir_remove);
	char cache[128];
	snprintf(cache, sizeof(cache), "%s/gocache", pu_tmpdir_path);
	setenv("HOME", dir, 1);
	setenv("GOCACHE", cache, 1);
	setenv("GOFLAGS", "", 1);
	return dir;
}

/* ---- commands ---- */

struct pu_buf {
	char *s;
	size_t len, cap;
};

static inline void pu_buf_add(struct pu_buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->s, cap);
		if (!p)
			abort();
		b->s = p;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

static inline uint64_t pu_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Waits for pid up to deadline_ms (pu_now_ms clock); kills it after. Returns
 * the exit status, 128 + signal, or -1. */
static inline int pu_wait(pid_t pid, uint64_t deadline_ms)
{
	int st;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR)
			return -1;
		if (pu_now_ms() > deadline_ms) {
			fprintf(stderr, "pu_wait: pid %d timed out: killing it\n", (int)pid);
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return 128 + SIGKILL;
		}
		usleep(10000);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/*
 * Runs argv (argv[0] looked up in PATH) with stdin from /dev/null, capturing
 * stdout and stderr into *out / *err (malloc'd, NUL-terminated; either may
 * be NULL to discard). Kills it after timeout_s. Returns its exit status,
 * 128 + signal, or -1.
 */
static inline int pu_run(char *const argv[], char **out, char **err, int timeout_s)
{
	int po[2], pe[2];
	if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int nul = open("/dev/null", O_RDONLY);
		dup2(nul, 0);
		dup2(po[1], 1);
		dup2(pe[1], 2);
		execvp(argv[0], argv);
		fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	struct pu_buf bo = {0}, be = {0};
	pu_buf_add(&bo, "", 0);
	pu_buf_add(&be, "", 0);
	uint64_t deadline = pu_now_ms() + (uint64_t)timeout_s * 1000u;
	struct pollfd fds[2] = {{.fd = po[0], .events = POLLIN}, {.fd = pe[0], .events = POLLIN}};
	int open_fds = 2;
	while (open_fds > 0 && pu_now_ms() < deadline) {
		if (poll(fds, 2, 100) <= 0)
			continue;
		for (int i = 0; i < 2; i++) {
			if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			char buf[8192];
			ssize_t n = read(fds[i].fd, buf, sizeof(buf));
			if (n > 0) {
				pu_buf_add(i ? &be : &bo, buf, (size_t)n);
			} else if (n == 0 || errno != EINTR) {
				close(fds[i].fd);
				fds[i].fd = -1;
				open_fds--;
			}
		}
	}
	for (int i = 0; i < 2; i++)
		if (fds[i].fd >= 0)
			close(fds[i].fd);
	int rc = pu_wait(pid, deadline);
	if (out)
		*out = bo.s;
	else
		free(bo.s);
	if (err)
		*err = be.s;
	else
		free(be.s);
	return rc;
}

/*
 * Runs argv with stdout and stderr on a new pseudo-terminal; everything
 * written to it goes to *out. Returns the exit status as pu_run.
 */
static inline int pu_run_pty(char *const argv[], char **out, int timeout_s)
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
	struct pu_buf b = {0};
	pu_buf_add(&b, "", 0);
	uint64_t deadline = pu_now_ms() + (uint64_t)timeout_s * 1000u;
	int rc = -1;
	for (;;) {
		struct pollfd pfd = {.fd = m, .events = POLLIN};
		if (poll(&pfd, 1, 50) > 0) {
			char buf[4096];
			ssize_t n = read(m, buf, sizeof(buf));
			if (n > 0) {
				pu_buf_add(&b, buf, (size_t)n);
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
				pu_buf_add(&b, buf, (size_t)n);
			}
			break;
		}
		if (pu_now_ms() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			rc = 128 + SIGKILL;
			break;
		}
	}
	close(m);
	*out = b.s;
	return rc;
}

/* ---- profile_target ---- */

struct pu_target {
	pid_t pid;
	int in_fd;       /* its stdin: closing it ends the target */
	char ready[4096]; /* the line it printed when ready */
};

/* Starts `profile_target mode` and waits (20 s) for its "ready" line. 0 or -1. */
static inline int pu_target_start(struct pu_target *t, const char *mode)
{
	const char *path = pu_env("STB_PROFILE_TARGET", "./profile_target");
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
	uint64_t deadline = pu_now_ms() + 20000;
	while (len + 1 < sizeof(t->ready) && pu_now_ms() < deadline) {
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
		fprintf(stderr, "profile_target %s did not get ready (got \"%s\")\n", mode, t->ready);
		kill(t->pid, SIGKILL);
		waitpid(t->pid, NULL, 0);
		close(t->in_fd);
		t->pid = 0;
		return -1;
	}
	return 0;
}

/* Ends the target (closes its stdin) and reaps it. Returns its exit status. */
static inline int pu_target_stop(struct pu_target *t)
{
	if (t->pid <= 0)
		return -1;
	close(t->in_fd);
	int rc = pu_wait(t->pid, pu_now_ms() + 10000);
	t->pid = 0;
	return rc;
}

/* The value of "key=..." (up to a space) in the ready line, or NULL. */
static inline const char *pu_target_field(const struct pu_target *t, const char *key, char *buf,
					  size_t size)
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

/* ---- go tool pprof -raw ---- */

#define PU_MAX_VALUES 4
#define PU_MAX_STACK 256

struct pu_sample {
	int64_t v[PU_MAX_VALUES];
	int nv;
	uint64_t loc[PU_MAX_STACK]; /* location ids, the leaf first */
	int nloc;
	char labels[2048];          /* "key:[v v] key:[v]" string and numeric lines joined */
};

struct pu_loc {
	uint64_t id;
	uint64_t addr;
	int mapping;
	int nfunc;
	char func[8][128];          /* functions, the innermost first */
};

struct pu_map {
	int id;
	char file[512];
	char build_id[129];
	char bits[32];
};

struct pu_prof {
	char types[256];            /* the sample type line */
	char *comments;             /* "Comment: " lines joined with '\n' */
	struct pu_sample *s;
	int ns;
	struct pu_loc *l;
	int nl;
	struct pu_map *m;
	int nm;
};

static inline void pu_prof_free(struct pu_prof *p)
{
	free(p->comments);
	free(p->s);
	free(p->l);
	free(p->m);
	memset(p, 0, sizeof(*p));
}

/* Parses the text of `go tool pprof -raw`. Returns 0 or -1 with why set. */
static inline int pu_prof_parse(const char *text, struct pu_prof *p, char *why, size_t wsize)
{
	memset(p, 0, sizeof(*p));
	struct pu_buf com = {0};
	pu_buf_add(&com, "", 0);
	int section = 0; /* 1 samples, 2 locations, 3 mappings */
	bool want_types = false;
	const char *line = text;
	while (*line) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char l[4096];
		if (len >= sizeof(l))
			len = sizeof(l) - 1;
		memcpy(l, line, len);
		l[len] = '\0';
		line = nl ? nl + 1 : line + len;
		if (strncmp(l, "Comment: ", 9) == 0) {
			pu_buf_add(&com, l + 9, strlen(l + 9));
			pu_buf_add(&com, "\n", 1);
			continue;
		}
		if (strcmp(l, "Samples:") == 0) {
			section = 1;
			want_types = true;
			continue;
		}
		if (strcmp(l, "Locations") == 0) {
			section = 2;
			continue;
		}
		if (strcmp(l, "Mappings") == 0) {
			section = 3;
			continue;
		}
		if (section == 1 && want_types) {
			snprintf(p->types, sizeof(p->types), "%.255s", l);
			want_types = false;
			continue;
		}
		if (section == 1) {
			if (strchr(l, ':') && strstr(l, ":[")) { /* a label line */
				if (p->ns == 0)
					continue;
				struct pu_sample *s = &p->s[p->ns - 1];
				const char *t = l + strspn(l, " ");
				size_t have = strlen(s->labels);
				snprintf(s->labels + have, sizeof(s->labels) - have, "%s%s", have ? " " : "",
					 t);
				continue;
			}
			const char *colon = strchr(l, ':');
			if (!colon)
				continue;
			struct pu_sample *ns = realloc(p->s, (size_t)(p->ns + 1) * sizeof(*ns));
			if (!ns)
				abort();
			p->s = ns;
			struct pu_sample *s = &p->s[p->ns++];
			memset(s, 0, sizeof(*s));
			const char *q = l;
			while (q < colon && s->nv < PU_MAX_VALUES) {
				char *end;
				long long v = strtoll(q, &end, 10);
				if (end == q)
					break;
				s->v[s->nv++] = v;
				q = end;
			}
			q = colon + 1;
			while (*q && s->nloc < PU_MAX_STACK) {
				char *end;
				unsigned long long id = strtoull(q, &end, 10);
				if (end == q)
					break;
				s->loc[s->nloc++] = id;
				q = end;
			}
			continue;
		}
		if (section == 2) {
			const char *t = l + strspn(l, " ");
			char *end;
			unsigned long long id = strtoull(t, &end, 10);
			struct pu_loc *loc;
			const char *rest;
			if (end != t && *end == ':') {
				struct pu_loc *nl2 = realloc(p->l, (size_t)(p->nl + 1) * sizeof(*nl2));
				if (!nl2)
					abort();
				p->l = nl2;
				loc = &p->l[p->nl++];
				memset(loc, 0, sizeof(*loc));
				loc->id = id;
				rest = end + 1 + strspn(end + 1, " ");
				loc->addr = strtoull(rest, &end, 16);
				rest = end + strspn(end, " ");
				if (strncmp(rest, "M=", 2) == 0) {
					loc->mapping = (int)strtol(rest + 2, &end, 10);
					rest = end + strspn(end, " ");
				}
			} else {
				if (p->nl == 0)
					continue;
				loc = &p->l[p->nl - 1];
				rest = t;
			}
			if (*rest && loc->nfunc < 8) {
				size_t n = strcspn(rest, " ");
				if (n >= sizeof(loc->func[0]))
					n = sizeof(loc->func[0]) - 1;
				memcpy(loc->func[loc->nfunc], rest, n);
				loc->func[loc->nfunc][n] = '\0';
				/* Synthetic frames ("[no stack]") have spaces: keep the rest. */
				if (rest[0] == '[') {
					const char *close = strchr(rest, ']');
					n = close ? (size_t)(close - rest + 1) : strlen(rest);
					if (n >= sizeof(loc->func[0]))
						n = sizeof(loc->func[0]) - 1;
					memcpy(loc->func[loc->nfunc], rest, n);
					loc->func[loc->nfunc][n] = '\0';
				}
				loc->nfunc++;
			}
			continue;
		}
		if (section == 3) {
			struct pu_map m;
			char range[128];
			memset(&m, 0, sizeof(m));
			int k = sscanf(l, "%d: %127s %511s %128s %31s", &m.id, range, m.file, m.build_id,
				       m.bits);
			if (k < 3)
				continue;
			if (k == 4 && m.build_id[0] == '[') {
				snprintf(m.bits, sizeof(m.bits), "%.31s", m.build_id);
				m.build_id[0] = '\0';
			}
			struct pu_map *nm = realloc(p->m, (size_t)(p->nm + 1) * sizeof(*nm));
			if (!nm)
				abort();
			p->m = nm;
			p->m[p->nm++] = m;
		}
	}
	p->comments = com.s;
	if (!p->types[0]) {
		snprintf(why, wsize, "no \"Samples:\" section in the pprof output");
		return -1;
	}
	return 0;
}

/* Runs `go tool pprof -raw -symbolize=none file` and parses it. 0 or -1. */
static inline int pu_pprof_raw(const char *file, struct pu_prof *p, char *why, size_t wsize)
{
	pu_tmpdir();
	const char *go = pu_env("STB_GO", "go");
	char *argv[] = {(char *)go, "tool", "pprof", "-raw", "-symbolize=none", (char *)file, NULL};
	char *out = NULL, *err = NULL;
	int rc = pu_run(argv, &out, &err, 120);
	int ret = -1;
	if (rc != 0) {
		snprintf(why, wsize, "%s tool pprof -raw %s: exit %d: %.300s%s", go, file, rc,
			 err ? err : "", rc == 127 ? " (is golang-go installed? set STB_GO)" : "");
		goto cleanup;
	}
	ret = pu_prof_parse(out, p, why, wsize);
cleanup:
	free(out);
	free(err);
	return ret;
}

static inline const struct pu_loc *pu_prof_loc(const struct pu_prof *p, uint64_t id)
{
	for (int i = 0; i < p->nl; i++)
		if (p->l[i].id == id)
			return &p->l[i];
	return NULL;
}

/* Writes the logical frames of sample s (the leaf first, inline frames
 * expanded) as "f0;f1;...;fn" into buf. */
static inline void pu_sample_stack(const struct pu_prof *p, const struct pu_sample *s, char *buf,
				   size_t size)
{
	size_t len = 0;
	buf[0] = '\0';
	for (int i = 0; i < s->nloc; i++) {
		const struct pu_loc *l = pu_prof_loc(p, s->loc[i]);
		if (!l) {
			len += (size_t)snprintf(buf + len, len < size ? size - len : 0, "%s<loc %" PRIu64
						"?>", len ? ";" : "", s->loc[i]);
			continue;
		}
		if (l->nfunc == 0)
			len += (size_t)snprintf(buf + len, len < size ? size - len : 0, "%s0x%" PRIx64,
						len ? ";" : "", l->addr);
		for (int k = 0; k < l->nfunc; k++)
			len += (size_t)snprintf(buf + len, len < size ? size - len : 0, "%s%s",
						len ? ";" : "", l->func[k]);
		if (len >= size)
			return;
	}
}

/* Does "key:[...]" in the labels of s contain value as one of its values? */
static inline bool pu_sample_has_label(const struct pu_sample *s, const char *key, const char *value)
{
	char pat[128];
	snprintf(pat, sizeof(pat), "%s:[", key);
	const char *p = s->labels;
	while ((p = strstr(p, pat)) != NULL) {
		if (p != s->labels && p[-1] != ' ') {
			p++;
			continue;
		}
		const char *v = p + strlen(pat);
		const char *end = strchr(v, ']');
		if (!end)
			return false;
		size_t n = strlen(value);
		for (const char *q = v; q + n <= end; q++)
			if ((q == v || q[-1] == ' ') && strncmp(q, value, n) == 0 &&
			    (q + n == end || q[n] == ' '))
				return true;
		p = end;
	}
	return false;
}

/* The number of values of label key in s (0 when absent). */
static inline int pu_sample_label_count(const struct pu_sample *s, const char *key)
{
	char pat[128];
	snprintf(pat, sizeof(pat), "%s:[", key);
	const char *p = strstr(s->labels, pat);
	while (p && p != s->labels && p[-1] != ' ')
		p = strstr(p + 1, pat);
	if (!p)
		return 0;
	const char *v = p + strlen(pat), *end = strchr(v, ']');
	if (!end || end == v)
		return 0;
	int n = 1;
	for (const char *q = v; q < end; q++)
		n += *q == ' ';
	return n;
}

/* "key=NUMBER" in text (e.g. the stats comment), or -1. */
static inline long long pu_stat(const char *text, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "%s=", key);
	const char *p = text;
	while ((p = strstr(p, pat)) != NULL) {
		if (p == text || p[-1] == ' ')
			return strtoll(p + strlen(pat), NULL, 10);
		p++;
	}
	return -1;
}

#endif /* STB_TESTS_PROFILE_UTIL_H */
