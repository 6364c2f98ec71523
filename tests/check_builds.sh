#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds stb the ways users build it that the test command does not: a gcc
# Release build and a clang build, both with warnings as errors, so that a
# warning that only optimisation level or compiler brings out is caught here
# and never reaches a user (whose builds do not use -Werror). Only builds:
# the suite runs on the test command's build.
#   tests/check_builds.sh [BUILD_ROOT]   (default: build-variants)
set -euo pipefail
cd "$(dirname "$0")/.."
root=${1:-build-variants}
jobs=$(nproc)
build() {
  local name=$1; shift
  echo "=== build: $name ==="
  if ! "$@" cmake -S . -B "$root/$name" -DSTB_WERROR=ON -DSTB_BUILD_BENCH=ON \
      -DSTB_BUILD_EXAMPLES=ON "${extra[@]}" >"$root/$name.log" 2>&1 ||
     ! cmake --build "$root/$name" -j"$jobs" >>"$root/$name.log" 2>&1; then
    grep -E "error|warning" "$root/$name.log" | head -n 40 >&2 || tail -n 40 "$root/$name.log" >&2
    echo "check_builds: the $name build failed (log: $root/$name.log)" >&2
    return 1
  fi
}
mkdir -p "$root"
extra=(-DCMAKE_BUILD_TYPE=Release)
build gcc-release env CC=gcc CXX=g++
extra=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
build clang env CC=clang CXX=clang++
echo "check_builds: gcc Release and clang builds are warning-free"
