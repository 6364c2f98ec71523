/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test support: a small JSON parser (a tree of values) for the documents of
 * docs/json.md read back by the tests.
 */
#ifndef STB_TESTS_SUPPORT_JSON_PARSE_H
#define STB_TESTS_SUPPORT_JSON_PARSE_H

#include <stdbool.h>
#include <stdint.h>

enum ts_json_type { TS_JNULL, TS_JBOOL, TS_JNUM, TS_JSTR, TS_JARR, TS_JOBJ };

struct ts_json {
	enum ts_json_type type;
	char *str; /* STR: the string; NUM: the number's text */
	char *key; /* member of an object: its name */
	bool b;
	struct ts_json *child; /* ARR/OBJ: first element */
	struct ts_json *next;  /* next sibling */
	unsigned n;            /* ARR/OBJ: element count */
};

/* Parses a whole document. NULL on error (*err, when not NULL, says why). */
struct ts_json *ts_json_parse(const char *text, const char **err);
void ts_json_free(struct ts_json *j);

/* Member key of object obj, or NULL. */
const struct ts_json *ts_json_get(const struct ts_json *obj, const char *key);
/* String member (NULL when absent or not a string). */
const char *ts_json_str(const struct ts_json *obj, const char *key);
/* Unsigned number member (def when absent). */
uint64_t ts_json_u64(const struct ts_json *obj, const char *key, uint64_t def);
/* Boolean member (-1 when absent). */
int ts_json_bool(const struct ts_json *obj, const char *key);

#endif /* STB_TESTS_SUPPORT_JSON_PARSE_H */
