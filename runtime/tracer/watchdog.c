/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The opt-in in-process watchdog (stb_watchdog_start, $STB_WATCHDOG): its own
 * thread reads the workers' entries every threshold / 4 and the task words
 * every other time (no more than 1 % of its time on large tables) and, when a
 * bthread has run on a worker without a switch for the threshold (it starves
 * that worker's queue) or a task has been blocked that long (not on an fd or
 * in a sleep), writes one grouped report of every such task with its stack --
 * to stderr or to a callback -- once per episode, and at most once per
 * max(threshold, STB_WATCHDOG_MIN_GAP_NS). Nothing of it runs on the
 * runtime's paths and it takes none of the runtime's locks; only a report
 * traces (leases, as stb_dump).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hashset.h"
#include "internal.h"
#include "report/formats.h"
#include "trace.h"

#define STB_WATCHDOG_MIN_NS 10000000ull                 /* threshold: 10 ms .. */
#define STB_WATCHDOG_MAX_NS (86400ull * 1000000000ull) /* .. one day */
#define STB_WATCHDOG_MIN_GAP_NS 5000000000ull          /* between two reports at least */

/* A stuck task of one check: the same id and since is the same episode. */
struct key {
	uint64_t id, since;
};

static struct {
	pthread_mutex_t lock; /* start, stop, and the thread's sleep */
	pthread_cond_t cond;  /* CLOCK_MONOTONIC */
	bool cond_ready;
	bool running, stopping;
	pthread_t th;
	uint64_t threshold_ns;
	stb_watchdog_fn fn;
	void *arg;
} stb_wd = {.lock = PTHREAD_MUTEX_INITIALIZER};

struct keys {
	struct key *k;
	size_t n, cap;
	bool oom;
};

struct check {
	struct stb_collect_opts opts;
	struct stb_collect_src src; /* this process, owners as they blocked */
	uint64_t now;
	struct keys *cur;
};

static int key_cmp(const void *x, const void *y)
{
	const struct key *a = x, *b = y;
	if (a->id != b->id)
		return a->id < b->id ? -1 : 1;
	return a->since < b->since ? -1 : a->since > b->since;
}

static int check_one(void *arg, uint32_t slot, struct stb_abi_task *p,
		     const struct stb_tview_task *v)
{
	struct check *c = arg;
	(void)slot;
	struct stb_report_task d;
	struct stb_report_more more;
	struct stb_wait_seen seen;
	stb_collect_entry(&c->src, p, v, &d, &more, &seen);
	if (!stb_collect_stuck(&c->opts, &d, c->now))
		return 0;
	struct keys *ks = c->cur;
	if (stb_grow(&ks->k, &ks->cap, ks->n + 1, sizeof(*ks->k)) != 0) {
		ks->oom = true;
		return 1;
	}
	ks->k[ks->n++] = (struct key){d.id, d.since_ns ? d.since_ns : more.run_since_ns};
	return 0;
}

/* Writes the report of the tasks stuck now; returns how many there were. */
static size_t report(uint64_t threshold, stb_watchdog_fn fn, void *arg)
{
	const struct stb_self_opts so = {
		.stacks = true, .stuck_ns = threshold, .deadlocks = true, .holders = true,
	};
	struct stb_self_set set;
	if (stb_self_collect(&so, &set) != 0)
		return 0;
	struct stb_watchdog_report rep = {.threshold_ns = threshold};
	uint64_t now = stb_now_ns();
	size_t n = 0;
	for (size_t i = 0; i < set.res.n; i++) {
		const struct stb_report_task *t = &set.res.tasks[i];
		if (t->added)
			continue; /* not stuck: a stuck task waits on it */
		n++;
		uint64_t ns = stb_report_stuck_ns(t, now);
		if (t->state == STB_TASK_RUNNING && !t->is_pthread && t->wait.kind == STB_WAIT_NONE) {
			rep.running++; /* not a bthread blocked on its worker's stack */
			rep.in_syscall += t->in_syscall;
		} else
			rep.blocked++;
		if (ns > rep.longest_ns)
			rep.longest_ns = ns;
	}
	char *text = NULL;
	size_t len = 0;
	FILE *out = n ? open_memstream(&text, &len) : NULL;
	if (out) {
		char calls[96] = "";
		if (rep.in_syscall)
			snprintf(calls, sizeof(calls), " (%" PRIu64 " of them blocking their worker in a "
				 "system call)", rep.in_syscall);
		fprintf(out,
			"==== stb watchdog (pid %d): %" PRIu64 " bthreads running without a switch%s "
			"and %" PRIu64 " tasks blocked for %.3f s or more ====\n",
			(int)getpid(), rep.running, calls, rep.blocked, (double)threshold / 1e9);
		struct stb_report_meta meta;
		struct stb_report r;
		stb_self_report(&r, &meta, out, "stb watchdog", &set);
		r.group = true;
		r.deadlock_hint = "its tasks have been blocked for less than the threshold so far";
		stb_report_write(&r, set.res.tasks, set.res.n, STB_FORMAT_TEXT);
		fputs("==== stb watchdog: end of report ====\n", out);
		if (fclose(out) == 0 && text) {
			rep.text = text;
			rep.len = len;
			if (fn) {
				fn(&rep, arg);
			} else {
				fwrite(text, 1, len, stderr);
				fflush(stderr);
			}
		}
	}
	free(text);
	stb_self_set_free(&set);
	return n;
}

/* Is key k in ks (sorted)? */
static bool keys_has(const struct keys *ks, const struct key *k)
{
	return ks->n && bsearch(k, ks->k, ks->n, sizeof(*ks->k), key_cmp);
}

/* Keeps the keys of reported (sorted) that are still in cur (sorted). */
static void keep_common(struct keys *reported, const struct keys *cur)
{
	size_t k = 0;
	for (size_t i = 0; i < reported->n; i++)
		if (keys_has(cur, &reported->k[i]))
			reported->k[k++] = reported->k[i];
	reported->n = k;
}

/* Appends the keys of from to to (false: no memory). */
static bool keys_add(struct keys *to, const struct keys *from)
{
	if (stb_grow(&to->k, &to->cap, to->n + from->n, sizeof(*to->k)) != 0)
		return false;
	if (from->n)
		memcpy(to->k + to->n, from->k, from->n * sizeof(*from->k));
	to->n += from->n;
	return true;
}

/* Sorts ks and drops duplicates (a thread blocked on its worker's stack is
 * seen by both checks). */
static void keys_sort(struct keys *ks)
{
	if (ks->n < 2)
		return;
	qsort(ks->k, ks->n, sizeof(*ks->k), key_cmp);
	size_t k = 0;
	for (size_t i = 0; i < ks->n; i++)
		if (!k || key_cmp(&ks->k[k - 1], &ks->k[i]) != 0)
			ks->k[k++] = ks->k[i];
	ks->n = k;
}

/* Checks task slot in full (the checked copy, its wait and running time). */
static void check_slot(struct check *c, const struct stb_tview_src *src, uint32_t slot,
		       uint64_t want_id)
{
	struct stb_abi_task *p = stb_tview_at(src, slot);
	if (!p)
		return;
	struct stb_tview_task v;
	stb_tview_read_task_now(&src->workers, p, &v);
	if (!stb_tview_live(&v) || (v.bad & STB_TVIEW_BAD_STATE) || (want_id && v.id != want_id))
		return;
	if (v.state == STB_TASK_SUSPENDED || v.state == STB_TASK_RUNNING)
		check_one(c, slot, p, &v);
}

/*
 * The bthreads that have run without a switch for the threshold: only the
 * workers' entries are read (what the monitor published), and a task's entry
 * only when its worker's run is that old. Cheap enough for every period.
 */
static void check_running(struct check *c, const struct stb_tview_src *src)
{
	const struct stb_abi_header *h = __atomic_load_n(&stb_table.hdr, __ATOMIC_ACQUIRE);
	uint32_t n = h ? stb_tview_nworkers(h, NULL) : 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct stb_abi_worker *w = stb_table_worker(i);
		if (!w)
			break;
		/* What is proven is the time from since to the monitor's last
		 * pass (which saw the same run), not to now: a monitor that got
		 * no CPU for a while must not make every run look long. The
		 * pass is read first: a since read after it is that new or newer. */
		uint64_t seen = __atomic_load_n(&h->monitor_ns, __ATOMIC_ACQUIRE);
		uint64_t cur = __atomic_load_n(&w->current, __ATOMIC_ACQUIRE);
		uint64_t since = __atomic_load_n(&w->run_since_ns, __ATOMIC_ACQUIRE);
		if (cur && !STB_ABI_CURRENT_IS_SWITCHING(cur) && since && seen > since &&
		    seen - since >= c->opts.stuck_ns)
			check_slot(c, src, STB_ABI_SLOT(cur), cur);
	}
}

/*
 * The tasks blocked for the threshold: one pass over the table that reads
 * the task word and, for a task that waits, its since_ns -- the full check
 * only for the tasks blocked that long. Returns how long the pass took.
 */
static uint64_t check_blocked(struct check *c, const struct stb_tview_src *src)
{
	uint64_t t0 = stb_now_ns();
	struct stb_abi_task *p;
	for (uint32_t cur = 0; (p = stb_tview_next(src, &cur)); cur++) {
		uint64_t word = __atomic_load_n(&p->word, __ATOMIC_ACQUIRE);
		unsigned st = STB_ABI_STATE(word);
		if (st != STB_TASK_SUSPENDED) {
			/* A thread that blocks in a bthread call: a registered
			 * pthread (RUNNING) or a bthread on its worker's stack
			 * (its word says READY_NO_STACK while it runs: abi.h). */
			uint32_t flags = __atomic_load_n(&p->flags, __ATOMIC_RELAXED);
			if (!(st == STB_TASK_RUNNING || STB_ABI_RUNNABLE(st)) ||
			    !(flags & (STB_ABI_TASK_F_PTHREAD | STB_ABI_TASK_F_WORKER_STACK)) ||
			    STB_ABI_WAIT_KIND(__atomic_load_n(&p->wait_word, __ATOMIC_RELAXED)) ==
				    STB_WAIT_NONE)
				continue;
		}
		uint64_t since = __atomic_load_n(&p->since_ns, __ATOMIC_RELAXED);
		if (since && c->now > since && c->now - since >= c->opts.stuck_ns)
			check_slot(c, src, cur, 0);
	}
	return stb_now_ns() - t0;
}

static void *watchdog_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "bthread_wdog");
	/* reported: the stuck tasks of the last report still stuck; running:
	 * those of this check; blocked: those of the last pass over the table;
	 * cur: both. */
	struct keys reported = {0}, cur = {0}, running = {0}, blocked = {0};
	uint64_t last = 0, next_pass = 0;
	pthread_mutex_lock(&stb_wd.lock);
	uint64_t threshold = stb_wd.threshold_ns;
	stb_watchdog_fn fn = stb_wd.fn;
	void *fn_arg = stb_wd.arg;
	uint64_t period = threshold / 4;
	if (period < STB_WATCHDOG_MIN_NS)
		period = STB_WATCHDOG_MIN_NS;
	if (period > 1000000000u)
		period = 1000000000u;
	uint64_t gap = threshold > STB_WATCHDOG_MIN_GAP_NS ? threshold : STB_WATCHDOG_MIN_GAP_NS;
	while (!stb_wd.stopping) {
		uint64_t wake = stb_now_ns() + period;
		struct timespec ts = {(time_t)(wake / 1000000000u), (long)(wake % 1000000000u)};
		while (!stb_wd.stopping &&
		       pthread_cond_timedwait(&stb_wd.cond, &stb_wd.lock, &ts) != ETIMEDOUT)
			;
		if (stb_wd.stopping)
			break;
		pthread_mutex_unlock(&stb_wd.lock);
		/* No tracing, no lock of the runtime: who is stuck now? */
		struct check c = {
			.opts = {.stuck_ns = threshold},
			.now = stb_now_ns(),
		};
		stb_self_source(&c.src);
		c.src.owners = NULL; /* the owner seen when each blocked: no reads */
		struct stb_tview_src src = c.src.tasks(c.src.ctx, NULL, false);
		running.n = 0;
		running.oom = false;
		c.cur = &running;
		check_running(&c, &src);
		bool oom = running.oom;
		if (c.now >= next_pass) {
			/* The pass over the table: every 2 periods, and never more
			 * than 1 % of this thread's time however large the table. */
			blocked.n = 0;
			blocked.oom = false;
			c.cur = &blocked;
			uint64_t took = check_blocked(&c, &src);
			uint64_t every = 2 * period > 100 * took ? 2 * period : 100 * took;
			next_pass = c.now + every - period / 2;
		}
		oom |= blocked.oom;
		cur.n = 0;
		oom |= !keys_add(&cur, &running) || !keys_add(&cur, &blocked);
		keys_sort(&cur);
		bool fresh = false;
		for (size_t i = 0; i < cur.n && !fresh; i++)
			fresh = !keys_has(&reported, &cur.k[i]);
		uint64_t now = stb_now_ns();
		if (fresh && !oom && (!last || now - last >= gap)) {
			/* The gap is counted from the end of a report (the
			 * quiet time between two of them). */
			if (report(threshold, fn, fn_arg))
				last = stb_now_ns();
			struct keys t = reported; /* reported = cur */
			reported = cur;
			cur = t;
		} else {
			keep_common(&reported, &cur);
		}
		pthread_mutex_lock(&stb_wd.lock);
	}
	pthread_mutex_unlock(&stb_wd.lock);
	free(reported.k);
	free(cur.k);
	free(running.k);
	free(blocked.k);
	return NULL;
}

/* Starts the thread (the runtime is up, or starting: attach). */
static int wd_start(uint64_t threshold_ns, stb_watchdog_fn fn, void *arg)
{
	int rc;
	pthread_mutex_lock(&stb_wd.lock);
	if (stb_wd.running) {
		pthread_mutex_unlock(&stb_wd.lock);
		return -EALREADY;
	}
	if (!stb_wd.cond_ready) {
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		rc = pthread_cond_init(&stb_wd.cond, &ca);
		pthread_condattr_destroy(&ca);
		if (rc != 0) {
			pthread_mutex_unlock(&stb_wd.lock);
			return -rc;
		}
		stb_wd.cond_ready = true;
	}
	stb_wd.threshold_ns = threshold_ns;
	stb_wd.fn = fn;
	stb_wd.arg = arg;
	stb_wd.stopping = false;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256u << 10);
	rc = pthread_create(&stb_wd.th, &attr, watchdog_main, NULL);
	pthread_attr_destroy(&attr);
	if (rc == 0)
		stb_wd.running = true;
	pthread_mutex_unlock(&stb_wd.lock);
	return -rc;
}

int stb_watchdog_start(uint64_t threshold_ns, stb_watchdog_fn fn, void *arg)
{
	if (threshold_ns < STB_WATCHDOG_MIN_NS || threshold_ns > STB_WATCHDOG_MAX_NS)
		return -EINVAL;
	int rc = stb_runtime_init();
	if (rc != 0)
		return -rc;
	return wd_start(threshold_ns, fn, arg);
}

int stb_watchdog_stop(void)
{
	pthread_mutex_lock(&stb_wd.lock);
	if (!stb_wd.running) {
		pthread_mutex_unlock(&stb_wd.lock);
		return -ESRCH;
	}
	if (pthread_equal(stb_wd.th, pthread_self())) {
		pthread_mutex_unlock(&stb_wd.lock);
		return -EDEADLK; /* from its own callback */
	}
	stb_wd.stopping = true;
	pthread_cond_broadcast(&stb_wd.cond);
	pthread_t th = stb_wd.th;
	pthread_mutex_unlock(&stb_wd.lock);
	pthread_join(th, NULL);
	pthread_mutex_lock(&stb_wd.lock);
	stb_wd.running = false;
	pthread_mutex_unlock(&stb_wd.lock);
	return 0;
}

void stb_watchdog_env_init(void)
{
	const char *env = getenv("STB_WATCHDOG");
	uint64_t ns;
	if (!env || !*env || strcmp(env, "0") == 0)
		return;
	if (!stb_parse_seconds(env, strlen(env), 86400, &ns) || ns < STB_WATCHDOG_MIN_NS) {
		fprintf(stderr, "stb: ignoring STB_WATCHDOG=%s (want seconds, e.g. 2 or 0.5; at "
				"least 0.01)\n", env);
		return;
	}
	/* At attach the runtime is starting: the thread's first check comes a
	 * period later. */
	int rc = wd_start(ns, NULL, NULL);
	if (rc != 0 && rc != -EALREADY)
		fprintf(stderr, "stb: cannot start the watchdog: %s\n", strerror(-rc));
}
