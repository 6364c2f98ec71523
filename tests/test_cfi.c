/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests of runtime/stacks/unwind/cfi.c and dwexpr.c on synthetic call-frame
 * information written with <dwarf.h> names: rows at each address of an FDE,
 * remember/restore, every register rule, expressions (and a looping one),
 * .eh_frame_hdr search, and hostile input: overflowing factored offsets and
 * advances, LEB128 over 64 bits, truncation, out-of-range pointers.
 */
#include <dwarf.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "unwind/cfi.h"
#include "unwind/dwexpr.h"

#define BASE 0x10000ull /* target address of the synthetic .eh_frame */

/* A byte buffer the tests write CFI into. */
struct buf {
	uint8_t b[4096];
	size_t n;
};

static void put(struct buf *o, unsigned n, uint64_t v)
{
	for (unsigned i = 0; i < n; i++)
		o->b[o->n++] = (uint8_t)(v >> (8 * i));
}

static void uleb(struct buf *o, uint64_t v)
{
	do {
		uint8_t x = v & 0x7f;
		v >>= 7;
		o->b[o->n++] = x | (v ? 0x80 : 0);
	} while (v);
}

static void sleb(struct buf *o, int64_t v)
{
	for (;;) {
		uint8_t x = (uint8_t)(v & 0x7f);
		v >>= 7; /* arithmetic on this compiler */
		if ((v == 0 && !(x & 0x40)) || (v == -1 && (x & 0x40))) {
			o->b[o->n++] = x;
			return;
		}
		o->b[o->n++] = x | 0x80;
	}
}

static void bytes(struct buf *o, const void *p, size_t n)
{
	if (n)
		memcpy(o->b + o->n, p, n);
	o->n += n;
}

/* Writes the 4-byte length of the entry that started at `at`. */
static void close_entry(struct buf *o, size_t at)
{
	while ((o->n - at) % 8)
		o->b[o->n++] = DW_CFA_nop;
	uint32_t len = (uint32_t)(o->n - at - 4);
	memcpy(o->b + at, &len, 4);
}

/* A "zR" CIE (pc-relative sdata4 FDE pointers), code alignment 1, data
 * alignment -8, return address register 16, with `init` as its initial
 * instructions. Returns its offset. */
static size_t cie(struct buf *o, const void *init, size_t init_len)
{
	size_t at = o->n;

	put(o, 4, 0);  /* length, later */
	put(o, 4, 0);  /* CIE id */
	put(o, 1, 1);  /* version */
	bytes(o, "zR", 3);
	uleb(o, 1);
	sleb(o, -8);
	put(o, 1, STB_CFI_RA);
	uleb(o, 1);
	put(o, 1, DW_EH_PE_pcrel | DW_EH_PE_sdata4);
	bytes(o, init, init_len);
	close_entry(o, at);
	return at;
}

/* The usual x86-64 CIE program: CFA = rsp + 8, return address at CFA - 8. */
static const uint8_t std_init[] = { DW_CFA_def_cfa, STB_CFI_RSP, 8, DW_CFA_offset | STB_CFI_RA, 1 };

/* An FDE for [pc, pc + range) with instructions insn. Returns its offset. */
static size_t fde(struct buf *o, size_t cie_at, uint64_t pc, uint64_t range, const void *insn, size_t len)
{
	size_t at = o->n;

	put(o, 4, 0);
	put(o, 4, (uint32_t)(o->n - cie_at)); /* CIE pointer: back from this field */
	put(o, 4, (uint32_t)(int32_t)(pc - (BASE + o->n)));
	put(o, 4, range);
	uleb(o, 0); /* augmentation data */
	bytes(o, insn, len);
	close_entry(o, at);
	return at;
}

static struct stb_cfi_bytes view(const struct buf *o)
{
	return (struct stb_cfi_bytes){ .data = o->b, .len = o->n, .addr = BASE };
}

/* A frame of the usual shape: push rbp; mov rsp,rbp; ...; pop rbp; ret. */
static void test_rows_of_a_function(void **state)
{
	struct buf o = { .n = 0 };
	struct stb_cfi_row row;
	const uint64_t pc = 0x400000;

	(void)state;
	size_t c = cie(&o, std_init, sizeof(std_init));
	const uint8_t insn[] = {
		DW_CFA_advance_loc | 1, DW_CFA_def_cfa_offset, 16, DW_CFA_offset | STB_CFI_RBP, 2,
		DW_CFA_advance_loc | 3, DW_CFA_def_cfa_register, STB_CFI_RBP,
		DW_CFA_advance_loc | 8, DW_CFA_remember_state, DW_CFA_def_cfa, STB_CFI_RSP, 8,
		DW_CFA_restore | STB_CFI_RBP,
		DW_CFA_advance_loc | 1, DW_CFA_restore_state,
	};
	size_t f = fde(&o, c, pc, 0x20, insn, sizeof(insn));
	struct stb_cfi_bytes b = view(&o);

	assert_int_equal(stb_cfi_row(&b, BASE + f, pc, &row), 0);
	assert_int_equal(row.cfa_reg, STB_CFI_RSP);
	assert_int_equal(row.cfa_off, 8);
	assert_int_equal(row.reg[STB_CFI_RA].how, STB_CFI_OFFSET);
	assert_int_equal(row.reg[STB_CFI_RA].off, -8);
	assert_int_equal(row.reg[STB_CFI_RBP].how, STB_CFI_SAME);
	assert_true(row.pc_lo == pc && row.pc_hi == pc + 1);

	assert_int_equal(stb_cfi_row(&b, BASE + f, pc + 2, &row), 0);
	assert_int_equal(row.cfa_off, 16);
	assert_int_equal(row.reg[STB_CFI_RBP].how, STB_CFI_OFFSET);
	assert_int_equal(row.reg[STB_CFI_RBP].off, -16);
	assert_true(row.pc_lo == pc + 1 && row.pc_hi == pc + 4);
	/* Every row knows its whole function (the FDE's range). */
	assert_true(row.fn_lo == pc && row.fn_hi == pc + 0x20);

	assert_int_equal(stb_cfi_row(&b, BASE + f, pc + 4, &row), 0);
	assert_int_equal(row.cfa_reg, STB_CFI_RBP);
	assert_int_equal(row.cfa_off, 16);

	/* The epilogue: rsp-based again, rbp restored to the CIE's rule. */
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc + 12, &row), 0);
	assert_int_equal(row.cfa_reg, STB_CFI_RSP);
	assert_int_equal(row.cfa_off, 8);
	assert_int_equal(row.reg[STB_CFI_RBP].how, STB_CFI_SAME);

	/* After DW_CFA_restore_state: the body's row again. */
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc + 13, &row), 0);
	assert_int_equal(row.cfa_reg, STB_CFI_RBP);
	assert_int_equal(row.reg[STB_CFI_RBP].how, STB_CFI_OFFSET);
	assert_true(row.pc_hi == pc + 0x20);

	assert_int_equal(stb_cfi_row(&b, BASE + f, pc + 0x20, &row), -ENOENT);
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc - 1, &row), -ENOENT);

}

/* Reads from a small fake stack at 0x8000 - 16. */
static uint64_t fake_stack[4];
static int fake_read(void *arg, uint64_t addr, uint64_t *val)
{
	(void)arg;
	if (addr < 0x7ff0 || addr + 8 > 0x7ff0 + sizeof(fake_stack) || addr % 8)
		return -EFAULT;
	*val = fake_stack[(addr - 0x7ff0) / 8];
	return 0;
}

static void test_apply(void **state)
{
	struct buf o = { .n = 0 };
	struct stb_cfi_row row;
	const uint64_t pc = 0x400000;

	(void)state;
	size_t c = cie(&o, std_init, sizeof(std_init));
	/* CFA = rbp + 16, rbp at CFA - 16, rbx = value of r12, r13 = CFA + 8 */
	const uint8_t insn[] = { DW_CFA_def_cfa, STB_CFI_RBP, 16, DW_CFA_offset | STB_CFI_RBP, 2,
				 DW_CFA_register, STB_CFI_RBX, 12, DW_CFA_val_offset, 13, 0x7f /* -1 * -8 */ };
	size_t f = fde(&o, c, pc, 0x10, insn, sizeof(insn)), fo = f;
	struct stb_cfi_bytes b = view(&o);
	fake_stack[0] = 0x9000; /* saved rbp at 0x7ff0 */
	fake_stack[1] = 0x401234; /* return address at 0x7ff8 */
	struct stb_cfi_regs r = { .known = 1u << STB_CFI_RSP | 1u << STB_CFI_RBP | 1u << STB_CFI_RA | 1u << 12 };
	r.r[STB_CFI_RBP] = 0x7ff0;
	r.r[STB_CFI_RSP] = 0x7fe0;
	r.r[STB_CFI_RA] = pc + 5;
	r.r[12] = 42;
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc + 5, &row), 0);
	assert_int_equal(stb_cfi_apply(&b, &row, &r, fake_read, NULL, 0), 1);
	assert_true(r.r[STB_CFI_RSP] == 0x8000);
	assert_true(r.r[STB_CFI_RA] == 0x401234);
	assert_true(r.r[STB_CFI_RBP] == 0x9000);
	assert_true(r.r[STB_CFI_RBX] == 42);
	assert_true(r.r[13] == 0x8000 + 127 * (uint64_t)-8);
	assert_true(r.known & (1u << 13));
	assert_false(r.known & (1u << 14)); /* unknown before, unknown after */

	/* Undefined return address: the outermost frame, registers unchanged. */
	struct buf u = { .n = 0 };
	const uint8_t undef[] = { DW_CFA_undefined, STB_CFI_RA };
	c = cie(&u, std_init, sizeof(std_init));
	f = fde(&u, c, pc, 0x10, undef, sizeof(undef));
	b = view(&u);
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc, &row), 0);
	assert_int_equal(stb_cfi_apply(&b, &row, &r, fake_read, NULL, 0), 0);
	assert_true(r.r[STB_CFI_RSP] == 0x8000);

	/* A CFA register that is not known. */
	struct stb_cfi_regs none = { .known = 1u << STB_CFI_RA };
	b = view(&o);
	assert_int_equal(stb_cfi_row(&b, BASE + fo, pc + 5, &row), 0);
	assert_int_equal(stb_cfi_apply(&b, &row, &none, fake_read, NULL, 0), -ENOENT);
}

/* A signal-frame-like row: CFA and registers from expressions. */
static void test_expressions(void **state)
{
	struct buf o = { .n = 0 };
	struct stb_cfi_row row;
	const uint64_t pc = 0x500000;

	(void)state;
	size_t c = cie(&o, std_init, sizeof(std_init));
	/* CFA = [rsp + 8]; the return address saved at CFA - 8; rbx's value is
	 * CFA + 16. */
	const uint8_t insn[] = {
		DW_CFA_def_cfa_expression, 3, DW_OP_breg7, 8, DW_OP_deref,
		DW_CFA_expression, STB_CFI_RA, 3, DW_OP_const1s, 0xf8, DW_OP_plus,
		DW_CFA_val_expression, STB_CFI_RBX, 2, DW_OP_plus_uconst, 16,
	};
	size_t fd = fde(&o, c, pc, 0x10, insn, sizeof(insn));
	struct stb_cfi_bytes b = view(&o);
	assert_int_equal(stb_cfi_row(&b, BASE + fd, pc, &row), 0);
	assert_true(row.cfa_is_expr);
	assert_int_equal(row.reg[STB_CFI_RA].how, STB_CFI_EXPR);
	assert_int_equal(row.reg[STB_CFI_RBX].how, STB_CFI_VAL_EXPR);

	fake_stack[1] = 0x8008;   /* at rsp + 8: the CFA */
	fake_stack[2] = 0x405555; /* at CFA - 8: the return address */
	struct stb_cfi_regs r = { .known = 1u << STB_CFI_RSP | 1u << STB_CFI_RA };
	r.r[STB_CFI_RSP] = 0x7ff0;
	r.r[STB_CFI_RA] = pc;
	assert_int_equal(stb_cfi_apply(&b, &row, &r, fake_read, NULL, 0), 1);
	assert_true(r.r[STB_CFI_RSP] == 0x8008);
	assert_true(r.r[STB_CFI_RA] == 0x405555);
	assert_true(r.r[STB_CFI_RBX] == 0x8018);
	/* An expression reading unmapped memory: no caller. */
	fake_stack[1] = 0x100000;
	r.r[STB_CFI_RSP] = 0x7ff0;
	r.known = 1u << STB_CFI_RSP | 1u << STB_CFI_RA;
	assert_int_equal(stb_cfi_apply(&b, &row, &r, fake_read, NULL, 0), -EFAULT);
}

/* DW_OP_skip -3 jumps back onto itself: the budget ends it. */
static void test_expression_loop(void **state)
{
	struct buf o = { .n = 0 };
	struct stb_cfi_row row;
	const uint64_t pc = 0x600000;

	(void)state;
	size_t c = cie(&o, std_init, sizeof(std_init));
	const uint8_t insn[] = { DW_CFA_def_cfa_expression, 3, DW_OP_skip, 0xfd, 0xff };
	size_t f = fde(&o, c, pc, 0x10, insn, sizeof(insn));
	struct stb_cfi_bytes b = view(&o);
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc, &row), 0);
	struct stb_cfi_regs r = { .known = 1u << STB_CFI_RSP | 1u << STB_CFI_RA };
	assert_int_equal(stb_cfi_apply(&b, &row, &r, fake_read, NULL, 1000), -E2BIG);

	const uint8_t loop[] = { DW_OP_skip, 0xfd, 0xff };
	struct stb_dwexpr_env env = { .max_ops = 50 };
	uint64_t v;
	assert_int_equal(stb_dwexpr_eval(loop, sizeof(loop), &env, NULL, &v), -E2BIG);
	/* A branch out of the expression is malformed, not a jump elsewhere. */
	const uint8_t out[] = { DW_OP_lit1, DW_OP_skip, 0x10, 0x00 };
	assert_int_equal(stb_dwexpr_eval(out, sizeof(out), &env, NULL, &v), -EINVAL);
	const uint8_t back[] = { DW_OP_lit1, DW_OP_skip, 0xf0, 0xff };
	assert_int_equal(stb_dwexpr_eval(back, sizeof(back), &env, NULL, &v), -EINVAL);
}

static uint64_t eval(const uint8_t *e, size_t n, int want_ret)
{
	uint64_t regs[STB_DWEXPR_NREGS] = { 0 }, v = 0;
	regs[STB_CFI_RSP] = 0x7ff0;
	struct stb_dwexpr_env env = { .regs = regs, .known = 1u << STB_CFI_RSP, .read = fake_read };
	assert_int_equal(stb_dwexpr_eval(e, n, &env, NULL, &v), want_ret);
	return v;
}

#define EVAL(ret, ...)                                                      \
	({                                                                  \
		const uint8_t e_[] = { __VA_ARGS__ };                       \
		eval(e_, sizeof(e_), ret);                                  \
	})

static void test_dwexpr_ops(void **state)
{
	(void)state;
	assert_true(EVAL(0, DW_OP_lit3, DW_OP_lit4, DW_OP_mul) == 12);
	assert_true(EVAL(0, DW_OP_lit3, DW_OP_lit4, DW_OP_minus) == (uint64_t)-1);
	assert_true(EVAL(0, DW_OP_const1s, 0xf9, DW_OP_lit2, DW_OP_div) == (uint64_t)-3);
	assert_true(EVAL(0, DW_OP_lit7, DW_OP_lit3, DW_OP_mod) == 1);
	assert_true(EVAL(0, DW_OP_lit1, DW_OP_const1u, 63, DW_OP_shl) == 1ull << 63);
	assert_true(EVAL(0, DW_OP_lit1, DW_OP_const1u, 64, DW_OP_shl) == 0); /* no UB */
	assert_true(EVAL(0, DW_OP_const1s, 0x80, DW_OP_lit4, DW_OP_shra) == (uint64_t)-8);
	assert_true(EVAL(0, DW_OP_const1s, 0x80, DW_OP_const1u, 200, DW_OP_shra) == UINT64_MAX);
	/* INT64_MIN / -1 and abs(INT64_MIN) wrap instead of trapping. */
	assert_true(EVAL(0, DW_OP_const8s, 0, 0, 0, 0, 0, 0, 0, 0x80, DW_OP_const1s, 0xff, DW_OP_div) ==
		    1ull << 63);
	assert_true(EVAL(0, DW_OP_const8s, 0, 0, 0, 0, 0, 0, 0, 0x80, DW_OP_abs) == 1ull << 63);
	EVAL(-EDOM, DW_OP_lit1, DW_OP_lit0, DW_OP_div);
	EVAL(-EDOM, DW_OP_lit1, DW_OP_lit0, DW_OP_mod);
	/* Stack ops. */
	assert_true(EVAL(0, DW_OP_lit1, DW_OP_lit2, DW_OP_lit3, DW_OP_rot, DW_OP_drop, DW_OP_drop) == 3);
	assert_true(EVAL(0, DW_OP_lit1, DW_OP_lit2, DW_OP_swap) == 1);
	assert_true(EVAL(0, DW_OP_lit5, DW_OP_lit6, DW_OP_over) == 5);
	assert_true(EVAL(0, DW_OP_lit5, DW_OP_lit6, DW_OP_lit7, DW_OP_pick, 2) == 5);
	EVAL(-EINVAL, DW_OP_lit5, DW_OP_pick, 1);
	EVAL(-EINVAL, DW_OP_plus);
	EVAL(-EINVAL, DW_OP_drop);
	EVAL(-EINVAL, DW_OP_nop); /* empty result */
	/* Comparisons are signed; bra pops. */
	assert_true(EVAL(0, DW_OP_const1s, 0xff, DW_OP_lit0, DW_OP_lt) == 1);
	assert_true(EVAL(0, DW_OP_lit0, DW_OP_bra, 1, 0, DW_OP_lit9, DW_OP_lit8) == 8);
	assert_true(EVAL(0, DW_OP_lit1, DW_OP_bra, 1, 0, DW_OP_lit9, DW_OP_lit8) == 8);
	assert_true(EVAL(0, DW_OP_lit1, DW_OP_bra, 0, 0, DW_OP_lit9) == 9);
	/* Registers and memory. */
	assert_true(EVAL(0, DW_OP_breg7, 8) == 0x7ff8);
	assert_true(EVAL(0, DW_OP_bregx, 7, 0x78) == 0x7ff0 - 8);
	EVAL(-ENOENT, DW_OP_breg6, 0);
	EVAL(-ENOENT, DW_OP_bregx, 0x40, 0);
	fake_stack[1] = 0x1122334455667788ull;
	assert_true(EVAL(0, DW_OP_breg7, 8, DW_OP_deref) == 0x1122334455667788ull);
	assert_true(EVAL(0, DW_OP_breg7, 8, DW_OP_deref_size, 2) == 0x7788);
	EVAL(-EINVAL, DW_OP_breg7, 8, DW_OP_deref_size, 9);
	EVAL(-EFAULT, DW_OP_lit0, DW_OP_deref);
	/* Truncated operands, LEB128 over 64 bits, unsupported operations. */
	EVAL(-EINVAL, DW_OP_const4u, 1, 2);
	EVAL(-EINVAL, DW_OP_constu, 0x80, 0x80);
	EVAL(-EINVAL, DW_OP_constu, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f);
	assert_true(EVAL(0, DW_OP_constu, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01) == UINT64_MAX);
	assert_true(EVAL(0, DW_OP_consts, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f) ==
		    1ull << 63);
	EVAL(-EINVAL, DW_OP_consts, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x3f);
	EVAL(-ENOTSUP, DW_OP_reg0);
	EVAL(-ENOTSUP, DW_OP_lit1, DW_OP_stack_value);
	EVAL(-ENOTSUP, DW_OP_call_frame_cfa);
	/* The stack is bounded. */
	uint8_t many[STB_DWEXPR_STACK + 1];
	memset(many, DW_OP_lit1, sizeof(many));
	eval(many, STB_DWEXPR_STACK, 0);
	eval(many, sizeof(many), -EINVAL);
}

/* Hostile CFI: every error is an error, never a wrong row or UB. */
static void test_hostile(void **state)
{
	struct stb_cfi_row row;
	const uint64_t pc = 0x700000;
	struct buf o;
	struct stb_cfi_bytes b;
	size_t c, f;

	(void)state;
	/* offset x data alignment overflows int64 */
	o.n = 0;
	c = cie(&o, std_init, sizeof(std_init));
	const uint8_t big_off[] = { DW_CFA_offset_extended, STB_CFI_RBX, 0xff, 0xff, 0xff, 0xff, 0xff,
				    0xff, 0xff, 0xff, 0x3f };
	f = fde(&o, c, pc, 0x10, big_off, sizeof(big_off));
	b = view(&o);
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc, &row), -EINVAL);
	/* same with the signed forms */
	o.n = 0;
	c = cie(&o, std_init, sizeof(std_init));
	const uint8_t big_sf[] = { DW_CFA_def_cfa_sf, STB_CFI_RSP, 0x80, 0x80, 0x80, 0x80, 0x80,
				   0x80, 0x80, 0x80, 0x80, 0x7f };
	f = fde(&o, c, pc, 0x10, big_sf, sizeof(big_sf));
	b = view(&o);
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc, &row), -EINVAL);
	/* an advance that wraps the address space */
	o.n = 0;
	c = cie(&o, std_init, sizeof(std_init));
	const uint8_t wrap[] = { DW_CFA_advance_loc4, 0xff, 0xff, 0xff, 0xff, DW_CFA_advance_loc4, 0xff,
				 0xff, 0xff, 0xff };
	f = fde(&o, c, UINT64_MAX - 0x20, 0x10, wrap, sizeof(wrap));
	b = view(&o);
	assert_int_equal(stb_cfi_row(&b, BASE + f, UINT64_MAX - 0x18, &row), -EINVAL);
	/* restore without state, restore in a CIE, a CFA register out of range */
	o.n = 0;
	c = cie(&o, std_init, sizeof(std_init));
	const uint8_t rs[] = { DW_CFA_restore_state };
	f = fde(&o, c, pc, 0x10, rs, sizeof(rs));
	b = view(&o);
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc, &row), -EINVAL);
	o.n = 0;
	const uint8_t cie_restore[] = { DW_CFA_def_cfa, STB_CFI_RSP, 8, DW_CFA_restore | 3 };
	c = cie(&o, cie_restore, sizeof(cie_restore));
	f = fde(&o, c, pc, 0x10, NULL, 0);
	b = view(&o);
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc, &row), -EINVAL);
	o.n = 0;
	c = cie(&o, std_init, sizeof(std_init));
	const uint8_t reg99[] = { DW_CFA_def_cfa, 99, 8 };
	f = fde(&o, c, pc, 0x10, reg99, sizeof(reg99));
	b = view(&o);
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc, &row), -ENOTSUP);
	/* remember_state nesting is bounded */
	o.n = 0;
	c = cie(&o, std_init, sizeof(std_init));
	uint8_t deep[STB_CFI_MAX_STATES + 1];
	memset(deep, DW_CFA_remember_state, sizeof(deep));
	f = fde(&o, c, pc, 0x10, deep, sizeof(deep));
	b = view(&o);
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc, &row), -ENOTSUP);
	/* an expression longer than the FDE */
	o.n = 0;
	c = cie(&o, std_init, sizeof(std_init));
	const uint8_t longexpr[] = { DW_CFA_def_cfa_expression, 100, DW_OP_lit0 };
	f = fde(&o, c, pc, 0x10, longexpr, sizeof(longexpr));
	b = view(&o);
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc, &row), -EINVAL);
	/* a truncated buffer, a CIE pointer before it, an FDE outside it */
	o.n = 0;
	c = cie(&o, std_init, sizeof(std_init));
	f = fde(&o, c, pc, 0x10, NULL, 0);
	b = view(&o);
	b.len -= 3;
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc, &row), -EINVAL);
	b = view(&o);
	uint32_t bad = 0x10000;
	memcpy(o.b + f + 4, &bad, 4);
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc, &row), -EINVAL);
	assert_int_equal(stb_cfi_row(&b, BASE + o.n, pc, &row), -EINVAL);
	assert_int_equal(stb_cfi_row(&b, BASE - 4, pc, &row), -EINVAL);
	/* an unknown CIE augmentation, a CIE version, an RA register */
	o.n = 0;
	size_t at = o.n;
	put(&o, 4, 0);
	put(&o, 4, 0);
	put(&o, 1, 2); /* version 2 does not exist */
	bytes(&o, "", 1);
	uleb(&o, 1);
	sleb(&o, -8);
	put(&o, 1, STB_CFI_RA);
	close_entry(&o, at);
	f = fde(&o, at, pc, 0x10, NULL, 0);
	b = view(&o);
	assert_int_equal(stb_cfi_row(&b, BASE + f, pc, &row), -ENOTSUP);
}

static void test_hdr(void **state)
{
	struct buf o = { .n = 0 };
	struct stb_cfi_hdr h;
	uint64_t fde_addr;

	(void)state;
	put(&o, 1, 1);
	put(&o, 1, DW_EH_PE_pcrel | DW_EH_PE_sdata4);
	put(&o, 1, DW_EH_PE_udata4);
	put(&o, 1, DW_EH_PE_datarel | DW_EH_PE_sdata4);
	put(&o, 4, (uint32_t)(0x1000 - 4)); /* eh_frame at hdr + 0x1000 */
	put(&o, 4, 3);
	/* (initial location, FDE), relative to the header */
	put(&o, 4, 0x100); put(&o, 4, 0x1000);
	put(&o, 4, 0x200); put(&o, 4, 0x1020);
	put(&o, 4, 0x300); put(&o, 4, 0x1040);
	struct stb_cfi_bytes b = { .data = o.b, .len = o.n, .addr = 0x50000 };
	assert_int_equal(stb_cfi_hdr_parse(&b, &h), 0);
	assert_true(h.eh_frame == 0x51000);
	assert_int_equal(h.count, 3);
	assert_int_equal(stb_cfi_hdr_find(&h, 0x500ff, &fde_addr), -ENOENT);
	assert_int_equal(stb_cfi_hdr_find(&h, 0x50100, &fde_addr), 0);
	assert_true(fde_addr == 0x51000);
	assert_int_equal(stb_cfi_hdr_find(&h, 0x502ff, &fde_addr), 0);
	assert_true(fde_addr == 0x51020);
	assert_int_equal(stb_cfi_hdr_find(&h, 0x90000000, &fde_addr), 0);
	assert_true(fde_addr == 0x51040);
	/* A count larger than the table: rejected, not read past the end. */
	o.b[8] = 4;
	assert_int_equal(stb_cfi_hdr_parse(&b, &h), -EINVAL);
	o.b[8] = 3;
	o.b[3] = DW_EH_PE_udata4;
	assert_int_equal(stb_cfi_hdr_parse(&b, &h), -ENOTSUP);
	b.len = 3;
	assert_int_equal(stb_cfi_hdr_parse(&b, &h), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows_of_a_function),
		cmocka_unit_test(test_apply),
		cmocka_unit_test(test_expressions),
		cmocka_unit_test(test_expression_loop),
		cmocka_unit_test(test_dwexpr_ops),
		cmocka_unit_test(test_hostile),
		cmocka_unit_test(test_hdr),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
