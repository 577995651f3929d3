// SPDX-License-Identifier: GPL-2.0

//! The SRQ example's server: one SRQ for the receives of every connection.

use super::config::{Config, Flow};
use super::proto::{go_message, sges, u32_at, GO_LEN, HDR};
use crate::conn::{cm_listen, cm_on_device, complete_wc};
use crate::control::Run;
use crate::events::EventLog;
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
    wc::Wc,
};

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

/// One connection of the server: its ID, QP, and what came in on it.
struct ServerConn {
    id: CmId,
    qp: Qp<Rts>,
    received: u32,
    /// The next sequence number expected on it, at least.
    next: u32,
}

/// The server: its SRQ, then `qps` connections, then the rounds.
pub(super) fn server(log: &Arc<EventLog>, cfg: &Config, ctx: Run<'_>) -> Result {
    let (dev, cancel, stats, rep) = (ctx.dev, ctx.cancel, ctx.stats, ctx.rep);
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
            log: log.clone(),
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
