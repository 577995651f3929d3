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

# ring_total: RING_TOTAL, the events the example's ring has counted.
ring_total() {
	local first
	read -r first <"$EV"
	[[ $first =~ ^events:\ ([0-9]+) ]] || return 1
	RING_TOTAL=${BASH_REMATCH[1]}
}

ring_total_at_least() {
	ring_total && [ "$RING_TOTAL" -ge "$1" ]
}

# 40 down/up cycles: 80 more events than the ring keeps; it shows the
# newest 64 and counts the dropped. One ip process makes the 80 changes
# (80 took 16 s of a vCPU under TCG), and the netdev has no IPv6 from
# here on: its link-local address, made at each up, is no event of the
# port's (2026-11-28: the case took 41 s, the most of the program).
ring_bounded() {
	local total dropped lines before ev
	ring_total || return 1
	before=$RING_TOTAL
	if [ -e /proc/sys/net/ipv6/conf/$NET/disable_ipv6 ]; then
		echo 1 >/proc/sys/net/ipv6/conf/$NET/disable_ipv6 || return 1
	fi
	for _ in {1..40}; do
		echo "link set $NET down"
		echo "link set $NET up"
	done | ip -batch - || return 1
	# Events are delivered from a workqueue: wait for the 80 of the port.
	kv_wait ring_total_at_least $((before + 80)) || { kv_msg "events: $RING_TOTAL, were $before"; return 1; }
	# One read of the file: events may still come (GID changes of the
	# address added above, from their own workqueue).
	mapfile -t ev <"$EV"
	[[ ${ev[0]} =~ ^events:\ ([0-9]+)\ \(([0-9]+)\ dropped\)$ ]] || { kv_msg "first line: ${ev[0]}"; return 1; }
	total=${BASH_REMATCH[1]} dropped=${BASH_REMATCH[2]} lines=$((${#ev[@]} - 1))
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
