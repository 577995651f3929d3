// SPDX-License-Identifier: GPL-2.0

//! The SRQ example's client: `qps` connections, the messages round-robin
//! over them, the replies to an SRQ of its own.

use super::config::{Config, Flow};
use super::proto::{sges, u32_at, GO_LEN, GO_TAG, HDR};
use crate::conn::{cm_on_device, complete_wc};
use crate::control::Run;
use crate::report::Report;
use crate::stats::add;
use core::fmt::Write;
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    cm::{CmEvents, CmId},
    cq::{Cq, PollCtx},
    device::Device,
    dma::DmaBuf,
    pd::Pd,
    qp::{Cancel, Qp, QpCaps, Rts, SendOp},
    srq::{Srq, SrqWrId},
    wc::Wc,
};

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
        let id = qp.post_send(SendOp::Send, sbuf, 0, size, true)?;
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

pub(super) fn client(cfg: &Config, ctx: Run<'_>) -> Result {
    let (dev, cancel, stats, rep) = (ctx.dev, ctx.cancel, ctx.stats, ctx.rep);
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
