/* SPDX-License-Identifier: Apache-2.0 */
/*
 * User-space driver of the BPF capture program (bpf/stb_record.bpf.c): loads
 * it for one target process, keeps one cpu-clock perf event per worker thread,
 * arms an event for one capture (or all of them for sampling) and reads the
 * records from the ring buffer by polling. Used by stb-bpf-loader.
 */
#ifndef STB_LOADER_BPF_PROG_H
#define STB_LOADER_BPF_PROG_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <linux/types.h>
#include <stb/abi.h>

#include "../bpf/record.h"

/* One loaded capture program for one target process. Opaque. */
struct stb_bpf_prog;

/* How a request is withdrawn once its record exists. */
enum stb_bpf_prog_disarm {
	STB_BPF_PROG_DISARM_AUTO = 0, /* SELF on kernels >= 6.10, else USER */
	STB_BPF_PROG_DISARM_SELF = 1, /* event armed with PERF_EVENT_IOC_REFRESH(1): the
	                                sample that produces the record disables it */
	STB_BPF_PROG_DISARM_USER = 2, /* event enabled until stb_bpf_prog_request() disables it */
};

struct stb_bpf_prog_opts {
	__u32 mode;          /* enum stb_record_mode; 0 means CAPTURE */
	__u32 backing;       /* STB_ABI_BACKING_BPF_MAP or STB_ABI_BACKING_MEMFD */
	__u32 task_capacity; /* the table's capacity as the caller checked it (its
	                        header: table/tview.h), which is then not read
	                        again; 0: the table is read and checked here */
	int table_fd;        /* BPF_MAP: this process's fd of the target's table map
	                        (borrowed: the library keeps its own duplicate) */
	__u64 table_addr;    /* MEMFD: the table's address in the target
	                        (header.table_addr) */
	__u64 period_ns;     /* cpu-clock sample period; 0: 20 us for CAPTURE,
	                        10 ms for SAMPLE. The kernel's minimum is 10 us. */
	__u32 ringbuf_bytes; /* ring buffer size, a power of two >= 4 records;
	                        0: 256 KiB (CAPTURE), 4 MiB (SAMPLE) */
	__u32 disarm;        /* enum stb_bpf_prog_disarm */
	__u32 spin_us;       /* stb_bpf_prog_request() busy-polls this long before it
	                        polls every 50 us; 0: 50 us. Keep it short: when
	                        the loader shares a CPU with the worker, spinning
	                        delays the worker and so the sample. */
	bool sample_stack;   /* SAMPLE: copy the stack into every record */
	bool on_demand;      /* CAPTURE: open a worker's perf event only for the
	                        duration of each stb_bpf_prog_request. A disabled event
	                        that stays attached costs its thread ~0.6 us per
	                        kernel context switch; on demand it costs nothing
	                        between captures but two IPIs per capture. */
};

/* Where the time of one stb_bpf_prog_request() went (CLOCK_MONOTONIC ns; the
 * record's time_ns is on the same clock). */
struct stb_bpf_prog_timing {
	__u64 arm_ns;  /* just before the worker's event was enabled */
	__u64 seen_ns; /* when the record was read from the ring buffer (0: none) */
	__u32 polls;   /* ring-buffer polls made */
};

struct stb_bpf_prog_stats {
	/* From bpf_prog_info; zero unless run-time statistics are enabled
	 * (stb_bpf_prog_stats_enable() or sysctl kernel.bpf_stats_enabled=1). */
	__u64 run_time_ns;      /* total time spent in the program */
	__u64 run_cnt;          /* runs counted while statistics were enabled */
	__u64 recursion_misses; /* runs skipped because a BPF program was active */
	/* The program's own counters (always on). */
	__u64 runs;     /* samples delivered to the program */
	__u64 idle;     /* CAPTURE: sample with no request armed for its worker */
	__u64 mismatch; /* armed, but the requested task was not RUNNING there */
	__u64 records;  /* records submitted */
	__u64 rb_full;  /* records lost because the ring buffer was full */
	__u64 read_err; /* table entries the program could not read */
	/* Library side. */
	__u64 stale;    /* records dropped: no request waiting for their tag */
};

/*
 * Loads the capture program for target process pid, reading the target's task
 * table as opts->backing says; no worker events yet (stb_bpf_prog_set_worker,
 * stb_bpf_prog_sync_workers). Checks the table header (magic, version, entry
 * size). Needs CAP_BPF and CAP_PERFMON (or root); may block briefly (program
 * load). Returns a new object owned by the caller (stb_bpf_prog_close), or NULL
 * with errno: EINVAL bad options, EPERM/EACCES missing privileges, ESRCH target
 * gone, EPROTO table header not (yet) valid, ENOMEM, or libbpf's error.
 */
struct stb_bpf_prog *stb_bpf_prog_open(pid_t pid, const struct stb_bpf_prog_opts *opts);

/* Detaches every event and frees c. Accepts NULL. Not concurrent with any
 * other call on c. */
void stb_bpf_prog_close(struct stb_bpf_prog *c);

/*
 * Makes request slot `worker` correspond to thread tid of the target (slots
 * below STB_ABI_MAX_WORKERS are workers; the STB_RECORD_PTHREAD_SLOTS above
 * them are for registered pthreads, matched by the task entry's tid): opens a
 * disabled cpu-clock event on tid and links the program to it (cookie =
 * worker), replacing the worker's previous event if tid changed; tid 0 removes
 * it. With opts.on_demand it only records tid. In SAMPLE mode while sampling,
 * the new event is enabled. Not
 * thread-safe (one caller per c at a time); does not block. Returns 0,
 * -EINVAL, -ESRCH (no such thread in the target), -EPERM/-EACCES, or another
 * -errno from perf_event_open/bpf.
 */
int stb_bpf_prog_set_worker(struct stb_bpf_prog *c, unsigned int worker, pid_t tid);

/*
 * Reads header.nworkers (clamped to STB_ABI_MAX_WORKERS) and each worker's
 * tid from the target's table and calls stb_bpf_prog_set_worker for every
 * worker whose tid changed (workers whose thread is gone are removed). Call it when the target may have started
 * workers. Not thread-safe. Returns the number of workers with an event, or
 * -errno (-EPROTO: header invalid).
 */
int stb_bpf_prog_sync_workers(struct stb_bpf_prog *c);

/*
 * Captures bthread id while it runs on worker `worker`: arms the worker's
 * request and event, polls the ring buffer (without wakeups) until the record
 * arrives or timeout_us passed, then disarms. On success *out holds the record
 * (header plus out->stack_size stack bytes; the rest of out->stack is
 * unspecified). timing may be NULL. CAPTURE mode only; not thread-safe; blocks
 * up to timeout_us (plus a few ioctls). Returns 0, -ETIMEDOUT (the task was
 * not RUNNING on that worker on a sample in the window, e.g. it was blocked
 * or ran elsewhere), -ESRCH (the worker thread is gone), -ENODEV (no event for
 * that worker), -EINVAL, or -errno of an ioctl.
 */
int stb_bpf_prog_request(struct stb_bpf_prog *c, unsigned int worker, __u64 id,
		     unsigned int timeout_us, struct stb_record *out,
		     struct stb_bpf_prog_timing *timing);

/*
 * Captures thread tid of the target, which is no task, while it runs: as
 * stb_bpf_prog_request on pthread slot `slot` (>= STB_ABI_MAX_WORKERS, its
 * event opened on tid with stb_bpf_prog_set_worker), matched against the
 * sampled thread's tid and process instead of a table entry; the stack is
 * copied from sp to the first page that cannot be read (its top is not
 * known). Same returns.
 */
int stb_bpf_prog_request_thread(struct stb_bpf_prog *c, unsigned int slot, pid_t tid,
				unsigned int timeout_us, struct stb_record *out,
				struct stb_bpf_prog_timing *timing);

/* Called by stb_bpf_prog_sample_poll for each record; size is the record's size
 * (STB_RECORD_HDR_SIZE when rec->flags has STB_RECORD_F_NO_STACK).
 * rec is only valid during the call. A non-zero return stops the poll. */
typedef int (*stb_bpf_prog_sample_fn)(void *arg, const struct stb_record *rec,
				     size_t size);

/* SAMPLE mode: enables / disables the events of all workers. Not thread-safe.
 * Return 0 or -errno (of the first failing ioctl; the others are still done). */
int stb_bpf_prog_sample_start(struct stb_bpf_prog *c);
int stb_bpf_prog_sample_stop(struct stb_bpf_prog *c);

/*
 * SAMPLE mode: calls fn for every record in the ring buffer, without
 * blocking. Not thread-safe. Returns the number of records consumed, fn's
 * non-zero return value if it stopped the poll, or -errno.
 */
int stb_bpf_prog_sample_poll(struct stb_bpf_prog *c, stb_bpf_prog_sample_fn fn, void *arg);

/*
 * Enables BPF run-time statistics (BPF_ENABLE_STATS) for as long as c lives.
 * They cost every BPF program on the system two clock reads per run. Returns
 * 0 or -errno (-EPERM without CAP_SYS_ADMIN). Not thread-safe.
 */
int stb_bpf_prog_stats_enable(struct stb_bpf_prog *c);

/* Reads the statistics into *out. Thread-safe with respect to the program;
 * does not block. Returns 0 or -errno. */
int stb_bpf_prog_stats_read(const struct stb_bpf_prog *c, struct stb_bpf_prog_stats *out);

/*
 * Duplicates file descriptor target_fd of process pid into this process
 * (pidfd_open + pidfd_getfd), e.g. the target's table map. Needs
 * PTRACE_MODE_ATTACH_REALCREDS on the target (root, or same user with
 * ptrace_scope allowing it). Returns a new O_CLOEXEC fd owned by the caller,
 * or -errno (-ESRCH process gone, -EBADF no such fd, -EPERM).
 */
int stb_bpf_prog_dup_target_fd(pid_t pid, int target_fd);

/* A static explanation of err (negative errno) returned by this library, for
 * messages. Thread-safe. */
const char *stb_bpf_prog_strerror(int err);

/* Whether libbpf's own messages (warnings, the verifier's log) go to standard
 * error: only when verbose, since the loader explains a missing privilege or
 * a failed load once, in its own words; never its debug messages. Call
 * before stb_bpf_prog_open. Not thread-safe. */
void stb_bpf_prog_log(bool verbose);

#endif /* STB_LOADER_BPF_PROG_H */
