/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of the in-process tracer share: tracing this process --
 * its driver, unwinder and symbolizer (trace.c) -- and this process as a
 * source of the collector, for stb_dump, the debug endpoint and the watchdog
 * (dump.c); the start-up of the dump signal and of the watchdog, called by
 * stb_tracer_attach (core/internal.h).
 */
#ifndef STB_RUNTIME_TRACER_TRACE_H
#define STB_RUNTIME_TRACER_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "collect/collect.h"
#include "stb/stb.h"

struct stb_slot;
struct stb_sym;

/* Installs the dump-on-signal handler when $STB_DUMP_SIGNAL is set (attach). */
void stb_dump_signal_init(void);

/* Starts the watchdog when $STB_WATCHDOG is set (attach). */
void stb_watchdog_env_init(void);

/* The caller's frame, as if the calling function had returned (frame pointers). */
#define STB_CALLER_FRAME(ip, sp, bp)                                                     \
	do {                                                                             \
		uint64_t *fp_ = __builtin_frame_address(0);                             \
		(ip) = (uint64_t)(uintptr_t)__builtin_return_address(0);                \
		(sp) = (uint64_t)(uintptr_t)(fp_ + 2);                                  \
		(bp) = fp_[0];                                                           \
	} while (0)

/* ---- tracing this process (trace.c) ---- */

/*
 * The in-process tracer's side of a trace or of a whole collection: a
 * capture buffer held meanwhile, the driver of this process -- direct reads
 * under leases (batched), signal captures of running tasks, and the calling
 * task traced from its caller's frame (ip, sp, bp: STB_CALLER_FRAME of the
 * public function) -- and the unwinder and symbolizer of this process.
 * open: 0, or -errno with err[errlen] set (no capture buffer free by
 * deadline, no unwinder); close accepts a closed or failed one. The struct
 * must not move while open (drv points into it). One thread. A signal
 * capture that got no reply by its deadline is asked for once more, for
 * timeout_ms (open sets the configured timeout; a caller may change it).
 */
struct stb_self_tracer {
	struct stb_slot *slot;
	uint64_t self_id, ip, sp, bp;
	int timeout_ms;
	struct stb_capture_ops ops;
	struct stb_driver drv;
	struct stb_unw_proc *unw;
	struct stb_sym *sym;
};
int stb_self_tracer_open(struct stb_self_tracer *st, uint64_t self_ip, uint64_t self_sp,
			 uint64_t self_bp, uint64_t deadline, char *err, size_t errlen);
void stb_self_tracer_close(struct stb_self_tracer *st);

/* This process's memory read with checks (process_vm_readv): an address
 * that is not mapped is -EFAULT, never a fault. */
extern const struct stb_mem stb_self_checked_mem;

/* Counts a trace made outside stb_trace (a collection's) in stb_get_stats. */
void stb_trace_count(int rc, const struct stb_capture *capt);

/* The signal capture's timeout (STB_SIGNAL_TRACE_TIMEOUT_MS). */
int stb_trace_timeout_ms(void);

/* Symbolizes ip of this process into f (symbol, offset, module, file, line). */
void stb_trace_symbolize(uint64_t ip, int flags, struct stb_frame *f); /* STB_SYM_* flags */

/* The tracer's unwinder and symbolizer of this process (set up on first use;
 * NULL when that failed), for the reports' symbols and mappings. */
void stb_trace_self_tools(struct stb_unw_proc **unw, struct stb_sym **sym);

/* ---- collections of this process (dump.c) ---- */

/* This process as a source of the collector, without its driver (set by
 * stb_self_collect; the watchdog's checks trace nothing): every slot,
 * published or private, owner words read with checks. */
void stb_self_source(struct stb_collect_src *src);

/* This process's worker entries (the table's, or private ones without it):
 * which bthreads run where (abi.h). */
struct stb_tview_wsrc stb_self_wsrc(void);

struct stb_self_opts {
	bthread_t only;       /* just that task; 0: every live one */
	unsigned depth;       /* frames per stack at most; 0 = 64 */
	unsigned state_mask;  /* 1u << state to include; 0 = all */
	bool stacks;          /* trace each task (else: the table fields only) */
	uint64_t stuck_ns;    /* only tasks stuck this long (stb_collect_stuck) */
	bool deadlocks;       /* search the whole table's wait-for graph too */
	bool holders;         /* the tasks selected ones wait on, and names (collect.h) */
	bool threads;         /* every thread of the process too (collect.h) */
	uint64_t self_ip, self_sp, self_bp; /* the caller's frame, for the calling task */
};

/* A collection of this process: its tasks and deadlocks are res's, its
 * interned stacks the collector's (a report's stackset). */
struct stb_self_set {
	struct stb_collector *c;
	struct stb_self_tracer st;
	struct stb_collect_result res;
};

/*
 * Collects every live bthread and registered pthread as o says, through the
 * collector: with why each is where it is (report/model.h: wait, times,
 * creator), with o->holders the tasks the selected ones wait on and the
 * names of those they mention (collect.h), stacks traced without symbols (the report
 * symbolizes with stb_trace_self_tools' symbolizer), stb_report_keep(depth)
 * frames kept and the rest up to STB_REPORT_WALK_MAX counted into beyond.
 * Returns 0 (set filled; free it with stb_self_set_free), -ENOMEM, or
 * -ESRCH when o->only is not a live task (or not one of the selection).
 */
int stb_self_collect(const struct stb_self_opts *o, struct stb_self_set *set);
void stb_self_set_free(struct stb_self_set *set);

/*
 * A report of set by producer ("stb_dump", ...) to out: r gets the set's
 * stacks, deadlocks and names, this process's symbols, now_ns; *meta (which
 * r points to) the process, its program name, the time, the census and the
 * table's capacity. The caller sets the rest of r.
 */
void stb_self_report(struct stb_report *r, struct stb_report_meta *meta, FILE *out,
		     const char *producer, const struct stb_self_set *set);

/* The leak view of set (collected without stacks) by producer to out in
 * format (text or JSON). Returns the number of bthreads viewed, or -errno. */
int stb_self_leaks(FILE *out, const char *producer, const struct stb_self_set *set, int format);

#endif /* STB_RUNTIME_TRACER_TRACE_H */
