// SPDX-License-Identifier: GPL-2.0

//! What NVMe over RDMA puts on the wire, encoded and decoded byte by byte
//! (little endian, at the offsets of the specification and of
//! include/linux/nvme-rdma.h): no structure is cast from memory.

/// `NVME_RDMA_CM_FMT_1_0`: the only record format.
pub(crate) const RECFMT_1_0: u16 = 0;

/// The private data of a queue's connection request
/// (`struct nvme_rdma_cm_req`, 32 bytes).
#[derive(Clone, Copy)]
pub(crate) struct CmReq {
    pub(crate) recfmt: u16,
    /// The queue: 0 for the admin queue.
    pub(crate) qid: u16,
    /// The host's receive queue size (1's based).
    pub(crate) hrqsize: u16,
    /// The host's send queue size, 0's based.
    pub(crate) hsqsize: u16,
    /// The controller of an I/O queue (0 for the admin queue).
    pub(crate) cntlid: u16,
}

impl CmReq {
    pub(crate) const LEN: usize = 32;

    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        put16(&mut b, 0, self.recfmt);
        put16(&mut b, 2, self.qid);
        put16(&mut b, 4, self.hrqsize);
        put16(&mut b, 6, self.hsqsize);
        put16(&mut b, 8, self.cntlid);
        b
    }
}

/// The private data of the target's reply (`struct nvme_rdma_cm_rep`).
pub(crate) struct CmRep {
    pub(crate) recfmt: u16,
    /// The controller's receive queue size.
    pub(crate) crqsize: u16,
}

impl CmRep {
    /// `None` if shorter than its 4 meaningful bytes.
    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        Some(CmRep {
            recfmt: get16(b, 0)?,
            crqsize: get16(b, 2)?,
        })
    }
}

/// The private data of the target's rejection (`struct nvme_rdma_cm_rej`).
pub(crate) struct CmRej {
    pub(crate) recfmt: u16,
    /// `enum nvme_rdma_cm_status`.
    pub(crate) sts: u16,
}

impl CmRej {
    /// `None` if shorter than 4 bytes.
    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        Some(CmRej {
            recfmt: get16(b, 0)?,
            sts: get16(b, 2)?,
        })
    }

    /// What the status means, as `nvme_rdma_cm_msg` says it.
    pub(crate) fn msg(&self) -> &'static str {
        match self.sts {
            1 => "invalid length",
            2 => "invalid record format",
            3 => "invalid queue ID",
            4 => "invalid host SQ size",
            5 => "invalid host RQ size",
            6 => "resource not found",
            7 => "invalid IRD",
            8 => "invalid ORD",
            9 => "invalid controller ID",
            _ => "unrecognized reason",
        }
    }
}

fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

fn get16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
