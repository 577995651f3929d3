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
//!
//! `flow=manual` speaks the manual's srq.c as it is instead, with a peer
//! that is the manual's program: its messages carry no header (zeroed
//! payload), its client SENDs one message at a time and waits for each,
//! and its server answers a round with one message of `size` bytes on the
//! first accepted connection. The server then checks the sizes, the counts
//! and that receive `k` of the run came on connection `k % qps` (the
//! client's round-robin, one message at a time); the client that each
//! reply has `size` bytes and came on its first connection. The flow is an
//! option, not detected: message 0 of both flows starts with eight zero
//! bytes, and a kverbs peer that lost its headers must fail, not pass as
//! the manual's.

use crate::conn::{cm_device_check, cm_listen, cm_on_device, complete_wc};
use crate::control::Example;
use crate::events::EventLog;
use crate::options::{need, options, parse_addr, parse_num_in};
use crate::report::Report;
use crate::stats::{add, Stats};
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
    wc::Wc,
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

/// The protocol the peer speaks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Sequence numbers, QP indexes, the go message (kverbs, srq_peer).
    Kverbs,
    /// The manual's srq.c: zeroed messages, a `size`-byte reply on the
    /// first connection.
    Manual,
}

impl Flow {
    fn name(self) -> &'static str {
        match self {
            Flow::Kverbs => "kverbs",
            Flow::Manual => "manual",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Server,
    Client,
}

pub(crate) struct Config {
    role: Role,
    flow: Flow,
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
        flow: Flow::Kverbs,
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
            "flow" => {
                cfg.flow = match v {
                    "kverbs" => Flow::Kverbs,
                    "manual" => Flow::Manual,
                    other => {
                        pr_warn!(
                            "{}: srq: unknown flow '{}' (kverbs or manual)\n",
                            dev.name(),
                            other
                        );
                        return Err(EINVAL);
                    }
                };
            }
            "addr" => {
                cfg.addr = Some(parse_addr(dev, "srq", v)?);
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
            "config: role={} flow={} qps={} max_wr={} count={} size={} srq_limit={} timeout_ms={}",
            if cfg.role == Role::Server {
                "server"
            } else {
                "client"
            },
            cfg.flow.name(),
            cfg.qps,
            cfg.max_wr,
            cfg.count,
            cfg.size,
            cfg.srq_limit,
            cfg.timeout_ms
        );
        cm_device_check(dev, "srq", rep)?;
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
        let (size, max_wr) = (cfg.size, cfg.max_wr);
        let events = CmEvents::with_requests(cfg.qps)?;
        let listener = cm_listen(dev, "srq", &events, cfg.addr, cfg.port, rep)?;

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
        // The reply of a round: the go message, or the manual's `size`
        // zeroed bytes.
        let manual = cfg.flow == Flow::Manual;
        let reply_len = if manual { size } else { GO_LEN };
        let gobuf = Arc::new(DmaBuf::new(dev, reply_len)?, GFP_KERNEL)?;
        let _ = writeln!(rep, "flow: {}", server_flow(manual));
        let _ = writeln!(
            rep,
            "resources_create: ok: SRQ of {} receives of {} bytes, one receive CQ",
            srq.max_wr(),
            size
        );

        let caps = QpCaps {
            max_send_wr: per_qp,
            max_recv_wr: 0,
            max_sge: sges(&gobuf, 1, reply_len),
            ..Default::default()
        };
        let mut conns: KVec<ServerConn> = KVec::with_capacity(cfg.qps as usize, GFP_KERNEL)?;
        for i in 0..cfg.qps {
            let conn = accept_conn(
                dev, cfg, &listener, i, &pd, &scq, &srq, &sink, caps, cancel, rep,
            )?;
            conns.push(conn, GFP_KERNEL)?;
        }

        // Every sequence number once.
        let mut seen = KVec::from_elem(0u64, (cfg.count as usize).div_ceil(64), GFP_KERNEL)?;
        let (mut received, mut rounds) = (0u32, 0u32);
        while received < cfg.count {
            let n = max_wr.min(cfg.count - received);
            let last_qpn = receive_round(
                &srq,
                &ids[..n as usize],
                rounds,
                received,
                &mut conns,
                &rbuf,
                &mut seen,
                cfg,
                cancel,
                rep,
            )?;
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
            let c = if manual {
                // The manual's reply: `size` zeroed bytes on the first
                // connection accepted, whichever QP the round came on.
                &conns[0]
            } else {
                // Go on, on the QP of the round's last receive.
                gobuf.write(0, &go_message(rounds, received))?;
                conns
                    .iter()
                    .find(|c| c.qp.qp_num() == last_qpn)
                    .ok_or(EIO)?
            };
            send_reply(c, &gobuf, reply_len, cfg, cancel, stats, rep)?;
        }
        server_report(cfg, &conns, received, rounds, rep);
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

/// rdma_cm's connection `i` to the server: its request, accepted with a
/// QP of `srq`.
#[allow(clippy::too_many_arguments)]
fn accept_conn(
    dev: &Device,
    cfg: &Config,
    listener: &CmId,
    i: u32,
    pd: &Pd,
    scq: &Cq,
    srq: &Srq,
    sink: &Arc<RunSink>,
    caps: QpCaps,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result<ServerConn> {
    let t = cfg.timeout_ms;
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
    cm_on_device(dev, "srq", &id, rep)?;
    // Its events (last WQE reached when it goes) go to `events`.
    let qp = Qp::new_cm_srq(&id, pd, scq, srq, caps, Some(sink.clone()))?;
    let qp = id.accept(qp, t, cancel)?;
    let _ = writeln!(
        rep,
        "rdma_cm: connection {} accepted: qp {:#x}",
        i,
        qp.qp_num()
    );
    Ok(ServerConn {
        id,
        qp,
        received: 0,
        next: 0,
    })
}

/// The receives `ids` of round `rounds` (`received` before it) on the
/// SRQ, each checked; returns the QP number of the last.
#[allow(clippy::too_many_arguments)]
fn receive_round(
    srq: &Srq,
    ids: &[SrqWrId],
    rounds: u32,
    received: u32,
    conns: &mut [ServerConn],
    rbuf: &DmaBuf,
    seen: &mut [u64],
    cfg: &Config,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result<u32> {
    let (t, size) = (cfg.timeout_ms, cfg.size);
    let mut last_qpn = 0;
    for (j, id) in ids.iter().enumerate() {
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
        last_qpn = note_receive(&wc, j, received, conns, rbuf, seen, cfg, rep)?;
    }
    Ok(last_qpn)
}

/// Receive `j` of a round (`received` before it) on the SRQ, from a QP of
/// `conns`: in the manual's flow, on the connection round-robin puts it
/// on; in ours, a sequence number not seen yet and in order on its QP.
/// Returns the QP's number.
#[allow(clippy::too_many_arguments)]
fn note_receive(
    wc: &Wc,
    j: usize,
    received: u32,
    conns: &mut [ServerConn],
    rbuf: &DmaBuf,
    seen: &mut [u64],
    cfg: &Config,
    rep: &mut Report,
) -> Result<u32> {
    let (size, manual) = (cfg.size, cfg.flow == Flow::Manual);
    let mut head = [0u8; HDR];
    let Some(ci) = conns.iter().position(|c| c.qp.qp_num() == wc.qp_num) else {
        let _ = writeln!(rep, "receive from an unknown QP {:#x}", wc.qp_num);
        return Err(EIO);
    };
    if manual {
        // One message at a time, round-robin over the
        // connections in the order they came.
        let k = received + j as u32;
        if ci as u32 != k % cfg.qps {
            let _ = writeln!(
                rep,
                "receive {} came on connection {} (qp {:#x}), the manual's round-robin puts it on connection {}",
                k,
                ci,
                wc.qp_num,
                k % cfg.qps
            );
            return Err(EIO);
        }
        conns[ci].received += 1;
        return Ok(wc.qp_num);
    }
    let c = &mut conns[ci];
    rbuf.read(j * size, &mut head)?;
    let (seq, qi) = (u32_at(&head, 0), u32_at(&head, 4));
    let (w, bit) = (seq as usize / 64, 1u64 << (seq % 64));
    if seq >= cfg.count || qi >= cfg.qps || seen[w] & bit != 0 || seq < c.next {
        let _ = writeln!(
            rep,
            "qp {:#x}: message {} (QP index {}) is out of place",
            wc.qp_num, seq, qi
        );
        if seq == 0 && qi == 0 {
            let _ = writeln!(
                rep,
                "a header of zeros: does the peer speak the manual's flow (flow=manual)?"
            );
        }
        return Err(EIO);
    }
    seen[w] |= bit;
    c.next = seq + 1;
    c.received += 1;
    Ok(wc.qp_num)
}

/// What the server's flow is, for the report.
fn server_flow(manual: bool) -> &'static str {
    if manual {
        "manual (the manual's srq.c: zeroed messages, a reply of size bytes on the first connection)"
    } else {
        "kverbs (sequence numbers and QP indexes, the go message on the QP of the last receive)"
    }
}

/// The reply of a round on the connection `c`: the go message, or the
/// manual's `reply_len` zeroed bytes, in `gobuf`.
fn send_reply(
    c: &ServerConn,
    gobuf: &Arc<DmaBuf>,
    reply_len: usize,
    cfg: &Config,
    cancel: &Cancel,
    stats: &Stats,
    rep: &mut Report,
) -> Result {
    let what = if cfg.flow == Flow::Manual {
        "SEND (reply)"
    } else {
        "SEND (go)"
    };
    let id = c.qp.post_send(SendOp::Send, gobuf, 0, reply_len, true)?;
    complete_wc(&c.qp, id, what, cfg.timeout_ms, cancel, rep)?;
    add(&stats.send_msgs, 1);
    add(&stats.send_bytes, reply_len as u64);
    Ok(())
}

/// The go message of round `rounds`, `received` messages in.
fn go_message(rounds: u32, received: u32) -> [u8; GO_LEN] {
    let mut go = [0u8; GO_LEN];
    go[..6].copy_from_slice(GO_TAG);
    go[8..12].copy_from_slice(&rounds.to_le_bytes());
    go[12..16].copy_from_slice(&received.to_le_bytes());
    go
}

/// The server's last lines: per QP, and the whole.
fn server_report(cfg: &Config, conns: &[ServerConn], received: u32, rounds: u32, rep: &mut Report) {
    let (size, manual) = (cfg.size, cfg.flow == Flow::Manual);
    for c in conns.iter() {
        let _ = writeln!(rep, "qp {:#x}: {} receives", c.qp.qp_num(), c.received);
    }
    if manual {
        let _ = writeln!(
        rep,
        "srq: ok: {} messages of {} bytes from {} QPs through one SRQ in {} rounds, the manual's flow: receive k on connection k % {}, {} replies of {} bytes on qp {:#x}",
        received,
        size,
        cfg.qps,
        rounds,
        cfg.qps,
        rounds,
        size,
        conns[0].qp.qp_num()
    );
    } else {
        let _ = writeln!(
        rep,
        "srq: ok: {} messages of {} bytes from {} QPs through one SRQ in {} rounds, every sequence number once",
        received, size, cfg.qps, rounds
    );
    }
}

/// rdma_cm's connection `i` to the server, with a QP whose receives come
/// from `gsrq`.
#[allow(clippy::too_many_arguments)]
fn connect_conn(
    dev: &Device,
    cfg: &Config,
    events: &CmEvents,
    i: u32,
    pd: &Pd,
    scq: &Cq,
    gsrq: &Srq,
    caps: QpCaps,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result<(CmId, Qp<Rts>)> {
    let t = cfg.timeout_ms;
    let addr = cfg.addr.ok_or(EINVAL)?;
    let id = CmId::new(events)?;
    id.resolve(addr, cfg.port, t, cancel).inspect_err(|e| {
        let _ = writeln!(
            rep,
            "rdma_cm: cannot resolve {}: error {}",
            addr,
            e.to_errno()
        );
    })?;
    cm_on_device(dev, "srq", &id, rep)?;
    let qp = Qp::new_cm_srq(&id, pd, scq, gsrq, caps, None)?;
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
    Ok((id, qp))
}

/// The manual's round: `n` SENDs from the zeroed buffer, one at a time,
/// each waited for, round-robin over the connections from `sent`.
fn send_one_at_a_time(
    conns: &[(CmId, Qp<Rts>)],
    sbuf: &Arc<DmaBuf>,
    sent: u32,
    n: u32,
    cfg: &Config,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result {
    let (t, size, qps) = (cfg.timeout_ms, cfg.size, cfg.qps);
    // One at a time, each waited for: the buffer stays zeroed.
    for k in 0..n {
        let qi = (sent + k) % qps;
        let qp = &conns[qi as usize].1;
        let id = qp.post_send(SendOp::Send, &sbuf, 0, size, true)?;
        complete_wc(qp, id, "SEND", t, cancel, rep)?;
    }
    Ok(())
}

/// What the client's flow is, for the report.
fn client_flow(manual: bool) -> &'static str {
    if manual {
        "manual (the manual's srq.c: zeroed messages one at a time, a reply of size bytes on the first connection)"
    } else {
        "kverbs (sequence numbers and QP indexes, the go message)"
    }
}

/// Our round: `n` SENDs at once, each with its sequence number (from
/// `sent`) and QP index in `pattern`, in its place of `sbuf`,
/// round-robin over the connections; then their completions.
#[allow(clippy::too_many_arguments)]
fn send_round(
    conns: &[(CmId, Qp<Rts>)],
    sbuf: &Arc<DmaBuf>,
    pattern: &mut [u8],
    sent: u32,
    n: u32,
    cfg: &Config,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result {
    let (t, size, qps) = (cfg.timeout_ms, cfg.size, cfg.qps);
    let mut wrs = KVec::with_capacity(n as usize, GFP_KERNEL)?;
    for k in 0..n {
        let seq = sent + k;
        let qi = seq % qps;
        pattern[0..4].copy_from_slice(&seq.to_le_bytes());
        pattern[4..8].copy_from_slice(&qi.to_le_bytes());
        let at = k as usize * size;
        sbuf.write(at, pattern)?;
        let qp = &conns[qi as usize].1;
        wrs.push(
            (qi, qp.post_send(SendOp::Send, sbuf, at, size, true)?),
            GFP_KERNEL,
        )?;
    }
    for (qi, id) in wrs.into_iter() {
        complete_wc(&conns[qi as usize].1, id, "SEND", t, cancel, rep)?;
    }
    Ok(())
}

/// The server's go of round `rounds` (`sent` messages in), received at
/// `at` of `gbuf`.
fn check_go(
    wc: &Wc,
    gbuf: &DmaBuf,
    at: usize,
    rounds: u32,
    sent: u32,
    size: usize,
    rep: &mut Report,
) -> Result {
    let mut go = [0u8; GO_LEN];
    gbuf.read(at, &mut go)?;
    if wc.result().is_err()
        || wc.byte_len as usize != GO_LEN
        || &go[..6] != GO_TAG
        || u32_at(&go, 8) != rounds
        || u32_at(&go, 12) != sent
    {
        let _ = writeln!(
            rep,
            "round {}: the go message is wrong ({}, {} bytes, round {}, {} received)",
            rounds,
            wc.status,
            wc.byte_len,
            u32_at(&go, 8),
            u32_at(&go, 12)
        );
        if wc.result().is_ok() && wc.byte_len as usize == size && &go[..6] != GO_TAG {
            let _ = writeln!(
                rep,
                "a reply of {} bytes without the go tag: does the server speak the manual's flow (flow=manual)?",
                size
            );
        }
        return Err(EIO);
    }
    Ok(())
}

/// The client's last lines: per QP, and the whole.
fn client_report(
    cfg: &Config,
    conns: &[(CmId, Qp<Rts>)],
    sent: u32,
    rounds: u32,
    rep: &mut Report,
) {
    let (size, qps, manual) = (cfg.size, cfg.qps, cfg.flow == Flow::Manual);
    for (i, (_, qp)) in conns.iter().enumerate() {
        let per = (cfg.count / qps) + u32::from((i as u32) < cfg.count % qps);
        let _ = writeln!(rep, "qp {:#x}: {} SENDs", qp.qp_num(), per);
    }
    if manual {
        let _ = writeln!(
            rep,
            "srq: ok: {} SENDs of {} bytes over {} QPs in {} rounds, the manual's flow: one at a time, {} replies of {} bytes on qp {:#x}",
            sent,
            size,
            qps,
            rounds,
            rounds,
            size,
            conns[0].1.qp_num()
        );
    } else {
        let _ = writeln!(
            rep,
            "srq: ok: {} SENDs of {} bytes over {} QPs in {} rounds, each acknowledged",
            sent, size, qps, rounds
        );
    }
}

fn client(dev: &Device, cfg: &Config, cancel: &Cancel, stats: &Stats, rep: &mut Report) -> Result {
    let t = cfg.timeout_ms;
    let (size, max_wr, qps) = (cfg.size, cfg.max_wr, cfg.qps);
    let events = CmEvents::new()?;
    let pd = Pd::new(dev)?;
    let manual = cfg.flow == Flow::Manual;
    let _ = writeln!(rep, "flow: {}", client_flow(manual));
    // The manual's client SENDs one message at a time from one buffer;
    // ours a round at once, each message in its place.
    let slots = if manual { 1 } else { max_wr as usize };
    let sbuf = Arc::new(DmaBuf::new(dev, slots * size)?, GFP_KERNEL)?;
    // A QP may take a whole round; the replies come to an SRQ of its own,
    // one receive per QP, each of `size` bytes (the manual's server
    // answers with a message of `size` bytes; ours with the go message).
    let per_qp = max_wr.div_ceil(qps);
    let rlen = size.max(GO_LEN);
    let scq = Cq::new(dev, qps * (per_qp + 1), PollCtx::Softirq)?;
    let rcq = Cq::new(dev, qps, PollCtx::Softirq)?;
    let gbuf = Arc::new(DmaBuf::new(dev, qps as usize * rlen)?, GFP_KERNEL)?;
    let gsrq = Srq::new(&pd, &rcq, qps, sges(&gbuf, qps, rlen))?;
    let mut go_ids: KVec<SrqWrId> = KVec::with_capacity(qps as usize, GFP_KERNEL)?;
    for j in 0..qps as usize {
        go_ids.push(gsrq.post_recv(&gbuf, j * rlen, rlen)?, GFP_KERNEL)?;
    }
    let caps = QpCaps {
        max_send_wr: per_qp,
        max_recv_wr: 0,
        max_sge: sges(&sbuf, slots as u32, size),
        ..Default::default()
    };
    let mut conns: KVec<(CmId, Qp<Rts>)> = KVec::with_capacity(qps as usize, GFP_KERNEL)?;
    for i in 0..qps {
        let conn = connect_conn(dev, cfg, &events, i, &pd, &scq, &gsrq, caps, cancel, rep)?;
        conns.push(conn, GFP_KERNEL)?;
    }

    let (mut sent, mut rounds, mut go_at) = (0u32, 0u32, 0usize);
    let mut pattern = KVec::from_elem(0u8, size, GFP_KERNEL)?;
    for (i, b) in pattern.iter_mut().enumerate().skip(HDR) {
        *b = (i as u8).wrapping_mul(7);
    }
    while sent < cfg.count {
        let n = max_wr.min(cfg.count - sent);
        if manual {
            send_one_at_a_time(&conns, &sbuf, sent, n, cfg, cancel, rep)?;
            add(&stats.send_msgs, n.into());
            add(&stats.send_bytes, u64::from(n) * size as u64);
            sent += n;
            rounds += 1;
            let wc = gsrq.wait(go_ids[go_at], t, cancel).inspect_err(|e| {
                let _ = writeln!(
                    rep,
                    "round {}: no reply from the server: error {}",
                    rounds,
                    e.to_errno()
                );
            })?;
            let first = conns[0].1.qp_num();
            if wc.result().is_err() || wc.byte_len as usize != size || wc.qp_num != first {
                let _ = writeln!(
                    rep,
                    "round {}: the reply is wrong ({}, {} bytes on qp {:#x}; want {} bytes on the first connection, qp {:#x})",
                    rounds, wc.status, wc.byte_len, wc.qp_num, size, first
                );
                return Err(EIO);
            }
            go_ids[go_at] = gsrq.post_recv(&gbuf, go_at * rlen, rlen)?;
            go_at = (go_at + 1) % qps as usize;
            continue;
        }
        send_round(&conns, &sbuf, &mut pattern, sent, n, cfg, cancel, rep)?;
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
        check_go(&wc, &gbuf, go_at * rlen, rounds, sent, size, rep)?;
        if rounds == 1 {
            let _ = writeln!(rep, "round 1: go on qp {:#x}", wc.qp_num);
        }
        go_ids[go_at] = gsrq.post_recv(&gbuf, go_at * rlen, rlen)?;
        go_at = (go_at + 1) % qps as usize;
    }
    client_report(cfg, &conns, sent, rounds, rep);
    for (id, _) in conns.iter() {
        let _ = id.disconnect();
    }
    Ok(())
}
