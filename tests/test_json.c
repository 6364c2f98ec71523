/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The writers of what the target controls (runtime/stacks/json.c, escape.c,
 * report.c): JSON strings with quotes, control bytes, DEL, valid and invalid
 * UTF-8; documents that cannot be malformed by misuse; the text escape; and
 * reports of a task whose name and comm hold ESC, BEL, newlines, quotes and
 * bytes >= 0x80, in text and JSON (the JSON checked by Python's parser when
 * $STB_PYTHON3 is set).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "escape.h"
#include "json.h"
#include "report.h"

/* Runs fn(j) into a memory stream; returns the text (caller frees) and *rc. */
static char *json_of(void (*fn)(struct stb_json *), int *rc)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	struct stb_json j;
	stb_json_init(&j, f);
	fn(&j);
	*rc = stb_json_finish(&j);
	fclose(f);
	return buf;
}

static const char hostile[] = "a\"b\\c\n\t\r\x01\x1b[31m\x07\x7f"
			      "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80" /* é € 😀 */
			      "\xff\xc0\x80\xed\xa0\x80\xe2\x82";    /* invalid */

static void one_string(struct stb_json *j)
{
	stb_json_string(j, hostile);
}

static void test_string_escapes(void **state)
{
	(void)state;
	int rc;
	char *s = json_of(one_string, &rc);
	assert_int_equal(rc, 0);
	assert_string_equal(s, "\"a\\\"b\\\\c\\n\\t\\r\\u0001\\u001b[31m\\u0007\\u007f"
			       "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"
			       "\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\"\n");
	for (const char *p = s; *p; p++)
		assert_true((unsigned char)*p >= 0x20 || *p == '\n');
	free(s);
}

static void doc(struct stb_json *j)
{
	stb_json_object(j);
	stb_json_kv_string(j, "k\"ey", "v");
	stb_json_kv_u64(j, "n", UINT64_MAX);
	stb_json_kv_i64(j, "i", -5);
	stb_json_kv_hex(j, "ip", 0xabcdefull);
	stb_json_key(j, "a");
	stb_json_array(j);
	stb_json_bool(j, true);
	stb_json_fixed3(j, 1.5);
	stb_json_object(j);
	stb_json_end(j);
	stb_json_array(j);
	stb_json_end(j);
	stb_json_end(j);
	stb_json_end(j);
}

static void test_document(void **state)
{
	(void)state;
	int rc;
	char *s = json_of(doc, &rc);
	assert_int_equal(rc, 0);
	assert_string_equal(s, "{\n  \"k\\\"ey\": \"v\",\n  \"n\": 18446744073709551615,\n"
			       "  \"i\": -5,\n  \"ip\": \"0xabcdef\",\n  \"a\": [\n    true,\n"
			       "    1.500,\n    {},\n    []\n  ]\n}\n");
	free(s);
}

static void value_without_key(struct stb_json *j)
{
	stb_json_object(j);
	stb_json_string(j, "x");
	stb_json_end(j);
}

static void key_in_array(struct stb_json *j)
{
	stb_json_array(j);
	stb_json_key(j, "x");
	stb_json_end(j);
}

static void unbalanced(struct stb_json *j)
{
	stb_json_object(j);
	stb_json_key(j, "x");
	stb_json_array(j);
}

static void two_roots(struct stb_json *j)
{
	stb_json_u64(j, 1);
	stb_json_u64(j, 2);
}

static void too_deep(struct stb_json *j)
{
	for (unsigned i = 0; i <= STB_JSON_MAX_DEPTH; i++)
		stb_json_array(j);
	for (unsigned i = 0; i <= STB_JSON_MAX_DEPTH; i++)
		stb_json_end(j);
}

static void test_misuse(void **state)
{
	(void)state;
	void (*cases[])(struct stb_json *) = {value_without_key, key_in_array, unbalanced,
					      two_roots, too_deep};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc;
		free(json_of(cases[i], &rc));
		assert_int_equal(rc, -EINVAL);
	}
}

static void test_text_escape(void **state)
{
	(void)state;
	char out[256];
	size_t n = stb_text_escape(out, sizeof(out), hostile, sizeof(hostile) - 1);
	assert_int_equal(n, strlen(out));
	assert_string_equal(out, "a\\\"b\\\\c\\n\\t\\r\\x01\\x1b[31m\\x07\\x7f"
				 "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"
				 "\\xff\\xc0\\x80\\xed\\xa0\\x80\\xe2\\x82");
	/* C1 controls (U+0085, U+009B: CSI on 8-bit terminals) are escaped too. */
	stb_text_escape(out, sizeof(out), "\xc2\x85\xc2\x9b\xc2\xa0", 6);
	assert_string_equal(out, "\\xc2\\x85\\xc2\\x9b\xc2\xa0");
	/* snprintf's contract: the full length, always terminated. */
	char small[5];
	assert_int_equal(stb_text_escape(small, sizeof(small), "\x1b\x1b", 2), 8);
	assert_string_equal(small, "\\x1b");
	assert_int_equal(stb_text_escape(NULL, 0, "ab", 2), 2);
}

/* stb_text_plain (8 bytes at a time) agrees with the byte rule of the escape
 * for every byte at every position of strings of 1 to 24 bytes. */
static void test_text_plain(void **state)
{
	(void)state;
	char s[24], out[128];
	for (size_t len = 1; len <= sizeof(s); len++) {
		for (size_t pos = 0; pos < len; pos++) {
			for (unsigned c = 0; c < 256; c++) {
				memset(s, 'a', len);
				s[pos] = (char)c;
				size_t n = stb_text_escape(out, sizeof(out), s, len);
				bool same = n == len && memcmp(out, s, len) == 0 && c < 0x80;
				if (stb_text_plain(s, len) != same)
					fail_msg("len %zu pos %zu byte 0x%02x", len, pos, c);
			}
		}
	}
	assert_true(stb_text_plain("", 0));
}

/* Frame lines: each form, hex without leading zeros but the address, names
 * escaped and cut at 511 bytes, snprintf's contract at every size. */
static void test_frame_line(void **state)
{
	(void)state;
	char line[1024];
	struct stb_frame f = {.ip = 0x7f0012345678, .symbol = "main", .offset = 0x2b};
	assert_int_equal(stb_format_frame(line, sizeof(line), 12, &f), 33);
	assert_string_equal(line, "#12 0x00007f0012345678 main+0x2b\n");
	f = (struct stb_frame){.ip = UINT64_MAX, .symbol = "a\x1b", .offset = 0,
			       .flags = STB_FRAME_F_FP};
	stb_format_frame(line, sizeof(line), 0, &f);
	assert_string_equal(line, "#0 0xffffffffffffffff a\\x1b+0x0 [fp]\n");
	f = (struct stb_frame){.ip = 0x10, .module = "/lib/x\"y.so", .module_offset = 0xabcdef012};
	stb_format_frame(line, sizeof(line), 4294967295u, &f);
	assert_string_equal(line, "#4294967295 0x0000000000000010 ?? (x\\\"y.so+0xabcdef012)\n");
	f = (struct stb_frame){.ip = 1};
	stb_format_frame(line, sizeof(line), 3, &f);
	assert_string_equal(line, "#3 0x0000000000000001 ??\n");
	char big[700];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	f = (struct stb_frame){.ip = 2, .symbol = big, .offset = 1};
	size_t full = stb_format_frame(line, sizeof(line), 1, &f);
	assert_int_equal(full, strlen("#1 0x0000000000000002 ") + 511 + strlen("+0x1\n"));
	assert_int_equal(strlen(line), full);
	char small[40];
	for (size_t size = 0; size <= sizeof(small); size++) {
		memset(small, '#', sizeof(small));
		assert_int_equal(stb_format_frame(size ? small : NULL, size, 1, &f), full);
		if (size)
			assert_int_equal(strlen(small), size - 1);
		if (size)
			assert_memory_equal(small, line, size - 1);
	}
}

/* Checks a JSON document with Python's parser (strict: no control bytes). */
static void python_parses(const char *text)
{
	const char *py = getenv("STB_PYTHON3");
	if (!py || !*py)
		return;
	char path[] = "/tmp/stb-json-test.XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	char cmd[512];
	snprintf(cmd, sizeof(cmd),
		 "%s -c 'import json,sys; json.load(open(sys.argv[1], "
		 "encoding=\"utf-8\", errors=\"strict\"))' %s",
		 py, path);
	int rc = system(cmd);
	unlink(path);
	assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
}

static char *report_of(int format, bool list)
{
	static struct stb_frame frames[2] = {
	    {.ip = 0x1000, .symbol = "evil\x1b]0;title\x07sym", .module = "/lib/m\nod.so"},
	    {.ip = 0x2000, .module = "/x/\x1b[2Jmod"},
	};
	struct stb_report_task t = {
	    .id = 1ull << 32,
	    .state = STB_TASK_SUSPENDED,
	    .mode = STB_TRACE_CONTEXT,
	    .nframes = 2,
	    .frames = frames,
	};
	memcpy(t.name, hostile, sizeof(hostile));
	struct stb_report_task failed = {.id = 2ull << 32, .state = STB_TASK_RUNNING, .err = -EIO};
	snprintf(failed.error, sizeof(failed.error), "boom \x1b[5m\"x\"\n");
	struct stb_report_task tasks[2] = {t, failed};
	struct stb_report_meta m = {
	    .producer = "test",
	    .pid = 42,
	    .comm = "c\x1b\n\"\xff",
	    .table = true,
	    .abi_version = 2,
	    .table_capacity = 64,
	    .capture = "context",
	    .run = true,
	    .complete = false,
	    .partial = "the target \x07 exited",
	};
	stb_report_meta_note(&m, "note with \x1b[1m and \n");
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	struct stb_report r = {.out = f, .meta = &m};
	int rc = list ? stb_report_list(&r, tasks, 2, format == STB_FORMAT_JSON)
		      : stb_report_write(&r, tasks, 2, format);
	assert_int_equal(rc, 0);
	fclose(f);
	return buf;
}

static void no_raw_controls(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if ((*p < 0x20 && *p != '\n') || *p == 0x7f)
			fail_msg("control byte 0x%02x at offset %zu", *p,
				 (size_t)(p - (const unsigned char *)s));
}

static void test_reports(void **state)
{
	(void)state;
	char *text = report_of(STB_FORMAT_TEXT, false);
	no_raw_controls(text);
	/* Lines: note, blank, header, 2 frames, blank, header, error, blank, partial. */
	unsigned lines = 0;
	for (const char *p = text; *p; p++)
		lines += *p == '\n';
	assert_int_equal(lines, 10);
	assert_non_null(strstr(text, "\\x1b]0;title\\x07sym"));
	assert_non_null(strstr(text, "(trace failed: boom \\x1b[5m\\\"x\\\"\\n)"));
	assert_non_null(strstr(text, "# the target \\x07 exited: the output is partial"));
	free(text);
	for (int list = 0; list < 2; list++) {
		char *json = report_of(STB_FORMAT_JSON, list);
		no_raw_controls(json);
		assert_non_null(strstr(json, "\"comm\": \"c\\u001b\\n\\\"\\ufffd\""));
		assert_non_null(strstr(json, "\"partial\": \"the target \\u0007 exited\""));
		python_parses(json);
		free(json);
	}
	char *folded = report_of(STB_FORMAT_FOLDED, false);
	no_raw_controls(folded);
	free(folded);
	char *list = report_of(STB_FORMAT_TEXT, true);
	no_raw_controls(list);
	free(list);
}

static void test_formats(void **state)
{
	(void)state;
	assert_int_equal(stb_format_from_name("json"), STB_FORMAT_JSON);
	assert_int_equal(stb_format_from_name("folded"), STB_FORMAT_FOLDED);
	assert_int_equal(stb_format_from_name("xml"), -EINVAL);
	assert_int_equal(stb_format_from_name(NULL), -EINVAL);
	assert_string_equal(stb_format_name(STB_FORMAT_PPROF), "pprof");
	assert_string_equal(stb_format_name(STB_FORMAT_FLAMEGRAPH), "flamegraph");
	assert_int_equal(stb_format_from_name("flamegraph"), STB_FORMAT_FLAMEGRAPH);
	assert_null(stb_format_name(5));
	assert_null(stb_format_name(-1));
	assert_string_equal(stb_state_name(200), "invalid");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_string_escapes), cmocka_unit_test(test_document),
	    cmocka_unit_test(test_misuse),         cmocka_unit_test(test_text_escape),
	    cmocka_unit_test(test_text_plain),     cmocka_unit_test(test_frame_line),
	    cmocka_unit_test(test_reports),        cmocka_unit_test(test_formats),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
