#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# bench.sh (make bench [QUICK=1]): kverbs side by side with perftest and
# with the same loop in C, in one guest.
#
# Builds the performance kernel (no debug options, tools/bench/config,
# cached under its own key), the kverbs modules, the C reference module
# (tools/bench/cbench) and the limit module (tools/bench/limit) against it in their own output directory (the tree's
# objects stay those of the test kernel), boots one guest (TCG, 2 vCPUs),
# creates rxe on lo and runs perftest, C and kverbs alternately for each
# test, size and round (tools/bench/guest-bench.sh), showing each run as it
# ends. Then prints one table per test with the medians and the ratios,
# and writes raw.csv, summary.csv, summary.txt and one PNG per test
# (gnuplot) to the results directory it names (KVERBS_BENCH_OUT, else
# bench-results/DATE in the tree).
#
# Then, for function, the bench between two VMs (kverbs_two_hosts.sh on the
# test kernel; TWO_HOSTS=0 skips it).
#
# NVME=1 (make bench-nvme: with TESTS=" " QPS_LIST=" " AB=none TWO_HOSTS=0,
# that alone): fio on kverbs_nvme and on the kernel's C host, nvme-rdma,
# against one nvmet-rdma target in the guest, taking turns
# (tools/bench/guest-nvme.sh; NVME_RUNTIME, NVME_TESTS, NVME_IMPLS), a table
# of its own (tools/bench/report_nvme.py).
# QUICK=1: two sizes per test, QPs 1 and 4 (a few minutes). ROUNDS, TESTS,
# BW_SIZES, LAT_SIZES, QPS_LIST in the environment override the sets;
# KV_OPTS is added to kverbs' options (e.g. KV_OPTS=,poll=softirq).
# INV_REQ_LOOPS=N (INV_REQ_TIMEOUT=T) adds N loops of the 8-QP write_bw that
# can end with a remote invalid request error (tools/bench/guest-bench.sh).
# KVERBS_BENCH_FLAVOR=trace runs on the performance kernel with rxe
# instrumented (tools/build-kernel.sh, tools/bench/rxe-trace.patch): each
# INV_REQ loop prints the "rxe-trace:" lines rxe logged during its run.
# Each latency test also runs kverbs' default poll mode and poll=direct
# interleaved in one run (ab=direct: two QP pairs taking turns), the
# comparison separate runs are too noisy for; AB=MODE picks the other
# mode, AB=none skips it.
# PROFILE="TEST:SIZE ..." (e.g. PROFILE=write_bw:64) adds a perf profile of
# the guest during one run of each implementation (PROFILE_ITERS
# iterations), in profile.txt; with TESTS=" " QPS_LIST=" " only that.

set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/kverbs
stamp=$(date +%Y%m%d-%H%M%S)
out=${KVERBS_BENCH_OUT:-$top/bench-results/$stamp}
mkdir -p "$out"

# What the host side needs beyond the build: gnuplot for the plots,
# python3 for the tables, perftest for the guest.
need=()
command -v gnuplot >/dev/null || need+=(gnuplot-nox)
command -v python3 >/dev/null || need+=(python3)
[ -x /usr/bin/ib_write_bw ] || need+=(perftest)
[ -z "${PROFILE:-}" ] || [ -x /usr/bin/perf ] || need+=(linux-perf)
if [ ${#need[@]} -gt 0 ]; then
	echo "kverbs: bench: installing ${need[*]}"
	{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}"; } \
		>"$out/apt.log" 2>&1 || {
		echo "kverbs: bench: installing ${need[*]} failed (log: $out/apt.log)"
		exit 1
	}
fi

flavor=${KVERBS_BENCH_FLAVOR:-perf}
case "$flavor" in
perf | trace) ;;
*) echo "kverbs: bench: KVERBS_BENCH_FLAVOR=$flavor: perf (the default) or trace" >&2; exit 1 ;;
esac
kdir=$(KVERBS_FLAVOR=$flavor "$top/tools/build-kernel.sh")
echo "kverbs: bench: performance kernel $kdir ($flavor)"

# What the figures were measured on, a column of raw.csv and summary.csv
# (report.py): the guest's kernel, the commit, the host.
{
	echo "kernel=$(cat "$kdir/include/config/kernel.release")"
	echo "commit=$(git -C "$top" describe --always --dirty 2>/dev/null || echo unknown)"
	echo "machine=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1 | tr -s ' ');" \
		"$(nproc) CPUs; $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo);" \
		"QEMU TCG"
} >"$out/run.env"
sed 's/^/kverbs: bench: /' "$out/run.env"

# The modules, built against the performance kernel in a copy of the
# sources (building in the tree would replace its test-kernel objects),
# one per kernel.
build=$cache/bench-build
[ "${KVERBS_KERNEL:-6.12}" = 6.12 ] || build=$cache/bench-build-$KVERBS_KERNEL
mkdir -p "$build/src" "$build/cbench" "$build/limit"
cp "$top/Kbuild" "$build/src/"
(cd "$top" && find rust samples -type f \( -name '*.rs' -o -name '*.c' -o -name '*.h' \) \
	! -name '*_generated.rs' ! -name '*_generated.h' ! -name 'kverbs_extern.c' \
	-exec cp --parents -t "$build/src" {} +)
cp "$top/tools/bench/cbench/Kbuild" "$top/tools/bench/cbench/cbench.c" "$build/cbench/"
cp "$top/tools/bench/limit/Kbuild" "$top/tools/bench/limit/limit.c" "$build/limit/"
cp "$top/tools/bench/kv_bench_dev.h" "$build/"
vars=(LLVM=-19 RUSTC=/usr/bin/rustc BINDGEN=bindgen)
if ! { make -s -C "$kdir" M="$build/src" "${vars[@]}" modules &&
	make -s -C "$kdir" M="$build/cbench" LLVM=-19 modules &&
	make -s -C "$kdir" M="$build/limit" LLVM=-19 modules; } >"$out/build.log" 2>&1; then
	tail -n 30 "$out/build.log"
	echo "kverbs: bench: building the modules failed (log: $out/build.log)"
	exit 1
fi

conf=$out/bench.conf
if [ "${QUICK:-0}" = 1 ]; then
	cat >"$conf" <<-EOF
		ROUNDS=3
		BW_SIZES="64 65536"
		LAT_SIZES="8 4096"
		QPS_LIST="1 4"
	EOF
else
	: >"$conf"
fi
# Overrides, for a run of your own: ROUNDS, TESTS, BW_SIZES, LAT_SIZES,
# QPS_LIST, KV_OPTS, INV_REQ_LOOPS, INV_REQ_TIMEOUT, PROFILE, PROFILE_ITERS,
# AB, NVME, NVME_RUNTIME, NVME_TESTS, NVME_IMPLS (see tools/bench/guest-bench.sh
# and guest-nvme.sh).
for v in ROUNDS TESTS BW_SIZES LAT_SIZES QPS_LIST KV_OPTS INV_REQ_LOOPS INV_REQ_TIMEOUT \
	PROFILE PROFILE_ITERS AB NVME NVME_RUNTIME NVME_TESTS NVME_IMPLS; do
	[ -n "${!v:-}" ] && echo "$v=\"${!v}\"" >>"$conf"
done
echo "kverbs: bench: results in $out"
echo "kverbs: bench: one line per run (test impl qps size round | row of its table):"

set +e
# PROFILE puts perf in the guest.
KVERBS_FLAVOR=$flavor KVERBS_VM_DIR=$out KVERBS_VM_MEM=2048 KVERBS_BENCH_CONF=$conf \
	KVERBS_VM_TOOLS=${PROFILE:+/usr/bin/perf} \
	KVERBS_MODULES="$build/src/kverbs.ko $build/src/kverbs_example.ko $build/src/kverbs_nvme.ko $build/cbench/kverbs_cbench.ko $build/limit/kverbs_limit.ko" \
	KVERBS_VM_TIMEOUT=${KVERBS_VM_TIMEOUT:-7200} \
	"$top/tools/vm/run.sh" bench | grep --line-buffered '^kverbs-bench:' | sed -u 's/^kverbs-bench: //'
vm=${PIPESTATUS[0]}
set -e
grep -q '^kverbs-bench: end' "$out/bench.log" || {
	echo "kverbs: bench: the guest did not finish (exit $vm); console: $out/bench.log"
	exit 1
}
status=0
python3 "$top/tools/bench/report.py" "$out" || status=1
if [ -n "${PROFILE:-}" ]; then
	grep -E '^kverbs-bench: (profiled|profile) ' "$out/bench.log" | sed 's/^kverbs-bench: //' >"$out/profile.txt"
	echo "kverbs: bench: profiles ($PROFILE): $out/profile.txt"
fi

# The two-host run, for function: the bench between the kernels of two VMs
# (kverbs_two_hosts.sh on the test kernel: both roles, every test kind).
if [ "${TWO_HOSTS:-1}" = 1 ]; then
	echo "kverbs: bench: two hosts (kernel to kernel across two VMs, for function):"
	if make -s -C "$top" check KVERBS_TESTS=kverbs_two_hosts.sh KVERBS_VM_DIR="$out/two-hosts" \
		>"$out/two-hosts.log" 2>&1; then
		grep -E '^# (ok|not ok) [0-9]+ bench_' "$out/two-hosts.log" | sed 's/^# /  /'
	else
		grep -E '^# not ok|passed' "$out/two-hosts.log" | sed 's/^# /  /'
		echo "kverbs: bench: the two-host run failed (log: $out/two-hosts.log)"
		status=1
	fi
fi
exit $status
