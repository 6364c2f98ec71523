/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wire format shared by stb-echo-server and stb-echo-client, and their
 * small common helpers (strict number parsing, deadlines). A request is one
 * frame; the reply is the same frame, byte for byte.
 */
#ifndef STB_EXAMPLES_ECHO_PROTO_H
#define STB_EXAMPLES_ECHO_PROTO_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "util.h" /* stb_parse_u64, stb_now_ns, stb_realtime_after_ms (runtime/common/) */

/*
 * Frame: a 4-byte big-endian length of the whole frame (header included),
 * then the kind byte, then payload. The kind selects the server's code path;
 * the reply is always the exact frame.
 *   'E' echo        plain echo
 *   'D' db          waits for the database lock (db_query_wait_for_lock)
 *                   held by the slow "db" bthread (db_slow_transaction)
 *   'R' retry       the backend "fails" ECHO_RETRY_FAILURES times; each
 *                   failure sleeps in retry_backoff_sleep before retrying
 *   'C' cpu         spins ECHO_CPU_SPIN_US in cpu_heavy_checksum
 */
#define ECHO_HDR 4u
#define ECHO_MIN_FRAME (ECHO_HDR + 1u)
#define ECHO_MAX_FRAME (1u << 20)
#define ECHO_KIND_ECHO 'E'
#define ECHO_KIND_DB 'D'
#define ECHO_KIND_RETRY 'R'
#define ECHO_KIND_CPU 'C'

#define ECHO_RETRY_FAILURES 2u      /* failures before a retry request succeeds */
#define ECHO_RETRY_BACKOFF_US 10000u /* first backoff; doubles per attempt */
#define ECHO_CPU_SPIN_US 5000u       /* time a cpu request computes */
#define ECHO_DB_HOLD_US 40000u       /* the db bthread holds the lock this long */
#define ECHO_DB_GAP_US 2000u         /* ... then leaves it free this long */

static inline uint32_t echo_get_be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void echo_put_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

/*
 * errno of the calling thread, read afresh. A bthread may resume on another
 * worker after a call that suspends it, and glibc declares __errno_location()
 * const, so a plain errno read may reuse the address computed before the call
 * (another thread's errno). Bthread code reads errno only through this.
 */
static STB_NOIPA __attribute__((unused)) int echo_errno(void)
{
	return errno;
}


#endif /* STB_EXAMPLES_ECHO_PROTO_H */
