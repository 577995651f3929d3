// SPDX-License-Identifier: GPL-2.0

//! kverbs_nvme: an NVMe over Fabrics RDMA host on the kverbs layer, the
//! Rust twin of drivers/nvme/host/rdma.c (Documentation/kverbs_nvme-design.rst).
//!
//! Its stages so far: a controller is its admin queue, connected with the
//! NVMe/RDMA private data (queue 0, 32 entries; the target's reply, its
//! receive queue size, or its rejection, an NVMe/RDMA status, read back)
//! and brought up with admin commands (`ctrl.rs`: Fabrics Connect, CAP
//! and VS, enable, Identify Controller, queues and namespaces), data by
//! keyed SGL descriptors over FRWR (`admin.rs`); kept alive (Keep Alive at
//! half the keep-alive timeout, on a layer timer) until it is shut down.
//! Then one I/O queue (`io.rs`), qid 1, on the layer's capsule queue, and
//! a disk a namespace, `/dev/kvnvme<C>n<N>` (`ns.rs`): Read, Write and
//! Flush, each request's pages registered for the target by FRWR.
//!
//! Its debugfs directory, `kverbs_nvme/`:
//!
//! - `connect`: takes nvme-cli's option string (`transport=rdma,
//!   traddr=169.254.1.1,trsvcid=4420,nqn=NQN[,...]`, as /dev/nvme-fabrics
//!   does); reads back `instance=N` of the last connect, or why it failed;
//! - `disconnect`: takes an instance number, or `all`;
//! - `controllers`: one line a controller.
//!
//! A controller goes when its device is removed, and with the module. A
//! disconnect deletes its disks (their data flushed), then its I/O queue,
//! then shuts it down; a target gone, or a device removed, shuts the I/O
//! queue down first (what it carries ends with `EIO`).

#![deny(unsafe_code)]

mod admin;
mod ctrl;
mod io;
mod ns;
mod options;
mod queue;
mod wire;

use admin::{Admin, Data};
use core::{
    fmt::Write,
    sync::atomic::{AtomicU32, Ordering},
};
use io::IoPath;
use kernel::{c_str, new_mutex, prelude::*, sync::Arc, sync::Mutex};
use kverbs::{
    cm::{CmEvent, CmEventKind, CmSink},
    debugfs::{Dir, File},
    delayed::{Delayed, DelayedHandler},
    qp::Cancel,
    Show, Store,
};
use options::{Options, Text};
use queue::{Conn, Queue, AQ_DEPTH};

module! {
    type: KverbsNvme,
    name: "kverbs_nvme",
    description: "kverbs_nvme: an NVMe over Fabrics RDMA host in safe Rust",
    license: "GPL",
}

/// A controller: its admin queue, its keep-alive, what its bring-up
/// learned, its I/O queue and disks.
struct Ctrl {
    /// Dropped first: no Keep Alive is sent after (its drop waits for one
    /// under way, but from a delivery, the CM sink's).
    ka: Option<Delayed>,
    /// Then the I/O queue and the disks (before the admin queue).
    io: Option<IoCtrl>,
    instance: u32,
    opts: Options,
    core: Arc<CtrlCore>,
    info: ctrl::Info,
}

/// A controller's I/O queue and its namespaces' disks.
///
/// Dropped: the queue is shut down first (the requests it carries end with
/// `EIO`), then the disks are deleted, then the connection goes. An
/// orderly disconnect deletes the disks first ([`IoCtrl::delete_disks`]).
struct IoCtrl {
    disks: KVec<ns::Disk>,
    path: Arc<IoPath>,
    conn: Conn,
}

impl IoCtrl {
    /// Deletes the disks while the queue carries their last requests
    /// (`del_gendisk` writes their dirty pages back and waits for them).
    fn delete_disks(&mut self) {
        drop(core::mem::take(&mut self.disks));
    }
}

impl Drop for IoCtrl {
    fn drop(&mut self) {
        self.path.shutdown();
    }
}

/// What a controller shares with its keep-alive: the admin queue, one
/// command at a time (a connect's or disconnect's, a Keep Alive).
///
/// Lock order: the controllers' list, then `admin`.
#[pin_data]
struct CtrlCore {
    #[pin]
    admin: Mutex<Admin>,
    /// The admin queue's token, closed when the target disconnects or the
    /// device goes: no command can be answered any more.
    gone: Arc<Cancel>,
    /// Keep Alive commands the controller answered.
    ka_sent: AtomicU32,
}

/// A controller's keep-alive (`nvme_keep_alive_work`): a Keep Alive every
/// `every_ms`, half the keep-alive timeout; the first that fails is the
/// last (error recovery comes with a later stage).
struct KeepAlive {
    core: Arc<CtrlCore>,
    instance: u32,
    every_ms: u32,
}

impl DelayedHandler for KeepAlive {
    fn run(&self) -> Option<u32> {
        if self.core.gone.is_closed() {
            return None;
        }
        let r = {
            let mut a = self.core.admin.lock();
            let cid = a.cid();
            a.exec(wire::Cmd::keep_alive(cid), Data::None, &mut [])
        };
        match r {
            Ok(_) => {
                self.core.ka_sent.fetch_add(1, Ordering::Relaxed);
                Some(self.every_ms)
            }
            Err(e) => {
                if !self.core.gone.is_closed() {
                    pr_err!(
                        "kvnvme{}: {}: keep-alive stopped\n",
                        self.instance,
                        ctrl::StartError {
                            step: "Keep Alive",
                            err: e
                        }
                    );
                }
                None
            }
        }
    }
}

/// The controllers, and what the last connect said.
#[pin_data]
struct Ctrls {
    /// A slot a controller, `None` once it was taken out (the next connect
    /// takes the first free one): one is taken out without allocating, as
    /// the CM sink must on a device's removal.
    #[pin]
    list: Mutex<KVec<Option<Ctrl>>>,
    #[pin]
    next_instance: Mutex<u32>,
    #[pin]
    last: Mutex<KVec<u8>>,
    /// The module, owner of the disks' operations.
    module: &'static ThisModule,
}

/// Takes controller `instance` out of `list`, if there.
fn take(list: &mut KVec<Option<Ctrl>>, instance: u32) -> Option<Ctrl> {
    list.iter_mut()
        .find(|s| s.as_ref().is_some_and(|c| c.instance == instance))?
        .take()
}

/// The sink of a controller's connection events: on its device's removal
/// it drops the controller (the removal waits for that), on a disconnect
/// it marks it. Either closes `gone`, the token of its admin queue's waits,
/// and starts the shutdown of its I/O queue, first: a bring-up or a
/// shutdown under way, not in the list, ends at once instead of at its
/// timeout.
#[pin_data]
struct CtrlSink {
    ctrls: Arc<Ctrls>,
    instance: u32,
    gone: Arc<Cancel>,
    /// The I/O path, once made (its queue holds nothing after its
    /// shutdown, which the controller's drop makes).
    #[pin]
    io: Mutex<Option<Arc<IoPath>>>,
}

impl CmSink for CtrlSink {
    fn event(&self, ev: &CmEvent) {
        // The sink is its controller's queues' (one ID a `CmEvents`).
        let lost = matches!(
            ev.kind(),
            CmEventKind::DeviceRemoval | CmEventKind::Disconnected
        );
        if lost {
            self.gone.close();
            if let Some(p) = self.io.lock().as_ref() {
                p.kill();
            }
        }
        let gone = {
            let mut list = self.ctrls.list.lock();
            let Some(c) = list
                .iter_mut()
                .flatten()
                .find(|c| c.instance == self.instance)
            else {
                return;
            };
            // A disconnect is marked by `gone` (closed above): the
            // controller is kept, not reconnected (a later stage), its I/O
            // queue shut down (its requests end with `EIO`, those after at
            // once).
            let removed = {
                let a = c.core.admin.lock();
                let io = c.io.as_ref().map(|io| &io.conn);
                match ev.kind() {
                    CmEventKind::DeviceRemoval => a.q.is_of(ev) || io.is_some_and(|q| q.is_of(ev)),
                    CmEventKind::EventsLost => {
                        a.q.device_removed() || io.is_some_and(|q| q.device_removed())
                    }
                    _ => false,
                }
            };
            if !removed {
                return;
            }
            take(&mut list, self.instance)
        };
        if let Some(c) = gone {
            pr_info!("kvnvme{}: device removed: controller deleted\n", c.instance);
            // Dropped outside the list's lock: its queue's drop waits for
            // the drain and destroys the ID, which lets the removal go on.
            drop(c);
        }
    }
}

impl Ctrls {
    /// Connects a controller with the options `input`.
    fn connect(this: &Arc<Self>, input: &[u8]) -> Result {
        let opts = match Options::parse(input) {
            Ok(o) => o,
            Err(r) => {
                let why = core::str::from_utf8(&r.why).unwrap_or("?");
                pr_warn!("connect: {}\n", why);
                this.said(format_args!("error: {}", why));
                return Err(r.errno);
            }
        };
        let instance = {
            let mut n = this.next_instance.lock();
            let i = *n;
            *n += 1;
            i
        };
        let gone = Arc::new(Cancel::new(), GFP_KERNEL)?;
        let (ctrls, sink_gone) = (this.clone(), gone.clone());
        let sink = Arc::pin_init(
            pin_init!(CtrlSink {
                ctrls,
                instance,
                gone: sink_gone,
                io <- new_mutex!(None),
            }),
            GFP_KERNEL,
        )?;
        let q = match Queue::connect(&opts, 0, AQ_DEPTH, 0, sink.clone()) {
            Ok(q) => q,
            Err(f) => {
                pr_err!(
                    "kvnvme{}: {}:{}: admin queue: {}\n",
                    instance,
                    opts.traddr,
                    opts.trsvcid,
                    f
                );
                this.said(format_args!("error: admin queue: {}", f));
                return Err(f.errno());
            }
        };
        pr_info!(
            "kvnvme{}: admin queue connected to {}:{}, the controller's receive queue {}\n",
            instance,
            opts.traddr,
            opts.trsvcid,
            q.conn.crqsize
        );
        let mut admin = match Admin::new(q, gone.clone()) {
            Ok(a) => a,
            Err(e) => {
                this.said(format_args!("error: admin queue: error {}", e.to_errno()));
                return Err(e);
            }
        };
        let info = match ctrl::start(&mut admin, &opts) {
            Ok(i) => i,
            Err(e) => {
                pr_err!("kvnvme{}: {}\n", instance, e);
                this.said(format_args!("error: {}", e));
                return Err(e.errno());
            }
        };
        pr_info!(
            "kvnvme{}: controller {} ready, NVMe {}, model '{}', serial '{}'\n",
            instance,
            info.cntlid,
            wire::Version(info.vs),
            wire::ascii(&info.id.mn),
            wire::ascii(&info.id.sn)
        );
        let core = Arc::pin_init(
            pin_init!(CtrlCore {
                admin <- new_mutex!(admin),
                gone,
                ka_sent: AtomicU32::new(0),
            }),
            GFP_KERNEL,
        );
        let core = match core {
            Ok(c) => c,
            Err(e) => {
                this.said(format_args!("error: out of memory"));
                return Err(e);
            }
        };
        // Keep Alive at half the timeout (the C host's period without
        // traffic based keep-alive), the first half a timeout from now.
        let every_ms = opts.keep_alive_tmo * 500;
        let h = Arc::new(
            KeepAlive {
                core: core.clone(),
                instance,
                every_ms,
            },
            GFP_KERNEL,
        );
        let ka = match h.map_err(Error::from).and_then(|h| Delayed::new(h)) {
            Ok(ka) => {
                if !opts.test_no_keep_alive {
                    ka.arm(every_ms);
                }
                Some(ka)
            }
            Err(e) => {
                this.said(format_args!("error: keep-alive: error {}", e.to_errno()));
                return Err(e);
            }
        };
        // The I/O queue and the disks, kept alive meanwhile (a disk's
        // partitions are read as it is added).
        let io = match Self::start_io(this, instance, &opts, &info, sink, &core.gone) {
            Ok(io) => io,
            Err(e) => {
                pr_err!("kvnvme{}: {}\n", instance, e);
                this.said(format_args!("error: {}", e));
                return Err(e.errno());
            }
        };
        let ctrl = Ctrl {
            ka,
            io,
            instance,
            opts,
            core,
            info,
        };
        // Into the list, unless its device is being removed: the sink
        // was then told before the controller was there, found nothing to
        // drop, and the removal waits for it. Under the list's lock, which
        // the sink takes: a removal told after is the sink's. A controller
        // not kept is dropped outside the lock (its sink's events take
        // it), so a push must not fail: room is made first.
        let refused = {
            let mut list = this.list.lock();
            let io = ctrl.io.as_ref().map(|io| &io.conn);
            if ctrl.core.admin.lock().q.device_removed() || io.is_some_and(|q| q.device_removed()) {
                Err((ctrl, ENODEV))
            } else if ctrl.core.gone.is_closed() {
                Err((ctrl, kverbs::errno::econnreset()))
            } else if let Some(free) = list.iter().position(|s| s.is_none()) {
                list[free] = Some(ctrl);
                Ok(())
            } else if list.reserve(1, GFP_KERNEL).is_ok() {
                let _ = list.push(Some(ctrl), GFP_KERNEL);
                Ok(())
            } else {
                Err((ctrl, ENOMEM))
            }
        };
        if let Err((ctrl, e)) = refused {
            drop(ctrl);
            if e == ENODEV {
                this.said(format_args!("error: the device went"));
            } else if e == kverbs::errno::econnreset() {
                this.said(format_args!("error: the target disconnected"));
            } else {
                this.said(format_args!("error: out of memory"));
            }
            return Err(e);
        }
        this.said(format_args!("instance={}", instance));
        Ok(())
    }

    /// The I/O queue of a controller brought up (`None` if it granted
    /// none), and its namespaces' disks: queue 1, of `queue_size` entries
    /// or as many as the controller takes (CAP.MQES).
    fn start_io(
        this: &Arc<Self>,
        instance: u32,
        opts: &Options,
        info: &ctrl::Info,
        sink: Arc<CtrlSink>,
        gone: &Arc<Cancel>,
    ) -> Result<Option<IoCtrl>, ctrl::StartError> {
        if info.io_queues == 0 {
            return Ok(None);
        }
        let size = opts.queue_size.min(u32::from(info.mqes()) + 1) as u16;
        let (path, conn) = io::start(opts, info, 1, size, sink.clone(), gone.clone())?;
        // The sink starts the queue's shutdown when the target or the
        // device goes, from here on.
        *sink.io.lock() = Some(path.clone());
        if gone.is_closed() {
            path.kill();
        }
        let mut io = IoCtrl {
            disks: KVec::new(),
            path,
            conn,
        };
        io.disks =
            ns::add_disks(instance, info, &io.path, this.module).map_err(|e| ctrl::StartError {
                step: "namespace disks",
                err: admin::CmdError::Error(e),
            })?;
        Ok(Some(io))
    }

    fn said(&self, args: core::fmt::Arguments<'_>) {
        let mut t = Text(KVec::new());
        let _ = t.write_fmt(args);
        let _ = t.write_str("\n");
        *self.last.lock() = t.0;
    }

    /// Removes `instance`, or every controller; `ENOENT` if there is no
    /// such controller.
    fn disconnect(&self, input: &[u8]) -> Result {
        let text = core::str::from_utf8(input).map_err(|_| EINVAL)?.trim();
        let gone: KVec<Option<Ctrl>> = {
            let mut list = self.list.lock();
            if text == "all" {
                core::mem::take(&mut *list)
            } else {
                let Ok(n) = text.parse::<u32>() else {
                    pr_warn!(
                        "disconnect: want an instance number or 'all', not '{}'\n",
                        options::Shown(text)
                    );
                    return Err(EINVAL);
                };
                let Some(c) = take(&mut list, n) else {
                    pr_warn!("disconnect: no controller kvnvme{}\n", n);
                    return Err(ENOENT);
                };
                drop(list);
                shut_down(Some(c));
                return Ok(());
            }
        };
        shut_down(gone.into_iter().flatten());
        Ok(())
    }
}

/// Shuts the controllers of `gone` down (those whose target is still
/// connected), then drops each: outside the list's lock, as their queues'
/// drops wait for their drains.
fn shut_down(gone: impl IntoIterator<Item = Ctrl>) {
    for mut c in gone {
        if c.core.gone.is_closed() {
            drop(c.ka.take());
            pr_info!("kvnvme{}: disconnected (the target had)\n", c.instance);
            continue;
        }
        // The disks while the I/O queue carries their last data, then the
        // queue, then the controller's shutdown.
        if let Some(io) = c.io.as_mut() {
            io.delete_disks();
        }
        drop(c.io.take());
        // No Keep Alive after (one under way is waited for).
        drop(c.ka.take());
        match ctrl::shutdown(&mut c.core.admin.lock(), &c.info) {
            Ok(()) => pr_info!("kvnvme{}: shut down, disconnected\n", c.instance),
            Err(e) => pr_err!("kvnvme{}: {}; disconnected\n", c.instance, e),
        }
    }
}

/// `connect`.
struct ConnectFile(Arc<Ctrls>);

impl Store for ConnectFile {
    fn store(&self, input: &[u8]) -> Result {
        Ctrls::connect(&self.0, input)
    }
}

impl Show for ConnectFile {
    fn show(&self, out: &mut dyn Write) -> Result {
        let last = self.0.last.lock();
        out.write_str(core::str::from_utf8(&last).unwrap_or("?\n"))?;
        Ok(())
    }
}

/// `disconnect`.
struct DisconnectFile(Arc<Ctrls>);

impl Store for DisconnectFile {
    fn store(&self, input: &[u8]) -> Result {
        self.0.disconnect(input)
    }
}

impl Show for DisconnectFile {
    fn show(&self, out: &mut dyn Write) -> Result {
        out.write_str("instance number, or all\n")?;
        Ok(())
    }
}

/// `controllers`.
struct CtrlsFile(Arc<Ctrls>);

impl Show for CtrlsFile {
    fn show(&self, out: &mut dyn Write) -> Result {
        for c in self.0.list.lock().iter().flatten() {
            write!(out, "kvnvme{}: ", c.instance)?;
            out.write_str(if c.core.gone.is_closed() {
                "disconnected"
            } else {
                "connected"
            })?;
            let (i, a) = (&c.info, &*c.core.admin.lock());
            write!(
                out,
                ", {}:{}, subsysnqn {}, admin queue: qid {}, QP {}, controller's receive queue {}, device ",
                c.opts.traddr,
                c.opts.trsvcid,
                c.opts.nqn.as_str(),
                a.q.conn.qid,
                a.q.qp_num(),
                a.q.conn.crqsize
            )?;
            a.q.device_name(out)?;
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
                a.data_cmds,
                a.remote_invalidations,
                c.opts.keep_alive_tmo,
                c.core.ka_sent.load(Ordering::Relaxed),
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
            if let Some(io) = &c.io {
                show_io(out, c.instance, io)?;
            }
            out.write_str("\n")?;
        }
        Ok(())
    }
}

/// A controller's I/O queue and disks, in the controllers file.
fn show_io(out: &mut dyn Write, instance: u32, io: &IoCtrl) -> core::fmt::Result {
    let p = &io.path;
    write!(
        out,
        " | I/O queue: qid {}, size {}, tags {}, controller's receive queue {}, pages {}, \
         inline_max {}",
        io.conn.qid, p.size, p.tags, io.conn.crqsize, p.max_pages, p.inline_max
    )?;
    match p.stats() {
        Some((s, down)) => write!(out, ", {}, {}", if down { "down" } else { "up" }, s)?,
        None => out.write_str(", gone")?,
    }
    let c = |a: &core::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    write!(
        out,
        " | reads {} writes {} flushes {} write_zeroes {} unsupported {} busy {} no_queue {} \
         status_errors {} errors {} timeouts {} | disks",
        c(&p.c.reads),
        c(&p.c.writes),
        c(&p.c.flushes),
        c(&p.c.write_zeroes),
        c(&p.c.unsupported),
        c(&p.c.busy),
        c(&p.c.no_queue),
        c(&p.c.status_errors),
        c(&p.c.errors),
        c(&p.c.timeouts)
    )?;
    for d in io.disks.iter() {
        write!(out, " kvnvme{}n{}", instance, d.nsid)?;
    }
    Ok(())
}

struct KverbsNvme {
    ctrls: Arc<Ctrls>,
    _connect: File<ConnectFile>,
    _disconnect: File<DisconnectFile>,
    _controllers: File<CtrlsFile>,
}

impl kernel::Module for KverbsNvme {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let ctrls = Arc::pin_init(
            pin_init!(Ctrls {
                list <- new_mutex!(KVec::new()),
                next_instance <- new_mutex!(0),
                last <- new_mutex!(KVec::new()),
                module,
            }),
            GFP_KERNEL,
        )?;
        let root = Dir::new(c_str!("kverbs_nvme"), module)?;
        let connect = root.control_file(c_str!("connect"), ConnectFile(ctrls.clone()))?;
        let disconnect = root.control_file(c_str!("disconnect"), DisconnectFile(ctrls.clone()))?;
        let controllers = root.file(c_str!("controllers"), CtrlsFile(ctrls.clone()))?;
        Ok(KverbsNvme {
            ctrls,
            _connect: connect,
            _disconnect: disconnect,
            _controllers: controllers,
        })
    }
}

impl Drop for KverbsNvme {
    fn drop(&mut self) {
        // The controllers, whose sinks hold `ctrls` (a cycle this breaks),
        // then the deliveries of their sinks still ending.
        let all = core::mem::take(&mut *self.ctrls.list.lock());
        shut_down(all.into_iter().flatten());
        let _ = kverbs::event::wait_for_deliveries();
    }
}
