// SPDX-License-Identifier: GPL-2.0

//! The drain of a QP before its destruction, and its fault injection.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{QpInner, Queue, Slot, SLOT_DONE, SLOT_POSTED};
use crate::ah::AhInner;
use crate::bindings;
use crate::cq::Cq;
use crate::srq::Srq;
use crate::wait::Cancel;
use core::{ptr, sync::atomic::Ordering};
use kernel::{error::from_err_ptr, prelude::*, sync::Arc};

/// Fault injection of the drain of QPs: `fail_drain` in a debugfs
/// directory, with the kernel's fault attributes (`probability`, `times`,
/// `verbose`...: Documentation/fault-injection). A drain made to fail is
/// one that did not complete: the QP is destroyed and its slots leaked.
/// For tests of that path; needs `CONFIG_FAULT_INJECTION_DEBUG_FS`
/// (`EOPNOTSUPP` otherwise). Removed on drop.
///
/// # Invariants
///
/// `dentry` is the live `fail_drain` directory, in `_dir`.
pub struct DrainFaultInjection {
    dentry: *mut bindings::dentry,
    _dir: crate::debugfs::Dir,
}

// SAFETY: The dentry is only removed, which debugfs allows from any thread.
unsafe impl Send for DrainFaultInjection {}
// SAFETY: `&DrainFaultInjection` gives access to nothing.
unsafe impl Sync for DrainFaultInjection {}

impl DrainFaultInjection {
    /// Creates `fail_drain` in `dir`.
    pub fn new(dir: &crate::debugfs::Dir) -> Result<Self> {
        // SAFETY: `dir` is a live directory.
        let dentry = from_err_ptr(unsafe { bindings::kverbs_fail_drain_create(dir.as_raw()) })?;
        // INVARIANT: just created in `dir`, which we hold.
        Ok(DrainFaultInjection {
            dentry,
            _dir: dir.clone(),
        })
    }
}

impl Drop for DrainFaultInjection {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the directory is live; removing it
        // waits for its files' readers and writers.
        unsafe { bindings::debugfs_remove(self.dentry) };
    }
}

impl QpInner {
    /// Drains the QP: moves it to ERR, posts a marker on each queue and
    /// waits (5 s at most each) for the markers' completions, which come
    /// after every request posted before them has completed, flushed.
    /// Returns whether both came.
    ///
    /// Not `ib_drain_qp`: it cannot say whether it drained (it returns early
    /// with only a WARN when its modify or post fails), its send marker, an
    /// RDMA WRITE, is refused by UD QPs, and for a QP of an SRQ it processes
    /// the SRQ's CQ directly whatever its poll context (`__ib_drain_srq`).
    ///
    /// The drivers' own drain functions (mlx4, mlx5: the only ones in 6.12;
    /// 7.x adds hns, whose posts say `EIO` only in reset, the same case)
    /// are for a device in internal error, whose hardware completes nothing:
    /// their CQ poll completes the markers in software, and they wait for
    /// them without a time bound. They are used only there, as a fallback:
    /// when a marker of ours is refused with `EIO` (what their
    /// `post_send`/`post_recv` say in internal error, and only then), on an
    /// RC QP. Never on a UD QP: their send marker is an `ib_rdma_wr`, which
    /// their `post_send` reads as an `ib_ud_wr` on a UD QP (`ud_wr(wr)->ah`:
    /// the WRITE's `remote_addr`, 0; mlx5's `set_datagram_seg`, mlx4's
    /// `_mlx4_ib_post_send`).
    pub(super) fn drain(&self, last_ah: Option<&Arc<AhInner>>) -> bool {
        let qp = self.qp.as_ptr();
        // SAFETY: Reads the fault attribute (`DrainFaultInjection`).
        if unsafe { bindings::kverbs_should_fail_drain() } {
            pr_err!("QP {:#x} drain: failed by fault injection\n", self.qp_num());
            return false;
        }
        let mut a = bindings::ib_qp_attr {
            qp_state: bindings::IB_QPS_ERR,
            ..Default::default()
        };
        // SAFETY: The QP is live; any state may go to ERR.
        let ret = unsafe { bindings::ib_modify_qp(qp, &mut a, bindings::IB_QP_STATE as i32) };
        if ret != 0 {
            pr_err!(
                "QP {:#x} drain: modify to ERR failed: {}\n",
                self.qp_num(),
                ret
            );
            return false;
        }
        // The send marker: a zero-length RDMA WRITE on RC (as `ib_drain_sq`
        // posts), a SEND to the last AH used on UD. A UD QP that never sent
        // has nothing in its send queue to wait for.
        let send_marker = self.send_slots.last();
        let sq = match (send_marker, self.ud, last_ah) {
            (Some(m), false, _) => {
                let mut wr = bindings::ib_rdma_wr::default();
                wr.wr.opcode = bindings::IB_WR_RDMA_WRITE;
                // SAFETY: The marker is the last slot, never given to a
                // request (`book` has one slot less); it is not posted.
                match unsafe { self.post_marker_send(m, &mut wr.wr) } {
                    Err(ret) => self.driver_drain(ret, Queue::Send),
                    Ok(done) => done,
                }
            }
            (Some(m), true, Some(ah)) => {
                let mut wr = bindings::ib_ud_wr {
                    ah: ah.as_raw(),
                    ..Default::default()
                };
                wr.wr.opcode = bindings::IB_WR_SEND;
                // SAFETY: As above; the caller holds the AH until the QP
                // is destroyed, so even a marker that did not complete
                // names a live AH.
                unsafe { self.post_marker_send(m, &mut wr.wr) }.unwrap_or(false)
            }
            _ => true,
        };
        let rq = match self.recv_slots.last() {
            Some(m) => {
                let mut wr = bindings::ib_recv_wr::default();
                wr.__bindgen_anon_1.wr_cqe = m.cqe.get();
                m.state.store(SLOT_POSTED, Ordering::Release);
                let mut bad = ptr::null();
                // SAFETY: The QP is live; the marker has no SGE; its slot
                // is the last, never given to a request.
                let ret = unsafe { bindings::ib_post_recv(qp, &wr, &mut bad) };
                if ret != 0 {
                    pr_err!(
                        "QP {:#x} drain: posting the receive marker failed: {}\n",
                        self.qp_num(),
                        ret
                    );
                    self.driver_drain(ret, Queue::Recv)
                } else {
                    self.wait_marker(m, &self.recv_cq.cq, "receive")
                }
            }
            None => {
                if let Some(srq) = &self.srq {
                    self.drain_srq(srq);
                }
                true
            }
        };
        sq && rq
    }

    /// After a marker of ours on `queue` was refused with `ret`: drains
    /// that queue with the driver's drain function if the device has one,
    /// the QP is RC and `ret` is `EIO` (the device is in internal error);
    /// returns whether it did.
    fn driver_drain(&self, ret: i32, queue: Queue) -> bool {
        let dev = self.pd.device().as_raw();
        // SAFETY: The device is live; its ops are set before registration.
        let (drv_sq, drv_rq) = unsafe { ((*dev).ops.drain_sq, (*dev).ops.drain_rq) };
        let has = match queue {
            Queue::Send => drv_sq.is_some(),
            Queue::Recv => drv_rq.is_some(),
        };
        // A QP of an SRQ has no receive queue of its own to drain.
        let no_rq = queue == Queue::Recv && self.srq.is_some();
        if self.ud || no_rq || !has || ret != EIO.to_errno() {
            return false;
        }
        let _held = Cq::hold_direct(&self.send_cq.cq, &self.recv_cq.cq);
        // SAFETY: The QP is live and RC, and has its own receive queue if
        // `queue` is `Recv` (checked above). Its
        // device refused a post with `EIO`: the drivers with drain
        // functions (mlx4, mlx5) do so only in internal error
        // (`mlx5_ib_post_send`, `_mlx4_ib_post_send` and their receive
        // twins), where their drain ignores the result of its modify to ERR
        // and its marker post (`drain` set) is allowed and cannot find the
        // queue full (the QP has room for one request more than the
        // bookkeeping gives out). Its `handle_drain_completion` then waits,
        // with no time bound, for that marker, whose completion the
        // driver's poll makes in software in internal error
        // (`mlx5_ib_poll_sw_comp`, `mlx4_ib_poll_sw_comp`): on a direct CQ
        // its own `ib_process_cq_direct` loop, which runs only while this
        // task holds the CQ; otherwise the CQ's handler, which it calls.
        unsafe {
            match queue {
                Queue::Send => bindings::ib_drain_sq(self.qp.as_ptr()),
                Queue::Recv => bindings::ib_drain_rq(self.qp.as_ptr()),
            }
        };
        true
    }

    /// The receive side of the drain of a QP of an SRQ, which has no
    /// receive queue to put a marker on: as the verbs advise (and
    /// `__ib_drain_srq` does), waits for the QP's last receive
    /// (`IB_EVENT_QP_LAST_WQE_REACHED`, up to 5 s), then processes what a
    /// directly polled SRQ CQ holds, so that the completions of this QP
    /// are named by its number while it is still in the SRQ's table. The
    /// SRQ's slots are the SRQ's: nothing is freed under them either way.
    fn drain_srq(&self, srq: &Srq) {
        // SAFETY: The QP is live and in ERR; the core completes its
        // `srq_completion` on that event.
        if !unsafe { bindings::kverbs_qp_wait_last_wqe(self.qp.as_ptr(), 5000) } {
            pr_warn!(
                "QP {:#x} drain: no last-WQE-reached event in 5 s\n",
                self.qp_num()
            );
            return;
        }
        while srq.cq().process_direct(64) > 0 {}
    }

    /// Posts `wr`, signalled, with the marker slot `m`, and waits for it.
    /// Whether it came; the error of the post if it was refused.
    ///
    /// # Safety
    ///
    /// `m` must be a marker slot of this QP that is not posted; `wr` must be
    /// a valid send request for this QP, with no SGE, whose memory (an AH)
    /// lives until `m` is done.
    unsafe fn post_marker_send(
        &self,
        m: &Slot,
        wr: &mut bindings::ib_send_wr,
    ) -> core::result::Result<bool, i32> {
        wr.send_flags = bindings::IB_SEND_SIGNALED;
        wr.__bindgen_anon_1.wr_cqe = m.cqe.get();
        m.state.store(SLOT_POSTED, Ordering::Release);
        let mut bad = ptr::null();
        // SAFETY: The QP is live; the caller guarantees `wr`.
        let ret = unsafe { bindings::ib_post_send(self.qp.as_ptr(), wr, &mut bad) };
        if ret != 0 {
            pr_err!(
                "QP {:#x} drain: posting the send marker failed: {}\n",
                self.qp_num(),
                ret
            );
            return Err(ret);
        }
        Ok(self.wait_marker(m, &self.send_cq.cq, "send"))
    }

    /// Waits up to 5 s for the marker `m` on `cq`. Signals do not end the
    /// wait: a task being killed drops its QPs, and a wait that returned at
    /// once would spin (and, with the flush's worker on the same CPU, never
    /// see it), fail the drain and leak.
    fn wait_marker(&self, m: &Slot, cq: &Cq, queue: &str) -> bool {
        let cancel = Cancel::new();
        let deadline = crate::Deadline::new(5000, &cancel);
        let since = crate::now_ns();
        while m.state.load(Ordering::Acquire) != SLOT_DONE && deadline.left_ns() > 0 {
            let slice = (deadline.left_ns() / 1_000_000).clamp(1, 100) as u32;
            cq.wait_step_as(&m.state, SLOT_DONE, since, slice, false);
        }
        if m.state.load(Ordering::Acquire) != SLOT_DONE {
            pr_err!(
                "QP {:#x} drain: the {} queue did not flush in 5 s\n",
                self.qp_num(),
                queue
            );
            return false;
        }
        true
    }
}
