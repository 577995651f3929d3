// SPDX-License-Identifier: GPL-2.0

//! A device's transfer counters, shared by its control files and shown by
//! its `stats` file.

use core::fmt::Write;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::{prelude::*, sync::Arc};
use kverbs::Show;

/// Transfer counters of a device, shown by its `stats` file.
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) send_msgs: AtomicU64,
    pub(crate) send_bytes: AtomicU64,
    pub(crate) recv_msgs: AtomicU64,
    pub(crate) recv_bytes: AtomicU64,
    pub(crate) read_msgs: AtomicU64,
    pub(crate) read_bytes: AtomicU64,
    pub(crate) write_msgs: AtomicU64,
    pub(crate) write_bytes: AtomicU64,
    pub(crate) runs_ok: AtomicU64,
    pub(crate) runs_failed: AtomicU64,
}

pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// The `stats` file.
pub(crate) struct StatsFile(pub(crate) Arc<Stats>);

impl Show for StatsFile {
    fn show(&self, out: &mut dyn Write) -> Result {
        let rows: [(&str, &AtomicU64); 10] = [
            ("send_msgs", &self.0.send_msgs),
            ("send_bytes", &self.0.send_bytes),
            ("recv_msgs", &self.0.recv_msgs),
            ("recv_bytes", &self.0.recv_bytes),
            ("read_msgs", &self.0.read_msgs),
            ("read_bytes", &self.0.read_bytes),
            ("write_msgs", &self.0.write_msgs),
            ("write_bytes", &self.0.write_bytes),
            ("runs_ok", &self.0.runs_ok),
            ("runs_failed", &self.0.runs_failed),
        ];
        for (name, v) in rows {
            writeln!(out, "{}: {}", name, v.load(Ordering::Relaxed))?;
        }
        Ok(())
    }
}
