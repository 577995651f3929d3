#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The NVMe over Fabrics fixture of the kverbs selftests, sourced after
# kverbs_lib.sh: the kernel's own RDMA target (nvmet-rdma, configured in
# configfs) exporting a RAM disk (brd's /dev/ram0) on rxe over dummy0
# (169.254.1.1, port 4420), and the kernel's C host (nvme-rdma) connected
# to it through /dev/nvme-fabrics, as nvme-cli's "nvme connect -t rdma"
# does. kverbs_nvme is tested against the same target and compared with
# the same host.

KV_CONFIGFS=/sys/kernel/config
KV_NVMET=$KV_CONFIGFS/nvmet
KV_NVME_NQN=nqn.2026-11.org.kverbs:ram0
KV_NVME_ADDR=169.254.1.1
KV_NVME_SVCID=4420
# The target's port (a configfs directory name) and its backing store.
KV_NVMET_PORT=1
KV_NVMET_DISK=/dev/ram0

# The target's controllers of the subsystem, in its debugfs.
KV_NVMET_CTRLS=/sys/kernel/debug/nvmet/$KV_NVME_NQN

# kv_nvmet_ctrls: the target's controllers of the subsystem (ctrlN), one
# a line.
kv_nvmet_ctrls() {
	local d
	for d in "$KV_NVMET_CTRLS"/ctrl*; do
		[ -e "$d" ] && echo "${d##*/}"
	done
}

kv_nvmet_no_ctrls() {
	[ -z "$(kv_nvmet_ctrls)" ]
}

# kv_nvme_modprobe MODULE: the kernel's NVMe driver MODULE loaded, with
# the modules it needs (the test kernel builds them as modules, which
# tools/vm/mkinitramfs.sh puts in the guest's /lib/modules: the config
# fragment says why).
kv_nvme_modprobe() {
	[ -d "/sys/module/${1//-/_}" ] && return 0
	modprobe "$1" || { kv_msg "cannot load $1 (not in /lib/modules/$(uname -r)?)"; return 1; }
}

# kv_nvmet_up: the target listening: rxe on dummy0 (or KV_NVMET_RXE), the subsystem
# $KV_NVME_NQN open to any host with namespace 1 on $KV_NVMET_DISK, linked
# into an RDMA port at $KV_NVME_ADDR:$KV_NVME_SVCID.
kv_nvmet_up() {
	local sub=$KV_NVMET/subsystems/$KV_NVME_NQN port=$KV_NVMET/ports/$KV_NVMET_PORT
	kv_nvme_modprobe nvmet-rdma || return 1
	# On rxe over dummy0, unless on a device of its own (KV_NVMET_RXE: the
	# peer VM's rxe_eth, in kverbs_nvme_two_hosts.sh).
	if [ -z "${KV_NVMET_RXE:-}" ]; then
		kv_dummy_up || return 1
		[ -e /sys/class/infiniband/rxe_dummy ] || kv_rxe_add rxe_dummy dummy0 || return 1
	fi
	if [ ! -d "$KV_NVMET" ]; then
		mount -t configfs none "$KV_CONFIGFS" ||
			{ kv_msg "cannot mount configfs on $KV_CONFIGFS"; return 1; }
	fi
	[ -d "$KV_NVMET" ] || { kv_msg "no $KV_NVMET: CONFIG_NVME_TARGET?"; return 1; }
	[ -b "$KV_NVMET_DISK" ] || { kv_msg "no $KV_NVMET_DISK: CONFIG_BLK_DEV_RAM?"; return 1; }
	mkdir "$sub" || return 1
	echo 1 >"$sub/attr_allow_any_host" || return 1
	mkdir "$sub/namespaces/1" || return 1
	echo "$KV_NVMET_DISK" >"$sub/namespaces/1/device_path" || return 1
	echo 1 >"$sub/namespaces/1/enable" || return 1
	mkdir "$port" || return 1
	echo rdma >"$port/addr_trtype" || return 1
	echo ipv4 >"$port/addr_adrfam" || return 1
	echo "$KV_NVME_ADDR" >"$port/addr_traddr" || return 1
	echo "$KV_NVME_SVCID" >"$port/addr_trsvcid" || return 1
	# Linking enables the port: nvmet-rdma listens from here.
	ln -s "$sub" "$port/subsystems/$KV_NVME_NQN"
}

# kv_nvmet_ns_add NSID DEV: namespace NSID of the subsystem on block
# device DEV, enabled.
kv_nvmet_ns_add() {
	local ns=$KV_NVMET/subsystems/$KV_NVME_NQN/namespaces/$1
	[ -b "$2" ] || { kv_msg "no $2"; return 1; }
	mkdir "$ns" && echo "$2" >"$ns/device_path" && echo 1 >"$ns/enable"
}

# kv_nvmet_down: the target's port, namespaces and subsystem removed, each
# if there (a failed setup leaves part of them); fails if one stays.
kv_nvmet_down() {
	local sub=$KV_NVMET/subsystems/$KV_NVME_NQN port=$KV_NVMET/ports/$KV_NVMET_PORT ns
	[ -d "$KV_NVMET" ] || return 0
	[ -L "$port/subsystems/$KV_NVME_NQN" ] && rm "$port/subsystems/$KV_NVME_NQN"
	[ -d "$port" ] && rmdir "$port"
	for ns in "$sub"/namespaces/*; do
		[ -d "$ns" ] || continue
		echo 0 >"$ns/enable"
		rmdir "$ns"
	done
	[ -d "$sub" ] && rmdir "$sub"
	[ ! -e "$port" ] && [ ! -e "$sub" ]
}

# kv_nvme_c_connect OPTIONS: the C host connected with nvme-cli's option
# string, less transport, traddr, trsvcid and nqn, which are the
# fixture's; KV_NVME_INSTANCE is its controller's instance (nvme<N>), as
# /dev/nvme-fabrics answers on the file written.
kv_nvme_c_connect() {
	local fd line opts="transport=rdma,traddr=$KV_NVME_ADDR,trsvcid=$KV_NVME_SVCID,nqn=$KV_NVME_NQN${1:+,$1}"
	KV_NVME_INSTANCE=
	kv_nvme_modprobe nvme-rdma || return 1
	[ -c /dev/nvme-fabrics ] || { kv_msg "no /dev/nvme-fabrics: CONFIG_NVME_RDMA?"; return 1; }
	exec {fd}<>/dev/nvme-fabrics || return 1
	if ! printf '%s' "$opts" >&"$fd"; then
		kv_msg "/dev/nvme-fabrics refused '$opts'"
		exec {fd}>&-
		return 1
	fi
	read -r line <&"$fd"
	exec {fd}>&-
	[[ $line =~ ^instance=([0-9]+),cntlid=([0-9]+)$ ]] ||
		{ kv_msg "/dev/nvme-fabrics answered '$line'"; return 1; }
	KV_NVME_INSTANCE=${BASH_REMATCH[1]}
}

# kv_nvme_connect [OPTIONS]: kverbs_nvme (loaded) connected to the
# fixture's target through its connect file, with OPTIONS (a,b=c) too;
# KV_NVME_INST its controller's instance (kvnvme<N>), as the file answers.
# shellcheck disable=SC2120 # OPTIONS is optional
kv_nvme_connect() {
	# shellcheck disable=SC2153 # KV_NVME is kverbs_lib.sh's, sourced first
	local kv_c=/sys/kernel/debug/$KV_NVME/connect kv_r
	KV_NVME_INST=
	printf 'transport=rdma,traddr=%s,trsvcid=%s,nqn=%s%s' "$KV_NVME_ADDR" "$KV_NVME_SVCID" \
		"$KV_NVME_NQN" "${1:+,$1}" >"$kv_c" || return 1
	kv_r=$(cat "$kv_c")
	[[ $kv_r =~ ^instance=([0-9]+)$ ]] || { kv_msg "connect: $kv_r"; return 1; }
	# shellcheck disable=SC2034 # used by the programs
	KV_NVME_INST=${BASH_REMATCH[1]}
}

# kv_nvme_c_disk NSID [HOSTNQN]: KV_NVME_C_DISK, the C host's disk of
# namespace NSID (of its controller of HOSTNQN, if given). Its name's
# number is the order the scan added it, not the NSID: the scan of two
# namespaces is asynchronous, and nvme0n1 was namespace 2 in one run.
kv_nvme_c_disk() {
	local d
	# shellcheck disable=SC2034 # used by the programs
	KV_NVME_C_DISK=
	for d in /sys/block/nvme*n*; do
		[ "$(cat "$d/nsid" 2>/dev/null)" = "$1" ] || continue
		[ -z "${2:-}" ] || [ "$(cat "$d/device/hostnqn" 2>/dev/null)" = "$2" ] || continue
		# shellcheck disable=SC2034 # used by the programs
		KV_NVME_C_DISK=/dev/${d##*/}
		return 0
	done
	return 1
}

# kv_nvme_c_disconnect [INSTANCE]: the C host's controller deleted, as
# nvme-cli's "nvme disconnect" does; waits until it is gone.
kv_nvme_c_disconnect() {
	local c=/sys/class/nvme/nvme${1:-$KV_NVME_INSTANCE}
	[ -e "$c" ] || return 0
	echo 1 >"$c/delete_controller" || return 1
	kv_wait test ! -e "$c"
}

# kv_nvme_c_disconnect_all: every controller of the C host deleted.
kv_nvme_c_disconnect_all() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ -e "$c" ] && kv_nvme_c_disconnect "${c##*/nvme}"
	done
	return 0
}

# kv_nvme_cleanup: the fixture gone: hosts disconnected, target removed.
kv_nvme_cleanup() {
	kv_nvme_c_disconnect_all
	kv_nvmet_down
}

# Where fio_run puts a job's report ($KV_FIO_OUT.NAME) and errors.
KV_FIO_OUT=/tmp/kvnvme.fio

# fio_run DEV NAME OPTION...: one fio job NAME on DEV (libaio, O_DIRECT,
# verification failures fatal, no state file), its report in $KV_FIO_OUT.NAME;
# its errors and the report's error lines shown when it fails.
fio_run() {
	local dev=$1 name=$2
	shift 2
	if ! fio --name="$name" --filename="$dev" --ioengine=libaio --direct=1 \
		--verify_fatal=1 --verify_state_save=0 --output="$KV_FIO_OUT.$name" "$@" \
		2>"$KV_FIO_OUT.$name.err"; then
		kv_msg "fio $name on $dev failed: $(grep -h -i -E 'err|bad|verify' "$KV_FIO_OUT.$name.err" "$KV_FIO_OUT.$name" | head -n 5 | tr '\n' ' ')"
		return 1
	fi
	# A job's summary: its bandwidths and IOPS, for the log.
	kv_msg "$name: $(grep -E '^ *(read|write):' "$KV_FIO_OUT.$name" | sed 's/^ *//' | tr '\n' ' ')"
}

# fio_verify DEV NAME OPTION...: the verification alone of the job of
# OPTIONS, written before (verify_only), on DEV; it must have read (fio's
# verify_only with do_verify=0 reads nothing and passes: seen, when the
# writing job's do_verify=0 was passed on).
fio_verify() {
	fio_run "$@" --verify_only=1 --do_verify=1 || return 1
	grep -q '^ *read: IOPS=[1-9]' "$KV_FIO_OUT.$2" || { kv_msg "fio $2 read nothing"; return 1; }
}

# kv_nvme_ctrls: kverbs_nvme's controllers file.
kv_nvme_ctrls() {
	cat "/sys/kernel/debug/$KV_NVME/controllers"
}

# kv_nvme_reconnects INST: the reconnections of controller kvnvme<INST>.
kv_nvme_reconnects() {
	kv_nvme_ctrls | grep "^kvnvme$1: " | sed -n 's/.*; reconnects \([0-9]*\)$/\1/p'
}

# kv_nvme_connecting INST: controller kvnvme<INST> reconnects.
kv_nvme_connecting() {
	kv_nvme_ctrls | grep -q "^kvnvme$1: connecting, "
}

# kv_nvme_fio_across_away DISK INST OFFSET SIZE DEPTH AWAY BACK: fio
# writes SIZE at random from OFFSET of DISK (64 KiB blocks, queue depth
# DEPTH) while the target goes (the command AWAY: the subsystem unlinked
# from its port) for 2 s and comes back (BACK): controller kvnvme<INST>
# reconnects once (what its I/O queue carried requeued, the writes after
# held back), the job ends without an error, and every block it wrote
# verifies, read through DISK.
kv_nvme_fio_across_away() {
	local disk=$1 inst=$2 away=$6 back=$7 pid r=0 n0
	n0=$(kv_nvme_reconnects "$inst")
	set -- --rw=randwrite --bs=64k --iodepth="$5" --offset="$3" --size="$4" --verify=crc32c --do_verify=0
	fio_run "$disk" across_reconnect "$@" &
	pid=$!
	sleep 1
	kill -0 $pid 2>/dev/null || { kv_msg "fio ended before the target went"; return 1; }
	eval "$away" || return 1
	kv_wait kv_nvme_connecting "$inst" || r=1
	sleep 2
	eval "$back" || return 1
	wait $pid || r=1
	fio_verify "$disk" across_reconnect_verified "$@" || r=1
	kv_msg "reconnects $(kv_nvme_reconnects "$inst"), requests held back" \
		"$(kv_counter "/sys/kernel/debug/$KV_NVME/controllers" "kvnvme$inst: " not_live)"
	[ "$(kv_nvme_reconnects "$inst")" = $((n0 + 1)) ] || r=1
	kv_logged "kvnvme$inst: reconnected: controller [0-9]*, live" || r=1
	return $r
}

# kv_nvme_c_cross_verify DISK OURS THEIRS SIZE DEPTH: the C host connected
# to the fixture's target, on the same namespace as DISK (kverbs_nvme's):
# fio's random 16-KiB blocks (SIZE, queue depth DEPTH) written through DISK
# at OURS pass the C host's verification, and those written through the
# C host's disk at THEIRS pass DISK's (verify_only: the same job reads and
# checks); the C host disconnected after.
kv_nvme_c_cross_verify() {
	local disk=$1 ours=$2 theirs=$3 c r=0
	kv_nvme_c_connect "" || return 1
	kv_wait kv_nvme_c_disk 1 || { kv_msg "no C host disk of namespace 1: $(ls /sys/block)"; kv_nvme_c_disconnect; return 1; }
	c=$KV_NVME_C_DISK
	kv_wait test -b "$c" || { kv_msg "no $c"; kv_nvme_c_disconnect; return 1; }
	set -- --rw=randwrite --bs=16k --iodepth="$5" --size="$4" --verify=crc32c --do_verify=0
	{ fio_run "$disk" ours_written "$@" --offset="$ours" &&
		fio_verify "$c" ours_verified_by_c "$@" --offset="$ours"; } || r=1
	{ fio_run "$c" c_written "$@" --offset="$theirs" &&
		fio_verify "$disk" c_verified_by_ours "$@" --offset="$theirs"; } || r=1
	kv_nvme_c_disconnect || return 1
	return $r
}
