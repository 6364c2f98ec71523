/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A bounded little-endian byte cursor for parsing what the target controls
 * (ELF notes, .eh_frame, DWARF expressions): fixed-size reads and LEB128
 * that never pass the end, and a sticky error flag instead of undefined
 * values. Header-only.
 */
#ifndef STB_RUNTIME_STACKS_UNWIND_BYTES_H
#define STB_RUNTIME_STACKS_UNWIND_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct stb_bytes {
	const uint8_t *p, *end;
	bool bad; /* a read went past end or a LEB128 overflowed 64 bits */
};

static inline struct stb_bytes stb_bytes_of(const uint8_t *p, size_t len)
{
	return (struct stb_bytes){.p = p, .end = p + len, .bad = false};
}

static inline size_t stb_bytes_left(const struct stb_bytes *b)
{
	return (size_t)(b->end - b->p);
}

/* Skips n bytes; false (and bad) when fewer are left. */
static inline bool stb_bytes_skip(struct stb_bytes *b, uint64_t n)
{
	if (b->bad || n > stb_bytes_left(b)) {
		b->bad = true;
		b->p = b->end;
		return false;
	}
	b->p += n;
	return true;
}

/* An n-byte (n <= 8) unsigned little-endian value; 0 when past the end. */
static inline uint64_t stb_bytes_fixed(struct stb_bytes *b, unsigned n)
{
	uint64_t v = 0;

	if (b->bad || stb_bytes_left(b) < n) {
		b->bad = true;
		b->p = b->end;
		return 0;
	}
	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)b->p[i] << (8 * i);
	b->p += n;
	return v;
}

static inline uint8_t stb_bytes_u8(struct stb_bytes *b)
{
	return (uint8_t)stb_bytes_fixed(b, 1);
}

/* Unsigned LEB128; bad when truncated or when set bits pass bit 63. */
static inline uint64_t stb_bytes_uleb(struct stb_bytes *b)
{
	uint64_t v = 0;
	unsigned shift = 0;

	while (!b->bad && b->p < b->end) {
		uint8_t byte = *b->p++;
		uint64_t bits = byte & 0x7f;
		if (shift < 64) {
			if (shift > 57 && (bits >> (64 - shift)) != 0)
				b->bad = true;
			v |= bits << shift;
		} else if (bits != 0) {
			b->bad = true;
		}
		if (shift < 70)
			shift += 7;
		if (!(byte & 0x80))
			return b->bad ? 0 : v;
	}
	b->bad = true;
	return 0;
}

/* Signed LEB128; bad when truncated or when the value does not fit 64 bits. */
static inline int64_t stb_bytes_sleb(struct stb_bytes *b)
{
	uint64_t v = 0;
	unsigned shift = 0;

	while (!b->bad && b->p < b->end) {
		uint8_t byte = *b->p++;
		uint64_t bits = byte & 0x7f;
		if (shift < 63) {
			v |= bits << shift;
		} else if (shift == 63) {
			/* Only bit 63 is left: the rest must repeat it (sign). */
			if (bits != 0 && bits != 0x7f)
				b->bad = true;
			v |= bits << 63;
		} else if (bits != ((v >> 63) ? 0x7fu : 0u)) {
			b->bad = true;
		}
		if (shift < 70)
			shift += 7;
		if (!(byte & 0x80)) {
			if (b->bad)
				return 0;
			if (shift < 64 && (byte & 0x40))
				v |= ~(uint64_t)0 << shift;
			int64_t s;
			memcpy(&s, &v, sizeof(s));
			return s;
		}
	}
	b->bad = true;
	return 0;
}

#endif /* STB_RUNTIME_STACKS_UNWIND_BYTES_H */
