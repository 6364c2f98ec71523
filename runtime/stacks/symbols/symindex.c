/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The symbol index of one module (symindex.h): its sized symbols sorted by
 * start with the running maximum of their ends, so that the symbols
 * containing an address are found by one binary search and a short walk
 * back; and its non-local labels, which decide when libdwfl would answer
 * otherwise.
 */
#include "symbols/symindex.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include <elfutils/libdwfl.h>
#include <gelf.h>

struct sym_ent {
	uint64_t lo, hi; /* [lo, hi) */
	const char *name;
	uint32_t order, shndx;
	uint8_t bind;
};

struct sym_label {
	uint64_t addr;
	uint32_t shndx;
};

struct stb_symidx {
	struct sym_ent *ents;  /* sized symbols by lo, then table order */
	uint64_t *maxhi;       /* maxhi[i]: the highest hi of ents[0..i] */
	size_t n;
	struct sym_label *labels; /* non-local symbols without size, by addr */
	size_t nlabels;
};

#define SYM_SHN_LORESERVE 0xff00u

static int ent_cmp(const void *a, const void *b)
{
	const struct sym_ent *x = a, *y = b;
	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

static int label_cmp(const void *a, const void *b)
{
	const struct sym_label *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

struct stb_symidx *stb_symidx_new(const struct stb_symidx_sym *syms, size_t n,
				  stb_symidx_alloc_fn alloc, void *ctx)
{
	size_t nsized = 0, nlabels = 0;

	if (n > STB_SYMIDX_MAX_SYMS) {
		errno = E2BIG;
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		if (syms[i].size)
			nsized++;
		else if (syms[i].bind != STB_SYMIDX_LOCAL)
			nlabels++;
	}
	struct stb_symidx *x = alloc(ctx, sizeof(*x));
	struct sym_ent *ents = alloc(ctx, (nsized ? nsized : 1) * sizeof(*ents));
	uint64_t *maxhi = alloc(ctx, (nsized ? nsized : 1) * sizeof(*maxhi));
	struct sym_label *labels = alloc(ctx, (nlabels ? nlabels : 1) * sizeof(*labels));
	if (!x || !ents || !maxhi || !labels) {
		errno = ENOMEM;
		return NULL;
	}
	size_t k = 0, l = 0;
	for (size_t i = 0; i < n; i++) {
		const struct stb_symidx_sym *s = &syms[i];
		if (s->size) {
			uint64_t hi;
			if (__builtin_add_overflow(s->addr, s->size, &hi))
				hi = UINT64_MAX;
			ents[k++] = (struct sym_ent){.lo = s->addr, .hi = hi, .name = s->name,
						     .order = s->order, .shndx = s->shndx,
						     .bind = s->bind};
		} else if (s->bind != STB_SYMIDX_LOCAL) {
			labels[l++] = (struct sym_label){.addr = s->addr, .shndx = s->shndx};
		}
	}
	qsort(ents, nsized, sizeof(*ents), ent_cmp);
	qsort(labels, nlabels, sizeof(*labels), label_cmp);
	for (size_t i = 0; i < nsized; i++)
		maxhi[i] = i && maxhi[i - 1] > ents[i].hi ? maxhi[i - 1] : ents[i].hi;
	*x = (struct stb_symidx){.ents = ents, .maxhi = maxhi, .n = nsized, .labels = labels,
				 .nlabels = nlabels};
	return x;
}

/* c is a better answer than b (both contain the address). */
static bool better(const struct sym_ent *c, const struct sym_ent *b)
{
	if (c->lo != b->lo)
		return c->lo > b->lo;
	if (c->bind != b->bind)
		return c->bind > b->bind;
	if (c->hi - c->lo != b->hi - b->lo)
		return c->hi - c->lo < b->hi - b->lo;
	return c->order < b->order;
}

/* A non-local label that libdwfl could prefer to a local symbol in section
 * shndx for addr: at or below addr in that section, or exactly at addr for
 * an absolute one. */
static bool label_below(const struct stb_symidx *x, uint64_t addr, uint32_t shndx)
{
	for (size_t i = 0; i < x->nlabels && x->labels[i].addr <= addr; i++) {
		const struct sym_label *lb = &x->labels[i];
		if (lb->shndx >= SYM_SHN_LORESERVE ? lb->addr == addr : lb->shndx == shndx)
			return true;
	}
	return false;
}

const char *stb_symidx_find(const struct stb_symidx *x, uint64_t addr, uint64_t *off)
{
	size_t lo = 0, hi = x->n;
	const struct sym_ent *best = NULL;
	bool nonlocal = false;

	/* hi: the number of symbols starting at or below addr. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (x->ents[mid].lo <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t j = hi; j-- > 0 && x->maxhi[j] > addr;) {
		const struct sym_ent *e = &x->ents[j];
		if (best && best->bind != STB_SYMIDX_LOCAL && e->lo < best->lo)
			break; /* nothing further down can win or change the answer */
		if (e->hi <= addr)
			continue;
		if (e->bind != STB_SYMIDX_LOCAL)
			nonlocal = true;
		if (!best || better(e, best))
			best = e;
		if (best->bind == STB_SYMIDX_LOCAL && nonlocal)
			return NULL; /* libdwfl may answer with the non-local one */
	}
	if (!best)
		return NULL;
	if (best->bind == STB_SYMIDX_LOCAL && (nonlocal || label_below(x, addr, best->shndx)))
		return NULL;
	*off = addr - best->lo;
	return best->name;
}

struct stb_symidx *stb_symidx_build(Dwfl_Module *mod, stb_symidx_alloc_fn alloc, void *ctx)
{
	int n = dwfl_module_getsymtab(mod);
	struct stb_symidx_sym *v;
	struct stb_symidx *x;
	size_t k = 0;

	if (n <= 1 || (unsigned)n > STB_SYMIDX_MAX_SYMS) {
		errno = n <= 1 ? ENOENT : E2BIG;
		return NULL;
	}
	v = malloc((size_t)n * sizeof(*v));
	if (!v) {
		errno = ENOMEM;
		return NULL;
	}
	for (int i = 1; i < n; i++) {
		GElf_Sym sym;
		GElf_Addr addr;
		GElf_Word shndx;
		const char *name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, NULL, NULL);
		if (!name)
			continue;
		unsigned type = GELF_ST_TYPE(sym.st_info), bind = GELF_ST_BIND(sym.st_info);
		/* What libdwfl's lookup never returns. */
		if (!name[0] || shndx == SHN_UNDEF || type == STT_SECTION || type == STT_FILE ||
		    type == STT_TLS)
			continue;
		v[k++] = (struct stb_symidx_sym){
		    .addr = addr,
		    .size = sym.st_size,
		    .name = name,
		    .order = (uint32_t)i,
		    .shndx = shndx,
		    .bind = bind == STB_GLOBAL	   ? STB_SYMIDX_GLOBAL
			    : bind == STB_GNU_UNIQUE ? STB_SYMIDX_UNIQUE
			    : bind == STB_WEAK	   ? STB_SYMIDX_WEAK
						   : STB_SYMIDX_LOCAL,
		};
	}
	x = stb_symidx_new(v, k, alloc, ctx);
	free(v);
	return x;
}

size_t stb_symidx_count(const struct stb_symidx *x)
{
	return x ? x->n : 0;
}
