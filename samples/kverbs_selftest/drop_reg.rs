// SPDX-License-Identifier: GPL-2.0

//! `drop_reg`: a sink that drops its own client's registration while the
//! device goes.
//!
//! Writing a device's name to `/sys/kernel/debug/kverbs_selftest/drop_reg`
//! registers an RDMA client of this module, `kverbs_selftest_drop_reg`,
//! which on that device registers a sink for the device's events, kept in
//! the device's data. The registration is held where the sink finds it (a
//! cycle: the client holds the holder). The sink, told an event, says so
//! (`kverbs_selftest: drop_reg sink: port error`), sleeps 5 s and drops the
//! registration (`drop_reg: registration dropped by its sink`).
//!
//! kverbs_soundness.sh takes the device's port down (an event: the sink
//! sleeps) and removes the device meanwhile: the removal calls the client's
//! `remove`, which drops the sink's registration while the sink runs, and
//! the sink's drop of the client's registration then waits for every call
//! of the client to end -- that `remove` among them. Before kverbs made a
//! client's `remove` a delivery (whose drops wait for no sink), that
//! `remove` waited for the sink: both waited for ever, and so did the
//! removal.

use kernel::{new_mutex, prelude::*, sync::Arc, sync::Mutex};
use kverbs::{
    client::{Client, Registration},
    device::Device,
    event::{DeviceEvents, Event, EventSink},
    Show, Store,
};

/// Where the sink finds the registration, and the device the client
/// takes.
#[pin_data]
struct Holder {
    name: KVec<u8>,
    #[pin]
    reg: Mutex<Option<Registration<DropReg>>>,
}

/// The sink that drops the registration.
struct Sink {
    holder: Arc<Holder>,
}

impl EventSink for Sink {
    fn event(&self, ev: &Event) {
        pr_info!("drop_reg sink: {}\n", ev.name());
        kverbs::msleep(5000);
        let reg = self.holder.reg.lock().take();
        if reg.is_some() {
            drop(reg);
            pr_info!("drop_reg: registration dropped by its sink\n");
        }
    }
}

/// The client.
struct DropReg {
    holder: Arc<Holder>,
}

kverbs::client_slot!(DropReg);

impl Client for DropReg {
    type DeviceData = KBox<Option<DeviceEvents>>;

    fn add(&self, dev: &Device) -> Result<Self::DeviceData> {
        if dev.name().as_str().as_bytes() != self.holder.name.as_slice() {
            return KBox::new(None, GFP_KERNEL).map_err(Into::into);
        }
        let sink = Arc::new(
            Sink {
                holder: self.holder.clone(),
            },
            GFP_KERNEL,
        )?;
        let events = DeviceEvents::register(dev, sink)?;
        pr_info!("drop_reg: sink registered on {}\n", dev.name());
        KBox::new(Some(events), GFP_KERNEL).map_err(Into::into)
    }

    fn remove(&self, dev: &Device, data: Self::DeviceData) {
        drop(data);
        pr_info!("drop_reg: removed {}\n", dev.name());
    }
}

/// `drop_reg`: the control file.
pub(crate) struct DropRegFile;

impl Store for DropRegFile {
    fn store(&self, input: &[u8]) -> Result {
        let name = core::str::from_utf8(input).map_err(|_| EINVAL)?.trim();
        let mut n = KVec::new();
        n.extend_from_slice(name.as_bytes(), GFP_KERNEL)?;
        let holder = Arc::pin_init(
            pin_init!(Holder {
                name: n,
                reg <- new_mutex!(None),
            }),
            GFP_KERNEL,
        )?;
        let reg = Registration::new(
            kernel::c_str!("kverbs_selftest_drop_reg"),
            DropReg {
                holder: holder.clone(),
            },
        )?;
        *holder.reg.lock() = Some(reg);
        Ok(())
    }
}

impl Show for DropRegFile {
    fn show(&self, out: &mut dyn core::fmt::Write) -> Result {
        writeln!(out, "write a device's name")?;
        Ok(())
    }
}
