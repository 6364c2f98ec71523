#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The project's test command: installs what is missing on a Debian 12
# machine, builds stb and runs every test with ctest. BPF tests need root.
#   tests/run-all.sh [extra cmake -D options]
# Environment: STB_BUILD_DIR (default build), STB_CTEST_ARGS (extra ctest
# arguments, e.g. "-L core"), STB_REQUIRE_BPF=1 (BPF tests fail, not skip).
set -euo pipefail
cd "$(dirname "$0")/.."
.ci/install-deps.sh
build=${STB_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$build" -j"$(nproc)"
# shellcheck disable=SC2086
ctest --test-dir "$build" --output-on-failure --timeout 900 ${STB_CTEST_ARGS:-}
