/* SPDX-License-Identifier: Apache-2.0 */
/*
 * DWARF expression evaluation (DWARF 5 section 2.5) for call-frame
 * information: a pure stack machine over bytes the target controls, with an
 * operation budget and a bounded stack. Registers and memory come from the
 * caller; nothing here reads or allocates anything else.
 */
#ifndef STB_RUNTIME_STACKS_UNWIND_DWEXPR_H
#define STB_RUNTIME_STACKS_UNWIND_DWEXPR_H

#include <stddef.h>
#include <stdint.h>

/* DWARF register numbers the evaluator knows (x86-64: rax..r15, 16 = rip). */
#define STB_DWEXPR_NREGS 17u
/* Operations executed per evaluation when the caller gives no budget. */
#define STB_DWEXPR_DEFAULT_OPS 256u
/* Values on the stack, at most. */
#define STB_DWEXPR_STACK 64u

/* Reads the 8 bytes at addr of the target into *val. Returns 0 or -errno. */
typedef int (*stb_dwexpr_read_fn)(void *arg, uint64_t addr, uint64_t *val);

struct stb_dwexpr_env {
	const uint64_t *regs;    /* STB_DWEXPR_NREGS values, indexed by DWARF number */
	uint32_t known;          /* bit n set: regs[n] is known */
	stb_dwexpr_read_fn read; /* NULL: every DW_OP_deref fails */
	void *arg;
	unsigned max_ops; /* operations allowed; 0 = STB_DWEXPR_DEFAULT_OPS */
};

/*
 * Evaluates the expression expr[0, len) with `push` (NULL or one value, e.g.
 * the CFA for DW_CFA_expression rules) on the stack first; *out gets the top
 * of the stack at the end. Only operations that compute a value are accepted
 * (no location descriptions: DW_OP_reg*, DW_OP_piece, DW_OP_stack_value,
 * DW_OP_call*, DW_OP_fbreg and the like are -ENOTSUP). Arithmetic wraps
 * modulo 2^64; signed division of INT64_MIN by -1 gives INT64_MIN.
 * Pure and thread-safe; never reads outside expr.
 * Returns 0; -EINVAL: malformed (truncated operand, branch out of range,
 * stack underflow/overflow, empty result); -ENOTSUP: unsupported operation;
 * -E2BIG: the operation budget ran out (e.g. a DW_OP_skip loop); -ENOENT: a
 * register that is not known; -EDOM: division by zero; or the -errno of a
 * failed read.
 */
int stb_dwexpr_eval(const uint8_t *expr, size_t len, const struct stb_dwexpr_env *env,
		    const uint64_t *push, uint64_t *out);

#endif /* STB_RUNTIME_STACKS_UNWIND_DWEXPR_H */
