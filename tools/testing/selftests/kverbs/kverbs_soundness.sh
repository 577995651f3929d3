#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Soundness of the safe layer: what safe code must not be able to do to the
# kernel. The in-kernel self-test, a module of its own on the layer
# (kverbs_selftest.ko, samples/kverbs_selftest/, safe Rust), hands the
# layer objects of two devices or two PDs, ports the device does not have,
# CQs too small, work request ids of another QP or already released,
# remote write without local write, two QPs on one rdma_cm ID: each must be
# refused with its errno, with no kernel report. Then device
# removal ends a TCP connect that would wait a
# minute, and a removal under a stream of writers is not held up by a run
# that starts after it began.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

ST=$KV_SELFTEST_DEBUGFS/selftest
ENV="rxe_lo rxe_dummy 169.254.1.1"

setup() {
	kv_dummy_up || return 1
	kv_rxe_add rxe_lo lo || return 1
	kv_rxe_add rxe_dummy dummy0 || return 1
	kv_load && kv_load_selftest
}

# selftest CASE: runs one case of the self-test module.
selftest() {
	local out
	printf '%s' "$ENV $1" >"$ST" || { kv_msg "run $1: write failed"; return 1; }
	out=$(cat "$ST")
	echo "$out" | kv_diag
	grep -qx "ok 1 $1" <<<"$out"
}

# rxe_dummy added again after a case removed it, and the example given it.
rxe_dummy_back() {
	kv_rxe_add rxe_dummy dummy0 && kv_wait test -d "$KV_DEBUGFS/rxe_dummy"
}

# The self-test leaves an rdma_cm listener on rxe_dummy held, nobody
# waiting on it, with a sink that drops it when its device goes. Removing
# rxe_dummy waits for the listener's destruction (cma_process_remove): it
# must end, the sink having said so; then rxe_dummy is back.
selftest_cm_removal() {
	local r=0
	selftest cm_listener_dropped_by_its_removal_sink || return 1
	grep -q "^# held: a listener on rxe_dummy$" "$ST" || { kv_msg "no listener held"; return 1; }
	removal_bounded rxe_dummy 10 || r=1
	kv_logged "selftest: device removal: the held listener was dropped" || r=1
	rxe_dummy_back || return 1
	return $r
}

# A sink that drops its own client's registration while the device goes
# (the self-test's drop_reg): dummy0 down gives the sink on rxe_dummy an
# event, in which it sleeps 5 s; rxe_dummy is removed meanwhile, which
# calls the client's remove, which drops the sink's registration while the
# sink runs; the sink then drops the client's registration, which waits
# for the client's calls -- that remove among them. The removal must end,
# the registration dropped; then rxe_dummy is back.
sink_drops_client_registration_during_removal() {
	local r=0
	printf '%s' rxe_dummy >"$KV_SELFTEST_DEBUGFS/drop_reg" || return 1
	kv_wait kv_logged "kverbs_selftest: drop_reg: sink registered on rxe_dummy" || return 1
	ip link set dummy0 down || return 1
	kv_wait kv_logged "kverbs_selftest: drop_reg sink: " || { kv_msg "the sink was told nothing"; r=1; }
	removal_bounded rxe_dummy 10 || r=1
	kv_wait kv_logged "kverbs_selftest: drop_reg: registration dropped by its sink" ||
		{ kv_msg "the sink did not drop the registration"; r=1; }
	ip link set dummy0 up || r=1
	rxe_dummy_back || return 1
	return $r
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
	read -r t0 _ </proc/uptime
	echo "kverbs-selftest: removal of $1 begins" >/dev/kmsg
	kv_rxe_del "$1" || r=1
	[ -n "${2:-}" ] && wait "$2"
	read -r t1 _ </proc/uptime
	kv_msg "removal took $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
	[ $r = 0 ] && awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 5) }' && return 0
	# Where the time went, for a removal that took too long.
	dmesg | sed -n "/kverbs-selftest: removal of $1 begins/,\$p" | tail -n 30 | kv_diag
	return 1
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

# removal_bounded DEV SECS: removes DEV in the background and waits up to
# SECS for the removal to end: a removal that waits for a reference nobody
# will drop never ends (a task left in D state), and must not hang the run.
removal_bounded() {
	local t0 pid k
	read -r t0 _ </proc/uptime
	rdma link del "$1" &
	pid=$!
	for ((k = 0; k < $2 * 10; k++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" || { kv_msg "rdma link del $1 failed"; return 1; }
			kv_msg "removal took $(kv_secs_since "$t0") s"
			return 0
		fi
		sleep 0.1
	done
	kv_msg "rdma link del $1 still waiting after $2 s"
	return 1
}

# A drain made to fail on a QP whose stream it still holds: the self-test's
# stream_dropped_with_requests_outstanding drops a stream with four SENDs
# outstanding (the QP keeps its shared part, which holds the buffers), then
# the QP, whose drain is made to fail. The QP is destroyed, the stream's
# CQEs leaked on purpose, but its buffers -- and their references to the
# device -- must be released, or unregistering the device waits for them
# for ever.
drain_failure_with_streams_device_removable() {
	local f=$KV_DEBUGFS/fail_drain r=0
	[ -d "$f" ] || { kv_msg "no $f"; return 1; }
	[ -d "$KV_DEBUGFS/rxe_lo" ] || kv_rxe_add rxe_lo lo || return 1
	[ -d "$KV_DEBUGFS/rxe_dummy" ] || kv_rxe_add rxe_dummy dummy0 || return 1
	kv_wait test -d "$KV_DEBUGFS/rxe_dummy" || return 1
	echo 0 >"$f/verbose"
	echo 1 >"$f/times"
	echo 100 >"$f/probability"
	selftest stream_dropped_with_requests_outstanding || r=1
	echo 0 >"$f/probability"
	[ $r = 0 ] || { kv_msg "the self-test case failed"; return 1; }
	kv_logged "drain: failed by fault injection" || { kv_msg "no injected failure"; return 1; }
	kv_logged "was not drained: its [0-9]* slots are leaked" || return 1
	removal_bounded rxe_lo 10
}

# not_running FILE: no run is in progress on the control file FILE.
not_running() {
	! grep -q "^status: running" "$1"
}

# A writer killed (SIGKILL) in the middle of an RC run on a softirq CQ: its
# QPs are dropped with the signal pending, and their drain must still wait
# for the flush (sleeping, not spinning). The writer and every unbound
# worker -- rxe's flush runs in one -- share CPU 0, and the kernel does not
# preempt: a drain that spun would keep the flush from running for its
# 5 s, fail, and leak.
sigkill_writer_drains_on_softirq_cq() {
	local rc=$KV_DEBUGFS/rxe_lo/rc mask=/sys/devices/virtual/workqueue/cpumask
	local old pid t0 r=0
	[ -d "$KV_DEBUGFS/rxe_lo" ] || kv_rxe_add rxe_lo lo || return 1
	kv_wait test -e "$rc" || return 1
	[ -w "$mask" ] || { kv_msg "no $mask"; return 1; }
	old=$(cat "$mask")
	echo 1 >"$mask" || return 1
	taskset -c 0 bash -c "printf '%s' 'role=loopback,size=65536,iters=1000000,poll=softirq' >$rc" 2>/dev/null &
	pid=$!
	kv_wait grep -q "^status: running" "$rc" || { kv_msg "the run did not start"; r=1; }
	sleep 1
	read -r t0 _ </proc/uptime
	kill -9 "$pid"
	wait "$pid" 2>/dev/null
	kv_msg "the killed writer ended $(kv_secs_since "$t0") s after SIGKILL"
	echo "$old" >"$mask"
	[ $r = 0 ] || return 1
	awk -v a="$t0" '{ exit !($1 - a < 3) }' /proc/uptime || { kv_msg "want under 3 s"; r=1; }
	if kv_logged "drain: the .* queue did not flush\|was not drained"; then
		kv_log_since "$KV_CASE" | grep "drain\|not drained" | kv_diag
		r=1
	fi
	kv_wait not_running "$rc" || { kv_msg "the file stayed busy"; r=1; }
	return $r
}

# The self-test's cases, by name: the module must list exactly these (a
# case dropped from its table, or one added without a test here, fails
# selftest_lists_the_expected_cases), and each is run.
CASES=(
	qp_refuses_cq_of_other_device
	qp_refuses_port_out_of_range
	ah_refuses_port_out_of_range
	qp_takes_cq_room_and_gives_it_back
	post_recv_refuses_buffer_of_other_device
	post_send_refuses_buffer_of_other_device
	post_send_ud_refuses_ah_of_other_pd
	mr_map_refuses_buffer_of_other_device
	mr_registration_refuses_qp_of_other_pd
	mr_registration_refuses_remote_write_without_local_write
	wait_refuses_request_of_other_qp
	wait_refuses_released_unsignalled_send
	cm_id_takes_one_qp
	cm_connect_refuses_qp_of_other_id
	ah_resolves_roce_dmac
	cm_events_of_destroyed_id_dropped
	dma_buf_copies_exclude_each_other
	mr_not_locked_across_registration_wait
	stream_inline_refuses_read_and_oversize
	stream_takes_slots_and_gives_them_back
	stream_dropped_with_requests_outstanding
	softirq_cq_freed_right_after_its_last_completion
	chunked_buffer_takes_an_sge_per_chunk
	stale_rkey_refused_after_invalidate
	send_with_invalidate_kills_peer_rkey
	atomic_needs_remote_atomic_access_and_alignment
	atomic_stream_chains_fetch_adds_beside_writes
	srq_shared_by_two_qps
	alt_path_needs_auto_path_mig
	direct_cq_shared_by_two_tasks_dropping_qps
	adaptive_cq_shared_by_two_tasks_dropping_qps
	event_ring_of_4096_snapshotted
	event_sink_sleeps_and_drops_its_objects
	two_sinks_drop_each_others_objects
	registration_refused_inside_client_add
	cm_requests_while_accepted_ids_are_destroyed
	mul_div_saturates_past_u64
	cm_listener_dropped_by_its_removal_sink
	mr_given_up_registration_refuses_every_call
	cm_private_data_both_ways_and_consumer_rejection
)
n=${#CASES[@]}

# The module lists, before its first run, exactly the cases above, in order.
selftest_lists_the_expected_cases() {
	local listed
	listed=$(sed -n 's/^case //p' "$ST" | tr '\n' ' ')
	[ "$listed" = "${CASES[*]} " ] && return 0
	kv_msg "the module lists: $listed"
	kv_msg "expected:         ${CASES[*]}"
	return 1
}

# A sysfs show of more than a page (the self-test's `page` attribute, 5120
# bytes of text) is cut to the most sysfs takes, PAGE_SIZE - 1 bytes: at
# PAGE_SIZE sysfs reports the show's bug ("returned bad count", a report
# kv_case fails on).
sysfs_show_cut_below_a_page() {
	local n
	n=$(wc -c </sys/kernel/kverbs_selftest/page) || return 1
	kv_msg "read $n bytes of /sys/kernel/kverbs_selftest/page"
	[ "$n" = 4095 ] # x86-64: 4 KiB pages
}

kv_begin $((n + 11))
kv_case setup_rxe_lo_rxe_dummy_and_load setup
kv_case selftest_lists_the_expected_cases selftest_lists_the_expected_cases
for c in "${CASES[@]}"; do
	case $c in
	ah_resolves_roce_dmac) kv_case "selftest_$c" selftest_dmac ;;
	cm_listener_dropped_by_its_removal_sink) kv_case "selftest_$c" selftest_cm_removal ;;
	*) kv_case "selftest_$c" selftest "$c" ;;
	esac
done
kv_case bad_input_selftest_run selftest_bad_input
kv_case sysfs_show_longer_than_a_page_cut_without_report sysfs_show_cut_below_a_page
kv_case sink_drops_its_client_registration_during_removal sink_drops_client_registration_during_removal
kv_case removal_ends_tcp_connect_with_ecanceled removal_ends_tcp_connect
kv_case removal_under_writers_bounded removal_under_writers_bounded
kv_case sigkill_writer_drains_on_softirq_cq sigkill_writer_drains_on_softirq_cq
kv_case drain_failure_leaks_slots_only drain_failure_leaks_slots_only
kv_case drain_failure_with_streams_device_removable drain_failure_with_streams_device_removable
kv_end
