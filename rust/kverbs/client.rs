// SPDX-License-Identifier: GPL-2.0

//! RDMA clients: upper-layer protocols told about every RDMA device.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A module implements [`Client`] and keeps a [`Registration`] alive for as
//! long as it wants to be told.  The RDMA core then calls [`Client::add`] for
//! every device, present or future, and [`Client::remove`] when a device goes
//! (`rdma link del`, driver unload) or when the registration is dropped.
//!
//! The C callbacks are given only the device, not the client, so the
//! registration is found through a per-client static [`Slot`], declared by
//! [`crate::client_slot!`], the one implementation of the unsafe trait
//! [`ClientSlot`].  The slot is set while the client is registered and
//! cleared after `ib_unregister_client` has returned, when no callback can
//! be running any more.
//!
//! A [`Registration`] that is forgotten (`mem::forget`) stays registered,
//! its `Inner` leaked with it, until its module goes: kverbs.ko's module
//! notifier then unregisters it ([`crate::owned`]), which calls its
//! `remove` for each device, so the core calls none of the module's code
//! once it is gone. A module holds its registration in its module object,
//! which is dropped on unload; forgetting it is a bug of the module (its
//! `remove` then runs after its exit).

use crate::bindings;
use crate::device::Device;
use crate::owned::Owned;
use crate::task_mark::TaskMarks;
use core::{
    ptr,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{
    ffi::{c_int, c_void},
    prelude::*,
    str::CStr,
    types::{ForeignOwnable, Opaque},
};

/// An RDMA client.
///
/// # Examples
///
/// ```ignore
/// struct Ulp;
///
/// impl kverbs::client::Client for Ulp {
///     type DeviceData = KBox<PerDevice>;
///
///     fn add(&self, dev: &Device) -> Result<KBox<PerDevice>> { ... }
///     fn remove(&self, dev: &Device, data: KBox<PerDevice>) {}
/// }
///
/// kverbs::client_slot!(Ulp);
///
/// let reg = Registration::new(c_str!("ulp"), Ulp)?;
/// ```
pub trait Client: ClientSlot + Send + Sync + Sized + 'static {
    /// What the client keeps for each device, from `add` to `remove`.
    type DeviceData: ForeignOwnable + Send + Sync;

    /// A device appeared (or was present when the client registered).
    ///
    /// On error the device is ignored by this client: `remove` will not be
    /// called for it.  Called in process context; may sleep.
    fn add(&self, dev: &Device) -> Result<Self::DeviceData>;

    /// A device is going away.  When this returns, the client must no longer
    /// use the device: everything created on it must have been destroyed
    /// (dropping `data` is the usual way).  May sleep.
    ///
    /// Here (and in `add`) the task counts as delivering events
    /// ([`in_delivery`](crate::event::in_delivery)): an object dropped here
    /// does not wait for its sink's call in progress, nor delivers its
    /// last events to it (a sink called then that dropped the client's
    /// [`Registration`] would wait for this call); the `Registration`'s
    /// drop waits for the sinks' calls instead, and
    /// [`wait_for_deliveries`](crate::event::wait_for_deliveries) is
    /// refused here with `EDEADLK`.
    fn remove(&self, dev: &Device, data: Self::DeviceData) {
        let _ = dev;
        drop(data);
    }
}

/// The static slot through which the callbacks of a [`Client`] find its
/// [`Registration`]. Implemented by [`crate::client_slot!`]; implementing it
/// by hand is unsafe, and safe code cannot:
///
/// ```compile_fail,E0200
/// # use kverbs::client::{ClientSlot, Slot};
/// struct Ulp;
/// impl ClientSlot for Ulp {
///     fn slot() -> &'static Slot {
///         static S: Slot = Slot::new();
///         &S
///     }
/// }
/// ```
///
/// # Safety
///
/// `slot` must return the same static [`Slot`] on every call, used by no
/// other type: the callbacks trust what it holds to be this type's
/// registration.
pub unsafe trait ClientSlot {
    /// This type's slot.
    fn slot() -> &'static Slot;
}

/// Where the callbacks of a [`Client`] find its [`Registration`].
///
/// Declare one per client type with [`crate::client_slot!`].
pub struct Slot(AtomicPtr<c_void>);

impl Slot {
    /// An empty slot.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Slot(AtomicPtr::new(ptr::null_mut()))
    }
}

/// Implements [`ClientSlot`] for a client type, with a static slot of its
/// own.
#[macro_export]
macro_rules! client_slot {
    ($t:ty) => {
        // SAFETY: The slot is a static of this impl alone, the same on
        // every call.
        #[allow(unsafe_code)]
        unsafe impl $crate::client::ClientSlot for $t {
            fn slot() -> &'static $crate::client::Slot {
                static SLOT: $crate::client::Slot = $crate::client::Slot::new();
                &SLOT
            }
        }
    };
}

/// The registered `ib_client` and the client it calls.
///
/// # Invariants
///
/// `owned` is on kverbs.ko's list of what calls a module's code from the
/// client's registration until [`Registration`]'s drop takes it off, or
/// the module notifier does and unregisters the client ([`orphan`]).
struct Inner<T> {
    client: Opaque<bindings::ib_client>,
    ctx: T,
    owned: Owned,
}

/// A registered RDMA client; unregistered on drop.
///
/// The drop also waits for the event deliveries still running
/// ([`EventSink`](crate::event::EventSink)): when it returns, no sink of an
/// object dropped before (in [`Client::remove`], which it calls, or
/// earlier) is still called, nor is a worker still in its code, so the
/// module that held the registration may be unloaded. It is dropped in
/// process context, as the module object is on unload, never with a lock
/// held that a sink takes, and never inside a client's `add` or `remove`
/// (the core holds locks there that unregistering takes, and the client's
/// own `remove` would wait for itself). Dropped from a sink, it cannot wait
/// for the deliveries (its own is one): the module's exit then calls
/// [`wait_for_deliveries`](crate::event::wait_for_deliveries).
///
/// # Invariants
///
/// `inner.client` is registered with the RDMA core, and `T::slot()` points to
/// `inner`.
pub struct Registration<T: Client> {
    inner: Pin<KBox<Inner<T>>>,
}

// SAFETY: The `ib_client` is only touched by the RDMA core (under its own
// locks) and by `drop`; the client `T` is `Send`.
unsafe impl<T: Client> Send for Registration<T> {}
// SAFETY: `&Registration<T>` only gives `&T`, and `T` is `Sync`.
unsafe impl<T: Client> Sync for Registration<T> {}

impl<T: Client> Registration<T> {
    /// Registers `ctx` as the RDMA client `name` (shown by the core in its
    /// messages). `add` is called for the devices already present before
    /// this returns.
    ///
    /// Fails with `EBUSY` if a registration of `T` already exists, and with
    /// `EDEADLK` inside a client's `add` (of any client): the core holds
    /// locks there that registering takes.
    pub fn new(name: &'static CStr, ctx: T) -> Result<Self> {
        if IN_ADD.has_current() {
            return Err(crate::errno::edeadlk());
        }
        let client = bindings::ib_client {
            name: name.as_char_ptr(),
            add: Some(add_callback::<T>),
            remove: Some(remove_callback::<T>),
            ..Default::default()
        };
        let inner = KBox::pin(
            Inner {
                client: Opaque::new(client),
                ctx,
                owned: Owned::new(),
            },
            GFP_KERNEL,
        )?;
        // SAFETY: `owned` is pinned in `inner` until the drop has taken it
        // off the list. The addresses are of the module that instantiates
        // this function for `T` (the client's), as are the callbacks.
        unsafe {
            inner.owned.init(
                add_callback::<T> as *const () as usize,
                core::ptr::drop_in_place::<T> as *const () as usize,
                None,
                orphan::<T>,
            )
        };
        let inner_ptr = ptr::from_ref::<Inner<T>>(&inner)
            .cast_mut()
            .cast::<c_void>();
        T::slot()
            .0
            .compare_exchange(
                ptr::null_mut(),
                inner_ptr,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map_err(|_| EBUSY)?;
        // SAFETY: The client is pinned in `inner`, which is freed only after
        // `ib_unregister_client` (in `drop`) or right here on failure, when
        // it was never registered. Its callbacks find `inner` through the
        // slot, set above.
        let ret = unsafe { bindings::ib_register_client(inner.client.get()) };
        if ret != 0 {
            T::slot().0.store(ptr::null_mut(), Ordering::Release);
            return Err(Error::from_errno(ret));
        }
        // SAFETY: Once, after `init`.
        unsafe { inner.owned.add() };
        // INVARIANT: registered above, slot set above, listed.
        Ok(Registration { inner })
    }

    /// The client.
    pub fn client(&self) -> &T {
        &self.inner.ctx
    }
}

impl<T: Client> Drop for Registration<T> {
    fn drop(&mut self) {
        // SAFETY: `new` initialised the entry before registering.
        if !unsafe { self.inner.owned.take() } {
            // The notifier of the client's module's going unregistered it.
            return;
        }
        // SAFETY: The notifier did not take the entry: this unregisters.
        unsafe { self.inner.unregister() };
        // The objects dropped in `remove` (or before) are gone, but a sink
        // that dropped its own object may still be returning from that
        // call, and its run then drops its reference to the sink: wait for
        // the runs, so that the module can go once its exit has dropped
        // this. Not from a sink (dropped in a delivery), which this would
        // wait for: the module's exit must then wait itself.
        let _ = crate::event::wait_for_deliveries();
    }
}

impl<T: Client> Inner<T> {
    /// Unregisters the client and empties its slot.
    ///
    /// # Safety
    ///
    /// Once: by the drop of the [`Registration`], or by the module
    /// notifier's orphan callback if it took the entry.
    unsafe fn unregister(&self) {
        // SAFETY: The client is registered (type invariant of
        // `Registration`), and unregistered once (the caller's guarantee).
        // `ib_unregister_client` clears the client's registration mark (no
        // new `add` after it), calls `remove` for each device it holds a
        // context on, and then waits for `client->uses_zero`: every `add`
        // in progress and every context's removal, including those a
        // device's unregistration makes on another task, hold `uses`. So
        // when it returns no callback of the client runs or is to come,
        // and `inner` and the slot may go.
        unsafe { bindings::ib_unregister_client(self.client.get()) };
        T::slot().0.store(ptr::null_mut(), Ordering::Release);
    }
}

/// The `orphan` of a client registration on kverbs.ko's list, whose
/// module is going (after its exit, with a `Registration` it never
/// dropped): unregisters the client, which calls its `remove` for each
/// device -- the module's code, still there -- so that no callback comes
/// after the module is gone. The `Registration`'s memory stays until it is
/// dropped (if ever: a forgotten one is leaked).
///
/// # Safety
///
/// Called by kverbs.ko's module notifier, in process context with no lock
/// held, with the `owned` field of a listed `Inner<T>` it has taken off
/// the list.
unsafe extern "C" fn orphan<T: Client>(o: *mut bindings::kverbs_owned) {
    // SAFETY: `o` is the entry of the `owned` field of an `Inner<T>`, live
    // until its `Registration`'s drop, which waits for `Owned::done` once
    // the notifier has taken the entry.
    let inner: &Inner<T> = unsafe { Owned::owner(o, core::mem::offset_of!(Inner<T>, owned)) };
    let _mark = crate::event::mark_delivering();
    // SAFETY: Only this call unregisters it: the drop does not once the
    // entry is taken.
    unsafe { inner.unregister() };
    inner.owned.done();
}

/// The tasks inside a client's `add`, which the core calls holding
/// `devices_rwsem` and `clients_rwsem` (for writing in
/// `ib_register_client`'s loop, for reading in a device's registration),
/// and `ib_register_client` would take them again:
/// [`Registration::new`] refuses there. Each device's registration calls
/// the clients on one task: beyond 8 at once a task goes unmarked, and its
/// registration is not refused.
static IN_ADD: TaskMarks<8> = TaskMarks::new();

/// Finds the registration of `T` from inside one of its callbacks.
///
/// # Safety
///
/// Must be called from an `ib_client` callback of `T`'s registration.
unsafe fn inner<'a, T: Client>() -> &'a Inner<T> {
    let p = T::slot().0.load(Ordering::Acquire);
    // SAFETY: Callbacks run only between `ib_register_client` and the return
    // of `ib_unregister_client`, while the slot points to the live `Inner`.
    unsafe { &*p.cast::<Inner<T>>() }
}

/// `add` of the `ib_client` of `T`.
///
/// # Safety
///
/// Called by the RDMA core for `T`'s registered client, with `dev` a device
/// whose registration count the core holds.
unsafe extern "C" fn add_callback<T: Client>(dev: *mut bindings::ib_device) -> c_int {
    // SAFETY: The RDMA core calls this as `T`'s `add`.
    let inner = unsafe { inner::<T>() };
    // SAFETY: The core holds the device's registration count around `add`
    // and until `remove` has returned.
    let device = unsafe { Device::from_raw(dev) };
    let mark = IN_ADD.enter();
    let delivering = crate::event::try_mark_delivering();
    let added = inner.ctx.add(device);
    drop(delivering);
    drop(mark);
    match added {
        Ok(data) => {
            // SAFETY: `dev` is the device being added to our client, which
            // is registered. The data is given back in `remove_callback`.
            unsafe {
                bindings::ib_set_client_data(
                    dev,
                    inner.client.get(),
                    crate::compat::into_foreign(data),
                )
            };
            0
        }
        Err(e) => {
            // The core ignores the error (and calls no more of this
            // client's ops for the device): say so, or nobody will know.
            // SAFETY: `name` is the `'static` C string the client was
            // registered with.
            let name = unsafe { CStr::from_char_ptr((*inner.client.get()).name) };
            pr_err!(
                "{}: client {}: adding the device failed (error {}); it is ignored\n",
                device.name(),
                name,
                e.to_errno()
            );
            e.to_errno()
        }
    }
}

/// `remove` of the `ib_client` of `T`.
///
/// # Safety
///
/// Called by the RDMA core for `T`'s registered client, once per device
/// whose `add` succeeded, with the data `add_callback` stored.
unsafe extern "C" fn remove_callback<T: Client>(
    dev: *mut bindings::ib_device,
    client_data: *mut c_void,
) {
    // SAFETY: The RDMA core calls this as `T`'s `remove`.
    let inner = unsafe { inner::<T>() };
    // SAFETY: The core holds the device's registration count during
    // `remove`.
    let device = unsafe { Device::from_raw(dev) };
    // SAFETY: `remove` is called only for devices whose `add` succeeded,
    // once, with the data `add_callback` stored from `into_foreign`.
    let data = unsafe { T::DeviceData::from_foreign(client_data) };
    let _delivering = crate::event::try_mark_delivering();
    inner.ctx.remove(device, data);
}
