#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The path migration example (the manual's apm.c over rdma_cm). rxe
# advertises IB_DEVICE_AUTO_PATH_MIG, but the RDMA core loads alternate
# paths on InfiniBand ports only (apm.c's ibv_modify_qp gets EINVAL on
# RoCE): each role must say so and end with EOPNOTSUPP before it connects,
# and leave the device usable; bad input is refused.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

ADDR=169.254.1.1
APM=$KV_DEBUGFS/rxe_dummy/apm

setup() {
	kv_dummy_up && kv_rxe_add rxe_dummy dummy0 && kv_load || return 1
	# The premise: a RoCE port (rxe says it migrates paths all the same).
	ibv_devinfo -d rxe_dummy | grep -q "link_layer:.*Ethernet"
}

# refused ROLE_OPTS: EOPNOTSUPP at once, the reason in the report (this
# run's: its config line has ROLE_OPTS's role and migrate_after; the case
# before refused the other role, with the same reason) and the log, no
# connection tried; then the rc example still runs on the device (a
# write that succeeds, so that its report is this run's).
refused() {
	local t0 t1 role mig=""
	role=${1#role=}
	role=${role%%,*}
	case $1 in *migrate_after=*) mig=${1#*migrate_after=}; mig=${mig%%,*} ;; esac
	# The refusal is timed: the write alone, not the checks of its error and
	# log line after it (kv_write_fails).
	kv_write_fails "$APM" "$1,timeout_ms=20000" "Operation not supported" \
		"rxe_dummy: apm: no path migration: its ports are not InfiniBand" || return 1
	t0=$KV_WRITE_T0 t1=$KV_WRITE_T1
	kv_diag <"$APM"
	grep -q "^apm: no path migration on rxe_dummy: its ports are not InfiniBand, and the RDMA core loads alternate paths on InfiniBand ports only" "$APM" || return 1
	grep -q "^result: error -95" "$APM" || return 1
	grep -qE "^config: role=$role count=[0-9]+ migrate_after=${mig:-[0-9]+} .*timeout_ms=20000\$" "$APM" ||
		{ kv_msg "the report is not of this run (role=$role${mig:+, migrate_after=$mig})"; return 1; }
	! grep -q "rdma_cm" "$APM" || { kv_msg "it tried to connect"; return 1; }
	[ $((t1 - t0)) -le 2 ] || { kv_msg "it took $((t1 - t0)) s"; return 1; }
	printf '%s' "role=loopback,size=4096,validate" >"$KV_DEBUGFS/rxe_dummy/rc" ||
		{ kv_msg "the rc run after it failed"; kv_diag <"$KV_DEBUGFS/rxe_dummy/rc"; return 1; }
	grep -q "^result: ok" "$KV_DEBUGFS/rxe_dummy/rc" && grep -q "^validate: ok" "$KV_DEBUGFS/rxe_dummy/rc"
}

bad() {
	kv_write_fails "$APM" "$1" "$2" "$3"
}

kv_begin 7
kv_case setup_rxe_dummy_without_auto_path_mig setup
kv_case apm_server_refused_eopnotsupp_on_rxe refused "role=server,addr=$ADDR"
kv_case apm_client_refused_eopnotsupp_on_rxe refused "role=client,addr=$ADDR,migrate_after=3"
kv_case bad_input_apm_unknown_key bad "role=server,colour=blue" "Invalid argument" "apm: unknown key 'colour'"
kv_case bad_input_apm_client_without_addr bad "role=client" "Invalid argument" "apm: role=client needs addr="
kv_case bad_input_apm_count_zero bad "role=server,count=0" "Numerical result out of range" "count=0 is out of range"
kv_end
