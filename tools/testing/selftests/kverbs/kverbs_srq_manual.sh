#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The SRQ example against a peer that speaks the manual's srq.c as it is
# (flow=manual): tools/srq_peer -M, the manual's flow and options, is the
# manual's client against the kernel server and the manual's server
# against the kernel client, over rxe on dummy0, with the manual's
# defaults and other values; the two flows refuse each other with a hint;
# then one case each way across the two VMs (rxe on eth0), skipped with
# the reason when there is no second VM.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

ADDR=169.254.1.1
SRQ=$KV_DEBUGFS/rxe_dummy/srq
HERE=169.254.10.1
THERE=169.254.10.2
SRQ_ETH=$KV_DEBUGFS/rxe_eth/srq

setup() {
	kv_dummy_up && kv_rxe_add rxe_dummy dummy0 && kv_load
}

# per_qp COUNT QPS: the messages of each connection, in order, of the
# manual's round-robin (message i on connection i % QPS).
per_qp() {
	local count=$1 qps=$2 i out=""
	for ((i = 0; i < qps; i++)); do
		out="$out $((count / qps + (i < count % qps ? 1 : 0)))"
	done
	echo "${out# }"
}

# The receives per connection a server printed ("qp 0x..: N receives").
receives_of() {
	sed -n 's/^qp 0x[0-9a-f]*: \([0-9]*\) receives$/\1/p' | tr '\n' ' ' | sed 's/ $//'
}

# manual_client_run FILE OUT ADDR ARGS [SECS]: srq_peer -M (the manual's
# client) against the kernel server writing FILE, into OUT, for at most
# SECS (120); retried while the server is not listening yet.
manual_client_run() {
	local file=$1 out=$2 addr=$3 args=$4 secs=${5:-120}
	kv_wait grep -q "^status: running" "$file"
	for _ in {1..20}; do
		# shellcheck disable=SC2086 # the options are words
		timeout "$secs" srq_peer -M -a "$addr" $args >"$out" 2>&1 && return 0
		grep -q "REJECTED\|UNREACHABLE" "$out" || return 1
		sleep 0.3
	done
	return 1
}

# kernel_server_manual COUNT SIZE QPS MAX_WR: the kernel serves with
# flow=manual, srq_peer -M sends; the kernel saw COUNT messages of SIZE
# bytes in rounds of MAX_WR, message i on connection i % QPS; the peer
# got one reply of SIZE bytes per round, each on its first connection.
kernel_server_manual() {
	local count=$1 size=$2 qps=$3 max_wr=$4 r=0 rounds want
	local opts="count=$count,size=$size,qps=$qps,max_wr=$max_wr"
	rounds=$(((count + max_wr - 1) / max_wr))
	bash -c "printf '%s' 'role=server,addr=$ADDR,flow=manual,timeout_ms=30000,$opts' >$SRQ" 2>/tmp/run.err &
	local pid=$!
	manual_client_run "$SRQ" /tmp/peer.out $ADDR "-c $count -l $size -q $qps -w $max_wr" ||
		{ kv_msg "srq_peer -M (client) failed"; r=1; }
	kv_diag </tmp/peer.out
	wait $pid || { kv_msg "kernel server: $(cat /tmp/run.err)"; r=1; }
	kv_diag <"$SRQ"
	grep -q "^result: ok" "$SRQ" || r=1
	grep -q "^flow: manual" "$SRQ" || r=1
	grep -q "^srq: ok: $count messages of $size bytes from $qps QPs through one SRQ in $rounds rounds, the manual's flow: receive k on connection k % $qps, $rounds replies of $size bytes on qp 0x" "$SRQ" ||
		{ kv_msg "no ok line for $count messages in $rounds rounds"; r=1; }
	want=$(per_qp "$count" "$qps")
	[ "$(receives_of <"$SRQ")" = "$want" ] || { kv_msg "receives per connection: want $want"; r=1; }
	grep -qx "srq_peer: manual client: $count SENDs of $size bytes over $qps QPs in $rounds rounds, $rounds replies ($rounds on the first connection, 0 not of $size bytes)" /tmp/peer.out ||
		{ kv_msg "the peer's replies are not $rounds of $size bytes on its first connection"; r=1; }
	return $r
}

# kernel_client_manual COUNT SIZE QPS MAX_WR: srq_peer -M -s (the
# manual's server), the kernel client with flow=manual; the peer got
# COUNT messages of SIZE bytes, message i on connection i % QPS; the
# kernel got a reply of SIZE bytes on its first connection per round.
kernel_client_manual() {
	local count=$1 size=$2 qps=$3 max_wr=$4 r=0 rounds want
	rounds=$(((count + max_wr - 1) / max_wr))
	timeout 120 srq_peer -M -s -c "$count" -l "$size" -q "$qps" -w "$max_wr" >/tmp/peer.out 2>&1 &
	local peer=$!
	sleep 0.5
	for _ in {1..50}; do
		printf '%s' "role=client,addr=$ADDR,flow=manual,count=$count,size=$size,qps=$qps,max_wr=$max_wr,timeout_ms=30000" >"$SRQ" 2>/tmp/run.err && break
		grep -q "Connection refused" /tmp/run.err || break
		sleep 0.2
	done
	wait $peer || { kv_msg "srq_peer -M -s failed"; r=1; }
	kv_diag </tmp/peer.out
	kv_diag <"$SRQ"
	grep -q "^result: ok" "$SRQ" || { kv_msg "kernel client: $(cat /tmp/run.err)"; r=1; }
	grep -q "^flow: manual" "$SRQ" || r=1
	grep -q "^srq: ok: $count SENDs of $size bytes over $qps QPs in $rounds rounds, the manual's flow: one at a time, $rounds replies of $size bytes on qp 0x" "$SRQ" ||
		{ kv_msg "no ok line for $count SENDs in $rounds rounds"; r=1; }
	want=$(per_qp "$count" "$qps")
	[ "$(receives_of </tmp/peer.out)" = "$want" ] || { kv_msg "the peer's receives per connection: want $want"; r=1; }
	grep -q "^srq_peer: manual server: $count messages (0 not of $size bytes) in $rounds rounds, $rounds replies of $size bytes" /tmp/peer.out ||
		{ kv_msg "the peer did not get $count messages of $size bytes in $rounds rounds"; r=1; }
	return $r
}

# The kernel server of the kverbs flow against the manual's client: it
# fails (EIO) at the first header of zeros out of place and says which
# flow the peer may speak.
kverbs_server_refuses_manual_client() {
	local r=0
	bash -c "printf '%s' 'role=server,addr=$ADDR,count=20,size=256,max_wr=8,timeout_ms=10000' >$SRQ" 2>/tmp/run.err &
	local pid=$!
	manual_client_run "$SRQ" /tmp/peer.out $ADDR "-c 20 -l 256 -w 8" 30 && { kv_msg "the manual client succeeded"; r=1; }
	kv_diag </tmp/peer.out
	wait $pid && { kv_msg "the kernel server succeeded"; r=1; }
	kv_diag <"$SRQ"
	grep -q "Input/output error" /tmp/run.err || { kv_msg "writer: $(cat /tmp/run.err)"; r=1; }
	grep -q "^qp 0x[0-9a-f]*: message 0 (QP index 0) is out of place" "$SRQ" || r=1
	grep -q "does the peer speak the manual's flow (flow=manual)" "$SRQ" || r=1
	return $r
}

# The kernel client of the kverbs flow against the manual's server: the
# reply of size bytes is not the go message; it says so.
kverbs_client_refuses_manual_server() {
	local r=0
	timeout 20 srq_peer -M -s -c 20 -l 256 -w 8 >/tmp/peer.out 2>&1 &
	local peer=$!
	sleep 0.5
	for _ in {1..50}; do
		printf '%s' "role=client,addr=$ADDR,count=20,size=256,max_wr=8,timeout_ms=10000" >"$SRQ" 2>/tmp/run.err && break
		grep -q "Connection refused" /tmp/run.err || break
		sleep 0.2
	done
	kv_diag <"$SRQ"
	grep -q "Input/output error" /tmp/run.err || { kv_msg "writer: $(cat /tmp/run.err)"; r=1; }
	grep -q "^round 1: the go message is wrong (.*, 256 bytes" "$SRQ" || r=1
	grep -q "does the server speak the manual's flow (flow=manual)" "$SRQ" || r=1
	# The manual's server has nothing to wait for once we are gone.
	wait $peer
	kv_diag </tmp/peer.out
	return $r
}

# flow=kverbs said aloud: the kernel server and srq_peer's own flow, as
# before (sequence numbers and QP indexes checked, the go message).
kernel_server_kverbs() {
	local r=0
	bash -c "printf '%s' 'role=server,addr=$ADDR,flow=kverbs,qps=2,max_wr=8,count=20,size=512,timeout_ms=30000' >$SRQ" 2>/tmp/run.err &
	local pid=$!
	kv_wait grep -q "^status: running" "$SRQ"
	for _ in {1..20}; do
		timeout 60 srq_peer -q 2 -w 8 -c 20 -s 512 $ADDR >/tmp/peer.out 2>&1 && break
		sleep 0.3
	done
	kv_diag </tmp/peer.out
	wait $pid || { kv_msg "kernel server: $(cat /tmp/run.err)"; r=1; }
	kv_diag <"$SRQ"
	grep -q "^flow: kverbs" "$SRQ" || r=1
	grep -q "^srq: ok: 20 messages of 512 bytes from 2 QPs through one SRQ in 3 rounds, every sequence number once" "$SRQ" || r=1
	grep -q "SENDs of 512 bytes .* each acknowledged" /tmp/peer.out || r=1
	return $r
}

bad() {
	kv_write_fails "$SRQ" "$1" "$2" "$3"
}

# --- across the two VMs -------------------------------------------------

TWO_HOSTS_WHY="no second VM: no eth0 (tools/vm/run.sh boots one with KVERBS_TWO_HOSTS=1)"

# peer CMD: kv_peer's.
peer() {
	kv_peer "$1"
}

two_hosts_setup() {
	[ -e /sys/class/net/eth0 ] || { kv_msg "$TWO_HOSTS_WHY"; return "$KSFT_SKIP"; }
	kv_wait ip addr show dev eth0 | grep -q "$HERE" || return 1
	kv_rxe_add rxe_eth eth0 || return 1
	kv_wait [ -e "$SRQ_ETH" ] || return 1
	# The peer boots beside us: give it up to a minute.
	for _ in {1..60}; do
		peer true >/dev/null 2>&1 && break
		sleep 1
	done
	peer "rdma link show; command -v srq_peer" | kv_diag
	[ "${PIPESTATUS[0]}" = 0 ] || { kv_msg "the peer VM does not answer"; return 1; }
}

# peer_srq_peer ARGS: srq_peer ARGS in the background in the peer VM, its
# output in /tmp/srq_manual.out there. (Not under the peer's busybox
# timeout: srq_peer run by it there ends at once with status 1, silent.)
peer_srq_peer() {
	peer "rm -f /tmp/srq_manual.out; srq_peer $1 >/tmp/srq_manual.out 2>&1 </dev/null & echo \$! >/tmp/srq_manual.pid" >/dev/null
}

# peer_srq_peer_output LAST: the peer's srq_peer output once it has a line
# starting with LAST (at most 20 s); then the peer's srq_peer is stopped.
peer_srq_peer_output() {
	local out
	for _ in {1..40}; do
		out=$(peer "cat /tmp/srq_manual.out")
		grep -q "^$1" <<<"$out" && break
		sleep 0.5
	done
	peer "kill \$(cat /tmp/srq_manual.pid) 2>/dev/null" >/dev/null
	echo "$out"
}

# Our kernel server, the manual's client (srq_peer -M) in the peer VM.
two_hosts_kernel_server_here() {
	[ -e /sys/class/net/eth0 ] || { kv_msg "$TWO_HOSTS_WHY"; return "$KSFT_SKIP"; }
	local r=0 out
	bash -c "printf '%s' 'role=server,addr=$HERE,flow=manual,count=100,size=8192,timeout_ms=60000' >$SRQ_ETH" 2>/tmp/run.err &
	local pid=$!
	kv_wait grep -q "^status: running" "$SRQ_ETH"
	sleep 1
	peer_srq_peer "-M -a $HERE -l 8192"
	wait $pid || { kv_msg "kernel server: $(cat /tmp/run.err)"; r=1; }
	out=$(peer_srq_peer_output "srq_peer")
	echo "$out" | kv_diag
	kv_diag <"$SRQ_ETH"
	grep -q "^result: ok" "$SRQ_ETH" || r=1
	grep -q "^srq: ok: 100 messages of 8192 bytes from 4 QPs through one SRQ in 2 rounds, the manual's flow" "$SRQ_ETH" || r=1
	[ "$(receives_of <"$SRQ_ETH")" = "25 25 25 25" ] || { kv_msg "not 25 receives per connection"; r=1; }
	grep -qx "srq_peer: manual client: 100 SENDs of 8192 bytes over 4 QPs in 2 rounds, 2 replies (2 on the first connection, 0 not of 8192 bytes)" <<<"$out" ||
		{ kv_msg "the peer's replies are not 2 of 8192 bytes on its first connection"; r=1; }
	return $r
}

# The manual's server (srq_peer -M -s) in the peer VM, our kernel client.
two_hosts_kernel_client_here() {
	[ -e /sys/class/net/eth0 ] || { kv_msg "$TWO_HOSTS_WHY"; return "$KSFT_SKIP"; }
	local r=0 out
	peer_srq_peer "-M -s -c 37 -l 4096 -q 3 -w 8"
	sleep 1
	for _ in {1..50}; do
		printf '%s' "role=client,addr=$THERE,flow=manual,count=37,size=4096,qps=3,max_wr=8,timeout_ms=60000" >"$SRQ_ETH" 2>/tmp/run.err && break
		grep -q "Connection refused" /tmp/run.err || break
		sleep 0.3
	done
	kv_diag <"$SRQ_ETH"
	grep -q "^result: ok" "$SRQ_ETH" || { kv_msg "kernel client: $(cat /tmp/run.err)"; r=1; }
	grep -q "^srq: ok: 37 SENDs of 4096 bytes over 3 QPs in 5 rounds, the manual's flow: one at a time, 5 replies of 4096 bytes" "$SRQ_ETH" || r=1
	out=$(peer_srq_peer_output "srq_peer: manual server:")
	echo "$out" | kv_diag
	[ "$(echo "$out" | receives_of)" = "13 12 12" ] || { kv_msg "the peer's receives per connection are not 13 12 12"; r=1; }
	grep -q "^srq_peer: manual server: 37 messages (0 not of 4096 bytes) in 5 rounds, 5 replies of 4096 bytes" <<<"$out" || r=1
	return $r
}

kv_begin 19
kv_case setup_rxe_dummy_and_load setup
kv_case srq_kernel_server_manual_client_defaults kernel_server_manual 100 100000 4 64
kv_case srq_kernel_client_manual_server_defaults kernel_client_manual 100 100000 4 64
kv_case srq_kernel_server_manual_client_count_37_size_4096_qps_3_max_wr_8 kernel_server_manual 37 4096 3 8
kv_case srq_kernel_client_manual_server_count_37_size_4096_qps_3_max_wr_8 kernel_client_manual 37 4096 3 8
kv_case srq_kernel_server_manual_client_count_1_size_8_qps_1_max_wr_2 kernel_server_manual 1 8 1 2
kv_case srq_kernel_client_manual_server_count_1_size_8_qps_1_max_wr_2 kernel_client_manual 1 8 1 2
kv_case srq_kernel_server_manual_client_count_33_size_16_qps_16_max_wr_128 kernel_server_manual 33 16 16 128
kv_case srq_kernel_client_manual_server_count_33_size_16_qps_16_max_wr_128 kernel_client_manual 33 16 16 128
kv_case srq_kernel_server_manual_client_count_3_size_1048576_qps_2_max_wr_2 kernel_server_manual 3 1048576 2 2
kv_case srq_kernel_client_manual_server_count_3_size_1048576_qps_2_max_wr_2 kernel_client_manual 3 1048576 2 2
kv_case srq_kernel_server_kverbs_flow_refuses_manual_client_with_hint kverbs_server_refuses_manual_client
kv_case srq_kernel_client_kverbs_flow_refuses_manual_server_with_hint kverbs_client_refuses_manual_server
kv_case bad_input_srq_unknown_flow bad "role=server,flow=tcp" "Invalid argument" "srq: unknown flow 'tcp' (kverbs or manual)"
kv_case srq_kernel_server_flow_kverbs_userspace_client_still_works kernel_server_kverbs
kv_case srq_two_hosts_setup_rxe_on_eth0_and_reach_the_peer_vm two_hosts_setup
kv_case srq_two_hosts_kernel_server_here_manual_client_there_count_100_size_8192 two_hosts_kernel_server_here
kv_case srq_two_hosts_kernel_client_here_manual_server_there_count_37_size_4096 two_hosts_kernel_client_here
kv_end
