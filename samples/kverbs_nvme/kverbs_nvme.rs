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
//! Then the I/O queues (`io.rs`), one a CPU online, at most
//! `nr_io_queues` and as many as the controller grants, qid 1 to N, each on
//! the layer's capsule queue and a hardware queue of the disks, and a disk
//! a namespace, `/dev/kvnvme<C>n<N>` (`ns.rs`): Read, Write and
//! Flush, each request's pages registered for the target by FRWR. An
//! error (the target gone, a Keep Alive failed, an error of the I/O
//! queue, a request timed out) starts the error recovery (`state.rs`,
//! `recovery.rs`): the queues torn down, what the I/O queue carried
//! requeued, then a reconnect every `reconnect_delay` until the
//! controller is live again, or deleted after `ctrl_loss_tmo`.
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
//! then shuts it down; a device removed, or a recovery past
//! `ctrl_loss_tmo`, shuts the I/O queue down first (what it carries ends
//! with `EIO`).

#![deny(unsafe_code)]

mod admin;
mod ctrl;
mod io;
mod ns;
mod options;
mod queue;
mod recovery;
mod show;
mod state;
mod wire;

use admin::{Admin, Data};
use core::{
    fmt::{self, Write},
    sync::atomic::{AtomicU32, Ordering},
};
use io::IoPath;
use kernel::{c_str, new_mutex, prelude::*, sync::Arc, sync::Mutex};
use kverbs::{
    client::{Client, Registration},
    cm::{CmEvent, CmEventKind, CmSink},
    debugfs::{Dir, File},
    delayed::{Delayed, DelayedHandler},
    device::{Device, Guid},
    qp::Cancel,
    Show, Store,
};
use options::{Options, Text};
use queue::{Conn, ConnectFailure, Queue, AQ_DEPTH};
use show::CtrlsFile;
use state::{State, Status, StatusRef, Why};

module! {
    type: KverbsNvme,
    name: "kverbs_nvme",
    description: "kverbs_nvme: an NVMe over Fabrics RDMA host in safe Rust",
    license: "GPL",
}

/// A controller: its state, its association (admin queue, keep-alive,
/// I/O queue's connection) while it has one, what its bring-up learned,
/// its I/O path and disks.
///
/// Dropped: deleting (requests end with `EIO` once the I/O queue is gone,
/// the recovery stops), the I/O queue shut down (what it carries ends with
/// `EIO`), the disks deleted, the association dropped. An orderly
/// disconnect deletes the disks first ([`shut_down`]).
struct Ctrl {
    instance: u32,
    opts: Options,
    status: StatusRef,
    assoc: Option<Assoc>,
    info: ctrl::Info,
    disks: KVec<ns::Disk>,
    path: Option<Arc<IoPath>>,
    /// Reconnections that made it live again.
    reconnects: u32,
    /// The node GUID of its last association's device: the controller is
    /// deleted when that device goes ([`NvmeClient`]).
    device: Option<Guid>,
}

impl Drop for Ctrl {
    fn drop(&mut self) {
        self.status.delete();
        if let Some(p) = &self.path {
            p.shutdown();
        }
        drop(core::mem::take(&mut self.disks));
        drop(self.assoc.take());
    }
}

/// A controller's association: its admin queue, its keep-alive, its I/O
/// queue's connection (the capsule queue on its QP is in the I/O path).
struct Assoc {
    /// Dropped first: no Keep Alive is sent after (its drop waits for one
    /// under way, but from a delivery, the CM sink's).
    ka: Option<Delayed>,
    /// Then the I/O queues' connections, then the admin queue.
    io: KVec<Conn>,
    core: Arc<CtrlCore>,
}

impl Assoc {
    /// The node GUID of its device.
    fn device_guid(&self) -> Option<Guid> {
        self.core.admin.lock().q.device_guid()
    }

    /// Whether the device of one of its queues is being removed.
    fn device_removed(&self) -> bool {
        self.core.admin.lock().q.device_removed() || self.io.iter().any(|q| q.device_removed())
    }
}

/// What an association shares with its keep-alive: the admin queue, one
/// command at a time (a connect's or disconnect's, a Keep Alive).
///
/// Lock order: the controllers' list, then `admin`.
#[pin_data]
struct CtrlCore {
    #[pin]
    admin: Mutex<Admin>,
    /// The association's token, closed when the target disconnects, the
    /// device goes or the recovery tears it down: no command can be
    /// answered any more.
    gone: Arc<Cancel>,
    /// Keep Alive commands the controller answered.
    ka_sent: AtomicU32,
}

/// A controller's keep-alive (`nvme_keep_alive_work`): a Keep Alive every
/// `every_ms`, half the keep-alive timeout; the first that fails is the
/// last, and starts the error recovery.
struct KeepAlive {
    core: Arc<CtrlCore>,
    status: Arc<Status>,
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
                    self.status.error(Why::KeepAlive);
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

/// Controller `instance` of `list`, if there.
fn find(list: &mut KVec<Option<Ctrl>>, instance: u32) -> Option<&mut Ctrl> {
    list.iter_mut().flatten().find(|c| c.instance == instance)
}

/// The sink of an association's connection events. A disconnect closes
/// `gone`, the token of the association's waits (a bring-up under way
/// ends at once), and starts the controller's error recovery (or, before
/// it is live, shuts its I/O queue down). A device's removal closes
/// `gone` too and drops the controller if the association is its current
/// one (the removal waits for that); one being torn down by the recovery
/// goes with its teardown, and the controller reconnects.
#[pin_data]
struct CtrlSink {
    ctrls: Arc<Ctrls>,
    instance: u32,
    gone: Arc<Cancel>,
    status: Arc<Status>,
}

impl CmSink for CtrlSink {
    fn event(&self, ev: &CmEvent) {
        match ev.kind() {
            CmEventKind::Disconnected | CmEventKind::AddrChange => {
                if self.gone.is_closed() {
                    return;
                }
                self.gone.close();
                // Under the list's lock, which a connect holds while it
                // makes the controller live: either the association is
                // refused, or this sees it live.
                let _list = self.ctrls.list.lock();
                self.status.error(Why::Disconnected);
                return;
            }
            CmEventKind::DeviceRemoval => {
                self.gone.close();
                // Brought up or being deleted: its I/O queue shut down,
                // which no request then waits for.
                if self.status.state() != State::Live {
                    self.status.error(Why::Disconnected);
                }
            }
            CmEventKind::EventsLost => {}
            _ => return,
        }
        // Its device goes: the controller is deleted (as the C host's
        // `nvme_rdma_remove_one`), whichever association is its own now.
        let gone = {
            let mut list = self.ctrls.list.lock();
            let Some(c) = find(&mut list, self.instance) else {
                return;
            };
            if ev.kind() == CmEventKind::EventsLost
                && !c.assoc.as_ref().is_some_and(|a| a.device_removed())
            {
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

/// Why an association was not made.
enum AssocError {
    /// The admin queue did not connect.
    Admin(ConnectFailure),
    /// A step of the bring-up failed.
    Start(ctrl::StartError),
    /// Memory, or the controller deleted meanwhile.
    Other(Error),
}

impl AssocError {
    fn errno(&self) -> Error {
        match self {
            AssocError::Admin(f) => f.errno(),
            AssocError::Start(e) => e.errno(),
            AssocError::Other(e) => *e,
        }
    }
}

impl fmt::Display for AssocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssocError::Admin(c) => write!(f, "admin queue: {}", c),
            AssocError::Start(e) => write!(f, "{}", e),
            AssocError::Other(e) => write!(f, "error {}", e.to_errno()),
        }
    }
}

kverbs::kernel_display!(AssocError);

impl From<Error> for AssocError {
    fn from(e: Error) -> Self {
        AssocError::Other(e)
    }
}

impl From<kernel::alloc::AllocError> for AssocError {
    fn from(_: kernel::alloc::AllocError) -> Self {
        AssocError::Other(ENOMEM)
    }
}

/// What [`Ctrls::associate`] made.
struct Made {
    assoc: Assoc,
    info: ctrl::Info,
    /// The I/O path, if it made it (the first association).
    path: Option<Arc<IoPath>>,
}

impl Ctrls {
    /// Makes an association of controller `instance` with the target of
    /// `opts`: the admin queue connected and the controller brought up,
    /// kept alive, and its I/O queue connected, in `path` if it has one
    /// (a reconnect) or in a new one.
    fn associate(
        this: &Arc<Self>,
        instance: u32,
        opts: &Options,
        status: &Arc<Status>,
        path: Option<&Arc<IoPath>>,
    ) -> Result<Made, AssocError> {
        let gone = Arc::new(Cancel::new(), GFP_KERNEL)?;
        status.set_cancel(Some(gone.clone()))?;
        let made = Self::associate_with(this, instance, opts, status, path, gone);
        // Kept on success: an error before the association is the
        // controller's refuses it ([`Status::go_live`]).
        if made.is_err() {
            let _ = status.set_cancel(None);
        }
        made
    }

    fn associate_with(
        this: &Arc<Self>,
        instance: u32,
        opts: &Options,
        status: &Arc<Status>,
        path: Option<&Arc<IoPath>>,
        gone: Arc<Cancel>,
    ) -> Result<Made, AssocError> {
        let (ctrls, sink_gone, sink_status) = (this.clone(), gone.clone(), status.clone());
        let sink = Arc::pin_init(
            pin_init!(CtrlSink {
                ctrls,
                instance,
                gone: sink_gone,
                status: sink_status,
            }),
            GFP_KERNEL,
        )?;
        let q =
            Queue::connect(opts, 0, AQ_DEPTH, 0, sink.clone(), &gone).map_err(AssocError::Admin)?;
        pr_info!(
            "kvnvme{}: admin queue connected to {}:{}, the controller's receive queue {}\n",
            instance,
            opts.traddr,
            opts.trsvcid,
            q.conn.crqsize
        );
        let mut admin = Admin::new(q, gone.clone())?;
        let info = ctrl::start(&mut admin, opts).map_err(AssocError::Start)?;
        pr_info!(
            "kvnvme{}: controller {} ready, NVMe {}, model '{}', serial '{}'\n",
            instance,
            info.cntlid,
            wire::Version(info.vs),
            wire::ascii(&info.id.mn),
            wire::ascii(&info.id.sn)
        );
        let core_gone = gone.clone();
        let core = Arc::pin_init(
            pin_init!(CtrlCore {
                admin <- new_mutex!(admin),
                gone: core_gone,
                ka_sent: AtomicU32::new(0),
            }),
            GFP_KERNEL,
        )?;
        // Keep Alive at half the timeout (the C host's period without
        // traffic based keep-alive), the first half a timeout from now:
        // kept alive while the disks are added (their partitions read).
        let every_ms = opts.keep_alive_tmo * 500;
        let ka = Delayed::new(Arc::new(
            KeepAlive {
                core: core.clone(),
                status: status.clone(),
                instance,
                every_ms,
            },
            GFP_KERNEL,
        )?)?;
        if !opts.test_no_keep_alive {
            ka.arm(every_ms);
        }
        let mut made = Made {
            assoc: Assoc {
                ka: Some(ka),
                io: KVec::new(),
                core,
            },
            info,
            path: None,
        };
        let info = &made.info;
        if info.io_queues == 0 {
            if path.is_some() {
                pr_err!(
                    "kvnvme{}: the controller grants no I/O queue now\n",
                    instance
                );
                return Err(AssocError::Other(EINVAL));
            }
            return Ok(made);
        }
        let conns = match path {
            Some(p) => io::restart(p, opts, info, sink, gone),
            None => {
                let size = opts.queue_size.min(u32::from(info.mqes()) + 1) as u16;
                io::start(opts, info, info.io_queues, size, sink, gone, status.clone()).map(
                    |(p, conns)| {
                        made.path = Some(p);
                        conns
                    },
                )
            }
        };
        made.assoc.io = conns.map_err(AssocError::Start)?;
        Ok(made)
    }

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
        let made = Status::new().and_then(|st| {
            let recovery = recovery::timer(this, instance, &st)?;
            Ok((StatusRef(st), recovery))
        });
        let (status, timer) = match made {
            Ok(m) => m,
            Err(e) => {
                this.said(format_args!("error: out of memory"));
                return Err(e);
            }
        };
        let made = match Self::associate(this, instance, &opts, &status.0, None) {
            Ok(m) => m,
            Err(e) => {
                if let AssocError::Admin(_) = e {
                    pr_err!(
                        "kvnvme{}: {}:{}: {}\n",
                        instance,
                        opts.traddr,
                        opts.trsvcid,
                        e
                    );
                } else {
                    pr_err!("kvnvme{}: {}\n", instance, e);
                }
                this.said(format_args!("error: {}", e));
                return Err(e.errno());
            }
        };
        status.attach(timer, made.path.clone());
        // An error from here on shuts the I/O queue down; one before was
        // the association's refusal.
        if made.assoc.core.gone.is_closed() {
            pr_err!(
                "kvnvme{}: the association failed during the bring-up\n",
                instance
            );
            this.said(format_args!(
                "error: the association failed during the bring-up"
            ));
            return Err(kverbs::errno::econnreset());
        }
        let mut ctrl = Ctrl {
            instance,
            opts,
            status,
            device: made.assoc.device_guid(),
            assoc: Some(made.assoc),
            info: made.info,
            disks: KVec::new(),
            path: made.path,
            reconnects: 0,
        };
        if let Some(p) = &ctrl.path {
            match ns::add_disks(instance, &ctrl.info, p, this.module) {
                Ok(d) => ctrl.disks = d,
                Err(e) => {
                    pr_err!(
                        "kvnvme{}: namespace disks: error {}\n",
                        instance,
                        e.to_errno()
                    );
                    this.said(format_args!(
                        "error: namespace disks: error {}",
                        e.to_errno()
                    ));
                    return Err(e);
                }
            }
        }
        // Into the list, live, unless its device is being removed: the
        // sink was then told before the controller was there, found
        // nothing to drop, and the removal waits for it. Under the list's
        // lock, which the sink takes: a removal or a disconnect told after
        // is the sink's. A controller not kept is dropped outside the lock
        // (its sink's events take it), so a push must not fail: room is
        // made first.
        let refused = {
            let mut list = this.list.lock();
            let assoc = ctrl.assoc.as_ref();
            if assoc.is_some_and(|a| a.device_removed()) {
                Err((ctrl, ENODEV))
            } else if !assoc.is_some_and(|a| ctrl.status.go_live(State::New, &a.core.gone)) {
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
                this.said(format_args!(
                    "error: the association failed during the bring-up"
                ));
            } else {
                this.said(format_args!("error: out of memory"));
            }
            return Err(e);
        }
        this.said(format_args!("instance={}", instance));
        Ok(())
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

/// Shuts the controllers of `gone` down (those live, their target still
/// connected), then drops each: outside the list's lock, as their queues'
/// drops wait for their drains.
fn shut_down(gone: impl IntoIterator<Item = Ctrl>) {
    for mut c in gone {
        let state = c.status.state();
        // Deleting: a recovery no longer starts, nor goes on.
        c.status.delete();
        let connected = c.assoc.as_ref().is_some_and(|a| !a.core.gone.is_closed());
        if state != State::Live || !connected {
            let why = if state == State::Live {
                "the target had"
            } else {
                state.name()
            };
            pr_info!("kvnvme{}: disconnected ({})\n", c.instance, why);
            continue;
        }
        // The disks while the I/O queue carries their last data, then the
        // queue, then the controller's shutdown.
        drop(core::mem::take(&mut c.disks));
        if let Some(p) = &c.path {
            p.shutdown();
        }
        let Some(a) = c.assoc.as_mut() else {
            continue;
        };
        drop(core::mem::take(&mut a.io));
        // No Keep Alive after (one under way is waited for).
        drop(a.ka.take());
        match ctrl::shutdown(&mut a.core.admin.lock(), &c.info) {
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

/// The host's RDMA client: a device that goes takes the controllers whose
/// last association was on it, whatever their state (the C host's
/// `nvme_rdma_remove_one`): one reconnecting has no connection on it for
/// the CM to tell of its removal.
struct NvmeClient {
    ctrls: Arc<Ctrls>,
}

kverbs::client_slot!(NvmeClient);

impl Client for NvmeClient {
    type DeviceData = ();

    fn add(&self, _dev: &Device) -> Result {
        Ok(())
    }

    fn remove(&self, dev: &Device, _data: ()) {
        let guid = Some(dev.node_guid());
        loop {
            let c = {
                let mut list = self.ctrls.list.lock();
                let Some(slot) = list
                    .iter_mut()
                    .find(|s| s.as_ref().is_some_and(|c| c.device == guid))
                else {
                    return;
                };
                slot.take()
            };
            if let Some(c) = c {
                pr_info!("kvnvme{}: device removed: controller deleted\n", c.instance);
                // Outside the list's lock: its queues' drops wait for
                // their drains.
                drop(c);
            }
        }
    }
}

struct KverbsNvme {
    ctrls: Arc<Ctrls>,
    _client: Registration<NvmeClient>,
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
        let client = Registration::new(
            c_str!("kverbs_nvme"),
            NvmeClient {
                ctrls: ctrls.clone(),
            },
        )?;
        Ok(KverbsNvme {
            ctrls,
            _client: client,
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
