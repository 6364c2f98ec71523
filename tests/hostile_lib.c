/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The module hostile_target dlopens from a memfd and then truncates under
 * its mapping: code, unwind tables and symbols spread over several pages.
 */
#include <stdint.h>

#define HL_REPEAT(x) x x x x x x x x x x x x x x x x

volatile uint64_t hostile_lib_sink;

__attribute__((visibility("default"))) uint64_t hostile_lib_fn(uint64_t v);
__attribute__((noinline)) uint64_t hostile_lib_fn(uint64_t v)
{
	/* Enough code that the tables after it lie on later pages. */
	HL_REPEAT(HL_REPEAT(v = v * 6364136223846793005ull + 1442695040888963407ull;
			    hostile_lib_sink += v;))
	return v;
}

/* Padding of the data segment: the file spans many pages. */
const char hostile_lib_pad[64 << 10] = {1};
