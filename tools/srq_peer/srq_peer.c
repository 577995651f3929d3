// SPDX-License-Identifier: GPL-2.0
/*
 * srq_peer: a userspace peer of the kverbs `srq` control file, speaking the
 * flow of the RDMA Aware Networks Programming User Manual's SRQ example
 * (srq.c) on librdmacm (RDMA_PS_TCP):
 *
 *   - the server creates one SRQ of max_wr receives of size bytes and one
 *     receive CQ, and accepts qps connections whose QPs all use the SRQ;
 *   - the client connects qps times and SENDs count messages of size bytes
 *     round-robin over its QPs, at most max_wr outstanding (a round); each
 *     message starts with its sequence number and QP index (u32 LE each);
 *   - when the server has received a round, it reposts the receives and
 *     SENDs a 16-byte go message ("srq-go", 2 zero bytes, the round and the
 *     messages received so far, u32 LE) on the QP of the round's last
 *     receive; the client waits for it (its QPs share an SRQ of qps
 *     receives) before the next round.
 *
 * Usage: srq_peer [-p port] [-q qps] [-w max_wr] [-c count] [-s size]
 *                 [-l srq_limit] [server_addr]
 *
 * Without server_addr it is the server (on any address). The exit status
 * is 0 only if every step succeeded and, on the server, every sequence
 * number came once and in order on each QP.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HDR 8
#define GO_LEN 16
#define MAX_QPS 16

static struct {
	const char *server;
	int port, qps, max_wr, count, size, limit;
} cfg = { NULL, 51216, 4, 64, 100, 100000, 0 };

static struct rdma_event_channel *ec;
static struct rdma_cm_id *ids[MAX_QPS];
static struct ibv_pd *pd;
static struct ibv_cq *scq, *rcq;
static struct ibv_srq *srq;
static struct ibv_mr *mr, *gmr;
static char *buf, *gbuf;

static void die(const char *what)
{
	fprintf(stderr, "srq_peer: %s failed: %s\n", what, strerror(errno));
	exit(1);
}

/* Waits for the next rdma_cm event, which must be `want`. */
static struct rdma_cm_id *cm_event(enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;

	if (rdma_get_cm_event(ec, &ev))
		die("rdma_get_cm_event");
	if (ev->event != want) {
		fprintf(stderr, "srq_peer: rdma_cm event %s (status %d), expected %s\n",
			rdma_event_str(ev->event), ev->status, rdma_event_str(want));
		exit(1);
	}
	id = ev->id;
	rdma_ack_cm_event(ev);
	return id;
}

static void resources(struct ibv_context *verbs, int srq_wr, int cq_send)
{
	size_t len = (size_t)cfg.max_wr * cfg.size;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = srq_wr, .max_sge = 1 } };

	pd = ibv_alloc_pd(verbs);
	scq = pd ? ibv_create_cq(verbs, cq_send, NULL, NULL, 0) : NULL;
	rcq = scq ? ibv_create_cq(verbs, srq_wr + 1, NULL, NULL, 0) : NULL;
	srq = rcq ? ibv_create_srq(pd, &sa) : NULL;
	buf = calloc(1, len);
	gbuf = calloc(cfg.qps, GO_LEN);
	if (!srq || !buf || !gbuf)
		die("resources");
	mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
	gmr = ibv_reg_mr(pd, gbuf, (size_t)cfg.qps * GO_LEN, IBV_ACCESS_LOCAL_WRITE);
	if (!mr || !gmr)
		die("ibv_reg_mr");
}

static void post_srq(char *at, uint32_t len, struct ibv_mr *m, uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)at, len, m->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_srq_recv(srq, &wr, &bad))
		die("ibv_post_srq_recv");
}

static void post_send(struct rdma_cm_id *id, char *at, uint32_t len, struct ibv_mr *m)
{
	struct ibv_sge sge = { (uintptr_t)at, len, m->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	if (ibv_post_send(id->qp, &wr, &bad))
		die("ibv_post_send");
}

static void poll_one(struct ibv_cq *cq, struct ibv_wc *wc, const char *what)
{
	int n;

	do {
		n = ibv_poll_cq(cq, 1, wc);
	} while (n == 0);
	if (n < 0)
		die("ibv_poll_cq");
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "srq_peer: %s: %s\n", what, ibv_wc_status_str(wc->status));
		exit(1);
	}
}

static void create_qp(struct rdma_cm_id *id, int send_wr)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = scq, .recv_cq = rcq, .srq = srq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = send_wr, .max_send_sge = 1 },
	};

	if (rdma_create_qp(id, pd, &qa))
		die("rdma_create_qp");
}

static uint32_t u32_at(const char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static void arm_limit(void)
{
	struct ibv_srq_attr a = { .srq_limit = cfg.limit };

	if (cfg.limit && ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT))
		die("ibv_modify_srq");
}

static int server(void)
{
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 7, .rnr_retry_count = 7 };
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(cfg.port) };
	struct rdma_cm_id *listen_id;
	int received[MAX_QPS] = {}, next[MAX_QPS] = {};
	uint8_t *seen = calloc(1, cfg.count);
	int got = 0, rounds = 0, bad = 0;

	if (rdma_create_id(ec, &listen_id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen_id, (struct sockaddr *)&sin) || rdma_listen(listen_id, cfg.qps))
		die("rdma_listen");
	printf("listening on port %d\n", cfg.port);
	for (int i = 0; i < cfg.qps; i++) {
		struct rdma_cm_id *id = cm_event(RDMA_CM_EVENT_CONNECT_REQUEST);

		if (!pd) {
			resources(id->verbs, cfg.max_wr, cfg.qps * 3);
			for (int j = 0; j < cfg.max_wr; j++)
				post_srq(buf + (size_t)j * cfg.size, cfg.size, mr, j);
			arm_limit();
		}
		create_qp(id, 2);
		if (rdma_accept(id, &param))
			die("rdma_accept");
		cm_event(RDMA_CM_EVENT_ESTABLISHED);
		ids[i] = id;
		printf("connection %d: qp 0x%x\n", i, id->qp->qp_num);
	}
	while (got < cfg.count) {
		int n = cfg.count - got < cfg.max_wr ? cfg.count - got : cfg.max_wr;
		uint32_t last = 0;

		for (int k = 0; k < n; k++) {
			struct ibv_wc wc;
			char *m;
			int q;

			poll_one(rcq, &wc, "SRQ receive");
			m = buf + wc.wr_id * cfg.size;
			for (q = 0; q < cfg.qps && ids[q]->qp->qp_num != wc.qp_num; q++)
				;
			uint32_t seq = u32_at(m), qi = u32_at(m + 4);

			if (q == cfg.qps || wc.byte_len != (uint32_t)cfg.size || seq >= (uint32_t)cfg.count ||
			    qi >= (uint32_t)cfg.qps || seen[seq] || (int)seq < next[q]) {
				fprintf(stderr, "srq_peer: message %u (qp index %u) out of place on qp 0x%x\n",
					seq, qi, wc.qp_num);
				bad = 1;
			} else {
				seen[seq] = 1;
				next[q] = seq + 1;
				received[q]++;
			}
			last = wc.qp_num;
		}
		got += n;
		rounds++;
		if (got < cfg.count) {
			for (int j = 0; j < n; j++)
				post_srq(buf + (size_t)j * cfg.size, cfg.size, mr, j);
			arm_limit();
		}
		char *go = gbuf;
		uint32_t r = htole32(rounds), g = htole32(got);

		memset(go, 0, GO_LEN);
		memcpy(go, "srq-go", 6);
		memcpy(go + 8, &r, 4);
		memcpy(go + 12, &g, 4);
		for (int q = 0; q < cfg.qps; q++) {
			if (ids[q]->qp->qp_num == last) {
				struct ibv_wc wc;

				post_send(ids[q], go, GO_LEN, gmr);
				poll_one(scq, &wc, "SEND (go)");
			}
		}
	}
	for (int q = 0; q < cfg.qps; q++)
		printf("qp 0x%x: %d receives\n", ids[q]->qp->qp_num, received[q]);
	printf("srq_peer: %d messages of %d bytes from %d QPs in %d rounds%s\n", got, cfg.size,
	       cfg.qps, rounds, bad ? ", some out of place" : ", every sequence number once");
	for (int q = 0; q < cfg.qps; q++)
		rdma_disconnect(ids[q]);
	return bad;
}

static int client(void)
{
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 7, .rnr_retry_count = 7 };
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(cfg.port) };
	int per_qp = (cfg.max_wr + cfg.qps - 1) / cfg.qps;
	int sent = 0, rounds = 0;

	if (inet_pton(AF_INET, cfg.server, &sin.sin_addr) != 1) {
		fprintf(stderr, "srq_peer: %s is not an IPv4 address\n", cfg.server);
		return 1;
	}
	for (int i = 0; i < cfg.qps; i++) {
		struct rdma_cm_id *id;

		if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP) ||
		    rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000))
			die("rdma_resolve_addr");
		cm_event(RDMA_CM_EVENT_ADDR_RESOLVED);
		if (rdma_resolve_route(id, 2000))
			die("rdma_resolve_route");
		cm_event(RDMA_CM_EVENT_ROUTE_RESOLVED);
		if (!pd) {
			resources(id->verbs, cfg.qps, cfg.qps * (per_qp + 1));
			for (int j = 0; j < cfg.qps; j++)
				post_srq(gbuf + j * GO_LEN, GO_LEN, gmr, j);
		}
		create_qp(id, per_qp);
		if (rdma_connect(id, &param))
			die("rdma_connect");
		cm_event(RDMA_CM_EVENT_ESTABLISHED);
		ids[i] = id;
		printf("connection %d: qp 0x%x\n", i, id->qp->qp_num);
	}
	while (sent < cfg.count) {
		int n = cfg.count - sent < cfg.max_wr ? cfg.count - sent : cfg.max_wr;
		struct ibv_wc wc;

		for (int k = 0; k < n; k++) {
			char *m = buf + (size_t)k * cfg.size;
			uint32_t seq = htole32(sent + k), qi = htole32((sent + k) % cfg.qps);

			memcpy(m, &seq, 4);
			memcpy(m + 4, &qi, 4);
			post_send(ids[(sent + k) % cfg.qps], m, cfg.size, mr);
		}
		for (int k = 0; k < n; k++)
			poll_one(scq, &wc, "SEND");
		sent += n;
		rounds++;
		poll_one(rcq, &wc, "go");
		char *go = gbuf + wc.wr_id * GO_LEN;

		if (memcmp(go, "srq-go", 6) || u32_at(go + 8) != (uint32_t)rounds ||
		    u32_at(go + 12) != (uint32_t)sent) {
			fprintf(stderr, "srq_peer: round %d: a wrong go message\n", rounds);
			return 1;
		}
		post_srq(go, GO_LEN, gmr, wc.wr_id);
	}
	printf("srq_peer: %d SENDs of %d bytes over %d QPs in %d rounds, each acknowledged\n",
	       sent, cfg.size, cfg.qps, rounds);
	for (int q = 0; q < cfg.qps; q++)
		rdma_disconnect(ids[q]);
	return 0;
}

int main(int argc, char *argv[])
{
	int c;

	while ((c = getopt(argc, argv, "p:q:w:c:s:l:")) != -1) {
		switch (c) {
		case 'p': cfg.port = atoi(optarg); break;
		case 'q': cfg.qps = atoi(optarg); break;
		case 'w': cfg.max_wr = atoi(optarg); break;
		case 'c': cfg.count = atoi(optarg); break;
		case 's': cfg.size = atoi(optarg); break;
		case 'l': cfg.limit = atoi(optarg); break;
		default:
			goto usage;
		}
	}
	if (optind < argc)
		cfg.server = argv[optind];
	if (cfg.qps < 1 || cfg.qps > MAX_QPS || cfg.max_wr < 2 || cfg.count < 1 || cfg.size < HDR ||
	    cfg.limit < 0 || cfg.limit >= cfg.max_wr) {
usage:
		fprintf(stderr, "usage: %s [-p port] [-q qps] [-w max_wr] [-c count] [-s size] [-l srq_limit] [server_addr]\n",
			argv[0]);
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	ec = rdma_create_event_channel();
	if (!ec)
		die("rdma_create_event_channel");
	return cfg.server ? client() : server();
}
