// SPDX-License-Identifier: GPL-2.0

//! The RC example: the flow of RDMA_RC_example (resources_create,
//! connect_qp, SEND, RDMA READ, RDMA WRITE, resources_destroy) run in the
//! kernel, driven through the per-device debugfs file `rc`.
//!
//! Writing a krping-style option string (`role=loopback,size=4096,
//! iters=2,validate`) runs the example and blocks the writer until it is
//! done; reading the file returns the report of the last run.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::{new_mutex, prelude::*, sync::Arc, sync::Mutex, types::ARef};
use kverbs::{
    cq::{Cq, PollCtx},
    device::{Device, GidType, Mtu, PortState},
    dma::DmaBuf,
    errno,
    mr::Mr,
    pd::Pd,
    qp::{
        Access, AddressVector, AtomicOp, Cancel, InitAttr, Qp, QpCaps, RemoteBuf, RtrAttr, Rts,
        RtsAttr, SendOp, WrId,
    },
    tcp::{Ipv4, TcpListener, TcpStream},
    wc::WcOpcode,
    Show, Store,
};

/// rping's default port, and its buffer size limits.
const RPING_PORT: u16 = 7174;
const RPING_MIN_SIZE: usize = 26;
const RPING_MAX_SIZE: usize = 65535;

/// The immediate data of SEND and RDMA WRITE with immediate, XORed with
/// the iteration.
const IMM_SEND: u32 = 0x5e4d_0000;
const IMM_WRITE: u32 = 0x3a17_0000;

/// The largest buffer a run uses.
const MAX_SIZE: usize = 8 << 20;
/// The buffer of RDMA_RC_example: a 20-character message and its NUL.
const MSG_SIZE: usize = 21;
/// RDMA_RC_example's messages.
const MSG_SEND: &[u8; 20] = b"SEND operation      ";
const MSG_READ: &[u8; 20] = b"RDMA read operation ";
const MSG_WRITE: &[u8; 20] = b"RDMA write operation";

/// Who this side is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Role {
    /// Server and client QPs on one device, in this kernel.
    Loopback,
    /// The RDMA_RC_example server, over TCP.
    Server,
    /// The RDMA_RC_example client, over TCP.
    Client,
    /// rping's server, connected by the RDMA connection manager.
    CmServer,
    /// rping's client, connected by the RDMA connection manager.
    CmClient,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Loopback => "loopback",
            Role::Server => "server",
            Role::Client => "client",
            Role::CmServer => "cm_server",
            Role::CmClient => "cm_client",
        }
    }
}

/// A parsed control string.
pub(crate) struct Config {
    pub(crate) role: Role,
    pub(crate) addr: Option<Ipv4>,
    pub(crate) port: u16,
    pub(crate) gid_idx: Option<u32>,
    pub(crate) size: usize,
    pub(crate) iters: u32,
    pub(crate) mtu: Mtu,
    pub(crate) validate: bool,
    pub(crate) imm: bool,
    /// Keep the invalidated registration's QP and buffer until the peer
    /// has probed the stale rkey, then check the buffer did not change.
    pub(crate) linger: bool,
    /// Fetch-and-adds the client does on the server's buffer, followed by
    /// two compare-and-swaps; 0: none, and no remote atomic access.
    pub(crate) atomics: u32,
    pub(crate) poll: PollCtx,
    pub(crate) timeout_ms: u32,
}

impl Config {
    fn defaults() -> Self {
        Config {
            role: Role::Loopback,
            addr: None,
            port: 19875,
            gid_idx: None,
            size: MSG_SIZE,
            iters: 1,
            mtu: Mtu::MTU_256,
            validate: false,
            imm: false,
            linger: false,
            atomics: 0,
            poll: PollCtx::Softirq,
            timeout_ms: 5000,
        }
    }
}

fn parse_num<T: TryFrom<u64>>(dev: &Device, key: &str, v: &str, min: u64, max: u64) -> Result<T> {
    parse_num_in("rc", dev, key, v, min, max)
}

/// `key=v` of the control file `file`: a decimal or `0x` number in
/// `min..=max` (`ERANGE` outside, `EINVAL` if not a number, each with a
/// kernel log line).
pub(crate) fn parse_num_in<T: TryFrom<u64>>(
    file: &str,
    dev: &Device,
    key: &str,
    v: &str,
    min: u64,
    max: u64,
) -> Result<T> {
    let n = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse::<u64>(),
    };
    match n {
        Ok(n) if (min..=max).contains(&n) => T::try_from(n).map_err(|_| EINVAL),
        Ok(n) => {
            pr_warn!(
                "{}: {}: {}={} is out of range [{}, {}]\n",
                dev.name(),
                file,
                key,
                n,
                min,
                max
            );
            Err(ERANGE)
        }
        Err(_) => {
            pr_warn!(
                "{}: {}: {}: '{}' is not a number\n",
                dev.name(),
                file,
                key,
                v
            );
            Err(EINVAL)
        }
    }
}

pub(crate) fn parse_ipv4(v: &str) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut parts = v.split('.');
    for b in out.iter_mut() {
        *b = parts.next()?.parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Parses `key=value` options separated by commas, blanks or newlines.
/// The options of a control string of the file `file`: `key` or
/// `key=value`, separated by commas, blanks or newlines. `EINVAL` (and a
/// log line) if the string is not text.
pub(crate) fn options<'a>(
    dev: &Device,
    file: &str,
    input: &'a [u8],
) -> Result<impl Iterator<Item = (&'a str, Option<&'a str>)>> {
    let text = core::str::from_utf8(input).map_err(|_| {
        pr_warn!("{}: {}: the control string is not text\n", dev.name(), file);
        EINVAL
    })?;
    Ok(text
        .split(|c: char| c == ',' || c.is_ascii_whitespace())
        .filter(|opt| !opt.is_empty())
        .map(|opt| match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        }))
}

/// The value of option `key` of the file `file`, or `EINVAL` (and a log
/// line) if it has none.
pub(crate) fn need<'a>(
    dev: &Device,
    file: &str,
    key: &str,
    val: Option<&'a str>,
) -> Result<&'a str> {
    val.ok_or_else(|| {
        pr_warn!("{}: {}: '{}' needs a value\n", dev.name(), file, key);
        EINVAL
    })
}

fn parse<'a>(dev: &Device, input: &'a [u8]) -> Result<Config> {
    let mut cfg = Config::defaults();
    let mut have_role = false;
    let (mut port_set, mut size_set) = (false, false);
    for (key, val) in options(dev, "rc", input)? {
        let need = |v: Option<&'a str>| need(dev, "rc", key, v);
        match key {
            "role" => {
                cfg.role = match need(val)? {
                    "loopback" => Role::Loopback,
                    "server" => Role::Server,
                    "client" => Role::Client,
                    "cm_server" => Role::CmServer,
                    "cm_client" => Role::CmClient,
                    other => {
                        pr_warn!("{}: rc: unknown role '{}'\n", dev.name(), other);
                        return Err(EINVAL);
                    }
                };
                have_role = true;
            }
            "addr" => {
                let v = need(val)?;
                cfg.addr = Some(parse_ipv4(v).map(Ipv4).ok_or_else(|| {
                    pr_warn!("{}: rc: addr '{}' is not an IPv4 address\n", dev.name(), v);
                    EINVAL
                })?);
            }
            "port" => {
                cfg.port = parse_num(dev, key, need(val)?, 1, 65535)?;
                port_set = true;
            }
            "gid_idx" => cfg.gid_idx = Some(parse_num(dev, key, need(val)?, 0, 255)?),
            "size" => {
                cfg.size = parse_num(dev, key, need(val)?, 1, MAX_SIZE as u64)?;
                size_set = true;
            }
            "iters" => cfg.iters = parse_num(dev, key, need(val)?, 1, 1_000_000)?,
            "atomics" => cfg.atomics = parse_num(dev, key, need(val)?, 0, 100_000)?,
            "timeout_ms" => cfg.timeout_ms = parse_num(dev, key, need(val)?, 1, 600_000)?,
            "mtu" => {
                let bytes: u32 = parse_num(dev, key, need(val)?, 256, 4096)?;
                cfg.mtu = Mtu::from_bytes(bytes).ok_or_else(|| {
                    pr_warn!(
                        "{}: rc: mtu {} is not 256, 512, 1024, 2048 or 4096\n",
                        dev.name(),
                        bytes
                    );
                    EINVAL
                })?;
            }
            "poll" => {
                let v = need(val)?;
                cfg.poll = PollCtx::from_name(v).ok_or_else(|| {
                    pr_warn!(
                        "{}: rc: poll '{}' is not direct, softirq or workqueue\n",
                        dev.name(),
                        v
                    );
                    EINVAL
                })?;
            }
            "validate" | "imm" | "linger" => {
                if val.is_some() {
                    pr_warn!("{}: rc: '{}' takes no value\n", dev.name(), key);
                    return Err(EINVAL);
                }
                match key {
                    "imm" => cfg.imm = true,
                    "linger" => cfg.linger = true,
                    _ => cfg.validate = true,
                }
            }
            _ => {
                pr_warn!("{}: rc: unknown key '{}'\n", dev.name(), key);
                return Err(EINVAL);
            }
        }
    }
    if !have_role {
        pr_warn!(
            "{}: rc: role= is missing (loopback, server or client)\n",
            dev.name()
        );
        return Err(EINVAL);
    }
    if matches!(cfg.role, Role::Client | Role::CmClient) && cfg.addr.is_none() {
        pr_warn!("{}: rc: role={} needs addr=\n", dev.name(), cfg.role.name());
        return Err(EINVAL);
    }
    if cfg.atomics > 0 && (cfg.size < 8 || matches!(cfg.role, Role::CmServer | Role::CmClient)) {
        pr_warn!(
            "{}: rc: atomics needs role=loopback, server or client and size >= 8\n",
            dev.name()
        );
        return Err(EINVAL);
    }
    if cfg.linger && !matches!(cfg.role, Role::Server | Role::Client) {
        pr_warn!(
            "{}: rc: linger needs role=server or role=client (a peer to probe the rkey)\n",
            dev.name()
        );
        return Err(EINVAL);
    }
    if matches!(cfg.role, Role::CmServer | Role::CmClient) {
        // rping's defaults and limits.
        if !port_set {
            cfg.port = RPING_PORT;
        }
        if !size_set {
            cfg.size = 64;
        }
        if !(RPING_MIN_SIZE..=RPING_MAX_SIZE).contains(&cfg.size) {
            pr_warn!(
                "{}: rc: role={} takes size={}..{}, as rping does\n",
                dev.name(),
                cfg.role.name(),
                RPING_MIN_SIZE,
                RPING_MAX_SIZE
            );
            return Err(ERANGE);
        }
    }
    Ok(cfg)
}

/// Transfer counters of a device, shown by its `stats` file.
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) send_msgs: AtomicU64,
    pub(crate) send_bytes: AtomicU64,
    pub(crate) recv_msgs: AtomicU64,
    pub(crate) recv_bytes: AtomicU64,
    pub(crate) read_msgs: AtomicU64,
    pub(crate) read_bytes: AtomicU64,
    pub(crate) write_msgs: AtomicU64,
    pub(crate) write_bytes: AtomicU64,
    pub(crate) runs_ok: AtomicU64,
    pub(crate) runs_failed: AtomicU64,
}

pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// The `stats` file.
pub(crate) struct StatsFile(pub(crate) Arc<Stats>);

impl Show for StatsFile {
    fn show(&self, out: &mut dyn Write) -> Result {
        let rows: [(&str, &AtomicU64); 10] = [
            ("send_msgs", &self.0.send_msgs),
            ("send_bytes", &self.0.send_bytes),
            ("recv_msgs", &self.0.recv_msgs),
            ("recv_bytes", &self.0.recv_bytes),
            ("read_msgs", &self.0.read_msgs),
            ("read_bytes", &self.0.read_bytes),
            ("write_msgs", &self.0.write_msgs),
            ("write_bytes", &self.0.write_bytes),
            ("runs_ok", &self.0.runs_ok),
            ("runs_failed", &self.0.runs_failed),
        ];
        for (name, v) in rows {
            writeln!(out, "{}: {}", name, v.load(Ordering::Relaxed))?;
        }
        Ok(())
    }
}

/// Room for "result: error <errno> (<us> us)\n", the last line of a report.
const RESULT_LINE: usize = 64;

/// The report of a run, kept for readers of `rc`.
pub(crate) struct Report(KVec<u8>, bool);

impl Report {
    pub(crate) fn new() -> Self {
        Report(KVec::new(), false)
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Whether a write found no memory: the text lacks something.
    pub(crate) fn lost(&self) -> bool {
        self.1
    }

    /// Makes room for `n` more bytes; false, and the text marked as
    /// lacking, if there is no memory.
    pub(crate) fn reserve(&mut self, n: usize) -> bool {
        let ok = self.0.reserve(n, GFP_KERNEL).is_ok();
        self.1 |= !ok;
        ok
    }
}

impl Write for Report {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0
            .extend_from_slice(s.as_bytes(), GFP_KERNEL)
            .map_err(|_| {
                self.1 = true;
                fmt::Error
            })
    }
}

/// What a control file runs: it parses the written string, then runs.
pub(crate) trait Example: Send + Sync + 'static {
    /// The file's name, in messages.
    const NAME: &'static str;
    /// A parsed control string.
    type Config;
    /// Parses a control string; says what is wrong in the kernel log.
    fn parse(dev: &Device, input: &[u8]) -> Result<Self::Config>;
    /// Runs, writing the report.
    fn run(
        &self,
        dev: &Device,
        cfg: &Self::Config,
        cancel: &Cancel,
        stats: &Stats,
        rep: &mut Report,
    ) -> Result;

    /// State to show before the last report, if the example keeps any.
    fn show_state(&self, out: &mut dyn Write) -> Result {
        let _ = out;
        Ok(())
    }
}

/// A control file of a device (`rc`, `mcast`): a write runs the example
/// `E` and blocks until it is done, one run at a time; a read shows the
/// last run's report.
pub(crate) struct Control<E> {
    dev: ARef<Device>,
    busy: AtomicBool,
    cancel: Cancel,
    report: Pin<KBox<Mutex<KVec<u8>>>>,
    stats: Arc<Stats>,
    example: E,
}

impl<E: Example> Control<E> {
    pub(crate) fn new(dev: &Device, stats: Arc<Stats>, example: E) -> Result<Self> {
        Ok(Control {
            dev: dev.into(),
            busy: AtomicBool::new(false),
            cancel: Cancel::new(),
            report: KBox::pin_init(new_mutex!(KVec::new()), GFP_KERNEL)?,
            stats,
            example,
        })
    }

    /// Makes a run in progress end (with `ECANCELED`) within 100 ms, and
    /// every later write fail with `ENODEV`: the device is going away.
    pub(crate) fn cancel(&self) {
        self.cancel.close();
    }
}

impl<E: Example> Show for Control<E> {
    fn show(&self, out: &mut dyn Write) -> Result {
        if self.busy.load(Ordering::Acquire) {
            writeln!(out, "status: running")?;
        }
        self.example.show_state(out)?;
        let report = self.report.lock();
        out.write_str(core::str::from_utf8(&report).unwrap_or("(report is not text)\n"))?;
        Ok(())
    }
}

impl<E: Example> Store for Control<E> {
    fn store(&self, input: &[u8]) -> Result {
        let dev = &*self.dev;
        let cfg = E::parse(dev, input)?;
        if self.busy.swap(true, Ordering::AcqRel) {
            pr_warn!(
                "{}: {}: a run is already in progress\n",
                dev.name(),
                E::NAME
            );
            return Err(EBUSY);
        }
        if self.cancel.is_closed() {
            self.busy.store(false, Ordering::Release);
            pr_warn!("{}: {}: the device is being removed\n", dev.name(), E::NAME);
            return Err(ENODEV);
        }
        let mut rep = Report::new();
        let start = kverbs::now_ns();
        let mut result = self
            .example
            .run(dev, &cfg, &self.cancel, &self.stats, &mut rep);
        if let Err(e) = result {
            result = Err(port_down(dev, E::NAME, e, &mut rep));
        }
        // Room for the result line first: a success must not lose it
        // (found by the allocation-failure sweep of srq, whose report
        // grew past its allocation exactly there).
        rep.reserve(RESULT_LINE);
        if result.is_ok() && rep.lost() {
            // The run went well but its report lacks lines, which are its
            // result here: it cannot be called a success (found by the
            // allocation-failure sweep of mcast).
            pr_err!(
                "{}: {}: the report is incomplete (out of memory)\n",
                dev.name(),
                E::NAME
            );
            result = Err(ENOMEM);
        }
        let us = (kverbs::now_ns() - start) / 1000;
        match result {
            Ok(()) => {
                let _ = writeln!(rep, "result: ok ({} us)", us);
                add(&self.stats.runs_ok, 1);
            }
            Err(e) => {
                let _ = writeln!(rep, "result: error {} ({} us)", e.to_errno(), us);
                pr_err!(
                    "{}: {}: run failed: error {}\n",
                    dev.name(),
                    E::NAME,
                    e.to_errno()
                );
                add(&self.stats.runs_failed, 1);
            }
        }
        *self.report.lock() = rep.0;
        self.cancel.reset();
        self.busy.store(false, Ordering::Release);
        result
    }
}

/// The error a failed run ends with: `ENETDOWN` instead of a failed or
/// missing completion (`EIO`, `ETIMEDOUT`) when a port of `dev` is no
/// longer active -- its netdev went down or away during the run (rxe sets
/// the port down at once, and unregisters the device only later, when the
/// run would end with `ECANCELED`) -- so the report names the cause, not
/// a flushed work request.
fn port_down(dev: &Device, name: &str, e: Error, rep: &mut Report) -> Error {
    let (eio, etimedout) = (EIO.to_errno(), errno::etimedout().to_errno());
    if e.to_errno() != eio && e.to_errno() != etimedout {
        return e;
    }
    for port in dev.ports() {
        let state = match dev.query_port(port) {
            Ok(attr) if attr.state() == PortState::Active => continue,
            Ok(attr) => attr.state().name(),
            // rxe: the netdev is gone.
            Err(q) if q.to_errno() == ENODEV.to_errno() => "without a netdev",
            Err(_) => continue,
        };
        let _ = writeln!(rep, "port {} is {}: the link went down", port, state);
        pr_warn!(
            "{}: {}: port {} is {}: the link went down during the run\n",
            dev.name(),
            name,
            port,
            state
        );
        return errno::enetdown();
    }
    e
}

/// The RC example.
pub(crate) struct Rc;

impl Example for Rc {
    const NAME: &'static str = "rc";
    type Config = Config;

    fn parse(dev: &Device, input: &[u8]) -> Result<Config> {
        parse(dev, input)
    }

    fn run(
        &self,
        dev: &Device,
        cfg: &Config,
        cancel: &Cancel,
        stats: &Stats,
        rep: &mut Report,
    ) -> Result {
        let _ = writeln!(
            rep,
            "config: role={} size={} iters={} mtu={} poll={} timeout_ms={}{}{}{}{}",
            cfg.role.name(),
            cfg.size,
            cfg.iters,
            cfg.mtu.bytes(),
            cfg.poll.name(),
            cfg.timeout_ms,
            if cfg.validate { " validate" } else { "" },
            if cfg.imm { " imm" } else { "" },
            if cfg.linger { " linger" } else { "" },
            Atomics(cfg.atomics)
        );
        match cfg.role {
            Role::Loopback => run_loopback(dev, cfg, cancel, stats, rep),
            Role::Server | Role::Client => run_tcp(dev, cfg, cancel, stats, rep),
            Role::CmServer | Role::CmClient => crate::rping::run(dev, cfg, cancel, stats, rep),
        }
    }
}

/// The byte at `offset` of the payload of iteration `iter` for `msg`: the
/// message, its NUL, then a pattern that differs per iteration and message.
fn pattern(msg: &[u8; 20], iter: u32, offset: usize) -> u8 {
    match offset {
        0..=19 => msg[offset],
        20 => 0,
        _ => (offset as u32)
            .wrapping_mul(31)
            .wrapping_add(iter.wrapping_mul(7))
            .wrapping_add(u32::from(msg[0])) as u8,
    }
}

fn fill(buf: &DmaBuf, len: usize, msg: &[u8; 20], iter: u32) -> Result {
    let mut chunk = [0u8; 256];
    let mut off = 0;
    while off < len {
        let n = chunk.len().min(len - off);
        for (i, b) in chunk[..n].iter_mut().enumerate() {
            *b = pattern(msg, iter, off + i);
        }
        buf.write(off, &chunk[..n])?;
        off += n;
    }
    Ok(())
}

/// Checks the payload byte for byte; reports the first difference.
fn check(
    buf: &DmaBuf,
    len: usize,
    msg: &[u8; 20],
    iter: u32,
    what: &str,
    rep: &mut Report,
) -> Result {
    let mut chunk = [0u8; 256];
    let mut off = 0;
    while off < len {
        let n = chunk.len().min(len - off);
        buf.read(off, &mut chunk[..n])?;
        for (i, b) in chunk[..n].iter().enumerate() {
            let want = pattern(msg, iter, off + i);
            if *b != want {
                let _ = writeln!(
                    rep,
                    "{}: validation failed at byte {}: {:#04x}, expected {:#04x}",
                    what,
                    off + i,
                    b,
                    want
                );
                return Err(EIO);
            }
        }
        off += n;
    }
    Ok(())
}

/// " atomics=<n>" in the configuration line, if asked for.
struct Atomics(u32);

impl fmt::Display for Atomics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => Ok(()),
            n => write!(f, " atomics={}", n),
        }
    }
}

/// The value the second compare-and-swap stores ("kverbs!!").
const ATOMIC_SWAP: u64 = u64::from_ne_bytes(*b"kverbs!!");

/// The server's access rights: remote atomics only when asked for.
fn server_access(cfg: &Config) -> Access {
    let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    match cfg.atomics {
        0 => access,
        _ => access | Access::REMOTE_ATOMIC,
    }
}

/// The client's atomics on the first 8 bytes of the server's buffer, which
/// start as those of RDMA_RC_example's write message: `cfg.atomics`
/// fetch-and-adds (of 1, 2, 3, ...), a compare-and-swap that must swap
/// ([`ATOMIC_SWAP`] in), and one with a wrong compare value that must not;
/// every old value is checked. The server's 8 bytes end as [`ATOMIC_SWAP`].
fn atomics(
    qp: &Qp<Rts>,
    remote: RemoteBuf,
    cfg: &Config,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result {
    let dev = qp.device();
    let old_buf = Arc::new(DmaBuf::new(dev, 8)?, GFP_KERNEL)?;
    let mut head = [0u8; 8];
    head.copy_from_slice(&MSG_WRITE[..8]);
    let mut want = u64::from_ne_bytes(head);
    let one = |op: AtomicOp, what: &str, want: u64, rep: &mut Report| -> Result {
        let id = qp.post_atomic(op, &old_buf, 0, true)?;
        complete(qp, id, what, cfg, cancel, rep)?;
        let mut old = [0u8; 8];
        old_buf.read(0, &mut old)?;
        let old = u64::from_ne_bytes(old);
        if old != want {
            let _ = writeln!(rep, "{}: old value {:#x}, expected {:#x}", what, old, want);
            return Err(EIO);
        }
        Ok(())
    };
    for i in 0..u64::from(cfg.atomics) {
        let add = i + 1;
        one(
            AtomicOp::FetchAdd { remote, add },
            "FETCH_AND_ADD",
            want,
            rep,
        )?;
        want = want.wrapping_add(add);
    }
    let swap = AtomicOp::CmpSwap {
        remote,
        compare: want,
        swap: ATOMIC_SWAP,
    };
    one(swap, "CMP_AND_SWP", want, rep)?;
    let no_swap = AtomicOp::CmpSwap {
        remote,
        compare: want,
        swap: 0,
    };
    one(no_swap, "CMP_AND_SWP (no match)", ATOMIC_SWAP, rep)?;
    let _ = writeln!(
        rep,
        "atomics: ok: {} fetch-and-adds and 2 compare-and-swaps returned the expected old values",
        cfg.atomics
    );
    Ok(())
}

/// Checks the server's first 8 bytes after the client's atomics.
fn atomics_landed(buf: &DmaBuf, rep: &mut Report) -> Result {
    let mut v = [0u8; 8];
    buf.read(0, &mut v)?;
    let v = u64::from_ne_bytes(v);
    if v != ATOMIC_SWAP {
        let _ = writeln!(
            rep,
            "atomics: the server's 8 bytes hold {:#x}, expected {:#x}",
            v, ATOMIC_SWAP
        );
        return Err(EIO);
    }
    let _ = writeln!(rep, "atomics: ok: the server's 8 bytes hold 'kverbs!!'");
    Ok(())
}

/// FNV-1a over the first `len` bytes of `buf`.
fn digest(buf: &DmaBuf, len: usize) -> Result<u64> {
    let mut chunk = [0u8; 256];
    let (mut off, mut h) = (0, 0xcbf2_9ce4_8422_2325u64);
    while off < len {
        let n = chunk.len().min(len - off);
        buf.read(off, &mut chunk[..n])?;
        for &b in &chunk[..n] {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        off += n;
    }
    Ok(h)
}

/// The message at the start of `buf`, as RDMA_RC_example prints it.
struct Msg([u8; 20], usize);

impl Msg {
    fn of(buf: &DmaBuf, len: usize) -> Self {
        let mut m = [0u8; 20];
        let n = len.min(20);
        let _ = buf.read(0, &mut m[..n]);
        let n = m[..n].iter().position(|&b| b == 0).unwrap_or(n);
        Msg(m, n)
    }
}

impl fmt::Display for Msg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &b in &self.0[..self.1] {
            let c = if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            };
            f.write_char(c)?;
        }
        Ok(())
    }
}

/// Reports an operation that took `dt_ns`, and the message `buf` then
/// starts with, as RDMA_RC_example prints it (`<what>: '<message>'`).
fn report_op(rep: &mut Report, op: &str, size: usize, dt_ns: u64, what: &str, buf: &DmaBuf) {
    let _ = writeln!(rep, "{}: ok: {} bytes in {} us", op, size, dt_ns / 1000);
    let _ = writeln!(rep, "{}: '{}'", what, Msg::of(buf, size));
}

/// The port and source GID of a run, reported.
fn port_and_gid(
    dev: &Device,
    cfg: &Config,
    rep: &mut Report,
) -> Result<(u32, u32, kverbs::device::Gid)> {
    let port = *dev.ports().start();
    let (gid_idx, gid) = pick_gid(dev, port, cfg.gid_idx)?;
    let _ = writeln!(
        rep,
        "device {} port {} gid[{}] {}",
        dev.name(),
        port,
        gid_idx,
        gid.ipv6()
    );
    Ok((port, gid_idx, gid))
}

/// RDMA_RC_example's INIT -> RTR attributes, toward `dest_qp_num` at `dgid`.
fn rtr_attr(cfg: &Config, dest_qp_num: u32, dgid: kverbs::device::Gid, sgid_index: u32) -> RtrAttr {
    RtrAttr {
        path_mtu: cfg.mtu,
        dest_qp_num,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 0x12,
        av: AddressVector::new(dgid, sgid_index as u8),
    }
}

/// RDMA_RC_example's RTR -> RTS attributes.
const RTS_ATTR: RtsAttr = RtsAttr {
    timeout: 0x12,
    retry_cnt: 6,
    rnr_retry: 0,
    sq_psn: 0,
    max_rd_atomic: 1,
};

/// Picks the GID index: the one asked for, or the first RoCE v2 GID that
/// is an IPv4 address, or the first valid one.
pub(crate) fn pick_gid(
    dev: &Device,
    port: u32,
    want: Option<u32>,
) -> Result<(u32, kverbs::device::Gid)> {
    if let Some(i) = want {
        let g = dev.gid_attr(port, i).inspect_err(|_| {
            pr_warn!(
                "{}: rc: gid_idx {} is not a valid GID of port {}\n",
                dev.name(),
                i,
                port
            );
        })?;
        return Ok((i, g.gid()));
    }
    let len = dev.query_port(port)?.gid_tbl_len();
    let mut first = None;
    for i in 0..len {
        if let Ok(g) = dev.gid_attr(port, i) {
            if g.gid_type() == GidType::RoceV2 && g.gid().is_v4_mapped() {
                return Ok((i, g.gid()));
            }
            first.get_or_insert((i, g.gid()));
        }
    }
    first.ok_or_else(|| {
        pr_warn!("{}: rc: port {} has no GID\n", dev.name(), port);
        ENODEV
    })
}

/// Waits for a completion that must succeed, and says what failed.
pub(crate) fn complete<S: kverbs::qp::State>(
    qp: &Qp<S>,
    id: WrId,
    what: &str,
    cfg: &Config,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result<kverbs::wc::Wc> {
    complete_wc(qp, id, what, cfg.timeout_ms, cancel, rep)
}

/// [`complete`] with a timeout of `timeout_ms`.
pub(crate) fn complete_wc<S: kverbs::qp::State>(
    qp: &Qp<S>,
    id: WrId,
    what: &str,
    timeout_ms: u32,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result<kverbs::wc::Wc> {
    match qp.wait(id, timeout_ms, cancel) {
        Ok(wc) if wc.result().is_ok() => Ok(wc),
        Ok(wc) => {
            let _ = writeln!(
                rep,
                "{}: completion with error: {} (vendor error {:#x})",
                what, wc.status, wc.vendor_err
            );
            Err(EIO)
        }
        Err(e) => {
            let _ = writeln!(rep, "{}: no completion: error {}", what, e.to_errno());
            Err(e)
        }
    }
}

/// The whole RDMA_RC_example flow between two QPs of one device.
fn run_loopback(
    dev: &Device,
    cfg: &Config,
    cancel: &Cancel,
    stats: &Stats,
    rep: &mut Report,
) -> Result {
    let (port, gid_idx, gid) = port_and_gid(dev, cfg, rep)?;
    let size = cfg.size;
    let t = cfg.timeout_ms;

    // resources_create
    let pd = Pd::new(dev)?;
    let server_buf = Arc::new(DmaBuf::new(dev, size)?, GFP_KERNEL)?;
    let client_buf = Arc::new(DmaBuf::new(dev, size)?, GFP_KERNEL)?;
    let caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 4,
        // A transfer of the whole buffer takes an SGE per chunk.
        max_sge: server_buf.sge_count(0, size) as u32,
        ..Default::default()
    };
    let server_cq = Cq::new(dev, caps.cq_entries(), cfg.poll)?;
    let client_cq = Cq::new(dev, caps.cq_entries(), cfg.poll)?;
    let server = Qp::new_rc(&pd, port, &server_cq, &server_cq, caps)?;
    let client = Qp::new_rc(&pd, port, &client_cq, &client_cq, caps)?;
    let mr = Mr::new(&pd, size)?;
    // The (unused) receive buffer of RDMA WRITE with immediate.
    let imm_buf = Arc::new(DmaBuf::new(dev, 1)?, GFP_KERNEL)?;
    let _ = writeln!(
        rep,
        "resources_create: ok: pd, 2 cq ({} polling), server qp {}, client qp {}, 2 buffers of {} bytes, fast-reg mr",
        cfg.poll.name(),
        server.qp_num(),
        client.qp_num(),
        size
    );

    // connect_qp
    let init = InitAttr {
        pkey_index: 0,
        access: server_access(cfg),
    };
    let server = server.to_init(&init)?;
    let client = client.to_init(&init)?;
    // RDMA_RC_example's client posts its receive before RTR.
    let mut first_recv = Some(client.post_recv(&client_buf, 0, size)?);
    let rtr = |dest_qp_num| rtr_attr(cfg, dest_qp_num, gid, gid_idx);
    let (server_qpn, client_qpn) = (server.qp_num(), client.qp_num());
    let server = server.to_rtr(&rtr(client_qpn))?.to_rts(&RTS_ATTR)?;
    let client = client.to_rtr(&rtr(server_qpn))?.to_rts(&RTS_ATTR)?;
    let _ = writeln!(
        rep,
        "connect_qp: ok: both QPs INIT -> RTR -> RTS, path MTU {}",
        cfg.mtu.bytes()
    );

    // The server's buffer, registered for the narrowest access the client
    // needs: RDMA READ and RDMA WRITE (and atomics if asked for).
    let remote = mr.register(&server, &server_buf, server_access(cfg), t, cancel)?;
    let _ = writeln!(
        rep,
        "server buffer: addr {:#x} rkey {:#x} len {}",
        remote.addr, remote.rkey, remote.len
    );

    for iter in 0..cfg.iters {
        let recv = match first_recv.take() {
            Some(recv) => recv,
            None => client.post_recv(&client_buf, 0, size)?,
        };
        // SEND: the server sends its buffer, the client's receive gets it.
        fill(&server_buf, size, MSG_SEND, iter)?;
        let t0 = kverbs::now_ns();
        let op = match cfg.imm {
            true => SendOp::SendWithImm(IMM_SEND ^ iter),
            false => SendOp::Send,
        };
        let send = server.post_send(op, &server_buf, 0, size, true)?;
        complete(&server, send, "SEND", cfg, cancel, rep)?;
        let wc = complete(&client, recv, "RECV", cfg, cancel, rep)?;
        let dt = kverbs::now_ns() - t0;
        if wc.byte_len as usize != size {
            let _ = writeln!(rep, "RECV: {} bytes received, {} sent", wc.byte_len, size);
            return Err(EIO);
        }
        let want_imm = cfg.imm.then_some(IMM_SEND ^ iter);
        if wc.opcode != WcOpcode::Recv || wc.imm != want_imm {
            let _ = writeln!(
                rep,
                "RECV: {:?} with immediate {:?}, expected {:?}",
                wc.opcode, wc.imm, want_imm
            );
            return Err(EIO);
        }
        if cfg.validate {
            check(&client_buf, size, MSG_SEND, iter, "SEND", rep)?;
        }
        add(&stats.send_msgs, 1);
        add(&stats.send_bytes, size as u64);
        add(&stats.recv_msgs, 1);
        add(&stats.recv_bytes, size as u64);
        if iter == 0 {
            report_op(rep, "SEND operation", size, dt, "Message is", &client_buf);
        }

        // RDMA READ: the server changes its buffer, the client reads it.
        fill(&server_buf, size, MSG_READ, iter)?;
        let t0 = kverbs::now_ns();
        let read = client.post_send(SendOp::Read(remote), &client_buf, 0, size, true)?;
        complete(&client, read, "RDMA READ", cfg, cancel, rep)?;
        let dt = kverbs::now_ns() - t0;
        if cfg.validate {
            check(&client_buf, size, MSG_READ, iter, "RDMA READ", rep)?;
        }
        add(&stats.read_msgs, 1);
        add(&stats.read_bytes, size as u64);
        if iter == 0 {
            report_op(
                rep,
                "RDMA read operation",
                size,
                dt,
                "Contents of server's buffer",
                &client_buf,
            );
        }

        // RDMA WRITE: the client writes the server's buffer.
        fill(&client_buf, size, MSG_WRITE, iter)?;
        let t0 = kverbs::now_ns();
        // With immediate data the write consumes a receive of the server,
        // whose completion carries the immediate.
        let (op, server_recv) = match cfg.imm {
            true => (
                SendOp::WriteWithImm(remote, IMM_WRITE ^ iter),
                Some(server.post_recv(&imm_buf, 0, 1)?),
            ),
            false => (SendOp::Write(remote), None),
        };
        let write = client.post_send(op, &client_buf, 0, size, true)?;
        complete(&client, write, "RDMA WRITE", cfg, cancel, rep)?;
        if let Some(id) = server_recv {
            let wc = complete(
                &server,
                id,
                "RECV (RDMA WRITE with immediate)",
                cfg,
                cancel,
                rep,
            )?;
            if wc.opcode != WcOpcode::RecvRdmaWithImm || wc.imm != Some(IMM_WRITE ^ iter) {
                let _ = writeln!(
                    rep,
                    "RDMA WRITE with immediate: got {:?} {:?}",
                    wc.opcode, wc.imm
                );
                return Err(EIO);
            }
        }
        let dt = kverbs::now_ns() - t0;
        if cfg.validate {
            check(&server_buf, size, MSG_WRITE, iter, "RDMA WRITE", rep)?;
        }
        add(&stats.write_msgs, 1);
        add(&stats.write_bytes, size as u64);
        if iter == 0 {
            report_op(
                rep,
                "RDMA write operation",
                size,
                dt,
                "Contents of server buffer",
                &server_buf,
            );
        }
    }
    if cfg.iters > 1 {
        let _ = writeln!(
            rep,
            "iterations: {} of SEND, RDMA READ, RDMA WRITE",
            cfg.iters
        );
    }
    if cfg.validate {
        let _ = writeln!(rep, "validate: ok: every payload checked byte for byte");
    }
    if cfg.imm {
        let _ = writeln!(
            rep,
            "imm: ok: SEND and RDMA WRITE with immediate data delivered it"
        );
    }
    if cfg.atomics > 0 {
        atomics(&client, remote, cfg, cancel, rep)?;
        atomics_landed(&server_buf, rep)?;
    }

    // The transfer is done: the rkey must die before the buffer goes.
    mr.invalidate(&server, t, cancel)?;
    let _ = writeln!(
        rep,
        "invalidate: ok: rkey {:#x} invalidated (LOCAL_INV)",
        remote.rkey
    );

    // resources_destroy: drain, MR, QPs, CQs, PD, as the values drop.
    drop(mr);
    drop(client);
    drop(server);
    let _ = writeln!(rep, "resources_destroy: ok");
    Ok(())
}

/// The connection data RDMA_RC_example exchanges (`struct cm_con_data_t`,
/// packed, big endian): 34 bytes.
pub(crate) struct ConData {
    pub(crate) addr: u64,
    pub(crate) rkey: u32,
    pub(crate) qp_num: u32,
    pub(crate) lid: u16,
    pub(crate) gid: kverbs::device::Gid,
}

pub(crate) const CON_DATA_LEN: usize = 34;

impl ConData {
    pub(crate) fn to_bytes(&self) -> [u8; CON_DATA_LEN] {
        let mut b = [0u8; CON_DATA_LEN];
        b[0..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..16].copy_from_slice(&self.qp_num.to_be_bytes());
        b[16..18].copy_from_slice(&self.lid.to_be_bytes());
        b[18..34].copy_from_slice(&self.gid.0);
        b
    }

    pub(crate) fn from_bytes(b: &[u8; CON_DATA_LEN]) -> Self {
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[18..34]);
        ConData {
            addr: u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            rkey: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            qp_num: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            lid: u16::from_be_bytes([b[16], b[17]]),
            gid: kverbs::device::Gid(gid),
        }
    }
}

/// RDMA_RC_example's `sock_sync_data` of one byte: write ours, read theirs.
pub(crate) fn sync(
    sock: &TcpStream,
    c: u8,
    timeout_ms: u32,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result {
    let mut peer = [0u8];
    let r = sock
        .send_all(&[c], timeout_ms, cancel)
        .and_then(|()| sock.recv_exact(&mut peer, timeout_ms, cancel));
    if let Err(e) = r {
        let _ = writeln!(rep, "sync '{}': error {}", c as char, e.to_errno());
        return Err(e);
    }
    if peer[0] != c {
        let _ = writeln!(
            rep,
            "sync '{}': the peer sent '{}'",
            c as char, peer[0] as char
        );
        return Err(errno::eproto());
    }
    Ok(())
}

/// The TCP connection of a two-host run of the control file `file`:
/// accepted on `port` (of `addr`, or of any address) by a server, made to
/// `addr:port` by a client. Failures are reported and logged.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tcp_connect(
    dev: &Device,
    file: &str,
    server: bool,
    addr: Option<Ipv4>,
    port: u16,
    timeout_ms: u32,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result<TcpStream> {
    if server {
        let listener = TcpListener::bind(addr.unwrap_or(Ipv4::ANY), port).inspect_err(|e| {
            pr_warn!(
                "{}: {}: cannot listen on TCP port {}: error {}\n",
                dev.name(),
                file,
                port,
                e.to_errno()
            );
        })?;
        let _ = writeln!(rep, "waiting on port {} for TCP connection", port);
        listener.accept(timeout_ms, cancel).inspect_err(|e| {
            let _ = writeln!(rep, "no client connected: error {}", e.to_errno());
            pr_warn!(
                "{}: {}: no client connected on port {}: error {}\n",
                dev.name(),
                file,
                port,
                e.to_errno()
            );
        })
    } else {
        let addr = addr.ok_or(EINVAL)?;
        TcpStream::connect(addr, port, timeout_ms, cancel).inspect_err(|e| {
            let _ = writeln!(
                rep,
                "cannot connect to {}:{}: error {}",
                addr,
                port,
                e.to_errno()
            );
            pr_warn!(
                "{}: {}: cannot connect to {}:{}: error {}\n",
                dev.name(),
                file,
                addr,
                port,
                e.to_errno()
            );
        })
    }
}

/// RDMA_RC_example's server or client, with a peer over TCP.
fn run_tcp(dev: &Device, cfg: &Config, cancel: &Cancel, stats: &Stats, rep: &mut Report) -> Result {
    let server = cfg.role == Role::Server;
    let (port, gid_idx, gid) = port_and_gid(dev, cfg, rep)?;
    let size = cfg.size;
    let t = cfg.timeout_ms;

    // The TCP connection first, as RDMA_RC_example does.
    let sock = tcp_connect(dev, "rc", server, cfg.addr, cfg.port, t, cancel, rep)?;
    let _ = writeln!(rep, "TCP connection was established");

    // resources_create
    let pd = Pd::new(dev)?;
    let buf = Arc::new(DmaBuf::new(dev, size)?, GFP_KERNEL)?;
    let caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 4,
        // A transfer of the whole buffer takes an SGE per chunk.
        max_sge: buf.sge_count(0, size) as u32,
        ..Default::default()
    };
    let cq = Cq::new(dev, caps.cq_entries(), cfg.poll)?;
    let qp = Qp::new_rc(&pd, port, &cq, &cq, caps)?;
    if server {
        fill(&buf, size, MSG_SEND, 0)?;
    }
    let mr = Mr::new(&pd, size)?;
    let local = mr.map(&buf)?;
    let _ = writeln!(
        rep,
        "resources_create: ok: qp {:#x}, buffer of {} bytes, MR addr {:#x} rkey {:#x} ({} polling)",
        qp.qp_num(),
        size,
        local.addr,
        local.rkey,
        cfg.poll.name()
    );

    // connect_qp: exchange the connection data.
    let ours = ConData {
        addr: local.addr,
        rkey: local.rkey,
        qp_num: qp.qp_num(),
        lid: dev.query_port(port)?.lid() as u16,
        gid,
    };
    let mut theirs = [0u8; CON_DATA_LEN];
    sock.send_all(&ours.to_bytes(), t, cancel)?;
    sock.recv_exact(&mut theirs, t, cancel).inspect_err(|e| {
        let _ = writeln!(
            rep,
            "no connection data from the peer: error {}",
            e.to_errno()
        );
    })?;
    let peer = ConData::from_bytes(&theirs);
    let _ = writeln!(rep, "Remote address = {:#x}", peer.addr);
    let _ = writeln!(rep, "Remote rkey = {:#x}", peer.rkey);
    let _ = writeln!(rep, "Remote QP number = {:#x}", peer.qp_num);
    let _ = writeln!(rep, "Remote LID = {:#x}", peer.lid);
    let _ = writeln!(rep, "Remote GID = {}", peer.gid.ipv6());
    let remote = RemoteBuf {
        addr: peer.addr,
        rkey: peer.rkey,
        len: size as u32,
    };

    let access = server_access(cfg);
    let qp = qp.to_init(&InitAttr {
        pkey_index: 0,
        access,
    })?;
    let recv = if server {
        None
    } else {
        Some(qp.post_recv(&buf, 0, size)?)
    };
    let qp = qp
        .to_rtr(&rtr_attr(cfg, peer.qp_num, peer.gid, gid_idx))?
        .to_rts(&RTS_ATTR)?;
    // Our buffer becomes reachable with the rkey we advertised.
    mr.post_registration(&qp, access, t, cancel)?;
    sync(&sock, b'Q', cfg.timeout_ms, cancel, rep)?;
    let _ = writeln!(rep, "connect_qp: ok: QP state was change to RTS");

    // SEND from the server to the client's receive.
    if server {
        let id = qp.post_send(SendOp::Send, &buf, 0, size, true)?;
        complete(&qp, id, "SEND", cfg, cancel, rep)?;
        add(&stats.send_msgs, 1);
        add(&stats.send_bytes, size as u64);
        let _ = writeln!(rep, "SEND operation: ok: {} bytes sent", size);
        fill(&buf, size, MSG_READ, 0)?;
    } else if let Some(recv) = recv {
        let wc = complete(&qp, recv, "RECV", cfg, cancel, rep)?;
        add(&stats.recv_msgs, 1);
        add(&stats.recv_bytes, u64::from(wc.byte_len));
        let _ = writeln!(rep, "Message is: '{}'", Msg::of(&buf, size));
        if cfg.validate {
            check(&buf, size, MSG_SEND, 0, "SEND", rep)?;
        }
    }

    // The server's buffer now holds the read message.
    sync(&sock, b'R', cfg.timeout_ms, cancel, rep)?;
    if !server {
        let id = qp.post_send(SendOp::Read(remote), &buf, 0, size, true)?;
        complete(&qp, id, "RDMA READ", cfg, cancel, rep)?;
        add(&stats.read_msgs, 1);
        add(&stats.read_bytes, size as u64);
        let _ = writeln!(
            rep,
            "Contents of server's buffer: '{}'",
            Msg::of(&buf, size)
        );
        if cfg.validate {
            check(&buf, size, MSG_READ, 0, "RDMA READ", rep)?;
        }
        fill(&buf, size, MSG_WRITE, 0)?;
        let _ = writeln!(rep, "Now replacing it with: '{}'", Msg::of(&buf, size));
        let id = qp.post_send(SendOp::Write(remote), &buf, 0, size, true)?;
        complete(&qp, id, "RDMA WRITE", cfg, cancel, rep)?;
        add(&stats.write_msgs, 1);
        add(&stats.write_bytes, size as u64);
    }
    // The client is done with the server's memory.
    sync(&sock, b'W', cfg.timeout_ms, cancel, rep)?;
    if server {
        let _ = writeln!(rep, "Contents of server buffer: '{}'", Msg::of(&buf, size));
        if cfg.validate {
            check(&buf, size, MSG_WRITE, 0, "RDMA WRITE", rep)?;
        }
    }
    if cfg.validate {
        let _ = writeln!(rep, "validate: ok: every payload checked byte for byte");
    }
    if cfg.atomics > 0 {
        // Both sides were told atomics=<n>: the client's atomics on the
        // server's buffer, then 'A'.
        if !server {
            atomics(&qp, remote, cfg, cancel, rep)?;
        }
        sync(&sock, b'A', t, cancel, rep)?;
        if server {
            atomics_landed(&buf, rep)?;
        }
    }

    // The rkey must die before the buffer goes.
    mr.invalidate(&qp, t, cancel)?;
    let _ = writeln!(
        rep,
        "invalidate: ok: rkey {:#x} invalidated (LOCAL_INV)",
        local.rkey
    );
    if cfg.linger {
        // The peer still holds the rkey and address we advertised: while
        // the QP, the registration and the buffer all still exist, it
        // tries them ('I': invalidated, 'P': probed). Its READ and WRITE
        // must fail with a remote access error and leave the buffer as it
        // was.
        let before = digest(&buf, size)?;
        sync(&sock, b'I', t, cancel, rep)?;
        sync(&sock, b'P', t, cancel, rep)?;
        if digest(&buf, size)? != before {
            let _ = writeln!(rep, "linger: the buffer changed after invalidation");
            pr_err!(
                "{}: rc: the buffer changed after its rkey {:#x} was invalidated\n",
                dev.name(),
                local.rkey
            );
            return Err(EIO);
        }
        let _ = writeln!(
            rep,
            "linger: ok: the peer probed rkey {:#x}, the buffer is unchanged",
            local.rkey
        );
    }
    drop(mr);
    drop(qp);
    let _ = writeln!(rep, "resources_destroy: ok");
    Ok(())
}
