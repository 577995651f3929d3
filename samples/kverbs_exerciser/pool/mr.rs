// SPDX-License-Identifier: GPL-2.0

//! The exerciser's MRs: made, mapped on a buffer of the pool, registered
//! or invalidated by a QP.

use super::{keep, pick, Pool};
use kverbs::{mr::Mr, qp::Cancel};

impl Pool<'_> {
    /// An MR made, mapped on a buffer, registered or invalidated by a QP.
    pub(super) fn mr(&mut self) {
        self.trace("mr");
        match self.rng.below(3) {
            0 => {
                let Some(p) = pick(&mut self.rng, &self.pds) else {
                    return;
                };
                let len = self.rng.size(65536);
                let r = Mr::new(&self.pds[p].1, len);
                self.stats.count(&r);
                if let Ok(mr) = r {
                    let d = self.pds[p].0;
                    keep(&mut self.rng, &mut self.stats, &mut self.mrs, (d, mr));
                }
            }
            1 => {
                let (Some(m), Some(b)) = (
                    pick(&mut self.rng, &self.mrs),
                    pick(&mut self.rng, &self.bufs),
                ) else {
                    return;
                };
                let r = self.mrs[m].1.map(&self.bufs[b].1);
                self.stats.count(&r);
                if r.is_ok() && self.mrs[m].0 != self.bufs[b].0 {
                    self.violation(format_args!("an MR mapped on a buffer of another device"));
                }
                if let Ok(rb) = r {
                    keep(&mut self.rng, &mut self.stats, &mut self.remotes, rb);
                }
            }
            _ => {
                let (Some(m), Some(q)) = (
                    pick(&mut self.rng, &self.mrs),
                    pick(&mut self.rng, &self.rts),
                ) else {
                    return;
                };
                let t = self.timeout();
                let access = self.access();
                let c = Cancel::new();
                let r = if self.rng.one_in(2) {
                    self.mrs[m]
                        .1
                        .post_registration(&self.rts[q].qp, access, t, &c)
                } else {
                    self.mrs[m].1.invalidate(&self.rts[q].qp, t, &c)
                };
                self.stats.count(&r);
            }
        }
    }
}
