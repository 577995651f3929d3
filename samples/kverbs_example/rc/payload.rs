// SPDX-License-Identifier: GPL-2.0

//! What the RC example transfers: RDMA_RC_example's messages, the payload
//! of an iteration, its check, and how the report shows a buffer.

use crate::report::Report;
use core::fmt::{self, Write};
use kernel::prelude::*;
use kverbs::dma::DmaBuf;

/// RDMA_RC_example's messages.
pub(super) const MSG_SEND: &[u8; 20] = b"SEND operation      ";
pub(super) const MSG_READ: &[u8; 20] = b"RDMA read operation ";
pub(super) const MSG_WRITE: &[u8; 20] = b"RDMA write operation";

/// The byte at `offset` of the payload of iteration `iter` for `msg`: the
/// message, its NUL, then a pattern that differs per iteration and message.
pub(super) fn pattern(msg: &[u8; 20], iter: u32, offset: usize) -> u8 {
    match offset {
        0..=19 => msg[offset],
        20 => 0,
        _ => (offset as u32)
            .wrapping_mul(31)
            .wrapping_add(iter.wrapping_mul(7))
            .wrapping_add(u32::from(msg[0])) as u8,
    }
}

pub(super) fn fill(buf: &DmaBuf, len: usize, msg: &[u8; 20], iter: u32) -> Result {
    let mut chunk = [0u8; 256];
    let mut off = 0;
    while off < len {
        let n = chunk.len().min(len - off);
        for (i, b) in chunk[..n].iter_mut().enumerate() {
            *b = pattern(msg, iter, off + i);
        }
        buf.write(off, &chunk[..n])?;
        off += n;
    }
    Ok(())
}

/// Checks the payload byte for byte; reports the first difference.
pub(super) fn check(
    buf: &DmaBuf,
    len: usize,
    msg: &[u8; 20],
    iter: u32,
    what: &str,
    rep: &mut Report,
) -> Result {
    let mut chunk = [0u8; 256];
    let mut off = 0;
    while off < len {
        let n = chunk.len().min(len - off);
        buf.read(off, &mut chunk[..n])?;
        for (i, b) in chunk[..n].iter().enumerate() {
            let want = pattern(msg, iter, off + i);
            if *b != want {
                let _ = writeln!(
                    rep,
                    "{}: validation failed at byte {}: {:#04x}, expected {:#04x}",
                    what,
                    off + i,
                    b,
                    want
                );
                return Err(EIO);
            }
        }
        off += n;
    }
    Ok(())
}

/// FNV-1a over the first `len` bytes of `buf`.
pub(super) fn digest(buf: &DmaBuf, len: usize) -> Result<u64> {
    let mut chunk = [0u8; 256];
    let (mut off, mut h) = (0, 0xcbf2_9ce4_8422_2325u64);
    while off < len {
        let n = chunk.len().min(len - off);
        buf.read(off, &mut chunk[..n])?;
        for &b in &chunk[..n] {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        off += n;
    }
    Ok(h)
}

/// The message at the start of `buf`, as RDMA_RC_example prints it.
pub(super) struct Msg([u8; 20], usize);

impl Msg {
    pub(super) fn of(buf: &DmaBuf, len: usize) -> Self {
        let mut m = [0u8; 20];
        let n = len.min(20);
        let _ = buf.read(0, &mut m[..n]);
        let n = m[..n].iter().position(|&b| b == 0).unwrap_or(n);
        Msg(m, n)
    }
}

impl fmt::Display for Msg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &b in &self.0[..self.1] {
            let c = if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            };
            f.write_char(c)?;
        }
        Ok(())
    }
}

/// Reports an operation that took `dt_ns`, and the message `buf` then
/// starts with, as RDMA_RC_example prints it (`<what>: '<message>'`).
pub(super) fn report_op(
    rep: &mut Report,
    op: &str,
    size: usize,
    dt_ns: u64,
    what: &str,
    buf: &DmaBuf,
) {
    let _ = writeln!(rep, "{}: ok: {} bytes in {} us", op, size, dt_ns / 1000);
    let _ = writeln!(rep, "{}: '{}'", what, Msg::of(buf, size));
}
