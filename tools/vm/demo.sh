#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# What `make run` shows inside the test VM: soft-RoCE devices are created,
# the layer (kverbs.ko) and the example module are loaded and the example
# says what it found; then the NVMe over Fabrics host on the layer
# (kverbs_nvme.ko) connects to the kernel's own target, and a file system
# is made on its disk, mounted, filled and checked.

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

step "NVMe over Fabrics: the kernel's target (nvmet-rdma) exports the RAM disk /dev/ram0"
run modprobe nvmet-rdma
mount -t configfs none /sys/kernel/config 2>/dev/null
nvmet=/sys/kernel/config/nvmet nqn=nqn.2026-11.org.kverbs:demo
run mkdir $nvmet/subsystems/$nqn
echo "\$ echo 1 > $nvmet/subsystems/$nqn/attr_allow_any_host"
echo 1 >$nvmet/subsystems/$nqn/attr_allow_any_host
run mkdir $nvmet/subsystems/$nqn/namespaces/1
echo "\$ echo /dev/ram0 > .../namespaces/1/device_path; echo 1 > .../namespaces/1/enable"
echo /dev/ram0 >$nvmet/subsystems/$nqn/namespaces/1/device_path
echo 1 >$nvmet/subsystems/$nqn/namespaces/1/enable
run mkdir $nvmet/ports/1
echo "\$ echo rdma, ipv4, 169.254.1.1, 4420 > $nvmet/ports/1/addr_{trtype,adrfam,traddr,trsvcid}"
echo rdma >$nvmet/ports/1/addr_trtype
echo ipv4 >$nvmet/ports/1/addr_adrfam
echo 169.254.1.1 >$nvmet/ports/1/addr_traddr
echo 4420 >$nvmet/ports/1/addr_trsvcid
run ln -s $nvmet/subsystems/$nqn $nvmet/ports/1/subsystems/$nqn

step "kverbs_nvme (the host, safe Rust on the layer) connects; its namespace is a disk"
run insmod /kverbs/kverbs_nvme.ko
echo "\$ echo transport=rdma,traddr=169.254.1.1,trsvcid=4420,nqn=$nqn > /sys/kernel/debug/kverbs_nvme/connect"
printf 'transport=rdma,traddr=169.254.1.1,trsvcid=4420,nqn=%s' $nqn >/sys/kernel/debug/kverbs_nvme/connect
run cat /sys/kernel/debug/kverbs_nvme/connect
sleep 1
run cat /sys/kernel/debug/kverbs_nvme/controllers
run ls -l /dev/kvnvme0n1

step "A file system on it: mkfs.ext4, mount, copy files, unmount, check"
run mkfs.ext4 -q /dev/kvnvme0n1
mkdir -p /mnt
run mount -t ext4 /dev/kvnvme0n1 /mnt
run cp -r /kverbs /mnt/
run dd if=/dev/urandom of=/mnt/random bs=1M count=4
run df -h /mnt
run ls -l /mnt /mnt/kverbs
run umount /mnt
run e2fsck -f -n /dev/kvnvme0n1

step "Disconnect: the disk goes, the controller shuts down; the target goes"
echo "\$ echo all > /sys/kernel/debug/kverbs_nvme/disconnect"
echo all >/sys/kernel/debug/kverbs_nvme/disconnect
dmesg | grep kverbs_nvme | tail -n 4
run rmmod kverbs_nvme
rm $nvmet/ports/1/subsystems/$nqn
rmdir $nvmet/ports/1
echo 0 >$nvmet/subsystems/$nqn/namespaces/1/enable
rmdir $nvmet/subsystems/$nqn/namespaces/1 $nvmet/subsystems/$nqn

step "Device removal and module unload"
run rdma link delete rxe_dummy
run ls /sys/kernel/debug/kverbs_example
run rmmod kverbs_example
dmesg | grep kverbs_example | tail -n 3
run rmmod kverbs
