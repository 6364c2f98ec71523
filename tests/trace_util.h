/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers of the in-process tracer tests: finding frames by symbol (GCC clone
 * suffixes ignored), checking a traced call chain and the bottom frames of a
 * bthread, and checking the bRPC-style text of bthread_stack_trace line by
 * line. Checks return false and explain why in a caller-provided buffer.
 */
#ifndef STB_TESTS_TRACE_UTIL_H
#define STB_TESTS_TRACE_UTIL_H

#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stb/stb.h>

#include "util.h"

/* Placed after a call so that it is not a tail call. */
#define STB_NO_TAIL() __asm__ volatile("" ::: "memory")

/* sym equals want, or want followed by a GCC suffix (".constprop.0", ".isra.0"...). */
static inline bool stb_sym_is(const char *sym, const char *want)
{
	size_t n = strlen(want);
	return sym && strncmp(sym, want, n) == 0 && (sym[n] == '\0' || sym[n] == '.');
}

/* Index of the first frame at or after from whose symbol is want, or -1. */
static inline int stb_frames_find(const struct stb_frame *f, int n, const char *want, int from)
{
	for (int i = from < 0 ? 0 : from; i < n; i++)
		if (stb_sym_is(f[i].symbol, want))
			return i;
	return -1;
}

/* Appends a readable listing of the frames to why (for failure messages). */
static inline void stb_frames_describe(const struct stb_frame *f, int n, char *why, size_t size)
{
	size_t len = strlen(why);
	for (int i = 0; i < n && len + 1 < size; i++) {
		int k = snprintf(why + len, size - len, "%s#%d %s+0x%llx", i ? " " : " [", i,
				 f[i].symbol ? f[i].symbol : "??", (unsigned long long)f[i].offset);
		if (k < 0)
			break;
		len += (size_t)k;
	}
	if (len + 2 < size)
		snprintf(why + len, size - len, "]");
}

/*
 * Checks that chain[0], chain[1], ... (innermost first, e.g. f3, f2, f1) are
 * consecutive frames; that, when nprims > 0, the frame right above chain[0]
 * is one of prims; that, when at_leaf, chain[0] is frame 0; and that, when
 * bthread_bottom, the chain ends right above stb_task_entry and
 * stb_ctx_trampoline, which are the last two frames.
 */
static inline bool stb_frames_check_chain(const struct stb_frame *f, int n, const char *const *chain,
					  int nchain, const char *const *prims, int nprims,
					  bool at_leaf, bool bthread_bottom, char *why, size_t size)
{
	why[0] = '\0';
	int i0 = stb_frames_find(f, n, chain[0], 0);
	if (i0 < 0) {
		snprintf(why, size, "%s not found", chain[0]);
		goto fail;
	}
	for (int k = 1; k < nchain; k++) {
		if (i0 + k >= n || !stb_sym_is(f[i0 + k].symbol, chain[k])) {
			snprintf(why, size, "%s is not frame %d (right below %s)", chain[k], i0 + k,
				 chain[k - 1]);
			goto fail;
		}
	}
	if (at_leaf && i0 != 0) {
		snprintf(why, size, "%s is frame %d, not frame 0", chain[0], i0);
		goto fail;
	}
	if (nprims > 0) {
		bool ok = false;
		for (int k = 0; k < nprims && i0 > 0; k++)
			ok = ok || stb_sym_is(f[i0 - 1].symbol, prims[k]);
		if (!ok) {
			snprintf(why, size, "frame %d above %s is not %s", i0 - 1, chain[0], prims[0]);
			goto fail;
		}
	}
	if (bthread_bottom) {
		if (i0 + nchain != n - 2 || !stb_sym_is(f[n - 2].symbol, "stb_task_entry") ||
		    !stb_sym_is(f[n - 1].symbol, "stb_ctx_trampoline")) {
			snprintf(why, size, "the chain is not followed by exactly stb_task_entry, "
					    "stb_ctx_trampoline");
			goto fail;
		}
	}
	return true;
fail:
	stb_frames_describe(f, n, why, size);
	return false;
}

/*
 * Checks bRPC-style text: every line is "#N 0x<16 hex> symbol+0x<hex>" (a
 * demangled C++ symbol may contain spaces) with
 * N = 0, 1, ... in order and, when f is not NULL, the same symbols as f[0..n-1]
 * (n lines exactly). Returns the number of lines, or -1 with why set.
 */
static inline int stb_text_check(const char *text, const struct stb_frame *f, int n, char *why,
				 size_t size)
{
	regex_t re;
	/* " [fp]": a frame found by a frame-pointer scan (a thread blocked in a system call). */
	if (regcomp(&re, "^#([0-9]+) 0x[0-9a-f]{16} (.+)\\+0x[0-9a-f]+( \\[fp\\])?$", REG_EXTENDED) != 0) {
		snprintf(why, size, "regcomp failed");
		return -1;
	}
	int lines = 0;
	const char *p = text;
	while (*p) {
		const char *nl = strchr(p, '\n');
		if (!nl) {
			snprintf(why, size, "line %d has no newline: \"%.120s\"", lines, p);
			goto fail;
		}
		char line[512];
		size_t len = (size_t)(nl - p) < sizeof(line) - 1 ? (size_t)(nl - p) : sizeof(line) - 1;
		memcpy(line, p, len);
		line[len] = '\0';
		regmatch_t m[3];
		if (regexec(&re, line, 3, m, 0) != 0) {
			snprintf(why, size, "line %d does not match \"#N 0x%%016x symbol+0xoff\": \"%.120s\"",
				 lines, line);
			goto fail;
		}
		if (atoi(line + 1) != lines) {
			snprintf(why, size, "line %d is numbered %d", lines, atoi(line + 1));
			goto fail;
		}
		if (f) {
			line[m[2].rm_eo] = '\0';
			if (lines >= n || !f[lines].symbol || strcmp(f[lines].symbol, line + m[2].rm_so)) {
				snprintf(why, size, "line %d names %.100s, the frame trace %.100s", lines,
					 line + m[2].rm_so,
					 lines < n && f[lines].symbol ? f[lines].symbol : "nothing");
				goto fail;
			}
		}
		lines++;
		p = nl + 1;
	}
	if (f && lines != n) {
		snprintf(why, size, "%d lines for %d frames", lines, n);
		goto fail;
	}
	regfree(&re);
	return lines;
fail:
	regfree(&re);
	return -1;
}

#endif /* STB_TESTS_TRACE_UTIL_H */
