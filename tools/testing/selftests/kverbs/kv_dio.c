// SPDX-License-Identifier: GPL-2.0
/*
 * kv_dio: one O_DIRECT read or write of a block device, from a buffer at a
 * chosen offset in page-aligned memory, failing if the kernel refuses
 * O_DIRECT (busybox's dd retries a refused O_DIRECT transfer buffered, and
 * allocates its buffer wherever malloc puts it: its "oflag=direct" proves
 * nothing about the device's direct path).
 *
 *   kv_dio w DEV SECTOR COUNT FILE FSECTOR BUFOFF
 *	COUNT sectors of FILE from its sector FSECTOR written at SECTOR of
 *	DEV, in one pwrite(2)
 *   kv_dio r DEV SECTOR COUNT FILE 0 BUFOFF
 *	COUNT sectors of DEV at SECTOR read into FILE (made anew), in one
 *	pread(2)
 *   kv_dio W DEV SECTOR COUNT FILE FSECTOR BUFOFF
 *	as w, again and again through one descriptor of DEV (kept open, so
 *	that the disk going away shows as the writes' error, not as an
 *	open's) until a write fails: exit status 1, the error on stderr
 *   kv_dio z DEV SECTOR COUNT - 0 0
 *	COUNT sectors of DEV at SECTOR zeroed (ioctl BLKZEROOUT: Write
 *	Zeroes requests if the disk takes them)
 *
 * Sectors are of 512 bytes; BUFOFF is the buffer's offset in its first
 * page (a multiple of the device's DMA alignment + 1, or O_DIRECT
 * fails). Exit status 0, or 1 with a message on stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static int fail(const char *what, const char *name)
{
	fprintf(stderr, "kv_dio: %s %s: %s\n", what, name, strerror(errno));
	return 1;
}

int main(int argc, char **argv)
{
	unsigned long long sector, fsector;
	size_t len, off;
	char *mem, *buf;
	ssize_t n;
	int dev, f, w;

	if (argc != 8 || !argv[1][0] || argv[1][1] || !strchr("wWrz", argv[1][0])) {
		fprintf(stderr, "usage: kv_dio w|W|r|z DEV SECTOR COUNT FILE FSECTOR BUFOFF\n");
		return 1;
	}
	if (argv[1][0] == 'z') {
		uint64_t range[2] = { strtoull(argv[3], NULL, 0) * 512,
				      strtoull(argv[4], NULL, 0) * 512 };

		dev = open(argv[2], O_WRONLY);
		if (dev < 0)
			return fail("open", argv[2]);
		if (ioctl(dev, BLKZEROOUT, range))
			return fail("BLKZEROOUT", argv[2]);
		return close(dev) ? fail("close", argv[2]) : 0;
	}
	w = argv[1][0] == 'w' || argv[1][0] == 'W';
	sector = strtoull(argv[3], NULL, 0);
	len = strtoull(argv[4], NULL, 0) * 512;
	fsector = strtoull(argv[6], NULL, 0);
	off = strtoull(argv[7], NULL, 0);
	if (!len || off >= 4096) {
		fprintf(stderr, "kv_dio: COUNT 0 or BUFOFF not within a page\n");
		return 1;
	}
	if (posix_memalign((void **)&mem, 4096, len + 4096)) {
		fprintf(stderr, "kv_dio: out of memory\n");
		return 1;
	}
	buf = mem + off;
	dev = open(argv[2], (w ? O_WRONLY : O_RDONLY) | O_DIRECT);
	if (dev < 0)
		return fail("open", argv[2]);
	if (w) {
		f = open(argv[5], O_RDONLY);
		if (f < 0)
			return fail("open", argv[5]);
		n = pread(f, buf, len, fsector * 512);
		if (n != (ssize_t)len)
			return n < 0 ? fail("read", argv[5]) : (errno = EIO, fail("short read of", argv[5]));
		do
			n = pwrite(dev, buf, len, sector * 512);
		while (argv[1][0] == 'W' && n == (ssize_t)len);
		if (n != (ssize_t)len)
			return n < 0 ? fail("write", argv[2]) : (errno = EIO, fail("short write of", argv[2]));
	} else {
		n = pread(dev, buf, len, sector * 512);
		if (n != (ssize_t)len)
			return n < 0 ? fail("read", argv[2]) : (errno = EIO, fail("short read of", argv[2]));
		f = open(argv[5], O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (f < 0)
			return fail("open", argv[5]);
		if (write(f, buf, len) != (ssize_t)len)
			return fail("write", argv[5]);
	}
	if (close(f) || close(dev))
		return fail("close", argv[2]);
	return 0;
}
