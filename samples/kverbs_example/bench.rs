// SPDX-License-Identifier: GPL-2.0

//! The benchmark: perftest's six tests (ib_write_bw, ib_read_bw,
//! ib_send_bw, ib_write_lat, ib_read_lat, ib_send_lat) in the kernel,
//! driven through the per-device debugfs file `bench`.
//!
//! Writing `test=write_bw,size=65536` runs the test and blocks until it is
//! done; reading the file returns perftest's table for it. The measurement
//! is perftest's: bandwidth tests keep `tx_depth` requests outstanding per
//! QP, signal one in `cq_mod`, and time each post and each completion (BW
//! average over the whole run, BW peak over the best stretch, MB = 2^20
//! bytes); `write_lat` is a ping-pong of RDMA WRITEs, each side polling the
//! last byte of its buffer; `send_lat` a ping-pong of SENDs; `read_lat` one
//! READ at a time; latencies are the deltas between consecutive posts
//! (halved for the ping-pongs), the two largest dropped, as perftest does.
//!
//! The measured loops allocate nothing: buffers, MRs, QPs and the layer's
//! streams (`kverbs::stream`: requests built once, posted as chains,
//! completions counted by batch polling) are set up before.
//!
//! `role=loopback` (both sides on one device, one thread: the requester
//! and the responder are the same kernel thread) is the only role so far.

use crate::rc::{pick_gid, Example, Report, Stats};
use core::fmt::Write;
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    cq::{Cq, PollCtx},
    device::{Device, Mtu},
    dma::DmaBuf,
    mr::Mr,
    pd::Pd,
    qp::{
        Access, AddressVector, Cancel, InitAttr, Qp, QpCaps, RemoteBuf, RtrAttr, RtsAttr, SendOp,
    },
    stream::{RecvStream, Segment, SendStream},
};

/// The largest message: what one fast-registration MR maps on rxe
/// (512 pages) with room to spare.
const MAX_SIZE: usize = 1 << 20;
/// Timestamps kept per run (two arrays of this many `u64`).
const MAX_SAMPLES: u64 = 1 << 17;
/// perftest's receive queue depth of the send tests.
const RX_DEPTH: u32 = 512;
/// Completions processed per poll (perftest's CTX_POLL_BATCH).
const POLL_BATCH: u32 = 16;

/// perftest's tests.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Test {
    WriteBw,
    ReadBw,
    SendBw,
    WriteLat,
    ReadLat,
    SendLat,
}

impl Test {
    const ALL: [(Test, &'static str); 6] = [
        (Test::WriteBw, "write_bw"),
        (Test::ReadBw, "read_bw"),
        (Test::SendBw, "send_bw"),
        (Test::WriteLat, "write_lat"),
        (Test::ReadLat, "read_lat"),
        (Test::SendLat, "send_lat"),
    ];

    fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(t, _)| *t == self)
            .map_or("?", |(_, n)| n)
    }

    fn is_bw(self) -> bool {
        matches!(self, Test::WriteBw | Test::ReadBw | Test::SendBw)
    }

    /// perftest's title line.
    fn title(self) -> &'static str {
        match self {
            Test::WriteBw => "RDMA_Write BW Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::SendBw => "Send BW Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::SendLat => "Send Latency Test",
        }
    }
}

/// A parsed `bench` string.
pub(crate) struct Config {
    test: Test,
    /// `None`: all powers of two from 2 to `MAX_SIZE` (perftest's `-a`).
    size: Option<usize>,
    iters: u32,
    tx_depth: u32,
    cq_mod: u32,
    qps: u32,
    bidir: bool,
    mtu: Option<Mtu>,
    poll: PollCtx,
    timeout_ms: u32,
}

fn parse_num(dev: &Device, key: &str, v: &str, min: u64, max: u64) -> Result<u32> {
    let n = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse::<u64>(),
    };
    match n {
        Ok(n) if (min..=max).contains(&n) => Ok(n as u32),
        Ok(n) => {
            pr_warn!(
                "{}: bench: {}={} is out of range [{}, {}]\n",
                dev.name(),
                key,
                n,
                min,
                max
            );
            Err(ERANGE)
        }
        Err(_) => {
            pr_warn!("{}: bench: {}: '{}' is not a number\n", dev.name(), key, v);
            Err(EINVAL)
        }
    }
}

fn parse<'a>(dev: &Device, input: &'a [u8]) -> Result<Config> {
    let text = core::str::from_utf8(input).map_err(|_| {
        pr_warn!("{}: bench: the control string is not text\n", dev.name());
        EINVAL
    })?;
    let mut test = None;
    let mut cfg = Config {
        test: Test::WriteBw,
        size: Some(65536),
        iters: 0,
        tx_depth: 128,
        cq_mod: 100,
        qps: 1,
        bidir: false,
        mtu: None,
        poll: PollCtx::Direct,
        timeout_ms: 10_000,
    };
    let (mut iters, mut tx_depth, mut cq_mod) = (None, None, None);
    for opt in text.split(|c: char| c == ',' || c.is_ascii_whitespace()) {
        if opt.is_empty() {
            continue;
        }
        let (key, val) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        let need = |v: Option<&'a str>| -> Result<&'a str> {
            v.ok_or_else(|| {
                pr_warn!("{}: bench: '{}' needs a value\n", dev.name(), key);
                EINVAL
            })
        };
        match key {
            "test" => {
                let v = need(val)?;
                test = Some(
                    Test::ALL
                        .iter()
                        .find(|(_, n)| *n == v)
                        .map(|(t, _)| *t)
                        .ok_or_else(|| {
                            pr_warn!("{}: bench: unknown test '{}'\n", dev.name(), v);
                            EINVAL
                        })?,
                );
            }
            "size" => {
                cfg.size = Some(parse_num(dev, key, need(val)?, 2, MAX_SIZE as u64)? as usize)
            }
            "sizes" => match need(val)? {
                "all" => cfg.size = None,
                v => {
                    pr_warn!("{}: bench: sizes='{}': only sizes=all\n", dev.name(), v);
                    return Err(EINVAL);
                }
            },
            "iters" => iters = Some(parse_num(dev, key, need(val)?, 5, MAX_SAMPLES)?),
            "tx_depth" => tx_depth = Some(parse_num(dev, key, need(val)?, 1, 1024)?),
            "cq_mod" => cq_mod = Some(parse_num(dev, key, need(val)?, 1, 1024)?),
            "qps" => cfg.qps = parse_num(dev, key, need(val)?, 1, 16)?,
            "timeout_ms" => cfg.timeout_ms = parse_num(dev, key, need(val)?, 1, 600_000)?,
            "mtu" => {
                let bytes = parse_num(dev, key, need(val)?, 256, 4096)?;
                cfg.mtu = Some(Mtu::from_bytes(bytes).ok_or_else(|| {
                    pr_warn!(
                        "{}: bench: mtu {} is not 256, 512, 1024, 2048 or 4096\n",
                        dev.name(),
                        bytes
                    );
                    EINVAL
                })?);
            }
            "poll" => {
                let v = need(val)?;
                cfg.poll = PollCtx::from_name(v).ok_or_else(|| {
                    pr_warn!(
                        "{}: bench: poll '{}' is not direct, softirq or workqueue\n",
                        dev.name(),
                        v
                    );
                    EINVAL
                })?;
            }
            "role" => match need(val)? {
                "loopback" => {}
                v @ ("server" | "client") => {
                    pr_warn!(
                        "{}: bench: role={} (two hosts) is not implemented yet; use role=loopback\n",
                        dev.name(),
                        v
                    );
                    return Err(kverbs::errno::eopnotsupp());
                }
                v => {
                    pr_warn!("{}: bench: unknown role '{}'\n", dev.name(), v);
                    return Err(EINVAL);
                }
            },
            "bidir" => {
                if val.is_some() {
                    pr_warn!("{}: bench: 'bidir' takes no value\n", dev.name());
                    return Err(EINVAL);
                }
                cfg.bidir = true;
            }
            _ => {
                pr_warn!("{}: bench: unknown key '{}'\n", dev.name(), key);
                return Err(EINVAL);
            }
        }
    }
    cfg.test = test.ok_or_else(|| {
        pr_warn!(
            "{}: bench: test= is missing (write_bw, read_bw, send_bw, write_lat, read_lat or send_lat)\n",
            dev.name()
        );
        EINVAL
    })?;
    let bw = cfg.test.is_bw();
    // perftest's defaults: 5000 iterations for bandwidth, 1000 for latency;
    // latency tests keep one request outstanding.
    cfg.iters = iters.unwrap_or(if bw { 5000 } else { 1000 });
    cfg.tx_depth = tx_depth.unwrap_or(if bw { 128 } else { 1 });
    cfg.cq_mod = cq_mod.unwrap_or(if bw { 100 } else { 1 }).min(cfg.tx_depth);
    if !bw && (cfg.qps > 1 || cfg.bidir || cfg.tx_depth > 1) {
        pr_warn!(
            "{}: bench: {} runs one QP pair, one request at a time (no qps, bidir or tx_depth)\n",
            dev.name(),
            cfg.test.name()
        );
        return Err(EINVAL);
    }
    if u64::from(cfg.iters) * u64::from(cfg.qps) > MAX_SAMPLES {
        pr_warn!(
            "{}: bench: iters x qps = {} is more than {} samples\n",
            dev.name(),
            u64::from(cfg.iters) * u64::from(cfg.qps),
            MAX_SAMPLES
        );
        return Err(ERANGE);
    }
    Ok(cfg)
}

/// The `bench` file.
pub(crate) struct Bench;

impl Example for Bench {
    const NAME: &'static str = "bench";
    type Config = Config;

    fn parse(dev: &Device, input: &[u8]) -> Result<Config> {
        parse(dev, input)
    }

    fn run(
        &self,
        dev: &Device,
        cfg: &Config,
        cancel: &Cancel,
        _stats: &Stats,
        rep: &mut Report,
    ) -> Result {
        run_loopback(dev, cfg, cancel, rep)
    }
}

const LINE: &str =
    "---------------------------------------------------------------------------------------";

/// One side of a QP pair: its QP, its buffers and the peer's view of the
/// registered one.
///
/// The peer writes into, reads from and sends to `rbuf` (registered for
/// remote read and write); this side writes from, reads into and sends
/// from `sbuf`.
struct Side {
    qp: Qp<kverbs::qp::Rts>,
    rbuf: Arc<DmaBuf>,
    sbuf: Arc<DmaBuf>,
    _mr: Mr,
    remote: RemoteBuf,
}

/// A QP pair, client and server, on one device.
struct Pair {
    client: Side,
    server: Side,
}

fn setup(
    dev: &Device,
    pd: &Pd,
    cfg: &Config,
    max: usize,
    cancel: &Cancel,
) -> Result<(KVec<Pair>, kverbs::device::Mtu)> {
    let port = *dev.ports().start();
    let (gid_idx, gid) = pick_gid(dev, port, None)?;
    let mtu = match cfg.mtu {
        Some(m) => m,
        None => dev.query_port(port)?.active_mtu(),
    };
    let send_test = matches!(cfg.test, Test::SendBw | Test::SendLat);
    let rx = if send_test {
        RX_DEPTH.min(cfg.iters)
    } else {
        1
    };
    let caps = QpCaps {
        max_send_wr: cfg.tx_depth.max(1),
        max_recv_wr: rx,
    };
    let init = InitAttr {
        pkey_index: 0,
        access: Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
    };
    // RDMA READs outstanding: as many as the device takes (perftest's
    // default), not RDMA_RC_example's one; READ bandwidth depends on it.
    let attrs = dev.attrs();
    let resp_res = attrs.max_qp_rd_atom().clamp(1, 255) as u8;
    let init_depth = attrs.max_qp_init_rd_atom().clamp(1, 255) as u8;
    let rtr = |dest_qp_num| RtrAttr {
        path_mtu: mtu,
        dest_qp_num,
        rq_psn: 0,
        max_dest_rd_atomic: resp_res,
        min_rnr_timer: 12,
        av: AddressVector::new(gid, gid_idx as u8),
    };
    let rts = RtsAttr {
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: 0,
        max_rd_atomic: init_depth,
    };
    let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    let t = cfg.timeout_ms;
    let mut pairs = KVec::with_capacity(cfg.qps as usize, GFP_KERNEL)?;
    for _ in 0..cfg.qps {
        let ccq = Cq::new(dev, caps.cq_entries(), cfg.poll)?;
        let scq = Cq::new(dev, caps.cq_entries(), cfg.poll)?;
        let c = Qp::new_rc(pd, port, &ccq, &ccq, caps)?.to_init(&init)?;
        let s = Qp::new_rc(pd, port, &scq, &scq, caps)?.to_init(&init)?;
        let (cn, sn) = (c.qp_num(), s.qp_num());
        let c = c.to_rtr(&rtr(sn))?.to_rts(&rts)?;
        let s = s.to_rtr(&rtr(cn))?.to_rts(&rts)?;
        let side = |qp: Qp<kverbs::qp::Rts>| -> Result<Side> {
            let rbuf = Arc::new(DmaBuf::new(dev, max)?, GFP_KERNEL)?;
            let sbuf = Arc::new(DmaBuf::new(dev, max)?, GFP_KERNEL)?;
            let mr = Mr::new(pd, max)?;
            let remote = mr.register(&qp, &rbuf, access, t, cancel)?;
            Ok(Side {
                qp,
                rbuf,
                sbuf,
                _mr: mr,
                remote,
            })
        };
        pairs.push(
            Pair {
                client: side(c)?,
                server: side(s)?,
            },
            GFP_KERNEL,
        )?;
    }
    Ok((pairs, mtu))
}

fn run_loopback(dev: &Device, cfg: &Config, cancel: &Cancel, rep: &mut Report) -> Result {
    let max = cfg.size.unwrap_or(MAX_SIZE);
    let pd = Pd::new(dev)?;
    let (pairs, mtu) = setup(dev, &pd, cfg, max, cancel)?;
    let port = *dev.ports().start();
    let _ = writeln!(rep, "{}", LINE);
    let _ = writeln!(
        rep,
        "                    {}{}",
        if cfg.bidir { "Bidirectional " } else { "" },
        cfg.test.title()
    );
    let _ = writeln!(
        rep,
        " Device         : {}\t\tRole           : loopback (kernel, kverbs)",
        dev.name()
    );
    let _ = writeln!(rep, " Number of qps   : {}\t\tTransport type : IB", cfg.qps);
    let _ = writeln!(rep, " Connection type : RC\t\tUsing SRQ      : OFF");
    if cfg.test.is_bw() {
        let _ = writeln!(rep, " TX depth        : {}", cfg.tx_depth);
        let _ = writeln!(rep, " CQ Moderation   : {}", cfg.cq_mod);
    }
    let _ = writeln!(rep, " Mtu             : {}[B]", mtu.bytes());
    let _ = writeln!(rep, " Link type       : {:?}", dev.link_layer(port));
    let _ = writeln!(rep, " Polling         : {}", cfg.poll.name());
    let _ = writeln!(rep, "{}", LINE);
    if cfg.test.is_bw() {
        let _ = writeln!(
            rep,
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        );
    } else {
        let _ = writeln!(
            rep,
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
        );
    }
    // The timestamps: allocated once, before any measured loop.
    let n = (cfg.iters as usize) * (cfg.qps as usize);
    let dirs = if cfg.bidir { 2 } else { 1 };
    let mut tposted = KVec::from_elem(0u64, n * dirs, GFP_KERNEL)?;
    let mut tcompleted = KVec::from_elem(0u64, n * dirs, GFP_KERNEL)?;
    let mut size = if cfg.size.is_some() { max } else { 2 };
    while size <= max {
        match cfg.test {
            Test::WriteBw | Test::ReadBw | Test::SendBw => bw(
                cfg,
                &pairs,
                size,
                cancel,
                &mut tposted,
                &mut tcompleted,
                rep,
            )?,
            Test::WriteLat | Test::ReadLat | Test::SendLat => {
                lat(cfg, &pairs[0], size, cancel, &mut tposted, rep)?
            }
        }
        size *= 2;
    }
    let _ = writeln!(rep, "{}", LINE);
    // Teardown as the values drop: MRs (deregistered), QPs (drained), CQs,
    // buffers, PD.
    drop(pairs);
    Ok(())
}

/// A number with `dec` decimals, from an integer scaled by 10^dec.
struct Fixed(u64, u32);

impl core::fmt::Display for Fixed {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let p = 10u64.pow(self.1);
        write!(f, "{}.{:0w$}", self.0 / p, self.0 % p, w = self.1 as usize)
    }
}

/// A sending lane of a bandwidth test: one QP's stream toward its peer,
/// and the peer's receives for SEND.
struct Lane<'a> {
    dir: usize,
    send: SendStream<'a>,
    recv: Option<RecvStream<'a, kverbs::qp::Rts, kverbs::qp::Rc>>,
    completed: u64,
}

#[allow(clippy::too_many_arguments)]
fn bw(
    cfg: &Config,
    pairs: &[Pair],
    size: usize,
    cancel: &Cancel,
    tposted: &mut [u64],
    tcompleted: &mut [u64],
    rep: &mut Report,
) -> Result {
    let iters = u64::from(cfg.iters);
    let n = (cfg.iters as usize) * pairs.len();
    let mut lanes = KVec::with_capacity(pairs.len() * 2, GFP_KERNEL)?;
    for dir in 0..if cfg.bidir { 2 } else { 1 } {
        for p in pairs {
            let (me, peer) = if dir == 0 {
                (&p.client, &p.server)
            } else {
                (&p.server, &p.client)
            };
            let op = match cfg.test {
                Test::WriteBw => SendOp::Write(peer.remote),
                Test::ReadBw => SendOp::Read(peer.remote),
                _ => SendOp::Send,
            };
            let wr = (
                op,
                Segment {
                    buf: me.sbuf.clone(),
                    offset: 0,
                    len: size,
                },
            );
            let send = SendStream::new(&me.qp, &[wr], cfg.tx_depth, cfg.cq_mod)?;
            let recv = if cfg.test == Test::SendBw {
                let seg = Segment {
                    buf: peer.rbuf.clone(),
                    offset: 0,
                    len: size,
                };
                let depth = RX_DEPTH.min(cfg.iters);
                let mut r = RecvStream::new(&peer.qp, &[seg], depth)?;
                r.post(depth)?;
                Some(r)
            } else {
                None
            };
            lanes.push(
                Lane {
                    dir,
                    send,
                    recv,
                    completed: 0,
                },
                GFP_KERNEL,
            )?;
        }
    }
    let mut tots = [0usize; 2];
    let mut totc = [0usize; 2];
    let mut last_progress = kverbs::now_ns();
    let timeout_ns = u64::from(cfg.timeout_ms) * 1_000_000;
    let mut spins = 0u32;
    loop {
        let mut busy = false;
        let mut progress = false;
        for lane in lanes.iter_mut() {
            let d = lane.dir;
            let base = d * n;
            let posted = lane.send.posted();
            if posted < iters {
                busy = true;
                let want = (iters - posted) as u32;
                let room = lane.send.room().min(want);
                if room > 0 {
                    let t = kverbs::now_ns();
                    let k = lane.send.post(room, room == want)? as usize;
                    for ts in &mut tposted[base + tots[d]..base + tots[d] + k] {
                        *ts = t;
                    }
                    tots[d] += k;
                }
            }
            if let Some(r) = lane.recv.as_mut() {
                r.poll(POLL_BATCH)?;
                let left = iters - r.posted().min(iters);
                if left > 0 {
                    r.post(r.room().min(left as u32))?;
                }
            }
            let c = lane.send.poll(POLL_BATCH)?;
            if c > lane.completed {
                let t = kverbs::now_ns();
                let k = (c - lane.completed) as usize;
                for ts in &mut tcompleted[base + totc[d]..base + totc[d] + k] {
                    *ts = t;
                }
                totc[d] += k;
                lane.completed = c;
                progress = true;
            }
            if lane.completed < iters {
                busy = true;
            }
            if let Some(r) = lane.recv.as_ref() {
                if r.completed() < iters {
                    busy = true;
                }
            }
        }
        if !busy {
            break;
        }
        let now = kverbs::now_ns();
        if progress {
            last_progress = now;
        } else {
            spins = spins.wrapping_add(1);
            if spins % 64 == 0 {
                if cancel.is_cancelled() {
                    return Err(kverbs::errno::ecanceled());
                }
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
                kverbs::cond_resched();
            }
        }
    }
    drop(lanes);
    // perftest's report, per direction, summed.
    let (mut peak, mut avg, mut rate) = (0u64, 0u64, 0u64);
    for d in 0..if cfg.bidir { 2 } else { 1 } {
        let tp = &tposted[d * n..d * n + n];
        let tc = &tcompleted[d * n..d * n + n];
        let total_ns = tc[n - 1].saturating_sub(tp[0]).max(1);
        let (size, n64) = (size as u64, n as u64);
        // MB/sec (2^20 bytes) with 2 decimals, Mpps with 6.
        avg += kverbs::mul_div(size * n64 * 100, 1_000_000_000, total_ns) >> 20;
        rate += kverbs::mul_div(n64, 1_000_000_000, total_ns);
        let cq_mod = cfg.cq_mod as usize;
        // The best stretch, in picoseconds per message.
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
            if cancel.is_cancelled() {
                return Err(kverbs::errno::ecanceled());
            }
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

fn lat(
    cfg: &Config,
    p: &Pair,
    size: usize,
    cancel: &Cancel,
    tposted: &mut [u64],
    rep: &mut Report,
) -> Result {
    let iters = cfg.iters as usize;
    let t = cfg.timeout_ms;
    let (c, s) = (&p.client, &p.server);
    let seg = |buf: &Arc<DmaBuf>| Segment {
        buf: buf.clone(),
        offset: 0,
        len: size,
    };
    match cfg.test {
        Test::WriteLat => {
            let mut cw = SendStream::new(&c.qp, &[(SendOp::Write(s.remote), seg(&c.sbuf))], 1, 1)?;
            let mut sw = SendStream::new(&s.qp, &[(SendOp::Write(c.remote), seg(&s.sbuf))], 1, 1)?;
            for (i, ts) in tposted.iter_mut().enumerate().take(iters) {
                // The iteration in the last byte: what the peer polls for.
                let v = (i % 255) as u8 + 1;
                *ts = kverbs::now_ns();
                c.sbuf.write(size - 1, &[v])?;
                cw.post(1, true)?;
                spin_byte(&s.rbuf, size - 1, v, cfg, cancel)?;
                s.sbuf.write(size - 1, &[v])?;
                sw.post(1, true)?;
                spin_byte(&c.rbuf, size - 1, v, cfg, cancel)?;
                cw.wait(i as u64 + 1, t, cancel)?;
                sw.wait(i as u64 + 1, t, cancel)?;
            }
        }
        Test::ReadLat => {
            let mut cr = SendStream::new(&c.qp, &[(SendOp::Read(s.remote), seg(&c.sbuf))], 1, 1)?;
            for (i, ts) in tposted.iter_mut().enumerate().take(iters) {
                *ts = kverbs::now_ns();
                cr.post(1, true)?;
                cr.wait(i as u64 + 1, t, cancel)?;
            }
        }
        _ => {
            let mut cs = SendStream::new(&c.qp, &[(SendOp::Send, seg(&c.sbuf))], 1, 1)?;
            let mut ss = SendStream::new(&s.qp, &[(SendOp::Send, seg(&s.sbuf))], 1, 1)?;
            let mut cr = RecvStream::new(&c.qp, &[seg(&c.rbuf)], 1)?;
            let mut sr = RecvStream::new(&s.qp, &[seg(&s.rbuf)], 1)?;
            cr.post(1)?;
            sr.post(1)?;
            for (i, ts) in tposted.iter_mut().enumerate().take(iters) {
                let i = i as u64;
                *ts = kverbs::now_ns();
                cs.post(1, true)?;
                sr.wait(i + 1, t, cancel)?;
                if i + 1 < iters as u64 {
                    sr.post(1)?;
                }
                ss.post(1, true)?;
                cr.wait(i + 1, t, cancel)?;
                if i + 1 < iters as u64 {
                    cr.post(1)?;
                }
                cs.wait(i + 1, t, cancel)?;
                ss.wait(i + 1, t, cancel)?;
            }
        }
    }
    // perftest: deltas between consecutive posts, sorted, the two largest
    // dropped; halved for the ping-pongs.
    let rtt: u64 = if cfg.test == Test::ReadLat { 1 } else { 2 };
    let mut delta = KVec::with_capacity(iters - 1, GFP_KERNEL)?;
    for w in tposted[..iters].windows(2) {
        delta.push(w[1].saturating_sub(w[0]), GFP_KERNEL)?;
    }
    delta.sort_unstable();
    let m = delta.len() - 2;
    let median = if (m - 1) % 2 == 1 {
        (delta[m / 2] + delta[m / 2 - 1]) / 2
    } else {
        delta[m / 2]
    };
    let sum: u64 = delta[..m].iter().sum();
    let avg_ns = sum / m as u64; // of round trips
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
