#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The RC example in one kernel (role=loopback): RDMA_RC_example's flow
# between two QPs of one rxe device, every payload validated byte for byte,
# in every CQ polling mode; the control file's answers to bad input; a run
# interrupted by a signal, cancelled by device removal, or racing a second
# run or rmmod.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

RC=$KV_DEBUGFS/rxe_lo/rc
STATS=$KV_DEBUGFS/rxe_lo/stats

setup() {
	kv_dummy_up && kv_rxe_add rxe_lo lo && kv_rxe_add rxe_dummy dummy0 && kv_load
}

# rc_write FILE STRING: writes STRING in one write(2); prints the error.
rc_write() {
	local err
	err=$( (printf '%s' "$2" >"$1") 2>&1)
	local r=$?
	[ -n "$err" ] && echo "${err##*: }"
	return $r
}

stat_of() {
	sed -n "s/^$1: //p" "$STATS"
}

# loopback SIZE [OPTIONS]: one validated run of SIZE bytes.
loopback() {
	local size=$1 opts=${2:-} before after
	before=$(stat_of write_bytes)
	if ! rc_write "$RC" "role=loopback,size=$size,validate$opts"; then
		kv_msg "run failed; report:"
		kv_diag <"$RC"
		return 1
	fi
	grep -q "^result: ok" "$RC" || return 1
	grep -q "^validate: ok" "$RC" || { kv_diag <"$RC"; return 1; }
	for step in "SEND operation: ok" "RDMA read operation: ok" "RDMA write operation: ok" \
		"invalidate: ok" "resources_destroy: ok"; do
		grep -q "^$step" "$RC" || { kv_msg "missing: $step"; kv_diag <"$RC"; return 1; }
	done
	after=$(stat_of write_bytes)
	local iters=1
	case "$opts" in *iters=*) iters=${opts##*iters=}; iters=${iters%%,*} ;; esac
	[ $((after - before)) -eq $((size * iters)) ] ||
		{ kv_msg "write_bytes went from $before to $after"; return 1; }
}

# loopback_says SIZE OPTIONS PATTERN...: loopback SIZE OPTIONS, and its
# report has a line beginning with each PATTERN (the poll mode and the MTU
# the run used, as it prints them).
loopback_says() {
	local size=$1 opts=$2 p
	shift 2
	loopback "$size" "$opts" || return 1
	for p in "$@"; do
		grep -q "^$p" "$RC" || { kv_msg "no '$p' in the report:"; kv_diag <"$RC"; return 1; }
	done
}
loopback_poll() {
	loopback_says 4096 ",poll=$1" "config: role=loopback size=4096 iters=1 mtu=256 poll=$1 " \
		"resources_create: ok: pd, 2 cq ($1 polling)"
}
loopback_mtu() {
	loopback_says "$2" ",mtu=$1,iters=20" "config: role=loopback size=$2 iters=20 mtu=$1 poll=softirq " \
		"connect_qp: ok: both QPs INIT -> RTR -> RTS, path MTU $1\$"
}

# Atomics: the client's fetch-and-adds and compare-and-swaps on the
# server's buffer (registered with remote atomic access only for them)
# return the old values the kernel expects; the server's 8 bytes end as
# the swapped value.
loopback_atomics() {
	loopback 4096 ",atomics=$1" &&
		grep -q "^atomics: ok: $1 fetch-and-adds and 2 compare-and-swaps returned the expected old values" "$RC" &&
		grep -q "^atomics: ok: the server's 8 bytes hold 'kverbs!!'" "$RC"
}

# SEND_WITH_IMM and RDMA_WRITE_WITH_IMM: the receiver's completions carry
# the immediate data (checked in the kernel against what was sent).
loopback_imm() {
	loopback 4096 ",imm,iters=3" && grep -q "^imm: ok" "$RC"
}

rdma_rc_example_messages() {
	rc_write "$RC" "role=loopback validate" || return 1
	kv_diag <"$RC"
	grep -qx "Message is: 'SEND operation      '" "$RC" &&
		grep -qx "Contents of server's buffer: 'RDMA read operation '" "$RC" &&
		grep -qx "Contents of server buffer: 'RDMA write operation'" "$RC"
}

# bad INPUT ERRNO-TEXT DMESG-TEXT: refused with that error and logged.
bad() {
	local out
	out=$(rc_write "$RC" "$1") && { kv_msg "'$1' was accepted"; return 1; }
	[ "$out" = "$2" ] || { kv_msg "'$1': '$out', want '$2'"; return 1; }
	kv_logged "rxe_lo: rc: $3" || { kv_msg "no dmesg line '$3'"; return 1; }
	# Still usable.
	loopback 64
}

bad_garbage() {
	local out
	out=$( (printf 'role=loopback\xff\xfe\x00\x01' >"$RC") 2>&1) && return 1
	grep -q "Invalid argument" <<<"$out" || { kv_msg "$out"; return 1; }
	kv_logged "rxe_lo: rc: the control string is not text" || return 1
	loopback 64
}

# One write(2) of 5000 bytes (dd; a pipe would split it).
bad_too_long() {
	local out
	head -c 5000 /dev/zero | tr '\0' 'a' >/tmp/big
	out=$(dd if=/tmp/big of="$RC" bs=5000 count=1 2>&1) && { kv_msg "accepted: $out"; return 1; }
	grep -q "Invalid argument" <<<"$out" || { kv_msg "$out"; return 1; }
	kv_logged "write of 5000 bytes refused" || { kv_msg "not logged"; return 1; }
	loopback 64
}

# A long run in the background on device $1: its pid in $LONG_PID.
# (Each completion waited for at most 20 s: with 2 s, in a guest of one
# vCPU, the run timed out while `rdma link del` held the CPU, before the
# removal could cancel it; 2026-11-26.)
long_run() {
	(printf 'role=loopback,size=65536,iters=1000000,timeout_ms=20000' >"$KV_DEBUGFS/$1/rc") \
		2>/tmp/long_run.err &
	LONG_PID=$!
	kv_wait grep -q "^status: running" "$KV_DEBUGFS/$1/rc"
}

second_run_busy() {
	local out r=0
	long_run rxe_lo
	out=$(rc_write "$RC" "role=loopback,size=64") && { kv_msg "second run accepted"; r=1; }
	[ "$out" = "Device or resource busy" ] || { kv_msg "second run: '$out'"; r=1; }
	kill -TERM $LONG_PID
	wait $LONG_PID
	grep -q "^result: error -4 " "$RC" || { kv_msg "interrupted run:"; kv_diag <"$RC"; r=1; }
	loopback 64 || r=1
	return $r
}

# On rxe_lo: a loopback run on an rxe over another netdev sends its packets
# through lo, where 6.12's rxe_lo drops them through a path that crashes
# (see Documentation/kverbs.rst, "Known rxe problems").
link_del_cancels_run() {
	local r=0
	long_run rxe_lo
	kv_rxe_del rxe_lo || r=1
	wait $LONG_PID && { kv_msg "the run succeeded"; r=1; }
	kv_msg "writer: $(cat /tmp/long_run.err)"
	grep -q "Operation canceled" /tmp/long_run.err || r=1
	kv_logged "rxe_lo: rc: run failed: error -125" || r=1
	[ ! -e "$KV_DEBUGFS/rxe_lo" ] || r=1
	kv_rxe_add rxe_lo lo || r=1
	loopback 4096 || r=1
	return $r
}

rmmod_refused_during_run() {
	local r=0
	long_run rxe_lo
	kv_unload 2>/dev/null && { kv_msg "rmmod succeeded during a run"; r=1; }
	kill -TERM $LONG_PID
	wait $LONG_PID
	kv_unload || r=1
	kv_load || r=1
	return $r
}

kv_begin 31
kv_case setup_rxe_lo_rxe_dummy_and_load setup
kv_case rc_loopback_rdma_rc_example_messages rdma_rc_example_messages
kv_case rc_loopback_send_read_write_1 loopback 1
kv_case rc_loopback_send_read_write_64 loopback 64
kv_case rc_loopback_send_read_write_4096 loopback 4096
kv_case rc_loopback_send_read_write_65536 loopback 65536
# timeout_ms bounds each wait for a completion: a stall detector. 1 MiB in
# 4096 packets of 256 bytes took 4-5 s for its SEND alone on the KASAN
# kernel in a slow TCG guest (CI: "SEND: no completion", 5 s default).
kv_case rc_loopback_send_read_write_1048576 loopback 1048576 ",timeout_ms=30000"
kv_case rc_loopback_send_read_write_4_chunks_3145729 loopback 3145729 ",mtu=4096,timeout_ms=30000"
kv_case rc_loopback_send_read_write_8_chunks_8388608 loopback 8388608 ",mtu=4096,timeout_ms=30000"
kv_case rc_loopback_poll_direct_4096 loopback_poll direct
kv_case rc_loopback_poll_adaptive_4096 loopback_poll adaptive
kv_case rc_loopback_poll_workqueue_4096 loopback_poll workqueue
kv_case rc_loopback_mtu_4096_iters_20 loopback_mtu 4096 65536
kv_case rc_loopback_mtu_1024_iters_20 loopback_mtu 1024 5000
kv_case rc_loopback_send_and_write_with_imm loopback_imm
kv_case rc_loopback_atomics_fetch_add_and_cmp_swap_100 loopback_atomics 100
kv_case bad_input_rc_atomics_size_under_8 bad "role=loopback,size=4,atomics=1" "Invalid argument" "atomics needs role=loopback, server or client and size >= 8"
kv_case bad_input_rc_unknown_key bad "role=loopback,colour=blue" "Invalid argument" "unknown key 'colour'"
kv_case bad_input_rc_size_zero bad "role=loopback,size=0" "Numerical result out of range" "size=0 is out of range"
kv_case bad_input_rc_size_over_8mib bad "role=loopback,size=8388609" "Numerical result out of range" "size=8388609 is out of range"
kv_case bad_input_rc_mtu_not_a_power bad "role=loopback,mtu=1000" "Invalid argument" "mtu 1000 is not"
kv_case bad_input_rc_missing_role bad "size=64" "Invalid argument" "role= is missing"
kv_case bad_input_rc_unknown_role bad "role=proxy" "Invalid argument" "unknown role 'proxy'"
kv_case bad_input_rc_not_a_number bad "role=loopback,iters=ten" "Invalid argument" "iters: 'ten' is not a number"
kv_case bad_input_rc_gid_idx_empty_entry bad "role=loopback,gid_idx=200" "No data available" "gid_idx 200 is not a valid GID"
kv_case bad_input_rc_garbage_bytes bad_garbage
kv_case bad_input_rc_write_too_long bad_too_long
kv_case rc_second_run_busy_then_signal_ends_first second_run_busy
kv_case rc_rdma_link_del_cancels_run link_del_cancels_run
kv_case rc_rmmod_refused_during_run rmmod_refused_during_run
kv_end
