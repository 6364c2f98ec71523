/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Why a collected task is where it is: its why-members (report/model.h) read
 * from its table entry before it is traced -- wait block, owner now, since
 * when, creator, execution queue (table/wait.h) -- and dropped again when the entry says it
 * moved during the trace. Used by every collector of tasks.
 */
#ifndef STB_RUNTIME_STACKS_COLLECT_TASKWHY_H
#define STB_RUNTIME_STACKS_COLLECT_TASKWHY_H

#include "report/model.h"
#include "stb/abi.h"
#include "table/driver.h"

/*
 * Fills t's why-members -- wait, since_ns, creator; more's run_since_ns and
 * execq fields -- from entry p of task t->id (t->id and t->is_pthread set), read before the
 * task is traced: the wait block validated as abi.h says (wait.h); the
 * current owner of a mutex, rwlock or bthread_id, and the tasks queued in an
 * execution queue, re-read with mem (NULL: the owner seen when it blocked, no
 * queued count); for a running bthread the time since its last switch from
 * worker entry w (NULL: unknown). *seen: the words the recheck compares.
 * Reads only; thread-safe.
 */
void stb_report_task_why(struct stb_report_task *t, struct stb_report_more *more,
			 const struct stb_abi_task *p, const struct stb_abi_worker *w,
			 const struct stb_mem *mem, struct stb_wait_seen *seen);

/* After the trace: drops the wait and times of t (and more's) when its entry
 * p says that it moved since stb_report_task_why (seen: what that read; they
 * would not describe its stack). */
void stb_report_task_why_recheck(struct stb_report_task *t, struct stb_report_more *more,
				 const struct stb_abi_task *p, const struct stb_wait_seen *seen);

#endif /* STB_RUNTIME_STACKS_COLLECT_TASKWHY_H */
