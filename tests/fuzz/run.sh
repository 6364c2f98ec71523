#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan,
# standalone: the rest of the project is not built) and runs each for a
# bounded time, starting from its checked-in seed corpus. Exit 0 when no
# target crashed, leaked or hung; else 1, with the input that did it.
#   tests/fuzz/run.sh [-t SECONDS] [NAME...]
#     -t SECONDS  per target (default 60; STB_FUZZ_SECONDS)
#     NAME        only these targets (default: all, as listed by CMake)
# Environment: STB_FUZZ_BUILD_DIR (default build-fuzz), CC/CXX (default clang).
# Found inputs go to $STB_FUZZ_BUILD_DIR/corpus/NAME (not the checked-in
# corpus), crashes to $STB_FUZZ_BUILD_DIR/artifacts/NAME/.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${STB_FUZZ_SECONDS:-60}
usage() { sed -n '3,13p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    -t) [ $# -ge 2 ] || { usage >&2; exit 64; }; secs=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; usage >&2; exit 64 ;;
    *) break ;;
  esac
done
case "$secs" in ''|*[!0-9]*) echo "run.sh: -t wants whole seconds, got '$secs'" >&2; exit 64 ;; esac
build=${STB_FUZZ_BUILD_DIR:-build-fuzz}
cmake -S tests/fuzz -B "$build" -DCMAKE_C_COMPILER="${CC:-clang}" -DCMAKE_CXX_COMPILER="${CXX:-clang++}" \
  -DSTB_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
want=("$@")
failed=0
while read -r name seeds; do
  if [ ${#want[@]} -gt 0 ] && ! printf '%s\n' "${want[@]}" | grep -qx "$name"; then
    continue
  fi
  work="$build/corpus/$name" art="$build/artifacts/$name/"
  mkdir -p "$work" "$art"
  echo "=== fuzz_$name: ${secs} s from $(ls "$seeds" | wc -l) seeds ==="
  if ! "$build/fuzz_$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$art" "$work" "$seeds" 2>"$build/fuzz_$name.log"; then
    echo "fuzz_$name FAILED; input(s): $(ls "$art" | sed "s|^|$art|" | tr '\n' ' ')" >&2
    tail -n 60 "$build/fuzz_$name.log" >&2
    failed=1
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/fuzz_$name.log" | tr '\n' ' '
    echo
  fi
done < "$build/fuzzers.txt"
exit $failed
