/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb_dump: stacks of every live bthread and registered pthread, one section
 * per task or grouped by identical stack (count and ids), and the opt-in
 * signal ($STB_DUMP_SIGNAL) that dumps everything to stderr. The task
 * collection (stb_collect_tasks) is shared with the debug HTTP endpoint.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/uio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "collect/taskwhy.h"
#include "internal.h"
#include "report/formats.h"
#include "symbols/walkmemo.h"
#include "table/deadlock.h"
#include "table/tview.h"
#include "trace.h"

#define STB_DUMP_DEFAULT_DEPTH 64u
#define STB_DUMP_DEADLOCK_MS 2000u /* the deadlock search's budget */
/* Memory a dump may keep walks in (the process being traced is ours). */
#define STB_DUMP_MEMO_BYTES (4u << 20)

/* The in-process table as the scan sees it: every slot, published or
 * private (beyond the table's capacity). */
static struct stb_abi_task *self_entry(void *ctx, uint32_t slot, uint32_t *next)
{
	uint32_t first = *(const uint32_t *)ctx; /* slots below: skipped */
	if (slot < first) {
		*next = first;
		return NULL;
	}
	struct stb_task *t = stb_task_at(slot);
	*next = slot + 1;
	return t ? t->pub : NULL;
}

/* Reads memory of this process that may be gone (an owner word of a
 * destroyed mutex): process_vm_readv fails where a load would fault. */
static int read_self_checked(void *ctx, uint64_t addr, void *dst, size_t len)
{
	(void)ctx;
	struct iovec l = {.iov_base = dst, .iov_len = len};
	struct iovec r = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
	ssize_t n = process_vm_readv(getpid(), &l, 1, &r, 1, 0);
	return n == (ssize_t)len ? 0 : n < 0 ? -errno : -EFAULT;
}

const struct stb_mem stb_self_checked_mem = {.read = read_self_checked};

struct stb_tview_wsrc stb_self_wsrc(void)
{
	return (struct stb_tview_wsrc){.w = stb_table_worker(0), .hdr = stb_table_workers_header()};
}

struct stb_tview_src stb_self_src(uint32_t *first)
{
	return (struct stb_tview_src){.entry = self_entry, .ctx = first, .nslots = stb_task_slots(),
				      .workers = stb_self_wsrc()};
}

bool stb_collect_stuck(const struct stb_collect_opts *o, const struct stb_report_task *d,
		       uint64_t now)
{
	if (!o->stuck_ns)
		return true;
	if (o->stuck_no_io && (d->wait.kind == STB_WAIT_FD || d->wait.kind == STB_WAIT_SLEEP))
		return false;
	if (o->stuck_no_io && d->is_pthread && d->wait.kind == STB_WAIT_NONE)
		return false; /* a registered pthread running on its own: unknown */
	return stb_report_stuck_ns(d, now) >= o->stuck_ns;
}

struct collect {
	const struct stb_collect_opts *o;
	struct stb_task_set *set;
	size_t cap;                  /* tasks allocated */
	unsigned depth;              /* frames kept per task (stb_report_keep) */
	uint64_t now;                /* CLOCK_MONOTONIC when the collection started */
	struct stb_frame *scratch;   /* one trace's frames (STB_REPORT_WALK_MAX) */
	struct stb_walkmemo *memo;   /* walks of stacks alike (NULL: each walked) */
	size_t used, room;           /* frames arena */
	int err;
};

/* Fills d from the entry copy v without tracing it. */
static void entry_task(const struct stb_tview_task *v, struct stb_report_task *d)
{
	d->mode = STB_TRACE_NO_STACK;
	if (v->state == STB_TASK_RUNNING || d->is_pthread)
		d->tid = v->tid;
	memcpy(d->name, v->name, sizeof(d->name));
}

/* Traces task id into d (frames without symbols into c->scratch). Returns
 * -ESRCH if it finished. */
static int trace_task(struct collect *c, bthread_t id, struct stb_report_task *d)
{
	/* Symbols are looked up when printing. The whole stack is walked so
	 * that the report can count the frames it leaves out; depth are kept. */
	struct stb_trace_opts to = {.max_depth = STB_REPORT_WALK_MAX, .no_symbols = 1};
	struct stb_trace_info info;
	int r = stb_trace_impl(id, &to, c->scratch, STB_REPORT_WALK_MAX, &info, c->o->self_ip,
			       c->o->self_sp, c->o->self_bp, c->memo);
	if (r == -ESRCH)
		return r;
	d->id = id;
	d->state = info.state;
	d->mode = info.mode;
	d->is_pthread = info.is_pthread;
	d->tid = info.tid;
	memcpy(d->name, info.name, sizeof(d->name));
	d->err = r < 0 ? r : 0;
	d->error = r < 0 && info.error[0] ? strdup(info.error) : NULL; /* NULL: strerror */
	unsigned n = r < 0 ? 0 : info.nframes;
	d->nframes = n < c->depth ? n : c->depth;
	d->beyond = n - d->nframes;
	d->beyond_more = info.truncated != 0;
	d->truncated = info.truncated;
	return 0;
}

/* Appends n frames of c->scratch to the arena. */
static int keep_frames(struct collect *c, unsigned n)
{
	if (c->used + n > c->room) {
		size_t room = c->room ? c->room * 2 : 4096;
		while (room < c->used + n)
			room *= 2;
		struct stb_frame *grown = realloc(c->set->frames, room * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		c->set->frames = grown;
		c->room = room;
	}
	memcpy(c->set->frames + c->used, c->scratch, n * sizeof(*c->scratch));
	c->used += n;
	return 0;
}

static int collect_one(void *arg, uint32_t slot, struct stb_abi_task *p,
		       const struct stb_tview_task *v)
{
	struct collect *c = arg;
	const struct stb_collect_opts *o = c->o;
	(void)slot;
	if (o->only && v->id != o->only)
		return 0;
	struct stb_task_set *set = c->set;
	if (set->n == c->cap) {
		/* Memory grows with the live tasks, not with the slots. */
		size_t cap = c->cap ? c->cap * 2 : 256;
		struct stb_report_task *grown = realloc(set->tasks, cap * sizeof(*grown));
		if (!grown) {
			c->err = -ENOMEM;
			return 1;
		}
		set->tasks = grown;
		c->cap = cap;
	}
	struct stb_report_task *d = &set->tasks[set->n];
	memset(d, 0, sizeof(*d));
	d->id = v->id;
	d->state = v->state;
	d->is_pthread = (v->flags & STB_ABI_TASK_F_PTHREAD) != 0;
	/* Why it is there, before the trace (which must not see it move). */
	stb_report_task_why(d, p, stb_table_worker(v->worker), &stb_self_checked_mem);
	if (!stb_collect_stuck(o, d, c->now))
		return 0;
	if (!o->stacks) {
		entry_task(v, d);
	} else if (trace_task(c, v->id, d) != 0) {
		return 0; /* finished meanwhile */
	} else {
		stb_report_task_why_recheck(d, p);
		if (!stb_collect_stuck(o, d, c->now)) {
			free((char *)d->error);
			return 0; /* it moved on meanwhile: not stuck */
		}
		if (d->nframes && keep_frames(c, d->nframes) != 0) {
			free((char *)d->error);
			c->err = -ENOMEM;
			return 1;
		}
	}
	set->n++;
	return o->only != 0; /* one task: done */
}

void stb_task_set_free(struct stb_task_set *set)
{
	for (size_t i = 0; set->tasks && i < set->n; i++)
		free((char *)set->tasks[i].error);
	free(set->tasks);
	free(set->frames);
	stb_deadlocks_free(&set->deadlocks);
	memset(set, 0, sizeof(*set));
}

int stb_collect_tasks(const struct stb_collect_opts *o, struct stb_task_set *set)
{
	memset(set, 0, sizeof(*set));
	struct collect c = {
		.o = o, .set = set,
		.depth = stb_report_keep(o->depth ? o->depth : STB_DUMP_DEFAULT_DEPTH),
		.now = stb_now_ns(),
	};
	uint32_t first = 0;
	struct stb_tview_src src = stb_self_src(&first);
	if (o->only) {
		if (!stb_task_lookup(o->only))
			return -ESRCH;
		first = STB_ABI_SLOT(o->only);
		src.nslots = first + 1;
	}
	if (o->stacks && !(c.scratch = calloc(STB_REPORT_WALK_MAX, sizeof(*c.scratch)))) {
		c.err = -ENOMEM;
		goto cleanup;
	}
	/* Without memory for it, every stack is walked. */
	if (o->stacks)
		c.memo = stb_walkmemo_new(STB_DUMP_MEMO_BYTES);
	struct stb_tview_scan_result res;
	stb_tview_scan(&src, o->state_mask, 0, collect_one, &c, &res);
	if (c.err)
		goto cleanup;
	/* The arena moved while growing: point each task at its frames now. */
	for (size_t i = 0, off = 0; o->stacks && i < set->n; i++) {
		set->tasks[i].frames = set->tasks[i].nframes ? set->frames + off : NULL;
		off += set->tasks[i].nframes;
	}
	if (o->only && set->n == 0)
		c.err = -ESRCH;
	if (!c.err && o->deadlocks) {
		first = 0;
		struct stb_tview_src all = stb_self_src(&first);
		uint64_t deadline = stb_now_ns() + STB_DUMP_DEADLOCK_MS * 1000000ull;
		c.err = stb_deadlock_find(&all, &stb_self_checked_mem, deadline, &set->deadlocks);
		set->searched = c.err == 0;
	}
cleanup:
	free(c.scratch);
	stb_walkmemo_free(c.memo);
	if (c.err)
		stb_task_set_free(set);
	return c.err;
}

__attribute__((noinline)) int stb_dump(FILE *out, const struct stb_dump_opts *opts)
{
	static const struct stb_dump_opts dflt;
	uint64_t self_ip, self_sp, self_bp;
	STB_CALLER_FRAME(self_ip, self_sp, self_bp);
	const struct stb_dump_opts *o = opts ? opts : &dflt;
	if (!out || !stb_format_name(o->format))
		return -EINVAL;
	struct stb_task_set set;
	const struct stb_collect_opts co = {
		.depth = o->max_depth, .state_mask = o->state_mask, .stacks = true,
		.stuck_ns = o->stuck_ns, .deadlocks = true,
		.self_ip = self_ip, .self_sp = self_sp, .self_bp = self_bp,
	};
	int rc = stb_collect_tasks(&co, &set);
	if (rc < 0)
		goto cleanup;
	struct stb_report_meta meta = {.producer = "stb_dump", .pid = (int)getpid()};
	struct stb_report r = {.out = out, .now_ns = stb_now_coarse_ns(), .group = o->group != 0,
			       .meta = &meta, .all_ids = o->all_ids != 0,
			       .deadlocks = set.searched ? &set.deadlocks : NULL,
			       .max_depth = o->max_depth ? o->max_depth : STB_DUMP_DEFAULT_DEPTH,
			       .runtime_frames = o->runtime_frames != 0, .lines = o->lines != 0,
			       .runtime_hint = "stb_dump_opts.runtime_frames = 1"};
	/* Every format: runtime/stacks/report/, shared with stb-bpf-loader. */
	stb_trace_self_tools(&r.unw, &r.sym);
	rc = stb_report_write(&r, set.tasks, set.n, o->format);
	fflush(out);
	if (rc == 0)
		rc = (int)set.n;
cleanup:
	stb_task_set_free(&set);
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
