// SPDX-License-Identifier: GPL-2.0

//! kverbs_ulp: an RDMA ULP of one's own, built outside the kverbs tree.
//!
//! The template of Documentation/kverbs.rst, "Writing your own ULP": a
//! module with its own Kbuild and Makefile, built against `kverbs.ko`
//! (`--extern kverbs` on the layer's metadata, `KBUILD_EXTRA_SYMBOLS` on its
//! `Module.symvers`), on the layer's public API alone, in safe Rust.
//!
//! It registers an RDMA client. On each device, present at load or added
//! later, it connects two RC queue pairs of the device to each other, posts
//! a RECV on one, SENDs a short message from the other and logs what
//! arrived. Unlike `kverbs_minimal`, it keeps the connected pair for as long
//! as the device is there: the pair is the client's per-device data, and
//! dropping it (on `rdma link del` or `rmmod`) is the whole teardown.

#![deny(unsafe_code)]

use kernel::{c_str, prelude::*, sync::Arc};
use kverbs::{
    client::{Client, Registration},
    cq::{Cq, PollCtx},
    device::{Device, Gid, GidType, Mtu},
    dma::DmaBuf,
    pd::Pd,
    qp::{Access, AddressVector, Cancel, InitAttr, Qp, QpCaps, Reset, RtrAttr, Rts, RtsAttr},
    qp::{SendOp, WrId},
    wc::Wc,
};

module! {
    type: KverbsUlp,
    name: "kverbs_ulp",
    description: "kverbs ULP template: a loopback SEND/RECV on each RDMA device, built out of tree",
    license: "GPL",
}

const MSG: &str = "hello from kverbs_ulp";
const TIMEOUT_MS: u32 = 5000;

/// What the client keeps of a device: two RC QPs connected to each other
/// and the buffer each one uses.
///
/// The fields drop in their order, and the types do the rest: each QP is
/// drained and destroyed, then its CQ and the PD go with their last user;
/// the buffers are unmapped after the QPs that used them.
struct Link {
    sender: Qp<Rts>,
    receiver: Qp<Rts>,
    send_buf: Arc<DmaBuf>,
    recv_buf: Arc<DmaBuf>,
}

/// The port's first RoCE v2 GID holding an IPv4 address, else its first
/// valid GID, with its index.
fn source_gid(dev: &Device, port: u32) -> Result<(u32, Gid)> {
    let gids = (0..dev.query_port(port)?.gid_tbl_len()).filter_map(|i| {
        dev.gid_attr(port, i)
            .ok()
            .map(|g| (i, g.gid_type(), g.gid()))
    });
    let mut first = None;
    for (i, ty, gid) in gids {
        if ty == GidType::RoceV2 && gid.is_v4_mapped() {
            return Ok((i, gid));
        }
        first.get_or_insert((i, gid));
    }
    first.ok_or(ENODEV)
}

/// RESET -> INIT -> RTR -> RTS toward the QP `dest_qp_num` at `gid`.
fn connect(qp: Qp<Reset>, dest_qp_num: u32, (gid_idx, gid): (u32, Gid)) -> Result<Qp<Rts>> {
    let init = InitAttr {
        pkey_index: 0,
        access: Access::LOCAL_WRITE,
    };
    let rtr = RtrAttr {
        path_mtu: Mtu::MTU_1024,
        dest_qp_num,
        rq_psn: 0,
        max_dest_rd_atomic: 0,
        min_rnr_timer: 0x12,
        av: AddressVector::new(gid, gid_idx.try_into()?),
    };
    let rts = RtsAttr {
        timeout: 0x12,
        retry_cnt: 6,
        rnr_retry: 6,
        sq_psn: 0,
        max_rd_atomic: 0,
    };
    qp.to_init(&init)?.to_rtr(&rtr)?.to_rts(&rts)
}

impl Link {
    /// A PD, a CQ, a QP and a buffer on each side, the QPs connected.
    fn new(dev: &Device) -> Result<Self> {
        let port = *dev.ports().start();
        let gid = source_gid(dev, port)?;
        let pd = Pd::new(dev)?;
        let caps = QpCaps {
            max_send_wr: 1,
            max_recv_wr: 1,
            ..Default::default()
        };
        let send_cq = Cq::new(dev, caps.cq_entries(), PollCtx::Softirq)?;
        let recv_cq = Cq::new(dev, caps.cq_entries(), PollCtx::Softirq)?;
        let sender = Qp::new_rc(&pd, port, &send_cq, &send_cq, caps)?;
        let receiver = Qp::new_rc(&pd, port, &recv_cq, &recv_cq, caps)?;
        let (sqpn, rqpn) = (sender.qp_num(), receiver.qp_num());
        Ok(Link {
            sender: connect(sender, rqpn, gid)?,
            receiver: connect(receiver, sqpn, gid)?,
            send_buf: Arc::new(DmaBuf::new(dev, MSG.len())?, GFP_KERNEL)?,
            recv_buf: Arc::new(DmaBuf::new(dev, MSG.len())?, GFP_KERNEL)?,
        })
    }

    /// Waits for `id` of `qp`, which must succeed.
    fn complete(qp: &Qp<Rts>, id: WrId) -> Result<Wc> {
        let wc = qp.wait(id, TIMEOUT_MS, &Cancel::new())?;
        wc.result()?;
        Ok(wc)
    }

    /// SENDs `msg` into a RECV posted first; returns the bytes received.
    fn send_recv(&self, msg: &[u8], out: &mut [u8]) -> Result<usize> {
        let recv = self.receiver.post_recv(&self.recv_buf, 0, out.len())?;
        self.send_buf.write(0, msg)?;
        let send = self
            .sender
            .post_send(SendOp::Send, &self.send_buf, 0, msg.len(), true)?;
        Self::complete(&self.sender, send)?;
        let len = usize::try_from(Self::complete(&self.receiver, recv)?.byte_len)?;
        let got = out.get_mut(..len).ok_or(EIO)?;
        self.recv_buf.read(0, got)?;
        Ok(len)
    }
}

/// A new [`Link`] on `dev` that has carried [`MSG`] once, logged.
fn hello(dev: &Device) -> Result<KBox<Link>> {
    let link = Link::new(dev)?;
    let mut got = [0u8; MSG.len()];
    let len = link.send_recv(MSG.as_bytes(), &mut got)?;
    match core::str::from_utf8(&got[..len]) {
        Ok(text) if text == MSG => pr_info!(
            "{}: SEND/RECV of {} bytes: \"{}\" received\n",
            dev.name(),
            len,
            text
        ),
        _ => {
            pr_err!("{}: received {:?}\n", dev.name(), &got[..len]);
            return Err(EIO);
        }
    }
    Ok(KBox::new(link, GFP_KERNEL)?)
}

struct Ulp;

kverbs::client_slot!(Ulp);

impl Client for Ulp {
    type DeviceData = KBox<Link>;

    fn add(&self, dev: &Device) -> Result<KBox<Link>> {
        hello(dev)
            .inspect_err(|e| pr_err!("{}: SEND/RECV failed: error {}\n", dev.name(), e.to_errno()))
    }

    fn remove(&self, dev: &Device, link: KBox<Link>) {
        drop(link);
        pr_info!("{}: QPs released\n", dev.name());
    }
}

struct KverbsUlp {
    _reg: Registration<Ulp>,
}

impl kernel::Module for KverbsUlp {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        Ok(KverbsUlp {
            _reg: Registration::new(c_str!("kverbs_ulp"), Ulp)?,
        })
    }
}
