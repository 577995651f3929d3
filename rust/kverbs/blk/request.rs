// SPDX-License-Identifier: GPL-2.0

//! A block request given to the driver (`struct request`).

use super::Operations;
use crate::{bindings, ARef, AlwaysRefCounted};
use core::{
    marker::PhantomData,
    ptr::NonNull,
    sync::atomic::{AtomicU32, Ordering},
};
use kernel::{prelude::*, sync::ArcBorrow, types::Opaque};

/// The driver data of each request (its PDU): the count of its `ARef`s.
///
/// # Invariants
///
/// While the driver owns the request (from `queue_rq` until it is ended or
/// given back busy), `refs` is the number of its live `ARef<Request>`, or
/// `u32::MAX` once that overflowed or was raised from 0 (then for good: it
/// never counts down to the 1 that ending needs); while [`Request::complete`] hands it over, 1
/// for the `ARef` of the completion callback; otherwise 0.
pub(crate) struct Pdu {
    refs: AtomicU32,
    /// The times the request was requeued since blk-mq first handed it
    /// to the driver (set to 0 then, by `dispatching`).
    requeues: AtomicU32,
}

/// What [`super::Operations::timeout`] did (`enum blk_eh_timer_return`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TimeoutAction {
    /// The driver ended the request, or will.
    Done,
    /// The request gets another timeout's time.
    ResetTimer,
}

/// What a request does (`enum req_op`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Op {
    /// `REQ_OP_READ`.
    Read,
    /// `REQ_OP_WRITE`.
    Write,
    /// `REQ_OP_FLUSH`: the volatile write cache to media (no data).
    Flush,
    /// `REQ_OP_DISCARD`.
    Discard,
    /// `REQ_OP_WRITE_ZEROES`.
    WriteZeroes,
    /// Another operation.
    Other(u32),
}

/// A request of a disk of a `T` driver, while the driver owns it (it is
/// reached only through an [`ARef`] then).
///
/// # Invariants
///
/// The request is of a tag set of `T`, whose driver data is a [`Pdu`]; a
/// `&Request` exists only while the driver owns the request.
#[repr(transparent)]
pub struct Request<T: Operations>(Opaque<bindings::request>, PhantomData<T>);

// SAFETY: A request may be ended, completed and read from any thread.
unsafe impl<T: Operations> Send for Request<T> {}
// SAFETY: `&Request` only reads fields fixed while the driver owns it.
unsafe impl<T: Operations> Sync for Request<T> {}

// SAFETY: The count of `ARef`s is the PDU's (type invariant of `Pdu`),
// saturating at `u32::MAX`; the last one dropped leaves the request
// unended (and the driver's: nothing frees it).
unsafe impl<T: Operations> AlwaysRefCounted for Request<T> {
    fn inc_ref(&self) {
        // From 0 -- no `ARef` of the request left, so none to make one
        // from but a `&Request` kept past it, which no safe code has --
        // to the saturated count, which never ends it.
        let _ = self
            .pdu()
            .refs
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| match v {
                u32::MAX => None,
                0 => Some(u32::MAX),
                v => Some(v + 1),
            });
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller's reference keeps the request the driver's.
        let rq = unsafe { obj.as_ref() };
        let _ = rq
            .pdu()
            .refs
            .fetch_update(Ordering::Release, Ordering::Relaxed, |v| {
                (v != u32::MAX && v != 0).then(|| v - 1)
            });
    }
}

impl<T: Operations> Request<T> {
    fn raw(&self) -> *mut bindings::request {
        self.0.get()
    }

    fn pdu(&self) -> &Pdu {
        // SAFETY: The request's driver data is a `Pdu` (type invariant),
        // which lives with it.
        unsafe { &*bindings::kverbs_rq_pdu(self.raw()).cast::<Pdu>() }
    }

    /// The one `ARef` of a request `queue_rq` hands to the driver.
    ///
    /// # Safety
    ///
    /// `rq` is a started request of a tag set of `T`, given to the driver.
    pub(super) unsafe fn take(rq: *mut bindings::request) -> ARef<Self> {
        // SAFETY: The PDU of a request of `T`'s tag set (its size is the
        // tag set's `cmd_size`), ours until the request ends.
        let pdu = unsafe { &*bindings::kverbs_rq_pdu(rq).cast::<Pdu>() };
        pdu.refs.store(1, Ordering::Relaxed);
        // SAFETY: The request is the driver's with one reference, this one
        // (`Request` is transparent over `struct request`).
        unsafe { ARef::from_raw(NonNull::new_unchecked(rq.cast())) }
    }

    /// The `ARef` [`Request::complete`] handed over, back in the driver's
    /// completion callback.
    ///
    /// # Safety
    ///
    /// `rq` is a request `complete` handed to blk-mq, once.
    pub(super) unsafe fn resume(rq: *mut bindings::request) -> ARef<Self> {
        // SAFETY: `complete` left the count at 1 for this reference.
        unsafe { ARef::from_raw(NonNull::new_unchecked(rq.cast())) }
    }

    /// Whether `this` is the request `rq`.
    pub(super) fn is(this: &ARef<Self>, rq: *mut bindings::request) -> bool {
        core::ptr::eq(this.raw(), rq)
    }

    /// Counts out the only `ARef` of a request (count 1 to 0): the
    /// request, no longer the driver's (to end, or to give back busy);
    /// `Err` gives the `ARef` back if others remain.
    pub(super) fn count_out(this: ARef<Self>) -> Result<*mut bindings::request, ARef<Self>> {
        if this
            .pdu()
            .refs
            .compare_exchange(1, 0, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(this);
        }
        let rq = this.raw();
        // Counted out already.
        core::mem::forget(this);
        Ok(rq)
    }

    /// The first sector (of 512 bytes).
    pub fn sector(&self) -> u64 {
        // SAFETY: The request is live while borrowed (type invariant).
        unsafe { bindings::kverbs_rq_pos(self.raw()) }
    }

    /// The bytes to transfer (0 for a flush).
    pub fn bytes(&self) -> u32 {
        // SAFETY: As above.
        unsafe { bindings::kverbs_rq_bytes(self.raw()) }
    }

    /// The operation.
    pub fn op(&self) -> Op {
        // SAFETY: As above.
        match unsafe { bindings::kverbs_rq_op(self.raw()) } {
            bindings::REQ_OP_READ => Op::Read,
            bindings::REQ_OP_WRITE => Op::Write,
            bindings::REQ_OP_FLUSH => Op::Flush,
            bindings::REQ_OP_DISCARD => Op::Discard,
            bindings::REQ_OP_WRITE_ZEROES => Op::WriteZeroes,
            other => Op::Other(other),
        }
    }

    /// Whether the data is to reach the media before the request ends
    /// (`REQ_FUA`).
    pub fn fua(&self) -> bool {
        // SAFETY: As above.
        unsafe { bindings::kverbs_rq_fua(self.raw()) }
    }

    /// Its physical segments: what [`Request::map_sg`] needs at most.
    pub fn nr_phys_segments(&self) -> u16 {
        // SAFETY: As above.
        unsafe { bindings::kverbs_rq_segments(self.raw()) }
    }

    /// Its tag: unique among the requests in flight on its hardware queue
    /// (on the tag set, unless the queues share tags).
    pub fn tag(&self) -> u32 {
        // SAFETY: As above; a started request has a tag (>= 0).
        unsafe { bindings::kverbs_rq_tag(self.raw()) as u32 }
    }

    /// The index of its hardware queue.
    pub fn hw_queue(&self) -> u32 {
        // SAFETY: As above; a dispatched request has its hardware context.
        unsafe { bindings::kverbs_rq_hw_queue(self.raw()) }
    }

    /// The queue data of its disk.
    pub fn queue_data(&self) -> ArcBorrow<'_, T::QueueData> {
        // SAFETY: The disk's queue data is an `Arc`'s, dropped only after
        // the disk is deleted, which waits for its requests to end.
        unsafe { ArcBorrow::from_raw(bindings::kverbs_rq_queuedata(self.raw()).cast()) }
    }

    /// Ends the request with `status` (an errno of `Err`: `EIO`,
    /// `ENOSPC`, `ETIMEDOUT`, ... as `errno_to_blk_status` maps them),
    /// from any context; `Err` gives the `ARef` back if others remain.
    pub fn end(this: ARef<Self>, status: Result) -> Result<(), ARef<Self>> {
        let err = match status {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        };
        let rq = Self::count_out(this)?;
        // SAFETY: The request was the driver's, with this one reference,
        // now counted out: ended once; no `&Request` outlives the `ARef`
        // it came from.
        unsafe { bindings::kverbs_rq_end(rq, err) };
        Ok(())
    }

    /// Ends the request successfully, as [`Request::end`].
    pub fn end_ok(this: ARef<Self>) -> Result<(), ARef<Self>> {
        Self::end(this, Ok(()))
    }

    /// Gives the request back to the block layer, which dispatches it
    /// again: `queue_rq` gets it anew (its data as it was, a new start
    /// and timer), once its queue runs (at once; after the queue is
    /// unquiesced, if it is quiesced). From any context; `Err` gives the
    /// `ARef` back if others remain. For a command to send again: a
    /// retry of a status that says so, or what a lost connection
    /// carried (`blk_mq_requeue_request`). It is dispatched again at once:
    /// a driver that requeues what it cannot send yet (its link down)
    /// should quiesce its queue meanwhile, or the requeues go round, and a
    /// disk's deletion waits for them to stop.
    pub fn requeue(this: ARef<Self>) -> Result<(), ARef<Self>> {
        let rq = Self::count_out(this)?;
        // SAFETY: Counted out just now, of a tag set of `T`.
        unsafe { requeue_counted_out(rq) };
        Ok(())
    }

    /// The times the request was given back by [`Request::requeue`] (or
    /// requeued by [`crate::io`] for a retry) since the block layer first
    /// handed it to the driver (0 then).
    pub fn requeues(&self) -> u32 {
        self.pdu().requeues.load(Ordering::Relaxed)
    }

    /// Completes the request on the CPU that submitted it, where blk-mq
    /// calls [`Operations::complete`] with it (softirq), or here, now; for
    /// a completion from an interrupt or another CPU. `Err` gives the
    /// `ARef` back if others remain.
    pub fn complete(this: ARef<Self>) -> Result<(), ARef<Self>> {
        if this.pdu().refs.load(Ordering::Acquire) != 1 {
            return Err(this);
        }
        let rq = this.raw();
        // The count stays 1, for the `ARef` of the completion callback.
        core::mem::forget(this);
        // SAFETY: The request is the driver's, its only reference handed
        // over; completed once.
        if !unsafe { bindings::kverbs_rq_complete_remote(rq) } {
            // SAFETY: Not handed to another CPU: the reference is this
            // call's.
            T::complete(unsafe { Self::resume(rq) });
        }
        Ok(())
    }

    /// Maps the segments of a read or write into `table`, which must
    /// have at least [`Request::nr_phys_segments`] entries (`EINVAL`
    /// otherwise, or for another operation). The pages are reached
    /// through the result, while the request is borrowed: not after it
    /// ends.
    pub fn map_sg<'a>(&'a self, table: &'a mut crate::sg::SgTable) -> Result<MappedSg<'a>> {
        let write = match self.op() {
            Op::Read => false,
            Op::Write => true,
            _ => return Err(EINVAL),
        };
        if table.len() < usize::from(self.nr_phys_segments()) {
            return Err(EINVAL);
        }
        // SAFETY: The table has room for every segment (checked above),
        // and is the caller's alone while borrowed.
        let n = unsafe { bindings::kverbs_rq_map_sg(self.raw(), table.as_raw()) };
        Ok(MappedSg {
            table,
            nents: n.max(0) as u32,
            write,
        })
    }
}

/// The PDU of `rq`, a request of a tag set of the layer's.
///
/// # Safety
///
/// `rq` is a live request of a tag set made by [`super::TagSet`] (whose
/// driver data is a [`Pdu`]).
unsafe fn pdu_of<'a>(rq: *mut bindings::request) -> &'a Pdu {
    // SAFETY: By the caller's guarantee.
    unsafe { &*bindings::kverbs_rq_pdu(rq).cast::<Pdu>() }
}

/// Notes a request blk-mq hands to `queue_rq`, before it is started (and
/// its timer with it, whose expiry also writes the request's flags): on
/// its first dispatch, not one after a requeue, its count of requeues is
/// set to 0.
///
/// # Safety
///
/// `rq` is a request of a tag set of the layer's, given to `queue_rq`, not
/// started yet.
pub(super) unsafe fn dispatching(rq: *mut bindings::request) {
    // SAFETY: The driver's request, not started: its flags are the
    // driver's to set (as `nvme_setup_cmd` sets them before
    // `nvme_start_request`).
    if unsafe { bindings::kverbs_rq_first_dispatch(rq) } {
        // SAFETY: A request of a tag set of the layer's (the caller's
        // guarantee): its PDU is a `Pdu`.
        unsafe { pdu_of(rq) }.requeues.store(0, Ordering::Relaxed);
    }
}

/// Gives a request back to blk-mq for another dispatch, one more requeue
/// counted.
///
/// # Safety
///
/// `rq` is a request of a tag set of the layer's whose only reference the
/// caller counted out (1 to 0) and has neither ended nor given back since;
/// the caller does not use `rq` after.
unsafe fn requeue_counted_out(rq: *mut bindings::request) {
    // SAFETY: The caller's guarantee: a live request of the layer's.
    let _ =
        unsafe { pdu_of(rq) }
            .requeues
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1));
    // SAFETY: The caller's guarantee: given back once; blk-mq owns it
    // until it hands it to `queue_rq` again (`Request::take`).
    unsafe { bindings::kverbs_rq_requeue(rq) };
}

/// The one `ARef` of a request, its driver type erased: what the layer
/// holds for a driver that handed it a request to end from kverbs.ko's
/// own code ([`crate::io`]), which runs no code of the driver's module.
///
/// # Invariants
///
/// `rq` is a request the driver owns, of a tag set made by
/// [`super::TagSet`], whose count of references is this one.
pub(crate) struct RqRef(NonNull<bindings::request>);

// SAFETY: A request may be ended from any thread.
unsafe impl Send for RqRef {}
// SAFETY: `&RqRef` gives nothing.
unsafe impl Sync for RqRef {}

impl RqRef {
    /// Takes the request's `ARef`, if it is its only one (else gives it
    /// back): then no other `ARef` of it can be made until it is given
    /// back, nobody else holding one to make it from.
    pub(crate) fn new<T: Operations>(rq: ARef<Request<T>>) -> Result<Self, ARef<Request<T>>> {
        if rq.pdu().refs.load(Ordering::Acquire) != 1 {
            return Err(rq);
        }
        let raw = rq.raw();
        core::mem::forget(rq);
        // INVARIANT: The only reference, now this one.
        // SAFETY: From a live request.
        Ok(RqRef(unsafe { NonNull::new_unchecked(raw) }))
    }

    /// The request.
    pub(crate) fn as_raw(&self) -> *mut bindings::request {
        self.0.as_ptr()
    }

    /// Its operation (`enum req_op`).
    pub(crate) fn op(&self) -> u32 {
        // SAFETY: The request is live (type invariant).
        unsafe { bindings::kverbs_rq_op(self.0.as_ptr()) }
    }

    /// Its bytes.
    pub(crate) fn bytes(&self) -> u32 {
        // SAFETY: As above.
        unsafe { bindings::kverbs_rq_bytes(self.0.as_ptr()) }
    }

    /// Its physical segments.
    pub(crate) fn segments(&self) -> u16 {
        // SAFETY: As above.
        unsafe { bindings::kverbs_rq_segments(self.0.as_ptr()) }
    }

    /// The request's tag.
    pub(crate) fn tag(&self) -> u32 {
        // SAFETY: The request is live (type invariant); started, with a tag.
        unsafe { bindings::kverbs_rq_tag(self.0.as_ptr()) as u32 }
    }

    /// Gives the `ARef` back.
    ///
    /// # Safety
    ///
    /// It came from [`RqRef::new`] for `T`.
    pub(crate) unsafe fn into_request<T: Operations>(self) -> ARef<Request<T>> {
        let raw = self.0;
        core::mem::forget(self);
        // SAFETY: A request of `T`'s tag set (the caller's guarantee) with
        // this one reference (type invariant).
        unsafe { ARef::from_raw(raw.cast()) }
    }

    /// Counts out the reference (count 1 to 0, as the type invariant has
    /// it): the request, no longer held by an `RqRef`. `None` if the count
    /// was not 1, which the type invariant rules out: the reference is
    /// then forgotten, not dropped (the count unchanged).
    fn count_out(self) -> Option<*mut bindings::request> {
        let rq = self.0.as_ptr();
        core::mem::forget(self);
        // SAFETY: Live, of a tag set of the layer's (type invariant).
        let pdu = unsafe { pdu_of(rq) };
        pdu.refs
            .compare_exchange(1, 0, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then_some(rq)
    }

    /// Ends the request with `status`, from any context.
    pub(crate) fn end(self, status: Result) {
        let err = match status {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        };
        if let Some(rq) = self.count_out() {
            // SAFETY: The driver's request, its only reference counted
            // out: ended once.
            unsafe { bindings::kverbs_rq_end(rq, err) };
        }
    }

    /// Requeues the request (as [`Request::requeue`]) if it was requeued
    /// fewer than `max` times and may be sent again (not fail-fast, its
    /// disk not going); else ends it with `status`. Whether it was
    /// requeued.
    pub(crate) fn retry_or_end(self, status: Result, max: u32) -> bool {
        let rq = self.0.as_ptr();
        // SAFETY: Live, of a tag set of the layer's (type invariant).
        let requeues = unsafe { pdu_of(rq) }.requeues.load(Ordering::Relaxed);
        // SAFETY: As above: it reads the request's flags and queue.
        let may = unsafe { bindings::kverbs_rq_may_retry(rq) };
        if requeues >= max || !may {
            self.end(status);
            return false;
        }
        let Some(rq) = self.count_out() else {
            return false;
        };
        // SAFETY: Counted out just now, of a tag set of the layer's.
        unsafe { requeue_counted_out(rq) };
        true
    }
}

impl Drop for RqRef {
    fn drop(&mut self) {
        // SAFETY: Live, of a tag set of the layer's (type invariant).
        let pdu = unsafe { pdu_of(self.0.as_ptr()) };
        // As `Request::dec_ref`: the request stays the driver's, unended.
        let _ = pdu
            .refs
            .fetch_update(Ordering::Release, Ordering::Relaxed, |v| {
                (v != u32::MAX && v != 0).then(|| v - 1)
            });
    }
}

/// A request's segments mapped into a scatter-gather table, while the
/// request is borrowed: a write's to be read ([`MappedSg::copy_to`]), a
/// read's to be written ([`MappedSg::copy_from`]). A write's pages are not
/// the driver's to change: the zero page, pages of other files, user
/// pages pinned read-only.
pub struct MappedSg<'a> {
    table: &'a mut crate::sg::SgTable,
    nents: u32,
    write: bool,
}

impl MappedSg<'_> {
    /// The entries mapped.
    pub fn nents(&self) -> u32 {
        self.nents
    }

    /// The bytes of each entry, in order.
    pub fn lengths(&self) -> impl Iterator<Item = u32> + '_ {
        self.table.lengths(self.nents)
    }

    /// Copies a write's data, from byte `skip` on, into `buf`: the bytes
    /// copied (`EINVAL` for a read's).
    pub fn copy_to(&self, buf: &mut [u8], skip: usize) -> Result<usize> {
        if !self.write {
            return Err(EINVAL);
        }
        let Ok(skip) = bindings::off_t::try_from(skip) else {
            return Ok(0);
        };
        // SAFETY: The first `nents` entries point at the request's pages,
        // live while it is borrowed; `buf` is valid for writes.
        unsafe {
            Ok(bindings::sg_pcopy_to_buffer(
                self.table.sgl(),
                self.nents,
                buf.as_mut_ptr().cast(),
                buf.len(),
                skip,
            ))
        }
    }

    /// Copies `buf` into a read's data, from byte `skip` on: the bytes
    /// copied (`EINVAL` for a write's).
    pub fn copy_from(&mut self, buf: &[u8], skip: usize) -> Result<usize> {
        if self.write {
            return Err(EINVAL);
        }
        let Ok(skip) = bindings::off_t::try_from(skip) else {
            return Ok(0);
        };
        // SAFETY: As above; `buf` is only read.
        unsafe {
            Ok(bindings::sg_pcopy_from_buffer(
                self.table.sgl(),
                self.nents,
                buf.as_ptr().cast(),
                buf.len(),
                skip,
            ))
        }
    }
}
