/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Linking the tracer (and libunwind) must not break C++ exceptions or forced
 * unwinding: _Unwind_* bind to libgcc_s; after traces, exceptions in bthreads
 * (while traced) work and pthread_exit/pthread_cancel run destructors. Built
 * against libbthread.so and against the static library.
 */
#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <csetjmp>
#include <stdexcept>
#include <ostream> /* before cmocka.h: its fail() macro breaks <ostream> */
#include <string>

extern "C" {
#include <cmocka.h>
}

#include <bthread/bthread.h>
#include <bthread/butex.h>
#include <stb/stb.h>

#include "util.h"

namespace {

#define STB_THROWS 200 /* per bthread */

std::atomic<int> stb_dtors{0};
std::atomic<int> stb_failures{0};

/* A destructor with a visible effect: unwinding ran the cleanup. */
struct StbGuard {
	explicit StbGuard(std::atomic<int> *c) : count(c) {}
	~StbGuard() { count->fetch_add(1); }
	StbGuard(const StbGuard &) = delete;
	StbGuard &operator=(const StbGuard &) = delete;
	std::atomic<int> *count;
};

void stb_fail(const char *what)
{
	std::fprintf(stderr, "check failed: %s\n", what);
	stb_failures.fetch_add(1);
}

#define STB_CHECK(c)                                                                       \
	do {                                                                               \
		if (!(c))                                                                  \
			stb_fail(#c);                                                      \
	} while (0)

uint64_t stb_now_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void stb_watchdog_fire(int)
{
	const char msg[] = "\nWATCHDOG: test_unwind_safety hung\n";
	ssize_t r = write(STDERR_FILENO, msg, sizeof(msg) - 1);
	(void)r;
	_exit(1);
}

void stb_watchdog(unsigned seconds)
{
	signal(SIGALRM, stb_watchdog_fire);
	alarm(seconds);
}

bool stb_is_sanitizer(const std::string &path)
{
	return path.find("libasan") != std::string::npos ||
	       path.find("libubsan") != std::string::npos ||
	       path.find("libtsan") != std::string::npos;
}

struct StbBinder {
	const char *sym;
	std::string module; /* first definer in load order, sanitizers skipped */
};

int stb_find_definer(struct dl_phdr_info *info, size_t, void *arg)
{
	StbBinder *b = static_cast<StbBinder *>(arg);
	if (!b->module.empty() || !info->dlpi_name || !info->dlpi_name[0] ||
	    stb_is_sanitizer(info->dlpi_name))
		return 0;
	void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
	if (!h)
		return 0;
	void *p = dlsym(h, b->sym);
	Dl_info di;
	/* dlsym also searches the object's dependencies: keep it only when the
	 * definition is in the object itself. */
	if (p && dladdr(p, &di) && di.dli_fname && std::strcmp(di.dli_fname, info->dlpi_name) == 0)
		b->module = info->dlpi_name;
	dlclose(h);
	return 0;
}

/*
 * The module that sym binds to: the first object in the loader's search order
 * that defines it. A sanitizer runtime intercepting it (ASan intercepts
 * _Unwind_RaiseException) forwards to that same next definition.
 */
std::string stb_module_of(const char *sym)
{
	void *p = dlsym(RTLD_DEFAULT, sym);
	Dl_info di;
	if (!p || !dladdr(p, &di) || !di.dli_fname)
		return "";
	if (!stb_is_sanitizer(di.dli_fname))
		return di.dli_fname;
	StbBinder b{sym, ""};
	dl_iterate_phdr(stb_find_definer, &b);
	return b.module;
}

void test_unwind_symbols_from_libgcc_s(void **)
{
	static const char *const syms[] = {"_Unwind_RaiseException", "_Unwind_Resume",
					   "_Unwind_ForcedUnwind", "_Unwind_Backtrace",
					   "_Unwind_GetIP"};
	for (const char *sym : syms) {
		std::string m = stb_module_of(sym);
		if (m.find("libgcc_s") == std::string::npos)
			fail_msg("%s resolves to \"%s\", not libgcc_s (libunwind took over?)", sym,
				 m.c_str());
	}
}

/* ---- exceptions in bthreads ---- */

STB_NOIPA void stb_throw3(int i)
{
	StbGuard g(&stb_dtors);
	if (i % 3 == 0)
		bthread_yield(); /* the exception path resumes on another worker, maybe */
	throw std::runtime_error("stb " + std::to_string(i));
}

STB_NOIPA void stb_throw2(int i)
{
	StbGuard g(&stb_dtors);
	try {
		stb_throw3(i);
	} catch (...) {
		throw; /* rethrow through a catch-all */
	}
}

STB_NOIPA int stb_throw1(int i)
{
	StbGuard g(&stb_dtors);
	stb_throw2(i);
	return -1;
}

std::atomic<int> stb_caught{0}, stb_thrown{0};
std::atomic<int> stb_exc_stop{0};

void *stb_exc_main(void *arg)
{
	int base = (int)(intptr_t)arg;
	for (int k = 0; k < STB_THROWS || !stb_exc_stop.load(); k++) {
		int i = base * 100000 + k % 100000;
		stb_thrown.fetch_add(1);
		try {
			stb_throw1(i);
			stb_fail("no exception");
		} catch (const std::runtime_error &e) {
			STB_CHECK(std::string(e.what()) == "stb " + std::to_string(i));
			stb_caught.fetch_add(1);
		}
		/* Stay alive a little so the tracer catches some of us running. */
		uint64_t end = stb_now_ns() + 50000;
		while (stb_now_ns() < end)
			__asm__ volatile("pause");
	}
	return nullptr;
}

/* Traces tasks while they throw. */
struct StbTracer {
	bthread_t *ids;
	int n;
	std::atomic<int> *stop;
	std::atomic<int> ok{0};
};

void *stb_tracer_main(void *arg)
{
	StbTracer *tr = static_cast<StbTracer *>(arg);
	struct stb_frame fr[64];
	for (unsigned i = 0; !tr->stop->load(); i++) {
		int rc = stb_trace(tr->ids[i % (unsigned)tr->n], nullptr, fr, 64, nullptr);
		STB_CHECK(rc >= 0 || rc == -ESRCH);
		if (rc > 0)
			tr->ok.fetch_add(1);
	}
	return nullptr;
}

void *stb_blocked_main(void *arg)
{
	void *b = arg;
	while (__atomic_load_n(static_cast<int *>(b), __ATOMIC_ACQUIRE) == 0)
		butex_wait(b, 0, nullptr);
	return nullptr;
}

/* Makes sure the tracer (libunwind, the symbolizer, the signal handler) ran. */
void stb_warm_tracer()
{
	void *b = butex_create();
	assert_non_null(b);
	bthread_t t;
	assert_int_equal(bthread_start_background(&t, nullptr, stb_blocked_main, b), 0);
	char text[8192];
	for (int i = 0; i < 200; i++) {
		int rc = bthread_stack_trace(t, text, sizeof(text));
		assert_true(rc > 0);
		if (std::strstr(text, "butex_wait+0x"))
			break;
		usleep(1000);
	}
	assert_non_null(std::strstr(text, "butex_wait+0x"));
	__atomic_store_n(static_cast<int *>(b), 1, __ATOMIC_RELEASE);
	butex_wake_all(b);
	assert_int_equal(bthread_join(t, nullptr), 0);
	butex_destroy(b);
}

void test_exceptions_in_bthreads(void **)
{
	stb_watchdog(120);
	stb_warm_tracer();
	const int n = 8;
	bthread_t ids[n];
	stb_dtors = 0;
	stb_caught = 0;
	stb_thrown = 0;
	stb_exc_stop = 0;
	stb_failures = 0;
	std::atomic<int> stop{0};
	for (int i = 0; i < n; i++)
		assert_int_equal(bthread_start_background(&ids[i], nullptr, stb_exc_main,
							  (void *)(intptr_t)i),
				 0);
	StbTracer tr{ids, n, &stop};
	pthread_t th;
	assert_int_equal(pthread_create(&th, nullptr, stb_tracer_main, &tr), 0);
	/* Throwing goes on until the tracer has caught some of them at it. */
	uint64_t end = stb_now_ns() + 60ull * 1000000000ull;
	while (tr.ok.load() < 50 && stb_now_ns() < end)
		usleep(1000);
	stb_exc_stop = 1;
	for (int i = 0; i < n; i++)
		assert_int_equal(bthread_join(ids[i], nullptr), 0);
	stop = 1;
	assert_int_equal(pthread_join(th, nullptr), 0);
	assert_int_equal(stb_failures.load(), 0);
	assert_true(stb_thrown.load() >= n * STB_THROWS);
	assert_int_equal(stb_caught.load(), stb_thrown.load());
	/* Three guards per throw, each destroyed exactly once. */
	assert_int_equal(stb_dtors.load(), 3 * stb_thrown.load());
	std::printf("%d exceptions, traced %d times while throwing\n", stb_thrown.load(),
		    tr.ok.load());
	assert_true(tr.ok.load() >= 50);
	alarm(0);
}

/* ---- pthread_exit and pthread_cancel: forced unwinding ---- */

std::atomic<int> stb_forced_seen{0};

/* UBSan: the forced-unwind "exception" has no object, and binding the
 * reference of this documented glibc idiom counts as a null reference. */
__attribute__((no_sanitize("null"))) STB_NOIPA void stb_exit3()
{
	StbGuard g(&stb_dtors);
	try {
		pthread_exit((void *)(intptr_t)42);
	} catch (abi::__forced_unwind &) {
		stb_forced_seen.fetch_add(1); /* the unwinder is libgcc_s's */
		throw;
	}
}

STB_NOIPA void stb_exit2()
{
	StbGuard g(&stb_dtors);
	stb_exit3();
}

void *stb_exit_main(void *)
{
	/* Registered and traced before it exits: the tracer's state is live. */
	bthread_t id = bthread_init_for_pthread_stack_trace();
	STB_CHECK(id != 0);
	char text[4096];
	STB_CHECK(bthread_stack_trace(id, text, sizeof(text)) > 0);
	StbGuard g(&stb_dtors);
	stb_exit2();
	stb_fail("pthread_exit returned");
	return nullptr;
}

int stb_cancel_fds[2] = {-1, -1};
std::atomic<int> stb_cancel_ready{0};
std::atomic<bthread_t> stb_cancel_id{0};

STB_NOIPA void stb_cancel2()
{
	StbGuard g(&stb_dtors);
	stb_cancel_ready = 1;
	char c;
	for (;;) {
		ssize_t r = read(stb_cancel_fds[0], &c, 1); /* a cancellation point */
		(void)r;
	}
}

void *stb_cancel_main(void *)
{
	stb_cancel_id = bthread_init_for_pthread_stack_trace();
	StbGuard g(&stb_dtors);
	stb_cancel2();
	return nullptr;
}

void test_pthread_exit_forced_unwind(void **)
{
	stb_watchdog(60);
	stb_warm_tracer();
	stb_dtors = 0;
	stb_failures = 0;
	stb_forced_seen = 0;
	for (int i = 0; i < 20; i++) {
		pthread_t th;
		assert_int_equal(pthread_create(&th, nullptr, stb_exit_main, nullptr), 0);
		void *ret = nullptr;
		assert_int_equal(pthread_join(th, &ret), 0);
		assert_ptr_equal(ret, (void *)(intptr_t)42);
	}
	assert_int_equal(stb_failures.load(), 0);
	assert_int_equal(stb_dtors.load(), 3 * 20);
	assert_int_equal(stb_forced_seen.load(), 20);
	alarm(0);
}

void test_pthread_cancel_forced_unwind(void **)
{
	stb_watchdog(60);
	stb_dtors = 0;
	assert_int_equal(pipe2(stb_cancel_fds, O_CLOEXEC), 0);
	for (int i = 0; i < 10; i++) {
		stb_cancel_ready = 0;
		stb_cancel_id = 0;
		pthread_t th;
		assert_int_equal(pthread_create(&th, nullptr, stb_cancel_main, nullptr), 0);
		while (!stb_cancel_ready.load())
			usleep(100);
		/* Traced (signal mode, it is blocked in read) right before the cancel. */
		struct stb_frame fr[64];
		int rc = 0;
		for (int k = 0; k < 100 && rc <= 0; k++)
			rc = stb_trace(stb_cancel_id.load(), nullptr, fr, 64, nullptr);
		assert_true(rc > 0);
		assert_int_equal(pthread_cancel(th), 0);
		void *ret = nullptr;
		assert_int_equal(pthread_join(th, &ret), 0);
		assert_ptr_equal(ret, PTHREAD_CANCELED);
	}
	assert_int_equal(stb_dtors.load(), 2 * 10);
	close(stb_cancel_fds[0]);
	close(stb_cancel_fds[1]);
	alarm(0);
}

} // namespace

int main()
{
	/* Traces of running tasks may be slow on a loaded 2-CPU machine. */
	if (stb_set_signal_trace_timeout_ms(5000) != 0)
		return 1;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unwind_symbols_from_libgcc_s),
		cmocka_unit_test(test_exceptions_in_bthreads),
		cmocka_unit_test(test_pthread_exit_forced_unwind),
		cmocka_unit_test(test_pthread_cancel_forced_unwind),
	};
	return cmocka_run_group_tests(tests, nullptr, nullptr);
}
