// SPDX-License-Identifier: GPL-2.0

//! The `controllers` file: a line a controller, its state, its
//! association's admin queue and identity, its I/O path's queues and
//! counters, its disks.

use crate::io::IoPath;
use crate::state::State;
use crate::{wire, Assoc, Ctrl, Ctrls};
use core::{fmt::Write, sync::atomic::Ordering};
use kernel::{prelude::*, sync::Arc};
use kverbs::Show;

/// `controllers`.
pub(crate) struct CtrlsFile(pub(crate) Arc<Ctrls>);

impl Show for CtrlsFile {
    fn show(&self, out: &mut dyn Write) -> Result {
        for c in self.0.list.lock().iter().flatten() {
            let state = c.status.state();
            write!(
                out,
                "kvnvme{}: {}, {}:{}, subsysnqn {}",
                c.instance,
                state.name(),
                c.opts.traddr,
                c.opts.trsvcid,
                c.opts.nqn.as_str()
            )?;
            if state != State::Live {
                write!(
                    out,
                    ", since {} ms: {}",
                    c.status.lost_ms(),
                    c.status.why().msg()
                )?;
            }
            match &c.assoc {
                Some(a) => show_assoc(out, c, a)?,
                None => out.write_str(", no association")?,
            }
            if let Some(p) = &c.path {
                show_io(out, c, p)?;
            }
            writeln!(out, "; reconnects {}", c.reconnects)?;
        }
        Ok(())
    }
}

/// A controller's association, in the controllers file.
fn show_assoc(out: &mut dyn Write, c: &Ctrl, a: &Assoc) -> core::fmt::Result {
    let (i, core, admin) = (&c.info, &a.core, &*a.core.admin.lock());
    write!(
        out,
        ", admin queue: qid {}, QP {}, controller's receive queue {}, device ",
        admin.q.conn.qid,
        admin.q.qp_num(),
        admin.q.conn.crqsize
    )?;
    admin.q.device_name(out)?;
    write!(
        out,
        "; cntlid {}, NVMe {}, model '{}', serial '{}', firmware '{}', MQES {}, MDTS {}, \
         IOCCSZ {}, IORCSZ {}, SGLS {:#x}, KAS {}, NN {}; admin data commands {}, \
         invalidated by the target {}; keep-alive {} s, {} sent; I/O queues {} of {} asked; \
         namespaces {}",
        i.cntlid,
        wire::Version(i.vs),
        wire::ascii(&i.id.mn),
        wire::ascii(&i.id.sn),
        wire::ascii(&i.id.fr),
        i.mqes(),
        i.id.mdts,
        i.id.ioccsz,
        i.id.iorcsz,
        i.id.sgls,
        i.id.kas,
        i.id.nn,
        admin.data_cmds,
        admin.remote_invalidations,
        c.opts.keep_alive_tmo,
        core.ka_sent.load(Ordering::Relaxed),
        i.io_queues,
        i.io_queues_asked,
        i.namespaces.len()
    )?;
    for ns in i.namespaces.iter() {
        write!(
            out,
            ", nsid {}: {} blocks of {} bytes",
            ns.nsid, ns.blocks, ns.block_size
        )?;
    }
    Ok(())
}

/// A controller's I/O path and disks, in the controllers file: its first
/// I/O queue, the others' qids, all their counters summed.
fn show_io(out: &mut dyn Write, c: &Ctrl, p: &IoPath) -> core::fmt::Result {
    let conn = c.assoc.as_ref().and_then(|a| a.io.first());
    write!(
        out,
        " | I/O queue: qid {}, size {}, tags {}, controller's receive queue {}, pages {}, \
         inline_max {}",
        conn.map_or(1, |q| q.qid),
        p.size,
        p.tags,
        conn.map_or(0, |q| q.crqsize),
        p.max_pages,
        p.inline_max
    )?;
    // The other queues' numbers; the counters are of them all.
    if let Some(a) = &c.assoc {
        for q in a.io.iter().skip(1) {
            write!(out, ", qid {}", q.qid)?;
        }
    }
    match p.stats() {
        Some((s, down)) => write!(out, ", {}, {}", if down { "down" } else { "up" }, s)?,
        None => out.write_str(", gone")?,
    }
    out.write_str(" by_queue")?;
    for (i, n) in p.submitted().enumerate() {
        write!(out, "{}{}", if i == 0 { " " } else { "/" }, n)?;
    }
    let n = |a: &core::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    write!(
        out,
        " | reads {} writes {} flushes {} write_zeroes {} unsupported {} busy {} not_live {} \
         no_queue {} status_errors {} errors {} timeouts {} | disks",
        n(&p.c.reads),
        n(&p.c.writes),
        n(&p.c.flushes),
        n(&p.c.write_zeroes),
        n(&p.c.unsupported),
        n(&p.c.busy),
        n(&p.c.not_live),
        n(&p.c.no_queue),
        n(&p.c.status_errors),
        n(&p.c.errors),
        n(&p.c.timeouts)
    )?;
    for d in c.disks.iter() {
        write!(out, " kvnvme{}n{}", c.instance, d.nsid)?;
    }
    Ok(())
}
