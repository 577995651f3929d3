// SPDX-License-Identifier: GPL-2.0

//! The bandwidth tests (write_bw, read_bw, send_bw): perftest's loop and
//! report.

use super::{conn::Side, Config, Fixed, Test, POLL_BATCH};
use crate::report::Report;
use core::fmt::Write;
use kernel::prelude::*;
use kverbs::{
    cq::{adaptive::Poller, Cq, PollCtx},
    qp::{Cancel, Rc, RemoteBuf, Rts, SendOp},
    stream::{RecvStream, Segment, SendStream},
};

/// A lane of a bandwidth test: a QP's stream of requests toward the peer's
/// buffer (`send`), and/or receives for the SENDs of a peer (`recv`: the
/// peer's QP in loopback, ours with a remote sender).
pub(super) struct LaneSpec<'a> {
    /// The sending direction, for the timestamps (0 or 1).
    pub(super) dir: usize,
    pub(super) send: Option<(&'a Side, RemoteBuf)>,
    pub(super) recv: Option<&'a Side>,
}

struct Lane<'a> {
    dir: usize,
    send: Option<SendStream<'a>>,
    recv: Option<RecvStream<'a, Rts, Rc>>,
    completed: u64,
}

/// The timestamps of a run, allocated before it: per direction, one per
/// request posted and completed.
pub(super) struct Stamps {
    pub(super) posted: KVec<u64>,
    pub(super) completed: KVec<u64>,
}

impl Stamps {
    pub(super) fn new(n: usize) -> Result<Self> {
        Ok(Stamps {
            posted: KVec::from_elem(0u64, n, GFP_KERNEL)?,
            completed: KVec::from_elem(0u64, n, GFP_KERNEL)?,
        })
    }
}

/// Sleeps until the next completion of the first lane that waits for one,
/// 1 ms at most (its CQ is polled by the core, which wakes us).
fn sleep_for_one(lanes: &mut [Lane<'_>], cancel: &Cancel) -> Result {
    let r = if let Some(s) = lanes
        .iter_mut()
        .find_map(|l| l.send.as_mut().filter(|s| s.completed() < s.posted()))
    {
        let next = s.completed() + 1;
        s.wait(next, 1, cancel)
    } else if let Some(r) = lanes
        .iter_mut()
        .find_map(|l| l.recv.as_mut().filter(|r| r.completed() < r.posted()))
    {
        let next = r.completed() + 1;
        r.wait(next, 1, cancel)
    } else {
        Ok(())
    };
    match r {
        Err(e) if e.to_errno() == kverbs::errno::etimedout().to_errno() => Ok(()),
        r => r,
    }
}

/// The CQs of the lanes' streams that wait for completions.
fn waiting_cqs<'l>(lanes: &'l [Lane<'_>]) -> impl Iterator<Item = &'l Cq> + 'l {
    lanes.iter().flat_map(|l| {
        let send = l.send.as_ref().filter(|s| s.completed() < s.posted());
        let recv = l.recv.as_ref().filter(|r| r.completed() < r.posted());
        Iterator::chain(send.map(|s| s.cq()).into_iter(), recv.map(|r| r.cq()))
    })
}

/// The lanes of one size: their streams, the receives pre-posted.
fn lanes<'a>(cfg: &Config, specs: &[LaneSpec<'a>], size: usize) -> Result<KVec<Lane<'a>>> {
    let mut lanes = KVec::with_capacity(specs.len(), GFP_KERNEL)?;
    for spec in specs {
        let send = match spec.send {
            Some((me, remote)) => {
                let op = match cfg.test {
                    Test::WriteBw => SendOp::Write(remote),
                    Test::ReadBw => SendOp::Read(remote),
                    _ => SendOp::Send,
                };
                let seg = Segment {
                    buf: me.sbuf.clone(),
                    offset: 0,
                    len: size,
                };
                Some(SendStream::new(
                    &me.qp,
                    &[(op, seg)],
                    cfg.tx_depth,
                    cfg.cq_mod,
                )?)
            }
            None => None,
        };
        let recv = match spec.recv {
            Some(side) => {
                let seg = Segment {
                    buf: side.rbuf.clone(),
                    offset: 0,
                    len: size,
                };
                let depth = super::conn::RX_DEPTH.min(cfg.iters);
                let mut r = RecvStream::new(&side.qp, &[seg], depth)?;
                r.post(depth)?;
                Some(r)
            }
            None => None,
        };
        lanes.push(
            Lane {
                dir: spec.dir,
                send,
                recv,
                completed: 0,
            },
            GFP_KERNEL,
        )?;
    }
    Ok(lanes)
}

/// Where the timestamps of the next requests go: per direction, how many
/// were posted and completed.
#[derive(Default)]
struct Counts {
    posted: [usize; 2],
    completed: [usize; 2],
}

/// Stamps the `k` entries of `stamps` from `at` with the time `t`.
fn stamp(stamps: &mut [u64], at: usize, k: usize, t: u64) {
    for ts in &mut stamps[at..at + k] {
        *ts = t;
    }
}

/// One pass over the lanes: posts what room allows, polls the receives and
/// the sends. Returns (busy, progress): whether a lane still waits, and
/// whether a completion came.
fn pass(
    lanes: &mut [Lane<'_>],
    iters: u64,
    n: usize,
    stamps: &mut Stamps,
    counts: &mut Counts,
) -> Result<(bool, bool)> {
    let mut busy = false;
    let mut progress = false;
    for lane in lanes.iter_mut() {
        let d = lane.dir;
        let base = d * n;
        if let Some(s) = lane.send.as_mut() {
            let posted = s.posted();
            if posted < iters {
                let want = (iters - posted) as u32;
                let room = s.room().min(want);
                if room > 0 {
                    let t = kverbs::now_ns();
                    let k = s.post(room, room == want)? as usize;
                    stamp(&mut stamps.posted, base + counts.posted[d], k, t);
                    counts.posted[d] += k;
                }
            }
        }
        if let Some(r) = lane.recv.as_mut() {
            let before = r.completed();
            r.poll(POLL_BATCH)?;
            let left = iters - r.posted().min(iters);
            if left > 0 {
                r.post(r.room().min(left as u32))?;
            }
            progress |= r.completed() > before;
            busy |= r.completed() < iters;
        }
        if let Some(s) = lane.send.as_mut() {
            let c = s.poll(POLL_BATCH)?;
            if c > lane.completed {
                let t = kverbs::now_ns();
                let k = (c - lane.completed) as usize;
                stamp(&mut stamps.completed, base + counts.completed[d], k, t);
                counts.completed[d] += k;
                lane.completed = c;
                progress = true;
            }
            busy |= lane.completed < iters;
        }
    }
    Ok((busy, progress))
}

/// One size: builds the lanes' streams, pre-posts the receives, calls
/// `ready` (the two-host handshake), runs until every lane is done and
/// writes perftest's row for the directions this host sent.
pub(super) fn run(
    cfg: &Config,
    specs: &[LaneSpec<'_>],
    size: usize,
    cancel: &Cancel,
    stamps: &mut Stamps,
    rep: &mut Report,
    ready: &mut dyn FnMut(&mut Report) -> Result,
) -> Result {
    let iters = u64::from(cfg.iters);
    let n = (cfg.iters as usize) * (cfg.qps as usize);
    let mut lanes = lanes(cfg, specs, size)?;
    ready(rep)?;
    let mut counts = Counts::default();
    let mut last_progress = kverbs::now_ns();
    let timeout_ns = u64::from(cfg.timeout_ms) * 1_000_000;
    let mut spins = 0u32;
    // Adaptive CQs: spin a while after the last progress, then sleep
    // until a CQ's next completion.
    let mut poller = Poller::new();
    loop {
        let (busy, progress) = pass(&mut lanes, iters, n, stamps, &mut counts)?;
        if !busy {
            break;
        }
        // Cancellation and signals every 64 passes, progress or not: a
        // run that makes progress must still end when its writer is
        // killed (it used to run on to its last iteration).
        spins = spins.wrapping_add(1);
        if spins % 64 == 0 {
            cancel.check()?;
        }
        // The clock is read only when needed: at a rate of a read per
        // loop it cost kverbs 5% of a 64-byte write_bw run (perf).
        if progress {
            last_progress = kverbs::now_ns();
            poller.progress(last_progress);
            continue;
        }
        // Without progress: check the run's end every 64 polls when busy
        // polling, every eighth poll while an adaptive poller spins (the
        // clock is its cost), every time otherwise, then give the CPU to
        // rxe.
        if cfg.poll == PollCtx::Direct && spins % 64 != 0 {
            continue;
        }
        if cfg.poll == PollCtx::Adaptive && poller.spin() {
            continue;
        }
        let now = kverbs::now_ns();
        cancel.check()?;
        if now - last_progress > timeout_ns {
            let _ = writeln!(
                rep,
                "{}: no completion for {} ms at size {}",
                cfg.test.name(),
                cfg.timeout_ms,
                size
            );
            return Err(kverbs::errno::etimedout());
        }
        match cfg.poll {
            // Lets rxe's workers run on this CPU (no preemption).
            PollCtx::Direct => kverbs::cond_resched(),
            // Spins while a completion is near, else sleeps until one
            // of the waiting lanes' CQs has a completion.
            PollCtx::Adaptive => poller.idle_at(now, waiting_cqs(&lanes)),
            // The core polls: sleep until a completion of the first lane
            // that waits for one (1 ms at most).
            _ => sleep_for_one(&mut lanes, cancel)?,
        }
    }
    drop(lanes);
    report_row(cfg, specs, size, n, stamps, rep)
}

/// The best stretch of `n` messages posted at `tp` and completed at `tc`,
/// in picoseconds per message, measured at completions `cq_mod` apart.
fn best_ps_per_msg(tp: &[u64], tc: &[u64], n: usize, cq_mod: usize) -> u64 {
    let mut best = u64::MAX;
    let per_msg = |i: usize, j: usize| tc[j].saturating_sub(tp[i]) * 1000 / (j - i + 1) as u64;
    for i in 0..n {
        let mut j = (i + 1).div_ceil(cq_mod) * cq_mod - 1;
        while j < n {
            best = best.min(per_msg(i, j));
            j += cq_mod;
        }
        if n % cq_mod != 0 {
            best = best.min(per_msg(i, n - 1));
        }
    }
    best
}

/// perftest's row of one size, per direction sent from here, summed.
fn report_row(
    cfg: &Config,
    specs: &[LaneSpec<'_>],
    size: usize,
    n: usize,
    stamps: &Stamps,
    rep: &mut Report,
) -> Result {
    let dirs: KVec<usize> = {
        let mut v = KVec::new();
        for d in 0..2 {
            if specs.iter().any(|s| s.dir == d && s.send.is_some()) {
                v.push(d, GFP_KERNEL)?;
            }
        }
        v
    };
    if dirs.is_empty() {
        let _ = writeln!(
            rep,
            " {:<7}    {:<10}       (received; the client reports)",
            size, n
        );
        return Ok(());
    }
    let (mut peak, mut avg, mut rate) = (0u64, 0u64, 0u64);
    for &d in dirs.iter() {
        let tp = &stamps.posted[d * n..d * n + n];
        let tc = &stamps.completed[d * n..d * n + n];
        let total_ns = tc[n - 1].saturating_sub(tp[0]).max(1);
        let (size, n64) = (size as u64, n as u64);
        // MB/sec (2^20 bytes) with 2 decimals, Mpps with 6.
        avg += kverbs::mul_div(size * n64 * 100, 1_000_000_000, total_ns) >> 20;
        rate += kverbs::mul_div(n64, 1_000_000_000, total_ns);
        let best = best_ps_per_msg(tp, tc, n, cfg.cq_mod as usize);
        peak += kverbs::mul_div(size * 100, 1_000_000_000_000, best.max(1)) >> 20;
    }
    let _ = writeln!(
        rep,
        " {:<7}    {:<10}       {:<7}            {:<7}\t\t   {:<7}",
        size,
        n,
        Fixed(peak, 2),
        Fixed(avg, 2),
        Fixed(rate, 6)
    );
    Ok(())
}
