// SPDX-License-Identifier: GPL-2.0

//! Asynchronous events: of a device and its ports (`ib_register_event_handler`),
//! and of the QPs created with an [`EventSink`] (`ib_qp_init_attr.event_handler`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use crate::{bindings, device::Device, device::PortNum};
use core::{cell::UnsafeCell, ffi::c_void};
use kernel::{
    prelude::*,
    sync::Arc,
    types::{ARef, Opaque},
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
    /// Called for each event. It may be called in atomic context (QP
    /// events come from the driver's completion paths): it must not sleep.
    fn event(&self, ev: &Event);
}

/// The sink of a QP or SRQ, boxed so that a thin pointer names it in the
/// `qp_context` of the C object.
pub(crate) type SinkBox = KBox<Arc<dyn EventSink>>;

/// The `event_handler` of QPs (and SRQs) created with a sink: `ctx` is the
/// [`SinkBox`] the object keeps until it is destroyed.
///
/// # Safety
///
/// Called by the driver, from the object's own processing, with a valid
/// event about the object and the object's context as `ctx`.
pub(crate) unsafe extern "C" fn object_event(ev: *mut bindings::ib_event, ctx: *mut c_void) {
    // SAFETY: `ctx` is the `SinkBox` of the QP or SRQ the event is about,
    // which outlives the C object (see `Qp`'s and `Srq`'s invariants); the
    // core passes a valid event whose QP is live.
    unsafe {
        let sink = &*ctx.cast::<Arc<dyn EventSink>>();
        sink.event(&Event::from_raw(ev, true));
    }
}

/// A registration of an event handler on a device: `sink` gets the
/// device's events until it is dropped.
///
/// # Invariants
///
/// `handler` is registered with the device (`ib_register_event_handler`)
/// from creation until drop; `dev` holds the device's registration count.
#[pin_data(PinnedDrop)]
struct Registration {
    #[pin]
    handler: Opaque<bindings::ib_event_handler>,
    sink: Arc<dyn EventSink>,
    dev: ARef<Device>,
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
    /// workqueue, one at a time.
    pub fn register(dev: &Device, sink: Arc<dyn EventSink>) -> Result<Self> {
        let dev: ARef<Device> = dev.into();
        let raw = dev.as_raw();
        let reg = KBox::pin_init(
            pin_init!(Registration {
                // SAFETY: The handler is filled in before its registration,
                // below; its list head is set by `ib_register_event_handler`.
                handler <- Opaque::ffi_init(move |h: *mut bindings::ib_event_handler| unsafe {
                    (*h).device = raw;
                    (*h).handler = Some(device_event);
                }),
                sink,
                dev,
            }),
            GFP_KERNEL,
        )?;
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
    reg.sink.event(&unsafe { Event::from_raw(ev, false) });
}

#[pinned_drop]
impl PinnedDrop for Registration {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: Registered at creation (type invariant); this waits for
        // a callback in progress (the core's rwsem), after which none comes.
        unsafe { bindings::ib_unregister_event_handler(self.handler.get()) };
    }
}

/// The newest `N` events with their time (`ktime_get_ns`), and how many
/// came in all: a ring filled from any context -- QP events come from the
/// driver's completion paths, softirq or hard interrupt -- under a
/// spinlock taken with interrupts off, without allocating.
///
/// # Invariants
///
/// `lock` is an initialised `spinlock_t`; `ring` is only accessed with it
/// held.
#[pin_data]
pub struct EventRing<const N: usize> {
    #[pin]
    lock: Opaque<bindings::spinlock_t>,
    ring: UnsafeCell<([Option<(u64, Event)>; N], u64)>,
}

// SAFETY: The ring is only accessed under the lock.
unsafe impl<const N: usize> Send for EventRing<N> {}
// SAFETY: As above.
unsafe impl<const N: usize> Sync for EventRing<N> {}

impl<const N: usize> EventRing<N> {
    /// An empty ring.
    pub fn new() -> impl PinInit<Self> {
        pin_init!(EventRing {
            // SAFETY: `slot` is valid for writes and pinned.
            lock <- Opaque::ffi_init(|slot: *mut bindings::spinlock_t| unsafe {
                bindings::kverbs_spin_lock_init(slot)
            }),
            ring: UnsafeCell::new(([None; N], 0)),
        })
    }

    /// Runs `f` on the ring with the lock held, interrupts off.
    fn with<R>(&self, f: impl FnOnce(&mut ([Option<(u64, Event)>; N], u64)) -> R) -> R {
        // SAFETY: The lock is initialised (type invariant).
        let flags = unsafe { bindings::kverbs_spin_lock_irqsave(self.lock.get()) };
        // SAFETY: The lock is held: this is the only access to `ring`.
        let r = f(unsafe { &mut *self.ring.get() });
        // SAFETY: Taken above with these flags.
        unsafe { bindings::kverbs_spin_unlock_irqrestore(self.lock.get(), flags) };
        r
    }

    /// Adds `ev`, at time `t`; the oldest goes if the ring is full.
    pub fn push(&self, t: u64, ev: Event) {
        if N == 0 {
            return;
        }
        self.with(|(entries, total)| {
            entries[(*total % N as u64) as usize] = Some((t, ev));
            *total += 1;
        });
    }

    /// The events kept, oldest first, and how many came in all.
    pub fn snapshot(&self) -> (KVec<(u64, Event)>, u64) {
        let (entries, total) = self.with(|r| (r.0, r.1));
        let kept = total.min(N as u64);
        let mut v = KVec::new();
        // Best effort: on allocation failure fewer events are shown.
        if v.reserve(kept as usize, GFP_KERNEL).is_ok() {
            for i in total - kept..total {
                if let Some(e) = entries[(i % N as u64) as usize] {
                    let _ = v.push(e, GFP_KERNEL);
                }
            }
        }
        (v, total)
    }
}
