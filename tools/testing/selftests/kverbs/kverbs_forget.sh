#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# What a module leaks must not call its code once it is gone.  The
# self-test module (samples/kverbs_selftest/forget.rs) registers two event
# sinks of its own for rxe_forget's events and leaks both registrations,
# as safe code can: one with mem::forget, one in a cycle (its sink holds
# its own registration); a client, a debugfs file and a sysfs attribute
# of its own, which it forgets; two timers that run every 50 ms, one
# forgotten, one in a cycle; a RAM disk (kverbs::blk), forgotten; and an io
# disk, whose queue data holds its capsule queue (kverbs::io), forgotten.
# The sinks are told the device's events, the
# client its devices, the timers run, and the files are read, while the
# module is loaded, and the disk is read and written; when it goes,
# kverbs.ko drops both sinks and both timers' handlers, shuts the capsule
# queue down, deletes the disks,
# unregisters the client and removes the files (the
# notifier of rust/kverbs_module.c), and the events, devices, timers and
# reads after that reach none of them: without it, the next port event
# called the sink in the module's freed memory (an oops), and so would a
# new device the client, a timer its handler, a read the files or the
# disk.  Then
# the exerciser forgets objects at random (its `forget` runs), rdma_cm
# listeners with its sink among them, is unloaded, and connection requests
# come to the ports its listeners take.  What the modules forgot is
# leaked, and kmemleak says so: that report is checked and cleared before
# the program's own kmemleak case, which fails for objects allocated after
# the forgetting (kmemleak may see a forgotten object only scans later).
#
# The forgotten registration holds rxe_forget and kverbs.ko for good: this
# program keeps both at its end, and the planner runs it last in its guest
# (tools/vm/plan-guests.sh, LAST_PROGS).

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

NET=kvfg0
DEV=rxe_forget
NET2=kvfg1
DEV2=rxe_forget2
EV=$KV_DEBUGFS/$DEV/events
FG=$KV_SELFTEST_DEBUGFS/forget
LEAKED_DEBUGFS=$KV_SELFTEST_DEBUGFS/leaked
LEAKED_SYSFS=/sys/kernel/$KV_SELFTEST/leaked
EXR=/sys/kernel/debug/$KV_EXERCISER/run
BLK=$KV_SELFTEST_DEBUGFS/blk
IO=$KV_SELFTEST_DEBUGFS/io
IP=10.88.0.1

# qps: the QPs of $DEV (the RDMA core's resource tracking).
qps() {
	rdma resource show qp link $DEV/1 2>/dev/null | grep -c lqpn
}

setup() {
	ip link add $NET type dummy || return 1
	ip link set $NET up || return 1
	ip addr add $IP/24 dev $NET || return 1
	kv_rxe_add $DEV $NET || return 1
	kv_load && kv_load_selftest && kv_wait test -e "$EV"
}

# down_up: the netdev goes down and up; the example's own sink (a module
# still loaded) is told both events.
down_up() {
	kv_port_down_up $NET "$EV"
}

leaked_sinks_told_while_module_loaded() {
	printf '%s' $DEV >"$FG" || return 1
	grep -qx "forgotten: 1" "$FG" || { kv_diag <"$FG"; return 1; }
	# From here on the end keeps them (kv_cleanup): the forgotten
	# registration holds them.
	KV_KEEP_DEVICES=$DEV
	KV_KEEP_LAYER=1
	down_up || return 1
	kv_wait kv_logged "kverbs_selftest: forgotten sink: port active" || return 1
	kv_wait kv_logged "kverbs_selftest: cycle sink: port active" || return 1
	kv_wait kv_logged "kverbs_selftest: forgotten timer: running" || { kv_msg "the forgotten timer did not run"; return 1; }
	kv_wait kv_logged "kverbs_selftest: cycle timer: running" || { kv_msg "the cycle's timer did not run"; return 1; }
	{ echo "add 7 size=1" >"$BLK" && echo "forget 7" >"$BLK"; } ||
		{ kv_msg "adding and forgetting kvblk7 failed"; return 1; }
	{
		dd if=/dev/urandom of=/tmp/kvblk7 bs=4096 count=4 2>/dev/null &&
			dd if=/tmp/kvblk7 of=/dev/kvblk7 bs=4096 oflag=direct 2>/dev/null &&
			dd if=/dev/kvblk7 bs=4096 count=4 iflag=direct 2>/dev/null | cmp -s - /tmp/kvblk7
	} || { kv_msg "the forgotten disk did not read back what was written"; return 1; }
	QPS=$(qps)
	{ echo "add 8 $DEV" >"$IO" && kv_wait test -b /dev/kvio8 &&
		dd if=/tmp/kvblk7 of=/dev/kvio8 bs=4096 oflag=direct 2>/dev/null &&
		echo "forget 8" >"$IO"; } || { kv_msg "adding, writing and forgetting kvio8 failed"; return 1; }
	[ -b /dev/kvio8 ] || { kv_msg "the forgotten disk kvio8 went"; return 1; }
	# Its peer's QP is gone, its own is still there.
	[ "$(qps)" = $((QPS + 1)) ] || { kv_msg "QPs: $QPS before kvio8, $(qps) after its forget"; return 1; }
	kv_logged "kverbs_selftest: leaked client: add $DEV$" || { kv_msg "the leaked client was not added $DEV"; return 1; }
	[ "$(cat "$LEAKED_DEBUGFS")" = leaked ] || { kv_msg "$LEAKED_DEBUGFS does not show 'leaked'"; return 1; }
	[ "$(cat "$LEAKED_SYSFS")" = leaked ] || { kv_msg "$LEAKED_SYSFS does not show 'leaked'"; return 1; }
}

leaked_sinks_dropped_when_their_module_goes() {
	rmmod "$KV_SELFTEST" || return 1
	kv_logged "kverbs_selftest: forgotten sink dropped" || { kv_msg "the forgotten sink was not dropped"; return 1; }
	kv_logged "kverbs_selftest: cycle sink dropped" || { kv_msg "the cycle's sink was not dropped"; return 1; }
	kv_logged "kverbs_selftest: forgotten timer dropped" || { kv_msg "the forgotten timer was not dropped"; return 1; }
	kv_logged "kverbs_selftest: cycle timer dropped" || { kv_msg "the cycle's timer was not dropped"; return 1; }
	[ ! -e /sys/block/kvblk7 ] || { kv_msg "the forgotten disk kvblk7 is still there"; return 1; }
	if dd if=/dev/kvblk7 of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null; then
		kv_msg "a read of the forgotten disk after its module went passed"
		return 1
	fi
	[ ! -e /sys/block/kvio8 ] || { kv_msg "the forgotten disk kvio8 is still there"; return 1; }
	# The capsule queue was shut down: its QP destroyed.
	[ "$(qps)" = "$QPS" ] || { kv_msg "QPs: $QPS before kvio8, $(qps) after the unload"; return 1; }
	kv_logged "kverbs_selftest: leaked client: remove $DEV$" || { kv_msg "the leaked client was not removed"; return 1; }
	[ ! -e "$LEAKED_DEBUGFS" ] || { kv_msg "$LEAKED_DEBUGFS is still there"; return 1; }
	[ ! -e "$LEAKED_SYSFS" ] || { kv_msg "$LEAKED_SYSFS is still there"; return 1; }
}

# The exerciser's runs with `forget` over rxe_forget (its only device now;
# its rdma_cm IDs listen on ports 7990-7992 of 10.88.0.1, with a queue
# whose sink is the worker's, and some are forgotten), then its unload;
# then a connection request to each port: one that reaches a forgotten
# listener is queued for a sink the unload dropped. No report may come
# (kv_case), and the runs must have forgotten something.
exerciser_forgets_then_unloads() {
	local seed n=0 f port
	kv_mod_loaded "$KV_EXERCISER" || insmod "$KV_MODDIR/$KV_EXERCISER.ko" || return 1
	for seed in 11 12 13; do
		printf '%s' "$seed 6000 1 forget" >"$EXR" || { kv_msg "the run of seed $seed failed"; return 1; }
		head -n 2 "$EXR" | kv_diag
		f=$(tr ' ' '\n' <"$EXR" | awk 'p { print; exit } $0 == "forgotten" { p = 1 }')
		n=$((n + ${f:-0}))
	done
	rmmod "$KV_EXERCISER" || return 1
	for port in 7990 7991 7992; do
		timeout 5 rping -c -a $IP -p $port -C 1 >/dev/null 2>&1
	done
	kv_msg "the runs forgot $n objects"
	# What was allocated until now may be what the modules forgot, which
	# kmemleak may report only after kmemleak_reports_forgotten has
	# cleared its report: the program's own kmemleak case lists such
	# objects and fails only for those allocated later (kv_kmemleak_check).
	KV_KMEMLEAK_AFTER=$(kv_jiffies)
	[ -n "$KV_KMEMLEAK_AFTER" ] || { kv_msg "no jiffies in /proc/timer_list"; return 1; }
	[ "$n" -gt 0 ]
}

# The client, the files and their directories the self-test forgot, and
# what the exerciser forgot, are leaked (what a forgotten object is):
# kmemleak reports them (kv_kmemleak_scan); then the report is cleared,
# so that the program's own kmemleak case checks for any other leak.
kmemleak_reports_forgotten() {
	local n
	kv_kmemleak_scan || return 1
	kv_kmemleak_clear
	n=$(grep -c "^unreferenced object" <<<"$KV_KMEMLEAK_REPORT")
	kv_msg "kmemleak: $n objects"
	head -n 40 <<<"$KV_KMEMLEAK_REPORT" | kv_diag
	[ "$n" -ge 3 ]
}

# The example's sink is told the events, and its client a new device; the
# orphaned sinks and client are not. The example's unload waits for every
# delivery (its client registration flushes kverbs.ko's workqueue), theirs
# included; kverbs.ko stays, held.
leaked_sinks_not_called_after_module_went() {
	local r=0
	down_up || return 1
	ip link add $NET2 type dummy || return 1
	kv_rxe_add $DEV2 $NET2 || return 1
	kv_wait test -e "$KV_DEBUGFS/$DEV2/events" || { kv_msg "the example was not given $DEV2"; r=1; }
	kv_rxe_del $DEV2 || r=1
	rmmod "$KV_MOD" || return 1
	if kv_logged "kverbs_selftest: "; then
		kv_msg "code of the unloaded module was called:"
		kv_log_since "$KV_CASE" | grep "kverbs_selftest: " | kv_diag
		r=1
	fi
	if rmmod "$KV_LAYER" 2>/dev/null; then
		kv_msg "kverbs.ko unloaded under a forgotten registration"
		r=1
	fi
	kv_layer_loaded || r=1
	return $r
}

kv_begin 7
kv_case setup_rxe_forget_and_load setup
kv_case leaked_sinks_client_files_work_while_module_loaded leaked_sinks_told_while_module_loaded
kv_case leaked_sinks_dropped_client_files_removed_on_unload leaked_sinks_dropped_when_their_module_goes
kv_case leaked_callbacks_not_called_after_module_went leaked_sinks_not_called_after_module_went
kv_case exerciser_forgets_objects_unloads_connects_come exerciser_forgets_then_unloads
kv_case kmemleak_reports_what_the_modules_forgot kmemleak_reports_forgotten
kv_end
