// SPDX-License-Identifier: GPL-2.0

//! Self-test cases of the layer's soundness under concurrency and in its
//! callbacks: what safe code running on two tasks at once, or inside an
//! event sink, must not be able to do to the kernel (the second soundness
//! review). Each case says what it would have met before the fix.

use crate::common::{
    buf, caps, connect_pair, cq, ok, port, rc_self, seg, srq_with_sink, wait_until, Env, Outcome,
    Text, TIMEOUT_MS,
};
use core::{
    fmt::Write,
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
};
use kernel::{c_str, new_mutex, prelude::*, sync::Arc, sync::Mutex, workqueue};
use kverbs::{
    client::{Client, Registration},
    cm::{CmEvents, CmId},
    cq::{Cq, PollCtx},
    device::Device,
    dma::DmaBuf,
    event::{Element, Event, EventKind, EventRing, EventSink},
    pd::Pd,
    qp::{Access, Cancel, Qp, Rts, SendOp},
    srq::Srq,
    stream::SendStream,
    tcp::Ipv4,
};

/// What the worker of `direct_cq_shared_by_two_tasks_dropping_qps` shares.
struct Pinger {
    stop: AtomicBool,
    running: AtomicU32,
    pings: AtomicU32,
    failed: AtomicU32,
}

/// Rounds of the dropping task.
const DROP_ROUNDS: u32 = 150;

/// One directly polled CQ, two tasks: a worker pings on a QP connected to
/// itself (SEND, receive, wait for both), while this task, 150 times,
/// makes a QP on the same CQ, leaves requests outstanding on it (SENDs
/// without receives, by `post_send` or a stream) and drops it: its drain's
/// flushed completions are processed by whichever task polls. Processed
/// by both at once, the worker could still be calling `done` on this QP's
/// slots from its batch after this task saw the drain's marker and freed
/// them (KASAN: use-after-free). The layer lets one task process at a
/// time; the other yields: how often they met is counted, and must not be
/// zero, or the case proved nothing.
pub(crate) fn direct_cq_shared_by_two_tasks_dropping_qps(env: &Env, out: &mut Text) -> Outcome {
    shared_cq_dropping_qps(env, out, PollCtx::Direct)
}

/// As `direct_cq_shared_by_two_tasks_dropping_qps`, on an adaptive CQ
/// (polled by its waiters, who sleep while nothing is near): the same
/// guard keeps one task processing at a time, and a task that finds the
/// CQ being processed yields rather than sleeps.
pub(crate) fn adaptive_cq_shared_by_two_tasks_dropping_qps(env: &Env, out: &mut Text) -> Outcome {
    shared_cq_dropping_qps(env, out, PollCtx::Adaptive)
}

fn shared_cq_dropping_qps(env: &Env, out: &mut Text, ctx: PollCtx) -> Outcome {
    let dev = &env.a;
    let pd = ok(Pd::new(dev), "PD", out)?;
    let dcq = ok(Cq::new(dev, 256, ctx), "CQ polled by its waiters", out)?;
    let pinger = ok(rc_self(&pd, &dcq), "pinging QP", out)?;
    let pbuf = ok(buf(dev), "ping buffer", out)?;
    let state = ok(
        Arc::new(
            Pinger {
                stop: AtomicBool::new(false),
                running: AtomicU32::new(1),
                pings: AtomicU32::new(0),
                failed: AtomicU32::new(0),
            },
            GFP_KERNEL,
        )
        .map_err(Error::from),
        "state",
        out,
    )?;
    let st = state.clone();
    let spawned = workqueue::system_unbound().try_spawn(GFP_KERNEL, move || {
        let c = Cancel::new();
        while !st.stop.load(Ordering::Acquire) {
            let ping = pinger.post_recv(&pbuf, 1024, 64).and_then(|r| {
                let s = pinger.post_send(SendOp::Send, &pbuf, 0, 64, true)?;
                pinger.wait(s, TIMEOUT_MS, &c)?.result()?;
                pinger.wait(r, TIMEOUT_MS, &c)?.result().map(|_| ())
            });
            match ping {
                Ok(()) => st.pings.fetch_add(1, Ordering::Relaxed),
                Err(_) => st.failed.fetch_add(1, Ordering::Relaxed),
            };
        }
        drop(pinger);
        st.running.store(0, Ordering::Release);
    });
    if spawned.is_err() {
        return Err("cannot spawn the pinging task");
    }
    let sbuf = ok(buf(dev), "send buffer", out)?;
    let mut result = Ok(());
    for round in 0..DROP_ROUNDS {
        let dropped = rc_self(&pd, &dcq).and_then(|q| {
            if round % 2 == 0 {
                for i in 0..4 {
                    q.post_send(SendOp::Send, &sbuf, i * 64, 64, true)?;
                }
            } else {
                let mut s = SendStream::new(&q, &[(SendOp::Send, seg(&sbuf, 64))], 4, 2)?;
                s.post(4, true)?;
            }
            // Dropped with 4 SENDs outstanding (RNR for ever): flushed.
            drop(q);
            Ok(())
        });
        if let Err(e) = dropped {
            let _ = write!(out, "round {}: error {}; ", round, e.to_errno());
            result = Err("a round of QPs dropped with requests outstanding failed");
            break;
        }
    }
    state.stop.store(true, Ordering::Release);
    if !wait_until(5000, || state.running.load(Ordering::Acquire) == 0) {
        return Err("the pinging task did not end");
    }
    let (pings, failed, met) = (
        state.pings.load(Ordering::Relaxed),
        state.failed.load(Ordering::Relaxed),
        dcq.direct_backoffs(),
    );
    let _ = write!(
        out,
        "{} CQ: {} rounds dropped, {} pings ({} failed), the tasks met on the CQ {} times",
        ctx.name(),
        DROP_ROUNDS,
        pings,
        failed,
        met
    );
    result?;
    if failed != 0 || pings == 0 {
        return Err("the pings on the shared CQ failed");
    }
    if met == 0 {
        return Err("the two tasks never met on the CQ: nothing was tested");
    }
    Ok(())
}

/// A ring of 4096 events (96 KiB of entries) is made, filled past its
/// size and snapshotted: its entries live on the heap, and nothing of the
/// ring's size is built or copied on the stack, which is 16 KiB (before,
/// `new` and `snapshot` put the whole array there, the latter with
/// interrupts off: a stack overflow).
pub(crate) fn event_ring_of_4096_snapshotted(_env: &Env, out: &mut Text) -> Outcome {
    const N: usize = 4096;
    let ring = ok(
        KBox::pin_init(EventRing::<N>::new(), GFP_KERNEL),
        "ring",
        out,
    )?;
    let ev = Event {
        event: 0,
        element: Element::Device,
    };
    for t in 0..5000u64 {
        ring.push(t, ev);
    }
    let (events, total) = ring.snapshot();
    let first = events.first().map_or(u64::MAX, |e| e.0);
    let last = events.last().map_or(u64::MAX, |e| e.0);
    let _ = write!(
        out,
        "total {}, kept {}, times {}..={}",
        total,
        events.len(),
        first,
        last
    );
    if total != 5000 || events.len() != N || first != 5000 - N as u64 || last != 4999 {
        return Err("the snapshot is not the newest 4096 of 5000, oldest first");
    }
    Ok(())
}

/// A connected pair on `dev` whose receiving QP takes its receives from
/// `srq`, and the buffer of the 8 receives of 64 bytes posted to `srq`,
/// whose limit is armed at 4: 5 SENDs on the sending QP raise the SRQ's
/// limit event (from the responder of the receiving QP).
fn srq_limit_pair(
    dev: &Device,
    pd: &Pd,
    scq: &Cq,
    srq: &Srq,
    out: &mut Text,
) -> Outcome<(Qp<Rts>, Qp<Rts>, Arc<DmaBuf>)> {
    let (s, r) = ok(
        Qp::new_rc(pd, port(dev), scq, scq, caps(8)).and_then(|a| {
            let b = Qp::new_rc_srq(pd, port(dev), scq, srq, caps(4), None)?;
            connect_pair(dev, a, b, Access::LOCAL_WRITE)
        }),
        "pair",
        out,
    )?;
    let rbuf = ok(buf(dev), "receive buffer", out)?;
    for i in 0..8 {
        ok(srq.post_recv(&rbuf, i * 64, 64), "SRQ receive", out)?;
    }
    ok(srq.arm_limit(4), "arm limit 4", out)?;
    Ok((s, r, rbuf))
}

/// The sink of `event_sink_sleeps_and_drops_its_objects`: on the SRQ limit
/// event it sleeps, takes a mutex and drops the QP the event came through
/// (from its responder) and the last handle of the SRQ itself.
#[pin_data]
struct Dropper {
    #[pin]
    held: Mutex<Option<(Qp<Rts>, Srq)>>,
    dropped: AtomicBool,
    other: AtomicU32,
}

impl EventSink for Dropper {
    fn event(&self, ev: &Event) {
        if ev.kind() != EventKind::SrqLimitReached {
            self.other.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Sleeps: allowed only in process context.
        kverbs::msleep(20);
        let held = self.held.lock().take();
        if held.is_some() {
            drop(held);
            self.dropped.store(true, Ordering::Release);
        }
    }
}

/// An event sink may sleep and drop the objects its event is about: an SRQ
/// limit event (raised by rxe from the responder of the QP the SEND came
/// in on, softirq or its task) reaches a sink that sleeps 20 ms, takes a
/// mutex, and drops that QP and the last handle of the SRQ -- whose
/// destruction then happens inside the delivery of its own event.
/// Called where rxe raised it, this was a sleep in atomic context and a
/// QP destroyed from its own task (which waits for that task to end).
pub(crate) fn event_sink_sleeps_and_drops_its_objects(env: &Env, out: &mut Text) -> Outcome {
    let dev = &env.a;
    let pd = ok(Pd::new(dev), "PD", out)?;
    let scq = ok(cq(dev), "send CQ", out)?;
    let rcq = ok(cq(dev), "SRQ CQ", out)?;
    let sink = Arc::pin_init(
        pin_init!(Dropper {
            held <- new_mutex!(None),
            dropped: AtomicBool::new(false),
            other: AtomicU32::new(0),
        }),
        GFP_KERNEL,
    );
    let (sink, srq) = srq_with_sink(&pd, &rcq, sink, out)?;
    let (s1, r1, _rbuf) = srq_limit_pair(dev, &pd, &scq, &srq, out)?;
    let sbuf = ok(buf(dev), "send buffer", out)?;
    // The QP of the SRQ and the SRQ's last handle go to the sink; this
    // task keeps only the sending QP.
    *sink.held.lock() = Some((r1, srq));
    // Their completions are not waited for: the sink may drop the receiving
    // QP while the last ones are acknowledged.
    let sent = (0..5).try_for_each(|i| {
        s1.post_send(SendOp::Send, &sbuf, i * 64, 64, true)
            .map(|_| ())
    });
    let dropped = sent.is_ok() && wait_until(3000, || sink.dropped.load(Ordering::Acquire));
    let _ = write!(
        out,
        "the sink dropped the QP and the SRQ: {}; other events: {}",
        dropped,
        sink.other.load(Ordering::Relaxed)
    );
    if !dropped {
        // Break the cycle sink -> SRQ -> sink (which would hold the device
        // for ever) before failing; the objects are dropped after the
        // guard, as their drop waits for the sink.
        let held = sink.held.lock().take();
        drop(held);
        if let Err(e) = sent {
            let _ = write!(out, "; SEND: error {}", e.to_errno());
            return Err("posting the SENDs failed");
        }
        return Err("the sink did not get to drop its objects");
    }
    drop(s1);
    Ok(())
}

/// Where the two sinks of `two_sinks_drop_each_others_objects` meet.
struct Meeting {
    /// Sinks inside the delivery of their limit event.
    arrived: AtomicU32,
    /// Sinks that dropped the other's objects.
    dropped: AtomicU32,
    /// Sinks whose `wait_for_deliveries` was refused with `EDEADLK`.
    refused: AtomicU32,
}

/// A sink of `two_sinks_drop_each_others_objects`: on its SRQ's limit
/// event it waits until the other sink is inside its own delivery too,
/// then drops what it holds -- the other SRQ's last handle and the QP that
/// receives from it -- and asks to wait for every delivery.
#[pin_data]
struct CrossDropper {
    #[pin]
    held: Mutex<Option<(Qp<Rts>, Srq)>>,
    meeting: Arc<Meeting>,
}

impl EventSink for CrossDropper {
    fn event(&self, ev: &Event) {
        if ev.kind() != EventKind::SrqLimitReached {
            return;
        }
        let m = &self.meeting;
        m.arrived.fetch_add(1, Ordering::AcqRel);
        if !wait_until(3000, || m.arrived.load(Ordering::Acquire) >= 2) {
            return;
        }
        let held = self.held.lock().take();
        if held.is_some() {
            drop(held);
            m.dropped.fetch_add(1, Ordering::AcqRel);
        }
        if kverbs::event::wait_for_deliveries()
            .is_err_and(|e| e.to_errno() == kverbs::errno::edeadlk().to_errno())
        {
            m.refused.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// Two event sinks, each inside the delivery of its own SRQ's limit event
/// at the same time, each drop the other's SRQ (and the QP receiving from
/// it): neither drop may wait for the other's delivery in progress, which
/// is waiting in the same way (before: both waited for ever, the hung-task
/// detector reporting them); and `wait_for_deliveries` from a sink, which
/// would wait for its own delivery, is refused with `EDEADLK` (before: a
/// flush of the workqueue from its own work item, which lockdep reports
/// and which never ends).
pub(crate) fn two_sinks_drop_each_others_objects(env: &Env, out: &mut Text) -> Outcome {
    let dev = &env.a;
    let pd = ok(Pd::new(dev), "PD", out)?;
    let scq = ok(cq(dev), "send CQ", out)?;
    let meeting = ok(
        Arc::new(
            Meeting {
                arrived: AtomicU32::new(0),
                dropped: AtomicU32::new(0),
                refused: AtomicU32::new(0),
            },
            GFP_KERNEL,
        )
        .map_err(Error::from),
        "meeting",
        out,
    )?;
    let mut sinks = KVec::new();
    let mut sides = KVec::new();
    for _ in 0..2 {
        let rcq = ok(cq(dev), "SRQ CQ", out)?;
        let m = meeting.clone();
        let sink = Arc::pin_init(
            pin_init!(CrossDropper {
                held <- new_mutex!(None),
                meeting: m,
            }),
            GFP_KERNEL,
        );
        let (sink, srq) = srq_with_sink(&pd, &rcq, sink, out)?;
        let (s, r, rbuf) = srq_limit_pair(dev, &pd, &scq, &srq, out)?;
        ok(
            sinks.push(sink, GFP_KERNEL).map_err(Error::from),
            "sinks",
            out,
        )?;
        ok(
            sides
                .push((s, Some((r, srq)), rbuf, rcq), GFP_KERNEL)
                .map_err(Error::from),
            "sides",
            out,
        )?;
    }
    // Each sink holds the other side's SRQ and its QP.
    for i in 0..2 {
        *sinks[i].held.lock() = sides[1 - i].1.take();
    }
    let sbuf = ok(buf(dev), "send buffer", out)?;
    let sent = sides.iter().try_for_each(|(s, ..)| {
        (0..5).try_for_each(|i| {
            s.post_send(SendOp::Send, &sbuf, i * 64, 64, true)
                .map(|_| ())
        })
    });
    let done = sent.is_ok() && wait_until(6000, || meeting.dropped.load(Ordering::Acquire) == 2);
    let _ = write!(
        out,
        "sinks met {}, dropped the other's objects {}, wait_for_deliveries refused {}",
        meeting.arrived.load(Ordering::Acquire),
        meeting.dropped.load(Ordering::Acquire),
        meeting.refused.load(Ordering::Acquire)
    );
    if !done {
        // Break the cycles sink -> SRQ -> sink before failing.
        for sink in sinks.iter() {
            let held = sink.held.lock().take();
            drop(held);
        }
        return Err("the two sinks did not both drop the other's objects");
    }
    // Both sinks' `wait_for_deliveries` have returned once their
    // deliveries end: wait for that here, outside any delivery.
    if kverbs::event::wait_for_deliveries().is_err() {
        return Err("wait_for_deliveries refused outside a sink");
    }
    if meeting.refused.load(Ordering::Acquire) != 2 {
        return Err("wait_for_deliveries from a sink not refused with EDEADLK");
    }
    Ok(())
}

/// The client of `registration_refused_inside_client_add`: its `add`
/// tries to register another client, [`Nested`].
struct Nester {
    refused: AtomicU32,
    other: AtomicU32,
}

/// The client [`Nester`] tries to register.
struct Nested;

impl Client for Nested {
    type DeviceData = ();

    fn add(&self, _dev: &Device) -> Result<()> {
        Ok(())
    }
}

kverbs::client_slot!(Nested);

impl Client for Nester {
    type DeviceData = ();

    fn add(&self, _dev: &Device) -> Result<()> {
        match Registration::new(c_str!("kverbs_selftest_nested"), Nested) {
            Err(e) if e.to_errno() == kverbs::errno::edeadlk().to_errno() => {
                self.refused.fetch_add(1, Ordering::AcqRel);
            }
            _ => {
                self.other.fetch_add(1, Ordering::AcqRel);
            }
        }
        Ok(())
    }
}

kverbs::client_slot!(Nester);

/// A client's `add` that registers another client is refused with
/// `EDEADLK`: the core calls `add` holding `devices_rwsem` (from
/// `ib_register_client`'s loop over the devices) or `clients_rwsem` (from
/// a device's registration), which registering takes again (before: a
/// recursive `down_read` of `devices_rwsem`, which lockdep reports and a
/// waiting writer turns into a deadlock).
pub(crate) fn registration_refused_inside_client_add(_env: &Env, out: &mut Text) -> Outcome {
    let reg = ok(
        Registration::new(
            c_str!("kverbs_selftest_nester"),
            Nester {
                refused: AtomicU32::new(0),
                other: AtomicU32::new(0),
            },
        ),
        "registration",
        out,
    )?;
    let (refused, other) = (
        reg.client().refused.load(Ordering::Acquire),
        reg.client().other.load(Ordering::Acquire),
    );
    drop(reg);
    let _ = write!(
        out,
        "registrations inside add: refused {}, other {}",
        refused, other
    );
    if refused == 0 || other != 0 {
        return Err("a registration inside a client's add not refused with EDEADLK");
    }
    // Outside a callback the same registration is taken.
    let nested = ok(
        Registration::new(c_str!("kverbs_selftest_nested"), Nested),
        "registration outside add",
        out,
    )?;
    drop(nested);
    Ok(())
}

/// What the clients of `cm_requests_while_accepted_ids_are_destroyed`
/// share.
struct Clients {
    ip: Ipv4,
    connected: AtomicU32,
    refused: AtomicU32,
    failed: AtomicU32,
    running: AtomicU32,
    stop: AtomicBool,
}

/// Connections the server accepts.
const CM_ROUNDS: u32 = 30;
const CM_PORT: u16 = 7990;

/// One client: connects over and over, dropping each connection at once.
fn cm_client(cl: &Clients) {
    let c = Cancel::new();
    while !cl.stop.load(Ordering::Acquire) {
        let r = (|| -> Result {
            let events = CmEvents::new()?;
            let id = CmId::new(&events)?;
            id.resolve(cl.ip, CM_PORT, TIMEOUT_MS, &c)?;
            let dev: &Device = id.device().ok_or(ENODEV)?;
            let pd = Pd::new(dev)?;
            let cq = cq(dev)?;
            let qp = Qp::new_cm(&id, &pd, &cq, &cq, caps(2))?;
            let qp = id.connect(qp, TIMEOUT_MS, &c)?;
            drop(qp);
            Ok(())
        })();
        match r {
            Ok(()) => cl.connected.fetch_add(1, Ordering::Relaxed),
            Err(e) if e.to_errno() == kverbs::errno::econnrefused().to_errno() => {
                cl.refused.fetch_add(1, Ordering::Relaxed)
            }
            Err(_) => cl.failed.fetch_add(1, Ordering::Relaxed),
        };
    }
    cl.running.fetch_sub(1, Ordering::AcqRel);
}

/// A listener that takes one connection at a time; two clients keep
/// connecting while the server accepts each request and destroys the
/// accepted ID at once, 30 times: new requests arrive while accepted IDs
/// are destroyed, and a new ID may be allocated where a destroyed one was.
/// The server must get all 30 (a taken request, once dropped, makes room
/// for the next one; events are told apart by the ID's token, so a new
/// request is never purged with a destroyed ID's events -- it would then
/// never be taken nor destroyed, and hold up the device's removal, which
/// `kverbs_soundness.sh` does within 5 s after the self-test).
pub(crate) fn cm_requests_while_accepted_ids_are_destroyed(env: &Env, out: &mut Text) -> Outcome {
    let c = Cancel::new();
    let events = ok(CmEvents::with_requests(1), "events", out)?;
    let listener = ok(CmId::new(&events), "listener", out)?;
    ok(listener.listen(env.ip, CM_PORT), "listen", out)?;
    let clients = ok(
        Arc::new(
            Clients {
                ip: env.ip,
                connected: AtomicU32::new(0),
                refused: AtomicU32::new(0),
                failed: AtomicU32::new(0),
                running: AtomicU32::new(0),
                stop: AtomicBool::new(false),
            },
            GFP_KERNEL,
        )
        .map_err(Error::from),
        "clients",
        out,
    )?;
    for _ in 0..2 {
        let cl = clients.clone();
        clients.running.fetch_add(1, Ordering::AcqRel);
        if workqueue::system_unbound()
            .try_spawn(GFP_KERNEL, move || cm_client(&cl))
            .is_err()
        {
            clients.running.fetch_sub(1, Ordering::AcqRel);
            clients.stop.store(true, Ordering::Release);
            wait_until(10_000, || clients.running.load(Ordering::Acquire) == 0);
            return Err("cannot spawn a client");
        }
    }
    let (mut accepted, mut attempts) = (0, 0);
    let mut result = Ok(());
    while accepted < CM_ROUNDS {
        attempts += 1;
        if attempts > 3 * CM_ROUNDS {
            result = Err("too many connection requests failed");
            break;
        }
        let r = listener.get_request(5 * TIMEOUT_MS, &c).and_then(|child| {
            let dev: &Device = child.device().ok_or(ENODEV)?;
            let pd = Pd::new(dev)?;
            let cq = cq(dev)?;
            let qp = Qp::new_cm(&child, &pd, &cq, &cq, caps(2))?;
            // Accepted, then the QP and the ID go at once.
            let qp = child.accept(qp, TIMEOUT_MS, &c)?;
            drop(qp);
            drop(child);
            Ok(())
        });
        match r {
            Ok(()) => accepted += 1,
            Err(e) if e.to_errno() == kverbs::errno::etimedout().to_errno() => {
                result = Err("no connection request came for 10 s");
                break;
            }
            // A client that gave up before the accept: the next one.
            Err(_) => {}
        }
    }
    clients.stop.store(true, Ordering::Release);
    let ended = wait_until(20_000, || clients.running.load(Ordering::Acquire) == 0);
    let _ = write!(
        out,
        "accepted {} of {} in {} requests; clients: {} connected, {} refused, {} failed",
        accepted,
        CM_ROUNDS,
        attempts,
        clients.connected.load(Ordering::Relaxed),
        clients.refused.load(Ordering::Relaxed),
        clients.failed.load(Ordering::Relaxed)
    );
    drop(listener);
    if !ended {
        return Err("the clients did not end");
    }
    result
}
