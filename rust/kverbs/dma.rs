// SPDX-License-Identifier: GPL-2.0

//! DMA-mapped buffers for work requests.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`ib_dma_map_single` and friends)

use crate::bindings;
use crate::device::Device;
use crate::ARef;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::{alloc::flags::__GFP_NOWARN, prelude::*};

/// The bytes of one chunk of a buffer: a buffer of at most this many bytes
/// is one allocation, a larger one is made of chunks this large (the last
/// one shorter), each mapped on its own. The kernel allocates and maps
/// contiguous memory only up to a few MiB, and gets large contiguous
/// allocations only on an unfragmented system.
///
/// Each chunk of a larger buffer is a whole `CHUNK` allocation (the last
/// one too, however little of it is used): `kmalloc` aligns power-of-two
/// sizes naturally, so every chunk starts on a `CHUNK` boundary, which a
/// memory region mapping the chunks as one range needs (with any page
/// size up to `CHUNK`).
pub const CHUNK: usize = 1 << 20;

/// The largest buffer.
pub const MAX_LEN: usize = 16 * CHUNK;

/// The SGEs a range of a buffer takes at most (one per chunk it touches).
pub const MAX_SGES: usize = MAX_LEN / CHUNK + 1;

/// One allocation of a buffer and its mapping.
///
/// # Invariants
///
/// `cpu` is a `kmalloc`ed allocation of `cap >= len` bytes (`len > 0`),
/// whose first `len` are mapped at `dma` with `DMA_BIDIRECTIONAL` on the
/// device of the [`DmaBuf`] it belongs to.
struct Chunk {
    cpu: *mut u8,
    dma: u64,
    len: usize,
    cap: usize,
}

/// A kernel buffer mapped for DMA by an RDMA device (bidirectional), unmapped
/// and freed on drop.
///
/// A buffer of up to [`CHUNK`] bytes is one contiguous allocation; a larger
/// one (up to [`MAX_LEN`]) is made of chunks of [`CHUNK`] bytes, so a work
/// request on a range of it takes one SGE per chunk it touches
/// ([`DmaBuf::sge_count`]), and a memory region maps it as one virtually
/// contiguous range (see [`crate::mr`]).
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
/// `chunks` are the buffer's bytes in order: chunk `i` holds bytes
/// `i * CHUNK..` (all but the last exactly [`CHUNK`] long), `len` in all,
/// `0 < len <= MAX_LEN` once [`DmaBuf::new`] has returned. Each chunk is
/// mapped on `dev`. The CPU touches them only while holding `busy`.
pub struct DmaBuf {
    dev: ARef<Device>,
    chunks: KVec<Chunk>,
    len: usize,
    busy: AtomicBool,
}

// SAFETY: The buffer is plain memory owned by this object; the pointers are
// usable from any thread.
unsafe impl Send for DmaBuf {}
// SAFETY: Through `&DmaBuf` the memory is only copied in and out with raw
// copies, one at a time (`busy`), never referenced.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// Allocates `len` zeroed bytes (at most [`MAX_LEN`]) and maps them for
    /// `dev`.
    pub fn new(dev: &Device, len: usize) -> Result<Self> {
        if len == 0 || len > MAX_LEN {
            return Err(EINVAL);
        }
        let mut buf = DmaBuf {
            dev: dev.into(),
            chunks: KVec::with_capacity(len.div_ceil(CHUNK), GFP_KERNEL)?,
            len,
            busy: AtomicBool::new(false),
        };
        let mut left = len;
        while left > 0 {
            let n = left.min(CHUNK);
            // Large sizes are user input: their failure is an errno, not a
            // warning.
            let flags = GFP_KERNEL | __GFP_NOWARN;
            let mut mem = KVec::<u8>::with_capacity(if len > CHUNK { CHUNK } else { n }, flags)?;
            mem.extend_with(n, 0, flags)?;
            let (cpu, _, cap) = mem.into_raw_parts();
            // SAFETY: `dev` is live; `cpu` is valid for `n` bytes.
            let dma = unsafe {
                bindings::ib_dma_map_single(
                    dev.as_raw(),
                    cpu.cast(),
                    n,
                    bindings::DMA_BIDIRECTIONAL,
                )
            };
            // SAFETY: `dev` is live; `dma` was just returned by the mapping.
            if unsafe { bindings::ib_dma_mapping_error(dev.as_raw(), dma) } != 0 {
                // SAFETY: `cpu`, `n`, `cap` came from `into_raw_parts` above.
                drop(unsafe { KVec::from_raw_parts(cpu, n, cap) });
                // The chunks mapped so far are undone by `drop`.
                return Err(ENOMEM);
            }
            // INVARIANT: allocated and mapped above; the capacity was
            // reserved, so the push cannot fail.
            buf.chunks.push(
                Chunk {
                    cpu,
                    dma,
                    len: n,
                    cap,
                },
                GFP_KERNEL,
            )?;
            left -= n;
        }
        Ok(buf)
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

    /// Checks that `offset..offset + len` lies within the buffer.
    pub(crate) fn check(&self, offset: usize, len: usize) -> Result {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(EINVAL),
        }
    }

    /// The pieces of `offset..offset + len` (a range within the buffer) in
    /// its chunks: the chunk, the offset in it and the length. An empty
    /// range has none: a request on it has no SGE, never an SGE of length
    /// 0, which a receive would give the device as 2 GiB of room (mlx5's
    /// scatter entries: a byte count of 0 is 2^31; rdma-core's provider
    /// skips such SGEs, the kernel's posts them as given).
    fn pieces(&self, offset: usize, len: usize) -> impl Iterator<Item = (&Chunk, usize, usize)> {
        let end = offset + len;
        let mut at = offset;
        core::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let i = (at / CHUNK).min(self.chunks.len() - 1);
            let c = &self.chunks[i];
            let off = at - i * CHUNK;
            let n = (end - at).min(c.len - off);
            at += n;
            Some((c, off, n))
        })
    }

    /// How many SGEs a request on `offset..offset + len` takes: one per
    /// chunk the range touches (none for an empty range); 0 if the range is
    /// not within the buffer.
    pub fn sge_count(&self, offset: usize, len: usize) -> usize {
        match self.check(offset, len) {
            Ok(()) => self.pieces(offset, len).count(),
            Err(_) => 0,
        }
    }

    /// The SGEs (with `lkey`) of `offset..offset + len`, a range within
    /// the buffer: DMA addresses, or kernel virtual addresses if `virt`
    /// (what an inline send's SGEs name: the CPU copies the data when the
    /// request is posted).
    pub(crate) fn sges(
        &self,
        offset: usize,
        len: usize,
        lkey: u32,
        virt: bool,
    ) -> impl Iterator<Item = bindings::ib_sge> + '_ {
        self.pieces(offset, len)
            .map(move |(c, off, n)| bindings::ib_sge {
                addr: if virt { c.cpu as u64 } else { c.dma } + off as u64,
                // A chunk is at most `CHUNK` bytes.
                length: n as u32,
                lkey,
            })
    }

    /// The DMA address and length of each chunk, in order: what a memory
    /// region maps.
    pub(crate) fn dma_chunks(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        self.chunks.iter().map(|c| (c.dma, c.len))
    }

    /// Runs `f` on each piece of `offset..offset + len` (its CPU address,
    /// its offset in the range and its length), synced for the CPU, then
    /// syncs it back for the device. `EBUSY` if another copy is running.
    fn with_range(
        &self,
        offset: usize,
        len: usize,
        mut f: impl FnMut(*mut u8, usize, usize),
    ) -> Result {
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
        let mut done = 0;
        for (c, off, n) in self.pieces(offset, len) {
            let dma = c.dma + off as u64;
            // SAFETY: By the type invariant the chunk's mapping is live; the
            // piece lies within it.
            unsafe {
                bindings::ib_dma_sync_single_for_cpu(dev, dma, n, bindings::DMA_BIDIRECTIONAL)
            };
            // SAFETY: The piece lies within the chunk's allocation.
            f(unsafe { c.cpu.add(off) }, done, n);
            // SAFETY: As above.
            unsafe {
                bindings::ib_dma_sync_single_for_device(dev, dma, n, bindings::DMA_BIDIRECTIONAL)
            };
            done += n;
        }
        self.busy.store(false, Ordering::Release);
        Ok(())
    }

    /// Copies `data` into the buffer at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result {
        self.with_range(offset, data.len(), |p, at, n| {
            // SAFETY: `p` is valid for `n` bytes, which no other CPU access
            // touches (`busy` is held); `data[at..at + n]` is in bounds (the
            // pieces cover the range in order) and cannot overlap memory we
            // own.
            unsafe { core::ptr::copy_nonoverlapping(data.as_ptr().add(at), p, n) }
        })
    }

    /// Copies the buffer at `offset` into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result {
        let len = out.len();
        let dst = out.as_mut_ptr();
        self.with_range(offset, len, |p, at, n| {
            // SAFETY: As in `write`.
            unsafe { core::ptr::copy_nonoverlapping(p, dst.add(at), n) }
        })
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        for c in self.chunks.iter() {
            // SAFETY: By the type invariant the chunk is mapped on `dev`,
            // which the `ARef` keeps registered; nothing else uses it any
            // more.
            unsafe {
                bindings::ib_dma_unmap_single(
                    self.dev.as_raw(),
                    c.dma,
                    c.len,
                    bindings::DMA_BIDIRECTIONAL,
                );
                drop(KVec::from_raw_parts(c.cpu, c.len, c.cap));
            }
        }
    }
}
