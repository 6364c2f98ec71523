/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader's command line: options, --help, the run's deadline and its
 * watchdog, then the snapshot (snapshot.c) or the profile (profile.c). The
 * target gets no signal and is never ptrace-stopped.
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
		"  -p, --pid PID        process to trace\n"
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
		"                       times and ids (-v: every id)\n"
		"      --stuck D        only tasks blocked, or running without a switch, for at\n"
		"                       least D: 5 (seconds), 500ms, 2m\n"
		"  -d, --max-depth N    at most N frames per stack (default 64, max 1024)\n"
		"  -f, --format FMT     text (default), json (schema in docs/json.md), pprof\n"
		"                       (gzipped profile.proto for go tool pprof; the default\n"
		"                       for -o *.pb.gz) or folded (flame graph input: one line\n"
		"                       \"state;root;...;leaf count\" per distinct stack)\n"
		"  -t, --timeout MS     give up on one task after MS milliseconds (default 100)\n"
		"      --deadline D     end the whole run after D: 30s (default; --profile: its\n"
		"                       duration + 30 s), 500ms, 2m, or plain seconds. What was not\n"
		"                       traced by then is left out, and the output says so\n"
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
		"  sudo stb-bpf-loader --pid 1234 --stuck 5 --group\n"
		"  sudo stb-bpf-loader --pid 1234 --state running --max-depth 16\n"
		"  sudo stb-bpf-loader --pid 1234 --bthread 4294967296 --format json -o stack.json\n"
		"  sudo stb-bpf-loader --pid 1234 --format pprof -o stacks.pb.gz && go tool pprof -top stacks.pb.gz\n"
		"  sudo stb-bpf-loader --pid 1234 --format folded | flamegraph.pl > stacks.svg\n"
		"  sudo stb-bpf-loader --pid 1234 --profile --duration 10s --freq 99 -o prof.pb.gz\n"
		"  sudo stb-bpf-loader --pid 1234 --profile --duration 30s --format folded -o prof.folded\n"
		"  stb-bpf-loader --core core.1234 --group\n"
		"  stb-bpf-loader --core core.1234 --exe ./server --sysroot /srv/prod-root -f json\n"
		"\n"
		"--pid needs root, or CAP_BPF+CAP_PERFMON (BPF capture of running bthreads) and\n"
		"CAP_SYS_PTRACE (reading the target). Without BPF it falls back to suspended and\n"
		"ready bthreads (and running ones blocked in a system call), and says so.\n"
		"Exit status: 0 when every selected task was traced (or had no stack); 1 otherwise\n"
		"(a task that could not be traced, a target that exited mid-trace, a requested\n"
		"bthread that does not exist, the deadline, any other failure); 64 usage error.\n");
}

static int parse_state(const char *s)
{
	for (unsigned st = STB_TASK_CREATED; st < STB_TASK_DESTROYED; st++)
		if (strcmp(s, stb_state_name(st)) == 0)
			return (int)st;
	return -1;
}

/* Long-only options (--profile and its settings). */
enum { STB_OPT_PROFILE = 0x100, STB_OPT_DURATION, STB_OPT_FREQ, STB_OPT_DEADLINE, STB_OPT_STUCK,
       STB_OPT_CORE, STB_OPT_EXE, STB_OPT_SYSROOT };

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
	if (o->profile && o->format_set && o->format == STB_FORMAT_TEXT) {
		fprintf(stderr, "stb-bpf-loader: --profile writes pprof, folded or json, not text\n");
		return STB_EXIT_USAGE;
	}
	if (!o->format_set && o->output &&
	    (ends_with(o->output, ".pb.gz") || ends_with(o->output, ".pprof")))
		o->format = STB_FORMAT_PPROF;
	else if (!o->format_set && o->profile)
		o->format = STB_FORMAT_FOLDED;
	if (o->format == STB_FORMAT_PPROF && !o->output && isatty(STDOUT_FILENO)) {
		fprintf(stderr, "stb-bpf-loader: refusing to write binary pprof data to a terminal: "
				"add -o FILE (e.g. -o stacks.pb.gz) or redirect standard output\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile && !duration_set)
		o->duration_ns = 10ull * 1000000000u;
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
		{"stuck", required_argument, NULL, STB_OPT_STUCK},
		{"core", required_argument, NULL, STB_OPT_CORE},
		{"exe", required_argument, NULL, STB_OPT_EXE},
		{"sysroot", required_argument, NULL, STB_OPT_SYSROOT},
		{NULL, 0, NULL, 0},
	};
	memset(o, 0, sizeof(*o));
	o->max_depth = 64;
	o->timeout_ms = 100;
	bool all = false, duration_set = false, deadline_set = false;
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
		case STB_OPT_DEADLINE:
			if (stb_profile_parse_duration(optarg, &o->deadline_ns) != 0 ||
			    o->deadline_ns > STB_LOADER_MAX_DEADLINE_S * 1000000000ull) {
				fprintf(stderr, "stb-bpf-loader: --deadline: '%s' is not a duration (a "
						"whole number with ms, s or m, e.g. 500ms, 30s, 2m; "
						"from 1 ms to 24 hours)\n", optarg);
				return STB_EXIT_USAGE;
			}
			deadline_set = true;
			break;
		case STB_OPT_STUCK:
			if (stb_profile_parse_duration(optarg, &o->stuck_ns) != 0) {
				fprintf(stderr, "stb-bpf-loader: --stuck: '%s' is not a duration (a "
						"whole number of seconds, or with ms, s or m, e.g. 5, "
						"500ms, 2m; from 1 ms to 24 hours)\n", optarg);
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
	if (all && o->nids) {
		fprintf(stderr, "stb-bpf-loader: --all and --bthread exclude each other\n");
		return STB_EXIT_USAGE;
	}
	return check_profile_args(o, all, duration_set, deadline_set);
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
	rc = stb_loader_watchdog_start(&o);
	if (rc != 0) {
		fprintf(stderr, "stb-bpf-loader: cannot start the deadline's watchdog: %s\n",
			strerror(-rc));
		return STB_EXIT_FAIL;
	}
	return o.profile ? stb_profile_run(&o) : stb_snapshot_run(&o);
}
