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
//! - [`PollCtx::Direct`]: nobody polls but the waiters, which call
//!   `ib_process_cq_direct` in a loop (lowest latency, burns a CPU). One
//!   task at a time: `__ib_process_cq` polls a batch onto its stack and
//!   calls each `done` with no lock held, so a second task could reap the
//!   rest of the batch, drain marker included, and free the slots the
//!   first is still to write (a QP dropped on another thread). A task that
//!   finds the CQ being processed yields instead ([`Cq::process_direct`]);
//! - [`PollCtx::Adaptive`]: polled by the waiters as a direct CQ, but a
//!   waiter whose completion is not near sleeps instead of spinning
//!   ([`adaptive`]): about the latency of a direct CQ, and the CPU left to
//!   the device while a pipeline of requests runs;
//! - [`PollCtx::Softirq`]: the core polls in softirq context on interrupt;
//! - [`PollCtx::Workqueue`]: the core polls from a workqueue.
//!
//! A CQ that overflows loses completions (and rxe then moves its QPs to
//! ERR): each QP takes room for every completion it can have outstanding
//! when it is created, and a QP for which there is no room left is refused.

use crate::bindings;
use crate::device::Device;
use crate::layer_ref::LayerRef;
use crate::qp::Slot;
use crate::srq::QpTable;
use crate::ARef;
use core::{
    mem::ManuallyDrop,
    ptr::NonNull,
    sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
};
use kernel::{
    error::from_err_ptr,
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
    types::Opaque,
};

pub mod adaptive;

use self::adaptive::Plan;

/// The most CQs a wait sleeps on at once ([`adaptive::Poller`]): the
/// others are polled when it wakes (at most
/// [`adaptive::MAX_CQ_SLEEP_NS`] later).
pub const MAX_SLEEP_CQS: usize = bindings::KVERBS_SLEEP_CQS as usize;

/// What a CQ keeps for completions still in it: slots, and their table.
type Kept = (KVec<Slot>, Option<Arc<QpTable>>);

/// Leaks kept slots (kmemleak told) and their table: completions may still
/// name them where they cannot be kept until the CQ is freed.
fn leak_kept((slots, table): Kept) {
    crate::qp::leak(slots);
    if let Some(t) = table {
        core::mem::forget(t);
    }
}

/// Where completions are polled.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PollCtx {
    /// By the waiter itself (`IB_POLL_DIRECT`), spinning.
    Direct,
    /// By the waiter itself (`IB_POLL_DIRECT`), sleeping while its
    /// completion is not near ([`adaptive`]).
    Adaptive,
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
            PollCtx::Adaptive => "adaptive",
            PollCtx::Softirq => "softirq",
            PollCtx::Workqueue => "workqueue",
        }
    }

    /// Parses a name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "direct" => Some(PollCtx::Direct),
            "adaptive" => Some(PollCtx::Adaptive),
            "softirq" => Some(PollCtx::Softirq),
            "workqueue" => Some(PollCtx::Workqueue),
            _ => None,
        }
    }

    /// Whether the waiters poll (`IB_POLL_DIRECT`): [`PollCtx::Direct`] and
    /// [`PollCtx::Adaptive`].
    pub fn polled_by_waiters(self) -> bool {
        matches!(self, PollCtx::Direct | PollCtx::Adaptive)
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
/// long as the CQ (dropped only after `ib_free_cq` freed it, else leaked).
/// `room` is the number of its entries that no QP has taken. On a CQ
/// polled by its waiters ([`PollCtx::polled_by_waiters`]),
/// `ib_process_cq_direct` is only called by the task that set `processing`
/// (and clears it after), which bumps `gen` after each batch it processed.
/// An adaptive CQ's completion handler is the helpers' `kverbs_cq_event`,
/// which wakes `*wq`.
pub(crate) struct CqInner {
    cq: NonNull<bindings::ib_cq>,
    ctx: PollCtx,
    room: AtomicU32,
    processing: AtomicBool,
    /// Times a task found the CQ being processed by another and yielded.
    backoffs: AtomicU64,
    wq: ManuallyDrop<Pin<KBox<Opaque<bindings::wait_queue_head>>>>,
    /// Batches processed by the waiters (wrapping): a sleeper on the CQ
    /// that read it before its last look at its completion does not sleep
    /// if another task has processed a batch since.
    gen: AtomicU32,
    /// Request slots whose owner (an SRQ) is gone while completions naming
    /// them may still be in this CQ, and the QP table they name: freed
    /// with it.
    kept: Pin<KBox<Mutex<KVec<Kept>>>>,
    dev: ARef<Device>,
    /// Given back once the CQ is freed; else leaked with it.
    _layer: ManuallyDrop<LayerRef>,
}

// SAFETY: A CQ may be used and freed from any thread.
unsafe impl Send for CqInner {}
// SAFETY: The operations on `&CqInner` (polling, waking, waiting) are thread
// safe.
unsafe impl Sync for CqInner {}

impl Cq {
    /// Allocates a CQ of at least `nr_cqe` entries on `dev`; `EINVAL` for
    /// none (Linux 7.x's `__ib_alloc_cq` warns on it: found by the
    /// exerciser).
    pub fn new(dev: &Device, nr_cqe: u32, ctx: PollCtx) -> Result<Self> {
        if nr_cqe == 0 {
            return Err(EINVAL);
        }
        let wq = KBox::pin_init(
            Opaque::ffi_init(|slot: *mut bindings::wait_queue_head| {
                // SAFETY: `slot` is valid for writes and pinned.
                unsafe { bindings::kverbs_init_waitqueue_head(slot) }
            }),
            GFP_KERNEL,
        )?;
        let kept = KBox::pin_init(new_mutex!(KVec::new()), GFP_KERNEL)?;
        let poll = match ctx {
            PollCtx::Direct | PollCtx::Adaptive => bindings::IB_POLL_DIRECT,
            PollCtx::Softirq => bindings::IB_POLL_SOFTIRQ,
            PollCtx::Workqueue => bindings::IB_POLL_WORKQUEUE,
        };
        // kverbs.ko's, held while the CQ may call its code (the requests'
        // `done`, an adaptive CQ's handler): until `ib_free_cq` returned.
        let layer = LayerRef::new()?;
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
        if ctx == PollCtx::Adaptive {
            // SAFETY: Just allocated as a direct CQ whose context is the
            // wait queue; no QP uses it yet, so the driver cannot be
            // calling its handler.
            unsafe { bindings::kverbs_cq_set_event_handler(cq.as_ptr()) };
        }
        // SAFETY: Just allocated; the driver set its real size.
        let size = unsafe { (*cq.as_ptr()).cqe };
        // INVARIANT: allocated above with `wq` as its context, and an
        // adaptive one given the helpers' handler. If the `Arc` cannot be
        // allocated, dropping the `CqInner` frees the CQ.
        Ok(Cq(Arc::new(
            CqInner {
                cq,
                ctx,
                room: AtomicU32::new(size.try_into().unwrap_or(0)),
                processing: AtomicBool::new(false),
                backoffs: AtomicU64::new(0),
                wq: ManuallyDrop::new(wq),
                gen: AtomicU32::new(0),
                kept,
                dev: dev.into(),
                _layer: ManuallyDrop::new(layer),
            },
            GFP_KERNEL,
        )?))
    }

    /// Keeps `slots` (and the SRQ table they name) until the CQ is freed:
    /// completions naming them may still be in it. On allocation failure
    /// they are leaked (and kmemleak told), never freed early.
    pub(crate) fn keep_slots(&self, slots: KVec<Slot>, table: Option<Arc<QpTable>>) {
        let mut kept = self.0.kept.lock();
        if kept.reserve(1, GFP_KERNEL).is_ok() {
            // Cannot fail: the room was reserved.
            let _ = kept.push((slots, table), GFP_KERNEL);
        } else {
            leak_kept((slots, table));
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

    /// Processes up to `budget` completions of a CQ polled by its waiters
    /// (direct or adaptive), calling their `done` functions, and returns
    /// how many; 0 on other CQs, and 0 when another task is processing this
    /// one (its batch may hold completions whose slots are freed as soon as
    /// their drain marker is seen, so two tasks never process one CQ at
    /// once).
    pub(crate) fn process_direct(&self, budget: u32) -> u32 {
        let inner = &self.0;
        if !inner.ctx.polled_by_waiters() {
            return 0;
        }
        if inner
            .processing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            inner.backoffs.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        // SAFETY: The CQ is live and polled directly, and this task is the
        // only one processing it (`processing`, type invariant): every
        // `done` it calls runs before another task can see the marker of a
        // drain that follows it and free the slots the batch names.
        let n = unsafe { bindings::ib_process_cq_direct(inner.cq.as_ptr(), budget as i32) };
        if n > 0 {
            inner.gen.fetch_add(1, Ordering::Release);
        }
        inner.processing.store(false, Ordering::Release);
        n.max(0) as u32
    }

    /// Makes the calling task the one that processes `a` and `b` (if they
    /// are polled directly) until the guard is dropped, waiting
    /// (`cond_resched`) for a task processing them: for a C function that
    /// calls `ib_process_cq_direct` itself (a driver's drain). Taken in
    /// address order, so that two such tasks never wait for each other.
    pub(crate) fn hold_direct<'a>(a: &'a Cq, b: &'a Cq) -> [Option<DirectHold<'a>>; 2] {
        let (first, second) = if a.as_raw() <= b.as_raw() {
            (a, b)
        } else {
            (b, a)
        };
        let one = first.hold();
        let two = if core::ptr::eq(first.as_raw(), second.as_raw()) {
            None
        } else {
            second.hold()
        };
        [one, two]
    }

    fn hold(&self) -> Option<DirectHold<'_>> {
        if !self.0.ctx.polled_by_waiters() {
            return None;
        }
        while self
            .0
            .processing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.0.backoffs.fetch_add(1, Ordering::Relaxed);
            crate::cond_resched();
        }
        // INVARIANT: `processing` was set above, from clear.
        Some(DirectHold(self))
    }

    /// How many times a task found this direct CQ being processed by
    /// another and yielded instead: a diagnostic of concurrent waiters.
    pub fn direct_backoffs(&self) -> u64 {
        self.0.backoffs.load(Ordering::Relaxed)
    }

    /// One step of a wait for `*state == want`, which a completion's
    /// `done` sets, begun at `since` (`now_ns`): on a CQ polled by its
    /// waiters, processes up to 16 completions, and if there were none (or
    /// another task is processing) yields the CPU (direct) or spins or
    /// sleeps as [`adaptive`] decides for a wait that expects nothing;
    /// otherwise sleeps on the CQ's wait queue until it is woken with
    /// `*state == want`, at most `slice_ms`, or a signal comes. The caller
    /// checks `*state` and its deadline.
    pub(crate) fn wait_step(&self, state: &AtomicU32, want: u32, since: u64, slice_ms: u32) {
        self.wait_step_as(state, want, since, slice_ms, true)
    }

    /// [`Cq::wait_step`], ignoring signals unless `interruptible`: a drain
    /// must wait for its marker even in a task that is being killed.
    pub(crate) fn wait_step_as(
        &self,
        state: &AtomicU32,
        want: u32,
        since: u64,
        slice_ms: u32,
        interruptible: bool,
    ) {
        if self.0.ctx.polled_by_waiters() {
            let seen = self.gen();
            // The caller looked at `*state` before `seen`: look again.
            if self.process_direct(16) == 0 && state.load(Ordering::Acquire) != want {
                self.idle(since, crate::now_ns, 0, false, seen);
            }
            return;
        }
        // SAFETY: The wait queue is this CQ's (type invariant), live while
        // `self` is; `state` is read by the helper with `READ_ONCE`.
        unsafe {
            bindings::kverbs_wait_u32(
                self.0.wq.get(),
                state.as_ptr(),
                want,
                slice_ms,
                interruptible,
            )
        };
    }
}

impl Cq {
    /// What a waiter of a CQ polled by its waiters does after a poll that
    /// found nothing, in a wait begun at `since` that expects to take
    /// `expect` ns (0: unknown), with requests outstanding behind the
    /// awaited one if `pipelined`: yield the CPU (direct, or while another
    /// task is processing the CQ), or spin, or sleep until the CQ's next
    /// completion ([`adaptive`]). `seen` is [`Cq::gen`] read before
    /// the caller last looked at its completion: a sleep on the CQ does
    /// not begin if another task is processing the CQ or has processed a
    /// batch since (it may have reaped that completion, and woken the CQ's
    /// wait queue before this task was on it). `now` gives the time
    /// (`now_ns`), asked only by the adaptive policy. Process context; may
    /// sleep.
    pub(crate) fn idle(
        &self,
        since: u64,
        now: impl FnOnce() -> u64,
        expect: u64,
        pipelined: bool,
        seen: u32,
    ) {
        if self.0.ctx != PollCtx::Adaptive || self.0.processing.load(Ordering::Relaxed) {
            crate::cond_resched();
            return;
        }
        match adaptive::plan(since, expect, pipelined, now()) {
            Plan::Spin => crate::cond_resched(),
            Plan::Arm => {
                Cq::sleep_on_gen([self], adaptive::MAX_CQ_SLEEP_NS, Some((self, seen)));
            }
        }
    }

    /// How many batches the waiters have processed (wrapping): read before
    /// a look at a completion, for [`Cq::idle`].
    pub(crate) fn gen(&self) -> u32 {
        self.0.gen.load(Ordering::Acquire)
    }

    /// Sleeps until the next completion of one of `cqs` or `timeout_ns`
    /// (at most [`adaptive::MAX_CQ_SLEEP_NS`]), arming them (`ib_req_notify_cq`)
    /// after the task is on their wait queues; returns at once if one of
    /// them had completions when armed. Only adaptive CQs are armed, the
    /// first [`MAX_SLEEP_CQS`] of them; with none, it only yields. Returns
    /// whether it slept (or could have: armed them). Process context;
    /// sleeps.
    pub(crate) fn sleep_on<'c>(cqs: impl IntoIterator<Item = &'c Cq>, timeout_ns: u64) -> bool {
        Self::sleep_on_gen(cqs, timeout_ns, None)
    }

    /// [`Cq::sleep_on`], not sleeping if another task is processing
    /// `gen`'s CQ or has processed a batch since its [`Cq::gen`] was `seen`
    /// (it bumps the generation before it lets go of the CQ).
    fn sleep_on_gen<'c>(
        cqs: impl IntoIterator<Item = &'c Cq>,
        timeout_ns: u64,
        gen: Option<(&Cq, u32)>,
    ) -> bool {
        let mut raw = [core::ptr::null_mut(); MAX_SLEEP_CQS];
        let mut n = 0;
        for cq in cqs {
            let p = cq.as_raw();
            if n < MAX_SLEEP_CQS && cq.0.ctx == PollCtx::Adaptive && !raw[..n].contains(&p) {
                raw[n] = p;
                n += 1;
            }
        }
        if n == 0 {
            crate::cond_resched();
            return false;
        }
        let us = timeout_ns.clamp(1000, adaptive::MAX_CQ_SLEEP_NS) / 1000;
        let (busy, gen, seen) = match gen {
            Some((cq, seen)) => (
                cq.0.processing.as_ptr().cast_const().cast(),
                cq.0.gen.as_ptr().cast_const(),
                seen,
            ),
            None => (core::ptr::null(), core::ptr::null(), 0),
        };
        // SAFETY: The first `n` pointers are distinct live adaptive CQs
        // (borrowed for the call): direct CQs whose context is their wait
        // queue and whose handler wakes it (type invariant of `CqInner`).
        // At most `MAX_CQ_SLEEP_NS / 1000`, `us` fits the `unsigned int`.
        // `busy` and `gen` point into a CQ borrowed for the call; the
        // helper only reads them (atomic loads; an atomic has the layout of
        // its `bool`, one byte of 0 or 1, or `u32`).
        let r = unsafe {
            bindings::kverbs_cq_sleep(raw.as_ptr(), n as u32, us as u32, busy, gen, seen)
        };
        adaptive::count_cq_sleep(r);
        true
    }

    /// Sleeps on the CQ's wait queue until `*v >= want`, at most
    /// `slice_ms` (the `done` callbacks of a stream wake it).
    pub(crate) fn wait_u64_ge(&self, v: &AtomicU64, want: u64, slice_ms: u32) {
        // SAFETY: The wait queue is this CQ's (type invariant), live while
        // `self` is; `v` is read by the helper with `READ_ONCE`.
        unsafe { bindings::kverbs_wait_u64_ge(self.0.wq.get(), v.as_ptr(), want, slice_ms) };
    }
}

/// A direct CQ held by [`Cq::hold_direct`]: no other task processes it
/// until this is dropped.
///
/// # Invariants
///
/// The task that made it set the CQ's `processing` flag (it was clear):
/// the drop clears it.
pub(crate) struct DirectHold<'a>(&'a Cq);

impl Drop for DirectHold<'_> {
    fn drop(&mut self) {
        // The holder may have processed completions (a driver's drain).
        self.0 .0.gen.fetch_add(1, Ordering::Release);
        self.0 .0.processing.store(false, Ordering::Release);
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
        // reference, so every QP using it has been destroyed (or its
        // destruction failed: then the helper keeps the CQ).
        if unsafe { bindings::kverbs_free_cq(self.cq.as_ptr()) } {
            // SAFETY: The CQ is freed: nothing names the wait queue any
            // more, and it is not used after this.
            unsafe { ManuallyDrop::drop(&mut self.wq) };
            // SAFETY: As above: the CQ calls no kverbs code any more; the
            // reference is not used after this.
            unsafe { ManuallyDrop::drop(&mut self._layer) };
        } else {
            // A CQ still used by a QP whose destruction failed: its driver
            // may still call its handler with the wait queue, and the core
            // (a softirq CQ) may still complete the kept slots: both are
            // leaked with it (the helper warned), and so is the reference
            // to kverbs.ko, whose code they call.
            for k in core::mem::take(&mut *self.kept.lock()) {
                leak_kept(k);
            }
            pr_warn!(
                "{}: a CQ still in use was not freed; its wait queue is leaked\n",
                self.dev.name()
            );
        }
    }
}
