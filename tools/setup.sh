#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Install what kverbs needs to build its test kernel, the module and the
# test VM, on Debian bookworm.  Idempotent: installs only what is missing and
# says what it installs.  Without root it prints the command to run instead.

set -euo pipefail

BINDGEN_VERSION=0.73.2

# Debian packages: kernel source, the toolchain the 6.12 kernel's Rust needs
# (rustc-web 1.96 with its core source), LLVM 19, QEMU and the guest userspace
# (static busybox, rdma-core tools for the tests).
PKGS=(
	linux-source-6.12
	rustc-web rust-web-src rust-web-clippy rustfmt-web
	clang-19 lld-19 llvm-19 libclang-19-dev
	make flex bison bc cpio xz-utils kmod libelf-dev libssl-dev
	qemu-system-x86 busybox-static
	iproute2 rdma-core ibverbs-utils ibverbs-providers rdmacm-utils perftest
	libibverbs-dev librdmacm-dev gcc libc6-dev
)

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
	apt-get update -q >/dev/null
	DEBIAN_FRONTEND=noninteractive $cmd >/dev/null
fi

export PATH="$HOME/.cargo/bin:$PATH"
if ! bindgen --version 2>/dev/null | grep -q "bindgen $BINDGEN_VERSION\$"; then
	if ! command -v cargo >/dev/null; then
		echo "kverbs: cargo is needed to install bindgen-cli $BINDGEN_VERSION" >&2
		exit 1
	fi
	echo "kverbs: installing bindgen-cli $BINDGEN_VERSION with cargo"
	cargo install --quiet --locked bindgen-cli --version "$BINDGEN_VERSION"
fi
