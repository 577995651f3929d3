// SPDX-License-Identifier: GPL-2.0

//! The latency tests (write_lat, read_lat, send_lat, atomic_lat):
//! perftest's ping-pongs and report.

use super::{
    conn::{Pair, Side},
    Config, Fixed, Test,
};
use crate::report::Report;
use core::fmt::Write;
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    dma::DmaBuf,
    qp::{AtomicOp, Cancel, Rc, RemoteBuf, Rts, SendOp},
    stream::{RecvStream, Segment, SendStream},
};

fn seg(buf: &Arc<DmaBuf>, size: usize) -> Segment {
    Segment {
        buf: buf.clone(),
        offset: 0,
        len: size,
    }
}

/// A stream of one request at a time, inline if the size allows.
fn stream<'a>(cfg: &Config, me: &'a Side, op: SendOp, size: usize) -> Result<SendStream<'a>> {
    let wr = [(op, seg(&me.sbuf, size))];
    if size <= cfg.inline as usize && size <= me.qp.max_inline_data() as usize {
        SendStream::new_inline(&me.qp, &wr, 1, 1)
    } else {
        SendStream::new(&me.qp, &wr, 1, 1)
    }
}

/// read_lat's stream: one READ of `remote` into `me`'s buffer at a time.
fn read_stream<'a>(me: &'a Side, remote: RemoteBuf, size: usize) -> Result<SendStream<'a>> {
    SendStream::new(&me.qp, &[(SendOp::Read(remote), seg(&me.sbuf, size))], 1, 1)
}

/// atomic_lat's stream: one fetch-and-add (of 1) on `remote`'s first 8
/// bytes at a time, the old value into `me`'s buffer, as ib_atomic_lat.
fn atomic_stream<'a>(me: &'a Side, remote: RemoteBuf) -> Result<SendStream<'a>> {
    let op = SendOp::Atomic(AtomicOp::FetchAdd { remote, add: 1 });
    SendStream::new(&me.qp, &[(op, seg(&me.sbuf, 8))], 1, 1)
}

/// After a fetch-and-add of [`atomic_stream`]: the old value it returned
/// must be one more than the last (`prev`, updated); `EIO` if not.
fn check_counting(me: &Side, prev: &mut Option<u64>) -> Result {
    let mut old = [0u8; 8];
    me.sbuf.read(0, &mut old)?;
    let v = u64::from_ne_bytes(old);
    if let Some(p) = prev.filter(|p| v != p.wrapping_add(1)) {
        pr_err!(
            "bench: atomic_lat: fetch-and-add returned {:#x} after {:#x}\n",
            v,
            p
        );
        return Err(EIO);
    }
    *prev = Some(v);
    Ok(())
}

/// The iteration's value in the last byte of a write_lat message.
fn mark(i: usize) -> u8 {
    (i % 255) as u8 + 1
}

/// Spins until the byte at `offset` of `buf` is `want`.
fn spin_byte(buf: &DmaBuf, offset: usize, want: u8, cfg: &Config, cancel: &Cancel) -> Result {
    let start = kverbs::now_ns();
    let mut b = [0u8];
    let mut spins = 0u32;
    loop {
        buf.read(offset, &mut b)?;
        if b[0] == want {
            return Ok(());
        }
        spins = spins.wrapping_add(1);
        if spins % 256 == 0 {
            cancel.check()?;
            if kverbs::now_ns() - start > u64::from(cfg.timeout_ms) * 1_000_000 {
                pr_err!(
                    "bench: {}: the peer's message did not come\n",
                    cfg.test.name()
                );
                return Err(kverbs::errno::etimedout());
            }
            kverbs::cond_resched();
        }
    }
}

/// Both sides of the ping-pong in this thread, on a pair of one device:
/// `cfg.iters` iterations, reported.
pub(super) fn loopback(
    cfg: &Config,
    p: &Pair,
    size: usize,
    cancel: &Cancel,
    tposted: &mut [u64],
    rep: &mut Report,
) -> Result {
    let tposted = &mut tposted[..cfg.iters as usize];
    PingPong::new(cfg, p, size)?.run(cancel, tposted, true)?;
    let mut delta = deltas(tposted)?;
    report(cfg, &mut delta, tposted.len(), size, rep)
}

/// Iterations in a row on one pair of an interleaved run.
pub(super) const AB_BLOCK: usize = 20;

/// [`loopback`] on two pairs at once, whose CQs are polled in two modes
/// (`ab=`): blocks of [`AB_BLOCK`] iterations on each in turn, until
/// each has had `cfg.iters`; a row for each, `pairs[0]` first. What
/// changes the whole guest's speed from one run to the next (where its
/// tasks run, the emulator) then hits both alike, which separate runs
/// cannot ensure. Each pair keeps its streams from block to block, as a
/// ping-pong of its own would.
pub(super) fn loopback_ab(
    cfg: &Config,
    pairs: [&Pair; 2],
    size: usize,
    cancel: &Cancel,
    tposted: &mut [u64],
    rep: &mut Report,
) -> Result {
    let iters = cfg.iters as usize;
    // A block of n + 1 posts times n iterations.
    let n = (AB_BLOCK + 1).min(tposted.len());
    let block = tposted
        .get_mut(..n)
        .filter(|b| b.len() >= 2)
        .ok_or(EINVAL)?;
    let mut runs = [
        PingPong::new(cfg, pairs[0], size)?,
        PingPong::new(cfg, pairs[1], size)?,
    ];
    let mut delta = [
        KVec::with_capacity(iters, GFP_KERNEL)?,
        KVec::with_capacity(iters, GFP_KERNEL)?,
    ];
    // As many deltas as a run of `iters` posts has.
    while delta[1].len() < iters - 1 {
        for (run, d) in runs.iter_mut().zip(delta.iter_mut()) {
            let left = iters - 1 - d.len();
            run.run(cancel, block, left < n)?;
            for w in block.windows(2).take(left) {
                d.push(w[1].saturating_sub(w[0]), GFP_KERNEL)?;
            }
        }
    }
    for d in delta.iter_mut() {
        report(cfg, d, iters, size, rep)?;
    }
    Ok(())
}

/// The streams of one pair's ping-pong, set up before its timed
/// iterations, and what it has done so far.
struct PingPong<'a> {
    cfg: &'a Config,
    p: &'a Pair,
    size: usize,
    streams: Streams<'a>,
    /// Iterations done.
    done: u64,
    /// atomic_lat: the old value the last fetch-and-add returned.
    prev: Option<u64>,
}

/// A ping-pong's streams, per test.
// One or two per run, on the stack: the size of the largest costs nothing.
#[allow(clippy::large_enum_variant)]
enum Streams<'a> {
    /// write_lat: the client's and the server's RDMA WRITEs.
    Write(SendStream<'a>, SendStream<'a>),
    /// read_lat: the client's READs.
    Read(SendStream<'a>),
    /// atomic_lat: the client's fetch-and-adds.
    Atomic(SendStream<'a>),
    /// send_lat: the client's and the server's SENDs and receives, a
    /// receive posted on each.
    Send {
        cs: SendStream<'a>,
        ss: SendStream<'a>,
        cr: RecvStream<'a, Rts, Rc>,
        sr: RecvStream<'a, Rts, Rc>,
    },
}

impl<'a> PingPong<'a> {
    fn new(cfg: &'a Config, p: &'a Pair, size: usize) -> Result<Self> {
        let (c, s) = (&p.client, &p.server);
        let streams = match cfg.test {
            Test::WriteLat => Streams::Write(
                stream(cfg, c, SendOp::Write(s.remote), size)?,
                stream(cfg, s, SendOp::Write(c.remote), size)?,
            ),
            Test::ReadLat => Streams::Read(read_stream(c, s.remote, size)?),
            Test::AtomicLat => Streams::Atomic(atomic_stream(c, s.remote)?),
            _ => {
                let mut cr = RecvStream::new(&c.qp, &[seg(&c.rbuf, size)], 1)?;
                let mut sr = RecvStream::new(&s.qp, &[seg(&s.rbuf, size)], 1)?;
                cr.post(1)?;
                sr.post(1)?;
                Streams::Send {
                    cs: stream(cfg, c, SendOp::Send, size)?,
                    ss: stream(cfg, s, SendOp::Send, size)?,
                    cr,
                    sr,
                }
            }
        };
        Ok(PingPong {
            cfg,
            p,
            size,
            streams,
            done: 0,
            prev: None,
        })
    }

    /// Both sides of the ping-pong in this thread: an iteration for each
    /// of `tposted`, the time of its post. If `last`, no iteration follows
    /// (send_lat then posts no receive after the last).
    fn run(&mut self, cancel: &Cancel, tposted: &mut [u64], last: bool) -> Result {
        let (cfg, size, t) = (self.cfg, self.size, self.cfg.timeout_ms);
        let (c, s) = (&self.p.client, &self.p.server);
        let n = tposted.len();
        for (k, ts) in tposted.iter_mut().enumerate() {
            // The iteration's number over the ping-pong's life, from 1.
            let i = self.done + 1;
            let more = !(last && k + 1 == n);
            match &mut self.streams {
                Streams::Write(cw, sw) => {
                    let v = mark(i as usize);
                    *ts = kverbs::now_ns();
                    c.sbuf.write(size - 1, &[v])?;
                    cw.post(1, true)?;
                    spin_byte(&s.rbuf, size - 1, v, cfg, cancel)?;
                    s.sbuf.write(size - 1, &[v])?;
                    sw.post(1, true)?;
                    spin_byte(&c.rbuf, size - 1, v, cfg, cancel)?;
                    cw.wait(i, t, cancel)?;
                    sw.wait(i, t, cancel)?;
                }
                Streams::Read(r) => {
                    *ts = kverbs::now_ns();
                    r.post(1, true)?;
                    r.wait(i, t, cancel)?;
                }
                Streams::Atomic(a) => {
                    *ts = kverbs::now_ns();
                    a.post(1, true)?;
                    a.wait(i, t, cancel)?;
                    check_counting(c, &mut self.prev)?;
                }
                Streams::Send { cs, ss, cr, sr } => {
                    *ts = kverbs::now_ns();
                    cs.post(1, true)?;
                    sr.wait(i, t, cancel)?;
                    if more {
                        sr.post(1)?;
                    }
                    ss.post(1, true)?;
                    cr.wait(i, t, cancel)?;
                    if more {
                        cr.post(1)?;
                    }
                    cs.wait(i, t, cancel)?;
                    ss.wait(i, t, cancel)?;
                }
            }
            self.done = i;
        }
        Ok(())
    }
}

/// read_lat with a peer host: one READ of the peer's buffer at a time.
fn read_loop(
    cfg: &Config,
    me: &Side,
    remote: RemoteBuf,
    size: usize,
    cancel: &Cancel,
    tposted: &mut [u64],
) -> Result {
    let mut r = read_stream(me, remote, size)?;
    for (i, ts) in tposted.iter_mut().enumerate().take(cfg.iters as usize) {
        *ts = kverbs::now_ns();
        r.post(1, true)?;
        r.wait(i as u64 + 1, cfg.timeout_ms, cancel)?;
    }
    Ok(())
}

/// atomic_lat with a peer host: one fetch-and-add on the peer's buffer at
/// a time; the old values must count up.
fn atomic_loop(
    cfg: &Config,
    me: &Side,
    remote: RemoteBuf,
    cancel: &Cancel,
    tposted: &mut [u64],
) -> Result {
    let mut a = atomic_stream(me, remote)?;
    let mut prev = None;
    for (i, ts) in tposted.iter_mut().enumerate().take(cfg.iters as usize) {
        *ts = kverbs::now_ns();
        a.post(1, true)?;
        a.wait(i as u64 + 1, cfg.timeout_ms, cancel)?;
        check_counting(me, &mut prev)?;
    }
    Ok(())
}

/// One side of the ping-pong with a peer host: the client starts each
/// round trip and measures, the server answers. `ready` is called when
/// this side can take the peer's first message.
#[allow(clippy::too_many_arguments)]
pub(super) fn two_hosts(
    cfg: &Config,
    me: &Side,
    remote: RemoteBuf,
    client: bool,
    size: usize,
    cancel: &Cancel,
    tposted: &mut [u64],
    rep: &mut Report,
    ready: &mut dyn FnMut(&mut Report) -> Result,
) -> Result {
    let iters = cfg.iters as usize;
    let t = cfg.timeout_ms;
    match cfg.test {
        Test::WriteLat => {
            let mut w = stream(cfg, me, SendOp::Write(remote), size)?;
            ready(rep)?;
            for (i, ts) in tposted.iter_mut().enumerate().take(iters) {
                let v = mark(i);
                *ts = kverbs::now_ns();
                if !client {
                    spin_byte(&me.rbuf, size - 1, v, cfg, cancel)?;
                }
                me.sbuf.write(size - 1, &[v])?;
                w.post(1, true)?;
                if client {
                    spin_byte(&me.rbuf, size - 1, v, cfg, cancel)?;
                }
                w.wait(i as u64 + 1, t, cancel)?;
            }
        }
        Test::ReadLat => {
            ready(rep)?;
            if client {
                read_loop(cfg, me, remote, size, cancel, tposted)?;
            }
        }
        Test::AtomicLat => {
            ready(rep)?;
            if client {
                atomic_loop(cfg, me, remote, cancel, tposted)?;
            }
        }
        _ => {
            let mut s = stream(cfg, me, SendOp::Send, size)?;
            let mut r = RecvStream::new(&me.qp, &[seg(&me.rbuf, size)], 1)?;
            r.post(1)?;
            ready(rep)?;
            for (i, ts) in tposted.iter_mut().enumerate().take(iters) {
                let (i, more) = (i as u64, i + 1 < iters);
                *ts = kverbs::now_ns();
                if !client {
                    r.wait(i + 1, t, cancel)?;
                    if more {
                        r.post(1)?;
                    }
                }
                s.post(1, true)?;
                if client {
                    r.wait(i + 1, t, cancel)?;
                    if more {
                        r.post(1)?;
                    }
                }
                s.wait(i + 1, t, cancel)?;
            }
        }
    }
    if client {
        let mut delta = deltas(&tposted[..iters])?;
        report(cfg, &mut delta, iters, size, rep)
    } else {
        let _ = writeln!(
            rep,
            " {:<7} {}          (answered; the client reports)",
            size, iters
        );
        Ok(())
    }
}

/// The times between successive posts of `tposted`: one per iteration
/// but the last.
fn deltas(tposted: &[u64]) -> Result<KVec<u64>> {
    let mut delta = KVec::with_capacity(tposted.len().saturating_sub(1), GFP_KERNEL)?;
    for w in tposted.windows(2) {
        delta.push(w[1].saturating_sub(w[0]), GFP_KERNEL)?;
    }
    Ok(delta)
}

/// perftest's latency row of `iters` posts: the deltas between
/// consecutive posts (`delta`), sorted, the two largest dropped; halved
/// for the ping-pongs.
fn report(cfg: &Config, delta: &mut [u64], iters: usize, size: usize, rep: &mut Report) -> Result {
    let rtt: u64 = if matches!(cfg.test, Test::ReadLat | Test::AtomicLat) {
        1
    } else {
        2
    };
    delta.sort_unstable();
    let m = delta.len() - 2;
    let median = if (m - 1) % 2 == 1 {
        (delta[m / 2] + delta[m / 2 - 1]) / 2
    } else {
        delta[m / 2]
    };
    let sum: u64 = delta[..m].iter().sum();
    let avg_ns = sum / m as u64;
    let var = delta[..m]
        .iter()
        .map(|&d| {
            let x = d.abs_diff(avg_ns);
            x.saturating_mul(x)
        })
        .fold(0u64, |a, b| a.saturating_add(b))
        / m as u64;
    let stdev = isqrt(var);
    let i99 = (m * 99).div_ceil(100);
    let i999 = (m * 999).div_ceil(1000);
    // Microseconds with 2 decimals: ns / 10 / rtt.
    let us = |ns: u64| Fixed(ns / 10 / rtt, 2);
    let _ = writeln!(
        rep,
        " {:<7} {}          {:<7}        {:<7}      {:<7}  \t       {:<7}     \t{:<7}\t\t{:<7} \t\t{:<7}",
        size,
        iters,
        us(delta[0]),
        us(delta[m]),
        us(median),
        us(avg_ns),
        us(stdev),
        us(delta[i99.min(m)]),
        us(delta[i999.min(m)])
    );
    Ok(())
}

/// The integer square root.
fn isqrt(v: u64) -> u64 {
    if v < 2 {
        return v;
    }
    let mut x = v;
    let mut y = x.div_ceil(2);
    while y < x {
        x = y;
        y = (x + v / x) / 2;
    }
    x
}
