// SPDX-License-Identifier: GPL-2.0

//! The queue of an object's events on their way to its sink, and the
//! runs that deliver them (see [`crate::event`]).

use super::{seal, Event, EventRing, EventSink, QUEUED_EVENTS};
use crate::{bindings, irq_lock::IrqLock, owned::Owned, task_mark::TaskMarks};
use core::{
    ptr::NonNull,
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
};
use kernel::{
    impl_has_work, new_work,
    prelude::*,
    sync::{Arc, ArcBorrow},
    types::Opaque,
    workqueue::{self, Work, WorkItem},
};

/// What an [`EventQueue`] hands its events to: a sink trait object and
/// the events it takes ([`EventSink`] and [`Event`]; the connection
/// manager's have their own).
pub(crate) trait Sink: Send + Sync {
    /// The events.
    type Ev: Copy + Send;
    /// Hands `ev` to the sink.
    fn deliver(&self, ev: &Self::Ev);
    /// Tells the sink that `n` events were lost: they came faster than it
    /// took them, beyond [`QUEUED_EVENTS`] (or could not be copied out).
    fn lost(&self, n: u64);
    /// Addresses in the code of the modules the sink goes with (see
    /// [`EventSink::code_address`]).
    fn code(&self) -> [usize; 2];
}

impl Sink for dyn EventSink {
    type Ev = Event;
    fn deliver(&self, ev: &Event) {
        self.event(ev);
    }
    fn lost(&self, n: u64) {
        pr_warn!("{} asynchronous events lost: their sink was too slow\n", n);
    }
    fn code(&self) -> [usize; 2] {
        self.code_address(seal::Seal(()))
    }
}

/// The tasks delivering events (`EventQueue::deliver`: a run on the
/// workqueue, or an object's drop delivering what is left). A run on the
/// workqueue delivers only once marked (with all 128 marks taken, it waits
/// for one), so that a sink's drops and waits always know they are in
/// one; an object's drop beyond 128 goes unmarked (its sink's drops
/// then wait for other tasks' runs, and its `wait_for_deliveries` flushes,
/// neither of which waits for itself).
static DELIVERING: TaskMarks<128> = TaskMarks::new();

/// Whether the current task is delivering events: inside an
/// [`EventSink::event`] call, or between two of them.
pub fn in_delivery() -> bool {
    DELIVERING.has_current()
}

/// Marks the current task as delivering while the mark lives: the module
/// notifier's revocations (`crate::owned`), in which a module's code
/// (a client's `remove`, a sink's drop) may drop objects with sinks whose
/// runs are in that module's sinks and wait for the revocation (a sink
/// that drops a `Registration` the notifier is unregistering). Their
/// drops then wait for no run, as from a sink; the notifier's flush after
/// the revocations waits for the runs. With all marks taken it waits for
/// one, as a run does: a revocation never goes unmarked.
pub(crate) fn mark_delivering() -> crate::task_mark::Mark {
    DELIVERING.enter_waiting(|| false)
}

/// Marks the current task as delivering while the mark lives, if a mark
/// is free: a client's `add` and `remove`, which the core calls holding a
/// use of the client that unregistering it waits for. An object dropped
/// there waits for no run and delivers nothing more to its sink: a sink
/// called there, or in a run the drop waited for, that dropped the
/// client's `Registration` would wait for that use, that is for itself.
/// The runs are waited for by the `Registration`'s drop (or the module
/// notifier's flush).
pub(crate) fn try_mark_delivering() -> crate::task_mark::Mark {
    DELIVERING.enter()
}

/// The events of one object (QP, SRQ, device registration, the IDs of a
/// connection manager queue) on their way to its sink: filled by the
/// object's handler in any context, emptied by a work item that calls the
/// sink in process context.
///
/// # Invariants
///
/// `work` is queued (on kverbs.ko's workqueue, `kverbs_events_wq`) only
/// with a reference to this `Arc` that its run (or [`EventQueue::release`],
/// which cancels it) gives back. `running` is 1 while a run delivers;
/// `users` counts the references to the sink taken out of `sink` and not
/// yet dropped (each counted under `sink`'s lock as it is taken); `idle`
/// is woken when either goes down. Once `closed`, no run starts
/// delivering, and one in progress stops after the call it is in. `sink`
/// holds the sink until [`EventQueue::release`] or the module notifier
/// ([`owned_orphan`]) takes it, when no run is to call it any more (if
/// `release` is called from a delivery, until the queue goes). `owned` is
/// on kverbs.ko's list of what calls a module's code ([`Owned`]) from
/// [`EventQueue::new_raw`] until `release` or the notifier takes it off:
/// while it is, `new_raw`'s reference is held.
#[pin_data]
pub(crate) struct EventQueue<S: ?Sized + Sink + 'static = dyn EventSink> {
    #[pin]
    work: Work<EventQueue<S>>,
    #[pin]
    ring: EventRing<QUEUED_EVENTS, S::Ev>,
    #[pin]
    idle: Opaque<bindings::wait_queue_head>,
    running: AtomicU32,
    users: AtomicU32,
    closed: AtomicBool,
    #[pin]
    sink: IrqLock<Option<Arc<S>>>,
    owned: Owned,
}

// SAFETY: The wait queue is a kernel object made for use from any thread;
// the rest is `Send + Sync` (atomics, the ring's and the sink's locks; the
// sink and its events are `Send`, and the sink `Sync`).
unsafe impl<S: ?Sized + Sink> Send for EventQueue<S> {}
// SAFETY: As above.
unsafe impl<S: ?Sized + Sink> Sync for EventQueue<S> {}

impl_has_work! {
    impl{S: ?Sized + Sink + 'static} HasWork<Self> for EventQueue<S> { self.work }
}

impl<S: ?Sized + Sink + 'static> WorkItem for EventQueue<S> {
    type Pointer = Arc<EventQueue<S>>;

    fn run(this: Arc<EventQueue<S>>) {
        // No delivery unmarked: a sink called unmarked that dropped its own
        // object would wait in `release` for this very run. With every mark
        // taken, the run waits for one -- in this run, not queued again: a
        // flush (`wait_for_deliveries`) waits for this run, not for one
        // queued after it began.
        let mark = DELIVERING.enter_waiting(|| this.closed.load(Ordering::SeqCst));
        if !mark.held() {
            // Closed while waiting: nothing is to be delivered.
            return;
        }
        // A work item never runs twice at once: one runner. `running` and
        // `closed` are stored then loaded here and the other way round in
        // `release`: sequentially consistent, so that one of the two sees
        // the other's store. Counted for the module notifier, from before
        // `closed` is looked at: a run in a going module's sink makes it
        // flush.
        // SAFETY: No precondition.
        unsafe { bindings::kverbs_run_begin() };
        this.running.store(1, Ordering::SeqCst);
        if !this.closed.load(Ordering::SeqCst) {
            this.deliver(true);
        }
        this.running.store(0, Ordering::SeqCst);
        // SAFETY: After `kverbs_run_begin` above.
        unsafe { bindings::kverbs_run_end() };
        // SAFETY: The wait queue is initialised and lives with `this`.
        unsafe { bindings::kverbs_wake_up(this.idle.get()) };
    }
}

impl<S: ?Sized + Sink + 'static> EventQueue<S> {
    /// A queue for `sink`, as a raw pointer to be an object's context:
    /// [`EventQueue::release`] takes it back.
    pub(crate) fn new_raw(sink: Arc<S>) -> Result<NonNull<EventQueue<S>>> {
        let code = sink.code();
        let q = Arc::pin_init(
            try_pin_init!(EventQueue {
                work <- new_work!("kverbs::EventQueue::work"),
                ring <- EventRing::new(),
                idle <- Opaque::ffi_init(|slot: *mut bindings::wait_queue_head| {
                    // SAFETY: `slot` is valid for writes and pinned.
                    unsafe { bindings::kverbs_init_waitqueue_head(slot) }
                }),
                running: AtomicU32::new(0),
                users: AtomicU32::new(0),
                closed: AtomicBool::new(false),
                sink <- IrqLock::new(Some(sink)),
                owned: Owned::new(),
            }? Error),
            GFP_KERNEL,
        )?;
        // SAFETY: `owned` is pinned with the queue, whose `new_raw`
        // reference is held until `release` has taken it off the list
        // again (type invariant); added once, after `init`.
        unsafe {
            q.owned
                .init(code[0], code[1], Some(owned_get::<S>), owned_orphan::<S>);
            q.owned.add();
        }
        // `into_raw` never gives a null pointer.
        NonNull::new(Arc::into_raw(q).cast_mut()).ok_or(ENOMEM)
    }

    /// Takes a reference to the sink out, counted in `users` until
    /// [`EventQueue::put_sink`]; with `take`, the queue's own (it has none
    /// after).
    fn get_sink(&self, take: bool) -> Option<Arc<S>> {
        self.sink.with(|s| {
            let sink = if take { s.take() } else { s.clone() };
            if sink.is_some() {
                self.users.fetch_add(1, Ordering::SeqCst);
            }
            sink
        })
    }

    /// Drops a reference [`EventQueue::get_sink`] took out.
    fn put_sink(&self, sink: Arc<S>) {
        drop(sink);
        self.users.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: The wait queue is initialised and lives with `self`.
        unsafe { bindings::kverbs_wake_up(self.idle.get()) };
    }

    /// Hands the events queued so far to the sink, one at a time; if
    /// `until_closed`, stops when the queue is closed (by a sink that
    /// dropped the object). The caller has marked its task as delivering
    /// if it could.
    fn deliver(&self, until_closed: bool) {
        // The calls may sleep: they are made with a reference of their own,
        // not under the lock.
        let Some(sink) = self.get_sink(false) else {
            return;
        };
        let mut events = KVec::new();
        let lost = self.ring.take_new(&mut events);
        if lost > 0 {
            sink.lost(lost);
        }
        for (_, ev) in events.iter() {
            if until_closed && self.closed.load(Ordering::SeqCst) {
                break;
            }
            sink.deliver(ev);
        }
        self.put_sink(sink);
    }

    /// Records `ev` and schedules its delivery: from any context.
    ///
    /// # Safety
    ///
    /// kverbs.ko's exit must not have run: the caller is the handler of an
    /// object that holds a [`LayerRef`] until its drop has destroyed it.
    pub(crate) unsafe fn push(this: ArcBorrow<'_, Self>, ev: S::Ev) {
        this.ring.push(crate::now_ns(), ev);
        // SAFETY: `kverbs_events_wq` is the workqueue kverbs.ko allocates
        // in its init (which fails without it) and destroys in its exit
        // (`destroy_workqueue`, which drains what is still queued first).
        // By the caller's guarantee, this is called from the handler of an
        // object with a queue (a QP,
        // an SRQ, a device registration, a connection manager ID), which
        // holds a `LayerRef` to kverbs.ko from before its handler is
        // installed until after its drop has destroyed it (`ib_destroy_qp`,
        // `ib_destroy_srq_user`, `ib_unregister_event_handler`,
        // `rdma_destroy_id`), and for ever if that failed (the object is
        // then leaked with its reference): so the exit has not run and the
        // workqueue is valid for this call.
        let wq = unsafe { workqueue::Queue::from_raw(bindings::kverbs_events_wq().cast()) };
        // A reference for the work item; given back (and not the last one:
        // the object holds its own) if it is queued already, in which case
        // that run delivers this event too.
        let _ = wq.enqueue(Arc::from(this));
    }

    /// Gives back the reference of [`EventQueue::new_raw`] once the object
    /// can raise no more events, and closes the queue: no run starts
    /// delivering after this. Called from a delivery -- the sink's own (a
    /// sink that dropped its object) or another queue's (a sink that
    /// dropped another object) -- it waits for nothing, and the rest is not
    /// delivered: a run of this queue in progress on another task stops
    /// after the call it is in, and the sink goes with the last reference
    /// to the queue. Two sinks that each drop the other's object would
    /// otherwise wait for each other for ever. Otherwise a pending run is
    /// cancelled, one in progress waited for, what is left delivered here,
    /// and the queue's reference to the sink dropped. No `flush_work`: a
    /// sink that drops another object from its delivery would nest two runs
    /// of this work item's lockdep class.
    ///
    /// # Safety
    ///
    /// `q` must come from [`EventQueue::new_raw`], be given back once, and
    /// no handler may use it any more.
    pub(crate) unsafe fn release(q: NonNull<EventQueue<S>>) {
        // SAFETY: By the caller's guarantee, this is `new_raw`'s reference.
        let q = unsafe { Arc::from_raw(q.as_ptr()) };
        q.closed.store(true, Ordering::SeqCst);
        // SAFETY: `q.work` is a live, initialised work item.
        let work = unsafe { Work::raw_get(core::ptr::addr_of!(q.work)) };
        // SAFETY: As above. A pending run is taken off its queue.
        if unsafe { bindings::kverbs_cancel_work(work.cast()) } {
            // SAFETY: The reference the cancelled run would have given back
            // (type invariant).
            drop(unsafe { Arc::from_raw(core::ptr::from_ref::<EventQueue<S>>(&q)) });
        }
        if in_delivery() {
            // The sink's last call may still be in progress (its own, or
            // another run's): the queue's reference to it goes now,
            // counted, and the last one with that call.
            q.drop_sink();
            return;
        }
        // A run that starts now sees `closed` and delivers nothing; one in
        // progress is waited for.
        while q.running.load(Ordering::SeqCst) != 0 {
            // SAFETY: The wait queue lives with `q`; `running` is read with
            // `READ_ONCE`. Not interruptible: the drop must wait.
            unsafe { bindings::kverbs_wait_u32(q.idle.get(), q.running.as_ptr(), 0, 100, false) };
        }
        let _mark = DELIVERING.enter();
        q.deliver(false);
        // No run calls the sink any more: its reference is dropped here, by
        // the object's drop, not with the queue by a run that may still
        // hold a reference to it and end later, when nothing waits for it.
        q.drop_sink();
    }

    /// Drops the queue's reference to its sink, counted: the notifier of
    /// the sink's module's going waits for the drop. Then takes the queue
    /// off kverbs.ko's list: not before, so that the notifier finds every
    /// queue that may still call the sink (it then waits for `users`).
    fn drop_sink(&self) {
        self.put_own_sink();
        // SAFETY: `new_raw` initialised the entry (type invariant).
        unsafe { self.owned.remove() };
    }

    /// Takes the queue's own reference to its sink out and drops it,
    /// counted in `users`.
    fn put_own_sink(&self) {
        if let Some(sink) = self.get_sink(true) {
            self.put_sink(sink);
        }
    }

    /// The queue of an entry of kverbs.ko's list.
    ///
    /// # Safety
    ///
    /// `o` must be the entry of the `owned` field of a live `EventQueue<S>`.
    unsafe fn of_owned(o: *mut bindings::kverbs_owned) -> *const EventQueue<S> {
        // SAFETY: By the caller's guarantee.
        let q: &EventQueue<S> =
            unsafe { Owned::owner(o, core::mem::offset_of!(EventQueue<S>, owned)) };
        core::ptr::from_ref(q)
    }
}

/// The `get` of a queue on kverbs.ko's list: a reference for
/// [`owned_orphan`].
///
/// # Safety
///
/// Called by kverbs.ko's module notifier with the `owned` field of a queue
/// it has just taken off the list, under the list's lock.
unsafe extern "C" fn owned_get<S: ?Sized + Sink + 'static>(o: *mut bindings::kverbs_owned) {
    // SAFETY: A queue on the list holds `new_raw`'s reference (type
    // invariant: `release` takes it off under the list's lock first, and
    // the caller holds that lock), so it is live and the pointer is
    // `into_raw`'s.
    let q = unsafe { ArcBorrow::from_raw(EventQueue::<S>::of_owned(o)) };
    // The reference goes to `owned_orphan`, which gives it back.
    let _ = Arc::into_raw(Arc::from(q));
}

/// The `orphan` of a queue on kverbs.ko's list, whose sink's module is
/// going: closes the queue and drops its sink once no call of it is in
/// progress and no reference taken out of it is left. The sink's drop is
/// the module's code, which is still there; dropping it may drop the
/// object itself (a cycle), which `release`s the queue, here.
///
/// # Safety
///
/// Called by kverbs.ko's module notifier, in process context with no lock
/// held, once for each [`owned_get`], with the same `o`.
unsafe extern "C" fn owned_orphan<S: ?Sized + Sink + 'static>(o: *mut bindings::kverbs_owned) {
    // SAFETY: The reference `owned_get` took.
    let q = unsafe { Arc::from_raw(EventQueue::<S>::of_owned(o)) };
    let _mark = mark_delivering();
    // No run starts delivering; one in progress stops after its call.
    q.closed.store(true, Ordering::SeqCst);
    q.put_own_sink();
    // A run, or an object's `release` delivering what is left on another
    // task, may still hold a reference taken out before: wait until it is
    // dropped (the last one runs the sink's drop there).
    while q.users.load(Ordering::SeqCst) != 0 {
        // SAFETY: The wait queue lives with `q`; `users` is read with
        // `READ_ONCE`. Not interruptible: the module's memory goes next.
        unsafe { bindings::kverbs_wait_u32(q.idle.get(), q.users.as_ptr(), 0, 100, false) };
    }
}
