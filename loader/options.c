/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader's command line (options.h): one table of its options from
 * which getopt's, --help's and the checks' views of them come, one parser of
 * durations, --version, and the checks that options go together.
 * tests/check_docs.sh keeps the man page and the bash completion equal to
 * --help.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coresave.h"
#include "loader.h"
#include "options.h"
#include "profile.h"
#include "report/formats.h"
#include "stb/abi.h"
#include "stb/stb.h"
#include "util.h"

#define STB_DURATION_MAX_NS (24ull * 3600u * 1000000000u)
#define STB_EVERY_MIN_NS 100000000ull
#define STB_KEEP_DEFAULT 60u
#define STB_KEEP_MAX 100000u
#define STB_HELP_COLUMN 23 /* where the text of an option starts in --help */

/* How an option's value is read. */
enum opt_kind {
	OPT_FLAG,     /* a bool set */
	OPT_UINT,     /* a number in [lo, hi] */
	OPT_DURATION, /* a duration in [lo, hi] ns (parse_duration) */
	OPT_STRING,   /* a string kept */
	OPT_OWN,      /* read by its own code in parse() */
};

/* Options read by their own code. */
enum { OWN_PID, OWN_BTHREAD, OWN_ALL, OWN_STATE, OWN_FORMAT, OWN_CORE, OWN_OUT_DIR, OWN_VERBOSE,
       OWN_VERSION, OWN_HELP };

struct opt {
	const char *name; /* --name */
	int key;          /* -k, or 0 */
	const char *arg;  /* its value in --help; NULL: none */
	const char *help; /* lines of --help, '\n' between them */
	const char *section; /* printed before it: a heading, or "" for a blank line */
	enum opt_kind kind;
	size_t field;     /* offsetof(struct stb_loader_opts, ...) */
	uint64_t lo, hi;  /* OPT_UINT, OPT_DURATION */
	const char *what; /* OPT_UINT: the unit in messages; OPT_DURATION: "duration" or "period" */
	const char *eg;   /* OPT_DURATION: examples in messages */
	int own;          /* OPT_OWN: OWN_* */
};

#define F(m) offsetof(struct stb_loader_opts, m)
#define MS 1000000ull
#define SEC 1000000000ull

static const struct opt opts[] = {
    {.name = "pid",
     .key = 'p',
     .arg = "PID",
     .help = "process to trace (once; or --core)",
     .section = "Options:",
     .kind = OPT_OWN,
     .own = OWN_PID},
    {.name = "core",
     .arg = "FILE",
     .help = "read a core file instead (kernel-written or gcore; no root\n"
     "needed; how to get one: docs/postmortem.md)",
     .kind = OPT_OWN,
     .own = OWN_CORE},
    {.name = "exe",
     .arg = "PROGRAM",
     .help = "with --core: the main program's file, when it is not at the\n"
     "path the core names",
     .kind = OPT_STRING,
     .field = F(exe)},
    {.name = "sysroot",
     .arg = "DIR",
     .help = "with --core: look up the core's files under DIR (a copy of\n"
     "the crashed system's); a file whose build id differs from\n"
     "the core's gives no symbols, and the output says so",
     .kind = OPT_STRING,
     .field = F(sysroot)},
    {.name = "save",
     .arg = "FILE",
     .help = "with --pid: write a core file of the process to FILE\n"
     "instead of a report -- the task table, every task's stack\n"
     "as traced (deep running ones whole), every thread's\n"
     "registers, stack and name, its modules' build ids -- for\n"
     "--core later, here or elsewhere (mode 0600, written whole\n"
     "or not at all; works where gcore loses the stacks:\n"
     "docs/postmortem.md)",
     .kind = OPT_STRING,
     .field = F(save)},
    {.name = "overwrite",
     .help = "with --save: replace FILE if it exists (refused otherwise)",
     .kind = OPT_FLAG,
     .field = F(overwrite)},
    {.name = "save-max",
     .arg = "MIB",
     .help = "with --save: the file's size budget in MiB (default 1024);\n"
     "stacks beyond it are left out, and the run says so (exit 1)",
     .kind = OPT_UINT,
     .field = F(save_max_mib),
     .lo = 1,
     .hi = STB_CORESAVE_MAX_MIB,
     .what = " MiB"},
    {.name = "bthread",
     .key = 'b',
     .arg = "ID",
     .help = "trace only this bthread (repeatable)",
     .kind = OPT_OWN,
     .own = OWN_BTHREAD},
    {.name = "all",
     .key = 'a',
     .help = "trace every live bthread and registered pthread (default)",
     .kind = OPT_OWN,
     .own = OWN_ALL},
    {.name = "state",
     .key = 's',
     .arg = "STATE",
     .help = "only tasks in STATE: running, ready, suspended, created,\n"
     "ready-without-stack, about-to-run, suspending (repeatable)",
     .kind = OPT_OWN,
     .own = OWN_STATE},
    {.name = "group",
     .key = 'g',
     .help = "print each distinct stack (and wait) once, with its count,\n"
     "state, names, times and the first ids (-v: every id)",
     .kind = OPT_FLAG,
     .field = F(group)},
    {.name = "stuck",
     .arg = "D",
     .help = "only tasks stuck for at least D: 5 (seconds), 500ms, 2m --\n"
     "blocked on anything but an fd or a sleep (idle\n"
     "connections and back-offs are not stuck), or running\n"
     "without a switch; as the watchdog (STB_WATCHDOG).\n"
     "--bthread, --state and --stuck also show the tasks a\n"
     "selected one waits on (the holder of its mutex, rwlock\n"
     "or bthread_id, the bthread it joins), after the others",
     .kind = OPT_DURATION,
     .field = F(stuck_ns),
     .lo = MS,
     .hi = STB_DURATION_MAX_NS,
     .what = "duration",
     .eg = "5, 500ms, 2m"},
    {.name = "leaks",
     .help = "bthreads by creation site instead of stacks (who created\n"
     "all these bthreads?): count, oldest and median age and\n"
     "states per site, file:line of the bthread_start_* call;\n"
     "with --every, each site's growth since the previous\n"
     "snapshot. Text or json; reads the table only",
     .kind = OPT_FLAG,
     .field = F(leaks)},
    {.name = "max-depth",
     .key = 'd',
     .arg = "N",
     .help = "at most N frames per stack (default 64, max 1024); the\n"
     "runtime's own frames do not count, and the output says how\n"
     "many frames it leaves out",
     .kind = OPT_UINT,
     .field = F(max_depth),
     .lo = 1,
     .hi = 1024,
     .what = ""},
    {.name = "runtime-frames",
     .help = "show the runtime's own frames (stb_jump_stack,\n"
     "stb_sched_suspend, butex internals above the API call a\n"
     "bthread waits in and inlined into it; stb_task_entry,\n"
     "stb_ctx_trampoline below its function), hidden by default\n"
     "in every format and in --profile",
     .kind = OPT_FLAG,
     .field = F(runtime_frames)},
    {.name = "no-lines",
     .help = "text: leave out the file:line of each frame and the calls\n"
     "inlined there (shown by default where the program has\n"
     "debug info)",
     .kind = OPT_FLAG,
     .field = F(no_lines)},
    {.name = "lines",
     .help = "text: file:line and inlined calls (the default; kept for\n"
     "scripts)",
     .kind = OPT_FLAG,
     .field = F(lines)},
    {.name = "no-threads",
     .help = "leave out the section of every thread of the process (the\n"
     "main thread, workers, the runtime's and other pthreads:\n"
     "name, tid, state, stack), shown after the tasks of a\n"
     "snapshot without --bthread, --state or --stuck",
     .kind = OPT_FLAG,
     .field = F(no_threads)},
    {.name = "format",
     .key = 'f',
     .arg = "FMT",
     .help = "text (default), json (schema in docs/json.md), pprof\n"
     "(gzipped profile.proto for go tool pprof; the default\n"
     "for -o *.pb.gz), folded (flame graph input: one line\n"
     "\"state;root;...;leaf count\" per distinct stack) or\n"
     "flamegraph (one self-contained interactive HTML page;\n"
     "the default for -o *.html)",
     .kind = OPT_OWN,
     .own = OWN_FORMAT},
    {.name = "timeout",
     .key = 't',
     .arg = "MS",
     .help = "give up on one task after MS milliseconds (default 100)",
     .kind = OPT_UINT,
     .field = F(timeout_ms),
     .lo = 1,
     .hi = 60000,
     .what = " ms"},
    {.name = "deadline",
     .arg = "D",
     .help = "end the whole run after D: 30s (default; --profile: its\n"
     "duration + 30 s), 500ms, 2m, 1h, or plain seconds. What\n"
     "was not traced by then is left out, and the output says so",
     .kind = OPT_DURATION,
     .field = F(deadline_ns),
     .lo = MS,
     .hi = STB_LOADER_MAX_DEADLINE_S * SEC,
     .what = "duration",
     .eg = "500ms, 30s, 2m, 1h"},
    {.name = "output",
     .key = 'o',
     .arg = "FILE",
     .help = "write to FILE instead of standard output (pprof is binary:\n"
     "it is never written to a terminal); a run that writes\n"
     "nothing leaves an existing FILE as it was",
     .kind = OPT_STRING,
     .field = F(output)},
    {.name = "profile",
     .help = "sample for a duration instead of one snapshot: on-CPU\n"
     "stacks of every worker (BPF, tagged with the running\n"
     "bthread) and off-CPU stacks of suspended and ready\n"
     "bthreads, at the same rate; formats pprof (default for\n"
     "-o *.pb.gz), folded (default otherwise), json or\n"
     "flamegraph. Ctrl-C ends it early and still writes it",
     .section = "\nProfiling (docs/profiling.md):",
     .kind = OPT_FLAG,
     .field = F(profile)},
    {.name = "duration",
     .arg = "D",
     .help = "how long: 10s (default), 500ms, 2m, 1h, or plain seconds\n"
     "(1 ms to 24 h)",
     .kind = OPT_DURATION,
     .field = F(duration_ns),
     .lo = MS,
     .hi = STB_DURATION_MAX_NS,
     .what = "duration",
     .eg = "500ms, 10s, 2m, 1h"},
    {.name = "freq",
     .arg = "HZ",
     .help = "samples and snapshots per second, 1..1000 (default 99)",
     .kind = OPT_UINT,
     .field = F(freq),
     .lo = 1,
     .hi = STB_PROFILE_FREQ_MAX,
     .what = " Hz"},
    {.name = "every",
     .arg = "D",
     .help = "stay resident and write a snapshot (or, with --profile, a\n"
     "profile) every D (100ms to 24 h) into --out-dir, as\n"
     "stb-PID-YYYYMMDDTHHMMSS.mmmZ.EXT files (written, then\n"
     "renamed: never seen half-written), until SIGTERM or\n"
     "SIGINT (exit 0 after the file in progress) or the\n"
     "target's exit (exit 0 if a file was written, else 1).\n"
     "The BPF program, modules and symbols are loaded once.\n"
     "Default format pprof; --deadline applies to each file",
     .section = "\nContinuous mode (stb-bpf-loader(8); a systemd unit: stb-snapshots@.service):",
     .kind = OPT_DURATION,
     .field = F(every_ns),
     .lo = STB_EVERY_MIN_NS,
     .hi = STB_DURATION_MAX_NS,
     .what = "period",
     .eg = "10s, 1m"},
    {.name = "out-dir",
     .arg = "DIR",
     .help = "where the files go (required with --every)",
     .kind = OPT_OWN,
     .own = OWN_OUT_DIR},
    {.name = "keep",
     .arg = "N",
     .help = "keep the N newest files of DIR, 1..100000 (default 60)",
     .kind = OPT_UINT,
     .field = F(keep),
     .lo = 1,
     .hi = STB_KEEP_MAX,
     .what = " files"},
    {.name = "verbose",
     .key = 'v',
     .help = "progress and timings on standard error (how long tasks\n"
     "were held, BPF capture times); -vv: one line per task",
     .section = "",
     .kind = OPT_OWN,
     .own = OWN_VERBOSE},
    {.name = "version",
     .key = 'V',
     .help = "the version and the table ABI it reads",
     .kind = OPT_OWN,
     .own = OWN_VERSION},
    {.name = "help",
     .key = 'h',
     .help = "this text",
     .kind = OPT_OWN,
     .own = OWN_HELP},
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

static const char usage_head[] =
    "Usage: stb-bpf-loader --pid PID [options]\n"
    "       stb-bpf-loader --pid PID --save FILE [--overwrite] [--save-max MIB]\n"
    "       stb-bpf-loader --core FILE [--exe PROGRAM] [--sysroot DIR] [options]\n"
    "Print the stacks of the bthreads of a running stb process, without stopping it:\n"
    "suspended and ready bthreads are unwound from their saved context, running ones are\n"
    "captured on their worker by a BPF program (no signal, no ptrace stop). Or of a\n"
    "core file: running ones from their threads' registers in it.\n"
    "\n";

static const char usage_tail[] =
    "\n"
    "Examples:\n"
    "  sudo stb-bpf-loader --pid 1234\n"
    "  sudo stb-bpf-loader --pid 1234 --group --no-lines\n"
    "  sudo stb-bpf-loader --pid 1234 --stuck 5 --group\n"
    "  sudo stb-bpf-loader --pid 1234 --state running --max-depth 16\n"
    "  sudo stb-bpf-loader --pid 1234 --bthread 4294967296 --runtime-frames\n"
    "  sudo stb-bpf-loader --pid 1234 --format json -o stacks.json\n"
    "  sudo stb-bpf-loader --pid 1234 -o stacks.pb.gz && go tool pprof -top stacks.pb.gz\n"
    "  sudo stb-bpf-loader --pid 1234 -o stacks.html   # open it in a browser\n"
    "  sudo stb-bpf-loader --pid 1234 --profile --duration 10s --freq 99 -o prof.pb.gz\n"
    "  sudo stb-bpf-loader --pid 1234 --profile --duration 1h -o hour.pb.gz\n"
    "  sudo stb-bpf-loader --pid 1234 --profile --format folded > prof.folded\n"
    "  sudo stb-bpf-loader --pid 1234 --leaks\n"
    "  sudo stb-bpf-loader --pid 1234 --leaks --every 1m --out-dir /var/lib/stb-leaks\n"
    "  sudo stb-bpf-loader --pid 1234 --every 10s --out-dir /var/lib/stb --keep 360\n"
    "  sudo stb-bpf-loader --pid 1234 --every 1m --profile --duration 10s --out-dir /tmp/p\n"
    "  sudo stb-bpf-loader --pid 1234 --save stb-1234.core\n"
    "  stb-bpf-loader --core core.1234 --group\n"
    "  stb-bpf-loader --core core.1234 --exe ./server --sysroot /srv/prod-root -f json\n"
    "\n"
    "--pid needs root, or CAP_SYS_PTRACE (reading the target's memory and file\n"
    "descriptors), plus CAP_DAC_READ_SEARCH when the target runs as another user\n"
    "(listing its /proc/PID/fd), plus CAP_BPF+CAP_PERFMON, or CAP_SYS_ADMIN which\n"
    "includes both (BPF capture of running bthreads; --profile needs it). Without BPF\n"
    "it falls back to suspended and ready bthreads (and running ones blocked in a\n"
    "system call), and says so. --core needs only read access.\n"
    "Exit status: 0 when every selected task was traced (or had no stack); 1 otherwise\n"
    "(a task that could not be traced, a target that exited mid-trace, a requested\n"
    "bthread that does not exist, bthreads beyond the table's capacity, the deadline,\n"
    "any other failure); 64 usage error.\n";

/* --help, its option lines made from the table. */
static void usage(FILE *out)
{
	fputs(usage_head, out);
	for (size_t i = 0; i < NOPTS; i++) {
		const struct opt *p = &opts[i];
		if (p->section && *p->section)
			fprintf(out, "%s\n", p->section);
		else if (p->section)
			fputc('\n', out);
		char head[64];
		int n = snprintf(head, sizeof(head), "  %c%c%s--%s%s%s", p->key ? '-' : ' ',
				 p->key ? p->key : ' ', p->key ? ", " : "  ", p->name,
				 p->arg ? " " : "", p->arg ? p->arg : "");
		fprintf(out, "%s%*s", head, n < STB_HELP_COLUMN ? STB_HELP_COLUMN - n : 1, "");
		for (const char *l = p->help; *l;) {
			size_t k = strcspn(l, "\n");
			fwrite(l, 1, k, out);
			fputc('\n', out);
			l += k;
			if (*l == '\n' && *++l)
				fprintf(out, "%*s", STB_HELP_COLUMN, "");
		}
	}
	fputs(usage_tail, out);
}

static void version(void)
{
	printf("stb-bpf-loader %s (reads stb task tables of ABI version %u)\n", STB_VERSION,
	       STB_ABI_VERSION);
}

/* A duration: a whole number followed by "ms", "s", "m", "h" or nothing
 * (seconds). 0 and *ns set, or -EINVAL (empty, sign, fraction, unknown
 * unit, 0) or -ERANGE (over 24 hours). */
static int parse_duration(const char *s, uint64_t *ns)
{
	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	uint64_t unit;
	if (strcmp(end, "ms") == 0)
		unit = MS;
	else if (strcmp(end, "s") == 0 || *end == '\0')
		unit = SEC;
	else if (strcmp(end, "m") == 0)
		unit = 60ull * SEC;
	else if (strcmp(end, "h") == 0)
		unit = 3600ull * SEC;
	else
		return -EINVAL;
	if (v == 0)
		return -EINVAL;
	if (v > STB_DURATION_MAX_NS / unit)
		return -ERANGE;
	*ns = v * unit;
	return 0;
}

static int parse_state(const char *s)
{
	for (unsigned st = STB_TASK_CREATED; st < STB_TASK_DESTROYED; st++)
		if (strcmp(s, stb_state_name(st)) == 0)
			return (int)st;
	return -1;
}

/* The table's entry named name (a programming error if there is none). */
static size_t opt_index(const char *name)
{
	size_t i = 0;
	while (i < NOPTS - 1 && strcmp(opts[i].name, name) != 0)
		i++;
	return i;
}

/* An OPT_UINT, OPT_DURATION or OPT_STRING value into its field. 0 or
 * STB_EXIT_USAGE (the message printed). */
static int set_value(const struct opt *p, const char *arg, struct stb_loader_opts *o)
{
	void *field = (char *)o + p->field;
	uint64_t v;
	switch (p->kind) {
	case OPT_FLAG:
		*(bool *)field = true;
		return 0;
	case OPT_STRING:
		*(const char **)field = arg;
		return 0;
	case OPT_UINT:
		if (!stb_parse_u64(arg, p->lo, p->hi, &v)) {
			fprintf(stderr, "stb-bpf-loader: --%s: '%s' is not in %" PRIu64 "..%" PRIu64 "%s\n",
				p->name, arg, p->lo, p->hi, p->what);
			return STB_EXIT_USAGE;
		}
		*(unsigned *)field = (unsigned)v;
		return 0;
	case OPT_DURATION:
		if (parse_duration(arg, &v) != 0 || v < p->lo || v > p->hi) {
			fprintf(stderr,
				"stb-bpf-loader: --%s: '%s' is not a %s (a whole number of seconds, or "
				"with ms, s, m or h, e.g. %s; from %s to 24 hours)\n",
				p->name, arg, p->what, p->eg, p->lo >= SEC / 10 ? "100 ms" : "1 ms");
			return STB_EXIT_USAGE;
		}
		*(uint64_t *)field = v;
		return 0;
	case OPT_OWN:
		break;
	}
	return STB_EXIT_USAGE;
}

/* Checks and completes the --profile / --format choices after parsing. */
static int check_profile_args(struct stb_loader_opts *o, const bool *given)
{
	bool duration_set = given[opt_index("duration")], all = given[opt_index("all")];
	if (!o->profile && (duration_set || o->freq)) {
		fprintf(stderr, "stb-bpf-loader: --duration and --freq need --profile\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile && (o->nids || all || o->state_mask || o->group || o->stuck_ns)) {
		fprintf(stderr, "stb-bpf-loader: --profile covers every bthread: --bthread, --all, "
				"--state, --group and --stuck do not apply to it\n");
		return STB_EXIT_USAGE;
	}
	if (o->lines && o->no_lines) {
		fprintf(stderr, "stb-bpf-loader: --lines and --no-lines exclude each other\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile && (o->lines || o->no_lines)) {
		fprintf(stderr, "stb-bpf-loader: --lines and --no-lines are about text, which "
				"--profile does not write (pprof and json have the lines)\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile && o->no_threads) {
		fprintf(stderr, "stb-bpf-loader: --no-threads does not apply to --profile (it "
				"samples the workers and the bthreads only)\n");
		return STB_EXIT_USAGE;
	}
	const struct stb_format_info *f = stb_format_get(o->format);
	if (o->profile && o->format_set && !f->write_profile) {
		char list[128];
		stb_format_list(list, sizeof(list), STB_FORMATS_PROFILE);
		fprintf(stderr, "stb-bpf-loader: --profile writes %s, not %s\n", list, f->name);
		return STB_EXIT_USAGE;
	}
	const struct stb_format_info *by_name = o->output ? stb_format_for_path(o->output) : NULL;
	if (!o->format_set && by_name)
		o->format = by_name->format;
	else if (!o->format_set && o->every_ns)
		o->format = STB_FORMAT_PPROF;
	else if (!o->format_set && o->profile)
		o->format = STB_FORMAT_FOLDED;
	f = stb_format_get(o->format);
	if (f->binary && !o->output && !o->every_ns && isatty(STDOUT_FILENO)) {
		fprintf(stderr, "stb-bpf-loader: refusing to write binary %s data to a terminal: "
				"add -o FILE (e.g. -o stacks.%s) or redirect standard output\n",
			f->name, f->ext);
		return STB_EXIT_USAGE;
	}
	if (o->profile && !duration_set)
		o->duration_ns = o->every_ns && o->every_ns < 10ull * SEC ? o->every_ns : 10ull * SEC;
	if (o->profile && o->every_ns && o->duration_ns > o->every_ns) {
		fprintf(stderr, "stb-bpf-loader: --duration must not be longer than --every (one "
				"profile per period)\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile && !o->freq)
		o->freq = 99;
	if (!given[opt_index("deadline")]) {
		o->deadline_ns = (o->profile ? o->duration_ns : 0) +
				 STB_LOADER_DEFAULT_DEADLINE_S * 1000000000ull;
	} else if (o->profile && o->deadline_ns <= o->duration_ns) {
		fprintf(stderr, "stb-bpf-loader: --deadline must be longer than --duration (the "
				"profile needs time to start and to be written)\n");
		return STB_EXIT_USAGE;
	}
	return 0;
}

/* --leaks: a view of every bthread of the table, in a format it is written
 * in (text, json). */
static int check_leaks_args(struct stb_loader_opts *o)
{
	if (!o->leaks)
		return 0;
	if (o->profile || o->nids || o->group || o->stuck_ns) {
		fprintf(stderr, "stb-bpf-loader: --leaks views every bthread by creation site: "
				"--profile, --bthread, --group and --stuck do not apply to it (--state "
				"does)\n");
		return STB_EXIT_USAGE;
	}
	const struct stb_format_info *by_name = o->output ? stb_format_for_path(o->output) : NULL;
	if (!o->format_set)
		o->format = by_name ? by_name->format : STB_FORMAT_TEXT;
	const struct stb_format_info *f = stb_format_get(o->format);
	if (!f->write_leaks) {
		fprintf(stderr, "stb-bpf-loader: --leaks writes text or json, not %s\n", f->name);
		return STB_EXIT_USAGE;
	}
	o->format_set = true;
	return 0;
}

/* The continuous-mode options: together, and not with -o. */
static int check_every_args(struct stb_loader_opts *o, const bool *given)
{
	bool keep_set = given[opt_index("keep")];
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

/* --save: a core file of every task, nothing else written. */
static int check_save_args(struct stb_loader_opts *o, const bool *given)
{
	bool max_set = given[opt_index("save-max")];
	if (!o->save && (o->overwrite || max_set)) {
		fprintf(stderr, "stb-bpf-loader: --overwrite and --save-max need --save\n");
		return STB_EXIT_USAGE;
	}
	if (!o->save)
		return 0;
	if (!*o->save) {
		fprintf(stderr, "stb-bpf-loader: --save: an empty path\n");
		return STB_EXIT_USAGE;
	}
	if (!o->pid) {
		fprintf(stderr, "stb-bpf-loader: --save needs --pid (the process to save)\n");
		return STB_EXIT_USAGE;
	}
	if (o->profile || o->every_ns || o->leaks || o->nids || given[opt_index("all")] ||
	    o->state_mask || o->stuck_ns || o->group || o->format_set || o->output || o->lines ||
	    o->no_lines || o->runtime_frames || given[opt_index("max-depth")]) {
		fprintf(stderr, "stb-bpf-loader: --save writes a core file of every task and nothing "
				"else: read it with --core FILE and give the report's options there\n");
		return STB_EXIT_USAGE;
	}
	if (!max_set)
		o->save_max_mib = STB_CORESAVE_DEFAULT_MAX_MIB;
	return 0;
}

/* An OPT_OWN option. 0, -1 (done: --help, --version) or STB_EXIT_USAGE. */
static int set_own(const struct opt *p, const char *arg, struct stb_loader_opts *o)
{
	uint64_t v;
	switch (p->own) {
	case OWN_PID:
		if (o->pid) {
			fprintf(stderr, "stb-bpf-loader: --pid given twice: one process per "
					"run (start one loader per process)\n");
			return STB_EXIT_USAGE;
		}
		if (!stb_parse_u64(arg, 1, INT_MAX, &v)) {
			fprintf(stderr, "stb-bpf-loader: --pid: '%s' is not a process id\n", arg);
			return STB_EXIT_USAGE;
		}
		o->pid = (pid_t)v;
		return 0;
	case OWN_BTHREAD:
		/* Any number: one that is no bthread of the process is told so
		 * (exit 1), once the process is looked at. */
		if (!stb_parse_u64(arg, 0, UINT64_MAX, &v)) {
			fprintf(stderr, "stb-bpf-loader: --bthread: '%s' is not a bthread id "
					"(a decimal number as printed by the tracer)\n", arg);
			return STB_EXIT_USAGE;
		}
		if (o->nids == STB_LOADER_MAX_IDS) {
			fprintf(stderr, "stb-bpf-loader: at most %u --bthread options\n",
				STB_LOADER_MAX_IDS);
			return STB_EXIT_USAGE;
		}
		o->ids[o->nids++] = v;
		return 0;
	case OWN_ALL:
		return 0; /* the default; checked against --bthread */
	case OWN_STATE: {
		int st = parse_state(arg);
		if (st < 0) {
			fprintf(stderr, "stb-bpf-loader: --state: unknown state '%s' (running, ready, "
					"suspended, created, ready-without-stack, about-to-run, "
					"suspending)\n", arg);
			return STB_EXIT_USAGE;
		}
		o->state_mask |= 1u << st;
		return 0;
	}
	case OWN_FORMAT:
		o->format = stb_format_from_name(arg);
		if (o->format < 0) {
			char list[128];
			stb_format_list(list, sizeof(list), 0);
			fprintf(stderr, "stb-bpf-loader: --format: '%s' is not %s\n", arg, list);
			return STB_EXIT_USAGE;
		}
		o->format_set = true;
		return 0;
	case OWN_CORE:
		if (o->core) {
			fprintf(stderr, "stb-bpf-loader: --core given twice: one core per run\n");
			return STB_EXIT_USAGE;
		}
		o->core = arg;
		return 0;
	case OWN_OUT_DIR:
		if (!*arg) {
			fprintf(stderr, "stb-bpf-loader: --out-dir: an empty path\n");
			return STB_EXIT_USAGE;
		}
		o->out_dir = arg;
		return 0;
	case OWN_VERBOSE:
		o->verbose++;
		return 0;
	case OWN_VERSION:
		version();
		return -1;
	case OWN_HELP:
		usage(stdout);
		return -1;
	}
	return STB_EXIT_USAGE;
}

int stb_loader_parse_args(int argc, char **argv, struct stb_loader_opts *o)
{
	struct option longopts[NOPTS + 1];
	char shortopts[2 * NOPTS + 2] = ":";
	size_t ns = 1;
	bool given[NOPTS] = {false};
	for (size_t i = 0; i < NOPTS; i++) {
		const struct opt *p = &opts[i];
		longopts[i] = (struct option){p->name, p->arg ? required_argument : no_argument, NULL,
					      0x100 + (int)i};
		if (p->key) {
			shortopts[ns++] = (char)p->key;
			if (p->arg)
				shortopts[ns++] = ':';
		}
	}
	longopts[NOPTS] = (struct option){NULL, 0, NULL, 0};
	shortopts[ns] = '\0';
	memset(o, 0, sizeof(*o));
	o->max_depth = 64;
	o->timeout_ms = 100;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		size_t i = NOPTS;
		if (c >= 0x100 && c < 0x100 + (int)NOPTS)
			i = (size_t)(c - 0x100);
		for (size_t k = 0; i == NOPTS && k < NOPTS; k++)
			if (opts[k].key && opts[k].key == c)
				i = k;
		if (i == NOPTS) {
			if (c == ':')
				fprintf(stderr, "stb-bpf-loader: option %s needs a value\n",
					argv[optind - 1]);
			else
				fprintf(stderr, "stb-bpf-loader: unknown option %s (see --help)\n",
					argv[optind - 1]);
			return STB_EXIT_USAGE;
		}
		given[i] = true;
		int rc = opts[i].kind == OPT_OWN ? set_own(&opts[i], optarg, o)
						 : set_value(&opts[i], optarg, o);
		if (rc != 0)
			return rc;
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
	int rc = check_save_args(o, given);
	if (rc)
		return rc;
	if (given[opt_index("all")] && o->nids) {
		fprintf(stderr, "stb-bpf-loader: --all and --bthread exclude each other\n");
		return STB_EXIT_USAGE;
	}
	rc = check_every_args(o, given);
	if (!rc)
		rc = check_leaks_args(o);
	return rc ? rc : check_profile_args(o, given);
}
