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
ip link set lo up

mode=check
read -r cmdline </proc/cmdline
for arg in $cmdline; do
	case "$arg" in
	kverbs.mode=*) mode=${arg#kverbs.mode=} ;;
	kverbs.ip=*) ip=${arg#kverbs.ip=} ;;
	esac
done

# Two-host runs: eth0 joins the other VM on a link-local subnet.
if [ -n "${ip:-}" ] && [ -e /sys/class/net/eth0 ]; then
	ip addr add "$ip/24" dev eth0
	ip link set eth0 up
fi

# Leaks from boot are not ours: mark what kmemleak would report now as seen.
if [ -e /sys/kernel/debug/kmemleak ]; then
	echo scan >/sys/kernel/debug/kmemleak
	echo clear >/sys/kernel/debug/kmemleak
fi

run_check() {
	cd /kselftest/kverbs || return 1
	progs=$(cat TEST_PROGS)
	timeout=$(sed -n 's/^timeout=//p' settings)
	n=0
	for p in $progs; do n=$((n + 1)); done
	echo "TAP version 13"
	echo "1..$n"
	i=0
	for p in $progs; do
		i=$((i + 1))
		echo "# selftests: kverbs: $p"
		t0=$(cut -d' ' -f1 /proc/uptime)
		{
			timeout "${timeout:-300}" ./"$p" 2>&1
			echo $? >/tmp/rc
		} | sed 's/^/# /'
		rc=$(cat /tmp/rc 2>/dev/null || echo 1)
		rm -f /tmp/rc
		echo "# kverbs-time: $p $(awk -v t0="$t0" '{ printf "%.1f", $1 - t0 }' /proc/uptime)"
		if [ "$rc" = 0 ]; then
			echo "ok $i selftests: kverbs: $p"
		elif [ "$rc" = 4 ]; then
			echo "ok $i selftests: kverbs: $p # SKIP"
		else
			echo "not ok $i selftests: kverbs: $p # exit=$rc"
		fi
	done
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
