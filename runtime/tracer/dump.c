/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb_dump: stacks of every live bthread and registered pthread, one section
 * per task or grouped by identical stack (count and ids), and the opt-in
 * signal ($STB_DUMP_SIGNAL) that dumps everything to stderr. The task
 * collection (stb_collect_tasks) is shared with the debug HTTP endpoint.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "pprof.h"
#include "report.h"
#include "trace.h"

#define STB_DUMP_DEFAULT_DEPTH 64u

struct stb_frame_collect {
	struct stb_frame *frames;
	unsigned n, max;
};

static int stb_collect_frame(const struct stb_frame *f, void *arg)
{
	struct stb_frame_collect *c = arg;
	if (c->n < c->max)
		c->frames[c->n++] = *f;
	return 0;
}

/* Fills d from the table entry of t without tracing it. */
static void stb_collect_entry(struct stb_task *t, bthread_t id, unsigned st,
			      struct stb_report_task *d)
{
	d->id = id;
	d->state = st;
	d->mode = STB_TRACE_NO_STACK;
	d->is_pthread = (t->flags & STB_TASK_F_PTHREAD) != 0;
	if (st == STB_TASK_RUNNING || d->is_pthread)
		d->tid = __atomic_load_n(&t->pub->tid, __ATOMIC_RELAXED);
	d->since_ns = st == STB_TASK_SUSPENDED ? t->pub->since_ns : 0;
	memcpy(d->name, t->pub->name, sizeof(d->name));
	d->name[sizeof(d->name) - 1] = '\0';
}

/* Traces task id into d (frames without symbols). Returns -ESRCH if it finished. */
static int stb_collect_trace(bthread_t id, unsigned depth, struct stb_frame *frames,
			     struct stb_report_task *d, uint64_t self_ip, uint64_t self_sp,
			     uint64_t self_bp)
{
	struct stb_frame_collect c = {.frames = frames, .max = depth};
	/* Symbols are looked up when printing: once per group when grouped. */
	struct stb_trace_opts to = {.max_depth = depth, .no_symbols = 1,
				    .on_frame = stb_collect_frame, .arg = &c};
	struct stb_trace_info info;
	int r = stb_trace_impl(id, &to, NULL, 0, &info, self_ip, self_sp, self_bp);
	if (r == -ESRCH)
		return r;
	d->id = id;
	d->state = info.state;
	d->mode = info.mode;
	d->is_pthread = info.is_pthread;
	d->tid = info.tid;
	d->since_ns = info.since_ns;
	memcpy(d->name, info.name, sizeof(d->name));
	d->err = r < 0 ? r : 0;
	memcpy(d->error, info.error, sizeof(d->error));
	d->truncated = info.truncated;
	d->frames = c.frames;
	d->nframes = r < 0 ? 0 : c.n;
	return 0;
}

void stb_task_set_free(struct stb_task_set *set)
{
	free(set->tasks);
	free(set->frames);
	memset(set, 0, sizeof(*set));
}

int stb_collect_tasks(bthread_t only, unsigned depth, unsigned state_mask, bool stacks,
		      uint64_t self_ip, uint64_t self_sp, uint64_t self_bp, struct stb_task_set *set)
{
	memset(set, 0, sizeof(*set));
	if (depth == 0)
		depth = STB_DUMP_DEFAULT_DEPTH;
	uint32_t nslots = stb_task_slots();
	size_t cap = only ? 1 : (nslots ? nslots : 1);
	set->tasks = calloc(cap, sizeof(*set->tasks));
	/* Each trace goes to scratch, then its frames are appended to one arena
	 * that grows as needed (100,000 tasks do not need 100,000 x depth frames). */
	struct stb_frame *scratch = stacks ? calloc(depth, sizeof(*scratch)) : NULL;
	size_t used = 0, room = 0;
	int rc = 0;
	if (!set->tasks || (stacks && !scratch)) {
		rc = -ENOMEM;
		goto cleanup;
	}
	uint32_t first = 0, last = nslots;
	if (only) {
		if (!stb_task_lookup(only)) {
			rc = -ESRCH;
			goto cleanup;
		}
		first = (uint32_t)only;
		last = first + 1;
	}
	for (uint32_t slot = first; slot < last && set->n < cap; slot++) {
		struct stb_task *t = stb_task_at(slot);
		if (!t)
			continue;
		bthread_t id = __atomic_load_n(&t->pub->id, __ATOMIC_ACQUIRE);
		unsigned st = stb_task_state(t);
		if (st == STB_TASK_UNUSED || st == STB_TASK_DESTROYED || id == 0 ||
		    (only && id != only))
			continue;
		if (state_mask && !(state_mask & (1u << st)))
			continue;
		struct stb_report_task *d = &set->tasks[set->n];
		if (!stacks) {
			stb_collect_entry(t, id, st, d);
		} else if (stb_collect_trace(id, depth, scratch, d, self_ip, self_sp, self_bp) != 0) {
			continue; /* finished meanwhile */
		} else if (d->nframes) {
			if (used + d->nframes > room) {
				size_t nroom = room ? room * 2 : 4096;
				while (nroom < used + d->nframes)
					nroom *= 2;
				struct stb_frame *grown = realloc(set->frames, nroom * sizeof(*grown));
				if (!grown) {
					rc = -ENOMEM;
					goto cleanup;
				}
				set->frames = grown;
				room = nroom;
			}
			memcpy(set->frames + used, scratch, d->nframes * sizeof(*scratch));
			used += d->nframes;
		}
		set->n++;
	}
	/* The arena moved while growing: point each task at its frames now. */
	for (size_t i = 0, off = 0; stacks && i < set->n; i++) {
		set->tasks[i].frames = set->tasks[i].nframes ? set->frames + off : NULL;
		off += set->tasks[i].nframes;
	}
	if (only && set->n == 0)
		rc = -ESRCH;
cleanup:
	free(scratch);
	if (rc)
		stb_task_set_free(set);
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
	struct stb_task_set set;
	int rc = stb_collect_tasks(0, o->max_depth, o->state_mask, true, self_ip, self_sp, self_bp,
				   &set);
	if (rc < 0)
		goto cleanup;
	struct stb_report_meta meta = {.producer = "stb_dump", .pid = (int)getpid()};
	struct stb_report r = {.out = out, .now_ns = stb_now_coarse_ns(), .group = o->group != 0,
			       .meta = &meta};
	/* Every format: runtime/stacks/report.c and pprof.c, shared with stb-bpf-loader. */
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

static int stb_dump_pipe[2] = {-1, -1};

static void stb_dump_on_signal(int sig)
{
	(void)sig;
	int saved = errno;
	char c = 1;
	ssize_t rc = write(stb_dump_pipe[1], &c, 1);
	(void)rc;
	errno = saved;
}

static void *stb_dump_thread(void *arg)
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
		fprintf(stderr, "==== stb: dump of all bthreads (pid %d) ====\n", (int)getpid());
		int rc = stb_dump(stderr, NULL);
		if (rc < 0)
			fprintf(stderr, "stb: dump failed: %s\n", strerror(-rc));
		fprintf(stderr, "==== stb: end of dump (%d tasks) ====\n", rc < 0 ? 0 : rc);
	}
}

/* Parses "SIGQUIT", "QUIT", "quit" or a number; 1 means the default SIGQUIT. */
static int stb_parse_signal(const char *s)
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
	int sig = stb_parse_signal(env);
	if (sig < 0) {
		fprintf(stderr, "stb: ignoring STB_DUMP_SIGNAL=%s (want QUIT, USR1, USR2, ... or a "
				"number)\n", env);
		return;
	}
	if (pipe2(stb_dump_pipe, O_CLOEXEC) != 0)
		goto fail;
	pthread_t th;
	if (pthread_create(&th, NULL, stb_dump_thread, NULL) != 0)
		goto fail;
	pthread_detach(th);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = stb_dump_on_signal;
	sa.sa_flags = SA_RESTART;
	if (sigaction(sig, &sa, NULL) != 0)
		goto fail;
	return;
fail:
	fprintf(stderr, "stb: cannot set up STB_DUMP_SIGNAL: %s\n", strerror(errno));
}
