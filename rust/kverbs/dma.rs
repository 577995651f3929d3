// SPDX-License-Identifier: GPL-2.0

//! DMA-mapped buffers for work requests.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`ib_dma_map_single` and friends)

use crate::bindings;
use crate::device::Device;
use kernel::{prelude::*, types::ARef};

/// A kernel buffer mapped for DMA by an RDMA device (bidirectional), unmapped
/// and freed on drop.
///
/// The CPU reaches the contents only by copying ([`DmaBuf::write`],
/// [`DmaBuf::read`]), which sync the mapping for the CPU before and for the
/// device after, so no Rust reference ever aliases memory the device may
/// write. Work requests hold the buffer through an `Arc<DmaBuf>` until their
/// completion has been reaped or flushed (see [`crate::qp`]), so it cannot
/// be freed while the device may still access it.
///
/// # Invariants
///
/// `cpu` is a `kmalloc`ed allocation of `len` bytes (`len > 0`), mapped at
/// `dma` on `dev` with `DMA_BIDIRECTIONAL`.
pub struct DmaBuf {
    dev: ARef<Device>,
    cpu: *mut u8,
    dma: u64,
    len: usize,
}

// SAFETY: The buffer is plain memory owned by this object; the pointers are
// usable from any thread.
unsafe impl Send for DmaBuf {}
// SAFETY: Through `&DmaBuf` the memory is only copied in and out with raw
// copies, never referenced, so concurrent use is not a Rust data race on a
// reference; what the bytes are is up to the users (as with device memory).
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// Allocates `len` zeroed bytes and maps them for `dev`.
    pub fn new(dev: &Device, len: usize) -> Result<Self> {
        if len == 0 {
            return Err(EINVAL);
        }
        let mem = KVec::<u8>::from_elem(0, len, GFP_KERNEL)?;
        let (cpu, _, _) = mem.into_raw_parts();
        // SAFETY: `dev` is live; `cpu` is valid for `len` bytes.
        let dma = unsafe {
            bindings::ib_dma_map_single(dev.as_raw(), cpu.cast(), len, bindings::DMA_BIDIRECTIONAL)
        };
        // SAFETY: `dev` is live; `dma` was just returned by the mapping.
        if unsafe { bindings::ib_dma_mapping_error(dev.as_raw(), dma) } != 0 {
            // SAFETY: `cpu`, `len`, `len` came from `into_raw_parts` above.
            drop(unsafe { KVec::from_raw_parts(cpu, len, len) });
            return Err(ENOMEM);
        }
        // INVARIANT: allocated and mapped above.
        Ok(DmaBuf {
            dev: dev.into(),
            cpu,
            dma,
            len,
        })
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (never: a buffer has at least one byte).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The DMA address of byte `offset`.
    pub(crate) fn dma_addr(&self, offset: usize) -> u64 {
        self.dma + offset as u64
    }

    /// Checks that `offset..offset + len` lies within the buffer.
    pub(crate) fn check(&self, offset: usize, len: usize) -> Result {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(EINVAL),
        }
    }

    fn sync_for_cpu(&self) {
        // SAFETY: By the type invariant the mapping is live.
        unsafe {
            bindings::ib_dma_sync_single_for_cpu(
                self.dev.as_raw(),
                self.dma,
                self.len,
                bindings::DMA_BIDIRECTIONAL,
            )
        };
    }

    fn sync_for_device(&self) {
        // SAFETY: By the type invariant the mapping is live.
        unsafe {
            bindings::ib_dma_sync_single_for_device(
                self.dev.as_raw(),
                self.dma,
                self.len,
                bindings::DMA_BIDIRECTIONAL,
            )
        };
    }

    /// Copies `data` into the buffer at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result {
        self.check(offset, data.len())?;
        self.sync_for_cpu();
        // SAFETY: The range was checked to lie in the allocation (type
        // invariant); `data` cannot overlap memory we own.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), self.cpu.add(offset), data.len()) };
        self.sync_for_device();
        Ok(())
    }

    /// Copies the buffer at `offset` into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result {
        self.check(offset, out.len())?;
        self.sync_for_cpu();
        // SAFETY: As in `write`.
        unsafe {
            core::ptr::copy_nonoverlapping(self.cpu.add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the buffer is mapped on `dev`, which
        // the `ARef` keeps registered; nothing else uses it any more.
        unsafe {
            bindings::ib_dma_unmap_single(
                self.dev.as_raw(),
                self.dma,
                self.len,
                bindings::DMA_BIDIRECTIONAL,
            );
            drop(KVec::from_raw_parts(self.cpu, self.len, self.len));
        }
    }
}
