// SPDX-License-Identifier: GPL-2.0

//! Cases of the connection manager: one QP per ID, a QP of another ID,
//! the events of destroyed IDs, a listener held until its device goes.

use crate::common::{caps, ok, pd_cq, refused, Env, Held, Outcome, Text, TIMEOUT_MS};
use core::fmt::Write;
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    cm::{CmEvent, CmEventKind, CmEvents, CmId, CmSink},
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

/// The sink of the held listener: on its device's removal, it drops it.
struct DropOnRemoval {
    held: Arc<Held>,
}

impl CmSink for DropOnRemoval {
    fn event(&self, ev: &CmEvent) {
        let id = {
            let mut held = self.held.listener.lock();
            let removed = match (ev.kind(), &*held) {
                (CmEventKind::DeviceRemoval, Some(id)) => ev.is_of(id),
                // The removal may be among the events lost: ask the ID.
                (CmEventKind::EventsLost, Some(id)) => id.device_removed(),
                _ => false,
            };
            if removed {
                held.take()
            } else {
                None
            }
        };
        if let Some(id) = id {
            // The last handle of the ID and of its queue: the ID is
            // destroyed here, and the removal, waiting for it, goes on.
            drop(id);
            pr_info!("selftest: device removal: the held listener was dropped\n");
        }
    }
}

/// An rdma_cm listener on `B`, held after the case returns with nobody
/// waiting on it, like a ULP's listener between connections. The removal
/// of its device waits until it is destroyed (`cma_process_remove`): its
/// sink, told of the removal, drops it. kverbs_soundness.sh then removes
/// `B`, which must end.
pub(crate) fn cm_listener_dropped_by_its_removal_sink(env: &Env, out: &mut Text) -> Outcome {
    let sink = ok(
        Arc::new(
            DropOnRemoval {
                held: env.held.clone(),
            },
            GFP_KERNEL,
        )
        .map_err(Error::from),
        "sink",
        out,
    )?;
    let events = ok(CmEvents::with_sink(1, sink), "events", out)?;
    let id = ok(CmId::new(&events), "CM ID", out)?;
    ok(id.listen(env.ip, 7998), "listen", out)?;
    let dev = id.device().ok_or("no device after listen")?;
    if !dev.same_as(&env.b) {
        let _ = write!(out, "listening on {}", dev.name());
        return Err("the listener is not on B");
    }
    let _ = write!(out, "held: a listener on {}", dev.name());
    // A listener held before (by an earlier run of this case) goes.
    let old = env.held.listener.lock().replace(id);
    drop(old);
    Ok(())
}
