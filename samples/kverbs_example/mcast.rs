// SPDX-License-Identifier: GPL-2.0

//! The multicast example (mckey's): UD QPs attached to an IPv4 multicast
//! group, driven through the per-device debugfs file `mcast`.
//!
//! `role=both,group=239.1.1.1,count=10,size=100,qps=2` joins the group on
//! the port's netdev, attaches `qps` receiver QPs, sends `count` messages
//! from a sender QP (SEND_WITH_IMM carrying the sender's QPN, as mckey
//! does) and checks that every receiver got every message, payload and
//! immediate data. `role=receiver` only receives, `role=sender` only sends.

use crate::control::{ControlConfig, Example, Run};
use crate::options::Opts;
use crate::report::Report;
use crate::stats::{add, Stats};
use core::fmt::Write;
use kernel::{new_mutex, prelude::*, sync::Arc, sync::Mutex};
use kverbs::{
    ah::Ah,
    cq::{Cq, PollCtx},
    device::{Device, Gid, GidType},
    dma::DmaBuf,
    errno,
    mcast::{Group, IpGroup},
    pd::Pd,
    qp::{AddressVector, Cancel, Qp, QpCaps, Rts, Ud, UdDest, WrId, GRH_LEN},
    tcp::Ipv4,
    wc::Grh,
};

/// mckey's (and rdma_cm's) Q_Key for UDP port space multicast.
const QKEY: u32 = 0x0123_4567;
/// The QPN that addresses a multicast group.
const MCAST_QPN: u32 = 0xff_ffff;
const MAX_QPS: u32 = 64;
const MAX_COUNT: u32 = 1000;
/// How long a detached QP must stay quiet after the group's other QPs
/// received a message, in milliseconds.
const DETACH_QUIET_MS: u32 = 250;

/// What a write of `mcast` does (its `role=`, or `attach` / `detach`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Both,
    Sender,
    Receiver,
    /// `attach <group>`: attach the device's manual QP.
    Attach,
    /// `detach <group>`.
    Detach,
}

/// What `role=` names.
const ROLES: [(&str, Mode); 3] = [
    ("both", Mode::Both),
    ("sender", Mode::Sender),
    ("receiver", Mode::Receiver),
];

pub(crate) struct Config {
    role: Mode,
    group: Group,
    count: u32,
    size: usize,
    qps: u32,
    timeout_ms: u32,
}

impl ControlConfig for Config {
    fn parse(dev: &Device, input: &[u8]) -> Result<Self> {
        let text = core::str::from_utf8(input).map_err(|_| {
            pr_warn!("{}: mcast: the control string is not text\n", dev.name());
            EINVAL
        })?;
        let mut cfg = Config {
            role: Mode::Both,
            group: Group::V4(Ipv4([0; 4])),
            count: 10,
            size: 100,
            qps: 1,
            timeout_ms: 5000,
        };
        let (mut have_role, mut have_group) = (false, false);
        // `attach <group>` and `detach <group>`, by hand.
        let mut words = text.split_ascii_whitespace();
        if let (Some(cmd @ ("attach" | "detach")), Some(group), None) =
            (words.next(), words.next(), words.next())
        {
            cfg.role = if cmd == "attach" {
                Mode::Attach
            } else {
                Mode::Detach
            };
            cfg.group = Group::parse(group).ok_or_else(|| {
                pr_warn!(
                    "{}: mcast: {} is not a multicast address\n",
                    dev.name(),
                    group
                );
                EINVAL
            })?;
            return Ok(cfg);
        }
        let o = Opts::new(dev, "mcast");
        for (key, val) in o.options(input)? {
            let val = o.need(key, val)?;
            let num = |min: u64, max: u64| o.dec_in(key, val, min, max);
            match key {
                "role" => {
                    cfg.role = o.pick(key, val, &ROLES)?;
                    have_role = true;
                }
                "group" => {
                    cfg.group = Group::parse(val).ok_or_else(|| {
                        pr_warn!(
                            "{}: mcast: {} is not a multicast address\n",
                            dev.name(),
                            val
                        );
                        EINVAL
                    })?;
                    have_group = true;
                }
                "count" => cfg.count = num(1, MAX_COUNT.into())? as u32,
                "size" => cfg.size = num(1, 4096)? as usize,
                "qps" => cfg.qps = num(1, MAX_QPS.into())? as u32,
                "timeout_ms" => cfg.timeout_ms = num(1, 600_000)? as u32,
                _ => return Err(o.unknown_key(key)),
            }
        }
        if !have_role || !have_group {
            pr_warn!("{}: mcast: role= and group= are required\n", dev.name());
            return Err(EINVAL);
        }
        Ok(cfg)
    }
}

/// The payload byte `off` of message `i`.
fn payload(i: u32, off: usize) -> u8 {
    (off as u32)
        .wrapping_mul(7)
        .wrapping_add(i.wrapping_mul(13)) as u8
}

/// What `attach` sets up and `detach` takes down: a UD QP and the groups
/// it is attached to, with their IP-level joins. Dropped with the device's
/// files: the QP detaches, the joins are left.
struct Manual {
    qp: Qp<Rts, Ud>,
    joins: KVec<(Group, IpGroup)>,
}

/// The multicast example.
pub(crate) struct Mcast {
    manual: Pin<KBox<Mutex<Option<Manual>>>>,
}

impl Mcast {
    pub(crate) fn new() -> Result<Self> {
        Ok(Mcast {
            manual: KBox::pin_init(new_mutex!(None), GFP_KERNEL)?,
        })
    }

    fn attach(&self, dev: &Device, group: Group, rep: &mut Report) -> Result {
        let mut manual = self.manual.lock();
        let port = *dev.ports().start();
        if manual.is_none() {
            let pd = Pd::new(dev)?;
            let caps = QpCaps {
                max_send_wr: 1,
                max_recv_wr: 1,
                ..Default::default()
            };
            let cq = Cq::new(dev, caps.cq_entries(), PollCtx::Softirq)?;
            let qp = Qp::new_ud(&pd, port, &cq, &cq, caps)?
                .to_init_ud(0, QKEY)?
                .to_rtr_ud()?
                .to_rts_ud(0)?;
            *manual = Some(Manual {
                qp,
                joins: KVec::new(),
            });
        }
        let m = (*manual).as_mut().ok_or(EINVAL)?;
        if m.joins.iter().any(|(g, _)| *g == group) {
            pr_warn!("{}: mcast: {} is attached already\n", dev.name(), group);
            return Err(EEXIST);
        }
        let ifindex = dev.netdev_ifindex(port).ok_or(ENODEV)?;
        let join = IpGroup::join(group, ifindex)?;
        m.qp.attach_mcast(group.mgid())?;
        if let Err(e) = m.joins.push((group, join), GFP_KERNEL) {
            let _ = m.qp.detach_mcast(group.mgid());
            return Err(e.into());
        }
        let _ = writeln!(
            rep,
            "attach: qpn {:#x} to {} (mgid {})",
            m.qp.qp_num(),
            group,
            group.mgid().ipv6()
        );
        Ok(())
    }

    fn detach(&self, dev: &Device, group: Group, rep: &mut Report) -> Result {
        let mut manual = self.manual.lock();
        let not_attached = || {
            pr_warn!("{}: mcast: {} is not attached\n", dev.name(), group);
            ENOENT
        };
        let m = (*manual).as_mut().ok_or_else(not_attached)?;
        let i = m
            .joins
            .iter()
            .position(|(g, _)| *g == group)
            .ok_or_else(not_attached)?;
        // The list without the group is allocated first: once the QP is
        // detached, nothing may fail and leave the group listed (an
        // allocation failure there used to: found by the fault-injection
        // sweep, sweep_alloc_failure_mcast_detach).
        let mut rest = KVec::with_capacity(m.joins.len(), GFP_KERNEL)?;
        m.qp.detach_mcast(group.mgid())?;
        // Dropping the group's join leaves the IP group.
        for (j, entry) in core::mem::take(&mut m.joins).into_iter().enumerate() {
            if j != i {
                // Within the capacity reserved above: cannot fail.
                let _ = rest.push(entry, GFP_KERNEL);
            }
        }
        m.joins = rest;
        let _ = writeln!(rep, "detach: qpn {:#x} from {}", m.qp.qp_num(), group);
        Ok(())
    }
}

impl Example for Mcast {
    const NAME: &'static str = "mcast";
    type Config = Config;

    fn run(&self, cfg: &Config, ctx: Run<'_>) -> Result {
        match cfg.role {
            Mode::Attach => self.attach(ctx.dev, cfg.group, ctx.rep),
            Mode::Detach => self.detach(ctx.dev, cfg.group, ctx.rep),
            _ => run(cfg, ctx),
        }
    }

    fn show_state(&self, out: &mut dyn Write) -> Result {
        if let Some(m) = &*self.manual.lock() {
            for (g, _) in m.joins.iter() {
                writeln!(
                    out,
                    "attached: {} mgid {} qpn {:#x}",
                    g,
                    g.mgid().ipv6(),
                    m.qp.qp_num()
                )?;
            }
        }
        Ok(())
    }
}

/// A receiver: its QP, its buffer (one `GRH_LEN + size` slot per message)
/// and its posted receives.
struct Receiver {
    qp: Qp<Rts, Ud>,
    buf: Arc<DmaBuf>,
    recvs: KVec<WrId>,
}

fn run(cfg: &Config, ctx: Run<'_>) -> Result {
    let (dev, cancel, stats, rep) = (ctx.dev, ctx.cancel, ctx.stats, ctx.rep);
    let port = *dev.ports().start();
    check_limits(dev, cfg, port, rep)?;
    let sgid_index = source_gid(dev, cfg, port)?;
    let sgid = dev.gid_attr(port, sgid_index)?.gid();
    let ifindex = dev.netdev_ifindex(port).ok_or(ENODEV)?;
    let mgid: Gid = cfg.group.mgid();
    if cfg.role != Mode::Receiver {
        // The send's route, looked up now as the device will: rxe over lo
        // has none for an IPv6 group (the kernel gives the loopback device
        // no ff00::/8 route).
        kverbs::mcast::check_route(dev, port, &sgid, &mgid).inspect_err(|e| {
            pr_warn!(
                "{}: mcast: no route from {} to {} through {} (error {}): nothing can be sent to the group\n",
                dev.name(),
                sgid.ipv6(),
                cfg.group,
                dev.netdev_name(port).as_ref().map(|n| n.as_str()).unwrap_or("?"),
                e.to_errno()
            );
            let _ = writeln!(rep, "no route from {} to {}", sgid.ipv6(), cfg.group);
        })?;
    }

    let pd = Pd::new(dev)?;
    // The IP-level join, so that the IP stack hands the group's packets to
    // the device; left when `_join` drops, after the QPs.
    let _join = IpGroup::join(cfg.group, ifindex).inspect_err(|e| {
        pr_warn!(
            "{}: mcast: cannot join {}: error {}\n",
            dev.name(),
            cfg.group,
            e.to_errno()
        );
    })?;

    let mut receivers = KVec::new();
    if cfg.role != Mode::Sender {
        receivers = create_receivers(dev, &pd, port, cfg, mgid, rep)?;
    }

    let mut sender_qpn = None;
    let mut sender = None;
    if cfg.role != Mode::Receiver {
        let s = send(dev, &pd, port, cfg, mgid, sgid_index, cancel, stats, rep)?;
        sender_qpn = Some(s.0.qp_num());
        let _ = writeln!(rep, "sent {} messages of {} bytes", cfg.count, cfg.size);
        sender = Some(s);
    }

    for (n, r) in receivers.iter_mut().enumerate() {
        receive(r, n, cfg, sender_qpn, (mgid, sgid), cancel, rep)?;
    }
    if !receivers.is_empty() && sender_qpn.is_some() {
        let _ = writeln!(
            rep,
            "validate: ok: payloads and immediate data (sender QPN)"
        );
    }

    // After a detach the QP gets nothing more, the others still do.
    if let (Some(sender), true) = (&sender, receivers.len() >= 2) {
        check_detach(sender, &receivers, cfg, mgid, cancel, rep)?;
    }
    let _ = writeln!(rep, "data transfers complete");
    Ok(())
}

/// The message size against the port's MTU, the receivers against the
/// device's limit of QPs attached to a group.
fn check_limits(dev: &Device, cfg: &Config, port: u32, rep: &mut Report) -> Result {
    let mtu = dev.query_port(port)?.active_mtu().bytes() as usize;
    if cfg.size > mtu {
        pr_warn!(
            "{}: mcast: size {} is above the active MTU {}\n",
            dev.name(),
            cfg.size,
            mtu
        );
        let _ = writeln!(rep, "size {} is above the active MTU {}", cfg.size, mtu);
        return Err(errno::emsgsize());
    }
    let max_attach = dev.attrs().max_mcast_qp_attach();
    if cfg.role != Mode::Sender && cfg.qps as i32 > max_attach {
        pr_warn!(
            "{}: mcast: qps={} is above max_mcast_qp_attach {}\n",
            dev.name(),
            cfg.qps,
            max_attach
        );
        return Err(ERANGE);
    }
    Ok(())
}

/// The source GID: the port's first RoCE v2 GID of the group's family.
fn source_gid(dev: &Device, cfg: &Config, port: u32) -> Result<u32> {
    let v4 = matches!(cfg.group, Group::V4(_));
    let len = dev.query_port(port)?.gid_tbl_len();
    (0..len)
        .find(|&i| {
            dev.gid_attr(port, i)
                .map(|g| g.gid_type() == GidType::RoceV2 && g.gid().is_v4_mapped() == v4)
                .unwrap_or(false)
        })
        .ok_or_else(|| {
            pr_warn!(
                "{}: mcast: port {} has no RoCE v2 {} GID\n",
                dev.name(),
                port,
                if v4 { "IPv4" } else { "IPv6" }
            );
            ENODEV
        })
}

/// A UD QP of mckey's qkey, ready to send, with a CQ of its own and two
/// SGEs per request (a message may straddle two chunks of its buffer).
fn ud_qp(
    dev: &Device,
    pd: &Pd,
    port: u32,
    max_send_wr: u32,
    max_recv_wr: u32,
) -> Result<Qp<Rts, Ud>> {
    let caps = QpCaps {
        max_send_wr,
        max_recv_wr,
        max_sge: 2,
        ..Default::default()
    };
    let cq = Cq::new(dev, caps.cq_entries(), PollCtx::Softirq)?;
    Qp::new_ud(pd, port, &cq, &cq, caps)?
        .to_init_ud(0, QKEY)?
        .to_rtr_ud()?
        .to_rts_ud(0)
}

/// mckey's receivers: `cfg.qps` UD QPs attached to the group, each with a
/// receive posted per message.
fn create_receivers(
    dev: &Device,
    pd: &Pd,
    port: u32,
    cfg: &Config,
    mgid: Gid,
    rep: &mut Report,
) -> Result<KVec<Receiver>> {
    let mut receivers = KVec::new();
    for _ in 0..cfg.qps {
        // A slot of the buffer may straddle two of its chunks.
        let qp = ud_qp(dev, pd, port, 1, cfg.count + 1)?;
        qp.attach_mcast(mgid)?;
        let slot = GRH_LEN + cfg.size;
        let buf = Arc::new(DmaBuf::new(dev, slot * cfg.count as usize)?, GFP_KERNEL)?;
        let mut recvs = KVec::with_capacity(cfg.count as usize, GFP_KERNEL)?;
        for i in 0..cfg.count as usize {
            recvs.push(qp.post_recv(&buf, i * slot, slot)?, GFP_KERNEL)?;
        }
        let _ = writeln!(
            rep,
            "joined dgid: {} qpn {:#x} qkey {:#x}",
            mgid.ipv6(),
            qp.qp_num(),
            QKEY
        );
        receivers.push(Receiver { qp, buf, recvs }, GFP_KERNEL)?;
    }
    Ok(receivers)
}

/// The sender: a UD QP, its address handle for the group, its buffer.
type Sender = (Qp<Rts, Ud>, UdDest, Arc<DmaBuf>);

/// mckey's sender: sends `cfg.count` messages to the group, each waited
/// for.
#[allow(clippy::too_many_arguments)]
fn send(
    dev: &Device,
    pd: &Pd,
    port: u32,
    cfg: &Config,
    mgid: Gid,
    sgid_index: u32,
    cancel: &Cancel,
    stats: &Stats,
    rep: &mut Report,
) -> Result<Sender> {
    let t = cfg.timeout_ms;
    // A message of the buffer may straddle two of its chunks.
    let qp = ud_qp(dev, pd, port, cfg.count, 1)?;
    let av = AddressVector::new(mgid, sgid_index as u8);
    let dest = UdDest {
        ah: Ah::new(pd, port, &av)?,
        qpn: MCAST_QPN,
        qkey: QKEY,
    };
    let buf = Arc::new(DmaBuf::new(dev, cfg.size * cfg.count as usize)?, GFP_KERNEL)?;
    let _ = writeln!(
        rep,
        "sender qpn {:#x} to {} ({})",
        qp.qp_num(),
        cfg.group,
        mgid.ipv6()
    );
    for i in 0..cfg.count {
        let mut data = KVec::from_elem(0u8, cfg.size, GFP_KERNEL)?;
        for (off, b) in data.iter_mut().enumerate() {
            *b = payload(i, off);
        }
        let off = i as usize * cfg.size;
        buf.write(off, &data)?;
        let id = qp.post_send_ud(Some(qp.qp_num()), &buf, off, cfg.size, &dest, true)?;
        let wc = qp.wait(id, t, cancel)?;
        if wc.result().is_err() {
            let _ = writeln!(rep, "send {}: {}", i, wc.status);
            return Err(EIO);
        }
        stats_add(stats, cfg.size);
    }
    Ok((qp, dest, buf))
}

/// Receiver `n`'s messages: each received, from the sender if this run
/// sent (`sender_qpn`), with the payload sent; then where the first came
/// from, as its GRH says, checked against the group `gids.0` and the
/// source `gids.1`.
fn receive(
    r: &mut Receiver,
    n: usize,
    cfg: &Config,
    sender_qpn: Option<u32>,
    gids: (Gid, Gid),
    cancel: &Cancel,
    rep: &mut Report,
) -> Result {
    let (mgid, sgid) = gids;
    let t = cfg.timeout_ms;
    let slot = GRH_LEN + cfg.size;
    let mut first_ipv4 = None;
    let recvs = core::mem::replace(&mut r.recvs, KVec::new());
    for (i, id) in recvs.into_iter().enumerate() {
        let wc = r.qp.wait(id, t, cancel).inspect_err(|e| {
            let _ = writeln!(
                rep,
                "qp {}: message {} not received: error {}",
                n,
                i,
                e.to_errno()
            );
        })?;
        if i == 0 {
            first_ipv4 = wc.ipv4;
        }
        if wc.result().is_err() || wc.byte_len as usize != slot || !wc.grh {
            let _ = writeln!(
                rep,
                "qp {}: message {}: {} ({} bytes)",
                n, i, wc.status, wc.byte_len
            );
            return Err(EIO);
        }
        if let Some(qpn) = sender_qpn {
            if wc.imm != Some(qpn) {
                let _ = writeln!(
                    rep,
                    "qp {}: message {}: immediate {:?}, sender {:#x}",
                    n, i, wc.imm, qpn
                );
                return Err(EIO);
            }
            let mut data = KVec::from_elem(0u8, cfg.size, GFP_KERNEL)?;
            r.buf.read(i * slot + GRH_LEN, &mut data)?;
            if data
                .iter()
                .enumerate()
                .any(|(off, &b)| b != payload(i as u32, off))
            {
                let _ = writeln!(rep, "qp {}: message {}: payload differs", n, i);
                return Err(EIO);
            }
        }
    }
    // Where the first message came from, as its GRH says.
    let mut raw = [0u8; GRH_LEN];
    r.buf.read(0, &mut raw)?;
    let grh = Grh::parse(&raw, first_ipv4.unwrap_or(true));
    let _ = writeln!(
        rep,
        "qp {:#x}: received {} messages from {} (flow label {:#x}, hop limit {})",
        r.qp.qp_num(),
        cfg.count,
        grh.sgid.ipv6(),
        grh.flow_label,
        grh.hop_limit
    );
    if grh.dgid != mgid || (sender_qpn.is_some() && grh.sgid != sgid) {
        let _ = writeln!(
            rep,
            "qp {}: GRH {} -> {}, expected {} -> {}",
            n,
            grh.sgid.ipv6(),
            grh.dgid.ipv6(),
            sgid.ipv6(),
            mgid.ipv6()
        );
        return Err(EIO);
    }
    Ok(())
}

/// After the first receiver detaches, one more message: the others get
/// it, the first does not.
fn check_detach(
    sender: &Sender,
    receivers: &[Receiver],
    cfg: &Config,
    mgid: Gid,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result {
    let (qp, dest, buf) = sender;
    let t = cfg.timeout_ms;
    let slot = GRH_LEN + cfg.size;
    receivers[0].qp.detach_mcast(mgid)?;
    let mut ids = KVec::new();
    for r in receivers.iter() {
        ids.push(r.qp.post_recv(&r.buf, 0, slot)?, GFP_KERNEL)?;
    }
    let id = qp.post_send_ud(Some(qp.qp_num()), buf, 0, cfg.size, dest, true)?;
    qp.wait(id, t, cancel)?.result()?;
    let mut ids = ids.into_iter();
    let first = ids.next().ok_or(EINVAL)?;
    for (r, id) in receivers.iter().skip(1).zip(ids) {
        r.qp.wait(id, t, cancel)?.result()?;
    }
    // rxe hands a group's packet to every attached QP in one pass
    // (rxe_rcv_mcast()): once the others have theirs, a copy for the
    // detached QP would be due within milliseconds, not 250.
    match receivers[0].qp.wait(first, DETACH_QUIET_MS, cancel) {
        Err(e) if e.to_errno() == errno::etimedout().to_errno() => {}
        Ok(_) => {
            let _ = writeln!(
                rep,
                "detach: qp {:#x} still received",
                receivers[0].qp.qp_num()
            );
            return Err(EIO);
        }
        Err(e) => return Err(e),
    }
    let _ = writeln!(
        rep,
        "detach: ok: qp {:#x} received nothing more, the other QPs did",
        receivers[0].qp.qp_num()
    );
    Ok(())
}

fn stats_add(stats: &Stats, size: usize) {
    add(&stats.send_msgs, 1);
    add(&stats.send_bytes, size as u64);
}
