// SPDX-License-Identifier: GPL-2.0

//! Read-only sysfs attributes in a directory under `/sys/kernel/`.
//!
//! C header: [`include/linux/sysfs.h`](srctree/include/linux/sysfs.h)
//!
//! Like [`crate::debugfs`], an [`Attribute`] holds a reference to its
//! [`KernelDir`], so the directory goes only after its attributes.  Removing
//! an attribute waits for the `show` calls inside it (kernfs drains them);
//! later reads of a file still open fail with `-ENODEV`, so module unload is
//! allowed at any time.

use crate::bindings;
use crate::owned::Owned;
use crate::show::Show;
use core::{fmt, ptr};
use kernel::{ffi::c_char, page::PAGE_SIZE, prelude::*, str::CStr, sync::Arc, types::Opaque};

/// A directory `/sys/kernel/<name>`, removed when the last reference to it
/// is dropped.
#[derive(Clone)]
pub struct KernelDir(Arc<KobjInner>);

/// # Invariants
///
/// `kobj` is a kobject from `kobject_create_and_add`, holding the reference
/// that call returned.
struct KobjInner {
    kobj: *mut bindings::kobject,
}

// SAFETY: The kobject is only used to add and remove attributes and to drop
// the reference, which the kobject core allows from any thread.
unsafe impl Send for KobjInner {}
// SAFETY: `&KobjInner` allows nothing but those same calls.
unsafe impl Sync for KobjInner {}

impl Drop for KobjInner {
    fn drop(&mut self) {
        // SAFETY: By the type invariant we own a reference; dropping the last
        // one removes the directory.
        unsafe { bindings::kobject_put(self.kobj) };
    }
}

impl KernelDir {
    /// Creates `/sys/kernel/<name>`.
    pub fn new(name: &CStr) -> Result<Self> {
        // SAFETY: `name` is a valid C string; `kernel_kobj` is the kobject of
        // `/sys/kernel`, which exists for the kernel's lifetime.
        let kobj =
            unsafe { bindings::kobject_create_and_add(name.as_char_ptr(), bindings::kernel_kobj) };
        if kobj.is_null() {
            // The kobject core has said why in the kernel log.
            return Err(ENOMEM);
        }
        // INVARIANT: `kobj` was just created; we own its reference. On
        // allocation failure the `KobjInner` is dropped, which puts it.
        Ok(KernelDir(Arc::new(KobjInner { kobj }, GFP_KERNEL)?))
    }

    /// Adds a read-only (0444) attribute `name` showing `data`.
    pub fn attribute<T: Show + 'static>(
        &self,
        name: &'static CStr,
        data: T,
    ) -> Result<Attribute<T>> {
        // SAFETY: An all-zero `kobj_attribute` is valid (null name, no
        // callbacks); the fields that matter are set here.
        let mut kattr: bindings::kobj_attribute = unsafe { core::mem::zeroed() };
        kattr.attr.name = name.as_char_ptr();
        kattr.attr.mode = 0o444;
        // SAFETY: `kattr` is a valid attribute, owned here.
        unsafe { bindings::kverbs_kobj_attr_set_show(&mut kattr, Some(show_callback::<T>)) };
        let inner = KBox::new(
            AttrInner {
                kattr: Opaque::new(kattr),
                data,
                dir: self.clone(),
                owned: Owned::new(),
            },
            GFP_KERNEL,
        )?;
        // SAFETY: `owned` stays in the box, not moved, until the drop has
        // taken it off the list. The addresses are of the module that
        // instantiates this function for `T` (the attribute's), as is the
        // callback.
        unsafe {
            inner.owned.init(
                show_callback::<T> as *const () as usize,
                core::ptr::drop_in_place::<T> as *const () as usize,
                None,
                orphan::<T>,
            )
        };
        // The attribute is shared with sysfs from here on: it is reached only
        // through the raw pointer of its `Opaque`.
        let kattr = inner.kattr.get();
        // SAFETY: `kattr` is valid and seen by nobody else yet; the lockdep
        // key goes into its `attr`.
        unsafe { bindings::kverbs_sysfs_attr_init(&raw mut (*kattr).attr) };
        // SAFETY: The kobject is live (type invariant of `KobjInner`);
        // the attribute lives in `inner` until `Attribute::drop` removes it.
        kernel::error::to_result(unsafe {
            bindings::sysfs_create_file_ns(self.0.kobj, &raw const (*kattr).attr, ptr::null())
        })?;
        // SAFETY: Once, after `init`.
        unsafe { inner.owned.add() };
        // INVARIANT: the attribute was added above.
        Ok(Attribute { inner })
    }
}

/// The `kobj_attribute` sysfs calls back with, followed by the data, the
/// directory whose kobject it is an attribute of, and its entry on
/// kverbs.ko's list of what calls a module's code.
#[repr(C)]
struct AttrInner<T> {
    kattr: Opaque<bindings::kobj_attribute>,
    data: T,
    dir: KernelDir,
    owned: Owned,
}

impl<T> AttrInner<T> {
    /// Removes the attribute, which drains the `show` calls running on it.
    ///
    /// # Safety
    ///
    /// Once: by the drop of the [`Attribute`], or by the module notifier's
    /// orphan callback if it took the entry.
    unsafe fn remove(&self) {
        // SAFETY: The attribute was added to `dir`'s kobject, which `dir`
        // keeps live, and is removed once (the caller's guarantee).
        unsafe {
            bindings::sysfs_remove_file_ns(
                self.dir.0.kobj,
                &raw const (*self.kattr.get()).attr,
                ptr::null(),
            )
        };
    }
}

/// A read-only sysfs attribute, removed on drop. The drop waits for the
/// calls of its `show` in progress (`kernfs_drain`): it must not be made
/// from one of them, which would wait for itself, nor from an event sink
/// one of them may reach (as for [`crate::debugfs::File`]).
///
/// # Invariants
///
/// `inner.kattr` is an attribute of `inner.dir`'s kobject whose `show` is
/// `show_callback::<T>`, until the drop or the module notifier removes it.
pub struct Attribute<T> {
    inner: KBox<AttrInner<T>>,
}

// SAFETY: The raw pointers inside `kobj_attribute` are to static data; the
// data is `Send` as `Show` requires.
unsafe impl<T: Send> Send for Attribute<T> {}
// SAFETY: `&Attribute<T>` gives only `&T`, which is `Sync`.
unsafe impl<T: Sync> Sync for Attribute<T> {}

impl<T> Attribute<T> {
    /// The data this attribute shows.
    pub fn data(&self) -> &T {
        &self.inner.data
    }
}

impl<T> Drop for Attribute<T> {
    fn drop(&mut self) {
        // SAFETY: The attribute's creation initialised the entry.
        if !unsafe { self.inner.owned.take() } {
            // The notifier of its module's going removed it.
            return;
        }
        // SAFETY: The notifier did not take the entry, so this removes it,
        // once. The removal drains the `show` calls running on it, so
        // `inner` may be freed once this returns.
        unsafe { self.inner.remove() };
    }
}

/// The `orphan` of an attribute on kverbs.ko's list, whose module is
/// going (after its exit, with an [`Attribute`] it never dropped): removes
/// it, which waits for the calls of its `show` in progress, so that none
/// comes after the module is gone. The attribute's memory stays until it
/// is dropped (if ever).
///
/// # Safety
///
/// Called by kverbs.ko's module notifier, in process context with no lock
/// held, with the entry of the `owned` field of a live `AttrInner<T>`,
/// which it has taken off the list.
unsafe extern "C" fn orphan<T>(o: *mut bindings::kverbs_owned) {
    // SAFETY: By the caller's guarantee; the `AttrInner<T>` lives until its
    // `Attribute`'s drop, which waits for `Owned::done`.
    let inner: &AttrInner<T> =
        unsafe { Owned::owner(o, core::mem::offset_of!(AttrInner<T>, owned)) };
    let _mark = crate::event::mark_delivering();
    // SAFETY: Only this call removes it: the drop does not once the entry
    // is taken.
    unsafe { inner.remove() };
    inner.owned.done();
}

/// `show` of every kverbs attribute.
///
/// # Safety
///
/// Called by sysfs with `kattr` the attribute of a live [`Attribute<T>`]
/// and `buf` a buffer of `PAGE_SIZE` bytes.
unsafe extern "C" fn show_callback<T: Show>(
    _kobj: *mut bindings::kobject,
    kattr: *mut bindings::kobj_attribute,
    buf: *mut c_char,
) -> isize {
    // SAFETY: `kattr` is (the `Opaque`, transparent, of) the first field of
    // the `#[repr(C)]` `AttrInner<T>` that `Attribute<T>` keeps alive until
    // the attribute is removed; only `data` is read through the reference.
    let inner = unsafe { &*kattr.cast::<AttrInner<T>>() };
    let mut out = PageWriter { buf, len: 0 };
    match inner.data.show(&mut out) {
        Ok(()) => out.len as isize,
        Err(e) => e.to_errno() as isize,
    }
}

/// Writes text into a sysfs page; what does not fit is dropped, as
/// `sysfs_emit` does.
///
/// # Invariants
///
/// `buf` is valid for writes of `PAGE_SIZE` bytes; `len < PAGE_SIZE`: sysfs
/// takes a `show` that returns `PAGE_SIZE` or more for a bug
/// (`sysfs_kf_seq_show`: "fill_read_buffer: ... returned bad count") and
/// cuts it to `PAGE_SIZE - 1`, the most `sysfs_emit` writes.
struct PageWriter {
    buf: *mut c_char,
    len: usize,
}

impl fmt::Write for PageWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = s.len().min(PAGE_SIZE - 1 - self.len);
        // SAFETY: By the type invariant, `buf + len .. buf + len + n` lies
        // within the page; `s` is valid for `n` bytes and does not overlap.
        unsafe { ptr::copy_nonoverlapping(s.as_ptr(), self.buf.add(self.len), n) };
        self.len += n;
        Ok(())
    }
}
