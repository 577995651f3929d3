// SPDX-License-Identifier: GPL-2.0

//! The slots of work requests: what a posted request holds until its
//! completion is reaped, the `done` callback that records it, and the
//! wait for it.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use crate::ah::AhInner;
use crate::bindings;
use crate::cq::{self, Cq};
use crate::dma::DmaBuf;
use crate::mr::MrInner;
use crate::wait::Cancel;
use crate::wc::Wc;
use core::{
    cell::UnsafeCell,
    ptr,
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
};
use kernel::{alloc::flags::__GFP_NOWARN, prelude::*, sync::Arc, types::Opaque};

/// The queue of a work request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Queue {
    Send,
    Recv,
}

/// Identifies a posted work request, to [`Qp::wait`] for it: once, on the
/// QP that posted it.
#[derive(Debug)]
pub struct WrId {
    /// The address of the QP's `QpInner`, as its identity.
    pub(super) qp: usize,
    pub(super) queue: Queue,
    pub(super) index: usize,
    pub(super) seq: u64,
}

/// What [`Qp::wait_for`] found.
#[derive(Debug)]
pub enum Waited {
    /// The request completed: its completion.
    Done(Wc),
    /// The request is still outstanding: its id, to wait again.
    Pending(WrId),
}

pub(crate) const SLOT_FREE: u32 = 0;
pub(crate) const SLOT_POSTED: u32 = 1;
pub(crate) const SLOT_DONE: u32 = 2;

/// The part of a slot the `done` callback touches.
///
/// # Invariants
///
/// `cqe` is the first field, so a pointer to it is a pointer to the slot.
/// `wc` is written by `done` only while `state` is `SLOT_POSTED`, and read
/// only after `state` was seen `SLOT_DONE` (release/acquire). `qps` is null
/// or the table of the SRQ the slot is of, which outlives the slot.
#[repr(C)]
pub(crate) struct Slot {
    pub(crate) cqe: Opaque<bindings::ib_cqe>,
    pub(crate) state: AtomicU32,
    pub(crate) wc: UnsafeCell<Option<Wc>>,
    qps: *const crate::srq::QpTable,
}

impl Slot {
    /// Waits until the request of this slot, on a queue whose completions
    /// go to `cq`, is done: at most `timeout_ms`, less if `cancel` is
    /// cancelled (`ECANCELED`) or a signal comes (`EINTR`). `Ok(true)` when
    /// done, `Ok(false)` when the time ran out. The slot is not released:
    /// its request may still be reaped (the completion read) only by whom
    /// holds it, under the lock of its queue's bookkeeping. The wait of
    /// [`Qp::wait_for`](super::Qp::wait_for) and of
    /// [`Srq::wait`](crate::srq::Srq::wait).
    pub(crate) fn wait_done(&self, cq: &Cq, timeout_ms: u32, cancel: &Cancel) -> Result<bool> {
        let deadline = crate::Deadline::new(timeout_ms, cancel);
        let since = crate::now_ns();
        while self.state.load(Ordering::Acquire) != SLOT_DONE {
            if let Err(e) = deadline.check() {
                if e.to_errno() == crate::errno::etimedout().to_errno() {
                    return Ok(false);
                }
                return Err(e);
            }
            let slice = (deadline.left_ns() / 1_000_000).clamp(1, 100) as u32;
            cq.wait_step(&self.state, SLOT_DONE, since, slice);
        }
        Ok(true)
    }
}

/// What a posted request keeps alive until it is reaped.
#[derive(Default)]
pub(crate) struct SlotRes {
    pub(crate) busy: bool,
    pub(crate) signaled: bool,
    /// Taken by a stream ([`crate::stream`]), never posted through it.
    pub(crate) stream: bool,
    pub(crate) seq: u64,
    pub(crate) _buf: Option<Arc<DmaBuf>>,
    pub(crate) _mr: Option<Arc<MrInner>>,
    pub(crate) ah: Option<Arc<AhInner>>,
}

impl SlotRes {
    /// Takes the slot for a stream or a capsule queue, which posts through
    /// it on its own.
    pub(crate) fn take_for_stream(&mut self) {
        *self = SlotRes {
            busy: true,
            signaled: true,
            stream: true,
            ..Default::default()
        };
    }
}

/// `n` free slots; of the SRQ whose table is `qps`, if any (which must
/// outlive them: keep it with them).
pub(crate) fn new_slots(n: u32, qps: Option<&Arc<crate::srq::QpTable>>) -> Result<KVec<Slot>> {
    let qps = qps.map_or(ptr::null(), |t| ptr::from_ref(&**t));
    // Sized by the caller (bounded by a CQ's entries, up to millions on
    // hardware): a failure is an error, not a warning.
    let mut v = KVec::with_capacity(n as usize, GFP_KERNEL | __GFP_NOWARN)?;
    for _ in 0..n {
        // INVARIANT: `qps` is null or the caller's table, kept with them.
        v.push(
            Slot {
                cqe: Opaque::new(bindings::ib_cqe {
                    done: Some(slot_done),
                }),
                state: AtomicU32::new(SLOT_FREE),
                wc: UnsafeCell::new(None),
                qps,
            },
            GFP_KERNEL,
        )?;
    }
    Ok(v)
}

pub(crate) fn new_res(n: u32) -> Result<KVec<SlotRes>> {
    // As in `new_slots`.
    let mut v = KVec::with_capacity(n as usize, GFP_KERNEL | __GFP_NOWARN)?;
    for _ in 0..n {
        v.push(SlotRes::default(), GFP_KERNEL)?;
    }
    Ok(v)
}

/// Takes a free slot of `res`/`slots` for a request; returns its index and
/// sequence number.
pub(crate) fn reserve(
    res: &mut KVec<SlotRes>,
    slots: &KVec<Slot>,
    signaled: bool,
    new: SlotRes,
) -> Result<(usize, u64)> {
    let index = res.iter().position(|r| !r.busy).ok_or(ENOSPC)?;
    // Unique across all QPs, so that no `WrId` ever matches another
    // request, even of a QP at the address of a dropped one.
    static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);
    let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
    res[index] = SlotRes {
        busy: true,
        signaled,
        seq,
        ..new
    };
    // SAFETY: The slot is free (not posted), so `done` does not touch it.
    unsafe { *slots[index].wc.get() = None };
    slots[index].state.store(SLOT_POSTED, Ordering::Release);
    Ok((index, seq))
}

/// Gives back a slot whose request was not posted.
pub(crate) fn unreserve(res: &mut KVec<SlotRes>, slots: &KVec<Slot>, index: usize) {
    res[index] = SlotRes::default();
    slots[index].state.store(SLOT_FREE, Ordering::Release);
}

/// The `done` function of every kverbs work request.
///
/// # Safety
///
/// Called by the RDMA core with a completion of a request posted by
/// [`Qp::post`] or [`Qp::post_recv`], whose `wr_cqe` is a slot's `cqe`.
unsafe extern "C" fn slot_done(cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: `wc` is valid during the call; `wr_cqe` is a slot's first
    // field (type invariant of `Slot`). The slot is live: slots are freed
    // only after the drain's markers were seen done (or leaked), and the
    // `done` calls of one CQ run one at a time, in the CQ's order -- by the
    // core's softirq or workqueue poller, or by the one task that holds a
    // direct CQ (`Cq::process_direct`) -- so every completion queued before
    // a marker has had its `done` return before the marker's runs.
    let (slot, wc) = unsafe { (&*(*wc).__bindgen_anon_1.wr_cqe.cast::<Slot>(), &*wc) };
    let mut wc = Wc::from_raw(wc);
    if !slot.qps.is_null() {
        // SAFETY: The table of the slot's SRQ outlives the slot (type
        // invariant of `Slot`).
        wc.qp_num = unsafe { (*slot.qps).qp_num(wc.qp_raw) };
    }
    // SAFETY: The slot is posted: only this completion writes `wc`, and the
    // waiter reads it after the release store below.
    unsafe { *slot.wc.get() = Some(wc) };
    slot.state.store(SLOT_DONE, Ordering::Release);
    // SAFETY: `cq` is a kverbs CQ, inside its `done` callback.
    unsafe { cq::wake_waiters(cq) };
}

/// Leaks `v` on purpose (memory a device or a CQ may still reach) and tells
/// kmemleak, which still scans it, so that what it points to is not
/// reported either.
pub(crate) fn leak<T>(v: KVec<T>) {
    let (ptr, _, cap) = v.into_raw_parts();
    if cap > 0 && core::mem::size_of::<T>() > 0 {
        // SAFETY: Plain annotation of a live allocation.
        unsafe { bindings::kverbs_kmemleak_not_leak(ptr.cast()) };
    }
}
