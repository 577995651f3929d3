#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The `info` file of each device says what rdma-core's `ibv_devinfo -v` and
# iproute2's `rdma link` say of the same device, and follows the device's
# state as it changes (port down/up, a new address giving a new GID).

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

DEV_KEYS="hca_id fw_ver node_guid sys_image_guid vendor_id vendor_part_id
	hw_ver phys_port_cnt max_mr_size page_size_cap max_qp max_qp_wr
	device_cap_flags max_sge max_cq max_cqe max_mr max_pd max_qp_rd_atom
	max_qp_init_rd_atom max_srq max_mcast_grp max_mcast_qp_attach max_ah
	max_pkeys"
PORT_KEYS="state max_mtu active_mtu sm_lid port_lid max_msg_sz gid_tbl_len
	pkey_tbl_len phys_state link_layer"

# "key:<blanks>value" lines, trimmed, blanks squeezed.
normalize() {
	sed -E 's/^[[:space:]]+//; s/[[:space:]]+/ /g; s/ $//'
}

value() {
	grep -m1 "^$1: " | sed "s/^$1: //"
}

# compare_devinfo DEV: every field of DEV_KEYS and PORT_KEYS is shown by
# both and equal, and the GID tables are equal.
compare_devinfo() {
	local dev=$1 theirs
	theirs=$(ibv_devinfo -v -d "$dev") || return 1
	[ -n "$theirs" ] || { kv_msg "ibv_devinfo -d $dev printed nothing"; return 1; }
	echo "$theirs" | normalize >"/tmp/devinfo.$dev"
	normalize <"$KV_DEBUGFS/$dev/info" | awk -v keys="$DEV_KEYS $PORT_KEYS" -v dev="$dev" '
		function val(line) { sub(/^[^:]*: /, "", line); return line }
		FNR == NR { k = $1; sub(/:$/, "", k); if (!(k in ours)) ours[k] = val($0)
			    if ($0 ~ /^GID\[/) gid_ours[$0] = 1; next }
		{ k = $1; sub(/:$/, "", k); if (!(k in theirs)) theirs[k] = val($0)
		  if ($0 ~ /^GID\[/) gid_theirs[$0] = 1 }
		END {
			n = split(keys, key, /[ \t\n]+/)
			for (i = 1; i <= n; i++) {
				if (key[i] == "") continue
				if (!(key[i] in ours) || ours[key[i]] != theirs[key[i]]) {
					printf "# %s %s: info \"%s\", ibv_devinfo \"%s\"\n", dev, key[i], ours[key[i]], theirs[key[i]]
					bad = 1
				}
			}
			for (g in gid_ours) if (!(g in gid_theirs)) { print "# only in info: " g; bad = 1; ng++ }
			for (g in gid_theirs) if (!(g in gid_ours)) { print "# only in ibv_devinfo: " g; bad = 1 }
			for (g in gid_ours) ng++
			if (!ng) { print "# no GID shown"; bad = 1 }
			exit bad
		}' - "/tmp/devinfo.$dev"
}

# compare_rdma_link DEV NETDEV: state, physical state and netdev.
compare_rdma_link() {
	local dev=$1 ndev=$2 link ours
	link=$(rdma link show "$dev/1")
	ours=$(normalize <"$KV_DEBUGFS/$dev/info")
	kv_msg "$link"
	grep -qE "state ${3:-ACTIVE} physical_state LINK_UP netdev $ndev *\$" <<<"$link" ||
		{ kv_msg "unexpected rdma link output"; return 1; }
	[ "$(echo "$ours" | value state)" = "PORT_${3:-ACTIVE} (4)" ] || return 1
	[ "$(echo "$ours" | value phys_state)" = "LINK_UP (5)" ] || return 1
	[ "$(echo "$ours" | value netdev)" = "$ndev" ] || { kv_msg "netdev: $(echo "$ours" | value netdev)"; return 1; }
}

setup() {
	kv_dummy_up && kv_rxe_add rxe_lo lo && kv_rxe_add rxe_dummy dummy0 && kv_load
}

port_state_is() {
	normalize <"$KV_DEBUGFS/rxe_dummy/info" | grep -qx "state: $1"
}

follows_port_state() {
	ip link set dummy0 down || return 1
	kv_wait port_state_is "PORT_DOWN (1)" || { kv_msg "info never showed PORT_DOWN"; return 1; }
	ibv_devinfo -d rxe_dummy | normalize | grep -qx "state: PORT_DOWN (1)" ||
		{ kv_msg "ibv_devinfo disagrees"; return 1; }
	ip link set dummy0 up || return 1
	kv_wait port_state_is "PORT_ACTIVE (4)" || { kv_msg "info never showed PORT_ACTIVE again"; return 1; }
	compare_devinfo rxe_dummy
}

has_gid() {
	grep -q "$1, RoCE v2" "$KV_DEBUGFS/rxe_dummy/info"
}

shows_new_gid() {
	! has_gid ::ffff:169.254.1.7 || { kv_msg "GID there before the address"; return 1; }
	ip addr add 169.254.1.7/24 dev dummy0 || return 1
	kv_wait has_gid ::ffff:169.254.1.7 || { kv_msg "new GID never shown"; return 1; }
	compare_devinfo rxe_dummy || return 1
	ip addr del 169.254.1.7/24 dev dummy0 || return 1
	kv_wait eval '! has_gid ::ffff:169.254.1.7' || { kv_msg "GID still shown after the address went"; return 1; }
}

kv_begin 8
kv_case setup_rxe_lo_rxe_dummy_and_load setup
kv_case info_matches_ibv_devinfo_rxe_lo compare_devinfo rxe_lo
kv_case info_matches_ibv_devinfo_rxe_dummy compare_devinfo rxe_dummy
kv_case info_matches_rdma_link_rxe_lo compare_rdma_link rxe_lo lo
kv_case info_matches_rdma_link_rxe_dummy compare_rdma_link rxe_dummy dummy0
kv_case info_follows_port_down_and_up follows_port_state
kv_case info_shows_gid_of_new_address shows_new_gid
kv_end
