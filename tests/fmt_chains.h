/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The parked call chains that the format tests expect by name, shared by
 * test_formats (in process) and profile_target (traced by the loader):
 * fmt_a1 -> fmt_a2 -> fmt_a3 -> park and fmt_b1 -> fmt_b2 -> park, each
 * waiting on the butex fmt_gate until fmt_chains_release(). Include once per
 * program; fmt_gate must be created (butex_create) before a chain starts.
 */
#ifndef STB_TESTS_FMT_CHAINS_H
#define STB_TESTS_FMT_CHAINS_H

#include <stdbool.h>

#include <bthread/butex.h>

#include "util.h"

/* No inlining, cloning or IPA, no tail calls: every chain function keeps its
 * own frame and symbol. */
#define STB_FMT_FN STB_NOIPA
#define STB_FMT_NO_TAIL() __asm__ volatile("" ::: "memory")

static int *fmt_gate;           /* butex: the parked chains wait for it to change */
static volatile bool fmt_stop;  /* set by fmt_chains_release() */

STB_FMT_FN static void park(void)
{
	while (!__atomic_load_n(&fmt_stop, __ATOMIC_ACQUIRE))
		butex_wait(fmt_gate, 0, NULL);
	STB_FMT_NO_TAIL();
}

STB_FMT_FN static void fmt_a3(void)
{
	park();
	STB_FMT_NO_TAIL();
}

STB_FMT_FN static void fmt_a2(void)
{
	fmt_a3();
	STB_FMT_NO_TAIL();
}

STB_FMT_FN static void *fmt_a1(void *arg)
{
	(void)arg;
	fmt_a2();
	STB_FMT_NO_TAIL();
	return NULL;
}

STB_FMT_FN static void fmt_b2(void)
{
	park();
	STB_FMT_NO_TAIL();
}

STB_FMT_FN static void *fmt_b1(void *arg)
{
	(void)arg;
	fmt_b2();
	STB_FMT_NO_TAIL();
	return NULL;
}

/* Ends every chain (and whatever else polls fmt_stop). */
static void fmt_chains_release(void)
{
	__atomic_store_n(&fmt_stop, true, __ATOMIC_RELEASE);
	__atomic_store_n(fmt_gate, 1, __ATOMIC_RELEASE);
	butex_wake_all(fmt_gate);
}

#endif /* STB_TESTS_FMT_CHAINS_H */
