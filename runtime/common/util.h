/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small helpers shared by the runtime, the loader, the tools, the examples
 * and the tests: the monotonic clock in nanoseconds, API deadlines, the
 * strict number parsing every command line of the project uses, and the
 * formatting of an error message into a caller's buffer. Header-only, no
 * state.
 */
#ifndef STB_RUNTIME_COMMON_UTIL_H
#define STB_RUNTIME_COMMON_UTIL_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/*
 * For functions whose frames traces, tests and benchmarks look for by name.
 * STB_NOIPA: out of every interprocedural optimization (no inlining,
 * cloning, identical-code folding, assumptions about what it returns);
 * STB_NOINLINE_NOCLONE: never inlined nor cloned into a specialised copy
 * with another name. gcc has noipa and noclone; clang has neither and makes
 * no such clones, so noinline is what it gets.
 */
#if defined(__clang__)
#define STB_NOIPA __attribute__((noinline))
#define STB_NOINLINE_NOCLONE __attribute__((noinline))
#else
#define STB_NOIPA __attribute__((noipa))
#define STB_NOINLINE_NOCLONE __attribute__((noinline, noclone))
#endif

/* Formats a message into err[len] as snprintf does (len 0: nothing). */
static inline __attribute__((format(printf, 3, 4))) void stb_say(char *err, size_t len,
								 const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

/* CLOCK_MONOTONIC in ns. Thread-safe, never blocks (vDSO). */
static inline uint64_t stb_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CLOCK_REALTIME ms milliseconds from now: the abstime of the API's timed
 * calls (butex_wait, bthread_cond_timedwait, bthread_fd_timedwait...). */
static inline struct timespec stb_realtime_after_ms(uint64_t ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t ns = (uint64_t)ts.tv_nsec + (ms % 1000u) * 1000000u;
	ts.tv_sec += (time_t)(ms / 1000u + ns / 1000000000u);
	ts.tv_nsec = (long)(ns % 1000000000u);
	return ts;
}

/* Strict decimal: digits only (no sign, space or suffix), within [lo, hi].
 * Returns true and sets *out, or false and leaves it alone. */
static inline bool stb_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	if (!s || *s < '0' || *s > '9')
		return false;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* Strict seconds: "S" or "S.fff" (at most 3 decimals, no sign, space or
 * suffix), len bytes of s, between 1 ms and max_s seconds. Returns true and
 * sets *ns, or false and leaves it alone. */
static inline bool stb_parse_seconds(const char *s, size_t len, uint64_t max_s, uint64_t *ns)
{
	uint64_t sec = 0, frac = 0, scale = 1000000000u;
	size_t i = 0;
	for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
		sec = sec * 10 + (uint64_t)(s[i] - '0');
		if (sec > max_s)
			return false;
	}
	if (i == 0)
		return false;
	if (i < len && s[i] == '.') {
		size_t k = ++i;
		for (; i < len && s[i] >= '0' && s[i] <= '9' && i - k < 3; i++) {
			scale /= 10;
			frac += (uint64_t)(s[i] - '0') * scale;
		}
		if (i == k)
			return false;
	}
	uint64_t v = sec * 1000000000u + frac;
	if (i != len || v < 1000000u || v > max_s * 1000000000u)
		return false;
	*ns = v;
	return true;
}

#endif /* STB_RUNTIME_COMMON_UTIL_H */
