/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Call-frame information of x86-64 code (.eh_frame_hdr and .eh_frame, LSB
 * "Exception Frames"), as pure functions over bytes the target controls:
 * the search table, CIE/FDE parsing, running the CFA program to the row of
 * an address (bytes in, rules out), and applying a row to a register set
 * (DWARF expressions through dwexpr.h). Every value from the bytes is
 * range-checked and every arithmetic on it checked; nothing here allocates,
 * locks or reads anything but its arguments and the caller's read callback.
 */
#ifndef STB_RUNTIME_STACKS_UNWIND_CFI_H
#define STB_RUNTIME_STACKS_UNWIND_CFI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unwind/dwexpr.h"

/* DWARF register numbers of x86-64 that the rules track: 0..15 = rax, rdx,
 * rcx, rbx, rsi, rdi, rbp, rsp, r8..r15; 16 = the return address (rip). */
#define STB_CFI_NREGS STB_DWEXPR_NREGS
#define STB_CFI_RBX 3u
#define STB_CFI_RBP 6u
#define STB_CFI_RSP 7u
#define STB_CFI_R12 12u
#define STB_CFI_RA 16u
/* DW_CFA_remember_state nesting accepted. */
#define STB_CFI_MAX_STATES 8u

/* Bytes of the target: data[i] is at target address addr + i. */
struct stb_cfi_bytes {
	const uint8_t *data;
	size_t len;
	uint64_t addr;
};

/* A parsed .eh_frame_hdr: table of (initial location, FDE address) pairs,
 * sorted, each a 4-byte value relative to the header. */
struct stb_cfi_hdr {
	uint64_t hdr_addr;    /* target address of the header */
	uint64_t eh_frame;    /* target address of .eh_frame (eh_frame_ptr) */
	uint64_t table_addr;  /* target address of the first pair */
	uint64_t count;       /* pairs */
	const uint8_t *table; /* count * 8 bytes, in the caller's buffer */
};

/*
 * Parses the .eh_frame_hdr in b. Only the binary-search table format that
 * linkers produce (table encoding DW_EH_PE_datarel | DW_EH_PE_sdata4) is
 * accepted. out->table points into b->data. Returns 0, -EINVAL (malformed,
 * truncated) or -ENOTSUP (no table / other encodings).
 */
int stb_cfi_hdr_parse(const struct stb_cfi_bytes *b, struct stb_cfi_hdr *out);

/* eh_frame_ptr of the .eh_frame_hdr that b starts (b may hold only its first
 * bytes), checked as stb_cfi_hdr_parse checks it. Returns 0, -EINVAL or
 * -ENOTSUP. */
int stb_cfi_hdr_eh_frame(const struct stb_cfi_bytes *b, uint64_t *eh_frame);

/* Target address of the FDE whose initial location is the greatest <= ip
 * (it may still not cover ip: stb_cfi_row checks). Returns 0 or -ENOENT. */
int stb_cfi_hdr_find(const struct stb_cfi_hdr *h, uint64_t ip, uint64_t *fde_addr);

/* How a register (or the return address) of the caller is recovered. */
enum stb_cfi_how {
	STB_CFI_SAME = 0,   /* unchanged (also: no rule, for callee-saved registers) */
	STB_CFI_UNDEF,      /* not recoverable; for the return address: outermost frame */
	STB_CFI_OFFSET,     /* saved at CFA + off */
	STB_CFI_VAL_OFFSET, /* value is CFA + off */
	STB_CFI_REG,        /* value is in register `reg` */
	STB_CFI_EXPR,       /* saved at the address the expression computes (CFA pushed) */
	STB_CFI_VAL_EXPR,   /* value is what the expression computes (CFA pushed) */
};

struct stb_cfi_rule {
	uint8_t how;                 /* enum stb_cfi_how */
	uint8_t reg;                 /* STB_CFI_REG */
	uint32_t expr_off, expr_len; /* EXPR/VAL_EXPR: bytes at b->data + expr_off */
	int64_t off;
};

/* The row of the CFI table for one address. */
struct stb_cfi_row {
	uint64_t pc_lo, pc_hi; /* the row holds for pc_lo <= ip < pc_hi */
	uint64_t fn_lo, fn_hi; /* the FDE's range: the function (or part) holding ip */
	bool cfa_is_expr;      /* CFA = value of the expression at cfa_expr_* */
	bool signal_frame;     /* CIE augmentation 'S': the caller's ip is exact */
	uint8_t cfa_reg;       /* else CFA = register cfa_reg + cfa_off */
	int64_t cfa_off;
	uint32_t cfa_expr_off, cfa_expr_len;
	struct stb_cfi_rule reg[STB_CFI_NREGS];
};

/*
 * Parses the FDE at target address fde_addr of b (and its CIE, also in b)
 * and runs the CIE's initial instructions and the FDE's instructions up to
 * the row for ip. Expressions are not evaluated here, only located. Returns
 * 0; -ENOENT: the FDE does not cover ip; -EINVAL: malformed (truncated,
 * out of range, overflowing arithmetic, LEB128 over 64 bits, restore without
 * a state...); -ENOTSUP: valid CFI this code does not take (a CIE version or
 * augmentation, a CFA register > 16, DW_CFA_GNU_window_save...).
 */
int stb_cfi_row(const struct stb_cfi_bytes *b, uint64_t fde_addr, uint64_t ip,
		struct stb_cfi_row *row);

/* Registers of one frame: DWARF-numbered values, and which are known. */
struct stb_cfi_regs {
	uint64_t r[STB_CFI_NREGS]; /* r[STB_CFI_RA] = ip */
	uint32_t known;            /* bit n: r[n] is known */
};

/*
 * Applies row (parsed from b) to the registers of a frame: *regs becomes the
 * caller's (rsp = the CFA, rip = the return address; a register whose rule
 * cannot be evaluated becomes unknown). read and arg fetch 8 bytes of target
 * memory; max_ops is the budget of each expression (0 = default).
 * Returns 1 with the caller's registers; 0 when the return address is
 * undefined (the outermost frame; *regs unchanged); -ENOENT when a register
 * the CFA or the return address needs is not known; -E2BIG when an
 * expression ran out of budget; another -errno from the expression or a read.
 */
int stb_cfi_apply(const struct stb_cfi_bytes *b, const struct stb_cfi_row *row,
		  struct stb_cfi_regs *regs, stb_dwexpr_read_fn read, void *arg, unsigned max_ops);

/*
 * Decodes a DW_EH_PE-encoded pointer at *pos of b (pc-relative to its own
 * target address, absolute, or data-relative to `datarel`; no indirection,
 * no alignment). Returns 0 and advances *pos, or -EINVAL / -ENOTSUP.
 */
int stb_cfi_read_ptr(const struct stb_cfi_bytes *b, size_t *pos, uint8_t enc, uint64_t datarel,
		     uint64_t *out);

#endif /* STB_RUNTIME_STACKS_UNWIND_CFI_H */
