// SPDX-License-Identifier: GPL-2.0

//! A controller's bring-up on its admin queue, as the C host's
//! (drivers/nvme/host/fabrics.c, `nvmf_connect_admin_queue`; host/core.c,
//! `nvme_enable_ctrl` and `nvme_init_ctrl_finish`): Fabrics Connect, the
//! properties CAP and VS, CC written and CSTS.RDY waited for, Identify
//! Controller.

use crate::admin::{Admin, CmdError, Data};
use crate::options::Options;
use crate::queue::AQ_DEPTH;
use crate::wire::{
    self, Cmd, ConnectData, IdCtrl, PROP_CAP, PROP_CC, PROP_CSTS, PROP_VS, SC_CONNECT_INVALID_HOST,
    SC_CONNECT_INVALID_PARAM,
};
use core::fmt;
use kernel::prelude::*;

/// What the bring-up learned.
pub(crate) struct Info {
    /// The controller's ID, from Connect's result.
    pub(crate) cntlid: u16,
    /// The capabilities (CAP) and the version (VS).
    pub(crate) cap: u64,
    pub(crate) vs: u32,
    pub(crate) id: IdCtrl,
}

impl Info {
    /// CAP.MQES: the largest queue, 0's based.
    pub(crate) fn mqes(&self) -> u16 {
        self.cap as u16
    }
}

/// Why a bring-up failed: at which step, and how.
pub(crate) struct StartError {
    pub(crate) step: &'static str,
    pub(crate) err: CmdError,
}

impl StartError {
    pub(crate) fn errno(&self) -> Error {
        match self.err {
            // A refusal by the controller, as the C host's `-EIO`... but
            // the Connect refusals say who: the host (EPERM) or the
            // parameters (EINVAL), so a writer can tell them apart.
            CmdError::Status(c) => match c.code() {
                SC_CONNECT_INVALID_HOST => EPERM,
                SC_CONNECT_INVALID_PARAM => EINVAL,
                _ => EIO,
            },
            CmdError::Error(e) => e,
        }
    }
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.step)?;
        match &self.err {
            CmdError::Status(c) => {
                write!(f, "{} (status {:#x})", wire::status_msg(c.code()), c.code())?;
                // Connect's invalid parameter: where (`IATTR` bit 16 set:
                // an offset in the data; else in the command).
                if c.code() == SC_CONNECT_INVALID_PARAM {
                    let off = c.result as u32 & 0xffff;
                    let in_data = c.result & (1 << 16) != 0;
                    write!(
                        f,
                        ", offset {} in the {}",
                        off,
                        if in_data { "data" } else { "command" }
                    )?;
                    if in_data && off == ConnectData::SUBSYSNQN {
                        f.write_str(" (subsysnqn)")?;
                    } else if in_data && off == ConnectData::HOSTNQN {
                        f.write_str(" (hostnqn)")?;
                    }
                }
                Ok(())
            }
            CmdError::Error(e) => write!(f, "error {}", e.to_errno()),
        }
    }
}

kverbs::kernel_display!(StartError);

fn step<T>(step: &'static str, r: Result<T, CmdError>) -> Result<T, StartError> {
    r.map_err(|err| StartError { step, err })
}

fn fail<T>(step: &'static str, e: Error) -> Result<T, StartError> {
    Err(StartError {
        step,
        err: CmdError::Error(e),
    })
}

fn get(a: &mut Admin, what: &'static str, prop: u32) -> Result<u64, StartError> {
    let cid = a.cid();
    step(
        what,
        a.exec(Cmd::property_get(cid, prop), Data::None, &mut [])
            .map(|c| c.result),
    )
}

fn set(a: &mut Admin, what: &'static str, prop: u32, v: u32) -> Result<(), StartError> {
    let cid = a.cid();
    step(
        what,
        a.exec(Cmd::property_set(cid, prop, v), Data::None, &mut [])
            .map(|_| ()),
    )
}

/// CC: the I/O command set (6, all of them, if CAP says it has more than
/// NVM; else NVM), 4 KiB pages (MPS 0), round robin, queue entries of 64
/// and 16 bytes (`nvme_enable_ctrl`).
fn cc(cap: u64) -> u32 {
    let css = if cap & (1 << 43) != 0 { 6 } else { 0 };
    css << 4 | 6 << 16 | 4 << 20
}
const CC_ENABLE: u32 = 1;
const CSTS_RDY: u64 = 1;
const CSTS_CFS: u64 = 2;

/// Brings the controller of `a` up, with the options `opts`.
pub(crate) fn start(a: &mut Admin, opts: &Options) -> Result<Info, StartError> {
    // Fabrics Connect, qid 0. Keep-alive comes with a later stage: until
    // then the host asks for none (KATO 0).
    let cid = a.cid();
    let cmd = Cmd::connect(
        cid,
        opts.test_connect_recfmt.unwrap_or(0),
        0,
        AQ_DEPTH - 1,
        0,
    );
    let hostnqn = opts.hostnqn_or_default();
    let data = ConnectData::encode(&opts.hostid, opts.nqn.as_str(), hostnqn.as_str())
        .or_else(|e| fail("Connect", e))?;
    let cqe = step("Connect", a.exec(cmd, Data::Out(&data), &mut []))?;
    let cntlid = cqe.result as u16;

    let cap = get(a, "Property Get CAP", PROP_CAP)?;
    if (cap >> 48) & 0xf != 0 {
        // CAP.MPSMIN over 4 KiB pages.
        return fail("CAP", EINVAL);
    }
    let vs = get(a, "Property Get VS", PROP_VS)? as u32;
    let cc = cc(cap);
    set(a, "Property Set CC", PROP_CC, cc)?;
    set(a, "Property Set CC.EN", PROP_CC, cc | CC_ENABLE)?;
    // CSTS.RDY within CAP.TO (500 ms units), as `nvme_wait_ready`.
    let to_ms = ((cap >> 24) & 0xff).max(1) * 500;
    let deadline = kverbs::now_ns() + to_ms * 1_000_000;
    loop {
        let csts = get(a, "Property Get CSTS", PROP_CSTS)?;
        if csts == u64::from(u32::MAX) {
            return fail("CSTS", ENODEV);
        }
        if csts & CSTS_CFS != 0 {
            return fail("CSTS.CFS", EIO);
        }
        if csts & CSTS_RDY != 0 {
            break;
        }
        if kverbs::now_ns() > deadline {
            return fail("CSTS.RDY", kverbs::errno::etimedout());
        }
        kverbs::msleep(1);
    }

    // The 4 KiB of Identify in memory, not on the stack.
    let mut raw = KVec::from_elem(0u8, IdCtrl::LEN, GFP_KERNEL)
        .or_else(|e| fail("Identify Controller", e.into()))?;
    let cid = a.cid();
    step(
        "Identify Controller",
        a.exec(Cmd::identify_ctrl(cid), Data::In(IdCtrl::LEN), &mut raw),
    )?;
    let Some(id) = IdCtrl::decode(&raw) else {
        return fail("Identify Controller", EINVAL);
    };
    if id.icdoff != 0 {
        pr_err!("kverbs_nvme: ICDOFF {} is not supported\n", id.icdoff);
        return fail("Identify Controller", EINVAL);
    }
    if id.cntlid != cntlid {
        pr_err!(
            "kverbs_nvme: Identify says controller {}, Connect said {}\n",
            id.cntlid,
            cntlid
        );
        return fail("Identify Controller", kverbs::errno::eproto());
    }
    Ok(Info {
        cntlid,
        cap,
        vs,
        id,
    })
}
