#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The RC example's rdma_cm mode (role=cm_server|cm_client), krping's way:
# the kernel module and rping from rdmacm-utils are each other's peer over
# rxe on dummy0 (rdma_cm does not work over lo), both directions, every ping
# validated; the rdma_cm failure cases.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

ADDR=169.254.1.1
RC=$KV_DEBUGFS/rxe_dummy/rc

setup() {
	kv_dummy_up && kv_rxe_add rxe_dummy dummy0 && kv_load
}

kernel_server_rping_client() {
	local size=$1 r=0 out
	(printf '%s' "role=cm_server,addr=$ADDR,size=$size,validate,timeout_ms=20000" >"$RC") 2>/tmp/run.err &
	local pid=$!
	kv_wait grep -q "^status: running" "$RC"
	for _ in {1..20}; do
		out=$(rping -c -a $ADDR -C 10 -S "$size" -V -v 2>&1) && break
		sleep 0.3
	done
	echo "$out" | tail -n 3 | kv_diag
	wait $pid || { kv_msg "kernel server: $(cat /tmp/run.err)"; r=1; }
	kv_diag <"$RC"
	[ "$(grep -c '^ping data: rdma-ping-' <<<"$out")" = 10 ] || { kv_msg "rping did not get 10 pings back"; r=1; }
	grep -qx "pings: 10" "$RC" || r=1
	grep -q "^result: ok" "$RC" || r=1
	return $r
}

rping_server_kernel_client() {
	local size=$1 r=0
	rping -s -a $ADDR -C 10 -S "$size" -V >/tmp/rping.out 2>&1 &
	local pid=$!
	for _ in {1..30}; do
		printf '%s' "role=cm_client,addr=$ADDR,size=$size,iters=10,validate" >"$RC" 2>/tmp/run.err && break
		sleep 0.3
	done
	kv_diag <"$RC"
	grep -q "^result: ok" "$RC" || { kv_msg "kernel client: $(cat /tmp/run.err)"; r=1; }
	grep -qx "pings: 10" "$RC" || r=1
	grep -q "^validate: ok" "$RC" || r=1
	grep -q "^ping data: rdma-ping-0: " "$RC" || r=1
	wait $pid || { kv_msg "rping server failed:"; kv_diag </tmp/rping.out; r=1; }
	return $r
}

# The RDMA WRITEs of every run on rxe_dummy so far: one a ping.
writes() {
	sed -n "s/^write_msgs: //p" "$KV_DEBUGFS/rxe_dummy/stats"
}

# writes_past N: more than N writes (pings) so far.
writes_past() {
	[ "$(writes)" -gt "$1" ]
}

# rping's client is killed -9 at a random moment of a ping, 20 times: for
# rping's server that is how a run ends, wherever in the ping it lands.
# If the client's QP goes before its disconnect gets out, the server's
# READ, WRITE or SEND fails with a remote error or is still outstanding
# when the disconnect comes; the run still ends with success, the pings
# it served and the disconnect (seen once in CI between two VMs).
kernel_server_rping_client_killed() {
	local r=0 i pid rp before
	for i in {1..20}; do
		(printf '%s' "role=cm_server,addr=$ADDR,timeout_ms=20000" >"$RC") 2>/tmp/run.err &
		pid=$!
		kv_wait grep -q "^status: running" "$RC"
		before=$(writes)
		rping -c -a $ADDR -C 1000000 >/dev/null 2>&1 &
		rp=$!
		kv_wait writes_past "$((before + 1))" || kv_msg "run $i: no ping served in 10 s"
		sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
		kill -9 $rp
		wait $rp 2>/dev/null
		if ! wait $pid; then
			kv_msg "run $i: the server failed: $(cat /tmp/run.err)"
			kv_diag <"$RC"
			r=1
			continue
		fi
		grep -Eq "^rdma_cm: the client disconnected after [1-9][0-9]* ping" "$RC" || {
			kv_msg "run $i: no disconnect after a ping"
			kv_diag <"$RC"
			r=1
		}
		if grep -q "^rdma_cm: the client went away in the middle" "$RC"; then
			kv_msg "run $i: the client went away in the middle of a ping:"
			grep -E "completion with error|outstanding [0-9]+ ms after" "$RC" | kv_diag
		fi
	done
	return $r
}

rc_fails() {
	kv_write_fails "$RC" "$@"
}

no_listener() {
	rc_fails "role=cm_client,addr=$ADDR,port=7999" "Connection refused" "rdma_cm: rejected"
}

no_client() {
	rc_fails "role=cm_server,timeout_ms=2000" "Connection timed out" "no rdma_cm connection request on port 7174"
}

size_too_small() {
	rc_fails "role=cm_client,addr=$ADDR,size=10" "Numerical result out of range" "takes size=26..65535"
}

# dummy0 does no ARP: the address resolves, and nobody answers the
# connection request.
unreachable() {
	rc_fails "role=cm_client,addr=169.254.1.99,timeout_ms=3000" "Connection timed out" \
		"rdma_cm: no connection to 169.254.1.99:7174: error -110"
}

kv_begin 11
kv_case setup_rxe_dummy_and_load setup
kv_case rc_cm_kernel_server_rping_client_64 kernel_server_rping_client 64
kv_case rc_cm_rping_server_kernel_client_64 rping_server_kernel_client 64
kv_case rc_cm_kernel_server_rping_client_4096 kernel_server_rping_client 4096
kv_case rc_cm_rping_server_kernel_client_4096 rping_server_kernel_client 4096
kv_case rc_cm_rping_client_killed_20x_kernel_server_ends_ok kernel_server_rping_client_killed
kv_case bad_input_rc_cm_client_no_listener no_listener
kv_case bad_input_rc_cm_server_no_client_times_out no_client
kv_case bad_input_rc_cm_size_below_rping_minimum size_too_small
kv_case bad_input_rc_cm_client_no_answer_times_out unreachable
kv_end
