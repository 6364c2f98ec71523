/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of the in-process tracer share: one trace with the
 * caller's frame and the tracer's unwinder and symbolizer of this process
 * (trace.c); the task collection of stb_dump, the debug endpoint and the
 * watchdog (dump.c); the start-up of the dump signal and of the watchdog,
 * called by stb_tracer_attach (core/internal.h).
 */
#ifndef STB_RUNTIME_TRACER_TRACE_H
#define STB_RUNTIME_TRACER_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stb/stb.h"
#include "table/deadlock.h"
#include "table/tview.h"

/* Installs the dump-on-signal handler when $STB_DUMP_SIGNAL is set (attach). */
void stb_dump_signal_init(void);

/* The caller's frame, as if the calling function had returned (frame pointers). */
#define STB_CALLER_FRAME(ip, sp, bp)                                                     \
	do {                                                                             \
		uint64_t *fp_ = __builtin_frame_address(0);                             \
		(ip) = (uint64_t)(uintptr_t)__builtin_return_address(0);                \
		(sp) = (uint64_t)(uintptr_t)(fp_ + 2);                                  \
		(bp) = fp_[0];                                                           \
	} while (0)

/* stb_trace with the frame of the public caller for self-traces; memo
 * (NULL: none; the caller's alone, walkmemo.h) serves walks of stacks alike. */
struct stb_walkmemo;
int stb_trace_impl(bthread_t tid, const struct stb_trace_opts *opts, struct stb_frame *frames,
		   size_t nframes, struct stb_trace_info *info, uint64_t self_ip, uint64_t self_sp,
		   uint64_t self_bp, struct stb_walkmemo *memo);

/* Symbolizes ip of this process into f (symbol, offset, module, file, line). */
void stb_trace_symbolize(uint64_t ip, int flags, struct stb_frame *f); /* STB_SYM_* flags */

/* The tracer's unwinder and symbolizer of this process (set up on first use;
 * NULL when that failed), for the pprof and folded dumps (runtime/stacks/report/pprof.h). */
struct stb_unw_proc;
struct stb_sym;
void stb_trace_self_tools(struct stb_unw_proc **unw, struct stb_sym **sym);

/* ---- task collection shared by stb_dump and the debug HTTP endpoint (dump.c) ---- */

struct stb_report_task;

/* Tasks collected by stb_collect_tasks; frames is NULL without stacks. */
struct stb_task_set {
	struct stb_report_task *tasks;
	struct stb_frame *frames;     /* all tasks' frames, one after the other */
	size_t n;
	struct stb_deadlocks deadlocks; /* with opts.deadlocks */
	bool searched;                /* deadlocks was filled */
};

struct stb_collect_opts {
	bthread_t only;       /* just that task; 0: every live one */
	unsigned depth;       /* frames per stack at most; 0 = 64 */
	unsigned state_mask;  /* 1u << state to include; 0 = all */
	bool stacks;          /* trace each task (else: the table fields only) */
	uint64_t stuck_ns;    /* only tasks blocked, or running without a switch, this long */
	bool stuck_no_io;     /* with stuck_ns: fd waits and sleeps are not stuck */
	bool deadlocks;       /* search the whole table's deadlocks too */
	uint64_t self_ip, self_sp, self_bp; /* the caller's frame, for the calling task */
};

/*
 * Collects every live bthread and registered pthread as o says, with why
 * each is where it is (report.h: wait, times, creator). Stacks are traced
 * without symbols (the report symbolizes with stb_trace_self_tools'
 * symbolizer), keeping stb_report_keep(depth) frames (depth 0 = 64) and
 * counting the rest up to STB_REPORT_WALK_MAX into beyond. Returns 0 (set
 * filled; free it with stb_task_set_free), -ENOMEM, or -ESRCH when o->only is
 * not a live task.
 */
int stb_collect_tasks(const struct stb_collect_opts *o, struct stb_task_set *set);
void stb_task_set_free(struct stb_task_set *set);

/* Is d stuck as o says (stuck_ns, stuck_no_io) at now (CLOCK_MONOTONIC)? */
bool stb_collect_stuck(const struct stb_collect_opts *o, const struct stb_report_task *d,
		       uint64_t now);

/* The in-process table as a scan source (every slot, published or private). */
struct stb_tview_src stb_self_src(uint32_t *first);
/* This process's worker entries (the table's, or private ones without it). */
struct stb_tview_wsrc stb_self_wsrc(void);

/* Memory of this process read with checks (a mutex that was destroyed...). */
extern const struct stb_mem stb_self_checked_mem;

/* Starts the watchdog when $STB_WATCHDOG is set (attach). */
void stb_watchdog_env_init(void);

#endif /* STB_RUNTIME_TRACER_TRACE_H */
