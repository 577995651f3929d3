#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# kverbs_nvme's I/O path against the kernel's own target
# (kverbs_nvme_lib.sh: nvmet-rdma on rxe over dummy0, namespace 1 on
# /dev/ram0, namespace 2 on /dev/ram1): a controller's I/O queue (qid 1,
# on the layer's capsule queue) and a disk a namespace, /dev/kvnvme<C>n1
# and n2, with the C host's limits for RDMA. Data written through a disk
# (O_DIRECT, kv_dio) is what the target's RAM disk holds and the reverse,
# from a sector to 4 MiB, at odd sectors, from buffers not page aligned,
# in parallel; writes of at most 4 KiB in the capsule, larger ones
# registered; BLKZEROOUT sends Write Zeroes; fsync sends Flush; every
# request's key is invalidated by
# the target (SEND with invalidate: no LOCAL_INV); the kernel's C host
# (nvme-rdma) reads what kverbs_nvme wrote and the reverse, on the same
# namespace; a status without DNR retried 5 times; the disk held open
# keeps the module; the target gone for 3 s during writes: the controller
# reconnects and nothing is lost; gone past ctrl_loss_tmo: the writes end
# with EIO and the controller is deleted; a disconnect while it
# reconnects; the RDMA device removed during writes deletes the
# controller and its disks; a disconnect deletes the disks and the
# target's controller.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"
# shellcheck source=kverbs_nvme_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_nvme_lib.sh"

DIR=/sys/kernel/debug/$KV_NVME
PAT=/tmp/kvnvme.pat
# The controller's instance (kvnvme<INST>) and its first namespace's disk,
# set by connect.
INST=
DISK=

load() {
	kv_load_layer && insmod "$KV_MODDIR/$KV_NVME.ko"
}

controllers() {
	cat "$DIR/controllers"
}

# counter NAME: the controller's counter NAME (its I/O queue's).
counter() {
	kv_counter "$DIR/controllers" "kvnvme$INST: " "$1"
}

# The recovery's options: a reconnect every second, the controller
# deleted 5 s after it lost its target.
RECOVERY=reconnect_delay=1,ctrl_loss_tmo=5

# connect: a controller connected (INST), its two disks there (DISK the
# first).
connect() {
	kv_nvme_connect $RECOVERY || return 1
	INST=$KV_NVME_INST
	DISK=/dev/kvnvme${INST}n1
	kv_wait test -b "$DISK" -a -b "/dev/kvnvme${INST}n2" || { kv_msg "no disks: $(controllers)"; return 1; }
}

# disconnect: every controller deleted, and the target's.
disconnect() {
	echo all >"$DIR/disconnect" || return 1
	kv_wait kv_nvmet_no_ctrls || { kv_msg "the target's controllers: $(kv_nvmet_ctrls)"; return 1; }
}

setup() {
	kv_nvmet_up || { kv_msg "the target's setup failed"; return 1; }
	kv_nvmet_ns_add 2 /dev/ram1 || { kv_msg "namespace 2 on /dev/ram1 failed"; return 1; }
	load || { kv_msg "insmod failed"; return 1; }
	dd if=/dev/urandom of=$PAT bs=1M count=5 2>/dev/null || return 1
	connect
}

# sysfs DISK ATTR: the queue attribute ATTR of DISK.
sysfs() {
	cat "/sys/block/$1/queue/$2"
}

# Each namespace is a disk of its RAM disk's size, with the C host's
# limits: 256 segments, 1 MiB a request (a registration of 257 pages: one
# more, for a request that starts within a page), no gap within a page,
# a write cache with FUA
# (nvmet says it has one); the controllers file names both disks.
disks_of_namespaces() {
	local n want
	for n in 1 2; do
		want=$(cat /sys/block/ram$((n - 1))/size)
		[ "$(cat "/sys/block/kvnvme${INST}n$n/size")" = "$want" ] ||
			{ kv_msg "kvnvme${INST}n$n: $(cat "/sys/block/kvnvme${INST}n$n/size") sectors, want $want"; return 1; }
	done
	kv_msg "$(controllers)"
	if ! { [ "$(sysfs "kvnvme${INST}n1" max_segments)" = 256 ] &&
		[ "$(sysfs "kvnvme${INST}n1" max_hw_sectors_kb)" = 1024 ] &&
		[ "$(sysfs "kvnvme${INST}n1" virt_boundary_mask)" = 4095 ] &&
		[ "$(sysfs "kvnvme${INST}n1" logical_block_size)" = 512 ] &&
		[ "$(sysfs "kvnvme${INST}n1" write_cache)" = "write back" ] &&
		[ "$(sysfs "kvnvme${INST}n1" fua)" = 1 ]; }; then
		kv_msg "limits: $(grep -H . "/sys/block/kvnvme${INST}n1/queue/"{max_segments,max_hw_sectors_kb,virt_boundary_mask,write_cache,fua})"
		return 1
	fi
	[[ "$(controllers)" == *"| disks kvnvme${INST}n1 kvnvme${INST}n2"* ]]
}

# Transfers are kv_dio's: one O_DIRECT pread or pwrite, from a buffer at
# a chosen offset in a page, refused O_DIRECT an error (busybox's dd
# retries a refused O_DIRECT transfer buffered: seen here, data it wrote
# "direct" through a disk sat in the disk's page cache).

# same A B SECTOR COUNT [BUFOFF]: COUNT sectors at SECTOR of devices A and
# B are the same, each read with O_DIRECT into a buffer at BUFOFF (0) in
# its page.
same() {
	local a=/tmp/kvnvme.a.$BASHPID b=/tmp/kvnvme.b.$BASHPID r=0
	kv_dio r "$1" "$3" "$4" $a 0 "${5:-0}" && kv_dio r "$2" "$3" "$4" $b 0 "${5:-0}" || return 1
	if ! cmp -s $a $b; then
		kv_msg "$1 and $2 differ at $4 sectors from $3: $(cmp $a $b 2>&1), $(cmp -l $a $b | wc -l) bytes"
		kv_dio r /dev/ram0 "$3" "$4" $a.ram 0 0 &&
			kv_msg "the target's RAM disk: as $1: $(cmp -s $a $a.ram && echo yes || echo no), as $2: $(cmp -s $b $a.ram && echo yes || echo no)"
		rm -f $a.ram
		r=1
	fi
	rm -f $a $b
	return $r
}

# differ A B SECTOR COUNT: both read, and what they hold differs.
differ() {
	local a=/tmp/kvnvme.a.$BASHPID b=/tmp/kvnvme.b.$BASHPID r=1
	kv_dio r "$1" "$3" "$4" $a 0 0 && kv_dio r "$2" "$3" "$4" $b 0 0 || return 1
	cmp -s $a $b || r=0
	rm -f $a $b
	return $r
}

# put DEV SECTOR COUNT [SKIP] [BUFOFF]: COUNT sectors of the pattern, from
# its sector SKIP, written at SECTOR of DEV with O_DIRECT from a buffer at
# BUFOFF (0) in its page.
put() {
	kv_dio w "$1" "$2" "$3" $PAT "${4:-0}" "${5:-0}"
}

# Sizes from a sector to 4 MiB (split in requests of 1 MiB at most), at
# aligned and odd sectors, from buffers aligned and not (within the DMA
# alignment, 512): written through the disk, the target's RAM disk holds
# them; written to the RAM disk, the disk reads them.
data() {
	local s c o n=0 k=0
	for s in 0 1 8 2047 122871; do
		for c in 1 8 255 2048 2041 8192; do
			k=$(((k + 1) % 7))
			# Buffers at a page, at 512 B into one, 512 B before its end.
			o=$(((k % 3) * 512 + (k % 3 == 2 ? 2560 : 0)))
			put "$DISK" "$s" "$c" "$k" $o && same "$DISK" /dev/ram0 "$s" "$c" $o || return 1
			put /dev/ram0 "$s" "$c" $((k + 1)) && same /dev/ram0 "$DISK" "$s" "$c" $o || return 1
			n=$((n + 1))
		done
	done
	kv_msg "$n sizes and offsets each way; $(controllers)"
	[ "$(counter errors)" = 0 ] && [ "$(counter submitted)" = "$(counter finished)" ]
}

# In-capsule data: a write of at most 4 KiB (IOCCSZ 260 x 16 - 64) in at
# most 4 segments goes in the capsule's send, with no registration;
# larger ones are registered; both land on the target's RAM disk.
in_capsule() {
	local i0 r0
	i0=$(counter inline) r0=$(counter registered)
	[[ "$(controllers)" == *", inline_max 4096, "* ]] || { kv_msg "$(controllers)"; return 1; }
	# 4 KiB from a page, from 512 B into one (two segments), 512 B.
	put "$DISK" 5000 8 1 0 && put "$DISK" 5008 8 2 512 && put "$DISK" 5016 1 3 3584 || return 1
	if ! { [ "$(counter inline)" = $((i0 + 3)) ] && [ "$(counter registered)" = "$r0" ]; }; then
		kv_msg "inline $i0 -> $(counter inline), registered $r0 -> $(counter registered)"
		return 1
	fi
	# 4 KiB + 512 B: registered.
	put "$DISK" 5017 9 4 0 || return 1
	if ! { [ "$(counter inline)" = $((i0 + 3)) ] && [ "$(counter registered)" = $((r0 + 1)) ]; }; then
		kv_msg "inline $(counter inline), registered $r0 -> $(counter registered)"
		return 1
	fi
	same "$DISK" /dev/ram0 5000 26
}

# Write Zeroes (nvmet has it: ONCS bit 3), requests as large as others:
# BLKZEROOUT of 600 sectors inside 1000 of the pattern sends Write Zeroes
# commands, and the target's RAM disk holds zeroes there and the pattern
# around.
write_zeroes() {
	local w z=/tmp/kvnvme.z want=/tmp/kvnvme.want r=0
	w=$(counter write_zeroes)
	[ "$(sysfs "kvnvme${INST}n1" write_zeroes_max_bytes)" = $((2048 * 512)) ] ||
		{ kv_msg "write_zeroes_max_bytes $(sysfs "kvnvme${INST}n1" write_zeroes_max_bytes)"; return 1; }
	put "$DISK" 20000 1000 0 && kv_dio z "$DISK" 20100 600 - 0 0 || return 1
	[ "$(counter write_zeroes)" -gt "$w" ] || { kv_msg "write_zeroes: $w, then $(counter write_zeroes)"; return 1; }
	{ head -c $((100 * 512)) $PAT && head -c $((600 * 512)) /dev/zero &&
		tail -c +$((700 * 512 + 1)) $PAT | head -c $((300 * 512)); } >$want
	kv_dio r /dev/ram0 20000 1000 $z 0 0 || return 1
	cmp -s $want $z || { kv_msg "the RAM disk: $(cmp $want $z 2>&1)"; r=1; }
	rm -f $z $want
	[ $r = 0 ] && same "$DISK" /dev/ram0 20000 1000
}

# Namespace 2 is the other RAM disk: what it holds is not namespace 1's.
second_namespace() {
	put "/dev/kvnvme${INST}n2" 100 64 3 && same "/dev/kvnvme${INST}n2" /dev/ram1 100 64 || return 1
	put "$DISK" 100 64 5 && same "$DISK" /dev/ram0 100 64 || return 1
	differ /dev/ram0 /dev/ram1 100 64
}

# Four writers and readers at once, each on its own region: the queue's
# tags taken and given back from both CPUs.
parallel() {
	kv_parallel 4 parallel_one
}

# parallel_one I: writer and reader I's three transfers, in its region.
parallel_one() {
	local s
	for s in 0 700 1400; do
		put "$DISK" $(($1 * 8192 + s)) 600 $(($1 * 100 + s)) &&
			same "$DISK" /dev/ram0 $(($1 * 8192 + s)) 600 || return 1
	done
}

# A write with fsync: the disk's write cache is flushed with an NVMe Flush.
flush() {
	local f
	f=$(counter flushes)
	dd if=$PAT of="$DISK" bs=4096 count=4 conv=fsync 2>/dev/null || return 1
	[ "$(counter flushes)" -gt "$f" ] || { kv_msg "flushes: $f, then $(counter flushes)"; return 1; }
}

# Every request with data had its pages registered, and the target
# invalidated each key with its response (a SEND with invalidate naming
# it): no LOCAL_INV posted; every request finished, none failed.
keys_invalidated_by_target() {
	local reg
	reg=$(counter registered)
	kv_msg "$(controllers)"
	[ "$reg" -gt 100 ] || { kv_msg "registered: $reg"; return 1; }
	[ "$(counter remote_inv)" = "$reg" ] && [ "$(counter local_inv)" = 0 ] || return 1
	[ "$(counter failed)" = 0 ] && [ "$(counter submitted)" = "$(counter finished)" ] &&
		[ "$(counter status_errors)" = 0 ] && [ "$(counter timeouts)" = 0 ]
}

# The kernel's C host on the same subsystem (a second controller): what
# kverbs_nvme writes, it reads, and the reverse, on namespace 1; the
# diagnostics say which host's read the target's RAM disk agrees with.
c_host_cross_check() {
	local c r=0 i
	kv_nvme_c_connect "" || return 1
	kv_wait kv_nvme_c_disk 1 || { kv_msg "no disk of namespace 1: $(ls /sys/block)"; kv_nvme_c_disconnect; return 1; }
	c=$KV_NVME_C_DISK
	kv_wait test -b "$c" || { kv_msg "no $c"; kv_nvme_c_disconnect; return 1; }
	for i in 1 2 3 4 5 6; do
		put "$DISK" $((4096 * i)) 2048 $i && same "$DISK" "$c" $((4096 * i)) 2048 || r=1
		put "$c" $((4096 * i + 2048)) 777 $((i + 1)) && same "$c" "$DISK" $((4096 * i + 2048)) 777 || r=1
	done
	kv_nvme_c_disconnect || return 1
	return $r
}

# A failed status without Do Not Retry is sent again: with the target's
# ANA group inaccessible (nvmet answers every I/O "asymmetric access
# inaccessible", a path error without DNR), a read goes 6 times (5
# retries, the C host's nvme_max_retries), each a requeue of the request
# (kverbs::io, Answer::retry), then fails; the group back to optimized, it
# passes.
ana_retries() {
	local ana=$KV_NVMET/ports/$KV_NVMET_PORT/ana_groups/1/ana_state r0 s0 f0 r=0
	[ -e "$ana" ] || { kv_msg "no $ana"; return 1; }
	r0=$(counter retried) s0=$(counter status_errors) f0=$(counter failed)
	echo inaccessible >"$ana" || return 1
	if kv_dio r "$DISK" 0 8 /tmp/kvnvme.ana 0 0 2>/dev/null; then
		kv_msg "the read passed with the ANA group inaccessible"
		r=1
	fi
	echo optimized >"$ana" || return 1
	kv_msg "retried $(($(counter retried) - r0)), status errors $(($(counter status_errors) - s0)), failed $(($(counter failed) - f0))"
	[ $(($(counter retried) - r0)) = 5 ] && [ $(($(counter status_errors) - s0)) = 6 ] &&
		[ $(($(counter failed) - f0)) = 1 ] || r=1
	same "$DISK" /dev/ram0 0 8 || r=1
	return $r
}

# The disk open keeps the module: rmmod refused; closed, the module stays
# usable.
rmmod_refused_while_open() {
	local fd r=0
	exec {fd}<"$DISK" || return 1
	rmmod "$KV_NVME" 2>/dev/null && r=1
	exec {fd}<&-
	[ $r = 0 ] || { kv_msg "rmmod passed with $DISK open"; load; return 1; }
	kv_mod_loaded "$KV_NVME" && same "$DISK" /dev/ram0 0 8
}

# dd_bg: O_DIRECT writes of 64 KiB to the disk in the background, through
# one descriptor held open, until one fails (DD_PID), the error in DD_ERR.
# Held open: a process per write would reopen the disk between writes, and
# a disk deleted in that window fails the open with ENXIO, not a write
# with EIO (seen in CI's device removal case).
DD_ERR=/tmp/kvnvme.dd
dd_bg() {
	[ -b "$DISK" ] || { kv_msg "no $DISK"; return 1; }
	kv_dio W "$DISK" 0 128 $PAT 0 0 2>>$DD_ERR &
	DD_PID=$!
	sleep 1
}

# dd_failed: the background dd ended with an I/O error within 30 s.
dd_failed() {
	local i
	for ((i = 0; i < 300; i++)); do
		kill -0 "$DD_PID" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$DD_PID" 2>/dev/null; then
		kv_msg "the dd still runs after 30 s"
		kill "$DD_PID"
		return 1
	fi
	wait "$DD_PID" && { kv_msg "the dd passed"; return 1; }
	kv_msg "dd: $(tr '\n' ' ' <$DD_ERR)"
	grep -q "Input/output error" $DD_ERR
}

# ctrl_field NAME: the number after NAME in the controller's line.
ctrl_field() {
	local line
	line=$(controllers | grep "^kvnvme$INST: ")
	[[ $line =~ [\;,\ ]$1\ ([0-9]+) ]] && echo "${BASH_REMATCH[1]}"
}

# state_is STATE: the controller's state.
state_is() {
	controllers | grep -q "^kvnvme$INST: $1, "
}

PORT_LINK=$KV_NVMET/ports/$KV_NVMET_PORT/subsystems/$KV_NVME_NQN

# target_away / target_back: the subsystem unlinked from the port (nvmet
# deletes its controllers there, disconnects their queues and, the port
# left without a subsystem, stops listening), and linked again.
target_away() {
	rm "$PORT_LINK"
}
target_back() {
	ln -s "$KV_NVMET/subsystems/$KV_NVME_NQN" "$PORT_LINK"
}

# The target goes for 3 s while a writer writes 40 blocks of 64 KiB one
# after another (each its own process): the controller is reset (what its
# I/O queue carried requeued), reconnects every second (refused: nothing
# listens) and is live again once the target is back; no write fails, the writes made while it was away were held back
# (given back busy), and the target's RAM disk, zeroed first, holds every
# block.
target_back_during_writes() {
	local i pid r=0 zero=/tmp/kvnvme.zero got=/tmp/kvnvme.got
	head -c $((40 * 65536)) /dev/zero >$zero && kv_dio w /dev/ram0 0 5120 $zero 0 0 || return 1
	(for ((i = 0; i < 40; i++)); do
		kv_dio w "$DISK" $((i * 128)) 128 $PAT $((i * 128)) 0 || exit 1
	done) 2>$DD_ERR &
	pid=$!
	sleep 0.5
	target_away || return 1
	kv_wait state_is connecting || r=1
	sleep 3
	target_back || return 1
	kv_wait state_is connected || r=1
	wait "$pid" || { kv_msg "a write failed: $(tr '\n' ' ' <$DD_ERR)"; r=1; }
	kv_msg "writes held back $(counter not_live) times; reconnects $(ctrl_field reconnects);" \
		"$(kv_log_since "$KV_CASE" | grep -o "I/O queues down: .*")"
	kv_logged "kvnvme$INST: I/O queues down: [0-9]* requests requeued, 0 ended" || r=1
	[ "$(ctrl_field reconnects)" = 1 ] || r=1
	[ "$(counter not_live)" -ge 1 ] || { kv_msg "no write was held back"; r=1; }
	kv_logged "kvnvme$INST: [a-zA-Z/ ]*: resetting" || r=1
	kv_logged "kvnvme$INST: reconnected: controller [0-9]*, live" || r=1
	kv_dio r /dev/ram0 0 5120 $got 0 0 || return 1
	head -c $((40 * 65536)) $PAT | cmp -s - $got || { kv_msg "the target's RAM disk differs"; r=1; }
	rm -f $zero $got
	return $r
}

# The target goes during a dd and stays away past ctrl_loss_tmo (5 s): the
# dd's writes wait, then end with EIO when the controller is deleted, with
# its disks; no request timed out.
target_gone_past_ctrl_loss_tmo() {
	local r=0 t0
	: >$DD_ERR
	dd_bg || return 1
	read -r t0 _ </proc/uptime
	target_away || return 1
	dd_failed || r=1
	kv_msg "the dd's EIO after $(kv_secs_since "$t0") s"
	[ -z "$(controllers)" ] || { kv_msg "left: $(controllers)"; r=1; }
	[ ! -e "$DISK" ] || { kv_msg "$DISK is still there"; r=1; }
	kv_logged "kvnvme$INST: not live again within ctrl_loss_tmo 5 s: controller deleted" || r=1
	! kv_logged "kvnvme$INST: .*timed out" || r=1
	target_back || return 1
	[ $r = 0 ] && connect
}

# A disconnect while the controller reconnects: it goes at once (its
# attempt under way given up), with its disks; a read of a disk meanwhile
# ends with EIO.
disconnect_while_reconnecting() {
	local pid r=0
	target_away || return 1
	kv_wait state_is connecting || { kv_msg "$(controllers)"; r=1; }
	kv_dio r "$DISK" 0 8 /tmp/kvnvme.r 0 0 2>$DD_ERR &
	pid=$!
	sleep 1
	echo "$INST" >"$DIR/disconnect" || r=1
	wait "$pid" && { kv_msg "the read passed"; r=1; }
	[ -z "$(controllers)" ] || { kv_msg "left: $(controllers)"; r=1; }
	[ ! -e "$DISK" ] || { kv_msg "$DISK is still there"; r=1; }
	kv_logged "kvnvme$INST: disconnected (connecting)" || r=1
	target_back || return 1
	[ $r = 0 ] && connect
}

# The RDMA device removed during a dd: the controller is deleted with its
# disks (the I/O queue shut down first: the dd ends with EIO), and the
# removal ends. The device and the target come back, and a controller
# connects again.
device_removed_during_dd() {
	local r=0
	: >$DD_ERR
	dd_bg || return 1
	kv_rxe_del rxe_dummy || { kv_msg "rdma link del failed"; return 1; }
	dd_failed || r=1
	kv_logged "kvnvme$INST: device removed: controller deleted" || r=1
	if [ -n "$(controllers)" ] || [ -e "$DISK" ]; then
		kv_msg "left: $(controllers)"
		r=1
	fi
	{ kv_nvmet_down && kv_nvmet_up && kv_nvmet_ns_add 2 /dev/ram1; } ||
		{ kv_msg "the target's setup again failed"; return 1; }
	[ $r = 0 ] && connect && same "$DISK" /dev/ram0 0 64
}

# A disconnect deletes the disks, then the I/O queue, then shuts the
# controller down; the target's controller goes.
disconnect_deletes_disks() {
	put "$DISK" 300 16 && disconnect || return 1
	kv_logged "kvnvme$INST: shut down, disconnected" || return 1
	[ ! -e "$DISK" ] && [ ! -e "/dev/kvnvme${INST}n2" ] && [ -z "$(controllers)" ]
}

# After the disconnect, a controller connects again, reads, disconnects.
connect_again() {
	connect && same "$DISK" /dev/ram0 0 64 && disconnect
}

kv_begin 19
kv_case setup_nvmet_two_namespaces_load_connect setup
kv_case nvme_io_disk_per_namespace_with_rdma_limits disks_of_namespaces
kv_case nvme_io_data_matches_target_ram_disk_both_ways data
kv_case nvme_io_small_writes_in_capsule_larger_registered in_capsule
kv_case nvme_io_write_zeroes_zeroes_target_ram_disk write_zeroes
kv_case nvme_io_second_namespace_is_second_ram_disk second_namespace
kv_case nvme_io_parallel_writers_readers parallel
kv_case nvme_io_fsync_sends_flush flush
kv_case nvme_io_every_key_invalidated_by_target keys_invalidated_by_target
kv_case nvme_io_c_host_reads_ours_and_we_read_its c_host_cross_check
kv_case nvme_io_status_without_dnr_retried_5_times_then_fails ana_retries
kv_case nvme_io_rmmod_refused_while_disk_open rmmod_refused_while_open
kv_case nvme_io_target_back_in_3s_during_writes_reconnected_nothing_lost target_back_during_writes
kv_case nvme_io_target_gone_past_ctrl_loss_tmo_dd_eio_controller_deleted target_gone_past_ctrl_loss_tmo
kv_case nvme_io_disconnect_while_reconnecting_goes_at_once disconnect_while_reconnecting
kv_case nvme_io_device_removed_during_dd_deletes_disks device_removed_during_dd
kv_case nvme_io_disconnect_deletes_disks_and_target_ctrl disconnect_deletes_disks
kv_case nvme_io_connect_again_read_disconnect connect_again
kv_end
