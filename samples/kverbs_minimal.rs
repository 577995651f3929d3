// SPDX-License-Identifier: GPL-2.0

//! kverbs_minimal: the smallest module on the kverbs layer.
//!
//! It registers an RDMA client. On each device, present or added later, it
//! does one RDMA WRITE between two RC queue pairs of that device, in the
//! steps of RDMA_RC_example (resources_create, connect_qp, post_send,
//! poll_completion, resources_destroy), reads the destination buffer back
//! and logs the message found there. A device where that fails is logged
//! and ignored.

#![deny(unsafe_code)]

use kernel::{c_str, prelude::*, sync::Arc};
use kverbs::{
    client::{Client, Registration},
    cq::{Cq, PollCtx},
    device::{Device, Gid, GidType, Mtu},
    dma::DmaBuf,
    mr::Mr,
    pd::Pd,
    qp::{Access, AddressVector, Cancel, InitAttr, Qp, QpCaps, Reset, RtrAttr, Rts, RtsAttr},
    qp::{SendOp, WrId},
};

module! {
    type: KverbsMinimal,
    name: "kverbs_minimal",
    description: "kverbs minimal: one loopback RDMA WRITE on each RDMA device",
    license: "GPL",
}

const MSG: &str = "hello from kverbs_minimal";
const TIMEOUT_MS: u32 = 5000;

/// The first RoCE v2 GID that is an IPv4 address (`::ffff:127.0.0.1` on
/// rxe over `lo`), else the first valid one: what kverbs_example's `rc`
/// picks by default.
fn pick_gid(dev: &Device, port: u32) -> Result<(u32, Gid)> {
    let mut first = None;
    for i in 0..dev.query_port(port)?.gid_tbl_len() {
        if let Ok(g) = dev.gid_attr(port, i) {
            if g.gid_type() == GidType::RoceV2 && g.gid().is_v4_mapped() {
                return Ok((i, g.gid()));
            }
            first.get_or_insert((i, g.gid()));
        }
    }
    first.ok_or(ENODEV)
}

/// connect_qp: RESET -> INIT -> RTR -> RTS, toward the QP `dest_qp_num` at
/// `gid` (ours: both QPs are on this port).
fn connect_qp(qp: Qp<Reset>, dest_qp_num: u32, (gid_idx, gid): (u32, Gid)) -> Result<Qp<Rts>> {
    let rtr = RtrAttr {
        path_mtu: Mtu::MTU_256,
        dest_qp_num,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 0x12,
        av: AddressVector::new(gid, gid_idx.try_into()?),
    };
    let rts = RtsAttr {
        timeout: 0x12,
        retry_cnt: 6,
        rnr_retry: 0,
        sq_psn: 0,
        max_rd_atomic: 1,
    };
    let init = InitAttr {
        pkey_index: 0,
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    };
    qp.to_init(&init)?.to_rtr(&rtr)?.to_rts(&rts)
}

/// poll_completion: waits for `id`, which must succeed.
fn poll_completion(qp: &Qp<Rts>, id: WrId) -> Result {
    qp.wait(id, TIMEOUT_MS, &Cancel::new())?.result()?;
    Ok(())
}

/// One RDMA WRITE of [`MSG`] between two QPs of `dev`: from the client's
/// buffer into the server's, registered for it.
fn rdma_write(dev: &Device) -> Result {
    // resources_create: a PD, a CQ, a QP and a buffer on each side, an MR.
    let port = *dev.ports().start();
    let gid = pick_gid(dev, port)?;
    let pd = Pd::new(dev)?;
    let caps = QpCaps {
        max_send_wr: 2,
        max_recv_wr: 1,
        ..Default::default()
    };
    let server_cq = Cq::new(dev, caps.cq_entries(), PollCtx::Softirq)?;
    let client_cq = Cq::new(dev, caps.cq_entries(), PollCtx::Softirq)?;
    let server = Qp::new_rc(&pd, port, &server_cq, &server_cq, caps)?;
    let client = Qp::new_rc(&pd, port, &client_cq, &client_cq, caps)?;
    let server_buf = Arc::new(DmaBuf::new(dev, MSG.len())?, GFP_KERNEL)?;
    let client_buf = Arc::new(DmaBuf::new(dev, MSG.len())?, GFP_KERNEL)?;
    let mr = Mr::new(&pd, MSG.len())?;

    // connect_qp: each QP to the other.
    let (server_qpn, client_qpn) = (server.qp_num(), client.qp_num());
    let server = connect_qp(server, client_qpn, gid)?;
    let client = connect_qp(client, server_qpn, gid)?;
    // The server's buffer, registered for remote write (through its QP).
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let remote = mr.register(&server, &server_buf, access, TIMEOUT_MS, &Cancel::new())?;

    // post_send and poll_completion: the client writes the server's buffer.
    client_buf.write(0, MSG.as_bytes())?;
    let id = client.post_send(SendOp::Write(remote), &client_buf, 0, MSG.len(), true)?;
    poll_completion(&client, id)?;

    // Read the server's buffer back: it must hold the message.
    let mut back = [0u8; MSG.len()];
    server_buf.read(0, &mut back)?;
    match core::str::from_utf8(&back) {
        Ok(msg) if msg == MSG => pr_info!(
            "{}: RDMA WRITE of {} bytes: \"{}\" read back\n",
            dev.name(),
            msg.len(),
            msg
        ),
        _ => {
            pr_err!("{}: read back {:?}\n", dev.name(), back);
            return Err(EIO);
        }
    }
    // resources_destroy: everything drops, in reverse order: the QPs
    // (drained), the MR (deregistered), the buffers, the CQs, the PD.
    Ok(())
}

struct Minimal;

kverbs::client_slot!(Minimal);

impl Client for Minimal {
    type DeviceData = ();

    fn add(&self, dev: &Device) -> Result {
        rdma_write(dev).inspect_err(|e| {
            pr_err!(
                "{}: RDMA WRITE failed: error {}\n",
                dev.name(),
                e.to_errno()
            );
        })
    }
}

struct KverbsMinimal {
    _reg: Registration<Minimal>,
}

impl kernel::Module for KverbsMinimal {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let reg = Registration::new(c_str!("kverbs_minimal"), Minimal)?;
        Ok(KverbsMinimal { _reg: reg })
    }
}
