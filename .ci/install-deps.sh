#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages stb needs to build, test and run its demo,
# skipping those already present. Needs root (or sudo) only when something
# is missing.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config g++
  clang llvm bpftool libbpf-dev libclang-rt-14-dev
  libunwind-dev libelf-dev libdw-dev zlib1g-dev liblzma-dev libbz2-dev
  libcmocka-dev
  golang-go python3
  gdb procps iproute2 curl dpkg-dev man-db groff-base
  chromium
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

as_root=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1; }
  as_root=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
