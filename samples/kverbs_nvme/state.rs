// SPDX-License-Identifier: GPL-2.0

//! A controller's state, as nvme-core's (drivers/nvme/host/core.c,
//! `nvme_change_ctrl_state`; those this host has), and what starts its
//! error recovery (host/rdma.c, `nvme_rdma_error_recovery`): a lost
//! connection, a failed Keep Alive, an error of the I/O queue, a request
//! timed out. The recovery itself is `recovery.rs`'s.

use crate::io::IoPath;
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use kernel::{prelude::*, sync::Arc};
use kverbs::{delayed::Delayed, qp::Cancel, IrqLock};

/// A controller's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum State {
    /// Being brought up the first time: an error fails the connect (the
    /// I/O queue shut down, what it carries ended with `EIO`).
    New = 0,
    /// Up: requests go to the I/O queue.
    Live = 1,
    /// An error came: the queues are being torn down; requests are given
    /// back busy (blk-mq sends them again later).
    Resetting = 2,
    /// Torn down, reconnecting every `reconnect_delay`: requests given
    /// back busy.
    Connecting = 3,
    /// Being deleted: requests go to the I/O queue while it is there,
    /// else end with `EIO`; an error shuts it down.
    Deleting = 4,
}

impl State {
    fn from_u8(v: u8) -> State {
        match v {
            0 => State::New,
            1 => State::Live,
            2 => State::Resetting,
            3 => State::Connecting,
            _ => State::Deleting,
        }
    }

    /// Its name in the controllers file.
    pub(crate) fn name(self) -> &'static str {
        match self {
            State::New => "new",
            State::Live => "connected",
            State::Resetting => "resetting",
            State::Connecting => "connecting",
            State::Deleting => "deleting",
        }
    }
}

/// What started an error recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Why {
    None = 0,
    /// The target disconnected a queue.
    Disconnected = 1,
    /// A Keep Alive failed.
    KeepAlive = 2,
    /// The I/O queue told of an error.
    IoError = 3,
    /// A request timed out.
    Timeout = 4,
}

impl Why {
    fn from_u8(v: u8) -> Why {
        match v {
            1 => Why::Disconnected,
            2 => Why::KeepAlive,
            3 => Why::IoError,
            4 => Why::Timeout,
            _ => Why::None,
        }
    }

    pub(crate) fn msg(self) -> &'static str {
        match self {
            Why::None => "no error",
            Why::Disconnected => "the target disconnected",
            Why::KeepAlive => "a Keep Alive failed",
            Why::IoError => "an error of the I/O queue",
            Why::Timeout => "a request timed out",
        }
    }
}

/// What a controller's parts share: its state, the timer of its recovery,
/// its I/O path (to shut down on an error out of recovery) and the token
/// of its association being connected.
///
/// The timer's handler and the I/O path hold this: [`Status::delete`]
/// takes both out, which every deletion makes.
#[pin_data]
pub(crate) struct Status {
    state: AtomicU8,
    why: AtomicU8,
    /// When the controller stopped being live (ns): `ctrl_loss_tmo`
    /// counts from it.
    lost_at: AtomicU64,
    #[pin]
    recovery: IrqLock<Option<Delayed>>,
    #[pin]
    path: IrqLock<Option<Arc<IoPath>>>,
    #[pin]
    cancel: IrqLock<Option<Arc<Cancel>>>,
}

impl Status {
    /// A controller being brought up.
    pub(crate) fn new() -> Result<Arc<Status>> {
        Arc::pin_init(
            pin_init!(Status {
                state: AtomicU8::new(State::New as u8),
                why: AtomicU8::new(Why::None as u8),
                lost_at: AtomicU64::new(0),
                recovery <- IrqLock::new(None),
                path <- IrqLock::new(None),
                cancel <- IrqLock::new(None),
            }),
            GFP_KERNEL,
        )
    }

    pub(crate) fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Moves the state from `from` to `to`; whether it was `from`.
    pub(crate) fn set(&self, from: State, to: State) -> bool {
        self.state
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// What started the last recovery.
    pub(crate) fn why(&self) -> Why {
        Why::from_u8(self.why.load(Ordering::Relaxed))
    }

    /// The milliseconds since the controller stopped being live.
    pub(crate) fn lost_ms(&self) -> u64 {
        kverbs::now_ns().saturating_sub(self.lost_at.load(Ordering::Acquire)) / 1_000_000
    }

    /// Gives the recovery its timer, and the controller its I/O path (if
    /// it has I/O queues); once, before the controller is live.
    pub(crate) fn attach(&self, recovery: Delayed, path: Option<Arc<IoPath>>) {
        let old = self.recovery.with(|r| r.replace(recovery));
        let old_path = self.path.with(|p| core::mem::replace(p, path));
        drop((old, old_path));
    }

    /// The token of the association being made: closed by an error
    /// before it is the controller's ([`Status::error`]: the bring-up or
    /// the reconnect then refuses it) and by [`Status::delete`] (its waits
    /// end at once). `ECANCELED` if the controller is being deleted
    /// already.
    pub(crate) fn set_cancel(&self, c: Option<Arc<Cancel>>) -> Result {
        let (old, deleting) = self.cancel.with(|s| {
            let old = core::mem::replace(s, c);
            let deleting = self.state() == State::Deleting;
            if deleting {
                if let Some(c) = s {
                    c.close();
                }
            }
            (old, deleting)
        });
        drop(old);
        if deleting {
            return Err(kverbs::errno::ecanceled());
        }
        Ok(())
    }

    /// Makes the controller live, from `from`, if its association was not
    /// refused meanwhile (its token, `gone`, still open): whether it is.
    /// The association is then the controller's: an error no longer
    /// closes its token but starts a recovery.
    pub(crate) fn go_live(&self, from: State, gone: &Cancel) -> bool {
        let old = self.cancel.with(|s| {
            if gone.is_closed() || !self.set(from, State::Live) {
                return None;
            }
            Some(s.take())
        });
        old.is_some()
    }

    /// An error, from any context: a live controller starts its recovery
    /// (resetting, the recovery's timer fired now); the association of
    /// one being brought up or reconnected is refused (its token closed);
    /// one being brought up or deleted shuts its I/O queue down (its
    /// requests end with `EIO`); one resetting has its recovery under way.
    pub(crate) fn error(&self, why: Why) {
        loop {
            if self.set(State::Live, State::Resetting) {
                self.lost_at.store(kverbs::now_ns(), Ordering::Release);
                self.why.store(why as u8, Ordering::Relaxed);
                self.recovery.with(|r| {
                    if let Some(r) = r {
                        r.arm(0);
                    }
                });
                return;
            }
            // Under the token's lock, which `go_live` takes: either the
            // association is refused here, or it went live first and the
            // error starts a recovery (again round).
            let refused = self.cancel.with(|s| match self.state() {
                State::New | State::Connecting => {
                    if let Some(c) = s {
                        c.close();
                    }
                    true
                }
                State::Live => false,
                State::Resetting | State::Deleting => true,
            });
            if refused {
                break;
            }
        }
        if matches!(self.state(), State::New | State::Deleting) {
            if let Some(p) = self.path.with(|p| p.clone()) {
                p.kill();
            }
        }
    }

    /// Deleting from here on: requests given back busy come back and end
    /// with `EIO` once the I/O queue is gone, an error shuts the I/O queue
    /// down; the association being connected gives up. Takes the timer
    /// out (its drop waits for a call in progress, unless made by one):
    /// the reference its handler holds to this goes.
    pub(crate) fn delete(&self) {
        self.state.store(State::Deleting as u8, Ordering::Release);
        self.cancel.with(|s| {
            if let Some(c) = s {
                c.close();
            }
        });
        let r = self.recovery.with(|r| r.take());
        drop(r);
    }
}

/// Holds a controller's [`Status`]: dropped (the connect's, then the
/// controller's, after its disks), it deletes it and takes the I/O path
/// out, whose reference to it goes.
pub(crate) struct StatusRef(pub(crate) Arc<Status>);

impl Drop for StatusRef {
    fn drop(&mut self) {
        self.0.delete();
        let p = self.0.path.with(|p| p.take());
        drop(p);
    }
}
impl core::ops::Deref for StatusRef {
    type Target = Status;

    fn deref(&self) -> &Status {
        &self.0
    }
}
