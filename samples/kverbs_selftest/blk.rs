// SPDX-License-Identifier: GPL-2.0

//! `blk`: RAM disks on the layer's block binding (`kverbs::blk`), in safe
//! Rust, to test it without RDMA (kverbs_blk.sh).
//!
//! Writing to `/sys/kernel/debug/kverbs_selftest/blk`:
//!
//! - `add N [size=MiB] [kib=KiB] [lbs=BYTES] [hwq=N] [mode=direct|complete] [vb=MASK]`:
//!   disk `kvblkN` of `size` MiB (16), or `kib` KiB (4 to 262144, a
//!   multiple of 4), of `lbs`-byte blocks (512), `hwq`
//!   hardware queues (1) of 64 requests, ending each request in
//!   `queue_rq` (`direct`) or, once its data is copied there, through
//!   `Request::complete` and the completion callback (`complete`; a
//!   failed one is ended at once);
//!   requests of at most 512 KiB in at most 64 segments, segments
//!   bounded by `vb` (0: none); a write cache and FUA;
//! - `del N`: deletes it (waiting for its requests);
//! - `forget N`: leaks it (`mem::forget`): kverbs.ko deletes it when this
//!   module goes (kverbs_forget.sh);
//! - `fail_next N K`: its next `K` reads or writes end with `EIO`;
//! - `busy_next N K`: its next `K` requests are given back busy (the block
//!   layer requeues them).
//!
//! Reading it gives a line a disk: its counters. Each read or write maps
//! its request into a scatter-gather table (`Request::map_sg`) and checks
//! the entries: at most the request's segments, their bytes the request's
//! (else `bad maps` counts it and it fails with `EIO`).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use kernel::{
    new_mutex, new_spinlock,
    prelude::*,
    sync::{Arc, Mutex, SpinLock},
};
use kverbs::{
    blk::{GenDisk, GenDiskBuilder, Op, Operations, Request, TagSet},
    sg::SgTable,
    ARef, Show, Store,
};

/// How a disk ends its requests.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Direct,
    Complete,
}

/// A disk's memory and counters (its queue data).
#[pin_data]
struct Mem {
    #[pin]
    data: SpinLock<VVec<u8>>,
    mode: Mode,
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
}

/// Takes one from `n` if it is not 0.
fn take_one(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1))
        .is_ok()
}

impl Mem {
    /// Carries out `rq`'s read, write or flush.
    fn transfer(&self, rq: &Request<RamDisk>) -> Result {
        let op = rq.op();
        if op == Op::Flush {
            self.flushes.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if op != Op::Read && op != Op::Write {
            return Err(kverbs::errno::eopnotsupp());
        }
        if take_one(&self.fail_next) {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return Err(EIO);
        }
        if rq.fua() {
            self.fua.fetch_add(1, Ordering::Relaxed);
        }
        self.hw_queues_seen
            .fetch_or(1 << rq.hw_queue().min(31), Ordering::Relaxed);
        let segs = u32::from(rq.nr_phys_segments());
        self.max_segments.fetch_max(segs, Ordering::Relaxed);
        let off = usize::try_from(rq.sector()).map_err(|_| EIO)? * 512;
        let len = rq.bytes() as usize;
        let mut table = SgTable::new(segs.max(1), true)?;
        let mut sg = rq.map_sg(&mut table)?;
        let total: u64 = sg.lengths().map(u64::from).sum();
        if sg.nents() > segs || total != len as u64 {
            self.bad_maps.fetch_add(1, Ordering::Relaxed);
            return Err(EIO);
        }
        let mut data = self.data.lock();
        let end = off.checked_add(len).ok_or(EIO)?;
        let Some(mem) = data.get_mut(off..end) else {
            return Err(EIO);
        };
        let done = if op == Op::Write {
            self.writes.fetch_add(1, Ordering::Relaxed);
            sg.copy_to(mem, 0)?
        } else {
            self.reads.fetch_add(1, Ordering::Relaxed);
            sg.copy_from(mem, 0)?
        };
        if done != len {
            self.bad_maps.fetch_add(1, Ordering::Relaxed);
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
        if take_one(&m.busy_next) {
            m.busy.fetch_add(1, Ordering::Relaxed);
            return Err(rq);
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
        rq.queue_data().completed.fetch_add(1, Ordering::Relaxed);
        let _ = Request::end_ok(rq);
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
                reads: AtomicU64::new(0),
                writes: AtomicU64::new(0),
                flushes: AtomicU64::new(0),
                fua: AtomicU64::new(0),
                failed: AtomicU64::new(0),
                busy: AtomicU64::new(0),
                completed: AtomicU64::new(0),
                bad_maps: AtomicU64::new(0),
                max_segments: AtomicU32::new(0),
                hw_queues_seen: AtomicU32::new(0),
                fail_next: AtomicU32::new(0),
                busy_next: AtomicU32::new(0),
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
            .build(format_args!("kvblk{}", n), tags, mem, self.module)?;
        let d = Some(Disk { n, disk });
        if let Some(free) = list.iter().position(|s| s.is_none()) {
            list[free] = d;
        } else {
            list.push(d, GFP_KERNEL)?;
        }
        Ok(())
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
        let text = core::str::from_utf8(input).map_err(|_| EINVAL)?.trim();
        let mut words = text.split_ascii_whitespace();
        let cmd = words.next().ok_or(EINVAL)?;
        let n: u32 = words.next().ok_or(EINVAL)?.parse().map_err(|_| EINVAL)?;
        let mut rest = KVec::new();
        for w in words {
            rest.push(w, GFP_KERNEL)?;
        }
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
                self.with(n, |m| m.fail_next.store(k, Ordering::Relaxed))
            }
            "busy_next" => {
                let k = count()?;
                self.with(n, |m| m.busy_next.store(k, Ordering::Relaxed))
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
                "kvblk{}: reads {} writes {} flushes {} fua {} failed {} busy {} completed {} \
                 bad_maps {} max_segments {} hw_queues_seen {:#x}",
                d.n,
                c(&m.reads),
                c(&m.writes),
                c(&m.flushes),
                c(&m.fua),
                c(&m.failed),
                c(&m.busy),
                c(&m.completed),
                c(&m.bad_maps),
                m.max_segments.load(Ordering::Relaxed),
                m.hw_queues_seen.load(Ordering::Relaxed),
            )?;
        }
        Ok(())
    }
}
