/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sync_util.h for C++ tests (internal.h is C only): whether a bthread is
 * parked in a kind of wait, and the object it published.
 */
#include "sync_util.h"

bool stb_test_c_parked(bthread_t tid, unsigned kind, unsigned ms);
uint64_t stb_test_c_wait_object(bthread_t tid);
uint64_t stb_test_c_now_ns(void);

bool stb_test_c_parked(bthread_t tid, unsigned kind, unsigned ms)
{
	return stb_test_parked(tid, kind, ms);
}

uint64_t stb_test_c_wait_object(bthread_t tid)
{
	return stb_test_wait_of(tid).object;
}

uint64_t stb_test_c_now_ns(void)
{
	return stb_now_ns();
}
