// SPDX-License-Identifier: GPL-2.0

//! Multicast groups of UD queue pairs (`ib_attach_mcast`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{Qp, State, Ud};
use crate::bindings;
use crate::device::Gid;
use kernel::prelude::*;

impl<S: State> Qp<S, Ud> {
    /// Attaches this UD QP to the multicast group `mgid` (`ib_attach_mcast`;
    /// LID 0 on RoCE). `EEXIST` if it is attached already, `EINVAL` for a
    /// GID that is not multicast. The QP detaches from every group it is
    /// still attached to when it is dropped.
    pub fn attach_mcast(&self, mgid: Gid) -> Result {
        if mgid.0[0] != 0xff && !mgid.is_v4_mapped() {
            return Err(EINVAL);
        }
        let mut book = self.inner.book.lock();
        if book.mcast.contains(&mgid) {
            return Err(EEXIST);
        }
        book.mcast.reserve(1, GFP_KERNEL)?;
        let mut gid = bindings::ib_gid { raw: mgid.0 };
        // SAFETY: The QP is live; `gid` is valid.
        kernel::error::to_result(unsafe {
            bindings::ib_attach_mcast(self.inner.qp.as_ptr(), &mut gid, 0)
        })?;
        // Cannot fail: the room was reserved above.
        book.mcast.push(mgid, GFP_KERNEL)?;
        Ok(())
    }

    /// Detaches this QP from `mgid`; `ENOENT` if it is not attached.
    pub fn detach_mcast(&self, mgid: Gid) -> Result {
        let mut book = self.inner.book.lock();
        let i = book.mcast.iter().position(|g| *g == mgid).ok_or(ENOENT)?;
        let mut gid = bindings::ib_gid { raw: mgid.0 };
        // SAFETY: The QP is live and attached to `mgid`.
        kernel::error::to_result(unsafe {
            bindings::ib_detach_mcast(self.inner.qp.as_ptr(), &mut gid, 0)
        })?;
        let last = book.mcast.len() - 1;
        book.mcast.as_mut_slice().swap(i, last);
        crate::compat::truncate(&mut book.mcast, last);
        Ok(())
    }
}
