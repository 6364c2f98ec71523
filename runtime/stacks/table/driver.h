/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The trace driver: how one task of a task table is traced, for every tracer
 * (the in-process stb_trace, stb-bpf-loader, its profiler's off-CPU pass,
 * the core-file reader). It owns the lease, the state machine
 * of abi.h, the retries, the validated copy of a saved context, the call of a
 * capture backend for running tasks, the deadline -- and then the unwinding of
 * what it got into a frame sink. The target is reached through two small
 * backends:
 *
 *  - memory (struct stb_mem): reads the target's memory. In process: a
 *    direct read (it can fault: copies need a lease); from outside:
 *    process_vm_readv; from a core file: its segments (the target is frozen).
 *  - capture (struct stb_capture_ops): takes the registers and stack of a
 *    task that is RUNNING. In process: a signal to its thread; the loader:
 *    /proc/PID/task/TID/syscall for a thread blocked in a system call, else
 *    the BPF program; a core file: the thread's NT_PRSTATUS registers.
 */
#ifndef STB_RUNTIME_STACKS_TABLE_DRIVER_H
#define STB_RUNTIME_STACKS_TABLE_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stb/abi.h"
#include "symbols/frames.h"
#include "symbols/walkmemo.h"
#include "table/hold.h"
#include "unwind/unwind.h"

/* stb_mem.flags */
#define STB_MEM_F_FAULTS                                       \
	0x1u /* read() can fault this process (a direct read): \
		a stack is copied only under a lease */
#define STB_MEM_F_FROZEN                                         \
	0x2u /* the target does not run (a core file): no lease, \
		no waiting for a task to settle */

/* One piece of a stb_mem.read_many: len bytes at target address addr into dst. */
struct stb_mem_seg {
	uint64_t addr;
	void *dst;
	size_t len;
};

#define STB_MEM_SEGS_MAX 16u

struct stb_mem {
	/* Copies len bytes at target address addr into dst. Returns 0, -EFAULT
	 * (not mapped), -ESRCH (the target is gone) or -errno. */
	int (*read)(void *ctx, uint64_t addr, void *dst, size_t len);
	/* Copies n <= STB_MEM_SEGS_MAX segments with as few system calls as it
	 * can. Returns how many of the first segments were copied completely
	 * (the others: read them one by one to learn why). NULL: not offered. */
	unsigned (*read_many)(void *ctx, const struct stb_mem_seg *segs, unsigned n);
	/* false once the target has exited; NULL: it never does. */
	bool (*alive)(void *ctx);
	void *ctx;
	unsigned flags; /* STB_MEM_F_* */
};

struct stb_capture;

/* Unwinds a capture that needs more than its registers and copy (e.g. a BPF
 * record's frame-pointer chain): same contract as stb_unw_walk. */
typedef int (*stb_capture_unwind_fn)(void *ctx, struct stb_unw_proc *unw,
				      const struct stb_capture *s, unsigned max_depth,
				      stb_unw_frame_fn fn, void *arg);

/* Why a capture's stack copy ends before the stack's top (stb_capture.cut):
 * the frames past it are missing, or come from a frame-pointer chain that
 * nothing checked. */
enum stb_cut {
	STB_CUT_NONE = 0,  /* the copy reaches the top of the stack */
	STB_CUT_COPY,      /* the capture copies at most so much (its buffer) */
	STB_CUT_MOVED,     /* the part past the first copy changed while it was read */
	STB_CUT_UNREADABLE, /* the part past the first copy could not be read */
	STB_CUT_NKINDS,
};

/* What a trace got: the registers of the innermost frame and a stack copy. */
struct stb_capture {
	struct stb_regs regs;
	struct stb_stack_copy copy;
	unsigned mode;     /* enum stb_trace_mode (STB_TRACE_NO_STACK: nothing to unwind) */
	unsigned state;    /* the task's state when it was taken */
	uint32_t seq;      /* and its run sequence (abi.h) */
	uint32_t tid;      /* its thread (running captures) */
	uint64_t held_ns;  /* how long it was held (context) or interrupted (capture) */
	uint64_t lease_ns; /* how long its lease was held in all */
	unsigned retries;  /* attempts discarded because the task moved */
	bool target_gone;  /* the trace failed because the target exited */
	unsigned cut;      /* enum stb_cut: the copy ends before the stack's top */
	/* A running task whose thread was blocked in a system call when it was
	 * captured (/proc showed the call, and the capture is of that call):
	 * the call's number (x86_64) and its first argument. */
	bool in_syscall;
	uint32_t syscall_nr;
	uint64_t syscall_arg0;
	/* A thread of a core caught between its creation and its first
	 * instruction (loader/corefile.h: starting): regs are its first, it
	 * has no stack yet, and its one frame is regs.ip. */
	bool starting;
	stb_capture_unwind_fn unwind; /* NULL: stb_unw_walk of regs and copy */
	void *unwind_ctx;
};

/* Where the driver found a running task (abi.h, "Running"). */
struct stb_run_at {
	unsigned state;  /* STB_TASK_RUNNING, ABOUT_TO_RUN or SUSPENDING (a switch) */
	uint32_t worker; /* the worker whose current names it; >= STB_ABI_MAX_WORKERS:
			    a registered pthread, or not known (a task a core froze
			    in SUSPENDING) */
	uint32_t tid;    /* that worker's (or the pthread's) kernel tid, 0: not known */
	const struct stb_tview_wsrc *workers; /* the table's worker entries */
};

/* True when the task of entry p (id, word w1 when it was found at `at`) has
 * moved since: its word changed, or (a bthread) that worker names it no
 * more. For capture backends, which then give -EAGAIN. */
bool stb_run_at_moved(const struct stb_run_at *at, const struct stb_abi_task *p, uint64_t id,
		      uint64_t w1);

/*
 * Capture backend. capture() takes task id of entry p while it runs (w1 is
 * the word read; `at` says where and how it runs: RUNNING -- or, from frozen
 * memory (a core), ABOUT_TO_RUN or SUSPENDING: the backend then unwinds the
 * task from its worker's registers only when they are on its stack, else it
 * fails with err set; the driver holds no lease meanwhile: the capture stops
 * the task, if at all, only while it copies). The stack goes into buf[cap] or
 * into the backend's own storage. Returns 0 with *capt filled (regs, copy,
 * mode, tid, held_ns; unwind when needed), -EAGAIN when the task was not
 * running there any more (the driver reads its state again), -ETIMEDOUT when
 * it was not captured by deadline, or another -errno; err[errlen] says why on
 * failure. May block until deadline.
 */
struct stb_capture_ops {
	int (*capture)(void *ctx, struct stb_abi_task *p, uint64_t id, uint64_t w1,
		       const struct stb_run_at *at, uint64_t deadline, void *buf, size_t cap,
		       struct stb_capture *capt, char *err, size_t errlen);
	/* Thread tid of the target, which is no task (nothing of the table
	 * describes it): blocked in a system call, from /proc and its stack;
	 * running, as capture() takes a running task; from a core, its
	 * registers there. Same contract as capture() (-EAGAIN: try again);
	 * NULL: threads are not captured. */
	int (*capture_thread)(void *ctx, uint32_t tid, uint64_t deadline, void *buf, size_t cap,
			      struct stb_capture *capt, char *err, size_t errlen);
	void *ctx;
};

/* struct stb_driver.flags */
#define STB_DRIVER_F_LEASE 0x1u /* take the task's lease (a live table mapped writable) */
#define STB_DRIVER_F_NO_WAIT                                     \
	0x2u /* do not wait for a task to settle: a task that is \
		running or switching gives -EAGAIN (the          \
		profiler's off-CPU pass); a moved copy is tried once more */

/* One trace's configuration (cheap: set up on the stack for each trace). */
struct stb_driver {
	const struct stb_mem *mem;
	const struct stb_capture_ops *capture; /* NULL: running tasks are not captured */
	const char *no_capture;                /* then: why ("BPF unavailable: ..."); may be NULL */
	unsigned flags;                        /* STB_DRIVER_F_* */
	void *buf;                             /* stack copies: buf[cap] */
	size_t cap;
	/* The table's worker entries: which bthreads run (abi.h). Without
	 * them (w NULL) every bthread looks off-CPU: only for frozen memory
	 * that has none, and for tests. */
	struct stb_tview_wsrc workers;
};

#if defined(STB_TEST_HOOKS)
/* Test builds only (the driver compiled with STB_TEST_HOOKS): called right
 * after every lease is taken, as a stuck tracer would hold it; NULL: none. */
extern void (*stb_driver_test_hold)(void *arg);
extern void *stb_driver_test_hold_arg;
#endif

/*
 * Traces task id, whose entry is p, until deadline (CLOCK_MONOTONIC ns):
 * takes its lease (STB_DRIVER_F_LEASE), reads its state and, as abi.h says,
 * copies its saved context (ready, suspended), calls the capture backend
 * (running), or finds nothing to read (created, ready without stack); waits
 * and retries while it switches or moves. Nothing the entry says is trusted:
 * states are range-checked, stack bounds validated, every loop bounded by
 * the deadline. Returns 0 with *capt filled, or -errno with err[errlen] set:
 * -ESRCH the task finished (its slot holds another task or none; with
 * capt->target_gone: the target exited), -EBUSY another tracer held it the
 * whole time, -ETIMEDOUT it did not settle (or was not captured) in time,
 * -EPROTO its entry is inconsistent (state out of range, stack pointer
 * outside its stack), -ENOTSUP running but no capture backend, -EAGAIN (only
 * with STB_DRIVER_F_NO_WAIT) not off-CPU now, or the read's -errno.
 * Thread-safe for distinct buffers; may block until deadline.
 */
int stb_driver_trace(const struct stb_driver *d, struct stb_abi_task *p, uint64_t id,
		     uint64_t deadline, struct stb_capture *capt, char *err, size_t errlen);

/* One task of stb_driver_trace_many: the arguments and results of one
 * stb_driver_trace, and the driver's own state meanwhile. */
struct stb_driver_job {
	struct stb_abi_task *p;   /* in: its entry */
	uint64_t id;              /* in */
	uint64_t deadline;        /* in: CLOCK_MONOTONIC ns, the trace ends by then... */
	uint64_t timeout_ns;      /* in: ...and this long after it starts (0: no more) */
	char *err;                /* in: err[errlen] says why on failure */
	size_t errlen;
	void *arg;                /* in: the caller's */
	struct stb_capture capt; /* out */
	int rc;                   /* out: what stb_driver_trace would return */
	/* the driver's */
	uint64_t w1, lease, held_from, batch_ns;
	struct stb_hold_plan plan;
	bool copied;
};

/* Called once per job of stb_driver_trace_many when its capture is ready;
 * job->capt's copy is valid only during the call (it is in the driver's buf). */
typedef void (*stb_driver_done_fn)(void *arg, struct stb_driver_job *job);

#define STB_DRIVER_MANY_MAX STB_MEM_SEGS_MAX

/*
 * Traces jobs[0..n) (n <= STB_DRIVER_MANY_MAX; more are traced in turns) as
 * stb_driver_trace would trace each, calling done(arg, job) for every job
 * once, in an unspecified order. With a lease (STB_DRIVER_F_LEASE) and a
 * memory that offers read_many, the ready and suspended tasks whose leases
 * are free are held together for one batched copy of their stacks (packed
 * into buf, each validated as hold.h says); every other task, and every one
 * whose batched copy does not validate, is traced alone by stb_driver_trace.
 * Thread-safe for distinct buffers; may block until the jobs' deadlines.
 * It is stb_driver_copy_many into d->buf, then stb_driver_finish_many.
 */
void stb_driver_trace_many(const struct stb_driver *d, struct stb_driver_job *jobs, unsigned n,
			   stb_driver_done_fn done, void *arg);

/*
 * The two halves of stb_driver_trace_many, for a caller that copies one
 * batch while it unwinds another (collect/copier.h). stb_driver_copy_many
 * makes the batched copies of jobs[0..n) (any n; STB_MEM_SEGS_MAX tasks
 * held per read) into buf[cap] and marks each job copied or not; it touches
 * only the jobs, buf and the target (thread-safe for distinct jobs and
 * buffers). stb_driver_finish_many then calls done() for each copied job
 * (its copy is in that buf, which must still hold it) and traces every
 * other job alone with d->buf, calling done() for it too.
 */
void stb_driver_copy_many(const struct stb_driver *d, struct stb_driver_job *jobs, unsigned n,
			  void *buf, size_t cap);
void stb_driver_finish_many(const struct stb_driver *d, struct stb_driver_job *jobs, unsigned n,
			    stb_driver_done_fn done, void *arg);

/*
 * Unwinds capt with unw into sink (at most stb_frame_sink_depth(sink)
 * physical frames; the sink ends the walk at its limit or deadline). Only
 * the copy is read, never the live stack. memo (NULL: none) answers a copy
 * it has seen the like of without walking it (walkmemo.h). Returns the
 * number of logical frames delivered (sink->n) or -errno from the unwinder.
 */
int stb_capture_unwind(struct stb_unw_proc *unw, struct stb_walkmemo *memo,
			const struct stb_capture *capt, struct stb_frame_sink *sink);

#endif /* STB_RUNTIME_STACKS_TABLE_DRIVER_H */
