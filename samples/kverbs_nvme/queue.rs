// SPDX-License-Identifier: GPL-2.0

//! One NVMe queue over RDMA: an rdma_cm connection (its own PD, CQ and RC
//! QP) whose request carries the queue's number and sizes and whose reply
//! gives the controller's receive queue size (NVMe over Fabrics, RDMA
//! transport binding; drivers/nvme/host/rdma.c, `nvme_rdma_alloc_queue`
//! and `nvme_rdma_route_resolved`).

use crate::options::Options;
use crate::wire::{CmRej, CmRep, CmReq, RECFMT_1_0};
use core::fmt::{self, Write};
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    cm::{CmEvents, CmId, CmSink, ConnParam, ConnectError},
    cq::{Cq, PollCtx},
    device::{Device, Guid},
    pd::Pd,
    qp::{Cancel, Qp, QpCaps, Rts},
};

/// The admin queue's entries (`NVME_AQ_DEPTH`).
pub(crate) const AQ_DEPTH: u16 = 32;
/// How long each step of a connection (address, route, connection) may
/// take, as the C host's `NVME_RDMA_CM_TIMEOUT_MS`.
pub(crate) const CM_TIMEOUT_MS: u32 = 3000;

/// The segments of in-capsule data an I/O queue's sends carry on `dev`
/// (the C host's `num_inline_segments`): 4, fewer if its sends take fewer
/// SGEs (the capsule takes one).
pub(crate) fn inline_segments(dev: &Device) -> u32 {
    kverbs::io::MAX_INLINE_SEGMENTS.min((dev.attrs().max_send_sge() as u32).saturating_sub(1))
}

/// Why a queue did not connect.
pub(crate) enum ConnectFailure {
    /// The target rejected the request with an NVMe/RDMA status.
    Status(CmRej),
    /// The request was rejected otherwise (an InfiniBand CM reason: 8
    /// when nothing listens at the port).
    Rejected(i32),
    /// Another error (address or route not resolved, no answer, ...).
    Error(Error),
}

impl ConnectFailure {
    pub(crate) fn errno(&self) -> Error {
        match self {
            ConnectFailure::Status(_) | ConnectFailure::Rejected(_) => {
                kverbs::errno::econnrefused()
            }
            ConnectFailure::Error(e) => *e,
        }
    }
}

impl fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectFailure::Status(rej) => write!(
                f,
                "rejected by the target: NVMe/RDMA status {} ({}), record format {}",
                rej.sts,
                rej.msg(),
                rej.recfmt
            ),
            ConnectFailure::Rejected(reason) => {
                write!(f, "rejected: reason {}", reason)?;
                if *reason == 8 {
                    f.write_str(" (invalid service ID: nothing listens there)")?;
                }
                Ok(())
            }
            ConnectFailure::Error(e) => write!(f, "error {}", e.to_errno()),
        }
    }
}

kverbs::kernel_display!(ConnectFailure);

impl From<Error> for ConnectFailure {
    fn from(e: Error) -> Self {
        ConnectFailure::Error(e)
    }
}

impl From<ConnectError> for ConnectFailure {
    fn from(e: ConnectError) -> Self {
        match e.rejection {
            Some(r) => match r
                .consumer_data
                .as_ref()
                .and_then(|d| CmRej::decode(d.as_bytes()))
            {
                Some(rej) => ConnectFailure::Status(rej),
                None => ConnectFailure::Rejected(r.reason),
            },
            None => ConnectFailure::Error(e.error),
        }
    }
}

/// A connected queue. Dropped: the QP is drained and destroyed, then the
/// ID (which disconnects), the CQ and the PD.
pub(crate) struct Queue {
    qp: Qp<Rts>,
    pub(crate) conn: Conn,
}

/// A queue's connection without its QP: what an I/O queue keeps beside
/// the capsule queue that took its QP ([`Queue::split`]). The QP holds
/// the ID, the CQ and the PD too: whichever goes last destroys them.
pub(crate) struct Conn {
    pub(crate) qid: u16,
    /// The controller's receive queue size, from its reply.
    pub(crate) crqsize: u16,
    id: CmId,
    _cq: Cq,
    _pd: Pd,
    _events: CmEvents,
}

impl Conn {
    /// Whether its device is being removed.
    pub(crate) fn device_removed(&self) -> bool {
        self.id.device_removed()
    }
}

impl Queue {
    /// Connects queue `qid` of `size` entries of controller `cntlid` (0
    /// for the admin queue's) to the target of `opts`; the queue's
    /// connection events go to `sink`, its waits end when `c` is
    /// cancelled.
    pub(crate) fn connect(
        opts: &Options,
        qid: u16,
        size: u16,
        cntlid: u16,
        sink: Arc<dyn CmSink>,
        c: &Cancel,
    ) -> Result<Queue, ConnectFailure> {
        let events = CmEvents::with_sink(1, sink)?;
        let id = CmId::new(&events)?;
        id.resolve(opts.traddr, opts.trsvcid, CM_TIMEOUT_MS, c)?;
        let dev: &Device = id.device().ok_or(ENODEV)?;
        let pd = Pd::new(dev)?;
        // Sends: a command each, with its memory registration and
        // invalidation (3 a command, as the C host), receives: a response
        // each.
        // An I/O queue's sends carry in-capsule data too; a receive is one
        // response (the C host's `max_recv_sge` 1).
        let caps = QpCaps {
            max_send_wr: 3 * u32::from(size) + 1,
            max_recv_wr: u32::from(size) + 1,
            max_sge: if qid > 0 { 1 + inline_segments(dev) } else { 1 },
            max_recv_sge: 1,
            ..Default::default()
        };
        let cq = Cq::new(dev, caps.cq_entries(), PollCtx::Softirq)?;
        let qp = Qp::new_cm(&id, &pd, &cq, &cq, caps)?;
        let req = CmReq {
            recfmt: opts.test_recfmt.unwrap_or(RECFMT_1_0),
            qid,
            hrqsize: size,
            hsqsize: if qid == 0 {
                opts.test_hsqsize.unwrap_or(size - 1)
            } else {
                size - 1
            },
            cntlid,
        }
        .encode();
        let param = ConnParam {
            private_data: &req,
            // The target reads the host's writes (RDMA READ): as many at
            // once as the device takes; the host never reads.
            responder_resources: u8::MAX,
            initiator_depth: 0,
            ..ConnParam::default()
        };
        let (qp, reply) = id.connect_with(qp, &param, CM_TIMEOUT_MS, c)?;
        let Some(rep) = CmRep::decode(reply.as_bytes()) else {
            return Err(ConnectFailure::Error(kverbs::errno::eproto()));
        };
        if rep.recfmt != RECFMT_1_0 {
            return Err(ConnectFailure::Error(kverbs::errno::eproto()));
        }
        Ok(Queue {
            qp,
            conn: Conn {
                qid,
                crqsize: rep.crqsize,
                id,
                _cq: cq,
                _pd: pd,
                _events: events,
            },
        })
    }

    /// Whether its device is being removed.
    pub(crate) fn device_removed(&self) -> bool {
        self.conn.device_removed()
    }

    /// The QP, for a capsule queue to take, and the rest.
    pub(crate) fn split(self) -> (Qp<Rts>, Conn) {
        (self.qp, self.conn)
    }

    /// The queue's QP.
    pub(crate) fn qp(&self) -> &Qp<Rts> {
        &self.qp
    }

    /// The QP's number, for the controllers file.
    pub(crate) fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// The node GUID of the queue's device.
    pub(crate) fn device_guid(&self) -> Option<Guid> {
        self.conn.id.device().map(|d| d.node_guid())
    }

    /// The device of the queue.
    pub(crate) fn device_name(&self, out: &mut dyn Write) -> fmt::Result {
        match self.conn.id.device() {
            Some(d) => write!(out, "{}", d.name()),
            None => out.write_str("?"),
        }
    }
}
