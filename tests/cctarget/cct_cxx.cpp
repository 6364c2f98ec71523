// SPDX-License-Identifier: Apache-2.0
// The C++ chain of the compiler-variant target: a static member function of
// a class in a namespace, into which a guard's constructor is inlined (clang
// puts such definitions inside the namespace's DIE, gcc at the unit's top).
#include "cct.h"

namespace cct {

struct Guard {
	__attribute__((always_inline)) explicit Guard(int n) : n_(n)
	{
		cct_park(); /* @cct:cxx_guard */
		CCT_NO_TAIL();
	}
	int n_;
};

class Runner {
public:
	CCT_FN static int run(int n);
};

int Runner::run(int n)
{
	Guard g(n); /* @cct:cxx_run */
	CCT_NO_TAIL();
	return g.n_ + cct_sink;
}

} // namespace cct

extern "C" CCT_FN void *cct_cxx_task(void *arg)
{
	cct_sink = cct::Runner::run(1); /* @cct:cxx_task */
	CCT_NO_TAIL();
	return arg;
}
