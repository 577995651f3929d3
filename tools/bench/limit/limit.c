// SPDX-License-Identifier: GPL-2.0
/*
 * kverbs_limit: the limit line of `make bench` -- the per-byte work rxe does
 * for one RC message on lo, done and timed in the kernel with the functions
 * rxe itself calls, in the guest and run that measure perftest, C and kverbs.
 * For measurement only; not part of the product.
 *
 *   echo dev=rxe_lo,size=65536 > /sys/kernel/debug/kverbs_limit/limit
 *   cat /sys/kernel/debug/kverbs_limit/limit
 *
 * A message of `size` bytes is cut into packets of the port's active MTU
 * (mtu= overrides it), as rxe's requester cuts it. For each packet, what
 * rxe does on lo (rxe_loopback: no network stack between the two halves):
 *
 *   requester (tx): the skb (rxe_init_packet: alloc_skb of headers,
 *     payload and ICRC, GFP_ATOMIC), the payload copied from the MR's pages
 *     (rxe_mr_copy: kmap_local_page and memcpy page by page), the ICRC
 *     (rxe_icrc_generate: a 40-byte masked pseudo-header, the rest of the
 *     transport headers, the payload and its pad);
 *   responder (rx): the ICRC checked (rxe_icrc_check, the same CRC), the
 *     payload copied into the MR's pages, the skb freed.
 *
 * and one ACK per message or per 66 packets (RXE_MAX_PKT_PER_ACK): an skb
 * of BTH, AETH and ICRC made and CRCed by the responder, checked and freed
 * by the requester. The CRC is the one rxe_icrc.c uses on the running
 * kernel: crypto_shash "crc32" on 6.12 (its driver is printed: the same
 * tfm priority picks it for rxe), crc32_le() on 7.x.
 *
 * What is not modelled is per-packet or per-message control work (routing,
 * headers, the QP state machines, task scheduling, completions): the model
 * is a lower bound on the work, so its bandwidth is an upper bound. The
 * report gives the time of each half per message; with two CPUs the halves
 * can overlap (rxe runs the responder in its workqueue when packets queue
 * up), so the bound is size / max(tx, rx), and size / (tx + rx) on one CPU.
 * Each packet's halves are timed apart (ktime_get_ns), less the cost of a
 * clock read, measured first.
 *
 * Output, one line:
 *   size S mtu M packets P messages N tx_ns T rx_ns R crc DRIVER
 */

#include <linux/module.h>
#include <linux/debugfs.h>
#include <linux/slab.h>
#include <linux/highmem.h>
#include <linux/skbuff.h>
#include <linux/netdevice.h>
#include <linux/crc32.h>
#include <linux/math64.h>
#include <linux/uaccess.h>
#include <linux/version.h>
#include <linux/sched/signal.h>
#include <crypto/hash.h>
#include <rdma/ib_verbs.h>
#include "../kv_bench_dev.h"

#define LM_MAX_SIZE (8 << 20)
/* What one run moves at least, and the messages it is made of at most. */
#define LM_BYTES (32 << 20)
#define LM_MAX_MESSAGES 20000
#define LM_MIN_MESSAGES 4

/* rxe's header sizes (rxe_hdr.h, rxe_net.c) for RoCE v2 over IPv4. */
#define LM_BTH 12
#define LM_RETH 16
#define LM_AETH 4
#define LM_ICRC 4
#define LM_UDP_IP (8 + 20)
/* rxe_init_packet's hdr_len: Ethernet, IPv4 and UDP. */
#define LM_HDR_LEN (ETH_HLEN + LM_UDP_IP)
/*
 * rxe_req.c asks for an ACK on a message's last packet and on the packet
 * that finds more than RXE_MAX_PKT_PER_ACK (64) unacknowledged: every 66th.
 */
#define LM_PKTS_PER_ACK 66

struct lm_cfg {
	char dev[IB_DEVICE_NAME_MAX];
	u32 size;
	u32 mtu; /* 0: the port's active MTU */
};

struct lm_ctx {
#if LINUX_VERSION_CODE < KERNEL_VERSION(7, 0, 0)
	struct crypto_shash *tfm;
#endif
	unsigned int reserve; /* LL_RESERVED_SPACE of the device's netdev */
	struct page **src, **dst; /* the two "MRs" */
	unsigned int npages;
	u64 tx_ns, rx_ns;
};

static DEFINE_MUTEX(lm_lock);
static struct dentry *lm_dir;
static char lm_report[256];
static size_t lm_report_len;

/* rxe_crc32() of the running kernel's rxe_icrc.c. */
static u32 lm_crc32(struct lm_ctx *c, u32 crc, const void *p, size_t len)
{
#if LINUX_VERSION_CODE < KERNEL_VERSION(7, 0, 0)
	SHASH_DESC_ON_STACK(shash, c->tfm);

	shash->tfm = c->tfm;
	*(u32 *)shash_desc_ctx(shash) = crc;
	if (unlikely(crypto_shash_update(shash, p, len)))
		return crc32_le(crc, p, len);
	crc = *(u32 *)shash_desc_ctx(shash);
	barrier_data(shash_desc_ctx(shash));
	return crc;
#else
	return crc32_le(crc, p, len);
#endif
}

/*
 * rxe_icrc_hdr() and the payload: the masked IPv4 + UDP + BTH pseudo-header
 * (40 bytes, copied and masked on the stack), the rest of the headers
 * (hdr_rest bytes), then payload and pad.
 */
static u32 lm_icrc(struct lm_ctx *c, const u8 *l3, unsigned int hdr_rest, unsigned int data)
{
	u8 pshdr[LM_UDP_IP + LM_BTH];
	u32 crc = 0xdebb20e3;

	memcpy(pshdr, l3, sizeof(pshdr));
	pshdr[1] = 0xff;	/* tos */
	pshdr[8] = 0xff;	/* ttl */
	pshdr[10] = pshdr[11] = 0xff;	/* check */
	pshdr[26] = pshdr[27] = 0xff;	/* udp check */
	pshdr[LM_UDP_IP + 4] = 0xff;	/* bth.resv8a */
	crc = lm_crc32(c, crc, pshdr, sizeof(pshdr));
	crc = lm_crc32(c, crc, l3 + sizeof(pshdr), hdr_rest);
	crc = lm_crc32(c, crc, l3 + sizeof(pshdr) + hdr_rest, data);
	return ~crc;
}

/* rxe_mr_copy_xarray(): page by page, mapped with kmap_local_page(). */
static void lm_mr_copy(struct page **pages, size_t off, u8 *addr, unsigned int len, bool from_mr)
{
	while (len) {
		unsigned int po = off & ~PAGE_MASK;
		unsigned int bytes = min_t(unsigned int, len, PAGE_SIZE - po);
		u8 *va = kmap_local_page(pages[off >> PAGE_SHIFT]);

		if (from_mr)
			memcpy(addr, va + po, bytes);
		else
			memcpy(va + po, addr, bytes);
		kunmap_local(va);
		addr += bytes;
		off += bytes;
		len -= bytes;
	}
}

/*
 * One packet: `ext` bytes of extended transport header after the BTH,
 * `len` bytes of payload at `off` in the message; or, with `ack`, an ACK
 * (no payload), made by the responder and taken by the requester.
 */
static int lm_packet(struct lm_ctx *c, unsigned int ext, size_t off, unsigned int len, bool ack)
{
	unsigned int pad = (4 - (len & 3)) & 3;
	unsigned int paylen = LM_BTH + ext + len + pad + LM_ICRC;
	struct sk_buff *skb;
	u64 t0, t1, t2;
	u8 *l3, *data;
	u32 icrc;

	t0 = ktime_get_ns();
	skb = alloc_skb(paylen + LM_HDR_LEN + c->reserve, GFP_ATOMIC);
	if (!skb)
		return -ENOMEM;
	skb->tstamp = ktime_get();
	skb_reserve(skb, LM_HDR_LEN + c->reserve);
	skb_put(skb, paylen);
	/* rxe_prepare() pushes the UDP and IP headers in front of the BTH. */
	l3 = skb_push(skb, LM_UDP_IP);
	memset(l3, 0, LM_UDP_IP + LM_BTH + ext);
	l3[0] = 0x45;
	data = l3 + LM_UDP_IP + LM_BTH + ext;
	if (!ack)
		lm_mr_copy(c->src, off, data, len, true);
	memset(data + len, 0, pad);
	icrc = lm_icrc(c, l3, ext, len + pad);
	memcpy(data + len + pad, &icrc, LM_ICRC);
	t1 = ktime_get_ns();

	icrc = lm_icrc(c, l3, ext, len + pad);
	if (memcmp(data + len + pad, &icrc, LM_ICRC)) {
		kfree_skb(skb);
		return -EILSEQ;
	}
	if (!ack)
		lm_mr_copy(c->dst, off, data, len, false);
	kfree_skb(skb);
	t2 = ktime_get_ns();

	/* An ACK's work belongs to the other direction: responder, then requester. */
	c->tx_ns += ack ? t2 - t1 : t1 - t0;
	c->rx_ns += ack ? t1 - t0 : t2 - t1;
	return 0;
}

/* One RDMA WRITE of `size` bytes in packets of `mtu`: RETH on the first. */
static int lm_message(struct lm_ctx *c, u32 size, u32 mtu, u32 *packets)
{
	size_t off = 0;
	u32 n = 0;
	int ret;

	do {
		unsigned int len = min_t(size_t, size - off, mtu);

		ret = lm_packet(c, off ? 0 : LM_RETH, off, len, false);
		if (ret)
			return ret;
		off += len;
		n++;
		if (n % LM_PKTS_PER_ACK == 0 || off == size) {
			ret = lm_packet(c, LM_AETH, 0, 0, true);
			if (ret)
				return ret;
		}
	} while (off < size);
	*packets = n;
	return 0;
}

static void lm_free_pages(struct page **pages, unsigned int n)
{
	unsigned int i;

	if (!pages)
		return;
	for (i = 0; i < n; i++)
		if (pages[i])
			__free_page(pages[i]);
	kvfree(pages);
}

static struct page **lm_alloc_pages(unsigned int n)
{
	struct page **pages = kvcalloc(n, sizeof(*pages), GFP_KERNEL);
	unsigned int i;

	if (!pages)
		return NULL;
	for (i = 0; i < n; i++) {
		pages[i] = alloc_page(GFP_KERNEL);
		if (!pages[i]) {
			lm_free_pages(pages, n);
			return NULL;
		}
		/* Data that is not all zero, as a benchmark's would be. */
		memset(page_address(pages[i]), i * 37 + 1, PAGE_SIZE);
	}
	return pages;
}

static int lm_run(const struct lm_cfg *cfg)
{
	struct lm_ctx c = {};
	struct ib_device *dev;
	struct net_device *ndev;
	struct ib_port_attr pattr;
	u32 mtu = cfg->mtu, messages, packets = 0, i;
	u64 clock_ns, t;
	const char *driver = "crc32_le";
	int ret;

	dev = kv_bench_get_device(cfg->dev);
	if (!dev) {
		pr_warn("kverbs_limit: no RDMA device '%s'\n", cfg->dev);
		return -ENODEV;
	}
	ret = ib_query_port(dev, 1, &pattr);
	ndev = ret ? NULL : ib_device_get_netdev(dev, 1);
	if (!ret && !ndev)
		ret = -ENODEV;
	if (ret) {
		pr_warn("kverbs_limit: %s: no port 1 with a netdev (%d)\n", cfg->dev, ret);
		goto put;
	}
	if (!mtu)
		mtu = ib_mtu_enum_to_int(pattr.active_mtu);
	c.reserve = LL_RESERVED_SPACE(ndev);
	dev_put(ndev);
#if LINUX_VERSION_CODE < KERNEL_VERSION(7, 0, 0)
	c.tfm = crypto_alloc_shash("crc32", 0, 0);
	if (IS_ERR(c.tfm)) {
		ret = PTR_ERR(c.tfm);
		pr_warn("kverbs_limit: no crc32 shash (%d)\n", ret);
		goto put;
	}
	driver = crypto_shash_driver_name(c.tfm);
#endif
	c.npages = DIV_ROUND_UP(cfg->size, PAGE_SIZE);
	c.src = lm_alloc_pages(c.npages);
	c.dst = c.src ? lm_alloc_pages(c.npages) : NULL;
	if (!c.dst) {
		ret = -ENOMEM;
		goto free;
	}

	/* The cost of a clock read, taken off each timed half. */
	t = ktime_get_ns();
	for (i = 0; i < 1000; i++)
		ktime_get_ns();
	clock_ns = div_u64(ktime_get_ns() - t, 1001);

	messages = clamp_t(u32, LM_BYTES / cfg->size, LM_MIN_MESSAGES, LM_MAX_MESSAGES);
	/* One message first, untimed: caches and the skb allocator warm. */
	ret = lm_message(&c, cfg->size, mtu, &packets);
	c.tx_ns = c.rx_ns = 0;
	for (i = 0; i < messages && !ret; i++) {
		ret = lm_message(&c, cfg->size, mtu, &packets);
		if (!ret && fatal_signal_pending(current))
			ret = -EINTR;
		cond_resched();
	}
	if (ret) {
		pr_warn("kverbs_limit: size %u: error %d\n", cfg->size, ret);
		goto free;
	}
	/* Each packet and ACK read the clock three times: a read per half. */
	t = (u64)messages * (packets + DIV_ROUND_UP(packets, LM_PKTS_PER_ACK)) * clock_ns;
	c.tx_ns = c.tx_ns > t ? c.tx_ns - t : 0;
	c.rx_ns = c.rx_ns > t ? c.rx_ns - t : 0;
	lm_report_len = scnprintf(lm_report, sizeof(lm_report),
				  "size %u mtu %u packets %u messages %u tx_ns %llu rx_ns %llu crc %s\n",
				  cfg->size, mtu, packets, messages, div_u64(c.tx_ns, messages),
				  div_u64(c.rx_ns, messages), driver);
free:
	lm_free_pages(c.dst, c.npages);
	lm_free_pages(c.src, c.npages);
#if LINUX_VERSION_CODE < KERNEL_VERSION(7, 0, 0)
	crypto_free_shash(c.tfm);
#endif
put:
	ib_device_put(dev);
	return ret;
}

static int lm_parse(char *s, struct lm_cfg *cfg)
{
	char *opt;
	int ret = 0;

	memset(cfg, 0, sizeof(*cfg));
	s = strim(s);
	while (!ret && (opt = strsep(&s, ",")) != NULL) {
		char *val = strchr(opt, '=');

		if (!*opt)
			continue;
		if (!val) {
			pr_warn("kverbs_limit: '%s' is not key=value\n", opt);
			return -EINVAL;
		}
		*val++ = 0;
		if (!strcmp(opt, "dev")) {
			if (strscpy(cfg->dev, val, sizeof(cfg->dev)) < 0)
				ret = -EINVAL;
		} else if (!strcmp(opt, "size")) {
			ret = kstrtou32(val, 0, &cfg->size);
			if (!ret && (cfg->size < 1 || cfg->size > LM_MAX_SIZE))
				ret = -ERANGE;
		} else if (!strcmp(opt, "mtu")) {
			ret = kstrtou32(val, 0, &cfg->mtu);
			if (!ret && ib_mtu_enum_to_int(ib_mtu_int_to_enum(cfg->mtu)) != cfg->mtu)
				ret = -EINVAL;
		} else {
			pr_warn("kverbs_limit: unknown key '%s'\n", opt);
			return -EINVAL;
		}
		if (ret)
			pr_warn("kverbs_limit: bad %s=%s (%d)\n", opt, val, ret);
	}
	if (!ret && (!cfg->dev[0] || !cfg->size)) {
		pr_warn("kverbs_limit: dev= and size= are needed\n");
		ret = -EINVAL;
	}
	return ret;
}

static ssize_t lm_write(struct file *f, const char __user *ubuf, size_t len, loff_t *pos)
{
	struct lm_cfg cfg;
	char *s;
	int ret;

	if (len >= PAGE_SIZE)
		return -EINVAL;
	s = memdup_user_nul(ubuf, len);
	if (IS_ERR(s))
		return PTR_ERR(s);
	ret = lm_parse(s, &cfg);
	kfree(s);
	if (ret)
		return ret;
	if (!mutex_trylock(&lm_lock))
		return -EBUSY;
	lm_report_len = 0;
	ret = lm_run(&cfg);
	mutex_unlock(&lm_lock);
	return ret ? ret : len;
}

static ssize_t lm_read(struct file *f, char __user *ubuf, size_t len, loff_t *pos)
{
	ssize_t ret;

	mutex_lock(&lm_lock);
	ret = simple_read_from_buffer(ubuf, len, pos, lm_report, lm_report_len);
	mutex_unlock(&lm_lock);
	return ret;
}

static const struct file_operations lm_fops = {
	.owner = THIS_MODULE,
	.write = lm_write,
	.read = lm_read,
};

static int __init lm_init(void)
{
	lm_dir = debugfs_create_dir("kverbs_limit", NULL);
	debugfs_create_file("limit", 0600, lm_dir, NULL, &lm_fops);
	return 0;
}

static void __exit lm_exit(void)
{
	debugfs_remove(lm_dir);
}

module_init(lm_init);
module_exit(lm_exit);
MODULE_DESCRIPTION("kverbs bench limit: rxe's per-byte work on lo, timed in the kernel");
MODULE_LICENSE("GPL");
