#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# plan-guests.sh GUESTS PROG...
# plan-guests.sh --smp
#
# Plans how make check's test programs are shared among GUESTS guests that
# run side by side (tools/vm/run.sh).  Prints:
#
#   peer|solo PROG...   the first guest's own programs, in the order given
#   timed PROG...       programs bound in time: the first guest takes them
#                       first once its own are done, the others only then
#                       (longest first)
#   queue PROG...       the programs every guest takes from, one at a time,
#                       as it becomes free (the light ones first, each
#                       part longest first)
#   last PROG...        the programs after the lists, each the last of
#                       the guest that takes it (the first to find both
#                       empty)
#
# With one guest, or no program for the timed list or the queue, only the
# first line, the last programs at its end.  The last programs
# (LAST_PROGS) leave the guest's kernel with objects leaked on purpose,
# which hold a device and kverbs.ko for good: nothing may run after them
# in that guest.
#
# Every guest runs its programs on one vCPU but the first's SMP_PROGS
# (whose cases race tasks on two CPUs: the exerciser's four workers, the
# self-test's races), which run on its two (tools/vm/guest-init.sh,
# kverbs.smp=; only the first guest has two, tools/vm/run.sh): under TCG
# on a host of two CPUs a second vCPU costs about a quarter more host CPU
# for the same work (Documentation/kverbs.rst, "Guests side by side").
# With --smp this script prints SMP_PROGS.
#
# The first guest is the foreground one (tools/vm/run.sh runs the others at
# a lower priority until its own programs are done): its own are the
# programs that need the second VM (PEER_PROGS: the two-host cases; it
# alone gets the peer, "peer") and SMP_PROGS, which are timed too.  While
# they run the first guest and its peer, or its two vCPUs, keep the host's
# two CPUs busy, and the other guests get what they leave: they take only
# from the queue then.  The programs with cases bound in time
# (TIMED_PROGS: a removal within 5 s, a refusal within 2 s, a dead peer
# noticed within 10 or 20 s, a multicast run ended within 5 s of its link
# going down) and the benchmark (RATE_PROGS: its loopback runs at the
# highest rate rxe takes, and in a guest that got a quarter of its speed
# rxe's RC retransmission gave up, IB_WC_RETRY_EXC_ERR, measured on
# 2026-11-26; it races rxe on two vCPUs too, SMP_PROGS, so it is the first
# guest's) are the timed list: a guest takes them once the first has
# done its own, when every guest runs on one vCPU at the same priority,
# a host CPU each (as fast as a guest alone).  The rest is the queue, the
# light programs first (those that load and unload modules, add and
# remove devices and read files), then those that move data (DATA_PROGS),
# each part longest first by their measured times (tools/vm/program-times:
# "PROG SECONDS" lines; a program not listed there counts as the longest
# listed).  Each guest, the first once its own are done, takes its next
# program when it has finished one, so the guests end within about one
# program of each other whatever the machine does to their speeds (list
# scheduling, decided at run time instead of on the measured times).

set -euo pipefail

PEER_PROGS="kverbs_two_hosts.sh kverbs_nvme_two_hosts.sh kverbs_srq_manual.sh"
TIMED_PROGS="kverbs_apm.sh kverbs_soundness.sh kverbs_hardening.sh kverbs_two_hosts.sh kverbs_mcast.sh"
# KVERBS_TIMED_PROGS: the timed list instead (the harness's tests).
TIMED_PROGS=${KVERBS_TIMED_PROGS:-$TIMED_PROGS}
RATE_PROGS="kverbs_bench.sh"
# The exerciser's four workers; the self-test's races (two tasks on one
# CQ: on one vCPU "the two tasks never met on the CQ: nothing was
# tested"); the benchmark's adaptive polling, whose sleeps on the CQ are
# woken by rxe's completions, done on the other vCPU (on one, rxe's work
# runs its batch to the end before the sleeper runs again, after its
# timer: "1 woken by a completion, 64 timed out", 2026-11-27); kverbs_nvme's
# I/O queues, one a CPU online.
SMP_PROGS="kverbs_exerciser.sh kverbs_soundness.sh kverbs_bench.sh kverbs_nvme_two_hosts.sh"
if [ "${1:-}" = --smp ]; then
	echo "$SMP_PROGS"
	exit 0
fi
if [ $# -lt 1 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
	echo "usage: $0 GUESTS PROG... | $0 --smp" >&2
	exit 2
fi
guests=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
DATA_PROGS="kverbs_rc.sh kverbs_rc_tcp.sh kverbs_rping.sh kverbs_srq.sh kverbs_matrix.sh kverbs_nvme_target.sh"
LAST_PROGS="kverbs_forget.sh"

[ "${KVERBS_TWO_HOSTS:-1}" = 1 ] || PEER_PROGS=
times=$here/program-times
printf '%s\n' "$@" | awk -v guests="$guests" -v peer_progs="$PEER_PROGS" -v last_progs="$LAST_PROGS" -v timed="$TIMED_PROGS $RATE_PROGS" -v smp="$SMP_PROGS" -v data="$DATA_PROGS" -v times="$times" '
# secs(P): the time of program P.
function secs(p) { return (p in t) ? t[p] : longest }
# longest_first(A, K, BY_DATA): sorts A[1..K] (indexes into prog) longest
# first, ties in the given order; with BY_DATA the light ones before those
# that move data.
function longest_first(a, k, by_data,    i, j, da, db, ta, tb, x) {
	for (i = 1; i <= k; i++)
		for (j = i + 1; j <= k; j++) {
			da = by_data ? is_data[prog[a[i]]] : 0; db = by_data ? is_data[prog[a[j]]] : 0
			ta = secs(prog[a[i]]); tb = secs(prog[a[j]])
			if (db < da || (db == da && (tb > ta || (tb == ta && a[j] < a[i])))) {
				x = a[i]; a[i] = a[j]; a[j] = x
			}
		}
}
FILENAME == times { t[$1] = $2; if ($2 > longest) longest = $2; next }
{ prog[++n] = $1 }
END {
	np = split(peer_progs, pp, " ")
	for (i = 1; i <= np; i++)
		need_peer[pp[i]] = 1
	nt = split(timed, tp, " ")
	for (i = 1; i <= nt; i++)
		is_timed[tp[i]] = 1
	ns = split(smp, sp, " ")
	for (i = 1; i <= ns; i++)
		is_smp[sp[i]] = 1
	nd = split(data, dp, "[ \t\n]+")
	for (i = 1; i <= nd; i++)
		is_data[dp[i]] = 1
	nl = split(last_progs, lp, " ")
	for (i = 1; i <= nl; i++)
		is_last[lp[i]] = 1
	# One guest: every program, in the order given.
	for (i = 1; i <= n; i++) {
		if (is_last[prog[i]]) {
			last = last " " prog[i]
			continue
		}
		if (need_peer[prog[i]])
			peer = 1
		if (guests == 1 || need_peer[prog[i]] || is_smp[prog[i]])
			first = first " " prog[i]
		else if (is_timed[prog[i]])
			tq[++mt] = i
		else
			rest[++m] = i
	}
	if (m == 0 && mt == 0) {
		print (peer ? "peer" : "solo") first last
		exit
	}
	print (peer ? "peer" : "solo") first
	# The timed programs, longest first; the queue: the light programs,
	# then the data ones, each longest first.
	longest_first(tq, mt, 0)
	longest_first(rest, m, 1)
	if (mt > 0) {
		line = "timed"
		for (i = 1; i <= mt; i++)
			line = line " " prog[tq[i]]
		print line
	}
	if (m > 0) {
		line = "queue"
		for (i = 1; i <= m; i++)
			line = line " " prog[rest[i]]
		print line
	}
	if (last != "")
		print "last" last
}' "$times" -
