#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# mkinitramfs.sh OUT KSRC MODULE...
#
# Builds the initramfs the kverbs test VM boots: static busybox, bash, the
# rdma-core and iproute2 tools the tests compare against and any in
# $KVERBS_VM_TOOLS (with the shared libraries they need, taken from this
# machine), the kverbs modules, the kernel's own ($KVERBS_KDIR), the kselftests with the kernel's
# ktap_helpers.sh, and tools/vm/guest-init.sh as /init.

set -euo pipefail

out=$1 ksrc=$2
shift 2
top=$(cd "$(dirname "$0")/../.." && pwd)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
# The guest's / (mktemp made it 0700): others may look up paths in it, as
# on any system (a non-root user in the tests runs programs and opens files).
chmod 755 "$root"

mkdir -p "$root"/{bin,sbin,etc,proc,sys,dev,tmp,run,root,lib64,kverbs,usr/bin}
mkdir -p "$root"/kselftest/{kselftest,kverbs}

cp /bin/busybox "$root/bin/busybox"

# Dynamically linked tools, with every library ldd names.
tools=(/bin/bash /usr/bin/rdma /sbin/ip /usr/bin/ibv_devinfo /usr/bin/ibv_devices)
for opt in /usr/bin/rping /usr/bin/mckey /usr/bin/ucmatose /usr/bin/ibv_rc_pingpong \
	/usr/bin/ib_write_bw /usr/bin/ib_write_lat /usr/bin/ib_read_bw /usr/bin/ib_send_bw \
	/usr/bin/ib_read_lat /usr/bin/ib_send_lat /usr/bin/ib_atomic_lat; do
	[ -x "$opt" ] && tools+=("$opt")
done
# KVERBS_VM_TOOLS: more of this machine's programs for the guest (make bench
# PROFILE=... adds perf).
for extra in ${KVERBS_VM_TOOLS:-}; do
	[ -x "$extra" ] || { echo "kverbs: $extra is not an executable" >&2; exit 1; }
	tools+=("$extra")
done
provider=(/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so)
# Our userspace peer of the RC example, built for this machine's libibverbs.
mkdir -p "$root/usr/local/bin"
gcc -O2 -Wall -o "$root/usr/local/bin/rc_peer" "$top/tools/rc_peer/rc_peer.c" -libverbs
tools+=(/usr/local/bin/rc_peer)
# And of the SRQ example, on librdmacm.
gcc -O2 -Wall -o "$root/usr/local/bin/srq_peer" "$top/tools/srq_peer/srq_peer.c" -libverbs -lrdmacm
tools+=(/usr/local/bin/srq_peer)
# The selftests' helpers: fault injection per operation, the fuzzer, a
# non-root writer, the kernel log read from its end. Static: under TCG a
# dynamically linked one took 0.18 s to run, a static one 0.07 s
# (kv_kmsg runs after every case, kv_fail_nth at every sweep point).
for h in kv_fail_nth kv_fuzz kv_as_user kv_kmsg kv_dio; do
	gcc -O2 -Wall -static -o "$root/usr/local/bin/$h" "$top/tools/testing/selftests/kverbs/$h.c"
	tools+=("/usr/local/bin/$h")
done
# ext4's tools for a file system on kverbs_nvme's disk (kverbs_nvme_fio.sh,
# make run's demo), with their configuration.
tools+=(/sbin/mkfs.ext4 /sbin/e2fsck)
mkdir -p "$root/etc"
cp /etc/mke2fs.conf "$root/etc/"
# fio for kverbs_nvme's tests: static, built by tools/build-fio.sh.
fio=$("$top/tools/build-fio.sh")
cp "$fio" "$root/usr/local/bin/fio"
tools+=(/usr/local/bin/fio)
copy_with_libs() {
	local f lib
	for f in "$@"; do
		mkdir -p "$root$(dirname "$f")"
		[ -e "$root$f" ] || cp -L "$f" "$root$f"
		for lib in $(ldd "$root$f" 2>/dev/null | grep -o '/[^ ]*'); do
			[ -e "$root$lib" ] && continue
			mkdir -p "$root$(dirname "$lib")"
			cp -L "$lib" "$root$lib"
		done
	done
}
# libgcc_s is dlopen()ed by glibc for pthread_cancel/pthread_exit (rping).
copy_with_libs "${tools[@]}" "${provider[@]}" /lib/x86_64-linux-gnu/libgcc_s.so.1
# The tools live in /bin for the guest's PATH.
for t in "${tools[@]}"; do
	[ -e "$root/bin/$(basename "$t")" ] || ln -s "$t" "$root/bin/$(basename "$t")"
done
mkdir -p "$root/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
echo 'root:x:0:0:root:/root:/bin/bash' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"

for m in "$@"; do
	cp "$m" "$root/kverbs/"
done

# The test kernel's own modules ($KVERBS_KDIR, its build directory: the
# NVMe over Fabrics drivers, tools/testing/selftests/kverbs/config), where
# modprobe looks for them, with their modules.dep.
kdir=${KVERBS_KDIR:-}
if [ -n "$kdir" ] && [ -s "$kdir/modules.order" ]; then
	krel=$(cat "$kdir/include/config/kernel.release")
	mdir=$root/lib/modules/$krel
	while read -r m; do
		m=${m%.o} m=${m%.ko}
		mkdir -p "$mdir/kernel/$(dirname "$m")"
		cp "$kdir/$m.ko" "$mdir/kernel/$m.ko"
	done <"$kdir/modules.order"
	cp "$kdir/modules.order" "$kdir/modules.builtin" "$mdir/"
	[ -e "$kdir/modules.builtin.modinfo" ] && cp "$kdir/modules.builtin.modinfo" "$mdir/"
	depmod -b "$root" "$krel"
fi

cp "$ksrc/tools/testing/selftests/kselftest/ktap_helpers.sh" "$root/kselftest/kselftest/"
sel="$top/tools/testing/selftests/kverbs"
cp "$sel"/*.sh "$sel/settings" "$root/kselftest/kverbs/"
# The programs /init runs: $KVERBS_PROGS, else all of TEST_PROGS in the
# selftests' Makefile, in its order.
echo "${KVERBS_PROGS:-$(make -s --no-print-directory -C "$sel" print-progs)}" >"$root/kselftest/kverbs/TEST_PROGS"
cp "$top/tools/vm/guest-init.sh" "$root/init"
cp "$top/tools/vm/demo.sh" "$top/tools/vm/peer-cmd.sh" "$root/kverbs/"
cp "$top/tools/bench/guest-bench.sh" "$root/kverbs/bench.sh"
# make bench's NVMe half, beside the selftests' NVMe fixture it sources.
cp "$top/tools/bench/guest-nvme.sh" "$root/kselftest/kverbs/bench-nvme.sh"
# make bench's settings (tools/bench/bench.sh).
[ -n "${KVERBS_BENCH_CONF:-}" ] && cp "$KVERBS_BENCH_CONF" "$root/kverbs/bench.conf"
# KVERBS_CASES: the test cases to run (kverbs_lib.sh, kv_selected).
[ -n "${KVERBS_CASES:-}" ] && echo "$KVERBS_CASES" >"$root/kverbs/cases"
# make stress: the hardening tests in full (the file holds their seed), the
# exerciser's budget, and the time they need.
if [ -n "${KVERBS_STRESS:-}" ]; then
	echo "$KVERBS_STRESS" >"$root/kverbs/stress"
	[ -n "${KVERBS_STRESS_ONLY:-}" ] && echo "$KVERBS_STRESS_ONLY" >"$root/kverbs/stress_only"
	echo "${KVERBS_EXERCISER_SECONDS:-1800}" >"$root/kverbs/exerciser_seconds"
	sed -i 's/^timeout=.*/timeout=14400/' "$root/kselftest/kverbs/settings"
fi
chmod +x "$root/init" "$root"/kselftest/kverbs/*.sh "$root/kverbs/demo.sh" "$root/kverbs/peer-cmd.sh" \
	"$root/kverbs/bench.sh" "$root/kselftest/kverbs/bench-nvme.sh"

# break_programs LINE...: every test program's script replaced by LINEs.
break_programs() {
	local p
	for p in "$root"/kselftest/kverbs/kverbs_*.sh; do
		case ${p##*/} in
		kverbs_lib.sh | kverbs_nvme_lib.sh | kverbs_kmemleak.sh) continue ;;
		esac
		printf '%s\n' "$@" >"$p"
	done
}

# KVERBS_BREAK breaks the guest on purpose, for the harness's own tests
# (tools/testing/kverbs_harness.sh): "module" modules (kverbs.ko, the
# samples, the self-test) that fail to load, "skip" test programs that all
# skip themselves (exit 4 before any case), "fail" test programs that each
# fail a case (broken_on_purpose) and pass another; "init" (an /init that
# exits at once, and the kernel panics) is asked for on the guest's command
# line (tools/vm/run.sh: one guest's or all). kverbs_kmemleak.sh, the
# programs' kmemleak cases, is left whole: the broken programs leave it no
# case, and it passes.
case "${KVERBS_BREAK:-}" in
"" | init) ;;
module) for m in "$root"/kverbs/*.ko; do head -c 4096 "$m" >"$m.cut" && mv "$m.cut" "$m"; done ;;
skip)
	break_programs '#!/bin/bash' 'echo "TAP version 13"' 'echo "1..0 # SKIP broken on purpose (KVERBS_BREAK=skip)"' 'exit 4'
	;;
fail)
	break_programs '#!/bin/bash' 'echo "TAP version 13"' 'echo "1..2"' 'echo "ok 1 runs"' \
		'echo "not ok 2 broken_on_purpose"' 'echo "# Totals: pass:1 fail:1 xfail:0 xpass:0 skip:0 error:0"' 'exit 1'
	;;
*) echo "kverbs: unknown KVERBS_BREAK=$KVERBS_BREAK (init, module, skip, fail)" >&2; exit 1 ;;
esac

(cd "$root" && find . | cpio -o -H newc --quiet) >"$out.tmp"
mv "$out.tmp" "$out"
