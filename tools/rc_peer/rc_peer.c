// SPDX-License-Identifier: GPL-2.0
/*
 * rc_peer: a userspace peer of the kverbs RC example, speaking the protocol
 * of RDMA_RC_example (the example program of the RDMA Aware Networks
 * Programming User Manual) on libibverbs:
 *
 *   - TCP: the server listens (default port 19875), the client connects;
 *   - each side sends its 34-byte packed cm_con_data_t (addr, rkey, qp_num,
 *     lid big endian, raw gid) and reads the peer's;
 *   - both QPs go to RTS (the client posts its receive before RTR), sync 'Q';
 *   - the server SENDs its buffer ("SEND operation      "), the client
 *     receives it; the server puts "RDMA read operation " in its buffer,
 *     sync 'R'; the client RDMA READs it, then RDMA WRITEs
 *     "RDMA write operation" into it; sync 'W'; the server shows its buffer.
 *
 * Usage: rc_peer [-p port] [-d ib_dev] [-i ib_port] [-g gid_idx] [-s size]
 *                [-v] [-x read|write] [-b short|qpn|big] [-a n] [server_name]
 *
 * -a n does the kverbs RC example's atomics=<n> (both sides must be told):
 * after the last sync and the server's check of the RDMA WRITE, sync 'V';
 * then the client does n fetch-and-adds (of 1, 2, ...) and two
 * compare-and-swaps (one storing "kverbs!!", one that must not match) on
 * the server's first 8 bytes, checking each old value; sync 'A'; the
 * server (whose buffer and QP allow remote atomics only then) checks its
 * 8 bytes.
 *
 * -x probes the remote-access scope, against the kernel's "linger": after
 * the last sync, sync 'I' (the kernel has invalidated its rkey), then an
 * RDMA READ or WRITE ('X' bytes) with the rkey and address the kernel
 * advertised, which must complete with a remote access error; sync 'P'.
 *
 * -b plays a misbehaving peer: "short" sends 10 bytes of its connection
 * record, "qpn" advertises a QP number that does not exist (and syncs 'Q'),
 * then both wait for the kernel to close the connection; "big" uses -s bytes (more than the
 * kernel's buffer): as client it skips the READ and RDMA WRITEs -s bytes,
 * as server it SENDs them; either must complete with an error. The exit
 * status says whether the peer saw what it expected.
 *
 * -s sets the buffer size (default 21, the message and its NUL); beyond 21
 * bytes the buffer is filled with the kverbs RC example's pattern, and -v
 * checks every byte received. The exit status is 0 only if every step
 * succeeded (and, with -v, every byte was as expected).
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MSG_SEND "SEND operation      "
#define MSG_READ "RDMA read operation "
#define MSG_WRITE "RDMA write operation"

struct cm_con_data_t {
	uint64_t addr;
	uint32_t rkey;
	uint32_t qp_num;
	uint16_t lid;
	uint8_t gid[16];
} __attribute__((packed));

static struct {
	const char *dev_name;
	const char *server_name;
	int tcp_port;
	int ib_port;
	int gid_idx;
	size_t size;
	int validate;
	const char *probe;
	const char *bad;
	int atomics;
} config = { NULL, NULL, 19875, 1, -1, 21, 0, NULL, NULL, 0 };

static void die(const char *what)
{
	fprintf(stderr, "rc_peer: %s failed: %s\n", what, strerror(errno));
	exit(1);
}

/* The kverbs RC example's payload: message, NUL, then a pattern. */
static uint8_t pattern(const char *msg, uint32_t iter, size_t off)
{
	if (off < 20)
		return (uint8_t)msg[off];
	if (off == 20)
		return 0;
	return (uint8_t)((uint32_t)off * 31 + iter * 7 + (uint8_t)msg[0]);
}

static void fill(char *buf, const char *msg)
{
	for (size_t i = 0; i < config.size; i++)
		buf[i] = (char)pattern(msg, 0, i);
}

static int check(const char *buf, const char *msg, const char *what)
{
	if (!config.validate)
		return 0;
	for (size_t i = 0; i < config.size; i++) {
		if ((uint8_t)buf[i] != pattern(msg, 0, i)) {
			fprintf(stderr, "%s: validation failed at byte %zu\n", what, i);
			return 1;
		}
	}
	return 0;
}

static void show(const char *prefix, const char *buf)
{
	char m[21] = {};

	memcpy(m, buf, config.size < 20 ? config.size : 20);
	printf("%s'%s'\n", prefix, m);
	fflush(stdout);
}

static int sock_connect(void)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	char service[8];
	int fd, one = 1;

	snprintf(service, sizeof(service), "%d", config.tcp_port);
	if (config.server_name) {
		if (getaddrinfo(config.server_name, service, &hints, &res))
			die("getaddrinfo");
		fd = socket(res->ai_family, res->ai_socktype, 0);
		if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen))
			die("connect");
		freeaddrinfo(res);
		return fd;
	}
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(config.tcp_port) };
	int lfd = socket(AF_INET, SOCK_STREAM, 0);

	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) || listen(lfd, 1))
		die("listen");
	printf("waiting on port %d for TCP connection\n", config.tcp_port);
	fflush(stdout);
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept");
	close(lfd);
	return fd;
}

static void sock_sync_data(int fd, size_t n, const void *out, void *in)
{
	size_t got = 0;

	if (write(fd, out, n) != (ssize_t)n)
		die("sock write");
	while (got < n) {
		ssize_t r = read(fd, (char *)in + got, n - got);

		if (r <= 0) {
			errno = r ? errno : ECONNRESET;
			die("sock read");
		}
		got += r;
	}
}

static void sync_char(int fd, char c)
{
	char peer;

	sock_sync_data(fd, 1, &c, &peer);
	if (peer != c) {
		fprintf(stderr, "rc_peer: sync '%c': got '%c'\n", c, peer);
		exit(1);
	}
}

static enum ibv_wc_status poll_status(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int n;

	do {
		n = ibv_poll_cq(cq, 1, &wc);
	} while (n == 0);
	if (n < 0)
		die("ibv_poll_cq");
	return wc.status;
}

/* A request that must fail: its completion's status, and whether it did. */
static int expect_error(struct ibv_cq *cq, const char *what, enum ibv_wc_status want)
{
	enum ibv_wc_status st = poll_status(cq);

	printf("%s: %s\n", what, ibv_wc_status_str(st));
	if (st == IBV_WC_SUCCESS || (want != IBV_WC_SUCCESS && st != want)) {
		fprintf(stderr, "rc_peer: %s: expected %s\n", what,
			want == IBV_WC_SUCCESS ? "an error" : ibv_wc_status_str(want));
		return 1;
	}
	return 0;
}

/* Waits until the kernel closes the connection. */
static void wait_close(int fd)
{
	char c;

	while (read(fd, &c, 1) > 0)
		;
}

static void poll_completion(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc = { .status = poll_status(cq) };

	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "rc_peer: %s: completion with error: %s\n", what,
			ibv_wc_status_str(wc.status));
		exit(1);
	}
}

static void post_send(struct ibv_qp *qp, struct ibv_mr *mr, char *buf,
		      enum ibv_wr_opcode op, struct cm_con_data_t *remote)
{
	struct ibv_sge sge = { (uintptr_t)buf, (uint32_t)config.size, mr->lkey };
	struct ibv_send_wr wr = {}, *bad;

	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (op != IBV_WR_SEND) {
		wr.wr.rdma.remote_addr = remote->addr;
		wr.wr.rdma.rkey = remote->rkey;
	}
	if (ibv_post_send(qp, &wr, &bad))
		die("ibv_post_send");
}

int main(int argc, char *argv[])
{
	int c;

	while ((c = getopt(argc, argv, "p:d:i:g:s:vx:b:a:")) != -1) {
		switch (c) {
		case 'p': config.tcp_port = atoi(optarg); break;
		case 'd': config.dev_name = optarg; break;
		case 'i': config.ib_port = atoi(optarg); break;
		case 'g': config.gid_idx = atoi(optarg); break;
		case 's': config.size = strtoul(optarg, NULL, 0); break;
		case 'v': config.validate = 1; break;
		case 'x': config.probe = optarg; break;
		case 'b': config.bad = optarg; break;
		case 'a': config.atomics = atoi(optarg); break;
		default:
			goto usage;
		}
	}
	if ((config.probe && strcmp(config.probe, "read") && strcmp(config.probe, "write")) ||
	    (config.bad && strcmp(config.bad, "short") && strcmp(config.bad, "qpn") &&
	     strcmp(config.bad, "big"))) {
usage:
		fprintf(stderr, "usage: %s [-p port] [-d dev] [-i ib_port] [-g gid_idx] [-s size] [-v] [-x read|write] [-b short|qpn|big] [server]\n",
			argv[0]);
		return 1;
	}
	if (optind < argc)
		config.server_name = argv[optind];
	if (config.size < 21)
		config.size = 21;

	int fd = sock_connect();

	printf("TCP connection was established\n");

	/* resources_create */
	int num;
	struct ibv_device **list = ibv_get_device_list(&num), *ib_dev = NULL;

	for (int i = 0; list && i < num; i++)
		if (!config.dev_name || !strcmp(ibv_get_device_name(list[i]), config.dev_name))
			ib_dev = list[i];
	if (!ib_dev) {
		fprintf(stderr, "rc_peer: IB device %s wasn't found\n", config.dev_name ?: "(any)");
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(ib_dev);
	struct ibv_port_attr port_attr;

	if (!ctx || ibv_query_port(ctx, config.ib_port, &port_attr))
		die("ibv_open_device/ibv_query_port");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	char *buf = calloc(1, config.size);

	if (!pd || !cq || !buf)
		die("resources_create");
	if (!config.server_name)
		fill(buf, MSG_SEND);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
		     (config.atomics ? IBV_ACCESS_REMOTE_ATOMIC : 0);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, config.size, access);
	uint64_t *old = calloc(1, 8);
	struct ibv_mr *old_mr = old ? ibv_reg_mr(pd, old, 8, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_qp_init_attr qia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = mr ? ibv_create_qp(pd, &qia) : NULL;

	if (!qp)
		die("ibv_reg_mr/ibv_create_qp");
	printf("QP was created, QP number=0x%x\n", qp->qp_num);

	/* connect_qp */
	union ibv_gid my_gid = {};

	if (config.gid_idx >= 0 && ibv_query_gid(ctx, config.ib_port, config.gid_idx, &my_gid))
		die("ibv_query_gid");
	struct cm_con_data_t local = {
		.addr = htobe64((uintptr_t)buf), .rkey = htobe32(mr->rkey),
		.qp_num = htobe32(qp->qp_num), .lid = htobe16(port_attr.lid),
	}, tmp, remote;

	memcpy(local.gid, &my_gid, 16);
	if (config.bad && !strcmp(config.bad, "short")) {
		if (write(fd, &local, 10) != 10)
			die("sock write");
		printf("sent 10 bytes of the connection record\n");
		wait_close(fd);
		return 0;
	}
	if (config.bad && !strcmp(config.bad, "qpn"))
		local.qp_num = htobe32(0xfffffe);
	sock_sync_data(fd, sizeof(local), &local, &tmp);
	remote.addr = be64toh(tmp.addr);
	remote.rkey = be32toh(tmp.rkey);
	remote.qp_num = be32toh(tmp.qp_num);
	remote.lid = be16toh(tmp.lid);
	memcpy(remote.gid, tmp.gid, 16);
	printf("Remote address = 0x%llx\n", (unsigned long long)remote.addr);
	printf("Remote rkey = 0x%x\n", remote.rkey);
	printf("Remote QP number = 0x%x\n", remote.qp_num);
	printf("Remote LID = 0x%x\n", remote.lid);

	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = config.ib_port, .pkey_index = 0,
		.qp_access_flags = access,
	};

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT");
	if (config.server_name) {
		struct ibv_sge sge = { (uintptr_t)buf, (uint32_t)config.size, mr->lkey };
		struct ibv_recv_wr rr = { .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ibv_post_recv(qp, &rr, &bad))
			die("ibv_post_recv");
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_256;
	a.dest_qp_num = remote.qp_num;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 0x12;
	a.ah_attr.dlid = remote.lid;
	a.ah_attr.port_num = config.ib_port;
	if (config.gid_idx >= 0) {
		a.ah_attr.is_global = 1;
		memcpy(&a.ah_attr.grh.dgid, remote.gid, 16);
		a.ah_attr.grh.sgid_index = config.gid_idx;
		a.ah_attr.grh.hop_limit = 1;
	}
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		die("modify QP to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 0x12;
	a.retry_cnt = 6;
	a.rnr_retry = 0;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify QP to RTS");
	sync_char(fd, 'Q');
	printf("QP state was change to RTS\n");
	if (config.bad && !strcmp(config.bad, "qpn")) {
		printf("advertised QP number 0xfffffe\n");
		wait_close(fd);
		return 0;
	}

	int bad_data = 0;

	if (config.bad) {
		/* "big": -s bytes, more than the kernel's buffer. */
		if (config.server_name) {
			poll_completion(cq, "RECV");
			sync_char(fd, 'R');
			memset(buf, 'X', config.size);
			post_send(qp, mr, buf, IBV_WR_RDMA_WRITE, &remote);
			bad_data = expect_error(cq, "oversized RDMA WRITE", IBV_WC_REM_ACCESS_ERR);
			sync_char(fd, 'W');
		} else {
			post_send(qp, mr, buf, IBV_WR_SEND, NULL);
			bad_data = expect_error(cq, "oversized SEND", IBV_WC_SUCCESS);
			wait_close(fd);
		}
		printf("\ntest result is %d\n", bad_data);
		return bad_data;
	}
	if (!config.server_name) {
		post_send(qp, mr, buf, IBV_WR_SEND, NULL);
		poll_completion(cq, "SEND");
		fill(buf, MSG_READ);
	} else {
		poll_completion(cq, "RECV");
		show("Message is: ", buf);
		bad_data |= check(buf, MSG_SEND, "SEND");
	}
	sync_char(fd, 'R');
	if (config.server_name) {
		post_send(qp, mr, buf, IBV_WR_RDMA_READ, &remote);
		poll_completion(cq, "RDMA READ");
		show("Contents of server's buffer: ", buf);
		bad_data |= check(buf, MSG_READ, "RDMA READ");
		fill(buf, MSG_WRITE);
		show("Now replacing it with: ", buf);
		post_send(qp, mr, buf, IBV_WR_RDMA_WRITE, &remote);
		poll_completion(cq, "RDMA WRITE");
	}
	sync_char(fd, 'W');
	if (!config.server_name) {
		show("Contents of server buffer: ", buf);
		bad_data |= check(buf, MSG_WRITE, "RDMA WRITE");
	}
	if (config.atomics) {
		uint64_t want;

		/* The server has checked the RDMA WRITE: the atomics may start. */
		sync_char(fd, 'V');
		memcpy(&want, MSG_WRITE, 8);
		if (config.server_name) {
			for (int i = 0; i < config.atomics + 2; i++) {
				struct ibv_sge sge = { (uintptr_t)old, 8, old_mr->lkey };
				struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1,
							  .send_flags = IBV_SEND_SIGNALED }, *bad;
				uint64_t expect = want;

				wr.wr.atomic.remote_addr = remote.addr;
				wr.wr.atomic.rkey = remote.rkey;
				if (i < config.atomics) {
					wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
					wr.wr.atomic.compare_add = i + 1;
					want += i + 1;
				} else if (i == config.atomics) {
					wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
					wr.wr.atomic.compare_add = want;
					memcpy(&wr.wr.atomic.swap, "kverbs!!", 8);
					memcpy(&want, "kverbs!!", 8);
				} else {
					wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
					wr.wr.atomic.compare_add = want ^ 1;
					wr.wr.atomic.swap = 0;
				}
				if (ibv_post_send(qp, &wr, &bad))
					die("ibv_post_send (atomic)");
				poll_completion(cq, "atomic");
				if (*old != expect) {
					fprintf(stderr, "rc_peer: atomic %d: old value 0x%llx, expected 0x%llx\n",
						i, (unsigned long long)*old, (unsigned long long)expect);
					bad_data = 1;
				}
			}
			printf("atomics: %d fetch-and-adds and 2 compare-and-swaps%s\n", config.atomics,
			       bad_data ? ", some old values wrong" : " returned the expected old values");
		}
		sync_char(fd, 'A');
		if (!config.server_name) {
			int ok = !memcmp(buf, "kverbs!!", 8);

			printf("atomics: the server's 8 bytes %s\n", ok ? "hold 'kverbs!!'" : "are wrong");
			bad_data |= !ok;
		}
	}
	if (config.probe) {
		int write = !strcmp(config.probe, "write");

		/* The kernel has invalidated the rkey it advertised. */
		sync_char(fd, 'I');
		if (write)
			memset(buf, 'X', config.size);
		post_send(qp, mr, buf, write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ, &remote);
		bad_data |= expect_error(cq, write ? "RDMA WRITE with the stale rkey" :
					 "RDMA READ with the stale rkey", IBV_WC_REM_ACCESS_ERR);
		sync_char(fd, 'P');
	}

	/* resources_destroy */
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(buf);
	close(fd);
	printf("\ntest result is %d\n", bad_data);
	return bad_data;
}
