// SPDX-License-Identifier: GPL-2.0

//! The self-test: in-kernel tests of what the kverbs layer refuses.
//!
//! Each case hands the safe API something a careless (but safe) caller
//! could: objects of two devices or two PDs mixed, a port the device does
//! not have, a CQ too small for its QPs, a work request id of another QP or
//! one already released, remote write without local write, two QPs on one
//! connection manager ID. Before kverbs refused them, each of these reached
//! the driver and ended in a NULL or wild dereference, out-of-bounds reads
//! or DMA to the wrong address; now each must fail with its errno, and the
//! kselftest around it (kverbs_soundness.sh) fails on any kernel report.
//! The cases are safe Rust, like the rest of the module.
//!
//! Writing `A B IP [CASE]` to `/sys/kernel/debug/kverbs_example/selftest`
//! runs every case (or only `CASE`) with device `A`, device `B` (another
//! one) and `IP`, an IPv4 address of `B`'s netdev for the connection
//! manager; reading the file gives a plan and one KTAP line per case run
//! (`ok N name` or `not ok N name # why`), or, before any run, `case NAME`
//! for each case.

#[path = "selftest/races.rs"]
mod races;

use core::{
    fmt::Write,
    sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering},
};
use kernel::{new_mutex, prelude::*, sync::Arc, sync::Mutex, types::ARef, workqueue};
use kverbs::{
    ah::Ah,
    cm::{CmEvents, CmId},
    cq::{Cq, PollCtx},
    device::{Device, Gid, Mtu},
    dma::{DmaBuf, CHUNK},
    event::{Event, EventKind, EventSink},
    mr::Mr,
    pd::Pd,
    qp::{
        Access, AddressVector, AtomicOp, Cancel, InitAttr, Qp, QpCaps, RemoteBuf, RtrAttr, Rts,
        RtsAttr, SendOp, Ud, UdDest,
    },
    srq::Srq,
    stream::{Segment, SendStream},
    tcp::Ipv4,
    Show, Store,
};

/// The devices the client has, for the self-test to pick from.
pub(crate) type Devices = Mutex<KVec<ARef<Device>>>;

/// Adds `dev` to `devices`.
pub(crate) fn add_device(devices: &Devices, dev: &Device) -> Result {
    devices.lock().push(dev.into(), GFP_KERNEL)?;
    Ok(())
}

/// Drops `dev` from `devices`: its unregistration waits for our count.
pub(crate) fn remove_device(devices: &Devices, dev: &Device) {
    let mut list = devices.lock();
    let old = core::mem::replace(&mut *list, KVec::new());
    for d in old {
        if !d.same_as(dev) {
            // On allocation failure the self-test forgets that device,
            // nothing worse.
            let _ = list.push(d, GFP_KERNEL);
        }
    }
}

/// Text written by the cases.
struct Text(KVec<u8>);

impl Write for Text {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0
            .extend_from_slice(s.as_bytes(), GFP_KERNEL)
            .map_err(|_| core::fmt::Error)
    }
}

/// What the cases run with.
struct Env {
    a: ARef<Device>,
    b: ARef<Device>,
    ip: Ipv4,
}

/// A case: `Ok` if the layer behaved, else why not.
type Case = fn(&Env, &mut Text) -> core::result::Result<(), &'static str>;

const TIMEOUT_MS: u32 = 2000;
const QKEY: u32 = 0x1234_5678;

fn port(dev: &Device) -> u32 {
    *dev.ports().start()
}

fn caps(n: u32) -> QpCaps {
    QpCaps {
        max_send_wr: n,
        max_recv_wr: n,
        ..Default::default()
    }
}

/// `r` failed with `want`; says what it did otherwise.
fn refused<T>(
    r: Result<T>,
    want: Error,
    what: &'static str,
    out: &mut Text,
) -> Result<(), &'static str> {
    match r {
        Err(e) if e.to_errno() == want.to_errno() => Ok(()),
        Err(e) => {
            let _ = write!(
                out,
                "{}: error {}, want {}",
                what,
                e.to_errno(),
                want.to_errno()
            );
            Err(what)
        }
        Ok(_) => {
            let _ = write!(out, "{}: accepted", what);
            Err(what)
        }
    }
}

/// `r` succeeded; says how it failed otherwise.
fn ok<T>(r: Result<T>, what: &'static str, out: &mut Text) -> Result<T, &'static str> {
    r.map_err(|e| {
        let _ = write!(out, "{}: error {}", what, e.to_errno());
        what
    })
}

/// A GID of `dev`'s first port and its index: the first IPv4 one (a RoCE
/// v2 GID routes over `lo`, the link-local one does not), else the first.
fn first_gid(dev: &Device) -> Option<(u32, Gid)> {
    let gids = || (0..64).filter_map(|i| dev.gid_attr(port(dev), i).ok().map(|g| (i, g.gid())));
    gids()
        .find(|(_, g)| g.is_v4_mapped())
        .or_else(|| gids().next())
}

/// An RC QP of `pd` connected to itself, in RTS.
fn rc_self(pd: &Pd, cq: &Cq) -> Result<Qp<Rts>> {
    let dev = pd.device();
    let qp = Qp::new_rc(pd, port(dev), cq, cq, caps(4))?.to_init(&InitAttr {
        pkey_index: 0,
        access: Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
    })?;
    let qpn = qp.qp_num();
    to_rts(dev, qp, qpn)
}

/// An RC QP of `dev` in INIT to RTS, connected to the QP `dest` of the
/// same device.
fn to_rts(dev: &Device, q: Qp<kverbs::qp::Init>, dest: u32) -> Result<Qp<Rts>> {
    let (sgid_index, dgid) = first_gid(dev).ok_or(ENODEV)?;
    q.to_rtr(&RtrAttr {
        path_mtu: Mtu::MTU_1024,
        dest_qp_num: dest,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 0x12,
        av: av(dgid, sgid_index),
    })?
    .to_rts(&RtsAttr {
        timeout: 0x12,
        retry_cnt: 6,
        rnr_retry: 7,
        sq_psn: 0,
        max_rd_atomic: 1,
    })
}

/// Two RC QPs of `pd` connected to each other, in RTS, each with its own
/// CQ: the owner of a memory region and a peer that reaches it.
fn rc_pair(pd: &Pd) -> Result<(Qp<Rts>, Qp<Rts>, Cq, Cq)> {
    rc_pair_access(
        pd,
        Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
    )
}

/// [`rc_pair`] with the QPs' remote `access`.
fn rc_pair_access(pd: &Pd, access: Access) -> Result<(Qp<Rts>, Qp<Rts>, Cq, Cq)> {
    let dev = pd.device();
    let (ca, cb) = (cq(dev)?, cq(dev)?);
    let a = Qp::new_rc(pd, port(dev), &ca, &ca, caps(4))?;
    let b = Qp::new_rc(pd, port(dev), &cb, &cb, caps(4))?;
    let (a, b) = connect_pair(dev, a, b, access)?;
    Ok((a, b, ca, cb))
}

/// Connects `a` and `b`, two RC QPs of one device, to each other, with
/// the remote `access` they allow.
fn connect_pair(
    dev: &Device,
    a: Qp<kverbs::qp::Reset>,
    b: Qp<kverbs::qp::Reset>,
    access: Access,
) -> Result<(Qp<Rts>, Qp<Rts>)> {
    let init = InitAttr {
        pkey_index: 0,
        access,
    };
    let (a, b) = (a.to_init(&init)?, b.to_init(&init)?);
    let (qa, qb) = (a.qp_num(), b.qp_num());
    Ok((to_rts(dev, a, qb)?, to_rts(dev, b, qa)?))
}

/// A UD QP of `pd` in RTS.
fn ud_rts(pd: &Pd, cq: &Cq) -> Result<Qp<Rts, Ud>> {
    Qp::new_ud(pd, port(pd.device()), cq, cq, caps(2))?
        .to_init_ud(0, QKEY)?
        .to_rtr_ud()?
        .to_rts_ud(0)
}

fn av(dgid: Gid, sgid_index: u32) -> AddressVector {
    AddressVector::new(dgid, sgid_index as u8)
}

fn cq(dev: &Device) -> Result<Cq> {
    Cq::new(dev, 32, PollCtx::Softirq)
}

fn buf(dev: &Device) -> Result<Arc<DmaBuf>> {
    Ok(Arc::new(DmaBuf::new(dev, 4096)?, GFP_KERNEL)?)
}

fn qp_refuses_cq_of_other_device(env: &Env, out: &mut Text) -> Result<(), &'static str> {
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

fn qp_refuses_port_out_of_range(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let cq = ok(cq(&env.a), "CQ", out)?;
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

fn ah_refuses_port_out_of_range(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let (i, gid) = first_gid(&env.a).ok_or("no GID")?;
    let past = *env.a.ports().end() + 1;
    refused(
        Ah::new(&pd, past, &av(gid, i)),
        EINVAL,
        "AH past the last port",
        out,
    )?;
    refused(Ah::new(&pd, 0, &av(gid, i)), EINVAL, "AH on port 0", out)
}

fn qp_takes_cq_room(env: &Env, out: &mut Text) -> Result<(), &'static str> {
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

fn post_recv_refuses_buffer_of_other_device(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let cq = ok(cq(&env.a), "CQ", out)?;
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

fn post_send_refuses_buffer_of_other_device(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let cq = ok(cq(&env.a), "CQ", out)?;
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

fn post_send_ud_refuses_ah_of_other_pd(env: &Env, out: &mut Text) -> Result<(), &'static str> {
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

fn mr_map_refuses_buffer_of_other_device(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let mr = ok(Mr::new(&pd, 4096), "MR", out)?;
    let b = ok(buf(&env.b), "buffer of B", out)?;
    refused(mr.map(&b), EINVAL, "MR of A mapping a buffer of B", out)
}

/// An RC QP of `qp_pd` in RTS and an MR of `mr_pd` mapped on a buffer, all
/// of device A.
fn qp_and_mapped_mr(
    env: &Env,
    qp_pd: &Pd,
    mr_pd: &Pd,
    out: &mut Text,
) -> Result<(Qp<Rts>, Mr), &'static str> {
    let cq = ok(cq(&env.a), "CQ", out)?;
    let qp = ok(rc_self(qp_pd, &cq), "QP", out)?;
    let mr = ok(Mr::new(mr_pd, 4096), "MR", out)?;
    let a = ok(buf(&env.a), "buffer", out)?;
    ok(mr.map(&a), "map", out)?;
    Ok((qp, mr))
}

fn mr_registration_refuses_qp_of_other_pd(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let pd1 = ok(Pd::new(&env.a), "PD 1", out)?;
    let pd2 = ok(Pd::new(&env.a), "PD 2", out)?;
    let (qp, mr) = qp_and_mapped_mr(env, &pd2, &pd1, out)?;
    let c = Cancel::new();
    refused(
        mr.post_registration(&qp, Access::LOCAL_WRITE, TIMEOUT_MS, &c),
        EINVAL,
        "REG_MR through a QP of another PD",
        out,
    )
}

fn mr_registration_refuses_remote_write_without_local_write(
    env: &Env,
    out: &mut Text,
) -> Result<(), &'static str> {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let (qp, mr) = qp_and_mapped_mr(env, &pd, &pd, out)?;
    let c = Cancel::new();
    refused(
        mr.post_registration(&qp, Access::REMOTE_WRITE, TIMEOUT_MS, &c),
        EINVAL,
        "REMOTE_WRITE without LOCAL_WRITE",
        out,
    )?;
    refused(
        mr.post_registration(
            &qp,
            Access::REMOTE_ATOMIC | Access::REMOTE_READ,
            TIMEOUT_MS,
            &c,
        ),
        EINVAL,
        "REMOTE_ATOMIC without LOCAL_WRITE",
        out,
    )?;
    ok(
        mr.post_registration(
            &qp,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            TIMEOUT_MS,
            &c,
        ),
        "LOCAL_WRITE | REMOTE_WRITE",
        out,
    )?;
    ok(mr.invalidate(&qp, TIMEOUT_MS, &c), "LOCAL_INV", out)
}

fn wait_refuses_request_of_other_qp(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let cq = ok(cq(&env.a), "CQ", out)?;
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

fn wait_refuses_released_unsignalled_send(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let cq = ok(cq(&env.a), "CQ", out)?;
    let qp = ok(rc_self(&pd, &cq), "QP", out)?;
    let a = ok(buf(&env.a), "buffer", out)?;
    let c = Cancel::new();
    let r1 = ok(qp.post_recv(&a, 1024, 64), "receive 1", out)?;
    let r2 = ok(qp.post_recv(&a, 2048, 64), "receive 2", out)?;
    let quiet = ok(
        qp.post_send(SendOp::Send, &a, 0, 64, false),
        "unsignalled SEND",
        out,
    )?;
    let loud = ok(
        qp.post_send(SendOp::Send, &a, 0, 64, true),
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

/// The pattern that freed a CQ under its softirq poll (ib_poll_handler's
/// re-arm after irq_poll_complete, found by `make stress`): the completion
/// that ends a wait is the last the CQ sees, and the CQ is freed at once,
/// while the poll that delivered it may still be running. 200 times.
fn softirq_cq_freed_right_after_its_last_completion(
    env: &Env,
    out: &mut Text,
) -> Result<(), &'static str> {
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

fn seg(b: &Arc<DmaBuf>, len: usize) -> Segment {
    Segment {
        buf: b.clone(),
        offset: 0,
        len,
    }
}

/// An inline stream takes only SENDs and WRITEs the QP can carry inline.
fn stream_inline_refuses_read_and_oversize(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let cq = ok(cq(&env.a), "CQ", out)?;
    let qp = ok(rc_self(&pd, &cq), "QP", out)?;
    let a = ok(buf(&env.a), "buffer", out)?;
    let max = qp.max_inline_data() as usize;
    let _ = write!(out, "max inline {}; ", max);
    let remote = kverbs::qp::RemoteBuf::default();
    refused(
        SendStream::new_inline(&qp, &[(SendOp::Read(remote), seg(&a, 8))], 1, 1),
        EINVAL,
        "inline RDMA READ",
        out,
    )?;
    refused(
        SendStream::new_inline(&qp, &[(SendOp::Send, seg(&a, max + 1))], 1, 1),
        EINVAL,
        "inline SEND of max_inline_data + 1 bytes",
        out,
    )?;
    let s = ok(
        SendStream::new_inline(&qp, &[(SendOp::Send, seg(&a, max))], 1, 1),
        "inline SEND of max_inline_data bytes",
        out,
    )?;
    drop(s);
    Ok(())
}

/// A stream takes `depth` of its QP's send slots, and gives them back
/// when dropped with nothing outstanding.
fn stream_takes_slots_and_gives_them_back(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let cq = ok(cq(&env.a), "CQ", out)?;
    let qp = ok(rc_self(&pd, &cq), "QP", out)?;
    let a = ok(buf(&env.a), "buffer", out)?;
    let c = Cancel::new();
    let s = ok(
        SendStream::new(&qp, &[(SendOp::Send, seg(&a, 64))], 4, 1),
        "stream of 4 (all the QP's send slots)",
        out,
    )?;
    refused(
        qp.post_send(SendOp::Send, &a, 0, 64, true),
        ENOSPC,
        "post_send beside a stream holding every slot",
        out,
    )?;
    refused(
        SendStream::new(&qp, &[(SendOp::Send, seg(&a, 64))], 1, 1),
        ENOSPC,
        "a second stream",
        out,
    )?;
    drop(s);
    // The slots are back: a receive for it, then a send.
    let r = ok(qp.post_recv(&a, 1024, 64), "receive", out)?;
    let id = ok(
        qp.post_send(SendOp::Send, &a, 0, 64, true),
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
fn stream_dropped_with_requests_outstanding(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let cq = ok(cq(&env.a), "CQ", out)?;
    let qp = ok(rc_self(&pd, &cq), "QP", out)?;
    let a = ok(buf(&env.a), "buffer", out)?;
    let mut s = ok(
        SendStream::new(&qp, &[(SendOp::Send, seg(&a, 64))], 4, 2),
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
    drop(a);
    drop(qp);
    Ok(())
}

/// A connection manager ID with its address and route resolved to
/// `env.ip` (of device `B`), its PD and CQ.
fn cm_resolved(
    env: &Env,
    events: &CmEvents,
    out: &mut Text,
) -> Result<(CmId, Pd, Cq), &'static str> {
    let id = ok(CmId::new(events), "CM ID", out)?;
    let c = Cancel::new();
    ok(id.resolve(env.ip, 7999, TIMEOUT_MS, &c), "resolve", out)?;
    let dev = id.device().ok_or("no device after resolve")?;
    let pd = ok(Pd::new(dev), "PD", out)?;
    let cq = ok(cq(dev), "CQ", out)?;
    Ok((id, pd, cq))
}

fn cm_id_takes_one_qp(env: &Env, out: &mut Text) -> Result<(), &'static str> {
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

fn cm_connect_refuses_qp_of_other_id(env: &Env, out: &mut Text) -> Result<(), &'static str> {
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

/// On RoCE an AH's destination MAC is resolved: a multicast group's is
/// mapped from its address, a unicast address's comes from the IP stack
/// (for our own address, our netdev's MAC, written out for the test to
/// compare).
fn ah_resolves_roce_dmac(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let dev = &env.b;
    let pd = ok(Pd::new(dev), "PD", out)?;
    let (i, gid) = first_gid(dev).ok_or("no GID")?;
    let mut v4 = [0u8; 16];
    v4[10] = 0xff;
    v4[11] = 0xff;
    v4[12..].copy_from_slice(&[239, 1, 1, 1]);
    let mut v6 = [0u8; 16];
    v6[0] = 0xff;
    v6[1] = 0x0e;
    v6[14] = 0x12;
    v6[15] = 0x34;
    let groups = [
        (Gid(v4), [0x01, 0x00, 0x5e, 0x01, 0x01, 0x01], "239.1.1.1"),
        (Gid(v6), [0x33, 0x33, 0x00, 0x00, 0x12, 0x34], "ff0e::1234"),
    ];
    for (mgid, want, name) in groups {
        let ah = ok(Ah::new(&pd, port(dev), &av(mgid, i)), name, out)?;
        if ah.dmac() != Some(want) {
            let _ = write!(out, "{}: dmac {:?}, want {:?}", name, ah.dmac(), want);
            return Err(name);
        }
    }
    let own = ok(
        Ah::new(&pd, port(dev), &av(gid, i)),
        "AH to our own address",
        out,
    )?;
    let m = own.dmac().ok_or("no dmac")?;
    let _ = write!(
        out,
        "dmac {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    );
    Ok(())
}

/// An rdma_cm ID's events leave the queue when taken, and those not taken
/// when the ID is destroyed: none is left for an ID created later at the
/// same address, and the queue does not grow.
fn cm_events_of_destroyed_id_dropped(env: &Env, out: &mut Text) -> Result<(), &'static str> {
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

/// What the writers of `dma_buf_copies_exclude_each_other` share with it.
struct Race {
    buf: Arc<DmaBuf>,
    stop: AtomicBool,
    running: AtomicU32,
    busy: AtomicU32,
}

/// CPU copies of one `DmaBuf` from several threads never overlap: two
/// writers (on the unbound workqueue) write whole-buffer patterns while
/// this thread reads it for a second. A read never sees two patterns mixed
/// (a torn copy), and copies do meet one in progress (`EBUSY`) -- without
/// the exclusion, none ever would.
fn dma_buf_copies_exclude_each_other(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    const LEN: usize = 4096;
    let race = ok(
        Arc::new(
            Race {
                buf: ok(buf(&env.a), "buffer", out)?,
                stop: AtomicBool::new(false),
                running: AtomicU32::new(0),
                busy: AtomicU32::new(0),
            },
            GFP_KERNEL,
        )
        .map_err(Into::into),
        "race",
        out,
    )?;
    for pattern in [0xaa_u8, 0x55] {
        let r = race.clone();
        let data = ok(
            KVec::from_elem(pattern, LEN, GFP_KERNEL).map_err(Into::into),
            "data",
            out,
        )?;
        r.running.fetch_add(1, Ordering::AcqRel);
        let spawned = workqueue::system_unbound().try_spawn(GFP_KERNEL, move || {
            while !r.stop.load(Ordering::Acquire) {
                if r.buf.write(0, &data).is_err() {
                    r.busy.fetch_add(1, Ordering::Relaxed);
                }
            }
            r.running.fetch_sub(1, Ordering::AcqRel);
        });
        if spawned.is_err() {
            race.running.fetch_sub(1, Ordering::AcqRel);
            race.stop.store(true, Ordering::Release);
            return Err("cannot spawn a writer");
        }
    }
    let mut seen = ok(
        KVec::from_elem(0u8, LEN, GFP_KERNEL).map_err(Into::into),
        "out",
        out,
    )?;
    let (mut reads, mut busy, mut torn) = (0u32, 0u32, 0u32);
    let start = kverbs::now_ns();
    while kverbs::now_ns() - start < 1_000_000_000 {
        match race.buf.read(0, &mut seen) {
            Ok(()) => {
                reads += 1;
                if seen.iter().any(|&b| b != seen[0]) {
                    torn += 1;
                }
            }
            Err(_) => busy += 1,
        }
    }
    race.stop.store(true, Ordering::Release);
    let start = kverbs::now_ns();
    while race.running.load(Ordering::Acquire) != 0 && kverbs::now_ns() - start < 5_000_000_000 {
        kverbs::msleep(10);
    }
    let writers_busy = race.busy.load(Ordering::Relaxed);
    let _ = write!(
        out,
        "{} reads, {} torn, EBUSY {} times to the reader, {} to the writers",
        reads, torn, busy, writers_busy
    );
    if race.running.load(Ordering::Acquire) != 0 {
        return Err("the writers did not stop");
    }
    if torn != 0 {
        return Err("a read saw two writes mixed");
    }
    if busy + writers_busy == 0 {
        return Err("no copy ever met another");
    }
    Ok(())
}

/// A buffer larger than a chunk: copies cross its chunk boundaries intact,
/// a range takes one SGE per chunk it touches, and a QP refuses a request
/// that needs more SGEs than it was created with (`EINVAL`) but takes it
/// when created with enough. An MR maps it whole.
fn chunked_buffer_takes_an_sge_per_chunk(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let dev = &env.a;
    let len = 2 * CHUNK + 100;
    let big = ok(DmaBuf::new(dev, len), "buffer of 2 chunks + 100 bytes", out)?;
    let big = ok(Arc::new(big, GFP_KERNEL).map_err(Into::into), "Arc", out)?;
    let counts = [
        big.sge_count(0, len),
        big.sge_count(CHUNK - 8, 16),
        big.sge_count(5, 10),
        big.sge_count(2 * CHUNK, 100),
        big.sge_count(len, 1),
    ];
    let _ = write!(out, "SGEs {:?}; ", counts);
    if counts != [3, 2, 1, 1, 0] {
        return Err("wrong SGE counts");
    }
    let pattern: [u8; 16] = core::array::from_fn(|i| 0xa0 + i as u8);
    ok(
        big.write(CHUNK - 8, &pattern),
        "write across a boundary",
        out,
    )?;
    let mut back = [0u8; 24];
    ok(
        big.read(CHUNK - 12, &mut back),
        "read across a boundary",
        out,
    )?;
    if back[..4] != [0; 4] || back[4..20] != pattern || back[20..] != [0; 4] {
        let _ = write!(out, "read back {:?}", back);
        return Err("the copy across a boundary is wrong");
    }
    refused(
        DmaBuf::new(dev, kverbs::dma::MAX_LEN + 1),
        EINVAL,
        "buffer over MAX_LEN",
        out,
    )?;
    let pd = ok(Pd::new(dev), "PD", out)?;
    let cq = ok(cq(dev), "CQ", out)?;
    let one = ok(ud_rts(&pd, &cq), "UD QP of one SGE", out)?;
    refused(
        one.post_recv(&big, CHUNK - 8, 16),
        EINVAL,
        "a receive on 2 chunks, QP of 1 SGE",
        out,
    )?;
    let two = QpCaps {
        max_sge: 2,
        ..caps(2)
    };
    let qp = ok(
        Qp::new_ud(&pd, port(dev), &cq, &cq, two).and_then(|q| q.to_init_ud(0, QKEY)),
        "UD QP of 2 SGEs",
        out,
    )?;
    ok(
        qp.post_recv(&big, CHUNK - 8, 16),
        "a receive on 2 chunks, QP of 2 SGEs",
        out,
    )?;
    let mr = ok(Mr::new(&pd, len), "MR", out)?;
    let remote = ok(mr.map(&big), "MR map of 3 chunks", out)?;
    let _ = write!(out, "MR of {} bytes", remote.len);
    if remote.len as usize != len {
        return Err("the MR does not map the whole buffer");
    }
    Ok(())
}

/// Posts `op` on `qp` (16 bytes of `local` at `off`) and says how it
/// completed.
fn one_op(
    qp: &Qp<Rts>,
    op: SendOp,
    local: &Arc<DmaBuf>,
    off: usize,
    out: &mut Text,
) -> Result<kverbs::wc::WcStatus, &'static str> {
    let c = Cancel::new();
    let id = ok(qp.post_send(op, local, off, 16, true), "post", out)?;
    Ok(ok(qp.wait(id, TIMEOUT_MS, &c), "completion", out)?.status)
}

/// The rkey's scope: once an MR is invalidated, the address and rkey a peer
/// was given reach nothing. An RDMA WRITE and an RDMA READ with them
/// complete with a remote access error and the buffer is unchanged; a new
/// registration of the same buffer has a new key, under which the old one
/// still fails and the new one works. (Each refused request takes its QP
/// pair to the error state, so each uses a new pair.)
fn stale_rkey_refused_after_invalidate(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    use kverbs::wc::WcStatus;
    let dev = &env.a;
    let c = Cancel::new();
    let pd = ok(Pd::new(dev), "PD", out)?;
    let target = ok(buf(dev), "target buffer", out)?;
    let src = ok(buf(dev), "source buffer", out)?;
    let (a, b) = ([0xa5u8; 16], [0x5bu8; 16]);
    ok(src.write(0, &a), "source A", out)?;
    ok(src.write(16, &b), "source B", out)?;
    let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    let mr = ok(Mr::new(&pd, 4096), "MR", out)?;
    let seen = |out: &mut Text| -> Result<[u8; 16], &'static str> {
        let mut got = [0u8; 16];
        ok(target.read(0, &mut got), "target read", out)?;
        Ok(got)
    };

    let (own, peer, _ca, _cb) = ok(rc_pair(&pd), "pair 1", out)?;
    let old = ok(
        mr.register(&own, &target, access, TIMEOUT_MS, &c),
        "registration",
        out,
    )?;
    if one_op(&peer, SendOp::Write(old), &src, 0, out)? != WcStatus::Success || seen(out)? != a {
        return Err("a WRITE under the live rkey did not land");
    }
    ok(mr.invalidate(&own, TIMEOUT_MS, &c), "LOCAL_INV", out)?;
    let st = one_op(&peer, SendOp::Write(old), &src, 16, out)?;
    let _ = write!(out, "stale WRITE: {}; ", st);
    if st != WcStatus::RemAccessErr || seen(out)? != a {
        return Err("a WRITE with the stale rkey was not refused, or changed the buffer");
    }

    let (_own, peer, _ca2, _cb2) = ok(rc_pair(&pd), "pair 2", out)?;
    let dst = ok(buf(dev), "READ target", out)?;
    let st = one_op(&peer, SendOp::Read(old), &dst, 0, out)?;
    let mut got = [0u8; 16];
    ok(dst.read(0, &mut got), "READ target read", out)?;
    let _ = write!(out, "stale READ: {}; ", st);
    if st != WcStatus::RemAccessErr || got != [0; 16] {
        return Err("a READ with the stale rkey was not refused, or returned data");
    }

    let (own, peer, _ca3, _cb3) = ok(rc_pair(&pd), "pair 3", out)?;
    let new = ok(
        mr.register(&own, &target, access, TIMEOUT_MS, &c),
        "registration 2",
        out,
    )?;
    let _ = write!(out, "rkey {:#x} then {:#x}; ", old.rkey, new.rkey);
    if new.rkey == old.rkey {
        return Err("a new registration kept the old rkey");
    }
    let st = one_op(&peer, SendOp::Write(old), &src, 16, out)?;
    let _ = write!(out, "old rkey after re-registration: {}", st);
    if st != WcStatus::RemAccessErr || seen(out)? != a {
        return Err("the old rkey reached the re-registered buffer");
    }
    let (_own, peer, _ca4, _cb4) = ok(rc_pair(&pd), "pair 4", out)?;
    if one_op(&peer, SendOp::Write(new), &src, 16, out)? != WcStatus::Success || seen(out)? != b {
        return Err("a WRITE under the new rkey did not land");
    }
    Ok(())
}

/// Atomics reach only memory registered for them, with their operands
/// checked: misaligned local or remote addresses and remote buffers under
/// 8 bytes are refused when posted (EINVAL); a fetch-and-add on a region
/// without remote atomic access completes with a remote access error and
/// leaves it unchanged (the rights are given only when asked for); with
/// them, fetch-and-add and compare-and-swap return the old value and
/// change the target as the verbs say.
fn atomic_needs_remote_atomic_access_and_alignment(
    env: &Env,
    out: &mut Text,
) -> Result<(), &'static str> {
    use kverbs::wc::WcStatus;
    let dev = &env.a;
    let c = Cancel::new();
    let pd = ok(Pd::new(dev), "PD", out)?;
    let target = ok(buf(dev), "target buffer", out)?;
    let old = ok(buf(dev), "old value buffer", out)?;
    let start = 0x0102_0304_0506_0708u64;
    ok(target.write(0, &start.to_ne_bytes()), "target", out)?;
    let value = |b: &DmaBuf, out: &mut Text| -> Result<u64, &'static str> {
        let mut v = [0u8; 8];
        ok(b.read(0, &mut v), "read", out)?;
        Ok(u64::from_ne_bytes(v))
    };
    let rw = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    let all = rw | Access::REMOTE_ATOMIC;
    let atomic = |qp: &Qp<Rts>, op: AtomicOp, out: &mut Text| {
        let id = ok(qp.post_atomic(op, &old, 0, true), "post atomic", out)?;
        Ok::<_, &'static str>(ok(qp.wait(id, TIMEOUT_MS, &c), "completion", out)?.status)
    };

    // Without remote atomic access on the region. The refused request
    // takes both QPs to the error state: the region is deregistered when
    // dropped, a second one is used below.
    let mr = ok(Mr::new(&pd, 4096), "MR", out)?;
    let (own, peer, _ca, _cb) = ok(rc_pair_access(&pd, all), "pair 1", out)?;
    let remote = ok(
        mr.register(&own, &target, rw, TIMEOUT_MS, &c),
        "registration",
        out,
    )?;
    let add = AtomicOp::FetchAdd { remote, add: 5 };
    let st = atomic(&peer, add, out)?;
    let _ = write!(out, "fetch-and-add without REMOTE_ATOMIC: {}; ", st);
    if st != WcStatus::RemAccessErr || value(&target, out)? != start {
        return Err("an atomic reached a region without remote atomic access");
    }

    // With it.
    let mr = ok(Mr::new(&pd, 4096), "MR 2", out)?;
    let (own, peer, _ca2, _cb2) = ok(rc_pair_access(&pd, all), "pair 2", out)?;
    let remote = ok(
        mr.register(&own, &target, all, TIMEOUT_MS, &c),
        "registration 2",
        out,
    )?;
    let misaligned = RemoteBuf {
        addr: remote.addr + 4,
        ..remote
    };
    let short = RemoteBuf { len: 4, ..remote };
    let add = AtomicOp::FetchAdd { remote, add: 5 };
    for (op, what) in [
        (
            AtomicOp::FetchAdd {
                remote: misaligned,
                add: 1,
            },
            "misaligned remote address",
        ),
        (
            AtomicOp::FetchAdd {
                remote: short,
                add: 1,
            },
            "remote buffer of 4 bytes",
        ),
    ] {
        refused(peer.post_atomic(op, &old, 0, true), EINVAL, what, out)?;
    }
    refused(
        peer.post_atomic(add, &old, 4, true),
        EINVAL,
        "misaligned local offset",
        out,
    )?;
    refused(
        peer.post_atomic(add, &old, 4092, true),
        EINVAL,
        "local offset past the buffer",
        out,
    )?;
    let st = atomic(&peer, add, out)?;
    let (got, now) = (value(&old, out)?, value(&target, out)?);
    if st != WcStatus::Success || got != start || now != start + 5 {
        let _ = write!(
            out,
            "fetch-and-add: {}, old {:#x}, target {:#x}; ",
            st, got, now
        );
        return Err("a fetch-and-add did not return the old value or add");
    }
    let swap = AtomicOp::CmpSwap {
        remote,
        compare: start + 5,
        swap: 42,
    };
    if atomic(&peer, swap, out)? != WcStatus::Success
        || value(&old, out)? != start + 5
        || value(&target, out)? != 42
    {
        return Err("a matching compare-and-swap did not swap");
    }
    if atomic(&peer, swap, out)? != WcStatus::Success
        || value(&old, out)? != 42
        || value(&target, out)? != 42
    {
        return Err("a compare-and-swap that did not match changed the target");
    }
    ok(mr.invalidate(&own, TIMEOUT_MS, &c), "LOCAL_INV 2", out)?;
    let _ = write!(out, "fetch-and-add and compare-and-swap ok");
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
fn alt_path_needs_auto_path_mig(env: &Env, out: &mut Text) -> Result<(), &'static str> {
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

/// Counts the SRQ limit events it is given.
struct LimitEvents(AtomicU32);

impl EventSink for LimitEvents {
    fn event(&self, ev: &Event) {
        if ev.kind() == EventKind::SrqLimitReached {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A shared receive queue serves two QPs: SENDs on both land in its
/// receives, in the order posted, and each completion names the QP it came
/// in on; the armed limit raises its event once fewer receives remain; a
/// QP of the SRQ refuses receives of its own, a QP of another PD or an
/// out-of-range limit is refused. The SRQ handle is dropped before its QPs,
/// which keep it alive (KASAN and kmemleak watch the teardown).
fn srq_shared_by_two_qps(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let dev = &env.a;
    let c = Cancel::new();
    let pd = ok(Pd::new(dev), "PD", out)?;
    let scq = ok(cq(dev), "send CQ", out)?;
    let rcq = ok(cq(dev), "SRQ CQ", out)?;
    let sink = ok(
        Arc::new(LimitEvents(AtomicU32::new(0)), GFP_KERNEL).map_err(Error::from),
        "sink",
        out,
    )?;
    let srq = ok(
        Srq::new_with_events(&pd, &rcq, 8, 1, sink.clone()),
        "SRQ",
        out,
    )?;
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

/// What `mr_not_locked_across_registration_wait` shares with its thread.
struct Registering {
    qp: Qp<Rts>,
    mr: Mr,
    errno: AtomicI32,
    done: AtomicBool,
}

/// No MR lock is held while a registration is waited for: a REG_MR queued
/// behind an RDMA READ to a QP that does not exist completes only when the
/// READ has failed; meanwhile `map` from another thread is refused at once
/// with EBUSY instead of waiting for the lock. The registration must last
/// long after `map` returned, or the case cannot tell the two apart.
fn mr_not_locked_across_registration_wait(env: &Env, out: &mut Text) -> Result<(), &'static str> {
    let dev = &env.a;
    let pd = ok(Pd::new(dev), "PD", out)?;
    let cq = ok(cq(dev), "CQ", out)?;
    let (sgid_index, dgid) = first_gid(dev).ok_or("no GID")?;
    let init = InitAttr {
        pkey_index: 0,
        access: Access::LOCAL_WRITE | Access::REMOTE_READ,
    };
    let qp = ok(Qp::new_rc(&pd, port(dev), &cq, &cq, caps(4)), "QP", out)?;
    let qp = ok(qp.to_init(&init), "INIT", out)?;
    let rtr = RtrAttr {
        path_mtu: Mtu::MTU_1024,
        // No QP has this number: the READ is never answered.
        dest_qp_num: 0xfffffe,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 0x12,
        av: av(dgid, sgid_index),
    };
    let rts = RtsAttr {
        // 4.096 us * 2^19 = 2.1 s per try.
        timeout: 19,
        retry_cnt: 6,
        rnr_retry: 7,
        sq_psn: 0,
        max_rd_atomic: 1,
    };
    let qp = ok(qp.to_rtr(&rtr).and_then(|q| q.to_rts(&rts)), "RTS", out)?;
    let a = ok(buf(dev), "buffer", out)?;
    let remote = RemoteBuf {
        addr: 0,
        rkey: 0,
        len: 64,
    };
    let _read = ok(
        qp.post_send(SendOp::Read(remote), &a, 0, 64, true),
        "READ",
        out,
    )?;
    let mr = ok(Mr::new(&pd, 4096), "MR", out)?;
    ok(mr.map(&a), "map", out)?;
    let reg = ok(
        Arc::new(
            Registering {
                qp,
                mr,
                errno: AtomicI32::new(0),
                done: AtomicBool::new(false),
            },
            GFP_KERNEL,
        )
        .map_err(Into::into),
        "shared",
        out,
    )?;
    let r = reg.clone();
    let spawned = workqueue::system_unbound().try_spawn(GFP_KERNEL, move || {
        let c = Cancel::new();
        let res =
            r.mr.post_registration(&r.qp, Access::LOCAL_WRITE, 10_000, &c);
        r.errno
            .store(res.err().map_or(0, |e| e.to_errno()), Ordering::Release);
        r.done.store(true, Ordering::Release);
    });
    if spawned.is_err() {
        return Err("cannot spawn the registration");
    }
    kverbs::msleep(200);
    let in_progress = !reg.done.load(Ordering::Acquire);
    let b = ok(buf(dev), "second buffer", out)?;
    let t0 = kverbs::now_ns();
    let res = reg.mr.map(&b);
    let waited_us = (kverbs::now_ns() - t0) / 1000;
    let still_running = !reg.done.load(Ordering::Acquire);
    let start = kverbs::now_ns();
    while !reg.done.load(Ordering::Acquire) && kverbs::now_ns() - start < 15_000_000_000 {
        kverbs::msleep(20);
    }
    let after_ms = (kverbs::now_ns() - start) / 1_000_000;
    let _ = write!(
        out,
        "map during the wait: {:?} after {} us; the registration: errno {}, done {} ms later",
        res.as_ref().err().map(|e| e.to_errno()),
        waited_us,
        reg.errno.load(Ordering::Acquire),
        after_ms
    );
    if !reg.done.load(Ordering::Acquire) {
        return Err("the registration did not end");
    }
    if !in_progress {
        return Err("the registration was over before map was tried");
    }
    if waited_us > 50_000 || !still_running {
        return Err("map waited for the registration");
    }
    if after_ms < 200 {
        return Err("the registration was too short to tell");
    }
    match res {
        Err(e) if e.to_errno() == EBUSY.to_errno() => Ok(()),
        _ => Err("map during the registration was not refused with EBUSY"),
    }
}

const CASES: &[(&str, Case)] = &[
    (
        "qp_refuses_cq_of_other_device",
        qp_refuses_cq_of_other_device,
    ),
    ("qp_refuses_port_out_of_range", qp_refuses_port_out_of_range),
    ("ah_refuses_port_out_of_range", ah_refuses_port_out_of_range),
    ("qp_takes_cq_room_and_gives_it_back", qp_takes_cq_room),
    (
        "post_recv_refuses_buffer_of_other_device",
        post_recv_refuses_buffer_of_other_device,
    ),
    (
        "post_send_refuses_buffer_of_other_device",
        post_send_refuses_buffer_of_other_device,
    ),
    (
        "post_send_ud_refuses_ah_of_other_pd",
        post_send_ud_refuses_ah_of_other_pd,
    ),
    (
        "mr_map_refuses_buffer_of_other_device",
        mr_map_refuses_buffer_of_other_device,
    ),
    (
        "mr_registration_refuses_qp_of_other_pd",
        mr_registration_refuses_qp_of_other_pd,
    ),
    (
        "mr_registration_refuses_remote_write_without_local_write",
        mr_registration_refuses_remote_write_without_local_write,
    ),
    (
        "wait_refuses_request_of_other_qp",
        wait_refuses_request_of_other_qp,
    ),
    (
        "wait_refuses_released_unsignalled_send",
        wait_refuses_released_unsignalled_send,
    ),
    ("cm_id_takes_one_qp", cm_id_takes_one_qp),
    (
        "cm_connect_refuses_qp_of_other_id",
        cm_connect_refuses_qp_of_other_id,
    ),
    ("ah_resolves_roce_dmac", ah_resolves_roce_dmac),
    (
        "cm_events_of_destroyed_id_dropped",
        cm_events_of_destroyed_id_dropped,
    ),
    (
        "dma_buf_copies_exclude_each_other",
        dma_buf_copies_exclude_each_other,
    ),
    (
        "mr_not_locked_across_registration_wait",
        mr_not_locked_across_registration_wait,
    ),
    (
        "stream_inline_refuses_read_and_oversize",
        stream_inline_refuses_read_and_oversize,
    ),
    (
        "stream_takes_slots_and_gives_them_back",
        stream_takes_slots_and_gives_them_back,
    ),
    (
        "stream_dropped_with_requests_outstanding",
        stream_dropped_with_requests_outstanding,
    ),
    (
        "softirq_cq_freed_right_after_its_last_completion",
        softirq_cq_freed_right_after_its_last_completion,
    ),
    (
        "chunked_buffer_takes_an_sge_per_chunk",
        chunked_buffer_takes_an_sge_per_chunk,
    ),
    (
        "stale_rkey_refused_after_invalidate",
        stale_rkey_refused_after_invalidate,
    ),
    (
        "atomic_needs_remote_atomic_access_and_alignment",
        atomic_needs_remote_atomic_access_and_alignment,
    ),
    ("srq_shared_by_two_qps", srq_shared_by_two_qps),
    ("alt_path_needs_auto_path_mig", alt_path_needs_auto_path_mig),
    (
        "direct_cq_shared_by_two_tasks_dropping_qps",
        races::direct_cq_shared_by_two_tasks_dropping_qps,
    ),
    (
        "event_ring_of_4096_snapshotted",
        races::event_ring_of_4096_snapshotted,
    ),
    (
        "event_sink_sleeps_and_drops_its_objects",
        races::event_sink_sleeps_and_drops_its_objects,
    ),
    (
        "cm_requests_while_accepted_ids_are_destroyed",
        races::cm_requests_while_accepted_ids_are_destroyed,
    ),
];

/// `selftest`: the control file.
pub(crate) struct Runner {
    devices: Arc<Devices>,
    report: Pin<KBox<Mutex<KVec<u8>>>>,
}

impl Runner {
    pub(crate) fn new(devices: Arc<Devices>) -> Result<Self> {
        Ok(Runner {
            devices,
            report: KBox::pin_init(new_mutex!(KVec::new()), GFP_KERNEL)?,
        })
    }

    fn find(&self, name: &str) -> Option<ARef<Device>> {
        self.devices
            .lock()
            .iter()
            .find(|d| d.name().as_str() == name)
            .cloned()
    }
}

fn parse_ipv4(s: &str) -> Option<Ipv4> {
    let mut a = [0u8; 4];
    let mut parts = s.split('.');
    for b in a.iter_mut() {
        *b = parts.next()?.parse().ok()?;
    }
    parts.next().is_none().then_some(Ipv4(a))
}

impl Store for Runner {
    fn store(&self, input: &[u8]) -> Result {
        let text = core::str::from_utf8(input).map_err(|_| EINVAL)?;
        let mut words = text.split_whitespace();
        let (Some(a), Some(b), Some(ip), only, None) = (
            words.next(),
            words.next(),
            words.next(),
            words.next(),
            words.next(),
        ) else {
            pr_err!("selftest: want 'DEVICE_A DEVICE_B IPV4_OF_B [CASE]'\n");
            return Err(EINVAL);
        };
        if let Some(only) = only {
            if !CASES.iter().any(|(name, _)| *name == only) {
                pr_err!("selftest: no case '{}'\n", only);
                return Err(ENOENT);
            }
        }
        let ip = parse_ipv4(ip).ok_or_else(|| {
            pr_err!("selftest: '{}' is not an IPv4 address\n", ip);
            EINVAL
        })?;
        let (Some(a), Some(b)) = (self.find(a), self.find(b)) else {
            pr_err!("selftest: no device '{}' or '{}'\n", a, b);
            return Err(ENODEV);
        };
        if a.same_as(&b) {
            pr_err!("selftest: the two devices must differ\n");
            return Err(EINVAL);
        }
        let env = Env { a, b, ip };
        let mut rep = Text(KVec::new());
        let cases = CASES.iter().filter(|(name, _)| match only {
            None => true,
            Some(o) => o == *name,
        });
        let _ = writeln!(rep, "1..{}", cases.clone().count());
        for (n, (name, case)) in cases.enumerate() {
            let mut why = Text(KVec::new());
            match case(&env, &mut why) {
                Ok(()) => {
                    let _ = writeln!(rep, "ok {} {}", n + 1, name);
                    if !why.0.is_empty() {
                        let _ = writeln!(rep, "# {}", core::str::from_utf8(&why.0).unwrap_or("?"));
                    }
                }
                Err(what) => {
                    let why = core::str::from_utf8(&why.0).unwrap_or("?");
                    pr_err!("{}: {}: {}\n", name, what, why);
                    let _ = writeln!(rep, "not ok {} {} # {}: {}", n + 1, name, what, why);
                }
            }
        }
        *self.report.lock() = rep.0;
        Ok(())
    }
}

impl Show for Runner {
    fn show(&self, out: &mut dyn Write) -> Result {
        let report = self.report.lock();
        if report.is_empty() {
            for (name, _) in CASES {
                writeln!(out, "case {}", name)?;
            }
            return Ok(());
        }
        out.write_str(core::str::from_utf8(&report).unwrap_or("?\n"))?;
        Ok(())
    }
}
