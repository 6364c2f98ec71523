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
#include "util.h"

static const char *watch_phase = "starting";
static bool watch_output;
static uint64_t watch_deadline_s;
/* The deadline (CLOCK_MONOTONIC ns), re-armed by continuous mode. */
static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watch_cv;
static uint64_t watch_at;

void stb_deadline_phase(const char *phase)
{
	__atomic_store_n(&watch_phase, phase, __ATOMIC_RELEASE);
}

void stb_deadline_arm(uint64_t end_ns)
{
	pthread_mutex_lock(&watch_mu);
	watch_at = end_ns;
	pthread_cond_signal(&watch_cv);
	pthread_mutex_unlock(&watch_mu);
}

static void *watch(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&watch_mu);
	for (;;) {
		uint64_t now = stb_now_ns(), at = watch_at;
		if (now >= at)
			break;
		/* Never armed: look again in a day (arming wakes this up). */
		uint64_t until = at - now > 86400ull * 1000000000ull ? now + 86400ull * 1000000000ull
								   : at;
		struct timespec ts = {(time_t)(until / 1000000000ull),
				      (long)(until % 1000000000ull)};
		pthread_cond_timedwait(&watch_cv, &watch_mu, &ts);
	}
	pthread_mutex_unlock(&watch_mu);
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

int stb_deadline_start(const struct stb_loader_opts *o)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&watch_cv, &ca);
	pthread_condattr_destroy(&ca);
	watch_at = o->every_ns ? UINT64_MAX : stb_loader_deadline(o);
	watch_output = o->output != NULL;
	watch_deadline_s = (o->deadline_ns + 999999999ull) / 1000000000ull;
	pthread_attr_t a;
	pthread_t th;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, 64 << 10);
	int rc = pthread_create(&th, &a, watch, NULL);
	pthread_attr_destroy(&a);
	return -rc;
}
