// SPDX-License-Identifier: GPL-2.0

//! The completion callbacks of a capsule queue (kverbs.ko's code, never a
//! driver's): a capsule's SEND, a registration's REG_MR (its failure
//! only), a LOCAL_INV, and a response's receive, which the handler
//! decodes.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`struct ib_cqe`, `struct ib_wc`)

use super::slot::{bump, Marked, RcuRead, Shared, REG_DEAD, SEND_DONE};
use super::{Answer, IoError, MAX_CAPSULE};
use crate::bindings;
use crate::wc::WcStatus;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::{prelude::*, types::Opaque};

/// A `done` function of an `ib_cqe`.
pub(super) type Done = unsafe extern "C" fn(*mut bindings::ib_cq, *mut bindings::ib_wc);

/// The `ib_cqe` of a tag's SEND, REG_MR or LOCAL_INV.
///
/// # Invariants
///
/// `cqe` is the first field; `shared` is the [`Shared`] this is part of,
/// set before any request names `cqe`.
#[repr(C)]
pub(super) struct SendCqe {
    pub(super) cqe: Opaque<bindings::ib_cqe>,
    pub(super) shared: AtomicPtr<Shared>,
    pub(super) tag: u16,
}

/// The `ib_cqe` of a receive.
///
/// # Invariants
///
/// As [`SendCqe`]'s.
#[repr(C)]
pub(super) struct RecvCqe {
    pub(super) cqe: Opaque<bindings::ib_cqe>,
    pub(super) shared: AtomicPtr<Shared>,
    pub(super) index: u16,
}

/// A CQE of a queue's: it names the queue.
trait QueueCqe {
    fn shared(&self) -> &AtomicPtr<Shared>;
}

impl QueueCqe for SendCqe {
    fn shared(&self) -> &AtomicPtr<Shared> {
        &self.shared
    }
}

impl QueueCqe for RecvCqe {
    fn shared(&self) -> &AtomicPtr<Shared> {
        &self.shared
    }
}

/// What a callback starts from: its CQE of type `C`, the queue, the
/// completion, its status, and a read-side section -- or `None` once the
/// queue is closed (a flush of the shutdown's drain, or a completion left
/// in the CQ of a QP whose drain failed: nothing is touched then).
///
/// # Safety
///
/// Called by a `done` of the RDMA core with a completion whose `wr_cqe`
/// is the first field of a `C` of a live [`Shared`] (the QP keeps it until
/// its drain saw every completion, or leaks it), in the CQ's context.
unsafe fn enter<'a, C: QueueCqe>(
    wc: *mut bindings::ib_wc,
) -> Option<(&'a C, &'a Shared, &'a bindings::ib_wc, WcStatus, RcuRead)> {
    // SAFETY: `wc` is valid during the call; `wr_cqe` is the first field
    // of a `C` (the caller's guarantee).
    let (c, wc) = unsafe { (&*(*wc).__bindgen_anon_1.wr_cqe.cast::<C>(), &*wc) };
    // SAFETY: As above; set before any request naming it was posted.
    let sh = unsafe { &*c.shared().load(Ordering::Relaxed) };
    let rcu = RcuRead::new();
    if sh.closed.load(Ordering::Acquire) {
        return None;
    }
    Some((c, sh, wc, WcStatus::from_raw(wc.status), rcu))
}

/// Whether `status` is a failure; tells the handler of it (made by `e`)
/// unless it is a flush.
///
/// # Safety
///
/// In a read-side critical section that saw the queue open.
unsafe fn failed(
    sh: &Shared,
    wc: &bindings::ib_wc,
    status: WcStatus,
    e: fn(WcStatus, u32) -> IoError,
) -> bool {
    if status == WcStatus::Success {
        return false;
    }
    if status != WcStatus::WrFlushErr {
        // SAFETY: The caller's guarantee.
        unsafe { sh.report(e(status, wc.vendor_err)) };
    }
    true
}

/// The `done` of a capsule's SEND.
///
/// # Safety
///
/// Called by the RDMA core with a completion whose `wr_cqe` is a
/// [`SendCqe`]'s `send_cqes`, in the CQ's context (softirq).
pub(super) unsafe extern "C" fn send_done(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: The caller's guarantee.
    let Some((c, sh, wc, status, _rcu)) = (unsafe { enter::<SendCqe>(wc) }) else {
        return;
    };
    let send = |status, vendor_err| IoError::Send { status, vendor_err };
    // SAFETY: Inside the section, open.
    let e = if unsafe { failed(sh, wc, status, send) } {
        EIO.to_errno()
    } else {
        0
    };
    let m = sh.mark(c.tag, SEND_DONE, e);
    // SAFETY: As above.
    unsafe { sh.advance(c.tag, m) };
}

/// The `done` of an unsignaled REG_MR: its failure only. The registration
/// may or may not be live: the request waits for the shutdown.
///
/// # Safety
///
/// As [`send_done`], of `reg_cqes`.
pub(super) unsafe extern "C" fn reg_done(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: The caller's guarantee.
    let Some((_, sh, wc, status, _rcu)) = (unsafe { enter::<SendCqe>(wc) }) else {
        return;
    };
    let reg = |status, vendor_err| IoError::Registration { status, vendor_err };
    // SAFETY: Inside the section, open.
    let _ = unsafe { failed(sh, wc, status, reg) };
}

/// The `done` of a LOCAL_INV: the registration is dead once it succeeded;
/// after a failure the request waits for the shutdown (which deregisters
/// the MR before it ends the request).
///
/// # Safety
///
/// As [`send_done`], of `inv_cqes`.
pub(super) unsafe extern "C" fn inv_done(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: The caller's guarantee.
    let Some((c, sh, wc, status, _rcu)) = (unsafe { enter::<SendCqe>(wc) }) else {
        return;
    };
    let inv = |status, vendor_err| IoError::Invalidation { status, vendor_err };
    // SAFETY: Inside the section, open.
    if unsafe { failed(sh, wc, status, inv) } {
        return;
    }
    let m = sh.mark(c.tag, REG_DEAD, 0);
    // SAFETY: As above.
    unsafe { sh.advance(c.tag, m) };
}

/// The `done` of a receive: a response.
///
/// # Safety
///
/// As [`send_done`], with a [`RecvCqe`].
pub(super) unsafe extern "C" fn recv_done(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: The caller's guarantee.
    let Some((c, sh, wc, status, _rcu)) = (unsafe { enter::<RecvCqe>(wc) }) else {
        return;
    };
    let recv = |status, vendor_err| IoError::Recv { status, vendor_err };
    // Not posted again after a failure: the QP is in error.
    // SAFETY: Inside the section, open.
    if unsafe { failed(sh, wc, status, recv) } {
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
        // Read only with the flag: the union is not written otherwise.
        #[allow(clippy::unnecessary_lazy_evaluations)]
        let inv = (wc.wc_flags & bindings::IB_WC_WITH_INVALIDATE as i32 != 0)
            // SAFETY: With `IB_WC_WITH_INVALIDATE` the union holds the
            // rkey the peer invalidated.
            .then(|| unsafe { wc.ex.invalidate_rkey });
        if let Some(Answer {
            tag,
            cid,
            status,
            retry,
        }) = answer
        {
            let e = status.err().map_or(0, |e| e.to_errno());
            let m = sh.respond(tag, cid, e, retry, inv);
            if inv.is_some() && matches!(m, Marked::Finish(_) | Marked::Set) {
                bump(&sh.stats.remote_invalidated);
            }
            match m {
                Marked::Finish(_) | Marked::Set | Marked::Invalidate(_) => {
                    // SAFETY: Inside the section, open.
                    unsafe { sh.advance(tag, m) }
                }
                Marked::Refused => {
                    bump(&sh.stats.unknown);
                    // SAFETY: As above.
                    unsafe { sh.report(IoError::UnknownCommand { tag, cid }) };
                }
                Marked::Bogus(rkey) => {
                    bump(&sh.stats.unknown);
                    // SAFETY: As above.
                    unsafe { sh.report(IoError::BogusInvalidation { tag, rkey }) };
                }
            }
        } else if let Some(rkey) = inv {
            // SAFETY: As above.
            unsafe {
                sh.report(IoError::BogusInvalidation {
                    tag: u16::MAX,
                    rkey,
                })
            };
        }
    }
    // SAFETY: Inside the section, open; this receive completed.
    if let Err(e) = unsafe { sh.post_recv(c.index) } {
        // SAFETY: As above.
        unsafe { sh.report(IoError::RepostFailed(e.to_errno())) };
    }
}
