/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reports of many stacks, shared by stb_dump (in-process) and stb-bpf-loader:
 * the bRPC-style text, grouping of identical stacks (count and ids) and the
 * JSON document described in docs/json.md.
 */
#ifndef STB_RUNTIME_REPORT_H
#define STB_RUNTIME_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stb/abi.h"
#include "stb/stb.h"

/* One traced task. frames hold at least ip/sp/flags; symbols may be filled
 * late by the report's symbolizer. */
struct stb_report_task {
	uint64_t id;
	unsigned state;          /* enum stb_task_state */
	unsigned mode;           /* enum stb_trace_mode */
	int is_pthread;
	uint32_t tid;            /* thread it ran on (running tasks, pthreads) */
	uint64_t since_ns;       /* CLOCK_MONOTONIC when it blocked, 0 = unknown */
	char name[STB_ABI_NAME_LEN];
	int err;                 /* < 0: the trace failed */
	char error[128];
	int truncated;
	unsigned nframes;
	struct stb_frame *frames;
	/* grouping */
	uint64_t hash;
	struct stb_report_task *group_next; /* next member of the same group */
	struct stb_report_task *group_tail; /* leaders: last member */
	unsigned group_count;               /* leaders: members */
};

/* Fills f's symbol fields. flags: STB_SYM_RETURN (f->ip is a return address),
 * STB_SYM_NO_SOURCE (file:line not needed), as for stb_sym_lookup. */
typedef void (*stb_report_sym_fn)(void *ctx, struct stb_frame *f, int flags);

struct stb_report {
	FILE *out;
	stb_report_sym_fn sym;  /* NULL: frames are printed as they are */
	void *sym_ctx;
	uint64_t now_ns;        /* CLOCK_MONOTONIC_COARSE now, for "blocked for" */
	bool group;
};

/* Formats "#idx 0x%016x symbol+0xoff\n" into buf; returns the full length (snprintf). */
size_t stb_format_frame(char *buf, size_t size, unsigned idx, const struct stb_frame *f);

/* Symbolizes frames that have none yet (frame 0 exact for running captures);
 * with_source: also file:line. */
void stb_report_symbolize(const struct stb_report *r, struct stb_report_task *t, bool with_source);

/*
 * Groups tasks with the same state and the same frame ips. Returns the group
 * leaders, most populous first (caller frees the array; members are chained
 * through group_next, group_count set on leaders), and their number in
 * *ngroups. NULL with errno ENOMEM.
 */
struct stb_report_task **stb_report_group(struct stb_report_task *tasks, size_t n,
					  size_t *ngroups);

/* Text: one section per task, or per group when r->group. Returns 0 or -errno. */
int stb_report_text(const struct stb_report *r, struct stb_report_task *tasks, size_t n);

/* Writes s as a JSON string literal (quoted, escaped). */
void stb_report_json_str(FILE *out, const char *s);

/* The JSON document of docs/json.md; extra is printed as additional top-level
 * members (must be "" or start with ",\n"). Returns 0 or -errno. */
int stb_report_json(const struct stb_report *r, struct stb_report_task *tasks, size_t n,
		    const char *extra);

/*
 * A task list without stacks: text is the header line of each task (as in
 * stb_report_text); json is {"schema": "stb-tasks/1", <extra>, "tasks": [...]}
 * with the task members of stb_report_json except truncated and frames.
 * extra as for stb_report_json. Returns 0.
 */
int stb_report_list(const struct stb_report *r, const struct stb_report_task *tasks, size_t n,
		    bool json, const char *extra);

#endif /* STB_RUNTIME_REPORT_H */
