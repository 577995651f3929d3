#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The layer's block binding (rust/kverbs/blk), on the self-test's RAM
# disks in safe Rust (samples/kverbs_selftest/blk.rs, no RDMA): a disk's
# size, block size and queue limits as the block layer shows them; data
# written at many offsets and sizes with O_DIRECT reads back the same
# through the requests' scatter-gather mappings, on one and two hardware
# queues, ended in queue_rq or through Request::complete; a flush reaches
# the driver; a request ended with an error gives EIO, one given back busy
# is requeued and done, one held times out and the driver's timeout ends
# it; the module is pinned while a disk is open, and a
# disk deleted with a file open reads nothing more; bad commands (limits
# the block layer would refuse with a warning among them) are refused with
# an errno; the module's unload deletes its disks.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

CTL=$KV_SELFTEST_DEBUGFS/blk
PAT=/tmp/kvblk.pat

setup() {
	kv_load_selftest || return 1
	[ -w "$CTL" ] || { kv_msg "no $CTL"; return 1; }
	echo "add 0 size=16 hwq=2" >"$CTL" || return 1
	kv_wait test -b /dev/kvblk0 || { kv_msg "no /dev/kvblk0"; return 1; }
	dd if=/dev/urandom of=$PAT bs=1024 count=1024 2>/dev/null
}

# counter DISK NAME: the disk's counter NAME in the control file.
counter() {
	kv_counter "$CTL" "kvblk$1: " "$2"
}

# queue_attr NAME: /sys/block/kvblk0/queue/NAME.
queue_attr() {
	cat "/sys/block/kvblk0/queue/$1"
}

limits() {
	local sz ss q
	sz=$(blockdev --getsz /dev/kvblk0) ss=$(blockdev --getss /dev/kvblk0)
	kv_msg "size $sz sectors, blocks of $ss, max_hw_sectors_kb $(queue_attr max_hw_sectors_kb), max_segments $(queue_attr max_segments), write_cache $(queue_attr write_cache), fua $(queue_attr fua)"
	[ "$sz" = 32768 ] && [ "$ss" = 512 ] || return 1
	[ "$(queue_attr max_hw_sectors_kb)" = 512 ] || return 1
	[ "$(queue_attr max_segments)" = 64 ] || return 1
	[ "$(queue_attr write_cache)" = "write back" ] || return 1
	[ "$(queue_attr fua)" = 1 ] || return 1
	[ "$(queue_attr virt_boundary_mask)" = 0 ] || return 1
	# Two hardware queues asked for: blk-mq makes at most one a possible
	# CPU (nr_cpu_ids: "0" or "0-N" here).
	q=$(cat /sys/devices/system/cpu/possible)
	q=$((${q##*-} + 1))
	q=$((q < 2 ? q : 2))
	[ "$(find /sys/block/kvblk0/mq -mindepth 1 -maxdepth 1 | wc -l)" = "$q" ] ||
		{ kv_msg "hardware queues: $(ls /sys/block/kvblk0/mq), want $q"; return 1; }
}

# roundtrip DEV SECTOR COUNT: COUNT sectors of the pattern written at
# SECTOR with O_DIRECT read back the same.
roundtrip() {
	kv_roundtrip $PAT "$@"
}

# data DEV: sizes from a sector to 1 MiB (two requests of 512 KiB), at
# aligned and odd sectors, to the disk's last sector; every request's
# mapping checked by the driver (bad_maps 0), on both hardware queues.
data() {
	local dev=/dev/kvblk$1 s c n=0
	for s in 0 1 7 8 100 2047 4096 32760; do
		for c in 1 3 8 64 255 256 1024 2048; do
			[ $((s + c)) -le 32768 ] || continue
			roundtrip "$dev" "$s" "$c" || return 1
			n=$((n + 1))
		done
	done
	kv_msg "$n round trips; $(grep "^kvblk$1: " "$CTL")"
	[ "$(counter "$1" bad_maps)" = 0 ] || return 1
	[ "$(counter "$1" max_segments)" -gt 1 ] || { kv_msg "no request of more than one segment"; return 1; }
}

data_direct() {
	local q
	data 0 || return 1
	# Both hardware queues took requests (one a CPU; with one CPU, the
	# first only).
	q=$(counter 0 hw_queues_seen)
	if [ "$(nproc)" -ge 2 ]; then
		[ "$q" = 0x3 ] || { kv_msg "hardware queues seen: $q"; return 1; }
	fi
}

# A disk that ends its requests through Request::complete: the same data,
# each read and write completed by the completion callback.
data_complete() {
	local n
	echo "add 1 size=16 mode=complete" >"$CTL" || return 1
	kv_wait test -b /dev/kvblk1 || return 1
	data 1 || return 1
	n=$(($(counter 1 reads) + $(counter 1 writes)))
	[ "$n" -gt 0 ] || return 1
	[ "$(counter 1 completed)" -ge "$n" ] || { kv_msg "completed $(counter 1 completed) of $n"; return 1; }
}

# A write with fsync: the driver is sent a flush (its write cache).
flush() {
	local f
	f=$(counter 0 flushes)
	dd if=$PAT of=/dev/kvblk0 bs=4096 count=4 conv=fsync 2>/dev/null || return 1
	[ "$(counter 0 flushes)" -gt "$f" ] || { kv_msg "flushes: $f, then $(counter 0 flushes)"; return 1; }
}

# fail_next: the next read ends with an error, and the reader gets EIO.
fail_next() {
	local err
	echo "fail_next 0 1" >"$CTL" || return 1
	err=$(dd if=/dev/kvblk0 of=/dev/null bs=4096 count=1 iflag=direct 2>&1) &&
		{ kv_msg "the read passed"; return 1; }
	kv_msg "$err"
	[[ $err == *"Input/output error"* ]] || return 1
	[ "$(counter 0 failed)" = 1 ] || return 1
	# The next one passes.
	dd if=/dev/kvblk0 of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null
}

# busy_next 3: three requests given back busy are requeued, and the write
# completes with its data.
busy_next() {
	echo "busy_next 0 3" >"$CTL" || return 1
	roundtrip /dev/kvblk0 200 16 || return 1
	[ "$(counter 0 busy)" = 3 ] || { kv_msg "busy: $(counter 0 busy)"; return 1; }
}

# requeue_next 3: the driver requeues the write three times
# (Request::requeue), blk-mq dispatches it again each time (each a
# dispatch of a request requeued before), and it completes with its data,
# its count of requeues 3; then 200 reads, every request struct of the
# disk's 64 reused: none comes with a count of requeues (the count is
# reset on a first dispatch); one read requeued once has 1.
requeue_next() {
	local seen
	echo "requeue_next 0 3" >"$CTL" || return 1
	roundtrip /dev/kvblk0 300 16 || return 1
	[ "$(counter 0 requeued)" = 3 ] || { kv_msg "requeued: $(counter 0 requeued)"; return 1; }
	seen=$(counter 0 requeued_seen)
	[ "$seen" = 3 ] || { kv_msg "dispatches of requeued requests: $seen, want 3"; return 1; }
	dd if=/dev/kvblk0 of=/dev/null bs=4096 count=200 iflag=direct 2>/dev/null || return 1
	kv_msg "$(grep kvblk0 "$CTL")"
	[ "$(counter 0 requeued_seen)" = 3 ] ||
		{ kv_msg "after 200 new reads: $(counter 0 requeued_seen) dispatches of requeued requests"; return 1; }
	echo "requeue_next 0 1" >"$CTL" || return 1
	dd if=/dev/kvblk0 of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null || return 1
	[ "$(counter 0 last_requeues)" = 1 ] || { kv_msg "last_requeues: $(counter 0 last_requeues), want 1"; return 1; }
}

# A disk that holds its requests: with a 1 s timeout, a read times out,
# the driver's timeout ends it with ETIMEDOUT and the reader gets an error;
# another read held is ended by release, and passes.
timeout() {
	local err t0 pid r=0
	echo "add 2 kib=64 mode=hold" >"$CTL" || return 1
	kv_wait test -b /dev/kvblk2 || return 1
	echo 1000 >/sys/block/kvblk2/queue/io_timeout || return 1
	read -r t0 _ </proc/uptime
	err=$(dd if=/dev/kvblk2 of=/dev/null bs=4096 count=1 iflag=direct 2>&1) &&
		{ kv_msg "the held read passed"; r=1; }
	kv_msg "after $(kv_secs_since "$t0") s: $err"
	[ "$(counter 2 timeouts)" = 1 ] || { kv_msg "timeouts: $(counter 2 timeouts)"; r=1; }
	echo 30000 >/sys/block/kvblk2/queue/io_timeout || r=1
	dd if=/dev/kvblk2 of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null &
	pid=$!
	sleep 0.5
	echo "release 2" >"$CTL" || r=1
	wait "$pid" || { kv_msg "the released read failed"; r=1; }
	[ "$(counter 2 timeouts)" = 1 ] || r=1
	echo "del 2" >"$CTL" || r=1
	return $r
}

# A disk open pins the module (its operations' owner): rmmod is refused
# until it is closed.
open_pins_module() {
	local r=0
	exec 3</dev/kvblk0
	if rmmod "$KV_SELFTEST" 2>/dev/null; then
		kv_msg "rmmod with /dev/kvblk0 open succeeded"
		r=1
	fi
	exec 3<&-
	kv_selftest_loaded || { kv_msg "the module went"; return 1; }
	return $r
}

# A disk deleted with a file open on it: the delete returns, the file
# reads nothing more (the disk's size is 0, or the read fails), and
# closing it frees the disk.
del_with_file_open() {
	local r=0 n
	exec 3</dev/kvblk1
	echo "del 1" >"$CTL" || r=1
	[ ! -e /sys/block/kvblk1 ] || { kv_msg "kvblk1 is still there"; r=1; }
	n=$(head -c 4096 <&3 2>/dev/null | wc -c)
	[ "$n" = 0 ] || { kv_msg "$n bytes read from the deleted disk"; r=1; }
	exec 3<&-
	grep -q "^kvblk1:" "$CTL" && { kv_msg "kvblk1 still listed"; r=1; }
	return $r
}

bad_commands() {
	kv_write_fails "$CTL" "add 0" "File exists" "" &&
		kv_write_fails "$CTL" "add 2 lbs=1000" "Invalid argument" "" &&
		kv_write_fails "$CTL" "add 2 size=0" "Invalid argument" "" &&
		kv_write_fails "$CTL" "add 2 hwq=9" "Invalid argument" "" &&
		kv_write_fails "$CTL" "add 2 mode=fast" "Invalid argument" "" &&
		kv_write_fails "$CTL" "add 2 kib=6" "Invalid argument" "" &&
		kv_write_fails "$CTL" "release 9" "No such file or directory" "" &&
		kv_write_fails "$CTL" "add 2 vb=100" "Invalid argument" "" &&
		kv_write_fails "$CTL" "add 2 vb=8191" "Invalid argument" "" &&
		kv_write_fails "$CTL" "add 2 bogus=1" "Invalid argument" "blk: unknown option 'bogus=1'" &&
		kv_write_fails "$CTL" "del 9" "No such file or directory" "" &&
		kv_write_fails "$CTL" "fail_next 0" "Invalid argument" "" &&
		kv_write_fails "$CTL" "frob 0" "Invalid argument" "" &&
		kv_write_fails "$CTL" " " "Invalid argument" "" || return 1
	[ ! -e /sys/block/kvblk2 ]
}

# sweep_point N: "add 5 kib=64" with fault-injection point N armed
# (kv_fail_nth: every allocation of the writer's task, the block layer's
# and sysfs's in it); SWEEP_ERR, SWEEP_INJ, SWEEP_LEFT from kv_fail_nth. It
# ends in a disk that works (then deleted) or ENOMEM (or EINVAL, which 7.3
# gives for one of the disk's allocations: point 88 of 488 there, none of
# the layer's checks) and no disk.
sweep_point() {
	local out
	out=$(kv_fail_nth "$1" write "$CTL" "add 5 kib=64") || { kv_msg "kv_fail_nth: $out"; return 1; }
	read -r _ SWEEP_ERR _ SWEEP_INJ _ SWEEP_LEFT <<<"$out"
	if [ "$SWEEP_ERR" = 0 ]; then
		{ kv_wait test -b /dev/kvblk5 && roundtrip /dev/kvblk5 3 5; } ||
			{ kv_msg "point $1: added, but the disk does not work"; return 1; }
		echo "del 5" >"$CTL" || return 1
	else
		[[ " 12 22 " == *" $SWEEP_ERR "* ]] || { kv_msg "point $1: errno $SWEEP_ERR"; return 1; }
		[ ! -e /sys/block/kvblk5 ] || { kv_msg "point $1: errno $SWEEP_ERR, and kvblk5 is there"; return 1; }
		! grep -q "^kvblk5:" "$CTL" || { kv_msg "point $1: errno $SWEEP_ERR, and kvblk5 is listed"; return 1; }
	fi
}

# A disk's making (64 KiB) with every third of its allocation points
# failed (every one under make stress): the error paths of the tag set,
# the disk and its operations leave nothing behind: no disk, kmemleak
# clean, and kverbs.ko's references (a disk's operations hold one) as
# before (a disk not added and not put held one: seen).
add_sweep() {
	local total stride n=1 points=0 refused=0 refs
	kv_faults_quiet || return 1
	refs=$(kv_layer_refs)
	# Injected failures make the page and vmalloc allocators warn.
	KV_ALLOC_WARNINGS_OK=1
	sweep_point 1000000 || return 1
	[ "$SWEEP_ERR" = 0 ] || { kv_msg "the counting run failed (errno $SWEEP_ERR)"; return 1; }
	total=$((1000000 - SWEEP_LEFT))
	[ "$total" -gt 0 ] || { kv_msg "the counting run passed no fault-injection point"; return 1; }
	stride=3
	[ -e /kverbs/stress ] && stride=1
	while [ "$n" -le "$total" ]; do
		sweep_point "$n" || return 1
		[ "$SWEEP_INJ" = 1 ] && points=$((points + 1))
		[ "$SWEEP_ERR" != 0 ] && refused=$((refused + 1))
		n=$((n + stride))
	done
	kv_msg "add: $total points, $points armed (stride $stride), $refused ended with an errno"
	[ "$refused" -gt 0 ] || { kv_msg "no armed point made an add fail"; return 1; }
	[ "$(kv_layer_refs)" = "$refs" ] ||
		{ kv_msg "kverbs.ko's refcount: $refs before, $(kv_layer_refs) after"; return 1; }
}

# The unload deletes the disks it has.
rmmod_deletes_disks() {
	echo "add 3 size=1 vb=4095" >"$CTL" || return 1
	[ "$(cat /sys/block/kvblk3/queue/virt_boundary_mask)" = 4095 ] ||
		{ kv_msg "virt_boundary_mask: $(cat /sys/block/kvblk3/queue/virt_boundary_mask)"; return 1; }
	roundtrip /dev/kvblk3 1 9 || return 1
	rmmod "$KV_SELFTEST" || return 1
	if [ -e /sys/block/kvblk0 ] || [ -e /sys/block/kvblk3 ]; then
		kv_msg "$(ls /sys/block)"
		return 1
	fi
	kv_load_selftest
}

kv_begin 15
kv_case setup_load_selftest_add_ram_disk setup
kv_case blk_size_block_size_and_queue_limits_as_built limits
kv_case blk_data_round_trips_o_direct_two_hw_queues data_direct
kv_case blk_data_round_trips_ended_by_complete_callback data_complete
kv_case blk_fsync_sends_flush_to_driver flush
kv_case blk_request_ended_with_error_gives_eio fail_next
kv_case blk_requests_given_back_busy_requeued_and_done busy_next
kv_case blk_request_requeued_by_driver_dispatched_again_counted requeue_next
kv_case blk_held_request_timed_out_ended_by_driver_etimedout timeout
kv_case blk_open_disk_pins_module open_pins_module
kv_case blk_disk_deleted_with_file_open_reads_fail del_with_file_open
kv_case blk_bad_commands_refused_with_errno bad_commands
kv_case blk_add_alloc_failure_sweep_errno_or_working_disk add_sweep
kv_case blk_rmmod_deletes_disks rmmod_deletes_disks
kv_end
