/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The frame sink (frames.h).
 */
#include <string.h>

#include "symbols/frames.h"
#include "symbols/symbolize.h"
#include "util.h"

unsigned stb_frame_sink_depth(const struct stb_frame_sink *s)
{
	unsigned max = s->max ? s->max : STB_UNW_DEFAULT_DEPTH;
	return max < UINT32_MAX ? max + 1 : max;
}

/* One logical frame: 1 to stop the walk. */
static int emit(struct stb_frame_sink *s, const struct stb_frame *f)
{
	unsigned max = s->max ? s->max : STB_UNW_DEFAULT_DEPTH;
	if (s->n >= max) {
		s->truncated = true;
		return 1;
	}
	if (s->frames && s->n < s->nframes)
		s->frames[s->n] = *f;
	s->n++;
	if (s->on_frame && s->on_frame(f, s->arg)) {
		s->stopped = true;
		return 1;
	}
	return 0;
}

int stb_frame_sink_add(const struct stb_unw_frame *uf, void *arg)
{
	struct stb_frame_sink *s = arg;
	/* The clock before every 16th frame: a walk of 1,024 frames is still
	 * stopped within microseconds of the deadline. Not before the first:
	 * whoever starts a walk has just looked (a clock read costs ~30 ns, a
	 * tenth of a short walk). */
	if (s->deadline && (s->phys & 15) == 15 && stb_now_ns() >= s->deadline) {
		s->timed_out = true;
		return 1;
	}
	unsigned idx = s->skip + s->phys++;
	struct stb_frame f;
	memset(&f, 0, sizeof(f));
	f.ip = uf->ip;
	f.sp = uf->sp;
	f.flags = uf->how == STB_FRAME_FP ? STB_FRAME_F_FP : 0;
	if (s->sym) {
		struct stb_sym_info si;
		int flags = (idx > 0 || !s->first_exact ? STB_SYM_RETURN : 0) |
			    (s->no_source ? STB_SYM_NO_SOURCE : 0);
		if (stb_sym_fill_frame(s->sym, flags, &f, &si) && s->inline_frames) {
			for (unsigned i = 0; i < si.ninline; i++) {
				struct stb_frame in = f;
				in.symbol = si.inlines[i].function;
				in.file = si.inlines[i].file;
				in.line = si.inlines[i].line;
				in.offset = 0;
				in.flags |= STB_FRAME_F_INLINED;
				if (emit(s, &in))
					return 1;
			}
		}
	}
	return emit(s, &f);
}
