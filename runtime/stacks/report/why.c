/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Why each task is where it is, as a report writes it (why.h): times in a
 * state, wait clauses naming owners, "created by", group summaries and
 * deadlocks, in text and JSON. The why-members themselves are read from the
 * table by the collector (collect/taskwhy.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "encode/escape.h"
#include "encode/json.h"
#include "report/why.h"
#include "symbols/symbolize.h"
#include "table/deadlock.h"
#include "table/syscall.h"
#include "util.h"

#define STB_WHY_GROUP_IDS 10u /* ids of a group shown before "and N more" */
#define STB_WHY_COLUMNS 100u  /* the "ids" lines of a group fit this width */
#define STB_WHY_HOLDS_SHOWN 8u /* "holds" lines of a task or group before "and N more" */

/* ---- the writers' context ---- */

static int by_id(const void *x, const void *y)
{
	const struct stb_report_task *a = *(struct stb_report_task *const *)x;
	const struct stb_report_task *b = *(struct stb_report_task *const *)y;
	return a->id < b->id ? -1 : a->id > b->id;
}

void stb_why_init(struct stb_why *w, const struct stb_report *r, struct stb_report_task *tasks,
		  size_t n)
{
	memset(w, 0, sizeof(*w));
	w->r = r;
	struct timespec res;
	w->tick_ns = clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0
			     ? (uint64_t)res.tv_sec * 1000000000u + (uint64_t)res.tv_nsec
			     : 4000000u;
	bool sorted = true;
	for (size_t i = 1; i < n && sorted; i++)
		sorted = tasks[i - 1].id < tasks[i].id;
	if (sorted) {
		w->sorted = tasks;
		w->n = n;
		return;
	}
	if (!(w->byid = malloc(n * sizeof(*w->byid))))
		return;
	for (size_t i = 0; i < n; i++)
		w->byid[i] = &tasks[i];
	qsort(w->byid, n, sizeof(*w->byid), by_id);
	w->n = n;
}

void stb_why_fini(struct stb_why *w)
{
	free(w->byid);
	w->byid = NULL;
}

struct stb_report_task *stb_why_find(const struct stb_why *w, uint64_t id)
{
	size_t lo = 0, hi = w->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		struct stb_report_task *t = w->byid ? w->byid[mid] : &w->sorted[mid];
		if (t->id == id)
			return t;
		if (t->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The ref of id in r's refs, or NULL. */
static const struct stb_report_ref *find_ref(const struct stb_report *r, uint64_t id)
{
	size_t lo = 0, hi = r->refs ? r->nrefs : 0;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (r->refs[mid].id == id)
			return &r->refs[mid];
		if (r->refs[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

bool stb_why_in_state_ns(const struct stb_why *w, const struct stb_report_task *t, uint64_t *ns)
{
	uint64_t since = stb_report_since_ns(t);
	if (!since || !w->r->now_ns) /* now_ns 0: the time of the report is not known */
		return false;
	*ns = w->r->now_ns > since ? w->r->now_ns - since : 0;
	return true;
}

/* ---- text ---- */

/* A duration for people: "<4 ms" under the clock's tick, never nothing. */
static void fmt_dur(char *buf, size_t size, uint64_t ns, uint64_t tick)
{
	if (ns < tick || ns < 1000000u)
		snprintf(buf, size, "<%" PRIu64 " ms", tick > 1000000u ? (tick + 999999u) / 1000000u : 1);
	else if (ns < 1000000000u)
		snprintf(buf, size, "%" PRIu64 " ms", ns / 1000000u);
	else if (ns < 100ull * 1000000000u)
		snprintf(buf, size, "%.1f s", (double)ns / 1e9);
	else if (ns < 3600ull * 1000000000u)
		snprintf(buf, size, "%.1f min", (double)ns / 60e9);
	else
		snprintf(buf, size, "%.1f h", (double)ns / 3600e9);
}

static const char *kind_word(const struct stb_report_task *t)
{
	return t->is_thread ? "thread" : t->is_pthread ? "pthread" : "bthread";
}

static void put_name(FILE *out, const char *name)
{
	if (!name[0])
		return;
	fputs(" \"", out);
	stb_text_put(out, name);
	fputc('"', out);
}

/* "in system call read(5)" (one_arg: with its fd), "starting" (a thread of a
 * core not run yet) or the state's name. */
static void put_state(FILE *out, const struct stb_report_task *t, bool one_arg)
{
	if (t->starting) {
		fputs("starting: created, not run yet", out);
	} else if (t->in_syscall) {
		char call[64];
		const struct stb_report_more *m = stb_report_more(t);
		stb_syscall_format(call, sizeof(call), m->syscall_nr, one_arg ? m->syscall_arg0 : 0);
		if (!one_arg && stb_syscall_name(m->syscall_nr))
			snprintf(call, sizeof(call), "%s", stb_syscall_name(m->syscall_nr));
		fprintf(out, "in system call %s", call);
	} else {
		fputs(stb_state_name(t->state), out);
	}
}

void stb_why_text_bracket(const struct stb_why *w, const struct stb_report_task *t)
{
	FILE *out = w->r->out;
	char d[32];
	uint64_t ns = 0;
	bool known = stb_why_in_state_ns(w, t, &ns);
	bool thread_wait = t->state == STB_TASK_RUNNING && t->wait.kind != STB_WAIT_NONE;
	fputs(" [", out);
	put_state(out, t, true);
	if (known && !thread_wait) {
		fmt_dur(d, sizeof(d), ns, w->tick_ns);
		fprintf(out, ", %s", d);
	}
	/* A bthread pinning its worker in a system call names the thread in
	 * its "blocks worker" clause. */
	if (t->tid && (t->state == STB_TASK_RUNNING || t->is_pthread) &&
	    !(t->in_syscall && t->on_worker))
		fprintf(out, ", tid %u", t->tid);
	if (known && thread_wait) {
		fmt_dur(d, sizeof(d), ns, w->tick_ns);
		fprintf(out, ", blocked %s", d);
	}
	fputc(']', out);
}

/* " bthread 9 "acceptor"": task id, named from the report's tasks or refs
 * (the table's); with_state: and its bracket, when it is in the report. */
static void put_task(const struct stb_why *w, uint64_t id, bool with_state)
{
	FILE *out = w->r->out;
	const struct stb_report_task *o = stb_why_find(w, id);
	const struct stb_report_ref *ref = o ? NULL : find_ref(w->r, id);
	fprintf(out, " %s %" PRIu64,
		o ? kind_word(o) : ref && ref->is_pthread ? "pthread" : "bthread", id);
	if (o || ref)
		put_name(out, o ? stb_report_task_name(o) : ref->name);
	if (o && with_state)
		stb_why_text_bracket(w, o);
}

/* " held by bthread 101 "db" [suspended, 5.3 s]" (verb NULL: none) */
static void put_owner(const struct stb_why *w, uint64_t owner, const char *verb)
{
	FILE *out = w->r->out;
	if (!owner)
		return;
	if (verb)
		fprintf(out, " %s", verb);
	if (STB_ABI_OWNER_IS_TID(owner)) {
		fprintf(out, " pthread tid %u", STB_ABI_OWNER_TID_OF(owner));
		return;
	}
	put_task(w, owner, true);
}

/* "EPOLLIN|EPOLLOUT" */
static void fmt_events(char *buf, size_t size, uint32_t ev)
{
	static const struct { uint32_t bit; const char *name; } names[] = {
		{0x1, "EPOLLIN"},      {0x2, "EPOLLPRI"},     {0x4, "EPOLLOUT"},
		{0x8, "EPOLLERR"},     {0x10, "EPOLLHUP"},    {0x40, "EPOLLRDNORM"},
		{0x80, "EPOLLRDBAND"}, {0x100, "EPOLLWRNORM"}, {0x200, "EPOLLWRBAND"},
		{0x400, "EPOLLMSG"},   {0x2000, "EPOLLRDHUP"},
	};
	size_t k = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!(ev & names[i].bit))
			continue;
		ev &= ~names[i].bit;
		k += (size_t)snprintf(buf + k, k < size ? size - k : 0, "%s%s", k ? "|" : "",
				      names[i].name);
	}
	if (ev || !k)
		snprintf(buf + k, k < size ? size - k : 0, "%s0x%x", k ? "|" : "", ev);
}

/* The object noun of a kind in text. */
static const char *kind_noun(unsigned kind)
{
	switch (kind) {
	case STB_WAIT_RWLOCK_RD:
	case STB_WAIT_RWLOCK_WR:
		return "rwlock";
	case STB_WAIT_ID:
		return "bthread_id";
	case STB_WAIT_COUNTDOWN:
		return "countdown event";
	case STB_WAIT_EXECQ:
		return "execution queue";
	default:
		return stb_wait_kind_name(kind);
	}
}

/* The clause without times left and owners: "waiting on mutex 0x..." */
static void put_wait_what(FILE *out, const struct stb_wait_view *v, bool one_object)
{
	char ev[128];
	switch (v->kind) {
	case STB_WAIT_SLEEP:
		fputs(" sleeping", out);
		return;
	case STB_WAIT_FD:
		fmt_events(ev, sizeof(ev), v->events);
		if (one_object)
			fprintf(out, " waiting on fd %d for %s", v->fd, ev);
		else
			fprintf(out, " waiting on fds for %s", ev);
		return;
	case STB_WAIT_JOIN:
		if (!v->owner)
			fprintf(out, " waiting on join of bthread list 0x%" PRIx64, v->object);
		else
			fputs(" waiting on join of", out);
		return;
	default:
		fprintf(out, " waiting on %s", kind_noun(v->kind));
		if (one_object)
			fprintf(out, " 0x%" PRIx64, v->object);
		if (v->kind == STB_WAIT_RWLOCK_RD)
			fputs(" to read", out);
		else if (v->kind == STB_WAIT_RWLOCK_WR)
			fputs(" to write", out);
		if (one_object && v->kind == STB_WAIT_COND && v->extra)
			fprintf(out, " (mutex 0x%" PRIx64 ")", v->extra);
		return;
	}
}

/* " -- worker 3, runs bthread N" of thread t (nothing for a plain one). */
static void put_thread_role(FILE *out, const struct stb_report_task *t)
{
	uint64_t task = stb_report_more(t)->task;
	if (t->on_worker) {
		fprintf(out, " \xe2\x80\x94 worker %u", t->worker); /* U+2014 */
		if (task)
			fprintf(out, ", runs bthread %" PRIu64, task);
	} else if (task) {
		fprintf(out, " \xe2\x80\x94 registered: pthread %" PRIu64, task);
	}
}

void stb_why_text_thread(const struct stb_why *w, const struct stb_report_task *t)
{
	FILE *out = w->r->out;
	fprintf(out, "thread %u", t->tid);
	put_name(out, stb_report_task_name(t));
	fputs(" [", out);
	put_state(out, t, true);
	fputc(']', out);
	put_thread_role(out, t);
}

void stb_why_text_pins(const struct stb_why *w, const struct stb_report_task *t)
{
	if (t->in_syscall && t->on_worker)
		fprintf(w->r->out, " \xe2\x80\x94 blocks worker %u (tid %u)", t->worker,
			t->tid); /* U+2014 */
}

void stb_why_text_wait(const struct stb_why *w, const struct stb_report_task *t)
{
	const struct stb_wait_view *v = &t->wait;
	FILE *out = w->r->out;
	if (v->kind == STB_WAIT_NONE || v->kind == STB_WAIT_YIELD)
		return;
	put_wait_what(out, v, true);
	const struct stb_report_more *m = stb_report_more(t);
	if (v->kind == STB_WAIT_EXECQ && m->wait_queued_known)
		fprintf(out, " (%" PRIu64 " queued)", m->wait_queued);
	if (v->kind == STB_WAIT_JOIN && v->owner)
		put_owner(w, v->owner, NULL);
	else if (stb_wait_has_owner_word(v->kind))
		put_owner(w, v->owner, "held by");
	if (v->deadline && w->r->now_ns) {
		char d[32];
		uint64_t now = w->r->now_ns;
		fmt_dur(d, sizeof(d), v->deadline > now ? v->deadline - now : 0, w->tick_ns);
		fprintf(out, ", %s left", d);
	}
}

/* The noun of what a hold is ("mutex 0x...", "rwlock 0x... for writing"). */
static void put_hold(FILE *out, const struct stb_deadlock_hold *h)
{
	fprintf(out, "%s 0x%" PRIx64 "%s", kind_noun(h->kind), h->object,
		h->kind == STB_WAIT_RWLOCK_WR ? " for writing" : "");
}

/* The "  holds ..." lines of the tasks of chain t (one task, or a group's
 * members through group_next); whose: name the holder on each line. At most
 * STB_WHY_HOLDS_SHOWN lines unless r->all_ids. */
static void put_holds(const struct stb_why *w, const struct stb_report_task *t, bool chain,
		      bool whose)
{
	FILE *out = w->r->out;
	uint64_t shown = 0, more = 0;
	if (!w->r->deadlocks || !w->r->deadlocks->nholds)
		return; /* nothing held that others wait on: no walk of a million members */
	for (const struct stb_report_task *m = t; m; m = chain ? m->group_next : NULL) {
		size_t n;
		const struct stb_deadlock_hold *h = stb_deadlock_holds(w->r->deadlocks, m->id, &n);
		for (size_t i = 0; i < n; i++) {
			if (!w->r->all_ids && shown == STB_WHY_HOLDS_SHOWN) {
				more++;
				continue;
			}
			char c[32];
			stb_report_count_text(c, sizeof(c), h[i].waiting);
			fputs(" ", out);
			if (whose)
				put_task(w, m->id, false);
			fputs(" holds ", out);
			put_hold(out, &h[i]);
			fprintf(out, " \xe2\x80\x94 %s waiting\n", c); /* U+2014 */
			shown++;
		}
	}
	if (more) {
		char c[32];
		stb_report_count_text(c, sizeof(c), more);
		fprintf(out, "  and %s more held object%s\n", c, more == 1 ? "" : "s");
	}
}

void stb_why_text_holds(const struct stb_why *w, const struct stb_report_task *t)
{
	put_holds(w, t, false, false);
}

void stb_why_text_group_holds(const struct stb_why *w, const struct stb_report_task *lead)
{
	put_holds(w, lead, true, lead->group_count > 1);
}

/* Does t consume an execution queue other than the one it waits on? */
static bool works_on_execq(const struct stb_report_task *t)
{
	uint64_t q = stb_report_more(t)->execq;
	return q && !(t->wait.kind == STB_WAIT_EXECQ && t->wait.object == q);
}

void stb_why_text_execq(const struct stb_why *w, const struct stb_report_task *t)
{
	if (!works_on_execq(t))
		return;
	FILE *out = w->r->out;
	const struct stb_report_more *m = stb_report_more(t);
	fprintf(out, "%s working on execution queue 0x%" PRIx64,
		t->wait.kind != STB_WAIT_NONE && t->wait.kind != STB_WAIT_YIELD ? "," : "", m->execq);
	if (m->execq_queued_known)
		fprintf(out, " (%" PRIu64 " queued)", m->execq_queued);
}

/* The frame of a return address ip, symbolized (with_source: and its
 * file:line) while r's symbol deadline allows. */
static void site_frame(const struct stb_why *w, uint64_t ip, bool with_source,
		       struct stb_frame *f)
{
	struct stb_sym_info si;
	const struct stb_report *r = w->r;
	memset(f, 0, sizeof(*f));
	f->ip = ip;
	if (r->sym && (!r->sym_deadline || stb_now_ns() < r->sym_deadline))
		stb_sym_fill_frame(r->sym, STB_SYM_RETURN | (with_source ? 0 : STB_SYM_NO_SOURCE),
				   f, &si);
}

/* "accept_loop+0x2b" or "0x55d0c0a1 (libx.so+0x1a)" into buf; with_source:
 * " at file.c:12" after it when known. */
static void fmt_site(const struct stb_why *w, uint64_t ip, bool with_source, char *buf,
		     size_t size)
{
	struct stb_frame f;
	site_frame(w, ip, with_source, &f);
	char name[384];
	int k;
	if (f.symbol) {
		stb_text_escape(name, sizeof(name), f.symbol, strlen(f.symbol));
		k = snprintf(buf, size, "%s+0x%" PRIx64, name, f.offset);
	} else if (f.module) {
		const char *base = strrchr(f.module, '/');
		base = base ? base + 1 : f.module;
		stb_text_escape(name, sizeof(name), base, strlen(base));
		k = snprintf(buf, size, "0x%" PRIx64 " (%s+0x%" PRIx64 ")", ip, name,
			     f.module_offset);
	} else {
		k = snprintf(buf, size, "0x%" PRIx64, ip);
	}
	if (with_source && f.file && k > 0 && (size_t)k < size) {
		stb_text_escape(name, sizeof(name), f.file, strlen(f.file));
		if (f.line > 0)
			snprintf(buf + k, size - (size_t)k, " at %s:%d", name, f.line);
		else
			snprintf(buf + k, size - (size_t)k, " at %s", name);
	}
}

/* The creator's call site, with file:line unless the report leaves it out. */
static void fmt_creator_ip(const struct stb_why *w, uint64_t ip, char *buf, size_t size)
{
	fmt_site(w, ip, w->r->lines, buf, size);
}

void stb_why_text_site(const struct stb_why *w, uint64_t ip, char *buf, size_t size)
{
	fmt_site(w, ip, true, buf, size);
}

void stb_why_text_duration(const struct stb_why *w, uint64_t ns, char *buf, size_t size)
{
	fmt_dur(buf, size, ns, w->tick_ns);
}

void stb_why_json_site(const struct stb_why *w, struct stb_json *j, uint64_t ip)
{
	struct stb_frame f;
	site_frame(w, ip, true, &f);
	stb_json_kv_hex(j, "ip", ip);
	if (f.symbol) {
		stb_json_kv_string(j, "function", f.symbol);
		stb_json_kv_u64(j, "offset", f.offset);
	}
	if (f.file) {
		stb_json_kv_string(j, "file", f.file);
		stb_json_kv_i64(j, "line", f.line);
	}
}

static void put_creator_of(const struct stb_why *w, const struct stb_creator *c)
{
	FILE *out = w->r->out;
	if (c->id) {
		fputs(" in", out);
		put_task(w, c->id, false);
	} else if (c->tid) {
		fprintf(out, " in pthread tid %u", c->tid);
	}
}

void stb_why_text_created(const struct stb_why *w, struct stb_report_task *t)
{
	const struct stb_creator *c = &t->creator;
	if (!c->ip && !c->id && !c->tid)
		return;
	FILE *out = w->r->out;
	char ip[512];
	fputs("created by", out);
	if (c->ip) {
		fmt_creator_ip(w, c->ip, ip, sizeof(ip));
		fprintf(out, " %s", ip);
	}
	put_creator_of(w, c);
	fputc('\n', out);
}

/* Natural order: digit runs compare as numbers ("conn 9" < "conn 10"). */
static int natural_cmp(const char *a, const char *b)
{
	while (*a && *b) {
		if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
			while (*a == '0')
				a++;
			while (*b == '0')
				b++;
			size_t la = strspn(a, "0123456789"), lb = strspn(b, "0123456789");
			if (la != lb)
				return la < lb ? -1 : 1;
			int c = strncmp(a, b, la);
			if (c)
				return c;
			a += la;
			b += lb;
			continue;
		}
		if (*a != *b)
			return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
		a++;
		b++;
	}
	return *a ? 1 : *b ? -1 : 0;
}

/* What a group's members have in common, and their spread. */
struct group_sum {
	bool one_wait;   /* same object, owner, fd, events */
	bool one_object; /* same object, owners aside (they move while tasks are read) */
	bool one_creator, one_creator_ip;
	bool any_time;
	uint64_t min_ns, max_ns;
	const char *first, *last; /* names in natural order; NULL: none named */
	bool one_name;
	bool one_arg;    /* in a system call: the same first argument */
	unsigned on_workers; /* members that pin a worker */
	unsigned kinds; /* bit 0 bthreads, bit 1 pthreads, bit 2 threads */
	bool one_execq;  /* every member works on the same execution queue */
	bool any_execq;  /* some member works on one */
};

/* Do two waits of one kind say the same (what their text shows)? */
static bool same_wait(const struct stb_wait_view *a, const struct stb_wait_view *b)
{
	switch (a->kind) {
	case STB_WAIT_SLEEP:
		return true; /* each sleeps on its own butex */
	case STB_WAIT_FD:
		return a->fd == b->fd && a->events == b->events;
	case STB_WAIT_JOIN:
		return a->owner == b->owner && (a->owner || a->object == b->object);
	default:
		return a->object == b->object && a->owner == b->owner && a->extra == b->extra;
	}
}

static void summarize(const struct stb_why *w, const struct stb_report_task *lead,
		      struct group_sum *s)
{
	memset(s, 0, sizeof(*s));
	s->one_wait = s->one_creator = s->one_creator_ip = s->one_name = s->one_arg = true;
	s->one_execq = s->one_object = true;
	const struct stb_wait_view *a = &lead->wait;
	for (const struct stb_report_task *m = lead; m; m = m->group_next) {
		const struct stb_wait_view *b = &m->wait;
		if (!same_wait(a, b))
			s->one_wait = false;
		if (a->kind != b->kind || a->object != b->object || a->extra != b->extra ||
		    !stb_wait_has_owner_word(a->kind))
			s->one_object = s->one_object && same_wait(a, b);
		if (stb_report_more(m)->syscall_arg0 != stb_report_more(lead)->syscall_arg0)
			s->one_arg = false;
		s->on_workers += m->in_syscall && m->on_worker;
		if (m->creator.ip != lead->creator.ip)
			s->one_creator_ip = false;
		if (m->creator.ip != lead->creator.ip || m->creator.id != lead->creator.id ||
		    m->creator.tid != lead->creator.tid)
			s->one_creator = false;
		s->kinds |= m->is_thread ? 4u : m->is_pthread ? 2u : 1u;
		if (works_on_execq(m))
			s->any_execq = true;
		if (!works_on_execq(m) || stb_report_more(m)->execq != stb_report_more(lead)->execq)
			s->one_execq = false;
		uint64_t ns;
		if (stb_why_in_state_ns(w, m, &ns)) {
			if (!s->any_time || ns < s->min_ns)
				s->min_ns = ns;
			if (!s->any_time || ns > s->max_ns)
				s->max_ns = ns;
			s->any_time = true;
		}
		if (!stb_report_task_name(m)[0])
			continue;
		if (!s->first) {
			s->first = s->last = m->name;
			continue;
		}
		if (m->name == s->first || strcmp(m->name, s->first) == 0)
			continue; /* neither before the first nor after the last (one
				     pooled copy per name: mostly the same pointer) */
		s->one_name = false;
		if (natural_cmp(m->name, s->first) < 0)
			s->first = m->name;
		if (natural_cmp(m->name, s->last) > 0)
			s->last = m->name;
	}
}

/* "  ids 4294967296 4294967297 ... and 3,091 more": the first few that fit
 * STB_WHY_COLUMNS (at most STB_WHY_GROUP_IDS, at least one). */
static void put_group_ids(const struct stb_why *w, const struct stb_report_task *lead)
{
	FILE *out = w->r->out;
	unsigned n = lead->group_count, shown = 0;
	const char *label = lead->is_thread ? (n == 1 ? "  tid" : "  tids") /* threads: tids */
					    : (n == 1 ? "  id" : "  ids");
	size_t col = strlen(label);
	fputs(label, out);
	for (const struct stb_report_task *m = lead; m; m = m->group_next) {
		char id[24], more[48], c[32];
		int len = m->is_thread ? snprintf(id, sizeof(id), " %u", m->tid)
				       : snprintf(id, sizeof(id), " %" PRIu64, m->id);
		/* Room kept for " and N more" unless this is the last id. */
		stb_report_count_text(c, sizeof(c), n - shown - 1);
		int tail = m->group_next ? snprintf(more, sizeof(more), " and %s more", c) : 0;
		if (shown == STB_WHY_GROUP_IDS ||
		    (shown && col + (size_t)len + (size_t)tail > STB_WHY_COLUMNS))
			break;
		fputs(id, out);
		col += (size_t)len;
		shown++;
	}
	if (shown < n) {
		char c[32];
		stb_report_count_text(c, sizeof(c), n - shown);
		fprintf(out, " and %s more", c);
	}
	fputc('\n', out);
}

/* r->all_ids: every member on a line of its own -- id, name, and its wait
 * when the members' waits differ ("4294967300 "conn 1" waiting on fd 7 for
 * EPOLLIN"). */
static void put_group_members(const struct stb_why *w, const struct stb_report_task *lead,
			      bool one_wait)
{
	FILE *out = w->r->out;
	for (const struct stb_report_task *m = lead; m; m = m->group_next) {
		fprintf(out, "  %" PRIu64, m->id);
		put_name(out, stb_report_task_name(m));
		if (!one_wait) {
			struct stb_report_task one = *m;
			one.wait.deadline = 0;
			stb_why_text_wait(w, &one);
		}
		fputc('\n', out);
	}
}

void stb_why_text_group(const struct stb_why *w, const struct stb_report_task *lead)
{
	FILE *out = w->r->out;
	struct group_sum s;
	summarize(w, lead, &s);
	unsigned n = lead->group_count;
	const char *what = s.kinds == 1   ? "bthread"
			   : s.kinds == 2 ? "pthread"
			   : s.kinds == 4 ? "thread"
					  : "task";
	fprintf(out, "%u %s%s [", n, what, n == 1 ? "" : "s");
	put_state(out, lead, s.one_arg);
	if (s.any_time) {
		char a[32], b[32];
		fmt_dur(a, sizeof(a), s.min_ns, w->tick_ns);
		fmt_dur(b, sizeof(b), s.max_ns, w->tick_ns);
		if (n == 1 || strcmp(a, b) == 0)
			fprintf(out, ", %s", b);
		else
			fprintf(out, ", %s .. %s", a, b);
	}
	fputc(']', out);
	if (lead->is_thread) {
		if (n == 1)
			put_thread_role(out, lead);
	} else if (n == 1)
		stb_why_text_pins(w, lead);
	else if (s.on_workers)
		fprintf(out, " \xe2\x80\x94 blocks %u workers", s.on_workers);
	if (lead->wait.kind != STB_WAIT_NONE && lead->wait.kind != STB_WAIT_YIELD) {
		if (s.one_wait) {
			/* The whole clause, without a time left (it differs). */
			struct stb_report_task one = *lead;
			one.wait.deadline = 0;
			stb_why_text_wait(w, &one);
		} else if (s.one_object) {
			/* One lock, whose holder changed while its waiters were
			 * read (each one's: -v). */
			put_wait_what(out, &lead->wait, true);
			fputs(", held by several in turn", out);
		} else {
			put_wait_what(out, &lead->wait, false);
			fputs(" (several)", out);
		}
	}
	if (s.one_execq) {
		stb_why_text_execq(w, lead);
	} else if (s.any_execq) {
		bool wait = lead->wait.kind != STB_WAIT_NONE && lead->wait.kind != STB_WAIT_YIELD;
		fprintf(out, "%s working on execution queues (several)", wait ? "," : "");
	}
	fputc('\n', out);
	if (w->r->all_ids) {
		put_group_members(w, lead, s.one_wait);
		return;
	}
	if (s.first) {
		fputs(s.one_name ? "  name \"" : "  names \"", out);
		stb_text_put(out, s.first);
		fputc('"', out);
		if (!s.one_name) {
			fputs(" \xe2\x80\xa6 \"", out); /* U+2026 */
			stb_text_put(out, s.last);
			fputc('"', out);
		}
		fputc('\n', out);
	}
	put_group_ids(w, lead);
}

void stb_why_text_group_created(const struct stb_why *w, const struct stb_report_task *lead)
{
	struct group_sum s;
	summarize(w, lead, &s);
	if (s.one_creator) {
		struct stb_report_task one = *lead;
		stb_why_text_created(w, &one);
	} else if (s.one_creator_ip && lead->creator.ip) {
		char ip[512];
		fmt_creator_ip(w, lead->creator.ip, ip, sizeof(ip));
		fprintf(w->r->out, "created by %s in several tasks\n", ip);
	}
}

/* Is a member of cycle c a task the report selected (not one it added)?
 * Other cycles are mentioned, not shown. */
static bool cycle_selected(const struct stb_why *w, size_t c)
{
	size_t n;
	const struct stb_deadlock_member *m = stb_deadlock_cycle(w->r->deadlocks, c, &n);
	for (size_t i = 0; i < n; i++) {
		const struct stb_report_task *t = stb_why_find(w, m[i].id);
		if (t && !t->added)
			return true;
	}
	return false;
}

void stb_why_text_deadlocks(const struct stb_why *w,
			    void (*frames)(const struct stb_report *r, struct stb_report_task *t))
{
	const struct stb_deadlocks *d = w->r->deadlocks;
	FILE *out = w->r->out;
	if (!d)
		return;
	size_t shown = 0, elsewhere = 0, k = 0;
	for (size_t c = 0; c < d->ncycles; c++)
		shown += cycle_selected(w, c);
	elsewhere = d->ncycles - shown;
	if (shown)
		fprintf(out, "Found %zu deadlock%s:\n\n", shown, shown == 1 ? "" : "s");
	for (size_t c = 0; c < d->ncycles; c++) {
		if (!cycle_selected(w, c))
			continue;
		size_t n;
		const struct stb_deadlock_member *m = stb_deadlock_cycle(d, c, &n);
		k++;
		if (n == 1)
			fprintf(out, "deadlock %zu: a task waits for what it holds itself\n", k);
		else
			fprintf(out, "deadlock %zu: %zu tasks wait for each other\n", k, n);
		for (size_t i = 0; i < n; i++) {
			struct stb_report_task *t = stb_why_find(w, m[i].id);
			struct stb_report_task shown_task;
			if (t) {
				shown_task = *t;
			} else {
				memset(&shown_task, 0, sizeof(shown_task));
				shown_task.id = m[i].id;
				shown_task.is_pthread = m[i].is_pthread;
				/* Blocked: suspended, or a thread in a wait (a
				 * worker-stack bthread's word says READY_NO_STACK
				 * while it runs: abi.h). */
				unsigned st = STB_ABI_STATE(m[i].word);
				shown_task.state = STB_ABI_RUNNABLE(st) ? STB_TASK_RUNNING : st;
				shown_task.since_ns = m[i].since_ns;
				const struct stb_report_ref *ref = find_ref(w->r, m[i].id);
				if (ref)
					shown_task.name = ref->name;
			}
			shown_task.wait = m[i].wait;
			shown_task.wait.owner = m[i].held_by;
			shown_task.wait.deadline = 0;
			fprintf(out, "%s %" PRIu64, kind_word(&shown_task), shown_task.id);
			put_name(out, stb_report_task_name(&shown_task));
			stb_why_text_bracket(w, &shown_task);
			stb_why_text_wait(w, &shown_task);
			fputc('\n', out);
			if (t)
				frames(w->r, t);
			else
				fputs("(its stack is not in this report: the run's deadline came first)\n",
				      out);
			fputc('\n', out);
		}
	}
	if (elsewhere) {
		fprintf(out, "# %zu deadlock%s among tasks not selected here", elsewhere,
			elsewhere == 1 ? "" : "s");
		if (w->r->deadlock_hint) {
			fputs(": ", out);
			stb_text_put(out, w->r->deadlock_hint);
		}
		fputs("\n\n", out);
	}
	if (d->partial)
		fputs("# note: the deadlock search was cut short (its deadline or the size of the "
		      "wait-for graph): it may have missed cycles\n\n",
		      out);
}

/* ---- JSON ---- */

static void json_seconds(struct stb_json *j, const char *key, uint64_t ns)
{
	stb_json_key(j, key);
	stb_json_fixed3(j, (double)ns / 1e9);
}

/* The members of a "wait" object (one_object: object, owner, fd included). */
static void json_wait_members(const struct stb_why *w, struct stb_json *j,
			      const struct stb_report_task *t, bool one_object)
{
	const struct stb_wait_view *v = &t->wait;
	stb_json_kv_string(j, "kind", stb_wait_kind_name(v->kind));
	if (!one_object)
		return;
	if (v->object)
		stb_json_kv_hex(j, "object", v->object);
	if (stb_wait_has_owner_word(v->kind) && v->owner) {
		if (STB_ABI_OWNER_IS_TID(v->owner))
			stb_json_kv_u64(j, "owner_tid", STB_ABI_OWNER_TID_OF(v->owner));
		else
			stb_json_kv_u64(j, "owner", v->owner);
	}
	if (v->kind == STB_WAIT_JOIN && v->owner)
		stb_json_kv_u64(j, "target", v->owner);
	if (v->kind == STB_WAIT_COND && v->extra)
		stb_json_kv_hex(j, "mutex", v->extra);
	if (v->kind == STB_WAIT_FD) {
		stb_json_kv_i64(j, "fd", v->fd);
		stb_json_kv_u64(j, "events", v->events);
	}
	const struct stb_report_more *m = stb_report_more(t);
	if (v->kind == STB_WAIT_EXECQ && m->wait_queued_known)
		stb_json_kv_u64(j, "queued", m->wait_queued);
	if (v->deadline && w->r->now_ns) {
		uint64_t now = w->r->now_ns;
		json_seconds(j, "deadline_in_s", v->deadline > now ? v->deadline - now : 0);
	}
}

/* "syscall": {"nr", "name", "fd" (one_arg: of the calls that take one first)}. */
static void json_syscall(struct stb_json *j, const struct stb_report_task *t, bool one_arg)
{
	if (!t->in_syscall)
		return;
	stb_json_key(j, "syscall");
	stb_json_object(j);
	const struct stb_report_more *m = stb_report_more(t);
	stb_json_kv_u64(j, "nr", m->syscall_nr);
	const char *name = stb_syscall_name(m->syscall_nr);
	if (name)
		stb_json_kv_string(j, "name", name);
	if (one_arg && stb_syscall_fd_first(m->syscall_nr))
		stb_json_kv_i64(j, "fd", (int32_t)m->syscall_arg0);
	stb_json_end(j);
}

/* "execution_queue": {"queue": "0x...", "queued": N} of a consumer. */
static void json_execq(struct stb_json *j, const struct stb_report_task *t)
{
	if (!works_on_execq(t))
		return;
	stb_json_key(j, "execution_queue");
	stb_json_object(j);
	const struct stb_report_more *m = stb_report_more(t);
	stb_json_kv_hex(j, "queue", m->execq);
	if (m->execq_queued_known)
		stb_json_kv_u64(j, "queued", m->execq_queued);
	stb_json_end(j);
}

void stb_why_json_task(const struct stb_why *w, struct stb_json *j, struct stb_report_task *t)
{
	if (t->added)
		stb_json_kv_bool(j, "selected", false);
	uint64_t ns;
	if (t->on_worker)
		stb_json_kv_u64(j, "worker", t->worker);
	json_syscall(j, t, true);
	if (stb_why_in_state_ns(w, t, &ns))
		json_seconds(j, stb_report_blocked(t) ? "blocked_s" : "running_s", ns);
	if (t->wait.kind != STB_WAIT_NONE) {
		stb_json_key(j, "wait");
		stb_json_object(j);
		json_wait_members(w, j, t, true);
		stb_json_end(j);
	}
	json_execq(j, t);
	const struct stb_creator *c = &t->creator;
	if (c->id || c->ip || c->tid) {
		stb_json_key(j, "created_by");
		stb_json_object(j);
		if (c->id)
			stb_json_kv_u64(j, "bthread", c->id);
		if (c->tid)
			stb_json_kv_u64(j, "tid", c->tid);
		if (c->ip)
			stb_why_json_site(w, j, c->ip);
		stb_json_end(j);
	}
	size_t n;
	const struct stb_deadlock_hold *h = stb_deadlock_holds(w->r->deadlocks, t->id, &n);
	if (n) {
		stb_json_key(j, "holds");
		stb_json_array(j);
		for (size_t i = 0; i < n; i++) {
			stb_json_object(j);
			stb_json_kv_string(j, "kind", stb_wait_kind_name(h[i].kind));
			stb_json_kv_hex(j, "object", h[i].object);
			stb_json_kv_u64(j, "waiting", h[i].waiting);
			stb_json_end(j);
		}
		stb_json_end(j);
	}
}

void stb_why_json_group(const struct stb_why *w, struct stb_json *j,
			const struct stb_report_task *lead)
{
	struct group_sum s;
	summarize(w, lead, &s);
	json_syscall(j, lead, s.one_arg);
	if (lead->wait.kind != STB_WAIT_NONE) {
		stb_json_key(j, "wait");
		stb_json_object(j);
		if (!s.one_wait && s.one_object) {
			/* One lock, its holder changed while its waiters were read:
			 * the object without an owner (each task's has its own). */
			struct stb_report_task one = *lead;
			one.wait.owner = 0;
			json_wait_members(w, j, &one, true);
		} else {
			json_wait_members(w, j, lead, s.one_wait);
		}
		stb_json_end(j);
	}
	if (s.one_execq)
		json_execq(j, lead);
	if (s.any_time) {
		json_seconds(j, "shortest_s", s.min_ns);
		json_seconds(j, "longest_s", s.max_ns);
	}
	if (s.first) {
		stb_json_key(j, "names");
		stb_json_array(j);
		stb_json_string(j, s.first);
		if (!s.one_name)
			stb_json_string(j, s.last);
		stb_json_end(j);
	}
}

void stb_why_json_deadlocks(const struct stb_why *w, struct stb_json *j)
{
	const struct stb_deadlocks *d = w->r->deadlocks;
	if (!d)
		return;
	size_t elsewhere = 0;
	stb_json_key(j, "deadlocks");
	stb_json_array(j);
	for (size_t c = 0; c < d->ncycles; c++) {
		if (!cycle_selected(w, c)) {
			elsewhere++;
			continue;
		}
		size_t n;
		const struct stb_deadlock_member *m = stb_deadlock_cycle(d, c, &n);
		stb_json_array(j);
		for (size_t i = 0; i < n; i++) {
			stb_json_object(j);
			stb_json_kv_u64(j, "bthread", m[i].id);
			stb_json_kv_string(j, "kind", stb_wait_kind_name(m[i].wait.kind));
			stb_json_kv_hex(j, "object", m[i].wait.object);
			stb_json_kv_u64(j, "held_by", m[i].held_by);
			stb_json_end(j);
		}
		stb_json_end(j);
	}
	stb_json_end(j);
	stb_json_kv_u64(j, "deadlocks_elsewhere", elsewhere);
}

/* ---- pprof ---- */

unsigned stb_why_labels(const struct stb_report_task *t, const char *keys[3], const char *vals[3],
			char buf[3][32])
{
	const struct stb_wait_view *v = &t->wait;
	unsigned n = 0;
	if (v->kind == STB_WAIT_NONE)
		return 0;
	keys[n] = "wait_kind";
	vals[n++] = stb_wait_kind_name(v->kind);
	if (v->kind == STB_WAIT_FD) {
		snprintf(buf[n], sizeof(buf[n]), "fd %d", v->fd);
		keys[n] = "wait_object";
		vals[n] = buf[n];
		n++;
	} else if (v->object) {
		snprintf(buf[n], sizeof(buf[n]), "0x%" PRIx64, v->object);
		keys[n] = "wait_object";
		vals[n] = buf[n];
		n++;
	}
	if (v->owner && (stb_wait_has_owner_word(v->kind) || v->kind == STB_WAIT_JOIN)) {
		if (STB_ABI_OWNER_IS_TID(v->owner))
			snprintf(buf[n], sizeof(buf[n]), "tid %u", STB_ABI_OWNER_TID_OF(v->owner));
		else
			snprintf(buf[n], sizeof(buf[n]), "%" PRIu64, v->owner);
		keys[n] = "owner";
		vals[n] = buf[n];
		n++;
	}
	return n;
}
