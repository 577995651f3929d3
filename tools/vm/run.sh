#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# run.sh check|demo
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
work=${XDG_CACHE_HOME:-$HOME/.cache}/kverbs/vm
mkdir -p "$work"

mods=("$top"/kverbs_example.ko)
for m in "${mods[@]}"; do
	[ -f "$m" ] || { echo "kverbs: $m is not built (make modules)" >&2; exit 1; }
done

initrd="$work/initramfs-$mode.cpio"
"$top/tools/vm/mkinitramfs.sh" "$initrd" "$ksrc" "${mods[@]}"

log="$work/$mode.log"
peer_log="$work/peer.log"
append="console=ttyS0 loglevel=${KVERBS_LOGLEVEL:-4} log_buf_len=8M panic=-1 kmemleak=on kverbs.mode=$mode"
# KVERBS_TESTS="a.sh b.sh" runs only those test programs.
if [ -n "${KVERBS_TESTS:-}" ]; then
	append="$append kverbs.tests=$(echo $KVERBS_TESTS | tr ' ' ',')"
fi
net=(-nic none)
# Two-host tests: a second VM (the peer, one vCPU: the host has two)
# joined to this one by a QEMU
# socket netdev over UDP on 127.0.0.1, both on 169.254.10.0/24; rxe runs on
# each one's eth0. KVERBS_TWO_HOSTS=0 runs without it.
peer_pid=
if [ "$mode" = check ] && [ "${KVERBS_TWO_HOSTS:-1}" = 1 ]; then
	p1=$((20000 + RANDOM % 20000))
	p2=$((p1 + 1))
	peer_append="console=ttyS0 loglevel=4 log_buf_len=8M panic=-1 kmemleak=on kverbs.mode=peer kverbs.ip=169.254.10.2"
	qemu_peer=(qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m 1024
		-kernel "$kdir/arch/x86/boot/bzImage" -initrd "$initrd" -append "$peer_append"
		-display none -monitor none -serial stdio -no-reboot
		-netdev "socket,id=n0,udp=127.0.0.1:$p1,localaddr=127.0.0.1:$p2"
		-device virtio-net-pci,netdev=n0,mac=52:54:00:10:00:02)
	timeout "${KVERBS_VM_TIMEOUT:-2400}" "${qemu_peer[@]}" </dev/null >"$peer_log" 2>&1 &
	peer_pid=$!
	net=(-netdev "socket,id=n0,udp=127.0.0.1:$p2,localaddr=127.0.0.1:$p1"
		-device virtio-net-pci,netdev=n0,mac=52:54:00:10:00:01)
	append="$append kverbs.ip=169.254.10.1"
fi
qemu=(qemu-system-x86_64 -accel tcg -cpu max -smp 2 -m 1024
	-kernel "$kdir/arch/x86/boot/bzImage" -initrd "$initrd" -append "$append"
	-display none -monitor none -serial stdio "${net[@]}" -no-reboot)

set +e
timeout "${KVERBS_VM_TIMEOUT:-2400}" "${qemu[@]}" </dev/null 2>&1 | sed -u 's/\r$//' | tee "$log"
set -e
if [ -n "$peer_pid" ]; then
	kill "$peer_pid" 2>/dev/null
	wait "$peer_pid" 2>/dev/null
fi

if ! grep -q '^kverbs-vm: done' "$log"; then
	echo "kverbs: the VM did not finish (crash or timeout); console log: $log"
	finished=0
else
	finished=1
fi

[ "$mode" = check ] || exit $((1 - finished))

# Sum the KTAP totals of the test programs.  A program that ended without
# totals (killed by its timeout, or the VM died inside it) counts as one
# failure; so does a program the VM never reached.
awk -v finished=$finished$top/tools/testing/selftests/kverbs/TEST_PROGS.list" 2>/dev/null || echo 0)" '
	/^1\.\.[0-9]+$/ && !plan { plan = substr($0, 4) + 0 }
	/^# # Totals: / {
		for (i = 4; i <= NF; i++) {
			split($i, kv, ":")
			t[kv[1]] += kv[2]
		}
		have_totals = 1
	}
	/^(not )?ok [0-9]+ selftests: kverbs: / {
		ran++
		if (!have_totals && $1 == "not")
			broken++
		have_totals = 0
	}
	END {
		pass = t["pass"] + t["xfail"]
		fail = t["fail"] + t["xpass"] + t["error"] + broken + (plan > ran ? plan - ran : 0)
		if (!finished && fail == 0)
			fail = 1
		line = pass " passed, " fail " failed"
		if (t["skip"])
			line = line ", " t["skip"] " skipped"
		print line
		exit fail > 0
	}' "$log"
