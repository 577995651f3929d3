// SPDX-License-Identifier: GPL-2.0

//! Adaptive polling: spin while a completion is near, sleep while it is not.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`ib_req_notify_cq`), [`include/linux/delay.h`](srctree/include/linux/delay.h)
//! (`usleep_range`)
//!
//! A [`PollCtx::Adaptive`](super::PollCtx::Adaptive) CQ is polled by its
//! waiters, as a direct one (`IB_POLL_DIRECT`): no softirq, each
//! completion processed in the waiting task. What differs is what a waiter
//! does when a poll finds nothing. A direct waiter spins: the lowest
//! latency, but it holds a CPU the device may need (rxe's requester,
//! responder and completer are work items on the same CPUs). An adaptive
//! waiter spins for a bounded time, then sleeps on the CQ, in the manner
//! of net's busy polling (spin, then wait for the interrupt): it arms the
//! CQ (`ib_req_notify_cq`, the task already on the CQ's wait queue) and the
//! driver's completion event wakes it. For a ping-pong it also sleeps
//! ahead, in the manner of the hybrid polling NVMe had in the block layer
//! (`io_poll_delay`: sleep about half the expected time, then spin):
//!
//! - a wait with requests outstanding behind the awaited one (a pipeline:
//!   the device still has work, so being a little late costs little)
//!   spins [`MIN_SPIN_NS`], then sleeps until the CQ's next completion;
//! - a wait for the last outstanding request (a ping-pong, whose latency
//!   is the caller's) expects the average of the last waits of its stream
//!   that had to wait (a request's slot expects nothing). It first sleeps
//!   until half of it, then spins up to one and a half times it (at most
//!   [`MAX_SLEEP_NS`] of spinning); if its completion was already there
//!   when it woke, it slept too long, and its caller's latency paid: the
//!   expected time is halved;
//! - a sleep costs more than it asks for: the wake-up (in an emulated guest
//!   tens to hundreds of microseconds, as long as a short wait). That cost
//!   is learned (an average over every timed sleep; one sleep counts at
//!   most twice the average), and a first sleep is taken only where it is
//!   worth it: asked for the time to its end less the cost, if that is at
//!   least [`MIN_SLEEP_NS`];
//! - past its spin (at once when nothing is expected) a ping-pong spins on
//!   until it has waited eight times the cost of a sleep of
//!   [`MIN_SLEEP_NS`] (at least [`MIN_SPIN_NS`], at most [`MAX_SLEEP_NS`]),
//!   so that a wake-up costs it at most an eighth of its wait, then sleeps
//!   until the CQ's next completion. Where sleeping costs more than the
//!   wait, an adaptive waiter polls as a direct one;
//! - a spinning waiter (of a stream, or a [`Poller`]) reads the clock
//!   once every eight empty polls, so its spin may end that many polls
//!   late;
//! - while another task is processing the CQ (it may be reaping this very
//!   completion) it only yields, and the callers look at their count again
//!   before they sleep.
//!
//! Sleeps are uninterruptible, in process context (the helpers say
//! `might_sleep`), with 2 us of timer slack: a timed one is `usleep_range`
//! of at most [`MAX_SLEEP_NS`], one on the CQ ends at its next completion
//! event or after [`MAX_CQ_SLEEP_NS`]. The callers check their
//! deadline, cancel token and signals between two polls, as with the other
//! contexts, so a wait ends at most one sleep after its deadline.

use crate::bindings;
use core::sync::atomic::{AtomicU64, Ordering};

/// Shorter sleeps are not worth a timer: the waiter spins instead.
pub const MIN_SLEEP_NS: u64 = 10_000;
/// The longest timed sleep (`usleep_range`) between two polls; it also
/// caps a ping-pong's spin and its patience. A sleep on a CQ lasts up to
/// [`MAX_CQ_SLEEP_NS`].
pub const MAX_SLEEP_NS: u64 = 1_000_000;
/// The longest sleep on a CQ: its next completion ends it sooner. The
/// callers check their deadline, cancel token and signals after it.
pub const MAX_CQ_SLEEP_NS: u64 = 10_000_000;
/// The least a waiter spins before it sleeps on the CQ; a pipeline spins
/// this long.
pub const MIN_SPIN_NS: u64 = 20_000;
/// While a waiter spins it reads the clock (to know when to stop) once
/// per this many empty polls: in a guest whose clocksource is an emulated
/// HPET a read of the clock costs more than a poll, and a waiter that
/// read it after every poll noticed its completion later (read_lat 1.5x
/// busy polling there, 0.9x with the TSC; Documentation/kverbs.rst).
pub const SPIN_POLLS_PER_CLOCK: u32 = 8;
/// The timer slack a sleep allows (`usleep_range`'s `max - min`).
const SLACK_US: u64 = 2;
/// The longest wait counted in the expected time: a wait for a peer that
/// was idle (seconds) must not make the next waits sleep that long.
const MAX_EXPECT_NS: u64 = 4 * MAX_SLEEP_NS;
/// What a sleep is assumed to cost beyond what it asks for, until sleeps
/// have been measured.
const FIRST_COST_NS: u64 = 50_000;

/// What a timed sleep costs beyond what it asks for (timer slack, the
/// wake-up): an average over the timed sleeps (a ping-pong's first
/// sleep) of every CQ, read and written
/// without ordering (a heuristic; a lost update costs nothing).
static SLEEP_COST_NS: AtomicU64 = AtomicU64::new(FIRST_COST_NS);

/// Sleeps on a CQ ended by a wake-up (a completion) and by their timeout,
/// for every CQ: diagnostics ([`cq_sleeps`]).
static CQ_SLEEPS_WOKEN: AtomicU64 = AtomicU64::new(0);
static CQ_SLEEPS_TIMED_OUT: AtomicU64 = AtomicU64::new(0);

// `usleep_range` takes microseconds: a sleep is never 0.
const _: () = assert!(MIN_SLEEP_NS >= 1000 && MIN_SLEEP_NS <= MAX_SLEEP_NS);

/// What a waiter did after a poll that found nothing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Idle {
    /// Yielded the CPU if a task should run (`cond_resched`).
    Spun,
    /// Slept until the end of its first sleep (a ping-pong).
    Slept,
    /// Slept until the CQ's next completion (or [`MAX_CQ_SLEEP_NS`]).
    Armed,
}

/// What a waiter is to do after a poll that found nothing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Plan {
    /// Yield the CPU if a task should run, and poll again.
    Spin,
    /// Sleep this many ns (a ping-pong's first sleep), then poll.
    Sleep(u64),
    /// Sleep until the CQ's next completion, then poll.
    Arm,
}

/// What a waiter is to do after a poll that found nothing, at `now`
/// (`now_ns`), in a wait that began at `start` and expects to take
/// `expect` ns (0: unknown), with requests outstanding behind the awaited
/// one if `pipelined` (see the module documentation).
pub(crate) fn plan(start: u64, expect: u64, pipelined: bool, now: u64) -> Plan {
    let waited = now.saturating_sub(start);
    if pipelined {
        return if waited < MIN_SPIN_NS {
            Plan::Spin
        } else {
            Plan::Arm
        };
    }
    let cost = SLEEP_COST_NS.load(Ordering::Relaxed);
    let e = expect.min(MAX_EXPECT_NS);
    let (lead, spin) = (e / 2, e.min(MAX_SLEEP_NS));
    // The first sleep, asked for less its cost, to end at `lead`.
    let first = lead.saturating_sub(cost);
    // Sleeping on the CQ is worth it once a wake-up, even from the
    // shortest sleep, costs at most an eighth of the wait; at most after
    // `MAX_SLEEP_NS` (the cost is learned from timed sleeps only, which a
    // high cost makes rare: it must not keep a waiter spinning long).
    let patience = (MIN_SLEEP_NS + cost).saturating_mul(8).min(MAX_SLEEP_NS);
    if first >= waited.saturating_add(MIN_SLEEP_NS) {
        Plan::Sleep(first - waited)
    } else if waited < (lead.saturating_add(spin)).max(patience).max(MIN_SPIN_NS) {
        Plan::Spin
    } else {
        Plan::Arm
    }
}

/// The expected time of a ping-pong's next wait, after one that expected
/// `before` (0: nothing yet), took `took` ns, and whose last empty poll led
/// to `did`: if the completion was there when its first sleep ended, the
/// sleep was too long (its caller's latency paid), so it is halved; else
/// the average of the last waits moves toward `took`.
pub(crate) fn learn(before: u64, did: Idle, took: u64) -> u64 {
    match did {
        Idle::Slept => before / 2,
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
/// `poll`, on adaptive CQs), as a benchmark's or a ULP's data path does: a
/// pipeline that has waited since its last progress spins
/// [`MIN_SPIN_NS`], then sleeps until the next completion of the streams'
/// CQs (see the module documentation). The loop must be the only task
/// processing those CQs: a completion another task reaps does not end its
/// sleep (a stream's wait does not have that limit).
pub struct Poller {
    last: u64,
    /// What the last call of [`Poller::idle_at`] did.
    did: Idle,
    /// Empty passes since the clock was last read while spinning.
    quiet: u32,
}

impl Poller {
    /// A poller whose last progress is now.
    pub fn new() -> Self {
        Poller {
            last: crate::now_ns(),
            did: Idle::Spun,
            // The first empty pass reads the clock.
            quiet: SPIN_POLLS_PER_CLOCK,
        }
    }

    /// A pass made progress at `now` (`now_ns`).
    pub fn progress(&mut self, now: u64) {
        self.did = Idle::Spun;
        self.quiet = SPIN_POLLS_PER_CLOCK;
        self.last = now;
    }

    /// A pass made no progress: if the poller is spinning and has read
    /// the clock within the last [`SPIN_POLLS_PER_CLOCK`] empty passes,
    /// yields the CPU if a task should run and returns `true`: the caller
    /// polls again without reading the clock. Else returns `false`: the
    /// caller reads the clock (its deadline, then [`Poller::idle_at`]).
    /// Process context.
    pub fn spin(&mut self) -> bool {
        if self.did == Idle::Spun && self.quiet + 1 < SPIN_POLLS_PER_CLOCK {
            self.quiet += 1;
            crate::cond_resched();
            true
        } else {
            false
        }
    }

    /// A pass made no progress, at `now` (`now_ns`): spins, or sleeps
    /// until the next completion of one of `cqs` (the CQs of the streams
    /// that wait; only adaptive CQs, at most [`MAX_SLEEP_CQS`] of them, are
    /// slept on) or [`MAX_CQ_SLEEP_NS`]. Process context; may sleep.
    ///
    /// [`MAX_SLEEP_CQS`]: super::MAX_SLEEP_CQS
    pub fn idle_at<'c>(&mut self, now: u64, cqs: impl IntoIterator<Item = &'c super::Cq>) {
        self.quiet = 0;
        self.did = match plan(self.last, 0, true, now) {
            Plan::Spin => {
                crate::cond_resched();
                Idle::Spun
            }
            // With no adaptive CQ to sleep on it only yielded: it spins.
            _ if super::Cq::sleep_on(cqs, MAX_CQ_SLEEP_NS) => Idle::Armed,
            _ => Idle::Spun,
        };
    }
}

impl Default for Poller {
    fn default() -> Self {
        Self::new()
    }
}

/// Sleeps about `ns`, [`MIN_SLEEP_NS`] to [`MAX_SLEEP_NS`], in process
/// context, and learns what it cost beyond that.
pub(crate) fn sleep_ns(ns: u64) {
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

/// Counts a sleep on CQs by what `kverbs_cq_sleep` returned: 0 woken,
/// negative timed out (1: not slept, the CQ had completions).
pub(crate) fn count_cq_sleep(r: i32) {
    match r {
        0 => CQ_SLEEPS_WOKEN.fetch_add(1, Ordering::Relaxed),
        r if r < 0 => CQ_SLEEPS_TIMED_OUT.fetch_add(1, Ordering::Relaxed),
        _ => 0,
    };
}

/// How many sleeps on a CQ (of every adaptive CQ, since the module was
/// loaded) a wake-up ended, and how many their timeout
/// ([`MAX_CQ_SLEEP_NS`] at most): a diagnostic. A completion event or a
/// completion's `done` wakes a sleeper; a timeout means nothing completed
/// on the CQs within it.
pub fn cq_sleeps() -> (u64, u64) {
    (
        CQ_SLEEPS_WOKEN.load(Ordering::Relaxed),
        CQ_SLEEPS_TIMED_OUT.load(Ordering::Relaxed),
    )
}
