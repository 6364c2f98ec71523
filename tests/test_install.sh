#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the build into a temporary prefix and builds a program against it
# as a user of the install would: with pkg-config (shared and static),
#   cc app.c $(pkg-config --cflags --libs bthread)
# and with CMake, find_package(bthread CONFIG) and bthread::bthread (shared)
# or bthread::bthread_static. Each program starts bthreads, traces one and
# joins them.
#   tests/test_install.sh BUILD_DIR [SANITIZERS]
# SANITIZERS: the build's STB_SANITIZE (the app must then be built with them).
set -euo pipefail
build=$1
san=${2:-}
extra=()
[ -n "$san" ] && extra=(-fsanitize="$san")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name bthread.pc)
[ -n "$pc" ] || { echo "FAIL: bthread.pc not installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
for h in bthread/bthread.h bthread/butex.h stb/stb.h stb/abi.h stb/export.h; do
  [ -f "$tmp/prefix/include/$h" ] || { echo "FAIL: $h not installed"; exit 1; }
done
cat > "$tmp/app.c" <<'C'
#include <bthread/bthread.h>
#include <stb/stb.h>
#include <stdio.h>
#include <string.h>
static void *work(void *arg) { bthread_usleep(20000); return arg; }
int main(void)
{
	bthread_t t[4];
	for (long i = 0; i < 4; i++)
		if (bthread_start_background(&t[i], NULL, work, (void *)i) != 0)
			return 1;
	bthread_usleep(5000);
	char buf[4096];
	int n = bthread_stack_trace(t[0], buf, sizeof buf);
	if (n <= 0 || !strstr(buf, "bthread_usleep"))
		return 2;
	for (long i = 0; i < 4; i++) {
		void *r;
		if (bthread_join(t[i], &r) != 0 || r != (void *)i)
			return 3;
	}
	puts("ok");
	return 0;
}
C
libdir=$(pkg-config --variable=libdir bthread)
# shellcheck disable=SC2046
cc -std=c11 -O2 "${extra[@]}" -o "$tmp/app" "$tmp/app.c" $(pkg-config --cflags --libs bthread) \
  -Wl,-rpath,"$libdir"
[ "$("$tmp/app")" = ok ] || { echo "FAIL: shared build did not run"; exit 1; }
# Only the install's libbthread, never the build tree's.
ldd "$tmp/app" | grep "$libdir/libbthread.so" >/dev/null || { echo "FAIL: not linked to the install"; exit 1; }
# shellcheck disable=SC2046
cc -std=c11 -O2 "${extra[@]}" -o "$tmp/app_static" "$tmp/app.c" -Wl,-Bstatic -L"$libdir" -lbthread -Wl,-Bdynamic \
  $(pkg-config --cflags --libs --static bthread | sed 's/-lbthread//')
[ "$("$tmp/app_static")" = ok ] || { echo "FAIL: static build did not run"; exit 1; }

# CMake package.
mkdir -p "$tmp/cmakeapp"
cp "$tmp/app.c" "$tmp/cmakeapp/app.c"
cat > "$tmp/cmakeapp/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.16)
project(app C)
find_package(bthread CONFIG REQUIRED)
add_executable(app app.c)
target_link_libraries(app PRIVATE bthread::bthread)
add_executable(app_static app.c)
target_link_libraries(app_static PRIVATE bthread::bthread_static)
if(SAN)
  target_compile_options(app PRIVATE -fsanitize=\${SAN})
  target_link_options(app PRIVATE -fsanitize=\${SAN})
  target_compile_options(app_static PRIVATE -fsanitize=\${SAN})
  target_link_options(app_static PRIVATE -fsanitize=\${SAN})
endif()
CM
cmake -S "$tmp/cmakeapp" -B "$tmp/cmakeapp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_RPATH="$libdir" -DSAN="$san" >"$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log"; echo "FAIL: find_package(bthread CONFIG) failed"; exit 1; }
cmake --build "$tmp/cmakeapp/build" >"$tmp/cmake-build.log" 2>&1 ||
  { cat "$tmp/cmake-build.log"; echo "FAIL: building against bthread::bthread failed"; exit 1; }
[ "$("$tmp/cmakeapp/build/app")" = ok ] || { echo "FAIL: CMake shared build did not run"; exit 1; }
ldd "$tmp/cmakeapp/build/app" | grep "$libdir/libbthread.so" >/dev/null ||
  { echo "FAIL: CMake app not linked to the install"; exit 1; }
[ "$("$tmp/cmakeapp/build/app_static")" = ok ] || { echo "FAIL: CMake static build did not run"; exit 1; }
if ldd "$tmp/cmakeapp/build/app_static" | grep libbthread >/dev/null; then
  echo "FAIL: bthread::bthread_static linked libbthread.so"; exit 1
fi
echo "install: pkg-config and find_package(bthread CONFIG), shared and static builds run"
