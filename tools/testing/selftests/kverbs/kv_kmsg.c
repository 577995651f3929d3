// SPDX-License-Identifier: GPL-2.0
/*
 * kv_kmsg end|pull: the kernel log through /dev/kmsg open on standard
 * input (kverbs_lib.sh: kv_kmsg_open, kv_kmsg_pull), shared with the shell
 * that opened it, so that its reading position stays between calls.
 *
 * end:  moves the position to the end of the log (the next record to be
 *       written) and makes reads non-blocking: a shell can do neither, and
 *       /dev/kmsg opened anew is read from the oldest record of the log.
 * pull: prints the records logged since the position, as dmesg prints
 *       them ("[    5.123456] text"), and moves the position past them.
 *       A record is "PRIO,SEQ,USEC,FLAGS;TEXT" with non-printable bytes and
 *       backslashes escaped as \xNN, then its dictionary's lines, which
 *       begin with a space (dropped). Each read(2) returns one record.
 *
 * Exit status 0, or 1 with a message.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int end(void)
{
	int flags = fcntl(0, F_GETFL);

	if (flags < 0 || fcntl(0, F_SETFL, flags | O_NONBLOCK) < 0 ||
	    lseek(0, 0, SEEK_END) < 0) {
		perror("kv_kmsg end: /dev/kmsg on standard input");
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
		return end();
	if (argc == 2 && !strcmp(argv[1], "pull"))
		return pull();
	fprintf(stderr, "usage: kv_kmsg end|pull < /dev/kmsg\n");
	return 2;
}
