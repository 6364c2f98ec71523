/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A traced process as stb-bpf-loader sees it: its shared task table (found
 * among its file descriptors, duplicated with pidfd_getfd, checked and mapped
 * here a window at a time) and its memory, read with process_vm_readv (the
 * memory backend of the trace driver). No ptrace stop, no signal. The target
 * is not trusted: docs/abi.md, "Reading what the target wrote".
 */
#ifndef STB_LOADER_TARGET_H
#define STB_LOADER_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf_prog.h"
#include "collect/collect.h"
#include "stb/abi.h"
#include "table/driver.h"
#include "table/tview.h"

/* Task slots mapped at once (4 MiB; two windows at most): the table of a
 * target is never mapped whole when it is larger, and never beyond the slots
 * in use. The pages read stay in the loader's RSS while mapped: 32 MiB
 * windows held 52 MiB of a million tasks' table (docs/benchmarks.md). */
#define STB_TARGET_WINDOW_SLOTS (1u << 14)
/* Slots mapped beyond slot_hwm, for tasks started meanwhile. */
#define STB_TARGET_SLOT_SLACK 1024u

struct stb_target {
	pid_t pid;
	int pidfd;
	int table_fd;                 /* our fd of the target's map / memfd */
	int target_fd;                /* its number in the target */
	bool memfd;                   /* the backing is a memfd */
	bool holes;                   /* its never-written ranges can be found (lseek) */
	struct stb_tview_info info;   /* the checked header (never re-read) */
	const struct stb_abi_header *hdr; /* the live header: counters only */
	size_t hdr_size;              /* bytes mapped at hdr (header and workers) */
	/* The window of task entries mapped read-write (leases are written),
	 * and the one before it, kept until the next move (tview.h). */
	void *win, *win_prev;
	size_t win_size, win_prev_size;
	uint32_t win_lo, win_hi;      /* slots [win_lo, win_hi) */
	uint32_t extent;              /* slots wanted (hwm + slack), for new windows */
	uint32_t data_lo, data_hi;    /* memfd: slots known to hold data */
	char comm[64];                /* /proc/PID/comm as read (escaped on output) */
};

/*
 * Finds, checks and maps the stb task table of process pid: a memfd must be
 * sealed against shrinking and as large as its header says (fstat), a BPF
 * map of the right type and size (its own size); the header must pass
 * stb_tview_check_header. On failure returns NULL, sets errno and writes a
 * message naming the cause and the fix into err[errlen]: ESRCH no such
 * process; EACCES/EPERM no ptrace access to it (root or CAP_SYS_PTRACE);
 * ENOENT not a stb runtime; EPROTO a table this loader cannot read safely
 * (ABI mismatch, unsealed memfd, wrong sizes). May block on /proc reads.
 */
struct stb_target *stb_target_open(pid_t pid, char *err, size_t errlen);

/* Unmaps and closes everything; accepts NULL. */
void stb_target_close(struct stb_target *t);

/*
 * Task entry of slot s (< info.capacity), mapped read-write, or NULL when
 * the slot cannot be mapped. Valid until the next stb_target_task or
 * stb_target_src entry call on t that moves the window twice (a window holds
 * STB_TARGET_WINDOW_SLOTS slots; tview.h). Not thread-safe.
 */
struct stb_abi_task *stb_target_task(struct stb_target *t, uint32_t slot);

/*
 * The slots in use now (slot_hwm, clamped to the capacity: *clamped set when
 * the header claimed more) as a scan source; entries come a window at a
 * time, and for a memfd the never-written ranges are skipped without being
 * touched (they would cost memory). The source is valid while t is.
 */
struct stb_tview_src stb_target_src(struct stb_target *t, bool *clamped);

/* The target's worker entries (which bthreads run where: abi.h), valid while
 * t is. */
struct stb_tview_wsrc stb_target_workers(const struct stb_target *t);

/* Worker count now (clamped to STB_ABI_MAX_WORKERS). */
uint32_t stb_target_nworkers(const struct stb_target *t, bool *clamped);

/*
 * Reads len bytes at addr of the target (stb_hold_read_fn). Returns 0,
 * -ESRCH when the process is gone, -EFAULT for unmapped memory, -errno.
 */
int stb_target_read(void *target, uint64_t addr, void *dst, size_t len);

/* Non-zero until the process has exited (a zombie counts as exited). */
int stb_target_alive(const struct stb_target *t);

/* The memory backend of the trace driver for t (process_vm_readv). */
void stb_target_mem(struct stb_target *t, struct stb_mem *mem);

/* The entry of worker w in the mapped header region, NULL when there is none. */
const struct stb_abi_worker *stb_target_worker(const struct stb_target *t, uint32_t w);

/* t as a source of the collector (collect/collect.h): its table, its
 * workers, owner words read with mem (stb_target_mem's); src->drv and
 * src->unw are the caller's to set. Valid while t and mem are. */
void stb_target_collect_src(struct stb_target *t, const struct stb_mem *mem,
			    struct stb_collect_src *src);

/* BPF program options for target t's table (backing, fd, address) in `mode`
 * (enum stb_record_mode); everything else zero (defaults). */
void stb_target_bpf_prog_opts(const struct stb_target *t, unsigned mode,
			      struct stb_bpf_prog_opts *co);

#endif /* STB_LOADER_TARGET_H */
