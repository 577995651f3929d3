// SPDX-License-Identifier: GPL-2.0

//! A reference to kverbs.ko held by each object that leaves the RDMA core
//! a pointer into its code or data.
//!
//! A module that uses the layer pins kverbs.ko by its use of its symbols,
//! but only while it is loaded. An object it leaks (`mem::forget`, an
//! `Arc` cycle) keeps what it installed in the core: a QP's requests'
//! `wr_cqe->done` and its event handler, an SRQ's likewise, a CQ's
//! completion handler, a CM ID's event handler, a device event handler, a
//! debugfs file's operations -- kverbs.ko's code -- and the resource name
//! of a PD, CQ and CM ID, a string of kverbs.ko's that `rdma resource show`
//! reads. Each such object holds a [`LayerRef`] from before it installs
//! them until after it has removed them (the PD until it is freed), so a
//! leaked one keeps kverbs.ko loaded (`rmmod kverbs` says it is in use)
//! instead of leaving the core pointers into freed memory, and kverbs.ko's
//! exit, which destroys the workqueue that delivers events, comes after
//! every object with an event queue is gone.
//!
//! What this does not cover is the code of the module that made the
//! object: an event sink, a client's `add` and `remove`, a debugfs or
//! sysfs file's `show` and `store` are that module's (generic code is
//! compiled into it). kverbs.ko's module notifier revokes them when that
//! module goes ([`crate::owned`]).
//!
//! The reference is given back by the object's drop, after everything else
//! it does; what runs after it is the return into the code that dropped
//! the object: a module that uses the layer (which pins kverbs.ko by its
//! symbols while it runs) or a run on kverbs.ko's event workqueue (which
//! its exit waits for). The one drop that runs on neither, a connection
//! request's ID given up in the connection manager's handler when its
//! device goes, gives its reference back from that workqueue
//! ([`LayerRef::put_deferred`]).

use crate::bindings;
use kernel::prelude::*;

/// A reference to kverbs.ko (`try_module_get`), given back on drop.
///
/// # Invariants
///
/// The reference was taken by `kverbs_layer_get` and is given back once,
/// on drop.
pub(crate) struct LayerRef(());

impl LayerRef {
    /// Takes a reference; fails with `ENODEV` while kverbs.ko is being
    /// unloaded.
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: No precondition: it takes a reference to kverbs.ko, live
        // while its code runs.
        if unsafe { bindings::kverbs_layer_get() } {
            Ok(LayerRef(()))
        } else {
            Err(ENODEV)
        }
    }

    /// Gives the reference back from kverbs.ko's event workqueue, whose
    /// destruction in kverbs.ko's exit waits for it: for a drop in code
    /// that no user of the layer and no run of that workqueue called.
    pub(crate) fn put_deferred(self) {
        core::mem::forget(self);
        // SAFETY: The reference of `self`, whose drop is not run: it is
        // given back once, by the workqueue.
        unsafe { bindings::kverbs_layer_put_deferred() };
    }
}

impl Drop for LayerRef {
    fn drop(&mut self) {
        // SAFETY: The reference taken in `new` (type invariant).
        unsafe { bindings::kverbs_layer_put() };
    }
}
