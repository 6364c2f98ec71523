/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading a task table that may be corrupt (tview.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "table/tview.h"
#include "util.h"

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

int stb_tview_check_header(const struct stb_abi_header *h, uint64_t real_size,
			   struct stb_tview_info *info, char *why, size_t len)
{
	memset(info, 0, sizeof(*info));
	if (h->magic != STB_ABI_MAGIC) {
		snprintf(why, len, "no stb magic in the table header");
		return -ENOENT;
	}
	const char *field = NULL;
	uint64_t got = 0, want = 0;
	if (h->abi_version != STB_ABI_VERSION)
		field = "ABI version", got = h->abi_version, want = STB_ABI_VERSION;
	else if (h->entry_size != STB_ABI_ENTRY_SIZE)
		field = "entry size", got = h->entry_size, want = STB_ABI_ENTRY_SIZE;
	else if (h->header_entries != STB_ABI_HEADER_ENTRIES)
		field = "header entries", got = h->header_entries, want = STB_ABI_HEADER_ENTRIES;
	else if (h->max_workers != STB_ABI_MAX_WORKERS)
		field = "max workers", got = h->max_workers, want = STB_ABI_MAX_WORKERS;
	if (field) {
		snprintf(why, len, "table %s %" PRIu64 "; this reader understands %s %" PRIu64,
			 field, got, field, want);
		return -EPROTO;
	}
	uint32_t cap = h->task_capacity;
	if (cap == 0 || cap > STB_ABI_MAX_CAPACITY) {
		snprintf(why, len, "table capacity %u is not in 1..%u", cap, STB_ABI_MAX_CAPACITY);
		return -EPROTO;
	}
	if (h->table_size != STB_ABI_TABLE_SIZE(cap)) {
		snprintf(why, len,
			 "table size %" PRIu64 " does not match its capacity %u (%" PRIu64
			 " bytes)",
			 (uint64_t)h->table_size, cap, (uint64_t)STB_ABI_TABLE_SIZE(cap));
		return -EPROTO;
	}
	if (real_size && real_size < STB_ABI_TABLE_SIZE(cap)) {
		snprintf(why, len,
			 "the table's backing holds %" PRIu64 " bytes, its header claims %" PRIu64,
			 real_size, (uint64_t)STB_ABI_TABLE_SIZE(cap));
		return -EPROTO;
	}
	if (h->backing != STB_ABI_BACKING_BPF_MAP && h->backing != STB_ABI_BACKING_MEMFD) {
		snprintf(why, len, "unknown table backing %u", h->backing);
		return -EPROTO;
	}
	info->abi_version = h->abi_version;
	info->capacity = cap;
	info->backing = h->backing;
	info->pid = h->pid;
	info->table_addr = h->table_addr;
	info->table_size = h->table_size;
	info->trace_signal = h->trace_signal;
	info->flags = h->flags;
	return 0;
}

uint32_t stb_tview_hwm(const struct stb_abi_header *h, const struct stb_tview_info *info,
		       bool *clamped)
{
	uint64_t hwm = __atomic_load_n(&h->slot_hwm, __ATOMIC_ACQUIRE);
	bool over = hwm > info->capacity;
	if (clamped)
		*clamped = over;
	return over ? info->capacity : (uint32_t)hwm;
}

uint32_t stb_tview_nworkers(const struct stb_abi_header *h, bool *clamped)
{
	uint32_t n = __atomic_load_n(&h->nworkers, __ATOMIC_ACQUIRE);
	bool over = n > STB_ABI_MAX_WORKERS;
	if (clamped)
		*clamped = over;
	return over ? STB_ABI_MAX_WORKERS : n;
}

void stb_tview_workers_read(const struct stb_tview_wsrc *src, struct stb_tview_workers *ws)
{
	uint32_t n = src->w ? (src->hdr ? stb_tview_nworkers(src->hdr, NULL) : src->n) : 0;
	ws->n = n < STB_ABI_MAX_WORKERS ? n : STB_ABI_MAX_WORKERS;
	for (uint32_t i = 0; i < ws->n; i++) {
		ws->cur[i] = __atomic_load_n(&src->w[i].current, __ATOMIC_ACQUIRE);
		ws->tid[i] = LOAD(src->w[i].tid);
	}
}

/* How current c names id (see stb_tview_named). */
static unsigned naming(uint64_t c, uint64_t id)
{
	if (c == id)
		return STB_TASK_RUNNING;
	return STB_ABI_CURRENT_IS_SWITCHING(c) && STB_ABI_CURRENT_ID(c) == id
		       ? STB_TASK_ABOUT_TO_RUN
		       : STB_TASK_UNUSED;
}

unsigned stb_tview_named(const struct stb_tview_workers *ws, uint64_t id, uint32_t *worker)
{
	/* id 0 and ids with the switching bit are never a task's (abi.h). */
	if (!ws || !id || STB_ABI_CURRENT_IS_SWITCHING(id))
		return STB_TASK_UNUSED;
	for (uint32_t i = 0; i < ws->n && i < STB_ABI_MAX_WORKERS; i++) {
		unsigned how = naming(ws->cur[i], id);
		if (how != STB_TASK_UNUSED) {
			if (worker)
				*worker = i;
			return how;
		}
	}
	return STB_TASK_UNUSED;
}

unsigned stb_tview_named_now(const struct stb_tview_wsrc *src, uint64_t id, uint32_t *worker)
{
	if (!src || !src->w || !id || STB_ABI_CURRENT_IS_SWITCHING(id))
		return STB_TASK_UNUSED;
	/* The count first: a worker is counted before it can name a task. */
	uint32_t n = src->hdr ? stb_tview_nworkers(src->hdr, NULL) : src->n;
	if (n > STB_ABI_MAX_WORKERS)
		n = STB_ABI_MAX_WORKERS;
	for (uint32_t i = 0; i < n; i++) {
		unsigned how = naming(__atomic_load_n(&src->w[i].current, __ATOMIC_ACQUIRE), id);
		if (how != STB_TASK_UNUSED) {
			if (worker)
				*worker = i;
			return how;
		}
	}
	return STB_TASK_UNUSED;
}

/* stb_tview_read_task with ws, or when ws is NULL the live entries of src. */
static void read_task(const struct stb_tview_workers *ws, const struct stb_tview_wsrc *src,
		      const struct stb_abi_task *p, struct stb_tview_task *v)
{
	v->word = __atomic_load_n(&p->word, __ATOMIC_ACQUIRE);
	v->id = LOAD(p->id);
	v->state = STB_ABI_STATE(v->word);
	v->seq = STB_ABI_SEQ(v->word);
	v->flags = LOAD(p->flags);
	v->worker = LOAD(p->worker);
	v->tid = LOAD(p->tid);
	v->tag = LOAD(p->tag);
	v->since_ns = LOAD(p->since_ns);
	v->stack_lo = LOAD(p->stack_lo);
	v->stack_hi = LOAD(p->stack_hi);
	v->wait_word = LOAD(p->wait_word);
	v->wait_object = LOAD(p->wait_object);
	v->wait_owner = LOAD(p->wait_owner);
	v->wait_deadline = LOAD(p->wait_deadline);
	v->wait_extra = LOAD(p->wait_extra);
	v->creator_id = LOAD(p->creator_id);
	v->creator_ip = LOAD(p->creator_ip);
	v->creator_tid = LOAD(p->creator_tid);
	v->bad = 0;
	/* The name: the target may rewrite it while it is copied. */
	for (unsigned i = 0; i < STB_ABI_NAME_LEN; i++)
		v->name[i] = LOAD(p->name[i]);
	if (!memchr(v->name, '\0', sizeof(v->name)))
		v->bad |= STB_TVIEW_BAD_NAME;
	v->name[sizeof(v->name) - 1] = '\0';
	if (v->state >= STB_TASK_NSTATES)
		v->bad |= STB_TVIEW_BAD_STATE;
	v->wait_kind = STB_ABI_WAIT_KIND(v->wait_word);
	if (v->wait_kind >= STB_WAIT_NKINDS) {
		v->bad |= STB_TVIEW_BAD_KIND;
		v->wait_kind = STB_WAIT_NONE;
	}
	if (!(v->flags & STB_ABI_TASK_F_PTHREAD)) {
		/* Where a bthread runs is what a worker entry says, never its own. */
		uint32_t w = STB_ABI_MAX_WORKERS;
		unsigned how = STB_TASK_UNUSED;
		if (STB_ABI_RUNNABLE(v->state))
			how = ws ? stb_tview_named(ws, v->id, &w) : stb_tview_named_now(src, v->id, &w);
		if (how != STB_TASK_UNUSED)
			v->state = how;
		else if (v->state == STB_TASK_RUNNING || v->state == STB_TASK_ABOUT_TO_RUN)
			v->bad |= STB_TVIEW_BAD_WORKER;
		v->worker = w;
		v->tid = 0;
		if (w < STB_ABI_MAX_WORKERS)
			v->tid = ws ? ws->tid[w] : LOAD(src->w[w].tid);
	}
	if (v->state >= STB_TASK_READY && v->state < STB_TASK_DESTROYED &&
	    v->stack_lo >= v->stack_hi)
		v->bad |= STB_TVIEW_BAD_STACK;
}

void stb_tview_read_task(const struct stb_tview_workers *ws, const struct stb_abi_task *p,
			 struct stb_tview_task *v)
{
	static const struct stb_tview_wsrc none;
	read_task(ws, ws ? NULL : &none, p, v);
}

void stb_tview_read_task_now(const struct stb_tview_wsrc *src, const struct stb_abi_task *p,
			     struct stb_tview_task *v)
{
	read_task(NULL, src, p, v);
}

bool stb_tview_live(const struct stb_tview_task *v)
{
	return v->id != 0 && v->state != STB_TASK_UNUSED && v->state != STB_TASK_DESTROYED;
}

struct stb_abi_task *stb_tview_at(const struct stb_tview_src *src, uint32_t slot)
{
	uint32_t next = slot + 1;
	return src->entry(src->ctx, slot, &next);
}

struct stb_abi_task *stb_tview_next(const struct stb_tview_src *src, uint32_t *slot)
{
	while (*slot < src->nslots) {
		uint32_t next = *slot + 1;
		struct stb_abi_task *p = src->entry(src->ctx, *slot, &next);
		if (p)
			return p;
		*slot = next > *slot ? next : *slot + 1;
	}
	return NULL;
}

int stb_tview_scan(const struct stb_tview_src *src, unsigned state_mask, uint64_t deadline,
		   stb_tview_scan_fn fn, void *arg, struct stb_tview_scan_result *r)
{
	memset(r, 0, sizeof(*r));
	bool past = false;
	struct stb_abi_task *p;
	/* The workers first: a task read after them that none named was not
	 * running when they were read, or has started since (abi.h). Without
	 * memory for that, each task's workers are read after it (the same
	 * answer, slower). */
	struct stb_tview_workers *ws = malloc(sizeof(*ws));
	if (ws)
		stb_tview_workers_read(&src->workers, ws);
	for (uint32_t cur = 0; (p = stb_tview_next(src, &cur)); cur++) {
		struct stb_tview_task v;
		read_task(ws, &src->workers, p, &v);
		if (!stb_tview_live(&v))
			continue;
		bool invalid = (v.bad & STB_TVIEW_BAD_STATE) != 0;
		r->invalid += invalid;
		if (!invalid) {
			r->census.by_state[v.state]++;
			r->census.pthreads += (v.flags & STB_ABI_TASK_F_PTHREAD) != 0;
		}
		if (!fn || (state_mask && (invalid || !(state_mask & (1u << v.state)))))
			continue;
		/* The clock before every 16th call: fn is quick past the deadline
		 * (every trace it starts has one), so the scan ends soon after. */
		if (!past && deadline && (r->visited & 15) == 0 && stb_now_ns() >= deadline)
			past = true;
		if (past) {
			r->left++;
			continue;
		}
		r->visited++;
		if (fn(arg, cur, p, &v)) {
			r->stopped = true;
			break;
		}
	}
	free(ws);
	return 0;
}
