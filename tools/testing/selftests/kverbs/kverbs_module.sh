#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Loading and unloading the kverbs example module, with and without RDMA
# devices: the client registers and unregisters cleanly every time, its
# debugfs and sysfs files come and go with it. Then the self-test module
# (kverbs_selftest.ko), another user of the layer: its control file comes
# and goes with it, and lsmod shows it holding kverbs.ko.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

# sorted_lines FILE: SORTED, FILE's lines in sort(1)'s order (the guest's
# C locale: by bytes), each followed by a space; sorted by the shell
# itself, as this runs 40 times (a process costs 0.1 s under TCG).
sorted_lines() {
	local -a w
	local i j t
	mapfile -t w <"$1" || return 1
	for ((i = 1; i < ${#w[@]}; i++)); do
		t=${w[i]}
		for ((j = i - 1; j >= 0; j--)); do
			[[ ${w[j]} > $t ]] || break
			w[j + 1]=${w[j]}
		done
		w[j + 1]=$t
	done
	SORTED=
	for t in "${w[@]}"; do
		SORTED+="$t "
	done
}

# One load/unload cycle; $1 lists the devices expected in the listing.
load_unload_once() {
	local want=$1 got d
	kv_load || { kv_msg "insmod failed"; return 1; }
	[ -d "$KV_DEBUGFS" ] || { kv_msg "no $KV_DEBUGFS"; return 1; }
	sorted_lines "$KV_SYSFS/devices" || { kv_msg "no $KV_SYSFS/devices"; return 1; }
	got=$SORTED
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
	for i in {1..20}; do
		load_unload_once "$1" || { kv_msg "iteration $i"; return 1; }
	done
}

load_with_no_device() {
	kv_load || return 1
	[ -d "$KV_DEBUGFS" ] && [ -z "$(kv_device_dirs)" ] &&
		[ -z "$(<"$KV_SYSFS/devices")" ] &&
		kv_logged "kverbs_example: registered as an RDMA client"
	local r=$?
	kv_unload || return 1
	return $r
}

two_devices() {
	kv_dummy_up && kv_rxe_add rxe_lo lo && kv_rxe_add rxe_dummy dummy0
}

# The self-test module alone on the layer: its control file lists the
# cases before any run; rmmod takes the file and leaves the layer.
selftest_load_unload() {
	local st=$KV_SELFTEST_DEBUGFS/selftest
	kv_load_selftest || { kv_msg "insmod failed"; return 1; }
	[ -f "$st" ] || { kv_msg "no $st"; return 1; }
	grep -q "^case qp_refuses_cq_of_other_device$" "$st" || { kv_msg "no case listed"; return 1; }
	rmmod "$KV_SELFTEST" || { kv_msg "rmmod failed"; return 1; }
	[ ! -e "$KV_SELFTEST_DEBUGFS" ] || { kv_msg "$KV_SELFTEST_DEBUGFS left behind"; return 1; }
	kv_layer_loaded || { kv_msg "kverbs.ko went with it"; return 1; }
	kv_unload_layer
}

# lsmod's "Used by" (busybox: name, size, count, users) and
# /sys/module/kverbs/holders name the self-test module beside the example;
# unloading the layer takes the self-test first.
used_by_selftest() {
	local r=0
	kv_load || { kv_msg "insmod of the example failed"; return 1; }
	kv_load_selftest || { kv_msg "insmod of the self-test failed"; return 1; }
	kv_used_by kverbs_example kverbs_selftest || r=1
	[ -e /sys/module/kverbs/holders/kverbs_selftest ] || { kv_msg "not a holder of kverbs"; r=1; }
	kv_unload || { kv_msg "unloading failed"; return 1; }
	! kv_selftest_loaded || { kv_msg "the self-test is still loaded"; return 1; }
	! kv_layer_loaded || { kv_msg "kverbs.ko is still loaded"; return 1; }
	return $r
}

# The three modules of this tree on the layer at once: lsmod's "Used by"
# names each of them, rmmod of the layer is refused while they hold it, and
# it goes once they have.
used_by_all_three() {
	local r=0
	kv_load || { kv_msg "insmod of the example failed"; return 1; }
	kv_load_selftest || { kv_msg "insmod of the self-test failed"; return 1; }
	insmod "$KV_MODDIR/$KV_MINIMAL.ko" || { kv_msg "insmod of the minimal module failed"; return 1; }
	kv_used_by kverbs_example kverbs_minimal kverbs_selftest || r=1
	if rmmod "$KV_LAYER" 2>/dev/null; then
		kv_msg "rmmod $KV_LAYER succeeded while three modules use it"
		return 1
	fi
	rmmod "$KV_MINIMAL" || { kv_msg "rmmod of the minimal module failed"; return 1; }
	kv_unload || { kv_msg "unloading failed"; return 1; }
	! kv_layer_loaded || { kv_msg "kverbs.ko is still loaded"; return 1; }
	return $r
}

kv_begin 8
kv_case load_with_no_rdma_device load_with_no_device
kv_case load_unload_20_times_no_device load_unload_repeated ""
kv_case create_rxe_on_lo_and_dummy0 two_devices
kv_case load_unload_20_times_two_devices load_unload_repeated "rxe_dummy rxe_lo "
kv_case selftest_load_unload_two_devices selftest_load_unload
kv_case module_layer_used_by_selftest used_by_selftest
kv_case module_layer_used_by_example_selftest_minimal used_by_all_three
kv_end
