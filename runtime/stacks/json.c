/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The JSON writer (json.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "escape.h"
#include "json.h"

void stb_json_init(struct stb_json *j, FILE *out)
{
	memset(j, 0, sizeof(*j));
	j->out = out;
}

static bool in_array(const struct stb_json *j)
{
	return j->depth && (j->arrays >> (j->depth - 1)) & 1;
}

static void indent(struct stb_json *j)
{
	if (j->flags & STB_JSON_F_COMPACT)
		return;
	fputc('\n', j->out);
	for (unsigned i = 0; i < j->depth; i++)
		fputs("  ", j->out);
}

/* Before an element or a member: the separator and layout. */
static void separate(struct stb_json *j)
{
	if (j->depth == 0)
		return;
	uint64_t bit = 1ull << (j->depth - 1);
	if (j->nonempty & bit)
		fputc(',', j->out);
	/* Array elements and the root's members on lines of their own. */
	if (in_array(j) || j->depth == 1)
		indent(j);
	else if (j->nonempty & bit)
		fputc(' ', j->out);
	j->nonempty |= bit;
}

/* Checks the position of a value; writes its separator. false: misuse. */
static bool value_begin(struct stb_json *j)
{
	if (j->err)
		return false;
	if (j->after_key) {
		j->after_key = false;
		return true;
	}
	if (j->depth == 0 ? j->nonempty != 0 : !in_array(j)) {
		j->err = -EINVAL; /* a second root, or an object member without key */
		return false;
	}
	if (j->depth == 0)
		j->nonempty = 1ull << 63; /* the root was written */
	separate(j);
	return true;
}

static void open_container(struct stb_json *j, char c, bool array)
{
	if (!value_begin(j))
		return;
	if (j->depth >= STB_JSON_MAX_DEPTH) {
		j->err = -EINVAL;
		return;
	}
	fputc(c, j->out);
	uint64_t bit = 1ull << j->depth;
	j->depth++;
	j->arrays = array ? j->arrays | bit : j->arrays & ~bit;
	j->nonempty &= ~bit;
}

void stb_json_object(struct stb_json *j)
{
	open_container(j, '{', false);
}

void stb_json_array(struct stb_json *j)
{
	open_container(j, '[', true);
}

void stb_json_end(struct stb_json *j)
{
	if (j->err)
		return;
	if (j->depth == 0 || j->after_key) {
		j->err = -EINVAL;
		return;
	}
	bool array = in_array(j);
	uint64_t bit = 1ull << (j->depth - 1);
	bool multiline = (j->nonempty & bit) && (array || j->depth == 1);
	j->nonempty &= ~bit;
	j->depth--;
	if (multiline)
		indent(j);
	fputc(array ? ']' : '}', j->out);
}

/* Writes s[0 .. len) as a quoted, escaped string. */
static void put_string(const struct stb_json *j, const char *s, size_t len)
{
	FILE *out = j->out;
	bool html = (j->flags & STB_JSON_F_HTML) != 0;
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s;
	fputc('"', out);
	for (size_t i = 0; i < len;) {
		unsigned char c = p[i];
		/* A run of bytes that need no escape: one write (names and paths
		 * are mostly that). */
		size_t run = i;
		while (run < len && p[run] >= 0x20 && p[run] < 0x7f && p[run] != '"' && p[run] != '\\')
			run++;
		if (run > i) {
			fwrite(p + i, 1, run - i, out);
			i = run;
			continue;
		}
		if (c >= 0x80) {
			uint32_t cp;
			size_t k = stb_utf8_decode(p + i, len - i, &cp);
			if (k == 0) {
				fputs("\\ufffd", out); /* invalid UTF-8, one replacement per byte */
				i++;
			} else {
				fwrite(p + i, 1, k, out);
				i += k;
			}
			continue;
		}
		if (c == '"' || c == '\\') {
			fputc('\\', out);
			fputc(c, out);
		} else if (c == '\n') {
			fputs("\\n", out);
		} else if (c == '\t') {
			fputs("\\t", out);
		} else if (c == '\r') {
			fputs("\\r", out);
		} else if (c < 0x20 || c == 0x7f || (html && (c == '<' || c == '>' || c == '&'))) {
			char e[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], 0};
			fputs(e, out);
		} else {
			fputc(c, out);
		}
		i++;
	}
	fputc('"', out);
}

void stb_json_key(struct stb_json *j, const char *key)
{
	if (j->err)
		return;
	if (j->depth == 0 || in_array(j) || j->after_key) {
		j->err = -EINVAL;
		return;
	}
	separate(j);
	put_string(j, key, key ? strlen(key) : 0);
	fputs(": ", j->out);
	j->after_key = true;
}

void stb_json_stringn(struct stb_json *j, const char *s, size_t len)
{
	if (value_begin(j))
		put_string(j, s ? s : "", s ? len : 0);
}

void stb_json_string(struct stb_json *j, const char *s)
{
	stb_json_stringn(j, s, s ? strlen(s) : 0);
}

void stb_json_u64(struct stb_json *j, uint64_t v)
{
	if (value_begin(j))
		fprintf(j->out, "%" PRIu64, v);
}

void stb_json_i64(struct stb_json *j, int64_t v)
{
	if (value_begin(j))
		fprintf(j->out, "%" PRId64, v);
}

void stb_json_bool(struct stb_json *j, bool v)
{
	if (value_begin(j))
		fputs(v ? "true" : "false", j->out);
}

void stb_json_fixed3(struct stb_json *j, double v)
{
	if (value_begin(j))
		fprintf(j->out, "%.3f", isfinite(v) ? v : 0.0);
}

void stb_json_hex(struct stb_json *j, uint64_t v)
{
	if (value_begin(j))
		fprintf(j->out, "\"0x%" PRIx64 "\"", v);
}

void stb_json_kv_string(struct stb_json *j, const char *key, const char *s)
{
	stb_json_key(j, key);
	stb_json_string(j, s);
}

void stb_json_kv_u64(struct stb_json *j, const char *key, uint64_t v)
{
	stb_json_key(j, key);
	stb_json_u64(j, v);
}

void stb_json_kv_i64(struct stb_json *j, const char *key, int64_t v)
{
	stb_json_key(j, key);
	stb_json_i64(j, v);
}

void stb_json_kv_bool(struct stb_json *j, const char *key, bool v)
{
	stb_json_key(j, key);
	stb_json_bool(j, v);
}

void stb_json_kv_hex(struct stb_json *j, const char *key, uint64_t v)
{
	stb_json_key(j, key);
	stb_json_hex(j, v);
}

int stb_json_finish(struct stb_json *j)
{
	if (!j->err && (j->depth != 0 || j->after_key || j->nonempty == 0))
		j->err = -EINVAL;
	if (!j->err)
		fputc('\n', j->out);
	if (!j->err && ferror(j->out))
		j->err = -EIO;
	return j->err;
}
