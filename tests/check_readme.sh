#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The C example of README.md ("## Using the runtime") builds as C11 and as
# C++17 against the source tree's headers and the built libbthread, and runs.
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
echo "README example: builds and runs as C11 and C++17"
