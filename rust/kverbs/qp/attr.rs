// SPDX-License-Identifier: GPL-2.0

//! The types of queue pairs: states, transports and the attributes
//! of their creation, transitions and requests.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use crate::ah::Ah;
use crate::bindings;
use crate::device::{Device, Gid, Mtu, PortNum};
use kernel::prelude::*;

/// QP states, as type parameters of [`Qp`].
pub trait State: private::Sealed {
    /// The state's name in messages.
    const NAME: &'static str;
}
/// Receives may be posted in this state.
pub trait CanPostRecv: State {}

/// QP transports, as type parameters of [`Qp`].
pub trait Transport: private::Sealed {
    /// The transport's name in messages.
    const NAME: &'static str;
    /// `enum ib_qp_type`.
    const QP_TYPE: bindings::ib_qp_type;
}

/// Reliable connected (`IB_QPT_RC`): SEND, RDMA READ/WRITE, memory
/// registration.
pub struct Rc;
/// Unreliable datagram (`IB_QPT_UD`): SENDs to address handles, multicast.
pub struct Ud;

impl private::Sealed for Rc {}
impl private::Sealed for Ud {}
impl Transport for Rc {
    const NAME: &'static str = "RC";
    const QP_TYPE: bindings::ib_qp_type = bindings::IB_QPT_RC;
}
impl Transport for Ud {
    const NAME: &'static str = "UD";
    const QP_TYPE: bindings::ib_qp_type = bindings::IB_QPT_UD;
}

mod private {
    pub trait Sealed {}
}

macro_rules! states {
    ($($(#[$m:meta])* $name:ident = $s:literal;)*) => {$(
        $(#[$m])*
        pub struct $name;
        impl private::Sealed for $name {}
        impl State for $name {
            const NAME: &'static str = $s;
        }
    )*};
}

states! {
    /// Just created (`IB_QPS_RESET`).
    Reset = "RESET";
    /// Initialised (`IB_QPS_INIT`).
    Init = "INIT";
    /// Ready to receive (`IB_QPS_RTR`).
    Rtr = "RTR";
    /// Ready to send (`IB_QPS_RTS`).
    Rts = "RTS";
    /// In error (`IB_QPS_ERR`): outstanding requests are flushed.
    ErrorState = "ERR";
}
impl CanPostRecv for Init {}
impl CanPostRecv for Rtr {}
impl CanPostRecv for Rts {}

/// Memory access rights (`enum ib_access_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Access(u32);

impl Access {
    /// No rights beyond local read.
    pub const NONE: Access = Access(0);
    /// The local HCA may write (needed for receives and RDMA READ targets).
    pub const LOCAL_WRITE: Access = Access(bindings::IB_ACCESS_LOCAL_WRITE);
    /// Peers may RDMA WRITE.
    pub const REMOTE_WRITE: Access = Access(bindings::IB_ACCESS_REMOTE_WRITE);
    /// Peers may RDMA READ.
    pub const REMOTE_READ: Access = Access(bindings::IB_ACCESS_REMOTE_READ);
    /// Peers may do atomics.
    pub const REMOTE_ATOMIC: Access = Access(bindings::IB_ACCESS_REMOTE_ATOMIC);

    /// The raw flags.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether the verbs allow these rights on a memory region: remote
    /// write and remote atomic need local write.
    pub fn is_valid(self) -> bool {
        let remote = Self::REMOTE_WRITE.0 | Self::REMOTE_ATOMIC.0;
        self.0 & remote == 0 || self.0 & Self::LOCAL_WRITE.0 != 0
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// Queue sizes of a new QP.
#[derive(Clone, Copy, Debug, Default)]
pub struct QpCaps {
    /// Send work requests outstanding at once.
    pub max_send_wr: u32,
    /// Receive work requests outstanding at once.
    pub max_recv_wr: u32,
    /// Bytes a send may carry inline (copied by the CPU when posted):
    /// 0 for none. The device may give more ([`Qp::max_inline_data`]).
    pub max_inline_data: u32,
    /// SGEs a request may have, on each queue (0 counts as 1): a request on
    /// a range of a buffer larger than a [`crate::dma::CHUNK`] takes one
    /// per chunk ([`DmaBuf::sge_count`]).
    pub max_sge: u32,
    /// SGEs a receive may have, if not `max_sge` (0: `max_sge`'s): a QP
    /// whose sends gather more than its receives scatter (a capsule and
    /// in-capsule data, received into one buffer) asks for no more.
    pub max_recv_sge: u32,
}

impl QpCaps {
    /// The CQ entries a QP of these sizes takes of a CQ that both its
    /// queues use: each queue plus one for the drain.
    pub fn cq_entries(&self) -> u32 {
        self.max_send_wr
            .saturating_add(self.max_recv_wr)
            .saturating_add(2)
    }
}

/// Attributes of RESET to INIT.
#[derive(Clone, Copy, Debug)]
pub struct InitAttr {
    /// P_Key index.
    pub pkey_index: u16,
    /// Access peers get through this QP.
    pub access: Access,
}

/// An address vector with a GRH (RoCE, or IB across subnets).
#[derive(Clone, Copy, Debug)]
pub struct AddressVector {
    /// Destination GID.
    pub dgid: Gid,
    /// Index of our source GID in the port's table.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Flow label.
    pub flow_label: u32,
    /// Traffic class.
    pub traffic_class: u8,
    /// Service level.
    pub sl: u8,
    /// The destination LID, on an InfiniBand port: the peer's port, the
    /// router's across subnets, or a multicast group's
    /// (`rdma_ah_set_dlid`). RoCE has no LIDs and ignores it; on an
    /// InfiniBand port a path without one (0) is refused with `EINVAL`,
    /// never sent to LID 0.
    pub dlid: u16,
}

impl AddressVector {
    /// `dgid` from our GID `sgid_index`, one hop away (hop limit 1), flow
    /// label, traffic class and service level 0, no LID: what RDMA_RC_example
    /// and mckey use on RoCE.
    pub fn new(dgid: Gid, sgid_index: u8) -> Self {
        AddressVector {
            dgid,
            sgid_index,
            hop_limit: 1,
            flow_label: 0,
            traffic_class: 0,
            sl: 0,
            dlid: 0,
        }
    }
}

/// Attributes of INIT to RTR for an RC QP.
#[derive(Clone, Copy, Debug)]
pub struct RtrAttr {
    /// Path MTU.
    pub path_mtu: Mtu,
    /// The peer's QP number.
    pub dest_qp_num: u32,
    /// The first PSN expected from the peer.
    pub rq_psn: u32,
    /// RDMA READ/atomic requests from the peer outstanding at once.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer (encoded as the verbs say).
    pub min_rnr_timer: u8,
    /// Where the peer is.
    pub av: AddressVector,
}

/// Attributes of RTR to RTS for an RC QP.
#[derive(Clone, Copy, Debug)]
pub struct RtsAttr {
    /// Local ACK timeout (4.096 us * 2^timeout).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7: infinite).
    pub rnr_retry: u8,
    /// Our first PSN.
    pub sq_psn: u32,
    /// Our RDMA READ/atomic requests outstanding at once.
    pub max_rd_atomic: u8,
}

/// A buffer of a peer, as it advertised it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteBuf {
    /// Its address in the peer's memory region.
    pub addr: u64,
    /// The memory region's rkey.
    pub rkey: u32,
    /// Its length.
    pub len: u32,
}

/// Where a UD send goes.
#[derive(Clone)]
pub struct UdDest {
    /// The address.
    pub ah: Ah,
    /// The destination QP number (`0xffffff` for a multicast group).
    pub qpn: u32,
    /// The destination Q_Key.
    pub qkey: u32,
}

/// The room a UD receive leaves for the GRH before the data.
pub const GRH_LEN: usize = 40;

/// The operation of a send work request.
#[derive(Clone, Copy, Debug)]
pub enum SendOp {
    /// SEND.
    Send,
    /// SEND with immediate data.
    SendWithImm(u32),
    /// SEND that invalidates the peer's memory region of this rkey when
    /// it arrives (`IB_WR_SEND_WITH_INV`; the peer's receive completion
    /// names it: [`crate::wc::Wc::invalidated_rkey`]), as an NVMe/RDMA or
    /// iSER target answers. RC only; a device without memory management
    /// extensions refuses it. It can only take rights away -- but from any
    /// fast-registration MR of the peer's device whose rkey it names: rxe
    /// looks the key up device-wide, whatever the PD
    /// (`rxe_invalidate_mr`), so a peer can revoke another ULP's
    /// registration there (the peer's completion then fails; no buffer
    /// is let go by it).
    SendWithInv(u32),
    /// RDMA WRITE to the peer's buffer.
    Write(RemoteBuf),
    /// RDMA WRITE with immediate data.
    WriteWithImm(RemoteBuf, u32),
    /// RDMA READ of the peer's buffer.
    Read(RemoteBuf),
    /// An atomic operation on the peer's 8 bytes; the old value lands in
    /// the 8 bytes of the request's local memory.
    Atomic(AtomicOp),
}

/// A send work request as the device reads it: an `ib_rdma_wr` for SEND,
/// RDMA WRITE and READ, an `ib_atomic_wr` for the atomics. Both begin with
/// the `ib_send_wr` that is posted and chained, and the driver finds the
/// rest from the opcode (`rdma_wr()`, `atomic_wr()`: `container_of`).
///
/// # Invariants
///
/// The member the opcode names is the one initialised; the `ib_send_wr`
/// at offset 0 always is.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union SendWr {
    rdma: bindings::ib_rdma_wr,
    atomic: bindings::ib_atomic_wr,
}

impl SendWr {
    /// The request for `op`: opcode, immediate data, remote address and
    /// key, the atomic's operands; the caller adds the SGEs and the CQE.
    pub(crate) fn new(op: SendOp) -> Self {
        let mut wr = bindings::ib_rdma_wr::default();
        let (opcode, imm, remote) = match op {
            SendOp::Send => (bindings::IB_WR_SEND, None, None),
            SendOp::SendWithImm(imm) => (bindings::IB_WR_SEND_WITH_IMM, Some(imm), None),
            SendOp::SendWithInv(rkey) => {
                wr.wr.ex.invalidate_rkey = rkey;
                (bindings::IB_WR_SEND_WITH_INV, None, None)
            }
            SendOp::Write(r) => (bindings::IB_WR_RDMA_WRITE, None, Some(r)),
            SendOp::WriteWithImm(r, imm) => {
                (bindings::IB_WR_RDMA_WRITE_WITH_IMM, Some(imm), Some(r))
            }
            SendOp::Read(r) => (bindings::IB_WR_RDMA_READ, None, Some(r)),
            // INVARIANT: an atomic opcode, the `atomic` member.
            SendOp::Atomic(a) => {
                return SendWr {
                    atomic: a.atomic_wr(),
                }
            }
        };
        wr.wr.opcode = opcode;
        if let Some(imm) = imm {
            // The union's other member, `invalidate_rkey`, is set by its
            // opcode's arm alone.
            wr.wr.ex.imm_data = imm.to_be();
        }
        if let Some(r) = remote {
            wr.remote_addr = r.addr;
            wr.rkey = r.rkey;
        }
        // INVARIANT: an RDMA or SEND opcode, the `rdma` member.
        SendWr { rdma: wr }
    }

    /// The `ib_send_wr` the device is given.
    pub(crate) fn wr(&mut self) -> &mut bindings::ib_send_wr {
        // SAFETY: Both members are `repr(C)` structs whose first field is
        // an `ib_send_wr`, at offset 0 of the union; the initialised member
        // (type invariant) initialised it.
        unsafe { &mut self.rdma.wr }
    }
}

/// The path migration state of an RC QP (`enum ib_mig_state`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MigState {
    /// On the path it migrated to; no alternate path is armed.
    Migrated,
    /// An alternate path was loaded; the HCA arms it.
    Rearm,
    /// The alternate path is armed: the HCA migrates to it on its own when
    /// the primary fails.
    Armed,
}

/// An alternate path of an RC QP (`IB_QP_ALT_PATH`): where it goes and
/// through which port, with its P_Key index and ACK timeout.
#[derive(Clone, Copy, Debug)]
pub struct AltPath {
    /// The destination and source GID of the path.
    pub av: AddressVector,
    /// The local port of the path.
    pub port: PortNum,
    /// The P_Key index on that port.
    pub pkey_index: u16,
    /// The local ACK timeout of the path (4.096 us * 2^timeout).
    pub timeout: u8,
}

/// An atomic operation on the 8 bytes at the start of a peer's buffer
/// (`IB_WR_ATOMIC_*`, the RC transport's only atomics). The value there is
/// a `u64` in the responder's byte order (the HCA's, the CPU's on rxe); the
/// old value comes back into 8 bytes of a local buffer.
#[derive(Clone, Copy, Debug)]
pub enum AtomicOp {
    /// Adds `add` (`IB_WR_ATOMIC_FETCH_AND_ADD`).
    FetchAdd {
        /// The target: `addr` 8-byte aligned, `len` at least 8.
        remote: RemoteBuf,
        /// What is added.
        add: u64,
    },
    /// Stores `swap` if the value equals `compare`
    /// (`IB_WR_ATOMIC_CMP_AND_SWP`).
    CmpSwap {
        /// The target: `addr` 8-byte aligned, `len` at least 8.
        remote: RemoteBuf,
        /// The value expected.
        compare: u64,
        /// The value stored if it was there.
        swap: u64,
    },
}

impl AtomicOp {
    /// The remote target.
    pub fn remote(&self) -> RemoteBuf {
        match *self {
            AtomicOp::FetchAdd { remote, .. } | AtomicOp::CmpSwap { remote, .. } => remote,
        }
    }

    /// Whether a device takes it on `len` bytes at `offset` of a local
    /// buffer: `EOPNOTSUPP` if it has no atomics (`atomic_cap` NONE);
    /// `EINVAL` unless `len` is 8 and the offset and remote address are
    /// 8-byte aligned, with 8 bytes at the remote address.
    pub(crate) fn check(&self, dev: &Device, offset: usize, len: usize) -> Result {
        if dev.attrs().atomic_cap() == bindings::IB_ATOMIC_NONE {
            return Err(crate::errno::eopnotsupp());
        }
        let remote = self.remote();
        if len != 8 || offset % 8 != 0 || remote.addr % 8 != 0 || remote.len < 8 {
            return Err(EINVAL);
        }
        Ok(())
    }

    pub(crate) fn atomic_wr(self) -> bindings::ib_atomic_wr {
        let mut wr = bindings::ib_atomic_wr::default();
        let (opcode, remote, compare_add, swap) = match self {
            AtomicOp::FetchAdd { remote, add } => {
                (bindings::IB_WR_ATOMIC_FETCH_AND_ADD, remote, add, 0)
            }
            AtomicOp::CmpSwap {
                remote,
                compare,
                swap,
            } => (bindings::IB_WR_ATOMIC_CMP_AND_SWP, remote, compare, swap),
        };
        wr.wr.opcode = opcode;
        wr.remote_addr = remote.addr;
        wr.rkey = remote.rkey;
        wr.compare_add = compare_add;
        wr.swap = swap;
        wr
    }
}
