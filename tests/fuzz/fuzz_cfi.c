/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: runtime/stacks/unwind/cfi.c and dwexpr.c on arbitrary .eh_frame
 * bytes. Input: 4 bytes (a selector, little-endian) then the section, at
 * target address BASE. Every entry found by walking the lengths is tried
 * as an FDE at a few addresses around its initial location (read as the
 * usual pc-relative sdata4), each row found is applied to a register set
 * with reads served from the input, and the section is also evaluated as
 * one DWARF expression.
 */
#include "fuzz.h"

#include <string.h>

#include "unwind/cfi.h"
#include "unwind/dwexpr.h"

#define BASE 0x7f0000001000ull
#define MAX_ENTRIES 256u

struct input {
	const uint8_t *p;
	size_t len;
};

static int read_input(void *arg, uint64_t addr, uint64_t *val)
{
	const struct input *in = arg;

	if (addr < BASE || addr - BASE > in->len || in->len - (addr - BASE) < 8)
		return -14; /* -EFAULT */
	memcpy(val, in->p + (addr - BASE), 8);
	return 0;
}

static void try_row(const struct stb_cfi_bytes *b, uint64_t fde, uint64_t ip, uint32_t sel,
		    struct input *in)
{
	struct stb_cfi_row row;
	struct stb_cfi_regs regs = {.known = sel | 1u << STB_CFI_RSP | 1u << STB_CFI_RA};

	if (stb_cfi_row(b, fde, ip, &row) != 0)
		return;
	for (unsigned i = 0; i < STB_CFI_NREGS; i++)
		regs.r[i] = BASE + (uint64_t)((sel >> (i % 24)) & 0xff) * 8;
	regs.r[STB_CFI_RA] = ip;
	stb_cfi_apply(b, &row, &regs, read_input, in, 64);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t sel;

	if (size < 4)
		return 0;
	memcpy(&sel, data, 4);
	struct input in = {.p = data + 4, .len = size - 4};
	struct stb_cfi_bytes b = {.data = in.p, .len = in.len, .addr = BASE};

	/* Walk the entries (length, then CIE id / CIE pointer). */
	size_t off = 0;
	for (unsigned n = 0; n < MAX_ENTRIES && off + 8 <= in.len; n++) {
		uint32_t len, id;
		memcpy(&len, in.p + off, 4);
		memcpy(&id, in.p + off + 4, 4);
		if (len == 0 || len == 0xffffffffu || len > in.len - off - 4)
			break;
		if (id != 0 && off + 12 <= in.len) {
			int32_t rel;
			memcpy(&rel, in.p + off + 8, 4);
			uint64_t pc = BASE + off + 8 + (uint64_t)(int64_t)rel;
			try_row(&b, BASE + off, pc, sel, &in);
			try_row(&b, BASE + off, pc + (sel & 0xff), sel, &in);
			try_row(&b, BASE + off, pc + (sel >> 8), sel, &in);
		}
		off += 4 + (size_t)len;
	}
	/* An entry at an arbitrary offset (the hdr table could point anywhere). */
	try_row(&b, BASE + (sel % (in.len + 1)), BASE + (sel >> 4), sel, &in);

	/* The bytes as one expression, with and without a pushed value. */
	uint64_t regs[STB_DWEXPR_NREGS], out;
	for (unsigned i = 0; i < STB_DWEXPR_NREGS; i++)
		regs[i] = BASE + i * 16;
	struct stb_dwexpr_env env = {
	    .regs = regs, .known = sel, .read = read_input, .arg = &in, .max_ops = 1000};
	uint64_t push = BASE + (sel & 0xfff);
	stb_dwexpr_eval(in.p, in.len, &env, NULL, &out);
	stb_dwexpr_eval(in.p, in.len, &env, &push, &out);

	/* The bytes as an .eh_frame_hdr. */
	struct stb_cfi_hdr h;
	uint64_t fde;
	if (stb_cfi_hdr_parse(&b, &h) == 0 && stb_cfi_hdr_find(&h, BASE + sel, &fde) == 0)
		try_row(&b, fde, BASE + sel, sel, &in);
	return 0;
}
