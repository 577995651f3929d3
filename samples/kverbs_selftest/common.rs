// SPDX-License-Identifier: GPL-2.0

//! What the cases share: the text they write, what they run with, how
//! they say that the layer refused or accepted, and the objects most of
//! them start from (QPs connected to themselves or to each other, CQs,
//! buffers).

use core::fmt::Write;
use kernel::{new_mutex, prelude::*, sync::Arc, sync::Mutex};
use kverbs::ARef;
use kverbs::{
    cm::CmId,
    cq::{Cq, PollCtx},
    device::{Device, Gid, Mtu},
    dma::DmaBuf,
    event::EventSink,
    pd::Pd,
    qp::{Access, AddressVector, InitAttr, Qp, QpCaps, RtrAttr, Rts, RtsAttr, Ud},
    srq::Srq,
    stream::Segment,
    tcp::Ipv4,
};

/// Text written by the cases.
pub(crate) struct Text(pub(crate) KVec<u8>);

impl Write for Text {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0
            .extend_from_slice(s.as_bytes(), GFP_KERNEL)
            .map_err(|_| core::fmt::Error)
    }
}

/// What the cases run with.
pub(crate) struct Env {
    pub(crate) a: ARef<Device>,
    pub(crate) b: ARef<Device>,
    pub(crate) ip: Ipv4,
    /// Where a case leaves what it holds after it returns.
    pub(crate) held: Arc<Held>,
}

/// What a case leaves held after it returns: an rdma_cm listener, until
/// its device goes (its sink drops it then) or the module does.
#[pin_data]
pub(crate) struct Held {
    #[pin]
    pub(crate) listener: Mutex<Option<CmId>>,
}

impl Held {
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Held {
                listener <- new_mutex!(None),
            }),
            GFP_KERNEL,
        )
    }
}

/// What a case, or a step of one, gives: `T`, or what failed (the case's
/// `not ok` line says it, after the case's name).
pub(crate) type Outcome<T = ()> = core::result::Result<T, &'static str>;

/// A case: `Ok` if the layer behaved, else why not.
pub(crate) type Case = fn(&Env, &mut Text) -> Outcome;

pub(crate) const TIMEOUT_MS: u32 = 2000;
pub(crate) const QKEY: u32 = 0x1234_5678;

pub(crate) fn port(dev: &Device) -> u32 {
    *dev.ports().start()
}

pub(crate) fn caps(n: u32) -> QpCaps {
    QpCaps {
        max_send_wr: n,
        max_recv_wr: n,
        ..Default::default()
    }
}

/// `r` failed with `want`; says what it did otherwise.
pub(crate) fn refused<T>(r: Result<T>, want: Error, what: &'static str, out: &mut Text) -> Outcome {
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
pub(crate) fn ok<T>(r: Result<T>, what: &'static str, out: &mut Text) -> Outcome<T> {
    r.map_err(|e| {
        let _ = write!(out, "{}: error {}", what, e.to_errno());
        what
    })
}

/// A GID of `dev`'s first port and its index: the first IPv4 one (a RoCE
/// v2 GID routes over `lo`, the link-local one does not), else the first.
pub(crate) fn first_gid(dev: &Device) -> Option<(u32, Gid)> {
    let gids = || (0..64).filter_map(|i| dev.gid_attr(port(dev), i).ok().map(|g| (i, g.gid())));
    gids()
        .find(|(_, g)| g.is_v4_mapped())
        .or_else(|| gids().next())
}

/// An RC QP of `pd` connected to itself, in RTS.
pub(crate) fn rc_self(pd: &Pd, cq: &Cq) -> Result<Qp<Rts>> {
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
pub(crate) fn to_rts(dev: &Device, q: Qp<kverbs::qp::Init>, dest: u32) -> Result<Qp<Rts>> {
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

/// Two RC QPs connected to each other, in RTS, then their CQs (so that,
/// bound as one pattern, the QPs are dropped before the CQs): the owner of
/// a memory region and a peer that reaches it, the owner's CQ, the peer's.
pub(crate) type RcPair = (Qp<Rts>, Qp<Rts>, Cq, Cq);

/// Two RC QPs of `pd` connected to each other, in RTS, each with its own
/// CQ: the owner of a memory region and a peer that reaches it.
pub(crate) fn rc_pair(pd: &Pd) -> Result<RcPair> {
    rc_pair_access(
        pd,
        Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
    )
}

/// [`rc_pair`] with the QPs' remote `access`.
pub(crate) fn rc_pair_access(pd: &Pd, access: Access) -> Result<RcPair> {
    let dev = pd.device();
    let (ca, cb) = (cq(dev)?, cq(dev)?);
    let a = Qp::new_rc(pd, port(dev), &ca, &ca, caps(4))?;
    let b = Qp::new_rc(pd, port(dev), &cb, &cb, caps(4))?;
    let (a, b) = connect_pair(dev, a, b, access)?;
    Ok((a, b, ca, cb))
}

/// Connects `a` and `b`, two RC QPs of one device, to each other, with
/// the remote `access` they allow.
pub(crate) fn connect_pair(
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
pub(crate) fn ud_rts(pd: &Pd, cq: &Cq) -> Result<Qp<Rts, Ud>> {
    Qp::new_ud(pd, port(pd.device()), cq, cq, caps(2))?
        .to_init_ud(0, QKEY)?
        .to_rtr_ud()?
        .to_rts_ud(0)
}

pub(crate) fn av(dgid: Gid, sgid_index: u32) -> AddressVector {
    AddressVector::new(dgid, sgid_index as u8)
}

pub(crate) fn cq(dev: &Device) -> Result<Cq> {
    Cq::new(dev, 32, PollCtx::Softirq)
}

/// A PD of `dev` and a [`cq`] of it, made in that order (`PD` and `CQ` in
/// what a failure says): what most cases start from. Bound as
/// `let (pd, cq)`, they are dropped as two locals made in that order
/// would be: the CQ, then the PD.
pub(crate) fn pd_cq(dev: &Device, out: &mut Text) -> Outcome<(Pd, Cq)> {
    let pd = ok(Pd::new(dev), "PD", out)?;
    let cq = ok(cq(dev), "CQ", out)?;
    Ok((pd, cq))
}

/// An RC QP connected to itself ([`rc_self`]) with all it needs, and a
/// buffer to send from and receive into, all of one device: what the cases
/// of sends and receives on one QP start from.
///
/// The fields are dropped in the order they are declared, which is the
/// reverse of the order they are made in (as locals would be): the buffer,
/// then the QP, before the CQ it completes on, before the PD of both.
pub(crate) struct SelfLoop {
    /// A [`buf`] of the device (`buffer` in what a failure says).
    pub(crate) buf: Arc<DmaBuf>,
    /// The QP, in RTS (`QP` in what a failure says).
    pub(crate) qp: Qp<Rts>,
    /// The QP's CQ, for its sends and receives: only held.
    _cq: Cq,
    /// The PD of the QP and the buffer: only held.
    _pd: Pd,
}

impl SelfLoop {
    /// Makes the PD and CQ ([`pd_cq`]), the QP, then the buffer, of `dev`.
    pub(crate) fn new(dev: &Device, out: &mut Text) -> Outcome<Self> {
        let (pd, cq) = pd_cq(dev, out)?;
        let qp = ok(rc_self(&pd, &cq), "QP", out)?;
        let buf = ok(buf(dev), "buffer", out)?;
        Ok(SelfLoop {
            buf,
            qp,
            _cq: cq,
            _pd: pd,
        })
    }
}

/// The `sink` a case made (`sink` in what a failure says), and an SRQ of
/// `pd` of 8 receives of one SGE completing on `cq`, whose events go to
/// the sink (`SRQ`). Bound as `let (sink, srq)`, the SRQ is dropped before
/// the case's handle of the sink, as locals made in that order would be.
pub(crate) fn srq_with_sink<S: EventSink + 'static>(
    pd: &Pd,
    cq: &Cq,
    sink: Result<Arc<S>>,
    out: &mut Text,
) -> Outcome<(Arc<S>, Srq)> {
    let sink = ok(sink, "sink", out)?;
    let srq = ok(Srq::new_with_events(pd, cq, 8, 1, sink.clone()), "SRQ", out)?;
    Ok((sink, srq))
}

pub(crate) fn buf(dev: &Device) -> Result<Arc<DmaBuf>> {
    Ok(Arc::new(DmaBuf::new(dev, 4096)?, GFP_KERNEL)?)
}

pub(crate) fn seg(b: &Arc<DmaBuf>, len: usize) -> Segment {
    Segment {
        buf: b.clone(),
        offset: 0,
        len,
    }
}

/// Waits up to `ms` for `done` to hold, in 10 ms steps.
pub(crate) fn wait_until(ms: u64, done: impl Fn() -> bool) -> bool {
    let start = kverbs::now_ns();
    while !done() {
        if kverbs::now_ns() - start > ms * 1_000_000 {
            return false;
        }
        kverbs::msleep(10);
    }
    true
}

/// Puts `item` in the first free entry of `list`, or at its end.
pub(crate) fn put<T>(list: &mut KVec<Option<T>>, item: T) -> Result {
    match list.iter_mut().find(|s| s.is_none()) {
        Some(free) => *free = Some(item),
        None => list.push(Some(item), GFP_KERNEL)?,
    }
    Ok(())
}

/// A control file's command `CMD N [WORD...]`: the command, the number
/// and the rest.
pub(crate) fn command(input: &[u8]) -> Result<(&str, u32, KVec<&str>)> {
    let text = core::str::from_utf8(input).map_err(|_| EINVAL)?.trim();
    let mut words = text.split_ascii_whitespace();
    let cmd = words.next().ok_or(EINVAL)?;
    let n: u32 = words.next().ok_or(EINVAL)?.parse().map_err(|_| EINVAL)?;
    let mut rest = KVec::new();
    for w in words {
        rest.push(w, GFP_KERNEL)?;
    }
    Ok((cmd, n, rest))
}

/// Takes one from `n` if it is not 0 (a count of things still to do).
pub(crate) fn take_one(n: &core::sync::atomic::AtomicU32) -> bool {
    use core::sync::atomic::Ordering;
    n.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1))
        .is_ok()
}
