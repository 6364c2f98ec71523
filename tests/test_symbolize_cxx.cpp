// SPDX-License-Identifier: Apache-2.0
// A C++ member function for test_symbolize: its symbol is mangled
// (_ZN7stbtest6Widget4frobEi) and must come back demangled.
namespace stbtest {
struct Widget {
	int frob(int x);
};

__attribute__((noinline)) int Widget::frob(int x)
{
	return x * 3 + 1;
}
} // namespace stbtest

extern "C" void *stb_test_cxx_frob_addr(void);

extern "C" void *stb_test_cxx_frob_addr(void)
{
	int (stbtest::Widget::*pm)(int) = &stbtest::Widget::frob;
	void *p;
	static_assert(sizeof(pm) >= sizeof(p), "Itanium member pointer");
	__builtin_memcpy(&p, &pm, sizeof(p)); // non-virtual: the first word is the address
	return p;
}
