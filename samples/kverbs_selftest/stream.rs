// SPDX-License-Identifier: GPL-2.0

//! Cases of send streams: what an inline stream takes, the send slots a
//! stream holds, a stream dropped with requests outstanding.

use crate::common::{ok, refused, seg, Env, Outcome, SelfLoop, Text, TIMEOUT_MS};
use core::fmt::Write;
use kernel::prelude::*;
use kverbs::{
    qp::{Cancel, SendOp},
    stream::{RecvStream, SendStream},
};

/// An inline stream takes only SENDs and WRITEs the QP can carry inline.
pub(crate) fn stream_inline_refuses_read_and_oversize(env: &Env, out: &mut Text) -> Outcome {
    let lp = SelfLoop::new(&env.a, out)?;
    let (qp, a) = (&lp.qp, &lp.buf);
    let max = qp.max_inline_data() as usize;
    let _ = write!(out, "max inline {}; ", max);
    let remote = kverbs::qp::RemoteBuf::default();
    refused(
        SendStream::new_inline(qp, &[(SendOp::Read(remote), seg(a, 8))], 1, 1),
        EINVAL,
        "inline RDMA READ",
        out,
    )?;
    refused(
        SendStream::new_inline(qp, &[(SendOp::Send, seg(a, max + 1))], 1, 1),
        EINVAL,
        "inline SEND of max_inline_data + 1 bytes",
        out,
    )?;
    let s = ok(
        SendStream::new_inline(qp, &[(SendOp::Send, seg(a, max))], 1, 1),
        "inline SEND of max_inline_data bytes",
        out,
    )?;
    drop(s);
    Ok(())
}

/// A stream takes `depth` of its QP's send slots, and gives them back
/// when dropped with nothing outstanding. A depth beyond the QP's slots is
/// refused (`ENOSPC`) before anything is allocated for it: a million
/// requests' ring would be an allocation the page allocator warns of.
pub(crate) fn stream_takes_slots_and_gives_them_back(env: &Env, out: &mut Text) -> Outcome {
    let lp = SelfLoop::new(&env.a, out)?;
    let (qp, a) = (&lp.qp, &lp.buf);
    let c = Cancel::new();
    refused(
        SendStream::new(qp, &[(SendOp::Send, seg(a, 64))], 1 << 20, 1),
        ENOSPC,
        "a send stream of 2^20 requests",
        out,
    )?;
    refused(
        RecvStream::new(qp, &[seg(a, 64)], 1 << 20),
        ENOSPC,
        "a receive stream of 2^20 requests",
        out,
    )?;
    let s = ok(
        SendStream::new(qp, &[(SendOp::Send, seg(a, 64))], 4, 1),
        "stream of 4 (all the QP's send slots)",
        out,
    )?;
    refused(
        qp.post_send(SendOp::Send, a, 0, 64, true),
        ENOSPC,
        "post_send beside a stream holding every slot",
        out,
    )?;
    refused(
        SendStream::new(qp, &[(SendOp::Send, seg(a, 64))], 1, 1),
        ENOSPC,
        "a second stream",
        out,
    )?;
    drop(s);
    // The slots are back: a receive for it, then a send.
    let r = ok(qp.post_recv(a, 1024, 64), "receive", out)?;
    let id = ok(
        qp.post_send(SendOp::Send, a, 0, 64, true),
        "post_send after the stream",
        out,
    )?;
    ok(qp.wait(id, TIMEOUT_MS, &c), "SEND completion", out)?;
    ok(qp.wait(r, TIMEOUT_MS, &c), "receive completion", out)?;
    Ok(())
}

/// A stream dropped with requests outstanding (SENDs to a QP with no
/// receive: RNR, retried for ever) leaves them, its CQEs and its buffers
/// to its QP, which flushes them when dropped: the completions reach
/// memory the QP kept (KASAN would report otherwise), and everything is
/// freed then (kmemleak would report otherwise). (Forgetting the stream
/// instead is as sound, and leaks only its ring: the QP releases the
/// buffers, and their device references, when it is destroyed.)
pub(crate) fn stream_dropped_with_requests_outstanding(env: &Env, out: &mut Text) -> Outcome {
    let lp = SelfLoop::new(&env.a, out)?;
    let (qp, a) = (&lp.qp, &lp.buf);
    let mut s = ok(
        SendStream::new(qp, &[(SendOp::Send, seg(a, 64))], 4, 2),
        "stream",
        out,
    )?;
    let n = ok(s.post(4, true), "post 4 SENDs", out)?;
    kverbs::msleep(50);
    let done = s.completed();
    let _ = write!(out, "posted {}, done {}; ", n, done);
    if n != 4 || done != 0 {
        return Err("the SENDs should wait for a receive");
    }
    drop(s);
    drop(lp.buf);
    drop(lp.qp);
    Ok(())
}
