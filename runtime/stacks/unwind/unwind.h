/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Call-stack unwinding from a register set plus a copy of the top of a stack,
 * for this process (pid 0) or another one: the walks (CFI rows cached per
 * address, frame pointers, libunwind as the fallback), with a frame, byte and
 * time budget each, on the target's module registry (modules.h), which the
 * symbolizer can share. Shared by the in-process tracer and stb-bpf-loader.
 * Not async-signal-safe.
 */
#ifndef STB_RUNTIME_STACKS_UNWIND_UNWIND_H
#define STB_RUNTIME_STACKS_UNWIND_UNWIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* stb_regs.flags */
/* ip is a return address (saved by a call), not the address of the
 * instruction being executed: the first frame's unwind info is looked up at
 * ip - 1. Set it for contexts published by the context switch; leave it clear
 * for contexts captured by a signal handler or a BPF program. */
#define STB_UNW_IP_IS_RETURN 0x1u

/* Step every frame with libunwind instead of the cached CFI rules (slow: for
 * comparisons and diagnosis). */
#define STB_UNW_LIBUNWIND_ONLY 0x2u

/* Read nothing from the target itself: stack memory comes from the copy only
 * (the target has run on since the capture); the walk ends where it would
 * need more. Module images are still used. */
#define STB_UNW_COPY_ONLY 0x4u

/* Follow the frame-pointer chain only (what stb_unw_walk_fp does). */
#define STB_UNW_FP_CHAIN 0x8u

/* Registers of the innermost frame. bx, r12..r15 may be 0 when unknown. */
struct stb_regs {
	uint64_t ip, sp, bp, bx, r12, r13, r14, r15;
	unsigned flags; /* STB_UNW_IP_IS_RETURN | STB_UNW_LIBUNWIND_ONLY | STB_UNW_COPY_ONLY |
			   STB_UNW_FP_CHAIN */
};

/* bytes[i] was at address addr + i in the target. */
struct stb_stack_copy {
	uint64_t addr;
	const void *bytes;
	size_t len;
};

/* How a frame was found. Frame 0 comes from the registers and carries the
 * kind of the walk (DWARF for stb_unw_walk, FP for stb_unw_walk_fp). */
enum {
	STB_FRAME_DWARF = 0, /* CFI from .eh_frame */
	STB_FRAME_FP = 1,    /* frame-pointer chain (or libunwind's rbp guess) */
};

struct stb_unw_frame {
	uint64_t ip;  /* frame 0: regs->ip; others: a return address */
	uint64_t sp;  /* stack pointer in that frame (the CFA of its callee) */
	unsigned how; /* STB_FRAME_* */
};

/* Return non-zero to stop the walk right there (the frame counts as
 * delivered). Called with no lock held: it may symbolize (stb_sym_*, also on
 * the same registry) and refresh; it must not free the proc. */
typedef int (*stb_unw_frame_fn)(const struct stb_unw_frame *f, void *arg);

#define STB_UNW_DEFAULT_DEPTH 64u
/* Bytes a walk may read from the target with process_vm_readv by default. */
#define STB_UNW_DEFAULT_TARGET_BYTES (1024u * 1024)
/* Time a walk may take by default (from its first slow operation): a walk is
 * bounded by its frames, bytes and expression budgets already; this is the
 * fence for a tracer descheduled or slowed down (sanitizers) on a busy host. */
#define STB_UNW_DEFAULT_TIME_NS (1000ull * 1000 * 1000)

struct stb_unw_proc;
struct stb_mods; /* a target's module registry (modules.h) */

/*
 * A walker for process pid (0 = this process). Enumerates the modules now
 * (dl_iterate_phdr for pid 0; /proc/PID/maps and the mapped files otherwise).
 * Returns NULL and sets errno on failure (ESRCH: no such process; EACCES/EPERM:
 * its maps are not readable). May block on file I/O.
 */
struct stb_unw_proc *stb_unw_proc_new(pid_t pid);

/* A walker on an existing module registry (takes a reference of its own):
 * the symbolizer and the unwinder then share one scan of the target
 * (stb_sym_new_mods). Returns NULL and sets errno (EINVAL, ENOMEM). */
struct stb_unw_proc *stb_unw_proc_new_mods(struct stb_mods *mods);

/* The registry p walks on (borrowed: valid while p is; stb_mods_ref to keep
 * it longer). Never NULL for a valid p. */
struct stb_mods *stb_unw_proc_mods(struct stb_unw_proc *p);

/* Releases everything; accepts NULL. No walk may be running on p. */
void stb_unw_proc_free(struct stb_unw_proc *p);

/* Limits of one walk (stb_unw_walk_budget). A zero field takes its default. */
struct stb_unw_budget {
	unsigned max_frames;       /* frames delivered; 0 = STB_UNW_DEFAULT_DEPTH */
	uint64_t max_target_bytes; /* read from the target; 0 = STB_UNW_DEFAULT_TARGET_BYTES */
	/* Absolute deadline on the stb_now_ns() clock (CLOCK_MONOTONIC); 0 =
	 * STB_UNW_DEFAULT_TIME_NS after the walk's first slow operation (a
	 * target read, a rule computed from CFI, a libunwind step, a refresh). */
	uint64_t deadline_ns;
	unsigned max_expr_ops; /* per DWARF expression (and libunwind step: x16);
				* 0 = STB_DWEXPR_DEFAULT_OPS (256) */
	/* NULL, or where the walk logs the offset in the copy (in 8-byte words)
	 * of each word it reads, at most read_log_cap (stb_unw_result). */
	uint32_t *read_log;
	unsigned read_log_cap;
};

/* Why a walk ended (stb_unw_result.end). */
enum {
	STB_UNW_END_BOTTOM = 0,  /* the outermost frame was delivered */
	STB_UNW_END_DEPTH,       /* max_frames delivered */
	STB_UNW_END_CALLBACK,    /* fn returned non-zero */
	STB_UNW_END_NO_INFO,     /* no rule finds the caller (no CFI, no module, CFI that fails) */
	STB_UNW_END_UNREADABLE,  /* memory the step needs is unreadable (or outside the copy
				  * with STB_UNW_COPY_ONLY) */
	STB_UNW_END_BAD_FRAME,   /* the caller's frame would not be above this one */
	STB_UNW_END_BYTES,       /* max_target_bytes reached */
	STB_UNW_END_DEADLINE,    /* deadline_ns passed */
	STB_UNW_END_EXPR_BUDGET, /* a DWARF expression or libunwind step ran out of operations */
};

struct stb_unw_result {
	unsigned frames;       /* delivered (the return value) */
	unsigned end;          /* STB_UNW_END_* */
	uint64_t target_bytes; /* read from the target by this walk */
	/* With a read_log: the walk depended on nothing but regs' ip, sp and bp
	 * and the aligned words of the copy at the offsets logged (walkmemo.h).
	 * False without one. */
	bool replayable;
	unsigned read_logged; /* offsets in read_log */
};

/* A short English name of an STB_UNW_END_* value ("bottom", "deadline", ...). */
const char *stb_unw_end_name(unsigned end);

/*
 * Walks the stack from regs with the CFI (.eh_frame) of the modules: each
 * ip's row is computed once from the module's owned copy of its unwind
 * tables and cached in p (simple rows packed, others - CFI expressions,
 * signal frames - re-derived and evaluated by the budgeted DWARF expression
 * evaluator); code without usable CFI is stepped with libunwind (its rbp
 * guess), fenced by a budget. Calls fn for each frame after the first
 * `skip`, at most max_depth times (0 = STB_UNW_DEFAULT_DEPTH); the unwinder
 * takes no step beyond the last delivered frame. Memory is read from copy
 * first (copy may be NULL), then from the module copies, then with
 * process_vm_readv on the target (which can fail with EFAULT: the walk then
 * ends there, it never crashes; never with STB_UNW_COPY_ONLY). Ends cleanly
 * at the bottom frame (ip 0, CFI with undefined RIP, rbp chain ending at 0)
 * and at the default budgets (struct stb_unw_budget). Thread-safe: several
 * threads may walk the same proc at once. May block briefly when an ip lies
 * in no known module (rate-limited module refresh). Returns the number of
 * frames delivered, or -EINVAL (bad arguments).
 */
int stb_unw_walk(struct stb_unw_proc *p, const struct stb_regs *regs,
		 const struct stb_stack_copy *copy, unsigned skip, unsigned max_depth,
		 stb_unw_frame_fn fn, void *arg);

/*
 * stb_unw_walk (or stb_unw_walk_fp with STB_UNW_FP_CHAIN in regs->flags)
 * with explicit limits: b may be NULL (all defaults); res (may be NULL) says
 * how many frames came and why the walk ended. A walk that meets a budget
 * ends cleanly with the frames found so far. CFI expressions are evaluated
 * with b->max_expr_ops each (a looping expression ends the walk with
 * STB_UNW_END_EXPR_BUDGET), libunwind steps with a budget on its accessors.
 * Thread-safety and blocking as stb_unw_walk; an automatic refresh is
 * abandoned at the deadline. Returns the number of frames, or -EINVAL.
 */
int stb_unw_walk_budget(struct stb_unw_proc *p, const struct stb_regs *regs,
			const struct stb_stack_copy *copy, unsigned skip,
			const struct stb_unw_budget *b, stb_unw_frame_fn fn, void *arg,
			struct stb_unw_result *res);

/*
 * Same contract as stb_unw_walk, following only the rbp chain: frame n+1 has
 * ip = [bp + 8] and the walk goes on with bp = [bp]. Stops when bp is 0,
 * misaligned, not above the previous one, unreadable, or when a return address
 * lies in no known executable mapping. Correct only for code built with frame
 * pointers (and misses the caller of frame 0 when frame 0 was captured in a
 * prologue or epilogue).
 */
int stb_unw_walk_fp(struct stb_unw_proc *p, const struct stb_regs *regs,
		    const struct stb_stack_copy *copy, unsigned skip, unsigned max_depth,
		    stb_unw_frame_fn fn, void *arg);

/* Forgets modules that went away and loads new ones (target called dlopen or
 * dlclose). Also done automatically, rate-limited, when a walk meets an ip in
 * no known module. Thread-safe; waits for running walks. Returns 0 or -errno. */
int stb_unw_proc_refresh(struct stb_unw_proc *p);

/*
 * Fills regs for a context published by the context switch (abi.h): ip/sp/bp
 * as published, flags = STB_UNW_IP_IS_RETURN, and rbx, r12..r15 from the
 * switch frame below sp when copy covers it (else 0 = unknown). Never fails.
 */
void stb_unw_regs_from_switch(struct stb_regs *regs, uint64_t ip, uint64_t sp, uint64_t bp,
			      const struct stb_stack_copy *copy);

/* Copies n bytes of this process's memory without sanitizer checks (a live
 * stack holds ASan redzones). The caller guarantees the range is mapped. */
void stb_unw_copy_raw(void *dst, const void *src, size_t n);

/* stb_unw_module_info.flags */
#define STB_UNW_MOD_FP_ONLY 0x01u  /* no usable CFI: walks use frame pointers here */
#define STB_UNW_MOD_CHANGED 0x02u  /* the file on disk is not what is mapped */
#define STB_UNW_MOD_NO_FILE 0x04u  /* the mapped file could not be opened */
#define STB_UNW_MOD_NO_TABLE 0x08u /* no .eh_frame_hdr search table */
#define STB_UNW_MOD_VDSO 0x10u
#define STB_UNW_MOD_ANON 0x20u    /* anonymous executable memory (JIT) */
#define STB_UNW_MOD_TOO_BIG 0x40u /* unwind tables over the registry's byte cap: not read */
#define STB_UNW_MOD_UNVERIFIED 0x80u /* frozen target: its build id is not in the core */

struct stb_unw_module_info {
	uint64_t lo, hi; /* executable address range in the target */
	uint64_t bias;   /* target address = ELF virtual address + bias */
	unsigned flags;  /* STB_UNW_MOD_* */
	unsigned build_id_len;
	uint8_t build_id[64];
	char path[512]; /* mapped path (truncated), "[vdso]", or "" */
};

/* Describes the module whose executable range holds ip, as known now (no
 * refresh). Thread-safe. Returns 0, or -ENOENT when ip is in no known module. */
int stb_unw_proc_module(struct stb_unw_proc *p, uint64_t ip, struct stb_unw_module_info *out);

/* Describes the target's main executable (the module mapped from
 * /proc/PID/exe). Thread-safe. Returns 0, -ENOENT when it maps no code of
 * it, or -errno from stat. */
int stb_unw_proc_main_module(struct stb_unw_proc *p, struct stb_unw_module_info *out);

/* The range [*lo, *hi) of the function (or function part: an FDE) whose
 * code holds ip, from the module's CFI. ip is an address inside the code
 * (for a return address pass ret - 1). Thread-safe, reads no target memory.
 * Returns 0, or -ENOENT when no CFI covers ip. */
int stb_unw_proc_function(struct stb_unw_proc *p, uint64_t ip, uint64_t *lo, uint64_t *hi);

/* Counters, summed over all walks on a proc since stb_unw_proc_new. */
struct stb_unw_stats {
	uint64_t walks;
	uint64_t steps;        /* unwinder steps taken */
	uint64_t frames;       /* frames delivered */
	uint64_t copy_reads;   /* reads served by the stack copy */
	uint64_t image_reads;  /* reads served by module images */
	uint64_t target_reads; /* process_vm_readv calls */
	uint64_t target_read_failures;
	uint64_t refreshes;    /* module table rebuilds (of the registry, by anyone) */
	uint64_t target_bytes; /* bytes read with process_vm_readv */
	uint64_t budget_ends;  /* walks ended by a budget: bytes, deadline, expression */
	uint64_t tables_read;  /* modules whose unwind tables were read at first use */
};

/* Snapshot of the counters (relaxed; not atomic as a whole). */
void stb_unw_proc_stats(struct stb_unw_proc *p, struct stb_unw_stats *out);

#endif /* STB_RUNTIME_STACKS_UNWIND_UNWIND_H */
