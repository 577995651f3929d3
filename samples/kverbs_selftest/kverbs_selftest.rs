// SPDX-License-Identifier: GPL-2.0

//! kverbs_selftest: in-kernel tests of what the kverbs layer refuses.
//!
//! Each case hands the safe API something a careless (but safe) caller
//! could: objects of two devices or two PDs mixed, a port the device does
//! not have, a CQ too small for its QPs, a work request id of another QP or
//! one already released, remote write without local write, two QPs on one
//! connection manager ID. Before kverbs refused them, each of these reached
//! the driver and ended in a NULL or wild dereference, out-of-bounds reads
//! or DMA to the wrong address; now each must fail with its errno, and the
//! kselftest around it (kverbs_soundness.sh) fails on any kernel report.
//! The cases are safe Rust, like the rest of the module, in a file per
//! object under test (`qp.rs`, `cq.rs`, `ah.rs`, `mr.rs`, `stream.rs`,
//! `cm.rs`, `dma.rs`, `srq.rs`, `util.rs` for the helpers), those of
//! concurrency and callbacks in `races.rs`, what they share in
//! `common.rs`.
//!
//! The module is an RDMA client of its own, on the layer (kverbs.ko): its
//! client keeps the list of devices the cases may use. Writing
//! `A B IP [CASE]` to `/sys/kernel/debug/kverbs_selftest/selftest` runs
//! every case (or only `CASE`) with device `A`, device `B` (another one)
//! and `IP`, an IPv4 address of `B`'s netdev for the connection manager;
//! reading the file gives a plan and one KTAP line per case run (`ok N
//! name` or `not ok N name # why`), or, before any run, `case NAME` for
//! each case. A run holds its two devices: a device removed meanwhile
//! leaves the list at once, and its unregistration waits for the run.
//! Writing a device's name to `forget` leaks two event sinks' registrations
//! on it (`forget.rs`): for kverbs_forget.sh, which unloads the module and
//! raises events after. Writing one to `drop_reg` registers a client whose
//! sink drops that client's registration (`drop_reg.rs`): for
//! kverbs_soundness.sh, which removes the device while the sink runs.
//! `blk` makes RAM disks on the layer's block binding (`blk.rs`), for
//! kverbs_blk.sh; `io` disks whose requests travel on the layer's capsule
//! queue to a peer QP (`io.rs`), for kverbs_io.sh.

#![deny(unsafe_code)]

mod ah;
mod blk;
mod cm;
mod common;
mod cq;
mod dma;
mod drop_reg;
mod forget;
mod io;
mod mr;
mod qp;
mod races;
mod srq;
mod stream;
mod util;

use common::{Case, Env, Held, Text};
use core::fmt::Write;
use kernel::{c_str, new_mutex, prelude::*, sync::Arc, sync::Mutex};
use kverbs::ARef;
use kverbs::{
    client::{Client, Registration},
    debugfs::{Dir, File},
    device::Device,
    sysfs::{Attribute, KernelDir},
    tcp::Ipv4,
    Show, Store,
};

module! {
    type: KverbsSelftest,
    name: "kverbs_selftest",
    description: "kverbs self-test: in-kernel tests of what the layer refuses",
    license: "GPL",
}

/// The devices the client has, for the self-test to pick from.
pub(crate) type Devices = Mutex<KVec<ARef<Device>>>;

/// Adds `dev` to `devices`.
fn add_device(devices: &Devices, dev: &Device) -> Result {
    devices.lock().push(dev.into(), GFP_KERNEL)?;
    Ok(())
}

/// Drops `dev` from `devices`: its unregistration waits for our count.
fn remove_device(devices: &Devices, dev: &Device) {
    let mut list = devices.lock();
    let old = core::mem::replace(&mut *list, KVec::new());
    for d in old {
        if !d.same_as(dev) {
            // On allocation failure the self-test forgets that device,
            // nothing worse.
            let _ = list.push(d, GFP_KERNEL);
        }
    }
}

const CASES: &[(&str, Case)] = &[
    (
        "qp_refuses_cq_of_other_device",
        qp::qp_refuses_cq_of_other_device,
    ),
    (
        "qp_refuses_port_out_of_range",
        qp::qp_refuses_port_out_of_range,
    ),
    (
        "ah_refuses_port_out_of_range",
        ah::ah_refuses_port_out_of_range,
    ),
    ("qp_takes_cq_room_and_gives_it_back", cq::qp_takes_cq_room),
    (
        "post_recv_refuses_buffer_of_other_device",
        qp::post_recv_refuses_buffer_of_other_device,
    ),
    (
        "post_send_refuses_buffer_of_other_device",
        qp::post_send_refuses_buffer_of_other_device,
    ),
    (
        "post_send_ud_refuses_ah_of_other_pd",
        qp::post_send_ud_refuses_ah_of_other_pd,
    ),
    (
        "mr_map_refuses_buffer_of_other_device",
        mr::mr_map_refuses_buffer_of_other_device,
    ),
    (
        "mr_registration_refuses_qp_of_other_pd",
        mr::mr_registration_refuses_qp_of_other_pd,
    ),
    (
        "mr_registration_refuses_remote_write_without_local_write",
        mr::mr_registration_refuses_remote_write_without_local_write,
    ),
    (
        "wait_refuses_request_of_other_qp",
        qp::wait_refuses_request_of_other_qp,
    ),
    (
        "wait_refuses_released_unsignalled_send",
        qp::wait_refuses_released_unsignalled_send,
    ),
    ("cm_id_takes_one_qp", cm::cm_id_takes_one_qp),
    (
        "cm_connect_refuses_qp_of_other_id",
        cm::cm_connect_refuses_qp_of_other_id,
    ),
    ("ah_resolves_roce_dmac", ah::ah_resolves_roce_dmac),
    (
        "cm_events_of_destroyed_id_dropped",
        cm::cm_events_of_destroyed_id_dropped,
    ),
    (
        "dma_buf_copies_exclude_each_other",
        dma::dma_buf_copies_exclude_each_other,
    ),
    (
        "mr_not_locked_across_registration_wait",
        mr::mr_not_locked_across_registration_wait,
    ),
    (
        "stream_inline_refuses_read_and_oversize",
        stream::stream_inline_refuses_read_and_oversize,
    ),
    (
        "stream_takes_slots_and_gives_them_back",
        stream::stream_takes_slots_and_gives_them_back,
    ),
    (
        "stream_dropped_with_requests_outstanding",
        stream::stream_dropped_with_requests_outstanding,
    ),
    (
        "softirq_cq_freed_right_after_its_last_completion",
        cq::softirq_cq_freed_right_after_its_last_completion,
    ),
    (
        "chunked_buffer_takes_an_sge_per_chunk",
        dma::chunked_buffer_takes_an_sge_per_chunk,
    ),
    (
        "stale_rkey_refused_after_invalidate",
        mr::stale_rkey_refused_after_invalidate,
    ),
    (
        "send_with_invalidate_kills_peer_rkey",
        mr::send_with_invalidate_kills_peer_rkey,
    ),
    (
        "atomic_needs_remote_atomic_access_and_alignment",
        mr::atomic_needs_remote_atomic_access_and_alignment,
    ),
    (
        "atomic_stream_chains_fetch_adds_beside_writes",
        mr::atomic_stream_chains_fetch_adds_beside_writes,
    ),
    ("srq_shared_by_two_qps", srq::srq_shared_by_two_qps),
    (
        "alt_path_needs_auto_path_mig",
        qp::alt_path_needs_auto_path_mig,
    ),
    (
        "direct_cq_shared_by_two_tasks_dropping_qps",
        races::direct_cq_shared_by_two_tasks_dropping_qps,
    ),
    (
        "adaptive_cq_shared_by_two_tasks_dropping_qps",
        races::adaptive_cq_shared_by_two_tasks_dropping_qps,
    ),
    (
        "event_ring_of_4096_snapshotted",
        races::event_ring_of_4096_snapshotted,
    ),
    (
        "event_sink_sleeps_and_drops_its_objects",
        races::event_sink_sleeps_and_drops_its_objects,
    ),
    (
        "two_sinks_drop_each_others_objects",
        races::two_sinks_drop_each_others_objects,
    ),
    (
        "registration_refused_inside_client_add",
        races::registration_refused_inside_client_add,
    ),
    (
        "cm_requests_while_accepted_ids_are_destroyed",
        races::cm_requests_while_accepted_ids_are_destroyed,
    ),
    (
        "mul_div_saturates_past_u64",
        util::mul_div_saturates_past_u64,
    ),
    (
        "cm_listener_dropped_by_its_removal_sink",
        cm::cm_listener_dropped_by_its_removal_sink,
    ),
    (
        "mr_given_up_registration_refuses_every_call",
        mr::mr_given_up_registration_refuses_every_call,
    ),
    (
        "cm_private_data_both_ways_and_consumer_rejection",
        cm::cm_private_data_both_ways_and_consumer_rejection,
    ),
];

/// `selftest`: the control file.
struct Runner {
    devices: Arc<Devices>,
    report: Pin<KBox<Mutex<KVec<u8>>>>,
    held: Arc<Held>,
}

impl Runner {
    fn new(devices: Arc<Devices>, held: Arc<Held>) -> Result<Self> {
        Ok(Runner {
            devices,
            report: KBox::pin_init(new_mutex!(KVec::new()), GFP_KERNEL)?,
            held,
        })
    }

    fn find(&self, name: &str) -> Option<ARef<Device>> {
        self.devices
            .lock()
            .iter()
            .find(|d| d.name().as_str() == name)
            .cloned()
    }
}

fn parse_ipv4(s: &str) -> Option<Ipv4> {
    let mut a = [0u8; 4];
    let mut parts = s.split('.');
    for b in a.iter_mut() {
        *b = parts.next()?.parse().ok()?;
    }
    parts.next().is_none().then_some(Ipv4(a))
}

impl Store for Runner {
    fn store(&self, input: &[u8]) -> Result {
        let text = core::str::from_utf8(input).map_err(|_| EINVAL)?;
        let mut words = text.split_whitespace();
        let (Some(a), Some(b), Some(ip), only, None) = (
            words.next(),
            words.next(),
            words.next(),
            words.next(),
            words.next(),
        ) else {
            pr_err!("selftest: want 'DEVICE_A DEVICE_B IPV4_OF_B [CASE]'\n");
            return Err(EINVAL);
        };
        if let Some(only) = only {
            if !CASES.iter().any(|(name, _)| *name == only) {
                pr_err!("selftest: no case '{}'\n", only);
                return Err(ENOENT);
            }
        }
        let ip = parse_ipv4(ip).ok_or_else(|| {
            pr_err!("selftest: '{}' is not an IPv4 address\n", ip);
            EINVAL
        })?;
        let (Some(a), Some(b)) = (self.find(a), self.find(b)) else {
            pr_err!("selftest: no device '{}' or '{}'\n", a, b);
            return Err(ENODEV);
        };
        if a.same_as(&b) {
            pr_err!("selftest: the two devices must differ\n");
            return Err(EINVAL);
        }
        let env = Env {
            a,
            b,
            ip,
            held: self.held.clone(),
        };
        let mut rep = Text(KVec::new());
        let cases = CASES.iter().filter(|(name, _)| match only {
            None => true,
            Some(o) => o == *name,
        });
        let _ = writeln!(rep, "1..{}", cases.clone().count());
        for (n, (name, case)) in cases.enumerate() {
            let mut why = Text(KVec::new());
            match case(&env, &mut why) {
                Ok(()) => {
                    let _ = writeln!(rep, "ok {} {}", n + 1, name);
                    if !why.0.is_empty() {
                        let _ = writeln!(rep, "# {}", core::str::from_utf8(&why.0).unwrap_or("?"));
                    }
                }
                Err(what) => {
                    let why = core::str::from_utf8(&why.0).unwrap_or("?");
                    pr_err!("{}: {}: {}\n", name, what, why);
                    let _ = writeln!(rep, "not ok {} {} # {}: {}", n + 1, name, what, why);
                }
            }
        }
        *self.report.lock() = rep.0;
        Ok(())
    }
}

impl Show for Runner {
    fn show(&self, out: &mut dyn Write) -> Result {
        let report = self.report.lock();
        if report.is_empty() {
            for (name, _) in CASES {
                writeln!(out, "case {}", name)?;
            }
            return Ok(());
        }
        out.write_str(core::str::from_utf8(&report).unwrap_or("?\n"))?;
        Ok(())
    }
}

/// The RDMA client: it keeps the list of devices.
struct Selftest {
    devices: Arc<Devices>,
    io_disks: Arc<io::Disks>,
}

kverbs::client_slot!(Selftest);

impl Client for Selftest {
    type DeviceData = ();

    fn add(&self, dev: &Device) -> Result {
        // The only step that may fail: on failure nothing is listed (the
        // core calls no `remove` for a device whose `add` failed).
        add_device(&self.devices, dev)
    }

    fn remove(&self, dev: &Device, _data: ()) {
        remove_device(&self.devices, dev);
        io::remove_device(&self.io_disks, dev);
    }
}

/// `/sys/kernel/kverbs_selftest/page`: more text than a sysfs page holds,
/// which the layer cuts to the most a `show` may return (`PAGE_SIZE - 1`).
struct Page;

impl Show for Page {
    fn show(&self, out: &mut dyn Write) -> Result {
        for _ in 0..80 {
            out.write_str("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n")?;
        }
        Ok(())
    }
}

struct KverbsSelftest {
    // What the cases left held: dropped by `drop`, before the rest.
    held: Arc<Held>,
    // Then every device leaves the list; it waits for the deliveries of
    // the held listener's sink still ending.
    _reg: Registration<Selftest>,
    // `kverbs_selftest/selftest` and `forget`; their directory goes with
    // them.
    _selftest: File<Runner>,
    _forget: File<forget::Forget>,
    _drop_reg: File<drop_reg::DropRegFile>,
    // `blk`, with the RAM disks.
    _blk: File<blk::BlkFile>,
    // `io`, with its disks.
    _io: File<io::IoFile>,
    // `/sys/kernel/kverbs_selftest/page`, then its directory.
    _page: Attribute<Page>,
    _sysfs: KernelDir,
}

impl kernel::Module for KverbsSelftest {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let devices = Arc::pin_init(new_mutex!(KVec::new()), GFP_KERNEL)?;
        let held = Held::new()?;
        let root = Dir::new(c_str!("kverbs_selftest"), module)?;
        let selftest = root.control_file(
            c_str!("selftest"),
            Runner::new(devices.clone(), held.clone())?,
        )?;
        let sysfs = KernelDir::new(c_str!("kverbs_selftest"))?;
        let forget = root.control_file(
            c_str!("forget"),
            forget::Forget::new(devices.clone(), root.clone(), sysfs.clone()),
        )?;
        let drop_reg = root.control_file(c_str!("drop_reg"), drop_reg::DropRegFile)?;
        let blk = root.control_file(c_str!("blk"), blk::BlkFile::new(module)?)?;
        let io_disks = io::new_disks()?;
        let io = root.control_file(
            c_str!("io"),
            io::IoFile::new(module, devices.clone(), io_disks.clone()),
        )?;
        let page = sysfs.attribute(c_str!("page"), Page)?;
        let reg = Registration::new(c_str!("kverbs_selftest"), Selftest { devices, io_disks })?;
        Ok(KverbsSelftest {
            held,
            _reg: reg,
            _selftest: selftest,
            _forget: forget,
            _drop_reg: drop_reg,
            _blk: blk,
            _io: io,
            _page: page,
            _sysfs: sysfs,
        })
    }
}

impl Drop for KverbsSelftest {
    fn drop(&mut self) {
        // The held listener, its queue and its sink, which holds `held`
        // (a cycle this breaks). A delivery of the sink still ending is
        // waited for by the registration's drop.
        let listener = self.held.listener.lock().take();
        drop(listener);
    }
}
