// SPDX-License-Identifier: GPL-2.0

//! Cases of shared receive queues: one SRQ serving two QPs, its limit
//! event, what it refuses.

use crate::common::{
    buf, caps, connect_pair, cq, ok, port, refused, srq_with_sink, Env, Outcome, Text, TIMEOUT_MS,
};
use core::{
    fmt::Write,
    sync::atomic::{AtomicU32, Ordering},
};
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    dma::DmaBuf,
    event::{Event, EventKind, EventSink},
    pd::Pd,
    qp::{Access, Cancel, Qp, Rts, SendOp},
    srq::{Srq, SrqWrId},
};

/// Counts the SRQ limit events it is given.
struct LimitEvents(AtomicU32);

impl EventSink for LimitEvents {
    fn event(&self, ev: &Event) {
        if ev.kind() == EventKind::SrqLimitReached {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Waits for the first five receives of `ids`, posted on `srq` into
/// `rbuf`, each of which must hold its SEND's tag, in order; counts those
/// that came in on `r1` and on `r2`.
fn received_on(
    srq: &Srq,
    ids: &[SrqWrId],
    rbuf: &DmaBuf,
    (r1, r2): (&Qp<Rts>, &Qp<Rts>),
    out: &mut Text,
) -> Outcome<(u32, u32)> {
    let c = Cancel::new();
    let (mut on1, mut on2) = (0, 0);
    for (i, id) in ids.iter().take(5).enumerate() {
        let wc = ok(srq.wait(*id, TIMEOUT_MS, &c), "SRQ completion", out)?;
        let mut tag = [0u8];
        ok(rbuf.read(i * 64, &mut tag), "read", out)?;
        if wc.result().is_err() || wc.byte_len != 64 || tag[0] != i as u8 + 1 {
            let _ = write!(
                out,
                "receive {}: {} {} bytes tag {}; ",
                i, wc.status, wc.byte_len, tag[0]
            );
            return Err("an SRQ receive did not get its SEND, in order");
        }
        if wc.qp_num == r1.qp_num() {
            on1 += 1;
        } else if wc.qp_num == r2.qp_num() {
            on2 += 1;
        } else {
            let _ = write!(out, "receive {}: qp_num {:#x}; ", i, wc.qp_num);
            return Err("an SRQ completion named neither QP");
        }
    }
    Ok((on1, on2))
}

/// A shared receive queue serves two QPs: SENDs on both land in its
/// receives, in the order posted, and each completion names the QP it came
/// in on; the armed limit raises its event once fewer receives remain; a
/// QP of the SRQ refuses receives of its own, a QP of another PD or an
/// out-of-range limit is refused. The SRQ handle is dropped before its QPs,
/// which keep it alive (KASAN and kmemleak watch the teardown).
pub(crate) fn srq_shared_by_two_qps(env: &Env, out: &mut Text) -> Outcome {
    let dev = &env.a;
    let c = Cancel::new();
    let pd = ok(Pd::new(dev), "PD", out)?;
    let scq = ok(cq(dev), "send CQ", out)?;
    let rcq = ok(cq(dev), "SRQ CQ", out)?;
    let sink = Arc::new(LimitEvents(AtomicU32::new(0)), GFP_KERNEL).map_err(Error::from);
    let (sink, srq) = srq_with_sink(&pd, &rcq, sink, out)?;
    refused(srq.arm_limit(0), EINVAL, "limit 0", out)?;
    refused(srq.arm_limit(8), EINVAL, "limit max_wr", out)?;
    let other_pd = ok(Pd::new(dev), "PD 2", out)?;
    refused(
        Qp::new_rc_srq(&other_pd, port(dev), &scq, &srq, caps(4), None),
        EINVAL,
        "QP of another PD",
        out,
    )?;
    let mk = |srq: Option<&Srq>| match srq {
        Some(srq) => Qp::new_rc_srq(&pd, port(dev), &scq, srq, caps(4), None),
        None => Qp::new_rc(&pd, port(dev), &scq, &scq, caps(4)),
    };
    let (s1, r1) = ok(
        mk(None).and_then(|a| connect_pair(dev, a, mk(Some(&srq))?, Access::LOCAL_WRITE)),
        "pair 1",
        out,
    )?;
    let (s2, r2) = ok(
        mk(None).and_then(|a| connect_pair(dev, a, mk(Some(&srq))?, Access::LOCAL_WRITE)),
        "pair 2",
        out,
    )?;
    let rbuf = ok(buf(dev), "receive buffer", out)?;
    let sbuf = ok(buf(dev), "send buffer", out)?;
    refused(
        r1.post_recv(&rbuf, 0, 64),
        EINVAL,
        "receive on a QP of an SRQ",
        out,
    )?;
    let mut ids = KVec::new();
    for i in 0..8 {
        let id = ok(srq.post_recv(&rbuf, i * 64, 64), "SRQ receive", out)?;
        ok(ids.push(id, GFP_KERNEL).map_err(Error::from), "ids", out)?;
    }
    refused(
        srq.post_recv(&rbuf, 512, 64),
        ENOSPC,
        "a ninth receive",
        out,
    )?;
    ok(srq.arm_limit(4), "arm limit 4", out)?;
    // Three SENDs on pair 1, two on pair 2, each tagged.
    for (i, qp) in [&s1, &s1, &s2, &s1, &s2].into_iter().enumerate() {
        ok(sbuf.write(i * 64, &[i as u8 + 1; 64]), "tag", out)?;
        let id = ok(
            qp.post_send(SendOp::Send, &sbuf, i * 64, 64, true),
            "SEND",
            out,
        )?;
        let st = ok(qp.wait(id, TIMEOUT_MS, &c), "SEND completion", out)?.status;
        if st != kverbs::wc::WcStatus::Success {
            let _ = write!(out, "SEND {}: {}; ", i, st);
            return Err("a SEND to a QP of the SRQ failed");
        }
    }
    let (on1, on2) = received_on(&srq, &ids, &rbuf, (&r1, &r2), out)?;
    let _ = write!(
        out,
        "QP {:#x}: {} receives, QP {:#x}: {}; ",
        r1.qp_num(),
        on1,
        r2.qp_num(),
        on2
    );
    if (on1, on2) != (3, 2) {
        return Err("the receives were not counted on the QPs that got them");
    }
    for _ in 0..50 {
        if sink.0.load(Ordering::Relaxed) > 0 {
            break;
        }
        kverbs::msleep(20);
    }
    let limit = sink.0.load(Ordering::Relaxed);
    let _ = write!(out, "limit events: {}", limit);
    if limit != 1 {
        return Err("the armed SRQ limit did not raise exactly one event");
    }
    // The handle goes first; the QPs keep the SRQ until they are destroyed.
    drop(srq);
    drop((r1, r2, s1, s2));
    Ok(())
}
