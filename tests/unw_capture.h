/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests that unwind their own stacks: capture the exact register state at
 * one instruction into a struct stb_regs (ip, rsp, rbp, rbx, r12..r15).
 */
#ifndef STB_TESTS_UNW_CAPTURE_H
#define STB_TESTS_UNW_CAPTURE_H

#include <stddef.h>

#include "unwind/unwind.h"

/* Stores ip (of the instruction after the lea), rsp, rbp, rbx, r12..r15 into
 * the struct stb_regs at r: the exact register state at that ip. */
#define UNW_TEST_CAPTURE(r)                                                                     \
	__asm__ volatile("lea 0(%%rip), %%rax\n\t"                                              \
			 "mov %%rax, 0(%0)\n\t"                                                 \
			 "mov %%rsp, 8(%0)\n\t"                                                 \
			 "mov %%rbp, 16(%0)\n\t"                                                \
			 "mov %%rbx, 24(%0)\n\t"                                                \
			 "mov %%r12, 32(%0)\n\t"                                                \
			 "mov %%r13, 40(%0)\n\t"                                                \
			 "mov %%r14, 48(%0)\n\t"                                                \
			 "mov %%r15, 56(%0)\n\t"                                                \
			 :                                                                      \
			 : "r"(r)                                                               \
			 : "rax", "memory")

_Static_assert(offsetof(struct stb_regs, r15) == 56, "capture layout");

#endif /* STB_TESTS_UNW_CAPTURE_H */
