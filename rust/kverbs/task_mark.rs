// SPDX-License-Identifier: GPL-2.0

//! Marks of the tasks running a kind of kverbs callback (a client's `add`,
//! a delivery to an event sink), so that a call that would wait for the
//! callback it is made from can tell and refuse, or not wait.
//!
//! A mark is the task's address in one of a fixed number of entries, from
//! entering the callback to leaving it, on the same task: while it is
//! there the task is live and is the only one to store it. Beyond the
//! entries a task goes unmarked.

use core::sync::atomic::{AtomicUsize, Ordering};

/// `N` entries of task marks.
pub(crate) struct TaskMarks<const N: usize>([AtomicUsize; N]);

impl<const N: usize> TaskMarks<N> {
    pub(crate) const fn new() -> Self {
        TaskMarks([const { AtomicUsize::new(0) }; N])
    }

    /// Marks the current task until the returned mark is dropped (if an
    /// entry is free).
    pub(crate) fn enter(&'static self) -> Mark {
        let t = crate::current_task();
        Mark(
            self.0.iter().find(|m| {
                m.compare_exchange(0, t, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            }),
            core::marker::PhantomData,
        )
    }

    /// Marks the current task as [`TaskMarks::enter`] does, but while every
    /// entry is taken waits for one (1 ms at a time) until `give_up` says
    /// to stop: then the mark returned is not held.
    pub(crate) fn enter_waiting(&'static self, give_up: impl Fn() -> bool) -> Mark {
        loop {
            let mark = self.enter();
            if mark.held() || give_up() {
                return mark;
            }
            crate::msleep(1);
        }
    }

    /// Whether the current task is marked.
    pub(crate) fn has_current(&self) -> bool {
        let t = crate::current_task();
        self.0.iter().any(|m| m.load(Ordering::Acquire) == t)
    }
}

/// A task's mark, cleared on drop; not `Send`: it is the task's, and only
/// that task may clear it.
pub(crate) struct Mark(
    Option<&'static AtomicUsize>,
    core::marker::PhantomData<*const ()>,
);

impl Mark {
    /// Whether the task got a mark.
    pub(crate) fn held(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        if let Some(m) = self.0 {
            m.store(0, Ordering::Release);
        }
    }
}
