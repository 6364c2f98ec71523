/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Target of test_loader_corefile's crash cores: bthreads parked in a known
 * sleep chain, then a fatal fault at a known address -- in a bthread
 * (crash_target bthread) or in a plain pthread that is no task (crash_target
 * pthread). Prints "sleeper ID" for each sleeper, then "crash bthread ID ADDR"
 * or "crash thread TID ADDR", and crashes.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bthread/bthread.h>

#include "util.h"

#define CT_FN STB_NOIPA __attribute__((used))
#define CT_NO_TAIL() __asm__ volatile("" ::: "memory")
#define CT_SLEEPERS 3
/* Where the faults write: unmapped, and different for the two kinds. */
#define CT_BTHREAD_ADDR 0x10u
#define CT_PTHREAD_ADDR 0x28u

CT_FN static int ct_sleep_leaf(void)
{
	int rc = bthread_usleep(3600ull * 1000000ull);
	CT_NO_TAIL();
	return rc;
}

CT_FN static void *ct_sleep_main(void *arg)
{
	(void)arg;
	ct_sleep_leaf();
	CT_NO_TAIL();
	return NULL;
}

/* The fault: a store to addr (volatile: never optimized away). */
CT_FN static void ct_fault_leaf(uintptr_t addr)
{
	*(volatile int *)addr = 42;
	CT_NO_TAIL();
}

CT_FN static void ct_fault_mid(uintptr_t addr)
{
	ct_fault_leaf(addr);
	CT_NO_TAIL();
}

CT_FN static void *ct_crasher_main(void *arg)
{
	(void)arg;
	printf("crash bthread %" PRIu64 " 0x%x\n", (uint64_t)bthread_self(), CT_BTHREAD_ADDR);
	fflush(stdout);
	ct_fault_mid(CT_BTHREAD_ADDR);
	CT_NO_TAIL();
	return NULL;
}

CT_FN static void *ct_thread_main(void *arg)
{
	(void)arg;
	printf("crash thread %ld 0x%x\n", (long)syscall(SYS_gettid), CT_PTHREAD_ADDR);
	fflush(stdout);
	ct_fault_mid(CT_PTHREAD_ADDR);
	CT_NO_TAIL();
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2 || (strcmp(argv[1], "bthread") != 0 && strcmp(argv[1], "pthread") != 0)) {
		fprintf(stderr, "usage: crash_target bthread|pthread\n");
		return 64;
	}
	for (int i = 0; i < CT_SLEEPERS; i++) {
		bthread_t t;
		bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
		bthread_attr_set_name(&attr, "ct-sleeper");
		if (bthread_start_background(&t, &attr, ct_sleep_main, NULL) != 0)
			return 1;
		printf("sleeper %" PRIu64 "\n", (uint64_t)t);
	}
	fflush(stdout);
	/* The sleepers park first. */
	struct timespec ts = {0, 200 * 1000000l};
	nanosleep(&ts, NULL);
	if (strcmp(argv[1], "bthread") == 0) {
		bthread_t t;
		bthread_attr_t attr = BTHREAD_ATTR_NORMAL;
		bthread_attr_set_name(&attr, "ct-crasher");
		if (bthread_start_background(&t, &attr, ct_crasher_main, NULL) != 0)
			return 1;
	} else {
		pthread_t th;
		if (pthread_create(&th, NULL, ct_thread_main, NULL) != 0)
			return 1;
	}
	for (;;)
		pause();
}
