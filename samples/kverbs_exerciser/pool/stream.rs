// SPDX-License-Identifier: GPL-2.0

//! The exerciser's streams: a send stream on an RTS QP of the pool or a
//! receive stream on an INIT or RTS one, built from random segments of the
//! pool's buffers (of any device, ranges past their end included) with a
//! random depth and signalling interval, posted, polled and waited for
//! briefly, then dropped with its requests outstanding or forgotten. A
//! stream borrows its QP, so it lives within one step; what it leaves
//! behind (its shared part, its outstanding requests) the QP keeps.

use super::Pool;
use kernel::prelude::*;
use kverbs::{
    qp::{CanPostRecv, Cancel, Qp, Transport},
    stream::{RecvStream, Segment, SendStream},
};

/// How a receive stream is used: `depth`, then `n` posted, a poll of
/// `budget`, a wait of `t` ms, and forgotten if `forget`.
struct Use {
    depth: u32,
    n: u32,
    budget: u32,
    t: u32,
    forget: bool,
}

impl Use {
    /// A receive stream on `qp` into `segs`, used: what its post, poll and
    /// wait gave, or why it was refused.
    fn recv<S: CanPostRecv, T: Transport>(
        &self,
        qp: &Qp<S, T>,
        segs: &[Segment],
    ) -> Result<(Result, Result, Result)> {
        let mut s = RecvStream::new(qp, segs, self.depth)?;
        let posted = s.post(self.n).map(|_| ());
        let polled = s.poll(self.budget).map(|_| ());
        let waited = s.wait(s.posted(), self.t, &Cancel::new());
        if self.forget {
            core::mem::forget(s);
        }
        Ok((posted, polled, waited))
    }
}

impl Pool<'_> {
    /// Up to three segments for a QP of device `d`: whether one of them
    /// must be refused (of another device, or past its buffer).
    fn segments(&mut self, d: usize) -> Option<(KVec<Segment>, bool)> {
        let n = 1 + self.rng.below(3);
        let mut segs = KVec::new();
        let mut bad = false;
        for _ in 0..n {
            let (buf, offset, len, b) = self.range(d)?;
            // As for a single request: an empty segment names no memory.
            bad |= b && len > 0;
            segs.push(Segment { buf, offset, len }, GFP_KERNEL).ok()?;
        }
        Some((segs, bad))
    }

    fn depth(&mut self) -> u32 {
        self.rng.below(9) as u32
    }

    /// One stream: built, used a little, dropped or forgotten.
    pub(super) fn stream(&mut self) {
        self.trace("stream");
        if self.rng.one_in(3) {
            return self.recv_stream();
        }
        let Some(q) = super::pick(&mut self.rng, &self.rts) else {
            return;
        };
        let d = self.rts[q].dev;
        let Some((segs, bad)) = self.segments(d) else {
            return;
        };
        let mut wrs = KVec::new();
        for s in segs.iter() {
            let op = self.send_op();
            if wrs.push((op, s.clone()), GFP_KERNEL).is_err() {
                return;
            }
        }
        let depth = self.depth();
        let every = self.rng.below(depth as usize + 2) as u32;
        let inline = self.rng.one_in(4);
        let (n, last, budget) = (
            self.rng.below(depth as usize + 2) as u32,
            self.rng.one_in(2),
            self.rng.below(8) as u32,
        );
        let (t, forget) = (self.timeout(), self.forget && self.rng.one_in(4));
        let accepted = {
            let qp = &self.rts[q].qp;
            let r = if inline {
                SendStream::new_inline(qp, &wrs, depth, every)
            } else {
                SendStream::new(qp, &wrs, depth, every)
            };
            self.stats.count(&r);
            match r {
                Ok(mut s) => {
                    let r = s.post(n, last);
                    self.stats.count(&r);
                    let r = s.poll(budget);
                    self.stats.count(&r);
                    let upto = s.posted();
                    let r = s.wait(upto, t, &Cancel::new());
                    self.stats.count(&r);
                    if forget {
                        core::mem::forget(s);
                        self.stats.forgotten += 1;
                    }
                    true
                }
                Err(_) => false,
            }
        };
        if accepted && (bad || every == 0 || every > depth) {
            self.violation(format_args!(
                "a send stream of a segment past its buffer or of another device, or signalled every {} of {}",
                every, depth
            ));
        }
    }

    fn recv_stream(&mut self) {
        let init = self.rng.one_in(2);
        let list_len = if init {
            self.init.len()
        } else {
            self.rts.len()
        };
        if list_len == 0 {
            return;
        }
        let q = self.rng.below(list_len);
        let d = if init {
            self.init[q].dev
        } else {
            self.rts[q].dev
        };
        let Some((segs, bad)) = self.segments(d) else {
            return;
        };
        let depth = self.depth();
        let (n, budget) = (
            self.rng.below(depth as usize + 2) as u32,
            self.rng.below(8) as u32,
        );
        let (t, forget) = (self.timeout(), self.forget && self.rng.one_in(4));
        let how = Use {
            depth,
            n,
            budget,
            t,
            forget,
        };
        let accepted = if init {
            how.recv(&self.init[q].qp, &segs)
        } else {
            how.recv(&self.rts[q].qp, &segs)
        };
        self.stats.count(&accepted);
        if let Ok((posted, polled, waited)) = accepted {
            self.stats.count(&posted);
            self.stats.count(&polled);
            self.stats.count(&waited);
            if forget {
                self.stats.forgotten += 1;
            }
            if bad {
                self.violation(format_args!(
                    "a receive stream of a segment past its buffer or of another device"
                ));
            }
        }
    }
}
