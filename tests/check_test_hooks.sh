#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Test-only knobs exist only in test builds: what `cmake --install` puts in
# place (libbthread.so, libbthread.a, stb-bpf-loader) names none of them --
# not as a symbol, not as a string (a getenv name, debug info) -- while the
# test builds given with --bad do (so that the check is seen to find them).
# Usage: check_test_hooks.sh BUILD_DIR [--bad FILE...]
set -euo pipefail

build=${1:?usage: check_test_hooks.sh BUILD_DIR [--bad FILE...]}
shift
bad=()
if [ "${1:-}" = --bad ]; then
  shift
  bad=("$@")
fi
# The driver's hold hook, the loader's fault injection, the runtime's switch hook.
hooks='on_hold|hold_fault|fault_hold|stb_driver_test_hold|STB_LOADER_FAULT_HOLD_MS|stb_test_switch_hook'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# The names of hooks in file f (symbols and strings, debug info included).
found() {
  { nm -a "$1" 2>/dev/null || true; strings -a "$1"; } | { grep -oE "$hooks" || true; } |
    sort -u | tr '\n' ' '
}

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
mapfile -t files < <(find "$tmp/prefix" -type f \( -name 'libbthread.so*' -o -name 'libbthread.a' \
                                                 -o -path '*/sbin/stb-bpf-loader' \))
[ "${#files[@]}" -ge 2 ] || fail "no libbthread installed under $tmp/prefix"
for f in "${files[@]}"; do
  got=$(found "$f")
  [ -z "$got" ] || fail "installed ${f#"$tmp/prefix/"} holds test hooks: $got"
  echo "installed ${f#"$tmp/prefix/"}: no test hook"
done
for f in "${bad[@]}"; do
  got=$(found "$f")
  [ -n "$got" ] || fail "the test build $f shows no test hook: the check would not see one"
  echo "test build $(basename "$f"): $got"
done
echo "test hooks: only in the test builds"
