#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The installed docs of stb-bpf-loader and libbthread: the man pages render
# without warnings, the bash completion and the man page know every long
# option the built loader's --help prints (and the --format / --state values
# it accepts), and the example systemd unit verifies.
# Usage: check_docs.sh SOURCE_DIR LOADER
set -euo pipefail

src=${1:?usage: check_docs.sh SOURCE_DIR LOADER}
loader=$(realpath -e "${2:?usage: check_docs.sh SOURCE_DIR LOADER}")
man8=$src/docs/man/stb-bpf-loader.8
man3=$src/docs/man/stb.3
comp=$src/docs/completion/stb-bpf-loader
unit=$src/examples/stb-snapshots@.service
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

command -v man >/dev/null || fail "man not installed (Debian: man-db, groff-base)"

# ---- man pages: no warnings, and the rendered text has what it must.
render() { LC_ALL=C.UTF-8 MANWIDTH=80 man -E UTF-8 -l "$1" 2>/dev/null; }
for page in "$man8" "$man3"; do
  [ -f "$page" ] || fail "$page missing"
  warn=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$page" 2>&1 >/dev/null)
  [ -z "$warn" ] || fail "man --warnings on $page:"$'\n'"$warn"
done
render "$man8" >"$tmp/man8.txt"
render "$man3" >"$tmp/man3.txt"
for w in 'stb-bpf-loader --pid PID' 'stb-bpf-loader --core FILE' 'EXIT STATUS' 'CAP_SYS_PTRACE' \
         'CAP_DAC_READ_SEARCH' 'CAP_BPF' 'CAP_PERFMON' 'CAP_SYS_ADMIN' 'stb-snapshots@.service' \
         'sample_index=cpu'; do
  grep -F -- "$w" "$tmp/man8.txt" >/dev/null || fail "stb-bpf-loader.8 does not render '$w'"
done
for w in bthread_stack_trace stb_trace stb_dump stb_watchdog_start stb_debug_http_start \
         /bthreads/all STB_DUMP_SIGNAL STB_WATCHDOG STB_TRACE_SIGNAL STB_TABLE_CAPACITY \
         STB_SIGNAL_TRACE_TIMEOUT_MS STB_CONCURRENCY STB_TRACE_RUNTIME_FRAMES \
         stb_set_trace_runtime_frames no_lines; do
  grep -F -- "$w" "$tmp/man3.txt" >/dev/null || fail "stb.3 does not render '$w'"
done
# Every variable of README.md's environment table is in stb(3), except the
# test-build-only one.
grep -oE '^\| `STB_[A-Z_]+' "$src/README.md" | sed 's/^| `//' | sort -u >"$tmp/env"
[ -s "$tmp/env" ] || fail "no environment table found in README.md"
while read -r v; do
  [ "$v" = STB_LOADER_FAULT_HOLD_MS ] && continue
  grep -F -- "$v" "$tmp/man3.txt" >/dev/null || fail "stb.3 lacks README's $v"
done <"$tmp/env"

# ---- the loader's own lists: long options, formats, states.
"$loader" --help >"$tmp/help"
grep -oE -- '--[a-z][a-z-]*[a-z]' "$tmp/help" | sort -u >"$tmp/help_opts"
[ "$(wc -l <"$tmp/help_opts")" -ge 20 ] || fail "only $(wc -l <"$tmp/help_opts") long options in --help"
# "--format: 'x' is not text, json, pprof, folded or flamegraph" -> the formats.
rc=0; "$loader" --format x >/dev/null 2>"$tmp/ferr" || rc=$?
[ "$rc" -eq 64 ] || fail "--format x exited $rc, not 64"
sed -n "s/.*is not \(.*\)$/\1/p" "$tmp/ferr" | sed 's/,/ /g; s/ or / /' | tr -s ' ' '\n' |
  sed '/^$/d' | sort >"$tmp/formats"
# "--state: unknown state 'x' (running, ready, ...)" -> the states.
rc=0; "$loader" --state x >/dev/null 2>"$tmp/serr" || rc=$?
[ "$rc" -eq 64 ] || fail "--state x exited $rc, not 64"
sed -n 's/.*(\(.*\))$/\1/p' "$tmp/serr" | tr -d ',' | tr -s ' ' '\n' | sed '/^$/d' | sort >"$tmp/states"
[ "$(wc -l <"$tmp/formats")" -ge 5 ] || fail "cannot read the formats from: $(cat "$tmp/ferr")"
[ "$(wc -l <"$tmp/states")" -ge 7 ] || fail "cannot read the states from: $(cat "$tmp/serr")"

# Each one an entry of OPTIONS ("       -p, --pid PID" or "       --keep N").
while read -r o; do
  grep -E -- "^ +(-[a-zA-Z], )?$o( |$)" "$tmp/man8.txt" >/dev/null ||
    fail "stb-bpf-loader.8 has no entry for $o (in --help)"
done <"$tmp/help_opts"
while read -r f; do
  grep -F -- "$f" "$tmp/man8.txt" >/dev/null || fail "stb-bpf-loader.8 lacks format $f"
done <"$tmp/formats"
while read -r s; do
  grep -F -- "$s" "$tmp/man8.txt" >/dev/null || fail "stb-bpf-loader.8 lacks state $s"
done <"$tmp/states"

# ---- bash completion.
[ -f "$comp" ] || fail "$comp missing"
bash -n "$comp" || fail "bash -n $comp"
# complete WORD...: the candidates for the last word, one per line.
complete_words() {
  bash -c 'source "$1" || exit 2
           complete -p stb-bpf-loader >/dev/null || exit 3
           shift; COMP_WORDS=("stb-bpf-loader" "$@"); COMP_CWORD=$#
           _stb_bpf_loader; printf "%s\n" "${COMPREPLY[@]}"' _ "$comp" "$@"
}
out=$(bash -c 'source "$1" && complete -p stb-bpf-loader' _ "$comp") ||
  fail "sourcing $comp registers no completion for stb-bpf-loader"
case $out in *"-F _stb_bpf_loader"*) ;; *) fail "complete -p stb-bpf-loader: $out" ;; esac
[ "$(complete_words --fo)" = --format ] || fail "'--fo' completes to '$(complete_words --fo)', not --format"
complete_words -- | sort -u >"$tmp/comp_opts"
diff -u "$tmp/help_opts" "$tmp/comp_opts" >"$tmp/d" ||
  fail "completion options differ from --help's (- help, + completion):"$'\n'"$(cat "$tmp/d")"
complete_words --format '' | sort >"$tmp/comp_formats"
diff -u "$tmp/formats" "$tmp/comp_formats" >"$tmp/d" ||
  fail "--format completion differs from the loader's formats:"$'\n'"$(cat "$tmp/d")"
# --format=VALUE: bash hands over "--format" "=" "VALUE".
[ "$(complete_words --format = js)" = json ] ||
  fail "'--format=js' completes to '$(complete_words --format = js)', not json"
[ "$(complete_words --format = | sort)" = "$(cat "$tmp/formats")" ] ||
  fail "'--format=' does not complete the formats"
complete_words -s '' | sort >"$tmp/comp_states"
diff -u "$tmp/states" "$tmp/comp_states" >"$tmp/d" ||
  fail "--state completion differs from the loader's states:"$'\n'"$(cat "$tmp/d")"
complete_words --pid '' >"$tmp/pids"
grep -x "$$" "$tmp/pids" >/dev/null || fail "--pid does not complete this shell's pid $$"
mkdir "$tmp/adir" && : >"$tmp/afile"
[ "$(complete_words --out-dir "$tmp/a")" = "$tmp/adir" ] || fail "--out-dir completes files"
complete_words --core "$tmp/a" | sort >"$tmp/files"
printf '%s\n' "$tmp/adir" "$tmp/afile" | diff - "$tmp/files" >/dev/null || fail "--core does not complete files"

# ---- the example unit.
[ -f "$unit" ] || fail "$unit missing"
# Keyed by the program (check_unit.sh runs it across a restart), not by a pid.
for k in '^ExecStart=.* /usr/sbin/stb-bpf-loader --pid "\$\$pid" --every [0-9]+[a-z]* --out-dir "/var/lib/stb/\$\$2"' \
         '^StateDirectory=stb/%i$' '^Type=' '^WantedBy=' '^NoNewPrivileges=yes$' '^Restart=always$'; do
  grep -E -- "$k" "$unit" >/dev/null || fail "$unit: no line matching $k"
done
for key in CapabilityBoundingSet AmbientCapabilities; do
  line=$(grep -E "^$key=" "$unit") || fail "$unit: no $key"
  for cap in CAP_BPF CAP_PERFMON CAP_SYS_PTRACE CAP_DAC_READ_SEARCH; do
    case " ${line#*=} " in *" $cap "*) ;; *) fail "$unit: $key lacks $cap" ;; esac
  done
done
# The options of ExecStart are the loader's.
for o in $(sed -n 's/^ExecStart=//p' "$unit" | grep -oE -- '--[a-z-]+'); do
  grep -x -- "$o" "$tmp/help_opts" >/dev/null || fail "$unit: ExecStart uses $o, not a loader option"
done
if command -v systemd-analyze >/dev/null; then
  # Verified as an instance, with ExecStart pointing at the built loader and
  # the man page of Documentation= found on MANPATH.
  mkdir -p "$tmp/man/man8" "$tmp/unit"
  cp "$man8" "$tmp/man/man8/"
  sed "s# /usr/sbin/stb-bpf-loader # $loader #" "$unit" >"$tmp/unit/stb-snapshots@1.service"
  # It only warns about a bad value ("ignoring"): any output is a failure.
  if MANPATH=$tmp/man systemd-analyze verify "$tmp/unit/stb-snapshots@1.service" >"$tmp/verify" 2>&1; then
    [ ! -s "$tmp/verify" ] || fail "systemd-analyze verify $unit:"$'\n'"$(cat "$tmp/verify")"
    echo "systemd-analyze verify: ok"
  else
    # Is it this machine (no systemd manager to ask)? A trivial unit tells.
    printf '[Service]\nExecStart=/bin/true\n' >"$tmp/unit/stbprobe.service"
    if systemd-analyze verify "$tmp/unit/stbprobe.service" >/dev/null 2>&1; then
      fail "systemd-analyze verify $unit:"$'\n'"$(cat "$tmp/verify")"
    fi
    echo "systemd-analyze verify does not work here (a trivial unit fails too): keys checked only"
  fi
else
  echo "systemd-analyze not installed: the unit's keys checked only"
fi
echo "docs: 2 man pages, completion of $(wc -l <"$tmp/comp_opts") options, unit: ok"
