#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The example unit examples/stb-snapshots@.service survives a restart of the
# program it watches: its ExecStart, run as systemd runs it (instance = the
# program's name, "$$" = "$", the built loader for /usr/sbin's, a scratch
# directory for /var/lib/stb, a period of 1 s), finds the program by name,
# writes snapshots of it, exits when it exits, and run again (Restart=always)
# finds the new process; PIDFILE= names the process instead; a program that
# is not running is an ordinary failure (retried), never the usage status
# that stops the restarts.
# Usage: check_unit.sh SOURCE_DIR LOADER TARGET (TARGET: tests/loader_target)
set -euo pipefail

src=${1:?usage: check_unit.sh SOURCE_DIR LOADER TARGET}
loader=$(realpath -e "${2:?usage: check_unit.sh SOURCE_DIR LOADER TARGET}")
target=$(realpath -e "${3:?usage: check_unit.sh SOURCE_DIR LOADER TARGET}")
unit=$src/examples/stb-snapshots@.service
fail() { echo "FAIL: $*"; exit 1; }
if [ "$(id -u)" != 0 ]; then
  [ "${STB_REQUIRE_BPF:-0}" = 1 ] && fail "needs root (the loader reads another process)"
  echo "skipped: needs root"; exit 77
fi
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

grep -qx 'Restart=always' "$unit" || fail "$unit: no Restart=always"
grep -q -- '--pid %i' "$unit" && fail "$unit: keyed by a pid (--pid %i)"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[ -n "$exec_start" ] || fail "$unit: no ExecStart"

# A program of our own name (pgrep -x: at most 15 characters), so that no
# other process on the machine is taken for it.
name=stbunit$$
name=${name:0:15}
cp "$target" "$tmp/$name"
mkdir "$tmp/state"

# One instance of the program (it runs until its stdin ends); sets $tpid.
start_program() {
  mkfifo "$tmp/in.$1"
  "$tmp/$name" --butex 2 <"$tmp/in.$1" >"$tmp/out.$1" 2>&1 &
  tpid=$!
  pids+=("$tpid")
  sleep 3600 >"$tmp/in.$1" &
  pids+=("$!")
  for _ in $(seq 100); do grep -q '^ready' "$tmp/out.$1" 2>/dev/null && return; sleep 0.1; done
  fail "the program did not start: $(cat "$tmp/out.$1")"
}
stop_program() { # $1: its pid (killed, as a crash or a restart would)
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# ExecStart with systemd's substitutions: %I and %i (the instance), "$$".
run_unit() { # [VAR=value...]: the service's environment; sets $upid
  local cmd=${exec_start//%I/$name}
  cmd=${cmd//%i/$name}
  cmd=${cmd//\$\$/\$}
  cmd=${cmd//\/usr\/sbin\/stb-bpf-loader/$loader}
  cmd=${cmd//\/var\/lib\/stb/$tmp/state}
  cmd=${cmd//--every 10s/--every 1s}
  mkdir -p "$tmp/state/$name"
  env -i PATH="$PATH" "$@" bash -c "eval exec $(printf '%q' "$cmd")" >"$tmp/unit.out" 2>&1 &
  upid=$!
  pids+=("$upid")
}
# Waits until a snapshot file of pid $1 exists.
wait_file() {
  for _ in $(seq 150); do
    compgen -G "$tmp/state/$name/stb-$1-*.pb.gz" >/dev/null && return
    kill -0 "$upid" 2>/dev/null || fail "the unit's command exited: $(cat "$tmp/unit.out")"
    sleep 0.1
  done
  fail "no snapshot of pid $1 in 15 s: $(cat "$tmp/unit.out")"
}

# The program is not running: an ordinary failure, retried after RestartSec.
run_unit
rc=0; wait "$upid" || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 64 ] || fail "no program: exit $rc (want a failure other than 64)"
grep -q "no process named $name" "$tmp/unit.out" || fail "no program: $(cat "$tmp/unit.out")"

# Found by its name; the loader ends with it.
start_program 1
pid1=$tpid
run_unit
wait_file "$pid1"
stop_program "$pid1"
rc=0; wait "$upid" || rc=$?
[ "$rc" -eq 0 ] || fail "after the program's exit: exit $rc: $(cat "$tmp/unit.out")"
grep -q "process $pid1 exited" "$tmp/unit.out" || fail "$(cat "$tmp/unit.out")"

# Restarted: the unit, run again, traces the new process.
start_program 2
pid2=$tpid
[ "$pid2" != "$pid1" ] || fail "the same pid twice"
run_unit
wait_file "$pid2"
kill -TERM "$upid"
rc=0; wait "$upid" || rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM: exit $rc: $(cat "$tmp/unit.out")"

# PIDFILE= instead of the name.
echo "$pid2" >"$tmp/pidfile"
rm -f "$tmp/state/$name"/stb-*
run_unit PIDFILE="$tmp/pidfile"
wait_file "$pid2"
kill -TERM "$upid"
wait "$upid" || fail "PIDFILE: $(cat "$tmp/unit.out")"
stop_program "$pid2"
echo "unit: found by name, followed across a restart, PIDFILE works"
