// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers of the kverbs safe layer: macros that bindgen cannot turn into
 * Rust.  Static inline functions need no helper here: bindgen wraps them in
 * the generated rust/kverbs_extern.c.
 */
#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/hrtimer.h>
#include <linux/math64.h>
#include <linux/fault-inject.h>
#include <linux/kmemleak.h>
#include <linux/irq_poll.h>
#include <linux/kobject.h>
#include <linux/rcupdate.h>
#include <linux/igmp.h>
#include <net/ipv6.h>
#include <linux/version.h>
#if LINUX_VERSION_CODE < KERNEL_VERSION(7, 0, 0)
#include <net/ipv6_stubs.h>
#endif

/* The address of kernel_bind() and kernel_connect(): unsized in 7.x. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 0, 0)
#define KVERBS_SOCKADDR(p) ((struct sockaddr_unsized *)(p))
#else
#define KVERBS_SOCKADDR(p) ((struct sockaddr *)(p))
#endif
#include <net/route.h>
#include <linux/in.h>
#include <linux/rtnetlink.h>
#include <linux/net.h>
#include <net/net_namespace.h>
#include <net/sock.h>
#include <linux/scatterlist.h>
#include <linux/sched.h>
#include <linux/cpumask.h>
#include <linux/sched/signal.h>
#include <linux/sysfs.h>
#include <linux/timekeeping.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/completion.h>
#include <net/if_inet6.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

#include "kverbs_helpers.h"

void kverbs_copy_dev_name(const struct ib_device *dev, u8 *out)
{
	int i;

	for (i = 0; i < IB_DEVICE_NAME_MAX; i++)
		out[i] = READ_ONCE(dev->name[i]);
	out[IB_DEVICE_NAME_MAX - 1] = 0;
}

struct kverbs_resolve {
	struct completion done;
	int status;
};

static void kverbs_resolve_cb(int status, struct sockaddr *src,
			      struct rdma_dev_addr *addr, void *context)
{
	struct kverbs_resolve *r = context;

	r->status = status;
	complete(&r->done);
}

int kverbs_ah_attr_resolve_dmac(struct rdma_ah_attr *attr,
				const struct ib_gid_attr *sgid_attr)
{
	struct ib_global_route *grh = rdma_ah_retrieve_grh(attr);
	struct in6_addr *dgid = (struct in6_addr *)grh->dgid.raw;
	union {
		struct sockaddr_in v4;
		struct sockaddr_in6 v6;
	} src, dst;
	struct rdma_dev_addr dev_addr = {};
	struct kverbs_resolve r;
	int ret;

	if (rdma_is_multicast_addr(dgid)) {
		if (ipv6_addr_v4mapped(dgid))
			ip_eth_mc_map(dgid->s6_addr32[3], attr->roce.dmac);
		else
			ipv6_eth_mc_map(dgid, attr->roce.dmac);
		return 0;
	}
	if (rdma_link_local_addr(dgid) &&
	    sgid_attr->gid_type == IB_GID_TYPE_ROCE) {
		rdma_get_ll_mac(dgid, attr->roce.dmac);
		return 0;
	}
	/* As rdma_addr_find_l2_eth_by_grh(), which is not exported. */
	rdma_gid2ip((struct sockaddr *)&src, &sgid_attr->gid);
	rdma_gid2ip((struct sockaddr *)&dst, &grh->dgid);
	dev_addr.net = &init_net;
	dev_addr.sgid_attr = sgid_attr;
	init_completion(&r.done);
	ret = rdma_resolve_ip((struct sockaddr *)&src, (struct sockaddr *)&dst,
			      &dev_addr, 1000, kverbs_resolve_cb, true, &r);
	if (ret)
		return ret;
	wait_for_completion(&r.done);
	if (r.status)
		return r.status;
	memcpy(attr->roce.dmac, dev_addr.dst_dev_addr, ETH_ALEN);
	return 0;
}

#ifdef CONFIG_FAULT_INJECTION
static DECLARE_FAULT_ATTR(kverbs_fail_drain);

bool kverbs_should_fail_drain(void)
{
	return should_fail(&kverbs_fail_drain, 1);
}
#else
bool kverbs_should_fail_drain(void)
{
	return false;
}
#endif

#ifdef CONFIG_FAULT_INJECTION_DEBUG_FS
struct dentry *kverbs_fail_drain_create(struct dentry *parent)
{
	return fault_create_debugfs_attr("fail_drain", parent,
					 &kverbs_fail_drain);
}
#else
struct dentry *kverbs_fail_drain_create(struct dentry *parent)
{
	return ERR_PTR(-EOPNOTSUPP);
}
#endif

void kverbs_kmemleak_not_leak(const void *ptr)
{
	kmemleak_not_leak(ptr);
}

void kverbs_ah_attr_dmac(const struct rdma_ah_attr *attr, u8 *out)
{
	memcpy(out, attr->roce.dmac, ETH_ALEN);
}

void kverbs_sysfs_attr_init(struct attribute *attr)
{
	sysfs_attr_init(attr);
}

void kverbs_kobj_attr_set_show(struct kobj_attribute *attr,
			       ssize_t (*show)(struct kobject *kobj,
					       struct kobj_attribute *attr,
					       char *buf))
{
	attr->show = show;
}

struct dentry *kverbs_debugfs_create_file(const char *name, umode_t mode,
					  struct dentry *parent, void *data,
					  const struct file_operations *fops)
{
	return debugfs_create_file(name, mode, parent, data, fops);
}

void kverbs_init_waitqueue_head(struct wait_queue_head *wq)
{
	init_waitqueue_head(wq);
}

void kverbs_wake_up(struct wait_queue_head *wq)
{
	wake_up(wq);
}

void kverbs_spin_lock_init(spinlock_t *lock)
{
	spin_lock_init(lock);
}

unsigned long kverbs_spin_lock_irqsave(spinlock_t *lock)
{
	unsigned long flags;

	spin_lock_irqsave(lock, flags);
	return flags;
}

void kverbs_spin_unlock_irqrestore(spinlock_t *lock, unsigned long flags)
{
	spin_unlock_irqrestore(lock, flags);
}

long kverbs_wait_u32(struct wait_queue_head *wq, const u32 *v, u32 want,
		     unsigned int timeout_ms, bool interruptible)
{
	if (!interruptible)
		return wait_event_timeout(*wq, READ_ONCE(*v) == want,
					  msecs_to_jiffies(timeout_ms));
	return wait_event_interruptible_timeout(*wq, READ_ONCE(*v) == want,
						msecs_to_jiffies(timeout_ms));
}

void kverbs_sg_set_dma(struct scatterlist *sgl, unsigned int n, unsigned int i,
		       u64 dma_addr, unsigned int len)
{
	if (i == 0)
		sg_init_table(sgl, n);
	sg_dma_address(&sgl[i]) = dma_addr;
	sg_dma_len(&sgl[i]) = len;
}

u32 kverbs_sg_to_sges(struct scatterlist *sgl, int count, struct ib_sge *sges, u32 lkey)
{
	struct scatterlist *sg;
	u32 len = 0;
	int i;

	for_each_sg(sgl, sg, count, i) {
		sges[i].addr = sg_dma_address(sg);
		sges[i].length = sg_dma_len(sg);
		sges[i].lkey = lkey;
		len += sges[i].length;
	}
	return len;
}

bool kverbs_qp_wait_last_wqe(struct ib_qp *qp, unsigned int timeout_ms)
{
	return wait_for_completion_timeout(&qp->srq_completion,
					   msecs_to_jiffies(timeout_ms)) > 0;
}

bool kverbs_cancel_work(struct work_struct *work)
{
	return cancel_work(work);
}

void kverbs_init_delayed_work(struct delayed_work *dw,
			      void (*fn)(struct work_struct *work))
{
	INIT_DELAYED_WORK(dw, fn);
}

bool kverbs_queue_delayed_work(struct delayed_work *dw, unsigned int ms)
{
	return queue_delayed_work(kverbs_events_wq(), dw, msecs_to_jiffies(ms));
}

bool kverbs_disable_delayed_work_sync(struct delayed_work *dw)
{
	return disable_delayed_work_sync(dw);
}

u64 kverbs_rq_pos(struct request *rq)
{
	return blk_rq_pos(rq);
}

u32 kverbs_rq_bytes(struct request *rq)
{
	return blk_rq_bytes(rq);
}

u32 kverbs_rq_op(struct request *rq)
{
	return (__force u32)req_op(rq);
}

bool kverbs_rq_fua(struct request *rq)
{
	return rq->cmd_flags & REQ_FUA;
}

u16 kverbs_rq_segments(struct request *rq)
{
	return blk_rq_nr_phys_segments(rq);
}

int kverbs_rq_tag(struct request *rq)
{
	return rq->tag;
}

u32 kverbs_rq_hw_queue(struct request *rq)
{
	return rq->mq_hctx->queue_num;
}

void *kverbs_rq_pdu(struct request *rq)
{
	return blk_mq_rq_to_pdu(rq);
}

void *kverbs_rq_queuedata(struct request *rq)
{
	return rq->q->queuedata;
}

void *kverbs_hctx_queuedata(struct blk_mq_hw_ctx *hctx)
{
	return hctx->queue->queuedata;
}

void kverbs_rq_start(struct request *rq)
{
	blk_mq_start_request(rq);
}

void kverbs_rq_end(struct request *rq, int err)
{
	blk_mq_end_request(rq, errno_to_blk_status(err));
}

/* Back to blk-mq, which dispatches it again when its queue runs next (the
 * requeue list kicked at once; a quiesced queue runs when unquiesced). */
void kverbs_rq_requeue(struct request *rq)
{
	blk_mq_requeue_request(rq, true);
}

/* Whether blk-mq hands the request to the driver for the first time, not
 * again after a requeue: marks it RQF_DONTPREP, which a request allocated
 * anew does not have (and with which a requeued request goes back to the
 * dispatch list unmerged, as SCSI's and NVMe's do). */
bool kverbs_rq_first_dispatch(struct request *rq)
{
	if (rq->rq_flags & RQF_DONTPREP)
		return false;
	rq->rq_flags |= RQF_DONTPREP;
	return true;
}

/* Whether the request may be sent again (not fail-fast, its queue not
 * dying), as nvme_decide_disposition asks. */
bool kverbs_rq_may_retry(struct request *rq)
{
	return !blk_noretry_request(rq) && !blk_queue_dying(rq->q);
}

bool kverbs_rq_complete_remote(struct request *rq)
{
	return blk_mq_complete_request_remote(rq);
}

int kverbs_rq_map_sg(struct request *rq, struct sg_table *t)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 0, 0)
	return blk_rq_map_sg(rq, t->sgl);
#else
	return blk_rq_map_sg(rq->q, rq, t->sgl);
#endif
}

static_assert((__force u8)BLK_STS_OK == KVERBS_BLK_STS_OK);
static_assert((__force u8)BLK_STS_RESOURCE == KVERBS_BLK_STS_RESOURCE);

struct blk_mq_tag_set *kverbs_blk_alloc_tag_set(const struct blk_mq_ops *ops,
						 unsigned int nr_hw_queues,
						 unsigned int depth,
						 unsigned int cmd_size,
						 unsigned int timeout_ms)
{
	struct blk_mq_tag_set *set = kzalloc(sizeof(*set), GFP_KERNEL);
	int err;

	if (!set)
		return ERR_PTR(-ENOMEM);
	set->ops = ops;
	set->nr_hw_queues = nr_hw_queues;
	set->queue_depth = depth;
	set->cmd_size = cmd_size;
	set->numa_node = NUMA_NO_NODE;
	set->timeout = timeout_ms ? msecs_to_jiffies(timeout_ms) : 0;
#if LINUX_VERSION_CODE < KERNEL_VERSION(7, 0, 0)
	set->flags = BLK_MQ_F_SHOULD_MERGE;
#endif
	err = blk_mq_alloc_tag_set(set);
	if (err) {
		kfree(set);
		return ERR_PTR(err);
	}
	return set;
}

void kverbs_blk_free_tag_set(struct blk_mq_tag_set *set)
{
	blk_mq_free_tag_set(set);
	kfree(set);
}

/* A disk's operations: only the owner, and the free_disk that frees them. */
static void kverbs_blk_free_disk(struct gendisk *disk)
{
	kfree(disk->fops);
	/* This is kverbs.ko's code: its reference goes from its workqueue. */
	kverbs_layer_put_deferred();
}

struct gendisk *kverbs_blk_alloc_disk(struct blk_mq_tag_set *set,
				      const struct kverbs_blk_limits *l,
				      void *queuedata, struct module *owner,
				      const char *name)
{
	struct queue_limits lim = {
		.logical_block_size = l->logical_block_size,
		.physical_block_size = l->physical_block_size,
		.max_hw_sectors = l->max_hw_sectors,
		.max_segments = l->max_segments,
		.max_segment_size = l->max_segment_size,
		.virt_boundary_mask = l->virt_boundary_mask,
		.dma_alignment = l->dma_alignment,
		.max_write_zeroes_sectors = l->max_write_zeroes_sectors,
	};
	struct block_device_operations *fops;
	struct gendisk *disk;

	if (l->write_cache)
		lim.features |= BLK_FEAT_WRITE_CACHE;
	if (l->fua)
		lim.features |= BLK_FEAT_FUA;
	if (l->rotational)
		lim.features |= BLK_FEAT_ROTATIONAL;
	fops = kzalloc(sizeof(*fops), GFP_KERNEL);
	if (!fops)
		return ERR_PTR(-ENOMEM);
	if (!kverbs_layer_get()) {
		kfree(fops);
		return ERR_PTR(-ENODEV);
	}
	fops->owner = owner;
	fops->free_disk = kverbs_blk_free_disk;
	disk = blk_mq_alloc_disk(set, &lim, queuedata);
	if (IS_ERR(disk)) {
		kfree(fops);
		kverbs_layer_put();
		return disk;
	}
	disk->fops = fops;
	if (l->no_partitions)
		disk->flags |= GENHD_FL_NO_PART;
	strscpy(disk->disk_name, name, DISK_NAME_LEN);
	return disk;
}

int kverbs_blk_add_disk(struct gendisk *disk, u64 sectors)
{
	set_capacity(disk, sectors);
	return device_add_disk(NULL, disk, NULL);
}

void kverbs_blk_put_unadded(struct gendisk *disk)
{
	const struct block_device_operations *fops = disk->fops;

	put_disk(disk);
	kfree(fops);
	kverbs_layer_put();
}

void kverbs_blk_del_disk(struct gendisk *disk)
{
	del_gendisk(disk);
	put_disk(disk);
}

void kverbs_blk_delete(struct gendisk *disk)
{
	del_gendisk(disk);
}

void kverbs_blk_set_capacity(struct gendisk *disk, u64 sectors)
{
	set_capacity_and_notify(disk, sectors);
}

int kverbs_sg_alloc_table(struct sg_table *t, unsigned int nents, bool atomic)
{
	return sg_alloc_table(t, nents, atomic ? GFP_ATOMIC : GFP_KERNEL);
}

struct scatterlist *kverbs_sg_next(struct scatterlist *sg)
{
	return sg_next(sg);
}

void *kverbs_current(void)
{
	return current;
}

void kverbs_rcu_read_lock(void)
{
	rcu_read_lock();
}

void kverbs_rcu_read_unlock(void)
{
	rcu_read_unlock();
}

void kverbs_synchronize_rcu(void)
{
	synchronize_rcu();
}

bool kverbs_module_get_live(struct module *mod)
{
	/* As full_proxy_open() reads its owner's state: unlocked. */
	if (READ_ONCE(mod->state) != MODULE_STATE_LIVE)
		return false;
	return try_module_get(mod);
}

void kverbs_module_put(struct module *mod)
{
	module_put(mod);
}

bool kverbs_signal_pending(void)
{
	return signal_pending(current);
}

void kverbs_cond_resched(void)
{
	cond_resched();
}

/*
 * ib_poll_handler() (drivers/infiniband/core/cq.c, 6.12) ends its poll with
 * irq_poll_complete(), which clears IRQ_POLL_F_SCHED, and only then re-arms
 * the CQ with ib_req_notify_cq(cq). ib_free_cq()'s irq_poll_disable() waits
 * for IRQ_POLL_F_SCHED only, so it can return in between, and the CQ is
 * freed under the handler's re-arm (seen: KASAN slab-use-after-free in
 * ib_poll_handler, then a jump through the freed CQ's device pointer, when
 * a run freed its CQ right after the completion that ended its wait).
 *
 * Take IRQ_POLL_F_SCHED first, so that no new poll starts; wait for an RCU
 * grace period, which a handler still in its tail (softirq context, a
 * read-side critical section: synchronize_rcu() waits for softirq handlers)
 * ends before; and give the bit back for ib_free_cq(), whose own
 * irq_poll_disable() would otherwise wait for ever. Nothing schedules a poll
 * in between if the CQ has no QP any more: completions, and the driver's
 * calls of the CQ's comp_handler (ib_cq_completion_softirq(), which is
 * irq_poll_sched()), come from its QPs. A QP whose destruction failed still
 * counts in cq->usecnt; kverbs_free_cq() then does not free the CQ at all.
 */
void kverbs_cq_quiesce_softirq(struct ib_cq *cq)
{
	irq_poll_disable(&cq->iop);
	synchronize_rcu();
	irq_poll_enable(&cq->iop);
}

/*
 * The completion handler of an adaptive CQ: the driver calls it on the
 * next completion after ib_req_notify_cq() (rxe from its completer, with
 * the CQ's lock held; hardware from its event interrupt; mlx4 and mlx5
 * also call every CQ's handler on a fatal device error), with the CQ's
 * context, the CQ's wait queue. It only wakes the tasks sleeping there.
 */
static void kverbs_cq_event(struct ib_cq *cq, void *wq)
{
	wake_up(wq);
}

/*
 * ib_alloc_cq() gives an IB_POLL_DIRECT CQ a completion handler that only
 * warns: the core never arms such a CQ, its waiters poll it. An adaptive
 * CQ is polled the same way (ib_process_cq_direct()), but a waiter that
 * has spun long enough arms it and sleeps until the driver calls the
 * handler (kverbs_cq_sleep()). Called right after ib_alloc_cq(), before
 * any QP uses the CQ, so before the driver can call the handler; the core
 * reads comp_handler nowhere else, and ib_free_cq() does not look at it.
 */
void kverbs_cq_set_event_handler(struct ib_cq *cq)
{
	WARN_ON_ONCE(cq->poll_ctx != IB_POLL_DIRECT);
	cq->comp_handler = kverbs_cq_event;
}

/*
 * Sleeps until the next completion event of one of @cqs (at most the first
 * KVERBS_SLEEP_CQS of @n), @timeout_us at most: adaptive CQs, each with
 * kverbs_cq_set_event_handler() and a wait queue as cq_context. The task
 * is on every CQ's wait queue, in TASK_IDLE (uninterruptible, not counted
 * as load), before it arms them, so an event between the arming and
 * schedule() leaves it running: no event is lost. It does not sleep (and
 * returns 1, the caller polls) if a CQ had completions when armed
 * (IB_CQ_REPORT_MISSED_EVENTS), if a CQ cannot be armed (the caller then
 * polls as on a direct CQ), or, with @busy and @gen (the CQ's processing
 * flag and batch generation, or NULL), if another task is processing the
 * CQ or has processed a batch since the caller read @seen, before its last
 * look at its completion: that task may have reaped it and woken the
 * queue before this task was on it. The flag is read first: a task that
 * has let go of it has bumped *@gen before. Returns 0 when woken,
 * -ETIME when the sleep timed out. Process context; a sleep of at most
 * @timeout_us, which bounds the wait where a driver reports no missed
 * events, and lets the caller check its deadline and signals.
 */
int kverbs_cq_sleep(struct ib_cq *const *cqs, unsigned int n,
		    unsigned int timeout_us, const u8 *busy, const u32 *gen,
		    u32 seen)
{
	struct wait_queue_entry wait[KVERBS_SLEEP_CQS];
	ktime_t timeout = ns_to_ktime((u64)timeout_us * NSEC_PER_USEC);
	unsigned int i;
	int ret = 0;

	might_sleep();
	n = min_t(unsigned int, n, KVERBS_SLEEP_CQS);
	for (i = 0; i < n; i++) {
		init_waitqueue_entry(&wait[i], current);
		add_wait_queue(cqs[i]->cq_context, &wait[i]);
	}
	/* A full barrier: *gen is read after the task is on the queues. */
	set_current_state(TASK_IDLE);
	for (i = 0; i < n; i++)
		if (ib_req_notify_cq(cqs[i], IB_CQ_NEXT_COMP |
					     IB_CQ_REPORT_MISSED_EVENTS))
			ret = 1;
	if (busy && smp_load_acquire(busy))
		ret = 1;
	else if (gen && READ_ONCE(*gen) != seen)
		ret = 1;
	/* 0: the timer expired; -EINTR: woken before it. */
	if (!ret && !schedule_hrtimeout_range(&timeout, 2 * NSEC_PER_USEC,
					      HRTIMER_MODE_REL))
		ret = -ETIME;
	__set_current_state(TASK_RUNNING);
	for (i = 0; i < n; i++)
		remove_wait_queue(cqs[i]->cq_context, &wait[i]);
	return ret;
}

/*
 * ib_free_cq(), unless a QP still uses @cq (ib_free_cq() would warn and
 * keep it: a QP whose destruction failed): returns whether it was freed.
 * A kept CQ may still call its handler with its context, which its owner
 * must then keep too.
 */
bool kverbs_free_cq(struct ib_cq *cq)
{
	if (WARN_ON_ONCE(atomic_read(&cq->usecnt)))
		return false;
	ib_free_cq(cq);
	return true;
}

unsigned long kverbs_msleep_interruptible(unsigned int ms)
{
	return msleep_interruptible(ms);
}

void kverbs_msleep(unsigned int ms)
{
	msleep(ms);
}

u64 kverbs_ktime_get_ns(void)
{
	return ktime_get_ns();
}

unsigned int kverbs_num_online_cpus(void)
{
	return num_online_cpus();
}

void kverbs_sock_set_timeouts(struct socket *sock, unsigned int rcv_ms,
			      unsigned int snd_ms)
{
	WRITE_ONCE(sock->sk->sk_rcvtimeo, msecs_to_jiffies(rcv_ms));
	WRITE_ONCE(sock->sk->sk_sndtimeo, msecs_to_jiffies(snd_ms));
}

int kverbs_sock_bind_v4(struct socket *sock, __be32 addr, u16 port)
{
	struct sockaddr_in sin = {
		.sin_family = AF_INET,
		.sin_port = htons(port),
		.sin_addr.s_addr = addr,
	};

	sock_set_reuseaddr(sock->sk);
	return kernel_bind(sock, KVERBS_SOCKADDR(&sin), sizeof(sin));
}

int kverbs_sock_connect_v4(struct socket *sock, __be32 addr, u16 port)
{
	struct sockaddr_in sin = {
		.sin_family = AF_INET,
		.sin_port = htons(port),
		.sin_addr.s_addr = addr,
	};

	return kernel_connect(sock, KVERBS_SOCKADDR(&sin), sizeof(sin), 0);
}

int kverbs_sock_create_tcp(struct socket **res)
{
	return sock_create_kern(&init_net, AF_INET, SOCK_STREAM, IPPROTO_TCP, res);
}

struct rdma_cm_id *kverbs_cm_create_id(int (*handler)(struct rdma_cm_id *,
						      struct rdma_cm_event *),
				       void *context)
{
	return rdma_create_id(&init_net, handler, context, RDMA_PS_TCP, IB_QPT_RC);
}

int kverbs_cm_bind_v4(struct rdma_cm_id *id, __be32 addr, u16 port)
{
	struct sockaddr_in sin = {
		.sin_family = AF_INET,
		.sin_port = htons(port),
		.sin_addr.s_addr = addr,
	};

	return rdma_bind_addr(id, (struct sockaddr *)&sin);
}

int kverbs_cm_resolve_addr_v4(struct rdma_cm_id *id, __be32 addr, u16 port,
			      unsigned long timeout_ms)
{
	struct sockaddr_in sin = {
		.sin_family = AF_INET,
		.sin_port = htons(port),
		.sin_addr.s_addr = addr,
	};

	return rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, timeout_ms);
}

/*
 * On x86-64 mul_u64_u64_div_u64() is arch/x86/include/asm/div64.h's inline
 * "mulq; divq", which raises a divide error (#DE, an oops) when @c is 0 or
 * the quotient does not fit in 64 bits, i.e. when the high half of a * b is
 * not below @c. (The generic lib/math/div64.c version also divides by zero
 * for @c == 0, and returns U64_MAX on overflow.) The caller, mul_div() in
 * rust/kverbs/kverbs.rs, rules out both before it calls this.
 */
u64 kverbs_mul_div(u64 a, u64 b, u64 c)
{
	return mul_u64_u64_div_u64(a, b, c);
}

long kverbs_wait_u64_ge(struct wait_queue_head *wq, const u64 *v, u64 want,
			unsigned int timeout_ms)
{
	return wait_event_interruptible_timeout(*wq, READ_ONCE(*v) >= want,
						msecs_to_jiffies(timeout_ms));
}

long kverbs_wait_u32_ne(struct wait_queue_head *wq, const u32 *v, u32 old,
			unsigned int timeout_ms)
{
	return wait_event_interruptible_timeout(*wq, READ_ONCE(*v) != old,
						msecs_to_jiffies(timeout_ms));
}

int kverbs_ip_mc_join(struct socket **res, __be32 group, int ifindex)
{
	struct ip_mreqn mreq = {
		.imr_multiaddr.s_addr = group,
		.imr_ifindex = ifindex,
	};
	int err;

	err = sock_create_kern(&init_net, AF_INET, SOCK_DGRAM, IPPROTO_UDP, res);
	if (err)
		return err;
	rtnl_lock();
	lock_sock((*res)->sk);
	err = ip_mc_join_group((*res)->sk, &mreq);
	release_sock((*res)->sk);
	rtnl_unlock();
	if (err) {
		sock_release(*res);
		*res = NULL;
	}
	return err;
}

int kverbs_ip6_mc_join(struct socket **res, const u8 *group, int ifindex)
{
	struct in6_addr addr;
	int err;

	memcpy(&addr, group, sizeof(addr));
	err = sock_create_kern(&init_net, AF_INET6, SOCK_DGRAM, IPPROTO_UDP, res);
	if (err)
		return err;
	rtnl_lock();
	lock_sock((*res)->sk);
	err = ipv6_sock_mc_join((*res)->sk, ifindex, &addr);
	release_sock((*res)->sk);
	rtnl_unlock();
	if (err) {
		sock_release(*res);
		*res = NULL;
	}
	return err;
}

/*
 * An IPv6 route: through ipv6_stub in 6.12, where IPv6 may be a module
 * loaded after us; directly in 7.x, where it is built in or absent (and
 * ip6_dst_lookup_flow() then fails with EAFNOSUPPORT).
 */
static struct dst_entry *kverbs_ip6_route(struct net *net, struct flowi6 *fl6)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 0, 0)
	return ip6_dst_lookup_flow(net, NULL, fl6, NULL);
#else
	if (!IS_ENABLED(CONFIG_IPV6) || !ipv6_stub->ipv6_dst_lookup_flow)
		return ERR_PTR(-EAFNOSUPPORT);
	return ipv6_stub->ipv6_dst_lookup_flow(net, NULL, fl6, NULL);
#endif
}

int kverbs_mcast_route(struct ib_device *dev, u32 port, const u8 *sgid, const u8 *mgid)
{
	const struct in6_addr *src = (const void *)sgid, *dst = (const void *)mgid;
	struct net_device *ndev = ib_device_get_netdev(dev, port);
	int err = 0;

	if (!ndev)
		return -ENODEV;
	if (ipv6_addr_v4mapped(src)) {
		struct flowi4 fl = {
			.flowi4_oif = ndev->ifindex,
			.flowi4_proto = IPPROTO_UDP,
			.daddr = dst->s6_addr32[3],
			.saddr = src->s6_addr32[3],
		};
		struct rtable *rt = ip_route_output_key(dev_net(ndev), &fl);

		if (IS_ERR(rt))
			err = PTR_ERR(rt);
		else
			ip_rt_put(rt);
	} else {
		struct flowi6 fl6 = {
			.flowi6_oif = ndev->ifindex,
			.flowi6_proto = IPPROTO_UDP,
			.daddr = *dst,
			.saddr = *src,
		};
		struct dst_entry *d = kverbs_ip6_route(dev_net(ndev), &fl6);

		if (IS_ERR(d)) {
			err = PTR_ERR(d);
		} else {
			err = d->error;
			dst_release(d);
		}
	}
	dev_put(ndev);
	return err;
}
