#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The ULP template (tools/ulp_template/kverbs_ulp.rs): a module built
# outside the tree against kverbs.ko, the way Documentation/kverbs.rst
# ("Writing your own ULP") says, by its own Makefile (make check builds it:
# make ulp). It loads only on kverbs.ko, does one SEND/RECV on each device
# added, keeps its QPs until the device or the module goes, and leaves
# kverbs.ko removable when it goes.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

ULP=kverbs_ulp

# sent DEV: the module logged, during this case, its message received on DEV.
sent() {
	kv_logged "$ULP: $1: SEND/RECV of 21 bytes: \"hello from kverbs_ulp\" received"
}

# released DEV: the module logged, during this case, DEV's QPs released.
released() {
	kv_logged "$ULP: $1: QPs released"
}

ulp_loaded() {
	kv_mod_loaded "$ULP"
}

# The modules that hold kverbs.ko, sorted, each followed by a blank.
kverbs_holders() {
	local h
	for h in /sys/module/kverbs/holders/*; do
		[ -e "$h" ] && printf '%s ' "${h##*/}"
	done
}

# The module's lines of this case, as diagnostics.
ulp_log() {
	kv_log_since "$KV_CASE" | grep -E "$ULP|kverbs:" | kv_diag
}

# No failure logged by the module during this case.
no_failure() {
	! kv_logged "$ULP: .*failed" || { ulp_log; return 1; }
}

# Unloads the module (a failed case may leave it), then what kv_cleanup
# unloads.
ulp_cleanup() {
	! ulp_loaded || rmmod "$ULP"
	kv_cleanup
}

refused_without_kverbs() {
	! kv_layer_loaded || { kv_msg "kverbs.ko is loaded"; return 1; }
	[ -f "$KV_MODDIR/$ULP.ko" ] || { kv_msg "no $KV_MODDIR/$ULP.ko: make check builds it (make ulp)"; return 1; }
	if insmod "$KV_MODDIR/$ULP.ko" 2>/dev/null; then
		kv_msg "loaded without kverbs.ko"
		return 1
	fi
	! ulp_loaded || return 1
	kv_logged "$ULP: Unknown symbol" || { kv_msg "no 'Unknown symbol' line"; return 1; }
}

# Loaded with no device yet: nothing to do, nothing logged.
loads_on_kverbs() {
	kv_load_layer || return 1
	insmod "$KV_MODDIR/$ULP.ko" || { kv_msg "insmod failed"; return 1; }
	ulp_loaded || return 1
	! kv_logged "$ULP: " || { kv_msg "logged with no device:"; ulp_log; return 1; }
}

# /sys/module/kverbs/holders and lsmod's "Used by" (busybox: name, size,
# count, users) name the module.
lsmod_used_by_ulp() {
	local holders
	holders=$(kverbs_holders)
	[ "$holders" = "$ULP " ] || { kv_msg "holders: '$holders'"; return 1; }
	kv_used_by "$ULP"
}

send_recv_on_rxe_lo() {
	kv_rxe_add rxe_lo lo || return 1
	kv_wait sent rxe_lo || { kv_msg "no SEND/RECV logged on rxe_lo:"; ulp_log; return 1; }
	[ "$(kv_log_since "$KV_CASE" | grep -c "$ULP: rxe_lo: SEND/RECV")" = 1 ] ||
		{ kv_msg "not exactly one SEND/RECV on rxe_lo:"; ulp_log; return 1; }
	no_failure
}

# The QPs kept for the device go with it: its removal is not held up.
link_del_releases() {
	kv_rxe_del rxe_lo || return 1
	[ ! -e /sys/class/infiniband/rxe_lo ] || { kv_msg "rxe_lo is still there"; return 1; }
	released rxe_lo || { kv_msg "no release logged:"; ulp_log; return 1; }
	ulp_loaded
}

# A device again, then rmmod: the module releases its QPs, then kverbs.ko,
# held by nothing, goes.
rmmod_then_layer_unloads() {
	kv_rxe_add rxe_lo lo || return 1
	kv_wait sent rxe_lo || { kv_msg "no SEND/RECV logged on rxe_lo:"; ulp_log; return 1; }
	rmmod "$ULP" || { kv_msg "rmmod failed"; return 1; }
	! ulp_loaded || return 1
	released rxe_lo || { kv_msg "no release logged:"; ulp_log; return 1; }
	[ -z "$(kverbs_holders)" ] || { kv_msg "holders: '$(kverbs_holders)'"; return 1; }
	kv_unload_layer || { kv_msg "kverbs.ko did not go"; return 1; }
	! kv_layer_loaded || return 1
	no_failure
}

kv_begin 7
kv_case ulp_refused_without_kverbs refused_without_kverbs
kv_case ulp_out_of_tree_module_loads_on_kverbs loads_on_kverbs
kv_case ulp_lsmod_kverbs_used_by_kverbs_ulp lsmod_used_by_ulp
kv_case ulp_send_recv_logged_on_rxe_lo send_recv_on_rxe_lo
kv_case ulp_rdma_link_del_releases_its_qps link_del_releases
kv_case ulp_rmmod_then_layer_unloads rmmod_then_layer_unloads
ulp_cleanup
kv_end
