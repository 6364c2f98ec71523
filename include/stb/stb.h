/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The stb tracer API: configuration of the shared task table that tracers
 * read (include/stb/abi.h).
 */
#ifndef STB_STB_STB_H
#define STB_STB_STB_H

#include <stdint.h>

#include <bthread/bthread.h>
#include <stb/export.h>

STB_BEGIN_DECLS

/*
 * Sets how many task slots the shared table publishes (default 65536, or
 * $STB_TABLE_CAPACITY). Bthreads beyond it still run but cannot be traced
 * from outside the process. Call before the first bthread call.
 * Returns 0, -EINVAL (0 or above 4194304) or -EBUSY (runtime already started).
 */
STB_EXPORT int stb_table_set_capacity(uint32_t capacity);

STB_END_DECLS

#endif /* STB_STB_STB_H */
