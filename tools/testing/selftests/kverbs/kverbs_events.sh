#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Asynchronous events: the example registers an event handler per device
# (ib_register_event_handler) and keeps what comes in its `events` file, a
# bounded ring. rxe raises port error and port active when its netdev goes
# down and up; the core raises GID changed when an address is added.

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

NET=kvev0
EV=$KV_DEBUGFS/rxe_ev/events

setup() {
	ip link add $NET type dummy || return 1
	ip link set $NET up || return 1
	kv_rxe_add rxe_ev $NET || return 1
	kv_load || return 1
	kv_diag <"$EV"
	grep -q "^events: " "$EV"
}


# The netdev goes down: "port 1: port error"; up: "port 1: port active",
# in that order, each once more than before, and logged.
port_error_then_active() {
	kv_port_down_up $NET "$EV" || return 1
	kv_diag <"$EV"
	tail -n 1 "$EV" | grep -q "port 1: port active$" || return 1
	kv_logged "rxe_ev: event: port 1: port error" && kv_logged "rxe_ev: event: port 1: port active"
}

# An IPv4 address on the netdev adds a RoCE GID: "GID changed".
gid_change_on_address() {
	local n
	n=$(grep -c "port 1: GID changed$" "$EV")
	ip addr add 10.77.0.1/24 dev $NET || return 1
	kv_wait kv_count_over "$EV" "port 1: GID changed$" "$n" || { kv_diag <"$EV"; return 1; }
	grep -q "::ffff:10.77.0.1" "$KV_DEBUGFS/rxe_ev/info" || { kv_msg "no GID for the address"; return 1; }
}

# 40 down/up cycles: 80 more events than the ring keeps; it shows the
# newest 64 and counts the dropped.
ring_bounded() {
	local total dropped lines
	for _ in {1..40}; do
		ip link set $NET down && ip link set $NET up || return 1
	done
	# Events are delivered from a workqueue: let the last ones come.
	sleep 2
	total=$(sed -n '1s/^events: \([0-9]*\) .*/\1/p' "$EV")
	dropped=$(sed -n '1s/^events: [0-9]* (\([0-9]*\) dropped)$/\1/p' "$EV")
	lines=$(($(wc -l <"$EV") - 1))
	kv_msg "events: $total, $dropped dropped, $lines shown"
	[ "$total" -ge 80 ] && [ "$lines" = 64 ] && [ "$dropped" = $((total - 64)) ]
}

# Events come while files are read and the device goes: no report.
removal_with_events() {
	ip link set $NET down
	kv_rxe_del rxe_ev || return 1
	[ ! -e "$EV" ] || return 1
	ip link set $NET up
	kv_rxe_add rxe_ev $NET || return 1
	kv_wait [ -r "$EV" ] || return 1
	kv_unload && kv_load
}

kv_begin 6
kv_case setup_rxe_on_dummy_and_load setup
kv_case events_port_error_then_active_on_netdev_down_up port_error_then_active
kv_case events_gid_change_on_address_added gid_change_on_address
kv_case events_ring_keeps_newest_64_counts_dropped ring_bounded
kv_case events_device_removed_and_readded removal_with_events
ip link del $NET 2>/dev/null
kv_end
