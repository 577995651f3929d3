// SPDX-License-Identifier: GPL-2.0

//! Capsule queues: the I/O path of a block ULP (an NVMe over Fabrics host,
//! an iSER or SRP initiator) on an RC QP.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A block driver's [`Operations::queue_rq`](crate::blk::Operations::queue_rq)
//! may not sleep, and its requests end when the target's response comes,
//! in the completion callback of a receive. [`Qp`]'s own posts and waits
//! sleep; an [`IoQueue`] is what posts from `queue_rq` and ends requests
//! from the callbacks: it takes the QP, a command capsule a tag and a
//! receive a response, and
//!
//! - [`IoQueue::submit`] sends the capsule of a request (the driver writes
//!   it) without sleeping or allocating, in its tag's slot;
//! - the callbacks (kverbs.ko's code, on a [`PollCtx::Softirq`] CQ) hand
//!   each response to the driver's [`IoHandler::response`], which says
//!   which tag and command it answers and with what status; the request of
//!   a slot ends once both its send completed and its response came (in
//!   either order), with the first error of the two; a response naming a
//!   slot that carries no such command is an
//!   [`IoError::UnknownCommand`] and ends nothing;
//! - [`IoQueue::shutdown`] closes the queue, drains and destroys the QP,
//!   ends every request still carried with `EIO`, or requeues it for the
//!   driver's next queue ([`Carried::Retry`]: a ULP's error recovery), and
//!   drops the handler.
//!
//! # Safety of the I/O path
//!
//! Submissions and callbacks run in RCU read-side critical sections that
//! first check that the queue is open; the shutdown closes it and waits
//! for them before it drops the QP, so none posts on a QP being destroyed
//! and none acts on a completion flushed by the drain. The slots, the
//! CQEs and the buffers are shared with the QP, which keeps them until it
//! is destroyed (and leaks the CQEs if its drain failed, as it does its
//! slots): a completion always finds its CQE. A slot carries one request
//! at a time (taken by compare-and-swap on its state, freed with a new
//! generation by whoever sets its last flag), so a request ends once, and
//! a request's `ARef` is held by the queue in between: its driver has
//! none to end it with, nor to make another from.
//!
//! An [`IoQueue`] dropped without [`IoQueue::shutdown`] shuts down on
//! kverbs.ko's events workqueue, so it may be dropped in any context (a
//! callback of the handler included). The handler is the only code of the
//! driver's module the queue calls, and one the module leaked (an `Arc`
//! cycle) is shut down when that module goes: its requests end with `EIO`
//! (unless a shutdown with [`Carried::Retry`] had destroyed its QP
//! already: they are requeued), and its handler is dropped, before the
//! module's memory is.

mod done;
mod slot;

pub(crate) use slot::Shared;

use crate::blk::{Operations, Request, RqRef};
use crate::cq::PollCtx;
use crate::event::seal;
use crate::layer_ref::LayerRef;
use crate::owned::Owned;
use crate::qp::{Qp, Queue, RemoteBuf, Rts};
use crate::wc::WcStatus;
use crate::ARef;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use kernel::{
    impl_has_work, new_condvar, new_mutex, new_work,
    prelude::*,
    sync::{Arc, CondVar, Mutex},
    workqueue::{self, Work, WorkItem},
};

/// The largest capsule and response, in bytes.
pub const MAX_CAPSULE: usize = 64;

/// The most tags of a queue.
pub const MAX_DEPTH: u16 = 1024;

/// The most segments of a request a capsule may carry after it (the C NVMe
/// host's `NVME_RDMA_MAX_INLINE_SEGMENTS`).
pub const MAX_INLINE_SEGMENTS: u32 = 4;

/// The shape of a queue.
#[derive(Clone, Copy, Debug)]
pub struct IoConfig {
    /// Its tags: the requests it carries at once (1 to [`MAX_DEPTH`]).
    /// The QP's send queue must hold three requests a tag (a
    /// registration, the capsule, an invalidation), its receive queue one.
    pub depth: u16,
    /// The bytes of a command capsule (1 to [`MAX_CAPSULE`]).
    pub capsule_len: usize,
    /// The bytes of a response (1 to [`MAX_CAPSULE`]); a shorter one is an
    /// [`IoError::ShortResponse`].
    pub response_len: usize,
    /// The pages a request's data may take (0: data is not registered).
    /// Each tag then has a fast-registration MR of as many pages (of 4
    /// KiB), on which [`IoQueue::submit`] registers a read's or write's
    /// pages for the peer (but a write [`IoQueue::submit_with`] sends in
    /// the capsule): the disk's limits must fit it
    /// (`max_segments` and `max_hw_sectors` within it, and a
    /// `virt_boundary_mask` of 4095, else the request is refused with
    /// `EINVAL`). At most the device's `max_fast_reg_page_list_len`.
    pub max_pages: u32,
    /// The segments of a write's pages its capsule's send may carry after
    /// the capsule, in-capsule data, for [`IoQueue::submit_with`] (0 to
    /// [`MAX_INLINE_SEGMENTS`], at most the QP's send SGEs less one and at
    /// most `max_pages`, whose scatter-gather tables these use; `EINVAL`
    /// from [`IoQueue::new`] otherwise).
    pub inline_segments: u32,
    /// The times a request whose [`Answer::retry`] says so is sent again
    /// (requeued: `queue_rq` gets it anew) before its status ends it (0:
    /// never; the C NVMe host's `nvme_max_retries` is 5).
    pub max_retries: u32,
}

/// Where a request's data goes, as given to [`IoQueue::submit_with`]'s
/// `build`.
#[derive(Clone, Copy, Debug)]
pub enum IoData {
    /// Nowhere: a request of no bytes, an operation other than a read or
    /// write, or a queue without data registration.
    None,
    /// Registered for the peer: its keyed address.
    Registered(RemoteBuf),
    /// In the capsule's send, after the capsule: `len` bytes.
    Inline {
        /// The data's bytes.
        len: u32,
    },
}

/// What a response answers: the request of slot `tag`, if it carries
/// command `cid`, which ends with `status` once its send has completed.
///
/// The tag and command id are all a response is matched by: a driver that
/// gives a tag's requests the same command ids again puts a generation in
/// them (NVMe's host: a counter in the top bits, the tag in the others),
/// so that a response repeated or late does not answer the tag's next
/// request.
#[derive(Debug)]
pub struct Answer {
    /// The tag of the request ([`Request::tag`]).
    pub tag: u16,
    /// The command id given to [`IoQueue::submit`].
    pub cid: u16,
    /// The request's status (an errno of `Err`, as
    /// [`Request::end`](crate::blk::Request::end) takes it).
    pub status: Result,
    /// A failed status that may pass if sent again (NVMe: no DNR bit): the
    /// request is requeued, once its key is dead and its pages unmapped,
    /// if it was requeued fewer than [`IoConfig::max_retries`] times and
    /// the block layer lets it (not fail-fast, its disk not going); else
    /// `status` ends it.
    pub retry: bool,
}

/// What went wrong on a queue, as told to [`IoHandler::error`]. Flushes
/// are not told: they follow an error told already, or the shutdown.
#[derive(Clone, Copy, Debug)]
pub enum IoError {
    /// A capsule's send failed; its request ends with `EIO`.
    Send {
        /// The completion's status.
        status: WcStatus,
        /// The driver's code for it.
        vendor_err: u32,
    },
    /// A receive failed: the QP is in error, no response comes any more.
    Recv {
        /// The completion's status.
        status: WcStatus,
        /// The driver's code for it.
        vendor_err: u32,
    },
    /// A response shorter than [`IoConfig::response_len`]: its bytes.
    ShortResponse(u32),
    /// A response the handler said answers a slot that carries no such
    /// command (another, none, or one answered already).
    UnknownCommand {
        /// The tag it named.
        tag: u16,
        /// The command id it named.
        cid: u16,
    },
    /// A receive could not be posted again (the errno).
    RepostFailed(i32),
    /// A registration of a request's pages failed: the request waits for
    /// the shutdown.
    Registration {
        /// The completion's status.
        status: WcStatus,
        /// The driver's code for it.
        vendor_err: u32,
    },
    /// A LOCAL_INV of a request's registration failed: the request waits
    /// for the shutdown (which deregisters the MR before it ends it).
    Invalidation {
        /// The completion's status.
        status: WcStatus,
        /// The driver's code for it.
        vendor_err: u32,
    },
    /// A LOCAL_INV could not be posted (the errno): as
    /// [`IoError::Invalidation`], though the QP may still be working: the
    /// driver shuts the queue down (the tag is otherwise taken for good).
    InvalidateFailed(i32),
    /// A response that invalidated (SEND with invalidate) an rkey that is
    /// not the live registration of the request it answers: refused, as
    /// [`IoError::UnknownCommand`] (`tag` `u16::MAX` for a response that
    /// answers none). The request keeps waiting for its own.
    BogusInvalidation {
        /// The tag it named.
        tag: u16,
        /// The rkey it invalidated.
        rkey: u32,
    },
}

/// What a queue calls: the driver's decoding of responses and its error
/// handling.
pub trait IoHandler: Send + Sync {
    /// A response came: which request it answers, or `None` if it answers
    /// none (an asynchronous event the driver handles itself). Called in
    /// softirq context, inside an RCU read-side critical section, one call
    /// at a time per queue: it must not sleep, nor take a lock that is
    /// taken elsewhere with interrupts or bottom halves enabled (use
    /// [`crate::IrqLock`]).
    fn response(&self, rsp: &[u8]) -> Option<Answer>;

    /// Something went wrong ([`IoError`]); the same context as
    /// [`IoHandler::response`]. The queue goes on as it can: the driver
    /// decides whether to shut it down (it may drop its [`IoQueue`] here).
    fn error(&self, e: IoError);

    /// Where the handler's code is, as [`crate::event::EventSink`]'s
    /// method of the same name. Not to be implemented.
    #[doc(hidden)]
    fn code_address(&self, _: seal::Seal) -> [usize; 2] {
        [
            <Self as IoHandler>::response as *const () as usize,
            core::ptr::drop_in_place::<Self> as *const () as usize,
        ]
    }
}

/// What a shutdown does with the requests the queue still carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carried {
    /// Ends them with `EIO`.
    Fail,
    /// Requeues them (`queue_rq` gets them anew: a driver's error recovery
    /// then gives them back busy until its next queue is up, as the C NVMe
    /// host's), counting against [`IoConfig::max_retries`] as an
    /// [`Answer::retry`] does; one past it, fail-fast or of a disk going
    /// ends with `EIO`. They come back at once (nothing is quiesced): a
    /// driver that gives them back busy must end them once no queue will
    /// come (its disk being deleted waits for them). A request's timeout
    /// that starts such a shutdown returns
    /// [`TimeoutAction::Done`](crate::blk::TimeoutAction::Done): the
    /// shutdown may requeue the request before the handler returns, and a
    /// timer reset would then touch a request blk-mq has again.
    Retry,
}

impl Carried {
    /// The value of [`Inner::carried`]: `Fail` is larger, so that it
    /// wins.
    fn rank(self) -> u8 {
        match self {
            Carried::Retry => 1,
            Carried::Fail => 2,
        }
    }
}

/// A queue's counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct IoStats {
    /// Capsules sent.
    pub submitted: u64,
    /// Requests ended by their send's completion and response (or
    /// requeued then, [`IoStats::retried`]).
    pub finished: u64,
    /// Of those, ended with an error.
    pub failed: u64,
    /// Requests ended with `EIO` by the shutdown.
    pub ended_by_shutdown: u64,
    /// Requests requeued by the shutdown ([`Carried::Retry`]).
    pub requeued_by_shutdown: u64,
    /// Responses that answered no request carried.
    pub unknown: u64,
    /// Errors told to the handler.
    pub errors: u64,
    /// Requests whose pages were registered.
    pub registered: u64,
    /// Registrations the peer invalidated (SEND with invalidate).
    pub remote_invalidated: u64,
    /// LOCAL_INVs posted.
    pub local_invalidated: u64,
    /// Requests whose data went in the capsule's send.
    pub inline: u64,
    /// Of the finished, requests requeued for a retry ([`Answer::retry`]).
    pub retried: u64,
}

impl core::fmt::Display for IoStats {
    /// The counters as `name value` pairs, one line, for a driver's
    /// status file.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "submitted {} finished {} failed {} shutdown_ended {} shutdown_requeued {} unknown {} \
             errors {} registered {} remote_inv {} local_inv {} inline {} retried {}",
            self.submitted,
            self.finished,
            self.failed,
            self.ended_by_shutdown,
            self.requeued_by_shutdown,
            self.unknown,
            self.errors,
            self.registered,
            self.remote_invalidated,
            self.local_invalidated,
            self.inline,
            self.retried
        )
    }
}

crate::kernel_display!(IoStats);

/// The queue: its shared part, its QP until the shutdown, and its entry
/// on kverbs.ko's list of what calls a module's code.
///
/// # Invariants
///
/// `qp` is `Some` until the shutdown, which closes `shared` before it
/// drops the QP, taken by the task whose address is then in `shutter`;
/// `carried` is the largest [`Carried::rank`] asked for, 0 for none;
/// `down` (and `is_down`) are set once that shutdown is over, its handler
/// dropped. `owned` is initialised from [`IoQueue::new`] on (pinned: an
/// `Arc`'s).
#[pin_data(PinnedDrop)]
struct Inner {
    shared: Arc<Shared>,
    #[pin]
    qp: Mutex<Option<Qp<Rts>>>,
    shutter: AtomicUsize,
    carried: AtomicU8,
    #[pin]
    down: Mutex<bool>,
    #[pin]
    down_cv: CondVar,
    is_down: AtomicBool,
    #[pin]
    work: Work<Inner>,
    owned: Owned,
    /// Dropped last: the work item and the orphan callback are kverbs.ko's.
    _layer: LayerRef,
}

// SAFETY: The entry on kverbs.ko's list is reached under its lock; the
// rest is `Send + Sync` (the shared part's atomics, the QP and the end of
// the shutdown behind mutexes).
unsafe impl Send for Inner {}
// SAFETY: As above.
unsafe impl Sync for Inner {}

impl_has_work! {
    impl HasWork<Self> for Inner { self.work }
}

impl WorkItem for Inner {
    type Pointer = Arc<Inner>;

    fn run(this: Arc<Inner>) {
        this.shutdown();
    }
}

impl Inner {
    /// Asks for `c`: the shutdown fails the requests it carries if any
    /// call asked for [`Carried::Fail`] before it read what was asked,
    /// once the QP is destroyed.
    fn ask(&self, c: Carried) {
        self.carried.fetch_max(c.rank(), Ordering::AcqRel);
    }

    /// Closes the queue, drops the QP (drain, destroy), ends or requeues
    /// what is left as asked ([`Inner::ask`]) and drops the handler; once:
    /// another call waits for that one to be over, unless made by its own
    /// task (the handler's drop, which may drop or shut down its queue).
    /// Process context.
    fn shutdown(&self) {
        let me = crate::current_task();
        let q = self.qp.lock().take();
        let Some(q) = q else {
            if self.shutter.load(Ordering::Acquire) != me {
                let mut down = self.down.lock();
                while !*down {
                    self.down_cv.wait(&mut down);
                }
            }
            return;
        };
        self.shutter.store(me, Ordering::Release);
        self.shared.close();
        drop(q);
        let carried = if self.carried.load(Ordering::Acquire) == Carried::Retry.rank() {
            Carried::Retry
        } else {
            Carried::Fail
        };
        // Dropped with no lock held.
        drop(self.shared.finish_closed(carried));
        *self.down.lock() = true;
        self.is_down.store(true, Ordering::Release);
        self.down_cv.notify_all();
    }
}

#[pinned_drop]
impl PinnedDrop for Inner {
    fn drop(self: Pin<&mut Self>) {
        // The shutdown is over: the last handle queued it if it had not
        // (`IoQueue`'s drop), and the work item holds a reference until it
        // ran. If the notifier of the handler's module took the entry,
        // this waits for its orphan callback.
        // SAFETY: Initialised by `new` (type invariant).
        let _ = unsafe { self.owned.take() };
    }
}

/// The `orphan` of a queue whose handler's module is going with it
/// (leaked): shuts it down, so that no callback reaches the handler after.
///
/// # Safety
///
/// Called by kverbs.ko's module notifier, in process context with no lock
/// held, with the entry of the `owned` field of a live `Inner`, which it
/// has taken off the list.
unsafe extern "C" fn orphan(o: *mut crate::bindings::kverbs_owned) {
    // SAFETY: By the caller's guarantee; `Inner` lives until its drop,
    // which waits for `Owned::done`.
    let inner: &Inner = unsafe { Owned::owner(o, core::mem::offset_of!(Inner, owned)) };
    let _mark = crate::event::mark_delivering();
    inner.ask(Carried::Fail);
    inner.shutdown();
    inner.owned.done();
}

/// A capsule queue on an RC QP: see the [module's documentation](self).
/// Dropped without [`IoQueue::shutdown`], it shuts down on kverbs.ko's
/// events workqueue.
pub struct IoQueue {
    inner: Arc<Inner>,
}

impl IoQueue {
    /// A queue of `cfg` on `qp`, calling `handler`; its receives posted.
    /// `EINVAL` for a shape out of range, a QP whose send and receive
    /// CQs differ or are not [`PollCtx::Softirq`] (one CQ's callbacks run
    /// one at a time, in order), whose queues are too small, or of an SRQ;
    /// `EBUSY` if the QP has requests or streams outstanding.
    pub fn new(qp: Qp<Rts>, cfg: IoConfig, handler: Arc<dyn IoHandler>) -> Result<Self> {
        let attrs = qp.device().attrs();
        if !(1..=MAX_DEPTH).contains(&cfg.depth)
            || !(1..=MAX_CAPSULE).contains(&cfg.capsule_len)
            || !(1..=MAX_CAPSULE).contains(&cfg.response_len)
            || (cfg.max_pages > 0
                && (attrs.device_cap_flags()
                    & crate::bindings::IB_DEVICE_MEM_MGT_EXTENSIONS as u64
                    == 0
                    || cfg.max_pages > attrs.max_fast_reg_page_list_len()))
            || cfg.inline_segments > MAX_INLINE_SEGMENTS
            || (cfg.inline_segments > 0
                && (cfg.max_pages < cfg.inline_segments
                    || qp.max_send_sge() < cfg.inline_segments + 1))
            || qp.send_cq().as_raw() != qp.recv_cq().as_raw()
            || qp.send_cq().poll_ctx() != PollCtx::Softirq
            || qp.queue_slots(Queue::Send) < 3 * usize::from(cfg.depth)
            || qp.queue_slots(Queue::Recv) < usize::from(cfg.depth)
        {
            return Err(EINVAL);
        }
        let layer = LayerRef::new()?;
        let code = handler.code_address(seal::Seal(()));
        let shared = Shared::new(qp.pd(), qp.as_raw(), cfg, handler)?;
        let inner = Arc::pin_init(
            pin_init!(Inner {
                shared,
                qp <- new_mutex!(Some(qp)),
                shutter: AtomicUsize::new(0),
                carried: AtomicU8::new(0),
                down <- new_mutex!(false),
                down_cv <- new_condvar!(),
                is_down: AtomicBool::new(false),
                work <- new_work!("kverbs::io::IoQueue::work"),
                owned: Owned::new(),
                _layer: layer,
            }),
            GFP_KERNEL,
        )?;
        // SAFETY: `owned` is pinned in the `Arc` until `Inner`'s drop takes
        // it off; the addresses are of the handler's module.
        unsafe { inner.owned.init(code[0], code[1], None, orphan) };
        // From here on a failure is the shutdown's to undo.
        let q = IoQueue { inner };
        let attached = match &*q.inner.qp.lock() {
            Some(qp) => qp.attach_io(&q.inner.shared),
            None => Err(EINVAL),
        };
        // SAFETY: Once, after `init`. At the list's head: a queue is
        // orphaned before the disks (listed earlier or later) whose
        // orphans wait for the requests it carries.
        unsafe { q.inner.owned.add_first() };
        if let Err(e) = attached.and_then(|()| q.inner.shared.post_recvs()) {
            q.shutdown(Carried::Fail);
            return Err(e);
        }
        Ok(q)
    }

    /// Sends the capsule of `rq` with command id `cid`, which `build`
    /// writes (its [`IoConfig::capsule_len`] bytes, zeroed); the request
    /// ends when its response comes. Never sleeps nor allocates: for
    /// [`Operations::queue_rq`]. `build` runs owning the tag's slot,
    /// outside the read-side critical sections, where the caller runs: a
    /// shutdown meanwhile waits for it. Gives the request back with `ENOLINK`
    /// once the queue is shut down, `EBUSY` while the slot of its tag
    /// still carries the request before (the driver returns it busy),
    /// `EINVAL` for a tag not below the depth or a request whose `ARef`
    /// was cloned, or the post's error.
    pub fn submit<T: Operations>(
        &self,
        rq: ARef<Request<T>>,
        cid: u16,
        build: impl FnOnce(Option<RemoteBuf>, &mut [u8]),
    ) -> Result<(), (ARef<Request<T>>, Error)> {
        self.submit_with(rq, cid, 0, |d, c| {
            build(
                match d {
                    IoData::Registered(r) => Some(r),
                    _ => None,
                },
                c,
            )
        })
    }

    /// [`IoQueue::submit`], with the data of a write of at most
    /// `inline_max` bytes in at most [`IoConfig::inline_segments`]
    /// segments sent after the capsule, in the same send (in-capsule
    /// data: no registration), which `build` is told; other reads and
    /// writes registered.
    pub fn submit_with<T: Operations>(
        &self,
        rq: ARef<Request<T>>,
        cid: u16,
        inline_max: u32,
        build: impl FnOnce(IoData, &mut [u8]),
    ) -> Result<(), (ARef<Request<T>>, Error)> {
        let rq = RqRef::new(rq).map_err(|rq| (rq, EINVAL))?;
        self.inner
            .shared
            .submit(rq, cid, inline_max, build)
            .map_err(|(rq, e)| {
                // SAFETY: Made from a request of `T` above.
                (unsafe { rq.into_request::<T>() }, e)
            })
    }

    /// Shuts the queue down: nothing is submitted or answered after; the
    /// QP is drained and destroyed, every request still carried ends with
    /// `EIO` or is requeued, as `carried` says (a [`Carried::Fail`] asked
    /// by any call before the shutdown destroyed the QP wins; one asked
    /// after is too late: this call then waits for a shutdown that
    /// requeued them), and the handler is dropped. Once; later calls return at once, or wait
    /// for the one in progress (return at once when called by its own
    /// task: from the handler's drop). Process context (it sleeps): never
    /// from the handler's `response` or `error`.
    pub fn shutdown(&self, carried: Carried) {
        self.inner.ask(carried);
        self.inner.shutdown();
    }

    /// Starts [`IoQueue::shutdown`] on kverbs.ko's events workqueue and
    /// returns: from any context, a callback's too (a driver's error
    /// recovery, a request's timeout). A later `shutdown` waits for it.
    pub fn shutdown_async(&self, carried: Carried) {
        if self.is_shut_down() {
            return;
        }
        self.inner.ask(carried);
        // SAFETY: `kverbs_events_wq` is the workqueue kverbs.ko allocates
        // in its init and destroys in its exit (draining it first), which
        // has not run: `inner` holds a `LayerRef`.
        let wq = unsafe { workqueue::Queue::from_raw(crate::bindings::kverbs_events_wq().cast()) };
        // The work item's reference keeps `Inner` until the shutdown ran;
        // a work already queued is not queued again (that reference is
        // dropped), and one that ran already returns at once.
        let _ = wq.enqueue(self.inner.clone());
    }

    /// Whether the queue is shut down.
    pub fn is_shut_down(&self) -> bool {
        self.inner.is_down.load(Ordering::Acquire)
    }

    /// The queue's counters.
    pub fn stats(&self) -> IoStats {
        self.inner.shared.stats.get()
    }
}

impl Drop for IoQueue {
    /// Starts the shutdown, if it was not: as asked before (no call can
    /// ask after, this is the only handle), else with [`Carried::Fail`].
    fn drop(&mut self) {
        let _ = self.inner.carried.compare_exchange(
            0,
            Carried::Fail.rank(),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.shutdown_async(Carried::Retry);
    }
}
