/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by the runtime-core tests: a watchdog that turns a hang into
 * a failure, clocks and CLOCK_REALTIME deadlines, bounded polling, and checks
 * made inside bthreads or helper pthreads (cmocka asserts may only run on the
 * test's own thread, so those are recorded and asserted there afterwards).
 */
#ifndef STB_TESTS_TEST_UTIL_H
#define STB_TESTS_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h" /* stb_now_ns, stb_realtime_after_ms (runtime/) */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define STB_TEST_SANITIZED 1
#else
#define STB_TEST_SANITIZED 0
#endif
#if defined(__SANITIZE_THREAD__)
#define STB_TEST_TSAN 1
#else
#define STB_TEST_TSAN 0
#endif

/* Loop counts scaled down under the (much slower) sanitizers. */
#define STB_TEST_SCALE(normal, sanitized) (STB_TEST_SANITIZED ? (sanitized) : (normal))
/*
 * Counts of bthreads created, scaled down under ThreadSanitizer only: there
 * every new bthread costs a TSan fiber (about 1-2 ms on this machine).
 */
#define STB_TEST_TSAN_SCALE(normal, tsan) (STB_TEST_TSAN ? (tsan) : (normal))

static inline double stb_test_ms_since(uint64_t start_ns)
{
	return (double)(stb_now_ns() - start_ns) / 1e6;
}

/* Sleeps the calling OS thread (never a bthread switch). */
static inline void stb_test_sleep_ms(unsigned ms)
{
	struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000l};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/*
 * errno of the calling thread, read fresh. A bthread may resume on another
 * worker after a blocking call, and glibc declares __errno_location() const,
 * so code like "errno = 0; call(); use errno" may keep the first worker's
 * errno address across the call. Read errno only through this after a call
 * that can suspend.
 */
static __attribute__((noinline, unused)) int stb_test_errno(void)
{
	int *p = &errno;
	__asm__ volatile("" : "+r"(p)); /* neither pure nor const: never hoisted */
	return *p;
}

/* ---- watchdog ---- */

static const char *volatile stb_test_wd_name __attribute__((unused));
static const char *volatile stb_test_wd_note __attribute__((unused)); /* progress hint */

static inline void stb_test_wd_write(const char *s)
{
	size_t n = strlen(s);
	while (n > 0) {
		ssize_t k = write(STDERR_FILENO, s, n);
		if (k <= 0)
			return;
		s += k;
		n -= (size_t)k;
	}
}

static inline void stb_test_wd_fire(int sig)
{
	(void)sig;
	stb_test_wd_write("\nWATCHDOG: test ");
	stb_test_wd_write(stb_test_wd_name ? stb_test_wd_name : "?");
	stb_test_wd_write(" did not finish in time (a hang or a lost wake-up)");
	if (stb_test_wd_note) {
		stb_test_wd_write("; last step: ");
		stb_test_wd_write(stb_test_wd_note);
	}
	stb_test_wd_write("\n");
	_exit(1);
}

/* Arms the watchdog for the current test: the process fails after seconds. */
static inline void stb_test_watchdog(const char *name, unsigned seconds)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = stb_test_wd_fire;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	stb_test_wd_name = name;
	stb_test_wd_note = NULL;
	alarm(seconds);
}

/* ---- checks off the test thread ---- */

static unsigned stb_test_nfail __attribute__((unused));
static char stb_test_first_fail[512] __attribute__((unused));

__attribute__((format(printf, 3, 4))) static inline void
stb_test_record_fail(const char *file, int line, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s:%d: check failed: %s\n", file, line, msg);
	if (__atomic_fetch_add(&stb_test_nfail, 1, __ATOMIC_ACQ_REL) == 0)
		snprintf(stb_test_first_fail, sizeof(stb_test_first_fail), "%s:%d: %s", file, line,
			 msg);
}

/* Check usable anywhere (bthreads, helper pthreads); failures are recorded. */
#define STB_EXPECT(cond)                                                                   \
	do {                                                                               \
		if (!(cond))                                                               \
			stb_test_record_fail(__FILE__, __LINE__, "%s", #cond);            \
	} while (0)
#define STB_EXPECT_EQ(a, b)                                                                \
	do {                                                                               \
		long long stb_a_ = (long long)(a), stb_b_ = (long long)(b);                \
		if (stb_a_ != stb_b_)                                                      \
			stb_test_record_fail(__FILE__, __LINE__, "%s == %s (%lld != %lld)", #a, \
					     #b, stb_a_, stb_b_);                          \
	} while (0)

/* Starts a test: arms the watchdog and clears recorded failures. */
#define STB_TEST_BEGIN(seconds)                                                            \
	do {                                                                               \
		__atomic_store_n(&stb_test_nfail, 0, __ATOMIC_RELEASE);                    \
		stb_test_first_fail[0] = '\0';                                             \
		stb_test_watchdog(__func__, (seconds));                                    \
	} while (0)

/* Fails the cmocka test if any recorded check failed; disarms the watchdog. */
#define STB_TEST_END()                                                                     \
	do {                                                                               \
		unsigned stb_n_ = __atomic_load_n(&stb_test_nfail, __ATOMIC_ACQUIRE);     \
		if (stb_n_ != 0)                                                           \
			fail_msg("%u check(s) failed off the test thread; first: %s", stb_n_, \
				 stb_test_first_fail);                                     \
		alarm(0);                                                                  \
	} while (0)

/* Polls cond (an expression) every 200 us for up to ms milliseconds; true if it held. */
#define STB_WAIT_UNTIL(cond, ms)                                                           \
	({                                                                                 \
		uint64_t stb_end_ = stb_now_ns() + (uint64_t)(ms) * 1000000u;         \
		bool stb_ok_ = false;                                                      \
		for (;;) {                                                                 \
			if (cond) {                                                        \
				stb_ok_ = true;                                            \
				break;                                                     \
			}                                                                  \
			if (stb_now_ns() > stb_end_)                                  \
				break;                                                     \
			struct timespec stb_ts_ = {0, 200000};                             \
			nanosleep(&stb_ts_, NULL);                                         \
		}                                                                          \
		stb_ok_;                                                                   \
	})

#endif /* STB_TESTS_TEST_UTIL_H */
