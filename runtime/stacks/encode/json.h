/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one JSON writer of stb (docs/json.md): documents are built value by
 * value, every string is escaped (quotes, backslashes, control bytes, DEL,
 * and invalid UTF-8 replaced by U+FFFD), so that nothing the target wrote can
 * change the structure of a document or make it invalid UTF-8. Elements of
 * arrays and the members of the outermost object go on lines of their own.
 */
#ifndef STB_RUNTIME_STACKS_ENCODE_JSON_H
#define STB_RUNTIME_STACKS_ENCODE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define STB_JSON_MAX_DEPTH 32u

#define STB_JSON_BUF 4096u

/* A document being written to out, through a buffer of its own (written out
 * when full and by stb_json_finish). Not thread-safe; no allocation. */
struct stb_json {
	FILE *out;
	unsigned depth;
	uint64_t arrays;   /* bit d: the container at depth d is an array */
	uint64_t nonempty; /* bit d: it has an element already */
	bool after_key;    /* a member's key was written, its value is next */
	unsigned flags;    /* STB_JSON_F_*, set after stb_json_init */
	int err;           /* first error: -EINVAL (misuse), -EIO */
	unsigned base;     /* stb_json_init_value: the depth its value starts at, + 1 */
	size_t len;        /* bytes in buf (last: init leaves buf as it is) */
	char buf[STB_JSON_BUF];
};

/* stb_json.flags */
#define STB_JSON_F_COMPACT 0x1u /* no line breaks or indentation */
#define STB_JSON_F_HTML 0x2u    /* also escape '<', '>' and '&' (\u003c...): the
				   document can sit inside an HTML <script> */

/* Starts a document on out (the first value written is its root). */
void stb_json_init(struct stb_json *j, FILE *out);

/* Containers: open, then members (objects: key then value) or elements. */
void stb_json_object(struct stb_json *j);
void stb_json_array(struct stb_json *j);
void stb_json_end(struct stb_json *j);

/* A member's key (inside an object; escaped like any string). */
void stb_json_key(struct stb_json *j, const char *key);

/* Values. stb_json_string(NULL) writes "". */
void stb_json_string(struct stb_json *j, const char *s);
void stb_json_stringn(struct stb_json *j, const char *s, size_t len);
void stb_json_u64(struct stb_json *j, uint64_t v);
void stb_json_i64(struct stb_json *j, int64_t v);
void stb_json_bool(struct stb_json *j, bool v);
/* v with 3 decimals (non-finite values as 0). */
void stb_json_fixed3(struct stb_json *j, double v);
/* v as the string "0x..." (lowercase hexadecimal). */
void stb_json_hex(struct stb_json *j, uint64_t v);

/* Members in one call: key and value. */
void stb_json_kv_string(struct stb_json *j, const char *key, const char *s);
void stb_json_kv_u64(struct stb_json *j, const char *key, uint64_t v);
void stb_json_kv_i64(struct stb_json *j, const char *key, int64_t v);
void stb_json_kv_bool(struct stb_json *j, const char *key, bool v);
void stb_json_kv_hex(struct stb_json *j, const char *key, uint64_t v);

/*
 * Splicing a value written once and used many times (a stack shared by many
 * tasks): stb_json_init_value starts a writer of one value on out, written
 * as parent would write its next value there (layout, escaping); after that
 * value, stb_json_value_finish flushes it (0 or -errno). stb_json_splice
 * then writes such a text as parent's next value: parent must be where it
 * was (same depth and container) when the text was written.
 */
void stb_json_init_value(struct stb_json *j, FILE *out, const struct stb_json *parent);
int stb_json_value_finish(struct stb_json *j);
void stb_json_splice(struct stb_json *j, const char *text, size_t len);

/*
 * Ends the document (a newline after the root). Returns 0, -EINVAL when the
 * calls did not form one complete document (unbalanced, a key without value,
 * too deep), or -EIO when writing failed.
 */
int stb_json_finish(struct stb_json *j);

#endif /* STB_RUNTIME_STACKS_ENCODE_JSON_H */
