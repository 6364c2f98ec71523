/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Stacks of running tasks that are not on a CPU: a bthread (or registered
 * pthread) blocked in a system call on its thread. The BPF program never sees
 * them run, so their user registers come from /proc/PID/task/TID/syscall (no
 * ptrace stop) and the frame pointer is recovered from the stack.
 */
#ifndef STB_LOADER_INSYSCALL_H
#define STB_LOADER_INSYSCALL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stb/stb.h"
#include "table/driver.h"
#include "target.h"
#include "unwind/unwind.h"

/*
 * Reads where thread tid of the target is blocked (system call number, sp,
 * pc) and copies its stack [sp - 128, stack_hi) (at most cap bytes) into buf.
 * The thread must stay blocked in the same call for the whole read (checked).
 * Returns 0 with regs (ip = pc, sp; bp unknown = 0) and copy filled and *nr
 * set; -EAGAIN when the thread is running or moved; -errno otherwise.
 */
int stb_insyscall_read(struct stb_target *tg, pid_t tid, uint64_t stack_hi, void *buf, size_t cap,
		    struct stb_regs *regs, struct stb_stack_copy *copy, long *nr);

/*
 * Unwinds such a capture (stb_capture_unwind_fn; ctx: the struct
 * stb_target): DWARF as far as it goes without the frame pointer, then the
 * frame-pointer chain found by scanning the copy above the last DWARF frame
 * for a saved rbp / return address pair (frames with how = STB_FRAME_FP; a
 * record whose return address follows a direct call to the last frame's
 * function is preferred). Returns the number of frames delivered or -errno.
 */
int stb_insyscall_unwind(void *tg, struct stb_unw_proc *unw, const struct stb_capture *s,
			 unsigned max, stb_unw_frame_fn fn, void *arg);

#endif /* STB_LOADER_INSYSCALL_H */
