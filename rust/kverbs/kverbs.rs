// SPDX-License-Identifier: GPL-2.0

//! kverbs: safe Rust abstractions of the Linux kernel RDMA verbs.
//!
//! This crate is the layer between kernel RDMA upper-layer protocols (ULPs)
//! written in safe Rust and the C verbs of `drivers/infiniband/core`.  It is
//! built out of tree with the kernel's Kbuild: the crate is compiled to an
//! object plus metadata, and linked with the C wrappers bindgen generates
//! for the static inline verbs into a module of its own, `kverbs.ko`, which
//! exports its symbols; every module that uses it (see `samples/`) is
//! compiled against the metadata and resolves the layer from `kverbs.ko`.
//!
//! What it offers so far:
//!
//! - [`client`]: registration as an RDMA client (`ib_register_client`), with
//!   per-device data created by `add` and handed back to `remove`.
//! - [`device`]: a borrowed or reference-counted RDMA [`device::Device`] and
//!   safe queries of its attributes, ports and GID table.
//! - [`debugfs`] and [`sysfs`]: files that show (and optionally take) text,
//!   removed on drop, safe against removal while a reader is inside.
//! - [`pd`], [`cq`], [`qp`] (typestate queue pairs, RC and UD), [`mr`]
//!   (fast registration), [`dma`], [`ah`], [`mcast`], [`cm`] (rdma_cm),
//!   [`tcp`]: the verbs, with the lifetimes of what requests use owned by
//!   the types.
//! - [`stream`]: the data path -- prebuilt request chains, counted
//!   completions, batch and busy polling, inline sends.
//!
//! All `unsafe` code of the project lives in this crate; its users are safe
//! Rust and are built with `#![deny(unsafe_code)]`.

#![deny(clippy::undocumented_unsafe_blocks)]

// The prefix of this crate's `pr_*` messages.
const __LOG_PREFIX: &[u8] = b"kverbs\0";

#[allow(
    dead_code,
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    improper_ctypes,
    unreachable_pub,
    unsafe_op_in_unsafe_fn,
    missing_docs,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    // Enabled by 7.x's kernel Makefile: generated code does not follow them.
    clippy::as_ptr_cast_mut,
    clippy::as_underscore,
    clippy::cast_lossless,
    clippy::ptr_as_ptr,
    clippy::ptr_cast_constness,
    clippy::ref_as_ptr
)]
mod bindings {
    use kernel::ffi;

    // Blocklisted in the bindgen call, as in the kernel's own bindings, so
    // that they map to Rust's pointer-sized integers.
    type __kernel_size_t = usize;
    type __kernel_ssize_t = isize;
    type __kernel_ptrdiff_t = isize;

    include!("../bindings_generated.rs");
}

pub mod ah;
pub mod blk;
pub mod client;
pub mod cm;
mod compat;
pub mod cq;
pub mod debugfs;
pub mod delayed;
pub mod device;
pub mod dma;
pub mod event;
pub mod io;
mod irq_lock;
mod layer_ref;
pub mod mcast;
pub mod mr;
mod owned;
pub mod pd;
pub mod qp;
pub mod sg;
mod show;
pub mod srq;
pub mod stream;
pub mod sysfs;
mod task_mark;
pub mod tcp;
mod wait;
pub mod wc;

pub use compat::{ARef, AlwaysRefCounted};
pub use irq_lock::IrqLock;
pub use show::{Show, Store};
pub(crate) use wait::Deadline;

/// The monotonic clock, in nanoseconds (`ktime_get_ns`).
pub fn now_ns() -> u64 {
    // SAFETY: Reads the clock; callable from any context.
    unsafe { bindings::kverbs_ktime_get_ns() }
}

/// The CPUs online now (`num_online_cpus`): one may go or come at once
/// after.
pub fn num_online_cpus() -> u32 {
    // SAFETY: Reads the atomic `__num_online_cpus` (a snapshot): no lock,
    // no sleep; callable from any context.
    unsafe { bindings::kverbs_num_online_cpus() }
}

/// Sleeps about `ms` milliseconds, less if a signal comes
/// (`msleep_interruptible`; the 6.12 `kernel` crate has no `delay`).
pub fn msleep(ms: u32) {
    // SAFETY: Plain helper; sleeps in process context.
    unsafe { bindings::kverbs_msleep_interruptible(ms) };
}

/// `a * b / c` without overflow of the product (`mul_u64_u64_div_u64`):
/// `u64::MAX` when the quotient does not fit in 64 bits, 0 when `c` is 0.
pub fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    if c == 0 {
        return 0;
    }
    // The quotient fits in 64 bits if and only if the product's high half
    // is below `c`; x86-64's `divq` raises a divide error otherwise
    // (arch/x86/include/asm/div64.h). A 64x64-bit product is one `mulq`
    // (128-bit division, by contrast, has no kernel implementation).
    if ((u128::from(a) * u128::from(b)) >> 64) as u64 >= c {
        return u64::MAX;
    }
    // SAFETY: Plain arithmetic; `c` is not 0 and the quotient fits in 64
    // bits (checked above), so the division cannot fault.
    unsafe { bindings::kverbs_mul_div(a, b, c) }
}

/// The calling task's `task_struct` address, as an identity only.
pub(crate) fn current_task() -> usize {
    // SAFETY: Reads `current`; callable from any context.
    unsafe { bindings::kverbs_current() as usize }
}

/// Gives the CPU to another task if one should run (`cond_resched`): for
/// loops that poll.
pub fn cond_resched() {
    // SAFETY: Plain helper; process context.
    unsafe { bindings::kverbs_cond_resched() };
}

/// Error codes the `kernel` crate of 6.12 does not name.
pub mod errno {
    use kernel::error::Error;

    macro_rules! errno {
        ($($(#[$m:meta])* $f:ident = $c:ident;)*) => {$(
            $(#[$m])*
            pub fn $f() -> Error {
                Error::from_errno(-(kernel::bindings::$c as i32))
            }
        )*};
    }

    errno! {
        /// `ETIMEDOUT`: a wait ran out of time.
        etimedout = ETIMEDOUT;
        /// `ECANCELED`: a wait was cancelled.
        ecanceled = ECANCELED;
        /// `EOPNOTSUPP`: not supported.
        eopnotsupp = EOPNOTSUPP;
        /// `EMSGSIZE`: a message too long.
        emsgsize = EMSGSIZE;
        /// `ECONNREFUSED`: nobody listens.
        econnrefused = ECONNREFUSED;
        /// `EPROTO`: the peer broke the protocol.
        eproto = EPROTO;
        /// `ENETDOWN`: the network (a port, its netdev) is down.
        enetdown = ENETDOWN;
        /// `ECONNRESET`: the peer went away.
        econnreset = ECONNRESET;
        /// `EDEADLK`: the call would wait for the task making it.
        edeadlk = EDEADLK;
        /// `ENOLINK`: the link (a queue to the peer) is gone.
        enolink = ENOLINK;
        /// `EREMOTEIO`: the target refused the I/O (`BLK_STS_TARGET`).
        eremoteio = EREMOTEIO;
        /// `ENODATA`: a media error (`BLK_STS_MEDIUM`).
        enodata = ENODATA;
    }
}
