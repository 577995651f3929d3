// SPDX-License-Identifier: GPL-2.0

//! The RDMA connection manager (rdma_cm), for RC connections over IPv4.
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h)
//!
//! The connection manager calls an event handler for every event of an ID.
//! kverbs' handler only records the event in the ID's [`CmEvents`] queue
//! and wakes its waiters; the methods of [`CmId`] start an operation and
//! wait for its event (with a timeout, a [`Cancel`] token and signals).
//! The IDs of a connection share one queue: a listener's connection
//! requests arrive as new (child) IDs whose context is the listener's.
//!
//! Lifetimes: a [`CmId`] is reference counted; a QP created on it
//! ([`Qp::new_cm`]) holds it, so the ID is destroyed (`rdma_destroy_id`)
//! after its QP (`rdma_destroy_qp`). Every ID holds its queue, so no event
//! can reach a freed queue.
//!
//! An ID nobody waits on learns of nothing by itself: a listener kept for
//! the next connection, or a connection kept idle. A queue made with a
//! [`CmSink`] ([`CmEvents::with_sink`]) also tells the sink of each event,
//! in process context, from kverbs.ko's event workqueue (as
//! [`EventSink`](crate::event::EventSink)s are told), the event itself
//! staying queued for the waits. The one a holder must act on is
//! [`CmEventKind::DeviceRemoval`]: the device's removal (`rdma link del`,
//! the driver's unload) waits until every ID on it is destroyed, so the
//! IDs it names must be dropped, with the QPs made on them (a QP holds its
//! ID) -- from the sink, or by whoever the sink tells. Events the sink
//! could not keep up with are lost to it (not to the waits): it is told
//! [`CmEventKind::EventsLost`] instead, and then asks each of its IDs
//! ([`CmId::device_removed`]). An ID kept idle with no sink (and not
//! dropped in the holder's
//! [`Client::remove`](crate::client::Client::remove)) keeps its device's
//! removal waiting for as long as it is kept.
//!
//! Events name their ID by a token of its own, never by its address: the
//! connection manager frees a destroyed ID, and the next connection
//! request's new ID may be allocated at the same address. Each ID's context
//! is an [`IdCtx`] with its token; a connection request's new ID, which
//! comes with its listener's context, gets one of its own in the handler.

mod events;
mod param;
mod sink;

pub use events::CmEvents;
use events::{event_msg, handler, EventsInner, IdCtx};
pub use param::{ConnParam, ConnectError, PrivateData, Rejection};
pub use sink::{CmEvent, CmEventKind, CmSink};

use crate::bindings;
use crate::device::Device;
use crate::qp::{Cancel, Init, Qp, Rts};
use crate::tcp::Ipv4;
use crate::Deadline;
use core::{
    ptr::NonNull,
    sync::atomic::{AtomicBool, Ordering},
};
use kernel::{
    error::from_err_ptr,
    ffi::{c_ulong, c_void},
    prelude::*,
    sync::Arc,
};

/// # Invariants
///
/// `id` was created by `rdma_create_id` with `ctx` as its context (or is
/// a child ID of such a listener taken from the queue, with the context
/// the handler gave it), and is not yet destroyed; `ctx` names `events`
/// and is owned by this, freed after `id` is destroyed.
pub(crate) struct CmIdInner {
    id: NonNull<bindings::rdma_cm_id>,
    ctx: NonNull<IdCtx>,
    events: Arc<EventsInner>,
    /// A QP was created on the ID (`rdma_create_qp`) and not yet destroyed.
    has_qp: AtomicBool,
    /// A connection request's ID, taken from the queue: it gives its place
    /// back to the listener when it goes.
    child: bool,
    /// A connection request's private data.
    request_data: PrivateData,
}

// SAFETY: The connection manager's calls are thread safe; the context is
// only read (its token) and freed on drop.
unsafe impl Send for CmIdInner {}
// SAFETY: As above.
unsafe impl Sync for CmIdInner {}

impl CmIdInner {
    pub(crate) fn as_raw(&self) -> *mut bindings::rdma_cm_id {
        self.id.as_ptr()
    }

    fn token(&self) -> u64 {
        // SAFETY: The context is live while `self` is (type invariant).
        unsafe { self.ctx.as_ref().token }
    }

    /// Claims the ID's one QP: `EBUSY` if it has one.
    pub(crate) fn claim_qp(&self) -> Result {
        if self.has_qp.swap(true, Ordering::AcqRel) {
            return Err(EBUSY);
        }
        Ok(())
    }

    /// The ID's QP was destroyed (or not created after all).
    pub(crate) fn release_qp(&self) {
        self.has_qp.store(false, Ordering::Release);
    }
}

impl Drop for CmIdInner {
    fn drop(&mut self) {
        let token = self.token();
        // SAFETY: By the type invariant the ID is live; its QP, if any, is
        // gone (a QP holds its ID). This waits for a running handler.
        unsafe { bindings::rdma_destroy_id(self.id.as_ptr()) };
        // No handler call for the ID runs or will run any more.
        self.events.forget_id(token);
        // SAFETY: The ID's context, owned by `self`; the ID is destroyed.
        unsafe { IdCtx::free(self.ctx) };
        if self.child {
            self.events.requests_left.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// `IB_CM_REJ_CONSUMER_DEFINED` (`enum ib_cm_rej_reason`,
/// include/rdma/ib_cm.h): a rejection by the peer's ULP.
const IB_CM_REJ_CONSUMER_DEFINED: u8 = 28;

/// A reference to a connection manager ID, as QPs hold it.
pub(crate) type CmIdRef = Arc<CmIdInner>;

/// A connection manager ID (`struct rdma_cm_id`) for an RC connection.
pub struct CmId(CmIdRef);

impl CmId {
    /// Creates an ID whose events go to `events`.
    pub fn new(events: &CmEvents) -> Result<Self> {
        let ctx = IdCtx::new(core::ptr::from_ref::<EventsInner>(&events.0))?;
        // SAFETY: The handler and context stay valid while the ID lives:
        // the context is freed after the ID, and the ID holds the queue.
        let id = from_err_ptr(unsafe {
            bindings::kverbs_cm_create_id(Some(handler), ctx.as_ptr().cast::<c_void>())
        })
        .and_then(|id| NonNull::new(id).ok_or(ENOMEM));
        let id = match id {
            Ok(id) => id,
            Err(e) => {
                // SAFETY: No ID was created with it.
                unsafe { IdCtx::free(ctx) };
                return Err(e);
            }
        };
        // INVARIANT: created above with `ctx`, which names the queue, as its
        // context. If the `Arc` cannot be allocated, dropping the
        // `CmIdInner` destroys the ID and frees the context.
        Ok(CmId(Arc::new(
            CmIdInner {
                id,
                ctx,
                events: events.0.clone(),
                has_qp: AtomicBool::new(false),
                child: false,
                request_data: PrivateData::EMPTY,
            },
            GFP_KERNEL,
        )?))
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::rdma_cm_id {
        self.0.as_raw()
    }

    pub(crate) fn inner(&self) -> CmIdRef {
        self.0.clone()
    }

    /// Binds to `addr:port` and listens for connection requests.
    pub fn listen(&self, addr: Ipv4, port: u16) -> Result {
        // SAFETY: The ID is live.
        kernel::error::to_result(unsafe {
            bindings::kverbs_cm_bind_v4(self.as_raw(), u32::from_ne_bytes(addr.0), port)
        })?;
        // SAFETY: The ID is live and bound.
        kernel::error::to_result(unsafe { bindings::rdma_listen(self.as_raw(), 1) })
    }

    /// Waits for a connection request on this listener; returns the new ID,
    /// which is accepted with [`CmId::accept`] (or rejected by dropping it).
    /// `ENODEV` once the listener's device is being removed.
    pub fn get_request(&self, timeout_ms: u32, cancel: &Cancel) -> Result<CmId> {
        let events = &self.0.events;
        let token = self.0.token();
        let deadline = Deadline::new(timeout_ms, cancel);
        loop {
            let seen = events.count.load(Ordering::Acquire);
            let removed = events
                .list
                .lock()
                .iter()
                .any(|e| e.token == token && e.kind == bindings::RDMA_CM_EVENT_DEVICE_REMOVAL);
            if removed {
                return Err(ENODEV);
            }
            if let Some(e) =
                events.take_where(|e| e.kind == bindings::RDMA_CM_EVENT_CONNECT_REQUEST)
            {
                // The handler gave every request it queued a context.
                let (Some(id), Some(ctx)) = (NonNull::new(e.id), e.child) else {
                    return Err(EINVAL);
                };
                // INVARIANT: a child ID of our listener, taken from the
                // queue: ours, with its own context (now owned here). If
                // the `Arc` cannot be allocated, dropping the `CmIdInner`
                // destroys it.
                return Ok(CmId(Arc::new(
                    CmIdInner {
                        id,
                        ctx,
                        events: events.clone(),
                        has_qp: AtomicBool::new(false),
                        child: true,
                        request_data: e.private,
                    },
                    GFP_KERNEL,
                )?));
            }
            deadline.check()?;
            events.wait_next(seen);
        }
    }

    /// Resolves `addr:port` to a device, port and route (ARP/ND), waiting
    /// at most `timeout_ms` for each.
    pub fn resolve(&self, addr: Ipv4, port: u16, timeout_ms: u32, cancel: &Cancel) -> Result {
        // SAFETY: The ID is live.
        kernel::error::to_result(unsafe {
            bindings::kverbs_cm_resolve_addr_v4(
                self.as_raw(),
                u32::from_ne_bytes(addr.0),
                port,
                timeout_ms as c_ulong,
            )
        })?;
        self.0.events.wait(
            self.0.token(),
            bindings::RDMA_CM_EVENT_ADDR_RESOLVED,
            timeout_ms,
            cancel,
        )?;
        // SAFETY: The ID is live and its address resolved.
        kernel::error::to_result(unsafe {
            bindings::rdma_resolve_route(self.as_raw(), timeout_ms as c_ulong)
        })?;
        self.0.events.wait(
            self.0.token(),
            bindings::RDMA_CM_EVENT_ROUTE_RESOLVED,
            timeout_ms,
            cancel,
        )?;
        Ok(())
    }

    /// The device the ID is bound to, once bound, resolved or requested.
    pub fn device(&self) -> Option<&Device> {
        // SAFETY: The ID is live; its device, once set, stays registered
        // until the ID is destroyed (the connection manager waits for its
        // IDs before letting a device go).
        let dev = unsafe { (*self.as_raw()).device };
        // SAFETY: As above, for the lifetime of `&self`.
        (!dev.is_null()).then(|| unsafe { Device::from_raw(dev) })
    }

    /// The port the ID is bound to.
    pub fn port_num(&self) -> u32 {
        // SAFETY: The ID is live.
        unsafe { (*self.as_raw()).port_num }
    }

    /// Connects (client side) with `qp`, created on this ID, and waits for
    /// the connection: the QP is then in RTS. [`ConnParam::default`]'s
    /// parameters, no private data.
    pub fn connect(&self, qp: Qp<Init>, timeout_ms: u32, cancel: &Cancel) -> Result<Qp<Rts>> {
        let (qp, _) = self.connect_with(qp, &ConnParam::default(), timeout_ms, cancel)?;
        Ok(qp)
    }

    /// As [`CmId::connect`], with `param` (its private data sent with the
    /// request); gives the private data of the peer's reply, or the peer's
    /// rejection with the error `ECONNREFUSED`.
    pub fn connect_with(
        &self,
        qp: Qp<Init>,
        param: &ConnParam<'_>,
        timeout_ms: u32,
        cancel: &Cancel,
    ) -> core::result::Result<(Qp<Rts>, PrivateData), ConnectError> {
        self.check_own(&qp)?;
        let dev = self.device().ok_or(EINVAL)?;
        let mut raw = param.as_raw(dev)?;
        // SAFETY: The ID is live, resolved, and has its QP; `raw`'s private
        // data borrows `param`'s for the call, which copies it.
        kernel::error::to_result(unsafe { bindings::rdma_connect(self.as_raw(), &mut raw) })?;
        self.established(qp, timeout_ms, cancel)
    }

    /// Accepts the connection request of this (child) ID with `qp`, and
    /// waits for the connection: the QP is then in RTS.
    /// [`ConnParam::default`]'s parameters, no private data.
    pub fn accept(&self, qp: Qp<Init>, timeout_ms: u32, cancel: &Cancel) -> Result<Qp<Rts>> {
        self.accept_with(qp, &ConnParam::default(), timeout_ms, cancel)
    }

    /// As [`CmId::accept`], with `param` (its private data sent with the
    /// reply). `EINVAL` for an ID that is not a connection request's.
    pub fn accept_with(
        &self,
        qp: Qp<Init>,
        param: &ConnParam<'_>,
        timeout_ms: u32,
        cancel: &Cancel,
    ) -> Result<Qp<Rts>> {
        self.check_own(&qp)?;
        if !self.0.child {
            return Err(EINVAL);
        }
        let dev = self.device().ok_or(EINVAL)?;
        let mut raw = param.as_raw(dev)?;
        let ret = self.with_handler_lock(|id| {
            // SAFETY: The ID is live and has its QP, its handler lock held
            // (as `rdma_accept` wants); `raw`'s private data borrows
            // `param`'s for the call, which copies it.
            unsafe { bindings::rdma_accept(id, &mut raw) }
        });
        kernel::error::to_result(ret)?;
        Ok(self.established(qp, timeout_ms, cancel)?.0)
    }

    /// The private data of the connection request of this ID, taken by
    /// [`CmId::get_request`] (empty for an ID of [`CmId::new`]).
    pub fn request_data(&self) -> &PrivateData {
        &self.0.request_data
    }

    /// Rejects the connection request of this ID, taken by
    /// [`CmId::get_request`], sending `private_data` with a
    /// consumer-defined reason, as a ULP's target does; the ID goes with
    /// it, and its place in the listener's [`CmEvents`] is free again.
    /// `EINVAL` for an ID of [`CmId::new`], an ID already accepted, or
    /// private data longer than the transport takes (148 bytes over
    /// InfiniBand and RoCE).
    pub fn reject(self, private_data: &[u8]) -> Result {
        if !self.0.child {
            return Err(EINVAL);
        }
        let len = u8::try_from(private_data.len()).map_err(|_| EINVAL)?;
        let data = if len == 0 {
            core::ptr::null()
        } else {
            private_data.as_ptr().cast()
        };
        let ret = self.with_handler_lock(|id| {
            // SAFETY: The ID is live (a connection request's), its handler
            // lock held, as for `rdma_accept`; the call copies the data.
            unsafe { bindings::rdma_reject(id, data, len, IB_CM_REJ_CONSUMER_DEFINED) }
        });
        kernel::error::to_result(ret)
    }

    /// Runs `f` on the ID with its handler lock held (`rdma_lock_handler`:
    /// no event handler of the ID runs meanwhile), as `rdma_accept` and
    /// `rdma_reject` of a connection request want.
    fn with_handler_lock<R>(&self, f: impl FnOnce(*mut bindings::rdma_cm_id) -> R) -> R {
        let id = self.as_raw();
        // SAFETY: The ID is live while `self` is; locked and unlocked once
        // each, on this task (a mutex).
        unsafe { bindings::rdma_lock_handler(id) };
        let r = f(id);
        // SAFETY: Locked above, by this task.
        unsafe { bindings::rdma_unlock_handler(id) };
        r
    }

    /// Waits for the connection of `qp`, which the connection manager then
    /// has moved to RTS.
    /// `EINVAL` unless `qp` is this ID's own, made by [`Qp::new_cm`] on it:
    /// the connection manager moves `id->qp`, whatever was passed.
    fn check_own(&self, qp: &Qp<Init>) -> Result {
        if qp.cm_id_is(&self.0) {
            return Ok(());
        }
        Err(EINVAL)
    }

    fn established(
        &self,
        qp: Qp<Init>,
        timeout_ms: u32,
        cancel: &Cancel,
    ) -> core::result::Result<(Qp<Rts>, PrivateData), ConnectError> {
        match self.0.events.wait_event(
            self.0.token(),
            bindings::RDMA_CM_EVENT_ESTABLISHED,
            timeout_ms,
            cancel,
        ) {
            Ok(e) => Ok((qp.retype(), e.private)),
            Err((error, e)) => Err(ConnectError {
                error,
                rejection: e
                    .filter(|e| e.kind == bindings::RDMA_CM_EVENT_REJECTED)
                    .map(|e| Rejection {
                        reason: e.status,
                        consumer_data: e.consumer_reject.then_some(e.private),
                    }),
            }),
        }
    }

    /// Whether the peer has disconnected (the event is consumed).
    pub fn disconnected(&self) -> bool {
        let token = self.0.token();
        self.0
            .events
            .take_where(|e| e.token == token && e.kind == bindings::RDMA_CM_EVENT_DISCONNECTED)
            .is_some()
    }

    /// Whether the ID's device is being removed: the ID, and a QP made on
    /// it, must then be dropped for the removal to go on. Does not wait;
    /// true even if the event could not be queued (out of memory).
    pub fn device_removed(&self) -> bool {
        // SAFETY: The context is live while `self` is (type invariant of
        // `CmIdInner`).
        unsafe { self.0.ctx.as_ref() }
            .removed
            .load(Ordering::Acquire)
    }

    /// Waits up to `timeout_ms` for the peer's disconnect and tells whether
    /// it came (the event is consumed); an error event of this ID, the
    /// timeout or `cancel` end the wait with `false`. For a work request
    /// that failed with a remote or retry error: whether the peer went away.
    /// Other events of the ID stay queued (a device removal, for the next
    /// wait to fail with `ENODEV`).
    pub fn wait_disconnected(&self, timeout_ms: u32, cancel: &Cancel) -> bool {
        self.0
            .events
            .wait(
                self.0.token(),
                bindings::RDMA_CM_EVENT_DISCONNECTED,
                timeout_ms,
                cancel,
            )
            .is_ok()
    }

    /// Disconnects: the QP goes to ERR and the peer is told.
    pub fn disconnect(&self) -> Result {
        // SAFETY: The ID is live.
        kernel::error::to_result(unsafe { bindings::rdma_disconnect(self.as_raw()) })
    }
}
