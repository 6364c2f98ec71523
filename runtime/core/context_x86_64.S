/* SPDX-License-Identifier: Apache-2.0 */
/*
 * x86_64 context switch of the bthread runtime and the first frame of every
 * bthread. Saves only what the SysV ABI says a callee must preserve.
 *
 * Frame pushed by stb_ctx_jump (offsets from the stack pointer after the
 * pushes; the published sp is that value + STB_CTX_FRAME):
 *    +0  MXCSR (4 bytes), x87 control word (2 bytes), 2 bytes padding
 *    +8  r15   +16 r14   +24 r13   +32 r12   +40 rbx   +48 rbp
 *   +56  return address into the caller of stb_ctx_jump
 * struct stb_ctx (rdi = from, rsi = to): +0 sp, +8 ip, +16 bp. rdx (pass)
 * comes back in rax on the resumed side: its stb_ctx_jump returns it, or its
 * trampoline hands it to the entry as second argument.
 * The CFI below stays valid on both stacks because both hold this frame.
 */
#include "context.h"

	.text

	.globl	stb_ctx_jump
	.hidden	stb_ctx_jump
	.type	stb_ctx_jump, @function
	.p2align 4
stb_ctx_jump:
	.cfi_startproc
	pushq	%rbp
	.cfi_adjust_cfa_offset 8
	.cfi_rel_offset %rbp, 0
	pushq	%rbx
	.cfi_adjust_cfa_offset 8
	.cfi_rel_offset %rbx, 0
	pushq	%r12
	.cfi_adjust_cfa_offset 8
	.cfi_rel_offset %r12, 0
	pushq	%r13
	.cfi_adjust_cfa_offset 8
	.cfi_rel_offset %r13, 0
	pushq	%r14
	.cfi_adjust_cfa_offset 8
	.cfi_rel_offset %r14, 0
	pushq	%r15
	.cfi_adjust_cfa_offset 8
	.cfi_rel_offset %r15, 0
	subq	$8, %rsp
	.cfi_adjust_cfa_offset 8
	stmxcsr	(%rsp)
	fnstcw	4(%rsp)

	/* Publish the context being left: sp after return, ip, bp. */
	leaq	STB_CTX_FRAME(%rsp), %rax
	movq	%rax, STB_CTX_SP(%rdi)
	movq	56(%rsp), %rax
	movq	%rax, STB_CTX_IP(%rdi)
	movq	%rbp, STB_CTX_BP(%rdi)

	/* Switch stacks in one instruction so the CFI is never wrong. */
	movq	STB_CTX_SP(%rsi), %rax
	leaq	-STB_CTX_FRAME(%rax), %rsp

	ldmxcsr	(%rsp)
	fldcw	4(%rsp)
	addq	$8, %rsp
	.cfi_adjust_cfa_offset -8
	popq	%r15
	.cfi_adjust_cfa_offset -8
	.cfi_restore %r15
	popq	%r14
	.cfi_adjust_cfa_offset -8
	.cfi_restore %r14
	popq	%r13
	.cfi_adjust_cfa_offset -8
	.cfi_restore %r13
	popq	%r12
	.cfi_adjust_cfa_offset -8
	.cfi_restore %r12
	popq	%rbx
	.cfi_adjust_cfa_offset -8
	.cfi_restore %rbx
	popq	%rbp
	.cfi_adjust_cfa_offset -8
	.cfi_restore %rbp
	movq	%rdx, %rax
	ret
	.cfi_endproc
	.size	stb_ctx_jump, .-stb_ctx_jump

/*
 * First frame of every bthread: stb_ctx_make() leaves entry in r12 and its
 * argument in r13 and makes the first jump "return" here with rsp 16-byte
 * aligned and the jump's pass value in rax: entry(arg, pass). rbp is 0 and the return address is undefined, so frame-pointer
 * walkers and DWARF unwinders both stop here.
 */
	.globl	stb_ctx_trampoline
	.hidden	stb_ctx_trampoline
	.type	stb_ctx_trampoline, @function
	.p2align 4
stb_ctx_trampoline:
	.cfi_startproc
	.cfi_undefined %rip
	xorl	%ebp, %ebp
	movq	%r13, %rdi
	movq	%rax, %rsi
	callq	*%r12
	ud2
	.cfi_endproc
	.size	stb_ctx_trampoline, .-stb_ctx_trampoline

	.section .note.GNU-stack, "", @progbits
