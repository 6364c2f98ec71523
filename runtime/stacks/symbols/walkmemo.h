/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Walks remembered by what they read: tasks parked at the same place have
 * stacks whose frames hold the same return addresses at the same offsets, so
 * one walk gives the frames of all of them. A walk is replayed for a copy
 * that holds, at every word the walk read, what its own copy held there (a
 * word pointing into the copy compared by its offset in it).
 */
#ifndef STB_RUNTIME_STACKS_SYMBOLS_WALKMEMO_H
#define STB_RUNTIME_STACKS_SYMBOLS_WALKMEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "symbols/frames.h"
#include "unwind/unwind.h"

/* Copies longer than this are walked, never remembered. */
#define STB_WALKMEMO_MAX_COPY (64u * 1024)
/* Default memory for remembered walks (keys and frames). */
#define STB_WALKMEMO_DEFAULT_BYTES (16u * 1024 * 1024)

struct stb_walkmemo;

struct stb_walkmemo_stats {
	uint64_t lookups; /* walks asked for that could be remembered */
	uint64_t hits;    /* of them, answered without walking */
	uint64_t stored;  /* walks remembered */
	uint64_t bytes;   /* memory they take */
	bool off;         /* gave up: too few hits to pay for the keys */
};

/*
 * An empty memo of at most max_bytes of remembered walks (0: the default).
 * NULL + errno (ENOMEM). Not thread-safe: one walker.
 */
struct stb_walkmemo *stb_walkmemo_new(size_t max_bytes);

/* Frees m and every walk in it; NULL is fine. */
void stb_walkmemo_free(struct stb_walkmemo *m);

/* Forgets every walk and the statistics (memory stays for reuse, up to the
 * table's buckets). NULL is fine. */
void stb_walkmemo_reset(struct stb_walkmemo *m);

/*
 * stb_unw_walk of regs (STB_UNW_COPY_ONLY set: only copy is read) into
 * sink, answered from m when it remembers a walk with the same module table
 * (gen of unw's registry), sink limits, register flags and ip, sp and bp, of
 * a copy of the same length (both 8-byte aligned), that read only words of
 * its copy which the new copy holds as well (sp, bp and each word pointing
 * into its copy compared by its offset there). The frames' stack pointers
 * are moved by the distance between the two copies. A walk is remembered
 * only when it ended on its own (not by a deadline or budget), used nothing
 * but ip, sp, bp and aligned words of the copy (the unwinder's cached CFA
 * rules or frame pointers: stb_unw_result.replayable), delivered no ip that
 * points into the copy, and the registry did not change under it. sink:
 * fresh (nothing delivered yet), without symbols, callback or inline
 * frames; any other sink, an unaligned or long copy, or m NULL is simply
 * walked. Same return value as stb_unw_walk. Blocks as a walk does.
 */
int stb_walkmemo_walk(struct stb_walkmemo *m, struct stb_unw_proc *unw,
		      const struct stb_regs *regs, const struct stb_stack_copy *copy,
		      struct stb_frame_sink *sink);

/* m's statistics since its creation or reset (zeros for NULL). */
struct stb_walkmemo_stats stb_walkmemo_stats(const struct stb_walkmemo *m);

#endif /* STB_RUNTIME_STACKS_SYMBOLS_WALKMEMO_H */
