// SPDX-License-Identifier: GPL-2.0

//! The control files of a device (`rc`, `mcast`, `bench`, `srq`, `apm`):
//! the [`Example`] a file runs and [`Control`], the file that runs it.

use crate::report::Report;
use crate::stats::{add, Stats};
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::{new_mutex, prelude::*, sync::Arc, sync::Mutex};
use kverbs::ARef;
use kverbs::{
    device::{Device, PortState},
    errno,
    qp::Cancel,
    Show, Store,
};

/// Room for "result: error <errno> (<us> us)\n", the last line of a report.
const RESULT_LINE: usize = 64;

/// The configuration a control string gives a run: it parses itself and
/// may describe itself first in the run's report.
pub(crate) trait ControlConfig: Sized {
    /// Parses a control string; says what is wrong in the kernel log.
    fn parse(dev: &Device, input: &[u8]) -> Result<Self>;

    /// Writes the report's first line, the configuration, for the
    /// examples whose report starts with one.
    fn describe(&self, rep: &mut Report) {
        let _ = rep;
    }
}

/// What a run works with, besides its configuration.
pub(crate) struct Run<'a> {
    /// The device the control file belongs to.
    pub(crate) dev: &'a Device,
    /// Ends the run when the device goes away.
    pub(crate) cancel: &'a Cancel,
    /// The device's transfer counters.
    pub(crate) stats: &'a Stats,
    /// The run's report.
    pub(crate) rep: &'a mut Report,
}

/// What a control file runs: its [`Example::Config`] parses the written
/// string, then the example runs.
pub(crate) trait Example: Send + Sync + 'static {
    /// The file's name, in messages.
    const NAME: &'static str;
    /// A parsed control string.
    type Config: ControlConfig;
    /// Runs, writing the report after the configuration's description.
    fn run(&self, cfg: &Self::Config, ctx: Run<'_>) -> Result;

    /// State to show before the last report, if the example keeps any.
    fn show_state(&self, out: &mut dyn Write) -> Result {
        let _ = out;
        Ok(())
    }
}

/// A control file of a device (`rc`, `mcast`): a write runs the example
/// `E` and blocks until it is done, one run at a time; a read shows the
/// last run's report.
pub(crate) struct Control<E> {
    dev: ARef<Device>,
    busy: AtomicBool,
    cancel: Cancel,
    report: Pin<KBox<Mutex<KVec<u8>>>>,
    stats: Arc<Stats>,
    example: E,
}

impl<E: Example> Control<E> {
    pub(crate) fn new(dev: &Device, stats: Arc<Stats>, example: E) -> Result<Self> {
        Ok(Control {
            dev: dev.into(),
            busy: AtomicBool::new(false),
            cancel: Cancel::new(),
            report: KBox::pin_init(new_mutex!(KVec::new()), GFP_KERNEL)?,
            stats,
            example,
        })
    }

    /// Makes a run in progress end (with `ECANCELED`) within 100 ms, and
    /// every later write fail with `ENODEV`: the device is going away.
    pub(crate) fn cancel(&self) {
        self.cancel.close();
    }
}

impl<E: Example> Show for Control<E> {
    fn show(&self, out: &mut dyn Write) -> Result {
        if self.busy.load(Ordering::Acquire) {
            writeln!(out, "status: running")?;
        }
        self.example.show_state(out)?;
        let report = self.report.lock();
        out.write_str(core::str::from_utf8(&report).unwrap_or("(report is not text)\n"))?;
        Ok(())
    }
}

impl<E: Example> Store for Control<E> {
    fn store(&self, input: &[u8]) -> Result {
        let dev = &*self.dev;
        let cfg = E::Config::parse(dev, input)?;
        if self.busy.swap(true, Ordering::AcqRel) {
            pr_warn!(
                "{}: {}: a run is already in progress\n",
                dev.name(),
                E::NAME
            );
            return Err(EBUSY);
        }
        if self.cancel.is_closed() {
            self.busy.store(false, Ordering::Release);
            pr_warn!("{}: {}: the device is being removed\n", dev.name(), E::NAME);
            return Err(ENODEV);
        }
        let mut rep = Report::new();
        let start = kverbs::now_ns();
        cfg.describe(&mut rep);
        let ctx = Run {
            dev,
            cancel: &self.cancel,
            stats: &self.stats,
            rep: &mut rep,
        };
        let mut result = self.example.run(&cfg, ctx);
        if let Err(e) = result {
            result = Err(port_down(dev, E::NAME, e, &mut rep));
        }
        // Room for the result line first: a success must not lose it
        // (found by the allocation-failure sweep of srq, whose report
        // grew past its allocation exactly there).
        rep.reserve(RESULT_LINE);
        if result.is_ok() && rep.lost() {
            // The run went well but its report lacks lines, which are its
            // result here: it cannot be called a success (found by the
            // allocation-failure sweep of mcast).
            pr_err!(
                "{}: {}: the report is incomplete (out of memory)\n",
                dev.name(),
                E::NAME
            );
            result = Err(ENOMEM);
        }
        let us = (kverbs::now_ns() - start) / 1000;
        match result {
            Ok(()) => {
                let _ = writeln!(rep, "result: ok ({} us)", us);
                add(&self.stats.runs_ok, 1);
            }
            Err(e) => {
                let _ = writeln!(rep, "result: error {} ({} us)", e.to_errno(), us);
                pr_err!(
                    "{}: {}: run failed: error {}\n",
                    dev.name(),
                    E::NAME,
                    e.to_errno()
                );
                add(&self.stats.runs_failed, 1);
            }
        }
        *self.report.lock() = rep.into_vec();
        self.cancel.reset();
        self.busy.store(false, Ordering::Release);
        result
    }
}

/// The error a failed run ends with: `ENETDOWN` instead of a failed or
/// missing completion (`EIO`, `ETIMEDOUT`) when a port of `dev` is no
/// longer active -- its netdev went down or away during the run (rxe sets
/// the port down at once, and unregisters the device only later, when the
/// run would end with `ECANCELED`) -- so the report names the cause, not
/// a flushed work request.
fn port_down(dev: &Device, name: &str, e: Error, rep: &mut Report) -> Error {
    let (eio, etimedout) = (EIO.to_errno(), errno::etimedout().to_errno());
    if e.to_errno() != eio && e.to_errno() != etimedout {
        return e;
    }
    for port in dev.ports() {
        let state = match dev.query_port(port) {
            Ok(attr) if attr.state() == PortState::Active => continue,
            Ok(attr) => attr.state().name(),
            // rxe: the netdev is gone.
            Err(q) if q.to_errno() == ENODEV.to_errno() => "without a netdev",
            Err(_) => continue,
        };
        let _ = writeln!(rep, "port {} is {}: the link went down", port, state);
        pr_warn!(
            "{}: {}: port {} is {}: the link went down during the run\n",
            dev.name(),
            name,
            port,
            state
        );
        return errno::enetdown();
    }
    e
}
