#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The minimal module (samples/kverbs_minimal.rs), a second user of the
# layer: it loads only on kverbs.ko, does one RDMA WRITE on each device,
# present at load or added later, and reads the message back; it shares
# kverbs.ko with the example module, holds nothing of a device after its
# add, and leaves kverbs.ko loaded, and removable, when it goes.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

# wrote DEV: the module logged, during this case, its write on DEV read back.
wrote() {
	kv_logged "$KV_MINIMAL: $1: RDMA WRITE of 25 bytes: \"hello from kverbs_minimal\" read back"
}

# The modules that hold kverbs.ko, sorted, each followed by a blank.
kverbs_holders() {
	local h
	for h in /sys/module/kverbs/holders/*; do
		[ -e "$h" ] && printf '%s ' "${h##*/}"
	done
}

# The module's lines of this case, as diagnostics.
minimal_log() {
	kv_log_since "$KV_CASE" | grep -E "$KV_MINIMAL|kverbs:" | kv_diag
}

refused_without_kverbs() {
	! kv_layer_loaded || { kv_msg "kverbs.ko is loaded"; return 1; }
	if insmod "$KV_MODDIR/$KV_MINIMAL.ko" 2>/dev/null; then
		kv_msg "loaded without kverbs.ko"
		return 1
	fi
	! kv_minimal_loaded || return 1
	kv_logged "$KV_MINIMAL: Unknown symbol" || { kv_msg "no 'Unknown symbol' line"; return 1; }
}

loads_and_writes_on_rxe_lo() {
	kv_rxe_add rxe_lo lo || return 1
	kv_load_layer || return 1
	insmod "$KV_MODDIR/$KV_MINIMAL.ko" || { kv_msg "insmod failed"; return 1; }
	wrote rxe_lo || { kv_msg "no write read back on rxe_lo:"; minimal_log; return 1; }
	[ "$(kv_log_since "$KV_CASE" | grep -c "$KV_MINIMAL: rxe_lo: RDMA WRITE")" = 1 ] ||
		{ kv_msg "not exactly one write on rxe_lo:"; minimal_log; return 1; }
	! kv_logged "$KV_MINIMAL: .*failed" || { minimal_log; return 1; }
}

# /sys/module/kverbs/holders and lsmod's "Used by" (busybox: name, size,
# count, users) name both modules.
used_by_minimal_and_example() {
	local holders
	kv_load || { kv_msg "insmod of the example failed"; return 1; }
	holders=$(kverbs_holders)
	[ "$holders" = "kverbs_example kverbs_minimal " ] || { kv_msg "holders: '$holders'"; return 1; }
	kv_used_by kverbs_example kverbs_minimal
}

device_added_after_load() {
	kv_dummy_up || return 1
	kv_rxe_add rxe_dummy dummy0 || return 1
	wrote rxe_dummy || { kv_msg "no write read back on rxe_dummy:"; minimal_log; return 1; }
	kv_logged "kverbs_example: rxe_dummy: added" || { kv_msg "the example was not told"; return 1; }
	! wrote rxe_lo || { kv_msg "rxe_lo written again"; return 1; }
}

# Nothing of the device is held after its add: its removal is not held up.
link_del_while_loaded() {
	kv_rxe_del rxe_dummy || return 1
	[ ! -e /sys/class/infiniband/rxe_dummy ] || { kv_msg "rxe_dummy is still there"; return 1; }
	kv_minimal_loaded
}

rmmod_leaves_kverbs() {
	rmmod "$KV_MINIMAL" || { kv_msg "rmmod failed"; return 1; }
	! kv_minimal_loaded || return 1
	kv_layer_loaded || { kv_msg "kverbs.ko went with it"; return 1; }
	[ "$(kverbs_holders)" = "kverbs_example " ] || { kv_msg "holders: '$(kverbs_holders)'"; return 1; }
	if rmmod "$KV_LAYER" 2>/dev/null; then
		kv_msg "kverbs.ko removed while the example uses it"
		return 1
	fi
	kv_unload || { kv_msg "the example and kverbs.ko did not go"; return 1; }
	! kv_layer_loaded || return 1
	! kv_logged "$KV_MINIMAL: .*failed" || { minimal_log; return 1; }
}

kv_begin 7
kv_case minimal_refused_without_kverbs refused_without_kverbs
kv_case minimal_loads_on_kverbs_and_writes_on_rxe_lo loads_and_writes_on_rxe_lo
kv_case minimal_lsmod_shows_kverbs_used_by_minimal_and_example used_by_minimal_and_example
kv_case minimal_device_added_after_load_gets_its_write device_added_after_load
kv_case minimal_rdma_link_del_not_held_up link_del_while_loaded
kv_case minimal_rmmod_leaves_kverbs_loaded_and_clean rmmod_leaves_kverbs
kv_end
