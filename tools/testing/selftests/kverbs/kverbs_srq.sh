#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The SRQ example (the manual's srq.c over rdma_cm): the kernel module and
# tools/srq_peer (the same flow on librdmacm) are each other's peer over rxe
# on dummy0, both directions; the server's QPs share one SRQ and each
# completion names its QP; the armed SRQ limit raises its event; bad input
# and removal during a run.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

ADDR=169.254.1.1
SRQ=$KV_DEBUGFS/rxe_dummy/srq
EV=$KV_DEBUGFS/rxe_dummy/events

setup() {
	kv_dummy_up && kv_rxe_add rxe_dummy dummy0 && kv_load
}

# kernel_server OPTS PEER_OPTS PER_QP [QPS]: the kernel serves, srq_peer
# sends; each of the QPS (default 4) QPs got PER_QP messages.
kernel_server() {
	local opts=$1 peer_opts=$2 per_qp=$3 qps=${4:-4} out r=0
	bash -c "printf '%s' 'role=server,addr=$ADDR,timeout_ms=20000,$opts' >$SRQ" 2>/tmp/run.err &
	local pid=$!
	kv_wait grep -q "^status: running" "$SRQ"
	for _ in {1..20}; do
		# shellcheck disable=SC2086 # the options are words
		out=$(srq_peer $peer_opts $ADDR 2>&1) && break
		sleep 0.3
	done
	echo "$out" | kv_diag
	wait $pid || { kv_msg "kernel server: $(cat /tmp/run.err)"; r=1; }
	kv_diag <"$SRQ"
	grep -q "SENDs of .* each acknowledged" <<<"$out" || r=1
	grep -q "^srq: ok: .* through one SRQ in .* every sequence number once" "$SRQ" || r=1
	[ "$(grep -c "^qp 0x[0-9a-f]*: $per_qp receives" "$SRQ")" = "$qps" ] ||
		{ kv_msg "not $per_qp receives on each of $qps QPs"; r=1; }
	grep -q "^result: ok" "$SRQ" || r=1
	return $r
}

kernel_client() {
	local r=0
	srq_peer -q 4 -w 16 -c 100 -s 4096 >/tmp/peer.out 2>&1 &
	local peer=$!
	sleep 0.5
	for _ in {1..50}; do
		printf '%s' "role=client,addr=$ADDR,qps=4,max_wr=16,count=100,size=4096,timeout_ms=20000" >"$SRQ" 2>/tmp/run.err && break
		grep -q "Connection refused" /tmp/run.err || break
		sleep 0.2
	done
	wait $peer || { kv_msg "srq_peer server failed"; r=1; }
	kv_diag </tmp/peer.out
	kv_diag <"$SRQ"
	grep -q "^result: ok" "$SRQ" || { kv_msg "kernel client: $(cat /tmp/run.err)"; r=1; }
	grep -q "^srq: ok: 100 SENDs of 4096 bytes over 4 QPs in 7 rounds, each acknowledged" "$SRQ" || r=1
	[ "$(grep -c "^qp 0x[0-9a-f]*: 25 receives" /tmp/peer.out)" = 4 ] || r=1
	grep -q "every sequence number once" /tmp/peer.out || r=1
	return $r
}

# 64 messages, max_wr 16: 4 rounds, the limit (4) armed for each.
limit_event() {
	local before r=0
	before=$(grep -c "srq: SRQ limit reached" "$EV")
	kernel_server "qps=4,max_wr=16,count=64,size=256,srq_limit=4" "-q 4 -w 16 -c 64 -s 256" 16 || r=1
	grep -qx "srq limit events: 4" "$SRQ" || r=1
	[ "$(grep -c "srq: SRQ limit reached" "$EV")" = $((before + 4)) ] || { kv_diag <"$EV"; r=1; }
	return $r
}

# Each server QP, when it goes (ERR at the end of the run), stops taking
# from the SRQ: rxe raises IB_EVENT_QP_LAST_WQE_REACHED on it (each time
# its responder flushes, so once or more), which the QP's event handler
# puts in events, with its QP number.
last_wqe_events() {
	local qpns q r=0
	kernel_server "qps=4,max_wr=16,count=40,size=512" "-q 4 -w 16 -c 40 -s 512" 10 || r=1
	qpns=$(sed -n 's/^rdma_cm: connection [0-9] accepted: qp \(0x[0-9a-f]*\)$/\1/p' "$SRQ")
	for q in $qpns; do
		kv_wait grep -q "qp $q: last WQE reached" "$EV" || { kv_msg "no event for qp $q"; r=1; }
	done
	[ "$(echo "$qpns" | wc -w)" = 4 ] || r=1
	kv_diag <"$EV"
	return $r
}

bad() {
	kv_write_fails "$SRQ" "$1" "$2" "$3"
}

# A server waiting for its connections: the device goes, the run ends
# with ECANCELED; the device comes back and a run passes.
link_del_cancels_waiting_server() {
	local r=0
	bash -c "printf '%s' 'role=server,addr=$ADDR,timeout_ms=60000' >$SRQ" 2>/tmp/run.err &
	local pid=$!
	kv_wait grep -q "^status: running" "$SRQ" || r=1
	sleep 0.5
	kv_rxe_del rxe_dummy || r=1
	wait $pid && { kv_msg "the run succeeded"; r=1; }
	kv_msg "writer: $(cat /tmp/run.err)"
	grep -q "Operation canceled" /tmp/run.err || r=1
	kv_rxe_add rxe_dummy dummy0 || r=1
	kv_wait [ -e "$SRQ" ] || r=1
	kernel_server "qps=2,max_wr=8,count=10,size=64" "-q 2 -w 8 -c 10 -s 64" 5 2 ||
		{ kv_msg "the server after the device came back failed"; r=1; }
	return $r
}

kv_begin 13
kv_case setup_rxe_dummy_and_load setup
kv_case srq_kernel_server_userspace_client_4_qps_4096 kernel_server "qps=4,max_wr=16,count=100,size=4096" "-q 4 -w 16 -c 100 -s 4096" 25
kv_case srq_kernel_server_userspace_client_defaults_100000 kernel_server "count=100" "" 25
kv_case srq_userspace_server_kernel_client_4_qps_4096 kernel_client
kv_case srq_limit_event_each_round_when_armed limit_event
kv_case srq_server_qps_raise_last_wqe_reached_events last_wqe_events
kv_case bad_input_srq_unknown_key bad "role=server,colour=blue" "Invalid argument" "srq: unknown key 'colour'"
kv_case bad_input_srq_client_without_addr bad "role=client" "Invalid argument" "srq: role=client needs addr="
kv_case bad_input_srq_buffer_over_16mib bad "role=server,max_wr=64,size=1048576" "Numerical result out of range" "srq: max_wr x size"
kv_case bad_input_srq_limit_not_below_max_wr bad "role=server,max_wr=8,srq_limit=8" "Numerical result out of range" "srq_limit=8 must be below max_wr=8"
kv_case bad_input_srq_qps_17 bad "role=server,qps=17" "Numerical result out of range" "qps=17 is out of range"
kv_case srq_rdma_link_del_cancels_waiting_server link_del_cancels_waiting_server
kv_end
