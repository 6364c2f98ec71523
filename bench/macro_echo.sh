#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Macro benchmark: stb-echo-server under closed-loop stb-echo-client load on
# loopback, in six configurations run side by side in alternating rounds:
#   1 tracer support built out (stb-echo-server-notrace)
#   2 tracer built in, nothing attached
#   3 tracer built in, stb-bpf-loader --pid <server> --all every 100 ms
#   4 tracer built in, in-process stb_dump of all bthreads every 100 ms
#     (the server's --self-dump-ms: a pthread in the server dumps to /dev/null)
#   5 control: like 2, while the same loader runs every 100 ms against another,
#     idle server with as many connections (the loader's own CPU, no tracing)
#   6 tracer built in, one resident stb-bpf-loader --pid <server> --every 100ms
#     (continuous mode: one process, a snapshot file every 100 ms, to a tmpfs)
#   7 floor for 3 and 5: like 2, while a static program that does nothing
#     (stb-bench-noop) is started every 100 ms where the loader runs: what
#     starting any process that often costs the client
# Prints requests/s, p99 latency and server CPU per request of 2-7 as ratios
# to 1 (per-round ratios, medians over rounds) and checks the goals.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: sudo bench/macro_echo.sh [options]
Options:
  --build-dir DIR     build directory (default build; configured if needed)
  --rounds N          rounds of the seven configurations, 1..100 (default 7)
  --duration SEC      client run per configuration and round, 1..600 (default 5)
  --connections N     client connections (default 16)
  --size BYTES        request size (default 64)
  --interval-ms N     period of the loader / in-process dump (default 100)
  --server-cpu N      CPU the server (all its threads) is pinned to (default 0)
  --client-cpu N      CPU the client is pinned to (default 1)
  --loader-cpu N|any  CPU the loader runs on in configurations 3, 5 and 6, and the
                      no-op program in 7 (default 1)
  --results FILE      per-run results, TSV (default <build>/macro_echo.tsv)
  -h, --help          this text
Examples:
  sudo bench/macro_echo.sh
  sudo bench/macro_echo.sh --rounds 11 --duration 10 --loader-cpu any
Server and client use one bthread worker each. Needs root (stb-bpf-loader).
Exit status: 0 the benchmark ran (goals met or not: see the verdict lines),
1 a run failed, 64 usage error.
EOF
}

build_dir=build rounds=7 duration=5 connections=16 size=64 interval=100
server_cpu=0 client_cpu=1 loader_cpu=1 results=''
num() { [[ "$2" =~ ^[0-9]+$ ]] || { echo "macro_echo: $1: '$2' is not a number" >&2; exit 64; }; }
while [ $# -gt 0 ]; do
  [ "$1" = -h ] || [ "$1" = --help ] && { usage; exit 0; }
  [ $# -ge 2 ] || { echo "macro_echo: $1 needs a value (see --help)" >&2; exit 64; }
  case "$1" in
    --build-dir) build_dir=$2 ;;
    --rounds) num "$1" "$2"; rounds=$2 ;;
    --duration) num "$1" "$2"; duration=$2 ;;
    --connections) num "$1" "$2"; connections=$2 ;;
    --size) num "$1" "$2"; size=$2 ;;
    --interval-ms) num "$1" "$2"; interval=$2 ;;
    --server-cpu) num "$1" "$2"; server_cpu=$2 ;;
    --client-cpu) num "$1" "$2"; client_cpu=$2 ;;
    --loader-cpu) [ "$2" = any ] || num "$1" "$2"; loader_cpu=$2 ;;
    --results) results=$2 ;;
    *) echo "macro_echo: unknown option '$1' (see --help)" >&2; exit 64 ;;
  esac
  shift 2
done
if [ "$rounds" -lt 1 ] || [ "$rounds" -gt 100 ] || [ "$duration" -lt 1 ] || [ "$duration" -gt 600 ]; then
  echo "macro_echo: --rounds must be in 1..100 and --duration in 1..600" >&2
  exit 64
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "macro_echo: run as root (sudo): configuration 3 runs stb-bpf-loader" >&2
  exit 1
fi
cd "$(dirname "$0")/.."
results=${results:-$build_dir/macro_echo.tsv}

if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build_dir" -j"$(nproc)" --target stb-echo-server stb-echo-server-notrace \
  stb-echo-client stb-bpf-loader stb-bench-every stb-bench-noop >/dev/null
server=$build_dir/examples/stb-echo-server
notrace=$build_dir/examples/stb-echo-server-notrace
client=$build_dir/examples/stb-echo-client
loader=$build_dir/loader/stb-bpf-loader
every=$build_dir/bench/stb-bench-every
noop=$build_dir/bench/stb-bench-noop

tmp=$(mktemp -d)
spid='' epid='' tpid='' rpid=''
twin_fds=()
cleanup() {
  local pid
  for pid in "$epid" "$rpid" "$spid" "$tpid"; do
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "macro_echo: FAILED: $*" >&2; for f in "$tmp"/*.err; do [ -s "$f" ] && tail -n 20 "$f" >&2; done; exit 1; }

loader_pin=(taskset -c "$loader_cpu")
[ "$loader_cpu" = any ] && loader_pin=()

# On-CPU time of all threads of a process, ns (/proc/PID/task/*/schedstat).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'; }
json_num() { sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p" "$2"; }

name_of() {
  case $1 in
    1) echo "tracer built out (notrace)" ;;
    2) echo "built in, nothing attached" ;;
    3) echo "built in, loader --all every ${interval} ms" ;;
    4) echo "built in, stb_dump every ${interval} ms" ;;
    5) echo "control: loader on an idle twin" ;;
    6) echo "built in, resident loader --every ${interval}ms" ;;
    7) echo "floor: a static no-op every ${interval} ms" ;;
  esac
}

# start_twin: an idle stb-echo-server with $connections open idle connections
# (configuration 5's loader target); sets tpid and twin_fds.
start_twin() {
  : >"$tmp/twin.out"
  taskset -c "$server_cpu" "$server" --port 0 --workers 1 >"$tmp/twin.out" 2>"$tmp/twin.err" &
  tpid=$!
  local tport='' fd i
  for _ in $(seq 200); do
    tport=$(awk '/^listening on port /{print $4}' "$tmp/twin.out")
    [ -n "$tport" ] && break
    sleep 0.02
  done
  [ -n "$tport" ] || fail "the idle twin server printed no port"
  for ((i = 0; i < connections; i++)); do
    exec {fd}<>"/dev/tcp/127.0.0.1/$tport"
    twin_fds+=("$fd")
  done
}

stop_twin() {
  local fd src=0
  for fd in "${twin_fds[@]}"; do exec {fd}>&-; done
  twin_fds=()
  kill -TERM "$tpid"
  wait "$tpid" || src=$?
  tpid=''
  [ "$src" -eq 0 ] || fail "the idle twin server exited with $src"
}

# run_one CONFIG ROUND: one server, one client run; appends a line to $results.
run_one() {
  local cfg=$1 round=$2 bin=$server extra='-' args=()
  case $cfg in
    1) bin=$notrace ;;
    4) args=(--self-dump-ms "$interval") ;;
  esac
  : >"$tmp/server.out"  # never read a previous run's port
  taskset -c "$server_cpu" "$bin" --port 0 --workers 1 "${args[@]}" \
    >"$tmp/server.out" 2>"$tmp/server.err" &
  spid=$!
  local port=''
  for _ in $(seq 200); do
    port=$(awk '/^listening on port /{print $4}' "$tmp/server.out")
    [ -n "$port" ] && break
    kill -0 "$spid" 2>/dev/null || fail "config $cfg: the server exited at start"
    sleep 0.02
  done
  [ -n "$port" ] || fail "config $cfg: the server printed no port"
  if [ "$cfg" = 3 ] || [ "$cfg" = 5 ]; then
    local target=$spid
    if [ "$cfg" = 5 ]; then start_twin; target=$tpid; fi
    "${loader_pin[@]}" "$every" --interval-ms "$interval" -- "$loader" --pid "$target" --all \
      >"$tmp/every.out" 2>"$tmp/loader.err" &
    epid=$!
  elif [ "$cfg" = 7 ]; then
    "${loader_pin[@]}" "$every" --interval-ms "$interval" -- "$noop" \
      >"$tmp/every.out" 2>"$tmp/loader.err" &
    epid=$!
  elif [ "$cfg" = 6 ]; then
    rm -rf "$tmp/snaps"
    mkdir "$tmp/snaps"
    "${loader_pin[@]}" "$loader" --pid "$spid" --every "${interval}ms" --out-dir "$tmp/snaps" \
      --keep 2 -f text >"$tmp/every.out" 2>"$tmp/loader.err" &
    rpid=$!
  fi
  local c0 c1 crc=0 l0=0
  c0=$(cpu_ns "$spid")
  if [ -n "$rpid" ]; then l0=$(cpu_ns "$rpid"); fi
  taskset -c "$client_cpu" "$client" --port "$port" --workers 1 --connections "$connections" \
    --size "$size" --duration "$duration" --json >"$tmp/client.json" 2>"$tmp/client.err" || crc=$?
  c1=$(cpu_ns "$spid")
  [ "$crc" -eq 0 ] || fail "config $cfg round $round: the client failed (exit $crc)"
  if [ -n "$rpid" ]; then
    local l1 src6=0 files
    l1=$(cpu_ns "$rpid")
    kill -TERM "$rpid"
    wait "$rpid" || src6=$?
    rpid=''
    [ "$src6" -eq 0 ] || fail "config 6 round $round: the resident loader exited with $src6"
    # "stopped by SIGTERM; N files written"
    files=$(sed -n 's/.*; \([0-9]*\) files written.*/\1/p' "$tmp/loader.err")
    [ -n "$files" ] && [ "$files" -gt 0 ] || fail "config 6 round $round: no snapshot written"
    extra=$(awk -v f="$files" -v a="$l0" -v b="$l1" \
      'BEGIN {printf "snapshots=%d,cpu_ms=%.2f", f, (b - a) / 1e6 / f}')
  fi
  if [ -n "$epid" ]; then
    kill -TERM "$epid"
    wait "$epid" || fail "stb-bench-every failed"
    epid=''
    # runs R failed F wall_ms_mean M wall_ms_max X cpu_ms_per_run C
    local what=loader
    [ "$cfg" = 7 ] && what=noop
    extra=$(awk -v w="$what" '{printf "%s_runs=%s,failed=%s,wall_ms=%s,cpu_ms=%s", w, $2, $4, $6, $10}' \
      "$tmp/every.out")
    grep -q ' failed 0 ' "$tmp/every.out" || fail "config $cfg: runs of the $what failed: $(cat "$tmp/every.out")"
    [ "$cfg" = 5 ] && stop_twin
  fi
  kill -TERM "$spid"
  local src=0
  wait "$spid" || src=$?
  spid=''
  [ "$src" -eq 0 ] || fail "config $cfg round $round: the server exited with $src"
  if [ "$cfg" = 4 ]; then
    # self-dump: N dumps every I ms, A ms each on average (max X), F failed
    extra=$(awk '/^self-dump:/ {printf "dumps=%s,ms_mean=%s", $2, $7}' "$tmp/server.out")
  fi
  local ok rps p50 p99 p999
  ok=$(json_num ok "$tmp/client.json") rps=$(json_num rps "$tmp/client.json")
  p50=$(json_num p50_us "$tmp/client.json") p99=$(json_num p99_us "$tmp/client.json")
  p999=$(json_num p999_us "$tmp/client.json")
  local cpu_us
  cpu_us=$(awk -v a="$c0" -v b="$c1" -v n="$ok" 'BEGIN {printf "%.3f", (b - a) / 1000 / n}')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$cfg" "$rps" "$p50" "$p99" "$p999" \
    "$cpu_us" "$extra" >>"$results"
  printf '  round %d config %d: %9.0f req/s  p99 %7.1f us  server %.2f us CPU/req  %s\n' \
    "$round" "$cfg" "$rps" "$p99" "$cpu_us" "$extra"
}

median() { sort -g | awk '{a[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

echo "== echo server macro benchmark: $rounds rounds x 7 configurations x ${duration} s =="
echo "   $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at start; server on CPU $server_cpu" \
     "(1 worker), client on CPU $client_cpu (1 worker, $connections connections, $size-byte requests)," \
     "loader on CPU $loader_cpu"
printf 'round\tconfig\trps\tp50_us\tp99_us\tp999_us\tserver_cpu_us_per_req\textra\n' >"$results"
for ((r = 1; r <= rounds; r++)); do
  for k in 0 1 2 3 4 5 6; do                # the order rotates every round
    run_one $(( (k + r - 1) % 7 + 1 )) "$r"
  done
done

# Per-round ratios to configuration 1, medians over rounds.
echo
echo "results (medians over $rounds rounds; ratios are per round against config 1, then the median):"
printf '  %-40s %10s %9s %8s | %8s %8s %8s\n' config "req/s" "p99 us" "CPU/req" "req/s" p99 CPU/req
declare -A R
for cfg in 1 2 3 4 5 6 7; do
  rps=$(awk -v c="$cfg" -F'\t' 'NR > 1 && $2 == c {print $3}' "$results" | median)
  p99=$(awk -v c="$cfg" -F'\t' 'NR > 1 && $2 == c {print $5}' "$results" | median)
  cpu=$(awk -v c="$cfg" -F'\t' 'NR > 1 && $2 == c {print $7}' "$results" | median)
  for col in 3 5 7; do
    R[$cfg,$col]=$(awk -v c="$cfg" -v col="$col" -F'\t' '
      NR > 1 && $2 == 1 {base[$1] = $col}
      NR > 1 && $2 == c {v[$1] = $col}
      END {for (r in v) if (r in base && base[r] > 0) printf "%.4f\n", v[r] / base[r]}' "$results" | median)
  done
  printf '  %-40s %10.0f %9.1f %8.2f | %8.3f %8.3f %8.3f\n' "$cfg $(name_of "$cfg")" "$rps" "$p99" \
    "$cpu" "${R[$cfg,3]}" "${R[$cfg,5]}" "${R[$cfg,7]}"
done
# Noise: how far configuration 1's own p99 strays from its median (median absolute deviation).
p99_1=$(awk -F'\t' 'NR > 1 && $2 == 1 {print $5}' "$results" | median)
noise=$(awk -v m="$p99_1" -F'\t' 'NR > 1 && $2 == 1 {d = $5 / m - 1; print (d < 0 ? -d : d)}' "$results" | median)
rps_noise=$(awk -F'\t' 'NR > 1 && $2 == 1 {print $3}' "$results" | median)
rps_noise=$(awk -v m="$rps_noise" -F'\t' 'NR > 1 && $2 == 1 {d = $3 / m - 1; print (d < 0 ? -d : d)}' "$results" | median)
printf '  noise: config 1 alone varies by a median %.1f %% in req/s and %.1f %% in p99 between rounds\n' \
  "$(awk -v x="$rps_noise" 'BEGIN {print x * 100}')" "$(awk -v x="$noise" 'BEGIN {print x * 100}')"

verdict() { awk -v v="$1" -v op="$2" -v lim="$3" 'BEGIN {ok = op == ">=" ? v >= lim : v <= lim; print ok ? "met" : "MISSED"}'; }
p99_in_noise=$(awk -v v="${R[2,5]}" -v n="$noise" 'BEGIN {d = v - 1; if (d < 0) d = -d; print d <= n ? "met" : "MISSED"}')
echo "goals:"
echo "  (2) req/s >= 0.99 x (1): ${R[2,3]} -> $(verdict "${R[2,3]}" '>=' 0.99);" \
     "p99 within noise (|ratio - 1| <= $(awk -v x="$noise" 'BEGIN {printf "%.3f", x}')): ${R[2,5]} -> $p99_in_noise"
echo "  (3) req/s >= 0.95 x (1): ${R[3,3]} -> $(verdict "${R[3,3]}" '>=' 0.95);" \
     "p99 <= 1.2 x (1): ${R[3,5]} -> $(verdict "${R[3,5]}" '<=' 1.2)"
echo "  (4) no goal set: req/s ${R[4,3]}, p99 ${R[4,5]}"
echo "  (5) control, the loader's own CPU use alone: req/s ${R[5,3]}, p99 ${R[5,5]};" \
     "tracing itself (3 vs 5): req/s $(awk -v a="${R[3,3]}" -v b="${R[5,3]}" 'BEGIN {printf "%.3f", a / b}')," \
     "p99 $(awk -v a="${R[3,5]}" -v b="${R[5,5]}" 'BEGIN {printf "%.3f", a / b}')"
echo "  (6) resident loader (not a goal of its own; what (3) costs without a process start" \
     "every ${interval} ms): req/s ${R[6,3]} -> $(verdict "${R[6,3]}" '>=' 0.95) at 0.95;" \
     "p99 ${R[6,5]} -> $(verdict "${R[6,5]}" '<=' 1.2) at 1.2"
echo "  (7) floor, a static no-op started every ${interval} ms where the loader runs (what no" \
     "program started that often can go below): req/s ${R[7,3]}, p99 ${R[7,5]}"
echo "per-run results: $results; load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
