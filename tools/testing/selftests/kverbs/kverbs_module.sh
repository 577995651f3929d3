#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Loading and unloading the kverbs example module, with and without RDMA
# devices: the client registers and unregisters cleanly every time, its
# debugfs and sysfs files come and go with it.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

# One load/unload cycle; $1 lists the devices expected in the listing.
load_unload_once() {
	local want=$1 got d
	kv_load || { kv_msg "insmod failed"; return 1; }
	[ -d "$KV_DEBUGFS" ] || { kv_msg "no $KV_DEBUGFS"; return 1; }
	got=$(sort "$KV_SYSFS/devices" | tr '\n' ' ')
	[ "$got" = "$want" ] || { kv_msg "devices: '$got', want '$want'"; return 1; }
	for d in $want; do
		[ -r "$KV_DEBUGFS/$d/info" ] || { kv_msg "no info for $d"; return 1; }
	done
	kv_unload || { kv_msg "rmmod failed"; return 1; }
	[ ! -e "$KV_DEBUGFS" ] || { kv_msg "$KV_DEBUGFS left behind"; return 1; }
	[ ! -e "$KV_SYSFS" ] || { kv_msg "$KV_SYSFS left behind"; return 1; }
	! kv_loaded || { kv_msg "still loaded"; return 1; }
}

load_unload_repeated() {
	local i
	for i in $(seq 20); do
		load_unload_once "$1" || { kv_msg "iteration $i"; return 1; }
	done
}

load_with_no_device() {
	kv_load || return 1
	[ -d "$KV_DEBUGFS" ] && [ -z "$(kv_device_dirs)" ] && [ -f "$KV_DEBUGFS/selftest" ] &&
		[ -z "$(cat "$KV_SYSFS/devices")" ] &&
		kv_logged "kverbs_example: registered as an RDMA client"
	local r=$?
	kv_unload || return 1
	return $r
}

two_devices() {
	kv_dummy_up && kv_rxe_add rxe_lo lo && kv_rxe_add rxe_dummy dummy0
}

kv_begin 5
kv_case load_with_no_rdma_device load_with_no_device
kv_case load_unload_20_times_no_device load_unload_repeated ""
kv_case create_rxe_on_lo_and_dummy0 two_devices
kv_case load_unload_20_times_two_devices load_unload_repeated "rxe_dummy rxe_lo "
kv_end
