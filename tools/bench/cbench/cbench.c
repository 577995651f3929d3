// SPDX-License-Identifier: GPL-2.0
/*
 * kverbs_cbench: the reference of `make bench` -- the write_bw and write_lat
 * loops of kverbs' `bench` (samples/kverbs_example/bench.rs), written in C
 * against the raw kernel verbs, for measurement only: it is the baseline
 * of what the safe Rust layer costs, not part of the product.
 *
 * Same structure as kverbs' streams: requests built once, posted as chains
 * of up to tx_depth outstanding with one in cq_mod signalled, completions
 * counted by their ib_cqe's done, the CQ polled directly in batches of 16;
 * the same measurement and table (perftest's).
 *
 *   echo dev=rxe_lo,test=write_bw,size=65536 > /sys/kernel/debug/kverbs_cbench/bench
 *   cat /sys/kernel/debug/kverbs_cbench/bench
 *
 * Options: dev= (required), test=write_bw|write_lat, size= (2..1 MiB) or
 * sizes=all, iters=, tx_depth=, cq_mod=, qps= (1..16, write_bw), mtu=,
 * qp_timeout= (the local ACK timeout, 4.096 us x 2^n; 14 as perftest's).
 * Loopback only; the device is held (found through its netdev) during a run.
 */

#include <linux/module.h>
#include <linux/debugfs.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/math64.h>
#include <linux/uaccess.h>
#include <linux/sched/signal.h>
#include <rdma/ib_verbs.h>
#include "../kv_bench_dev.h"
#include <rdma/ib_cache.h>

#define CB_MAX_SIZE (1 << 20)
#define CB_MAX_SAMPLES (1 << 17)
#define CB_POLL_BATCH 16
/* perftest's inline limit of RDMA WRITE in its latency test. */
#define CB_INLINE_WRITE 220
#define CB_TIMEOUT_NS (10ULL * NSEC_PER_SEC)
#define CB_LINE "---------------------------------------------------------------------------------------\n"

struct cb_cfg {
	char dev[IB_DEVICE_NAME_MAX];
	bool lat;
	u32 size; /* 0: all */
	u32 iters, tx_depth, cq_mod, qps;
	u32 qp_timeout;
	enum ib_mtu mtu; /* 0: the port's active MTU */
};

struct cb_counts {
	u64 completed;
	int status; /* 0, or the first failed completion's status + 1 */
};

struct cb_cqe {
	struct ib_cqe cqe;
	u64 upto;
	struct cb_counts *counts;
};

struct cb_side {
	struct ib_cq *cq;
	struct ib_qp *qp;
	void *rbuf, *sbuf;
	u64 rdma, sdma;
	struct ib_mr *mr;
	u64 raddr;
	u32 rkey;
	/* The registration's CQE: alive until the QP is destroyed. */
	struct cb_counts reg_counts;
	struct cb_cqe reg_cqe;
};

struct cb_stream {
	struct ib_qp *qp;
	struct ib_cq *cq;
	struct ib_rdma_wr *wrs;
	struct cb_cqe *cqes;
	struct ib_sge sge;
	struct cb_counts counts;
	u32 depth, signal_every;
	int inline_flag;
	u64 posted;
};

static struct dentry *cb_dir;
static DEFINE_MUTEX(cb_lock);
static char *cb_report;
static size_t cb_report_len;

static __printf(1, 2) void rep(const char *fmt, ...)
{
	va_list ap;
	size_t room = PAGE_SIZE * 4 - cb_report_len;
	int n;

	if (!cb_report || room <= 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(cb_report + cb_report_len, room, fmt, ap);
	va_end(ap);
	cb_report_len += min_t(size_t, n, room - 1);
}

static void cb_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct cb_cqe *c = container_of(wc->wr_cqe, struct cb_cqe, cqe);

	if (wc->status == IB_WC_SUCCESS) {
		if (c->upto > c->counts->completed)
			c->counts->completed = c->upto;
	} else if (!c->counts->status) {
		c->counts->status = wc->status + 1;
	}
}

static int cb_stream_init(struct cb_stream *s, struct cb_side *me, u32 depth,
			  u32 signal_every, u32 len, struct cb_side *peer, u32 inline_max)
{
	u32 i;

	memset(s, 0, sizeof(*s));
	s->qp = me->qp;
	s->cq = me->cq;
	s->depth = depth;
	s->signal_every = signal_every;
	s->wrs = kcalloc(depth, sizeof(*s->wrs), GFP_KERNEL);
	s->cqes = kcalloc(depth, sizeof(*s->cqes), GFP_KERNEL);
	if (!s->wrs || !s->cqes) {
		kfree(s->wrs);
		kfree(s->cqes);
		return -ENOMEM;
	}
	s->sge.addr = me->sdma;
	s->sge.length = len;
	s->sge.lkey = me->qp->pd->local_dma_lkey;
	/* As kverbs' new_inline: inline data is named by its virtual address. */
	if (len <= inline_max) {
		s->sge.addr = (u64)(uintptr_t)me->sbuf;
		s->inline_flag = IB_SEND_INLINE;
	}
	for (i = 0; i < depth; i++) {
		s->cqes[i].cqe.done = cb_done;
		s->cqes[i].counts = &s->counts;
		s->wrs[i].wr.opcode = IB_WR_RDMA_WRITE;
		s->wrs[i].wr.sg_list = &s->sge;
		s->wrs[i].wr.num_sge = 1;
		s->wrs[i].wr.wr_cqe = &s->cqes[i].cqe;
		s->wrs[i].remote_addr = peer->raddr;
		s->wrs[i].rkey = peer->rkey;
	}
	return 0;
}

static void cb_stream_free(struct cb_stream *s)
{
	kfree(s->wrs);
	kfree(s->cqes);
}

static u32 cb_room(struct cb_stream *s)
{
	return s->depth - (u32)(s->posted - READ_ONCE(s->counts.completed));
}

static int cb_post(struct cb_stream *s, u32 n, bool last)
{
	const struct ib_send_wr *bad;
	u64 seq, k;
	u32 i;
	int ret;

	for (k = 0; k < n; k++) {
		bool sig;

		seq = s->posted + k;
		i = seq % s->depth;
		sig = ((seq + 1) % s->signal_every) == 0 || (last && k + 1 == n);
		if (sig)
			s->cqes[i].upto = seq + 1;
		s->wrs[i].wr.send_flags = s->inline_flag | (sig ? IB_SEND_SIGNALED : 0);
		s->wrs[i].wr.next = k + 1 < n ?
			&s->wrs[(i + 1) % s->depth].wr : NULL;
	}
	i = s->posted % s->depth;
	ret = ib_post_send(s->qp, &s->wrs[i].wr, &bad);
	if (ret)
		return ret;
	s->posted += n;
	return 0;
}

static int cb_poll(struct cb_stream *s)
{
	ib_process_cq_direct(s->cq, CB_POLL_BATCH);
	return s->counts.status ? -EIO : 0;
}

static int cb_wait(struct cb_stream *s, u64 upto)
{
	u64 start = ktime_get_ns();

	while (READ_ONCE(s->counts.completed) < upto) {
		u64 before = READ_ONCE(s->counts.completed);

		if (cb_poll(s))
			return -EIO;
		/* As kverbs' Ring::wait: yield when a poll found nothing. */
		if (READ_ONCE(s->counts.completed) == before)
			cond_resched();
		if (ktime_get_ns() - start > CB_TIMEOUT_NS)
			return -ETIMEDOUT;
		if (signal_pending(current))
			return -EINTR;
	}
	return 0;
}

static int cb_pick_gid(struct ib_device *dev, u32 port, u32 *idx, union ib_gid *gid)
{
	const struct ib_gid_attr *a;
	u32 i, len = dev->port_data[port].immutable.gid_tbl_len;

	for (i = 0; i < len; i++) {
		a = rdma_get_gid_attr(dev, port, i);
		if (IS_ERR(a))
			continue;
		if (a->gid_type == IB_GID_TYPE_ROCE_UDP_ENCAP &&
		    ipv6_addr_v4mapped((struct in6_addr *)a->gid.raw)) {
			*idx = i;
			*gid = a->gid;
			rdma_put_gid_attr(a);
			return 0;
		}
		rdma_put_gid_attr(a);
	}
	return -ENODEV;
}

static void cb_reg_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct cb_cqe *c = container_of(wc->wr_cqe, struct cb_cqe, cqe);

	c->counts->status = wc->status + 1;
}

/* Registers me->rbuf with a REG_MR on me->qp and waits for it. */
static int cb_register(struct cb_side *me, struct ib_pd *pd, u32 len)
{
	struct ib_reg_wr wr = {};
	const struct ib_send_wr *bad;
	struct scatterlist sg;
	u64 start;
	int n, ret;

	me->mr = ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, DIV_ROUND_UP(len, PAGE_SIZE) + 1);
	if (IS_ERR(me->mr)) {
		ret = PTR_ERR(me->mr);
		me->mr = NULL;
		return ret;
	}
	sg_init_table(&sg, 1);
	sg_dma_address(&sg) = me->rdma;
	sg_dma_len(&sg) = len;
	n = ib_map_mr_sg(me->mr, &sg, 1, NULL, PAGE_SIZE);
	if (n != 1)
		return n < 0 ? n : -EINVAL;
	wr.wr.opcode = IB_WR_REG_MR;
	me->reg_cqe.cqe.done = cb_reg_done;
	me->reg_cqe.counts = &me->reg_counts;
	wr.wr.wr_cqe = &me->reg_cqe.cqe;
	wr.wr.send_flags = IB_SEND_SIGNALED;
	wr.mr = me->mr;
	wr.key = me->mr->rkey;
	wr.access = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ;
	ret = ib_post_send(me->qp, &wr.wr, &bad);
	if (ret)
		return ret;
	start = ktime_get_ns();
	while (!READ_ONCE(me->reg_counts.status)) {
		ib_process_cq_direct(me->cq, CB_POLL_BATCH);
		if (ktime_get_ns() - start > CB_TIMEOUT_NS)
			return -ETIMEDOUT;
	}
	if (me->reg_counts.status != IB_WC_SUCCESS + 1)
		return -EIO;
	me->raddr = me->mr->iova;
	me->rkey = me->mr->rkey;
	return 0;
}

static void cb_side_free(struct ib_device *dev, struct cb_side *s, u32 len)
{
	if (s->qp)
		ib_destroy_qp(s->qp);
	if (s->mr)
		ib_dereg_mr(s->mr);
	if (s->cq)
		ib_free_cq(s->cq);
	if (s->rbuf) {
		ib_dma_unmap_single(dev, s->rdma, len, DMA_BIDIRECTIONAL);
		kfree(s->rbuf);
	}
	if (s->sbuf) {
		ib_dma_unmap_single(dev, s->sdma, len, DMA_BIDIRECTIONAL);
		kfree(s->sbuf);
	}
}

static int cb_side_alloc(struct ib_device *dev, struct ib_pd *pd, u32 port,
			 const struct cb_cfg *cfg, u32 len, struct cb_side *s)
{
	struct ib_qp_init_attr init = {
		.cap = {
			.max_send_wr = cfg->tx_depth + 1,
			.max_recv_wr = 1,
			.max_send_sge = 1,
			.max_recv_sge = 1,
			.max_inline_data = cfg->lat ? CB_INLINE_WRITE : 0,
		},
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.qp_type = IB_QPT_RC,
		.port_num = port,
	};
	struct ib_qp_attr a = {
		.qp_state = IB_QPS_INIT,
		.port_num = port,
		.qp_access_flags = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
				   IB_ACCESS_REMOTE_READ,
	};

	s->cq = ib_alloc_cq(dev, NULL, cfg->tx_depth + 4, 0, IB_POLL_DIRECT);
	if (IS_ERR(s->cq)) {
		int ret = PTR_ERR(s->cq);

		s->cq = NULL;
		return ret;
	}
	init.send_cq = s->cq;
	init.recv_cq = s->cq;
	s->qp = ib_create_qp(pd, &init);
	if (IS_ERR(s->qp)) {
		int ret = PTR_ERR(s->qp);

		s->qp = NULL;
		return ret;
	}
	s->rbuf = kzalloc(len, GFP_KERNEL);
	s->sbuf = kzalloc(len, GFP_KERNEL);
	if (!s->rbuf || !s->sbuf)
		return -ENOMEM;
	s->rdma = ib_dma_map_single(dev, s->rbuf, len, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(dev, s->rdma)) {
		kfree(s->rbuf);
		s->rbuf = NULL;
		return -ENOMEM;
	}
	s->sdma = ib_dma_map_single(dev, s->sbuf, len, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(dev, s->sdma)) {
		kfree(s->sbuf);
		s->sbuf = NULL;
		return -ENOMEM;
	}
	return ib_modify_qp(s->qp, &a, IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT |
			    IB_QP_ACCESS_FLAGS);
}

static int cb_connect(struct cb_side *me, struct cb_side *peer, u32 port,
		      enum ib_mtu mtu, u32 gid_idx, union ib_gid *gid, u8 timeout)
{
	struct ib_qp_attr a = {
		.qp_state = IB_QPS_RTR,
		.path_mtu = mtu,
		.dest_qp_num = peer->qp->qp_num,
		.rq_psn = 0,
		.max_dest_rd_atomic = 16,
		.min_rnr_timer = 12,
	};
	int ret;

	a.ah_attr.type = RDMA_AH_ATTR_TYPE_ROCE;
	rdma_ah_set_port_num(&a.ah_attr, port);
	rdma_ah_set_grh(&a.ah_attr, gid, 0, gid_idx, 1, 0);
	ret = ib_modify_qp(me->qp, &a, IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU |
			   IB_QP_DEST_QPN | IB_QP_RQ_PSN |
			   IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTS;
	a.timeout = timeout;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 16;
	return ib_modify_qp(me->qp, &a, IB_QP_STATE | IB_QP_TIMEOUT | IB_QP_RETRY_CNT |
			    IB_QP_RNR_RETRY | IB_QP_SQ_PSN | IB_QP_MAX_QP_RD_ATOMIC);
}

/* A number scaled by 10^dec, printed with dec decimals. */
static void fixed(char *out, size_t n, u64 v, u32 dec)
{
	u64 p = dec == 2 ? 100 : 1000000;

	snprintf(out, n, "%llu.%0*llu", div64_u64(v, p), dec, v % p);
}

static int cmp_u64(const void *a, const void *b)
{
	u64 x = *(const u64 *)a, y = *(const u64 *)b;

	return x < y ? -1 : x > y;
}

static int cb_bw(const struct cb_cfg *cfg, struct cb_side (*pairs)[2], u32 size,
		 u64 *tp, u64 *tc)
{
	u32 q, nq = cfg->qps;
	u64 iters = cfg->iters, n = iters * nq, tots = 0, totc = 0;
	u64 last_progress = ktime_get_ns();
	u32 spins = 0;
	struct cb_stream *st;
	u64 *done;
	u64 total_ns, avg, rate, peak, best = U64_MAX, i, j;
	char b1[32], b2[32], b3[32];
	int ret = 0;

	st = kcalloc(nq, sizeof(*st), GFP_KERNEL);
	done = kcalloc(nq, sizeof(*done), GFP_KERNEL);
	if (!st || !done) {
		ret = -ENOMEM;
		goto out;
	}
	for (q = 0; q < nq; q++) {
		ret = cb_stream_init(&st[q], &pairs[q][0], cfg->tx_depth, cfg->cq_mod,
				     size, &pairs[q][1], 0);
		if (ret) {
			while (q--)
				cb_stream_free(&st[q]);
			goto out;
		}
	}
	for (;;) {
		bool busy = false, progress = false;

		for (q = 0; q < nq; q++) {
			struct cb_stream *s = &st[q];

			if (s->posted < iters) {
				u32 want = iters - s->posted, room = min(cb_room(s), want);

				busy = true;
				if (room) {
					u64 t = ktime_get_ns(), k;

					ret = cb_post(s, room, room == want);
					if (ret)
						goto free;
					for (k = 0; k < room; k++)
						tp[tots + k] = t;
					tots += room;
				}
			}
			ret = cb_poll(s);
			if (ret)
				goto free;
			if (s->counts.completed > done[q]) {
				u64 t = ktime_get_ns(), k, d = s->counts.completed - done[q];

				for (k = 0; k < d; k++)
					tc[totc + k] = t;
				totc += d;
				done[q] = s->counts.completed;
				progress = true;
			}
			if (done[q] < iters)
				busy = true;
		}
		if (!busy)
			break;
		/*
		 * As kverbs' bench loop: every 64 polls without progress, check
		 * the timeout and give the CPU to rxe's workers if they need it
		 * (this kernel does not preempt).
		 */
		if (progress) {
			last_progress = ktime_get_ns();
		} else if (++spins % 64 == 0) {
			if (ktime_get_ns() - last_progress > CB_TIMEOUT_NS) {
				ret = -ETIMEDOUT;
				goto free;
			}
			if (signal_pending(current)) {
				ret = -EINTR;
				goto free;
			}
			cond_resched();
		}
	}
	total_ns = max_t(u64, tc[n - 1] - tp[0], 1);
	avg = mul_u64_u64_div_u64((u64)size * n * 100, NSEC_PER_SEC, total_ns) >> 20;
	rate = mul_u64_u64_div_u64(n, NSEC_PER_SEC, total_ns);
	for (i = 0; i < n; i++) {
		for (j = DIV_ROUND_UP(i + 1, cfg->cq_mod) * cfg->cq_mod - 1; j < n; j += cfg->cq_mod)
			best = min(best, div64_u64((tc[j] - tp[i]) * 1000, j - i + 1));
		if (n % cfg->cq_mod)
			best = min(best, div64_u64((tc[n - 1] - tp[i]) * 1000, n - i));
	}
	peak = mul_u64_u64_div_u64((u64)size * 100, 1000000000000ULL, max_t(u64, best, 1)) >> 20;
	fixed(b1, sizeof(b1), peak, 2);
	fixed(b2, sizeof(b2), avg, 2);
	fixed(b3, sizeof(b3), rate, 6);
	rep(" %-7u    %-10llu       %-7s            %-7s\t\t   %-7s\n", size, n, b1, b2, b3);
free:
	/* A stream with requests outstanding: the QP's destruction flushes
	 * them, but their CQEs must outlive that, so free after the run. */
	if (ret)
		rep("write_bw: error %d at size %u\n", ret, size);
	for (q = 0; q < nq; q++) {
		if (ret) {
			struct ib_qp_attr a = { .qp_state = IB_QPS_ERR };

			ib_modify_qp(st[q].qp, &a, IB_QP_STATE);
			ib_drain_sq(st[q].qp);
		}
		cb_stream_free(&st[q]);
	}
out:
	kfree(st);
	kfree(done);
	return ret;
}

static int cb_spin(void *buf, u32 off, u8 v)
{
	u64 start = ktime_get_ns();
	u32 spins = 0;

	while (READ_ONCE(((u8 *)buf)[off]) != v) {
		/* As kverbs' spin_byte. */
		if (++spins % 256 == 0) {
			if (ktime_get_ns() - start > CB_TIMEOUT_NS)
				return -ETIMEDOUT;
			cond_resched();
		}
	}
	return 0;
}

static int cb_lat(const struct cb_cfg *cfg, struct cb_side *c, struct cb_side *s,
		  u32 size, u64 *tp)
{
	struct cb_stream cw, sw;
	u32 iters = cfg->iters, i, m;
	u64 *delta, median, sum = 0, avg, var = 0, stdev;
	char f[7][32];
	int ret;

	ret = cb_stream_init(&cw, c, 1, 1, size, s, CB_INLINE_WRITE);
	if (ret)
		return ret;
	ret = cb_stream_init(&sw, s, 1, 1, size, c, CB_INLINE_WRITE);
	if (ret) {
		cb_stream_free(&cw);
		return ret;
	}
	for (i = 0; i < iters; i++) {
		u8 v = i % 255 + 1;

		tp[i] = ktime_get_ns();
		((u8 *)c->sbuf)[size - 1] = v;
		ret = cb_post(&cw, 1, true);
		if (!ret)
			ret = cb_spin(s->rbuf, size - 1, v);
		if (!ret) {
			((u8 *)s->sbuf)[size - 1] = v;
			ret = cb_post(&sw, 1, true);
		}
		if (!ret)
			ret = cb_spin(c->rbuf, size - 1, v);
		if (!ret)
			ret = cb_wait(&cw, i + 1);
		if (!ret)
			ret = cb_wait(&sw, i + 1);
		if (ret)
			break;
	}
	if (ret) {
		struct ib_qp_attr a = { .qp_state = IB_QPS_ERR };

		rep("write_lat: error %d at size %u\n", ret, size);
		ib_modify_qp(c->qp, &a, IB_QP_STATE);
		ib_modify_qp(s->qp, &a, IB_QP_STATE);
		ib_drain_sq(c->qp);
		ib_drain_sq(s->qp);
		goto out;
	}
	delta = kcalloc(iters - 1, sizeof(*delta), GFP_KERNEL);
	if (!delta) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i + 1 < iters; i++)
		delta[i] = tp[i + 1] - tp[i];
	sort(delta, iters - 1, sizeof(*delta), cmp_u64, NULL);
	m = iters - 1 - 2;
	median = (m - 1) % 2 ? (delta[m / 2] + delta[m / 2 - 1]) / 2 : delta[m / 2];
	for (i = 0; i < m; i++)
		sum += delta[i];
	avg = div64_u64(sum, m);
	for (i = 0; i < m; i++) {
		u64 x = delta[i] > avg ? delta[i] - avg : avg - delta[i];

		var += x * x;
	}
	stdev = int_sqrt64(div64_u64(var, m));
	/* Microseconds with 2 decimals, halved: ns / 10 / 2. */
	fixed(f[0], 32, delta[0] / 20, 2);
	fixed(f[1], 32, delta[m] / 20, 2);
	fixed(f[2], 32, median / 20, 2);
	fixed(f[3], 32, avg / 20, 2);
	fixed(f[4], 32, stdev / 20, 2);
	fixed(f[5], 32, delta[min(DIV_ROUND_UP(m * 99, 100), m)] / 20, 2);
	fixed(f[6], 32, delta[min(DIV_ROUND_UP(m * 999, 1000), m)] / 20, 2);
	rep(" %-7u %u          %-7s        %-7s      %-7s  \t       %-7s     \t%-7s\t\t%-7s \t\t%-7s\n",
	    size, iters, f[0], f[1], f[2], f[3], f[4], f[5], f[6]);
	kfree(delta);
out:
	cb_stream_free(&cw);
	cb_stream_free(&sw);
	return ret;
}

static int cb_run(const struct cb_cfg *cfg)
{
	struct ib_device *dev;
	struct ib_pd *pd;
	struct cb_side (*pairs)[2] = NULL;
	u32 port = 1, gid_idx, q, size, max = cfg->size ? cfg->size : CB_MAX_SIZE;
	union ib_gid gid;
	enum ib_mtu mtu = cfg->mtu;
	struct ib_port_attr pattr;
	u64 *tp = NULL, *tc = NULL, n = (u64)cfg->iters * cfg->qps;
	int ret;

	dev = kv_bench_get_device(cfg->dev);
	if (!dev) {
		pr_warn("kverbs_cbench: no RDMA device '%s'\n", cfg->dev);
		return -ENODEV;
	}
	ret = ib_query_port(dev, port, &pattr);
	if (ret)
		goto put;
	if (!mtu)
		mtu = pattr.active_mtu;
	ret = cb_pick_gid(dev, port, &gid_idx, &gid);
	if (ret)
		goto put;
	pd = ib_alloc_pd(dev, 0);
	if (IS_ERR(pd)) {
		ret = PTR_ERR(pd);
		goto put;
	}
	pairs = kcalloc(cfg->qps, sizeof(*pairs), GFP_KERNEL);
	tp = kvcalloc(n, sizeof(*tp), GFP_KERNEL);
	tc = kvcalloc(n, sizeof(*tc), GFP_KERNEL);
	if (!pairs || !tp || !tc) {
		ret = -ENOMEM;
		goto free;
	}
	for (q = 0; q < cfg->qps && !ret; q++) {
		ret = cb_side_alloc(dev, pd, port, cfg, max, &pairs[q][0]);
		if (!ret)
			ret = cb_side_alloc(dev, pd, port, cfg, max, &pairs[q][1]);
		if (!ret)
			ret = cb_connect(&pairs[q][0], &pairs[q][1], port, mtu, gid_idx, &gid,
					 cfg->qp_timeout);
		if (!ret)
			ret = cb_connect(&pairs[q][1], &pairs[q][0], port, mtu, gid_idx, &gid,
					 cfg->qp_timeout);
		if (!ret)
			ret = cb_register(&pairs[q][0], pd, max);
		if (!ret)
			ret = cb_register(&pairs[q][1], pd, max);
	}
	if (ret) {
		rep("setup failed: %d\n", ret);
		goto free;
	}
	rep(CB_LINE);
	rep("                    %s\n", cfg->lat ? "RDMA_Write Latency Test" : "RDMA_Write BW Test");
	rep(" Device         : %s\t\tRole           : loopback (kernel, C)\n", cfg->dev);
	rep(" Number of qps   : %u\t\tTransport type : IB\n", cfg->qps);
	rep(" Connection type : RC\t\tUsing SRQ      : OFF\n");
	if (!cfg->lat) {
		rep(" TX depth        : %u\n", cfg->tx_depth);
		rep(" CQ Moderation   : %u\n", cfg->cq_mod);
	}
	rep(" Mtu             : %d[B]\n", ib_mtu_enum_to_int(mtu));
	rep(" Polling         : direct\n");
	rep(CB_LINE);
	if (cfg->lat)
		rep(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec] \n");
	else
		rep(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n");
	for (size = cfg->size ? cfg->size : 2; size <= max && !ret; size *= 2) {
		if (cfg->lat)
			ret = cb_lat(cfg, &pairs[0][0], &pairs[0][1], size, tp);
		else
			ret = cb_bw(cfg, pairs, size, tp, tc);
	}
	rep(CB_LINE);
free:
	if (pairs) {
		for (q = 0; q < cfg->qps; q++) {
			cb_side_free(dev, &pairs[q][0], max);
			cb_side_free(dev, &pairs[q][1], max);
		}
	}
	kfree(pairs);
	kvfree(tp);
	kvfree(tc);
	ib_dealloc_pd(pd);
put:
	ib_device_put(dev);
	return ret;
}

static int cb_num(const char *key, const char *v, u32 min, u32 max, u32 *out)
{
	u32 n;

	if (kstrtou32(v, 0, &n)) {
		pr_warn("kverbs_cbench: %s: '%s' is not a number\n", key, v);
		return -EINVAL;
	}
	if (n < min || n > max) {
		pr_warn("kverbs_cbench: %s=%u is out of range [%u, %u]\n", key, n, min, max);
		return -ERANGE;
	}
	*out = n;
	return 0;
}

static int cb_parse(char *s, struct cb_cfg *cfg)
{
	bool have_iters = false, have_depth = false, have_mod = false;
	char *opt;
	int ret = 0;
	u32 v;

	memset(cfg, 0, sizeof(*cfg));
	cfg->size = 65536;
	cfg->qps = 1;
	cfg->qp_timeout = 14;
	while ((opt = strsep(&s, ", \t\n")) && !ret) {
		char *val;

		if (!*opt)
			continue;
		val = strchr(opt, '=');
		if (!val) {
			pr_warn("kverbs_cbench: '%s' needs a value\n", opt);
			return -EINVAL;
		}
		*val++ = 0;
		if (!strcmp(opt, "dev")) {
			strscpy(cfg->dev, val, sizeof(cfg->dev));
		} else if (!strcmp(opt, "test")) {
			if (!strcmp(val, "write_bw")) {
				cfg->lat = false;
			} else if (!strcmp(val, "write_lat")) {
				cfg->lat = true;
			} else {
				pr_warn("kverbs_cbench: test '%s': only write_bw and write_lat\n", val);
				return -EINVAL;
			}
		} else if (!strcmp(opt, "size")) {
			ret = cb_num(opt, val, 2, CB_MAX_SIZE, &cfg->size);
		} else if (!strcmp(opt, "sizes")) {
			if (strcmp(val, "all"))
				return -EINVAL;
			cfg->size = 0;
		} else if (!strcmp(opt, "iters")) {
			ret = cb_num(opt, val, 5, CB_MAX_SAMPLES, &cfg->iters);
			have_iters = true;
		} else if (!strcmp(opt, "tx_depth")) {
			ret = cb_num(opt, val, 1, 1024, &cfg->tx_depth);
			have_depth = true;
		} else if (!strcmp(opt, "cq_mod")) {
			ret = cb_num(opt, val, 1, 1024, &cfg->cq_mod);
			have_mod = true;
		} else if (!strcmp(opt, "qps")) {
			ret = cb_num(opt, val, 1, 16, &cfg->qps);
		} else if (!strcmp(opt, "qp_timeout")) {
			ret = cb_num(opt, val, 1, 31, &cfg->qp_timeout);
		} else if (!strcmp(opt, "mtu")) {
			ret = cb_num(opt, val, 256, 4096, &v);
			if (!ret) {
				cfg->mtu = ib_mtu_int_to_enum(v);
				if (ib_mtu_enum_to_int(cfg->mtu) != v)
					return -EINVAL;
			}
		} else if (!strcmp(opt, "poll")) {
			if (strcmp(val, "direct")) {
				pr_warn("kverbs_cbench: polls directly only\n");
				return -EINVAL;
			}
		} else {
			pr_warn("kverbs_cbench: unknown key '%s'\n", opt);
			return -EINVAL;
		}
	}
	if (ret)
		return ret;
	if (!cfg->dev[0]) {
		pr_warn("kverbs_cbench: dev= is missing\n");
		return -EINVAL;
	}
	if (!have_iters)
		cfg->iters = cfg->lat ? 1000 : 5000;
	if (!have_depth)
		cfg->tx_depth = cfg->lat ? 1 : 128;
	if (!have_mod)
		cfg->cq_mod = cfg->lat ? 1 : 100;
	cfg->cq_mod = min(cfg->cq_mod, cfg->tx_depth);
	if (cfg->lat && (cfg->qps > 1 || cfg->tx_depth > 1))
		return -EINVAL;
	if ((u64)cfg->iters * cfg->qps > CB_MAX_SAMPLES)
		return -ERANGE;
	return 0;
}

static ssize_t cb_write(struct file *f, const char __user *ubuf, size_t len, loff_t *pos)
{
	struct cb_cfg cfg;
	char *s;
	int ret;

	if (len >= PAGE_SIZE)
		return -EINVAL;
	s = memdup_user_nul(ubuf, len);
	if (IS_ERR(s))
		return PTR_ERR(s);
	ret = cb_parse(s, &cfg);
	kfree(s);
	if (ret)
		return ret;
	if (!mutex_trylock(&cb_lock))
		return -EBUSY;
	cb_report_len = 0;
	if (cb_report)
		cb_report[0] = 0;
	ret = cb_run(&cfg);
	rep(ret ? "result: error %d\n" : "result: ok\n", ret);
	mutex_unlock(&cb_lock);
	return ret ? ret : len;
}

static ssize_t cb_read(struct file *f, char __user *ubuf, size_t len, loff_t *pos)
{
	ssize_t ret;

	mutex_lock(&cb_lock);
	ret = simple_read_from_buffer(ubuf, len, pos, cb_report, cb_report_len);
	mutex_unlock(&cb_lock);
	return ret;
}

static const struct file_operations cb_fops = {
	.owner = THIS_MODULE,
	.write = cb_write,
	.read = cb_read,
};

static int __init cb_init(void)
{
	cb_report = kzalloc(PAGE_SIZE * 4, GFP_KERNEL);
	if (!cb_report)
		return -ENOMEM;
	cb_dir = debugfs_create_dir("kverbs_cbench", NULL);
	debugfs_create_file("bench", 0600, cb_dir, NULL, &cb_fops);
	return 0;
}

static void __exit cb_exit(void)
{
	debugfs_remove(cb_dir);
	kfree(cb_report);
}

module_init(cb_init);
module_exit(cb_exit);
MODULE_DESCRIPTION("kverbs bench reference: write_bw/write_lat against the raw verbs in C");
MODULE_LICENSE("GPL");
