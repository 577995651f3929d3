// SPDX-License-Identifier: GPL-2.0

//! Adaptive polling: spin while a completion is near, sleep while it is not.
//!
//! C header: [`include/linux/delay.h`](srctree/include/linux/delay.h)
//! (`usleep_range`)
//!
//! A [`PollCtx::Adaptive`](super::PollCtx::Adaptive) CQ is polled by its
//! waiters, as a direct one (`IB_POLL_DIRECT`): no interrupt and no softirq,
//! each completion processed in the waiting task. What differs is what a
//! waiter does when a poll finds nothing. A direct waiter spins: the lowest
//! latency, but it holds a CPU the device may need (rxe's requester,
//! responder and completer are tasks on the same CPUs). An adaptive waiter
//! sleeps while its completion is not near, in the manner of the hybrid
//! polling NVMe had in the block layer (`io_poll_delay`: sleep about half
//! the expected time, then spin):
//!
//! - the expected time of a wait is an average of the last waits of the
//!   same kind that had to wait (a stream keeps its own; a request's slot
//!   expects nothing);
//! - a wait for the last outstanding request (a ping-pong, whose latency
//!   is the caller's) first sleeps until half of it, then spins up to one
//!   and a half times it (at most [`MAX_SLEEP_NS`] of spinning); if its
//!   completion was already there when it woke, it slept too long, and
//!   its caller's latency paid: the expected time is halved;
//! - a wait with requests outstanding behind the awaited one (a pipeline:
//!   the device still has work, so being a little late costs little)
//!   first sleeps until seven eighths of it, then sleeps on in eighths of
//!   it (where an eighth is worth a sleep; else it spins up to an eighth
//!   more); if its completion was there when it woke from the first
//!   sleep, the expected time drops by a quarter;
//! - a sleep costs more than it asks for: the wake-up (in an emulated guest
//!   tens of microseconds, as long as a short wait). That cost is learned
//!   (an average over every adaptive sleep; one sleep counts at most twice
//!   the average), and a sleep is taken only where it is worth it: a first
//!   sleep is asked for the time to its end less the cost, if that is at
//!   least [`MIN_SLEEP_NS`];
//! - past the spin (at once when nothing is expected) the waiter backs
//!   off: once it has waited eight times the cost of a sleep of
//!   [`MIN_SLEEP_NS`] (spinning till then, at least [`MIN_SPIN_NS`]), it
//!   sleeps an eighth of the time it has waited (at most [`MAX_SLEEP_NS`]),
//!   so an idle waiter costs little and is woken at most an eighth late.
//!   Where sleeping costs more than the wait, an adaptive waiter polls as
//!   a direct one;
//! - a spinning waiter of a stream reads the clock once every eight
//!   empty polls, so its spin may end that many polls late;
//! - while another task is processing the CQ (it may be reaping this very
//!   completion) it only yields, and the callers look at their count again
//!   before they sleep.
//!
//! Sleeps are `usleep_range` (high-resolution timers), uninterruptible, in
//! process context (the helper says `might_sleep`), each of at most
//! [`MAX_SLEEP_NS`] and 2 us of timer slack: the callers check their
//! deadline, cancel token and signals between two polls, as with the other
//! contexts, so a wait ends at most one sleep after its deadline.

use crate::bindings;
use core::sync::atomic::{AtomicU64, Ordering};

/// Shorter sleeps are not worth a timer: the waiter spins instead.
pub const MIN_SLEEP_NS: u64 = 10_000;
/// The longest sleep between two polls.
pub const MAX_SLEEP_NS: u64 = 1_000_000;
/// The least a waiter spins before it backs off.
pub const MIN_SPIN_NS: u64 = 20_000;
/// While a waiter spins it reads the clock (to know when to stop) once
/// per this many empty polls: in a guest whose clocksource is an emulated
/// HPET a read of the clock costs more than a poll, and a waiter that
/// read it after every poll noticed its completion later (read_lat 1.5x
/// busy polling there, 0.9x with the TSC; Documentation/kverbs.rst).
pub(crate) const SPIN_POLLS_PER_CLOCK: u32 = 8;
/// The timer slack a sleep allows (`usleep_range`'s `max - min`).
const SLACK_US: u64 = 2;
/// The longest wait counted in the expected time: a wait for a peer that
/// was idle (seconds) must not make the next waits sleep that long.
const MAX_EXPECT_NS: u64 = 4 * MAX_SLEEP_NS;
/// What a sleep is assumed to cost beyond what it asks for, until sleeps
/// have been measured.
const FIRST_COST_NS: u64 = 50_000;

/// What a sleep costs beyond what it asks for (timer slack, the wake-up):
/// an average over the adaptive sleeps of every CQ, read and written
/// without ordering (a heuristic; a lost update costs nothing).
static SLEEP_COST_NS: AtomicU64 = AtomicU64::new(FIRST_COST_NS);

// `usleep_range` takes microseconds: a sleep is never 0.
const _: () = assert!(MIN_SLEEP_NS >= 1000 && MIN_SLEEP_NS <= MAX_SLEEP_NS);

/// What a waiter did after a poll that found nothing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Idle {
    /// Yielded the CPU if a task should run (`cond_resched`).
    Spun,
    /// Slept until the end of its first sleep.
    Slept,
    /// Slept past its first sleep: an eighth of the expected time (a
    /// pipeline) or of the time it had waited.
    BackedOff,
}

/// What a waiter does after a poll that found nothing, at `now`
/// (`now_ns`), in a wait that began at `start` and expects to take
/// `expect` ns (0: unknown), with requests outstanding behind the awaited
/// one if `pipelined`: sleeps until the end of the first sleep if that is
/// worth a sleep, spins until the end of the spin, then backs off (see the
/// module documentation). Process context; may sleep.
pub(crate) fn idle_at(start: u64, expect: u64, pipelined: bool, now: u64) -> Idle {
    let waited = now.saturating_sub(start);
    let cost = SLEEP_COST_NS.load(Ordering::Relaxed);
    let e = expect.min(MAX_EXPECT_NS);
    let (lead, spin) = if pipelined {
        (e - e / 8, e / 8)
    } else {
        (e / 2, e.min(MAX_SLEEP_NS))
    };
    // The first sleep, asked for less its cost, to end at `lead`.
    let first = lead.saturating_sub(cost);
    // Backing off is worth it once a late wake-up, even from the
    // shortest sleep, costs at most an eighth of the wait.
    let patience = (MIN_SLEEP_NS + cost).saturating_mul(8);
    if first >= waited.saturating_add(MIN_SLEEP_NS) {
        sleep_ns(first - waited);
        Idle::Slept
    } else if pipelined && e / 8 >= cost.saturating_add(MIN_SLEEP_NS) {
        // Past the first sleep of a pipeline: lateness costs little,
        // so it sleeps on in eighths of the expected time.
        sleep_ns(e / 8 - cost);
        Idle::BackedOff
    } else if waited < (lead.saturating_add(spin)).max(patience).max(MIN_SPIN_NS) {
        crate::cond_resched();
        Idle::Spun
    } else {
        sleep_ns((waited / 8).saturating_sub(cost));
        Idle::BackedOff
    }
}

/// The expected time of the next wait of a kind, after one that expected
/// `before` (0: nothing yet), took `took` ns, with requests behind the
/// awaited one if `pipelined`, and whose last empty poll led to `did`: if
/// the completion was there when its first sleep ended, the sleep was too
/// long, so it is halved (a ping-pong, whose caller's latency paid) or
/// less a quarter (a pipeline); else the average of the last waits moves
/// toward `took`.
pub(crate) fn learn(before: u64, did: Idle, took: u64, pipelined: bool) -> u64 {
    match (did, pipelined) {
        (Idle::Slept, true) => before - before / 4,
        (Idle::Slept, false) => before / 2,
        _ => average(before, took),
    }
}

/// An average of the last waits (weight 1/8 to the newest, which took
/// `took` ns), `before` the previous one (0: none).
fn average(before: u64, took: u64) -> u64 {
    let took = took.min(MAX_EXPECT_NS);
    if before == 0 {
        took
    } else {
        before - before / 8 + took / 8
    }
}

/// The adaptive idling of a loop that polls several streams itself (their
/// `poll`, on adaptive CQs), as a benchmark's or a ULP's data path does:
/// it learns the time between two polls that made progress and, when a
/// pass over the streams makes none, sleeps or spins as a pipelined wait
/// that began at the last progress would (see the module documentation).
pub struct Poller {
    last: u64,
    expect: u64,
    /// Whether a progress has been seen: the time to the first (the
    /// pipeline filling) is not a gap between completions.
    started: bool,
    /// What the last call of [`Poller::idle_at`] did.
    did: Idle,
}

impl Poller {
    /// A poller whose last progress is now.
    pub fn new() -> Self {
        Poller {
            last: crate::now_ns(),
            expect: 0,
            started: false,
            did: Idle::Spun,
        }
    }

    /// A pass made progress at `now` (`now_ns`).
    pub fn progress(&mut self, now: u64) {
        if self.started {
            self.expect = learn(self.expect, self.did, now.saturating_sub(self.last), true);
        }
        self.started = true;
        self.did = Idle::Spun;
        self.last = now;
    }

    /// A pass made no progress, at `now` (`now_ns`): sleeps or spins.
    /// Process context; may sleep.
    pub fn idle_at(&mut self, now: u64) {
        self.did = idle_at(self.last, self.expect, true, now);
    }
}

impl Default for Poller {
    fn default() -> Self {
        Self::new()
    }
}

/// Sleeps about `ns`, [`MIN_SLEEP_NS`] to [`MAX_SLEEP_NS`], in process
/// context, and learns what it cost beyond that.
fn sleep_ns(ns: u64) {
    // At most 1000 (us): fits the helper's `unsigned int`.
    let min = ns.clamp(MIN_SLEEP_NS, MAX_SLEEP_NS) / 1000;
    let start = crate::now_ns();
    // SAFETY: Plain helper: it sleeps (`usleep_range`), after
    // `might_sleep`, which reports a caller in atomic context. Both
    // bounds are at most `MAX_SLEEP_NS / 1000 + SLACK_US`.
    unsafe { bindings::kverbs_usleep_range(min as u32, (min + SLACK_US) as u32) };
    let cost = SLEEP_COST_NS.load(Ordering::Relaxed);
    // A sleep that was preempted, or woken by the slack of another
    // timer, counts at most twice the average.
    let over = crate::now_ns()
        .saturating_sub(start)
        .saturating_sub(min * 1000)
        .min(cost.saturating_mul(2).max(MIN_SLEEP_NS))
        .min(MAX_SLEEP_NS);
    SLEEP_COST_NS.store(cost - cost / 8 + over / 8, Ordering::Relaxed);
}

/// What a sleep costs beyond what it asks for, as learned so far: a
/// diagnostic.
pub fn sleep_cost_ns() -> u64 {
    SLEEP_COST_NS.load(Ordering::Relaxed)
}
