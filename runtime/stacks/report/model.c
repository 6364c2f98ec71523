/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The report model (model.h): state names, what a report says about its run,
 * the view of a stack (runtime frames left out, the depth limit) computed
 * once per stored stack, the grouping of identical stacks, and the run's
 * members in JSON and as pprof comment lines.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "encode/escape.h"
#include "encode/json.h"
#include "hashset.h"
#include "report/model.h"
#include "report/rtframes.h"
#include "stb/abi.h"
#include "symbols/symbolize.h"
#include "util.h"

static const char *const state_names[STB_TASK_NSTATES] = {
	"unused", "created", "ready-without-stack", "ready", "about-to-run",
	"running", "suspending", "suspended", "destroyed",
};

const char *stb_state_name(unsigned state)
{
	return state < STB_TASK_NSTATES ? state_names[state] : "invalid";
}

const struct stb_report_more stb_report_more_none;

bool stb_report_more_empty(const struct stb_report_more *m)
{
	return !m->task && !m->signal && !m->syscall_arg0 && !m->run_since_ns && !m->execq &&
	       !m->execq_queued && !m->wait_queued && !m->error && !m->syscall_nr &&
	       !m->execq_queued_known && !m->wait_queued_known;
}

const char *stb_report_task_error(const struct stb_report_task *t)
{
	const char *e = stb_report_more(t)->error;
	return e && e[0] ? e : strerror(-t->err);
}

/* ---- a core's fatal signal ---- */

const char *stb_report_signal_name(int signo)
{
	static const char *const names[] = {
	    [SIGHUP] = "SIGHUP",   [SIGINT] = "SIGINT",       [SIGQUIT] = "SIGQUIT",
	    [SIGILL] = "SIGILL",   [SIGTRAP] = "SIGTRAP",     [SIGABRT] = "SIGABRT",
	    [SIGBUS] = "SIGBUS",   [SIGFPE] = "SIGFPE",       [SIGKILL] = "SIGKILL",
	    [SIGUSR1] = "SIGUSR1", [SIGSEGV] = "SIGSEGV",     [SIGUSR2] = "SIGUSR2",
	    [SIGPIPE] = "SIGPIPE", [SIGALRM] = "SIGALRM",     [SIGTERM] = "SIGTERM",
	    [SIGSTKFLT] = "SIGSTKFLT", [SIGCHLD] = "SIGCHLD", [SIGCONT] = "SIGCONT",
	    [SIGSTOP] = "SIGSTOP", [SIGTSTP] = "SIGTSTP",     [SIGTTIN] = "SIGTTIN",
	    [SIGTTOU] = "SIGTTOU", [SIGURG] = "SIGURG",       [SIGXCPU] = "SIGXCPU",
	    [SIGXFSZ] = "SIGXFSZ", [SIGVTALRM] = "SIGVTALRM", [SIGPROF] = "SIGPROF",
	    [SIGWINCH] = "SIGWINCH", [SIGIO] = "SIGIO",       [SIGPWR] = "SIGPWR",
	    [SIGSYS] = "SIGSYS",
	};
	if (signo <= 0 || (size_t)signo >= sizeof(names) / sizeof(names[0]))
		return NULL;
	return names[signo];
}

const char *stb_report_signal_code_name(int signo, int code)
{
	/* Sent by a process (any signal). */
	switch (code) {
	case 0: return "SI_USER";
	case -1: return "SI_QUEUE";
	case -2: return "SI_TIMER";
	case -3: return "SI_MESGQ";
	case -4: return "SI_ASYNCIO";
	case -6: return "SI_TKILL";
	case 0x80: return "SI_KERNEL";
	default: break;
	}
	static const char *const segv[] = {NULL, "SEGV_MAPERR", "SEGV_ACCERR", "SEGV_BNDERR",
					   "SEGV_PKUERR", "SEGV_ACCADI", "SEGV_ADIDERR",
					   "SEGV_ADIPERR", "SEGV_MTEAERR", "SEGV_MTESERR",
					   "SEGV_CPERR"};
	static const char *const bus[] = {NULL, "BUS_ADRALN", "BUS_ADRERR", "BUS_OBJERR",
					  "BUS_MCEERR_AR", "BUS_MCEERR_AO"};
	static const char *const ill[] = {NULL, "ILL_ILLOPC", "ILL_ILLOPN", "ILL_ILLADR",
					  "ILL_ILLTRP", "ILL_PRVOPC", "ILL_PRVREG", "ILL_COPROC",
					  "ILL_BADSTK", "ILL_BADIADDR"};
	static const char *const fpe[] = {NULL, "FPE_INTDIV", "FPE_INTOVF", "FPE_FLTDIV",
					  "FPE_FLTOVF", "FPE_FLTUND", "FPE_FLTRES", "FPE_FLTINV",
					  "FPE_FLTSUB", "FPE_FLTUNK", "FPE_CONDTRAP"};
	static const char *const trap[] = {NULL, "TRAP_BRKPT", "TRAP_TRACE", "TRAP_BRANCH",
					   "TRAP_HWBKPT", "TRAP_UNK", "TRAP_PERF"};
#define STB_CODE_IN(t) (code > 0 && (size_t)code < sizeof(t) / sizeof(t[0]) ? t[code] : NULL)
	switch (signo) {
	case SIGSEGV: return STB_CODE_IN(segv);
	case SIGBUS: return STB_CODE_IN(bus);
	case SIGILL: return STB_CODE_IN(ill);
	case SIGFPE: return STB_CODE_IN(fpe);
	case SIGTRAP: return STB_CODE_IN(trap);
	default: return NULL;
	}
#undef STB_CODE_IN
}

size_t stb_report_signal_text(const struct stb_report_signal *s, char *buf, size_t size)
{
	const char *name = stb_report_signal_name(s->signo);
	const char *code = stb_report_signal_code_name(s->signo, s->code);
	int k = snprintf(buf, size, "signal %d (%s", s->signo, name ? name : "unknown");
	size_t n = k > 0 ? (size_t)k : 0;
	if (code) {
		k = snprintf(buf + (n < size ? n : size), n < size ? size - n : 0, ", %s", code);
		n += k > 0 ? (size_t)k : 0;
	}
	if (s->has_addr)
		k = snprintf(buf + (n < size ? n : size), n < size ? size - n : 0,
			     ") at address 0x%" PRIx64, s->addr);
	else if (s->has_sender)
		k = snprintf(buf + (n < size ? n : size), n < size ? size - n : 0,
			     ") sent by pid %" PRIu32 " (uid %" PRIu32 ")", s->sender_pid,
			     s->sender_uid);
	else
		k = snprintf(buf + (n < size ? n : size), n < size ? size - n : 0, ")");
	n += k > 0 ? (size_t)k : 0;
	return n;
}

void stb_report_signal_json(struct stb_json *j, const struct stb_report_signal *s, bool thread)
{
	const char *name = stb_report_signal_name(s->signo);
	const char *code = stb_report_signal_code_name(s->signo, s->code);
	stb_json_object(j);
	stb_json_kv_i64(j, "number", s->signo);
	if (name)
		stb_json_kv_string(j, "name", name);
	stb_json_kv_i64(j, "code", s->code);
	if (code)
		stb_json_kv_string(j, "code_name", code);
	if (s->has_addr)
		stb_json_kv_hex(j, "fault_addr", s->addr);
	if (s->has_sender) {
		stb_json_kv_u64(j, "sender_pid", s->sender_pid);
		stb_json_kv_u64(j, "sender_uid", s->sender_uid);
	}
	if (thread) {
		stb_json_kv_u64(j, "tid", s->tid);
		if (s->task)
			stb_json_kv_u64(j, "task", s->task);
	}
	stb_json_end(j);
}

void stb_report_meta_note(struct stb_report_meta *m, const char *note)
{
	if (note && m->nnotes < STB_REPORT_MAX_NOTES)
		m->notes[m->nnotes++] = note;
}

static const char *const trunc_names[STB_REPORT_TRUNC_NKINDS] = {
	NULL, "copy", "moved", "unreadable", "deadline", "walk-limit", "depth",
};

static const char *const trunc_texts[STB_REPORT_TRUNC_NKINDS] = {
	NULL,
	"the stack copy ends before the stack's base (the capture's limit)",
	"the part of the stack past the first copy changed while it was read",
	"the part of the stack past the first copy could not be read",
	"the walk's deadline passed",
	"the walk ended at its frame limit",
	"the depth limit",
};

const char *stb_report_trunc_name(unsigned why)
{
	return why < STB_REPORT_TRUNC_NKINDS ? trunc_names[why] : NULL;
}

const char *stb_report_trunc_text(unsigned why)
{
	return why < STB_REPORT_TRUNC_NKINDS ? trunc_texts[why] : NULL;
}

bool stb_trace_mode_exact(unsigned mode)
{
	return mode == STB_TRACE_SIGNAL || mode == STB_TRACE_BPF || mode == STB_TRACE_SYSCALL ||
	       mode == STB_TRACE_CORE;
}

bool stb_report_task_exact(const struct stb_report_task *t)
{
	return stb_trace_mode_exact(t->mode) && !t->inexact;
}


void stb_report_symbolize(const struct stb_report *r, struct stb_report_task *t, bool with_source)
{
	if (!r->sym || (r->sym_deadline && stb_now_ns() >= r->sym_deadline))
		return;
	bool exact = stb_report_task_exact(t);
	for (unsigned i = 0; i < t->nframes; i++) {
		struct stb_frame *f = &t->frames[i];
		struct stb_sym_info si;
		if (!f->symbol && !f->module)
			stb_sym_fill_frame(r->sym,
					   (i > 0 || !exact ? STB_SYM_RETURN : 0) |
						   (with_source ? 0 : STB_SYM_NO_SOURCE),
					   f, &si);
	}
}

unsigned stb_report_frame_inlines(const struct stb_report *r, const struct stb_report_task *t,
				  unsigned i, struct stb_sym_info *si)
{
	const struct stb_frame *f = &t->frames[i];
	memset(si, 0, sizeof(*si));
	if (!r->sym || (r->sym_deadline && stb_now_ns() >= r->sym_deadline))
		return 0;
	/* A stack that carries its inline frames already (stb_trace's) is shown
	 * as it is: those of frame i are right before it. */
	if ((f->flags & STB_FRAME_F_INLINED) ||
	    (i > 0 && (t->frames[i - 1].flags & STB_FRAME_F_INLINED)))
		return 0;
	int flags = i > 0 || !stb_report_task_exact(t) ? STB_SYM_RETURN : 0;
	if (stb_sym_lookup(r->sym, f->ip, flags, si) != 0 || !si->ninline)
		return 0;
	if (!r->runtime_frames && stb_rtframes_inlines_hidden(si->function))
		return 0;
	return si->ninline;
}

/* ---- the view of a stack ---- */

/* Leaves out t's runtime frames (unless r->runtime_frames) and what is past
 * r->max_depth, counting both; once per task. A shared stack (stackset.h)
 * is viewed once, for all its tasks (they have the same key: the same
 * view), and stays as stored: its tasks point into it. */
void stb_report_view(const struct stb_report *r, struct stb_report_task *t, bool with_source)
{
	if (t->trimmed)
		return;
	t->trimmed = true;
	if (t->err < 0 || t->nframes == 0 || !t->frames) {
		t->not_shown = t->beyond;
		return;
	}
	struct stb_stackset_entry *k = t->stack;
	if (k && (t->frames != k->frames || t->nframes != k->n))
		k = NULL; /* not its stack as stored: viewed as its own */
	if (k && k->viewed) {
		t->frames = k->frames + k->first;
		t->nframes = k->shown;
		t->hidden = k->hidden;
		t->not_shown = k->not_shown;
		t->inexact = k->inexact;
		t->truncated = k->truncated;
		t->truncated_why = k->truncated_why;
		return;
	}
	unsigned inner = 0, outer = 0;
	if (!r->runtime_frames && r->sym) {
		stb_report_symbolize(r, t, with_source);
		stb_rtframes_find(t->frames, t->nframes, !t->truncated && !t->beyond, &inner,
				  &outer);
	}
	unsigned vis = t->nframes - inner - outer;
	unsigned shown = r->max_depth && vis > r->max_depth ? r->max_depth : vis;
	t->hidden = inner + outer;
	t->not_shown = vis - shown + t->beyond;
	if (inner) {
		if (k)
			t->frames += inner;
		else
			memmove(t->frames, t->frames + inner, shown * sizeof(*t->frames));
		t->inexact = true;
	}
	t->nframes = shown;
	if (t->not_shown) {
		t->truncated = 1;
		if (!t->truncated_why)
			t->truncated_why = t->beyond_more ? STB_REPORT_TRUNC_WALK_MAX
							  : STB_REPORT_TRUNC_DEPTH;
	}
	/* A view made once the symbol deadline passed may lack names (and so
	 * runtime frames): not kept for the stack's other tasks and later
	 * snapshots, which view it again. */
	if (k && !(r->sym && r->sym_deadline && stb_now_ns() >= r->sym_deadline)) {
		k->viewed = true;
		k->first = inner;
		k->shown = t->nframes;
		k->hidden = t->hidden;
		k->not_shown = t->not_shown;
		k->inexact = t->inexact;
		k->truncated = t->truncated != 0;
		k->truncated_why = t->truncated_why;
	}
}

uint64_t stb_report_waits_for(const struct stb_report_task *t)
{
	const struct stb_wait_view *w = &t->wait;
	if (!w->owner || (!stb_wait_has_owner_word(w->kind) && w->kind != STB_WAIT_JOIN))
		return 0;
	return STB_ABI_OWNER_IS_TID(w->owner) || w->owner == t->id ? 0 : w->owner;
}

uint32_t stb_report_stack_key(const struct stb_report_task *t)
{
	uint32_t beyond = t->beyond; /* 16 bits: the key has room for 25 */
	uint32_t why = t->truncated_why < 8 ? t->truncated_why : 7;
	return beyond << 6 | why << 3 | (uint32_t)(t->truncated != 0) << 2 |
	       (uint32_t)t->beyond_more << 1 | (uint32_t)stb_report_task_exact(t);
}


/* Are t's frames the view of its interned stack (the same for all its tasks)? */
static bool view_shared(const struct stb_report_task *t)
{
	const struct stb_stackset_entry *k = t->stack;
	return k && k->viewed && t->frames == k->frames + k->first && t->nframes == k->shown;
}

/* The hash of the frames t shows: computed once per interned stack (at the
 * first of its tasks grouped), else of t's own frames. */
static uint64_t frames_hash(struct stb_report_task *t)
{
	struct stb_stackset_entry *k = view_shared(t) ? t->stack : NULL;
	if (k && k->view_hashed)
		return k->view_hash;
	uint64_t h = t->nframes;
	for (unsigned i = 0; i < t->nframes; i++)
		h = stb_hash_mix(h, t->frames[i].ip);
	if (k) {
		k->view_hash = h;
		k->view_hashed = true;
	}
	return h;
}

/* Groups: the same state, failed or not, wait kind, added or not, system
 * call, thread or not (and the task it runs), and frame ips. */
static uint64_t group_hash(struct stb_report_task *t)
{
	const struct stb_report_more *m = stb_report_more(t);
	uint64_t h = frames_hash(t);
	h = stb_hash_mix(h, t->state | (uint64_t)(t->err < 0) << 8 | (uint64_t)t->wait.kind << 16 |
				    (uint64_t)t->added << 24 | (uint64_t)(m->signal || t->is_thread) << 25 |
				    (uint64_t)t->starting << 26);
	/* A task blocked in a system call groups by its call; a thread by the
	 * task it runs. */
	h = stb_hash_mix(h, (uint64_t)t->in_syscall | (uint64_t)(t->in_syscall ? m->syscall_nr : 0)
								<< 32);
	if (m->task)
		h = stb_hash_mix(h, m->task);
	return h;
}

/* The groups being made: their leaders, and by group index their last
 * members and hashes (the set holds group indices; the tasks keep none of
 * it). */
struct groups {
	struct stb_report_task **lead;
	struct group_end {
		struct stb_report_task *tail;
		uint64_t hash;
	} *end;
	size_t caplead, capend;
};

/* A task looked for among the groups: it and its hash. */
struct group_key {
	const struct stb_report_task *t;
	uint64_t hash;
};

static uint64_t group_rehash(const void *ctx, uint32_t idx)
{
	return ((const struct groups *)ctx)->end[idx].hash;
}

static bool group_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct groups *g = ctx;
	const struct group_key *k = key;
	const struct stb_report_task *a = g->lead[idx];
	const struct stb_report_task *b = k->t;
	const struct stb_report_more *am = stb_report_more(a), *bm = stb_report_more(b);
	if (g->end[idx].hash != k->hash || a->state != b->state || a->nframes != b->nframes ||
	    (a->err < 0) != (b->err < 0) || a->wait.kind != b->wait.kind || a->added != b->added ||
	    a->in_syscall != b->in_syscall || (a->in_syscall && am->syscall_nr != bm->syscall_nr) ||
	    a->is_thread != b->is_thread || am->task != bm->task || a->starting != b->starting)
		return false;
	/* The task or thread that took a core's fatal signal stands alone
	 * (threads group among themselves, in their section). */
	if (am->signal || bm->signal)
		return false;
	if (a->stack && a->stack == b->stack && view_shared(a) && view_shared(b))
		return true; /* one interned stack, one view */
	for (unsigned i = 0; i < a->nframes; i++)
		if (a->frames[i].ip != b->frames[i].ip)
			return false;
	return true;
}

static int group_cmp(const void *x, const void *y)
{
	const struct stb_report_task *a = *(struct stb_report_task *const *)x;
	const struct stb_report_task *b = *(struct stb_report_task *const *)y;
	const struct stb_report_signal *as = stb_report_more(a)->signal, *bs = stb_report_more(b)->signal;
	if ((as != NULL) != (bs != NULL)) /* what took the fatal signal first */
		return as ? -1 : 1;
	if (a->added != b->added) /* the selected tasks first */
		return a->added ? 1 : -1;
	if (a->group_count != b->group_count)
		return a->group_count > b->group_count ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

struct stb_report_task **stb_report_group(struct stb_report_task *tasks, size_t n,
					  size_t *ngroups)
{
	struct stb_hashset set = {0};
	struct groups g = {0};
	size_t ng = 0;
	if (n >= UINT32_MAX || stb_grow(&g.lead, &g.caplead, 1, sizeof(*g.lead)) != 0)
		goto fail;
	for (size_t i = 0; i < n; i++) {
		struct stb_report_task *t = &tasks[i];
		struct group_key k = {.t = t, .hash = group_hash(t)};
		t->group_next = NULL;
		t->group_count = 1;
		if (stb_hashset_reserve(&set, &g, group_rehash) != 0)
			goto fail;
		uint32_t *slot = stb_hashset_find(&set, k.hash, &g, group_eq, &k);
		if (*slot) {
			struct group_end *e = &g.end[*slot - 1];
			e->tail->group_next = t;
			e->tail = t;
			g.lead[*slot - 1]->group_count++;
			continue;
		}
		if (stb_grow(&g.lead, &g.caplead, ng + 1, sizeof(*g.lead)) != 0 ||
		    stb_grow(&g.end, &g.capend, ng + 1, sizeof(*g.end)) != 0)
			goto fail;
		g.lead[ng] = t;
		g.end[ng] = (struct group_end){.tail = t, .hash = k.hash};
		*slot = (uint32_t)++ng;
		set.n++;
	}
	/* The order is the groups' (count, then first id), never the hash's. */
	qsort(g.lead, ng, sizeof(*g.lead), group_cmp);
	stb_hashset_free(&set);
	free(g.end);
	*ngroups = ng;
	return g.lead;
fail:
	stb_hashset_free(&set);
	free(g.lead);
	free(g.end);
	errno = ENOMEM;
	return NULL;
}

void stb_report_count_text(char *buf, size_t size, uint64_t v)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof(tmp), "%" PRIu64, v);
	size_t k = 0;
	for (int i = 0; i < n && k + 1 < size; i++) {
		if (i && (n - i) % 3 == 0 && k + 2 < size)
			buf[k++] = ',';
		buf[k++] = tmp[i];
	}
	if (size)
		buf[k < size ? k : size - 1] = '\0';
}

/* Appends to buf[size] at *k (snprintf's contract: *k counts past the end). */
static void put(char *buf, size_t size, size_t *k, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t size, size_t *k, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + (*k < size ? *k : size), *k < size ? size - *k : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		*k += (size_t)n;
}

size_t stb_report_meta_header(const struct stb_report_meta *m, char *buf, size_t size)
{
	size_t k = 0;
	char a[32], b[32];
	if (size)
		buf[0] = '\0';
	if (!m)
		return 0;
	put(buf, size, &k, "%s", m->producer ? m->producer : "stb");
	if (m->pid)
		put(buf, size, &k, " of pid %d", m->pid);
	if (m->comm) {
		char comm[4 * 64 + 1]; /* escaped: at most 4 bytes each */
		stb_text_escape(comm, sizeof(comm), m->comm, strnlen(m->comm, 64));
		put(buf, size, &k, m->pid ? " (%s)" : " of %s", comm);
	}
	if (m->time_ns) {
		time_t sec = (time_t)(m->time_ns / 1000000000u);
		struct tm tm;
		if (gmtime_r(&sec, &tm))
			put(buf, size, &k, "%s%s %04d-%02d-%02d %02d:%02d:%02d.%03u UTC",
			    m->time_what ? ", " : " at", m->time_what ? m->time_what : "",
			    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			    tm.tm_sec, (unsigned)(m->time_ns % 1000000000u / 1000000u));
	}
	if (!m->census)
		return k;
	uint64_t total = 0;
	for (unsigned st = 0; st < STB_TASK_NSTATES; st++)
		total += m->tasks.by_state[st];
	uint64_t pth = m->tasks.pthreads <= total ? m->tasks.pthreads : total;
	stb_report_count_text(a, sizeof(a), total - pth);
	put(buf, size, &k, ": %s bthread%s", a, total - pth == 1 ? "" : "s");
	if (pth) {
		stb_report_count_text(a, sizeof(a), pth);
		put(buf, size, &k, " and %s registered pthread%s", a, pth == 1 ? "" : "s");
	}
	const char *sep = " (";
	for (unsigned st = 0; st < STB_TASK_NSTATES; st++) {
		if (!m->tasks.by_state[st])
			continue;
		stb_report_count_text(a, sizeof(a), m->tasks.by_state[st]);
		put(buf, size, &k, "%s%s %s", sep, a, stb_state_name(st));
		sep = ", ";
	}
	if (sep[0] == ',')
		put(buf, size, &k, ")");
	if (m->table && m->table_capacity) {
		stb_report_count_text(a, sizeof(a), m->slots_used);
		stb_report_count_text(b, sizeof(b), m->table_capacity);
		put(buf, size, &k, "; %s of %s table slots used", a, b);
	}
	return k;
}

void stb_report_meta_json(struct stb_json *j, const struct stb_report_meta *m)
{
	if (!m)
		return;
	if (m->pid)
		stb_json_kv_i64(j, "pid", m->pid);
	if (m->comm)
		stb_json_kv_string(j, "comm", m->comm);
	if (m->time_ns)
		stb_json_kv_u64(j, "time_ns", m->time_ns);
	if (m->census) {
		stb_json_key(j, "tasks_by_state");
		stb_json_object(j);
		for (unsigned st = 0; st < STB_TASK_NSTATES; st++)
			if (m->tasks.by_state[st])
				stb_json_kv_u64(j, stb_state_name(st), m->tasks.by_state[st]);
		stb_json_end(j);
		stb_json_kv_u64(j, "registered_pthreads", m->tasks.pthreads);
		stb_json_kv_u64(j, "slots_used", m->slots_used);
	}
	if (m->table) {
		stb_json_kv_u64(j, "abi_version", m->abi_version);
		stb_json_kv_u64(j, "table_capacity", m->table_capacity);
		stb_json_kv_u64(j, "untraceable", m->untraceable);
	}
	if (m->capture)
		stb_json_kv_string(j, "capture", m->capture);
	if (m->signal) {
		stb_json_key(j, "signal");
		stb_report_signal_json(j, m->signal, true);
	}
	if (m->freq_hz)
		stb_json_kv_u64(j, "freq_hz", m->freq_hz);
	if (m->run) {
		stb_json_kv_bool(j, "complete", m->complete);
		if (!m->complete && m->partial)
			stb_json_kv_string(j, "partial", m->partial);
		stb_json_kv_u64(j, "not_traced", m->not_traced);
		stb_json_kv_u64(j, "failed", m->failed);
		stb_json_kv_u64(j, "finished", m->finished);
	}
	if (m->nnotes) {
		stb_json_key(j, "notes");
		stb_json_array(j);
		for (unsigned i = 0; i < m->nnotes; i++)
			stb_json_string(j, m->notes[i]);
		stb_json_end(j);
	}
	if (m->stats) {
		stb_json_key(j, "stats");
		stb_json_object(j);
		for (unsigned i = 0; i < m->nstats; i++)
			stb_json_kv_u64(j, m->stats[i].key, m->stats[i].value);
		stb_json_end(j);
	}
}

int stb_report_meta_lines(const struct stb_report_meta *m,
			  int (*add)(void *arg, const char *line), void *arg)
{
	char line[512];
	int rc = 0;
	if (!m)
		return 0;
	if (m->producer) {
		int k = snprintf(line, sizeof(line), "%s", m->producer);
		if (m->pid)
			k += snprintf(line + k, sizeof(line) - (size_t)k, " of pid %d", m->pid);
		if (m->comm) {
			char comm[128];
			stb_text_escape(comm, sizeof(comm), m->comm, strlen(m->comm));
			snprintf(line + k, sizeof(line) - (size_t)k, " (%s)", comm);
		}
		if (m->capture) {
			size_t len = strlen(line);
			snprintf(line + len, sizeof(line) - len, ": %s", m->capture);
		}
		rc = add(arg, line);
	}
	for (unsigned i = 0; rc == 0 && i < m->nnotes; i++)
		rc = add(arg, m->notes[i]);
	if (rc == 0 && m->run && !m->complete) {
		snprintf(line, sizeof(line), "%s: partial", m->partial ? m->partial : "incomplete");
		rc = add(arg, line);
	}
	return rc;
}

/* The value of "frames": t's frames, symbolized. */

/* ---- times ---- */

bool stb_report_blocked(const struct stb_report_task *t)
{
	return t->since_ns && (t->state == STB_TASK_SUSPENDED ||
			       (t->state == STB_TASK_RUNNING && t->wait.kind != STB_WAIT_NONE));
}

uint64_t stb_report_since_ns(const struct stb_report_task *t)
{
	return stb_report_blocked(t)			? t->since_ns
	       : t->state == STB_TASK_RUNNING ? stb_report_more(t)->run_since_ns
						: 0;
}

uint64_t stb_report_stuck_ns(const struct stb_report_task *t, uint64_t now_ns)
{
	uint64_t since = stb_report_since_ns(t);
	return since && now_ns > since ? now_ns - since : 0;
}
