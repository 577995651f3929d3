// SPDX-License-Identifier: GPL-2.0

//! Cases of the connection manager: one QP per ID, a QP of another ID,
//! the events of destroyed IDs, a listener held until its device goes.

use crate::common::{
    caps, cq, ok, pd_cq, refused, wait_until, Env, Held, Outcome, Text, TIMEOUT_MS,
};
use core::{
    fmt::Write,
    sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering},
};
use kernel::{prelude::*, sync::Arc, workqueue};
use kverbs::{
    cm::{CmEvent, CmEventKind, CmEvents, CmId, CmSink, ConnParam},
    cq::Cq,
    device::Device,
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

/// The port of `cm_private_data_both_ways_and_consumer_rejection`.
const PRIVATE_PORT: u16 = 7997;
/// What its client sends with its two requests, and what the server
/// answers: a rejection, then a reply.
const REQ1: &[u8] = b"kverbs request 1";
const REQ2: &[u8] = b"kverbs request 2";
const REJ1: &[u8] = b"no: 1";
const REP2: &[u8] = b"kverbs reply 2";

/// What the client of `cm_private_data_both_ways_and_consumer_rejection`
/// saw: each a step it reached, or a failure's errno.
struct PrivateClient {
    ip: kverbs::tcp::Ipv4,
    /// The first connect's errno (want `ECONNREFUSED`).
    refused: AtomicI32,
    /// Its rejection's reason (want 28, consumer defined).
    reason: AtomicI32,
    /// Its rejection carried the server's data.
    rej_data: AtomicBool,
    /// The second connect's errno (want 0).
    connected: AtomicI32,
    /// Its reply carried the server's data.
    rep_data: AtomicBool,
    /// Steps done (2: both connects).
    done: AtomicU32,
}

/// Connects with `data`: the error and rejection, or the reply's data.
fn private_connect(
    cl: &PrivateClient,
    data: &[u8],
) -> core::result::Result<kverbs::cm::PrivateData, kverbs::cm::ConnectError> {
    let c = Cancel::new();
    let events = CmEvents::new()?;
    let id = CmId::new(&events)?;
    id.resolve(cl.ip, PRIVATE_PORT, TIMEOUT_MS, &c)?;
    let dev: &Device = id.device().ok_or(ENODEV)?;
    let pd = Pd::new(dev)?;
    let cq = cq(dev)?;
    let qp = Qp::new_cm(&id, &pd, &cq, &cq, caps(2))?;
    let param = ConnParam {
        private_data: data,
        ..ConnParam::default()
    };
    let (_qp, reply) = id.connect_with(qp, &param, TIMEOUT_MS, &c)?;
    Ok(reply)
}

fn private_client(cl: &PrivateClient) {
    match private_connect(cl, REQ1) {
        Ok(_) => cl.refused.store(0, Ordering::Release),
        Err(e) => {
            if let Some(r) = e.rejection {
                cl.reason.store(r.reason, Ordering::Release);
                let data = r.consumer_data.map(|d| d.as_bytes().starts_with(REJ1));
                cl.rej_data.store(data == Some(true), Ordering::Release);
            }
            cl.refused.store(e.error.to_errno(), Ordering::Release);
        }
    }
    cl.done.fetch_add(1, Ordering::AcqRel);
    match private_connect(cl, REQ2) {
        Ok(reply) => {
            cl.rep_data
                .store(reply.as_bytes().starts_with(REP2), Ordering::Release);
            cl.connected.store(0, Ordering::Release);
        }
        Err(e) => cl.connected.store(e.error.to_errno(), Ordering::Release),
    }
    cl.done.fetch_add(1, Ordering::AcqRel);
}

/// Waits until the client's two connects have ended, each within three
/// waits of `TIMEOUT_MS` (address, route, connection), and some more;
/// whether they did.
fn client_done(cl: &PrivateClient) -> bool {
    wait_until(8 * u64::from(TIMEOUT_MS), || {
        cl.done.load(Ordering::Acquire) >= 2
    })
}

/// Private data goes with a connection request, a consumer-defined
/// rejection and a reply, each seen by the other side as sent (over RoCE
/// padded with zeroes to the message's size): the client's first request
/// is rejected with data, its second accepted with data. What a ULP's
/// wire protocol needs (NVMe over RDMA: the queue's number and sizes in
/// the request, the target's status in a rejection).
pub(crate) fn cm_private_data_both_ways_and_consumer_rejection(
    env: &Env,
    out: &mut Text,
) -> Outcome {
    let c = Cancel::new();
    // Two: the second request may come before the rejected ID has gone
    // (with one, the handler would refuse it: a rejection without data).
    let events = ok(CmEvents::with_requests(2), "events", out)?;
    let listener = ok(CmId::new(&events), "listener", out)?;
    ok(listener.listen(env.ip, PRIVATE_PORT), "listen", out)?;
    let cl = ok(
        Arc::new(
            PrivateClient {
                ip: env.ip,
                refused: AtomicI32::new(1),
                reason: AtomicI32::new(0),
                rej_data: AtomicBool::new(false),
                connected: AtomicI32::new(1),
                rep_data: AtomicBool::new(false),
                done: AtomicU32::new(0),
            },
            GFP_KERNEL,
        )
        .map_err(Error::from),
        "client",
        out,
    )?;
    let task = cl.clone();
    if workqueue::system_unbound()
        .try_spawn(GFP_KERNEL, move || private_client(&task))
        .is_err()
    {
        return Err("cannot spawn the client");
    }
    // The server's side: whatever fails, the client's connects end within
    // their timeouts, and the case waits for them.
    let served = (|| -> Outcome {
        let first = ok(listener.get_request(TIMEOUT_MS, &c), "first request", out)?;
        if !first.request_data().as_bytes().starts_with(REQ1) {
            let _ = write!(
                out,
                "first request's data: {:?}",
                first.request_data().as_bytes()
            );
            return Err("the first request's private data is not the client's");
        }
        ok(first.reject(REJ1), "reject", out)?;
        let second = ok(listener.get_request(TIMEOUT_MS, &c), "second request", out)?;
        if !second.request_data().as_bytes().starts_with(REQ2) {
            let _ = write!(
                out,
                "second request's data: {:?}",
                second.request_data().as_bytes()
            );
            return Err("the second request's private data is not the client's");
        }
        let dev: &Device = second.device().ok_or("no device of the request")?;
        let (pd, cq) = pd_cq(dev, out)?;
        let qp = ok(Qp::new_cm(&second, &pd, &cq, &cq, caps(2)), "QP", out)?;
        let param = ConnParam {
            private_data: REP2,
            ..ConnParam::default()
        };
        let qp = ok(
            second.accept_with(qp, &param, TIMEOUT_MS, &c),
            "accept",
            out,
        )?;
        // Held until the client has seen its reply.
        client_done(&cl);
        drop(qp);
        Ok(())
    })();
    let in_time = client_done(&cl);
    // The client runs this module's code: the case never returns before
    // it has ended (its every wait is bounded, so it ends).
    while cl.done.load(Ordering::Acquire) < 2 {
        kverbs::msleep(10);
    }
    drop(listener);
    if !in_time {
        return Err("the client's connects did not end in time");
    }
    served?;
    let (refused, reason) = (
        cl.refused.load(Ordering::Acquire),
        cl.reason.load(Ordering::Acquire),
    );
    let _ = write!(
        out,
        "first connect: errno {}, reason {}, data {}; second: errno {}, reply data {}",
        refused,
        reason,
        cl.rej_data.load(Ordering::Acquire),
        cl.connected.load(Ordering::Acquire),
        cl.rep_data.load(Ordering::Acquire)
    );
    if refused != kverbs::errno::econnrefused().to_errno() || reason != 28 {
        return Err("the first connect was not rejected by the consumer");
    }
    if !cl.rej_data.load(Ordering::Acquire) {
        return Err("the rejection's data is not the server's");
    }
    if cl.connected.load(Ordering::Acquire) != 0 {
        return Err("the second connect failed");
    }
    if !cl.rep_data.load(Ordering::Acquire) {
        return Err("the reply's data is not the server's");
    }
    Ok(())
}
