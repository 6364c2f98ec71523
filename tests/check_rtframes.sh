#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The reports keep a task's innermost public call and hide the runtime frames
# above it; for functions named stb_* that needs the list in
# runtime/stacks/report/rtframes.c. Checks it names exactly the STB_EXPORT stb_*
# functions of include/. Usage: check_rtframes.sh SOURCE_DIR
set -eu
src=${1:?usage: check_rtframes.sh SOURCE_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -rhoE 'STB_EXPORT [^;(]*\bstb_[a-z0-9_]+\(' "$src/include" |
  grep -oE 'stb_[a-z0-9_]+\($' | tr -d '(' | sort -u >"$tmp/exported"
sed -n '/^static const char \*const public_stb\[\] = {$/,/^};$/p' "$src/runtime/stacks/report/rtframes.c" |
  grep -oE '"stb_[a-z0-9_]+"' | tr -d '"' | sort -u >"$tmp/listed"
[ -s "$tmp/exported" ] || { echo "FAIL: no STB_EXPORT stb_* function found in $src/include"; exit 1; }
[ -s "$tmp/listed" ] || { echo "FAIL: no public_stb table in rtframes.c"; exit 1; }
if ! diff "$tmp/exported" "$tmp/listed" >"$tmp/diff"; then
  echo "FAIL: rtframes.c public_stb differs from the STB_EXPORT stb_* functions of include/"
  echo "(< exported, not listed; > listed, not exported)"
  grep '^[<>]' "$tmp/diff"
  exit 1
fi
echo "ok: rtframes.c lists the $(wc -l <"$tmp/exported") public stb_* functions"
