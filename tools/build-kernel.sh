#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Build (or find in the cache) the kverbs test kernel: Debian's 6.12 source,
# allnoconfig + tools/testing/selftests/kverbs/config, built with LLVM 19 and
# Debian's rustc.  Prints the build directory (the KDIR for the module build)
# as its last line of output.
#
# The cache lives in ${XDG_CACHE_HOME:-~/.cache}/kverbs and is keyed on the
# kernel version, the config fragment and the toolchain versions: a warm run
# does no kernel work, a changed fragment or toolchain builds anew.

set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
fragment="$top/tools/testing/selftests/kverbs/config"
tarball=${KVERBS_KERNEL_TARBALL:-/usr/src/linux-source-6.12.tar.xz}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/kverbs
jobs=${JOBS:-$(($(nproc) + 1))}
export PATH="$HOME/.cargo/bin:$PATH"

kmake_vars=(LLVM=-19 RUSTC=/usr/bin/rustc RUSTFMT=/usr/bin/rustfmt
	CLIPPY_DRIVER=/usr/bin/clippy-driver BINDGEN=bindgen ARCH=x86_64)

[ -r "$tarball" ] || { echo "kverbs: no kernel source at $tarball (run tools/setup.sh)" >&2; exit 1; }

kver=$(dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null || stat -c %Y "$tarball")
key=$( {
	echo "kernel $kver"
	cat "$fragment"
	/usr/bin/rustc --version
	clang-19 --version | head -1
	bindgen --version
	echo "vars ${kmake_vars[*]}"
} | sha256sum | cut -c1-16)

src="$cache/linux-$kver"
build="$cache/build-$key"
log="$cache/build-$key.log"

if [ -f "$build/.kverbs-built" ]; then
	echo "kverbs: test kernel up to date (cache key $key)" >&2
	echo "$build"
	exit 0
fi

mkdir -p "$cache"
if [ ! -f "$src/.kverbs-unpacked" ]; then
	echo "kverbs: unpacking $tarball into $src" >&2
	rm -rf "$src" "$src.tmp"
	mkdir -p "$src.tmp"
	tar -C "$src.tmp" --strip-components=1 -xf "$tarball"
	touch "$src.tmp/.kverbs-unpacked"
	mv "$src.tmp" "$src"
fi

echo "kverbs: building the test kernel in $build (log: $log)" >&2
start=$(date +%s)
# Start from the previous build, if any, so that only what the new
# configuration changes is rebuilt (Kbuild tracks each CONFIG_ option).
if [ ! -d "$build" ]; then
	prev=$(ls -dt "$cache"/build-*/ 2>/dev/null | head -n 1)
	if [ -n "$prev" ] && [ -f "$prev/.kverbs-built" ]; then
		echo "kverbs: starting from ${prev%/}" >&2
		rm -f "$prev/.kverbs-built"
		mv "${prev%/}" "$build"
	fi
fi
mkdir -p "$build"
{
	make -C "$src" O="$build" "${kmake_vars[@]}" allnoconfig
	"$src/scripts/kconfig/merge_config.sh" -m -O "$build" "$build/.config" "$fragment"
	make -C "$src" O="$build" "${kmake_vars[@]}" olddefconfig
} >"$log" 2>&1 || { tail -30 "$log" >&2; exit 1; }

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
[ $bad -eq 0 ] || exit 1

if ! make -C "$src" O="$build" "${kmake_vars[@]}" -j"$jobs" bzImage modules >>"$log" 2>&1; then
	grep -E 'error|Error' "$log" | tail -20 >&2
	exit 1
fi
touch "$build/.kverbs-built"
echo "kverbs: test kernel built in $(($(date +%s) - start)) s" >&2

# Builds for other keys are stale: keep the disk use bounded.
for old in "$cache"/build-*; do
	[ "$old" = "$build" ] || [ "$old" = "$log" ] || rm -rf "$old"
done
echo "$build"
