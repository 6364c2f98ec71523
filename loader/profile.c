/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader --profile (profile.h): the sampling loop. Every tick (1/freq
 * s) it drains the BPF ring buffer of on-CPU samples (DWARF-unwound from the
 * record's stack copy, tagged with the worker's current bthread) and takes an
 * off-CPU snapshot of every suspended/ready bthread, re-unwinding only tasks
 * whose run sequence changed since their last snapshot. Lost samples are
 * counted and written into the profile. Design: docs/profiling.md.
 */
#include "hold.h"
#include "profile.h"
#include "record.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "capture.h"
#include "pprof.h"
#include "symbolize.h"
#include "target.h"
#include "unwind.h"
#include "util.h"

#define STB_PROF_COPY_MAX (256u << 10)
#define STB_PROF_RINGBUF (16u << 20)
#define STB_PROF_PROGRESS_NS 250000000ull
#define STB_PROF_SYNC_NS 1000000000ull        /* new workers */
#define STB_PROF_ALIVE_NS 100000000ull
/* Share of a tick that off-CPU unwinding may use; beyond it, tasks whose
 * stack changed are counted under STB_PROF_NOTE_BUDGET. */
#define STB_PROF_BUDGET_PCT 50u

#define STB_PROF_NOTE_BUDGET "[not unwound: over the per-tick budget]"
#define STB_PROF_NOTE_LOST "[lost: ring buffer full]"

/* Value indices: samples/count, cpu/nanoseconds, wall/nanoseconds. */
enum { STB_PV_SAMPLES, STB_PV_CPU, STB_PV_WALL, STB_PV_N };

/* What the last snapshot of a table slot found (off-CPU reuse). */
struct stb_prof_slot {
	uint64_t id;       /* 0: nothing cached */
	uint32_t seq;      /* run sequence of the cached stack */
	uint32_t state;    /* state of the cached sample */
	int64_t stack;     /* builder stack id */
	int64_t sample;    /* builder sample of (stack, labels with state) */
};

struct stb_prof {
	const struct stb_profile_opts *o;
	struct stb_target *tg;
	struct stb_unw_proc *unw;
	struct stb_sym *sym;
	struct stb_capture *cap;
	struct stb_pprof *pp;
	uint8_t *buf;
	uint64_t *ips;
	unsigned nips;
	struct stb_prof_slot *slots;
	size_t nslots;
	uint32_t rotor;         /* where the next snapshot starts scanning */
	uint64_t period_ns;
	int64_t nostack;        /* stack id of STB_PPROF_NOTE_NO_STACK */
	int64_t overbudget;     /* stack id of STB_PROF_NOTE_BUDGET */
	int64_t failed;         /* stack id of STB_PPROF_NOTE_FAILED */
	int err;                /* first builder error */
	bool target_gone;
	/* counters */
	uint64_t oncpu, oncpu_tagged, oncpu_sched, oncpu_kernel;
	uint64_t offcpu, ticks, missed_ticks, unwinds, reused, over_budget, copy_failed;
};

static volatile sig_atomic_t stb_prof_stop;

static void stb_prof_on_signal(int sig)
{
	(void)sig;
	stb_prof_stop = 1;
}


int stb_profile_parse_duration(const char *s, uint64_t *ns)
{
	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	uint64_t unit;
	if (strcmp(end, "ms") == 0)
		unit = 1000000ull;
	else if (strcmp(end, "s") == 0 || *end == '\0')
		unit = 1000000000ull;
	else if (strcmp(end, "m") == 0)
		unit = 60ull * 1000000000ull;
	else
		return -EINVAL;
	if (v == 0)
		return -EINVAL;
	if (v > STB_PROFILE_DURATION_MAX_NS / unit)
		return -ERANGE;
	*ns = v * unit;
	return 0;
}

/* ---- labels and samples ---- */

static void stb_prof_task_name(const struct stb_prof *P, uint64_t id, char *name, size_t size)
{
	const struct stb_abi_task *p = stb_target_task(P->tg, STB_ABI_SLOT(id));
	name[0] = '\0';
	if (!p || __atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id)
		return;
	size_t n = size < sizeof(p->name) ? size : sizeof(p->name);
	memcpy(name, p->name, n);
	name[n - 1] = '\0';
}

/* Adds values to (stack, labels of the task). Returns the sample or -errno. */
static int64_t stb_prof_sample(struct stb_prof *P, int64_t stack, uint64_t id, unsigned state,
			       uint32_t tid, const int64_t *values)
{
	char ids[24], name[STB_ABI_NAME_LEN];
	struct stb_pprof_label l[4];
	unsigned n = 0;
	if (id) {
		snprintf(ids, sizeof(ids), "%" PRIu64, id);
		l[n++] = (struct stb_pprof_label){.key = "bthread_id", .str = ids};
	}
	l[n++] = (struct stb_pprof_label){.key = "state",
					  .str = id ? stb_state_name(state) : "scheduler"};
	if (tid)
		l[n++] = (struct stb_pprof_label){.key = "worker_tid", .num = tid};
	if (id) {
		stb_prof_task_name(P, id, name, sizeof(name));
		if (name[0])
			l[n++] = (struct stb_pprof_label){.key = "name", .str = name};
	}
	int64_t rc = stb_pprof_sample(P->pp, (uint32_t)stack, l, n, values);
	if (rc < 0 && !P->err)
		P->err = (int)rc;
	return rc;
}

static int64_t stb_prof_stack(struct stb_prof *P, const uint64_t *ips, unsigned n, bool exact,
			      const char *leaf)
{
	struct stb_pprof_stack s = {
		.ips = ips, .n = n, .first_exact = exact, .leaf = leaf,
		.root = n >= P->o->max_depth ? STB_PPROF_NOTE_TRUNCATED : NULL,
	};
	int64_t rc = stb_pprof_stack(P->pp, &s);
	if (rc < 0 && !P->err)
		P->err = (int)rc;
	return rc;
}

/* ---- on-CPU samples ---- */

struct stb_prof_collect {
	uint64_t *ips;
	unsigned n, max;
};

static int stb_prof_collect(const struct stb_unw_frame *f, void *arg)
{
	struct stb_prof_collect *c = arg;
	if (c->n < c->max)
		c->ips[c->n++] = f->ip;
	return c->n >= c->max;
}


static int stb_prof_on_record(void *arg, const struct stb_capture_record *rec, size_t size)
{
	struct stb_prof *P = arg;
	if (rec->kind != STB_CAPTURE_MODE_SAMPLE)
		return 0;
	P->oncpu++;
	bool task = !(rec->flags & STB_CAPTURE_F_NO_TASK) && rec->id;
	if (task)
		P->oncpu_tagged++;
	else
		P->oncpu_sched++;
	bool kernel = (rec->flags & STB_CAPTURE_F_KERNEL) != 0;
	P->oncpu_kernel += kernel;
	struct stb_prof_collect c = {.ips = P->ips, .max = P->nips};
	unsigned n = stb_record_unwind(P->unw, rec, size, c.max, stb_prof_collect, &c);
	int64_t st = stb_prof_stack(P, P->ips, n, true, kernel ? STB_PPROF_NOTE_KERNEL
							       : n ? NULL : STB_PPROF_NOTE_NO_STACK);
	if (st < 0)
		return 0;
	int64_t v[STB_PV_N] = {1, (int64_t)P->period_ns, (int64_t)P->period_ns};
	stb_prof_sample(P, st, task ? rec->id : 0, STB_ABI_STATE(rec->word), rec->tid, v);
	return 0;
}

/* ---- off-CPU snapshots ---- */

/*
 * Copies the saved context of task id without a lease: the validation of
 * include/stb/abi.h alone (word before and after the copy: same run sequence,
 * READY or SUSPENDED both times, same id). A lease would make the task wait
 * at its gate if a worker picked it meanwhile -- for as long as this loader
 * is descheduled, on a busy machine -- and the profiler must never delay the
 * target; a task that runs during the copy is simply on a CPU now (the
 * on-CPU samples see it). Reads from the target cannot fault this process,
 * so a stack freed meanwhile only fails the read. Returns 0 (regs, copy, *w1
 * set), -EAGAIN (it ran or is switching), -ESRCH (gone) or -errno.
 */
static int stb_prof_copy_context(struct stb_prof *P, struct stb_abi_task *p, uint64_t id,
				 struct stb_regs *regs, struct stb_stack_copy *copy, uint64_t *w1)
{
	*w1 = __atomic_load_n(&p->word, __ATOMIC_ACQUIRE);
	unsigned st = STB_ABI_STATE(*w1);
	if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id)
		return -ESRCH;
	if (st != STB_TASK_READY && st != STB_TASK_SUSPENDED)
		return -EAGAIN;
	/* No lease (see above): the same validated copy as the loader's dump. */
	return stb_hold_copy_context(p, id, *w1, 0, stb_target_read, P->tg, P->buf,
				     STB_PROF_COPY_MAX, regs, copy);
}

/* Copies and unwinds task id (context mode, one retry when it moved).
 * Returns the stack id, -EAGAIN when it is running or switching (not
 * off-CPU now), -ESRCH when gone, or another -errno. *seq and *state: the
 * run sequence and state of the copy. */
static int64_t stb_prof_unwind_task(struct stb_prof *P, struct stb_abi_task *p, uint64_t id,
				    uint32_t *seq, unsigned *state)
{
	struct stb_regs regs;
	struct stb_stack_copy copy;
	uint64_t w1;
	int rc = stb_prof_copy_context(P, p, id, &regs, &copy, &w1);
	if (rc == -EAGAIN)
		rc = stb_prof_copy_context(P, p, id, &regs, &copy, &w1);
	if (rc != 0)
		return rc;
	struct stb_prof_collect c = {.ips = P->ips, .max = P->nips};
	stb_unw_walk(P->unw, &regs, &copy, 0, c.max, stb_prof_collect, &c);
	P->unwinds++;
	*seq = STB_ABI_SEQ(w1);
	*state = STB_ABI_STATE(w1);
	return stb_prof_stack(P, c.ips, c.n, false, c.n ? NULL : STB_PPROF_NOTE_NO_STACK);
}

static int stb_prof_slots_grow(struct stb_prof *P, size_t n)
{
	if (n <= P->nslots)
		return 0;
	size_t cap = P->nslots ? P->nslots : 1024;
	while (cap < n)
		cap *= 2;
	struct stb_prof_slot *s = realloc(P->slots, cap * sizeof(*s));
	if (!s)
		return -ENOMEM;
	memset(s + P->nslots, 0, (cap - P->nslots) * sizeof(*s));
	P->slots = s;
	P->nslots = cap;
	return 0;
}

/* One wall-clock snapshot of every bthread that is off-CPU: suspended and
 * ready ones with their stacks, created / ready-without-stack ones without.
 * count false: only fill the cache (the priming pass before the clock starts,
 * so that the first tick does not pay for every unwind and symbol table). */
static void stb_prof_snapshot(struct stb_prof *P, uint64_t budget_end, uint64_t weight, bool count)
{
	uint32_t hwm = (uint32_t)__atomic_load_n(&P->tg->hdr->slot_hwm, __ATOMIC_ACQUIRE);
	if (hwm > P->tg->slots)
		hwm = P->tg->slots;
	if (hwm == 0 || stb_prof_slots_grow(P, hwm) != 0)
		return;
	int64_t v[STB_PV_N] = {(int64_t)weight, 0, (int64_t)(weight * P->period_ns)};
	uint32_t start = P->rotor < hwm ? P->rotor : 0;
	bool over = false;
	for (uint32_t k = 0; k < hwm; k++) {
		uint32_t slot = start + k < hwm ? start + k : start + k - hwm;
		struct stb_abi_task *p = stb_target_task(P->tg, slot);
		uint64_t id = __atomic_load_n(&p->id, __ATOMIC_ACQUIRE);
		uint64_t w = __atomic_load_n(&p->word, __ATOMIC_ACQUIRE);
		unsigned st = STB_ABI_STATE(w);
		if (!id || (st != STB_TASK_SUSPENDED && st != STB_TASK_READY &&
			    st != STB_TASK_CREATED && st != STB_TASK_READY_NO_STACK))
			continue;
		if (__atomic_load_n(&p->flags, __ATOMIC_RELAXED) & STB_ABI_TASK_F_PTHREAD)
			continue; /* registered pthreads are always "running" */
		struct stb_prof_slot *c = &P->slots[slot];
		uint32_t seq = STB_ABI_SEQ(w);
		if (!count && c->id == id && c->seq == seq)
			continue;
		if (c->id == id && c->seq == seq && c->stack >= 0) {
			/* Not run since the cached snapshot: same stack, count it again. */
			if (c->state == st && c->sample >= 0) {
				stb_pprof_sample_add(P->pp, (uint32_t)c->sample, v);
			} else {
				c->sample = stb_prof_sample(P, c->stack, id, st, 0, v);
				c->state = st;
			}
			P->reused++;
			P->offcpu += weight;
			continue;
		}
		int64_t stack;
		unsigned cst = st;
		if (st == STB_TASK_CREATED || st == STB_TASK_READY_NO_STACK) {
			stack = P->nostack;
		} else if (count && (over || stb_now_ns() >= budget_end)) {
			if (!over)
				P->rotor = slot; /* next tick starts here */
			over = true;
			P->over_budget++;
			P->offcpu += weight;
			c->id = 0;
			stb_prof_sample(P, P->overbudget, id, st, 0, v);
			continue;
		} else {
			stack = stb_prof_unwind_task(P, p, id, &seq, &cst);
			if (stack == -EAGAIN || stack == -ESRCH) {
				c->id = 0;
				if (stack == -ESRCH && !stb_target_alive(P->tg))
					P->target_gone = true;
				continue; /* it ran or finished: not off-CPU now */
			}
			if (stack < 0) {
				P->copy_failed++;
				stack = P->failed;
			}
		}
		int64_t s = -1;
		if (count) {
			P->offcpu += weight;
			s = stb_prof_sample(P, stack, id, cst, 0, v);
		}
		*c = (struct stb_prof_slot){.id = id, .seq = seq, .state = cst, .stack = stack,
					    .sample = s};
		if (stack == P->failed)
			c->id = 0; /* try again next time */
	}
	if (!over)
		P->rotor = 0;
}

/* ---- setup, loop, output ---- */

static int stb_prof_open_capture(struct stb_prof *P)
{
	struct stb_capture_opts co;
	stb_target_capture_opts(P->tg, STB_CAPTURE_MODE_SAMPLE, &co);
	co.period_ns = P->period_ns;
	co.ringbuf_bytes = STB_PROF_RINGBUF;
	co.sample_stack = true;
	P->cap = stb_capture_open(P->tg->pid, &co);
	if (!P->cap) {
		int err = errno;
		fprintf(stderr, "stb-bpf-loader: --profile needs the BPF capture program to sample "
				"on-CPU stacks, and it could not be loaded: %s\n",
			stb_capture_strerror(-err));
		return -err;
	}
	int rc = stb_capture_sync_workers(P->cap);
	if (rc < 0) {
		fprintf(stderr, "stb-bpf-loader: cannot open perf events on the workers of process "
				"%d: %s%s\n", (int)P->o->pid, stb_capture_strerror(rc),
			rc == -EPERM || rc == -EACCES ? " (run as root or with CAP_PERFMON)" : "");
		return rc;
	}
	return 0;
}

static void stb_prof_progress(const struct stb_prof *P, uint64_t elapsed, uint64_t lost)
{
	fprintf(stderr, "\rstb-bpf-loader: profiling pid %d: %.1f / %.1f s, %" PRIu64
			" on-CPU samples, %" PRIu64 " off-CPU snapshots, %" PRIu64 " lost   ",
		(int)P->o->pid, (double)elapsed / 1e9, (double)P->o->duration_ns / 1e9, P->oncpu,
		P->offcpu, lost);
	fflush(stderr);
}

static int stb_prof_write(struct stb_prof *P, FILE *out, uint64_t elapsed, uint64_t lost,
			  const struct stb_capture_stats *cs)
{
	char line[768];
	snprintf(line, sizeof(line),
		 "stb-bpf-loader --profile of pid %d (%s): %u Hz for %.3f s%s. Sample types: "
		 "samples/count = on-CPU samples + off-CPU snapshots, cpu/nanoseconds = on-CPU "
		 "time, wall/nanoseconds = on-CPU + off-CPU time (an on-CPU sample is 1/%u s of "
		 "one bthread; an off-CPU snapshot of a bthread 1/freq s per tick it stands for: "
		 "a late snapshot also covers the ticks it missed). Labels: bthread_id, state "
		 "(running, suspended, ready, ..., scheduler = no current bthread, lost), "
		 "worker_tid (on-CPU), name.",
		 (int)P->o->pid, P->tg->comm, P->o->freq, (double)elapsed / 1e9,
		 stb_prof_stop ? " (interrupted)" : P->target_gone ? " (target exited)" : "",
		 P->o->freq);
	stb_pprof_set_duration(P->pp, (int64_t)elapsed);
	int rc = stb_pprof_comment(P->pp, line);
	snprintf(line, sizeof(line),
		 "stats: oncpu_samples=%" PRIu64 " oncpu_tagged=%" PRIu64 " oncpu_scheduler=%" PRIu64
		 " oncpu_kernel=%" PRIu64 " lost_samples=%" PRIu64 " read_errors=%" PRIu64
		 " ticks=%" PRIu64 " missed_ticks=%" PRIu64 " offcpu_snapshots=%" PRIu64
		 " unwinds=%" PRIu64 " reused=%" PRIu64 " over_budget=%" PRIu64
		 " copy_failed=%" PRIu64,
		 P->oncpu, P->oncpu_tagged, P->oncpu_sched, P->oncpu_kernel, lost, (uint64_t)cs->read_err,
		 P->ticks, P->missed_ticks, P->offcpu, P->unwinds, P->reused, P->over_budget,
		 P->copy_failed);
	if (rc == 0)
		rc = stb_pprof_comment(P->pp, line);
	if (rc == 0 && lost) {
		snprintf(line, sizeof(line),
			 "%" PRIu64 " on-CPU samples were lost (ring buffer full); they are counted "
			 "under the frame " STB_PROF_NOTE_LOST " with state lost", lost);
		rc = stb_pprof_comment(P->pp, line);
		struct stb_pprof_stack s = {.leaf = STB_PROF_NOTE_LOST};
		int64_t st = stb_pprof_stack(P->pp, &s);
		struct stb_pprof_label l = {.key = "state", .str = "lost"};
		int64_t v[STB_PV_N] = {(int64_t)lost, (int64_t)(lost * P->period_ns),
				       (int64_t)(lost * P->period_ns)};
		if (st < 0 || stb_pprof_sample(P->pp, (uint32_t)st, &l, 1, v) < 0)
			rc = -ENOMEM;
	}
	if (rc != 0)
		return rc;
	if (P->o->format == STB_PROFILE_PPROF)
		return stb_pprof_write(P->pp, out);
	if (P->o->format == STB_PROFILE_FOLDED)
		return stb_pprof_write_folded(P->pp, out, "state", STB_PV_SAMPLES);
	char extra[512];
	snprintf(extra, sizeof(extra),
		 ",\n  \"pid\": %d, \"comm\": \"%s\", \"freq_hz\": %u, \"complete\": %s,\n"
		 "  \"stats\": {\"oncpu_samples\": %" PRIu64 ", \"oncpu_tagged\": %" PRIu64
		 ", \"oncpu_scheduler\": %" PRIu64 ", \"lost_samples\": %" PRIu64
		 ", \"ticks\": %" PRIu64 ", \"missed_ticks\": %" PRIu64
		 ", \"offcpu_snapshots\": %" PRIu64 ", \"unwinds\": %" PRIu64
		 ", \"reused\": %" PRIu64 ", \"over_budget\": %" PRIu64 "}",
		 (int)P->o->pid, P->tg->comm, P->o->freq, P->target_gone ? "false" : "true",
		 P->oncpu, P->oncpu_tagged, P->oncpu_sched, lost, P->ticks, P->missed_ticks,
		 P->offcpu, P->unwinds, P->reused, P->over_budget);
	return stb_pprof_write_json(P->pp, out, extra);
}

int stb_profile_run(const struct stb_profile_opts *o)
{
	struct stb_prof P;
	memset(&P, 0, sizeof(P));
	P.o = o;
	P.period_ns = 1000000000ull / o->freq;
	int status = 1;
	FILE *out = stdout;
	char err[512];
	struct sigaction old_int, old_term;
	bool handlers = false, written = false;
	bool progress = isatty(STDERR_FILENO);

	if (o->output) {
		out = fopen(o->output, "we");
		if (!out) {
			fprintf(stderr, "stb-bpf-loader: cannot write %s: %s\n", o->output,
				strerror(errno));
			out = stdout;
			goto cleanup;
		}
	}
	P.tg = stb_target_open(o->pid, STB_TARGET_MAP_ALL, err, sizeof(err));
	if (!P.tg) {
		fprintf(stderr, "stb-bpf-loader: %s\n", err);
		goto cleanup;
	}
	P.unw = stb_unw_proc_new(o->pid);
	P.sym = P.unw ? stb_sym_new_mods(stb_unw_proc_mods(P.unw)) : NULL;
	P.nips = o->max_depth;
	P.ips = calloc(P.nips, sizeof(*P.ips));
	P.buf = malloc(STB_PROF_COPY_MAX);
	if (!P.unw || !P.sym || !P.ips || !P.buf) {
		fprintf(stderr, "stb-bpf-loader: cannot read the modules of process %d: %s\n",
			(int)o->pid, strerror(errno));
		goto cleanup;
	}
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	struct stb_pprof_opts po = {
		.nvalues = STB_PV_N,
		.types = {{"samples", "count"}, {"cpu", "nanoseconds"}, {"wall", "nanoseconds"}},
		.default_type = STB_PV_WALL,
		.period_type = {"wall", "nanoseconds"},
		.period = (int64_t)P.period_ns,
		.time_ns = (int64_t)wall.tv_sec * 1000000000 + wall.tv_nsec,
		.sym = P.sym, .unw = P.unw,
	};
	P.pp = stb_pprof_new(&po);
	struct stb_pprof_stack nostack = {.leaf = STB_PPROF_NOTE_NO_STACK};
	struct stb_pprof_stack budget = {.leaf = STB_PROF_NOTE_BUDGET};
	struct stb_pprof_stack failed = {.leaf = STB_PPROF_NOTE_FAILED};
	if (!P.pp || (P.nostack = stb_pprof_stack(P.pp, &nostack)) < 0 ||
	    (P.overbudget = stb_pprof_stack(P.pp, &budget)) < 0 ||
	    (P.failed = stb_pprof_stack(P.pp, &failed)) < 0) {
		fprintf(stderr, "stb-bpf-loader: out of memory\n");
		goto cleanup;
	}
	if (stb_prof_open_capture(&P) != 0)
		goto cleanup;

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = stb_prof_on_signal;
	sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C kills */
	sigemptyset(&sa.sa_mask);
	stb_prof_stop = 0;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	handlers = true;

	/* Prime the off-CPU cache (modules, unwind tables, the stacks of tasks
	 * that stay blocked) before sampling and the clock start. */
	uint64_t p0 = stb_now_ns();
	stb_prof_snapshot(&P, 0, 0, false);
	if (o->verbose)
		fprintf(stderr, "stb-bpf-loader: primed the off-CPU cache: %" PRIu64 " stacks unwound "
				"in %.1f ms; sampling %d workers\n", P.unwinds,
			(double)(stb_now_ns() - p0) / 1e6, stb_capture_sync_workers(P.cap));
	int rc = stb_capture_sample_start(P.cap);
	if (rc != 0) {
		fprintf(stderr, "stb-bpf-loader: cannot start sampling: %s\n",
			stb_capture_strerror(rc));
		goto cleanup;
	}
	uint64_t t0 = stb_now_ns(), end = t0 + o->duration_ns;
	uint64_t tick = P.period_ns, next = t0 + tick;
	uint64_t next_progress = t0 + STB_PROF_PROGRESS_NS, next_sync = t0 + STB_PROF_SYNC_NS;
	uint64_t next_alive = t0 + STB_PROF_ALIVE_NS;
	struct stb_capture_stats cs;
	memset(&cs, 0, sizeof(cs));
	uint64_t stop_at;
	for (;;) {
		uint64_t now = stb_now_ns();
		bool done = stb_prof_stop || P.target_gone || now >= end;
		uint64_t limit = now < end ? now : end;
		if (stb_capture_sample_poll(P.cap, stb_prof_on_record, &P) < 0 && !stb_target_alive(P.tg))
			P.target_gone = true;
		if (next <= limit && !P.target_gone) {
			/* A late snapshot (the loader was not scheduled in time) stands
			 * for the ticks it missed as well, so that every tick of the
			 * profile is counted exactly once, the last ones included. */
			uint64_t weight = 1 + (limit - next) / tick;
			stb_prof_snapshot(&P, now + tick * STB_PROF_BUDGET_PCT / 100u, weight, true);
			P.ticks++;
			P.missed_ticks += weight - 1;
			next += weight * tick;
			now = stb_now_ns();
		}
		if (done) {
			stop_at = limit;
			break;
		}
		if (now >= next_alive) {
			if (!stb_target_alive(P.tg))
				P.target_gone = true;
			next_alive = now + STB_PROF_ALIVE_NS;
		}
		if (now >= next_sync) {
			stb_capture_sync_workers(P.cap);
			next_sync = now + STB_PROF_SYNC_NS;
		}
		if (progress && now >= next_progress) {
			stb_capture_stats_read(P.cap, &cs);
			stb_prof_progress(&P, now - t0, (uint64_t)cs.rb_full);
			next_progress = now + STB_PROF_PROGRESS_NS;
		}
		uint64_t wake = next < end ? next : end;
		struct timespec ts = {.tv_sec = (time_t)(wake / 1000000000ull),
				      .tv_nsec = (long)(wake % 1000000000ull)};
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL); /* EINTR: checked above */
	}
	uint64_t elapsed = stop_at - t0;
	stb_capture_sample_stop(P.cap);
	stb_capture_sample_poll(P.cap, stb_prof_on_record, &P);
	stb_capture_stats_read(P.cap, &cs);
	uint64_t lost = cs.rb_full;
	if (progress) {
		stb_prof_progress(&P, elapsed, lost);
		fputc('\n', stderr);
	}
	if (P.err) {
		fprintf(stderr, "stb-bpf-loader: building the profile failed: %s\n", strerror(-P.err));
		goto cleanup;
	}
	rc = stb_prof_write(&P, out, elapsed, lost, &cs);
	written = true;
	if (rc != 0 || fflush(out) != 0 || ferror(out)) {
		fprintf(stderr, "stb-bpf-loader: writing the profile failed: %s\n",
			rc ? strerror(-rc) : strerror(errno));
		goto cleanup;
	}
	fprintf(stderr, "stb-bpf-loader: profiled pid %d for %.2f s at %u Hz%s: %" PRIu64
			" on-CPU samples (%" PRIu64 " with a bthread, %" PRIu64 " in the scheduler), %"
			PRIu64 " lost; %" PRIu64 " off-CPU snapshots in %" PRIu64 " ticks (%" PRIu64
			" missed), %" PRIu64 " unwound, %" PRIu64 " reused, %" PRIu64
			" over budget%s%s\n",
		(int)o->pid, (double)elapsed / 1e9, o->freq, stb_prof_stop ? " (interrupted)" : "",
		P.oncpu, P.oncpu_tagged, P.oncpu_sched, lost, P.offcpu, P.ticks,
		P.missed_ticks, P.unwinds, P.reused, P.over_budget, o->output ? "; wrote " : "",
		o->output ? o->output : "");
	if (o->verbose)
		fprintf(stderr, "stb-bpf-loader: BPF program: %" PRIu64 " runs, %" PRIu64 " records, %"
				PRIu64 " ring buffer full, %" PRIu64 " table read errors; %zu distinct "
				"samples in the profile\n", (uint64_t)cs.runs, (uint64_t)cs.records,
			lost, (uint64_t)cs.read_err, stb_pprof_nsamples(P.pp));
	if (lost)
		fprintf(stderr, "stb-bpf-loader: warning: %" PRIu64 " on-CPU samples were lost "
				"because the ring buffer was full (the loader fell behind); they are "
				"in the profile as \"" STB_PROF_NOTE_LOST "\". Lower --freq.\n",
			lost);
	if (P.target_gone) {
		fprintf(stderr, "stb-bpf-loader: process %d exited during the profile; the "
				"profile covers the %.2f s before\n", (int)o->pid, (double)elapsed / 1e9);
		goto cleanup;
	}
	status = 0;
cleanup:
	if (handlers) {
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGTERM, &old_term, NULL);
	}
	if (out && out != stdout) {
		fclose(out);
		if (!written)
			unlink(o->output); /* nothing was profiled: leave no empty file */
	}
	stb_capture_close(P.cap);
	stb_pprof_free(P.pp);
	free(P.slots);
	free(P.buf);
	free(P.ips);
	stb_sym_free(P.sym);
	stb_unw_proc_free(P.unw);
	stb_target_close(P.tg);
	return status;
}
