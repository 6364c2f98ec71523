/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A thread's system call: where a thread blocked in one is (its number,
 * arguments, user sp and pc, as /proc/PID/task/TID/syscall shows them; no
 * ptrace stop), and the x86_64 system calls by number: their names and
 * which take a file descriptor first. The file is the kernel's, the process
 * may be hostile: every line is parsed within bounds.
 */
#ifndef STB_RUNTIME_STACKS_TABLE_SYSCALL_H
#define STB_RUNTIME_STACKS_TABLE_SYSCALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct stb_syscall_regs {
	int64_t nr;       /* the call's number (x86_64) */
	uint64_t args[6];
	uint64_t sp, pc;  /* the user stack pointer and the address after the call */
};

/*
 * Parses one line of /proc/PID/task/TID/syscall (len bytes, need not be
 * NUL-terminated). Returns 0 (*out filled: blocked in system call out->nr),
 * -EAGAIN (running, or blocked outside a system call: out->nr = -1 and its
 * sp/pc when the line gave them) or -EPROTO (not such a line). Pure.
 */
int stb_syscall_parse(const char *line, size_t len, struct stb_syscall_regs *out);

/*
 * Reads thread tid of process pid (pid <= 0: this process). Returns as
 * stb_syscall_parse, or -ESRCH (no such thread), -EACCES/-EPERM, -errno.
 * May block briefly (a /proc read). Thread-safe.
 */
int stb_syscall_read(int pid, int tid, struct stb_syscall_regs *out);

/* How much thread tid has run so far (/proc/PID/task/TID/schedstat). */
struct stb_syscall_ran {
	uint64_t ns;    /* on a CPU (its clock may not move over a short run) */
	uint64_t times; /* put on a CPU: moves with every run */
};

/*
 * How much thread tid of process pid (pid <= 0: this process) has run so
 * far, into *out: it changes only when the thread runs, so a thread seen in
 * the same call twice with the same counts did not leave it in between. 0,
 * -ESRCH (no such thread, or a kernel without the file), -EPROTO (not such
 * a line) or -errno. May block briefly (a /proc read). Thread-safe.
 */
int stb_syscall_ran(int pid, int tid, struct stb_syscall_ran *out);

/* The name of system call nr ("read"), NULL when unknown. Thread-safe. */
const char *stb_syscall_name(int64_t nr);

/* Is the first argument of system call nr a file descriptor? Thread-safe. */
bool stb_syscall_fd_first(int64_t nr);

/* Would a signal handler cut system call nr short, SA_RESTART or not
 * (signal(7): nanosleep, clock_nanosleep, epoll_wait, poll, select, pause,
 * sigsuspend, sigtimedwait, semop, msgrcv, io_getevents, ...: they fail with
 * EINTR)? A tracer that must not disturb the program reads such a call's
 * thread from /proc instead. Thread-safe. */
bool stb_syscall_cut_by_signal(int64_t nr);

/* "read(5)" (the fd of the calls that take one first), "futex", or
 * "syscall 999" into buf[size] (snprintf's contract). Thread-safe. */
size_t stb_syscall_format(char *buf, size_t size, int64_t nr, uint64_t arg0);

#endif /* STB_RUNTIME_STACKS_TABLE_SYSCALL_H */
