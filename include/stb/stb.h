/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The in-process stb tracer: call stacks of any bthread (suspended, ready or
 * running) and of pthreads that opted in, without stopping anything but the
 * one task being read; dumps of every bthread; tracer configuration.
 */
#ifndef STB_STB_STB_H
#define STB_STB_STB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <bthread/bthread.h>
#include <stb/export.h>

STB_BEGIN_DECLS

/* ---- configuration ---- */

/*
 * Sets how many task slots the shared table publishes (default 1048576,
 * 65536 for a BPF-map table ($STB_TABLE=bpf), or $STB_TABLE_CAPACITY; a
 * memfd table costs memory only for the slots used). Bthreads beyond it
 * still run but cannot be traced from outside the process: the runtime says
 * so once on stderr, stb-bpf-loader how many. Call before the first bthread
 * call.
 * Returns 0, -EINVAL (0 or above 4194304) or -EBUSY (runtime already started).
 */
STB_EXPORT int stb_table_set_capacity(uint32_t capacity);

/*
 * How long a trace of a running task waits for its signal capture (default
 * 50 ms, or $STB_SIGNAL_TRACE_TIMEOUT_MS); a capture not answered in time is
 * asked for once more, as long again. Also the default timeout of a trace as
 * a whole. Returns 0 or -EINVAL (ms < 1 or > 60000). Thread-safe.
 */
STB_EXPORT int stb_set_signal_trace_timeout_ms(int ms);

/*
 * Whether bthread_stack_trace() shows the runtime's own frames (show != 0) or,
 * as by default and as every report does, hides them: stb_jump_stack,
 * stb_sched_suspend, the butex internals above the public call a bthread
 * waits in, and stb_task_entry, stb_ctx_trampoline below its function. Also
 * set at start-up by $STB_TRACE_RUNTIME_FRAMES=1. stb_trace() has its own
 * option (stb_trace_opts.runtime_frames). Returns 0. Thread-safe.
 */
STB_EXPORT int stb_set_trace_runtime_frames(int show);

/*
 * Signal used to capture running tasks (default SIGRTMAX-3, or
 * $STB_TRACE_SIGNAL as a number). Call before the first trace of a running
 * task. Returns 0, -EINVAL (not a catchable signal) or -EBUSY (handler
 * already installed).
 */
STB_EXPORT int stb_set_trace_signal(int signo);

/* ---- traces ---- */

/* stb_frame.flags */
#define STB_FRAME_F_FP 0x1u      /* found by following frame pointers */
#define STB_FRAME_F_INLINED 0x2u /* an inlined call at the same ip as the next frame */
#define STB_FRAME_F_MISMATCH 0x4u /* its module's file is not the one mapped (build id): no symbol */

/*
 * One frame. ip is the exact address for frame 0 of a running task and a
 * return address otherwise. Strings belong to the tracer and stay valid for
 * the life of the process; NULL/0 when unknown or when symbols are off.
 */
struct stb_frame {
	uint64_t ip;
	uint64_t sp;
	const char *symbol;   /* function name, demangled when possible */
	uint64_t offset;      /* ip - start of symbol */
	const char *module;   /* path of the mapped file holding ip */
	uint64_t module_offset; /* ip relative to the module's load base */
	const char *build_id; /* hex build id of the module */
	const char *file;     /* source file, when debug info exists */
	int line;
	unsigned flags;       /* STB_FRAME_F_* */
};

/* How a stack was obtained. */
enum stb_trace_mode {
	STB_TRACE_NO_STACK = 0, /* created, ready-without-stack or destroyed: nothing to read */
	STB_TRACE_CONTEXT = 1,  /* ready/suspended: unwound from the saved context */
	STB_TRACE_SIGNAL = 2,   /* running: captured by a signal handler on its thread */
	STB_TRACE_SELF = 3,     /* the caller traced itself */
	STB_TRACE_BPF = 4,      /* running: captured by the BPF program (stb-bpf-loader) */
	STB_TRACE_SYSCALL = 5,  /* running but blocked in a system call on its thread:
				   sp/pc from /proc (stb-bpf-loader) */
	STB_TRACE_CORE = 6,     /* running when a core file was written: its thread's
				   registers there (stb-bpf-loader --core) */
};

/* Called for each frame in order; return non-zero to stop the walk there. */
typedef int (*stb_frame_fn)(const struct stb_frame *f, void *arg);

struct stb_trace_opts {
	unsigned max_depth;   /* frames to deliver at most, the runtime's own not counted;
	                         0 = 64 (at most 2048 unless runtime_frames). The walk
	                         stops soon after. */
	unsigned skip;        /* innermost frames to drop before counting */
	int no_symbols;       /* non-zero: leave symbol/module/file empty (faster) */
	int no_source;        /* non-zero: symbols but no file:line (no DWARF read) */
	int inline_frames;    /* non-zero: add STB_FRAME_F_INLINED frames */
	int timeout_ms;       /* 0 = the signal trace timeout (default 50 ms) */
	stb_frame_fn on_frame; /* optional */
	void *arg;
	int runtime_frames;   /* non-zero: also the runtime's own frames (stb_jump_stack,
	                         stb_sched_suspend, butex internals above the public call
	                         a bthread waits in, and the calls inlined into it;
	                         stb_task_entry, stb_ctx_trampoline below its function),
	                         hidden by default as in every report. Without them the
	                         frames are delivered once the walk is done */
};

struct stb_trace_info {
	bthread_t id;
	unsigned state;       /* enum stb_task_state (stb/abi.h) when read */
	unsigned mode;        /* enum stb_trace_mode */
	uint32_t tid;         /* kernel thread that ran it (running tasks, pthreads) */
	uint32_t nframes;     /* frames delivered */
	int truncated;        /* stopped by max_depth or the callback */
	int is_pthread;       /* a registered pthread */
	uint64_t held_ns;     /* how long the task was held (or interrupted) */
	uint64_t since_ns;    /* CLOCK_MONOTONIC when it last blocked, 0 if unknown */
	char name[64];        /* STB_ABI_NAME_LEN (stb/abi.h) */
	char error[128];      /* why a trace failed, empty on success */
};

/*
 * Traces bthread (or registered pthread) tid. Holds only that task, only while
 * its stack is copied (running tasks: while the signal handler copies it).
 * Frames go to frames[0 .. nframes-1] (frames may be NULL) and to
 * opts->on_frame; info (may be NULL) describes the task. opts NULL = defaults.
 * Thread-safe; may block up to the timeout (twice it for a running task whose
 * capture is asked for again). Returns the number of frames,
 * 0 for a task without a stack, or -errno: -ESRCH unknown or finished task,
 * -ETIMEDOUT no capture of a running task in time (asked twice: a handler can
 * be late on a busy machine; info->error says whether the signal is blocked
 * or ignored on its thread), -EPERM the trace signal's handler was replaced,
 * -EBUSY another tracer held the task all along, -ENOMEM. info->error
 * explains failures.
 */
STB_EXPORT int stb_trace(bthread_t tid, const struct stb_trace_opts *opts, struct stb_frame *frames,
			 size_t nframes, struct stb_trace_info *info);

/*
 * bRPC-style text of tid's stack, one line per frame, from the public call a
 * bthread waits in down to its function (the runtime's own frames hidden,
 * unless stb_set_trace_runtime_frames(1)):
 *   #0 0x00007f6bfa3a1791 bthread_usleep+0x101
 *   #1 0x000055d0c1a6b2a9 handler+0x19
 * A task without a stack gives one line "(no stack: <state>)". Always
 * NUL-terminates buf (when size > 0). Returns the length of the full text
 * (like snprintf: larger than size-1 means it was cut), or -errno as stb_trace.
 */
STB_EXPORT int bthread_stack_trace(bthread_t tid, char *buf, size_t size);

/*
 * Registers the calling pthread so that it can be traced like a bthread
 * (always "running": signal mode). Returns its id (the same on every call
 * from the same thread); 0 with errno set on failure. The registration ends
 * when the thread exits. Do not call it on a bthread (returns 0, EINVAL).
 */
STB_EXPORT bthread_t bthread_init_for_pthread_stack_trace(void);

/* Name of an enum stb_task_state value ("suspended", ...). */
STB_EXPORT const char *stb_state_name(unsigned state);

/* ---- output formats ---- */

/*
 * The formats of every stb report: stb_dump, the debug HTTP endpoint
 * (?format=), stb-bpf-loader (--format) and its profiler.
 */
enum stb_format {
	STB_FORMAT_TEXT = 0,    /* one section per task (or per group) */
	STB_FORMAT_FOLDED = 1,  /* folded stacks "state;root;...;leaf count" for flame
	                           graphs; identical lines summed (group is implied) */
	STB_FORMAT_PPROF = 2,   /* gzipped pprof profile.proto (binary: open out in "wb"),
	                           sample type bthreads/count, one sample per task with
	                           labels bthread_id, state, worker_tid, name (per group
	                           with its count when group is set); go tool pprof FILE */
	STB_FORMAT_JSON = 3,    /* the "stb-stacks/1" document of docs/json.md */
	STB_FORMAT_FLAMEGRAPH = 4, /* a self-contained interactive HTML flame graph of
	                              the folded stacks (split by state) */
};

/* Name of a format ("text", "folded", "pprof", "json", "flamegraph"), NULL if none.
 * Thread-safe. */
STB_EXPORT const char *stb_format_name(int format);

/* The format called name, or -EINVAL. Thread-safe. */
STB_EXPORT int stb_format_from_name(const char *name);

/* ---- dumps ---- */

struct stb_dump_opts {
	int group;            /* print each distinct stack (and wait kind) once with its
	                         count, times and ids */
	unsigned max_depth;   /* frames per stack, the runtime's own not counted; 0 = 64.
	                         The output counts the frames it leaves out. */
	unsigned state_mask;  /* 1u << state to include; 0 = all */
	int format;           /* enum stb_format */
	uint64_t stuck_ns;    /* only tasks stuck at least this long -- blocked on
	                         anything but an fd or a sleep, or running without a
	                         switch: the watchdog's meaning -- and the tasks they
	                         wait on; 0 = all */
	int all_ids;          /* grouped text: every member, a line each with its id, its
	                         name and, when the members' waits differ, its own wait
	                         (default: the first ids that fit and a count) */
	int runtime_frames;   /* non-zero: also the runtime's own frames (stb_jump_stack,
	                         stb_sched_suspend, butex internals above the API call a
	                         bthread waits in; stb_task_entry, stb_ctx_trampoline
	                         below its function), hidden by default in every format */
	int no_lines;         /* text: without the file:line of each frame and the calls
	                         inlined there (shown by default where the program has
	                         debug info); faster */
	int leaks;            /* non-zero: the leak view instead of stacks -- the
	                         bthreads by creation site (file:line of the
	                         bthread_start_* call), with count, oldest and median
	                         age and states; text or JSON ("stb-leaks/1") */
	int no_threads;       /* non-zero: leave out the section of every thread of the
	                         process (main, workers, the runtime's and other
	                         pthreads: name, tid, state, stack), which follows the
	                         tasks when neither state_mask nor stuck_ns selects */
};

/*
 * Writes the stacks of every live bthread and registered pthread to out,
 * after a header line (program, pid, time, tasks by state, table slots
 * used), with what each waits on (owners named) and what it holds that
 * others wait on, how long, who created it, and the deadlocks of the
 * selected tasks ("Found 1 deadlock:" in text, "deadlocks" in JSON;
 * docs/json.md). With state_mask or stuck_ns, the tasks a selected one waits
 * on are written too, after the others. Without them, every thread of the
 * process follows with its stack (unless no_threads: a blocked thread read
 * from /proc, a running one by a signal; "threads" in JSON). With leaks, the
 * leak view instead.
 * Each task is held only while its own stack is read; the program runs on.
 * opts NULL = defaults. Returns the number of tasks written (threads not
 * counted; leaks: of bthreads viewed), or -errno (-EINVAL: a format leaks
 * does not write).
 * Thread-safe; blocks for the duration of the dump.
 */
STB_EXPORT int stb_dump(FILE *out, const struct stb_dump_opts *opts);

/* ---- debug HTTP endpoint ---- */

/*
 * Starts the opt-in debug HTTP endpoint (like bRPC's builtin /bthreads pages)
 * on 127.0.0.1 only, port `port` (0 = a free port; *bound_port, when not
 * NULL, receives the port). Served by bthreads: one listener ("stb debug
 * http") and one bthread per connection, at most 16 at a time; HTTP/1.1, one
 * GET or HEAD per connection (Connection: close):
 *   /bthreads          one line per live task: id, name, state (and how long
 *                      it has been blocked, or the tid it runs on)
 *   /bthreads/<id>     that task's line; with ?st=1 its stack as well
 *   /bthreads/all      every stack, grouped by identical stack, with the count
 *                      and ids (the text of stb_dump with group = 1)
 *   /bthreads/leaks    the bthreads by creation site (stb_dump with leaks = 1)
 * text/plain by default; ?format=json gives application/json (schemas
 * "stb-tasks/1" for the lists, "stb-stacks/1" for stacks, as stb-bpf-loader's
 * --format json). Errors: 404 unknown path or no live task with that id, 400
 * malformed request, id or query value, 405 not GET/HEAD, 408 no request
 * within 5 s, 431 request head over 8 KiB. Stacks are taken like stb_trace
 * (each task held only while its stack is copied).
 * Thread-safe; does not block. Returns 0, -EALREADY (already running) or
 * -errno from socket/bind/listen (e.g. -EADDRINUSE) or from starting the
 * listener bthread (-ENOMEM).
 */
STB_EXPORT int stb_debug_http_start(uint16_t port, uint16_t *bound_port);

/*
 * Stops the endpoint started by stb_debug_http_start: stops accepting,
 * interrupts the connections being served and waits until all of its
 * bthreads have finished. Blocks the caller (bthread or pthread) for at most
 * the time of one stack collection; must not be called from a request of the
 * endpoint itself. Returns 0, or -ESRCH when the endpoint was not running.
 */
STB_EXPORT int stb_debug_http_stop(void);

/* ---- watchdog ---- */

/* What the watchdog found (stb_watchdog_fn). */
struct stb_watchdog_report {
	uint64_t threshold_ns; /* as given to stb_watchdog_start */
	uint64_t running;      /* bthreads that ran on a worker without a switch that long */
	uint64_t blocked;      /* tasks blocked that long (not on an fd, not sleeping);
	                          the holders shown with them are not counted */
	uint64_t longest_ns;   /* the longest time of any of them */
	const char *text;      /* the grouped report with stacks, NUL-terminated; valid
	                          during the call only */
	size_t len;            /* strlen(text) */
	uint64_t in_syscall;   /* of running: those blocked in a system call on their
	                          worker (a blocking read(), sleep(), a pthread mutex) */
};

/* Receives a watchdog report, on the watchdog's own thread. */
typedef void (*stb_watchdog_fn)(const struct stb_watchdog_report *report, void *arg);

/*
 * Starts the opt-in watchdog (also started at start-up by $STB_WATCHDOG=
 * SECONDS, reporting to stderr): a thread of its own that every
 * threshold/4 (10 ms .. 1 s) reads the task table and, when a bthread has
 * run on a worker without a switch for threshold_ns or longer (it starves
 * that worker's queue), or a task has been blocked that long on anything but
 * an fd or a sleep, writes one report of all of them, grouped, with their
 * stacks, the tasks they wait on (their holders, with what they hold) and
 * the deadlocks (the text of stb_dump with group set and stuck_ns =
 * threshold_ns): to fn(report, arg), or to stderr when fn is NULL.
 * Once per episode -- a task is reported again only after it moved and got
 * stuck anew -- and at most one report per max(threshold, 5 s). Nothing of
 * it runs on the runtime's paths; between checks its thread sleeps. fn must
 * not call stb_watchdog_stop. Thread-safe; does not block. Returns 0,
 * -EINVAL (threshold_ns below 10 ms or above one day), -EALREADY (running),
 * or -errno (the runtime or the thread could not start).
 */
STB_EXPORT int stb_watchdog_start(uint64_t threshold_ns, stb_watchdog_fn fn, void *arg);

/*
 * Stops the watchdog and waits for its thread (at most the report being
 * written). Returns 0, -ESRCH (not running) or -EDEADLK (called from its
 * callback). Thread-safe; blocks.
 */
STB_EXPORT int stb_watchdog_stop(void);

/* ---- statistics ---- */

struct stb_stats {
	uint64_t untraceable;     /* bthreads created beyond the table capacity */
	uint64_t gate_waits;      /* times a task waited at the STB gate */
	uint64_t gate_wait_ns;    /* total time waited there */
	uint64_t gate_giveups;    /* leases broken because the tracer was late or dead */
	uint64_t traces;          /* stb_trace calls that returned frames */
	uint64_t signal_captures; /* running tasks captured by the signal handler */
	uint64_t signal_timeouts; /* signal captures that timed out */
	uint64_t retries;         /* copies discarded because the task moved */
};

/* Fills *out. Returns 0. Thread-safe. */
STB_EXPORT int stb_get_stats(struct stb_stats *out);

STB_END_DECLS

#endif /* STB_STB_STB_H */
