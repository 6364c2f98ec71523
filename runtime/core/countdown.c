/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The blocking part of bthread::CountdownEvent (bthread/countdown_event.h):
 * a wait on its counter butex published as a COUNTDOWN wait.
 */
#include "bthread/countdown_event.h"
#include "sync.h"

int stb_countdown_wait(int *counter, const struct timespec *abstime, const void *event)
{
	if (!counter)
		return EINVAL;
	const uint64_t deadline = stb_abstime_to_mono(abstime);
	const struct stb_wait why = stb_wait_make(STB_WAIT_COUNTDOWN, event, NULL);
	struct stb_butex *b = stb_butex_of_value(counter);
	for (;;) {
		const int seen = __atomic_load_n(counter, __ATOMIC_ACQUIRE);
		if (seen <= 0)
			return 0;
		const int rc = stb_butex_wait_mono(b, seen, deadline, &why);
		if (rc == ETIMEDOUT || rc == ENOMEM)
			return rc;
	}
}
