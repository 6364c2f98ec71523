/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The x86_64 context switch: the saved-register layout shared by the assembly
 * in context_x86_64.S, the C side and (through include/stb/abi.h) the tracers.
 */
#ifndef STB_RUNTIME_CORE_CONTEXT_H
#define STB_RUNTIME_CORE_CONTEXT_H

/* Offsets in struct stb_ctx (used by the assembly). */
#define STB_CTX_SP 0
#define STB_CTX_IP 8
#define STB_CTX_BP 16
/* Bytes the switch pushes: mxcsr+x87cw (8), r15, r14, r13, r12, rbx, rbp, ret. */
#define STB_CTX_FRAME 64

#ifndef __ASSEMBLER__
#include <stddef.h>
#include <stdint.h>

#include "stb/abi.h"

/*
 * A saved context. sp is the stack pointer the switch function will have
 * after it returns into the resumed code; ip is that return address and bp the
 * resumed code's frame pointer. The callee-saved registers sit just below sp
 * (see the frame layout in include/stb/abi.h).
 */
struct stb_ctx {
	uint64_t sp;
	uint64_t ip;
	uint64_t bp;
};

_Static_assert(offsetof(struct stb_ctx, sp) == STB_CTX_SP, "asm layout");
_Static_assert(offsetof(struct stb_ctx, ip) == STB_CTX_IP, "asm layout");
_Static_assert(offsetof(struct stb_ctx, bp) == STB_CTX_BP, "asm layout");
/* The assembly pushes exactly struct stb_abi_switch_frame (include/stb/abi.h). */
_Static_assert(STB_CTX_FRAME == STB_ABI_SWITCH_FRAME, "asm layout");
_Static_assert(sizeof(struct stb_abi_switch_frame) == STB_CTX_FRAME, "asm layout");
_Static_assert(offsetof(struct stb_abi_switch_frame, ret) == 56, "asm layout: the return address");
_Static_assert(offsetof(struct stb_abi_switch_frame, rbp) == 48, "asm layout: rbp pushed first");
/* The published registers of a task are a struct stb_ctx inside its entry. */
_Static_assert(offsetof(struct stb_abi_task, ip) - offsetof(struct stb_abi_task, sp) == STB_CTX_IP,
	       "abi layout");
_Static_assert(offsetof(struct stb_abi_task, bp) - offsetof(struct stb_abi_task, sp) == STB_CTX_BP,
	       "abi layout");

/*
 * Saves the current context into *from and resumes *to, handing it pass: the
 * resumed stb_ctx_jump returns it (a first jump gives it to the entry). Returns,
 * with the pass of that jump, when some other context jumps back to *from.
 * Never called directly except by stb_jump_stack() (runtime/core/sched.c), the
 * single switching point.
 */
void *stb_ctx_jump(struct stb_ctx *from, const struct stb_ctx *to, void *pass);

/*
 * Prepares *ctx so that jumping to it runs entry(arg, pass) on the stack
 * [lo, lo + size) with rbp = 0 and no return address, pass being the value of
 * that first jump: the first frame of a bthread ends the frame chain. entry
 * must not return.
 */
void stb_ctx_make(struct stb_ctx *ctx, void *lo, size_t size, void (*entry)(void *, void *),
		  void *arg);

#endif /* !__ASSEMBLER__ */
#endif /* STB_RUNTIME_CORE_CONTEXT_H */
