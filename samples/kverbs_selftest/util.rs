// SPDX-License-Identifier: GPL-2.0

//! The layer's helpers outside the verbs (`kverbs.rs`).

use crate::common::{Env, Outcome, Text};
use core::fmt::Write;

/// `kverbs::mul_div` gives `u64::MAX` where the quotient does not fit in 64
/// bits: x86-64's `divq` raises a divide error there (an oops from safe
/// code before), and every exact quotient around the edge is still exact.
pub(crate) fn mul_div_saturates_past_u64(_env: &Env, out: &mut Text) -> Outcome {
    const M: u64 = u64::MAX;
    let cases: [(u64, u64, u64, u64); 8] = [
        (M, 2, 1, M),
        (M, M, 1, M),
        (M, M, M - 1, M),
        (1 << 32, 1 << 32, 1, M),
        (M, M, M, M),
        (M, 2, 2, M),
        (M, 3, 4, M / 4 * 3 + 2),
        (1_000_000, 1_000_000_000_000, 3, 333_333_333_333_333_333),
    ];
    for (a, b, c, want) in cases {
        let got = kverbs::mul_div(a, b, c);
        if got != want {
            let _ = write!(out, "mul_div({a}, {b}, {c}) = {got}, want {want}");
            return Err("wrong quotient");
        }
    }
    if kverbs::mul_div(M, M, 0) != 0 {
        return Err("a divisor of 0 did not give 0");
    }
    Ok(())
}
