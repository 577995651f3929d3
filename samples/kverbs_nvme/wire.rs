// SPDX-License-Identifier: GPL-2.0

//! What NVMe over RDMA puts on the wire, encoded and decoded byte by byte
//! (little endian, at the offsets of the specification and of
//! include/linux/nvme-rdma.h and nvme.h): no structure is cast from
//! memory.

use kernel::prelude::*;

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

/// A command capsule's 64 bytes (`struct nvme_command`), built field by
/// field at the offsets of include/linux/nvme.h.
pub(crate) struct Cmd(pub(crate) [u8; Cmd::LEN]);

/// The opcode of the Fabrics commands (`nvme_fabrics_command`).
const OPC_FABRICS: u8 = 0x7f;
/// Their types (`fctype`, byte 4).
const FCTYPE_PROPERTY_SET: u8 = 0x00;
const FCTYPE_CONNECT: u8 = 0x01;
const FCTYPE_PROPERTY_GET: u8 = 0x04;
/// Identify (admin opcode 0x06) and its CNS: a namespace, the controller,
/// the active namespaces' list.
const OPC_IDENTIFY: u8 = 0x06;
const CNS_NS: u8 = 0x00;
const CNS_CTRL: u8 = 0x01;
const CNS_NS_ACTIVE_LIST: u8 = 0x02;
/// Keep Alive (admin opcode 0x18): no data, no result.
const OPC_KEEP_ALIVE: u8 = 0x18;
/// The I/O commands (NVM command set): Flush, Write, Read.
const OPC_FLUSH: u8 = 0x00;
const OPC_WRITE: u8 = 0x01;
const OPC_READ: u8 = 0x02;
const OPC_WRITE_ZEROES: u8 = 0x08;
/// ONCS (Identify Controller): Write Zeroes supported.
pub(crate) const ONCS_WRITE_ZEROES: u16 = 1 << 3;
/// Read's and Write's Force Unit Access (CDW12 bit 30).
const RW_FUA: u32 = 1 << 30;
/// Set Features, and the feature Number of Queues.
const OPC_SET_FEATURES: u8 = 0x09;
const FEAT_NUM_QUEUES: u8 = 0x07;
/// `flags`: PSDT = SGL for the data (`NVME_CMD_SGL_METABUF`), which nvmet
/// requires.
const FLAGS_SGL: u8 = 1 << 6;
/// A keyed data block descriptor whose key the target invalidates when
/// done (`NVME_KEY_SGL_FMT_DATA_DESC << 4 | NVME_SGL_FMT_INVALIDATE`), as
/// the C host's; with subtype ADDRESS (0x40), the null descriptor.
const SGL_KEYED_INVALIDATE: u8 = 0x4f;
/// A data block descriptor whose address is an offset in the capsule
/// (`NVME_SGL_FMT_DATA_DESC << 4 | NVME_SGL_FMT_OFFSET`): in-capsule data.
const SGL_DATA_OFFSET: u8 = 0x01;
const SGL_KEYED: u8 = 0x40;

/// The properties (controller registers) of Property Get and Set.
pub(crate) const PROP_CAP: u32 = 0x00;
pub(crate) const PROP_VS: u32 = 0x08;
pub(crate) const PROP_CC: u32 = 0x14;
pub(crate) const PROP_CSTS: u32 = 0x1c;

impl Cmd {
    pub(crate) const LEN: usize = 64;

    fn new(opcode: u8, cid: u16) -> Self {
        let mut c = Cmd([0; Self::LEN]);
        c.0[0] = opcode;
        c.0[1] = FLAGS_SGL;
        put16(&mut c.0, 2, cid);
        // No data: the null keyed descriptor (`nvme_rdma_set_sg_null`).
        c.0[39] = SGL_KEYED;
        c
    }

    fn fabrics(fctype: u8, cid: u16) -> Self {
        let mut c = Self::new(OPC_FABRICS, cid);
        c.0[4] = fctype;
        c
    }

    /// Fabrics Connect of queue `qid` (`nvmf_connect_command`): its record
    /// format (0), the queue's size (0's based), the keep-alive timeout in
    /// milliseconds; the data (`ConnectData`) by a keyed descriptor.
    pub(crate) fn connect(cid: u16, recfmt: u16, qid: u16, sqsize: u16, kato_ms: u32) -> Self {
        let mut c = Self::fabrics(FCTYPE_CONNECT, cid);
        put16(&mut c.0, 40, recfmt);
        put16(&mut c.0, 42, qid);
        put16(&mut c.0, 44, sqsize);
        put32(&mut c.0, 48, kato_ms);
        c
    }

    /// Property Get of `offset`, 8 bytes (CAP) or 4.
    pub(crate) fn property_get(cid: u16, offset: u32) -> Self {
        let mut c = Self::fabrics(FCTYPE_PROPERTY_GET, cid);
        c.0[40] = u8::from(offset == PROP_CAP);
        put32(&mut c.0, 44, offset);
        c
    }

    /// Property Set of the 4 bytes at `offset` (nvmet sets only CC).
    pub(crate) fn property_set(cid: u16, offset: u32, value: u32) -> Self {
        let mut c = Self::fabrics(FCTYPE_PROPERTY_SET, cid);
        put32(&mut c.0, 44, offset);
        put32(&mut c.0, 48, value);
        c
    }

    /// Identify Controller: 4096 bytes in.
    pub(crate) fn identify_ctrl(cid: u16) -> Self {
        let mut c = Self::new(OPC_IDENTIFY, cid);
        c.0[40] = CNS_CTRL;
        c
    }

    /// Identify Namespace `nsid`: 4096 bytes in.
    pub(crate) fn identify_ns(cid: u16, nsid: u32) -> Self {
        let mut c = Self::new(OPC_IDENTIFY, cid);
        put32(&mut c.0, 4, nsid);
        c.0[40] = CNS_NS;
        c
    }

    /// The active namespaces' IDs above `after`: 4096 bytes in, at most
    /// 1024 IDs, ascending, ended by 0.
    pub(crate) fn identify_ns_list(cid: u16, after: u32) -> Self {
        let mut c = Self::new(OPC_IDENTIFY, cid);
        put32(&mut c.0, 4, after);
        c.0[40] = CNS_NS_ACTIVE_LIST;
        c
    }

    /// Set Features Number of Queues: `n` submission and completion
    /// queues (besides the admin queue's); the result gives those
    /// granted, 0's based, in its two halves.
    pub(crate) fn set_num_queues(cid: u16, n: u16) -> Self {
        let mut c = Self::new(OPC_SET_FEATURES, cid);
        c.0[40] = FEAT_NUM_QUEUES;
        let q = u32::from(n - 1);
        put32(&mut c.0, 44, q | q << 16);
        c
    }

    /// Keep Alive: tells the controller the host is there (the
    /// keep-alive timer of Connect's KATO restarts).
    pub(crate) fn keep_alive(cid: u16) -> Self {
        Self::new(OPC_KEEP_ALIVE, cid)
    }

    /// Read (`write` false) or Write of `nlb` logical blocks (at least 1,
    /// at most 65536) of namespace `nsid` from block `slba`, with Force
    /// Unit Access; the data pointer is set after ([`Cmd::set_keyed_sgl`]).
    pub(crate) fn rw(cid: u16, write: bool, nsid: u32, slba: u64, nlb: u32, fua: bool) -> Self {
        let mut c = Self::new(if write { OPC_WRITE } else { OPC_READ }, cid);
        put32(&mut c.0, 4, nsid);
        c.0[40..48].copy_from_slice(&slba.to_le_bytes());
        // NLB is 0's based.
        let mut dw12 = nlb.wrapping_sub(1) & 0xffff;
        if fua {
            dw12 |= RW_FUA;
        }
        put32(&mut c.0, 48, dw12);
        c
    }

    /// Write Zeroes of `nlb` logical blocks (1 to 65536) of namespace
    /// `nsid` from block `slba`: no data.
    pub(crate) fn write_zeroes(cid: u16, nsid: u32, slba: u64, nlb: u32) -> Self {
        let mut c = Self::rw(cid, true, nsid, slba, nlb, false);
        c.0[0] = OPC_WRITE_ZEROES;
        c
    }

    /// Flush of namespace `nsid`'s volatile write cache: no data.
    pub(crate) fn flush(cid: u16, nsid: u32) -> Self {
        let mut c = Self::new(OPC_FLUSH, cid);
        put32(&mut c.0, 4, nsid);
        c
    }

    /// The data pointer: a keyed data block of `len` bytes at `addr` of
    /// the registration `rkey`, to be invalidated by the target.
    pub(crate) fn set_keyed_sgl(&mut self, addr: u64, len: u32, rkey: u32) {
        self.0[24..32].copy_from_slice(&addr.to_le_bytes());
        self.0[32..35].copy_from_slice(&len.to_le_bytes()[..3]);
        put32(&mut self.0, 35, rkey);
        self.0[39] = SGL_KEYED_INVALIDATE;
    }

    /// The data pointer: `len` bytes of in-capsule data, right after the
    /// command (offset 0: ICDOFF is 0).
    pub(crate) fn set_inline_sgl(&mut self, len: u32) {
        self.0[24..32].fill(0);
        put32(&mut self.0, 32, len);
        self.0[36..39].fill(0);
        self.0[39] = SGL_DATA_OFFSET;
    }

    pub(crate) fn cid(&self) -> u16 {
        u16::from_le_bytes([self.0[2], self.0[3]])
    }
}

/// The data of a Fabrics Connect (`struct nvmf_connect_data`, 1024 bytes).
pub(crate) struct ConnectData;

impl ConnectData {
    pub(crate) const LEN: usize = 1024;
    /// Where the subsystem's NQN lies: the offset a Connect Invalid
    /// Parameter status names for it.
    pub(crate) const SUBSYSNQN: u32 = 256;
    pub(crate) const HOSTNQN: u32 = 512;

    /// A dynamic controller's ID: an admin queue's Connect asks for one.
    pub(crate) const DYNAMIC: u16 = 0xffff;

    /// The host's ID, the controller's (an I/O queue's Connect names the
    /// admin queue's; [`ConnectData::DYNAMIC`] otherwise) and the two NQNs
    /// (at most `NQN_MAX` bytes each), NUL terminated.
    pub(crate) fn encode(
        hostid: &[u8; 16],
        cntlid: u16,
        subsysnqn: &str,
        hostnqn: &str,
    ) -> Result<KVec<u8>> {
        let mut d = KVec::from_elem(0u8, Self::LEN, GFP_KERNEL)?;
        d[..16].copy_from_slice(hostid);
        put16(&mut d, 16, cntlid);
        let at = Self::SUBSYSNQN as usize;
        d[at..at + subsysnqn.len()].copy_from_slice(subsysnqn.as_bytes());
        let at = Self::HOSTNQN as usize;
        d[at..at + hostnqn.len()].copy_from_slice(hostnqn.as_bytes());
        Ok(d)
    }
}

/// A response capsule (`struct nvme_completion`, 16 bytes).
#[derive(Clone, Copy)]
pub(crate) struct Cqe {
    /// The command's result (Connect: the cntlid in its low 16 bits;
    /// Property Get: the value).
    pub(crate) result: u64,
    pub(crate) command_id: u16,
    /// The status, without the phase bit: SC 7:0, SCT 10:8, DNR 14.
    pub(crate) status: u16,
}

impl Cqe {
    pub(crate) const LEN: usize = 16;

    pub(crate) fn decode(b: &[u8; Self::LEN]) -> Self {
        let mut r = [0u8; 8];
        r.copy_from_slice(&b[..8]);
        Cqe {
            result: u64::from_le_bytes(r),
            command_id: u16::from_le_bytes([b[12], b[13]]),
            status: u16::from_le_bytes([b[14], b[15]]) >> 1,
        }
    }

    /// The status code and type (SCT << 8 | SC), without DNR and MORE.
    pub(crate) fn code(&self) -> u16 {
        self.status & 0x7ff
    }

    /// Do Not Retry: the command would fail again.
    pub(crate) fn dnr(&self) -> bool {
        self.status & (1 << 14) != 0
    }
}

/// The errno of an I/O command's status (SCT << 8 | SC), as the C host's
/// `nvme_error_status` and `blk_status_to_errno` give it: capacity
/// exceeded `ENOSPC` (`BLK_STS_NOSPC`); an LBA out of range, a command
/// interrupted, a namespace not ready `EREMOTEIO` (`BLK_STS_TARGET`); an
/// opcode, field, namespace or attributes the controller does not take
/// `EOPNOTSUPP` (`BLK_STS_NOTSUPP`); a media error (write fault, read
/// error, compare failed, access denied, unwritten block, read only)
/// `ENODATA` (`BLK_STS_MEDIUM`); anything else `EIO`. (A status without
/// DNR is first retried: `io.rs`.)
pub(crate) fn io_errno(code: u16) -> Error {
    match code {
        0x081 => ENOSPC,
        0x080 | 0x021 | 0x082 => kverbs::errno::eremoteio(),
        0x001 | 0x002 | 0x00b | 0x180 => kverbs::errno::eopnotsupp(),
        0x182 | 0x280 | 0x281 | 0x285 | 0x286 | 0x287 => kverbs::errno::enodata(),
        _ => EIO,
    }
}

/// The status codes of a Fabrics Connect's failures (command specific,
/// SCT 1).
pub(crate) const SC_CONNECT_FORMAT: u16 = 0x180;
pub(crate) const SC_CONNECT_INVALID_PARAM: u16 = 0x182;
pub(crate) const SC_CONNECT_INVALID_HOST: u16 = 0x184;

/// What a command's status means, for the connect file and the log.
pub(crate) fn status_msg(code: u16) -> &'static str {
    match code {
        0 => "success",
        0x002 => "invalid field",
        0x006 => "internal error",
        SC_CONNECT_FORMAT => "incompatible format",
        0x181 => "controller busy",
        SC_CONNECT_INVALID_PARAM => "invalid parameters",
        0x183 => "restart discovery",
        SC_CONNECT_INVALID_HOST => "invalid host",
        _ => "unrecognized status",
    }
}

/// What Identify Controller says that the host uses or shows
/// (`struct nvme_id_ctrl`).
#[derive(Clone, Copy)]
pub(crate) struct IdCtrl {
    pub(crate) sn: [u8; 20],
    pub(crate) mn: [u8; 40],
    pub(crate) fr: [u8; 8],
    /// Maximum data transfer size, a power of two of CAP.MPSMIN pages (0:
    /// no limit).
    pub(crate) mdts: u8,
    pub(crate) cntlid: u16,
    /// Keep-alive granularity, 100 ms units.
    pub(crate) kas: u16,
    /// Namespaces (the highest NSID).
    pub(crate) nn: u32,
    /// Optional NVM commands supported ([`ONCS_WRITE_ZEROES`], ...).
    pub(crate) oncs: u16,
    /// Volatile write cache (bit 0: present): Flush and FUA mean something.
    pub(crate) vwc: u8,
    pub(crate) sgls: u32,
    /// Command and response capsule sizes, 16-byte units.
    pub(crate) ioccsz: u32,
    pub(crate) iorcsz: u32,
    /// Where in-capsule data starts (16-byte units): the host takes 0
    /// only, as the C host.
    pub(crate) icdoff: u16,
}

impl IdCtrl {
    pub(crate) const LEN: usize = 4096;

    /// `None` if `b` is shorter than [`IdCtrl::LEN`].
    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        let b = b.get(..Self::LEN)?;
        let mut id = IdCtrl {
            sn: [0; 20],
            mn: [0; 40],
            fr: [0; 8],
            mdts: b[77],
            cntlid: u16::from_le_bytes([b[78], b[79]]),
            kas: u16::from_le_bytes([b[320], b[321]]),
            nn: le32(b, 516),
            oncs: u16::from_le_bytes([b[520], b[521]]),
            vwc: b[525],
            sgls: le32(b, 536),
            ioccsz: le32(b, 1792),
            iorcsz: le32(b, 1796),
            icdoff: u16::from_le_bytes([b[1800], b[1801]]),
        };
        id.sn.copy_from_slice(&b[4..24]);
        id.mn.copy_from_slice(&b[24..64]);
        id.fr.copy_from_slice(&b[64..72]);
        Some(id)
    }
}

/// What Identify Namespace says of a namespace's size and format
/// (`struct nvme_id_ns`).
#[derive(Clone, Copy)]
pub(crate) struct IdNs {
    /// Its size, in logical blocks.
    pub(crate) nsze: u64,
    /// log2 of the logical block size of its format in use.
    pub(crate) lbads: u8,
}

impl IdNs {
    pub(crate) const LEN: usize = 4096;

    /// `None` if `b` is shorter than [`IdNs::LEN`].
    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        let b = b.get(..Self::LEN)?;
        let mut nsze = [0u8; 8];
        nsze.copy_from_slice(&b[..8]);
        // FLBAS: the format's index, bits 3:0, and 6:5 above 16 formats.
        let flbas = b[26];
        let index = usize::from(flbas & 0xf) | usize::from((flbas >> 5) & 3) << 4;
        // `lbaf[index]` at 128, 4 bytes each: ms (le16), ds, rp.
        Some(IdNs {
            nsze: u64::from_le_bytes(nsze),
            lbads: b[128 + 4 * index + 2],
        })
    }
}

/// The IDs of an active namespace list (Identify CNS 2), up to its 0.
pub(crate) fn ns_list(b: &[u8]) -> impl Iterator<Item = u32> + '_ {
    b.chunks_exact(4)
        .map(|c| le32(c, 0))
        .take_while(|&id| id != 0)
}

/// A version (the VS property, `NVME_VS`): major.minor, and .tertiary
/// if not 0, as nvmet's `attr_version` shows it.
pub(crate) struct Version(pub(crate) u32);

impl core::fmt::Display for Version {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{}", self.0 >> 16, (self.0 >> 8) & 0xff)?;
        if self.0 & 0xff != 0 {
            write!(f, ".{}", self.0 & 0xff)?;
        }
        Ok(())
    }
}

kverbs::kernel_display!(Version);

/// An ASCII field of Identify (space padded), trimmed.
pub(crate) fn ascii(b: &[u8]) -> &str {
    core::str::from_utf8(b)
        .unwrap_or("?")
        .trim_end_matches([' ', '\0'])
}

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

fn get16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
