/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The DWARF expression evaluator of dwexpr.h: operations decoded with the
 * bounded cursor of bytes.h, a fixed 64-entry stack, an operation budget
 * (a backward DW_OP_skip ends with -E2BIG instead of looping), and
 * arithmetic on uint64_t only (no signed overflow).
 */
#include "unwind/bytes.h"
#include "unwind/dwexpr.h"

#include <dwarf.h>
#include <errno.h>

struct stack {
	uint64_t v[STB_DWEXPR_STACK];
	unsigned n;
};

static int push(struct stack *s, uint64_t v)
{
	if (s->n == STB_DWEXPR_STACK)
		return -EINVAL;
	s->v[s->n++] = v;
	return 0;
}

static int64_t as_signed(uint64_t v)
{
	int64_t s;

	__builtin_memcpy(&s, &v, sizeof(s));
	return s;
}

/* Binary operation on the two top values: a (second) op b (top). */
static int binop(uint8_t op, uint64_t a, uint64_t b, uint64_t *r)
{
	switch (op) {
	case DW_OP_and:
		*r = a & b;
		return 0;
	case DW_OP_or:
		*r = a | b;
		return 0;
	case DW_OP_xor:
		*r = a ^ b;
		return 0;
	case DW_OP_plus:
		*r = a + b;
		return 0;
	case DW_OP_minus:
		*r = a - b;
		return 0;
	case DW_OP_mul:
		*r = a * b;
		return 0;
	case DW_OP_shl:
		*r = b >= 64 ? 0 : a << b;
		return 0;
	case DW_OP_shr:
		*r = b >= 64 ? 0 : a >> b;
		return 0;
	case DW_OP_shra:
		if (b >= 64)
			*r = as_signed(a) < 0 ? UINT64_MAX : 0;
		else
			*r = as_signed(a) < 0 ? ~(~a >> b) : a >> b;
		return 0;
	case DW_OP_div:
		if (b == 0)
			return -EDOM;
		if (as_signed(b) == -1) {
			*r = 0 - a; /* INT64_MIN / -1 wraps to INT64_MIN */
			return 0;
		}
		*r = (uint64_t)(as_signed(a) / as_signed(b));
		return 0;
	case DW_OP_mod:
		if (b == 0)
			return -EDOM;
		*r = a % b; /* DWARF: unsigned modulus */
		return 0;
	case DW_OP_eq:
		*r = a == b;
		return 0;
	case DW_OP_ne:
		*r = a != b;
		return 0;
	case DW_OP_lt:
		*r = as_signed(a) < as_signed(b);
		return 0;
	case DW_OP_le:
		*r = as_signed(a) <= as_signed(b);
		return 0;
	case DW_OP_gt:
		*r = as_signed(a) > as_signed(b);
		return 0;
	case DW_OP_ge:
		*r = as_signed(a) >= as_signed(b);
		return 0;
	default:
		return -ENOTSUP;
	}
}

int stb_dwexpr_eval(const uint8_t *expr, size_t len, const struct stb_dwexpr_env *env,
		    const uint64_t *pushv, uint64_t *out)
{
	struct stack s = {.n = 0};
	struct stb_bytes c = stb_bytes_of(expr, len);
	unsigned budget = env->max_ops ? env->max_ops : STB_DWEXPR_DEFAULT_OPS;
	int ret;

	if (!expr && len)
		return -EINVAL;
	if (pushv)
		s.v[s.n++] = *pushv;
	while (c.p < c.end) {
		uint8_t op;
		uint64_t a, b, v;

		if (budget-- == 0)
			return -E2BIG;
		op = stb_bytes_u8(&c);
		if (op >= DW_OP_lit0 && op <= DW_OP_lit31) {
			ret = push(&s, op - DW_OP_lit0);
			goto next;
		}
		if (op >= DW_OP_breg0 && op <= DW_OP_breg31) {
			unsigned reg = op - DW_OP_breg0;
			int64_t off = stb_bytes_sleb(&c);
			if (c.bad)
				return -EINVAL;
			if (reg >= STB_DWEXPR_NREGS || !(env->known & (1u << reg)))
				return -ENOENT;
			ret = push(&s, env->regs[reg] + (uint64_t)off);
			goto next;
		}
		switch (op) {
		case DW_OP_addr:
			v = stb_bytes_fixed(&c, 8);
			break;
		case DW_OP_const1u:
			v = stb_bytes_fixed(&c, 1);
			break;
		case DW_OP_const1s:
			v = (uint64_t)(int64_t)(int8_t)stb_bytes_fixed(&c, 1);
			break;
		case DW_OP_const2u:
			v = stb_bytes_fixed(&c, 2);
			break;
		case DW_OP_const2s:
			v = (uint64_t)(int64_t)(int16_t)stb_bytes_fixed(&c, 2);
			break;
		case DW_OP_const4u:
			v = stb_bytes_fixed(&c, 4);
			break;
		case DW_OP_const4s:
			v = (uint64_t)(int64_t)(int32_t)stb_bytes_fixed(&c, 4);
			break;
		case DW_OP_const8u:
		case DW_OP_const8s:
			v = stb_bytes_fixed(&c, 8);
			break;
		case DW_OP_constu:
			v = stb_bytes_uleb(&c);
			break;
		case DW_OP_consts:
			v = (uint64_t)stb_bytes_sleb(&c);
			break;
		case DW_OP_bregx: {
			uint64_t reg = stb_bytes_uleb(&c);
			int64_t off = stb_bytes_sleb(&c);
			if (c.bad)
				return -EINVAL;
			if (reg >= STB_DWEXPR_NREGS || !(env->known & (1u << reg)))
				return -ENOENT;
			v = env->regs[reg] + (uint64_t)off;
			break;
		}
		case DW_OP_dup:
			if (s.n < 1)
				return -EINVAL;
			v = s.v[s.n - 1];
			break;
		case DW_OP_over:
			if (s.n < 2)
				return -EINVAL;
			v = s.v[s.n - 2];
			break;
		case DW_OP_pick: {
			uint8_t i = stb_bytes_u8(&c);
			if (c.bad || i >= s.n)
				return -EINVAL;
			v = s.v[s.n - 1 - i];
			break;
		}
		case DW_OP_drop:
			if (s.n < 1)
				return -EINVAL;
			s.n--;
			continue;
		case DW_OP_swap:
			if (s.n < 2)
				return -EINVAL;
			a = s.v[s.n - 1];
			s.v[s.n - 1] = s.v[s.n - 2];
			s.v[s.n - 2] = a;
			continue;
		case DW_OP_rot:
			if (s.n < 3)
				return -EINVAL;
			a = s.v[s.n - 1];
			s.v[s.n - 1] = s.v[s.n - 2];
			s.v[s.n - 2] = s.v[s.n - 3];
			s.v[s.n - 3] = a;
			continue;
		case DW_OP_deref:
		case DW_OP_deref_size: {
			unsigned size = 8;
			if (op == DW_OP_deref_size) {
				size = stb_bytes_u8(&c);
				if (c.bad || size == 0 || size > 8)
					return -EINVAL;
			}
			if (s.n < 1)
				return -EINVAL;
			if (!env->read)
				return -EFAULT;
			ret = env->read(env->arg, s.v[s.n - 1], &v);
			if (ret < 0)
				return ret;
			if (size < 8)
				v &= (UINT64_C(1) << (8 * size)) - 1;
			s.v[s.n - 1] = v;
			continue;
		}
		case DW_OP_abs:
			if (s.n < 1)
				return -EINVAL;
			if (as_signed(s.v[s.n - 1]) < 0)
				s.v[s.n - 1] = 0 - s.v[s.n - 1];
			continue;
		case DW_OP_neg:
			if (s.n < 1)
				return -EINVAL;
			s.v[s.n - 1] = 0 - s.v[s.n - 1];
			continue;
		case DW_OP_not:
			if (s.n < 1)
				return -EINVAL;
			s.v[s.n - 1] = ~s.v[s.n - 1];
			continue;
		case DW_OP_plus_uconst:
			v = stb_bytes_uleb(&c);
			if (c.bad || s.n < 1)
				return -EINVAL;
			s.v[s.n - 1] += v;
			continue;
		case DW_OP_and:
		case DW_OP_or:
		case DW_OP_xor:
		case DW_OP_plus:
		case DW_OP_minus:
		case DW_OP_mul:
		case DW_OP_shl:
		case DW_OP_shr:
		case DW_OP_shra:
		case DW_OP_div:
		case DW_OP_mod:
		case DW_OP_eq:
		case DW_OP_ne:
		case DW_OP_lt:
		case DW_OP_le:
		case DW_OP_gt:
		case DW_OP_ge:
			if (s.n < 2)
				return -EINVAL;
			a = s.v[s.n - 2];
			b = s.v[s.n - 1];
			ret = binop(op, a, b, &v);
			if (ret < 0)
				return ret;
			s.n--;
			s.v[s.n - 1] = v;
			continue;
		case DW_OP_skip:
		case DW_OP_bra: {
			int16_t off = (int16_t)(uint16_t)stb_bytes_fixed(&c, 2);
			if (c.bad)
				return -EINVAL;
			if (op == DW_OP_bra) {
				if (s.n < 1)
					return -EINVAL;
				if (s.v[--s.n] == 0)
					continue;
			}
			/* The target must be inside the expression (its end included). */
			size_t at = (size_t)(c.p - expr);
			if ((off < 0 && (size_t) - (int32_t)off > at) ||
			    (off > 0 && (size_t)off > len - at))
				return -EINVAL;
			c.p = expr + (off < 0 ? at - (size_t) - (int32_t)off : at + (size_t)off);
			continue;
		}
		case DW_OP_nop:
			continue;
		default:
			return -ENOTSUP;
		}
		if (c.bad)
			return -EINVAL;
		ret = push(&s, v);
	next:
		if (ret < 0 || c.bad)
			return -EINVAL;
	}
	if (c.bad || s.n == 0)
		return -EINVAL;
	*out = s.v[s.n - 1];
	return 0;
}
