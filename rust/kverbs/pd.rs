// SPDX-License-Identifier: GPL-2.0

//! Protection domains.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use crate::bindings;
use crate::device::Device;
use crate::layer_ref::LayerRef;
use crate::ARef;
use core::ptr::NonNull;
use kernel::{c_str, error::from_err_ptr, prelude::*, sync::Arc};

/// A protection domain (`ib_alloc_pd`), deallocated when the last of its
/// users (queue pairs, memory regions, this handle) is dropped.
///
/// Never created with `IB_PD_UNSAFE_GLOBAL_RKEY`: remote access is granted
/// only through memory regions registered for it.
#[derive(Clone)]
pub struct Pd(Arc<PdInner>);

/// # Invariants
///
/// `pd` was allocated by `__ib_alloc_pd` on `dev` and is not yet freed.
pub(crate) struct PdInner {
    pd: NonNull<bindings::ib_pd>,
    dev: ARef<Device>,
    /// Dropped last: the PD's resource name, which its MRs and SRQs copy
    /// and `rdma resource show` reads, is a string of kverbs.ko's.
    _layer: LayerRef,
}

// SAFETY: A PD may be used and freed from any thread.
unsafe impl Send for PdInner {}
// SAFETY: The verbs taking a PD are thread safe.
unsafe impl Sync for PdInner {}

impl Pd {
    /// Allocates a protection domain on `dev`.
    pub fn new(dev: &Device) -> Result<Self> {
        let layer = LayerRef::new()?;
        // SAFETY: `dev` is live; flags 0 asks for no global rkey; the caller
        // name is a static string of kverbs.ko, which `layer` keeps loaded.
        let pd = from_err_ptr(unsafe {
            bindings::__ib_alloc_pd(dev.as_raw(), 0, c_str!("kverbs").as_char_ptr())
        })?;
        let pd = NonNull::new(pd).ok_or(ENOMEM)?;
        // INVARIANT: just allocated. On allocation failure of the `Arc`, the
        // `PdInner` is dropped, which frees the PD.
        Ok(Pd(Arc::new(
            PdInner {
                pd,
                dev: dev.into(),
                _layer: layer,
            },
            GFP_KERNEL,
        )?))
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::ib_pd {
        self.0.pd.as_ptr()
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.0.dev
    }

    /// Whether `other` is this very PD.
    pub fn same_as(&self, other: &Pd) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The key local work requests use for DMA addresses in this PD.
    pub(crate) fn local_dma_lkey(&self) -> u32 {
        // SAFETY: The PD is live (type invariant); the key is set at
        // allocation and never changes.
        unsafe { (*self.as_raw()).local_dma_lkey }
    }
}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the PD is live; this is the last
        // reference, so every kverbs QP, SRQ and MR of the PD is destroyed
        // (`ib_dealloc_pd_user` does not check `pd->usecnt`, but one whose
        // destruction failed is leaked with its reference to the PD, which
        // then never comes here). A driver's `dealloc_pd` error only WARNs
        // in `ib_dealloc_pd`, which a test run fails on.
        unsafe { bindings::ib_dealloc_pd(self.pd.as_ptr()) };
    }
}
