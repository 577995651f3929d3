// SPDX-License-Identifier: GPL-2.0

//! Memory regions registered by fast registration (FRWR).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! An [`Mr`] is allocated once (`ib_alloc_mr`, `IB_MR_TYPE_MEM_REG`) and
//! registered on a buffer by posting `IB_WR_REG_MR` with the access rights
//! given, nothing more; its rkey then lets peers reach the buffer.
//! [`Mr::invalidate`] posts `IB_WR_LOCAL_INV`, after which the rkey is dead.
//! While registered the MR holds the buffer, so remote access can never
//! reach freed memory; dropping the MR deregisters it (`ib_dereg_mr`) before
//! the buffer is released.
//!
//! An MR maps a buffer's chunks (see [`crate::dma`]) as one virtually
//! contiguous range, with the smallest page size (a power of two from
//! `PAGE_SIZE` up to a chunk) that keeps its page list within the device's
//! `max_fast_reg_page_list_len`: an 8 MiB buffer takes 16 KiB pages on a
//! device that maps 512.

use crate::bindings;
use crate::dma::{self, DmaBuf};
use crate::pd::Pd;
use crate::qp::{Access, Cancel, Qp, RemoteBuf, Rts};
use core::{mem::ManuallyDrop, ptr::NonNull};
use kernel::{error::from_err_ptr, new_mutex, page::PAGE_SIZE, prelude::*, sync::Arc, sync::Mutex};

/// What a memory region is registered on.
struct MrState {
    buf: Option<Arc<DmaBuf>>,
    rkey: u32,
    registered: bool,
    /// A REG_MR or LOCAL_INV is being waited for (without the lock), or
    /// a REG_MR was given up before it completed and may still execute:
    /// then for good (see [`Mr::post_registration`]).
    busy: bool,
}

/// # Invariants
///
/// `mr` was allocated by `ib_alloc_mr` in `pd` and is not yet deregistered,
/// with room for `max_len` bytes in pages of `page_size`; while it is
/// registered, `state.buf` is the buffer it maps. `pd` is dropped by the
/// drop once `mr` is deregistered, never if that failed.
#[pin_data(PinnedDrop)]
pub(crate) struct MrInner {
    mr: NonNull<bindings::ib_mr>,
    pd: ManuallyDrop<Pd>,
    max_len: usize,
    page_size: usize,
    #[pin]
    state: Mutex<MrState>,
}

// SAFETY: An MR may be used and deregistered from any thread.
unsafe impl Send for MrInner {}
// SAFETY: The verbs on MRs are thread safe; the state is locked.
unsafe impl Sync for MrInner {}

impl MrInner {
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_mr {
        self.mr.as_ptr()
    }
}

#[pinned_drop]
impl PinnedDrop for MrInner {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant the MR is live; the last reference
        // is gone, so no work request names it.
        let ret = unsafe { bindings::ib_dereg_mr(self.mr.as_ptr()) };
        // SAFETY: Only `pd`, not structurally pinned, is dropped below.
        let this = unsafe { self.get_unchecked_mut() };
        if ret != 0 {
            // The MR lives on (a driver's `dereg_mr` failed), with its
            // key: the buffer it maps, if any, and its PD are leaked.
            pr_err!(
                "{}: MR could not be deregistered ({}): it and its buffer are leaked\n",
                this.pd.device().name(),
                ret
            );
            let buf = this.state.lock().buf.take();
            core::mem::forget(buf);
            return;
        }
        // The buffer (taken under the lock, dropped after it), then the PD.
        let buf = this.state.lock().buf.take();
        drop(buf);
        // SAFETY: Dropped once, here; the MR that used it is deregistered.
        unsafe { ManuallyDrop::drop(&mut this.pd) };
    }
}

/// A fast-registration memory region.
pub struct Mr(Arc<MrInner>);

impl Mr {
    /// Allocates an MR able to map a buffer of `max_len` bytes.
    pub fn new(pd: &Pd, max_len: usize) -> Result<Self> {
        if max_len == 0 || max_len > dma::MAX_LEN {
            return Err(EINVAL);
        }
        // The page list of the smallest page size that fits the device's
        // (one page more for a range that does not start on a boundary).
        let limit = pd.device().attrs().max_fast_reg_page_list_len().max(2) as usize;
        let mut page_size = PAGE_SIZE;
        while max_len.div_ceil(page_size) + 1 > limit && page_size < dma::CHUNK {
            page_size *= 2;
        }
        let pages = max_len.div_ceil(page_size) + 1;
        // SAFETY: The PD is live.
        let mr = from_err_ptr(unsafe {
            bindings::ib_alloc_mr(pd.as_raw(), bindings::IB_MR_TYPE_MEM_REG, pages.try_into()?)
        })?;
        let mr = NonNull::new(mr).ok_or(ENOMEM)?;
        let inner = Arc::pin_init(
            try_pin_init!(MrInner {
                mr,
                pd: ManuallyDrop::new(pd.clone()),
                max_len,
                page_size,
                state <- new_mutex!(MrState {
                    buf: None,
                    rkey: 0,
                    registered: false,
                    busy: false,
                }),
            }),
            GFP_KERNEL,
        );
        match inner {
            // INVARIANT: allocated above in `pd`.
            Ok(inner) => Ok(Mr(inner)),
            Err(e) => {
                // SAFETY: Allocated above, never used.
                if unsafe { bindings::ib_dereg_mr(mr.as_ptr()) } != 0 {
                    // The MR lives on in the PD: the PD is leaked.
                    core::mem::forget(pd.clone());
                }
                Err(e)
            }
        }
    }

    /// Maps the MR on `buf` (`ib_map_mr_sg`) with a fresh key, and returns
    /// the address and rkey the peer will use once [`Mr::post_registration`]
    /// has made them valid. No work request is needed yet, so a QP can
    /// advertise them before it is connected (as RDMA_RC_example does).
    pub fn map(&self, buf: &Arc<DmaBuf>) -> Result<RemoteBuf> {
        let inner = &self.0;
        let dev = inner.pd.device();
        buf.check_device(dev, "mapped by an MR here")?;
        let mut state = inner.state.lock();
        if state.buf.is_some() || state.busy {
            return Err(EBUSY);
        }
        if buf.len() > inner.max_len {
            return Err(EINVAL);
        }
        let len: u32 = buf.len().try_into()?;
        // One entry per chunk of the buffer.
        let nents = buf.dma_chunks().count();
        let mut sg = KVec::with_capacity(nents, GFP_KERNEL)?;
        for _ in 0..nents {
            sg.push(bindings::scatterlist::default(), GFP_KERNEL)?;
        }
        for (i, (addr, n)) in buf.dma_chunks().enumerate() {
            // SAFETY: `sg` has `nents` entries, `i < nents`; the chunk is
            // mapped for the MR's device (checked above).
            unsafe {
                bindings::kverbs_sg_set_dma(sg.as_mut_ptr(), nents as u32, i as u32, addr, n as u32)
            };
        }
        // SAFETY: The MR is live and not registered; `sg` describes mapped
        // memory that `state.buf` holds while the MR maps it.
        let n = unsafe {
            bindings::ib_map_mr_sg(
                inner.as_raw(),
                sg.as_mut_ptr(),
                nents as i32,
                core::ptr::null_mut(),
                inner.page_size as u32,
            )
        };
        if n != nents as i32 {
            return Err(if n < 0 { Error::from_errno(n) } else { EINVAL });
        }
        // A new key for each registration, so a stale rkey never matches.
        // SAFETY: The MR is live and not in use by the device.
        let (rkey, addr) = unsafe {
            let key = ((*inner.as_raw()).rkey as u8).wrapping_add(1);
            bindings::ib_update_fast_reg_key(inner.as_raw(), key);
            ((*inner.as_raw()).rkey, (*inner.as_raw()).iova)
        };
        // The buffer is held from now on: a peer may use the rkey as soon
        // as the registration has executed.
        state.buf = Some(buf.clone());
        state.rkey = rkey;
        Ok(RemoteBuf { addr, rkey, len })
    }

    /// Posts the registration of the mapping made by [`Mr::map`]
    /// (`IB_WR_REG_MR` with `access`, the narrowest the peer needs) on
    /// `qp`, a QP of the MR's PD, and waits for it.
    ///
    /// As the verbs require, remote write and atomic access need local
    /// write access too (`EINVAL` otherwise).
    ///
    /// A registration given up before it completed (the wait timed out,
    /// was cancelled or interrupted; a `timeout_ms` of 0 nearly always
    /// does) may still execute, on its QP's schedule: a LOCAL_INV through
    /// another QP could run before it and the buffer be let go while the
    /// key it makes valid maps it. So the MR then refuses every call
    /// (`EBUSY`) until it is dropped. The request's slot holds the MR, and
    /// with it the buffer, until the QP is dropped (a given-up request's
    /// completion is not collected before): only then is the MR
    /// deregistered and the buffer let go.
    pub fn post_registration(
        &self,
        qp: &Qp<Rts>,
        access: Access,
        timeout_ms: u32,
        cancel: &Cancel,
    ) -> Result {
        let inner = &self.0;
        if !qp.pd().same_as(&inner.pd) {
            return Err(EINVAL);
        }
        if !access.is_valid() {
            return Err(EINVAL);
        }
        let id = {
            let mut state = inner.state.lock();
            if state.busy {
                return Err(EBUSY);
            }
            if state.buf.is_none() || state.registered {
                return Err(EINVAL);
            }
            let id = qp.post_reg_mr(inner, state.rkey, access)?;
            // From the post on the registration may execute: invalidate it
            // before the buffer is let go, even if the wait fails.
            state.registered = true;
            state.busy = true;
            id
        };
        // Not under the lock: the wait may take `timeout_ms`. Given up, the
        // request may still execute: the MR stays busy for good.
        let wc = qp.wait(id, timeout_ms, cancel)?;
        inner.state.lock().busy = false;
        if wc.result().is_err() {
            pr_err!("REG_MR failed: {}\n", wc.status);
            return Err(EIO);
        }
        Ok(())
    }

    /// [`Mr::map`] then [`Mr::post_registration`].
    pub fn register(
        &self,
        qp: &Qp<Rts>,
        buf: &Arc<DmaBuf>,
        access: Access,
        timeout_ms: u32,
        cancel: &Cancel,
    ) -> Result<RemoteBuf> {
        let remote = self.map(buf)?;
        self.post_registration(qp, access, timeout_ms, cancel)?;
        Ok(remote)
    }

    /// Invalidates the registration through `qp` (`IB_WR_LOCAL_INV`) and
    /// waits for it: the rkey no longer gives access, and the buffer is
    /// released.
    pub fn invalidate(&self, qp: &Qp<Rts>, timeout_ms: u32, cancel: &Cancel) -> Result {
        let inner = &self.0;
        if !qp.pd().same_as(&inner.pd) {
            return Err(EINVAL);
        }
        let id = {
            let mut state = inner.state.lock();
            if state.busy {
                return Err(EBUSY);
            }
            if !state.registered {
                return Err(EINVAL);
            }
            let id = qp.post_local_inv(inner, state.rkey)?;
            state.busy = true;
            id
        };
        // Not under the lock, as in `post_registration`.
        let wc = qp.wait(id, timeout_ms, cancel);
        let mut state = inner.state.lock();
        state.busy = false;
        let wc = wc?;
        if wc.result().is_err() {
            pr_err!("LOCAL_INV failed: {}\n", wc.status);
            return Err(EIO);
        }
        state.buf = None;
        state.registered = false;
        Ok(())
    }
}
