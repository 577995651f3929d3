// SPDX-License-Identifier: GPL-2.0

//! The `rc` file's control string: its options, their defaults and the
//! roles they allow.

use super::atomics::Atomics;
use crate::conn::Role;
use crate::control::ControlConfig;
use crate::options::Opts;
use crate::report::Report;
use core::fmt::Write;
use kernel::prelude::*;
use kverbs::{cq::PollCtx, device::Device, device::Mtu, tcp::Ipv4};

/// rping's default port, and its buffer size limits.
pub(super) const RPING_PORT: u16 = 7174;
pub(super) const RPING_MIN_SIZE: usize = 26;
pub(super) const RPING_MAX_SIZE: usize = 65535;
/// The largest buffer a run uses.
pub(super) const MAX_SIZE: usize = 8 << 20;

/// The buffer of RDMA_RC_example: a 20-character message and its NUL.
pub(super) const MSG_SIZE: usize = 21;

/// What `role=` names: the role, and whether rdma_cm connects.
const ROLES: [(&str, (Role, bool)); 5] = [
    ("loopback", (Role::Loopback, false)),
    ("server", (Role::Server, false)),
    ("client", (Role::Client, false)),
    ("cm_server", (Role::Server, true)),
    ("cm_client", (Role::Client, true)),
];

/// A parsed control string.
pub(crate) struct Config {
    pub(crate) role: Role,
    /// Connected by the RDMA connection manager, as rping is
    /// (`role=cm_server`, `role=cm_client`), not over TCP.
    pub(crate) cm: bool,
    pub(crate) addr: Option<Ipv4>,
    pub(crate) port: u16,
    pub(crate) gid_idx: Option<u32>,
    pub(crate) size: usize,
    pub(crate) iters: u32,
    pub(crate) mtu: Mtu,
    pub(crate) validate: bool,
    pub(crate) imm: bool,
    /// Keep the invalidated registration's QP and buffer until the peer
    /// has probed the stale rkey, then check the buffer did not change.
    pub(crate) linger: bool,
    /// Fetch-and-adds the client does on the server's buffer, followed by
    /// two compare-and-swaps; 0: none, and no remote atomic access.
    pub(crate) atomics: u32,
    pub(crate) poll: PollCtx,
    pub(crate) timeout_ms: u32,
}

impl Config {
    /// The role as `role=` names it.
    pub(crate) fn role_name(&self) -> &'static str {
        match (self.cm, self.role) {
            (true, Role::Server) => "cm_server",
            (true, _) => "cm_client",
            (false, role) => role.name(),
        }
    }

    pub(super) fn defaults() -> Self {
        Config {
            role: Role::Loopback,
            cm: false,
            addr: None,
            port: 19875,
            gid_idx: None,
            size: MSG_SIZE,
            iters: 1,
            mtu: Mtu::MTU_256,
            validate: false,
            imm: false,
            linger: false,
            atomics: 0,
            poll: PollCtx::Softirq,
            timeout_ms: 5000,
        }
    }
}

impl ControlConfig for Config {
    fn parse(dev: &Device, input: &[u8]) -> Result<Self> {
        let mut cfg = Config::defaults();
        let mut have_role = false;
        let (mut port_set, mut size_set) = (false, false);
        let o = Opts::new(dev, "rc");
        for (key, val) in o.options(input)? {
            let need = || o.need(key, val);
            match key {
                "role" => {
                    (cfg.role, cfg.cm) = o.pick(key, need()?, &ROLES)?;
                    have_role = true;
                }
                "addr" => {
                    cfg.addr = Some(o.addr(need()?)?);
                }
                "port" => {
                    cfg.port = o.num_in(key, need()?, 1, 65535)?;
                    port_set = true;
                }
                "gid_idx" => cfg.gid_idx = Some(o.num_in(key, need()?, 0, 255)?),
                "size" => {
                    cfg.size = o.num_in(key, need()?, 1, MAX_SIZE as u64)?;
                    size_set = true;
                }
                "iters" => cfg.iters = o.num_in(key, need()?, 1, 1_000_000)?,
                "atomics" => cfg.atomics = o.num_in(key, need()?, 0, 100_000)?,
                "timeout_ms" => cfg.timeout_ms = o.num_in(key, need()?, 1, 600_000)?,
                "mtu" => {
                    cfg.mtu = o.mtu(key, need()?)?;
                }
                "poll" => {
                    cfg.poll = o.poll(need()?)?;
                }
                "validate" | "imm" | "linger" => {
                    o.no_value(key, val)?;
                    match key {
                        "imm" => cfg.imm = true,
                        "linger" => cfg.linger = true,
                        _ => cfg.validate = true,
                    }
                }
                _ => return Err(o.unknown_key(key)),
            }
        }
        if !have_role {
            pr_warn!(
                "{}: rc: role= is missing (loopback, server or client)\n",
                dev.name()
            );
            return Err(EINVAL);
        }
        if cfg.role == Role::Client && cfg.addr.is_none() {
            pr_warn!("{}: rc: role={} needs addr=\n", dev.name(), cfg.role_name());
            return Err(EINVAL);
        }
        if cfg.atomics > 0 && (cfg.size < 8 || cfg.cm) {
            pr_warn!(
                "{}: rc: atomics needs role=loopback, server or client and size >= 8\n",
                dev.name()
            );
            return Err(EINVAL);
        }
        if cfg.linger && (cfg.role == Role::Loopback || cfg.cm) {
            pr_warn!(
                "{}: rc: linger needs role=server or role=client (a peer to probe the rkey)\n",
                dev.name()
            );
            return Err(EINVAL);
        }
        if cfg.cm {
            // rping's defaults and limits.
            if !port_set {
                cfg.port = RPING_PORT;
            }
            if !size_set {
                cfg.size = 64;
            }
            if !(RPING_MIN_SIZE..=RPING_MAX_SIZE).contains(&cfg.size) {
                pr_warn!(
                    "{}: rc: role={} takes size={}..{}, as rping does\n",
                    dev.name(),
                    cfg.role_name(),
                    RPING_MIN_SIZE,
                    RPING_MAX_SIZE
                );
                return Err(ERANGE);
            }
        }
        Ok(cfg)
    }

    fn describe(&self, rep: &mut Report) {
        let _ = writeln!(
            rep,
            "config: role={} size={} iters={} mtu={} poll={} timeout_ms={}{}{}{}{}",
            self.role_name(),
            self.size,
            self.iters,
            self.mtu.bytes(),
            self.poll.name(),
            self.timeout_ms,
            if self.validate { " validate" } else { "" },
            if self.imm { " imm" } else { "" },
            if self.linger { " linger" } else { "" },
            Atomics(self.atomics)
        );
    }
}
