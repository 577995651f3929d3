// SPDX-License-Identifier: GPL-2.0

//! Queue pairs and work requests.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! # The state machine in the types
//!
//! A [`Qp<S, T>`] is an RC ([`Rc`], the default) or UD ([`Ud`]) queue pair
//! in state `S`: what a verb needs of the transport is in the type, so an
//! RDMA operation cannot be posted on a UD QP nor a datagram on an RC QP:
//!
//! ```compile_fail,E0599
//! # use kverbs::{dma::DmaBuf, qp::{Qp, Rts, SendOp, Ud}};
//! # use kernel::{prelude::*, sync::Arc};
//! fn f(qp: &Qp<Rts, Ud>, buf: &Arc<DmaBuf>) -> Result {
//!     qp.post_send(SendOp::Send, buf, 0, 1, true)?; // RC only
//!     Ok(())
//! }
//! ```
//!
//! A [`Qp<S, T>`] is created in [`Reset`]. Each transition consumes the QP and
//! returns it in the next state, taking exactly the attributes the verbs
//! require for it: [`Qp::<Reset>::to_init`], [`Qp::<Init>::to_rtr`],
//! [`Qp::<Rtr>::to_rts`]; any state may go to [`ErrorState`] with
//! [`Qp::to_error`]. A transition the verbs forbid does not compile. A
//! modify the device rejects returns its errno, and the attribute mask is
//! named in the kernel log; the QP is then destroyed.
//!
//! Receives may be posted from [`Init`] on, sends only in [`Rts`].
//!
//! # Objects of one device and PD
//!
//! The CQs of a QP must be of its PD's device, with room for every
//! completion the QP can have outstanding (its queue sizes plus one each
//! for the drain): [`Cq`] counts what its QPs take. Buffers posted on a QP
//! must be mapped for its device, AHs created in its PD, ports among the
//! device's. Anything else is refused with `EINVAL` and a kernel message.
//!
//! # Work requests and buffer lifetimes
//!
//! Every posted work request takes a slot of the QP's send or receive
//! queue. The slot holds an `ib_cqe`, whose `done` records the completion
//! in the slot and wakes the CQ's waiters, and, until the completion has
//! been reaped, the resources the request uses: an `Arc<DmaBuf>` for its
//! local buffer, the memory region it registers. So a buffer cannot be freed
//! while the device may still access it, whatever the caller does.
//! [`Qp::wait`] reaps a completion and releases its slot, given the
//! [`WrId`] the post returned: a `WrId` is used once (it is not `Copy`) and
//! only on its own QP, so one completion is never reaped twice:
//!
//! ```compile_fail,E0382
//! # use kverbs::qp::{Cancel, Qp, Rts, WrId};
//! # use kernel::prelude::*;
//! fn f(qp: &Qp<Rts>, id: WrId, c: &Cancel) -> Result {
//!     qp.wait(id, 100, c)?;
//!     qp.wait(id, 100, c)?; // used
//!     Ok(())
//! }
//! ```
//!
//! The slot of an unsignalled send is released when a later signalled
//! send completes. When the QP is dropped it is drained first (moved to
//! ERR, a marker posted on each queue and its completion waited for, as
//! `ib_drain_qp` does): every outstanding request completes (flushed),
//! then the QP is destroyed and all slots released.
//! The QP holds its CQs and PD, which are thus freed after it:
//! drain, QP, CQ, PD.

use crate::ah::{Ah, AhInner};
use crate::bindings;
use crate::cm::{CmId, CmIdRef};
use crate::cq::{self, Cq};
use crate::device::{Device, Gid, Mtu, PortNum};
use crate::dma::DmaBuf;
use crate::event::{EventQueue, EventSink};
use crate::mr::MrInner;
use crate::pd::Pd;
use crate::srq::Srq;
use crate::stream;
use crate::wc::Wc;
use core::{
    cell::UnsafeCell,
    marker::PhantomData,
    ptr::{self, NonNull},
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
};
use kernel::{
    error::from_err_ptr,
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
    types::Opaque,
};

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
    /// RDMA WRITE to the peer's buffer.
    Write(RemoteBuf),
    /// RDMA WRITE with immediate data.
    WriteWithImm(RemoteBuf, u32),
    /// RDMA READ of the peer's buffer.
    Read(RemoteBuf),
}

impl SendOp {
    /// The request for this operation: opcode, immediate data, remote
    /// address and key; the caller adds the SGEs and the CQE.
    pub(crate) fn rdma_wr(self) -> bindings::ib_rdma_wr {
        let mut wr = bindings::ib_rdma_wr::default();
        let (opcode, imm, remote) = match self {
            SendOp::Send => (bindings::IB_WR_SEND, None, None),
            SendOp::SendWithImm(imm) => (bindings::IB_WR_SEND_WITH_IMM, Some(imm), None),
            SendOp::Write(r) => (bindings::IB_WR_RDMA_WRITE, None, Some(r)),
            SendOp::WriteWithImm(r, imm) => {
                (bindings::IB_WR_RDMA_WRITE_WITH_IMM, Some(imm), Some(r))
            }
            SendOp::Read(r) => (bindings::IB_WR_RDMA_READ, None, Some(r)),
        };
        wr.wr.opcode = opcode;
        if let Some(imm) = imm {
            wr.wr.ex.imm_data = imm.to_be();
        }
        if let Some(r) = remote {
            wr.remote_addr = r.addr;
            wr.rkey = r.rkey;
        }
        wr
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

    fn atomic_wr(self) -> bindings::ib_atomic_wr {
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

/// Cancels the waits of a run from another thread (for instance when the
/// device is being removed).
///
/// [`Cancel::cancel`] ends the waits of one run and is cleared by
/// [`Cancel::reset`] for the next; [`Cancel::close`] is for good: a closed
/// token stays cancelled whatever resets it, so that nothing started after
/// a removal began can make the removal wait.
#[derive(Default)]
pub struct Cancel(AtomicU32);

const CANCEL_NONE: u32 = 0;
const CANCEL_ONCE: u32 = 1;
const CANCEL_CLOSED: u32 = 2;

impl Cancel {
    /// A new, not cancelled, token.
    pub const fn new() -> Self {
        Cancel(AtomicU32::new(CANCEL_NONE))
    }
    /// Cancels: waits return `ECANCELED` within 100 ms.
    pub fn cancel(&self) {
        let _ = self.0.compare_exchange(
            CANCEL_NONE,
            CANCEL_ONCE,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
    /// Cancels for good: [`Cancel::reset`] no longer clears it.
    pub fn close(&self) {
        self.0.store(CANCEL_CLOSED, Ordering::Release);
    }
    /// Clears a [`Cancel::cancel`] for the next run; a closed token stays
    /// closed.
    pub fn reset(&self) {
        let _ = self.0.compare_exchange(
            CANCEL_ONCE,
            CANCEL_NONE,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
    /// Whether it was cancelled (or closed).
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire) != CANCEL_NONE
    }
    /// Whether it was closed.
    pub fn is_closed(&self) -> bool {
        self.0.load(Ordering::Acquire) == CANCEL_CLOSED
    }
    /// `ECANCELED` if cancelled, `EINTR` if the calling task has a signal
    /// pending, else `Ok`: what a loop that polls instead of waiting must
    /// check now and then, as every blocking wait of this crate does.
    pub fn check(&self) -> Result {
        if self.is_cancelled() {
            return Err(crate::errno::ecanceled());
        }
        // SAFETY: Reads the current task's signal state.
        if unsafe { bindings::kverbs_signal_pending() } {
            return Err(EINTR);
        }
        Ok(())
    }
}

/// The queue of a work request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Queue {
    Send,
    Recv,
}

/// Identifies a posted work request, to [`Qp::wait`] for it: once, on the
/// QP that posted it.
#[derive(Debug)]
pub struct WrId {
    /// The address of the QP's `QpInner`, as its identity.
    qp: usize,
    queue: Queue,
    index: usize,
    seq: u64,
}

/// Fault injection of the drain of QPs: `fail_drain` in a debugfs
/// directory, with the kernel's fault attributes (`probability`, `times`,
/// `verbose`...: Documentation/fault-injection). A drain made to fail is
/// one that did not complete: the QP is destroyed and its slots leaked.
/// For tests of that path; needs `CONFIG_FAULT_INJECTION_DEBUG_FS`
/// (`EOPNOTSUPP` otherwise). Removed on drop.
///
/// # Invariants
///
/// `dentry` is the live `fail_drain` directory, in `_dir`.
pub struct DrainFaultInjection {
    dentry: *mut bindings::dentry,
    _dir: crate::debugfs::Dir,
}

// SAFETY: The dentry is only removed, which debugfs allows from any thread.
unsafe impl Send for DrainFaultInjection {}
// SAFETY: `&DrainFaultInjection` gives access to nothing.
unsafe impl Sync for DrainFaultInjection {}

impl DrainFaultInjection {
    /// Creates `fail_drain` in `dir`.
    pub fn new(dir: &crate::debugfs::Dir) -> Result<Self> {
        // SAFETY: `dir` is a live directory.
        let dentry = from_err_ptr(unsafe { bindings::kverbs_fail_drain_create(dir.as_raw()) })?;
        // INVARIANT: just created in `dir`, which we hold.
        Ok(DrainFaultInjection {
            dentry,
            _dir: dir.clone(),
        })
    }
}

impl Drop for DrainFaultInjection {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the directory is live; removing it
        // waits for its files' readers and writers.
        unsafe { bindings::debugfs_remove(self.dentry) };
    }
}

/// What [`Qp::wait_for`] found.
#[derive(Debug)]
pub enum Waited {
    /// The request completed: its completion.
    Done(Wc),
    /// The request is still outstanding: its id, to wait again.
    Pending(WrId),
}

pub(crate) const SLOT_FREE: u32 = 0;
pub(crate) const SLOT_POSTED: u32 = 1;
pub(crate) const SLOT_DONE: u32 = 2;

/// The part of a slot the `done` callback touches.
///
/// # Invariants
///
/// `cqe` is the first field, so a pointer to it is a pointer to the slot.
/// `wc` is written by `done` only while `state` is `SLOT_POSTED`, and read
/// only after `state` was seen `SLOT_DONE` (release/acquire). `qps` is null
/// or the table of the SRQ the slot is of, which outlives the slot.
#[repr(C)]
pub(crate) struct Slot {
    pub(crate) cqe: Opaque<bindings::ib_cqe>,
    pub(crate) state: AtomicU32,
    pub(crate) wc: UnsafeCell<Option<Wc>>,
    qps: *const crate::srq::QpTable,
}

/// What a posted request keeps alive until it is reaped.
#[derive(Default)]
pub(crate) struct SlotRes {
    pub(crate) busy: bool,
    pub(crate) signaled: bool,
    /// Taken by a stream ([`crate::stream`]), never posted through it.
    pub(crate) stream: bool,
    pub(crate) seq: u64,
    pub(crate) _buf: Option<Arc<DmaBuf>>,
    pub(crate) _mr: Option<Arc<MrInner>>,
    pub(crate) ah: Option<Arc<AhInner>>,
}

/// Process-context bookkeeping of the slots.
struct Book {
    send: KVec<SlotRes>,
    recv: KVec<SlotRes>,
    posted_any: bool,
    /// A UD QP's most recent AH, for the marker of its drain.
    last_ah: Option<Arc<AhInner>>,
    /// The multicast groups the QP is attached to.
    mcast: KVec<Gid>,
    /// The shared parts of its streams (their requests name them); a
    /// detached stream leaves a free entry.
    streams: KVec<Option<Arc<stream::Shared>>>,
}

/// # Invariants
///
/// `qp` was created by `ib_create_qp` with `send_cq`, `recv_cq` and `pd`,
/// which the fields keep alive, and is not yet destroyed. The slot arrays
/// are never reallocated; their `ib_cqe`s are the `wr_cqe` of every request
/// posted on `qp`. Each has one slot more than `book`'s: the last, the
/// drain's marker. `events`, if any, is the `qp_context` of `qp`, a leaked
/// [`EventQueue`] reference given back after `qp` is destroyed.
#[pin_data(PinnedDrop)]
struct QpInner {
    qp: NonNull<bindings::ib_qp>,
    events: Option<NonNull<EventQueue>>,
    /// The shared receive queue the QP receives from, if any: it lives
    /// until the QP is destroyed.
    srq: Option<Srq>,
    /// The connection manager ID the QP belongs to, if it was created by
    /// `rdma_create_qp` (then it is destroyed by `rdma_destroy_qp`).
    cm: Option<CmIdRef>,
    ud: bool,
    port: PortNum,
    /// The bytes a send may carry inline.
    max_inline: u32,
    /// The SGEs a request may have on each queue.
    max_send_sge: u32,
    max_recv_sge: u32,
    send_slots: KVec<Slot>,
    recv_slots: KVec<Slot>,
    #[pin]
    book: Mutex<Book>,
    send_cq: CqRoom,
    recv_cq: CqRoom,
    pd: Pd,
}

/// A queue pair of transport `T` ([`Rc`] or [`Ud`]) in state `S`.
pub struct Qp<S: State, T: Transport = Rc> {
    inner: Pin<KBox<QpInner>>,
    _state: PhantomData<(S, T)>,
}

// SAFETY: The QP and its bookkeeping (under a mutex) may be used from any
// thread; the slots are shared with `done` callbacks through atomics.
unsafe impl<S: State, T: Transport> Send for Qp<S, T> {}
// SAFETY: All methods of `&Qp` are thread safe (the verbs are; the
// bookkeeping is locked).
unsafe impl<S: State, T: Transport> Sync for Qp<S, T> {}

/// Completion queue entries a QP takes of a CQ, given back on drop.
struct CqRoom {
    cq: Cq,
    n: u32,
}

impl CqRoom {
    fn take(cq: &Cq, n: u32, dev: &Device) -> Result<Self> {
        if !cq.device().same_as(dev) {
            pr_err!(
                "{}: a QP cannot use a CQ of {}\n",
                dev.name(),
                cq.device().name()
            );
            return Err(EINVAL);
        }
        cq.take_room(n)?;
        Ok(CqRoom { cq: cq.clone(), n })
    }
}

impl Drop for CqRoom {
    fn drop(&mut self) {
        self.cq.give_room(self.n);
    }
}

/// Checks that `port` is a port of `dev`.
pub(crate) fn check_port(dev: &Device, port: PortNum) -> Result {
    if dev.ports().contains(&port) {
        return Ok(());
    }
    pr_err!("{}: no port {}\n", dev.name(), port);
    Err(EINVAL)
}

/// `n` free slots; of the SRQ whose table is `qps`, if any (which must
/// outlive them: keep it with them).
pub(crate) fn new_slots(n: u32, qps: Option<&Arc<crate::srq::QpTable>>) -> Result<KVec<Slot>> {
    let qps = qps.map_or(ptr::null(), |t| &**t as *const _);
    let mut v = KVec::with_capacity(n as usize, GFP_KERNEL)?;
    for _ in 0..n {
        // INVARIANT: `qps` is null or the caller's table, kept with them.
        v.push(
            Slot {
                cqe: Opaque::new(bindings::ib_cqe {
                    done: Some(slot_done),
                }),
                state: AtomicU32::new(SLOT_FREE),
                wc: UnsafeCell::new(None),
                qps,
            },
            GFP_KERNEL,
        )?;
    }
    Ok(v)
}

pub(crate) fn new_res(n: u32) -> Result<KVec<SlotRes>> {
    let mut v = KVec::with_capacity(n as usize, GFP_KERNEL)?;
    for _ in 0..n {
        v.push(SlotRes::default(), GFP_KERNEL)?;
    }
    Ok(v)
}

/// The attribute mask bits of `ib_modify_qp`, named for messages.
const MASK_NAMES: &[(u32, &str)] = &[
    (bindings::IB_QP_STATE, "STATE"),
    (bindings::IB_QP_ACCESS_FLAGS, "ACCESS_FLAGS"),
    (bindings::IB_QP_PKEY_INDEX, "PKEY_INDEX"),
    (bindings::IB_QP_PORT, "PORT"),
    (bindings::IB_QP_QKEY, "QKEY"),
    (bindings::IB_QP_AV, "AV"),
    (bindings::IB_QP_PATH_MTU, "PATH_MTU"),
    (bindings::IB_QP_TIMEOUT, "TIMEOUT"),
    (bindings::IB_QP_RETRY_CNT, "RETRY_CNT"),
    (bindings::IB_QP_RNR_RETRY, "RNR_RETRY"),
    (bindings::IB_QP_RQ_PSN, "RQ_PSN"),
    (bindings::IB_QP_MAX_QP_RD_ATOMIC, "MAX_QP_RD_ATOMIC"),
    (bindings::IB_QP_MIN_RNR_TIMER, "MIN_RNR_TIMER"),
    (bindings::IB_QP_SQ_PSN, "SQ_PSN"),
    (bindings::IB_QP_MAX_DEST_RD_ATOMIC, "MAX_DEST_RD_ATOMIC"),
    (bindings::IB_QP_DEST_QPN, "DEST_QPN"),
    (bindings::IB_QP_ALT_PATH, "ALT_PATH"),
    (bindings::IB_QP_PATH_MIG_STATE, "PATH_MIG_STATE"),
];

/// Writes the names of the bits of `mask`, `|`-separated.
struct MaskNames(u32);

impl core::fmt::Display for MaskNames {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut first = true;
        for (bit, name) in MASK_NAMES {
            if self.0 & bit != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

impl Qp<Reset, Rc> {
    /// Creates an RC QP on `port` of the PD's device, with its completions
    /// on `send_cq` and `recv_cq`, CQs of the same device.
    ///
    /// One more request than asked is allowed on each queue, for the drain;
    /// the CQs must have room for them all (`EINVAL` otherwise).
    pub fn new_rc(
        pd: &Pd,
        port: PortNum,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
    ) -> Result<Self> {
        Self::create(pd, port, send_cq, recv_cq, caps, None, None, None)
    }

    /// [`Qp::new_rc`], with the QP's asynchronous events (fatal errors,
    /// `IB_EVENT_QP_LAST_WQE_REACHED`, path migration, ...) given to
    /// `sink` until the QP is destroyed.
    pub fn new_rc_with_events(
        pd: &Pd,
        port: PortNum,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
        sink: Arc<dyn EventSink>,
    ) -> Result<Self> {
        Self::create(pd, port, send_cq, recv_cq, caps, None, Some(sink), None)
    }

    /// Creates an RC QP that takes its receives from `srq`: its receive
    /// completions go to the SRQ's CQ; it has no receive queue of its own
    /// (`caps.max_recv_wr` is ignored). The SRQ lives at least as long as
    /// the QP. Events as [`Qp::new_rc_with_events`], if `sink` is given.
    pub fn new_rc_srq(
        pd: &Pd,
        port: PortNum,
        send_cq: &Cq,
        srq: &Srq,
        caps: QpCaps,
        sink: Option<Arc<dyn EventSink>>,
    ) -> Result<Self> {
        Self::create(pd, port, send_cq, srq.cq(), caps, None, sink, Some(srq))
    }
}

impl Qp<Reset, Ud> {
    /// Creates a UD QP on `port` of the PD's device, with its completions
    /// on `send_cq` and `recv_cq`, as [`Qp::new_rc`]. Its receives need 40
    /// bytes of room for the GRH before the data ([`GRH_LEN`]).
    pub fn new_ud(
        pd: &Pd,
        port: PortNum,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
    ) -> Result<Self> {
        Self::create(pd, port, send_cq, recv_cq, caps, None, None, None)
    }
}

impl<T: Transport> Qp<Reset, T> {
    /// Creates the QP with `ib_create_qp`, or with `rdma_create_qp` on
    /// `cm`, which then moves it to INIT; its events to `events`, its
    /// receives from `srq`.
    #[allow(clippy::too_many_arguments)]
    fn create(
        pd: &Pd,
        port: PortNum,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
        cm: Option<&CmId>,
        events: Option<Arc<dyn EventSink>>,
        srq: Option<&Srq>,
    ) -> Result<Self> {
        if caps.max_send_wr == 0 || (caps.max_recv_wr == 0 && srq.is_none()) {
            return Err(EINVAL);
        }
        let dev = pd.device();
        check_port(dev, port)?;
        if let Some(srq) = srq {
            srq.check_qp(pd, recv_cq)?;
        }
        let max_send_wr = caps.max_send_wr.checked_add(1).ok_or(EINVAL)?;
        // A QP of an SRQ has no receive queue: the SRQ took its CQ's room.
        let max_recv_wr = match srq {
            Some(_) => 0,
            None => caps.max_recv_wr.checked_add(1).ok_or(EINVAL)?,
        };
        let send_room = CqRoom::take(send_cq, max_send_wr, dev)?;
        let recv_room = CqRoom::take(recv_cq, max_recv_wr, dev)?;
        // One slot more on each queue, the last, for the drain's marker.
        let send_slots = new_slots(max_send_wr, None)?;
        let recv_slots = new_slots(max_recv_wr, None)?;
        let book = Book {
            send: new_res(caps.max_send_wr)?,
            recv: new_res(max_recv_wr.saturating_sub(1))?,
            posted_any: false,
            last_ah: None,
            mcast: KVec::new(),
            streams: KVec::new(),
        };
        let mut init = bindings::ib_qp_init_attr {
            send_cq: send_cq.as_raw(),
            recv_cq: recv_cq.as_raw(),
            sq_sig_type: bindings::IB_SIGNAL_REQ_WR,
            qp_type: T::QP_TYPE,
            ..Default::default()
        };
        init.cap.max_send_wr = max_send_wr;
        init.cap.max_recv_wr = max_recv_wr;
        init.cap.max_send_sge = caps.max_sge.max(1);
        init.cap.max_recv_sge = if srq.is_some() {
            0
        } else {
            caps.max_sge.max(1)
        };
        if let Some(srq) = srq {
            init.srq = srq.as_raw();
        }
        init.cap.max_inline_data = caps.max_inline_data;
        // The sink's queue is the QP's context: given back only after the
        // QP is destroyed (here on failure, else by `QpInner`).
        let events = match events {
            Some(sink) => {
                let q = EventQueue::new_raw(sink)?;
                init.event_handler = Some(crate::event::object_event);
                init.qp_context = q.as_ptr().cast();
                Some(q)
            }
            None => None,
        };
        let free_events = |events: Option<NonNull<EventQueue>>| {
            if let Some(e) = events {
                // SAFETY: From `new_raw` above; the QP that used it is
                // destroyed or was never created.
                unsafe { EventQueue::release(e) };
            }
        };
        let qp = match cm {
            None => {
                // SAFETY: The PD and CQs are live and on the same device
                // (checked by `CqRoom::take`); `init` is a valid, fully
                // initialised attribute set.
                from_err_ptr(unsafe { bindings::ib_create_qp(pd.as_raw(), &mut init) })
            }
            Some(cm) => {
                // SAFETY: As above; the ID is live and has no QP yet (the
                // callers create one QP per ID).
                kernel::error::to_result(unsafe {
                    bindings::rdma_create_qp(cm.as_raw(), pd.as_raw(), &mut init)
                })
                // SAFETY: `rdma_create_qp` stored the new QP in the ID.
                .map(|()| unsafe { (*cm.as_raw()).qp })
            }
        };
        let qp = match qp.and_then(|qp| NonNull::new(qp).ok_or(ENOMEM)) {
            Ok(qp) => qp,
            Err(e) => {
                free_events(events);
                return Err(e);
            }
        };
        let destroy = || {
            // SAFETY: The QP was created above and nothing was posted; the
            // ID, if any, is kept alive by the caller's `cm`.
            unsafe {
                match cm.map(|c| c.as_raw()) {
                    Some(id) => bindings::rdma_destroy_qp(id),
                    None => {
                        bindings::ib_destroy_qp(qp.as_ptr());
                    }
                }
            }
        };
        if let Some(srq) = srq {
            // SAFETY: The QP is live; its number never changes.
            let qpn = unsafe { (*qp.as_ptr()).qp_num };
            if let Err(e) = srq.add_qp(qp.as_ptr(), qpn) {
                destroy();
                free_events(events);
                return Err(e);
            }
        }
        // What the driver gave (it updates the attributes it was passed).
        let max_inline = init.cap.max_inline_data;
        let (max_send_sge, max_recv_sge) = (init.cap.max_send_sge, init.cap.max_recv_sge);
        let cm_ref = cm.map(|c| c.inner());
        let inner = KBox::pin_init(
            try_pin_init!(QpInner {
                qp,
                events,
                srq: srq.cloned(),
                cm: cm_ref,
                ud: T::QP_TYPE == bindings::IB_QPT_UD,
                port,
                max_inline,
                max_send_sge,
                max_recv_sge,
                send_slots,
                recv_slots,
                book <- new_mutex!(book),
                send_cq: send_room,
                recv_cq: recv_room,
                pd: pd.clone(),
            }),
            GFP_KERNEL,
        );
        match inner {
            // INVARIANT: created above with these CQs and PD.
            Ok(inner) => Ok(Qp {
                inner,
                _state: PhantomData,
            }),
            Err(e) => {
                destroy();
                if let Some(srq) = srq {
                    srq.remove_qp(qp.as_ptr());
                }
                free_events(events);
                Err(e)
            }
        }
    }
}

impl Qp<Reset, Ud> {
    /// RESET to INIT, for a UD QP: its Q_Key is `qkey`.
    pub fn to_init_ud(self, pkey_index: u16, qkey: u32) -> Result<Qp<Init, Ud>> {
        let mut a = bindings::ib_qp_attr {
            qp_state: bindings::IB_QPS_INIT,
            pkey_index,
            port_num: self.inner.port,
            qkey,
            ..Default::default()
        };
        let mask = bindings::IB_QP_STATE
            | bindings::IB_QP_PKEY_INDEX
            | bindings::IB_QP_PORT
            | bindings::IB_QP_QKEY;
        self.modify(&mut a, mask)
    }
}

impl Qp<Reset, Rc> {
    /// RESET to INIT.
    pub fn to_init(self, attr: &InitAttr) -> Result<Qp<Init>> {
        let mut a = bindings::ib_qp_attr {
            qp_state: bindings::IB_QPS_INIT,
            pkey_index: attr.pkey_index,
            port_num: self.inner.port,
            qp_access_flags: attr.access.bits() as i32,
            ..Default::default()
        };
        let mask = bindings::IB_QP_STATE
            | bindings::IB_QP_PKEY_INDEX
            | bindings::IB_QP_PORT
            | bindings::IB_QP_ACCESS_FLAGS;
        self.modify(&mut a, mask)
    }
}

impl Qp<Init, Ud> {
    /// INIT to RTR, for a UD QP (no attribute but the state).
    pub fn to_rtr_ud(self) -> Result<Qp<Rtr, Ud>> {
        let mut a = bindings::ib_qp_attr {
            qp_state: bindings::IB_QPS_RTR,
            ..Default::default()
        };
        self.modify(&mut a, bindings::IB_QP_STATE)
    }
}

impl Qp<Init> {
    /// Creates an RC QP for the connection of `cm` (`rdma_create_qp`): the
    /// connection manager moves it to INIT now, and to RTR and RTS when the
    /// connection is established ([`CmId::connect`], [`CmId::accept`]).
    ///
    /// An ID has one QP at a time: `EBUSY` if it has one already.
    pub fn new_cm(cm: &CmId, pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: QpCaps) -> Result<Self> {
        let port = cm.port_num();
        cm.inner().claim_qp()?;
        Qp::<Reset>::create(pd, port, send_cq, recv_cq, caps, Some(cm), None, None)
            .map(Qp::retype)
            .inspect_err(|_| cm.inner().release_qp())
    }

    /// [`Qp::new_cm`], with the QP's events given to `sink` (see
    /// [`Qp::new_rc_with_events`]).
    pub fn new_cm_with_events(
        cm: &CmId,
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        caps: QpCaps,
        sink: Arc<dyn EventSink>,
    ) -> Result<Self> {
        let port = cm.port_num();
        cm.inner().claim_qp()?;
        Qp::<Reset>::create(pd, port, send_cq, recv_cq, caps, Some(cm), Some(sink), None)
            .map(Qp::retype)
            .inspect_err(|_| cm.inner().release_qp())
    }

    /// [`Qp::new_cm`] for a QP that takes its receives from `srq` (see
    /// [`Qp::new_rc_srq`]), its events (`IB_EVENT_QP_LAST_WQE_REACHED` when
    /// it stops taking from the SRQ, ...) given to `sink` if there is one.
    pub fn new_cm_srq(
        cm: &CmId,
        pd: &Pd,
        send_cq: &Cq,
        srq: &Srq,
        caps: QpCaps,
        sink: Option<Arc<dyn EventSink>>,
    ) -> Result<Self> {
        let port = cm.port_num();
        cm.inner().claim_qp()?;
        Qp::<Reset>::create(pd, port, send_cq, srq.cq(), caps, Some(cm), sink, Some(srq))
            .map(Qp::retype)
            .inspect_err(|_| cm.inner().release_qp())
    }

    /// INIT to RTR, for an RC QP.
    pub fn to_rtr(self, attr: &RtrAttr) -> Result<Qp<Rtr>> {
        let dev = self.device();
        let mut a = bindings::ib_qp_attr {
            qp_state: bindings::IB_QPS_RTR,
            path_mtu: attr.path_mtu.raw(),
            dest_qp_num: attr.dest_qp_num,
            rq_psn: attr.rq_psn,
            max_dest_rd_atomic: attr.max_dest_rd_atomic,
            min_rnr_timer: attr.min_rnr_timer,
            ..Default::default()
        };
        a.ah_attr = crate::ah::ah_attr(dev, self.inner.port, &attr.av)?.0;
        let mask = bindings::IB_QP_STATE
            | bindings::IB_QP_AV
            | bindings::IB_QP_PATH_MTU
            | bindings::IB_QP_DEST_QPN
            | bindings::IB_QP_RQ_PSN
            | bindings::IB_QP_MAX_DEST_RD_ATOMIC
            | bindings::IB_QP_MIN_RNR_TIMER;
        self.modify(&mut a, mask)
    }
}

impl Qp<Rtr, Ud> {
    /// RTR to RTS, for a UD QP.
    pub fn to_rts_ud(self, sq_psn: u32) -> Result<Qp<Rts, Ud>> {
        let mut a = bindings::ib_qp_attr {
            qp_state: bindings::IB_QPS_RTS,
            sq_psn,
            ..Default::default()
        };
        self.modify(&mut a, bindings::IB_QP_STATE | bindings::IB_QP_SQ_PSN)
    }
}

impl Qp<Rtr> {
    /// RTR to RTS, for an RC QP.
    pub fn to_rts(self, attr: &RtsAttr) -> Result<Qp<Rts>> {
        let mut a = bindings::ib_qp_attr {
            qp_state: bindings::IB_QPS_RTS,
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            sq_psn: attr.sq_psn,
            max_rd_atomic: attr.max_rd_atomic,
            ..Default::default()
        };
        let mask = bindings::IB_QP_STATE
            | bindings::IB_QP_TIMEOUT
            | bindings::IB_QP_RETRY_CNT
            | bindings::IB_QP_RNR_RETRY
            | bindings::IB_QP_SQ_PSN
            | bindings::IB_QP_MAX_QP_RD_ATOMIC;
        self.modify(&mut a, mask)
    }
}

impl Qp<Rts, Rc> {
    /// Posts a send work request on `len` bytes of `buf` at `offset`: the
    /// data sent or written, or the target of a read.
    ///
    /// An unsignalled request produces no completion if it succeeds; its
    /// slot is released when a later signalled one is reaped.
    pub fn post_send(
        &self,
        op: SendOp,
        buf: &Arc<DmaBuf>,
        offset: usize,
        len: usize,
        signaled: bool,
    ) -> Result<WrId> {
        let mut sges = self.sge_list(Queue::Send, buf, offset, len)?;
        let mut wr = op.rdma_wr();
        wr.wr.sg_list = sges.0.as_mut_ptr();
        wr.wr.num_sge = sges.1;
        let res = SlotRes {
            _buf: Some(buf.clone()),
            ..Default::default()
        };
        // SAFETY: `wr.wr` is the first field of `ib_rdma_wr`, which the
        // device of this RC QP reads for RDMA opcodes; the SGE describes
        // memory mapped for this device that the slot keeps alive.
        unsafe { self.post(Queue::Send, &mut wr.wr, signaled, res) }
    }

    /// Posts an atomic operation; the old value lands in the 8 bytes of
    /// `buf` at `offset`.
    ///
    /// `EOPNOTSUPP` if the device has no atomics (`atomic_cap` NONE);
    /// `EINVAL` for a local offset or remote address not 8-byte aligned,
    /// or a remote buffer under 8 bytes. The peer's QP and memory region
    /// must allow remote atomics ([`Access::REMOTE_ATOMIC`]) and take an
    /// RDMA READ or atomic at once (`max_dest_rd_atomic` >= 1), else the
    /// request completes with a remote access or invalid request error.
    pub fn post_atomic(
        &self,
        op: AtomicOp,
        buf: &Arc<DmaBuf>,
        offset: usize,
        signaled: bool,
    ) -> Result<WrId> {
        let dev = self.device();
        if dev.attrs().atomic_cap() == bindings::IB_ATOMIC_NONE {
            pr_err!("{}: the device has no atomic operations\n", dev.name());
            return Err(crate::errno::eopnotsupp());
        }
        let remote = op.remote();
        if offset % 8 != 0 || remote.addr % 8 != 0 || remote.len < 8 {
            pr_err!(
                "{}: QP {:#x}: an atomic needs 8-byte aligned local offset and remote address and 8 remote bytes (offset {}, remote {:#x}, {} bytes)\n",
                dev.name(),
                self.qp_num(),
                offset,
                remote.addr,
                remote.len
            );
            return Err(EINVAL);
        }
        let mut sges = self.sge_list(Queue::Send, buf, offset, 8)?;
        let mut wr = op.atomic_wr();
        wr.wr.sg_list = sges.0.as_mut_ptr();
        wr.wr.num_sge = sges.1;
        let res = SlotRes {
            _buf: Some(buf.clone()),
            ..Default::default()
        };
        // SAFETY: `wr.wr` is the first field of `ib_atomic_wr`, which the
        // device of this RC QP reads for atomic opcodes; the SGE describes
        // 8 bytes of memory mapped for this device that the slot keeps
        // alive (`sge_list` checked the range). They are 8-byte aligned:
        // `offset` is, and so is the start of the buffer's allocation --
        // `kmalloc` aligns every object to at least 8 bytes
        // (`ARCH_KMALLOC_MINALIGN`) and a chunk of a larger buffer to
        // `CHUNK`; 8 aligned bytes never straddle two chunks.
        unsafe { self.post(Queue::Send, &mut wr.wr, signaled, res) }
    }
}

/// Whether RC QPs on `port` of `dev` can have an alternate path and
/// migrate to it: the device must migrate paths (`IB_DEVICE_AUTO_PATH_MIG`)
/// and the port must be InfiniBand -- the RDMA core refuses alternate
/// paths on RoCE ports (`_ib_modify_qp`: EINVAL), even on devices that
/// advertise migration, as rxe does. `EOPNOTSUPP` otherwise, with a
/// kernel message saying which.
pub fn path_mig_supported(dev: &Device, port: PortNum) -> Result {
    if !dev.attrs().auto_path_mig() {
        pr_err!(
            "{}: the device does not do automatic path migration (no IB_DEVICE_AUTO_PATH_MIG)\n",
            dev.name()
        );
        return Err(crate::errno::eopnotsupp());
    }
    let ll = dev.link_layer(port);
    if ll != crate::device::LinkLayer::InfiniBand {
        pr_err!(
            "{}: port {} is {}: the RDMA core loads alternate paths on InfiniBand ports only\n",
            dev.name(),
            port,
            ll.name()
        );
        return Err(crate::errno::eopnotsupp());
    }
    Ok(())
}

impl Qp<Rts, Rc> {
    /// Loads `alt` as the alternate path and asks the HCA to arm it
    /// (`IB_QP_ALT_PATH | IB_QP_PATH_MIG_STATE`, state REARM), as apm.c
    /// does: the HCA then migrates to it on its own when the primary path
    /// fails (`IB_EVENT_PATH_MIG`), or when told ([`Qp::migrate`]).
    /// `EOPNOTSUPP` where paths do not migrate ([`path_mig_supported`]).
    pub fn load_alt_path(&self, alt: &AltPath) -> Result {
        let dev = self.device();
        path_mig_supported(dev, alt.port)?;
        path_mig_supported(dev, self.port())?;
        let mut a = bindings::ib_qp_attr {
            path_mig_state: bindings::IB_MIG_REARM,
            alt_pkey_index: alt.pkey_index,
            alt_port_num: alt.port,
            alt_timeout: alt.timeout,
            ..Default::default()
        };
        a.alt_ah_attr = crate::ah::ah_attr(dev, alt.port, &alt.av)?.0;
        self.modify_attrs(
            &mut a,
            bindings::IB_QP_ALT_PATH | bindings::IB_QP_PATH_MIG_STATE,
        )
    }

    /// Migrates to the armed alternate path now (`path_mig_state` =
    /// MIGRATED), as apm.c's client does by hand. `EOPNOTSUPP` where paths
    /// do not migrate ([`path_mig_supported`]).
    pub fn migrate(&self) -> Result {
        path_mig_supported(self.device(), self.port())?;
        let mut a = bindings::ib_qp_attr {
            path_mig_state: bindings::IB_MIG_MIGRATED,
            ..Default::default()
        };
        self.modify_attrs(&mut a, bindings::IB_QP_PATH_MIG_STATE)
    }

    /// The QP's primary path (`ib_query_qp`, `IB_QP_AV`): what apm.c loads
    /// as the alternate path.
    pub fn path(&self) -> Result<AddressVector> {
        let mut a = bindings::ib_qp_attr::default();
        let mut init = bindings::ib_qp_init_attr::default();
        // SAFETY: The QP is live; both attribute sets are valid for writes.
        kernel::error::to_result(unsafe {
            bindings::ib_query_qp(
                self.inner.qp.as_ptr(),
                &mut a,
                bindings::IB_QP_AV as i32,
                &mut init,
            )
        })?;
        // SAFETY: `a.ah_attr` was filled in by the query; the GRH of a
        // RoCE or global path is read from it, not kept.
        let grh = unsafe { &*bindings::rdma_ah_read_grh(&a.ah_attr) };
        Ok(AddressVector {
            // SAFETY: Any bytes are a valid GID.
            dgid: Gid(unsafe { grh.dgid.raw }),
            sgid_index: grh.sgid_index,
            hop_limit: grh.hop_limit,
            flow_label: grh.flow_label,
            traffic_class: grh.traffic_class,
            sl: a.ah_attr.sl,
            // SAFETY: `a.ah_attr` was filled in by the query.
            dlid: unsafe { bindings::rdma_ah_get_dlid(&a.ah_attr) } as u16,
        })
    }

    /// The QP's path migration state (`ib_query_qp`).
    pub fn mig_state(&self) -> Result<MigState> {
        let mut a = bindings::ib_qp_attr::default();
        let mut init = bindings::ib_qp_init_attr::default();
        // SAFETY: The QP is live; both attribute sets are valid for writes.
        kernel::error::to_result(unsafe {
            bindings::ib_query_qp(
                self.inner.qp.as_ptr(),
                &mut a,
                bindings::IB_QP_PATH_MIG_STATE as i32,
                &mut init,
            )
        })?;
        Ok(match a.path_mig_state {
            bindings::IB_MIG_MIGRATED => MigState::Migrated,
            bindings::IB_MIG_REARM => MigState::Rearm,
            _ => MigState::Armed,
        })
    }

    /// Changes attributes of the QP in RTS without changing its state.
    fn modify_attrs(&self, a: &mut bindings::ib_qp_attr, mask: u32) -> Result {
        // SAFETY: The QP is live; `a` is valid for the bits of `mask`.
        let ret = unsafe { bindings::ib_modify_qp(self.inner.qp.as_ptr(), a, mask as i32) };
        if ret != 0 {
            pr_err!(
                "{}: modify RC QP {:#x} in RTS failed: error {} (attribute mask {:#x}: {})\n",
                self.device().name(),
                self.qp_num(),
                ret,
                mask,
                MaskNames(mask)
            );
            return Err(Error::from_errno(ret));
        }
        Ok(())
    }
}

impl Qp<Rts, Ud> {
    /// Posts a UD SEND (with immediate data if `imm`) of `len` bytes of
    /// `buf` at `offset` to `dest`. The slot holds the buffer and the AH.
    pub fn post_send_ud(
        &self,
        imm: Option<u32>,
        buf: &Arc<DmaBuf>,
        offset: usize,
        len: usize,
        dest: &UdDest,
        signaled: bool,
    ) -> Result<WrId> {
        buf.check_device(self.device(), "posted here")?;
        if !dest.ah.0.pd().same_as(&self.inner.pd) {
            pr_err!(
                "{}: an AH of another PD cannot be used here\n",
                self.device().name()
            );
            return Err(EINVAL);
        }
        let mut sges = self.sge_list(Queue::Send, buf, offset, len)?;
        let mut wr = bindings::ib_ud_wr {
            ah: dest.ah.0.as_raw(),
            remote_qpn: dest.qpn,
            remote_qkey: dest.qkey,
            ..Default::default()
        };
        wr.wr.opcode = match imm {
            Some(_) => bindings::IB_WR_SEND_WITH_IMM,
            None => bindings::IB_WR_SEND,
        };
        if let Some(imm) = imm {
            wr.wr.ex.imm_data = imm.to_be();
        }
        wr.wr.sg_list = sges.0.as_mut_ptr();
        wr.wr.num_sge = sges.1;
        let res = SlotRes {
            _buf: Some(buf.clone()),
            ah: Some(dest.ah.0.clone()),
            ..Default::default()
        };
        // SAFETY: `wr.wr` is the first field of `ib_ud_wr`, which the device
        // of this UD QP reads; the buffer (mapped for this device) and the
        // AH (of this PD) are kept alive by the slot.
        unsafe { self.post(Queue::Send, &mut wr.wr, signaled, res) }
    }
}

impl Qp<Rts, Rc> {
    /// Posts a REG_MR of `mr`, whose pages are already mapped; the slot keeps
    /// the MR alive until the request is reaped.
    pub(crate) fn post_reg_mr(&self, mr: &Arc<MrInner>, key: u32, access: Access) -> Result<WrId> {
        let mut wr = bindings::ib_reg_wr {
            mr: mr.as_raw(),
            key,
            access: access.bits() as i32,
            ..Default::default()
        };
        wr.wr.opcode = bindings::IB_WR_REG_MR;
        let res = SlotRes {
            _mr: Some(mr.clone()),
            ..Default::default()
        };
        // SAFETY: `wr.wr` is the first field of `ib_reg_wr`; the MR is kept
        // alive by the slot.
        unsafe { self.post(Queue::Send, &mut wr.wr, true, res) }
    }

    /// Posts a LOCAL_INV of `rkey` (of `mr`, kept alive by the slot).
    pub(crate) fn post_local_inv(&self, mr: &Arc<MrInner>, rkey: u32) -> Result<WrId> {
        let mut wr = bindings::ib_send_wr {
            opcode: bindings::IB_WR_LOCAL_INV,
            ..Default::default()
        };
        wr.ex.invalidate_rkey = rkey;
        let res = SlotRes {
            _mr: Some(mr.clone()),
            ..Default::default()
        };
        // SAFETY: A LOCAL_INV has no SGE; the MR is kept alive by the slot.
        unsafe { self.post(Queue::Send, &mut wr, true, res) }
    }
}

impl<S: CanPostRecv, T: Transport> Qp<S, T> {
    /// Posts a receive into `len` bytes of `buf` at `offset`.
    pub fn post_recv(&self, buf: &Arc<DmaBuf>, offset: usize, len: usize) -> Result<WrId> {
        if self.inner.srq.is_some() {
            pr_err!(
                "{}: QP {:#x} receives from an SRQ: post receives to the SRQ\n",
                self.device().name(),
                self.qp_num()
            );
            return Err(EINVAL);
        }
        let mut sges = self.sge_list(Queue::Recv, buf, offset, len)?;
        let res = SlotRes {
            _buf: Some(buf.clone()),
            ..Default::default()
        };
        let inner = &self.inner;
        let mut book = inner.book.lock();
        let book = &mut *book;
        let (index, seq) = reserve(&mut book.recv, &inner.recv_slots, true, res)?;
        let mut wr = bindings::ib_recv_wr {
            sg_list: sges.0.as_mut_ptr(),
            num_sge: sges.1,
            ..Default::default()
        };
        wr.__bindgen_anon_1.wr_cqe = inner.recv_slots[index].cqe.get();
        let mut bad = ptr::null();
        // SAFETY: The QP is live; `wr` points to a mapped buffer the slot
        // keeps alive, and to the slot's `ib_cqe`.
        let ret = unsafe { bindings::ib_post_recv(inner.qp.as_ptr(), &wr, &mut bad) };
        if ret != 0 {
            unreserve(&mut book.recv, &inner.recv_slots, index);
            return Err(Error::from_errno(ret));
        }
        book.posted_any = true;
        Ok(WrId {
            qp: inner.id(),
            queue: Queue::Recv,
            index,
            seq,
        })
    }
}

/// Takes a free slot of `res`/`slots` for a request; returns its index and
/// sequence number.
pub(crate) fn reserve(
    res: &mut KVec<SlotRes>,
    slots: &KVec<Slot>,
    signaled: bool,
    new: SlotRes,
) -> Result<(usize, u64)> {
    let index = res.iter().position(|r| !r.busy).ok_or(ENOSPC)?;
    // Unique across all QPs, so that no `WrId` ever matches another
    // request, even of a QP at the address of a dropped one.
    static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);
    let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
    res[index] = SlotRes {
        busy: true,
        signaled,
        seq,
        ..new
    };
    // SAFETY: The slot is free (not posted), so `done` does not touch it.
    unsafe { *slots[index].wc.get() = None };
    slots[index].state.store(SLOT_POSTED, Ordering::Release);
    Ok((index, seq))
}

/// Gives back a slot whose request was not posted.
pub(crate) fn unreserve(res: &mut KVec<SlotRes>, slots: &KVec<Slot>, index: usize) {
    res[index] = SlotRes::default();
    slots[index].state.store(SLOT_FREE, Ordering::Release);
}

impl<S: State, T: Transport> Qp<S, T> {
    /// The same QP in the state `N` that something else (the connection
    /// manager) moved it to.
    pub(crate) fn retype<N: State>(self) -> Qp<N, T> {
        Qp {
            inner: self.inner,
            _state: PhantomData,
        }
    }

    fn modify<N: State>(self, attr: &mut bindings::ib_qp_attr, mask: u32) -> Result<Qp<N, T>> {
        // SAFETY: The QP is live; `attr` is valid for the bits of `mask`.
        let ret = unsafe { bindings::ib_modify_qp(self.inner.qp.as_ptr(), attr, mask as i32) };
        if ret != 0 {
            pr_err!(
                "{}: modify {} QP {} {} -> {} failed: error {} (attribute mask {:#x}: {})\n",
                self.device().name(),
                T::NAME,
                self.qp_num(),
                S::NAME,
                N::NAME,
                ret,
                mask,
                MaskNames(mask)
            );
            return Err(Error::from_errno(ret));
        }
        Ok(Qp {
            inner: self.inner,
            _state: PhantomData,
        })
    }

    /// Any state to ERR: outstanding requests complete, flushed.
    pub fn to_error(self) -> Result<Qp<ErrorState, T>> {
        let mut a = bindings::ib_qp_attr {
            qp_state: bindings::IB_QPS_ERR,
            ..Default::default()
        };
        self.modify(&mut a, bindings::IB_QP_STATE)
    }

    /// The bytes a send may carry inline, as the driver set them when the
    /// QP was created (at least what [`QpCaps::max_inline_data`] asked).
    pub fn max_inline_data(&self) -> u32 {
        self.inner.max_inline
    }

    /// The SGEs a request on queue `q` may have.
    pub(crate) fn max_sge(&self, q: Queue) -> u32 {
        match q {
            Queue::Send => self.inner.max_send_sge,
            Queue::Recv => self.inner.max_recv_sge,
        }
    }

    /// Checks that a request on queue `q` may name `len` bytes of `buf` at
    /// `offset` (a buffer of this device, a range within it, no more SGEs
    /// than the QP takes), and the number of SGEs it takes.
    pub(crate) fn check_range(
        &self,
        q: Queue,
        buf: &DmaBuf,
        offset: usize,
        len: usize,
    ) -> Result<u32> {
        buf.check_device(self.device(), "posted here")?;
        buf.check(offset, len)?;
        let n = buf.sge_count(offset, len) as u32;
        if n > self.max_sge(q) {
            pr_err!(
                "{}: QP {:#x}: a request on {} bytes at {} takes {} SGEs, the QP {}\n",
                self.device().name(),
                self.qp_num(),
                len,
                offset,
                n,
                self.max_sge(q)
            );
            return Err(EINVAL);
        }
        Ok(n)
    }

    /// The SGEs of a request on queue `q` on `len` bytes of `buf` at
    /// `offset` (see [`Qp::check_range`]), and how many there are.
    fn sge_list(
        &self,
        q: Queue,
        buf: &DmaBuf,
        offset: usize,
        len: usize,
    ) -> Result<([bindings::ib_sge; crate::dma::MAX_SGES], i32)> {
        let n = self.check_range(q, buf, offset, len)?;
        let mut sges = [bindings::ib_sge::default(); crate::dma::MAX_SGES];
        for (d, s) in
            sges.iter_mut()
                .zip(buf.sges(offset, len, self.inner.pd.local_dma_lkey(), false))
        {
            *d = s;
        }
        Ok((sges, n as i32))
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: The QP is live; its number never changes.
        unsafe { (*self.inner.qp.as_ptr()).qp_num }
    }

    /// The device.
    pub fn device(&self) -> &Device {
        self.inner.pd.device()
    }

    /// The PD.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    /// The port.
    pub fn port(&self) -> PortNum {
        self.inner.port
    }

    /// Whether the QP was created on the connection manager ID `cm`.
    pub(crate) fn cm_id_is(&self, cm: &CmIdRef) -> bool {
        self.inner.cm.as_ref().is_some_and(|c| Arc::ptr_eq(c, cm))
    }
}

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
        // SAFETY: Shrinking drops nothing (`Gid` is `Copy`) and `last` is
        // in bounds.
        unsafe { book.mcast.set_len(last) };
        Ok(())
    }

    /// The multicast groups the QP is attached to.
    pub fn mcast_groups(&self) -> Result<KVec<Gid>> {
        let book = self.inner.book.lock();
        let mut v = KVec::with_capacity(book.mcast.len(), GFP_KERNEL)?;
        v.extend_from_slice(&book.mcast, GFP_KERNEL)?;
        Ok(v)
    }
}

impl<S: State, T: Transport> Qp<S, T> {
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_qp {
        self.inner.qp.as_ptr()
    }

    pub(crate) fn send_cq(&self) -> &Cq {
        &self.inner.send_cq.cq
    }

    pub(crate) fn recv_cq(&self) -> &Cq {
        &self.inner.recv_cq.cq
    }

    /// Takes `n` free slots of the receive (`recv`) or send queue for a
    /// stream, and keeps `shared` until the QP is destroyed or the stream
    /// detaches. `ENOSPC` if fewer slots are free.
    pub(crate) fn attach_stream(&self, recv: bool, n: u32, shared: &Arc<stream::Shared>) -> Result {
        let mut book = self.inner.book.lock();
        let book = &mut *book;
        let res = if recv { &mut book.recv } else { &mut book.send };
        if res.iter().filter(|r| !r.busy).count() < n as usize {
            pr_err!(
                "{}: QP {:#x}: a stream of {} needs as many free {} slots\n",
                self.device().name(),
                self.qp_num(),
                n,
                if recv { "receive" } else { "send" }
            );
            return Err(ENOSPC);
        }
        match book.streams.iter_mut().find(|s| s.is_none()) {
            Some(free) => *free = Some(shared.clone()),
            None => book.streams.push(Some(shared.clone()), GFP_KERNEL)?,
        }
        for r in res.iter_mut().filter(|r| !r.busy).take(n as usize) {
            *r = SlotRes {
                busy: true,
                signaled: true,
                stream: true,
                ..Default::default()
            };
        }
        book.posted_any = true;
        Ok(())
    }

    /// Gives back what [`Qp::attach_stream`] took, for a stream with
    /// nothing outstanding.
    pub(crate) fn detach_stream(&self, recv: bool, n: u32, shared: &Arc<stream::Shared>) {
        let mut book = self.inner.book.lock();
        let book = &mut *book;
        if let Some(s) = book
            .streams
            .iter_mut()
            .find(|s| s.as_ref().is_some_and(|s| ptr::eq(&**s, &**shared)))
        {
            *s = None;
        }
        let res = if recv { &mut book.recv } else { &mut book.send };
        for r in res.iter_mut().filter(|r| r.stream).take(n as usize) {
            *r = SlotRes::default();
        }
    }

    /// Posts `wr` on `queue` with a slot holding `res`.
    ///
    /// # Safety
    ///
    /// `wr` (and, for RDMA and REG_MR opcodes, the larger request it is the
    /// head of) must be a valid work request for this QP whose memory is
    /// kept alive by `res` or is owned by the device.
    unsafe fn post(
        &self,
        queue: Queue,
        wr: &mut bindings::ib_send_wr,
        signaled: bool,
        res: SlotRes,
    ) -> Result<WrId> {
        debug_assert!(queue == Queue::Send);
        let inner = &self.inner;
        let mut book = inner.book.lock();
        let book = &mut *book;
        if let Some(ah) = &res.ah {
            book.last_ah = Some(ah.clone());
        }
        let (index, seq) = reserve(&mut book.send, &inner.send_slots, signaled, res)?;
        wr.__bindgen_anon_1.wr_cqe = inner.send_slots[index].cqe.get();
        if signaled {
            wr.send_flags |= bindings::IB_SEND_SIGNALED;
        }
        let mut bad = ptr::null();
        // SAFETY: The QP is live; the caller guarantees `wr` is valid.
        let ret = unsafe { bindings::ib_post_send(inner.qp.as_ptr(), wr, &mut bad) };
        if ret != 0 {
            unreserve(&mut book.send, &inner.send_slots, index);
            return Err(Error::from_errno(ret));
        }
        book.posted_any = true;
        Ok(WrId {
            qp: inner.id(),
            queue,
            index,
            seq,
        })
    }

    /// Waits for the completion of `id`, at most `timeout_ms`, and releases
    /// its slot. Fails with `ETIMEDOUT`, with `EINTR` on a signal, with
    /// `ECANCELED` if `cancel` is cancelled, with `EINVAL` for a request of
    /// another QP or one already released (an unsignalled send, released
    /// with a later signalled one). After a failed wait the request is
    /// still outstanding: it is flushed when the QP is dropped.
    pub fn wait(&self, id: WrId, timeout_ms: u32, cancel: &Cancel) -> Result<Wc> {
        match self.wait_for(id, timeout_ms, cancel)? {
            Waited::Done(wc) => Ok(wc),
            Waited::Pending(_) => Err(crate::errno::etimedout()),
        }
    }

    /// As [`Qp::wait`], but a request not complete after `timeout_ms` is
    /// given back ([`Waited::Pending`]) to be waited for again.
    pub fn wait_for(&self, id: WrId, timeout_ms: u32, cancel: &Cancel) -> Result<Waited> {
        let inner = &self.inner;
        if id.qp != inner.id() {
            pr_err!(
                "{}: QP {}: a work request of another QP\n",
                self.device().name(),
                self.qp_num()
            );
            return Err(EINVAL);
        }
        let (slots, cq) = match id.queue {
            Queue::Send => (&inner.send_slots, &inner.send_cq.cq),
            Queue::Recv => (&inner.recv_slots, &inner.recv_cq.cq),
        };
        let slot = slots.get(id.index).ok_or(EINVAL)?;
        // Whether `id`'s request still holds its slot. A `WrId` is used once,
        // but an unsignalled send's slot is released by the wait of a later
        // signalled one, and may be taken again by another request.
        let holds = |book: &Book| {
            let res = match id.queue {
                Queue::Send => &book.send[id.index],
                Queue::Recv => &book.recv[id.index],
            };
            res.busy && res.seq == id.seq
        };
        if !holds(&inner.book.lock()) {
            return Err(EINVAL);
        }
        let deadline = crate::Deadline::new(timeout_ms, cancel);
        while slot.state.load(Ordering::Acquire) != SLOT_DONE {
            if let Err(e) = deadline.check() {
                if e.to_errno() == crate::errno::etimedout().to_errno() {
                    return Ok(Waited::Pending(id));
                }
                return Err(e);
            }
            let slice = (deadline.left_ns() / 1_000_000).clamp(1, 100) as u32;
            cq.wait_step(&slot.state, SLOT_DONE, slice);
        }
        let mut book = inner.book.lock();
        // The slot may have been released and taken again since it was seen
        // done: only if it still holds `id`'s request is the completion ours.
        if !holds(&book) || slot.state.load(Ordering::Acquire) != SLOT_DONE {
            return Err(EINVAL);
        }
        // SAFETY: `SLOT_DONE` was observed with acquire ordering, after
        // `done` wrote `wc` (type invariant of `Slot`); the slot cannot be
        // taken again, and so written again, while we hold the lock.
        let wc = unsafe { *slot.wc.get() }.ok_or(EIO)?;
        let book = &mut *book;
        let (res, slots) = match id.queue {
            Queue::Send => (&mut book.send, &inner.send_slots),
            Queue::Recv => (&mut book.recv, &inner.recv_slots),
        };
        // Unsignalled sends posted before this one have completed too.
        if id.queue == Queue::Send {
            for (i, r) in res.iter_mut().enumerate() {
                if r.busy && !r.signaled && r.seq < id.seq {
                    *r = SlotRes::default();
                    slots[i].state.store(SLOT_FREE, Ordering::Release);
                }
            }
        }
        res[id.index] = SlotRes::default();
        slots[id.index].state.store(SLOT_FREE, Ordering::Release);
        Ok(Waited::Done(wc))
    }
}

/// The `done` function of every kverbs work request.
///
/// # Safety
///
/// Called by the RDMA core with a completion of a request posted by
/// [`Qp::post`] or [`Qp::post_recv`], whose `wr_cqe` is a slot's `cqe`.
unsafe extern "C" fn slot_done(cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: `wc` is valid during the call; `wr_cqe` is a slot's first
    // field (type invariant of `Slot`). The slot is live: slots are freed
    // only after the drain's markers were seen done (or leaked), and the
    // `done` calls of one CQ run one at a time, in the CQ's order -- by the
    // core's softirq or workqueue poller, or by the one task that holds a
    // direct CQ (`Cq::process_direct`) -- so every completion queued before
    // a marker has had its `done` return before the marker's runs.
    let (slot, wc) = unsafe { (&*(*wc).__bindgen_anon_1.wr_cqe.cast::<Slot>(), &*wc) };
    let mut wc = Wc::from_raw(wc);
    if !slot.qps.is_null() {
        // SAFETY: The table of the slot's SRQ outlives the slot (type
        // invariant of `Slot`).
        wc.qp_num = unsafe { (*slot.qps).qp_num(wc.qp_raw) };
    }
    // SAFETY: The slot is posted: only this completion writes `wc`, and the
    // waiter reads it after the release store below.
    unsafe { *slot.wc.get() = Some(wc) };
    slot.state.store(SLOT_DONE, Ordering::Release);
    // SAFETY: `cq` is a kverbs CQ, inside its `done` callback.
    unsafe { cq::wake_waiters(cq) };
}

impl QpInner {
    /// The identity of the QP in [`WrId`]s: the address of its pinned
    /// `QpInner`.
    fn id(&self) -> usize {
        ptr::from_ref(self) as usize
    }

    /// Drains the QP: moves it to ERR, posts a marker on each queue and
    /// waits (5 s at most each) for the markers' completions, which come
    /// after every request posted before them has completed, flushed.
    /// Returns whether both came.
    ///
    /// Not `ib_drain_qp`: it cannot say whether it drained (it returns early
    /// with only a WARN when its modify or post fails), and its send marker,
    /// an RDMA WRITE, is refused by UD QPs. A device with drain functions of
    /// its own (mlx4, mlx5) is drained by them, as the core does; they
    /// process a directly polled CQ themselves, so this task holds such CQs
    /// meanwhile (see [`Cq::process_direct`]).
    fn drain(&self, last_ah: Option<&Arc<AhInner>>) -> bool {
        let qp = self.qp.as_ptr();
        // SAFETY: Reads the fault attribute (`DrainFaultInjection`).
        if unsafe { bindings::kverbs_should_fail_drain() } {
            pr_err!("QP {:#x} drain: failed by fault injection\n", self.qp_num());
            return false;
        }
        let dev = self.pd.device().as_raw();
        // SAFETY: The device is live; its ops are set before registration.
        let (drv_sq, drv_rq) = unsafe { ((*dev).ops.drain_sq, (*dev).ops.drain_rq) };
        if drv_sq.is_some() || drv_rq.is_some() {
            let _held = Cq::hold_direct(&self.send_cq.cq, &self.recv_cq.cq);
            // SAFETY: The QP is live; the driver's drain waits for it, and
            // processes a direct CQ only while this task holds it.
            unsafe { bindings::ib_drain_qp(qp) };
            return true;
        }
        let mut a = bindings::ib_qp_attr {
            qp_state: bindings::IB_QPS_ERR,
            ..Default::default()
        };
        // SAFETY: The QP is live; any state may go to ERR.
        let ret = unsafe { bindings::ib_modify_qp(qp, &mut a, bindings::IB_QP_STATE as i32) };
        if ret != 0 {
            pr_err!(
                "QP {:#x} drain: modify to ERR failed: {}\n",
                self.qp_num(),
                ret
            );
            return false;
        }
        // The send marker: a zero-length RDMA WRITE on RC (as `ib_drain_sq`
        // posts), a SEND to the last AH used on UD. A UD QP that never sent
        // has nothing in its send queue to wait for.
        let send_marker = self.send_slots.last();
        let sq = match (send_marker, self.ud, last_ah) {
            (Some(m), false, _) => {
                let mut wr = bindings::ib_rdma_wr::default();
                wr.wr.opcode = bindings::IB_WR_RDMA_WRITE;
                // SAFETY: The marker is the last slot, never given to a
                // request (`book` has one slot less); it is not posted.
                unsafe { self.post_marker_send(m, &mut wr.wr) }
            }
            (Some(m), true, Some(ah)) => {
                let mut wr = bindings::ib_ud_wr {
                    ah: ah.as_raw(),
                    ..Default::default()
                };
                wr.wr.opcode = bindings::IB_WR_SEND;
                // SAFETY: As above; the caller holds the AH until the QP
                // is destroyed, so even a marker that did not complete
                // names a live AH.
                unsafe { self.post_marker_send(m, &mut wr.wr) }
            }
            _ => true,
        };
        let rq = match self.recv_slots.last() {
            Some(m) => {
                let mut wr = bindings::ib_recv_wr::default();
                wr.__bindgen_anon_1.wr_cqe = m.cqe.get();
                m.state.store(SLOT_POSTED, Ordering::Release);
                let mut bad = ptr::null();
                // SAFETY: The QP is live; the marker has no SGE; its slot
                // is the last, never given to a request.
                let ret = unsafe { bindings::ib_post_recv(qp, &wr, &mut bad) };
                if ret != 0 {
                    pr_err!(
                        "QP {:#x} drain: posting the receive marker failed: {}\n",
                        self.qp_num(),
                        ret
                    );
                    false
                } else {
                    self.wait_marker(m, &self.recv_cq.cq, "receive")
                }
            }
            None => {
                if let Some(srq) = &self.srq {
                    self.drain_srq(srq);
                }
                true
            }
        };
        sq && rq
    }

    /// The receive side of the drain of a QP of an SRQ, which has no
    /// receive queue to put a marker on: as the verbs advise (and
    /// `__ib_drain_srq` does), waits for the QP's last receive
    /// (`IB_EVENT_QP_LAST_WQE_REACHED`, up to 5 s), then processes what a
    /// directly polled SRQ CQ holds, so that the completions of this QP
    /// are named by its number while it is still in the SRQ's table. The
    /// SRQ's slots are the SRQ's: nothing is freed under them either way.
    fn drain_srq(&self, srq: &Srq) {
        // SAFETY: The QP is live and in ERR; the core completes its
        // `srq_completion` on that event.
        if !unsafe { bindings::kverbs_qp_wait_last_wqe(self.qp.as_ptr(), 5000) } {
            pr_warn!(
                "QP {:#x} drain: no last-WQE-reached event in 5 s\n",
                self.qp_num()
            );
            return;
        }
        while srq.cq().process_direct(64) > 0 {}
    }

    /// Posts `wr`, signalled, with the marker slot `m`, and waits for it.
    ///
    /// # Safety
    ///
    /// `m` must be a marker slot of this QP that is not posted; `wr` must be
    /// a valid send request for this QP, with no SGE, whose memory (an AH)
    /// lives until `m` is done.
    unsafe fn post_marker_send(&self, m: &Slot, wr: &mut bindings::ib_send_wr) -> bool {
        wr.send_flags = bindings::IB_SEND_SIGNALED;
        wr.__bindgen_anon_1.wr_cqe = m.cqe.get();
        m.state.store(SLOT_POSTED, Ordering::Release);
        let mut bad = ptr::null();
        // SAFETY: The QP is live; the caller guarantees `wr`.
        let ret = unsafe { bindings::ib_post_send(self.qp.as_ptr(), wr, &mut bad) };
        if ret != 0 {
            pr_err!(
                "QP {:#x} drain: posting the send marker failed: {}\n",
                self.qp_num(),
                ret
            );
            return false;
        }
        self.wait_marker(m, &self.send_cq.cq, "send")
    }

    /// Waits up to 5 s for the marker `m` on `cq`. Signals do not end the
    /// wait: a task being killed drops its QPs, and a wait that returned at
    /// once would spin (and, with the flush's worker on the same CPU, never
    /// see it), fail the drain and leak.
    fn wait_marker(&self, m: &Slot, cq: &Cq, queue: &str) -> bool {
        let cancel = Cancel::new();
        let deadline = crate::Deadline::new(5000, &cancel);
        while m.state.load(Ordering::Acquire) != SLOT_DONE && deadline.left_ns() > 0 {
            let slice = (deadline.left_ns() / 1_000_000).clamp(1, 100) as u32;
            cq.wait_step_as(&m.state, SLOT_DONE, slice, false);
        }
        if m.state.load(Ordering::Acquire) != SLOT_DONE {
            pr_err!(
                "QP {:#x} drain: the {} queue did not flush in 5 s\n",
                self.qp_num(),
                queue
            );
            return false;
        }
        true
    }

    fn qp_num(&self) -> u32 {
        // SAFETY: The QP is live; its number never changes.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }
}

/// Leaks `v` on purpose (memory a device or a CQ may still reach) and tells
/// kmemleak, which still scans it, so that what it points to is not
/// reported either.
pub(crate) fn leak<T>(v: KVec<T>) {
    let (ptr, _, cap) = v.into_raw_parts();
    if cap > 0 && core::mem::size_of::<T>() > 0 {
        // SAFETY: Plain annotation of a live allocation.
        unsafe { bindings::kverbs_kmemleak_not_leak(ptr.cast()) };
    }
}

#[pinned_drop]
impl PinnedDrop for QpInner {
    fn drop(self: Pin<&mut Self>) {
        let qp = self.qp.as_ptr();
        let (posted_any, last_ah, groups, streams) = {
            let mut book = self.book.lock();
            (
                book.posted_any,
                book.last_ah.clone(),
                core::mem::take(&mut book.mcast),
                core::mem::take(&mut book.streams),
            )
        };
        for g in groups.iter() {
            let mut gid = bindings::ib_gid { raw: g.0 };
            // SAFETY: The QP is live and attached to the group.
            unsafe { bindings::ib_detach_mcast(qp, &mut gid, 0) };
        }
        // `last_ah` lives until the QP is destroyed: a send marker that did
        // not complete still names it.
        // A QP of an SRQ may have taken receives without ever posting: it
        // is always drained (its last receive waited for).
        let drained = (!posted_any && self.srq.is_none()) || self.drain(last_ah.as_ref());
        // Read now: the QP is freed by its destruction.
        let qpn = self.qp_num();
        let events = self.events;
        // SAFETY: The QP is live; if it was drained, the device no longer
        // uses it or any memory its requests named. A QP of a connection
        // manager ID is destroyed through the ID, which `cm` keeps alive
        // until after.
        unsafe {
            match &self.cm {
                Some(cm) => {
                    bindings::rdma_destroy_qp(cm.as_raw());
                    cm.release_qp();
                }
                None => {
                    bindings::ib_destroy_qp(qp);
                }
            }
        }
        if let Some(srq) = &self.srq {
            srq.remove_qp(qp);
        }
        if !drained {
            // The QP is destroyed: the device no longer uses it or the
            // memory of its requests, which is released below. But
            // completions of requests that did not flush may still be in
            // the CQ, which outlives the QP, and reach their slots when it
            // is polled: the slot arrays are leaked, never freed under a
            // `done` call (and marked for kmemleak as leaked on purpose).
            pr_err!(
                "{}: QP {:#x} was not drained: its {} slots are leaked\n",
                self.pd.device().name(),
                qpn,
                self.send_slots.len() + self.recv_slots.len()
            );
            // SAFETY: Only fields that are not structurally pinned (the slot
            // arrays) are moved out.
            let this = unsafe { self.get_unchecked_mut() };
            for slots in [&mut this.send_slots, &mut this.recv_slots] {
                leak(core::mem::replace(slots, KVec::new()));
            }
        }
        // The QP is destroyed: the device no longer touches the streams'
        // buffers, which are released now, drained or not, so that no
        // reference to the device is left behind.
        for s in streams.iter().flatten() {
            s.release_bufs();
        }
        if drained {
            drop(streams);
        } else {
            // As the slots: their CQEs may still be reached by completions
            // in the CQ; only that memory is leaked.
            leak(streams);
        }
        drop(last_ah);
        if let Some(e) = events {
            // SAFETY: By the type invariant, the queue's reference of the
            // QP, which is destroyed: no event comes any more.
            unsafe { EventQueue::release(e) };
        }
        // The slots' resources (buffers, MRs) and then the CQs and PD are
        // released as the fields drop.
    }
}
