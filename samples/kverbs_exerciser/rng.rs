// SPDX-License-Identifier: GPL-2.0

//! The exerciser's random numbers: xorshift64*, so that a seed replays.

/// A seeded generator (Marsaglia's xorshift64*, Vigna's multiplier).
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator of `seed` (0 is taken as 1: xorshift has no zero state).
    pub(crate) fn new(seed: u64) -> Self {
        Rng(if seed == 0 { 1 } else { seed })
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 if `n` is 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next() % n as u64) as usize
    }

    /// True once in `n` times.
    pub(crate) fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// A length or offset: mostly small, sometimes at or past an edge.
    pub(crate) fn size(&mut self, edge: usize) -> usize {
        match self.below(8) {
            0 => 0,
            1 => edge,
            2 => edge.saturating_add(1 + self.below(64)),
            3 => usize::MAX - self.below(4),
            4 => edge.saturating_sub(self.below(8)),
            _ => self.below(edge.max(1)),
        }
    }
}
