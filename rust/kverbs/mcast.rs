// SPDX-License-Identifier: GPL-2.0

//! The IP-level side of RoCE multicast.
//!
//! On RoCE a multicast group is an IP multicast group: the MGID of an IPv4
//! group `a.b.c.d` is `::ffff:a.b.c.d`, and the packets travel as UDP to
//! that address. Attaching a QP (`ib_attach_mcast`) tells the RDMA device
//! which QPs want the group; the host must also have joined the group on
//! the netdev, or the IP stack does not deliver the packets to the device
//! (rdma_cm's join does this; 6.12's rxe does not do it on attach). An
//! [`IpGroup`] is such a join, left when it is dropped.

use crate::bindings;
use crate::device::{Device, Gid, PortNum};
use crate::tcp::Ipv4;
use core::ptr::{self, NonNull};
use kernel::prelude::*;

/// The MGID of the IPv4 group `addr`, as RoCE v2 (and rdma_cm) maps it.
pub fn mgid_of(addr: Ipv4) -> Gid {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&addr.0);
    Gid(g)
}

/// Whether `addr` is an IPv4 multicast address (224.0.0.0/4).
pub fn is_multicast(addr: Ipv4) -> bool {
    addr.0[0] & 0xf0 == 0xe0
}

/// A multicast group: IPv4 (`239.1.1.1`) or IPv6 (`ff0e::1`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Group {
    /// An IPv4 group; its MGID is `::ffff:a.b.c.d`.
    V4(Ipv4),
    /// An IPv6 group; its MGID is the address.
    V6([u8; 16]),
}

impl Group {
    /// Parses a dotted IPv4 or an RFC 4291 IPv6 address; `None` if it is
    /// neither, or not multicast.
    pub fn parse(text: &str) -> Option<Self> {
        let g = if text.contains(':') {
            Group::V6(parse_ipv6(text)?)
        } else {
            let mut a = [0u8; 4];
            let mut parts = text.split('.');
            for b in a.iter_mut() {
                *b = parts.next()?.parse().ok()?;
            }
            if parts.next().is_some() {
                return None;
            }
            Group::V4(Ipv4(a))
        };
        g.is_multicast().then_some(g)
    }

    /// Whether the address is multicast (224.0.0.0/4, ff00::/8).
    pub fn is_multicast(&self) -> bool {
        match self {
            Group::V4(a) => is_multicast(*a),
            Group::V6(a) => a[0] == 0xff,
        }
    }

    /// The group's MGID.
    pub fn mgid(&self) -> Gid {
        match self {
            Group::V4(a) => mgid_of(*a),
            Group::V6(a) => Gid(*a),
        }
    }
}

impl core::fmt::Display for Group {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Group::V4(a) => write!(f, "{}", a),
            Group::V6(a) => write!(f, "{}", Gid(*a).ipv6()),
        }
    }
}
crate::kernel_display!(Group);

/// Parses an IPv6 address (`ff0e::1:2`, no embedded IPv4, no zone).
fn parse_ipv6(text: &str) -> Option<[u8; 16]> {
    let (head, tail) = match text.split_once("::") {
        Some((h, t)) => (h, Some(t)),
        None => (text, None),
    };
    let groups = |s: &str| -> Option<KVec<u16>> {
        let mut v = KVec::new();
        if s.is_empty() {
            return Some(v);
        }
        for part in s.split(':') {
            if part.is_empty() || part.len() > 4 {
                return None;
            }
            v.push(u16::from_str_radix(part, 16).ok()?, GFP_KERNEL)
                .ok()?;
        }
        Some(v)
    };
    let h = groups(head)?;
    let t = match tail {
        Some(t) => groups(t)?,
        None => KVec::new(),
    };
    let n = h.len() + t.len();
    if (tail.is_none() && n != 8) || (tail.is_some() && n > 7) {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, g) in h.iter().enumerate() {
        out[2 * i..2 * i + 2].copy_from_slice(&g.to_be_bytes());
    }
    for (i, g) in t.iter().enumerate() {
        let j = 8 - t.len() + i;
        out[2 * j..2 * j + 2].copy_from_slice(&g.to_be_bytes());
    }
    Some(out)
}

/// Checks that the IP stack routes packets from `sgid` (a RoCE v2 GID of
/// `port`) to the multicast group `mgid` out of the port's netdev, as a UD
/// send to the group will need: without a route the device fails the send
/// (rxe moves the QP to the error state; the completion says only "WR
/// flushed"). `ENETUNREACH` or another routing error otherwise, `ENODEV`
/// without a netdev.
pub fn check_route(dev: &Device, port: PortNum, sgid: &Gid, mgid: &Gid) -> Result {
    if !dev.ports().contains(&port) {
        return Err(EINVAL);
    }
    // SAFETY: The device is live and `port` valid; both GIDs are 16 bytes.
    kernel::error::to_result(unsafe {
        bindings::kverbs_mcast_route(dev.as_raw(), port, sgid.0.as_ptr(), mgid.0.as_ptr())
    })
}

/// A membership of the host in a multicast group on one netdev.
///
/// # Invariants
///
/// The socket was created by `kverbs_ip_mc_join`, which joined it to the
/// group; releasing it leaves the group.
pub struct IpGroup(NonNull<bindings::socket>);

// SAFETY: Kernel sockets may be released from any thread.
unsafe impl Send for IpGroup {}
// SAFETY: `&IpGroup` gives access to nothing.
unsafe impl Sync for IpGroup {}

impl IpGroup {
    /// Joins `group` on the netdev with index `ifindex`.
    pub fn join(group: Group, ifindex: i32) -> Result<Self> {
        if !group.is_multicast() {
            return Err(EINVAL);
        }
        let mut sock = ptr::null_mut();
        // SAFETY: `sock` is a valid out pointer; the address is 16 bytes.
        kernel::error::to_result(unsafe {
            match group {
                Group::V4(a) => {
                    bindings::kverbs_ip_mc_join(&mut sock, u32::from_ne_bytes(a.0), ifindex)
                }
                Group::V6(a) => bindings::kverbs_ip6_mc_join(&mut sock, a.as_ptr(), ifindex),
            }
        })?;
        // INVARIANT: joined above.
        Ok(IpGroup(NonNull::new(sock).ok_or(ENOMEM)?))
    }
}

impl Drop for IpGroup {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the socket is ours; releasing it
        // drops its memberships.
        unsafe { bindings::sock_release(self.0.as_ptr()) };
    }
}
