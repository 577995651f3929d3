#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Helpers shared by the kverbs kselftests: KTAP through the kernel's
# ktap_helpers.sh, soft-RoCE devices, the layer (kverbs.ko) and the example
# module that uses it (and the minimal one, kverbs_minimal.sh's, the
# self-test, kverbs_soundness.sh's, and the exerciser,
# kverbs_exerciser.sh's), and the checks run after every test case (kernel
# log) and every test program (kmemleak).

KV_DIR="$(dirname "$(readlink -f "$0")")"
# shellcheck source=/dev/null
. "$KV_DIR/../kselftest/ktap_helpers.sh"

KV_MODDIR=${KV_MODDIR:-/kverbs}
KV_LAYER=kverbs
KV_MOD=kverbs_example
KV_MINIMAL=kverbs_minimal
# The NVMe over Fabrics host (samples/kverbs_nvme).
KV_NVME=kverbs_nvme
KV_SELFTEST=kverbs_selftest
KV_EXERCISER=kverbs_exerciser
# shellcheck disable=SC2034 # used by the test programs
KV_SELFTEST_DEBUGFS=/sys/kernel/debug/kverbs_selftest
# shellcheck disable=SC2034 # used by the test programs
KV_DEBUGFS=/sys/kernel/debug/kverbs_example
# shellcheck disable=SC2034 # used by the test programs
KV_SYSFS=/sys/kernel/kverbs_example
KV_KMEMLEAK=/sys/kernel/debug/kmemleak

# What a kernel report looks like in dmesg.
KV_SPLAT='WARNING:|BUG:|Oops|KASAN|UBSAN|general protection|Call Trace|kernel BUG|lockdep|possible circular locking|possible recursive locking|inconsistent lock state|suspicious RCU usage|sleeping function called from invalid context|ODEBUG:|list_add corruption|list_del corruption|refcount_t:|INFO: task .* blocked|panic|rcu_sched self-detected stall|returned bad count'

# KV_ALLOC_WARNINGS_OK=1: a test injecting allocation failures allows
# the warning the page and vmalloc allocators print for them (warn_alloc:
# "<comm>: vmalloc error: ..." or "page allocation failure: ...", a stack
# dump, the memory state); every other report still fails the case.
KV_ALLOC_WARNINGS_OK=0

# Drops warn_alloc's reports from stdin when KV_ALLOC_WARNINGS_OK=1.
kv_drop_alloc_warnings() {
	if [ "$KV_ALLOC_WARNINGS_OK" = 1 ]; then
		awk '/: (vmalloc error: |page allocation failure: )/ { skip = 1 }
			!skip { print }
			skip && /<\/TASK>/ { skip = 0 }'
	else
		cat
	fi
}

kv_msg() {
	ktap_print_msg "$@"
}

# The peer VM of the two-host programs (tools/vm/run.sh boots it beside
# the guest that runs them, at this address, its command server on port
# 7000: tools/vm/peer-cmd.sh).
KV_PEER_ADDR=169.254.10.2

# kv_peer CMD: runs CMD on the peer VM; its output, then its status. The
# shell talks to the peer's command server itself (the output, then a last
# line "rc=STATUS"), without a process of its own (under TCG a bash costs
# 0.5 s of a vCPU to start).
kv_peer() {
	local fd out='' l
	exec {fd}<>"/dev/tcp/$KV_PEER_ADDR/7000" || return 255
	printf '%s\n' "$1" >&"$fd"
	while IFS= read -r l <&"$fd" || [ -n "$l" ]; do
		out+=$l$'\n'
	done
	exec {fd}<&-
	# Without its trailing newlines, as $(...) would give it.
	while [[ $out == *$'\n' ]]; do
		out=${out%$'\n'}
	done
	[[ $out != *$'\n'* ]] || printf '%s\n' "${out%$'\n'*}"
	return "${out##*rc=}"
}

# grep [-qxcE]... [--] PATTERN [FILE]: grep(1) done by this shell, the
# same answer without a process, for the forms the test programs use most:
# the options -q, -x, -c (not with -q) and -E, one pattern, one file or
# stdin. Anything else is the guest's grep (busybox's). Under TCG with the
# test kernel's debug options a fork and an exec of busybox's grep cost
# 0.10-0.14 s of a vCPU, the shell's match of a line 0.2-0.5 ms; grep was
# 40 % of the programs a make check ran (measured 2026-11-28). Both match
# each line on its own with glibc's regcomp() and regexec(); a basic
# regular expression is first written as the same extended one
# (kv_bre_to_ere). An input of more than KV_GREP_LINES lines, and a
# pattern the shell cannot take, go to grep(1).
# tools/testing/kverbs_harness.sh compares the two.
KV_GREP_LINES=400
grep() {
	local -a kv_grep_in
	local files f
	kv_grep_opts "$@" || { command grep "$@"; return; }
	files=$(($# - KV_GREP_SHIFT))
	if [ "$files" = 1 ]; then
		f=${!#}
		if [ ! -r "$f" ] || [ -d "$f" ]; then
			command grep "$@"
			return
		fi
		# shellcheck disable=SC2034 # kv_grep_lines reads it by its name
		mapfile -t kv_grep_in <"$f"
	elif [ "$files" = 0 ]; then
		# shellcheck disable=SC2034 # kv_grep_lines reads it by its name
		mapfile -t kv_grep_in
	else
		command grep "$@"
		return
	fi
	kv_grep_lines kv_grep_in "$@"
}

# kv_grep_opts ARGS...: parses grep's ARGS: KV_GREP_Q, _X, _C, _E (0 or
# 1), KV_GREP_RE (the pattern as an extended regular expression, for
# [[ =~ ]]) and KV_GREP_SHIFT (the arguments before the files); fails
# for a form the shell does not do.
kv_grep_opts() {
	local opt n=0
	KV_GREP_Q=0 KV_GREP_X=0 KV_GREP_C=0 KV_GREP_E=0
	while [ $# -gt 0 ]; do
		case $1 in
		--) shift; n=$((n + 1)); break ;;
		-[qxcE]*)
			opt=${1#-}
			while [ -n "$opt" ]; do
				case ${opt:0:1} in
				q) KV_GREP_Q=1 ;;
				x) KV_GREP_X=1 ;;
				c) KV_GREP_C=1 ;;
				E) KV_GREP_E=1 ;;
				*) return 1 ;;
				esac
				opt=${opt:1}
			done
			;;
		-?*) return 1 ;;
		*) break ;;
		esac
		shift
		n=$((n + 1))
	done
	[ $# -ge 1 ] && [ -n "$1" ] || return 1
	[ $((KV_GREP_Q + KV_GREP_C)) -lt 2 ] || return 1
	if [ "$KV_GREP_E" = 1 ]; then
		KV_GREP_RE=$1
	else
		kv_bre_to_ere "$1" || return 1
		KV_GREP_RE=$KV_ERE
	fi
	[ "$KV_GREP_X" = 0 ] || KV_GREP_RE="^($KV_GREP_RE)\$"
	# A pattern regcomp() refuses (status 2) is grep(1)'s to report.
	[[ "" =~ $KV_GREP_RE ]]
	[ $? != 2 ] || return 1
	KV_GREP_SHIFT=$((n + 1))
}

# kv_grep_lines ARRAY ARGS...: grep ARGS (parsed by kv_grep_opts) on the
# lines of the array named ARRAY.
kv_grep_lines() {
	local -n kv_lines=$1
	local l n=0
	shift
	if [ "${#kv_lines[@]}" -gt "$KV_GREP_LINES" ]; then
		printf '%s\n' "${kv_lines[@]}" | command grep "${@:1:KV_GREP_SHIFT}"
		return
	fi
	for l in "${kv_lines[@]}"; do
		[[ $l =~ $KV_GREP_RE ]] || continue
		n=$((n + 1))
		[ "$KV_GREP_Q" = 1 ] && return 0
		[ "$KV_GREP_C" = 1 ] || printf '%s\n' "$l"
	done
	[ "$KV_GREP_C" = 0 ] || echo "$n"
	[ "$n" -gt 0 ]
}

# kv_bre_to_ere BRE: KV_ERE, the extended regular expression that matches
# what the basic one BRE does; fails for one with a backslash (GNU's \+,
# \|, \(...\) and back-references have no plain equivalent here). Outside
# bracket expressions (copied whole: they mean the same in both), the
# characters +?|(){} are literal in a BRE, as are "^" not first, "$" not
# last and "*" first (or after the first "^").
kv_bre_to_ere() {
	local p=$1 out='' i=0 j n=${#1} ch close rest
	[[ $p != *\\* ]] || return 1
	if [ "${p:0:1}" = "^" ]; then
		out='^' i=1
	fi
	if [ "${p:i:1}" = "*" ]; then
		out+='\*' i=$((i + 1))
	fi
	while [ "$i" -lt "$n" ]; do
		ch=${p:i:1}
		case $ch in
		'[')
			j=$((i + 1))
			[ "${p:j:1}" != "^" ] || j=$((j + 1))
			[ "${p:j:1}" != "]" ] || j=$((j + 1))
			while [ "$j" -lt "$n" ] && [ "${p:j:1}" != "]" ]; do
				if [ "${p:j:1}" = "[" ] && [[ ${p:j+1:1} == [:.=] ]]; then
					# [:class:], [.symbol.], [=class=]: to their end
					close="${p:j+1:1}]" rest=${p:j+2}
					[[ $rest == *"$close"* ]] || return 1
					rest=${rest%%"$close"*}
					j=$((j + 4 + ${#rest}))
				else
					j=$((j + 1))
				fi
			done
			[ "$j" -lt "$n" ] || return 1
			out+=${p:i:j-i+1}
			i=$((j + 1))
			continue
			;;
		'$') [ "$i" = $((n - 1)) ] && out+='$' || out+='\$' ;;
		'^' | '+' | '?' | '|' | '(' | ')' | '{' | '}') out+="\\$ch" ;;
		*) out+=$ch ;;
		esac
		i=$((i + 1))
	done
	KV_ERE=$out
}

# Prints stdin as KTAP diagnostics.
kv_diag() {
	sed 's/^/# /'
}

# kv_load [PARAM=VALUE...]: loads the layer unless it is loaded, then the
# example module with those parameters.
# shellcheck disable=SC2120 # the parameters are optional
kv_load() {
	kv_load_layer && insmod "$KV_MODDIR/$KV_MOD.ko" "$@"
}

# kv_unload: unloads the example module, then the layer, so that every
# kv_load starts from a fresh layer (its drain fault attributes at their
# defaults), as when the layer was linked into the example. Fails at once,
# both staying loaded, if the example cannot go (a file of it is open).
kv_unload() {
	rmmod "$KV_MOD" && kv_unload_layer
}

# kv_mod_loaded NAME: the module NAME is loaded.
kv_mod_loaded() {
	grep -q "^$1 " /proc/modules
}

kv_loaded() {
	kv_mod_loaded "$KV_MOD"
}

kv_load_layer() {
	kv_layer_loaded || insmod "$KV_MODDIR/$KV_LAYER.ko"
}

# kv_load_selftest: loads the layer unless it is loaded, then the self-test
# module unless it is loaded.
kv_load_selftest() {
	kv_load_layer || return 1
	kv_selftest_loaded || insmod "$KV_MODDIR/$KV_SELFTEST.ko"
}

kv_selftest_loaded() {
	kv_mod_loaded "$KV_SELFTEST"
}

# kv_unload_layer: unloads the self-test, exerciser and NVMe host modules
# if they are loaded (they hold the layer), then the layer. The layer's last reference from a closed
# file of the example is dropped just after the example's (debugfs' proxy
# puts the fops' owner last): retry for a second. KV_KEEP_LAYER=1: the
# layer stays (an object leaked on purpose holds it: kverbs_forget.sh).
kv_unload_layer() {
	local _
	if kv_selftest_loaded; then
		rmmod "$KV_SELFTEST" || return 1
	fi
	if kv_mod_loaded "$KV_EXERCISER"; then
		rmmod "$KV_EXERCISER" || return 1
	fi
	if kv_mod_loaded "$KV_NVME"; then
		rmmod "$KV_NVME" || return 1
	fi
	[ "${KV_KEEP_LAYER:-0}" = 1 ] && return 0
	for _ in {1..10}; do
		kv_layer_loaded || return 0
		rmmod "$KV_LAYER" 2>/dev/null && return 0
		sleep 0.1
	done
	rmmod "$KV_LAYER"
}

kv_layer_loaded() {
	kv_mod_loaded "$KV_LAYER"
}

kv_minimal_loaded() {
	kv_mod_loaded "$KV_MINIMAL"
}

# kv_count_over FILE PATTERN N: more than N lines of FILE match PATTERN.
kv_count_over() {
	[ "$(grep -c "$2" "$1")" -gt "$3" ]
}

# kv_port_down_up NETDEV EVENTS: NETDEV goes down, then up; the example's
# events file EVENTS of its device shows one more port error, then one
# more port active.
kv_port_down_up() {
	local err act
	err=$(grep -c "port 1: port error$" "$2")
	act=$(grep -c "port 1: port active$" "$2")
	ip link set "$1" down || return 1
	kv_wait kv_count_over "$2" "port 1: port error$" "$err" || { kv_diag <"$2"; return 1; }
	ip link set "$1" up || return 1
	kv_wait kv_count_over "$2" "port 1: port active$" "$act" || { kv_diag <"$2"; return 1; }
}

# kv_rxe_add NAME NETDEV: a soft-RoCE device on NETDEV.
kv_rxe_add() {
	rdma link add "$1" type rxe netdev "$2"
}

kv_rxe_del() {
	rdma link delete "$1"
}

# kv_rxe_del_all: removes every RDMA device but those KV_KEEP_DEVICES
# names (held for good by an object leaked on purpose: kverbs_forget.sh).
kv_rxe_del_all() {
	local d
	for d in /sys/class/infiniband/*; do
		[[ " ${KV_KEEP_DEVICES:-} " == *" ${d##*/} "* ]] && continue
		[ -e "$d" ] && rdma link delete "${d##*/}" 2>/dev/null
	done
}

# dummy0 with a link-local address: a netdev rxe can sit on besides lo.
kv_dummy_up() {
	if [ ! -e /sys/class/net/dummy0 ]; then
		ip link add dummy0 type dummy || return 1
	fi
	if ! ip -4 addr show dev dummy0 | grep -q "inet 169.254.1.1/24"; then
		ip addr add 169.254.1.1/24 dev dummy0 || return 1
	fi
	ip link set dummy0 up
}

# The per-device directories of the module's debugfs root: all but the
# module's own entries (the self-test, the drain fault attributes).
kv_device_dirs() {
	find "$KV_DEBUGFS" -mindepth 1 -maxdepth 1 ! -name selftest ! -name fail_drain
}

# sleep SECONDS: sleep(1), and the seconds added up in /tmp/kverbs-slept,
# which the guest's /init reads after each program (tools/vm/guest-init.sh:
# how much of its time a program spent waiting in fixed sleeps and polls).
# (A sleep in the shell itself, read -t on a pipe, saves a fork and an
# exec; in the one full run with it, kverbs_forget.sh's kmemleak found
# none of the objects the modules forgot, 2026-11-27. Not kept until that
# is understood: perhaps the shell's kernel stack, no longer overwritten
# by forks, kept stale pointers that kmemleak scans.)
sleep() {
	command sleep "$@" || return
	echo "$1" >>/tmp/kverbs-slept
}

# Fault injection through /proc/thread-self/fail-nth (kv_fail_nth).
KV_FAILSLAB=/sys/kernel/debug/failslab
KV_FAILPAGE=/sys/kernel/debug/fail_page_alloc

# kv_faults_quiet: fail-nth fails any allocation of the task, sleeping ones
# too, silently, with no stack filter (kverbs_hardening.sh may have set
# one in this guest).
kv_faults_quiet() {
	local f
	{ [ -d "$KV_FAILSLAB" ] && [ -d "$KV_FAILPAGE" ]; } ||
		{ kv_msg "no failslab or fail_page_alloc in debugfs"; return 1; }
	echo N >"$KV_FAILSLAB/ignore-gfp-wait" && echo 0 >"$KV_FAILSLAB/verbose" &&
		echo N >"$KV_FAILPAGE/ignore-gfp-wait" && echo Y >"$KV_FAILPAGE/ignore-gfp-highmem" &&
		echo 0 >"$KV_FAILPAGE/min-order" && echo 0 >"$KV_FAILPAGE/verbose" || return 1
	for f in "$KV_FAILSLAB" "$KV_FAILPAGE"; do
		echo 0 >"$f/require-start" && echo 18446744073709551615 >"$f/require-end" || return 1
	done
}

# kv_wait COND...: polls COND for up to 10 s.
kv_wait() {
	local i
	for ((i = 0; i < 100; i++)); do
		"$@" && return 0
		sleep 0.1
	done
	return 1
}

# kv_roundtrip PATTERN DEV SECTOR COUNT: COUNT sectors of the file
# PATTERN written at SECTOR of DEV with O_DIRECT read back the same.
kv_roundtrip() {
	local got=/tmp/kv_roundtrip.$BASHPID
	dd if="$1" of="$2" bs=512 seek="$3" count="$4" oflag=direct 2>/dev/null ||
		{ kv_msg "$2: writing $4 sectors at $3 failed"; return 1; }
	dd if="$2" of="$got" bs=512 skip="$3" count="$4" iflag=direct 2>/dev/null ||
		{ kv_msg "$2: reading $4 sectors at $3 failed"; return 1; }
	head -c $(($4 * 512)) "$1" | cmp -s - "$got" ||
		{ kv_msg "$2: $4 sectors at $3 read back differ"; rm -f "$got"; return 1; }
	rm -f "$got"
}

# kv_parallel N FUNC: FUNC 0 to FUNC N-1 run at once, in the background;
# fails unless each of them passed (all are waited for).
kv_parallel() {
	# Names of its own: shellcheck follows this file into every program,
	# where pids is a string in kverbs_unload.sh.
	local kv_pids=() kv_p kv_r=0 kv_i
	for ((kv_i = 0; kv_i < $1; kv_i++)); do
		"$2" "$kv_i" &
		kv_pids+=($!)
	done
	for kv_p in "${kv_pids[@]}"; do
		wait "$kv_p" || kv_r=1
	done
	return $kv_r
}

# kv_counter FILE PREFIX KEY: the word after KEY on the line of FILE that
# begins with PREFIX (a disk's counter in a control file).
kv_counter() {
	grep "^$2" "$1" | tr ' ' '\n' | awk -v k="$3" 'p { print; exit } $0 == k { p = 1 }'
}

# kv_layer_refs: kverbs.ko's reference count (its users' and its live
# objects': rust/kverbs/layer_ref.rs).
kv_layer_refs() {
	cat /sys/module/kverbs/refcnt
}

# kv_used_by MODULE...: lsmod's "Used by" of kverbs.ko (busybox: name,
# size, count, users) names exactly the MODULEs, and its count is at least
# theirs: besides the modules that use its symbols, each live object that
# leaves the RDMA core a pointer into kverbs.ko holds a reference
# (rust/kverbs/layer_ref.rs), a debugfs file of the example among them.
kv_used_by() {
	local used users want
	used=$(lsmod | awk '$1 == "kverbs" { print $3, $4 }')
	kv_msg "lsmod: kverbs used by $used"
	users=$(printf '%s\n' "${used#* }" | tr , '\n' | sed '/^$/d' | sort | tr '\n' ' ')
	want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
	[ "$users" = "$want" ] || { kv_msg "want the users $want"; return 1; }
	[ "${used%% *}" -ge $# ] || { kv_msg "want a count of at least $#"; return 1; }
}

kv_cleanup() {
	# The NVMe fixture's hosts and target (kverbs_nvme_lib.sh), if sourced.
	! declare -F kv_nvme_cleanup >/dev/null || kv_nvme_cleanup
	! kv_minimal_loaded || rmmod "$KV_MINIMAL"
	! kv_mod_loaded kverbs_ulp || rmmod kverbs_ulp
	kv_loaded && kv_unload
	kv_unload_layer
	kv_rxe_del_all
	return 0
}

# The kernel log of the current case: kv_begin opens /dev/kmsg at the end
# of the log (KV_KMSG_FD, kv_kmsg_open), kv_case empties KV_CASE_LOG before
# it writes its marker, and kv_kmsg_pull appends to it the records logged
# since the last pull, as dmesg prints them. So a case's checks read its own
# records only, in one small process (kv_kmsg): reading the log with dmesg
# (syslog READ_ALL formats every record since kv_begin's clear) and finding
# the marker with awk took 0.4-0.7 s a case under TCG with a small log,
# 2.2 s with 1.3 MB; bash reading /dev/kmsg itself 3-6 ms a record
# (measured 2026-11-27).
KV_KMSG_FD=
KV_CASE_LOG=/tmp/kverbs-case.log

# kv_kmsg_open: the reading position at the end of the kernel log, for the
# cases that follow.
kv_kmsg_open() {
	[ -n "$KV_KMSG_FD" ] && exec {KV_KMSG_FD}<&-
	KV_KMSG_FD=
	: >"$KV_CASE_LOG"
	exec {KV_KMSG_FD}</dev/kmsg || { KV_KMSG_FD=; return 1; }
	kv_kmsg end <&"$KV_KMSG_FD" && return 0
	exec {KV_KMSG_FD}<&-
	KV_KMSG_FD=
	return 1
}

# kv_kmsg_pull: appends the records logged since the last pull to
# KV_CASE_LOG; fails if the log is not open or could not be read.
kv_kmsg_pull() {
	[ -n "$KV_KMSG_FD" ] && kv_kmsg pull <&"$KV_KMSG_FD" >>"$KV_CASE_LOG"
}

# kv_case_lines NAME: KV_LINES, the kernel log of test case NAME, the
# current one, from its marker on (the last of them: programs may have
# cases of the same name, setup_rxe_lo_rxe_dummy_and_load; the whole file
# if it has none), read by the shell itself.
kv_case_lines() {
	local i m="kverbs-selftest: begin $1"
	kv_kmsg_pull
	# Without its marker (lost: kv_kmsg_pull says so), the whole file.
	mapfile -t KV_LINES <"$KV_CASE_LOG"
	for ((i = ${#KV_LINES[@]} - 1; i > 0; i--)); do
		[[ ${KV_LINES[i]} == *"$m" ]] && break
	done
	((i <= 0)) || KV_LINES=("${KV_LINES[@]:i}")
	return 0
}

# kv_log_since NAME: prints kv_case_lines's lines.
kv_log_since() {
	kv_case_lines "$1"
	((${#KV_LINES[@]} == 0)) || printf '%s\n' "${KV_LINES[@]}"
}

# kv_case_splat NAME: whether the kernel reported something during test
# case NAME, the one that just ended (KV_SPLAT in its log, less
# warn_alloc's reports when KV_ALLOC_WARNINGS_OK=1), or may have (records
# lost). The shell itself
# looks for KV_SPLAT in the case's lines; only if it finds it does
# kv_log_since's process, with kv_drop_alloc_warnings, decide.
kv_case_splat() {
	local lines i text
	kv_kmsg_pull || { kv_msg "reading the kernel log through /dev/kmsg failed"; return 0; }
	mapfile -t lines <"$KV_CASE_LOG"
	# Records overwritten before they were read may have held a report.
	[[ ${lines[*]} == *"[kv_kmsg: records lost"* ]] &&
		{ kv_msg "records of the kernel log were lost before they were read"; return 0; }
	# The marker is near the top: kv_case empties the file before it.
	for ((i = 0; i < ${#lines[@]}; i++)); do
		[[ ${lines[i]} == *"kverbs-selftest: begin $1" ]] && break
	done
	((i < ${#lines[@]})) || i=0
	printf -v text '%s\n' "${lines[@]:i}"
	[[ $text =~ $KV_SPLAT ]] || return 1
	[ "$KV_ALLOC_WARNINGS_OK" = 1 ] || return 0
	kv_log_since "$1" | kv_drop_alloc_warnings | grep -qE "$KV_SPLAT"
}

# kv_logged PATTERN: the kernel logged PATTERN during the current case.
kv_logged() {
	kv_case_lines "$KV_CASE"
	if kv_grep_opts -q -- "$1"; then
		kv_grep_lines KV_LINES -q -- "$1"
	else
		((${#KV_LINES[@]})) && printf '%s\n' "${KV_LINES[@]}" | command grep -q -- "$1"
	fi
}

# kv_write_fails FILE STRING ERROR LOGGED: one write(2) of STRING to FILE
# fails with an error message containing ERROR, and the kernel logged
# LOGGED during the current case.
# KV_WRITE_T0 and KV_WRITE_T1 are the uptime's whole seconds before and
# after the write itself, for a case bound in time that must not count the
# checks after it (reading the kernel log takes seconds under TCG).
kv_write_fails() {
	local err
	# shellcheck disable=SC2034 # read by the test programs
	read -r KV_WRITE_T0 _ </proc/uptime
	KV_WRITE_T0=${KV_WRITE_T0%%.*}
	err=$( (printf '%s' "$2" >"$1") 2>&1) && { kv_msg "'$2' was accepted"; return 1; }
	# shellcheck disable=SC2034 # read by the test programs
	read -r KV_WRITE_T1 _ </proc/uptime
	KV_WRITE_T1=${KV_WRITE_T1%%.*}
	kv_msg "$err"
	grep -q -- "$3" <<<"$err" || { kv_msg "want '$3'"; return 1; }
	kv_logged "$4" || { kv_msg "no kernel log line '$4'"; return 1; }
}

# kv_secs_since T0: seconds (one decimal) since uptime T0, taken with
# read -r T0 _ </proc/uptime.
kv_secs_since() {
	awk -v a="$1" '{ printf "%.1f", $1 - a }' /proc/uptime
}

# kv_clock: sets KV_CLOCK to "UPTIME BUSY IDLE": the uptime in hundredths
# of a second and the vCPUs' busy and idle time so far (USER_HZ ticks, all
# CPUs; idle counts iowait), read by the shell itself. Every case starts
# and ends with it, and a process costs 0.1-0.2 s under TCG with the test
# kernel's debug options (a fork and an exec: measured 2026-11-27, the
# checks after a case took 0.5-1.4 s with five).
kv_clock() {
	local up u n s i io irq sirq st
	read -r up _ </proc/uptime
	read -r _ u n s i io irq sirq st _ </proc/stat
	up=${up/./}
	KV_CLOCK="$((10#$up)) $((u + n + s + irq + sirq + st)) $((i + io))"
}

# kv_clock_since "UPTIME BUSY IDLE": sets KV_SINCE to the seconds since
# kv_clock set that, and the vCPUs' busy share of them ("12.3 s, vCPUs
# busy 40 %"): the work; the rest of the time the guest waited (sleeps,
# polls, timeouts, TCG wake-ups).
kv_clock_since() {
	local up0 b0 i0 up1 b1 i1 b t d
	read -r up0 b0 i0 <<<"$1"
	kv_clock
	read -r up1 b1 i1 <<<"$KV_CLOCK"
	b=$((b1 - b0)) t=$((b1 - b0 + i1 - i0)) d=$(((up1 - up0 + 5) / 10))
	printf -v KV_SINCE '%d.%d s, vCPUs busy %d %%' $((d / 10)) $((d % 10)) \
		$((t > 0 ? (200 * b + t) / (2 * t) : 0))
}

# KVERBS_CASES (in the guest: /kverbs/cases, written by make check): an
# extended regular expression; when set, a case whose name it does not
# match is reported as skipped without running. A program's setup cases
# (setup_*) and the checks after it (kmemleak_clean_*, peer_vm_*) always
# run: the selected cases need the first, and the others are what every
# run must pass.
KV_CASES=${KVERBS_CASES:-$(cat /kverbs/cases 2>/dev/null)}

# kv_selected NAME: whether case NAME runs.
kv_selected() {
	[ -z "$KV_CASES" ] && return 0
	[[ $1 =~ ^(setup|kmemleak_clean|peer_vm)_ ]] || [[ $1 =~ $KV_CASES ]]
}

# kv_case NAME FUNC [ARGS...]: runs one test case; it passes if FUNC
# succeeds and the kernel logged no report while it ran, is skipped if FUNC
# returns $KSFT_SKIP (and says why) with a clean log.
kv_case() {
	local name=$1 ok=1 start
	shift
	if ! kv_selected "$name"; then
		kv_msg "$name: not in KVERBS_CASES"
		ktap_test_skip "$name"
		return 0
	fi
	kv_clock
	start=$KV_CLOCK
	KV_CASE=$name
	: >"$KV_CASE_LOG"
	echo "kverbs-selftest: begin $name" >/dev/kmsg
	"$@"
	case $? in
	0) ;;
	"$KSFT_SKIP") ok=skip ;;
	*) ok=0 ;;
	esac
	kv_clock_since "$start"
	kv_msg "$name: $KV_SINCE"
	if kv_case_splat "$name"; then
		kv_msg "kernel report during $name:"
		kv_log_since "$name" | kv_drop_alloc_warnings | grep -E -m1 -B20 -A40 "$KV_SPLAT" | kv_diag
		ok=0
	fi
	if [ $ok = skip ]; then
		ktap_test_skip "$name"
	elif [ $ok = 1 ]; then
		ktap_test_pass "$name"
	else
		KV_FAILED="${KV_FAILED:+$KV_FAILED }$name"
		ktap_test_fail "$name"
	fi
}

# Everything the test program left allocated must be freed: kmemleak must
# report no new unreferenced object (reports from before the program were
# cleared by kv_begin; with the check deferred, kv_kmemleak_deferred, the
# objects allocated before the program's window are the earlier programs'
# and left to their cases). A program that leaks on purpose (kverbs_forget.sh)
# sets KV_KMEMLEAK_AFTER to the jiffies (kv_jiffies) its leaking ended: an
# object allocated by then is one of the leaked, which kmemleak may report
# only scans later (a stale copy of its address in another object hides it
# until overwritten); it is listed, and only the objects allocated after
# fail the case.
kv_kmemleak_check() {
	kv_kmemleak_scan || return 1
	kv_kmemleak_verdict
}

# kv_kmemleak_verdict: the verdict on the objects of KV_KMEMLEAK_REPORT (a
# program's), with those of KV_KMEMLEAK_AFTER's leaking listed apart.
kv_kmemleak_verdict() {
	local late
	if [ -n "$KV_KMEMLEAK_AFTER" ] && [ -n "$KV_KMEMLEAK_REPORT" ]; then
		late=$(kv_kmemleak_objects_before "$KV_KMEMLEAK_AFTER" <<<"$KV_KMEMLEAK_REPORT")
		if [ -n "$late" ]; then
			kv_msg "kmemleak, objects allocated by jiffies $KV_KMEMLEAK_AFTER (the leaking's):"
			head -n 40 <<<"$late" | kv_diag
		fi
		KV_KMEMLEAK_REPORT=$(kv_kmemleak_objects_before "$KV_KMEMLEAK_AFTER" after <<<"$KV_KMEMLEAK_REPORT")
	fi
	if [ -n "$KV_KMEMLEAK_REPORT" ]; then
		kv_msg "kmemleak:"
		echo "$KV_KMEMLEAK_REPORT" | head -n 80 | kv_diag
		kv_kmemleak_clear
		return 1
	fi
	return 0
}

# kv_kmemleak_objects_before JIFFIES [after]: of the kmemleak report on
# stdin, the objects allocated at or before JIFFIES (with "after": those
# allocated later), each with all its lines.
kv_kmemleak_objects_before() {
	awk -v j="$1" -v after="${2:+1}" '
		/^unreferenced object / { head = $0; keep = -1; next }
		keep == -1 && / jiffies [0-9]+/ {
			t = $0
			sub(/.* jiffies /, "", t)
			keep = ((t + 0 > j + 0) == (after == 1))
			if (keep)
				print head
		}
		keep == 1 { print }'
}

# kv_jiffies: the kernel's jiffies now (/proc/timer_list).
kv_jiffies() {
	awk '/^jiffies: / { print $2; exit }' /proc/timer_list
}

# kv_kmemleak_scan: the unreferenced objects kmemleak reports, in
# KV_KMEMLEAK_REPORT (empty if none): those of this program's window when
# the check is deferred (kv_kmemleak_ours); fails without kmemleak.
kv_kmemleak_scan() {
	[ -e "$KV_KMEMLEAK" ] || {
		kv_msg "no kmemleak in this kernel"
		return 1
	}
	# A leak is reported by a scan that finds it unreferenced and unchanged
	# since the scan before (which took its checksum), if it is at least
	# 5 s old when that scan starts (mm/kmemleak.c: unreferenced_object(),
	# MSECS_MIN_AGE). The first scan runs at once, the second once 5 s have
	# passed since the program's last case: every object the program
	# allocated is old enough then, else the leaks of its last seconds
	# would be blamed on the next program, or, after the last program,
	# never reported. A scan takes 2-10 s under TCG: the wait is what is
	# left of the 5 s after the first.
	local t0 left
	read -r t0 _ </proc/uptime
	echo scan >"$KV_KMEMLEAK"
	left=$(awk -v t0="$t0" '{ d = 5 - ($1 - t0); printf "%.1f", (d > 0 ? d : 0) }' /proc/uptime)
	kv_msg "kmemleak: first scan $(kv_secs_since "$t0") s, then $left s to wait"
	sleep "$left"
	echo scan >"$KV_KMEMLEAK"
	KV_KMEMLEAK_REPORT=$(kv_kmemleak_ours)
}

# The deferred check. In the test VM (tools/vm/guest-init.sh, make check)
# the programs of a guest leave their kmemleak cases to the guest's last
# program, kverbs_kmemleak.sh: a verdict of its own for each program needs
# two scans after the program's last allocation (kv_kmemleak_scan), 5-8 s
# each under TCG, and one pair at the guest's end finds the same objects.
# Each program's window is its share of the guest's time, in jiffies: from
# the end of the program before (0 for the first) to its own end, after
# its cleanup (kv_end); a reported object is the program's whose window
# holds its allocation, as kmemleak gives it. KV_KMEMLEAK_WINDOWS names the
# file of the windows, one line a program: "PROG END_JIFFIES [AFTER]"
# (AFTER: its KV_KMEMLEAK_AFTER); reports cleared before (kv_kmemleak_clear)
# are kept in the same file with ".cleared" appended. Outside the test VM
# (a kselftest run of the programs) each program checks at its end.
kv_kmemleak_deferred() {
	[ -n "${KV_KMEMLEAK_WINDOWS:-}" ] && [ -e "$KV_KMEMLEAK" ]
}

# kv_kmemleak_ours: of the report kmemleak holds now, the objects of this
# program's window (all of them when the check is not deferred).
kv_kmemleak_ours() {
	if [ -n "$KV_DEFERRED" ]; then
		kv_kmemleak_objects_before "$KV_WINDOW_START" after <"$KV_KMEMLEAK"
	else
		cat "$KV_KMEMLEAK"
	fi
}

# kv_kmemleak_clear: clears kmemleak's report; what it held is kept for
# the deferred check.
kv_kmemleak_clear() {
	kv_kmemleak_deferred && cat "$KV_KMEMLEAK" >>"$KV_KMEMLEAK_WINDOWS.cleared"
	echo clear >"$KV_KMEMLEAK"
}

# kv_window_start: KV_WINDOW_START, the jiffies the program's window starts
# at: the end of the program before (the windows' last line), or 0; and
# KV_WINDOW_PREV, that program's name (empty for the first).
kv_window_start() {
	local line=
	KV_WINDOW_START=0 KV_WINDOW_PREV=
	[ -s "$KV_KMEMLEAK_WINDOWS" ] && line=$(tail -n 1 "$KV_KMEMLEAK_WINDOWS")
	[ -z "$line" ] || read -r KV_WINDOW_PREV KV_WINDOW_START _ <<<"$line"
}

# kv_kmsg_gap: with the check deferred, the kernel log from the end of the
# program before (its kv_end, after its cleanup, cleared the log for
# syslog's readers) to now: late reports of its teardown (an RCU callback,
# a work item) come then, which its own kmemleak case, run last, used to
# see during its scans. A report there (or records lost before they were
# read), with the lines around it, is kept in KV_KMEMLEAK_WINDOWS.PROG.log
# for that program's kmemleak_clean_PROG in kverbs_kmemleak.sh, which
# fails it.
kv_kmsg_gap() {
	local fd log report="$KV_SPLAT|\\[kv_kmsg: "
	[ -n "$KV_WINDOW_PREV" ] || return 0
	log=$KV_KMEMLEAK_WINDOWS.$KV_WINDOW_PREV.log
	exec {fd}</dev/kmsg && kv_kmsg cleared <&"$fd" && kv_kmsg pull <&"$fd" >"$log.all" ||
		echo "[kv_kmsg: reading the kernel log failed]" >>"$log.all"
	[ -n "$fd" ] && exec {fd}<&-
	# (-q is the shell's grep; the excerpt's options are grep(1)'s.)
	if grep -qE "$report" "$log.all"; then
		grep -E -m1 -B20 -A40 "$report" "$log.all" >>"$log"
	fi
	rm -f "$log.all"
}

# kv_begin PLAN: the KTAP header; PLAN counts the cases plus the final
# kmemleak case.
kv_begin() {
	ktap_print_header
	KV_DEFERRED=
	if [ -n "${KV_NO_KMEMLEAK:-}" ]; then
		# A guest booted without kmemleak (tools/vm/run.sh,
		# KVERBS_KMEMLEAK=0, for the harness's tests of make check): no
		# kmemleak case.
		KV_DEFERRED=none
		ktap_set_plan $(($1 - 1))
	elif kv_kmemleak_deferred && [ -n "$(kv_jiffies)" ]; then
		# The kmemleak case is kverbs_kmemleak.sh's.
		KV_DEFERRED=1
		ktap_set_plan $(($1 - 1))
		kv_window_start
		kv_kmsg_gap
	else
		ktap_set_plan "$1"
	fi
	kv_cleanup
	# The previous program's kv_end scanned; the boot scan was done by
	# /init. What was reported then is not ours.
	[ -e "$KV_KMEMLEAK" ] && [ -z "$KV_DEFERRED" ] && echo clear >"$KV_KMEMLEAK"
	# Nor is the kernel log of the programs before: dmesg (syslog
	# READ_ALL, kverbs_hardening.sh's sweep points) starts at the last
	# clear, so it formats this program's records only, not up to 8 MiB
	# of the run's. The console keeps every line. The cases read the log
	# through /dev/kmsg, from here on (kv_kmsg_pull).
	dmesg -c >/dev/null
	kv_kmsg_open || kv_msg "cannot read the kernel log through /dev/kmsg: every case fails"
	return 0
}

kv_end() {
	kv_cleanup
	if [ "$KV_DEFERRED" = none ]; then
		:
	elif [ -n "$KV_DEFERRED" ]; then
		# What the kernel logs from here on is the program's too, until
		# the next program or kverbs_kmemleak.sh looks (kv_kmsg_gap).
		kv_kmsg clear
		echo "$(basename "$0" .sh) $(kv_jiffies)${KV_KMEMLEAK_AFTER:+ $KV_KMEMLEAK_AFTER}" >>"$KV_KMEMLEAK_WINDOWS"
	else
		kv_case "kmemleak_clean_$(basename "$0" .sh)" kv_kmemleak_check
	fi
	kv_finish
}

# kv_finish: the end of the program's KTAP output, its exit status.
kv_finish() {
	# A plan that does not match what ran is a failure of its own.
	if [ $((KTAP_TESTNO - 1)) -ne "$KSFT_NUM_TESTS" ]; then
		kv_msg "planned $KSFT_NUM_TESTS test cases, ran $((KTAP_TESTNO - 1))"
		KV_FAILED="${KV_FAILED:+$KV_FAILED }test_plan_matches_cases_run"
		ktap_test_fail "test_plan_matches_cases_run"
	fi
	# ktap_finished passes a program whose passes and skips add up to its
	# plan, even with failed cases beside them: never let a failure pass.
	if [ "$KTAP_CNT_FAIL" -ne 0 ]; then
		# Named again beside the totals, where a log's tail shows them.
		kv_msg "failed: $KV_FAILED"
		ktap_print_totals
		exit "$KSFT_FAIL"
	fi
	ktap_finished
}
