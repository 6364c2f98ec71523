/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which frames of a stack are the runtime's own: the switch and wait
 * internals above the API call a task is parked in (stb_jump_stack,
 * stb_sched_suspend, butex internals...) and the entry frames below its
 * function (stb_task_entry, stb_ctx_trampoline). Reports hide them by default
 * and never count them against a depth limit. Decided from symbol names.
 */
#ifndef STB_RUNTIME_STACKS_REPORT_RTFRAMES_H
#define STB_RUNTIME_STACKS_REPORT_RTFRAMES_H

#include <stdbool.h>

#include "stb/stb.h"

/* Innermost frames searched for the API call a runtime block ends at. */
#define STB_RTFRAMES_INNER_MAX 24u

/*
 * Of the symbolized frames f[0 .. n) (innermost first; inline frames, if
 * any, flagged STB_FRAME_F_INLINED before the frame they are part of),
 * *inner gets how many innermost frames are runtime internals and *outer
 * how many outermost ones are its entry frames (only when complete: the
 * walk reached the stack's base). The inner block is recognized only when
 * f[0] is a runtime function ("stb_" prefix; for an inline frame, the
 * function it is part of; for frames of the C library or the vdso, the
 * function that called them) and a public API frame (bthread_*, butex_*, bthread::, a
 * public stb_* function such as stb_countdown_wait) of the same module
 * follows within STB_RTFRAMES_INNER_MAX frames. Public frames right after it
 * (the public functions calling each other: bthread_sem_wait calling
 * bthread_sem_timedwait; a bthread:: wrapper in its caller's module) are
 * hidden too but the outermost, the call the user made: that frame and
 * everything beyond stay. Never hides every frame. Pure; thread-safe.
 */
void stb_rtframes_find(const struct stb_frame *f, unsigned n, bool complete, unsigned *inner,
		       unsigned *outer);

/*
 * Are the calls inlined into the function symbol (a frame's physical
 * function) the runtime's internals, hidden with its own frames? True for
 * the runtime's public functions, where a hidden block ends
 * (bthread_mutex_lock inlines mutex_timedlock), and for its stb_*
 * functions; false for NULL. Pure; thread-safe.
 */
bool stb_rtframes_inlines_hidden(const char *symbol);

#endif /* STB_RUNTIME_STACKS_REPORT_RTFRAMES_H */
