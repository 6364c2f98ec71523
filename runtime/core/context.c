/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Initial context of a bthread: the frame that the first stb_ctx_jump() to it
 * pops, laid out exactly like the frame the switch pushes (see context.h).
 */
#include "context.h"

void stb_ctx_trampoline(void);

#define STB_CTX_MXCSR_DEFAULT 0x1f80u /* all exceptions masked, round to nearest */
#define STB_CTX_X87CW_DEFAULT 0x037fu

void stb_ctx_make(struct stb_ctx *ctx, void *lo, size_t size, void (*entry)(void *, void *),
		  void *arg)
{
	/* sp is where rsp points after the first jump "returns" into the
	 * trampoline; it must be 16-byte aligned for the call it makes. */
	uint64_t sp = ((uint64_t)(uintptr_t)lo + size - 16) & ~(uint64_t)15;
	struct stb_abi_switch_frame *frame =
		(struct stb_abi_switch_frame *)(uintptr_t)(sp - STB_CTX_FRAME);
	frame->mxcsr = STB_CTX_MXCSR_DEFAULT;
	frame->x87cw = STB_CTX_X87CW_DEFAULT;
	frame->pad = 0;
	frame->r15 = 0;
	frame->r14 = 0;
	frame->r13 = (uint64_t)(uintptr_t)arg;   /* entry's argument */
	frame->r12 = (uint64_t)(uintptr_t)entry; /* entry */
	frame->rbx = 0;
	frame->rbp = 0;                          /* ends the frame chain */
	frame->ret = (uint64_t)(uintptr_t)stb_ctx_trampoline;
	ctx->sp = sp;
	ctx->ip = frame->ret;
	ctx->bp = 0;
}
