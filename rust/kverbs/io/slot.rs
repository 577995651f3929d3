// SPDX-License-Identifier: GPL-2.0

//! What a capsule queue shares with its QP and its completion callbacks:
//! a slot per tag (its state, its capsule, the request it carries), the
//! receives of the responses, the handler, and the callbacks themselves.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`ib_post_send`, `ib_post_recv`, `struct ib_cqe`)

use super::{Answer, IoConfig, IoError, IoHandler, IoStats, MAX_CAPSULE};
use crate::bindings;
use crate::blk::RqRef;
use crate::dma::DmaBuf;
use crate::wc::WcStatus;
use core::{
    cell::UnsafeCell,
    ptr,
    sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering},
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
const SEND_DONE: u64 = 1 << 2;
const RESPONDED: u64 = 1 << 3;
const REG_DEAD: u64 = 1 << 4;
const FLAGS: u64 = 0xff;
/// What a request waits for before it is finished: its send's completion,
/// its response, and the end of its memory registration (none yet).
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
struct RcuRead;

impl RcuRead {
    fn new() -> Self {
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

/// The `ib_cqe` of a tag's SEND.
///
/// # Invariants
///
/// `cqe` is the first field; `shared` is the [`Shared`] this is part of,
/// set before any request names `cqe`.
#[repr(C)]
struct SendCqe {
    cqe: Opaque<bindings::ib_cqe>,
    shared: AtomicPtr<Shared>,
    tag: u16,
}

/// The `ib_cqe` of a receive.
///
/// # Invariants
///
/// As [`SendCqe`]'s.
#[repr(C)]
struct RecvCqe {
    cqe: Opaque<bindings::ib_cqe>,
    shared: AtomicPtr<Shared>,
    index: u16,
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
struct Slot {
    state: AtomicU64,
    rq: UnsafeCell<Option<RqRef>>,
}

/// The DMA buffers: a capsule a tag, a response a receive.
struct Bufs {
    capsules: KVec<DmaBuf>,
    responses: KVec<DmaBuf>,
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
    cfg: IoConfig,
    closed: AtomicBool,
    /// The QP was destroyed, or drained: the device touches none of the
    /// queue's memory any more.
    quiesced: AtomicBool,
    handler: AtomicPtr<Arc<dyn IoHandler>>,
    slots: KVec<Slot>,
    send_cqes: KVec<SendCqe>,
    recv_cqes: KVec<RecvCqe>,
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
    unknown: AtomicU64,
    errors: AtomicU64,
}

impl Stats {
    pub(super) fn get(&self) -> IoStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IoStats {
            submitted: g(&self.submitted),
            finished: g(&self.finished),
            failed: g(&self.failed),
            ended_by_shutdown: g(&self.ended_by_shutdown),
            unknown: g(&self.unknown),
            errors: g(&self.errors),
        }
    }
}

fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// What setting flags of a slot found.
enum Marked {
    /// Set; others still to come.
    Set,
    /// Set, the last of `DONE`: the caller finishes the request.
    Finish(u64),
    /// Not set: the slot carries no request, or another command, or has
    /// them already.
    Refused,
}

impl Shared {
    /// The shared part of a queue of `cfg` on `qp` (of `dev`, with the
    /// PD's `lkey`), calling `handler`.
    pub(super) fn new(
        dev: &crate::device::Device,
        qp: *mut bindings::ib_qp,
        lkey: u32,
        cfg: IoConfig,
        handler: Arc<dyn IoHandler>,
    ) -> Result<Arc<Self>> {
        let depth = usize::from(cfg.depth);
        let mut capsules = KVec::with_capacity(depth, GFP_KERNEL)?;
        let mut responses = KVec::with_capacity(depth, GFP_KERNEL)?;
        let mut slots = KVec::with_capacity(depth, GFP_KERNEL)?;
        for _ in 0..depth {
            capsules.push(DmaBuf::new(dev, cfg.capsule_len)?, GFP_KERNEL)?;
            responses.push(DmaBuf::new(dev, cfg.response_len)?, GFP_KERNEL)?;
            slots.push(
                Slot {
                    state: AtomicU64::new(0),
                    rq: UnsafeCell::new(None),
                },
                GFP_KERNEL,
            )?;
        }
        let mut sh = UniqueArc::new(
            Shared {
                qp,
                lkey,
                cfg,
                closed: AtomicBool::new(false),
                quiesced: AtomicBool::new(false),
                handler: AtomicPtr::new(ptr::null_mut()),
                slots,
                send_cqes: KVec::new(),
                recv_cqes: KVec::new(),
                bufs: UnsafeCell::new(Some(Bufs {
                    capsules,
                    responses,
                })),
                stats: Stats::default(),
            },
            GFP_KERNEL,
        )?;
        // Not shared yet: the CQEs are filled in place, then never moved.
        let s = &mut *sh;
        *s.handler.get_mut() = KBox::into_raw(KBox::new(handler, GFP_KERNEL)?);
        s.send_cqes.reserve(depth, GFP_KERNEL)?;
        s.recv_cqes.reserve(depth, GFP_KERNEL)?;
        for i in 0..depth as u16 {
            s.send_cqes.push(
                SendCqe {
                    cqe: Opaque::new(bindings::ib_cqe {
                        done: Some(send_done),
                    }),
                    shared: AtomicPtr::new(ptr::null_mut()),
                    tag: i,
                },
                GFP_KERNEL,
            )?;
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
        for c in sh.send_cqes.iter() {
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
    unsafe fn bufs(&self) -> &Bufs {
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
    unsafe fn post_recv(&self, index: u16) -> Result {
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

    /// Sends the capsule of request `rq` (its tag below the depth) with
    /// command id `cid`, built by `build`: never sleeps itself. The request
    /// is given back with `ENOLINK` once the queue is closed, `EBUSY` while
    /// its tag's slot still carries the request before, or the post's
    /// error. The slot is taken in one read-side critical section and the
    /// capsule posted in another: `build` runs between them, owning the
    /// slot, which [`Shared::close`] waits for (so a `build` that sleeps
    /// delays a shutdown, and breaks nothing).
    pub(super) fn submit(
        &self,
        rq: RqRef,
        cid: u16,
        build: impl FnOnce(&mut [u8]),
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
            slot.state.store(word(g, 0, 0, 0), Ordering::Release);
            Err((rq, e))
        };
        let mut capsule = [0u8; MAX_CAPSULE];
        let capsule = &mut capsule[..self.cfg.capsule_len];
        build(capsule);
        // SAFETY: The slot's owner, which saw the queue open when it took
        // it.
        let buf = unsafe { &self.bufs().capsules[usize::from(tag)] };
        // The slot's owner is the only writer of its capsule.
        if let Err(e) = buf.write(0, capsule) {
            return give_back(rq, e);
        }
        let Some(mut sge) = buf.sges(0, self.cfg.capsule_len, self.lkey, false).next() else {
            return give_back(rq, EINVAL);
        };
        let _rcu = RcuRead::new();
        if self.closed.load(Ordering::Acquire) {
            return give_back(rq, crate::errno::enolink());
        }
        // SAFETY: `OWNED` by this task, not yet `POSTED`: nobody else
        // touches `rq` (type invariant).
        unsafe { *slot.rq.get() = Some(rq) };
        // No memory registration yet: `REG_DEAD` at once.
        slot.state.store(
            word(g, cid, 0, OWNED | POSTED | REG_DEAD),
            Ordering::Release,
        );
        let mut wr = bindings::ib_send_wr {
            sg_list: &mut sge,
            num_sge: 1,
            opcode: bindings::IB_WR_SEND,
            send_flags: bindings::IB_SEND_SIGNALED,
            ..Default::default()
        };
        wr.__bindgen_anon_1.wr_cqe = self.send_cqes[usize::from(tag)].cqe.get();
        let mut bad = ptr::null();
        // SAFETY: The QP is live in a section that saw the queue open; the
        // capsule is mapped and lives until the QP is destroyed; the CQE as
        // long as completions may name it (type invariant).
        let r = unsafe { bindings::ib_post_send(self.qp, &wr, &mut bad) };
        if r != 0 {
            return Err(self.unpost(slot, Error::from_errno(r)));
        }
        bump(&self.stats.submitted);
        Ok(())
    }

    /// Takes back the request of `slot`, whose send was not posted: no
    /// completion comes for it, so this sets `SEND_DONE`, the last flag
    /// (a response may have come already, for a command never sent).
    fn unpost(&self, slot: &Slot, e: Error) -> (RqRef, Error) {
        let s = slot
            .state
            .fetch_or(SEND_DONE | RESPONDED, Ordering::Acquire);
        // SAFETY: `SEND_DONE` was not set, and only this sets it for a
        // send never posted: this task is the finisher, and `rq` is `Some`
        // (type invariant).
        let rq = unsafe { (*slot.rq.get()).take().unwrap_unchecked() };
        slot.state
            .store(word(gen(s).wrapping_add(1), 0, 0, 0), Ordering::Release);
        (rq, e)
    }

    /// Sets `bits` of the slot of `tag` (and `err`, the request's first
    /// error), if it carries a request that has not had them; with `cid`,
    /// only if it carries that command.
    fn mark(&self, tag: u16, bits: u64, cid: Option<u16>, e: i32) -> Marked {
        let Some(slot) = self.slots.get(usize::from(tag)) else {
            return Marked::Refused;
        };
        let mut s = slot.state.load(Ordering::Acquire);
        loop {
            if flags(s) & POSTED == 0
                || flags(s) & bits != 0
                || cid.is_some_and(|c| c != self::cid(s))
            {
                return Marked::Refused;
            }
            let e = if err(s) != 0 { err(s) } else { e };
            let new = word(gen(s), self::cid(s), e, flags(s) | bits);
            match slot
                .state
                .compare_exchange(s, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) if flags(new) & DONE == DONE => return Marked::Finish(new),
                Ok(_) => return Marked::Set,
                Err(now) => s = now,
            }
        }
    }

    /// Ends the request of the slot of `tag`, which the caller finished
    /// with state `s`, and frees the slot first (the request's end may
    /// hand its tag to the next).
    fn finish(&self, tag: u16, s: u64) {
        let slot = &self.slots[usize::from(tag)];
        // SAFETY: The caller set the last `DONE` flag: the finisher, the
        // only one to take `rq` (type invariant); `Some` since `POSTED`.
        let rq = unsafe { (*slot.rq.get()).take() };
        slot.state
            .store(word(gen(s).wrapping_add(1), 0, 0, 0), Ordering::Release);
        let e = err(s);
        if e != 0 {
            bump(&self.stats.failed);
        }
        bump(&self.stats.finished);
        if let Some(rq) = rq {
            rq.end(if e == 0 {
                Ok(())
            } else {
                Err(Error::from_errno(e))
            });
        }
    }

    /// The handler, while not revoked.
    ///
    /// # Safety
    ///
    /// In a read-side critical section that saw `closed` false.
    unsafe fn handler(&self) -> Option<&Arc<dyn IoHandler>> {
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
    unsafe fn report(&self, e: IoError) {
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
    /// `EIO` (else the device may still reach them: they are leaked).
    /// Returns the handler, revoked, for the caller to drop with no lock
    /// held (its drop may drop this queue's handle).
    pub(super) fn finish_closed(&self) -> Option<KBox<Arc<dyn IoHandler>>> {
        if self.quiesced.load(Ordering::Acquire) {
            // SAFETY: Closed, and the wait for the sections is over: only
            // the caller reaches the buffers and slots (type invariant).
            drop(unsafe { (*self.bufs.get()).take() });
            for slot in self.slots.iter() {
                let s = slot.state.load(Ordering::Acquire);
                if flags(s) & POSTED == 0 {
                    continue;
                }
                // SAFETY: As above.
                let rq = unsafe { (*slot.rq.get()).take() };
                slot.state
                    .store(word(gen(s).wrapping_add(1), 0, 0, 0), Ordering::Release);
                if let Some(rq) = rq {
                    bump(&self.stats.ended_by_shutdown);
                    rq.end(Err(EIO));
                }
            }
        }
        let h = self.handler.swap(ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: From `into_raw`; no section reads it any more.
        (!h.is_null()).then(|| unsafe { KBox::from_raw(h) })
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let h = *self.handler.get_mut();
        if !h.is_null() {
            // SAFETY: From `into_raw`, not revoked.
            drop(unsafe { KBox::from_raw(h) });
        }
        for slot in self.slots.iter_mut() {
            // A request still carried (a queue whose QP could not be made
            // to carry it): ended.
            if let Some(rq) = slot.rq.get_mut().take() {
                rq.end(Err(EIO));
            }
        }
    }
}

/// The `done` of a capsule's SEND.
///
/// # Safety
///
/// Called by the RDMA core with a completion whose `wr_cqe` is a
/// [`SendCqe`]'s, in the CQ's context (softirq).
unsafe extern "C" fn send_done(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: `wc` is valid during the call; `wr_cqe` is the first field of
    // a `SendCqe` of a live `Shared` (the QP keeps it until its drain saw
    // every completion, or leaks it).
    let (c, wc) = unsafe { (&*(*wc).__bindgen_anon_1.wr_cqe.cast::<SendCqe>(), &*wc) };
    // SAFETY: As above; set before the request was posted.
    let sh = unsafe { &*c.shared.load(Ordering::Relaxed) };
    let _rcu = RcuRead::new();
    if sh.closed.load(Ordering::Acquire) {
        return;
    }
    let status = WcStatus::from_raw(wc.status);
    let mut e = 0;
    if status != WcStatus::Success {
        e = EIO.to_errno();
        if status != WcStatus::WrFlushErr {
            // SAFETY: Inside the section, open.
            unsafe {
                sh.report(IoError::Send {
                    status,
                    vendor_err: wc.vendor_err,
                })
            };
        }
    }
    if let Marked::Finish(s) = sh.mark(c.tag, SEND_DONE, None, e) {
        sh.finish(c.tag, s);
    }
}

/// The `done` of a receive: a response.
///
/// # Safety
///
/// As [`send_done`], with a [`RecvCqe`].
unsafe extern "C" fn recv_done(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: As in `send_done`.
    let (c, wc) = unsafe { (&*(*wc).__bindgen_anon_1.wr_cqe.cast::<RecvCqe>(), &*wc) };
    // SAFETY: As above.
    let sh = unsafe { &*c.shared.load(Ordering::Relaxed) };
    let _rcu = RcuRead::new();
    if sh.closed.load(Ordering::Acquire) {
        return;
    }
    let status = WcStatus::from_raw(wc.status);
    if status != WcStatus::Success {
        // Not posted again: the QP is in error.
        if status != WcStatus::WrFlushErr {
            // SAFETY: Inside the section, open.
            unsafe {
                sh.report(IoError::Recv {
                    status,
                    vendor_err: wc.vendor_err,
                })
            };
        }
        return;
    }
    let len = sh.cfg.response_len;
    if (wc.byte_len as usize) < len {
        // SAFETY: Inside the section, open.
        unsafe { sh.report(IoError::ShortResponse(wc.byte_len)) };
    } else {
        let mut rsp = [0u8; MAX_CAPSULE];
        let rsp = &mut rsp[..len];
        // SAFETY: Inside the section, open. The callbacks of one CQ run one
        // at a time: nothing else copies from this buffer.
        let read = unsafe { sh.bufs().responses[usize::from(c.index)].read(0, rsp) };
        // SAFETY: As above.
        let answer = match (read, unsafe { sh.handler() }) {
            (Ok(()), Some(h)) => h.response(rsp),
            _ => None,
        };
        if let Some(Answer { tag, cid, status }) = answer {
            let e = status.err().map_or(0, |e| e.to_errno());
            match sh.mark(tag, RESPONDED, Some(cid), e) {
                Marked::Finish(s) => sh.finish(tag, s),
                Marked::Set => {}
                Marked::Refused => {
                    bump(&sh.stats.unknown);
                    // SAFETY: As above.
                    unsafe { sh.report(IoError::UnknownCommand { tag, cid }) };
                }
            }
        }
    }
    // SAFETY: Inside the section, open; this receive completed.
    if let Err(e) = unsafe { sh.post_recv(c.index) } {
        // SAFETY: As above.
        unsafe { sh.report(IoError::RepostFailed(e.to_errno())) };
    }
}
