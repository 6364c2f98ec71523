#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# End-to-end test of the echo server example: 1,000 checked requests from
# stb-echo-client, stb-bpf-loader run during the load (connection handler
# frames must show), the server's debug endpoint, and a graceful SIGTERM that
# finishes an in-flight request and drops no connection (exit code 0).
#   test_echo_e2e.sh SERVER CLIENT LOADER      (ctest passes the built paths)
# Exits 77 (skipped) without root, unless STB_REQUIRE_BPF=1 (then it fails);
# with STB_REQUIRE_BPF=1 the loader must also have its BPF capture.
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 SERVER CLIENT LOADER" >&2
  exit 64
fi
server_bin=$1 client_bin=$2 loader_bin=$3
require_bpf=${STB_REQUIRE_BPF:-0}

if [ "$(id -u)" -ne 0 ]; then
  if [ "$require_bpf" = 1 ]; then
    echo "FAIL: STB_REQUIRE_BPF=1 but not root: stb-bpf-loader needs root" >&2
    exit 1
  fi
  echo "SKIP: needs root (stb-bpf-loader reads another process and loads BPF)"
  exit 77
fi

tmp=$(mktemp -d)
server_pid='' client_pid=''
cleanup() {
  local pid
  for pid in "$client_pid" "$server_pid"; do
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  exec 4>&- 5>&- 6>&-
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in server.out server.err client.out client.err loader.txt loader.err; do
    if [ -s "$tmp/$f" ]; then
      echo "---- $f" >&2
      tail -n 40 "$tmp/$f" >&2
    fi
  done
  exit 1
}

# GET path from the debug endpoint over bash's /dev/tcp; prints the response.
http_get() {
  exec 5<>"/dev/tcp/127.0.0.1/$dport"
  printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n' "$1" >&5
  timeout 10 cat <&5
  exec 5>&-
}

# ---- server ----
"$server_bin" --port 0 --workers 2 --debug-port 0 >"$tmp/server.out" 2>"$tmp/server.err" &
server_pid=$!
for _ in $(seq 200); do
  grep -q '^listening on port ' "$tmp/server.out" && break
  kill -0 "$server_pid" 2>/dev/null || fail "the server exited at start"
  sleep 0.05
done
port=$(awk '/^listening on port /{print $4}' "$tmp/server.out")
dport=$(sed -n 's|^debug endpoint on http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$tmp/server.out")
if [ -z "$port" ] || [ -z "$dport" ]; then
  fail "the server did not print its ports"
fi

# ---- 1,000 requests, 40 % special kinds: about 1.5 s on 4 connections ----
"$client_bin" --port "$port" --connections 4 --requests 1000 --mix 40 --size 200 \
  >"$tmp/client.out" 2>"$tmp/client.err" &
client_pid=$!

# ---- the loader, while the client runs ----
seen_handlers=0 seen_running=0 runs=0
while kill -0 "$client_pid" 2>/dev/null; do
  runs=$((runs + 1))
  lrc=0
  # A generous --timeout: exit 0 needs every task traced, a running one too,
  # on a machine the client keeps busy.
  "$loader_bin" --pid "$server_pid" --group --timeout 3000 >"$tmp/loader.txt" 2>"$tmp/loader.err" || lrc=$?
  [ "$lrc" -eq 0 ] || fail "stb-bpf-loader exited with $lrc"
  if grep -q 'BPF unavailable\|perf events unavailable' "$tmp/loader.err"; then
    [ "$require_bpf" = 1 ] && fail "STB_REQUIRE_BPF=1 but the loader has no BPF capture"
  fi
  # Connection handler frames: the handler and one of its parking places.
  if grep -q ' echo_conn_main+0x' "$tmp/loader.txt" &&
     grep -q ' \(db_query_wait_for_lock\|retry_backoff_sleep\|echo_conn_wait_request\|echo_handle_request\)+0x' \
       "$tmp/loader.txt"; then
    seen_handlers=1
  fi
  # A running task with a stack (BPF capture); without BPF it says "not captured".
  # (a group: "N bthreads [running, ...]", its "  name"/"  ids" lines, then the frames)
  if awk '/^[0-9]+ (tasks?|bthreads?) \[running(\]|,)/ {r = 1; next} r && /^  / {next}
          r && /^#0 0x/ {found = 1} {r = 0} END {exit !found}' \
       "$tmp/loader.txt"; then
    seen_running=1
  fi
  [ "$seen_handlers" = 1 ] && [ "$seen_running" = 1 ] && break
  [ "$seen_handlers" = 1 ] && [ "$require_bpf" != 1 ] && break
done
[ "$runs" -gt 0 ] || fail "the client finished before the loader could run once"
[ "$seen_handlers" = 1 ] || fail "no loader run during the load showed the connection handler frames"
echo "loader: $runs run(s) during the load; handler frames seen; running task captured by BPF:" \
     "$([ "$seen_running" = 1 ] && echo yes || echo no)"

crc=0
wait "$client_pid" || crc=$?
client_pid=''
[ "$crc" -eq 0 ] || fail "the client reported a wrong, lost or dropped reply (exit $crc)"
grep -q '^requests: 1000 ok .* 0 failed, 0 connection errors' "$tmp/client.out" ||
  fail "the client did not finish 1000 requests cleanly"

# ---- the debug endpoint ----
http_get /bthreads >"$tmp/http.txt"
grep -q '^HTTP/1.1 200 OK' <(head -n 1 "$tmp/http.txt") || fail "/bthreads did not answer 200"
grep -q '"acceptor" \[suspended' "$tmp/http.txt" || fail "/bthreads does not list the acceptor"
# The JSON pages against docs/json.md (tests/check_json_schema.py), when python3 exists.
checker="$(dirname "$0")/check_json_schema.py"
if command -v python3 >/dev/null && [ -f "$checker" ]; then
  for page in '/bthreads?format=json' '/bthreads/all?format=json'; do
    http_get "$page" | sed '1,/^\r$/d' >"$tmp/page.json"
    grouped=()
    [[ "$page" == */all* ]] && grouped=(--grouped)
    python3 "$checker" "$tmp/page.json" "${grouped[@]}" ||
      fail "$page does not match docs/json.md"
  done
else
  echo "note: python3 or check_json_schema.py missing; JSON schema check skipped"
fi

# ---- graceful shutdown with a request in flight and an idle connection ----
exec 4<>"/dev/tcp/127.0.0.1/$port"   # sends half a frame, the rest after SIGTERM
exec 6<>"/dev/tcp/127.0.0.1/$port"   # stays idle
# Frame: length 12, kind 'E', payload "hello!!"; the first 6 bytes now.
printf '\x00\x00\x00\x0cEh' >&4
# Both accepted (conn 5 and conn 6 after the client's 4), the half frame read.
for _ in $(seq 100); do
  http_get /bthreads >"$tmp/list.txt"
  http_get /bthreads/all >"$tmp/all.txt"
  grep -q '"conn 6"' "$tmp/list.txt" && grep -q 'echo_conn_wait_rest' "$tmp/all.txt" && break
  sleep 0.05
done
grep -q '"conn 6"' "$tmp/list.txt" || fail "the server did not accept the two extra connections"
grep -q 'echo_conn_wait_rest' "$tmp/all.txt" || fail "the half frame is not in flight in the server"
kill -TERM "$server_pid"
sleep 0.3
kill -0 "$server_pid" 2>/dev/null || fail "the server exited with a request in flight"
printf 'ello!!' >&4
reply=$(timeout 10 head -c 12 <&4 | od -An -tx1 | tr -d ' \n')
[ "$reply" = "0000000c4568656c6c6f2121" ] || fail "in-flight reply '$reply' is not the echo"
src=0
for _ in $(seq 100); do
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.05
done
wait "$server_pid" || src=$?
server_pid=''
[ "$src" -eq 0 ] || fail "the server exited with $src after SIGTERM"
exec 4>&- 6>&-

# 4 client connections closed by the client; the two above closed at shutdown.
summary=$(grep '^shutdown: ' "$tmp/server.out") || fail "no shutdown summary"
echo "server: $summary"
[[ "$summary" == "shutdown: 6 connections: 4 closed by clients, 2 closed at shutdown, 0 dropped;"* ]] ||
  fail "unexpected shutdown summary (want 6 connections: 4 by clients, 2 at shutdown, 0 dropped)"
echo "PASS"
