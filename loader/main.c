/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader: prints the stacks of the bthreads of another, running
 * process. Suspended and ready tasks are unwound from their saved context
 * read with process_vm_readv; running ones are captured by the BPF program on
 * their worker. The target gets no signal and is never ptrace-stopped.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "capture.h"
#include "hold.h"
#include "offcpu.h"
#include "record.h"
#include "pprof.h"
#include "profile.h"
#include "report.h"
#include "symbolize.h"
#include "target.h"
#include "unwind.h"
#include "util.h"

#define STB_EXIT_OK 0
#define STB_EXIT_FAIL 1
#define STB_EXIT_USAGE 64

#define STB_LOADER_COPY_MAX (256u << 10)
#define STB_LOADER_MAX_IDS 1024u
#define STB_LOADER_CAPTURE_SLICE_US 5000u

enum stb_format { STB_FMT_TEXT, STB_FMT_JSON, STB_FMT_PPROF, STB_FMT_FOLDED };

struct stb_loader_opts {
	pid_t pid;
	uint64_t ids[STB_LOADER_MAX_IDS];
	unsigned nids;
	unsigned state_mask;
	bool group;
	unsigned max_depth;
	int format;
	int timeout_ms;
	int verbose;
	const char *output;
	/* --profile (loader/profile.c) */
	bool profile;
	bool format_set;
	uint64_t duration_ns;
	unsigned freq;
};

struct stb_loader {
	struct stb_loader_opts o;
	struct stb_target *tg;
	struct stb_unw_proc *unw;
	struct stb_sym *sym;
	struct stb_capture *cap;      /* NULL: context mode only */
	char cap_note[256];
	bool cap_tried;                 /* stb_loader_capture() ran (cap or cap_note set) */
	uint8_t *buf;
	struct stb_capture_record *rec;
	struct stb_frame *scratch;    /* max_depth frames */
	bool target_gone;
	unsigned fault_hold_ms;       /* $STB_LOADER_FAULT_HOLD_MS (tests only) */
	unsigned failed;              /* tasks that could not be traced */
	unsigned missing;             /* --bthread ids that do not exist */
	/* -v timings: how long tasks were held (lease taken to released) and
	 * what the BPF captures cost (request to record; program run time). */
	uint64_t hold_max_ns, hold_sum_ns;
	unsigned nhold;
	uint64_t bpf_wait_max_ns, bpf_wait_sum_ns, bpf_prog_max_ns, bpf_prog_sum_ns;
	unsigned nbpf;
};


static void stb_usage(FILE *out)
{
	fprintf(out,
		"Usage: stb-bpf-loader --pid PID [options]\n"
		"Print the stacks of the bthreads of a running stb process, without stopping it:\n"
		"suspended and ready bthreads are unwound from their saved context, running ones are\n"
		"captured on their worker by a BPF program (no signal, no ptrace stop).\n"
		"\n"
		"Options:\n"
		"  -p, --pid PID        process to trace (required)\n"
		"  -b, --bthread ID     trace only this bthread (repeatable)\n"
		"  -a, --all            trace every live bthread and registered pthread (default)\n"
		"  -s, --state STATE    only tasks in STATE: running, ready, suspended, created,\n"
		"                       ready-without-stack, about-to-run, suspending (repeatable)\n"
		"  -g, --group          print each distinct stack once, with its count and ids\n"
		"  -d, --max-depth N    at most N frames per stack (default 64, max 1024)\n"
		"  -f, --format FMT     text (default), json (schema in docs/json.md), pprof\n"
		"                       (gzipped profile.proto for go tool pprof; the default\n"
		"                       for -o *.pb.gz) or folded (flame graph input: one line\n"
		"                       \"state;root;...;leaf count\" per distinct stack)\n"
		"  -t, --timeout MS     give up on one task after MS milliseconds (default 100)\n"
		"  -o, --output FILE    write to FILE instead of standard output (pprof is binary:\n"
		"                       it is never written to a terminal)\n"
		"\n"
		"Profiling (docs/profiling.md):\n"
		"      --profile        sample for a duration instead of one snapshot: on-CPU\n"
		"                       stacks of every worker (BPF, tagged with the running\n"
		"                       bthread) and off-CPU stacks of suspended and ready\n"
		"                       bthreads, at the same rate; formats pprof (default for\n"
		"                       -o *.pb.gz), folded (default otherwise) or json.\n"
		"                       Ctrl-C ends it early and still writes the profile\n"
		"      --duration D     how long: 10s (default), 500ms, 2m, or plain seconds\n"
		"      --freq HZ        samples and snapshots per second, 1..1000 (default 99)\n"
		"  -v, --verbose        progress and timings on standard error (how long tasks\n"
		"                       were held, BPF capture times); -vv: one line per task\n"
		"  -h, --help           this text\n"
		"\n"
		"Examples:\n"
		"  sudo stb-bpf-loader --pid 1234\n"
		"  sudo stb-bpf-loader --pid 1234 --group\n"
		"  sudo stb-bpf-loader --pid 1234 --state running --max-depth 16\n"
		"  sudo stb-bpf-loader --pid 1234 --bthread 4294967296 --format json -o stack.json\n"
		"  sudo stb-bpf-loader --pid 1234 --format pprof -o stacks.pb.gz && go tool pprof -top stacks.pb.gz\n"
		"  sudo stb-bpf-loader --pid 1234 --format folded | flamegraph.pl > stacks.svg\n"
		"  sudo stb-bpf-loader --pid 1234 --profile --duration 10s --freq 99 -o prof.pb.gz\n"
		"  sudo stb-bpf-loader --pid 1234 --profile --duration 30s --format folded -o prof.folded\n"
		"\n"
		"Needs root, or CAP_BPF+CAP_PERFMON (BPF capture of running bthreads) and\n"
		"CAP_SYS_PTRACE (reading the target). Without BPF it falls back to suspended and\n"
		"ready bthreads (and running ones blocked in a system call), and says so.\n"
		"Exit status: 0 success, 1 failure (including a target that exited mid-trace, or a\n"
		"requested bthread that does not exist), 64 usage error.\n");
}

static int stb_parse_state(const char *s)
{
	for (unsigned st = STB_TASK_CREATED; st < STB_TASK_DESTROYED; st++)
		if (strcmp(s, stb_state_name(st)) == 0)
			return (int)st;
	return -1;
}

/* Long-only options (--profile and its settings). */
enum { STB_OPT_PROFILE = 0x100, STB_OPT_DURATION, STB_OPT_FREQ };

/* Does path end with suffix? */
static bool stb_ends_with(const char *path, const char *suffix)
{
	size_t n = strlen(path), k = strlen(suffix);
	return n >= k && strcmp(path + n - k, suffix) == 0;
}

/* Checks and completes the --profile / --format choices after parsing. */
static int stb_check_profile_args(struct stb_loader_opts *o, bool all, bool duration_set)
{
	if (!o->profile && (duration_set || o->freq)) {
		fprintf(stderr, "stb-bpf-loader: --duration and --freq need --profile\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile && (o->nids || all || o->state_mask || o->group)) {
		fprintf(stderr, "stb-bpf-loader: --profile covers every bthread: --bthread, --all, "
				"--state and --group do not apply to it\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile && o->format_set && o->format == STB_FMT_TEXT) {
		fprintf(stderr, "stb-bpf-loader: --profile writes pprof, folded or json, not text\n");
		return STB_EXIT_USAGE;
	}
	if (!o->format_set && o->output &&
	    (stb_ends_with(o->output, ".pb.gz") || stb_ends_with(o->output, ".pprof")))
		o->format = STB_FMT_PPROF;
	else if (!o->format_set && o->profile)
		o->format = STB_FMT_FOLDED;
	if (o->format == STB_FMT_PPROF && !o->output && isatty(STDOUT_FILENO)) {
		fprintf(stderr, "stb-bpf-loader: refusing to write binary pprof data to a terminal: "
				"add -o FILE (e.g. -o stacks.pb.gz) or redirect standard output\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile && !duration_set)
		o->duration_ns = 10ull * 1000000000u;
	if (o->profile && !o->freq)
		o->freq = 99;
	return 0;
}

static int stb_parse_args(int argc, char **argv, struct stb_loader_opts *o)
{
	static const struct option longopts[] = {
		{"pid", required_argument, NULL, 'p'},
		{"bthread", required_argument, NULL, 'b'},
		{"all", no_argument, NULL, 'a'},
		{"state", required_argument, NULL, 's'},
		{"group", no_argument, NULL, 'g'},
		{"max-depth", required_argument, NULL, 'd'},
		{"format", required_argument, NULL, 'f'},
		{"timeout", required_argument, NULL, 't'},
		{"output", required_argument, NULL, 'o'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{"profile", no_argument, NULL, STB_OPT_PROFILE},
		{"duration", required_argument, NULL, STB_OPT_DURATION},
		{"freq", required_argument, NULL, STB_OPT_FREQ},
		{NULL, 0, NULL, 0},
	};
	memset(o, 0, sizeof(*o));
	o->max_depth = 64;
	o->timeout_ms = 100;
	bool all = false, duration_set = false;
	uint64_t v;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":p:b:as:gd:f:t:o:vh", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (!stb_parse_u64(optarg, 1, INT_MAX, &v)) {
				fprintf(stderr, "stb-bpf-loader: --pid: '%s' is not a process id\n", optarg);
				return STB_EXIT_USAGE;
			}
			o->pid = (pid_t)v;
			break;
		case 'b':
			if (!stb_parse_u64(optarg, 1, UINT64_MAX, &v) || (v >> 32) == 0) {
				fprintf(stderr, "stb-bpf-loader: --bthread: '%s' is not a bthread id "
						"(a decimal number as printed by the tracer)\n", optarg);
				return STB_EXIT_USAGE;
			}
			if (o->nids == STB_LOADER_MAX_IDS) {
				fprintf(stderr, "stb-bpf-loader: at most %u --bthread options\n",
					STB_LOADER_MAX_IDS);
				return STB_EXIT_USAGE;
			}
			o->ids[o->nids++] = v;
			break;
		case 'a':
			all = true;
			break;
		case 's': {
			int st = stb_parse_state(optarg);
			if (st < 0) {
				fprintf(stderr, "stb-bpf-loader: --state: unknown state '%s' (running, ready, "
						"suspended, created, ready-without-stack, about-to-run, "
						"suspending)\n", optarg);
				return STB_EXIT_USAGE;
			}
			o->state_mask |= 1u << st;
			break;
		}
		case 'g':
			o->group = true;
			break;
		case 'd':
			if (!stb_parse_u64(optarg, 1, 1024, &v)) {
				fprintf(stderr, "stb-bpf-loader: --max-depth: '%s' is not in 1..1024\n", optarg);
				return STB_EXIT_USAGE;
			}
			o->max_depth = (unsigned)v;
			break;
		case 'f':
			if (strcmp(optarg, "text") == 0) {
				o->format = STB_FMT_TEXT;
			} else if (strcmp(optarg, "json") == 0) {
				o->format = STB_FMT_JSON;
			} else if (strcmp(optarg, "pprof") == 0) {
				o->format = STB_FMT_PPROF;
			} else if (strcmp(optarg, "folded") == 0) {
				o->format = STB_FMT_FOLDED;
			} else {
				fprintf(stderr, "stb-bpf-loader: --format: '%s' is not text, json, pprof "
						"or folded\n", optarg);
				return STB_EXIT_USAGE;
			}
			o->format_set = true;
			break;
		case STB_OPT_PROFILE:
			o->profile = true;
			break;
		case STB_OPT_DURATION: {
			int e = stb_profile_parse_duration(optarg, &o->duration_ns);
			if (e != 0) {
				fprintf(stderr, "stb-bpf-loader: --duration: '%s' is not a duration (a "
						"whole number with ms, s or m, e.g. 500ms, 10s, 2m; "
						"from 1 ms to 24 hours)\n", optarg);
				return STB_EXIT_USAGE;
			}
			duration_set = true;
			break;
		}
		case STB_OPT_FREQ:
			if (!stb_parse_u64(optarg, 1, STB_PROFILE_FREQ_MAX, &v)) {
				fprintf(stderr, "stb-bpf-loader: --freq: '%s' is not in 1..%u Hz\n", optarg,
					STB_PROFILE_FREQ_MAX);
				return STB_EXIT_USAGE;
			}
			o->freq = (unsigned)v;
			break;
		case 't':
			if (!stb_parse_u64(optarg, 1, 60000, &v)) {
				fprintf(stderr, "stb-bpf-loader: --timeout: '%s' is not in 1..60000 ms\n", optarg);
				return STB_EXIT_USAGE;
			}
			o->timeout_ms = (int)v;
			break;
		case 'o':
			o->output = optarg;
			break;
		case 'v':
			o->verbose++;
			break;
		case 'h':
			stb_usage(stdout);
			return -1;
		case ':':
			fprintf(stderr, "stb-bpf-loader: option %s needs a value\n", argv[optind - 1]);
			return STB_EXIT_USAGE;
		default:
			fprintf(stderr, "stb-bpf-loader: unknown option %s (see --help)\n", argv[optind - 1]);
			return STB_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "stb-bpf-loader: unexpected argument '%s' (see --help)\n", argv[optind]);
		return STB_EXIT_USAGE;
	}
	if (!o->pid) {
		fprintf(stderr, "stb-bpf-loader: --pid is required (see --help)\n");
		return STB_EXIT_USAGE;
	}
	if (all && o->nids) {
		fprintf(stderr, "stb-bpf-loader: --all and --bthread exclude each other\n");
		return STB_EXIT_USAGE;
	}
	return stb_check_profile_args(o, all, duration_set);
}

/* ---- one task ---- */

static void stb_fail(struct stb_report_task *t, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void stb_fail(struct stb_report_task *t, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(t->error, sizeof(t->error), fmt, ap);
	va_end(ap);
	t->err = err;
}

static struct stb_capture *stb_loader_capture(struct stb_loader *L);

/* Holds, captures and unwinds task `id` in table slot `slot` into t. */
static void stb_trace_task(struct stb_loader *L, uint32_t slot, uint64_t id,
			   struct stb_report_task *t)
{
	struct stb_abi_task *p = stb_target_task(L->tg, slot);
	uint64_t start = stb_now_ns();
	uint64_t deadline = start + (uint64_t)L->o.timeout_ms * 1000000u;
	struct stb_frame_collect c = {.frames = L->scratch, .max = L->o.max_depth};
	struct stb_regs regs;
	struct stb_stack_copy copy;
	uint64_t lease;
	bool bpf = false, offcpu = false;

	memset(t, 0, sizeof(*t));
	t->id = id;
	memcpy(t->name, p->name, sizeof(t->name));
	t->name[sizeof(t->name) - 1] = '\0';
	t->is_pthread = (__atomic_load_n(&p->flags, __ATOMIC_RELAXED) & STB_ABI_TASK_F_PTHREAD) != 0;

	int rc = stb_hold_acquire(p, id, deadline, &lease);
	if (rc == 0 && L->fault_hold_ms) {
		/* Fault injection for tests: keep the lease as a stuck loader would. */
		struct timespec ts = {L->fault_hold_ms / 1000, (long)(L->fault_hold_ms % 1000) * 1000000};
		nanosleep(&ts, NULL);
	}
	uint64_t held_from = stb_now_ns(), held_ns = 0; /* time the lease was held */
	struct stb_capture_timing tm = {0};
	if (rc == -ESRCH) {
		stb_fail(t, rc, "bthread %" PRIu64 " has finished", id);
		return;
	}
	if (rc != 0) {
		stb_fail(t, rc, "another tracer held the task for the whole timeout");
		return;
	}
	for (unsigned spins = 0;; spins++) {
		if (spins && lease == 0)
			held_from = stb_now_ns(); /* held again from here */
		rc = spins ? stb_hold_refresh(p, id, deadline, &lease) : 0;
		if (rc == -EBUSY) {
			stb_fail(t, rc, "another tracer held the task for the whole timeout");
			break;
		}
		if (rc != 0 || __atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id) {
			stb_fail(t, -ESRCH, "bthread %" PRIu64 " has finished", id);
			rc = -ESRCH;
			break;
		}
		uint64_t w1 = __atomic_load_n(&p->word, __ATOMIC_ACQUIRE);
		unsigned st = STB_ABI_STATE(w1);
		t->state = st;
		rc = -EAGAIN;
		if (st == STB_TASK_READY || st == STB_TASK_SUSPENDED) {
			rc = stb_hold_copy_context(p, id, w1, lease, stb_target_read, L->tg,
						   L->buf, STB_LOADER_COPY_MAX, &regs, &copy);
			if (rc == 0) {
				t->mode = STB_TRACE_CONTEXT;
				t->since_ns = st == STB_TASK_SUSPENDED ? p->since_ns : 0;
			} else if (rc == -ESRCH) {
				L->target_gone = true;
				stb_fail(t, rc, "the target exited");
				break;
			} else if (rc != -EAGAIN && rc != -ETIMEDOUT) {
				stb_fail(t, rc, "cannot read the stack: %s", strerror(-rc));
				break;
			}
		} else if (st == STB_TASK_RUNNING) {
			uint32_t worker = __atomic_load_n(&p->worker, __ATOMIC_RELAXED);
			t->tid = __atomic_load_n(&p->tid, __ATOMIC_RELAXED);
			/* Blocked in a system call on its thread: nothing to sample, and
			 * no BPF needed (sp/pc from /proc). */
			long nr = -1;
			if (stb_offcpu_read(L->tg, (pid_t)t->tid, p->stack_hi, L->buf,
					    STB_LOADER_COPY_MAX, &regs, &copy, &nr) == 0) {
				t->mode = STB_TRACE_SYSCALL;
				offcpu = true;
				rc = 0;
				break;
			}
			/* The BPF record is one consistent snapshot taken on the worker
			 * while the task runs there (the program checks that it is the
			 * one running): holding it meanwhile would only stop it at its
			 * gate, in stb_gate_wait, if it tried to switch, and show that
			 * wait as its stack. Let it go before anything slow (loading the
			 * program, opening a perf event); the next attempt holds it again. */
			held_ns += stb_now_ns() - held_from;
			stb_hold_release(p, lease);
			lease = 0;
			if (!stb_loader_capture(L)) {
				stb_fail(t, -ENOTSUP, "running: not captured (%s)", L->cap_note);
				rc = -ENOTSUP;
				break;
			}
			if (t->is_pthread) {
				/* Not a worker: a perf event on its own thread, for this capture. */
				worker = STB_ABI_MAX_WORKERS;
				rc = stb_capture_set_worker(L->cap, worker, (pid_t)t->tid);
				if (rc != 0) {
					stb_fail(t, rc, "cannot open a perf event on pthread %u: %s",
						 t->tid, stb_capture_strerror(rc));
					break;
				}
			}
			/* A few ms of sampling: a task that does not run in that window
			 * is looked for in a blocking system call again (offcpu.c). */
			uint64_t now = stb_now_ns();
			unsigned budget = now < deadline ? (unsigned)((deadline - now) / 1000u) : 0;
			if (budget > STB_LOADER_CAPTURE_SLICE_US)
				budget = STB_LOADER_CAPTURE_SLICE_US;
			rc = stb_capture_take(L->cap, worker, id, budget, L->rec, &tm);
			if (t->is_pthread)
				stb_capture_set_worker(L->cap, worker, 0);
			if (rc == 0) {
				t->mode = STB_TRACE_BPF;
				t->tid = L->rec->tid;
				bpf = true;
			} else if (rc == -ETIMEDOUT) {
				uint64_t w2 = __atomic_load_n(&p->word, __ATOMIC_ACQUIRE);
				if (w2 != w1) {
					rc = -EAGAIN; /* it moved: read it again */
				} else {
					/* Never on a CPU: blocked in a system call on its thread? */
					rc = stb_offcpu_read(L->tg, (pid_t)t->tid, p->stack_hi, L->buf,
							     STB_LOADER_COPY_MAX, &regs, &copy, &nr);
					if (rc == 0) {
						t->mode = STB_TRACE_SYSCALL;
						offcpu = true;
					} else if (stb_now_ns() >= deadline) {
						stb_fail(t, -ETIMEDOUT, "running on worker %u (tid %u) but not "
								"seen on a CPU within %d ms (machine overloaded?)",
							 worker, t->tid, L->o.timeout_ms);
						rc = -ETIMEDOUT;
						break;
					} else {
						rc = -EAGAIN;
					}
				}
			} else if (rc == -ESRCH) {
				L->target_gone = !stb_target_alive(L->tg);
				stb_fail(t, rc, L->target_gone ? "the target exited"
							       : "the worker thread is gone");
				break;
			} else {
				stb_fail(t, rc, "BPF capture failed: %s", stb_capture_strerror(rc));
				break;
			}
		} else if (st == STB_TASK_CREATED || st == STB_TASK_READY_NO_STACK) {
			t->mode = STB_TRACE_NO_STACK;
			rc = 0;
		} else if (st == STB_TASK_DESTROYED || st == STB_TASK_UNUSED) {
			stb_fail(t, -ESRCH, "bthread %" PRIu64 " has finished", id);
			rc = -ESRCH;
			break;
		}
		if (rc != -EAGAIN && rc != -ETIMEDOUT)
			break;
		if (stb_now_ns() >= deadline) {
			stb_fail(t, -ETIMEDOUT, "the task did not settle within %d ms (state %s)",
				 L->o.timeout_ms, stb_state_name(st));
			rc = -ETIMEDOUT;
			break;
		}
		if (spins > 100)
			sched_yield();
	}
	if (lease)
		stb_hold_release(p, lease);
	uint64_t held = held_ns + (lease ? stb_now_ns() - held_from : 0);
	L->nhold++;
	L->hold_sum_ns += held;
	L->hold_max_ns = held > L->hold_max_ns ? held : L->hold_max_ns;
	if (bpf && tm.seen_ns > tm.arm_ns) {
		uint64_t wait = tm.seen_ns - tm.arm_ns;
		L->nbpf++;
		L->bpf_wait_sum_ns += wait;
		L->bpf_wait_max_ns = wait > L->bpf_wait_max_ns ? wait : L->bpf_wait_max_ns;
		L->bpf_prog_sum_ns += L->rec->prog_ns;
		L->bpf_prog_max_ns = L->rec->prog_ns > L->bpf_prog_max_ns ? L->rec->prog_ns
									   : L->bpf_prog_max_ns;
	}
	if (L->o.verbose > 1)
		fprintf(stderr, "stb-bpf-loader: task %" PRIu64 " %s: held %.1f us%s", id,
			stb_state_name(t->state), (double)held / 1e3, bpf ? "" : "\n");
	if (L->o.verbose > 1 && bpf)
		fprintf(stderr, ", BPF request to record %.1f us, program %.1f us\n",
			(double)(tm.seen_ns - tm.arm_ns) / 1e3, (double)L->rec->prog_ns / 1e3);
	if (rc != 0 || t->mode == STB_TRACE_NO_STACK)
		return;
	if (bpf) {
		stb_record_unwind(L->unw, L->rec, sizeof(*L->rec), c.max, stb_frame_collect, &c);
	} else if (offcpu) {
		c.n = stb_offcpu_unwind(L->unw, L->tg, &regs, &copy, c.frames, c.max);
	} else {
		stb_unw_walk(L->unw, &regs, &copy, 0, c.max, stb_frame_collect, &c);
	}
	t->truncated = c.n >= c.max;
	t->frames = malloc(c.n * sizeof(*t->frames) + 1);
	if (!t->frames) {
		stb_fail(t, -ENOMEM, "out of memory");
		return;
	}
	memcpy(t->frames, c.frames, c.n * sizeof(*t->frames));
	t->nframes = c.n;
}

static void stb_loader_sym(void *ctx, struct stb_frame *f, int flags)
{
	struct stb_loader *L = ctx;
	struct stb_sym_info si;
	stb_sym_fill_frame(L->sym, flags, f, &si);
}

/* ---- setup ---- */

/* libbpf's own messages: only with -v (a missing privilege is explained once). */
static int stb_libbpf_quiet;
static int stb_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (stb_libbpf_quiet || level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

static void stb_loader_open_capture(struct stb_loader *L)
{
	stb_libbpf_quiet = !L->o.verbose;
	libbpf_set_print(stb_libbpf_print);
	struct stb_capture_opts co;
	stb_target_capture_opts(L->tg, STB_CAPTURE_MODE_CAPTURE, &co);
	L->cap = stb_capture_open(L->tg->pid, &co);
	if (!L->cap) {
		int err = errno;
		if (err == EPERM || err == EACCES)
			snprintf(L->cap_note, sizeof(L->cap_note),
				 "BPF unavailable: permission denied, needs root or CAP_BPF+CAP_PERFMON");
		else
			snprintf(L->cap_note, sizeof(L->cap_note), "BPF unavailable: %s",
				 stb_capture_strerror(-err));
		return;
	}
	int rc = stb_capture_sync_workers(L->cap);
	if (rc < 0) {
		snprintf(L->cap_note, sizeof(L->cap_note), "perf events unavailable: %s%s",
			 stb_capture_strerror(rc),
			 rc == -EPERM || rc == -EACCES ? " (needs root or CAP_PERFMON)" : "");
		stb_capture_close(L->cap);
		L->cap = NULL;
	}
}

/* The capture program, loaded when the first running bthread needs it: a
 * snapshot in which every bthread is off-CPU loads no BPF at all. The
 * warning about a missing capability is printed then, once. */
static struct stb_capture *stb_loader_capture(struct stb_loader *L)
{
	if (!L->cap_tried) {
		L->cap_tried = true;
		stb_loader_open_capture(L);
		if (!L->cap)
			fprintf(stderr, "stb-bpf-loader: warning: %s; running bthreads will not be "
					"captured (context mode only)\n", L->cap_note);
	}
	return L->cap;
}

/* How the stacks were taken: BPF loaded, BPF unavailable, or never needed. */
static const char *stb_loader_mode(const struct stb_loader *L)
{
	return L->cap ? "bpf+context" : L->cap_tried ? "context-only" : "context";
}

int main(int argc, char **argv)
{
	struct stb_loader L;
	memset(&L, 0, sizeof(L));
	int rc = stb_parse_args(argc, argv, &L.o);
	if (rc < 0)
		return STB_EXIT_OK;
	if (rc > 0)
		return rc;
	if (L.o.profile) {
		struct stb_profile_opts po = {
			.pid = L.o.pid, .duration_ns = L.o.duration_ns, .freq = L.o.freq,
			.format = L.o.format == STB_FMT_PPROF ? STB_PROFILE_PPROF
				  : L.o.format == STB_FMT_JSON ? STB_PROFILE_JSON : STB_PROFILE_FOLDED,
			.output = L.o.output, .max_depth = L.o.max_depth, .verbose = L.o.verbose,
		};
		return stb_profile_run(&po);
	}

	int status = STB_EXIT_FAIL;
	FILE *out = stdout;
	struct stb_report_task *tasks = NULL;
	size_t ntasks = 0;
	char err[512];

	const char *fault = getenv("STB_LOADER_FAULT_HOLD_MS");
	uint64_t fv;
	if (fault && stb_parse_u64(fault, 1, 600000, &fv))
		L.fault_hold_ms = (unsigned)fv;
	L.tg = stb_target_open(L.o.pid, STB_TARGET_MAP_USED, err, sizeof(err));
	if (!L.tg) {
		fprintf(stderr, "stb-bpf-loader: %s\n", err);
		goto cleanup;
	}
	L.unw = stb_unw_proc_new(L.o.pid);
	L.sym = L.unw ? stb_sym_new_mods(stb_unw_proc_mods(L.unw)) : NULL;
	L.buf = malloc(STB_LOADER_COPY_MAX);
	L.rec = malloc(sizeof(*L.rec));
	L.scratch = calloc(L.o.max_depth, sizeof(*L.scratch));
	if (!L.unw || !L.sym || !L.buf || !L.rec || !L.scratch) {
		fprintf(stderr, "stb-bpf-loader: cannot read the modules of process %d: %s\n",
			(int)L.o.pid, strerror(errno));
		goto cleanup;
	}

	/* The tasks to trace. */
	struct stb_abi_header *h = L.tg->hdr;
	uint32_t hwm = (uint32_t)__atomic_load_n(&h->slot_hwm, __ATOMIC_ACQUIRE);
	if (hwm > L.tg->slots)
		hwm = L.tg->slots; /* tasks started since the table was mapped */
	size_t cap = L.o.nids ? L.o.nids : hwm;
	tasks = calloc(cap ? cap : 1, sizeof(*tasks));
	if (!tasks) {
		fprintf(stderr, "stb-bpf-loader: out of memory\n");
		goto cleanup;
	}
	uint64_t t0 = stb_now_ns();
	if (L.o.nids) {
		for (unsigned i = 0; i < L.o.nids && !L.target_gone; i++) {
			uint64_t id = L.o.ids[i];
			uint32_t slot = STB_ABI_SLOT(id);
			struct stb_abi_task *p = stb_target_task(L.tg, slot);
			if (!p && slot < h->task_capacity) {
				fprintf(stderr, "stb-bpf-loader: bthread %" PRIu64 " does not exist or has "
						"finished\n", id);
				L.missing++;
				continue;
			}
			if (!p) {
				fprintf(stderr, "stb-bpf-loader: bthread %" PRIu64 " is beyond the table "
						"capacity (%u) and cannot be traced from outside\n", id,
					h->task_capacity);
				L.missing++;
				continue;
			}
			unsigned st = STB_ABI_STATE(__atomic_load_n(&p->word, __ATOMIC_ACQUIRE));
			if (__atomic_load_n(&p->id, __ATOMIC_ACQUIRE) != id || st == STB_TASK_DESTROYED ||
			    st == STB_TASK_UNUSED) {
				fprintf(stderr, "stb-bpf-loader: bthread %" PRIu64 " does not exist or has "
						"finished\n", id);
				L.missing++;
				continue;
			}
			stb_trace_task(&L, slot, id, &tasks[ntasks++]);
		}
	} else {
		for (uint32_t slot = 0; slot < hwm && !L.target_gone; slot++) {
			struct stb_abi_task *p = stb_target_task(L.tg, slot);
			if (!p)
				break;
			uint64_t id = __atomic_load_n(&p->id, __ATOMIC_ACQUIRE);
			unsigned st = STB_ABI_STATE(__atomic_load_n(&p->word, __ATOMIC_ACQUIRE));
			if (!id || st == STB_TASK_UNUSED || st == STB_TASK_DESTROYED)
				continue;
			if (L.o.state_mask && !(L.o.state_mask & (1u << st)))
				continue;
			struct stb_report_task *t = &tasks[ntasks];
			stb_trace_task(&L, slot, id, t);
			if (t->err == -ESRCH && !L.target_gone)
				continue; /* finished meanwhile */
			if (L.o.state_mask && !(L.o.state_mask & (1u << t->state))) {
				free(t->frames);
				continue;
			}
			ntasks++;
		}
	}
	uint64_t t1 = stb_now_ns();
	for (size_t i = 0; i < ntasks; i++)
		if (tasks[i].err < 0)
			L.failed++;
	if (!stb_target_alive(L.tg))
		L.target_gone = true;

	if (L.o.output) {
		out = fopen(L.o.output, "we");
		if (!out) {
			fprintf(stderr, "stb-bpf-loader: cannot write %s: %s\n", L.o.output,
				strerror(errno));
			out = stdout;
			goto cleanup;
		}
	}
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
	struct stb_report r = {
		.out = out, .sym = stb_loader_sym, .sym_ctx = &L, .group = L.o.group,
		.now_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec,
	};
	uint64_t untraceable = __atomic_load_n(&h->untraceable, __ATOMIC_RELAXED);
	if (L.o.format == STB_FMT_JSON) {
		char extra[512];
		snprintf(extra, sizeof(extra),
			 ",\n  \"pid\": %d, \"comm\": \"%s\", \"abi_version\": %u,"
			 " \"capture\": \"%s\", \"complete\": %s, \"table_capacity\": %u,"
			 " \"untraceable\": %" PRIu64,
			 (int)L.o.pid, L.tg->comm, h->abi_version, stb_loader_mode(&L),
			 L.target_gone ? "false" : "true", h->task_capacity, untraceable);
		rc = stb_report_json(&r, tasks, ntasks, extra);
	} else if (L.o.format == STB_FMT_PPROF || L.o.format == STB_FMT_FOLDED) {
		/* runtime/stacks/pprof.c, shared with stb_dump. */
		char note[512];
		snprintf(note, sizeof(note), "stb-bpf-loader snapshot of pid %d (%s): %s%s%s",
			 (int)L.o.pid, L.tg->comm, stb_loader_mode(&L),
			 L.cap_tried && !L.cap ? ": " : "", L.cap_tried && !L.cap ? L.cap_note : "");
		rc = stb_report_pprof(&r, L.sym, L.unw, tasks, ntasks,
				      L.o.format == STB_FMT_PPROF ? STB_REPORT_PPROF : STB_REPORT_FOLDED,
				      L.target_gone ? "the target exited during the trace: partial" : note);
	} else {
		if (L.cap_tried && !L.cap)
			fprintf(out, "# note: %s; running bthreads are not captured (context mode "
				     "only)\n\n", L.cap_note);
		if (untraceable)
			fprintf(out, "# note: %" PRIu64 " bthreads were created beyond the table capacity "
				     "(%u) and are untraceable from outside (raise STB_TABLE_CAPACITY)\n\n",
				untraceable, h->task_capacity);
		rc = stb_report_text(&r, tasks, ntasks);
		if (L.target_gone)
			fprintf(out, "# the target exited during the trace: the output is partial\n");
	}
	if (rc != 0 || fflush(out) != 0) {
		fprintf(stderr, "stb-bpf-loader: writing the output failed\n");
		goto cleanup;
	}
	if (L.o.verbose)
		fprintf(stderr, "stb-bpf-loader: %zu tasks traced in %.3f ms (%u failed)%s\n", ntasks,
			(double)(t1 - t0) / 1e6, L.failed,
			L.cap ? ", BPF loaded" : L.cap_tried ? ", context mode only" : ", no BPF needed");
	if (L.o.verbose && L.nhold)
		fprintf(stderr, "stb-bpf-loader: tasks held %.1f us at most, %.1f us on average\n",
			(double)L.hold_max_ns / 1e3, (double)L.hold_sum_ns / L.nhold / 1e3);
	if (L.o.verbose && L.nbpf)
		fprintf(stderr, "stb-bpf-loader: %u BPF captures: request to record %.1f us at most, "
				"%.1f us on average; program %.1f us at most, %.1f us on average\n",
			L.nbpf, (double)L.bpf_wait_max_ns / 1e3, (double)L.bpf_wait_sum_ns / L.nbpf / 1e3,
			(double)L.bpf_prog_max_ns / 1e3, (double)L.bpf_prog_sum_ns / L.nbpf / 1e3);
	if (L.target_gone)
		fprintf(stderr, "stb-bpf-loader: process %d exited during the trace; output is "
				"partial\n", (int)L.o.pid);
	status = (L.target_gone || L.missing) ? STB_EXIT_FAIL : STB_EXIT_OK;
cleanup:
	if (out && out != stdout)
		fclose(out);
	for (size_t i = 0; i < ntasks; i++)
		free(tasks[i].frames);
	free(tasks);
	free(L.scratch);
	free(L.rec);
	free(L.buf);
	stb_capture_close(L.cap);
	stb_sym_free(L.sym);
	stb_unw_proc_free(L.unw);
	stb_target_close(L.tg);
	return status;
}
