// SPDX-License-Identifier: Apache-2.0
// Nested inlining for test_symbolize, built with -O2 whatever the build type:
// an RAII guard whose constructor is inlined into middle(), itself inlined
// into outer(). stb_test_inl_guard_pc() returns a return address inside the
// constructor's inlined code: its logical stack is Guard::Guard, middle, outer.
#include <cstdint>

extern "C" uint64_t stb_test_inl_pc(void);
extern "C" uint64_t stb_test_inl_guard_pc(void);

extern "C" __attribute__((noinline)) uint64_t stb_test_inl_pc(void)
{
	return (uint64_t)(uintptr_t)__builtin_return_address(0);
}

namespace stbtest {
static volatile int inl_sink;
static uint64_t inl_pc;

struct Guard {
	explicit Guard(volatile int *p) : p_(p)
	{
		inl_pc = stb_test_inl_pc();
		++*p_;
	}
	~Guard() { --*p_; }
	volatile int *p_;
};

static inline void middle(int n)
{
	Guard g(&inl_sink);
	inl_sink = inl_sink + n;
}

__attribute__((noinline)) int outer(int n)
{
	middle(n + 1);
	return inl_sink;
}
} // namespace stbtest

extern "C" uint64_t stb_test_inl_guard_pc(void)
{
	stbtest::outer(3);
	return stbtest::inl_pc;
}
