#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# kverbs_nvme against the kernel's target in another VM: nvmet-rdma in
# the peer VM (169.254.10.2, rxe on its eth0, a RAM disk), kverbs_nvme in
# this one (169.254.10.1), over the QEMU socket link that tools/vm/run.sh
# joins them by (kverbs_two_hosts.sh's). fio with verification as in
# kverbs_nvme_fio.sh, smaller: sequential writes from 512 B to 1 MiB (in
# the capsule and registered), random writes at queue depths 1 and 32, a
# random mix of sizes; the kernel's C host here verifies what kverbs_nvme
# wrote and the reverse; the target away for 2 s during a job (the
# controller reconnects across the wire, the job's every block verifies);
# with two CPUs online, two I/O queues, each carrying its CPU's requests
# (before and after that reconnect); a disconnect leaves the peer's target
# no controller.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"
# shellcheck source=kverbs_nvme_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_nvme_lib.sh"

HERE=169.254.10.1
THERE=$KV_PEER_ADDR
KV_NVME_ADDR=$THERE
DIR=/sys/kernel/debug/$KV_NVME
LIB=/kselftest/kverbs/kverbs_nvme_lib.sh
# The peer's log from here on is this program's.
MARK="kverbs-selftest: begin nvme_two_hosts"
INST=
DISK=

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

# peer_nvmet FUNCTION...: a function of kverbs_nvme_lib.sh run on the
# peer, its fixture on rxe_eth at $THERE.
peer_nvmet() {
	peer "kv_msg() { echo \"\$*\"; }; . $LIB; KV_NVMET_RXE=rxe_eth KV_NVME_ADDR=$THERE; $*"
}

controllers() {
	cat "$DIR/controllers"
}

counter() {
	kv_counter "$DIR/controllers" "kvnvme$INST: " "$1"
}

setup() {
	local out
	kv_wait ip addr show dev eth0 | grep -q "$HERE" || return 1
	kv_rxe_add rxe_eth eth0 || return 1
	for _ in {1..60}; do
		peer_ready && break
		sleep 1
	done
	peer_ready || { kv_msg "the peer VM does not answer"; return 1; }
	peer "echo $MARK >/dev/kmsg" || return 1
	out=$(peer_nvmet kv_nvmet_up) || { kv_msg "the peer's target: $out"; return 1; }
	{ kv_load_layer && insmod "$KV_MODDIR/$KV_NVME.ko"; } || { kv_msg "insmod failed"; return 1; }
	command -v fio >/dev/null || { kv_msg "no fio in the guest (tools/build-fio.sh)"; return 1; }
	kv_nvme_connect reconnect_delay=1,ctrl_loss_tmo=30 || return 1
	INST=$KV_NVME_INST
	DISK=/dev/kvnvme${INST}n1
	kv_wait test -b "$DISK" || { kv_msg "no disk: $(controllers)"; return 1; }
	controllers | grep -q "^kvnvme$INST: connected, $THERE:4420, .* device rxe_eth;" ||
		{ kv_msg "not over rxe_eth: $(controllers)"; return 1; }
}

# Sequential writes verified at 512 B, 4 KiB (in the capsule), 128 KiB and
# 1 MiB (registered), 1 MiB each.
seq_write_verify() {
	local bs i=0 inl reg
	inl=$(counter inline) reg=$(counter registered)
	for bs in 512 4k 128k 1m; do
		fio_run "$DISK" "seq_write_$bs" --rw=write --bs=$bs --iodepth=8 \
			--offset=${i}m --size=1m --verify=crc32c || return 1
		i=$((i + 1))
	done
	kv_msg "in the capsule: $(($(counter inline) - inl)), registered: $(($(counter registered) - reg))"
	[ $(($(counter inline) - inl)) -ge 2048 ] && [ $(($(counter registered) - reg)) -ge 9 ]
}

# Random 4-KiB writes verified at queue depths 1 and 32.
rand_write_verify() {
	local qd
	for qd in 1 32; do
		fio_run "$DISK" "rand_write_qd$qd" --rw=randwrite --bs=4k --iodepth=$qd \
			--offset=4m --size=1m --verify=crc32c || return 1
	done
}

# A random mix of reads and writes of 512 B to 1 MiB at queue depth 16.
mixed_verify() {
	fio_run "$DISK" mixed --rw=randrw --rwmixread=70 \
		--bssplit=512/10:4k/30:16k/20:64k/20:256k/10:1m/10 --iodepth=16 \
		--offset=8m --size=4m --verify=crc32c
}

# The C host here, on the same namespace across the wire: it verifies what
# kverbs_nvme wrote, and kverbs_nvme what it wrote.
c_host_cross_verify() {
	kv_nvme_c_cross_verify "$DISK" 12m 13m 1m 8
}

# The peer's target away for 2 s during a fio job (its subsystem unlinked
# from its port): the controller reconnects across the wire once, and
# every block verifies (kv_nvme_fio_across_away).
target_away_reconnect() {
	local link=$KV_NVMET/ports/$KV_NVMET_PORT/subsystems/$KV_NVME_NQN
	kv_nvme_fio_across_away "$DISK" "$INST" 16m 8m 8 "peer 'rm $link'" \
		"peer 'ln -s $KV_NVMET/subsystems/$KV_NVME_NQN $link'"
}

# With two CPUs online (tools/vm/plan-guests.sh's SMP_PROGS), two I/O
# queues, qid 1 and 2, a hardware queue of the disk each: a fio job pinned
# to each CPU, each verified, and each queue sent capsules.
two_io_queues() {
	local line pid r=0 before after
	[ "$(nproc)" -ge 2 ] || { kv_msg "one CPU online: one I/O queue"; return "$KSFT_SKIP"; }
	line=$(controllers | grep "^kvnvme$INST: ")
	[[ $line == *"I/O queues 2 of 2 asked"* && $line == *", qid 2, "* ]] ||
		{ kv_msg "not two I/O queues: $line"; return 1; }
	before=$(by_queue)
	set -- --rw=randwrite --bs=16k --iodepth=8 --size=1m --verify=crc32c
	fio_run "$DISK" on_cpu0 "$@" --offset=24m --cpus_allowed=0 &
	pid=$!
	fio_run "$DISK" on_cpu1 "$@" --offset=25m --cpus_allowed=1 || r=1
	wait $pid || r=1
	after=$(by_queue)
	kv_msg "capsules by queue: $before before, $after after"
	if ! { [ "${after%/*}" -gt "${before%/*}" ] && [ "${after#*/}" -gt "${before#*/}" ]; }; then
		kv_msg "a queue sent nothing"
		r=1
	fi
	return $r
}

# by_queue: the capsules each I/O queue sent, A/B.
by_queue() {
	controllers | grep "^kvnvme$INST: " | sed -n 's/.* by_queue \([0-9/]*\) .*/\1/p'
}

# A disconnect: the controller shut down, and the peer's target has no
# controller left; the target removed on the peer, its log clean.
disconnect_peer_clean() {
	local out
	echo all >"$DIR/disconnect" || return 1
	kv_logged "kvnvme$INST: shut down, disconnected" || return 1
	for _ in {1..50}; do
		peer_nvmet kv_nvmet_no_ctrls >/dev/null && break
		sleep 0.2
	done
	peer_nvmet kv_nvmet_no_ctrls >/dev/null ||
		{ kv_msg "the peer's target still has: $(peer_nvmet kv_nvmet_ctrls)"; return 1; }
	out=$(peer_nvmet kv_nvmet_down) || { kv_msg "the peer's target down: $out"; return 1; }
	# The peer's kernel log since this program began.
	out=$(peer "dmesg | sed -n '/$MARK/,\$p' | grep -E '$KV_SPLAT'") &&
		{ kv_msg "the peer's log: $out"; return 1; }
	return 0
}

kv_begin 9
kv_case setup_nvmet_in_peer_vm_connect_across_wire setup
kv_case nvme_two_hosts_seq_write_verify_512b_to_1m seq_write_verify
kv_case nvme_two_hosts_rand_write_verify_qd_1_32 rand_write_verify
kv_case nvme_two_hosts_randrw_mixed_sizes_verify mixed_verify
kv_case nvme_two_hosts_c_host_verifies_ours_and_we_verify_its c_host_cross_verify
kv_case nvme_two_hosts_target_away_2s_reconnected_verify target_away_reconnect
kv_case nvme_two_hosts_two_io_queues_each_carries_a_cpu_s_requests two_io_queues
kv_case nvme_two_hosts_disconnect_peer_target_clean disconnect_peer_clean
kv_end
