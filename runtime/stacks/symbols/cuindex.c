/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The compile-unit index of one module (cuindex.h): every unit's ranges of
 * code, sorted by start with the running maximum of their ends, so that the
 * ranges containing an address are found by one binary search and a short
 * walk back (as symindex.c finds symbols).
 */
#include "symbols/cuindex.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dwarf.h>
#include <gelf.h>
#include <limits.h>

/* Ranges looked at, walking back from the last one starting at or below an
 * address, before a lookup gives up (nested ranges of hostile DWARF). */
#define CUIDX_MAX_WALK 64u

struct cu_range {
	uint64_t lo, hi; /* [lo, hi) */
	uint32_t unit;   /* index into stb_cuidx.units */
	uint32_t order;  /* the order it was read in: the sort is stable */
};

struct stb_cuidx {
	Dwarf_Die *units;     /* the units' DIEs, valid while their Dwarf is */
	struct cu_range *r;   /* by lo, then reading order */
	uint64_t *maxhi;      /* maxhi[i]: the highest hi of r[0..i] */
	size_t n;
};

/* What the reading pass grows (malloc'd, freed before returning). */
struct cu_scan {
	Dwarf_Die *units;
	size_t nunits, units_cap;
	struct cu_range *r;
	size_t n, cap;
};

static int range_cmp(const void *a, const void *b)
{
	const struct cu_range *x = a, *y = b;
	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

size_t stb_cuidx_text(Elf *elf, uint64_t shift, struct stb_cuidx_span *out)
{
	size_t nph = 0, n = 0;

	if (!elf || elf_getphdrnum(elf, &nph) != 0)
		return 0;
	for (size_t i = 0; i < nph && i < INT_MAX && n < STB_CUIDX_MAX_TEXT; i++) {
		GElf_Phdr ph;
		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD || !(ph.p_flags & PF_X))
			continue;
		uint64_t lo = ph.p_vaddr + shift, hi = lo + ph.p_memsz; /* wraps: checked */
		if (hi > lo)
			out[n++] = (struct stb_cuidx_span){ .lo = lo, .hi = hi };
	}
	return n;
}

/* Does [lo, hi) lie inside one span of code? */
static bool in_text(const struct stb_cuidx_span *text, size_t ntext, uint64_t lo, uint64_t hi)
{
	for (size_t i = 0; i < ntext; i++)
		if (lo >= text[i].lo && hi <= text[i].hi)
			return true;
	return false;
}

/* Appends one range of unit `unit`; -ENOMEM, -E2BIG at the module's limit. */
static int scan_add(struct cu_scan *sc, uint64_t lo, uint64_t hi, uint32_t unit)
{
	if (sc->n == sc->cap) {
		size_t cap = sc->cap ? sc->cap * 2 : 256;
		if (sc->n >= STB_CUIDX_MAX_RANGES)
			return -E2BIG;
		if (cap > STB_CUIDX_MAX_RANGES)
			cap = STB_CUIDX_MAX_RANGES;
		struct cu_range *r = realloc(sc->r, cap * sizeof(*r));
		if (!r)
			return -ENOMEM;
		sc->r = r;
		sc->cap = cap;
	}
	sc->r[sc->n] = (struct cu_range){ .lo = lo, .hi = hi, .unit = unit, .order = (uint32_t)sc->n };
	sc->n++;
	return 0;
}

/* Keeps one unit's DIE; its index in *unit. -ENOMEM. */
static int scan_unit(struct cu_scan *sc, const Dwarf_Die *die, uint32_t *unit)
{
	if (sc->nunits == sc->units_cap) {
		size_t cap = sc->units_cap ? sc->units_cap * 2 : 64;
		Dwarf_Die *u = realloc(sc->units, cap * sizeof(*u));
		if (!u)
			return -ENOMEM;
		sc->units = u;
		sc->units_cap = cap;
	}
	*unit = (uint32_t)sc->nunits;
	sc->units[sc->nunits++] = *die;
	return 0;
}

/* Every unit's ranges of code into sc, within the limits. -ENOMEM. */
static int scan_units(Dwarf *dw, const struct stb_cuidx_span *text, size_t ntext, struct cu_scan *sc)
{
	Dwarf_CU *cu = NULL;
	Dwarf_Die die;
	uint8_t type;

	for (unsigned units = 0; units < STB_CUIDX_MAX_UNITS; units++) {
		Dwarf_Addr base, lo, hi;
		ptrdiff_t off = 0;
		uint32_t unit = 0;
		bool kept = false;

		if (dwarf_get_units(dw, cu, &cu, NULL, &type, &die, NULL) != 0)
			break; /* the end, or a unit libdw cannot read: stop there */
		if (type != DW_UT_compile && type != DW_UT_partial && type != DW_UT_skeleton)
			continue;
		for (unsigned k = 0; k < STB_CUIDX_MAX_UNIT_RANGES; k++) {
			off = dwarf_ranges(&die, off, &base, &lo, &hi);
			if (off <= 0)
				break;
			if (lo >= hi || !in_text(text, ntext, lo, hi))
				continue;
			if (!kept && scan_unit(sc, &die, &unit) < 0)
				return -ENOMEM;
			kept = true;
			int r = scan_add(sc, lo, hi, unit);
			if (r == -E2BIG)
				return 0; /* the module's limit: indexed in part */
			if (r < 0)
				return r;
		}
	}
	return 0;
}

struct stb_cuidx *stb_cuidx_build(Dwarf *dw, const struct stb_cuidx_span *text, size_t ntext,
				  stb_cuidx_alloc_fn alloc, void *ctx)
{
	struct cu_scan sc = { 0 };
	struct stb_cuidx *x = NULL;
	int err = 0;

	if (!dw || !ntext) {
		err = ENOENT;
		goto cleanup;
	}
	if (scan_units(dw, text, ntext, &sc) < 0) {
		err = ENOMEM;
		goto cleanup;
	}
	if (sc.n == 0) {
		err = ENOENT;
		goto cleanup;
	}
	qsort(sc.r, sc.n, sizeof(*sc.r), range_cmp);
	x = alloc(ctx, sizeof(*x));
	Dwarf_Die *units = alloc(ctx, sc.nunits * sizeof(*units));
	struct cu_range *r = alloc(ctx, sc.n * sizeof(*r));
	uint64_t *maxhi = alloc(ctx, sc.n * sizeof(*maxhi));
	if (!x || !units || !r || !maxhi) {
		x = NULL;
		err = ENOMEM;
		goto cleanup;
	}
	memcpy(units, sc.units, sc.nunits * sizeof(*units));
	memcpy(r, sc.r, sc.n * sizeof(*r));
	for (size_t i = 0; i < sc.n; i++)
		maxhi[i] = i && maxhi[i - 1] > r[i].hi ? maxhi[i - 1] : r[i].hi;
	*x = (struct stb_cuidx){ .units = units, .r = r, .maxhi = maxhi, .n = sc.n };
cleanup:
	free(sc.units);
	free(sc.r);
	if (!x)
		errno = err;
	return x;
}

int stb_cuidx_find(const struct stb_cuidx *x, uint64_t addr, Dwarf_Die *cu)
{
	size_t lo = 0, hi;

	if (!x || !x->n || addr < x->r[0].lo)
		return -ENOENT;
	/* The last range starting at or below addr. */
	hi = x->n;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (x->r[mid].lo <= addr)
			lo = mid;
		else
			hi = mid;
	}
	for (size_t i = lo + 1, steps = 0; i-- > 0 && steps < CUIDX_MAX_WALK; steps++) {
		if (x->maxhi[i] <= addr)
			break; /* nothing at or before i reaches addr */
		if (x->r[i].hi > addr) {
			*cu = x->units[x->r[i].unit];
			return 0;
		}
	}
	return -ENOENT;
}
