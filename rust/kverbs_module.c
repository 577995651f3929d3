// SPDX-License-Identifier: GPL-2.0
/*
 * kverbs.ko's init and exit: the workqueue that hands asynchronous events
 * to their sinks (rust/kverbs/event.rs), and the module notifier that
 * stops the sinks of a module that goes.
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
 * module never drops (leaked, or dropped only after) would still call its
 * sink, that module's code: the module notifier below stops it when the
 * module goes.
 *
 * Not in kverbs_helpers.c: the symbols of that file are all exported (see
 * kverbs_exports.c), and module_init() and module_exit() define the global
 * init_module and cleanup_module.  What the layer calls here is exported
 * below.
 */

#include <linux/atomic.h>
#include <linux/export.h>
#include <linux/list.h>
#include <linux/module.h>
#include <linux/notifier.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
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

/*
 * What of the layer calls a module's code (struct kverbs_owned, in
 * kverbs_helpers.h; rust/kverbs/owned.rs): an event queue whose sink is
 * that module's, from the queue's making until its object gives it back; a
 * client registration, debugfs file or sysfs attribute, whose callbacks
 * are the module's, until it is dropped.  An object the module leaks
 * (mem::forget, an Arc cycle through its sink) never gives it back, and
 * the layer, which it keeps loaded (rust/kverbs/layer_ref.rs), would call
 * the module's code after the module is gone: so when a module goes, its
 * entries are orphaned -- the sinks dropped, with no call of them left in
 * progress; the clients unregistered; the files removed -- and the
 * deliveries still running (of queues already given back, whose last run
 * may still be in the sink or drop it) are waited for.
 * MODULE_STATE_GOING comes after the module's exit (or its failed init)
 * and before its memory is freed, without module_mutex held.
 */
static DEFINE_SPINLOCK(owned_lock);
static LIST_HEAD(owned);

void kverbs_owned_init(struct kverbs_owned *o, unsigned long code,
		       unsigned long code2, void (*get)(struct kverbs_owned *o),
		       void (*orphan)(struct kverbs_owned *o))
{
	INIT_LIST_HEAD(&o->list);
	o->taken = false;
	o->code[0] = code;
	o->code[1] = code2;
	o->get = get;
	o->orphan = orphan;
}
EXPORT_SYMBOL_GPL(kverbs_owned_init);

static void owned_add(struct kverbs_owned *o, bool first)
{
	unsigned long flags;

	spin_lock_irqsave(&owned_lock, flags);
	if (first)
		list_add(&o->list, &owned);
	else
		list_add_tail(&o->list, &owned);
	spin_unlock_irqrestore(&owned_lock, flags);
}

void kverbs_owned_add(struct kverbs_owned *o)
{
	owned_add(o, false);
}
EXPORT_SYMBOL_GPL(kverbs_owned_add);

void kverbs_owned_add_first(struct kverbs_owned *o)
{
	owned_add(o, true);
}
EXPORT_SYMBOL_GPL(kverbs_owned_add_first);

bool kverbs_owned_del(struct kverbs_owned *o)
{
	unsigned long flags;
	bool taken;

	spin_lock_irqsave(&owned_lock, flags);
	list_del_init(&o->list);
	taken = o->taken;
	spin_unlock_irqrestore(&owned_lock, flags);
	return taken;
}
EXPORT_SYMBOL_GPL(kverbs_owned_del);

/*
 * The drops of what the notifier took wait here until it is done with
 * them (a client registration: until unregistered).
 */
static DECLARE_WAIT_QUEUE_HEAD(owned_wq);

void kverbs_owned_wait(const u32 *done)
{
	wait_event(owned_wq, READ_ONCE(*done));
}
EXPORT_SYMBOL_GPL(kverbs_owned_wait);

void kverbs_owned_done(void)
{
	wake_up_all(&owned_wq);
}
EXPORT_SYMBOL_GPL(kverbs_owned_done);

/* Takes the first entry with code within @mod off the list, with @get. */
static struct kverbs_owned *take_owned(struct module *mod)
{
	struct kverbs_owned *o, *found = NULL;
	unsigned long flags;

	spin_lock_irqsave(&owned_lock, flags);
	list_for_each_entry(o, &owned, list) {
		if (within_module(o->code[0], mod) ||
		    within_module(o->code[1], mod)) {
			list_del_init(&o->list);
			o->taken = true;
			if (o->get)
				o->get(o);
			found = o;
			break;
		}
	}
	spin_unlock_irqrestore(&owned_lock, flags);
	return found;
}

/*
 * The runs of event queues delivering (rust/kverbs/event.rs), counted from
 * before a run looks whether its queue is closed until its delivery ended:
 * one that delivers to a going module's sink (its object dropped from
 * that sink, or by the module's exit while it ran) is counted while it
 * is in the sink, and the notifier then flushes.
 */
static atomic_t runs = ATOMIC_INIT(0);

void kverbs_run_begin(void)
{
	atomic_inc(&runs);
	smp_mb__after_atomic();
}
EXPORT_SYMBOL_GPL(kverbs_run_begin);

void kverbs_run_end(void)
{
	atomic_dec(&runs);
}
EXPORT_SYMBOL_GPL(kverbs_run_end);

static int kverbs_module_notify(struct notifier_block *nb, unsigned long state,
				void *data)
{
	struct module *mod = data;
	struct kverbs_owned *o;
	bool found = false;

	if (state != MODULE_STATE_GOING)
		return NOTIFY_DONE;
	/*
	 * The flush waits for every delivery in progress, of any module
	 * (sinks must not block without a bound: rust/kverbs/event.rs): when
	 * @mod had entries or a run is delivering (maybe in a sink of @mod
	 * whose object is gone), not whenever a module goes.  Until no entry
	 * of @mod is left after a flush: a run of its sink may have made
	 * another.
	 */
	for (;;) {
		while ((o = take_owned(mod))) {
			o->orphan(o);
			found = true;
		}
		smp_mb();
		if (!found && !atomic_read(&runs))
			break;
		flush_workqueue(events_wq);
		o = take_owned(mod);
		if (!o)
			break;
		o->orphan(o);
	}
	return NOTIFY_OK;
}

static struct notifier_block kverbs_module_nb = {
	.notifier_call = kverbs_module_notify,
};

static int __init kverbs_init(void)
{
	int ret;

	/*
	 * WQ_UNBOUND: a sink runs a module's code, which may sleep for long
	 * (a QP it drops is drained for up to 5 s) or compute; unbound workers
	 * are not concurrency managed, so a long delivery neither holds up the
	 * per-CPU pools the rest of the kernel shares nor waits for them, and
	 * events are too rare for the CPU that raised them to matter.
	 * Not ordered (max_active 0, the default): the runs of one event queue
	 * never overlap anyway, and an ordered queue would hold every sink up
	 * behind the slowest (and deadlock one that waits for another's event).
	 * WQ_MEM_RECLAIM: a capsule queue's shutdown runs here (a block
	 * driver's error recovery, kverbs::io) and ends the block requests it
	 * carries, writeback's among them: under memory pressure it must not
	 * wait for a new worker (the rescuer runs it), as the NVMe hosts'
	 * nvme_wq has the flag for theirs.
	 */
	events_wq = alloc_workqueue("kverbs_events", WQ_UNBOUND | WQ_MEM_RECLAIM, 0);
	if (!events_wq)
		return -ENOMEM;
	ret = register_module_notifier(&kverbs_module_nb);
	if (ret)
		destroy_workqueue(events_wq);
	return ret;
}

static void __exit kverbs_exit(void)
{
	/*
	 * The list is empty: each entry's code is a user module's (no type of
	 * kverbs.ko's own makes one), whose going took it off -- and every
	 * user module has gone before us, as it uses our symbols.
	 */
	unregister_module_notifier(&kverbs_module_nb);
	/* Runs what is still queued and waits for it first. */
	destroy_workqueue(events_wq);
}

module_init(kverbs_init);
module_exit(kverbs_exit);
