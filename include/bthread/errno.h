/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Error numbers of the bthread API beyond <errno.h> (bRPC's bthread/errno.h).
 */
#ifndef STB_BTHREAD_ERRNO_H
#define STB_BTHREAD_ERRNO_H

#include <errno.h>

/*
 * Error returned through errno by bthread_usleep() when the sleeping bthread
 * was stopped with bthread_stop(). Same value as bRPC's ESTOP.
 */
#define ESTOP (-20)

#endif /* STB_BTHREAD_ERRNO_H */
