/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A collected task's why-members read from its table entry (taskwhy.h).
 */
#include <stddef.h>
#include <string.h>

#include "collect/taskwhy.h"
#include "table/wait.h"

/* Tasks queued in the execution queue at q (abi.h struct stb_abi_execq in the
 * target), read with mem: false when it cannot be read. The two counters are
 * read apart: a difference below zero (or absurd) is clamped to 0. */
static bool execq_queued(const struct stb_mem *mem, uint64_t q, uint64_t *queued)
{
	uint64_t pushed, taken;
	if (!mem || !q || (q & 63) ||
	    mem->read(mem->ctx, q + offsetof(struct stb_abi_execq, pushed), &pushed,
		      sizeof(pushed)) != 0 ||
	    mem->read(mem->ctx, q + offsetof(struct stb_abi_execq, taken), &taken,
		      sizeof(taken)) != 0)
		return false;
	*queued = pushed > taken ? pushed - taken : 0;
	return true;
}

void stb_report_task_why(struct stb_report_task *t, struct stb_report_more *more,
			 const struct stb_abi_task *p, const struct stb_abi_worker *w,
			 const struct stb_mem *mem, struct stb_wait_seen *seen)
{
	uint64_t word = __atomic_load_n(&p->word, __ATOMIC_ACQUIRE);
	t->since_ns = 0;
	more->run_since_ns = 0;
	if (stb_wait_read(p, &t->wait, seen)) {
		t->since_ns = seen->since_ns;
		uint64_t o;
		if (mem && stb_wait_has_owner_word(t->wait.kind) && t->wait.extra &&
		    !(t->wait.extra & 7) && mem->read(mem->ctx, t->wait.extra, &o, sizeof(o)) == 0)
			t->wait.owner = o; /* who holds it now */
	} else {
		seen->word = word;
		/* t->state as the worker entries say (a running bthread's word
		 * says READY: abi.h); w is the worker that names it. */
		if (t->state == STB_TASK_RUNNING && !t->is_pthread && w)
			more->run_since_ns = stb_wait_running_since(w, t->id, STB_ABI_SEQ(word));
	}
	stb_wait_creator(p, t->id, &t->creator);
	more->execq = stb_wait_execq(p, t->id);
	more->execq_queued_known = execq_queued(mem, more->execq, &more->execq_queued);
	more->wait_queued_known = t->wait.kind == STB_WAIT_EXECQ &&
				  execq_queued(mem, t->wait.object, &more->wait_queued);
}

void stb_report_task_why_recheck(struct stb_report_task *t, struct stb_report_more *more,
				 const struct stb_abi_task *p, const struct stb_wait_seen *seen)
{
	bool moved = __atomic_load_n(&p->word, __ATOMIC_ACQUIRE) != seen->word ||
		     (t->wait.kind != STB_WAIT_NONE && !stb_wait_current(p, &t->wait, seen));
	if (!moved)
		return;
	memset(&t->wait, 0, sizeof(t->wait));
	t->since_ns = 0;
	more->run_since_ns = 0;
	more->execq = 0;
	more->execq_queued_known = more->wait_queued_known = false;
}
