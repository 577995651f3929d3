#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The NVMe over Fabrics fixture (kverbs_nvme_lib.sh) in the test kernel:
# the kernel's RDMA target exports a RAM disk on rxe over dummy0, and the
# kernel's C host (nvme-rdma) connects to it, moves data both ways and
# disconnects, leaving nothing behind on either side. kverbs_nvme, the
# host in safe Rust, is tested against this target and compared with this
# host.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"
# shellcheck source=kverbs_nvme_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_nvme_lib.sh"

BLOCK=
PATTERN=/tmp/kverbs-nvme-pattern

# ctrl_attr NAME: the C host's controller's sysfs attribute NAME.
ctrl_attr() {
	cat "/sys/class/nvme/nvme$KV_NVME_INSTANCE/$1"
}

port_listens() {
	kv_nvmet_up || { kv_msg "the target's setup failed"; return 1; }
	kv_logged "nvmet_rdma: enabling port $KV_NVMET_PORT ($KV_NVME_ADDR:$KV_NVME_SVCID)" ||
		{ kv_msg "no 'enabling port' line"; return 1; }
	[ -d "$KV_NVMET_CTRLS" ] || { kv_msg "no $KV_NVMET_CTRLS"; return 1; }
	[ -z "$(kv_nvmet_ctrls)" ] || { kv_msg "controllers before any host: $(kv_nvmet_ctrls)"; return 1; }
}

# The target refuses a subsystem it does not have: Connect Invalid Data
# Parameter at the subsystem NQN's offset, the host's write fails.
unknown_subsystem_refused() {
	local nqn=$KV_NVME_NQN
	KV_NVME_NQN=nqn.2026-11.org.kverbs:none
	if kv_nvme_c_connect "nr_io_queues=1"; then
		KV_NVME_NQN=$nqn
		kv_msg "connected to a subsystem the target does not have"
		return 1
	fi
	KV_NVME_NQN=$nqn
	kv_logged "nvmet: connect request for invalid subsystem nqn.2026-11.org.kverbs:none!" ||
		{ kv_msg "the target did not refuse it"; return 1; }
	kv_logged "Connect Invalid Data Parameter, subsysnqn \"nqn.2026-11.org.kverbs:none\"" ||
		{ kv_msg "the host did not report the refusal"; return 1; }
	[ -z "$(ls /sys/class/nvme 2>/dev/null)" ] || { kv_msg "a controller stayed: $(ls /sys/class/nvme)"; return 1; }
}

# Asked for 2 I/O queues, the C host makes one per CPU up to 2.
connects() {
	local size ram n queues
	queues=$(nproc)
	[ "$queues" -le 2 ] || queues=2
	kv_nvme_c_connect "nr_io_queues=2,queue_size=32" || return 1
	[ "$(ctrl_attr state)" = live ] || { kv_msg "state $(ctrl_attr state)"; return 1; }
	[ "$(ctrl_attr transport)" = rdma ] || { kv_msg "transport $(ctrl_attr transport)"; return 1; }
	[ "$(ctrl_attr subsysnqn)" = "$KV_NVME_NQN" ] || { kv_msg "subsysnqn $(ctrl_attr subsysnqn)"; return 1; }
	kv_logged "nvme nvme$KV_NVME_INSTANCE: creating $queues I/O queues." ||
		{ kv_msg "not $queues I/O queues"; return 1; }
	kv_logged "nvme nvme$KV_NVME_INSTANCE: new ctrl: NQN \"$KV_NVME_NQN\", addr $KV_NVME_ADDR:$KV_NVME_SVCID" ||
		{ kv_msg "no 'new ctrl' line"; return 1; }
	# The target's side: one controller, live, with the host's NQN.
	n=$(kv_nvmet_ctrls | wc -l)
	[ "$n" = 1 ] || { kv_msg "the target has $n controllers"; return 1; }
	[ "$(cat "$KV_NVMET_CTRLS/ctrl$(ctrl_attr cntlid)/hostnqn")" = "$(ctrl_attr hostnqn)" ] ||
		{ kv_msg "the target's controller $(ctrl_attr cntlid) has another host NQN"; return 1; }
	# Namespace 1 is a disk of the RAM disk's size.
	BLOCK=nvme${KV_NVME_INSTANCE}n1
	kv_wait test -b "/dev/$BLOCK" || { kv_msg "no /dev/$BLOCK"; return 1; }
	size=$(cat "/sys/block/$BLOCK/size") ram=$(cat "/sys/block/${KV_NVMET_DISK#/dev/}/size")
	[ "$size" = "$ram" ] || { kv_msg "$BLOCK has $size sectors, $KV_NVMET_DISK $ram"; return 1; }
}

# same_bytes A SKIP_A B SKIP_B COUNT: COUNT KiB of A and B at those KiB
# offsets are equal; each read from the device (the page cache dropped
# first: the target writes the RAM disk under its cache).
same_bytes() {
	local a b
	echo 3 >/proc/sys/vm/drop_caches
	a=$(dd if="$1" bs=1024 skip="$2" count="$5" 2>/dev/null | md5sum)
	b=$(dd if="$3" bs=1024 skip="$4" count="$5" 2>/dev/null | md5sum)
	[ "$a" = "$b" ] || { kv_msg "$1 at $2 KiB and $3 at $4 KiB differ over $5 KiB"; return 1; }
}

# Writes through the C host, of 4 KiB to 1 MiB at several offsets, land on
# the RAM disk byte for byte.
host_writes_land() {
	local off_kib off kib
	[ -n "$BLOCK" ] || return 1
	head -c 2097152 /dev/urandom >"$PATTERN" || return 1
	for off_kib in 0:4 8:64 260:128 1024:1024; do
		off=${off_kib%%:*} kib=${off_kib#*:}
		dd if="$PATTERN" of="/dev/$BLOCK" bs=1024 skip="$off" seek="$off" count="$kib" \
			conv=notrunc,fsync 2>/dev/null || { kv_msg "writing $kib KiB at $off KiB failed"; return 1; }
		same_bytes "$PATTERN" "$off" "$KV_NVMET_DISK" "$off" "$kib" || return 1
	done
}

# What the RAM disk holds reads back through the C host.
host_reads_back() {
	[ -n "$BLOCK" ] || return 1
	dd if="$PATTERN" of="$KV_NVMET_DISK" bs=1024 skip=1024 seek=4096 count=1024 conv=notrunc,fsync \
		2>/dev/null || return 1
	same_bytes "$PATTERN" 1024 "/dev/$BLOCK" 4096 1024
}

disconnects() {
	local cntlid
	[ -n "$BLOCK" ] || return 1
	cntlid=$(ctrl_attr cntlid) || return 1
	kv_nvme_c_disconnect || { kv_msg "nvme$KV_NVME_INSTANCE did not go"; return 1; }
	[ ! -e "/dev/$BLOCK" ] || { kv_msg "/dev/$BLOCK stayed"; return 1; }
	kv_logged "nvme nvme$KV_NVME_INSTANCE: Removing ctrl: NQN \"$KV_NVME_NQN\"" ||
		{ kv_msg "no 'Removing ctrl' line"; return 1; }
	# The target frees its controller once its queues are gone.
	kv_wait kv_nvmet_no_ctrls ||
		{ kv_msg "the target still has $(kv_nvmet_ctrls) (was ctrl$cntlid)"; return 1; }
}

target_removed() {
	kv_nvmet_down || { kv_msg "the target's configfs entries did not all go"; return 1; }
	[ ! -e "$KV_NVMET_CTRLS" ] || { kv_msg "$KV_NVMET_CTRLS stayed"; return 1; }
	kv_rxe_del rxe_dummy || { kv_msg "rxe_dummy could not be removed"; return 1; }
}

kv_begin 8
kv_case nvmet_rdma_port_listens_on_rxe_dummy0 port_listens
kv_case nvmet_refuses_unknown_subsystem_nqn_c_host_reports_it unknown_subsystem_refused
kv_case nvme_rdma_c_host_connects_io_queue_per_cpu_ram_disk_size connects
kv_case nvme_rdma_c_host_writes_4k_to_1m_land_on_ram_disk host_writes_land
kv_case nvme_rdma_c_host_reads_back_ram_disk host_reads_back
kv_case nvme_rdma_c_host_disconnects_target_frees_ctrl disconnects
kv_case nvmet_port_and_subsystem_removed_rxe_free target_removed
kv_end
