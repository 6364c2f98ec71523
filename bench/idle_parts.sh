#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What each part of the tracer support costs a bthread_yield: builds the
# runtime in a scratch worktree with bench/idle_parts.patch applied, once per
# part compiled out (STB_EXP_DROP bits: 1 the two lease loads and their test,
# 2 the leaving task's two word stores and the seq bump, 4 the worker's two
# current stores, 8 the published-YIELD bookkeeping; 15 all of them),
# and prints instructions per yield (callgrind, deterministic) beside the
# built-out runtime, optionally with the wall-clock ratios of
# `bench_trace --only idle`. An experiment: the patch is never merged.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: bench/idle_parts.sh [--scratch DIR] [--wall ROUNDS] [BITS...]
  --scratch DIR   where the worktree and the builds go (default /tmp/stb-idle-parts)
  --wall ROUNDS   also run bench_trace --only idle --rounds ROUNDS per variant
  BITS            STB_EXP_DROP values to build (default: 0 1 2 4 8 15)
Examples:
  bench/idle_parts.sh
  bench/idle_parts.sh --wall 15 0 2 15
The worktree and builds stay for the next run (remove them with
`git worktree remove --force DIR/tree && rm -rf DIR`).
Needs git, cmake and valgrind. Exit status: 0 done, 1 a step failed, 64 usage.
EOF
}

scratch=/tmp/stb-idle-parts wall=0 bits=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --scratch) [ $# -ge 2 ] || { usage >&2; exit 64; }; scratch=$2; shift 2 ;;
    --wall) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || { usage >&2; exit 64; }; wall=$2; shift 2 ;;
    *) [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -le 15 ] || { echo "idle_parts: bad bits '$1'" >&2; exit 64; }
       bits+=("$1"); shift ;;
  esac
done
[ ${#bits[@]} -gt 0 ] || bits=(0 1 2 4 8 15)
command -v valgrind >/dev/null || { echo "idle_parts: needs valgrind" >&2; exit 1; }
src=$(cd "$(dirname "$0")/.." && pwd)
tree=$scratch/tree
mkdir -p "$scratch"
if [ ! -d "$tree" ]; then
  git -C "$src" worktree add -q --detach "$tree" HEAD
  git -C "$tree" apply "$src/bench/idle_parts.patch"
fi

# Instructions of the worker thread (the thread with the most) for one run.
worker_ir() {
  local d
  d=$(mktemp -d)
  (cd "$d" && valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$d/cg" \
    "$1" --child idle_count "$2" 0 >/dev/null 2>&1)
  for f in "$d"/cg*; do awk '/^summary:/ {print $2}' "$f"; done | sort -n | tail -n 1
  rm -rf "$d"
}

printf '%-22s %14s\n' "variant" "instr/yield"
for v in "${bits[@]}"; do
  b=$scratch/build-$v
  if [ ! -x "$b/bench/bench_trace" ]; then
    cmake -S "$tree" -B "$b" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="-DSTB_EXP_DROP=$v" \
      -DSTB_BPF=OFF -DSTB_BUILD_TESTS=OFF -DSTB_BUILD_EXAMPLES=OFF >/dev/null
    cmake --build "$b" -j"$(nproc)" --target bench_trace >/dev/null
  fi
  bins=(bench_trace)
  [ "$v" = 0 ] && bins+=(bench_trace_notrace)
  for bin in "${bins[@]}"; do
    lo=$(worker_ir "$b/bench/$bin" 1000)
    hi=$(worker_ir "$b/bench/$bin" 3000)
    name="drop=$v"
    [ "$bin" = bench_trace_notrace ] && name="built out"
    # 100 bthreads x 2000 more yields
    awk -v n="$name" -v a="$lo" -v c="$hi" 'BEGIN {printf "%-22s %14.1f\n", n, (c - a) / 200000}'
  done
  if [ "$wall" -gt 0 ]; then
    "$b/bench/bench_trace" --only idle --rounds "$wall" | sed -n '/Idle cost/,/^$/p' |
      grep -E '^\| (yield|create\+join)/s' | sed "s/^/  drop=$v wall: /"
  fi
done
