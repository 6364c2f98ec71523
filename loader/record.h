/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Stacks in the loader: the collector that turns unwinder frames into
 * stb_frame, and BPF records (capture and sample) turned into unwinder input,
 * a DWARF walk continued with the frame-pointer chain the program recorded.
 * Used by the loader, its off-CPU reader and the profiler.
 */
#ifndef STB_LOADER_RECORD_H
#define STB_LOADER_RECORD_H

#include <stddef.h>

#include "bpf_prog.h"
#include "stb/stb.h"
#include "unwind.h"

/* Frames of a walk, as stb_frame (ip, sp, STB_FRAME_F_FP for frame-pointer
 * frames; no symbols yet). */
struct stb_frame_collect {
	struct stb_frame *frames;
	unsigned n, max;
};

/* stb_unw_frame_fn appending to a struct stb_frame_collect; stops when full. */
int stb_frame_collect(const struct stb_unw_frame *f, void *arg);

/*
 * Walks record rec (size bytes as received): DWARF over the copied stack,
 * red zone included, from the recorded registers; then the frames of the
 * bpf_get_stack chain beyond the last DWARF frame (how = STB_FRAME_FP). With
 * no stack copy, or when DWARF yields nothing, the chain alone. Calls fn for
 * each frame, at most max times (fn's non-zero return stops early). Returns
 * the number of frames delivered. Thread-safe as stb_unw_walk; never blocks
 * on the target (reads only the record).
 */
unsigned stb_record_unwind(struct stb_unw_proc *unw, const struct stb_record *rec,
			   size_t size, unsigned max, stb_unw_frame_fn fn, void *arg);

#endif /* STB_LOADER_RECORD_H */
