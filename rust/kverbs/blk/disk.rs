// SPDX-License-Identifier: GPL-2.0

//! Disks of a tag set (`struct gendisk`), with their queue limits.

use super::{tag_set::OperationsVTable, Operations, TagSet};
use crate::{bindings, owned::Owned};
use core::fmt::{self, Write};
use kernel::{error::from_err_ptr, prelude::*, sync::Arc};

/// The largest name of a disk, its NUL included (`DISK_NAME_LEN`).
const NAME_LEN: usize = 32;

/// A disk to build: its block sizes, capacity and queue limits, as
/// `struct queue_limits` has them (0: the block layer's default). The
/// limits are checked when the disk is built (`blk_validate_limits`).
pub struct GenDiskBuilder {
    lim: bindings::kverbs_blk_limits,
    capacity: u64,
}

impl Default for GenDiskBuilder {
    fn default() -> Self {
        GenDiskBuilder {
            lim: bindings::kverbs_blk_limits {
                logical_block_size: 512,
                physical_block_size: 512,
                ..Default::default()
            },
            capacity: 0,
        }
    }
}

impl GenDiskBuilder {
    /// A disk of 512-byte blocks, empty, with the default limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// The smallest unit the disk reads and writes: a power of two from
    /// 512 to the page size (`EINVAL` otherwise).
    pub fn logical_block_size(mut self, size: u32) -> Result<Self> {
        if !(512..=kernel::page::PAGE_SIZE as u32).contains(&size) || !size.is_power_of_two() {
            return Err(EINVAL);
        }
        self.lim.logical_block_size = size;
        if self.lim.physical_block_size < size {
            self.lim.physical_block_size = size;
        }
        Ok(self)
    }

    /// The unit the disk writes without a read-modify-write: as the
    /// logical block size, and at least it.
    pub fn physical_block_size(mut self, size: u32) -> Result<Self> {
        if size < self.lim.logical_block_size || !size.is_power_of_two() {
            return Err(EINVAL);
        }
        self.lim.physical_block_size = size;
        Ok(self)
    }

    /// The capacity, in 512-byte sectors.
    pub fn capacity_sectors(mut self, sectors: u64) -> Self {
        self.capacity = sectors;
        self
    }

    /// The largest request, in 512-byte sectors.
    pub fn max_hw_sectors(mut self, sectors: u32) -> Self {
        self.lim.max_hw_sectors = sectors;
        self
    }

    /// The most segments of a request.
    pub fn max_segments(mut self, n: u16) -> Self {
        self.lim.max_segments = n;
        self
    }

    /// The largest segment, in bytes.
    pub fn max_segment_size(mut self, bytes: u32) -> Self {
        self.lim.max_segment_size = bytes;
        self
    }

    /// Segments may neither start nor end inside a block of `mask + 1`
    /// bytes but at the request's ends (a page of an FRWR registration:
    /// `4095`).
    pub fn virt_boundary_mask(mut self, mask: u64) -> Self {
        self.lim.virt_boundary_mask = mask;
        self
    }

    /// The alignment of a direct I/O buffer: a mask (`511`: 512 bytes).
    pub fn dma_alignment(mut self, mask: u32) -> Self {
        self.lim.dma_alignment = mask;
        self
    }

    /// Write Zeroes requests ([`Op::WriteZeroes`](super::Op::WriteZeroes))
    /// of at most `sectors` reach the driver (0, the default: none, and
    /// the block layer zeroes with writes of the zero page instead).
    pub fn max_write_zeroes_sectors(mut self, sectors: u32) -> Self {
        self.lim.max_write_zeroes_sectors = sectors;
        self
    }

    /// A volatile write cache: flushes are sent to the driver.
    pub fn write_cache(mut self, on: bool) -> Self {
        self.lim.write_cache = on;
        self
    }

    /// Forced unit access: writes may ask to bypass the cache.
    pub fn fua(mut self, on: bool) -> Self {
        self.lim.fua = on;
        self
    }

    /// A rotational disk.
    pub fn rotational(mut self, on: bool) -> Self {
        self.lim.rotational = on;
        self
    }

    /// Partitions (the default): the disk's partition table is read when
    /// it is added (a request to the driver, which the adding waits for).
    pub fn partitions(mut self, on: bool) -> Self {
        self.lim.no_partitions = !on;
        self
    }

    /// Refuses, with `EINVAL`, the limits the block layer would refuse
    /// with a warning (`blk_validate_limits`): a request below a page, a
    /// segment below a page without a boundary, a DMA alignment mask past
    /// a page; and a boundary mask that is not a power of two less one,
    /// from 511 to a page.
    fn check(&self) -> Result {
        let l = &self.lim;
        let page = kernel::page::PAGE_SIZE as u64;
        let bad = (l.max_hw_sectors != 0 && u64::from(l.max_hw_sectors) < page / 512)
            || (l.virt_boundary_mask == 0
                && l.max_segment_size != 0
                && u64::from(l.max_segment_size) < page)
            || u64::from(l.dma_alignment) >= page
            || (l.virt_boundary_mask != 0
                && (l.virt_boundary_mask < 511
                    || l.virt_boundary_mask >= page
                    || !(l.virt_boundary_mask + 1).is_power_of_two()));
        if bad {
            Err(EINVAL)
        } else {
            Ok(())
        }
    }

    /// Makes the disk `name` (at most 31 bytes: `EINVAL`) on `tagset`
    /// with `queue_data`, its operations owned by `module` (an open of the
    /// disk pins it), and adds it: its requests come from here on.
    /// Limits the block layer refuses: `EINVAL`.
    pub fn build<T: Operations>(
        self,
        name: fmt::Arguments<'_>,
        tagset: Arc<TagSet<T>>,
        queue_data: Arc<T::QueueData>,
        module: &'static ThisModule,
    ) -> Result<GenDisk<T>> {
        self.check()?;
        let mut buf = Name([0; NAME_LEN], 0);
        buf.write_fmt(name).map_err(|_| EINVAL)?;
        if buf.1 == 0 {
            return Err(EINVAL);
        }
        let inner = KBox::pin(
            DiskInner {
                disk: core::ptr::null_mut(),
                queue_data: core::ptr::null(),
                tagset,
                owned: Owned::new(),
            },
            GFP_KERNEL,
        )?;
        let qd = Arc::into_raw(queue_data);
        // SAFETY: The tag set lives while the disk does (`inner` holds it);
        // `buf` is NUL-terminated; the queue data stays until the disk is
        // deleted (`DiskInner::drop`); `module` is the caller's own.
        let disk = from_err_ptr(unsafe {
            bindings::kverbs_blk_alloc_disk(
                inner.tagset.as_raw(),
                &self.lim,
                qd.cast_mut().cast(),
                module.as_ptr().cast(),
                buf.0.as_ptr().cast(),
            )
        });
        let disk = match disk {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: From `into_raw` above; no disk has it.
                drop(unsafe { Arc::from_raw(qd) });
                return Err(e);
            }
        };
        // SAFETY: `inner` is not moved (it is pinned); the fields are set
        // once, before the disk is added or the entry listed.
        let inner = unsafe {
            let mut inner = inner;
            let i = Pin::get_unchecked_mut(inner.as_mut());
            i.disk = disk;
            i.queue_data = qd;
            inner
        };
        // SAFETY: `owned` stays pinned in `inner` until the drop takes it
        // off the list; the addresses are of the driver's module, which
        // instantiates these for `T`.
        unsafe {
            inner.owned.init(
                OperationsVTable::<T>::VTABLE
                    .queue_rq
                    .map_or(0, |f| f as usize),
                core::ptr::drop_in_place::<T::QueueData> as *const () as usize,
                None,
                orphan::<T>,
            )
        };
        // SAFETY: Allocated above, not added.
        let r = unsafe { bindings::kverbs_blk_add_disk(disk, self.capacity) };
        if r != 0 {
            // SAFETY: Not added; its queue data goes after it.
            unsafe { bindings::kverbs_blk_put_unadded(disk) };
            // SAFETY: As above.
            drop(unsafe { Arc::from_raw(qd) });
            // The entry was never listed, and `DiskInner` has no drop.
            return Err(Error::from_errno(r));
        }
        // SAFETY: Once, after `init`.
        unsafe { inner.owned.add() };
        Ok(GenDisk { inner })
    }
}

/// A formatter into a disk's name, NUL-terminated.
struct Name([u8; NAME_LEN], usize);

impl Write for Name {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let b = s.as_bytes();
        if self.1 + b.len() >= NAME_LEN || b.contains(&0) {
            return Err(fmt::Error);
        }
        self.0[self.1..self.1 + b.len()].copy_from_slice(b);
        self.1 += b.len();
        Ok(())
    }
}

/// The disk, its queue data (an `Arc`'s) and its tag set, and its entry
/// on kverbs.ko's list of what calls a module's code.
///
/// # Invariants
///
/// `disk` is null, or added with `queue_data` as its queue's data and the
/// operations of `tagset`, until the drop or the module notifier deletes
/// it (the notifier keeps its reference); `queue_data` is from
/// `Arc::into_raw` when `disk` is not null.
struct DiskInner<T: Operations> {
    disk: *mut bindings::gendisk,
    queue_data: *const T::QueueData,
    tagset: Arc<TagSet<T>>,
    owned: Owned,
}

/// A disk, deleted on drop (`del_gendisk`: it waits for the requests in
/// flight, which the driver must end; open file descriptors then get
/// errors), after which no callback of its comes. The drop sleeps: not
/// from a callback of the disk (it would wait for itself) nor in atomic
/// context.
pub struct GenDisk<T: Operations> {
    inner: Pin<KBox<DiskInner<T>>>,
}

// SAFETY: The disk is a kernel object used from any thread; the queue data
// is `Send + Sync`.
unsafe impl<T: Operations> Send for GenDisk<T> {}
// SAFETY: `&GenDisk` gives `&T::QueueData` (`Sync`) and sets the capacity,
// which the block layer serialises.
unsafe impl<T: Operations> Sync for GenDisk<T> {}

impl<T: Operations> GenDisk<T> {
    /// The queue data its callbacks are given.
    pub fn queue_data(&self) -> &T::QueueData {
        // SAFETY: An `Arc`'s, live while the disk is (type invariant).
        unsafe { &*self.inner.queue_data }
    }

    /// Changes the capacity, in 512-byte sectors (and tells user space).
    /// Process context.
    pub fn set_capacity(&self, sectors: u64) {
        // SAFETY: The disk is added until the drop, and referenced for
        // good once the module notifier deleted it (type invariant).
        unsafe { bindings::kverbs_blk_set_capacity(self.inner.disk, sectors) };
    }
}

impl<T: Operations> Drop for GenDisk<T> {
    fn drop(&mut self) {
        // SAFETY: `build` initialised and listed the entry.
        if !unsafe { self.inner.owned.take() } {
            // The notifier of its module's going deleted the disk.
            return;
        }
        // SAFETY: Added, deleted once (the notifier did not take it).
        unsafe { bindings::kverbs_blk_del_disk(self.inner.disk) };
        // SAFETY: `build`'s `into_raw`; no request is left to read it.
        drop(unsafe { Arc::from_raw(self.inner.queue_data) });
    }
}

/// The `orphan` of a disk whose module is going with it (leaked): deletes
/// it, waiting for its requests, so that no callback comes after. Its
/// memory, its reference to the `gendisk` (a `set_capacity` of the leaked
/// handle still finds it) and its queue data stay.
///
/// # Safety
///
/// Called by kverbs.ko's module notifier, in process context with no lock
/// held, with the entry of the `owned` field of a live `DiskInner<T>`,
/// which it has taken off the list.
unsafe extern "C" fn orphan<T: Operations>(o: *mut bindings::kverbs_owned) {
    // SAFETY: By the caller's guarantee; the `DiskInner<T>` lives until its
    // `GenDisk`'s drop, which waits for `Owned::done`.
    let inner: &DiskInner<T> =
        unsafe { Owned::owner(o, core::mem::offset_of!(DiskInner<T>, owned)) };
    let _mark = crate::event::mark_delivering();
    // SAFETY: Added; only this call deletes it once the entry is taken.
    unsafe { bindings::kverbs_blk_delete(inner.disk) };
    inner.owned.done();
}
