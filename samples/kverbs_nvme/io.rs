// SPDX-License-Identifier: GPL-2.0

//! A controller's I/O queue: connected as the admin queue is (its qid and
//! sizes in the NVMe/RDMA private data), its Fabrics Connect sent as an
//! admin command would be (the data, 1024 bytes, by a keyed descriptor),
//! then its QP given to the layer's capsule queue (`kverbs::io`), which
//! carries the namespaces' requests: a 64-byte command capsule each, the
//! request's pages registered for the target (FRWR, a key a tag), ended
//! when the target's 16-byte response comes and the key is dead
//! (drivers/nvme/host/rdma.c: `nvme_rdma_queue_rq`, `nvme_rdma_map_data`,
//! `nvme_rdma_process_nvme_rsp`).
//!
//! Command ids are the C host's: the tag, and above it a 4-bit counter of
//! the tag's uses (`nvme_cid`), so that a late or repeated response does
//! not answer the tag's next request. A failed status without Do Not
//! Retry sends the request again, up to 5 times, as the C host's
//! `nvme_decide_disposition`. Any error of the queue (a completion
//! in error, a response to no command, an invalidation of another key, a
//! request timed out) starts the controller's error recovery
//! (`state.rs`), which shuts the queue down with what it carries requeued
//! and connects a new one in the same path ([`restart`]): the disks and
//! their tags' counters stay.

use crate::admin::{Admin, CmdError, Data};
use crate::ctrl::{Info, StartError};
use crate::options::Options;
use crate::queue::{Conn, Queue};
use crate::state::{State, Status, Why};
use crate::wire::{self, Cmd, ConnectData, Cqe};
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    cm::CmSink,
    io::{Answer, Carried, IoConfig, IoError, IoHandler, IoQueue, IoStats},
    qp::{Cancel, Qp, Rts},
    IrqLock,
};

/// The segments a request may have (`NVME_RDMA_MAX_SEGMENTS`), fewer if the
/// device registers fewer pages; its registration takes one page more (a
/// request that starts within a page), as the C host's.
const MAX_SEGMENTS: u32 = 256;

/// The bits of a command id that are the tag.
const TAG_BITS: u16 = 12;

/// The times a request whose status has no DNR bit is sent again before
/// that status ends it (the C host's `nvme_max_retries` parameter's
/// default).
const MAX_RETRIES: u32 = 5;

/// An I/O queue's counters: its driver's and its handler's.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) reads: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) write_zeroes: AtomicU64,
    /// Requests of an operation the host does not carry (`EOPNOTSUPP`).
    pub(crate) unsupported: AtomicU64,
    /// Requests given back busy (their tag's slot still in use).
    pub(crate) busy: AtomicU64,
    /// Requests given back busy while the controller reconnects.
    pub(crate) not_live: AtomicU64,
    /// Requests ended with `EIO` for a queue shut down.
    pub(crate) no_queue: AtomicU64,
    /// Responses with a status other than success.
    pub(crate) status_errors: AtomicU64,
    /// Errors the queue told of, and requests timed out.
    pub(crate) errors: AtomicU64,
    pub(crate) timeouts: AtomicU64,
}

pub(crate) fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// One I/O queue of the path, a hardware queue of the disks: its capsule
/// queue and its tags' command id counters.
#[pin_data]
pub(crate) struct HwQueue {
    /// `None` once shut down by [`IoPath::shutdown`] or taken out by the
    /// recovery, until its next queue. Cloned out to be used: no lock is
    /// held while a request is submitted (its failure may call the
    /// handler, which takes this lock).
    #[pin]
    queue: IrqLock<Option<Arc<IoQueue>>>,
    /// A counter a tag: the top bits of its next command id.
    genctr: KVec<AtomicU8>,
}

impl HwQueue {
    fn new(tags: u16) -> Result<Arc<HwQueue>> {
        let mut genctr = KVec::with_capacity(usize::from(tags), GFP_KERNEL)?;
        for _ in 0..tags {
            genctr.push(AtomicU8::new(0), GFP_KERNEL)?;
        }
        Arc::pin_init(
            pin_init!(HwQueue {
                queue <- IrqLock::new(None),
                genctr,
            }),
            GFP_KERNEL,
        )
    }

    fn get(&self) -> Option<Arc<IoQueue>> {
        self.queue.with(|q| q.clone())
    }

    fn take(&self) -> Option<Arc<IoQueue>> {
        self.queue.with(|q| q.take())
    }
}

/// What the namespaces' disks share: the I/O queues (qid 1 to N, one a
/// hardware queue of the disks, blk-mq's map spreading the CPUs over
/// them), the counters.
pub(crate) struct IoPath {
    queues: KVec<Arc<HwQueue>>,
    /// The controller's state, and its recovery.
    pub(crate) status: Arc<Status>,
    /// Each queue's entries, and its tags: one fewer (a queue of N entries
    /// holds N - 1 commands, as the C host's `sqsize`).
    pub(crate) size: u16,
    pub(crate) tags: u16,
    /// The pages a request's registration takes: the disks'
    /// `max_segments` is one fewer.
    pub(crate) max_pages: u32,
    /// The largest write sent as in-capsule data (IOCCSZ x 16 - 64, if the
    /// controller takes SGL offsets: SGLS bit 20), 0 if none is.
    pub(crate) inline_max: u32,
    pub(crate) c: Counters,
}

impl IoPath {
    /// The I/O queues, and the disks' hardware queues.
    pub(crate) fn nr_queues(&self) -> u32 {
        self.queues.len() as u32
    }

    /// The command id of the next request of `tag` of hardware queue `hw`.
    pub(crate) fn cid(&self, hw: u32, tag: u32) -> Option<u16> {
        let g = self
            .queues
            .get(hw as usize)?
            .genctr
            .get(tag as usize)?
            .fetch_add(1, Ordering::Relaxed);
        Some(u16::from(g.wrapping_add(1) & 0xf) << TAG_BITS | tag as u16)
    }

    /// The I/O queue of hardware queue `hw`, if it is there.
    pub(crate) fn queue(&self, hw: u32) -> Option<Arc<IoQueue>> {
        self.queues.get(hw as usize)?.get()
    }

    /// Starts the queues' shutdown, on kverbs.ko's workqueue (from any
    /// context): their requests end with `EIO`, those after with `EIO` at
    /// once.
    pub(crate) fn kill(&self) {
        for hq in self.queues.iter() {
            if let Some(q) = hq.get() {
                q.shutdown_async(Carried::Fail);
            }
        }
    }

    /// Shuts the queues down, or waits for the shutdowns [`IoPath::kill`]
    /// started (process context).
    pub(crate) fn shutdown(&self) {
        self.take_down(Carried::Fail);
    }

    /// Takes the queues out and shuts them down, what they carry ended or
    /// requeued as `carried` says (process context); their counters,
    /// summed.
    pub(crate) fn take_down(&self, carried: Carried) -> IoStats {
        let mut sum = IoStats::default();
        for hq in self.queues.iter() {
            if let Some(q) = hq.take() {
                q.shutdown(carried);
                add(&mut sum, &q.stats());
            }
        }
        sum
    }

    /// Whether requests are given back busy (the controller reconnects).
    pub(crate) fn waits(&self) -> bool {
        matches!(self.status.state(), State::Resetting | State::Connecting)
    }

    /// The capsules each queue sent (0 for one not there).
    pub(crate) fn submitted(&self) -> impl Iterator<Item = u64> + '_ {
        self.queues
            .iter()
            .map(|hq| hq.get().map_or(0, |q| q.stats().submitted))
    }

    /// The queues' counters, summed, and whether one is shut down; `None`
    /// if none is there.
    pub(crate) fn stats(&self) -> Option<(IoStats, bool)> {
        let mut r: Option<(IoStats, bool)> = None;
        for q in self.queues.iter().filter_map(|hq| hq.get()) {
            let (sum, down) = r.get_or_insert((IoStats::default(), false));
            add(sum, &q.stats());
            *down |= q.is_shut_down();
        }
        r
    }
}

/// Adds the counters of `b` to `a`.
fn add(a: &mut IoStats, b: &IoStats) {
    a.submitted += b.submitted;
    a.finished += b.finished;
    a.failed += b.failed;
    a.ended_by_shutdown += b.ended_by_shutdown;
    a.requeued_by_shutdown += b.requeued_by_shutdown;
    a.unknown += b.unknown;
    a.errors += b.errors;
    a.registered += b.registered;
    a.remote_invalidated += b.remote_invalidated;
    a.local_invalidated += b.local_invalidated;
    a.inline += b.inline;
    a.retried += b.retried;
}

/// The handler of an I/O queue: a response capsule is a CQE.
struct Handler {
    path: Arc<IoPath>,
}

impl IoHandler for Handler {
    fn response(&self, rsp: &[u8]) -> Option<Answer> {
        let raw: &[u8; Cqe::LEN] = rsp.get(..Cqe::LEN)?.try_into().ok()?;
        let cqe = Cqe::decode(raw);
        let status = match cqe.code() {
            0 => Ok(()),
            code => {
                bump(&self.path.c.status_errors);
                Err(wire::io_errno(code))
            }
        };
        Some(Answer {
            tag: cqe.command_id & ((1 << TAG_BITS) - 1),
            cid: cqe.command_id,
            status,
            // A failed status without Do Not Retry: sent again, up to
            // MAX_RETRIES times (`nvme_decide_disposition`).
            retry: !cqe.dnr(),
        })
    }

    fn error(&self, _e: IoError) {
        bump(&self.path.c.errors);
        self.path.status.error(Why::IoError);
    }
}

/// What an I/O queue's connection gives: its QP, its connection, and the
/// data limits it allows.
struct Connected {
    qp: Qp<Rts>,
    conn: Conn,
    /// The pages a request's registration takes.
    max_pages: u32,
    /// In-capsule data: the segments and bytes.
    inline_segments: u32,
    inline_max: u32,
}

fn start_err(e: Error) -> StartError {
    StartError {
        step: "I/O queue",
        err: CmdError::Error(e),
    }
}

/// Connects I/O queue `qid` of `size` entries to the controller of
/// `info` (its events to `sink`, its waits ended by `gone`) and sends its
/// Fabrics Connect.
fn connect(
    opts: &Options,
    info: &Info,
    qid: u16,
    size: u16,
    sink: Arc<dyn CmSink>,
    gone: Arc<Cancel>,
) -> Result<Connected, StartError> {
    let err = start_err;
    if size < 2 {
        return Err(err(EINVAL));
    }
    let q = match Queue::connect(opts, qid, size, info.cntlid, sink, &gone) {
        Ok(q) => q,
        Err(f) => {
            pr_err!(
                "kverbs_nvme: {}:{}: I/O queue {}: {}\n",
                opts.traddr,
                opts.trsvcid,
                qid,
                f
            );
            return Err(err(f.errno()));
        }
    };
    let mut a = Admin::for_connect(q, gone).map_err(err)?;
    let cid = a.cid();
    // No keep-alive timeout on an I/O queue's Connect.
    let cmd = Cmd::connect(cid, 0, qid, size - 1, 0);
    let hostnqn = opts.hostnqn_or_default();
    let data = ConnectData::encode(
        &opts.hostid,
        info.cntlid,
        opts.nqn.as_str(),
        hostnqn.as_str(),
    )
    .map_err(err)?;
    a.exec(cmd, Data::Out(&data), &mut [])
        .map_err(|e| StartError {
            step: "I/O queue Connect",
            err: e,
        })?;
    let (qp, conn) = a.into_queue().map_err(err)?.split();
    let max_pages = MAX_SEGMENTS.min(
        qp.device()
            .attrs()
            .max_fast_reg_page_list_len()
            .saturating_sub(1),
    ) + 1;
    if max_pages < 2 {
        return Err(err(EINVAL));
    }
    // In-capsule data as the C host's: if the controller takes an SGL
    // offset, up to its capsule's room after the command.
    let (inline_segments, inline_max) = if info.id.sgls & (1 << 20) != 0 {
        (
            crate::queue::inline_segments(qp.device()),
            (info.id.ioccsz.saturating_mul(16)).saturating_sub(Cmd::LEN as u32),
        )
    } else {
        (0, 0)
    };
    Ok(Connected {
        qp,
        conn,
        max_pages,
        inline_segments,
        inline_max: if inline_segments > 0 { inline_max } else { 0 },
    })
}

/// Gives the QP of `c` to a capsule queue of `path`'s shape, put in
/// hardware queue `hw` of `path`; its connection back.
fn attach(path: &Arc<IoPath>, hw: usize, c: Connected) -> Result<Conn, StartError> {
    let err = start_err;
    let hq = path.queues.get(hw).ok_or_else(|| err(EINVAL))?;
    let handler =
        Arc::new(Handler { path: path.clone() }, GFP_KERNEL).map_err(|e| err(e.into()))?;
    let cfg = IoConfig {
        depth: path.tags,
        capsule_len: Cmd::LEN,
        response_len: Cqe::LEN,
        max_pages: path.max_pages,
        inline_segments: c.inline_segments,
        max_retries: MAX_RETRIES,
    };
    let q = IoQueue::new(c.qp, cfg, handler).map_err(err)?;
    let q = match Arc::new(q, GFP_KERNEL) {
        Ok(q) => q,
        // The queue, dropped, shuts down on kverbs.ko's workqueue.
        Err(e) => return Err(err(e.into())),
    };
    let old = hq.queue.with(|slot| slot.replace(q));
    if let Some(old) = old {
        // Not reached: the recovery took the last one out.
        old.shutdown_async(Carried::Retry);
    }
    Ok(c.conn)
}

/// Connects I/O queues 1 to `n` of `size` entries to the controller of
/// `info` (their events to `sink`, their waits ended by `gone`), sends
/// their Fabrics Connect, and gives each one's QP to a capsule queue; the
/// shared path of the disks, with the queues in it, and their connections
/// (kept beside it).
pub(crate) fn start(
    opts: &Options,
    info: &Info,
    n: u16,
    size: u16,
    sink: Arc<dyn CmSink>,
    gone: Arc<Cancel>,
    status: Arc<Status>,
) -> Result<(Arc<IoPath>, KVec<Conn>), StartError> {
    let err = |e: Error| start_err(e);
    let c = connect(opts, info, 1, size, sink.clone(), gone.clone())?;
    let tags = size - 1;
    let mut queues = KVec::with_capacity(usize::from(n), GFP_KERNEL).map_err(|e| err(e.into()))?;
    for _ in 0..n {
        queues
            .push(HwQueue::new(tags).map_err(err)?, GFP_KERNEL)
            .map_err(|e| err(e.into()))?;
    }
    let path = Arc::new(
        IoPath {
            queues,
            status,
            size,
            tags,
            max_pages: c.max_pages,
            inline_max: c.inline_max,
            c: Counters::default(),
        },
        GFP_KERNEL,
    )
    .map_err(|e| err(e.into()))?;
    let mut conns = KVec::with_capacity(usize::from(n), GFP_KERNEL).map_err(|e| err(e.into()))?;
    conns
        .push(attach(&path, 0, c)?, GFP_KERNEL)
        .map_err(|e| err(e.into()))?;
    connect_rest(&path, opts, info, 1, sink, gone, &mut conns)?;
    Ok((path, conns))
}

/// Connects the I/O queues of `path` again, after the recovery took the
/// last ones out: the same qids, size and limits (`EINVAL` if the device
/// now allows others: the disks have them).
pub(crate) fn restart(
    path: &Arc<IoPath>,
    opts: &Options,
    info: &Info,
    sink: Arc<dyn CmSink>,
    gone: Arc<Cancel>,
) -> Result<KVec<Conn>, StartError> {
    let mut conns =
        KVec::with_capacity(path.queues.len(), GFP_KERNEL).map_err(|e| start_err(e.into()))?;
    connect_rest(path, opts, info, 0, sink, gone, &mut conns)?;
    Ok(conns)
}

/// Connects the queues of `path` from hardware queue `from` on (qid
/// `from + 1`), into `conns`.
fn connect_rest(
    path: &Arc<IoPath>,
    opts: &Options,
    info: &Info,
    from: usize,
    sink: Arc<dyn CmSink>,
    gone: Arc<Cancel>,
    conns: &mut KVec<Conn>,
) -> Result<(), StartError> {
    for hw in from..path.queues.len() {
        let qid = hw as u16 + 1;
        let c = connect(opts, info, qid, path.size, sink.clone(), gone.clone())?;
        if c.max_pages != path.max_pages || c.inline_max != path.inline_max {
            pr_err!(
                "kverbs_nvme: I/O queue {}: pages {} and in-capsule bytes {}, not {} and {}\n",
                qid,
                c.max_pages,
                c.inline_max,
                path.max_pages,
                path.inline_max
            );
            return Err(start_err(EINVAL));
        }
        let conn = attach(path, hw, c)?;
        conns
            .push(conn, GFP_KERNEL)
            .map_err(|e| start_err(e.into()))?;
    }
    Ok(())
}
