/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private to the unwinder (unwind.c, unwind_lu.c): the per-walk context
 * with its budgets and reads, and the libunwind fallback's entry points.
 */
#ifndef STB_RUNTIME_STACKS_UNWIND_UNWIND_INT_H
#define STB_RUNTIME_STACKS_UNWIND_UNWIND_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "unwind/cfi.h"
#include "unwind/modules.h"
#include "unwind/unwind.h"

#define STB_UNW_PAGE 4096u
#define STB_UNW_PCACHE_PAGES 4u
/* Accessor calls libunwind may make in one step (its expression evaluator
 * reads every opcode through access_mem: this ends its loops). */
#define STB_UNW_LU_CALLS 4096u

struct stb_unw_pcache {
	uint64_t page[STB_UNW_PCACHE_PAGES];
	int state[STB_UNW_PCACHE_PAGES]; /* 0 empty, 1 valid, 2 unreadable */
	unsigned next;
	uint8_t data[STB_UNW_PCACHE_PAGES][STB_UNW_PAGE];
};

/* One walk; also the `arg` of every libunwind accessor. */
struct stb_unw_ctx {
	struct stb_unw_proc *p;
	struct stb_mods *mods;
	const struct stb_modtab *tab; /* acquired for the whole walk */
	uint64_t copy_lo;
	const uint8_t *copy;
	size_t copy_len;
	const struct stb_seg *last_seg; /* in tab; reset with it */
	const struct stb_mod *last_mod; /* in tab; reset with it */
	struct stb_unw_pcache *pc;
	bool refresh_tried;
	bool copy_only; /* STB_UNW_COPY_ONLY */
	/* Budgets. */
	uint64_t deadline_ns; /* 0 until the first check: then start + default */
	uint64_t default_ns;
	uint64_t bytes_left; /* process_vm_readv bytes still allowed */
	unsigned expr_ops;
	unsigned end; /* STB_UNW_END_* set by the operation that failed, else 0 */
	/* libunwind step in progress. */
	struct stb_cfi_regs cur; /* registers of the frame it starts from */
	uint64_t ip0;            /* rip handed to it (ip - 1 for a return address) */
	bool fpi_failed;         /* find_proc_info found no CFI */
	unsigned lu_calls;       /* accessor calls left in this step */
	uint64_t n_copy, n_image, n_target, n_target_fail, n_target_bytes;
	/* The walk used more than ip, sp, bp and aligned words of the copy, or
	 * read more words than the log holds (stb_unw_result.replayable). */
	bool not_replayable;
	uint32_t *log; /* stb_unw_budget.read_log */
	unsigned log_cap, nlog;
};

/* True (and w->end = STB_UNW_END_DEADLINE) once the walk is past its deadline. */
bool stb_unw_ctx_late(struct stb_unw_ctx *w);

/* Reads len (<= 16) bytes at target address addr: the stack copy, then the
 * module images, then the target (budgeted). Returns 0 or -errno. */
int stb_unw_ctx_read(struct stb_unw_ctx *w, uint64_t addr, void *dst, size_t len);

/* The module holding ip; on a miss, one rate-limited registry refresh per
 * walk (when the table changes, every pointer into the old one is invalid:
 * last_seg/last_mod are reset, the old table is released). */
const struct stb_mod *stb_unw_ctx_mod(struct stb_unw_ctx *w, uint64_t ip);

/* libunwind fallback (unwind_lu.c). */
void *stb_unw_lu_new(void);     /* an address space; NULL on failure */
void stb_unw_lu_free(void *as); /* accepts NULL */
/* One step from regs (lookup: ip or ip - 1): 1 with the caller's registers
 * in *regs, 0 at the bottom, -1 on failure (w->end may say why); *fp: it
 * found no CFI and guessed from rbp. */
int stb_unw_lu_step(struct stb_unw_ctx *w, void *as, struct stb_cfi_regs *regs, uint64_t lookup,
		    bool *fp);

#endif /* STB_RUNTIME_STACKS_UNWIND_UNWIND_INT_H */
