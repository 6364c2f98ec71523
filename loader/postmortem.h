/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A core file as stb-bpf-loader's target (--core): the task table found in
 * the core's memory and checked like a live one (tview.h), its entries read
 * a window at a time, the memory backend of the trace driver (frozen: no
 * lease, no waiting), the capture backend of running tasks (their threads'
 * registers in NT_PRSTATUS), and the module registry built from NT_FILE
 * (files under --sysroot, --exe for the main program, each checked by build
 * id against the core). The core is untrusted: see corefile.h.
 */
#ifndef STB_LOADER_POSTMORTEM_H
#define STB_LOADER_POSTMORTEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collect/collect.h"
#include "corefile.h"
#include "loader.h"
#include "report/model.h"
#include "stb/abi.h"
#include "table/driver.h"
#include "table/tview.h"

/* Task entries read from the core at once (a power of two: windows are aligned). */
#define STB_POSTMORTEM_WINDOW_SLOTS 4096u
#define STB_POSTMORTEM_MAX_NOTES 6u

struct stb_mods;
struct stb_unw_proc;
struct stb_sym;

struct stb_postmortem {
	struct stb_corefile *core;
	const char *path;
	struct stb_tview_info info;    /* the checked header */
	struct stb_abi_header hdr;     /* as dumped (counters) */
	struct stb_abi_worker *workers; /* STB_ABI_MAX_WORKERS entries as dumped (zero: not in it) */
	struct stb_abi_task *win;      /* entries [win_lo, win_hi) (an aligned window) */
	struct stb_abi_task *win_prev; /* the window before, kept until the next move */
	uint32_t win_lo, win_hi;
	bool win_single;               /* the window could not be read whole: entry by entry */
	struct stb_abi_task one;       /* stb_postmortem_task */
	uint32_t nslots;               /* slots scanned */
	uint64_t missing;              /* entries that are not in the core */
	bool again;                    /* a second scan: missing is counted already */
	struct stb_mods *mods;
	struct stb_unw_proc *unw;
	struct stb_sym *sym;
	struct stb_mem mem;
	struct stb_capture_ops ops;
	char comm[17];
	/* The core's fatal signal (stb_postmortem_crash). */
	struct stb_report_signal signal;
	bool has_signal;
	bool signal_pthread; /* signal.task is a registered pthread */
	uint64_t nostack, ntraced; /* tasks whose stack is not in the core, of those traced */
	struct stb_report_task *order; /* the report's tasks, what took it first */
	struct stb_report_more sig_more; /* order[0]'s: what took it */
	struct stb_frame *thread_frames; /* a thread that is no task: its frames */
	char thread_err[256];
	char notes[STB_POSTMORTEM_MAX_NOTES][384];
	unsigned nnotes;
};

/*
 * Opens core file o->core (with o->exe, o->sysroot), finds and checks its
 * task table and builds its module registry. Returns NULL with errno and a
 * message naming the cause and the fix in err[errlen]: the file cannot be
 * read; not a core (ENOEXEC); a core of another architecture or too
 * malformed (EPROTO); no task table in it (ENOENT: not a stb runtime, a
 * table in a BPF map, or a coredump_filter without shared memory, each
 * told apart where the core allows); a table this loader cannot read
 * (EPROTO). May block on I/O.
 */
struct stb_postmortem *stb_postmortem_open(const struct stb_loader_opts *o, char *err,
					   size_t errlen);

/* Releases everything; accepts NULL. */
void stb_postmortem_close(struct stb_postmortem *pm);

/* Entry of slot (< info.capacity) as dumped, or NULL when it is not in the
 * core. Valid until the next call on pm. Not thread-safe. */
struct stb_abi_task *stb_postmortem_task(struct stb_postmortem *pm, uint32_t slot);

/* The slots in use (slot_hwm clamped to the capacity: *clamped) as a scan
 * source; entries come a window at a time. Valid while pm is. */
struct stb_tview_src stb_postmortem_src(struct stb_postmortem *pm, bool *clamped);

/* The core's worker entries (as dumped): which bthreads ran where. */
struct stb_tview_wsrc stb_postmortem_workers(const struct stb_postmortem *pm);

/* The same slots as the last stb_postmortem_src, for a second scan (the
 * deadlock search): entries missing from the core are not counted again. */
struct stb_tview_src stb_postmortem_src_again(struct stb_postmortem *pm);

/* pm as a source of the collector (collect/collect.h): the table as dumped,
 * its workers, its memory for owner words; src->drv and src->unw are the
 * caller's to set. Valid while pm is. */
void stb_postmortem_collect_src(struct stb_postmortem *pm, struct stb_collect_src *src);

/* Adds what the report must say about the core (its signal, modules that
 * differ or are missing, a truncated file, entries not in it) to meta;
 * the strings live in pm. */
void stb_postmortem_notes(struct stb_postmortem *pm, struct stb_report_meta *meta);

/*
 * What took the core's fatal signal, first: tasks[n] (as collected) with the
 * task that ran on the thread the signal was delivered to moved first and
 * flagged (signal), or, when no task ran there, that thread itself added
 * first -- unwound from its registers (NT_PRSTATUS) and the core's memory,
 * keep frames at most, a record with is_thread -- when thread is true (the
 * run selects running tasks and names no ids). *out and *nout: the report's
 * tasks (tasks and n when the core was not written on a fatal signal, or
 * nothing is added), valid while pm and tasks are. Also counts the tasks
 * whose stack is not in the core (-ENODATA), for a note naming the fix.
 * Call before stb_postmortem_notes. 0, or -ENOMEM (*out = tasks).
 */
int stb_postmortem_crash(struct stb_postmortem *pm, struct stb_report_task *tasks, size_t n,
			 bool thread, unsigned keep, struct stb_report_task **out, size_t *nout);

/* The core's fatal signal after stb_postmortem_crash (report meta), NULL: none. */
const struct stb_report_signal *stb_postmortem_signal(const struct stb_postmortem *pm);

/* CLOCK_MONOTONIC of the core's last monitor pass (the time of the core,
 * within STB_ABI_MONITOR_PERIOD_NS), 0 when unknown. */
uint64_t stb_postmortem_now(const struct stb_postmortem *pm);

#endif /* STB_LOADER_POSTMORTEM_H */
