// SPDX-License-Identifier: GPL-2.0

//! Posting work requests on queue pairs, and waiting for them.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{
    reserve, unreserve, Access, AtomicOp, Book, CanPostRecv, Cancel, Qp, Queue, Rc, Rts, SendOp,
    SendWr, SlotRes, State, Transport, Ud, UdDest, Waited, WrId, SLOT_DONE, SLOT_FREE,
};
use crate::bindings;
use crate::dma::DmaBuf;
use crate::mr::MrInner;
use crate::wc::Wc;
use core::{ptr, sync::atomic::Ordering};
use kernel::{prelude::*, sync::Arc};

impl Qp<Rts, Rc> {
    /// Posts a send work request on `len` bytes of `buf` at `offset`: the
    /// data sent or written, or the target of a read.
    ///
    /// An unsignalled request produces no completion if it succeeds; its
    /// slot is released when a later signalled one is reaped.
    ///
    /// [`SendOp::Atomic`] is [`Qp::post_atomic`], on `len` = 8 bytes.
    pub fn post_send(
        &self,
        op: SendOp,
        buf: &Arc<DmaBuf>,
        offset: usize,
        len: usize,
        signaled: bool,
    ) -> Result<WrId> {
        if let SendOp::Atomic(a) = op {
            return self.post_atomic_on(a, buf, offset, len, signaled);
        }
        let mut sges = self.sge_list(Queue::Send, buf, offset, len)?;
        let mut wr = SendWr::new(op);
        wr.wr().sg_list = sges.0.as_mut_ptr();
        wr.wr().num_sge = sges.1;
        let res = SlotRes {
            _buf: Some(buf.clone()),
            ..Default::default()
        };
        // SAFETY: `wr.wr()` is the first field of the `ib_rdma_wr` that the
        // device of this RC QP reads for RDMA and SEND opcodes (not atomic,
        // returned above); the SGE describes memory mapped for this device
        // that the slot keeps alive.
        unsafe { self.post(Queue::Send, wr.wr(), signaled, res) }
    }

    /// Posts an atomic operation; the old value lands in the 8 bytes of
    /// `buf` at `offset`.
    ///
    /// `EOPNOTSUPP` if the device has no atomics (`atomic_cap` NONE);
    /// `EINVAL` for a local offset or remote address not 8-byte aligned,
    /// or a remote buffer under 8 bytes. The peer's QP and memory region
    /// must allow remote atomics ([`Access::REMOTE_ATOMIC`]) and take an
    /// RDMA READ or atomic at once (`max_dest_rd_atomic` >= 1), else the
    /// request completes with a remote access or invalid request error.
    pub fn post_atomic(
        &self,
        op: AtomicOp,
        buf: &Arc<DmaBuf>,
        offset: usize,
        signaled: bool,
    ) -> Result<WrId> {
        self.post_atomic_on(op, buf, offset, 8, signaled)
    }

    /// [`Qp::post_atomic`] on `len` bytes of `buf`, which
    /// [`AtomicOp::check`] refuses unless they are 8.
    fn post_atomic_on(
        &self,
        op: AtomicOp,
        buf: &Arc<DmaBuf>,
        offset: usize,
        len: usize,
        signaled: bool,
    ) -> Result<WrId> {
        op.check(self.device(), offset, len)?;
        let mut sges = self.sge_list(Queue::Send, buf, offset, len)?;
        let mut wr = op.atomic_wr();
        wr.wr.sg_list = sges.0.as_mut_ptr();
        wr.wr.num_sge = sges.1;
        let res = SlotRes {
            _buf: Some(buf.clone()),
            ..Default::default()
        };
        // SAFETY: `wr.wr` is the first field of `ib_atomic_wr`, which the
        // device of this RC QP reads for atomic opcodes; the SGE describes
        // 8 bytes (`check` refused any other `len`) of memory mapped for
        // this device that the slot keeps alive (`sge_list` checked the
        // range). They are 8-byte aligned:
        // `offset` is, and so is the start of the buffer's allocation --
        // `kmalloc` aligns every object to at least 8 bytes
        // (`ARCH_KMALLOC_MINALIGN`) and a chunk of a larger buffer to
        // `CHUNK`; 8 aligned bytes never straddle two chunks.
        unsafe { self.post(Queue::Send, &mut wr.wr, signaled, res) }
    }
}

impl Qp<Rts, Ud> {
    /// Posts a UD SEND (with immediate data if `imm`) of `len` bytes of
    /// `buf` at `offset` to `dest`. The slot holds the buffer and the AH.
    pub fn post_send_ud(
        &self,
        imm: Option<u32>,
        buf: &Arc<DmaBuf>,
        offset: usize,
        len: usize,
        dest: &UdDest,
        signaled: bool,
    ) -> Result<WrId> {
        buf.check_device(self.device(), "posted here")?;
        if !dest.ah.0.pd().same_as(&self.inner.pd) {
            pr_err!(
                "{}: an AH of another PD cannot be used here\n",
                self.device().name()
            );
            return Err(EINVAL);
        }
        let mut sges = self.sge_list(Queue::Send, buf, offset, len)?;
        let mut wr = bindings::ib_ud_wr {
            ah: dest.ah.0.as_raw(),
            remote_qpn: dest.qpn,
            remote_qkey: dest.qkey,
            ..Default::default()
        };
        wr.wr.opcode = match imm {
            Some(_) => bindings::IB_WR_SEND_WITH_IMM,
            None => bindings::IB_WR_SEND,
        };
        if let Some(imm) = imm {
            wr.wr.ex.imm_data = imm.to_be();
        }
        wr.wr.sg_list = sges.0.as_mut_ptr();
        wr.wr.num_sge = sges.1;
        let res = SlotRes {
            _buf: Some(buf.clone()),
            ah: Some(dest.ah.0.clone()),
            ..Default::default()
        };
        // SAFETY: `wr.wr` is the first field of `ib_ud_wr`, which the device
        // of this UD QP reads; the buffer (mapped for this device) and the
        // AH (of this PD) are kept alive by the slot.
        unsafe { self.post(Queue::Send, &mut wr.wr, signaled, res) }
    }
}

impl Qp<Rts, Rc> {
    /// Posts a REG_MR of `mr`, whose pages are already mapped; the slot keeps
    /// the MR alive until the request is reaped.
    pub(crate) fn post_reg_mr(&self, mr: &Arc<MrInner>, key: u32, access: Access) -> Result<WrId> {
        let mut wr = bindings::ib_reg_wr {
            mr: mr.as_raw(),
            key,
            access: access.bits() as i32,
            ..Default::default()
        };
        wr.wr.opcode = bindings::IB_WR_REG_MR;
        let res = SlotRes {
            _mr: Some(mr.clone()),
            ..Default::default()
        };
        // SAFETY: `wr.wr` is the first field of `ib_reg_wr`; the MR is kept
        // alive by the slot.
        unsafe { self.post(Queue::Send, &mut wr.wr, true, res) }
    }

    /// Posts a LOCAL_INV of `rkey` (of `mr`, kept alive by the slot).
    pub(crate) fn post_local_inv(&self, mr: &Arc<MrInner>, rkey: u32) -> Result<WrId> {
        let mut wr = bindings::ib_send_wr {
            opcode: bindings::IB_WR_LOCAL_INV,
            ..Default::default()
        };
        wr.ex.invalidate_rkey = rkey;
        let res = SlotRes {
            _mr: Some(mr.clone()),
            ..Default::default()
        };
        // SAFETY: A LOCAL_INV has no SGE; the MR is kept alive by the slot.
        unsafe { self.post(Queue::Send, &mut wr, true, res) }
    }
}

impl<S: CanPostRecv, T: Transport> Qp<S, T> {
    /// Posts a receive into `len` bytes of `buf` at `offset`.
    pub fn post_recv(&self, buf: &Arc<DmaBuf>, offset: usize, len: usize) -> Result<WrId> {
        if self.inner.srq.is_some() {
            return Err(EINVAL);
        }
        let mut sges = self.sge_list(Queue::Recv, buf, offset, len)?;
        let res = SlotRes {
            _buf: Some(buf.clone()),
            ..Default::default()
        };
        let inner = &self.inner;
        let mut book = inner.book.lock();
        let book = &mut *book;
        let (index, seq) = reserve(&mut book.recv, &inner.recv_slots, true, res)?;
        let mut wr = bindings::ib_recv_wr {
            sg_list: sges.0.as_mut_ptr(),
            num_sge: sges.1,
            ..Default::default()
        };
        wr.__bindgen_anon_1.wr_cqe = inner.recv_slots[index].cqe.get();
        let mut bad = ptr::null();
        // SAFETY: The QP is live; `wr` points to a mapped buffer the slot
        // keeps alive, and to the slot's `ib_cqe`.
        let ret = unsafe { bindings::ib_post_recv(inner.qp.as_ptr(), &wr, &mut bad) };
        if ret != 0 {
            unreserve(&mut book.recv, &inner.recv_slots, index);
            return Err(Error::from_errno(ret));
        }
        book.posted_any = true;
        Ok(WrId {
            qp: inner.id(),
            queue: Queue::Recv,
            index,
            seq,
        })
    }
}

impl<S: State, T: Transport> Qp<S, T> {
    /// The SGEs a request on queue `q` may have.
    pub(crate) fn max_sge(&self, q: Queue) -> u32 {
        match q {
            Queue::Send => self.inner.max_send_sge,
            Queue::Recv => self.inner.max_recv_sge,
        }
    }

    /// Checks that a request on queue `q` may name `len` bytes of `buf` at
    /// `offset` (a buffer of this device, a range within it, no more SGEs
    /// than the QP takes), and the number of SGEs it takes.
    pub(crate) fn check_range(
        &self,
        q: Queue,
        buf: &DmaBuf,
        offset: usize,
        len: usize,
    ) -> Result<u32> {
        buf.check_device(self.device(), "posted here")?;
        buf.check(offset, len)?;
        let n = buf.sge_count(offset, len) as u32;
        if n > self.max_sge(q) {
            return Err(EINVAL);
        }
        Ok(n)
    }

    /// The SGEs of a request on queue `q` on `len` bytes of `buf` at
    /// `offset` (see [`Qp::check_range`]), and how many there are.
    fn sge_list(
        &self,
        q: Queue,
        buf: &DmaBuf,
        offset: usize,
        len: usize,
    ) -> Result<([bindings::ib_sge; crate::dma::MAX_SGES], i32)> {
        let n = self.check_range(q, buf, offset, len)?;
        let mut sges = [bindings::ib_sge::default(); crate::dma::MAX_SGES];
        for (d, s) in
            sges.iter_mut()
                .zip(buf.sges(offset, len, self.inner.pd.local_dma_lkey(), false))
        {
            *d = s;
        }
        Ok((sges, n as i32))
    }

    /// Posts `wr` on `queue` with a slot holding `res`.
    ///
    /// # Safety
    ///
    /// `wr` (and, for RDMA and REG_MR opcodes, the larger request it is the
    /// head of) must be a valid work request for this QP whose memory is
    /// kept alive by `res` or is owned by the device.
    unsafe fn post(
        &self,
        queue: Queue,
        wr: &mut bindings::ib_send_wr,
        signaled: bool,
        res: SlotRes,
    ) -> Result<WrId> {
        debug_assert!(queue == Queue::Send);
        let inner = &self.inner;
        let mut book = inner.book.lock();
        let book = &mut *book;
        if let Some(ah) = &res.ah {
            book.last_ah = Some(ah.clone());
        }
        let (index, seq) = reserve(&mut book.send, &inner.send_slots, signaled, res)?;
        wr.__bindgen_anon_1.wr_cqe = inner.send_slots[index].cqe.get();
        if signaled {
            wr.send_flags |= bindings::IB_SEND_SIGNALED;
        }
        let mut bad = ptr::null();
        // SAFETY: The QP is live; the caller guarantees `wr` is valid.
        let ret = unsafe { bindings::ib_post_send(inner.qp.as_ptr(), wr, &mut bad) };
        if ret != 0 {
            unreserve(&mut book.send, &inner.send_slots, index);
            return Err(Error::from_errno(ret));
        }
        book.posted_any = true;
        Ok(WrId {
            qp: inner.id(),
            queue,
            index,
            seq,
        })
    }

    /// Waits for the completion of `id`, at most `timeout_ms`, and releases
    /// its slot. Fails with `ETIMEDOUT`, with `EINTR` on a signal, with
    /// `ECANCELED` if `cancel` is cancelled, with `EINVAL` for a request of
    /// another QP or one already released (an unsignalled send, released
    /// with a later signalled one). After a failed wait the request is
    /// still outstanding: it is flushed when the QP is dropped.
    pub fn wait(&self, id: WrId, timeout_ms: u32, cancel: &Cancel) -> Result<Wc> {
        match self.wait_for(id, timeout_ms, cancel)? {
            Waited::Done(wc) => Ok(wc),
            Waited::Pending(_) => Err(crate::errno::etimedout()),
        }
    }

    /// As [`Qp::wait`], but a request not complete after `timeout_ms` is
    /// given back ([`Waited::Pending`]) to be waited for again.
    pub fn wait_for(&self, id: WrId, timeout_ms: u32, cancel: &Cancel) -> Result<Waited> {
        let inner = &self.inner;
        if id.qp != inner.id() {
            return Err(EINVAL);
        }
        let (slots, cq) = match id.queue {
            Queue::Send => (&inner.send_slots, &inner.send_cq.cq),
            Queue::Recv => (&inner.recv_slots, &inner.recv_cq.cq),
        };
        let slot = slots.get(id.index).ok_or(EINVAL)?;
        // Whether `id`'s request still holds its slot. A `WrId` is used once,
        // but an unsignalled send's slot is released by the wait of a later
        // signalled one, and may be taken again by another request.
        // `seq` is unique across all QPs (`reserve`), so a `WrId` of a dropped
        // QP whose `QpInner` address was handed to this one matches nothing
        // here; its index may be past this QP's bookkeeping, hence `get`.
        let holds = |book: &Book| {
            let res = match id.queue {
                Queue::Send => book.send.get(id.index),
                Queue::Recv => book.recv.get(id.index),
            };
            res.is_some_and(|res| res.busy && res.seq == id.seq)
        };
        if !holds(&inner.book.lock()) {
            return Err(EINVAL);
        }
        if !slot.wait_done(cq, timeout_ms, cancel)? {
            return Ok(Waited::Pending(id));
        }
        let mut book = inner.book.lock();
        // The slot may have been released and taken again since it was seen
        // done: only if it still holds `id`'s request is the completion ours.
        if !holds(&book) || slot.state.load(Ordering::Acquire) != SLOT_DONE {
            return Err(EINVAL);
        }
        // SAFETY: `SLOT_DONE` was observed with acquire ordering, after
        // `done` wrote `wc` (type invariant of `Slot`); the slot cannot be
        // taken again, and so written again, while we hold the lock.
        let wc = unsafe { *slot.wc.get() }.ok_or(EIO)?;
        let book = &mut *book;
        let (res, slots) = match id.queue {
            Queue::Send => (&mut book.send, &inner.send_slots),
            Queue::Recv => (&mut book.recv, &inner.recv_slots),
        };
        // Unsignalled sends posted before this one have completed too.
        if id.queue == Queue::Send {
            for (i, r) in res.iter_mut().enumerate() {
                if r.busy && !r.signaled && r.seq < id.seq {
                    *r = SlotRes::default();
                    slots[i].state.store(SLOT_FREE, Ordering::Release);
                }
            }
        }
        res[id.index] = SlotRes::default();
        slots[id.index].state.store(SLOT_FREE, Ordering::Release);
        Ok(Waited::Done(wc))
    }
}
