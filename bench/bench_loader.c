/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Benchmarks of stb-bpf-loader against live targets, beside the in-process
 * tracer and gdb: a full dump of 10,000 suspended bthreads, the capture of a
 * running one (BPF program vs signal handler), the yield throughput of a
 * target dumped periodically, and the same bthreads read from a core file
 * (--core) against gdb with bench/gdb_stb_dump.py on that core; --only scale:
 * every format on N parked bthreads and what a parked bthread costs the
 * target. Needs root. Results: docs/benchmarks.md.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <stb/abi.h>
#include <stb/stb.h>

#include "bpf_prog.h"
#include <signal.h>
#include <sys/wait.h>

#include "support/json_parse.h"
#include "support/ltarget.h"
#include "support/proc.h"
#include "target.h"

struct bench_opts {
	const char *loader, *target, *gdb_script;
	const char *baseline; /* --baseline: another stb-bpf-loader measured beside it (scale) */
	unsigned formats;   /* scale: the cases to run (bit per case), 0 = all */
	unsigned tasks;     /* suspended bthreads in the dump benchmark */
	unsigned rounds;    /* loader / in-process dumps */
	unsigned captures;  /* running-task captures */
	unsigned yield_pairs;
	bool gdb;
};

/* ---- small statistics ---- */

static int bench_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

struct bench_dist {
	double med, p90, p99, max, mean;
};

static struct bench_dist bench_stats(double *v, unsigned n)
{
	struct bench_dist d = {0};
	if (!n)
		return d;
	qsort(v, n, sizeof(*v), bench_cmp);
	double sum = 0;
	for (unsigned i = 0; i < n; i++)
		sum += v[i];
	d.med = v[n / 2];
	d.p90 = v[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1];
	d.p99 = v[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1];
	d.max = v[n - 1];
	d.mean = sum / n;
	return d;
}

static void bench_row(const char *what, const char *unit, double *v, unsigned n)
{
	struct bench_dist d = bench_stats(v, n);
	printf("  %-58s %9.2f %9.2f %9.2f %9.2f %9.2f  %s (n=%u)\n", what, d.med, d.p90, d.p99,
	       d.max, d.mean, unit, n);
}

static void bench_header(const char *title)
{
	printf("%s\n  %-58s %9s %9s %9s %9s %9s\n", title, "", "median", "p90", "p99", "max",
	       "mean");
}

static double bench_tv(const struct timeval *tv)
{
	return (double)tv->tv_sec * 1e3 + (double)tv->tv_usec / 1e3;
}

/* Number after "key" in text (NAN-free: -1 when absent). */
static double bench_after(const char *text, const char *key)
{
	const char *p = text ? strstr(text, key) : NULL;
	return p ? strtod(p + strlen(key), NULL) : -1.0;
}

static void bench_die(const char *fmt, const char *arg)
{
	fprintf(stderr, "bench_loader: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	exit(1);
}

static void bench_target_env(struct ts_ltarget *t, const char *path, const char *const *args,
			     char *const env[])
{
	int rc = ts_ltarget_start(t, path, args, env);
	if (rc != 0)
		bench_die("cannot start the target: %s", strerror(-rc));
}

static void bench_target(struct ts_ltarget *t, const char *path, const char *const *args)
{
	bench_target_env(t, path, args, NULL);
}

/* The target with o->tasks parked bthreads and nothing else (env: extra
 * "K=V" strings or NULL). */
static void bench_parked_target(const struct bench_opts *o, struct ts_ltarget *t,
				char *const env[])
{
	char many[16];
	snprintf(many, sizeof(many), "%u", o->tasks);
	const char *args[] = {"--many", many, "--workers", "4", "--butex", "0", "--sleep", "0",
			      "--mutex", "0", "--fd", "0", "--yield", "0", "--spin", "0",
			      "--pthread", "0", NULL};
	bench_target_env(t, o->target, args, env);
}

static uint64_t bench_stat(struct ts_ltarget *t, const char *key)
{
	uint64_t v = ts_ltarget_stat(t, key);
	if (v == UINT64_MAX)
		bench_die("the target does not answer (%s)", key);
	return v;
}

static void bench_quit(struct ts_ltarget *t)
{
	char bye[256];
	if (ts_ltarget_quit(t, bye, sizeof(bye)) != 0)
		bench_die("the target did not quit cleanly: %s", bye);
}

/* Runs argv to completion (10 minutes at most); wall and CPU time in ms.
 * Returns its exit code; *p holds its output (free it). */
static int bench_run_argv(char **argv, struct ts_proc *p, double *wall_ms, double *cpu_ms)
{
	uint64_t t0 = ts_now_ns();
	if (ts_proc_start(p, argv, NULL, NULL, NULL) != 0)
		bench_die("cannot start %s", argv[0]);
	if (ts_proc_wait(p, 600000) != 0)
		bench_die("%s ran for 10 minutes", argv[0]);
	*wall_ms = (double)(ts_now_ns() - t0) / 1e6;
	*cpu_ms = bench_tv(&p->ru.ru_utime) + bench_tv(&p->ru.ru_stime);
	return ts_proc_exit_code(p);
}

/* Runs the loader (argv without the program) to completion; *wall_ms and the
 * process's CPU time. Returns its exit code. */
static int bench_loader_run(const struct bench_opts *o, char **args, struct ts_proc *p,
			    double *wall_ms, double *cpu_ms)
{
	char *argv[32];
	int n = 0;
	argv[n++] = (char *)o->loader;
	for (int i = 0; args[i] && n < 31; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	return bench_run_argv(argv, p, wall_ms, cpu_ms);
}

/* ---- 1. full dump of many suspended bthreads ---- */

static void bench_dump(const struct bench_opts *o)
{
	struct ts_ltarget t;
	bench_parked_target(o, &t, NULL);
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	char reply[512];
	unsigned n = o->rounds;
	double *wall = calloc(n, sizeof(double)), *cpu = calloc(n, sizeof(double));
	double *trace = calloc(n, sizeof(double)), *hold_max = calloc(n, sizeof(double));
	double *hold_avg = calloc(n, sizeof(double)), *freeze = calloc(n, sizeof(double));
	double *inproc = calloc(n, sizeof(double)), *inproc_freeze = calloc(n, sizeof(double));
	double *idle_gap = calloc(n, sizeof(double));
	double *gwaits = calloc(n, sizeof(double)), *gwait_ms = calloc(n, sizeof(double));
	double ntasks = 0;

	/* Warm the page cache and the target's lazily touched pages. */
	char *warm[] = {"--pid", pid, "-o", "/dev/null", NULL};
	struct ts_proc p;
	double w, c;
	bench_loader_run(o, warm, &p, &w, &c);
	ts_proc_free(&p);

	for (unsigned i = 0; i < n; i++) {
		/* The heartbeat's longest gap without any tracer: the noise floor. */
		ts_ltarget_cmd(&t, "gapreset", reply, sizeof(reply));
		ts_sleep_ms(300);
		idle_gap[i] = (double)bench_stat(&t, "hb_max_gap_ns") / 1e6;

		ts_ltarget_cmd(&t, "gapreset", reply, sizeof(reply));
		uint64_t gw0 = bench_stat(&t, "gate_waits"), gn0 = bench_stat(&t, "gate_wait_ns");
		char *a[] = {"--pid", pid, "-v", "-o", "/dev/null", NULL};
		int code = bench_loader_run(o, a, &p, &wall[i], &cpu[i]);
		gwaits[i] = (double)(bench_stat(&t, "gate_waits") - gw0);
		gwait_ms[i] = (double)(bench_stat(&t, "gate_wait_ns") - gn0) / 1e6;
		if (code != 0)
			bench_die("loader failed: %s", p.err.p);
		const char *tt = strstr(p.err.p, " tasks traced in ");
		while (tt && tt > p.err.p && tt[-1] >= '0' && tt[-1] <= '9')
			tt--;
		ntasks = tt ? strtod(tt, NULL) : -1;
		trace[i] = bench_after(p.err.p, "tasks traced in ");
		hold_max[i] = bench_after(p.err.p, "tasks held ");
		hold_avg[i] = bench_after(p.err.p, "at most, ");
		ts_proc_free(&p);
		freeze[i] = (double)bench_stat(&t, "hb_max_gap_ns") / 1e6;

		ts_ltarget_cmd(&t, "gapreset", reply, sizeof(reply));
		if (ts_ltarget_cmd(&t, "dump", reply, sizeof(reply)) != 0 ||
		    strncmp(reply, "dump ", 5) != 0)
			bench_die("in-process dump failed: %s", reply);
		inproc[i] = (double)ts_field(reply, "ns") / 1e6;
		inproc_freeze[i] = (double)bench_stat(&t, "hb_max_gap_ns") / 1e6;
	}

	/* Per-task hold times of one run (-vv). */
	char *vv[] = {"--pid", pid, "-vv", "-o", "/dev/null", NULL};
	bench_loader_run(o, vv, &p, &w, &c);
	double *holds = calloc((size_t)o->tasks + 64, sizeof(double));
	unsigned nh = 0, over = 0;
	for (const char *s = p.err.p; s && (s = strstr(s, ": held ")) != NULL; s += 7) {
		if (nh < o->tasks + 64) {
			holds[nh] = strtod(s + 7, NULL);
			over += holds[nh] > 1000.0;
			nh++;
		}
	}
	ts_proc_free(&p);

	printf("\n1. Full dump of %u suspended bthreads (+1 heartbeat), %.0f tasks traced\n",
	       o->tasks, ntasks);
	bench_header("");
	bench_row("stb-bpf-loader: wall time, exec to exit", "ms", wall, n);
	bench_row("stb-bpf-loader: CPU time (user+sys)", "ms", cpu, n);
	bench_row("stb-bpf-loader: trace phase (hold, copy, unwind)", "ms", trace, n);
	bench_row("stb-bpf-loader: longest hold of one task", "us", hold_max, n);
	bench_row("stb-bpf-loader: mean hold", "us", hold_avg, n);
	bench_row("target heartbeat: longest gap during a loader run", "ms", freeze, n);
	bench_row("target: tasks that waited at a gate, per loader run", "", gwaits, n);
	bench_row("target: time spent waiting at gates, per loader run", "ms", gwait_ms, n);
	bench_row("target heartbeat: longest gap, no tracer (300 ms)", "ms", idle_gap, n);
	bench_row("in-process stb_dump to /dev/null", "ms", inproc, n);
	bench_row("target heartbeat: longest gap during stb_dump", "ms", inproc_freeze, n);
	bench_row("stb-bpf-loader -vv: per-task hold (one run)", "us", holds, nh);
	printf("  tasks held over 1 ms in that run: %u of %u\n", over, nh);
	free(holds);

	if (o->gdb) {
		char *argv[] = {"gdb", "-p", pid, "-batch", "-nx", "-x", (char *)o->gdb_script, NULL};
		ts_ltarget_cmd(&t, "gapreset", reply, sizeof(reply));
		uint64_t t0 = ts_now_ns();
		if (ts_proc_start(&p, argv, NULL, NULL, NULL) != 0 || ts_proc_wait(&p, 3600000) != 0)
			bench_die("gdb did not finish: %s", p.err.p ? p.err.p : "");
		double gw = (double)(ts_now_ns() - t0) / 1e6;
		double gfreeze = (double)bench_stat(&t, "hb_max_gap_ns") / 1e6;
		const char *sum = strstr(p.out.p, "gdb_stb_dump: ");
		if (!sum)
			bench_die("gdb's script failed: %s", p.err.p);
		printf("  gdb -batch (%s): wall %.0f ms, target frozen %.0f ms; %.*s\n", o->gdb_script,
		       gw, gfreeze, (int)strcspn(sum, "\n"), sum);
		struct bench_dist d = bench_stats(wall, n);
		printf("  gdb / stb-bpf-loader wall time: %.0fx\n", gw / d.med);
		ts_proc_free(&p);
	}
	if (bench_stat(&t, "signals") != 0)
		bench_die("the target received %s signal(s)", "some");
	bench_quit(&t);
	free(wall);
	free(cpu);
	free(trace);
	free(hold_max);
	free(hold_avg);
	free(freeze);
	free(inproc);
	free(inproc_freeze);
	free(idle_gap);
	free(gwaits);
	free(gwait_ms);
}

/* ---- 2. capture of a running task ---- */

static void bench_capture(const struct bench_opts *o)
{
	const char *args[] = {"--workers", "4", "--butex", "0", "--sleep", "0", "--mutex", "0",
			      "--fd", "0", "--yield", "0", "--spin", "1", "--pthread", "0", NULL};
	struct ts_ltarget t;
	bench_target(&t, o->target, args);
	const struct ts_chain *spin = ts_ltarget_chain(&t, "spin");
	if (!spin)
		bench_die("no spin bthread%s", "");
	uint64_t id = spin->ids[0];
	char pid[16], ids[32], reply[512];
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	snprintf(ids, sizeof(ids), "%" PRIu64, id);
	unsigned n = o->captures;

	/* a) the loader, one process per capture. */
	unsigned nl = n < 30 ? n : 30;
	double *l_req = calloc(nl, sizeof(double)), *l_prog = calloc(nl, sizeof(double));
	double *l_hold = calloc(nl, sizeof(double)), *l_wall = calloc(nl, sizeof(double));
	unsigned got = 0;
	for (unsigned i = 0; i < nl; i++) {
		char *a[] = {"--pid", pid, "--bthread", ids, "-vv", "--timeout", "2000", "-o",
			     "/dev/null", NULL};
		struct ts_proc p;
		double c;
		if (bench_loader_run(o, a, &p, &l_wall[got], &c) == 0 &&
		    strstr(p.err.p, "BPF request to record")) {
			l_hold[got] = bench_after(p.err.p, ": held ");
			l_req[got] = bench_after(p.err.p, "BPF request to record ");
			l_prog[got] = bench_after(p.err.p, "program ");
			got++;
		}
		ts_proc_free(&p);
	}

	/* b) the same capture program through loader/bpf_prog.c, kept loaded, with
	 * BPF run-time statistics. */
	char err[512];
	struct stb_target *tg = stb_target_open(t.pid, err, sizeof(err));
	if (!tg)
		bench_die("%s", err);
	struct stb_bpf_prog_opts co;
	stb_target_bpf_prog_opts(tg, STB_RECORD_MODE_REQUEST, &co);
	struct stb_bpf_prog *cap = stb_bpf_prog_open(t.pid, &co);
	if (!cap || stb_bpf_prog_sync_workers(cap) < 1)
		bench_die("BPF capture unavailable: %s", strerror(errno));
	int stats_rc = stb_bpf_prog_stats_enable(cap);
	struct stb_record *rec = malloc(sizeof(*rec));
	double *c_req = calloc(n, sizeof(double)), *c_prog = calloc(n, sizeof(double));
	double *c_run = calloc(n, sizeof(double));
	unsigned nc = 0, nrun = 0, misses = 0;
	struct stb_abi_task *entry = stb_target_task(tg, STB_ABI_SLOT(id));
	for (unsigned i = 0; i < n; i++) {
		struct stb_bpf_prog_stats s0, s1;
		struct stb_bpf_prog_timing tm;
		stb_bpf_prog_stats_read(cap, &s0);
		unsigned w = __atomic_load_n(&entry->worker, __ATOMIC_RELAXED);
		if (stb_bpf_prog_request(cap, w, id, 2000000, rec, &tm) != 0) {
			misses++;
			continue;
		}
		stb_bpf_prog_stats_read(cap, &s1);
		c_req[nc] = (double)(tm.seen_ns - tm.arm_ns) / 1e3;
		c_prog[nc] = (double)rec->prog_ns / 1e3;
		nc++;
		if (s1.run_cnt > s0.run_cnt)
			c_run[nrun++] = (double)(s1.run_time_ns - s0.run_time_ns) / 1e3 /
					(double)(s1.run_cnt - s0.run_cnt);
		ts_sleep_ms(1);
	}
	free(rec);
	stb_bpf_prog_close(cap);
	stb_target_close(tg);

	/* c) the in-process tracer: signal mode. */
	double *s_held = calloc(n, sizeof(double)), *s_total = calloc(n, sizeof(double));
	unsigned ns = 0;
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "trace %" PRIu64, id);
	for (unsigned i = 0; i < n; i++) {
		if (ts_ltarget_cmd(&t, cmd, reply, sizeof(reply)) != 0 ||
		    strncmp(reply, "trace rc=", 9) != 0)
			bench_die("in-process trace failed: %s", reply);
		if (strtol(reply + 9, NULL, 10) <= 0 || ts_field(reply, "mode") != STB_TRACE_SIGNAL)
			continue;
		s_held[ns] = (double)ts_field(reply, "held_ns") / 1e3;
		s_total[ns] = (double)ts_field(reply, "ns") / 1e3;
		ns++;
		ts_sleep_ms(1);
	}

	printf("\n2. Capture of a running (spinning) bthread\n");
	bench_header("");
	bench_row("stb-bpf-loader --bthread: wall time, exec to exit", "ms", l_wall, got);
	bench_row("stb-bpf-loader: request to record (arm -> ring buffer)", "us", l_req, got);
	bench_row("stb-bpf-loader: lease held (request to stack)", "us", l_hold, got);
	bench_row("stb-bpf-loader: BPF program time (record prog_ns)", "us", l_prog, got);
	bench_row("capture.c, program kept loaded: request to record", "us", c_req, nc);
	bench_row("capture.c: BPF program time (record prog_ns)", "us", c_prog, nc);
	if (stats_rc == 0)
		bench_row("capture.c: BPF program time (bpf_stats run_time_ns)", "us", c_run, nrun);
	else
		printf("  bpf_stats unavailable: %s\n", strerror(-stats_rc));
	printf("  capture.c misses (no record within 2 s): %u\n", misses);
	bench_row("in-process stb_trace, signal mode: task held (held_ns)", "us", s_held, ns);
	bench_row("in-process stb_trace, signal mode: whole call", "us", s_total, ns);
	bench_quit(&t);
	free(l_req);
	free(l_prog);
	free(l_hold);
	free(l_wall);
	free(c_req);
	free(c_prog);
	free(c_run);
	free(s_held);
	free(s_total);
}

/* ---- 3. yield throughput while dumped periodically ---- */

/* CPU time consumed so far by all threads of process pid (schedstat), ns. */
static uint64_t bench_proc_cpu_ns(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	uint64_t sum = 0;
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char f[320];
		snprintf(f, sizeof(f), "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
		FILE *fp = fopen(f, "re");
		unsigned long long v = 0;
		if (fp) {
			if (fscanf(fp, "%llu", &v) == 1)
				sum += v;
			fclose(fp);
		}
	}
	if (d)
		closedir(d);
	return sum;
}

/*
 * Alternating rounds of round_ms, undisturbed first and last, in between one
 * loader process every period_ms (a dump starts at each period tick, or as
 * soon as the previous one ended when it took longer). Each disturbed round
 * is compared with the mean of the undisturbed rounds around it, by wall
 * throughput and by yields per CPU-second of the target (on a shared machine
 * the CPU time the target gets varies a lot; per CPU-second it does not).
 */
static void bench_yield_rounds(const struct bench_opts *o, struct ts_ltarget *t, unsigned period_ms,
			       unsigned round_ms)
{
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)t->pid);
	unsigned n = o->yield_pairs, cap = n * (round_ms / period_ms + 2);
	double *rate = calloc(2 * n + 1, sizeof(double)), *eff = calloc(2 * n + 1, sizeof(double));
	double *share = calloc(2 * n + 1, sizeof(double));
	double *quiet = calloc(n + 1, sizeof(double)), *busy = calloc(n, sizeof(double));
	double *quiet_eff = calloc(n + 1, sizeof(double)), *busy_eff = calloc(n, sizeof(double));
	double *ratio = calloc(n, sizeof(double)), *ratio_eff = calloc(n, sizeof(double));
	double *loader_share = calloc(n, sizeof(double)), *projected = calloc(n, sizeof(double));
	double *dumps = calloc(n, sizeof(double)), *dump_cpu = calloc(cap, sizeof(double));
	double *dump_wall = calloc(cap, sizeof(double)), *gate_ms = calloc(n, sizeof(double));
	unsigned ncpu = 0;
	for (unsigned i = 0; i < 2 * n + 1; i++) {
		bool disturbed = (i % 2) == 1;
		uint64_t gn0 = bench_stat(t, "gate_wait_ns");
		uint64_t y0 = bench_stat(t, "yields"), c0 = bench_proc_cpu_ns(t->pid);
		uint64_t t0 = ts_now_ns(), end = t0 + (uint64_t)round_ms * 1000000ull;
		unsigned k = 0;
		double loader_cpu = 0;
		for (uint64_t next = t0; disturbed && next < end; next += period_ms * 1000000ull) {
			while (ts_now_ns() < next)
				ts_sleep_ms(1);
			if (ts_now_ns() >= end)
				break;
			char *a[] = {"--pid", pid, "-o", "/dev/null", NULL};
			struct ts_proc p;
			double w, c;
			if (bench_loader_run(o, a, &p, &w, &c) != 0)
				bench_die("loader failed: %s", p.err.p);
			if (ncpu < cap) {
				dump_cpu[ncpu] = c;
				dump_wall[ncpu++] = w;
			}
			loader_cpu += c;
			ts_proc_free(&p);
			k++;
		}
		while (ts_now_ns() < end)
			ts_sleep_ms(1);
		uint64_t y1 = bench_stat(t, "yields"), c1 = bench_proc_cpu_ns(t->pid);
		uint64_t t1 = ts_now_ns();
		double secs = (double)(t1 - t0) / 1e9, cpu_s = (double)(c1 - c0) / 1e9;
		rate[i] = (double)(y1 - y0) / secs / 1e6;
		eff[i] = cpu_s > 0 ? (double)(y1 - y0) / cpu_s / 1e6 : 0;
		share[i] = cpu_s / secs;
		if (disturbed) {
			busy[i / 2] = rate[i];
			busy_eff[i / 2] = eff[i];
			dumps[i / 2] = (double)k / secs;
			loader_share[i / 2] = loader_cpu / 1e3 / secs;
			gate_ms[i / 2] = k ? (double)(bench_stat(t, "gate_wait_ns") - gn0) / 1e6 / k : 0;
		} else {
			quiet[i / 2] = rate[i];
			quiet_eff[i / 2] = eff[i];
		}
	}
	long ncpus = sysconf(_SC_NPROCESSORS_ONLN);
	for (unsigned i = 0; i < n; i++) {
		ratio[i] = 100.0 * rate[2 * i + 1] / ((rate[2 * i] + rate[2 * i + 2]) / 2);
		ratio_eff[i] = 100.0 * eff[2 * i + 1] / ((eff[2 * i] + eff[2 * i + 2]) / 2);
	}
	/* On a machine of its own the target's workers would use every CPU the
	 * loader leaves them, with one loader process per period. */
	struct bench_dist cpu_per_dump = bench_stats(dump_cpu, ncpu);
	double nominal = cpu_per_dump.med / (double)period_ms; /* CPUs */
	for (unsigned i = 0; i < n; i++)
		projected[i] = ratio_eff[i] * (1.0 - nominal / (double)ncpus);
	char what[96];
	printf("  -- one stb-bpf-loader process every %u ms, rounds of %u ms\n", period_ms, round_ms);
	bench_row("undisturbed: wall throughput", "M yields/s", quiet, n + 1);
	snprintf(what, sizeof(what), "loader every %u ms: wall throughput", period_ms);
	bench_row(what, "M yields/s", busy, n);
	bench_row("  disturbed / mean of the undisturbed rounds around it", "%", ratio, n);
	bench_row("undisturbed: yields per CPU-second of the target", "M", quiet_eff, n + 1);
	snprintf(what, sizeof(what), "loader every %u ms: yields per CPU-second", period_ms);
	bench_row(what, "M", busy_eff, n);
	bench_row("  disturbed / mean of the undisturbed rounds around it", "%", ratio_eff, n);
	bench_row("CPUs the target got (all rounds)", "CPUs", share, 2 * n + 1);
	bench_row("CPUs the loader used (disturbed rounds)", "CPUs", loader_share, n);
	snprintf(what, sizeof(what), "projected, dedicated %ld CPUs, a dump every %u ms", ncpus,
		 period_ms);
	bench_row(what, "%", projected, n);
	bench_row("dumps per second achieved", "", dumps, n);
	bench_row("one dump: loader wall time", "ms", dump_wall, ncpu);
	bench_row("one dump: loader CPU time (user+sys)", "ms", dump_cpu, ncpu);
	bench_row("one dump: time the target's workers waited at gates", "ms", gate_ms, n);
	free(rate);
	free(eff);
	free(share);
	free(quiet);
	free(busy);
	free(quiet_eff);
	free(busy_eff);
	free(ratio);
	free(ratio_eff);
	free(loader_share);
	free(projected);
	free(dumps);
	free(dump_cpu);
	free(dump_wall);
	free(gate_ms);
}

static void bench_yield(const struct bench_opts *o)
{
	const char *args[] = {"--workers", "4", "--yield", "100", "--butex", "0", "--sleep", "0",
			      "--mutex", "0", "--fd", "0", "--spin", "0", "--pthread", "0",
			      "--heartbeat", "0", NULL};
	struct ts_ltarget t;
	bench_target(&t, o->target, args);
	ts_sleep_ms(500);
	printf("\n3. Yield throughput, 4 workers x 100 yielding bthreads, alternating rounds\n");
	bench_header("");
	bench_yield_rounds(o, &t, 100, 1000);
	bench_yield_rounds(o, &t, 1000, 3000);
	bench_quit(&t);
}

/* ---- 4. post-mortem: the same bthreads from a core file ---- */

static void bench_core(const struct bench_opts *o)
{
	/* gdb's gcore stops copying a mapping at its first unreadable page:
	 * stack guards as mappings of their own (docs/postmortem.md). */
	static char guards[] = "STB_STACK_GUARDS=mprotect";
	char *const env[] = {guards, NULL};
	struct ts_ltarget t;
	bench_parked_target(o, &t, env);
	char dir[] = "/tmp/stb-bench-core.XXXXXX";
	if (!mkdtemp(dir))
		bench_die("mkdtemp: %s", strerror(errno));
	char prefix[64], core[96], pid[16], exe[PATH_MAX];
	snprintf(prefix, sizeof(prefix), "%s/core", dir);
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	snprintf(core, sizeof(core), "%s.%d", prefix, (int)t.pid);
	snprintf(exe, sizeof(exe), "%s", o->target);
	struct ts_proc p;
	double w, c;
	char *gcore[] = {"gcore", "-o", prefix, pid, NULL};
	if (bench_run_argv(gcore, &p, &w, &c) != 0)
		bench_die("gcore failed (is gdb installed?): %s", p.err.p ? p.err.p : "");
	ts_proc_free(&p);
	printf("\n4. Post-mortem: %u parked bthreads (+1 heartbeat) from a core (gcore %.0f ms)\n",
	       o->tasks, w);
	bench_quit(&t); /* the core is all that is needed now */

	unsigned n = o->rounds;
	double *wall = calloc(n, sizeof(double)), *cpu = calloc(n, sizeof(double));
	double *jwall = calloc(n, sizeof(double)), *jcpu = calloc(n, sizeof(double));
	double *trace = calloc(n, sizeof(double)), *open = calloc(n, sizeof(double));
	double *write = calloc(n, sizeof(double));
	if (!wall || !cpu || !jwall || !jcpu || !trace || !open || !write)
		bench_die("out of %s", "memory");
	char *text[] = {"--core", core, "-v", "-o", "/dev/null", NULL};
	char *json[] = {"--core", core, "-f", "json", "-o", "/dev/null", NULL};
	bench_loader_run(o, text, &p, &w, &c); /* the page cache */
	ts_proc_free(&p);
	double ntasks = -1;
	for (unsigned i = 0; i < n; i++) {
		if (bench_loader_run(o, text, &p, &wall[i], &cpu[i]) != 0)
			bench_die("loader --core failed: %s", p.err.p);
		const char *tt = strstr(p.err.p, " tasks traced in ");
		while (tt && tt > p.err.p && tt[-1] >= '0' && tt[-1] <= '9')
			tt--;
		ntasks = tt ? strtod(tt, NULL) : -1;
		trace[i] = bench_after(p.err.p, "tasks traced in ");
		open[i] = bench_after(p.err.p, "modules) in ");
		write[i] = bench_after(p.err.p, "output written in ");
		ts_proc_free(&p);
		if (bench_loader_run(o, json, &p, &jwall[i], &jcpu[i]) != 0)
			bench_die("loader --core -f json failed: %s", p.err.p);
		ts_proc_free(&p);
	}
	printf("  %.0f tasks traced\n", ntasks);
	bench_header("");
	bench_row("stb-bpf-loader --core: wall time, exec to exit (text)", "ms", wall, n);
	bench_row("stb-bpf-loader --core: CPU time (user+sys, text)", "ms", cpu, n);
	bench_row("stb-bpf-loader --core: core opened (notes, table, modules)", "ms", open, n);
	bench_row("stb-bpf-loader --core: tasks read and unwound", "ms", trace, n);
	bench_row("stb-bpf-loader --core: text written (symbolized)", "ms", write, n);
	bench_row("stb-bpf-loader --core -f json: wall time", "ms", jwall, n);
	bench_row("stb-bpf-loader --core -f json: CPU time", "ms", jcpu, n);
	if (o->gdb) {
		char *argv[] = {"gdb", "-batch", "-nx", "-x", (char *)o->gdb_script, exe, core, NULL};
		double gw, gc;
		bench_run_argv(argv, &p, &gw, &gc);
		const char *sum = p.out.p ? strstr(p.out.p, "gdb_stb_dump: ") : NULL;
		if (!sum)
			bench_die("gdb's script failed: %s", p.err.p ? p.err.p : "");
		printf("  gdb -batch -x %s PROGRAM CORE: wall %.0f ms, CPU %.0f ms; %.*s\n",
		       o->gdb_script, gw, gc, (int)strcspn(sum, "\n"), sum);
		struct bench_dist d = bench_stats(wall, n), dc = bench_stats(cpu, n);
		printf("  gdb / stb-bpf-loader --core: wall time %.0fx, CPU time %.0fx\n", gw / d.med,
		       gc / dc.med);
		ts_proc_free(&p);
	}
	unlink(core);
	rmdir(dir);
	free(wall);
	free(cpu);
	free(jwall);
	free(jcpu);
	free(trace);
	free(open);
	free(write);
}

/* ---- 5. continuous mode: one snapshot of a resident session vs a fresh run ---- */

static void bench_every(const struct bench_opts *o)
{
	struct ts_ltarget t;
	bench_parked_target(o, &t, NULL);
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	unsigned n = o->rounds;
	double *fresh = calloc(n, sizeof(double)), *fresh_cpu = calloc(n, sizeof(double));
	double *cont = calloc(64, sizeof(double));
	/* Both write the same pprof file (continuous mode's default format) into
	 * the same scratch directory. */
	char dir[] = "/tmp/stb-bench-every-XXXXXX";
	if (!mkdtemp(dir))
		bench_die("mkdtemp: %s", strerror(errno));
	char fresh_out[64];
	snprintf(fresh_out, sizeof(fresh_out), "%s/fresh.pb.gz", dir);
	struct ts_proc p;
	double w, c;
	char *warm[] = {"--pid", pid, "-f", "pprof", "-o", fresh_out, NULL};
	bench_loader_run(o, warm, &p, &w, &c);
	ts_proc_free(&p);
	for (unsigned i = 0; i < n; i++) {
		char *a[] = {"--pid", pid, "-f", "pprof", "-o", fresh_out, NULL};
		if (bench_loader_run(o, a, &p, &fresh[i], &fresh_cpu[i]) != 0)
			bench_die("loader failed: %s", p.err.p);
		ts_proc_free(&p);
	}
	/* The session: one snapshot every 500 ms into a scratch directory, each
	 * timed by the loader itself (-v: "wrote NAME (N tasks, X ms)"). */
	char *argv[] = {(char *)o->loader, "--pid", pid, "-f", "pprof", "--every", "500ms", "--out-dir", dir,
			"--keep", "2", "-v", NULL};
	if (ts_proc_start(&p, argv, NULL, NULL, NULL) != 0)
		bench_die("cannot start %s", o->loader);
	ts_sleep_ms(500 * (n + 2) + 300);
	kill(p.pid, SIGTERM);
	if (ts_proc_wait(&p, 60000) != 0 || ts_proc_exit_code(&p) != 0)
		bench_die("continuous mode failed: %s", p.err.p ? p.err.p : "");
	unsigned nc = 0;
	for (const char *s = p.err.p; s && (s = strstr(s, " tasks, ")) != NULL && nc < 64; s += 8)
		cont[nc++] = strtod(s + 8, NULL);
	ts_proc_free(&p);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench_loader: cannot remove %s\n", dir);
	if (nc < 2)
		bench_die("continuous mode wrote %s snapshots", nc ? "one" : "no");
	bench_header("5. Continuous mode (--every): one snapshot against a fresh loader run");
	printf("target: %u parked bthreads, pprof into the same directory; fresh: %u runs of\n"
	       "--pid P -f pprof -o D/fresh.pb.gz (exec to exit);\n"
	       "continuous: -f pprof --every 500ms --out-dir D -v, each snapshot as timed by the loader "
	       "(the first, which warms the session, left out)\n",
	       o->tasks, n);
	bench_row("fresh run, wall", "ms", fresh, n);
	bench_row("fresh run, CPU", "ms", fresh_cpu, n);
	bench_row("one continuous snapshot, wall", "ms", cont + 1, nc - 1);
	struct bench_dist f = bench_stats(fresh, n), k = bench_stats(cont + 1, nc - 1);
	printf("continuous / fresh (medians): %.2f (goal <= 0.5: %s)\n", k.med / f.med,
	       k.med / f.med <= 0.5 ? "met" : "NOT met");
	free(fresh);
	free(fresh_cpu);
	free(cont);
	bench_quit(&t);
}

/* ---- 6. many stacks: formats, time and memory, against a baseline loader ---- */

struct bench_scale_case {
	const char *key;           /* its name in --formats */
	const char *what;
	const char *const args[4]; /* after --pid P */
	const char *out;           /* "-o" target; NULL: a fresh file each run */
};

static const struct bench_scale_case bench_scale_cases[] = {
    {"group", "grouped text (--group), -o /dev/null", {"--group", NULL}, "/dev/null"},
    {"text", "text, -o /dev/null", {NULL}, "/dev/null"},
    {"json", "JSON, -o /dev/null", {"-f", "json", NULL}, "/dev/null"},
    {"json-file", "JSON, -o a new file", {"-f", "json", NULL}, NULL},
    {"pprof", "pprof, -o /dev/null", {"-f", "pprof", NULL}, "/dev/null"},
};
enum { BENCH_NCASES = sizeof(bench_scale_cases) / sizeof(bench_scale_cases[0]) };

/* --formats LIST (comma-separated case keys) as a mask; 0 on an unknown key. */
static unsigned bench_formats(const char *list)
{
	unsigned mask = 0;
	char buf[128];
	snprintf(buf, sizeof(buf), "%s", list);
	char *save = NULL;
	for (char *k = strtok_r(buf, ",", &save); k; k = strtok_r(NULL, ",", &save)) {
		unsigned c = 0;
		while (c < BENCH_NCASES && strcmp(k, bench_scale_cases[c].key) != 0)
			c++;
		if (c == BENCH_NCASES)
			return 0;
		mask |= 1u << c;
	}
	return mask;
}

/* What the target's parked bthreads cost, read from outside once they are
 * parked and before any loader run: RSS and PSS (smaps_rollup), the task
 * table's mapping and the heap (smaps), and the resident pages of every
 * parked task's usable stack [stack_lo, stack_hi) (pagemap, as root). */
struct bench_mem {
	uint64_t rss_kb, pss_kb, table_kb, heap_kb;
	uint64_t slots;       /* table slots in use (slot_hwm) */
	uint64_t stacks;      /* suspended tasks whose stack pages were read */
	uint64_t stack_pages; /* their resident pages */
	uint64_t one_page;    /* of them, stacks with exactly one resident page */
};

static void bench_mem_read(pid_t pid, struct bench_mem *m)
{
	memset(m, 0, sizeof(*m));
	char path[64], line[512];
	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	FILE *f = fopen(path, "re");
	while (f && fgets(line, sizeof(line), f)) {
		sscanf(line, "Rss: %" SCNu64, &m->rss_kb);
		sscanf(line, "Pss: %" SCNu64, &m->pss_kb);
	}
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	f = fopen(path, "re");
	int kind = 0; /* of the mapping the lines belong to: 1 table, 2 heap */
	while (f && fgets(line, sizeof(line), f)) {
		uint64_t kb;
		if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f'))
			kind = strstr(line, "/memfd:" STB_ABI_TABLE_NAME) ? 1
			       : strstr(line, "[heap]")                   ? 2
									  : 0;
		else if (sscanf(line, "Rss: %" SCNu64, &kb) == 1 && kind)
			*(kind == 1 ? &m->table_kb : &m->heap_kb) += kb;
	}
	if (f)
		fclose(f);

	char err[512];
	struct stb_target *tg = stb_target_open(pid, err, sizeof(err));
	if (!tg)
		bench_die("%s", err);
	snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pid);
	int pm = open(path, O_RDONLY | O_CLOEXEC);
	if (pm < 0)
		bench_die("cannot open the target's pagemap: %s", strerror(errno));
	uint64_t hwm = __atomic_load_n(&tg->hdr->slot_hwm, __ATOMIC_RELAXED);
	m->slots = hwm < tg->info.capacity ? hwm : tg->info.capacity;
	uint64_t pages[512]; /* stacks up to 2 MiB: every small and default one */
	for (uint32_t s = 0; s < m->slots; s++) {
		struct stb_abi_task *e = stb_target_task(tg, s);
		if (!e || STB_ABI_STATE(__atomic_load_n(&e->word, __ATOMIC_ACQUIRE)) !=
			      STB_TASK_SUSPENDED)
			continue;
		uint64_t lo = e->stack_lo & ~4095ull, hi = e->stack_hi;
		if (hi <= lo || hi - lo > sizeof(pages) / 8 * 4096)
			continue;
		size_t np = (size_t)((hi - lo + 4095) / 4096);
		if (pread(pm, pages, np * 8, (off_t)(lo / 4096 * 8)) != (ssize_t)(np * 8))
			continue;
		unsigned r = 0;
		for (size_t i = 0; i < np; i++)
			r += (unsigned)(pages[i] >> 63);
		m->stacks++;
		m->stack_pages += r;
		m->one_page += r == 1;
	}
	close(pm);
	stb_target_close(tg);
}

static void bench_mem_print(const struct bench_mem *m, unsigned tasks)
{
	double n = tasks ? tasks : 1, stack_kb = (double)m->stack_pages * 4.0;
	double rest = (double)m->rss_kb - (double)m->table_kb - (double)m->heap_kb - stack_kb;
	printf("  the target once parked: RSS %.1f MB, PSS %.1f MB: %.0f / %.0f bytes per parked "
	       "bthread\n",
	       (double)m->rss_kb / 1024.0, (double)m->pss_kb / 1024.0,
	       (double)m->rss_kb * 1024.0 / n, (double)m->pss_kb * 1024.0 / n);
	printf("    task table (memfd) %.1f MB, %.0f bytes per slot in use (%" PRIu64 " slots)\n",
	       (double)m->table_kb / 1024.0,
	       m->slots ? (double)m->table_kb * 1024.0 / (double)m->slots : 0.0, m->slots);
	printf("    stacks %.1f MB resident: %.0f bytes per parked stack, %.3f pages "
	       "(%" PRIu64 " of %" PRIu64 " with one page)\n",
	       stack_kb / 1024.0, m->stacks ? stack_kb * 1024.0 / (double)m->stacks : 0.0,
	       m->stacks ? (double)m->stack_pages / (double)m->stacks : 0.0, m->one_page,
	       m->stacks);
	printf("    heap %.1f MB (%.0f bytes per bthread); the rest (task records, workers, "
	       "code) %.1f MB (%.0f bytes per bthread)\n",
	       (double)m->heap_kb / 1024.0, (double)m->heap_kb * 1024.0 / n, rest / 1024.0,
	       rest * 1024.0 / n);
}

static void bench_scale(const struct bench_opts *o)
{
	const struct bench_scale_case *cases = bench_scale_cases;
	enum { NCASES = BENCH_NCASES };
	unsigned mask = o->formats ? o->formats : (1u << NCASES) - 1;
	/* The default table when the tasks fit in it (1,048,576 slots). */
	char cap[64];
	snprintf(cap, sizeof(cap), "STB_TABLE_CAPACITY=%u", o->tasks + 4096);
	char *env[] = {cap, NULL};
	bool dflt = (uint64_t)o->tasks + 4096 <= STB_ABI_DEFAULT_CAPACITY;
	struct ts_ltarget t;
	uint64_t s0 = ts_now_ns();
	bench_parked_target(o, &t, dflt ? NULL : env);
	double start_s = (double)(ts_now_ns() - s0) / 1e9;
	struct bench_mem mem;
	bench_mem_read(t.pid, &mem);
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)t.pid);
	const char *loaders[2] = {o->loader, o->baseline};
	unsigned nl = o->baseline ? 2 : 1, n = o->rounds;
	double *v = calloc((size_t)2 * NCASES * 3 * n, sizeof(double));
	if (!v)
		bench_die("out of memory%s", "");
#define SCALE_V(l, c, k, i) v[(((size_t)(l) * NCASES + (c)) * 3 + (k)) * n + (i)]
	char dir[] = "/tmp/stb-bench-scale-XXXXXX";
	if (!mkdtemp(dir))
		bench_die("mkdtemp: %s", strerror(errno));
	char file[64];
	snprintf(file, sizeof(file), "%s/out.json", dir);
	struct bench_opts lo = *o;
	struct ts_proc p;
	double w, c;
	for (unsigned l = 0; l < nl; l++) { /* warm the page cache and the target */
		lo.loader = loaders[l];
		char *warm[] = {"--pid", pid, "--group", "-o", "/dev/null", NULL};
		bench_loader_run(&lo, warm, &p, &w, &c);
		ts_proc_free(&p);
	}
	for (unsigned i = 0; i < n; i++) {
		for (unsigned c0 = 0; c0 < NCASES; c0++) {
			for (unsigned k = 0; k < nl && (mask >> c0 & 1); k++) {
				unsigned l = (i + k) % nl; /* who goes first alternates */
				lo.loader = loaders[l];
				char *a[12];
				unsigned na = 0;
				a[na++] = "--pid";
				a[na++] = pid;
				for (unsigned x = 0; cases[c0].args[x]; x++)
					a[na++] = (char *)cases[c0].args[x];
				a[na++] = "-o";
				a[na++] = (char *)(cases[c0].out ? cases[c0].out : file);
				a[na] = NULL;
				if (bench_loader_run(&lo, a, &p, &SCALE_V(l, c0, 0, i),
						     &SCALE_V(l, c0, 1, i)) != 0)
					bench_die("loader failed: %s", p.err.p);
				SCALE_V(l, c0, 2, i) = (double)p.ru.ru_maxrss / 1024.0;
				ts_proc_free(&p);
				unlink(file);
			}
		}
	}
	rmdir(dir);
	printf("\n6. %u parked bthreads (+1 heartbeat), each format %u times%s\n", o->tasks, n,
	       o->baseline ? "; the baseline loader alternating with this one" : "");
	printf("  table: %s; the target started and parked them in %.1f s\n",
	       dflt ? "the default capacity" : cap, start_s);
	bench_mem_print(&mem, o->tasks);
	bench_header("");
	for (unsigned l = 0; l < nl; l++) {
		for (unsigned c0 = 0; c0 < NCASES; c0++) {
			char what[128];
			static const char *const kinds[3][2] = {
			    {"wall", "ms"}, {"CPU", "ms"}, {"max RSS", "MB"}};
			for (unsigned k = 0; k < 3 && (mask >> c0 & 1); k++) {
				snprintf(what, sizeof(what), "%s%s: %s", l ? "baseline " : "",
					 cases[c0].what, kinds[k][0]);
				bench_row(what, kinds[k][1], &SCALE_V(l, c0, k, 0), n);
			}
		}
	}
	/* Medians (bench_stats sorted each row). */
	double g = SCALE_V(0, 0, 0, n / 2);
	if ((mask & 1) && (mask & 4))
		printf("  JSON / grouped wall (this loader): %.2f to /dev/null\n",
		       SCALE_V(0, 2, 0, n / 2) / g);
	if ((mask & 1) && (mask & 8))
		printf("  JSON / grouped wall (this loader): %.2f to a file\n",
		       SCALE_V(0, 3, 0, n / 2) / g);
	for (unsigned c0 = 0; c0 < NCASES && nl == 2; c0++)
		if (mask >> c0 & 1)
			printf("  this / baseline, %s: wall %.2f, max RSS %.2f\n", cases[c0].what,
			       SCALE_V(0, c0, 0, n / 2) / SCALE_V(1, c0, 0, n / 2),
			       SCALE_V(0, c0, 2, n / 2) / SCALE_V(1, c0, 2, n / 2));
#undef SCALE_V
	free(v);
	bench_quit(&t);
}

static const char *bench_default(const char *env, const char *def)
{
	const char *v = getenv(env);
	return v && *v ? v : def;
}

int main(int argc, char **argv)
{
	struct bench_opts o = {
		.loader = bench_default("STB_LOADER", STB_BENCH_LOADER),
		.target = bench_default("STB_LOADER_TARGET", STB_BENCH_TARGET),
		.gdb_script = bench_default("STB_GDB_SCRIPT", STB_BENCH_GDB_SCRIPT),
		.tasks = 10000, .rounds = 7, .captures = 200, .yield_pairs = 8, .gdb = true,
	};
	bool dump = true, capture = true, yield = true, core = true, every = true, scale = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--no-gdb") == 0)
			o.gdb = false;
		else if (strcmp(argv[i], "--quick") == 0) {
			o.rounds = 3;
			o.captures = 30;
			o.yield_pairs = 2;
			o.gdb = false;
		} else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
			const char *w = argv[++i];
			dump = strcmp(w, "dump") == 0;
			capture = strcmp(w, "capture") == 0;
			yield = strcmp(w, "yield") == 0;
			core = strcmp(w, "core") == 0;
			every = strcmp(w, "every") == 0;
			scale = strcmp(w, "scale") == 0;
			if (!dump && !capture && !yield && !core && !every && !scale) {
				fprintf(stderr, "bench_loader: unknown benchmark '%s'\n", w);
				return 2;
			}
		} else if (strcmp(argv[i], "--baseline") == 0 && i + 1 < argc) {
			o.baseline = argv[++i];
		} else if (strcmp(argv[i], "--formats") == 0 && i + 1 < argc) {
			o.formats = bench_formats(argv[++i]);
			if (!o.formats) {
				fprintf(stderr, "bench_loader: --formats wants a list of "
						"group,text,json,json-file,pprof\n");
				return 2;
			}
		} else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
			o.rounds = (unsigned)strtoul(argv[++i], NULL, 10);
			if (o.rounds == 0 || o.rounds > 1000) {
				fprintf(stderr, "bench_loader: --rounds wants 1..1000\n");
				return 2;
			}
		} else if (strcmp(argv[i], "--tasks") == 0 && i + 1 < argc) {
			o.tasks = (unsigned)strtoul(argv[++i], NULL, 10);
		} else {
			fprintf(stderr,
				"usage: bench_loader [--quick] [--no-gdb] [--tasks N] [--rounds N]\n"
				"                    [--only dump|capture|yield|core|every|scale]\n"
				"                    [--baseline OTHER-STB-BPF-LOADER]\n"
				"                    [--formats group,text,json,json-file,pprof]\n"
				"scale (only with --only scale): every output format (or those of\n"
				"--formats) on --tasks parked bthreads, wall/CPU/max RSS, beside the\n"
				"--baseline loader if given, and what a parked bthread costs the target.\n"
				"Needs root. Paths: $STB_LOADER, $STB_LOADER_TARGET, $STB_GDB_SCRIPT.\n");
			return 2;
		}
	}
	if (geteuid() != 0) {
		fprintf(stderr, "bench_loader: run it as root (BPF, perf events, ptrace)\n");
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	double load[3] = {0};
	FILE *f = fopen("/proc/loadavg", "re");
	if (f) {
		if (fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
			load[0] = -1;
		fclose(f);
	}
	printf("bench_loader: loader %s, target %s; %ld CPUs, load average %.2f %.2f %.2f\n",
	       o.loader, o.target, sysconf(_SC_NPROCESSORS_ONLN), load[0], load[1], load[2]);
	if (dump)
		bench_dump(&o);
	if (capture)
		bench_capture(&o);
	if (yield)
		bench_yield(&o);
	if (core)
		bench_core(&o);
	if (every)
		bench_every(&o);
	if (scale)
		bench_scale(&o);
	return 0;
}
