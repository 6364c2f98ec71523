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

#define STB_PROFILE_FREQ_MAX 1000u
#define STB_PROFILE_DURATION_MAX_NS (24ull * 3600u * 1000000000u)

/*
 * Parses a duration: a whole number followed by "ms", "s", "m" or nothing
 * (seconds), e.g. "500ms", "10s", "2m", "30". Returns 0 and sets *ns, or
 * -EINVAL (empty, sign, fraction, unknown unit, 0) / -ERANGE (above
 * STB_PROFILE_DURATION_MAX_NS).
 */
int stb_profile_parse_duration(const char *s, uint64_t *ns);

/*
 * stb_profile_run (loader.h) profiles process o->pid for o->duration_ns (or
 * until SIGINT/SIGTERM) and writes the result; progress on stderr when it is
 * a terminal, a summary at the end. Blocks for the duration; no unwind goes
 * on past it. Returns the process exit status: 0, or 1 on failure (the
 * message is printed), including a target that exited during the profile
 * (the profile of the time before is still written).
 */

#endif /* STB_LOADER_PROFILE_H */
