/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The loader's capture backend for running tasks (driver.h, struct
 * stb_capture_ops): a task whose thread is blocked in a system call is read
 * from /proc (table/insyscall.h, no BPF needed); one on a CPU is captured by the
 * BPF program (bpf_prog.h), loaded the first time it is needed.
 */
#ifndef STB_LOADER_RUNNING_H
#define STB_LOADER_RUNNING_H

#include <stdbool.h>
#include <stdint.h>

#include "bpf_prog.h"
#include "table/driver.h"
#include "target.h"

struct stb_running {
	struct stb_target *tg;
	struct stb_mem mem; /* its memory (the captures of blocked threads read it) */
	int verbose;
	struct stb_bpf_prog *prog; /* NULL until loaded (or when unavailable) */
	bool tried;                /* loading was attempted (prog or note set) */
	char note[256];            /* why BPF is unavailable */
	struct stb_record *rec;    /* the last capture's record */
	uint8_t *deep;             /* the last capture's stack past the record's copy */
	size_t deep_cap;
	/* What the BPF captures cost (-v): request to record, program time. */
	uint64_t wait_max_ns, wait_sum_ns, prog_max_ns, prog_sum_ns, last_wait_ns;
	unsigned n;
};

/* Sets r up for target tg (nothing is loaded yet). Returns 0 or -ENOMEM. */
int stb_running_init(struct stb_running *r, struct stb_target *tg, int verbose);

/* Unloads everything; accepts a zeroed r. */
void stb_running_fini(struct stb_running *r);

/* The capture backend (ops->ctx = r). */
void stb_running_ops(struct stb_running *r, struct stb_capture_ops *ops);

/* How stacks were taken: "bpf+context" (BPF loaded), "context-only" (needed
 * but unavailable) or "context" (never needed). */
const char *stb_running_mode(const struct stb_running *r);

#endif /* STB_LOADER_RUNNING_H */
