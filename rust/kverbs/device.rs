// SPDX-License-Identifier: GPL-2.0

//! RDMA devices and their attributes.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use crate::bindings;
use crate::AlwaysRefCounted;
use core::{fmt, marker::PhantomData, ops::RangeInclusive, ptr::NonNull};
use kernel::{
    error::{from_err_ptr, to_result},
    prelude::*,
    types::Opaque,
};

/// An RDMA device (`struct ib_device`).
///
/// Only references to it exist: `&Device` inside the callbacks of a
/// [`crate::client::Client`], and [`ARef<Device>`](crate::ARef) for a
/// reference that outlives them.
///
/// # Invariants
///
/// The device is registered with the RDMA core and its registration
/// refcount is held (by the core around client callbacks, or by an
/// `ARef<Device>`), so its memory stays valid and it is not unregistered
/// while the reference lives.
#[repr(transparent)]
pub struct Device(Opaque<bindings::ib_device>);

// SAFETY: The verbs may be called on a device from any thread.
unsafe impl Send for Device {}
// SAFETY: All methods of `&Device` are thread safe in the RDMA core.
unsafe impl Sync for Device {}

// SAFETY: `ib_device_try_get` and `ib_device_put` take and drop the
// registration refcount; while one is held the device stays valid (see
// `ib_unregister_device`, which waits for the count to reach zero).
unsafe impl AlwaysRefCounted for Device {
    fn inc_ref(&self) {
        // SAFETY: By the type invariant the count is held, hence non-zero,
        // so this increment cannot fail.
        let ok = unsafe { bindings::ib_device_try_get(self.as_raw()) };
        debug_assert!(ok);
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller gives back a count it holds.
        unsafe { bindings::ib_device_put(obj.as_ptr().cast()) };
    }
}

/// A port number: 1 and up on HCAs and RNICs, 0 on switches; see
/// [`Device::ports`].
pub type PortNum = u32;

impl Device {
    /// Creates a reference from a raw pointer.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a registered device whose registration refcount
    /// is held for the whole lifetime `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::ib_device) -> &'a Self {
        // SAFETY: `Device` is a transparent wrapper; the caller guarantees
        // validity for `'a`.
        unsafe { &*ptr.cast() }
    }

    /// Whether `other` is this very device.
    pub fn same_as(&self, other: &Device) -> bool {
        core::ptr::eq(self, other)
    }

    /// The raw `struct ib_device` pointer.
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_device {
        self.0.get()
    }

    /// The device's name (`rxe0`, `mlx5_0`, ...), copied: a device may be
    /// renamed at any time (`rdma dev set NAME name NEW`).
    pub fn name(&self) -> Name {
        let mut name = Name([0; bindings::IB_DEVICE_NAME_MAX as usize]);
        // SAFETY: The device is live (type invariant); `name` has room for
        // `IB_DEVICE_NAME_MAX` bytes. The helper copies with `READ_ONCE`
        // byte by byte, as a rename may write the array meanwhile (it never
        // moves or frees it): a copy racing a rename may mix the two names,
        // but it is never a data race, and it is terminated.
        unsafe { bindings::kverbs_copy_dev_name(self.as_raw(), name.0.as_mut_ptr()) };
        name
    }

    /// The node GUID.
    pub fn node_guid(&self) -> Guid {
        // SAFETY: The device is live (type invariant); the GUID is set
        // before registration.
        Guid(u64::from_be(unsafe { (*self.as_raw()).node_guid }))
    }

    /// The firmware version, as `ibv_devinfo` shows it (`fw_ver`): the
    /// driver's string, or else the numeric `fw_ver` attribute as
    /// `major.minor.subminor`.
    pub fn fw_version(&self) -> FwVersion {
        let mut fw = FwVersion {
            text: [0; FW_VERSION_MAX],
            raw: self.attrs().fw_ver(),
        };
        // SAFETY: The device is live; the buffer has room for
        // `IB_FW_VERSION_NAME_MAX` (32) bytes and the function writes a
        // terminated string of at most that many bytes.
        unsafe { bindings::ib_get_device_fw_str(self.as_raw(), fw.text.as_mut_ptr()) };
        fw.text[FW_VERSION_MAX - 1] = 0;
        fw
    }

    /// Calls `f` with the network device under `port`, held meanwhile (a
    /// pointer to a live net device); `None` if the port has none or is not
    /// a port of this device.
    fn with_netdev<R>(
        &self,
        port: PortNum,
        f: impl FnOnce(*const bindings::net_device) -> R,
    ) -> Option<R> {
        if !self.ports().contains(&port) {
            return None;
        }
        // SAFETY: The device is live and `port` valid; the result is null
        // or a net device with a reference we now hold.
        let ndev = unsafe { bindings::ib_device_get_netdev(self.as_raw(), port) };
        if ndev.is_null() {
            return None;
        }
        let r = f(ndev);
        // SAFETY: We hold this reference.
        unsafe { bindings::dev_put(ndev) };
        Some(r)
    }

    /// The interface index of the network device under `port`, if any.
    pub fn netdev_ifindex(&self, port: PortNum) -> Option<i32> {
        self.with_netdev(port, |ndev| {
            // SAFETY: `ndev` is held.
            unsafe { (*ndev).ifindex }
        })
    }

    /// The flags (`IFF_*`) of the network device under `port`, if any.
    fn netdev_flags(&self, port: PortNum) -> Option<u32> {
        self.with_netdev(port, |ndev| {
            // SAFETY: `ndev` is held; a racing flag change gives the old or
            // the new flags.
            unsafe { core::ptr::read_volatile(&raw const (*ndev).flags) }
        })
    }

    /// Whether the network device under `port`, if any, is a loopback
    /// device (`IFF_LOOPBACK`, `lo`). The RDMA core's address resolution
    /// never resolves to one (`rdma_set_src_addr_rcu()` in
    /// drivers/infiniband/core/addr.c translates a route through `lo` to
    /// the netdev owning the address), so rdma_cm cannot connect on such
    /// a port.
    pub fn netdev_loopback(&self, port: PortNum) -> Option<bool> {
        /// `IFF_LOOPBACK` of include/uapi/linux/if.h.
        const IFF_LOOPBACK: u32 = 1 << 3;
        self.netdev_flags(port).map(|f| f & IFF_LOOPBACK != 0)
    }

    /// The name of the network device under `port` (RoCE, iWARP), if any.
    pub fn netdev_name(&self, port: PortNum) -> Option<NetdevName> {
        self.with_netdev(port, |ndev| {
            let mut name = NetdevName([0; NETDEV_NAME_MAX]);
            // SAFETY: `ndev` is held; `name` is a fixed array inside it, which
            // a concurrent rename may tear but not free. Both sides have
            // `IFNAMSIZ` bytes.
            unsafe {
                let src = &raw const (*ndev).name;
                core::ptr::copy_nonoverlapping(
                    src.cast::<u8>(),
                    name.0.as_mut_ptr(),
                    NETDEV_NAME_MAX,
                );
            }
            name.0[NETDEV_NAME_MAX - 1] = 0;
            name
        })
    }

    /// The kernel driver behind this device (`rxe`, `mlx5`, ...).
    pub fn driver(&self) -> &'static str {
        // SAFETY: The ops table is set before registration and not changed.
        let id = unsafe { (*self.as_raw()).ops.driver_id };
        match id {
            bindings::RDMA_DRIVER_MLX5 => "mlx5",
            bindings::RDMA_DRIVER_MLX4 => "mlx4",
            bindings::RDMA_DRIVER_CXGB4 => "cxgb4",
            bindings::RDMA_DRIVER_MTHCA => "mthca",
            bindings::RDMA_DRIVER_BNXT_RE => "bnxt_re",
            bindings::RDMA_DRIVER_OCRDMA => "ocrdma",
            bindings::RDMA_DRIVER_I40IW => "irdma",
            bindings::RDMA_DRIVER_VMW_PVRDMA => "vmw_pvrdma",
            bindings::RDMA_DRIVER_QEDR => "qedr",
            bindings::RDMA_DRIVER_HNS => "hns",
            bindings::RDMA_DRIVER_USNIC => "usnic",
            bindings::RDMA_DRIVER_RXE => "rxe",
            bindings::RDMA_DRIVER_HFI1 => "hfi1",
            bindings::RDMA_DRIVER_QIB => "qib",
            bindings::RDMA_DRIVER_EFA => "efa",
            bindings::RDMA_DRIVER_SIW => "siw",
            bindings::RDMA_DRIVER_ERDMA => "erdma",
            bindings::RDMA_DRIVER_MANA => "mana",
            _ => "unknown",
        }
    }

    /// The device attributes (`ib_device_attr`), copied.
    pub fn attrs(&self) -> DeviceAttr {
        // SAFETY: The attributes are filled in before registration and are
        // read-only afterwards.
        DeviceAttr(unsafe { (*self.as_raw()).attrs })
    }

    /// The valid port numbers.
    pub fn ports(&self) -> RangeInclusive<PortNum> {
        // SAFETY: The device is live (type invariant).
        unsafe { bindings::rdma_start_port(self.as_raw())..=bindings::rdma_end_port(self.as_raw()) }
    }

    /// Queries the attributes of `port` (`ib_query_port`). May sleep.
    pub fn query_port(&self, port: PortNum) -> Result<PortAttr> {
        if !self.ports().contains(&port) {
            return Err(EINVAL);
        }
        let mut attr = bindings::ib_port_attr::default();
        // SAFETY: The device is live and `port` valid; `attr` is writable.
        to_result(unsafe { bindings::ib_query_port(self.as_raw(), port, &mut attr) })?;
        Ok(PortAttr(attr))
    }

    /// The link layer of `port`.
    pub fn link_layer(&self, port: PortNum) -> LinkLayer {
        if !self.ports().contains(&port) {
            return LinkLayer::Unspecified;
        }
        // SAFETY: The device is live and `port` valid.
        match unsafe { bindings::rdma_port_get_link_layer(self.as_raw(), port) } {
            bindings::IB_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
            bindings::IB_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
            _ => LinkLayer::Unspecified,
        }
    }

    /// The entry `index` of the GID table of `port`, held until the
    /// returned guard is dropped. Fails with `ENODATA` for an empty entry.
    ///
    /// The guard borrows the device: the GID table is freed when the device
    /// is unregistered, so no entry may be held past the device's `remove`:
    ///
    /// ```compile_fail,E0505
    /// # use kverbs::device::Device;
    /// # use kernel::prelude::*;
    /// # use kverbs::ARef;
    /// fn f(dev: ARef<Device>) -> Result {
    ///     let g = dev.gid_attr(1, 0)?;
    ///     drop(dev);
    ///     let _ = g.gid(); // the device may be gone
    ///     Ok(())
    /// }
    /// ```
    pub fn gid_attr(&self, port: PortNum, index: u32) -> Result<GidAttr<'_>> {
        if !self.ports().contains(&port) {
            return Err(EINVAL);
        }
        // SAFETY: The device is live and `port` valid; the function checks
        // `index` against the table.
        let attr = unsafe { bindings::rdma_get_gid_attr(self.as_raw(), port, index.try_into()?) };
        let attr = from_err_ptr(attr.cast_mut())?;
        // INVARIANT: `rdma_get_gid_attr` returned a held entry.
        Ok(GidAttr(NonNull::new(attr).ok_or(EINVAL)?, PhantomData))
    }
}

/// A GUID (node or system image), in host byte order; shown as
/// `ibv_devinfo` does (`5054:00ff:fe12:3456`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Guid(pub u64);

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.0;
        write!(
            f,
            "{:04x}:{:04x}:{:04x}:{:04x}",
            g >> 48,
            (g >> 32) & 0xffff,
            (g >> 16) & 0xffff,
            g & 0xffff
        )
    }
}
crate::kernel_display!(Guid);

/// A device name.
pub struct Name([u8; bindings::IB_DEVICE_NAME_MAX as usize]);

/// The longest firmware version string plus room to spare.
const FW_VERSION_MAX: usize = 64;

/// A firmware version.
pub struct FwVersion {
    text: [u8; FW_VERSION_MAX],
    raw: u64,
}

const NETDEV_NAME_MAX: usize = bindings::IFNAMSIZ as usize;

/// A network device name.
pub struct NetdevName([u8; NETDEV_NAME_MAX]);

impl NetdevName {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        c_text(&self.0)
    }
}

impl fmt::Display for NetdevName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(c_text(&self.0))
    }
}
crate::kernel_display!(NetdevName);

/// Text up to the first NUL, or `?` where it is not UTF-8.
fn c_text(bytes: &[u8]) -> &str {
    let len = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    core::str::from_utf8(&bytes[..len]).unwrap_or("?")
}

impl Name {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        c_text(&self.0)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
crate::kernel_display!(Name);

impl fmt::Display for FwVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match c_text(&self.text) {
            "" => write!(
                f,
                "{}.{}.{}",
                (self.raw >> 32) & 0xffff,
                (self.raw >> 16) & 0xffff,
                self.raw & 0xffff
            ),
            text => f.write_str(text),
        }
    }
}
crate::kernel_display!(FwVersion);

/// Device attributes: a copy of `struct ib_device_attr`.
pub struct DeviceAttr(bindings::ib_device_attr);

/// The `struct ib_device_attr` counts: each an `i32` getter of the field of
/// its name (see [`crate::compat::attr_count`]).
macro_rules! counts {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self) -> i32 {
                crate::compat::attr_count(self.0.$name)
            }
        )*
    };
}

impl DeviceAttr {
    /// Numeric firmware version.
    pub fn fw_ver(&self) -> u64 {
        self.0.fw_ver
    }
    /// System image GUID.
    pub fn sys_image_guid(&self) -> Guid {
        Guid(u64::from_be(self.0.sys_image_guid))
    }
    /// Largest memory region, in bytes.
    pub fn max_mr_size(&self) -> u64 {
        self.0.max_mr_size
    }
    /// Pages one fast-registration memory region maps at most.
    pub fn max_fast_reg_page_list_len(&self) -> u32 {
        self.0.max_fast_reg_page_list_len
    }
    /// Supported page sizes, as a bit mask.
    pub fn page_size_cap(&self) -> u64 {
        self.0.page_size_cap
    }
    /// Vendor ID.
    pub fn vendor_id(&self) -> u32 {
        self.0.vendor_id
    }
    /// Vendor part ID.
    pub fn vendor_part_id(&self) -> u32 {
        self.0.vendor_part_id
    }
    /// Hardware version.
    pub fn hw_ver(&self) -> u32 {
        self.0.hw_ver
    }
    counts! {
        /// Most queue pairs.
        max_qp,
        /// Most work requests on one queue.
        max_qp_wr,
        /// Most scatter/gather entries of a send work request.
        max_send_sge,
        /// Most scatter/gather entries of a receive work request.
        max_recv_sge,
        /// Most completion queues.
        max_cq,
        /// Most entries of one completion queue.
        max_cqe,
        /// Most memory regions.
        max_mr,
        /// Most protection domains.
        max_pd,
        /// Most outstanding RDMA READ/atomic requests a QP accepts.
        max_qp_rd_atom,
        /// Most outstanding RDMA READ/atomic requests a QP issues.
        max_qp_init_rd_atom,
        /// Most shared receive queues.
        max_srq,
        /// Most multicast groups.
        max_mcast_grp,
        /// Most QPs attached to one multicast group.
        max_mcast_qp_attach,
        /// Most address handles.
        max_ah,
    }
    /// Device capability flags (`IB_DEVICE_*`).
    pub fn device_cap_flags(&self) -> u64 {
        self.0.device_cap_flags
    }
    /// Whether the device migrates RC QPs to an alternate path on its own
    /// (`IB_DEVICE_AUTO_PATH_MIG`).
    pub fn auto_path_mig(&self) -> bool {
        self.0.device_cap_flags & bindings::IB_DEVICE_AUTO_PATH_MIG as u64 != 0
    }
    /// Atomic operation support (`enum ib_atomic_cap`: NONE, HCA, GLOB).
    pub fn atomic_cap(&self) -> u32 {
        self.0.atomic_cap
    }
    /// Number of partition keys.
    pub fn max_pkeys(&self) -> u16 {
        self.0.max_pkeys
    }
}

/// Logical port state (`enum ib_port_state`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PortState {
    /// No state change.
    Nop,
    /// Link down.
    Down,
    /// Link up, not configured.
    Init,
    /// Configured, not yet active.
    Armed,
    /// Active.
    Active,
    /// Deferred activation.
    ActiveDefer,
}

impl PortState {
    /// The name `ibv_devinfo` shows (`PORT_ACTIVE`).
    pub fn name(self) -> &'static str {
        match self {
            PortState::Nop => "PORT_NOP",
            PortState::Down => "PORT_DOWN",
            PortState::Init => "PORT_INIT",
            PortState::Armed => "PORT_ARMED",
            PortState::Active => "PORT_ACTIVE",
            PortState::ActiveDefer => "PORT_ACTIVE_DEFER",
        }
    }
}

/// Port attributes: a copy of `struct ib_port_attr`.
pub struct PortAttr(bindings::ib_port_attr);

impl PortAttr {
    /// The logical port state.
    pub fn state(&self) -> PortState {
        match self.0.state {
            bindings::IB_PORT_DOWN => PortState::Down,
            bindings::IB_PORT_INIT => PortState::Init,
            bindings::IB_PORT_ARMED => PortState::Armed,
            bindings::IB_PORT_ACTIVE => PortState::Active,
            bindings::IB_PORT_ACTIVE_DEFER => PortState::ActiveDefer,
            _ => PortState::Nop,
        }
    }
    /// The raw state number (`IB_PORT_ACTIVE` is 4).
    pub fn state_raw(&self) -> u32 {
        self.0.state
    }
    /// Largest MTU the port supports.
    pub fn max_mtu(&self) -> Mtu {
        Mtu(self.0.max_mtu)
    }
    /// The MTU in use.
    pub fn active_mtu(&self) -> Mtu {
        Mtu(self.0.active_mtu)
    }
    /// Entries in the GID table.
    pub fn gid_tbl_len(&self) -> u32 {
        self.0.gid_tbl_len.try_into().unwrap_or(0)
    }
    /// Entries in the P_Key table.
    pub fn pkey_tbl_len(&self) -> u16 {
        self.0.pkey_tbl_len
    }
    /// Local identifier (0 on RoCE).
    pub fn lid(&self) -> u32 {
        self.0.lid
    }
    /// Subnet manager LID.
    pub fn sm_lid(&self) -> u32 {
        self.0.sm_lid
    }
    /// Largest message, in bytes.
    pub fn max_msg_sz(&self) -> u32 {
        self.0.max_msg_sz
    }
    /// Port capability flags.
    pub fn port_cap_flags(&self) -> u32 {
        self.0.port_cap_flags
    }
    /// Physical port state (5 is LinkUp).
    pub fn phys_state(&self) -> u8 {
        self.0.phys_state
    }
}

/// A path MTU (`enum ib_mtu`: 1 is 256 bytes ... 5 is 4096 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Mtu(u32);

impl Mtu {
    /// 256 bytes.
    pub const MTU_256: Mtu = Mtu(1);
    /// 1024 bytes.
    pub const MTU_1024: Mtu = Mtu(3);
    /// 4096 bytes.
    pub const MTU_4096: Mtu = Mtu(5);

    /// The enum value, as `ibv_devinfo` shows in parentheses.
    pub fn raw(self) -> u32 {
        self.0
    }
    /// The MTU in bytes, 0 if unknown.
    pub fn bytes(self) -> u32 {
        match self.0 {
            1..=5 => 128 << self.0,
            _ => 0,
        }
    }
    /// The MTU for a size in bytes (256, 512, 1024, 2048 or 4096).
    pub fn from_bytes(bytes: u32) -> Option<Self> {
        match bytes {
            256 => Some(Mtu(1)),
            512 => Some(Mtu(2)),
            1024 => Some(Mtu(3)),
            2048 => Some(Mtu(4)),
            4096 => Some(Mtu(5)),
            _ => None,
        }
    }
}

/// Port link layer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LinkLayer {
    /// Not known.
    Unspecified,
    /// InfiniBand.
    InfiniBand,
    /// Ethernet (RoCE).
    Ethernet,
}

impl LinkLayer {
    /// The name `ibv_devinfo` shows.
    pub fn name(self) -> &'static str {
        match self {
            LinkLayer::Unspecified => "Unknown",
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
        }
    }
}

/// A GID: 16 bytes, network order.
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    fn group(&self, i: usize) -> u16 {
        u16::from_be_bytes([self.0[2 * i], self.0[2 * i + 1]])
    }

    /// An IPv4 address mapped into IPv6 (`::ffff:a.b.c.d`).
    pub fn is_v4_mapped(&self) -> bool {
        self.0[..10].iter().all(|&b| b == 0) && self.0[10] == 0xff && self.0[11] == 0xff
    }

    /// Displays the GID as an IPv6 address in RFC 5952 form
    /// (`fe80::5054:ff:fe12:3456`, `::ffff:127.0.0.1`), as `inet_ntop` does.
    pub fn ipv6(&self) -> Ipv6Display<'_> {
        Ipv6Display(self)
    }
}

/// Eight groups of four hex digits (`fe80:0000:...:3456`), as the GID files
/// of sysfs and `ibv_devinfo` (for RoCE v1 and IB GIDs) show it.
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for i in 0..8 {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:04x}", self.group(i))?;
        }
        Ok(())
    }
}
crate::kernel_display!(Gid);

/// See [`Gid::ipv6`].
pub struct Ipv6Display<'a>(&'a Gid);

impl fmt::Display for Ipv6Display<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.0;
        if g.is_v4_mapped() {
            let b = &g.0;
            return write!(f, "::ffff:{}.{}.{}.{}", b[12], b[13], b[14], b[15]);
        }
        // The longest run of two or more zero groups (the first one if
        // several are as long) becomes "::".
        let (mut best, mut best_len, mut cur, mut cur_len) = (0, 0, 0, 0);
        for i in 0..8 {
            if g.group(i) == 0 {
                if cur_len == 0 {
                    cur = i;
                }
                cur_len += 1;
                if cur_len > best_len {
                    best = cur;
                    best_len = cur_len;
                }
            } else {
                cur_len = 0;
            }
        }
        if best_len < 2 {
            best_len = 0;
            best = 8;
        }
        let mut i = 0;
        while i < 8 {
            if i == best {
                f.write_str("::")?;
                i += best_len;
                continue;
            }
            if i > 0 && i != best + best_len {
                f.write_str(":")?;
            }
            write!(f, "{:x}", g.group(i))?;
            i += 1;
        }
        Ok(())
    }
}
crate::kernel_display!(Ipv6Display<'_>);

/// GID type (`enum ib_gid_type`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GidType {
    /// InfiniBand (also RoCE v1 on Ethernet ports).
    Ib,
    /// RoCE v1.
    RoceV1,
    /// RoCE v2 (UDP encapsulation).
    RoceV2,
}

impl GidType {
    /// The name `ibv_devinfo` shows.
    pub fn name(self) -> &'static str {
        match self {
            GidType::Ib => "IB",
            GidType::RoceV1 => "RoCE v1",
            GidType::RoceV2 => "RoCE v2",
        }
    }
}

/// A held GID table entry (`struct ib_gid_attr`) of a device borrowed for
/// `'a`, released on drop.
///
/// The device's GID table outlives the entry: it is freed only after the
/// device is unregistered (`ib_cache_cleanup_one`, after `disable_device`
/// waited for every registration count), which cannot happen while the
/// `&'a Device` the entry borrows is valid. If the guard is forgotten
/// (`mem::forget`), the entry's reference leaks, and nothing is freed
/// early; but the entry holds its netdev (`dev_hold` in
/// `alloc_gid_entry`): the netdev's removal (`ip link del`, the driver's
/// unload) then waits for ever in `netdev_wait_allrefs`, and the core
/// warns of a GID entry reference leak when the device is released.
///
/// # Invariants
///
/// The pointer came from `rdma_get_gid_attr` on a device registered for
/// `'a`, and its reference is held.
pub struct GidAttr<'a>(NonNull<bindings::ib_gid_attr>, PhantomData<&'a Device>);

// SAFETY: A held GID entry may be used and released from any thread.
unsafe impl Send for GidAttr<'_> {}
// SAFETY: `&GidAttr` only reads immutable fields of the entry.
unsafe impl Sync for GidAttr<'_> {}

impl GidAttr<'_> {
    pub(crate) fn as_raw(&self) -> *const bindings::ib_gid_attr {
        self.0.as_ptr()
    }

    fn get(&self) -> &bindings::ib_gid_attr {
        // SAFETY: By the type invariant the entry is held, and the fields
        // read through this reference do not change while it is.
        unsafe { self.0.as_ref() }
    }

    /// The GID.
    pub fn gid(&self) -> Gid {
        // SAFETY: Every bit pattern of the union is a valid byte array.
        Gid(unsafe { self.get().gid.raw })
    }

    /// The GID type.
    pub fn gid_type(&self) -> GidType {
        match self.get().gid_type {
            bindings::IB_GID_TYPE_ROCE_UDP_ENCAP => GidType::RoceV2,
            bindings::IB_GID_TYPE_IB => GidType::Ib,
            _ => GidType::RoceV1,
        }
    }

    /// The index in the GID table.
    pub fn index(&self) -> u32 {
        self.get().index.into()
    }

    /// The port number.
    pub fn port(&self) -> PortNum {
        self.get().port_num
    }
}

impl Drop for GidAttr<'_> {
    fn drop(&mut self) {
        // SAFETY: By the type invariant we hold this reference.
        unsafe { bindings::rdma_put_gid_attr(self.0.as_ptr()) };
    }
}
