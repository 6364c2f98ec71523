/* SPDX-License-Identifier: Apache-2.0 */
/* The entry point every fuzz target defines (libFuzzer's, or replay.c's caller). */
#ifndef STB_TESTS_FUZZ_FUZZ_H
#define STB_TESTS_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* STB_TESTS_FUZZ_FUZZ_H */
