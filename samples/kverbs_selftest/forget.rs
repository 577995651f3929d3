// SPDX-License-Identifier: GPL-2.0

//! `forget`: what this module leaks must not call its code once it is gone.
//!
//! Writing a device's name to `/sys/kernel/debug/kverbs_selftest/forget`
//! registers two event sinks of this module for the device's events and
//! leaks both registrations, as safe code can: one with `mem::forget`, the
//! other in a cycle (its sink holds its own registration, which holds the
//! sink); the first write also registers a second RDMA client of this
//! module, `kverbs_selftest_leaked`, and creates a debugfs file
//! (`kverbs_selftest/leaked`) and a sysfs attribute
//! (`/sys/kernel/kverbs_selftest/leaked`) that show `leaked`, and forgets
//! the three, and leaks two timers (`kverbs::delayed`) that run every
//! 50 ms for ever, one forgotten, one in a cycle (its handler holds it).
//! Each
//! sink logs every event it is given
//! (`kverbs_selftest: forgotten sink: port error`) and its drop
//! (`kverbs_selftest: forgotten sink dropped`; `cycle sink` for the
//! other), the client each `add` and `remove` (`leaked client: add
//! rxe_forget`), each timer its first run (`forgotten timer: running`) and
//! its drop (`forgotten timer dropped`). When this module goes, kverbs.ko
//! drops both sinks and both timers' handlers, unregisters the client
//! (which calls its `remove`) and removes the two files, and the device's
//! events, new devices, reads and timers after that reach none of them
//! (kverbs_forget.sh): before, the next event, device or read called the
//! module's freed memory.
//!
//! The forgotten registration holds its device and kverbs.ko for good:
//! neither can be removed afterwards. Reading the file gives how many
//! writes were taken.

use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{new_mutex, prelude::*, sync::Arc, sync::Mutex};
use kverbs::{
    client::{Client, Registration},
    debugfs::Dir,
    delayed::{Delayed, DelayedHandler},
    device::Device,
    event::{DeviceEvents, Event, EventSink},
    sysfs::KernelDir,
    Show, Store,
};

use super::Devices;

/// Says its drop: "`NAME` dropped".
struct Dropped(&'static str);

impl Drop for Dropped {
    fn drop(&mut self) {
        pr_info!("{} dropped\n", self.0);
    }
}

/// A leaked timer's handler: runs every 50 ms for ever and says its first
/// run; the cycle's holds its own timer in `own`.
#[pin_data]
struct Ticker {
    name: &'static str,
    runs: AtomicU32,
    #[pin]
    own: Mutex<Option<Delayed>>,
    _dropped: Dropped,
}

impl DelayedHandler for Ticker {
    fn run(&self) -> Option<u32> {
        if self.runs.fetch_add(1, Ordering::Relaxed) == 0 {
            pr_info!("{} timer: running\n", self.name);
        }
        Some(50)
    }
}

impl Ticker {
    fn new(name: &'static str, dropped: &'static str) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Ticker {
                name,
                runs: AtomicU32::new(0),
                own <- new_mutex!(None),
                _dropped: Dropped(dropped),
            }),
            GFP_KERNEL,
        )
    }
}

/// The sink of the registration given to `mem::forget`.
struct Forgotten {
    _dropped: Dropped,
}

impl EventSink for Forgotten {
    fn event(&self, ev: &Event) {
        pr_info!("forgotten sink: {}\n", ev.name());
    }
}

/// The sink of the registration it holds itself.
#[pin_data]
struct Cycle {
    #[pin]
    own: Mutex<Option<DeviceEvents>>,
    _dropped: Dropped,
}

impl EventSink for Cycle {
    fn event(&self, ev: &Event) {
        pr_info!("cycle sink: {}\n", ev.name());
    }
}

/// The client whose registration is forgotten.
struct Leaked;

kverbs::client_slot!(Leaked);

impl Client for Leaked {
    type DeviceData = ();

    fn add(&self, dev: &Device) -> Result {
        pr_info!("leaked client: add {}\n", dev.name());
        Ok(())
    }

    fn remove(&self, dev: &Device, _data: ()) {
        pr_info!("leaked client: remove {}\n", dev.name());
    }
}

/// What the leaked files show.
struct Text;

impl Show for Text {
    fn show(&self, out: &mut dyn core::fmt::Write) -> Result {
        writeln!(out, "leaked")?;
        Ok(())
    }
}

/// `forget`: the control file.
pub(crate) struct Forget {
    devices: Arc<Devices>,
    dir: Dir,
    sysfs: KernelDir,
    taken: AtomicU32,
}

impl Forget {
    pub(crate) fn new(devices: Arc<Devices>, dir: Dir, sysfs: KernelDir) -> Self {
        Forget {
            devices,
            dir,
            sysfs,
            taken: AtomicU32::new(0),
        }
    }
}

impl Store for Forget {
    fn store(&self, input: &[u8]) -> Result {
        let name = core::str::from_utf8(input).map_err(|_| EINVAL)?.trim();
        let dev = self
            .devices
            .lock()
            .iter()
            .find(|d| d.name().as_str() == name)
            .cloned();
        let Some(dev) = dev else {
            pr_err!("forget: no device '{}'\n", name);
            return Err(ENODEV);
        };
        core::mem::forget(DeviceEvents::register(
            &dev,
            Arc::new(
                Forgotten {
                    _dropped: Dropped("forgotten sink"),
                },
                GFP_KERNEL,
            )?,
        )?);
        let cycle = Arc::pin_init(
            pin_init!(Cycle {
                own <- new_mutex!(None),
                _dropped: Dropped("cycle sink"),
            }),
            GFP_KERNEL,
        )?;
        let reg = DeviceEvents::register(&dev, cycle.clone())?;
        *cycle.own.lock() = Some(reg);
        if self.taken.fetch_add(1, Ordering::Relaxed) == 0 {
            core::mem::forget(Registration::new(
                kernel::c_str!("kverbs_selftest_leaked"),
                Leaked,
            )?);
            core::mem::forget(self.dir.file(kernel::c_str!("leaked"), Text)?);
            core::mem::forget(self.sysfs.attribute(kernel::c_str!("leaked"), Text)?);
            let t = Delayed::new(Ticker::new("forgotten", "forgotten timer")?)?;
            t.arm(50);
            core::mem::forget(t);
            let ticker = Ticker::new("cycle", "cycle timer")?;
            let t = Delayed::new(ticker.clone())?;
            t.arm(50);
            *ticker.own.lock() = Some(t);
        }
        Ok(())
    }
}

impl Show for Forget {
    fn show(&self, out: &mut dyn core::fmt::Write) -> Result {
        writeln!(out, "forgotten: {}", self.taken.load(Ordering::Relaxed))?;
        Ok(())
    }
}
