#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Hardening: allocation-failure sweeps, fuzzed control input, device
# removal under traffic and concurrent writers, on rxe over lo and dummy0.
#
# - A sweep fails the Nth fault-injection point (failslab and
#   fail_page_alloc, per task: /proc/thread-self/fail-nth through
#   kv_fail_nth) of one operation for
#   N = 1, 1 + STRIDE, ... until the operation runs through without
#   reaching point N. Every armed run must end with an errno, or succeed
#   with a right result; a normal run after it must pass.
# - The fuzzer (kv_fuzz, seeded) writes generated strings to each control
#   file: only success or an errno, then a valid run.
# - Removal: long runs (rc, mcast, bench) on rxe_lo and rxe_dummy at
#   once; one device (or dummy0's netdev) goes away at a seeded random
#   moment: its run ends with ECANCELED, EINTR or ENETDOWN within 5 s,
#   the other one passes, the device comes back and a validated run
#   passes.
#
# `make check` runs a reduced slice (about 8 points per sweep, 200 strings
# per file, 3 removal loops); `make stress` (/kverbs/stress holds the seed) runs all
# of it -- every point with a normal run after each, 10,000 strings per
# file, 50 removal loops -- and prints a summary table.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

FULL=0
SEED=1
if [ -f /kverbs/stress ]; then
	FULL=1
	SEED=$(cat /kverbs/stress)
fi
# make stress ONLY=REGEX: only the cases whose names match (the others
# are skipped, saying so); setup and the summary always run.
ONLY=
[ -f /kverbs/stress_only ] && ONLY=$(cat /kverbs/stress_only)
RC=$KV_DEBUGFS/rxe_lo/rc
BENCH=$KV_DEBUGFS/rxe_lo/bench
MC=$KV_DEBUGFS/rxe_dummy/mcast
SRQ=$KV_DEBUGFS/rxe_dummy/srq
FAILSLAB=/sys/kernel/debug/failslab
FAILPAGE=/sys/kernel/debug/fail_page_alloc
SUMMARY=/tmp/kverbs_hardening.summary

setup() {
	kv_dummy_up && ip link set dummy0 multicast on &&
		kv_rxe_add rxe_lo lo && kv_rxe_add rxe_dummy dummy0 && kv_load || return 1
	# fail-nth fails any slab allocation of the task, sleeping ones too,
	# silently (a stack dump would read as a kernel report); and any page
	# allocation of the kernel's (user pages, __GFP_HIGHMEM, stay
	# ignored: a fault in kv_fail_nth itself is not the operation's), of
	# every order.
	echo N >"$FAILSLAB/ignore-gfp-wait" &&
		echo 0 >"$FAILSLAB/verbose" &&
		echo N >"$FAILPAGE/ignore-gfp-wait" &&
		echo Y >"$FAILPAGE/ignore-gfp-highmem" &&
		echo 0 >"$FAILPAGE/min-order" &&
		echo 0 >"$FAILPAGE/verbose" || return 1
	quiet_drain_fault
	: >"$SUMMARY"
	kv_msg "mode: $([ $FULL = 1 ] && echo stress || echo check), seed $SEED"
}

# The module's drain fault (kverbs_soundness.sh's) is not an allocation:
# a stack filter no stack matches keeps fail-nth off it. Set anew after
# every load.
quiet_drain_fault() {
	[ -d "$KV_DEBUGFS/fail_drain" ] || return 0
	echo 0 >"$KV_DEBUGFS/fail_drain/require-end" &&
		echo 0 >"$KV_DEBUGFS/fail_drain/verbose"
}

# Checks of a run's result, for sweeps: a success must be a right one.
rc_ok() {
	grep -q "^result: ok" "$RC" && grep -q "^validate: ok" "$RC"
}
mcast_ok() {
	grep -q "^validate: ok" "$MC" && grep -q "^detach: ok" "$MC"
}
# bench_ok [FILE]: FILE (default $BENCH) shows bench_normal's run passed.
bench_ok() {
	local f=${1:-$BENCH}
	grep -q "^result: ok" "$f" && grep -qE "^ +4096 +100 " "$f"
}
attached() {
	grep -q "^attached: 239.3.0.1 " "$MC"
}
detached() {
	! attached
}
# has_dir DEVICE: the module made DEVICE's directory, or said (during the
# current sweep point) that adding the device failed: the RDMA core ignores
# a client's failed add, and the client must say so.
has_dir() {
	[ -e "$KV_DEBUGFS/$1/info" ] ||
		point_logged "$1: client kverbs_example: adding the device failed (error -[0-9]*); it is ignored"
}
loaded() {
	kv_loaded && has_dir rxe_lo && has_dir rxe_dummy
}
rxe_added() {
	[ -e /sys/class/infiniband/rxe_sweep ] && has_dir rxe_sweep
}

# Normal runs: what must pass after an armed one.
rc_normal() {
	printf 'role=loopback,size=4096,validate' >"$RC" && rc_ok
}
mcast_normal() {
	printf 'role=both,group=239.1.1.1,qps=2,count=3' >"$MC" && mcast_ok
}
bench_normal() {
	local f=${1:-$BENCH}
	printf 'test=write_bw,size=4096,iters=100' >"$f" && bench_ok "$f"
}
attach_normal() {
	printf 'attach 239.3.0.1' >"$MC" && attached && printf 'detach 239.3.0.1' >"$MC"
}

# Preparations and cleanups around armed runs.
detach_quiet() {
	printf 'detach 239.3.0.1' >"$MC" 2>/dev/null
	return 0
}
attach_first() {
	printf 'attach 239.3.0.1' >"$MC"
}
unload_quiet() {
	kv_loaded && kv_unload
	return 0
}
# Before an armed load of the example: the layer it needs, loaded anew.
unload_to_layer() {
	unload_quiet && kv_unload_layer && kv_load_layer
}
load_normal() {
	unload_quiet && kv_load && quiet_drain_fault && loaded
}
sweep_dev_del() {
	[ -e /sys/class/infiniband/rxe_sweep ] && kv_rxe_del rxe_sweep
	return 0
}
veth_up() {
	[ -e /sys/class/net/kvsw0 ] || ip link add kvsw0 type veth peer name kvsw1 || return 1
	ip link set kvsw0 up && ip link set kvsw1 up
}
rxe_normal() {
	sweep_dev_del && kv_rxe_add rxe_sweep kvsw0 && kv_wait rxe_added && sweep_dev_del
}

# point_logged PATTERN: the kernel logged PATTERN since the current
# sweep point's marker.
point_logged() {
	dmesg | sed -n "/$SW_MARK\$/,\$p" | grep -q -- "$1"
}

# sweep NAME PREP CHECK CLEAN NORMAL OP...: the sweep of one operation
# (kv_fail_nth's OP...). A first run armed far beyond the operation counts
# its points; then N = 1, 1 + STRIDE, ... and the last point are armed in
# turn: every point in stress mode, about 8 otherwise. PREP runs before
# each run, CHECK judges a success, CLEAN runs after it, NORMAL is the run
# that must pass afterwards (after every point in stress mode, after every
# 4th point and at the end otherwise).
sweep() {
	local name=$1 prep=$2 check=$3 clean=$4 normal=$5
	shift 5
	local total stride n=1 out err inj left points=0 refused=0 absorbed=0 errnos="" last=0
	SW_MARK="kverbs-sweep: $name count"
	echo "$SW_MARK" >/dev/kmsg
	$prep || { kv_msg "$name: preparing the count failed"; return 1; }
	out=$(kv_fail_nth 1000000 "$@") || { kv_msg "$name: kv_fail_nth: $out"; return 1; }
	read -r _ err _ inj _ left <<<"$out"
	if [ "$err" != 0 ] || [ "$inj" != 0 ] || ! $check; then
		kv_msg "$name: the counting run failed (errno $err)"
		return 1
	fi
	$clean
	total=$((1000000 - left))
	# A sweep that arms nothing proves nothing: the operation must pass
	# fault-injection points (fail-nth and the filters working).
	if [ "$total" -le 0 ]; then
		kv_msg "$name: the counting run passed no fault-injection point ($total)"
		return 1
	fi
	stride=1
	[ $FULL = 1 ] || stride=$(( total / 8 > 1 ? total / 8 : 1 ))
	while :; do
		SW_MARK="kverbs-sweep: $name point $n"
		echo "$SW_MARK" >/dev/kmsg
		quiet_drain_fault
		$prep || { kv_msg "$name: preparing point $n failed"; return 1; }
		out=$(kv_fail_nth "$n" "$@") || { kv_msg "$name: kv_fail_nth: $out"; return 1; }
		read -r _ err _ inj _ left <<<"$out"
		if [ "$inj" = 0 ]; then
			# Point N was never reached: the operation ran through.
			if [ "$err" != 0 ] || ! $check; then
				kv_msg "$name: the run past the last point failed (errno $err)"
				return 1
			fi
			$clean
			break
		fi
		points=$((points + 1))
		if [ "$err" = 0 ]; then
			# The failure was absorbed: the result must still be right.
			if ! $check; then
				kv_msg "$name: point $n failed, the operation succeeded with a wrong result"
				return 1
			fi
			absorbed=$((absorbed + 1))
		else
			refused=$((refused + 1))
			case " $errnos " in *" $err "*) ;; *) errnos="$errnos $err" ;; esac
		fi
		$clean
		if [ $FULL = 1 ] || [ $((points % 4)) = 0 ]; then
			$normal || { kv_msg "$name: the normal run after point $n failed"; return 1; }
		fi
		# The last point is always armed; past it, the run goes through.
		if [ $n -ge "$total" ]; then
			n=$((n + 1))
		elif [ $((n + stride)) -gt "$total" ] && [ $last = 0 ]; then
			n=$total last=1
		else
			n=$((n + stride))
		fi
	done
	$normal || { kv_msg "$name: the last normal run failed"; return 1; }
	kv_msg "$name: $total points, $points armed (stride $stride), $refused ended with an errno (${errnos# }), $absorbed absorbed"
	if [ "$points" -le 0 ]; then
		kv_msg "$name: no armed run reached its point"
		return 1
	fi
	echo "sweep $name $points $total $refused $absorbed" >>"$SUMMARY"
	if [ $FULL = 1 ]; then
		kv_kmemleak_check || return 1
	fi
}

# The RC example against the userspace peer (rc_peer, RDMA_RC_example's
# protocol; rxe_lo's GID 1 is ::ffff:127.0.0.1) and over rdma_cm against
# rping (rxe_dummy). The peer starts before each run and is stopped after.
PEER_PID=
RCD=$KV_DEBUGFS/rxe_dummy/rc
RC_SERVER="role=server,size=4096,gid_idx=1,validate,timeout_ms=3000"
RC_CLIENT="role=client,addr=127.0.0.1,size=4096,gid_idx=1,validate,timeout_ms=3000"
CM_SERVER="role=cm_server,addr=169.254.1.1,size=64,validate,timeout_ms=3000"
peer_stop() {
	[ -n "$PEER_PID" ] && kill "$PEER_PID" 2>/dev/null
	[ -n "$PEER_PID" ] && wait "$PEER_PID" 2>/dev/null
	PEER_PID=
	# The retry loops' peers themselves.
	kill_peers rc_peer rping srq_peer
	return 0
}

# kill_peers NAME...: SIGTERM to every process whose command name
# (/proc/PID/comm) is a NAME, as killall(1), found by the shell itself:
# this runs at every sweep point, and a process costs 0.1 s under TCG.
kill_peers() {
	local f c pid
	for f in /proc/[0-9]*/comm; do
		{ read -r c <"$f"; } 2>/dev/null || continue
		[[ " $* " == *" $c "* ]] || continue
		pid=${f#/proc/}
		kill "${pid%/comm}" 2>/dev/null
	done
	return 0
}
# write_alone FILE STRING: a write from a process of its own. This shell
# has the peer as a child: its exit (SIGCHLD, which bash handles) would
# interrupt a run written from here (EINTR), as any signal does.
write_alone() {
	[ "$(kv_fail_nth 0 write "$1" "$2")" = "errno 0 injected 0 left 0" ]
}
# A client retried (for 3 s) until the server here listens.
rc_peer_client() {
	(for _ in {1..15}; do
		rc_peer -d rxe_lo -g 1 -s 4096 -v 127.0.0.1 >/dev/null 2>&1 && exit 0
		sleep 0.2
	done) &
	PEER_PID=$!
}
rc_peer_server() {
	rc_peer -d rxe_lo -g 1 -s 4096 -v >/dev/null 2>&1 &
	PEER_PID=$!
	# Listening on 19875 (0x4DA3) before the client here connects.
	kv_wait grep -q ":4DA3 00000000:0000 0A" /proc/net/tcp
}
rping_client() {
	(for _ in {1..15}; do
		rping -c -a 169.254.1.1 -C 3 -S 64 -V >/dev/null 2>&1 && exit 0
		sleep 0.2
	done) &
	PEER_PID=$!
}
rc_server_normal() {
	rc_peer_client && write_alone "$RC" "$RC_SERVER" && rc_ok && peer_stop
}
rc_client_normal() {
	rc_peer_server && write_alone "$RC" "$RC_CLIENT" && rc_ok && peer_stop
}
cm_ok() {
	grep -q "^result: ok" "$RCD" && grep -qx "pings: 3" "$RCD"
}
cm_normal() {
	rping_client && write_alone "$RCD" "$CM_SERVER" && cm_ok && peer_stop
}
# The SRQ example's server (2 QPs on one SRQ) against srq_peer.
SRQ_SERVER="role=server,addr=169.254.1.1,qps=2,max_wr=8,count=20,size=256,timeout_ms=3000"
srq_peer_client() {
	(for _ in {1..15}; do
		srq_peer -q 2 -w 8 -c 20 -s 256 169.254.1.1 >/dev/null 2>&1 && exit 0
		sleep 0.2
	done) &
	PEER_PID=$!
}
srq_ok() {
	grep -q "^result: ok" "$SRQ" && grep -q "^srq: ok: 20 messages" "$SRQ"
}
srq_normal() {
	srq_peer_client && write_alone "$SRQ" "$SRQ_SERVER" && srq_ok && peer_stop
}
sweep_srq_server() {
	sweep srq_server_srq_peer_client srq_peer_client srq_ok peer_stop srq_normal write "$SRQ" "$SRQ_SERVER"
}
sweep_rc_server() {
	sweep rc_server_rc_peer_client rc_peer_client rc_ok peer_stop rc_server_normal write "$RC" "$RC_SERVER"
}
sweep_rc_client() {
	sweep rc_client_rc_peer_server rc_peer_server rc_ok peer_stop rc_client_normal write "$RC" "$RC_CLIENT"
}
sweep_rc_cm_server() {
	sweep rc_cm_server_rping_client rping_client cm_ok peer_stop cm_normal write "$RCD" "$CM_SERVER"
}

sweep_rc_loopback() {
	sweep rc_loopback : rc_ok : rc_normal write "$RC" "role=loopback,size=4096,validate"
}
sweep_mcast_both() {
	sweep mcast_both : mcast_ok : mcast_normal write "$MC" "role=both,group=239.1.1.1,qps=2,count=3"
}
# A fresh rxe_dummy, so that an attach by hand creates its UD QP again.
fresh_dummy() {
	kv_rxe_del rxe_dummy && kv_rxe_add rxe_dummy dummy0 && kv_wait test -e "$MC"
}
sweep_mcast_attach() {
	sweep mcast_attach fresh_dummy attached detach_quiet attach_normal write "$MC" "attach 239.3.0.1"
}
sweep_mcast_detach() {
	sweep mcast_detach attach_first detached detach_quiet attach_normal write "$MC" "detach 239.3.0.1"
}
sweep_bench() {
	sweep bench_write_bw : bench_ok : bench_normal write "$BENCH" "test=write_bw,size=4096,iters=100"
}
sweep_module_load() {
	sweep module_load unload_to_layer loaded : load_normal insmod "$KV_MODDIR/$KV_MOD.ko"
}
# Only the points under the module's code (its add callback and the verbs
# it calls): rxe's own registration has some 14,000 more. failslab's stack
# filter (FAULT_INJECTION_STACKTRACE_FILTER) takes the module's address
# range (fail_page_alloc's the same); fail-nth counts only what they
# let through. The example's range: the layer's calls (kverbs.ko) from its
# add callback have the callback on their stack too.
filter_module() {
	local base size f
	base=$(awk -v m="$KV_MOD" '$1 == m { print $6 }' /proc/modules)
	size=$(cat "/sys/module/$KV_MOD/coresize")
	if [ -z "$base" ] || [ $((base)) = 0 ]; then
		kv_msg "no address of $KV_MOD"
		return 1
	fi
	# Kernel addresses overflow bash's signed arithmetic; %u prints them.
	for f in "$FAILSLAB" "$FAILPAGE"; do
		printf '%u' $((base)) >"$f/require-start" &&
			printf '%u' $((base + size)) >"$f/require-end" || return 1
	done
}
filter_none() {
	local f
	for f in "$FAILSLAB" "$FAILPAGE"; do
		echo 0 >"$f/require-start"
		echo 18446744073709551615 >"$f/require-end"
	done
}
sweep_device_add() {
	local r=0
	veth_up && filter_module || return 1
	sweep device_add sweep_dev_del rxe_added sweep_dev_del rxe_normal rxe rxe_sweep kvsw0 || r=1
	filter_none
	return $r
}

# The fuzzers (kv_fuzz, one per control file) run at once, each in the
# background with its output in $FUZZ_DIR: their runs overlap as a user's
# would, and the waits of the accepted strings (a server waiting for its
# peer, a run until the 1 s alarm) overlap too. A write that runs longer
# than 1 s is interrupted by SIGALRM: the control files end a run on a
# signal, with EINTR.
FUZZ_DIR=/tmp/kv_fuzz
# The errnos each control file may give the fuzzer (kv_fuzz fails on any
# other): Documentation/ABI/testing/debugfs-kverbs's lists, and the
# refusals up front of Documentation/kverbs.rst ("Device kinds") and of
# the bad_input cases, without ECANCELED and ENODEV of a device's removal
# (none is removed while they run). EINTR: the 1 s alarm.
# rc on rxe_lo: ENODATA (gid_idx of an empty GID entry), ENETUNREACH
# (gid_idx=0 on lo), ENODEV (rdma_cm on lo, role=cm_*).
FUZZ_ERRNOS_RC=EINVAL,ERANGE,EBUSY,EINTR,ETIMEDOUT,ECONNREFUSED,EHOSTUNREACH,ECONNRESET,EIO,ENODATA,ENETUNREACH,ENODEV
# mcast on rxe_dummy: attach and detach by hand give EEXIST and ENOENT.
FUZZ_ERRNOS_MCAST=EINVAL,ERANGE,EMSGSIZE,EOPNOTSUPP,EBUSY,EINTR,ETIMEDOUT,EIO,EEXIST,ENOENT
# bench on rxe_lo: bad input (EINVAL, ERANGE), EBUSY, ETIMEDOUT, EINTR,
# and what a TCP exchange (role=server, client) gives, as rc's.
FUZZ_ERRNOS_BENCH=EINVAL,ERANGE,EBUSY,EINTR,ETIMEDOUT,ECONNREFUSED,EHOSTUNREACH,ECONNRESET,EPROTO,EIO
# srq on rxe_dummy: as rc's, rdma_cm's ECONNREFUSED and ETIMEDOUT.
FUZZ_ERRNOS_SRQ=EINVAL,ERANGE,EBUSY,EINTR,ETIMEDOUT,ECONNREFUSED,EIO
# fuzz_start NAME FILE ERRNOS KEYS VALID...: one fuzzer, in the background.
fuzz_start() {
	local name=$1 file=$2 errnos=$3 count=200
	shift 3
	[ $FULL = 1 ] && count=10000
	(
		KV_FUZZ_ALARM=1 KV_FUZZ_ERRNOS=$errnos kv_fuzz "$SEED" "$count" "$file" "$@" \
			>"$FUZZ_DIR/$name.out" 2>&1
		echo $? >"$FUZZ_DIR/$name.rc"
	) &
}
fuzz_all() {
	local name r=0
	rm -rf "$FUZZ_DIR" && mkdir -p "$FUZZ_DIR" || return 1
	fuzz_start rc "$RC" "$FUZZ_ERRNOS_RC" role,size,iters,mtu,poll,gid_idx,addr,port,timeout_ms,validate,imm,atomics,linger \
		"role=loopback,size=64,validate" "role=loopback,iters=3,size=4096,mtu=1024,poll=direct" \
		"role=server,port=19999,timeout_ms=200" "role=client,addr=127.0.0.1,port=19999,timeout_ms=200" \
		"role=loopback,size=64,atomics=2" "role=cm_client,addr=127.0.0.1,timeout_ms=200"
	fuzz_start mcast "$MC" "$FUZZ_ERRNOS_MCAST" role,group,count,size,qps,timeout_ms \
		"role=both,group=239.1.1.1,qps=2,count=2" "attach 239.3.0.1" "detach 239.3.0.1" \
		"role=receiver,group=ff0e::1:2,count=1,timeout_ms=200" "role=sender,group=239.1.1.2,count=2"
	fuzz_start bench "$BENCH" "$FUZZ_ERRNOS_BENCH" test,size,sizes,iters,tx_depth,cq_mod,qps,bidir,mtu,poll,inline,role,addr,port,timeout_ms \
		"test=write_bw,size=64,iters=50" "test=read_lat,size=8,iters=20" \
		"test=send_bw,size=1024,iters=20,qps=2,bidir" "test=write_bw,role=server,port=18600,timeout_ms=200"
	fuzz_start srq "$SRQ" "$FUZZ_ERRNOS_SRQ" role,addr,port,qps,max_wr,count,size,srq_limit,timeout_ms \
		"role=server,addr=169.254.1.1,qps=1,max_wr=4,count=4,size=64,timeout_ms=200" \
		"role=client,addr=169.254.1.1,qps=2,max_wr=8,count=8,size=256,timeout_ms=200"
	wait
	for name in rc mcast bench srq; do
		[ -f "$FUZZ_DIR/$name.rc" ] || { kv_msg "the $name fuzzer did not finish"; r=1; }
	done
	return $r
}

# fuzz_result NAME: what NAME's fuzzer found (only success or an errno of
# its list), then a valid run (NORMAL, the function named after NAME).
fuzz_result() {
	local name=$1 out
	out=$(cat "$FUZZ_DIR/$name.out") || return 1
	echo "$out" | kv_diag
	[ "$(cat "$FUZZ_DIR/$name.rc")" = 0 ] || return 1
	echo "$out" | awk -v n="$name" '{
		for (i = 2; i <= NF; i++) {
			if ($i == "strings") c = $(i - 1)
			if ($i == "accepted,") a = $(i - 1)
			if ($i == "refused") r = $(i - 1)
		}
		print "fuzz", n, c, a, r
	}' >>"$SUMMARY"
	# Leave nothing attached by hand, then a run must pass.
	for g in 239.3.0.1 239.1.1.1 ff0e::1:2; do
		printf 'detach %s' "$g" >"$MC" 2>/dev/null
	done
	case $name in
	rc) rc_normal ;;
	srq) srq_normal ;;
	mcast) mcast_normal ;;
	bench) bench_normal ;;
	esac || { kv_msg "the valid run after fuzzing $name failed"; return 1; }
	if [ $FULL = 1 ]; then
		kv_kmemleak_check || return 1
	fi
}

# removal_loop I: a run that does not end on one device (the victim) and
# a bounded, validated one on the other; at a seeded random moment the
# victim goes away (rdma link del; for rxe_dummy also dummy0 deleted, or
# both). The victim's run is rc loopback (rxe_lo) or mcast (rxe_dummy),
# or bench in every other pair of loops (2, 3, 6, 7, ...). It ends with
# ECANCELED (or EINTR; ENETDOWN when only the netdev went) within 5 s of
# the removal's start, the other run passes; the victim comes back and a
# validated run of the same kind passes.
removal_loop() {
	local i=$1 victim how delay r=0 t0 took removal vpid opid verr vfile vrun bench
	victim=$(( (SEED + i * 7919) % 2 ))
	how=$(( (SEED + i * 104729) % 3 ))
	delay=$(( (SEED * 31 + i * 17) % 10 ))
	bench=$(( (i / 2) % 2 ))
	if [ "$victim" = 0 ]; then
		how=0	# lo cannot be deleted
		vfile=$RC vrun='role=loopback,size=65536,iters=1000000,timeout_ms=20000'
		(printf 'role=both,group=239.1.1.1,qps=2,count=100' >"$MC") 2>/tmp/rm_other.err &
		opid=$!
	else
		vfile=$MC vrun='role=both,group=239.1.4.1,qps=2,count=1000,timeout_ms=20000'
		(printf 'role=loopback,size=65536,iters=50,validate' >"$RC") 2>/tmp/rm_other.err &
		opid=$!
	fi
	if [ $bench = 1 ]; then
		vfile=$KV_DEBUGFS/$(basename "$(dirname "$vfile")")/bench
		vrun='test=write_bw,size=65536,iters=131072,timeout_ms=20000'
	fi
	# The victim notes when its write returned: the bound is on the run,
	# not on how long the removal commands themselves take to return.
	rm -f /tmp/rm_victim.end
	(
		(printf '%s' "$vrun" >"$vfile") 2>/tmp/rm_victim.err
		st=$?
		# Without a fork: under load, starting cut took a share of the
		# bound that was not the run's.
		read -r up _ </proc/uptime
		echo "$up" >/tmp/rm_victim.end
		echo "kverbs-selftest: loop $i: the victim's write returned" >/dev/kmsg
		exit $st
	) &
	vpid=$!
	kv_wait grep -q "^status: running" "$vfile" || { kv_msg "loop $i: the run on $vfile did not start"; r=1; }
	sleep "0.$delay"
	read -r t0 _ </proc/uptime
	echo "kverbs-selftest: loop $i: removal of victim $victim (how $how) begins" >/dev/kmsg
	case "$victim.$how" in
	0.*) kv_rxe_del rxe_lo || r=1 ;;
	1.0) kv_rxe_del rxe_dummy || r=1 ;;
	1.1) ip link del dummy0 || r=1 ;;
	1.2) kv_rxe_del rxe_dummy && ip link del dummy0 || r=1 ;;
	esac
	removal=$(kv_secs_since "$t0")
	wait $vpid && { kv_msg "loop $i: the victim's run finished"; r=1; }
	[ -s /tmp/rm_victim.end ] || { kv_msg "loop $i: the victim noted no end"; return 1; }
	took=$(awk -v a="$t0" -v b="$(cat /tmp/rm_victim.end)" 'BEGIN { printf "%.1f", b - a }')
	kv_msg "loop $i: $(basename "$vfile") on $(basename "$(dirname "$vfile")") (how $how) ended $took s after the removal began; the removal commands returned after $removal s"
	verr=$(cat /tmp/rm_victim.err)
	# With only its netdev deleted the port goes down at once and the
	# device later: the run ends with ENETDOWN or ECANCELED, whichever
	# comes first.
	case "$how.$verr" in
	*"Operation canceled"* | *Interrupted* | *"No such device"*) ;;
	1.*"Network is down"*) ;;
	*) kv_msg "loop $i: the victim's run ended with: $verr"; r=1 ;;
	esac
	if awk -v t="$took" 'BEGIN { exit !(t >= 5) }'; then
		kv_msg "loop $i: the victim's run took $took s to end; the kernel's log since the removal began:"
		dmesg | sed -n "/kverbs-selftest: loop $i: removal/,\$p" | head -n 30 | kv_diag
		r=1
	fi
	wait $opid || { kv_msg "loop $i: the other run failed: $(cat /tmp/rm_other.err)"; r=1; }
	if [ "$victim" = 0 ]; then mcast_ok || r=1; else rc_ok || r=1; fi
	# The victim back (its removal is asynchronous when its netdev went).
	kv_wait test ! -e /sys/class/infiniband/rxe_dummy -o -e /sys/class/net/dummy0 || r=1
	[ -e /sys/class/net/dummy0 ] || { kv_dummy_up && ip link set dummy0 multicast on; } || r=1
	[ -e /sys/class/infiniband/rxe_lo ] || kv_rxe_add rxe_lo lo || r=1
	[ -e /sys/class/infiniband/rxe_dummy ] || kv_rxe_add rxe_dummy dummy0 || r=1
	kv_wait test -d "$KV_DEBUGFS/rxe_lo" && kv_wait test -d "$KV_DEBUGFS/rxe_dummy" || r=1
	case "$victim.$bench" in
	0.0) rc_normal ;;
	1.0) mcast_normal ;;
	*) bench_normal "$vfile" ;;
	esac || { kv_msg "loop $i: the run on $vfile after failed"; r=1; }
	[ $r = 0 ] || kv_msg "loop $i: victim $victim ($vfile), how $how, after 0.$delay s"
	[ $r = 0 ] && echo "removed $(basename "$vfile") $how" >>"$SUMMARY"
	return $r
}

removal_under_traffic() {
	local loops=3 i
	[ $FULL = 1 ] && loops=50
	for ((i = 1; i <= loops; i++)); do
		removal_loop "$i" || return 1
	done
	kv_msg "$loops removal loops survived"
	echo "removal loops $loops" >>"$SUMMARY"
	# Then rmmod with devices present, and back.
	kv_unload && kv_load && quiet_drain_fault && loaded
}

# Writers on one control file: one runs, the other three get EBUSY;
# readers while it runs; a run on the other device at the same time
# passes. The four write the same server run at once: whichever gets in
# waits for its client, which starts only once all four have written, so
# the run cannot end before the others have tried (however slow the
# machine); then the client comes and that run passes.
concurrent_writers() {
	local pids="" r=0 i busy=0 ok=0 p server="role=server,size=4096,gid_idx=1,validate,timeout_ms=60000"
	for i in 1 2 3 4; do
		(printf '%s' "$server" >"$RC") 2>"/tmp/cw.$i" &
		pids="$pids $!"
	done
	(printf 'role=both,group=239.1.1.1,qps=2,count=3' >"$MC") 2>/tmp/cw.mc &
	local mc=$!
	for _ in {1..20}; do cat "$RC" >/dev/null || r=1; done
	# The three that lost have ended (EBUSY at once); the winner waits.
	for _ in {1..100}; do
		busy=0
		for i in 1 2 3 4; do grep -q "Device or resource busy" "/tmp/cw.$i" && busy=$((busy + 1)); done
		[ $busy -ge 3 ] && break
		sleep 0.1
	done
	grep -q "^status: running" "$RC" || { kv_msg "no run is in progress"; r=1; }
	rc_peer_client
	for p in $pids; do
		if wait "$p"; then ok=$((ok + 1)); fi
	done
	peer_stop
	wait $mc || { kv_msg "the mcast run beside failed: $(cat /tmp/cw.mc)"; r=1; }
	busy=0
	for i in 1 2 3 4; do grep -q "Device or resource busy" "/tmp/cw.$i" && busy=$((busy + 1)); done
	kv_msg "4 writers: $ok ran, $busy got EBUSY"
	if [ $ok != 1 ] || [ $busy != 3 ]; then
		kv_msg "want 1 run and 3 EBUSY"
		r=1
	fi
	rc_ok || { kv_msg "the run that ran did not pass"; kv_diag <"$RC"; r=1; }
	return $r
}

# The control files are root's: a writer without root's IDs gets EACCES,
# and no file of the module is writable by group or others. debugfs is
# mounted 0700 (no mode=): that alone refuses everyone but root, whatever
# the files' modes. For this case it is mounted 0755, so that the files'
# own modes are what refuses (a non-root reader then reads info, 0444),
# and 0700 again after.
root_only() {
	local r=0
	mount -o remount,mode=755 /sys/kernel/debug || { kv_msg "remounting debugfs 0755 failed"; return 1; }
	root_only_modes || r=1
	mount -o remount,mode=700 /sys/kernel/debug || { kv_msg "remounting debugfs 0700 failed"; r=1; }
	return $r
}
root_only_modes() {
	local f err r=0 loose
	kv_load_selftest || { kv_msg "loading $KV_SELFTEST failed"; return 1; }
	kv_as_user 65534 cat "$KV_DEBUGFS/rxe_lo/info" >/dev/null ||
		{ kv_msg "a non-root reader cannot read info: debugfs still refuses by its mount"; return 1; }
	for f in "$RC" "$MC" "$BENCH" "$KV_SELFTEST_DEBUGFS/selftest" \
		$(find "$KV_SYSFS" "$KV_DEBUGFS" "$KV_SELFTEST_DEBUGFS" -type f -perm /222); do
		if err=$(kv_as_user 65534 bash -c "printf 'role=loopback' >'$f'" 2>&1); then
			kv_msg "$f: a non-root write was accepted"
			r=1
		fi
		case $err in
		*"Permission denied"*) ;;
		*) kv_msg "$f: $err"; r=1 ;;
		esac
	done
	loose=$(find "$KV_SYSFS" "$KV_DEBUGFS" "$KV_SELFTEST_DEBUGFS" -perm /022)
	[ -z "$loose" ] || { kv_msg "writable by group or others: $loose"; r=1; }
	rmmod "$KV_SELFTEST" || { kv_msg "unloading $KV_SELFTEST failed"; r=1; }
	return $r
}

summary() {
	local sweeps points fuzzed leaks splats
	kv_msg "summary (seed $SEED, $([ $FULL = 1 ] && echo stress || echo check)):"
	awk '
		$1 == "sweep" { printf "  sweep %-16s %5d points armed of %5d, %5d errno, %3d absorbed\n", $2, $3, $4, $5, $6 }
		$1 == "fuzz" { printf "  fuzz  %-16s %5d strings, %5d accepted, %5d refused\n", $2, $3, $4, $5 }
		$1 == "removal" { printf "  removal loops survived: %d\n", $3 }
		$1 == "removed" { runs[$2]++; hows[$3]++; removed++ }
		END {
			if (removed)
				printf "  runs removed under: rc %d, mcast %d, bench %d; by rdma link del %d, netdev del %d, both %d\n",
					runs["rc"], runs["mcast"], runs["bench"], hows[0], hows[1], hows[2]
		}
	' "$SUMMARY" | kv_diag
	sweeps=$(grep -c "^sweep" "$SUMMARY")
	points=$(awk '$1 == "sweep" { s += $3 } END { print s + 0 }' "$SUMMARY")
	fuzzed=$(awk '$1 == "fuzz" { s += $3 } END { print s + 0 }' "$SUMMARY")
	# Leaks and kernel reports of the whole program so far (warn_alloc's
	# reports of injected failures aside).
	echo scan >"$KV_KMEMLEAK"
	echo scan >"$KV_KMEMLEAK"
	leaks=$(kv_kmemleak_ours | grep -c "^unreferenced object")
	splats=$(dmesg | sed -n '/kverbs-selftest: begin setup_rxe_lo_rxe_dummy_and_load$/,$p' |
		kv_drop_alloc_warnings | grep -cE "$KV_SPLAT")
	kv_msg "  $sweeps sweeps, $points points armed, $fuzzed strings fuzzed, leaks $leaks, splats $splats"
	[ "$leaks" = 0 ] && [ "$splats" = 0 ]
}

# wanted NAME...: whether ONLY (when set) takes one of the NAMEs.
wanted() {
	local n
	[ -z "$ONLY" ] && return 0
	for n; do
		grep -qE -- "$ONLY" <<<"$n" && return 0
	done
	return 1
}

# part NAME FUNC...: kv_case NAME FUNC..., unless ONLY leaves NAME out.
# PART_ALSO: names of later cases that need this one (the fuzzers all run
# in fuzz_four_control_files_at_once; fuzz_rc_control_input reports rc's).
part() {
	# shellcheck disable=SC2086 # a list of names
	if ! wanted "$1" ${PART_ALSO-}; then
		ktap_test_skip "$1 (not in ONLY=$ONLY)"
		return 0
	fi
	kv_case "$@"
}

# Injected allocation failures make the page and vmalloc allocators warn.
KV_ALLOC_WARNINGS_OK=1
kv_begin 22
kv_case setup_rxe_lo_rxe_dummy_and_load setup
part sweep_alloc_failure_rc_loopback sweep_rc_loopback
part sweep_alloc_failure_rc_server_userspace_client sweep_rc_server
part sweep_alloc_failure_rc_client_userspace_server sweep_rc_client
part sweep_alloc_failure_rc_cm_server_rping_client sweep_rc_cm_server
part sweep_alloc_failure_srq_server_srq_peer_client sweep_srq_server
part sweep_alloc_failure_mcast_both sweep_mcast_both
part sweep_alloc_failure_mcast_attach sweep_mcast_attach
part sweep_alloc_failure_mcast_detach sweep_mcast_detach
part sweep_alloc_failure_bench_write_bw sweep_bench
part sweep_alloc_failure_module_load sweep_module_load
part sweep_alloc_failure_device_add sweep_device_add
PART_ALSO="fuzz_rc_control_input fuzz_mcast_control_input fuzz_bench_control_input fuzz_srq_control_input" \
	part fuzz_four_control_files_at_once fuzz_all
part fuzz_rc_control_input fuzz_result rc
part fuzz_mcast_control_input fuzz_result mcast
part fuzz_bench_control_input fuzz_result bench
part fuzz_srq_control_input fuzz_result srq
part removal_under_traffic_two_devices removal_under_traffic
part concurrent_writers_one_runs_others_ebusy concurrent_writers
part control_files_refuse_non_root_writer root_only
kv_case summary_table summary
kv_end
