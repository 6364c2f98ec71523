/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Stacks of running tasks and threads that are not on a CPU: blocked in a
 * system call on their thread. Neither the BPF program nor a signal needs to
 * reach them (a signal would interrupt the call: sleep() and epoll_wait()
 * return early), so their user registers come from
 * /proc/PID/task/TID/syscall (no ptrace stop), their stack is copied with
 * the target's memory backend while the call still blocks, and the frame
 * pointer is recovered from the stack. For stb-bpf-loader and the
 * in-process tracer alike.
 */
#ifndef STB_RUNTIME_STACKS_TABLE_INSYSCALL_H
#define STB_RUNTIME_STACKS_TABLE_INSYSCALL_H

#include <stddef.h>
#include <stdint.h>

#include "table/driver.h"
#include "table/syscall.h"
#include "unwind/unwind.h"

/*
 * Captures thread tid of process pid (pid <= 0: this process) while it is
 * blocked in a system call: reads the call (number, arguments, sp, pc),
 * checks that sp is in the task's stack [stack_lo, stack_hi) (else the
 * thread runs other code: its scheduler, a signal stack),
 * copies its stack [sp - 128, stack_hi) (at most cap bytes) into buf with
 * mem->read, and reads the call again: the thread must have stayed in the
 * same call for the whole copy, and not have run meanwhile (its counts of
 * stb_syscall_ran, where the kernel keeps them: it may have left the call
 * and come back to the same sp and pc with other frames above). stack_hi
 * 0: the stack's top is not known (a thread that is not a task): up to cap
 * bytes, as far as mem can read.
 * The caller checks afterwards that the task still runs there (the same
 * run, named by the same worker): the call may be its thread's after the
 * task has left it.
 * Returns 0 with capt filled (mode STB_TRACE_SYSCALL, regs: ip = pc, sp, bp
 * unknown; copy; in_syscall, syscall_nr, syscall_arg0; tid; unwind with
 * ctx mem, which must outlive the unwinding), -EAGAIN when the thread is
 * running (not this way), -EBUSY when it left the call during the copy (try
 * again), -ESRCH when there is no such thread, -errno otherwise.
 * Reads only; may block briefly (/proc reads). Thread-safe for distinct
 * buffers.
 */
int stb_insyscall_capture(const struct stb_mem *mem, int pid, int tid, uint64_t stack_lo,
			  uint64_t stack_hi, void *buf, size_t cap, struct stb_capture *capt);

/*
 * Unwinds such a capture (stb_capture_unwind_fn; ctx: the struct stb_mem
 * the target's code is read with): DWARF as far as it goes without the
 * frame pointer, then the frame-pointer chain found by scanning the copy
 * above the last DWARF frame for a saved rbp / return address pair (frames
 * with how = STB_FRAME_FP; a record whose return address follows a direct
 * call to the last frame's function is preferred). Returns the number of
 * frames delivered or -errno.
 */
int stb_insyscall_unwind(void *mem, struct stb_unw_proc *unw, const struct stb_capture *s,
			 unsigned max, stb_unw_frame_fn fn, void *arg);

#endif /* STB_RUNTIME_STACKS_TABLE_INSYSCALL_H */
