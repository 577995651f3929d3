// SPDX-License-Identifier: GPL-2.0

//! The event queue of a connection ([`CmEvents`]) and the handler of every
//! kverbs ID, which fills it (see [`crate::cm`]).

use super::{CmEvent, CmSink, PrivateData};
use crate::bindings;
use crate::event::EventQueue;
use crate::layer_ref::LayerRef;
use crate::qp::Cancel;
use crate::Deadline;
use core::{
    ptr::NonNull,
    sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
};
use kernel::{
    ffi::c_int,
    new_mutex,
    prelude::*,
    sync::{Arc, ArcBorrow, Mutex},
    types::Opaque,
};

/// The tokens of IDs: never reused.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// The context of one ID (`rdma_cm_id.context`).
///
/// # Invariants
///
/// `events` points to the queue the ID's events go to, which lives as long
/// as the ID: held by its [`CmIdInner`](super::CmIdInner), or, for a connection request not
/// taken yet, by the queue itself (which destroys the ID when it goes).
/// The context is freed only after its ID is destroyed -- or, for a
/// connection request given up on its device's removal, by its handler
/// right before the connection manager destroys the ID, which calls no
/// handler after that: its reference to kverbs.ko covers every call of
/// the ID's handler, kverbs code (but for the last instructions of that
/// one, see the handler).
pub(super) struct IdCtx {
    pub(super) events: *const EventsInner,
    pub(super) token: u64,
    /// The ID's device is being removed: set by the handler on
    /// `DEVICE_REMOVAL`, whether or not the event could be queued.
    pub(super) removed: AtomicBool,
    pub(super) _layer: LayerRef,
}

impl IdCtx {
    pub(super) fn new(events: *const EventsInner) -> Result<NonNull<IdCtx>> {
        let ctx = KBox::new(
            IdCtx {
                events,
                token: NEXT_TOKEN.fetch_add(1, Ordering::Relaxed),
                removed: AtomicBool::new(false),
                _layer: LayerRef::new()?,
            },
            GFP_KERNEL,
        )?;
        // `into_raw` never gives a null pointer.
        NonNull::new(KBox::into_raw(ctx)).ok_or(ENOMEM)
    }

    /// Frees a context made by [`IdCtx::new`].
    ///
    /// # Safety
    ///
    /// `ctx` is freed once, and no ID uses it any more (it was destroyed,
    /// or never had it).
    pub(super) unsafe fn free(ctx: NonNull<IdCtx>) {
        // SAFETY: By the caller's guarantee.
        drop(unsafe { KBox::from_raw(ctx.as_ptr()) });
    }

    /// As [`IdCtx::free`], its reference to kverbs.ko given back from
    /// kverbs.ko's workqueue: in the handler, which the connection manager
    /// calls with nothing else keeping kverbs.ko loaded.
    ///
    /// # Safety
    ///
    /// As for [`IdCtx::free`].
    pub(super) unsafe fn free_deferred(ctx: NonNull<IdCtx>) {
        // SAFETY: By the caller's guarantee.
        let ctx = KBox::into_inner(unsafe { KBox::from_raw(ctx.as_ptr()) });
        ctx._layer.put_deferred();
    }
}

/// An event recorded by the handler.
#[derive(Clone, Copy)]
pub(super) struct Event {
    pub(super) id: *mut bindings::rdma_cm_id,
    /// The token of the ID.
    pub(super) token: u64,
    pub(super) kind: u32,
    pub(super) status: i32,
    /// A connection request's new ID's context, owned by this event until
    /// the request is taken.
    pub(super) child: Option<NonNull<IdCtx>>,
    /// The private data of a connection request, a reply (`ESTABLISHED`
    /// of the connecting side) or a consumer-defined rejection (then
    /// `consumer_reject`), copied during the handler's call: the
    /// connection manager's copy is only valid then.
    pub(super) private: PrivateData,
    pub(super) consumer_reject: bool,
}

/// The events of the IDs of one connection, oldest first.
///
/// # Invariants
///
/// `sink`, if any, is a reference from [`EventQueue::new_raw`], given back
/// only by the drop. `giving_up` counts the handlers between removing an
/// untaken connection request from `list` (under its lock) and their last
/// access to `self`.
#[pin_data(PinnedDrop)]
pub(crate) struct EventsInner {
    #[pin]
    pub(super) wq: Opaque<bindings::wait_queue_head>,
    pub(super) count: AtomicU32,
    /// Connection requests still taken: once none is left, further ones
    /// are refused.
    pub(super) requests_left: AtomicU32,
    /// Handlers giving up an untaken connection request on its device's
    /// removal, still using this queue: its drop waits for them, since it
    /// no longer destroys (and so waits for) their IDs.
    pub(super) giving_up: AtomicU32,
    #[pin]
    pub(super) list: Mutex<KVec<Event>>,
    /// The queue of the sink told of each event, if any: a reference from
    /// [`EventQueue::new_raw`], given back on drop.
    pub(super) sink: Option<NonNull<EventQueue<dyn CmSink>>>,
}

// SAFETY: The raw ID pointers are only used to destroy untaken connection
// requests (and their contexts); the sink's queue is `Send + Sync`; the
// rest is atomics and a mutex.
unsafe impl Send for EventsInner {}
// SAFETY: As above.
unsafe impl Sync for EventsInner {}

#[pinned_drop]
impl PinnedDrop for EventsInner {
    fn drop(self: Pin<&mut Self>) {
        // Connection requests nobody took: their IDs are ours to destroy.
        // No handler runs any more for the listener (destroyed before its
        // last reference to this queue went); a child's handler may, and
        // `rdma_destroy_id` waits for it. A child's handler that removed
        // its request before this took the list (giving it up on its
        // device's removal) is waited for below.
        let list = core::mem::take(&mut *self.list.lock());
        for e in list.iter() {
            if e.kind == bindings::RDMA_CM_EVENT_CONNECT_REQUEST {
                // SAFETY: The handler recorded this child ID and returned
                // 0, so the ID is ours; it was never taken.
                unsafe { bindings::rdma_destroy_id(e.id) };
                if let Some(ctx) = e.child {
                    // SAFETY: The request's context, owned by the event; its
                    // ID is destroyed.
                    unsafe { IdCtx::free(ctx) };
                }
            }
        }
        // Its increment was made under the list's lock, before the list was
        // taken above; its decrement is the handler's last access to this.
        while self.giving_up.load(Ordering::Acquire) != 0 {
            crate::msleep(1);
        }
        if let Some(q) = self.sink {
            // SAFETY: The queue's reference, given back once, here (type
            // invariant). No handler pushes to it any more: every ID whose
            // context names this queue held it (its drop destroyed the ID
            // first), the untaken requests' IDs were destroyed above, and
            // those given up on removal push nothing.
            unsafe { EventQueue::release(q) };
        }
    }
}

/// The event queue of a connection.
#[derive(Clone)]
pub struct CmEvents(pub(super) Arc<EventsInner>);

impl CmEvents {
    /// A new, empty queue, for one connection: a listener with this queue
    /// takes one connection request and refuses those after it.
    pub fn new() -> Result<Self> {
        Self::with_requests(1)
    }

    /// A new, empty queue whose listener takes `n` connection requests at
    /// a time (a server of `n` connections) and refuses those after them;
    /// a request taken and then dropped makes room for another.
    pub fn with_requests(n: u32) -> Result<Self> {
        Self::make(n, None)
    }

    /// As [`CmEvents::with_requests`], and `sink` is told of each event of
    /// the queue's IDs (see [`CmSink`]): so the holder of an ID nobody
    /// waits on learns of its device's removal, and of its peer's
    /// disconnect.
    pub fn with_sink(n: u32, sink: Arc<dyn CmSink>) -> Result<Self> {
        Self::make(n, Some(sink))
    }

    pub(super) fn make(n: u32, sink: Option<Arc<dyn CmSink>>) -> Result<Self> {
        let sink = sink.map(EventQueue::new_raw).transpose()?;
        let inner = Arc::pin_init(
            pin_init!(EventsInner {
                wq <- Opaque::ffi_init(|slot: *mut bindings::wait_queue_head| {
                    // SAFETY: `slot` is valid for writes and pinned.
                    unsafe { bindings::kverbs_init_waitqueue_head(slot) }
                }),
                count: AtomicU32::new(0),
                requests_left: AtomicU32::new(n),
                giving_up: AtomicU32::new(0),
                list <- new_mutex!(KVec::new()),
                sink,
            }),
            GFP_KERNEL,
        );
        match inner {
            Ok(inner) => Ok(CmEvents(inner)),
            Err(e) => {
                if let Some(q) = sink {
                    // SAFETY: From `new_raw` above; no handler has it.
                    unsafe { EventQueue::release(q) };
                }
                Err(e)
            }
        }
    }

    /// Events received and not taken yet. Taken events leave the queue,
    /// and so do those of an ID when it is destroyed.
    pub fn queued(&self) -> usize {
        self.0.list.lock().len()
    }
}

impl EventsInner {
    /// Takes the oldest event that `pred` accepts, if any.
    pub(super) fn take_where(&self, pred: impl Fn(&Event) -> bool) -> Option<Event> {
        let mut list = self.list.lock();
        let i = list.iter().position(pred)?;
        Some(remove(&mut list, i))
    }

    /// Drops the events of the ID of `token`, which was just destroyed:
    /// none can come any more. Connection requests carry their new ID's
    /// token, never their listener's, so none is dropped here.
    pub(super) fn forget_id(&self, token: u64) {
        let mut list = self.list.lock();
        while let Some(i) = list.iter().position(|e| e.token == token) {
            remove(&mut list, i);
        }
    }

    pub(super) fn wait_next(&self, seen: u32) {
        // SAFETY: The wait queue lives as long as `self`; `count` is an
        // `AtomicU32`, read by the helper with `READ_ONCE`.
        unsafe { bindings::kverbs_wait_u32_ne(self.wq.get(), self.count.as_ptr(), seen, 100) };
    }

    /// Waits for the event `want` of the ID of `token`; an error event of
    /// that ID fails the wait. Other events are left for whoever waits for
    /// them, and `DEVICE_REMOVAL` stays queued, so that every later wait of
    /// the ID fails with `ENODEV` too.
    pub(super) fn wait(
        &self,
        token: u64,
        want: u32,
        timeout_ms: u32,
        cancel: &Cancel,
    ) -> Result<Event> {
        self.wait_event(token, want, timeout_ms, cancel)
            .map_err(|(err, _)| err)
    }

    /// As [`EventsInner::wait`], with the error event that failed the wait,
    /// if one did.
    pub(super) fn wait_event(
        &self,
        token: u64,
        want: u32,
        timeout_ms: u32,
        cancel: &Cancel,
    ) -> core::result::Result<Event, (Error, Option<Event>)> {
        let deadline = Deadline::new(timeout_ms, cancel);
        loop {
            // Cancelled: no more events are taken, even one already there,
            // so that a cancelled multi-step operation (`resolve`) stops
            // at the step it is in, however fast the events come.
            if cancel.is_cancelled() {
                return Err((crate::errno::ecanceled(), None));
            }
            let seen = self.count.load(Ordering::Acquire);
            let found = {
                let mut list = self.list.lock();
                list.iter()
                    .position(|e| e.token == token && (e.kind == want || event_error(e).is_some()))
                    .map(|i| {
                        if list[i].kind == bindings::RDMA_CM_EVENT_DEVICE_REMOVAL
                            && want != bindings::RDMA_CM_EVENT_DEVICE_REMOVAL
                        {
                            list[i]
                        } else {
                            remove(&mut list, i)
                        }
                    })
            };
            if let Some(e) = found {
                if e.kind == want {
                    return Ok(e);
                }
                if let Some(err) = event_error(&e) {
                    pr_warn!(
                        "rdma_cm: {} (status {}) while waiting for {}\n",
                        event_msg(e.kind),
                        e.status,
                        event_msg(want)
                    );
                    return Err((err, Some(e)));
                }
            }
            deadline.check().map_err(|err| (err, None))?;
            self.wait_next(seen);
        }
    }
}

/// The name of the event `kind`, as the connection manager spells it
/// (`rdma_event_msg`: "device removal", ...).
pub(super) fn event_msg(kind: u32) -> &'static str {
    // SAFETY: `rdma_event_msg` returns a static, NUL-terminated string for
    // any value ("unrecognized event" for one it does not know).
    let s = unsafe { kernel::str::CStr::from_char_ptr(bindings::rdma_event_msg(kind)) };
    s.to_str().unwrap_or("unrecognized event")
}

/// Removes the event at `i`, keeping the order of the others (the events
/// of one ID are taken in the order they came).
pub(super) fn remove(list: &mut KVec<Event>, i: usize) -> Event {
    let len = list.len();
    list.as_mut_slice()[i..].rotate_left(1);
    let e = list[len - 1];
    crate::compat::truncate(list, len - 1);
    e
}

/// The error an event means, if it is one.
pub(super) fn event_error(e: &Event) -> Option<Error> {
    let default = match e.kind {
        bindings::RDMA_CM_EVENT_ADDR_ERROR | bindings::RDMA_CM_EVENT_ROUTE_ERROR => {
            -(kernel::bindings::EHOSTUNREACH as i32)
        }
        bindings::RDMA_CM_EVENT_CONNECT_ERROR | bindings::RDMA_CM_EVENT_UNREACHABLE => {
            -(kernel::bindings::ENETUNREACH as i32)
        }
        bindings::RDMA_CM_EVENT_REJECTED => -(kernel::bindings::ECONNREFUSED as i32),
        bindings::RDMA_CM_EVENT_DISCONNECTED => -(kernel::bindings::ECONNRESET as i32),
        bindings::RDMA_CM_EVENT_DEVICE_REMOVAL => -(kernel::bindings::ENODEV as i32),
        _ => return None,
    };
    // A rejection's status is a CM reason, not an errno.
    let errno = if e.status < 0 && e.kind != bindings::RDMA_CM_EVENT_REJECTED {
        e.status
    } else {
        default
    };
    Some(Error::from_errno(errno))
}

/// The event handler of every kverbs ID.
///
/// # Safety
///
/// Called by the connection manager for an ID created by [`CmId::new`](super::CmId::new)
/// (or a child of one), whose context is its live [`IdCtx`] -- for a
/// connection request, its listener's.
pub(super) unsafe extern "C" fn handler(
    id: *mut bindings::rdma_cm_id,
    ev: *mut bindings::rdma_cm_event,
) -> c_int {
    // SAFETY: The context is the ID's (or, for a connection request, its
    // listener's), live while the ID is; handlers stop before an ID is
    // destroyed.
    let ctx = unsafe { &*(*id).context.cast::<IdCtx>() };
    // SAFETY: The queue outlives the IDs whose context names it (type
    // invariant of `IdCtx`).
    let events = unsafe { &*ctx.events };
    // SAFETY: `ev` is valid during the call.
    let (kind, status) = unsafe { ((*ev).event, (*ev).status) };
    // SAFETY: `ev` and `id` are valid during the call, which is when the
    // private data they point to is.
    let (private, consumer_reject) = unsafe { private_data(id, ev, kind) };
    let mut child = None;
    let mut token = ctx.token;
    if kind == bindings::RDMA_CM_EVENT_DEVICE_REMOVAL {
        ctx.removed.store(true, Ordering::Release);
        // A connection request nobody took yet: its ID is given up now (a
        // non-zero return makes the connection manager destroy it), not
        // when the queue goes -- the device's removal waits for it.
        let mut list = events.list.lock();
        let untaken = list
            .iter()
            .position(|e| e.token == token && e.kind == bindings::RDMA_CM_EVENT_CONNECT_REQUEST);
        if let Some(i) = untaken {
            let e = remove(&mut list, i);
            events.requests_left.fetch_add(1, Ordering::AcqRel);
            // The queue's drop no longer sees this request: it waits for
            // this handler by this count instead.
            events.giving_up.fetch_add(1, Ordering::AcqRel);
            drop(list);
            if let Some(c) = e.child {
                // SAFETY: The request's context, owned by the event just
                // removed (so by nobody else); its ID is destroyed on our
                // return, with no handler call any more. `ctx` is not used
                // after this. Its reference to kverbs.ko may be the last:
                // given back from kverbs.ko's workqueue, which the exit
                // destroys first. That work can run before this handler's
                // last instructions (the decrement and return below) have:
                // an unload in that window -- the last other reference
                // gone in it too -- would run them in freed text, as any
                // callback that gives back its own module's last reference
                // can (kthreads have `module_put_and_kthread_exit`,
                // callbacks nothing). Accepted for now: the window is a few
                // instructions and no sleep, but a preemptible kernel may
                // preempt the task in it. The cure: return 0 and destroy
                // the ID from the work (`rdma_destroy_id` takes the
                // handler's mutex, so it waits for this return), which the
                // removal waits for through the device's reference.
                unsafe { IdCtx::free_deferred(c) };
            }
            // The last access to `events`: it may be freed once this is 0.
            events.giving_up.fetch_sub(1, Ordering::Release);
            return 1;
        }
    }
    if kind == bindings::RDMA_CM_EVENT_CONNECT_REQUEST {
        if events
            .requests_left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_err()
        {
            // As many connections as the queue takes: a non-zero return
            // makes the connection manager reject and destroy this new ID.
            return 1;
        }
        // The new ID came with its listener's context: it gets its own.
        let Ok(c) = IdCtx::new(ctx.events) else {
            pr_err!("rdma_cm: connection request refused: out of memory or kverbs.ko going\n");
            events.requests_left.fetch_add(1, Ordering::AcqRel);
            return 1;
        };
        // SAFETY: `c` is live (just made); this is the new ID's first event
        // and nobody else uses it yet.
        unsafe {
            token = c.as_ref().token;
            (*id).context = c.as_ptr().cast();
        }
        child = Some(c);
    }
    let pushed = events.list.lock().push(
        Event {
            id,
            token,
            kind,
            status,
            child,
            private,
            consumer_reject,
        },
        GFP_KERNEL,
    );
    if pushed.is_err() {
        pr_err!("rdma_cm: event {} lost: out of memory\n", kind);
        if let Some(c) = child {
            // SAFETY: Back to the listener's context, then the new one is
            // freed: the connection manager destroys the new ID on our
            // non-zero return, calling no handler for it any more.
            unsafe {
                (*id).context = core::ptr::from_ref(ctx).cast_mut().cast();
                IdCtx::free(c);
            }
            events.requests_left.fetch_add(1, Ordering::AcqRel);
            return 1;
        }
    }
    events.count.fetch_add(1, Ordering::AcqRel);
    // SAFETY: The wait queue is initialised and lives as long as `events`.
    unsafe { bindings::kverbs_wake_up(events.wq.get()) };
    if let Some(q) = events.sink {
        // SAFETY: `events` holds this reference until it is dropped (type
        // invariant of `EventsInner`), after the IDs whose context names it
        // (type invariant of `IdCtx`); the context's `LayerRef` keeps
        // kverbs.ko's exit from running while the ID's handler may.
        unsafe {
            EventQueue::push(
                ArcBorrow::from_raw(q.as_ptr()),
                CmEvent {
                    token,
                    kind,
                    status,
                },
            )
        };
    }
    0
}

/// The private data of the event `ev` of kind `kind` for `id`, copied: a
/// connection request's or reply's, or a consumer-defined rejection's
/// (then `true`); none for the other events.
///
/// # Safety
///
/// `id` and `ev` are the arguments of a call of the ID's event handler,
/// made by the connection manager, during that call.
unsafe fn private_data(
    id: *mut bindings::rdma_cm_id,
    ev: *mut bindings::rdma_cm_event,
    kind: u32,
) -> (PrivateData, bool) {
    match kind {
        bindings::RDMA_CM_EVENT_CONNECT_REQUEST
        | bindings::RDMA_CM_EVENT_CONNECT_RESPONSE
        | bindings::RDMA_CM_EVENT_ESTABLISHED => {
            // SAFETY: For these events of an RC ID the union's member is
            // `conn`, whose private data (if any) is valid for its length
            // during the call (the caller's guarantee).
            let pd = unsafe {
                let conn = &(*ev).param.conn;
                PrivateData::copy_from(conn.private_data.cast(), usize::from(conn.private_data_len))
            };
            (pd, false)
        }
        bindings::RDMA_CM_EVENT_REJECTED => {
            let mut len = 0u8;
            // SAFETY: A `REJECTED` event during its handler's call, as
            // `rdma_consumer_reject_data` requires; it gives null unless
            // the rejection is consumer defined, else data valid for `len`
            // bytes during the call.
            let data = unsafe { bindings::rdma_consumer_reject_data(id, ev, &mut len) };
            if data.is_null() {
                return (PrivateData::EMPTY, false);
            }
            // SAFETY: As above.
            (
                unsafe { PrivateData::copy_from(data.cast(), usize::from(len)) },
                true,
            )
        }
        _ => (PrivateData::EMPTY, false),
    }
}
