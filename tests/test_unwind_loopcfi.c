/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Functions with hostile CFI for test_unwind_hostile, emitted with the
 * assembler's CFI directives from <dwarf.h> constants (this file is built
 * with -fno-asynchronous-unwind-tables, so that the compiler's own CFI does
 * not enclose them, and -g0, so that the assembler writes .eh_frame):
 *   unw_test_loopcfi: DW_CFA_def_cfa_expression { DW_OP_skip -3 }, an
 *     expression that jumps back onto itself forever;
 *   unw_test_bigcfi: DW_CFA_offset_extended_sf with an offset whose product
 *     with the data alignment factor overflows 64 bits.
 */
#include <dwarf.h>

void unw_test_emit_cfi(void);

void unw_test_emit_cfi(void)
{
	__asm__ volatile(
	    ".pushsection .text.unw_test_cfi,\"ax\",@progbits\n\t"
	    ".globl unw_test_loopcfi\n\t"
	    ".type unw_test_loopcfi,@function\n"
	    "unw_test_loopcfi:\n\t"
	    ".cfi_startproc\n\t"
	    ".cfi_escape %c0, 3, %c1, 0xfd, 0xff\n\t"
	    "nop\n\t"
	    "nop\n\t"
	    "ret\n\t"
	    ".cfi_endproc\n\t"
	    ".size unw_test_loopcfi, .-unw_test_loopcfi\n\t"
	    ".globl unw_test_bigcfi\n\t"
	    ".type unw_test_bigcfi,@function\n"
	    "unw_test_bigcfi:\n\t"
	    ".cfi_startproc\n\t"
	    ".cfi_escape %c2, 3, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f\n\t"
	    "nop\n\t"
	    "nop\n\t"
	    "ret\n\t"
	    ".cfi_endproc\n\t"
	    ".size unw_test_bigcfi, .-unw_test_bigcfi\n\t"
	    ".popsection"
	    :
	    : "i"(DW_CFA_def_cfa_expression), "i"(DW_OP_skip), "i"(DW_CFA_offset_extended_sf));
}
