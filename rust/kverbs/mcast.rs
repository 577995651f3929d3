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
use crate::device::Gid;
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

/// A membership of the host in an IPv4 multicast group on one netdev.
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
    pub fn join(group: Ipv4, ifindex: i32) -> Result<Self> {
        if !is_multicast(group) {
            return Err(EINVAL);
        }
        let mut sock = ptr::null_mut();
        // SAFETY: `sock` is a valid out pointer.
        kernel::error::to_result(unsafe {
            bindings::kverbs_ip_mc_join(&mut sock, u32::from_ne_bytes(group.0), ifindex)
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
