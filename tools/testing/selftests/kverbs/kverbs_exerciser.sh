#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The exerciser (kverbs_exerciser.ko, samples/kverbs_exerciser/, safe
# Rust): seeded random sequences of the layer's safe calls over a pool of
# live objects of every kind, of two devices, dropped in random orders; in
# one worker and in four at once, while a device is removed, and after the
# layer and the exerciser were unloaded and loaded again. Every call must
# succeed or return an errno, none that the layer must refuse may be
# accepted ("violations 0"), and the kernel must log no report (each case)
# nor leak (kmemleak, at the end). make stress runs further seeds for its
# budget (EXERCISER_MINUTES, default 30).
#
# The seeds are fixed: a failure names its seed, and the write that broke
# replays it (echo "SEED STEPS [THREADS]" >/sys/kernel/debug/kverbs_exerciser/run).

# shellcheck source=kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"

RUN=/sys/kernel/debug/kverbs_exerciser/run
# make stress: seconds of further seeds from the stress seed on (none in
# make check).
SECONDS_MORE=0 FIRST_SEED=100
if [ -f /kverbs/stress ]; then
	SECONDS_MORE=$(cat /kverbs/exerciser_seconds 2>/dev/null || echo 1800)
	FIRST_SEED=$(cat /kverbs/stress)
fi

load() {
	kv_load_layer || return 1
	kv_mod_loaded "$KV_EXERCISER" || insmod "$KV_MODDIR/$KV_EXERCISER.ko"
}

setup() {
	kv_dummy_up || return 1
	kv_rxe_add rxe_lo lo || return 1
	kv_rxe_add rxe_dummy dummy0 || return 1
	load
}

# report_field NAME: the number after NAME in the last run's report.
report_field() {
	tr ' ' '\n' <"$RUN" | awk -v k="$1" 'p { print; exit } $0 == k { p = 1 }'
}

# exercise "SEED STEPS [THREADS]" MIN_CALLS: one run; it passes if the write
# succeeds, on two devices, with at least MIN_CALLS calls, some accepted and
# some refused (else the run proved little), and no violation; and if every
# object the run made gave back its reference to kverbs.ko (its refcount
# after the run as before: rust/kverbs/layer_ref.rs).
exercise() {
	local calls ok refs
	kv_msg "run: $1"
	refs=$(kv_layer_refs)
	printf '%s' "$1" >"$RUN" || { kv_msg "the run of '$1' failed"; return 1; }
	[ "$(kv_layer_refs)" = "$refs" ] ||
		{ kv_msg "kverbs.ko's refcount: $refs before the run, $(kv_layer_refs) after"; return 1; }
	kv_diag <"$RUN"
	grep -q "^seed .* devices 2$" "$RUN" || { kv_msg "not run on two devices"; return 1; }
	calls=$(report_field calls) ok=$(report_field ok)
	[ "${calls:-0}" -ge "$2" ] || { kv_msg "$calls calls, want at least $2"; return 1; }
	if [ "${ok:-0}" -eq 0 ] || [ "$ok" -ge "$calls" ]; then
		kv_msg "$ok of $calls calls accepted: want some of each"
		return 1
	fi
	[ "$(report_field violations)" = 0 ] || { kv_msg "the layer accepted what it must refuse"; return 1; }
}

one_worker() {
	exercise "1 12000" 4000
}

four_workers() {
	exercise "2 3000 4" 4000
}

# A removal while a run of two workers holds the device: it waits for the
# run, which ends as any other.
device_removed_during_run() {
	local pid r=0
	kv_msg "run: 3 6000 2, rxe_dummy removed during it"
	(printf '%s' "3 6000 2" >"$RUN") &
	pid=$!
	sleep 1
	kv_rxe_del rxe_dummy || { kv_msg "removing rxe_dummy failed"; r=1; }
	wait "$pid" || { kv_msg "the run failed"; r=1; }
	kv_diag <"$RUN"
	[ "$(report_field violations)" = 0 ] || { kv_msg "the layer accepted what it must refuse"; r=1; }
	kv_rxe_add rxe_dummy dummy0 || { kv_msg "adding rxe_dummy again failed"; r=1; }
	return $r
}

# The exerciser and the layer unloaded and loaded again between two runs.
reloaded_between_runs() {
	exercise "4 1500" 300 || return 1
	if ! rmmod "$KV_EXERCISER" || ! kv_unload_layer; then
		kv_msg "unloading failed"
		return 1
	fi
	load || { kv_msg "loading again failed"; return 1; }
	exercise "5 1500" 300
}

bad_input() {
	kv_write_fails "$RUN" "x" "Invalid argument" "bad SEED" || return 1
	kv_write_fails "$RUN" "1" "Invalid argument" "bad STEPS" || return 1
	kv_write_fails "$RUN" "1 10000001" "Invalid argument" "bad STEPS" || return 1
	kv_write_fails "$RUN" "1 10 9" "Invalid argument" "bad THREADS" || return 1
	kv_write_fails "$RUN" "1 10 0" "Invalid argument" "THREADS must be 1 to 8" || return 1
	kv_write_fails "$RUN" "1 10 1 sideways" "Invalid argument" "bad THREADS" || return 1
	kv_rxe_del_all
	kv_write_fails "$RUN" "1 10" "No such device" "no RDMA device"
	local r=$?
	kv_rxe_add rxe_lo lo && kv_rxe_add rxe_dummy dummy0 || return 1
	return $r
}

# make stress: further seeds, two workers each, for SECONDS_MORE seconds;
# each run's report is in the log, and a failure names its seed.
more_seeds() {
	local t0 seed=$FIRST_SEED runs=0 calls=0 made=0
	t0=$(cut -d. -f1 /proc/uptime)
	while [ $(($(cut -d. -f1 /proc/uptime) - t0)) -lt "$SECONDS_MORE" ]; do
		exercise "$seed 5000 2" 1 || { kv_msg "seed $seed broke it"; return 1; }
		runs=$((runs + 1)) calls=$((calls + $(report_field calls)))
		made=$((made + $(report_field made)))
		seed=$((seed + 2))
	done
	kv_msg "summary: $runs runs (seeds $FIRST_SEED to $((seed - 2)), 2 workers of 5000 steps each), $calls calls, $made objects made, violations 0, in $(($(cut -d. -f1 /proc/uptime) - t0)) s"
}

# The layer names each call it refuses in the kernel log (thousands a run),
# at KERN_ERR: kept off the serial console while this program runs (the
# cases still read the whole log), and the console's level restored after.
CONSOLE_LEVEL=$(cut -f1 /proc/sys/kernel/printk)
trap 'echo "$CONSOLE_LEVEL" >/proc/sys/kernel/printk' EXIT
echo 3 >/proc/sys/kernel/printk

kv_begin 8
kv_case setup_rxe_lo_rxe_dummy_and_load setup
kv_case exerciser_seed_1_one_worker one_worker
kv_case exerciser_seed_2_four_workers four_workers
kv_case exerciser_seed_3_device_removed_during_run device_removed_during_run
kv_case exerciser_seeds_4_5_layer_reloaded_between_runs reloaded_between_runs
kv_case bad_input_exerciser_run bad_input
if [ "$SECONDS_MORE" -gt 0 ]; then
	kv_case exerciser_more_seeds_for_a_stress_budget more_seeds
else
	kv_msg "exerciser_more_seeds_for_a_stress_budget: make stress only"
	ktap_test_skip exerciser_more_seeds_for_a_stress_budget
fi
kv_end
