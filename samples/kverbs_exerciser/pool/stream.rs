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
    qp::{Cancel, RemoteBuf, SendOp},
    stream::{RecvStream, Segment, SendStream},
};

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
            let remote = match super::pick(&mut self.rng, &self.remotes) {
                Some(i) if !self.rng.one_in(4) => self.remotes[i],
                _ => RemoteBuf {
                    addr: self.rng.next(),
                    rkey: self.rng.next() as u32,
                    len: self.rng.size(4096) as u32,
                },
            };
            let op = match self.rng.below(5) {
                0 => SendOp::Send,
                1 => SendOp::SendWithImm(3),
                2 => SendOp::Write(remote),
                3 => SendOp::WriteWithImm(remote, 5),
                _ => SendOp::Read(remote),
            };
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
        let accepted = if init {
            let r = RecvStream::new(&self.init[q].qp, &segs, depth);
            self.stats.count(&r);
            r.map(|mut s| {
                let posted = s.post(n);
                let polled = s.poll(budget);
                let waited = s.wait(s.posted(), t, &Cancel::new());
                if forget {
                    core::mem::forget(s);
                }
                (posted.map(|_| ()), polled.map(|_| ()), waited)
            })
        } else {
            let r = RecvStream::new(&self.rts[q].qp, &segs, depth);
            self.stats.count(&r);
            r.map(|mut s| {
                let posted = s.post(n);
                let polled = s.poll(budget);
                let waited = s.wait(s.posted(), t, &Cancel::new());
                if forget {
                    core::mem::forget(s);
                }
                (posted.map(|_| ()), polled.map(|_| ()), waited)
            })
        };
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
