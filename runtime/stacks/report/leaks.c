/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The leak view (leaks.h): bthreads by creation site, with their ages and
 * states, and the growth of each site between two views.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "report/leaks.h"
#include "symbols/symbolize.h"
#include "util.h"

/* One bthread of the view: its site, age and state. */
struct one {
	uint64_t ip;
	uint64_t age_ns;
	bool aged;
	unsigned state;
};

static int one_cmp(const void *x, const void *y)
{
	const struct one *a = x, *b = y;
	if (a->ip != b->ip)
		return a->ip < b->ip ? -1 : 1;
	if (a->aged != b->aged) /* those without an age last */
		return a->aged ? -1 : 1;
	return a->age_ns < b->age_ns ? -1 : a->age_ns > b->age_ns;
}

static int site_cmp(const void *x, const void *y)
{
	const struct stb_leak_site *a = x, *b = y;
	if (a->count != b->count)
		return a->count > b->count ? -1 : 1;
	return a->ip < b->ip ? -1 : a->ip > b->ip;
}

/* What a creation site's address is in the source (known: function, file
 * and line, and those of the innermost call inlined there). */
struct line_key {
	uint64_t ip;
	const char *fn, *file, *ifn, *ifile;
	int line, iline;
	bool known;
};

struct ip_map {
	uint64_t ip, to;
};

static int strnull_cmp(const char *a, const char *b)
{
	return a == b ? 0 : !a ? -1 : !b ? 1 : strcmp(a, b);
}

/* Known lines first, equal lines together, each line's lowest ip first. */
static int key_cmp(const void *x, const void *y)
{
	const struct line_key *a = x, *b = y;
	int c = 0;
	if (a->known != b->known)
		return a->known ? -1 : 1;
	if (a->known && ((c = strnull_cmp(a->fn, b->fn)) || (c = strnull_cmp(a->file, b->file)) ||
			 (c = (a->line > b->line) - (a->line < b->line)) ||
			 (c = strnull_cmp(a->ifn, b->ifn)) || (c = strnull_cmp(a->ifile, b->ifile)) ||
			 (c = (a->iline > b->iline) - (a->iline < b->iline))))
		return c;
	return a->ip < b->ip ? -1 : a->ip > b->ip;
}

static bool same_line(const struct line_key *a, const struct line_key *b)
{
	return a->known && b->known && !strnull_cmp(a->fn, b->fn) && !strnull_cmp(a->file, b->file) &&
	       a->line == b->line && !strnull_cmp(a->ifn, b->ifn) &&
	       !strnull_cmp(a->ifile, b->ifile) && a->iline == b->iline;
}

static int map_cmp(const void *x, const void *y)
{
	const struct ip_map *a = x, *b = y;
	return a->ip < b->ip ? -1 : a->ip > b->ip;
}

/*
 * Makes each ip of all[0 .. k) (sorted by ip) the lowest address of its
 * source line, and sorts all by ip again. Without memory, a symbolizer or
 * time (r's symbol deadline), addresses stay apart.
 */
static void merge_lines(struct one *all, size_t k, const struct stb_report *r)
{
	size_t u = 0;
	for (size_t i = 0; i < k; i++)
		u += i == 0 || all[i].ip != all[i - 1].ip;
	if (!r || !r->sym || u < 2)
		return;
	struct line_key *keys = calloc(u, sizeof(*keys));
	struct ip_map *map = calloc(u, sizeof(*map));
	if (!keys || !map)
		goto cleanup;
	size_t j = 0;
	for (size_t i = 0; i < k; i++) {
		if (i > 0 && all[i].ip == all[i - 1].ip)
			continue;
		struct line_key *q = &keys[j++];
		struct stb_sym_info si;
		q->ip = all[i].ip;
		if (!q->ip || (r->sym_deadline && stb_now_ns() >= r->sym_deadline) ||
		    stb_sym_lookup(r->sym, q->ip, STB_SYM_RETURN, &si) != 0 || !si.function ||
		    !si.file || si.line <= 0)
			continue;
		q->known = true;
		q->fn = si.function;
		q->file = si.file;
		q->line = si.line;
		if (si.ninline && si.inlines) {
			q->ifn = si.inlines[0].function;
			q->ifile = si.inlines[0].file;
			q->iline = si.inlines[0].line;
		}
	}
	qsort(keys, u, sizeof(*keys), key_cmp);
	for (size_t i = 0; i < u; i++) {
		map[i].ip = keys[i].ip;
		map[i].to = i > 0 && same_line(&keys[i], &keys[i - 1]) ? map[i - 1].to : keys[i].ip;
	}
	qsort(map, u, sizeof(*map), map_cmp);
	for (size_t i = 0; i < k; i++) {
		struct ip_map want = {.ip = all[i].ip};
		const struct ip_map *m = bsearch(&want, map, u, sizeof(*map), map_cmp);
		if (m)
			all[i].ip = m->to;
	}
	qsort(all, k, sizeof(*all), one_cmp);
cleanup:
	free(keys);
	free(map);
}

int stb_leaks_build(struct stb_leaks *l, const struct stb_report_task *tasks, size_t n,
		    uint64_t now_ns, const struct stb_report *r)
{
	memset(l, 0, sizeof(*l));
	l->now_ns = now_ns;
	struct one *all = malloc((n ? n : 1) * sizeof(*all));
	if (!all)
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		const struct stb_report_task *t = &tasks[i];
		if (t->is_pthread)
			continue;
		uint64_t c = t->creator.created_ns;
		all[k++] = (struct one){.ip = t->creator.ip, .aged = c != 0,
					.age_ns = c && now_ns > c ? now_ns - c : 0,
					.state = t->state < STB_TASK_NSTATES ? t->state : 0};
	}
	l->bthreads = k;
	qsort(all, k, sizeof(*all), one_cmp);
	merge_lines(all, k, r);
	size_t nsites = 0;
	for (size_t i = 0; i < k; i++)
		nsites += i == 0 || all[i].ip != all[i - 1].ip;
	l->sites = calloc(nsites ? nsites : 1, sizeof(*l->sites));
	if (!l->sites) {
		free(all);
		return -ENOMEM;
	}
	for (size_t i = 0; i < k;) {
		size_t end = i;
		while (end < k && all[end].ip == all[i].ip)
			end++;
		struct stb_leak_site *s = &l->sites[l->n++];
		s->ip = all[i].ip;
		s->count = end - i;
		for (size_t j = i; j < end; j++) {
			s->by_state[all[j].state]++;
			s->aged += all[j].aged;
		}
		/* The aged ones come first, youngest first. */
		if (s->aged) {
			s->oldest_ns = all[i + s->aged - 1].age_ns;
			s->median_ns = all[i + (s->aged - 1) / 2].age_ns;
		}
		i = end;
	}
	free(all);
	qsort(l->sites, l->n, sizeof(*l->sites), site_cmp);
	return 0;
}

/* prev's count of the site at ip (sorted by ip in by_ip), 0 if none. */
static uint64_t prev_count(const struct stb_leak_site *const *by_ip, size_t n, uint64_t ip)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (by_ip[mid]->ip == ip)
			return by_ip[mid]->count;
		if (by_ip[mid]->ip < ip)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

static int ip_cmp(const void *x, const void *y)
{
	const struct stb_leak_site *a = *(const struct stb_leak_site *const *)x;
	const struct stb_leak_site *b = *(const struct stb_leak_site *const *)y;
	return a->ip < b->ip ? -1 : a->ip > b->ip;
}

void stb_leaks_growth(struct stb_leaks *l, const struct stb_leaks *prev)
{
	const struct stb_leak_site **by_ip = malloc((prev->n ? prev->n : 1) * sizeof(*by_ip));
	if (!by_ip)
		return; /* no growth shown */
	for (size_t i = 0; i < prev->n; i++)
		by_ip[i] = &prev->sites[i];
	qsort(by_ip, prev->n, sizeof(*by_ip), ip_cmp);
	for (size_t i = 0; i < l->n; i++) {
		uint64_t was = prev_count(by_ip, prev->n, l->sites[i].ip);
		uint64_t now = l->sites[i].count;
		l->sites[i].growth = now >= was ? (int64_t)(now - was) : -(int64_t)(was - now);
	}
	free(by_ip);
	l->has_prev = true;
	l->prev_ns = prev->now_ns;
}

void stb_leaks_free(struct stb_leaks *l)
{
	free(l->sites);
	memset(l, 0, sizeof(*l));
}
