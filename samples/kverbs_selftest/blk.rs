// SPDX-License-Identifier: GPL-2.0

//! `blk`: RAM disks on the layer's block binding (`kverbs::blk`), in safe
//! Rust, to test it without RDMA (kverbs_blk.sh).
//!
//! Writing to `/sys/kernel/debug/kverbs_selftest/blk`:
//!
//! - `add N [size=MiB] [kib=KiB] [lbs=BYTES] [hwq=N] [mode=direct|complete|hold] [vb=MASK]`:
//!   disk `kvblkN` of `size` MiB (16), or `kib` KiB (4 to 262144, a
//!   multiple of 4), of `lbs`-byte blocks (512), `hwq`
//!   hardware queues (1) of 64 requests, ending each request in
//!   `queue_rq` (`direct`) or, once its data is copied there, through
//!   `Request::complete` and the completion callback (`complete`; a
//!   failed one is ended at once), or holding it (`hold`) until it times
//!   out (`Operations::timeout` ends it with `ETIMEDOUT`) or is released;
//!   requests of at most 512 KiB in at most 64 segments, segments
//!   bounded by `vb` (0: none); a write cache and FUA;
//! - `del N`: deletes it (waiting for its requests);
//! - `forget N`: leaks it (`mem::forget`): kverbs.ko deletes it when this
//!   module goes (kverbs_forget.sh);
//! - `fail_next N K`: its next `K` reads or writes end with `EIO`;
//! - `busy_next N K`: its next `K` requests are given back busy (the block
//!   layer requeues them);
//! - `requeue_next N K`: its next `K` requests are requeued by the driver
//!   (`Request::requeue`: dispatched again, their count of requeues one
//!   more);
//! - `release N`: ends the requests it holds, successfully.
//!
//! Reading it gives a line a disk: its counters. Each read or write maps
//! its request into a scatter-gather table (`Request::map_sg`) and checks
//! the entries: at most the request's segments, their bytes the request's
//! (else `bad maps` counts it and it fails with `EIO`).

use crate::common::take_one;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::{
    new_mutex, new_spinlock,
    prelude::*,
    sync::{Arc, Mutex, SpinLock},
};
use kverbs::{
    blk::{GenDisk, GenDiskBuilder, Op, Operations, Request, TagSet, TimeoutAction},
    sg::SgTable,
    ARef, Show, Store,
};

/// How a disk ends its requests.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Direct,
    Complete,
    Hold,
}

/// A disk's counters, and its commands' counts still to take.
#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    writes: AtomicU64,
    flushes: AtomicU64,
    fua: AtomicU64,
    failed: AtomicU64,
    busy: AtomicU64,
    completed: AtomicU64,
    bad_maps: AtomicU64,
    max_segments: AtomicU32,
    hw_queues_seen: AtomicU32,
    fail_next: AtomicU32,
    busy_next: AtomicU32,
    requeue_next: AtomicU32,
    requeued: AtomicU64,
    /// Dispatches of a request requeued before (`Request::requeues` > 0).
    requeued_seen: AtomicU64,
    /// `Request::requeues` of the last request served.
    last_requeues: AtomicU32,
    timeouts: AtomicU64,
}

/// A disk's memory and counters (its queue data).
#[pin_data]
struct Mem {
    #[pin]
    data: SpinLock<VVec<u8>>,
    mode: Mode,
    c: Counters,
    /// The requests held (`hold`), a slot each.
    #[pin]
    held: SpinLock<KVec<Option<ARef<Request<RamDisk>>>>>,
}

impl Mem {
    /// Carries out `rq`'s read, write or flush.
    fn transfer(&self, rq: &Request<RamDisk>) -> Result {
        let op = rq.op();
        if op == Op::Flush {
            self.c.flushes.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if op != Op::Read && op != Op::Write {
            return Err(kverbs::errno::eopnotsupp());
        }
        if take_one(&self.c.fail_next) {
            self.c.failed.fetch_add(1, Ordering::Relaxed);
            return Err(EIO);
        }
        if rq.fua() {
            self.c.fua.fetch_add(1, Ordering::Relaxed);
        }
        self.c
            .hw_queues_seen
            .fetch_or(1 << rq.hw_queue().min(31), Ordering::Relaxed);
        let segs = u32::from(rq.nr_phys_segments());
        self.c.max_segments.fetch_max(segs, Ordering::Relaxed);
        let off = usize::try_from(rq.sector()).map_err(|_| EIO)? * 512;
        let len = rq.bytes() as usize;
        let mut table = SgTable::new(segs.max(1), true)?;
        let mut sg = rq.map_sg(&mut table)?;
        let total: u64 = sg.lengths().map(u64::from).sum();
        if sg.nents() > segs || total != len as u64 {
            self.c.bad_maps.fetch_add(1, Ordering::Relaxed);
            return Err(EIO);
        }
        let mut data = self.data.lock();
        let end = off.checked_add(len).ok_or(EIO)?;
        let Some(mem) = data.get_mut(off..end) else {
            return Err(EIO);
        };
        let done = if op == Op::Write {
            self.c.writes.fetch_add(1, Ordering::Relaxed);
            sg.copy_to(mem, 0)?
        } else {
            self.c.reads.fetch_add(1, Ordering::Relaxed);
            sg.copy_from(mem, 0)?
        };
        if done != len {
            self.c.bad_maps.fetch_add(1, Ordering::Relaxed);
            return Err(EIO);
        }
        Ok(())
    }
}

/// The driver of the RAM disks.
struct RamDisk;

impl Operations for RamDisk {
    type QueueData = Mem;

    fn queue_rq(
        m: &Mem,
        rq: ARef<Request<Self>>,
        _is_last: bool,
    ) -> Result<(), ARef<Request<Self>>> {
        if take_one(&m.c.busy_next) {
            m.c.busy.fetch_add(1, Ordering::Relaxed);
            return Err(rq);
        }
        if rq.requeues() > 0 {
            m.c.requeued_seen.fetch_add(1, Ordering::Relaxed);
        }
        if take_one(&m.c.requeue_next) {
            m.c.requeued.fetch_add(1, Ordering::Relaxed);
            if let Err(rq) = Request::requeue(rq) {
                let _ = Request::end(rq, Err(EIO));
            }
            return Ok(());
        }
        m.c.last_requeues.store(rq.requeues(), Ordering::Relaxed);
        if m.mode == Mode::Hold {
            let mut held = m.held.lock();
            if let Some(free) = held.iter_mut().find(|s| s.is_none()) {
                *free = Some(rq);
            } else if held.reserve(1, GFP_ATOMIC).is_ok() {
                // Room made: the push does not fail.
                let _ = held.push(Some(rq), GFP_ATOMIC);
            } else {
                drop(held);
                let _ = Request::end(rq, Err(ENOMEM));
            }
            return Ok(());
        }
        // The copy here, in process context: the memory's lock is not
        // taken where `complete` runs (softirq).
        let r = m.transfer(&rq);
        if m.mode == Mode::Complete && r.is_ok() {
            let _ = Request::complete(rq);
        } else {
            let _ = Request::end(rq, r);
        }
        Ok(())
    }

    fn complete(rq: ARef<Request<Self>>) {
        rq.queue_data().c.completed.fetch_add(1, Ordering::Relaxed);
        let _ = Request::end_ok(rq);
    }

    fn timeout(m: &Mem, tag: u32, hw_queue: u32) -> TimeoutAction {
        let rq = {
            let mut held = m.held.lock();
            held.iter_mut()
                .find(|s| {
                    s.as_ref()
                        .is_some_and(|r| r.tag() == tag && r.hw_queue() == hw_queue)
                })
                .and_then(|s| s.take())
        };
        let Some(rq) = rq else {
            return TimeoutAction::ResetTimer;
        };
        m.c.timeouts.fetch_add(1, Ordering::Relaxed);
        let _ = Request::end(rq, Err(kverbs::errno::etimedout()));
        TimeoutAction::Done
    }
}

/// A disk and its number.
struct Disk {
    n: u32,
    disk: GenDisk<RamDisk>,
}

/// `blk`: the control file and the disks.
pub(crate) struct BlkFile {
    module: &'static ThisModule,
    disks: Arc<Mutex<KVec<Option<Disk>>>>,
}

/// The value of `key=` in `args`, or `default`.
fn opt(args: &[&str], key: &str, default: u64) -> Result<u64> {
    for a in args {
        if let Some((k, v)) = a.split_once('=') {
            if k == key {
                return v.parse().map_err(|_| EINVAL);
            }
        } else {
            return Err(EINVAL);
        }
    }
    Ok(default)
}

impl BlkFile {
    pub(crate) fn new(module: &'static ThisModule) -> Result<Self> {
        Ok(BlkFile {
            module,
            disks: Arc::pin_init(new_mutex!(KVec::new()), GFP_KERNEL)?,
        })
    }

    fn add(&self, n: u32, args: &[&str]) -> Result {
        for a in args {
            let k = a.split_once('=').map(|(k, _)| k).ok_or(EINVAL)?;
            if !["size", "kib", "lbs", "hwq", "mode", "vb"].contains(&k) {
                pr_warn!("blk: unknown option '{}'\n", a);
                return Err(EINVAL);
            }
        }
        let size_mib = opt(args, "size", 16)?;
        let kib = opt(args, "kib", 0)?;
        let lbs = opt(args, "lbs", 512)?;
        let hwq = opt(args, "hwq", 1)?;
        let vb = opt(args, "vb", 0)?;
        let mode = match args.iter().find_map(|a| a.strip_prefix("mode=")) {
            None | Some("direct") => Mode::Direct,
            Some("complete") => Mode::Complete,
            Some("hold") => Mode::Hold,
            Some(_) => return Err(EINVAL),
        };
        if !(1..=256).contains(&size_mib)
            || !(1..=8).contains(&hwq)
            || (kib != 0 && (!(4..=1 << 18).contains(&kib) || kib % 4 != 0))
        {
            return Err(EINVAL);
        }
        let mut list = self.disks.lock();
        if list.iter().flatten().any(|d| d.n == n) {
            return Err(EEXIST);
        }
        let bytes = if kib != 0 {
            (kib as usize) << 10
        } else {
            (size_mib as usize) << 20
        };
        let data = VVec::from_elem(0u8, bytes, GFP_KERNEL)?;
        let mem = Arc::pin_init(
            try_pin_init!(Mem {
                data <- new_spinlock!(data),
                mode,
                c: Counters::default(),
                held <- new_spinlock!(KVec::new()),
            }? Error),
            GFP_KERNEL,
        )?;
        let tags = Arc::new(TagSet::new(hwq as u32, 64, 0)?, GFP_KERNEL)?;
        let disk = GenDiskBuilder::new()
            .logical_block_size(u32::try_from(lbs).map_err(|_| EINVAL)?)?
            .capacity_sectors(bytes as u64 / 512)
            .max_hw_sectors(1024)
            .max_segments(64)
            .virt_boundary_mask(vb)
            .write_cache(true)
            .fua(true)
            // A disk that holds its requests would hold the adding's read
            // of the partition table for the timeout (30 s).
            .partitions(mode != Mode::Hold)
            .build(format_args!("kvblk{}", n), tags, mem, self.module)?;
        crate::common::put(&mut list, Disk { n, disk })
    }

    /// Runs `f` on disk `n`'s memory.
    fn with(&self, n: u32, f: impl FnOnce(&Mem)) -> Result {
        let list = self.disks.lock();
        let d = list.iter().flatten().find(|d| d.n == n).ok_or(ENOENT)?;
        f(d.disk.queue_data());
        Ok(())
    }
}

impl Store for BlkFile {
    fn store(&self, input: &[u8]) -> Result {
        let (cmd, n, rest) = crate::common::command(input)?;
        let count = || -> Result<u32> {
            if rest.len() != 1 {
                return Err(EINVAL);
            }
            rest[0].parse().map_err(|_| EINVAL)
        };
        match cmd {
            "add" => self.add(n, &rest),
            "del" | "forget" => {
                if !rest.is_empty() {
                    return Err(EINVAL);
                }
                let d = {
                    let mut list = self.disks.lock();
                    list.iter_mut()
                        .find(|s| s.as_ref().is_some_and(|d| d.n == n))
                        .and_then(|s| s.take())
                        .ok_or(ENOENT)?
                };
                if cmd == "forget" {
                    core::mem::forget(d);
                } else {
                    // Deleted outside the lock: it waits for its requests.
                    drop(d);
                }
                Ok(())
            }
            "fail_next" => {
                let k = count()?;
                self.with(n, |m| m.c.fail_next.store(k, Ordering::Relaxed))
            }
            "busy_next" => {
                let k = count()?;
                self.with(n, |m| m.c.busy_next.store(k, Ordering::Relaxed))
            }
            "requeue_next" => {
                let k = count()?;
                self.with(n, |m| m.c.requeue_next.store(k, Ordering::Relaxed))
            }
            "release" => {
                if !rest.is_empty() {
                    return Err(EINVAL);
                }
                self.with(n, |m| {
                    // One at a time, each ended outside the lock.
                    loop {
                        let rq = m.held.lock().iter_mut().find_map(|s| s.take());
                        let Some(rq) = rq else {
                            break;
                        };
                        let _ = Request::end_ok(rq);
                    }
                })
            }
            _ => Err(EINVAL),
        }
    }
}

impl Show for BlkFile {
    fn show(&self, out: &mut dyn core::fmt::Write) -> Result {
        for d in self.disks.lock().iter().flatten() {
            let m = d.disk.queue_data();
            let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
            writeln!(
                out,
                "kvblk{}: reads {} writes {} flushes {} fua {} failed {} busy {} requeued {} \
                 requeued_seen {} last_requeues {} completed {} timeouts {} bad_maps {} \
                 max_segments {} hw_queues_seen {:#x}",
                d.n,
                c(&m.c.reads),
                c(&m.c.writes),
                c(&m.c.flushes),
                c(&m.c.fua),
                c(&m.c.failed),
                c(&m.c.busy),
                c(&m.c.requeued),
                c(&m.c.requeued_seen),
                m.c.last_requeues.load(Ordering::Relaxed),
                c(&m.c.completed),
                c(&m.c.timeouts),
                c(&m.c.bad_maps),
                m.c.max_segments.load(Ordering::Relaxed),
                m.c.hw_queues_seen.load(Ordering::Relaxed),
            )?;
        }
        Ok(())
    }
}
