// SPDX-License-Identifier: GPL-2.0

//! The SRQ example of the RDMA Aware Networks Programming User Manual
//! (srq.c), over rdma_cm (RDMA_PS_TCP): the `srq` control file.
//!
//! The server has one shared receive queue of `max_wr` receives of `size`
//! bytes, one receive CQ, and accepts `qps` connections whose QPs all take
//! their receives from it. The client opens `qps` connections and SENDs
//! `count` messages of `size` bytes round-robin over them, at most `max_wr`
//! outstanding: a round. When the server has received a round it reposts
//! the receives and SENDs one "go" message back on the QP of the round's
//! last receive; the client goes on with the next round when it has it.
//! Each message starts with its sequence number and the index of the QP it
//! was sent on (two little-endian u32); the server checks that every
//! sequence number came once, in order on each QP, and reports how many
//! receives each QP number got (`wc.qp_num`). With `srq_limit=<n>` the
//! server arms the SRQ limit each round: `IB_EVENT_SRQ_LIMIT_REACHED` comes
//! once fewer than `n` receives remain (reported, and in `events`).
//!
//! `flow=manual` speaks the manual's srq.c as it is instead, with a peer
//! that is the manual's program: its messages carry no header (zeroed
//! payload), its client SENDs one message at a time and waits for each,
//! and its server answers a round with one message of `size` bytes on the
//! first accepted connection. The server then checks the sizes, the counts
//! and that receive `k` of the run came on connection `k % qps` (the
//! client's round-robin, one message at a time); the client that each
//! reply has `size` bytes and came on its first connection. The flow is an
//! option, not detected: message 0 of both flows starts with eight zero
//! bytes, and a kverbs peer that lost its headers must fail, not pass as
//! the manual's.

mod client;
mod config;
mod proto;
mod server;

use crate::conn::cm_device_check;
use crate::conn::Role;
use crate::control::{Example, Run};
use crate::events::EventLog;
use config::Config;
use kernel::{prelude::*, sync::Arc};

/// The `srq` control file's example: its SRQ's events go to the device's
/// `events` ring.
pub(crate) struct SrqExample {
    pub(crate) log: Arc<EventLog>,
}

impl Example for SrqExample {
    const NAME: &'static str = "srq";
    type Config = Config;

    fn run(&self, cfg: &Config, ctx: Run<'_>) -> Result {
        cm_device_check(ctx.dev, "srq", ctx.rep)?;
        // The control string names no other role.
        match cfg.role {
            Role::Server => server::server(&self.log, cfg, ctx),
            Role::Client | Role::Loopback => client::client(cfg, ctx),
        }
    }
}
