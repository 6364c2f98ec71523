/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb_dump: stacks of every live bthread and registered pthread, one section
 * per task or grouped by identical stack (count and ids), and the opt-in
 * signal ($STB_DUMP_SIGNAL) that dumps everything to stderr.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "trace.h"

#define STB_DUMP_DEFAULT_DEPTH 64u

/* One traced task. */
struct stb_dump_task {
	bthread_t id;
	unsigned state;
	int is_pthread;
	uint32_t tid;
	uint64_t since_ns;
	char name[40];
	int err;                 /* <0: trace failed */
	char error[128];
	unsigned nframes;
	uint64_t *ips;           /* nframes return addresses (ip of frame 0 exact if running) */
	int first_exact;         /* frame 0 is an exact ip (signal capture) */
	uint64_t hash;
	struct stb_dump_task *group_next;
};

static void stb_dump_header(FILE *out, const struct stb_dump_task *d, uint64_t now)
{
	fprintf(out, "%s %llu", d->is_pthread ? "pthread" : "bthread", (unsigned long long)d->id);
	if (d->name[0])
		fprintf(out, " \"%s\"", d->name);
	fprintf(out, " [%s", stb_state_name(d->state));
	if (d->state == STB_TASK_SUSPENDED && d->since_ns && now > d->since_ns)
		fprintf(out, ", %.3f s", (double)(now - d->since_ns) / 1e9);
	if (d->tid && d->state == STB_TASK_RUNNING)
		fprintf(out, ", tid %u", d->tid);
	fprintf(out, "]\n");
}

static void stb_dump_frames(FILE *out, const struct stb_dump_task *d)
{
	if (d->err < 0) {
		fprintf(out, "(trace failed: %s)\n", d->error[0] ? d->error : strerror(-d->err));
		return;
	}
	if (d->nframes == 0) {
		fprintf(out, "(no stack: %s)\n", stb_state_name(d->state));
		return;
	}
	char line[512];
	for (unsigned i = 0; i < d->nframes; i++) {
		struct stb_frame f;
		memset(&f, 0, sizeof(f));
		f.ip = d->ips[i];
		stb_trace_symbolize(f.ip, i > 0 || !d->first_exact, &f);
		stb_format_frame(line, sizeof(line), i, &f);
		fputs(line, out);
	}
}

struct stb_ip_collect {
	uint64_t *ips;
	unsigned n, max;
};

static int stb_collect_ip(const struct stb_frame *f, void *arg)
{
	struct stb_ip_collect *c = arg;
	if (c->n < c->max)
		c->ips[c->n++] = f->ip;
	return 0;
}

static uint64_t stb_hash_ips(const uint64_t *ips, unsigned n, unsigned state)
{
	uint64_t h = 1469598103934665603ull ^ state;
	for (unsigned i = 0; i < n; i++) {
		h ^= ips[i];
		h *= 1099511628211ull;
	}
	return h;
}

static bool stb_same_stack(const struct stb_dump_task *a, const struct stb_dump_task *b)
{
	return a->hash == b->hash && a->state == b->state && a->nframes == b->nframes &&
	       a->err == b->err && memcmp(a->ips, b->ips, a->nframes * sizeof(uint64_t)) == 0;
}

static int stb_dump_cmp_group(const void *x, const void *y)
{
	const struct stb_dump_task *a = *(struct stb_dump_task *const *)x;
	const struct stb_dump_task *b = *(struct stb_dump_task *const *)y;
	unsigned ca = 0, cb = 0;
	for (const struct stb_dump_task *p = a; p; p = p->group_next)
		ca++;
	for (const struct stb_dump_task *p = b; p; p = p->group_next)
		cb++;
	if (ca != cb)
		return ca > cb ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

static void stb_dump_grouped(FILE *out, struct stb_dump_task *tasks, size_t n)
{
	/* Open-addressing table of group leaders. */
	size_t cap = 16;
	while (cap < n * 2)
		cap <<= 1;
	struct stb_dump_task **tab = calloc(cap, sizeof(*tab));
	struct stb_dump_task **leaders = calloc(n ? n : 1, sizeof(*leaders));
	size_t ngroups = 0;
	if (!tab || !leaders) {
		fprintf(out, "(grouping failed: out of memory)\n");
		goto cleanup;
	}
	for (size_t i = n; i-- > 0;) {
		struct stb_dump_task *d = &tasks[i];
		size_t k = d->hash & (cap - 1);
		while (tab[k] && !stb_same_stack(tab[k], d))
			k = (k + 1) & (cap - 1);
		if (tab[k]) {
			d->group_next = tab[k]->group_next;
			tab[k]->group_next = d;
		} else {
			tab[k] = d;
			leaders[ngroups++] = d;
		}
	}
	qsort(leaders, ngroups, sizeof(*leaders), stb_dump_cmp_group);
	for (size_t g = 0; g < ngroups; g++) {
		struct stb_dump_task *d = leaders[g];
		unsigned count = 0;
		for (struct stb_dump_task *p = d; p; p = p->group_next)
			count++;
		fprintf(out, "%u %s [%s]:", count, count == 1 ? "task" : "tasks",
			stb_state_name(d->state));
		for (struct stb_dump_task *p = d; p; p = p->group_next)
			fprintf(out, " %llu", (unsigned long long)p->id);
		fputc('\n', out);
		stb_dump_frames(out, d);
		fputc('\n', out);
	}
cleanup:
	free(tab);
	free(leaders);
}

__attribute__((noinline)) int stb_dump(FILE *out, const struct stb_dump_opts *opts)
{
	static const struct stb_dump_opts dflt;
	uint64_t self_ip, self_sp, self_bp;
	STB_CALLER_FRAME(self_ip, self_sp, self_bp);
	const struct stb_dump_opts *o = opts ? opts : &dflt;
	if (!out || o->format != STB_DUMP_TEXT)
		return -EINVAL;
	unsigned depth = o->max_depth ? o->max_depth : STB_DUMP_DEFAULT_DEPTH;
	uint32_t nslots = stb_task_slots();
	struct stb_dump_task *tasks = calloc(nslots ? nslots : 1, sizeof(*tasks));
	uint64_t *ips = calloc((size_t)(nslots ? nslots : 1) * depth, sizeof(uint64_t));
	size_t n = 0;
	int rc = 0;
	if (!tasks || !ips) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (uint32_t slot = 0; slot < nslots; slot++) {
		struct stb_task *t = stb_task_at(slot);
		if (!t)
			continue;
		bthread_t id = __atomic_load_n(&t->pub->id, __ATOMIC_ACQUIRE);
		unsigned st = stb_task_state(t);
		if (st == STB_TASK_UNUSED || st == STB_TASK_DESTROYED || id == 0)
			continue;
		if (o->state_mask && !(o->state_mask & (1u << st)))
			continue;
		struct stb_dump_task *d = &tasks[n];
		d->ips = ips + n * depth;
		struct stb_ip_collect c = {.ips = d->ips, .max = depth};
		struct stb_trace_opts to = {.max_depth = depth, .no_symbols = 1,
					    .on_frame = stb_collect_ip, .arg = &c};
		struct stb_trace_info info;
		int r = stb_trace_impl(id, &to, NULL, 0, &info, self_ip, self_sp, self_bp);
		if (r == -ESRCH)
			continue; /* finished meanwhile */
		d->id = id;
		d->state = info.state;
		d->is_pthread = info.is_pthread;
		d->tid = info.tid;
		d->since_ns = info.since_ns;
		memcpy(d->name, info.name, sizeof(d->name));
		d->err = r < 0 ? r : 0;
		memcpy(d->error, info.error, sizeof(d->error));
		d->nframes = r < 0 ? 0 : c.n;
		d->first_exact = info.mode == STB_TRACE_SIGNAL;
		d->hash = stb_hash_ips(d->ips, d->nframes, d->state);
		n++;
	}
	uint64_t now = stb_now_coarse_ns();
	if (o->group) {
		stb_dump_grouped(out, tasks, n);
	} else {
		for (size_t i = 0; i < n; i++) {
			stb_dump_header(out, &tasks[i], now);
			stb_dump_frames(out, &tasks[i]);
			fputc('\n', out);
		}
	}
	fflush(out);
	rc = (int)n;
cleanup:
	free(tasks);
	free(ips);
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
