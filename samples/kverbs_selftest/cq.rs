// SPDX-License-Identifier: GPL-2.0

//! Cases of completion queues: a CQ of no entries refused, the room QPs
//! take in their CQ, a CQ freed right after its last completion.

use crate::common::{buf, caps, cq, ok, port, rc_self, refused, Env, Outcome, Text, TIMEOUT_MS};
use core::fmt::Write;
use kernel::prelude::*;
use kverbs::{
    cq::{Cq, PollCtx},
    pd::Pd,
    qp::{Cancel, Qp, QpCaps, SendOp},
};

pub(crate) fn qp_takes_cq_room(env: &Env, out: &mut Text) -> Outcome {
    // Refused by the layer: Linux 7.x's `__ib_alloc_cq` warns on it.
    refused(
        Cq::new(&env.a, 0, PollCtx::Softirq),
        EINVAL,
        "CQ of no entries",
        out,
    )?;
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let cq = ok(Cq::new(&env.a, 8, PollCtx::Softirq), "CQ", out)?;
    let room = cq.room();
    let _ = write!(out, "CQ of 8 has {} entries; ", room);
    if room < 4 {
        return Err("CQ too small");
    }
    let p = port(&env.a);
    // Each queue takes its size plus one (the drain's marker).
    let over = QpCaps {
        max_send_wr: room - 2,
        max_recv_wr: 1,
        ..Default::default()
    };
    refused(
        Qp::new_rc(&pd, p, &cq, &cq, over),
        EINVAL,
        "QP one entry over",
        out,
    )?;
    let exact = QpCaps {
        max_send_wr: room - 3,
        max_recv_wr: 1,
        ..Default::default()
    };
    let qp = ok(
        Qp::new_rc(&pd, p, &cq, &cq, exact),
        "QP that fits exactly",
        out,
    )?;
    refused(
        Qp::new_rc(&pd, p, &cq, &cq, caps(1)),
        EINVAL,
        "second QP on a full CQ",
        out,
    )?;
    drop(qp);
    if cq.room() != room {
        let _ = write!(out, "room {} after the QP went, want {}", cq.room(), room);
        return Err("room not given back");
    }
    Ok(())
}

/// The pattern that freed a CQ under its softirq poll (ib_poll_handler's
/// re-arm after irq_poll_complete, found by `make stress`): the completion
/// that ends a wait is the last the CQ sees, and the CQ is freed at once,
/// while the poll that delivered it may still be running. 200 times.
pub(crate) fn softirq_cq_freed_right_after_its_last_completion(
    env: &Env,
    out: &mut Text,
) -> Outcome {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let a = ok(buf(&env.a), "buffer", out)?;
    let c = Cancel::new();
    for _ in 0..200 {
        let cq = ok(cq(&env.a), "CQ", out)?;
        let qp = ok(rc_self(&pd, &cq), "QP", out)?;
        let r = ok(qp.post_recv(&a, 1024, 64), "receive", out)?;
        let s = ok(qp.post_send(SendOp::Send, &a, 0, 64, true), "SEND", out)?;
        ok(qp.wait(s, TIMEOUT_MS, &c), "SEND completion", out)?;
        ok(qp.wait(r, TIMEOUT_MS, &c), "receive completion", out)?;
        // The QP's drain ends on its markers' completions; the CQ goes
        // right after.
        drop(qp);
        drop(cq);
    }
    Ok(())
}
