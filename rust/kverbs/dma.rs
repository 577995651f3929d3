// SPDX-License-Identifier: GPL-2.0

//! DMA-mapped buffers for work requests.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`ib_dma_map_single` and friends)

use crate::bindings;
use crate::device::Device;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::{prelude::*, types::ARef};

/// A kernel buffer mapped for DMA by an RDMA device (bidirectional), unmapped
/// and freed on drop.
///
/// The CPU reaches the contents only by copying ([`DmaBuf::write`],
/// [`DmaBuf::read`]), which sync the range they touch for the CPU before
/// and for the device after, so no Rust reference ever aliases memory the
/// device may write, and a sync never overwrites what the device wrote in
/// another part of the buffer (with swiotlb, a sync copies). One copy runs
/// at a time: another one started meanwhile, from another thread, fails
/// with `EBUSY` instead of racing it. Work requests hold the buffer through
/// an `Arc<DmaBuf>` until their completion has been reaped or flushed (see
/// [`crate::qp`]), so it cannot be freed while the device may still access
/// it.
///
/// What the device writes while the CPU copies (a receive posted on the
/// buffer) is outside the CPU's memory model, as device memory is: the
/// copies are raw byte copies, never references.
///
/// # Invariants
///
/// `cpu` is a `kmalloc`ed allocation of `cap >= len` bytes (`len > 0`), of
/// which the first `len` are mapped at `dma` on `dev` with
/// `DMA_BIDIRECTIONAL`. The CPU touches them only while holding `busy`.
pub struct DmaBuf {
    dev: ARef<Device>,
    cpu: *mut u8,
    dma: u64,
    len: usize,
    cap: usize,
    busy: AtomicBool,
}

// SAFETY: The buffer is plain memory owned by this object; the pointers are
// usable from any thread.
unsafe impl Send for DmaBuf {}
// SAFETY: Through `&DmaBuf` the memory is only copied in and out with raw
// copies, one at a time (`busy`), never referenced.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// Allocates `len` zeroed bytes and maps them for `dev`.
    pub fn new(dev: &Device, len: usize) -> Result<Self> {
        if len == 0 {
            return Err(EINVAL);
        }
        let mem = KVec::<u8>::from_elem(0, len, GFP_KERNEL)?;
        let (cpu, _, cap) = mem.into_raw_parts();
        // SAFETY: `dev` is live; `cpu` is valid for `len` bytes.
        let dma = unsafe {
            bindings::ib_dma_map_single(dev.as_raw(), cpu.cast(), len, bindings::DMA_BIDIRECTIONAL)
        };
        // SAFETY: `dev` is live; `dma` was just returned by the mapping.
        if unsafe { bindings::ib_dma_mapping_error(dev.as_raw(), dma) } != 0 {
            // SAFETY: `cpu`, `len`, `cap` came from `into_raw_parts` above.
            drop(unsafe { KVec::from_raw_parts(cpu, len, cap) });
            return Err(ENOMEM);
        }
        // INVARIANT: allocated and mapped above.
        Ok(DmaBuf {
            dev: dev.into(),
            cpu,
            dma,
            len,
            cap,
            busy: AtomicBool::new(false),
        })
    }

    /// The device the buffer is mapped for.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// `EINVAL`, with a message saying what was refused (`what`), unless
    /// the buffer is mapped for `dev`: a bus address of one device means
    /// nothing to another.
    pub(crate) fn check_device(&self, dev: &Device, what: &str) -> Result {
        if self.dev.same_as(dev) {
            return Ok(());
        }
        pr_err!(
            "{}: a buffer mapped for {} cannot be {}\n",
            dev.name(),
            self.dev.name(),
            what
        );
        Err(EINVAL)
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

    /// The kernel virtual address of byte `offset`: what an inline send's
    /// SGE names (the CPU copies the data when the request is posted).
    pub(crate) fn cpu_addr(&self, offset: usize) -> u64 {
        self.cpu as u64 + offset as u64
    }

    /// Checks that `offset..offset + len` lies within the buffer.
    pub(crate) fn check(&self, offset: usize, len: usize) -> Result {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(EINVAL),
        }
    }

    /// Runs `f` on `offset..offset + len`, synced for the CPU, then syncs
    /// that range back for the device. `EBUSY` if another copy is running.
    fn with_range(&self, offset: usize, len: usize, f: impl FnOnce(*mut u8)) -> Result {
        self.check(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        if self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(EBUSY);
        }
        let dev = self.dev.as_raw();
        let dma = self.dma_addr(offset);
        // SAFETY: By the type invariant the mapping is live; the range lies
        // within it (checked above).
        unsafe { bindings::ib_dma_sync_single_for_cpu(dev, dma, len, bindings::DMA_BIDIRECTIONAL) };
        // SAFETY: The range lies within the allocation (checked above).
        f(unsafe { self.cpu.add(offset) });
        // SAFETY: As above.
        unsafe {
            bindings::ib_dma_sync_single_for_device(dev, dma, len, bindings::DMA_BIDIRECTIONAL)
        };
        self.busy.store(false, Ordering::Release);
        Ok(())
    }

    /// Copies `data` into the buffer at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result {
        self.with_range(offset, data.len(), |p| {
            // SAFETY: `p` is valid for `data.len()` bytes, which no other
            // CPU access touches (`busy` is held); `data` cannot overlap
            // memory we own.
            unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) }
        })
    }

    /// Copies the buffer at `offset` into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result {
        let len = out.len();
        self.with_range(offset, len, |p| {
            // SAFETY: As in `write`.
            unsafe { core::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), len) }
        })
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
            drop(KVec::from_raw_parts(self.cpu, self.len, self.cap));
        }
    }
}
