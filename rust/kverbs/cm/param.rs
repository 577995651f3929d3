// SPDX-License-Identifier: GPL-2.0

//! What a connection carries besides its QP: the parameters of a connect
//! or accept (`struct rdma_conn_param`) with the private data they send,
//! the private data the peer sent (with its request, its reply or its
//! rejection), and a rejection's reason.
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h)
//!
//! A ULP's wire protocol often starts here: NVMe over RDMA's queue number
//! and sizes travel in the request's private data, the target's status in
//! its rejection's (`include/linux/nvme-rdma.h`).

use crate::bindings;
use crate::device::Device;
use kernel::prelude::*;

/// Private data a peer sent with a connection event: its first
/// [`PrivateData::MAX`] bytes.
///
/// Over InfiniBand and RoCE the transport pads what the sender gave to
/// its message's size with zeroes (56 bytes for a request made by the
/// connection manager), so the length is the message's, not the sender's;
/// over iWARP it is the sender's.
#[derive(Clone, Copy)]
pub struct PrivateData {
    len: u8,
    bytes: [u8; PrivateData::MAX],
}

impl PrivateData {
    /// The most kept of an event's private data.
    pub const MAX: usize = 64;

    /// No private data.
    pub const EMPTY: PrivateData = PrivateData {
        len: 0,
        bytes: [0; PrivateData::MAX],
    };

    /// A copy of the first [`PrivateData::MAX`] bytes of `len` at `data`.
    ///
    /// # Safety
    ///
    /// `data` is null, or valid for reads of `len` bytes.
    pub(super) unsafe fn copy_from(data: *const u8, len: usize) -> Self {
        let mut pd = Self::EMPTY;
        if data.is_null() {
            return pd;
        }
        let n = len.min(Self::MAX);
        // SAFETY: `data` is valid for `len >= n` bytes (the caller's
        // guarantee); `pd.bytes` has room for `n <= MAX`.
        unsafe { core::ptr::copy_nonoverlapping(data, pd.bytes.as_mut_ptr(), n) };
        // `n <= MAX`, which fits in a `u8`.
        pd.len = n as u8;
        pd
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// The parameters of [`CmId::connect_with`](super::CmId::connect_with) and
/// [`CmId::accept_with`](super::CmId::accept_with)
/// (`struct rdma_conn_param`). [`ConnParam::default`] gives what
/// [`CmId::connect`](super::CmId::connect) and
/// [`CmId::accept`](super::CmId::accept) use.
#[derive(Clone, Copy)]
pub struct ConnParam<'a> {
    /// Sent with the request or the reply; the transport bounds it (a
    /// request made by the connection manager over InfiniBand or RoCE
    /// takes 56 bytes, a reply 196, iWARP 512): longer fails with
    /// `EINVAL`, a connect before anything is sent, an accept after the
    /// connection manager has rejected the request (without data).
    pub private_data: &'a [u8],
    /// The RDMA READs and atomics the peer may have outstanding at this
    /// side at once; at most the device's `max_qp_rd_atom` is asked for.
    pub responder_resources: u8,
    /// The RDMA READs and atomics this side may have outstanding at the
    /// peer at once; at most the device's `max_qp_init_rd_atom` is asked
    /// for.
    pub initiator_depth: u8,
    /// Transport retries of a request before it fails, 0 to 6 (7 means
    /// "for ever" on some devices, rxe among them, and is refused).
    pub retry_count: u8,
    /// Retries after the peer's "receiver not ready", 0 to 7 (7: for
    /// ever).
    pub rnr_retry_count: u8,
}

impl Default for ConnParam<'_> {
    fn default() -> Self {
        ConnParam {
            private_data: &[],
            responder_resources: 1,
            initiator_depth: 1,
            // Not 7: rxe never counts 7 down ("retry forever"), so a
            // request to a peer that is gone would stay outstanding until
            // the caller's timeout. 6 retries end it with "transport
            // retry counter exceeded" (as the benchmark's QPs do).
            retry_count: 6,
            rnr_retry_count: 7,
        }
    }
}

impl ConnParam<'_> {
    /// The C parameters for `dev`, borrowing `private_data`; `EINVAL` if it
    /// is longer than any transport takes or a count is out of range.
    pub(super) fn as_raw(&self, dev: &Device) -> Result<bindings::rdma_conn_param> {
        // iWARP's MPA takes the most: 512 bytes (`MPA_MAX_PRIVATE_DATA`);
        // the field is a `u8`, so 255 is the most that can be said.
        let len = u8::try_from(self.private_data.len()).map_err(|_| EINVAL)?;
        if self.retry_count > 6 || self.rnr_retry_count > 7 {
            return Err(EINVAL);
        }
        // The connection manager gives them to the QP as they are
        // (`max_dest_rd_atomic`, `max_rd_atomic`): more than the device
        // takes would fail the QP's modification, and the connection.
        let attrs = dev.attrs();
        let most = |n: i32| u8::try_from(n.max(0)).unwrap_or(u8::MAX);
        Ok(bindings::rdma_conn_param {
            private_data: if len == 0 {
                core::ptr::null()
            } else {
                self.private_data.as_ptr().cast()
            },
            private_data_len: len,
            responder_resources: self.responder_resources.min(most(attrs.max_qp_rd_atom())),
            initiator_depth: self.initiator_depth.min(most(attrs.max_qp_init_rd_atom())),
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            ..Default::default()
        })
    }
}

/// The peer's rejection of a connection request.
#[derive(Clone, Copy)]
pub struct Rejection {
    /// The reason (the event's status): an InfiniBand CM reject reason
    /// (`enum ib_cm_rej_reason`: 8, invalid service ID, when nobody
    /// listens; 28, consumer defined, when the peer's ULP rejected), or an
    /// iWARP errno.
    pub reason: i32,
    /// What the peer's ULP sent with a consumer-defined rejection
    /// (`rdma_consumer_reject_data`); `None` for any other, and over
    /// iWARP for a rejection without data.
    pub consumer_data: Option<PrivateData>,
}

/// A connect or accept that failed: the error, and the rejection if the
/// peer rejected (then the error is `ECONNREFUSED`).
pub struct ConnectError {
    /// What failed.
    pub error: Error,
    /// The peer's rejection, if that was the failure.
    pub rejection: Option<Rejection>,
}

impl From<Error> for ConnectError {
    fn from(error: Error) -> Self {
        ConnectError {
            error,
            rejection: None,
        }
    }
}

impl From<ConnectError> for Error {
    fn from(e: ConnectError) -> Self {
        e.error
    }
}
