/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Strings the target controls (task names, comm, symbol and module names) made
 * safe for output: UTF-8 validation shared with the JSON writer, and the one
 * escape of text output (no control byte ever reaches a terminal raw), and
 * the one escape of HTML text.
 */
#ifndef STB_RUNTIME_STACKS_ENCODE_ESCAPE_H
#define STB_RUNTIME_STACKS_ENCODE_ESCAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * Decodes the UTF-8 sequence at s (n >= 1 bytes available). Returns its length
 * (1..4) and sets *cp, or 0 when the bytes are not valid UTF-8 (stray
 * continuation byte, truncated or overlong sequence, surrogate, above
 * U+10FFFF). Pure; thread-safe.
 */
size_t stb_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/*
 * Escapes len bytes of src for one line of text output, into dst[size] with
 * snprintf's contract (always NUL-terminated when size > 0; returns the
 * length of the full escaped text). Printable ASCII and valid UTF-8 from
 * U+00A0 up stay as they are; backslash and double quote get a backslash;
 * \n, \r, \t become "\n", "\r", "\t"; every other byte below 0x20, 0x7f, C1
 * controls (U+0080..U+009F) and bytes of invalid UTF-8 become "\xNN". The
 * result never contains a control byte. Pure; thread-safe.
 */
size_t stb_text_escape(char *dst, size_t size, const char *src, size_t len);

/* Do the len bytes at src need no escape (stb_text_escape would copy them as
 * they are)? Pure; thread-safe. */
bool stb_text_plain(const char *src, size_t len);

/* stb_text_escape of the NUL-terminated s (NULL: "") written to out. Returns
 * 0 or -EIO. */
int stb_text_put(FILE *out, const char *s);

/*
 * Writes len bytes of s as HTML text (element content or a quoted attribute
 * value): & < > " ' as character references; \n and \t kept; other control
 * bytes, C1 controls and invalid UTF-8 as "\xNN". Returns 0 or -EIO.
 */
int stb_html_put(FILE *out, const char *s, size_t len);

#endif /* STB_RUNTIME_STACKS_ENCODE_ESCAPE_H */
