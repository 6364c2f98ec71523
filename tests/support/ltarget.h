/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test support: tests/loader_target.c driven over its line protocol (its
 * report of chains and ids, commands and their one-line answers, counters).
 */
#ifndef STB_TESTS_SUPPORT_LTARGET_H
#define STB_TESTS_SUPPORT_LTARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TS_MAX_CHAINS 32
#define TS_MAX_IDS 16

struct ts_chain {
	char name[32];
	unsigned n;
	uint64_t ids[TS_MAX_IDS];
};

struct ts_ltarget {
	pid_t pid;
	int to_fd;       /* its stdin */
	int from_fd;     /* its stdout */
	char pend[4096]; /* read from from_fd, not yet returned as lines */
	size_t npend;
	struct ts_chain chains[TS_MAX_CHAINS];
	unsigned nchains;
	bool reaped;
	int status;
};

/* Reads one line from t (without the newline) within timeout_ms. 0 or -errno. */
int ts_ltarget_line(struct ts_ltarget *t, char *line, size_t len, int timeout_ms);

/* Starts loader_target at path with args (NULL-terminated, may be NULL) and
 * extra environment env (NULL or NULL-terminated "K=V"); reads its report up
 * to "ready". Returns 0 or -errno. */
int ts_ltarget_start(struct ts_ltarget *t, const char *path, const char *const *args,
		     char *const env[]);

/* The chain called name, or NULL. */
const struct ts_chain *ts_ltarget_chain(const struct ts_ltarget *t, const char *name);

/* Sends one command line and reads the one-line answer. 0 or -errno. */
int ts_ltarget_cmd(struct ts_ltarget *t, const char *cmd, char *reply, size_t len);

/* Value of key=V in a reply line (0 when absent). */
uint64_t ts_field(const char *line, const char *key);

/* One counter from "stats", or UINT64_MAX if the target does not answer. */
uint64_t ts_ltarget_stat(struct ts_ltarget *t, const char *key);

/* Quits the target: *bye receives its last line. Returns its exit code, or
 * -errno when it did not answer (it is killed then). */
int ts_ltarget_quit(struct ts_ltarget *t, char *bye, size_t len);

/* Kills and reaps the target (after a failed check, or on purpose). */
void ts_ltarget_kill(struct ts_ltarget *t);

#endif /* STB_TESTS_SUPPORT_LTARGET_H */
