// SPDX-License-Identifier: GPL-2.0

//! What the sink of a connection manager queue is told
//! ([`CmEvents::with_sink`](super::CmEvents::with_sink)): the events of
//! its IDs (`struct rdma_cm_event`, copied) and the notice of those lost.
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h)

use super::CmId;
use crate::bindings;
use crate::event::Sink;

/// What an event is (`enum rdma_cm_event_type`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CmEventKind {
    /// `RDMA_CM_EVENT_ADDR_RESOLVED`.
    AddrResolved,
    /// `RDMA_CM_EVENT_ADDR_ERROR`.
    AddrError,
    /// `RDMA_CM_EVENT_ROUTE_RESOLVED`.
    RouteResolved,
    /// `RDMA_CM_EVENT_ROUTE_ERROR`.
    RouteError,
    /// `RDMA_CM_EVENT_CONNECT_REQUEST`: [`CmId::get_request`] takes it.
    ConnectRequest,
    /// `RDMA_CM_EVENT_CONNECT_ERROR`.
    ConnectError,
    /// `RDMA_CM_EVENT_UNREACHABLE`.
    Unreachable,
    /// `RDMA_CM_EVENT_REJECTED`.
    Rejected,
    /// `RDMA_CM_EVENT_ESTABLISHED`.
    Established,
    /// `RDMA_CM_EVENT_DISCONNECTED`: the peer disconnected.
    Disconnected,
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL`: the ID's device is going, and its
    /// removal waits for the ID's drop.
    DeviceRemoval,
    /// `RDMA_CM_EVENT_ADDR_CHANGE`.
    AddrChange,
    /// `RDMA_CM_EVENT_TIMEWAIT_EXIT`.
    TimewaitExit,
    /// Not an event of the connection manager: events came faster than
    /// the sink took them, and [`CmEvent::status`] of them were lost to it
    /// (a device removal among them, maybe: ask [`CmId::device_removed`]).
    EventsLost,
    /// Another event (multicast join or error, ...).
    Other(u32),
}

/// The kind of the notice of lost events (no `rdma_cm_event_type`).
const EVENTS_LOST: u32 = u32::MAX;

/// An event of an ID of a queue with a [`CmSink`], as the sink is told.
#[derive(Clone, Copy, Debug)]
pub struct CmEvent {
    pub(super) token: u64,
    pub(super) kind: u32,
    pub(super) status: i32,
}

impl CmEvent {
    /// What the event is.
    pub fn kind(&self) -> CmEventKind {
        match self.kind {
            bindings::RDMA_CM_EVENT_ADDR_RESOLVED => CmEventKind::AddrResolved,
            bindings::RDMA_CM_EVENT_ADDR_ERROR => CmEventKind::AddrError,
            bindings::RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
            bindings::RDMA_CM_EVENT_ROUTE_ERROR => CmEventKind::RouteError,
            bindings::RDMA_CM_EVENT_CONNECT_REQUEST => CmEventKind::ConnectRequest,
            bindings::RDMA_CM_EVENT_CONNECT_ERROR => CmEventKind::ConnectError,
            bindings::RDMA_CM_EVENT_UNREACHABLE => CmEventKind::Unreachable,
            bindings::RDMA_CM_EVENT_REJECTED => CmEventKind::Rejected,
            bindings::RDMA_CM_EVENT_ESTABLISHED => CmEventKind::Established,
            bindings::RDMA_CM_EVENT_DISCONNECTED => CmEventKind::Disconnected,
            bindings::RDMA_CM_EVENT_DEVICE_REMOVAL => CmEventKind::DeviceRemoval,
            bindings::RDMA_CM_EVENT_ADDR_CHANGE => CmEventKind::AddrChange,
            bindings::RDMA_CM_EVENT_TIMEWAIT_EXIT => CmEventKind::TimewaitExit,
            EVENTS_LOST => CmEventKind::EventsLost,
            other => CmEventKind::Other(other),
        }
    }

    /// The event's status (an errno, or a reject reason, or 0; for
    /// [`CmEventKind::EventsLost`], how many).
    pub fn status(&self) -> i32 {
        self.status
    }

    /// Whether the event is of `id`. A connection request is of the new ID
    /// [`CmId::get_request`] returns, never of its listener.
    pub fn is_of(&self, id: &CmId) -> bool {
        self.token == id.0.token()
    }

    /// The event's name, as the connection manager spells it
    /// (`rdma_event_msg`: "device removal", ...).
    pub fn name(&self) -> &'static str {
        if self.kind == EVENTS_LOST {
            return "events lost";
        }
        super::event_msg(self.kind)
    }
}

/// Where the events of a queue's IDs are told (see [`CmEvents::with_sink`]).
pub trait CmSink: Send + Sync {
    /// Called for each event of an ID of the queue, in process context (a
    /// worker of kverbs.ko's workqueue `kverbs_events`), one at a time and
    /// in the order they came, after the event was queued for the waits.
    /// It may sleep and drop IDs of the queue (the removal of a device
    /// waits for the drop of its IDs), with the rules of
    /// [`EventSink::event`](crate::event::EventSink::event): no call of
    /// the sink outlives the drop of the queue's last ID and handle made
    /// outside it, or, for one made inside it,
    /// [`wait_for_deliveries`](crate::event::wait_for_deliveries). Events
    /// that come faster than they are handled are dropped beyond
    /// [`QUEUED_EVENTS`](crate::event::QUEUED_EVENTS) (their queued copies
    /// are not): the sink is then told [`CmEventKind::EventsLost`].
    ///
    /// A sink that can reach the IDs it is to drop holds them, and they
    /// hold their queue, which holds the sink: a cycle (the kernel's `Arc`
    /// has no weak reference). It is broken when the IDs are dropped -- on
    /// removal, or by the holder's exit, which must take them out of the
    /// sink's reach and drop them. If they are not, or are leaked, the
    /// sink is dropped when its module goes, as
    /// [`EventSink::event`](crate::event::EventSink::event) says.
    fn event(&self, ev: &CmEvent);

    /// Where the sink's code is (see
    /// [`EventSink::code_address`](crate::event::EventSink::code_address)).
    #[doc(hidden)]
    fn code_address(&self, _: crate::event::seal::Seal) -> [usize; 2] {
        [
            <Self as CmSink>::event as *const () as usize,
            core::ptr::drop_in_place::<Self> as *const () as usize,
        ]
    }
}

impl Sink for dyn CmSink {
    type Ev = CmEvent;
    fn deliver(&self, ev: &CmEvent) {
        self.event(ev);
    }
    fn lost(&self, n: u64) {
        self.event(&CmEvent {
            token: 0,
            kind: EVENTS_LOST,
            status: i32::try_from(n).unwrap_or(i32::MAX),
        });
    }
    fn code(&self) -> [usize; 2] {
        self.code_address(crate::event::seal::Seal(()))
    }
}
