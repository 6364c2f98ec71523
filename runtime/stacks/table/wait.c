/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading a task's wait block, creator and running time from the table
 * (wait.h), validated as abi.h says.
 */
#include <string.h>

#include "table/wait.h"

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define ACQUIRE(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)

static const char *const kind_names[STB_WAIT_NKINDS] = {
	[STB_WAIT_NONE] = "none",       [STB_WAIT_BUTEX] = "butex",
	[STB_WAIT_MUTEX] = "mutex",     [STB_WAIT_COND] = "cond",
	[STB_WAIT_RWLOCK_RD] = "rwlock-read", [STB_WAIT_RWLOCK_WR] = "rwlock-write",
	[STB_WAIT_SEM] = "sem",         [STB_WAIT_BARRIER] = "barrier",
	[STB_WAIT_ONCE] = "once",       [STB_WAIT_SLEEP] = "sleep",
	[STB_WAIT_FD] = "fd",           [STB_WAIT_JOIN] = "join",
	[STB_WAIT_ID] = "id",           [STB_WAIT_TIMER] = "timer",
	[STB_WAIT_YIELD] = "yield",     [STB_WAIT_COUNTDOWN] = "countdown",
	[STB_WAIT_EXECQ] = "execution-queue",
};

const char *stb_wait_kind_name(unsigned kind)
{
	return kind < STB_WAIT_NKINDS ? kind_names[kind] : "invalid";
}

bool stb_wait_has_owner_word(unsigned kind)
{
	return kind == STB_WAIT_MUTEX || kind == STB_WAIT_RWLOCK_RD || kind == STB_WAIT_RWLOCK_WR ||
	       kind == STB_WAIT_ID;
}

/* The fields of the block (no validation). Acquire loads (plain loads on x86):
 * the caller's re-read of the words cannot pass them, which is what validates
 * the copy (a fence would do, but TSan does not support fences). */
static void read_block(const struct stb_abi_task *p, struct stb_wait_view *w,
		       struct stb_wait_seen *seen)
{
	w->object = ACQUIRE(p->wait_object);
	w->owner = ACQUIRE(p->wait_owner);
	w->deadline = ACQUIRE(p->wait_deadline);
	w->extra = ACQUIRE(p->wait_extra);
	seen->since_ns = ACQUIRE(p->since_ns);
}

bool stb_wait_read(const struct stb_abi_task *p, struct stb_wait_view *w,
		   struct stb_wait_seen *seen)
{
	struct stb_wait_seen none;
	if (!seen)
		seen = &none;
	memset(w, 0, sizeof(*w));
	memset(seen, 0, sizeof(*seen));
	uint64_t w1 = ACQUIRE(p->word);
	uint32_t flags = LOAD(p->flags);
	unsigned st = STB_ABI_STATE(w1);
	/* A thread that blocks while it runs: a registered pthread (its word
	 * says RUNNING), or a bthread on its worker's stack (its word says
	 * READY_NO_STACK while a worker names it: abi.h). */
	bool thread = (flags & (STB_ABI_TASK_F_PTHREAD | STB_ABI_TASK_F_WORKER_STACK)) != 0;
	if (st != STB_TASK_SUSPENDED &&
	    !(thread && (st == STB_TASK_RUNNING || STB_ABI_RUNNABLE(st))))
		return false;
	uint64_t k1 = ACQUIRE(p->wait_word);
	read_block(p, w, seen);
	uint64_t k2 = LOAD(p->wait_word);
	uint64_t w2 = LOAD(p->word);
	unsigned kind = STB_ABI_WAIT_KIND(k1);
	if (w1 != w2 || k1 != k2 || kind == STB_WAIT_NONE || kind >= STB_WAIT_NKINDS) {
		memset(w, 0, sizeof(*w));
		memset(seen, 0, sizeof(*seen));
		return false;
	}
	w->kind = kind;
	w->flags = STB_ABI_WAIT_FLAGS(k1);
	if (kind == STB_WAIT_FD) {
		w->events = STB_ABI_WAIT_EVENTS(k1);
		w->fd = STB_ABI_WAIT_FD(k1);
	}
	if (!(w->flags & STB_ABI_WAIT_F_TIMED))
		w->deadline = 0;
	/* What the kind does not define is not shown. */
	if (!stb_wait_has_owner_word(kind) && kind != STB_WAIT_JOIN)
		w->owner = 0;
	if (!stb_wait_has_owner_word(kind) && kind != STB_WAIT_COND)
		w->extra = 0;
	seen->word = w1;
	seen->wait_word = k1;
	return true;
}

bool stb_wait_current(const struct stb_abi_task *p, const struct stb_wait_view *w,
		      const struct stb_wait_seen *seen)
{
	return w->kind != STB_WAIT_NONE && ACQUIRE(p->word) == seen->word &&
	       ACQUIRE(p->wait_word) == seen->wait_word;
}

bool stb_wait_creator(const struct stb_abi_task *p, uint64_t id, struct stb_creator *c)
{
	memset(c, 0, sizeof(*c));
	if (ACQUIRE(p->id) != id)
		return false;
	c->id = ACQUIRE(p->creator_id); /* acquire: the id's re-read stays after them */
	c->ip = ACQUIRE(p->creator_ip);
	c->tid = ACQUIRE(p->creator_tid);
	c->created_ns = ACQUIRE(p->created_ns);
	if (LOAD(p->id) != id || c->id == id) { /* reused meanwhile, or nonsense */
		memset(c, 0, sizeof(*c));
		return false;
	}
	return c->id || c->ip || c->tid || c->created_ns;
}

uint64_t stb_wait_execq(const struct stb_abi_task *p, uint64_t id)
{
	if (ACQUIRE(p->id) != id)
		return 0;
	uint64_t q = ACQUIRE(p->execq); /* acquire: the id's re-read stays after it */
	return LOAD(p->id) == id ? q : 0;
}

uint64_t stb_wait_running_since(const struct stb_abi_worker *w, uint64_t id, uint32_t seq)
{
	/* The monitor writes since = 0, seq, since (abi.h): the same non-zero
	 * since before and after seq is a matching pair. */
	uint64_t s1 = ACQUIRE(w->run_since_ns);
	uint32_t rs = ACQUIRE(w->run_seq);
	uint64_t cur = ACQUIRE(w->current);
	uint64_t s2 = ACQUIRE(w->run_since_ns);
	if (!s1 || s1 != s2 || rs != seq || cur != id)
		return 0;
	return s1;
}
