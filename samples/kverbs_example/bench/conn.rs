// SPDX-License-Identifier: GPL-2.0

//! The QPs of a benchmark run: two of one device connected to each other
//! (loopback), or one per QP connected to a peer host's over a TCP
//! exchange of RDMA_RC_example's connection data.

use super::Config;
use crate::conn::{pick_gid, sync, tcp_connect, ConData, Role, CON_DATA_LEN};
use crate::report::Report;
use core::fmt::Write;
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    cq::{Cq, PollCtx},
    device::{Device, Gid, Mtu},
    dma::DmaBuf,
    mr::Mr,
    pd::Pd,
    qp::{
        Access, AddressVector, Cancel, Init, InitAttr, Qp, QpCaps, RemoteBuf, RtrAttr, Rts, RtsAttr,
    },
    tcp::TcpStream,
};

/// perftest's receive queue depth of the send tests.
pub(super) const RX_DEPTH: u32 = 512;

/// What the peer may do with a side's `rbuf`, and what its QP allows:
/// remote atomics only for atomic_lat.
fn access(cfg: &Config) -> Access {
    let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    match cfg.test {
        super::Test::AtomicLat => access | Access::REMOTE_ATOMIC,
        _ => access,
    }
}

/// One local QP with its buffers.
///
/// The peer writes into, reads from and sends to `rbuf` (registered for
/// remote read and write, advertised as `remote`); this side writes from,
/// reads into and sends from `sbuf`.
pub(super) struct Side {
    pub(super) qp: Qp<Rts>,
    pub(super) rbuf: Arc<DmaBuf>,
    pub(super) sbuf: Arc<DmaBuf>,
    _mr: Mr,
    pub(super) remote: RemoteBuf,
}

/// A side before it is connected.
struct NewSide {
    qp: Qp<Init>,
    rbuf: Arc<DmaBuf>,
    sbuf: Arc<DmaBuf>,
    mr: Mr,
    remote: RemoteBuf,
}

/// What every QP of a run shares.
pub(super) struct Params {
    port: u32,
    gid_idx: u32,
    pub(super) gid: Gid,
    pub(super) mtu: Mtu,
    caps: QpCaps,
    resp_res: u8,
    init_depth: u8,
}

impl Params {
    pub(super) fn new(dev: &Device, cfg: &Config) -> Result<Self> {
        let port = *dev.ports().start();
        let (gid_idx, gid) = pick_gid(dev, port, None)?;
        let mtu = match cfg.mtu {
            Some(m) => m,
            None => dev.query_port(port)?.active_mtu(),
        };
        let rx = if cfg.test.is_send() {
            RX_DEPTH.min(cfg.iters)
        } else {
            1
        };
        // RDMA READs outstanding: as many as the device takes (perftest's
        // default), not RDMA_RC_example's one; READ bandwidth depends on it.
        let attrs = dev.attrs();
        Ok(Params {
            port,
            gid_idx,
            gid,
            mtu,
            caps: QpCaps {
                max_send_wr: cfg.tx_depth.max(1),
                max_recv_wr: rx,
                max_inline_data: cfg.inline,
                max_sge: 1,
                max_recv_sge: 0,
            },
            resp_res: attrs.max_qp_rd_atom().clamp(1, 255) as u8,
            init_depth: attrs.max_qp_init_rd_atom().clamp(1, 255) as u8,
        })
    }

    /// A QP in INIT with its own CQ, its buffers of `max` bytes and the
    /// mapping of `rbuf` it will advertise.
    fn new_side(
        &self,
        dev: &Device,
        pd: &Pd,
        cfg: &Config,
        poll: PollCtx,
        max: usize,
    ) -> Result<NewSide> {
        let rbuf = Arc::new(DmaBuf::new(dev, max)?, GFP_KERNEL)?;
        let sbuf = Arc::new(DmaBuf::new(dev, max)?, GFP_KERNEL)?;
        // A message of `max` bytes takes an SGE per chunk of its buffer.
        let caps = QpCaps {
            max_sge: rbuf.sge_count(0, max).max(sbuf.sge_count(0, max)) as u32,
            ..self.caps
        };
        let cq = Cq::new(dev, caps.cq_entries(), poll)?;
        let qp = Qp::new_rc(pd, self.port, &cq, &cq, caps)?.to_init(&InitAttr {
            pkey_index: 0,
            access: access(cfg),
        })?;
        let mr = Mr::new(pd, max)?;
        let remote = mr.map(&rbuf)?;
        Ok(NewSide {
            qp,
            rbuf,
            sbuf,
            mr,
            remote,
        })
    }

    /// Connects `s` to the QP `dest_qpn` at `dgid` and registers its
    /// buffer.
    fn connect(
        &self,
        s: NewSide,
        dest_qpn: u32,
        dgid: Gid,
        cfg: &Config,
        cancel: &Cancel,
    ) -> Result<Side> {
        let qp =
            s.qp.to_rtr(&RtrAttr {
                path_mtu: self.mtu,
                dest_qp_num: dest_qpn,
                rq_psn: 0,
                max_dest_rd_atomic: self.resp_res,
                min_rnr_timer: 12,
                av: AddressVector::new(dgid, self.gid_idx as u8),
            })?
            .to_rts(&RtsAttr {
                timeout: cfg.qp_timeout,
                // perftest's 7 is "retry forever" to rxe (it never counts
                // 7 down): a dead peer would hold the run until
                // timeout_ms. 6 retries of 4.096 us x 2^14 each (the
                // default qp_timeout) give up after about 0.5 s.
                retry_cnt: 6,
                rnr_retry: 7,
                sq_psn: 0,
                max_rd_atomic: self.init_depth,
            })?;
        s.mr.post_registration(&qp, access(cfg), cfg.timeout_ms, cancel)?;
        Ok(Side {
            qp,
            rbuf: s.rbuf,
            sbuf: s.sbuf,
            _mr: s.mr,
            remote: s.remote,
        })
    }
}

/// A QP pair, client and server, on one device.
pub(super) struct Pair {
    pub(super) client: Side,
    pub(super) server: Side,
}

/// `cfg.qps` pairs of QPs of `dev` connected to each other, their CQs
/// polled as `poll` says.
pub(super) fn loopback(
    dev: &Device,
    pd: &Pd,
    p: &Params,
    cfg: &Config,
    poll: PollCtx,
    max: usize,
    cancel: &Cancel,
) -> Result<KVec<Pair>> {
    let mut pairs = KVec::with_capacity(cfg.qps as usize, GFP_KERNEL)?;
    for _ in 0..cfg.qps {
        let c = p.new_side(dev, pd, cfg, poll, max)?;
        let s = p.new_side(dev, pd, cfg, poll, max)?;
        let (cn, sn) = (c.qp.qp_num(), s.qp.qp_num());
        let client = p.connect(c, sn, p.gid, cfg, cancel)?;
        let server = p.connect(s, cn, p.gid, cfg, cancel)?;
        pairs.push(Pair { client, server }, GFP_KERNEL)?;
    }
    Ok(pairs)
}

/// What both sides of a two-host run must agree on, sent by each.
const PARAMS_LEN: usize = 24;

fn run_params(cfg: &Config) -> [u8; PARAMS_LEN] {
    let mut b = [0u8; PARAMS_LEN];
    b[0..4].copy_from_slice(b"KVBN");
    b[4] = cfg.test as u8;
    b[5] = u8::from(cfg.bidir);
    b[8..12].copy_from_slice(&(cfg.size.unwrap_or(0) as u32).to_be_bytes());
    b[12..16].copy_from_slice(&cfg.iters.to_be_bytes());
    b[16..20].copy_from_slice(&cfg.qps.to_be_bytes());
    b[20..24].copy_from_slice(&cfg.tx_depth.to_be_bytes());
    b
}

/// The TCP connection of a two-host run.
pub(super) fn connect_peer(
    dev: &Device,
    cfg: &Config,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result<TcpStream> {
    let t = cfg.timeout_ms;
    let server = cfg.role == Role::Server;
    let sock = tcp_connect(dev, "bench", server, cfg.addr, cfg.port, t, cancel, rep)?;
    // The two sides must run the same test (perftest checks it too).
    let ours = run_params(cfg);
    let mut theirs = [0u8; PARAMS_LEN];
    sock.send_all(&ours, t, cancel)?;
    sock.recv_exact(&mut theirs, t, cancel)?;
    if ours != theirs {
        let _ = writeln!(
            rep,
            "the peer runs another test or other test=, size=, iters=, qps=, tx_depth= or bidir"
        );
        pr_warn!(
            "{}: bench: the peer's test parameters differ from ours\n",
            dev.name()
        );
        return Err(kverbs::errno::eproto());
    }
    Ok(sock)
}

/// `cfg.qps` QPs connected to the peer's over `sock`; with each, the
/// peer's buffer.
pub(super) fn tcp_sides(
    pd: &Pd,
    p: &Params,
    cfg: &Config,
    max: usize,
    sock: &TcpStream,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result<KVec<(Side, RemoteBuf)>> {
    let t = cfg.timeout_ms;
    let dev = pd.device();
    let port = *dev.ports().start();
    let lid = dev.query_port(port)?.lid() as u16;
    let mut sides = KVec::with_capacity(cfg.qps as usize, GFP_KERNEL)?;
    for _ in 0..cfg.qps {
        let s = p.new_side(dev, pd, cfg, cfg.poll, max)?;
        let ours = ConData {
            addr: s.remote.addr,
            rkey: s.remote.rkey,
            qp_num: s.qp.qp_num(),
            lid,
            gid: p.gid,
        };
        let mut theirs = [0u8; CON_DATA_LEN];
        sock.send_all(&ours.to_bytes(), t, cancel)?;
        sock.recv_exact(&mut theirs, t, cancel)?;
        let peer = ConData::from_bytes(&theirs);
        let side = p.connect(s, peer.qp_num, peer.gid, cfg, cancel)?;
        let remote = RemoteBuf {
            addr: peer.addr,
            rkey: peer.rkey,
            len: max as u32,
        };
        sides.push((side, remote), GFP_KERNEL)?;
    }
    // Both sides' buffers are registered before either uses the other's.
    sync(sock, b'C', t, cancel, rep)?;
    Ok(sides)
}
