// SPDX-License-Identifier: GPL-2.0

//! Cases of queue pairs: objects of another device or PD, ports the
//! device does not have, work request ids of another QP or already
//! released, alternate paths where paths do not migrate.

use crate::common::{
    av, buf, caps, cq, first_gid, ok, pd_cq, port, rc_pair, rc_self, refused, ud_rts, Env, Outcome,
    SelfLoop, Text, QKEY, TIMEOUT_MS,
};
use core::fmt::Write;
use kernel::prelude::*;
use kverbs::{
    ah::Ah,
    pd::Pd,
    qp::{Access, Cancel, InitAttr, Qp, SendOp, UdDest},
};

pub(crate) fn qp_refuses_cq_of_other_device(env: &Env, out: &mut Text) -> Outcome {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let cq_b = ok(cq(&env.b), "CQ of B", out)?;
    let cq_a = ok(cq(&env.a), "CQ of A", out)?;
    let p = port(&env.a);
    refused(
        Qp::new_rc(&pd, p, &cq_b, &cq_b, caps(2)),
        EINVAL,
        "QP of A, CQs of B",
        out,
    )?;
    refused(
        Qp::new_ud(&pd, p, &cq_a, &cq_b, caps(2)),
        EINVAL,
        "UD QP of A, recv CQ of B",
        out,
    )
}

pub(crate) fn qp_refuses_port_out_of_range(env: &Env, out: &mut Text) -> Outcome {
    let (pd, cq) = pd_cq(&env.a, out)?;
    let past = *env.a.ports().end() + 1;
    refused(
        Qp::new_rc(&pd, 0, &cq, &cq, caps(2)),
        EINVAL,
        "RC QP on port 0",
        out,
    )?;
    refused(
        Qp::new_ud(&pd, past, &cq, &cq, caps(2)),
        EINVAL,
        "UD QP past the last port",
        out,
    )?;
    refused(
        Qp::new_rc(&pd, u32::MAX, &cq, &cq, caps(2)),
        EINVAL,
        "RC QP on port 2^32-1",
        out,
    )
}

pub(crate) fn post_recv_refuses_buffer_of_other_device(env: &Env, out: &mut Text) -> Outcome {
    let (pd, cq) = pd_cq(&env.a, out)?;
    let qp = ok(Qp::new_rc(&pd, port(&env.a), &cq, &cq, caps(2)), "QP", out)?;
    let qp = ok(
        qp.to_init(&InitAttr {
            pkey_index: 0,
            access: Access::LOCAL_WRITE,
        }),
        "INIT",
        out,
    )?;
    let b = ok(buf(&env.b), "buffer of B", out)?;
    refused(
        qp.post_recv(&b, 0, 64),
        EINVAL,
        "receive into a buffer of B",
        out,
    )
}

pub(crate) fn post_send_refuses_buffer_of_other_device(env: &Env, out: &mut Text) -> Outcome {
    let (pd, cq) = pd_cq(&env.a, out)?;
    let qp = ok(rc_self(&pd, &cq), "RC QP in RTS", out)?;
    let b = ok(buf(&env.b), "buffer of B", out)?;
    refused(
        qp.post_send(SendOp::Send, &b, 0, 64, true),
        EINVAL,
        "SEND of a buffer of B",
        out,
    )?;
    let ud = ok(ud_rts(&pd, &cq), "UD QP in RTS", out)?;
    let (i, gid) = first_gid(&env.a).ok_or("no GID")?;
    let dest = UdDest {
        ah: ok(Ah::new(&pd, port(&env.a), &av(gid, i)), "AH", out)?,
        qpn: ud.qp_num(),
        qkey: QKEY,
    };
    refused(
        ud.post_send_ud(None, &b, 0, 64, &dest, true),
        EINVAL,
        "UD SEND of a buffer of B",
        out,
    )
}

pub(crate) fn post_send_ud_refuses_ah_of_other_pd(env: &Env, out: &mut Text) -> Outcome {
    let pd1 = ok(Pd::new(&env.a), "PD 1", out)?;
    let pd2 = ok(Pd::new(&env.a), "PD 2", out)?;
    let cq = ok(cq(&env.a), "CQ", out)?;
    let qp = ok(ud_rts(&pd1, &cq), "UD QP in RTS", out)?;
    let (i, gid) = first_gid(&env.a).ok_or("no GID")?;
    let dest = UdDest {
        ah: ok(Ah::new(&pd2, port(&env.a), &av(gid, i)), "AH of PD 2", out)?,
        qpn: qp.qp_num(),
        qkey: QKEY,
    };
    let a = ok(buf(&env.a), "buffer", out)?;
    refused(
        qp.post_send_ud(None, &a, 0, 64, &dest, true),
        EINVAL,
        "UD SEND with an AH of another PD",
        out,
    )
}

pub(crate) fn wait_refuses_request_of_other_qp(env: &Env, out: &mut Text) -> Outcome {
    let (pd, cq) = pd_cq(&env.a, out)?;
    let init = InitAttr {
        pkey_index: 0,
        access: Access::LOCAL_WRITE,
    };
    let p = port(&env.a);
    let qp1 = ok(
        Qp::new_rc(&pd, p, &cq, &cq, caps(2)).and_then(|q| q.to_init(&init)),
        "QP 1",
        out,
    )?;
    let qp2 = ok(
        Qp::new_rc(&pd, p, &cq, &cq, caps(2)).and_then(|q| q.to_init(&init)),
        "QP 2",
        out,
    )?;
    let a = ok(buf(&env.a), "buffer", out)?;
    let id = ok(qp1.post_recv(&a, 0, 64), "receive on QP 1", out)?;
    let c = Cancel::new();
    refused(
        qp2.wait(id, 10, &c),
        EINVAL,
        "QP 2 waiting for QP 1's receive",
        out,
    )
}

pub(crate) fn wait_refuses_released_unsignalled_send(env: &Env, out: &mut Text) -> Outcome {
    let lp = SelfLoop::new(&env.a, out)?;
    let (qp, a) = (&lp.qp, &lp.buf);
    let c = Cancel::new();
    let r1 = ok(qp.post_recv(a, 1024, 64), "receive 1", out)?;
    let r2 = ok(qp.post_recv(a, 2048, 64), "receive 2", out)?;
    let quiet = ok(
        qp.post_send(SendOp::Send, a, 0, 64, false),
        "unsignalled SEND",
        out,
    )?;
    let loud = ok(
        qp.post_send(SendOp::Send, a, 0, 64, true),
        "signalled SEND",
        out,
    )?;
    let wc = ok(
        qp.wait(loud, TIMEOUT_MS, &c),
        "signalled SEND completion",
        out,
    )?;
    if wc.result().is_err() {
        let _ = write!(out, "SEND: {}", wc.status);
        return Err("SEND failed");
    }
    // Released with the signalled send: its slot may be another's now.
    refused(
        qp.wait(quiet, 10, &c),
        EINVAL,
        "wait for a released unsignalled SEND",
        out,
    )?;
    ok(qp.wait(r1, TIMEOUT_MS, &c), "receive 1 completion", out)?;
    ok(qp.wait(r2, TIMEOUT_MS, &c), "receive 2 completion", out)?;
    Ok(())
}

/// An alternate path is loaded only where paths migrate (the device says
/// so and the port is InfiniBand): elsewhere (rxe: RoCE, though it
/// advertises migration) loading one (the QP's own path, as apm.c does)
/// and migrating are refused with EOPNOTSUPP before the verbs are called,
/// and the QP is untouched (a SEND still goes through); where they do,
/// the path is loaded and the QP's state is REARM or ARMED. Which of the
/// two is expected is read from the port's link layer and the device's
/// flag, not from `path_mig_supported`, the function under test: on a
/// RoCE port (every rxe device) the refusal is required.
pub(crate) fn alt_path_needs_auto_path_mig(env: &Env, out: &mut Text) -> Outcome {
    use kverbs::{
        device::LinkLayer,
        qp::{AltPath, MigState},
    };
    let dev = &env.a;
    let c = Cancel::new();
    let pd = ok(Pd::new(dev), "PD", out)?;
    let (a, b, _ca, _cb) = ok(rc_pair(&pd), "pair", out)?;
    let alt = AltPath {
        av: ok(a.path(), "path", out)?,
        port: a.port(),
        pkey_index: 0,
        timeout: 0x12,
    };
    let migrates = dev.link_layer(a.port()) == LinkLayer::InfiniBand && dev.attrs().auto_path_mig();
    let supported = kverbs::qp::path_mig_supported(dev, a.port());
    if supported.is_ok() != migrates {
        let _ = write!(
            out,
            "{} port, AUTO_PATH_MIG {}: path_mig_supported says {}",
            dev.link_layer(a.port()).name(),
            dev.attrs().auto_path_mig(),
            if supported.is_ok() { "yes" } else { "no" }
        );
        return Err("path_mig_supported disagrees with the port and device");
    }
    if !migrates {
        refused(
            supported,
            kverbs::errno::eopnotsupp(),
            "path_mig_supported",
            out,
        )?;
        refused(
            a.load_alt_path(&alt),
            kverbs::errno::eopnotsupp(),
            "load_alt_path",
            out,
        )?;
        refused(a.migrate(), kverbs::errno::eopnotsupp(), "migrate", out)?;
        let rbuf = ok(buf(dev), "receive buffer", out)?;
        let sbuf = ok(buf(dev), "send buffer", out)?;
        let r = ok(b.post_recv(&rbuf, 0, 64), "receive", out)?;
        let sid = ok(a.post_send(SendOp::Send, &sbuf, 0, 64, true), "SEND", out)?;
        ok(a.wait(sid, TIMEOUT_MS, &c), "SEND completion", out)?;
        let wc = ok(b.wait(r, TIMEOUT_MS, &c), "receive completion", out)?;
        if wc.result().is_err() {
            return Err("the QP was touched by the refused path load");
        }
        let _ = write!(
            out,
            "AUTO_PATH_MIG {}, {}: refused, the QP still works",
            dev.attrs().auto_path_mig(),
            dev.link_layer(a.port()).name()
        );
        return Ok(());
    }
    ok(a.load_alt_path(&alt), "load_alt_path", out)?;
    let st = ok(a.mig_state(), "mig_state", out)?;
    let _ = write!(out, "alternate path loaded: {:?}", st);
    if st == MigState::Migrated {
        return Err("a loaded alternate path is neither REARM nor ARMED");
    }
    Ok(())
}
