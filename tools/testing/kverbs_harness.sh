#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# kverbs_harness.sh [--no-vm]
#
# KVERBS_HARNESS_ONLY=REGEX runs only the cases whose name matches.
#
# Tests of the test harness itself (make check-harness; .ci/run runs it
# before make check and counts it).  KTAP, then "N passed, N failed".
#
#   totals_*            tools/vm/ktap-totals.sh on recorded console logs
#                       (kverbs_harness/logs/*.expect, each naming its .log;
#                       the set is TOTALS_FIXTURES, and a fixture not in it
#                       fails totals_fixtures_all_listed)
#   build_kernel_*      tools/build-kernel.sh on an empty cache
#                       (XDG_CACHE_HOME in a new temporary directory):
#                       the fresh path up to the configuration and its
#                       check against the fragment; the performance flavor
#   the shellcheck case: every shell script of the repository is clean
#   compile_fail_*      every ```compile_fail,EXXXX example of the layer's
#                       documentation, built as a module against the real
#                       layer and the test kernel: it must fail with that
#                       error, inside the example (rustdoc cannot run the
#                       examples of an out-of-tree crate); a control example
#                       that must build shows the scaffolding works; the
#                       set is COMPILE_FAIL_EXAMPLES (an example missing or
#                       not listed fails)
#   bench_report_*      tools/bench/report.py (make bench's tables) on a
#                       recorded guest log (kverbs_harness/bench/): medians,
#                       ratios, CSV, the limit column and figures above
#                       it listed, the 8-QP error's loops counted, and a
#                       run without result counted
#   guests_*            make check's guests side by side: the programs'
#                       plan (tools/vm/plan-guests.sh), their console logs
#                       merged (tools/vm/ktap-merge.sh: a recorded run
#                       split in two gives the same totals; a guest that
#                       died is counted and named)
#   vm_*                make check on a guest broken on purpose
#                       (KVERBS_BREAK, see tools/vm/mkinitramfs.sh) must fail
#                       and say why, one guest or two; not with --no-vm

set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
here=$top/tools/testing/kverbs_harness
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kverbs-harness.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
vm=1
[ "${1:-}" = --no-vm ] && vm=0

n=0 pass=0 fail=0 skip=0
msg() { echo "# $*"; }
diag() { sed 's/^/# /'; }
# cpu_ticks: the CPU time (USER_HZ ticks) of this shell and of its
# children it has waited for, from /proc/PID/stat (utime, stime, cutime,
# cstime): a case's processes, the guests' QEMU among them.
cpu_ticks() {
	local s f
	read -r s </proc/$$/stat
	read -r -a f <<<"${s##*) }"
	echo $((f[11] + f[12] + f[13] + f[14]))
}

# t NAME FUNC [ARGS...]: one KTAP case, with its wall and CPU seconds; with
# KVERBS_HARNESS_ONLY=REGEX, the cases whose name does not match are
# skipped.
t() {
	local name=$1 start=$SECONDS cpu ok=ok
	shift
	n=$((n + 1))
	if [ -n "${KVERBS_HARNESS_ONLY:-}" ] && ! [[ $name =~ $KVERBS_HARNESS_ONLY ]]; then
		echo "ok $n $name # SKIP not in KVERBS_HARNESS_ONLY"
		skip=$((skip + 1))
		return
	fi
	cpu=$(cpu_ticks)
	if "$@"; then
		pass=$((pass + 1))
	else
		ok="not ok"
		fail=$((fail + 1))
	fi
	echo "$ok $n $name # $((SECONDS - start)) s, CPU $((($(cpu_ticks) - cpu) / 100)) s"
}

# --- tools/vm/ktap-totals.sh on recorded console logs ---------------------

# A .expect file: "nprogs N", "status S", "last LINE", any number of
# "says TEXT" (a line of the output that must be there), of "env VAR=VALUE"
# (ktap-totals.sh's environment: CI and KVERBS_SKIP_ASKED are unset
# unless given) and at most one "log NAME" (the console log, by default
# the .expect's own name with .log).
totals_case() {
	local expect=$1 log out status nprogs want_status want_last line envs
	log=$(sed -n 's/^log //p' "$expect")
	log=$(dirname "$expect")/${log:-$(basename "$expect" .expect).log}
	nprogs=$(sed -n 's/^nprogs //p' "$expect")
	want_status=$(sed -n 's/^status //p' "$expect")
	want_last=$(sed -n 's/^last //p' "$expect")
	mapfile -t envs < <(sed -n 's/^env //p' "$expect")
	out=$(env -u CI -u KVERBS_SKIP_ASKED "${envs[@]}" "$top/tools/vm/ktap-totals.sh" "$log" "$nprogs")
	status=$?
	echo "$out" | diag
	[ "$status" = "$want_status" ] || { msg "exit status $status, want $want_status"; return 1; }
	[ "$(echo "$out" | tail -n 1)" = "$want_last" ] || { msg "last line, want '$want_last'"; return 1; }
	while IFS= read -r line; do
		grep -qxF -- "$line" <<<"$out" || { msg "missing line '$line'"; return 1; }
	done < <(sed -n 's/^says //p' "$expect")
}

# --- tools/build-kernel.sh on an empty cache ------------------------------

kver=$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null)
cache=$tmp/cache

build_kernel_no_source_says_setup() {
	local out
	out=$(XDG_CACHE_HOME=$tmp/nosrc KVERBS_KERNEL_TARBALL=$tmp/none.tar.xz \
		"$top/tools/build-kernel.sh" 2>&1) && { msg "succeeded"; return 1; }
	echo "$out" | diag
	[ "$(echo "$out" | wc -l)" = 1 ] && grep -q "run tools/setup.sh" <<<"$out"
}

# The first run on a machine, after an interrupted one: a half-unpacked
# source without its marker, a temporary unpack directory, a lock file.
build_kernel_fresh_cache_configures() {
	local out bdir opt
	mkdir -p "$cache/kverbs/linux-$kver/half" "$cache/kverbs/linux-$kver.tmp"
	touch "$cache/kverbs/.lock-6.12"
	out=$(XDG_CACHE_HOME=$cache "$top/tools/build-kernel.sh" --configure-only 2>&1) ||
		{ echo "$out" | tail -n 30 | diag; return 1; }
	echo "$out" | diag
	bdir=$(echo "$out" | tail -n 1)
	fresh_build=$bdir
	[ -f "$bdir/.config" ] || { msg "no .config in '$bdir'"; return 1; }
	[ ! -e "$cache/kverbs/linux-$kver/half" ] || { msg "the half unpack was kept"; return 1; }
	[ ! -e "$cache/kverbs/linux-$kver.tmp" ] || { msg "the temporary unpack is left"; return 1; }
	[ -f "$cache/kverbs/linux-$kver/.kverbs-unpacked" ] || { msg "no unpack marker"; return 1; }
	[ ! -e "$bdir/.kverbs-built" ] || { msg "configure-only marked the kernel built"; return 1; }
	for opt in CONFIG_RUST=y CONFIG_RDMA_RXE=y CONFIG_KASAN=y CONFIG_PROVE_LOCKING=y; do
		grep -qxF "$opt" "$bdir/.config" || { msg "$opt missing"; return 1; }
	done
}

# The kernel patches (tools/patches) are applied to the unpacked source in
# place, each recorded; a run without them (KVERBS_KERNEL_PATCHES empty)
# reverses them, and the next run with them applies them again.
build_kernel_patches_applied_then_reversed() {
	local out src=$cache/kverbs/linux-$kver n bdir
	n=$(find "$top/tools/patches" -name '*.patch' | wc -l)
	[ "$n" -gt 0 ] || { msg "no kernel patch in tools/patches"; return 1; }
	patches_applied "$src" 1 || return 1
	[ "$(find "$src/.kverbs-patches" -name '*.patch' | wc -l)" = "$n" ] ||
		{ msg "not all $n patches recorded as applied"; return 1; }
	out=$(XDG_CACHE_HOME=$cache KVERBS_KERNEL_PATCHES='' "$top/tools/build-kernel.sh" --configure-only 2>&1) ||
		{ echo "$out" | tail -n 30 | diag; return 1; }
	echo "$out" | grep reversing | diag
	patches_applied "$src" 0 || return 1
	# Configured in the same tree as the build with them, under its key.
	bdir=$(echo "$out" | tail -n 1)
	if [ "$bdir" = "$fresh_build" ] || [ ! -L "$bdir" ] ||
		[ "$(readlink -f "$bdir")" != "$(readlink -f "$fresh_build")" ]; then
		msg "not configured in the tree of $fresh_build: $bdir"
		return 1
	fi
	[ -z "$(find "$src/.kverbs-patches" -name '*.patch')" ] || { msg "reversed patches still recorded"; return 1; }
	out=$(XDG_CACHE_HOME=$cache "$top/tools/build-kernel.sh" --configure-only 2>&1) ||
		{ echo "$out" | tail -n 30 | diag; return 1; }
	patches_applied "$src" 1
}

# patches_applied SRC 1|0: every patch of tools/patches is (1) or is not (0)
# applied in SRC (it reverses, or it applies, without a fault).
patches_applied() {
	local p rev
	for p in "$top"/tools/patches/*.patch; do
		rev=()
		[ "$2" = 1 ] && rev=(-R)
		patch -s --dry-run "${rev[@]}" -p1 -d "$1" <"$p" >/dev/null 2>&1 ||
			{ msg "$(basename "$p") is $([ "$2" = 1 ] && echo not) applied in $1"; return 1; }
	done
}

# A fragment option that olddefconfig drops must stop the build, naming it.
build_kernel_lost_option_fails() {
	local out
	cat "$top/tools/testing/selftests/kverbs/config" >"$tmp/frag"
	echo CONFIG_KVERBS_NO_SUCH_OPTION=y >>"$tmp/frag"
	out=$(XDG_CACHE_HOME=$cache KVERBS_CONFIG=$tmp/frag \
		"$top/tools/build-kernel.sh" --configure-only 2>&1) && { msg "succeeded"; return 1; }
	echo "$out" | diag
	grep -qxF "kverbs: config lost: CONFIG_KVERBS_NO_SUCH_OPTION=y" <<<"$out" &&
		echo "$out" | tail -n 1 | grep -q "does not match"
}

# A build that holds the kernel's lock in the cache is waited for, not raced.
build_kernel_waits_for_held_lock() {
	local out start=$SECONDS
	flock "$cache/kverbs/.lock-6.12" sleep 5 &
	sleep 1
	out=$(XDG_CACHE_HOME=$cache "$top/tools/build-kernel.sh" --configure-only 2>&1) ||
		{ echo "$out" | tail -n 30 | diag; return 1; }
	wait
	echo "$out" | diag
	grep -q "another build holds .*waiting" <<<"$out" || return 1
	[ $((SECONDS - start)) -ge 4 ] || { msg "did not wait"; return 1; }
}

# Another kernel's build (.ci/run builds 7.3's beside 6.12's) does not
# hold this one up: a 7.3 build stopped in its unpack (its tarball is a FIFO
# nobody writes yet) holds its lock while the 6.12 kernel is configured.
build_kernel_other_kernels_build_not_waited_for() {
	local out rc pid cpid
	mkfifo "$tmp/k73.tar.xz"
	XDG_CACHE_HOME=$cache KVERBS_KERNEL=7.3 KVERBS_KERNEL_TARBALL=$tmp/k73.tar.xz \
		"$top/tools/build-kernel.sh" >"$tmp/k73.out" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		grep -q unpacking "$tmp/k73.out" && break
		sleep 0.1
	done
	# The configure takes 1-2 minutes beside a make check; how long is not
	# the question, whether it waits for the 7.3 lock is: its message says
	# so at once. The timeout only ends a hang.
	XDG_CACHE_HOME=$cache timeout 900 "$top/tools/build-kernel.sh" --configure-only \
		>"$tmp/k612.out" 2>&1 &
	cpid=$!
	while kill -0 "$cpid" 2>/dev/null; do
		if grep -q "another build holds" "$tmp/k612.out"; then
			kill "$cpid"
			break
		fi
		sleep 1
	done
	wait "$cpid"
	rc=$?
	out=$(cat "$tmp/k612.out")
	# The 7.3 unpack reads an empty archive and fails: tar opens the FIFO
	# more than once, so each open gets a writer until the build has ended.
	for _ in $(seq 30); do
		kill -0 "$pid" 2>/dev/null || break
		# shellcheck disable=SC2016 # $1 is the inner shell's
		timeout 1 sh -c ': >"$1"' sh "$tmp/k73.tar.xz"
	done
	wait "$pid"
	echo "$out" | diag
	grep -q unpacking "$tmp/k73.out" || { msg "the 7.3 build did not reach its unpack"; return 1; }
	! grep -q "another build holds" <<<"$out" || { msg "6.12 waited for the 7.3 build's lock"; return 1; }
	[ $rc -eq 0 ] || { msg "configuring 6.12 failed or timed out (status $rc)"; return 1; }
}

# configure_flavor FLAVOR: configures that flavor in the test cache and
# sets bdir to its build directory, which must be FLAVOR-build-*.
configure_flavor() {
	local out
	out=$(XDG_CACHE_HOME=$cache KVERBS_FLAVOR=$1 "$top/tools/build-kernel.sh" --configure-only 2>&1) ||
		{ echo "$out" | tail -n 30 | diag; return 1; }
	echo "$out" | diag
	bdir=$(echo "$out" | tail -n 1)
	case "$bdir" in
	*/"$1"-build-*) ;;
	*) msg "not a $1 build directory: $bdir"; return 1 ;;
	esac
}

# The performance flavor (tools/bench/config over the fragment): no debug
# option survives, what the tests need stays, and the debug build of the
# same cache is neither moved nor removed.
build_kernel_perf_flavor_has_no_debug_options() {
	local bdir opt
	configure_flavor perf || return 1
	for opt in CONFIG_KASAN CONFIG_PROVE_LOCKING CONFIG_DEBUG_KMEMLEAK CONFIG_DEBUG_OBJECTS \
		CONFIG_FAULT_INJECTION CONFIG_RUST_DEBUG_ASSERTIONS CONFIG_DEBUG_LIST; do
		! grep -q "^$opt=y" "$bdir/.config" || { msg "$opt is on"; return 1; }
	done
	for opt in CONFIG_RUST=y CONFIG_RDMA_RXE=y CONFIG_INFINIBAND_USER_ACCESS=y CONFIG_VIRTIO_NET=y; do
		grep -qxF "$opt" "$bdir/.config" || { msg "$opt missing"; return 1; }
	done
	if [ -z "${fresh_build:-}" ] || [ ! -f "$fresh_build/.config" ]; then
		msg "the debug build '${fresh_build:-}' is gone"
		return 1
	fi
}

# The trace flavor (make bench KVERBS_BENCH_FLAVOR=trace): the same
# configuration as the performance kernel, from a copy of the source with
# tools/bench/rxe-trace.patch applied; the unpacked source stays as it was.
build_kernel_trace_flavor_patches_a_copy() {
	local out bdir perf f
	configure_flavor trace || return 1
	perf=("$cache"/kverbs/perf-build-*/)
	[ -f "${perf[0]}/.config" ] || { msg "no performance kernel configured to compare with"; return 1; }
	if ! out=$(diff <(grep '^CONFIG_' "${perf[0]}/.config") <(grep '^CONFIG_' "$bdir/.config")); then
		echo "$out" | diag
		msg "its configuration differs from the performance kernel's"
		return 1
	fi
	for f in rxe_req.c rxe_comp.c rxe_resp.c; do
		grep -q 'rxe-trace:' "$cache/kverbs/linux-$kver-rxe-trace/drivers/infiniband/sw/rxe/$f" ||
			{ msg "$f is not instrumented"; return 1; }
		! grep -q 'rxe-trace:' "$cache/kverbs/linux-$kver/drivers/infiniband/sw/rxe/$f" ||
			{ msg "the unpacked source's $f was patched"; return 1; }
	done
}

# --- shellcheck -----------------------------------------------------------

# The files of the tree: git's (tracked, and untracked but not ignored), or
# every file outside a checkout.
list_files() {
	if git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
		git -C "$top" ls-files -co --exclude-standard
	else
		(cd "$top" && find . -type f | sed 's|^\./||')
	fi
}

shell_scripts() {
	local f
	list_files |
		while IFS= read -r f; do
			case "$f" in
			*.sh) echo "$f" ;;
			*.*) ;;
			*) head -n 1 "$top/$f" 2>/dev/null | grep -qE '^#!.*(/|env )(ba|da)?sh( |$)' && echo "$f" ;;
			esac
		done
}

shellcheck_clean_all_scripts() {
	local scripts
	command -v shellcheck >/dev/null || { msg "shellcheck is not installed (tools/setup.sh)"; return 1; }
	mapfile -t scripts < <(shell_scripts)
	msg "${#scripts[@]} scripts"
	[ "${#scripts[@]}" -ge 20 ] || { msg "too few scripts found"; return 1; }
	(cd "$top" && shellcheck -x "${scripts[@]}") | diag
	[ "${PIPESTATUS[0]}" = 0 ]
}

# --- compile_fail examples of the layer -------------------------------------

# Writes each example of rust/ into $tmp/cf/N.rs (hidden "# " lines shown)
# and its expected error code into $tmp/cf/N.code; prints "N file:line".
extract_compile_fail() {
	local sources
	mapfile -t sources < <(list_files | grep -E '^rust/.*\.rs$' | sed "s|^|$top/|")
	mkdir -p "$tmp/cf"
	awk -v dir="$tmp/cf" '
		match($0, /^[ \t]*\/\/[\/!] ?/) {
			line = substr($0, RLENGTH + 1)
			if (!inside && line ~ /^```compile_fail,E[0-9]+/) {
				inside = 1; n++
				code = line; sub(/^```compile_fail,/, "", code)
				print code > (dir "/" n ".code"); close(dir "/" n ".code")
				printf "" > (dir "/" n ".rs")
				print n " " FILENAME ":" FNR
				next
			}
			if (inside && line ~ /^```/) { inside = 0; close(dir "/" n ".rs"); next }
			if (inside) {
				sub(/^# ?/, "", line)
				print line >> (dir "/" n ".rs")
			}
			next
		}
		{ inside = 0 }' "${sources[@]}"
}

# cf_build SRC: builds SRC as a module of the kverbs_example crate (its
# object only: no module is linked) in a copy of the tree; the output in
# $tmp/cf/out.
cf_build() {
	local src=$1 kdir
	kdir=$("$top/tools/build-kernel.sh" 2>/dev/null | tail -n 1)
	{
		echo "// SPDX-License-Identifier: GPL-2.0"
		echo "#![allow(dead_code, unused_imports)]"
		echo "use kernel::prelude::*;"
		echo "// --- the example"
		cat "$src"
	} >"$tmp/tree/samples/kverbs_example/kverbs_cf.rs"
	make -C "$kdir" M="$tmp/tree" LLVM=-19 RUSTC=/usr/bin/rustc BINDGEN=bindgen \
		samples/kverbs_example/kverbs_example.o >"$tmp/cf/out" 2>&1
}

cf_tree() {
	[ -d "$tmp/tree" ] && return 0
	mkdir -p "$tmp/tree"
	(cd "$top" && list_files | grep -vE '^tools/' | tar -cf - -T -) |
		tar -C "$tmp/tree" -xf - || return 1
	printf 'mod kverbs_cf;\n' \
		>>"$tmp/tree/samples/kverbs_example/kverbs_example.rs"
}

# The scaffolding builds a good example: a failure below is the example's.
compile_fail_control_builds() {
	cf_tree || return 1
	cat >"$tmp/cf/control.rs" <<'RS'
use kverbs::qp::{Cancel, Qp, Rts, WrId};
fn f(qp: &Qp<Rts>, id: WrId, c: &Cancel) -> Result {
    qp.wait(id, 100, c)?;
    Ok(())
}
RS
	cf_build "$tmp/cf/control.rs" || { tail -n 30 "$tmp/cf/out" | diag; return 1; }
}

compile_fail_case() {
	local n=$1 code
	code=$(cat "$tmp/cf/$n.code")
	cf_build "$tmp/cf/$n.rs" && { msg "example $n built"; return 1; }
	grep -E "^error" "$tmp/cf/out" | head -n 3 | diag
	grep -q "^error\[$code\]" "$tmp/cf/out" || { msg "no error $code"; tail -n 20 "$tmp/cf/out" | diag; return 1; }
	# The error is in the example, not in the scaffolding or the layer.
	grep -A3 "^error\[$code\]" "$tmp/cf/out" | grep -q "kverbs_example/kverbs_cf.rs" ||
		{ msg "error $code is not in the example"; return 1; }
}

# --- make check on a broken guest -----------------------------------------

# The guests of these cases boot without kmemleak (KVERBS_KMEMLEAK=0,
# tools/vm/run.sh): they test how make check reports a broken guest or
# program, never a leak, and kmemleak's two scans a guest were most of
# their time.

# vm_broken BREAK WANT [VAR=VALUE...]: make check with KVERBS_BREAK=BREAK
# (and those variables) fails, its last line has failures, and it says WANT.
# The harness's guests have one vCPU and a long bound (these cases test the
# harness, beside make check in .ci/run: at 600 s and two vCPUs the guest
# of vm_guests_one_dies_make_check_fails_with_reason, starved, took 197 s
# to boot and timed out inside its second program, 2026-11-26).
vm_broken() {
	local out status brk=$1 want=$2 prog=kverbs_module.sh
	shift 2
	# Modules that fail to load: a short program will do (with
	# kverbs_module.sh, whose cases try 40 loads, this case took 84 s
	# alone and 803 s beside .ci/run's other steps, 2026-11-27).
	[ "$brk" = module ] && prog=kverbs_apm.sh
	out=$(cd "$top" && env KVERBS_BREAK="$brk" KVERBS_TWO_HOSTS=0 KVERBS_TESTS=$prog KVERBS_KMEMLEAK=0 \
		KVERBS_VM_DIR="$tmp/vm-$brk" KVERBS_VM_TIMEOUT=1200 KVERBS_VM_SMP=1 "$@" make -s check 2>&1)
	status=$?
	echo "$out" | grep -E '^kverbs|passed|failed|^not ok|^ok|insmod' | tail -n 15 | diag
	cp "$tmp/vm-$brk/check.log" "$tmp/vm-$brk.log" 2>/dev/null
	[ $status -ne 0 ] || { msg "make check succeeded"; return 1; }
	echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1 |
		grep -qE '^[0-9]+ passed, [1-9][0-9]* failed' || { msg "no failure counted"; return 1; }
	grep -q -- "$want" <<<"$out" || { msg "does not say '$want'"; return 1; }
}

# --- make check's guests side by side --------------------------------------

all_progs() {
	make -s --no-print-directory -C "$top/tools/testing/selftests/kverbs" print-progs
}

# plan_ok GUESTS OUT PROGS...: OUT (plan-guests.sh's) gives each program
# exactly once: to the first guest (its line "peer|solo PROG...", in the
# order given), with the peer programs (if any, and then "peer") and those
# that run on two vCPUs (plan-guests.sh --smp: the exerciser, the
# self-test, the benchmark); to the timed list (its line "timed PROG...":
# the other programs bound in time, longest first by
# tools/vm/program-times, ties in the order given); or to the queue the
# guests take from (its line "queue PROG...", the light programs, then
# those that move data, each part longest first); one guest alone has
# neither list; kverbs_forget.sh, if given, last of all: at the end of the
# first guest's line, or after the lists (a last line, "last
# kverbs_forget.sh", for the first guest to find both empty).
plan_ok() {
	local guests=$1 out=$2 p kind line first timed queue last want_peer=0 want smp
	shift 2
	echo "$out" | diag
	first=$(echo "$out" | sed -n 1p)
	timed=$(echo "$out" | grep '^timed ') queue=$(echo "$out" | grep '^queue ') last=$(echo "$out" | grep '^last ')
	[ "$(echo "$out" | sed 1d | grep -cvE '^(timed|queue|last) ')" = 0 ] || { msg "a line of no list"; return 1; }
	[ "$(echo "$out" | sed 1d | cut -d' ' -f1 | paste -sd' ')" = "$(echo "${timed:+timed} ${queue:+queue} ${last:+last}" | xargs)" ] ||
		{ msg "the lists not once each, in the order timed, queue, last"; return 1; }
	[[ $first == peer* || $first == solo* ]] || { msg "the first line is not the first guest's"; return 1; }
	[ "$guests" -gt 1 ] || [ -z "$queue$timed" ] || { msg "a timed list or a queue for one guest"; return 1; }
	[ "$(echo "$out" | cut -s -d' ' -f2- | tr ' ' '\n' | sed '/^$/d' | sort)" = "$(printf '%s\n' "$@" | sort)" ] ||
		{ msg "not every program exactly once"; return 1; }
	if printf '%s\n' "$@" | grep -qx kverbs_forget.sh; then
		if [ -n "$queue$timed" ]; then
			[ "$last" = "last kverbs_forget.sh" ] || { msg "kverbs_forget.sh not last after the lists"; return 1; }
		else
			if [ -n "$last" ] || [[ $first != *" kverbs_forget.sh" ]]; then
				msg "kverbs_forget.sh not last in the first guest's line"
				return 1
			fi
			first=${first% kverbs_forget.sh}
		fi
	else
		[ -z "$last" ] || { msg "a last line without kverbs_forget.sh"; return 1; }
	fi
	read -r kind line <<<"$first"
	[ "$(printf '%s\n' "$@" | grep -xF -f <(echo "$line" | tr ' ' '\n'))" = "$(echo "$line" | tr ' ' '\n' | sed '/^$/d')" ] ||
		{ msg "the first guest's programs not in the order given"; return 1; }
	for p in "$@"; do
		case $p in kverbs_two_hosts.sh | kverbs_srq_manual.sh | kverbs_nvme_two_hosts.sh) want_peer=1 ;; esac
	done
	[ "${KVERBS_TWO_HOSTS:-1}" = 1 ] || want_peer=0
	[ "$kind" = "$([ $want_peer = 1 ] && echo peer || echo solo)" ] || { msg "peer or not: wrong"; return 1; }
	smp=" $("$top/tools/vm/plan-guests.sh" --smp) "
	[ "$smp" = " kverbs_exerciser.sh kverbs_soundness.sh kverbs_bench.sh kverbs_nvme_two_hosts.sh " ] || { msg "two vCPUs for:$smp"; return 1; }
	for p in "$@"; do
		case $p in
		kverbs_forget.sh) continue ;;
		kverbs_two_hosts.sh) [ $want_peer = 1 ] && want=first || want=timed ;;
		kverbs_srq_manual.sh) [ $want_peer = 1 ] && want=first || want=queue ;;
		kverbs_exerciser.sh | kverbs_soundness.sh | kverbs_bench.sh | kverbs_nvme_two_hosts.sh) want=first ;;
		kverbs_apm.sh | kverbs_hardening.sh | kverbs_mcast.sh) want=timed ;;
		*) want=queue ;;
		esac
		[ "$guests" = 1 ] && want=first
		case $want in
		first) [[ " $line " == *" $p "* ]] || { msg "$p is not the first guest's"; return 1; } ;;
		timed) [[ " ${timed#timed} " == *" $p "* ]] || { msg "$p is not in the timed list"; return 1; } ;;
		queue) [[ " ${queue#queue} " == *" $p "* ]] || { msg "$p is not in the queue"; return 1; } ;;
		esac
	done
	# The timed list: longest first; the queue: the light programs, then
	# those that move data, each longest first; ties in the order given.
	order_ok "timed list" 0 "${timed#timed}" "$@" && order_ok queue 1 "${queue#queue}" "$@"
}

# order_ok NAME BY_DATA LIST PROGS...: the programs of LIST are longest
# first by tools/vm/program-times (with BY_DATA, the light ones first,
# then those that move data, each longest first), ties in the order of
# PROGS.
order_ok() {
	local name=$1 by_data=$2 list=$3 p t data prev='' pd pt pp
	shift 3
	for p in $list; do
		t=$(awk -v p="$p" '$1 == p { print $2 }' "$top/tools/vm/program-times")
		data=0
		if [ "$by_data" = 1 ]; then
			case $p in
			kverbs_rc.sh | kverbs_rc_tcp.sh | kverbs_rping.sh | kverbs_srq.sh | kverbs_matrix.sh | kverbs_nvme_target.sh) data=1 ;;
			esac
		fi
		if [ -n "$prev" ]; then
			read -r pd pt pp <<<"$prev"
			[ "$data" -gt "$pd" ] || { [ "$data" = "$pd" ] && { [ "$t" -lt "$pt" ] || { [ "$t" = "$pt" ] &&
				[ "$(printf '%s\n' "$@" | grep -nxF -e "$pp" -e "$p" | head -n 1 | cut -d: -f2)" = "$pp" ]; }; }; } ||
				{ msg "the $name is not in its order: $p after $pp"; return 1; }
		fi
		prev="$data $t $p"
	done
}

guests_plan_shares_programs_peer_on_one() {
	local g
	mapfile -t progs < <(all_progs | tr ' ' '\n')
	for g in 1 2 3; do
		plan_ok "$g" "$("$top/tools/vm/plan-guests.sh" "$g" "${progs[@]}")" "${progs[@]}" || return 1
	done
	KVERBS_TWO_HOSTS=0 plan_ok 2 "$(KVERBS_TWO_HOSTS=0 "$top/tools/vm/plan-guests.sh" 2 "${progs[@]}")" "${progs[@]}" ||
		return 1
	# No program of the first guest's own: it only takes from the queue.
	plan_ok 3 "$("$top/tools/vm/plan-guests.sh" 3 kverbs_info.sh kverbs_events.sh)" kverbs_info.sh kverbs_events.sh ||
		return 1
	# The last program given first: still last, with a queue and without.
	plan_ok 2 "$("$top/tools/vm/plan-guests.sh" 2 kverbs_forget.sh kverbs_info.sh kverbs_apm.sh)" \
		kverbs_forget.sh kverbs_info.sh kverbs_apm.sh || return 1
	# A timed list and no queue; only the first guest's own programs.
	plan_ok 2 "$("$top/tools/vm/plan-guests.sh" 2 kverbs_apm.sh kverbs_forget.sh)" kverbs_apm.sh kverbs_forget.sh ||
		return 1
	plan_ok 2 "$("$top/tools/vm/plan-guests.sh" 2 kverbs_bench.sh kverbs_forget.sh)" kverbs_bench.sh kverbs_forget.sh ||
		return 1
	plan_ok 1 "$("$top/tools/vm/plan-guests.sh" 1 kverbs_forget.sh kverbs_info.sh kverbs_apm.sh)" \
		kverbs_forget.sh kverbs_info.sh kverbs_apm.sh
}

# split_log LOG N G: guest G's console log had the N guests of a run shared
# LOG's programs round robin: its programs' blocks renumbered, its own plan.
split_log() {
	awk -v n="$2" -v g="$3" '
	/^1\.\.[0-9]+$/ && !plan { plan = 1; next }
	/^# selftests: kverbs: / { k++; mine = ((k - 1) % n == g - 1); if (mine) m++ }
	/^kverbs-vm: done$/ { done = 1; next }
	!plan { next }
	mine && /^(not )?ok [0-9]+ selftests: kverbs: / { sub(/ok [0-9]+ /, "ok " m " "); blk = blk $0 "\n"; mine = 0; next }
	mine { blk = blk $0 "\n" }
	END {
		print "kverbs-boot: 30.0 s"; print "TAP version 13"; print "1.." m
		printf "%s", blk
		if (done) print "kverbs-vm: done"
	}' "$1"
}

# The clean run's log split between two guests and merged back: the same
# totals, the same programs in the same order, as one guest's.
guests_merge_split_run_same_totals() {
	local log=$here/logs/clean.log order one two
	order=$(sed -n 's/^# selftests: kverbs: //p' "$log" | tr '\n' ' ')
	split_log "$log" 2 1 >"$tmp/g1.log"
	split_log "$log" 2 2 >"$tmp/g2.log"
	"$top/tools/vm/ktap-merge.sh" "$tmp/merged.log" "$order" \
		"$tmp/g1.log:$(sed -n 's/^# selftests: kverbs: //p' "$tmp/g1.log" | paste -sd,)" \
		"$tmp/g2.log:$(sed -n 's/^# selftests: kverbs: //p' "$tmp/g2.log" | paste -sd,)" >"$tmp/merge.out" ||
		{ msg "ktap-merge.sh failed"; return 1; }
	[ -s "$tmp/merge.out" ] && { diag <"$tmp/merge.out"; msg "it reported a problem"; return 1; }
	one=$("$top/tools/vm/ktap-totals.sh" "$log" 9 | grep -v '^kverbs-time')
	two=$("$top/tools/vm/ktap-totals.sh" "$tmp/merged.log" 9 | grep -v '^kverbs-time')
	echo "$two" | diag
	[ "$one" = "$two" ] || { msg "merged totals differ from one guest's:"; diff <(echo "$one") <(echo "$two") | diag; return 1; }
	grep -q '^kverbs-boot: 30.0 s (guest 2)$' "$tmp/merged.log" || { msg "no boot line of guest 2"; return 1; }
	"$top/tools/vm/ktap-totals.sh" "$tmp/merged.log" 9 | grep -q '2 boot(s) 60 s' || { msg "boots not summed"; return 1; }
}

# kml_block PROG... FAILED: the block of kverbs_kmemleak.sh in a guest that
# ran PROG...: one kmemleak_clean_ case each, FAILED's failed; 12.5 s.
kml_block() {
	local i=0 n=$(($# - 1)) failed=${*: -1} p
	echo "# selftests: kverbs: kverbs_kmemleak.sh"
	echo "# TAP version 13"
	echo "# 1..$n"
	for p in "${@:1:n}"; do
		i=$((i + 1))
		echo "# # kmemleak_clean_${p%.sh}: 0.1 s"
		if [ "$p" = "$failed" ]; then echo "# not ok $i kmemleak_clean_${p%.sh}"; else echo "# ok $i kmemleak_clean_${p%.sh}"; fi
	done
	if [ -n "$failed" ]; then
		echo "# # Totals: pass:$((n - 1)) fail:1 xfail:0 xpass:0 skip:0 error:0"
		echo "# kverbs-time: kverbs_kmemleak.sh 12.5 busy 100 slept 0.0 user 3 procs 20"
		echo "not ok 9 selftests: kverbs: kverbs_kmemleak.sh # exit=1"
	else
		echo "# # Totals: pass:$n fail:0 xfail:0 xpass:0 skip:0 error:0"
		echo "# kverbs-time: kverbs_kmemleak.sh 12.5 busy 100 slept 0.0 user 3 procs 20"
		echo "ok 9 selftests: kverbs: kverbs_kmemleak.sh"
	fi
}

# Each guest ends with its kverbs_kmemleak.sh (tools/vm/guest-init.sh),
# the kmemleak cases of the programs it ran: the merge keeps each guest's
# (kverbs_kmemleak.sh@G in the order, after the programs), the totals count
# their cases, the programs and kmemleak's time are both guests', and a
# leak fails the case named for its program.
guests_merge_kmemleak_block_per_guest() {
	local log=$here/logs/clean.log order out status n g progs one kml
	order=$(sed -n 's/^# selftests: kverbs: //p' "$log" | tr '\n' ' ')
	n=$(wc -w <<<"$order")
	for g in 1 2; do
		split_log "$log" 2 $g | sed '/^kverbs-vm: done$/d' >"$tmp/k$g.log"
		read -r -a progs <<<"$(sed -n 's/^# selftests: kverbs: //p' "$tmp/k$g.log" | paste -sd' ')"
		{
			kml_block "${progs[@]}" "$([ $g = 2 ] && echo "${progs[1]}")"
			echo "kverbs-vm: done"
		} >>"$tmp/k$g.log"
	done
	out=$("$top/tools/vm/ktap-merge.sh" "$tmp/kmerged.log" "$order kverbs_kmemleak.sh@1 kverbs_kmemleak.sh@2" \
		"$tmp/k1.log:a.sh" "$tmp/k2.log:b.sh") || { msg "ktap-merge.sh failed"; return 1; }
	[ -z "$out" ] || { diag <<<"$out"; msg "it reported a problem"; return 1; }
	[ "$(grep -c '^# selftests: kverbs: kverbs_kmemleak.sh$' "$tmp/kmerged.log")" = 2 ] ||
		{ msg "not both guests' kverbs_kmemleak.sh"; return 1; }
	if ! grep -qxF "ok $((n + 1)) selftests: kverbs: kverbs_kmemleak.sh" "$tmp/kmerged.log" ||
		! grep -qxF "not ok $((n + 2)) selftests: kverbs: kverbs_kmemleak.sh # exit=1" "$tmp/kmerged.log"; then
		msg "the two blocks are not numbered after the programs, guest 1's first"
		return 1
	fi
	out=$("$top/tools/vm/ktap-totals.sh" "$tmp/kmerged.log" $((n + 2)))
	status=$?
	echo "$out" | diag
	[ "$status" = 1 ] || { msg "status $status"; return 1; }
	grep -qxF "kverbs: kverbs_kmemleak.sh: case failed: kmemleak_clean_${progs[1]%.sh}" <<<"$out" ||
		{ msg "the leak is not named for its program"; return 1; }
	# The clean run's (its programs' own kmemleak cases) and 12.5 s a block.
	one=$("$top/tools/vm/ktap-totals.sh" "$log" "$n")
	kml=$(sed -n 's/.*; kmemleak checks \([0-9]*\) s;.*/\1/p' <<<"$one")
	grep -q "; kmemleak checks $((kml + 25)) s; " <<<"$out" || { msg "kmemleak's time is not $kml s and the two blocks' 25 s"; return 1; }
	# Every program's case and the kmemleak cases: the clean run's passes,
	# and one kmemleak case a program, less the one failed.
	one=$(tail -n 1 <<<"$one")
	[ "$(tail -n 1 <<<"$out")" = "$((${one%% *} + n - 1)) passed, 1 failed" ] ||
		{ msg "totals: want $((${one%% *} + n - 1)) passed, 1 failed"; return 1; }
}

# Guest 2 died inside its second program: that program and the rest of
# guest 2's count as failed, and the guest is named with its log.
guests_merge_dead_guest_counted() {
	local log=$here/logs/clean.log order out status
	order=$(sed -n 's/^# selftests: kverbs: //p' "$log" | tr '\n' ' ')
	split_log "$log" 2 1 >"$tmp/g1.log"
	# Guest 2 (programs 2, 4, 6, 8) stops after 3 cases of program 4.
	split_log "$log" 2 2 | awk '/^# selftests: kverbs: / { k++ } k == 2 && /^# ok / { c++ } { print } k == 2 && c == 3 { exit }' >"$tmp/g2.log"
	out=$("$top/tools/vm/ktap-merge.sh" "$tmp/merged.log" "$order" "$tmp/g1.log:a.sh" "$tmp/g2.log:b.sh,c.sh")
	echo "$out" | diag
	grep -qxF "kverbs: guest 2 (b.sh,c.sh): the VM did not finish (crash, panic or timeout; console log: $tmp/g2.log)" <<<"$out" ||
		{ msg "guest 2 not named"; return 1; }
	out=$("$top/tools/vm/ktap-totals.sh" "$tmp/merged.log" 9)
	status=$?
	echo "$out" | diag
	[ "$status" = 1 ] || { msg "status $status"; return 1; }
	grep -q ': the VM stopped inside it after 3 of ' <<<"$out" || return 1
	grep -qxF 'kverbs: 2 of 9 test programs never ran' <<<"$out" || return 1
	grep -qxF 'kverbs: the VM did not finish (crash, panic or timeout)' <<<"$out" || return 1
	echo "$out" | tail -n 1 | grep -qE '^[0-9]+ passed, [1-9][0-9]* failed' || return 1
}

# No guest got to its tests (each died at boot): the merge still writes a
# log in which every program is counted as failed, each guest named.
guests_merge_no_guest_booted() {
	local out status
	echo "[    0.000000] Linux version 6.12, then the guest died" >"$tmp/d1.log"
	: >"$tmp/d2.log"
	out=$("$top/tools/vm/ktap-merge.sh" "$tmp/dead.log" "a.sh b.sh" "$tmp/d1.log:no program" "$tmp/d2.log:no program")
	status=$?
	echo "$out" | diag
	[ "$status" = 0 ] || { msg "the merge failed (status $status)"; return 1; }
	for g in 1 2; do
		grep -qxF "kverbs: guest $g (no program): the VM printed no test plan: it died before the tests started (console log: $tmp/d$g.log)" <<<"$out" ||
			{ msg "guest $g not named"; return 1; }
	done
	out=$("$top/tools/vm/ktap-totals.sh" "$tmp/dead.log" 2)
	status=$?
	echo "$out" | diag
	[ "$status" = 1 ] || { msg "status $status"; return 1; }
	echo "$out" | tail -n 1 | grep -qxE '0 passed, [2-9][0-9]* failed' || { msg "not every program failed"; return 1; }
}

# vm_guests BREAK LAST WANT... [-- VAR=VALUE...]: make check of two
# programs on two guests (KVERBS_GUESTS=2) with KVERBS_BREAK=BREAK fails,
# its totals line matches LAST (an extended regular expression) and it
# says each WANT line.
vm_guests() {
	local brk=$1 last=$2 out want=() vars=()
	shift 2
	while [ $# -gt 0 ] && [ "$1" != -- ]; do want+=("$1"); shift; done
	[ $# -gt 0 ] && shift
	vars=("$@")
	out=$(cd "$top" && env KVERBS_BREAK="$brk" KVERBS_TWO_HOSTS=0 KVERBS_GUESTS=2 KVERBS_KMEMLEAK=0 \
		KVERBS_TESTS="kverbs_minimal.sh kverbs_info.sh" KVERBS_VM_DIR="$tmp/vm-guests-$brk" \
		KVERBS_VM_TIMEOUT=1500 KVERBS_VM_SMP=1 "${vars[@]}" make -s check 2>&1) && { msg "make check succeeded"; return 1; }
	echo "$out" | grep -E '^kverbs|passed|failed|^g[0-9]\||^kverbs_' | tail -n 20 | diag
	# The totals' line (make's own error line comes after it).
	echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1 | grep -qxE -- "$last" ||
		{ msg "totals line, want /$last/"; return 1; }
	for w in "${want[@]}"; do
		grep -qxF -- "$w" <<<"$out" || { msg "does not say '$w'"; return 1; }
	done
}

# --- kverbs_lib.sh's kmemleak filter -------------------------------------

# kv_kmemleak_objects_before on a report of six objects recorded in a
# 7.3 guest (kverbs_forget.sh): three allocated by jiffies 4295023683, three
# at 4295039773; split at 4295039000, each side has its three objects,
# whole (the header line, then its comm, hex dump and backtrace lines).
kmemleak_filter_splits_by_allocation_jiffies() {
	local rep=$here/kmemleak/report.txt before after fn
	fn=$(sed -n '/^kv_kmemleak_objects_before() {/,/^}/p' "$top/tools/testing/selftests/kverbs/kverbs_lib.sh")
	[ -n "$fn" ] || { msg "no kv_kmemleak_objects_before in kverbs_lib.sh"; return 1; }
	eval "$fn"
	before=$(kv_kmemleak_objects_before 4295039000 <"$rep")
	after=$(kv_kmemleak_objects_before 4295039000 after <"$rep")
	[ "$(grep -c '^unreferenced object' <<<"$before")" = 3 ] || { msg "before: want 3 objects"; diag <<<"$before"; return 1; }
	[ "$(grep -c '^unreferenced object' <<<"$after")" = 3 ] || { msg "after: want 3 objects"; diag <<<"$after"; return 1; }
	[ "$(grep -c ' jiffies 4295039773$' <<<"$after")" = 3 ] || { msg "after: not the three of 4295039773"; return 1; }
	[ "$(grep -c ' jiffies 4295039773$' <<<"$before")" = 0 ] || { msg "before: has one of 4295039773"; return 1; }
	[ "$(($(wc -l <<<"$before") + $(wc -l <<<"$after")))" = "$(wc -l <"$rep")" ] ||
		{ msg "the two sides do not add up to the report's lines"; return 1; }
	head -n 1 <<<"$after" | grep -qx 'unreferenced object 0xff1100003f4a2f80 (size 32):' ||
		{ msg "after does not begin with the object's header"; return 1; }
	[ -z "$(kv_kmemleak_objects_before 4295039773 after <"$rep")" ] ||
		{ msg "an object allocated at the jiffies given counted as after"; return 1; }
}

# kverbs_kmemleak.sh's split_report on the same report: each object goes,
# whole, to the window whose end is the first at or after its allocation
# (an end equal to its jiffies holds it), the last window takes whatever is
# later, and a window with none has no file.
kmemleak_split_gives_each_object_its_window() {
	local rep=$here/kmemleak/report.txt fn SPLIT WINDOWS counts f
	fn=$(sed -n '/^split_report() {/,/^}/p' "$top/tools/testing/selftests/kverbs/kverbs_kmemleak.sh")
	[ -n "$fn" ] || { msg "no split_report in kverbs_kmemleak.sh"; return 1; }
	eval "$fn"
	SPLIT=$tmp/split WINDOWS=$tmp/windows
	# want WINDOWS... -- COUNTS: the objects of each window's file ("-" none).
	want() {
		local w=() c=() i
		while [ "$1" != -- ]; do w+=("$1"); shift; done
		shift
		printf '%s\n' "${w[@]}" >"$WINDOWS"
		split_report "$rep" || { msg "split_report failed"; return 1; }
		for i in "${!w[@]}"; do
			f=$SPLIT/$((i + 1))
			if [ -e "$f" ]; then c+=("$(grep -c '^unreferenced object' "$f")"); else c+=(-); fi
		done
		counts="${c[*]}"
		[ "$counts" = "$*" ] || { msg "windows ${w[*]}: objects $counts, want $*"; return 1; }
	}
	want "a 4295000000" "b 4295030000" "c 4295035000" "d 4295040000" -- - 3 - 3 || return 1
	want "a 4295000000" "b 4295030000" -- - 6 || return 1
	want "a 4295023683" "b 4295039773" "c 1" -- 3 3 - || return 1
	cat "$SPLIT"/* | cmp -s - "$rep" || { msg "the windows' files are not the report, whole and in order"; return 1; }
}

# --- kverbs_lib.sh's grep -------------------------------------------------

# The test programs' grep (kverbs_lib.sh: done by the shell for the forms
# they use most, else the guest's grep, busybox's) against busybox's grep,
# the guest's, on a file of lines and on stdin: the same status and
# output for every case. The forms the shell does itself run with no grep
# in PATH (so a fall back to grep(1) would fail them); the others with
# busybox's as the only grep, and must fall back.
lib_grep_agrees_with_busybox() {
	local fn tmp in args want got wst gst bad=0 n=0 line src
	command -v busybox >/dev/null || { msg "no busybox on this machine"; return 1; }
	fn=$(awk '/^KV_GREP_LINES=/ { p = 1 } p { print } p && /^kv_bre_to_ere\(\) \{/ { e = 1 } e && /^}$/ { exit }' \
		"$top/tools/testing/selftests/kverbs/kverbs_lib.sh")
	[ -n "$fn" ] || { msg "no grep in kverbs_lib.sh"; return 1; }
	tmp=$(mktemp -d)
	mkdir "$tmp/bin"
	ln -s "$(command -v busybox)" "$tmp/bin/grep"
	in=$tmp/in
	cat >"$in" <<-'EOF'
	result: ok
	validate: ok
	  result: ok
	   4096   100    1.23
	a+b (x) a|b {2} ^x y$z *star
	abc
	aaa
	ab
	[bracket] ]x
	inet 169.254.1.1/24 brd 169.254.1.255
	inet 169x254.1.1/24
	RDMA $probe with the stale rkey
	kverbs 1798344 0 - Live 0xffffffffa0000000
	kverbs_example 1099224 0 - Live 0xffffffffa0200000
	attached: 239.3.0.1 qpn 17
	digits 0123 end
	EOF
	# "S|ARGS..." the shell's own; "F|ARGS..." grep(1)'s (fall back).
	while IFS= read -r line; do
		[ -n "$line" ] || continue
		n=$((n + 1))
		eval "args=(${line#?|})"
		for src in file stdin; do
			if [ $src = file ]; then
				want=$(busybox grep "${args[@]}" "$in" 2>&1); wst=$?
			else
				want=$(busybox grep "${args[@]}" <"$in" 2>&1); wst=$?
			fi
			(
				eval "$fn"
				# shellcheck disable=SC2030,SC2123 # the search path is what differs
				if [ "${line:0:1}" = S ]; then PATH=$tmp/none; else PATH=$tmp/bin:$PATH; fi
				if [ $src = file ]; then grep "${args[@]}" "$in"; else grep "${args[@]}" <"$in"; fi
			) >"$tmp/out" 2>&1
			gst=$?
			got=$(cat "$tmp/out")
			if [ "$gst" != "$wst" ] || [ "$got" != "$want" ]; then
				msg "grep ${line#?|} ($src): status $gst, want $wst"
				diff <(echo "$want") <(echo "$got") | diag
				bad=1
			fi
		done
	done <<-'EOF'
	S|-q 'result: ok'
	S|-q '^result: ok'
	S|-q '^validate: ok$'
	S|-qx 'validate: ok'
	S|-qx 'result'
	S|-c ok
	S|-c '^ *result'
	S|'^kverbs '
	S|-q '^kverbs_minimal '
	S|-qE '^ +4096 +100 '
	S|-q '^ +4096 +100 '
	S|-c 'a+b'
	S|-q '(x)'
	S|-q 'a|b'
	S|-c '{2}'
	S|-q '^x'
	S|-q 'y$z'
	S|-q '*star'
	S|-q '^*star'
	S|-c 'a*b'
	S|-cE 'a+b?'
	S|-E 'a|^ab$'
	S|-E '(ab|aa)a'
	S|-cx 'a*'
	S|-q '[]x]'
	S|-c '[^a-z ]'
	S|-c '[[:digit:]]'
	S|'[[:digit:]][[:digit:]]*$'
	S|-q 'inet 169.254.1.1/24'
	S|-c 'inet 169.254'
	S|-q -- '-x'
	S|-q 'RDMA $probe'
	S|-qE 'x{2}'
	S|-c '^attached: 239.3.0.1 '
	S|-q 'nothing like this'
	S|-c 'nothing like this'
	S|'nothing like this'
	F|-q 'a\|b'
	F|-q '\(x\)'
	F|-c 'ok\.'
	F|-qi 'RESULT'
	F|-m1 ok
	F|-v ok
	F|-qE '('
	F|-q ''
	EOF
	# A missing file and two files: grep(1)'s messages.
	for src in missing two; do
		if [ $src = missing ]; then args=(-q ok "$tmp/missing"); else args=(-c ok "$in" "$in"); fi
		want=$(busybox grep "${args[@]}" 2>&1)
		wst=$?
		# shellcheck disable=SC2030,SC2031 # the search path is what differs
		got=$(eval "$fn" && PATH=$tmp/bin:$PATH && grep "${args[@]}" 2>&1)
		gst=$?
		if [ "$gst" != "$wst" ] || [ "$got" != "$want" ]; then
			msg "grep ${args[*]}: status $gst, want $wst"
			bad=1
		fi
	done
	rm -rf "$tmp"
	[ "$n" -ge 40 ] || { msg "only $n cases read"; return 1; }
	return $bad
}

# --- make bench's report --------------------------------------------------

# report.py on the fixture: the medians of three rounds and their ratios,
# and what the run was measured on (run.env, as bench.sh writes it) in
# every row of both CSV files and in the summary.
bench_report_medians_and_ratios() {
	local d=$tmp/bench-ok on='7.3.4,abc1234,AMD EPYC; 2 CPUs; 24 GiB; QEMU TCG'
	mkdir -p "$d" && cp "$here/bench/bench.log" "$d/" || return 1
	printf '%s\n' kernel=7.3.4 commit=abc1234 'machine=AMD EPYC; 2 CPUs; 24 GiB; QEMU TCG' >"$d/run.env"
	python3 "$top/tools/bench/report.py" "$d" | diag
	[ "${PIPESTATUS[0]}" = 0 ] || { msg "report.py failed"; return 1; }
	# write_bw 64: perftest 4, 6, 5 -> 5; C 5.2, 5, 6 -> 5.2; kverbs 5.5, 5, 6.5 -> 5.5;
	# kverbs poll=direct 4, 5, 6 -> 5;
	# the limit of each round 64 B / max(tx, rx): 1000, 1300, 1100 ns -> 61.035,
	# 46.950, 55.487, the best 61.035 MB/s; on one CPU 64 B / (tx + rx): 1900,
	# 2500, 2100 ns -> the best 32.124.
	grep -qxF "write_bw,1,64,bw_avg_mb_s,5.0,5.2,5.5,5.0,3,0.08192,0.090112,,61.035,32.124,,,,$on" "$d/summary.csv" ||
		{ msg "write_bw row:"; grep write_bw "$d/summary.csv" | diag; return 1; }
	# write_lat 8: t_typical perftest 40, 20, 30 -> 30; kverbs 30, 10, 20 -> 20;
	# kverbs poll=direct 25, 15, 16 -> 16, kverbs / direct 1.25; no C, no limit;
	# the interleaved run (ab=direct): default 22, 11, 30 -> 22, direct 20,
	# 10, 30 -> 20, the rounds' ratios 1.1, 1.1, 1.0: geometric mean
	# 1.21^(1/3) = 1.0656, median 1.1, the default faster in none.
	grep -qxF "write_lat,1,8,t_typical_us,30.0,,20.0,16.0,3,,,,,,22.0,20.0,1.0656,$on" "$d/summary.csv" ||
		{ msg "write_lat row:"; grep write_lat "$d/summary.csv" | diag; return 1; }
	grep -qE '^ +8 +30\.00 +- +20\.00 +0\.67 +- +16\.00 +1\.25$' "$d/summary.txt" ||
		{ msg "no 8-byte latency line with kv direct 16.00 and kv/direct 1.25"; return 1; }
	grep -qE '^ +write_lat +8 +22\.00 +20\.00 +1\.066 +1\.100 +0/3 *$' "$d/summary.txt" ||
		{ msg "no interleaved line: write_lat 8, 22.00 and 20.00, geomean 1.066, median 1.100, faster 0/3"; return 1; }
	grep -qE '^ +64 +5\.00 +5\.20 +5\.50 +1\.10 +1\.06 .* 5\.00 +1\.00 .* 61\.03 +0\.09$' "$d/summary.txt" ||
		{ msg "no 64-byte line with ratios 1.10 and 1.06, kv direct 5.00 (1.00), limit 61.03, kv/limit 0.09"; return 1; }
	grep -qx 'write_bw,1,2,64,4096,1,20000,1200,1300,crc32-generic,46.95,24.414,.*' "$d/limit.csv" ||
		{ msg "limit.csv has not round 2's limit:"; diag <"$d/limit.csv"; return 1; }
	grep -qx 'kernel: 7.3.4; commit: abc1234; machine: AMD EPYC; 2 CPUs; 24 GiB; QEMU TCG' "$d/summary.txt" ||
		{ msg "the summary does not say what the run was measured on"; return 1; }
	[ "$(grep -c '^write_' "$d/raw.csv")" = 27 ] || { msg "raw.csv has not 27 runs"; return 1; }
	[ "$(grep -c ",$on\$" "$d/raw.csv")" = 27 ] || { msg "raw.csv's runs do not all say what they ran on"; return 1; }
}

# A figure above the limit is listed (the model misses something); a limit
# line not understood is a run without a result.
bench_report_figures_above_the_limit_listed() {
	local d=$tmp/bench-limit out
	mkdir -p "$d" || return 1
	sed -E 's/tx_ns [0-9]+ rx_ns [0-9]+/tx_ns 100000 rx_ns 90000/' "$here/bench/bench.log" >"$d/bench.log"
	out=$(python3 "$top/tools/bench/report.py" "$d") || { echo "$out" | diag; msg "report.py failed"; return 1; }
	# 64 B / 100 us = 0.61 MB/s: perftest, C and kverbs (both modes) are all above it.
	grep -qx 'figures above the limit (the model misses something): 4' <<<"$out" ||
		{ echo "$out" | diag; return 1; }
	grep -qx '  write_bw 1 64 kverbs: 5.50 > 0.61' <<<"$out" || { msg "kverbs not named"; return 1; }
	echo "kverbs-bench: limit write_bw 1 64 4 size 64 mtu 4096" >>"$d/bench.log"
	out=$(python3 "$top/tools/bench/report.py" "$d") && { msg "report.py succeeded"; return 1; }
	grep -q "write_bw 1 64 4: a limit line not understood" <<<"$out" ||
		{ echo "$out" | diag; return 1; }
}

# The loops of the 8-QP remote invalid request error are counted per
# implementation with the statuses rxe logged; a failed loop is the finding,
# not a run without a result.
bench_report_inv_req_loops_counted() {
	local d=$tmp/bench-invreq out
	mkdir -p "$d" && cp "$here/bench/bench.log" "$d/" || return 1
	printf 'kverbs-bench: invreq %s\n' 'perftest 1 failed statuses=9' 'perftest 2 ok statuses=none' \
		'kverbs 1 ok statuses=none' 'kverbs 2 failed statuses=9,12' >>"$d/bench.log"
	out=$(python3 "$top/tools/bench/report.py" "$d") || { echo "$out" | diag; msg "report.py failed"; return 1; }
	grep -qx '  perftest        1 of 2 failed; statuses: 9' <<<"$out" || { echo "$out" | diag; return 1; }
	grep -qx '  kverbs          1 of 2 failed; statuses: 9,12' <<<"$out" || { echo "$out" | diag; return 1; }
}

# A run that gave no row makes the report fail, and it is named.
bench_report_counts_runs_without_result() {
	local d=$tmp/bench-fail out
	mkdir -p "$d" && cp "$here/bench/bench.log" "$d/" || return 1
	echo "kverbs-bench: fail send_bw kverbs 1 64 2 (no result row)" >>"$d/bench.log"
	out=$(python3 "$top/tools/bench/report.py" "$d") && { msg "report.py succeeded"; return 1; }
	grep -q "runs without a result: 1" <<<"$out" || { echo "$out" | diag; return 1; }
	grep -q "send_bw kverbs 1 64 2" <<<"$out" || { msg "the run is not named"; return 1; }
}

# The recorded console logs' cases (kverbs_harness/logs/NAME.expect): the
# plan counts this list, not what is found, so a fixture deleted fails its
# case, and one added but not listed fails totals_fixtures_all_listed.
TOTALS_FIXTURES=(clean failed_program_with_clean_totals one_case_failed
	passed_program_with_failed_cases plan_differs_from_request program_never_ran
	program_without_totals skips skips_asked_under_ci skips_outside_ci
	vm_died_at_boot vm_died_inside_a_program vm_printed_nothing)
# The compile_fail examples of rust/, as "CODE FILE" (line numbers move
# with every edit): each must be found once; one not listed fails too.
COMPILE_FAIL_EXAMPLES=("E0200 client.rs" "E0505 device.rs" "E0599 qp.rs" "E0382 qp.rs")

totals_listed_case() {
	[ -f "$here/logs/$1.expect" ] || { msg "no fixture $1.expect"; return 1; }
	totals_case "$here/logs/$1.expect"
}

totals_fixtures_all_listed() {
	local f name r=0
	for f in "$here"/logs/*.expect; do
		name=$(basename "$f" .expect)
		[[ " ${TOTALS_FIXTURES[*]} " == *" $name "* ]] ||
			{ msg "$name.expect is not in TOTALS_FIXTURES"; r=1; }
	done
	return $r
}

compile_fail_missing() {
	msg "no \`\`\`compile_fail,$1 example in $2 (COMPILE_FAIL_EXAMPLES lists one)"
	return 1
}

compile_fail_unlisted() {
	msg "example $1 is not in COMPILE_FAIL_EXAMPLES"
	return 1
}

echo "TAP version 13"
mapfile -t examples < <(extract_compile_fail)
nplan=$((${#TOTALS_FIXTURES[@]} + 1 + 9 + 3 + 4 + 5 + 1 + ${#COMPILE_FAIL_EXAMPLES[@]} + (vm ? 5 : 0)))
echo "1..$nplan"
for name in "${TOTALS_FIXTURES[@]}"; do
	t "totals_$name" totals_listed_case "$name"
done
t totals_fixtures_all_listed totals_fixtures_all_listed
t shellcheck_clean_all_scripts shellcheck_clean_all_scripts
t build_kernel_no_source_says_setup build_kernel_no_source_says_setup
t build_kernel_fresh_cache_configures build_kernel_fresh_cache_configures
t build_kernel_patches_applied_then_reversed build_kernel_patches_applied_then_reversed
t build_kernel_lost_option_fails build_kernel_lost_option_fails
t build_kernel_waits_for_held_lock build_kernel_waits_for_held_lock
t build_kernel_other_kernels_build_not_waited_for build_kernel_other_kernels_build_not_waited_for
t build_kernel_perf_flavor_has_no_debug_options build_kernel_perf_flavor_has_no_debug_options
t build_kernel_trace_flavor_patches_a_copy build_kernel_trace_flavor_patches_a_copy
t kmemleak_filter_splits_by_allocation_jiffies kmemleak_filter_splits_by_allocation_jiffies
t kmemleak_split_gives_each_object_its_window kmemleak_split_gives_each_object_its_window
t lib_grep_agrees_with_busybox lib_grep_agrees_with_busybox
t bench_report_medians_and_ratios bench_report_medians_and_ratios
t bench_report_figures_above_the_limit_listed bench_report_figures_above_the_limit_listed
t bench_report_inv_req_loops_counted bench_report_inv_req_loops_counted
t bench_report_counts_runs_without_result bench_report_counts_runs_without_result
t guests_plan_shares_programs_peer_on_one guests_plan_shares_programs_peer_on_one
t guests_merge_split_run_same_totals guests_merge_split_run_same_totals
t guests_merge_kmemleak_block_per_guest guests_merge_kmemleak_block_per_guest
t guests_merge_dead_guest_counted guests_merge_dead_guest_counted
t guests_merge_no_guest_booted guests_merge_no_guest_booted
t compile_fail_control_builds compile_fail_control_builds
declare -A used
for want in "${COMPILE_FAIL_EXAMPLES[@]}"; do
	found=
	for e in "${examples[@]}"; do
		where=${e#* }
		where=${where##*/}
		if [ -z "${used[$e]:-}" ] && [ "$(cat "$tmp/cf/${e%% *}.code") ${where%%:*}" = "$want" ]; then
			found=$e
			used[$e]=1
			break
		fi
	done
	if [ -z "$found" ]; then
		t "compile_fail_${want% *}_$(echo "${want#* }" | tr . _)_missing" compile_fail_missing "${want% *}" "${want#* }"
		continue
	fi
	# "N rust/kverbs/qp.rs:42" -> compile_fail_E0599_qp_rs_42
	where=${found#* }
	where=$(echo "${where##*/}" | tr '.:' '__')
	msg "example ${found#* }"
	t "compile_fail_${want% *}_$where" compile_fail_case "${found%% *}"
done
for e in "${examples[@]}"; do
	[ -n "${used[$e]:-}" ] || t "compile_fail_unlisted_example" compile_fail_unlisted "${e#* }"
done
if [ $vm = 1 ]; then
	t vm_init_exits_make_check_fails vm_broken init "the VM printed no test plan"
	t vm_module_fails_to_load_make_check_fails vm_broken module "invalid module format"
	# Under CI a program that skips itself, unasked, fails make check.
	t vm_skipped_program_fails_make_check_under_ci vm_broken skip \
		"kverbs_module.sh: skipped (broken on purpose (KVERBS_BREAK=skip)), but under CI every program must run" \
		CI=true KVERBS_SKIP_ASKED=
	# Two guests side by side: a broken program is reported whichever
	# guest ran it, and a guest that dies fails the run, named, while the
	# other takes the queue's programs and they pass.
	t vm_guests_broken_program_in_each_reported vm_guests fail "2 passed, 2 failed" \
		"kverbs: kverbs_minimal.sh: case failed: broken_on_purpose" \
		"kverbs: kverbs_info.sh: case failed: broken_on_purpose"
	# (kverbs_minimal.sh is made the timed list's and kverbs_info.sh is
	# the queue's; guest 1 dies before it asks for either, so guest 2 runs
	# both: the timed one only once guest 1 is gone, in whichever order it
	# asks. Neither has a case bound in time: the harness runs beside make
	# check.)
	t vm_guests_one_dies_make_check_fails_with_reason vm_guests init "[1-9][0-9]* passed, 1 failed" \
		"kverbs: guest 1 (no program): the VM printed no test plan: it died before the tests started (console log: $tmp/vm-guests-init/check-1.log)" \
		"ok 1 selftests: kverbs: kverbs_minimal.sh" \
		"kverbs: the VM did not finish (crash, panic or timeout)" -- KVERBS_BREAK_GUEST=1 KVERBS_TIMED_PROGS=kverbs_minimal.sh
fi
[ "$n" = "$nplan" ] || { echo "not ok $((n + 1)) harness_plan_matches"; fail=$((fail + 1)); }
echo "# Totals: pass:$pass fail:$fail xfail:0 xpass:0 skip:$skip error:0"
if [ "$skip" -gt 0 ]; then
	echo "$pass passed, $fail failed, $skip skipped"
else
	echo "$pass passed, $fail failed"
fi
[ "$fail" = 0 ]
