/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The opt-in in-process watchdog (stb_watchdog_start, $STB_WATCHDOG): its own
 * thread looks at the task table every threshold / 4 and, when a bthread has
 * run on a worker without a switch for the threshold (it starves that
 * worker's queue) or a task has been blocked that long (not on an fd or in a
 * sleep), writes one grouped report of every such task with its stack -- to
 * stderr or to a callback -- once per episode, and at most once per
 * STB_WATCHDOG_MIN_GAP_NS. Nothing of it runs on the runtime's paths.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "report.h"
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
	memset(&d, 0, sizeof(d));
	d.id = v->id;
	d.state = v->state;
	d.is_pthread = (v->flags & STB_ABI_TASK_F_PTHREAD) != 0;
	stb_report_task_why(&d, p, stb_table_worker(v->worker), NULL);
	if (!stb_collect_stuck(&c->opts, &d, c->now))
		return 0;
	struct keys *ks = c->cur;
	if (ks->n == ks->cap) {
		size_t cap = ks->cap ? ks->cap * 2 : 64;
		struct key *g = realloc(ks->k, cap * sizeof(*g));
		if (!g) {
			ks->oom = true;
			return 1;
		}
		ks->k = g;
		ks->cap = cap;
	}
	ks->k[ks->n++] = (struct key){d.id, d.since_ns ? d.since_ns : d.run_since_ns};
	return 0;
}

/* Writes the report of the tasks stuck now; returns how many there were. */
static size_t report(uint64_t threshold, stb_watchdog_fn fn, void *arg)
{
	const struct stb_collect_opts co = {
		.stacks = true, .stuck_ns = threshold, .stuck_no_io = true, .deadlocks = true,
	};
	struct stb_task_set set;
	if (stb_collect_tasks(&co, &set) != 0)
		return 0;
	struct stb_watchdog_report rep = {.threshold_ns = threshold};
	uint64_t now = stb_now_ns();
	for (size_t i = 0; i < set.n; i++) {
		const struct stb_report_task *t = &set.tasks[i];
		uint64_t ns = stb_report_stuck_ns(t, now);
		if (t->state == STB_TASK_RUNNING && !t->is_pthread)
			rep.running++;
		else
			rep.blocked++;
		if (ns > rep.longest_ns)
			rep.longest_ns = ns;
	}
	size_t n = set.n;
	char *text = NULL;
	size_t len = 0;
	FILE *out = n ? open_memstream(&text, &len) : NULL;
	if (out) {
		fprintf(out,
			"==== stb watchdog (pid %d): %" PRIu64 " bthreads running without a switch "
			"and %" PRIu64 " tasks blocked for %.3f s or more ====\n",
			(int)getpid(), rep.running, rep.blocked, (double)threshold / 1e9);
		struct stb_report_meta meta = {.producer = "stb watchdog", .pid = (int)getpid()};
		struct stb_report r = {.out = out, .now_ns = stb_now_coarse_ns(), .group = true,
				       .meta = &meta, .deadlocks = set.searched ? &set.deadlocks : NULL};
		stb_trace_self_tools(&r.unw, &r.sym);
		stb_report_write(&r, set.tasks, set.n, STB_FORMAT_TEXT);
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
	stb_task_set_free(&set);
	return n;
}

/* Keeps the keys of reported (sorted) that are still in cur (sorted). */
static void keep_common(struct keys *reported, const struct keys *cur)
{
	size_t k = 0;
	for (size_t i = 0; i < reported->n; i++)
		if (bsearch(&reported->k[i], cur->k, cur->n, sizeof(*cur->k), key_cmp))
			reported->k[k++] = reported->k[i];
	reported->n = k;
}

static void *watchdog_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "bthread_wdog");
	struct keys reported = {0}, cur = {0};
	uint64_t last = 0;
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
		/* One pass over the table, no tracing: who is stuck now? */
		struct check c = {
			.opts = {.stuck_ns = threshold, .stuck_no_io = true},
			.now = stb_now_ns(), .cur = &cur,
		};
		cur.n = 0;
		cur.oom = false;
		uint32_t first = 0;
		struct stb_tview_src src = stb_self_src(&first);
		struct stb_tview_scan_result res;
		stb_tview_scan(&src, 1u << STB_TASK_SUSPENDED | 1u << STB_TASK_RUNNING, 0, check_one,
			       &c, &res);
		qsort(cur.k, cur.n, sizeof(*cur.k), key_cmp);
		bool fresh = false;
		for (size_t i = 0; i < cur.n && !fresh; i++)
			fresh = !bsearch(&cur.k[i], reported.k, reported.n, sizeof(*reported.k),
					 key_cmp);
		uint64_t now = stb_now_ns();
		if (fresh && !cur.oom && (!last || now - last >= gap)) {
			if (report(threshold, fn, fn_arg))
				last = now;
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
