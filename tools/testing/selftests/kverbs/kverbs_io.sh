#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The layer's capsule queue (rust/kverbs/io), on the self-test's io disks
# (samples/kverbs_selftest/io.rs): each read, write and flush of a RAM disk
# also travels as a capsule, submitted from queue_rq without sleeping, to a
# peer QP of the same rxe device, and ends in the queue's receive callback
# when the peer's response comes. Data round trips with O_DIRECT and in
# parallel, every capsule answered and every request finished by the queue;
# an error status ends a request with EIO; a response with a wrong command
# id is reported and ends nothing, and the request it did not answer ends
# with EIO when the queue shuts down, as do the requests a silent peer
# leaves; a shutdown with the queue in place, and one the handler's drop
# makes again; a handler that drops its own queue in the callback; the device
# removed under a disk takes it away; bad commands are refused. With the
# data in the peer (mode=rdma): each request's pages registered by the
# queue (FRWR), moved by the peer's RDMA READ and WRITE, from 512 B to
# 1 MiB; the registration ended by the peer's SEND with invalidate (no
# LOCAL_INV) or by the queue's LOCAL_INV after a plain SEND; answers that
# invalidate another request's rkey refused. A disk and
# queue leaked are shut down and deleted when the module goes: in
# kverbs_forget.sh.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

CTL=$KV_SELFTEST_DEBUGFS/io
PAT=/tmp/kvio.pat

setup() {
	kv_rxe_add rxe_lo lo || return 1
	kv_load_selftest || return 1
	[ -w "$CTL" ] || { kv_msg "no $CTL"; return 1; }
	echo "add 0 rxe_lo" >"$CTL" || return 1
	kv_wait test -b /dev/kvio0 || { kv_msg "no /dev/kvio0"; return 1; }
	dd if=/dev/urandom of=$PAT bs=1024 count=1024 2>/dev/null
}

# counter DISK NAME: the disk's counter NAME in the control file.
counter() {
	kv_counter "$CTL" "kvio$1: " "$2"
}

# roundtrip DEV SECTOR COUNT: COUNT sectors of the pattern written at
# SECTOR with O_DIRECT read back the same.
roundtrip() {
	kv_roundtrip $PAT "$@"
}

# Every request the queue carried was answered and finished by it: as
# many submitted as finished, as many answers as capsules, none unknown.
all_answered() {
	local sub fin ans
	sub=$(counter "$1" submitted) fin=$(counter "$1" finished) ans=$(counter "$1" answered)
	kv_msg "$(grep "^kvio$1: " "$CTL")"
	[ "$sub" -gt 0 ] && [ "$sub" = "$fin" ] && [ "$ans" = "$sub" ] || return 1
	[ "$(counter "$1" unknown)" = 0 ] && [ "$(counter "$1" errors)" = 0 ]
}

# Sizes from a sector to 1 MiB (two requests of 512 KiB), at aligned and
# odd sectors.
data() {
	local s c n=0
	for s in 0 1 8 2047 32760; do
		for c in 1 8 255 2048; do
			[ $((s + c)) -le 32768 ] || continue
			roundtrip /dev/kvio0 "$s" "$c" || return 1
			n=$((n + 1))
		done
	done
	kv_msg "$n round trips"
	all_answered 0
}

# Four writers and readers at once: the queue's slots are taken and given
# back on every tag, from both CPUs.
parallel() {
	kv_parallel 4 parallel_one || return 1
	all_answered 0
}

# parallel_one I: writer and reader I's three round trips.
parallel_one() {
	local s
	for s in 0 512 1024; do
		roundtrip /dev/kvio0 $(($1 * 4096 + s)) 256 || return 1
	done
}

# A write with fsync: the flush travels as a capsule too.
flush() {
	local f s
	f=$(counter 0 flushes) s=$(counter 0 submitted)
	dd if=$PAT of=/dev/kvio0 bs=4096 count=4 conv=fsync 2>/dev/null || return 1
	[ "$(counter 0 flushes)" -gt "$f" ] || { kv_msg "flushes: $f, then $(counter 0 flushes)"; return 1; }
	[ "$(counter 0 submitted)" -gt $((s + 1)) ] || return 1
	all_answered 0
}

# An error status in the response ends the request with EIO.
fail_status() {
	local err
	echo "fail 0 1" >"$CTL" || return 1
	err=$(dd if=/dev/kvio0 of=/dev/null bs=4096 count=1 iflag=direct 2>&1) &&
		{ kv_msg "the read passed; $(grep "^kvio0: " "$CTL")"; return 1; }
	kv_msg "$err; $(grep "^kvio0: " "$CTL")"
	[[ $err == *"Input/output error"* ]] || return 1
	[ "$(counter 0 fails)" = 1 ] && [ "$(counter 0 failed)" = 1 ] || return 1
	dd if=/dev/kvio0 of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null
}

# A response with the wrong command id: the queue reports it to the
# handler, ends nothing (the read waits), and the shutdown ends the read's
# request with EIO.
unknown_cid() {
	local pid r=0 t0
	echo "add 1 rxe_lo" >"$CTL" && kv_wait test -b /dev/kvio1 || return 1
	echo "bad_cid 1 1" >"$CTL" || return 1
	dd if=/dev/kvio1 of=/dev/null bs=4096 count=1 skip=9 iflag=direct 2>/tmp/kvio.err &
	pid=$!
	kv_wait test "$(counter 1 unknown)" = 1 || { kv_msg "unknown: $(counter 1 unknown)"; r=1; }
	sleep 1
	kill -0 "$pid" 2>/dev/null || { kv_msg "the unanswered read ended"; r=1; }
	kv_msg "$(grep "^kvio1: " "$CTL")"
	[ "$(counter 1 bad_cids)" = 1 ] || r=1
	read -r t0 _ </proc/uptime
	echo "del 1" >"$CTL" || r=1
	wait "$pid" && { kv_msg "the read passed"; r=1; }
	kv_msg "after the del ($(kv_secs_since "$t0") s): $(cat /tmp/kvio.err)"
	grep -q "Input/output error" /tmp/kvio.err || r=1
	return $r
}

# A peer that answers nothing: the reads wait; the del shuts the queue
# down, which ends them with EIO, and returns.
silent_peer() {
	local pids=() p r=0 t0
	echo "add 2 rxe_lo depth=4" >"$CTL" && kv_wait test -b /dev/kvio2 || return 1
	echo "stop 2" >"$CTL" || return 1
	for p in 0 1 2; do
		dd if=/dev/kvio2 of=/dev/null bs=4096 count=1 skip=$((p * 7)) iflag=direct 2>/dev/null &
		pids+=($!)
	done
	kv_wait test "$(counter 2 unanswered)" -ge 3 || { kv_msg "unanswered: $(counter 2 unanswered)"; r=1; }
	kv_msg "$(grep "^kvio2: " "$CTL")"
	read -r t0 _ </proc/uptime
	echo "del 2" >"$CTL" || r=1
	for p in "${pids[@]}"; do
		wait "$p" && { kv_msg "a read passed"; r=1; }
	done
	kv_msg "the del and the reads' EIO after $(kv_secs_since "$t0") s"
	[ ! -e /sys/block/kvio2 ] || r=1
	return $r
}

# The handler drops its own queue in the response callback: the queue
# shuts down on kverbs.ko's workqueue (that request ends as answered, or
# with EIO if its send's completion comes after), later requests end with
# EIO (the driver's, for a queue gone).
handler_drops_queue() {
	echo "add 3 rxe_lo" >"$CTL" && kv_wait test -b /dev/kvio3 || return 1
	echo "drop_in_handler 3" >"$CTL" || return 1
	# Its send's completion may come after the queue closed: it ends with
	# EIO then.
	dd if=/dev/kvio3 of=/dev/null bs=4096 count=1 skip=3 iflag=direct 2>/dev/null ||
		kv_msg "the read answered while its queue was dropped ended with an error"
	kv_wait grep -q "^kvio3: queue gone" "$CTL" || { kv_msg "$(grep "^kvio3: " "$CTL")"; return 1; }
	dd if=/dev/kvio3 of=/dev/null bs=4096 count=1 skip=5 iflag=direct 2>/dev/null &&
		{ kv_msg "a read passed without a queue"; return 1; }
	kv_msg "$(grep "^kvio3: " "$CTL")"
	[ "$(counter 3 no_queue)" -ge 1 ] || return 1
	echo "del 3" >"$CTL"
}

# A shutdown with the queue left in place: the requests a silent peer left
# end with EIO, later ones too (the queue refuses them: ENOLINK).
shutdown_in_place() {
	local pid r=0
	echo "add 7 rxe_lo" >"$CTL" && kv_wait test -b /dev/kvio7 || return 1
	echo "stop 7" >"$CTL" || return 1
	dd if=/dev/kvio7 of=/dev/null bs=4096 count=1 skip=2 iflag=direct 2>/dev/null &
	pid=$!
	kv_wait test "$(counter 7 unanswered)" = 1 || r=1
	echo "shutdown 7" >"$CTL" || r=1
	wait "$pid" && { kv_msg "the read carried passed"; r=1; }
	dd if=/dev/kvio7 of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null &&
		{ kv_msg "a read after the shutdown passed"; r=1; }
	kv_msg "$(grep "^kvio7: " "$CTL")"
	grep -q "^kvio7: queue down .* shutdown_ended 1 " "$CTL" || r=1
	[ "$(counter 7 no_queue)" = 1 ] || r=1
	echo "del 7" >"$CTL" || r=1
	return $r
}

# Shut down with Carried::Retry: the read it carries is not ended but
# requeued, and comes back to queue_rq, which ends it for a queue shut
# down (the driver's no_queue); a later read too.
shutdown_retry_requeues() {
	local pid r=0
	echo "add 13 rxe_lo" >"$CTL" && kv_wait test -b /dev/kvio13 || return 1
	echo "stop 13" >"$CTL" || return 1
	dd if=/dev/kvio13 of=/dev/null bs=4096 count=1 skip=2 iflag=direct 2>/dev/null &
	pid=$!
	kv_wait test "$(counter 13 unanswered)" = 1 || r=1
	[ "$(counter 13 no_queue)" = 0 ] || r=1
	echo "shutdown 13 retry" >"$CTL" || r=1
	wait "$pid" && { kv_msg "the read carried passed"; r=1; }
	kv_msg "$(grep "^kvio13: " "$CTL")"
	grep -q "^kvio13: queue down .* shutdown_ended 0 shutdown_requeued 1 " "$CTL" || r=1
	[ "$(counter 13 no_queue)" = 1 ] || { kv_msg "the requeued read did not reach queue_rq"; r=1; }
	dd if=/dev/kvio13 of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null &&
		{ kv_msg "a read after the shutdown passed"; r=1; }
	[ "$(counter 13 no_queue)" = 2 ] || r=1
	echo "del 13" >"$CTL" || r=1
	return $r
}

# The shutdown drops the handler, whose drop takes the queue and shuts it
# down again, on the same task: that call returns (it waited for itself
# before: a deadlock), and the first ends.
shutdown_nested_in_handler_drop() {
	echo "add 8 rxe_lo" >"$CTL" && kv_wait test -b /dev/kvio8 || return 1
	roundtrip /dev/kvio8 16 8 || return 1
	echo "shutdown 8 nested" >"$CTL" || return 1
	kv_msg "$(grep "^kvio8: " "$CTL")"
	grep -q "^kvio8: queue gone " "$CTL" || return 1
	[ "$(counter 8 drop_shutdowns)" = 1 ] || return 1
	dd if=/dev/kvio8 of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null &&
		{ kv_msg "a read after the shutdown passed"; return 1; }
	echo "del 8" >"$CTL"
}

# rdma_data DISK: round trips of 512 B to 1 MiB at aligned and odd
# sectors through /dev/kvioDISK, whose data the peer moves by RDMA.
rdma_data() {
	local s c n=0
	for s in 0 1 8 2047 32760; do
		for c in 1 8 255 2048; do
			[ $((s + c)) -le 32768 ] || continue
			roundtrip "/dev/kvio$1" "$s" "$c" || return 1
			n=$((n + 1))
		done
	done
	kv_msg "$n round trips; $(grep "^kvio$1: " "$CTL")"
	all_answered "$1" || return 1
	[ "$(counter "$1" registered)" -gt "$n" ] || { kv_msg "registered: $(counter "$1" registered)"; return 1; }
}

# rdma_inv DISK INV: a disk whose peer answers with SEND with invalidate
# (INV remote: every registration ends in the response's completion, no
# LOCAL_INV is posted) or a plain SEND (local: the queue posts a LOCAL_INV
# for every registration from the callback, and ends the request on its
# completion); the same data round trips.
rdma_inv() {
	local other=remote
	[ "$2" = remote ] && other=local
	echo "add $1 rxe_lo mode=rdma inv=$2" >"$CTL" && kv_wait test -b "/dev/kvio$1" || return 1
	rdma_data "$1" || return 1
	[ "$(counter "$1" "$2_inv")" = "$(counter "$1" registered)" ] || return 1
	[ "$(counter "$1" "${other}_inv")" = 0 ] || return 1
	echo "del $1" >"$CTL"
}

# Two reads answered each with a SEND that invalidates the other's rkey:
# the queue refuses both answers (an rkey not of the request answered),
# the reads wait, and the del ends them with EIO. A queue that trusted the
# answer would have ended each read with the other's registration live.
rdma_swapped_inv() {
	local pids=() p r=0
	echo "add 12 rxe_lo mode=rdma inv=swap" >"$CTL" && kv_wait test -b /dev/kvio12 || return 1
	for p in 3 5; do
		dd if=/dev/kvio12 of=/dev/null bs=4096 count=1 skip=$p iflag=direct 2>/dev/null &
		pids+=($!)
	done
	kv_wait test "$(counter 12 unknown)" = 2 || r=1
	sleep 0.5
	kv_msg "$(grep "^kvio12: " "$CTL")"
	for p in "${pids[@]}"; do
		kill -0 "$p" 2>/dev/null || { kv_msg "a read answered with the other's rkey ended"; r=1; }
	done
	[ "$(counter 12 finished)" = 0 ] || r=1
	echo "del 12" >"$CTL" || r=1
	for p in "${pids[@]}"; do
		wait "$p" && { kv_msg "a read passed"; r=1; }
	done
	return $r
}

bad_commands() {
	kv_write_fails "$CTL" "add 0 rxe_lo" "File exists" "" &&
		kv_write_fails "$CTL" "add 4 nodev" "No such device" "" &&
		kv_write_fails "$CTL" "add 4" "Invalid argument" "" &&
		kv_write_fails "$CTL" "add 4 rxe_lo depth=0" "Invalid argument" "" &&
		kv_write_fails "$CTL" "add 4 rxe_lo depth=129" "Invalid argument" "" &&
		kv_write_fails "$CTL" "add 4 rxe_lo bogus=1" "Invalid argument" "io: unknown option 'bogus=1'" &&
		kv_write_fails "$CTL" "add 4 rxe_lo mode=disk" "Invalid argument" "io: unknown option 'mode=disk'" &&
		kv_write_fails "$CTL" "stop 9" "No such file or directory" "" &&
		kv_write_fails "$CTL" "bad_cid 0" "Invalid argument" "" &&
		kv_write_fails "$CTL" "shutdown 0 twice" "Invalid argument" "" &&
		kv_write_fails "$CTL" "shutdown 9" "No such file or directory" "" &&
		kv_write_fails "$CTL" "del 9" "No such file or directory" "" &&
		kv_write_fails "$CTL" "frob 0" "Invalid argument" "" || return 1
	[ ! -e /sys/block/kvio4 ]
}

# The device removed while a reader runs: its disk goes (the reader gets
# an error or ends), the device's unregistration does not wait for ever.
device_removal() {
	local pid r=0
	echo "add 5 rxe_lo" >"$CTL" && kv_wait test -b /dev/kvio5 || return 1
	# Reads until one fails.
	(while dd if=/dev/kvio5 of=/dev/null bs=64k count=16 iflag=direct 2>/dev/null; do :; done) &
	pid=$!
	sleep 0.5
	kill -0 "$pid" 2>/dev/null || { kv_msg "the reader ended before the removal"; r=1; }
	kv_rxe_del rxe_lo || r=1
	wait "$pid"
	kv_msg "the reader ended; disks: $(cd /sys/block && echo kvio*)"
	[ ! -e /sys/block/kvio5 ] && [ ! -e /sys/block/kvio0 ] || r=1
	grep -q "^kvio" "$CTL" && { kv_msg "disks still listed"; r=1; }
	kv_rxe_add rxe_lo lo || r=1
	return $r
}

kv_begin 17
kv_case setup_rxe_lo_load_selftest_add_io_disk setup
kv_case io_data_round_trips_every_capsule_answered data
kv_case io_parallel_readers_writers_all_answered parallel
kv_case io_fsync_flush_travels_as_capsule flush
kv_case io_error_status_in_response_gives_eio fail_status
kv_case io_wrong_cid_reported_request_ended_eio_by_shutdown unknown_cid
kv_case io_silent_peer_requests_ended_eio_by_shutdown silent_peer
kv_case io_handler_drops_own_queue_in_callback handler_drops_queue
kv_case io_shutdown_in_place_ends_carried_and_later_requests_eio shutdown_in_place
kv_case io_shutdown_nested_in_handler_drop_returns shutdown_nested_in_handler_drop
kv_case io_shutdown_retry_requeues_carried_back_to_queue_rq shutdown_retry_requeues
kv_case io_rdma_data_remote_invalidation_no_local_inv rdma_inv 10 remote
kv_case io_rdma_data_plain_send_local_inv_each rdma_inv 11 local
kv_case io_rdma_swapped_invalidations_refused_ended_eio_by_del rdma_swapped_inv
kv_case io_bad_commands_refused_with_errno bad_commands
kv_case io_device_removal_deletes_disks device_removal
kv_end
