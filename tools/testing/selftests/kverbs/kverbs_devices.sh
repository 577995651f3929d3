#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The client's add and remove callbacks: devices present at load time and
# devices added later each get their directory; `rdma link del` removes
# exactly the device's directory; the sysfs listing follows.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

listed() {
	grep -qx "$1" "$KV_SYSFS/devices"
}

has_dir() {
	[ -r "$KV_DEBUGFS/$1/info" ]
}

devices_before_load() {
	kv_dummy_up || return 1
	kv_rxe_add rxe_lo lo || return 1
	kv_rxe_add rxe_dummy dummy0 || return 1
	kv_load || return 1
	local d
	for d in rxe_lo rxe_dummy; do
		has_dir $d || { kv_msg "no directory for $d"; return 1; }
		listed $d || { kv_msg "$d not listed"; return 1; }
		kv_logged "kverbs_example: $d: added (rxe driver, 1 port(s))" ||
			{ kv_msg "no add message for $d"; return 1; }
	done
	[ "$(wc -l <"$KV_SYSFS/devices")" = 2 ] || { kv_msg "listing:"; kv_diag <"$KV_SYSFS/devices"; return 1; }
}

link_del_removes_only_that_device() {
	kv_rxe_del rxe_dummy || return 1
	! has_dir rxe_dummy || { kv_msg "rxe_dummy directory left"; return 1; }
	! listed rxe_dummy || { kv_msg "rxe_dummy still listed"; return 1; }
	{ has_dir rxe_lo && listed rxe_lo; } || { kv_msg "rxe_lo lost"; return 1; }
	kv_logged "kverbs_example: rxe_dummy: removed"
}

device_added_after_load() {
	kv_rxe_add rxe_dummy2 dummy0 || return 1
	{ has_dir rxe_dummy2 && listed rxe_dummy2; } || { kv_msg "rxe_dummy2 not seen"; return 1; }
	[ "$(wc -l <"$KV_SYSFS/devices")" = 2 ]
}

all_devices_deleted_while_loaded() {
	kv_rxe_del_all
	[ -z "$(kv_device_dirs)" ] || { kv_msg "left:"; kv_device_dirs | kv_diag; return 1; }
	[ -z "$(cat "$KV_SYSFS/devices")" ] || return 1
	kv_unload
}

add_del_cycles_while_loaded() {
	local i
	kv_load || return 1
	for i in {1..10}; do
		kv_rxe_add rxe_cycle lo || return 1
		has_dir rxe_cycle || { kv_msg "cycle $i: not added"; return 1; }
		kv_rxe_del rxe_cycle || return 1
		! has_dir rxe_cycle || { kv_msg "cycle $i: not removed"; return 1; }
	done
	kv_unload
}

kv_begin 6
kv_case add_callback_for_devices_present_at_load devices_before_load
kv_case rdma_link_del_removes_only_that_directory link_del_removes_only_that_device
kv_case add_callback_for_device_added_after_load device_added_after_load
kv_case rdma_link_del_all_leaves_no_directory all_devices_deleted_while_loaded
kv_case rdma_link_add_del_10_cycles_while_loaded add_del_cycles_while_loaded
kv_end
