/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test support (support/pprof_raw.h): `go tool pprof -raw` run and parsed.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "pprof_raw.h"
#include "proc.h"

void ts_prof_free(struct ts_prof *p)
{
	free(p->comments);
	free(p->s);
	free(p->l);
	free(p->m);
	memset(p, 0, sizeof(*p));
}

/* Parses the text of `go tool pprof -raw`. Returns 0 or -1 with why set. */
int ts_prof_parse(const char *text, struct ts_prof *p, char *why, size_t wsize)
{
	memset(p, 0, sizeof(*p));
	struct ts_buf com = {0};
	ts_buf_add(&com, "", 0);
	int section = 0; /* 1 samples, 2 locations, 3 mappings */
	bool want_types = false;
	const char *line = text;
	while (*line) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char l[4096];
		if (len >= sizeof(l))
			len = sizeof(l) - 1;
		memcpy(l, line, len);
		l[len] = '\0';
		line = nl ? nl + 1 : line + len;
		if (strncmp(l, "Comment: ", 9) == 0) {
			ts_buf_add(&com, l + 9, strlen(l + 9));
			ts_buf_add(&com, "\n", 1);
			continue;
		}
		if (strcmp(l, "Samples:") == 0) {
			section = 1;
			want_types = true;
			continue;
		}
		if (strcmp(l, "Locations") == 0) {
			section = 2;
			continue;
		}
		if (strcmp(l, "Mappings") == 0) {
			section = 3;
			continue;
		}
		if (section == 1 && want_types) {
			snprintf(p->types, sizeof(p->types), "%.255s", l);
			want_types = false;
			continue;
		}
		if (section == 1) {
			if (strchr(l, ':') && strstr(l, ":[")) { /* a label line */
				if (p->ns == 0)
					continue;
				struct ts_sample *s = &p->s[p->ns - 1];
				const char *t = l + strspn(l, " ");
				size_t have = strlen(s->labels);
				snprintf(s->labels + have, sizeof(s->labels) - have, "%s%s",
					 have ? " " : "", t);
				continue;
			}
			const char *colon = strchr(l, ':');
			if (!colon)
				continue;
			struct ts_sample *ns = realloc(p->s, (size_t)(p->ns + 1) * sizeof(*ns));
			if (!ns)
				abort();
			p->s = ns;
			struct ts_sample *s = &p->s[p->ns++];
			memset(s, 0, sizeof(*s));
			const char *q = l;
			while (q < colon && s->nv < TS_PROF_MAX_VALUES) {
				char *end;
				long long v = strtoll(q, &end, 10);
				if (end == q)
					break;
				s->v[s->nv++] = v;
				q = end;
			}
			q = colon + 1;
			while (*q && s->nloc < TS_PROF_MAX_STACK) {
				char *end;
				unsigned long long id = strtoull(q, &end, 10);
				if (end == q)
					break;
				s->loc[s->nloc++] = id;
				q = end;
			}
			continue;
		}
		if (section == 2) {
			const char *t = l + strspn(l, " ");
			char *end;
			unsigned long long id = strtoull(t, &end, 10);
			struct ts_loc *loc;
			const char *rest;
			if (end != t && *end == ':') {
				struct ts_loc *nl2 =
				    realloc(p->l, (size_t)(p->nl + 1) * sizeof(*nl2));
				if (!nl2)
					abort();
				p->l = nl2;
				loc = &p->l[p->nl++];
				memset(loc, 0, sizeof(*loc));
				loc->id = id;
				rest = end + 1 + strspn(end + 1, " ");
				loc->addr = strtoull(rest, &end, 16);
				rest = end + strspn(end, " ");
				if (strncmp(rest, "M=", 2) == 0) {
					loc->mapping = (int)strtol(rest + 2, &end, 10);
					rest = end + strspn(end, " ");
				}
			} else {
				if (p->nl == 0)
					continue;
				loc = &p->l[p->nl - 1];
				rest = t;
			}
			if (*rest && loc->nfunc < 8) {
				size_t n = strcspn(rest, " ");
				const char *name_end = rest + n;
				if (n >= sizeof(loc->func[0]))
					n = sizeof(loc->func[0]) - 1;
				memcpy(loc->func[loc->nfunc], rest, n);
				loc->func[loc->nfunc][n] = '\0';
				/* Synthetic frames ("[no stack]") have spaces: keep the rest. */
				if (rest[0] == '[') {
					const char *close = strchr(rest, ']');
					n = close ? (size_t)(close - rest + 1) : strlen(rest);
					name_end = rest + n;
					if (n >= sizeof(loc->func[0]))
						n = sizeof(loc->func[0]) - 1;
					memcpy(loc->func[loc->nfunc], rest, n);
					loc->func[loc->nfunc][n] = '\0';
				}
				/* " file:line s=N" after the name, when pprof has a line. */
				const char *pos = name_end + strspn(name_end, " ");
				size_t pn = strcspn(pos, " ");
				if (pn && strncmp(pos, "s=", 2) != 0 && memchr(pos, ':', pn))
					snprintf(loc->pos[loc->nfunc], sizeof(loc->pos[0]), "%.*s", (int)pn, pos);
				loc->nfunc++;
			}
			continue;
		}
		if (section == 3) {
			struct ts_map m;
			char range[128];
			memset(&m, 0, sizeof(m));
			int k = sscanf(l, "%d: %127s %511s %128s %31s", &m.id, range, m.file,
				       m.build_id, m.bits);
			if (k < 3)
				continue;
			if (k == 4 && m.build_id[0] == '[') {
				snprintf(m.bits, sizeof(m.bits), "%.31s", m.build_id);
				m.build_id[0] = '\0';
			}
			struct ts_map *nm = realloc(p->m, (size_t)(p->nm + 1) * sizeof(*nm));
			if (!nm)
				abort();
			p->m = nm;
			p->m[p->nm++] = m;
		}
	}
	p->comments = com.p;
	if (!p->types[0]) {
		snprintf(why, wsize, "no \"Samples:\" section in the pprof output");
		return -1;
	}
	return 0;
}

/* Runs `go tool pprof -raw -symbolize=none file` and parses it. 0 or -1. */
int ts_pprof_raw(const char *file, struct ts_prof *p, char *why, size_t wsize)
{
	ts_tmpdir();
	const char *go = ts_env("STB_GO", "go");
	char *argv[] = {(char *)go, "tool", "pprof", "-raw", "-symbolize=none", (char *)file, NULL};
	char *out = NULL, *err = NULL;
	int rc = ts_run(argv, &out, &err, 120);
	int ret = -1;
	if (rc != 0) {
		snprintf(why, wsize, "%s tool pprof -raw %s: exit %d: %.300s%s", go, file, rc,
			 err ? err : "", rc == 127 ? " (is golang-go installed? set STB_GO)" : "");
		goto cleanup;
	}
	ret = ts_prof_parse(out, p, why, wsize);
cleanup:
	free(out);
	free(err);
	return ret;
}

const struct ts_loc *ts_prof_loc(const struct ts_prof *p, uint64_t id)
{
	for (int i = 0; i < p->nl; i++)
		if (p->l[i].id == id)
			return &p->l[i];
	return NULL;
}

/* Writes the logical frames of sample s (the leaf first, inline frames
 * expanded) as "f0;f1;...;fn" into buf. */
void ts_sample_stack(const struct ts_prof *p, const struct ts_sample *s, char *buf, size_t size)
{
	size_t len = 0;
	buf[0] = '\0';
	for (int i = 0; i < s->nloc; i++) {
		const struct ts_loc *l = ts_prof_loc(p, s->loc[i]);
		if (!l) {
			len += (size_t)snprintf(buf + len, len < size ? size - len : 0,
						"%s<loc %" PRIu64 "?>", len ? ";" : "", s->loc[i]);
			continue;
		}
		if (l->nfunc == 0)
			len += (size_t)snprintf(buf + len, len < size ? size - len : 0,
						"%s0x%" PRIx64, len ? ";" : "", l->addr);
		for (int k = 0; k < l->nfunc; k++)
			len += (size_t)snprintf(buf + len, len < size ? size - len : 0, "%s%s",
						len ? ";" : "", l->func[k]);
		if (len >= size)
			return;
	}
}

/* Does "key:[...]" in the labels of s contain value as one of its values? */
bool ts_sample_has_label(const struct ts_sample *s, const char *key, const char *value)
{
	char pat[128];
	snprintf(pat, sizeof(pat), "%s:[", key);
	const char *p = s->labels;
	while ((p = strstr(p, pat)) != NULL) {
		if (p != s->labels && p[-1] != ' ') {
			p++;
			continue;
		}
		const char *v = p + strlen(pat);
		const char *end = strchr(v, ']');
		if (!end)
			return false;
		size_t n = strlen(value);
		for (const char *q = v; q + n <= end; q++)
			if ((q == v || q[-1] == ' ') && strncmp(q, value, n) == 0 &&
			    (q + n == end || q[n] == ' '))
				return true;
		p = end;
	}
	return false;
}

/* The number of values of label key in s (0 when absent). */
int ts_sample_label_count(const struct ts_sample *s, const char *key)
{
	char pat[128];
	snprintf(pat, sizeof(pat), "%s:[", key);
	const char *p = strstr(s->labels, pat);
	while (p && p != s->labels && p[-1] != ' ')
		p = strstr(p + 1, pat);
	if (!p)
		return 0;
	const char *v = p + strlen(pat), *end = strchr(v, ']');
	if (!end || end == v)
		return 0;
	int n = 1;
	for (const char *q = v; q < end; q++)
		n += *q == ' ';
	return n;
}

/* "key=NUMBER" in text (e.g. the stats comment), or -1. */
long long ts_stat(const char *text, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "%s=", key);
	const char *p = text;
	while ((p = strstr(p, pat)) != NULL) {
		if (p == text || p[-1] == ' ')
			return strtoll(p + strlen(pat), NULL, 10);
		p++;
	}
	return -1;
}
