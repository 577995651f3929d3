// SPDX-License-Identifier: GPL-2.0

//! Cases of the connection manager: one QP per ID, a QP of another ID,
//! the events of destroyed IDs.

use crate::common::{caps, ok, pd_cq, refused, Env, Outcome, Text, TIMEOUT_MS};
use core::fmt::Write;
use kernel::prelude::*;
use kverbs::{
    cm::{CmEvents, CmId},
    cq::Cq,
    pd::Pd,
    qp::{Access, Cancel, InitAttr, Qp},
};

/// A connection manager ID with its address and route resolved to
/// `env.ip` (of device `B`), its PD and CQ.
fn cm_resolved(env: &Env, events: &CmEvents, out: &mut Text) -> Outcome<(CmId, Pd, Cq)> {
    let id = ok(CmId::new(events), "CM ID", out)?;
    let c = Cancel::new();
    ok(id.resolve(env.ip, 7999, TIMEOUT_MS, &c), "resolve", out)?;
    let dev = id.device().ok_or("no device after resolve")?;
    let (pd, cq) = pd_cq(dev, out)?;
    Ok((id, pd, cq))
}

pub(crate) fn cm_id_takes_one_qp(env: &Env, out: &mut Text) -> Outcome {
    let events = ok(CmEvents::new(), "events", out)?;
    let (id, pd, cq) = cm_resolved(env, &events, out)?;
    let qp = ok(Qp::new_cm(&id, &pd, &cq, &cq, caps(2)), "first QP", out)?;
    refused(
        Qp::new_cm(&id, &pd, &cq, &cq, caps(2)),
        EBUSY,
        "second QP on the ID",
        out,
    )?;
    drop(qp);
    ok(
        Qp::new_cm(&id, &pd, &cq, &cq, caps(2)),
        "a QP after the first went",
        out,
    )?;
    Ok(())
}

pub(crate) fn cm_connect_refuses_qp_of_other_id(env: &Env, out: &mut Text) -> Outcome {
    let events = ok(CmEvents::new(), "events", out)?;
    let (id1, pd, cq) = cm_resolved(env, &events, out)?;
    let (id2, _, _) = cm_resolved(env, &events, out)?;
    let qp1 = ok(Qp::new_cm(&id1, &pd, &cq, &cq, caps(2)), "QP of ID 1", out)?;
    let c = Cancel::new();
    refused(
        id2.connect(qp1, TIMEOUT_MS, &c),
        EINVAL,
        "ID 2 connecting with ID 1's QP",
        out,
    )?;
    let init = InitAttr {
        pkey_index: 0,
        access: Access::LOCAL_WRITE,
    };
    let plain = ok(
        Qp::new_rc(&pd, id1.port_num(), &cq, &cq, caps(2)).and_then(|q| q.to_init(&init)),
        "QP of no ID",
        out,
    )?;
    refused(
        id1.accept(plain, TIMEOUT_MS, &c),
        EINVAL,
        "accept with a QP of no ID",
        out,
    )
}

/// An rdma_cm ID's events leave the queue when taken, and those not taken
/// when the ID is destroyed: none is left for an ID created later at the
/// same address, and the queue does not grow.
pub(crate) fn cm_events_of_destroyed_id_dropped(env: &Env, out: &mut Text) -> Outcome {
    let events = ok(CmEvents::new(), "events", out)?;
    // Resolved: its two events were taken.
    let (id, _, _) = cm_resolved(env, &events, out)?;
    if events.queued() != 0 {
        let _ = write!(out, "{} events queued after a resolve", events.queued());
        return Err("taken events left in the queue");
    }
    drop(id);
    // A resolve given up at once: its ADDR_RESOLVED comes and is not taken.
    let id = ok(CmId::new(&events), "CM ID", out)?;
    let cancelled = Cancel::new();
    cancelled.cancel();
    refused(
        id.resolve(env.ip, 7999, TIMEOUT_MS, &cancelled),
        kverbs::errno::ecanceled(),
        "cancelled resolve",
        out,
    )?;
    let start = kverbs::now_ns();
    while events.queued() == 0 && kverbs::now_ns() - start < 2_000_000_000 {
        kverbs::msleep(10);
    }
    if events.queued() != 1 {
        let _ = write!(
            out,
            "{} events queued, want the ADDR_RESOLVED",
            events.queued()
        );
        return Err("no event");
    }
    drop(id);
    if events.queued() != 0 {
        let _ = write!(out, "{} events of a destroyed ID left", events.queued());
        return Err("events of a destroyed ID left");
    }
    Ok(())
}
