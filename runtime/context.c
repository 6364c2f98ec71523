/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Initial context of a bthread: the frame that the first stb_ctx_jump() to it
 * pops, laid out exactly like the frame the switch pushes (see context.h).
 */
#include "context.h"

void stb_ctx_trampoline(void);

#define STB_CTX_MXCSR_DEFAULT 0x1f80u /* all exceptions masked, round to nearest */
#define STB_CTX_X87CW_DEFAULT 0x037fu

void stb_ctx_make(struct stb_ctx *ctx, void *lo, size_t size, void (*entry)(void *), void *arg)
{
	/* sp is where rsp points after the first jump "returns" into the
	 * trampoline; it must be 16-byte aligned for the call it makes. */
	uint64_t sp = ((uint64_t)(uintptr_t)lo + size - 16) & ~(uint64_t)15;
	uint64_t *frame = (uint64_t *)(uintptr_t)(sp - STB_CTX_FRAME);
	frame[0] = STB_CTX_MXCSR_DEFAULT | ((uint64_t)STB_CTX_X87CW_DEFAULT << 32);
	frame[1] = 0;                               /* r15 */
	frame[2] = 0;                               /* r14 */
	frame[3] = (uint64_t)(uintptr_t)arg;        /* r13: entry's argument */
	frame[4] = (uint64_t)(uintptr_t)entry;      /* r12: entry */
	frame[5] = 0;                               /* rbx */
	frame[6] = 0;                               /* rbp: ends the frame chain */
	frame[7] = (uint64_t)(uintptr_t)stb_ctx_trampoline;
	ctx->sp = sp;
	ctx->ip = frame[7];
	ctx->bp = 0;
}
