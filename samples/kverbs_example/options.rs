// SPDX-License-Identifier: GPL-2.0

//! The option strings of the control files: `key` or `key=value`
//! options, numbers in a range, dotted IPv4 addresses.

use kernel::prelude::*;
use kverbs::{cq::PollCtx, device::Device, device::Mtu, tcp::Ipv4};

/// `key=v` of the control file `file`: a decimal or `0x` number in
/// `min..=max` (`ERANGE` outside, `EINVAL` if not a number, each with a
/// kernel log line).
pub(crate) fn parse_num_in<T: TryFrom<u64>>(
    file: &str,
    dev: &Device,
    key: &str,
    v: &str,
    min: u64,
    max: u64,
) -> Result<T> {
    let n = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse::<u64>(),
    };
    let n = in_range(file, dev, key, v, n.ok(), min, max)?;
    T::try_from(n).map_err(|_| EINVAL)
}

/// [`parse_num_in`] for a decimal number only.
pub(crate) fn parse_dec_in(
    file: &str,
    dev: &Device,
    key: &str,
    v: &str,
    min: u64,
    max: u64,
) -> Result<u64> {
    in_range(file, dev, key, v, v.parse::<u64>().ok(), min, max)
}

/// The number `n` that `key=v` of the file `file` gave, if it is one, in
/// `min..=max`.
fn in_range(
    file: &str,
    dev: &Device,
    key: &str,
    v: &str,
    n: Option<u64>,
    min: u64,
    max: u64,
) -> Result<u64> {
    match n {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        Some(n) => {
            pr_warn!(
                "{}: {}: {}={} is out of range [{}, {}]\n",
                dev.name(),
                file,
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
                dev.name(),
                file,
                key,
                v
            );
            Err(EINVAL)
        }
    }
}

/// A dotted IPv4 address.
fn parse_ipv4(v: &str) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut parts = v.split('.');
    for b in out.iter_mut() {
        *b = parts.next()?.parse().ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Parses `key=value` options separated by commas, blanks or newlines.
/// The options of a control string of the file `file`: `key` or
/// `key=value`, separated by commas, blanks or newlines. `EINVAL` (and a
/// log line) if the string is not text.
pub(crate) fn options<'a>(
    dev: &Device,
    file: &str,
    input: &'a [u8],
) -> Result<impl Iterator<Item = (&'a str, Option<&'a str>)>> {
    let text = core::str::from_utf8(input).map_err(|_| {
        pr_warn!("{}: {}: the control string is not text\n", dev.name(), file);
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

/// The value of option `key` of the file `file`, or `EINVAL` (and a log
/// line) if it has none.
pub(crate) fn need<'a>(
    dev: &Device,
    file: &str,
    key: &str,
    val: Option<&'a str>,
) -> Result<&'a str> {
    val.ok_or_else(|| {
        pr_warn!("{}: {}: '{}' needs a value\n", dev.name(), file, key);
        EINVAL
    })
}

/// `addr=v` of the file `file`: a dotted IPv4 address, or `EINVAL` (and a
/// log line).
pub(crate) fn parse_addr(dev: &Device, file: &str, v: &str) -> Result<Ipv4> {
    parse_ipv4(v).map(Ipv4).ok_or_else(|| {
        pr_warn!(
            "{}: {}: addr '{}' is not an IPv4 address\n",
            dev.name(),
            file,
            v
        );
        EINVAL
    })
}

/// `key=v` of the file `file`: a path MTU in bytes.
pub(crate) fn parse_mtu(dev: &Device, file: &str, key: &str, v: &str) -> Result<Mtu> {
    let bytes: u32 = parse_num_in(file, dev, key, v, 256, 4096)?;
    Mtu::from_bytes(bytes).ok_or_else(|| {
        pr_warn!(
            "{}: {}: mtu {} is not 256, 512, 1024, 2048 or 4096\n",
            dev.name(),
            file,
            bytes
        );
        EINVAL
    })
}

/// `poll=v` of the file `file`: how a CQ is polled.
pub(crate) fn parse_poll(dev: &Device, file: &str, v: &str) -> Result<PollCtx> {
    PollCtx::from_name(v).ok_or_else(|| {
        pr_warn!(
            "{}: {}: poll '{}' is not direct, softirq or workqueue\n",
            dev.name(),
            file,
            v
        );
        EINVAL
    })
}

/// A flag `key` of the file `file`: `EINVAL` (and a log line) if it was
/// given a value.
pub(crate) fn no_value(dev: &Device, file: &str, key: &str, val: Option<&str>) -> Result {
    if val.is_some() {
        pr_warn!("{}: {}: '{}' takes no value\n", dev.name(), file, key);
        return Err(EINVAL);
    }
    Ok(())
}
