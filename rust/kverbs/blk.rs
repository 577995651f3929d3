// SPDX-License-Identifier: GPL-2.0

//! Block devices on blk-mq, for a ULP that is a block driver (an NVMe over
//! Fabrics host, an SRP initiator): a tag set of hardware queues, disks on
//! it with their limits, and the requests given to the driver, whose
//! sector, length, operation and segments it reads, whose pages it maps
//! into a scatter-gather table, and which it ends with a status, at once
//! or later from any context.
//!
//! C header: [`include/linux/blk-mq.h`](srctree/include/linux/blk-mq.h)
//!
//! The names and shapes are those of the kernel crate's
//! `kernel::block::mq` of Linux 7.3 (`TagSet`, `GenDiskBuilder`,
//! `GenDisk`, `Operations` with its queue data, `ARef<Request>`,
//! `complete`), which neither 6.12's nor 7.3's can carry such a driver
//! with: no request accessors, no limits, no way to end a request with an
//! error (Documentation/kverbs_nvme-design.rst, 6 and 7.7). These bind the
//! C functions through kverbs' own bindings, the same on both kernels.
//!
//! A request is the driver's from [`Operations::queue_rq`] until it ends
//! it ([`Request::end`], or [`Request::complete`] and then
//! [`Operations::complete`]): only the holder of its one [`ARef`] may, so
//! no request ends twice. A request the driver drops without ending it is
//! never ended: the disk's drop (`del_gendisk`) then waits for it for ever.
//! Its pages, mapped by [`Request::map_sg`], are reached only while the
//! request is borrowed, so never after it ended.
//!
//! The callbacks are the driver's module's code: a disk holds that module
//! while it is open (its `block_device_operations` owner), and a disk the
//! module leaks (`mem::forget`, an `Arc` cycle) is deleted when the module
//! goes ([`crate::owned`]), so that no request reaches its code after.
//!
//! The callbacks run where sleeping is not allowed; a disk's and a tag
//! set's drops sleep (and a disk's, from one of its callbacks, would wait
//! for itself): drop them in process context.

mod disk;
mod request;
mod tag_set;

pub use disk::{GenDisk, GenDiskBuilder};
pub(crate) use request::RqRef;
pub use request::TimeoutAction;
pub use request::{MappedSg, Op, Request};
pub use tag_set::TagSet;

use crate::ARef;
use kernel::prelude::*;

/// A block driver's callbacks.
pub trait Operations: Sized + Send + Sync + 'static {
    /// What each disk's queue passes its callbacks: given to
    /// [`GenDiskBuilder::build`], dropped after the disk is deleted.
    type QueueData: Send + Sync;

    /// A request for the driver to carry out, from the block layer's
    /// submission (process context, or a workqueue; it must not sleep).
    /// `is_last`: the last of a batch ([`Operations::commit_rqs`] is
    /// called otherwise if the batch ends early). The driver ends the
    /// request now or later; `Err` gives it back as busy (the block layer
    /// requeues it and tries again later) -- unless the driver kept a
    /// clone of its `ARef`, in which case it stays the driver's.
    fn queue_rq(
        queue_data: &Self::QueueData,
        rq: ARef<Request<Self>>,
        is_last: bool,
    ) -> Result<(), ARef<Request<Self>>>;

    /// The end of a batch whose last request was not marked `is_last`.
    fn commit_rqs(_queue_data: &Self::QueueData) {}

    /// A request completed with [`Request::complete`]: called on the CPU
    /// that submitted it (softirq) or the completing one; ends it.
    fn complete(rq: ARef<Request<Self>>);

    /// The request `tag` of hardware queue `hw_queue` has been in flight
    /// longer than the tag set's timeout (from the block layer's timeout
    /// work, in process context). The driver ends it (or will: `Done`),
    /// through the `ARef` it holds, or asks for more time (`ResetTimer`,
    /// the default). It may be ending meanwhile on another CPU, and then
    /// its tag may already be a newer request's (a flush sequence gives
    /// the tag back before the request is freed): a driver that keeps more
    /// than the tag (a command id with a generation, the time it was
    /// posted) tells them apart. The request itself is not given: an
    /// `ARef` made from it here could outlive it and end the request that
    /// reuses its tag.
    fn timeout(_queue_data: &Self::QueueData, _tag: u32, _hw_queue: u32) -> TimeoutAction {
        TimeoutAction::ResetTimer
    }
}
