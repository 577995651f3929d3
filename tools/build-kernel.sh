#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# build-kernel.sh [--configure-only]
#
# Build (or find in the cache) the kverbs test kernel: Debian's 6.12 source,
# allnoconfig + tools/testing/selftests/kverbs/config, built with LLVM 19 and
# Debian's rustc.  Prints the build directory (the KDIR for the module build)
# as its last line of output.  With --configure-only it stops after the
# configuration and its check against the fragment.
#
# The cache lives in ${XDG_CACHE_HOME:-~/.cache}/kverbs and is keyed on the
# kernel version, the config fragment and the toolchain versions: a warm run
# does no kernel work, a changed fragment or toolchain builds anew.  An
# interrupted unpack is redone; an interrupted build goes on where it stopped.
#
# KVERBS_FLAVOR=perf builds the performance kernel instead: the same
# fragment with tools/bench/config over it (no debug options), cached apart
# (perf-build-<key>); each flavor keeps its own latest build.
# KVERBS_FLAVOR=trace is the performance kernel with rxe instrumented by
# tools/bench/rxe-trace.patch ("rxe-trace:" lines at its retransmit timer,
# its retries and its responder's errors; 6.12 only), built from a patched
# copy of the source (linux-<version>-rxe-trace), cached apart
# (trace-build-<key>): make bench KVERBS_BENCH_FLAVOR=trace.
#
# KVERBS_KERNEL=7.3 builds Debian's linux-source-7.3 instead of 6.12 (the
# default), from the same fragment less the options that kernel no longer
# has (gone_options below); its builds are cached apart (k7.3-build-<key>,
# k7.3-perf-build-<key>), so that the two kernels do not evict each other.
#
# Every flavour is built with the kernel patches of tools/patches (in the
# order of their names; each applies to 6.12 and 7.3 and is written to be
# sent upstream): they are applied to the unpacked source in place, each
# kept in the source's .kverbs-patches/ as applied, so that a changed set
# is reversed and applied anew and a build rebuilds only the files they
# touch.
#
# KVERBS_KERNEL_TARBALL, KVERBS_CONFIG (the fragment) and
# KVERBS_KERNEL_PATCHES (the patches' directory; empty: none) override the
# defaults; the harness tests use them.

set -euo pipefail

die() {
	echo "kverbs: $*" >&2
	exit 1
}

configure_only=0
case "${1:-}" in
--configure-only) configure_only=1 ;;
"") ;;
*) die "usage: $0 [--configure-only]" ;;
esac

top=$(cd "$(dirname "$0")/.." && pwd)
fragment=${KVERBS_CONFIG:-$top/tools/testing/selftests/kverbs/config}
fragment_name=$fragment
flavor=${KVERBS_FLAVOR:-debug}
case "$flavor" in
debug) prefix=build ;;
perf) prefix=perf-build ;;
trace) prefix=trace-build ;;
*) die "KVERBS_FLAVOR=${KVERBS_FLAVOR}: debug (the default), perf or trace" ;;
esac
# The fragment's options that a kernel no longer has, one place per kernel.
# 7.3: CRYPTO_CRC32 is gone (rxe's ICRC calls the crc32 library directly).
kernel=${KVERBS_KERNEL:-6.12}
case "$kernel" in
6.12) gone_options=() added_options=() ;;
7.3)
	gone_options=(CONFIG_CRYPTO_CRC32)
	# The NIC of the two-VM link (tools/vm/run.sh): e1000 on 7.x, where
	# virtio-net's page pool meets an rxe lock problem.
	added_options=(CONFIG_NET_VENDOR_INTEL=y CONFIG_E1000=y)
	prefix=k7.3-$prefix
	;;
*) die "KVERBS_KERNEL=$kernel: 6.12 (the default) or 7.3" ;;
esac
tarball=${KVERBS_KERNEL_TARBALL:-/usr/src/linux-source-$kernel.tar.xz}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/kverbs
jobs=${JOBS:-$(($(nproc) + 1))}
export PATH="$HOME/.cargo/bin:$PATH"

kmake_vars=(LLVM=-19 RUSTC=/usr/bin/rustc RUSTFMT=/usr/bin/rustfmt
	CLIPPY_DRIVER=/usr/bin/clippy-driver BINDGEN=bindgen ARCH=x86_64)

# What a fresh machine may lack: each missing piece is one line saying what
# to do, never a silent exit.
[ -r "$tarball" ] || die "no kernel source at $tarball: run tools/setup.sh (or make setup${kernel:+ KVERBS_KERNEL=$kernel})"
[ -r "$fragment" ] || die "no config fragment at $fragment"
effective=$(mktemp)
trap 'rm -f "$effective" "$effective.opts"' EXIT
trace_patch=
if [ "$flavor" = trace ]; then
	[ "$kernel" = 6.12 ] || die "KVERBS_FLAVOR=trace: tools/bench/rxe-trace.patch is for 6.12's rxe"
	trace_patch=$top/tools/bench/rxe-trace.patch
	[ -r "$trace_patch" ] || die "no rxe trace patch at $trace_patch"
fi
patches=()
patch_dir=${KVERBS_KERNEL_PATCHES-$top/tools/patches}
if [ -n "$patch_dir" ]; then
	for p in "$patch_dir"/*.patch; do
		[ -e "$p" ] && patches+=("$p")
	done
fi
if [ "$flavor" != debug ]; then
	# The fragment with the overrides' options replaced by their lines.
	overrides=$top/tools/bench/config
	[ -r "$overrides" ] || die "no config overrides at $overrides"
	sed -nE 's/^(# )?(CONFIG_[A-Za-z0-9_]+)[= ].*/\2/p' "$overrides" >"$effective.opts"
	grep -vwF -f "$effective.opts" "$fragment" >"$effective" || true
	rm -f "$effective.opts"
	cat "$overrides" >>"$effective"
	fragment_name="$fragment with $overrides over it"
	cp "$effective" "$effective.opts"
else
	cp "$fragment" "$effective.opts"
fi
# The options this kernel no longer has leave the fragment.
if [ ${#gone_options[@]} -gt 0 ]; then
	printf '%s\n' "${gone_options[@]}" | grep -vwF -f - "$effective.opts" >"$effective" || true
	fragment_name="$fragment_name (less ${gone_options[*]}, gone in $kernel)"
else
	cp "$effective.opts" "$effective"
fi
rm -f "$effective.opts"
if [ ${#added_options[@]} -gt 0 ]; then
	printf '%s\n' "${added_options[@]}" >>"$effective"
	fragment_name="$fragment_name (plus ${added_options[*]} in $kernel)"
fi
fragment=$effective
for tool in /usr/bin/rustc clang-19 ld.lld-19 bindgen make tar xz; do
	command -v "$tool" >/dev/null || die "$tool not found: run tools/setup.sh (or make setup)"
done
[ -d /usr/lib/rustlib/src/rust/library ] || [ -d "$(/usr/bin/rustc --print sysroot)/lib/rustlib/src/rust/library" ] ||
	die "no Rust library source for /usr/bin/rustc: run tools/setup.sh (package rust-web-src)"

kver=$(dpkg-query -W -f='${Version}' "linux-source-$kernel" 2>/dev/null || stat -c %Y "$tarball")
key=$( {
	echo "kernel $kver"
	cat "$fragment"
	/usr/bin/rustc --version
	clang-19 --version | head -n 1
	bindgen --version
	echo "vars ${kmake_vars[*]}"
	[ -z "$trace_patch" ] || cat "$trace_patch"
	[ ${#patches[@]} -eq 0 ] || cat "${patches[@]}"
} | sha256sum | cut -c1-16)

src="$cache/linux-$kver"
build="$cache/$prefix-$key"
# The builds of a flavour share one build tree, $tree; build-<key> (the
# directory the module build and the VMs use) is a symbolic link to it,
# its .kverbs-built holds the key it was built for.  Kbuild resolves O= to
# the tree's real path, so a new key (a changed fragment, toolchain or
# patch) rebuilds only what changed: a tree under a new path would rebuild
# everything (objtool's build records its absolute path, and every object
# depends on objtool).  A cache from before the tree adopts its newest
# complete build directory where it lies ($tree is then a link to it).
tree="$cache/tree-$prefix"
log="$cache/$prefix-$key.log"

# built DIR: DIR holds the build of this key (an older cache's build
# directory holds an empty marker: its name is its key).
built() {
	[ -f "$1/.kverbs-built" ] || return 1
	[ "$(cat "$1/.kverbs-built")" = "$key" ] || { [ ! -L "$1" ] && [ ! -s "$1/.kverbs-built" ]; }
}
if built "$build"; then
	echo "kverbs: test kernel up to date (cache key $key)" >&2
	echo "$build"
	exit 0
fi

mkdir -p "$cache" || die "cannot create the cache directory $cache"

# One build at a time per kernel and cache (the flavours of a kernel share
# its unpacked source; .ci/run builds 7.3's beside 6.12's).  The lock is an
# flock on an open file: a process that dies lets go of it, so a lock file
# left behind is harmless.
exec 9>"$cache/.lock-$kernel"
if ! flock -n 9; then
	echo "kverbs: another build holds $cache/.lock-$kernel; waiting for it" >&2
	flock 9
	if built "$build"; then
		echo "$build"
		exit 0
	fi
fi

# The unpack goes to a temporary directory, renamed when complete: a
# directory without the marker is what an interrupted unpack left.
if [ ! -f "$src/.kverbs-unpacked" ]; then
	echo "kverbs: unpacking $tarball into $src" >&2
	rm -rf "$src" "$src.tmp"
	mkdir -p "$src.tmp"
	tar -C "$src.tmp" --strip-components=1 -xf "$tarball" ||
		die "unpacking $tarball failed (disk full? $(df -h --output=avail "$cache" | tail -n 1) free)"
	touch "$src.tmp/.kverbs-unpacked"
	mv "$src.tmp" "$src"
fi

# The kernel patches, in place: what .kverbs-patches/ holds is what is
# applied (each patch recorded once it applied); a set that differs from
# the wanted one is reversed, last first, then the wanted set applied.
applied=$src/.kverbs-patches
want_ids=$(for p in "${patches[@]}"; do sha256sum <"$p" | cut -c1-16; done)
have_ids=$(for p in "$applied"/*.patch; do if [ -e "$p" ]; then sha256sum <"$p" | cut -c1-16; fi; done)
if [ "$want_ids" != "$have_ids" ]; then
	mkdir -p "$applied"
	for p in $(find "$applied" -name '*.patch' | sort -r); do
		echo "kverbs: reversing $(basename "$p") in $src" >&2
		patch -s -R -p1 -d "$src" <"$p" ||
			die "$p does not reverse in $src: remove $src to unpack it anew"
		rm -f "$p"
	done
	n=0
	for p in "${patches[@]}"; do
		n=$((n + 1))
		echo "kverbs: applying $p to $src" >&2
		patch -s -p1 -d "$src" <"$p" || die "$p does not apply to $src"
		cp "$p" "$applied/$(printf '%02d' "$n")-$(basename "$p")"
	done
fi

# The trace flavour builds from a copy of the source with rxe patched; a
# changed patch makes a new copy.
if [ -n "$trace_patch" ]; then
	tsrc=$src-rxe-trace
	if ! cmp -s "$trace_patch" "$tsrc/.kverbs-rxe-trace.patch" ||
		[ "$want_ids" != "$(cat "$tsrc/.kverbs-patch-ids" 2>/dev/null)" ]; then
		echo "kverbs: copying $src to $tsrc and applying $trace_patch" >&2
		rm -rf "$tsrc" "$tsrc.tmp"
		cp -a "$src" "$tsrc.tmp"
		patch -s -d "$tsrc.tmp" -p1 <"$trace_patch" || die "$trace_patch does not apply to $src"
		cp "$trace_patch" "$tsrc.tmp/.kverbs-rxe-trace.patch"
		echo "$want_ids" >"$tsrc.tmp/.kverbs-patch-ids"
		mv "$tsrc.tmp" "$tsrc"
	fi
	src=$tsrc
fi

echo "kverbs: building the test kernel in $build (log: $log)" >&2
start=$(date +%s)
# The tree: the build of every key, in one place, so that only what a new
# key changes is rebuilt (Kbuild tracks each CONFIG_ option and file).
if [ ! -e "$tree" ]; then
	prev=
	for d in "$cache"/"$prefix"-*/; do
		[ -L "${d%/}" ] && continue
		[ -f "$d/.kverbs-built" ] || continue
		if [ -z "$prev" ] || [ "$d" -nt "$prev" ]; then
			prev=$d
		fi
	done
	if [ -n "$prev" ]; then
		echo "kverbs: the build tree is ${prev%/}" >&2
		ln -s "$(basename "${prev%/}")" "$tree"
	else
		mkdir -p "$tree"
	fi
fi
rm -f "$tree/.kverbs-built"
# This key's name for the tree (an interrupted build of an older cache
# under it goes).
if [ "$(readlink -f "$build")" != "$(readlink -f "$tree")" ]; then
	rm -rf "$build"
	ln -s "$(basename "$tree")" "$build"
fi
{
	make -C "$src" O="$build" "${kmake_vars[@]}" allnoconfig
	"$src/scripts/kconfig/merge_config.sh" -m -O "$build" "$build/.config" "$fragment"
	make -C "$src" O="$build" "${kmake_vars[@]}" olddefconfig
} >"$log" 2>&1 || {
	tail -n 30 "$log" >&2
	die "configuring the kernel failed; log: $log"
}

# Every option the fragment asks for must have survived olddefconfig: a
# silently dropped dependency would make the tests test something else.
bad=0
while IFS= read -r line; do
	case "$line" in
	CONFIG_*=*)
		grep -qxF "$line" "$build/.config" || { echo "kverbs: config lost: $line" >&2; bad=1; } ;;
	"# CONFIG_"*" is not set")
		opt=${line#\# }; opt=${opt%% *}
		grep -q "^$opt=" "$build/.config" && { echo "kverbs: config forced on: $opt" >&2; bad=1; } ;;
	esac
done <"$fragment"
[ $bad -eq 0 ] || die "the kernel configuration does not match $fragment_name (see the lines above)"

if [ $configure_only = 1 ]; then
	echo "kverbs: test kernel configured in $build" >&2
	echo "$build"
	exit 0
fi

if ! make -C "$src" O="$build" "${kmake_vars[@]}" -j"$jobs" bzImage modules >>"$log" 2>&1; then
	grep -E 'error|Error' "$log" | tail -n 20 >&2
	die "building the kernel failed; log: $log"
fi
echo "$key" >"$build/.kverbs-built"
echo "kverbs: test kernel built in $(($(date +%s) - start)) s" >&2

# Builds of this flavor for other keys are stale: keep the disk use bounded.
# (The links of other keys go; a tree adopted from an older cache stays.)
for old in "$cache"/"$prefix"-*; do
	{ [ "$old" = "$build" ] || [ "$old" = "$log" ]; } && continue
	[ ! -L "$old" ] && [ "$(readlink -f "$old")" = "$(readlink -f "$tree")" ] && continue
	rm -rf "$old"
done
echo "$build"
