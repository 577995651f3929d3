// SPDX-License-Identifier: GPL-2.0

//! The pool of live objects and the calls the exerciser makes on them.
//!
//! Each step picks one call of the safe API at random and its arguments
//! from the pool, objects of the other device and of other PDs included,
//! and random lengths, offsets, keys, queue sizes and timeouts. A call that
//! returns an object adds it to the pool; drops (of any object, in any
//! order) and, when asked, `mem::forget` take them out. Where the layer
//! must refuse (objects of two devices or PDs mixed, a range past a
//! buffer, a request id of another QP), an accepted call is a violation,
//! counted and described; everything else may succeed or fail with an
//! errno, which is counted. The kernel's own checks (KASAN, lockdep,
//! kmemleak, the drain's and the core's warnings) do the rest. The calls
//! of MRs, UD QPs, rdma_cm, streams and timers are in `pool/`, one file
//! each.

mod cm;
mod mr;
mod stream;
mod timer;
mod ud;

use crate::rng::Rng;
use crate::stats::{Stats, Text};
use cm::{CmPool, Told};
use core::fmt::Write;
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    ah::Ah,
    cq::{Cq, PollCtx},
    delayed::Delayed,
    device::{Device, Mtu},
    dma::DmaBuf,
    mr::Mr,
    pd::Pd,
    qp::{
        Access, AddressVector, Cancel, ErrorState, Init, InitAttr, Qp, QpCaps, RemoteBuf, Reset,
        RtrAttr, Rts, RtsAttr, SendOp, Ud, Waited, WrId,
    },
    srq::{Srq, SrqWrId},
    ARef,
};

/// Objects of each kind the pool keeps at most: a call that would make one
/// more drops one first.
const MAX_EACH: usize = 6;
const QKEY: u32 = 0x1111_2222;

/// A QP of the pool: its serial (which QP a request id came from) and its
/// device.
struct Held<Q> {
    serial: u64,
    dev: usize,
    qp: Q,
}

impl<Q> Held<Q> {
    /// The same QP after the transition `f`, if it succeeds.
    fn then<R>(self, f: impl FnOnce(Q) -> Result<R>) -> Result<Held<R>> {
        let (serial, dev) = (self.serial, self.dev);
        f(self.qp).map(|qp| Held { serial, dev, qp })
    }
}

/// The live objects of one worker, and its generator.
pub(crate) struct Pool<'a> {
    devs: &'a [ARef<Device>],
    rng: Rng,
    forget: bool,
    trace: bool,
    step: u64,
    serial: u64,
    pub(crate) stats: Stats,
    pds: KVec<(usize, Pd)>,
    cqs: KVec<(usize, Cq)>,
    bufs: KVec<(usize, Arc<DmaBuf>)>,
    reset: KVec<Held<Qp<Reset>>>,
    init: KVec<Held<Qp<Init>>>,
    rts: KVec<Held<Qp<Rts>>>,
    err: KVec<Held<Qp<ErrorState>>>,
    ud: KVec<Held<Qp<Rts, Ud>>>,
    srqs: KVec<(usize, Srq)>,
    mrs: KVec<(usize, Mr)>,
    remotes: KVec<RemoteBuf>,
    ahs: KVec<(usize, Ah)>,
    ids: KVec<(u64, WrId)>,
    srq_ids: KVec<SrqWrId>,
    cm: CmPool,
    timers: KVec<Delayed>,
    /// Timers that own themselves and have not dropped themselves yet.
    own_live: Option<Arc<core::sync::atomic::AtomicU32>>,
    /// The sink of the worker's event queues and QPs, once made.
    told: Option<Arc<Told>>,
}

/// Takes entry `i` out of `list` (the 6.12 `KVec` has no `remove`); on an
/// allocation failure the others are dropped too.
fn remove<T>(list: &mut KVec<T>, i: usize) -> Option<T> {
    let old = core::mem::replace(list, KVec::new());
    let _ = list.reserve(old.len(), GFP_KERNEL);
    let mut out = None;
    for (j, v) in old.into_iter().enumerate() {
        if j == i {
            out = Some(v);
        } else {
            let _ = list.push(v, GFP_KERNEL);
        }
    }
    out
}

/// Pushes `v` onto `list`, first dropping a random entry if it is full.
fn keep<T>(rng: &mut Rng, st: &mut Stats, list: &mut KVec<T>, v: T) {
    if list.len() >= MAX_EACH {
        let i = rng.below(list.len());
        drop(remove(list, i));
        st.dropped += 1;
    }
    if list.push(v, GFP_KERNEL).is_ok() {
        st.made += 1;
    }
}

fn pick<T>(rng: &mut Rng, list: &[T]) -> Option<usize> {
    (!list.is_empty()).then(|| rng.below(list.len()))
}

/// Takes a random entry out of `list`.
fn take<T>(rng: &mut Rng, list: &mut KVec<T>) -> Option<T> {
    let i = pick(rng, list)?;
    remove(list, i)
}

const CTXS: [PollCtx; 4] = [
    PollCtx::Softirq,
    PollCtx::Workqueue,
    PollCtx::Direct,
    PollCtx::Adaptive,
];

impl<'a> Pool<'a> {
    pub(crate) fn new(devs: &'a [ARef<Device>], seed: u64, forget: bool, trace: bool) -> Self {
        Pool {
            devs,
            rng: Rng::new(seed),
            forget,
            trace,
            step: 0,
            serial: 0,
            stats: Stats::default(),
            pds: KVec::new(),
            cqs: KVec::new(),
            bufs: KVec::new(),
            reset: KVec::new(),
            init: KVec::new(),
            rts: KVec::new(),
            err: KVec::new(),
            ud: KVec::new(),
            srqs: KVec::new(),
            mrs: KVec::new(),
            remotes: KVec::new(),
            ahs: KVec::new(),
            ids: KVec::new(),
            srq_ids: KVec::new(),
            cm: CmPool::default(),
            timers: KVec::new(),
            own_live: None,
            told: None,
        }
    }

    /// A new QP of device `d`, with the next serial.
    fn held<Q>(&mut self, d: usize, qp: Q) -> Held<Q> {
        self.serial += 1;
        Held {
            serial: self.serial,
            dev: d,
            qp,
        }
    }

    fn dev(&mut self) -> usize {
        self.rng.below(self.devs.len())
    }

    fn port(&self, d: usize) -> u32 {
        *self.devs[d].ports().start()
    }

    /// Records a call that the layer accepted though it must refuse it.
    fn violation(&mut self, what: core::fmt::Arguments<'_>) {
        self.stats.violations += 1;
        if self.stats.violations == 1 {
            let step = self.step;
            let _ = writeln!(
                Text(&mut self.stats.text),
                "step {}: accepted: {}",
                step,
                what
            );
        }
    }

    fn trace(&mut self, what: &str) {
        if self.trace {
            let step = self.step;
            let _ = writeln!(Text(&mut self.stats.text), "{} {}", step, what);
        }
    }

    fn caps(&mut self) -> QpCaps {
        QpCaps {
            max_send_wr: self.rng.below(9) as u32,
            max_recv_wr: self.rng.below(9) as u32,
            max_inline_data: if self.rng.one_in(4) { 64 } else { 0 },
            max_sge: self.rng.below(3) as u32,
            // Not drawn: the seeds' streams stay as they were.
            max_recv_sge: 0,
        }
    }

    fn access(&mut self) -> Access {
        let mut a = Access::NONE;
        for f in [
            Access::LOCAL_WRITE,
            Access::REMOTE_WRITE,
            Access::REMOTE_READ,
            Access::REMOTE_ATOMIC,
        ] {
            if self.rng.one_in(2) {
                a = a | f;
            }
        }
        a
    }

    fn timeout(&mut self) -> u32 {
        [0, 1, 5, 20][self.rng.below(4)]
    }

    /// One random call.
    pub(crate) fn step(&mut self) {
        self.step += 1;
        match self.rng.below(26) {
            0 => self.new_pd(),
            1 | 2 => self.new_cq(),
            3 => self.new_buf(),
            4 | 5 => self.new_qp(),
            6 => self.init_one(),
            7 | 8 => self.rts_one(),
            9 | 10 => self.post_recv(),
            11 | 12 => self.post_send(),
            13 | 14 => self.wait(),
            15 => self.srq(),
            16 => self.mr(),
            17 => self.ud(),
            18 => self.error_one(),
            19 => self.drop_one(),
            20 => self.query(),
            21 | 22 => self.cm(),
            23 => self.stream(),
            24 => self.timer(),
            _ => self.forget_one(),
        }
    }

    /// Queries with random ports and indexes, and `mul_div` at the edges of
    /// 64 bits, its quotient checked by multiplying back.
    fn query(&mut self) {
        self.trace("query");
        let d = self.dev();
        let port = self.rng.below(4) as u32;
        let r = self.devs[d].query_port(port);
        self.stats.count(&r);
        let index = self.rng.size(256) as u32;
        let r = self.devs[d].gid_attr(port, index).map(|_| ());
        self.stats.count(&r);
        let mut edge = || match self.rng.below(4) {
            0 => u64::MAX - self.rng.below(3) as u64,
            1 => self.rng.below(3) as u64,
            2 => 1 << self.rng.below(64),
            _ => self.rng.next(),
        };
        let (a, b, c) = (edge(), edge(), edge());
        let q = kverbs::mul_div(a, b, c);
        self.stats.calls += 1;
        let p = u128::from(a) * u128::from(b);
        let exact =
            c != 0 && u128::from(q) * u128::from(c) <= p && p < (u128::from(q) + 1) * u128::from(c);
        let want_max = c != 0 && (p >> 64) as u64 >= c;
        if !(exact || (q == u64::MAX && want_max) || (c == 0 && q == 0)) {
            self.violation(format_args!("mul_div({}, {}, {}) = {}", a, b, c, q));
        }
    }

    fn new_pd(&mut self) {
        self.trace("pd");
        let d = self.dev();
        let r = Pd::new(&self.devs[d]);
        self.stats.count(&r);
        if let Ok(pd) = r {
            keep(&mut self.rng, &mut self.stats, &mut self.pds, (d, pd));
        }
    }

    fn new_cq(&mut self) {
        self.trace("cq");
        let d = self.dev();
        let n = self.rng.size(64) as u32;
        let ctx = CTXS[self.rng.below(4)];
        let r = Cq::new(&self.devs[d], n, ctx);
        self.stats.count(&r);
        if let Ok(cq) = r {
            keep(&mut self.rng, &mut self.stats, &mut self.cqs, (d, cq));
        }
    }

    fn new_buf(&mut self) {
        self.trace("buf");
        let d = self.dev();
        let len = self.rng.size(16384);
        let r = DmaBuf::new(&self.devs[d], len)
            .and_then(|b| Arc::new(b, GFP_KERNEL).map_err(Error::from));
        self.stats.count(&r);
        if let Ok(b) = r {
            keep(&mut self.rng, &mut self.stats, &mut self.bufs, (d, b));
        }
    }

    fn new_qp(&mut self) {
        self.trace("qp");
        let (Some(p), Some(s), Some(c)) = (
            pick(&mut self.rng, &self.pds),
            pick(&mut self.rng, &self.cqs),
            pick(&mut self.rng, &self.cqs),
        ) else {
            return;
        };
        let caps = self.caps();
        let d = self.pds[p].0;
        let mixed = self.cqs[s].0 != d || self.cqs[c].0 != d;
        let port = if self.rng.one_in(8) {
            self.rng.below(4) as u32
        } else {
            self.port(d)
        };
        let sink = if self.rng.one_in(4) {
            self.told()
        } else {
            None
        };
        let (pd, scq, rcq) = (&self.pds[p].1, &self.cqs[s].1, &self.cqs[c].1);
        let r = match sink {
            Some(k) => Qp::new_rc_with_events(pd, port, scq, rcq, caps, k),
            None => Qp::new_rc(pd, port, scq, rcq, caps),
        };
        self.stats.count(&r);
        if let Ok(qp) = r {
            if mixed {
                self.violation(format_args!("an RC QP with a CQ of another device"));
            }
            let h = self.held(d, qp);
            keep(&mut self.rng, &mut self.stats, &mut self.reset, h);
        }
    }

    /// A QP of the pool from RESET to INIT.
    fn init_one(&mut self) {
        self.trace("init");
        let Some(h) = take(&mut self.rng, &mut self.reset) else {
            return;
        };
        let attr = InitAttr {
            pkey_index: if self.rng.one_in(8) { 1000 } else { 0 },
            access: self.access(),
        };
        let r = h.then(|q| q.to_init(&attr));
        self.stats.count(&r);
        if let Ok(h) = r {
            keep(&mut self.rng, &mut self.stats, &mut self.init, h);
        }
    }

    /// An INIT QP to RTS, connected to itself or to another QP of the pool
    /// (of any device: a wrong destination is the peer's problem).
    fn rts_one(&mut self) {
        self.trace("rts");
        let Some(h) = take(&mut self.rng, &mut self.init) else {
            return;
        };
        let dev = &self.devs[h.dev];
        let gids = (0..8).filter_map(|i| {
            dev.gid_attr(*dev.ports().start(), i)
                .ok()
                .map(|g| (i, g.gid()))
        });
        let mut gid = None;
        for g in gids {
            if gid.is_none() || g.1.is_v4_mapped() {
                gid = Some(g);
            }
        }
        let Some((sgid_index, dgid)) = gid else {
            return;
        };
        let dest = match pick(&mut self.rng, &self.init) {
            Some(i) if self.rng.one_in(3) => self.init[i].qp.qp_num(),
            _ => h.qp.qp_num(),
        };
        let mtu = [Mtu::MTU_256, Mtu::MTU_1024, Mtu::MTU_4096][self.rng.below(3)];
        let rd = self.rng.below(3) as u8;
        let r = h.then(|q| {
            q.to_rtr(&RtrAttr {
                path_mtu: mtu,
                dest_qp_num: dest,
                rq_psn: 0,
                max_dest_rd_atomic: rd,
                min_rnr_timer: 1,
                av: AddressVector::new(dgid, sgid_index as u8),
            })
            .and_then(|q| {
                q.to_rts(&RtsAttr {
                    timeout: 10,
                    retry_cnt: 1,
                    rnr_retry: 1,
                    sq_psn: 0,
                    max_rd_atomic: rd,
                })
            })
        });
        self.stats.count(&r);
        if let Ok(h) = r {
            keep(&mut self.rng, &mut self.stats, &mut self.rts, h);
        }
    }

    /// A buffer of the pool and a range of it; whether the layer must refuse
    /// them for a QP of device `d`.
    fn range(&mut self, d: usize) -> Option<(Arc<DmaBuf>, usize, usize, bool)> {
        let b = pick(&mut self.rng, &self.bufs)?;
        let (bd, buf) = (self.bufs[b].0, self.bufs[b].1.clone());
        let off = self.rng.size(buf.len());
        let len = self.rng.size(buf.len());
        let bad = bd != d || off > buf.len() || len > buf.len() - off;
        Some((buf, off, len, bad))
    }

    fn post_recv(&mut self) {
        self.trace("post_recv");
        // On a QP in INIT or RTS, or on an SRQ: its serial (0 for an SRQ),
        // device and place in its list.
        let which = self.rng.below(3);
        let (serial, d, i) = match which {
            0 => match pick(&mut self.rng, &self.init) {
                Some(i) => (self.init[i].serial, self.init[i].dev, i),
                None => return,
            },
            1 => match pick(&mut self.rng, &self.rts) {
                Some(i) => (self.rts[i].serial, self.rts[i].dev, i),
                None => return,
            },
            _ => match pick(&mut self.rng, &self.srqs) {
                Some(i) => (0, self.srqs[i].0, i),
                None => return,
            },
        };
        let Some((buf, off, len, bad)) = self.range(d) else {
            return;
        };
        let r = match which {
            0 => self.init[i].qp.post_recv(&buf, off, len).map(Some),
            1 => self.rts[i].qp.post_recv(&buf, off, len).map(Some),
            _ => match self.srqs[i].1.post_recv(&buf, off, len) {
                Ok(id) => {
                    keep(&mut self.rng, &mut self.stats, &mut self.srq_ids, id);
                    Ok(None)
                }
                Err(e) => Err(e),
            },
        };
        self.stats.count(&r);
        if r.is_ok() && bad && len > 0 {
            self.violation(format_args!(
                "a receive on {} bytes at {} of a buffer of {} bytes or of another device",
                len,
                off,
                buf.len()
            ));
        }
        if let Ok(Some(id)) = r {
            keep(&mut self.rng, &mut self.stats, &mut self.ids, (serial, id));
        }
    }

    /// A random SEND, WRITE or READ, with immediate data or not; the
    /// remote buffer one a key of the pool maps, or random.
    fn send_op(&mut self) -> SendOp {
        let remote = match pick(&mut self.rng, &self.remotes) {
            Some(i) if !self.rng.one_in(4) => self.remotes[i],
            _ => RemoteBuf {
                addr: self.rng.next(),
                rkey: self.rng.next() as u32,
                len: self.rng.size(4096) as u32,
            },
        };
        match self.rng.below(6) {
            0 => SendOp::Send,
            1 => SendOp::SendWithImm(7),
            2 => SendOp::Write(remote),
            3 => SendOp::WriteWithImm(remote, 9),
            // The pool's registrations invalidated by their peer, or none.
            4 => SendOp::SendWithInv(remote.rkey),
            _ => SendOp::Read(remote),
        }
    }

    fn post_send(&mut self) {
        self.trace("post_send");
        let Some(q) = pick(&mut self.rng, &self.rts) else {
            return;
        };
        let (serial, d) = (self.rts[q].serial, self.rts[q].dev);
        let Some((buf, off, len, bad)) = self.range(d) else {
            return;
        };
        let op = self.send_op();
        let signaled = !self.rng.one_in(4);
        let r = self.rts[q].qp.post_send(op, &buf, off, len, signaled);
        self.stats.count(&r);
        if r.is_ok() && bad && len > 0 {
            self.violation(format_args!(
                "a send on {} bytes at {} of a buffer of {}",
                len,
                off,
                buf.len()
            ));
        }
        if let Ok(id) = r {
            keep(&mut self.rng, &mut self.stats, &mut self.ids, (serial, id));
        }
    }

    /// Waits for a request id on its own QP mostly, else on another: the
    /// latter must be refused.
    fn wait(&mut self) {
        self.trace("wait");
        if self.rng.one_in(4) {
            if let Some(id) = take(&mut self.rng, &mut self.srq_ids) {
                if let Some(i) = pick(&mut self.rng, &self.srqs) {
                    let t = self.timeout();
                    let r = self.srqs[i].1.wait(id, t, &Cancel::new());
                    self.stats.count(&r);
                }
            }
            return;
        }
        let Some((serial, id)) = take(&mut self.rng, &mut self.ids) else {
            return;
        };
        let own = !self.rng.one_in(4);
        let t = self.timeout();
        let c = Cancel::new();
        if self.rng.one_in(16) {
            c.cancel();
        }
        // Its own QP (`own`), else any other one.
        let m = |h: u64| (h == serial) == own;
        let r = if let Some(h) = self.rts.iter().find(|h| m(h.serial)) {
            (h.serial, h.qp.wait_for(id, t, &c))
        } else if let Some(h) = self.init.iter().find(|h| m(h.serial)) {
            (h.serial, h.qp.wait_for(id, t, &c))
        } else if let Some(h) = self.err.iter().find(|h| m(h.serial)) {
            (h.serial, h.qp.wait_for(id, t, &c))
        } else if let Some(h) = self.ud.iter().find(|h| m(h.serial)) {
            (h.serial, h.qp.wait_for(id, t, &c))
        } else if let Some(h) = self.reset.iter().find(|h| m(h.serial)) {
            (h.serial, h.qp.wait_for(id, t, &c))
        } else {
            // Its QP is gone (and, for another, there is none): the id is
            // dropped unused.
            return;
        };
        self.stats.count(&r.1);
        match r {
            (s, Ok(_)) if s != serial => {
                self.violation(format_args!("a wait for a request of another QP"))
            }
            (s, Ok(Waited::Pending(id))) => {
                keep(&mut self.rng, &mut self.stats, &mut self.ids, (s, id));
            }
            _ => (),
        }
    }

    fn srq(&mut self) {
        self.trace("srq");
        let (Some(p), Some(c)) = (
            pick(&mut self.rng, &self.pds),
            pick(&mut self.rng, &self.cqs),
        ) else {
            return;
        };
        let mixed = self.pds[p].0 != self.cqs[c].0;
        let (wr, sge) = (self.rng.size(16) as u32, self.rng.below(3) as u32);
        let r = Srq::new(&self.pds[p].1, &self.cqs[c].1, wr, sge);
        self.stats.count(&r);
        if let Ok(srq) = r {
            if mixed {
                self.violation(format_args!("an SRQ with a CQ of another device"));
            }
            let d = self.pds[p].0;
            keep(&mut self.rng, &mut self.stats, &mut self.srqs, (d, srq));
        }
    }

    /// A QP of the pool in INIT or RTS to ERROR.
    fn error_one(&mut self) {
        self.trace("error");
        let r = if self.rng.one_in(2) {
            let Some(h) = take(&mut self.rng, &mut self.rts) else {
                return;
            };
            h.then(|q| q.to_error())
        } else {
            let Some(h) = take(&mut self.rng, &mut self.init) else {
                return;
            };
            h.then(|q| q.to_error())
        };
        self.stats.count(&r);
        if let Ok(h) = r {
            keep(&mut self.rng, &mut self.stats, &mut self.err, h);
        }
    }

    /// Drops a random object of a random kind (a PD, CQ or buffer before the
    /// QPs that use it included: the layer keeps what they need).
    fn drop_one(&mut self) {
        self.trace("drop");
        let rng = &mut self.rng;
        let gone = match rng.below(17) {
            0 => take(rng, &mut self.pds).is_some(),
            1 => take(rng, &mut self.cqs).is_some(),
            2 => take(rng, &mut self.bufs).is_some(),
            3 => take(rng, &mut self.reset).is_some(),
            4 => take(rng, &mut self.init).is_some(),
            5 => take(rng, &mut self.rts).is_some(),
            6 => take(rng, &mut self.err).is_some(),
            7 => take(rng, &mut self.ud).is_some(),
            8 => take(rng, &mut self.srqs).is_some(),
            9 => take(rng, &mut self.mrs).is_some(),
            10 => take(rng, &mut self.remotes).is_some(),
            11 => take(rng, &mut self.ahs).is_some(),
            12 => take(rng, &mut self.ids).is_some(),
            13 => take(rng, &mut self.srq_ids).is_some(),
            14 => self.cm.drop_one(rng),
            15 => take(rng, &mut self.timers).is_some(),
            _ => {
                self.clear();
                false
            }
        };
        if gone {
            self.stats.dropped += 1;
        }
    }

    /// `mem::forget` of a random object, when asked (kmemleak reports what
    /// it leaks: a run with it is for the layer's lifetimes, not for leaks).
    fn forget_one(&mut self) {
        if !self.forget {
            return self.drop_one();
        }
        self.trace("forget");
        let rng = &mut self.rng;
        let gone = match rng.below(10) {
            0 => take(rng, &mut self.pds).map(core::mem::forget).is_some(),
            1 => take(rng, &mut self.cqs).map(core::mem::forget).is_some(),
            2 => take(rng, &mut self.bufs).map(core::mem::forget).is_some(),
            3 => take(rng, &mut self.rts).map(core::mem::forget).is_some(),
            4 => take(rng, &mut self.srqs).map(core::mem::forget).is_some(),
            5 => take(rng, &mut self.mrs).map(core::mem::forget).is_some(),
            6 => take(rng, &mut self.ud).map(core::mem::forget).is_some(),
            7 => self.cm.forget_one(rng),
            8 => take(rng, &mut self.timers).map(core::mem::forget).is_some(),
            _ => take(rng, &mut self.ids).map(core::mem::forget).is_some(),
        };
        if gone {
            self.stats.forgotten += 1;
        }
    }

    /// Drops everything, one kind at a time in a random order.
    pub(crate) fn clear(&mut self) {
        let mut order = [0usize, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14];
        for i in (1..order.len()).rev() {
            let j = self.rng.below(i + 1);
            order.swap(i, j);
        }
        for k in order {
            let n = match k {
                0 => core::mem::replace(&mut self.pds, KVec::new()).len(),
                1 => core::mem::replace(&mut self.cqs, KVec::new()).len(),
                2 => core::mem::replace(&mut self.bufs, KVec::new()).len(),
                3 => core::mem::replace(&mut self.reset, KVec::new()).len(),
                4 => core::mem::replace(&mut self.init, KVec::new()).len(),
                5 => core::mem::replace(&mut self.rts, KVec::new()).len(),
                6 => core::mem::replace(&mut self.err, KVec::new()).len(),
                7 => core::mem::replace(&mut self.ud, KVec::new()).len(),
                8 => core::mem::replace(&mut self.srqs, KVec::new()).len(),
                9 => core::mem::replace(&mut self.mrs, KVec::new()).len(),
                10 => core::mem::replace(&mut self.ahs, KVec::new()).len(),
                11 => core::mem::replace(&mut self.ids, KVec::new()).len(),
                12 => core::mem::replace(&mut self.srq_ids, KVec::new()).len(),
                13 => core::mem::replace(&mut self.timers, KVec::new()).len(),
                _ => {
                    let ids_first = self.rng.one_in(2);
                    self.cm.clear(ids_first)
                }
            };
            self.stats.dropped += n as u64;
        }
        self.remotes = KVec::new();
        if let Some(t) = &self.told {
            self.stats.told = t.0.load(core::sync::atomic::Ordering::Relaxed);
        }
    }
}
