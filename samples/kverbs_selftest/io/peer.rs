// SPDX-License-Identifier: GPL-2.0

//! The peer of an `io` disk: a task on the unbound workqueue that answers
//! each capsule on its own QP, moving the data by RDMA READ or WRITE for
//! a disk of `Mode::Rdma` (see `io.rs`).

use super::{bump, Dev, Inv, CAPSULE, RESPONSE};
use crate::common::take_one;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use kernel::{
    new_condvar, new_mutex,
    prelude::*,
    sync::{Arc, CondVar, Mutex},
};
use kverbs::{
    cq::Cq,
    dma::DmaBuf,
    pd::Pd,
    qp::{Cancel, Qp, RemoteBuf, Rts, SendOp, Waited, WrId},
};

/// What the control file shares with the peer task.
#[pin_data]
pub(super) struct PeerCtl {
    pub(super) stop: AtomicBool,
    pub(super) bad_cid: AtomicU32,
    pub(super) fail: AtomicU32,
    quit: Cancel,
    /// Set by the task as it ends, its objects dropped.
    #[pin]
    exited: Mutex<bool>,
    #[pin]
    ended: CondVar,
}

impl PeerCtl {
    pub(super) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(PeerCtl {
                stop: AtomicBool::new(false),
                bad_cid: AtomicU32::new(0),
                fail: AtomicU32::new(0),
                quit: Cancel::new(),
                exited <- new_mutex!(false),
                ended <- new_condvar!(),
            }),
            GFP_KERNEL,
        )
    }

    /// Tells the task to end, and waits until it has: within its wait's
    /// 100 ms and its QP's drain. Not with a sleep that a signal of the
    /// writer ends (`msleep_interruptible`: seen spinning 10 s).
    pub(super) fn stop(&self) {
        self.quit.close();
        let mut exited = self.exited.lock();
        while !*exited {
            self.ended.wait(&mut exited);
        }
    }
}

/// The peer: answers capsules until told to quit.
pub(super) struct Peer {
    pub(super) qp: Qp<Rts>,
    pub(super) rbuf: Arc<DmaBuf>,
    pub(super) sbuf: Arc<DmaBuf>,
    /// `Mode::Rdma`: the disk's data, and how the peer answers.
    pub(super) data: Option<(Arc<DmaBuf>, Inv)>,
    pub(super) depth: usize,
    pub(super) ctl: Arc<PeerCtl>,
    pub(super) dev: Arc<Dev>,
    pub(super) _cq: Cq,
    pub(super) _pd: Pd,
}

impl Peer {
    pub(super) fn run(self) {
        let mut ids: KVec<Option<WrId>> = KVec::new();
        for i in 0..self.depth {
            let id = self.qp.post_recv(&self.rbuf, i * CAPSULE, CAPSULE).ok();
            if ids.push(id, GFP_KERNEL).is_err() {
                break;
            }
        }
        let mut next = 0;
        // `Inv::Swap`: the first of two capsules, answered with the second.
        let mut held: Option<[u8; 32]> = None;
        while !self.ctl.quit.is_cancelled() && next < ids.len() {
            let Some(id) = ids[next].take() else {
                break;
            };
            let wc = match self.qp.wait_for(id, 100, &self.ctl.quit) {
                Ok(Waited::Pending(id)) => {
                    ids[next] = Some(id);
                    continue;
                }
                Ok(Waited::Done(wc)) => wc,
                Err(_) => break,
            };
            if wc.result().is_err() {
                break;
            }
            let mut cap = [0u8; 32];
            if self.rbuf.read(next * CAPSULE, &mut cap).is_err() {
                break;
            }
            if self.ctl.stop.load(Ordering::Relaxed) {
                bump(&self.dev.c.unanswered);
            } else if self.serve(&cap, &mut held).is_err() {
                break;
            }
            ids[next] = self.qp.post_recv(&self.rbuf, next * CAPSULE, CAPSULE).ok();
            next = (next + 1) % ids.len();
        }
        // The QP, its buffers, CQ and PD go here (drained), then the task
        // says it has ended.
        let ctl = self.ctl.clone();
        drop(self);
        *ctl.exited.lock() = true;
        ctl.ended.notify_all();
    }

    /// Moves the data of the capsule `cap` (`Mode::Rdma`), and answers it
    /// (with `Inv::Swap`, with the one `held`).
    fn serve(&self, cap: &[u8; 32], held: &mut Option<[u8; 32]>) -> Result {
        let Some((data, inv)) = &self.data else {
            return self.answer(cap, None);
        };
        let word = |a: usize, n: usize| {
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&cap[a..a + n]);
            u64::from_le_bytes(b)
        };
        let op = cap[4];
        if op > 1 {
            return self.answer(cap, None);
        }
        let (off, len, rkey, addr) = (
            word(8, 8) as usize * 512,
            word(16, 4) as u32,
            word(20, 4) as u32,
            word(24, 8),
        );
        let remote = RemoteBuf { addr, rkey, len };
        let op = if op == 1 {
            SendOp::Read(remote)
        } else {
            SendOp::Write(remote)
        };
        let id = self.qp.post_send(op, data, off, len as usize, true)?;
        self.qp.wait(id, 5000, &self.ctl.quit)?.result()?;
        match inv {
            Inv::Remote => self.answer(cap, Some(rkey)),
            Inv::Local => self.answer(cap, None),
            Inv::Swap => match held.take() {
                None => {
                    *held = Some(*cap);
                    Ok(())
                }
                Some(first) => {
                    let first_rkey =
                        u32::from_le_bytes([first[20], first[21], first[22], first[23]]);
                    self.answer(&first, Some(rkey))?;
                    self.answer(cap, Some(first_rkey))
                }
            },
        }
    }

    /// Answers the capsule that begins with `cap`, with a SEND that
    /// invalidates `inv` if any.
    fn answer(&self, cap: &[u8; 32], inv: Option<u32>) -> Result {
        let mut rsp = [0u8; RESPONSE];
        rsp[0..4].copy_from_slice(&cap[0..4]);
        if take_one(&self.ctl.bad_cid) {
            bump(&self.dev.c.bad_cids);
            let cid = u16::from_le_bytes([cap[0], cap[1]]).wrapping_add(0x8000);
            rsp[0..2].copy_from_slice(&cid.to_le_bytes());
        } else if take_one(&self.ctl.fail) {
            bump(&self.dev.c.fails);
            rsp[4] = 1;
        }
        self.sbuf.write(0, &rsp)?;
        let op = match inv {
            Some(k) => SendOp::SendWithInv(k),
            None => SendOp::Send,
        };
        let id = self.qp.post_send(op, &self.sbuf, 0, RESPONSE, true)?;
        self.qp.wait(id, 5000, &self.ctl.quit)?.result()?;
        bump(&self.dev.c.answered);
        Ok(())
    }
}
