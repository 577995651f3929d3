// SPDX-License-Identifier: GPL-2.0

//! A capsule queue's submission path: a slot taken for a request, its
//! pages mapped (registered for the peer, or sent after the capsule), the
//! capsule built and posted; and its undoing when the post fails.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`ib_post_send`, `ib_map_mr_sg`, `ib_dma_map_sg`)

use super::{
    bump, flags, gen, word, Mapping, Marked, RcuRead, Shared, Slot, OWNED, POSTED, REG_DEAD,
    RESPONDED, SEND_DONE,
};
use crate::bindings;
use crate::blk::RqRef;
use crate::io::{IoData, MAX_CAPSULE, MAX_INLINE_SEGMENTS};
use crate::qp::{Access, RemoteBuf};
use core::{ptr, sync::atomic::Ordering};
use kernel::prelude::*;

impl Shared {
    /// Maps the pages of `rq`, a read or write, for the device into the
    /// table of `tag` and its MR with a fresh key: the remote buffer the
    /// capsule names, and the access the registration gives. The slot's
    /// owner only, with the queue open when it took it.
    ///
    /// # Safety
    ///
    /// The caller owns the slot of `tag` (`OWNED`), taken while open.
    unsafe fn map_data(&self, tag: u16, rq: &RqRef) -> Result<(RemoteBuf, Access)> {
        // SAFETY: The caller's guarantee.
        let bufs = unsafe { self.bufs() };
        let table = &bufs.tables[usize::from(tag)];
        let mr = bufs.mrs[usize::from(tag)].as_ptr();
        let segs = usize::from(rq.segments());
        if segs == 0 || segs > table.len() {
            return Err(EINVAL);
        }
        let write = rq.op() == bindings::REQ_OP_WRITE;
        // SAFETY: The request is the queue's, its segments fit the table,
        // which only the slot's owner uses.
        let n = unsafe { bindings::kverbs_rq_map_sg(rq.as_raw(), table.as_raw()) };
        if n <= 0 {
            return Err(EINVAL);
        }
        let dir = if write {
            bindings::DMA_TO_DEVICE
        } else {
            bindings::DMA_FROM_DEVICE
        };
        // SAFETY: `n` entries of the request's pages, mapped on the
        // queue's device; unmapped by the request's finisher.
        let count = unsafe { bindings::ib_dma_map_sg(self.dev, table.sgl(), n, dir) };
        if count <= 0 {
            return Err(ENOMEM);
        }
        // SAFETY: The MR is the slot's, not registered (its last
        // registration ended before the slot was freed); `count` entries
        // are mapped.
        let mapped =
            unsafe { bindings::ib_map_mr_sg(mr, table.sgl(), count, ptr::null_mut(), 4096) };
        if mapped != count {
            // Entries the MR cannot take (a gap within a page: the disk
            // has no virt_boundary_mask of the page, or more pages).
            // SAFETY: Mapped above.
            unsafe { bindings::ib_dma_unmap_sg(self.dev, table.sgl(), n, dir) };
            return Err(EINVAL);
        }
        // SAFETY: As above: a new key for each registration, so that a
        // response naming an older one invalidates nothing of this.
        let (old_key, rkey, addr, len) = unsafe {
            let old_key = (*mr).rkey as u8;
            bindings::ib_update_fast_reg_key(mr, old_key.wrapping_add(1));
            (old_key, (*mr).rkey, (*mr).iova, (*mr).length)
        };
        let slot = &self.slots[usize::from(tag)];
        slot.rkey.store(rkey, Ordering::Relaxed);
        // SAFETY: The slot's owner (the caller's guarantee) writes it
        // before it publishes `POSTED`.
        unsafe {
            *slot.map.get() = Some(Mapping {
                nents: n,
                dir,
                old_key: Some(old_key),
            })
        };
        let access = if write {
            Access::REMOTE_READ
        } else {
            Access::LOCAL_WRITE | Access::REMOTE_WRITE
        };
        let len = u32::try_from(len).map_err(|_| EINVAL)?;
        Ok((RemoteBuf { addr, rkey, len }, access))
    }

    /// Maps the pages of the write of `rq`, on the slot of `tag`, for the
    /// capsule's send to carry: the SGEs of its `inline_segments` at most
    /// (its first `n` entries) and their bytes, or `None` if they take
    /// more (the caller registers them instead).
    ///
    /// # Safety
    ///
    /// As [`Shared::map_data`].
    unsafe fn map_inline(
        &self,
        tag: u16,
        rq: &RqRef,
        sges: &mut [bindings::ib_sge],
    ) -> Result<Option<(usize, u32)>> {
        // SAFETY: The caller's guarantee.
        let bufs = unsafe { self.bufs() };
        let table = &bufs.tables[usize::from(tag)];
        let segs = usize::from(rq.segments());
        if segs == 0 || segs > sges.len() || segs > table.len() {
            return Ok(None);
        }
        // SAFETY: The request is the queue's, its segments fit the table,
        // which only the slot's owner uses.
        let n = unsafe { bindings::kverbs_rq_map_sg(rq.as_raw(), table.as_raw()) };
        // Not more than its segments (the block layer warns otherwise):
        // checked all the same, `sges` is filled from them.
        if n <= 0 || n as usize > sges.len() {
            return Err(EINVAL);
        }
        let dir = bindings::DMA_TO_DEVICE;
        // SAFETY: `n` entries of the request's pages, mapped on the
        // queue's device; unmapped by the request's finisher.
        let count = unsafe { bindings::ib_dma_map_sg(self.dev, table.sgl(), n, dir) };
        if count <= 0 {
            return Err(ENOMEM);
        }
        // `count` is at most `n`, at most the segments, which fit `sges`.
        let k = count as usize;
        // SAFETY: `count` entries are mapped; `sges` has room for them.
        let len = unsafe {
            bindings::kverbs_sg_to_sges(table.sgl(), count, sges.as_mut_ptr(), self.lkey)
        };
        let slot = &self.slots[usize::from(tag)];
        // SAFETY: The slot's owner (the caller's guarantee) writes it
        // before it publishes `POSTED`.
        unsafe {
            *slot.map.get() = Some(Mapping {
                nents: n,
                dir,
                old_key: None,
            })
        };
        Ok(Some((k, len)))
    }

    /// Unmaps the pages of the slot of `tag`, whose REG_MR was not posted,
    /// and gives the MR its key back.
    ///
    /// # Safety
    ///
    /// As [`Shared::unmap`].
    unsafe fn unmap_unposted(&self, tag: u16) {
        let slot = &self.slots[usize::from(tag)];
        // SAFETY: The caller's guarantee.
        let map = unsafe { (*slot.map.get()).take() };
        if let Some(k) = map.as_ref().and_then(|m| m.old_key) {
            // SAFETY: As above: the MR is the slot's, not registered.
            unsafe {
                bindings::ib_update_fast_reg_key(self.bufs().mrs[usize::from(tag)].as_ptr(), k)
            };
        }
        // SAFETY: As above.
        unsafe { self.unmap_with(tag, map) };
    }

    /// Sends the capsule of request `rq` (its tag below the depth) with
    /// command id `cid`, built by `build` -- told where the request's
    /// data goes ([`IoData`]): a write of at most `inline_max` bytes in
    /// at most [`IoConfig::inline_segments`] segments after the capsule,
    /// in its send, another read or write registered for the peer when
    /// the queue registers data: never sleeps itself. The request is
    /// given back with `ENOLINK` once the queue is closed, `EBUSY` while
    /// its tag's slot still carries the request before, `EINVAL` for
    /// pages the MR cannot take, `ENOMEM` if they cannot be mapped for
    /// the device, or the post's error. The slot is taken in
    /// one read-side critical section and the capsule posted in another:
    /// the mapping and `build` run between them, owning the slot, which
    /// [`Shared::close`] waits for (so a `build` that sleeps delays a
    /// shutdown, and breaks nothing).
    pub(in crate::io) fn submit(
        &self,
        rq: RqRef,
        cid: u16,
        inline_max: u32,
        build: impl FnOnce(IoData, &mut [u8]),
    ) -> Result<(), (RqRef, Error)> {
        let Some(tag) = u16::try_from(rq.tag()).ok().filter(|t| *t < self.cfg.depth) else {
            return Err((rq, EINVAL));
        };
        let slot = &self.slots[usize::from(tag)];
        let g = {
            let _rcu = RcuRead::new();
            if self.closed.load(Ordering::Acquire) {
                return Err((rq, crate::errno::enolink()));
            }
            let s = slot.state.load(Ordering::Relaxed);
            if flags(s) != 0
                || slot
                    .state
                    .compare_exchange(s, s | OWNED, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
            {
                return Err((rq, EBUSY));
            }
            gen(s)
        };
        let give_back = |rq: RqRef, e: Error| {
            // SAFETY: The slot's owner, before `POSTED`.
            unsafe { self.unmap_unposted(tag) };
            slot.state.store(word(g, 0, 0, 0), Ordering::Release);
            Err((rq, e))
        };
        let data = self.cfg.max_pages > 0
            && rq.bytes() > 0
            && matches!(rq.op(), bindings::REQ_OP_READ | bindings::REQ_OP_WRITE);
        // The capsule's SGE, then in-capsule data's.
        let mut sges = [bindings::ib_sge::default(); 1 + MAX_INLINE_SEGMENTS as usize];
        let mut inline = None;
        if data
            && rq.op() == bindings::REQ_OP_WRITE
            && self.cfg.inline_segments > 0
            && rq.bytes() <= inline_max
        {
            let room = &mut sges[1..1 + self.cfg.inline_segments as usize];
            // SAFETY: The slot's owner, which saw the queue open.
            match unsafe { self.map_inline(tag, &rq, room) } {
                Ok(i) => inline = i,
                Err(e) => return give_back(rq, e),
            }
        }
        let reg = if data && inline.is_none() {
            // SAFETY: The slot's owner, which saw the queue open.
            match unsafe { self.map_data(tag, &rq) } {
                Ok(r) => Some(r),
                Err(e) => return give_back(rq, e),
            }
        } else {
            None
        };
        let mut capsule = [0u8; MAX_CAPSULE];
        let capsule = &mut capsule[..self.cfg.capsule_len];
        build(
            match (&reg, inline) {
                (Some((r, _)), _) => IoData::Registered(*r),
                (None, Some((_, len))) => IoData::Inline { len },
                (None, None) => IoData::None,
            },
            capsule,
        );
        // SAFETY: The slot's owner, which saw the queue open when it took
        // it.
        let buf = unsafe { &self.bufs().capsules[usize::from(tag)] };
        // The slot's owner is the only writer of its capsule.
        if let Err(e) = buf.write(0, capsule) {
            return give_back(rq, e);
        }
        let Some(sge) = buf.sges(0, self.cfg.capsule_len, self.lkey, false).next() else {
            return give_back(rq, EINVAL);
        };
        sges[0] = sge;
        let num_sge = 1 + inline.map_or(0, |(k, _)| k);
        let _rcu = RcuRead::new();
        if self.closed.load(Ordering::Acquire) {
            return give_back(rq, crate::errno::enolink());
        }
        // SAFETY: `OWNED` by this task, not yet `POSTED`: nobody else
        // touches `rq` (type invariant).
        unsafe { *slot.rq.get() = Some(rq) };
        // Without a registration, `REG_DEAD` at once.
        let dead = if reg.is_some() { 0 } else { REG_DEAD };
        slot.state
            .store(word(g, cid, 0, OWNED | POSTED | dead), Ordering::Release);
        let mut wr = bindings::ib_send_wr {
            sg_list: sges.as_mut_ptr(),
            num_sge: num_sge as i32,
            opcode: bindings::IB_WR_SEND,
            send_flags: bindings::IB_SEND_SIGNALED,
            ..Default::default()
        };
        wr.__bindgen_anon_1.wr_cqe = self.send_cqes[usize::from(tag)].cqe.get();
        // SAFETY: The slot's owner.
        let mr = reg
            .as_ref()
            .map(|_| unsafe { self.bufs().mrs[usize::from(tag)].as_ptr() });
        let mut reg_wr = bindings::ib_reg_wr {
            mr: mr.unwrap_or(ptr::null_mut()),
            key: reg.as_ref().map_or(0, |(r, _)| r.rkey),
            access: reg.as_ref().map_or(0, |(_, a)| a.bits() as i32),
            ..Default::default()
        };
        // Unsignaled: only its failure completes.
        reg_wr.wr.opcode = bindings::IB_WR_REG_MR;
        reg_wr.wr.__bindgen_anon_1.wr_cqe = self.reg_cqes[usize::from(tag)].cqe.get();
        let send: *mut bindings::ib_send_wr = &mut wr;
        reg_wr.wr.next = send;
        let first: *const bindings::ib_send_wr = if reg.is_some() { &reg_wr.wr } else { send };
        let mut bad = ptr::null();
        // SAFETY: The QP is live in a section that saw the queue open; the
        // capsule is mapped and lives until the QP is destroyed, the MR
        // until it is deregistered after; the CQEs as long as completions
        // may name them (type invariant).
        let r = unsafe { bindings::ib_post_send(self.qp, first, &mut bad) };
        if r != 0 {
            let e = Error::from_errno(r);
            if reg.is_some() && !ptr::eq(bad, first) {
                // The registration was posted, the capsule not: the
                // request ends with the error once the registration is
                // invalidated (or by the shutdown).
                let m = self.force_fail(slot, e.to_errno());
                // SAFETY: Inside the section, open.
                unsafe { self.advance(tag, m) };
                bump(&self.stats.submitted);
                return Ok(());
            }
            return Err(self.unpost(tag, e));
        }
        if reg.is_some() {
            bump(&self.stats.registered);
        } else if inline.is_some() {
            bump(&self.stats.inline);
        }
        bump(&self.stats.submitted);
        Ok(())
    }

    /// Marks the request of `slot`, whose capsule was not posted, sent and
    /// answered with the error `e` (no completion or response comes for
    /// it): its registration, if live, still to be invalidated; else the
    /// caller finishes it.
    fn force_fail(&self, slot: &Slot, e: i32) -> Marked {
        slot.set(e, |_| Ok(SEND_DONE | RESPONDED))
    }

    /// Takes back the request of the slot of `tag`, whose send was not
    /// posted (nor a registration): no completion comes for it, so this
    /// sets `SEND_DONE`, the last flag (a response may have come already,
    /// for a command never sent).
    fn unpost(&self, tag: u16, e: Error) -> (RqRef, Error) {
        let slot = &self.slots[usize::from(tag)];
        let s = slot
            .state
            .fetch_or(SEND_DONE | RESPONDED | REG_DEAD, Ordering::Acquire);
        // SAFETY: `SEND_DONE` was not set, and only this sets it for a
        // send never posted: this task is the finisher, and `rq` is `Some`
        // (type invariant).
        let rq = unsafe { (*slot.rq.get()).take().unwrap_unchecked() };
        // SAFETY: As above; the queue is open (the caller's section).
        unsafe { self.unmap_unposted(tag) };
        slot.free(s);
        (rq, e)
    }
}
