#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Every control option on every kind of netdev rxe sits on in one host:
# lo, dummy0 and a veth (kvm0, its peer kvm1 beside it). The fourth kind,
# the link between two VMs (virtio-net), is kverbs_two_hosts.sh's.
#
# Each cell writes one run to one device's control file. A run either
# works, with its result checked (validated payloads, pings, every SRQ
# sequence number), or is refused up front with a precise errno and a
# kernel log line naming the reason -- never a flushed work request or a
# timeout as the only clue. What is refused where:
# - rdma_cm (rc cm_server/cm_client, srq) over lo: ENODEV, the RDMA core
#   resolves no address to a loopback netdev;
# - rc over lo's GID 0 (rxe's default link-local GID, made from lo's
#   all-zero MAC, is no address of lo): ENETUNREACH when the QP is
#   connected, no MAC address for it;
# - mcast over lo: an IPv4 group works with lo's multicast off (its
#   default) or on; an IPv6 group gets ENETUNREACH (the kernel gives lo no
#   ff00::/8 route);
# - apm on any of them: EOPNOTSUPP, the core loads alternate paths on
#   InfiniBand ports only.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

# The address of each kind's device, and the GID index of that address
# (an IPv4 RoCE v2 GID: rxe lists the link-local IPv6 one first).
declare -A ADDR=([lo]=127.0.0.1 [dummy]=169.254.1.1 [veth]=169.254.3.1)

setup() {
	kv_dummy_up && ip link set dummy0 multicast on || return 1
	if [ ! -e /sys/class/net/kvm0 ]; then
		ip link add kvm0 type veth peer name kvm1 || return 1
	fi
	ip addr add 169.254.3.1/24 dev kvm0 && ip addr add 169.254.3.2/24 dev kvm1 &&
		ip link set kvm0 up && ip link set kvm1 up || return 1
	kv_rxe_add rxe_lo lo && kv_rxe_add rxe_dummy dummy0 && kv_rxe_add rxe_veth kvm0 && kv_load || return 1
	kv_wait test -e "$KV_DEBUGFS/rxe_veth/rc"
}

# run KIND FILE STRING: one write from a process of its own (a peer in the
# background is this shell's child: its exit would interrupt a write made
# from here); sets ERRNO (0: the run succeeded).
run() {
	local out
	out=$(kv_fail_nth 0 write "$KV_DEBUGFS/rxe_$1/$2" "$3") || return 1
	ERRNO=$(echo "$out" | awk '{ print $2 }')
	kv_msg "rxe_$1/$2 '$3': errno $ERRNO"
}

# works KIND FILE STRING PATTERN...: the run succeeds and its report has
# every PATTERN (a line beginning with it).
works() {
	local kind=$1 file=$2 str=$3 p
	shift 3
	run "$kind" "$file" "$str" || return 1
	if [ "$ERRNO" != 0 ]; then
		kv_diag <"$KV_DEBUGFS/rxe_$kind/$file"
		return 1
	fi
	for p in "result: ok" "$@"; do
		grep -q "^$p" "$KV_DEBUGFS/rxe_$kind/$file" || {
			kv_msg "no '$p' in the report:"
			kv_diag <"$KV_DEBUGFS/rxe_$kind/$file"
			return 1
		}
	done
}

# refused KIND FILE STRING ERRNO LOGGED: the run ends with ERRNO, at once
# (within 1 s: up front, not after a timeout), and the kernel logged
# LOGGED during the case.
refused() {
	local us
	run "$1" "$2" "$3" || return 1
	[ "$ERRNO" = "$4" ] || { kv_msg "want errno $4"; return 1; }
	# The run's own time, as the kernel measured it (the report's last
	# line): the shell's timestamps add its own scheduling to it.
	us=$(sed -n "s/^result: error -$4 (\([0-9]*\) us)$/\1/p" "$KV_DEBUGFS/rxe_$1/$2")
	[ -n "$us" ] || { kv_msg "no 'result: error -$4' line"; kv_diag <"$KV_DEBUGFS/rxe_$1/$2"; return 1; }
	[ "$us" -lt 1000000 ] || { kv_msg "refused after $us us, not up front"; return 1; }
	kv_logged "$5" || { kv_msg "no kernel log line '$5'"; return 1; }
}

# The cells of one kind that work the same everywhere.
info_names_netdev() {
	if ! grep -qx "	netdev: $2" "$KV_DEBUGFS/rxe_$1/info" ||
		! grep -q "	state: PORT_ACTIVE" "$KV_DEBUGFS/rxe_$1/info"; then
		kv_diag <"$KV_DEBUGFS/rxe_$1/info"
		return 1
	fi
}
rc_loopback() {
	works "$1" rc "role=loopback,size=4096,validate" "validate: ok"
}
rc_loopback_ipv6_link_local() {
	works "$1" rc "role=loopback,size=4096,gid_idx=0,validate" "validate: ok"
}
rc_loopback_options() {
	works "$1" rc "role=loopback,size=65536,iters=3,mtu=4096,poll=direct,imm,validate" "validate: ok" &&
		works "$1" rc "role=loopback,size=5000,iters=2,mtu=1024,poll=workqueue,validate" "validate: ok"
}
rc_loopback_atomics() {
	works "$1" rc "role=loopback,size=64,atomics=8" "atomics: ok"
}
rc_server_rc_peer_client() {
	local kind=$1 gid=1 pid r=0
	(for _ in {1..15}; do
		rc_peer -d "rxe_$kind" -g $gid -s 4096 -v "${ADDR[$kind]}" >/dev/null 2>&1 && exit 0
		sleep 0.2
	done
	exit 1) &
	pid=$!
	works "$kind" rc "role=server,size=4096,gid_idx=$gid,validate,timeout_ms=5000" "validate: ok" || r=1
	wait $pid || { kv_msg "rc_peer failed"; r=1; }
	return $r
}
rc_cm_server_rping_client() {
	local kind=$1 pid r=0
	(for _ in {1..15}; do
		rping -c -a "${ADDR[$kind]}" -C 3 -S 64 -V >/dev/null 2>&1 && exit 0
		sleep 0.2
	done
	exit 1) &
	pid=$!
	works "$kind" rc "role=cm_server,addr=${ADDR[$kind]},size=64,validate,timeout_ms=5000" "pings: 3" || r=1
	wait $pid || { kv_msg "rping failed"; r=1; }
	return $r
}
rc_cm_client_rping_server() {
	local kind=$1 pid r=0
	rping -s -a "${ADDR[$kind]}" -C 3 -S 64 -V >/tmp/matrix_rping.out 2>&1 &
	pid=$!
	# Until rping listens: a connection refused first is no failure.
	for _ in {1..30}; do
		run "$kind" rc "role=cm_client,addr=${ADDR[$kind]},size=64,iters=3,validate,timeout_ms=5000" || break
		[ "$ERRNO" = 0 ] && break
		sleep 0.3
	done
	if [ "$ERRNO" != 0 ] || ! grep -qx "pings: 3" "$KV_DEBUGFS/rxe_$kind/rc" ||
		! grep -q "^validate: ok" "$KV_DEBUGFS/rxe_$kind/rc"; then
		kv_diag <"$KV_DEBUGFS/rxe_$kind/rc"
		r=1
	fi
	wait $pid || { kv_msg "rping server failed:"; kv_diag </tmp/matrix_rping.out; r=1; }
	return $r
}
srq_server_srq_peer_client() {
	local kind=$1 pid r=0
	(for _ in {1..15}; do
		srq_peer -q 2 -w 8 -c 20 -s 256 "${ADDR[$kind]}" >/dev/null 2>&1 && exit 0
		sleep 0.2
	done
	exit 1) &
	pid=$!
	works "$kind" srq "role=server,addr=${ADDR[$kind]},qps=2,max_wr=8,count=20,size=256,timeout_ms=5000" \
		"srq: ok: 20 messages" || r=1
	wait $pid || { kv_msg "srq_peer failed"; r=1; }
	return $r
}
mcast_ipv4() {
	works "$1" mcast "role=both,group=239.1.1.1,qps=2,count=3" "validate: ok" "detach: ok"
}
mcast_ipv6() {
	works "$1" mcast "role=both,group=ff0e::1:2,qps=2,count=3" "validate: ok" "detach: ok"
}
mcast_by_hand() {
	local mc=$KV_DEBUGFS/rxe_$1/mcast
	printf 'attach 239.3.0.1' >"$mc" && grep -q "^attached: 239.3.0.1 " "$mc" &&
		printf 'detach 239.3.0.1' >"$mc" && ! grep -q "^attached: 239.3.0.1 " "$mc"
}
# bench_works KIND STRING TITLE QPS SIZE ITERS: the run succeeds; its
# header names the test (perftest's title, "Bidirectional " first with
# bidir), the device and the QPs; its table has one row, of SIZE with
# ITERS iterations, its numbers positive (as kverbs_bench.sh checks them:
# 5 columns for bw, 9 for lat).
bench_works() {
	local kind=$1 str=$2 title=$3 qps=$4 size=$5 iters=$6 f=$KV_DEBUGFS/rxe_$1/bench
	works "$kind" bench "$str" || return 1
	if ! grep -qx " *$title" "$f" || ! grep -q "^ Device *: rxe_$kind	" "$f" ||
		! grep -q "^ Number of qps *: $qps	" "$f"; then
		kv_msg "the header is not of '$title' on rxe_$kind with $qps QPs:"
		kv_diag <"$f"
		return 1
	fi
	grep -E '^ [0-9]+ ' "$f" | awk -v size="$size" -v iters="$iters" '
		{
			rows++
			if (NF != 5 && NF != 9) { print "row: " NF " fields: " $0; bad = 1; next }
			if ($1 != size || $2 != iters) { print "row: " $0 ", want " size " bytes, " iters " iterations"; bad = 1 }
			if (NF == 5 && !($3 >= 0 && $4 >= 0 && $5 >= 0 && ($4 > 0 || $5 > 0))) { print "not positive: " $0; bad = 1 }
			if (NF == 9 && !($3 > 0 && $3 <= $5 && $5 <= $4)) { print "not t_min <= t_typical <= t_max: " $0; bad = 1 }
		}
		END { if (rows != 1) { print rows + 0 " rows, want 1"; bad = 1 }; exit bad }' | kv_diag
	[ "${PIPESTATUS[1]}" = 0 ] || { kv_diag <"$f"; return 1; }
}
bench_tests() {
	bench_works "$1" "test=write_bw,size=4096,iters=50" "RDMA_Write BW Test" 1 4096 50 &&
		bench_works "$1" "test=read_lat,size=8,iters=20" "RDMA_Read Latency Test" 1 8 20 &&
		bench_works "$1" "test=send_bw,size=1024,iters=20,qps=2,bidir" "Bidirectional Send BW Test" 2 1024 40 &&
		bench_works "$1" "test=atomic_lat,size=8,iters=20" "Atomic FETCH_AND_ADD Latency Test" 1 8 20
}
apm_refused() {
	refused "$1" apm "role=server,addr=${ADDR[$1]}" 95 \
		"rxe_$1: apm: no path migration: its ports are not InfiniBand"
}
events_readable() {
	grep -q "^events: [0-9]* (0 dropped)" "$KV_DEBUGFS/rxe_$1/events" ||
		{ kv_diag <"$KV_DEBUGFS/rxe_$1/events"; return 1; }
}

# What lo refuses.
lo_rc_loopback_ipv6_link_local_refused() {
	refused lo rc "role=loopback,size=4096,gid_idx=0,validate" 101 \
		"rxe_lo: no MAC address for fe80::200:ff:fe00:0: error -101"
}
LO_CM="rdma_cm cannot connect over lo, a loopback netdev"
# logged_times PATTERN N: the kernel logged PATTERN N times in this case.
logged_times() {
	local n
	n=$(kv_log_since "$KV_CASE" | grep -c -- "$1")
	[ "$n" = "$2" ] || { kv_msg "'$1' logged $n times, want $2"; return 1; }
}
# Both roles log the same line: each refusal must log its own.
lo_rc_cm_refused() {
	refused lo rc "role=cm_server,addr=127.0.0.1,timeout_ms=5000" 19 "rxe_lo: rc: $LO_CM" &&
		logged_times "rxe_lo: rc: $LO_CM" 1 &&
		refused lo rc "role=cm_client,addr=127.0.0.1,timeout_ms=5000" 19 "rxe_lo: rc: $LO_CM" &&
		logged_times "rxe_lo: rc: $LO_CM" 2
}
lo_srq_refused() {
	refused lo srq "role=server,addr=127.0.0.1,timeout_ms=5000" 19 "rxe_lo: srq: $LO_CM" &&
		logged_times "rxe_lo: srq: $LO_CM" 1 &&
		refused lo srq "role=client,addr=127.0.0.1,timeout_ms=5000" 19 "rxe_lo: srq: $LO_CM" &&
		logged_times "rxe_lo: srq: $LO_CM" 2
}
lo_mcast_ipv4_multicast_off() {
	ip link set lo multicast off
	mcast_ipv4 lo && mcast_by_hand lo
}
lo_mcast_ipv4_multicast_on() {
	local r=0
	ip link set lo multicast on
	mcast_ipv4 lo && mcast_by_hand lo || r=1
	ip link set lo multicast off
	return $r
}
lo_mcast_ipv6_refused() {
	local r=0
	ip link set lo multicast on
	refused lo mcast "role=both,group=ff0e::1:2,qps=2,count=3" 101 \
		"rxe_lo: mcast: no route from [0-9a-f:]* to ff0e::1:2 through lo" || r=1
	ip link set lo multicast off
	return $r
}

kv_begin 46
kv_case setup_rxe_on_lo_dummy_veth_and_load setup
for kind in lo dummy veth; do
	netdev=$kind
	[ $kind = dummy ] && netdev=dummy0
	[ $kind = veth ] && netdev=kvm0
	kv_case "matrix_${kind}_info_names_${netdev}_port_active" info_names_netdev $kind $netdev
	kv_case "matrix_${kind}_rc_loopback_validated" rc_loopback $kind
	kv_case "matrix_${kind}_rc_loopback_mtu_poll_imm_iters_validated" rc_loopback_options $kind
	kv_case "matrix_${kind}_rc_loopback_atomics_checked" rc_loopback_atomics $kind
	kv_case "matrix_${kind}_rc_server_rc_peer_client_validated" rc_server_rc_peer_client $kind
	kv_case "matrix_${kind}_bench_write_read_send_atomic" bench_tests $kind
	kv_case "matrix_${kind}_apm_refused_eopnotsupp" apm_refused $kind
	kv_case "matrix_${kind}_events_readable_none_dropped" events_readable $kind
	if [ $kind = lo ]; then
		kv_case matrix_lo_rc_loopback_ipv6_link_local_gid_refused_enetunreach lo_rc_loopback_ipv6_link_local_refused
		kv_case matrix_lo_rc_cm_refused_enodev lo_rc_cm_refused
		kv_case matrix_lo_srq_refused_enodev lo_srq_refused
		kv_case matrix_lo_mcast_ipv4_and_by_hand_multicast_off lo_mcast_ipv4_multicast_off
		kv_case matrix_lo_mcast_ipv4_and_by_hand_multicast_on lo_mcast_ipv4_multicast_on
		kv_case matrix_lo_mcast_ipv6_refused_enetunreach lo_mcast_ipv6_refused
	else
		kv_case "matrix_${kind}_rc_loopback_ipv6_link_local_gid_validated" rc_loopback_ipv6_link_local $kind
		kv_case "matrix_${kind}_rc_cm_server_rping_client" rc_cm_server_rping_client $kind
		kv_case "matrix_${kind}_rc_cm_client_rping_server" rc_cm_client_rping_server $kind
		kv_case "matrix_${kind}_srq_server_srq_peer_client" srq_server_srq_peer_client $kind
		kv_case "matrix_${kind}_mcast_ipv4_validated" mcast_ipv4 $kind
		kv_case "matrix_${kind}_mcast_ipv6_validated" mcast_ipv6 $kind
		kv_case "matrix_${kind}_mcast_attach_detach_by_hand" mcast_by_hand $kind
	fi
done
kv_end
