/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The run's last line of defence (loader.h): whatever the target makes the
 * loader do, the process ends at its deadline. Leases it may still hold
 * expire on their own (abi.h); the kernel removes its BPF program and perf
 * events.
 */
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loader.h"

static const char *watch_phase = "starting";
static bool watch_output;
static uint64_t watch_deadline_s;

void stb_watchdog_phase(const char *phase)
{
	__atomic_store_n(&watch_phase, phase, __ATOMIC_RELEASE);
}

static void *watch(void *arg)
{
	const struct timespec *at = arg;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, at, NULL) == EINTR)
		;
	const char *phase = __atomic_load_n(&watch_phase, __ATOMIC_ACQUIRE);
	char msg[256];
	int n = snprintf(msg, sizeof(msg),
			 "stb-bpf-loader: the run's deadline (%llu s, --deadline) "
			 "passed while %s: giving up; %s\n",
			 (unsigned long long)watch_deadline_s, phase,
			 watch_output ? "the output file is incomplete"
				      : "the output is "
					"incomplete");
	if (n > 0 && write(STDERR_FILENO, msg, (size_t)n) < 0)
		n = 0;
	_exit(STB_EXIT_FAIL);
	return NULL;
}

int stb_loader_watchdog_start(const struct stb_loader_opts *o)
{
	static struct timespec at;
	uint64_t end = stb_loader_deadline(o);
	at.tv_sec = (time_t)(end / 1000000000ull);
	at.tv_nsec = (long)(end % 1000000000ull);
	watch_output = o->output != NULL;
	watch_deadline_s = (o->deadline_ns + 999999999ull) / 1000000000ull;
	pthread_attr_t a;
	pthread_t th;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, 64 << 10);
	int rc = pthread_create(&th, &a, watch, &at);
	pthread_attr_destroy(&a);
	return -rc;
}
