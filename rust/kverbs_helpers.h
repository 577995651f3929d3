/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers for what bindgen cannot wrap: macros.  Implemented in
 * kverbs_helpers.c, part of kverbs.ko, which exports them; those of the
 * events workqueue, at the end, in kverbs_module.c.
 */
#ifndef KVERBS_HELPERS_H
#define KVERBS_HELPERS_H

#include <linux/types.h>
#include <linux/spinlock_types.h>

struct attribute;
struct dentry;
struct file_operations;
struct ib_device;
struct ib_sge;
struct kobj_attribute;
struct kobject;
struct scatterlist;
struct wait_queue_head;
struct work_struct;
struct ib_qp;

/* sysfs_attr_init(): gives a dynamically allocated attribute a lockdep key. */
void kverbs_sysfs_attr_init(struct attribute *attr);

/*
 * attr->show = show: a member of its own in 6.12, one of two alternatives
 * (show, show_const) in a union, or with CFI a struct, in 7.x.
 */
void kverbs_kobj_attr_set_show(struct kobj_attribute *attr,
			       ssize_t (*show)(struct kobject *kobj,
					       struct kobj_attribute *attr,
					       char *buf));

/*
 * debugfs_create_file(): a function in 6.12, a _Generic macro over
 * debugfs_create_file_full() and debugfs_create_file_short() in 7.x.
 */
struct dentry *kverbs_debugfs_create_file(const char *name, umode_t mode,
					  struct dentry *parent, void *data,
					  const struct file_operations *fops);

/* init_waitqueue_head(), with one lockdep class for all kverbs queues. */
void kverbs_init_waitqueue_head(struct wait_queue_head *wq);

/* wake_up(). */
void kverbs_wake_up(struct wait_queue_head *wq);

/*
 * spin_lock_init(), spin_lock_irqsave(), spin_unlock_irqrestore(): a lock
 * that may be taken in any context (the kernel crate of 6.12 has none).
 */
void kverbs_spin_lock_init(spinlock_t *lock);
unsigned long kverbs_spin_lock_irqsave(spinlock_t *lock);
void kverbs_spin_unlock_irqrestore(spinlock_t *lock, unsigned long flags);

/*
 * wait_event_interruptible_timeout(*wq, READ_ONCE(*v) == want, ms): > 0 once
 * *v == want, 0 on timeout, -ERESTARTSYS on a signal; with !interruptible,
 * wait_event_timeout(), which a pending signal does not end (a drain in a
 * task being killed would otherwise spin without sleeping).
 */
long kverbs_wait_u32(struct wait_queue_head *wq, const u32 *v, u32 want,
		     unsigned int timeout_ms, bool interruptible);

/*
 * 0 if the IP stack routes a packet from the RoCE v2 source GID sgid to the
 * multicast group mgid (16 bytes each) out of the netdev under port, as
 * rxe will look it up when it sends; else the routing error (-ENETUNREACH,
 * ...), or -ENODEV if the port has no netdev.
 */
int kverbs_mcast_route(struct ib_device *dev, u32 port, const u8 *sgid, const u8 *mgid);

/*
 * Entry i of the n-entry scatterlist sgl (initialised when i is 0) for
 * already DMA-mapped memory.
 */
void kverbs_sg_set_dma(struct scatterlist *sgl, unsigned int n, unsigned int i,
		       u64 dma_addr, unsigned int len);

/*
 * The first count entries of the DMA-mapped scatterlist sgl as SGEs of
 * lkey (sg_dma_address and sg_dma_len are macros); their total length.
 */
u32 kverbs_sg_to_sges(struct scatterlist *sgl, int count, struct ib_sge *sges, u32 lkey);

/* signal_pending(current). */
bool kverbs_signal_pending(void);

/* cond_resched(). */
void kverbs_cond_resched(void);

struct ib_cq;
/*
 * Waits out a softirq poll of @cq (IB_POLL_SOFTIRQ) still running, before
 * ib_free_cq(); see kverbs_helpers.c.
 */
void kverbs_cq_quiesce_softirq(struct ib_cq *cq);

/* The most CQs one kverbs_cq_sleep() arms and sleeps on. */
#define KVERBS_SLEEP_CQS 16

/*
 * Makes @cq, an IB_POLL_DIRECT CQ whose cq_context is a wait queue, wake
 * that wait queue on the completion events kverbs_cq_sleep() asks for; see
 * kverbs_helpers.c.
 */
void kverbs_cq_set_event_handler(struct ib_cq *cq);

/*
 * Sleeps until a completion event of one of the @n CQs (the first
 * KVERBS_SLEEP_CQS of them) or @timeout_us: 1 at once if one had
 * completions when armed (or another task processes the CQ or has since
 * @seen), 0 if woken, -ETIME if timed out. See kverbs_helpers.c.
 */
int kverbs_cq_sleep(struct ib_cq *const *cqs, unsigned int n,
		    unsigned int timeout_us, const u8 *busy, const u32 *gen,
		    u32 seen);

/* ib_free_cq() unless a QP still uses @cq: whether it was freed. */
bool kverbs_free_cq(struct ib_cq *cq);

/* msleep_interruptible(). */
unsigned long kverbs_msleep_interruptible(unsigned int ms);
/* msleep(): not ended by a signal. */
void kverbs_msleep(unsigned int ms);

struct ib_gid_attr;
struct rdma_ah_attr;

/*
 * Fills attr->roce.dmac, the destination MAC of the RoCE address in attr
 * (its GRH's dgid) sent from sgid_attr, as the core does for user AHs
 * (ib_resolve_eth_dmac(), which kernel users do not get): a multicast GID
 * is mapped, a link-local RoCE v1 GID gives its MAC, anything else is
 * resolved by the IP stack (neighbour, at most 1 s). 0 or -errno.
 */
int kverbs_ah_attr_resolve_dmac(struct rdma_ah_attr *attr,
				const struct ib_gid_attr *sgid_attr);

struct dentry;

/*
 * The fault attribute "fail_drain" (probability, times, ...: see
 * Documentation/fault-injection) in debugfs under parent; ERR_PTR on
 * failure, -EOPNOTSUPP without CONFIG_FAULT_INJECTION_DEBUG_FS.
 */
struct dentry *kverbs_fail_drain_create(struct dentry *parent);

/* Whether the drain of a QP is to fail now (should_fail()). */
bool kverbs_should_fail_drain(void);

/* kmemleak_not_leak(): ptr is leaked on purpose. */
void kverbs_kmemleak_not_leak(const void *ptr);

/* attr->roce.dmac. */
void kverbs_ah_attr_dmac(const struct rdma_ah_attr *attr, u8 *out);

/* Copies dev->name (IB_DEVICE_NAME_MAX bytes, terminated) with READ_ONCE:
 * a rename may write it meanwhile. */
void kverbs_copy_dev_name(const struct ib_device *dev, u8 *out);

/* ktime_get_ns(). */
u64 kverbs_ktime_get_ns(void);

/* num_online_cpus(): inline, a read of the atomic __num_online_cpus. */
unsigned int kverbs_num_online_cpus(void);

struct socket;

/* sk_rcvtimeo and sk_sndtimeo of a kernel socket, in milliseconds. */
void kverbs_sock_set_timeouts(struct socket *sock, unsigned int rcv_ms,
			      unsigned int snd_ms);

/* kernel_bind() and kernel_connect() to an IPv4 address (network order). */
int kverbs_sock_bind_v4(struct socket *sock, __be32 addr, u16 port);
int kverbs_sock_connect_v4(struct socket *sock, __be32 addr, u16 port);

/* A TCP socket in the initial network namespace. */
int kverbs_sock_create_tcp(struct socket **res);

struct rdma_cm_id;
struct rdma_cm_event;

/* rdma_create_id() in init_net, for an RC connection (RDMA_PS_TCP). */
struct rdma_cm_id *kverbs_cm_create_id(int (*handler)(struct rdma_cm_id *,
						      struct rdma_cm_event *),
				       void *context);

/* rdma_bind_addr() and rdma_resolve_addr() with IPv4 addresses. */
int kverbs_cm_bind_v4(struct rdma_cm_id *id, __be32 addr, u16 port);
int kverbs_cm_resolve_addr_v4(struct rdma_cm_id *id, __be32 addr, u16 port,
			      unsigned long timeout_ms);

/* cancel_work(): takes a pending work item off its queue; true if it was. */
bool kverbs_cancel_work(struct work_struct *work);

struct delayed_work;
struct request;
struct blk_mq_hw_ctx;
struct blk_mq_tag_set;
struct blk_mq_ops;
struct gendisk;
struct sg_table;
struct module;

/*
 * Block devices of rust/kverbs/blk.  A request's fields, by the inline
 * accessors of blk-mq.h: its position (512-byte sectors), bytes, operation
 * (enum req_op), whether it has REQ_FUA, its physical segments, its tag,
 * its hardware queue's index, its driver data (the PDU after it), and the
 * queue data of its queue.
 */
u64 kverbs_rq_pos(struct request *rq);
u32 kverbs_rq_bytes(struct request *rq);
u32 kverbs_rq_op(struct request *rq);
bool kverbs_rq_fua(struct request *rq);
u16 kverbs_rq_segments(struct request *rq);
int kverbs_rq_tag(struct request *rq);
u32 kverbs_rq_hw_queue(struct request *rq);
void *kverbs_rq_pdu(struct request *rq);
void *kverbs_rq_queuedata(struct request *rq);
void *kverbs_hctx_queuedata(struct blk_mq_hw_ctx *hctx);
/* blk_mq_start_request(). */
void kverbs_rq_start(struct request *rq);
/* blk_mq_end_request() with errno_to_blk_status(@err). */
void kverbs_rq_end(struct request *rq, int err);
void kverbs_rq_requeue(struct request *rq);
bool kverbs_rq_first_dispatch(struct request *rq);
bool kverbs_rq_may_retry(struct request *rq);
/* blk_mq_complete_request_remote(): false if to be completed here. */
bool kverbs_rq_complete_remote(struct request *rq);
/* blk_rq_map_sg() (its 6.12 and 7.x signatures): the entries mapped. */
int kverbs_rq_map_sg(struct request *rq, struct sg_table *t);
/*
 * BLK_STS_OK and BLK_STS_RESOURCE, as queue_rq returns them (casts bindgen
 * cannot evaluate; kverbs_helpers.c checks the values at build time).
 */
#define KVERBS_BLK_STS_OK 0
#define KVERBS_BLK_STS_RESOURCE 9

/*
 * A tag set (kzalloc'd, freed by kverbs_blk_free_tag_set() after
 * blk_mq_free_tag_set()): @nr_hw_queues, @depth, @cmd_size bytes of driver
 * data a request, a timeout of @timeout_ms (0: the default), on @ops.
 * An ERR_PTR on failure.
 */
struct blk_mq_tag_set *kverbs_blk_alloc_tag_set(const struct blk_mq_ops *ops,
						 unsigned int nr_hw_queues,
						 unsigned int depth,
						 unsigned int cmd_size,
						 unsigned int timeout_ms);
void kverbs_blk_free_tag_set(struct blk_mq_tag_set *set);

/* The queue limits and features of a disk (struct queue_limits). */
struct kverbs_blk_limits {
	u32 logical_block_size;
	u32 physical_block_size;
	u32 max_hw_sectors;
	u32 max_segment_size;
	u32 dma_alignment;
	/* Write Zeroes requests of at most this many sectors (0: none). */
	u32 max_write_zeroes_sectors;
	u16 max_segments;
	u64 virt_boundary_mask;
	bool write_cache;
	bool fua;
	bool rotational;
	/* No partition table is read, and no partition made. */
	bool no_partitions;
};

/*
 * A disk of @set with @lim, @queuedata and the name @name, not yet added:
 * its block_device_operations are its own (owner @owner, which an open of
 * the disk pins; free_disk, which frees them with the disk and gives back
 * the reference to kverbs.ko this takes).  An ERR_PTR on failure.
 */
struct gendisk *kverbs_blk_alloc_disk(struct blk_mq_tag_set *set,
				      const struct kverbs_blk_limits *lim,
				      void *queuedata, struct module *owner,
				      const char *name);
/* set_capacity() and device_add_disk(). */
int kverbs_blk_add_disk(struct gendisk *disk, u64 sectors);
/* put_disk() of a disk never added, and its operations. */
void kverbs_blk_put_unadded(struct gendisk *disk);
/* del_gendisk() and put_disk() of an added disk. */
void kverbs_blk_del_disk(struct gendisk *disk);
/* del_gendisk() alone: the caller keeps its reference. */
void kverbs_blk_delete(struct gendisk *disk);
/* set_capacity_and_notify(). */
void kverbs_blk_set_capacity(struct gendisk *disk, u64 sectors);

/* sg_alloc_table(), GFP_ATOMIC if @atomic, else GFP_KERNEL. */
int kverbs_sg_alloc_table(struct sg_table *t, unsigned int nents, bool atomic);
/* sg_next(). */
struct scatterlist *kverbs_sg_next(struct scatterlist *sg);

/*
 * The delayed work items of rust/kverbs/delayed.rs: INIT_DELAYED_WORK() at
 * this one site (one lockdep class, its key in kverbs.ko), and
 * queue_delayed_work() on kverbs.ko's events workqueue after @ms
 * milliseconds (false if pending already, or disabled).
 */
void kverbs_init_delayed_work(struct delayed_work *dw,
			      void (*fn)(struct work_struct *work));
bool kverbs_queue_delayed_work(struct delayed_work *dw, unsigned int ms);
/* disable_delayed_work_sync(): see kernel/workqueue.c. */
bool kverbs_disable_delayed_work_sync(struct delayed_work *dw);

/* current, as an identity. */
void *kverbs_current(void);

/*
 * rcu_read_lock(), rcu_read_unlock() and synchronize_rcu(), for
 * rust/kverbs/io.rs: a capsule queue's submissions and completion
 * callbacks are read-side critical sections, its shutdown waits for them.
 */
void kverbs_rcu_read_lock(void);
void kverbs_rcu_read_unlock(void);
void kverbs_synchronize_rcu(void);

/*
 * A reference to a module that has finished its init and is not going
 * (try_module_get() also succeeds during init, and a module whose init
 * fails is freed whatever its count); and its put.  Functions, also where
 * CONFIG_MODULE_UNLOAD makes them static inline.
 */
bool kverbs_module_get_live(struct module *mod);
void kverbs_module_put(struct module *mod);

/*
 * Waits up to timeout_ms (uninterruptibly) for the QP's
 * IB_EVENT_QP_LAST_WQE_REACHED (qp->srq_completion, completed by the core's
 * QP event handler); true if it came.
 */
bool kverbs_qp_wait_last_wqe(struct ib_qp *qp, unsigned int timeout_ms);

/* Like kverbs_wait_u32(), until READ_ONCE(*v) != old. */
/* a * b / c with a 128-bit product (mul_u64_u64_div_u64). */
u64 kverbs_mul_div(u64 a, u64 b, u64 c);

/* Wait (interruptibly, at most timeout_ms) until *v >= want. */
long kverbs_wait_u64_ge(struct wait_queue_head *wq, const u64 *v, u64 want,
			unsigned int timeout_ms);
long kverbs_wait_u32_ne(struct wait_queue_head *wq, const u32 *v, u32 old,
			unsigned int timeout_ms);

/*
 * Joins the IPv4 group on the netdev ifindex through a new kernel UDP
 * socket (under RTNL and the socket lock, as setsockopt does); releasing
 * the socket leaves the group.
 */
int kverbs_ip_mc_join(struct socket **res, __be32 group, int ifindex);

/* The same for an IPv6 group (16 bytes, network order). */
int kverbs_ip6_mc_join(struct socket **res, const u8 *group, int ifindex);

struct workqueue_struct;

/*
 * In kverbs_module.c: the workqueue of event deliveries, allocated in
 * kverbs.ko's init and destroyed (drained) in its exit.
 */
struct workqueue_struct *kverbs_events_wq(void);

/* flush_workqueue() of that workqueue. */
void kverbs_flush_events(void);

/*
 * In kverbs_module.c: something of the layer that calls a module's code --
 * an event queue, whose sink is that module's, a client registration, a
 * debugfs file, a sysfs attribute (rust/kverbs/owned.rs) -- on kverbs.ko's
 * list from its making (kverbs_owned_add()) until it is given back
 * (kverbs_owned_del(), which may be called again).  @code holds addresses
 * of that code (or data) that tell the modules it belongs to.  When a
 * module goes (MODULE_STATE_GOING: its exit has run, its memory is not yet
 * freed), each entry with an address within it is taken off the list,
 * @taken set and @get (if any) called, under the list's spinlock; then
 * @orphan, in process context with no lock held, which stops every call of
 * that code, waits for those in progress, and gives back what @get took.
 * Then the events workqueue is flushed.
 */
struct kverbs_owned {
	struct list_head list;
	bool taken;
	unsigned long code[2];
	void (*get)(struct kverbs_owned *o);
	void (*orphan)(struct kverbs_owned *o);
};

/* Fills @o in, off any list, with the addresses @code and @code2. */
void kverbs_owned_init(struct kverbs_owned *o, unsigned long code,
		       unsigned long code2, void (*get)(struct kverbs_owned *o),
		       void (*orphan)(struct kverbs_owned *o));
void kverbs_owned_add(struct kverbs_owned *o);
/*
 * The same at the list's head: orphaned before what came earlier (a
 * capsule queue, whose orphan ends the requests a disk's orphan waits
 * for).
 */
void kverbs_owned_add_first(struct kverbs_owned *o);
/* Takes @o off the list: whether the notifier had taken it already. */
bool kverbs_owned_del(struct kverbs_owned *o);
/*
 * Waits until *@done is non-zero: set by an @orphan, which then calls
 * kverbs_owned_done() (a wait queue of kverbs.ko's, not of the entry,
 * which may go as soon as *@done is seen).
 */
void kverbs_owned_wait(const u32 *done);
void kverbs_owned_done(void);
/* Around a run of an event queue's work item (kverbs_module.c). */
void kverbs_run_begin(void);
void kverbs_run_end(void);

/* try_module_get() and module_put() of kverbs.ko itself. */
bool kverbs_layer_get(void);
void kverbs_layer_put(void);
/* module_put() of kverbs.ko from its events workqueue. */
void kverbs_layer_put_deferred(void);

#endif
