// SPDX-License-Identifier: GPL-2.0

//! The admin queue's commands: one at a time, from process context, as
//! capsules (a SEND of the 64-byte command) answered by response capsules
//! (a receive of 16 bytes, one of a ring of [`AQ_DEPTH`] kept posted).
//! A command with data names it by a keyed SGL descriptor: a fast
//! registration (FRWR) of the queue's data buffer, its key to be
//! invalidated by the target (type 0x4f, as the C host's), which answers
//! with a SEND with invalidate (drivers/nvme/host/rdma.c,
//! `nvme_rdma_map_sg_fr`, `nvme_rdma_process_nvme_rsp`).
//!
//! The host still invalidates each registration itself (LOCAL_INV) before
//! it uses the buffer again: the layer lets a buffer go only then (see
//! Documentation/kverbs_nvme-design.rst, 7.6, "Remote invalidation and the key's
//! eight bits"). What the target invalidated is counted.

use crate::queue::{Queue, AQ_DEPTH};
use crate::wire::{Cmd, Cqe, IdCtrl};
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    dma::DmaBuf,
    mr::Mr,
    qp::{Access, Cancel, SendOp, WrId},
};

/// How long an admin command may take (the C host's `NVME_ADMIN_TIMEOUT`
/// is 60 s; a response over rxe takes milliseconds).
pub(crate) const ADMIN_TIMEOUT_MS: u32 = 30_000;

/// The direction of a command's data.
#[derive(Clone, Copy)]
pub(crate) enum Data<'a> {
    None,
    /// To the controller (it reads them: RDMA READ).
    Out(&'a [u8]),
    /// From the controller (it writes them: RDMA WRITE), `len` bytes.
    In(usize),
}

/// Why a command failed.
pub(crate) enum CmdError {
    /// The controller answered with a status (not 0): the response.
    Status(Cqe),
    /// The transport or the layer failed (no answer in time, a completion
    /// in error, a response for another command).
    Error(Error),
}

impl From<Error> for CmdError {
    fn from(e: Error) -> Self {
        CmdError::Error(e)
    }
}

/// The admin queue: its connection, the receive ring, a capsule buffer, a
/// data buffer and its MR. An I/O queue is one too for its Fabrics Connect
/// ([`Admin::for_connect`]), before its QP goes to its capsule queue.
///
/// Dropped: the queue (its drain flushes whatever is posted), then the
/// MR and the buffers the flushed requests held.
pub(crate) struct Admin {
    pub(crate) q: Queue,
    /// The receive ring: [`AQ_DEPTH`] responses of [`Cqe::LEN`] bytes.
    rx: Arc<DmaBuf>,
    rx_ids: KVec<Option<WrId>>,
    /// The ring's next response.
    next: usize,
    /// The ring's receives are posted again when used: not for one
    /// command ([`Admin::for_connect`]).
    repost: bool,
    cmd: Arc<DmaBuf>,
    data: Arc<DmaBuf>,
    mr: Mr,
    next_cid: u16,
    /// The token of every wait: closed by the controller's CM sink when
    /// the target disconnects or the device goes.
    gone: Arc<Cancel>,
    /// Commands with data, and of their registrations those the target
    /// invalidated (a SEND with invalidate naming the MR's rkey).
    pub(crate) data_cmds: u32,
    pub(crate) remote_invalidations: u32,
}

impl Admin {
    /// The largest data of an admin command (Identify's).
    const DATA_LEN: usize = IdCtrl::LEN;

    /// Takes the connected admin queue `q`: posts its receives. Its waits
    /// end when `gone` is closed.
    pub(crate) fn new(q: Queue, gone: Arc<Cancel>) -> Result<Self> {
        Self::with_ring(q, gone, usize::from(AQ_DEPTH), true)
    }

    /// Takes the connected I/O queue `q` for one command, its Fabrics
    /// Connect: one receive posted, not again. [`Admin::into_queue`] then
    /// gives the queue back with nothing posted.
    pub(crate) fn for_connect(q: Queue, gone: Arc<Cancel>) -> Result<Self> {
        Self::with_ring(q, gone, 1, false)
    }

    fn with_ring(q: Queue, gone: Arc<Cancel>, ring: usize, repost: bool) -> Result<Self> {
        let dev = q.qp().device();
        let rx = Arc::new(DmaBuf::new(dev, ring * Cqe::LEN)?, GFP_KERNEL)?;
        let cmd = Arc::new(DmaBuf::new(dev, Cmd::LEN)?, GFP_KERNEL)?;
        let data = Arc::new(DmaBuf::new(dev, Self::DATA_LEN)?, GFP_KERNEL)?;
        let mr = Mr::new(q.qp().pd(), Self::DATA_LEN)?;
        let mut rx_ids = KVec::with_capacity(ring, GFP_KERNEL)?;
        for i in 0..ring {
            rx_ids.push(
                Some(q.qp().post_recv(&rx, i * Cqe::LEN, Cqe::LEN)?),
                GFP_KERNEL,
            )?;
        }
        Ok(Admin {
            q,
            rx,
            rx_ids,
            next: 0,
            repost,
            cmd,
            data,
            mr,
            next_cid: 0,
            gone,
            data_cmds: 0,
            remote_invalidations: 0,
        })
    }

    /// A command id: the C host's are a tag and a generation; here, one
    /// command at a time, a counter.
    pub(crate) fn cid(&mut self) -> u16 {
        self.next_cid = self.next_cid.wrapping_add(1);
        self.next_cid
    }

    /// Sends `cmd` with `data` and waits for its response; the data read
    /// from the controller, if any, lands in `out`. After an error other
    /// than a status the queue is not used again (a registration may be
    /// left valid, a receive not posted again): its controller is
    /// dropped, and the drain flushes what is posted.
    pub(crate) fn exec(
        &mut self,
        mut cmd: Cmd,
        data: Data<'_>,
        out: &mut [u8],
    ) -> Result<Cqe, CmdError> {
        let c = self.gone.clone();
        let qp = self.q.qp();
        let mut rkey = None;
        let (len, access) = match data {
            Data::None => (0, Access::NONE),
            Data::Out(d) => {
                self.data.write(0, d)?;
                (d.len(), Access::REMOTE_READ)
            }
            Data::In(n) => (n, Access::LOCAL_WRITE | Access::REMOTE_WRITE),
        };
        if len > 0 {
            let remote = self.mr.map(&self.data)?;
            self.mr
                .post_registration(qp, access, ADMIN_TIMEOUT_MS, &c)?;
            cmd.set_keyed_sgl(remote.addr, len as u32, remote.rkey);
            rkey = Some(remote.rkey);
            self.data_cmds += 1;
        }
        self.cmd.write(0, &cmd.0)?;
        let sent = qp.post_send(SendOp::Send, &self.cmd, 0, Cmd::LEN, true)?;
        // The response, in the ring's order (the target sends one per
        // command, in order: one command is outstanding).
        let slot = self.next;
        let id = self.rx_ids[slot].take().ok_or(EINVAL)?;
        let wc = qp.wait(id, ADMIN_TIMEOUT_MS, &c)?;
        let swc = qp.wait(sent, ADMIN_TIMEOUT_MS, &c)?;
        if wc.result().is_err() || swc.result().is_err() {
            pr_err!(
                "kverbs_nvme: admin command {:#x}: send {}, receive {}\n",
                cmd.0[0],
                swc.status,
                wc.status
            );
            return Err(CmdError::Error(EIO));
        }
        let mut raw = [0u8; Cqe::LEN];
        self.rx.read(slot * Cqe::LEN, &mut raw)?;
        if self.repost {
            self.rx_ids[slot] = Some(qp.post_recv(&self.rx, slot * Cqe::LEN, Cqe::LEN)?);
        }
        self.next = (slot + 1) % self.rx_ids.len();
        if let Some(rkey) = rkey {
            // Seen remotely invalidated or not, the registration is
            // invalidated here too before the buffer is used again.
            match wc.invalidated_rkey {
                Some(k) if k == rkey => self.remote_invalidations += 1,
                Some(k) => {
                    pr_err!(
                        "kverbs_nvme: the target invalidated rkey {:#x}, not the command's {:#x}\n",
                        k,
                        rkey
                    );
                    return Err(CmdError::Error(kverbs::errno::eproto()));
                }
                None => {}
            }
            self.mr.invalidate(qp, ADMIN_TIMEOUT_MS, &c)?;
        }
        let cqe = Cqe::decode(&raw);
        if cqe.command_id != cmd.cid() {
            pr_err!(
                "kverbs_nvme: a response to command {}, not to {}\n",
                cqe.command_id,
                cmd.cid()
            );
            return Err(CmdError::Error(kverbs::errno::eproto()));
        }
        if cqe.status != 0 {
            return Err(CmdError::Status(cqe));
        }
        if let Data::In(n) = data {
            self.data.read(0, &mut out[..n])?;
        }
        Ok(cqe)
    }

    /// The queue, once its one command was answered (its receive used,
    /// its registration invalidated: nothing is left posted); the buffers
    /// and the MR go. `EBUSY` for an admin queue, whose ring stays posted.
    pub(crate) fn into_queue(self) -> Result<Queue> {
        if self.repost || self.rx_ids.iter().any(|r| r.is_some()) {
            return Err(EBUSY);
        }
        Ok(self.q)
    }
}
