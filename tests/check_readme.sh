#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The C example of README.md ("## Using the runtime") builds as C11 and as
# C++17 against the source tree's headers and the built libbthread, and runs;
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
for app in app_c app_cxx; do
  "$tmp/$app" 2>"$tmp/$app.err" || { cat "$tmp/$app.err"; echo "FAIL: $app exited $?"; exit 1; }
  grep -q 'bthread' "$tmp/$app.err" || { cat "$tmp/$app.err"; echo "FAIL: $app dumped nothing"; exit 1; }
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
