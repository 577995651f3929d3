// SPDX-License-Identifier: GPL-2.0

//! Completion queues.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A [`Cq`] is allocated with `ib_alloc_cq`, so the RDMA core polls it and
//! calls the `done` function of each work request's `ib_cqe`.  kverbs'
//! `done` ([`crate::qp`]) records the completion in the work request's slot
//! and wakes the CQ's wait queue.  The polling context is chosen per CQ:
//!
//! - [`PollCtx::Direct`]: nobody polls but the waiter, which calls
//!   `ib_process_cq_direct` in a loop (lowest latency, burns a CPU);
//! - [`PollCtx::Softirq`]: the core polls in softirq context on interrupt;
//! - [`PollCtx::Workqueue`]: the core polls from a workqueue.
//!
//! A CQ that overflows loses completions (and rxe then moves its QPs to
//! ERR): each QP takes room for every completion it can have outstanding
//! when it is created, and a QP for which there is no room left is refused.

use crate::bindings;
use crate::device::Device;
use crate::qp::Slot;
use core::{
    ptr::NonNull,
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
};
use kernel::{
    error::from_err_ptr,
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
    types::ARef,
    types::Opaque,
};

/// Where completions are polled.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PollCtx {
    /// By the waiter itself (`IB_POLL_DIRECT`).
    Direct,
    /// In softirq context (`IB_POLL_SOFTIRQ`).
    Softirq,
    /// In a workqueue (`IB_POLL_WORKQUEUE`).
    Workqueue,
}

impl PollCtx {
    /// The name used in control strings and reports.
    pub fn name(self) -> &'static str {
        match self {
            PollCtx::Direct => "direct",
            PollCtx::Softirq => "softirq",
            PollCtx::Workqueue => "workqueue",
        }
    }

    /// Parses a name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "direct" => Some(PollCtx::Direct),
            "softirq" => Some(PollCtx::Softirq),
            "workqueue" => Some(PollCtx::Workqueue),
            _ => None,
        }
    }
}

/// A completion queue, freed when the last of its users (queue pairs, this
/// handle) is dropped.
#[derive(Clone)]
pub struct Cq(Arc<CqInner>);

/// # Invariants
///
/// `cq` was allocated by `__ib_alloc_cq` on `dev` with `cq_context` pointing
/// to `*wq`, an initialised wait queue that lives in its own allocation as
/// long as the CQ. `room` is the number of its entries that no QP has
/// taken.
pub(crate) struct CqInner {
    cq: NonNull<bindings::ib_cq>,
    ctx: PollCtx,
    room: AtomicU32,
    wq: Pin<KBox<Opaque<bindings::wait_queue_head>>>,
    /// Request slots whose owner (an SRQ) is gone while completions naming
    /// them may still be in this CQ: freed with it.
    kept: Pin<KBox<Mutex<KVec<KVec<Slot>>>>>,
    dev: ARef<Device>,
}

// SAFETY: A CQ may be used and freed from any thread.
unsafe impl Send for CqInner {}
// SAFETY: The operations on `&CqInner` (polling, waking, waiting) are thread
// safe.
unsafe impl Sync for CqInner {}

impl Cq {
    /// Allocates a CQ of at least `nr_cqe` entries on `dev`.
    pub fn new(dev: &Device, nr_cqe: u32, ctx: PollCtx) -> Result<Self> {
        let wq = KBox::pin_init(
            Opaque::ffi_init(|slot: *mut bindings::wait_queue_head| {
                // SAFETY: `slot` is valid for writes and pinned.
                unsafe { bindings::kverbs_init_waitqueue_head(slot) }
            }),
            GFP_KERNEL,
        )?;
        let kept = KBox::pin_init(new_mutex!(KVec::new()), GFP_KERNEL)?;
        let poll = match ctx {
            PollCtx::Direct => bindings::IB_POLL_DIRECT,
            PollCtx::Softirq => bindings::IB_POLL_SOFTIRQ,
            PollCtx::Workqueue => bindings::IB_POLL_WORKQUEUE,
        };
        // SAFETY: `dev` is live; the context is the pinned wait queue, which
        // outlives the CQ (freed after `ib_free_cq` in `drop`).
        let cq = from_err_ptr(unsafe {
            bindings::__ib_alloc_cq(
                dev.as_raw(),
                wq.get().cast(),
                nr_cqe.try_into()?,
                0,
                poll,
                kernel::c_str!("kverbs").as_char_ptr(),
            )
        })?;
        let cq = NonNull::new(cq).ok_or(ENOMEM)?;
        // SAFETY: Just allocated; the driver set its real size.
        let size = unsafe { (*cq.as_ptr()).cqe };
        // INVARIANT: allocated above with `wq` as its context. If the `Arc`
        // cannot be allocated, dropping the `CqInner` frees the CQ.
        Ok(Cq(Arc::new(
            CqInner {
                cq,
                ctx,
                room: AtomicU32::new(size.try_into().unwrap_or(0)),
                wq,
                kept,
                dev: dev.into(),
            },
            GFP_KERNEL,
        )?))
    }

    /// Keeps `slots` until the CQ is freed: completions naming them may
    /// still be in it. On allocation failure they are leaked (and kmemleak
    /// told), never freed early.
    pub(crate) fn keep_slots(&self, slots: KVec<Slot>) {
        let mut kept = self.0.kept.lock();
        if kept.reserve(1, GFP_KERNEL).is_ok() {
            // Cannot fail: the room was reserved.
            let _ = kept.push(slots, GFP_KERNEL);
        } else {
            let (ptr, _, _) = slots.into_raw_parts();
            // SAFETY: Plain annotation of a live allocation.
            unsafe { bindings::kverbs_kmemleak_not_leak(ptr.cast()) };
        }
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::ib_cq {
        self.0.cq.as_ptr()
    }

    /// The polling context.
    pub fn poll_ctx(&self) -> PollCtx {
        self.0.ctx
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.0.dev
    }

    /// The entries no QP has taken yet.
    pub fn room(&self) -> u32 {
        self.0.room.load(Ordering::Relaxed)
    }

    /// Takes `n` entries for a QP, or fails with `EINVAL` if fewer are
    /// left.
    pub(crate) fn take_room(&self, n: u32) -> Result {
        self.0
            .room
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(n))
            .map(|_| ())
            .map_err(|left| {
                pr_err!(
                    "{}: a QP needs {} CQ entries, the CQ has {} left\n",
                    self.device().name(),
                    n,
                    left
                );
                EINVAL
            })
    }

    /// Gives back `n` entries taken by [`Cq::take_room`].
    pub(crate) fn give_room(&self, n: u32) {
        self.0.room.fetch_add(n, Ordering::AcqRel);
    }

    /// One step of a wait for `*state == want`, which a completion's
    /// `done` sets: on a [`PollCtx::Direct`] CQ, processes up to 16
    /// completions (and yields the CPU if there were none); otherwise sleeps
    /// on the CQ's wait queue until it is woken with `*state == want`, at
    /// most `slice_ms`. The caller checks `*state` and its deadline.
    pub(crate) fn wait_step(&self, state: &AtomicU32, want: u32, slice_ms: u32) {
        if self.0.ctx == PollCtx::Direct {
            // SAFETY: The CQ is live and polled directly. Concurrent calls
            // are allowed: `ib_process_cq_direct` polls into an array on its
            // own stack, the driver's `poll_cq` takes the CQ's lock, and the
            // `done` callbacks touch only their own slots.
            if unsafe { bindings::ib_process_cq_direct(self.as_raw(), 16) } == 0 {
                // SAFETY: Plain helper; we are in process context.
                unsafe { bindings::kverbs_cond_resched() };
            }
            return;
        }
        // SAFETY: The wait queue is this CQ's (type invariant), live while
        // `self` is; `state` is read by the helper with `READ_ONCE`.
        unsafe { bindings::kverbs_wait_u32(self.0.wq.get(), state.as_ptr(), want, slice_ms) };
    }
}

impl Cq {
    /// Sleeps on the CQ's wait queue until `*v >= want`, at most
    /// `slice_ms` (the `done` callbacks of a stream wake it).
    pub(crate) fn wait_u64_ge(&self, v: &AtomicU64, want: u64, slice_ms: u32) {
        // SAFETY: The wait queue is this CQ's (type invariant), live while
        // `self` is; `v` is read by the helper with `READ_ONCE`.
        unsafe { bindings::kverbs_wait_u64_ge(self.0.wq.get(), v.as_ptr(), want, slice_ms) };
    }
}

/// Wakes the waiters of the CQ whose `cq_context` is a kverbs wait queue.
///
/// # Safety
///
/// `cq` must be a CQ allocated by [`Cq::new`], inside a `done` callback.
pub(crate) unsafe fn wake_waiters(cq: *mut bindings::ib_cq) {
    // SAFETY: By the type invariant of `CqInner` the context is the live
    // wait queue; `done` callbacks run while the CQ exists.
    unsafe { bindings::kverbs_wake_up((*cq).cq_context.cast()) };
}

impl Drop for CqInner {
    fn drop(&mut self) {
        if self.ctx == PollCtx::Softirq {
            // `ib_free_cq` alone can free the CQ under the tail of a
            // softirq poll that re-arms it (see the helper).
            // SAFETY: By the type invariant the CQ is live and polled in
            // softirq context; no QP uses it any more.
            unsafe { bindings::kverbs_cq_quiesce_softirq(self.cq.as_ptr()) };
        }
        // SAFETY: By the type invariant the CQ is live; this is the last
        // reference, so every QP using it has been destroyed. The wait queue
        // is freed after this (fields drop after `drop`).
        unsafe { bindings::ib_free_cq(self.cq.as_ptr()) };
    }
}
