/* SPDX-License-Identifier: Apache-2.0 */
/*
 * BPF records (request and sample mode, bpf/record.h) turned into unwinder
 * input: a DWARF walk over the record's stack copy continued with the
 * frame-pointer chain the program recorded. Used by the loader's capture of
 * running tasks and by the profiler.
 */
#ifndef STB_LOADER_RECORD_UNWIND_H
#define STB_LOADER_RECORD_UNWIND_H

#include <stddef.h>

#include "bpf_prog.h"
#include "stb/stb.h"
#include "unwind/unwind.h"

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

/*
 * The registers and stack copy of record rec (size bytes as received), red
 * zone included, as stb_record_unwind walks them: 0 with *regs and *copy set
 * (copy->bytes points into rec), -ENODATA when the record holds no stack.
 * Reads only the record.
 */
int stb_record_copy(const struct stb_record *rec, size_t size, struct stb_regs *regs,
		    struct stb_stack_copy *copy);

#endif /* STB_LOADER_RECORD_UNWIND_H */
