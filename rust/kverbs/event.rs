// SPDX-License-Identifier: GPL-2.0

//! Asynchronous events: of a device and its ports (`ib_register_event_handler`),
//! and of the QPs and SRQs created with an [`EventSink`]
//! (`ib_qp_init_attr.event_handler`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! The RDMA core calls a QP's or SRQ's handler from the driver's own
//! processing -- softirq, a tasklet, the very task that would have to end
//! for the QP to be destroyed -- and a device's handler under a lock that
//! unregistering it takes. No code of a sink runs there: kverbs' handlers
//! copy the event into a bounded ring ([`EventRing`], interrupt safe, no
//! allocation) and queue a work item that hands the events to the sink in
//! process context, one at a time and in order. So a sink may sleep, take
//! mutexes, and drop the QP, SRQ or [`DeviceEvents`] the event is about
//! (not a client `Registration`: its drop waits for the deliveries).
//!
//! The work items run on a workqueue of kverbs.ko's own, `kverbs_events`
//! (unbound), allocated in its init: its exit destroys it, which waits for
//! the runs still finishing, so none is left in kverbs' code once the
//! module is gone.

use crate::{
    bindings, device::Device, device::PortNum, irq_lock::IrqLock, layer_ref::LayerRef,
    task_mark::TaskMarks, ARef,
};
use core::{
    ffi::c_void,
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

/// What an event is about (the `element` of `struct ib_event`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Element {
    /// The whole device (`IB_EVENT_DEVICE_FATAL`).
    Device,
    /// A port.
    Port(PortNum),
    /// A QP, by number.
    Qp(u32),
    /// A CQ.
    Cq,
    /// A shared receive queue.
    Srq,
    /// A work queue.
    Wq,
}

/// The kinds of events (`enum ib_event_type`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EventKind {
    /// `IB_EVENT_CQ_ERR`.
    CqErr,
    /// `IB_EVENT_QP_FATAL`.
    QpFatal,
    /// `IB_EVENT_QP_REQ_ERR`.
    QpReqErr,
    /// `IB_EVENT_QP_ACCESS_ERR`.
    QpAccessErr,
    /// `IB_EVENT_COMM_EST`.
    CommEst,
    /// `IB_EVENT_SQ_DRAINED`.
    SqDrained,
    /// `IB_EVENT_PATH_MIG`.
    PathMig,
    /// `IB_EVENT_PATH_MIG_ERR`.
    PathMigErr,
    /// `IB_EVENT_DEVICE_FATAL`.
    DeviceFatal,
    /// `IB_EVENT_PORT_ACTIVE`.
    PortActive,
    /// `IB_EVENT_PORT_ERR`.
    PortErr,
    /// `IB_EVENT_SRQ_ERR`.
    SrqErr,
    /// `IB_EVENT_SRQ_LIMIT_REACHED`.
    SrqLimitReached,
    /// `IB_EVENT_QP_LAST_WQE_REACHED`.
    QpLastWqeReached,
    /// `IB_EVENT_GID_CHANGE`.
    GidChange,
    /// Another event (LID, P_Key or SM change, client reregister, ...).
    Other(u32),
}

/// An asynchronous event (`struct ib_event`, copied).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Event {
    /// The event (`enum ib_event_type`, e.g. `IB_EVENT_PORT_ACTIVE`).
    pub event: u32,
    /// What it is about.
    pub element: Element,
}

impl Event {
    /// Copies the event `ev`; the number of its QP only if `qp_live`.
    ///
    /// # Safety
    ///
    /// `ev` must point to a valid `struct ib_event`; if `qp_live`, its QP,
    /// if it is a QP event, must be live.
    unsafe fn from_raw(ev: *const bindings::ib_event, qp_live: bool) -> Self {
        // SAFETY: The caller guarantees `ev` is valid.
        let ev = unsafe { &*ev };
        let element = match ev.event {
            bindings::IB_EVENT_PORT_ERR
            | bindings::IB_EVENT_PORT_ACTIVE
            | bindings::IB_EVENT_LID_CHANGE
            | bindings::IB_EVENT_PKEY_CHANGE
            | bindings::IB_EVENT_SM_CHANGE
            | bindings::IB_EVENT_CLIENT_REREGISTER
            | bindings::IB_EVENT_GID_CHANGE => {
                // SAFETY: Port events name their port in the union.
                Element::Port(unsafe { ev.element.port_num })
            }
            bindings::IB_EVENT_QP_FATAL
            | bindings::IB_EVENT_QP_REQ_ERR
            | bindings::IB_EVENT_QP_ACCESS_ERR
            | bindings::IB_EVENT_COMM_EST
            | bindings::IB_EVENT_SQ_DRAINED
            | bindings::IB_EVENT_PATH_MIG
            | bindings::IB_EVENT_PATH_MIG_ERR
            | bindings::IB_EVENT_QP_LAST_WQE_REACHED => {
                // SAFETY: QP events name their QP in the union.
                let qp = unsafe { ev.element.qp };
                if qp.is_null() || !qp_live {
                    Element::Qp(0)
                } else {
                    // SAFETY: Live by the caller's guarantee; its number
                    // never changes.
                    Element::Qp(unsafe { (*qp).qp_num })
                }
            }
            bindings::IB_EVENT_CQ_ERR => Element::Cq,
            bindings::IB_EVENT_SRQ_ERR | bindings::IB_EVENT_SRQ_LIMIT_REACHED => Element::Srq,
            bindings::IB_EVENT_WQ_FATAL => Element::Wq,
            _ => Element::Device,
        };
        Event {
            event: ev.event,
            element,
        }
    }

    /// The kind of event.
    pub fn kind(&self) -> EventKind {
        match self.event {
            bindings::IB_EVENT_CQ_ERR => EventKind::CqErr,
            bindings::IB_EVENT_QP_FATAL => EventKind::QpFatal,
            bindings::IB_EVENT_QP_REQ_ERR => EventKind::QpReqErr,
            bindings::IB_EVENT_QP_ACCESS_ERR => EventKind::QpAccessErr,
            bindings::IB_EVENT_COMM_EST => EventKind::CommEst,
            bindings::IB_EVENT_SQ_DRAINED => EventKind::SqDrained,
            bindings::IB_EVENT_PATH_MIG => EventKind::PathMig,
            bindings::IB_EVENT_PATH_MIG_ERR => EventKind::PathMigErr,
            bindings::IB_EVENT_DEVICE_FATAL => EventKind::DeviceFatal,
            bindings::IB_EVENT_PORT_ACTIVE => EventKind::PortActive,
            bindings::IB_EVENT_PORT_ERR => EventKind::PortErr,
            bindings::IB_EVENT_SRQ_ERR => EventKind::SrqErr,
            bindings::IB_EVENT_SRQ_LIMIT_REACHED => EventKind::SrqLimitReached,
            bindings::IB_EVENT_QP_LAST_WQE_REACHED => EventKind::QpLastWqeReached,
            bindings::IB_EVENT_GID_CHANGE => EventKind::GidChange,
            other => EventKind::Other(other),
        }
    }

    /// The event's name, as the RDMA core spells it (`ib_event_msg`:
    /// "port active", "GID changed", ...).
    pub fn name(&self) -> &'static str {
        // SAFETY: `ib_event_msg` returns a static string for any value.
        let s = unsafe { bindings::ib_event_msg(self.event) };
        // SAFETY: The string is static and NUL-terminated.
        let s = unsafe { CStr::from_char_ptr(s) };
        s.to_str().unwrap_or("unrecognized event")
    }
}

/// Where events go.
pub trait EventSink: Send + Sync {
    /// Called for each event, in process context (a worker of kverbs.ko's
    /// workqueue `kverbs_events`), one event of an object at a time and in
    /// the order they came: it may sleep, and may drop the object the event
    /// is about (the events still queued for it are then dropped). Events
    /// that come faster than they are handled are dropped beyond
    /// [`QUEUED_EVENTS`] (with a kernel message).
    ///
    /// The object's drop waits for a call in progress on another task and
    /// then makes the calls for the events still queued itself, so every
    /// event raised before it is delivered and none after it returned: do
    /// not drop an object while holding a lock its sink takes. The drop
    /// then gives back the object's reference to the sink. Dropped from a
    /// sink (its own object, or another one), the object's drop waits for
    /// no delivery -- two sinks that drop each other's objects would wait
    /// for each other -- and its events still queued are dropped: a call of
    /// its sink in progress on another task ends after the drop has
    /// returned, and the reference to the sink goes when that delivery
    /// ends.
    ///
    /// No call of a module's sink outlives the module. The drop of its
    /// client [`Registration`](crate::client::Registration) waits for the
    /// runs still ending of the objects dropped before (in
    /// [`Client::remove`](crate::client::Client::remove), which it calls,
    /// or earlier); a module with no client registration may call
    /// [`wait_for_deliveries`] in its exit. And when a module goes (after
    /// its exit, before its memory is freed), kverbs.ko takes the sinks of
    /// the module's code -- this method's, or the drop glue's of the trait
    /// object -- from every object still alive, one it never dropped
    /// (`mem::forget`, an `Arc` cycle through its sink) or dropped from a
    /// sink, and drops them there, after the calls in progress; then it
    /// waits for every delivery still ending. The objects stay (and hold
    /// their device and kverbs.ko); their events go nowhere.
    ///
    /// Those waits are for every delivery in progress, of any module: a
    /// sink must not block without a bound. Nor panic: a Rust panic in the
    /// kernel is a `BUG()`, which ends the worker in the middle of its
    /// run, and the object's drop then waits for that run for ever.
    fn event(&self, ev: &Event);

    /// Where the sink's code is: the address of its `event`, in the
    /// module of its type's implementation, and of its drop glue, in the
    /// module that made the trait object (whose vtable the calls read).
    /// Not to be implemented (it cannot be: its argument is kverbs'): this
    /// one is compiled where the trait object is made.
    #[doc(hidden)]
    fn code_address(&self, _: seal::Seal) -> [usize; 2] {
        [
            <Self as EventSink>::event as *const () as usize,
            core::ptr::drop_in_place::<Self> as *const () as usize,
        ]
    }
}

/// An argument no crate but kverbs can make: the trait methods that take
/// it cannot be implemented outside.
pub(crate) mod seal {
    /// The argument.
    pub struct Seal(pub(crate) ());
}

/// Events of one object kept for its sink while it handles others.
pub const QUEUED_EVENTS: usize = 32;

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
/// the revocations waits for the runs.
pub(crate) fn mark_delivering() -> crate::task_mark::Mark {
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
/// on kverbs.ko's list of what calls a module's code (`kverbs_owned_add`)
/// from [`EventQueue::new_raw`] until `release` or the notifier takes it
/// off: while it is, `new_raw`'s reference is held.
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
    #[pin]
    owned: Opaque<bindings::kverbs_owned>,
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
        let _mark = loop {
            let mark = DELIVERING.enter();
            if mark.held() {
                break mark;
            }
            drop(mark);
            if this.closed.load(Ordering::SeqCst) {
                return;
            }
            crate::msleep(1);
        };
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
                owned <- Opaque::ffi_init(move |o: *mut bindings::kverbs_owned| {
                    // SAFETY: `o` is valid for writes and pinned.
                    unsafe {
                        bindings::kverbs_owned_init(
                            o,
                            code[0],
                            code[1],
                            Some(owned_get::<S>),
                            Some(owned_orphan::<S>),
                        )
                    }
                }),
            }? Error),
            GFP_KERNEL,
        )?;
        let q = Arc::into_raw(q);
        // SAFETY: `owned` is initialised and pinned with the queue, whose
        // `new_raw` reference is held until `release` has taken it off
        // the list again (type invariant).
        unsafe { bindings::kverbs_owned_add((*q).owned.get()) };
        // `into_raw` never gives a null pointer.
        NonNull::new(q.cast_mut()).ok_or(ENOMEM)
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
        if let Some(sink) = self.get_sink(true) {
            self.put_sink(sink);
        }
        // SAFETY: `owned` is initialised; off the list already if the
        // notifier took it.
        unsafe { bindings::kverbs_owned_del(self.owned.get()) };
    }

    /// The queue of an entry of kverbs.ko's list.
    ///
    /// # Safety
    ///
    /// `o` must be the `owned` field of a live `EventQueue<S>`.
    unsafe fn of_owned(o: *mut bindings::kverbs_owned) -> *const EventQueue<S> {
        // SAFETY: By the caller's guarantee, `o` is the field at this
        // offset of a queue; `Opaque` is transparent.
        unsafe {
            o.cast::<u8>()
                .sub(core::mem::offset_of!(EventQueue<S>, owned))
                .cast::<EventQueue<S>>()
        }
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
    if let Some(sink) = q.get_sink(true) {
        q.put_sink(sink);
    }
    // A run, or an object's `release` delivering what is left on another
    // task, may still hold a reference taken out before: wait until it is
    // dropped (the last one runs the sink's drop there).
    while q.users.load(Ordering::SeqCst) != 0 {
        // SAFETY: The wait queue lives with `q`; `users` is read with
        // `READ_ONCE`. Not interruptible: the module's memory goes next.
        unsafe { bindings::kverbs_wait_u32(q.idle.get(), q.users.as_ptr(), 0, 100, false) };
    }
}

/// Waits until every run of an event queue queued or in progress has ended
/// (`flush_workqueue`): those of objects already dropped included, which
/// may still be returning from the call of a sink that dropped its own
/// object, or dropping their references. Called by a client's
/// [`Registration`](crate::client::Registration) when dropped.
///
/// Process context only, never holding a lock a sink may take. A module's
/// exit calls it if it has objects with sinks and no client registration
/// (see [`EventSink::event`]). `EDEADLK` from a delivery (a sink), which it
/// would wait for.
pub fn wait_for_deliveries() -> Result {
    if in_delivery() {
        return Err(crate::errno::edeadlk());
    }
    // SAFETY: The workqueue is live while kverbs code runs (see `push`);
    // flushing it only waits.
    unsafe { bindings::kverbs_flush_events() };
    Ok(())
}

/// The `event_handler` of QPs (and SRQs) created with a sink: `ctx` is the
/// [`EventQueue`] the object keeps until it is destroyed.
///
/// # Safety
///
/// Called by the driver, from the object's own processing, with a valid
/// event about the object and the object's context as `ctx`.
pub(crate) unsafe extern "C" fn object_event(ev: *mut bindings::ib_event, ctx: *mut c_void) {
    // SAFETY: `ctx` is the queue of the QP or SRQ the event is about, whose
    // reference the object holds until its drop has destroyed it (see
    // `Qp`'s and `Srq`'s invariants), and for ever if that failed; a
    // successful destruction returns only once the driver calls no handler
    // of the object any more (mlx5's waits for its queued event works:
    // `destroy_resource_common`). The core (`__ib_qp_event_handler`) passes
    // a valid event whose QP is live.
    let (q, ev) = unsafe {
        (
            ArcBorrow::from_raw(ctx.cast::<EventQueue<dyn EventSink>>()),
            Event::from_raw(ev, true),
        )
    };
    // SAFETY: The QP or SRQ holds a `LayerRef` until destroyed (see
    // `Qp`'s and `Srq`'s invariants), and its handler runs only before.
    unsafe { EventQueue::push(q, ev) };
}

/// A registration of an event handler on a device: `sink` gets the
/// device's events until it is dropped.
///
/// # Invariants
///
/// `handler` is registered with the device (`ib_register_event_handler`)
/// from creation until drop; `dev` holds the device's registration count.
/// `queue` is a reference from [`EventQueue::new_raw`], given back on drop.
#[pin_data(PinnedDrop)]
struct Registration {
    #[pin]
    handler: Opaque<bindings::ib_event_handler>,
    queue: NonNull<EventQueue>,
    dev: ARef<Device>,
    /// Dropped last: the handler, kverbs code, is unregistered by then.
    _layer: LayerRef,
}

/// The device events of one device, given to an [`EventSink`] while this
/// lives (drop it before the device goes, in the client's `remove`: it
/// holds a reference that device unregistration waits for).
pub struct DeviceEvents {
    _reg: Pin<KBox<Registration>>,
}

// SAFETY: The registration is only registered and unregistered, which may
// be done from any thread; the sink is `Send + Sync`.
unsafe impl Send for DeviceEvents {}
// SAFETY: `&DeviceEvents` offers nothing.
unsafe impl Sync for DeviceEvents {}

impl DeviceEvents {
    /// Registers `sink` for the events of `dev`. They are delivered from a
    /// workqueue, one at a time (see [`EventSink`]).
    pub fn register(dev: &Device, sink: Arc<dyn EventSink>) -> Result<Self> {
        let dev: ARef<Device> = dev.into();
        let raw = dev.as_raw();
        let layer = LayerRef::new()?;
        let queue = EventQueue::new_raw(sink)?;
        let reg = KBox::pin_init(
            pin_init!(Registration {
                // SAFETY: The handler is filled in before its registration,
                // below; its list head is set by `ib_register_event_handler`.
                handler <- Opaque::ffi_init(move |h: *mut bindings::ib_event_handler| unsafe {
                    (*h).device = raw;
                    (*h).handler = Some(device_event);
                }),
                queue,
                dev,
                _layer: layer,
            }),
            GFP_KERNEL,
        );
        let reg = match reg {
            Ok(reg) => reg,
            Err(e) => {
                // SAFETY: From `new_raw` above; no handler has it.
                unsafe { EventQueue::release(queue) };
                return Err(e);
            }
        };
        // SAFETY: The handler is pinned for as long as it is registered
        // (until drop) and its device is live (we hold a reference).
        unsafe { bindings::ib_register_event_handler(reg.handler.get()) };
        Ok(DeviceEvents { _reg: reg })
    }
}

/// The handler's callback.
///
/// # Safety
///
/// Called by the RDMA core (`ib_dispatch_event_clients`) with a handler
/// registered by [`DeviceEvents::register`] and a valid event.
unsafe extern "C" fn device_event(h: *mut bindings::ib_event_handler, ev: *mut bindings::ib_event) {
    // SAFETY: `h` is the `handler` field of a pinned, registered
    // `Registration` (the only handler registered with this callback);
    // `Opaque` is transparent, so the field's address is the handler's.
    let reg = unsafe {
        &*(h.cast::<u8>()
            .sub(core::mem::offset_of!(Registration, handler))
            .cast::<Registration>())
    };
    // SAFETY: The core passes a valid event.
    // Device events come from a workqueue: a QP they might name could be
    // gone, its number is not read.
    let ev = unsafe { Event::from_raw(ev, false) };
    // SAFETY: The registration holds this reference until after it is
    // unregistered, which waits for this call to return; it holds a
    // `LayerRef` until then too.
    unsafe { EventQueue::push(ArcBorrow::from_raw(reg.queue.as_ptr()), ev) };
}

#[pinned_drop]
impl PinnedDrop for Registration {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: Registered at creation (type invariant); this waits for
        // a callback in progress (the core's rwsem), after which none comes.
        unsafe { bindings::ib_unregister_event_handler(self.handler.get()) };
        // SAFETY: The queue's reference of this registration, whose
        // handler is gone.
        unsafe { EventQueue::release(self.queue) };
    }
}

/// The newest `N` events with their time (`ktime_get_ns`), and how many
/// came in all: a ring filled from any context -- QP events come from the
/// driver's completion paths, softirq or hard interrupt -- under a
/// spinlock taken with interrupts off, without allocating. The entries
/// are on the heap, allocated with the ring: `N` is not bounded by the
/// stack, and nothing of size `N` is ever copied onto it.
///
/// # Invariants
///
/// The `entries` of `ring` has `N` elements.
#[pin_data]
pub struct EventRing<const N: usize, T: Copy = Event> {
    #[pin]
    ring: IrqLock<Ring<T>>,
}

struct Ring<T> {
    entries: KVec<Option<(u64, T)>>,
    /// Events pushed in all.
    total: u64,
    /// Events taken by [`EventRing::take_new`] (or lost before it ran).
    taken: u64,
}

impl<const N: usize, T: Copy> EventRing<N, T> {
    /// An empty ring (its `N` entries are allocated here).
    pub fn new() -> impl PinInit<Self, Error> {
        try_pin_init!(EventRing {
            ring <- IrqLock::new(Ring {
                entries: KVec::from_elem(None, N, GFP_KERNEL)?,
                total: 0,
                taken: 0,
            }),
        }? Error)
    }

    fn with<R>(&self, f: impl FnOnce(&mut Ring<T>) -> R) -> R {
        self.ring.with(f)
    }

    /// Adds `ev`, at time `t`; the oldest goes if the ring is full.
    pub fn push(&self, t: u64, ev: T) {
        if N == 0 {
            return;
        }
        self.with(|r| {
            r.entries[(r.total % N as u64) as usize] = Some((t, ev));
            r.total += 1;
        });
    }

    /// Copies the events from number `from` on (oldest first) into `out`,
    /// whose room for `N` more was reserved: no allocation under the lock.
    fn copy_from(r: &Ring<T>, from: u64, out: &mut KVec<(u64, T)>) {
        for i in from..r.total {
            if let Some(e) = r.entries[(i % N as u64) as usize] {
                // Within the reserved capacity: does not allocate.
                let _ = out.push(e, GFP_ATOMIC);
            }
        }
    }

    /// The events kept, oldest first, and how many came in all.
    pub fn snapshot(&self) -> (KVec<(u64, T)>, u64) {
        let mut v = KVec::new();
        // Best effort: on allocation failure no event is shown.
        let room = v.reserve(N, GFP_KERNEL).is_ok();
        let total = self.with(|r| {
            if room {
                Self::copy_from(r, r.total - r.total.min(N as u64), &mut v);
            }
            r.total
        });
        (v, total)
    }

    /// Moves the events pushed since the last call into `out` (oldest
    /// first) and returns how many of them were lost, overwritten before
    /// they were taken (or because `out` could not be allocated).
    pub(crate) fn take_new(&self, out: &mut KVec<(u64, T)>) -> u64 {
        let room = out.reserve(N, GFP_KERNEL).is_ok();
        self.with(|r| {
            let kept = r.total - r.total.min(N as u64);
            let from = r.taken.max(kept);
            let mut lost = from - r.taken;
            if room {
                Self::copy_from(r, from, out);
            } else {
                lost = r.total - r.taken;
            }
            r.taken = r.total;
            lost
        })
    }
}
