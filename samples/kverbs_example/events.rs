// SPDX-License-Identifier: GPL-2.0

//! `events`: the asynchronous events of a device (its ports: port error and
//! active, GID changes, ...) and of the QPs and SRQs the example creates
//! with it, in a bounded ring.

use core::fmt::Write;
use kernel::{new_spinlock, prelude::*, str::CString, sync::Arc, sync::SpinLock};
use kverbs::{
    event::{Element, Event, EventSink},
    Show,
};

/// Events kept; older ones are dropped (and counted).
const RING: usize = 64;

struct Ring {
    entries: [Option<(u64, Event)>; RING],
    /// Events ever received; the newest is at `(total - 1) % RING`.
    total: u64,
}

/// The ring of one device. Filled from any context (QP events come from
/// the driver's completion paths): a spinlock, no allocation.
#[pin_data]
pub(crate) struct EventLog {
    #[pin]
    ring: SpinLock<Ring>,
    dev: CString,
}

impl EventLog {
    pub(crate) fn new(dev: &kverbs::device::Device) -> Result<Arc<Self>> {
        let dev = CString::try_from_fmt(kernel::fmt!("{}", dev.name()))?;
        Arc::pin_init(
            pin_init!(EventLog {
                ring <- new_spinlock!(Ring {
                    entries: [None; RING],
                    total: 0,
                }),
                dev,
            }),
            GFP_KERNEL,
        )
    }
}

/// Writes the element an event is about.
struct Of(Element);

impl core::fmt::Display for Of {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Element::Device => write!(f, "device"),
            Element::Port(p) => write!(f, "port {}", p),
            Element::Qp(n) => write!(f, "qp {:#x}", n),
            Element::Cq => write!(f, "cq"),
            Element::Srq => write!(f, "srq"),
            Element::Wq => write!(f, "wq"),
        }
    }
}

impl EventSink for EventLog {
    fn event(&self, ev: &Event) {
        let t = kverbs::now_ns();
        {
            let mut r = self.ring.lock();
            let at = (r.total % RING as u64) as usize;
            r.entries[at] = Some((t, *ev));
            r.total += 1;
        }
        pr_info!(
            "{}: event: {}: {}\n",
            self.dev.to_str().unwrap_or("?"),
            Of(ev.element),
            ev.name()
        );
    }
}

/// The `events` file.
pub(crate) struct EventsFile(pub(crate) Arc<EventLog>);

impl Show for EventsFile {
    fn show(&self, out: &mut dyn Write) -> Result {
        // Copied out of the lock: formatting is not done under it.
        let (entries, total) = {
            let r = self.0.ring.lock();
            (r.entries, r.total)
        };
        let kept = total.min(RING as u64);
        writeln!(out, "events: {} ({} dropped)", total, total - kept)?;
        for i in total - kept..total {
            if let Some((t, ev)) = entries[(i % RING as u64) as usize] {
                writeln!(
                    out,
                    "{:>5}.{:06} {}: {}",
                    t / 1_000_000_000,
                    t % 1_000_000_000 / 1000,
                    Of(ev.element),
                    ev.name()
                )?;
            }
        }
        Ok(())
    }
}
