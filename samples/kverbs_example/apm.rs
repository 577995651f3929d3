// SPDX-License-Identifier: GPL-2.0

//! The path migration example of the RDMA Aware Networks Programming User
//! Manual (apm.c), over rdma_cm: the `apm` control file.
//!
//! After connecting, each side loads the current path as the alternate
//! path and asks the HCA to arm it (`path_mig_state` REARM, through
//! [`Qp::load_alt_path`]); the two exchange `count` messages (the client
//! sends, the server echoes), and the client migrates by hand after
//! `migrate_after` of them ([`Qp::migrate`], MIGRATED). The QP's events
//! (`IB_EVENT_PATH_MIG`, `IB_EVENT_PATH_MIG_ERR`) are counted, reported
//! and kept in `events`.
//!
//! Where no port can migrate paths -- no `IB_DEVICE_AUTO_PATH_MIG`, or a
//! RoCE port: the RDMA core loads alternate paths on InfiniBand only, so
//! rxe, which advertises the capability, cannot -- the run says so and
//! ends with EOPNOTSUPP before it connects.

use crate::conn::{cm_device_check, cm_listen, cm_on_device, complete_wc};
use crate::control::{ControlConfig, Example, Run};
use crate::events::EventLog;
use crate::options::Opts;
use crate::report::Report;
use crate::stats::add;
use core::fmt::Write;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    cm::{CmEvents, CmId},
    cq::{Cq, PollCtx},
    device::Device,
    dma::DmaBuf,
    errno,
    event::{Event, EventKind, EventSink},
    pd::Pd,
    qp::{self, AltPath, Qp, QpCaps, SendOp},
    tcp::Ipv4,
};

const PORT: u16 = 51217;

pub(crate) struct Config {
    server: bool,
    addr: Option<Ipv4>,
    port: u16,
    count: u32,
    migrate_after: u32,
    size: usize,
    timeout_ms: u32,
}

impl ControlConfig for Config {
    fn parse(dev: &Device, input: &[u8]) -> Result<Self> {
        let mut cfg = Config {
            server: true,
            addr: None,
            port: PORT,
            count: 10,
            migrate_after: 5,
            size: 64,
            timeout_ms: 5000,
        };
        let mut have_role = false;
        let o = Opts::new(dev, "apm");
        for (key, val) in o.options(input)? {
            let v = o.need(key, val)?;
            let num = |min, max| o.num_in::<u64>(key, v, min, max);
            match key {
                "role" => {
                    cfg.server = o.pick(key, v, &[("server", true), ("client", false)])?;
                    have_role = true;
                }
                "addr" => {
                    cfg.addr = Some(o.addr(v)?);
                }
                "port" => cfg.port = num(1, 65535)? as u16,
                "count" => cfg.count = num(1, 1_000_000)? as u32,
                "migrate_after" => cfg.migrate_after = num(0, 1_000_000)? as u32,
                "size" => cfg.size = num(1, 65536)? as usize,
                "timeout_ms" => cfg.timeout_ms = num(1, 600_000)? as u32,
                _ => return Err(o.unknown_key(key)),
            }
        }
        if !have_role {
            pr_warn!("{}: apm: role= is missing (server or client)\n", dev.name());
            return Err(EINVAL);
        }
        if !cfg.server && cfg.addr.is_none() {
            pr_warn!("{}: apm: role=client needs addr=\n", dev.name());
            return Err(EINVAL);
        }
        Ok(cfg)
    }

    fn describe(&self, rep: &mut Report) {
        let _ = writeln!(
            rep,
            "config: role={} count={} migrate_after={} size={} timeout_ms={}",
            if self.server { "server" } else { "client" },
            self.count,
            self.migrate_after,
            self.size,
            self.timeout_ms
        );
    }
}

/// The `apm` control file's example; its QPs' events go to `events`.
pub(crate) struct ApmExample {
    pub(crate) log: Arc<EventLog>,
}

/// The QP's sink during a run: counts path migration events.
struct RunSink {
    log: Arc<EventLog>,
    migrated: AtomicU32,
    failed: AtomicU32,
}

impl EventSink for RunSink {
    fn event(&self, ev: &Event) {
        match ev.kind() {
            EventKind::PathMig => {
                self.migrated.fetch_add(1, Ordering::Relaxed);
            }
            EventKind::PathMigErr => {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        self.log.event(ev);
    }
}

impl Example for ApmExample {
    const NAME: &'static str = "apm";
    type Config = Config;

    fn run(&self, cfg: &Config, ctx: Run<'_>) -> Result {
        let dev = ctx.dev;
        // Up front: where no port can migrate, no alternate path can be
        // loaded (the layer logs why).
        if !dev.ports().any(|p| qp::path_mig_supported(dev, p).is_ok()) {
            let why = if dev.attrs().auto_path_mig() {
                "its ports are not InfiniBand, and the RDMA core loads alternate paths on InfiniBand ports only"
            } else {
                "it does not do automatic path migration (IB_DEVICE_AUTO_PATH_MIG is not set)"
            };
            let _ = writeln!(ctx.rep, "apm: no path migration on {}: {}", dev.name(), why);
            pr_warn!("{}: apm: no path migration: {}\n", dev.name(), why);
            return Err(errno::eopnotsupp());
        }
        self.migrate(cfg, ctx)
    }
}

impl ApmExample {
    fn migrate(&self, cfg: &Config, ctx: Run<'_>) -> Result {
        let (dev, cancel, stats, rep) = (ctx.dev, ctx.cancel, ctx.stats, ctx.rep);
        cm_device_check(dev, "apm", rep)?;
        let t = cfg.timeout_ms;
        let events = CmEvents::new()?;
        let (_listener, id) = if cfg.server {
            let listener = cm_listen(dev, "apm", &events, cfg.addr, cfg.port, rep)?;
            let id = listener.get_request(t, cancel)?;
            (Some(listener), id)
        } else {
            let id = CmId::new(&events)?;
            id.resolve(cfg.addr.ok_or(EINVAL)?, cfg.port, t, cancel)?;
            (None, id)
        };
        cm_on_device(dev, "apm", &id, rep)?;
        let pd = Pd::new(dev)?;
        let cq = Cq::new(dev, 16, PollCtx::Softirq)?;
        let sink = Arc::new(
            RunSink {
                log: self.log.clone(),
                migrated: AtomicU32::new(0),
                failed: AtomicU32::new(0),
            },
            GFP_KERNEL,
        )?;
        let caps = QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            ..Default::default()
        };
        let qp = Qp::new_cm_with_events(&id, &pd, &cq, &cq, caps, sink.clone())?;
        let sbuf = Arc::new(DmaBuf::new(dev, cfg.size)?, GFP_KERNEL)?;
        let rbuf = Arc::new(DmaBuf::new(dev, cfg.size)?, GFP_KERNEL)?;
        let mut recv = qp.post_recv(&rbuf, 0, cfg.size)?;
        let qp = if cfg.server {
            id.accept(qp, t, cancel)?
        } else {
            id.connect(qp, t, cancel)?
        };
        let _ = writeln!(
            rep,
            "rdma_cm: connection established: qp {:#x}",
            qp.qp_num()
        );

        // apm.c: the alternate path is the current one, copied.
        let alt = AltPath {
            av: qp.path()?,
            port: qp.port(),
            pkey_index: 0,
            timeout: 0x12,
        };
        qp.load_alt_path(&alt)?;
        let _ = writeln!(
            rep,
            "alternate path loaded (REARM): now {:?}",
            qp.mig_state()?
        );
        for i in 0..cfg.count {
            if !cfg.server {
                let id = qp.post_send(SendOp::Send, &sbuf, 0, cfg.size, true)?;
                complete_wc(&qp, id, "SEND", t, cancel, rep)?;
            }
            let wc = qp.wait(recv, t, cancel)?;
            wc.result()?;
            recv = qp.post_recv(&rbuf, 0, cfg.size)?;
            if cfg.server {
                let id = qp.post_send(SendOp::Send, &sbuf, 0, cfg.size, true)?;
                complete_wc(&qp, id, "SEND", t, cancel, rep)?;
            } else if i + 1 == cfg.migrate_after {
                qp.migrate()?;
                let _ = writeln!(
                    rep,
                    "migrated by hand after {} messages: now {:?}",
                    i + 1,
                    qp.mig_state()?
                );
            }
            add(&stats.send_msgs, 1);
            add(&stats.recv_msgs, 1);
        }
        let _ = writeln!(
            rep,
            "apm: ok: {} messages; path migration events: {} successful, {} failed",
            cfg.count,
            sink.migrated.load(Ordering::Relaxed),
            sink.failed.load(Ordering::Relaxed)
        );
        let _ = id.disconnect();
        Ok(())
    }
}
