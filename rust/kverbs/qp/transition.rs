// SPDX-License-Identifier: GPL-2.0

//! The state transitions of queue pairs (`ib_modify_qp`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{
    ErrorState, Init, InitAttr, Qp, Rc, Reset, Rtr, RtrAttr, Rts, RtsAttr, State, Transport, Ud,
};
use crate::bindings;
use core::marker::PhantomData;
use kernel::prelude::*;

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
pub(super) struct MaskNames(pub(super) u32);

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
crate::kernel_display!(MaskNames);

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
}
