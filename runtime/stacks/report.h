/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reports of many stacks, shared by stb_dump, the debug HTTP endpoint and
 * stb-bpf-loader: the traced tasks, what the report says about the run that
 * produced it (struct stb_report_meta: one for every producer), grouping of
 * identical stacks, and the writers of every format (enum stb_format): the
 * bRPC-style text, the JSON documents of docs/json.md, pprof and folded
 * stacks (pprof.c). Everything the target controls is escaped on output.
 */
#ifndef STB_RUNTIME_STACKS_REPORT_H
#define STB_RUNTIME_STACKS_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stb/abi.h"
#include "stb/stb.h"
#include "stackset.h"
#include "wait.h"

struct stb_sym;
struct stb_unw_proc;
struct stb_deadlocks;
struct stb_mem;

/* One traced task. frames hold at least ip/sp/flags; symbols may be filled
 * late from the report's symbolizer. */
struct stb_report_task {
	uint64_t id;
	unsigned state;          /* enum stb_task_state (< STB_TASK_NSTATES) */
	unsigned mode;           /* enum stb_trace_mode */
	int is_pthread;
	uint32_t tid;            /* thread it ran on (running tasks, pthreads) */
	uint64_t since_ns;       /* CLOCK_MONOTONIC_COARSE when it blocked (suspended, or a
				    pthread in a wait), 0 = unknown */
	uint64_t run_since_ns;   /* running bthreads: CLOCK_MONOTONIC since when it runs
				    without a switch (the monitor's), 0 = unknown */
	struct stb_wait_view wait; /* why it is blocked (kind NONE: it is not, or unknown) */
	struct stb_creator creator; /* who started it (all 0: unknown) */
	uint64_t execq;          /* execution queue it consumes now (abi.h), 0 = none */
	uint64_t execq_queued;   /* tasks queued there, when execq_queued_known */
	uint64_t wait_queued;    /* EXECQ waits: tasks queued in the queue waited for, */
	bool execq_queued_known, wait_queued_known; /* when known (read from the target) */
	char name[STB_ABI_NAME_LEN];
	int err;                 /* < 0: the trace failed */
	const char *error;       /* and why (owned by the producer); NULL: strerror(-err) */
	int truncated;           /* the walk ended at a limit (or the report cut it) */
	unsigned nframes;
	struct stb_frame *frames;
	struct stb_stackset_entry *stack; /* non-NULL: frames are stack->frames, shared with the
				    other tasks of that stack (stackset.h) */
	unsigned beyond;         /* frames the walk found past frames[nframes) (not kept) */
	bool beyond_more;        /* the walk stopped at its limit: even more exist */
	/* Set by stb_report_write (the view of the stack it wrote). */
	bool trimmed;            /* the fields below are set; frames were trimmed */
	bool inexact;            /* frames[0] is no longer the walk's frame 0 */
	unsigned hidden;         /* runtime frames left out (rtframes.h) */
	unsigned not_shown;      /* other frames left out: the depth limit, beyond */
	/* grouping */
	uint64_t hash;
	struct stb_report_task *group_next; /* next member of the same group */
	struct stb_report_task *group_tail; /* leaders: last member */
	unsigned group_count;               /* leaders: members */
};

/* What else than its frames the report's view of t's stack depends on: the
 * key of t's walk in a stackset (stackset.h). */
uint32_t stb_report_stack_key(const struct stb_report_task *t);

#define STB_REPORT_MAX_NOTES 8u

/*
 * Depth limits. A producer tracing for a report with max_depth keeps
 * stb_report_keep(max_depth) frames of each walk (the runtime's own frames,
 * which do not count, fit in the slack), and walks on up to
 * STB_REPORT_WALK_MAX frames only to count the rest into beyond.
 */
#define STB_REPORT_RT_SLACK 32u
#define STB_REPORT_WALK_MAX 2048u

static inline unsigned stb_report_keep(unsigned max_depth)
{
	return max_depth + STB_REPORT_RT_SLACK;
}

/* A counter of the producer ("stats" in JSON). */
struct stb_report_stat {
	const char *key;
	uint64_t value;
};

/*
 * What a report says about the run that made it, in every format (JSON
 * top-level members, text "# note:" lines, pprof comments). Members that a
 * producer does not know stay zero / NULL / false and are left out.
 */
struct stb_report_meta {
	const char *producer;    /* "stb-bpf-loader", "stb_dump", ... (text and pprof) */
	int pid;                 /* the traced process; 0: not known */
	const char *comm;        /* its command name (the target's bytes); NULL: not printed */
	bool table;              /* abi_version, table_capacity and untraceable are set */
	unsigned abi_version;
	uint32_t table_capacity;
	uint64_t untraceable;
	const char *capture;     /* how running tasks were captured ("bpf+context", ...) */
	bool run;                /* complete, not_traced, failed and finished are set */
	bool complete;           /* every selected task was traced (or had no stack) */
	const char *partial;     /* !complete: why ("the target exited during the trace") */
	uint64_t not_traced;     /* selected tasks left out (the run's deadline) */
	uint64_t failed;         /* tasks whose trace failed */
	uint64_t finished;       /* tasks that finished while the run went on */
	unsigned freq_hz;        /* profiles: samples per second; 0: not printed */
	const char *notes[STB_REPORT_MAX_NOTES]; /* sentences about the run */
	unsigned nnotes;
	const struct stb_report_stat *stats; /* profiles: counters; NULL: none */
	unsigned nstats;
};

/* Adds a note to m (ignored beyond STB_REPORT_MAX_NOTES). The string is
 * borrowed. */
void stb_report_meta_note(struct stb_report_meta *m, const char *note);

struct stb_report {
	FILE *out;
	struct stb_sym *sym;     /* symbols of the traced process; NULL: addresses only */
	struct stb_unw_proc *unw; /* its modules (pprof mappings); may be NULL */
	struct stb_stackset *stacks; /* where the tasks' shared stacks are (their JSON is
					kept there, written once); may be NULL */
	uint64_t now_ns;         /* CLOCK_MONOTONIC_COARSE now, for "blocked for" (0: unknown) */
	bool group;              /* each distinct stack once, with its count and ids */
	const struct stb_report_meta *meta; /* may be NULL */
	uint64_t sym_deadline;   /* CLOCK_MONOTONIC ns: no symbol lookups after it
	                            (frames keep their addresses); 0 = none */
	unsigned max_depth;      /* frames shown per stack, the runtime's own not
	                            counted; 0 = every frame kept */
	bool runtime_frames;     /* show the runtime's own frames (rtframes.h) */
	bool lines;              /* text: file:line and inline frames */
	const char *runtime_hint; /* text: how to show hidden runtime frames
	                            ("--runtime-frames"); NULL: no hint */
	const struct stb_deadlocks *deadlocks; /* the table's deadlocks; NULL: not searched */
	bool all_ids;            /* grouped text: every id (else the first few and a count) */
};

/* Is frame 0 of a task traced in this mode the interrupted instruction (not
 * a return address)? */
bool stb_trace_mode_exact(unsigned mode);

/* Is t->frames[0] the interrupted instruction (its mode, and not trimmed)? */
bool stb_report_task_exact(const struct stb_report_task *t);

/* Formats "#idx 0x%016x symbol+0xoff\n" into buf (symbol and module
 * escaped); returns the full length (snprintf). */
size_t stb_format_frame(char *buf, size_t size, unsigned idx, const struct stb_frame *f);

/* A text made of frame lines, with snprintf's contract on buf[size] (NULL
 * when size is 0): len counts every byte, also those that did not fit. */
struct stb_frame_text {
	char *buf;
	size_t size, len;
	unsigned idx; /* the next line's number */
	bool foreign; /* the frames' strings may come from anywhere (not only
			 from a stb_sym): measured and checked for escapes */
};

/*
 * stb_frame_fn appending stb_format_frame's line of f to the stb_frame_text
 * arg (the text stays NUL-terminated). Unless the text is foreign, f's
 * strings must come from a stb_sym (stb_sym_fill_frame): their lengths and
 * whether they need an escape are known (stb_sym_str_len), not scanned
 * again. Returns 0 (never stops a walk). Not thread-safe for one text.
 */
int stb_frame_text_add(const struct stb_frame *f, void *arg);

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

/*
 * Writes the report of tasks[0 .. n) to r->out in format (enum stb_format):
 * text (one section per task, or per group), the "stb-stacks/1" JSON
 * document, pprof, folded stacks or a flame graph. First trims each task's
 * stack once (in place): the runtime's own frames left out unless
 * r->runtime_frames, the rest cut at r->max_depth, what was left out counted
 * (hidden, not_shown). Returns 0 or -errno (-EINVAL: bad format; -ENOMEM;
 * -EIO: writing failed). Not thread-safe for one r.
 */
int stb_report_write(const struct stb_report *r, struct stb_report_task *tasks, size_t n,
		     int format);

/*
 * A task list without stacks: text is the header line of each task (as in
 * the text report); json is the "stb-tasks/1" document (the task members of
 * "stb-stacks/1" except truncated and frames). Returns 0 or -errno.
 */
int stb_report_list(const struct stb_report *r, const struct stb_report_task *tasks, size_t n,
		    bool json);

struct stb_json;

/* The members of m (those that are set) in the object being written to j:
 * for every JSON document (report.c, pprof.c). */
void stb_report_meta_json(struct stb_json *j, const struct stb_report_meta *m);

/* The comment lines of m for a pprof profile ("<producer> of pid N (comm)",
 * each note, partial): calls add(arg, line) for each. Returns 0 or add's
 * first error. */
int stb_report_meta_lines(const struct stb_report_meta *m,
			  int (*add)(void *arg, const char *line), void *arg);

/* ---- why a task is where it is (report_why.c) ---- */

/*
 * Fills t's why-members -- wait, since_ns, run_since_ns, creator, execq --
 * from entry p of task t->id (t->id and t->is_pthread set), read before the
 * task is traced: the wait block validated as abi.h says (wait.h); the
 * current owner of a mutex, rwlock or bthread_id, and the tasks queued in an
 * execution queue, re-read with mem (NULL: the owner seen when it blocked, no
 * queued count); for a running bthread the time since its last switch from
 * worker entry w (NULL: unknown). Reads only; thread-safe.
 */
void stb_report_task_why(struct stb_report_task *t, const struct stb_abi_task *p,
			 const struct stb_abi_worker *w, const struct stb_mem *mem);

/* After the trace: drops the wait and times of t when its entry p says that
 * it moved since stb_report_task_why (they would not describe its stack). */
void stb_report_task_why_recheck(struct stb_report_task *t, const struct stb_abi_task *p);

/* How long t has been blocked, or running without a switch, at now_ns
 * (CLOCK_MONOTONIC); 0 when neither is known (--stuck, opts.stuck_ns). */
uint64_t stb_report_stuck_ns(const struct stb_report_task *t, uint64_t now_ns);

#endif /* STB_RUNTIME_STACKS_REPORT_H */
