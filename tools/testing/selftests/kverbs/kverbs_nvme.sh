#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# kverbs_nvme, the NVMe over Fabrics RDMA host in safe Rust, against the
# kernel's own target (kverbs_nvme_lib.sh: nvmet-rdma on rxe over dummy0).
# Its first stage: a controller's admin queue connects with the NVMe/RDMA
# private data and reads the target's reply; the target's rejections come
# back with their NVMe/RDMA status, a port nobody listens on with the
# connection manager's reason; bad options are refused with a reason;
# disconnect, rmmod and the removal of the RDMA device delete
# controllers.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"
# shellcheck source=kverbs_nvme_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_nvme_lib.sh"

DIR=/sys/kernel/debug/$KV_NVME
OPTS="transport=rdma,traddr=$KV_NVME_ADDR,trsvcid=$KV_NVME_SVCID,nqn=$KV_NVME_NQN"

load() {
	kv_load_layer && insmod "$KV_MODDIR/$KV_NVME.ko"
}

setup() {
	kv_nvmet_up || { kv_msg "the target's setup failed"; return 1; }
	load || { kv_msg "insmod failed"; return 1; }
	[ -w "$DIR/connect" ] && [ -r "$DIR/controllers" ]
}

# controllers: the controllers file, as diagnostics too.
controllers() {
	cat "$DIR/controllers"
}

# refused STRING WANT: a connect with STRING fails with EINVAL, and the
# connect file and the log give WANT as the reason.
refused() {
	kv_write_fails "$DIR/connect" "$1" "Invalid argument" "kverbs_nvme: connect: $2" || return 1
	grep -qF "error: $2" "$DIR/connect" || { kv_msg "connect reads: $(cat "$DIR/connect")"; return 1; }
}

bad_options() {
	refused "traddr=$KV_NVME_ADDR,nqn=$KV_NVME_NQN" "no transport= (rdma)" &&
		refused "transport=tcp,traddr=$KV_NVME_ADDR,nqn=$KV_NVME_NQN" "transport=tcp: only rdma" &&
		refused "transport=rdma,nqn=$KV_NVME_NQN" "no traddr=" &&
		refused "transport=rdma,traddr=fe80::1,nqn=$KV_NVME_NQN" "traddr=fe80::1: not an IPv4 address" &&
		refused "transport=rdma,traddr=$KV_NVME_ADDR" "no nqn=" &&
		refused "$OPTS,queue_size=8" "queue_size=8: 16 to 1024" &&
		refused "$OPTS,nr_io_queues=0" "nr_io_queues=0: at least 1" &&
		refused "$OPTS,trsvcid=x" "trsvcid=x: not a number" &&
		refused "$OPTS,bogus=1" "unknown option 'bogus'" &&
		refused "$OPTS,nqn" "'nqn': not KEY=VALUE" || return 1
	[ -z "$(controllers)" ] || { kv_msg "controllers: $(controllers)"; return 1; }
}

# The admin queue connects: qid 0, and the target's receive queue is the
# 32 entries asked for (nvmet answers crqsize = hsqsize + 1).
connects() {
	local line
	printf '%s' "$OPTS" >"$DIR/connect" || return 1
	[ "$(cat "$DIR/connect")" = "instance=0" ] || { kv_msg "connect reads: $(cat "$DIR/connect")"; return 1; }
	line=$(controllers)
	kv_msg "$line"
	[[ $line == "kvnvme0: connected, $KV_NVME_ADDR:$KV_NVME_SVCID, subsysnqn $KV_NVME_NQN, admin queue: qid 0, QP "*", controller's receive queue 32, device rxe_dummy" ]] ||
		return 1
	kv_logged "kvnvme0: admin queue connected to $KV_NVME_ADDR:$KV_NVME_SVCID, the controller's receive queue 32"
}

# rejected OPTIONS WANT: a connect with OPTIONS is refused (ECONNREFUSED)
# and the connect file and the log say WANT.
rejected() {
	kv_write_fails "$DIR/connect" "$OPTS,$1" "Connection refused" "admin queue: $2" || return 1
	grep -qF "$2" "$DIR/connect" || { kv_msg "connect reads: $(cat "$DIR/connect")"; return 1; }
}

recfmt_rejected() {
	rejected test_recfmt=1 "rejected by the target: NVMe/RDMA status 2 (invalid record format)"
}

# The admin queue holds 32 entries at most: a host SQ size of 33 (0's
# based 32) is refused.
hsqsize_rejected() {
	rejected test_hsqsize=32 "rejected by the target: NVMe/RDMA status 4 (invalid host SQ size)"
}

no_listener_rejected() {
	rejected trsvcid=4421 "rejected: reason 8 (invalid service ID: nothing listens there)"
}

disconnects() {
	kv_write_fails "$DIR/disconnect" 99 "No such file or directory" "disconnect: no controller kvnvme99" ||
		return 1
	kv_write_fails "$DIR/disconnect" kvnvme0 "Invalid argument" "disconnect: want an instance number or 'all'" ||
		return 1
	echo 0 >"$DIR/disconnect" || return 1
	[ -z "$(controllers)" ] || { kv_msg "controllers: $(controllers)"; return 1; }
	kv_logged "kvnvme0: disconnected"
}

# Unloaded with two controllers connected: both go with the module.
rmmod_with_controllers() {
	printf '%s' "$OPTS" >"$DIR/connect" && printf '%s' "$OPTS" >"$DIR/connect" || return 1
	[ "$(controllers | wc -l)" = 2 ] || { kv_msg "controllers: $(controllers)"; return 1; }
	rmmod "$KV_NVME" || { kv_msg "rmmod failed"; return 1; }
	! kv_mod_loaded "$KV_NVME" || return 1
	load || { kv_msg "insmod after rmmod failed"; return 1; }
	[ -z "$(controllers)" ]
}

# rdma link del with a controller connected: the connection manager's
# DEVICE_REMOVAL drops the controller (its queue's drain, QP, CQ, PD and
# ID) before the removal goes on, and the removal ends (nvmet-rdma, loaded
# after rdma_cm, closes the target's side: the config fragment says why
# that order matters). The device comes back, and the target's port,
# whose listener went with the old device (nvmet-rdma repairs a port
# only on an address change), is made anew: a controller connects again.
device_removed() {
	printf '%s' "$OPTS" >"$DIR/connect" || return 1
	[ -n "$(controllers)" ] || { kv_msg "no controller"; return 1; }
	kv_rxe_del rxe_dummy || { kv_msg "rdma link del failed"; return 1; }
	[ ! -e /sys/class/infiniband/rxe_dummy ] || { kv_msg "rxe_dummy is still there"; return 1; }
	kv_logged "kvnvme0: device removed: controller deleted" || return 1
	[ -z "$(controllers)" ] || { kv_msg "controllers: $(controllers)"; return 1; }
	{ kv_nvmet_down && kv_nvmet_up; } || { kv_msg "the target's setup again failed"; return 1; }
	printf '%s' "$OPTS" >"$DIR/connect" || return 1
	[ "$(controllers | wc -l)" = 1 ] || { kv_msg "controllers: $(controllers)"; return 1; }
	echo all >"$DIR/disconnect"
}

kv_begin 10
kv_case setup_nvmet_on_rxe_dummy_and_load setup
kv_case nvme_host_bad_options_refused_with_reason bad_options
kv_case nvme_host_admin_queue_connects_target_rq_32 connects
kv_case nvme_host_recfmt_1_rejected_nvme_rdma_status_2 recfmt_rejected
kv_case nvme_host_admin_hsqsize_32_rejected_nvme_rdma_status_4 hsqsize_rejected
kv_case nvme_host_no_listener_rejected_cm_reason_8 no_listener_rejected
kv_case nvme_host_disconnect_by_instance disconnects
kv_case nvme_host_rmmod_with_controllers_connected rmmod_with_controllers
kv_case nvme_host_rdma_link_del_deletes_connected_controller device_removed
kv_end
