// SPDX-License-Identifier: Apache-2.0
// Source of the DWARF seeds (corpus/dwarf, make_seeds.py): definitions in a
// namespace and a class, calls inlined two deep, a function the linker drops.
static volatile int sink;

namespace tiny {
__attribute__((noinline)) int leaf(int x)
{
	return x + sink;
}

struct Guard {
	__attribute__((always_inline)) explicit Guard(int x) : v(leaf(x)) {}
	int v;
};

static inline __attribute__((always_inline)) int middle(int x)
{
	Guard g(x + 1);
	return g.v * 2;
}

class Runner {
public:
	__attribute__((noinline)) static int run(int x)
	{
		return middle(x) + 1;
	}
};
} // namespace tiny

__attribute__((noinline)) int tiny_unused(int x)
{
	return tiny::Runner::run(x) * 3;
}

int main(int argc, char **)
{
	return tiny::Runner::run(argc);
}
