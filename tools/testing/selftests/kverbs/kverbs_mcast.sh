#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The multicast example (mckey's) in one kernel: UD QPs attached to an IPv4
# group over rxe on dummy0; every receiver gets every message with its
# payload and the sender's QPN as immediate data; after a detach a QP gets
# nothing more; the control file's answers to bad input.

. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

MC=$KV_DEBUGFS/rxe_dummy/mcast

setup() {
	kv_dummy_up && ip link set dummy0 multicast on && kv_rxe_add rxe_dummy dummy0 && kv_load
}

# loopback QPS SIZE COUNT
loopback() {
	local qps=$1 size=$2 count=$3 r=0
	if ! printf 'role=both,group=239.1.1.1,qps=%s,size=%s,count=%s' "$qps" "$size" "$count" >"$MC"; then
		kv_msg "run failed"
		r=1
	fi
	kv_diag <"$MC"
	[ "$(grep -c "^qp 0x[0-9a-f]*: received $count messages" "$MC")" = "$qps" ] || r=1
	[ "$(grep -c "^joined dgid: ::ffff:239.1.1.1 qpn 0x[0-9a-f]* qkey 0x1234567" "$MC")" = "$qps" ] || r=1
	grep -q "^validate: ok" "$MC" || r=1
	grep -q "^detach: ok" "$MC" || r=1
	grep -q "^data transfers complete" "$MC" || r=1
	return $r
}

bad() {
	kv_write_fails "$MC" "$1" "$2" "$3" || return 1
	# Still usable.
	printf 'role=both,group=239.1.1.2,qps=2,count=2' >"$MC"
}

kv_begin 9
kv_case setup_rxe_dummy_and_load setup
kv_case mcast_loopback_two_receivers loopback 2 100 10
kv_case mcast_loopback_four_receivers_1024 loopback 4 1024 5
kv_case bad_input_mcast_not_multicast bad "role=both,group=10.1.1.1" "Invalid argument" "10.1.1.1 is not a multicast address"
kv_case bad_input_mcast_size_above_mtu bad "role=both,group=239.1.1.1,size=2000" "Message too long" "size 2000 is above the active MTU 1024"
kv_case bad_input_mcast_too_many_qps bad "role=both,group=239.1.1.1,qps=17" "Numerical result out of range" "qps=17 is out of range"
kv_case bad_input_mcast_unknown_key bad "role=both,group=239.1.1.1,ttl=3" "Invalid argument" "unknown key 'ttl'"
kv_case bad_input_mcast_missing_group bad "role=both" "Invalid argument" "role= and group= are required"
kv_end
