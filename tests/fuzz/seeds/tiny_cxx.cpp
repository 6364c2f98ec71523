// SPDX-License-Identifier: Apache-2.0
// Source of a C++ seed (exceptions: LSDA, personality, 'zPLR' CIEs).
#include <stdexcept>

static volatile int sink;

__attribute__((noinline)) int thrower(int x)
{
	if (x > 3)
		throw std::runtime_error("x");
	return x + sink;
}

int main(int argc, char **)
{
	try {
		return thrower(argc);
	} catch (const std::exception &) {
		return 1;
	}
}
