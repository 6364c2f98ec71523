#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Checks that an executable links the given libraries statically: none of them
# is among its NEEDED entries. Each --bad FILE must be rejected (it needs one
# of them: proves that the checker can fail).
# Usage: check_static_deps.sh --libs "bpf dw elf" [--bad FILE]... FILE...
set -u

libs=""
bads=""
files=""
while [ $# -gt 0 ]; do
	case $1 in
	--libs) libs=$2; shift 2 ;;
	--bad) bads="$bads $2"; shift 2 ;;
	*) files="$files $1"; shift ;;
	esac
done
if [ -z "$libs" ] || [ -z "$files" ]; then
	echo "usage: check_static_deps.sh --libs \"NAME...\" [--bad FILE]... FILE..." >&2
	exit 64
fi

# Prints what is wrong with $1 (a shared lib<name>.so of $libs it needs), or
# nothing; returns 1 when something is.
check_one() {
	if ! readelf -h "$1" >/dev/null 2>&1; then
		echo "$1: not an ELF file"
		return 1
	fi
	needed=$(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
	bad=0
	for l in $libs; do
		for n in $needed; do
			case $n in
			"lib$l.so"|"lib$l.so."*|"lib$l-"*".so"*)
				echo "$1: needs $n (lib$l should be linked statically)"
				bad=1 ;;
			esac
		done
	done
	return $bad
}

fails=0
for f in $files; do
	if msg=$(check_one "$f"); then
		echo "ok: $f needs none of: $libs"
	else
		echo "FAIL: $msg"
		fails=$((fails + 1))
	fi
done
for f in $bads; do
	if msg=$(check_one "$f"); then
		echo "FAIL: $f needs one of the libraries but passed: the checker is broken"
		fails=$((fails + 1))
	else
		echo "ok (rejected as it must be): $msg"
	fi
done
[ "$fails" -eq 0 ]
