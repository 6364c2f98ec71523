/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The frame sink: where the frames of one walk go, for every tracer. It turns
 * unwinder frames into stb_frame (symbols and inline frames when asked),
 * counts logical frames -- inline ones included -- against the depth limit,
 * never writes past the caller's array, and ends the walk at a deadline.
 */
#ifndef STB_RUNTIME_STACKS_SYMBOLS_FRAMES_H
#define STB_RUNTIME_STACKS_SYMBOLS_FRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stb/stb.h"
#include "unwind/unwind.h"

struct stb_sym;

struct stb_frame_sink {
	/* Set by the caller (zero = default / none). */
	struct stb_frame *frames; /* frames[0 .. nframes) receive the frames; may be NULL */
	size_t nframes;
	unsigned max;          /* logical frames at most; 0: STB_UNW_DEFAULT_DEPTH */
	unsigned skip;         /* physical frames the walk skipped (symbol flags) */
	stb_frame_fn on_frame; /* called for each logical frame; non-zero stops */
	void *arg;
	struct stb_sym *sym; /* symbols now; NULL: ip/sp/flags only */
	bool no_source;      /* symbols without file:line */
	bool inline_frames;  /* add STB_FRAME_F_INLINED frames (needs sym) */
	bool first_exact;    /* frame 0 is the interrupted instruction */
	uint64_t deadline;   /* CLOCK_MONOTONIC ns; the walk ends there (checked every
				16 frames); 0: none */
	/* Results. */
	unsigned n;     /* logical frames delivered (<= max) */
	unsigned phys;  /* physical frames seen */
	bool truncated; /* a frame beyond max existed */
	bool stopped;   /* on_frame asked to stop */
	bool timed_out; /* the deadline ended the walk */
};

/* Physical frames to ask the unwinder for, so that the sink sees whether a
 * frame exists beyond s->max (a logical frame needs at least one). */
unsigned stb_frame_sink_depth(const struct stb_frame_sink *s);

/*
 * stb_unw_frame_fn delivering into the sink (arg = struct stb_frame_sink *).
 * Returns non-zero when the walk must end: the limit, the callback or the
 * deadline. Not thread-safe for one sink.
 */
int stb_frame_sink_add(const struct stb_unw_frame *f, void *arg);

#endif /* STB_RUNTIME_STACKS_SYMBOLS_FRAMES_H */
