// SPDX-License-Identifier: GPL-2.0

//! The RC example: the flow of RDMA_RC_example (resources_create,
//! connect_qp, SEND, RDMA READ, RDMA WRITE, resources_destroy) run in the
//! kernel, driven through the per-device debugfs file `rc`.
//!
//! Writing a krping-style option string (`role=loopback,size=4096,
//! iters=2,validate`) runs the example and blocks the writer until it is
//! done; reading the file returns the report of the last run.

mod atomics;
mod config;
mod payload;

use crate::conn::Role;
use crate::conn::{complete_wc, pick_gid, sync, tcp_connect, ConData, CON_DATA_LEN};
use crate::control::{Example, Run};
use crate::report::Report;
use crate::stats::{add, Stats};
use atomics::{atomics, atomics_landed, server_access};
use config::Config;
use core::fmt::Write;
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    cq::Cq,
    device::Device,
    dma::DmaBuf,
    mr::Mr,
    pd::Pd,
    qp::{
        AddressVector, Cancel, InitAttr, Qp, QpCaps, RemoteBuf, RtrAttr, Rts, RtsAttr, SendOp, WrId,
    },
    tcp::TcpStream,
    wc::WcOpcode,
};
use payload::{check, digest, fill, report_op, Msg, MSG_READ, MSG_SEND, MSG_WRITE};

/// The immediate data of SEND and RDMA WRITE with immediate, XORed with
/// the iteration.
const IMM_SEND: u32 = 0x5e4d_0000;
const IMM_WRITE: u32 = 0x3a17_0000;

/// The RC example.
pub(crate) struct Rc;

impl Example for Rc {
    const NAME: &'static str = "rc";
    type Config = Config;

    fn run(&self, cfg: &Config, ctx: Run<'_>) -> Result {
        match cfg.role {
            _ if cfg.cm => {
                let rping = crate::rping::Config {
                    server: cfg.role == Role::Server,
                    addr: cfg.addr,
                    port: cfg.port,
                    size: cfg.size,
                    iters: cfg.iters,
                    poll: cfg.poll,
                    validate: cfg.validate,
                    timeout_ms: cfg.timeout_ms,
                };
                crate::rping::run(&rping, ctx)
            }
            Role::Loopback => run_loopback(cfg, ctx),
            Role::Server | Role::Client => run_tcp(cfg, ctx),
        }
    }
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

/// RDMA_RC_example's QP capabilities, for transfers of the whole `size`
/// bytes of `buf`: a transfer takes an SGE per chunk of the buffer.
fn qp_caps(buf: &DmaBuf, size: usize) -> QpCaps {
    QpCaps {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_sge: buf.sge_count(0, size) as u32,
        ..Default::default()
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
fn complete<S: kverbs::qp::State>(
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
fn run_loopback(cfg: &Config, ctx: Run<'_>) -> Result {
    let (dev, cancel, stats, rep) = (ctx.dev, ctx.cancel, ctx.stats, ctx.rep);
    let (port, gid_idx, gid) = port_and_gid(dev, cfg, rep)?;
    let size = cfg.size;
    let t = cfg.timeout_ms;

    // resources_create
    let pd = Pd::new(dev)?;
    let server_buf = Arc::new(DmaBuf::new(dev, size)?, GFP_KERNEL)?;
    let client_buf = Arc::new(DmaBuf::new(dev, size)?, GFP_KERNEL)?;
    let caps = qp_caps(&server_buf, size);
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

/// A transfer of a [`Pair`].
#[derive(Clone, Copy)]
enum Op {
    /// The server SENDs to the client.
    Send,
    /// The client RDMA READs the server's buffer.
    Read,
    /// The client RDMA WRITEs the server's buffer.
    Write,
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
        let (server, client, cfg, cancel) = (self.server, self.client, self.cfg, self.cancel);
        let (server_buf, size) = (self.server_buf, cfg.size);
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
        self.landed(Op::Send, iter, dt, rep)
    }

    /// RDMA READ: the server changes its buffer, the client reads it.
    fn read(&self, iter: u32, rep: &mut Report) -> Result {
        let (client, cfg) = (self.client, self.cfg);
        let (server_buf, client_buf, size) = (self.server_buf, self.client_buf, cfg.size);
        fill(server_buf, size, MSG_READ, iter)?;
        let t0 = kverbs::now_ns();
        let read = client.post_send(SendOp::Read(self.remote), client_buf, 0, size, true)?;
        complete(client, read, "RDMA READ", cfg, self.cancel, rep)?;
        let dt = kverbs::now_ns() - t0;
        self.landed(Op::Read, iter, dt, rep)
    }

    /// RDMA WRITE: the client writes the server's buffer.
    fn write(&self, iter: u32, rep: &mut Report) -> Result {
        let (server, client, cfg, cancel) = (self.server, self.client, self.cfg, self.cancel);
        let (client_buf, size) = (self.client_buf, cfg.size);
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
        self.landed(Op::Write, iter, dt, rep)
    }

    /// After operation `op` of iteration `iter`, which took `dt` ns: checks
    /// the buffer it filled (with `validate`), counts it, and reports it
    /// the first time.
    fn landed(&self, op: Op, iter: u32, dt: u64, rep: &mut Report) -> Result {
        let (size, stats) = (self.cfg.size, self.stats);
        let (buf, msg, msgs, bytes) = match op {
            Op::Send => (
                self.client_buf,
                MSG_SEND,
                &stats.send_msgs,
                &stats.send_bytes,
            ),
            Op::Read => (
                self.client_buf,
                MSG_READ,
                &stats.read_msgs,
                &stats.read_bytes,
            ),
            Op::Write => (
                self.server_buf,
                MSG_WRITE,
                &stats.write_msgs,
                &stats.write_bytes,
            ),
        };
        let (what, done, contents) = match op {
            Op::Send => ("SEND", "SEND operation", "Message is"),
            Op::Read => (
                "RDMA READ",
                "RDMA read operation",
                "Contents of server's buffer",
            ),
            Op::Write => (
                "RDMA WRITE",
                "RDMA write operation",
                "Contents of server buffer",
            ),
        };
        if self.cfg.validate {
            check(buf, size, msg, iter, what, rep)?;
        }
        add(msgs, 1);
        add(bytes, size as u64);
        if let Op::Send = op {
            // The client's receive.
            add(&stats.recv_msgs, 1);
            add(&stats.recv_bytes, size as u64);
        }
        if iter == 0 {
            report_op(rep, done, size, dt, contents, buf);
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
fn run_tcp(cfg: &Config, ctx: Run<'_>) -> Result {
    let (dev, cancel, stats, rep) = (ctx.dev, ctx.cancel, ctx.stats, ctx.rep);
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
    let caps = qp_caps(&buf, size);
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
        // Both sides were told atomics=<n>. 'V' first: the server has
        // checked what the RDMA WRITE left in its buffer, whose first 8
        // bytes the atomics change (without it, a client quick enough had
        // the server validate a buffer its atomics had already reached).
        // Then the client's atomics on the server's buffer, then 'A'.
        sync(&sock, b'V', t, cancel, rep)?;
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
