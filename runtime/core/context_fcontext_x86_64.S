/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bRPC's low-level context API (its bthread/context.h), for source
 * compatibility of code that switches stacks itself:
 *   bthread_fcontext_t bthread_make_fcontext(void *sp, size_t size, void (*fn)(intptr_t));
 *   intptr_t bthread_jump_fcontext(bthread_fcontext_t *ofc, bthread_fcontext_t nfc,
 *                                  intptr_t vp, bool preserve_fpu);
 * make_fcontext prepares, below sp (the top of a stack), a context that runs
 * fn(vp) when first jumped to; fn must not return (if it does, the process
 * exits). jump_fcontext saves the caller's context in *ofc and resumes nfc;
 * it returns vp of the jump that resumes the caller. The runtime itself
 * switches with stb_ctx_jump (context_x86_64.S), not with these.
 *
 * Frame (offsets from the saved context pointer): +0 MXCSR (4 bytes) and x87
 * control word (2 bytes, saved and restored only when preserve_fpu),
 * +8 r12, +16 r13, +24 r14, +32 r15, +40 rbx, +48 rbp, +56 return address.
 */

	.text

	.globl	bthread_jump_fcontext
	.type	bthread_jump_fcontext, @function
	.p2align 4
bthread_jump_fcontext:
	.cfi_startproc
	pushq	%rbp
	pushq	%rbx
	pushq	%r15
	pushq	%r14
	pushq	%r13
	pushq	%r12
	leaq	-8(%rsp), %rsp
	testb	%cl, %cl
	je	1f
	stmxcsr	(%rsp)
	fnstcw	4(%rsp)
1:
	movq	%rsp, (%rdi)
	movq	%rsi, %rsp
	testb	%cl, %cl
	je	2f
	ldmxcsr	(%rsp)
	fldcw	4(%rsp)
2:
	leaq	8(%rsp), %rsp
	popq	%r12
	popq	%r13
	popq	%r14
	popq	%r15
	popq	%rbx
	popq	%rbp
	popq	%r8
	movq	%rdx, %rax
	movq	%rdx, %rdi
	jmp	*%r8
	.cfi_endproc
	.size	bthread_jump_fcontext, .-bthread_jump_fcontext

	.globl	bthread_make_fcontext
	.type	bthread_make_fcontext, @function
	.p2align 4
bthread_make_fcontext:
	.cfi_startproc
	movq	%rdi, %rax
	andq	$-16, %rax
	leaq	-0x48(%rax), %rax
	movq	%rdx, 0x38(%rax)
	stmxcsr	(%rax)
	fnstcw	4(%rax)
	leaq	fcontext_finish(%rip), %rcx
	movq	%rcx, 0x40(%rax)
	ret
	.cfi_endproc
	.size	bthread_make_fcontext, .-bthread_make_fcontext

	/* fn returned: nothing to return to. */
	.type	fcontext_finish, @function
fcontext_finish:
	xorl	%edi, %edi
	call	_exit@PLT
	hlt
	.size	fcontext_finish, .-fcontext_finish

	.section .note.GNU-stack,"",@progbits
