/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The stack-profile builder of pprof.h: interned strings, locations (one per
 * address and kind), stacks and samples in hash sets; symbolization into
 * functions, lines (inline frames) and mappings when written; the pprof
 * (profile.proto wire format, gzipped), folded and JSON writers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zlib.h>

#include "encode/escape.h"
#include "encode/json.h"
#include "hashset.h"
#include "report/pprof.h"
#include "report/rtframes.h"
#include "stb/abi.h"
#include "symbols/symbolize.h"
#include "unwind/unwind.h"
#include "util.h"

#define STB_PP_GZ_CHUNK (64u << 10)
#define STB_PP_LIKELY(x) __builtin_expect(!!(x), 1)

struct pp_loc {
	uint64_t ip;
	uint64_t hash;
	uint64_t module_offset; /* resolved: ip - load bias, when the module is known */
	uint32_t note;          /* string index of a synthetic frame; 0: a real address */
	uint32_t mapping;       /* resolved: 1-based mapping, 0 none */
	uint32_t module;        /* resolved: string index of the module's base name, 0 none */
	uint32_t line0, nlines; /* resolved: p->lines[line0 ..], the innermost call first */
	bool exact;
	bool resolved;
};

struct stb_pp_line {
	uint32_t func; /* 1-based function id */
	int64_t line;
};

struct pp_func {
	uint32_t name, file;
	uint64_t hash;
};

struct stb_pp_map {
	uint64_t start, limit, offset;
	uint64_t hash;
	uint32_t file, build_id;
	bool ranged;     /* start/limit from the module table, not from the addresses */
	bool fn, fl, ln, in;
};

struct stb_pp_stack {
	uint32_t off, n; /* p->stack_locs[off ..], 1-based location ids, the leaf first */
	uint32_t voff, vn; /* hide_runtime: what is written, p->view_locs[voff ..] */
	uint64_t hash;
};

struct stb_pp_label {
	uint32_t key, str, unit;
	int64_t num;
};

struct stb_pp_sample {
	uint32_t stack;
	uint32_t label0, nlabels;
	uint64_t hash;
	int64_t v[STB_PPROF_MAX_VALUES];
};

struct stb_pprof {
	struct stb_pprof_opts o;
	uint32_t type_str[STB_PPROF_MAX_VALUES][2];
	uint32_t period_str[2];

	char **strs;
	size_t nstrs, cstrs;
	uint64_t *str_hash;
	size_t cstr_hash;
	struct stb_hashset str_set;

	struct pp_loc *locs;
	size_t nlocs, clocs;
	struct stb_hashset loc_set;

	struct stb_pp_line *lines;
	size_t nlines, clines;

	struct pp_func *funcs;
	size_t nfuncs, cfuncs;
	struct stb_hashset func_set;

	struct stb_pp_map *maps;
	size_t nmaps, cmaps;
	struct stb_hashset map_set;

	uint32_t *stack_locs;
	size_t nstack_locs, cstack_locs;
	struct stb_pp_stack *stacks;
	size_t nstacks, cstacks;
	bool full;              /* the last stack met opts.max_stacks */
	struct stb_hashset stack_set;
	/* hide_runtime: the stacks as written, without the runtime's frames;
	 * stacks[0 .. nviewed) have theirs (pp_view). */
	uint32_t *view_locs;
	size_t nview_locs, cview_locs, nviewed;

	struct stb_pp_label *labels;
	size_t nlabels, clabels;
	struct stb_pp_sample *samples;
	size_t nsamples, csamples;
	struct stb_hashset sample_set;

	uint32_t *comments;
	size_t ncomments, ccomments;
};

/* ---- small helpers ---- */

/* ---- strings ---- */

static bool pp_str_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct stb_pprof *p = ctx;
	return strcmp(p->strs[idx], key) == 0;
}

static uint64_t pp_str_rehash(const void *ctx, uint32_t idx)
{
	const struct stb_pprof *p = ctx;
	return p->str_hash[idx];
}

/* Index of s in the string table, added if new ("" and NULL are 0). -ENOMEM on failure. */
static int64_t pp_str(struct stb_pprof *p, const char *s)
{
	if (!s || !*s)
		return 0;
	uint64_t h = stb_fnv1a64_add(STB_FNV1A64_BASIS, s, strlen(s));
	if (stb_hashset_reserve(&p->str_set, p, pp_str_rehash) != 0)
		return -ENOMEM;
	uint32_t *slot = stb_hashset_find(&p->str_set, h, p, pp_str_eq, s);
	if (*slot)
		return *slot - 1;
	if (stb_grow(&p->strs, &p->cstrs, p->nstrs + 1, sizeof(*p->strs)) != 0 ||
	    stb_grow(&p->str_hash, &p->cstr_hash, p->nstrs + 1, sizeof(*p->str_hash)) != 0)
		return -ENOMEM;
	char *copy = strdup(s);
	if (!copy)
		return -ENOMEM;
	p->strs[p->nstrs] = copy;
	p->str_hash[p->nstrs] = h;
	*slot = (uint32_t)++p->nstrs;
	p->str_set.n++;
	return (int64_t)p->nstrs - 1;
}

/* ---- construction ---- */

struct stb_pprof *stb_pprof_new(const struct stb_pprof_opts *opts)
{
	if (!opts || opts->nvalues == 0 || opts->nvalues > STB_PPROF_MAX_VALUES ||
	    opts->default_type >= (int)opts->nvalues) {
		errno = EINVAL;
		return NULL;
	}
	struct stb_pprof *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->o = *opts;
	/* Entry 0 of the string table is "" (not in the set). */
	p->strs = calloc(16, sizeof(*p->strs));
	p->str_hash = calloc(16, sizeof(*p->str_hash));
	if (!p->strs || !p->str_hash || !(p->strs[0] = strdup("")))
		goto fail;
	p->cstrs = p->cstr_hash = 16;
	p->nstrs = 1;
	for (unsigned i = 0; i < opts->nvalues; i++) {
		int64_t t = pp_str(p, opts->types[i].type);
		int64_t u = pp_str(p, opts->types[i].unit);
		if (t < 0 || u < 0)
			goto fail;
		p->type_str[i][0] = (uint32_t)t;
		p->type_str[i][1] = (uint32_t)u;
	}
	if (opts->period_type.type) {
		int64_t t = pp_str(p, opts->period_type.type);
		int64_t u = pp_str(p, opts->period_type.unit);
		if (t < 0 || u < 0)
			goto fail;
		p->period_str[0] = (uint32_t)t;
		p->period_str[1] = (uint32_t)u;
	}
	return p;
fail:
	stb_pprof_free(p);
	errno = ENOMEM;
	return NULL;
}

void stb_pprof_free(struct stb_pprof *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nstrs; i++)
		free(p->strs[i]);
	free(p->strs);
	free(p->str_hash);
	free(p->str_set.slot);
	free(p->locs);
	free(p->loc_set.slot);
	free(p->lines);
	free(p->funcs);
	free(p->func_set.slot);
	free(p->maps);
	free(p->map_set.slot);
	free(p->stack_locs);
	free(p->stacks);
	free(p->stack_set.slot);
	free(p->view_locs);
	free(p->labels);
	free(p->samples);
	free(p->sample_set.slot);
	free(p->comments);
	free(p);
}

/* ---- locations and stacks ---- */

struct stb_pp_loc_key {
	uint64_t ip;
	uint32_t note;
	bool exact;
};

static uint64_t pp_loc_hash(const struct stb_pp_loc_key *k)
{
	return stb_hash_mix(stb_hash_mix(k->ip, k->note), k->exact);
}

static bool pp_loc_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct stb_pprof *p = ctx;
	const struct stb_pp_loc_key *k = key;
	const struct pp_loc *l = &p->locs[idx];
	return l->ip == k->ip && l->note == k->note && l->exact == k->exact;
}

static uint64_t pp_loc_rehash(const void *ctx, uint32_t idx)
{
	const struct stb_pprof *p = ctx;
	return p->locs[idx].hash;
}

/* 1-based id of the location (ip, exact) or of the synthetic frame note. 0 on ENOMEM. */
static uint32_t pp_loc(struct stb_pprof *p, uint64_t ip, bool exact, const char *note)
{
	struct stb_pp_loc_key k = {.ip = note ? 0 : ip, .exact = note ? false : exact};
	if (note) {
		int64_t s = pp_str(p, note);
		if (s <= 0)
			return 0;
		k.note = (uint32_t)s;
	}
	uint64_t h = pp_loc_hash(&k);
	if (stb_hashset_reserve(&p->loc_set, p, pp_loc_rehash) != 0)
		return 0;
	uint32_t *slot = stb_hashset_find(&p->loc_set, h, p, pp_loc_eq, &k);
	if (*slot)
		return *slot;
	if (p->o.max_stacks && !note && p->nlocs >= 4 * (size_t)p->o.max_stacks) {
		p->full = true; /* bounded memory: no new address */
		return 0;
	}
	if (stb_grow(&p->locs, &p->clocs, p->nlocs + 1, sizeof(*p->locs)) != 0)
		return 0;
	struct pp_loc *l = &p->locs[p->nlocs];
	memset(l, 0, sizeof(*l));
	l->ip = k.ip;
	l->note = k.note;
	l->exact = k.exact;
	l->hash = h;
	*slot = (uint32_t)++p->nlocs;
	p->loc_set.n++;
	return *slot;
}

struct stb_pp_stack_key {
	const uint32_t *locs;
	uint32_t n;
};

static uint64_t pp_stack_hash(const uint32_t *locs, uint32_t n)
{
	uint64_t h = n;
	for (uint32_t i = 0; i < n; i++)
		h = stb_hash_mix(h, locs[i]);
	return h;
}

static bool pp_stack_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct stb_pprof *p = ctx;
	const struct stb_pp_stack_key *k = key;
	const struct stb_pp_stack *s = &p->stacks[idx];
	return s->n == k->n && memcmp(p->stack_locs + s->off, k->locs, k->n * sizeof(*k->locs)) == 0;
}

static uint64_t pp_stack_rehash(const void *ctx, uint32_t idx)
{
	const struct stb_pprof *p = ctx;
	return p->stacks[idx].hash;
}

int64_t stb_pprof_stack(struct stb_pprof *p, const struct stb_pprof_stack *s)
{
	if (!p || !s || (s->n && !s->ips))
		return -EINVAL;
	uint32_t n = s->n + (s->leaf != NULL) + (s->root != NULL);
	uint32_t stackbuf[128];
	uint32_t *locs = n <= 128 ? stackbuf : malloc(n * sizeof(*locs));
	int64_t rc = -ENOMEM;
	if (!locs)
		return -ENOMEM;
	uint32_t k = 0;
	p->full = false;
	if (s->leaf && !(locs[k++] = pp_loc(p, 0, false, s->leaf)))
		goto cleanup;
	for (unsigned i = 0; i < s->n; i++)
		if (!(locs[k++] = pp_loc(p, s->ips[i], i == 0 && s->first_exact, NULL)))
			goto cleanup;
	if (s->root && !(locs[k++] = pp_loc(p, 0, false, s->root)))
		goto cleanup;
	uint64_t h = pp_stack_hash(locs, n);
	struct stb_pp_stack_key key = {.locs = locs, .n = n};
	if (stb_hashset_reserve(&p->stack_set, p, pp_stack_rehash) != 0)
		goto cleanup;
	uint32_t *slot = stb_hashset_find(&p->stack_set, h, p, pp_stack_eq, &key);
	if (*slot) {
		rc = *slot - 1;
		goto cleanup;
	}
	if (p->o.max_stacks && p->nstacks >= p->o.max_stacks) {
		rc = -ENOSPC;
		goto cleanup;
	}
	if (stb_grow(&p->stack_locs, &p->cstack_locs, p->nstack_locs + n,
			sizeof(*p->stack_locs)) != 0 ||
	    stb_grow(&p->stacks, &p->cstacks, p->nstacks + 1, sizeof(*p->stacks)) != 0)
		goto cleanup;
	memcpy(p->stack_locs + p->nstack_locs, locs, n * sizeof(*locs));
	p->stacks[p->nstacks] = (struct stb_pp_stack){.off = (uint32_t)p->nstack_locs, .n = n, .hash = h};
	p->nstack_locs += n;
	*slot = (uint32_t)++p->nstacks;
	p->stack_set.n++;
	rc = (int64_t)p->nstacks - 1;
cleanup:
	if (rc == -ENOMEM && p->full)
		rc = -ENOSPC;
	if (locs != stackbuf)
		free(locs);
	return rc;
}

/* ---- samples ---- */

struct stb_pp_sample_key {
	uint32_t stack;
	const struct stb_pp_label *labels;
	uint32_t n;
};

static bool pp_sample_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct stb_pprof *p = ctx;
	const struct stb_pp_sample_key *k = key;
	const struct stb_pp_sample *s = &p->samples[idx];
	if (s->stack != k->stack || s->nlabels != k->n)
		return false;
	for (uint32_t i = 0; i < k->n; i++) {
		const struct stb_pp_label *a = &p->labels[s->label0 + i], *b = &k->labels[i];
		if (a->key != b->key || a->str != b->str || a->num != b->num || a->unit != b->unit)
			return false;
	}
	return true;
}

static uint64_t pp_sample_rehash(const void *ctx, uint32_t idx)
{
	const struct stb_pprof *p = ctx;
	return p->samples[idx].hash;
}

int64_t stb_pprof_sample(struct stb_pprof *p, uint32_t stack, const struct stb_pprof_label *labels,
			 unsigned nlabels, const int64_t *values)
{
	if (!p || stack >= p->nstacks || (nlabels && !labels) || !values)
		return -EINVAL;
	struct stb_pp_label buf[16];
	struct stb_pp_label *ls = nlabels <= 16 ? buf : malloc(nlabels * sizeof(*ls));
	int64_t rc = -ENOMEM;
	if (!ls)
		return -ENOMEM;
	uint64_t h = stb_hash_mix(0, stack);
	for (unsigned i = 0; i < nlabels; i++) {
		int64_t key = pp_str(p, labels[i].key);
		int64_t str = labels[i].str ? pp_str(p, labels[i].str) : 0;
		int64_t unit = labels[i].str ? 0 : pp_str(p, labels[i].unit);
		if (key < 0 || str < 0 || unit < 0)
			goto cleanup;
		ls[i] = (struct stb_pp_label){.key = (uint32_t)key, .str = (uint32_t)str,
					      .unit = (uint32_t)unit,
					      .num = labels[i].str ? 0 : labels[i].num};
		h = stb_hash_mix(stb_hash_mix(stb_hash_mix(h, ls[i].key), ls[i].str),
			       (uint64_t)ls[i].num ^ ((uint64_t)ls[i].unit << 48));
	}
	struct stb_pp_sample_key key = {.stack = stack, .labels = ls, .n = nlabels};
	if (stb_hashset_reserve(&p->sample_set, p, pp_sample_rehash) != 0)
		goto cleanup;
	uint32_t *slot = stb_hashset_find(&p->sample_set, h, p, pp_sample_eq, &key);
	if (!*slot) {
		if (stb_grow(&p->labels, &p->clabels, p->nlabels + nlabels, sizeof(*p->labels)) != 0 ||
		    stb_grow(&p->samples, &p->csamples, p->nsamples + 1, sizeof(*p->samples)) != 0)
			goto cleanup;
		struct stb_pp_sample *s = &p->samples[p->nsamples];
		memset(s, 0, sizeof(*s));
		s->stack = stack;
		s->label0 = (uint32_t)p->nlabels;
		s->nlabels = nlabels;
		s->hash = h;
		if (nlabels)
			memcpy(p->labels + p->nlabels, ls, nlabels * sizeof(*ls));
		p->nlabels += nlabels;
		*slot = (uint32_t)++p->nsamples;
		p->sample_set.n++;
	}
	rc = *slot - 1;
	stb_pprof_sample_add(p, (uint32_t)rc, values);
cleanup:
	if (ls != buf)
		free(ls);
	return rc;
}

int stb_pprof_sample_add(struct stb_pprof *p, uint32_t idx, const int64_t *values)
{
	if (!p || idx >= p->nsamples || !values)
		return -EINVAL;
	for (unsigned i = 0; i < p->o.nvalues; i++)
		p->samples[idx].v[i] += values[i];
	return 0;
}

size_t stb_pprof_nsamples(const struct stb_pprof *p)
{
	return p ? p->nsamples : 0;
}

size_t stb_pprof_nstacks(const struct stb_pprof *p)
{
	return p ? p->nstacks : 0;
}

void stb_pprof_set_duration(struct stb_pprof *p, int64_t duration_ns)
{
	if (p)
		p->o.duration_ns = duration_ns;
}

static int pp_comment_line(struct stb_pprof *p, const char *text)
{
	int64_t s = pp_str(p, text);
	if (s < 0 || stb_grow(&p->comments, &p->ccomments, p->ncomments + 1,
				 sizeof(*p->comments)) != 0)
		return -ENOMEM;
	p->comments[p->ncomments++] = (uint32_t)s;
	return 0;
}

int stb_pprof_comment(struct stb_pprof *p, const char *text)
{
	if (!p || !text)
		return -EINVAL;
	/* pprof draws every comment as one line of its legend: long ones are
	 * wrapped at spaces, continuation lines indented. */
	char line[STB_PPROF_COMMENT_WIDTH + 1];
	const char *s = text;
	bool first = true;
	while (*s) {
		size_t room = STB_PPROF_COMMENT_WIDTH - (first ? 0 : 2);
		size_t n = strlen(s);
		if (n > room) {
			size_t cut = room;
			while (cut > room / 2 && s[cut] != ' ')
				cut--;
			n = s[cut] == ' ' ? cut : room;
			/* Do not split a UTF-8 sequence. */
			while (n > 1 && ((unsigned char)s[n] & 0xc0) == 0x80)
				n--;
		}
		snprintf(line, sizeof(line), "%s%.*s", first ? "" : "  ", (int)n, s);
		int rc = pp_comment_line(p, line);
		if (rc != 0)
			return rc;
		s += n;
		while (*s == ' ')
			s++;
		first = false;
	}
	return first ? pp_comment_line(p, "") : 0;
}

/* ---- symbolization ---- */

static bool pp_func_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct stb_pprof *p = ctx;
	const uint32_t *k = key;
	return p->funcs[idx].name == k[0] && p->funcs[idx].file == k[1];
}

static uint64_t pp_func_rehash(const void *ctx, uint32_t idx)
{
	const struct stb_pprof *p = ctx;
	return p->funcs[idx].hash;
}

/* 1-based function id of (name, file); 0 on ENOMEM. */
static uint32_t pp_func(struct stb_pprof *p, const char *name, const char *file)
{
	int64_t n = pp_str(p, name ? name : "??");
	int64_t f = pp_str(p, file);
	if (n < 0 || f < 0)
		return 0;
	uint32_t k[2] = {(uint32_t)n, (uint32_t)f};
	uint64_t h = stb_hash_mix(k[0], k[1]);
	if (stb_hashset_reserve(&p->func_set, p, pp_func_rehash) != 0)
		return 0;
	uint32_t *slot = stb_hashset_find(&p->func_set, h, p, pp_func_eq, k);
	if (*slot)
		return *slot;
	if (stb_grow(&p->funcs, &p->cfuncs, p->nfuncs + 1, sizeof(*p->funcs)) != 0)
		return 0;
	p->funcs[p->nfuncs] = (struct pp_func){.name = k[0], .file = k[1], .hash = h};
	*slot = (uint32_t)++p->nfuncs;
	p->func_set.n++;
	return *slot;
}

struct stb_pp_map_key {
	uint32_t file;
	uint64_t start; /* 0 when the range is not known */
};

static bool pp_map_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct stb_pprof *p = ctx;
	const struct stb_pp_map_key *k = key;
	const struct stb_pp_map *m = &p->maps[idx];
	return m->file == k->file && (m->ranged ? m->start : 0) == k->start;
}

static uint64_t pp_map_rehash(const void *ctx, uint32_t idx)
{
	const struct stb_pprof *p = ctx;
	return p->maps[idx].hash;
}

static void pp_hex(char *dst, size_t size, const uint8_t *b, unsigned n)
{
	static const char digits[] = "0123456789abcdef";
	size_t k = 0;
	for (unsigned i = 0; i < n && k + 2 < size; i++) {
		dst[k++] = digits[b[i] >> 4];
		dst[k++] = digits[b[i] & 15];
	}
	dst[k] = '\0';
}

/* 1-based mapping of the module holding ip; 0 when unknown or on ENOMEM. */
static uint32_t pp_mapping(struct stb_pprof *p, uint64_t ip, const struct stb_sym_info *si,
			       const struct stb_unw_module_info *mi)
{
	const char *path = mi && mi->path[0] ? mi->path : si->module;
	if (!path)
		return 0;
	char bid[2 * sizeof(mi->build_id) + 1];
	const char *build_id = si->build_id;
	if (mi && mi->build_id_len) {
		pp_hex(bid, sizeof(bid), mi->build_id, mi->build_id_len);
		build_id = bid;
	}
	int64_t file = pp_str(p, path);
	int64_t bi = pp_str(p, build_id);
	if (file <= 0 || bi < 0)
		return 0;
	struct stb_pp_map_key k = {.file = (uint32_t)file, .start = mi ? mi->lo : 0};
	uint64_t h = stb_hash_mix(k.file, k.start);
	if (stb_hashset_reserve(&p->map_set, p, pp_map_rehash) != 0)
		return 0;
	uint32_t *slot = stb_hashset_find(&p->map_set, h, p, pp_map_eq, &k);
	if (!*slot) {
		if (stb_grow(&p->maps, &p->cmaps, p->nmaps + 1, sizeof(*p->maps)) != 0)
			return 0;
		struct stb_pp_map *m = &p->maps[p->nmaps];
		memset(m, 0, sizeof(*m));
		m->file = k.file;
		m->build_id = (uint32_t)bi;
		m->hash = h;
		if (mi) {
			/* The executable range; its file offset is the ELF virtual
			 * address of its start (equal to the file offset for the
			 * usual layouts of ld and lld). */
			m->ranged = true;
			m->start = mi->lo;
			m->limit = mi->hi;
			m->offset = mi->lo - mi->bias;
		} else {
			m->start = ip;
			m->limit = ip + 1;
			m->offset = si->module_offset;
		}
		*slot = (uint32_t)++p->nmaps;
		p->map_set.n++;
	}
	struct stb_pp_map *m = &p->maps[*slot - 1];
	if (!m->ranged && ip < m->start) {
		m->start = ip;
		m->offset = si->module_offset;
	}
	if (!m->ranged && ip >= m->limit)
		m->limit = ip + 1;
	return *slot;
}

static int pp_add_line(struct stb_pprof *p, const char *func, const char *file, int line)
{
	uint32_t f = pp_func(p, func, file);
	if (!f || stb_grow(&p->lines, &p->clines, p->nlines + 1, sizeof(*p->lines)) != 0)
		return -ENOMEM;
	p->lines[p->nlines++] = (struct stb_pp_line){.func = f, .line = line > 0 ? line : 0};
	return 0;
}

static int pp_resolve_loc(struct stb_pprof *p, size_t i)
{
	if (p->locs[i].note) {
		/* A synthetic frame: one line, a function named after it. */
		uint32_t line0 = (uint32_t)p->nlines;
		if (pp_add_line(p, p->strs[p->locs[i].note], NULL, 0) != 0)
			return -ENOMEM;
		p->locs[i].line0 = line0;
		p->locs[i].nlines = 1;
		p->locs[i].resolved = true;
		return 0;
	}
	uint64_t ip = p->locs[i].ip;
	bool exact = p->locs[i].exact;
	struct stb_sym_info si;
	struct stb_unw_module_info mi;
	memset(&si, 0, sizeof(si));
	if (p->o.sym && stb_sym_lookup(p->o.sym, ip, !exact, &si) != 0)
		si.function = NULL;
	bool have_mi = p->o.unw && stb_unw_proc_module(p->o.unw, ip, &mi) == 0;
	uint32_t map = pp_mapping(p, ip, &si, have_mi ? &mi : NULL);
	const char *path = have_mi && mi.path[0] ? mi.path : si.module;
	uint32_t line0 = (uint32_t)p->nlines;
	if (si.function) {
		/* The runtime's internals inlined into its functions are its own
		 * frames (rtframes.h). */
		unsigned ninline = p->o.hide_runtime && stb_rtframes_inlines_hidden(si.function)
					   ? 0 : si.ninline;
		for (unsigned k = 0; k < ninline; k++)
			if (pp_add_line(p, si.inlines[k].function ? si.inlines[k].function
								       : "[inlined]",
					    si.inlines[k].file, si.inlines[k].line) != 0)
				return -ENOMEM;
		if (pp_add_line(p, si.function, si.file, si.line) != 0)
			return -ENOMEM;
	}
	int64_t module = 0;
	if (path) {
		const char *base = strrchr(path, '/');
		module = pp_str(p, base ? base + 1 : path);
		if (module < 0)
			return -ENOMEM;
	}
	struct pp_loc *l = &p->locs[i];
	l->mapping = map;
	l->module = (uint32_t)module;
	l->module_offset = have_mi ? ip - mi.bias : si.module_offset;
	l->line0 = line0;
	l->nlines = (uint32_t)p->nlines - line0;
	l->resolved = true;
	if (map) {
		struct stb_pp_map *m = &p->maps[map - 1];
		m->fn |= si.function != NULL;
		m->fl |= si.file != NULL;
		m->ln |= si.line > 0;
		m->in |= si.ninline > 0;
	}
	return 0;
}

/* The physical function of resolved location id (1-based), or NULL. */
static const char *pp_loc_function(const struct stb_pprof *p, uint32_t id)
{
	const struct pp_loc *l = &p->locs[id - 1];
	if (!l->nlines || l->note)
		return NULL;
	return p->strs[p->funcs[p->lines[l->line0 + l->nlines - 1].func - 1].name];
}

/*
 * The stacks as written with hide_runtime: each one's synthetic leaf and
 * root frames, and between them its frames without the runtime's own
 * (rtframes.h decides from the physical functions, as a report's view
 * does; a stack with a root note was cut: its entry frames are not known).
 */
static int pp_view(struct stb_pprof *p)
{
	struct stb_frame buf[128];
	for (; p->nviewed < p->nstacks; p->nviewed++) {
		struct stb_pp_stack *st = &p->stacks[p->nviewed];
		const uint32_t *locs = p->stack_locs + st->off;
		uint32_t n = st->n;
		uint32_t lead = n && p->locs[locs[0] - 1].note ? 1 : 0;
		uint32_t tail = n > lead && p->locs[locs[n - 1] - 1].note ? 1 : 0;
		uint32_t m = n - lead - tail;
		struct stb_frame *f = m <= 128 ? buf : calloc(m, sizeof(*f));
		if (!f || stb_grow(&p->view_locs, &p->cview_locs, p->nview_locs + n,
				  sizeof(*p->view_locs)) != 0) {
			if (f != buf)
				free(f);
			return -ENOMEM;
		}
		for (uint32_t i = 0; i < m; i++) {
			const struct pp_loc *l = &p->locs[locs[lead + i] - 1];
			f[i] = (struct stb_frame){
			    .ip = l->ip, .symbol = pp_loc_function(p, locs[lead + i]),
			    .module = l->mapping ? p->strs[p->maps[l->mapping - 1].file] : NULL};
		}
		unsigned inner, outer;
		stb_rtframes_find(f, m, !tail, &inner, &outer);
		if (f != buf)
			free(f);
		uint32_t *v = p->view_locs + p->nview_locs;
		uint32_t k = 0;
		if (lead)
			v[k++] = locs[0];
		for (uint32_t i = lead + inner; i < lead + m - outer; i++)
			v[k++] = locs[i];
		if (tail)
			v[k++] = locs[n - 1];
		st->voff = (uint32_t)p->nview_locs;
		st->vn = k;
		p->nview_locs += k;
	}
	return 0;
}

/* The locations of stack st as written (*n of them, the leaf first). */
static const uint32_t *pp_stack_locs(const struct stb_pprof *p, const struct stb_pp_stack *st,
				     uint32_t *n)
{
	if (p->o.hide_runtime) {
		*n = st->vn;
		return p->view_locs + st->voff;
	}
	*n = st->n;
	return p->stack_locs + st->off;
}

static int pp_resolve(struct stb_pprof *p)
{
	/* The main executable is mapping 1 (pprof's "File:"; Pyroscope and
	 * Parca key profiles on it), even when no sample is in it. */
	struct stb_unw_module_info mi;
	if (p->nmaps == 0 && p->o.unw && stb_unw_proc_main_module(p->o.unw, &mi) == 0) {
		struct stb_sym_info si;
		memset(&si, 0, sizeof(si));
		pp_mapping(p, mi.lo, &si, &mi);
	}
	for (size_t i = 0; i < p->nlocs; i++) {
		/* Past the deadline: addresses and mappings only, no symbols. */
		if (p->o.sym && p->o.sym_deadline && (i & 63) == 0 &&
		    stb_now_ns() >= p->o.sym_deadline)
			p->o.sym = NULL;
		if (!p->locs[i].resolved && pp_resolve_loc(p, i) != 0)
			return -ENOMEM;
	}
	return p->o.hide_runtime ? pp_view(p) : 0;
}

/* ---- pprof ---- */

/* profile.proto is written field by field (proto3 wire format: varints,
 * length-delimited messages, packed repeated scalars, zero values left out)
 * into a gzip stream, a bounded buffer at a time: memory does not grow with
 * the profile. */

/* A message being built (grows), or the profile's pending bytes. */
struct pp_wire {
	uint8_t *b;
	size_t len, cap;
	int err; /* -ENOMEM: the rest was dropped */
};

/* Room for n more bytes; false (w->err set) without memory. */
static bool w_room(struct pp_wire *w, size_t n)
{
	if (STB_PP_LIKELY(n <= w->cap - w->len))
		return true;
	if (w->err)
		return false;
	if (n > SIZE_MAX - w->len || stb_grow(&w->b, &w->cap, w->len + n, 1) != 0) {
		w->err = -ENOMEM;
		return false;
	}
	return true;
}

static void w_put(struct pp_wire *w, const void *s, size_t n)
{
	if (!w->err && w_room(w, n)) {
		memcpy(w->b + w->len, s, n);
		w->len += n;
	}
}

static unsigned varint(uint8_t d[10], uint64_t v)
{
	unsigned n = 0;
	while (v >= 0x80) {
		d[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	d[n++] = (uint8_t)v;
	return n;
}

static void w_varint(struct pp_wire *w, uint64_t v)
{
	if (!w->err && w_room(w, 10))
		w->len += varint(w->b + w->len, v);
}

/* Field f (wire type 0): an int64/uint64/bool, left out when 0. */
static void w_num(struct pp_wire *w, unsigned f, uint64_t v)
{
	if (!v)
		return;
	w_varint(w, (uint64_t)f << 3);
	w_varint(w, v);
}

/* Field f (wire type 2): bytes, or a message built in m. */
static void w_bytes(struct pp_wire *w, unsigned f, const void *s, size_t n)
{
	w_varint(w, (uint64_t)f << 3 | 2);
	w_varint(w, n);
	w_put(w, s, n);
}

static void w_msg(struct pp_wire *w, unsigned f, struct pp_wire *m)
{
	if (m->err)
		w->err = m->err;
	w_bytes(w, f, m->b, m->len);
	m->len = 0;
}

/* Packed repeated field f of n values, each at get(arg, i). */
static void w_packed(struct pp_wire *w, unsigned f, const void *arg, size_t n,
		     uint64_t (*get)(const void *arg, size_t i))
{
	if (!n)
		return;
	size_t size = 0;
	uint8_t d[10];
	for (size_t i = 0; i < n; i++)
		size += varint(d, get(arg, i));
	w_varint(w, (uint64_t)f << 3 | 2);
	w_varint(w, size);
	for (size_t i = 0; i < n; i++)
		w_varint(w, get(arg, i));
}

static uint64_t get_u32(const void *arg, size_t i)
{
	return ((const uint32_t *)arg)[i];
}

static uint64_t get_i64(const void *arg, size_t i)
{
	return (uint64_t)((const int64_t *)arg)[i];
}

/* The gzip stream the profile goes to. */
struct pp_gz {
	z_stream zs;
	FILE *out;
	uint8_t *chunk;
	int err;
};

static void gz_deflate(struct pp_gz *g, const uint8_t *s, size_t n, int flush)
{
	g->zs.next_in = (Bytef *)(uintptr_t)s;
	g->zs.avail_in = (uInt)n;
	int z;
	do {
		g->zs.next_out = g->chunk;
		g->zs.avail_out = STB_PP_GZ_CHUNK;
		z = deflate(&g->zs, flush);
		if (z == Z_STREAM_ERROR) {
			g->err = -EIO;
			return;
		}
		size_t have = STB_PP_GZ_CHUNK - g->zs.avail_out;
		if (have && fwrite(g->chunk, 1, have, g->out) != have) {
			g->err = -EIO;
			return;
		}
	} while (g->zs.avail_out == 0 || (flush == Z_FINISH && z != Z_STREAM_END));
}

/* Hands the profile's pending bytes to the stream once there are enough. */
static void gz_feed(struct pp_gz *g, struct pp_wire *top, bool last)
{
	if (!g->err && top->err)
		g->err = top->err;
	if (g->err || (!last && top->len < STB_PP_GZ_CHUNK))
		return;
	gz_deflate(g, top->b, top->len, last ? Z_FINISH : Z_NO_FLUSH);
	top->len = 0;
}

int stb_pprof_write(struct stb_pprof *p, FILE *out)
{
	if (!p || !out)
		return -EINVAL;
	if (pp_resolve(p) != 0)
		return -ENOMEM;
	struct pp_gz g = {.out = out, .chunk = malloc(STB_PP_GZ_CHUNK)};
	struct pp_wire top = {0}, m = {0}, sub = {0};
	if (!g.chunk)
		return -ENOMEM;
	/* Speed over size: continuous mode writes one every few seconds. */
	if (deflateInit2(&g.zs, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
		free(g.chunk);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < p->o.nvalues; i++) { /* 1: sample_type */
		w_num(&m, 1, p->type_str[i][0]);
		w_num(&m, 2, p->type_str[i][1]);
		w_msg(&top, 1, &m);
	}
	for (size_t i = 0; i < p->nsamples && !g.err; i++) { /* 2: sample */
		const struct stb_pp_sample *s = &p->samples[i];
		uint32_t nl;
		const uint32_t *locs = pp_stack_locs(p, &p->stacks[s->stack], &nl);
		w_packed(&m, 1, locs, nl, get_u32);
		w_packed(&m, 2, s->v, p->o.nvalues, get_i64);
		for (uint32_t k = 0; k < s->nlabels; k++) {
			const struct stb_pp_label *l = &p->labels[s->label0 + k];
			w_num(&sub, 1, l->key);
			w_num(&sub, 2, l->str);
			w_num(&sub, 3, (uint64_t)l->num);
			w_num(&sub, 4, l->unit);
			w_msg(&m, 3, &sub);
		}
		w_msg(&top, 2, &m);
		gz_feed(&g, &top, false);
	}
	for (size_t i = 0; i < p->nmaps; i++) { /* 3: mapping */
		const struct stb_pp_map *mp = &p->maps[i];
		w_num(&m, 1, i + 1);
		w_num(&m, 2, mp->start);
		w_num(&m, 3, mp->limit);
		w_num(&m, 4, mp->offset);
		w_num(&m, 5, mp->file);
		w_num(&m, 6, mp->build_id);
		w_num(&m, 7, mp->fn);
		w_num(&m, 8, mp->fl);
		w_num(&m, 9, mp->ln);
		w_num(&m, 10, mp->in);
		w_msg(&top, 3, &m);
	}
	for (size_t i = 0; i < p->nlocs && !g.err; i++) { /* 4: location */
		const struct pp_loc *l = &p->locs[i];
		w_num(&m, 1, i + 1);
		w_num(&m, 2, l->mapping);
		w_num(&m, 3, l->ip);
		for (uint32_t k = 0; k < l->nlines; k++) {
			const struct stb_pp_line *ln = &p->lines[l->line0 + k];
			w_num(&sub, 1, ln->func);
			w_num(&sub, 2, (uint64_t)(int64_t)ln->line);
			w_msg(&m, 4, &sub);
		}
		w_msg(&top, 4, &m);
		gz_feed(&g, &top, false);
	}
	for (size_t i = 0; i < p->nfuncs && !g.err; i++) { /* 5: function */
		w_num(&m, 1, i + 1);
		w_num(&m, 2, p->funcs[i].name);
		w_num(&m, 3, p->funcs[i].name);
		w_num(&m, 4, p->funcs[i].file);
		w_msg(&top, 5, &m);
		gz_feed(&g, &top, false);
	}
	for (size_t i = 0; i < p->nstrs && !g.err; i++) { /* 6: string_table */
		w_bytes(&top, 6, p->strs[i], strlen(p->strs[i]));
		gz_feed(&g, &top, false);
	}
	w_num(&top, 9, (uint64_t)p->o.time_ns);
	w_num(&top, 10, (uint64_t)p->o.duration_ns);
	if (p->o.period_type.type) { /* 11: period_type */
		w_num(&m, 1, p->period_str[0]);
		w_num(&m, 2, p->period_str[1]);
		w_msg(&top, 11, &m);
	}
	w_num(&top, 12, (uint64_t)p->o.period);
	w_packed(&top, 13, p->comments, p->ncomments, get_u32);
	if (p->o.default_type >= 0)
		w_num(&top, 14, p->type_str[p->o.default_type][0]);
	if (m.err || sub.err)
		top.err = -ENOMEM;
	gz_feed(&g, &top, true);
	deflateEnd(&g.zs);
	free(g.chunk);
	free(top.b);
	free(m.b);
	free(sub.b);
	return g.err;
}

/* ---- folded ---- */

/* A growing string. */
struct stb_pp_buf {
	char *s;
	size_t len, cap;
	bool oom;
};

static void pp_buf_put(struct stb_pp_buf *b, const char *s, size_t n)
{
	if (b->oom || stb_grow(&b->s, &b->cap, b->len + n + 1, 1) != 0) {
		b->oom = true;
		return;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

/* Appends a frame name, escaped as in text output (no control byte can
 * break a line); ';', the frame separator, becomes ':'. */
static void pp_buf_name(struct stb_pp_buf *b, const char *s)
{
	size_t n = strlen(s);
	size_t need = stb_text_escape(NULL, 0, s, n);
	if (b->oom || stb_grow(&b->s, &b->cap, b->len + need + 1, 1) != 0) {
		b->oom = true;
		return;
	}
	stb_text_escape(b->s + b->len, need + 1, s, n);
	for (size_t i = b->len; i < b->len + need; i++)
		if (b->s[i] == ';')
			b->s[i] = ':';
	b->len += need;
}

/* Appends the logical frames of location id (1-based), the outermost first. */
static void pp_buf_loc(struct stb_pprof *p, struct stb_pp_buf *b, uint32_t id)
{
	const struct pp_loc *l = &p->locs[id - 1];
	char tmp[64];
	if (l->nlines == 0) {
		if (l->module) {
			pp_buf_name(b, p->strs[l->module]);
			snprintf(tmp, sizeof(tmp), "+0x%" PRIx64, l->module_offset);
		} else {
			snprintf(tmp, sizeof(tmp), "0x%" PRIx64, l->ip);
		}
		pp_buf_put(b, tmp, strlen(tmp));
		pp_buf_put(b, ";", 1);
		return;
	}
	for (uint32_t j = l->nlines; j-- > 0;) {
		pp_buf_name(b, p->strs[p->funcs[p->lines[l->line0 + j].func - 1].name]);
		pp_buf_put(b, ";", 1);
	}
}

struct stb_pp_fline {
	char *s;
	int64_t count;
	uint64_t hash;
};

struct stb_pp_folded {
	struct stb_pp_fline *v;
	size_t n, cap;
	struct stb_hashset set;
};

static bool pp_fline_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct stb_pp_folded *f = ctx;
	return strcmp(f->v[idx].s, key) == 0;
}

static uint64_t pp_fline_rehash(const void *ctx, uint32_t idx)
{
	const struct stb_pp_folded *f = ctx;
	return f->v[idx].hash;
}

static int pp_fline_cmp(const void *a, const void *b)
{
	return strcmp(((const struct stb_pp_fline *)a)->s, ((const struct stb_pp_fline *)b)->s);
}

/* Adds count to line s (copied when new). 0 or -ENOMEM. */
static int pp_fline_add(struct stb_pp_folded *f, const char *s, int64_t count)
{
	uint64_t h = stb_fnv1a64_add(STB_FNV1A64_BASIS, s, strlen(s));
	if (stb_hashset_reserve(&f->set, f, pp_fline_rehash) != 0)
		return -ENOMEM;
	uint32_t *slot = stb_hashset_find(&f->set, h, f, pp_fline_eq, s);
	if (!*slot) {
		char *copy = strdup(s);
		if (!copy || stb_grow(&f->v, &f->cap, f->n + 1, sizeof(*f->v)) != 0) {
			free(copy);
			return -ENOMEM;
		}
		f->v[f->n] = (struct stb_pp_fline){.s = copy, .hash = h};
		*slot = (uint32_t)++f->n;
		f->set.n++;
	}
	f->v[*slot - 1].count += count;
	return 0;
}

int stb_pprof_folded_each(struct stb_pprof *p, const char *root_key, unsigned value,
			  int (*fn)(void *arg, const char *line, int64_t count), void *arg)
{
	if (!p || !fn || value >= p->o.nvalues)
		return -EINVAL;
	if (pp_resolve(p) != 0)
		return -ENOMEM;
	int64_t key = root_key ? pp_str(p, root_key) : 0;
	if (key < 0)
		return -ENOMEM;
	struct stb_pp_folded f;
	struct stb_pp_buf b;
	memset(&f, 0, sizeof(f));
	memset(&b, 0, sizeof(b));
	int rc = -ENOMEM;
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct stb_pp_sample *s = &p->samples[i];
		if (s->v[value] == 0)
			continue;
		b.len = 0;
		for (uint32_t k = 0; key && k < s->nlabels; k++) {
			const struct stb_pp_label *l = &p->labels[s->label0 + k];
			if (l->key == key && l->str) {
				pp_buf_name(&b, p->strs[l->str]);
				pp_buf_put(&b, ";", 1);
				break;
			}
		}
		uint32_t nl;
		const uint32_t *locs = pp_stack_locs(p, &p->stacks[s->stack], &nl);
		for (uint32_t k = nl; k-- > 0;)
			pp_buf_loc(p, &b, locs[k]);
		if (b.oom)
			goto cleanup;
		if (b.len == 0)
			continue; /* no root label and no frames: nothing to draw */
		b.s[--b.len] = '\0'; /* the last ';' */
		if (pp_fline_add(&f, b.s, s->v[value]) != 0)
			goto cleanup;
	}
	if (f.n)
		qsort(f.v, f.n, sizeof(*f.v), pp_fline_cmp);
	rc = 0;
	for (size_t i = 0; i < f.n && rc == 0; i++)
		rc = fn(arg, f.v[i].s, f.v[i].count);
cleanup:
	for (size_t i = 0; i < f.n; i++)
		free(f.v[i].s);
	free(f.v);
	free(f.set.slot);
	free(b.s);
	return rc;
}

static int pp_folded_line(void *arg, const char *line, int64_t count)
{
	FILE *out = arg;
	fprintf(out, "%s %" PRId64 "\n", line, count);
	return ferror(out) ? -EIO : 0;
}

int stb_pprof_write_folded(struct stb_pprof *p, FILE *out, const char *root_key, unsigned value)
{
	if (!out)
		return -EINVAL;
	return stb_pprof_folded_each(p, root_key, value, pp_folded_line, out);
}

/* ---- JSON ---- */

static void pp_json_labels(struct stb_pprof *p, struct stb_json *j, const struct stb_pp_sample *s)
{
	const struct stb_pp_label *ls = p->labels + s->label0;
	stb_json_key(j, "labels");
	stb_json_object(j);
	for (uint32_t i = 0; i < s->nlabels; i++) {
		bool seen = false, repeated = false;
		for (uint32_t k = 0; k < s->nlabels; k++) {
			if (k != i && ls[k].key == ls[i].key) {
				seen |= k < i;
				repeated = true;
			}
		}
		if (seen)
			continue; /* written with its first occurrence */
		stb_json_key(j, p->strs[ls[i].key]);
		if (repeated)
			stb_json_array(j);
		for (uint32_t k = i; k < s->nlabels; k++) {
			if (ls[k].key != ls[i].key)
				continue;
			if (ls[k].str)
				stb_json_string(j, p->strs[ls[k].str]);
			else
				stb_json_i64(j, ls[k].num);
		}
		if (repeated)
			stb_json_end(j);
	}
	stb_json_end(j);
}

static void pp_json_frames(struct stb_pprof *p, struct stb_json *j, const struct stb_pp_stack *st)
{
	uint32_t nl;
	const uint32_t *locs = pp_stack_locs(p, st, &nl);
	stb_json_key(j, "frames");
	stb_json_array(j);
	for (uint32_t k = 0; k < nl; k++) {
		const struct pp_loc *l = &p->locs[locs[k] - 1];
		const struct stb_pp_map *m = l->mapping ? &p->maps[l->mapping - 1] : NULL;
		for (uint32_t i = 0; i < (l->nlines ? l->nlines : 1); i++) {
			stb_json_object(j);
			if (l->note) {
				stb_json_kv_string(j, "function", p->strs[l->note]);
				stb_json_kv_bool(j, "synthetic", true);
				stb_json_end(j);
				continue;
			}
			stb_json_kv_hex(j, "ip", l->ip);
			if (l->nlines) {
				const struct stb_pp_line *ln = &p->lines[l->line0 + i];
				const struct pp_func *fn = &p->funcs[ln->func - 1];
				stb_json_kv_string(j, "function", p->strs[fn->name]);
				if (fn->file) {
					stb_json_kv_string(j, "file", p->strs[fn->file]);
					stb_json_kv_i64(j, "line", ln->line);
				}
			}
			if (m) {
				stb_json_kv_string(j, "module", p->strs[m->file]);
				stb_json_kv_hex(j, "module_offset", l->module_offset);
				if (m->build_id)
					stb_json_kv_string(j, "build_id", p->strs[m->build_id]);
			}
			stb_json_kv_bool(j, "inlined", l->nlines && i + 1 < l->nlines);
			stb_json_end(j);
		}
	}
	stb_json_end(j);
}

int stb_pprof_write_json(struct stb_pprof *p, FILE *out, const struct stb_report_meta *meta)
{
	if (!p || !out)
		return -EINVAL;
	if (pp_resolve(p) != 0)
		return -ENOMEM;
	struct stb_json j;
	stb_json_init(&j, out);
	stb_json_object(&j);
	stb_json_kv_string(&j, "schema", "stb-profile/1");
	stb_report_meta_json(&j, meta);
	stb_json_key(&j, "sample_types");
	stb_json_array(&j);
	for (unsigned i = 0; i < p->o.nvalues; i++) {
		stb_json_object(&j);
		stb_json_kv_string(&j, "type", p->strs[p->type_str[i][0]]);
		stb_json_kv_string(&j, "unit", p->strs[p->type_str[i][1]]);
		stb_json_end(&j);
	}
	stb_json_end(&j);
	stb_json_kv_string(&j, "default_sample_type",
			   p->o.default_type >= 0 ? p->strs[p->type_str[p->o.default_type][0]] : "");
	stb_json_kv_i64(&j, "period", p->o.period);
	stb_json_kv_i64(&j, "time_ns", p->o.time_ns);
	stb_json_kv_i64(&j, "duration_ns", p->o.duration_ns);
	stb_json_key(&j, "comments");
	stb_json_array(&j);
	for (size_t i = 0; i < p->ncomments; i++)
		stb_json_string(&j, p->strs[p->comments[i]]);
	stb_json_end(&j);
	stb_json_key(&j, "samples");
	stb_json_array(&j);
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct stb_pp_sample *s = &p->samples[i];
		stb_json_object(&j);
		stb_json_key(&j, "values");
		stb_json_array(&j);
		for (unsigned k = 0; k < p->o.nvalues; k++)
			stb_json_i64(&j, s->v[k]);
		stb_json_end(&j);
		pp_json_labels(p, &j, s);
		pp_json_frames(p, &j, &p->stacks[s->stack]);
		stb_json_end(&j);
	}
	stb_json_end(&j);
	stb_json_end(&j);
	return stb_json_finish(&j);
}
