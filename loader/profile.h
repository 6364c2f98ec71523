/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader --profile: a bthread-aware profile of another process over a
 * duration. On-CPU stacks come from the BPF program in sample mode (every
 * worker, tagged with its current bthread from the shared table); off-CPU
 * stacks of suspended and ready bthreads from periodic snapshots of their
 * saved contexts. Written as pprof, folded stacks or JSON (runtime/stacks/pprof.h).
 */
#ifndef STB_LOADER_PROFILE_H
#define STB_LOADER_PROFILE_H

#include <stdint.h>
#include <sys/types.h>

#define STB_PROFILE_FREQ_MAX 1000u
#define STB_PROFILE_DURATION_MAX_NS (24ull * 3600u * 1000000000u)

struct stb_profile_opts {
	pid_t pid;
	uint64_t duration_ns;   /* 1 ms .. STB_PROFILE_DURATION_MAX_NS */
	unsigned freq;          /* samples and snapshots per second, 1..STB_PROFILE_FREQ_MAX */
	int format;             /* enum stb_format (stb/stb.h): pprof, folded or json */
	const char *output;     /* NULL: standard output */
	unsigned max_depth;     /* frames per stack, 1..1024 */
	int verbose;
};

/*
 * Parses a duration: a whole number followed by "ms", "s", "m" or nothing
 * (seconds), e.g. "500ms", "10s", "2m", "30". Returns 0 and sets *ns, or
 * -EINVAL (empty, sign, fraction, unknown unit, 0) / -ERANGE (above
 * STB_PROFILE_DURATION_MAX_NS).
 */
int stb_profile_parse_duration(const char *s, uint64_t *ns);

/*
 * Profiles process o->pid for o->duration_ns (or until SIGINT/SIGTERM) and
 * writes the result; progress on stderr when it is a terminal, a summary at
 * the end. Blocks for the duration. Returns the process exit status: 0, or 1
 * on failure (the message is printed), including a target that exited
 * during the profile (the profile of the time before is still written).
 */
int stb_profile_run(const struct stb_profile_opts *o);

#endif /* STB_LOADER_PROFILE_H */
