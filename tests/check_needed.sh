#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Checks that every given ELF file lists libgcc_s.so.1 before any libunwind*.so
# (and before libbthread.so) in its NEEDED entries, and that the loader searches
# it first (ldd). Each --bad FILE must be rejected (proves the checker can fail).
# Usage: check_needed.sh [--bad FILE]... FILE...
set -u

fails=0
checked=0
bthread_lib=0

# Prints the NEEDED entries of $1, one per line, in order.
stb_needed() {
	readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
}

# Line number of the first line of stdin matching the basic regex $1, or 0.
stb_first() {
	grep -n -e "$1" | head -n 1 | cut -d: -f1 | grep . || echo 0
}

# Returns 0 when $1 is fine; prints why not on stdout otherwise.
stb_check_one() {
	f=$1
	if [ ! -f "$f" ] || ! readelf -h "$f" >/dev/null 2>&1; then
		echo "$f: not an ELF file"
		return 1
	fi
	needed=$(stb_needed "$f")
	gcc_s=$(printf '%s\n' "$needed" | stb_first '^libgcc_s\.so\.1$')
	unw=$(printf '%s\n' "$needed" | stb_first '^libunwind.*\.so')
	bth=$(printf '%s\n' "$needed" | stb_first '^libbthread\.so')
	bad=0
	if [ "$unw" -gt 0 ] && { [ "$gcc_s" -eq 0 ] || [ "$gcc_s" -gt "$unw" ]; }; then
		echo "$f: NEEDED lists libunwind (entry $unw) before libgcc_s.so.1 (entry $gcc_s)"
		bad=1
	fi
	if [ "$bth" -gt 0 ] && { [ "$gcc_s" -eq 0 ] || [ "$gcc_s" -gt "$bth" ]; }; then
		echo "$f: NEEDED lists libbthread (entry $bth) before libgcc_s.so.1 (entry $gcc_s)"
		bad=1
	fi
	# The loader's search order (breadth first over NEEDED): what really binds.
	order=$(ldd "$f" 2>/dev/null | awk '{print $1}')
	lgcc_s=$(printf '%s\n' "$order" | stb_first '^libgcc_s\.so\.1$')
	lunw=$(printf '%s\n' "$order" | stb_first '^libunwind.*\.so')
	if [ "$lunw" -gt 0 ] && { [ "$lgcc_s" -eq 0 ] || [ "$lgcc_s" -gt "$lunw" ]; }; then
		echo "$f: the loader searches libunwind (position $lunw) before libgcc_s.so.1 (position $lgcc_s)"
		bad=1
	fi
	return $bad
}

bads=""
while [ $# -gt 0 ]; do
	case $1 in
	--bad)
		bads="$bads $2"
		shift 2
		;;
	*)
		checked=$((checked + 1))
		case $(basename "$1") in libbthread.so*) bthread_lib=1 ;; esac
		if msg=$(stb_check_one "$1"); then
			echo "ok: $1"
		else
			echo "FAIL: $msg"
			fails=$((fails + 1))
		fi
		shift
		;;
	esac
done

for f in $bads; do
	if msg=$(stb_check_one "$f"); then
		echo "FAIL: $f has the wrong order on purpose but passed: the checker is broken"
		fails=$((fails + 1))
	else
		echo "ok (rejected as it must be): $msg"
	fi
done

if [ "$bthread_lib" -eq 0 ]; then
	echo "FAIL: libbthread.so was not among the files checked"
	fails=$((fails + 1))
fi
echo "$checked files checked, $fails failures"
[ "$fails" -eq 0 ]
