// SPDX-License-Identifier: GPL-2.0

//! kverbs example: an RDMA client written in safe Rust.
//!
//! On load it registers as an RDMA client. For every RDMA device, present or
//! added later, it creates `/sys/kernel/debug/kverbs_example/<dev>/info`
//! showing the device, its ports and their GID tables; the directory goes
//! when the device does. `/sys/kernel/kverbs_example/devices` lists the
//! devices the client has been given. The in-kernel tests of what the layer
//! refuses are a module of their own, `kverbs_selftest`.

#![deny(unsafe_code)]

mod apm;
mod bench;
mod conn;
mod control;
mod events;
mod mcast;
mod options;
mod rc;
mod report;
mod rping;
mod srq;
mod stats;

use core::fmt::Write;
use kernel::{c_str, new_mutex, prelude::*, str::CString, sync::Arc, sync::Mutex};
use kverbs::ARef;
use kverbs::{
    client::{Client, Registration},
    debugfs::{Dir, File},
    device::{Device, LinkLayer},
    event::DeviceEvents,
    sysfs::{Attribute, KernelDir},
    Show,
};

module! {
    type: KverbsExample,
    name: "kverbs_example",
    description: "kverbs example: an RDMA client in safe Rust",
    license: "GPL",
}

/// The devices this client has now; a removed device leaves a free slot.
type Devices = Mutex<KVec<Option<CString>>>;

/// `/sys/kernel/kverbs_example/devices`: one device name per line.
struct DeviceList(Arc<Devices>);

impl Show for DeviceList {
    fn show(&self, out: &mut dyn Write) -> Result {
        for name in self.0.lock().iter().flatten() {
            writeln!(out, "{}", name.to_str()?)?;
        }
        Ok(())
    }
}

/// `info`: the device as `ibv_devinfo -v` and `rdma link` describe it.
struct Info(ARef<Device>);

impl Show for Info {
    fn show(&self, out: &mut dyn Write) -> Result {
        let dev = &self.0;
        let attr = dev.attrs();
        writeln!(out, "hca_id: {}", dev.name())?;
        writeln!(out, "driver: {}", dev.driver())?;
        writeln!(out, "fw_ver: {}", dev.fw_version())?;
        writeln!(out, "node_guid: {}", dev.node_guid())?;
        writeln!(out, "sys_image_guid: {}", attr.sys_image_guid())?;
        writeln!(out, "vendor_id: {:#06x}", attr.vendor_id())?;
        writeln!(out, "vendor_part_id: {}", attr.vendor_part_id())?;
        writeln!(out, "hw_ver: {:#x}", attr.hw_ver())?;
        writeln!(out, "phys_port_cnt: {}", dev.ports().count())?;
        writeln!(out, "max_mr_size: {:#x}", attr.max_mr_size())?;
        writeln!(out, "page_size_cap: {:#x}", attr.page_size_cap())?;
        writeln!(out, "max_qp: {}", attr.max_qp())?;
        writeln!(out, "max_qp_wr: {}", attr.max_qp_wr())?;
        writeln!(
            out,
            "device_cap_flags: {:#010x}",
            attr.device_cap_flags() & 0xffff_ffff
        )?;
        writeln!(
            out,
            "max_sge: {}",
            attr.max_send_sge().min(attr.max_recv_sge())
        )?;
        writeln!(out, "max_cq: {}", attr.max_cq())?;
        writeln!(out, "max_cqe: {}", attr.max_cqe())?;
        writeln!(out, "max_mr: {}", attr.max_mr())?;
        writeln!(out, "max_pd: {}", attr.max_pd())?;
        writeln!(out, "max_qp_rd_atom: {}", attr.max_qp_rd_atom())?;
        writeln!(out, "max_qp_init_rd_atom: {}", attr.max_qp_init_rd_atom())?;
        writeln!(out, "max_srq: {}", attr.max_srq())?;
        writeln!(out, "max_mcast_grp: {}", attr.max_mcast_grp())?;
        writeln!(out, "max_mcast_qp_attach: {}", attr.max_mcast_qp_attach())?;
        writeln!(out, "max_ah: {}", attr.max_ah())?;
        writeln!(out, "max_pkeys: {}", attr.max_pkeys())?;
        for port in dev.ports() {
            writeln!(out, "port: {}", port)?;
            let pa = match dev.query_port(port) {
                Ok(pa) => pa,
                Err(e) => {
                    writeln!(out, "\tquery_port: error {}", e.to_errno())?;
                    continue;
                }
            };
            let ll = dev.link_layer(port);
            writeln!(out, "\tstate: {} ({})", pa.state().name(), pa.state_raw())?;
            writeln!(
                out,
                "\tmax_mtu: {} ({})",
                pa.max_mtu().bytes(),
                pa.max_mtu().raw()
            )?;
            writeln!(
                out,
                "\tactive_mtu: {} ({})",
                pa.active_mtu().bytes(),
                pa.active_mtu().raw()
            )?;
            writeln!(out, "\tsm_lid: {}", pa.sm_lid())?;
            writeln!(out, "\tport_lid: {}", pa.lid())?;
            writeln!(out, "\tmax_msg_sz: {:#x}", pa.max_msg_sz())?;
            writeln!(out, "\tgid_tbl_len: {}", pa.gid_tbl_len())?;
            writeln!(out, "\tpkey_tbl_len: {}", pa.pkey_tbl_len())?;
            writeln!(
                out,
                "\tphys_state: {} ({})",
                phys_state_name(pa.phys_state()),
                pa.phys_state()
            )?;
            writeln!(out, "\tlink_layer: {}", ll.name())?;
            if let Some(ndev) = dev.netdev_name(port) {
                writeln!(out, "\tnetdev: {}", ndev)?;
            }
            for index in 0..pa.gid_tbl_len() {
                // Empty entries fail with ENODATA and are not shown, as in
                // `ibv_devinfo -v`.
                let Ok(gid) = dev.gid_attr(port, index) else {
                    continue;
                };
                let g = gid.gid();
                if ll != LinkLayer::Ethernet {
                    writeln!(out, "\tGID[{:3}]: {}", index, g)?;
                } else if gid.gid_type() == kverbs::device::GidType::RoceV2 {
                    writeln!(out, "\tGID[{:3}]: {}, RoCE v2", index, g.ipv6())?;
                } else {
                    writeln!(out, "\tGID[{:3}]: {}, RoCE v1", index, g)?;
                }
            }
        }
        Ok(())
    }
}

/// Physical port states as `ibv_devinfo` names them.
fn phys_state_name(state: u8) -> &'static str {
    match state {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION_TRAINNING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY_TEST",
        _ => "invalid physical state",
    }
}

/// What the client keeps per device. Fields drop in order: the files go
/// before the directory, the directory before the device reference.
struct PerDevice {
    rc: File<control::Control<rc::Rc>>,
    mcast: File<control::Control<mcast::Mcast>>,
    bench: File<control::Control<bench::Bench>>,
    srq: File<control::Control<srq::SrqExample>>,
    apm: File<control::Control<apm::ApmExample>>,
    _stats: File<stats::StatsFile>,
    _events_file: File<events::EventsFile>,
    _events: DeviceEvents,
    _info: File<Info>,
    _dir: Dir,
    name: CString,
    devices: Arc<Devices>,
}

impl Drop for PerDevice {
    fn drop(&mut self) {
        let mut list = self.devices.lock();
        for slot in list.as_mut_slice() {
            if slot.as_ref().map(|n| n.to_str()) == Some(self.name.to_str()) {
                *slot = None;
            }
        }
    }
}

struct Example {
    root: Dir,
    devices: Arc<Devices>,
}

kverbs::client_slot!(Example);

impl Client for Example {
    type DeviceData = KBox<PerDevice>;

    fn add(&self, dev: &Device) -> Result<KBox<PerDevice>> {
        let name = CString::try_from_fmt(format_args!("{}", dev.name()))?;
        let dir = self.root.subdir(&name)?;
        let info = dir.file(c_str!("info"), Info(dev.into()))?;
        let stats = Arc::new(stats::Stats::default(), GFP_KERNEL)?;
        let rc = dir.control_file(
            c_str!("rc"),
            control::Control::new(dev, stats.clone(), rc::Rc)?,
        )?;
        let mcast = dir.control_file(
            c_str!("mcast"),
            control::Control::new(dev, stats.clone(), mcast::Mcast::new()?)?,
        )?;
        let bench = dir.control_file(
            c_str!("bench"),
            control::Control::new(dev, stats.clone(), bench::Bench)?,
        )?;
        let log = events::EventLog::new(dev)?;
        let srq = dir.control_file(
            c_str!("srq"),
            control::Control::new(dev, stats.clone(), srq::SrqExample { log: log.clone() })?,
        )?;
        let apm = dir.control_file(
            c_str!("apm"),
            control::Control::new(dev, stats.clone(), apm::ApmExample { log: log.clone() })?,
        )?;
        let stats = dir.file(c_str!("stats"), stats::StatsFile(stats))?;
        let device_events = DeviceEvents::register(dev, log.clone())?;
        let events_file = dir.file(c_str!("events"), events::EventsFile(log))?;
        let entry = CString::try_from_fmt(format_args!("{}", dev.name()))?;
        let data = KBox::new(
            PerDevice {
                rc,
                mcast,
                bench,
                srq,
                apm,
                _stats: stats,
                _events_file: events_file,
                _events: device_events,
                _info: info,
                _dir: dir,
                name,
                devices: self.devices.clone(),
            },
            GFP_KERNEL,
        )?;
        {
            let mut list = self.devices.lock();
            match list.as_mut_slice().iter_mut().find(|slot| slot.is_none()) {
                Some(slot) => *slot = Some(entry),
                // On failure `data` drops and takes nothing from the list.
                None => list.push(Some(entry), GFP_KERNEL)?,
            }
        }
        pr_info!(
            "{}: added ({} driver, {} port(s))\n",
            dev.name(),
            dev.driver(),
            dev.ports().count()
        );
        Ok(data)
    }

    fn remove(&self, dev: &Device, data: KBox<PerDevice>) {
        // A run in progress ends (with ECANCELED) before the files go:
        // removing `rc` waits for the writer inside it.
        data.rc.data().cancel();
        data.mcast.data().cancel();
        data.bench.data().cancel();
        data.srq.data().cancel();
        data.apm.data().cancel();
        drop(data);
        pr_info!("{}: removed\n", dev.name());
    }
}

struct KverbsExample {
    // Dropped first: removes every device's directory.
    _reg: Registration<Example>,
    // `kverbs_example/fail_drain`, where the kernel has fault injection.
    _fail_drain: Option<kverbs::qp::DrainFaultInjection>,
    _devices_attr: Attribute<DeviceList>,
    _sysfs: KernelDir,
}

impl kernel::Module for KverbsExample {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let devices = Arc::pin_init(new_mutex!(KVec::new()), GFP_KERNEL)?;
        let sysfs = KernelDir::new(c_str!("kverbs_example"))?;
        let attr = sysfs.attribute(c_str!("devices"), DeviceList(devices.clone()))?;
        let root = Dir::new(c_str!("kverbs_example"), module)?;
        let fail_drain = kverbs::qp::DrainFaultInjection::new(&root).ok();
        let reg = Registration::new(c_str!("kverbs_example"), Example { root, devices })?;
        pr_info!("registered as an RDMA client\n");
        Ok(KverbsExample {
            _reg: reg,
            _fail_drain: fail_drain,
            _devices_attr: attr,
            _sysfs: sysfs,
        })
    }
}

impl Drop for KverbsExample {
    fn drop(&mut self) {
        pr_info!("unregistering\n");
    }
}
