// SPDX-License-Identifier: GPL-2.0
/*
 * kv_fail_nth: runs one kernel operation with the Nth fault-injection point
 * of this task armed to fail (/proc/thread-self/fail-nth, see
 * Documentation/fault-injection/fault-injection.rst), and says whether the
 * fault was injected.
 *
 *   kv_fail_nth N write FILE STRING     one write(2) of STRING to FILE
 *   kv_fail_nth N insmod MODULE.ko      finit_module(2)
 *   kv_fail_nth N rxe NAME NETDEV       RDMA_NLDEV_CMD_NEWLINK (rdma link add
 *                                       NAME type rxe netdev NETDEV)
 *
 * Only the operation itself runs armed: files and sockets are opened before.
 * N = 0 runs it unarmed.  Prints one line:
 *
 *   errno E injected I left L
 *
 * E is 0 if the operation succeeded, else its errno; I is 1 if the Nth point
 * was reached (and failed), 0 if the operation hit fewer than N points; L
 * is N minus the points it hit (so a run with a large N counts them).
 * Exit status 0, or 2 if the operation could not be set up.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static int nth_fd;
static int left;

static void arm(unsigned int n)
{
	char buf[16];
	int len = snprintf(buf, sizeof(buf), "%u", n);

	if (n && write(nth_fd, buf, len) != len) {
		perror("kv_fail_nth: /proc/thread-self/fail-nth");
		exit(2);
	}
}

/* Disarms and says whether the fault was injected (fail-nth reads 0). */
static int injected(unsigned int n)
{
	char buf[16] = "";
	ssize_t len;

	if (!n)
		return 0;
	len = pread(nth_fd, buf, sizeof(buf) - 1, 0);
	left = len > 0 ? atoi(buf) : -1;
	if (write(nth_fd, "0", 1) != 1)
		exit(2);
	return left == 0;
}

static void put_attr(char *msg, size_t *off, unsigned short type, const char *s)
{
	struct nlattr *a = (struct nlattr *)(msg + *off);
	size_t len = strlen(s) + 1;

	a->nla_type = type;
	a->nla_len = NLA_HDRLEN + len;
	memcpy(msg + *off + NLA_HDRLEN, s, len);
	*off += NLA_ALIGN(a->nla_len);
}

/* rdma link add NAME type rxe netdev NETDEV, armed; returns an errno. */
static int rxe_add(unsigned int n, const char *name, const char *netdev)
{
	char msg[512] __attribute__((aligned(4))) = { 0 }, ack[1024];
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	struct nlmsghdr *h = (struct nlmsghdr *)msg;
	size_t off = NLMSG_HDRLEN;
	int fd, err = 0;
	ssize_t r;

	fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		perror("kv_fail_nth: netlink");
		exit(2);
	}
	put_attr(msg, &off, RDMA_NLDEV_ATTR_DEV_NAME, name);
	put_attr(msg, &off, RDMA_NLDEV_ATTR_LINK_TYPE, "rxe");
	put_attr(msg, &off, RDMA_NLDEV_ATTR_NDEV_NAME, netdev);
	h->nlmsg_len = off;
	h->nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_NEWLINK);
	h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	h->nlmsg_seq = 1;
	arm(n);
	if (send(fd, msg, off, 0) < 0) {
		err = errno;
	} else {
		r = recv(fd, ack, sizeof(ack), 0);
		if (r < 0)
			err = errno;
		else if (((struct nlmsghdr *)ack)->nlmsg_type == NLMSG_ERROR)
			err = -((struct nlmsgerr *)NLMSG_DATA(ack))->error;
	}
	close(fd);
	return err;
}

int main(int argc, char **argv)
{
	unsigned int n;
	int err = 0, fd, inj;

	if (argc < 4) {
		fprintf(stderr, "usage: kv_fail_nth N write FILE STRING | N insmod MODULE | N rxe NAME NETDEV\n");
		return 2;
	}
	n = strtoul(argv[1], NULL, 10);
	nth_fd = open("/proc/thread-self/fail-nth", O_RDWR);
	if (nth_fd < 0) {
		perror("kv_fail_nth: /proc/thread-self/fail-nth");
		return 2;
	}
	if (!strcmp(argv[2], "write") && argc == 5) {
		fd = open(argv[3], O_WRONLY);
		if (fd < 0) {
			perror(argv[3]);
			return 2;
		}
		arm(n);
		if (write(fd, argv[4], strlen(argv[4])) < 0)
			err = errno;
		inj = injected(n);
		close(fd);
	} else if (!strcmp(argv[2], "insmod") && argc == 4) {
		fd = open(argv[3], O_RDONLY);
		if (fd < 0) {
			perror(argv[3]);
			return 2;
		}
		arm(n);
		if (syscall(SYS_finit_module, fd, "", 0))
			err = errno;
		inj = injected(n);
		close(fd);
	} else if (!strcmp(argv[2], "rxe") && argc == 5) {
		err = rxe_add(n, argv[3], argv[4]);
		inj = injected(n);
	} else {
		fprintf(stderr, "kv_fail_nth: unknown operation %s\n", argv[2]);
		return 2;
	}
	printf("errno %d injected %d left %d\n", err, inj, left);
	return 0;
}
