#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# fio on kverbs_nvme's disk (kverbs_nvme_lib.sh: the kernel's nvmet-rdma
# target on rxe over dummy0, namespace 1 on the RAM disk /dev/ram0), with
# verification (verify=crc32c: every block written carries a header and a
# checksum, read back and checked): sequential writes of blocks from 512 B
# to 1 MiB, random writes at queue depths 1 to 128 (the queue has 127
# tags), a random mix of reads and writes of sizes 512 B to 1 MiB; small
# writes in the capsule and larger ones registered, both counted. The
# kernel's C host (nvme-rdma) verifies what fio wrote through kverbs_nvme
# and the reverse, on the same namespace. A sector corrupted on the
# target's RAM disk is caught by fio's verification through the disk:
# the checks can fail. The target away for 2 s during a job: the
# controller reconnects and the job's every block verifies. And ext4 made
# on the disk, mounted (the module
# pinned), filled, unmounted, checked clean by e2fsck and read back; then
# rmmod deletes the controller.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"
# shellcheck source=kverbs_nvme_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_nvme_lib.sh"

DIR=/sys/kernel/debug/$KV_NVME
OUT=$KV_FIO_OUT
# The controller's instance and its disk, set by setup.
INST=
DISK=

controllers() {
	cat "$DIR/controllers"
}

# counter NAME: the controller's counter NAME (its I/O queue's).
counter() {
	kv_counter "$DIR/controllers" "kvnvme$INST: " "$1"
}

setup() {
	kv_nvmet_up || { kv_msg "the target's setup failed"; return 1; }
	{ kv_load_layer && insmod "$KV_MODDIR/$KV_NVME.ko"; } || { kv_msg "insmod failed"; return 1; }
	command -v fio >/dev/null || { kv_msg "no fio in the guest (tools/build-fio.sh)"; return 1; }
	# A reconnect every second, for the case of the target away.
	kv_nvme_connect reconnect_delay=1,ctrl_loss_tmo=30 || return 1
	INST=$KV_NVME_INST
	DISK=/dev/kvnvme${INST}n1
	kv_wait test -b "$DISK" || { kv_msg "no disk: $(controllers)"; return 1; }
}

# Sequential writes, each block verified by reading it back, at block
# sizes from a sector to 1 MiB (the largest request the disk takes), each
# size in its own 4 MiB (512 B: 1 MiB) of the disk: 512 B and 4 KiB
# writes go in the capsule, larger ones are registered.
seq_write_verify_block_sizes() {
	local bs i=0 size inl reg
	inl=$(counter inline) reg=$(counter registered)
	for bs in 512 4k 16k 128k 1m; do
		size=4m
		[ $bs = 512 ] && size=1m
		fio_run "$DISK" "seq_write_$bs" --rw=write --bs=$bs --iodepth=16 \
			--offset=$((i * 4))m --size=$size --verify=crc32c || return 1
		i=$((i + 1))
	done
	kv_msg "in the capsule: $(($(counter inline) - inl)), registered: $(($(counter registered) - reg))"
	[ $(($(counter inline) - inl)) -ge 3072 ] && [ $(($(counter registered) - reg)) -ge 300 ]
}

# Random 4-KiB writes, verified, at queue depths 1, 32 and 128 (one more
# than the queue's tags: blk-mq holds the rest back).
rand_write_verify_queue_depths() {
	local qd
	for qd in 1 32 128; do
		fio_run "$DISK" "rand_write_qd$qd" --rw=randwrite --bs=4k --iodepth=$qd \
			--offset=24m --size=4m --verify=crc32c || return 1
	done
	[ "$(counter timeouts)" = 0 ] && [ "$(counter errors)" = 0 ]
}

# A random mix of reads and writes (70 % reads) of sizes from a sector to
# 1 MiB at queue depth 32, then every block written verified.
mixed_sizes_verify() {
	fio_run "$DISK" mixed --rw=randrw --rwmixread=70 \
		--bssplit=512/10:4k/30:16k/20:64k/20:256k/10:1m/10 --iodepth=32 \
		--offset=32m --size=16m --verify=crc32c
}

# The C host (nvme-rdma) on the same namespace: fio's blocks written
# through kverbs_nvme pass its verification through the C host's disk,
# and the reverse (verify_only: the same job reads and checks).
c_host_verifies_ours_and_reverse() {
	kv_nvme_c_cross_verify "$DISK" 48m 52m 4m 16
}

# fio's verification can fail: blocks written through the disk pass the
# same job's verification, then a sector of them is overwritten on the
# target's RAM disk (O_DIRECT: busybox's dd "oflag=direct" left its write
# in the RAM disk's page cache, which the target's bios do not see), and
# the verification through the disk reports it (a bad checksum).
verify_catches_corruption() {
	set -- --rw=write --bs=64k --iodepth=4 --offset=56m --size=1m --verify=crc32c --do_verify=0
	fio_run "$DISK" corrupt_written "$@" || return 1
	fio_verify "$DISK" corrupt_verified_clean "$@" || return 1
	dd if=/dev/urandom of=/tmp/kvnvme.noise bs=512 count=1 2>/dev/null &&
		kv_dio w /dev/ram0 $((56 * 2048 + 300)) 1 /tmp/kvnvme.noise 0 0 || return 1
	if fio_verify "$DISK" corrupt_verified "$@"; then
		kv_msg "fio's verification passed a corrupted sector"
		return 1
	fi
	grep -q -i -E 'verify.*(bad|fail)|bad (magic|header)|crc32c' "$OUT.corrupt_verified.err" "$OUT.corrupt_verified"
}

# ext4 on the disk, as a user would: made (mkfs.ext4), mounted (rmmod
# refused then: the disk is in use), the guest's modules and 8 MiB of
# noise copied in, unmounted; e2fsck finds it clean; mounted again, every
# file reads back the same.
ext4_mkfs_mount_copy_fsck() {
	local m=/tmp/kvnvme.mnt r=0 f
	mkfs.ext4 -q -F "$DISK" >"$OUT.mkfs" 2>&1 || { kv_msg "mkfs.ext4: $(tail -n 2 "$OUT.mkfs")"; return 1; }
	mkdir -p $m && mount -t ext4 "$DISK" $m || return 1
	if rmmod "$KV_NVME" 2>/dev/null; then
		kv_msg "rmmod passed with $DISK mounted"
		return 1
	fi
	dd if=/dev/urandom of=/tmp/kvnvme.noise bs=1M count=8 2>/dev/null &&
		cp -r /kverbs $m/ && cp /tmp/kvnvme.noise $m/noise || r=1
	umount $m || return 1
	e2fsck -f -n "$DISK" >"$OUT.fsck" 2>&1 || { kv_msg "e2fsck: $(tail -n 3 "$OUT.fsck" | tr -d '*' | tr '\n' ' ')"; r=1; }
	kv_msg "$(tail -n 1 "$OUT.fsck")"
	# Nothing of it from the page cache: what follows reads the wire.
	echo 3 >/proc/sys/vm/drop_caches
	mount -t ext4 -o ro "$DISK" $m || return 1
	cmp -s /tmp/kvnvme.noise $m/noise || { kv_msg "noise differs"; r=1; }
	for f in /kverbs/*; do
		[ -f "$f" ] || continue
		cmp -s "$f" "$m$f" || { kv_msg "$f differs"; r=1; }
	done
	umount $m || return 1
	return $r
}

# Every request finished, none failed or timed out; the target
# invalidated every key.
counters_clean() {
	kv_msg "$(controllers)"
	[ "$(counter failed)" = 0 ] && [ "$(counter submitted)" = "$(counter finished)" ] &&
		[ "$(counter status_errors)" = 0 ] && [ "$(counter timeouts)" = 0 ] &&
		[ "$(counter remote_inv)" = "$(counter registered)" ] && [ "$(counter local_inv)" = 0 ]
}

# fio writes 16 MiB at random while the target goes for 2 s and comes
# back: the controller reconnects, and every block verifies
# (kv_nvme_fio_across_away).
verify_across_reconnect() {
	local link=$KV_NVMET/ports/$KV_NVMET_PORT/subsystems/$KV_NVME_NQN
	kv_nvme_fio_across_away "$DISK" "$INST" 8m 16m 16 "rm $link" \
		"ln -s $KV_NVMET/subsystems/$KV_NVME_NQN $link"
}

# With the file system unmounted, rmmod with the controller connected
# passes: the controller is deleted (its disk, its queues), and the
# target's controller goes.
rmmod_unmounted() {
	rmmod "$KV_NVME" || { kv_msg "rmmod refused with $DISK unmounted"; return 1; }
	[ ! -e "$DISK" ] || { kv_msg "$DISK is still there"; return 1; }
	kv_wait kv_nvmet_no_ctrls || { kv_msg "the target's controllers: $(kv_nvmet_ctrls)"; return 1; }
}

kv_begin 11
kv_case setup_nvmet_load_connect setup
kv_case nvme_fio_seq_write_verify_512b_to_1m_capsule_and_keyed seq_write_verify_block_sizes
kv_case nvme_fio_rand_write_verify_qd_1_32_128 rand_write_verify_queue_depths
kv_case nvme_fio_randrw_mixed_sizes_verify mixed_sizes_verify
kv_case nvme_fio_c_host_verifies_ours_and_we_verify_its c_host_verifies_ours_and_reverse
kv_case nvme_fio_verify_catches_sector_corrupted_on_target verify_catches_corruption
kv_case nvme_fio_every_request_finished_key_invalidated counters_clean
kv_case nvme_fio_verify_across_target_away_2s_reconnected verify_across_reconnect
kv_case nvme_fs_ext4_made_filled_fsck_clean_rmmod_refused_while_mounted ext4_mkfs_mount_copy_fsck
kv_case nvme_rmmod_unmounted_deletes_controller_and_target_ctrl rmmod_unmounted
kv_end
