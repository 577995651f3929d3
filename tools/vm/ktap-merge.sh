#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# ktap-merge.sh OUT "PROG..." LOG:PROGS...
#
# Merges the console logs of the guests that ran make check's programs side
# by side (tools/vm/run.sh) into one console log OUT in the format of one
# guest's (tools/vm/guest-init.sh), which tools/vm/ktap-totals.sh reads:
#
#   kverbs-boot: SECONDS s (guest G)      one per guest that got to its tests
#   TAP version 13
#   1..N                                  N: the programs of "PROG..."
#   each program's block, in the order of "PROG...": from its
#   "# selftests: kverbs: PROG" line to its result line, renumbered;
#   kverbs_kmemleak.sh's, which each guest runs last (tools/vm/
#   guest-init.sh), named kverbs_kmemleak.sh@G in "PROG..." for guest G
#   kverbs-vm: done                       only if every guest finished
#
# Each LOG:PROGS argument is a guest's console log and what it was given
# to run (named in its messages).  A guest's programs are found in its log,
# whichever it ran (the queue's are given out as the guests ask: tools/vm/
# plan-guests.sh); its KTAP header tells it got to its tests, its plan may
# come first or last.  A program that never started is missing from OUT,
# and one that a guest died inside ends OUT's block without a result line:
# ktap-totals.sh counts both as failed.  Lines between the blocks (boot,
# kernel messages) stay in the guests' logs only.  For each guest that did
# not finish, a line on stdout says which and why, with its log.

set -euo pipefail

if [ $# -lt 3 ]; then
	echo "usage: $0 OUT \"PROG...\" LOG:PROGS..." >&2
	exit 2
fi
out=$1 order=$2
shift 2

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
all_done=1 g=0
for arg in "$@"; do
	g=$((g + 1))
	log=${arg%%:*} progs=${arg#*:}
	# Each program's block, to $tmp/PROG; the guest's boot time.
	sed 's/\r$//' "$log" 2>/dev/null | awk -v dir="$tmp" -v g="$g" '
	/^kverbs-boot: / { printf "%s (guest %d)\n", $0, g >> (dir "/boot") }
	/^TAP version 13$/ && !plan { plan = 1; next }
	/^# selftests: kverbs: [^ ]+$/ {
		if (f) close(f)
		f = dir "/" $4
		# Every guest has one: its own, by guest.
		if ($4 == "kverbs_kmemleak.sh")
			f = f "@" g
		print > f
		next
	}
	f != "" && /^(not )?ok [0-9]+ selftests: kverbs: / { print > f; close(f); f = ""; next }
	f != "" { print > f }
	END { if (plan) print "" > (dir "/plan." g) }'
	grep -q '^kverbs-vm: done$' "$log" 2>/dev/null && continue
	all_done=0
	if [ ! -e "$tmp/plan.$g" ]; then
		echo "kverbs: guest $g ($progs): the VM printed no test plan: it died before the tests started (console log: $log)"
	else
		echo "kverbs: guest $g ($progs): the VM did not finish (crash, panic or timeout; console log: $log)"
	fi
done

{
	# (No boot line when no guest got to its tests.)
	[ ! -e "$tmp/boot" ] || cat "$tmp/boot"
	echo "TAP version 13"
	echo "1..$(echo "$order" | wc -w)"
	i=0
	for p in $order; do
		i=$((i + 1))
		[ -e "$tmp/$p" ] || continue
		# The result line renumbered: its place among all the programs.
		sed -E "s/^(not )?ok [0-9]+ (selftests: kverbs: )/\\1ok $i \\2/" "$tmp/$p"
	done
	[ "$all_done" = 0 ] || echo "kverbs-vm: done"
} >"$out"
