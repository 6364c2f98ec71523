/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The public bthread headers from C++17: bRPC's C++ butex API (namespace
 * bthread, butex_create_checked<T>, default arguments), bthread_attr_t's
 * operator= and operator|, the bthread_interrupt overload with a tag, errno
 * through bthread_errno_location, bthread::ExecutionQueue through the shared
 * library. (tests/CMakeLists.txt also compiles every public header alone as
 * C11 and as C++17.)
 */
#include <atomic>
#include <cstdio>
#include <cstring>

#include <bthread/bthread.h>
#include <bthread/butex.h>
#include <bthread/execution_queue.h>
#include <string>

static int failures;
#define CHECK(c)                                                                            \
	do {                                                                                \
		if (!(c)) {                                                                 \
			std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
			failures++;                                                         \
		}                                                                           \
	} while (0)

static void *waiter(void *arg)
{
	auto *b = static_cast<std::atomic<int> *>(arg);
	while (b->load() == 0)
		bthread::butex_wait(b, 0, nullptr);
	return nullptr;
}

static int concat(void *meta, bthread::TaskIterator<std::string> &it)
{
	for (; it; ++it)
		*static_cast<std::string *>(meta) += *it;
	return 0;
}

static void *sleeper(void *)
{
	return reinterpret_cast<void *>(static_cast<intptr_t>(bthread_usleep(10000000) == -1 ? errno : 0));
}

int main()
{
	/* Attributes. */
	bthread_attr_t a = BTHREAD_ATTR_NORMAL | BTHREAD_NOSIGNAL;
	CHECK(a.stack_type == BTHREAD_STACKTYPE_NORMAL);
	CHECK(a.flags == BTHREAD_NOSIGNAL);
	a = BTHREAD_STACKTYPE_SMALL | BTHREAD_LOG_START_AND_FINISH;
	CHECK(a.stack_type == BTHREAD_STACKTYPE_SMALL);
	CHECK(a.flags == BTHREAD_LOG_START_AND_FINISH);
	CHECK(a.tag == BTHREAD_TAG_INVALID);
	bthread_attr_set_name(&a, "cxx");
	CHECK(std::strcmp(a.name, "cxx") == 0);
	static_assert(BTHREAD_MIN_CONCURRENCY == 4, "limits");
	static_assert(sizeof(bthread_t) == 8, "ids");

	/* The C++ butex API. */
	std::atomic<int> *b = bthread::butex_create_checked<std::atomic<int>>();
	CHECK(b != nullptr);
	b->store(0);
	bthread_t t[3];
	for (auto &id : t)
		CHECK(bthread_start_background(&id, nullptr, waiter, b) == 0);
	bthread_usleep(20000);
	b->store(1);
	int woken = bthread::butex_wake_n(b, 2) + bthread::butex_wake(b, true) +
		    bthread::butex_wake_all(b);
	CHECK(woken == 3);
	for (auto id : t)
		CHECK(bthread_join(id, nullptr) == 0);
	CHECK(bthread::butex_wake_except(b, 0) == 0);
	CHECK(bthread::butex_requeue(b, b) == 0);
	timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	CHECK(bthread::butex_wait(b, 1, &now, false) == -1 && errno == ETIMEDOUT);
	CHECK(bthread::MIN_SLEEP_US == 2);
	bthread::butex_destroy(b);

	/* bthread_interrupt(tid, tag) as bRPC's default argument. */
	bthread_t s;
	CHECK(bthread_start_background(&s, nullptr, sleeper, nullptr) == 0);
	bthread_usleep(20000);
	CHECK(bthread_interrupt(s, BTHREAD_TAG_DEFAULT) == 0);
	void *r = nullptr;
	CHECK(bthread_join(s, &r) == 0);
	CHECK(reinterpret_cast<intptr_t>(r) == EINTR);
	CHECK(bthread_interrupt(s) == EINVAL);
	CHECK(bthread_errno_location() == &errno);

	/* An execution queue of strings (copied and moved in), in order. */
	std::string out;
	bthread::ExecutionQueueId<std::string> q;
	CHECK(bthread::execution_queue_start(&q, nullptr, concat, &out) == 0);
	const std::string ab = "ab";
	CHECK(bthread::execution_queue_execute(q, ab) == 0);
	CHECK(bthread::execution_queue_execute(q, std::string("cd"), &bthread::TASK_OPTIONS_NORMAL) == 0);
	CHECK(bthread::execution_queue_execute(q, "ef") == 0);
	CHECK(bthread::execution_queue_stop(q) == 0);
	CHECK(bthread::execution_queue_join(q) == 0);
	CHECK(out == "abcdef");
	CHECK(sizeof(bthread::TaskNode) == 128);
	if (failures == 0)
		std::printf("all C++ checks passed\n");
	return failures ? 1 : 0;
}
