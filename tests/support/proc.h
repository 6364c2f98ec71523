/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test support: the clock, growing byte buffers, and running a program (the
 * loader, gdb, go tool pprof) with its output captured and a time limit.
 */
#ifndef STB_TESTS_SUPPORT_PROC_H
#define STB_TESTS_SUPPORT_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

/* CLOCK_MONOTONIC in ns / ms; a sleep that resumes after signals. */
uint64_t ts_now_ns(void);
uint64_t ts_now_ms(void);
void ts_sleep_ms(unsigned ms);

/* A growing NUL-terminated byte buffer (p may be NULL while empty). */
struct ts_buf {
	char *p;
	size_t len, cap;
};

/* Appends n bytes. 0 or -ENOMEM. */
int ts_buf_add(struct ts_buf *b, const void *data, size_t n);
void ts_buf_free(struct ts_buf *b);

/* Runs in the child between fork and exec (e.g. drops privileges); returns
 * 0 or -errno (the child then exits 126). */
typedef int (*ts_pre_exec_fn)(void *arg);

struct ts_proc {
	pid_t pid;
	int out_fd, err_fd; /* -1 once drained */
	struct ts_buf out, err;
	int status; /* waitpid status once reaped */
	bool reaped;
	struct rusage ru; /* its resource usage once reaped */
};

/* Starts argv[0] (a path, or a name looked up in PATH) with stdin from
 * /dev/null and stdout/stderr on pipes. env: extra "K=V" strings or NULL.
 * Returns 0 or -errno. */
int ts_proc_start(struct ts_proc *p, char *const argv[], char *const env[], ts_pre_exec_fn pre,
		  void *pre_arg);

/* Waits up to wait_ms for output of the child and appends what arrived.
 * Returns false once both of its pipes are closed. */
bool ts_proc_pump(struct ts_proc *p, int wait_ms);

/* Reads the child's output until both pipes close and reaps it, for at most
 * timeout_ms (then SIGKILLs it). Returns 0, or -ETIMEDOUT after a kill. */
int ts_proc_wait(struct ts_proc *p, int timeout_ms);

/* Reads the child's output until its stderr contains needle (true), or
 * timeout_ms passed or both pipes closed (false). Does not reap it. */
bool ts_proc_wait_for(struct ts_proc *p, const char *needle, int timeout_ms);

/* Exit code, or 128 + signal. */
int ts_proc_exit_code(const struct ts_proc *p);

/* Closes, kills (if still running) and reaps; frees the buffers. */
void ts_proc_free(struct ts_proc *p);

/* Waits for pid until deadline_ms (ts_now_ms clock), then kills it. Returns
 * the exit status, 128 + signal, or -1. */
int ts_wait_pid(pid_t pid, uint64_t deadline_ms);

/*
 * Runs argv (argv[0] looked up in PATH) with stdin from /dev/null, capturing
 * stdout and stderr into *out / *err (malloc'd, NUL-terminated; either may
 * be NULL to discard). Kills it after timeout_s. Returns its exit status,
 * 128 + signal, or -1.
 */
int ts_run(char *const argv[], char **out, char **err, int timeout_s);

/* Runs argv with stdout and stderr on a new pseudo-terminal; everything
 * written to it goes to *out. Returns the exit status as ts_run. */
int ts_run_pty(char *const argv[], char **out, int timeout_s);

#endif /* STB_TESTS_SUPPORT_PROC_H */
