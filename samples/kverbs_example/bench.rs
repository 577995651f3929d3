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
//! The CQs are polled by the writing thread: by default adaptively
//! (`kverbs::cq::adaptive`: it spins for a bounded time, then sleeps until
//! the CQ's next completion, so that rxe's tasks get the CPU), or
//! `poll=direct` (busy polling), or by the RDMA core (`poll=softirq`,
//! `workqueue`: the thread sleeps on the CQ).
//!
//! `ab=MODE` compares two poll modes in one loopback latency run: a second
//! QP pair whose CQs are polled in `MODE` takes turns with the first, 20
//! iterations each (each pair keeps its streams from block to block), and
//! the table has a row for each, the second for `MODE`.
//! Separate runs differ by up to 3x on the emulated test guests (where
//! rxe's work items and the thread happen to run); interleaved blocks see
//! the same guest.
//!
//! `role=loopback` runs both sides on one device in the writing thread;
//! `role=server` and `role=client` (`addr=`, `port=`, 18515 as perftest's)
//! run one side each on two hosts, which first exchange the test's
//! parameters (they must agree) and RDMA_RC_example's connection data per
//! QP over TCP; the client measures.

mod bw;
mod conn;
mod lat;

use crate::conn::Role;
use crate::control::{ControlConfig, Example, Run};
use crate::options::Opts;
use crate::report::Report;
use core::fmt::Write;
use kernel::prelude::*;
use kverbs::{
    cq::PollCtx,
    device::{Device, Mtu},
    pd::Pd,
    qp::Cancel,
    tcp::Ipv4,
};

/// The largest message (perftest's `-a` goes up to 8 MiB).
const MAX_SIZE: usize = 8 << 20;
/// The most buffer memory a run allocates: two buffers of the largest
/// size per QP, on both sides in loopback.
const MAX_MEMORY: usize = 128 << 20;
/// Timestamps kept per run (two arrays of this many `u64`).
const MAX_SAMPLES: u64 = 1 << 17;
/// Completions processed per poll (perftest's CTX_POLL_BATCH).
const POLL_BATCH: u32 = 16;

/// perftest's default port.
const PORT: u16 = 18515;

/// perftest's tests.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Test {
    WriteBw,
    ReadBw,
    SendBw,
    WriteLat,
    ReadLat,
    SendLat,
    AtomicLat,
}

impl Test {
    const ALL: [(Test, &'static str); 7] = [
        (Test::WriteBw, "write_bw"),
        (Test::ReadBw, "read_bw"),
        (Test::SendBw, "send_bw"),
        (Test::WriteLat, "write_lat"),
        (Test::ReadLat, "read_lat"),
        (Test::SendLat, "send_lat"),
        (Test::AtomicLat, "atomic_lat"),
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

    fn is_send(self) -> bool {
        matches!(self, Test::SendBw | Test::SendLat)
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
            Test::AtomicLat => "Atomic FETCH_AND_ADD Latency Test",
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
    /// A latency run on two QP pairs at once, the second's CQs polled as
    /// this says, in alternate blocks of iterations (`ab=`).
    ab: Option<PollCtx>,
    timeout_ms: u32,
    /// The QPs' local ACK timeout, 4.096 us x 2^qp_timeout (perftest's
    /// `-u`): how long a request waits for its ACK before it is sent
    /// again, 6 times at most.
    qp_timeout: u8,
    /// Sends of at most this many bytes go inline (perftest's `-I`).
    inline: u32,
    role: Role,
    addr: Option<Ipv4>,
    port: u16,
}

impl ControlConfig for Config {
    fn parse(dev: &Device, input: &[u8]) -> Result<Self> {
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
            poll: PollCtx::Adaptive,
            ab: None,
            timeout_ms: 10_000,
            qp_timeout: 14,
            inline: 0,
            role: Role::Loopback,
            addr: None,
            port: PORT,
        };
        let (mut iters, mut tx_depth, mut cq_mod, mut inline) = (None, None, None, None);
        let o = Opts::new(dev, "bench");
        for (key, val) in o.options(input)? {
            let need = || o.need(key, val);
            match key {
                "test" => {
                    let v = need()?;
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
                "size" => cfg.size = Some(o.num_in(key, need()?, 2, MAX_SIZE as u64)?),
                "sizes" => match need()? {
                    "all" => cfg.size = None,
                    v => {
                        pr_warn!("{}: bench: sizes='{}': only sizes=all\n", dev.name(), v);
                        return Err(EINVAL);
                    }
                },
                "iters" => iters = Some(o.num_in(key, need()?, 5, MAX_SAMPLES)?),
                "tx_depth" => tx_depth = Some(o.num_in(key, need()?, 1, 1024)?),
                "cq_mod" => cq_mod = Some(o.num_in(key, need()?, 1, 1024)?),
                "qps" => cfg.qps = o.num_in(key, need()?, 1, 16)?,
                "inline" => inline = Some(o.num_in(key, need()?, 0, 512)?),
                "timeout_ms" => cfg.timeout_ms = o.num_in(key, need()?, 1, 600_000)?,
                "qp_timeout" => cfg.qp_timeout = o.num_in(key, need()?, 1, 31)?,
                "mtu" => {
                    cfg.mtu = Some(o.mtu(key, need()?)?);
                }
                "poll" => {
                    cfg.poll = o.poll(need()?)?;
                }
                "ab" => {
                    cfg.ab = Some(o.poll(need()?)?);
                }
                "role" => {
                    cfg.role = o.pick(key, need()?, &Role::NAMED)?;
                }
                "addr" => {
                    cfg.addr = Some(o.addr(need()?)?);
                }
                "port" => cfg.port = o.num_in(key, need()?, 1, 65535)?,
                "bidir" => {
                    o.no_value(key, val)?;
                    cfg.bidir = true;
                }
                _ => return Err(o.unknown_key(key)),
            }
        }
        let unset = Unset {
            test,
            iters,
            tx_depth,
            cq_mod,
            inline,
        };
        let cfg = defaults(dev, cfg, unset)?;
        check(dev, &cfg)?;
        Ok(cfg)
    }
}

/// The options whose default depends on the test (and `test=`, which
/// has none).
struct Unset {
    test: Option<Test>,
    iters: Option<u32>,
    tx_depth: Option<u32>,
    cq_mod: Option<u32>,
    inline: Option<u32>,
}

/// The test's defaults for the options not given.
fn defaults(dev: &Device, mut cfg: Config, unset: Unset) -> Result<Config> {
    let Unset {
        test,
        iters,
        tx_depth,
        cq_mod,
        inline,
    } = unset;
    cfg.test = test.ok_or_else(|| {
        pr_warn!(
            "{}: bench: test= is missing (write_bw, read_bw, send_bw, write_lat, read_lat, send_lat or atomic_lat)\n",
            dev.name()
        );
        EINVAL
    })?;
    if cfg.test == Test::AtomicLat {
        // perftest's ib_atomic_lat: 8 bytes, whatever the size.
        if cfg.size.is_some_and(|s| s != 8) {
            pr_warn!(
                "{}: bench: atomic_lat works on 8 bytes (size=8)\n",
                dev.name()
            );
            return Err(EINVAL);
        }
        cfg.size = Some(8);
    }
    let bw = cfg.test.is_bw();
    // perftest's defaults: 5000 iterations for bandwidth, 1000 for latency;
    // latency tests keep one request outstanding.
    cfg.iters = iters.unwrap_or(if bw { 5000 } else { 1000 });
    cfg.tx_depth = tx_depth.unwrap_or(if bw { 128 } else { 1 });
    cfg.cq_mod = cq_mod.unwrap_or(if bw { 100 } else { 1 }).min(cfg.tx_depth);
    // perftest's defaults: inline in the latency tests only, up to 220
    // bytes for RDMA WRITE and 236 for SEND.
    cfg.inline = inline.unwrap_or(match cfg.test {
        Test::WriteLat => 220,
        Test::SendLat => 236,
        _ => 0,
    });
    Ok(cfg)
}

/// What a run cannot do: more than one QP or request in a latency test,
/// a client without a server, more memory or samples than allowed.
fn check(dev: &Device, cfg: &Config) -> Result {
    let bw = cfg.test.is_bw();
    if !bw && (cfg.qps > 1 || cfg.bidir || cfg.tx_depth > 1) {
        pr_warn!(
            "{}: bench: {} runs one QP pair, one request at a time (no qps, bidir or tx_depth)\n",
            dev.name(),
            cfg.test.name()
        );
        return Err(EINVAL);
    }
    if cfg.ab.is_some() && (bw || cfg.role != Role::Loopback) {
        pr_warn!(
            "{}: bench: ab= compares poll modes in a loopback latency test only\n",
            dev.name()
        );
        return Err(EINVAL);
    }
    if cfg.role == Role::Client && cfg.addr.is_none() {
        pr_warn!("{}: bench: role=client needs addr=\n", dev.name());
        return Err(EINVAL);
    }
    // Loopback: both sides; ab=: a second pair.
    let sides = match (cfg.role, cfg.ab) {
        (Role::Loopback, Some(_)) => 4,
        (Role::Loopback, None) => 2,
        _ => 1,
    };
    let memory = cfg.size.unwrap_or(MAX_SIZE) * 2 * sides * cfg.qps as usize;
    if memory > MAX_MEMORY {
        pr_warn!(
            "{}: bench: {} QPs of {} bytes take {} MiB of buffers, more than {}\n",
            dev.name(),
            cfg.qps,
            cfg.size.unwrap_or(MAX_SIZE),
            memory >> 20,
            MAX_MEMORY >> 20
        );
        return Err(ERANGE);
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
    Ok(())
}

/// The `bench` file.
pub(crate) struct Bench;

impl Example for Bench {
    const NAME: &'static str = "bench";
    type Config = Config;

    fn run(&self, cfg: &Config, ctx: Run<'_>) -> Result {
        match cfg.role {
            Role::Loopback => run_loopback(ctx.dev, cfg, ctx.cancel, ctx.rep),
            Role::Server | Role::Client => run_two_hosts(ctx.dev, cfg, ctx.cancel, ctx.rep),
        }
    }
}

const LINE: &str =
    "---------------------------------------------------------------------------------------";

/// A number with `dec` decimals, from an integer scaled by 10^dec.
struct Fixed(u64, u32);

impl core::fmt::Display for Fixed {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let p = 10u64.pow(self.1);
        write!(f, "{}.{:0w$}", self.0 / p, self.0 % p, w = self.1 as usize)
    }
}

/// perftest's header and the table's column names.
fn header(dev: &Device, cfg: &Config, mtu: Mtu, role: &str, rep: &mut Report) {
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
        " Device         : {}\t\tRole           : {} (kernel, kverbs)",
        dev.name(),
        role
    );
    let _ = writeln!(rep, " Number of qps   : {}\t\tTransport type : IB", cfg.qps);
    let _ = writeln!(rep, " Connection type : RC\t\tUsing SRQ      : OFF");
    if cfg.test.is_bw() {
        let _ = writeln!(rep, " TX depth        : {}", cfg.tx_depth);
        let _ = writeln!(rep, " CQ Moderation   : {}", cfg.cq_mod);
    }
    let _ = writeln!(rep, " Mtu             : {}[B]", mtu.bytes());
    if !matches!(cfg.test, Test::ReadBw | Test::ReadLat | Test::AtomicLat) {
        let _ = writeln!(rep, " Max inline data : {}[B]", cfg.inline);
    }
    let _ = writeln!(rep, " Link type       : {:?}", dev.link_layer(port));
    let _ = writeln!(rep, " Polling         : {}", cfg.poll.name());
    if let Some(ab) = cfg.ab {
        let _ = writeln!(
            rep,
            " Interleaved     : poll={} (blocks of {} iterations; its row second)",
            ab.name(),
            lat::AB_BLOCK
        );
    }
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
}

/// The sizes of a run: one, or every power of two up to `MAX_SIZE`.
fn sizes(cfg: &Config) -> impl Iterator<Item = usize> {
    let (first, last) = match cfg.size {
        Some(s) => (s, s),
        None => (2, MAX_SIZE),
    };
    core::iter::successors(Some(first), move |&s| (s < last).then_some(s * 2))
}

/// The last line of an adaptive run: how its sleeps on the CQs ended
/// since `before` (counts of the whole module: runs are one at a time per
/// device, but another device's run would be counted too).
fn footer(cfg: &Config, before: (u64, u64), rep: &mut Report) {
    if cfg.poll == PollCtx::Adaptive {
        let (woken, timed_out) = kverbs::cq::adaptive::cq_sleeps();
        let _ = writeln!(
            rep,
            " CQ sleeps       : {} woken by a completion, {} timed out",
            woken - before.0,
            timed_out - before.1
        );
    }
}

fn run_loopback(dev: &Device, cfg: &Config, cancel: &Cancel, rep: &mut Report) -> Result {
    let sleeps = kverbs::cq::adaptive::cq_sleeps();
    let max = cfg.size.unwrap_or(MAX_SIZE);
    let pd = Pd::new(dev)?;
    let p = conn::Params::new(dev, cfg)?;
    let pairs = conn::loopback(dev, &pd, &p, cfg, cfg.poll, max, cancel)?;
    // A second pair for `ab=`, its CQs polled the other way.
    let other = match cfg.ab {
        Some(ab) => Some(conn::loopback(dev, &pd, &p, cfg, ab, max, cancel)?),
        None => None,
    };
    header(dev, cfg, p.mtu, "loopback", rep);
    // The timestamps: allocated once, before any measured loop.
    let n = (cfg.iters as usize) * (cfg.qps as usize);
    let mut stamps = bw::Stamps::new(n * 2)?;
    let mut specs = KVec::with_capacity(pairs.len() * 2, GFP_KERNEL)?;
    for dir in 0..if cfg.bidir { 2 } else { 1 } {
        for pair in pairs.iter() {
            let (me, peer) = match dir {
                0 => (&pair.client, &pair.server),
                _ => (&pair.server, &pair.client),
            };
            specs.push(
                bw::LaneSpec {
                    dir,
                    send: Some((me, peer.remote)),
                    recv: (cfg.test == Test::SendBw).then_some(peer),
                },
                GFP_KERNEL,
            )?;
        }
    }
    for size in sizes(cfg) {
        if cfg.test.is_bw() {
            bw::run(cfg, &specs, size, cancel, &mut stamps, rep, &mut |_| Ok(()))?;
        } else if let Some(other) = &other {
            let ab = [&pairs[0], &other[0]];
            lat::loopback_ab(cfg, ab, size, cancel, &mut stamps.posted, rep)?;
        } else {
            lat::loopback(cfg, &pairs[0], size, cancel, &mut stamps.posted, rep)?;
        }
    }
    let _ = writeln!(rep, "{}", LINE);
    footer(cfg, sleeps, rep);
    // Teardown as the values drop: MRs (deregistered), QPs (drained), CQs,
    // buffers, PD.
    Ok(())
}

fn run_two_hosts(dev: &Device, cfg: &Config, cancel: &Cancel, rep: &mut Report) -> Result {
    let sleeps = kverbs::cq::adaptive::cq_sleeps();
    let client = cfg.role == Role::Client;
    let t = cfg.timeout_ms;
    let max = cfg.size.unwrap_or(MAX_SIZE);
    let sock = conn::connect_peer(dev, cfg, cancel, rep)?;
    let pd = Pd::new(dev)?;
    let p = conn::Params::new(dev, cfg)?;
    let sides = conn::tcp_sides(&pd, &p, cfg, max, &sock, cancel, rep)?;
    header(
        dev,
        cfg,
        p.mtu,
        if client { "client" } else { "server" },
        rep,
    );
    let n = (cfg.iters as usize) * (cfg.qps as usize);
    let mut stamps = bw::Stamps::new(n)?;
    // The client sends; the server too with bidir; whoever is sent SENDs
    // receives them.
    let sends = client || cfg.bidir;
    let recvs = cfg.test == Test::SendBw && (!client || cfg.bidir);
    let mut specs = KVec::with_capacity(sides.len(), GFP_KERNEL)?;
    for (side, remote) in sides.iter() {
        specs.push(
            bw::LaneSpec {
                dir: 0,
                send: sends.then_some((side, *remote)),
                recv: recvs.then_some(side),
            },
            GFP_KERNEL,
        )?;
    }
    // Each size starts when both sides are ready (their receives posted)
    // and ends when both are done.
    let mut ready = |rep: &mut Report| crate::conn::sync(&sock, b'S', t, cancel, rep);
    for size in sizes(cfg) {
        if cfg.test.is_bw() {
            if !sends && !recvs {
                // write_bw/read_bw server: the client works on our memory.
                ready(rep)?;
                let _ = writeln!(rep, " {:<7}    {:<10}       (the client reports)", size, n);
            } else {
                bw::run(cfg, &specs, size, cancel, &mut stamps, rep, &mut ready)?;
            }
        } else {
            let (side, remote) = &sides[0];
            lat::two_hosts(
                cfg,
                side,
                *remote,
                client,
                size,
                cancel,
                &mut stamps.posted,
                rep,
                &mut ready,
            )?;
        }
        crate::conn::sync(&sock, b'E', t, cancel, rep)?;
    }
    let _ = writeln!(rep, "{}", LINE);
    footer(cfg, sleeps, rep);
    Ok(())
}
