/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader's command line: options, --help, --version, the run's
 * deadline and its watchdog, then the snapshot (snapshot.c), the profile
 * (profile.c) or continuous mode (every.c). The target gets no signal and is
 * never ptrace-stopped.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader.h"
#include "profile.h"
#include "stb/abi.h"
#include "stb/stb.h"
#include "util.h"

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: stb-bpf-loader --pid PID [options]\n"
		"       stb-bpf-loader --core FILE [--exe PROGRAM] [--sysroot DIR] [options]\n"
		"Print the stacks of the bthreads of a running stb process, without stopping it:\n"
		"suspended and ready bthreads are unwound from their saved context, running ones are\n"
		"captured on their worker by a BPF program (no signal, no ptrace stop). Or of a\n"
		"core file: running ones from their threads' registers in it.\n"
		"\n"
		"Options:\n"
		"  -p, --pid PID        process to trace (once; or --core)\n"
		"      --core FILE      read a core file instead (kernel-written or gcore; no root\n"
		"                       needed; how to get one: docs/postmortem.md)\n"
		"      --exe PROGRAM    with --core: the main program's file, when it is not at the\n"
		"                       path the core names\n"
		"      --sysroot DIR    with --core: look up the core's files under DIR (a copy of\n"
		"                       the crashed system's); a file whose build id differs from\n"
		"                       the core's gives no symbols, and the output says so\n"
		"  -b, --bthread ID     trace only this bthread (repeatable)\n"
		"  -a, --all            trace every live bthread and registered pthread (default)\n"
		"  -s, --state STATE    only tasks in STATE: running, ready, suspended, created,\n"
		"                       ready-without-stack, about-to-run, suspending (repeatable)\n"
		"  -g, --group          print each distinct stack (and wait) once, with its count,\n"
		"                       state, names, times and the first ids (-v: every id)\n"
		"      --stuck D        only tasks blocked, or running without a switch, for at\n"
		"                       least D: 5 (seconds), 500ms, 2m\n"
		"  -d, --max-depth N    at most N frames per stack (default 64, max 1024); the\n"
		"                       runtime's own frames do not count, and the output says how\n"
		"                       many frames it leaves out\n"
		"      --runtime-frames show the runtime's own frames (stb_jump_stack,\n"
		"                       stb_sched_suspend, butex internals above the API call a\n"
		"                       bthread waits in; stb_task_entry, stb_ctx_trampoline below\n"
		"                       its function), hidden by default in every format\n"
		"      --lines          text: add file:line to frames, and inlined calls\n"
		"      --no-threads     leave out the section of every thread of the process (the\n"
		"                       main thread, workers, the runtime's and other pthreads:\n"
		"                       name, tid, state, stack), shown after the tasks of a\n"
		"                       snapshot without --bthread, --state or --stuck\n"
		"  -f, --format FMT     text (default), json (schema in docs/json.md), pprof\n"
		"                       (gzipped profile.proto for go tool pprof; the default\n"
		"                       for -o *.pb.gz), folded (flame graph input: one line\n"
		"                       \"state;root;...;leaf count\" per distinct stack) or\n"
		"                       flamegraph (one self-contained interactive HTML page;\n"
		"                       the default for -o *.html)\n"
		"  -t, --timeout MS     give up on one task after MS milliseconds (default 100)\n"
		"      --deadline D     end the whole run after D: 30s (default; --profile: its\n"
		"                       duration + 30 s), 500ms, 2m, 1h, or plain seconds. What\n"
		"                       was not traced by then is left out, and the output says so\n"
		"  -o, --output FILE    write to FILE instead of standard output (pprof is binary:\n"
		"                       it is never written to a terminal); a run that writes\n"
		"                       nothing leaves an existing FILE as it was\n"
		"\n"
		"Profiling (docs/profiling.md):\n"
		"      --profile        sample for a duration instead of one snapshot: on-CPU\n"
		"                       stacks of every worker (BPF, tagged with the running\n"
		"                       bthread) and off-CPU stacks of suspended and ready\n"
		"                       bthreads, at the same rate; formats pprof (default for\n"
		"                       -o *.pb.gz), folded (default otherwise), json or\n"
		"                       flamegraph. Ctrl-C ends it early and still writes it\n"
		"      --duration D     how long: 10s (default), 500ms, 2m, 1h, or plain seconds\n"
		"                       (1 ms to 24 h)\n"
		"      --freq HZ        samples and snapshots per second, 1..1000 (default 99)\n"
		"\n"
		"Continuous mode (stb-bpf-loader(8); a systemd unit: stb-snapshots@.service):\n"
		"      --every D        stay resident and write a snapshot (or, with --profile, a\n"
		"                       profile) every D (100ms to 24 h) into --out-dir, as\n"
		"                       stb-PID-YYYYMMDDTHHMMSS.mmmZ.EXT files (written, then\n"
		"                       renamed: never seen half-written), until SIGTERM or\n"
		"                       SIGINT (exit 0 after the file in progress) or the\n"
		"                       target's exit (exit 0 if a file was written, else 1).\n"
		"                       The BPF program, modules and symbols are loaded once.\n"
		"                       Default format pprof; --deadline applies to each file\n"
		"      --out-dir DIR    where the files go (required with --every)\n"
		"      --keep N         keep the N newest files of DIR, 1..100000 (default 60)\n"
		"\n"
		"  -v, --verbose        progress and timings on standard error (how long tasks\n"
		"                       were held, BPF capture times); -vv: one line per task\n"
		"  -V, --version        the version and the table ABI it reads\n"
		"  -h, --help           this text\n"
		"\n"
		"Examples:\n"
		"  sudo stb-bpf-loader --pid 1234\n"
		"  sudo stb-bpf-loader --pid 1234 --group --lines\n"
		"  sudo stb-bpf-loader --pid 1234 --stuck 5 --group\n"
		"  sudo stb-bpf-loader --pid 1234 --state running --max-depth 16\n"
		"  sudo stb-bpf-loader --pid 1234 --bthread 4294967296 --runtime-frames\n"
		"  sudo stb-bpf-loader --pid 1234 --format json -o stacks.json\n"
		"  sudo stb-bpf-loader --pid 1234 -o stacks.pb.gz && go tool pprof -top stacks.pb.gz\n"
		"  sudo stb-bpf-loader --pid 1234 -o stacks.html   # open it in a browser\n"
		"  sudo stb-bpf-loader --pid 1234 --profile --duration 10s --freq 99 -o prof.pb.gz\n"
		"  sudo stb-bpf-loader --pid 1234 --profile --duration 1h -o hour.pb.gz\n"
		"  sudo stb-bpf-loader --pid 1234 --profile --format folded > prof.folded\n"
		"  sudo stb-bpf-loader --pid 1234 --every 10s --out-dir /var/lib/stb --keep 360\n"
		"  sudo stb-bpf-loader --pid 1234 --every 1m --profile --duration 10s --out-dir /tmp/p\n"
		"  stb-bpf-loader --core core.1234 --group\n"
		"  stb-bpf-loader --core core.1234 --exe ./server --sysroot /srv/prod-root -f json\n"
		"\n"
		"--pid needs root, or CAP_SYS_PTRACE (reading the target's memory and file\n"
		"descriptors), plus CAP_DAC_READ_SEARCH when the target runs as another user\n"
		"(listing its /proc/PID/fd), plus CAP_BPF+CAP_PERFMON (BPF capture of running\n"
		"bthreads). Without BPF it falls back to suspended and ready bthreads (and running\n"
		"ones blocked in a system call), and says so. --core needs only read access.\n"
		"Exit status: 0 when every selected task was traced (or had no stack); 1 otherwise\n"
		"(a task that could not be traced, a target that exited mid-trace, a requested\n"
		"bthread that does not exist, bthreads beyond the table's capacity, the deadline,\n"
		"any other failure); 64 usage error.\n");
}

static void version(void)
{
	printf("stb-bpf-loader %s (reads stb task tables of ABI version %u)\n", STB_VERSION,
	       STB_ABI_VERSION);
}

static int parse_state(const char *s)
{
	for (unsigned st = STB_TASK_CREATED; st < STB_TASK_DESTROYED; st++)
		if (strcmp(s, stb_state_name(st)) == 0)
			return (int)st;
	return -1;
}

/* Long-only options. */
enum {
	STB_OPT_PROFILE = 0x100,
	STB_OPT_DURATION,
	STB_OPT_FREQ,
	STB_OPT_DEADLINE,
	STB_OPT_RUNTIME_FRAMES,
	STB_OPT_LINES,
	STB_OPT_EVERY,
	STB_OPT_OUT_DIR,
	STB_OPT_KEEP,
	STB_OPT_STUCK,
	STB_OPT_CORE,
	STB_OPT_EXE,
	STB_OPT_SYSROOT,
	STB_OPT_NO_THREADS,
};

#define STB_EVERY_MIN_NS 100000000ull
#define STB_KEEP_DEFAULT 60u
#define STB_KEEP_MAX 100000u

/* Does path end with suffix? */
static bool ends_with(const char *path, const char *suffix)
{
	size_t n = strlen(path), k = strlen(suffix);
	return n >= k && strcmp(path + n - k, suffix) == 0;
}

/* Checks and completes the --profile / --format choices after parsing. */
static int check_profile_args(struct stb_loader_opts *o, bool all, bool duration_set,
			      bool deadline_set)
{
	if (!o->profile && (duration_set || o->freq)) {
		fprintf(stderr, "stb-bpf-loader: --duration and --freq need --profile\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile && (o->nids || all || o->state_mask || o->group || o->stuck_ns)) {
		fprintf(stderr, "stb-bpf-loader: --profile covers every bthread: --bthread, --all, "
				"--state, --group and --stuck do not apply to it\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile && (o->runtime_frames || o->lines)) {
		fprintf(stderr, "stb-bpf-loader: --runtime-frames and --lines do not apply to "
				"--profile (a profile keeps every frame; pprof has the lines)\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile && o->no_threads) {
		fprintf(stderr, "stb-bpf-loader: --no-threads does not apply to --profile (it "
				"samples the workers and the bthreads only)\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile && o->format_set && o->format == STB_FORMAT_TEXT) {
		fprintf(stderr, "stb-bpf-loader: --profile writes pprof, folded or json, not text\n");
		return STB_EXIT_USAGE;
	}
	if (!o->format_set && o->output &&
	    (ends_with(o->output, ".pb.gz") || ends_with(o->output, ".pprof")))
		o->format = STB_FORMAT_PPROF;
	else if (!o->format_set && o->output &&
		 (ends_with(o->output, ".html") || ends_with(o->output, ".htm")))
		o->format = STB_FORMAT_FLAMEGRAPH;
	else if (!o->format_set && o->every_ns)
		o->format = STB_FORMAT_PPROF;
	else if (!o->format_set && o->profile)
		o->format = STB_FORMAT_FOLDED;
	if (o->format == STB_FORMAT_PPROF && !o->output && !o->every_ns && isatty(STDOUT_FILENO)) {
		fprintf(stderr, "stb-bpf-loader: refusing to write binary pprof data to a terminal: "
				"add -o FILE (e.g. -o stacks.pb.gz) or redirect standard output\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile && !duration_set)
		o->duration_ns = o->every_ns && o->every_ns < 10ull * 1000000000u
					 ? o->every_ns
					 : 10ull * 1000000000u;
	if (o->profile && o->every_ns && o->duration_ns > o->every_ns) {
		fprintf(stderr, "stb-bpf-loader: --duration must not be longer than --every (one "
				"profile per period)\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile && !o->freq)
		o->freq = 99;
	if (!deadline_set) {
		o->deadline_ns = (o->profile ? o->duration_ns : 0) +
				 STB_LOADER_DEFAULT_DEADLINE_S * 1000000000ull;
	} else if (o->profile && o->deadline_ns <= o->duration_ns) {
		fprintf(stderr, "stb-bpf-loader: --deadline must be longer than --duration (the "
				"profile needs time to start and to be written)\n");
		return STB_EXIT_USAGE;
	}
	return 0;
}

/* The continuous-mode options: together, and not with -o. */
static int check_every_args(struct stb_loader_opts *o, bool keep_set)
{
	if (!o->every_ns && (o->out_dir || keep_set)) {
		fprintf(stderr, "stb-bpf-loader: --out-dir and --keep need --every\n");
		return STB_EXIT_USAGE;
	}
	if (!o->every_ns)
		return 0;
	if (!o->out_dir) {
		fprintf(stderr, "stb-bpf-loader: --every needs --out-dir DIR (where the files go)\n");
		return STB_EXIT_USAGE;
	}
	if (o->output) {
		fprintf(stderr, "stb-bpf-loader: --every writes its files into --out-dir: -o does "
				"not apply\n");
		return STB_EXIT_USAGE;
	}
	if (!keep_set)
		o->keep = STB_KEEP_DEFAULT;
	return 0;
}

static int parse_args(int argc, char **argv, struct stb_loader_opts *o)
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
		{"deadline", required_argument, NULL, STB_OPT_DEADLINE},
		{"runtime-frames", no_argument, NULL, STB_OPT_RUNTIME_FRAMES},
		{"lines", no_argument, NULL, STB_OPT_LINES},
		{"every", required_argument, NULL, STB_OPT_EVERY},
		{"out-dir", required_argument, NULL, STB_OPT_OUT_DIR},
		{"keep", required_argument, NULL, STB_OPT_KEEP},
		{"version", no_argument, NULL, 'V'},
		{"stuck", required_argument, NULL, STB_OPT_STUCK},
		{"core", required_argument, NULL, STB_OPT_CORE},
		{"exe", required_argument, NULL, STB_OPT_EXE},
		{"sysroot", required_argument, NULL, STB_OPT_SYSROOT},
		{"no-threads", no_argument, NULL, STB_OPT_NO_THREADS},
		{NULL, 0, NULL, 0},
	};
	memset(o, 0, sizeof(*o));
	o->max_depth = 64;
	o->timeout_ms = 100;
	bool all = false, duration_set = false, deadline_set = false, keep_set = false;
	uint64_t v;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":p:b:as:gd:f:t:o:vVh", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (o->pid) {
				fprintf(stderr, "stb-bpf-loader: --pid given twice: one process per "
						"run (start one loader per process)\n");
				return STB_EXIT_USAGE;
			}
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
			int st = parse_state(optarg);
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
			o->format = stb_format_from_name(optarg);
			if (o->format < 0) {
				fprintf(stderr, "stb-bpf-loader: --format: '%s' is not text, json, pprof, "
						"folded or flamegraph\n", optarg);
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
						"whole number with ms, s, m or h, e.g. 500ms, 10s, 2m, "
						"1h; from 1 ms to 24 hours)\n", optarg);
				return STB_EXIT_USAGE;
			}
			duration_set = true;
			break;
		}
		case STB_OPT_DEADLINE:
			if (stb_profile_parse_duration(optarg, &o->deadline_ns) != 0 ||
			    o->deadline_ns > STB_LOADER_MAX_DEADLINE_S * 1000000000ull) {
				fprintf(stderr, "stb-bpf-loader: --deadline: '%s' is not a duration (a "
						"whole number with ms, s, m or h, e.g. 500ms, 30s, 2m, "
						"1h; from 1 ms to 24 hours)\n", optarg);
				return STB_EXIT_USAGE;
			}
			deadline_set = true;
			break;
		case STB_OPT_EVERY:
			if (stb_profile_parse_duration(optarg, &o->every_ns) != 0 ||
			    o->every_ns < STB_EVERY_MIN_NS) {
				fprintf(stderr, "stb-bpf-loader: --every: '%s' is not a period (a whole "
						"number with ms, s, m or h, e.g. 10s, 1m; from 100 ms to "
						"24 hours)\n", optarg);
				return STB_EXIT_USAGE;
			}
			break;
		case STB_OPT_OUT_DIR:
			if (!*optarg) {
				fprintf(stderr, "stb-bpf-loader: --out-dir: an empty path\n");
				return STB_EXIT_USAGE;
			}
			o->out_dir = optarg;
			break;
		case STB_OPT_KEEP:
			if (!stb_parse_u64(optarg, 1, STB_KEEP_MAX, &v)) {
				fprintf(stderr, "stb-bpf-loader: --keep: '%s' is not in 1..%u files\n",
					optarg, STB_KEEP_MAX);
				return STB_EXIT_USAGE;
			}
			o->keep = (unsigned)v;
			keep_set = true;
			break;
		case STB_OPT_RUNTIME_FRAMES:
			o->runtime_frames = true;
			break;
		case STB_OPT_LINES:
			o->lines = true;
			break;
		case STB_OPT_NO_THREADS:
			o->no_threads = true;
			break;
		case STB_OPT_STUCK:
			if (stb_profile_parse_duration(optarg, &o->stuck_ns) != 0) {
				fprintf(stderr, "stb-bpf-loader: --stuck: '%s' is not a duration (a "
						"whole number of seconds, or with ms, s, m or h, e.g. "
						"5, 500ms, 2m; from 1 ms to 24 hours)\n", optarg);
				return STB_EXIT_USAGE;
			}
			break;
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
		case STB_OPT_CORE:
			if (o->core) {
				fprintf(stderr, "stb-bpf-loader: --core given twice: one core per "
						"run\n");
				return STB_EXIT_USAGE;
			}
			o->core = optarg;
			break;
		case STB_OPT_EXE:
			o->exe = optarg;
			break;
		case STB_OPT_SYSROOT:
			o->sysroot = optarg;
			break;
		case 'v':
			o->verbose++;
			break;
		case 'h':
			usage(stdout);
			return -1;
		case 'V':
			version();
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
	if (!o->pid && !o->core) {
		fprintf(stderr, "stb-bpf-loader: --pid or --core is required (see --help)\n");
		return STB_EXIT_USAGE;
	}
	if (o->pid && o->core) {
		fprintf(stderr, "stb-bpf-loader: --pid and --core exclude each other\n");
		return STB_EXIT_USAGE;
	}
	if (!o->core && (o->exe || o->sysroot)) {
		fprintf(stderr, "stb-bpf-loader: --exe and --sysroot need --core\n");
		return STB_EXIT_USAGE;
	}
	if (o->core && o->profile) {
		fprintf(stderr, "stb-bpf-loader: --profile samples a running process, not a core\n");
		return STB_EXIT_USAGE;
	}
	if (o->core && o->every_ns) {
		fprintf(stderr, "stb-bpf-loader: --every takes snapshots of a running process, not "
				"of a core\n");
		return STB_EXIT_USAGE;
	}
	if (all && o->nids) {
		fprintf(stderr, "stb-bpf-loader: --all and --bthread exclude each other\n");
		return STB_EXIT_USAGE;
	}
	int rc = check_every_args(o, keep_set);
	return rc ? rc : check_profile_args(o, all, duration_set, deadline_set);
}

int main(int argc, char **argv)
{
	static struct stb_loader_opts o;
	uint64_t start = stb_now_ns();
	int rc = parse_args(argc, argv, &o);
	if (rc < 0)
		return STB_EXIT_OK;
	if (rc > 0)
		return rc;
	o.start_ns = start;
#if STB_LOADER_TEST_HOOKS
	/* Test builds only: keep every lease this long, as a stuck loader would. */
	const char *fault = getenv("STB_LOADER_FAULT_HOLD_MS");
	uint64_t fv;
	if (fault && stb_parse_u64(fault, 1, 600000, &fv))
		o.fault_hold_ms = (unsigned)fv;
#endif
	/* A closed output pipe is a write error, not a signal. */
	signal(SIGPIPE, SIG_IGN);
	rc = stb_deadline_start(&o);
	if (rc != 0) {
		fprintf(stderr, "stb-bpf-loader: cannot start the deadline's watchdog: %s\n",
			strerror(-rc));
		return STB_EXIT_FAIL;
	}
	if (o.every_ns)
		return stb_every_run(&o);
	return o.profile ? stb_profile_run(&o) : stb_snapshot_run(&o);
}
