#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The C example of README.md ("## Using the runtime") builds as C11 and as
# C++17 against the source tree's headers and the built libbthread, runs and
# prints the stack the README shows;
# the one of stb(3) (docs/man/stb.3, EXAMPLES) compiles as C11 and C++17.
# Usage: check_readme.sh SOURCE_DIR LIBDIR [SANITIZERS]
set -eu
# shellcheck disable=SC2086 # $flags: zero or one word
src=$1 libdir=$2 san=${3:-}
flags=''
[ -z "$san" ] || flags="-fsanitize=$san"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -n '/^## Using the runtime/,/^## /p' "$src/README.md" |
  sed -n '/^```c$/,/^```$/p' | sed '1d;$d' >"$tmp/app.c"
grep -q 'int main' "$tmp/app.c" || { echo "FAIL: no C example with main() in README.md"; exit 1; }
cp "$tmp/app.c" "$tmp/app.cpp"
cc $flags -std=c11 -Wall -Wextra -Werror -I"$src/include" -o "$tmp/app_c" "$tmp/app.c" \
  -L"$libdir" -lbthread -Wl,-rpath,"$libdir" ||
  { echo "FAIL: the README example does not build as C11"; exit 1; }
c++ $flags -std=c++17 -Wall -Wextra -Werror -I"$src/include" -o "$tmp/app_cxx" "$tmp/app.cpp" \
  -L"$libdir" -lbthread -Wl,-rpath,"$libdir" ||
  { echo "FAIL: the README example does not build as C++17"; exit 1; }
# The stack it prints is the README's (the block after the program): the
# same functions, frame by frame; with STB_TRACE_RUNTIME_FRAMES=1 the
# runtime's frames too.
# (C++ names come with their parameters: handler(void*).)
names() { sed -n 's/^#[0-9][0-9]* 0x[0-9a-f]\{16\} \(.*\)+0x[0-9a-f]*$/\1/p' | sed 's/(.*//'; }
sed -n '/^## Using the runtime/,/^## /p' "$src/README.md" |
  awk '/^It prints/ { on = 1; next } on && /^```$/ { if (in_block) exit; in_block = 1; next }
       in_block' | names >"$tmp/want"
[ -s "$tmp/want" ] || { echo "FAIL: no output of the example in README.md"; exit 1; }
for app in app_c app_cxx; do
  "$tmp/$app" >"$tmp/$app.out" 2>"$tmp/$app.err" ||
    { cat "$tmp/$app.err"; echo "FAIL: $app exited $?"; exit 1; }
  grep -q 'bthread' "$tmp/$app.err" || { cat "$tmp/$app.err"; echo "FAIL: $app dumped nothing"; exit 1; }
  names <"$tmp/$app.out" | diff -u "$tmp/want" - >"$tmp/diff" ||
    { cat "$tmp/diff"; echo "FAIL: $app does not print the README's stack"; exit 1; }
  STB_TRACE_RUNTIME_FRAMES=1 "$tmp/$app" 2>/dev/null | grep -q ' stb_ctx_trampoline+0x' ||
    { echo "FAIL: $app with STB_TRACE_RUNTIME_FRAMES=1 does not show the runtime's frames"; exit 1; }
done
# stb(3)'s example: the text between .EX and .EE after ".SH EXAMPLES", roff
# escapes undone ("\-" is "-", "\e" and "\\" a backslash).
sed -n '/^\.SH EXAMPLES/,/^\.SH /p' "$src/docs/man/stb.3" | sed -n '/^\.EX$/,/^\.EE$/p' |
  sed '1d;$d' | sed 's/\\-/-/g; s/\\e/\\/g; s/\\\\/\\/g' >"$tmp/man.c"
grep -q 'bthread_stack_trace' "$tmp/man.c" || { echo "FAIL: no C example in stb(3)"; exit 1; }
cp "$tmp/man.c" "$tmp/man.cpp"
cc $flags -std=c11 -Wall -Wextra -Werror -Wno-unused-function -I"$src/include" -c \
  -o "$tmp/man_c.o" "$tmp/man.c" || { echo "FAIL: the stb(3) example does not build as C11"; exit 1; }
c++ $flags -std=c++17 -Wall -Wextra -Werror -Wno-unused-function -I"$src/include" -c \
  -o "$tmp/man_cxx.o" "$tmp/man.cpp" ||
  { echo "FAIL: the stb(3) example does not build as C++17"; exit 1; }
echo "README example: builds and runs as C11 and C++17; stb(3)'s builds as both"
