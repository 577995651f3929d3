// SPDX-License-Identifier: GPL-2.0

//! The `srq` file's control string.

use super::proto::HDR;
use crate::conn::Role;
use crate::control::ControlConfig;
use crate::options::Opts;
use crate::report::Report;
use core::fmt::Write;
use kernel::prelude::*;
use kverbs::{device::Device, tcp::Ipv4};

/// The port of srq.c.
pub(super) const PORT: u16 = 51216;

/// The largest buffer of a side: `max_wr` messages of `size` bytes.
pub(super) const MAX_BUF: usize = 16 << 20;

/// The protocol the peer speaks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Sequence numbers, QP indexes, the go message (kverbs, srq_peer).
    Kverbs,
    /// The manual's srq.c: zeroed messages, a `size`-byte reply on the
    /// first connection.
    Manual,
}

impl Flow {
    pub(super) fn name(self) -> &'static str {
        match self {
            Flow::Kverbs => "kverbs",
            Flow::Manual => "manual",
        }
    }
}

pub(crate) struct Config {
    pub(super) role: Role,
    pub(super) flow: Flow,
    pub(super) addr: Option<Ipv4>,
    pub(super) port: u16,
    pub(super) qps: u32,
    pub(super) max_wr: u32,
    pub(super) count: u32,
    pub(super) size: usize,
    pub(super) srq_limit: u32,
    pub(super) timeout_ms: u32,
}

impl ControlConfig for Config {
    fn parse(dev: &Device, input: &[u8]) -> Result<Self> {
        let mut cfg = Config {
            role: Role::Server,
            flow: Flow::Kverbs,
            addr: None,
            port: PORT,
            qps: 4,
            max_wr: 64,
            count: 100,
            size: 100_000,
            srq_limit: 0,
            timeout_ms: 5000,
        };
        let mut have_role = false;
        let o = Opts::new(dev, "srq");
        for (key, val) in o.options(input)? {
            let v = o.need(key, val)?;
            let num = |min, max| o.num_in::<u64>(key, v, min, max);
            match key {
                "role" => {
                    cfg.role = o.pick(
                        key,
                        v,
                        &[("server", Role::Server), ("client", Role::Client)],
                    )?;
                    have_role = true;
                }
                "flow" => {
                    cfg.flow = match v {
                        "kverbs" => Flow::Kverbs,
                        "manual" => Flow::Manual,
                        other => {
                            pr_warn!(
                                "{}: srq: unknown flow '{}' (kverbs or manual)\n",
                                dev.name(),
                                other
                            );
                            return Err(EINVAL);
                        }
                    };
                }
                "addr" => {
                    cfg.addr = Some(o.addr(v)?);
                }
                "port" => cfg.port = num(1, 65535)? as u16,
                "qps" => cfg.qps = num(1, 16)? as u32,
                "max_wr" => cfg.max_wr = num(2, 1024)? as u32,
                "count" => cfg.count = num(1, 1_000_000)? as u32,
                "size" => cfg.size = num(HDR as u64, 1 << 20)? as usize,
                "srq_limit" => cfg.srq_limit = num(0, 1023)? as u32,
                "timeout_ms" => cfg.timeout_ms = num(1, 600_000)? as u32,
                _ => return Err(o.unknown_key(key)),
            }
        }
        if !have_role {
            pr_warn!("{}: srq: role= is missing (server or client)\n", dev.name());
            return Err(EINVAL);
        }
        if cfg.role == Role::Client && cfg.addr.is_none() {
            pr_warn!("{}: srq: role=client needs addr=\n", dev.name());
            return Err(EINVAL);
        }
        if cfg.max_wr as usize * cfg.size > MAX_BUF {
            pr_warn!(
                "{}: srq: max_wr x size = {} bytes, more than {}\n",
                dev.name(),
                cfg.max_wr as usize * cfg.size,
                MAX_BUF
            );
            return Err(ERANGE);
        }
        if cfg.srq_limit >= cfg.max_wr {
            pr_warn!(
                "{}: srq: srq_limit={} must be below max_wr={}\n",
                dev.name(),
                cfg.srq_limit,
                cfg.max_wr
            );
            return Err(ERANGE);
        }
        Ok(cfg)
    }

    fn describe(&self, rep: &mut Report) {
        let _ = writeln!(
            rep,
            "config: role={} flow={} qps={} max_wr={} count={} size={} srq_limit={} timeout_ms={}",
            if self.role == Role::Server {
                "server"
            } else {
                "client"
            },
            self.flow.name(),
            self.qps,
            self.max_wr,
            self.count,
            self.size,
            self.srq_limit,
            self.timeout_ms
        );
    }
}
