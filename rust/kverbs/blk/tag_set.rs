// SPDX-License-Identifier: GPL-2.0

//! A tag set: the hardware queues and the requests of a block driver's
//! disks (`struct blk_mq_tag_set`), with the driver's callbacks.

use super::{request::Pdu, Operations, Request};
use crate::{bindings, ARef};
use core::{marker::PhantomData, ptr::NonNull};
use kernel::{error::from_err_ptr, prelude::*, sync::ArcBorrow};

/// The hardware queues and requests of one driver's disks.
///
/// # Invariants
///
/// `set` was allocated by `kverbs_blk_alloc_tag_set` with
/// [`OperationsVTable::<T>::VTABLE`] as its operations and a [`Pdu`] as
/// each request's driver data, and is freed on drop, after every disk on
/// it (each holds an `Arc` of this).
pub struct TagSet<T: Operations> {
    set: NonNull<bindings::blk_mq_tag_set>,
    _p: PhantomData<T>,
}

// SAFETY: The tag set is a kernel object used from any thread; `T`'s
// callbacks are `Send + Sync`.
unsafe impl<T: Operations> Send for TagSet<T> {}
// SAFETY: `&TagSet` offers nothing but its pointer to the disks made on it.
unsafe impl<T: Operations> Sync for TagSet<T> {}

impl<T: Operations> TagSet<T> {
    /// `nr_hw_queues` hardware queues (at least 1) of `depth` requests each
    /// (1 to 10240, as `blk_mq_alloc_tag_set` takes them), a request timing
    /// out after `timeout_ms` (0: the block layer's 30 s).
    pub fn new(nr_hw_queues: u32, depth: u32, timeout_ms: u32) -> Result<Self> {
        if nr_hw_queues == 0 || depth == 0 || depth > 10240 {
            return Err(EINVAL);
        }
        // SAFETY: The vtable is a static of the driver's module, which
        // outlives the tag set: the module's exit drops it (or, leaked,
        // the module notifier deletes its disks, after which no callback
        // comes); the sizes are checked by the call.
        let set = from_err_ptr(unsafe {
            bindings::kverbs_blk_alloc_tag_set(
                &OperationsVTable::<T>::VTABLE,
                nr_hw_queues,
                depth,
                core::mem::size_of::<Pdu>() as u32,
                timeout_ms,
            )
        })?;
        Ok(TagSet {
            set: NonNull::new(set).ok_or(ENOMEM)?,
            _p: PhantomData,
        })
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::blk_mq_tag_set {
        self.set.as_ptr()
    }
}

impl<T: Operations> Drop for TagSet<T> {
    fn drop(&mut self) {
        // SAFETY: No disk is left on the set (each holds an `Arc` of it),
        // so no request is in flight; freed once.
        unsafe { bindings::kverbs_blk_free_tag_set(self.set.as_ptr()) };
    }
}

/// The C callbacks of `T`'s tag sets.
pub(crate) struct OperationsVTable<T: Operations>(PhantomData<T>);

impl<T: Operations> OperationsVTable<T> {
    /// `queue_rq`: starts the request and hands it to the driver.
    ///
    /// # Safety
    ///
    /// Called by blk-mq with a hardware context of a disk made by
    /// [`super::GenDiskBuilder::build`] (its queue data an
    /// `Arc<T::QueueData>`'s) and a request of it to dispatch.
    unsafe extern "C" fn queue_rq(
        hctx: *mut bindings::blk_mq_hw_ctx,
        bd: *const bindings::blk_mq_queue_data,
    ) -> bindings::blk_status_t {
        // SAFETY: `bd` is valid for the call; its request is the driver's
        // to dispatch, not started yet.
        let (rq, last) = unsafe { ((*bd).rq, (*bd).last) };
        // SAFETY: As above: a request of a tag set of the layer's (`T`'s),
        // not started.
        unsafe { super::request::dispatching(rq) };
        // SAFETY: As above.
        unsafe { bindings::kverbs_rq_start(rq) };
        // SAFETY: The disk's queue data, live until the disk is deleted,
        // which waits for its requests and for this call.
        let qd = unsafe {
            ArcBorrow::<T::QueueData>::from_raw(bindings::kverbs_hctx_queuedata(hctx).cast())
        };
        // SAFETY: The request is started and the driver's; the `ARef` is
        // its one reference (`Request::take` sets the count).
        let taken = unsafe { Request::<T>::take(rq) };
        // Busy, if the request given back is this one with no clone left:
        // blk-mq requeues it. Otherwise, if clones of it remain, they end
        // it; another request given back (one the driver kept) stays the
        // driver's, as does this one, which the driver still holds (or
        // dropped: then it is never ended).
        let busy = match T::queue_rq(&qd, taken, last) {
            Err(back) if Request::is(&back, rq) => Request::count_out(back).is_ok(),
            _ => false,
        };
        (if busy {
            bindings::KVERBS_BLK_STS_RESOURCE
        } else {
            bindings::KVERBS_BLK_STS_OK
        }) as bindings::blk_status_t
    }

    /// `commit_rqs`.
    ///
    /// # Safety
    ///
    /// As for `queue_rq`.
    unsafe extern "C" fn commit_rqs(hctx: *mut bindings::blk_mq_hw_ctx) {
        // SAFETY: As in `queue_rq`.
        let qd = unsafe {
            ArcBorrow::<T::QueueData>::from_raw(bindings::kverbs_hctx_queuedata(hctx).cast())
        };
        T::commit_rqs(&qd);
    }

    /// `complete`: the completion [`Request::complete`] asked for.
    ///
    /// # Safety
    ///
    /// Called by blk-mq for a request `Request::complete` handed over.
    unsafe extern "C" fn complete(rq: *mut bindings::request) {
        // SAFETY: `Request::complete` gave up its one `ARef` to this call.
        let rq: ARef<Request<T>> = unsafe { Request::<T>::resume(rq) };
        T::complete(rq);
    }

    /// `timeout`: asks the driver about the request by its tag.
    ///
    /// # Safety
    ///
    /// Called by blk-mq's timeout work with a started request of a disk
    /// made by [`super::GenDiskBuilder::build`], a reference to it held.
    unsafe extern "C" fn timeout(rq: *mut bindings::request) -> bindings::blk_eh_timer_return {
        // SAFETY: As in `queue_rq`: the disk's queue data lives until the
        // disk is deleted, which stops the timeout work first.
        let qd = unsafe {
            ArcBorrow::<T::QueueData>::from_raw(bindings::kverbs_rq_queuedata(rq).cast())
        };
        // SAFETY: Started, and referenced for this call.
        let (tag, hwq) = unsafe {
            (
                bindings::kverbs_rq_tag(rq),
                bindings::kverbs_rq_hw_queue(rq),
            )
        };
        // A tag given back already (-1): the request is ending.
        let Ok(tag) = u32::try_from(tag) else {
            return bindings::BLK_EH_RESET_TIMER;
        };
        match T::timeout(&qd, tag, hwq) {
            super::TimeoutAction::Done => bindings::BLK_EH_DONE,
            super::TimeoutAction::ResetTimer => bindings::BLK_EH_RESET_TIMER,
        }
    }

    pub(crate) const VTABLE: bindings::blk_mq_ops = bindings::blk_mq_ops {
        queue_rq: Some(Self::queue_rq),
        commit_rqs: Some(Self::commit_rqs),
        complete: Some(Self::complete),
        timeout: Some(Self::timeout),
        // SAFETY: The other callbacks are optional: all-zero is `None`
        // (`show_rq` among them is there only with CONFIG_BLK_DEBUG_FS).
        ..unsafe { core::mem::zeroed() }
    };
}
