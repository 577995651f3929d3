// SPDX-License-Identifier: GPL-2.0
/*
 * kv_kmsg end|cleared|pull|clear: the kernel log through /dev/kmsg open on
 * standard input (kverbs_lib.sh: kv_kmsg_open, kv_kmsg_pull), shared with
 * the shell that opened it, so that its reading position stays between
 * calls.
 *
 * end:  moves the position to the end of the log (the next record to be
 *       written) and makes reads non-blocking: a shell can do neither, and
 *       /dev/kmsg opened anew is read from the oldest record of the log.
 * cleared: the same, to the first record after the last clear (syslog's
 *       SYSLOG_ACTION_CLEAR, dmesg -c's, or kv_kmsg clear's).
 * clear: clears the log for syslog readers (dmesg) and "cleared" (no
 *       standard input needed); the records stay for /dev/kmsg's readers.
 * pull: prints the records logged since the position, as dmesg prints
 *       them ("[    5.123456] text"), and moves the position past them.
 *       A record is "PRIO,SEQ,USEC,FLAGS;TEXT" with non-printable bytes and
 *       backslashes escaped as \xNN, then its dictionary's lines, which
 *       begin with a space (dropped). Each read(2) returns one record.
 *
 * Exit status 0, or 1 with a message.
 */
#define _GNU_SOURCE /* SEEK_DATA */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/klog.h>
#include <unistd.h>

/* include/linux/syslog.h: not in the C library's headers. */
#define SYSLOG_ACTION_CLEAR 5

/* WHENCE: SEEK_END (the end of the log) or SEEK_DATA (after the clear). */
static int position(int whence)
{
	int flags = fcntl(0, F_GETFL);

	if (flags < 0 || fcntl(0, F_SETFL, flags | O_NONBLOCK) < 0 ||
	    lseek(0, 0, whence) < 0) {
		perror("kv_kmsg: /dev/kmsg on standard input");
		return 1;
	}
	return 0;
}

/* Prints TEXT (up to its newline) unescaped. */
static void put_text(const char *t)
{
	for (; *t && *t != '\n'; t++) {
		unsigned int c;

		if (t[0] == '\\' && t[1] == 'x' && sscanf(t + 2, "%2x", &c) == 1) {
			putchar(c);
			t += 3;
		} else {
			putchar(*t);
		}
	}
	putchar('\n');
}

static int pull(void)
{
	/* A record is at most PRINTK_MESSAGE_MAX (2048) bytes, escaped. */
	static char buf[8192 + 1];

	for (;;) {
		unsigned long long usec;
		ssize_t n = read(0, buf, sizeof(buf) - 1);
		char *text;

		if (n < 0 && errno == EAGAIN)
			break;
		if (n < 0 && errno == EPIPE) {
			/* Overwritten before they were read: said in the log. */
			printf("[kv_kmsg: records lost, overwritten before they were read]\n");
			continue;
		}
		if (n <= 0) {
			perror("kv_kmsg pull: reading /dev/kmsg");
			return 1;
		}
		buf[n] = '\0';
		text = strchr(buf, ';');
		if (!text || sscanf(buf, "%*u,%*u,%llu", &usec) != 1) {
			fprintf(stderr, "kv_kmsg pull: a record not understood: %.80s\n", buf);
			return 1;
		}
		printf("[%5llu.%06llu] ", usec / 1000000, usec % 1000000);
		put_text(text + 1);
	}
	return fflush(stdout) ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "end"))
		return position(SEEK_END);
	if (argc == 2 && !strcmp(argv[1], "cleared"))
		return position(SEEK_DATA);
	if (argc == 2 && !strcmp(argv[1], "pull"))
		return pull();
	if (argc == 2 && !strcmp(argv[1], "clear")) {
		if (klogctl(SYSLOG_ACTION_CLEAR, NULL, 0) < 0) {
			perror("kv_kmsg clear: syslog(SYSLOG_ACTION_CLEAR)");
			return 1;
		}
		return 0;
	}
	fprintf(stderr, "usage: kv_kmsg end|cleared|pull < /dev/kmsg, kv_kmsg clear\n");
	return 2;
}
