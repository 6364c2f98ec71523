/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The compiler-variant target (test_cc_targets): what its C, C++ and shared
 * library parts share. Each position a trace must show is marked in the
 * source by a comment "@cct:NAME" on its line; the test reads the markers.
 */
#ifndef STB_TESTS_CCTARGET_CCT_H
#define STB_TESTS_CCTARGET_CCT_H

#ifdef __cplusplus
extern "C" {
#endif

/* Every chain function keeps its own frame and symbol; the empty asm after a
 * call keeps it from being a tail call. */
#define CCT_FN __attribute__((noinline, used))
#define CCT_INLINE static inline __attribute__((always_inline))
#define CCT_NO_TAIL() __asm__ volatile("" ::: "memory")

/* Parks the calling bthread until the target quits (main). */
void cct_park(void);
/* Bumped by every chain, read by main (main). */
extern volatile int cct_sink;

/* The C++ chain (cct_cxx.cpp): a bthread function. */
void *cct_cxx_task(void *arg);

/* The shared library's chain (cct_lib.c): calls park through an inlined
 * function. */
void cct_lib_entry(void (*park)(void));

#ifdef __cplusplus
}
#endif

#endif /* STB_TESTS_CCTARGET_CCT_H */
