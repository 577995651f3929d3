#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The RC example's two-host mode, on one host: the kernel module and
# tools/rc_peer (RDMA_RC_example's protocol on libibverbs) are each other's
# peer over rxe on lo, in both directions, with RDMA_RC_example's messages
# and every byte validated on both sides; the TCP side's bad cases.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

RC=$KV_DEBUGFS/rxe_lo/rc
# rxe_lo's GID 1 is ::ffff:127.0.0.1, a RoCE v2 GID.
GID=1

setup() {
	kv_rxe_add rxe_lo lo && kv_load
}

# A kernel run in the background: its pid in $RUN_PID, its errors in
# /tmp/run.err.
kernel_run() {
	(printf '%s' "$1" >"$RC") 2>/tmp/run.err &
	RUN_PID=$!
	kv_wait grep -q "^status: running" "$RC"
}

# rc_peer, retried while its server is not listening yet.
peer_client() {
	local out
	for _ in {1..50}; do
		out=$(rc_peer -d rxe_lo -g $GID "$@" 127.0.0.1 2>&1) && { echo "$out"; return 0; }
		grep -q "connect failed" <<<"$out" || { echo "$out"; return 1; }
		sleep 0.2
	done
	echo "$out"
	return 1
}

# kernel_server_peer_client OPTS PEER_ARGS...: the kernel as the server
# with OPTS, rc_peer as its client with PEER_ARGS; rc_peer's output in
# /tmp/peer.out and its status in PEER_RC, the kernel's status in
# KERNEL_RC (its errors in /tmp/run.err).
kernel_server_peer_client() {
	local opts=$1
	shift
	kernel_run "role=server,gid_idx=$GID,$opts"
	peer_client "$@" >/tmp/peer.out
	PEER_RC=$?
	kv_diag </tmp/peer.out
	wait $RUN_PID
	KERNEL_RC=$?
	kv_diag <"$RC"
}

kernel_server_userspace_client() {
	local size=$1 r=0
	kernel_server_peer_client "size=$size,validate" -s "$size" -v
	[ $PEER_RC = 0 ] || r=1
	[ $KERNEL_RC = 0 ] || { kv_msg "kernel server failed: $(cat /tmp/run.err)"; r=1; }
	grep -qx "Message is: 'SEND operation      '" /tmp/peer.out || r=1
	grep -qx "Contents of server's buffer: 'RDMA read operation '" /tmp/peer.out || r=1
	grep -qx "test result is 0" /tmp/peer.out || r=1
	grep -qx "Contents of server buffer: 'RDMA write operation'" "$RC" || r=1
	grep -q "^validate: ok" "$RC" || r=1
	grep -q "^result: ok" "$RC" || r=1
	return $r
}

# peer_server_kernel_client OPTS PEER_ARGS...: rc_peer as the server with
# PEER_ARGS (its output in /tmp/peer.out), the kernel as its client with
# OPTS, retried while rc_peer does not listen yet (errors in
# /tmp/run.err); fails if rc_peer did.
peer_server_kernel_client() {
	local opts=$1 r=0
	shift
	rc_peer -d rxe_lo -g $GID "$@" >/tmp/peer.out 2>&1 &
	local peer=$!
	for _ in {1..50}; do
		printf '%s' "role=client,addr=127.0.0.1,gid_idx=$GID,$opts" >"$RC" 2>/tmp/run.err && break
		grep -q "Connection refused" /tmp/run.err || break
		sleep 0.2
	done
	wait $peer || { kv_msg "rc_peer server failed"; r=1; }
	kv_diag </tmp/peer.out
	kv_diag <"$RC"
	return $r
}

userspace_server_kernel_client() {
	local size=$1 r=0
	peer_server_kernel_client "size=$size,validate" -s "$size" -v || r=1
	grep -q "^result: ok" "$RC" || { kv_msg "kernel client: $(cat /tmp/run.err)"; r=1; }
	grep -qx "Message is: 'SEND operation      '" "$RC" || r=1
	grep -qx "Contents of server's buffer: 'RDMA read operation '" "$RC" || r=1
	grep -q "^validate: ok" "$RC" || r=1
	grep -qx "Contents of server buffer: 'RDMA write operation'" /tmp/peer.out || r=1
	grep -qx "test result is 0" /tmp/peer.out || r=1
	return $r
}

# rc_fails INPUT ERROR LOGGED: the run fails with ERROR, logs LOGGED, and
# its report says so.
rc_fails() {
	kv_write_fails "$RC" "$@" && grep -q "^result: error" "$RC"
}

client_dead_peer() {
	rc_fails "role=client,addr=127.0.0.1,port=1" "Connection refused" "cannot connect to 127.0.0.1:1"
}

client_wrong_port() {
	rc_peer -d rxe_lo -g $GID >/tmp/peer.out 2>&1 &
	local peer=$! r=0
	sleep 1
	rc_fails "role=client,addr=127.0.0.1,port=19876" "Connection refused" "cannot connect to 127.0.0.1:19876" || r=1
	kill $peer
	wait $peer
	return $r
}

server_no_client() {
	local t0 t1
	t0=$(cut -d. -f1 /proc/uptime)
	rc_fails "role=server,timeout_ms=2000" "Connection timed out" "no client connected on port 19875" || return 1
	t1=$(cut -d. -f1 /proc/uptime)
	{ [ $((t1 - t0)) -ge 1 ] && [ $((t1 - t0)) -le 10 ]; } || { kv_msg "waited $((t1 - t0)) s"; return 1; }
}

client_without_addr() {
	local err
	err=$( (printf 'role=client' >"$RC") 2>&1) && return 1
	grep -q "Invalid argument" <<<"$err" && kv_logged "role=client needs addr="
}

# listening: a TCP connection to the kernel server's port opens (and is
# closed at once).
listening() {
	local fd
	exec {fd}<>/dev/tcp/127.0.0.1/19875 || return 1
	exec {fd}<&-
}

peer_closes_early() {
	# A TCP peer that connects and goes away without a word.
	# "status: running" comes before the listen: retry while refused.
	kernel_run "role=server,timeout_ms=5000"
	kv_wait listening 2>/dev/null ||
		{ kv_msg "the server never listened"; return 1; }
	wait $RUN_PID && { kv_msg "the server succeeded"; return 1; }
	kv_msg "$(cat /tmp/run.err)"
	grep -q "no connection data from the peer" "$RC"
}

# Remote-access scope: the kernel lingers after invalidating the rkey it
# advertised; rc_peer, still holding rkey and address, tries an RDMA READ
# or WRITE with them. Both must end in a remote access error with the QP,
# registration and buffer still alive, and the buffer must not change.
stale_rkey_peer_client() {
	local probe=$1 r=0
	kernel_server_peer_client "size=4096,validate,linger" -s 4096 -v -x "$probe"
	[ $PEER_RC = 0 ] || r=1
	[ $KERNEL_RC = 0 ] || { kv_msg "kernel server failed: $(cat /tmp/run.err)"; r=1; }
	grep -qix "RDMA $probe with the stale rkey: remote access error" /tmp/peer.out || r=1
	grep -q "^linger: ok: the peer probed rkey .*, the buffer is unchanged" "$RC" || r=1
	grep -q "^result: ok" "$RC" || r=1
	return $r
}

stale_rkey_peer_server() {
	local r=0
	peer_server_kernel_client "size=4096,validate,linger" -s 4096 -v -x write || r=1
	grep -qx "RDMA WRITE with the stale rkey: remote access error" /tmp/peer.out || r=1
	grep -q "^linger: ok: the peer probed rkey .*, the buffer is unchanged" "$RC" || r=1
	grep -q "^result: ok" "$RC" || r=1
	return $r
}

# Atomics with the userspace peer: rc_peer -a as the client doing them on
# the kernel server's buffer, and as the server whose buffer the kernel
# client does them on; every old value checked by the side doing them,
# the final 8 bytes by the server.
atomics_peer_client() {
	local r=0
	kernel_server_peer_client "size=4096,validate,atomics=50" -s 4096 -v -a 50
	[ $PEER_RC = 0 ] || r=1
	[ $KERNEL_RC = 0 ] || { kv_msg "kernel server failed: $(cat /tmp/run.err)"; r=1; }
	grep -qx "atomics: 50 fetch-and-adds and 2 compare-and-swaps returned the expected old values" /tmp/peer.out || r=1
	grep -q "^atomics: ok: the server's 8 bytes hold 'kverbs!!'" "$RC" || r=1
	grep -q "^result: ok" "$RC" || r=1
	return $r
}

atomics_peer_server() {
	local r=0
	peer_server_kernel_client "size=4096,validate,atomics=50" -s 4096 -v -a 50 || r=1
	grep -q "^atomics: ok: 50 fetch-and-adds and 2 compare-and-swaps returned the expected old values" "$RC" || r=1
	grep -qx "atomics: the server's 8 bytes hold 'kverbs!!'" /tmp/peer.out || r=1
	grep -q "^result: ok" "$RC" || r=1
	return $r
}

linger_without_peer() {
	local err
	err=$( (printf 'role=loopback,linger' >"$RC") 2>&1) && return 1
	grep -q "Invalid argument" <<<"$err" && kv_logged "linger needs role=server or role=client"
}

# A misbehaving peer: whatever it sends, the kernel ends with an errno
# and touches nothing outside its buffers (KASAN watches rxe's copies).
peer_short_record() {
	local r=0
	kernel_server_peer_client "timeout_ms=2000" -b short
	[ $PEER_RC = 0 ] || r=1
	[ $KERNEL_RC != 0 ] || { kv_msg "the server succeeded"; r=1; }
	kv_msg "$(cat /tmp/run.err)"
	grep -q "Connection timed out" /tmp/run.err || r=1
	grep -q "no connection data from the peer" "$RC" || r=1
	return $r
}

# Our SEND goes to a QP that does not exist: rxe drops it, and after the
# retries (timeout 0x12 = 1.07 s, retry_cnt 6: about 7.5 s) the SEND
# completes with "transport retry counter exceeded".
peer_wrong_qpn() {
	local r=0
	kernel_server_peer_client "size=4096,timeout_ms=20000" -b qpn
	[ $PEER_RC = 0 ] || r=1
	[ $KERNEL_RC != 0 ] || { kv_msg "the server succeeded"; r=1; }
	grep -q "Input/output error" /tmp/run.err || { kv_msg "$(cat /tmp/run.err)"; r=1; }
	grep -qi "SEND.*retry" "$RC" || r=1
	return $r
}

# The peer's RDMA WRITE of 8192 bytes into our 4096: refused whole (a
# remote access error for the peer); our buffer still holds what it held.
peer_oversized_write() {
	local r=0
	kernel_server_peer_client "size=4096,validate" -s 8192 -b big
	[ $PEER_RC = 0 ] || r=1
	[ $KERNEL_RC != 0 ] || { kv_msg "the server succeeded"; r=1; }
	grep -qx "oversized RDMA WRITE: remote access error" /tmp/peer.out || r=1
	grep -qx "Contents of server buffer: 'RDMA read operation '" "$RC" || r=1
	grep -q "RDMA WRITE: validation failed at byte 5:" "$RC" || r=1
	return $r
}

# The peer SENDs 8192 bytes to our receive of 4096: our receive completes
# in error (rxe says "local QP operation error"), the run ends with EIO.
peer_oversized_send() {
	local r=0
	peer_server_kernel_client "size=4096,validate" -s 8192 -b big || r=1
	grep -q "Input/output error" /tmp/run.err || { kv_msg "kernel client: $(cat /tmp/run.err)"; r=1; }
	grep -q "^oversized SEND: " /tmp/peer.out || r=1
	grep -q "^RECV: completion with error: " "$RC" || r=1
	return $r
}

kv_begin 21
kv_case setup_rxe_lo_and_load setup
kv_case rc_kernel_server_userspace_client_21 kernel_server_userspace_client 21
kv_case rc_userspace_server_kernel_client_21 userspace_server_kernel_client 21
kv_case rc_kernel_server_userspace_client_65536 kernel_server_userspace_client 65536
kv_case rc_userspace_server_kernel_client_65536 userspace_server_kernel_client 65536
kv_case bad_input_rc_client_to_dead_peer client_dead_peer
kv_case bad_input_rc_client_wrong_port client_wrong_port
kv_case bad_input_rc_server_with_no_client_times_out server_no_client
kv_case bad_input_rc_client_without_addr client_without_addr
kv_case bad_input_rc_peer_closes_before_connection_data peer_closes_early
kv_case rkey_scope_stale_read_by_userspace_client_refused stale_rkey_peer_client read
kv_case rkey_scope_stale_write_by_userspace_client_refused stale_rkey_peer_client write
kv_case rkey_scope_stale_write_by_userspace_server_refused stale_rkey_peer_server
kv_case bad_input_rc_linger_without_peer_refused linger_without_peer
kv_case rc_atomics_kernel_server_userspace_client atomics_peer_client
kv_case rc_atomics_userspace_server_kernel_client atomics_peer_server
kv_case malicious_peer_short_connection_record_ends_etimedout peer_short_record
kv_case malicious_peer_wrong_qpn_ends_eio_after_retries peer_wrong_qpn
kv_case malicious_peer_oversized_write_refused_buffer_unchanged peer_oversized_write
kv_case malicious_peer_oversized_send_ends_eio peer_oversized_send
kv_end
