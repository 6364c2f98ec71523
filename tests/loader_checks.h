/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the stb-bpf-loader tests share (test_loader_*.c): loader_target
 * processes started and cleaned up after a failed check, loader runs and their
 * exit checks, parsers of the loader's text and JSON output, the chains each
 * loader_target task must show, the privilege helpers, and main.
 */
#ifndef STB_TESTS_LOADER_CHECKS_H
#define STB_TESTS_LOADER_CHECKS_H

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <linux/capability.h>

#include <stb/abi.h>

#include "support/env.h"
#include "support/json_parse.h"
#include "support/ltarget.h"
#include "support/proc.h"

#define LOADER_TIMEOUT_MS 60000 /* a loader run that takes longer is a failure */
#define CAPTURE_TIMEOUT "5000"  /* --timeout for runs that capture running tasks */

struct run {
	struct ts_proc p;
	int code;
	const char *out, *err;
};

#define MAX_TASKS 64
#define MAX_FRAMES 80

struct ttask {
	bool pthread, group;
	uint64_t id;
	uint64_t ids[MAX_TASKS]; /* group members */
	unsigned nids, count;
	char name[48], state[32];
	bool failed, no_stack, truncated;
	unsigned not_shown; /* "(N more frames not shown)" */
	char created_by[160]; /* "created by" line, without the words */
	char error[512];
	unsigned nframes;   /* physical frames */
	char frames[MAX_FRAMES][96];
	unsigned inlined;   /* "[inlined]" lines (not in frames) */
};

struct tout {
	bool note; /* a "# note:" line */
	bool partial;
	bool runtime_hint; /* "# the runtime's own frames ... are not shown" */
	bool threads;      /* the section of the process's threads (not parsed) */
	char header[512];  /* the first line, "# stb-bpf-loader snapshot of pid ..." */
	unsigned n;
	struct ttask t[MAX_TASKS];
};

struct expect {
	const char *chain; /* loader_target chain name */
	const char *const *frames;
	const char *state;   /* NULL: any */
	const char *capture; /* JSON capture; NULL: any */
};

/* Tasks in the default loader_target: 3 butex, 2 sleep, mutex, fd, 2 yield,
 * spin, heartbeat, pthread. */
#define DEFAULT_TASKS 12u

/* butex 3, sleep 2, mutex, fd, heartbeat, blocker */
#define BLOCKER_TASKS 9u

#define NEXPECTS 8u

extern char loader_path[PATH_MAX];
extern char loader_test_path[PATH_MAX]; /* the build with the test hooks */
extern char target_path[PATH_MAX];
extern char target_nofp_path[PATH_MAX];
extern const struct expect expects[NEXPECTS];
extern const char *const chain_butex[],
    *const chain_sleep[], *const chain_mutex[], *const chain_fd[],
						    *const chain_spin[],
							*const chain_yield_ready[],
							    *const chain_yield_any[],
								*const chain_pthread[],
								    *const chain_heartbeat[];
extern const char *const blocker_args[]; /* loader_target with a blocker task */

struct ts_ltarget *target_start(struct ts_ltarget *t, const char *path, const char *const *args,
				char *const env[]);
void target_forget(struct ts_ltarget *t);
int teardown(void **state);
uint64_t chain_id(const struct ts_ltarget *t, const char *chain, unsigned i);
uint64_t stat_of(struct ts_ltarget *t, const char *key);
void target_finish(struct ts_ltarget *t, unsigned expect_joined);
/* The loader runs with --runtime-frames after "--pid PID" (whole stacks, as
 * the checks expect) unless a test clears this. */
extern bool run_loader_all_frames;
void run_loader_v(struct run *r, ts_pre_exec_fn pre, void *pre_arg, va_list ap);
void run_loader(struct run *r, ...);
void run_loader_pre(struct run *r, ts_pre_exec_fn pre, void *arg, ...);
void run_free(struct run *r);
bool sanitizer_report(const char *err);
void expect_exit(const struct run *r, int code, const char *msg);
void frame_fn(const char *line, char *fn, size_t len);
void parse_text(const char *text, struct tout *o);
const struct ttask *text_task(const struct tout *o, uint64_t id);
bool fn_match(const char *name, const char *pattern);
bool frames_have(char (*frames)[96], unsigned n, const char *const *want);
void dump_frames(const char *what, uint64_t id, char (*frames)[96], unsigned n);
void check_text_task(const struct tout *o, const struct ts_ltarget *tg, const struct expect *e,
		     unsigned i);
void check_text_all(const struct tout *o, const struct ts_ltarget *tg);
struct ts_json *parse_json(const char *text);
const struct ts_json *json_task(const struct ts_json *doc, uint64_t id);
unsigned json_frames(const struct ts_json *t, char (*frames)[96], char (*sources)[8]);
void check_json_task(const struct ts_json *doc, const struct ts_ltarget *tg, const struct expect *e,
		     unsigned i, bool nofp);
void check_json_all(const struct ts_json *doc, const struct ts_ltarget *tg, bool nofp);
const char *pid_arg(const struct ts_ltarget *t);
int caps_get(struct __user_cap_data_struct d[2]);
int drop_bpf_caps(void *arg);
int become_nobody(void *arg);
uint64_t child_caps(ts_pre_exec_fn pre);
bool privileged(void);

/* Runs the tests (after the privilege check: 77 = skipped). */
int loader_checks_main(const struct CMUnitTest *tests, size_t n, const char *name);

#endif /* STB_TESTS_LOADER_CHECKS_H */
