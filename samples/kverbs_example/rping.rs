// SPDX-License-Identifier: GPL-2.0

//! The RC example's rdma_cm mode, krping's way: rping's protocol
//! (librdmacm's example) with the connection made by the RDMA connection
//! manager, so that `rping` from rdmacm-utils is a peer.
//!
//! Per ping: the client SENDs the address, rkey and size of its start
//! buffer (16 bytes: `__be64 buf, __be32 rkey, __be32 size`); the server
//! RDMA READs it and SENDs a go-ahead; the client SENDs its sink buffer;
//! the server RDMA WRITEs what it read into it and SENDs a go-ahead; the
//! client checks that the sink now equals the start buffer. The server
//! serves until the client disconnects.

use crate::conn::{cm_device_check, cm_listen, cm_on_device};
use crate::control::Run;
use crate::report::Report;
use crate::stats::{add, Stats};
use core::{cell::Cell, fmt::Write};
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    cm::{CmEvents, CmId},
    cq::{Cq, PollCtx},
    device::Device,
    dma::DmaBuf,
    errno,
    mr::Mr,
    pd::Pd,
    qp::{Access, Cancel, Init, Qp, QpCaps, RemoteBuf, Rts, SendOp, Waited, WrId},
    tcp::Ipv4,
    wc::WcStatus,
};

/// What a run does: the `rc` file's options for role=cm_server or
/// role=cm_client.
pub(crate) struct Config {
    pub(crate) server: bool,
    pub(crate) addr: Option<Ipv4>,
    pub(crate) port: u16,
    pub(crate) size: usize,
    pub(crate) iters: u32,
    pub(crate) poll: PollCtx,
    pub(crate) validate: bool,
    pub(crate) timeout_ms: u32,
}

/// `struct rping_rdma_info`.
const INFO_LEN: usize = 16;

fn info_bytes(r: &RemoteBuf) -> [u8; INFO_LEN] {
    let mut b = [0u8; INFO_LEN];
    b[0..8].copy_from_slice(&r.addr.to_be_bytes());
    b[8..12].copy_from_slice(&r.rkey.to_be_bytes());
    b[12..16].copy_from_slice(&r.len.to_be_bytes());
    b
}

fn parse_info(buf: &DmaBuf) -> Result<RemoteBuf> {
    let mut b = [0u8; INFO_LEN];
    buf.read(0, &mut b)?;
    Ok(RemoteBuf {
        addr: u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        rkey: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
        len: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
    })
}

/// rping's ping data: "rdma-ping-<n>: ", then letters from `start` on
/// cycling through 'A'..='z', and a NUL at the end.
fn fill_ping(buf: &DmaBuf, size: usize, ping: u32, start: u8) -> Result {
    let mut data = KVec::from_elem(0u8, size, GFP_KERNEL)?;
    let mut head = Report::new();
    // Without its header the data would be wrong: no memory is an error.
    write!(head, "rdma-ping-{}: ", ping).map_err(|_| ENOMEM)?;
    let head = head.as_bytes();
    let cc = head.len().min(size);
    data[..cc].copy_from_slice(&head[..cc]);
    let mut c = start;
    for b in data[cc..].iter_mut() {
        *b = c;
        c = if c >= 122 { 65 } else { c + 1 };
    }
    data[size - 1] = 0;
    buf.write(0, &data)
}

/// How long a failed work request waits for the DISCONNECTED event that
/// tells a peer that went away (its QP destroyed before its disconnect got
/// out: our request then fails with a remote error) from a failure.
const GONE_MS: u32 = 1000;

/// The peer of a connection, as its events tell: its DISCONNECTED event is
/// taken once ([`CmId::disconnected`]), and remembered here, so that every
/// later wait of the run knows the peer is gone.
struct Peer<'a> {
    cm: &'a CmId,
    gone: Cell<bool>,
}

impl<'a> Peer<'a> {
    fn new(cm: &'a CmId) -> Self {
        Peer {
            cm,
            gone: Cell::new(false),
        }
    }

    /// Whether the peer has disconnected, now or before.
    fn disconnected(&self) -> bool {
        if !self.gone.get() && self.cm.disconnected() {
            self.gone.set(true);
        }
        self.gone.get()
    }

    /// Whether the peer disconnects within [`GONE_MS`] (or did before).
    fn wait_disconnected(&self, cancel: &Cancel) -> bool {
        if !self.gone.get() && self.cm.wait_disconnected(GONE_MS, cancel) {
            self.gone.set(true);
        }
        self.gone.get()
    }
}

/// Waits for the receive `id`; `None` if the connection went away first
/// (a flushed receive, or the DISCONNECTED event), which ends a server.
fn wait_recv(
    qp: &Qp<Rts>,
    peer: &Peer<'_>,
    id: WrId,
    cfg: &Config,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result<Option<u32>> {
    let end = kverbs::now_ns() + u64::from(cfg.timeout_ms) * 1_000_000;
    let mut id = id;
    loop {
        match qp.wait_for(id, 200, cancel)? {
            Waited::Done(wc) if wc.status == WcStatus::WrFlushErr => return Ok(None),
            Waited::Done(wc) if wc.result().is_ok() => return Ok(Some(wc.byte_len)),
            Waited::Done(wc) => {
                let _ = writeln!(rep, "RECV: completion with error: {}", wc.status);
                if peer.wait_disconnected(cancel) {
                    return Ok(None);
                }
                return Err(EIO);
            }
            Waited::Pending(pending) => {
                if peer.disconnected() {
                    return Ok(None);
                }
                if kverbs::now_ns() >= end {
                    let _ = writeln!(rep, "RECV: nothing from the peer in {} ms", cfg.timeout_ms);
                    return Err(errno::etimedout());
                }
                id = pending;
            }
        }
    }
}

/// How a send request of a connection ended (see [`complete_or_gone`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// It completed.
    Acked,
    /// It failed, and the peer disconnected: the peer went away under it.
    Gone,
    /// The peer disconnected, and it was still outstanding [`GONE_MS`]
    /// later: the peer may or may not have had it.
    Unacked,
}

/// Sends the 16 bytes in `send_buf` (see [`complete_or_gone`]).
fn send_info(
    qp: &Qp<Rts>,
    peer: &Peer<'_>,
    send_buf: &Arc<DmaBuf>,
    cfg: &Config,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result<Sent> {
    let id = qp.post_send(SendOp::Send, send_buf, 0, INFO_LEN, true)?;
    complete_or_gone(qp, peer, id, "SEND", cfg, cancel, rep)
}

/// Waits for the send request `wr`: how it ended, or an error if it failed
/// and the peer did not disconnect, or if it is outstanding after the run's
/// timeout. A peer killed in the middle of a ping can take its QP down
/// before its disconnect gets out: the request then fails with a remote
/// error (the DISCONNECTED event follows within [`GONE_MS`]), or is never
/// answered (the event comes while it is outstanding; rxe retries it for
/// ever: the connection manager gives this side's QP the client's retry
/// count, rping's 7, which rxe never counts down). A request the peer
/// did get can also be outstanding when the event comes: rping
/// disconnects as soon as the last go-ahead arrives, and its disconnect
/// can overtake the acknowledgement -- or stop it: rxe's responder sends
/// no acknowledgement once the QP is in ERR, and rping moves it there as
/// soon as it has the completion, which rxe gives before the
/// acknowledgement goes out. So an outstanding request gets [`GONE_MS`]
/// more to complete, counted from the event, and is then
/// [`Sent::Unacked`]. The event is taken once: [`Peer`] remembers it.
fn complete_or_gone(
    qp: &Qp<Rts>,
    peer: &Peer<'_>,
    wr: WrId,
    what: &str,
    cfg: &Config,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result<Sent> {
    let end = kverbs::now_ns() + u64::from(cfg.timeout_ms) * 1_000_000;
    let mut gone_end = None;
    let mut wr = wr;
    loop {
        match qp.wait_for(wr, 200, cancel)? {
            Waited::Done(wc) if wc.result().is_ok() => return Ok(Sent::Acked),
            Waited::Done(wc) => {
                let _ = writeln!(
                    rep,
                    "{}: completion with error: {} (vendor error {:#x})",
                    what, wc.status, wc.vendor_err
                );
                if peer.wait_disconnected(cancel) {
                    return Ok(Sent::Gone);
                }
                return Err(EIO);
            }
            Waited::Pending(pending) => {
                let now = kverbs::now_ns();
                if gone_end.is_none() && peer.disconnected() {
                    gone_end = Some(now + u64::from(GONE_MS) * 1_000_000);
                }
                if gone_end.is_some_and(|gone| now >= gone) {
                    let _ = writeln!(
                        rep,
                        "{}: outstanding {} ms after the peer disconnected",
                        what, GONE_MS
                    );
                    return Ok(Sent::Unacked);
                }
                if now >= end {
                    let _ = writeln!(rep, "{}: no completion in {} ms", what, cfg.timeout_ms);
                    return Err(errno::etimedout());
                }
                wr = pending;
            }
        }
    }
}

/// rping's server or client, on the device whose `rc` file was written.
pub(crate) fn run(cfg: &Config, ctx: Run<'_>) -> Result {
    let (dev, cancel, stats, rep) = (ctx.dev, ctx.cancel, ctx.stats, ctx.rep);
    cm_device_check(dev, "rc", rep)?;
    let server = cfg.server;
    let t = cfg.timeout_ms;
    let size = cfg.size;
    let events = CmEvents::new()?;

    // The connection: a listener and the ID of its request, or a resolved
    // ID. The listener lives until the end of the run.
    let (_listener, id) = if server {
        bind_server(dev, cfg, &events, cancel, rep)?
    } else {
        (None, bind_client(dev, cfg, &events, cancel, rep)?)
    };
    cm_on_device(dev, "rc", &id, rep)?;

    // Resources: the QP is created on the ID, which moves it to INIT.
    let pd = Pd::new(dev)?;
    let cq = Cq::new(dev, 16, cfg.poll)?;
    let qp = Qp::new_cm(
        &id,
        &pd,
        &cq,
        &cq,
        QpCaps {
            max_send_wr: 8,
            max_recv_wr: 2,
            ..Default::default()
        },
    )?;
    let recv_buf = Arc::new(DmaBuf::new(dev, INFO_LEN)?, GFP_KERNEL)?;
    let send_buf = Arc::new(DmaBuf::new(dev, INFO_LEN)?, GFP_KERNEL)?;
    let rdma_buf = Arc::new(DmaBuf::new(dev, size)?, GFP_KERNEL)?;
    let recv = qp.post_recv(&recv_buf, 0, INFO_LEN)?;
    let _ = writeln!(
        rep,
        "resources_create: ok: qp {:#x}, buffers of {} bytes",
        qp.qp_num(),
        size
    );

    let ping = Ping {
        id: &id,
        peer: Peer::new(&id),
        recv_buf: &recv_buf,
        send_buf: &send_buf,
        rdma_buf: &rdma_buf,
        cfg,
        cancel,
        stats,
    };
    if server {
        let qp = id.accept(qp, t, cancel)?;
        let _ = writeln!(rep, "rdma_cm: connection established (accepted)");
        return ping.test_server(&qp, recv, rep);
    }
    ping.test_client(dev, &pd, qp, recv, rep)
}

/// rping_bind_server: a listener, and the ID of the request it gets.
fn bind_server(
    dev: &Device,
    cfg: &Config,
    events: &CmEvents,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result<(Option<CmId>, CmId)> {
    let t = cfg.timeout_ms;
    let listener = cm_listen(dev, "rc", events, cfg.addr, cfg.port, rep)?;
    let id = listener.get_request(t, cancel).inspect_err(|e| {
        let _ = writeln!(
            rep,
            "rdma_cm: no connection request: error {}",
            e.to_errno()
        );
        pr_warn!(
            "{}: rc: no rdma_cm connection request on port {}: error {}\n",
            dev.name(),
            cfg.port,
            e.to_errno()
        );
    })?;
    Ok((Some(listener), id))
}

/// rping_bind_client: an ID resolved to the server's address.
fn bind_client(
    dev: &Device,
    cfg: &Config,
    events: &CmEvents,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result<CmId> {
    let t = cfg.timeout_ms;
    let addr = cfg.addr.ok_or(EINVAL)?;
    let id = CmId::new(events)?;
    id.resolve(addr, cfg.port, t, cancel).inspect_err(|e| {
        let _ = writeln!(
            rep,
            "rdma_cm: cannot resolve {}: error {}",
            addr,
            e.to_errno()
        );
        pr_warn!(
            "{}: rc: rdma_cm cannot resolve {}: error {}\n",
            dev.name(),
            addr,
            e.to_errno()
        );
    })?;
    Ok(id)
}

/// A connection's ID and buffers: rping's receive and send buffers (its
/// `rping_rdma_info` messages) and its RDMA buffer.
struct Ping<'a> {
    id: &'a CmId,
    peer: Peer<'a>,
    recv_buf: &'a Arc<DmaBuf>,
    send_buf: &'a Arc<DmaBuf>,
    rdma_buf: &'a Arc<DmaBuf>,
    cfg: &'a Config,
    cancel: &'a Cancel,
    stats: &'a Stats,
}

impl Ping<'_> {
    /// rping_test_server: serves pings until the client disconnects.
    fn test_server(&self, qp: &Qp<Rts>, recv: WrId, rep: &mut Report) -> Result {
        let (id, cfg, cancel, stats) = (self.id, self.cfg, self.cancel, self.stats);
        let peer = &self.peer;
        let (recv_buf, send_buf, rdma_buf) = (self.recv_buf, self.send_buf, self.rdma_buf);
        let size = cfg.size;
        let mut recv = recv;
        let mut pings = 0u32;
        // The client's start buffer, until the client disconnects; `true`
        // if it went under a READ, WRITE or SEND of ours.
        let mid_ping = loop {
            let Some(len) = wait_recv(qp, peer, recv, cfg, cancel, rep)? else {
                break false;
            };
            if len as usize != INFO_LEN {
                let _ = writeln!(rep, "received bogus data, size {}", len);
                return Err(EIO);
            }
            let mut src = parse_info(recv_buf)?;
            recv = qp.post_recv(recv_buf, 0, INFO_LEN)?;
            src.len = src.len.min(size as u32);
            let rd = qp.post_send(SendOp::Read(src), rdma_buf, 0, src.len as usize, true)?;
            if complete_or_gone(qp, peer, rd, "RDMA READ", cfg, cancel, rep)? != Sent::Acked {
                break true;
            }
            add(&stats.read_msgs, 1);
            add(&stats.read_bytes, src.len.into());
            if cfg.validate {
                let mut head = [0u8; 10];
                rdma_buf.read(0, &mut head)?;
                if &head != b"rdma-ping-" {
                    let _ = writeln!(rep, "RDMA READ: the data is not rping's");
                    return Err(EIO);
                }
            }
            // Go ahead.
            if send_info(qp, peer, send_buf, cfg, cancel, rep)? != Sent::Acked {
                break true;
            }
            // The client's sink buffer.
            let Some(len) = wait_recv(qp, peer, recv, cfg, cancel, rep)? else {
                break false;
            };
            if len as usize != INFO_LEN {
                let _ = writeln!(rep, "received bogus data, size {}", len);
                return Err(EIO);
            }
            let mut sink = parse_info(recv_buf)?;
            recv = qp.post_recv(recv_buf, 0, INFO_LEN)?;
            // rping writes the string and its NUL back.
            let mut data = KVec::from_elem(0u8, src.len as usize, GFP_KERNEL)?;
            rdma_buf.read(0, &mut data)?;
            let n = data
                .iter()
                .position(|&b| b == 0)
                .map_or(data.len(), |p| p + 1);
            sink.len = sink.len.min(n as u32);
            let wr = qp.post_send(SendOp::Write(sink), rdma_buf, 0, sink.len as usize, true)?;
            if complete_or_gone(qp, peer, wr, "RDMA WRITE", cfg, cancel, rep)? != Sent::Acked {
                break true;
            }
            add(&stats.write_msgs, 1);
            add(&stats.write_bytes, sink.len.into());
            // The ping's last go-ahead: rping disconnects as soon as it
            // has the last one, perhaps before its acknowledgement went
            // out. Outstanding at the disconnect, it ends the run after
            // its ping, as krping's server, which never waits for it.
            let sent = send_info(qp, peer, send_buf, cfg, cancel, rep)?;
            if sent == Sent::Gone {
                break true;
            }
            add(&stats.send_msgs, 2);
            add(&stats.send_bytes, 2 * INFO_LEN as u64);
            pings += 1;
            if sent == Sent::Unacked {
                let _ = writeln!(
                    rep,
                    "rdma_cm: the go-ahead of ping {} unacknowledged when the client disconnected",
                    pings
                );
                break false;
            }
        };
        if mid_ping {
            let _ = writeln!(rep, "rdma_cm: the client went away in the middle of a ping");
        }
        let _ = writeln!(
            rep,
            "rdma_cm: the client disconnected after {} ping(s)",
            pings
        );
        if pings == 0 {
            return Err(errno::eproto());
        }
        let _ = writeln!(rep, "pings: {}", pings);
        let _ = id.disconnect();
        Ok(())
    }

    /// rping_test_client: `cfg.iters` pings, each checked.
    fn test_client(
        &self,
        dev: &Device,
        pd: &Pd,
        qp: Qp<Init>,
        recv: WrId,
        rep: &mut Report,
    ) -> Result {
        let (id, cfg, cancel, stats) = (self.id, self.cfg, self.cancel, self.stats);
        let peer = &self.peer;
        let (recv_buf, send_buf, rdma_buf) = (self.recv_buf, self.send_buf, self.rdma_buf);
        let (t, size) = (cfg.timeout_ms, cfg.size);
        let mut recv = recv;
        // The client: its start buffer is read, its sink written, through
        // fast-registered MRs with just those rights.
        let start_buf = Arc::new(DmaBuf::new(dev, size)?, GFP_KERNEL)?;
        let start_mr = Mr::new(pd, size)?;
        let sink_mr = Mr::new(pd, size)?;
        let start_remote = start_mr.map(&start_buf)?;
        let sink_remote = sink_mr.map(rdma_buf)?;
        let qp = id.connect(qp, t, cancel).inspect_err(|e| {
            let addr = cfg.addr.unwrap_or(Ipv4::ANY);
            let _ = writeln!(
                rep,
                "rdma_cm: no connection to {}: error {}",
                addr,
                e.to_errno()
            );
            pr_warn!(
                "{}: rc: rdma_cm: no connection to {}:{}: error {}\n",
                dev.name(),
                addr,
                cfg.port,
                e.to_errno()
            );
        })?;
        let _ = writeln!(rep, "rdma_cm: connection established");
        start_mr.post_registration(&qp, Access::REMOTE_READ, t, cancel)?;
        sink_mr.post_registration(&qp, Access::LOCAL_WRITE | Access::REMOTE_WRITE, t, cancel)?;

        let mut start = 65u8;
        for ping in 0..cfg.iters {
            fill_ping(&start_buf, size, ping, start)?;
            start = if start >= 122 { 65 } else { start + 1 };
            rdma_buf.write(0, &KVec::from_elem(0u8, size, GFP_KERNEL)?)?;

            send_buf.write(0, &info_bytes(&start_remote))?;
            if send_info(&qp, peer, send_buf, cfg, cancel, rep)? != Sent::Acked
                || wait_recv(&qp, peer, recv, cfg, cancel, rep)?.is_none()
            {
                let _ = writeln!(rep, "ping {}: the server went away", ping);
                return Err(errno::econnreset());
            }
            recv = qp.post_recv(recv_buf, 0, INFO_LEN)?;

            send_buf.write(0, &info_bytes(&sink_remote))?;
            if send_info(&qp, peer, send_buf, cfg, cancel, rep)? != Sent::Acked
                || wait_recv(&qp, peer, recv, cfg, cancel, rep)?.is_none()
            {
                let _ = writeln!(rep, "ping {}: the server went away", ping);
                return Err(errno::econnreset());
            }
            recv = qp.post_recv(recv_buf, 0, INFO_LEN)?;
            add(&stats.send_msgs, 2);
            add(&stats.send_bytes, 2 * INFO_LEN as u64);
            add(&stats.recv_msgs, 2);
            add(&stats.recv_bytes, 2 * INFO_LEN as u64);

            if cfg.validate {
                let mut a = KVec::from_elem(0u8, size, GFP_KERNEL)?;
                let mut b = KVec::from_elem(0u8, size, GFP_KERNEL)?;
                start_buf.read(0, &mut a)?;
                rdma_buf.read(0, &mut b)?;
                if a != b {
                    let _ = writeln!(rep, "ping {}: data mismatch", ping);
                    return Err(EIO);
                }
            }
            if ping == 0 {
                let mut m = [0u8; 40];
                let n = size.min(m.len());
                rdma_buf.read(0, &mut m[..n])?;
                let _ = writeln!(
                    rep,
                    "ping data: {}",
                    core::str::from_utf8(&m[..n])
                        .unwrap_or("?")
                        .trim_end_matches('\0')
                );
            }
        }
        let _ = writeln!(rep, "pings: {}", cfg.iters);
        if cfg.validate {
            let _ = writeln!(rep, "validate: ok: every ping came back as sent");
        }
        start_mr.invalidate(&qp, t, cancel)?;
        sink_mr.invalidate(&qp, t, cancel)?;
        let _ = id.disconnect();
        let _ = writeln!(rep, "rdma_cm: disconnected");
        Ok(())
    }
}
