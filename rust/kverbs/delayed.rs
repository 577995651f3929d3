// SPDX-License-Identifier: GPL-2.0

//! A handler called in process context after a delay, and again as long as
//! it asks to be: a ULP's timers (NVMe's keep-alive, a reconnect).
//!
//! C header: [`include/linux/workqueue.h`](srctree/include/linux/workqueue.h)
//!
//! A [`Delayed`] is a `struct delayed_work` of kverbs.ko's (one
//! `INIT_DELAYED_WORK` site, one lockdep class) on its `kverbs_events`
//! workqueue, whose function -- kverbs code, never a module's -- only
//! hands a tick to an event queue of the layer's (see [`crate::event`]):
//! the handler is called from that queue's run, as an event sink is. So it
//! has an event sink's rules and guarantees: it may sleep, and drop its own
//! [`Delayed`]; the drop of a [`Delayed`] waits for a call in progress
//! (unless made from a delivery), after which none comes -- and makes the
//! call of a tick that came and was not delivered yet itself, on the
//! dropping task: never drop a [`Delayed`] holding a lock its handler
//! takes; and when the
//! handler's module goes, kverbs.ko drops the handler of a [`Delayed`] the
//! module leaked (`mem::forget`, an `Arc` cycle), after its calls in
//! progress. The drop also disables the delayed work (`disable_delayed_work_sync`),
//! so nothing re-arms it after.
//!
//! 6.12's `kernel::workqueue` has no delayed work, 7.3's cannot cancel
//! one: this serves both.

use crate::{
    bindings,
    event::{seal, EventQueue, Sink},
    layer_ref::LayerRef,
};
use core::{
    ptr::NonNull,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{
    prelude::*,
    sync::{Arc, ArcBorrow},
    types::Opaque,
};

/// What a [`Delayed`] calls.
pub trait DelayedHandler: Send + Sync {
    /// Called in process context (a worker of kverbs.ko's workqueue
    /// `kverbs_events`), one call at a time, with an event sink's rules
    /// ([`crate::event::EventSink::event`]: it may sleep and drop its own
    /// [`Delayed`]; it must not block without a bound, nor panic). Returns
    /// the milliseconds after which to be called again, or `None`.
    fn run(&self) -> Option<u32>;

    /// Where the handler's code is, as [`crate::event::EventSink`]'s
    /// method of the same name. Not to be implemented.
    #[doc(hidden)]
    fn code_address(&self, _: seal::Seal) -> [usize; 2] {
        [
            <Self as DelayedHandler>::run as *const () as usize,
            core::ptr::drop_in_place::<Self> as *const () as usize,
        ]
    }
}

/// The delayed work item, and the event queue its function hands ticks to.
///
/// # Invariants
///
/// `dwork` is initialised with [`tick`] as its function. `queue` is set
/// once, before `dwork` is first queued, to the queue of the [`Delayed`]
/// that holds this timer; `dwork` runs and is queued only while that
/// [`Delayed`] lives: its drop disables it, waiting for a run in progress,
/// before it gives the queue back. So a timer whose last reference goes
/// has `dwork` disabled and idle.
#[pin_data]
struct Timer {
    #[pin]
    dwork: Opaque<bindings::delayed_work>,
    queue: AtomicPtr<EventQueue<Ticks>>,
}

// SAFETY: The delayed work item is a kernel object made for use from any
// thread; the queue pointer is atomic.
unsafe impl Send for Timer {}
// SAFETY: As above.
unsafe impl Sync for Timer {}

impl Timer {
    /// Queues the work item after `ms`: `false` if it is pending already,
    /// or disabled (its [`Delayed`] dropped).
    fn arm(&self, ms: u32) -> bool {
        // SAFETY: `dwork` is initialised and lives with `self`; the
        // workqueue is kverbs.ko's, live while a `Delayed` holds its
        // `LayerRef` -- and once that is dropped, `dwork` is disabled and
        // this queues nothing (type invariant).
        unsafe { bindings::kverbs_queue_delayed_work(self.dwork.get(), ms) }
    }
}

/// The sink of a timer's event queue: the handler, and the timer to arm
/// again after a call (kept by this reference while a call runs).
struct Ticks {
    handler: Arc<dyn DelayedHandler>,
    timer: Arc<Timer>,
}

impl Sink for Ticks {
    type Ev = ();

    fn deliver(&self, &(): &()) {
        if let Some(ms) = self.handler.run() {
            // Refused once the `Delayed` was dropped (disabled).
            self.timer.arm(ms);
        }
    }

    fn lost(&self, _: u64) {
        // Ticks are not counted, one is as good as several; but one lost
        // (the run could not allocate to take it) is called here, so that
        // the handler is not left unarmed for ever.
        self.deliver(&());
    }

    fn code(&self) -> [usize; 2] {
        self.handler.code_address(seal::Seal(()))
    }
}

/// The work item's function: hands a tick to the timer's queue.
///
/// # Safety
///
/// Called by the workqueue with the `work` of a [`Timer`]'s `dwork`.
unsafe extern "C" fn tick(work: *mut bindings::work_struct) {
    let off =
        core::mem::offset_of!(bindings::delayed_work, work) + core::mem::offset_of!(Timer, dwork);
    // SAFETY: `work` is inside the `dwork` of a `Timer` (the only work
    // items with this function), which runs only while its `Delayed`
    // lives, holding a reference to the timer (type invariant); `Opaque`
    // is transparent.
    let timer = unsafe { &*(work.cast::<u8>().sub(off).cast::<Timer>()) };
    let q = timer.queue.load(Ordering::Acquire);
    // SAFETY: Set before the work item was first queued to the queue of
    // the `Delayed` that lives while this runs, which holds the reference
    // `new_raw` gave (type invariant).
    let q = unsafe { ArcBorrow::from_raw(q) };
    // SAFETY: The `Delayed` holds a `LayerRef` until its drop, after
    // disabling the work item, which waits for this run.
    unsafe { EventQueue::push(q, ()) };
}

/// A timer: a handler called after [`Delayed::arm`]'s delay, and again
/// after the delay it returns, until this is dropped.
///
/// # Invariants
///
/// `queue` is the reference [`EventQueue::new_raw`] gave, given back on
/// drop after `timer`'s work item is disabled; `timer.queue` is `queue`.
pub struct Delayed {
    timer: Arc<Timer>,
    queue: NonNull<EventQueue<Ticks>>,
    /// Dropped last: the work item's function is kverbs.ko's.
    _layer: LayerRef,
}

// SAFETY: The handle only arms and drops the timer, from any thread; the
// handler is `Send + Sync`.
unsafe impl Send for Delayed {}
// SAFETY: `&Delayed` only arms, which any thread may.
unsafe impl Sync for Delayed {}

impl Delayed {
    /// A timer that calls `handler`; not armed yet.
    pub fn new(handler: Arc<dyn DelayedHandler>) -> Result<Self> {
        let layer = LayerRef::new()?;
        let timer = Arc::pin_init(
            pin_init!(Timer {
                dwork <- Opaque::ffi_init(|dw: *mut bindings::delayed_work| {
                    // SAFETY: `dw` is valid for writes and pinned.
                    unsafe { bindings::kverbs_init_delayed_work(dw, Some(tick)) }
                }),
                queue: AtomicPtr::new(core::ptr::null_mut()),
            }),
            GFP_KERNEL,
        )?;
        let ticks = Arc::new(
            Ticks {
                handler,
                timer: timer.clone(),
            },
            GFP_KERNEL,
        )?;
        let queue = EventQueue::new_raw(ticks)?;
        timer.queue.store(queue.as_ptr(), Ordering::Release);
        Ok(Delayed {
            timer,
            queue,
            _layer: layer,
        })
    }

    /// Calls the handler after `ms` milliseconds; `false` if a call is
    /// pending already (its delay is kept).
    pub fn arm(&self, ms: u32) -> bool {
        self.timer.arm(ms)
    }
}

impl Drop for Delayed {
    fn drop(&mut self) {
        // No tick is queued after this, and none is being queued: the work
        // item's function only queues a tick, and never waits.
        // SAFETY: `dwork` is initialised and lives with `self.timer`.
        unsafe { bindings::kverbs_disable_delayed_work_sync(self.timer.dwork.get()) };
        // SAFETY: `new_raw`'s reference (type invariant), given back once;
        // the work item that pushes to it is disabled and idle. This waits
        // for a call of the handler in progress, unless made from a
        // delivery, and drops the handler.
        unsafe { EventQueue::release(self.queue) };
    }
}
