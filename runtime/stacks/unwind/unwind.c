/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The walks of unwind.h: a per-process cache of CFI rows (simple rows packed
 * and applied with a few reads; other rows re-derived and evaluated by
 * cfi.c), the per-walk context (reads from the stack copy, the registry's
 * module copies and the target, with byte and time budgets), the DWARF and
 * frame-pointer walks, and the libunwind fallback (unwind_lu.c) for frames
 * without usable CFI.
 */
#include "unwind/unwind.h"
#include "unwind/unwind_int.h"
#include "util.h"

#include <stb/abi.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RCACHE 8192u /* rule cache entries per proc (power of 2) */

struct stb_unw_proc {
	struct stb_mods *mods;
	void *lu_as;               /* libunwind address space */
	struct rcache_ent *rcache; /* RCACHE entries */
	_Atomic uint64_t st_walks, st_steps, st_frames, st_copy_reads, st_image_reads,
	    st_target_reads, st_target_read_failures, st_target_bytes, st_budget_ends;
};

__attribute__((no_sanitize("address", "thread"))) void stb_unw_copy_raw(void *dst, const void *src,
									size_t n)
{
	const volatile uint8_t *s = src;
	uint8_t *d = dst;
	size_t i = 0;

	/* Any alignment: an x86 load of 8 bytes does not care. */
	typedef uint64_t __attribute__((aligned(1), may_alias)) u64_any;
	for (; i + 8 <= n; i += 8) {
		uint64_t v = *(const volatile u64_any *)(const volatile void *)(s + i);
		__builtin_memcpy(d + i, &v, 8);
	}
	for (; i < n; i++)
		d[i] = s[i];
}

/* ------------------------------------------------------------------ reads */

bool stb_unw_ctx_late(struct stb_unw_ctx *w)
{
	uint64_t now = stb_now_ns();

	if (!w->deadline_ns) {
		w->deadline_ns = now + w->default_ns;
		return false;
	}
	if (now <= w->deadline_ns)
		return false;
	if (!w->end)
		w->end = STB_UNW_END_DEADLINE;
	return true;
}

/* Target memory through the walk's page cache, within the byte budget. */
static int read_target(struct stb_unw_ctx *w, uint64_t addr, uint8_t *dst, size_t len)
{
	while (len) {
		uint64_t page = addr & ~(uint64_t)(STB_UNW_PAGE - 1);
		size_t off = (size_t)(addr - page), n = STB_UNW_PAGE - off;
		unsigned i;

		if (n > len)
			n = len;
		if (!w->pc) {
			w->pc = calloc(1, sizeof(*w->pc));
			if (!w->pc)
				return -ENOMEM;
		}
		for (i = 0; i < STB_UNW_PCACHE_PAGES; i++)
			if (w->pc->state[i] && w->pc->page[i] == page)
				break;
		if (i == STB_UNW_PCACHE_PAGES) {
			if (w->bytes_left < STB_UNW_PAGE) {
				if (!w->end)
					w->end = STB_UNW_END_BYTES;
				return -EFAULT;
			}
			if (stb_unw_ctx_late(w))
				return -EFAULT;
			w->bytes_left -= STB_UNW_PAGE;
			w->n_target_bytes += STB_UNW_PAGE;
			i = w->pc->next++ % STB_UNW_PCACHE_PAGES;
			w->pc->page[i] = page;
			w->n_target++;
			if (stb_mods_read(w->mods, page, w->pc->data[i], STB_UNW_PAGE) == 0) {
				w->pc->state[i] = 1;
			} else {
				w->pc->state[i] = 2;
				w->n_target_fail++;
			}
		}
		if (w->pc->state[i] != 1)
			return -EFAULT;
		memcpy(dst, w->pc->data[i] + off, n);
		dst += n;
		addr += n;
		len -= n;
	}
	return 0;
}

/* Everything but the stack copy: module images, then the target. */
static int read_slow(struct stb_unw_ctx *w, uint64_t addr, void *dst, size_t len)
{
	const struct stb_seg *s;

	w->not_replayable = true;
	s = w->last_seg;
	if (!s || addr < s->lo || addr >= s->hi) {
		s = stb_modtab_find_seg(w->tab, addr);
		if (s)
			w->last_seg = s;
	}
	if (!s) {
		/* The unwind tables of a module read on first use (no segment). */
		const uint8_t *b = stb_modtab_table_bytes(w->tab, addr, len);
		if (b) {
			memcpy(dst, b, len);
			w->n_image++;
			return 0;
		}
	} else {
		size_t n = s->hi - addr < len ? (size_t)(s->hi - addr) : len;
		if (s->direct)
			stb_unw_copy_raw(dst, s->local + (addr - s->lo), n);
		else
			memcpy(dst, s->local + (addr - s->lo), n);
		if (n < len)
			memset((uint8_t *)dst + n, 0, len - n); /* past the end of the section */
		w->n_image++;
		return 0;
	}
	if (w->copy_only)
		return -EFAULT;
	return read_target(w, addr, dst, len);
}

/* 8 bytes, the stack copy inline (the hot path of every step). */
static inline int read8(struct stb_unw_ctx *w, uint64_t addr, uint64_t *val)
{
	uint64_t off = addr - w->copy_lo;
	if (off < w->copy_len && w->copy_len - off >= 8) {
		memcpy(val, w->copy + off, 8);
		w->n_copy++;
		if (w->log) { /* only a logged walk can be replayable */
			if (!(off & 7) && w->nlog < w->log_cap)
				w->log[w->nlog++] = (uint32_t)(off >> 3);
			else
				w->not_replayable = true;
		}
		return 0;
	}
	return read_slow(w, addr, val, 8);
}

/* read8 of a value the walk does not depend on: one that only a RULE_FULL
 * or libunwind step could use, and those are not replayable anyway. */
static inline int read8_unused(struct stb_unw_ctx *w, uint64_t addr, uint64_t *val)
{
	uint64_t off = addr - w->copy_lo;
	if (off < w->copy_len && w->copy_len - off >= 8) {
		memcpy(val, w->copy + off, 8);
		w->n_copy++;
		w->not_replayable |= (off & 7) != 0;
		return 0;
	}
	return read_slow(w, addr, val, 8);
}

int stb_unw_ctx_read(struct stb_unw_ctx *w, uint64_t addr, void *dst, size_t len)
{
	if (len == 8)
		return read8(w, addr, dst);
	if (addr - w->copy_lo < w->copy_len && w->copy_len - (addr - w->copy_lo) >= len) {
		memcpy(dst, w->copy + (addr - w->copy_lo), len);
		w->n_copy++;
		w->not_replayable = true; /* not one word */
		return 0;
	}
	return read_slow(w, addr, dst, len);
}

static int ctx_read8(void *arg, uint64_t addr, uint64_t *val)
{
	return read8(arg, addr, val);
}

const struct stb_mod *stb_unw_ctx_mod(struct stb_unw_ctx *w, uint64_t ip)
{
	const struct stb_mod *m = w->last_mod;

	if (m && ip >= m->lo && ip < m->hi)
		return m;
	m = stb_modtab_find(w->tab, ip);
	if (!m && !w->refresh_tried) {
		w->refresh_tried = true;
		if (!stb_unw_ctx_late(w) && stb_mods_refresh(w->mods, false, w->deadline_ns) > 0) {
			const struct stb_modtab *old = w->tab;
			w->tab = stb_mods_acquire(w->mods);
			stb_mods_release(old);
			/* Whatever pointed into the old table is gone. */
			w->last_seg = NULL;
			w->last_mod = NULL;
			m = stb_modtab_find(w->tab, ip);
		}
	}
	if (m)
		w->last_mod = m;
	return m;
}

/* ------------------------------------------------------------ rule cache */

/*
 * Most frames of x86-64 code have a row of one simple shape: CFA = rsp or
 * rbp + offset, the return address and callee-saved registers at fixed
 * offsets from the CFA (or unchanged). Such a row is computed once per ip,
 * packed into a cache entry, and applied with a few reads. Other rows
 * (expressions, signal frames, undefined callee-saved registers) are
 * re-derived from the CFI at each step. libunwind's own rule cache cannot be
 * used without a lock and two sigprocmask calls per step in Debian's 1.6.2.
 */

enum {
	RULE_NONE = 0,      /* not computed */
	RULE_OK = 1,        /* the packed row: apply it */
	RULE_BOTTOM = 2,    /* return address undefined: outermost frame */
	RULE_LIBUNWIND = 3, /* no usable CFI: step with libunwind */
	RULE_FULL = 4,      /* re-derive the row and evaluate it (cfi.c) */
};

#define RULE_SAME INT16_MIN
#define CALLEE_SAVED (1u << STB_CFI_RBX | 1u << STB_CFI_RBP | 0xfu << 12)
/* Callee-saved registers the packed rows track, as DWARF numbers. */
static const uint8_t rule_dwreg[6] = {STB_CFI_RBP, STB_CFI_RBX, 12, 13, 14, 15};

struct rule {
	unsigned kind;
	bool signal;  /* the CIE says signal frame: the caller's ip is exact */
	bool cfa_rbp; /* CFA base: rbp, else rsp */
	int32_t cfa_off;
	int16_t ra_off;
	int16_t off[6]; /* rule_dwreg: saved at CFA + off, or RULE_SAME */
};

/* One cached rule behind a seqlock: walks on several threads fill and read
 * the cache concurrently. The table generation is in w[2]'s upper half. */
struct rcache_ent {
	_Atomic uint64_t seq; /* odd while being written */
	_Atomic uint64_t ip;  /* lookup address; 0 = empty */
	_Atomic uint64_t w[3];
};

static void rule_pack(const struct rule *r, uint32_t gen, uint64_t w[3])
{
	w[0] = (uint64_t)(uint32_t)r->cfa_off | (uint64_t)(r->kind & 0xff) << 32 |
	       (uint64_t)r->cfa_rbp << 40 | (uint64_t)r->signal << 41 |
	       (uint64_t)(uint16_t)r->ra_off << 48;
	w[1] = (uint64_t)(uint16_t)r->off[0] | (uint64_t)(uint16_t)r->off[1] << 16 |
	       (uint64_t)(uint16_t)r->off[2] << 32 | (uint64_t)(uint16_t)r->off[3] << 48;
	w[2] = (uint64_t)(uint16_t)r->off[4] | (uint64_t)(uint16_t)r->off[5] << 16 |
	       (uint64_t)gen << 32;
}

static void rule_unpack(const uint64_t w[3], struct rule *r)
{
	r->cfa_off = (int32_t)(uint32_t)w[0];
	r->kind = (unsigned)(w[0] >> 32) & 0xff;
	r->cfa_rbp = (w[0] >> 40) & 1;
	r->signal = (w[0] >> 41) & 1;
	r->ra_off = (int16_t)(uint16_t)(w[0] >> 48);
	for (int i = 0; i < 4; i++)
		r->off[i] = (int16_t)(uint16_t)(w[1] >> (16 * i));
	r->off[4] = (int16_t)(uint16_t)w[2];
	r->off[5] = (int16_t)(uint16_t)(w[2] >> 16);
}

static struct rcache_ent *rcache_slot(struct stb_unw_proc *p, uint64_t ip)
{
	uint64_t h = ip * 0x9e3779b97f4a7c15ull;
	return &p->rcache[(h >> 40) & (RCACHE - 1)];
}

static bool rcache_get(struct stb_unw_proc *p, uint64_t ip, uint32_t gen, struct rule *r)
{
	struct rcache_ent *e = rcache_slot(p, ip);
	uint64_t s1 = atomic_load_explicit(&e->seq, memory_order_acquire), w[3];

	if (s1 & 1)
		return false;
	if (atomic_load_explicit(&e->ip, memory_order_acquire) != ip)
		return false;
	/* Acquire loads keep the second read of seq after them (no fences:
	 * ThreadSanitizer does not model them). */
	for (int i = 0; i < 3; i++)
		w[i] = atomic_load_explicit(&e->w[i], memory_order_acquire);
	if (atomic_load_explicit(&e->seq, memory_order_relaxed) != s1 ||
	    (uint32_t)(w[2] >> 32) != gen)
		return false;
	rule_unpack(w, r);
	return r->kind != RULE_NONE;
}

static void rcache_put(struct stb_unw_proc *p, uint64_t ip, uint32_t gen, const struct rule *r)
{
	struct rcache_ent *e = rcache_slot(p, ip);
	uint64_t s = atomic_load_explicit(&e->seq, memory_order_relaxed), w[3];

	if ((s & 1) || !atomic_compare_exchange_strong_explicit(
			   &e->seq, &s, s + 1, memory_order_acquire, memory_order_relaxed))
		return; /* another writer: leave it */
	/* Release stores: no reader sees new data with the old (even) seq. */
	rule_pack(r, gen, w);
	atomic_store_explicit(&e->ip, ip, memory_order_release);
	for (int i = 0; i < 3; i++)
		atomic_store_explicit(&e->w[i], w[i], memory_order_release);
	atomic_store_explicit(&e->seq, s + 2, memory_order_release);
}

/* ------------------------------------------------------------ rules */

/* m's tables (of registry r), unless the module is walked by frame
 * pointers only. Returns 0 or -ENOENT. */
static int tables_of(struct stb_mods *r, const struct stb_mod *m, const struct stb_cfi_hdr **hdr,
		     const struct stb_cfi_bytes **eh_frame)
{
	if (m->flags & STB_UNW_MOD_FP_ONLY)
		return -ENOENT;
	return stb_mods_tables(r, m, hdr, eh_frame);
}

/* The row for lookup address ip in m (of registry r), and the .eh_frame it
 * comes from (eh_frame may be NULL). Returns 0 or -errno. */
static int row_of(struct stb_mods *r, const struct stb_mod *m, uint64_t ip,
		  struct stb_cfi_row *row, const struct stb_cfi_bytes **eh_frame)
{
	const struct stb_cfi_hdr *hdr;
	const struct stb_cfi_bytes *eh;
	uint64_t fde;

	if (tables_of(r, m, &hdr, &eh) < 0 || stb_cfi_hdr_find(hdr, ip, &fde) < 0)
		return -ENOENT;
	if (eh_frame)
		*eh_frame = eh;
	return stb_cfi_row(eh, fde, ip, row);
}

/* Packs a row when it has the simple shape, else RULE_FULL. */
static void rule_from_row(const struct stb_cfi_row *row, struct rule *r)
{
	const struct stb_cfi_rule *ra = &row->reg[STB_CFI_RA];

	r->signal = row->signal_frame;
	r->kind = RULE_FULL;
	if (ra->how == STB_CFI_UNDEF) {
		r->kind = RULE_BOTTOM;
		return;
	}
	if (row->signal_frame || row->cfa_is_expr ||
	    (row->cfa_reg != STB_CFI_RSP && row->cfa_reg != STB_CFI_RBP) ||
	    row->cfa_off < INT32_MIN || row->cfa_off > INT32_MAX ||
	    row->reg[STB_CFI_RSP].how != STB_CFI_SAME)
		return;
	if (ra->how != STB_CFI_OFFSET || ra->off <= INT16_MIN || ra->off > INT16_MAX)
		return;
	for (int i = 0; i < 6; i++) {
		const struct stb_cfi_rule *x = &row->reg[rule_dwreg[i]];
		if (x->how == STB_CFI_SAME)
			r->off[i] = RULE_SAME;
		else if (x->how == STB_CFI_OFFSET && x->off > INT16_MIN && x->off <= INT16_MAX)
			r->off[i] = (int16_t)x->off;
		else
			return;
	}
	r->cfa_rbp = row->cfa_reg == STB_CFI_RBP;
	r->cfa_off = (int32_t)row->cfa_off;
	r->ra_off = (int16_t)ra->off;
	r->kind = RULE_OK;
}

static void rule_get(struct stb_unw_ctx *w, uint64_t lookup, struct rule *r)
{
	const struct stb_mod *m;
	struct stb_cfi_row row;

	if (rcache_get(w->p, lookup, (uint32_t)w->tab->gen, r))
		return;
	memset(r, 0, sizeof(*r));
	r->kind = RULE_LIBUNWIND;
	m = stb_unw_ctx_mod(w, lookup);
	if (!m)
		return; /* not cached: the module may appear */
	if (stb_unw_ctx_late(w))
		return;
	if (row_of(w->mods, m, lookup, &row, NULL) == 0)
		rule_from_row(&row, r);
	rcache_put(w->p, lookup, (uint32_t)w->tab->gen, r);
}

/* Applies a RULE_OK rule. Returns 0 or -1 (a read failed). */
static int rule_apply(struct stb_unw_ctx *w, const struct rule *r, struct stb_cfi_regs *regs)
{
	uint64_t cfa =
	    regs->r[r->cfa_rbp ? STB_CFI_RBP : STB_CFI_RSP] + (uint64_t)(int64_t)r->cfa_off;
	uint64_t v[6], ra;

	if (!(regs->known & (1u << (r->cfa_rbp ? STB_CFI_RBP : STB_CFI_RSP))))
		return -1;
	if (read8(w, cfa + (uint64_t)(int64_t)r->ra_off, &ra) < 0)
		return -1;
	for (int i = 0; i < 6; i++) {
		if (r->off[i] == RULE_SAME)
			continue;
		/* Of the callee-saved registers only rbp can be a later CFA. */
		uint64_t at = cfa + (uint64_t)(int64_t)r->off[i];
		if ((rule_dwreg[i] == STB_CFI_RBP ? read8(w, at, &v[i]) : read8_unused(w, at, &v[i])) < 0)
			return -1;
	}
	for (int i = 0; i < 6; i++) {
		if (r->off[i] != RULE_SAME) {
			regs->r[rule_dwreg[i]] = v[i];
			regs->known |= 1u << rule_dwreg[i];
		}
	}
	regs->r[STB_CFI_RA] = ra;
	regs->r[STB_CFI_RSP] = cfa;
	/* Caller-saved registers do not survive a call. */
	regs->known = (regs->known & CALLEE_SAVED) | 1u << STB_CFI_RA | 1u << STB_CFI_RSP;
	return 0;
}

/* Re-derives the row at lookup and applies it: 1 stepped, 0 bottom, <0 failed
 * (w->end says why when it knows). */
static int rule_apply_full(struct stb_unw_ctx *w, uint64_t lookup, struct stb_cfi_regs *regs)
{
	const struct stb_mod *m = stb_unw_ctx_mod(w, lookup);
	const struct stb_cfi_bytes *eh_frame;
	struct stb_cfi_row row;
	int ret;

	if (!m || row_of(w->mods, m, lookup, &row, &eh_frame) < 0)
		return -ENOENT;
	ret = stb_cfi_apply(eh_frame, &row, regs, ctx_read8, w, w->expr_ops);
	if (ret == -E2BIG && !w->end)
		w->end = STB_UNW_END_EXPR_BUDGET;
	else if (ret == -EFAULT && !w->end)
		w->end = STB_UNW_END_UNREADABLE;
	return ret;
}

/* ------------------------------------------------------------------- procs */

struct stb_unw_proc *stb_unw_proc_new_mods(struct stb_mods *mods)
{
	struct stb_unw_proc *p;

	if (!mods) {
		errno = EINVAL;
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		goto nomem;
	p->rcache = calloc(RCACHE, sizeof(*p->rcache));
	if (!p->rcache)
		goto nomem;
	p->lu_as = stb_unw_lu_new();
	if (!p->lu_as)
		goto nomem;
	p->mods = stb_mods_ref(mods);
	return p;
nomem:
	if (p)
		free(p->rcache);
	free(p);
	errno = ENOMEM;
	return NULL;
}

struct stb_unw_proc *stb_unw_proc_new(pid_t pid)
{
	struct stb_mods *mods = stb_mods_new(pid);
	struct stb_unw_proc *p;
	int err;

	if (!mods)
		return NULL;
	p = stb_unw_proc_new_mods(mods);
	err = errno;
	stb_mods_unref(mods); /* p holds its own reference */
	errno = err;
	return p;
}

struct stb_mods *stb_unw_proc_mods(struct stb_unw_proc *p)
{
	return p ? p->mods : NULL;
}

void stb_unw_proc_free(struct stb_unw_proc *p)
{
	if (!p)
		return;
	stb_unw_lu_free(p->lu_as);
	stb_mods_unref(p->mods);
	free(p->rcache);
	free(p);
}

int stb_unw_proc_refresh(struct stb_unw_proc *p)
{
	if (!p)
		return -EINVAL;
	int ret = stb_mods_refresh(p->mods, true, 0);
	return ret < 0 ? ret : 0;
}

static void module_info(const struct stb_mod *m, struct stb_unw_module_info *out)
{
	memset(out, 0, sizeof(*out));
	out->lo = m->lo;
	out->hi = m->hi;
	out->bias = m->bias;
	out->flags = m->flags;
	out->build_id_len = m->build_id_len;
	memcpy(out->build_id, m->build_id, m->build_id_len);
	snprintf(out->path, sizeof(out->path), "%s", m->path ? m->path : "");
}

int stb_unw_proc_module(struct stb_unw_proc *p, uint64_t ip, struct stb_unw_module_info *out)
{
	const struct stb_modtab *t;
	const struct stb_mod *m;
	int ret = -ENOENT;

	if (!p || !out)
		return -EINVAL;
	t = stb_mods_acquire(p->mods);
	m = stb_modtab_find(t, ip);
	if (m) {
		module_info(m, out);
		ret = 0;
	}
	stb_mods_release(t);
	return ret;
}

int stb_unw_proc_main_module(struct stb_unw_proc *p, struct stb_unw_module_info *out)
{
	if (!p || !out)
		return -EINVAL;
	char exe[64];
	struct stat st;
	snprintf(exe, sizeof(exe), "/proc/%d/exe", (int)stb_mods_read_pid(p->mods));
	if (stat(exe, &st) != 0)
		return -errno;
	const struct stb_modtab *t = stb_mods_acquire(p->mods);
	int ret = -ENOENT;
	for (size_t i = 0; t && i < t->nmods; i++) {
		const struct stb_mod *m = &t->mods[i];
		if (m->dev == st.st_dev && m->ino == st.st_ino && m->path) {
			module_info(m, out);
			ret = 0;
			break;
		}
	}
	stb_mods_release(t);
	return ret;
}

int stb_unw_proc_function(struct stb_unw_proc *p, uint64_t ip, uint64_t *lo, uint64_t *hi)
{
	const struct stb_modtab *t;
	const struct stb_mod *m;
	struct stb_cfi_row row;
	int ret = -ENOENT;

	if (!p || !lo || !hi)
		return -EINVAL;
	t = stb_mods_acquire(p->mods);
	m = stb_modtab_find(t, ip);
	if (m && row_of(p->mods, m, ip, &row, NULL) == 0) {
		*lo = row.fn_lo;
		*hi = row.fn_hi;
		ret = 0;
	}
	stb_mods_release(t);
	return ret;
}

void stb_unw_proc_stats(struct stb_unw_proc *p, struct stb_unw_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!p)
		return;
	out->walks = atomic_load_explicit(&p->st_walks, memory_order_relaxed);
	out->steps = atomic_load_explicit(&p->st_steps, memory_order_relaxed);
	out->frames = atomic_load_explicit(&p->st_frames, memory_order_relaxed);
	out->copy_reads = atomic_load_explicit(&p->st_copy_reads, memory_order_relaxed);
	out->image_reads = atomic_load_explicit(&p->st_image_reads, memory_order_relaxed);
	out->target_reads = atomic_load_explicit(&p->st_target_reads, memory_order_relaxed);
	out->target_read_failures =
	    atomic_load_explicit(&p->st_target_read_failures, memory_order_relaxed);
	out->refreshes = stb_mods_refreshes(p->mods);
	out->target_bytes = atomic_load_explicit(&p->st_target_bytes, memory_order_relaxed);
	out->budget_ends = atomic_load_explicit(&p->st_budget_ends, memory_order_relaxed);
	out->tables_read = stb_mods_tables_read(p->mods);
}

void stb_unw_regs_from_switch(struct stb_regs *regs, uint64_t ip, uint64_t sp, uint64_t bp,
			      const struct stb_stack_copy *copy)
{
	memset(regs, 0, sizeof(*regs));
	regs->ip = ip;
	regs->sp = sp;
	regs->bp = bp;
	regs->flags = STB_UNW_IP_IS_RETURN;
	if (!copy || !copy->bytes || sp < STB_ABI_SWITCH_FRAME)
		return;
	uint64_t a = sp - STB_ABI_SWITCH_FRAME;
	if (a < copy->addr || a - copy->addr > copy->len ||
	    copy->len - (a - copy->addr) < sizeof(struct stb_abi_switch_frame))
		return;
	struct stb_abi_switch_frame f;
	memcpy(&f, (const uint8_t *)copy->bytes + (a - copy->addr), sizeof(f));
	regs->bx = f.rbx;
	regs->r12 = f.r12;
	regs->r13 = f.r13;
	regs->r14 = f.r14;
	regs->r15 = f.r15;
}

const char *stb_unw_end_name(unsigned end)
{
	static const char *const names[] = {
	    [STB_UNW_END_BOTTOM] = "bottom",
	    [STB_UNW_END_DEPTH] = "depth limit",
	    [STB_UNW_END_CALLBACK] = "stopped",
	    [STB_UNW_END_NO_INFO] = "no unwind info",
	    [STB_UNW_END_UNREADABLE] = "unreadable memory",
	    [STB_UNW_END_BAD_FRAME] = "corrupt frame",
	    [STB_UNW_END_BYTES] = "byte budget",
	    [STB_UNW_END_DEADLINE] = "deadline",
	    [STB_UNW_END_EXPR_BUDGET] = "expression budget",
	};
	return end < sizeof(names) / sizeof(names[0]) ? names[end] : "unknown";
}

/* ------------------------------------------------------------------- walks */

static void walk_begin(struct stb_unw_ctx *w, struct stb_unw_proc *p, const struct stb_regs *regs,
		       const struct stb_stack_copy *copy, const struct stb_unw_budget *b)
{
	memset(w, 0, sizeof(*w));
	w->p = p;
	w->mods = p->mods;
	w->copy_only = (regs->flags & STB_UNW_COPY_ONLY) != 0;
	if (copy && copy->bytes && copy->len) {
		w->copy_lo = copy->addr;
		w->copy = copy->bytes;
		w->copy_len = copy->len;
	}
	w->default_ns = STB_UNW_DEFAULT_TIME_NS;
	w->deadline_ns = b && b->deadline_ns ? b->deadline_ns : 0;
	w->bytes_left =
	    b && b->max_target_bytes ? b->max_target_bytes : STB_UNW_DEFAULT_TARGET_BYTES;
	w->expr_ops = b && b->max_expr_ops ? b->max_expr_ops : STB_DWEXPR_DEFAULT_OPS;
	w->log = b ? b->read_log : NULL;
	w->log_cap = w->log ? b->read_log_cap : 0;
	w->not_replayable = !w->log;
	w->tab = stb_mods_acquire(p->mods);
}

static void walk_end(struct stb_unw_ctx *w, uint64_t steps, uint64_t frames)
{
	struct stb_unw_proc *p = w->p;

	stb_mods_release(w->tab);
	free(w->pc);
	atomic_fetch_add_explicit(&p->st_walks, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->st_steps, steps, memory_order_relaxed);
	atomic_fetch_add_explicit(&p->st_frames, frames, memory_order_relaxed);
	if (w->n_copy)
		atomic_fetch_add_explicit(&p->st_copy_reads, w->n_copy, memory_order_relaxed);
	if (w->n_image)
		atomic_fetch_add_explicit(&p->st_image_reads, w->n_image, memory_order_relaxed);
	if (w->n_target) {
		atomic_fetch_add_explicit(&p->st_target_reads, w->n_target, memory_order_relaxed);
		atomic_fetch_add_explicit(&p->st_target_bytes, w->n_target_bytes,
					  memory_order_relaxed);
	}
	if (w->n_target_fail)
		atomic_fetch_add_explicit(&p->st_target_read_failures, w->n_target_fail,
					  memory_order_relaxed);
	if (w->end == STB_UNW_END_BYTES || w->end == STB_UNW_END_DEADLINE ||
	    w->end == STB_UNW_END_EXPR_BUDGET)
		atomic_fetch_add_explicit(&p->st_budget_ends, 1, memory_order_relaxed);
}

static struct stb_cfi_regs regs_in(const struct stb_regs *r)
{
	struct stb_cfi_regs c = {.known = 1u << STB_CFI_RA | 1u << STB_CFI_RSP | 1u << STB_CFI_RBP |
					  1u << STB_CFI_RBX | 0xfu << 12};

	c.r[STB_CFI_RA] = r->ip;
	c.r[STB_CFI_RSP] = r->sp;
	c.r[STB_CFI_RBP] = r->bp;
	c.r[STB_CFI_RBX] = r->bx;
	c.r[12] = r->r12;
	c.r[13] = r->r13;
	c.r[14] = r->r14;
	c.r[15] = r->r15;
	return c;
}

/* The reason a failed step ended the walk: what the failing operation
 * recorded, else `dflt`. */
static unsigned end_or(const struct stb_unw_ctx *w, unsigned dflt)
{
	return w->end ? w->end : dflt;
}

static unsigned walk_dwarf(struct stb_unw_ctx *w, const struct stb_regs *regs, unsigned skip,
			   unsigned max_frames, stb_unw_frame_fn fn, void *arg, unsigned *delivered,
			   uint64_t *steps)
{
	struct stb_cfi_regs r = regs_in(regs);
	unsigned idx = 0, how = STB_FRAME_DWARF;
	bool exact = !(regs->flags & STB_UNW_IP_IS_RETURN);

	while (r.r[STB_CFI_RA] != 0) {
		uint64_t ip = r.r[STB_CFI_RA], sp = r.r[STB_CFI_RSP], lookup;
		struct rule rule;

		if (idx >= skip) {
			struct stb_unw_frame f = {.ip = ip, .sp = sp, .how = how};
			++*delivered;
			if (fn(&f, arg))
				return STB_UNW_END_CALLBACK;
			if (*delivered == max_frames)
				return STB_UNW_END_DEPTH;
		}
		idx++;
		if ((++*steps & 63) == 0 && stb_unw_ctx_late(w))
			return STB_UNW_END_DEADLINE;
		/* A return address is the instruction after a call: the caller's
		 * row is the one of the call itself. */
		lookup = exact ? ip : ip - 1;
		rule_get(w, lookup, &rule);
		if (w->end)
			return w->end; /* the deadline passed while finding it */
		if (regs->flags & STB_UNW_LIBUNWIND_ONLY)
			rule.kind = RULE_LIBUNWIND;
		switch (rule.kind) {
		case RULE_BOTTOM:
			return STB_UNW_END_BOTTOM;
		case RULE_OK:
			if (rule_apply(w, &rule, &r) < 0)
				return end_or(w, STB_UNW_END_UNREADABLE);
			if (r.r[STB_CFI_RSP] <= sp)
				return STB_UNW_END_BAD_FRAME; /* not moving up the stack */
			how = STB_FRAME_DWARF;
			exact = false;
			break;
		case RULE_FULL: {
			/* Expressions and register rules may read any register. */
			w->not_replayable = true;
			int ret = rule_apply_full(w, lookup, &r);
			if (ret == 0)
				return STB_UNW_END_BOTTOM;
			if (ret < 0)
				return end_or(w, STB_UNW_END_NO_INFO);
			if (!(r.known & (1u << STB_CFI_RSP)))
				return STB_UNW_END_NO_INFO;
			/* Past a signal frame the stack may be another one (sigaltstack):
			 * only require progress. */
			if (rule.signal ? (r.r[STB_CFI_RSP] == sp && r.r[STB_CFI_RA] == ip)
					: r.r[STB_CFI_RSP] <= sp)
				return STB_UNW_END_BAD_FRAME;
			how = STB_FRAME_DWARF;
			exact = rule.signal;
			break;
		}
		default: {
			bool fp = false;
			w->not_replayable = true;
			int ret = stb_unw_lu_step(w, w->p->lu_as, &r, lookup, &fp);
			if (ret == 0)
				return STB_UNW_END_BOTTOM;
			if (ret < 0)
				return end_or(w, STB_UNW_END_NO_INFO);
			if (r.r[STB_CFI_RSP] == sp && r.r[STB_CFI_RA] == ip)
				return STB_UNW_END_BAD_FRAME;
			how = fp ? STB_FRAME_FP : STB_FRAME_DWARF;
			/* Past a signal frame, ip is where the signal interrupted. */
			exact = rule.signal;
			break;
		}
		}
	}
	return STB_UNW_END_BOTTOM;
}

static unsigned walk_fp(struct stb_unw_ctx *w, const struct stb_regs *regs, unsigned skip,
			unsigned max_frames, stb_unw_frame_fn fn, void *arg, unsigned *delivered,
			uint64_t *steps)
{
	uint64_t ip = regs->ip, sp = regs->sp, bp = regs->bp;
	unsigned idx = 0;

	for (;;) {
		uint64_t fr[2];

		if (idx >= skip) {
			struct stb_unw_frame f = {.ip = ip, .sp = sp, .how = STB_FRAME_FP};
			++*delivered;
			if (fn(&f, arg))
				return STB_UNW_END_CALLBACK;
			if (*delivered == max_frames)
				return STB_UNW_END_DEPTH;
		}
		idx++;
		if ((++*steps & 63) == 0 && stb_unw_ctx_late(w))
			return STB_UNW_END_DEADLINE;
		if (bp == 0)
			return STB_UNW_END_BOTTOM;
		/* bp must point into the stack above the current frame. */
		if ((bp & 7) || bp < sp || bp > UINT64_MAX - 16)
			return STB_UNW_END_BAD_FRAME;
		if (read8(w, bp, &fr[0]) < 0 || read8(w, bp + 8, &fr[1]) < 0)
			return end_or(w, STB_UNW_END_UNREADABLE);
		if (fr[1] == 0)
			return STB_UNW_END_BOTTOM;
		if (!stb_unw_ctx_mod(w, fr[1]))
			return end_or(w, STB_UNW_END_NO_INFO);
		ip = fr[1];
		sp = bp + 16;
		if (fr[0] != 0 && fr[0] <= bp)
			fr[0] = 0; /* not a caller's frame: this frame is the last one */
		bp = fr[0];
	}
}

int stb_unw_walk_budget(struct stb_unw_proc *p, const struct stb_regs *regs,
			const struct stb_stack_copy *copy, unsigned skip,
			const struct stb_unw_budget *b, stb_unw_frame_fn fn, void *arg,
			struct stb_unw_result *res)
{
	struct stb_unw_ctx w;
	unsigned delivered = 0, end, max_frames;
	uint64_t steps = 0;

	if (!p || !regs || !fn)
		return -EINVAL;
	max_frames = b && b->max_frames ? b->max_frames : STB_UNW_DEFAULT_DEPTH;
	walk_begin(&w, p, regs, copy, b);
	if (regs->flags & STB_UNW_FP_CHAIN)
		end = walk_fp(&w, regs, skip, max_frames, fn, arg, &delivered, &steps);
	else
		end = walk_dwarf(&w, regs, skip, max_frames, fn, arg, &delivered, &steps);
	w.end = end;
	walk_end(&w, steps, delivered);
	if (res) {
		res->frames = delivered;
		res->end = end;
		res->target_bytes = w.n_target_bytes;
		res->replayable = !w.not_replayable;
		res->read_logged = w.nlog;
	}
	return (int)delivered;
}

int stb_unw_walk(struct stb_unw_proc *p, const struct stb_regs *regs,
		 const struct stb_stack_copy *copy, unsigned skip, unsigned max_depth,
		 stb_unw_frame_fn fn, void *arg)
{
	struct stb_unw_budget b = {.max_frames = max_depth};

	return stb_unw_walk_budget(p, regs, copy, skip, &b, fn, arg, NULL);
}

int stb_unw_walk_fp(struct stb_unw_proc *p, const struct stb_regs *regs,
		    const struct stb_stack_copy *copy, unsigned skip, unsigned max_depth,
		    stb_unw_frame_fn fn, void *arg)
{
	struct stb_unw_budget b = {.max_frames = max_depth};
	struct stb_regs r;

	if (!regs)
		return -EINVAL;
	r = *regs;
	r.flags |= STB_UNW_FP_CHAIN;
	return stb_unw_walk_budget(p, &r, copy, skip, &b, fn, arg, NULL);
}
