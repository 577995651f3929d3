#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# ktap-totals.sh LOG [NPROGS]
#
# Reads the console log of a `make check` VM (tools/vm/guest-init.sh's
# output: a KTAP plan of NPROGS test programs, each program's own KTAP behind
# "# ", one result line per program, then "kverbs-vm: done") and prints
#
#   <program> <seconds> s <ok|not ok|SKIP|never ran|died> [busy <pct> %, slept <s> s]
#                                                             one line each
#   kverbs-time: where the time went (the programs' seconds, the vCPUs'
#                busy share, the seconds slept, user space's share, the
#                processes made, kmemleak's checks, boots)
#   kverbs: <why>                                             for each problem
#                                (each failed case is one: "<program>: case failed: <name>")
#   N passed, N failed[, N skipped]                           last
#
# The exit status is 0 only if every planned program ran to its totals,
# no case failed and the VM finished.  What cannot be counted is counted as
# failed, never as passed:
#   - no plan at all (the VM died before the tests, or printed nothing):
#     NPROGS failures (1 if NPROGS is not given);
#   - a program that ended without its KTAP totals (killed by its timeout,
#     crashed, or the VM died inside it): its printed results count, and
#     the rest of its own plan, at least one, counts as failed;
#   - a planned program that never started: one failure each;
#   - no "kverbs-vm: done": one failure more if nothing else failed.
# A program's failed cases always count, and mark it "not ok", even when
# it exited with success (or with failure but no failed case: one more).
#
# Under CI (CI=true in the environment) every program must run: a program
# skipped as a whole (exit 4 before its plan) counts as failed, unless it is
# in KVERBS_SKIP_ASKED (space-separated names: the skips the user asked
# for, e.g. kverbs_two_hosts.sh with KVERBS_TWO_HOSTS=0; tools/vm/run.sh
# sets it).  Outside CI it counts as one skip.

set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 LOG [NPROGS]" >&2
	exit 2
fi
log=$1
nprogs=${2:-0}
ci=0
[ "${CI:-}" = true ] && ci=1
asked=${KVERBS_SKIP_ASKED:-}
if [ ! -r "$log" ]; then
	echo "kverbs: no console log at $log"
	echo "0 passed, $((nprogs > 0 ? nprogs : 1)) failed"
	exit 1
fi

# Console lines may end in \r and may be interleaved with kernel messages;
# only whole lines in the formats above are read.
sed 's/\r$//' "$log" | awk -v nprogs="$nprogs" -v ci="$ci" -v asked="$asked" '
function why(s) { problems[++nproblems] = "kverbs: " s }
# A program has ended (its result line, or the log ran out): count it.
function close_prog(result,    missing) {
	if (prog == "")
		return
	if (have_totals) {
		pass += tp; fail += tf; skip += ts
		if (result == "")
			result = "died"
	} else {
		pass += sub_ok; skip += sub_skip; fail += sub_notok
		missing = (sub_plan > sub_seen ? sub_plan - sub_seen : 0)
		if (missing < 1)
			missing = 1
		fail += missing
		if (result == "") {
			why(prog ": the VM stopped inside it after " sub_seen " of " sub_plan " cases")
			result = "died"
		} else if (result == "ok # SKIP" && sub_plan == 0 && ci && !index(" " asked " ", " " prog " ")) {
			# Skipped as a whole under CI, and not asked for: a failure.
			why(prog ": skipped (" skip_why "), but under CI every program must run " \
				"(KVERBS_SKIP_ASKED: " (asked == "" ? "none" : asked) ")")
			fail += 1 - missing
			result = "SKIP, failed under CI"
		} else if (result == "ok # SKIP" && sub_plan == 0) {
			# Skipped as a whole (exit 4 before any case): one skip.
			fail -= missing; skip++
			result = "SKIP"
		} else {
			why(prog ": ended without KTAP totals after " sub_seen " of " sub_plan " cases (" result ")")
		}
	}
	if (busy != "") {
		printf "%-28s %7s s  %-8s busy %3d %%, slept %6.1f s, kmemleak %5.1f s%s%s\n", prog, secs, result, busy, slept, kml,
			(user != "" ? sprintf(", user space %d %% of the busy", user) : ""),
			(procs != "" ? sprintf(", %d processes", procs) : "")
		if (procs != "") {
			t_procs += procs; n_procs++
		}
		b_secs += secs; t_busy += secs * busy / 100; t_slept += slept
		if (user != "") {
			u_busy += secs * busy / 100; t_user += secs * busy / 100 * user / 100
		}
	} else
		printf "%-28s %7s s  %s\n", prog, (secs == "" ? "?" : secs), result
	t_secs += secs; t_kml += kml
	ended++
	prog = ""
}
/^1\.\.[0-9]+$/ && !plan { plan = substr($0, 4) + 0; next }
/^# selftests: kverbs: [^ ]+$/ {
	close_prog("")
	prog = $4; started++
	have_totals = 0; sub_plan = 0; sub_seen = 0; sub_ok = 0; sub_notok = 0; sub_skip = 0
	secs = ""; busy = ""; slept = ""; user = ""; procs = ""; kml = 0; skip_why = "no reason given"
	next
}
prog != "" && /^# # kmemleak_clean_[a-z0-9_]+: [0-9.]+ s(, |$)/ { kml += $4; next }
prog != "" && /^# 1\.\.[0-9]+$/ { sub_plan = substr($0, 6) + 0; next }
prog != "" && /^# 1\.\.0 # SKIP/ { skip_why = $0; sub(/^# 1\.\.0 # SKIP */, "", skip_why); next }
prog != "" && /^# (not )?ok [0-9]+ / {
	sub_seen++
	if ($2 == "not") {
		sub_notok++
		name = $0
		sub(/^# not ok [0-9]+ /, "", name)
		why(prog ": case failed: " name)
	}
	else if ($0 ~ /# SKIP/) sub_skip++
	else sub_ok++
	next
}
prog != "" && /^# # Totals: / {
	tp = tf = ts = 0
	for (i = 4; i <= NF; i++) {
		split($i, kv, ":")
		if (kv[1] == "pass" || kv[1] == "xfail") tp += kv[2]
		else if (kv[1] == "fail" || kv[1] == "xpass" || kv[1] == "error") tf += kv[2]
		else if (kv[1] == "skip") ts += kv[2]
	}
	have_totals = 1
	next
}
prog != "" && /^# kverbs-time: / {
	secs = $4
	# The kmemleak cases of the programs, deferred to the end of the
	# guest: this program is the check, its scans and its verdicts.
	if (prog == "kverbs_kmemleak.sh")
		kml = secs
	if ($5 == "busy") { busy = $6; slept = $8 }
	user = ($9 == "user") ? $10 : ""
	procs = ($11 == "procs") ? $12 : ""
	next
}
/^kverbs-boot: [0-9.]+ s/ { boots++; boot_secs += $2; next }
/^(not )?ok [0-9]+ selftests: kverbs: / {
	r = ($1 == "not") ? "not ok" : ($0 ~ /# SKIP/ ? "ok # SKIP" : "ok")
	if ($1 == "not" && have_totals && tf == 0) {
		why(prog ": exited with failure status but reported no failed case (" $0 ")")
		tf = 1
	}
	if ($1 != "not" && have_totals && tf > 0) {
		why(prog ": reported " tf " failed case(s) but exited with success (" $0 ")")
		r = "not ok"
	}
	close_prog(r)
	next
}
/^kverbs-vm: done$/ { done = 1 }
END {
	close_prog("")
	# Where the time went (busy and slept: the programs that report them).
	if (t_secs > 0 || boots > 0) {
		line = sprintf("kverbs-time: programs %.0f s", t_secs)
		if (b_secs > 0)
			line = line sprintf(": vCPUs busy %.0f s (%.0f %%), waiting %.0f s; slept %.0f s (sleeps and polls)",
				t_busy, 100 * t_busy / b_secs, b_secs - t_busy, t_slept)
		if (u_busy > 0)
			line = line sprintf("; user space (shells, tools, peers) %.0f s of %.0f s busy (%.0f %%), the rest in the kernel",
				t_user, u_busy, 100 * t_user / u_busy)
		if (n_procs > 0)
			line = line sprintf("; %d processes", t_procs)
		print line sprintf("; kmemleak checks %.0f s; %d boot(s) %.0f s", t_kml, boots, boot_secs)
	}
	if (!plan) {
		why("the VM printed no test plan: it died before the tests started (see the console log)")
		fail += (nprogs > 0 ? nprogs : 1)
	} else {
		if (nprogs > 0 && plan != nprogs) {
			why("the VM planned " plan " test programs, " nprogs " were asked for")
			fail++
		}
		if (started < plan) {
			why((plan - started) " of " plan " test programs never ran")
			fail += plan - started
		}
	}
	if (!done) {
		why("the VM did not finish (crash, panic or timeout)")
		if (fail == 0)
			fail = 1
	}
	for (i = 1; i <= nproblems; i++)
		print problems[i]
	line = (pass + 0) " passed, " (fail + 0) " failed"
	if (skip)
		line = line ", " skip " skipped"
	print line
	exit (fail > 0) ? 1 : 0
}'
