/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb_dump: stacks of every live bthread and registered pthread, one section
 * per task or grouped by identical stack (count and ids), and the opt-in
 * signal ($STB_DUMP_SIGNAL) that dumps everything to stderr; and this
 * process as a source of the collector (collect/collect.h), for the dump,
 * the debug HTTP endpoint and the watchdog.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/uio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "report/formats.h"
#include "report/leaks.h"
#include "table/threads.h"
#include "trace.h"

#define STB_DUMP_DEFAULT_DEPTH 64u
#define STB_DUMP_DEADLOCK_MS 2000u /* the deadlock search's budget */
/* Memory a dump may keep walks in (the process being traced is ours). */
#define STB_DUMP_MEMO_BYTES (4u << 20)
/* How long a collection waits for a capture buffer (stb_trace's hold them). */
#define STB_DUMP_SLOT_WAIT_MS 5000u

/* The in-process table as the scan sees it: every slot, published or
 * private (beyond the table's capacity). */
static struct stb_abi_task *self_entry(void *ctx, uint32_t slot, uint32_t *next)
{
	(void)ctx;
	struct stb_task *t = stb_task_at(slot);
	*next = slot + 1;
	return t ? t->pub : NULL;
}

static struct stb_tview_src self_tasks(void *ctx, bool *clamped, bool again)
{
	(void)again;
	if (clamped)
		*clamped = false;
	return (struct stb_tview_src){.entry = self_entry, .ctx = ctx, .nslots = stb_task_slots(),
				      .workers = stb_self_wsrc()};
}

static struct stb_abi_task *self_task(void *ctx, uint32_t slot)
{
	(void)ctx;
	struct stb_task *t = stb_task_at(slot);
	return t ? t->pub : NULL;
}

static const struct stb_abi_worker *self_worker(void *ctx, uint32_t w)
{
	(void)ctx;
	return stb_table_worker(w);
}

static int self_threads(void *ctx, uint32_t *tids, unsigned max)
{
	(void)ctx;
	return stb_proc_threads(0, tids, max);
}

static void self_thread_name(void *ctx, uint32_t tid, char *name, size_t len)
{
	(void)ctx;
	stb_proc_thread_name(0, tid, name, len);
}

void stb_self_source(struct stb_collect_src *src)
{
	*src = (struct stb_collect_src){
	    .tasks = self_tasks, .task = self_task, .worker = self_worker,
	    .threads = self_threads, .thread_name = self_thread_name,
	    .capacity = UINT32_MAX, /* every slot, published or private */
	    .owners = &stb_self_checked_mem,
	};
}

/* Each trace of a collection counts as one of stb_trace's (stb_get_stats). */
static void self_traced(void *arg, uint64_t id, int rc, const struct stb_capture *capt)
{
	(void)arg;
	(void)id;
	stb_trace_count(rc, capt);
}

void stb_self_set_free(struct stb_self_set *set)
{
	stb_collector_free(set->c);
	stb_self_tracer_close(&set->st);
	memset(set, 0, sizeof(*set));
}

int stb_self_collect(const struct stb_self_opts *o, struct stb_self_set *set)
{
	memset(set, 0, sizeof(*set));
	unsigned depth = o->depth ? o->depth : STB_DUMP_DEFAULT_DEPTH;
	struct stb_collect_src src;
	stb_self_source(&src);
	char err[128];
	int rc = 0;
	if (o->only && !stb_task_lookup(o->only))
		return -ESRCH;
	if (o->stacks) {
		/* Symbols are looked up when printing. */
		uint64_t wait = stb_now_ns() + STB_DUMP_SLOT_WAIT_MS * 1000000ull;
		rc = stb_self_tracer_open(&set->st, o->self_ip, o->self_sp, o->self_bp, wait, err,
					  sizeof(err));
		if (rc != 0)
			goto cleanup;
		src.drv = set->st.drv;
		src.unw = set->st.unw;
	} else {
		src.drv.mem = &stb_self_checked_mem; /* not traced: its liveness only */
		src.drv.workers = stb_self_wsrc();     /* which tasks run */
	}
	/* Without memory for it, every stack is walked. */
	set->c = stb_collector_new(&src, STB_DUMP_MEMO_BYTES);
	if (!set->c) {
		rc = -ENOMEM;
		goto cleanup;
	}
	int ms = stb_trace_timeout_ms();
	const struct stb_collect_opts co = {
	    .ids = o->only ? &o->only : NULL,
	    .nids = o->only ? 1 : 0,
	    .state_mask = o->state_mask,
	    .stacks = o->stacks,
	    .stuck_ns = o->stuck_ns,
	    /* The whole stack is walked so that the report can count the
	     * frames it leaves out; stb_report_keep(depth) are kept. */
	    .walk_max = STB_REPORT_WALK_MAX,
	    .keep = stb_report_keep(depth),
	    .timeout_ns = (uint64_t)ms * 1000000u,
	    .intern = true,
	    .holders = o->holders,
	    .deadlocks = o->deadlocks,
	    .deadlock_end = stb_now_ns() + STB_DUMP_DEADLOCK_MS * 1000000ull,
	    .threads = o->threads,
	    .traced = self_traced,
	};
	rc = stb_collect(set->c, &co, &set->res);
	if (rc == 0 && set->res.err)
		rc = set->res.err;
	if (rc == 0 && o->only && set->res.n == 0)
		rc = -ESRCH;
cleanup:
	stb_self_tracer_close(&set->st);
	if (rc != 0)
		stb_self_set_free(set);
	return rc;
}

void stb_self_report(struct stb_report *r, struct stb_report_meta *meta, FILE *out,
		     const char *producer, const struct stb_self_set *set)
{
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	*meta = (struct stb_report_meta){
	    .producer = producer,
	    .pid = (int)getpid(),
	    .comm = program_invocation_short_name,
	    .time_ns = (uint64_t)wall.tv_sec * 1000000000ull + (uint64_t)wall.tv_nsec,
	    .census = set->res.census,
	    .tasks = set->res.tasks_by_state,
	    .slots_used = stb_task_slots(),
	};
	const struct stb_abi_header *h = __atomic_load_n(&stb_table.hdr, __ATOMIC_ACQUIRE);
	if (h) {
		meta->table = true;
		meta->abi_version = h->abi_version;
		meta->table_capacity = h->task_capacity;
		meta->untraceable = __atomic_load_n(&h->untraceable, __ATOMIC_RELAXED);
		if (meta->slots_used > h->task_capacity) /* the others are private */
			meta->slots_used = h->task_capacity;
	}
	*r = (struct stb_report){
	    .out = out,
	    .now_ns = stb_now_coarse_ns(),
	    .meta = meta,
	    .stacks = stb_collector_stacks(set->c),
	    .deadlocks = set->res.deadlocks,
	    .refs = set->res.refs,
	    .nrefs = set->res.nrefs,
	};
	stb_trace_self_tools(&r->unw, &r->sym);
}

int stb_self_leaks(FILE *out, const char *producer, const struct stb_self_set *set, int format)
{
	struct stb_report_meta meta;
	struct stb_report r;
	stb_self_report(&r, &meta, out, producer, set);
	struct stb_leaks l;
	int rc = stb_leaks_build(&l, set->res.tasks, set->res.n, r.now_ns, &r);
	if (rc != 0)
		return rc;
	rc = stb_report_leaks(&r, &l, format);
	if (rc == 0)
		rc = (int)(l.bthreads < INT32_MAX ? l.bthreads : INT32_MAX);
	stb_leaks_free(&l);
	return rc;
}

__attribute__((noinline)) int stb_dump(FILE *out, const struct stb_dump_opts *opts)
{
	static const struct stb_dump_opts dflt;
	uint64_t self_ip, self_sp, self_bp;
	STB_CALLER_FRAME(self_ip, self_sp, self_bp);
	const struct stb_dump_opts *o = opts ? opts : &dflt;
	if (!out || !stb_format_name(o->format))
		return -EINVAL;
	if (o->leaks && (o->format != STB_FORMAT_TEXT && o->format != STB_FORMAT_JSON))
		return -EINVAL;
	struct stb_self_set set;
	const struct stb_self_opts so = {
		.depth = o->max_depth, .state_mask = o->state_mask, .stacks = !o->leaks,
		.stuck_ns = o->leaks ? 0 : o->stuck_ns, .deadlocks = !o->leaks,
		.holders = !o->leaks, .threads = !o->leaks && !o->no_threads,
		.self_ip = self_ip, .self_sp = self_sp, .self_bp = self_bp,
	};
	int rc = stb_self_collect(&so, &set);
	if (rc < 0)
		return rc;
	if (o->leaks) {
		rc = stb_self_leaks(out, "stb_dump", &set, o->format);
		fflush(out);
		stb_self_set_free(&set);
		return rc;
	}
	struct stb_report_meta meta;
	struct stb_report r;
	stb_self_report(&r, &meta, out, "stb_dump", &set);
	r.group = o->group != 0;
	r.all_ids = o->all_ids != 0;
	r.max_depth = o->max_depth ? o->max_depth : STB_DUMP_DEFAULT_DEPTH;
	r.runtime_frames = o->runtime_frames != 0;
	r.lines = !o->no_lines;
	r.runtime_hint = "stb_dump_opts.runtime_frames = 1";
	r.deadlock_hint = "a dump without state_mask and stuck_ns shows it";
	r.threads_hint = "stb_dump_opts.no_threads = 1";
	/* Every format: runtime/stacks/report/, shared with stb-bpf-loader. */
	rc = stb_report_write(&r, set.res.tasks, set.res.n, o->format);
	fflush(out);
	if (rc == 0)
		rc = (int)(set.res.n - set.res.threads); /* the tasks */
	stb_self_set_free(&set);
	return rc;
}

/* ---- dump on signal ---- */

/*
 * The handler only counts the request and wakes the dump thread. A dump is
 * complete or does not start: exit() (an atexit hook) waits, up to
 * STB_DUMP_EXIT_WAIT_S, for the requests made before it to be written, and
 * no dump starts once that wait is over.
 */
#define STB_DUMP_EXIT_WAIT_S 30

static int stb_dump_pipe[2] = {-1, -1};
static pthread_mutex_t stb_dump_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stb_dump_cv = PTHREAD_COND_INITIALIZER;
static unsigned long stb_dump_requested; /* signals received (the handler adds) */
static unsigned long stb_dump_done;      /* requests answered by a finished dump */
static bool stb_dump_closed;             /* the exit hook gave up: no more dumps */

static void dump_on_signal(int sig)
{
	(void)sig;
	int saved = errno;
	__atomic_fetch_add(&stb_dump_requested, 1, __ATOMIC_SEQ_CST);
	char c = 1;
	ssize_t rc = write(stb_dump_pipe[1], &c, 1);
	(void)rc;
	errno = saved;
}

static void *dump_thread(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "bthread_dump");
	for (;;) {
		char c;
		ssize_t r = read(stb_dump_pipe[0], &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return NULL;
		pthread_mutex_lock(&stb_dump_mu);
		unsigned long req = __atomic_load_n(&stb_dump_requested, __ATOMIC_SEQ_CST);
		bool go = !stb_dump_closed && req != stb_dump_done;
		pthread_mutex_unlock(&stb_dump_mu);
		if (!go)
			continue; /* answered by the previous dump, or exiting */
		fprintf(stderr, "==== stb: dump of all bthreads (pid %d) ====\n", (int)getpid());
		int rc = stb_dump(stderr, NULL);
		if (rc < 0)
			fprintf(stderr, "stb: dump failed: %s\n", strerror(-rc));
		fprintf(stderr, "==== stb: end of dump (%d tasks) ====\n", rc < 0 ? 0 : rc);
		pthread_mutex_lock(&stb_dump_mu);
		stb_dump_done = req;
		pthread_cond_broadcast(&stb_dump_cv);
		pthread_mutex_unlock(&stb_dump_mu);
	}
}

/* atexit: lets the dumps requested so far finish (bounded), then closes. */
static void dump_at_exit(void)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += STB_DUMP_EXIT_WAIT_S;
	pthread_mutex_lock(&stb_dump_mu);
	unsigned long want = __atomic_load_n(&stb_dump_requested, __ATOMIC_SEQ_CST);
	while ((long)(want - stb_dump_done) > 0 && !stb_dump_closed)
		if (pthread_cond_timedwait(&stb_dump_cv, &stb_dump_mu, &until) == ETIMEDOUT)
			break;
	stb_dump_closed = true;
	pthread_mutex_unlock(&stb_dump_mu);
}

/* Parses "SIGQUIT", "QUIT", "quit" or a number; 1 means the default SIGQUIT. */
static int parse_signal(const char *s)
{
	static const struct { const char *name; int sig; } names[] = {
		{"QUIT", SIGQUIT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2},
		{"HUP", SIGHUP}, {"URG", SIGURG}, {"WINCH", SIGWINCH},
	};
	if (strncasecmp(s, "SIG", 3) == 0)
		s += 3;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcasecmp(s, names[i].name) == 0)
			return names[i].sig;
	char *end;
	long v = strtol(s, &end, 10);
	if (*s && !*end && v == 1)
		return SIGQUIT;
	if (*s && !*end && v > 1 && v <= SIGRTMAX && v != SIGKILL && v != SIGSTOP)
		return (int)v;
	return -1;
}

void stb_dump_signal_init(void)
{
	const char *env = getenv("STB_DUMP_SIGNAL");
	if (!env || !*env || strcmp(env, "0") == 0)
		return;
	int sig = parse_signal(env);
	if (sig < 0) {
		fprintf(stderr, "stb: ignoring STB_DUMP_SIGNAL=%s (want QUIT, USR1, USR2, ... or a "
				"number)\n", env);
		return;
	}
	if (pipe2(stb_dump_pipe, O_CLOEXEC) != 0)
		goto fail;
	pthread_t th;
	if (pthread_create(&th, NULL, dump_thread, NULL) != 0)
		goto fail;
	pthread_detach(th);
	atexit(dump_at_exit);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = dump_on_signal;
	sa.sa_flags = SA_RESTART;
	if (sigaction(sig, &sa, NULL) != 0)
		goto fail;
	return;
fail:
	fprintf(stderr, "stb: cannot set up STB_DUMP_SIGNAL: %s\n", strerror(errno));
}
