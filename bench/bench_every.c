/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bench-every: runs a command every N milliseconds until SIGTERM/SIGINT,
 * then prints how often it ran, how long runs took and the CPU they used (for
 * bench/macro_echo.sh: stb-bpf-loader every 100 ms against a loaded server).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define EXIT_USAGE 64

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
	(void)sig;
	stop_requested = 1;
}


static void usage(FILE *out)
{
	fprintf(out,
		"Usage: stb-bench-every --interval-ms N [--output FILE] -- COMMAND [ARG...]\n"
		"Runs COMMAND every N ms (a run that overruns starts the next one at once; missed\n"
		"ticks are skipped) until SIGTERM or SIGINT, then prints one line to stdout:\n"
		"  runs R failed F wall_ms_mean M wall_ms_max X cpu_ms_per_run C\n"
		"COMMAND's stdout goes to FILE (default /dev/null); its stderr is kept.\n"
		"\n"
		"Options:\n"
		"  -i, --interval-ms N   period, 1..3600000 (required)\n"
		"  -o, --output FILE     where COMMAND's stdout goes (truncated each run)\n"
		"  -h, --help            this text\n"
		"\n"
		"Example:\n"
		"  stb-bench-every --interval-ms 100 -- stb-bpf-loader --pid 1234 --all\n"
		"\n"
		"Exit status: 0 ok (even if runs failed: see F), 1 failure, 64 usage error.\n");
}

/* Runs argv once; returns its exit status (-1: could not start), adds its CPU. */
static int run_once(char **argv, const char *output, uint64_t *cpu_ns)
{
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open(output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0)
			_exit(127);
		execvp(argv[0], argv);
		fprintf(stderr, "stb-bench-every: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	int status;
	struct rusage ru;
	while (wait4(pid, &status, 0, &ru) < 0) {
		if (errno != EINTR)
			return -1;
	}
	*cpu_ns += (uint64_t)ru.ru_utime.tv_sec * 1000000000ull + (uint64_t)ru.ru_utime.tv_usec * 1000u +
		   (uint64_t)ru.ru_stime.tv_sec * 1000000000ull + (uint64_t)ru.ru_stime.tv_usec * 1000u;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"interval-ms", required_argument, NULL, 'i'},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	uint64_t interval_ms = 0;
	const char *output = "/dev/null";
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:i:o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'i':
			if (!stb_parse_u64(optarg, 1, 3600000, &interval_ms)) {
				fprintf(stderr, "stb-bench-every: --interval-ms: '%s' is not in "
						"1..3600000\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case 'o':
			output = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case ':':
			fprintf(stderr, "stb-bench-every: option %s needs a value\n", argv[optind - 1]);
			return EXIT_USAGE;
		default:
			fprintf(stderr, "stb-bench-every: unknown option %s (see --help)\n",
				argv[optind - 1]);
			return EXIT_USAGE;
		}
	}
	if (!interval_ms || optind >= argc) {
		fprintf(stderr, "stb-bench-every: need --interval-ms and a command after -- "
				"(see --help)\n");
		return EXIT_USAGE;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	uint64_t runs = 0, failed = 0, wall_sum = 0, wall_max = 0, cpu = 0;
	uint64_t period = interval_ms * 1000000u;
	uint64_t next = stb_now_ns();
	while (!stop_requested) {
		uint64_t t0 = stb_now_ns();
		int rc = run_once(argv + optind, output, &cpu);
		uint64_t dt = stb_now_ns() - t0;
		if (rc == -1) {
			fprintf(stderr, "stb-bench-every: cannot start %s: %s\n", argv[optind],
				strerror(errno));
			return 1;
		}
		runs++;
		failed += rc != 0;
		wall_sum += dt;
		if (dt > wall_max)
			wall_max = dt;
		next += period;
		uint64_t now = stb_now_ns();
		if (next < now)
			next = now; /* overran: start the next run at once */
		struct timespec ts = {(time_t)(next / 1000000000u), (long)(next % 1000000000u)};
		while (!stop_requested &&
		       clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
	}
	printf("runs %" PRIu64 " failed %" PRIu64 " wall_ms_mean %.2f wall_ms_max %.2f "
	       "cpu_ms_per_run %.2f\n",
	       runs, failed, runs ? (double)wall_sum / (double)runs / 1e6 : 0.0,
	       (double)wall_max / 1e6, runs ? (double)cpu / (double)runs / 1e6 : 0.0);
	return 0;
}
