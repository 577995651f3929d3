// SPDX-License-Identifier: GPL-2.0

//! `io`: RAM disks whose requests also travel as capsules on the layer's
//! capsule queue (`kverbs::io`) to a peer QP of the same device, and end
//! when the peer's response comes back, in the queue's callback: the I/O
//! path of a block ULP without data on the wire (kverbs_io.sh).
//!
//! Writing to `/sys/kernel/debug/kverbs_selftest/io`:
//!
//! - `add N DEVICE [depth=D] [mode=ram|rdma] [inv=remote|local|swap]`:
//!   disk `kvioN` of 16 MiB, one hardware queue of `D` requests (32; 1 to
//!   128), and its capsule queue on an RC QP of its own PD connected to
//!   the peer's, in another PD of `DEVICE`. `ram`: each read or write is
//!   copied in the disk's RAM in `queue_rq`, then its capsule (64 bytes:
//!   command id, tag, operation) is submitted; the peer, a task, answers
//!   each with a response (16 bytes: command id, tag, status). `rdma`:
//!   the data is in the peer's buffer; the queue registers each request's
//!   pages (an MR a tag), its capsule names them (sector, length, rkey,
//!   address), and the peer moves them with RDMA WRITE (a read) or READ
//!   (a write) before it answers with a SEND that invalidates the rkey
//!   (`inv=remote`), a plain SEND (`local`: the queue invalidates), or,
//!   two requests at a time, SENDs that each invalidate the other's rkey
//!   (`swap`: the queue refuses both answers);
//! - `stop N`: the peer reads capsules on but answers none;
//! - `bad_cid N K`: the peer answers its next `K` capsules with the wrong
//!   command id (the queue reports them, their requests stay carried);
//! - `fail N K`: the peer answers its next `K` capsules with an error
//!   status (their requests end with `EIO`);
//! - `drop_in_handler N`: the handler drops the disk's queue at its next
//!   response (the queue then shuts down on kverbs.ko's workqueue);
//! - `shutdown N [nested|retry]`: shuts the disk's queue down, leaving it
//!   in place (its requests then end with `EIO`); `nested`: the handler's
//!   drop, which the shutdown makes, takes the queue and shuts it down
//!   again; `retry`: the requests it carries are requeued instead
//!   (`Carried::Retry`), and come back to `queue_rq`, which ends them for
//!   a queue shut down;
//! - `del N`: shuts the queue down (the requests it carries end with
//!   `EIO`), stops the peer, deletes the disk;
//! - `forget N`: stops the peer, then leaks the disk, and with it its
//!   queue data and queue: kverbs.ko shuts the queue down and deletes the
//!   disk when this module goes (kverbs_forget.sh).
//!
//! A device removed takes its disks with it. Reading the file gives a
//! line a disk: the queue's counters, the driver's and the peer's.

mod peer;

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use kernel::{
    new_mutex, new_spinlock,
    prelude::*,
    sync::{Arc, Mutex, SpinLock},
    workqueue,
};
use kverbs::{
    blk::{GenDisk, GenDiskBuilder, Op, Operations, Request, TagSet},
    cq::{Cq, PollCtx},
    device::Device,
    dma::DmaBuf,
    io::{Answer, Carried, IoConfig, IoError, IoHandler, IoQueue},
    pd::Pd,
    qp::{Access, Qp, QpCaps, Rts},
    sg::SgTable,
    ARef, IrqLock, Show, Store,
};
use peer::{Peer, PeerCtl};

const CAPSULE: usize = 64;
const RESPONSE: usize = 16;
const MIB: usize = 16;
/// The pages a registered request takes at most: 512 KiB, unaligned.
const MAX_PAGES: u32 = 129;

/// A disk's counters: its driver's, its handler's, its peer's.
#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    writes: AtomicU64,
    flushes: AtomicU64,
    /// Requests ended by the driver for a queue shut down (`ENOLINK`).
    no_queue: AtomicU64,
    busy: AtomicU64,
    /// Errors the queue told the handler of.
    unknown: AtomicU64,
    errors: AtomicU64,
    /// The peer's: capsules answered, read and not answered, answered
    /// with a wrong command id, answered with an error.
    answered: AtomicU64,
    unanswered: AtomicU64,
    bad_cids: AtomicU64,
    fails: AtomicU64,
    /// Shutdowns called by the handler's drop.
    drop_shutdowns: AtomicU64,
}

fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// Where a disk's data is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// In the disk's RAM, copied in `queue_rq`; capsules carry no data.
    Ram,
    /// In the peer's buffer: each read or write's pages are registered by
    /// the queue, and the peer moves the data with RDMA WRITE or READ.
    Rdma,
}

/// How the peer answers a read or write of `Mode::Rdma`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Inv {
    /// SEND with invalidate of the request's rkey.
    Remote,
    /// A plain SEND: the queue invalidates.
    Local,
    /// Two requests at a time, each answered with a SEND that
    /// invalidates the other's rkey.
    Swap,
}

/// A disk's queue data: its memory, its capsule queue.
#[pin_data]
struct Dev {
    mode: Mode,
    #[pin]
    data: SpinLock<VVec<u8>>,
    #[pin]
    queue: IrqLock<Option<Arc<IoQueue>>>,
    next_cid: AtomicU32,
    /// The handler drops the queue at its next response.
    drop_next: AtomicBool,
    /// The handler's drop takes the queue and shuts it down.
    shutdown_in_drop: AtomicBool,
    c: Counters,
}

impl Dev {
    /// Copies `rq`'s data in RAM; the capsule's operation code.
    fn transfer(&self, rq: &Request<IoDisk>) -> Result<u8> {
        let op = rq.op();
        if op == Op::Flush {
            bump(&self.c.flushes);
            return Ok(2);
        }
        if op != Op::Read && op != Op::Write {
            return Err(kverbs::errno::eopnotsupp());
        }
        if self.mode == Mode::Rdma {
            bump(if op == Op::Write {
                &self.c.writes
            } else {
                &self.c.reads
            });
            return Ok(u8::from(op == Op::Write));
        }
        let off = usize::try_from(rq.sector()).map_err(|_| EIO)? * 512;
        let len = rq.bytes() as usize;
        let mut table = SgTable::new(u32::from(rq.nr_phys_segments()).max(1), true)?;
        let mut sg = rq.map_sg(&mut table)?;
        let mut data = self.data.lock();
        let end = off.checked_add(len).ok_or(EIO)?;
        let mem = data.get_mut(off..end).ok_or(EIO)?;
        let done = if op == Op::Write {
            bump(&self.c.writes);
            sg.copy_to(mem, 0)?
        } else {
            bump(&self.c.reads);
            sg.copy_from(mem, 0)?
        };
        if done != len {
            return Err(EIO);
        }
        Ok(u8::from(op == Op::Write))
    }
}

/// The driver of the disks.
struct IoDisk;

impl Operations for IoDisk {
    type QueueData = Dev;

    fn queue_rq(
        d: &Dev,
        rq: ARef<Request<Self>>,
        _is_last: bool,
    ) -> Result<(), ARef<Request<Self>>> {
        let op = match d.transfer(&rq) {
            Ok(op) => op,
            Err(e) => {
                let _ = Request::end(rq, Err(e));
                return Ok(());
            }
        };
        let cid = d.next_cid.fetch_add(1, Ordering::Relaxed) as u16;
        let tag = rq.tag() as u16;
        let sector = rq.sector();
        let r = d.queue.with(|q| match q {
            Some(q) => q.submit(rq, cid, |remote, c| {
                c[0..2].copy_from_slice(&cid.to_le_bytes());
                c[2..4].copy_from_slice(&tag.to_le_bytes());
                c[4] = op;
                if let Some(r) = remote {
                    c[8..16].copy_from_slice(&sector.to_le_bytes());
                    c[16..20].copy_from_slice(&r.len.to_le_bytes());
                    c[20..24].copy_from_slice(&r.rkey.to_le_bytes());
                    c[24..32].copy_from_slice(&r.addr.to_le_bytes());
                }
            }),
            None => Err((rq, kverbs::errno::enolink())),
        });
        match r {
            Ok(()) => Ok(()),
            Err((rq, e)) if e.to_errno() == EBUSY.to_errno() => {
                bump(&d.c.busy);
                Err(rq)
            }
            Err((rq, _)) => {
                bump(&d.c.no_queue);
                let _ = Request::end(rq, Err(EIO));
                Ok(())
            }
        }
    }

    fn complete(rq: ARef<Request<Self>>) {
        let _ = Request::end_ok(rq);
    }
}

/// The handler of a disk's queue.
struct Handler {
    dev: Arc<Dev>,
}

impl Drop for Handler {
    fn drop(&mut self) {
        if self.dev.shutdown_in_drop.load(Ordering::Relaxed) {
            // Dropped by the queue's shutdown, on its task: this returns
            // at once.
            if let Some(q) = self.dev.queue.with(|q| q.take()) {
                q.shutdown(Carried::Fail);
                bump(&self.dev.c.drop_shutdowns);
            }
        }
    }
}

impl IoHandler for Handler {
    fn response(&self, rsp: &[u8]) -> Option<Answer> {
        if self.dev.drop_next.swap(false, Ordering::Relaxed) {
            let q = self.dev.queue.with(|q| q.take());
            // Dropped here, in the callback: it shuts down later.
            drop(q);
        }
        let cid = u16::from_le_bytes([rsp[0], rsp[1]]);
        let tag = u16::from_le_bytes([rsp[2], rsp[3]]);
        let status = if rsp[4] == 0 { Ok(()) } else { Err(EIO) };
        Some(Answer {
            tag,
            cid,
            status,
            retry: false,
        })
    }

    fn error(&self, e: IoError) {
        match e {
            IoError::UnknownCommand { .. } | IoError::BogusInvalidation { .. } => {
                bump(&self.dev.c.unknown)
            }
            _ => bump(&self.dev.c.errors),
        }
    }
}

/// A disk: its number, device, peer and disk.
///
/// Dropped, it shuts the queue down, stops the peer and deletes the disk,
/// in that order (the disk's deletion waits for the requests the queue
/// ends); forgotten (`forgotten`), it only stops the peer.
pub(crate) struct Disk {
    n: u32,
    dev: ARef<Device>,
    ctl: Arc<PeerCtl>,
    queue_data: Arc<Dev>,
    disk: Option<GenDisk<IoDisk>>,
    forgotten: bool,
}

impl Disk {
    /// Shuts the queue down, stops the peer, deletes the disk.
    fn delete(self) {
        drop(self);
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        if self.forgotten {
            // The disk, which holds its queue data and so the queue: both
            // leaked (the device's reference is not).
            core::mem::forget(self.disk.take());
        } else if let Some(q) = self.queue_data.queue.with(|q| q.take()) {
            q.shutdown(Carried::Fail);
        }
        self.ctl.stop();
        // Then the disk, a field, is deleted.
    }
}

/// `io`: the control file and the disks.
pub(crate) struct IoFile {
    module: &'static ThisModule,
    devices: Arc<crate::Devices>,
    disks: Arc<Disks>,
}

/// The disks, shared with the client (a device's removal deletes its own).
pub(crate) type Disks = Mutex<KVec<Option<Disk>>>;

/// A new list of disks.
pub(crate) fn new_disks() -> Result<Arc<Disks>> {
    Arc::pin_init(new_mutex!(KVec::new()), GFP_KERNEL)
}

/// Deletes the disks of `dev`.
pub(crate) fn remove_device(disks: &Disks, dev: &Device) {
    loop {
        let d = disks
            .lock()
            .iter_mut()
            .find(|s| s.as_ref().is_some_and(|d| d.dev.same_as(dev)))
            .and_then(|s| s.take());
        match d {
            Some(d) => d.delete(),
            None => break,
        }
    }
}

/// The options of `add`: `depth=` (32), `mode=` (`ram`), `inv=` (`remote`).
fn options(args: &[&str]) -> Result<(u16, Mode, Inv)> {
    let (mut depth, mut mode, mut inv) = (32, Mode::Ram, Inv::Remote);
    for a in args {
        match a.split_once('=') {
            Some(("depth", v)) => depth = v.parse().map_err(|_| EINVAL)?,
            Some(("mode", "ram")) => mode = Mode::Ram,
            Some(("mode", "rdma")) => mode = Mode::Rdma,
            Some(("inv", "remote")) => inv = Inv::Remote,
            Some(("inv", "local")) => inv = Inv::Local,
            Some(("inv", "swap")) => inv = Inv::Swap,
            _ => {
                pr_warn!("io: unknown option '{}'\n", a);
                return Err(EINVAL);
            }
        }
    }
    if !(1..=128).contains(&depth) {
        return Err(EINVAL);
    }
    Ok((depth, mode, inv))
}

/// The host's QP and the peer's, connected, each in its own PD, and the
/// peer's CQ and PD.
fn connect(dev: &Device, hpd: &Pd, hcq: &Cq, depth: u32) -> Result<(Qp<Rts>, Qp<Rts>, Cq, Pd)> {
    let ppd = Pd::new(dev)?;
    let pcq = Cq::new(dev, 2 * depth + 4, PollCtx::Softirq)?;
    let port = crate::common::port(dev);
    let h = Qp::new_rc(
        hpd,
        port,
        hcq,
        hcq,
        QpCaps {
            max_send_wr: 3 * depth,
            max_recv_wr: depth,
            ..Default::default()
        },
    )?;
    // Two SGEs: a transfer may cross a chunk of the peer's data.
    let p = Qp::new_rc(
        &ppd,
        port,
        &pcq,
        &pcq,
        QpCaps {
            max_sge: 2,
            ..crate::common::caps(depth)
        },
    )?;
    let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    let (h, p) = crate::common::connect_pair(dev, h, p, access)?;
    Ok((h, p, pcq, ppd))
}

impl IoFile {
    pub(crate) fn new(
        module: &'static ThisModule,
        devices: Arc<crate::Devices>,
        disks: Arc<Disks>,
    ) -> Self {
        IoFile {
            module,
            devices,
            disks,
        }
    }

    fn add(&self, n: u32, name: &str, args: &[&str]) -> Result {
        let (depth, mode, inv) = options(args)?;
        let dev = self
            .devices
            .lock()
            .iter()
            .find(|d| d.name().as_str() == name)
            .cloned()
            .ok_or(ENODEV)?;
        let mut list = self.disks.lock();
        if list.iter().flatten().any(|d| d.n == n) {
            return Err(EEXIST);
        }
        let d32 = u32::from(depth);
        let hpd = Pd::new(&dev)?;
        let hcq = Cq::new(&dev, 4 * d32 + 4, PollCtx::Softirq)?;
        let (hqp, pqp, pcq, ppd) = connect(&dev, &hpd, &hcq, d32)?;
        let qd = Arc::pin_init(
            try_pin_init!(Dev {
                data <- new_spinlock!(VVec::from_elem(
                    0u8,
                    if mode == Mode::Ram { MIB << 20 } else { 0 },
                    GFP_KERNEL
                )?),
                mode,
                queue <- IrqLock::new(None),
                next_cid: AtomicU32::new(0),
                drop_next: AtomicBool::new(false),
                shutdown_in_drop: AtomicBool::new(false),
                c: Counters::default(),
            }? Error),
            GFP_KERNEL,
        )?;
        let ctl = PeerCtl::new()?;
        let peer = Peer {
            qp: pqp,
            rbuf: Arc::new(DmaBuf::new(&dev, usize::from(depth) * CAPSULE)?, GFP_KERNEL)?,
            sbuf: Arc::new(DmaBuf::new(&dev, RESPONSE)?, GFP_KERNEL)?,
            data: match mode {
                Mode::Ram => None,
                Mode::Rdma => Some((Arc::new(DmaBuf::new(&dev, MIB << 20)?, GFP_KERNEL)?, inv)),
            },
            depth: usize::from(depth),
            ctl: ctl.clone(),
            dev: qd.clone(),
            _cq: pcq,
            _pd: ppd,
        };
        if workqueue::system_unbound()
            .try_spawn(GFP_KERNEL, move || peer.run())
            .is_err()
        {
            return Err(ENOMEM);
        }
        let stop = |ctl: &PeerCtl| ctl.stop();
        let handler = match Arc::new(Handler { dev: qd.clone() }, GFP_KERNEL) {
            Ok(h) => h,
            Err(e) => {
                stop(&ctl);
                return Err(e.into());
            }
        };
        let cfg = IoConfig {
            depth,
            capsule_len: CAPSULE,
            response_len: RESPONSE,
            // A request of 512 KiB, unaligned: 129 pages.
            max_pages: if mode == Mode::Rdma { MAX_PAGES } else { 0 },
            inline_segments: 0,
            // No response asks for a retry; `shutdown N retry` requeues
            // what its queue carries, once.
            max_retries: 1,
        };
        // The host's CQ and PD stay with its QP, which the queue takes.
        drop((hcq, hpd));
        let q = match IoQueue::new(hqp, cfg, handler).and_then(|q| Ok(Arc::new(q, GFP_KERNEL)?)) {
            Ok(q) => q,
            Err(e) => {
                stop(&ctl);
                return Err(e);
            }
        };
        qd.queue.with(|slot| *slot = Some(q));
        let tags = TagSet::new(1, u32::from(depth), 0).and_then(|t| Ok(Arc::new(t, GFP_KERNEL)?));
        let disk = tags.and_then(|tags| {
            GenDiskBuilder::new()
                .capacity_sectors((MIB << 20) as u64 / 512)
                .max_hw_sectors(1024)
                .max_segments(64)
                // Registered pages: no gap within a page between segments.
                .virt_boundary_mask(if mode == Mode::Rdma { 4095 } else { 0 })
                // A peer that answers two reads at a time would hold the
                // adding's single read of the partition table.
                .partitions(!(mode == Mode::Rdma && inv == Inv::Swap))
                .write_cache(true)
                .fua(true)
                .build(format_args!("kvio{}", n), tags, qd.clone(), self.module)
        });
        let disk = match disk {
            Ok(d) => d,
            Err(e) => {
                if let Some(q) = qd.queue.with(|q| q.take()) {
                    q.shutdown(Carried::Fail);
                }
                stop(&ctl);
                return Err(e);
            }
        };
        crate::common::put(
            &mut list,
            Disk {
                n,
                dev,
                ctl,
                queue_data: qd,
                disk: Some(disk),
                forgotten: false,
            },
        )
    }

    /// Runs `f` on disk `n`.
    fn with(&self, n: u32, f: impl FnOnce(&Disk)) -> Result {
        let list = self.disks.lock();
        let d = list.iter().flatten().find(|d| d.n == n).ok_or(ENOENT)?;
        f(d);
        Ok(())
    }

    fn take(&self, n: u32) -> Result<Disk> {
        self.disks
            .lock()
            .iter_mut()
            .find(|s| s.as_ref().is_some_and(|d| d.n == n))
            .and_then(|s| s.take())
            .ok_or(ENOENT)
    }
}

impl Drop for IoFile {
    fn drop(&mut self) {
        loop {
            let d = self.disks.lock().iter_mut().find_map(|s| s.take());
            match d {
                Some(d) => d.delete(),
                None => break,
            }
        }
    }
}

impl Store for IoFile {
    fn store(&self, input: &[u8]) -> Result {
        let (cmd, n, rest) = crate::common::command(input)?;
        let count = || -> Result<u32> {
            match rest[..] {
                [k] => k.parse().map_err(|_| EINVAL),
                _ => Err(EINVAL),
            }
        };
        let none = || if rest.is_empty() { Ok(()) } else { Err(EINVAL) };
        match cmd {
            "add" => {
                let (name, args) = rest.split_first().ok_or(EINVAL)?;
                self.add(n, name, args)
            }
            "stop" => {
                none()?;
                self.with(n, |d| d.ctl.stop.store(true, Ordering::Relaxed))
            }
            "bad_cid" => {
                let k = count()?;
                self.with(n, |d| d.ctl.bad_cid.store(k, Ordering::Relaxed))
            }
            "fail" => {
                let k = count()?;
                self.with(n, |d| d.ctl.fail.store(k, Ordering::Relaxed))
            }
            "drop_in_handler" => {
                none()?;
                self.with(n, |d| d.queue_data.drop_next.store(true, Ordering::Relaxed))
            }
            "shutdown" => {
                let (nested, carried) = match rest[..] {
                    [] => (false, Carried::Fail),
                    ["nested"] => (true, Carried::Fail),
                    ["retry"] => (false, Carried::Retry),
                    _ => return Err(EINVAL),
                };
                let mut q = None;
                self.with(n, |d| {
                    let m = &d.queue_data;
                    m.shutdown_in_drop.store(nested, Ordering::Relaxed);
                    q = m.queue.with(|q| q.clone());
                })?;
                // Outside the list's lock: it waits for the drain.
                q.ok_or(ENOENT)?.shutdown(carried);
                Ok(())
            }
            "del" => {
                none()?;
                // Outside the list's lock: it waits for the requests.
                self.take(n)?.delete();
                Ok(())
            }
            "forget" => {
                none()?;
                let mut d = self.take(n)?;
                d.forgotten = true;
                drop(d);
                Ok(())
            }
            _ => Err(EINVAL),
        }
    }
}

impl Show for IoFile {
    fn show(&self, out: &mut dyn core::fmt::Write) -> Result {
        for d in self.disks.lock().iter().flatten() {
            let m = &d.queue_data;
            let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
            let s = m
                .queue
                .with(|q| q.as_ref().map(|q| (q.stats(), q.is_shut_down())));
            write!(out, "kvio{}: ", d.n)?;
            match s {
                Some((s, down)) => write!(out, "queue {} {}", if down { "down" } else { "up" }, s)?,
                None => write!(out, "queue gone")?,
            }
            writeln!(
                out,
                " | reads {} writes {} flushes {} no_queue {} busy {} unknown {} errors {} | \
                 peer answered {} unanswered {} bad_cids {} fails {} | drop_shutdowns {}",
                c(&m.c.reads),
                c(&m.c.writes),
                c(&m.c.flushes),
                c(&m.c.no_queue),
                c(&m.c.busy),
                c(&m.c.unknown),
                c(&m.c.errors),
                c(&m.c.answered),
                c(&m.c.unanswered),
                c(&m.c.bad_cids),
                c(&m.c.fails),
                c(&m.c.drop_shutdowns),
            )?;
        }
        Ok(())
    }
}
