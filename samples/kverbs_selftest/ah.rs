// SPDX-License-Identifier: GPL-2.0

//! Cases of address handles: ports the device does not have, the
//! destination MAC resolved on RoCE.

use crate::common::{av, first_gid, ok, port, refused, Env, Outcome, Text};
use core::fmt::Write;
use kernel::prelude::*;
use kverbs::{ah::Ah, device::Gid, pd::Pd};

pub(crate) fn ah_refuses_port_out_of_range(env: &Env, out: &mut Text) -> Outcome {
    let pd = ok(Pd::new(&env.a), "PD", out)?;
    let (i, gid) = first_gid(&env.a).ok_or("no GID")?;
    let past = *env.a.ports().end() + 1;
    refused(
        Ah::new(&pd, past, &av(gid, i)),
        EINVAL,
        "AH past the last port",
        out,
    )?;
    refused(Ah::new(&pd, 0, &av(gid, i)), EINVAL, "AH on port 0", out)
}

/// On RoCE an AH's destination MAC is resolved: a multicast group's is
/// mapped from its address, a unicast address's comes from the IP stack
/// (for our own address, our netdev's MAC, written out for the test to
/// compare).
pub(crate) fn ah_resolves_roce_dmac(env: &Env, out: &mut Text) -> Outcome {
    let dev = &env.b;
    let pd = ok(Pd::new(dev), "PD", out)?;
    let (i, gid) = first_gid(dev).ok_or("no GID")?;
    let mut v4 = [0u8; 16];
    v4[10] = 0xff;
    v4[11] = 0xff;
    v4[12..].copy_from_slice(&[239, 1, 1, 1]);
    let mut v6 = [0u8; 16];
    v6[0] = 0xff;
    v6[1] = 0x0e;
    v6[14] = 0x12;
    v6[15] = 0x34;
    let groups = [
        (Gid(v4), [0x01, 0x00, 0x5e, 0x01, 0x01, 0x01], "239.1.1.1"),
        (Gid(v6), [0x33, 0x33, 0x00, 0x00, 0x12, 0x34], "ff0e::1234"),
    ];
    for (mgid, want, name) in groups {
        let ah = ok(Ah::new(&pd, port(dev), &av(mgid, i)), name, out)?;
        if ah.dmac() != Some(want) {
            let _ = write!(out, "{}: dmac {:?}, want {:?}", name, ah.dmac(), want);
            return Err(name);
        }
    }
    let own = ok(
        Ah::new(&pd, port(dev), &av(gid, i)),
        "AH to our own address",
        out,
    )?;
    let m = own.dmac().ok_or("no dmac")?;
    let _ = write!(
        out,
        "dmac {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    );
    Ok(())
}
