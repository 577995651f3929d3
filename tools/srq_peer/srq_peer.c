// SPDX-License-Identifier: GPL-2.0
/*
 * srq_peer: a userspace peer of the kverbs `srq` control file on librdmacm
 * (RDMA_PS_TCP). By default it speaks the kverbs protocol (flow=kverbs), the
 * flow of the RDMA Aware Networks Programming User Manual's SRQ example
 * (srq.c) made stricter; with -M the manual's flow as it is (see below):
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
 *
 * srq_peer -M [-s] [-a addr] [-p port] [-c count] [-l msg_length]
 *             [-q qp_count] [-w max_wr]
 *
 * speaks the manual's srq.c as it is instead, with its options and
 * defaults (-s: the server; count 100, msg_length 100000, qp_count 4,
 * max_wr 64, port 51216):
 *
 *   - each side has one SRQ of max_wr receives of msg_length bytes and one
 *     receive CQ its QPs share (max_send_wr = max_recv_wr = max_wr, one
 *     SGE, no inline data);
 *   - the client opens qp_count connections, one after the other; per
 *     round it SENDs up to max_wr messages of msg_length bytes round-robin
 *     (connection i % qp_count), one at a time, each signalled and waited
 *     for, until count are sent; then it waits for one receive on its SRQ,
 *     reposts it, and goes on with the next round;
 *   - the server accepts qp_count connections; per round it takes up to
 *     max_wr receives (count in all), reposting each, then SENDs one
 *     message of msg_length bytes on the first connection it accepted and
 *     waits for its completion.
 *
 * Messages carry no header: the buffers are zeroed. It fails on a failed
 * step or completion only, as the manual does; what came (receives per QP
 * number, their sizes, the QP of each reply) is printed for the caller.
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
static int manual;

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

	/* The manual's QPs: max_send_wr = max_recv_wr = max_wr, one SGE. */
	if (manual) {
		qa.cap.max_recv_wr = cfg.max_wr;
		qa.cap.max_recv_sge = 1;
	}

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

/* The manual's send buffer: one message of msg_length zeroed bytes. */
static char *mbuf;
static struct ibv_mr *mmr;

static void manual_resources(struct ibv_context *verbs)
{
	resources(verbs, cfg.max_wr, cfg.max_wr + 1);
	for (int j = 0; j < cfg.max_wr; j++)
		post_srq(buf + (size_t)j * cfg.size, cfg.size, mr, j);
	mbuf = calloc(1, cfg.size);
	if (!mbuf)
		die("calloc");
	mmr = ibv_reg_mr(pd, mbuf, cfg.size, IBV_ACCESS_LOCAL_WRITE);
	if (!mmr)
		die("ibv_reg_mr");
}

static int manual_server(void)
{
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 7, .rnr_retry_count = 7 };
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(cfg.port) };
	struct rdma_cm_id *listen_id;
	int received[MAX_QPS] = {}, other_size = 0, got = 0, rounds = 0;

	if (rdma_create_id(ec, &listen_id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen_id, (struct sockaddr *)&sin) || rdma_listen(listen_id, cfg.qps))
		die("rdma_listen");
	printf("manual server: listening on port %d\n", cfg.port);
	for (int i = 0; i < cfg.qps; i++) {
		struct rdma_cm_id *id = cm_event(RDMA_CM_EVENT_CONNECT_REQUEST);

		if (!pd)
			manual_resources(id->verbs);
		create_qp(id, cfg.max_wr);
		if (rdma_accept(id, &param))
			die("rdma_accept");
		cm_event(RDMA_CM_EVENT_ESTABLISHED);
		ids[i] = id;
		printf("connection %d: qp 0x%x\n", i, id->qp->qp_num);
	}
	while (got < cfg.count) {
		int n = cfg.count - got < cfg.max_wr ? cfg.count - got : cfg.max_wr;
		struct ibv_wc wc;

		for (int k = 0; k < n; k++) {
			int q;

			poll_one(rcq, &wc, "SRQ receive");
			post_srq(buf + wc.wr_id * cfg.size, cfg.size, mr, wc.wr_id);
			for (q = 0; q < cfg.qps && ids[q]->qp->qp_num != wc.qp_num; q++)
				;
			if (q < cfg.qps)
				received[q]++;
			if (wc.byte_len != (uint32_t)cfg.size)
				other_size++;
		}
		got += n;
		rounds++;
		post_send(ids[0], mbuf, cfg.size, mmr);
		poll_one(scq, &wc, "SEND (reply)");
	}
	for (int q = 0; q < cfg.qps; q++)
		printf("qp 0x%x: %d receives\n", ids[q]->qp->qp_num, received[q]);
	printf("srq_peer: manual server: %d messages (%d not of %d bytes) in %d rounds, %d replies of %d bytes on qp 0x%x\n",
	       got, other_size, cfg.size, rounds, rounds, cfg.size, ids[0]->qp->qp_num);
	for (int q = 0; q < cfg.qps; q++)
		rdma_disconnect(ids[q]);
	return 0;
}

static int manual_client(void)
{
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 7, .rnr_retry_count = 7 };
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(cfg.port) };
	int sent = 0, rounds = 0, on_first = 0, other_size = 0;

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
		if (!pd)
			manual_resources(id->verbs);
		create_qp(id, cfg.max_wr);
		if (rdma_connect(id, &param))
			die("rdma_connect");
		cm_event(RDMA_CM_EVENT_ESTABLISHED);
		ids[i] = id;
		printf("connection %d: qp 0x%x\n", i, id->qp->qp_num);
	}
	while (sent < cfg.count) {
		struct ibv_wc wc;

		for (int k = 0; k < cfg.max_wr && sent < cfg.count; k++, sent++) {
			post_send(ids[sent % cfg.qps], mbuf, cfg.size, mmr);
			poll_one(scq, &wc, "SEND");
		}
		rounds++;
		poll_one(rcq, &wc, "reply");
		post_srq(buf + wc.wr_id * cfg.size, cfg.size, mr, wc.wr_id);
		printf("round %d: reply of %u bytes on qp 0x%x\n", rounds, wc.byte_len, wc.qp_num);
		on_first += wc.qp_num == ids[0]->qp->qp_num;
		other_size += wc.byte_len != (uint32_t)cfg.size;
	}
	printf("srq_peer: manual client: %d SENDs of %d bytes over %d QPs in %d rounds, %d replies (%d on the first connection, %d not of %d bytes)\n",
	       sent, cfg.size, cfg.qps, rounds, rounds, on_first, other_size, cfg.size);
	for (int q = 0; q < cfg.qps; q++)
		rdma_disconnect(ids[q]);
	return 0;
}

/* srq_peer -M ...: the manual's options. */
static int manual_main(int argc, char *argv[])
{
	int c, is_server = 0;

	manual = 1;
	optind = 2;
	while ((c = getopt(argc, argv, "sa:p:c:l:q:w:")) != -1) {
		switch (c) {
		case 's': is_server = 1; break;
		case 'a': cfg.server = optarg; break;
		case 'p': cfg.port = atoi(optarg); break;
		case 'c': cfg.count = atoi(optarg); break;
		case 'l': cfg.size = atoi(optarg); break;
		case 'q': cfg.qps = atoi(optarg); break;
		case 'w': cfg.max_wr = atoi(optarg); break;
		default:
			goto usage;
		}
	}
	if (optind < argc || is_server == !!cfg.server || cfg.qps < 1 || cfg.qps > MAX_QPS ||
	    cfg.max_wr < 1 || cfg.count < 1 || cfg.size < 1) {
usage:
		fprintf(stderr, "usage: %s -M [-s | -a addr] [-p port] [-c count] [-l msg_length] [-q qp_count] [-w max_wr]\n",
			argv[0]);
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	ec = rdma_create_event_channel();
	if (!ec)
		die("rdma_create_event_channel");
	return is_server ? manual_server() : manual_client();
}

int main(int argc, char *argv[])
{
	int c;

	if (argc > 1 && !strcmp(argv[1], "-M"))
		return manual_main(argc, argv);
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
