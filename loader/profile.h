/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bpf-loader --profile: a bthread-aware profile of another process over a
 * duration. On-CPU stacks come from the BPF program in sample mode (every
 * worker, tagged with its current bthread from the shared table); off-CPU
 * stacks of suspended and ready bthreads from periodic snapshots of their
 * saved contexts. Written as pprof, folded stacks, JSON or a flame graph
 * (runtime/stacks/report/pprof.h).
 */
#ifndef STB_LOADER_PROFILE_H
#define STB_LOADER_PROFILE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define STB_PROFILE_FREQ_MAX 1000u


/*
 * stb_profile_run (loader.h) profiles process o->pid for o->duration_ns (or
 * until SIGINT/SIGTERM) and writes the result; progress on stderr when it is
 * a terminal, a summary at the end. Blocks for the duration; no unwind goes
 * on past it. Returns the process exit status: 0, or 1 on failure (the
 * message is printed), including a target that exited during the profile
 * (the profile of the time before is still written).
 */

/*
 * Profiles in continuous mode (every.c): stb_profile_open sets up what every
 * profile of the session shares (the target, modules, symbols, the BPF
 * program), printing why it failed (NULL); stb_profile_once profiles for
 * o->duration_ns from start_ns (or until stb_profile_stop) and writes it to
 * out, returning the exit status; stb_profile_close accepts NULL.
 * stb_profile_stop is async-signal-safe: it ends the profile in progress
 * early (it is still written). Not thread-safe otherwise.
 */
struct stb_prof;
struct stb_loader_opts;
struct stb_run_result;
struct stb_prof *stb_profile_open(const struct stb_loader_opts *o);
int stb_profile_once(struct stb_prof *P, uint64_t start_ns, FILE *out,
		     struct stb_run_result *res);
bool stb_profile_target_alive(struct stb_prof *P);
void stb_profile_close(struct stb_prof *P);
void stb_profile_stop(void);

#endif /* STB_LOADER_PROFILE_H */
