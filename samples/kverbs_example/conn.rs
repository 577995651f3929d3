// SPDX-License-Identifier: GPL-2.0

//! What the two-host examples share to connect: RDMA_RC_example's TCP
//! connection and its data, the GID to use, rdma_cm's listener and device
//! checks, and the wait for a completion that must succeed.

use crate::report::Report;
use core::fmt::Write;
use kernel::prelude::*;
use kverbs::{
    cm::{CmEvents, CmId},
    device::{Device, GidType},
    errno,
    qp::{Cancel, Qp, WrId},
    tcp::{Ipv4, TcpListener, TcpStream},
};

/// Which side of a connection this is, or both (two QPs of one device).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Role {
    /// Server and client QPs on one device, in this kernel.
    Loopback,
    /// The side that waits for the peer.
    Server,
    /// The side that connects to `addr=`.
    Client,
}

impl Role {
    /// The roles by their names in the control strings.
    pub(crate) const NAMED: [(&'static str, Role); 3] = [
        ("loopback", Role::Loopback),
        ("server", Role::Server),
        ("client", Role::Client),
    ];

    /// The role's name in the control strings.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Loopback => "loopback",
            Role::Server => "server",
            Role::Client => "client",
        }
    }
}

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

/// Waits up to `timeout_ms` for a completion that must succeed, and says
/// what failed.
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

/// A listener on `addr` (any if `None`) and `port` for the control file
/// `file`, its events to `events`; a failure is logged, a success
/// reported.
pub(crate) fn cm_listen(
    dev: &Device,
    file: &str,
    events: &CmEvents,
    addr: Option<Ipv4>,
    port: u16,
    rep: &mut Report,
) -> Result<CmId> {
    let listener = CmId::new(events)?;
    let addr = addr.unwrap_or(Ipv4::ANY);
    listener.listen(addr, port).inspect_err(|e| {
        pr_warn!(
            "{}: {}: rdma_cm cannot listen on {}:{}: error {}\n",
            dev.name(),
            file,
            addr,
            port,
            e.to_errno()
        );
    })?;
    let _ = writeln!(rep, "rdma_cm: listening on {}:{}", addr, port);
    Ok(listener)
}

/// `ENODEV`, reported and logged, if a port of `dev` sits on a loopback
/// netdev (rxe over `lo`): the RDMA core resolves no address to such a
/// port, so no rdma_cm connection can be made on it, by either side (a
/// client there fails to resolve; a listener there waits for a request
/// that cannot come).
pub(crate) fn cm_device_check(dev: &Device, file: &str, rep: &mut Report) -> Result {
    for port in dev.ports() {
        if dev.netdev_loopback(port) == Some(true) {
            let netdev = dev.netdev_name(port);
            let name = netdev.as_ref().map(|n| n.as_str()).unwrap_or("?");
            let _ = writeln!(
                rep,
                "rdma_cm: no connection over {}, a loopback netdev",
                name
            );
            pr_warn!(
                "{}: {}: rdma_cm cannot connect over {}, a loopback netdev: the RDMA core resolves no address to it; use rxe on another netdev\n",
                dev.name(),
                file,
                name
            );
            return Err(ENODEV);
        }
    }
    Ok(())
}

/// Checks that the connection of `id` (resolved, or a request) is on
/// `dev`, the device of the control file `file`: `EINVAL`, reported and
/// logged, if the connection manager put it on another one.
pub(crate) fn cm_on_device(dev: &Device, file: &str, id: &CmId, rep: &mut Report) -> Result {
    let cm_dev = id.device().ok_or(ENODEV)?;
    if !cm_dev.same_as(dev) {
        let _ = writeln!(
            rep,
            "rdma_cm: the connection is on {}, not on {}",
            cm_dev.name(),
            dev.name()
        );
        pr_warn!(
            "{}: {}: the rdma_cm connection is on {}, not on this device\n",
            dev.name(),
            file,
            cm_dev.name()
        );
        return Err(EINVAL);
    }
    Ok(())
}
