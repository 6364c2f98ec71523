/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: runtime/stacks/symbols/cuindex.c and inlchain.c on an
 * arbitrary file read as an ELF object with DWARF (through libdw, as the
 * symbolizer reads a target's files): the unit index over its executable
 * segments, then at addresses across them the unit found, its line row and
 * the inlined calls there with their names and call sites.
 */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <libelf.h>

#include "symbols/cuindex.h"
#include "symbols/inlchain.h"

#define PROBES 32u

/* The index's arena: blocks freed together after the input. */
struct arena {
	void **blocks;
	size_t n, cap;
};

static void *arena_alloc(void *ctx, size_t size)
{
	struct arena *a = ctx;

	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 16;
		void **b = realloc(a->blocks, cap * sizeof(*b));
		if (!b)
			return NULL;
		a->blocks = b;
		a->cap = cap;
	}
	void *p = malloc(size ? size : 1);
	if (p)
		a->blocks[a->n++] = p;
	return p;
}

/* What the symbolizer reads of an inlined call: its name and call site. */
static size_t use_call(Dwarf_Die *cu, Dwarf_Die *call)
{
	Dwarf_Attribute a;
	Dwarf_Files *files;
	Dwarf_Word w;
	size_t nfiles, sum = 0;
	const char *name = NULL;

	if (dwarf_attr_integrate(call, DW_AT_linkage_name, &a))
		name = dwarf_formstring(&a);
	if (!name && dwarf_attr_integrate(call, DW_AT_name, &a))
		name = dwarf_formstring(&a);
	sum += name ? strlen(name) : 0;
	if (dwarf_getsrcfiles(cu, &files, &nfiles) == 0 && dwarf_attr(call, DW_AT_call_file, &a) &&
	    dwarf_formudata(&a, &w) == 0 && w < nfiles) {
		const char *file = dwarf_filesrc(files, w, NULL, NULL);
		sum += file ? strlen(file) : 0;
	}
	if (dwarf_attr(call, DW_AT_call_line, &a) && dwarf_formudata(&a, &w) == 0)
		sum += (size_t)w;
	return sum;
}

static void probe(const struct stb_cuidx *x, uint64_t addr)
{
	Dwarf_Die cu, chain[STB_INLCHAIN_MAX_DEPTH];
	volatile size_t sink = 0;

	if (stb_cuidx_find(x, addr, &cu) != 0)
		return;
	Dwarf_Line *l = dwarf_getsrc_die(&cu, addr);
	int line = 0;
	if (l && dwarf_lineno(l, &line) == 0) {
		const char *file = dwarf_linesrc(l, NULL, NULL);
		sink += (file ? strlen(file) : 0) + (size_t)line;
	}
	int n = stb_inlchain_find(&cu, addr, chain, STB_INLCHAIN_MAX_DEPTH, NULL);
	for (int i = 0; i < n; i++)
		sink += use_call(&cu, &chain[i]);
	(void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct stb_cuidx_span text[STB_CUIDX_MAX_TEXT];
	struct arena a = {0};
	char *copy;
	Elf *elf;
	Dwarf *dw = NULL;

	elf_version(EV_CURRENT);
	copy = malloc(size ? size : 1);
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	elf = elf_memory(copy, size);
	if (!elf)
		goto cleanup;
	dw = dwarf_begin_elf(elf, DWARF_C_READ, NULL);
	if (!dw)
		goto cleanup;
	size_t nt = stb_cuidx_text(elf, 0, text);
	struct stb_cuidx *x = stb_cuidx_build(dw, text, nt, arena_alloc, &a);
	if (!x)
		goto cleanup;
	for (size_t i = 0; i < nt; i++) {
		uint64_t span = text[i].hi - text[i].lo;
		for (unsigned k = 0; k < PROBES; k++)
			probe(x, text[i].lo + span / PROBES * k + k);
		probe(x, text[i].hi - 1);
	}
	probe(x, 0);
	probe(x, UINT64_MAX);
cleanup:
	if (dw)
		dwarf_end(dw);
	if (elf)
		elf_end(elf);
	for (size_t i = 0; i < a.n; i++)
		free(a.blocks[i]);
	free(a.blocks);
	free(copy);
	return 0;
}
