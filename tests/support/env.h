/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test support: paths from the environment, the privilege check of the
 * root-only tests (exit 77 = skipped unless STB_REQUIRE_BPF=1), a private
 * temporary directory.
 */
#ifndef STB_TESTS_SUPPORT_ENV_H
#define STB_TESTS_SUPPORT_ENV_H

#include <stdbool.h>
#include <stddef.h>

/* Path from environment variable name, or dflt. */
const char *ts_env(const char *name, const char *dflt);

/* $env, or sibling (a path relative to the directory of this executable). */
void ts_path(char *dst, size_t size, const char *env, const char *sibling);

/* Root-equivalent for the loader: CAP_SYS_PTRACE plus CAP_BPF+CAP_PERFMON
 * (or CAP_SYS_ADMIN), read from /proc/self/status. */
bool ts_privileged(void);

/* The exit status for a test that needs the loader's privileges when it
 * lacks them: 77 (skipped), or 1 with STB_REQUIRE_BPF=1. 0 when privileged. */
int ts_require_privilege(const char *test);

/* Appends opt ("key=value") to the sanitizer option variable name
 * (ASAN_OPTIONS, ...), keeping what is set there; inherited by children. */
void ts_sanitizer_opt(const char *name, const char *opt);

/* A private temporary directory with HOME and GOCACHE pointing into it, so
 * that `go tool pprof` works for any user (root in CI); removed at exit.
 * Returns its path. */
const char *ts_tmpdir(void);

#endif /* STB_TESTS_SUPPORT_ENV_H */
