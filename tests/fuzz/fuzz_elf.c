/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: runtime/stacks/unwind/elf_image.c (and cfi.c behind it) on an
 * arbitrary file: loaded as the file of an executable mapping (each
 * executable PT_LOAD's page offset, and 0) and as a memory image (the vdso
 * case), with a byte budget, its tables read at once or located first and
 * read afterwards; when tables were read, rows are looked up at
 * addresses across the executable range and applied with reads served from
 * the tables' copies.
 */
#include "fuzz.h"

#include <elf.h>
#include <string.h>

#include "unwind/cfi.h"
#include "unwind/elf_image.h"

#define MAP_START 0x555555554000ull

struct input {
	const uint8_t *p;
	size_t len;
};

static int read_at(void *arg, uint64_t off, void *dst, size_t len)
{
	const struct input *in = arg;

	if (off > in->len || len > in->len - off)
		return -5; /* -EIO: short read, as pread on a shrunk file */
	memcpy(dst, in->p + off, len);
	return 0;
}

static int read_table(void *arg, uint64_t addr, uint64_t *val)
{
	const struct stb_elf_mod *m = arg;

	if (addr >= m->eh_frame.addr && addr - m->eh_frame.addr <= m->eh_frame.len &&
	    m->eh_frame.len - (addr - m->eh_frame.addr) >= 8) {
		memcpy(val, m->eh_frame.data + (addr - m->eh_frame.addr), 8);
		return 0;
	}
	return -14;
}

static void use(struct stb_elf_mod *m)
{
	if (!m->has_table)
		return;
	struct stb_cfi_bytes ehf = {
	    .data = m->eh_frame.data, .len = m->eh_frame.len, .addr = m->eh_frame.addr};
	uint64_t span = m->exec_hi - m->exec_lo;
	for (unsigned k = 0; k < 16; k++) {
		uint64_t ip = m->exec_lo + span / 16 * k, fde;
		struct stb_cfi_row row;
		if (stb_cfi_hdr_find(&m->table, ip, &fde) < 0 ||
		    stb_cfi_row(&ehf, fde, ip, &row) < 0)
			continue;
		struct stb_cfi_regs regs = {.known = 0x1ffff};
		for (unsigned i = 0; i < STB_CFI_NREGS; i++)
			regs.r[i] = m->eh_frame.addr + i * 8;
		regs.r[STB_CFI_RA] = ip;
		stb_cfi_apply(&ehf, &row, &regs, read_table, m, 64);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct input in = {.p = data, .len = size};
	struct stb_elf_src src = {.read = read_at, .arg = &in, .size = size};
	struct stb_elf_mod m;
	uint64_t offs[9] = {0}, left;
	unsigned n = 1;

	/* Page offsets of executable PT_LOADs, as a mapping would give them. */
	if (size >= sizeof(Elf64_Ehdr)) {
		Elf64_Ehdr eh;
		memcpy(&eh, data, sizeof(eh));
		for (unsigned i = 0; i < eh.e_phnum && n < 9; i++) {
			Elf64_Phdr ph;
			uint64_t at = eh.e_phoff + (uint64_t)i * sizeof(ph);
			if (eh.e_phoff > size || at > size || size - at < sizeof(ph))
				break;
			memcpy(&ph, data + at, sizeof(ph));
			if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
				offs[n++] = ph.p_offset & ~0xfffull;
		}
	}
	for (unsigned i = 0; i < n; i++) {
		left = 1u << 20;
		if (stb_elf_mod_load(&src, MAP_START + offs[i], offs[i], &left, &m) == 0) {
			use(&m);
			stb_elf_mod_free(&m);
		}
		/* The tables located first and read afterwards (a live target's
		 * modules), from the same bytes. */
		struct stb_elf_src lazy = src;
		lazy.defer_tables = true;
		left = 1u << 20;
		if (stb_elf_mod_load(&lazy, MAP_START + offs[i], offs[i], &left, &m) == 0) {
			if (stb_elf_mod_load_tables(&src, &m) == 0)
				use(&m);
			stb_elf_mod_free(&m);
		}
	}
	src.mem_layout = true;
	left = 1u << 20;
	if (stb_elf_mod_load(&src, MAP_START, 0, &left, &m) == 0) {
		use(&m);
		stb_elf_mod_free(&m);
	}
	return 0;
}
