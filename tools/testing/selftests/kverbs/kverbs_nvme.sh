#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# kverbs_nvme, the NVMe over Fabrics RDMA host in safe Rust, against the
# kernel's own target (kverbs_nvme_lib.sh: nvmet-rdma on rxe over dummy0).
# Its stages so far: a controller's admin queue connects with the
# NVMe/RDMA private data and reads the target's reply; the target's
# rejections come back with their NVMe/RDMA status, a port nobody listens
# on with the connection manager's reason; the controller is brought up
# with admin commands (Fabrics Connect, CAP and VS, enable, Identify
# Controller, the number of I/O queues, the namespaces; their data over
# FRWR, each key invalidated by the target), kept alive (Keep Alive at
# half the keep-alive timeout; without it the target deletes the
# controller) and shut down when it goes, and the target's refusals of a Connect come back decoded; bad options
# are refused with a reason; disconnect, rmmod and the removal of the RDMA
# device delete controllers, and the target's controller with them.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"
# shellcheck source=kverbs_nvme_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_nvme_lib.sh"

DIR=/sys/kernel/debug/$KV_NVME
OPTS="transport=rdma,traddr=$KV_NVME_ADDR,trsvcid=$KV_NVME_SVCID,nqn=$KV_NVME_NQN"
# The host NQN kverbs_nvme makes of its default host identifier, as the C
# host makes its default.
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6b766572-6273-4f6e-b76d-650000000001

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
		refused "$OPTS,keep_alive_tmo=4294968" "keep_alive_tmo=4294968: at most 4294967 seconds" &&
		refused "$OPTS,test_no_keep_alive=2" "test_no_keep_alive=2: 0 or 1" &&
		refused "$OPTS,hostid=1234" "hostid=1234: not a UUID" &&
		refused "$OPTS,trsvcid=x" "trsvcid=x: not a number" &&
		refused "$OPTS,bogus=1" "unknown option 'bogus'" &&
		refused "$OPTS,nqn" "'nqn': not KEY=VALUE" || return 1
	# A control character the writer sent is shown escaped, in the log
	# and in the file (a NUL on a console makes its log binary).
	kv_write_fails "$DIR/connect" "$OPTS,a"$'\x07'"b=1" "Invalid argument" "unknown option 'a.x07b'" || return 1
	grep -qF "error: unknown option 'a\\x07b'" "$DIR/connect" || { kv_msg "connect reads: $(cat "$DIR/connect")"; return 1; }
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
	[[ $line == "kvnvme0: connected, $KV_NVME_ADDR:$KV_NVME_SVCID, subsysnqn $KV_NVME_NQN, admin queue: qid 0, QP "*", controller's receive queue 32, device rxe_dummy; "* ]] ||
		return 1
	kv_logged "kvnvme0: admin queue connected to $KV_NVME_ADDR:$KV_NVME_SVCID, the controller's receive queue 32"
}

# The controller of connects comes up: its ID from Connect is the one
# Identify gives and the target's (ready, with the host's NQN and the
# default keep-alive timeout, 5 s); Identify's fields are nvmet's (its version, model Linux,
# MQES 127, MDTS 8 for RDMA, IOCCSZ (64 + 4096) / 16, SGLS keyed and
# in-capsule, KAS 10, NN 1024); the I/O queues asked for are one a CPU,
# all granted; the namespace is the RAM disk (its size in 512-byte
# blocks); every admin command with data (Connect, the three Identify)
# had its key invalidated by the target (a SEND with invalidate of the
# MR's rkey); the I/O queue is qid 1 of 128 entries (queue_size's
# default: 127 tags), the target's receive queue as large
# (kverbs_nvme_io.sh tests its I/O).
controller_up() {
	local line cntlid t cpus sectors version
	line=$(controllers)
	cpus=$(nproc)
	read -r sectors <"/sys/block/${KV_NVMET_DISK#/dev/}/size"
	# nvmet's version: 1.3 on 6.12, 2.1 on 7.3.
	read -r version <"$KV_NVMET/subsystems/$KV_NVME_NQN/attr_version"
	[[ $line == "kvnvme0: "*"; cntlid "[0-9]*", NVMe $version, model 'Linux', serial '"?*"', firmware '"?*"', MQES 127, MDTS 8, IOCCSZ 260, IORCSZ 1, SGLS 0x100005, KAS 10, NN 1024; admin data commands 4, invalidated by the target 4; keep-alive 5 s, "[0-9]*" sent; I/O queues $cpus of $cpus asked; namespaces 1, nsid 1: $sectors blocks of 512 bytes | I/O queue: qid 1, size 128, tags 127, controller's receive queue 128, "* ]] ||
		{ kv_msg "$line: not Identify's fields, the queues, the namespace, or not every key invalidated by the target"; return 1; }
	[[ $line =~ \;\ cntlid\ ([0-9]+), ]] && cntlid=${BASH_REMATCH[1]}
	t=$KV_NVMET_CTRLS/ctrl$cntlid
	[ "$(kv_nvmet_ctrls)" = "ctrl$cntlid" ] || { kv_msg "the target's controllers: $(kv_nvmet_ctrls)"; return 1; }
	[ "$(cat "$t/hostnqn")" = "$HOSTNQN" ] || { kv_msg "the target's host NQN: $(cat "$t/hostnqn")"; return 1; }
	[ "$(cat "$t/state")" = ready ] || { kv_msg "the target's state: $(cat "$t/state")"; return 1; }
	[ "$(cat "$t/kato")" = 5 ] || { kv_msg "the target's kato: $(cat "$t/kato")"; return 1; }
}

# connect_last OPTIONS: connects with OPTIONS; CTRL_INST and CTRL_ID are
# the host's instance and the target's controller (its debugfs directory).
connect_last() {
	local line
	printf '%s' "$1" >"$DIR/connect" || return 1
	CTRL_INST=$(cat "$DIR/connect")
	CTRL_INST=${CTRL_INST#instance=}
	line=$(controllers | grep "^kvnvme$CTRL_INST: ")
	[[ $line =~ \;\ cntlid\ ([0-9]+), ]] || { kv_msg "controllers: $(controllers)"; return 1; }
	CTRL_ID=$KV_NVMET_CTRLS/ctrl${BASH_REMATCH[1]}
}

absent() {
	[ ! -e "$1" ]
}

# ka_sent INSTANCE: the Keep Alive commands the controller answered.
ka_sent() {
	local line
	line=$(controllers | grep "^kvnvme$1: ")
	[[ $line =~ keep-alive\ [0-9]+\ s,\ ([0-9]+)\ sent ]] && echo "${BASH_REMATCH[1]}"
}

# keep_alive_tmo=2: the target's controller has a 2 s timer, which expires
# between 2 and 4 s after the last command; idle for 6 s, the controller
# stays (a Keep Alive every second: at least 4 answered), and the target
# never says its timer expired. Fails with no Keep Alive sent (the target
# then deletes the controller, as the next case shows).
keep_alive_holds() {
	local n
	connect_last "$OPTS,keep_alive_tmo=2" || return 1
	[ "$(cat "$CTRL_ID/kato")" = 2 ] || { kv_msg "the target's kato: $(cat "$CTRL_ID/kato")"; return 1; }
	sleep 6
	[[ "$(controllers)" == *"kvnvme$CTRL_INST: connected,"* ]] || { kv_msg "controllers: $(controllers)"; return 1; }
	[ "$(cat "$CTRL_ID/state")" = ready ] || { kv_msg "the target's state: $(cat "$CTRL_ID/state")"; return 1; }
	n=$(ka_sent "$CTRL_INST")
	kv_msg "$n Keep Alive answered in 6 s"
	[ "${n:-0}" -ge 4 ] || { kv_msg "$n Keep Alive, not at least 4"; return 1; }
	! kv_logged "keep-alive timer" || { kv_msg "the target's keep-alive timer expired"; return 1; }
	echo "$CTRL_INST" >"$DIR/disconnect" || return 1
	kv_logged "kvnvme$CTRL_INST: shut down, disconnected"
}

# test_no_keep_alive=1: Connect asks for 2 s but no Keep Alive is sent;
# the target's timer expires, it deletes its controller and disconnects;
# with ctrl_loss_tmo=0 the host does not reconnect: the controller is reset
# and deleted (without a shutdown: no command could be answered).
no_keep_alive_target_kills() {
	connect_last "$OPTS,keep_alive_tmo=2,test_no_keep_alive=1,ctrl_loss_tmo=0" || return 1
	kv_wait ctrl_gone "$CTRL_INST" || { kv_msg "controllers: $(controllers)"; return 1; }
	kv_logged "nvmet: ctrl [0-9]* keep-alive timer (2 seconds) expired!" ||
		{ kv_msg "the target did not say its keep-alive timer expired"; return 1; }
	kv_wait absent "$CTRL_ID" || { kv_msg "the target still has $CTRL_ID"; return 1; }
	kv_logged "kvnvme$CTRL_INST: [a-zA-Z/ ]*: resetting" || return 1
	kv_logged "kvnvme$CTRL_INST: not live again within ctrl_loss_tmo 0 s: controller deleted" || return 1
	! kv_logged "kvnvme$CTRL_INST: shut down"
}

# reconnected INSTANCE: the controller is live again after a reconnect.
reconnected() {
	controllers | grep "^kvnvme$1: connected, " | grep -q "; reconnects [1-9][0-9]*$"
}

# The same with recovery (reconnect_delay=1): the target's keep-alive
# timer expires, it deletes its controller and disconnects; the host
# resets and reconnects, a controller of the target again.
no_keep_alive_host_reconnects() {
	connect_last "$OPTS,keep_alive_tmo=2,test_no_keep_alive=1,reconnect_delay=1" || return 1
	kv_wait reconnected "$CTRL_INST" || kv_wait reconnected "$CTRL_INST" ||
		{ kv_msg "controllers: $(controllers)"; return 1; }
	kv_logged "nvmet: ctrl [0-9]* keep-alive timer (2 seconds) expired!" || return 1
	kv_logged "kvnvme$CTRL_INST: [a-zA-Z/ ]*: resetting" || return 1
	kv_logged "kvnvme$CTRL_INST: reconnected: controller [0-9]*, live" || return 1
	[ -n "$(kv_nvmet_ctrls)" ] || { kv_msg "the target has no controller"; return 1; }
	echo "$CTRL_INST" >"$DIR/disconnect"
}

# ctrl_gone INSTANCE: the controllers file no longer lists it.
ctrl_gone() {
	! controllers | grep -q "^kvnvme$1: "
}

# instances: the controllers' names (their lines change as they are kept
# alive).
instances() {
	controllers | cut -d: -f1
}

# refused_by_target OPTIONS ERRNO WANT: a connect with OPTIONS fails with
# ERRNO (its message), the connect file and the log say WANT, and neither
# the host nor the target has a controller more.
refused_by_target() {
	local before tbefore
	before=$(instances) tbefore=$(kv_nvmet_ctrls)
	kv_write_fails "$DIR/connect" "$1" "$2" "$3" || return 1
	grep -qF "error: $3" "$DIR/connect" || { kv_msg "connect reads: $(cat "$DIR/connect")"; return 1; }
	[ "$(instances)" = "$before" ] || { kv_msg "controllers: $(controllers)"; return 1; }
	[ "$(kv_nvmet_ctrls)" = "$tbefore" ] || { kv_msg "the target's controllers: $(kv_nvmet_ctrls)"; return 1; }
}

# A subsystem the target does not have: Connect's invalid parameter,
# pointing at the subsystem's NQN in the data (offset 256).
unknown_subsystem() {
	refused_by_target "transport=rdma,traddr=$KV_NVME_ADDR,nqn=nqn.2026-11.org.kverbs:none" \
		"Invalid argument" \
		"Connect: invalid parameters (status 0x182), offset 256 in the data (subsysnqn)"
}

# A host the subsystem does not allow: Connect's invalid host.
host_not_allowed() {
	local sub=$KV_NVMET/subsystems/$KV_NVME_NQN rc=0
	echo 0 >"$sub/attr_allow_any_host" || return 1
	refused_by_target "$OPTS" "Operation not permitted" "Connect: invalid host (status 0x184)" || rc=1
	echo 1 >"$sub/attr_allow_any_host" || return 1
	return $rc
}

# A Connect command of record format 1: the target's incompatible format.
connect_recfmt_refused() {
	refused_by_target "$OPTS,test_connect_recfmt=1" "Input/output error" \
		"Connect: incompatible format (status 0x180)"
}

# The host NQN and ID given reach the target's controller.
hostnqn_given() {
	local n=nqn.2026-11.org.kverbs:host1 line cntlid inst
	printf '%s' "$OPTS,hostnqn=$n,hostid=01234567-89ab-cdef-0123-456789abcdef" >"$DIR/connect" || return 1
	line=$(controllers | tail -n 1)
	[[ $line =~ \;\ cntlid\ ([0-9]+), ]] || { kv_msg "controllers: $(controllers)"; return 1; }
	cntlid=${BASH_REMATCH[1]}
	[ "$(cat "$KV_NVMET_CTRLS/ctrl$cntlid/hostnqn")" = "$n" ] ||
		{ kv_msg "the target's host NQN: $(cat "$KV_NVMET_CTRLS/ctrl$cntlid/hostnqn")"; return 1; }
	inst=${line%%:*}
	echo "${inst#kvnvme}" >"$DIR/disconnect"
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

# The target goes (the subsystem unlinked from the port: nvmet deletes
# every controller of it there and disconnects their queues, so this case
# runs when no other is connected): with ctrl_loss_tmo=0 the controller is
# reset and deleted at once, without a shutdown (no command could be
# answered). The link is made again for the cases after.
target_gone() {
	local port=$KV_NVMET/ports/$KV_NVMET_PORT sub=$KV_NVMET/subsystems/$KV_NVME_NQN inst rc=0
	[ -z "$(controllers)" ] || { kv_msg "another controller is connected: $(controllers)"; return 1; }
	printf '%s' "$OPTS,ctrl_loss_tmo=0" >"$DIR/connect" || return 1
	inst=$(cat "$DIR/connect")
	inst=${inst#instance=}
	rm "$port/subsystems/$KV_NVME_NQN" || return 1
	kv_wait ctrl_gone "$inst" || { kv_msg "controllers: $(controllers)"; rc=1; }
	ln -s "$sub" "$port/subsystems/$KV_NVME_NQN" || return 1
	[ $rc = 0 ] || return 1
	kv_logged "kvnvme$inst: not live again within ctrl_loss_tmo 0 s: controller deleted" || return 1
	! kv_logged "kvnvme$inst: shut down"
}

disconnects() {
	kv_write_fails "$DIR/disconnect" 99 "No such file or directory" "disconnect: no controller kvnvme99" ||
		return 1
	kv_write_fails "$DIR/disconnect" kvnvme0 "Invalid argument" "disconnect: want an instance number or 'all'" ||
		return 1
	echo 0 >"$DIR/disconnect" || return 1
	[ -z "$(controllers)" ] || { kv_msg "controllers: $(controllers)"; return 1; }
	# Shut down first (CC.SHN, CSTS.SHST complete).
	kv_logged "kvnvme0: shut down, disconnected" || return 1
	# The target's controller goes with its admin queue.
	kv_wait kv_nvmet_no_ctrls || { kv_msg "the target's controllers: $(kv_nvmet_ctrls)"; return 1; }
}

# Unloaded with two controllers connected: both are shut down and go
# with the module, and the target's with them.
rmmod_with_controllers() {
	local n l
	printf '%s' "$OPTS" >"$DIR/connect" && printf '%s' "$OPTS" >"$DIR/connect" || return 1
	[ "$(controllers | wc -l)" = 2 ] || { kv_msg "controllers: $(controllers)"; return 1; }
	[ "$(kv_nvmet_ctrls | wc -l)" = 2 ] || { kv_msg "the target's controllers: $(kv_nvmet_ctrls)"; return 1; }
	rmmod "$KV_NVME" || { kv_msg "rmmod failed"; return 1; }
	! kv_mod_loaded "$KV_NVME" || return 1
	kv_case_lines "$KV_CASE"
	n=0
	for l in "${KV_LINES[@]}"; do
		[[ $l == *": shut down, disconnected" ]] && n=$((n + 1))
	done
	[ "$n" = 2 ] || { kv_msg "$n shut down, not 2"; return 1; }
	kv_wait kv_nvmet_no_ctrls || { kv_msg "the target's controllers: $(kv_nvmet_ctrls)"; return 1; }
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

# The errnos connect may give (Documentation/ABI/testing/debugfs-kverbs):
# bad options EINVAL; a target's refusal ECONNREFUSED, EPERM or EIO; a
# connection not made in time ETIMEDOUT; an address no device routes to
# EADDRNOTAVAIL, ENETUNREACH or ENODEV; a broken answer EPROTO; and EINTR,
# the fuzzer's 1 s alarm. Disconnect: EINVAL, ENOENT.
FUZZ_ERRNOS_CONNECT=EINVAL,ECONNREFUSED,EPERM,EIO,ETIMEDOUT,EADDRNOTAVAIL,ENETUNREACH,ENODEV,EPROTO,EINTR
FUZZ_ERRNOS_DISCONNECT=EINVAL,ENOENT

# Generated strings (kv_fuzz: random bytes, mutations of valid strings,
# every key with boundary numbers, 4 KiB strings, partial writes, non-UTF-8
# bytes) to connect and disconnect: each accepted or refused with one of
# the files' errnos, nothing else; what the accepted ones connected is
# disconnected, and a controller connects after. 200 strings each (a
# string may connect or wait for the fuzzer's 1 s alarm); what they leave
# allocated is kmemleak's case.
fuzz() {
	local keys=transport,traddr,trsvcid,nqn,hostnqn,hostid,nr_io_queues,queue_size,keep_alive_tmo
	keys=$keys,reconnect_delay,ctrl_loss_tmo,test_recfmt,test_hsqsize,test_connect_recfmt,test_no_keep_alive
	local out rc
	out=$(KV_FUZZ_ALARM=1 KV_FUZZ_ERRNOS=$FUZZ_ERRNOS_CONNECT kv_fuzz 1 200 "$DIR/connect" "$keys" \
		"$OPTS" "$OPTS,nr_io_queues=1,queue_size=32" "$OPTS,hostnqn=nqn.2026-11.org.kverbs:host2" 2>&1)
	rc=$?
	kv_diag <<<"$out"
	[ $rc = 0 ] || { kv_msg "connect: an errno outside $FUZZ_ERRNOS_CONNECT"; return 1; }
	out=$(KV_FUZZ_ALARM=1 KV_FUZZ_ERRNOS=$FUZZ_ERRNOS_DISCONNECT kv_fuzz 1 200 "$DIR/disconnect" "" \
		"99" "kvnvme1" 2>&1)
	rc=$?
	kv_diag <<<"$out"
	[ $rc = 0 ] || { kv_msg "disconnect: an errno outside $FUZZ_ERRNOS_DISCONNECT"; return 1; }
	echo all >"$DIR/disconnect" || return 1
	[ -z "$(controllers)" ] || { kv_msg "controllers: $(controllers)"; return 1; }
	kv_wait kv_nvmet_no_ctrls || { kv_msg "the target's controllers: $(kv_nvmet_ctrls)"; return 1; }
	printf '%s' "$OPTS" >"$DIR/connect" || { kv_msg "a connect after the fuzzers failed"; return 1; }
	echo all >"$DIR/disconnect"
}

# sweep: a connect with the Nth fault-injection point of its task armed
# (kv_fail_nth: failslab and fail_page_alloc through fail-nth, every
# allocation of the writer's task, the RDMA core's and rxe's in it too),
# for N = 1, then about every eighth of the points a connect passes (every
# one under make stress), and the last: each ends in a connected controller or an errno of those
# below (numbers: ENOMEM, EIO, EINVAL, ENODEV, EINTR, EAGAIN, EPROTO,
# EADDRNOTAVAIL, ENETUNREACH, ECONNRESET, ENOBUFS, ETIMEDOUT,
# ECONNREFUSED, EHOSTUNREACH, ECANCELED, and ENFILE: rxe makes a socket
# for each QP, and a socket that cannot be allocated is ENFILE), and leaves
# no controller, on the host or the target; a connect passes after each.
# What an error path leaks is kmemleak's case.
SWEEP_ERRNOS=" 12 5 22 19 4 11 71 99 101 104 105 110 111 113 125 23 "
# sweep_point N: connect with point N armed; SWEEP_ERR, SWEEP_INJ and
# SWEEP_LEFT from kv_fail_nth; whatever connected disconnected, checked.
sweep_point() {
	local out
	out=$(kv_fail_nth "$1" write "$DIR/connect" "$OPTS") || { kv_msg "kv_fail_nth: $out"; return 1; }
	read -r _ SWEEP_ERR _ SWEEP_INJ _ SWEEP_LEFT <<<"$out"
	if [ "$SWEEP_ERR" = 0 ]; then
		[ "$(controllers | wc -l)" = 1 ] || { kv_msg "point $1: connected, but controllers: $(controllers)"; return 1; }
		echo all >"$DIR/disconnect" || return 1
	else
		[[ $SWEEP_ERRNOS == *" $SWEEP_ERR "* ]] || { kv_msg "point $1: errno $SWEEP_ERR"; return 1; }
		[ -z "$(controllers)" ] || { kv_msg "point $1: errno $SWEEP_ERR, and controllers: $(controllers)"; return 1; }
	fi
	kv_wait kv_nvmet_no_ctrls || { kv_msg "point $1: the target's controllers: $(kv_nvmet_ctrls)"; return 1; }
}

sweep() {
	local total stride n=1 points=0 refused=0 errnos=""
	kv_faults_quiet || return 1
	# Injected failures make the page and vmalloc allocators warn (the
	# last case of the program: the others kept the stricter check).
	KV_ALLOC_WARNINGS_OK=1
	[ -z "$(controllers)" ] || { kv_msg "controllers before: $(controllers)"; return 1; }
	sweep_point 1000000 || return 1
	[ "$SWEEP_ERR" = 0 ] || { kv_msg "the counting run failed (errno $SWEEP_ERR)"; return 1; }
	total=$((1000000 - SWEEP_LEFT))
	[ "$total" -gt 0 ] || { kv_msg "the counting run passed no fault-injection point"; return 1; }
	stride=$((total / 8 > 1 ? total / 8 : 1))
	# make stress: every point.
	[ -e /kverbs/stress ] && stride=1
	while [ "$n" -le "$total" ]; do
		sweep_point "$n" || return 1
		# A run may pass fewer points than the counting one (a point not
		# reached: it went through).
		[ "$SWEEP_INJ" = 1 ] && points=$((points + 1))
		if [ "$SWEEP_ERR" != 0 ]; then
			refused=$((refused + 1))
			[[ " $errnos " == *" $SWEEP_ERR "* ]] || errnos="$errnos $SWEEP_ERR"
		fi
		if [ "$n" -lt "$total" ] && [ $((n + stride)) -gt "$total" ]; then
			n=$total
		else
			n=$((n + stride))
		fi
		{ printf '%s' "$OPTS" >"$DIR/connect" && echo all >"$DIR/disconnect"; } ||
			{ kv_msg "the connect after point $n failed"; return 1; }
	done
	kv_msg "connect: $total points, $points armed (stride $stride), $refused ended with an errno (${errnos# })"
	[ "$refused" -gt 0 ] || { kv_msg "no armed point made a connect fail"; return 1; }
}

kv_begin 21
kv_case setup_nvmet_on_rxe_dummy_and_load setup
kv_case nvme_host_bad_options_refused_with_reason bad_options
kv_case nvme_host_admin_queue_connects_target_rq_32 connects
kv_case nvme_host_controller_up_identify_as_target_keys_invalidated_by_target controller_up
kv_case nvme_host_recfmt_1_rejected_nvme_rdma_status_2 recfmt_rejected
kv_case nvme_host_admin_hsqsize_32_rejected_nvme_rdma_status_4 hsqsize_rejected
kv_case nvme_host_no_listener_rejected_cm_reason_8 no_listener_rejected
kv_case nvme_host_unknown_subsystem_connect_invalid_param_at_256 unknown_subsystem
kv_case nvme_host_host_not_allowed_connect_invalid_host host_not_allowed
kv_case nvme_host_connect_recfmt_1_incompatible_format connect_recfmt_refused
kv_case nvme_host_hostnqn_and_hostid_given_reach_target hostnqn_given
kv_case nvme_host_keep_alive_holds_idle_controller_3_kato keep_alive_holds
kv_case nvme_host_no_keep_alive_target_kills_controller no_keep_alive_target_kills
kv_case nvme_host_keep_alive_expired_on_target_host_reconnects no_keep_alive_host_reconnects
kv_case nvme_host_disconnect_by_instance disconnects
kv_case nvme_host_target_gone_controller_deleted_without_shutdown target_gone
kv_case nvme_host_rmmod_with_controllers_connected rmmod_with_controllers
kv_case nvme_host_rdma_link_del_deletes_connected_controller device_removed
kv_case nvme_host_fuzzed_connect_and_disconnect_give_their_errnos fuzz
kv_case nvme_host_connect_alloc_failure_sweep_errno_or_connected sweep
kv_end
