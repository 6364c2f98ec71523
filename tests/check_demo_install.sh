#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's install line right after the demo: configures a fresh build
# as examples/demo.sh does, builds only what the demo builds (the stb_demo
# target), then `cmake --install` into a temporary prefix must succeed and
# install the libraries and the loader.
#   tests/check_demo_install.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! { cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTB_BUILD_TESTS=OFF \
         -DSTB_BUILD_BENCH=OFF &&
       cmake --build "$tmp/build" -j"$(nproc)" --target stb_demo; } >"$tmp/build.log" 2>&1; then
  tail -n 30 "$tmp/build.log"
  echo "FAIL: the demo's build failed"
  exit 1
fi
if ! cmake --install "$tmp/build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1; then
  tail -n 20 "$tmp/install.log"
  echo "FAIL: cmake --install after the demo's build failed"
  exit 1
fi
for f in lib/libbthread.so lib/libbthread.a sbin/stb-bpf-loader include/bthread/bthread.h; do
  found=$(find "$tmp/prefix" -path "*/$f" | head -n 1)
  [ -n "$found" ] || { echo "FAIL: $f not installed after the demo's build"; exit 1; }
done
echo "ok: the demo's build installs"
