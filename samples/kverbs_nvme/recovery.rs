// SPDX-License-Identifier: GPL-2.0

//! A controller's error recovery, as the C host's (drivers/nvme/host/rdma.c,
//! `nvme_rdma_error_recovery_work`, `nvme_rdma_reconnect_ctrl_work`,
//! `nvme_rdma_reconnect_or_remove`; fabrics.c, `nvmf_should_reconnect`),
//! without a quiesce: `queue_rq` gives requests back busy while the
//! controller is not live (`state.rs`).
//!
//! An error moves a live controller to resetting and fires the timer of
//! its recovery, whose calls are, by the state:
//!
//! - resetting: the association taken out of the controller (its token
//!   closed: a Keep Alive under way ends), the I/O queue shut down with
//!   what it carries requeued (`Carried::Retry`, a retry each), the
//!   association dropped; connecting, and the next call after
//!   `reconnect_delay`;
//! - connecting: a new association (admin queue, bring-up, keep-alive, the
//!   I/O queue connected in the same I/O path: the disks and tags stay);
//!   its namespaces must be the same (else the controller is deleted),
//!   then it is the controller's and the controller is live. A failed
//!   attempt is tried again after `reconnect_delay`.
//!
//! Past `ctrl_loss_tmo` since the error (-1: never), the controller is
//! deleted: its disks go, what they had ends with `EIO`. A deletion
//! meanwhile (a disconnect, the device removed, rmmod) wins: the state is
//! deleting, an attempt's token is closed, and the timer's drop waits for
//! the call under way.

use crate::ctrl::Info;
use crate::options::Options;
use crate::state::{State, Status};
use crate::{find, take, Ctrl, Ctrls, Made};
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    delayed::{Delayed, DelayedHandler},
    io::Carried,
};

/// The timer of controller `instance`'s recovery.
pub(crate) fn timer(ctrls: &Arc<Ctrls>, instance: u32, status: &Arc<Status>) -> Result<Delayed> {
    Delayed::new(Arc::new(
        Recovery {
            ctrls: ctrls.clone(),
            instance,
            status: status.clone(),
        },
        GFP_KERNEL,
    )?)
}

struct Recovery {
    ctrls: Arc<Ctrls>,
    instance: u32,
    status: Arc<Status>,
}

impl DelayedHandler for Recovery {
    fn run(&self) -> Option<u32> {
        match self.status.state() {
            State::Resetting => self.teardown(),
            State::Connecting => self.reconnect(),
            _ => None,
        }
    }
}

/// Whether `a` and `b` have the same namespaces (IDs, sizes, blocks).
fn same_namespaces(a: &Info, b: &Info) -> bool {
    a.namespaces.len() == b.namespaces.len()
        && a.namespaces
            .iter()
            .zip(b.namespaces.iter())
            .all(|(x, y)| x.nsid == y.nsid && x.blocks == y.blocks && x.block_size == y.block_size)
}

/// What a reconnect's result became.
enum Outcome {
    Live(u16),
    /// The target disconnected the new association already.
    Lost,
    /// Deleted meanwhile, or not in the list any more.
    Gone,
    /// Taken out to be deleted: other namespaces.
    Changed,
}

impl Recovery {
    fn teardown(&self) -> Option<u32> {
        let (assoc, path, opts) = {
            let mut list = self.ctrls.list.lock();
            let c = find(&mut list, self.instance)?;
            (c.assoc.take(), c.path.clone(), c.opts)
        };
        pr_info!(
            "kvnvme{}: {}: resetting\n",
            self.instance,
            self.status.why().msg()
        );
        if let Some(a) = &assoc {
            a.core.gone.close();
        }
        if let Some(p) = path {
            let s = p.take_down(Carried::Retry);
            pr_info!(
                "kvnvme{}: I/O queues down: {} requests requeued, {} ended\n",
                self.instance,
                s.requeued_by_shutdown,
                s.ended_by_shutdown
            );
        }
        // Outside the list's lock: its queues' drops wait for their
        // drains, their sinks take the lock.
        drop(assoc);
        if !self.status.set(State::Resetting, State::Connecting) {
            return None;
        }
        self.again(&opts)
    }

    /// After a teardown or a failed attempt: the delay of the next
    /// attempt, or the controller deleted once `ctrl_loss_tmo` passed.
    fn again(&self, opts: &Options) -> Option<u32> {
        let tmo = opts.ctrl_loss_tmo;
        if tmo >= 0 && self.status.lost_ms() >= u64::from(tmo.unsigned_abs()) * 1000 {
            let c = take(&mut self.ctrls.list.lock(), self.instance);
            if let Some(c) = c {
                pr_info!(
                    "kvnvme{}: not live again within ctrl_loss_tmo {} s: controller deleted\n",
                    self.instance,
                    tmo
                );
                // Its timer, dropped from its own call, does not wait.
                drop(c);
            }
            return None;
        }
        pr_info!(
            "kvnvme{}: reconnecting in {} s\n",
            self.instance,
            opts.reconnect_delay
        );
        Some(opts.reconnect_delay.saturating_mul(1000))
    }

    fn reconnect(&self) -> Option<u32> {
        let (opts, path) = {
            let mut list = self.ctrls.list.lock();
            let c = find(&mut list, self.instance)?;
            (c.opts, c.path.clone())
        };
        let made = match Ctrls::associate(
            &self.ctrls,
            self.instance,
            &opts,
            &self.status,
            path.as_ref(),
        ) {
            Ok(m) => m,
            Err(e) => {
                pr_err!("kvnvme{}: reconnect: {}\n", self.instance, e);
                if let Some(p) = &path {
                    p.shutdown();
                }
                return self.again(&opts);
            }
        };
        let (outcome, left, deleted) = self.install(made);
        // Dropped outside the list's lock.
        drop(left);
        match outcome {
            Outcome::Live(cntlid) => {
                pr_info!(
                    "kvnvme{}: reconnected: controller {}, live\n",
                    self.instance,
                    cntlid
                );
            }
            Outcome::Lost => {
                pr_err!(
                    "kvnvme{}: reconnect: the target disconnected\n",
                    self.instance
                );
                if let Some(p) = &path {
                    p.shutdown();
                }
                return self.again(&opts);
            }
            Outcome::Gone => {
                if let Some(p) = &path {
                    p.shutdown();
                }
            }
            Outcome::Changed => {
                pr_err!(
                    "kvnvme{}: reconnect: the namespaces changed: controller deleted\n",
                    self.instance
                );
                drop(deleted);
            }
        }
        None
    }

    /// Makes `made` the controller's association, and the controller live;
    /// what is left to drop (outside the list's lock): the association
    /// not taken, the controller taken out to be deleted.
    fn install(&self, made: Made) -> (Outcome, Option<Made>, Option<Ctrl>) {
        let mut list = self.ctrls.list.lock();
        let Some(c) = find(&mut list, self.instance) else {
            return (Outcome::Gone, Some(made), None);
        };
        if !same_namespaces(&c.info, &made.info) {
            let c = take(&mut list, self.instance);
            return (Outcome::Changed, Some(made), c);
        }
        // Under the list's lock, which the sinks take: a disconnect told
        // before this sees the controller connecting (and its token
        // closed: refused below), one after sees it live.
        if made.assoc.device_removed() {
            return (Outcome::Lost, Some(made), None);
        }
        if !self
            .status
            .go_live(State::Connecting, &made.assoc.core.gone)
        {
            return match self.status.state() {
                State::Connecting => (Outcome::Lost, Some(made), None),
                _ => (Outcome::Gone, Some(made), None),
            };
        }
        let cntlid = made.info.cntlid;
        c.device = made.assoc.device_guid();
        c.assoc = Some(made.assoc);
        c.info = made.info;
        c.reconnects += 1;
        (Outcome::Live(cntlid), None, None)
    }
}
