// SPDX-License-Identifier: GPL-2.0

//! The option string of a connect, as nvme-cli writes it to
//! /dev/nvme-fabrics (drivers/nvme/host/fabrics.c, `opt_tokens`):
//! `transport=rdma,traddr=A.B.C.D,trsvcid=4420,nqn=NQN,...`, tokens split
//! on `,` and newlines, empty ones skipped, an unknown one refused.

use core::fmt::Write;
use kernel::prelude::*;
use kverbs::tcp::Ipv4;

/// The longest NQN: `NVMF_NQN_SIZE` (223) counts its NUL, and the C
/// host refuses a name of 223 bytes or more.
pub(crate) const NQN_MAX: usize = 222;

/// An NQN, kept as given.
#[derive(Clone, Copy)]
pub(crate) struct Nqn {
    len: u8,
    bytes: [u8; NQN_MAX],
}

impl Nqn {
    fn new(s: &str) -> Option<Self> {
        if s.is_empty() || s.len() > NQN_MAX {
            return None;
        }
        let mut n = Nqn {
            len: s.len() as u8,
            bytes: [0; NQN_MAX],
        };
        n.bytes[..s.len()].copy_from_slice(s.as_bytes());
        Some(n)
    }

    pub(crate) fn as_str(&self) -> &str {
        // Made from a `&str`.
        core::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("?")
    }
}

/// A connect's options, with the C host's defaults.
#[derive(Clone, Copy)]
pub(crate) struct Options {
    pub(crate) traddr: Ipv4,
    pub(crate) trsvcid: u16,
    pub(crate) nqn: Nqn,
    pub(crate) hostnqn: Option<Nqn>,
    /// The host's identifier, a UUID (default [`DEFAULT_HOSTID`]).
    pub(crate) hostid: [u8; 16],
    /// I/O queues asked for (the C host's default: one per online CPU).
    pub(crate) nr_io_queues: Option<u32>,
    /// Entries of each I/O queue (16 to 1024, default 128).
    pub(crate) queue_size: u32,
    /// Keep-alive timeout, seconds (default 5; 0 is 5 too, as for the C
    /// host's I/O controllers).
    pub(crate) keep_alive_tmo: u32,
    /// Seconds between reconnects (default 10).
    pub(crate) reconnect_delay: u32,
    /// Seconds until a lost controller is given up (default 600; < 0:
    /// never).
    pub(crate) ctrl_loss_tmo: i32,
    /// kverbs_nvme's own, for its tests: the record format and the admin
    /// queue's host SQ size (0's based) sent in the connection request,
    /// instead of 0 and 31.
    pub(crate) test_recfmt: Option<u16>,
    pub(crate) test_hsqsize: Option<u16>,
    /// kverbs_nvme's own: the record format of the Fabrics Connect
    /// command, instead of 0.
    pub(crate) test_connect_recfmt: Option<u16>,
    /// kverbs_nvme's own: Connect asks for the keep-alive timeout, but
    /// no Keep Alive is sent (the target's timer then expires).
    pub(crate) test_no_keep_alive: bool,
}

/// The host identifier when none is given: kverbs_nvme's own, fixed
/// (the C host makes one at random when it loads). nvmet keeps it (for
/// reservations) but does not require it to be unique; the host NQN it
/// makes ([`Options::hostnqn_or_default`]) names the host.
pub(crate) const DEFAULT_HOSTID: [u8; 16] = [
    // "kverbs", then version 4 and the RFC 4122 variant where a UUID has
    // them (bytes 6 and 8): 6b766572-6273-4f6e-b76d-650000000001.
    0x6b, 0x76, 0x65, 0x72, 0x62, 0x73, 0x4f, 0x6e, 0xb7, 0x6d, 0x65, 0, 0, 0, 0, 1,
];

/// Parses a UUID, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
fn uuid(v: &str) -> Option<[u8; 16]> {
    let b = v.as_bytes();
    if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
        return None;
    }
    let mut out = [0u8; 16];
    let mut digits = b.iter().filter(|&&c| c != b'-');
    for o in out.iter_mut() {
        let hi = (*digits.next()? as char).to_digit(16)?;
        let lo = (*digits.next()? as char).to_digit(16)?;
        *o = (hi << 4 | lo) as u8;
    }
    Some(out)
}

/// Why an option string was refused: the errno, and a reason for the
/// writer (the control file shows it, the log says it).
pub(crate) struct Refused {
    pub(crate) errno: Error,
    pub(crate) why: KVec<u8>,
}

impl Refused {
    fn new(errno: Error, args: core::fmt::Arguments<'_>) -> Self {
        // What the writer wrote is quoted in it: never its control bytes
        // (a NUL in the kernel log, and on a console, makes it binary).
        let mut why = Escaped(Text(KVec::new()));
        let _ = why.write_fmt(args);
        Refused {
            errno,
            why: why.0 .0,
        }
    }
}

/// Text into a `KVec`, its control characters escaped as [`Shown`] does.
struct Escaped(Text);

impl Write for Escaped {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        write!(self.0, "{}", Shown(s))
    }
}

/// Text from a writer, as the log and a control file show it: its control
/// characters (and DEL) as `\xNN`.
pub(crate) struct Shown<'a>(pub(crate) &'a str);

impl core::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for c in self.0.chars() {
            if c.is_ascii_control() {
                write!(f, "\\x{:02x}", c as u32)?;
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

kverbs::kernel_display!(Shown<'_>);

/// Text into a `KVec` (what does not fit in memory is cut).
pub(crate) struct Text(pub(crate) KVec<u8>);

impl Write for Text {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let _ = self.0.extend_from_slice(s.as_bytes(), GFP_KERNEL);
        Ok(())
    }
}

macro_rules! refuse {
    ($errno:expr, $($arg:tt)*) => {
        return Err(Refused::new($errno, format_args!($($arg)*)))
    };
}

fn number<T: core::str::FromStr>(key: &str, v: &str) -> Result<T, Refused> {
    v.parse()
        .map_err(|_| Refused::new(EINVAL, format_args!("{}={}: not a number", key, v)))
}

impl Options {
    /// Parses `input`, one write to the `connect` file.
    pub(crate) fn parse(input: &[u8]) -> Result<Self, Refused> {
        let Ok(text) = core::str::from_utf8(input) else {
            refuse!(EINVAL, "the options are not text");
        };
        let (mut transport, mut traddr, mut nqn) = (None, None, None);
        let mut o = Options {
            traddr: Ipv4::ANY,
            trsvcid: 4420,
            nqn: Nqn {
                len: 0,
                bytes: [0; NQN_MAX],
            },
            hostnqn: None,
            hostid: DEFAULT_HOSTID,
            nr_io_queues: None,
            queue_size: 128,
            keep_alive_tmo: 5,
            reconnect_delay: 10,
            ctrl_loss_tmo: 600,
            test_recfmt: None,
            test_hsqsize: None,
            test_connect_recfmt: None,
            test_no_keep_alive: false,
        };
        for token in text.split([',', '\n']).filter(|t| !t.is_empty()) {
            let Some((key, v)) = token.split_once('=') else {
                refuse!(EINVAL, "'{}': not KEY=VALUE", token);
            };
            match key {
                "transport" => transport = Some(v),
                "traddr" => {
                    let Ok(a) = v.parse::<core::net::Ipv4Addr>() else {
                        refuse!(
                            EINVAL,
                            "traddr={}: not an IPv4 address (IPv6 is not supported yet)",
                            v
                        );
                    };
                    traddr = Some(Ipv4(a.octets()));
                }
                "trsvcid" => {
                    o.trsvcid = number(key, v)?;
                    if o.trsvcid == 0 {
                        refuse!(EINVAL, "trsvcid=0: not a port");
                    }
                }
                "nqn" => match Nqn::new(v) {
                    Some(n) => nqn = Some(n),
                    None => refuse!(EINVAL, "nqn: empty or over {} bytes", NQN_MAX),
                },
                "hostnqn" => match Nqn::new(v) {
                    Some(n) => o.hostnqn = Some(n),
                    None => refuse!(EINVAL, "hostnqn: empty or over {} bytes", NQN_MAX),
                },
                "hostid" => match uuid(v) {
                    Some(id) => o.hostid = id,
                    None => refuse!(EINVAL, "hostid={}: not a UUID", v),
                },
                "nr_io_queues" => {
                    let n: u32 = number(key, v)?;
                    if n == 0 {
                        refuse!(EINVAL, "nr_io_queues=0: at least 1");
                    }
                    o.nr_io_queues = Some(n);
                }
                "queue_size" => {
                    o.queue_size = number(key, v)?;
                    if !(16..=1024).contains(&o.queue_size) {
                        refuse!(EINVAL, "queue_size={}: 16 to 1024", o.queue_size);
                    }
                }
                "keep_alive_tmo" => {
                    o.keep_alive_tmo = number(key, v)?;
                    // Connect carries it in milliseconds, in 32 bits.
                    if o.keep_alive_tmo > u32::MAX / 1000 {
                        refuse!(
                            EINVAL,
                            "keep_alive_tmo={}: at most {} seconds",
                            o.keep_alive_tmo,
                            u32::MAX / 1000
                        );
                    }
                }
                "reconnect_delay" => {
                    o.reconnect_delay = number(key, v)?;
                    if o.reconnect_delay == 0 {
                        refuse!(EINVAL, "reconnect_delay=0: at least 1 second");
                    }
                }
                "ctrl_loss_tmo" => o.ctrl_loss_tmo = number(key, v)?,
                "test_recfmt" => o.test_recfmt = Some(number(key, v)?),
                "test_hsqsize" => o.test_hsqsize = Some(number(key, v)?),
                "test_connect_recfmt" => o.test_connect_recfmt = Some(number(key, v)?),
                "test_no_keep_alive" => match v {
                    "0" => o.test_no_keep_alive = false,
                    "1" => o.test_no_keep_alive = true,
                    _ => refuse!(EINVAL, "test_no_keep_alive={}: 0 or 1", v),
                },
                _ => refuse!(EINVAL, "unknown option '{}'", key),
            }
        }
        match transport {
            Some("rdma") => {}
            Some(t) => refuse!(EINVAL, "transport={}: only rdma", t),
            None => refuse!(EINVAL, "no transport= (rdma)"),
        }
        let Some(traddr) = traddr else {
            refuse!(EINVAL, "no traddr=");
        };
        let Some(nqn) = nqn else {
            refuse!(EINVAL, "no nqn=");
        };
        o.traddr = traddr;
        o.nqn = nqn;
        if o.keep_alive_tmo == 0 {
            o.keep_alive_tmo = 5;
        }
        Ok(o)
    }
}

impl Options {
    /// The host NQN: the one given, else the C host's form of a default,
    /// `nqn.2014-08.org.nvmexpress:uuid:` and the host identifier.
    pub(crate) fn hostnqn_or_default(&self) -> Nqn {
        if let Some(n) = self.hostnqn {
            return n;
        }
        let mut t = Text(KVec::new());
        let h = &self.hostid;
        let _ = write!(
            t,
            "nqn.2014-08.org.nvmexpress:uuid:{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11], h[12], h[13],
            h[14], h[15]
        );
        // 68 bytes: within `NQN_MAX` (an allocation failure leaves it
        // short, and the target refuses it).
        Nqn::new(core::str::from_utf8(&t.0).unwrap_or("?")).unwrap_or(Nqn {
            len: 1,
            bytes: [b'?'; NQN_MAX],
        })
    }
}
