// SPDX-License-Identifier: GPL-2.0

//! The exerciser's connection manager calls: event queues (some with a
//! sink that is told of their events), IDs that listen, resolve, take
//! requests, get a QP, connect or accept with a QP of the pool (their own
//! or another's), disconnect, and are dropped in any order, with short
//! timeouts that give operations up half way. The addresses are those of
//! the devices' IPv4 GIDs, and one that is nobody's.

use super::{keep, pick, take, Pool};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    cm::{CmEvent, CmEvents, CmId, CmSink},
    event::{Event, EventSink},
    qp::{Cancel, Qp},
    tcp::Ipv4,
};

/// The sink of the pool's event queues and QPs: counts what it is told.
pub(super) struct Told(pub(super) AtomicU64);

impl CmSink for Told {
    fn event(&self, _ev: &CmEvent) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

impl EventSink for Told {
    fn event(&self, _ev: &Event) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// An ID of the pool, and the serial of the QP made on it, if any.
pub(super) struct Id {
    id: CmId,
    qp: Option<u64>,
}

/// The rdma_cm objects of one worker.
#[derive(Default)]
pub(super) struct CmPool {
    queues: KVec<CmEvents>,
    ids: KVec<Id>,
}

impl CmPool {
    pub(super) fn len(&self) -> usize {
        self.queues.len() + self.ids.len()
    }

    /// Drops a random queue or ID.
    pub(super) fn drop_one(&mut self, rng: &mut crate::rng::Rng) -> bool {
        if rng.one_in(2) {
            take(rng, &mut self.queues).is_some()
        } else {
            take(rng, &mut self.ids).is_some()
        }
    }

    /// Forgets a random queue or ID.
    pub(super) fn forget_one(&mut self, rng: &mut crate::rng::Rng) -> bool {
        if rng.one_in(2) {
            take(rng, &mut self.queues).map(core::mem::forget).is_some()
        } else {
            take(rng, &mut self.ids).map(core::mem::forget).is_some()
        }
    }

    /// Drops everything, IDs or queues first.
    pub(super) fn clear(&mut self, ids_first: bool) -> usize {
        let n = self.len();
        if ids_first {
            self.ids = KVec::new();
            self.queues = KVec::new();
        } else {
            self.queues = KVec::new();
            self.ids = KVec::new();
        }
        n
    }
}

/// The ports the IDs listen on and connect to: few, so that they meet.
const PORTS: u16 = 3;
const FIRST_PORT: u16 = 7990;

impl Pool<'_> {
    /// The sink of this worker (made once).
    pub(super) fn told(&mut self) -> Option<Arc<Told>> {
        if self.told.is_none() {
            self.told = Arc::new(Told(AtomicU64::new(0)), GFP_KERNEL).ok();
        }
        self.told.clone()
    }

    /// An address: an IPv4 GID's of a device mostly, else one of nobody.
    fn cm_addr(&mut self) -> Ipv4 {
        if !self.rng.one_in(8) {
            let d = self.dev();
            let dev = &self.devs[d];
            let port = *dev.ports().start();
            for i in 0..8 {
                if let Ok(g) = dev.gid_attr(port, i) {
                    let gid = g.gid();
                    if gid.is_v4_mapped() {
                        return Ipv4([gid.0[12], gid.0[13], gid.0[14], gid.0[15]]);
                    }
                }
            }
        }
        Ipv4([169, 254, 77, 1 + self.rng.below(4) as u8])
    }

    fn cm_port(&mut self) -> u16 {
        FIRST_PORT + self.rng.below(PORTS as usize) as u16
    }

    fn cm_timeout(&mut self) -> u32 {
        [0, 1, 5, 50][self.rng.below(4)]
    }

    /// One random connection manager call.
    pub(super) fn cm(&mut self) {
        match self.rng.below(9) {
            0 => self.cm_queue(),
            1 => self.cm_id(),
            2 => self.cm_listen(),
            3 => self.cm_resolve(),
            4 => self.cm_get_request(),
            5 => self.cm_qp(),
            6 | 7 => self.cm_connect(),
            _ => self.cm_disconnect(),
        }
    }

    fn cm_queue(&mut self) {
        self.trace("cm_queue");
        let n = self.rng.below(4) as u32;
        let r = if self.rng.one_in(2) {
            match self.told() {
                Some(t) => CmEvents::with_sink(n, t),
                None => return,
            }
        } else {
            CmEvents::with_requests(n)
        };
        self.stats.count(&r);
        if let Ok(q) = r {
            keep(&mut self.rng, &mut self.stats, &mut self.cm.queues, q);
        }
    }

    /// Counts what a call that makes an ID gave, and keeps the ID.
    fn keep_id(&mut self, r: Result<CmId>) {
        self.stats.count(&r);
        if let Ok(id) = r {
            keep(
                &mut self.rng,
                &mut self.stats,
                &mut self.cm.ids,
                Id { id, qp: None },
            );
        }
    }

    fn cm_id(&mut self) {
        self.trace("cm_id");
        let Some(q) = pick(&mut self.rng, &self.cm.queues) else {
            return;
        };
        let r = CmId::new(&self.cm.queues[q]);
        self.keep_id(r);
    }

    fn cm_listen(&mut self) {
        self.trace("cm_listen");
        let Some(i) = pick(&mut self.rng, &self.cm.ids) else {
            return;
        };
        let (addr, port) = (self.cm_addr(), self.cm_port());
        let r = self.cm.ids[i].id.listen(addr, port);
        self.stats.count(&r);
    }

    fn cm_resolve(&mut self) {
        self.trace("cm_resolve");
        let Some(i) = pick(&mut self.rng, &self.cm.ids) else {
            return;
        };
        let (addr, port, t) = (self.cm_addr(), self.cm_port(), self.cm_timeout());
        let c = Cancel::new();
        if self.rng.one_in(16) {
            c.cancel();
        }
        let r = self.cm.ids[i].id.resolve(addr, port, t, &c);
        self.stats.count(&r);
    }

    fn cm_get_request(&mut self) {
        self.trace("cm_get_request");
        let Some(i) = pick(&mut self.rng, &self.cm.ids) else {
            return;
        };
        let t = self.cm_timeout();
        let r = self.cm.ids[i].id.get_request(t, &Cancel::new());
        self.keep_id(r);
    }

    /// A QP on an ID, with a PD and CQs of the pool (of any device), some
    /// with the sink.
    fn cm_qp(&mut self) {
        self.trace("cm_qp");
        let (Some(i), Some(p), Some(c)) = (
            pick(&mut self.rng, &self.cm.ids),
            pick(&mut self.rng, &self.pds),
            pick(&mut self.rng, &self.cqs),
        ) else {
            return;
        };
        let caps = self.caps();
        let sink = if self.rng.one_in(2) {
            self.told()
        } else {
            None
        };
        let (id, pd, cq) = (&self.cm.ids[i].id, &self.pds[p].1, &self.cqs[c].1);
        let on_dev = |d: usize| id.device().is_some_and(|x| x.same_as(&self.devs[d]));
        let mixed = !on_dev(self.pds[p].0) || !on_dev(self.cqs[c].0);
        let r = match sink {
            Some(s) => Qp::new_cm_with_events(id, pd, cq, cq, caps, s),
            None => Qp::new_cm(id, pd, cq, cq, caps),
        };
        self.stats.count(&r);
        if let Ok(qp) = r {
            if mixed {
                self.violation(format_args!("a QP on an rdma_cm ID of another device"));
            }
            let d = self.pds[p].0;
            let h = self.held(d, qp);
            self.cm.ids[i].qp = Some(h.serial);
            keep(&mut self.rng, &mut self.stats, &mut self.init, h);
        }
    }

    /// Connects or accepts with an INIT QP of the pool: the ID's own
    /// mostly, else another, which must be refused.
    fn cm_connect(&mut self) {
        self.trace("cm_connect");
        let Some(i) = pick(&mut self.rng, &self.cm.ids) else {
            return;
        };
        let own = self.cm.ids[i].qp;
        let at = match own {
            Some(s) if !self.rng.one_in(4) => self.init.iter().position(|h| h.serial == s),
            _ => pick(&mut self.rng, &self.init),
        };
        let Some(at) = at else {
            return;
        };
        let Some(h) = super::remove(&mut self.init, at) else {
            return;
        };
        let (t, accept) = (self.cm_timeout(), self.rng.one_in(2));
        let theirs = own != Some(h.serial);
        let id = &self.cm.ids[i].id;
        let c = Cancel::new();
        let r = h.then(|q| {
            if accept {
                id.accept(q, t, &c)
            } else {
                id.connect(q, t, &c)
            }
        });
        self.stats.count(&r);
        if let Ok(h) = r {
            if theirs {
                self.violation(format_args!("a connection with a QP of another ID"));
            }
            keep(&mut self.rng, &mut self.stats, &mut self.rts, h);
        }
    }

    fn cm_disconnect(&mut self) {
        self.trace("cm_disconnect");
        let Some(i) = pick(&mut self.rng, &self.cm.ids) else {
            return;
        };
        let t = self.cm_timeout();
        let id = &self.cm.ids[i].id;
        match self.rng.below(3) {
            0 => {
                let r = id.disconnect();
                self.stats.count(&r);
            }
            1 => {
                let _ = id.disconnected();
                self.stats.calls += 1;
            }
            _ => {
                let _ = id.wait_disconnected(t, &Cancel::new());
                self.stats.calls += 1;
            }
        }
    }
}
