#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# What `make run` shows inside the test VM: soft-RoCE devices are created,
# the layer (kverbs.ko) and the example module are loaded and the example
# says what it found.

set -u
step() {
	echo
	echo "### $*"
}
run() {
	echo "\$ $*"
	"$@"
}

step "Soft-RoCE (rdma_rxe) on lo and on dummy0"
[ -e /sys/class/net/dummy0 ] || ip link add dummy0 type dummy
ip addr add 169.254.1.1/24 dev dummy0
ip link set dummy0 up
run rdma link add rxe_lo type rxe netdev lo
run rdma link add rxe_dummy type rxe netdev dummy0
run rdma link show

step "Load the kverbs layer and the example module"
run insmod /kverbs/kverbs.ko
run insmod /kverbs/kverbs_example.ko
dmesg | grep kverbs_example
run cat /sys/kernel/kverbs_example/devices

step "What the module shows of each device"
for f in /sys/kernel/debug/kverbs_example/*/info; do
	run cat "$f"
done

step "The RC example (RDMA_RC_example's flow) between two QPs of rxe_lo"
echo "\$ echo role=loopback,validate > /sys/kernel/debug/kverbs_example/rxe_lo/rc"
echo role=loopback,validate >/sys/kernel/debug/kverbs_example/rxe_lo/rc
run cat /sys/kernel/debug/kverbs_example/rxe_lo/rc

step "The same with 1 MiB buffers, 4096-byte MTU, 5 iterations"
echo "\$ echo role=loopback,size=1048576,mtu=4096,iters=5,validate > .../rxe_lo/rc"
echo role=loopback,size=1048576,mtu=4096,iters=5,validate >/sys/kernel/debug/kverbs_example/rxe_lo/rc
run cat /sys/kernel/debug/kverbs_example/rxe_lo/rc
run cat /sys/kernel/debug/kverbs_example/rxe_lo/stats

step "Kernel server, userspace client (tools/rc_peer, RDMA_RC_example's protocol)"
echo "\$ echo role=server,validate > .../rxe_lo/rc &"
echo role=server,validate >/sys/kernel/debug/kverbs_example/rxe_lo/rc &
sleep 1
run rc_peer -d rxe_lo -g 1 -v 127.0.0.1
wait
run cat /sys/kernel/debug/kverbs_example/rxe_lo/rc

step "Multicast (mckey's example): 2 receiver QPs and a sender on rxe_dummy"
ip link set dummy0 multicast on
echo "\$ echo role=both,group=239.1.1.1,qps=2,count=10 > .../rxe_dummy/mcast"
echo role=both,group=239.1.1.1,qps=2,count=10 >/sys/kernel/debug/kverbs_example/rxe_dummy/mcast
run cat /sys/kernel/debug/kverbs_example/rxe_dummy/mcast

step "Atomics: 10 fetch-and-adds and 2 compare-and-swaps in the RC example"
echo "\$ echo role=loopback,size=64,atomics=10,validate > .../rxe_lo/rc"
echo role=loopback,size=64,atomics=10,validate >/sys/kernel/debug/kverbs_example/rxe_lo/rc
run grep -E "^atomics|^result" /sys/kernel/debug/kverbs_example/rxe_lo/rc

step "SRQ (the manual's srq.c): kernel server, 4 QPs on one SRQ; tools/srq_peer as client"
echo "\$ echo role=server,addr=169.254.1.1,qps=4,max_wr=16,count=100,size=4096,srq_limit=4 > .../rxe_dummy/srq &"
echo role=server,addr=169.254.1.1,qps=4,max_wr=16,count=100,size=4096,srq_limit=4 >/sys/kernel/debug/kverbs_example/rxe_dummy/srq &
sleep 1
run srq_peer -q 4 -w 16 -c 100 -s 4096 169.254.1.1
wait
run cat /sys/kernel/debug/kverbs_example/rxe_dummy/srq
run cat /sys/kernel/debug/kverbs_example/rxe_dummy/events

step "Path migration (apm.c): rxe cannot, and says so"
echo "\$ echo role=server > .../rxe_dummy/apm"
echo role=server >/sys/kernel/debug/kverbs_example/rxe_dummy/apm
run cat /sys/kernel/debug/kverbs_example/rxe_dummy/apm

step "Device removal and module unload"
run rdma link delete rxe_dummy
run ls /sys/kernel/debug/kverbs_example
run rmmod kverbs_example
dmesg | grep kverbs_example | tail -n 3
run rmmod kverbs
