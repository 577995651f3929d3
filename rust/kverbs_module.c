// SPDX-License-Identifier: GPL-2.0
/*
 * kverbs.ko's init and exit: the workqueue that hands asynchronous events
 * to their sinks (rust/kverbs/event.rs).
 *
 * The events are delivered from a workqueue of kverbs.ko's own rather than
 * the system one so that its exit can wait for every delivery: a run of the
 * work item of an event queue still executes kverbs code (and may drop the
 * last reference to the queue) after the object's drop has seen it end, and
 * nothing else waits for it.  destroy_workqueue() in the exit drains the
 * queue, so no kverbs code runs from it once kverbs.ko is gone; a client's
 * Registration flushes it when dropped (kverbs_flush_events()), so that no
 * delivery for an object dropped before it (in remove() or earlier)
 * outlives the exit of the module that uses the layer.  An object that
 * module never drops (leaked, or dropped only after) still calls its sink,
 * that module's code: see rust/kverbs/layer_ref.rs.
 *
 * Not in kverbs_helpers.c: the symbols of that file are all exported (see
 * kverbs_exports.c), and module_init() and module_exit() define the global
 * init_module and cleanup_module.  What the layer calls here is exported
 * below.
 */

#include <linux/atomic.h>
#include <linux/export.h>
#include <linux/module.h>
#include <linux/workqueue.h>

#include "kverbs_helpers.h"

/* Set from kverbs_init() to kverbs_exit(); every event queue lives between. */
static struct workqueue_struct *events_wq;

struct workqueue_struct *kverbs_events_wq(void)
{
	return events_wq;
}
EXPORT_SYMBOL_GPL(kverbs_events_wq);

void kverbs_flush_events(void)
{
	flush_workqueue(events_wq);
}
EXPORT_SYMBOL_GPL(kverbs_flush_events);

/*
 * A reference to kverbs.ko for each object that leaves the RDMA core a
 * pointer into its code or data (rust/kverbs/layer_ref.rs): an object
 * leaked by a module that uses the layer then keeps kverbs.ko loaded
 * instead of leaving the core a pointer into its freed memory (and so does
 * a QP or SRQ whose destruction failed: it is leaked with its reference).
 * It fails only while kverbs.ko is being unloaded,
 * when no module that uses it is left to make objects.
 */
bool kverbs_layer_get(void)
{
	return try_module_get(THIS_MODULE);
}
EXPORT_SYMBOL_GPL(kverbs_layer_get);

void kverbs_layer_put(void)
{
	module_put(THIS_MODULE);
}
EXPORT_SYMBOL_GPL(kverbs_layer_put);

/*
 * References given back from the events workqueue: by a drop in code that
 * nothing else keeps kverbs.ko loaded for (the connection manager's
 * handler), whose return would otherwise run in kverbs.ko's text after its
 * last reference.  The work is kverbs code too, but the exit's
 * destroy_workqueue() waits for it.
 */
static atomic_t deferred_puts = ATOMIC_INIT(0);

static void deferred_put_work(struct work_struct *work)
{
	while (atomic_add_unless(&deferred_puts, -1, 0))
		module_put(THIS_MODULE);
}

static DECLARE_WORK(deferred_put, deferred_put_work);

void kverbs_layer_put_deferred(void)
{
	atomic_inc(&deferred_puts);
	queue_work(events_wq, &deferred_put);
}
EXPORT_SYMBOL_GPL(kverbs_layer_put_deferred);

static int __init kverbs_init(void)
{
	/*
	 * WQ_UNBOUND: a sink runs a module's code, which may sleep for long
	 * (a QP it drops is drained for up to 5 s) or compute; unbound workers
	 * are not concurrency managed, so a long delivery neither holds up the
	 * per-CPU pools the rest of the kernel shares nor waits for them, and
	 * events are too rare for the CPU that raised them to matter.
	 * Not ordered (max_active 0, the default): the runs of one event queue
	 * never overlap anyway, and an ordered queue would hold every sink up
	 * behind the slowest (and deadlock one that waits for another's event).
	 * No WQ_MEM_RECLAIM: a delivery allocates with GFP_KERNEL and is on no
	 * memory reclaim path, so it needs no rescuer.
	 */
	events_wq = alloc_workqueue("kverbs_events", WQ_UNBOUND, 0);
	if (!events_wq)
		return -ENOMEM;
	return 0;
}

static void __exit kverbs_exit(void)
{
	/* Runs what is still queued and waits for it first. */
	destroy_workqueue(events_wq);
}

module_init(kverbs_init);
module_exit(kverbs_exit);
