#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cpack -G DEB of a build: the .deb is produced, dpkg-deb reads it, and it
# holds the library, the loader, the headers, pkg-config and CMake files.
#   tests/test_package.sh BUILD_DIR
set -euo pipefail
build=$1
command -v dpkg-deb >/dev/null || { echo "SKIP: dpkg-deb not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$build" && cpack -G DEB --config CPackConfig.cmake -B "$tmp") >"$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log"; echo "FAIL: cpack -G DEB failed"; exit 1; }
deb=$(find "$tmp" -maxdepth 1 -name 'stb_*.deb' | head -n 1)
[ -n "$deb" ] || { cat "$tmp/cpack.log"; echo "FAIL: no .deb produced"; exit 1; }
dpkg-deb -I "$deb" >"$tmp/info" || { echo "FAIL: dpkg-deb -I cannot read $deb"; exit 1; }
dpkg-deb -c "$deb" >"$tmp/contents" || { echo "FAIL: dpkg-deb -c cannot read $deb"; exit 1; }
want=(
  '/usr/lib/.*libbthread\.so\.0'
  '/usr/lib/.*libbthread\.a$'
  '/usr/include/bthread/bthread\.h$'
  '/usr/include/stb/stb\.h$'
  '/usr/include/stb/abi\.h$'
  '/usr/lib/.*pkgconfig/bthread\.pc$'
  '/usr/lib/.*cmake/bthread/bthreadConfig\.cmake$'
  '/usr/share/man/man3/stb\.3'
)
if grep -q '^STB_BPF:BOOL=ON' "$build/CMakeCache.txt"; then
  want+=('/usr/sbin/stb-bpf-loader$' '/usr/share/man/man8/stb-bpf-loader\.8'
         '/usr/share/bash-completion/completions/stb-bpf-loader$'
         '/usr/share/doc/stb/examples/stb-snapshots@\.service$')
fi
for w in "${want[@]}"; do
  grep -Eq "$w" "$tmp/contents" || { cat "$tmp/contents"; echo "FAIL: $w missing from the .deb"; exit 1; }
done
grep -q '^ Package: stb$' "$tmp/info" || { cat "$tmp/info"; echo "FAIL: package name"; exit 1; }
grep -q '^ Depends:.*libdw1' "$tmp/info" || { cat "$tmp/info"; echo "FAIL: Depends lacks libdw1"; exit 1; }
echo "package: $(basename "$deb") with $(wc -l <"$tmp/contents") entries"
