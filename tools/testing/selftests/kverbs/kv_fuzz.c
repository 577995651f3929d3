// SPDX-License-Identifier: GPL-2.0
/*
 * kv_fuzz: writes generated strings to a control file, one write(2) each
 * (two or three for a "partial" one), and counts what came back.
 *
 *   kv_fuzz SEED COUNT FILE KEYS VALID...
 *
 * The generator is deterministic for a SEED (xorshift64*): COUNT strings
 * drawn from random bytes, mutations of the VALID strings, every key of
 * KEYS (comma separated) with boundary and overflow numbers, duplicated
 * keys, empty values, 4095/4096/4097-byte strings, partial writes,
 * non-UTF-8 bytes and embedded NULs.  A write that runs longer than
 * $KV_FUZZ_ALARM seconds (default 3) is interrupted by SIGALRM (the
 * control files end a run on a signal).
 *
 * $KV_FUZZ_ERRNOS (comma separated names, e.g. "EINVAL,ERANGE") lists the
 * errnos the file may give; a write refused with any other is named, with
 * its string (the first few), on stderr.
 *
 * Prints "kv_fuzz: seed S: N strings: K accepted, E refused (errno: count
 * ...)" and exits 1 if a write failed with something that is not an errno
 * a control file gives (a negative count, or errno 0) or with an errno
 * not in $KV_FUZZ_ERRNOS (when set), else 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LEN 4200

static uint64_t state;

static uint64_t rnd(void)
{
	state ^= state >> 12;
	state ^= state << 25;
	state ^= state >> 27;
	return state * 0x2545F4914F6CDD1DULL;
}

static size_t pick(size_t n)
{
	return n ? rnd() % n : 0;
}

static const char *const numbers[] = {
	"0", "1", "-1", "2", "255", "256", "4095", "4096", "4097", "65535", "65536",
	"1048576", "8388608", "8388609", "2147483647", "2147483648", "4294967295",
	"4294967296", "9223372036854775807", "18446744073709551615",
	"18446744073709551616", "99999999999999999999999999", "", "0x10", "1e3",
	" 5", "+5", "-0", "007", "5 ", "five",
};

static void on_alarm(int sig)
{
	(void)sig;
}

/* allowed[e]: errno e is in $KV_FUZZ_ERRNOS; returns 0 if it is not set. */
static int parse_errnos(char *allowed, int n)
{
	const char *list = getenv("KV_FUZZ_ERRNOS");
	char *copy, *name, *save;
	int e;

	if (!list)
		return 0;
	copy = strdup(list);
	for (name = strtok_r(copy, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
		for (e = 1; e < n; e++) {
			if (strerrorname_np(e) && !strcmp(strerrorname_np(e), name))
				break;
		}
		if (e == n) {
			fprintf(stderr, "kv_fuzz: KV_FUZZ_ERRNOS: unknown errno '%s'\n", name);
			exit(2);
		}
		allowed[e] = 1;
	}
	free(copy);
	return 1;
}

/* Prints len bytes of s on stderr, C-escaped, at most 160 of them. */
static void print_escaped(const char *s, size_t len)
{
	size_t i;

	for (i = 0; i < len && i < 160; i++) {
		unsigned char c = s[i];

		if (c >= 0x20 && c < 0x7f && c != '\\')
			fputc(c, stderr);
		else
			fprintf(stderr, "\\x%02x", c);
	}
	if (len > 160)
		fprintf(stderr, "... (%zu bytes)", len);
}

/* Appends s (len bytes) to buf at *len, within MAX_LEN. */
static void put(char *buf, size_t *len, const char *s, size_t n)
{
	if (*len + n > MAX_LEN)
		n = MAX_LEN - *len;
	memcpy(buf + *len, s, n);
	*len += n;
}

static void puts_(char *buf, size_t *len, const char *s)
{
	put(buf, len, s, strlen(s));
}

/* A key of KEYS (comma separated). */
static void put_key(char *buf, size_t *len, const char *keys)
{
	size_t nkeys = 1, k, i;
	const char *p = keys, *e;

	for (i = 0; keys[i]; i++)
		nkeys += keys[i] == ',';
	k = pick(nkeys);
	for (i = 0; i < k; i++)
		p = strchr(p, ',') + 1;
	e = strchr(p, ',');
	put(buf, len, p, e ? (size_t)(e - p) : strlen(p));
}

/* Generates one string into buf; returns its length; *parts is how many
 * writes it is to be split into. */
static size_t generate(char *buf, int *parts, const char *keys, char **valid, int nvalid)
{
	const char *v = valid[pick(nvalid)];
	size_t len = 0, i, n;
	unsigned int kind = pick(10);

	*parts = 1;
	switch (kind) {
	case 0: /* random bytes */
		n = pick(80);
		for (i = 0; i < n; i++)
			buf[len++] = rnd();
		break;
	case 1: /* mutations of a valid string */
	case 2:
		puts_(buf, &len, v);
		for (n = 1 + pick(4); n; n--) {
			size_t at = pick(len + 1);

			switch (pick(5)) {
			case 0: /* flip a byte */
				if (len)
					buf[pick(len)] ^= 1 << pick(8);
				break;
			case 1: /* insert a byte */
				if (len < MAX_LEN) {
					memmove(buf + at + 1, buf + at, len - at);
					buf[at] = "=,. 0123456789abz\n\t\\"[pick(20)];
					len++;
				}
				break;
			case 2: /* delete a byte */
				if (at < len) {
					memmove(buf + at, buf + at + 1, len - at - 1);
					len--;
				}
				break;
			case 3: /* cut */
				len = at;
				break;
			default: /* a key with a boundary number appended */
				puts_(buf, &len, ",");
				put_key(buf, &len, keys);
				puts_(buf, &len, "=");
				puts_(buf, &len, numbers[pick(sizeof(numbers) / sizeof(*numbers))]);
			}
		}
		break;
	case 3: /* every key with boundary and overflow numbers */
		puts_(buf, &len, v);
		puts_(buf, &len, ",");
		put_key(buf, &len, keys);
		puts_(buf, &len, "=");
		puts_(buf, &len, numbers[pick(sizeof(numbers) / sizeof(*numbers))]);
		break;
	case 4: /* duplicated keys */
		puts_(buf, &len, v);
		puts_(buf, &len, ",");
		puts_(buf, &len, v);
		break;
	case 5: /* empty values and separators */
		switch (pick(4)) {
		case 0:
			put_key(buf, &len, keys);
			puts_(buf, &len, "=");
			break;
		case 1:
			puts_(buf, &len, "=");
			break;
		case 2:
			puts_(buf, &len, ",,,");
			break;
		default:
			put_key(buf, &len, keys);
		}
		if (pick(2)) {
			puts_(buf, &len, ",");
			puts_(buf, &len, v);
		}
		break;
	case 6: /* 4095, 4096 or 4097 bytes */
		puts_(buf, &len, v);
		n = 4095 + pick(3);
		while (len < n)
			buf[len++] = pick(2) ? ',' : 'a';
		len = n;
		break;
	case 7: /* a partial write: two or three writes */
		puts_(buf, &len, v);
		*parts = 2 + pick(2);
		break;
	case 8: /* non-UTF-8 */
		puts_(buf, &len, v);
		for (n = 1 + pick(3); n && len; n--)
			buf[pick(len)] = "\xff\xc0\x80\xfe"[pick(4)];
		break;
	default: /* an embedded NUL */
		puts_(buf, &len, v);
		if (len)
			buf[pick(len)] = 0;
		break;
	}
	return len;
}

int main(int argc, char **argv)
{
	static long per_errno[4096];
	static char allowed[4096];
	long unexpected = 0;
	int check;
	struct sigaction sa = { .sa_handler = on_alarm };
	unsigned long long seed;
	long count, accepted = 0, refused = 0, odd = 0, i;
	unsigned int secs = getenv("KV_FUZZ_ALARM") ? atoi(getenv("KV_FUZZ_ALARM")) : 3;
	char buf[MAX_LEN + 1];
	int fd, parts, p, e;
	size_t len, off, chunk;
	ssize_t r;

	if (argc < 6) {
		fprintf(stderr, "usage: kv_fuzz SEED COUNT FILE KEYS VALID...\n");
		return 2;
	}
	seed = strtoull(argv[1], NULL, 10);
	count = strtol(argv[2], NULL, 10);
	state = seed * 0x9E3779B97F4A7C15ULL + 1;
	check = parse_errnos(allowed, 4096);
	sigaction(SIGALRM, &sa, NULL);	/* no SA_RESTART: the write ends */
	for (i = 0; i < count; i++) {
		len = generate(buf, &parts, argv[4], argv + 5, argc - 5);
		fd = open(argv[3], O_WRONLY);
		if (fd < 0) {
			perror(argv[3]);
			return 2;
		}
		alarm(secs ? secs : 3);
		e = 0;
		for (p = 0, off = 0; p < parts; p++) {
			chunk = p == parts - 1 ? len - off : (len - off) / 2;
			r = write(fd, buf + off, chunk);
			if (r < 0) {
				e = errno;
				break;
			}
			if ((size_t)r > chunk) {
				odd++;
				fprintf(stderr, "kv_fuzz: string %ld: write returned %zd for %zu bytes\n",
					i, r, chunk);
			}
			off += chunk;
		}
		alarm(0);
		close(fd);
		if (e) {
			refused++;
			per_errno[e < 4096 ? e : 0]++;
			if (check && (e >= 4096 || !allowed[e]) && unexpected++ < 5) {
				fprintf(stderr, "kv_fuzz: string %ld refused with %s, not in KV_FUZZ_ERRNOS: '",
					i, e < 4096 && strerrorname_np(e) ? strerrorname_np(e) : "?");
				print_escaped(buf, len);
				fprintf(stderr, "'\n");
			}
		} else {
			accepted++;
		}
	}
	printf("kv_fuzz: seed %llu: %ld strings to %s: %ld accepted, %ld refused (", seed, count,
	       argv[3], accepted, refused);
	for (e = 0, p = 0; e < 4096; e++) {
		if (per_errno[e])
			printf("%s%s %ld", p++ ? ", " : "", e ? strerrorname_np(e) : "?", per_errno[e]);
	}
	printf(")\n");
	if (unexpected)
		printf("kv_fuzz: %ld strings refused with an errno not in KV_FUZZ_ERRNOS (%s)\n",
		       unexpected, getenv("KV_FUZZ_ERRNOS"));
	return odd || per_errno[0] || unexpected ? 1 : 0;
}
