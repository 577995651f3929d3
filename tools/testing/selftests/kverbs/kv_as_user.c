// SPDX-License-Identifier: GPL-2.0
/*
 * kv_as_user UID COMMAND [ARG...]: runs COMMAND with every user and group
 * ID set to UID and no supplementary groups (no capabilities left), to
 * check that the control files refuse a non-root writer.
 */
#define _GNU_SOURCE
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	uid_t id;

	if (argc < 3) {
		fprintf(stderr, "usage: kv_as_user UID COMMAND [ARG...]\n");
		return 2;
	}
	id = strtoul(argv[1], NULL, 10);
	if (setgroups(0, NULL) || setresgid(id, id, id) || setresuid(id, id, id)) {
		perror("kv_as_user");
		return 2;
	}
	execvp(argv[2], argv + 2);
	perror(argv[2]);
	return 127;
}
