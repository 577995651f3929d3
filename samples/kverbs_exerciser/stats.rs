// SPDX-License-Identifier: GPL-2.0

//! What the exerciser's calls gave: counts by outcome and errno, and the
//! text of the first violation (or of every step, traced).

use core::fmt::Write;
use kernel::prelude::*;

/// What the calls gave.
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) calls: u64,
    pub(crate) ok: u64,
    /// Failed calls by errno (positive), in the order first seen.
    pub(crate) errnos: KVec<(i32, u64)>,
    pub(crate) made: u64,
    pub(crate) dropped: u64,
    pub(crate) forgotten: u64,
    pub(crate) violations: u64,
    /// Events told to the worker's sink (of its QPs and rdma_cm queues).
    pub(crate) told: u64,
    /// The first violation, or the call of each step when `trace` is set.
    pub(crate) text: KVec<u8>,
}

/// Text of at most 4 KiB (what the control file shows of it).
pub(crate) struct Text<'a>(pub(crate) &'a mut KVec<u8>);

impl Write for Text<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        if self.0.len() + s.len() > 4096 {
            return Ok(());
        }
        self.0
            .extend_from_slice(s.as_bytes(), GFP_KERNEL)
            .map_err(|_| core::fmt::Error)
    }
}

impl Stats {
    pub(crate) fn count<T>(&mut self, r: &Result<T>) {
        self.calls += 1;
        match r {
            Ok(_) => self.ok += 1,
            Err(e) => {
                let n = -e.to_errno();
                if let Some(c) = self.errnos.iter_mut().find(|(k, _)| *k == n) {
                    c.1 += 1;
                } else {
                    let _ = self.errnos.push((n, 1), GFP_KERNEL);
                }
            }
        }
    }

    /// Adds `other`'s counts to these.
    pub(crate) fn add(&mut self, other: &Stats) {
        self.calls += other.calls;
        self.ok += other.ok;
        for (n, c) in other.errnos.iter() {
            if let Some(m) = self.errnos.iter_mut().find(|(k, _)| k == n) {
                m.1 += c;
            } else {
                let _ = self.errnos.push((*n, *c), GFP_KERNEL);
            }
        }
        self.made += other.made;
        self.dropped += other.dropped;
        self.forgotten += other.forgotten;
        self.violations += other.violations;
        self.told += other.told;
        let _ = self.text.extend_from_slice(&other.text, GFP_KERNEL);
    }
}
