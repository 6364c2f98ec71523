#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The stb demo, one command on a fresh Debian 12 machine (sudo examples/demo.sh):
# installs what is missing, builds, runs stb-echo-server under load from
# stb-echo-client, traces it live from outside with stb-bpf-loader, shows the
# debug endpoint, then shuts everything down and checks every result.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: sudo examples/demo.sh [--build-dir DIR] [--duration SEC]
Installs the missing Debian packages (.ci/install-deps.sh), builds stb
(RelWithDebInfo) and runs an echo server on bthreads under load, then:
  - stb-bpf-loader --pid <server> --group: every bthread's stack, grouped,
    while the server keeps serving (BPF captures the running ones);
  - curl of the server's debug endpoint (/bthreads, /bthreads/<id>?st=1);
  - SIGTERM to the server: graceful shutdown, exit code 0, client result.
Options:
  --build-dir DIR   build directory (default: build)
  --duration SEC    how long the client drives load, 6..600 (default 8)
  -h, --help        this text
Examples:
  sudo examples/demo.sh
  sudo examples/demo.sh --build-dir /tmp/stb-build --duration 15
Exit status: 0 when everything worked, 1 otherwise, 64 usage error.
EOF
}

build_dir=build
duration=8
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) [ $# -ge 2 ] || { echo "demo: --build-dir needs a value" >&2; exit 64; }
                 build_dir=$2; shift 2 ;;
    --duration)  [ $# -ge 2 ] || { echo "demo: --duration needs a value" >&2; exit 64; }
                 duration=$2; shift 2 ;;
    -h|--help)   usage; exit 0 ;;
    *)           echo "demo: unknown argument '$1' (see --help)" >&2; exit 64 ;;
  esac
done
if ! [[ "$duration" =~ ^[0-9]+$ ]] || [ "$duration" -lt 6 ] || [ "$duration" -gt 600 ]; then
  echo "demo: --duration: '$duration' is not a whole number of seconds in 6..600" >&2
  exit 64
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "demo: run it as root (sudo examples/demo.sh): the loader needs root for BPF and" \
       "for reading another process's memory" >&2
  exit 1
fi

cd "$(dirname "$0")/.."
root=$PWD
out="$build_dir/demo"
server_pid='' client_pid='' loader_pid=''

cleanup() {
  local pid
  for pid in "$loader_pid" "$client_pid" "$server_pid"; do
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      sleep 0.5
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
  echo "demo: FAILED: $*" >&2
  exit 1
}

# Is there a running group (BPF capture) whose stack holds cpu_heavy_checksum?
# The loader's group: its header, "  name"/"  ids" lines, then its frames.
running_cpu_seen() {
  grep -A 12 -E '^[0-9]+ bthreads? \[running(\]|,)' "$1" | grep ' cpu_heavy_checksum+' >/dev/null
}

echo "== stb demo: an echo server on bthreads, traced live from outside =="

# ---- 1. dependencies ----
echo "[1/6] dependencies (.ci/install-deps.sh)"
.ci/install-deps.sh
echo "      ok"

# ---- 2. build ----
echo "[2/6] build: cmake RelWithDebInfo into $build_dir/ (log: $out/build.log)"
mkdir -p "$out"
t0=$SECONDS
if ! { cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
       cmake --build "$build_dir" -j"$(nproc)" --target stb_demo; } >"$out/build.log" 2>&1; then
  tail -n 30 "$out/build.log" >&2
  fail "the build failed (full log: $out/build.log)"
fi
echo "      ok ($((SECONDS - t0)) s)"
server_bin="$build_dir/examples/stb-echo-server"
client_bin="$build_dir/examples/stb-echo-client"
loader_bin="$build_dir/loader/stb-bpf-loader"

# ---- 3. server and load ----
: >"$out/server.out"  # a previous demo's ports must not be read
"$server_bin" --port 0 --debug-port 0 --workers 2 >"$out/server.out" 2>"$out/server.err" &
server_pid=$!
for _ in $(seq 100); do
  grep -q '^listening on port ' "$out/server.out" && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$out/server.err" >&2; fail "the server exited at start"; }
  sleep 0.05
done
port=$(sed -n 's/^listening on port \([0-9]*\).*/\1/p' "$out/server.out")
dport=$(sed -n 's|^debug endpoint on http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$out/server.out")
if [ -z "$port" ] || [ -z "$dport" ]; then
  fail "the server did not print its ports ($out/server.out)"
fi
echo "[3/6] server: stb-echo-server pid $server_pid, port $port, debug endpoint port $dport, 2 workers"
"$client_bin" --port "$port" --connections 16 --size 64 --duration "$duration" --mix 30 \
  >"$out/client.out" 2>"$out/client.err" &
client_pid=$!
echo "      load:   stb-echo-client, 16 connections, 64-byte requests, ${duration} s;" \
     "30 % special: db (mutex wait), retry (sleep), cpu (5 ms spin)"
sleep 1.5

# ---- 4. the loader, while the load runs ----
# One snapshot that shows all three parking places; retried, as any instant
# may happen to have no request inside one of them.
caught=''
attempt=0
while [ $attempt -lt 8 ]; do
  attempt=$((attempt + 1))
  kill -0 "$client_pid" 2>/dev/null || fail "the client finished before the loader could run"
  t0=$(date +%s%N)
  "$loader_bin" --pid "$server_pid" --group >"$out/loader.txt" 2>"$out/loader.err" &
  loader_pid=$!
  lrc=0
  wait "$loader_pid" || lrc=$?
  loader_pid=''
  ms=$((($(date +%s%N) - t0) / 1000000))
  [ "$lrc" -eq 0 ] || { cat "$out/loader.err" >&2; fail "stb-bpf-loader exited with $lrc"; }
  if grep -q 'BPF unavailable\|perf events unavailable' "$out/loader.err" "$out/loader.txt"; then
    cat "$out/loader.err" >&2
    fail "BPF capture is unavailable here, so running bthreads cannot be shown"
  fi
  caught=''
  running_cpu_seen "$out/loader.txt" && caught=1
  missing=()
  grep -q ' db_query_wait_for_lock+' "$out/loader.txt" || missing+=(db_query_wait_for_lock)
  grep -q ' retry_backoff_sleep+' "$out/loader.txt" || missing+=(retry_backoff_sleep)
  [ -n "$caught" ] || missing+=("a running cpu_heavy_checksum")
  [ ${#missing[@]} -eq 0 ] && break
  what=${missing[0]}
  for m in "${missing[@]:1}"; do what="$what, nor in $m"; done
  echo "      (attempt $attempt: at that instant no request was in $what; retrying)"
  sleep 0.3
done
ntasks=0
while read -r n _; do
  ntasks=$((ntasks + n))
done < <(grep -E '^[0-9]+ (bthreads?|pthreads?|tasks) \[' "$out/loader.txt")
echo "[4/6] sudo stb-bpf-loader --pid $server_pid --group   (attempt $attempt, ${ms} ms," \
     "$ntasks bthreads; server kept serving)"
echo "  each distinct stack once, innermost frame first, with its count, state, time and"
echo "  wait; the runtime's own frames are hidden (--runtime-frames shows them):"
sed 's/^./    &/' "$out/loader.txt"
[ ${#missing[@]} -eq 0 ] || fail "no snapshot in $attempt attempts showed ${missing[*]}"

# ---- 5. the debug endpoint ----
echo "[5/6] debug endpoint (in the server, opt-in with --debug-port):"
echo "  \$ curl -s http://127.0.0.1:$dport/bthreads | head -n 6"
curl -sS --max-time 5 "http://127.0.0.1:$dport/bthreads" >"$out/bthreads.txt" ||
  fail "curl /bthreads failed"
head -n 6 "$out/bthreads.txt" | sed 's/^/    /'
db_id=$(sed -n '/"db"/{s/^[a-z]* \([0-9]*\).*/\1/p;q}' "$out/bthreads.txt")
[ -n "$db_id" ] || fail "no \"db\" bthread in /bthreads"
echo "  \$ curl -s 'http://127.0.0.1:$dport/bthreads/$db_id?st=1'"
code=$(curl -sS --max-time 5 -o "$out/db.txt" -w '%{http_code}' \
  "http://127.0.0.1:$dport/bthreads/$db_id?st=1") || fail "curl /bthreads/$db_id failed"
[ "$code" = 200 ] || fail "/bthreads/$db_id?st=1 answered $code"
grep -q 'db_main' "$out/db.txt" || fail "the db bthread's stack lacks db_main"
sed -e '/^$/d' -e 's/^/    /' "$out/db.txt"

# ---- 6. results and shutdown ----
crc=0
wait "$client_pid" || crc=$?
client_pid=''
echo "[6/6] client finished (exit $crc):"
sed 's/^/    /' "$out/client.out"
[ "$crc" -eq 0 ] || { cat "$out/client.err" >&2; fail "the client reported wrong, lost or dropped replies"; }
kill -TERM "$server_pid"
src=0
wait "$server_pid" || src=$?
server_pid=''
echo "  server after SIGTERM (exit $src):"
grep -v '^listening on port \|^debug endpoint on ' "$out/server.out" | sed 's/^/    /'
[ "$src" -eq 0 ] || { cat "$out/server.err" >&2; fail "the server exited with $src"; }
grep -q ' 0 dropped;' "$out/server.out" || fail "the server dropped connections"
echo "== demo OK: logs in $root/$out =="
