/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The collector's own parts: its pool of task names (collect/names.h) --
 * one copy of each distinct name, the same pointer for equal names, cut at
 * the length it is given, forgotten when cleared.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "collect/names.h"
#include "report/model.h"
#include "stb/abi.h"

static void test_names_once(void **state)
{
	(void)state;
	struct stb_names p = {0};
	char a[STB_ABI_NAME_LEN] = "worker", b[STB_ABI_NAME_LEN] = "worker";
	const char *x = stb_names_intern(&p, a, sizeof(a));
	const char *y = stb_names_intern(&p, b, sizeof(b));
	assert_non_null(x);
	assert_ptr_equal(x, y); /* equal names: one copy */
	assert_ptr_not_equal(x, a);
	assert_string_equal(x, "worker");
	const char *z = stb_names_intern(&p, "worker2", 8);
	assert_ptr_not_equal(x, z);
	assert_string_equal(z, "worker2");
	/* A prefix of a stored name is a name of its own. */
	const char *w = stb_names_intern(&p, "work", 5);
	assert_string_equal(w, "work");
	assert_ptr_not_equal(w, x);
	assert_int_equal(p.n, 3);
	const char *e = stb_names_intern(&p, "", 1);
	assert_string_equal(e, "");
	assert_ptr_equal(e, stb_names_intern(&p, "\0junk", 5));
	stb_names_free(&p);
}

/* A name without its NUL within len (a table entry rewritten while it was
 * copied) is cut at len: nothing past it is read. */
static void test_names_cut(void **state)
{
	(void)state;
	struct stb_names p = {0};
	char raw[8];
	memset(raw, 'x', sizeof(raw));
	const char *s = stb_names_intern(&p, raw, 4);
	assert_string_equal(s, "xxxx");
	assert_ptr_equal(s, stb_names_intern(&p, "xxxx", 5));
	stb_names_free(&p);
}

/* Many distinct names span chunks; every pointer stays valid and equal
 * names still meet; clearing forgets them all. */
static void test_names_many(void **state)
{
	(void)state;
	struct stb_names p = {0};
	enum { N = 20000 };
	static const char *got[N];
	char buf[STB_ABI_NAME_LEN];
	for (unsigned i = 0; i < N; i++) {
		snprintf(buf, sizeof(buf), "task-%u-padded-to-be-long-enough", i);
		got[i] = stb_names_intern(&p, buf, sizeof(buf));
		assert_non_null(got[i]);
	}
	assert_true(p.nchunks > 1);
	for (unsigned i = 0; i < N; i++) {
		snprintf(buf, sizeof(buf), "task-%u-padded-to-be-long-enough", i);
		assert_string_equal(got[i], buf);
		assert_ptr_equal(got[i], stb_names_intern(&p, buf, sizeof(buf)));
	}
	assert_int_equal(p.n, N);
	stb_names_clear(&p);
	assert_int_equal(p.n, 0);
	assert_int_equal(p.nchunks, 1);
	const char *s = stb_names_intern(&p, "again", 6);
	assert_string_equal(s, "again");
	assert_int_equal(p.n, 1);
	stb_names_free(&p);
	assert_int_equal(p.n, 0);
	stb_names_free(&p); /* a freed pool is an empty one */
}

/* A record without a name reads as "". */
static void test_task_name(void **state)
{
	(void)state;
	struct stb_report_task t = {0};
	assert_string_equal(stb_report_task_name(&t), "");
	t.name = "x";
	assert_string_equal(stb_report_task_name(&t), "x");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_names_once),
	    cmocka_unit_test(test_names_cut),
	    cmocka_unit_test(test_names_many),
	    cmocka_unit_test(test_task_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
