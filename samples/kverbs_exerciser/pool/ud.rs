// SPDX-License-Identifier: GPL-2.0

//! The exerciser's UD QPs: brought to RTS, AHs made, UD SENDs with an AH of the pool.

use super::{keep, pick, Pool, QKEY};
use kverbs::{
    ah::Ah,
    qp::{AddressVector, Qp, UdDest},
};

impl Pool<'_> {
    /// A UD QP to RTS, an AH, or a UD SEND with an AH of the pool.
    pub(super) fn ud(&mut self) {
        self.trace("ud");
        match self.rng.below(3) {
            0 => {
                let (Some(p), Some(c)) = (
                    pick(&mut self.rng, &self.pds),
                    pick(&mut self.rng, &self.cqs),
                ) else {
                    return;
                };
                let d = self.pds[p].0;
                let caps = self.caps();
                let r = Qp::new_ud(
                    &self.pds[p].1,
                    self.port(d),
                    &self.cqs[c].1,
                    &self.cqs[c].1,
                    caps,
                )
                .and_then(|q| q.to_init_ud(0, QKEY))
                .and_then(|q| q.to_rtr_ud())
                .and_then(|q| q.to_rts_ud(0));
                self.stats.count(&r);
                if let Ok(qp) = r {
                    if self.cqs[c].0 != d {
                        self.violation(format_args!("a UD QP with a CQ of another device"));
                    }
                    let h = self.held(d, qp);
                    keep(&mut self.rng, &mut self.stats, &mut self.ud, h);
                }
            }
            1 => {
                let Some(p) = pick(&mut self.rng, &self.pds) else {
                    return;
                };
                let d = self.pds[p].0;
                let dev = &self.devs[d];
                let Ok(g) = dev.gid_attr(*dev.ports().start(), self.rng.below(3) as u32) else {
                    return;
                };
                let av = AddressVector::new(g.gid(), self.rng.below(3) as u8);
                drop(g);
                let r = Ah::new(&self.pds[p].1, self.port(d), &av);
                self.stats.count(&r);
                if let Ok(ah) = r {
                    keep(&mut self.rng, &mut self.stats, &mut self.ahs, (d, ah));
                }
            }
            _ => {
                let (Some(q), Some(a)) = (
                    pick(&mut self.rng, &self.ud),
                    pick(&mut self.rng, &self.ahs),
                ) else {
                    return;
                };
                let (serial, d) = (self.ud[q].serial, self.ud[q].dev);
                let Some((buf, off, len, bad)) = self.range(d) else {
                    return;
                };
                let dest = UdDest {
                    ah: self.ahs[a].1.clone(),
                    qpn: if self.rng.one_in(2) {
                        self.ud[q].qp.qp_num()
                    } else {
                        0xff_ffff
                    },
                    qkey: QKEY,
                };
                let r = self.ud[q]
                    .qp
                    .post_send_ud(None, &buf, off, len, &dest, true);
                self.stats.count(&r);
                if r.is_ok() && (bad && len > 0 || self.ahs[a].0 != d) {
                    self.violation(format_args!("a UD SEND with a buffer or AH of elsewhere"));
                }
                if let Ok(id) = r {
                    keep(&mut self.rng, &mut self.stats, &mut self.ids, (serial, id));
                }
            }
        }
    }
}
