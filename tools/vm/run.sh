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
# modules that use it (the example, the minimal module, the self-test), and
# for check the ULP built outside the tree against them (tools/ulp_template:
# make ulp).
ulp=$top/tools/ulp_template/kverbs_ulp.ko
default_mods="$top/kverbs.ko $top/kverbs_example.ko $top/kverbs_minimal.ko $top/kverbs_selftest.ko"
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
KVERBS_PROGS=$progs "$top/tools/vm/mkinitramfs.sh" "$initrd" "$ksrc" "${mods[@]}" ||
	{ echo "kverbs: building the initramfs failed"; exit 1; }

log="$work/$mode.log"
peer_log="$work/peer.log"
# KVERBS_VM_APPEND: more of the guest's kernel command line (e.g.
# clocksource=hpet, to measure with the clock some TCG boots fall back to).
append="console=ttyS0 loglevel=${KVERBS_LOGLEVEL:-4} log_buf_len=8M panic=-1 kmemleak=on kverbs.mode=$mode${KVERBS_VM_APPEND:+ $KVERBS_VM_APPEND}"
net=(-nic none)
# Two-host tests: a second VM (the peer, one vCPU: the host has two)
# joined to this one by a QEMU
# socket netdev over UDP on 127.0.0.1, both on 169.254.10.0/24; rxe runs on
# each one's eth0. KVERBS_TWO_HOSTS=0 runs without it; a run without the
# programs that use it (kverbs_two_hosts.sh, kverbs_srq_manual.sh's last
# cases) does not boot it. Their NIC is virtio-net, but e1000 on 7.x:
# there virtio-net receives into a page pool, whose free inside rxe's
# irq-off QP lock stops the VM (Documentation/kverbs.rst, "Known RDMA
# core problems"); tools/build-kernel.sh adds CONFIG_E1000 to 7.3's kernel.
# e1000 takes a legacy interrupt, and the guests' ACPI interrupt routing
# (_PRT) times out under TCG (AE_AML_LOOP_TIMEOUT): acpi=noirq routes
# through the BIOS's table instead; without it the link never carries a
# packet.
vnic=virtio-net-pci vnic_append=
if [ "${KVERBS_KERNEL:-6.12}" != 6.12 ]; then
	vnic=e1000 vnic_append=" acpi=noirq"
fi
peer_pid=
if [ "$mode" = check ] && [ "${KVERBS_TWO_HOSTS:-1}" = 1 ] &&
	[[ " $progs " == *" kverbs_two_hosts.sh "* || " $progs " == *" kverbs_srq_manual.sh "* ]]; then
	p1=$((20000 + RANDOM % 20000))
	p2=$((p1 + 1))
	peer_append="console=ttyS0 loglevel=4 log_buf_len=8M panic=-1 kmemleak=on kverbs.mode=peer kverbs.ip=169.254.10.2$vnic_append"
	qemu_peer=(qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m 1024
		-kernel "$kdir/arch/x86/boot/bzImage" -initrd "$initrd" -append "$peer_append"
		-display none -monitor none -serial stdio -no-reboot
		-netdev "socket,id=n0,udp=127.0.0.1:$p1,localaddr=127.0.0.1:$p2"
		-device "$vnic,netdev=n0,mac=52:54:00:10:00:02")
	timeout "${KVERBS_VM_TIMEOUT:-4500}" "${qemu_peer[@]}" </dev/null >"$peer_log" 2>&1 &
	peer_pid=$!
	net=(-netdev "socket,id=n0,udp=127.0.0.1:$p2,localaddr=127.0.0.1:$p1"
		-device "$vnic,netdev=n0,mac=52:54:00:10:00:01")
	append="$append kverbs.ip=169.254.10.1$vnic_append"
fi
qemu=(qemu-system-x86_64 -accel tcg -cpu max -smp 2 -m "${KVERBS_VM_MEM:-1024}"
	-kernel "$kdir/arch/x86/boot/bzImage" -initrd "$initrd" -append "$append"
	-display none -monitor none -serial stdio "${net[@]}" -no-reboot)

# The whole run's bound (KVERBS_VM_TIMEOUT, seconds): make check took
# 2400 s of TCG time on 2026-11-24's slower machine before its last two
# programs; 4500 keeps .ci/run (harness, check, style) within CI's 90 min.
set +e
timeout "${KVERBS_VM_TIMEOUT:-4500}" "${qemu[@]}" </dev/null 2>&1 | sed -u 's/\r$//' | tee "$log"
set -e
if [ -n "$peer_pid" ]; then
	kill "$peer_pid" 2>/dev/null
	wait "$peer_pid" 2>/dev/null
fi

[ "$mode" = check ] || {
	grep -q '^kverbs-vm: done$' "$log" && exit 0
	echo "kverbs: the VM did not finish (crash or timeout); console log: $log"
	exit 1
}

# The KTAP totals of the test programs, each program's time, and a line for
# everything that kept a test from running (tools/vm/ktap-totals.sh).
# Under CI (CI=true) a program that skipped itself fails unless the user
# asked for the skip: KVERBS_TWO_HOSTS=0 asks for kverbs_two_hosts.sh's, and
# KVERBS_SKIP_ASKED may name more.
asked=${KVERBS_SKIP_ASKED:-}
[ "${KVERBS_TWO_HOSTS:-1}" = 1 ] || asked="${asked:+$asked }kverbs_two_hosts.sh"
echo "### kverbs: test programs (console log: $log)"
KVERBS_SKIP_ASKED=$asked exec "$top/tools/vm/ktap-totals.sh" "$log" "$nprogs"
