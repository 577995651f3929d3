// SPDX-License-Identifier: GPL-2.0

//! Work request streams: the data path of bulk transfers and benchmarks.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`ib_post_send`, `ib_post_recv`, `ib_process_cq_direct`)
//!
//! [`Qp::post_send`] and [`Qp::wait`] give each request a slot of its own,
//! a lock, a reference to its buffer and a completion to reap: right for
//! control traffic, too slow for a data path. A stream is the data path:
//!
//! - its requests are built once, when it is created ([`SendStream::new`],
//!   [`RecvStream::new`]): buffers checked, SGEs and work requests filled;
//! - [`SendStream::post`] posts up to the stream's `depth` outstanding
//!   requests as one chain (one `ib_post_send`), signalling one in
//!   `signal_every` (CQ moderation), with no allocation and no lock;
//! - completions are counted, not returned: each signalled completion says
//!   how many requests are done ([`SendStream::completed`]); [`poll`]
//!   processes a batch of completions of a CQ polled by its waiters (busy
//!   polling) and [`wait`] waits for a count (on an adaptive CQ, sleeping
//!   or spinning as the stream's last waits say).
//!
//! Requests complete in order on a queue of an RC QP, so "request `n` is
//! done" means every request before it is too.
//!
//! # Safety of the data path
//!
//! The buffers of a stream and the `ib_cqe`s its requests name live in a
//! shared part that the QP holds as well, until it is destroyed (after its
//! drain): a stream dropped or forgotten with requests outstanding leaves
//! them to the QP, which flushes them. Once the QP is destroyed the device
//! no longer reads or writes the buffers, and the QP releases them (and so
//! their device references) whoever else still holds the shared part: a
//! forgotten stream, or a drain that failed and left the CQEs to completions
//! still in the CQ, leaks only the ring's memory, never a reference that
//! device unregistration waits for. A stream takes `depth` of the QP's
//! request slots, so streams and [`Qp::post_send`] together never have more
//! requests outstanding than the QP's queue (and its CQ room) holds; the
//! slots are given back when a stream with nothing outstanding is dropped.
//! A request that fails poisons its stream: every later call fails with
//! `EIO`.
//!
//! [`poll`]: SendStream::poll
//! [`wait`]: SendStream::wait

use crate::bindings;
use crate::cq::{adaptive, Cq, PollCtx};
use crate::dma::DmaBuf;
use crate::qp::{CanPostRecv, Cancel, Qp, Queue, Rc, Rts, SendOp, SendWr, State, Transport};
use crate::wc::WcStatus;
use core::{
    ptr,
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
};
use kernel::{
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
    types::Opaque,
};

/// A part of a buffer, the memory of a request.
#[derive(Clone)]
pub struct Segment {
    /// The buffer, mapped for the QP's device.
    pub buf: Arc<DmaBuf>,
    /// Where the data starts.
    pub offset: usize,
    /// Its length in bytes.
    pub len: usize,
}

/// What the completions of a stream tell.
///
/// # Invariants
///
/// `status` is 0 until a request fails, then `status + 1` of its completion.
struct Counts {
    completed: AtomicU64,
    status: AtomicU32,
    vendor_err: AtomicU32,
}

/// The `ib_cqe` of one position of a stream's ring.
///
/// # Invariants
///
/// `cqe` is the first field, so a pointer to it is a pointer to this.
/// `counts` points to the `Counts` of the [`Shared`] this is part of.
#[repr(C)]
struct StreamCqe {
    cqe: Opaque<bindings::ib_cqe>,
    /// Requests done once the signalled request of this position is.
    upto: AtomicU64,
    counts: *const Counts,
}

/// What a stream shares with its QP: alive until both are gone.
///
/// # Invariants
///
/// `cqes` and `counts` are never moved or reallocated (their heap
/// allocations have fixed addresses); every posted request of the stream
/// names one of `cqes`, and its memory is in one of `bufs` until the QP is
/// destroyed (then [`Shared::release_bufs`] may empty it).
#[pin_data]
pub(crate) struct Shared {
    cqes: KVec<StreamCqe>,
    counts: KBox<Counts>,
    #[pin]
    bufs: Mutex<KVec<Arc<DmaBuf>>>,
}

// SAFETY: The raw pointers of the CQEs point into this same object; the
// counters are atomics, the rest is read-only after creation.
unsafe impl Send for Shared {}
// SAFETY: As above: shared access is to atomics only.
unsafe impl Sync for Shared {}

impl Shared {
    fn new(depth: u32, bufs: KVec<Arc<DmaBuf>>) -> Result<Arc<Self>> {
        let counts = KBox::new(
            Counts {
                completed: AtomicU64::new(0),
                status: AtomicU32::new(0),
                vendor_err: AtomicU32::new(0),
            },
            GFP_KERNEL,
        )?;
        let mut cqes = KVec::with_capacity(depth as usize, GFP_KERNEL)?;
        for _ in 0..depth {
            cqes.push(
                StreamCqe {
                    cqe: Opaque::new(bindings::ib_cqe {
                        done: Some(stream_done),
                    }),
                    upto: AtomicU64::new(0),
                    counts: &*counts,
                },
                GFP_KERNEL,
            )?;
        }
        // INVARIANT: the vectors are complete and never touched again.
        Arc::pin_init(
            pin_init!(Shared {
                cqes,
                counts,
                bufs <- new_mutex!(bufs),
            }),
            GFP_KERNEL,
        )
    }

    /// Releases the buffers, which the device no longer uses: called by the
    /// QP once it is destroyed, drained or not.
    pub(crate) fn release_bufs(&self) {
        drop(core::mem::take(&mut *self.bufs.lock()));
    }

    fn completed(&self) -> u64 {
        self.counts.completed.load(Ordering::Acquire)
    }

    fn failed(&self) -> Option<(WcStatus, u32)> {
        match self.counts.status.load(Ordering::Acquire) {
            0 => None,
            s => Some((
                WcStatus::from_raw(s - 1),
                self.counts.vendor_err.load(Ordering::Relaxed),
            )),
        }
    }
}

/// The `done` function of every stream request.
///
/// # Safety
///
/// Called by the RDMA core with a completion of a stream request, whose
/// `wr_cqe` is a [`StreamCqe`] of a live [`Shared`].
unsafe extern "C" fn stream_done(cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: `wc` is valid during the call; `wr_cqe` is the first field of
    // a `StreamCqe` (type invariant), alive while its requests are: the QP
    // keeps the shared part until its drain's markers were seen done, and
    // the `done` calls of a CQ run one at a time in its order (see
    // `slot_done`), so none of this stream's runs after that.
    let (cqe, wc) = unsafe { (&*(*wc).__bindgen_anon_1.wr_cqe.cast::<StreamCqe>(), &*wc) };
    // SAFETY: `counts` points into the same `Shared` (type invariant).
    let counts = unsafe { &*cqe.counts };
    if wc.status == bindings::IB_WC_SUCCESS {
        counts
            .completed
            .fetch_max(cqe.upto.load(Ordering::Acquire), Ordering::AcqRel);
    } else if counts
        .status
        .compare_exchange(0, wc.status + 1, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        counts.vendor_err.store(wc.vendor_err, Ordering::Relaxed);
    }
    // SAFETY: `cq` is a kverbs CQ, inside its `done` callback.
    unsafe { crate::cq::wake_waiters(cq) };
}

/// The ring of requests and the counters common to both kinds of stream.
struct Ring {
    shared: Arc<Shared>,
    /// The SGEs of every segment, one after the other.
    sges: KVec<bindings::ib_sge>,
    /// Where the SGEs of each segment start in `sges`, and how many.
    segs: KVec<(usize, i32)>,
    depth: u32,
    posted: u64,
    /// How long a wait is expected to take on an adaptive CQ (see
    /// [`crate::cq::adaptive`]); 0 before the first.
    expect_ns: u64,
}

impl Ring {
    /// The ring of `depth` requests on `segs`, on queue `q` of `qp`; the
    /// SGEs name kernel virtual addresses if `virt` (inline sends).
    fn new<S: State, T: Transport>(
        depth: u32,
        segs: &[Segment],
        qp: &Qp<S, T>,
        q: Queue,
        virt: bool,
    ) -> Result<Self> {
        if depth == 0 || segs.is_empty() {
            return Err(EINVAL);
        }
        // More than the queue's slots is refused by `attach_stream` too, but
        // only after the ring is allocated: a depth of millions would be an
        // allocation the page allocator warns of.
        if depth as usize > qp.queue_slots(q) {
            return Err(ENOSPC);
        }
        let lkey = qp.pd().local_dma_lkey();
        let mut bufs = KVec::with_capacity(segs.len(), GFP_KERNEL)?;
        let mut ranges = KVec::with_capacity(segs.len(), GFP_KERNEL)?;
        let mut sges = KVec::new();
        for s in segs {
            let n = qp.check_range(q, &s.buf, s.offset, s.len)?;
            ranges.push((sges.len(), n as i32), GFP_KERNEL)?;
            for sge in s.buf.sges(s.offset, s.len, lkey, virt) {
                sges.push(sge, GFP_KERNEL)?;
            }
            bufs.push(s.buf.clone(), GFP_KERNEL)?;
        }
        Ok(Ring {
            shared: Shared::new(depth, bufs)?,
            sges,
            segs: ranges,
            depth,
            posted: 0,
            expect_ns: 0,
        })
    }

    /// The SGE list and count of segment `t`, for a request; they live in
    /// heap memory that never moves while the ring exists.
    fn sg_list(&self, t: usize) -> (*mut bindings::ib_sge, i32) {
        let (start, n) = self.segs[t];
        match self.sges.get(start) {
            Some(sge) if n > 0 => (ptr::from_ref(sge).cast_mut(), n),
            // An empty segment: no SGE.
            _ => (ptr::null_mut(), 0),
        }
    }

    fn outstanding(&self) -> u64 {
        self.posted - self.shared.completed().min(self.posted)
    }

    fn room(&self) -> u32 {
        (u64::from(self.depth) - self.outstanding().min(u64::from(self.depth))) as u32
    }

    fn check(&self, dev: &crate::device::Device, qpn: u32) -> Result {
        if let Some((status, vendor)) = self.shared.failed() {
            pr_err!(
                "{}: QP {:#x}: stream request failed: {} (vendor error {:#x})\n",
                dev.name(),
                qpn,
                status,
                vendor
            );
            return Err(EIO);
        }
        Ok(())
    }

    /// Accounts for a chain of `n` requests posted from the next position,
    /// whose post returned `ret` with `bad` at the first request the device
    /// refused (an element of the ring `base`): those before it were
    /// posted. Returns how many, or the error if none was.
    #[allow(clippy::too_many_arguments)]
    fn account<W>(
        &mut self,
        ret: i32,
        n: u32,
        base: *const W,
        bad: *const W,
        dev: &crate::device::Device,
        qpn: u32,
        what: &str,
    ) -> Result<u32> {
        let depth = self.depth as usize;
        let done = if ret == 0 {
            n
        } else {
            // Pointer arithmetic only: nothing is dereferenced.
            let size = core::mem::size_of::<W>();
            let start = (self.posted % u64::from(self.depth)) as usize;
            match (bad as usize).checked_sub(base as usize) {
                Some(off) if !bad.is_null() && off % size == 0 && off / size < depth => {
                    (((off / size) + depth - start) % depth).min(n as usize) as u32
                }
                _ => 0,
            }
        };
        self.posted += u64::from(done);
        if ret != 0 && done == 0 {
            pr_err!(
                "{}: QP {:#x}: posting a {} chain failed: {}\n",
                dev.name(),
                qpn,
                what,
                ret
            );
            return Err(Error::from_errno(ret));
        }
        Ok(done)
    }

    /// Processes completions of `cq` if it is polled directly (a batch of
    /// up to `budget`, unless another task is processing it); returns how
    /// many.
    fn process(cq: &Cq, budget: u32) -> u32 {
        cq.process_direct(budget)
    }

    /// The `n` requests to post next, as a chain: for each its sequence
    /// number, its position in the ring, and that of the next request
    /// (`None` for the last).
    fn next_chain(&self, n: u32) -> impl Iterator<Item = (u64, usize, Option<usize>)> {
        let (depth, start) = (u64::from(self.depth), self.posted);
        (0..u64::from(n)).map(move |k| {
            let seq = start + k;
            let next = (k + 1 < u64::from(n)).then(|| ((seq + 1) % depth) as usize);
            (seq, (seq % depth) as usize, next)
        })
    }

    /// Busy polling: processes up to `budget` completions of `cq` if it is
    /// polled directly, then returns the requests done; `EIO` if one failed.
    fn poll(&self, cq: &Cq, budget: u32, dev: &crate::device::Device, qpn: u32) -> Result<u64> {
        Self::process(cq, budget);
        self.check(dev, qpn)?;
        Ok(self.shared.completed())
    }

    /// Waits until `upto` requests (at most those posted) are done on `cq`:
    /// `ETIMEDOUT` after `timeout_ms`, `ECANCELED`, `EINTR`, or `EIO` if a
    /// request failed. On an adaptive CQ the wait spins, then sleeps on the
    /// CQ, after a time set by its expected time (the average of the
    /// stream's last waits), or by `pipelined`: requests behind the awaited
    /// one.
    #[allow(clippy::too_many_arguments)]
    fn wait(
        &mut self,
        cq: &Cq,
        upto: u64,
        pipelined: bool,
        timeout_ms: u32,
        cancel: &Cancel,
        dev: &crate::device::Device,
        qpn: u32,
    ) -> Result {
        let upto = upto.min(self.posted);
        let deadline = crate::Deadline::new(timeout_ms, cancel);
        let adaptive = cq.poll_ctx() == PollCtx::Adaptive;
        // The clock is read by the deadline only (at most once per poll),
        // as in a direct wait: no read of its own on the way to the
        // completion or back to the caller.
        let start = deadline.start_ns();
        // Whether a poll has found nothing yet.
        let mut waited = false;
        loop {
            self.check(dev, qpn)?;
            let done = self.shared.completed();
            if done >= upto {
                // Only adaptive ping-pong waits that waited teach the
                // expected time (a pipeline sleeps on the CQ instead).
                // It took at least until the last look at the clock.
                if adaptive && !pipelined && waited {
                    let took = deadline.last_ns().saturating_sub(start);
                    self.expect_ns = adaptive::learn(self.expect_ns, took);
                }
                return Ok(());
            }
            deadline.check()?;
            if cq.poll_ctx().polled_by_waiters() {
                // Another task may have reaped it meanwhile: look again
                // before idling (and sleep on the CQ only if no task has
                // processed a batch since this look).
                let seen = cq.gen();
                if Self::process(cq, 16) == 0 && self.shared.completed() < upto {
                    waited = true;
                    cq.idle(
                        start,
                        || deadline.last_ns(),
                        self.expect_ns,
                        pipelined,
                        seen,
                    );
                }
            } else {
                cq.wait_u64_ge(&self.shared.counts.completed, upto, 10);
            }
        }
    }

    /// On the drop of its stream on `qp`'s receive (`recv`) or send queue:
    /// gives the slots back to the QP. With requests outstanding (or a
    /// failure, after which flushed requests may still come), the QP keeps
    /// the shared part and the slots until it is destroyed.
    fn detach<S: State, T: Transport>(&self, qp: &Qp<S, T>, recv: bool) {
        if self.outstanding() == 0 && self.shared.failed().is_none() {
            qp.detach_stream(recv, self.depth, &self.shared);
        }
    }
}

/// A stream of send requests on an RC QP in RTS (see the module docs).
///
/// Request `n` (counted from 0 over the stream's life) is the one prepared
/// from `wrs[(n % depth) % wrs.len()]`.
pub struct SendStream<'a> {
    qp: &'a Qp<Rts, Rc>,
    ring: Ring,
    wrs: KVec<SendWr>,
    signal_every: u32,
    /// `IB_SEND_INLINE` or 0.
    inline: i32,
}

// SAFETY: The raw pointers in `wrs` point to this stream's own SGEs and
// CQEs; the stream is used by one thread at a time (`&mut`).
unsafe impl Send for SendStream<'_> {}

impl<'a> SendStream<'a> {
    /// A stream of at most `depth` outstanding requests on `qp`, built from
    /// `wrs` (used in turn), one in `signal_every` signalled. Takes `depth`
    /// of the QP's send slots (`ENOSPC` if fewer are free).
    ///
    /// An atomic ([`SendOp::Atomic`]) takes a segment of 8 bytes, 8-byte
    /// aligned, where its old value lands (`EINVAL` otherwise, `EOPNOTSUPP`
    /// on a device without atomics); the requests outstanding from one entry
    /// of `wrs` share it, so read it after each wait.
    pub fn new(
        qp: &'a Qp<Rts, Rc>,
        wrs: &[(SendOp, Segment)],
        depth: u32,
        signal_every: u32,
    ) -> Result<Self> {
        Self::build(qp, wrs, depth, signal_every, false)
    }

    fn build(
        qp: &'a Qp<Rts, Rc>,
        wrs: &[(SendOp, Segment)],
        depth: u32,
        signal_every: u32,
        inline: bool,
    ) -> Result<Self> {
        if signal_every == 0 || signal_every > depth {
            return Err(EINVAL);
        }
        let mut segs = KVec::with_capacity(wrs.len(), GFP_KERNEL)?;
        for (op, s) in wrs {
            if let SendOp::Atomic(a) = op {
                a.check(qp.device(), s.offset, s.len)?;
            }
            segs.push(s.clone(), GFP_KERNEL)?;
        }
        let ring = Ring::new(depth, &segs, qp, Queue::Send, inline)?;
        let mut ring_wrs = KVec::with_capacity(depth as usize, GFP_KERNEL)?;
        for i in 0..depth as usize {
            let t = i % wrs.len();
            let mut wr = SendWr::new(wrs[t].0);
            // The SGEs and the CQE live in heap memory that never moves.
            (wr.wr().sg_list, wr.wr().num_sge) = ring.sg_list(t);
            wr.wr().__bindgen_anon_1.wr_cqe = ring.shared.cqes[i].cqe.get();
            ring_wrs.push(wr, GFP_KERNEL)?;
        }
        qp.attach_stream(false, depth, &ring.shared)?;
        Ok(SendStream {
            qp,
            ring,
            wrs: ring_wrs,
            signal_every,
            inline: if inline { bindings::IB_SEND_INLINE } else { 0 },
        })
    }

    /// As [`SendStream::new`], but the data is sent inline: the CPU copies
    /// it into the request when it is posted, so the device does not read
    /// the buffer (lower latency for small messages). Every request must be
    /// a SEND or RDMA WRITE of at most [`Qp::max_inline_data`] bytes
    /// (`EINVAL` otherwise).
    pub fn new_inline(
        qp: &'a Qp<Rts, Rc>,
        wrs: &[(SendOp, Segment)],
        depth: u32,
        signal_every: u32,
    ) -> Result<Self> {
        for (op, seg) in wrs {
            if matches!(op, SendOp::Read(_) | SendOp::Atomic(_))
                || seg.len > qp.max_inline_data() as usize
            {
                return Err(EINVAL);
            }
        }
        // Inline data is named by its kernel virtual address: the CPU
        // copies it, not the device. The buffers stay held by the stream.
        Self::build(qp, wrs, depth, signal_every, true)
    }

    /// Requests posted so far.
    pub fn posted(&self) -> u64 {
        self.ring.posted
    }

    /// Requests known to be done (a signalled completion covers the
    /// unsignalled requests before it).
    pub fn completed(&self) -> u64 {
        self.ring.shared.completed()
    }

    /// How many requests may be posted now.
    pub fn room(&self) -> u32 {
        self.ring.room()
    }

    /// The CQ the requests complete on (the QP's send CQ): for a loop that
    /// polls several streams and sleeps on their CQs
    /// ([`Poller`](crate::cq::adaptive::Poller)).
    pub fn cq(&self) -> &Cq {
        self.qp.send_cq()
    }

    /// Posts `n` requests (at most [`SendStream::room`]) as one chain; the
    /// last is signalled if `last` (so that a run's tail completes).
    /// Returns how many were posted, which is fewer than `n` only if the
    /// device refused some (its error is returned when none was posted).
    pub fn post(&mut self, n: u32, last: bool) -> Result<u32> {
        let qpn = self.qp.qp_num();
        self.ring.check(self.qp.device(), qpn)?;
        let n = n.min(self.ring.room());
        if n == 0 {
            return Ok(0);
        }
        let first = self.ring.posted % u64::from(self.ring.depth);
        for (seq, i, next) in self.ring.next_chain(n) {
            let signaled =
                (seq + 1) % u64::from(self.signal_every) == 0 || (last && next.is_none());
            if signaled {
                // Read by `stream_done` after the request completes; the
                // previous request of this position is done (room).
                self.ring.shared.cqes[i]
                    .upto
                    .store(seq + 1, Ordering::Release);
            }
            let next = match next {
                Some(j) => ptr::from_mut(self.wrs[j].wr()),
                None => ptr::null_mut(),
            };
            let wr = self.wrs[i].wr();
            wr.send_flags = self.inline
                | if signaled {
                    bindings::IB_SEND_SIGNALED
                } else {
                    0
                };
            wr.next = next;
        }
        let first = ptr::from_mut(self.wrs[first as usize].wr()).cast_const();
        let mut bad = ptr::null();
        // SAFETY: The QP is live and in RTS; the chain's requests are valid
        // for it (built in `new`: SGEs of buffers mapped for its device held
        // by the shared part, 8 aligned bytes for an atomic, CQEs of the
        // shared part, which the QP keeps until it is destroyed), each the
        // `ib_rdma_wr` or `ib_atomic_wr` its opcode names (`SendWr`).
        let ret = unsafe { bindings::ib_post_send(self.qp.as_raw(), first, &mut bad) };
        // `wr` is at offset 0 of a `SendWr`: `bad` is a ring element.
        let (base, bad) = (self.wrs.as_ptr(), bad.cast::<SendWr>());
        self.ring
            .account(ret, n, base, bad, self.qp.device(), qpn, "send")
    }

    /// Busy polling: processes up to `budget` completions of a directly
    /// polled send CQ (nothing on others, whose completions come by
    /// themselves), then returns [`SendStream::completed`]; `EIO` if a
    /// request failed.
    pub fn poll(&mut self, budget: u32) -> Result<u64> {
        let qp = self.qp;
        self.ring
            .poll(qp.send_cq(), budget, qp.device(), qp.qp_num())
    }

    /// Waits until `upto` requests are done: `ETIMEDOUT` after
    /// `timeout_ms`, `ECANCELED`, `EINTR`, or `EIO` if a request failed.
    pub fn wait(&mut self, upto: u64, timeout_ms: u32, cancel: &Cancel) -> Result {
        let qp = self.qp;
        // Requests behind the awaited one keep the device busy meanwhile.
        let pipelined = self.ring.posted > upto;
        self.ring.wait(
            qp.send_cq(),
            upto,
            pipelined,
            timeout_ms,
            cancel,
            qp.device(),
            qp.qp_num(),
        )
    }
}

impl Drop for SendStream<'_> {
    fn drop(&mut self) {
        self.ring.detach(self.qp, false);
    }
}

/// A stream of receive requests (see the module docs); request `n` uses
/// segment `(n % depth) % segs.len()`. Every receive is signalled.
pub struct RecvStream<'a, S: CanPostRecv, T: Transport> {
    qp: &'a Qp<S, T>,
    ring: Ring,
    wrs: KVec<bindings::ib_recv_wr>,
}

// SAFETY: As for `SendStream`.
unsafe impl<S: CanPostRecv, T: Transport> Send for RecvStream<'_, S, T> {}

impl<'a, S: CanPostRecv, T: Transport> RecvStream<'a, S, T> {
    /// A stream of at most `depth` outstanding receives into `segs`. Takes
    /// `depth` of the QP's receive slots (`ENOSPC` if fewer are free).
    pub fn new(qp: &'a Qp<S, T>, segs: &[Segment], depth: u32) -> Result<Self> {
        let ring = Ring::new(depth, segs, qp, Queue::Recv, false)?;
        let mut wrs = KVec::with_capacity(depth as usize, GFP_KERNEL)?;
        for i in 0..depth as usize {
            let t = i % segs.len();
            let (sg_list, num_sge) = ring.sg_list(t);
            let mut wr = bindings::ib_recv_wr {
                sg_list,
                num_sge,
                ..Default::default()
            };
            wr.__bindgen_anon_1.wr_cqe = ring.shared.cqes[i].cqe.get();
            wrs.push(wr, GFP_KERNEL)?;
        }
        qp.attach_stream(true, depth, &ring.shared)?;
        Ok(RecvStream { qp, ring, wrs })
    }

    /// Receives posted so far.
    pub fn posted(&self) -> u64 {
        self.ring.posted
    }

    /// Receives done.
    pub fn completed(&self) -> u64 {
        self.ring.shared.completed()
    }

    /// How many receives may be posted now.
    pub fn room(&self) -> u32 {
        self.ring.room()
    }

    /// The CQ the receives complete on (the QP's receive CQ).
    pub fn cq(&self) -> &Cq {
        self.qp.recv_cq()
    }

    /// Posts `n` receives (at most [`RecvStream::room`]) as one chain;
    /// returns how many were posted.
    pub fn post(&mut self, n: u32) -> Result<u32> {
        let qpn = self.qp.qp_num();
        self.ring.check(self.qp.device(), qpn)?;
        let n = n.min(self.ring.room());
        if n == 0 {
            return Ok(0);
        }
        let first = self.ring.posted % u64::from(self.ring.depth);
        for (seq, i, next) in self.ring.next_chain(n) {
            self.ring.shared.cqes[i]
                .upto
                .store(seq + 1, Ordering::Release);
            self.wrs[i].next = match next {
                Some(j) => ptr::from_mut(&mut self.wrs[j]),
                None => ptr::null_mut(),
            };
        }
        let first = ptr::from_ref(&self.wrs[first as usize]);
        let mut bad = ptr::null();
        // SAFETY: The QP is live and may take receives (`S`); the requests
        // were built in `new` on mapped buffers and CQEs the shared part
        // holds, which the QP keeps until it is destroyed.
        let ret = unsafe { bindings::ib_post_recv(self.qp.as_raw(), first, &mut bad) };
        let base = self.wrs.as_ptr();
        self.ring
            .account(ret, n, base, bad, self.qp.device(), qpn, "receive")
    }

    /// As [`SendStream::poll`], on the receive CQ.
    pub fn poll(&mut self, budget: u32) -> Result<u64> {
        let qp = self.qp;
        self.ring
            .poll(qp.recv_cq(), budget, qp.device(), qp.qp_num())
    }

    /// As [`SendStream::wait`], on the receive CQ.
    pub fn wait(&mut self, upto: u64, timeout_ms: u32, cancel: &Cancel) -> Result {
        let qp = self.qp;
        // Receives are posted ahead of the messages: they say nothing of
        // what the peer is doing, so a receive's wait is never pipelined.
        self.ring.wait(
            qp.recv_cq(),
            upto,
            false,
            timeout_ms,
            cancel,
            qp.device(),
            qp.qp_num(),
        )
    }
}

impl<S: CanPostRecv, T: Transport> Drop for RecvStream<'_, S, T> {
    fn drop(&mut self) {
        self.ring.detach(self.qp, true);
    }
}
