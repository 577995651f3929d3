// SPDX-License-Identifier: GPL-2.0

//! `events`: the asynchronous events of a device (its ports: port error and
//! active, GID changes, ...) and of the QPs and SRQs the example creates
//! with it, in a bounded ring.

use core::fmt::Write;
use kernel::{prelude::*, str::CString, sync::Arc};
use kverbs::{
    event::{Element, Event, EventRing, EventSink},
    Show,
};

/// Events kept; older ones are dropped (and counted).
const RING: usize = 64;

/// The ring of one device, the sink of its events and of those of the QPs
/// and SRQs the example creates on it (the layer delivers them in process
/// context).
#[pin_data]
pub(crate) struct EventLog {
    #[pin]
    ring: EventRing<RING>,
    dev: CString,
}

impl EventLog {
    pub(crate) fn new(dev: &kverbs::device::Device) -> Result<Arc<Self>> {
        let dev = CString::try_from_fmt(format_args!("{}", dev.name()))?;
        Arc::pin_init(
            try_pin_init!(EventLog {
                ring <- EventRing::new(),
                dev,
            }? Error),
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
kverbs::kernel_display!(Of);

impl EventSink for EventLog {
    fn event(&self, ev: &Event) {
        self.ring.push(kverbs::now_ns(), *ev);
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
        let (events, total) = self.0.ring.snapshot();
        let kept = total.min(RING as u64);
        writeln!(out, "events: {} ({} dropped)", total, total - kept)?;
        for (t, ev) in events.iter() {
            writeln!(
                out,
                "{:>5}.{:06} {}: {}",
                t / 1_000_000_000,
                t % 1_000_000_000 / 1000,
                Of(ev.element),
                ev.name()
            )?;
        }
        Ok(())
    }
}
