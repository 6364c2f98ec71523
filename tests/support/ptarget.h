/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test support: tests/profile_target.c ($STB_PROFILE_TARGET) started in a
 * mode, its "ready" line read, and stopped by closing its stdin.
 */
#ifndef STB_TESTS_SUPPORT_PTARGET_H
#define STB_TESTS_SUPPORT_PTARGET_H

#include <stddef.h>
#include <sys/types.h>

struct ts_ptarget {
	pid_t pid;
	int in_fd;        /* its stdin: closing it ends the target */
	char ready[4096]; /* the line it printed when ready */
};

/* Starts `profile_target mode` and waits (20 s) for its "ready" line. 0 or -1. */
int ts_ptarget_start(struct ts_ptarget *t, const char *mode);

/* Ends the target (closes its stdin) and reaps it. Returns its exit status. */
int ts_ptarget_stop(struct ts_ptarget *t);

/* The value of "key=..." (up to a space) in the ready line, or NULL. */
const char *ts_ptarget_field(const struct ts_ptarget *t, const char *key, char *buf, size_t size);

#endif /* STB_TESTS_SUPPORT_PTARGET_H */
