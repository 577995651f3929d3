// SPDX-License-Identifier: GPL-2.0

//! The bounds of blocking calls: a [`Cancel`] token another thread
//! cancels, and the deadline every wait of the crate keeps.

use crate::bindings;
use core::cell::Cell;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::prelude::*;

/// Cancels the waits of a run from another thread (for instance when the
/// device is being removed).
///
/// [`Cancel::cancel`] ends the waits of one run and is cleared by
/// [`Cancel::reset`] for the next; [`Cancel::close`] is for good: a closed
/// token stays cancelled whatever resets it, so that nothing started after
/// a removal began can make the removal wait.
#[derive(Default)]
pub struct Cancel(AtomicU32);

const CANCEL_NONE: u32 = 0;
const CANCEL_ONCE: u32 = 1;
const CANCEL_CLOSED: u32 = 2;

impl Cancel {
    /// A new, not cancelled, token.
    pub const fn new() -> Self {
        Cancel(AtomicU32::new(CANCEL_NONE))
    }
    /// Cancels: waits return `ECANCELED` within 100 ms.
    pub fn cancel(&self) {
        let _ = self.0.compare_exchange(
            CANCEL_NONE,
            CANCEL_ONCE,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
    /// Cancels for good: [`Cancel::reset`] no longer clears it.
    pub fn close(&self) {
        self.0.store(CANCEL_CLOSED, Ordering::Release);
    }
    /// Clears a [`Cancel::cancel`] for the next run; a closed token stays
    /// closed.
    pub fn reset(&self) {
        let _ = self.0.compare_exchange(
            CANCEL_ONCE,
            CANCEL_NONE,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
    /// Whether it was cancelled (or closed).
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire) != CANCEL_NONE
    }
    /// Whether it was closed.
    pub fn is_closed(&self) -> bool {
        self.0.load(Ordering::Acquire) == CANCEL_CLOSED
    }
    /// `ECANCELED` if cancelled, `EINTR` if the calling task has a signal
    /// pending, else `Ok`: what a loop that polls instead of waiting must
    /// check now and then, as every blocking wait of this crate does.
    pub fn check(&self) -> Result {
        if self.is_cancelled() {
            return Err(crate::errno::ecanceled());
        }
        // SAFETY: Reads the current task's signal state.
        if unsafe { bindings::kverbs_signal_pending() } {
            return Err(EINTR);
        }
        Ok(())
    }
}

/// The bound of a blocking call: a deadline, a [`Cancel`] token, and
/// the signals of the calling task.
pub(crate) struct Deadline<'a> {
    start: u64,
    end: u64,
    /// When it last read the clock (`now_ns`).
    last: Cell<u64>,
    cancel: &'a Cancel,
}

impl<'a> Deadline<'a> {
    /// `timeout_ms` from now.
    pub(crate) fn new(timeout_ms: u32, cancel: &'a Cancel) -> Self {
        let now = crate::now_ns();
        Deadline {
            start: now,
            end: now + u64::from(timeout_ms) * 1_000_000,
            last: Cell::new(now),
            cancel,
        }
    }

    /// Nanoseconds left.
    pub(crate) fn left_ns(&self) -> u64 {
        let now = crate::now_ns();
        self.last.set(now);
        self.end.saturating_sub(now)
    }

    /// When it was made (`now_ns`).
    pub(crate) fn start_ns(&self) -> u64 {
        self.start
    }

    /// When it last read the clock (`now_ns`): as it was made, or at the
    /// last [`Deadline::check`] or [`Deadline::left_ns`]. A waiter that
    /// checks its deadline after each poll knows the time from it without
    /// reading the clock again.
    pub(crate) fn last_ns(&self) -> u64 {
        self.last.get()
    }

    /// `Ok` to wait some more, or why not: `ECANCELED`, `EINTR` (a signal
    /// is pending) or `ETIMEDOUT`.
    pub(crate) fn check(&self) -> Result {
        if self.cancel.is_cancelled() {
            return Err(crate::errno::ecanceled());
        }
        // SAFETY: Reads the current task's signal state.
        if unsafe { bindings::kverbs_signal_pending() } {
            return Err(EINTR);
        }
        if self.left_ns() == 0 {
            return Err(crate::errno::etimedout());
        }
        Ok(())
    }
}
