// SPDX-License-Identifier: GPL-2.0

//! Work completions.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use crate::bindings;
use core::fmt;

macro_rules! wc_status {
    ($($variant:ident = $c:ident, $msg:literal;)*) => {
        /// The status of a work completion (`enum ib_wc_status`).
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        pub enum WcStatus {
            $(
                #[doc = $msg]
                $variant,
            )*
            /// A status this kernel does not know.
            Unknown(u32),
        }

        impl WcStatus {
            pub(crate) fn from_raw(raw: u32) -> Self {
                match raw {
                    $(bindings::$c => WcStatus::$variant,)*
                    other => WcStatus::Unknown(other),
                }
            }

            /// What the status means, as `ib_wc_status_msg()` words it.
            pub fn msg(self) -> &'static str {
                match self {
                    $(WcStatus::$variant => $msg,)*
                    WcStatus::Unknown(_) => "unrecognized status",
                }
            }
        }
    };
}

wc_status! {
    Success = IB_WC_SUCCESS, "success";
    LocLenErr = IB_WC_LOC_LEN_ERR, "local length error";
    LocQpOpErr = IB_WC_LOC_QP_OP_ERR, "local QP operation error";
    LocEecOpErr = IB_WC_LOC_EEC_OP_ERR, "local EE context operation error";
    LocProtErr = IB_WC_LOC_PROT_ERR, "local protection error";
    WrFlushErr = IB_WC_WR_FLUSH_ERR, "WR flushed";
    MwBindErr = IB_WC_MW_BIND_ERR, "memory bind operation error";
    BadRespErr = IB_WC_BAD_RESP_ERR, "bad response error";
    LocAccessErr = IB_WC_LOC_ACCESS_ERR, "local access error";
    RemInvReqErr = IB_WC_REM_INV_REQ_ERR, "remote invalid request error";
    RemAccessErr = IB_WC_REM_ACCESS_ERR, "remote access error";
    RemOpErr = IB_WC_REM_OP_ERR, "remote operation error";
    RetryExcErr = IB_WC_RETRY_EXC_ERR, "transport retry counter exceeded";
    RnrRetryExcErr = IB_WC_RNR_RETRY_EXC_ERR, "RNR retry counter exceeded";
    LocRddViolErr = IB_WC_LOC_RDD_VIOL_ERR, "local RDD violation error";
    RemInvRdReqErr = IB_WC_REM_INV_RD_REQ_ERR, "remote invalid RD request";
    RemAbortErr = IB_WC_REM_ABORT_ERR, "operation aborted";
    InvEecnErr = IB_WC_INV_EECN_ERR, "invalid EE context number";
    InvEecStateErr = IB_WC_INV_EEC_STATE_ERR, "invalid EE context state";
    FatalErr = IB_WC_FATAL_ERR, "fatal error";
    RespTimeoutErr = IB_WC_RESP_TIMEOUT_ERR, "response timeout error";
    GeneralErr = IB_WC_GENERAL_ERR, "general error";
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.msg())
    }
}
crate::kernel_display!(WcStatus);

/// What a completed work request was (`enum ib_wc_opcode`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WcOpcode {
    /// SEND.
    Send,
    /// RDMA WRITE.
    RdmaWrite,
    /// RDMA READ.
    RdmaRead,
    /// Memory registration (REG_MR).
    RegMr,
    /// Local invalidate.
    LocalInv,
    /// Compare and swap.
    CompSwap,
    /// Fetch and add.
    FetchAdd,
    /// A receive.
    Recv,
    /// A receive of an RDMA WRITE with immediate data.
    RecvRdmaWithImm,
    /// Something else.
    Other(u32),
}

impl WcOpcode {
    pub(crate) fn from_raw(raw: u32) -> Self {
        match raw {
            bindings::IB_WC_SEND => WcOpcode::Send,
            bindings::IB_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            bindings::IB_WC_RDMA_READ => WcOpcode::RdmaRead,
            bindings::IB_WC_REG_MR => WcOpcode::RegMr,
            bindings::IB_WC_COMP_SWAP => WcOpcode::CompSwap,
            bindings::IB_WC_FETCH_ADD => WcOpcode::FetchAdd,
            bindings::IB_WC_LOCAL_INV => WcOpcode::LocalInv,
            bindings::IB_WC_RECV => WcOpcode::Recv,
            bindings::IB_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            other => WcOpcode::Other(other),
        }
    }
}

/// A work completion.
///
/// The opcode of a completion in error is undefined (the verbs say so), so
/// only look at it when [`Wc::status`] is [`WcStatus::Success`].
#[derive(Clone, Copy, Debug)]
pub struct Wc {
    /// The status.
    pub status: WcStatus,
    /// The operation.
    pub opcode: WcOpcode,
    /// Bytes received (receives) or transferred.
    pub byte_len: u32,
    /// Immediate data, host order, if the completion carries some.
    pub imm: Option<u32>,
    /// The source QP number (UD receives).
    pub src_qp: u32,
    /// The number of the QP a receive from a shared receive queue came in
    /// on (see [`crate::srq::Srq::wait`]); 0 otherwise.
    pub qp_num: u32,
    /// The address of the completion's `ib_qp`, never dereferenced (the QP
    /// may be gone): matched against live QPs by [`crate::srq::Srq`].
    pub(crate) qp_raw: usize,
    /// The vendor error code of a failed completion.
    pub vendor_err: u32,
    /// A receive of a SEND with invalidate: the rkey the peer invalidated
    /// (`IB_WC_WITH_INVALIDATE`), host order. The registration it names
    /// no longer gives access; [`crate::mr::Mr`] still takes its own
    /// LOCAL_INV to let its buffer go.
    pub invalidated_rkey: Option<u32>,
    /// A UD receive: the first 40 bytes of the buffer hold the GRH (or,
    /// for RoCE v2 over IPv4, the IPv4 header in their last 20).
    pub grh: bool,
    /// For a receive with a GRH: whether it came over IPv4 (RoCE v2), if
    /// the device says.
    pub ipv4: Option<bool>,
}

impl Wc {
    pub(crate) fn from_raw(wc: &bindings::ib_wc) -> Self {
        let has_imm = wc.wc_flags & (bindings::IB_WC_WITH_IMM as i32) != 0;
        let has_inv = wc.wc_flags & (bindings::IB_WC_WITH_INVALIDATE as i32) != 0;
        Wc {
            status: WcStatus::from_raw(wc.status),
            opcode: WcOpcode::from_raw(wc.opcode),
            byte_len: wc.byte_len,
            // SAFETY: With `IB_WC_WITH_IMM` the union holds `imm_data`.
            imm: has_imm.then(|| u32::from_be(unsafe { wc.ex.imm_data })),
            src_qp: wc.src_qp,
            qp_num: 0,
            qp_raw: wc.qp as usize,
            vendor_err: wc.vendor_err,
            invalidated_rkey: if has_inv {
                // SAFETY: With `IB_WC_WITH_INVALIDATE` the union holds
                // `invalidate_rkey`, in host order (as `ib_send_wr`'s).
                Some(unsafe { wc.ex.invalidate_rkey })
            } else {
                None
            },
            grh: wc.wc_flags & (bindings::IB_WC_GRH as i32) != 0,
            ipv4: (wc.wc_flags & (bindings::IB_WC_WITH_NETWORK_HDR_TYPE as i32) != 0)
                .then_some(u32::from(wc.network_hdr_type) == bindings::RDMA_NETWORK_IPV4),
        }
    }

    /// `Ok` for a successful completion, else `EIO`.
    pub fn result(&self) -> kernel::error::Result<&Self> {
        match self.status {
            WcStatus::Success => Ok(self),
            _ => Err(kernel::error::code::EIO),
        }
    }
}

/// The global route header of a UD receive, parsed.
#[derive(Clone, Copy, Debug)]
pub struct Grh {
    /// The source GID (for IPv4, the source address mapped into IPv6).
    pub sgid: crate::device::Gid,
    /// The destination GID.
    pub dgid: crate::device::Gid,
    /// The flow label (0 over IPv4).
    pub flow_label: u32,
    /// The hop limit (IPv4: the TTL).
    pub hop_limit: u8,
}

impl Grh {
    /// The 40 bytes a UD receive starts with: an IB/IPv6 GRH, or 20
    /// reserved bytes and an IPv4 header (RoCE v2 over IPv4).
    pub fn parse(raw: &[u8; 40], ipv4: bool) -> Self {
        use crate::device::Gid;
        let mapped = |a: &[u8]| {
            let mut g = [0u8; 16];
            g[10] = 0xff;
            g[11] = 0xff;
            g[12..].copy_from_slice(a);
            Gid(g)
        };
        if ipv4 {
            let ip = &raw[20..];
            return Grh {
                sgid: mapped(&ip[12..16]),
                dgid: mapped(&ip[16..20]),
                flow_label: 0,
                hop_limit: ip[8],
            };
        }
        let mut sgid = [0u8; 16];
        let mut dgid = [0u8; 16];
        sgid.copy_from_slice(&raw[8..24]);
        dgid.copy_from_slice(&raw[24..40]);
        Grh {
            sgid: Gid(sgid),
            dgid: Gid(dgid),
            flow_label: u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]) & 0xf_ffff,
            hop_limit: raw[7],
        }
    }
}
