// SPDX-License-Identifier: GPL-2.0

//! Adaptive polling: spin for a bounded time, then sleep on the CQ.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`ib_req_notify_cq`)
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
//! driver's completion event wakes it. How long it spins depends on what
//! it waits for:
//!
//! - a wait with requests outstanding behind the awaited one (a pipeline:
//!   the device still has work, so being a little late costs little)
//!   spins [`MIN_SPIN_NS`], then sleeps until the CQ's next completion;
//! - a wait for the last outstanding request (a ping-pong, whose latency
//!   is the caller's) spins as a direct waiter does for up to
//!   [`SPIN_EXPECTS`] times the average of the last waits of its stream
//!   that had to wait (at least [`MIN_SPIN_NS`], at most [`MAX_SPIN_NS`];
//!   [`FIRST_SPIN_NS`] when nothing is expected yet, and for a request's
//!   slot), then sleeps until the CQ's next completion. A completion
//!   within that bound is noticed as a direct waiter notices it; a later
//!   one pays a wake-up, on a wait already longer than the usual;
//! - a stream's waiter reads no clock of its own: it takes the time from
//!   its deadline's check after each poll, as a direct waiter does (a
//!   read of the clock on the way to the completion or back to the caller
//!   cost the adaptive waiter 2-10 % of a ping-pong's latency on the
//!   emulated test guests). A [`Poller`] reads the clock once every eight
//!   empty polls, so its spin may end that many polls late;
//! - while another task is processing the CQ (it may be reaping this very
//!   completion) it only yields, and the callers look at their count again
//!   before they sleep.
//!
//! A sleep on the CQ is uninterruptible (`TASK_IDLE`), in process context
//! (the helper says `might_sleep`), and ends at the CQ's next completion
//! event or after [`MAX_CQ_SLEEP_NS`]. The callers check their deadline,
//! cancel token and signals between two polls, as with the other contexts,
//! so a wait ends at most one sleep after its deadline.

use core::sync::atomic::{AtomicU64, Ordering};

/// The least a waiter spins before it sleeps on the CQ; a pipeline spins
/// this long.
pub const MIN_SPIN_NS: u64 = 20_000;
/// The longest a ping-pong spins before it sleeps on the CQ.
pub const MAX_SPIN_NS: u64 = 1_000_000;
/// How long a ping-pong spins when it expects nothing yet (its stream's
/// first wait, a request's slot): about a round trip on the emulated test
/// guests, tens of them on hardware.
pub const FIRST_SPIN_NS: u64 = 100_000;
/// A ping-pong spins up to this many times its expected time.
pub const SPIN_EXPECTS: u64 = 8;
/// The longest sleep on a CQ: its next completion ends it sooner. The
/// callers check their deadline, cancel token and signals after it.
pub const MAX_CQ_SLEEP_NS: u64 = 10_000_000;
/// While a [`Poller`] spins it reads the clock (to know when to stop) once
/// per this many empty passes: in a guest whose clocksource is an emulated
/// HPET a read of the clock costs more than a poll, and a waiter that
/// read it after every poll noticed its completion later (read_lat 1.5x
/// busy polling there, 0.9x with the TSC; Documentation/kverbs.rst).
pub const SPIN_POLLS_PER_CLOCK: u32 = 8;

/// Sleeps on a CQ ended by a wake-up (a completion) and by their timeout,
/// for every CQ: diagnostics ([`cq_sleeps`]).
static CQ_SLEEPS_WOKEN: AtomicU64 = AtomicU64::new(0);
static CQ_SLEEPS_TIMED_OUT: AtomicU64 = AtomicU64::new(0);

const _: () = assert!(MIN_SPIN_NS <= FIRST_SPIN_NS && FIRST_SPIN_NS <= MAX_SPIN_NS);

/// What a [`Poller`] did after a pass that found nothing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Idle {
    /// Yielded the CPU if a task should run (`cond_resched`).
    Spun,
    /// Slept until the CQ's next completion (or [`MAX_CQ_SLEEP_NS`]).
    Armed,
}

/// What a waiter is to do after a poll that found nothing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Plan {
    /// Yield the CPU if a task should run, and poll again.
    Spin,
    /// Sleep until the CQ's next completion, then poll.
    Arm,
}

/// What a waiter is to do after a poll that found nothing, at `now`
/// (`now_ns`), in a wait that began at `start` and expects to take
/// `expect` ns (0: unknown), with requests outstanding behind the awaited
/// one if `pipelined` (see the module documentation).
pub(crate) fn plan(start: u64, expect: u64, pipelined: bool, now: u64) -> Plan {
    let spin = if pipelined {
        MIN_SPIN_NS
    } else if expect == 0 {
        FIRST_SPIN_NS
    } else {
        expect
            .saturating_mul(SPIN_EXPECTS)
            .clamp(MIN_SPIN_NS, MAX_SPIN_NS)
    };
    if now.saturating_sub(start) < spin {
        Plan::Spin
    } else {
        Plan::Arm
    }
}

/// The expected time of a ping-pong's next wait, after one that expected
/// `before` (0: nothing yet) and took `took` ns: an average of the last
/// waits (weight 1/8 to the newest, which counts at most [`MAX_SPIN_NS`]:
/// a wait for a peer that was idle must not make the next waits spin
/// long).
pub(crate) fn learn(before: u64, took: u64) -> u64 {
    let took = took.min(MAX_SPIN_NS);
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
