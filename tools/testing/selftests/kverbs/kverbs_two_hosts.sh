#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The RC example between two kernels: this VM (169.254.10.1) and a peer VM
# (169.254.10.2) that tools/vm/run.sh boots beside it, joined by a QEMU
# socket netdev, each with rxe on its eth0. Kernel server in one, kernel
# client in the other, both ways; the userspace peer against the kernel
# across the wire; every payload validated on both sides; the peer's kernel
# log and kmemleak checked too.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

HERE=169.254.10.1
THERE=169.254.10.2
RC=$KV_DEBUGFS/rxe_eth/rc
BENCH=$KV_DEBUGFS/rxe_eth/bench

if [ ! -e /sys/class/net/eth0 ]; then
	ktap_print_header
	ktap_skip_all "no second VM (run by tools/vm/run.sh with KVERBS_TWO_HOSTS=1)"
	exit "$KSFT_SKIP"
fi

# peer CMD: kv_peer's.
peer() {
	kv_peer "$1"
}

peer_ready() {
	peer true >/dev/null 2>&1
}

setup() {
	kv_wait ip addr show dev eth0 | grep -q "$HERE" || return 1
	kv_rxe_add rxe_eth eth0 || return 1
	ip link set eth0 multicast on
	kv_load || return 1
	# The peer boots beside us: give it up to a minute.
	for _ in {1..60}; do
		peer_ready && break
		sleep 1
	done
	peer_ready || { kv_msg "the peer VM does not answer"; return 1; }
	peer "rdma link show; ip -br addr show dev eth0" | kv_diag
	peer "echo kverbs-selftest: begin two_hosts >/dev/kmsg"
}

# The GID index of an IPv4 address on a device's port 1.
gid_index_of() {
	local dev=$1 addr=$2 hex g
	local IFS=.
	# shellcheck disable=SC2086 # split the address at its dots
	set -- $addr
	unset IFS
	hex=$(printf '%02x%02x:%02x%02x' "$1" "$2" "$3" "$4")
	for g in "/sys/class/infiniband/$dev/ports/1/gids/"*; do
		if [ "$(cat "$g" 2>/dev/null)" = "0000:0000:0000:0000:0000:ffff:$hex" ]; then
			basename "$g"
			return 0
		fi
	done
	return 1
}

# kernel_client_here SIZE: our kernel client against the peer's kernel server.
kernel_to_kernel_client_here() {
	local size=$1 opts=${2:-} r=0 out
	peer "bash -c \"printf 'role=server,size=$size,validate,timeout_ms=20000$opts' >$RC\" >/dev/null 2>&1 &" >/dev/null
	for _ in {1..50}; do
		printf '%s' "role=client,addr=$THERE,size=$size,validate$opts" >"$RC" 2>/tmp/run.err && break
		grep -q "Connection refused" /tmp/run.err || break
		sleep 0.2
	done
	kv_diag <"$RC"
	grep -q "^result: ok" "$RC" || { kv_msg "client: $(cat /tmp/run.err)"; r=1; }
	grep -qx "Message is: 'SEND operation      '" "$RC" || r=1
	grep -qx "Contents of server's buffer: 'RDMA read operation '" "$RC" || r=1
	# The peer's server finishes right after the last sync.
	for _ in {1..20}; do
		out=$(peer "cat $RC")
		grep -q "^result:" <<<"$out" && break
		sleep 0.5
	done
	echo "$out" | kv_diag
	grep -q "^result: ok" <<<"$out" || r=1
	grep -qx "Contents of server buffer: 'RDMA write operation'" <<<"$out" || r=1
	grep -q "^validate: ok" <<<"$out" || r=1
	case $opts in
	*atomics=*)
		grep -q "^atomics: ok: ${opts##*atomics=} fetch-and-adds and 2 compare-and-swaps" "$RC" || r=1
		grep -q "^atomics: ok: the server's 8 bytes hold 'kverbs!!'" <<<"$out" || r=1
		;;
	esac
	return $r
}

kernel_to_kernel_server_here() {
	local size=$1 r=0 out
	bash -c "printf '%s' 'role=server,size=$size,validate,timeout_ms=20000' >$RC" 2>/tmp/run.err &
	local pid=$!
	kv_wait grep -q "^status: running" "$RC"
	sleep 1
	out=$(peer "printf 'role=client,addr=$HERE,size=$size,validate' >$RC; cat $RC")
	echo "$out" | kv_diag
	wait $pid || { kv_msg "server: $(cat /tmp/run.err)"; r=1; }
	kv_diag <"$RC"
	grep -q "^result: ok" <<<"$out" || r=1
	grep -qx "Message is: 'SEND operation      '" <<<"$out" || r=1
	grep -qx "Contents of server's buffer: 'RDMA read operation '" <<<"$out" || r=1
	grep -q "^result: ok" "$RC" || r=1
	grep -qx "Contents of server buffer: 'RDMA write operation'" "$RC" || r=1
	return $r
}

userspace_here_kernel_there() {
	local r=0 out gid
	gid=$(gid_index_of rxe_eth $HERE) || { kv_msg "no GID for $HERE"; return 1; }
	peer "bash -c \"printf 'role=server,validate,timeout_ms=20000' >$RC\" >/dev/null 2>&1 &" >/dev/null
	for _ in {1..50}; do
		out=$(rc_peer -d rxe_eth -g "$gid" -v $THERE 2>&1) && break
		grep -q "connect failed" <<<"$out" || break
		sleep 0.2
	done
	echo "$out" | kv_diag
	grep -qx "test result is 0" <<<"$out" || r=1
	grep -qx "Message is: 'SEND operation      '" <<<"$out" || r=1
	for _ in {1..20}; do
		out=$(peer "cat $RC")
		grep -q "^result:" <<<"$out" && break
		sleep 0.5
	done
	grep -q "^result: ok" <<<"$out" || { echo "$out" | kv_diag; r=1; }
	grep -qx "Contents of server buffer: 'RDMA write operation'" <<<"$out" || r=1
	return $r
}

MC=$KV_DEBUGFS/rxe_eth/mcast

# Multicast across the wire: receivers (2 QPs) in the peer VM, the sender
# here; with role=both here, receivers in both VMs at once.
mcast_across() {
	local role=$1 group=$2 r=0 out
	peer "ip link set eth0 multicast on; bash -c \"printf 'role=receiver,group=$group,qps=2,count=5,timeout_ms=30000' >$MC\" >/dev/null 2>&1 &" >/dev/null
	for _ in {1..50}; do
		peer "grep -q '^status: running' $MC" >/dev/null && break
		sleep 0.2
	done
	sleep 1
	printf '%s' "role=$role,group=$group,qps=2,count=5" >"$MC" || { kv_msg "local run failed"; r=1; }
	kv_diag <"$MC"
	# A read during the peer's run shows "status: running" and the report
	# of the run before (the previous case's): wait for this run to end
	# (its receivers' timeout_ms is 30 s), then read its report.
	for _ in {1..80}; do
		out=$(peer "cat $MC")
		grep -q "^status: running" <<<"$out" || break
		sleep 0.5
	done
	echo "$out" | kv_diag
	grep -q "^status: running" <<<"$out" && { kv_msg "the peer's run did not end"; r=1; }
	grep -q "^result: ok" <<<"$out" || r=1
	# This run's group, joined by the peer's two receivers, which saw this
	# VM as the source in the GRH.
	local src="::ffff:$HERE" mgid="::ffff:$group"
	case $group in *:*) src=fe80: mgid=$group ;; esac
	[ "$(grep -c "^joined dgid: $mgid qpn " <<<"$out")" = 2 ] ||
		{ kv_msg "the peer's report is not of a run on $group"; r=1; }
	[ "$(grep -c "^qp 0x[0-9a-f]*: received 5 messages from $src" <<<"$out")" = 2 ] || r=1
	grep -q "^result: ok" "$MC" || r=1
	if [ "$role" = both ]; then
		[ "$(grep -c "^joined dgid: $mgid qpn " "$MC")" = 2 ] || r=1
		[ "$(grep -c '^qp 0x[0-9a-f]*: received 5 messages' "$MC")" = 2 ] || r=1
	fi
	return $r
}

# bench_rows OUT WANT: OUT (a bench report) ended well and has one table
# row of SIZE with ITERS iterations, numbers positive: "SIZE ITERS".
bench_rows() {
	grep -q "^result: ok" <<<"$1" || return 1
	echo "$1" | awk -v want="$2" '
		BEGIN { split(want, w, " ") }
		/^ [0-9]+ / && $3 ~ /^[0-9.]+$/ {
			rows++
			if ($1 != w[1] || $2 != w[2]) { print "row: " $0; bad = 1 }
			for (i = 3; i <= NF; i++) if (!($i > 0)) { print "not positive: " $0; bad = 1 }
		}
		END { if (rows != 1) { print rows " rows"; bad = 1 }; exit bad }' | kv_diag
	[ "${PIPESTATUS[1]}" = 0 ]
}

# rxe's count of SENDs completed (requester) or received (responder) on
# rxe_eth, here or (peer_counter) in the peer VM.
COUNTERS=/sys/class/infiniband/rxe_eth/ports/1/hw_counters
counter() {
	cat "$COUNTERS/$1"
}
peer_counter() {
	peer "cat $COUNTERS/$1"
}

# bench_across WHERE OPTS: the bench between the two kernels; the client
# here (WHERE=here) or in the peer VM, the server in the other. The
# client's report must have its row; the server's must end well. The link
# between the VMs is slow and drops packets (rxe retransmits after
# timeouts): small runs, generous timeouts, for function only; the QPs'
# ACK timeout 4.096 us x 2^18 = 1.07 s (qp_timeout=18, 7 tries: 7.5 s
# without an ACK; at the default 14 a bidir run met 0.5 s with none and
# ended with "transport retry counter exceeded"). With bidir
# both headers say "Bidirectional", and for send_bw the server (there)
# SENT its iterations x qps messages and we received them (rxe's counters).
bench_across() {
	local where=$1 opts="$2,timeout_ms=60000,qp_timeout=18" size iters out r=0 bidir=0 sends0 recvs0 n
	size=${opts#*size=}; size=${size%%,*}
	iters=${opts#*iters=}; iters=${iters%%,*}
	local rows="$size $iters"
	n=$iters
	case $opts in *qps=*) local q=${opts#*qps=}; n=$((iters * ${q%%,*})) rows="$size $n" ;; esac
	case ",$opts," in *,bidir,*) bidir=1 ;; esac
	if [ $bidir = 1 ]; then
		[ "$where" = here ] || { kv_msg "bidir: only with the client here"; return 1; }
		if ! sends0=$(peer_counter rdma_sends) || ! recvs0=$(counter rdma_recvs); then
			kv_msg "no rxe counters"
			return 1
		fi
	fi
	if [ "$where" = here ]; then
		peer "bash -c \"printf '%s' 'role=server,$opts' >$BENCH\" >/dev/null 2>&1 &" >/dev/null
		for _ in {1..50}; do
			printf '%s' "role=client,addr=$THERE,$opts" >"$BENCH" 2>/tmp/run.err && break
			grep -q "Connection refused" /tmp/run.err || break
			sleep 0.2
		done
		kv_diag <"$BENCH"
		bench_rows "$(cat "$BENCH")" "$rows" || { kv_msg "client: $(cat /tmp/run.err)"; r=1; }
		# The server ends after its last handshake; wait for it, so that
		# the next case finds its file free.
		for _ in {1..120}; do
			out=$(peer "cat $BENCH")
			grep -q "^status: running" <<<"$out" || break
			sleep 0.5
		done
		grep -q "^result: ok" <<<"$out" || { echo "$out" | kv_diag; r=1; }
		if [ $bidir = 1 ]; then
			grep -q "^ *Bidirectional " "$BENCH" || { kv_msg "our header is not bidirectional"; r=1; }
			grep -q "^ *Bidirectional " <<<"$out" || { kv_msg "the server's header is not bidirectional"; r=1; }
			case $opts in
			*test=send_bw*)
				local sent got
				sent=$(($(peer_counter rdma_sends) - sends0))
				got=$(($(counter rdma_recvs) - recvs0))
				kv_msg "server to client: $sent SENDs completed there, $got received here, want $n"
				[ "$sent" -ge "$n" ] && [ "$got" -ge "$n" ] || r=1
				;;
			esac
		fi
	else
		bash -c "printf '%s' 'role=server,$opts' >$BENCH" 2>/tmp/run.err &
		local pid=$!
		kv_wait grep -q "^status: running" "$BENCH"
		sleep 1
		out=$(peer "printf '%s' 'role=client,addr=$HERE,$opts' >$BENCH; cat $BENCH")
		echo "$out" | kv_diag
		bench_rows "$out" "$rows" || r=1
		wait $pid || { kv_msg "server: $(cat /tmp/run.err)"; r=1; }
		grep -q "^result: ok" "$BENCH" || { kv_diag <"$BENCH"; r=1; }
	fi
	return $r
}

# Both sides must run the same test: EPROTO on both, and both say so.
bench_mismatch_refused() {
	local r=0
	peer "bash -c \"printf '%s' 'role=server,test=read_bw,size=64,iters=100' >$BENCH\" >/dev/null 2>&1 &" >/dev/null
	for _ in {1..50}; do
		printf '%s' "role=client,addr=$THERE,test=write_bw,size=64,iters=100" >"$BENCH" 2>/tmp/run.err && break
		grep -q "Connection refused" /tmp/run.err || break
		sleep 0.2
	done
	grep -q "Protocol error" /tmp/run.err || { kv_msg "client: $(cat /tmp/run.err)"; r=1; }
	kv_logged "bench: the peer's test parameters differ" || r=1
	# The server side's run ends with the same error.
	local out
	for _ in {1..40}; do
		out=$(peer "cat $BENCH")
		grep -q "^result:" <<<"$out" && break
		sleep 0.5
	done
	grep -q "^result: error -71" <<<"$out" || { echo "$out" | kv_diag; r=1; }
	return $r
}

DEAD_OPTS="test=write_bw,size=65536,iters=100000,timeout_ms=60000"
# A dead peer must end a run within BOUND seconds, a third of its
# timeout_ms: by the transport (retries, a disconnect, a closed TCP
# connection), not by the run's own timeout.
BOUND=20

# The peer's rxe device goes away in the middle of a long write_bw whose
# client is here. Our requests are no longer acknowledged: the QP gives up
# after its retries -- timeout 14, retry_cnt 6: 7 x 4.096 us x 2^14 =
# 0.47 s, each resending the window of writes outstanding -- and the run
# ends with EIO within BOUND (7.3 s seen; 10.8 s on a loaded host: TCG and
# rxe's timers), not after its timeout_ms (60 s); everything is freed (the module unloads); the peer's device
# comes back.
dead_peer_device_gone() {
	local r=0 t0 pid
	peer "bash -c \"printf '%s' 'role=server,$DEAD_OPTS' >$BENCH\" >/dev/null 2>&1 &" >/dev/null
	bench_client_here "$DEAD_OPTS"
	pid=$DEAD_PID
	kv_wait grep -q "^status: running" "$BENCH" || { kv_msg "$BENCH never said 'status: running'"; r=1; }
	sleep 4
	read -r t0 _ </proc/uptime
	peer "rdma link del rxe_eth" >/dev/null || { kv_msg "rdma link del on the peer failed"; r=1; }
	wait $pid && { kv_msg "the run went on to the end"; r=1; }
	local took
	took=$(kv_secs_since "$t0")
	kv_msg "the run ended $took s after the peer's device went: $(cat /tmp/dead.err)"
	awk -v t="$took" -v b="$BOUND" 'BEGIN { exit !(t < b) }' || { kv_msg "not within $BOUND s"; r=1; }
	grep -q "Input/output error" /tmp/dead.err || { kv_msg "not the error wanted (Input/output error)"; r=1; }
	peer "rdma link add rxe_eth type rxe netdev eth0" >/dev/null || { kv_msg "rdma link add in the peer failed"; r=1; }
	if ! { kv_unload && kv_load; }; then
		kv_msg "the module did not unload"
		r=1
	fi
	return $r
}

# The peer's writer is killed (SIGKILL) in the middle of a long write_bw
# whose server is here: its kernel ends the run and closes the TCP
# connection, so our server, waiting for the client's last handshake, ends
# with ECONNRESET as soon as the peer has torn its run down (3.4 s seen;
# the test allows BOUND), not after its timeout_ms (60 s).
dead_peer_process_killed() {
	local r=0 t0 pid
	bash -c "printf '%s' 'role=server,$DEAD_OPTS' >$BENCH" 2>/tmp/dead.err &
	pid=$!
	kv_wait grep -q "^status: running" "$BENCH" || { kv_msg "$BENCH never said 'status: running'"; r=1; }
	sleep 1
	peer "bash -c \"printf '%s' 'role=client,addr=$HERE,$DEAD_OPTS' >$BENCH\" >/dev/null 2>&1 & echo \$! >/tmp/dead.pid" >/dev/null
	sleep 4
	peer "grep -q '^status: running' $BENCH" || { kv_msg "the peer's client is not running"; r=1; }
	read -r t0 _ </proc/uptime
	peer "kill -9 \$(cat /tmp/dead.pid)" >/dev/null || { kv_msg "kill -9 in the peer failed"; r=1; }
	wait $pid && { kv_msg "the run went on to the end"; r=1; }
	local took
	took=$(kv_secs_since "$t0")
	kv_msg "the run ended $took s after the peer was killed: $(cat /tmp/dead.err)"
	awk -v t="$took" -v b="$BOUND" 'BEGIN { exit !(t < b) }' || { kv_msg "not within $BOUND s"; r=1; }
	grep -q "Connection reset by peer" /tmp/dead.err || { kv_msg "not the error wanted (Connection reset by peer)"; r=1; }
	if ! { kv_unload && kv_load; }; then
		kv_msg "the module did not unload"
		r=1
	fi
	return $r
}

# bench_client_here OPTS: our write_bw client in the background (pid in
# $DEAD_PID, errors in /tmp/dead.err), retried while the peer's server is
# not listening yet.
bench_client_here() {
	(
		for _ in {1..50}; do
			printf '%s' "role=client,addr=$THERE,$1" >"$BENCH" 2>/tmp/dead.err && exit 0
			grep -q "Connection refused" /tmp/dead.err || exit 1
			sleep 0.2
		done
	) &
	DEAD_PID=$!
}

# dead_peer_wait T0 BOUND WANT: our run (DEAD_PID) must fail within BOUND
# seconds of T0 with an error matching WANT (its time in DEAD_TOOK); then
# the module unloads.
dead_peer_wait() {
	local t0=$1 bound=$2 want=$3 r=0 took
	wait "$DEAD_PID" && { kv_msg "the run went on to the end"; r=1; }
	took=$(kv_secs_since "$t0")
	DEAD_TOOK=$took
	kv_msg "the run ended $took s after the peer went: $(cat /tmp/dead.err)"
	awk -v t="$took" -v b="$bound" 'BEGIN { exit !(t < b) }' || { kv_msg "not within $bound s"; r=1; }
	grep -Eq "$want" /tmp/dead.err || { kv_msg "not the error wanted ($want)"; r=1; }
	if ! { kv_unload && kv_load; }; then
		kv_msg "the module did not unload"
		r=1
	fi
	return $r
}

# The peer's device goes away under its write_bw client while our server
# measures nothing and waits for the client's last handshake: the peer's
# run ends (ECANCELED) and closes the TCP connection, ours ends with
# ECONNRESET at once.
dead_peer_device_gone_server_here() {
	local r=0 t0
	bash -c "printf '%s' 'role=server,$DEAD_OPTS' >$BENCH" 2>/tmp/dead.err &
	DEAD_PID=$!
	kv_wait grep -q "^status: running" "$BENCH" || { kv_msg "$BENCH never said 'status: running'"; r=1; }
	sleep 1
	peer "bash -c \"printf '%s' 'role=client,addr=$HERE,$DEAD_OPTS' >$BENCH\" >/dev/null 2>&1 &" >/dev/null
	sleep 4
	peer "grep -q '^status: running' $BENCH" || { kv_msg "the peer's client is not running"; r=1; }
	read -r t0 _ </proc/uptime
	peer "rdma link del rxe_eth" >/dev/null || { kv_msg "rdma link del on the peer failed"; r=1; }
	dead_peer_wait "$t0" "$BOUND" "Connection reset by peer" || r=1
	peer "rdma link add rxe_eth type rxe netdev eth0" >/dev/null || { kv_msg "rdma link add in the peer failed"; r=1; }
	return $r
}

# The peer's server process is killed while our client measures: the
# peer's kernel ends its run and destroys its QP; our writes are no longer
# acknowledged and our QP gives up after its retries (as above, within 10 s).
dead_peer_process_killed_client_here() {
	local r=0 t0
	peer "bash -c \"printf '%s' 'role=server,$DEAD_OPTS' >$BENCH\" >/dev/null 2>&1 & echo \$! >/tmp/dead.pid" >/dev/null
	bench_client_here "$DEAD_OPTS"
	kv_wait grep -q "^status: running" "$BENCH" || { kv_msg "$BENCH never said 'status: running'"; r=1; }
	sleep 4
	read -r t0 _ </proc/uptime
	peer "kill -9 \$(cat /tmp/dead.pid)" >/dev/null || { kv_msg "kill -9 in the peer failed"; r=1; }
	dead_peer_wait "$t0" "$BOUND" "Input/output error" || r=1
	return $r
}

# Over rdma_cm: rping on the peer against the RC example's rping roles
# here (iters=1000000: a run that does not end by itself).
CM_DEAD_OPTS="iters=1000000,size=64,timeout_ms=60000"

# cm_client_here: our rping client (role=cm_client) in the background,
# as bench_client_here.
cm_client_here() {
	(
		for _ in {1..50}; do
			printf '%s' "role=cm_client,addr=$THERE,$CM_DEAD_OPTS" >"$RC" 2>/tmp/dead.err && exit 0
			grep -q "Connection refused" /tmp/dead.err || exit 1
			sleep 0.2
		done
	) &
	DEAD_PID=$!
}

# rping's server is killed: its rdma_cm ID is destroyed with the process,
# the DISCONNECTED event (or a flushed receive) ends our client with
# ECONNRESET ("the server went away") at once.
dead_peer_rping_server_killed_cm_client_here() {
	local r=0 t0
	peer "rping -s -a $THERE >/dev/null 2>&1 & echo \$! >/tmp/dead.pid" >/dev/null
	cm_client_here
	kv_wait grep -q "^status: running" "$RC" || { kv_msg "$RC never said 'status: running'"; r=1; }
	sleep 4
	read -r t0 _ </proc/uptime
	peer "kill -9 \$(cat /tmp/dead.pid)" >/dev/null || { kv_msg "kill -9 in the peer failed"; r=1; }
	dead_peer_wait "$t0" "$BOUND" "Connection reset by peer" || r=1
	kv_diag <"$RC"
	return $r
}

# rping's client is killed: for rping's server that is how a run ends, so
# our cm_server ends at once, with success, reporting the pings it served
# -- also when a request of ours fails or is outstanding as the client's
# QP goes before its disconnect (once in CI: a SEND's remote operation
# error ended the run with EIO; 3 of 12 runs since took that path).
dead_peer_rping_client_killed_cm_server_here() {
	local r=0 t0 took
	bash -c "printf '%s' 'role=cm_server,addr=$HERE,$CM_DEAD_OPTS' >$RC" 2>/tmp/dead.err &
	DEAD_PID=$!
	kv_wait grep -q "^status: running" "$RC" || { kv_msg "$RC never said 'status: running'"; r=1; }
	sleep 1
	peer "rping -c -a $HERE -C 1000000 >/dev/null 2>&1 & echo \$! >/tmp/dead.pid" >/dev/null
	sleep 5
	read -r t0 _ </proc/uptime
	peer "kill -9 \$(cat /tmp/dead.pid)" >/dev/null || { kv_msg "kill -9 in the peer failed"; r=1; }
	wait "$DEAD_PID" || { kv_msg "the server failed: $(cat /tmp/dead.err)"; r=1; }
	took=$(kv_secs_since "$t0")
	kv_diag <"$RC"
	kv_msg "the run ended $took s after the peer was killed"
	awk -v t="$took" 'BEGIN { exit !(t < 10) }' || { kv_msg "not within 10 s"; r=1; }
	grep -Eq "^rdma_cm: the client disconnected after [1-9][0-9]* ping" "$RC" || { kv_msg "no 'the client disconnected after N pings'"; kv_diag <"$RC"; r=1; }
	if ! { kv_unload && kv_load; }; then
		kv_msg "the module did not unload"
		r=1
	fi
	return $r
}

# The peer's rxe device goes away under its kernel's rping server (rping
# itself would hold the device: rxe cannot take it from a process, so
# rdma link del waits for it): our client ends with the removal's errno --
# ECONNRESET if the peer's disconnect gets out before its device goes,
# EIO after the QP's retries (6: rdma_cm's ACK timeout 4.096 us x 2^18 =
# 1.07 s each) if a request of ours is outstanding -- both within BOUND.
# The disconnect is one MAD, not retried once the device is gone: if it is
# lost (the link between the VMs drops packets) while nothing of ours is
# outstanding, nothing can tell this side the peer went, as on a wire
# whose peer lost power, and the run ends with ETIMEDOUT after its
# timeout_ms, 10 s here, and not before (seen once in CI: the device went
# between two messages). The log says which way it ended.
dead_peer_device_gone_cm_client_here() {
	local r=0 t0 CM_DEAD_OPTS="iters=1000000,size=64,timeout_ms=10000"
	peer "bash -c \"printf '%s' 'role=cm_server,addr=$THERE,$CM_DEAD_OPTS' >$RC\" >/dev/null 2>&1 &" >/dev/null
	cm_client_here
	kv_wait grep -q "^status: running" "$RC" || { kv_msg "$RC never said 'status: running'"; r=1; }
	sleep 4
	read -r t0 _ </proc/uptime
	peer "rdma link del rxe_eth" >/dev/null || { kv_msg "rdma link del on the peer failed"; r=1; }
	dead_peer_wait "$t0" "$BOUND" "Connection reset by peer|Input/output error|Connection timed out" || r=1
	if grep -q "Connection timed out" /tmp/dead.err; then
		kv_msg "ETIMEDOUT: the peer's disconnect did not come, nothing of ours was outstanding"
		# timeout_ms counts from the last message, which came at most
		# a ping before the device went: not earlier than 9 s after.
		awk -v t="$DEAD_TOOK" 'BEGIN { exit !(t >= 9) }' || { kv_msg "ETIMEDOUT before timeout_ms"; r=1; }
	fi
	kv_diag <"$RC"
	peer "rdma link add rxe_eth type rxe netdev eth0" >/dev/null || { kv_msg "rdma link add in the peer failed"; r=1; }
	return $r
}

# The SRQ example kernel to kernel: the server there (its 4 QPs share one
# SRQ), the client here.
SRQ=$KV_DEBUGFS/rxe_eth/srq
srq_across() {
	local r=0 out
	peer "bash -c \"printf 'role=server,addr=$THERE,qps=4,max_wr=16,count=200,size=8192,timeout_ms=30000' >$SRQ\" >/dev/null 2>&1 &" >/dev/null
	for _ in {1..50}; do
		printf '%s' "role=client,addr=$THERE,qps=4,max_wr=16,count=200,size=8192,timeout_ms=30000" >"$SRQ" 2>/tmp/run.err && break
		grep -q "Connection refused" /tmp/run.err || break
		sleep 0.2
	done
	kv_diag <"$SRQ"
	grep -q "^srq: ok: 200 SENDs of 8192 bytes over 4 QPs in 13 rounds, each acknowledged" "$SRQ" ||
		{ kv_msg "client: $(cat /tmp/run.err)"; r=1; }
	for _ in {1..20}; do
		out=$(peer "cat $SRQ")
		grep -q "^result:" <<<"$out" && break
		sleep 0.5
	done
	echo "$out" | kv_diag
	grep -q "^srq: ok: 200 messages of 8192 bytes from 4 QPs through one SRQ" <<<"$out" || r=1
	[ "$(grep -c "^qp 0x[0-9a-f]*: 50 receives" <<<"$out")" = 4 ] || r=1
	return $r
}

# The peer's kernel log since setup's marker: the peer must answer (peer
# gives 255 if not), the marker must be there (3), and no report (1).
peer_log_clean() {
	local out st
	# One line: the peer's command server reads one.
	out=$(peer "dmesg | sed -n '/kverbs-selftest: begin two_hosts\$/,\$p' >/tmp/kv_since; grep -q 'kverbs-selftest: begin two_hosts\$' /tmp/kv_since || exit 3; ! grep -E '$KV_SPLAT' /tmp/kv_since")
	st=$?
	case $st in
	0) ;;
	1) echo "$out" | kv_diag; kv_msg "kernel reports in the peer's log" ;;
	3) kv_msg "no marker 'kverbs-selftest: begin two_hosts' in the peer's log" ;;
	255) kv_msg "the peer VM does not answer" ;;
	*) echo "$out" | kv_diag; kv_msg "reading the peer's log failed ($st)" ;;
	esac
	return $st
}

# The modules unload on the peer, then its kmemleak reports nothing: a
# scan at once, the second one 5 s after the unload, when every object is
# at least the minimum age (see kv_kmemleak_check).
peer_kmemleak_clean() {
	local out
	out=$(peer "rmmod kverbs_example && rmmod kverbs") || { echo "$out" | kv_diag; kv_msg "rmmod on the peer failed"; return 1; }
	# One line: the peer's command server reads one.
	local left="awk -v t0=\$t0 '{ d = 5 - (\$1 - t0); print (d > 0 ? d : 0) }' /proc/uptime"
	out=$(peer "t0=\$(cut -d' ' -f1 /proc/uptime) && echo scan >$KV_KMEMLEAK && sleep \$($left) && echo scan >$KV_KMEMLEAK && cat $KV_KMEMLEAK") ||
		{ echo "$out" | kv_diag; kv_msg "the peer's kmemleak scan failed (or the peer does not answer)"; return 1; }
	[ -z "$out" ] || { echo "$out" | head -n 60 | kv_diag; return 1; }
}

kv_begin 28
kv_case setup_rxe_on_eth0_and_reach_the_peer_vm setup
kv_case rc_two_hosts_kernel_to_kernel_client_here_21 kernel_to_kernel_client_here 21
kv_case rc_two_hosts_kernel_to_kernel_server_here_21 kernel_to_kernel_server_here 21
kv_case rc_two_hosts_kernel_to_kernel_client_here_65536 kernel_to_kernel_client_here 65536
kv_case rc_two_hosts_kernel_to_kernel_server_here_65536 kernel_to_kernel_server_here 65536
kv_case rc_two_hosts_userspace_client_kernel_server userspace_here_kernel_there
kv_case srq_two_hosts_kernel_client_here_kernel_server_there srq_across
kv_case rc_two_hosts_atomics_fetch_add_cmp_swap_client_here kernel_to_kernel_client_here 4096 ",atomics=100"
kv_case mcast_two_hosts_sender_here_two_receivers_there mcast_across sender 239.2.0.1
kv_case mcast_two_hosts_receivers_in_both_vms mcast_across both 239.2.0.2
kv_case mcast_two_hosts_ipv6_group mcast_across sender ff0e::2:1
kv_case bench_two_hosts_write_bw_client_here bench_across here "test=write_bw,size=4096,iters=200"
kv_case bench_two_hosts_send_bw_bidir_2_qps bench_across here "test=send_bw,size=1024,iters=100,qps=2,bidir"
kv_case bench_two_hosts_read_bw_client_there bench_across there "test=read_bw,size=4096,iters=100"
kv_case bench_two_hosts_write_lat_client_here bench_across here "test=write_lat,size=8,iters=100"
kv_case bench_two_hosts_send_lat_client_there bench_across there "test=send_lat,size=64,iters=100"
kv_case bench_two_hosts_read_lat_client_here bench_across here "test=read_lat,size=4096,iters=100"
kv_case bench_two_hosts_other_test_refused_eproto bench_mismatch_refused
kv_case dead_peer_device_gone_client_here_ends_eio dead_peer_device_gone
kv_case dead_peer_process_killed_server_here_ends_at_once dead_peer_process_killed
kv_case dead_peer_device_gone_server_here_ends_econnreset dead_peer_device_gone_server_here
kv_case dead_peer_process_killed_client_here_ends_after_retries dead_peer_process_killed_client_here
kv_case dead_peer_rping_server_killed_cm_client_here_ends_econnreset dead_peer_rping_server_killed_cm_client_here
kv_case dead_peer_rping_client_killed_cm_server_here_ends_at_once dead_peer_rping_client_killed_cm_server_here
kv_case dead_peer_device_gone_cm_client_here_ends_econnreset_eio_or_etimedout dead_peer_device_gone_cm_client_here
kv_case peer_vm_kernel_log_clean peer_log_clean
kv_case peer_vm_kmemleak_clean peer_kmemleak_clean
kv_end
