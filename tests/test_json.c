/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The writers of what the target controls (runtime/stacks/encode/json.c, escape.c,
 * report.c): JSON strings with quotes, control bytes, DEL, valid and invalid
 * UTF-8; documents that cannot be malformed by misuse; the text escape; and
 * reports of a task whose name and comm hold ESC, BEL, newlines, quotes and
 * bytes >= 0x80, in text and JSON (the JSON checked by Python's parser when
 * $STB_PYTHON3 is set). Frame lines against snprintf, also of frames our
 * symbolizer names (a symbol of this file holds ESC and BEL).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
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

#include "encode/escape.h"
#include "encode/json.h"
#include "report/formats.h"
#include "report/rtframes.h"
#include "report/writers.h"
#include "symbols/symbolize.h"

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

/* stb_json_fixed3 writes what printf's "%.3f" writes, for values near
 * ties, negative zero, tiny, huge and not finite (written as 0.000). */
static void test_fixed3_like_printf(void **state)
{
	(void)state;
	const double edges[] = {0.0,	   -0.0,	  0.0005,	  0.0015,   0.0025,
				-0.0005,   1e-9,	  -1e-9,	  999.9995, 1.0005,
				2.675,	   1e6 - 0.0005,  999999.9994999, 1e6,	    1e9,
				123456.7895, 4503599627370496.5, 1e300, -1e300, 0.1 + 0.2,
				NAN,	   INFINITY,	  -INFINITY,	  5e-324,   -5e-324};
	unsigned seed = 12345;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	for (unsigned i = 0; i < 200000; i++) {
		double v;
		seed = seed * 1103515245u + 12345u;
		if (i < sizeof(edges) / sizeof(edges[0]))
			v = edges[i];
		else if (i % 3 == 0) /* a tie of thousandths, or next to one */
			v = (double)(seed % 2000000000u) * 0.0005 + (double)(int)(i % 7 - 3) * 1e-12;
		else if (i % 3 == 1) /* any magnitude */
			v = ldexp((double)(seed >> 8) / (1 << 24), (int)(seed % 80) - 40);
		else
			v = (double)(seed % 100000u) / 1000.0;
		if (i & 1)
			v = -v;
		struct stb_json j;
		fseek(f, 0, SEEK_SET);
		stb_json_init(&j, f);
		j.flags = STB_JSON_F_COMPACT;
		stb_json_fixed3(&j, v);
		assert_int_equal(stb_json_finish(&j), 0);
		fflush(f);
		char want[400];
		snprintf(want, sizeof(want), "%.3f\n", isfinite(v) ? v : 0.0);
		if (strncmp(buf, want, strlen(want)) != 0)
			fail_msg("%.17g: wrote %.*s, printf %s", v, (int)strlen(want), buf, want);
	}
	fclose(f);
	free(buf);
}

static void html_doc(struct stb_json *j)
{
	j->flags = STB_JSON_F_COMPACT | STB_JSON_F_HTML;
	stb_json_array(j);
	stb_json_string(j, "a</script><b>&c");
	stb_json_i64(j, INT64_MIN);
	stb_json_hex(j, 0);
	stb_json_end(j);
}

/* HTML mode escapes '<', '>' and '&' inside a run of plain bytes too: a
 * name cannot close the <script> element the document sits in. */
static void test_html(void **state)
{
	(void)state;
	int rc;
	char *s = json_of(html_doc, &rc);
	assert_int_equal(rc, 0);
	assert_string_equal(s, "[\"a\\u003c/script\\u003e\\u003cb\\u003e\\u0026c\","
			       "-9223372036854775808,\"0x0\"]\n");
	free(s);
}

static char big_name[3 * STB_JSON_BUF];

static void big_doc(struct stb_json *j)
{
	stb_json_array(j);
	for (unsigned i = 0; i < 5000; i++)
		stb_json_u64(j, i);
	stb_json_string(j, big_name);
	stb_json_end(j);
}

/* Documents larger than the writer's buffer, and strings larger than it,
 * come out whole and in order. */
static void test_buffered(void **state)
{
	(void)state;
	memset(big_name, 'x', sizeof(big_name) - 1);
	big_name[100] = '"';
	int rc;
	char *s = json_of(big_doc, &rc);
	assert_int_equal(rc, 0);
	const char *p = s;
	assert_int_equal(*p++, '[');
	for (unsigned i = 0; i < 5000; i++) {
		char want[32];
		int n = snprintf(want, sizeof(want), "\n  %u,", i);
		assert_memory_equal(p, want, (size_t)n);
		p += n;
	}
	assert_memory_equal(p, "\n  \"", 4);
	p += 4;
	for (size_t i = 0; i < sizeof(big_name) - 1; i++) {
		if (i == 100)
			assert_int_equal(*p++, '\\');
		assert_int_equal(*p++, big_name[i]);
	}
	assert_string_equal(p, "\"\n]\n");
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

/* What stb_format_frame must print, by snprintf: names cut at 511 bytes
 * (those tests use names needing no escape). */
static int frame_ref(char *out, size_t size, unsigned idx, const struct stb_frame *f)
{
	const char *name = f->symbol ? f->symbol : f->module;
	if (name && !f->symbol && strrchr(name, '/'))
		name = strrchr(name, '/') + 1;
	int n = snprintf(out, size, "#%u 0x%016llx", idx, (unsigned long long)f->ip);
	if (f->symbol)
		n += snprintf(out + n, size - n, " %.511s+0x%llx", name,
			      (unsigned long long)f->offset);
	else if (name)
		n += snprintf(out + n, size - n, " ?? (%.511s+0x%llx)", name,
			      (unsigned long long)f->module_offset);
	else
		n += snprintf(out + n, size - n, " ??");
	n += snprintf(out + n, size - n, "%s%s\n", f->flags & STB_FRAME_F_FP ? " [fp]" : "",
		      f->flags & STB_FRAME_F_MISMATCH ? " [build id mismatch]" : "");
	return n;
}

/* stb_format_frame of f at every size up to len + 130 (both the line
 * formatted in place and the one copied): the reference's prefix, NUL, and
 * no byte written past the NUL. */
static void frame_sizes(unsigned idx, const struct stb_frame *f, const char *want, size_t len)
{
	static char buf[1024];
	for (size_t size = 0; size <= len + 130 && size < sizeof(buf); size++) {
		memset(buf, 'Z', sizeof(buf));
		assert_int_equal(stb_format_frame(size ? buf : NULL, size, idx, f), len);
		if (!size)
			continue;
		size_t k = len < size ? len : size - 1;
		assert_memory_equal(buf, want, k);
		assert_int_equal(buf[k], '\0');
		for (size_t i = k + 1; i < sizeof(buf); i++)
			if (buf[i] != 'Z')
				fail_msg("size %zu: byte %zu written past the NUL", size, i);
	}
}

/* Every width of every number, names of every length the copy treats
 * apart, each form, against snprintf. */
static void test_frame_line_widths(void **state)
{
	(void)state;
	static char name[700], path[720], want[1024];
	for (size_t i = 0; i < sizeof(name); i++)
		name[i] = (char)('a' + i % 26);
	uint64_t nums[34];
	size_t nn = 0;
	nums[nn++] = 0;
	for (int d = 1; d <= 16; d++) {
		nums[nn++] = 1ull << (4 * (d - 1)); /* d digits, the first 1 */
		nums[nn++] = d == 16 ? UINT64_MAX : (1ull << (4 * d)) - 1; /* d digits of f */
	}
	nums[nn++] = 0x0123456789abcdefull;
	const unsigned idxs[] = {0, 9, 10, 99, 100, 12345, 4294967295u};
	const size_t lens[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 510, 511, 512, 699};
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
		char saved = name[lens[l]];
		name[lens[l]] = '\0';
		snprintf(path, sizeof(path), "/lib/dir/%s", name);
		for (size_t k = 0; k < nn; k++) {
			for (int form = 0; form < 3; form++) {
				struct stb_frame f = {.ip = nums[(k + l) % nn]};
				if (form == 0) {
					f.symbol = name;
					f.offset = nums[k];
				} else if (form == 1) {
					f.module = path;
					f.module_offset = nums[k];
				}
				f.flags = (unsigned)(k % 4 == 1 ? STB_FRAME_F_FP
						     : k % 4 == 2 ? STB_FRAME_F_MISMATCH
						     : k % 4 == 3 ? STB_FRAME_F_FP | STB_FRAME_F_MISMATCH
								  : 0);
				unsigned idx = idxs[(k + (size_t)form) % 7];
				size_t len = (size_t)frame_ref(want, sizeof(want), idx, &f);
				static char got[1024];
				assert_int_equal(stb_format_frame(got, sizeof(got), idx, &f), len);
				assert_string_equal(got, want);
				if (lens[l] <= 64 ? k % 3 == 0 || form == 0 : k == 5)
					frame_sizes(idx, &f, want, len);
			}
		}
		name[lens[l]] = saved;
	}
}

/* A function whose symbol holds ESC, BEL and an invalid UTF-8 byte (an ELF
 * symbol can hold any byte but NUL). gcc hands an asm label to the assembler
 * as written, which takes such a name only quoted; clang quotes it itself
 * (quotes written here would become part of the name). */
#ifdef __clang__
#define FRAME_HOSTILE_LABEL "ev\x1b[1mil\x07\xff" "fn"
#else
#define FRAME_HOSTILE_LABEL "\"ev\x1b[1mil\x07\xff" "fn\""
#endif
__attribute__((noinline, used)) int frame_hostile(int v) __asm__(FRAME_HOSTILE_LABEL);
__attribute__((noinline, used)) int frame_hostile(int v)
{
	__asm__ volatile("" : "+r"(v));
	return v + 1;
}

__attribute__((noinline)) static int frame_plain(int v)
{
	__asm__ volatile("" : "+r"(v));
	return v * 3;
}

/* Lines of frames symbolized by a stb_sym (lengths and escapes known from
 * the symbolizer's strings) are those of stb_format_frame, escaped from the
 * bytes of the names, at every size of the text. */
static void test_frame_text_symbols(void **state)
{
	(void)state;
	struct stb_sym *s = stb_sym_new(0);
	assert_non_null(s);
	struct stb_frame fr[4] = {
		{.ip = (uint64_t)(uintptr_t)frame_plain + 1},
		{.ip = (uint64_t)(uintptr_t)frame_hostile + 2, .flags = STB_FRAME_F_FP},
		{.ip = (uint64_t)(uintptr_t)frame_plain},
	};
	struct stb_sym_info si;
	for (int i = 0; i < 3; i++) {
		assert_true(stb_sym_fill_frame(s, 0, &fr[i], &si));
		assert_non_null(fr[i].symbol);
		assert_non_null(fr[i].module);
	}
	/* The last one as if the symbol were unknown: the module's file name. */
	fr[2].symbol = NULL;
	fr[3] = fr[1];
	fr[3].symbol = NULL;
	fr[3].flags = STB_FRAME_F_MISMATCH;
	/* What the symbolizer knows of its strings is what their bytes say. */
	for (int i = 0; i < 4; i++) {
		const char *str[2] = {fr[i].symbol, fr[i].module};
		for (int k = 0; k < 2; k++) {
			if (!str[k])
				continue;
			bool plain = !stb_text_plain(str[k], strlen(str[k]));
			assert_int_equal(stb_sym_str_len(str[k], &plain), strlen(str[k]));
			assert_int_equal(plain, stb_text_plain(str[k], strlen(str[k])));
		}
	}
	bool plain = true;
	stb_sym_str_len(fr[1].symbol, &plain);
	assert_false(plain);
	static char want[4096], got[4096];
	size_t len = 0;
	for (unsigned i = 0; i < 4; i++)
		len += stb_format_frame(want + len, sizeof(want) - len, i, &fr[i]);
	assert_non_null(strstr(want, " ev\\x1b[1mil\\x07\\xfffn+0x2 [fp]\n"));
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)want[i] < 0x20 && want[i] != '\n')
			fail_msg("control byte 0x%02x at %zu", (unsigned char)want[i], i);
	for (size_t size = 0; size <= len + 2 * 96 + 10 && size <= sizeof(got); size++) {
		memset(got, 'Z', sizeof(got));
		struct stb_frame_text t = {.buf = size ? got : NULL, .size = size};
		for (int i = 0; i < 4; i++)
			assert_int_equal(stb_frame_text_add(&fr[i], &t), 0);
		assert_int_equal(t.len, len);
		assert_int_equal(t.idx, 4);
		if (!size)
			continue;
		size_t k = len < size ? len : size - 1;
		assert_memory_equal(got, want, k);
		assert_int_equal(got[k], '\0');
		for (size_t i = k + 1; i < size; i++)
			if (got[i] != 'Z')
				fail_msg("size %zu: byte %zu written past the NUL", size, i);
	}
	stb_sym_free(s);
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
	t.name = hostile;
	struct stb_report_task failed = {.id = 2ull << 32, .state = STB_TASK_RUNNING, .err = -EIO};
	const struct stb_report_more failed_more = {.error = "boom \x1b[5m\"x\"\n"};
	failed.more = &failed_more;
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
	/* Lines: the report's header, blank, note, blank, header, 2 frames, blank,
	 * header, error, blank, partial. */
	unsigned lines = 0;
	for (const char *p = text; *p; p++)
		lines += *p == '\n';
	assert_int_equal(lines, 12);
	static const char head[] = "# test of pid 42 (c\\x1b\\n\\\"\\xff)\n\n# note: ";
	if (strncmp(text, head, sizeof(head) - 1) != 0)
		fail_msg("the header line does not escape comm:\n%s", text);
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

/* Tasks A and B share one stored stack, C has its own copy of the same
 * frames, D the same frames with another key (3 more frames were left out):
 * every task gets the view its own copy would give, though the shared one is
 * trimmed once and its JSON written once. */
static char *shared_report(struct stb_report_task *t, size_t n, struct stb_stackset *set,
			   int format, bool group)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	/* Symbols are there already, but the runtime's frames are left out
	 * only with a symbolizer (this process's: it knows none of the made-up
	 * addresses, so no inline frame is added). */
	struct stb_sym *sym = stb_sym_new(0);
	assert_non_null(sym);
	struct stb_report r = {.out = f, .max_depth = 2, .stacks = set, .group = group,
			       .sym = sym};
	assert_int_equal(stb_report_write(&r, t, n, format), 0);
	fclose(f);
	stb_sym_free(sym);
	return buf;
}

static void shared_tasks(struct stb_report_task *t, struct stb_stackset *set,
			 struct stb_frame *own)
{
	/* The runtime's own innermost frame, then an API function: hidden. */
	static const char *const names[] = {"stb_jump_stack", "bthread_f1", "f2", "f3", "f4",
					    "f5"};
	struct stb_frame frames[6];
	memset(frames, 0, sizeof(frames));
	for (unsigned i = 0; i < 6; i++) {
		frames[i].ip = 0x401000 + 16 * i;
		frames[i].sp = 0x7000 + 64 * i;
		frames[i].symbol = names[i];
		frames[i].offset = i;
		frames[i].module = "/lib/m.so";
	}
	memset(t, 0, 4 * sizeof(*t));
	for (unsigned i = 0; i < 4; i++) {
		t[i].id = (uint64_t)(i + 1) << 32;
		t[i].state = STB_TASK_SUSPENDED;
		t[i].mode = STB_TRACE_CONTEXT;
		t[i].nframes = 6;
	}
	t[3].beyond = 3;
	for (unsigned i = 0; i < 4; i++) {
		if (i == 2)
			continue;
		frames[0].sp = 0x9000 + i; /* differs per task: not part of the stack */
		t[i].stack = stb_stackset_add(set, frames, 6, stb_report_stack_key(&t[i]));
		assert_non_null(t[i].stack);
		t[i].frames = t[i].stack->frames;
	}
	memcpy(own, frames, sizeof(frames));
	t[2].frames = own;
}

/* The text of task id's "frames" member in a JSON report. */
static char *frames_of(const char *json, uint64_t id)
{
	char key[48];
	snprintf(key, sizeof(key), "{\"id\": %" PRIu64 ",", id);
	const char *p = strstr(json, key);
	assert_non_null(p);
	p = strstr(p, "\"frames\": [");
	assert_non_null(p);
	const char *e = strstr(p, "]}");
	assert_non_null(e);
	return strndup(p, (size_t)(e - p));
}

static void test_shared_stacks(void **state)
{
	(void)state;
	struct stb_stackset *set = stb_stackset_new();
	assert_non_null(set);
	struct stb_report_task t[4];
	struct stb_frame own[6];
	shared_tasks(t, set, own);
	assert_ptr_equal(t[0].stack, t[1].stack);
	assert_true(t[3].stack != t[0].stack); /* another key: another stack */
	assert_int_equal(t[0].stack->refs, 2);
	assert_int_equal(t[0].stack->frames[0].sp, 0);
	size_t nframes;
	assert_int_equal(stb_stackset_count(set, &nframes), 2);
	assert_int_equal(nframes, 12);

	char *json = shared_report(t, 4, set, STB_FORMAT_JSON, false);
	python_parses(json);
	char *fa = frames_of(json, t[0].id), *fb = frames_of(json, t[1].id);
	char *fc = frames_of(json, t[2].id), *fd = frames_of(json, t[3].id);
	assert_string_equal(fa, fc);
	assert_string_equal(fb, fc);
	assert_string_equal(fd, fc);
	assert_null(strstr(fa, "stb_jump_stack")); /* hidden */
	assert_non_null(strstr(fa, "\"function\": \"bthread_f1\""));
	assert_non_null(strstr(fa, "\"function\": \"f2\""));
	assert_null(strstr(fa, "\"function\": \"f3\"")); /* max_depth 2 */
	assert_non_null(t[0].stack->json); /* written once, kept */
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(t[i].hidden, 1);
		assert_int_equal(t[i].nframes, 2);
		assert_int_equal(t[i].not_shown, i == 3 ? 6 : 3);
	}
	free(fa);
	free(fb);
	free(fc);
	free(fd);
	free(json);

	/* Text, and grouped: the same view. */
	stb_stackset_clear(set);
	assert_int_equal(stb_stackset_count(set, NULL), 0);
	shared_tasks(t, set, own);
	char *text = shared_report(t, 4, set, STB_FORMAT_TEXT, false);
	unsigned f2 = 0;
	for (const char *p = text; (p = strstr(p, " f2+0x2\n")); p++)
		f2++;
	assert_int_equal(f2, 4);
	assert_null(strstr(text, "stb_jump_stack+"));
	assert_null(strstr(text, " f3+"));
	free(text);
	stb_stackset_clear(set);
	shared_tasks(t, set, own);
	json = shared_report(t, 4, set, STB_FORMAT_JSON, true);
	python_parses(json);
	assert_non_null(strstr(json, "\"count\": 4"));
	free(json);
	stb_stackset_free(set);
}

/* shared_tasks' four tasks waiting on mutexes: one (objects 1) or two,
 * held by two tasks in turn as they were read. */
static void one_lock_tasks(struct stb_report_task *t, struct stb_stackset *set,
			   struct stb_frame *own, int objects)
{
	stb_stackset_clear(set);
	shared_tasks(t, set, own);
	for (unsigned i = 0; i < 4; i++) {
		t[i].wait.kind = STB_WAIT_MUTEX;
		t[i].wait.object = objects == 1 || i < 2 ? 0x5000 : 0x6000;
		t[i].wait.extra = t[i].wait.object;
		t[i].wait.owner = (uint64_t)(10 + i % 2) << 32;
	}
}

/* A group waiting on one mutex whose holder changed while its members were
 * read (each member's owner is the one seen when it was read): one lock,
 * "held by several in turn", and the JSON's object without an owner; other
 * objects make it "(several)". */
static void test_group_one_lock(void **state)
{
	(void)state;
	struct stb_report_task t[4];
	struct stb_frame own[6];
	struct stb_stackset *set = stb_stackset_new();
	assert_non_null(set);
	for (int objects = 1; objects <= 2; objects++) {
		one_lock_tasks(t, set, own, objects);
		char *text = shared_report(t, 4, set, STB_FORMAT_TEXT, true);
		bool one = strstr(text, "waiting on mutex 0x5000, held by several in turn") != NULL;
		bool several = strstr(text, "waiting on mutex (several)") != NULL;
		if (objects == 1 ? !one || several : one || !several)
			fail_msg("%d object(s):\n%s", objects, text);
		free(text);
		one_lock_tasks(t, set, own, objects);
		char *json = shared_report(t, 4, set, STB_FORMAT_JSON, true);
		python_parses(json);
		const char *g = strstr(json, "\"groups\"");
		assert_non_null(g);
		const char *want = objects == 1 ? "\"wait\": {\"kind\": \"mutex\", \"object\": \"0x5000\"}"
						: "\"wait\": {\"kind\": \"mutex\"}";
		if (!strstr(g, want))
			fail_msg("%d object(s): no %s in\n%s", objects, want, g);
		free(json);
	}
	stb_stackset_free(set);
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

/* The runtime frames of a stack end at the call the user made: the
 * outermost of the public functions calling each other (bthread_sem_wait
 * calling bthread_sem_timedwait), a bthread:: wrapper in the user's module
 * included; a public function called from user code after it is not. */
static void test_rtframes_api_call(void **state)
{
	(void)state;
	static const char lib[] = "/usr/lib/libbthread.so", app[] = "/srv/app";
	struct case_ {
		const char *syms[8];
		const char *mods[8];
		unsigned inner, outer;
	} cases[] = {
	    {{"stb_jump_stack.constprop.0", "stb_sched_suspend", "stb_butex_wait_mono",
	      "bthread_sem_timedwait", "bthread_sem_wait", "semf", "stb_task_entry",
	      "stb_ctx_trampoline"},
	     {lib, lib, lib, lib, lib, app, lib, lib}, 4, 2},
	    {{"stb_jump_stack", "stb_butex_wait_mono", "bthread_id_lock_and_reset_range_verbose",
	      "bthread_id_lock_verbose", "idf", NULL},
	     {lib, lib, lib, lib, app}, 3, 0},
	    /* A wait relocking the mutex inside cond_wait: one call of the user. */
	    {{"stb_jump_stack", "mutex_lock_contended", "bthread_mutex_lock",
	      "bthread_cond_timedwait", "bthread_cond_wait", "bthread::ConditionVariable::wait",
	      "user_fn", NULL},
	     {lib, lib, lib, lib, lib, app, app}, 5, 0},
	    /* The user's function between two public calls stops the block. */
	    {{"stb_jump_stack", "bthread_mutex_lock", "on_error", "bthread_id_error", "x", NULL},
	     {lib, lib, app, lib, app}, 1, 0},
	    /* A public name in another module is not the runtime's. */
	    {{"stb_jump_stack", "bthread_sem_timedwait", "bthread_sem_wait", NULL},
	     {lib, lib, app}, 1, 0},
	    /* Every frame public: one stays. */
	    {{"stb_jump_stack", "bthread_sem_timedwait", "bthread_sem_wait", NULL},
	     {lib, lib, lib}, 2, 0},
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct stb_frame f[8];
		unsigned n = 0;
		memset(f, 0, sizeof(f));
		for (; n < 8 && cases[c].syms[n]; n++) {
			f[n].symbol = cases[c].syms[n];
			f[n].module = cases[c].mods[n];
			f[n].ip = 0x1000 + n;
		}
		unsigned inner, outer;
		stb_rtframes_find(f, n, true, &inner, &outer);
		if (inner != cases[c].inner || outer != cases[c].outer)
			fail_msg("case %zu: inner %u outer %u, want %u %u", c, inner, outer,
				 cases[c].inner, cases[c].outer);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_string_escapes), cmocka_unit_test(test_document),
	    cmocka_unit_test(test_fixed3_like_printf),
	    cmocka_unit_test(test_html),           cmocka_unit_test(test_buffered),
	    cmocka_unit_test(test_misuse),         cmocka_unit_test(test_text_escape),
	    cmocka_unit_test(test_text_plain),     cmocka_unit_test(test_frame_line),
	    cmocka_unit_test(test_frame_line_widths), cmocka_unit_test(test_frame_text_symbols),
	    cmocka_unit_test(test_reports),        cmocka_unit_test(test_formats),
	    cmocka_unit_test(test_shared_stacks), cmocka_unit_test(test_group_one_lock),
	    cmocka_unit_test(test_rtframes_api_call),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
