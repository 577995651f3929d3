// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues (`struct ib_srq`): one pool of receives that many
//! RC QPs take from.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! An [`Srq`] is created with the CQ its receives complete on; every QP
//! that uses it ([`crate::qp::Qp::new_rc_srq`], [`crate::qp::Qp::new_cm_srq`])
//! has that CQ as its receive CQ and holds the SRQ, so the SRQ is destroyed
//! only after the last of its QPs: the teardown order QP -> SRQ -> CQ -> PD
//! is the types'. A completion names the QP the message came in on
//! ([`Wc::qp_num`]).

use crate::{
    bindings,
    cq::Cq,
    dma::DmaBuf,
    event::{EventQueue, EventSink},
    irq_lock::IrqLock,
    layer_ref::LayerRef,
    pd::Pd,
    qp::{self, Cancel, Slot, SlotRes, SLOT_FREE},
    wc::Wc,
};
use core::mem::ManuallyDrop;
use core::ptr::{self, NonNull};
use core::sync::atomic::Ordering;
use kernel::{new_mutex, prelude::*, sync::Arc, sync::Mutex};

/// A receive posted to an SRQ, to wait for with [`Srq::wait`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SrqWrId {
    /// The address of the SRQ's `SrqInner`, as its identity.
    srq: usize,
    index: usize,
    seq: u64,
}

/// Process-context bookkeeping.
struct Book {
    res: KVec<SlotRes>,
}

/// The QPs using an SRQ, by `ib_qp` address and number: the `done` of its
/// receives names the QP a completion came in on when the completion is
/// processed, from its address, without touching a QP that may be gone. A
/// QP leaves the table once it is destroyed -- after its drain waited for
/// its last receive (`IB_EVENT_QP_LAST_WQE_REACHED`) -- so a later QP at the
/// same address is never taken for it by a completion processed in time.
///
/// Shared by the SRQ and its slots, which the CQ keeps after the SRQ: alive
/// as long as a `done` may look in it.
#[pin_data]
pub(crate) struct QpTable {
    #[pin]
    qps: IrqLock<KVec<(usize, u32)>>,
}

impl QpTable {
    /// The number of the QP at `raw`, 0 if none.
    pub(crate) fn qp_num(&self, raw: usize) -> u32 {
        self.qps
            .with(|qps| qps.iter().find(|q| q.0 == raw).map_or(0, |q| q.1))
    }
}

/// # Invariants
///
/// `srq` was created by `ib_create_srq` on `pd` and is not destroyed; its
/// receives complete on `cq`, whose room for `max_wr` of them this SRQ
/// holds. `slots` are the `wr_cqe` of every receive posted; they are handed
/// to `cq` on drop, so they live as long as completions may name them.
/// `events`, if any, is the `srq_context`, an [`EventQueue`] given back after
/// `srq` is destroyed. `cq`, `pd` and `_layer` are dropped by the drop once
/// `srq` is destroyed, and never if its destruction failed.
#[pin_data(PinnedDrop)]
pub(crate) struct SrqInner {
    srq: NonNull<bindings::ib_srq>,
    events: Option<NonNull<EventQueue>>,
    slots: KVec<Slot>,
    /// Named by every slot.
    qps: Arc<QpTable>,
    #[pin]
    book: Mutex<Book>,
    max_wr: u32,
    max_sge: u32,
    cq: ManuallyDrop<Cq>,
    pd: ManuallyDrop<Pd>,
    /// Dropped last, once the SRQ is destroyed and its queue given back.
    _layer: ManuallyDrop<LayerRef>,
}

/// A shared receive queue; clones are handles to the same SRQ, which is
/// destroyed with the last of them and of its QPs.
#[derive(Clone)]
pub struct Srq(Arc<SrqInner>);

// SAFETY: The SRQ may be used and destroyed from any thread; the
// bookkeeping is locked, the slots are shared with `done` through atomics.
unsafe impl Send for SrqInner {}
// SAFETY: All methods of `&SrqInner` are thread safe.
unsafe impl Sync for SrqInner {}

impl Srq {
    /// Creates an SRQ of `max_wr` receives of up to `max_sge` SGEs on the
    /// PD's device, its receives completing on `cq` (which must have room
    /// for `max_wr` more; `EINVAL` otherwise).
    pub fn new(pd: &Pd, cq: &Cq, max_wr: u32, max_sge: u32) -> Result<Self> {
        Self::create(pd, cq, max_wr, max_sge, None)
    }

    /// [`Srq::new`], with the SRQ's events (`IB_EVENT_SRQ_LIMIT_REACHED`
    /// when armed with [`Srq::arm_limit`], `IB_EVENT_SRQ_ERR`) given to
    /// `sink` until it is destroyed.
    pub fn new_with_events(
        pd: &Pd,
        cq: &Cq,
        max_wr: u32,
        max_sge: u32,
        sink: Arc<dyn EventSink>,
    ) -> Result<Self> {
        Self::create(pd, cq, max_wr, max_sge, Some(sink))
    }

    fn create(
        pd: &Pd,
        cq: &Cq,
        max_wr: u32,
        max_sge: u32,
        events: Option<Arc<dyn EventSink>>,
    ) -> Result<Self> {
        let dev = pd.device();
        if max_wr == 0 || !cq.device().same_as(dev) {
            return Err(EINVAL);
        }
        cq.take_room(max_wr)?;
        let give_back = || cq.give_room(max_wr);
        let table = Arc::pin_init(
            pin_init!(QpTable {
                qps <- IrqLock::new(KVec::new()),
            }),
            GFP_KERNEL,
        );
        let made = table.and_then(|t| {
            let slots = qp::new_slots(max_wr, Some(&t))?;
            Ok((t, slots, qp::new_res(max_wr)?))
        });
        let (table, slots, res) = match made {
            Ok(v) => v,
            Err(e) => {
                give_back();
                return Err(e);
            }
        };
        let mut init = bindings::ib_srq_init_attr {
            srq_type: bindings::IB_SRQT_BASIC,
            ..Default::default()
        };
        init.attr.max_wr = max_wr;
        init.attr.max_sge = max_sge.max(1);
        // kverbs.ko's, held while the SRQ may call its code (the receives'
        // `done`, the event handler): until `SrqInner` has destroyed it (on
        // failure it is given back first, while the module calling this
        // keeps kverbs.ko loaded anyway).
        let layer = match LayerRef::new() {
            Ok(l) => l,
            Err(e) => {
                give_back();
                return Err(e);
            }
        };
        let events = match events.map(EventQueue::new_raw) {
            Some(Ok(q)) => {
                init.event_handler = Some(crate::event::object_event);
                init.srq_context = q.as_ptr().cast();
                Some(q)
            }
            Some(Err(e)) => {
                give_back();
                return Err(e);
            }
            None => None,
        };
        let free_events = |events: Option<NonNull<EventQueue>>| {
            if let Some(e) = events {
                // SAFETY: From `new_raw` above; the SRQ that used it is
                // destroyed or was never created.
                unsafe { EventQueue::release(e) };
            }
        };
        // SAFETY: The PD is live; `init` is a valid attribute set.
        let srq =
            kernel::error::from_err_ptr(unsafe { bindings::ib_create_srq(pd.as_raw(), &mut init) })
                .and_then(|p| NonNull::new(p).ok_or(ENOMEM));
        let srq = match srq {
            Ok(s) => s,
            Err(e) => {
                free_events(events);
                give_back();
                return Err(e);
            }
        };
        let (max_wr_got, max_sge_got) = (init.attr.max_wr.min(max_wr), init.attr.max_sge);
        let book = Book { res };
        let inner = Arc::pin_init(
            try_pin_init!(SrqInner {
                srq,
                events,
                slots,
                qps: table,
                book <- new_mutex!(book),
                max_wr: max_wr_got,
                max_sge: max_sge_got,
                cq: ManuallyDrop::new(cq.clone()),
                pd: ManuallyDrop::new(pd.clone()),
                _layer: ManuallyDrop::new(layer),
            }),
            GFP_KERNEL,
        );
        match inner {
            // INVARIANT: created above on `pd`, completing on `cq`, whose
            // room is held.
            Ok(inner) => Ok(Srq(inner)),
            Err(e) => {
                // SAFETY: Created above; nothing was posted and no QP uses it
                // (`srq->usecnt` is 0, so the core does not refuse).
                let ret = unsafe { bindings::ib_destroy_srq_user(srq.as_ptr(), ptr::null_mut()) };
                // A driver's failure leaves the SRQ live, naming its event
                // queue, its CQ's room, the PD and kverbs.ko's code: all
                // leaked (a reference to kverbs.ko taken and never given
                // back: the caller holds one, so this cannot fail).
                if ret == 0 {
                    free_events(events);
                    give_back();
                } else {
                    core::mem::forget(LayerRef::new());
                    core::mem::forget(pd.clone());
                    core::mem::forget(cq.clone());
                }
                Err(e)
            }
        }
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::ib_srq {
        self.0.srq.as_ptr()
    }

    /// The CQ its receives complete on.
    pub fn cq(&self) -> &Cq {
        &self.0.cq
    }

    /// The receives it holds at most.
    pub fn max_wr(&self) -> u32 {
        self.0.max_wr
    }

    /// Checks that a QP of `pd` with receive CQ `recv_cq` may use the SRQ.
    pub(crate) fn check_qp(&self, pd: &Pd, recv_cq: &Cq) -> Result {
        if !pd.same_as(&self.0.pd) || !ptr::eq(recv_cq.as_raw(), self.0.cq.as_raw()) {
            pr_err!(
                "{}: a QP of an SRQ needs the SRQ's PD and its CQ as receive CQ\n",
                pd.device().name()
            );
            return Err(EINVAL);
        }
        Ok(())
    }

    /// Records a QP created on the SRQ (its `ib_qp` address and number).
    pub(crate) fn add_qp(&self, raw: *mut bindings::ib_qp, qp_num: u32) -> Result {
        // Under a lock with interrupts off: rarely grows, never sleeps.
        self.0
            .qps
            .qps
            .with(|qps| qps.push((raw as usize, qp_num), GFP_ATOMIC))?;
        Ok(())
    }

    /// Forgets a QP destroyed (or never completed).
    pub(crate) fn remove_qp(&self, raw: *mut bindings::ib_qp) {
        self.0.qps.qps.with(|qps| {
            if let Some(i) = qps.iter().position(|q| q.0 == raw as usize) {
                let last = qps.len() - 1;
                qps.as_mut_slice().swap(i, last);
                crate::compat::truncate(qps, last);
            }
        });
    }

    /// Posts a receive into `len` bytes of `buf` at `offset`. `ENOSPC` when
    /// `max_wr` receives are outstanding.
    pub fn post_recv(&self, buf: &Arc<DmaBuf>, offset: usize, len: usize) -> Result<SrqWrId> {
        let inner = &self.0;
        let dev = inner.pd.device();
        buf.check_device(dev, "posted here")?;
        buf.check(offset, len)?;
        let n = buf.sge_count(offset, len);
        if n > inner.max_sge as usize {
            return Err(EINVAL);
        }
        let mut sges = [bindings::ib_sge::default(); crate::dma::MAX_SGES];
        for (d, s) in sges
            .iter_mut()
            .zip(buf.sges(offset, len, inner.pd.local_dma_lkey(), false))
        {
            *d = s;
        }
        let mut book = inner.book.lock();
        let res = SlotRes {
            _buf: Some(buf.clone()),
            ..Default::default()
        };
        let (index, seq) = qp::reserve(&mut book.res, &inner.slots, true, res)?;
        let mut wr = bindings::ib_recv_wr {
            sg_list: sges.as_mut_ptr(),
            num_sge: n as i32,
            ..Default::default()
        };
        wr.__bindgen_anon_1.wr_cqe = inner.slots[index].cqe.get();
        let mut bad = ptr::null();
        // SAFETY: The SRQ is live; `wr` names mapped memory of this device
        // that the slot keeps alive, and the slot's `ib_cqe`.
        let ret = unsafe { bindings::ib_post_srq_recv(inner.srq.as_ptr(), &wr, &mut bad) };
        if ret != 0 {
            qp::unreserve(&mut book.res, &inner.slots, index);
            return Err(Error::from_errno(ret));
        }
        Ok(SrqWrId {
            srq: inner.id(),
            index,
            seq,
        })
    }

    /// Waits for the receive `id`, at most `timeout_ms`, and releases its
    /// slot; the completion's [`Wc::qp_num`] names the QP it came in on (as
    /// it was when the completion was processed).
    /// Errors as [`crate::qp::Qp::wait`]. A failed wait leaves the receive
    /// outstanding.
    pub fn wait(&self, id: SrqWrId, timeout_ms: u32, cancel: &Cancel) -> Result<Wc> {
        let inner = &self.0;
        if id.srq != inner.id() {
            return Err(EINVAL);
        }
        let slot = inner.slots.get(id.index).ok_or(EINVAL)?;
        let holds = |book: &Book| book.res[id.index].busy && book.res[id.index].seq == id.seq;
        if !holds(&inner.book.lock()) {
            return Err(EINVAL);
        }
        if !slot.wait_done(&inner.cq, timeout_ms, cancel)? {
            return Err(crate::errno::etimedout());
        }
        let mut book = inner.book.lock();
        if !holds(&book) {
            return Err(EINVAL);
        }
        // SAFETY: `SLOT_DONE` was observed with acquire ordering after
        // `done` wrote `wc`; the slot cannot be posted again while the lock
        // is held.
        let wc = unsafe { *slot.wc.get() }.ok_or(EIO)?;
        book.res[id.index] = SlotRes::default();
        slot.state.store(SLOT_FREE, Ordering::Release);
        Ok(wc)
    }

    /// Arms the SRQ limit: when fewer than `limit` receives remain posted,
    /// the SRQ's sink gets `IB_EVENT_SRQ_LIMIT_REACHED` (once; arm again
    /// after). `EINVAL` unless `0 < limit < max_wr`.
    pub fn arm_limit(&self, limit: u32) -> Result {
        if limit == 0 || limit >= self.0.max_wr {
            return Err(EINVAL);
        }
        let mut attr = bindings::ib_srq_attr {
            srq_limit: limit,
            ..Default::default()
        };
        // SAFETY: The SRQ is live; `attr` is valid for `IB_SRQ_LIMIT`.
        kernel::error::to_result(unsafe {
            bindings::ib_modify_srq(self.0.srq.as_ptr(), &mut attr, bindings::IB_SRQ_LIMIT)
        })
    }
}

impl SrqInner {
    fn id(&self) -> usize {
        ptr::from_ref(self) as usize
    }
}

#[pinned_drop]
impl PinnedDrop for SrqInner {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant the SRQ is live; this is the last
        // reference, so every kverbs QP that used it is destroyed (a QP whose
        // destruction failed is leaked with its reference to this SRQ): the
        // device no longer writes into its receives' buffers once this
        // succeeds. `ib_destroy_srq_user`, not `ib_destroy_srq`, which
        // hides a failure behind a warning.
        let ret = unsafe { bindings::ib_destroy_srq_user(self.srq.as_ptr(), ptr::null_mut()) };
        // SAFETY: Only fields that are not structurally pinned are moved out
        // or dropped below (not `book`, only what its lock gives).
        let this = unsafe { self.get_unchecked_mut() };
        if ret != 0 {
            // The SRQ lives on (a driver's `destroy_srq` failed, or a QP not
            // made by kverbs uses it): its receives may still complete into
            // the slots and buffers, its handler still gets the event
            // queue, it names its CQ and PD. All of it is leaked, with the
            // reference to kverbs.ko.
            pr_err!(
                "{}: SRQ could not be destroyed ({}): it and what it uses are leaked\n",
                this.pd.device().name(),
                ret
            );
            qp::leak(core::mem::replace(&mut this.slots, KVec::new()));
            let res = core::mem::replace(&mut this.book.lock().res, KVec::new());
            qp::leak(res);
            // Named by the slots, which completions may still reach.
            core::mem::forget(this.qps.clone());
            return;
        }
        if let Some(e) = this.events {
            // SAFETY: The queue's reference of the SRQ, now destroyed.
            unsafe { EventQueue::release(e) };
        }
        // Completions of its receives may still be in the CQ (of QPs
        // destroyed since): the slots, and the table they name, go with the
        // CQ.
        this.cq.keep_slots(
            core::mem::replace(&mut this.slots, KVec::new()),
            Some(this.qps.clone()),
        );
        this.cq.give_room(this.max_wr);
        // The receives' buffers (taken under the lock, dropped after it: an
        // MR's drop takes its own lock), then the CQ, the PD and kverbs.ko.
        let res = core::mem::replace(&mut this.book.lock().res, KVec::new());
        drop(res);
        // SAFETY: Each is dropped once, here; the SRQ that used them is
        // destroyed and nothing of `this` uses them after.
        unsafe {
            ManuallyDrop::drop(&mut this.cq);
            ManuallyDrop::drop(&mut this.pd);
            ManuallyDrop::drop(&mut this._layer);
        }
    }
}
