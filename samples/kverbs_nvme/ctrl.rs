// SPDX-License-Identifier: GPL-2.0

//! A controller's bring-up on its admin queue, as the C host's
//! (drivers/nvme/host/fabrics.c, `nvmf_connect_admin_queue`; host/core.c,
//! `nvme_enable_ctrl`, `nvme_init_ctrl_finish`, `nvme_set_queue_count` and
//! `nvme_scan_ns_list`): Fabrics Connect, the properties CAP and VS, CC
//! written and CSTS.RDY waited for, Identify Controller, the number of I/O
//! queues, the active namespaces and each one's size and block size; and
//! its shutdown (`nvme_disable_ctrl` with CC.SHN).

use crate::admin::{Admin, CmdError, Data};
use crate::options::Options;
use crate::queue::AQ_DEPTH;
use crate::wire::{
    self, Cmd, ConnectData, IdCtrl, IdNs, PROP_CAP, PROP_CC, PROP_CSTS, PROP_VS,
    SC_CONNECT_INVALID_HOST, SC_CONNECT_INVALID_PARAM,
};
use core::fmt;
use kernel::prelude::*;

/// A namespace.
pub(crate) struct Ns {
    pub(crate) nsid: u32,
    /// Its size in logical blocks, and their size.
    pub(crate) blocks: u64,
    pub(crate) block_size: u32,
}

/// What the bring-up learned.
pub(crate) struct Info {
    /// The controller's ID, from Connect's result.
    pub(crate) cntlid: u16,
    /// The capabilities (CAP) and the version (VS).
    pub(crate) cap: u64,
    pub(crate) vs: u32,
    /// The configuration written (CC, without EN).
    cc: u32,
    pub(crate) id: IdCtrl,
    /// The I/O queues asked for and those the controller granted (at
    /// most as many).
    pub(crate) io_queues_asked: u16,
    pub(crate) io_queues: u16,
    pub(crate) namespaces: KVec<Ns>,
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
/// CC.SHN, normal shutdown.
const CC_SHN_NORMAL: u32 = 1 << 14;
const CSTS_RDY: u64 = 1;
const CSTS_CFS: u64 = 2;
/// CSTS.SHST, and its value once the shutdown is complete.
const CSTS_SHST_MASK: u64 = 3 << 2;
const CSTS_SHST_CMPLT: u64 = 2 << 2;
/// How long a shutdown may take (nvme-core's `shutdown_timeout`).
const SHUTDOWN_TIMEOUT_MS: u64 = 5000;

/// Polls CSTS until `(csts & mask) == want`, at most `ms`, as
/// `nvme_wait_ready`; `what` names the wait in an error.
fn wait_csts(
    a: &mut Admin,
    what: &'static str,
    mask: u64,
    want: u64,
    ms: u64,
) -> Result<(), StartError> {
    let deadline = kverbs::now_ns() + ms * 1_000_000;
    loop {
        let csts = get(a, "Property Get CSTS", PROP_CSTS)?;
        if csts == u64::from(u32::MAX) {
            return fail("CSTS", ENODEV);
        }
        if csts & CSTS_CFS != 0 {
            return fail("CSTS.CFS", EIO);
        }
        if csts & mask == want {
            return Ok(());
        }
        if kverbs::now_ns() > deadline {
            return fail(what, kverbs::errno::etimedout());
        }
        kverbs::msleep(1);
    }
}

/// Identify with `cmd`, into a 4 KiB buffer of its own (not the stack).
fn identify(a: &mut Admin, what: &'static str, cmd: Cmd) -> Result<KVec<u8>, StartError> {
    let mut raw =
        KVec::from_elem(0u8, IdCtrl::LEN, GFP_KERNEL).or_else(|e| fail(what, e.into()))?;
    step(what, a.exec(cmd, Data::In(IdCtrl::LEN), &mut raw))?;
    Ok(raw)
}

/// Brings the controller of `a` up, with the options `opts`.
pub(crate) fn start(a: &mut Admin, opts: &Options) -> Result<Info, StartError> {
    // Fabrics Connect, qid 0, with the keep-alive timeout: the target
    // deletes the controller if no command comes within it (the host
    // sends Keep Alive at half of it, `KeepAlive`).
    let cid = a.cid();
    let cmd = Cmd::connect(
        cid,
        opts.test_connect_recfmt.unwrap_or(0),
        0,
        AQ_DEPTH - 1,
        opts.keep_alive_tmo * 1000,
    );
    let hostnqn = opts.hostnqn_or_default();
    let data = ConnectData::encode(
        &opts.hostid,
        ConnectData::DYNAMIC,
        opts.nqn.as_str(),
        hostnqn.as_str(),
    )
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
    // CSTS.RDY within CAP.TO (500 ms units).
    let to_ms = ((cap >> 24) & 0xff).max(1) * 500;
    wait_csts(a, "CSTS.RDY", CSTS_RDY, CSTS_RDY, to_ms)?;

    let cid = a.cid();
    let raw = identify(a, "Identify Controller", Cmd::identify_ctrl(cid))?;
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

    // The I/O queues: one a CPU online, at most nr_io_queues, as many as
    // the controller grants (`nvme_set_queue_count`).
    let cpus = kverbs::num_online_cpus().max(1);
    let asked = opts
        .nr_io_queues
        .unwrap_or(cpus)
        .min(cpus)
        .min(u32::from(u16::MAX)) as u16;
    let cid = a.cid();
    let granted = step(
        "Set Features Number of Queues",
        a.exec(Cmd::set_num_queues(cid, asked), Data::None, &mut []),
    )?
    .result as u32;
    // In 32 bits: a target's 0xffff + 1 must not overflow.
    let io_queues = u32::from(asked).min((granted & 0xffff).min(granted >> 16) + 1) as u16;

    // The active namespaces (the first 1024: nvmet has at most 1024) and
    // each one's size and format.
    let cid = a.cid();
    let list = identify(
        a,
        "Identify active namespace list",
        Cmd::identify_ns_list(cid, 0),
    )?;
    let mut namespaces = KVec::new();
    for nsid in wire::ns_list(&list) {
        let cid = a.cid();
        let raw = identify(a, "Identify Namespace", Cmd::identify_ns(cid, nsid))?;
        let Some(ns) = IdNs::decode(&raw) else {
            return fail("Identify Namespace", EINVAL);
        };
        // A block size the block layer cannot take is the C host's
        // "unsupported": the namespace is left out.
        if !(9..=12).contains(&ns.lbads) {
            pr_err!(
                "kverbs_nvme: namespace {}: blocks of 2^{} bytes: left out\n",
                nsid,
                ns.lbads
            );
            continue;
        }
        namespaces
            .push(
                Ns {
                    nsid,
                    blocks: ns.nsze,
                    block_size: 1 << ns.lbads,
                },
                GFP_KERNEL,
            )
            .or_else(|e| fail("Identify Namespace", e.into()))?;
    }
    Ok(Info {
        cntlid,
        cap,
        vs,
        cc,
        id,
        io_queues_asked: asked,
        io_queues,
        namespaces,
    })
}

/// Shuts the controller down: CC.SHN normal, then CSTS.SHST complete
/// within 5 s (nvme-core's `shutdown_timeout`).
pub(crate) fn shutdown(a: &mut Admin, info: &Info) -> Result<(), StartError> {
    set(
        a,
        "Property Set CC.SHN",
        PROP_CC,
        info.cc | CC_ENABLE | CC_SHN_NORMAL,
    )?;
    wait_csts(
        a,
        "CSTS.SHST",
        CSTS_SHST_MASK,
        CSTS_SHST_CMPLT,
        SHUTDOWN_TIMEOUT_MS,
    )
}
