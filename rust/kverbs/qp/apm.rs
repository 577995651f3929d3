// SPDX-License-Identifier: GPL-2.0

//! Automatic path migration of RC queue pairs: alternate paths.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::transition::MaskNames;
use super::{AddressVector, AltPath, MigState, Qp, Rc, Rts};
use crate::bindings;
use crate::device::{Device, Gid, PortNum};
use kernel::prelude::*;

/// Whether RC QPs on `port` of `dev` can have an alternate path and
/// migrate to it: the device must migrate paths (`IB_DEVICE_AUTO_PATH_MIG`)
/// and the port must be InfiniBand -- the RDMA core refuses alternate
/// paths on RoCE ports (`_ib_modify_qp`: EINVAL), even on devices that
/// advertise migration, as rxe does. `EOPNOTSUPP` otherwise.
pub fn path_mig_supported(dev: &Device, port: PortNum) -> Result {
    if !dev.attrs().auto_path_mig() {
        return Err(crate::errno::eopnotsupp());
    }
    let ll = dev.link_layer(port);
    if ll != crate::device::LinkLayer::InfiniBand {
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
        let a = self.query(bindings::IB_QP_AV)?;
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
        let a = self.query(bindings::IB_QP_PATH_MIG_STATE)?;
        Ok(match a.path_mig_state {
            bindings::IB_MIG_MIGRATED => MigState::Migrated,
            bindings::IB_MIG_REARM => MigState::Rearm,
            _ => MigState::Armed,
        })
    }

    /// The attributes of `mask` of the QP (`ib_query_qp`).
    fn query(&self, mask: u32) -> Result<bindings::ib_qp_attr> {
        let mut a = bindings::ib_qp_attr::default();
        let mut init = bindings::ib_qp_init_attr::default();
        // SAFETY: The QP is live; both attribute sets are valid for writes.
        kernel::error::to_result(unsafe {
            bindings::ib_query_qp(self.inner.qp.as_ptr(), &mut a, mask as i32, &mut init)
        })?;
        Ok(a)
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
