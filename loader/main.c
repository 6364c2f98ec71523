/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader's main: the command line (options.c), the run's deadline
 * (deadline.c), then the snapshot (snapshot.c), the profile (profile.c) or
 * continuous mode (every.c). The target gets no signal and is never
 * ptrace-stopped.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loader.h"
#include "options.h"
#include "table/driver.h"
#include "util.h"

#if STB_LOADER_TEST_HOOKS
/* Test builds only ($STB_LOADER_FAULT_HOLD_MS): every lease is kept this
 * long, as a stuck loader would keep it. */
static unsigned fault_hold_ms;

static void fault_hold(void *arg)
{
	(void)arg;
	struct timespec ts = {fault_hold_ms / 1000, (long)(fault_hold_ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}
#endif

int main(int argc, char **argv)
{
	static struct stb_loader_opts o;
	uint64_t start = stb_now_ns();
	int rc = stb_loader_parse_args(argc, argv, &o);
	if (rc < 0)
		return STB_EXIT_OK;
	if (rc > 0)
		return rc;
	o.start_ns = start;
#if STB_LOADER_TEST_HOOKS
	const char *fault = getenv("STB_LOADER_FAULT_HOLD_MS");
	uint64_t fv;
	if (fault && stb_parse_u64(fault, 1, 600000, &fv)) {
		fault_hold_ms = (unsigned)fv;
		stb_driver_test_hold = fault_hold;
	}
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
