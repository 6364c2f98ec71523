/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The call chain g1 -> g2 -> g3 of test_unwind, compiled with
 * -fomit-frame-pointer (see tests/CMakeLists.txt); g3 also destroys rbp before
 * capturing, so only CFI can unwind through these frames.
 */
#include <stdint.h>

#include "unwind/unwind.h"
#include "util.h"

struct unw_test_capture;
int unw_test_nofp_g1(struct unw_test_capture *c, int x);
int unw_test_nofp_g2(struct unw_test_capture *c, int x);
int unw_test_nofp_g3(struct unw_test_capture *c, int x);
/* In test_unwind.c: captures the registers and the stack of its caller's
 * context (its own frame is frame 0). */
int unw_test_capture_here(struct unw_test_capture *c);

volatile int unw_test_nofp_sink;

STB_NOINLINE_NOCLONE int unw_test_nofp_g3(struct unw_test_capture *c, int x)
{
	int r;

	/* rbp holds garbage from here on: a frame-pointer walk is lost. */
	__asm__ volatile("mov $0x5a5a5a5a5a5a5a5a, %%rbp" ::: "rbp", "memory");
	r = unw_test_capture_here(c);
	unw_test_nofp_sink = r;
	return r + x;
}

STB_NOINLINE_NOCLONE int unw_test_nofp_g2(struct unw_test_capture *c, int x)
{
	int r = unw_test_nofp_g3(c, x + 1);
	unw_test_nofp_sink = r;
	return r + 2;
}

STB_NOINLINE_NOCLONE int unw_test_nofp_g1(struct unw_test_capture *c, int x)
{
	int r = unw_test_nofp_g2(c, x + 1);
	unw_test_nofp_sink = r;
	return r + 3;
}
