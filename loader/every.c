/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Continuous mode (loader.h): stb-bpf-loader stays resident and writes a
 * snapshot -- or, with --profile, a profile -- every --every into --out-dir,
 * each file written under a hidden temporary name and renamed into place, and
 * keeps the --keep newest. SIGTERM/SIGINT end it once the file in progress is
 * complete; the target's exit ends it too. The session (target, modules,
 * symbols, BPF program) is set up once.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hashset.h"
#include "loader.h"
#include "profile.h"
#include "report/formats.h"
#include "stb/stb.h"
#include "util.h"

/* A file name: "stb-" PID "-" YYYYMMDD "T" HHMMSS "." mmm "Z." EXT */
#define STB_EVERY_NAME_MAX 96u
#define STB_EVERY_STAMP_LEN 20u /* YYYYMMDDTHHMMSS.mmmZ */

static volatile sig_atomic_t every_stop;
static int every_pipe[2] = {-1, -1};

static void every_on_signal(int sig)
{
	int saved = errno;
	every_stop = sig;
	stb_profile_stop();
	char c = 1;
	ssize_t rc = write(every_pipe[1], &c, 1);
	(void)rc;
	errno = saved;
}

/* name: the file of a snapshot started at wall-clock time ts. */
static void file_name(char *name, size_t size, pid_t pid, const char *ext,
		      const struct timespec *ts)
{
	struct tm tm;
	gmtime_r(&ts->tv_sec, &tm);
	snprintf(name, size, "stb-%d-%04d%02d%02dT%02d%02d%02d.%03ldZ.%s", (int)pid,
		 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 ts->tv_nsec / 1000000, ext);
}

/* Is name a file of continuous mode with this extension? Sets *stamp to its
 * time stamp (sortable as text). */
static bool is_ours(const char *name, const char *ext, const char **stamp)
{
	static const char shape[] = "dddddddd" "T" "dddddd" "." "ddd" "Z";
	if (strncmp(name, "stb-", 4) != 0)
		return false;
	const char *p = name + 4;
	size_t digits = strspn(p, "0123456789");
	if (digits == 0 || digits > 10 || p[digits] != '-')
		return false;
	p += digits + 1;
	for (size_t i = 0; i < STB_EVERY_STAMP_LEN; i++) {
		bool ok = shape[i] == 'd' ? p[i] >= '0' && p[i] <= '9' : p[i] == shape[i];
		if (!ok)
			return false;
	}
	if (p[STB_EVERY_STAMP_LEN] != '.' || strcmp(p + STB_EVERY_STAMP_LEN + 1, ext) != 0)
		return false;
	*stamp = p;
	return true;
}

struct every_file {
	char name[STB_EVERY_NAME_MAX];
	const char *stamp;
};

static int file_cmp(const void *a, const void *b)
{
	const struct every_file *x = a, *y = b;
	int c = strncmp(x->stamp, y->stamp, STB_EVERY_STAMP_LEN);
	return c ? c : strcmp(x->name, y->name);
}

/* Removes the oldest of our files in dirfd beyond keep. 0 or -errno. */
static int rotate(int dirfd, const char *ext, unsigned keep)
{
	int fd = dup(dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	rewinddir(d);
	struct every_file *v = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		const char *stamp;
		if (strlen(e->d_name) >= STB_EVERY_NAME_MAX || !is_ours(e->d_name, ext, &stamp))
			continue;
		if (stb_grow(&v, &cap, n + 1, sizeof(*v)) != 0) {
			rc = -ENOMEM;
			goto cleanup;
		}
		snprintf(v[n].name, sizeof(v[n].name), "%s", e->d_name);
		v[n].stamp = v[n].name + (stamp - e->d_name);
		n++;
	}
	if (n > keep) {
		qsort(v, n, sizeof(*v), file_cmp);
		for (size_t i = 0; i < n - keep; i++)
			if (unlinkat(dirfd, v[i].name, 0) != 0 && errno != ENOENT && rc == 0)
				rc = -errno;
	}
cleanup:
	free(v);
	closedir(d);
	return rc;
}

struct every {
	const struct stb_loader_opts *o;
	struct stb_snapshot_session *snap;
	struct stb_prof *prof;
	int dirfd;
	const char *ext;
	uint64_t files;
};

/* One snapshot or profile into its file. Returns 0, or 1 when the run must
 * end with a failure (writing failed). */
static int write_one(struct every *E, struct stb_run_result *res)
{
	const struct stb_loader_opts *o = E->o;
	char name[STB_EVERY_NAME_MAX], tmp[STB_EVERY_NAME_MAX + 8];
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	file_name(name, sizeof(name), o->pid, E->ext, &wall);
	snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
	int fd = openat(E->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!out) {
		fprintf(stderr, "stb-bpf-loader: cannot write %s/%s: %s\n", o->out_dir, tmp,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return 1;
	}
	stb_loader_out_buffer(out);
	uint64_t start = stb_now_ns();
	stb_deadline_arm(start + o->deadline_ns);
	if (E->prof)
		stb_profile_once(E->prof, start, out, res);
	else
		stb_snapshot_once(E->snap, start, out, res);
	bool ok = res->written && !res->write_failed && fflush(out) == 0 && !ferror(out) &&
		  fsync(fileno(out)) == 0;
	int err = errno;
	if (stb_loader_out_close(out) != 0 && ok) {
		ok = false;
		err = errno;
	}
	stb_deadline_arm(UINT64_MAX);
	if (ok && renameat(E->dirfd, tmp, E->dirfd, name) != 0) {
		ok = false;
		err = errno;
	}
	if (!ok) {
		unlinkat(E->dirfd, tmp, 0);
		if (res->written || res->write_failed) {
			fprintf(stderr, "stb-bpf-loader: writing %s/%s failed: %s\n", o->out_dir, name,
				strerror(err ? err : EIO));
			return 1;
		}
		return 0; /* nothing to write (the target exited first) */
	}
	E->files++;
	if (o->verbose)
		fprintf(stderr, "stb-bpf-loader: wrote %s/%s (%zu tasks, %.1f ms)\n", o->out_dir,
			name, res->tasks, (double)(stb_now_ns() - start) / 1e6);
	int rc = rotate(E->dirfd, E->ext, o->keep);
	if (rc != 0)
		fprintf(stderr, "stb-bpf-loader: warning: cannot remove old files of %s: %s\n",
			o->out_dir, strerror(-rc));
	return 0;
}

/* Sleeps until CLOCK_MONOTONIC until_ns, a signal, or the target's exit
 * (looked at every 100 ms). */
static void wait_until(struct every *E, uint64_t until_ns)
{
	for (;;) {
		uint64_t now = stb_now_ns();
		if (every_stop || now >= until_ns)
			return;
		if (E->prof ? !stb_profile_target_alive(E->prof)
			    : !stb_snapshot_target_alive(E->snap))
			return;
		uint64_t left = until_ns - now;
		int ms = left > 100000000ull ? 100 : (int)((left + 999999) / 1000000);
		struct pollfd p = {.fd = every_pipe[0], .events = POLLIN};
		if (poll(&p, 1, ms) > 0) {
			char buf[16];
			while (read(every_pipe[0], buf, sizeof(buf)) > 0)
				;
		}
	}
}

static int open_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT && mkdir(dir, 0755) == 0)
		fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd;
}

int stb_every_run(const struct stb_loader_opts *o)
{
	const struct stb_format_info *f = stb_format_get(o->format);
	struct every E = {.o = o, .dirfd = -1, .ext = f ? f->ext : "txt"};
	int status = STB_EXIT_FAIL;
	struct sigaction sa, old_int, old_term;
	bool handlers = false;

	E.dirfd = open_dir(o->out_dir);
	if (E.dirfd < 0) {
		fprintf(stderr, "stb-bpf-loader: --out-dir %s: %s\n", o->out_dir, strerror(errno));
		return STB_EXIT_FAIL;
	}
	if (pipe2(every_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
		fprintf(stderr, "stb-bpf-loader: cannot create a pipe: %s\n", strerror(errno));
		goto cleanup;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = every_on_signal; /* no SA_RESTART: waits end at once */
	sigemptyset(&sa.sa_mask);
	every_stop = 0;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	handlers = true;
	/* Setting up may take long (huge modules): bounded by one deadline. */
	stb_deadline_arm(stb_now_ns() + o->deadline_ns);
	if (o->profile)
		E.prof = stb_profile_open(o);
	else
		E.snap = stb_snapshot_open(o);
	stb_deadline_arm(UINT64_MAX);
	if (!E.prof && !E.snap)
		goto cleanup;
	fprintf(stderr, "stb-bpf-loader: %s of pid %d every %.3f s into %s (keeping %u files) "
			"until SIGTERM or SIGINT\n", o->profile ? "profiles" : "snapshots",
		(int)o->pid, (double)o->every_ns / 1e9, o->out_dir, o->keep);
	bool target_gone = false;
	uint64_t next = stb_now_ns();
	while (!every_stop) {
		struct stb_run_result res;
		if (write_one(&E, &res) != 0)
			goto cleanup;
		if (res.target_gone) {
			target_gone = true;
			break;
		}
		/* The next period; one that was missed (a slow snapshot) is skipped. */
		uint64_t now = stb_now_ns();
		next += o->every_ns;
		if (next <= now)
			next += ((now - next) / o->every_ns + 1) * o->every_ns;
		wait_until(&E, next);
		if (!every_stop && (E.prof ? !stb_profile_target_alive(E.prof)
					   : !stb_snapshot_target_alive(E.snap))) {
			target_gone = true;
			break;
		}
	}
	if (target_gone) {
		fprintf(stderr, "stb-bpf-loader: process %d exited; %" PRIu64 " files written\n",
			(int)o->pid, E.files);
		status = E.files ? STB_EXIT_OK : STB_EXIT_FAIL;
	} else {
		fprintf(stderr, "stb-bpf-loader: stopped by %s; %" PRIu64 " files written\n",
			every_stop == SIGINT ? "SIGINT" : "SIGTERM", E.files);
		status = STB_EXIT_OK;
	}
cleanup:
	if (handlers) {
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGTERM, &old_term, NULL);
	}
	stb_profile_close(E.prof);
	stb_snapshot_close(E.snap);
	for (int i = 0; i < 2; i++)
		if (every_pipe[i] >= 0)
			close(every_pipe[i]);
	close(E.dirfd);
	return status;
}
