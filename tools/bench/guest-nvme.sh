#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The NVMe half of `make bench` (tools/bench/bench.sh, NVME=1 or make
# bench-nvme), run by tools/bench/guest-bench.sh: fio on kverbs_nvme's disk
# and on the kernel's C host's (nvme-rdma), against the same nvmet-rdma
# target in the same guest (kverbs_nvme_lib.sh's fixture: rxe on dummy0,
# namespace 1 on the RAM disk /dev/ram0, filled first so that reads find
# pages), taking turns in rounds (the reverse order every other round):
#
#   randread and randwrite, 4 KiB, at queue depths 1 and 32: IOPS and the
#   completion latency's median and 99th percentile;
#   read and write, 128 KiB, sequential, at queue depth 8: MB/s.
#
# Implementations: kverbs_nvme and nvme_rdma with nr_io_queues=1,
# kverbs_nvme_2q and nvme_rdma_2q with nr_io_queues=2 (a queue per vCPU,
# each host's default). Each run
# is NVME_RUNTIME seconds after a second of ramp, time based, O_DIRECT,
# libaio; one line per run:
#
#   kverbs-bench: nvme TEST IMPL QD BS ROUND IOPS KIB_S P50_US P99_US
#
# (or "kverbs-bench: fail nvme TEST IMPL QD BS ROUND why"). Installed in the
# guest beside the selftests (/kselftest/kverbs), whose NVMe fixture it
# uses.

# shellcheck source=../testing/selftests/kverbs/kverbs_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_lib.sh"
# shellcheck source=../testing/selftests/kverbs/kverbs_nvme_lib.sh
. "$(dirname "$(readlink -f "$0")")/kverbs_nvme_lib.sh"

ROUNDS=${ROUNDS:-3}
NVME_RUNTIME=${NVME_RUNTIME:-5}
# TEST RW BS QD, one a line.
NVME_TESTS=${NVME_TESTS:-"randread_qd1 randread 4k 1
randread_qd32 randread 4k 32
randwrite_qd1 randwrite 4k 1
randwrite_qd32 randwrite 4k 32
seqread_qd8 read 128k 8
seqwrite_qd8 write 128k 8"}
NVME_IMPLS=${NVME_IMPLS:-"kverbs_nvme nvme_rdma kverbs_nvme_2q nvme_rdma_2q"}

say() { echo "kverbs-bench: $*"; }

# The disk of each implementation.
declare -A DEV

# c_connect IMPL QUEUES N: the C host connected with a host NQN and ID of
# its own, N (two controllers of one host to one subsystem would be a
# duplicate connect; nvme-fabrics refuses one host ID under two NQNs),
# and QUEUES I/O queues; its disk DEV[IMPL].
c_connect() {
	local nqn=nqn.2026-11.org.kverbs:bench-$1
	kv_nvme_c_connect "hostnqn=$nqn,hostid=00000000-0000-4000-8000-00000000000$3,nr_io_queues=$2" ||
		return 1
	kv_wait kv_nvme_c_disk 1 "$nqn" || return 1
	DEV[$1]=$KV_NVME_C_DISK
}

# kvnvme_connect IMPL QUEUES: kverbs_nvme connected with QUEUES I/O queues;
# its disk DEV[IMPL].
kvnvme_connect() {
	kv_nvme_connect "nr_io_queues=$2" || { say "fail nvme setup - 0 0 0 (connect $1)"; return 1; }
	DEV[$1]=/dev/kvnvme${KV_NVME_INST}n1
	kv_wait test -b "${DEV[$1]}" || { say "fail nvme setup - 0 0 0 (no disk of $1)"; return 1; }
}

setup() {
	kv_nvmet_up || { say "fail nvme setup - 0 0 0 (the target's setup failed)"; return 1; }
	# Every page of the RAM disk allocated: reads of a page brd never
	# wrote are a memset.
	dd if=/dev/zero of=/dev/ram0 bs=1M count=64 oflag=direct 2>/dev/null
	insmod /kverbs/kverbs_nvme.ko || { say "fail nvme setup - 0 0 0 (insmod kverbs_nvme)"; return 1; }
	{ kvnvme_connect kverbs_nvme 1 && kvnvme_connect kverbs_nvme_2q 2; } || return 1
	{ c_connect nvme_rdma 1 1 && c_connect nvme_rdma_2q 2 2; } ||
		{ say "fail nvme setup - 0 0 0 (the C host's connect)"; return 1; }
	say "nvme-setup ${DEV[kverbs_nvme]} ${DEV[nvme_rdma]} ${DEV[kverbs_nvme_2q]} ${DEV[nvme_rdma_2q]} runtime=$NVME_RUNTIME"
}

# one TEST RW BS QD IMPL ROUND: one fio run, its line. fio's terse format
# (version 3): a direction's fields are KiB, KiB/s, IOPS, runtime, then
# submission, completion latency (4 each) and the completion latency's
# percentiles (1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 99, ... in
# us); the read direction from field 6, the write direction from 47.
one() {
	local test=$1 rw=$2 bs=$3 qd=$4 impl=$5 round=$6 out b
	out=$(fio --name="$test" --filename="${DEV[$impl]}" --ioengine=libaio --direct=1 \
		--rw="$rw" --bs="$bs" --iodepth="$qd" --time_based --runtime="$NVME_RUNTIME" \
		--ramp_time=1 --norandommap --randrepeat=0 --output-format=terse --terse-version=3 2>&1) ||
		{ say "fail nvme $test $impl $qd $bs $round ($(echo "$out" | tail -n 1))"; return; }
	b=6
	case $rw in *write) b=47 ;; esac
	echo "$out" | tail -n 1 | awk -F';' -v b=$b -v p="nvme $test $impl $qd $bs $round" '{
		p50 = $(b + 18); sub(/.*=/, "", p50); p99 = $(b + 24); sub(/.*=/, "", p99)
		print "kverbs-bench: " p " " $(b + 2) " " $(b + 1) " " p50 " " p99 }'
}

setup || exit 0
while read -r test rw bs qd; do
	[ -n "$test" ] || continue
	for round in $(seq 1 "$ROUNDS"); do
		read -ra impls <<<"$NVME_IMPLS"
		if [ $((round % 2)) -eq 0 ]; then
			for ((i = 0, j = ${#impls[@]} - 1; i < j; i++, j--)); do
				t=${impls[i]} impls[i]=${impls[j]} impls[j]=$t
			done
		fi
		for impl in "${impls[@]}"; do
			one "$test" "$rw" "$bs" "$qd" "$impl" "$round"
		done
	done
done <<<"$NVME_TESTS"
# What kverbs_nvme's queue counted over the runs.
say "nvme-controllers $(tr '\n' ' ' </sys/kernel/debug/kverbs_nvme/controllers)"
echo all >/sys/kernel/debug/kverbs_nvme/disconnect
kv_nvme_cleanup
