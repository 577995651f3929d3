#!/bin/busybox sh
# shellcheck shell=dash
# SPDX-License-Identifier: GPL-2.0
#
# /init of the kverbs test VM.  Mounts what the tests need, then, by the
# kernel command line:
#   kverbs.mode=check  runs the kverbs kselftests, kselftest style: a KTAP
#                      header, each test's KTAP output behind "# ", and one
#                      result line per test program;
#   kverbs.mode=demo   creates soft-RoCE devices, loads the layer and the
#                      example module and shows what it found;
#   kverbs.mode=bench  runs the benchmark (tools/bench/guest-bench.sh);
# and powers the VM off.

/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
export HOME=/root

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t debugfs debugfs /sys/kernel/debug
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /dev/pts /dev/shm
# What udev and systemd-tmpfiles make on other systems: bash's process
# substitution (<(...)) needs /dev/fd.
ln -s /proc/self/fd /dev/fd
ln -s /proc/self/fd/0 /dev/stdin
ln -s /proc/self/fd/1 /dev/stdout
ln -s /proc/self/fd/2 /dev/stderr
ip link set lo up

mode=check
read -r cmdline </proc/cmdline
for arg in $cmdline; do
	case "$arg" in
	kverbs.mode=*) mode=${arg#kverbs.mode=} ;;
	kverbs.ip=*) ip=${arg#kverbs.ip=} ;;
	kverbs.progs=*) progs_arg=${arg#kverbs.progs=} ;;
	kverbs.queue=1) queue=1 ;;
	kverbs.smp=*) smp_progs=$(echo "${arg#kverbs.smp=}" | tr , ' ') ;;
	kverbs.break=init) exit 1 ;; # the harness's tests: a guest that dies
	kmemleak=off) kmemleak_off=1 ;; # tools/vm/run.sh, KVERBS_KMEMLEAK=0
	esac
done
# kmemleak: built in, and not turned off (its debugfs file is there even
# then, refusing what is written to it).
kmemleak=0
[ -z "${kmemleak_off:-}" ] && [ -e /sys/kernel/debug/kmemleak ] && kmemleak=1
# Turned off, the programs have no kmemleak case (kverbs_lib.sh, kv_begin).
[ -n "${kmemleak_off:-}" ] && export KV_NO_KMEMLEAK=1

# Two-host runs: eth0 joins the other VM on a link-local subnet.
if [ -n "${ip:-}" ] && [ -e /sys/class/net/eth0 ]; then
	ip addr add "$ip/24" dev eth0
	ip link set eth0 up
fi

# Leaks from boot are not ours: mark what kmemleak would report now as seen
# (one scan reports only what an earlier scan took the checksum of: the
# boot's leaks not reported here are the first program's, as they always
# were). Its own thread's scans (60 s after boot, then every 600 s: 10-20 s
# of a vCPU each under TCG) are stopped: the programs' checks scan
# (kverbs_kmemleak.sh, after the last program), and a scan in the middle of
# a case only slows it.
if [ "$kmemleak" = 1 ]; then
	echo scan=off >/sys/kernel/debug/kmemleak
	echo scan >/sys/kernel/debug/kmemleak
	echo clear >/sys/kernel/debug/kmemleak
fi

# cpu_ticks: the vCPUs' busy and idle time so far (USER_HZ ticks, all
# CPUs) and the processes made: "busy idle user procs", idle counting
# iowait, user (and nice) the part of busy spent in user space (the test
# programs' shells and tools), procs the forks since boot.
cpu_ticks() {
	awk '$1 == "cpu" { b = $2 + $3 + $4 + $7 + $8 + $9; i = $5 + $6; u = $2 + $3 }
		$1 == "processes" { print b, i, u, $2; exit }' /proc/stat
}

# The test programs: kverbs.progs=a.sh,b.sh on the command line (one guest
# of several, tools/vm/run.sh), else all of TEST_PROGS; with kverbs.queue=1
# then the programs run.sh gives this guest one at a time on its second
# serial port (ttyS1): it writes "next", and reads a program's name, or an
# empty line when the programs of every guest are given out.  The KTAP plan
# comes first when the programs are known, else last.  After each
# program a line of where its time went: "# kverbs-time: PROG SECONDS
# busy PCT slept SECONDS user PCT procs N": the vCPUs' busy share of the time (the
# work; the rest is waiting: sleeps, polls, timeouts, TCG wake-ups), the
# seconds its shell slept (kverbs_lib.sh's sleep, in /tmp/kverbs-slept),
# the share of the work done in user space (shells, tools, peers; the rest
# is the kernel's), and the processes it made (under TCG a fork and an
# exec cost 0.07-0.2 s of a vCPU).
run_check() {
	cd /kselftest/kverbs || return 1
	progs=$(cat TEST_PROGS)
	[ -n "${progs_arg+set}" ] && progs=$(echo "$progs_arg" | tr , ' ')
	timeout=$(sed -n 's/^timeout=//p' settings)
	# The programs' kmemleak cases, deferred to this guest's last program
	# (kverbs_lib.sh, kv_kmemleak_deferred): each program writes its
	# window there.
	kml=0
	if [ "$kmemleak" = 1 ]; then
		kml=1
		export KV_KMEMLEAK_WINDOWS=/tmp/kverbs-kmemleak-windows
		rm -f "$KV_KMEMLEAK_WINDOWS" "$KV_KMEMLEAK_WINDOWS.cleared"
	fi
	echo "kverbs-boot: $(cut -d' ' -f1 /proc/uptime) s"
	echo "TAP version 13"
	if [ "${queue:-0}" = 1 ]; then
		exec 3<>/dev/ttyS1 || return 1
		stty -F /dev/ttyS1 raw -echo || return 1
	else
		n=$kml
		for p in $progs; do n=$((n + 1)); done
		echo "1..$n"
	fi
	i=0
	for p in $progs; do
		run_prog "$p"
	done
	while [ "${queue:-0}" = 1 ]; do
		echo next >&3
		read -r p <&3 || break
		[ -n "$p" ] || break
		run_prog "$p"
	done
	# After the last program, whatever ran: the programs' kmemleak cases
	# (tools/vm/run.sh counts one such program a guest).
	[ "$kml" = 1 ] && run_prog kverbs_kmemleak.sh
	[ "${queue:-0}" = 1 ] && echo "1..$i"
	return 0
}

# vcpus_for PROG: with kverbs.smp=A,B (tools/vm/plan-guests.sh --smp),
# every vCPU online for the programs named there, only the first for the
# others: an idle vCPU costs the host little, but one that runs doubles
# TCG's cross-vCPU work (a vCPU spinning on a lock whose holder's vCPU
# the host is not running), and the host has two CPUs for all the guests.
vcpus_for() {
	[ -n "${smp_progs+set}" ] || return 0
	want=0
	for s in $smp_progs; do
		[ "$s" = "$1" ] && want=1
	done
	for c in /sys/devices/system/cpu/cpu[1-9]*/online; do
		[ -e "$c" ] || continue
		[ "$(cat "$c")" = "$want" ] && continue
		echo "$want" >"$c" || echo "# kverbs: $c: could not write $want"
	done
}

# run_prog PROG: runs test program PROG, its output behind "# ", then its
# time line and its result line (number $i).
run_prog() {
	p=$1
	i=$((i + 1))
	vcpus_for "$p"
	echo "# selftests: kverbs: $p"
	t0=$(cut -d' ' -f1 /proc/uptime)
	c0=$(cpu_ticks)
	rm -f /tmp/kverbs-slept
	{
		timeout "${timeout:-300}" ./"$p" 2>&1
		echo $? >/tmp/rc
	} | sed 's/^/# /'
	rc=$(cat /tmp/rc 2>/dev/null || echo 1)
	rm -f /tmp/rc
	slept=$(awk '{ s += $1 } END { printf "%.1f", s }' /tmp/kverbs-slept 2>/dev/null)
	echo "# kverbs-time: $p $(awk -v t0="$t0" '{ printf "%.1f", $1 - t0 }' /proc/uptime)" \
		"$(echo "$c0 $(cpu_ticks)" | awk -v slept="${slept:-0.0}" '{ b = $5 - $1; t = b + $6 - $2; u = $7 - $3
			printf "busy %d slept %s user %d procs %d", (t > 0 ? 100 * b / t + 0.5 : 0), slept,
				(b > 0 ? 100 * u / b + 0.5 : 0), $8 - $4 }')"
	if [ "$rc" = 0 ]; then
		echo "ok $i selftests: kverbs: $p"
	elif [ "$rc" = 4 ]; then
		echo "ok $i selftests: kverbs: $p # SKIP"
	else
		echo "not ok $i selftests: kverbs: $p # exit=$rc"
	fi
}

# The other VM of two-host tests: rxe on eth0, the modules loaded, and a
# command server the tests drive (tools/vm/peer-cmd.sh) until powered off.
run_peer() {
	rdma link add rxe_eth type rxe netdev eth0
	insmod /kverbs/kverbs.ko
	insmod /kverbs/kverbs_example.ko
	echo "kverbs-peer: ready"
	nc -ll -p 7000 -e /kverbs/peer-cmd.sh
}

run_demo() {
	/kverbs/demo.sh
}

case "$mode" in
check) run_check ;;
demo) run_demo ;;
bench) /kverbs/bench.sh ;;
peer) run_peer ;;
*) echo "kverbs: unknown mode '$mode'" ;;
esac
echo "kverbs-vm: done"
sync
poweroff -f
