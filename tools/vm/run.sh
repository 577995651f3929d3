#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# run.sh check|demo|bench
#
# Boots the kverbs test kernel in QEMU (TCG: no KVM needed, no network
# outside the guest) with an initramfs holding the freshly built modules and
# the kselftests, and runs them (check) or the demo (demo).  The console is
# printed as it comes; in check mode the KTAP totals of all tests are summed
# up into the last line, "N passed, N failed[, N skipped]", and the exit
# status is non-zero unless every test ran and none failed.

set -euo pipefail

mode=${1:-check}
top=$(cd "$(dirname "$0")/../.." && pwd)
kdir=$("$top/tools/build-kernel.sh")
ksrc=$(readlink -f "$kdir/source")
# The VM's files (initramfs, logs): one directory per kernel, so that runs
# on 6.12 and on 7.3 (KVERBS_KERNEL=7.3) do not overwrite each other's.
vm=vm
[ "${KVERBS_KERNEL:-6.12}" = 6.12 ] || vm=vm-$KVERBS_KERNEL
work=${KVERBS_VM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kverbs/$vm}
mkdir -p "$work"

# KVERBS_MODULES: the modules to put in the guest (make bench builds its
# own against the performance kernel); else the tree's: the layer and the
# modules that use it (the example, the minimal module, the self-test, the
# exerciser), and
# for check the ULP built outside the tree against them (tools/ulp_template:
# make ulp).
ulp=$top/tools/ulp_template/kverbs_ulp.ko
default_mods="$top/kverbs.ko $top/kverbs_example.ko $top/kverbs_minimal.ko $top/kverbs_selftest.ko $top/kverbs_exerciser.ko $top/kverbs_nvme.ko"
[ "$mode" = check ] && default_mods="$default_mods $ulp"
read -r -a mods <<<"${KVERBS_MODULES:-$default_mods}"
for m in "${mods[@]}"; do
	[ "$m" = "$ulp" ] && [ ! -f "$m" ] && { echo "kverbs: $m is not built (make ulp)" >&2; exit 1; }
	[ -f "$m" ] || { echo "kverbs: $m is not built (make modules)" >&2; exit 1; }
done

# The test programs: KVERBS_TESTS="a.sh b.sh" runs only those, else all of
# TEST_PROGS in the selftests' Makefile, in its order.
progs=${KVERBS_TESTS:-$(make -s --no-print-directory -C "$top/tools/testing/selftests/kverbs" print-progs)}
nprogs=$(echo "$progs" | wc -w)

initrd="$work/initramfs-$mode.cpio"
KVERBS_PROGS=$progs KVERBS_KDIR=$kdir "$top/tools/vm/mkinitramfs.sh" "$initrd" "$ksrc" "${mods[@]}" ||
	{ echo "kverbs: building the initramfs failed"; exit 1; }

log="$work/$mode.log"
# KVERBS_VM_APPEND: more of the guest's kernel command line (e.g.
# clocksource=hpet, to measure with the clock some TCG boots fall back to).
# no_timer_check: the boot's check that the IO-APIC routes the timer
# waits a fixed number of loops for its interrupt; a guest booting at a
# low priority beside others missed it and panicked ("IO-APIC + timer
# doesn't work!", 2026-11-26). KVM guests skip the check the same way.
# rcupdate.rcu_expedited=1: synchronize_rcu() waits for an expedited
# grace period. A normal one waits for every vCPU to pass a quiescent
# state, ticks apart, and a vCPU under TCG on a loaded host gets few
# ticks: module loads and unloads, netdev and RDMA device changes wait for
# several each. Measured on one vCPU (events and module, 2026-11-27): 273
# s of guest against 240 s, load_unload_20_times 56 s against 44 s. What
# the tests assert does not depend on it: RCU's guarantees are the same.
rcu="rcupdate.rcu_expedited=1"
# With kmemleak each guest ends with kverbs_kmemleak.sh, the kmemleak cases
# of the programs it ran (tools/vm/guest-init.sh): one program more a guest.
# KVERBS_KMEMLEAK=0: the guests boot without it (kmemleak=off): no scans,
# no kverbs_kmemleak.sh, no tracking of each allocation. For the harness's
# own tests of make check (tools/testing/kverbs_harness.sh), whose guests
# run programs broken on purpose: they test the reporting, never a leak
# (their two scans a guest, 10-20 s of a vCPU each, were most of their
# time).
kml=0
if [ "${KVERBS_KMEMLEAK:-1}" = 1 ] && grep -qx CONFIG_DEBUG_KMEMLEAK=y "$kdir/.config"; then
	kml=1
fi
kmemleak=kmemleak=on
[ "$kml" = 1 ] || kmemleak=kmemleak=off
append="console=ttyS0 loglevel=${KVERBS_LOGLEVEL:-4} log_buf_len=8M panic=-1 no_timer_check $kmemleak $rcu kverbs.mode=$mode${KVERBS_VM_APPEND:+ $KVERBS_VM_APPEND}"
# kverbs.smp=: the programs that run with both of the first guest's vCPUs
# online; the others run on one (tools/vm/plan-guests.sh --smp).
[ "$mode" = check ] && append="$append kverbs.smp=$("$top/tools/vm/plan-guests.sh" --smp | tr ' ' ,)"

# Two-host tests: a second VM (the peer, one vCPU: the host has two)
# joined to the guest that runs them by a QEMU socket netdev over UDP on
# 127.0.0.1, both on 169.254.10.0/24; rxe runs on each one's eth0.
# KVERBS_TWO_HOSTS=0 runs without it; a run without the programs that use
# it (kverbs_two_hosts.sh, kverbs_nvme_two_hosts.sh, kverbs_srq_manual.sh's
# last cases: PEER_PROGS in tools/vm/plan-guests.sh) does not boot it. Their NIC is virtio-net, but
# e1000 on 7.x: there virtio-net receives into a page pool, whose free
# inside rxe's irq-off QP lock stops the VM (Documentation/kverbs.rst,
# "Known RDMA core problems"); tools/build-kernel.sh adds CONFIG_E1000 to
# 7.3's kernel. e1000 takes a legacy interrupt, and the guests' ACPI
# interrupt routing (_PRT) times out under TCG (AE_AML_LOOP_TIMEOUT):
# acpi=noirq routes through the BIOS's table instead; without it the link
# never carries a packet.
vnic=virtio-net-pci vnic_append=
if [ "${KVERBS_KERNEL:-6.12}" != 6.12 ]; then
	vnic=e1000 vnic_append=" acpi=noirq"
fi

# The whole run's bound (KVERBS_VM_TIMEOUT, seconds): make check took
# 2400 s of TCG time on 2026-11-24's slower machine before its last two
# programs; 4500 keeps .ci/run (harness, check, style) within CI's 90 min.
vm_timeout=${KVERBS_VM_TIMEOUT:-4500}

# The guests' CPU model (KVERBS_VM_CPU, QEMU's -cpu) and vCPUs: the first
# (or only) guest has KVERBS_VM_SMP (QEMU's -smp, default 2), the others,
# which take only from the timed list and the queue, KVERBS_VM_SMP_QUEUE
# (default 1), the peer VM one.  Under TCG a guest of two vCPUs does far
# more host work for the same programs: four queue programs (events,
# devices, rc, srq) in two guests side by side took 378 s with two vCPUs
# each (their vCPUs busy 72 %), 250 s with one (busy 99 %), measured back
# to back on 2026-11-26.  The programs whose cases race tasks on two CPUs
# are the first guest's, and only they run on both of its vCPUs
# (tools/vm/plan-guests.sh --smp, kverbs.smp=).
# The model is QEMU's max less ERMS for make check: with ERMS the kernel
# clears a page with "rep stosb" and copies large user buffers with "rep
# movsb", which QEMU 7.2's TCG runs one byte an iteration, each iteration
# a pass through a translation block; without it (TCG's max is an AMD
# K8, family 15, so REP_GOOD stays) with "rep stosq" and "rep movsq", an
# eighth of the iterations.
# kverbs_rc.sh and kverbs_unload.sh in one guest, back to back on
# 2026-11-27: 223 s of programs with max, 205 s without ERMS (rc 152 s
# against 139 s). What runs is the same C code, KASAN's checks included.
# And less LA57 (5-level paging): with it, an interrupt that lands in
# identify_boot_cpu() while boot_cpu_data's capabilities are cleared and
# read again (identify_cpu()'s memset) finds pgtable_l5_enabled() false
# (cpu_feature_enabled(X86_FEATURE_LA57), before alternatives), so KASAN
# computes its shadow's start for 4 levels and reports the interrupt's
# access to its irq_desc, at ff11... in the 5-level direct map, as a
# "wild-memory-access" (7.3.4, in handle_edge_irq() at 0.005 s, once,
# 2026-11-27). 6.12's test kernel has no CONFIG_X86_5LEVEL; 7.x has no
# such option, its kernels use 5 levels wherever the CPU has them. The
# tests do not need them, and a TLB miss under TCG walks four levels then.
# The benchmark (bench mode) keeps max: its figures are measured on it,
# and its kernel has no KASAN.
vm_cpu_default=max
[ "$mode" = bench ] || vm_cpu_default=max,-erms,-la57
vm_cpu=${KVERBS_VM_CPU:-$vm_cpu_default}
vm_smp=${KVERBS_VM_SMP:-2}
vm_smp_queue=${KVERBS_VM_SMP_QUEUE:-1}

# guest LOG PEER_LOG APPEND [NICE [CTL [SMP]]]: boots a guest of the test
# kernel with kernel command line $append APPEND, its console to stdout, at
# niceness NICE (default 0), with SMP vCPUs (default $vm_smp); with a
# PEER_LOG, the peer VM beside it (its console there), joined to it, and
# powered off when it ends; with CTL, its second serial port (ttyS1) on the
# pipes CTL.in and CTL.out (serve).
guest() {
	local glog=$1 plog=$2 gappend="$append $3" gnice=${4:-0} gsmp=${6:-$vm_smp} p1 p2 peer_pid='' net=(-nic none) ctl=()
	[ -n "${5:-}" ] && ctl=(-serial "pipe:$5")
	if [ -n "$plog" ]; then
		p1=$((20000 + RANDOM % 20000))
		p2=$((p1 + 1))
		timeout "$vm_timeout" qemu-system-x86_64 -accel tcg -cpu "$vm_cpu" -smp 1 -m 1024 \
			-kernel "$kdir/arch/x86/boot/bzImage" -initrd "$initrd" \
			-append "console=ttyS0 loglevel=4 log_buf_len=8M panic=-1 no_timer_check $kmemleak $rcu kverbs.mode=peer kverbs.ip=169.254.10.2$vnic_append" \
			-display none -monitor none -serial stdio -no-reboot \
			-netdev "socket,id=n0,udp=127.0.0.1:$p1,localaddr=127.0.0.1:$p2" \
			-device "$vnic,netdev=n0,mac=52:54:00:10:00:02" </dev/null >"$plog" 2>&1 &
		peer_pid=$!
		net=(-netdev "socket,id=n0,udp=127.0.0.1:$p2,localaddr=127.0.0.1:$p1"
			-device "$vnic,netdev=n0,mac=52:54:00:10:00:01")
		gappend="$gappend kverbs.ip=169.254.10.1$vnic_append"
	fi
	nice -n "$gnice" timeout "$vm_timeout" qemu-system-x86_64 -accel tcg -cpu "$vm_cpu" -smp "$gsmp" -m "${KVERBS_VM_MEM:-1024}" \
		-kernel "$kdir/arch/x86/boot/bzImage" -initrd "$initrd" -append "$gappend" \
		-display none -monitor none -serial stdio "${ctl[@]}" "${net[@]}" -no-reboot </dev/null 2>&1 |
		sed -u 's/\r$//' | tee "$glog"
	if [ -n "$peer_pid" ]; then
		kill "$peer_pid" 2>/dev/null
		wait "$peer_pid" 2>/dev/null
	fi
	return 0
}

# host_ticks: the host CPUs' busy and all time so far (USER_HZ ticks).
host_ticks() {
	awk '$1 == "cpu" { b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6; exit }' /proc/stat
}

# KVERBS_BREAK=init (the harness's tests): the guest's /init exits at once
# and the kernel panics; with KVERBS_BREAK_GUEST=G, only guest G's.
break_append() {
	[ "${KVERBS_BREAK:-}" = init ] || return 0
	[ -z "${KVERBS_BREAK_GUEST:-}" ] || [ "$KVERBS_BREAK_GUEST" = "$1" ] || return 0
	echo kverbs.break=init
}

# even_priority: every guest's QEMU, each of its threads, at this
# script's own niceness (0, or the harness's 10 when it runs make check).
even_priority() {
	local p t base
	base=$(nice)
	for p in $(pgrep -f "serial pipe:$work/ctl-"); do
		for t in /proc/"$p"/task/*; do
			renice -n "$base" -p "${t##*/}" >/dev/null 2>&1
		done
	done
	return 0
}

# take LIST: the first program of the list LIST (a file in $work: timed,
# queue, last), taken out of it under a lock; nothing if it is empty.
take() {
	# shellcheck disable=SC2016 # the inner shell's own $1
	flock "$work/queue.lock" sh -c 'sed -n 1p "$1" && sed -i 1d "$1"' sh "$work/$1"
}

# serve G: gives guest G its next program (plan-guests.sh), one each time
# it asks ("next" on its second serial port, the pipes ctl-G.out and
# ctl-G.in): once the first guest's own programs are done ($work/even,
# made when it first asks, or when it ends), the timed list's first, else
# the queue's; before that the queue's only, and a guest that finds it
# empty waits for the first guest.  Once both are empty, one of the last
# programs (after which nothing may run in that guest), then an empty
# line.  Runs until killed.
serve() {
	local g=$1 req p ended=0 ev
	exec 7<>"$work/ctl-$g.out" 8<>"$work/ctl-$g.in"
	while IFS= read -r req <&7; do
		[ "${req%$'\r'}" = next ] || continue
		# The first guest's own programs are done: from now on the guests
		# share the CPUs evenly.
		((g == 1)) && [ ! -e "$work/even" ] && touch "$work/even" && even_priority
		p=
		while ((ended == 0)); do
			# Whether the timed list is open, looked at once a pass: it
			# may open between the two takes, and the lists only shrink.
			ev=0
			[ -e "$work/even" ] && ev=1
			((ev == 0)) || p=$(take timed) || p=
			[ -n "$p" ] || p=$(take queue) || p=
			[ -n "$p" ] || ((ev == 1)) || [ ! -s "$work/timed" ] || {
				command sleep 1
				continue
			}
			break
		done
		if [ -z "$p" ] && ((ended == 0)); then
			p=$(take last) || p=
			ended=1
		fi
		printf '%s\n' "$p" >&8
	done
}

# check: the programs are shared among KVERBS_GUESTS guests (default 2)
# that run side by side (tools/vm/plan-guests.sh).  Under TCG a guest of
# two vCPUs keeps 1.2-1.3 host CPUs busy (its vCPUs were busy 58-78 % of
# every program's time): two equal guests saturate a 2-CPU host, and
# cases bound in time fail (measured on 2026-11-26: Documentation/
# kverbs.rst, "Guests side by side").  So every guest runs its programs on
# one vCPU, but the first guest's programs that race tasks on two CPUs;
# the first guest is the foreground one, with those and the programs of
# the peer VM, at the host's normal priority, and the others run at nice
# 10: they take the CPU the first leaves, until the first asks for a
# program of the timed list or the queue: then every guest runs at the
# niceness of this script (0 under make check), and a guest takes the
# timed list's programs first, at a host CPU of its own.  (At nice 19 the
# second guest got so little beside the first and the harness that
# kverbs_module.sh hit its 1500 s timeout, in .ci/run of 0f28c74 on
# 2026-11-26.)  The guests take from the timed list and the queue as they
# become free, the first once its own are done: the guests end together
# however the host shares its CPUs among them (a plan made on measured
# times left the second guest running alone for the last 27 of CI's 57
# minutes, the CPU the first had left idle; measured on 2026-11-26).  Each
# guest's console goes to its own log, its result lines are shown as they
# come ("gN| "); at the end their logs are merged into one console log in
# one guest's format (tools/vm/ktap-merge.sh), printed whole, and counted
# as one run below.
guests=${KVERBS_GUESTS:-2}
[ "$guests" -ge 1 ] || guests=1
h0=$(host_ticks) t0=$SECONDS c0=$(awk '{ print $16 + $17 }' /proc/$$/stat)
mapfile -t plan < <(if [ "$mode" = check ]; then
	# shellcheck disable=SC2086 # one word a program
	"$top/tools/vm/plan-guests.sh" "$guests" $progs
else
	echo solo
fi)
timed=() queue=() last=()
for l in "${plan[@]:1}"; do
	case $l in
	timed*) read -r -a timed <<<"${l#timed}" ;;
	queue*) read -r -a queue <<<"${l#queue}" ;;
	last*) read -r -a last <<<"${l#last}" ;;
	esac
done
if [ $((${#timed[@]} + ${#queue[@]})) = 0 ]; then
	peer_log='' order=''
	[[ ${plan[0]:-} == peer* ]] && peer_log="$work/peer.log"
	# The plan's order (the last programs last), else the given one.
	[ "$mode" = check ] && order="kverbs.progs=$(echo "${plan[0]}" | cut -s -d' ' -f2- | tr ' ' ,) "
	set +e
	guest "$log" "$peer_log" "$order$(break_append 1)"
	set -e
	nprogs=$((nprogs + kml))
else
	# The first guest and as many more as the lists have programs.
	nshared=$((${#timed[@]} + ${#queue[@]}))
	((guests > nshared + 1)) && guests=$((nshared + 1))
	first=$(echo "${plan[0]}" | cut -s -d' ' -f2-)
	echo "kverbs: $guests guests side by side (tools/vm/plan-guests.sh; logs: $work/check-N.log)"
	echo "kverbs: guest 1: ${first:-no program of its own}$([[ ${plan[0]} == peer* ]] && echo ' (and the peer VM)'), then the timed list and the queue${last[*]:+; last of all, in the first guest to find both empty: ${last[*]}}"
	echo "kverbs: the timed list (longest first; any guest once guest 1's own are done): ${timed[*]:-none}"
	echo "kverbs: the queue (light programs first, each part longest first; guests 2-$guests at nice 10 until guest 1's own are done): ${queue[*]:-none}"
	: >"$work/timed"
	: >"$work/queue"
	: >"$work/last"
	[ "${#timed[@]}" = 0 ] || printf '%s\n' "${timed[@]}" >"$work/timed"
	[ "${#queue[@]}" = 0 ] || printf '%s\n' "${queue[@]}" >"$work/queue"
	[ "${#last[@]}" = 0 ] || printf '%s\n' "${last[@]}" >"$work/last"
	rm -f "$work/even"
	pids=() servers=() merge=()
	for g in $(seq 1 "$guests"); do
		peer_log='' glist=''
		if ((g == 1)); then
			glist=$(echo "$first" | tr ' ' ,)
			[[ ${plan[0]} == peer* ]] && peer_log="$work/peer.log"
		fi
		rm -f "$work/check-$g.log" "$work/ctl-$g.in" "$work/ctl-$g.out"
		mkfifo "$work/ctl-$g.in" "$work/ctl-$g.out"
		serve "$g" &
		servers+=($!)
		{
			guest "$work/check-$g.log" "$peer_log" \
				"kverbs.progs=$glist kverbs.queue=1 $(break_append "$g")" $((g > 1 ? 10 : 0)) "$work/ctl-$g" \
				$((g > 1 ? vm_smp_queue : vm_smp)) |
				grep --line-buffered -E '^(# )?(not )?ok |^# selftests: |^kverbs-vm: |^# kverbs-time: ' |
				sed -u "s/^/g$g| /" || true
			# Should the first guest end (die) before it asks for a
			# program, the others take the timed list all the same, at
			# its priority.
			((g > 1)) || [ -e "$work/even" ] || { touch "$work/even" && even_priority; }
		} &
		pids+=($!)
	done
	wait "${pids[@]}" 2>/dev/null || true
	kill "${servers[@]}" 2>/dev/null
	wait "${servers[@]}" 2>/dev/null || true
	# Each guest named in the merge's messages by what it ran.
	for g in $(seq 1 "$guests"); do
		ran=$(sed -n 's/^# selftests: kverbs: //p' "$work/check-$g.log" | paste -sd, -)
		merge+=("$work/check-$g.log:${ran:-no program}")
	done
	[ -s "$work/timed" ] && echo "kverbs: no guest took from the timed list: $(paste -sd' ' "$work/timed")"
	[ -s "$work/queue" ] && echo "kverbs: no guest took from the queue: $(paste -sd' ' "$work/queue")"
	[ -s "$work/last" ] && echo "kverbs: no guest took the last programs: $(paste -sd' ' "$work/last")"
	rm -f "$work"/ctl-*.in "$work"/ctl-*.out "$work/timed" "$work/queue" "$work/last" "$work/queue.lock" "$work/even"
	echo "### kverbs: the guests' console logs merged, in the programs' order"
	# Should the merge itself fail, the totals below count what is in
	# $log, at worst nothing: the run fails, never passes.
	: >"$log"
	# Each guest's kverbs_kmemleak.sh after all the programs, by guest.
	order=$progs
	if [ "$kml" = 1 ]; then
		for g in $(seq 1 "$guests"); do
			order="$order kverbs_kmemleak.sh@$g"
		done
		nprogs=$((nprogs + guests))
	fi
	"$top/tools/vm/ktap-merge.sh" "$log" "$order" "${merge[@]}" ||
		echo "kverbs: merging the guests' console logs failed (status $?)"
	cat "$log"
fi

# What the guests took of the host: the CPU time of this script's waited
# for children (QEMU; /proc/PID/stat's cutime and cstime, in ticks) against
# the host's CPUs' time while they ran, and how busy those CPUs were in
# all (other work counted too: a kernel built beside, the harness).
host_use="kverbs-time: the guests ran $((SECONDS - t0)) s and took $(echo "$h0 $(host_ticks) $(awk '{ print $16 + $17 }' /proc/$$/stat)" |
	awk -v c0="$c0" '{ printf "%d %% of the host CPUs, which were %d %% busy", \
		(($4 - $2) > 0 ? 100 * ($5 - c0) / ($4 - $2) + 0.5 : 0), (($4 - $2) > 0 ? 100 * ($3 - $1) / ($4 - $2) + 0.5 : 0) }')"
[ "$mode" = check ] || {
	grep -q '^kverbs-vm: done$' "$log" && exit 0
	echo "kverbs: the VM did not finish (crash or timeout); console log: $log"
	exit 1
}

# The KTAP totals of the test programs, each program's time, and a line for
# everything that kept a test from running (tools/vm/ktap-totals.sh).
# Under CI (CI=true) a program that skipped itself fails unless the user
# asked for the skip: KVERBS_TWO_HOSTS=0 asks for kverbs_two_hosts.sh's and
# kverbs_nvme_two_hosts.sh's, and
# KVERBS_SKIP_ASKED may name more.
asked=${KVERBS_SKIP_ASKED:-}
[ "${KVERBS_TWO_HOSTS:-1}" = 1 ] || asked="${asked:+$asked }kverbs_two_hosts.sh kverbs_nvme_two_hosts.sh"
echo "### kverbs: test programs (console log: $log)"
echo "$host_use"
KVERBS_SKIP_ASKED=$asked exec "$top/tools/vm/ktap-totals.sh" "$log" "$nprogs"
