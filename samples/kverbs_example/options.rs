// SPDX-License-Identifier: GPL-2.0

//! The option strings of the control files: `key` or `key=value`
//! options, numbers in a range, dotted IPv4 addresses.

use kernel::prelude::*;
use kverbs::{cq::PollCtx, device::Device, device::Mtu, tcp::Ipv4};

/// A dotted IPv4 address.
fn parse_ipv4(v: &str) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut parts = v.split('.');
    for b in out.iter_mut() {
        *b = parts.next()?.parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// The control string of the file `file` of `dev`: its options are
/// parsed through this, and the kernel log lines that say what is wrong
/// with them name both.
#[derive(Clone, Copy)]
pub(crate) struct Opts<'d> {
    dev: &'d Device,
    file: &'static str,
}

impl<'d> Opts<'d> {
    /// The control string of the file `file` of `dev`.
    pub(crate) fn new(dev: &'d Device, file: &'static str) -> Self {
        Opts { dev, file }
    }

    /// The options of `input`: `key` or `key=value`, separated by commas,
    /// blanks or newlines. `EINVAL` (and a log line) if it is not text.
    pub(crate) fn options<'a>(
        self,
        input: &'a [u8],
    ) -> Result<impl Iterator<Item = (&'a str, Option<&'a str>)>> {
        let text = core::str::from_utf8(input).map_err(|_| {
            pr_warn!(
                "{}: {}: the control string is not text\n",
                self.dev.name(),
                self.file
            );
            EINVAL
        })?;
        Ok(text
            .split(|c: char| c == ',' || c.is_ascii_whitespace())
            .filter(|opt| !opt.is_empty())
            .map(|opt| match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            }))
    }

    /// The value of option `key`, or `EINVAL` (and a log line) if it has
    /// none.
    pub(crate) fn need<'a>(self, key: &str, val: Option<&'a str>) -> Result<&'a str> {
        val.ok_or_else(|| {
            pr_warn!(
                "{}: {}: '{}' needs a value\n",
                self.dev.name(),
                self.file,
                key
            );
            EINVAL
        })
    }

    /// A flag `key`: `EINVAL` (and a log line) if it was given a value.
    pub(crate) fn no_value(self, key: &str, val: Option<&str>) -> Result {
        if val.is_some() {
            pr_warn!(
                "{}: {}: '{}' takes no value\n",
                self.dev.name(),
                self.file,
                key
            );
            return Err(EINVAL);
        }
        Ok(())
    }

    /// An unknown option `key`: logs it, and gives `EINVAL`.
    pub(crate) fn unknown_key(self, key: &str) -> Error {
        pr_warn!(
            "{}: {}: unknown key '{}'\n",
            self.dev.name(),
            self.file,
            key
        );
        EINVAL
    }

    /// `key=v`, one of the `names`: what `v` names, or `EINVAL` (and a log
    /// line) if it is none of them.
    pub(crate) fn pick<T: Copy>(self, key: &str, v: &str, names: &[(&str, T)]) -> Result<T> {
        match names.iter().find(|(name, _)| *name == v) {
            Some((_, t)) => Ok(*t),
            None => {
                pr_warn!(
                    "{}: {}: unknown {} '{}'\n",
                    self.dev.name(),
                    self.file,
                    key,
                    v
                );
                Err(EINVAL)
            }
        }
    }

    /// `key=v`: a decimal or `0x` number in `min..=max` (`ERANGE` outside,
    /// `EINVAL` if not a number, each with a kernel log line).
    pub(crate) fn num_in<T: TryFrom<u64>>(
        self,
        key: &str,
        v: &str,
        min: u64,
        max: u64,
    ) -> Result<T> {
        let n = match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => v.parse::<u64>(),
        };
        let n = self.in_range(key, v, n.ok(), min, max)?;
        T::try_from(n).map_err(|_| EINVAL)
    }

    /// [`Opts::num_in`] for a decimal number only.
    pub(crate) fn dec_in(self, key: &str, v: &str, min: u64, max: u64) -> Result<u64> {
        self.in_range(key, v, v.parse::<u64>().ok(), min, max)
    }

    /// The number `n` that `key=v` gave, if it is one, in `min..=max`.
    fn in_range(self, key: &str, v: &str, n: Option<u64>, min: u64, max: u64) -> Result<u64> {
        match n {
            Some(n) if (min..=max).contains(&n) => Ok(n),
            Some(n) => {
                pr_warn!(
                    "{}: {}: {}={} is out of range [{}, {}]\n",
                    self.dev.name(),
                    self.file,
                    key,
                    n,
                    min,
                    max
                );
                Err(ERANGE)
            }
            None => {
                pr_warn!(
                    "{}: {}: {}: '{}' is not a number\n",
                    self.dev.name(),
                    self.file,
                    key,
                    v
                );
                Err(EINVAL)
            }
        }
    }

    /// `addr=v`: a dotted IPv4 address, or `EINVAL` (and a log line).
    pub(crate) fn addr(self, v: &str) -> Result<Ipv4> {
        parse_ipv4(v).map(Ipv4).ok_or_else(|| {
            pr_warn!(
                "{}: {}: addr '{}' is not an IPv4 address\n",
                self.dev.name(),
                self.file,
                v
            );
            EINVAL
        })
    }

    /// `key=v`: a path MTU in bytes.
    pub(crate) fn mtu(self, key: &str, v: &str) -> Result<Mtu> {
        let bytes: u32 = self.num_in(key, v, 256, 4096)?;
        Mtu::from_bytes(bytes).ok_or_else(|| {
            pr_warn!(
                "{}: {}: mtu {} is not 256, 512, 1024, 2048 or 4096\n",
                self.dev.name(),
                self.file,
                bytes
            );
            EINVAL
        })
    }

    /// `poll=v`: how a CQ is polled.
    pub(crate) fn poll(self, v: &str) -> Result<PollCtx> {
        PollCtx::from_name(v).ok_or_else(|| {
            pr_warn!(
                "{}: {}: poll '{}' is not direct, adaptive, softirq or workqueue\n",
                self.dev.name(),
                self.file,
                v
            );
            EINVAL
        })
    }
}
