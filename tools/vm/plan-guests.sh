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
#   queue PROG...       the programs every guest takes from, one at a time,
#                       as it becomes free (longest first)
#   last PROG...        the first guest's programs after the queue
#
# With one guest, or no program for the queue, only the first line, the
# last programs at its end.  The last programs (LAST_PROGS) leave the
# guest's kernel with objects leaked on purpose, which hold a device and
# kverbs.ko for good: nothing may run after them in that guest.
#
# The first guest is the foreground one (tools/vm/run.sh runs the others at
# a lower priority): it gets the programs that need the second VM
# (PEER_PROGS: the two-host cases), and alone the peer ("peer"), and the
# programs with cases bound in time (TIMED_PROGS: a removal within 5 s, a
# refusal within 2 s, a dead peer noticed within 10 or 20 s, a multicast
# run ended within 5 s of its link going down: 5.5 s once, in two equal
# guests and two more beside on 2026-11-26), which then
# run as fast as in a guest alone, and the benchmark (RATE_PROGS): its
# loopback runs at the highest rate rxe takes, and in a guest that got a
# quarter of its speed beside the first rxe's RC retransmission gave up
# (IB_WC_RETRY_EXC_ERR, "make_send_cqe: non-flush error status = 12" in
# kverbs_bench.sh's write_bw_sizes_all; measured on 2026-11-26), and the
# programs whose cases race tasks on two CPUs (SMP_PROGS: the exerciser's
# four workers, the self-test's races, the benchmark's adaptive polling):
# only the first guest has two vCPUs (tools/vm/run.sh), and only these
# programs run on both.  The
# rest go to the queue, the light programs first (those that load and
# unload modules, add and remove devices and read files), then those that
# move data (DATA_PROGS), each part longest first by their measured times
# (tools/vm/program-times: "PROG SECONDS" lines, measured on 2026-11-26 in
# two guests side by side; a program not listed there counts as the
# longest listed): the other guests, which get a quarter of their speed
# while the first runs its own, spend that time on the light ones, and the
# data moves once the guests share the CPUs evenly.  Each guest, the first
# once its own are done, takes the queue's next program when it has
# finished one, so the guests end within about one program of each other
# whatever the machine does to their speeds (list scheduling, decided at
# run time instead of on the measured times).
#
# With --smp it prints SMP_PROGS, the programs that run with every vCPU of
# their guest online; every other program runs on one vCPU, the others
# taken offline (tools/vm/guest-init.sh, kverbs.smp=): under TCG on a host
# of two CPUs a guest's second vCPU costs about a quarter more host CPU
# for the same work (Documentation/kverbs.rst, "Guests side by side"), and
# the first guest, one vCPU busy, leaves the other host CPU to the others.

set -euo pipefail

PEER_PROGS="kverbs_two_hosts.sh kverbs_srq_manual.sh"
TIMED_PROGS="kverbs_apm.sh kverbs_soundness.sh kverbs_hardening.sh kverbs_two_hosts.sh kverbs_mcast.sh"
RATE_PROGS="kverbs_bench.sh"
# The exerciser's four workers; the self-test's races (two tasks on one
# CQ: on one vCPU "the two tasks never met on the CQ: nothing was
# tested"); the benchmark's adaptive polling, whose sleeps on the CQ are
# woken by rxe's completions, done on the other vCPU (on one, rxe's work
# runs its batch to the end before the sleeper runs again, after its
# timer: "1 woken by a completion, 64 timed out", 2026-11-27).
SMP_PROGS="kverbs_exerciser.sh kverbs_soundness.sh kverbs_bench.sh"
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
DATA_PROGS="kverbs_rc.sh kverbs_rc_tcp.sh kverbs_rping.sh kverbs_srq.sh kverbs_matrix.sh"
LAST_PROGS="kverbs_forget.sh"

[ "${KVERBS_TWO_HOSTS:-1}" = 1 ] || PEER_PROGS=
times=$here/program-times
printf '%s\n' "$@" | awk -v guests="$guests" -v peer_progs="$PEER_PROGS" -v last_progs="$LAST_PROGS" -v timed="$TIMED_PROGS $RATE_PROGS $SMP_PROGS" -v data="$DATA_PROGS" -v times="$times" '
# secs(P): the time of program P.
function secs(p) { return (p in t) ? t[p] : longest }
FILENAME == times { t[$1] = $2; if ($2 > longest) longest = $2; next }
{ prog[++n] = $1 }
END {
	np = split(peer_progs, pp, " ")
	for (i = 1; i <= np; i++)
		need_peer[pp[i]] = 1
	nt = split(timed, tp, " ")
	for (i = 1; i <= nt; i++)
		is_timed[tp[i]] = 1
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
		if (guests == 1 || need_peer[prog[i]] || is_timed[prog[i]])
			first = first " " prog[i]
		else
			rest[++m] = i
	}
	# The queue: the light programs, then the data ones, each longest
	# first (ties in the given order).
	for (i = 1; i <= m; i++)
		for (j = i + 1; j <= m; j++) {
			da = is_data[prog[rest[i]]]; db = is_data[prog[rest[j]]]
			ta = secs(prog[rest[i]]); tb = secs(prog[rest[j]])
			if (db < da || (db == da && (tb > ta || (tb == ta && rest[j] < rest[i])))) {
				x = rest[i]; rest[i] = rest[j]; rest[j] = x
			}
		}
	if (m == 0) {
		print (peer ? "peer" : "solo") first last
		exit
	}
	print (peer ? "peer" : "solo") first
	line = "queue"
	for (i = 1; i <= m; i++)
		line = line " " prog[rest[i]]
	print line
	if (last != "")
		print "last" last
}' "$times" -
