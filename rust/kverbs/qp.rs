// SPDX-License-Identifier: GPL-2.0

//! Queue pairs and work requests.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! # The state machine in the types
//!
//! A [`Qp<S, T>`] is an RC ([`Rc`], the default) or UD ([`Ud`]) queue pair
//! in state `S`: what a verb needs of the transport is in the type, so an
//! RDMA operation cannot be posted on a UD QP nor a datagram on an RC QP:
//!
//! ```compile_fail,E0599
//! # use kverbs::{dma::DmaBuf, qp::{Qp, Rts, SendOp, Ud}};
//! # use kernel::{prelude::*, sync::Arc};
//! fn f(qp: &Qp<Rts, Ud>, buf: &Arc<DmaBuf>) -> Result {
//!     qp.post_send(SendOp::Send, buf, 0, 1, true)?; // RC only
//!     Ok(())
//! }
//! ```
//!
//! A [`Qp<S, T>`] is created in [`Reset`]. Each transition consumes the QP and
//! returns it in the next state, taking exactly the attributes the verbs
//! require for it: [`Qp::<Reset>::to_init`], [`Qp::<Init>::to_rtr`],
//! [`Qp::<Rtr>::to_rts`]; any state may go to [`ErrorState`] with
//! [`Qp::to_error`]. A transition the verbs forbid does not compile. A
//! modify the device rejects returns its errno, and the attribute mask is
//! named in the kernel log; the QP is then destroyed.
//!
//! Receives may be posted from [`Init`] on, sends only in [`Rts`].
//!
//! # Objects of one device and PD
//!
//! The CQs of a QP must be of its PD's device, with room for every
//! completion the QP can have outstanding (its queue sizes plus one each
//! for the drain): [`Cq`] counts what its QPs take. Buffers posted on a QP
//! must be mapped for its device, AHs created in its PD, ports among the
//! device's. Anything else is refused with `EINVAL` and a kernel message.
//!
//! # Work requests and buffer lifetimes
//!
//! Every posted work request takes a slot of the QP's send or receive
//! queue. The slot holds an `ib_cqe`, whose `done` records the completion
//! in the slot and wakes the CQ's waiters, and, until the completion has
//! been reaped, the resources the request uses: an `Arc<DmaBuf>` for its
//! local buffer, the memory region it registers. So a buffer cannot be freed
//! while the device may still access it, whatever the caller does.
//! [`Qp::wait`] reaps a completion and releases its slot, given the
//! [`WrId`] the post returned: a `WrId` is used once (it is not `Copy`) and
//! only on its own QP, so one completion is never reaped twice:
//!
//! ```compile_fail,E0382
//! # use kverbs::qp::{Cancel, Qp, Rts, WrId};
//! # use kernel::prelude::*;
//! fn f(qp: &Qp<Rts>, id: WrId, c: &Cancel) -> Result {
//!     qp.wait(id, 100, c)?;
//!     qp.wait(id, 100, c)?; // used
//!     Ok(())
//! }
//! ```
//!
//! The slot of an unsignalled send is released when a later signalled
//! send completes. When the QP is dropped it is drained first (moved to
//! ERR, a marker posted on each queue and its completion waited for, as
//! `ib_drain_qp` does): every outstanding request completes (flushed),
//! then the QP is destroyed and all slots released.
//! The QP holds its CQs and PD, which are thus freed after it:
//! drain, QP, CQ, PD.

mod apm;
mod attr;
mod create;
mod drain;
mod mcast;
mod post;
mod slot;
mod transition;

pub use crate::wait::Cancel;
pub use apm::path_mig_supported;
pub use attr::{
    Access, AddressVector, AltPath, AtomicOp, CanPostRecv, ErrorState, Init, InitAttr, MigState,
    QpCaps, Rc, RemoteBuf, Reset, Rtr, RtrAttr, Rts, RtsAttr, SendOp, State, Transport, Ud, UdDest,
    GRH_LEN,
};
pub use drain::DrainFaultInjection;
pub use slot::{Waited, WrId};

pub(crate) use attr::SendWr;
pub(crate) use create::check_port;
use create::CqRoom;
pub(crate) use slot::{
    leak, new_res, new_slots, reserve, unreserve, Queue, Slot, SlotRes, SLOT_DONE, SLOT_FREE,
    SLOT_POSTED,
};

use crate::ah::AhInner;
use crate::bindings;
use crate::cm::CmIdRef;
use crate::cq::Cq;
use crate::device::{Device, Gid, PortNum};
use crate::event::EventQueue;
use crate::layer_ref::LayerRef;
use crate::pd::Pd;
use crate::srq::Srq;
use crate::stream;
use core::{marker::PhantomData, mem::ManuallyDrop, ptr, ptr::NonNull};
use kernel::{prelude::*, sync::Arc, sync::Mutex};

/// Process-context bookkeeping of the slots.
struct Book {
    send: KVec<SlotRes>,
    recv: KVec<SlotRes>,
    posted_any: bool,
    /// A UD QP's most recent AH, for the marker of its drain.
    last_ah: Option<Arc<AhInner>>,
    /// The multicast groups the QP is attached to.
    mcast: KVec<Gid>,
    /// The shared parts of its streams (their requests name them); a
    /// detached stream leaves a free entry.
    streams: KVec<Option<Arc<stream::Shared>>>,
    /// The shared part of the capsule queue the QP carries, if any (at
    /// most one; a vector, to be leaked as the slots are).
    io: KVec<Arc<crate::io::Shared>>,
}

/// # Invariants
///
/// `qp` was created by `ib_create_qp` with `send_cq`, `recv_cq` and `pd`,
/// which the fields keep alive, and is not yet destroyed. The slot arrays
/// are never reallocated; their `ib_cqe`s are the `wr_cqe` of every request
/// posted on `qp`. Each has one slot more than `book`'s: the last, the
/// drain's marker. `events`, if any, is the `qp_context` of `qp`, a leaked
/// [`EventQueue`] reference given back after `qp` is destroyed. `send_cq`,
/// `recv_cq`, `pd` and `_layer` are dropped by the drop, last, once `qp`
/// is destroyed, and never if its destruction failed: the QP, still live,
/// names them, and its handlers are kverbs.ko's code.
#[pin_data(PinnedDrop)]
struct QpInner {
    qp: NonNull<bindings::ib_qp>,
    events: Option<NonNull<EventQueue>>,
    /// The shared receive queue the QP receives from, if any: it lives
    /// until the QP is destroyed.
    srq: Option<Srq>,
    /// The connection manager ID the QP belongs to, if it was created by
    /// `rdma_create_qp` (then it is destroyed by `rdma_destroy_qp`).
    cm: Option<CmIdRef>,
    ud: bool,
    port: PortNum,
    /// The bytes a send may carry inline.
    max_inline: u32,
    /// The SGEs a request may have on each queue.
    max_send_sge: u32,
    max_recv_sge: u32,
    send_slots: KVec<Slot>,
    recv_slots: KVec<Slot>,
    #[pin]
    book: Mutex<Book>,
    send_cq: ManuallyDrop<CqRoom>,
    recv_cq: ManuallyDrop<CqRoom>,
    pd: ManuallyDrop<Pd>,
    /// Dropped last, once the QP is destroyed and its queue given back.
    _layer: ManuallyDrop<LayerRef>,
}

/// A queue pair of transport `T` ([`Rc`] or [`Ud`]) in state `S`.
pub struct Qp<S: State, T: Transport = Rc> {
    inner: Pin<KBox<QpInner>>,
    _state: PhantomData<(S, T)>,
}

// SAFETY: The QP and its bookkeeping (under a mutex) may be used from any
// thread; the slots are shared with `done` callbacks through atomics.
unsafe impl<S: State, T: Transport> Send for Qp<S, T> {}
// SAFETY: All methods of `&Qp` are thread safe (the verbs are; the
// bookkeeping is locked).
unsafe impl<S: State, T: Transport> Sync for Qp<S, T> {}

impl<S: State, T: Transport> Qp<S, T> {
    /// The bytes a send may carry inline, as the driver set them when the
    /// QP was created (at least what [`QpCaps::max_inline_data`] asked).
    pub fn max_inline_data(&self) -> u32 {
        self.inner.max_inline
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: The QP is live; its number never changes.
        unsafe { (*self.inner.qp.as_ptr()).qp_num }
    }

    /// The device.
    pub fn device(&self) -> &Device {
        self.inner.pd.device()
    }

    /// The PD.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    /// The port.
    pub fn port(&self) -> PortNum {
        self.inner.port
    }

    /// Whether the QP was created on the connection manager ID `cm`.
    pub(crate) fn cm_id_is(&self, cm: &CmIdRef) -> bool {
        self.inner.cm.as_ref().is_some_and(|c| Arc::ptr_eq(c, cm))
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::ib_qp {
        self.inner.qp.as_ptr()
    }

    pub(crate) fn send_cq(&self) -> &Cq {
        &self.inner.send_cq.cq
    }

    pub(crate) fn recv_cq(&self) -> &Cq {
        &self.inner.recv_cq.cq
    }

    /// The SGEs a send request may have (what the QP was created with).
    pub(crate) fn max_send_sge(&self) -> u32 {
        self.inner.max_send_sge
    }

    /// The requests queue `q` holds at once (what it was created for): the
    /// most a stream on it may take.
    pub(crate) fn queue_slots(&self, q: Queue) -> usize {
        let book = self.inner.book.lock();
        match q {
            Queue::Send => book.send.len(),
            Queue::Recv => book.recv.len(),
        }
    }

    /// Takes `n` free slots of the receive (`recv`) or send queue for a
    /// stream, and keeps `shared` until the QP is destroyed or the stream
    /// detaches. `ENOSPC` if fewer slots are free.
    pub(crate) fn attach_stream(&self, recv: bool, n: u32, shared: &Arc<stream::Shared>) -> Result {
        let mut book = self.inner.book.lock();
        let book = &mut *book;
        let res = if recv { &mut book.recv } else { &mut book.send };
        if res.iter().filter(|r| !r.busy).count() < n as usize {
            return Err(ENOSPC);
        }
        match book.streams.iter_mut().find(|s| s.is_none()) {
            Some(free) => *free = Some(shared.clone()),
            None => book.streams.push(Some(shared.clone()), GFP_KERNEL)?,
        }
        res.iter_mut()
            .filter(|r| !r.busy)
            .take(n as usize)
            .for_each(SlotRes::take_for_stream);
        book.posted_any = true;
        Ok(())
    }

    /// Gives back what [`Qp::attach_stream`] took, for a stream with
    /// nothing outstanding.
    pub(crate) fn detach_stream(&self, recv: bool, n: u32, shared: &Arc<stream::Shared>) {
        let mut book = self.inner.book.lock();
        let book = &mut *book;
        if let Some(s) = book
            .streams
            .iter_mut()
            .find(|s| s.as_ref().is_some_and(|s| ptr::eq(&**s, &**shared)))
        {
            *s = None;
        }
        let res = if recv { &mut book.recv } else { &mut book.send };
        for r in res.iter_mut().filter(|r| r.stream).take(n as usize) {
            *r = SlotRes::default();
        }
    }
}

impl Qp<Rts> {
    /// Gives every slot of both queues to a capsule queue ([`crate::io`]),
    /// and keeps `shared` until the QP is destroyed: `EBUSY` if a request,
    /// a stream or another capsule queue has any; `EINVAL` for a QP of an
    /// SRQ.
    pub(crate) fn attach_io(&self, shared: &Arc<crate::io::Shared>) -> Result {
        if self.inner.srq.is_some() {
            return Err(EINVAL);
        }
        let mut book = self.inner.book.lock();
        let book = &mut *book;
        if !book.io.is_empty()
            || book.streams.iter().any(Option::is_some)
            || book.send.iter().chain(book.recv.iter()).any(|r| r.busy)
        {
            return Err(EBUSY);
        }
        book.io.push(shared.clone(), GFP_KERNEL)?;
        book.send
            .iter_mut()
            .chain(book.recv.iter_mut())
            .for_each(SlotRes::take_for_stream);
        book.posted_any = true;
        Ok(())
    }
}

impl QpInner {
    /// The identity of the QP in [`WrId`]s: the address of its pinned
    /// `QpInner`.
    fn id(&self) -> usize {
        ptr::from_ref(self) as usize
    }
    fn qp_num(&self) -> u32 {
        // SAFETY: The QP is live; its number never changes.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }
}

/// Destroys `qp`: through `cm`, the connection manager ID it was created
/// on, if any (`rdma_destroy_qp`), else with `ib_destroy_qp`. Returns the
/// destruction's error, 0 through the ID: `rdma_destroy_qp` clears
/// `id->qp` whatever `ib_destroy_qp` returned and says nothing, so it is
/// taken as success. The core refuses only a QP with users (`qp->usecnt`:
/// a multicast group, which an RC QP never joins) and rxe only one in a
/// group (`rxe_qp_chk_destroy`); a driver whose `destroy_qp` can fail
/// (bnxt_re's firmware errors) is not seen there.
///
/// # Safety
///
/// `qp` is live and not used by the caller after this (unless it failed);
/// `cm`, if any, is the live ID `qp` was created on.
unsafe fn destroy_qp(qp: *mut bindings::ib_qp, cm: Option<*mut bindings::rdma_cm_id>) -> i32 {
    match cm {
        Some(id) => {
            // SAFETY: By the caller's guarantee.
            unsafe { bindings::rdma_destroy_qp(id) };
            0
        }
        // SAFETY: By the caller's guarantee.
        None => unsafe { bindings::ib_destroy_qp(qp) },
    }
}

#[pinned_drop]
impl PinnedDrop for QpInner {
    fn drop(self: Pin<&mut Self>) {
        let qp = self.qp.as_ptr();
        let (posted_any, last_ah, groups, streams, io) = {
            let mut book = self.book.lock();
            (
                book.posted_any,
                book.last_ah.clone(),
                core::mem::take(&mut book.mcast),
                core::mem::take(&mut book.streams),
                core::mem::take(&mut book.io),
            )
        };
        for g in groups.iter() {
            let mut gid = bindings::ib_gid { raw: g.0 };
            // SAFETY: The QP is live and attached to the group. A detach
            // that fails leaves `qp->usecnt` raised: `ib_destroy_qp` below
            // then fails with `EBUSY`, and the QP is leaked whole.
            unsafe { bindings::ib_detach_mcast(qp, &mut gid, 0) };
        }
        // `last_ah` lives until the QP is destroyed: a send marker that did
        // not complete still names it.
        // A QP of an SRQ may have taken receives without ever posting: it
        // is always drained (its last receive waited for).
        let drained = (!posted_any && self.srq.is_none()) || self.drain(last_ah.as_ref());
        // Read now: the QP is freed by its destruction.
        let qpn = self.qp_num();
        let events = self.events;
        // SAFETY: The QP is live; if it was drained, the device no longer
        // uses it or any memory its requests named. The ID of a QP of a
        // connection manager ID is kept alive by `cm` until after.
        let ret = unsafe { destroy_qp(qp, self.cm.as_ref().map(|c| c.as_raw())) };
        if let Some(cm) = &self.cm {
            cm.release_qp();
        }
        if drained || ret == 0 {
            // Destroyed, or nothing outstanding (a drained QP whose
            // destruction failed): the device touches none of the capsule
            // queue's memory.
            for s in io.iter() {
                s.qp_quiesced();
            }
        }
        // SAFETY: Only fields that are not structurally pinned are moved out
        // or dropped below (not `book`, only what its lock gives).
        let this = unsafe { self.get_unchecked_mut() };
        if ret != 0 {
            // The QP lives on (`ib_destroy_qp_user` fails with `EBUSY` while
            // it has users; a driver's `destroy_qp` may fail, bnxt_re's on
            // a firmware error): its requests may still complete into the
            // slots and buffers, its handler still gets the event queue,
            // and it names its SRQ, CQs and PD. All of it is leaked, with
            // the reference to kverbs.ko.
            pr_err!(
                "{}: QP {:#x} could not be destroyed ({}): it and what it uses are leaked\n",
                this.pd.device().name(),
                qpn,
                ret
            );
            for slots in [&mut this.send_slots, &mut this.recv_slots] {
                leak(core::mem::replace(slots, KVec::new()));
            }
            {
                let mut book = this.book.lock();
                let book = &mut *book;
                for res in [&mut book.send, &mut book.recv] {
                    leak(core::mem::replace(res, KVec::new()));
                }
                core::mem::forget(book.last_ah.take());
            }
            leak(streams);
            leak(io);
            core::mem::forget(last_ah);
            core::mem::forget(this.srq.take());
            core::mem::forget(this.cm.take());
            return;
        }
        if let Some(srq) = &this.srq {
            srq.remove_qp(qp);
        }
        if !drained {
            // The QP is destroyed: the device no longer uses it or the
            // memory of its requests, which is released below. But
            // completions of requests that did not flush may still be in
            // the CQ, which outlives the QP, and reach their slots when it
            // is polled: the slot arrays are leaked, never freed under a
            // `done` call (and marked for kmemleak as leaked on purpose).
            pr_err!(
                "{}: QP {:#x} was not drained: its {} slots are leaked\n",
                this.pd.device().name(),
                qpn,
                this.send_slots.len() + this.recv_slots.len()
            );
            for slots in [&mut this.send_slots, &mut this.recv_slots] {
                leak(core::mem::replace(slots, KVec::new()));
            }
            // Those completions also take room in the CQs: it stays taken,
            // or a new QP given it could overrun them.
            this.send_cq.keep_taken();
            this.recv_cq.keep_taken();
        }
        // The QP is destroyed: the device no longer touches the streams'
        // buffers, which are released now, drained or not, so that no
        // reference to the device is left behind.
        for s in streams.iter().flatten() {
            s.release_bufs();
        }
        if drained {
            drop(streams);
            drop(io);
        } else {
            // As the slots: their CQEs may still be reached by completions
            // in the CQ; only that memory is leaked.
            leak(streams);
            leak(io);
        }
        drop(last_ah);
        if let Some(e) = events {
            // SAFETY: By the type invariant, the queue's reference of the
            // QP, which is destroyed: no event comes any more.
            unsafe { EventQueue::release(e) };
        }
        // Then what the QP used, in teardown order: its SRQ and ID, the
        // slots' resources (buffers, MRs), the CQs, the PD, kverbs.ko.
        drop(this.srq.take());
        drop(this.cm.take());
        drop(core::mem::replace(&mut this.send_slots, KVec::new()));
        drop(core::mem::replace(&mut this.recv_slots, KVec::new()));
        // (Taken under the lock, dropped after it: an MR's drop takes its
        // own lock, which is taken before a QP's book when posting.)
        let (send, recv, ah) = {
            let mut book = this.book.lock();
            (
                core::mem::replace(&mut book.send, KVec::new()),
                core::mem::replace(&mut book.recv, KVec::new()),
                book.last_ah.take(),
            )
        };
        drop((send, recv, ah));
        // SAFETY: Each is dropped once, here; the QP that used them is
        // destroyed and nothing of `this` uses them after.
        unsafe {
            ManuallyDrop::drop(&mut this.send_cq);
            ManuallyDrop::drop(&mut this.recv_cq);
            ManuallyDrop::drop(&mut this.pd);
            ManuallyDrop::drop(&mut this._layer);
        }
    }
}
