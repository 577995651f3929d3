#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The guest half of `make bench` (tools/bench/bench.sh): rxe on lo, the
# kverbs layer, its example, the C reference module and the limit module
# loaded, then for each test and size the implementations in turn --
# perftest, C (write_bw and write_lat only), kverbs (its default poll
# mode, adaptive), kverbs with poll=direct, and for bandwidth kverbs with
# poll=softirq and the limit (tools/bench/limit: rxe's per-byte work for
# the message, timed in the kernel) -- round after round, so that
# noise hits all alike, in the reverse order every other round. Each run prints one line:
#
#   kverbs-bench: row TEST IMPL QPS SIZE ROUND <the table row's fields>
#   kverbs-bench: limit TEST QPS SIZE ROUND <the limit module's line>
#   kverbs-bench: cqsleeps TEST QPS SIZE ROUND <woken> <timed out> (after
#                 a kverbs row: how the run's sleeps on its CQs ended)
#
# (or "kverbs-bench: fail TEST IMPL QPS SIZE ROUND why"). /kverbs/bench.conf
# sets ROUNDS, BW_SIZES, LAT_SIZES, QPS_LIST, TESTS, KV_OPTS, PROFILE, AB,
# NVME (1: the NVMe runs of tools/bench/guest-nvme.sh follow, their lines
# "kverbs-bench: nvme ...").
#
# PROFILE="TEST:SIZE ..." then profiles one longer run (PROFILE_ITERS
# iterations, 1 QP) of each implementation of TEST at SIZE: perf records
# both CPUs (cpu-clock, call graphs) for the run, and perf report's top
# lines by task and by symbol follow its row:
#
#   kverbs-bench: profiled TEST IMPL 1 SIZE profile <the table row's fields>
#   kverbs-bench: profile TEST SIZE IMPL comm|sym <a line of perf report>
#
# INV_REQ_LOOPS=N then loops the configuration that once ended with
# IB_WC_REM_INV_REQ_ERR: write_bw, 64 KiB, 8 QPs, 300 iterations, the QPs'
# ACK timeout INV_REQ_TIMEOUT (default 8: 1 ms), with perftest, C, kverbs
# and kverbs poll=softirq, a line per run with the statuses rxe logged:
#
#   kverbs-bench: invreq IMPL LOOP ok|failed statuses=S,S,...

set -u

ROUNDS=3
TESTS="write_bw read_bw send_bw write_lat read_lat send_lat atomic_lat"
BW_SIZES="2 64 1024 4096 65536 1048576 8388608"
LAT_SIZES="2 64 1024 4096 65536"
QPS_LIST="1 2 4 8"
# Options added to every kverbs run (e.g. ",poll=softirq").
KV_OPTS=""
INV_REQ_LOOPS=0
# The poll mode a latency test's kverbs_ab run interleaves with the
# default ("none": no such run).
AB=direct
INV_REQ_TIMEOUT=8
PROFILE=""
PROFILE_ITERS=100000
# NVME=1: then fio on kverbs_nvme and on nvme-rdma (tools/bench/guest-nvme.sh,
# with NVME_RUNTIME, NVME_TESTS, NVME_IMPLS if set).
NVME=0
# shellcheck source=/dev/null
[ -f /kverbs/bench.conf ] && . /kverbs/bench.conf

DEV=rxe_lo
KV=/sys/kernel/debug/kverbs_example/$DEV/bench
CB=/sys/kernel/debug/kverbs_cbench/bench
LM=/sys/kernel/debug/kverbs_limit/limit

say() { echo "kverbs-bench: $*"; }

# perftest's iterations: its defaults, fewer for the largest messages so
# that a run stays within seconds in an emulator.
iters_of() {
	case $1 in
	*_lat) echo 1000 ;;
	*) if [ "$2" -gt 1048576 ]; then echo 50
	elif [ "$2" -gt 65536 ]; then echo 500
	else echo 5000; fi ;;
	esac
}

# The RoCE v2 GID of 127.0.0.1, for perftest's -x (kverbs and the C module
# pick it themselves).
gid_index() {
	local p=/sys/class/infiniband/$DEV/ports/1 i
	for i in $(seq 0 15); do
		[ "$(cat "$p/gids/$i" 2>/dev/null)" = "0000:0000:0000:0000:0000:ffff:7f00:0001" ] || continue
		[ "$(cat "$p/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] && { echo "$i"; return; }
	done
	echo 1
}

# rows: the table rows of stdin (lines of numbers, size first); row: the
# first.
rows() {
	grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' | tr -s ' \t' ' ' | sed 's/^ //; s/ $//'
}
row() {
	rows | head -n 1
}

run_perftest() {
	local test=$1 qps=$2 size=$3 iters=$4 out i
	local args=(-d "$DEV" -x "$GID" -s "$size" -n "$iters" -F)
	[ "$qps" -gt 1 ] && args+=(-q "$qps")
	[ -n "${PT_TIMEOUT:-}" ] && args+=(-u "$PT_TIMEOUT")
	# Bounded: a side whose peer failed must not hang the run.
	timeout 300 "ib_$test" "${args[@]}" >/tmp/pt-server.log 2>&1 &
	local srv=$!
	for i in $(seq 1 50); do
		out=$(timeout 300 "ib_$test" "${args[@]}" 127.0.0.1 2>&1) && break
		case $out in *"Couldn't connect"* | *"Unable to open"* | *"connect"*) sleep 0.2 ;; *) break ;; esac
	done
	wait "$srv"
	echo "$out" | row
}

run_kernel() {
	local file=$1 opts=$2
	if ! printf '%s' "$opts" >"$file" 2>/tmp/bench.err; then
		cat "$file" >&2
		return 1
	fi
	row <"$file"
}

one() {
	local test=$1 impl=$2 qps=$3 size=$4 round=$5 iters r r2 sleeps
	iters=${ITERS:-$(iters_of "$test" "$size")}
	if [ "$impl" = limit ]; then
		if printf 'dev=%s,size=%s' "$DEV" "$size" >"$LM" && r=$(cat "$LM") && [ -n "$r" ]; then
			say "limit $test $qps $size $round $r"
		else
			say "fail $test limit $qps $size $round (no limit line)"
		fi
		return
	fi
	case $impl in
	perftest) r=$(run_perftest "$test" "$qps" "$size" "$iters") ;;
	c) r=$(run_kernel "$CB" "dev=$DEV,test=$test,size=$size,iters=$iters,qps=$qps") ;;
	kverbs) r=$(run_kernel "$KV" "test=$test,size=$size,iters=$iters,qps=$qps$KV_OPTS") ;;
	kverbs_direct) r=$(run_kernel "$KV" "test=$test,size=$size,iters=$iters,qps=$qps,poll=direct") ;;
	kverbs_softirq) r=$(run_kernel "$KV" "test=$test,size=$size,iters=$iters,qps=$qps,poll=softirq") ;;
	kverbs_ab)
		# Two rows: the default mode's, then poll=$AB's, interleaved.
		r=$(run_kernel "$KV" "test=$test,size=$size,iters=$iters,qps=$qps,ab=$AB$KV_OPTS")
		r2=$(rows <"$KV" | sed -n 2p) ;;
	esac
	if [ -n "$r" ]; then
		say "row $test $impl $qps $size $round $r"
		if [ "$impl" = kverbs_ab ]; then
			if [ -n "$r2" ]; then
				say "row $test kverbs_ab_$AB $qps $size $round $r2"
			else
				say "fail $test kverbs_ab_$AB $qps $size $round (no second row)"
			fi
		fi
		# How its sleeps on the CQs ended: woken by a completion, timed out.
		[ "$impl" = kverbs ] && sleeps=$(sed -n 's/.*CQ sleeps *: \([0-9]*\) woken by a completion, \([0-9]*\) timed out.*/\1 \2/p' "$KV") &&
			[ -n "$sleeps" ] && say "cqsleeps $test $qps $size $round $sleeps"
	else
		say "fail $test $impl $qps $size $round (no result row)"
	fi
}

# The implementations a test runs with: perftest, C (write_bw and
# write_lat), kverbs in its default poll mode and with poll=direct, for
# bandwidth poll=softirq and the limit, and for latency (unless
# AB=none) kverbs_ab: one run of two QP pairs taking turns, the default mode
# and poll=$AB (rows kverbs_ab and kverbs_ab_$AB).
impls_of() {
	local ab=${AB:+ kverbs_ab}
	[ "$AB" = none ] && ab=""
	case $1 in
	write_bw) echo "perftest c kverbs kverbs_direct kverbs_softirq limit" ;;
	write_lat) echo "perftest c kverbs kverbs_direct$ab" ;;
	*_bw) echo "perftest kverbs kverbs_direct kverbs_softirq limit" ;;
	*) echo "perftest kverbs kverbs_direct$ab" ;;
	esac
}

rdma link add "$DEV" type rxe netdev lo || exit 1
insmod /kverbs/kverbs.ko || exit 1
insmod /kverbs/kverbs_example.ko || exit 1
insmod /kverbs/kverbs_cbench.ko || exit 1
insmod /kverbs/kverbs_limit.ko || exit 1
GID=$(gid_index)
say "start rounds=$ROUNDS gid=$GID kernel=$(uname -r) cpus=$(nproc)" \
	"clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
# What the kernel said of its TSC (under TCG it is not a stable clocksource).
dmesg | grep -i -e 'tsc' -e 'sched_clock' | head -n 8 | sed 's/^/kverbs-bench: clock /'

# ROUND, then the implementations: in their order for an odd round, in
# the reverse order for an even one.
in_order() {
	local round=$1 out=""
	shift
	if [ $((round % 2)) -eq 1 ]; then
		echo "$*"
		return
	fi
	for impl in "$@"; do out="$impl $out"; done
	echo "$out"
}

for test in $TESTS; do
	# kverbs in its default poll mode (adaptive: the thread spins a
	# while, then sleeps until the CQ's next completion), busy polling (poll=direct) and,
	# for bandwidth, sleeping on a CQ the core polls (poll=softirq): on two
	# vCPUs a busy-polling thread takes one of the two CPUs rxe's
	# requester, responder and completer need.
	read -ra impls <<<"$(impls_of "$test")"
	# ib_atomic_lat's fetch-and-add works on 8 bytes.
	case $test in atomic_lat) sizes=8 ;; *_lat) sizes=$LAT_SIZES ;; *) sizes=$BW_SIZES ;; esac
	for size in $sizes; do
		for round in $(seq 1 "$ROUNDS"); do
			# Even rounds take the implementations in the reverse order,
			# so that none always runs first or right after another.
			for impl in $(in_order "$round" "${impls[@]}"); do
				# The C reference maps one contiguous buffer: 1 MiB at most.
				[ "$impl" = c ] && [ "$size" -gt 1048576 ] && continue
				one "$test" "$impl" 1 "$size" "$round"
			done
		done
	done
done
# Scaling: aggregate bandwidth as QPs are added.
for qps in $QPS_LIST; do
	for round in $(seq 1 "$ROUNDS"); do
		for impl in $(in_order "$round" perftest c kverbs kverbs_direct kverbs_softirq limit); do
			one write_bw "$impl" "$qps" 65536 "$round"
		done
	done
done

# Where the CPUs go: perf record of the whole guest during one run.
# perf report's "Overhead" of the task "swapper" is the CPUs' idle time.
profile() {
	local test=$1 size=$2 impl=$3 rec
	perf record -a -g -e cpu-clock -F 997 -o /tmp/perf.data >/tmp/perf-record.log 2>&1 &
	rec=$!
	sleep 2
	ITERS=$PROFILE_ITERS one "$test" "$impl" 1 "$size" profile | sed 's/^kverbs-bench: row /kverbs-bench: profiled /'
	# perf record exits non-zero on the SIGINT that ends it.
	kill -INT "$rec"
	wait "$rec"
	grep -q "Captured and wrote" /tmp/perf-record.log ||
		{ say "fail $test $impl 1 $size profile (perf record: $(tail -n 1 /tmp/perf-record.log))"; return; }
	perf report -i /tmp/perf.data --stdio --no-children -g none --sort comm --percent-limit 1 2>/dev/null |
		grep -v -e '^#' -e '^$' | head -n 12 | sed "s/^/kverbs-bench: profile $test $size $impl comm /"
	perf report -i /tmp/perf.data --stdio --no-children -g none --sort comm,dso,sym --percent-limit 0.7 2>/dev/null |
		grep -v -e '^#' -e '^$' | head -n 40 | sed "s/^/kverbs-bench: profile $test $size $impl sym /"
}
for ts in $PROFILE; do
	test=${ts%%:*} size=${ts#*:}
	command -v perf >/dev/null || { say "fail $test profile 1 $size profile (no perf in the guest)"; break; }
	for impl in $(impls_of "$test"); do
		[ "$impl" = limit ] && continue
		profile "$test" "$size" "$impl"
	done
done

# The 8-QP remote invalid request error (Documentation/kverbs.rst, "Known
# rxe problems"): whether the row came, and the completion statuses rxe
# logged ("make_send_cqe: non-flush error status = N") during the run.
invreq() {
	local impl=$1 loop=$2 t=$INV_REQ_TIMEOUT before r st logged
	local opts="test=write_bw,size=65536,iters=300,qps=8,qp_timeout=$t"
	before=$(dmesg | wc -l)
	case $impl in
	perftest) r=$(PT_TIMEOUT=$t run_perftest write_bw 8 65536 300) ;;
	c) r=$(run_kernel "$CB" "dev=$DEV,$opts") ;;
	kverbs) r=$(run_kernel "$KV" "$opts") ;;
	kverbs_softirq) r=$(run_kernel "$KV" "$opts,poll=softirq") ;;
	esac
	logged=$(dmesg | tail -n +"$((before + 1))")
	st=$(echo "$logged" | sed -n 's/.*non-flush error status = \([0-9]*\).*/\1/p' |
		sort -n | uniq | paste -sd, -)
	say "invreq $impl $loop $([ -n "$r" ] && echo ok || echo failed) statuses=${st:-none}"
	# The instrumented rxe (make bench KVERBS_BENCH_FLAVOR=trace): what it
	# logged during the run, its time stamp stripped.
	echo "$logged" | sed -n 's/^.*rxe-trace: /trace /p' |
		while IFS= read -r l; do say "invreq-$impl-$loop $l"; done
}
for loop in $(seq 1 "$INV_REQ_LOOPS"); do
	for impl in perftest c kverbs kverbs_softirq; do
		invreq "$impl" "$loop"
	done
done
if [ "$NVME" = 1 ]; then
	ROUNDS=$ROUNDS NVME_RUNTIME=${NVME_RUNTIME:-} NVME_TESTS=${NVME_TESTS:-} NVME_IMPLS=${NVME_IMPLS:-} \
		/kselftest/kverbs/bench-nvme.sh
fi
say "end"
