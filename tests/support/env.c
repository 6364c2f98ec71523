/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test support (support/env.h): paths from the environment, the privilege
 * check of the root-only tests, a private temporary directory.
 */
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "env.h"

/* Path from environment variable name, or dflt. */
const char *ts_env(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

/* Root-equivalent for the loader: CAP_SYS_PTRACE plus CAP_BPF+CAP_PERFMON
 * (or CAP_SYS_ADMIN), read from /proc/self/status. */
bool ts_privileged(void)
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
int ts_require_privilege(const char *test)
{
	if (ts_privileged())
		return 0;
	const char *req = getenv("STB_REQUIRE_BPF");
	if (req && strcmp(req, "1") == 0) {
		fprintf(stderr,
			"%s: STB_REQUIRE_BPF=1 but not privileged (needs root, or "
			"CAP_SYS_PTRACE + CAP_BPF + CAP_PERFMON): failing\n",
			test);
		return 1;
	}
	fprintf(stderr,
		"%s: not privileged (needs root, or CAP_SYS_PTRACE + CAP_BPF + "
		"CAP_PERFMON): skipped\n",
		test);
	return 77;
}

static char tmpdir_path[64];
static pid_t tmpdir_owner;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* Removes the temporary directory at exit (of the process that made it). */
static void tmpdir_remove(void)
{
	if (tmpdir_path[0] && getpid() == tmpdir_owner)
		nftw(tmpdir_path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A private temporary directory with HOME and GOCACHE pointing into it, so
 * that `go tool pprof` works for any user (root in CI); removed at exit.
 * Returns its path. */
const char *ts_tmpdir(void)
{
	char *dir = tmpdir_path;
	if (dir[0])
		return dir;
	snprintf(dir, sizeof(tmpdir_path), "/tmp/stb-prof-test.XXXXXX");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		exit(1);
	}
	tmpdir_owner = getpid();
	atexit(tmpdir_remove);
	char cache[128];
	snprintf(cache, sizeof(cache), "%s/gocache", tmpdir_path);
	setenv("HOME", dir, 1);
	setenv("GOCACHE", cache, 1);
	setenv("GOFLAGS", "", 1);
	return dir;
}

void ts_path(char *dst, size_t size, const char *env, const char *sibling)
{
	const char *v = getenv(env);
	if (v && *v) {
		snprintf(dst, size, "%s", v);
		return;
	}
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	snprintf(dst, size, "%s/%s", self, sibling);
}

void ts_sanitizer_opt(const char *name, const char *opt)
{
	const char *old = getenv(name);
	char buf[2048];
	snprintf(buf, sizeof(buf), "%s%s%s", old && *old ? old : "", old && *old ? ":" : "", opt);
	setenv(name, buf, 1);
}
