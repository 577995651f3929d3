// SPDX-License-Identifier: GPL-2.0

//! What a capsule queue shares with its QP and its completion callbacks:
//! a slot per tag (its state, its capsule, the request it carries), the
//! receives of the responses, the handler; the submission is in
//! `slot/submit.rs`, the callbacks in `done.rs`.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`ib_post_send`, `ib_post_recv`, `struct ib_cqe`)

mod submit;

use super::done::{inv_done, recv_done, reg_done, send_done, Done, RecvCqe, SendCqe};
use super::{Carried, IoConfig, IoError, IoHandler, IoStats};
use crate::bindings;
use crate::blk::RqRef;
use crate::dma::DmaBuf;
use crate::pd::Pd;
use crate::sg::SgTable;
use core::{
    cell::UnsafeCell,
    ptr::{self, NonNull},
    sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering},
};
use kernel::{
    prelude::*,
    sync::{Arc, UniqueArc},
    types::Opaque,
};

// The state of a slot, one word: its flags, the first error of its
// request, the command id and the generation (bumped when it is freed).
const OWNED: u64 = 1 << 0;
const POSTED: u64 = 1 << 1;
pub(super) const SEND_DONE: u64 = 1 << 2;
const RESPONDED: u64 = 1 << 3;
pub(super) const REG_DEAD: u64 = 1 << 4;
/// The response's failed status may be retried ([`super::Answer::retry`]).
const RETRY: u64 = 1 << 5;
const FLAGS: u64 = 0xff;
/// What a request waits for before it is finished: its send's completion,
/// its response, and the end of its memory registration (at once for a
/// request without one).
const DONE: u64 = SEND_DONE | RESPONDED | REG_DEAD;
const ERR_SHIFT: u32 = 8;
const CID_SHIFT: u32 = 24;
const GEN_SHIFT: u32 = 40;

fn flags(s: u64) -> u64 {
    s & FLAGS
}
/// The first error, a negative errno (0: none).
fn err(s: u64) -> i32 {
    -(((s >> ERR_SHIFT) & 0xffff) as i32)
}
fn cid(s: u64) -> u16 {
    (s >> CID_SHIFT) as u16
}
fn gen(s: u64) -> u16 {
    (s >> GEN_SHIFT) as u16
}
/// A state of generation `gen`, command `cid`, first error `err` (a
/// negative errno, kept as its positive value; 0 for none) and `flags`.
fn word(gen: u16, cid: u16, err: i32, flags: u64) -> u64 {
    (u64::from(gen) << GEN_SHIFT)
        | (u64::from(cid) << CID_SHIFT)
        | (u64::from(err.unsigned_abs() & 0xffff) << ERR_SHIFT)
        | flags
}

/// A read-side critical section of RCU, while this lives.
pub(super) struct RcuRead;

impl RcuRead {
    pub(super) fn new() -> Self {
        // SAFETY: No precondition; unlocked by the drop, on this task.
        unsafe { bindings::kverbs_rcu_read_lock() };
        RcuRead
    }
}

impl Drop for RcuRead {
    fn drop(&mut self) {
        // SAFETY: Locked by `new`.
        unsafe { bindings::kverbs_rcu_read_unlock() };
    }
}

/// Waits until every read-side critical section of RCU begun before has
/// ended. Process context.
pub(super) fn synchronize_rcu() {
    // SAFETY: No precondition; it sleeps (the callers' contract).
    unsafe { bindings::kverbs_synchronize_rcu() };
}

/// A tag's slot.
///
/// # Invariants
///
/// `state`'s flags are 0 (free) or have `OWNED`: taken by [`Shared::submit`]
/// with a compare-and-swap, so by one task, which gives it back or
/// publishes `POSTED` (release) with `rq` written. `rq` is then taken by the
/// one that sets the last of the `DONE` flags (acquire), the finisher,
/// which frees the slot with the next generation.
/// `rkey` and `map` are the registration of the request's pages (`map`
/// alone, with no key, for in-capsule data: `rkey` is then the last
/// registration's, not live), written with `rq` and taken with it.
struct Slot {
    state: AtomicU64,
    rkey: AtomicU32,
    rq: UnsafeCell<Option<RqRef>>,
    map: UnsafeCell<Option<Mapping>>,
}

impl Slot {
    /// Sets the flags `bits(state)` gives on the slot's state (and `e`,
    /// if the request has no error yet), by compare-and-swap, unless it
    /// gives what to return instead; then what the setter is to do
    /// ([`Slot::outcome`]).
    fn set(&self, e: i32, bits: impl Fn(u64) -> core::result::Result<u64, Marked>) -> Marked {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            let b = match bits(s) {
                Ok(b) => b,
                Err(m) => return m,
            };
            let e = if err(s) != 0 { err(s) } else { e };
            let new = word(gen(s), cid(s), e, flags(s) | b);
            match self
                .state
                .compare_exchange(s, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return self.outcome(s, new),
                Err(now) => s = now,
            }
        }
    }

    /// What the change of the state from `old` to `new` leaves the changer
    /// to do: finish the request when it set the last of `DONE`; post the
    /// LOCAL_INV of a live registration when it set the second of
    /// `SEND_DONE` and `RESPONDED` -- once a registration, and behind its
    /// REG_MR (the SEND after it completed, or was never posted).
    fn outcome(&self, old: u64, new: u64) -> Marked {
        let both = SEND_DONE | RESPONDED;
        if flags(new) & DONE == DONE {
            Marked::Finish(new)
        } else if flags(old) & both != both && flags(new) & both == both {
            Marked::Invalidate(self.rkey.load(Ordering::Relaxed))
        } else {
            Marked::Set
        }
    }

    /// Frees the slot, whose state was `s`, for the next request: the
    /// next generation, no flags.
    fn free(&self, s: u64) {
        self.state
            .store(word(gen(s).wrapping_add(1), 0, 0, 0), Ordering::Release);
    }
}

/// A request's pages mapped for the device (`ib_dma_map_sg`) into its
/// tag's table: the entries given to the mapping, and the direction.
#[derive(Clone, Copy)]
struct Mapping {
    nents: i32,
    dir: bindings::dma_data_direction,
    /// The MR's key byte before this registration's: given back if its
    /// REG_MR is not posted, so that the MR's key, as the device knows it,
    /// is always the one before the next registration's. `None` for
    /// in-capsule data (no registration).
    old_key: Option<u8>,
}

/// The DMA buffers (a capsule a tag, a response a receive), and with data
/// registration a scatter-gather table and a fast-registration MR a tag,
/// in the PD of the QP, held here.
///
/// # Invariants
///
/// Each of `mrs` was allocated by `ib_alloc_mr` in `_pd`, and is
/// deregistered by [`Bufs::dereg`] (or the drop).
pub(super) struct Bufs {
    capsules: KVec<DmaBuf>,
    pub(super) responses: KVec<DmaBuf>,
    tables: KVec<SgTable>,
    mrs: KVec<NonNull<bindings::ib_mr>>,
    /// Held until the MRs are deregistered.
    _pd: Pd,
}

impl Bufs {
    /// Deregisters the MRs: no rkey of theirs gives access after this,
    /// unless it returns `false` (one failed: it may still be valid).
    fn dereg(&mut self) -> bool {
        let mut ok = true;
        for mr in core::mem::replace(&mut self.mrs, KVec::new()).iter() {
            // SAFETY: Allocated in `_pd`, deregistered once (type
            // invariant).
            ok &= unsafe { bindings::ib_dereg_mr(mr.as_ptr()) } == 0;
        }
        ok
    }
}

impl Drop for Bufs {
    fn drop(&mut self) {
        // Before `_pd`, a field, is dropped (what failed is the device's:
        // nothing else to do).
        let _ = self.dereg();
    }
}

/// What a capsule queue shares with its QP, which keeps it until it is
/// destroyed (and leaks it if its drain failed: completions may still
/// reach the CQEs).
///
/// # Invariants
///
/// `qp` is the QP the queue was made on, live until [`Shared::close`]'s
/// caller drops it. `closed` is set once. Every access to `qp`, the slots
/// and the handler is made in an RCU read-side critical section that first
/// saw `closed` false, by the owner of a slot (`OWNED`, not `POSTED`) that
/// saw it false when it took the slot, or by [`Shared::close`]'s caller
/// after it waited for both to end; `bufs` likewise. `bufs` is `Some`
/// until then, and its buffers are mapped on the QP's device. Every
/// request posted on `qp` names one of the CQEs, which never move (their
/// vectors are not resized). `handler` is null or from `KBox::into_raw`.
pub(crate) struct Shared {
    qp: *mut bindings::ib_qp,
    lkey: u32,
    pub(super) cfg: IoConfig,
    pub(super) closed: AtomicBool,
    /// The QP was destroyed, or drained: the device touches none of the
    /// queue's memory any more.
    quiesced: AtomicBool,
    handler: AtomicPtr<Arc<dyn IoHandler>>,
    slots: KVec<Slot>,
    send_cqes: KVec<SendCqe>,
    reg_cqes: KVec<SendCqe>,
    inv_cqes: KVec<SendCqe>,
    recv_cqes: KVec<RecvCqe>,
    dev: *mut bindings::ib_device,
    bufs: UnsafeCell<Option<Bufs>>,
    pub(super) stats: Stats,
}

// SAFETY: Shared with callbacks on any CPU through atomics; the rest is
// reached as the type invariant says.
unsafe impl Send for Shared {}
// SAFETY: As above.
unsafe impl Sync for Shared {}

/// The counters of [`IoStats`].
#[derive(Default)]
pub(super) struct Stats {
    submitted: AtomicU64,
    finished: AtomicU64,
    failed: AtomicU64,
    ended_by_shutdown: AtomicU64,
    requeued_by_shutdown: AtomicU64,
    pub(super) unknown: AtomicU64,
    errors: AtomicU64,
    registered: AtomicU64,
    pub(super) remote_invalidated: AtomicU64,
    local_invalidated: AtomicU64,
    inline: AtomicU64,
    retried: AtomicU64,
}

impl Stats {
    pub(super) fn get(&self) -> IoStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IoStats {
            submitted: g(&self.submitted),
            finished: g(&self.finished),
            failed: g(&self.failed),
            ended_by_shutdown: g(&self.ended_by_shutdown),
            requeued_by_shutdown: g(&self.requeued_by_shutdown),
            unknown: g(&self.unknown),
            errors: g(&self.errors),
            registered: g(&self.registered),
            remote_invalidated: g(&self.remote_invalidated),
            local_invalidated: g(&self.local_invalidated),
            inline: g(&self.inline),
            retried: g(&self.retried),
        }
    }
}

pub(super) fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// What setting flags of a slot found.
pub(super) enum Marked {
    /// Set; others still to come.
    Set,
    /// Set, the last of `DONE`: the caller finishes the request.
    Finish(u64),
    /// Set (a response), the registration still live: the caller posts
    /// its LOCAL_INV.
    Invalidate(u32),
    /// Not set: the slot carries no request, or another command, or has
    /// them already.
    Refused,
    /// Not set: a response that invalidated an rkey not of the slot's
    /// live registration.
    Bogus(u32),
}

impl Shared {
    /// The shared part of a queue of `cfg` on `qp` of `pd`, calling
    /// `handler`.
    pub(super) fn new(
        pd: &Pd,
        qp: *mut bindings::ib_qp,
        cfg: IoConfig,
        handler: Arc<dyn IoHandler>,
    ) -> Result<Arc<Self>> {
        let dev = pd.device();
        let depth = usize::from(cfg.depth);
        let mut bufs = Bufs {
            capsules: KVec::with_capacity(depth, GFP_KERNEL)?,
            responses: KVec::with_capacity(depth, GFP_KERNEL)?,
            tables: KVec::new(),
            mrs: KVec::new(),
            _pd: pd.clone(),
        };
        let mut slots = KVec::with_capacity(depth, GFP_KERNEL)?;
        for _ in 0..depth {
            bufs.capsules
                .push(DmaBuf::new(dev, cfg.capsule_len)?, GFP_KERNEL)?;
            bufs.responses
                .push(DmaBuf::new(dev, cfg.response_len)?, GFP_KERNEL)?;
            slots.push(
                Slot {
                    state: AtomicU64::new(0),
                    rkey: AtomicU32::new(0),
                    rq: UnsafeCell::new(None),
                    map: UnsafeCell::new(None),
                },
                GFP_KERNEL,
            )?;
            if cfg.max_pages > 0 {
                bufs.tables
                    .push(SgTable::new(cfg.max_pages, false)?, GFP_KERNEL)?;
                bufs.mrs.reserve(1, GFP_KERNEL)?;
                // SAFETY: `pd` is live; `IoQueue::new` checked the device
                // registers as many pages.
                let mr = kernel::error::from_err_ptr(unsafe {
                    bindings::ib_alloc_mr(pd.as_raw(), bindings::IB_MR_TYPE_MEM_REG, cfg.max_pages)
                })?;
                // INVARIANT: allocated in `pd`; the room was made above.
                bufs.mrs.push(NonNull::new(mr).ok_or(ENOMEM)?, GFP_KERNEL)?;
            }
        }
        let mut sh = UniqueArc::new(
            Shared {
                qp,
                lkey: pd.local_dma_lkey(),
                cfg,
                closed: AtomicBool::new(false),
                quiesced: AtomicBool::new(false),
                handler: AtomicPtr::new(ptr::null_mut()),
                slots,
                send_cqes: KVec::new(),
                reg_cqes: KVec::new(),
                inv_cqes: KVec::new(),
                recv_cqes: KVec::new(),
                dev: dev.as_raw(),
                bufs: UnsafeCell::new(Some(bufs)),
                stats: Stats::default(),
            },
            GFP_KERNEL,
        )?;
        // Not shared yet: the CQEs are filled in place, then never moved.
        let s = &mut *sh;
        *s.handler.get_mut() = KBox::into_raw(KBox::new(handler, GFP_KERNEL)?);
        let cqe = |done: Done, tag| SendCqe {
            cqe: Opaque::new(bindings::ib_cqe { done: Some(done) }),
            shared: AtomicPtr::new(ptr::null_mut()),
            tag,
        };
        s.send_cqes.reserve(depth, GFP_KERNEL)?;
        s.reg_cqes.reserve(depth, GFP_KERNEL)?;
        s.inv_cqes.reserve(depth, GFP_KERNEL)?;
        s.recv_cqes.reserve(depth, GFP_KERNEL)?;
        for i in 0..depth as u16 {
            s.send_cqes.push(cqe(send_done, i), GFP_KERNEL)?;
            s.reg_cqes.push(cqe(reg_done, i), GFP_KERNEL)?;
            s.inv_cqes.push(cqe(inv_done, i), GFP_KERNEL)?;
            s.recv_cqes.push(
                RecvCqe {
                    cqe: Opaque::new(bindings::ib_cqe {
                        done: Some(recv_done),
                    }),
                    shared: AtomicPtr::new(ptr::null_mut()),
                    index: i,
                },
                GFP_KERNEL,
            )?;
        }
        let sh: Arc<Shared> = sh.into();
        // INVARIANT: the `Shared` the CQEs are part of, before any request
        // is posted (none is before this returns).
        let this = ptr::from_ref(&*sh).cast_mut();
        let cqes = Iterator::chain(sh.send_cqes.iter(), sh.reg_cqes.iter());
        for c in Iterator::chain(cqes, sh.inv_cqes.iter()) {
            c.shared.store(this, Ordering::Relaxed);
        }
        for c in sh.recv_cqes.iter() {
            c.shared.store(this, Ordering::Relaxed);
        }
        Ok(sh)
    }

    /// The buffers, while the queue is open.
    ///
    /// # Safety
    ///
    /// In a read-side critical section that saw `closed` false, or by the
    /// owner of a slot that saw it false when it took it.
    pub(super) unsafe fn bufs(&self) -> &Bufs {
        // SAFETY: `Some` and unchanged until `close`'s caller takes it,
        // after waiting for the caller (type invariant).
        unsafe { (*self.bufs.get()).as_ref().unwrap_unchecked() }
    }

    /// Posts receive `index`.
    ///
    /// # Safety
    ///
    /// In a read-side critical section that saw `closed` false; the
    /// receive is not posted.
    pub(super) unsafe fn post_recv(&self, index: u16) -> Result {
        // SAFETY: The caller's guarantee.
        let buf = unsafe { &self.bufs().responses[usize::from(index)] };
        let mut sge = buf
            .sges(0, self.cfg.response_len, self.lkey, false)
            .next()
            .ok_or(EINVAL)?;
        let mut wr = bindings::ib_recv_wr {
            sg_list: &mut sge,
            num_sge: 1,
            ..Default::default()
        };
        wr.__bindgen_anon_1.wr_cqe = self.recv_cqes[usize::from(index)].cqe.get();
        let mut bad = ptr::null();
        // SAFETY: The QP is live while not closed (type invariant); the
        // buffer is mapped and lives until the QP is destroyed, the CQE
        // as long as completions may name it.
        let r = unsafe { bindings::ib_post_recv(self.qp, &wr, &mut bad) };
        if r != 0 {
            return Err(Error::from_errno(r));
        }
        Ok(())
    }

    /// Posts every receive, once, when the queue is made.
    pub(super) fn post_recvs(&self) -> Result {
        let _rcu = RcuRead::new();
        if self.closed.load(Ordering::Acquire) {
            return Err(crate::errno::enolink());
        }
        for i in 0..self.cfg.depth {
            // SAFETY: Inside the section, open; posted once each, here.
            unsafe { self.post_recv(i)? };
        }
        Ok(())
    }

    /// Unmaps the pages of the slot of `tag`, if mapped.
    ///
    /// # Safety
    ///
    /// The caller owns the slot's request (its owner before `POSTED`, its
    /// finisher, or the shutdown), and reaches the buffers as
    /// [`Shared::bufs`] says.
    unsafe fn unmap(&self, tag: u16) {
        let slot = &self.slots[usize::from(tag)];
        // SAFETY: The caller's guarantee.
        let map = unsafe { (*slot.map.get()).take() };
        // SAFETY: As above.
        unsafe { self.unmap_with(tag, map) };
    }

    /// Unmaps `map`, taken from the slot of `tag`.
    ///
    /// # Safety
    ///
    /// As [`Shared::unmap`], `map` its mapping.
    unsafe fn unmap_with(&self, tag: u16, map: Option<Mapping>) {
        if let Some(m) = map {
            // SAFETY: The caller's guarantee: the table lives, its first
            // `nents` mapped by `map_data` with these.
            unsafe {
                let sgl = self.bufs().tables[usize::from(tag)].sgl();
                bindings::ib_dma_unmap_sg(self.dev, sgl, m.nents, m.dir);
            }
        }
    }

    /// Posts a signaled LOCAL_INV of `rkey`, the registration of the slot
    /// of `tag`; reports a failure (the request then waits for the
    /// shutdown).
    ///
    /// # Safety
    ///
    /// In a read-side critical section that saw the queue open.
    pub(super) unsafe fn post_inv(&self, tag: u16, rkey: u32) {
        let mut wr = bindings::ib_send_wr {
            opcode: bindings::IB_WR_LOCAL_INV,
            send_flags: bindings::IB_SEND_SIGNALED,
            ..Default::default()
        };
        wr.ex.invalidate_rkey = rkey;
        wr.__bindgen_anon_1.wr_cqe = self.inv_cqes[usize::from(tag)].cqe.get();
        let mut bad = ptr::null();
        // SAFETY: The QP is live in the caller's section; the CQE lives as
        // long as completions may name it.
        let r = unsafe { bindings::ib_post_send(self.qp, &wr, &mut bad) };
        if r != 0 {
            // SAFETY: The caller's section.
            unsafe { self.report(IoError::InvalidateFailed(r)) };
        } else {
            bump(&self.stats.local_invalidated);
        }
    }

    /// A response to the slot of `tag` for command `cid` with status `e`,
    /// which invalidated `inv`, if any: sets `RESPONDED`, and `REG_DEAD`
    /// if it invalidated the slot's live registration, and `RETRY` if
    /// `retry` and the status failed.
    pub(super) fn respond(
        &self,
        tag: u16,
        cid: u16,
        e: i32,
        retry: bool,
        inv: Option<u32>,
    ) -> Marked {
        let Some(slot) = self.slots.get(usize::from(tag)) else {
            return Marked::Refused;
        };
        let retry = if retry && e != 0 { RETRY } else { 0 };
        slot.set(e, |s| {
            if flags(s) & POSTED == 0 || flags(s) & RESPONDED != 0 || cid != self::cid(s) {
                return Err(Marked::Refused);
            }
            let live = flags(s) & REG_DEAD == 0;
            match inv {
                None => Ok(RESPONDED | retry),
                Some(k) if live && k == slot.rkey.load(Ordering::Relaxed) => {
                    Ok(RESPONDED | REG_DEAD | retry)
                }
                Some(k) => Err(Marked::Bogus(k)),
            }
        })
    }

    /// Sets `bits` of the slot of `tag` (and `e`, the request's first
    /// error), if it carries a request that has not had them.
    pub(super) fn mark(&self, tag: u16, bits: u64, e: i32) -> Marked {
        let Some(slot) = self.slots.get(usize::from(tag)) else {
            return Marked::Refused;
        };
        slot.set(e, |s| {
            if flags(s) & POSTED == 0 || flags(s) & bits != 0 {
                Err(Marked::Refused)
            } else {
                Ok(bits)
            }
        })
    }

    /// Does what marking the slot of `tag` asked of the marker: finishes
    /// the request ([`Marked::Finish`]) or invalidates its registration
    /// ([`Marked::Invalidate`]); nothing for the other outcomes.
    ///
    /// # Safety
    ///
    /// In a read-side critical section that saw the queue open; `m` is
    /// this task's marking of the slot.
    pub(super) unsafe fn advance(&self, tag: u16, m: Marked) {
        match m {
            // SAFETY: The caller's guarantee: it set the last `DONE` flag.
            Marked::Finish(s) => unsafe { self.finish(tag, s) },
            // SAFETY: The caller's guarantee: it set the second of
            // `SEND_DONE` and `RESPONDED`, the registration live.
            Marked::Invalidate(k) => unsafe { self.post_inv(tag, k) },
            Marked::Set | Marked::Refused | Marked::Bogus(_) => {}
        }
    }

    /// Ends the request of the slot of `tag`, which the caller finished
    /// with state `s`: unmaps it, frees the slot (the request's end may
    /// hand its tag to the next), ends it -- or requeues it, for a retry
    /// its response asked for (`RETRY`) while it has retries left.
    ///
    /// # Safety
    ///
    /// In a read-side critical section that saw the queue open.
    pub(super) unsafe fn finish(&self, tag: u16, s: u64) {
        let slot = &self.slots[usize::from(tag)];
        // SAFETY: The caller set the last `DONE` flag: the finisher, the
        // only one to take `rq` and `map` (type invariant); `rq` is `Some`
        // since `POSTED`.
        let (rq, map) = unsafe { ((*slot.rq.get()).take(), (*slot.map.get()).take()) };
        // Before the slot is freed (its table is then the next owner's)
        // and the request ends (with swiotlb, a read's data is copied back
        // here).
        // SAFETY: The caller's section.
        unsafe { self.unmap_with(tag, map) };
        slot.free(s);
        let e = err(s);
        bump(&self.stats.finished);
        let Some(rq) = rq else {
            return;
        };
        if e == 0 {
            rq.end(Ok(()));
            return;
        }
        let status = Err(Error::from_errno(e));
        if flags(s) & RETRY == 0 {
            bump(&self.stats.failed);
            rq.end(status);
        } else if rq.retry_or_end(status, self.cfg.max_retries) {
            bump(&self.stats.retried);
        } else {
            bump(&self.stats.failed);
        }
    }

    /// The handler, while not revoked.
    ///
    /// # Safety
    ///
    /// In a read-side critical section that saw `closed` false.
    pub(super) unsafe fn handler(&self) -> Option<&Arc<dyn IoHandler>> {
        let h = self.handler.load(Ordering::Acquire);
        // SAFETY: From `into_raw`, freed only after `close`'s caller
        // waited for this section (type invariant).
        (!h.is_null()).then(|| unsafe { &*h })
    }

    /// Tells the handler of `e`.
    ///
    /// # Safety
    ///
    /// As [`Shared::handler`].
    pub(super) unsafe fn report(&self, e: IoError) {
        bump(&self.stats.errors);
        // SAFETY: The caller's guarantee.
        if let Some(h) = unsafe { self.handler() } {
            h.error(e);
        }
    }

    /// Closes the queue: nothing is submitted and no callback acts after
    /// this returns. Process context.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        // Every section that saw the queue open has ended; one begun since
        // sees it closed.
        synchronize_rcu();
        // The owners of slots taken before: each sees the queue closed when
        // it is to post, and gives its slot back.
        while self.slots.iter().any(|s| {
            let f = flags(s.state.load(Ordering::Acquire));
            f & OWNED != 0 && f & POSTED == 0
        }) {
            // SAFETY: No precondition; process context (the caller's).
            unsafe { bindings::kverbs_msleep(1) };
        }
    }

    /// The QP was destroyed, or drained (called by its drop): the device
    /// no longer touches the buffers or the requests' memory.
    pub(crate) fn qp_quiesced(&self) {
        self.quiesced.store(true, Ordering::Release);
    }

    /// After [`Shared::close`] and the QP's drop: if the QP was quiesced,
    /// releases the buffers and ends every request still carried with
    /// `EIO`, or requeues it (`carried`), else the device may still reach
    /// them: they are leaked. Returns the handler, revoked, for the caller
    /// to drop with no lock held (its drop may drop this queue's handle).
    pub(super) fn finish_closed(&self, carried: Carried) -> Option<KBox<Arc<dyn IoHandler>>> {
        if self.quiesced.load(Ordering::Acquire) {
            // SAFETY: Closed, and the wait for the sections is over: only
            // the caller reaches the buffers and slots (type invariant).
            // The registrations go first: no rkey reaches a request's pages
            // once it ends.
            // SAFETY: As above.
            let bufs = unsafe { &mut *self.bufs.get() };
            if bufs.as_mut().is_some_and(|b| b.dereg()) {
                // SAFETY: As above.
                unsafe { self.end_carried(carried) };
                drop(bufs.take());
            } else {
                // An MR may still give access to a request's pages: the
                // requests, their mappings and the buffers are leaked
                // (the PD with them, which the MR still counts).
                core::mem::forget(bufs.take());
            }
        }
        let h = self.handler.swap(ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: From `into_raw`; no section reads it any more.
        (!h.is_null()).then(|| unsafe { KBox::from_raw(h) })
    }
}

impl Shared {
    /// Unmaps every request the slots still carry, after the registrations
    /// were deregistered, and ends it with `EIO`, or requeues it if
    /// `carried` says so and it has retries left ([`RqRef::retry_or_end`]).
    ///
    /// # Safety
    ///
    /// The caller alone reaches the slots and the buffers, which are
    /// `Some`; the device touches none of them any more.
    unsafe fn end_carried(&self, carried: Carried) {
        for (tag, slot) in self.slots.iter().enumerate() {
            let s = slot.state.load(Ordering::Acquire);
            if flags(s) & POSTED == 0 {
                continue;
            }
            // SAFETY: The caller's guarantee.
            let rq = unsafe { (*slot.rq.get()).take() };
            // SAFETY: As above; `tag` is below the depth.
            unsafe { self.unmap(tag as u16) };
            slot.free(s);
            let Some(rq) = rq else {
                continue;
            };
            let requeued = match carried {
                Carried::Retry => rq.retry_or_end(Err(EIO), self.cfg.max_retries),
                Carried::Fail => {
                    rq.end(Err(EIO));
                    false
                }
            };
            bump(if requeued {
                &self.stats.requeued_by_shutdown
            } else {
                &self.stats.ended_by_shutdown
            });
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let h = *self.handler.get_mut();
        if !h.is_null() {
            // SAFETY: From `into_raw`, not revoked.
            drop(unsafe { KBox::from_raw(h) });
        }
        // A request still carried (a queue whose QP could not be made to
        // carry it): the registrations go, then it ends.
        if let Some(b) = self.bufs.get_mut().as_mut() {
            if b.dereg() {
                // SAFETY: Dropped: nothing else reaches the slots; the
                // buffers are there; the device no longer reaches them
                // (the QP is gone, else it would hold this).
                unsafe { self.end_carried(Carried::Fail) };
            } else {
                // As in `finish_closed`: leaked.
                core::mem::forget(self.bufs.get_mut().take());
                for slot in self.slots.iter_mut() {
                    core::mem::forget(slot.rq.get_mut().take());
                }
            }
        }
    }
}
