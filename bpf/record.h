/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The record that the BPF program (bpf/stb_record.bpf.c) submits through
 * its ring buffer, and the constants both sides agree on. Included by BPF C
 * (after vmlinux.h) and by user space (loader/bpf_prog.c and its users).
 */
#ifndef STB_BPF_RECORD_H
#define STB_BPF_RECORD_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/*
 * Stack copy: from the user sp upwards, one bpf_probe_read_user per page (a
 * read that spans a non-resident page fails whole), at most
 * STB_RECORD_STACK_MAX bytes and never past the task's stack_hi. The copy
 * has constant-offset page slots: the first (partial) page is copied to
 * offset 0 and page k >= 1 to offset (first + (k - 1) * 4096), so a full
 * record holds between STB_RECORD_STACK_MAX - 4095 and STB_RECORD_STACK_MAX
 * bytes when the stack is deep enough. The 128-byte red zone below sp is
 * copied too, into red_zone[] right before stack[] (red_zone_len bytes at its
 * end, 0 if unreadable): sampled in an epilogue, frame 0's CFI still finds
 * the registers just popped there, as in the in-process signal mode.
 */
#define STB_RECORD_PAGE_SIZE   4096u
#define STB_RECORD_STACK_PAGES 8u
#define STB_RECORD_STACK_MAX   (STB_RECORD_STACK_PAGES * STB_RECORD_PAGE_SIZE)
#define STB_RECORD_RED_ZONE    128u
/* Frame-pointer chain entries; the kernel returns at most
 * kernel.perf_event_max_stack (default 127) of them. */
#define STB_RECORD_MAX_FRAMES  128u

/*
 * Request slots: one per worker (index = worker, the perf link's cookie), then
 * STB_RECORD_PTHREAD_SLOTS for registered pthreads (they are not workers: a
 * request in slot >= STB_ABI_MAX_WORKERS is matched against the task entry's
 * tid instead of a worker's current task) and for threads that are no task
 * (a thread request: matched against the sampled thread's tid and process,
 * its stack copied from sp to the first unreadable page).
 */
#define STB_RECORD_PTHREAD_SLOTS 64u
#define STB_RECORD_SLOTS (STB_ABI_MAX_WORKERS + STB_RECORD_PTHREAD_SLOTS)

/* What the program does on a sample (its read-only global stb_mode), and the
 * kind of a record. */
enum stb_record_mode {
	STB_RECORD_MODE_REQUEST = 1, /* one record per armed request */
	STB_RECORD_MODE_SAMPLE = 2,  /* one record per sample of every worker */
};

/* stb_bpf_prog_record.flags */
#define STB_RECORD_F_KERNEL       0x01u /* sample hit kernel mode; regs are the
                                            user registers saved at kernel entry */
#define STB_RECORD_F_RUNNING      0x02u /* the task ran there: its worker's current
                                            named it (a pthread: its entry said
                                            RUNNING), and the entry had its id */
#define STB_RECORD_F_STACK_FAULT  0x04u /* copy stopped early: a page could not
                                            be read (stack_err) */
#define STB_RECORD_F_STACK_LIMIT  0x08u /* copy stopped at STB_RECORD_STACK_MAX
                                            before stack_hi */
#define STB_RECORD_F_SP_OUTSIDE   0x10u /* sp not in [stack_lo, stack_hi) or no
                                            task: nothing copied */
#define STB_RECORD_F_NO_STACK     0x20u /* record ends at stack[] (sample mode
                                            without stack copy) */
#define STB_RECORD_F_NO_TASK      0x40u /* sample mode: no current task, or its
                                            entry could not be read */

/* User-mode registers at the sample (callee-saved set plus ip/sp). */
struct stb_record_regs {
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u64 bx;
	__u64 r12;
	__u64 r13;
	__u64 r14;
	__u64 r15;
};

struct stb_record {
	__u32 kind;        /* enum stb_record_mode */
	__u32 flags;       /* STB_RECORD_F_* */
	__u32 worker;      /* worker index (cookie of the perf link) */
	__u32 tid;         /* kernel tid the sample was taken on */
	__u32 cpu;         /* CPU the sample was taken on */
	__u32 nframes;     /* valid entries in frames[] */
	__u64 tag;         /* request tag (request mode); 0 (sample) */
	__u64 id;          /* bthread_t: requested (request mode) or current (sample) */
	__u64 word;        /* task word seen by the program, its state as the
			      worker's current says (RUNNING, ABOUT_TO_RUN:
			      abi.h); 0 if none */
	__u64 stack_lo;    /* from the task entry; 0 if none */
	__u64 stack_hi;
	__u64 time_ns;     /* bpf_ktime_get_ns() at program entry (CLOCK_MONOTONIC) */
	__u64 prog_ns;     /* program time from entry until just before submit */
	struct stb_record_regs regs;
	__u32 stack_size;  /* stack[] holds [regs.sp, regs.sp + stack_size) */
	__s32 stack_err;   /* error of the read that stopped the copy early, or 0 */
	__s32 frames_err;  /* bpf_get_stack() error, or 0 */
	__u32 red_zone_len; /* bytes of [regs.sp - red_zone_len, regs.sp) copied
			       at the end of red_zone[]: STB_RECORD_RED_ZONE or 0 */
	__u64 frames[STB_RECORD_MAX_FRAMES]; /* [0] = ip, then return addresses */
	__u8 red_zone[STB_RECORD_RED_ZONE]; /* directly followed by stack[] */
	__u8 stack[STB_RECORD_STACK_MAX];
};

/* Size of a record without its stack area (STB_RECORD_F_NO_STACK). */
#define STB_RECORD_HDR_SIZE 1312u

#define STB_RECORD_ASSERT_(c, m) _Static_assert(c, m)
STB_RECORD_ASSERT_(sizeof(struct stb_record_regs) == 64, "regs layout");
STB_RECORD_ASSERT_(__builtin_offsetof(struct stb_record, tag) == 24, "record layout");
STB_RECORD_ASSERT_(__builtin_offsetof(struct stb_record, time_ns) == 64, "record layout");
STB_RECORD_ASSERT_(__builtin_offsetof(struct stb_record, regs) == 80, "record layout");
STB_RECORD_ASSERT_(__builtin_offsetof(struct stb_record, stack_size) == 144, "record layout");
STB_RECORD_ASSERT_(__builtin_offsetof(struct stb_record, frames) == 160, "record layout");
STB_RECORD_ASSERT_(__builtin_offsetof(struct stb_record, red_zone) +
		    STB_RECORD_RED_ZONE == __builtin_offsetof(struct stb_record, stack),
		    "the red zone is contiguous with the stack copy");
STB_RECORD_ASSERT_(__builtin_offsetof(struct stb_record, stack) ==
		    STB_RECORD_HDR_SIZE, "record layout");
STB_RECORD_ASSERT_(sizeof(struct stb_record) ==
		    STB_RECORD_HDR_SIZE + STB_RECORD_STACK_MAX, "record size");
STB_RECORD_ASSERT_(STB_RECORD_STACK_PAGES >= 2, "the copy needs a first and a full page slot");
STB_RECORD_ASSERT_(STB_RECORD_HDR_SIZE % 8 == 0, "stack area is 8-byte aligned");

#endif /* STB_BPF_RECORD_H */
