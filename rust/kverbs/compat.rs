// SPDX-License-Identifier: GPL-2.0

//! What differs between the kernels kverbs builds against.
//!
//! kverbs builds against Linux 6.12 LTS and Linux 7.3. Between them the
//! `kernel` crate moved `ARef`, dropped `Vec::set_len` for safe shrinking,
//! and routed the `pr_*` macros through its own `kernel::fmt::Display`. The
//! top-level `Kbuild` sets the cfg `kverbs_linux_7` when it builds against
//! a 7.x kernel; this file is the only place in the crate that reads it, so
//! that the rest of the layer (and every module built on it) has one source
//! for both kernels. C interfaces that changed are wrapped in
//! `rust/kverbs_helpers.c` instead, where `LINUX_VERSION_CODE` selects.

#[cfg(not(kverbs_linux_7))]
pub use kernel::types::{ARef, AlwaysRefCounted};

#[cfg(kverbs_linux_7)]
pub use kernel::sync::aref::{ARef, AlwaysRefCounted};

use kernel::{prelude::*, uaccess::UserSlice};

/// Shortens `v` to its first `len` elements (no-op if it is not longer).
/// The elements are `Copy`: nothing is dropped.
pub(crate) fn truncate<T: Copy>(v: &mut KVec<T>, len: usize) {
    #[cfg(kverbs_linux_7)]
    v.truncate(len);
    #[cfg(not(kverbs_linux_7))]
    if len < v.len() {
        // SAFETY: `len` is below the length, so the first `len` elements
        // are initialised; those left out are `Copy` and need no drop.
        unsafe { v.set_len(len) };
    }
}

/// A count of `struct ib_device_attr` (`max_qp`, `max_cqe`, ...): an `int`
/// in 6.12, a `u32` in 7.x; as the `i32` the layer has always given, a
/// count above `i32::MAX` (none is) saturating.
pub(crate) fn attr_count<T: TryInto<i32>>(v: T) -> i32 {
    v.try_into().unwrap_or(i32::MAX)
}

/// The user memory of a `write` to a file: `UserSlice::new` takes an
/// address in 6.12, a `UserPtr` in 7.x.
pub(crate) fn user_slice(buf: *const kernel::ffi::c_char, len: usize) -> UserSlice {
    #[cfg(kverbs_linux_7)]
    let slice = UserSlice::new(
        kernel::uaccess::UserPtr::from_ptr(buf.cast_mut().cast()),
        len,
    );
    #[cfg(not(kverbs_linux_7))]
    let slice = UserSlice::new(buf as usize, len);
    slice
}

/// A `ForeignOwnable` as the pointer C keeps: `into_foreign` gives a
/// `*const c_void` in 6.12, a `*mut c_void` in 7.x.
pub(crate) fn into_foreign<T: kernel::types::ForeignOwnable>(t: T) -> *mut kernel::ffi::c_void {
    // 7.x's `*mut` coerces to `*const`: one conversion for both.
    let p: *const kernel::ffi::c_void = t.into_foreign();
    p.cast_mut()
}

/// Makes the types named [`kernel::fmt::Display`] where the kernel has
/// that trait (7.x, whose `pr_*` macros take it) by forwarding to their
/// [`core::fmt::Display`]; expands to nothing on 6.12, whose `pr_*` macros
/// take `core::fmt::Display`. For the layer's types and those of modules
/// built on it: `kverbs::kernel_display!(MyType, Other<'_>);`.
#[cfg(kverbs_linux_7)]
#[macro_export]
macro_rules! kernel_display {
    ($($t:ty),+ $(,)?) => {
        $(
            impl ::kernel::fmt::Display for $t {
                fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    ::core::fmt::Display::fmt(self, f)
                }
            }
        )+
    };
}

/// See the 7.x definition: nothing to do on 6.12.
#[cfg(not(kverbs_linux_7))]
#[macro_export]
macro_rules! kernel_display {
    ($($t:ty),+ $(,)?) => {};
}
