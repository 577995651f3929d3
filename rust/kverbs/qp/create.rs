// SPDX-License-Identifier: GPL-2.0

//! The creation of queue pairs: `ib_create_qp`, `rdma_create_qp`.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{new_res, new_slots, Book, Init, Qp, QpCaps, QpInner, Rc, Reset, Transport, Ud};
use crate::bindings;
use crate::cm::CmId;
use crate::cq::Cq;
use crate::device::{Device, PortNum};
use crate::event::{EventQueue, EventSink};
use crate::layer_ref::LayerRef;
use crate::pd::Pd;
use crate::srq::Srq;
use core::{cell::Cell, marker::PhantomData, mem::ManuallyDrop, ptr::NonNull};
use kernel::{error::from_err_ptr, new_mutex, prelude::*, sync::Arc, types::ScopeGuard};

/// Completion queue entries a QP takes of a CQ, given back on drop.
pub(super) struct CqRoom {
    pub(super) cq: Cq,
    n: u32,
}

impl CqRoom {
    fn take(cq: &Cq, n: u32, dev: &Device) -> Result<Self> {
        if !cq.device().same_as(dev) {
            pr_err!(
                "{}: a QP cannot use a CQ of {}\n",
                dev.name(),
                cq.device().name()
            );
            return Err(EINVAL);
        }
        cq.take_room(n)?;
        Ok(CqRoom { cq: cq.clone(), n })
    }

    /// Keeps the room taken for good: the drop gives none back (completions
    /// of a QP that was not drained may still fill it).
    pub(super) fn keep_taken(&mut self) {
        self.n = 0;
    }
}

impl Drop for CqRoom {
    fn drop(&mut self) {
        self.cq.give_room(self.n);
    }
}

/// Checks that `port` is a port of `dev`.
pub(crate) fn check_port(dev: &Device, port: PortNum) -> Result {
    if dev.ports().contains(&port) {
        return Ok(());
    }
    pr_err!("{}: no port {}\n", dev.name(), port);
    Err(EINVAL)
}

impl Qp<Reset, Rc> {
    /// Creates an RC QP on `port` of the PD's device, with its completions
    /// on `send_cq` and `recv_cq`, CQs of the same device.
    ///
    /// One more request than asked is allowed on each queue, for the drain;
    /// the CQs must have room for them all (`EINVAL` otherwise).
    pub fn new_rc(
        pd: &Pd,
        port: PortNum,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
    ) -> Result<Self> {
        Self::create(pd, port, send_cq, recv_cq, caps, None, None, None)
    }

    /// [`Qp::new_rc`], with the QP's asynchronous events (fatal errors,
    /// `IB_EVENT_QP_LAST_WQE_REACHED`, path migration, ...) given to
    /// `sink` until the QP is destroyed.
    pub fn new_rc_with_events(
        pd: &Pd,
        port: PortNum,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
        sink: Arc<dyn EventSink>,
    ) -> Result<Self> {
        Self::create(pd, port, send_cq, recv_cq, caps, None, Some(sink), None)
    }

    /// Creates an RC QP that takes its receives from `srq`: its receive
    /// completions go to the SRQ's CQ; it has no receive queue of its own
    /// (`caps.max_recv_wr` is ignored). The SRQ lives at least as long as
    /// the QP. Events as [`Qp::new_rc_with_events`], if `sink` is given.
    pub fn new_rc_srq(
        pd: &Pd,
        port: PortNum,
        send_cq: &Cq,
        srq: &Srq,
        caps: QpCaps,
        sink: Option<Arc<dyn EventSink>>,
    ) -> Result<Self> {
        Self::create(pd, port, send_cq, srq.cq(), caps, None, sink, Some(srq))
    }
}

impl Qp<Reset, Ud> {
    /// Creates a UD QP on `port` of the PD's device, with its completions
    /// on `send_cq` and `recv_cq`, as [`Qp::new_rc`]. Its receives need 40
    /// bytes of room for the GRH before the data ([`GRH_LEN`]).
    pub fn new_ud(
        pd: &Pd,
        port: PortNum,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
    ) -> Result<Self> {
        Self::create(pd, port, send_cq, recv_cq, caps, None, None, None)
    }
}

impl<T: Transport> Qp<Reset, T> {
    /// Creates the QP with `ib_create_qp`, or with `rdma_create_qp` on
    /// `cm`, which then moves it to INIT; its events to `events`, its
    /// receives from `srq`.
    #[allow(clippy::too_many_arguments)]
    fn create(
        pd: &Pd,
        port: PortNum,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
        cm: Option<&CmId>,
        events: Option<Arc<dyn EventSink>>,
        srq: Option<&Srq>,
    ) -> Result<Self> {
        if caps.max_send_wr == 0 || (caps.max_recv_wr == 0 && srq.is_none()) {
            return Err(EINVAL);
        }
        let dev = pd.device();
        check_port(dev, port)?;
        if let Some(srq) = srq {
            srq.check_qp(pd, recv_cq)?;
        }
        let max_send_wr = caps.max_send_wr.checked_add(1).ok_or(EINVAL)?;
        // A QP of an SRQ has no receive queue: the SRQ took its CQ's room.
        let max_recv_wr = match srq {
            Some(_) => 0,
            None => caps.max_recv_wr.checked_add(1).ok_or(EINVAL)?,
        };
        let send_room = CqRoom::take(send_cq, max_send_wr, dev)?;
        let recv_room = CqRoom::take(recv_cq, max_recv_wr, dev)?;
        // One slot more on each queue, the last, for the drain's marker.
        let send_slots = new_slots(max_send_wr, None)?;
        let recv_slots = new_slots(max_recv_wr, None)?;
        let book = Book {
            send: new_res(caps.max_send_wr)?,
            recv: new_res(max_recv_wr.saturating_sub(1))?,
            posted_any: false,
            last_ah: None,
            mcast: KVec::new(),
            streams: KVec::new(),
            io: KVec::new(),
        };
        let mut init = bindings::ib_qp_init_attr {
            send_cq: send_cq.as_raw(),
            recv_cq: recv_cq.as_raw(),
            sq_sig_type: bindings::IB_SIGNAL_REQ_WR,
            qp_type: T::QP_TYPE,
            ..Default::default()
        };
        init.cap.max_send_wr = max_send_wr;
        init.cap.max_recv_wr = max_recv_wr;
        init.cap.max_send_sge = caps.max_sge.max(1);
        init.cap.max_recv_sge = if srq.is_some() {
            0
        } else if caps.max_recv_sge > 0 {
            caps.max_recv_sge
        } else {
            caps.max_sge.max(1)
        };
        if let Some(srq) = srq {
            init.srq = srq.as_raw();
        }
        init.cap.max_inline_data = caps.max_inline_data;
        // kverbs.ko's, held from before the QP names its callbacks (the
        // requests' `done`, the event handler) until after `QpInner` has
        // called its destruction. On failure it may be given back before
        // the QP is destroyed here (when the `QpInner` initialiser, which
        // took it, fails), while the module calling this keeps kverbs.ko
        // loaded anyway.
        let layer = LayerRef::new()?;
        // The sink's queue is the QP's context: given back only after the
        // QP is destroyed (here on failure, else by `QpInner`).
        let events = match events {
            Some(sink) => {
                let q = EventQueue::new_raw(sink)?;
                init.event_handler = Some(crate::event::object_event);
                init.qp_context = q.as_ptr().cast();
                Some(q)
            }
            None => None,
        };
        // Set if the QP cannot be destroyed on failure: it lives on, and
        // names the queue, which is then leaked.
        let qp_leaked = &Cell::new(false);
        // Dropped on failure after the QP's destruction (declared before
        // it), dismissed once `QpInner` holds the queue.
        let events = ScopeGuard::new_with_data(events, |events| {
            if let Some(e) = events {
                if !qp_leaked.get() {
                    // SAFETY: From `new_raw` above; the QP that used it is
                    // destroyed or was never created.
                    unsafe { EventQueue::release(e) };
                }
            }
        });
        let qp = match cm {
            None => {
                // SAFETY: The PD and CQs are live and on the same device
                // (checked by `CqRoom::take`); `init` is a valid, fully
                // initialised attribute set.
                from_err_ptr(unsafe { bindings::ib_create_qp(pd.as_raw(), &mut init) })
            }
            Some(cm) => {
                // SAFETY: As above; the ID is live and has no QP yet (the
                // callers create one QP per ID).
                kernel::error::to_result(unsafe {
                    bindings::rdma_create_qp(cm.as_raw(), pd.as_raw(), &mut init)
                })
                // SAFETY: `rdma_create_qp` stored the new QP in the ID.
                .map(|()| unsafe { (*cm.as_raw()).qp })
            }
        };
        let qp = qp.and_then(|qp| NonNull::new(qp).ok_or(ENOMEM))?;
        // On failure: destroys the QP, then takes it out of the table of
        // the SRQ it was added to, if any; dismissed once `QpInner` owns it.
        let mut destroy = ScopeGuard::new_with_data(None, move |added: Option<&Srq>| {
            // SAFETY: The QP was created above (on the ID, if any, which
            // the caller's `cm` keeps alive) and nothing was posted; nothing
            // raised `qp->usecnt` (no multicast group).
            let ret = unsafe { super::destroy_qp(qp.as_ptr(), cm.map(|c| c.as_raw())) };
            if ret != 0 {
                // The QP lives on and names what it was made with: those are
                // leaked (the queue by the flag), and kverbs.ko stays loaded
                // (a reference taken and never given back: the caller holds
                // one, so this cannot fail).
                qp_leaked.set(true);
                core::mem::forget(LayerRef::new());
                core::mem::forget(pd.clone());
                core::mem::forget(send_cq.clone());
                core::mem::forget(recv_cq.clone());
            }
            if let Some(srq) = added {
                srq.remove_qp(qp.as_ptr());
            }
        });
        if let Some(srq) = srq {
            // SAFETY: The QP is live; its number never changes.
            let qpn = unsafe { (*qp.as_ptr()).qp_num };
            srq.add_qp(qp.as_ptr(), qpn)?;
            *destroy = Some(srq);
        }
        // What the driver gave (it updates the attributes it was passed).
        let max_inline = init.cap.max_inline_data;
        let (max_send_sge, max_recv_sge) = (init.cap.max_send_sge, init.cap.max_recv_sge);
        let cm_ref = cm.map(|c| c.inner());
        let events_raw = *events;
        let inner = KBox::pin_init(
            try_pin_init!(QpInner {
                qp,
                events: events_raw,
                srq: srq.cloned(),
                cm: cm_ref,
                ud: T::QP_TYPE == bindings::IB_QPT_UD,
                port,
                max_inline,
                max_send_sge,
                max_recv_sge,
                send_slots,
                recv_slots,
                book <- new_mutex!(book),
                send_cq: ManuallyDrop::new(send_room),
                recv_cq: ManuallyDrop::new(recv_room),
                pd: ManuallyDrop::new(pd.clone()),
                _layer: ManuallyDrop::new(layer),
            }),
            GFP_KERNEL,
        )?;
        destroy.dismiss();
        events.dismiss();
        // INVARIANT: created above with these CQs and PD.
        Ok(Qp {
            inner,
            _state: PhantomData,
        })
    }
}

impl Qp<Init> {
    /// Creates an RC QP for the connection of `cm` (`rdma_create_qp`): the
    /// connection manager moves it to INIT now, and to RTR and RTS when the
    /// connection is established ([`CmId::connect`], [`CmId::accept`]).
    ///
    /// An ID has one QP at a time: `EBUSY` if it has one already.
    pub fn new_cm(cm: &CmId, pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: QpCaps) -> Result<Self> {
        Self::create_cm(cm, pd, send_cq, recv_cq, caps, None, None)
    }

    /// [`Qp::new_cm`], with the QP's events given to `sink` (see
    /// [`Qp::new_rc_with_events`]).
    pub fn new_cm_with_events(
        cm: &CmId,
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
        sink: Arc<dyn EventSink>,
    ) -> Result<Self> {
        Self::create_cm(cm, pd, send_cq, recv_cq, caps, Some(sink), None)
    }

    /// [`Qp::new_cm`] for a QP that takes its receives from `srq` (see
    /// [`Qp::new_rc_srq`]), its events (`IB_EVENT_QP_LAST_WQE_REACHED` when
    /// it stops taking from the SRQ, ...) given to `sink` if there is one.
    pub fn new_cm_srq(
        cm: &CmId,
        pd: &Pd,
        send_cq: &Cq,
        srq: &Srq,
        caps: QpCaps,
        sink: Option<Arc<dyn EventSink>>,
    ) -> Result<Self> {
        Self::create_cm(cm, pd, send_cq, srq.cq(), caps, sink, Some(srq))
    }

    /// Creates the QP of `cm` ([`Qp::new_cm`]): claims the ID's one QP,
    /// given back if the creation fails.
    fn create_cm(
        cm: &CmId,
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
        events: Option<Arc<dyn EventSink>>,
        srq: Option<&Srq>,
    ) -> Result<Self> {
        let port = cm.port_num();
        cm.inner().claim_qp()?;
        Qp::<Reset>::create(pd, port, send_cq, recv_cq, caps, Some(cm), events, srq)
            .map(Qp::retype)
            .inspect_err(|_| cm.inner().release_qp())
    }
}
