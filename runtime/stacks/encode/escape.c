/* SPDX-License-Identifier: Apache-2.0 */
/*
 * UTF-8 validation and the text escape (escape.h).
 */
#include <errno.h>
#include <string.h>

#include "encode/escape.h"

size_t stb_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned char c = s[0];
	size_t len;
	uint32_t v, min;
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
		v = c & 0x1fu;
		min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		v = c & 0x0fu;
		min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		v = c & 0x07u;
		min = 0x10000;
	} else {
		return 0; /* continuation byte, 0xc0/0xc1 (overlong) or 0xf5.. */
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (s[i] & 0x3fu);
	}
	if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return len;
}

/* Appends n bytes to dst[size] at *pos (counting what does not fit). */
static void put(char *dst, size_t size, size_t *pos, const char *s, size_t n)
{
	if (*pos < size) {
		size_t room = size - *pos - 1;
		memcpy(dst + *pos, s, n < room ? n : room);
	}
	*pos += n;
}

/* Bytes copied as they are, one bit each: printable ASCII (0x20..0x7e) but
 * the quote (0x22) and the backslash (0x5c). */
static const uint64_t plain[2] = {0xfffffffb00000000ull, 0x7fffffffefffffffull};

static inline int is_plain(unsigned char c)
{
	return c < 0x80 && (plain[c >> 6] >> (c & 63) & 1);
}

/* Are all 8 bytes at s plain? Without a branch per byte: a byte b has its
 * high bit set in (b - c) & ~b exactly when b < c (for b, c < 0x80), and
 * equality with c is b ^ c < 1. */
static inline int plain8(const unsigned char *s)
{
	const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
	uint64_t x;
	memcpy(&x, s, 8);
	uint64_t bad = x & high;                  /* >= 0x80 */
	bad |= (x - ones * 0x20) & ~x;            /* < 0x20 */
	uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\'), d = x ^ (ones * 0x7f);
	bad |= (q - ones) & ~q;
	bad |= (b - ones) & ~b;
	bad |= (d - ones) & ~d;
	return (bad & high) == 0;
}

bool stb_text_plain(const char *src, size_t len)
{
	const unsigned char *s = (const unsigned char *)src;
	size_t i = 0;
	if (len >= 8) {
		for (; i + 8 <= len; i += 8)
			if (!plain8(s + i))
				return false;
		return i == len || plain8(s + len - 8); /* the tail, overlapping */
	}
	for (; i < len; i++)
		if (!is_plain(s[i]))
			return false;
	return true;
}

size_t stb_text_escape(char *dst, size_t size, const char *src, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)src;
	size_t pos = 0;
	for (size_t i = 0; i < len;) {
		/* The common case: a run of plain printable ASCII, copied at once. */
		size_t j = i;
		while (j + 8 <= len && plain8(s + j))
			j += 8;
		while (j < len && is_plain(s[j]))
			j++;
		if (j > i) {
			put(dst, size, &pos, (const char *)s + i, j - i);
			i = j;
			continue;
		}
		unsigned char c = s[i];
		uint32_t cp;
		size_t k = c >= 0x80 ? stb_utf8_decode(s + i, len - i, &cp) : 1;
		if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
			put(dst, size, &pos, (const char *)s + i, 1);
		} else if (c == '\\' || c == '"') {
			char e[2] = {'\\', (char)c};
			put(dst, size, &pos, e, 2);
		} else if (c == '\n' || c == '\r' || c == '\t') {
			char e[2] = {'\\', c == '\n' ? 'n' : c == '\r' ? 'r' : 't'};
			put(dst, size, &pos, e, 2);
		} else if (c >= 0x80 && k > 0 && cp >= 0xa0) {
			put(dst, size, &pos, (const char *)s + i, k);
			i += k;
			continue;
		} else {
			/* Other controls, DEL, C1 controls, invalid UTF-8: byte by byte. */
			char e[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
			put(dst, size, &pos, e, 4);
		}
		i++;
	}
	if (size)
		dst[pos < size ? pos : size - 1] = '\0';
	return pos;
}

int stb_text_put(FILE *out, const char *s)
{
	char buf[512];
	size_t n = s ? strlen(s) : 0;
	/* Escaping at most quadruples a byte: do it in pieces that fit. */
	for (size_t off = 0; off < n;) {
		size_t chunk = n - off < 64 ? n - off : 64;
		/* Do not split a UTF-8 sequence: extend the chunk over its tail. */
		while (off + chunk < n && ((unsigned char)s[off + chunk] & 0xc0) == 0x80 &&
		       chunk < 68)
			chunk++;
		size_t w = stb_text_escape(buf, sizeof(buf), s + off, chunk);
		if (fwrite(buf, 1, w, out) != w)
			return -EIO;
		off += chunk;
	}
	return 0;
}

int stb_html_put(FILE *out, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s;
	for (size_t i = 0; i < len;) {
		unsigned char c = p[i];
		const char *ent = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;"
				: c == '"' ? "&quot;" : c == '\'' ? "&#39;" : NULL;
		size_t k = 1;
		uint32_t cp = c;
		if (c >= 0x80)
			k = stb_utf8_decode(p + i, len - i, &cp);
		if (ent) {
			fputs(ent, out);
		} else if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f) ||
			   (k > 0 && cp >= 0xa0)) {
			fwrite(p + i, 1, k, out);
		} else {
			/* A control byte, a C1 control or invalid UTF-8: each byte as \xNN. */
			if (k == 0)
				k = 1;
			for (size_t b = 0; b < k; b++) {
				char e[4] = {'\\', 'x', hex[p[i + b] >> 4], hex[p[i + b] & 15]};
				fwrite(e, 1, 4, out);
			}
		}
		i += k;
	}
	return ferror(out) ? -EIO : 0;
}
