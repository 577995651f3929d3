// SPDX-License-Identifier: GPL-2.0

//! The SRQ example of the RDMA Aware Networks Programming User Manual
//! (srq.c), over rdma_cm (RDMA_PS_TCP): the `srq` control file.
//!
//! The server has one shared receive queue of `max_wr` receives of `size`
//! bytes, one receive CQ, and accepts `qps` connections whose QPs all take
//! their receives from it. The client opens `qps` connections and SENDs
//! `count` messages of `size` bytes round-robin over them, at most `max_wr`
//! outstanding: a round. When the server has received a round it reposts
//! the receives and SENDs one "go" message back on the QP of the round's
//! last receive; the client goes on with the next round when it has it.
//! Each message starts with its sequence number and the index of the QP it
//! was sent on (two little-endian u32); the server checks that every
//! sequence number came once, in order on each QP, and reports how many
//! receives each QP number got (`wc.qp_num`). With `srq_limit=<n>` the
//! server arms the SRQ limit each round: `IB_EVENT_SRQ_LIMIT_REACHED` comes
//! once fewer than `n` receives remain (reported, and in `events`).

use crate::events::EventLog;
use crate::rc::{add, need, options, parse_ipv4, parse_num_in, Example, Report, Stats};
use core::fmt::Write;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    cm::{CmEvents, CmId},
    cq::{Cq, PollCtx},
    device::Device,
    dma::DmaBuf,
    event::{Event, EventKind, EventSink},
    pd::Pd,
    qp::{Cancel, Qp, QpCaps, Rts, SendOp},
    srq::{Srq, SrqWrId},
    tcp::Ipv4,
};

/// The port of srq.c.
const PORT: u16 = 51216;
/// The message header: sequence number and QP index.
const HDR: usize = 8;
/// The go message: "srq-go", the round (u32 LE), the messages received.
const GO_LEN: usize = 16;
const GO_TAG: &[u8; 6] = b"srq-go";
/// The largest buffer of a side: `max_wr` messages of `size` bytes.
const MAX_BUF: usize = 16 << 20;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Server,
    Client,
}

pub(crate) struct Config {
    role: Role,
    addr: Option<Ipv4>,
    port: u16,
    qps: u32,
    max_wr: u32,
    count: u32,
    size: usize,
    srq_limit: u32,
    timeout_ms: u32,
}

fn parse(dev: &Device, input: &[u8]) -> Result<Config> {
    let mut cfg = Config {
        role: Role::Server,
        addr: None,
        port: PORT,
        qps: 4,
        max_wr: 64,
        count: 100,
        size: 100_000,
        srq_limit: 0,
        timeout_ms: 5000,
    };
    let mut have_role = false;
    for (key, val) in options(dev, "srq", input)? {
        let v = need(dev, "srq", key, val)?;
        let num = |min, max| parse_num_in::<u64>("srq", dev, key, v, min, max);
        match key {
            "role" => {
                cfg.role = match v {
                    "server" => Role::Server,
                    "client" => Role::Client,
                    other => {
                        pr_warn!("{}: srq: unknown role '{}'\n", dev.name(), other);
                        return Err(EINVAL);
                    }
                };
                have_role = true;
            }
            "addr" => {
                cfg.addr = Some(parse_ipv4(v).map(Ipv4).ok_or_else(|| {
                    pr_warn!("{}: srq: addr '{}' is not an IPv4 address\n", dev.name(), v);
                    EINVAL
                })?);
            }
            "port" => cfg.port = num(1, 65535)? as u16,
            "qps" => cfg.qps = num(1, 16)? as u32,
            "max_wr" => cfg.max_wr = num(2, 1024)? as u32,
            "count" => cfg.count = num(1, 1_000_000)? as u32,
            "size" => cfg.size = num(HDR as u64, 1 << 20)? as usize,
            "srq_limit" => cfg.srq_limit = num(0, 1023)? as u32,
            "timeout_ms" => cfg.timeout_ms = num(1, 600_000)? as u32,
            _ => {
                pr_warn!("{}: srq: unknown key '{}'\n", dev.name(), key);
                return Err(EINVAL);
            }
        }
    }
    if !have_role {
        pr_warn!("{}: srq: role= is missing (server or client)\n", dev.name());
        return Err(EINVAL);
    }
    if cfg.role == Role::Client && cfg.addr.is_none() {
        pr_warn!("{}: srq: role=client needs addr=\n", dev.name());
        return Err(EINVAL);
    }
    if cfg.max_wr as usize * cfg.size > MAX_BUF {
        pr_warn!(
            "{}: srq: max_wr x size = {} bytes, more than {}\n",
            dev.name(),
            cfg.max_wr as usize * cfg.size,
            MAX_BUF
        );
        return Err(ERANGE);
    }
    if cfg.srq_limit >= cfg.max_wr {
        pr_warn!(
            "{}: srq: srq_limit={} must be below max_wr={}\n",
            dev.name(),
            cfg.srq_limit,
            cfg.max_wr
        );
        return Err(ERANGE);
    }
    Ok(cfg)
}

/// The `srq` control file's example: its SRQ's events go to the device's
/// `events` ring.
pub(crate) struct SrqExample {
    pub(crate) log: Arc<EventLog>,
}

/// The SRQ's sink during a run: counts limit events, passes all on.
struct RunSink {
    log: Arc<EventLog>,
    limit: AtomicU32,
}

impl EventSink for RunSink {
    fn event(&self, ev: &Event) {
        if ev.kind() == EventKind::SrqLimitReached {
            self.limit.fetch_add(1, Ordering::Relaxed);
        }
        self.log.event(ev);
    }
}

impl Example for SrqExample {
    const NAME: &'static str = "srq";
    type Config = Config;

    fn parse(dev: &Device, input: &[u8]) -> Result<Config> {
        parse(dev, input)
    }

    fn run(
        &self,
        dev: &Device,
        cfg: &Config,
        cancel: &Cancel,
        stats: &Stats,
        rep: &mut Report,
    ) -> Result {
        let _ = writeln!(
            rep,
            "config: role={} qps={} max_wr={} count={} size={} srq_limit={} timeout_ms={}",
            if cfg.role == Role::Server {
                "server"
            } else {
                "client"
            },
            cfg.qps,
            cfg.max_wr,
            cfg.count,
            cfg.size,
            cfg.srq_limit,
            cfg.timeout_ms
        );
        crate::rping::cm_device_check(dev, "srq", rep)?;
        match cfg.role {
            Role::Server => self.server(dev, cfg, cancel, stats, rep),
            Role::Client => client(dev, cfg, cancel, stats, rep),
        }
    }
}

/// The SGEs the largest of `n` messages of `size` bytes in `buf` takes.
fn sges(buf: &DmaBuf, n: u32, size: usize) -> u32 {
    (0..n as usize)
        .map(|j| buf.sge_count(j * size, size))
        .max()
        .unwrap_or(1) as u32
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// One connection of the server: its ID, QP, and what came in on it.
struct ServerConn {
    id: CmId,
    qp: Qp<Rts>,
    received: u32,
    /// The next sequence number expected on it, at least.
    next: u32,
}

impl SrqExample {
    fn server(
        &self,
        dev: &Device,
        cfg: &Config,
        cancel: &Cancel,
        stats: &Stats,
        rep: &mut Report,
    ) -> Result {
        let t = cfg.timeout_ms;
        let (size, max_wr) = (cfg.size, cfg.max_wr);
        let events = CmEvents::with_requests(cfg.qps)?;
        let listener = crate::rping::cm_listen(dev, "srq", &events, cfg.addr, cfg.port, rep)?;

        // The SRQ, its CQ and its receives, before the first connection.
        let pd = Pd::new(dev)?;
        let per_qp = 2u32;
        let scq = Cq::new(dev, cfg.qps * (per_qp + 1), PollCtx::Softirq)?;
        let rcq = Cq::new(dev, max_wr, PollCtx::Softirq)?;
        let rbuf = Arc::new(DmaBuf::new(dev, max_wr as usize * size)?, GFP_KERNEL)?;
        let sink = Arc::new(
            RunSink {
                log: self.log.clone(),
                limit: AtomicU32::new(0),
            },
            GFP_KERNEL,
        )?;
        let srq = Srq::new_with_events(&pd, &rcq, max_wr, sges(&rbuf, max_wr, size), sink.clone())?;
        let mut ids: KVec<SrqWrId> = KVec::with_capacity(max_wr as usize, GFP_KERNEL)?;
        for j in 0..max_wr as usize {
            ids.push(srq.post_recv(&rbuf, j * size, size)?, GFP_KERNEL)?;
        }
        if cfg.srq_limit > 0 {
            srq.arm_limit(cfg.srq_limit)?;
        }
        let gobuf = Arc::new(DmaBuf::new(dev, GO_LEN)?, GFP_KERNEL)?;
        let _ = writeln!(
            rep,
            "resources_create: ok: SRQ of {} receives of {} bytes, one receive CQ",
            srq.max_wr(),
            size
        );

        let mut conns: KVec<ServerConn> = KVec::with_capacity(cfg.qps as usize, GFP_KERNEL)?;
        for i in 0..cfg.qps {
            let id = listener.get_request(t, cancel).inspect_err(|e| {
                let _ = writeln!(
                    rep,
                    "rdma_cm: connection {} did not come: error {}",
                    i,
                    e.to_errno()
                );
                pr_warn!(
                    "{}: srq: no rdma_cm connection request {} on port {}: error {}\n",
                    dev.name(),
                    i,
                    cfg.port,
                    e.to_errno()
                );
            })?;
            crate::rping::cm_on_device(dev, "srq", &id, rep)?;
            let caps = QpCaps {
                max_send_wr: per_qp,
                max_recv_wr: 0,
                ..Default::default()
            };
            // Its events (last WQE reached when it goes) go to `events`.
            let qp = Qp::new_cm_srq(&id, &pd, &scq, &srq, caps, Some(sink.clone()))?;
            let qp = id.accept(qp, t, cancel)?;
            let _ = writeln!(
                rep,
                "rdma_cm: connection {} accepted: qp {:#x}",
                i,
                qp.qp_num()
            );
            conns.push(
                ServerConn {
                    id,
                    qp,
                    received: 0,
                    next: 0,
                },
                GFP_KERNEL,
            )?;
        }

        // Every sequence number once.
        let mut seen = KVec::from_elem(0u64, (cfg.count as usize).div_ceil(64), GFP_KERNEL)?;
        let (mut received, mut rounds) = (0u32, 0u32);
        let mut head = [0u8; HDR];
        while received < cfg.count {
            let n = max_wr.min(cfg.count - received);
            let mut last_qpn = 0;
            for (j, id) in ids.iter().take(n as usize).enumerate() {
                let wc = srq.wait(*id, t, cancel).inspect_err(|e| {
                    let _ = writeln!(
                        rep,
                        "round {}: receive {} did not come: error {}",
                        rounds,
                        j,
                        e.to_errno()
                    );
                })?;
                if wc.result().is_err() || wc.byte_len as usize != size {
                    let _ = writeln!(
                        rep,
                        "round {}: receive {}: {} ({} bytes)",
                        rounds, j, wc.status, wc.byte_len
                    );
                    return Err(EIO);
                }
                rbuf.read(j * size, &mut head)?;
                let (seq, qi) = (u32_at(&head, 0), u32_at(&head, 4));
                let Some(c) = conns.iter_mut().find(|c| c.qp.qp_num() == wc.qp_num) else {
                    let _ = writeln!(rep, "receive from an unknown QP {:#x}", wc.qp_num);
                    return Err(EIO);
                };
                let (w, bit) = (seq as usize / 64, 1u64 << (seq % 64));
                if seq >= cfg.count || qi >= cfg.qps || seen[w] & bit != 0 || seq < c.next {
                    let _ = writeln!(
                        rep,
                        "qp {:#x}: message {} (QP index {}) is out of place",
                        wc.qp_num, seq, qi
                    );
                    return Err(EIO);
                }
                seen[w] |= bit;
                c.next = seq + 1;
                c.received += 1;
                last_qpn = wc.qp_num;
            }
            received += n;
            rounds += 1;
            add(&stats.recv_msgs, n.into());
            add(&stats.recv_bytes, u64::from(n) * size as u64);
            if received < cfg.count {
                for (j, id) in ids.iter_mut().take(n as usize).enumerate() {
                    *id = srq.post_recv(&rbuf, j * size, size)?;
                }
                if cfg.srq_limit > 0 {
                    srq.arm_limit(cfg.srq_limit)?;
                }
            }
            // Go on, on the QP of the round's last receive.
            let mut go = [0u8; GO_LEN];
            go[..6].copy_from_slice(GO_TAG);
            go[8..12].copy_from_slice(&rounds.to_le_bytes());
            go[12..16].copy_from_slice(&received.to_le_bytes());
            gobuf.write(0, &go)?;
            let c = conns
                .iter()
                .find(|c| c.qp.qp_num() == last_qpn)
                .ok_or(EIO)?;
            let id = c.qp.post_send(SendOp::Send, &gobuf, 0, GO_LEN, true)?;
            crate::rc::complete_wc(&c.qp, id, "SEND (go)", t, cancel, rep)?;
            add(&stats.send_msgs, 1);
            add(&stats.send_bytes, GO_LEN as u64);
        }
        for c in conns.iter() {
            let _ = writeln!(rep, "qp {:#x}: {} receives", c.qp.qp_num(), c.received);
        }
        let _ = writeln!(
            rep,
            "srq: ok: {} messages of {} bytes from {} QPs through one SRQ in {} rounds, every sequence number once",
            received, size, cfg.qps, rounds
        );
        for c in conns.iter() {
            let _ = c.id.disconnect();
        }
        // The SRQ goes with its last QP: its drop delivers the events still
        // on their way to the sink (they come from a workqueue).
        drop(conns);
        drop(srq);
        if cfg.srq_limit > 0 {
            let _ = writeln!(
                rep,
                "srq limit events: {}",
                sink.limit.load(Ordering::Relaxed)
            );
        }
        Ok(())
    }
}

fn client(dev: &Device, cfg: &Config, cancel: &Cancel, stats: &Stats, rep: &mut Report) -> Result {
    let t = cfg.timeout_ms;
    let (size, max_wr, qps) = (cfg.size, cfg.max_wr, cfg.qps);
    let addr = cfg.addr.ok_or(EINVAL)?;
    let events = CmEvents::new()?;
    let pd = Pd::new(dev)?;
    let sbuf = Arc::new(DmaBuf::new(dev, max_wr as usize * size)?, GFP_KERNEL)?;
    // A QP may take a whole round; the go messages come to an SRQ of its
    // own, one receive per QP.
    let per_qp = max_wr.div_ceil(qps);
    let scq = Cq::new(dev, qps * (per_qp + 1), PollCtx::Softirq)?;
    let rcq = Cq::new(dev, qps, PollCtx::Softirq)?;
    let gsrq = Srq::new(&pd, &rcq, qps, 1)?;
    let gbuf = Arc::new(DmaBuf::new(dev, qps as usize * GO_LEN)?, GFP_KERNEL)?;
    let mut go_ids: KVec<SrqWrId> = KVec::with_capacity(qps as usize, GFP_KERNEL)?;
    for j in 0..qps as usize {
        go_ids.push(gsrq.post_recv(&gbuf, j * GO_LEN, GO_LEN)?, GFP_KERNEL)?;
    }
    let caps = QpCaps {
        max_send_wr: per_qp,
        max_recv_wr: 0,
        max_sge: sges(&sbuf, max_wr, size),
        ..Default::default()
    };
    let mut conns: KVec<(CmId, Qp<Rts>)> = KVec::with_capacity(qps as usize, GFP_KERNEL)?;
    for i in 0..qps {
        let id = CmId::new(&events)?;
        id.resolve(addr, cfg.port, t, cancel).inspect_err(|e| {
            let _ = writeln!(
                rep,
                "rdma_cm: cannot resolve {}: error {}",
                addr,
                e.to_errno()
            );
        })?;
        crate::rping::cm_on_device(dev, "srq", &id, rep)?;
        let qp = Qp::new_cm_srq(&id, &pd, &scq, &gsrq, caps, None)?;
        let qp = id.connect(qp, t, cancel).inspect_err(|e| {
            let _ = writeln!(
                rep,
                "rdma_cm: connection {} to {}:{} failed: error {}",
                i,
                addr,
                cfg.port,
                e.to_errno()
            );
            pr_warn!(
                "{}: srq: no rdma_cm connection {} to {}:{}: error {}\n",
                dev.name(),
                i,
                addr,
                cfg.port,
                e.to_errno()
            );
        })?;
        let _ = writeln!(
            rep,
            "rdma_cm: connection {} established: qp {:#x}",
            i,
            qp.qp_num()
        );
        conns.push((id, qp), GFP_KERNEL)?;
    }

    let (mut sent, mut rounds, mut go_at) = (0u32, 0u32, 0usize);
    let mut pattern = KVec::from_elem(0u8, size, GFP_KERNEL)?;
    for (i, b) in pattern.iter_mut().enumerate().skip(HDR) {
        *b = (i as u8).wrapping_mul(7);
    }
    while sent < cfg.count {
        let n = max_wr.min(cfg.count - sent);
        let mut wrs = KVec::with_capacity(n as usize, GFP_KERNEL)?;
        for k in 0..n {
            let seq = sent + k;
            let qi = seq % qps;
            pattern[0..4].copy_from_slice(&seq.to_le_bytes());
            pattern[4..8].copy_from_slice(&qi.to_le_bytes());
            let at = k as usize * size;
            sbuf.write(at, &pattern)?;
            let qp = &conns[qi as usize].1;
            wrs.push(
                (qi, qp.post_send(SendOp::Send, &sbuf, at, size, true)?),
                GFP_KERNEL,
            )?;
        }
        for (qi, id) in wrs.into_iter() {
            crate::rc::complete_wc(&conns[qi as usize].1, id, "SEND", t, cancel, rep)?;
        }
        add(&stats.send_msgs, n.into());
        add(&stats.send_bytes, u64::from(n) * size as u64);
        sent += n;
        rounds += 1;
        // The server's go, on the QP of its round's last receive.
        let wc = gsrq.wait(go_ids[go_at], t, cancel).inspect_err(|e| {
            let _ = writeln!(
                rep,
                "round {}: no go from the server: error {}",
                rounds,
                e.to_errno()
            );
        })?;
        let mut go = [0u8; GO_LEN];
        gbuf.read(go_at * GO_LEN, &mut go)?;
        if wc.result().is_err()
            || &go[..6] != GO_TAG
            || u32_at(&go, 8) != rounds
            || u32_at(&go, 12) != sent
        {
            let _ = writeln!(
                rep,
                "round {}: the go message is wrong ({}, round {}, {} received)",
                rounds,
                wc.status,
                u32_at(&go, 8),
                u32_at(&go, 12)
            );
            return Err(EIO);
        }
        if rounds == 1 {
            let _ = writeln!(rep, "round 1: go on qp {:#x}", wc.qp_num);
        }
        go_ids[go_at] = gsrq.post_recv(&gbuf, go_at * GO_LEN, GO_LEN)?;
        go_at = (go_at + 1) % qps as usize;
    }
    for (i, (_, qp)) in conns.iter().enumerate() {
        let per = (cfg.count / qps) + u32::from((i as u32) < cfg.count % qps);
        let _ = writeln!(rep, "qp {:#x}: {} SENDs", qp.qp_num(), per);
    }
    let _ = writeln!(
        rep,
        "srq: ok: {} SENDs of {} bytes over {} QPs in {} rounds, each acknowledged",
        sent, size, qps, rounds
    );
    for (id, _) in conns.iter() {
        let _ = id.disconnect();
    }
    Ok(())
}
