#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Cost of `stb-bpf-loader --profile` on a target's throughput: the yield rate
# of bench_profile_target (yielding bthreads plus sleeping ones) measured in
# windows that alternate unprofiled, --freq 99, unprofiled, --freq 999, ...
# Each profiled window is compared with the mean of the unprofiled windows
# right before and after it; the medians of those ratios are reported, with
# the yields per CPU-second of the target (the steadiest number on a shared
# machine) and the loader's own CPU use. Results: docs/benchmarks.md, "Profiler".
set -euo pipefail

usage() {
  cat <<EOF
Usage: sudo bench/bench_profile.sh BUILD_DIR [options]
  --rounds N     profiled windows per frequency (default 7)
  --window S     seconds per window (default 5)
  --yielders N   bthreads calling bthread_yield (default 8)
  --sleepers N   bthreads asleep, snapshotted off-CPU every tick (default 1000)
  --pinned       target on CPU 0 with one worker, loader on CPU 1: the cost
                 inside the target alone (default: no pinning, two workers,
                 the loader competes for the same two CPUs)
Example: sudo bench/bench_profile.sh build --rounds 9 --pinned
EOF
}

[ $# -ge 1 ] && [ "$1" != "--help" ] && [ "$1" != "-h" ] || { usage; [ $# -ge 1 ]; exit $?; }
build=$1
shift
rounds=7 win=5 yielders=8 sleepers=1000 pinned=0
num() { [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "bench_profile: $1 needs a positive number, not '$2'" >&2; exit 64; }; }
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) num "$1" "${2-}"; rounds=$2; shift 2 ;;
    --window) num "$1" "${2-}"; win=$2; shift 2 ;;
    --yielders) num "$1" "${2-}"; yielders=$2; shift 2 ;;
    --sleepers) [[ ${2-} =~ ^[0-9]+$ ]] || { echo "bench_profile: --sleepers needs a number" >&2; exit 64; }
                sleepers=$2; shift 2 ;;
    --pinned) pinned=1; shift ;;
    *) echo "bench_profile: unknown option $1 (see --help)" >&2; exit 64 ;;
  esac
done

target=$build/bench/bench_profile_target
loader=$build/loader/stb-bpf-loader
for f in "$target" "$loader"; do
  [ -x "$f" ] || { echo "bench_profile: $f is not built: cmake --build $build" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "bench_profile: needs root (BPF, perf events, ptrace)" >&2; exit 1; }

tpin=() lpin=()
if [ "$pinned" -eq 1 ]; then
  tpin=(env STB_CONCURRENCY=1 taskset -c 0)
  lpin=(taskset -c 1)
fi

tmp=$(mktemp -d /tmp/stb-bench-profile.XXXXXX)
tpid=
cleanup() {
  exec 3>&- 2>/dev/null || true
  [ -n "$tpid" ] && wait "$tpid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

mkfifo "$tmp/in"
"${tpin[@]}" "$target" "$yielders" "$sleepers" <"$tmp/in" >"$tmp/log" &
tpid=$!
exec 3>"$tmp/in"
# Start-up (1000 bthreads), then warm-up.
for ((i = 0; i < 300; i++)); do
  [ "$(wc -l <"$tmp/log")" -ge 5 ] && break
  sleep 0.1
done
[ "$(wc -l <"$tmp/log")" -ge 5 ] || { echo "bench_profile: the target does not report" >&2; exit 1; }
sleep 2

last() { tail -n 1 "$tmp/log"; }
# CPU time (utime + stime, clock ticks) of process $1, 0 when it is gone.
cpu() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null || echo 0; }

# window LABEL FREQ: measures the yield rate for $win s, profiled at FREQ Hz
# (0: not profiled). The loader starts 1 s before the window and ends ~3 s
# after it, so the window sees steady-state sampling only.
window() {
  local label=$1 freq=$2 lp= a b ta tb la=0 lb=0
  if [ "$freq" -gt 0 ]; then
    "${lpin[@]}" "$loader" --pid "$tpid" --profile --duration "$((win + 4))s" --freq "$freq" \
      -o "$tmp/p$freq.pb.gz" 2>>"$tmp/loader-$freq.log" &
    lp=$!
    sleep 1
    la=$(cpu "$lp")
  fi
  a=$(last)
  ta=$(cpu "$tpid")
  sleep "$win"
  b=$(last)
  tb=$(cpu "$tpid")
  if [ -n "$lp" ]; then
    lb=$(cpu "$lp")
    wait "$lp"
  fi
  echo "$label $a $b $ta $tb $la $lb" >>"$tmp/windows"
}

echo "bench_profile: $rounds rounds of ${win} s windows, $yielders yielders, $sleepers sleepers," \
     "$( [ "$pinned" -eq 1 ] && echo "pinned (target CPU 0, 1 worker; loader CPU 1)" || echo "not pinned")," \
     "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
window off 0
for ((r = 1; r <= rounds; r++)); do
  window p99 99
  window off 0
  window p999 999
  window off 0
done
echo "bench_profile: load at the end $(cut -d' ' -f1-3 /proc/loadavg)"

awk -v hz="$(getconf CLK_TCK)" '
  {
    label[NR] = $1
    if (NF < 9 || $4 <= $2 || $7 <= $6) { print "bench_profile: bad window: " $0; bad = 1; exit 1 }
    rate[NR] = ($5 - $3) / ($4 - $2) * 1e9              # yields per second
    tcpu = ($7 - $6) / hz
    eff[NR] = tcpu > 0 ? ($5 - $3) / tcpu : 0           # yields per target CPU-second
    lcpu[NR] = ($9 - $8) / hz / (($4 - $2) / 1e9)       # loader CPUs used
  }
  END {
    if (bad) exit 1
    n99 = 0; n999 = 0; noff = 0
    for (i = 1; i <= NR; i++) {
      if (label[i] == "off") { off[++noff] = rate[i]; offe[noff] = eff[i]; continue }
      ratio = rate[i] / ((rate[i - 1] + rate[i + 1]) / 2)
      eratio = eff[i] / ((eff[i - 1] + eff[i + 1]) / 2)
      if (label[i] == "p99") { r99[++n99] = ratio; e99[n99] = eratio; l99[n99] = lcpu[i] }
      else { r999[++n999] = ratio; e999[n999] = eratio; l999[n999] = lcpu[i] }
    }
    printf "unprofiled: median %.3g yields/s, %.3g yields per CPU-second; yields/s by window:",
           median(off, noff), median(offe, noff)
    for (i = 1; i <= noff; i++) printf " %.3g", off[i]
    printf "\n"
    report("--freq 99 ", r99, n99, 0.99)
    report("--freq 999", r999, n999, 0.95)
    report2("--freq 99 ", e99, n99)
    report2("--freq 999", e999, n999)
    printf "loader CPU use (CPUs, median): --freq 99 %.4f, --freq 999 %.4f\n",
           median(l99, n99), median(l999, n999)
  }
  function report(name, r, n, goal,   i, m, verdict) {
    m = median(r, n)
    verdict = (m >= goal) ? "met" : "MISSED"
    printf "%s yields/s, profiled / unprofiled: median %.4f (goal >= %.2f: %s); rounds:",
           name, m, goal, verdict
    for (i = 1; i <= n; i++) printf " %.3f", r[i]
    printf "\n"
  }
  function report2(name, r, n,   i) {
    printf "%s yields per target CPU-second, profiled / unprofiled: median %.4f; rounds:",
           name, median(r, n)
    for (i = 1; i <= n; i++) printf " %.3f", r[i]
    printf "\n"
  }
  function median(a, n,   i, j, t, b) {
    for (i = 1; i <= n; i++) b[i] = a[i]
    for (i = 2; i <= n; i++) for (j = i; j > 1 && b[j - 1] > b[j]; j--) { t = b[j]; b[j] = b[j - 1]; b[j - 1] = t }
    return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2
  }' "$tmp/windows"

for f in 99 999; do
  echo "loader at --freq $f (last round):"
  grep 'profiled pid' "$tmp/loader-$f.log" | tail -n 1 | sed 's/^/  /'
  grep -h 'warning' "$tmp/loader-$f.log" | sort | uniq -c | sed 's/^/  /' || true
done
