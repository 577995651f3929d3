// SPDX-License-Identifier: GPL-2.0

//! A value behind a spinlock taken with interrupts off.
//!
//! C header: [`include/linux/spinlock.h`](srctree/include/linux/spinlock.h)
//!
//! For data that process context shares with callbacks the RDMA core and
//! drivers run in any context -- softirq, hard interrupt -- such as event
//! handlers and completion `done` functions: `spin_lock_irqsave`, which the
//! 6.12 `kernel` crate does not wrap. Nothing that may sleep or allocate
//! with `GFP_KERNEL` may be done under it.

use crate::bindings;
use core::cell::UnsafeCell;
use kernel::{prelude::*, types::Opaque};

/// `T`, reached only with the lock held, interrupts off.
///
/// # Invariants
///
/// `lock` is an initialised `spinlock_t`; `value` is only accessed with it
/// held.
#[pin_data]
pub struct IrqLock<T> {
    #[pin]
    lock: Opaque<bindings::spinlock_t>,
    value: UnsafeCell<T>,
}

// SAFETY: The value moves with the lock; `T: Send` may be used from the
// thread it ends up on.
unsafe impl<T: Send> Send for IrqLock<T> {}
// SAFETY: The value is only reached under the lock, by one thread at a time.
unsafe impl<T: Send> Sync for IrqLock<T> {}

impl<T> IrqLock<T> {
    /// A lock around `value`.
    pub fn new(value: T) -> impl PinInit<Self> {
        pin_init!(IrqLock {
            // SAFETY: `slot` is valid for writes and pinned.
            lock <- Opaque::ffi_init(|slot: *mut bindings::spinlock_t| unsafe {
                bindings::kverbs_spin_lock_init(slot)
            }),
            value: UnsafeCell::new(value),
        })
    }

    /// Runs `f` on the value with the lock held, interrupts off.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: The lock is initialised (type invariant).
        let flags = unsafe { bindings::kverbs_spin_lock_irqsave(self.lock.get()) };
        // SAFETY: The lock is held: this is the only access to the value.
        let r = f(unsafe { &mut *self.value.get() });
        // SAFETY: Taken above with these flags.
        unsafe { bindings::kverbs_spin_unlock_irqrestore(self.lock.get(), flags) };
        r
    }
}
