// SPDX-License-Identifier: GPL-2.0

//! The RC example's remote atomics (`atomics=<n>`): the client's
//! fetch-and-adds and compare-and-swaps on the server's buffer, and the
//! server's check of what landed.

use super::config::Config;
use super::payload::MSG_WRITE;
use crate::conn::complete_wc;
use crate::report::Report;
use core::fmt::{self, Write};
use kernel::{prelude::*, sync::Arc};
use kverbs::{
    dma::DmaBuf,
    qp::{Access, AtomicOp, Cancel, Qp, RemoteBuf, Rts},
};

/// " atomics=<n>" in the configuration line, if asked for.
pub(super) struct Atomics(pub(super) u32);

impl fmt::Display for Atomics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => Ok(()),
            n => write!(f, " atomics={}", n),
        }
    }
}

/// The value the second compare-and-swap stores ("kverbs!!").
pub(super) const ATOMIC_SWAP: u64 = u64::from_ne_bytes(*b"kverbs!!");

/// The server's access rights: remote atomics only when asked for.
pub(super) fn server_access(cfg: &Config) -> Access {
    let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    match cfg.atomics {
        0 => access,
        _ => access | Access::REMOTE_ATOMIC,
    }
}

/// The client's atomics on the first 8 bytes of the server's buffer, which
/// start as those of RDMA_RC_example's write message: `cfg.atomics`
/// fetch-and-adds (of 1, 2, 3, ...), a compare-and-swap that must swap
/// ([`ATOMIC_SWAP`] in), and one with a wrong compare value that must not;
/// every old value is checked. The server's 8 bytes end as [`ATOMIC_SWAP`].
pub(super) fn atomics(
    qp: &Qp<Rts>,
    remote: RemoteBuf,
    cfg: &Config,
    cancel: &Cancel,
    rep: &mut Report,
) -> Result {
    let dev = qp.device();
    let old_buf = Arc::new(DmaBuf::new(dev, 8)?, GFP_KERNEL)?;
    let mut head = [0u8; 8];
    head.copy_from_slice(&MSG_WRITE[..8]);
    let mut want = u64::from_ne_bytes(head);
    let one = |op: AtomicOp, what: &str, want: u64, rep: &mut Report| -> Result {
        let id = qp.post_atomic(op, &old_buf, 0, true)?;
        complete_wc(qp, id, what, cfg.timeout_ms, cancel, rep)?;
        let mut old = [0u8; 8];
        old_buf.read(0, &mut old)?;
        let old = u64::from_ne_bytes(old);
        if old != want {
            let _ = writeln!(rep, "{}: old value {:#x}, expected {:#x}", what, old, want);
            return Err(EIO);
        }
        Ok(())
    };
    for i in 0..u64::from(cfg.atomics) {
        let add = i + 1;
        one(
            AtomicOp::FetchAdd { remote, add },
            "FETCH_AND_ADD",
            want,
            rep,
        )?;
        want = want.wrapping_add(add);
    }
    let swap = AtomicOp::CmpSwap {
        remote,
        compare: want,
        swap: ATOMIC_SWAP,
    };
    one(swap, "CMP_AND_SWP", want, rep)?;
    let no_swap = AtomicOp::CmpSwap {
        remote,
        compare: want,
        swap: 0,
    };
    one(no_swap, "CMP_AND_SWP (no match)", ATOMIC_SWAP, rep)?;
    let _ = writeln!(
        rep,
        "atomics: ok: {} fetch-and-adds and 2 compare-and-swaps returned the expected old values",
        cfg.atomics
    );
    Ok(())
}

/// Checks the server's first 8 bytes after the client's atomics.
pub(super) fn atomics_landed(buf: &DmaBuf, rep: &mut Report) -> Result {
    let mut v = [0u8; 8];
    buf.read(0, &mut v)?;
    let v = u64::from_ne_bytes(v);
    if v != ATOMIC_SWAP {
        let _ = writeln!(
            rep,
            "atomics: the server's 8 bytes hold {:#x}, expected {:#x}",
            v, ATOMIC_SWAP
        );
        return Err(EIO);
    }
    let _ = writeln!(rep, "atomics: ok: the server's 8 bytes hold 'kverbs!!'");
    Ok(())
}
