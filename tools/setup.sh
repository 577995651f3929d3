#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Install what kverbs needs to build its test kernel, the module and the
# test VM, on Debian bookworm.  Idempotent: installs only what is missing and
# says what it installs.  Without root it prints the command to run instead.

set -euo pipefail

BINDGEN_VERSION=0.73.2

# KVERBS_KERNEL selects the test kernel's source: 6.12 (Debian bookworm's
# linux-source-6.12, the default) or 7.3 (linux-source-7.3 from the
# trixie-backports suite, added for that one package: see below).
KVERBS_KERNEL=${KVERBS_KERNEL:-6.12}
case "$KVERBS_KERNEL" in
6.12 | 7.3) ;;
*)
	echo "kverbs: KVERBS_KERNEL=$KVERBS_KERNEL: 6.12 (the default) or 7.3" >&2
	exit 1
	;;
esac

# Debian packages: kernel source, the toolchain the 6.12 kernel's Rust needs
# (rustc-web 1.96 with its core source), LLVM 19, QEMU and the guest userspace
# (static busybox, rdma-core tools for the tests), cargo to build bindgen-cli,
# python3 and the shellcheck tool for the harness tests, gnuplot for make
# bench's plots, patch for its instrumented rxe (KVERBS_BENCH_FLAVOR=trace),
# curl and libaio-dev for the guest's fio (built by tools/build-fio.sh),
# e2fsprogs for its mkfs.ext4 and e2fsck.
PKGS=(
	"linux-source-$KVERBS_KERNEL"
	rustc-web rust-web-src rust-web-clippy rustfmt-web cargo-web
	clang-19 lld-19 llvm-19 libclang-19-dev
	make flex bison bc cpio xz-utils kmod libelf-dev libssl-dev
	qemu-system-x86 busybox-static
	iproute2 rdma-core ibverbs-utils ibverbs-providers rdmacm-utils perftest
	libibverbs-dev librdmacm-dev gcc libc6-dev
	shellcheck util-linux python3 gnuplot-nox patch curl libaio-dev e2fsprogs
)

# The suite that has linux-source-7.3 (Architecture: all; it depends only
# on binutils and xz-utils, so it installs on bookworm).  It is added for
# that one package: its other packages get priority -1 (never installed,
# never an upgrade).  The mirror is the one this machine's Debian source
# already uses.
BACKPORTS_LIST=/etc/apt/sources.list.d/kverbs-trixie-backports.sources
BACKPORTS_PIN=/etc/apt/preferences.d/kverbs-trixie-backports

# debian_mirror: the URI of the machine's Debian archive source (the one
# that has the bookworm suite), from a deb822 .sources file or a one-line
# sources.list entry.
debian_mirror() {
	local f uris=
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		uris+=$(awk '/^URIs:/ { uri = $2 } /^$/ { uri = "" }
			/^Suites:/ && / bookworm( |$)/ { print uri; exit }' "$f")$'\n'
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		uris+=$(sed -E 's/ \[[^]]*\]//' "$f" |
			awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }')$'\n'
	done
	uris=$(printf '%s' "$uris" | grep -m 1 .) || return 1
	echo "$uris"
}

add_trixie_backports() {
	[ -f "$BACKPORTS_LIST" ] && [ -f "$BACKPORTS_PIN" ] && return
	local mirror
	mirror=$(debian_mirror) || {
		echo "kverbs: no Debian bookworm source in /etc/apt to take the mirror from" >&2
		exit 1
	}
	echo "kverbs: adding trixie-backports ($mirror) for linux-source-7.3 alone"
	cat >"$BACKPORTS_PIN" <<PIN
# kverbs (tools/setup.sh): from trixie-backports, linux-source-7.3 only.
Package: linux-source-7.3
Pin: release n=trixie-backports
Pin-Priority: 500

Package: *
Pin: release n=trixie-backports
Pin-Priority: -1
PIN
	cat >"$BACKPORTS_LIST" <<LIST
# kverbs (tools/setup.sh): for linux-source-7.3 (pinned in $BACKPORTS_PIN).
Types: deb
URIs: $mirror
Suites: trixie-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
LIST
}

missing=()
for p in "${PKGS[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
		missing+=("$p")
	fi
done

if [ ${#missing[@]} -gt 0 ]; then
	cmd="apt-get install -y --no-install-recommends ${missing[*]}"
	if [ "$(id -u)" -ne 0 ]; then
		echo "kverbs: missing Debian packages; run as root:" >&2
		echo "  apt-get update && $cmd" >&2
		exit 1
	fi
	echo "kverbs: installing Debian packages: ${missing[*]}"
	[ "$KVERBS_KERNEL" = 7.3 ] && add_trixie_backports
	# A fresh machine may have no package lists yet: always update first.
	apt-get update -q >/tmp/kverbs-apt.log 2>&1 || {
		tail -n 5 /tmp/kverbs-apt.log >&2
		echo "kverbs: apt-get update failed (network? /etc/apt/sources.list?); log: /tmp/kverbs-apt.log" >&2
		exit 1
	}
	# shellcheck disable=SC2086 # $cmd is split into words on purpose
	DEBIAN_FRONTEND=noninteractive $cmd >>/tmp/kverbs-apt.log 2>&1 || {
		tail -n 5 /tmp/kverbs-apt.log >&2
		echo "kverbs: installing ${missing[*]} failed; log: /tmp/kverbs-apt.log" >&2
		exit 1
	}
fi

# bindgen-cli, built with Debian's cargo and rustc (cargo-web, rustc-web):
# no rustup and no ~/.cargo/bin needed.  As root it goes to /usr/local/bin,
# which is in every PATH; otherwise to ~/.cargo/bin, which the build adds.
export PATH="$HOME/.cargo/bin:$PATH"
if ! bindgen --version 2>/dev/null | grep -q "bindgen $BINDGEN_VERSION\$"; then
	root=$HOME/.cargo
	[ "$(id -u)" -eq 0 ] && root=/usr/local
	echo "kverbs: installing bindgen-cli $BINDGEN_VERSION into $root/bin with /usr/bin/cargo"
	RUSTC=/usr/bin/rustc /usr/bin/cargo install --quiet --locked --root "$root" \
		bindgen-cli --version "$BINDGEN_VERSION" || {
		echo "kverbs: building bindgen-cli failed (is crates.io reachable?)" >&2
		exit 1
	}
fi

# The guest's fio: static, built from Debian's source of fio (see
# tools/build-fio.sh for why not Debian's binary); cached.
mirror=$(debian_mirror) || {
	echo "kverbs: no Debian bookworm source in /etc/apt to fetch fio's source from" >&2
	exit 1
}
"$(dirname "$0")/build-fio.sh" "$mirror" >/dev/null
