/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The report model, shared by stb_dump, the debug HTTP endpoint, the watchdog
 * and stb-bpf-loader: the traced tasks, what the report says about the run
 * that produced it (struct stb_report_meta: one for every producer), the
 * view of a stack (runtime frames and the depth limit), and the grouping of
 * identical stacks. The writers of every format are behind formats.h.
 */
#ifndef STB_RUNTIME_STACKS_REPORT_MODEL_H
#define STB_RUNTIME_STACKS_REPORT_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "report/stackset.h"
#include "stb/abi.h"
#include "stb/stb.h"
#include "table/driver.h"
#include "table/tview.h"
#include "table/wait.h"

struct stb_sym;
struct stb_unw_proc;
struct stb_deadlocks;
struct stb_mem;

/* Why a stack is truncated (stb_report_task.truncated_why): the first three
 * are the capture's (enum stb_cut of table/driver.h). */
enum stb_report_trunc {
	STB_REPORT_TRUNC_NONE = 0,
	STB_REPORT_TRUNC_COPY = STB_CUT_COPY,             /* the copy's limit */
	STB_REPORT_TRUNC_MOVED = STB_CUT_MOVED,           /* changed while it was read */
	STB_REPORT_TRUNC_UNREADABLE = STB_CUT_UNREADABLE, /* the rest could not be read */
	STB_REPORT_TRUNC_DEADLINE,                        /* the walk's deadline passed */
	STB_REPORT_TRUNC_WALK_MAX,                        /* STB_REPORT_WALK_MAX frames walked */
	STB_REPORT_TRUNC_DEPTH,                           /* the report's depth limit */
	STB_REPORT_TRUNC_NKINDS,
};

/* "copy", "moved", "unreadable", "deadline", "walk-limit", "depth" (JSON),
 * and the sentence of the text; NULL for NONE or out of range. */
const char *stb_report_trunc_name(unsigned why);
const char *stb_report_trunc_text(unsigned why);

/* The fatal signal a core was written on (stb-bpf-loader --core): the
 * kernel's siginfo and the thread it was delivered to. */
struct stb_report_signal {
	int signo;               /* SIGSEGV, ... (1..64) */
	int code;                /* si_code: > 0 the kernel's (a fault), <= 0 sent */
	bool has_addr;           /* addr is the fault address (si_addr) */
	uint64_t addr;
	bool has_sender;         /* sent by a process: sender_pid, sender_uid */
	uint32_t sender_pid, sender_uid;
	uint32_t tid;            /* the thread that took it */
	uint64_t task;           /* the task running on that thread (0: none, a thread
				    that is no task) */
};

/* "SIGSEGV" (NULL: not a known signal) and "SEGV_MAPERR" (NULL: no name for
 * this code of this signal); constant strings. */
const char *stb_report_signal_name(int signo);
const char *stb_report_signal_code_name(int signo, int code);

/* "signal 11 (SIGSEGV, SEGV_MAPERR) at address 0x10", or "... sent by pid
 * 12 (uid 0)", into buf[size] (snprintf's contract; returns the full
 * length). */
size_t stb_report_signal_text(const struct stb_report_signal *s, char *buf, size_t size);

struct stb_json;

/* s as a JSON object (docs/json.md "signal"): thread: with tid and task (the
 * document's member). */
void stb_report_signal_json(struct stb_json *j, const struct stb_report_signal *s, bool thread);

/* What few records have (a thread's task, a core's fatal signal, a system
 * call, a running bthread's run, execution queues, a failure's text), kept
 * apart from the record every task has (stb_report_task.more). */
struct stb_report_more {
	/* A thread of the process, not a task: the bthread its worker runs or
	 * the registered pthread it is (whose stack is that task's: it has none
	 * of its own here); 0: none. */
	uint64_t task;
	const struct stb_report_signal *signal; /* the fatal signal this task's
				    thread took (a core: shown first, flagged); NULL: none */
	/* A running task whose thread is blocked in a system call (a bthread
	 * there pins its worker): the call (x86_64 number, syscall_nr) and its
	 * first argument (table/syscall.h names it). */
	uint64_t syscall_arg0;
	uint64_t run_since_ns;   /* running bthreads: CLOCK_MONOTONIC since when it runs
				    without a switch (the monitor's), 0 = unknown */
	uint64_t execq;          /* execution queue it consumes now (abi.h), 0 = none */
	uint64_t execq_queued;   /* tasks queued there, when execq_queued_known */
	uint64_t wait_queued;    /* EXECQ waits: tasks queued in the queue waited for,
				    when wait_queued_known (read from the target) */
	const char *error;       /* why the trace failed (owned by the producer); NULL:
				    strerror(-err) */
	uint32_t syscall_nr;
	bool execq_queued_known, wait_queued_known;
};

/* One traced task. frames hold at least ip/sp/flags; symbols may be filled
 * late from the report's symbolizer. */
struct stb_report_task {
	/* Laid out for a million of them (a loader's grouped run): words
	 * first, then the 32-bit fields, the small ones and the flags last;
	 * what few tasks have is behind more. */
	uint64_t id;
	uint64_t since_ns;       /* CLOCK_MONOTONIC_COARSE when it blocked (suspended, or a
				    pthread in a wait), 0 = unknown */
	struct stb_wait_view wait; /* why it is blocked (kind NONE: it is not, or unknown) */
	struct stb_creator creator; /* who started it (all 0: unknown) */
	/* Its name, NUL-terminated, never NULL where a producer filled it (a
	 * zeroed record has none: stb_report_task_name). Not owned: the
	 * collector's pool (collect/names.h), the table view's copy, or a
	 * constant. */
	const char *name;
	/* The rest of what it has (NULL: nothing, as all zeros; read it with
	 * stb_report_more). Not owned: the producer's. */
	const struct stb_report_more *more;
	struct stb_frame *frames;
	struct stb_stackset_entry *stack; /* non-NULL: frames are stack->frames, shared with the
				    other tasks of that stack (stackset.h) */
	struct stb_report_task *group_next; /* stb_report_group: next member of the same group */
	/* A thread of the process, not a task (the report's thread section,
	 * or the thread that took a core's fatal signal with no task running
	 * on it): id is STB_ABI_OWNER_TID(tid) (how owners name a plain
	 * pthread), name its comm, state RUNNING (or in_syscall); more->task,
	 * when not 0, is the bthread its worker runs or the registered
	 * pthread it is. */
	uint32_t tid;            /* thread it ran on (running tasks, pthreads) */
	uint32_t worker;         /* a running bthread's worker, when on_worker */
	int err;                 /* < 0: the trace failed */
	unsigned group_count;    /* stb_report_group: a leader's members */
	/* Frame counts: at most twice STB_REPORT_WALK_MAX (asserted below). */
	uint16_t nframes;
	uint16_t beyond;         /* frames the walk found past frames[nframes) (not kept) */
	/* Set by stb_report_write (the view of the stack it wrote). */
	uint16_t hidden;         /* runtime frames left out (rtframes.h) */
	uint16_t not_shown;      /* other frames left out: the depth limit, beyond */
	uint8_t state;           /* enum stb_task_state (< STB_TASK_NSTATES) */
	uint8_t mode : 4;        /* enum stb_trace_mode */
	uint8_t truncated_why : 4; /* enum stb_report_trunc: why (NONE when not truncated) */
	bool is_pthread : 1;
	bool is_thread : 1;
	bool on_worker : 1;      /* a running bthread: worker is the worker it runs on */
	bool in_syscall : 1;     /* more->syscall_nr: the call */
	bool starting : 1;       /* a thread of a core created but not yet run: its one
				    frame is the instruction it would run first */
	bool added : 1;          /* not of the run's selection: in the report because a
				    selected task waits on it (stb_report_waits_for) */
	bool truncated : 1;      /* the walk ended at a limit (or the report cut it) */
	bool beyond_more : 1;    /* the walk stopped at its limit: even more exist */
	bool trimmed : 1;        /* stb_report_write: hidden, not_shown set; trimmed */
	bool inexact : 1;        /* frames[0] is no longer the walk's frame 0 */
};

/* A million records are what a loader holds for a million tasks: the size is
 * the loader's memory per task (docs/benchmarks.md, "A million bthreads"). */
_Static_assert(sizeof(struct stb_report_task) <= 168, "the report record grew");

/* All zeros: what a record without more has. */
extern const struct stb_report_more stb_report_more_none;

/* t's more, never NULL (stb_report_more_none when it has none). */
static inline const struct stb_report_more *stb_report_more(const struct stb_report_task *t)
{
	return t->more ? t->more : &stb_report_more_none;
}

/* Is m all zeros (a record needs no more)? */
bool stb_report_more_empty(const struct stb_report_more *m);

/* Why t's trace failed (t->err < 0): its producer's text, else
 * strerror(-t->err). */
const char *stb_report_task_error(const struct stb_report_task *t);

/* t's name; "" when it has none. */
static inline const char *stb_report_task_name(const struct stb_report_task *t)
{
	return t->name ? t->name : "";
}

/* A task that a report names without showing it -- a creator, an owner
 * past the run's deadline -- as the table said when the report was made. */
struct stb_report_ref {
	uint64_t id;
	bool is_pthread;
	char name[STB_ABI_NAME_LEN];
};

/* The task t waits for, whose stack a report of t must show: the holder of
 * the mutex, rwlock or bthread_id it waits on (a task id, not an
 * unregistered pthread's tid), or the bthread it joins; 0: none. */
uint64_t stb_report_waits_for(const struct stb_report_task *t);

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
_Static_assert(2 * STB_REPORT_WALK_MAX <= UINT16_MAX, "frame counts are 16 bits");
_Static_assert(STB_REPORT_TRUNC_NKINDS <= 16 && STB_TRACE_CORE < 16, "4-bit fields");

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
	uint64_t time_ns;        /* CLOCK_REALTIME of the tasks (ns since the epoch); 0: not known */
	const char *time_what;   /* text: what time_ns is ("core file written"); NULL: the
				    time the tasks were read */
	bool census;             /* tasks and slots_used are set */
	struct stb_tview_census tasks; /* the process's live tasks by state */
	uint64_t slots_used;     /* table slots used so far (its high-water mark) */
	bool table;              /* abi_version, table_capacity and untraceable are set */
	unsigned abi_version;
	uint32_t table_capacity;
	uint64_t untraceable;
	/* Tasks of the selection that are beyond the table's capacity: in no
	 * task of the report (pprof and folded: one synthetic sample of that
	 * count, state "untraceable"). */
	uint64_t beyond_capacity;
	const char *capture;     /* how running tasks were captured ("bpf+context", ...) */
	const struct stb_report_signal *signal; /* a core's fatal signal; NULL: none */
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
	const char *threads_hint; /* text: how to hide the thread section
	                            ("--no-threads"); NULL: no hint */
	const struct stb_deadlocks *deadlocks; /* the table's deadlocks; NULL: not searched */
	const char *deadlock_hint; /* text: how to see a deadlock of tasks not in the report
				    ("run without --bthread, --state and --stuck"); NULL: none */
	const struct stb_report_ref *refs; /* tasks named but not shown, sorted by id */
	size_t nrefs;
	bool all_ids;            /* grouped text: every member's id and name, and its wait
				    where they differ (else the first few ids and a count) */
};

/* Is frame 0 of a task traced in this mode the interrupted instruction (not
 * a return address)? */
bool stb_trace_mode_exact(unsigned mode);

/* Is t->frames[0] the interrupted instruction (its mode, and not trimmed)? */
bool stb_report_task_exact(const struct stb_report_task *t);

/* Symbolizes frames that have none yet (frame 0 exact for running captures);
 * with_source: also file:line. */
void stb_report_symbolize(const struct stb_report *r, struct stb_report_task *t, bool with_source);

struct stb_sym_info;

/*
 * The inline frames shown before frame i of t, a physical frame of a
 * symbolized stack: looks its address up (with file:line) into *si and
 * returns how many of si->inlines, innermost first, come before it; 0 when
 * there are none, without symbols, past r->sym_deadline, for a frame of a
 * stack that carries its inline frames already, and for the runtime's
 * internals inlined into its functions (rtframes.h) unless
 * r->runtime_frames. Thread-safe as stb_sym_lookup.
 */
unsigned stb_report_frame_inlines(const struct stb_report *r, const struct stb_report_task *t,
				  unsigned i, struct stb_sym_info *si);

/*
 * Groups viewed tasks (stb_report_view) with the same state, failed or not,
 * wait kind and frame ips, the tasks added for what selected ones wait on
 * (added) apart; the frames of a task whose stack is interned are hashed
 * once per stack (stackset.h), not per task. Returns the group leaders,
 * those of selected tasks first, most populous first, then by first id
 * (caller frees the array; members are chained in their order through
 * group_next, group_count set on leaders), and their number in *ngroups.
 * NULL with errno ENOMEM.
 */
struct stb_report_task **stb_report_group(struct stb_report_task *tasks, size_t n,
					  size_t *ngroups);

struct stb_json;

/* The members of m (those that are set) in the object being written to j:
 * for every JSON document (jsondoc.c, pprof.c). */
void stb_report_meta_json(struct stb_json *j, const struct stb_report_meta *m);

/*
 * The header line of a report made with m, without its newline, into
 * buf[size] (snprintf's contract; returns the full length): producer,
 * program and pid, time, the live tasks by state and the table slots used
 * ("stb-bpf-loader snapshot of pid 1234 (server) at 2025-01-15 10:32:07.123
 * UTC: 20 bthreads (4 ready, 16 suspended); 24 of 65,536 table slots used"),
 * each part when m knows it; the target's bytes escaped.
 */
size_t stb_report_meta_header(const struct stb_report_meta *m, char *buf, size_t size);

/* "3,091": v with thousands separators, into buf[size]. */
void stb_report_count_text(char *buf, size_t size, uint64_t v);

/* The comment lines of m for a pprof profile ("<producer> of pid N (comm):
 * capture", each note, partial): calls add(arg, line) for each. Returns 0 or add's
 * first error. */
int stb_report_meta_lines(const struct stb_report_meta *m,
			  int (*add)(void *arg, const char *line), void *arg);

/* Is t blocked: suspended, or a thread in a wait while its entry says
 * running (since when known)? */
bool stb_report_blocked(const struct stb_report_task *t);

/* Since when t has been in its state: blocked (CLOCK_MONOTONIC_COARSE ns),
 * or, a running bthread, running without a switch; 0 when not known. */
uint64_t stb_report_since_ns(const struct stb_report_task *t);

/* How long t has been blocked, or running without a switch, at now_ns
 * (CLOCK_MONOTONIC); 0 when neither is known (--stuck, opts.stuck_ns). */
uint64_t stb_report_stuck_ns(const struct stb_report_task *t, uint64_t now_ns);

/*
 * Leaves out t's runtime frames (unless r->runtime_frames) and what is past
 * r->max_depth, counting both (hidden, not_shown); once per task (trimmed).
 * with_source: frames symbolized with file:line. A stack shared through a
 * stackset is viewed once for all its tasks and stays as stored.
 */
void stb_report_view(const struct stb_report *r, struct stb_report_task *t, bool with_source);

#endif /* STB_RUNTIME_STACKS_REPORT_MODEL_H */
