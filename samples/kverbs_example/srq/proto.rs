// SPDX-License-Identifier: GPL-2.0

//! What the two sides of the SRQ example exchange: the message header,
//! the go message, and the SGEs a message takes.

use kverbs::dma::DmaBuf;

/// The message header: sequence number and QP index.
pub(super) const HDR: usize = 8;

/// The go message: "srq-go", the round (u32 LE), the messages received.
pub(super) const GO_LEN: usize = 16;

pub(super) const GO_TAG: &[u8; 6] = b"srq-go";

/// The SGEs the largest of `n` messages of `size` bytes in `buf` takes.
pub(super) fn sges(buf: &DmaBuf, n: u32, size: usize) -> u32 {
    (0..n as usize)
        .map(|j| buf.sge_count(j * size, size))
        .max()
        .unwrap_or(1) as u32
}

pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The go message of round `rounds`, `received` messages in.
pub(super) fn go_message(rounds: u32, received: u32) -> [u8; GO_LEN] {
    let mut go = [0u8; GO_LEN];
    go[..6].copy_from_slice(GO_TAG);
    go[8..12].copy_from_slice(&rounds.to_le_bytes());
    go[12..16].copy_from_slice(&received.to_le_bytes());
    go
}
