// SPDX-License-Identifier: GPL-2.0

//! A bounded ring of events, filled from any context.

use super::Event;
use crate::irq_lock::IrqLock;
use kernel::prelude::*;

/// The newest `N` events with their time (`ktime_get_ns`), and how many
/// came in all: a ring filled from any context -- QP events come from the
/// driver's completion paths, softirq or hard interrupt -- under a
/// spinlock taken with interrupts off, without allocating. The entries
/// are on the heap, allocated with the ring: `N` is not bounded by the
/// stack, and nothing of size `N` is ever copied onto it.
///
/// # Invariants
///
/// The `entries` of `ring` has `N` elements.
#[pin_data]
pub struct EventRing<const N: usize, T: Copy = Event> {
    #[pin]
    ring: IrqLock<Ring<T>>,
}

struct Ring<T> {
    entries: KVec<Option<(u64, T)>>,
    /// Events pushed in all.
    total: u64,
    /// Events taken by [`EventRing::take_new`] (or lost before it ran).
    taken: u64,
}

impl<const N: usize, T: Copy> EventRing<N, T> {
    /// An empty ring (its `N` entries are allocated here).
    pub fn new() -> impl PinInit<Self, Error> {
        try_pin_init!(EventRing {
            ring <- IrqLock::new(Ring {
                entries: KVec::from_elem(None, N, GFP_KERNEL)?,
                total: 0,
                taken: 0,
            }),
        }? Error)
    }

    fn with<R>(&self, f: impl FnOnce(&mut Ring<T>) -> R) -> R {
        self.ring.with(f)
    }

    /// Adds `ev`, at time `t`; the oldest goes if the ring is full.
    pub fn push(&self, t: u64, ev: T) {
        if N == 0 {
            return;
        }
        self.with(|r| {
            r.entries[(r.total % N as u64) as usize] = Some((t, ev));
            r.total += 1;
        });
    }

    /// Copies the events from number `from` on (oldest first) into `out`,
    /// whose room for `N` more was reserved: no allocation under the lock.
    fn copy_from(r: &Ring<T>, from: u64, out: &mut KVec<(u64, T)>) {
        for i in from..r.total {
            if let Some(e) = r.entries[(i % N as u64) as usize] {
                // Within the reserved capacity: does not allocate.
                let _ = out.push(e, GFP_ATOMIC);
            }
        }
    }

    /// The events kept, oldest first, and how many came in all.
    pub fn snapshot(&self) -> (KVec<(u64, T)>, u64) {
        let mut v = KVec::new();
        // Best effort: on allocation failure no event is shown.
        let room = v.reserve(N, GFP_KERNEL).is_ok();
        let total = self.with(|r| {
            if room {
                Self::copy_from(r, r.total - r.total.min(N as u64), &mut v);
            }
            r.total
        });
        (v, total)
    }

    /// Moves the events pushed since the last call into `out` (oldest
    /// first) and returns how many of them were lost, overwritten before
    /// they were taken (or because `out` could not be allocated).
    pub(crate) fn take_new(&self, out: &mut KVec<(u64, T)>) -> u64 {
        let room = out.reserve(N, GFP_KERNEL).is_ok();
        self.with(|r| {
            let kept = r.total - r.total.min(N as u64);
            let from = r.taken.max(kept);
            let mut lost = from - r.taken;
            if room {
                Self::copy_from(r, from, out);
            } else {
                lost = r.total - r.taken;
            }
            r.taken = r.total;
            lost
        })
    }
}
