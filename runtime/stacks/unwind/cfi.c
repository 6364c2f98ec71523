/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CFI reader of cfi.h: .eh_frame_hdr search, CIE and FDE parsing, the
 * CFA program interpreter (every DW_CFA_* of DWARF 5 and the GNU ones that
 * x86-64 code uses), and applying a row. Offsets and lengths are checked
 * against the buffer before use; factored offsets and advances use checked
 * multiplication and addition.
 */
#include "unwind/bytes.h"
#include "unwind/cfi.h"

#include <dwarf.h>
#include <errno.h>
#include <string.h>

/* ------------------------------------------------------------ pointers */

int stb_cfi_read_ptr(const struct stb_cfi_bytes *b, size_t *pos, uint8_t enc, uint64_t datarel,
		     uint64_t *out)
{
	struct stb_bytes c;
	uint64_t at, v;

	if (*pos > b->len)
		return -EINVAL;
	c = stb_bytes_of(b->data + *pos, b->len - *pos);
	at = b->addr + *pos;
	if (enc == DW_EH_PE_omit || (enc & DW_EH_PE_indirect))
		return -ENOTSUP;
	switch (enc & 0x0f) {
	case DW_EH_PE_absptr:
		v = stb_bytes_fixed(&c, 8);
		break;
	case DW_EH_PE_uleb128:
		v = stb_bytes_uleb(&c);
		break;
	case DW_EH_PE_udata2:
		v = stb_bytes_fixed(&c, 2);
		break;
	case DW_EH_PE_udata4:
		v = stb_bytes_fixed(&c, 4);
		break;
	case DW_EH_PE_udata8:
		v = stb_bytes_fixed(&c, 8);
		break;
	case DW_EH_PE_sleb128:
		v = (uint64_t)stb_bytes_sleb(&c);
		break;
	case DW_EH_PE_sdata2:
		v = (uint64_t)(int64_t)(int16_t)stb_bytes_fixed(&c, 2);
		break;
	case DW_EH_PE_sdata4:
		v = (uint64_t)(int64_t)(int32_t)stb_bytes_fixed(&c, 4);
		break;
	case DW_EH_PE_sdata8:
		v = stb_bytes_fixed(&c, 8);
		break;
	default:
		return -ENOTSUP;
	}
	if (c.bad)
		return -EINVAL;
	switch (enc & 0x70) {
	case DW_EH_PE_absptr:
		break;
	case DW_EH_PE_pcrel:
		v += at;
		break; /* wraps like the hardware */
	case DW_EH_PE_datarel:
		v += datarel;
		break;
	default:
		return -ENOTSUP;
	}
	*pos += (size_t)(c.p - (b->data + *pos));
	*out = v;
	return 0;
}

/* ------------------------------------------------------------ .eh_frame_hdr */

/* The version, the encodings and eh_frame_ptr; *pos after it. */
static int hdr_head(const struct stb_cfi_bytes *b, size_t *pos, uint64_t *eh_frame)
{
	if (b->len < 4 || b->data[0] != 1)
		return -EINVAL;
	if (b->data[1] == DW_EH_PE_omit || b->data[2] == DW_EH_PE_omit ||
	    b->data[3] != (DW_EH_PE_datarel | DW_EH_PE_sdata4) || (b->data[2] & 0x70) != 0)
		return -ENOTSUP;
	*pos = 4;
	return stb_cfi_read_ptr(b, pos, b->data[1], b->addr, eh_frame);
}

int stb_cfi_hdr_eh_frame(const struct stb_cfi_bytes *b, uint64_t *eh_frame)
{
	size_t pos;
	return hdr_head(b, &pos, eh_frame);
}

int stb_cfi_hdr_parse(const struct stb_cfi_bytes *b, struct stb_cfi_hdr *out)
{
	size_t pos;
	uint64_t eh_frame, count;
	int ret;

	ret = hdr_head(b, &pos, &eh_frame);
	if (ret == 0)
		ret = stb_cfi_read_ptr(b, &pos, b->data[2], b->addr, &count);
	if (ret < 0)
		return ret;
	if (count == 0 || count > (b->len - pos) / 8)
		return -EINVAL;
	out->hdr_addr = b->addr;
	out->eh_frame = eh_frame;
	out->table_addr = b->addr + pos;
	out->count = count;
	out->table = b->data + pos;
	return 0;
}

static int32_t rd_s32(const uint8_t *p)
{
	uint32_t v =
	    (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	int32_t s;

	memcpy(&s, &v, sizeof(s));
	return s;
}

int stb_cfi_hdr_find(const struct stb_cfi_hdr *h, uint64_t ip, uint64_t *fde_addr)
{
	uint64_t lo = 0, hi = h->count, d = ip - h->hdr_addr;
	int64_t rel;

	memcpy(&rel, &d, sizeof(rel));
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (rel < (int64_t)rd_s32(h->table + mid * 8))
			hi = mid;
		else
			lo = mid + 1;
	}
	if (lo == 0)
		return -ENOENT;
	*fde_addr = h->hdr_addr + (uint64_t)(int64_t)rd_s32(h->table + (lo - 1) * 8 + 4);
	return 0;
}

/* ------------------------------------------------------------ CIE / FDE */

struct cie {
	uint64_t caf; /* code alignment factor */
	int64_t daf;  /* data alignment factor */
	uint8_t fde_enc;
	bool z, signal;
	size_t insn, insn_end; /* initial instructions: offsets in b */
};

/* An entry (CIE or FDE) at offset off: its body [*body, *end). */
static int entry_at(const struct stb_cfi_bytes *b, size_t off, size_t *body, size_t *end)
{
	struct stb_bytes c;
	uint64_t len;

	if (off > b->len || b->len - off < 4)
		return -EINVAL;
	c = stb_bytes_of(b->data + off, 4);
	len = stb_bytes_fixed(&c, 4);
	if (len == 0)
		return -EINVAL; /* terminator */
	if (len == 0xffffffffu)
		return -ENOTSUP; /* 64-bit DWARF: not produced for x86-64 .eh_frame */
	if (len > b->len - off - 4 || len < 4)
		return -EINVAL;
	*body = off + 4;
	*end = off + 4 + (size_t)len;
	return 0;
}

static int parse_cie(const struct stb_cfi_bytes *b, size_t off, struct cie *ci)
{
	size_t body, end, pos;
	struct stb_bytes c;
	const uint8_t *aug, *nul;
	uint8_t version;
	uint64_t ra;
	int ret;

	ret = entry_at(b, off, &body, &end);
	if (ret < 0)
		return ret;
	c = stb_bytes_of(b->data + body, end - body);
	if (stb_bytes_fixed(&c, 4) != 0)
		return -EINVAL; /* not a CIE */
	version = stb_bytes_u8(&c);
	if (c.bad)
		return -EINVAL;
	if (version != 1 && version != 3 && version != 4)
		return -ENOTSUP;
	aug = c.p;
	nul = memchr(c.p, 0, stb_bytes_left(&c));
	if (!nul)
		return -EINVAL;
	c.p = nul + 1;
	if (aug[0] != 0 && aug[0] != 'z')
		return -ENOTSUP; /* "eh" and other pre-'z' augmentations */
	if (version == 4 && (stb_bytes_u8(&c) != 8 || stb_bytes_u8(&c) != 0))
		return -ENOTSUP;
	memset(ci, 0, sizeof(*ci));
	ci->fde_enc = DW_EH_PE_absptr;
	ci->caf = stb_bytes_uleb(&c);
	ci->daf = stb_bytes_sleb(&c);
	ra = version == 1 ? stb_bytes_u8(&c) : stb_bytes_uleb(&c);
	if (c.bad)
		return -EINVAL;
	if (ra != STB_CFI_RA)
		return -ENOTSUP;
	if (aug[0] == 'z') {
		uint64_t alen = stb_bytes_uleb(&c);
		if (c.bad || alen > stb_bytes_left(&c))
			return -EINVAL;
		struct stb_cfi_bytes a = {.data = b->data,
					  .len = (size_t)(c.p - b->data) + (size_t)alen,
					  .addr = b->addr};
		pos = (size_t)(c.p - b->data);
		ci->z = true;
		for (const uint8_t *q = aug + 1; *q; q++) {
			uint64_t ignored;
			if (*q == 'R' || *q == 'L' || *q == 'P') {
				if (pos >= a.len)
					return -EINVAL;
				uint8_t enc = a.data[pos++];
				if (*q == 'R')
					ci->fde_enc = enc;
				if (*q == 'P') {
					/* Only skipped: the personality is not needed. */
					ret = stb_cfi_read_ptr(&a, &pos, enc & 0x7f, 0, &ignored);
					if (ret < 0)
						return ret;
				}
			} else if (*q == 'S') {
				ci->signal = true;
			} else if (*q != 'B') {
				break; /* unknown: the length says where its data ends */
			}
		}
		c.p += alen;
	}
	if ((ci->fde_enc & 0x70) != DW_EH_PE_absptr && (ci->fde_enc & 0x70) != DW_EH_PE_pcrel)
		return -ENOTSUP;
	ci->insn = (size_t)(c.p - b->data);
	ci->insn_end = end;
	return 0;
}

/* ------------------------------------------------------------ CFA programs */

struct state {
	bool cfa_is_expr;
	uint8_t cfa_reg;
	int64_t cfa_off;
	uint32_t cfa_expr_off, cfa_expr_len;
	struct stb_cfi_rule reg[STB_CFI_NREGS];
};

struct prog {
	const struct stb_cfi_bytes *b;
	const struct cie *ci;
	const struct state *init; /* NULL while running the CIE */
	uint64_t loc, ip, pc_end;
	uint64_t *pc_lo, *pc_hi;
};

/* u (an unsigned LEB128) times the data alignment factor. */
static int factored(uint64_t u, int64_t daf, int64_t *out)
{
	if (u > (uint64_t)INT64_MAX)
		return -EINVAL;
	return __builtin_mul_overflow((int64_t)u, daf, out) ? -EINVAL : 0;
}

static int sfactored(int64_t s, int64_t daf, int64_t *out)
{
	return __builtin_mul_overflow(s, daf, out) ? -EINVAL : 0;
}

/* Moves loc to `to`; returns 1 when the row for ip is complete. */
static int advance_to(struct prog *pr, uint64_t to)
{
	if (!pr->init)
		return -ENOTSUP; /* location changes inside a CIE */
	if (to < pr->loc)
		return -EINVAL;
	if (to > pr->ip) {
		if (to < *pr->pc_hi)
			*pr->pc_hi = to;
		return 1;
	}
	pr->loc = to;
	*pr->pc_lo = to;
	return 0;
}

static int advance_by(struct prog *pr, uint64_t n)
{
	uint64_t delta, to;

	if (__builtin_mul_overflow(n, pr->ci->caf, &delta) ||
	    __builtin_add_overflow(pr->loc, delta, &to))
		return -EINVAL;
	return advance_to(pr, to);
}

/* An expression operand: length + bytes, located in b. */
static int expr_operand(const struct stb_cfi_bytes *b, struct stb_bytes *c, uint32_t *off,
			uint32_t *len)
{
	uint64_t n = stb_bytes_uleb(c);

	if (c->bad || n > stb_bytes_left(c))
		return -EINVAL;
	*off = (uint32_t)(c->p - b->data);
	*len = (uint32_t)n;
	c->p += n;
	return 0;
}

static void set_rule(struct state *st, uint64_t reg, uint8_t how, int64_t off)
{
	if (reg >= STB_CFI_NREGS)
		return; /* vector and other registers: not needed to unwind */
	st->reg[reg] = (struct stb_cfi_rule){.how = how, .off = off};
}

/* Runs instructions [start, end) of b on *st. Returns 0 when they ran out or
 * the row for pr->ip is complete, else -errno. */
static int run(struct prog *pr, size_t start, size_t end, struct state *st)
{
	const struct stb_cfi_bytes *b = pr->b;
	struct stb_bytes c = stb_bytes_of(b->data + start, end - start);
	struct state saved[STB_CFI_MAX_STATES];
	unsigned depth = 0;
	int ret = 0;

	while (ret == 0 && c.p < c.end) {
		uint8_t op = stb_bytes_u8(&c);
		uint64_t reg, u;
		int64_t off;
		uint32_t eo, el;

		switch (op & 0xc0) {
		case DW_CFA_advance_loc:
			ret = advance_by(pr, op & 0x3f);
			if (ret > 0)
				return 0;
			continue;
		case DW_CFA_offset:
			ret = factored(stb_bytes_uleb(&c), pr->ci->daf, &off);
			if (ret == 0)
				set_rule(st, op & 0x3f, STB_CFI_OFFSET, off);
			goto check;
		case DW_CFA_restore:
			reg = op & 0x3f;
			goto restore;
		default:
			break;
		}
		switch (op) {
		case DW_CFA_nop:
			continue;
		case DW_CFA_set_loc: {
			size_t pos = (size_t)(c.p - b->data);
			uint64_t to;
			ret = stb_cfi_read_ptr(b, &pos, pr->ci->fde_enc, 0, &to);
			if (ret < 0 || pos > end)
				return ret < 0 ? ret : -EINVAL;
			c.p = b->data + pos;
			ret = advance_to(pr, to);
			if (ret > 0)
				return 0;
			continue;
		}
		case DW_CFA_advance_loc1:
		case DW_CFA_advance_loc2:
		case DW_CFA_advance_loc4:
			u = stb_bytes_fixed(&c, op == DW_CFA_advance_loc1   ? 1
						: op == DW_CFA_advance_loc2 ? 2
									    : 4);
			if (c.bad)
				return -EINVAL;
			ret = advance_by(pr, u);
			if (ret > 0)
				return 0;
			continue;
		case DW_CFA_offset_extended:
			reg = stb_bytes_uleb(&c);
			ret = factored(stb_bytes_uleb(&c), pr->ci->daf, &off);
			if (ret == 0 && !c.bad)
				set_rule(st, reg, STB_CFI_OFFSET, off);
			goto check;
		case DW_CFA_offset_extended_sf:
			reg = stb_bytes_uleb(&c);
			ret = sfactored(stb_bytes_sleb(&c), pr->ci->daf, &off);
			if (ret == 0 && !c.bad)
				set_rule(st, reg, STB_CFI_OFFSET, off);
			goto check;
		case DW_CFA_GNU_negative_offset_extended:
			reg = stb_bytes_uleb(&c);
			ret = factored(stb_bytes_uleb(&c), pr->ci->daf, &off);
			if (ret == 0 && off == INT64_MIN)
				ret = -EINVAL;
			if (ret == 0 && !c.bad)
				set_rule(st, reg, STB_CFI_OFFSET, -off);
			goto check;
		case DW_CFA_val_offset:
			reg = stb_bytes_uleb(&c);
			ret = factored(stb_bytes_uleb(&c), pr->ci->daf, &off);
			if (ret == 0 && !c.bad)
				set_rule(st, reg, STB_CFI_VAL_OFFSET, off);
			goto check;
		case DW_CFA_val_offset_sf:
			reg = stb_bytes_uleb(&c);
			ret = sfactored(stb_bytes_sleb(&c), pr->ci->daf, &off);
			if (ret == 0 && !c.bad)
				set_rule(st, reg, STB_CFI_VAL_OFFSET, off);
			goto check;
		case DW_CFA_restore_extended:
			reg = stb_bytes_uleb(&c);
			if (c.bad)
				return -EINVAL;
			goto restore;
		case DW_CFA_undefined:
		case DW_CFA_same_value:
			reg = stb_bytes_uleb(&c);
			if (!c.bad)
				set_rule(st, reg,
					 op == DW_CFA_undefined ? STB_CFI_UNDEF : STB_CFI_SAME, 0);
			goto check;
		case DW_CFA_register:
			reg = stb_bytes_uleb(&c);
			u = stb_bytes_uleb(&c);
			if (c.bad)
				return -EINVAL;
			if (reg < STB_CFI_NREGS) {
				if (u >= STB_CFI_NREGS) {
					if (reg == STB_CFI_RA)
						return -ENOTSUP;
					set_rule(st, reg, STB_CFI_UNDEF, 0);
				} else {
					st->reg[reg] = (struct stb_cfi_rule){.how = STB_CFI_REG,
									     .reg = (uint8_t)u};
				}
			}
			continue;
		case DW_CFA_remember_state:
			if (depth == STB_CFI_MAX_STATES)
				return -ENOTSUP;
			saved[depth++] = *st;
			continue;
		case DW_CFA_restore_state:
			if (depth == 0)
				return -EINVAL;
			*st = saved[--depth];
			continue;
		case DW_CFA_def_cfa:
		case DW_CFA_def_cfa_sf:
			reg = stb_bytes_uleb(&c);
			if (op == DW_CFA_def_cfa) {
				u = stb_bytes_uleb(&c);
				ret = u > (uint64_t)INT64_MAX ? -EINVAL : 0;
				off = (int64_t)(u & (uint64_t)INT64_MAX);
			} else {
				ret = sfactored(stb_bytes_sleb(&c), pr->ci->daf, &off);
			}
			if (c.bad || ret < 0)
				return -EINVAL;
			if (reg >= STB_CFI_NREGS)
				return -ENOTSUP;
			st->cfa_is_expr = false;
			st->cfa_reg = (uint8_t)reg;
			st->cfa_off = off;
			continue;
		case DW_CFA_def_cfa_register:
			reg = stb_bytes_uleb(&c);
			if (c.bad || st->cfa_is_expr)
				return -EINVAL;
			if (reg >= STB_CFI_NREGS)
				return -ENOTSUP;
			st->cfa_reg = (uint8_t)reg;
			continue;
		case DW_CFA_def_cfa_offset:
		case DW_CFA_def_cfa_offset_sf:
			if (op == DW_CFA_def_cfa_offset) {
				u = stb_bytes_uleb(&c);
				ret = u > (uint64_t)INT64_MAX ? -EINVAL : 0;
				off = (int64_t)(u & (uint64_t)INT64_MAX);
			} else {
				ret = sfactored(stb_bytes_sleb(&c), pr->ci->daf, &off);
			}
			if (c.bad || ret < 0 || st->cfa_is_expr)
				return -EINVAL;
			st->cfa_off = off;
			continue;
		case DW_CFA_def_cfa_expression:
			ret = expr_operand(b, &c, &eo, &el);
			if (ret < 0)
				return ret;
			st->cfa_is_expr = true;
			st->cfa_expr_off = eo;
			st->cfa_expr_len = el;
			continue;
		case DW_CFA_expression:
		case DW_CFA_val_expression:
			reg = stb_bytes_uleb(&c);
			if (c.bad)
				return -EINVAL;
			ret = expr_operand(b, &c, &eo, &el);
			if (ret < 0)
				return ret;
			if (reg < STB_CFI_NREGS)
				st->reg[reg] = (struct stb_cfi_rule){.how = op == DW_CFA_expression
										? STB_CFI_EXPR
										: STB_CFI_VAL_EXPR,
								     .expr_off = eo,
								     .expr_len = el};
			continue;
		case DW_CFA_GNU_args_size:
			stb_bytes_uleb(&c);
			goto check;
		default:
			return -ENOTSUP; /* DW_CFA_GNU_window_save, vendor extensions */
		}
	restore:
		if (!pr->init)
			return -EINVAL; /* restore inside a CIE */
		if (reg < STB_CFI_NREGS)
			st->reg[reg] = pr->init->reg[reg];
		continue;
	check:
		if (c.bad)
			return -EINVAL;
	}
	return ret < 0 ? ret : 0;
}

int stb_cfi_row(const struct stb_cfi_bytes *b, uint64_t fde_addr, uint64_t ip,
		struct stb_cfi_row *row)
{
	size_t off, body, end, pos;
	uint64_t cie_ptr, pc_begin, pc_range;
	struct stb_bytes c;
	struct cie ci;
	struct state init, st;
	struct prog pr;
	int ret;

	if (b->len > UINT32_MAX || fde_addr < b->addr || fde_addr - b->addr >= b->len)
		return b->len > UINT32_MAX ? -ENOTSUP : -EINVAL;
	off = (size_t)(fde_addr - b->addr);
	ret = entry_at(b, off, &body, &end);
	if (ret < 0)
		return ret;
	c = stb_bytes_of(b->data + body, end - body);
	cie_ptr = stb_bytes_fixed(&c, 4);
	if (cie_ptr == 0 || cie_ptr > body)
		return -EINVAL; /* a CIE, or a CIE pointer before the buffer */
	ret = parse_cie(b, body - (size_t)cie_ptr, &ci);
	if (ret < 0)
		return ret;
	pos = body + 4;
	ret = stb_cfi_read_ptr(b, &pos, ci.fde_enc, 0, &pc_begin);
	if (ret == 0)
		ret = stb_cfi_read_ptr(b, &pos, ci.fde_enc & 0x0f, 0, &pc_range);
	if (ret < 0)
		return ret;
	if (pos > end)
		return -EINVAL;
	if (ip < pc_begin || ip - pc_begin >= pc_range)
		return -ENOENT;
	if (ci.z) {
		c = stb_bytes_of(b->data + pos, end - pos);
		uint64_t alen = stb_bytes_uleb(&c);
		if (c.bad || !stb_bytes_skip(&c, alen))
			return -EINVAL;
		pos = (size_t)(c.p - b->data);
	}

	memset(row, 0, sizeof(*row));
	row->pc_lo = pc_begin;
	row->pc_hi = pc_range > UINT64_MAX - pc_begin ? UINT64_MAX : pc_begin + pc_range;
	row->fn_lo = row->pc_lo;
	row->fn_hi = row->pc_hi;
	memset(&init, 0, sizeof(init));
	init.cfa_reg = STB_CFI_RSP;
	pr = (struct prog){.b = b,
			   .ci = &ci,
			   .init = NULL,
			   .loc = pc_begin,
			   .ip = ip,
			   .pc_lo = &row->pc_lo,
			   .pc_hi = &row->pc_hi};
	ret = run(&pr, ci.insn, ci.insn_end, &init);
	if (ret < 0)
		return ret;
	st = init;
	pr.init = &init;
	ret = run(&pr, pos, end, &st);
	if (ret < 0)
		return ret;
	row->cfa_is_expr = st.cfa_is_expr;
	row->cfa_reg = st.cfa_reg;
	row->cfa_off = st.cfa_off;
	row->cfa_expr_off = st.cfa_expr_off;
	row->cfa_expr_len = st.cfa_expr_len;
	memcpy(row->reg, st.reg, sizeof(row->reg));
	row->signal_frame = ci.signal;
	return 0;
}

/* ------------------------------------------------------------ applying */

int stb_cfi_apply(const struct stb_cfi_bytes *b, const struct stb_cfi_row *row,
		  struct stb_cfi_regs *regs, stb_dwexpr_read_fn read, void *arg, unsigned max_ops)
{
	struct stb_dwexpr_env env = {
	    .regs = regs->r, .known = regs->known, .read = read, .arg = arg, .max_ops = max_ops};
	struct stb_cfi_regs out = {.known = 0};
	uint64_t cfa;
	int ret;

	if (row->reg[STB_CFI_RA].how == STB_CFI_UNDEF)
		return 0;
	if (row->cfa_is_expr) {
		if ((uint64_t)row->cfa_expr_off + row->cfa_expr_len > b->len)
			return -EINVAL;
		ret = stb_dwexpr_eval(b->data + row->cfa_expr_off, row->cfa_expr_len, &env, NULL,
				      &cfa);
		if (ret < 0)
			return ret;
	} else {
		if (row->cfa_reg >= STB_CFI_NREGS || !(regs->known & (1u << row->cfa_reg)))
			return -ENOENT;
		cfa = regs->r[row->cfa_reg] + (uint64_t)row->cfa_off;
	}
	for (unsigned i = 0; i < STB_CFI_NREGS; i++) {
		const struct stb_cfi_rule *r = &row->reg[i];
		uint64_t v = 0, a;

		ret = 0;
		switch (r->how) {
		case STB_CFI_SAME:
			if (i == STB_CFI_RSP) {
				v = cfa; /* the caller's stack pointer is the CFA */
			} else if (regs->known & (1u << i)) {
				v = regs->r[i];
			} else {
				ret = -ENOENT;
			}
			break;
		case STB_CFI_UNDEF:
			ret = -ENOENT;
			break;
		case STB_CFI_OFFSET:
			ret = read ? read(arg, cfa + (uint64_t)r->off, &v) : -EFAULT;
			break;
		case STB_CFI_VAL_OFFSET:
			v = cfa + (uint64_t)r->off;
			break;
		case STB_CFI_REG:
			if (r->reg < STB_CFI_NREGS && (regs->known & (1u << r->reg)))
				v = regs->r[r->reg];
			else
				ret = -ENOENT;
			break;
		case STB_CFI_EXPR:
		case STB_CFI_VAL_EXPR:
			if ((uint64_t)r->expr_off + r->expr_len > b->len)
				return -EINVAL;
			ret = stb_dwexpr_eval(b->data + r->expr_off, r->expr_len, &env, &cfa, &a);
			if (ret == 0 && r->how == STB_CFI_EXPR)
				ret = read ? read(arg, a, &v) : -EFAULT;
			else if (ret == 0)
				v = a;
			break;
		default:
			return -EINVAL;
		}
		if (ret == 0) {
			out.r[i] = v;
			out.known |= 1u << i;
		} else if (i == STB_CFI_RA) {
			return ret; /* no return address: no caller */
		}
	}
	*regs = out;
	return 1;
}
