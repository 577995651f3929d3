// SPDX-License-Identifier: GPL-2.0

//! The RC example: the flow of RDMA_RC_example (resources_create,
//! connect_qp, SEND, RDMA READ, RDMA WRITE, resources_destroy) run in the
//! kernel, driven through the per-device debugfs file `rc`.
//!
//! Writing a krping-style option string (`role=loopback,size=4096,
//! iters=2,validate`) runs the example and blocks the writer until it is
//! done; reading the file returns the report of the last run.

use crate::conn::{complete_wc, pick_gid, sync, tcp_connect, ConData, CON_DATA_LEN};
use crate::control::Example;
use crate::options::{need, options, parse_ipv4, parse_num_in};
use crate::report::Report;
use crate::stats::{add, Stats};
use core::fmt::{self, Write};
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    cq::{Cq, PollCtx},
    device::{Device, Mtu},
    dma::DmaBuf,
    mr::Mr,
    pd::Pd,
    qp::{
        Access, AddressVector, AtomicOp, Cancel, InitAttr, Qp, QpCaps, RemoteBuf, RtrAttr, Rts,
        RtsAttr, SendOp, WrId,
    },
    tcp::{Ipv4, TcpStream},
    wc::WcOpcode,
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
            Role::CmServer | Role::CmClient => {
                let rping = crate::rping::Config {
                    server: cfg.role == Role::CmServer,
                    addr: cfg.addr,
                    port: cfg.port,
                    size: cfg.size,
                    iters: cfg.iters,
                    poll: cfg.poll,
                    validate: cfg.validate,
                    timeout_ms: cfg.timeout_ms,
                };
                crate::rping::run(dev, &rping, cancel, stats, rep)
            }
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

    let pair = Pair {
        server: &server,
        client: &client,
        server_buf: &server_buf,
        client_buf: &client_buf,
        imm_buf: &imm_buf,
        remote,
        cfg,
        cancel,
        stats,
    };
    for iter in 0..cfg.iters {
        let recv = match first_recv.take() {
            Some(recv) => recv,
            None => client.post_recv(&client_buf, 0, size)?,
        };
        pair.send(recv, iter, rep)?;
        pair.read(iter, rep)?;
        pair.write(iter, rep)?;
    }
    report_checked(cfg, rep);
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

/// The two connected QPs of a loopback run and what their transfers use.
struct Pair<'a> {
    server: &'a Qp<Rts>,
    client: &'a Qp<Rts>,
    server_buf: &'a Arc<DmaBuf>,
    client_buf: &'a Arc<DmaBuf>,
    /// The (unused) receive buffer of RDMA WRITE with immediate.
    imm_buf: &'a Arc<DmaBuf>,
    /// The server's buffer, registered.
    remote: RemoteBuf,
    cfg: &'a Config,
    cancel: &'a Cancel,
    stats: &'a Stats,
}

impl Pair<'_> {
    /// SEND: the server sends its buffer, the client's receive `recv`
    /// gets it.
    fn send(&self, recv: WrId, iter: u32, rep: &mut Report) -> Result {
        let (server, client, cfg, cancel, stats) =
            (self.server, self.client, self.cfg, self.cancel, self.stats);
        let (server_buf, client_buf, size) = (self.server_buf, self.client_buf, cfg.size);
        fill(server_buf, size, MSG_SEND, iter)?;
        let t0 = kverbs::now_ns();
        let op = match cfg.imm {
            true => SendOp::SendWithImm(IMM_SEND ^ iter),
            false => SendOp::Send,
        };
        let send = server.post_send(op, server_buf, 0, size, true)?;
        complete(server, send, "SEND", cfg, cancel, rep)?;
        let wc = complete(client, recv, "RECV", cfg, cancel, rep)?;
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
            check(client_buf, size, MSG_SEND, iter, "SEND", rep)?;
        }
        add(&stats.send_msgs, 1);
        add(&stats.send_bytes, size as u64);
        add(&stats.recv_msgs, 1);
        add(&stats.recv_bytes, size as u64);
        if iter == 0 {
            report_op(rep, "SEND operation", size, dt, "Message is", client_buf);
        }
        Ok(())
    }

    /// RDMA READ: the server changes its buffer, the client reads it.
    fn read(&self, iter: u32, rep: &mut Report) -> Result {
        let (client, cfg, stats) = (self.client, self.cfg, self.stats);
        let (server_buf, client_buf, size) = (self.server_buf, self.client_buf, cfg.size);
        fill(server_buf, size, MSG_READ, iter)?;
        let t0 = kverbs::now_ns();
        let read = client.post_send(SendOp::Read(self.remote), client_buf, 0, size, true)?;
        complete(client, read, "RDMA READ", cfg, self.cancel, rep)?;
        let dt = kverbs::now_ns() - t0;
        if cfg.validate {
            check(client_buf, size, MSG_READ, iter, "RDMA READ", rep)?;
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
                client_buf,
            );
        }
        Ok(())
    }

    /// RDMA WRITE: the client writes the server's buffer.
    fn write(&self, iter: u32, rep: &mut Report) -> Result {
        let (server, client, cfg, cancel, stats) =
            (self.server, self.client, self.cfg, self.cancel, self.stats);
        let (server_buf, client_buf, size) = (self.server_buf, self.client_buf, cfg.size);
        let remote = self.remote;
        fill(client_buf, size, MSG_WRITE, iter)?;
        let t0 = kverbs::now_ns();
        // With immediate data the write consumes a receive of the server,
        // whose completion carries the immediate.
        let (op, server_recv) = match cfg.imm {
            true => (
                SendOp::WriteWithImm(remote, IMM_WRITE ^ iter),
                Some(server.post_recv(self.imm_buf, 0, 1)?),
            ),
            false => (SendOp::Write(remote), None),
        };
        let write = client.post_send(op, client_buf, 0, size, true)?;
        complete(client, write, "RDMA WRITE", cfg, cancel, rep)?;
        if let Some(id) = server_recv {
            let wc = complete(
                server,
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
            check(server_buf, size, MSG_WRITE, iter, "RDMA WRITE", rep)?;
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
                server_buf,
            );
        }
        Ok(())
    }
}

/// The lines after the iterations of a loopback run: how many, and what
/// was checked.
fn report_checked(cfg: &Config, rep: &mut Report) {
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
}

/// RDMA_RC_example's `sock_sync_data` of the connection data: sends
/// ours, returns the peer's and reports it.
fn exchange_con_data(
    sock: &TcpStream,
    ours: &ConData,
    t: u32,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result<ConData> {
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
    Ok(peer)
}

/// This side of a two-host run, connected: its QP, the TCP connection to
/// the peer, its buffer and the peer's.
struct TcpSide<'a> {
    qp: &'a Qp<Rts>,
    sock: &'a TcpStream,
    buf: &'a Arc<DmaBuf>,
    remote: RemoteBuf,
    server: bool,
    cfg: &'a Config,
    cancel: &'a Cancel,
    stats: &'a Stats,
}

impl TcpSide<'_> {
    /// SEND from the server to the client's receive `recv`.
    fn send(&self, recv: Option<WrId>, rep: &mut Report) -> Result {
        let (qp, buf, cfg, cancel, stats) = (self.qp, self.buf, self.cfg, self.cancel, self.stats);
        let size = cfg.size;
        if self.server {
            let id = qp.post_send(SendOp::Send, buf, 0, size, true)?;
            complete(qp, id, "SEND", cfg, cancel, rep)?;
            add(&stats.send_msgs, 1);
            add(&stats.send_bytes, size as u64);
            let _ = writeln!(rep, "SEND operation: ok: {} bytes sent", size);
            fill(buf, size, MSG_READ, 0)?;
        } else if let Some(recv) = recv {
            let wc = complete(qp, recv, "RECV", cfg, cancel, rep)?;
            add(&stats.recv_msgs, 1);
            add(&stats.recv_bytes, u64::from(wc.byte_len));
            let _ = writeln!(rep, "Message is: '{}'", Msg::of(buf, size));
            if cfg.validate {
                check(buf, size, MSG_SEND, 0, "SEND", rep)?;
            }
        }
        Ok(())
    }

    /// The client's RDMA READ of the server's buffer, then its RDMA WRITE
    /// into it; the server checks what was written.
    fn read_write(&self, rep: &mut Report) -> Result {
        let (qp, buf, cfg, cancel, stats) = (self.qp, self.buf, self.cfg, self.cancel, self.stats);
        let (size, remote) = (cfg.size, self.remote);
        // The server's buffer now holds the read message.
        sync(self.sock, b'R', cfg.timeout_ms, cancel, rep)?;
        if !self.server {
            let id = qp.post_send(SendOp::Read(remote), buf, 0, size, true)?;
            complete(qp, id, "RDMA READ", cfg, cancel, rep)?;
            add(&stats.read_msgs, 1);
            add(&stats.read_bytes, size as u64);
            let _ = writeln!(rep, "Contents of server's buffer: '{}'", Msg::of(buf, size));
            if cfg.validate {
                check(buf, size, MSG_READ, 0, "RDMA READ", rep)?;
            }
            fill(buf, size, MSG_WRITE, 0)?;
            let _ = writeln!(rep, "Now replacing it with: '{}'", Msg::of(buf, size));
            let id = qp.post_send(SendOp::Write(remote), buf, 0, size, true)?;
            complete(qp, id, "RDMA WRITE", cfg, cancel, rep)?;
            add(&stats.write_msgs, 1);
            add(&stats.write_bytes, size as u64);
        }
        // The client is done with the server's memory.
        sync(self.sock, b'W', cfg.timeout_ms, cancel, rep)?;
        if self.server {
            let _ = writeln!(rep, "Contents of server buffer: '{}'", Msg::of(buf, size));
            if cfg.validate {
                check(buf, size, MSG_WRITE, 0, "RDMA WRITE", rep)?;
            }
        }
        if cfg.validate {
            let _ = writeln!(rep, "validate: ok: every payload checked byte for byte");
        }
        Ok(())
    }
}

/// `linger`: after invalidating `rkey`, lets the peer probe it and checks
/// that `buf` did not change.
#[allow(clippy::too_many_arguments)]
fn linger(
    dev: &Device,
    sock: &TcpStream,
    buf: &DmaBuf,
    size: usize,
    rkey: u32,
    t: u32,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result {
    // The peer still holds the rkey and address we advertised: while
    // the QP, the registration and the buffer all still exist, it
    // tries them ('I': invalidated, 'P': probed). Its READ and WRITE
    // must fail with a remote access error and leave the buffer as it
    // was.
    let before = digest(buf, size)?;
    sync(sock, b'I', t, cancel, rep)?;
    sync(sock, b'P', t, cancel, rep)?;
    if digest(buf, size)? != before {
        let _ = writeln!(rep, "linger: the buffer changed after invalidation");
        pr_err!(
            "{}: rc: the buffer changed after its rkey {:#x} was invalidated\n",
            dev.name(),
            rkey
        );
        return Err(EIO);
    }
    let _ = writeln!(
        rep,
        "linger: ok: the peer probed rkey {:#x}, the buffer is unchanged",
        rkey
    );
    Ok(())
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
    let peer = exchange_con_data(&sock, &ours, t, cancel, rep)?;
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

    let side = TcpSide {
        qp: &qp,
        sock: &sock,
        buf: &buf,
        remote,
        server,
        cfg,
        cancel,
        stats,
    };
    side.send(recv, rep)?;
    side.read_write(rep)?;
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
        linger(dev, &sock, &buf, size, local.rkey, t, cancel, rep)?;
    }
    drop(mr);
    drop(qp);
    let _ = writeln!(rep, "resources_destroy: ok");
    Ok(())
}
