/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A shared object for test_unwind_hostile: loaded by its helper from a
 * memfd that the helper then truncates under its own mapping.
 */
int unw_dso_fn(int x);

static volatile int unw_dso_sink;

__attribute__((noinline, visibility("default"))) int unw_dso_fn(int x)
{
	unw_dso_sink = x;
	return unw_dso_sink * 3 + 1;
}
