// SPDX-License-Identifier: GPL-2.0

//! Address handles, for UD sends.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use crate::bindings;
use crate::device::{Device, PortNum};
use crate::pd::Pd;
use crate::qp::AddressVector;
use core::ptr::NonNull;
use kernel::{error::from_err_ptr, prelude::*, sync::Arc};

/// # Invariants
///
/// `ah` was created by `rdma_create_ah` in `pd` and is not yet destroyed.
pub(crate) struct AhInner {
    ah: NonNull<bindings::ib_ah>,
    pd: Pd,
    dmac: Option<[u8; 6]>,
}

// SAFETY: An AH may be used and destroyed from any thread.
unsafe impl Send for AhInner {}
// SAFETY: Using an AH in work requests is thread safe.
unsafe impl Sync for AhInner {}

impl AhInner {
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_ah {
        self.ah.as_ptr()
    }

    /// The PD the AH was created in.
    pub(crate) fn pd(&self) -> &Pd {
        &self.pd
    }
}

impl Drop for AhInner {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the AH is live; the last reference
        // is gone, so no posted request names it any more (slots hold one).
        unsafe { bindings::rdma_destroy_ah(self.ah.as_ptr(), bindings::RDMA_DESTROY_AH_SLEEPABLE) };
    }
}

/// The address attributes of `av`, sent from `port` of `dev`: a GRH, and
/// on RoCE the destination MAC, resolved as the core does for user AHs
/// (`ib_resolve_eth_dmac`) -- the verbs take only resolved RoCE addresses
/// from kernel users, which rxe does not need but hardware does. Also
/// returns that MAC.
pub(crate) fn ah_attr(
    dev: &Device,
    port: PortNum,
    av: &AddressVector,
) -> Result<(bindings::rdma_ah_attr, Option<[u8; 6]>)> {
    crate::qp::check_port(dev, port)?;
    let mut attr = bindings::rdma_ah_attr::default();
    let mut dgid = bindings::ib_gid { raw: av.dgid.0 };
    // SAFETY: `attr` and `dgid` are valid; the device is live and `port`
    // one of its ports.
    unsafe {
        attr.type_ = bindings::rdma_ah_find_type(dev.as_raw(), port);
        bindings::rdma_ah_set_port_num(&mut attr, port);
        bindings::rdma_ah_set_sl(&mut attr, av.sl);
        bindings::rdma_ah_set_grh(
            &mut attr,
            &mut dgid,
            av.flow_label,
            av.sgid_index,
            av.hop_limit,
            av.traffic_class,
        );
    }
    if attr.type_ == bindings::RDMA_AH_ATTR_TYPE_IB {
        // Within a subnet, InfiniBand routes by LID: without one the path
        // would go to LID 0, which is no port (multicast LIDs, from 0xc000,
        // are a group's).
        if av.dlid == 0 {
            return Err(EINVAL);
        }
        // SAFETY: `attr` is a valid IB address attribute.
        unsafe { bindings::rdma_ah_set_dlid(&mut attr, av.dlid.into()) };
    }
    if attr.type_ != bindings::RDMA_AH_ATTR_TYPE_ROCE {
        return Ok((attr, None));
    }
    let sgid = dev.gid_attr(port, av.sgid_index.into())?;
    // SAFETY: `attr` is a RoCE address with a GRH; `sgid` is held.
    let ret = unsafe { bindings::kverbs_ah_attr_resolve_dmac(&mut attr, sgid.as_raw()) };
    if ret != 0 {
        pr_err!(
            "{}: no MAC address for {}: error {}\n",
            dev.name(),
            av.dgid.ipv6(),
            ret
        );
        return Err(Error::from_errno(ret));
    }
    let mut dmac = [0u8; 6];
    // SAFETY: `attr` is valid; `dmac` has room for the 6 bytes.
    unsafe { bindings::kverbs_ah_attr_dmac(&attr, dmac.as_mut_ptr()) };
    Ok((attr, Some(dmac)))
}

/// An address handle (`rdma_create_ah`): where UD sends go. Destroyed when
/// the last of its users (this handle, requests posted with it) is gone.
#[derive(Clone)]
pub struct Ah(pub(crate) Arc<AhInner>);

impl Ah {
    /// Creates an address handle for `av`, sent from `port`.
    ///
    /// On RoCE the destination MAC is resolved (see [`Ah::dmac`]); `port`
    /// must be a port of the PD's device.
    pub fn new(pd: &Pd, port: PortNum, av: &AddressVector) -> Result<Self> {
        let (mut attr, dmac) = ah_attr(pd.device(), port, av)?;
        // SAFETY: The PD is live; `attr` is a complete RoCE/IB address.
        let ah = from_err_ptr(unsafe {
            bindings::rdma_create_ah(pd.as_raw(), &mut attr, bindings::RDMA_CREATE_AH_SLEEPABLE)
        })?;
        let ah = NonNull::new(ah).ok_or(ENOMEM)?;
        // INVARIANT: created above in `pd`.
        Ok(Ah(Arc::new(
            AhInner {
                ah,
                pd: pd.clone(),
                dmac,
            },
            GFP_KERNEL,
        )?))
    }

    /// The destination MAC of a RoCE address, as kverbs resolved it.
    pub fn dmac(&self) -> Option<[u8; 6]> {
        self.0.dmac
    }
}
