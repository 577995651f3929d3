// SPDX-License-Identifier: GPL-2.0

//! What the layer revokes when the module whose code it calls goes.
//!
//! An object of the layer may call the code of the module that made it: an
//! event sink, a client's `add` and `remove`, a debugfs or sysfs file's
//! `show` and `store`. A reference to that module in the object would pin
//! it by the objects its own exit is to drop, so that exit would never
//! run. Instead each such object is on a list of kverbs.ko's
//! (`rust/kverbs_module.c`) with two addresses of that code, and a module
//! notifier, when a module goes (`MODULE_STATE_GOING`: after its exit or
//! failed init, before its memory is freed), revokes the objects with an
//! address in it: an object the module leaked (`mem::forget`, an `Arc`
//! cycle) then calls its code no more. An event queue drops its sink
//! ([`crate::event`]: the notifier's `get` takes a reference to it, and
//! its release takes the entry off with [`Owned::remove`]); the others
//! are unregistered or removed by the notifier, and their drop then waits
//! for that and does nothing more ([`Owned::take`]). The revocations run
//! marked as deliveries of events: what they drop does not wait for other
//! runs (one may be in a sink that waits for the revocation), and the
//! notifier's flush after them does.
//!
//! Limits. What is revoked keeps its memory, and is safe only if never
//! dropped (forgotten, in a cycle): a later drop, by a module it was handed
//! to, runs the drop glue of the going module's types, which is gone --
//! as would any use of that module's types after it. A drop by another
//! task that began before the notifier took the object is the module's
//! own code running during its unload: not waited for. And the module's
//! code (a client's `remove`, a file's `show`, a sink's drop) may run
//! after its exit, until the notifier: it must not rely on what its exit
//! tore down.

use crate::bindings;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::types::Opaque;

/// The `get` and `orphan` callbacks of an entry: see `struct
/// kverbs_owned` in `rust/kverbs_helpers.h`.
pub(crate) type Callback = unsafe extern "C" fn(*mut bindings::kverbs_owned);

/// An entry of kverbs.ko's list for an object the notifier revokes, in
/// the object's pinned memory.
///
/// # Invariants
///
/// Once [`Owned::init`] has run, `entry` is initialised; from
/// [`Owned::add`] until [`Owned::remove`] (or [`Owned::take`]) it is on
/// the list, or the notifier took it off: then it calls the orphan
/// callback, which for an entry given up with [`Owned::take`] ends with
/// [`Owned::done`], setting `gone`.
pub(crate) struct Owned {
    entry: Opaque<bindings::kverbs_owned>,
    gone: AtomicU32,
}

impl Owned {
    /// An entry to initialise in place ([`Owned::init`]).
    pub(crate) const fn new() -> Self {
        Owned {
            entry: Opaque::uninit(),
            gone: AtomicU32::new(0),
        }
    }

    /// Initialises the entry with `get` (if any), `orphan` and two
    /// addresses that tell the modules whose going revokes the object: of
    /// their code (compiled into the module that instantiates the caller
    /// for its type) or data.
    ///
    /// # Safety
    ///
    /// `self` must be pinned until the object's drop has called
    /// [`Owned::remove`] or [`Owned::take`] (and, if `take` returned
    /// `false`, until that returned).
    pub(crate) unsafe fn init(
        &self,
        code: usize,
        code2: usize,
        get: Option<Callback>,
        orphan: Callback,
    ) {
        // SAFETY: The entry is pinned by the caller's guarantee and not
        // yet on the list.
        unsafe { bindings::kverbs_owned_init(self.entry.get(), code, code2, get, Some(orphan)) };
    }

    /// Puts the entry on the list, once the object may be revoked.
    ///
    /// # Safety
    ///
    /// Once, after [`Owned::init`].
    pub(crate) unsafe fn add(&self) {
        // SAFETY: Initialised and pinned (the caller's guarantees).
        unsafe { bindings::kverbs_owned_add(self.entry.get()) };
    }

    /// Puts the entry at the list's head: orphaned before the entries
    /// listed earlier.
    ///
    /// # Safety
    ///
    /// As [`Owned::add`].
    pub(crate) unsafe fn add_first(&self) {
        // SAFETY: Initialised and pinned (the caller's guarantees).
        unsafe { bindings::kverbs_owned_add_first(self.entry.get()) };
    }

    /// Takes the entry off the list (it may be off already): whether the
    /// notifier had taken it.
    ///
    /// # Safety
    ///
    /// After [`Owned::init`].
    pub(crate) unsafe fn remove(&self) -> bool {
        // SAFETY: Initialised (the caller's guarantee, and then the type
        // invariant); off the list already if the notifier took it.
        unsafe { bindings::kverbs_owned_del(self.entry.get()) }
    }

    /// Takes the entry off the list for the object's drop: `true` if the
    /// drop is to revoke the object itself; `false` once the notifier has
    /// (it took the entry first: this waits for its orphan callback).
    ///
    /// # Safety
    ///
    /// After [`Owned::init`].
    pub(crate) unsafe fn take(&self) -> bool {
        // SAFETY: The caller's guarantee.
        if !unsafe { self.remove() } {
            return true;
        }
        // SAFETY: `gone` lives with `self`, read with `READ_ONCE`; the
        // wait queue is kverbs.ko's. The orphan callback sets it.
        unsafe { bindings::kverbs_owned_wait(self.gone.as_ptr()) };
        false
    }

    /// Ends the orphan callback: the object may go as soon as this is
    /// seen, so nothing of it is touched after (the wait queue woken is
    /// kverbs.ko's).
    pub(crate) fn done(&self) {
        self.gone.store(1, Ordering::Release);
        // SAFETY: No precondition.
        unsafe { bindings::kverbs_owned_done() };
    }

    /// The object whose [`Owned`] is at `offset` in it, from the entry the
    /// notifier passes (`container_of`).
    ///
    /// # Safety
    ///
    /// `o` must be the entry of an [`Owned`] at `offset` in a live `U`.
    pub(crate) unsafe fn owner<'a, U>(o: *mut bindings::kverbs_owned, offset: usize) -> &'a U {
        // SAFETY: By the caller's guarantee `o` is `offset` plus the offset
        // of `entry` into a live `U`; `Opaque` is transparent.
        unsafe {
            &*(o.cast::<u8>()
                .sub(core::mem::offset_of!(Owned, entry) + offset)
                .cast::<U>())
        }
    }
}
