#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The benchmark (`bench`, perftest's six tests in the kernel) in loopback on
# rxe over lo: each test at two sizes, with several QPs, both directions and
# all sizes; its table must parse and be consistent (every iteration done,
# numbers positive, peak >= average, message rate x size = bandwidth,
# t_min <= t_typical <= t_max). No timing threshold: speed is for
# `make bench`. Then bad input.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

BENCH=$KV_DEBUGFS/rxe_lo/bench

setup() {
	kv_rxe_add rxe_lo lo && kv_load
}

# run OPTIONS: one run; the report on failure.
run() {
	local err
	err=$( (printf '%s' "$1" >"$BENCH") 2>&1) || {
		kv_msg "'$1': ${err##*: }"
		kv_diag <"$BENCH"
		return 1
	}
	grep -q "^result: ok" "$BENCH"
}

# rows: the table's rows (lines starting with a size).
rows() {
	grep -E '^ [0-9]+ ' "$BENCH"
}

# check_bw SIZES ITERS: one row per size of SIZES, each with ITERS
# iterations, positive and consistent numbers.
check_bw() {
	local sizes=$1 iters=$2
	rows | awk -v sizes="$sizes" -v iters="$iters" '
		BEGIN { n = split(sizes, want, " ") }
		{
			row++
			if (NF != 5) { print "row " row ": " NF " fields: " $0; bad = 1; next }
			if ($1 != want[row]) { print "row " row ": size " $1 ", want " want[row]; bad = 1 }
			if ($2 != iters) { print "row " row ": " $2 " iterations, want " iters; bad = 1 }
			# MB/sec has 2 decimals: 0.00 at the smallest sizes in an
			# emulator; Mpps has 6, truncated: 0.000000 below one
			# message per second (8 MiB messages under 8 MB/sec).
			# Whichever is too small to show, the other must be positive.
			if (!($3 >= 0 && $4 >= 0 && $5 >= 0 && ($4 > 0 || $5 > 0))) {
				print "row " row ": not positive: " $0; bad = 1
			}
			if ($5 == 0 && $4 * 1048576 / $1 >= 1) { print "row " row ": rate 0 at " $4 " MB/sec"; bad = 1 }
			# The whole run is one of the stretches the peak is the best of.
			if ($3 < $4 * 0.99) { print "row " row ": peak " $3 " < average " $4; bad = 1 }
			# MB/sec = Mpps x size / 2^20, up to the truncation of both
			# (Mpps to 6 decimals: 10^-6 Mpps is size / 2^20 MB/sec).
			mb = $5 * 1000000 * $1 / 1048576
			tol = $4 * 0.01 + $1 / 1048576 + 0.02
			if (mb > $4 + tol || mb < $4 - tol) {
				print "row " row ": " $5 " Mpps x " $1 " B = " mb " MB/s, table says " $4; bad = 1
			}
		}
		END {
			if (row != n) { print row " rows, want " n; bad = 1 }
			exit bad
		}' | kv_diag
	[ "${PIPESTATUS[1]}" -eq 0 ] || { kv_diag <"$BENCH"; return 1; }
}

check_lat() {
	local sizes=$1 iters=$2
	rows | awk -v sizes="$sizes" -v iters="$iters" '
		BEGIN { n = split(sizes, want, " ") }
		{
			row++
			if (NF != 9) { print "row " row ": " NF " fields: " $0; bad = 1; next }
			if ($1 != want[row]) { print "row " row ": size " $1 ", want " want[row]; bad = 1 }
			if ($2 != iters) { print "row " row ": " $2 " iterations, want " iters; bad = 1 }
			if (!($3 > 0)) { print "row " row ": t_min not positive: " $0; bad = 1 }
			if (!($3 <= $5 && $5 <= $4 && $3 <= $6 && $6 <= $4)) {
				print "row " row ": not t_min <= t_typical, t_avg <= t_max: " $0; bad = 1
			}
			if (!($5 <= $8 && $8 <= $9 && $9 <= $4)) {
				print "row " row ": not t_typical <= 99% <= 99.9% <= t_max: " $0; bad = 1
			}
			if ($7 < 0) { print "row " row ": negative stdev"; bad = 1 }
		}
		END {
			if (row != n) { print row " rows, want " n; bad = 1 }
			exit bad
		}' | kv_diag
	[ "${PIPESTATUS[1]}" -eq 0 ] || { kv_diag <"$BENCH"; return 1; }
}

# bench TEST SIZE ITERS [OPTIONS]
bench() {
	local test=$1 size=$2 iters=$3 opts=${4:-} qps=1
	run "test=$test,size=$size,iters=$iters$opts" || return 1
	grep -q "^ Device *: rxe_lo" "$BENCH" || { kv_diag <"$BENCH"; return 1; }
	case $opts in *qps=*) qps=${opts##*qps=}; qps=${qps%%,*} ;; esac
	case $test in
	*_bw) check_bw "$size" $((iters * qps)) ;;
	*) check_lat "$size" "$iters" ;;
	esac
}

# bench_says TEST SIZE ITERS OPTIONS LINE...: bench TEST SIZE ITERS
# OPTIONS, and its header has each LINE (whole, blanks around the colon
# as the header aligns them): what the options asked for.
bench_says() {
	local l
	bench "$1" "$2" "$3" "$4" || return 1
	shift 4
	for l in "$@"; do
		grep -qE "^ ${l%%:*} *: ${l#*: }\$" "$BENCH" || { kv_msg "no '$l' in the header:"; kv_diag <"$BENCH"; return 1; }
	done
}

# inline_header TEST SIZE ITERS: a run with the default inline limit,
# which the header shows (perftest's: 220 B for WRITE, 236 B for SEND).
inline_header() {
	bench "$@" || return 1
	grep -q "^ Max inline data : 236\[B\]" "$BENCH" || { kv_diag <"$BENCH"; return 1; }
}

# A run's timeout_ms is its stall detector: the longest wait for a
# completion.  The bw tests signal one send in cq_mod (100), so 8 writes of
# 8 MiB complete at once, after 64 MiB: 13 s at the 5 MB/s rxe gives in a
# slow TCG guest.  The big runs wait up to BIG_TIMEOUT for one; a stall
# still ends them, and speed is the benchmark's business, not this test's.
BIG_TIMEOUT=",timeout_ms=120000"

sizes_all() {
	local sizes="" s=2
	while [ $s -le 8388608 ]; do sizes="$sizes $s"; s=$((s * 2)); done
	run "test=$1,sizes=all,iters=$2$BIG_TIMEOUT" || return 1
	case $1 in
	*_bw) check_bw "$sizes" "$2" ;;
	*) check_lat "$sizes" "$2" ;;
	esac
}

bidir() {
	run "test=$1,size=4096,iters=300,bidir" || return 1
	grep -q "Bidirectional" "$BENCH" || return 1
	check_bw 4096 300
}

# voluntary: the voluntary context switches of this shell's task so far,
# in VOL (read with builtins: a command substitution would fork).
voluntary() {
	local k v
	while read -r k v; do
		[ "$k" = voluntary_ctxt_switches: ] && VOL=$v
	done </proc/$$/status
}

# switches OPTIONS: a run written from this shell's task (printf is a
# builtin), its voluntary context switches in SW.
switches() {
	local before
	voluntary
	before=$VOL
	printf '%s' "$1" >"$BENCH" 2>/dev/null || { kv_msg "'$1' failed"; kv_diag <"$BENCH"; return 1; }
	voluntary
	SW=$((VOL - before))
	grep -q "^result: ok" "$BENCH"
}

# The default poll mode is adaptive: the writing task polls its CQs and
# sleeps while no completion is near, where poll=direct spins (yielding
# only when preempted, an involuntary switch). The same run must sleep
# many times more often adaptive than direct, and its sleeps on the CQs
# must be ended by completion events (the CQ armed, the driver calling
# kverbs' handler) more often than by their 10 ms timeout: with every
# request signalled (cq_mod=1), as the debug kernel can take longer than
# that for perftest's 100.
adaptive_sleeps() {
	local opts=test=write_bw,size=4096,iters=2000,cq_mod=1 direct line woken timed_out
	switches "$opts,poll=direct" || return 1
	grep -q "Polling *: direct" "$BENCH" || { kv_diag <"$BENCH"; return 1; }
	direct=$SW
	switches "$opts" || return 1
	grep -q "Polling *: adaptive" "$BENCH" || { kv_msg "the default is not adaptive"; kv_diag <"$BENCH"; return 1; }
	kv_msg "voluntary context switches: direct $direct, adaptive $SW"
	[ "$SW" -ge $((4 * direct + 50)) ] || { kv_msg "adaptive polling did not sleep"; return 1; }
	line=$(grep "CQ sleeps *:" "$BENCH") || { kv_msg "no CQ sleeps line"; kv_diag <"$BENCH"; return 1; }
	read -r woken timed_out <<<"$(sed -E 's/.*: ([0-9]+) woken by a completion, ([0-9]+) timed out.*/\1 \2/' <<<"$line")"
	kv_msg "sleeps on the CQ: $woken woken by a completion, $timed_out timed out"
	if ! [[ $woken =~ ^[0-9]+$ && $timed_out =~ ^[0-9]+$ ]]; then
		kv_msg "CQ sleeps line not understood: $line"
		return 1
	fi
	if [ "$woken" -lt 1 ] || [ "$woken" -le "$timed_out" ]; then
		kv_msg "the completion events did not wake the sleeps on the CQ"
		return 1
	fi
	check_bw 4096 2000
}

# ab TEST: the default poll mode and poll=direct taking turns in one run
# (ab=direct, two QP pairs): the header says so, and the table has a row
# for each, of the same size and number of iterations.
ab() {
	local test=$1
	run "test=$test,size=8,iters=200,ab=direct" || return 1
	grep -q "^ Polling *: adaptive\$" "$BENCH" || { kv_msg "the default is not adaptive"; kv_diag <"$BENCH"; return 1; }
	grep -qE "^ Interleaved *: poll=direct \(blocks of 20 iterations; its row second\)\$" "$BENCH" ||
		{ kv_msg "no Interleaved line in the header"; kv_diag <"$BENCH"; return 1; }
	check_lat "8 8" 200
}

# bad INPUT ERRNO-TEXT DMESG-TEXT
bad() {
	kv_write_fails "$BENCH" "$1" "$2" "rxe_lo: bench: $3" || return 1
	bench write_bw 64 100
}

kv_begin 44
kv_case setup_rxe_lo_and_load setup
for t in write_bw read_bw send_bw; do
	kv_case "bench_loopback_${t}_64" bench $t 64 1000
	kv_case "bench_loopback_${t}_65536" bench $t 65536 300
done
for t in write_lat read_lat send_lat; do
	kv_case "bench_loopback_${t}_8" bench $t 8 300
	kv_case "bench_loopback_${t}_4096" bench $t 4096 200
done
kv_case bench_loopback_atomic_lat_8 bench atomic_lat 8 300
kv_case bench_loopback_write_lat_8_not_inline bench_says write_lat 8 300 ",inline=0" "Max inline data: 0\\[B\\]"
kv_case bench_loopback_send_lat_236_inline inline_header send_lat 236 200
for t in write_lat read_lat send_lat atomic_lat; do
	kv_case "bench_loopback_${t}_8_ab_direct_a_row_each" ab $t
done
kv_case bench_loopback_write_bw_4_qps bench write_bw 4096 300 ",qps=4"
kv_case bench_loopback_write_bw_default_adaptive_sleeps_direct_spins adaptive_sleeps
kv_case bench_loopback_send_bw_poll_softirq bench_says send_bw 4096 300 ",poll=softirq" "Polling: softirq"
kv_case bench_loopback_read_bw_cq_mod_1_tx_depth_16 bench_says read_bw 1024 300 ",cq_mod=1,tx_depth=16" \
	"CQ Moderation: 1" "TX depth: 16"
kv_case bench_loopback_write_bw_bidir bidir write_bw
kv_case bench_loopback_send_bw_bidir bidir send_bw
kv_case bench_loopback_write_bw_sizes_all sizes_all write_bw 8
kv_case bench_loopback_write_lat_sizes_all sizes_all write_lat 5
for t in read_bw send_bw read_lat send_lat; do
	kv_case "bench_loopback_${t}_8388608" bench $t 8388608 5 "$BIG_TIMEOUT"
done
kv_case bad_input_bench_unknown_test bad "test=atomic_bw" "Invalid argument" "unknown test 'atomic_bw'"
kv_case bad_input_bench_atomic_lat_size_64 bad "test=atomic_lat,size=64" "Invalid argument" "atomic_lat works on 8 bytes"
kv_case bad_input_bench_missing_test bad "size=64" "Invalid argument" "test= is missing"
kv_case bad_input_bench_size_over_8mib bad "test=write_bw,size=8388609" "out of range" "size=8388609 is out of range"
kv_case bad_input_bench_buffers_over_128mib bad "test=write_bw,size=8388608,qps=5" "out of range" \
	"5 QPs of 8388608 bytes take 160 MiB of buffers, more than 128"
kv_case bad_input_bench_inline_513 bad "test=send_lat,inline=513" "out of range" "inline=513 is out of range"
kv_case bad_input_bench_qps_17 bad "test=write_bw,qps=17" "out of range" "qps=17 is out of range"
kv_case bad_input_bench_qp_timeout_32 bad "test=write_bw,qp_timeout=32" "out of range" "qp_timeout=32 is out of range"
kv_case bad_input_bench_lat_with_qps bad "test=write_lat,qps=2" "Invalid argument" "write_lat runs one QP pair"
kv_case bad_input_bench_ab_in_bw_test bad "test=write_bw,ab=direct" "Invalid argument" \
	"ab= compares poll modes in a loopback latency test only"
kv_case bad_input_bench_client_without_addr bad "test=write_bw,role=client" "Invalid argument" "role=client needs addr="
kv_end
