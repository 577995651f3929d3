#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Soundness of the safe layer: what safe code must not be able to do to the
# kernel. The example module's in-kernel self-test
# (samples/kverbs_example/selftest.rs, safe Rust) hands the layer objects of two devices or two PDs, ports the device
# does not have, CQs too small, work request ids of another QP or already
# released, remote write without local write, two QPs on one rdma_cm ID:
# each must be refused with its errno, with no kernel report. Then device
# removal ends a TCP connect that would wait a
# minute, and a removal under a stream of writers is not held up by a run
# that starts after it began.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

ST=$KV_DEBUGFS/selftest
ENV="rxe_lo rxe_dummy 169.254.1.1"

setup() {
	kv_dummy_up || return 1
	kv_rxe_add rxe_lo lo || return 1
	kv_rxe_add rxe_dummy dummy0 || return 1
	kv_load
}

# selftest CASE: runs one case of the self-test module.
selftest() {
	local out
	printf '%s' "$ENV $1" >"$ST" || { kv_msg "run $1: write failed"; return 1; }
	out=$(cat "$ST")
	echo "$out" | kv_diag
	echo "$out" | grep -qx "ok 1 $1"
}

# The MAC the self-test resolved for rxe_dummy's own address is dummy0's.
selftest_dmac() {
	local want
	selftest ah_resolves_roce_dmac || return 1
	want=$(cat /sys/class/net/dummy0/address)
	grep -qx "# dmac $want" "$ST" || { kv_msg "want dmac $want"; return 1; }
}

selftest_bad_input() {
	kv_write_fails "$ST" "rxe_lo" "Invalid argument" "want 'DEVICE_A DEVICE_B IPV4_OF_B" || return 1
	kv_write_fails "$ST" "rxe_lo rxe_lo 169.254.1.1" "Invalid argument" "the two devices must differ" || return 1
	kv_write_fails "$ST" "rxe_lo nosuch 169.254.1.1" "No such device" "no device 'rxe_lo' or 'nosuch'" || return 1
	kv_write_fails "$ST" "rxe_lo rxe_dummy 169.254.1" "Invalid argument" "is not an IPv4 address" || return 1
	kv_write_fails "$ST" "$ENV no_such_case" "No such file or directory" "no case 'no_such_case'"
}

# removed_within_5s DEV [PID]: removes DEV (and waits for PID, the run the
# removal must end); says how long that took, and fails if the removal
# failed or took 5 s or more.
removed_within_5s() {
	local t0 t1 r=0
	t0=$(cut -d' ' -f1 /proc/uptime)
	kv_rxe_del "$1" || r=1
	[ -n "${2:-}" ] && wait "$2"
	t1=$(cut -d' ' -f1 /proc/uptime)
	kv_msg "removal took $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
	[ $r = 0 ] && awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 5) }'
}

# A TCP connect to an address on dummy0 (which drops every packet) would
# wait its whole minute; removing the device must end it within a second
# or two, with ECANCELED.
removal_ends_tcp_connect() {
	local rc=$KV_DEBUGFS/rxe_dummy/rc r=0
	bash -c "printf '%s' 'role=client,addr=169.254.1.2,timeout_ms=60000' >$rc" 2>/tmp/conn.err &
	local pid=$!
	kv_wait grep -q "^status: running" "$rc" || { kv_msg "the run did not start"; return 1; }
	sleep 1
	removed_within_5s rxe_dummy "$pid" || r=1
	kv_diag </tmp/conn.err
	grep -q "Operation canceled" /tmp/conn.err || return 1
	return $r
}

# Writers keep starting runs (a server waiting 20 s for its client) on
# rxe_dummy while it is removed: a run that starts after the removal began
# would hold it up for 20 s; it must be refused (ENODEV) instead.
removal_under_writers_bounded() {
	local rc i r=0
	kv_rxe_add rxe_dummy dummy0 || return 1
	rc=$KV_DEBUGFS/rxe_dummy/rc
	kv_wait test -e "$rc" || return 1
	touch /tmp/writers_run
	for i in 1 2 3; do
		(
			while [ -e /tmp/writers_run ] && [ -e "$rc" ]; do
				printf '%s' "role=server,port=$((19900 + i)),timeout_ms=20000" >"$rc" 2>/dev/null
			done
		) &
	done
	kv_wait grep -q "^status: running" "$rc" || { kv_msg "no run started"; rm -f /tmp/writers_run; return 1; }
	sleep 1
	removed_within_5s rxe_dummy || r=1
	rm -f /tmp/writers_run
	wait
	return $r
}

# A drain that does not complete (made to fail by fault injection, as one
# that times out): the QP is destroyed, its slots are leaked on purpose
# (kmemleak is told), its buffers released; no kernel report, and the
# device can still be removed at once.
drain_failure_leaks_slots_only() {
	local f=$KV_DEBUGFS/fail_drain r=0
	[ -d "$f" ] || { kv_msg "no $f"; return 1; }
	echo 0 >"$f/verbose"
	echo 1 >"$f/times"
	echo 100 >"$f/probability"
	printf '%s' "role=loopback,size=4096,validate" >"$KV_DEBUGFS/rxe_lo/rc" || r=1
	echo 0 >"$f/probability"
	kv_diag <"$KV_DEBUGFS/rxe_lo/rc"
	[ $r = 0 ] || { kv_msg "the run failed"; return 1; }
	kv_logged "drain: failed by fault injection" || { kv_msg "no injected failure"; return 1; }
	kv_logged "was not drained: its [0-9]* slots are leaked" || return 1
	removed_within_5s rxe_lo
}

# The self-test's cases, as it lists them before its first run.
kv_cleanup
cases=$(kv_load 2>/dev/null && sed -n 's/^case //p' "$ST")
kv_cleanup
n=$(echo "$cases" | wc -w)

kv_begin $((n + 6))
kv_case setup_rxe_lo_rxe_dummy_and_load setup
for c in $cases; do
	case $c in
	ah_resolves_roce_dmac) kv_case "selftest_$c" selftest_dmac ;;
	*) kv_case "selftest_$c" selftest "$c" ;;
	esac
done
kv_case bad_input_selftest_run selftest_bad_input
kv_case removal_ends_tcp_connect_with_ecanceled removal_ends_tcp_connect
kv_case removal_under_writers_bounded removal_under_writers_bounded
kv_case drain_failure_leaks_slots_only drain_failure_leaks_slots_only
kv_end
