#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# build-fio.sh [MIRROR]: prints the path of a static fio for the test VM,
# building it first from MIRROR's source if the cache lacks it (without
# MIRROR, a cache lacking it is an error: tools/setup.sh builds it).
#
# Debian's fio package is linked with the engines of every storage system
# Debian has (librbd, librados, glusterfs, pmem, nbd): 84 MB of shared
# libraries the guest's initramfs would carry for two engines. So the
# guest's fio is Debian's source of the same version (its orig tarball from
# the machine's Debian mirror, MIRROR, checked against the sha256 of
# fio_3.33-3.dsc), configured without those engines and linked statically:
# libaio, io_uring, psync and the verify code are all the tests use. And
# without SysV shared memory (--disable-shm: jobs are threads), which the
# test kernel does not have (CONFIG_SYSVIPC unset: fio failed with "failed
# to setup shm segment").
# The build takes about 15 s; the binary is cached in
# ${XDG_CACHE_HOME:-~/.cache}/kverbs/fio-$VERSION-<hash of the options>.

set -euo pipefail

VERSION=3.33
SHA256=d2410e13e0f379d061d077cc5ae325835bb7c6186aa7bafc1df954cbc9b014fc

OPTIONS=(--build-static --disable-native --disable-shm --disable-numa --disable-rdma
	--disable-rados --disable-rbd --disable-http --disable-gfapi --disable-libnfs
	--disable-pmem --disable-xnvme --disable-libzbc --disable-tcmalloc --disable-dfs
	--disable-lex)

mirror=${1:-}
dir=${XDG_CACHE_HOME:-$HOME/.cache}/kverbs/fio-$VERSION-$(echo "${OPTIONS[*]}" | sha256sum | cut -c1-12)
if [ -x "$dir/fio" ]; then
	echo "$dir/fio"
	exit 0
fi
if [ -z "$mirror" ]; then
	echo "kverbs: no fio for the guest in $dir: run tools/setup.sh" >&2
	exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tarball=fio_$VERSION.orig.tar.gz
echo "kverbs: building a static fio $VERSION from Debian's source ($mirror)" >&2
curl -fsS -m 300 -o "$work/$tarball" "$mirror/pool/main/f/fio/$tarball" || {
	echo "kverbs: fetching $mirror/pool/main/f/fio/$tarball failed" >&2
	exit 1
}
echo "$SHA256  $work/$tarball" | sha256sum -c --quiet - >&2 || {
	echo "kverbs: $tarball: not the sha256 of Debian's fio_$VERSION-3.dsc" >&2
	exit 1
}
tar -C "$work" -xzf "$work/$tarball"
(
	cd "$work/fio-$VERSION"
	./configure "${OPTIONS[@]}" >"$work/configure.log" 2>&1 || exit 1
	grep -q '^Linux AIO support  *yes' "$work/configure.log" || {
		echo "kverbs: fio's configure found no libaio (libaio-dev)" >"$work/make.log"
		exit 1
	}
	make -j"$(nproc)" fio >"$work/make.log" 2>&1
) || {
	tail -n 20 "$work/configure.log" "$work/make.log" >&2 2>/dev/null
	echo "kverbs: building fio $VERSION failed" >&2
	exit 1
}
mkdir -p "$dir"
strip -o "$dir/fio.tmp" "$work/fio-$VERSION/fio"
mv "$dir/fio.tmp" "$dir/fio"
echo "$dir/fio"
