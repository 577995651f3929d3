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

use crate::{bindings, device::Device, device::PortNum, layer_ref::LayerRef, ARef};
use core::{ffi::c_void, ptr::NonNull};
use kernel::{
    prelude::*,
    sync::{Arc, ArcBorrow},
    types::Opaque,
};

mod queue;
mod ring;

pub use queue::in_delivery;
pub(crate) use queue::{mark_delivering, try_mark_delivering, EventQueue, Sink};
pub use ring::EventRing;

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
