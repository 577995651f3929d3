// SPDX-License-Identifier: GPL-2.0

//! Cases of memory regions: buffers of another device, QPs of another
//! PD, the access a registration gives and what a peer can do with it
//! (stale rkeys, atomics, on their own and on a stream), no lock held
//! across a registration's wait, an MR whose registration was given up.

use crate::common::{
    av, buf, caps, cq, first_gid, ok, pd_cq, port, rc_pair, rc_pair_access, rc_self, refused, Env,
    Outcome, RcPair, Text, TIMEOUT_MS,
};
use core::{
    fmt::Write,
    sync::atomic::{AtomicBool, AtomicI32, Ordering},
};
use kernel::{prelude::*, sync::Arc, workqueue};
use kverbs::{
    cq::Cq,
    device::{Device, Mtu},
    dma::DmaBuf,
    mr::Mr,
    pd::Pd,
    qp::{Access, AtomicOp, Cancel, InitAttr, Qp, RemoteBuf, RtrAttr, Rts, RtsAttr, SendOp},
    stream::{Segment, SendStream},
};

pub(crate) fn mr_map_refuses_buffer_of_other_device(env: &Env, out: &mut Text) -> Outcome {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let mr = ok(Mr::new(&pd, 4096), "MR", out)?;
    let b = ok(buf(&env.b), "buffer of B", out)?;
    refused(mr.map(&b), EINVAL, "MR of A mapping a buffer of B", out)
}

/// An RC QP of `qp_pd` in RTS and an MR of `mr_pd` mapped on a buffer, all
/// of device A.
fn qp_and_mapped_mr(env: &Env, qp_pd: &Pd, mr_pd: &Pd, out: &mut Text) -> Outcome<(Qp<Rts>, Mr)> {
    let cq = ok(cq(&env.a), "CQ", out)?;
    let qp = ok(rc_self(qp_pd, &cq), "QP", out)?;
    let mr = ok(Mr::new(mr_pd, 4096), "MR", out)?;
    let a = ok(buf(&env.a), "buffer", out)?;
    ok(mr.map(&a), "map", out)?;
    Ok((qp, mr))
}

pub(crate) fn mr_registration_refuses_qp_of_other_pd(env: &Env, out: &mut Text) -> Outcome {
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

pub(crate) fn mr_registration_refuses_remote_write_without_local_write(
    env: &Env,
    out: &mut Text,
) -> Outcome {
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
/// An RC QP of `pd` in RTS whose send queue is held up by a READ (of 64
/// bytes into the buffer returned) that no QP answers: what is posted
/// after it waits for the READ's retries (2.1 s each, 7 tries).
fn blocked_qp(dev: &Device, pd: &Pd, cq: &Cq, out: &mut Text) -> Outcome<(Qp<Rts>, Arc<DmaBuf>)> {
    let (sgid_index, dgid) = first_gid(dev).ok_or("no GID")?;
    let init = InitAttr {
        pkey_index: 0,
        access: Access::LOCAL_WRITE | Access::REMOTE_READ,
    };
    let qp = ok(Qp::new_rc(pd, port(dev), cq, cq, caps(4)), "QP", out)?;
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
    Ok((qp, a))
}

pub(crate) fn mr_not_locked_across_registration_wait(env: &Env, out: &mut Text) -> Outcome {
    let dev = &env.a;
    let (pd, cq) = pd_cq(dev, out)?;
    let (qp, a) = blocked_qp(dev, &pd, &cq, out)?;
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

/// Posts `op` on `qp` (16 bytes of `local` at `off`) and says how it
/// completed.
fn one_op(
    qp: &Qp<Rts>,
    op: SendOp,
    local: &Arc<DmaBuf>,
    off: usize,
    out: &mut Text,
) -> Outcome<kverbs::wc::WcStatus> {
    let c = Cancel::new();
    let id = ok(qp.post_send(op, local, off, 16, true), "post", out)?;
    Ok(ok(qp.wait(id, TIMEOUT_MS, &c), "completion", out)?.status)
}

/// Registers `mr` on `target` with `access` through the first QP (the
/// region's owner) of a new RC pair of `pd` whose QPs allow `qp_access`
/// ([`rc_pair_access`]), as the cases of a peer reaching a region do, each
/// with a new pair (a refused request takes its pair to the error state).
/// `names` are the pair's and the registration's in what a failure says.
/// Returns the address and rkey the peer reaches the region by, and the
/// pair.
fn register_on_new_pair(
    pd: &Pd,
    qp_access: Access,
    mr: &Mr,
    target: &Arc<DmaBuf>,
    access: Access,
    (pair, registration): (&'static str, &'static str),
    out: &mut Text,
) -> Outcome<(RemoteBuf, RcPair)> {
    let c = Cancel::new();
    let pair = ok(rc_pair_access(pd, qp_access), pair, out)?;
    let remote = ok(
        mr.register(&pair.0, target, access, TIMEOUT_MS, &c),
        registration,
        out,
    )?;
    Ok((remote, pair))
}

/// The rkey's scope: once an MR is invalidated, the address and rkey a peer
/// was given reach nothing. An RDMA WRITE and an RDMA READ with them
/// complete with a remote access error and the buffer is unchanged; a new
/// registration of the same buffer has a new key, under which the old one
/// still fails and the new one works. (Each refused request takes its QP
/// pair to the error state, so each uses a new pair.)
pub(crate) fn stale_rkey_refused_after_invalidate(env: &Env, out: &mut Text) -> Outcome {
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
    let seen = |out: &mut Text| -> Outcome<[u8; 16]> {
        let mut got = [0u8; 16];
        ok(target.read(0, &mut got), "target read", out)?;
        Ok(got)
    };

    let names = ("pair 1", "registration");
    let (old, (own, peer, _ca, _cb)) =
        register_on_new_pair(&pd, access, &mr, &target, access, names, out)?;
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

    let names = ("pair 3", "registration 2");
    let (new, (_own, peer, _ca3, _cb3)) =
        register_on_new_pair(&pd, access, &mr, &target, access, names, out)?;
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

/// A SEND with invalidate (as an NVMe/RDMA target answers) kills the
/// peer's registration it names: the peer's receive completion says which
/// rkey (`Wc::invalidated_rkey`), an RDMA WRITE with the rkey through
/// another QP pair of the PD (a refused request takes its pair, the
/// responder's QP too, to the error state) completes with a remote access
/// error and leaves the buffer unchanged, and the owner's own LOCAL_INV of
/// the region, invalid already, still succeeds (the layer's `Mr` posts it
/// before it lets the buffer go).
pub(crate) fn send_with_invalidate_kills_peer_rkey(env: &Env, out: &mut Text) -> Outcome {
    use kverbs::wc::WcStatus;
    let dev = &env.a;
    let c = Cancel::new();
    let pd = ok(Pd::new(dev), "PD", out)?;
    let target = ok(buf(dev), "target buffer", out)?;
    let src = ok(buf(dev), "source buffer", out)?;
    let rx = ok(buf(dev), "receive buffer", out)?;
    let (a, b) = ([0xa5u8; 16], [0x5bu8; 16]);
    ok(src.write(0, &a), "source A", out)?;
    ok(src.write(16, &b), "source B", out)?;
    let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    let mr = ok(Mr::new(&pd, 4096), "MR", out)?;
    let mut got = [0u8; 16];
    let names = ("pair", "registration");
    let (remote, (own, peer, _ca, _cb)) =
        register_on_new_pair(&pd, access, &mr, &target, access, names, out)?;
    if one_op(&peer, SendOp::Write(remote), &src, 0, out)? != WcStatus::Success {
        return Err("a WRITE under the live rkey failed");
    }
    let rid = ok(own.post_recv(&rx, 0, 16), "receive", out)?;
    let st = one_op(&peer, SendOp::SendWithInv(remote.rkey), &src, 16, out)?;
    let wc = ok(own.wait(rid, TIMEOUT_MS, &c), "receive completion", out)?;
    let _ = write!(
        out,
        "SEND with invalidate of {:#x}: {}, received: {}, invalidated {:x?}; ",
        remote.rkey, st, wc.status, wc.invalidated_rkey
    );
    if st != WcStatus::Success || wc.status != WcStatus::Success {
        return Err("the SEND with invalidate failed");
    }
    if wc.invalidated_rkey != Some(remote.rkey) {
        return Err("the receive completion does not name the invalidated rkey");
    }
    ok(rx.read(0, &mut got), "receive buffer read", out)?;
    if got != b {
        return Err("the SEND's data did not arrive");
    }
    let (_own2, peer2, _ca2, _cb2) = ok(rc_pair(&pd), "pair 2", out)?;
    let st = one_op(&peer2, SendOp::Write(remote), &src, 16, out)?;
    ok(target.read(0, &mut got), "target read", out)?;
    let _ = write!(out, "WRITE after it: {}", st);
    if st != WcStatus::RemAccessErr || got != a {
        return Err(
            "a WRITE with the remotely invalidated rkey was not refused, or changed the buffer",
        );
    }
    ok(
        mr.invalidate(&own, TIMEOUT_MS, &c),
        "LOCAL_INV after the remote one",
        out,
    )?;
    Ok(())
}

/// Atomics reach only memory registered for them, with their operands
/// checked: misaligned local or remote addresses and remote buffers under
/// 8 bytes are refused when posted (EINVAL); a fetch-and-add on a region
/// without remote atomic access completes with a remote access error and
/// leaves it unchanged (the rights are given only when asked for); with
/// them, fetch-and-add and compare-and-swap return the old value and
/// change the target as the verbs say.
pub(crate) fn atomic_needs_remote_atomic_access_and_alignment(
    env: &Env,
    out: &mut Text,
) -> Outcome {
    use kverbs::wc::WcStatus;
    let dev = &env.a;
    let c = Cancel::new();
    let pd = ok(Pd::new(dev), "PD", out)?;
    let target = ok(buf(dev), "target buffer", out)?;
    let old = ok(buf(dev), "old value buffer", out)?;
    let start = 0x0102_0304_0506_0708u64;
    ok(target.write(0, &start.to_ne_bytes()), "target", out)?;
    let value = |b: &DmaBuf, out: &mut Text| -> Outcome<u64> {
        let mut v = [0u8; 8];
        ok(b.read(0, &mut v), "read", out)?;
        Ok(u64::from_ne_bytes(v))
    };
    let rw = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    let all = rw | Access::REMOTE_ATOMIC;
    let atomic = |qp: &Qp<Rts>, op: AtomicOp, out: &mut Text| {
        let id = ok(qp.post_atomic(op, &old, 0, true), "post atomic", out)?;
        Outcome::Ok(ok(qp.wait(id, TIMEOUT_MS, &c), "completion", out)?.status)
    };

    // Without remote atomic access on the region. The refused request
    // takes both QPs to the error state: the region is deregistered when
    // dropped, a second one is used below.
    let mr = ok(Mr::new(&pd, 4096), "MR", out)?;
    let names = ("pair 1", "registration");
    let (remote, (_own, peer, _ca, _cb)) =
        register_on_new_pair(&pd, all, &mr, &target, rw, names, out)?;
    let add = AtomicOp::FetchAdd { remote, add: 5 };
    let st = atomic(&peer, add, out)?;
    let _ = write!(out, "fetch-and-add without REMOTE_ATOMIC: {}; ", st);
    if st != WcStatus::RemAccessErr || value(&target, out)? != start {
        return Err("an atomic reached a region without remote atomic access");
    }

    // With it.
    let mr = ok(Mr::new(&pd, 4096), "MR 2", out)?;
    let names = ("pair 2", "registration 2");
    let (remote, (own, peer, _ca2, _cb2)) =
        register_on_new_pair(&pd, all, &mr, &target, all, names, out)?;
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

/// Atomics on a send stream: a stream refuses an atomic whose segment is
/// not 8 aligned bytes, or whose target is misaligned or short, and an
/// inline one; a stream alternating fetch-and-adds with RDMA WRITEs
/// (`ib_atomic_wr` and `ib_rdma_wr` in one chain) adds once per atomic,
/// writes, and returns the old value of the last.
pub(crate) fn atomic_stream_chains_fetch_adds_beside_writes(env: &Env, out: &mut Text) -> Outcome {
    let dev = &env.a;
    let c = Cancel::new();
    let pd = ok(Pd::new(dev), "PD", out)?;
    let target = ok(buf(dev), "target buffer", out)?;
    let old = ok(buf(dev), "old value buffer", out)?;
    let start = 0x1111_2222_3333_4444u64;
    let data = *b"written!";
    ok(target.write(0, &start.to_ne_bytes()), "target", out)?;
    ok(old.write(8, &data), "source", out)?;
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
    let mr = ok(Mr::new(&pd, 4096), "MR", out)?;
    let (remote, (own, peer, _ca, _cb)) =
        register_on_new_pair(&pd, all, &mr, &target, all, ("pair", "registration"), out)?;
    let seg = |offset, len| Segment {
        buf: old.clone(),
        offset,
        len,
    };
    let add = |remote| SendOp::Atomic(AtomicOp::FetchAdd { remote, add: 1 });
    for (op, s, what) in [
        (add(remote), seg(0, 4), "an atomic on 4 bytes"),
        (
            add(remote),
            seg(4, 8),
            "an atomic at a misaligned local offset",
        ),
        (
            add(RemoteBuf {
                addr: remote.addr + 4,
                ..remote
            }),
            seg(0, 8),
            "an atomic at a misaligned remote address",
        ),
        (
            add(RemoteBuf { len: 4, ..remote }),
            seg(0, 8),
            "an atomic on a remote buffer of 4 bytes",
        ),
    ] {
        refused(SendStream::new(&peer, &[(op, s)], 1, 1), EINVAL, what, out)?;
    }
    refused(
        SendStream::new_inline(&peer, &[(add(remote), seg(0, 8))], 1, 1),
        EINVAL,
        "an inline atomic",
        out,
    )?;
    let write = SendOp::Write(RemoteBuf {
        addr: remote.addr + 8,
        len: 8,
        ..remote
    });
    let mut s = ok(
        SendStream::new(&peer, &[(add(remote), seg(0, 8)), (write, seg(8, 8))], 4, 4),
        "stream of fetch-and-adds and writes",
        out,
    )?;
    ok(
        s.post(4, true),
        "a chain of 2 fetch-and-adds and 2 writes",
        out,
    )?;
    ok(s.wait(4, TIMEOUT_MS, &c), "their completion", out)?;
    drop(s);
    let (mut v, mut w) = ([0u8; 8], [0u8; 8]);
    ok(target.read(0, &mut v), "read target", out)?;
    ok(target.read(8, &mut w), "read written", out)?;
    let now = u64::from_ne_bytes(v);
    ok(old.read(0, &mut v), "read old value", out)?;
    let got = u64::from_ne_bytes(v);
    let _ = write!(out, "target {:#x}, old value {:#x}; ", now, got);
    if now != start + 2 || got != start + 1 {
        return Err("two fetch-and-adds in a chain did not add 2 and return the old value");
    }
    if w != data {
        return Err("the writes chained with atomics did not land");
    }
    ok(mr.invalidate(&own, TIMEOUT_MS, &c), "LOCAL_INV", out)?;
    let _ = write!(out, "atomics and writes in one chain ok");
    Ok(())
}

/// A registration given up before it completed (posted behind a READ
/// nobody answers, waited for 200 ms) may still execute on its QP's
/// schedule: a LOCAL_INV through another QP could run before it, and the
/// buffer be let go while the key it makes valid maps it. The MR refuses
/// every call from then on (`EBUSY`) and goes with its drop, once its
/// QP's drop has flushed the request.
pub(crate) fn mr_given_up_registration_refuses_every_call(env: &Env, out: &mut Text) -> Outcome {
    let dev = &env.a;
    let (pd, cq) = pd_cq(dev, out)?;
    let (qp, a) = blocked_qp(dev, &pd, &cq, out)?;
    let other = ok(rc_self(&pd, &cq), "second QP", out)?;
    let mr = ok(Mr::new(&pd, 4096), "MR", out)?;
    ok(mr.map(&a), "map", out)?;
    let c = Cancel::new();
    refused(
        mr.post_registration(&qp, Access::LOCAL_WRITE, 200, &c),
        kverbs::errno::etimedout(),
        "the registration behind the READ",
        out,
    )?;
    refused(
        mr.invalidate(&other, TIMEOUT_MS, &c),
        EBUSY,
        "an invalidation through another QP",
        out,
    )?;
    refused(
        mr.invalidate(&qp, TIMEOUT_MS, &c),
        EBUSY,
        "an invalidation through its QP",
        out,
    )?;
    refused(
        mr.post_registration(&other, Access::LOCAL_WRITE, TIMEOUT_MS, &c),
        EBUSY,
        "a second registration",
        out,
    )?;
    let b = ok(buf(dev), "second buffer", out)?;
    refused(mr.map(&b), EBUSY, "a map", out)?;
    // The MR first (the request holds it), then the QPs: the drain flushes
    // the READ and the registration, and the MR goes with the latter.
    drop(mr);
    drop(qp);
    drop(other);
    Ok(())
}
