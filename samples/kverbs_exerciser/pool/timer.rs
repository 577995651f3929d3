// SPDX-License-Identifier: GPL-2.0

//! The exerciser's timers (`kverbs::delayed`): made with a handler that
//! asks to run again a few times after random delays, armed at random
//! (arming one pending already must be refused), dropped pending, running
//! or idle, and forgotten when asked; and timers that own themselves (an
//! `Arc` cycle through their handler), which drop their own timer from
//! their last run; the run's end waits for those (its check of kverbs.ko's
//! references after it counts theirs). Leaked timers, that kverbs.ko drops
//! when their module goes, are the self-test's (`forget.rs`).

use super::Pool;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{new_mutex, prelude::*, sync::Arc, sync::Mutex};
use kverbs::delayed::{Delayed, DelayedHandler};

/// A timer's handler: runs `left` more times, `delay` ms apart; with its
/// own timer in `own`, drops it on its last run, and counts it down in
/// `live`.
#[pin_data]
pub(super) struct Tick {
    left: AtomicU32,
    delay: u32,
    #[pin]
    own: Mutex<Option<Delayed>>,
    live: Option<Arc<AtomicU32>>,
}

impl DelayedHandler for Tick {
    fn run(&self) -> Option<u32> {
        let left = self.left.load(Ordering::Relaxed);
        if left == 0 {
            // Its own timer, dropped from its own run (outside the lock).
            let own = self.own.lock().take();
            if own.is_some() {
                drop(own);
                if let Some(l) = &self.live {
                    l.fetch_sub(1, Ordering::Release);
                }
            }
            return None;
        }
        self.left.store(left - 1, Ordering::Relaxed);
        Some(self.delay)
    }
}

impl Pool<'_> {
    fn tick(&mut self, left: u32, delay: u32, live: Option<Arc<AtomicU32>>) -> Result<Arc<Tick>> {
        Arc::pin_init(
            pin_init!(Tick {
                left: AtomicU32::new(left),
                delay,
                own <- new_mutex!(None),
                live,
            }),
            GFP_KERNEL,
        )
    }

    /// One call of the timers'.
    pub(super) fn timer(&mut self) {
        self.trace("timer");
        match self.rng.below(6) {
            0 | 1 => {
                let (left, delay) = (self.rng.below(4) as u32, self.timeout());
                let r = self.tick(left, delay, None).and_then(|t| Delayed::new(t));
                self.stats.count(&r);
                if let Ok(d) = r {
                    if self.rng.one_in(2) {
                        let ms = self.timeout();
                        d.arm(ms);
                    }
                    super::keep(&mut self.rng, &mut self.stats, &mut self.timers, d);
                }
            }
            2 => {
                // Armed for long, then again: the second is refused, as
                // the first is pending.
                let Some(i) = super::pick(&mut self.rng, &self.timers) else {
                    return;
                };
                let first = self.timers[i].arm(1000);
                let again = self.timers[i].arm(1000);
                self.stats.calls += 2;
                // If the first was refused, a short delay was pending,
                // whose tick may have come since.
                if first && again {
                    self.violation(format_args!("a timer armed twice in a row"));
                }
            }
            3 => {
                let Some(i) = super::pick(&mut self.rng, &self.timers) else {
                    return;
                };
                let ms = self.timeout();
                self.timers[i].arm(ms);
                self.stats.calls += 1;
            }
            4 => {
                if super::take(&mut self.rng, &mut self.timers).is_some() {
                    self.stats.dropped += 1;
                }
            }
            _ => self.own_timer(),
        }
    }

    /// A timer that owns itself: it drops itself from its last run.
    fn own_timer(&mut self) {
        let (left, delay) = (self.rng.below(4) as u32, self.timeout());
        if self.own_live.is_none() {
            self.own_live = Arc::new(AtomicU32::new(0), GFP_KERNEL).ok();
        }
        let Some(live) = self.own_live.clone() else {
            return;
        };
        let r = self.tick(left, delay, Some(live.clone())).and_then(|t| {
            let d = Delayed::new(t.clone())?;
            live.fetch_add(1, Ordering::Relaxed);
            // Armed once it holds itself: its last run finds it there.
            t.own.lock().insert(d).arm(delay);
            Ok(())
        });
        self.stats.count(&r);
        if r.is_ok() {
            self.stats.made += 1;
        }
    }

    /// Waits until the timers that own themselves have dropped themselves
    /// (each within 5 runs of at most 20 ms): one left after 10 s is a
    /// violation.
    pub(crate) fn wait_own_timers(&mut self) {
        let Some(live) = self.own_live.clone() else {
            return;
        };
        for _ in 0..10_000 {
            if live.load(Ordering::Acquire) == 0 {
                return;
            }
            kverbs::msleep(1);
        }
        let n = live.load(Ordering::Acquire);
        self.violation(format_args!(
            "{} timers that own themselves never dropped themselves",
            n
        ));
    }
}
