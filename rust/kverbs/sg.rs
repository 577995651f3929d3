// SPDX-License-Identifier: GPL-2.0

//! Scatter-gather tables (`struct sg_table`), to map a block request's
//! pages into ([`crate::blk::Request::map_sg`]).
//!
//! C header: [`include/linux/scatterlist.h`](srctree/include/linux/scatterlist.h)

use crate::bindings;
use kernel::{prelude::*, types::Opaque};

/// A table of scatter-gather entries, freed on drop. It never hands out
/// the pages its entries point at: only a mapping that borrows the request
/// they belong to does.
///
/// # Invariants
///
/// `t` was allocated by `sg_alloc_table` with `len` entries, freed on drop.
pub struct SgTable {
    t: Pin<KBox<Opaque<bindings::sg_table>>>,
    len: usize,
}

// SAFETY: The table is memory of its own, used by one thread at a time
// (`&mut` to map into it).
unsafe impl Send for SgTable {}
// SAFETY: `&SgTable` only reads its length.
unsafe impl Sync for SgTable {}

impl SgTable {
    /// A table of `len` entries (at least 1), chained beyond a page;
    /// `atomic` where the caller may not sleep.
    pub fn new(len: u32, atomic: bool) -> Result<Self> {
        if len == 0 {
            return Err(EINVAL);
        }
        let flags = if atomic { GFP_ATOMIC } else { GFP_KERNEL };
        let t = KBox::pin(Opaque::<bindings::sg_table>::uninit(), flags)?;
        // SAFETY: `t` is valid for writes and pinned; `sg_alloc_table`
        // initialises it whole.
        kernel::error::to_result(unsafe { bindings::kverbs_sg_alloc_table(t.get(), len, atomic) })?;
        Ok(SgTable {
            t,
            len: len as usize,
        })
    }

    /// Its entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no entries (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::sg_table {
        self.t.get()
    }

    pub(crate) fn sgl(&self) -> *mut bindings::scatterlist {
        // SAFETY: Allocated (type invariant).
        unsafe { (*self.t.get()).sgl }
    }

    /// The lengths of the first `n` entries.
    pub(crate) fn lengths(&self, n: u32) -> impl Iterator<Item = u32> + '_ {
        let mut sg = self.sgl();
        (0..n.min(self.len as u32)).map(move |_| {
            // SAFETY: Within the entries mapped, `sg_next` follows the
            // chain (a macro's work: `kverbs_sg_next`).
            let len = unsafe { (*sg).length };
            // SAFETY: As above.
            sg = unsafe { bindings::kverbs_sg_next(sg) };
            len
        })
    }
}

impl Drop for SgTable {
    fn drop(&mut self) {
        // SAFETY: Allocated (type invariant), freed once.
        unsafe { bindings::sg_free_table(self.t.get()) };
    }
}
