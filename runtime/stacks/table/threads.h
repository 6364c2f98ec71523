/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The threads of a process as /proc shows them (no ptrace stop): their tids
 * and their names. For the thread section of every report: stb-bpf-loader's
 * target and this process alike. What /proc says is the kernel's, the names
 * the process's: escape them on output.
 */
#ifndef STB_RUNTIME_STACKS_TABLE_THREADS_H
#define STB_RUNTIME_STACKS_TABLE_THREADS_H

#include <stddef.h>
#include <stdint.h>

/*
 * The threads of process pid (pid <= 0: this one): up to max tids into
 * tids, in the order /proc lists them. Returns how many there are (more
 * than max: the rest was left out; at most 2^22 are counted), or -errno
 * (-ESRCH: no such process). May block briefly (/proc). Thread-safe.
 */
int stb_proc_threads(int pid, uint32_t *tids, unsigned max);

/*
 * Reads at most len bytes of /proc/PID/task/TID/<leaf> (pid <= 0: this
 * process) into buf, without a terminating NUL. Returns how many, or -errno
 * (-ESRCH: no such thread). May block briefly (/proc). Thread-safe.
 */
long stb_proc_task_read(int pid, uint32_t tid, const char *leaf, char *buf, size_t len);

/* Thread tid's name (/proc/PID/task/TID/comm) into name[len], without its
 * newline; "" when it cannot be read. Thread-safe. */
void stb_proc_thread_name(int pid, uint32_t tid, char *name, size_t len);

#endif /* STB_RUNTIME_STACKS_TABLE_THREADS_H */
