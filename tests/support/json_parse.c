/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test support (support/json_parse.h): a small JSON parser for the documents the
 * tests read back.
 */
#include <stdlib.h>
#include <string.h>

#include "json_parse.h"
#include "proc.h"

struct json_parser {
	const char *s;
	const char *err;
};

void ts_json_free(struct ts_json *j)
{
	while (j) {
		struct ts_json *next = j->next;
		ts_json_free(j->child);
		free(j->str);
		free(j->key);
		free(j);
		j = next;
	}
}

static struct ts_json *json_value(struct json_parser *p, int depth);

static void json_ws(struct json_parser *p)
{
	while (*p->s == ' ' || *p->s == '\n' || *p->s == '\t' || *p->s == '\r')
		p->s++;
}

static char *json_string(struct json_parser *p)
{
	struct ts_buf b = {0};
	if (*p->s != '"') {
		p->err = "expected a string";
		return NULL;
	}
	p->s++;
	while (*p->s && *p->s != '"') {
		char c = *p->s++;
		if (c == '\\') {
			char e = *p->s++;
			switch (e) {
			case 'n':
				c = '\n';
				break;
			case 't':
				c = '\t';
				break;
			case 'r':
				c = '\r';
				break;
			case 'b':
				c = '\b';
				break;
			case 'f':
				c = '\f';
				break;
			case 'u': {
				unsigned v = 0;
				for (int i = 0; i < 4; i++) {
					char h = *p->s++;
					v = v * 16 + (unsigned)(h >= 'a'   ? h - 'a' + 10
								: h >= 'A' ? h - 'A' + 10
									   : h - '0');
				}
				c = v < 0x80 ? (char)v : '?';
				break;
			}
			case '"':
			case '\\':
			case '/':
				c = e;
				break;
			default:
				p->err = "bad escape";
				ts_buf_free(&b);
				return NULL;
			}
		}
		ts_buf_add(&b, &c, 1);
	}
	if (*p->s != '"') {
		p->err = "unterminated string";
		ts_buf_free(&b);
		return NULL;
	}
	p->s++;
	if (!b.p)
		ts_buf_add(&b, "", 0);
	return b.p;
}

static struct ts_json *json_value(struct json_parser *p, int depth)
{
	json_ws(p);
	if (depth > 64) {
		p->err = "too deep";
		return NULL;
	}
	struct ts_json *j = calloc(1, sizeof(*j));
	if (!j) {
		p->err = "out of memory";
		return NULL;
	}
	char c = *p->s;
	if (c == '{' || c == '[') {
		j->type = c == '{' ? TS_JOBJ : TS_JARR;
		char close = c == '{' ? '}' : ']';
		p->s++;
		json_ws(p);
		struct ts_json **tail = &j->child;
		if (*p->s == close) {
			p->s++;
			return j;
		}
		for (;;) {
			char *key = NULL;
			json_ws(p);
			if (j->type == TS_JOBJ) {
				key = json_string(p);
				json_ws(p);
				if (!key || *p->s != ':') {
					free(key);
					p->err = p->err ? p->err : "expected ':'";
					ts_json_free(j);
					return NULL;
				}
				p->s++;
			}
			struct ts_json *v = json_value(p, depth + 1);
			if (!v) {
				free(key);
				ts_json_free(j);
				return NULL;
			}
			v->key = key;
			*tail = v;
			tail = &v->next;
			j->n++;
			json_ws(p);
			if (*p->s == ',') {
				p->s++;
				continue;
			}
			if (*p->s == close) {
				p->s++;
				return j;
			}
			p->err = "expected ',' or a closing bracket";
			ts_json_free(j);
			return NULL;
		}
	}
	if (c == '"') {
		j->type = TS_JSTR;
		j->str = json_string(p);
		if (!j->str) {
			ts_json_free(j);
			return NULL;
		}
		return j;
	}
	if (strncmp(p->s, "true", 4) == 0 || strncmp(p->s, "false", 5) == 0) {
		j->type = TS_JBOOL;
		j->b = c == 't';
		p->s += j->b ? 4 : 5;
		return j;
	}
	if (strncmp(p->s, "null", 4) == 0) {
		j->type = TS_JNULL;
		p->s += 4;
		return j;
	}
	if (c == '-' || (c >= '0' && c <= '9')) {
		const char *start = p->s;
		while (*p->s && strchr("+-0123456789.eE", *p->s))
			p->s++;
		j->type = TS_JNUM;
		j->str = strndup(start, (size_t)(p->s - start));
		return j;
	}
	p->err = "unexpected character";
	ts_json_free(j);
	return NULL;
}

/* Parses a whole document. NULL on error (*err, when not NULL, says why). */
struct ts_json *ts_json_parse(const char *text, const char **err)
{
	struct json_parser p = {.s = text, .err = NULL};
	struct ts_json *j = json_value(&p, 0);
	if (j) {
		json_ws(&p);
		if (*p.s) {
			p.err = "trailing characters";
			ts_json_free(j);
			j = NULL;
		}
	}
	if (err)
		*err = p.err;
	return j;
}

const struct ts_json *ts_json_get(const struct ts_json *obj, const char *key)
{
	if (!obj || obj->type != TS_JOBJ)
		return NULL;
	for (const struct ts_json *m = obj->child; m; m = m->next)
		if (m->key && strcmp(m->key, key) == 0)
			return m;
	return NULL;
}

/* String member (NULL when absent or not a string). */
const char *ts_json_str(const struct ts_json *obj, const char *key)
{
	const struct ts_json *m = ts_json_get(obj, key);
	return m && m->type == TS_JSTR ? m->str : NULL;
}

/* Unsigned number member (def when absent). */
uint64_t ts_json_u64(const struct ts_json *obj, const char *key, uint64_t def)
{
	const struct ts_json *m = ts_json_get(obj, key);
	return m && m->type == TS_JNUM ? strtoull(m->str, NULL, 10) : def;
}

/* Boolean member (-1 when absent). */
int ts_json_bool(const struct ts_json *obj, const char *key)
{
	const struct ts_json *m = ts_json_get(obj, key);
	return m && m->type == TS_JBOOL ? m->b : -1;
}
