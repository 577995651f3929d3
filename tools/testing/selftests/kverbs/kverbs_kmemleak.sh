#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The kmemleak cases of the programs that ran before in this guest, run
# after the last of them (tools/vm/guest-init.sh; kverbs_lib.sh,
# kv_kmemleak_deferred): one pair of scans, then for each program, in the
# order they ran, "kmemleak_clean_PROG": kmemleak reports no unreferenced
# object allocated in the program's window (from the end of the program
# before to its own end, after its cleanup; the last program's to now),
# those of its leaking on purpose (AFTER, kverbs_forget.sh) listed apart,
# and the kernel logged no report after the program's end (kv_kmsg_gap).
# The objects are those kmemleak reports now and those of reports the
# programs cleared (kv_kmemleak_clear). Not a program of its own: it is
# not in TEST_PROGS, and without the programs' windows it has no case and
# passes.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

WINDOWS=${KV_KMEMLEAK_WINDOWS:-}
SPLIT=/tmp/kverbs-kmemleak-split

# split_report REPORT: the objects of the kmemleak report in file REPORT, each to
# the file $SPLIT/N of the window N (1 for the first line of WINDOWS) that
# holds its allocation: in one pass, as a report may have thousands of
# objects (kverbs_forget.sh's: 1871 in one run, 40,000 lines, which a pass
# a window took 9-16 s each under TCG to read).
split_report() {
	rm -rf "$SPLIT" && mkdir -p "$SPLIT" || return 1
	awk -v dir="$SPLIT" '
		FNR == NR { end[++n] = $2; next }
		/^unreferenced object / { head = $0; w = -1; next }
		w == -1 && / jiffies [0-9]+/ {
			t = $0
			sub(/.* jiffies /, "", t)
			# The last window runs to now.
			for (w = 1; w < n && t + 0 > end[w] + 0; w++)
				;
			print head >> (dir "/" w)
		}
		w > 0 { print >> (dir "/" w) }' "$WINDOWS" "$1"
}

# window PROG N AFTER: kv_kmemleak_verdict on the objects of window N, and
# no kernel report logged after PROG's end (kv_kmsg_gap).
window() {
	local r=0 gap=$WINDOWS.$1.log
	if [ -e "$gap" ]; then
		kv_msg "kernel report after $1 ended (its teardown's, before the next program began):"
		kv_diag <"$gap"
		r=1
	fi
	KV_KMEMLEAK_REPORT=
	[ ! -s "$SPLIT/$2" ] || KV_KMEMLEAK_REPORT=$(cat "$SPLIT/$2")
	KV_KMEMLEAK_AFTER=$3
	kv_kmemleak_verdict || r=1
	return $r
}

# No program ran to its end in this guest (or none was given it): nothing
# to check.
if [ -z "$WINDOWS" ] || [ ! -s "$WINDOWS" ]; then
	ktap_print_header
	ktap_set_plan 0
	kv_msg "no test program's window (KV_KMEMLEAK_WINDOWS): no case"
	ktap_finished
fi
mapfile -t lines <"$WINDOWS"
ktap_print_header
ktap_set_plan "${#lines[@]}"
kv_kmsg_open || kv_msg "cannot read the kernel log through /dev/kmsg: every case fails"
# The two scans once, before the first case: their time is the check's.
# Then the kernel log since the last program ended, the scans' time
# included (kv_kmsg_gap), is that program's.
if kv_kmemleak_scan; then
	# What kmemleak reports now and what the programs cleared (a cleared
	# object is never reported again: none is in both).
	printf '%s\n' "$KV_KMEMLEAK_REPORT" >"$SPLIT.report"
	[ -s "$WINDOWS.cleared" ] && cat "$WINDOWS.cleared" >>"$SPLIT.report"
	kv_msg "kmemleak: $(grep -c "^unreferenced object" "$SPLIT.report") objects reported"
	split_report "$SPLIT.report" && scanned=1
fi
kv_window_start
kv_kmsg_gap
i=0
for line in "${lines[@]}"; do
	read -r prog _ after <<<"$line"
	i=$((i + 1))
	if [ -n "${scanned:-}" ]; then
		kv_case "kmemleak_clean_$prog" window "$prog" $i "$after"
	else
		kv_case "kmemleak_clean_$prog" false
	fi
done
kv_finish
