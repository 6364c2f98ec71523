/* SPDX-License-Identifier: Apache-2.0 OR GPL-2.0-only */
/*
 * The shared task table: the one memory layout that the bthread runtime writes
 * and that the in-process tracer, the BPF capture program and stb-bpf-loader
 * read. It lives in a BPF array map (BPF_F_MMAPABLE) or in a memfd with the
 * identical layout. Included by user-space C and by BPF C (after vmlinux.h).
 */
#ifndef STB_STB_ABI_H
#define STB_STB_ABI_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/*
 * Layout (all integers little-endian, x86_64):
 *
 *   The table is an array of STB_ABI_ENTRY_SIZE-byte entries; as a BPF map it
 *   is BPF_MAP_TYPE_ARRAY, key_size 4, value_size STB_ABI_ENTRY_SIZE,
 *   max_entries STB_ABI_TASK_BASE + task_capacity, and element i of the map
 *   is entry i of the table.
 *
 *   entry 0                         struct stb_abi_header
 *   entries 1 .. 31                 reserved (zero; the header region is 8 KiB)
 *   entry STB_ABI_WORKER_BASE + w   struct stb_abi_worker for worker w
 *   entry STB_ABI_TASK_BASE + s     struct stb_abi_task for task slot s
 *
 *   A bthread_t is (version << 32) | slot. Slots below task_capacity are
 *   published here; a task whose slot is >= task_capacity keeps the same
 *   struct stb_abi_task in private memory and is untraceable from outside.
 *
 * Task word (stb_abi_task.word): bits 0..7 state (enum stb_task_state),
 * bits 32..63 run sequence number, incremented every time a run of the task
 * ends (the store that follows STB_TASK_SUSPENDING carries the new one).
 *
 * Worker word (stb_abi_worker.current): the bthread_t of the task running on
 * that worker, with STB_ABI_CURRENT_SWITCHING set while the worker switches to
 * it (not yet on its stack); 0 when it runs none. Bit 31 of a bthread_t (the
 * slot's top bit) is never set: slots stay below STB_ABI_MAX_SLOTS.
 *
 * Running (ABI version 3): the switch path writes only the lines its worker
 * owns at that moment -- the worker's entry and the entry of the task that
 * leaves -- never the entry of the task it switches to. So a bthread's word
 * never says ABOUT_TO_RUN or RUNNING: a task whose word says READY or
 * READY_NO_STACK (STB_ABI_RUNNABLE) is running when a worker's current names
 * it, about to run when one names it with STB_ABI_CURRENT_SWITCHING, and
 * queued otherwise. RUNNING in a word is a registered pthread's
 * (STB_ABI_TASK_F_PTHREAD), which stays RUNNING while it is registered.
 *
 * Trace word (stb_abi_task.trace): 0 when nobody traces the task, otherwise
 * (lease deadline >> STB_ABI_LEASE_SHIFT) << 16 | tracer id (16 bits, never 0),
 * built and taken apart by STB_ABI_LEASE_ENCODE / _DEADLINE / _TRACER.
 * The deadline is CLOCK_MONOTONIC nanoseconds.
 *
 * Invariants:
 * - The runtime is the only writer of every field except stb_abi_task.trace.
 *   It writes word and current with plain release stores (no
 *   read-modify-write) and checks trace with a plain load at the two gates:
 *   before a worker names a task in current (the switch to it) and before
 *   the task's word says SUSPENDING (the switch away from it). If trace is
 *   non-zero the task waits there until trace is 0 again or the lease
 *   deadline has passed; then it clears trace with a CAS (the lease is
 *   broken) and counts the give-up in header.gate_giveups.
 * - The order of one switch of worker W from task X to task Y (either may be
 *   W's scheduler, which no current names): X's gate; X.word = SUSPENDING
 *   with X's seq; Y's gate; W.current = Y | SWITCHING; the stack switch,
 *   which writes X's sp/ip/bp; W.current = Y; then X.word = READY,
 *   SUSPENDED or DESTROYED with seq + 1 (and X's wait block before it).
 *   Hence (x86-TSO keeps a thread's stores in order): a worker names a task
 *   before that task's stack changes, and a task's word leaves the state
 *   and seq of a run before any worker stops naming it.
 * - Tracers (in-process, loader) acquire a task by CAS of trace from 0 to
 *   their lease word, and release it by CAS back to 0. They never write any
 *   other field of a task entry, nor any worker entry.
 * - sp/ip/bp are written by the context switch while the task leaves the CPU
 *   (state SUSPENDING); they are valid when state is READY or SUSPENDED
 *   and no worker names the task, and then the stack bytes from sp to
 *   stack_hi are stable as long as seq does not change and no worker names
 *   it. A tracer validates a stack copy so: read word (w1); check that no
 *   worker's current names the task; read sp/ip/bp and copy; check again
 *   that no worker names it; read word (w2). Same seq and READY or
 *   SUSPENDED both times means the copy is consistent: a run that changed a
 *   byte the copy read was named before that byte changed, so the second
 *   check sees it named -- or, if it ended already, its SUSPENDING (stored
 *   before the worker named another task) is seen by w2.
 * - id, name, flags, tag, creator_id/creator_ip/creator_tid and created_ns
 *   are written before the state becomes CREATED (while it still says UNUSED, or
 *   DESTROYED for the slot's previous occupant) and stay until DESTROYED; a
 *   slot in state UNUSED or DESTROYED may be reused for a new id at any time,
 *   and its other fields then say nothing about any task.
 * - stack_lo/stack_hi are valid from ABOUT_TO_RUN of the first run until
 *   DESTROYED.
 * - worker/tid are a registered pthread's (worker STB_ABI_MAX_WORKERS or more,
 *   tid its thread): a bthread's entry does not say where it runs; the
 *   worker entry that names it does (its index and tid).
 * - The wait block (since_ns, wait_word, wait_object, wait_owner,
 *   wait_deadline, wait_extra) is written while the task is SUSPENDING, before
 *   the release store of SUSPENDED, and describes that suspension: it is
 *   valid while the state is SUSPENDED and seq is unchanged (read word before
 *   and after, as for a stack copy). A READY task keeps the block of its last
 *   wait (wait_word's kind says STB_WAIT_YIELD after a yield). A registered
 *   pthread (STB_ABI_TASK_F_PTHREAD) stays RUNNING while it blocks in a
 *   bthread call: its wait block is valid while the kind is not
 *   STB_WAIT_NONE (reset to NONE when the call returns).
 * - Owners (wait_owner, and the owner words below) are encoded as
 *   STB_ABI_OWNER_*: 0 none or unknown; a bthread_t (registered pthreads
 *   have one too); or STB_ABI_OWNER_TID_BIT | kernel tid for a pthread that
 *   is not registered. For the kinds with an owner (MUTEX, RWLOCK_*, ID)
 *   wait_extra is the address of the owner word: a u64 in the target that
 *   holds the current owner (0 = free). wait_owner is the owner seen when
 *   the task blocked; a tracer re-reads the owner word before it reports a
 *   wait-for edge (the graph moves).
 * - execq is written by the task itself while it runs: the address of the
 *   execution queue it consumes now (bthread/execution_queue.h: its
 *   consumer bthread, a resident pthread consumer, or a thread running a
 *   task in place), 0 when none; reset to 0 when the slot gets a new
 *   occupant. At that address the target keeps a struct stb_abi_execq:
 *   pushed is written by the queue's producers, taken by its consumer, and
 *   pushed - taken is the number of tasks queued (a reader re-reads them
 *   from the target; they may be torn against each other: a hint). The
 *   EXECQ wait kind names the same struct as its object.
 * - A worker entry's first line (current, tid, state, tag, yields) is
 *   written by that worker alone; its second line (run_since_ns, run_seq) by
 *   the runtime's monitor thread alone (never on the switch path):
 *   run_since_ns is when the monitor first saw task current with run
 *   sequence run_seq (the seq its word carries while it runs) on that
 *   worker, so a task that runs without a switch since then has run at least
 *   now - run_since_ns. They are at most STB_ABI_MONITOR_PERIOD_NS late, 0
 *   when unknown. yields is bumped (plain store) when a bthread_yield finds
 *   nothing else to run and returns without a switch; the monitor takes a
 *   change of it for a new run (the task yielded: it starves no one).
 *   state says RUNNING while current names a task, SCHEDULING in the
 *   worker's own loop, PARKED asleep; it is not written at a switch from one
 *   task to another.
 * - header.magic is written last at creation; a reader that sees the magic
 *   and STB_ABI_VERSION may trust the rest of the header -- but a reader in
 *   another process trusts nothing: every size, count, state and kind is
 *   range-checked before use (docs/abi.md, "Reading what the target wrote").
 */

#define STB_ABI_MAGIC          0x314b534154425453ULL /* "STBTASK1" */
#define STB_ABI_VERSION        3u
#define STB_ABI_ENTRY_SIZE     256u
#define STB_ABI_HEADER_ENTRIES 32u   /* the header region: 8 KiB */
#define STB_ABI_MAX_WORKERS    1024u  /* bRPC's BTHREAD_MAX_CONCURRENCY: every worker has one */
#define STB_ABI_WORKER_BASE    STB_ABI_HEADER_ENTRIES
#define STB_ABI_TASK_BASE      (STB_ABI_WORKER_BASE + STB_ABI_MAX_WORKERS)
#define STB_ABI_NAME_LEN       64u
/* The monitor refreshes the workers' run_seq/run_since_ns at least this often
 * while they run tasks. */
#define STB_ABI_MONITOR_PERIOD_NS 10000000u
#define STB_ABI_LEASE_SHIFT    10u   /* lease deadline unit: 1024 ns */
/* Task slots published by default: a memfd table costs memory only for the
 * slots written (sparse), a BPF map all of its entries at once (kernel
 * memory), so a map gets fewer. */
#define STB_ABI_DEFAULT_CAPACITY 1048576u
#define STB_ABI_DEFAULT_MAP_CAPACITY 65536u
#define STB_ABI_MAX_CAPACITY   (1u << 22)
/* Slots (published or not) stay below this: bit 31 of an id is free for
 * STB_ABI_CURRENT_SWITCHING. */
#define STB_ABI_MAX_SLOTS      (1u << 22)
/* Name of the BPF map and of the memfd that hold the table. */
#define STB_ABI_TABLE_NAME     "stb_tasks"

#define STB_ABI_SLOT(id)       ((__u32)((id) & 0xffffffffu))
#define STB_ABI_STATE(word)    ((__u32)((word) & 0xffu))
#define STB_ABI_SEQ(word)      ((__u32)((word) >> 32))
/* A bthread's word in one of these states may belong to a running task: a
 * worker's current says (see "Running" above). */
#define STB_ABI_RUNNABLE(state) ((state) == STB_TASK_READY_NO_STACK || (state) == STB_TASK_READY)

/* stb_abi_worker.current */
#define STB_ABI_CURRENT_SWITCHING 0x80000000u /* switching to the task, not on its stack yet */
#define STB_ABI_CURRENT_ID(c)     ((__u64)(c) & ~(__u64)STB_ABI_CURRENT_SWITCHING)
#define STB_ABI_CURRENT_IS_SWITCHING(c) (((c) & STB_ABI_CURRENT_SWITCHING) != 0)

/* Where the table lives. */
enum stb_abi_backing {
	STB_ABI_BACKING_BPF_MAP = 1,
	STB_ABI_BACKING_MEMFD = 2,
};

enum stb_task_state {
	STB_TASK_UNUSED = 0,          /* slot never used */
	STB_TASK_CREATED = 1,         /* id allocated, not queued yet */
	STB_TASK_READY_NO_STACK = 2,  /* queued, never ran, no stack yet */
	STB_TASK_READY = 3,           /* queued, context saved */
	STB_TASK_ABOUT_TO_RUN = 4,    /* a worker is switching to it (derived, v3) */
	STB_TASK_RUNNING = 5,         /* on a worker (derived, v3); a registered pthread */
	STB_TASK_SUSPENDING = 6,      /* a worker is switching away from it */
	STB_TASK_SUSPENDED = 7,       /* blocked, context saved */
	STB_TASK_DESTROYED = 8,       /* finished; stack released */
	STB_TASK_NSTATES = 9,
};

/* stb_abi_task.flags */
#define STB_ABI_TASK_F_PTHREAD      0x1u /* a registered pthread, not a bthread */
#define STB_ABI_TASK_F_WORKER_STACK 0x2u /* a bthread running on its worker's stack */

/* stb_abi_worker.state */
enum stb_worker_state {
	STB_WORKER_STOPPED = 0,
	STB_WORKER_SCHEDULING = 1, /* in the scheduler loop, no task */
	STB_WORKER_RUNNING = 2,    /* running (or switching to) the task current names */
	STB_WORKER_PARKED = 3,     /* asleep waiting for work */
};

/*
 * What a task waits on (stb_abi_task.wait_word bits 0..7). Readers must
 * range-check it against STB_WAIT_NKINDS.
 */
enum stb_wait_kind {
	STB_WAIT_NONE = 0,      /* not waiting, or unknown */
	STB_WAIT_BUTEX = 1,     /* butex_wait: object = the butex */
	STB_WAIT_MUTEX = 2,     /* bthread_mutex_lock: object = the bthread_mutex_t */
	STB_WAIT_COND = 3,      /* bthread_cond_wait: object = the cond, extra = its mutex */
	STB_WAIT_RWLOCK_RD = 4, /* bthread_rwlock_rdlock: object = the rwlock, owner = its writer */
	STB_WAIT_RWLOCK_WR = 5, /* bthread_rwlock_wrlock: object = the rwlock, owner = its writer */
	STB_WAIT_SEM = 6,       /* bthread_sem_wait: object = the semaphore */
	STB_WAIT_BARRIER = 7,   /* bthread_barrier_wait: object = the barrier */
	STB_WAIT_ONCE = 8,      /* bthread_once: object = the once control */
	STB_WAIT_SLEEP = 9,     /* bthread_usleep: deadline = its end */
	STB_WAIT_FD = 10,       /* bthread_fd_wait: fd and events in wait_word */
	STB_WAIT_JOIN = 11,     /* bthread_join: owner = the joined bthread (bthread_list_join:
	                           object = the list) */
	STB_WAIT_ID = 12,       /* bthread_id_lock/join: object = the id's value, owner = its locker */
	STB_WAIT_TIMER = 13,    /* a timed wait's end: waiting for its running timer
	                           callback, object = the timer's id */
	STB_WAIT_YIELD = 14,    /* ready after bthread_yield (not blocked) */
	STB_WAIT_COUNTDOWN = 15, /* CountdownEvent::wait: object = the event */
	STB_WAIT_EXECQ = 16,    /* execution_queue_join, or an idle pthread consumer:
	                           object = the queue (struct stb_abi_execq) */
	STB_WAIT_NKINDS = 17,
};

/* stb_abi_task.wait_word: kind | flags << 8 | events << 16 | fd << 32 */
#define STB_ABI_WAIT_F_TIMED     0x1u /* wait_deadline is set */
#define STB_ABI_WAIT_WORD(kind, flags, events, fd)                                         \
	((__u64)((kind) & 0xffu) | (__u64)((flags) & 0xffu) << 8 |                          \
	 (__u64)((events) & 0xffffu) << 16 | (__u64)(__u32)(fd) << 32)
#define STB_ABI_WAIT_KIND(w)   ((__u32)((w) & 0xffu))
#define STB_ABI_WAIT_FLAGS(w)  ((__u32)(((w) >> 8) & 0xffu))
#define STB_ABI_WAIT_EVENTS(w) ((__u32)(((w) >> 16) & 0xffffu))
#define STB_ABI_WAIT_FD(w)     ((__s32)((w) >> 32))

/* Owner values (see the invariants). */
#define STB_ABI_OWNER_TID_BIT    (1ull << 63)
#define STB_ABI_OWNER_TID(tid)   (STB_ABI_OWNER_TID_BIT | (__u64)(__u32)(tid))
#define STB_ABI_OWNER_IS_TID(o)  (((o) & STB_ABI_OWNER_TID_BIT) != 0)
#define STB_ABI_OWNER_TID_OF(o)  ((__u32)((o) & 0xffffffffu))

/* stb_abi_header.flags */
#define STB_ABI_F_TRACER 0x1u /* runtime built with tracer support */

struct stb_abi_header {
	__u64 magic;            /* STB_ABI_MAGIC, written last */
	__u32 abi_version;      /* STB_ABI_VERSION */
	__u32 entry_size;       /* STB_ABI_ENTRY_SIZE */
	__u32 header_entries;   /* STB_ABI_HEADER_ENTRIES */
	__u32 max_workers;      /* STB_ABI_MAX_WORKERS */
	__u32 task_capacity;    /* task slots published in this table */
	__u32 nworkers;         /* workers started so far */
	__u32 pid;              /* owner process (getpid() at creation) */
	__u32 backing;          /* enum stb_abi_backing */
	__u64 table_addr;       /* address of the table in the owner process */
	__u64 table_size;       /* bytes */
	__u32 trace_signal;     /* signal used by in-process signal mode */
	__u32 flags;            /* STB_ABI_F_* */
	__u64 slot_hwm;         /* task slots ever used: scan [0, slot_hwm) */
	__u64 untraceable;      /* tasks created beyond task_capacity */
	__u64 gate_waits;       /* times a task waited at a gate */
	__u64 gate_wait_ns;     /* total time spent waiting at gates */
	__u64 gate_giveups;     /* leases the runtime broke after their deadline */
	__u64 created_ns;       /* CLOCK_MONOTONIC at table creation */
	__u64 monitor_ns;       /* CLOCK_MONOTONIC of the monitor's last pass, 0 = none */
	__u8 reserved[256 - 120];
};

struct stb_abi_worker {
	/* Line 0: written by this worker alone. */
	__u64 current;          /* STB_ABI_CURRENT_*: bthread_t running here, 0 when none */
	__u32 tid;              /* kernel thread id of the worker */
	__u32 state;            /* enum stb_worker_state */
	__u32 tag;              /* worker pool (bthread_tag_t) */
	__u32 yields;           /* bthread_yield calls that found nothing else to run */
	__u8 reserved0[64 - 24];
	/* Line 1: written by the monitor thread alone. */
	__u64 run_since_ns;     /* monitor: CLOCK_MONOTONIC when first seen, 0 = unknown */
	__u32 run_seq;          /* monitor: run sequence of current when first seen */
	__u32 reserved1;
	__u8 reserved[256 - 80];
};

struct stb_abi_task {
	/* Line 0: written on the switch path while the task leaves its worker. */
	__u64 id;               /* bthread_t of the occupant */
	__u64 word;             /* seq << 32 | state */
	__u64 trace;            /* tracer lease word, see above */
	__u64 sp;               /* saved stack pointer (after return) */
	__u64 ip;               /* saved instruction pointer */
	__u64 bp;               /* saved frame pointer */
	__u64 stack_lo;         /* lowest usable stack address */
	__u64 stack_hi;         /* one past the highest address its frames use */
	/* Line 1: a registered pthread's thread, and why it waits (the wait block). */
	__u32 worker;           /* registered pthread: >= STB_ABI_MAX_WORKERS */
	__u32 tid;              /* registered pthread: its kernel tid */
	__u64 since_ns;         /* CLOCK_MONOTONIC_COARSE when it last blocked */
	__u64 wait_word;        /* STB_ABI_WAIT_WORD(kind, flags, events, fd) */
	__u64 wait_object;      /* address of what it waits on, 0 = none */
	__u64 wait_owner;       /* who holds it (STB_ABI_OWNER_*), 0 = unknown */
	__u64 wait_deadline;    /* CLOCK_MONOTONIC ns when the wait times out, 0 = none */
	__u64 wait_extra;       /* COND: the mutex; MUTEX, RWLOCK_*, ID: address of the owner word */
	__u32 flags;            /* STB_ABI_TASK_F_* */
	__u32 tag;              /* worker pool it was started in (bthread_tag_t) */
	/* Lines 2-3: identity, written before CREATED. */
	char name[STB_ABI_NAME_LEN]; /* NUL-terminated task name */
	__u64 creator_id;       /* bthread (or registered pthread) that started it, 0 = other */
	__u64 creator_ip;       /* return address of the bthread_start_* call */
	__u32 creator_tid;      /* kernel tid of the thread that started it */
	__u32 reserved0;
	/* Line 3: execq written by the task while it runs; created_ns when it is created. */
	__u64 execq;            /* execution queue it consumes now (struct stb_abi_execq), 0 = none */
	__u64 created_ns;       /* CLOCK_MONOTONIC_COARSE when it was started, 0 = unknown */
	__u8 reserved[256 - 232];
};

/*
 * The head of an execution queue in the target's memory (see execq above):
 * its producers and its consumer count on separate cache lines.
 */
struct stb_abi_execq {
	__u64 pushed;           /* tasks pushed (stop excluded) */
	__u8 pad0[56];
	__u64 taken;            /* tasks its consumer went past (run or cancelled) */
	__u8 pad1[56];
};

/*
 * The frame the context switch pushes: it ends at the published sp, so it
 * starts at sp - STB_ABI_SWITCH_FRAME. The published sp is the value rsp has
 * after the switch function returns; ret is the published ip.
 */
struct stb_abi_switch_frame {
	__u32 mxcsr;            /* SSE control and status */
	__u16 x87cw;            /* x87 control word */
	__u16 pad;
	__u64 r15;
	__u64 r14;
	__u64 r13;
	__u64 r12;
	__u64 rbx;
	__u64 rbp;
	__u64 ret;              /* return address into the switched-out code */
};
#define STB_ABI_SWITCH_FRAME   64

/* The lease word of stb_abi_task.trace (see above). */
#define STB_ABI_LEASE_ENCODE(deadline_ns, tracer)                                          \
	((((__u64)(deadline_ns) >> STB_ABI_LEASE_SHIFT) << 16) | ((__u64)(tracer) & 0xffffu))
#define STB_ABI_LEASE_DEADLINE(word) (((__u64)(word) >> 16) << STB_ABI_LEASE_SHIFT)
#define STB_ABI_LEASE_TRACER(word)   ((__u32)((word) & 0xffffu))

#if defined(__cplusplus)
#define STB_ABI_ASSERT_(c, m) static_assert(c, m)
#else
#define STB_ABI_ASSERT_(c, m) _Static_assert(c, m)
#endif
STB_ABI_ASSERT_(sizeof(struct stb_abi_header) == STB_ABI_ENTRY_SIZE, "header is one entry");
STB_ABI_ASSERT_(sizeof(struct stb_abi_worker) == STB_ABI_ENTRY_SIZE, "worker is one entry");
STB_ABI_ASSERT_(sizeof(struct stb_abi_task) == STB_ABI_ENTRY_SIZE, "task is one entry");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_header, task_capacity) == 24, "header layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_header, table_addr) == 40, "header layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_header, slot_hwm) == 64, "header layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_header, created_ns) == 104, "header layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_header, monitor_ns) == 112, "header layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_worker, tid) == 8, "worker layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_worker, state) == 12, "worker layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_worker, tag) == 16, "worker layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_worker, yields) == 20, "worker layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_worker, run_since_ns) == 64,
		"worker layout: the monitor's fields on a line of their own");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_worker, run_seq) == 72, "worker layout");
STB_ABI_ASSERT_(STB_ABI_MAX_CAPACITY <= STB_ABI_MAX_SLOTS &&
		STB_ABI_MAX_SLOTS <= STB_ABI_CURRENT_SWITCHING, "slots leave bit 31 of an id free");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, word) == 8, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, trace) == 16, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, sp) == 24, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, ip) == 32, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, bp) == 40, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, stack_lo) == 48, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, stack_hi) == 56, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, worker) == 64, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, tid) == 68, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, since_ns) == 72, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, wait_word) == 80, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, wait_extra) == 112, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, flags) == 120, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, name) == 128, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, creator_id) == 192, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, creator_tid) == 208, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, created_ns) == 224, "task layout");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_task, execq) == 216, "task layout");
STB_ABI_ASSERT_(sizeof(struct stb_abi_execq) == 128, "execution queue head");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_execq, taken) == 64, "execution queue head");
STB_ABI_ASSERT_(STB_ABI_TASK_BASE * STB_ABI_ENTRY_SIZE % 4096 == 0, "tasks start on a page");
STB_ABI_ASSERT_(sizeof(struct stb_abi_switch_frame) == STB_ABI_SWITCH_FRAME, "switch frame");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_switch_frame, x87cw) == 4, "switch frame");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_switch_frame, r15) == 8, "switch frame");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_switch_frame, r14) == 16, "switch frame");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_switch_frame, r13) == 24, "switch frame");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_switch_frame, r12) == 32, "switch frame");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_switch_frame, rbx) == 40, "switch frame");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_switch_frame, rbp) == 48, "switch frame");
STB_ABI_ASSERT_(__builtin_offsetof(struct stb_abi_switch_frame, ret) == 56, "switch frame");

/* Byte offset of worker w / task slot s from the start of the table. */
#define STB_ABI_WORKER_OFFSET(w) ((__u64)(STB_ABI_WORKER_BASE + (w)) * STB_ABI_ENTRY_SIZE)
#define STB_ABI_TASK_OFFSET(s)   ((__u64)(STB_ABI_TASK_BASE + (s)) * STB_ABI_ENTRY_SIZE)
#define STB_ABI_TABLE_SIZE(cap)  ((__u64)(STB_ABI_TASK_BASE + (cap)) * STB_ABI_ENTRY_SIZE)

#endif /* STB_STB_ABI_H */
