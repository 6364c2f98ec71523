/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Error numbers of the bthread API beyond <errno.h> (bRPC's bthread/errno.h),
 * and errno made safe across bthread switches.
 */
#ifndef STB_BTHREAD_ERRNO_H
#define STB_BTHREAD_ERRNO_H

#include <errno.h>

#include <stb/export.h>

STB_BEGIN_DECLS

/*
 * Address of the calling thread's errno. Unlike glibc's __errno_location()
 * it is not declared const, so a compiler never reuses an address computed
 * before a call that suspended the bthread (which may resume on another
 * worker thread). As bRPC, errno is redefined to use it below.
 */
STB_EXPORT int *bthread_errno_location(void);

/*
 * The same, in every translation unit, so that code that includes these
 * headers but does not link libbthread (tools) keeps working: not inlined,
 * and the empty asm makes it impure, so each use reads the address afresh.
 */
static __attribute__((noinline, unused)) int *bthread_errno_location_here(void)
{
	int *p = __errno_location();
	__asm__ volatile("" : "+r"(p));
	return p;
}

#ifdef errno
#undef errno
#define errno (*bthread_errno_location_here())
#endif

STB_END_DECLS

/*
 * Error returned through errno by bthread_usleep() when the sleeping bthread
 * was stopped with bthread_stop(). Same value as bRPC's ESTOP.
 */
#define ESTOP (-20)

#endif /* STB_BTHREAD_ERRNO_H */
