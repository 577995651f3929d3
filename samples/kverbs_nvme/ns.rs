// SPDX-License-Identifier: GPL-2.0

//! A controller's namespaces as disks, `kvnvme<C>n<N>` (controller
//! instance `C`, namespace ID `N`), one tag set for them all and a
//! hardware queue an I/O queue, whose requests go to that I/O queue as
//! NVMe Read, Write and Flush commands (drivers/nvme/host/core.c,
//! `nvme_setup_cmd`; host/rdma.c, `nvme_rdma_queue_rq`).
//!
//! The limits are the C host's for RDMA: as many segments as a request's
//! registration takes pages, a request at most one page fewer (or MDTS,
//! if smaller), no gap within a page between segments (the registration
//! maps whole pages of 4 KiB), the namespace's block size; a volatile
//! write cache, when the controller says it has one, with Flush and FUA.

use crate::ctrl::{Info, Ns};
use crate::io::{bump, IoPath};
use crate::wire::Cmd;
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    blk::{GenDisk, GenDiskBuilder, Op, Operations, Request, TagSet, TimeoutAction},
    io::IoData,
    ARef,
};

/// How long a request may take before the queue is shut down (the C
/// host's `io_timeout`, 30 s).
pub(crate) const IO_TIMEOUT_MS: u32 = 30_000;

/// A disk's queue data: its namespace, and the controller's I/O path.
pub(crate) struct NsData {
    nsid: u32,
    /// log2 of the block size.
    lba_shift: u32,
    path: Arc<IoPath>,
}

/// The driver of the namespaces' disks.
pub(crate) struct NsDisk;

impl Operations for NsDisk {
    type QueueData = NsData;

    fn queue_rq(
        ns: &NsData,
        rq: ARef<Request<Self>>,
        _is_last: bool,
    ) -> Result<(), ARef<Request<Self>>> {
        let p = &ns.path;
        // The controller reconnects: given back busy, blk-mq sends it again
        // 3 ms later (the C host's `nvmf_fail_nonready_command`).
        if p.waits() {
            bump(&p.c.not_live);
            return Err(rq);
        }
        let op = rq.op();
        let (slba, blocks) = (
            rq.sector() >> (ns.lba_shift - 9),
            rq.bytes() >> ns.lba_shift,
        );
        let hw = rq.hw_queue();
        let cmd = p.cid(hw, rq.tag()).and_then(|cid| match op {
            Op::Read | Op::Write if blocks > 0 => {
                bump(if op == Op::Write {
                    &p.c.writes
                } else {
                    &p.c.reads
                });
                Some(Cmd::rw(
                    cid,
                    op == Op::Write,
                    ns.nsid,
                    slba,
                    blocks,
                    rq.fua(),
                ))
            }
            Op::WriteZeroes if blocks > 0 => {
                bump(&p.c.write_zeroes);
                Some(Cmd::write_zeroes(cid, ns.nsid, slba, blocks))
            }
            Op::Flush => {
                bump(&p.c.flushes);
                Some(Cmd::flush(cid, ns.nsid))
            }
            _ => None,
        });
        let Some(mut cmd) = cmd else {
            bump(&p.c.unsupported);
            let _ = Request::end(rq, Err(kverbs::errno::eopnotsupp()));
            return Ok(());
        };
        let cid = cmd.cid();
        // No lock held: a failed submission may call the handler, and
        // end the request.
        let r = match p.queue(hw) {
            Some(q) => q.submit_with(rq, cid, p.inline_max, |data, c| {
                match data {
                    IoData::Registered(r) => cmd.set_keyed_sgl(r.addr, r.len, r.rkey),
                    IoData::Inline { len } => cmd.set_inline_sgl(len),
                    IoData::None => {}
                }
                c.copy_from_slice(&cmd.0);
            }),
            None => Err((rq, kverbs::errno::enolink())),
        };
        match r {
            Ok(()) => Ok(()),
            // Its tag's slot still in use, or no memory to map its pages
            // (the C host's BLK_STS_RESOURCE): tried again later.
            Err((rq, e))
                if e.to_errno() == EBUSY.to_errno() || e.to_errno() == ENOMEM.to_errno() =>
            {
                bump(&p.c.busy);
                Err(rq)
            }
            // The queue taken out or shut down by a recovery under way.
            Err((rq, _)) if p.waits() => {
                bump(&p.c.not_live);
                Err(rq)
            }
            Err((rq, _)) => {
                bump(&p.c.no_queue);
                let _ = Request::end(rq, Err(EIO));
                Ok(())
            }
        }
    }

    fn complete(rq: ARef<Request<Self>>) {
        let _ = Request::end_ok(rq);
    }

    fn timeout(ns: &NsData, _tag: u32, _hw_queue: u32) -> TimeoutAction {
        // The C host's error recovery: the shutdown of the queue that
        // carries the request requeues it, with every other (or ends them
        // with `EIO` if the controller is not live). Done, not a timer
        // reset: the request is requeued or ended by that shutdown, maybe
        // before this returns, and blk-mq must not touch it after.
        bump(&ns.path.c.timeouts);
        ns.path.status.error(crate::state::Why::Timeout);
        TimeoutAction::Done
    }
}

/// A namespace's disk.
pub(crate) struct Disk {
    pub(crate) nsid: u32,
    _disk: GenDisk<NsDisk>,
}

/// Makes the disks of `info`'s namespaces of controller `instance` on
/// `path`, each added (its partitions read) before the next is made.
pub(crate) fn add_disks(
    instance: u32,
    info: &Info,
    path: &Arc<IoPath>,
    module: &'static ThisModule,
) -> Result<KVec<Disk>> {
    let tags = Arc::new(
        TagSet::new(path.nr_queues(), u32::from(path.tags), IO_TIMEOUT_MS)?,
        GFP_KERNEL,
    )?;
    // A request's registration maps whole pages, one more than its
    // segments, for a request that starts within a page (as the C host's
    // `max_fr_pages`: its MRs have one page more).
    let segments = path.max_pages - 1;
    let mut max_sectors = segments << 3;
    if info.id.mdts != 0 {
        let mdts_sectors = 1u64 << (u32::from(info.id.mdts) + 3).min(40);
        max_sectors = max_sectors.min(mdts_sectors.min(u64::from(u32::MAX)) as u32);
    }
    let cache = info.id.vwc & 1 != 0;
    // Write Zeroes if the controller has it, as large as a request (NLB's
    // 16 bits allow more).
    let zeroes = if info.id.oncs & crate::wire::ONCS_WRITE_ZEROES != 0 {
        max_sectors
    } else {
        0
    };
    let mut disks = KVec::with_capacity(info.namespaces.len(), GFP_KERNEL)?;
    for ns in info.namespaces.iter() {
        let limits = Limits {
            max_sectors,
            zeroes,
            cache,
        };
        disks.push(
            add_disk(instance, ns, path, &tags, &limits, module)?,
            GFP_KERNEL,
        )?;
    }
    Ok(disks)
}

/// What every namespace's disk of a controller has.
struct Limits {
    max_sectors: u32,
    /// Write Zeroes of at most as many sectors (0: none).
    zeroes: u32,
    cache: bool,
}

fn add_disk(
    instance: u32,
    ns: &Ns,
    path: &Arc<IoPath>,
    tags: &Arc<TagSet<NsDisk>>,
    l: &Limits,
    module: &'static ThisModule,
) -> Result<Disk> {
    let lba_shift = ns.block_size.trailing_zeros();
    let data = Arc::new(
        NsData {
            nsid: ns.nsid,
            lba_shift,
            path: path.clone(),
        },
        GFP_KERNEL,
    )?;
    let disk = GenDiskBuilder::new()
        .logical_block_size(ns.block_size)?
        .physical_block_size(ns.block_size)?
        .capacity_sectors(
            ns.blocks
                .checked_mul(u64::from(ns.block_size / 512))
                .ok_or(EINVAL)?,
        )
        .max_hw_sectors(l.max_sectors)
        .max_write_zeroes_sectors(l.zeroes)
        .max_segments(path.max_pages.saturating_sub(1).min(u32::from(u16::MAX)) as u16)
        .virt_boundary_mask(4095)
        .write_cache(l.cache)
        .fua(l.cache)
        .build(
            format_args!("kvnvme{}n{}", instance, ns.nsid),
            tags.clone(),
            data,
            module,
        )?;
    Ok(Disk {
        nsid: ns.nsid,
        _disk: disk,
    })
}
