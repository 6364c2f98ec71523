/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The JSON writer (json.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "encode/escape.h"
#include "encode/json.h"

void stb_json_init(struct stb_json *j, FILE *out)
{
	memset(j, 0, offsetof(struct stb_json, buf));
	j->out = out;
}

/* ---- the buffer ---- */

static void drain(struct stb_json *j)
{
	if (j->len && fwrite(j->buf, 1, j->len, j->out) != j->len && !j->err)
		j->err = -EIO;
	j->len = 0;
}

static void put(struct stb_json *j, const void *s, size_t n)
{
	if (n > sizeof(j->buf) - j->len) {
		drain(j);
		if (n > sizeof(j->buf)) {
			if (fwrite(s, 1, n, j->out) != n && !j->err)
				j->err = -EIO;
			return;
		}
	}
	memcpy(j->buf + j->len, s, n);
	j->len += n;
}

static void put_c(struct stb_json *j, char c)
{
	if (j->len == sizeof(j->buf))
		drain(j);
	j->buf[j->len++] = c;
}

static void put_s(struct stb_json *j, const char *s)
{
	put(j, s, strlen(s));
}

static void put_u64(struct stb_json *j, uint64_t v)
{
	char d[20];
	unsigned n = 0;
	do {
		d[sizeof(d) - 1 - n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	put(j, d + sizeof(d) - n, n);
}

static bool in_array(const struct stb_json *j)
{
	return j->depth && (j->arrays >> (j->depth - 1)) & 1;
}

static void indent(struct stb_json *j)
{
	if (j->flags & STB_JSON_F_COMPACT)
		return;
	static const char spaces[2 * STB_JSON_MAX_DEPTH + 1] =
		"\n                                                                ";
	put(j, spaces, 1 + 2 * (size_t)j->depth);
}

/* Before an element or a member: the separator and layout. */
static void separate(struct stb_json *j)
{
	if (j->depth == 0)
		return;
	uint64_t bit = 1ull << (j->depth - 1);
	if (j->nonempty & bit)
		put_c(j, ',');
	/* Array elements and the root's members on lines of their own. */
	if (in_array(j) || j->depth == 1)
		indent(j);
	else if (j->nonempty & bit)
		put_c(j, ' ');
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
	put_c(j, c);
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
	put_c(j, array ? ']' : '}');
}

/* Bytes written as they are: 2, printable ASCII but the quote and the
 * backslash; 1, '<', '>' and '&', which HTML mode escapes; 0, the rest. */
static const uint8_t plain[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    2, 2, 0, 2, 2, 2, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 2, 1, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* Writes s[0 .. len) as a quoted, escaped string. */
static void put_string(struct stb_json *j, const char *s, size_t len)
{
	unsigned html = (j->flags & STB_JSON_F_HTML) != 0;
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s;
	put_c(j, '"');
	for (size_t i = 0; i < len;) {
		unsigned char c = p[i];
		/* A run of bytes that need no escape: one copy (names and paths
		 * are mostly that). */
		size_t run = i;
		while (run < len && plain[p[run]] > html)
			run++;
		if (run > i) {
			put(j, p + i, run - i);
			i = run;
			continue;
		}
		if (c >= 0x80) {
			uint32_t cp;
			size_t k = stb_utf8_decode(p + i, len - i, &cp);
			if (k == 0) {
				put_s(j, "\\ufffd"); /* invalid UTF-8, one replacement per byte */
				i++;
			} else {
				put(j, p + i, k);
				i += k;
			}
			continue;
		}
		if (c == '"' || c == '\\') {
			put_c(j, '\\');
			put_c(j, (char)c);
		} else if (c == '\n') {
			put_s(j, "\\n");
		} else if (c == '\t') {
			put_s(j, "\\t");
		} else if (c == '\r') {
			put_s(j, "\\r");
		} else if (c < 0x20 || c == 0x7f || (html && (c == '<' || c == '>' || c == '&'))) {
			char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
			put(j, e, sizeof(e));
		} else {
			put_c(j, (char)c);
		}
		i++;
	}
	put_c(j, '"');
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
	put(j, ": ", 2);
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
		put_u64(j, v);
}

void stb_json_i64(struct stb_json *j, int64_t v)
{
	if (!value_begin(j))
		return;
	if (v < 0)
		put_c(j, '-');
	put_u64(j, v < 0 ? -(uint64_t)v : (uint64_t)v);
}

void stb_json_bool(struct stb_json *j, bool v)
{
	if (value_begin(j))
		put_s(j, v ? "true" : "false");
}

void stb_json_fixed3(struct stb_json *j, double v)
{
	char d[328]; /* -DBL_MAX has 309 digits */
	if (!value_begin(j))
		return;
	if (!isfinite(v))
		v = 0.0;
	/* What printf's "%.3f" writes, without printf: thousandths rounded from
	 * v * 1000, which is within 2^-53 of the exact product; printf then
	 * only where that may round the other way (a tie, or large values). */
	double a = fabs(v) * 1000.0;
	/* a >= 0: the conversion truncates, which is floor (no libm needed). */
	uint64_t f = a < 1e9 ? (uint64_t)a : 0;
	double frac = a - (double)f;
	if (a < 1e9 && fabs(frac - 0.5) > 1e-6) {
		uint64_t q = f + (frac > 0.5);
		if (signbit(v))
			put_c(j, '-');
		put_u64(j, q / 1000);
		char t[4] = {'.', (char)('0' + q / 100 % 10), (char)('0' + q / 10 % 10),
			     (char)('0' + q % 10)};
		put(j, t, sizeof(t));
		return;
	}
	int n = snprintf(d, sizeof(d), "%.3f", v);
	put(j, d, n > 0 && (size_t)n < sizeof(d) ? (size_t)n : 0);
}

void stb_json_hex(struct stb_json *j, uint64_t v)
{
	static const char hex[] = "0123456789abcdef";
	char d[20];
	unsigned n = 0;
	if (!value_begin(j))
		return;
	d[sizeof(d) - 1 - n++] = '"';
	do {
		d[sizeof(d) - 1 - n++] = hex[v & 15];
		v >>= 4;
	} while (v);
	d[sizeof(d) - 1 - n++] = 'x';
	d[sizeof(d) - 1 - n++] = '0';
	d[sizeof(d) - 1 - n++] = '"';
	put(j, d + sizeof(d) - n, n);
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

void stb_json_init_value(struct stb_json *j, FILE *out, const struct stb_json *parent)
{
	stb_json_init(j, out);
	j->flags = parent->flags;
	j->depth = parent->depth;
	j->arrays = parent->arrays;
	j->nonempty = parent->nonempty;
	j->after_key = true; /* the one value, without separator: the splice writes it */
	j->base = parent->depth + 1;
}

int stb_json_value_finish(struct stb_json *j)
{
	if (!j->err && (j->base == 0 || j->depth + 1 != j->base || j->after_key))
		j->err = -EINVAL;
	drain(j);
	if (!j->err && ferror(j->out))
		j->err = -EIO;
	return j->err;
}

void stb_json_splice(struct stb_json *j, const char *text, size_t len)
{
	if (value_begin(j))
		put(j, text, len);
}

int stb_json_finish(struct stb_json *j)
{
	if (!j->err && (j->depth != 0 || j->after_key || j->nonempty == 0))
		j->err = -EINVAL;
	if (!j->err)
		put_c(j, '\n');
	drain(j);
	if (!j->err && ferror(j->out))
		j->err = -EIO;
	return j->err;
}
