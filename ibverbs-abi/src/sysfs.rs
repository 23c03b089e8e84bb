//! What sysfs says about our devices, laid out as the kernel lays it out
//! for rxe: `/sys/class/infiniband/NAME/...`, `/sys/class/infiniband_verbs/uverbsN/...`.
//!
//! Middleware does not only call libibverbs: UCX keeps a device only if its
//! `/dev/infiniband/uverbsN` exists and reads its sysfs directory, libfabric
//! and rdma-core's tests find the device's network interface under
//! `device/net/`. `softroce-run` mounts this tree in a private mount
//! namespace (see its `present` module); `ibv_read_sysfs_file` answers from
//! it too, so the library and the mounted view never disagree.
//!
//! Pure data: no file is written here.

use crate::spec::{DeviceLink, DeviceSpec};
use std::net::IpAddr;
use std::path::PathBuf;

/// One node of the tree: a file with its contents, or a symbolic link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    File(String),
    Link(PathBuf),
}

/// A node and its path relative to `/sys/class`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: PathBuf,
    pub node: Node,
}

/// The uverbs character device's major number, as the kernel's.
const UVERBS_MAJOR: u32 = 231;
/// The first uverbs minor (`IB_UVERBS_BASE_MINOR`).
const UVERBS_BASE_MINOR: u32 = 192;

/// The node GUID of a device, in network order as `ibv_get_device_guid`
/// returns it: an EUI-64 made from the address, as rxe makes one from the MAC.
pub fn guid_of(addr: IpAddr) -> u64 {
    let b = match addr {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            [0x02, 0x00, o[0], 0xff, 0xfe, o[1], o[2], o[3]]
        }
        IpAddr::V6(v6) => {
            let o = v6.octets();
            [o[8] | 0x02, o[9], o[10], 0xff, 0xfe, o[13], o[14], o[15]]
        }
    };
    u64::from_ne_bytes(b)
}

/// The device's one GID (index 0): the IPv4-mapped address, or the IPv6 one.
pub fn gid_of(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// What a device's port is, as sysfs shows it: for RoCE v2 all of it
/// follows from the address; for native IB from the interface (its MAC
/// makes the GID and the GUID) and the LID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortView {
    /// The network interface the device sits on (None: none found).
    pub ifname: Option<String>,
    /// GID index 0.
    pub gid: [u8; 16],
    /// The node (and port) GUID, in network order as `ibv_get_device_guid` returns it.
    pub guid_be: u64,
    /// Native IB: the port's LID and its subnet manager's LID. None: RoCE v2.
    pub ib: Option<IbView>,
}

/// The LIDs of a native IB port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbView {
    pub lid: u16,
    pub sm_lid: u16,
}

/// The MAC address of the network interface `netdev`, if it has one here.
pub fn netdev_mac(netdev: &str) -> Option<[u8; 6]> {
    rdma_core_rs::link::raw::interface_mac(netdev).ok()
}

/// The GUID of a native IB port on an interface with MAC `mac`: the
/// EUI-64 of the MAC, as its port agent and the subnet manager name it.
pub fn ib_guid_be(mac: [u8; 6]) -> u64 {
    rdma_core_rs::link::ib_port::port_guid(mac).to_be()
}

/// The node GUID of the device `d` (network order): from the address
/// for RoCE v2, from the interface's MAC for native IB (0 if the
/// interface is not there).
pub fn guid_be_of(d: &DeviceSpec) -> u64 {
    match &d.link {
        DeviceLink::RoceV2 { addr, .. } => guid_of(*addr),
        DeviceLink::Ib { netdev, .. } => netdev_mac(netdev).map_or(0, ib_guid_be),
    }
}

/// The port of `d` as it is now: for native IB the interface's MAC, and
/// the LID given, else the subnet manager's (from the port agent's
/// record, if ACTIVE), else the LID plan's. An interface that is not there
/// gives the zero GID and GUID and LID 0 (opening the device then fails,
/// naming it).
pub fn port_view(d: &DeviceSpec) -> PortView {
    match &d.link {
        DeviceLink::RoceV2 { addr, scope_id } => {
            PortView { ifname: interface_of(*addr, *scope_id), gid: gid_of(*addr), guid_be: guid_of(*addr), ib: None }
        }
        DeviceLink::Ib { netdev, lid } => {
            let Some(mac) = netdev_mac(netdev) else {
                return PortView {
                    ifname: None,
                    gid: [0; 16],
                    guid_be: 0,
                    ib: Some(IbView { lid: lid.unwrap_or(0), sm_lid: 0 }),
                };
            };
            use rdma_core_rs::link::ib_port::{port_guid, IbPortRecord};
            let record = IbPortRecord::read(port_guid(mac)).ok().flatten();
            let ib = match (lid, &record) {
                (Some(l), _) => IbView { lid: *l, sm_lid: 0 },
                (None, Some(r)) => IbView { lid: r.lid, sm_lid: r.sm_lid },
                (None, None) => IbView { lid: rdma_core_rs::link::default_lid(mac), sm_lid: 0 },
            };
            let gid = match rdma_core_rs::link::gid_of_mac(mac) {
                IpAddr::V6(g) => g.octets(),
                IpAddr::V4(g) => g.to_ipv6_mapped().octets(),
            };
            PortView { ifname: Some(netdev.clone()), gid, guid_be: ib_guid_be(mac), ib: Some(ib) }
        }
    }
}

/// 16-bit groups in hex, colon-separated, as sysfs prints GUIDs and GIDs.
fn groups(bytes: &[u8]) -> String {
    bytes.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect::<Vec<_>>().join(":")
}

/// The network interface that owns `addr` (the one rxe would sit on):
/// the interface the address is configured on, `lo` for a loopback
/// address configured nowhere (all of 127/8 is lo's), the scope's
/// interface for an IPv6 link-local address. None if no interface has it.
pub fn interface_of(addr: IpAddr, scope_id: u32) -> Option<String> {
    if scope_id != 0 {
        let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
        // SAFETY: `name` holds IF_NAMESIZE bytes, as if_indextoname needs.
        let p = unsafe { libc::if_indextoname(scope_id, name.as_mut_ptr()) };
        if !p.is_null() {
            // SAFETY: if_indextoname wrote a NUL-terminated name.
            return Some(unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned());
        }
    }
    let mut found = None;
    let mut loopback = None;
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    if unsafe { libc::getifaddrs(&mut ifap) } == 0 {
        let mut cur = ifap;
        while !cur.is_null() && found.is_none() {
            // SAFETY: a node of the list getifaddrs returned.
            let ifa = unsafe { &*cur };
            cur = ifa.ifa_next;
            if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
                continue;
            }
            // SAFETY: a NUL-terminated name of the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned();
            if ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0 && loopback.is_none() {
                loopback = Some(name.clone());
            }
            // SAFETY: ifa_addr points at a sockaddr of the family it names.
            let a = unsafe { sockaddr_ip(ifa.ifa_addr) };
            if a == Some(addr) {
                found = Some(name);
            }
        }
        // SAFETY: the list getifaddrs returned, freed once.
        unsafe { libc::freeifaddrs(ifap) };
    }
    found.or_else(|| if addr.is_loopback() { loopback.or_else(|| Some("lo".into())) } else { None })
}

/// The MTU of the network interface `ifname` (sysfs), if it is there.
pub fn netdev_mtu(ifname: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/mtu")).ok()?.trim().parse().ok()
}

/// The largest IB MTU (as `enum ibv_mtu`: 1 = 256 ... 5 = 4096) whose
/// packets fit an interface of MTU `netdev_mtu`, as rxe sets its port's
/// active MTU: it takes its 80 bytes of headers (RXE_MAX_HDR_LENGTH) off
/// first, so a 1500-byte link gives 1024 and `lo` (65536) 4096.
pub fn rxe_active_mtu(netdev_mtu: u32) -> libc::c_int {
    match netdev_mtu.saturating_sub(80) {
        4096.. => 5,
        2048.. => 4,
        1024.. => 3,
        512.. => 2,
        _ => 1,
    }
}

/// The address of an AF_INET/AF_INET6 sockaddr, None for other families.
///
/// # Safety
/// `sa` points at a sockaddr as large as its family says.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    // SAFETY: per the contract, the family field is readable and names the layout.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let s = &*(sa as *const libc::sockaddr_in);
                Some(IpAddr::from(u32::from_be(s.sin_addr.s_addr).to_be_bytes()))
            }
            libc::AF_INET6 => {
                let s = &*(sa as *const libc::sockaddr_in6);
                Some(IpAddr::from(s.sin6_addr.s6_addr))
            }
            _ => None,
        }
    }
}

/// Entries of the port's GID table: index 0 holds the device's GID, the
/// others are empty (as on rxe, whose table has room for more addresses
/// than its netdev has), so that an empty entry can be told from one past
/// the table.
pub const GID_TABLE_LEN: u32 = 16;

/// `ibv_query_port`'s `port_cap_flags`: CM_SUP (bit 16), and on RoCE
/// IP_BASED_GIDS (bit 26).
pub fn port_cap_flags(ib: bool) -> u32 {
    if ib {
        1 << 16
    } else {
        (1 << 16) | (1 << 26)
    }
}

/// The tree for `devs` (device `i` is `uverbs{i}`), `port(dev)` saying
/// what each device's port is ([`port_view`]; an `ifname` of None: no
/// `device/net/`).
pub fn class_tree(devs: &[DeviceSpec], port: impl Fn(&DeviceSpec) -> PortView) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut file = |path: String, text: String| out.push(Entry { path: path.into(), node: Node::File(text + "\n") });
    file("infiniband_verbs/abi_version".into(), "6".into());
    let mut links = Vec::new();
    for (i, d) in devs.iter().enumerate() {
        let view = port(d);
        let dev = format!("infiniband/{}", d.name);
        let guid = groups(&view.guid_be.to_ne_bytes());
        file(format!("{dev}/node_type"), "1: CA".into());
        file(format!("{dev}/node_guid"), guid.clone());
        file(format!("{dev}/sys_image_guid"), guid);
        file(format!("{dev}/node_desc"), format!("softroce {}", d.name));
        file(format!("{dev}/fw_ver"), env!("CARGO_PKG_VERSION").into());
        let port = format!("{dev}/ports/1");
        file(format!("{port}/state"), "4: ACTIVE".into());
        file(format!("{port}/phys_state"), "5: LinkUp".into());
        let (layer, lids, gid_type) = match view.ib {
            // As the kernel prints an IB port: "%s" of the link layer, LIDs "0x%x".
            Some(ib) => ("InfiniBand", (ib.lid, ib.sm_lid), "IB/RoCE v1"),
            None => ("Ethernet", (0, 0), "RoCE v2"),
        };
        file(format!("{port}/link_layer"), layer.into());
        file(format!("{port}/rate"), "25 Gb/sec (1X EDR)".into());
        file(format!("{port}/lid"), format!("{:#x}", lids.0));
        file(format!("{port}/sm_lid"), format!("{:#x}", lids.1));
        file(format!("{port}/lid_mask_count"), "0".into());
        file(format!("{port}/sm_sl"), "0".into());
        // As ibv_query_port's port_cap_flags: CM_SUP, and IP_BASED_GIDS on RoCE.
        file(format!("{port}/cap_mask"), format!("0x{:08x}", port_cap_flags(view.ib.is_some())));
        file(format!("{port}/pkeys/0"), "0xffff".into());
        for g in 0..GID_TABLE_LEN {
            let gid = if g == 0 { view.gid } else { [0; 16] };
            file(format!("{port}/gids/{g}"), groups(&gid));
        }
        file(format!("{port}/gid_attrs/types/0"), gid_type.into());
        let verbs = format!("infiniband_verbs/uverbs{i}");
        file(format!("{verbs}/ibdev"), d.name.clone());
        file(format!("{verbs}/abi_version"), "1".into());
        file(format!("{verbs}/dev"), format!("{UVERBS_MAJOR}:{}", UVERBS_BASE_MINOR + i as u32));
        // No NUMA node, as for a virtual device.
        file(format!("{dev}/device/numa_node"), "-1".into());
        links.push((format!("{verbs}/device"), PathBuf::from(format!("/sys/class/{dev}/device"))));
        if let Some(ifname) = view.ifname {
            file(format!("{port}/gid_attrs/ndevs/0"), ifname.clone());
            links.push((format!("{dev}/device/net/{ifname}"), PathBuf::from(format!("/sys/class/net/{ifname}"))));
        }
    }
    out.extend(links.into_iter().map(|(path, to)| Entry { path: path.into(), node: Node::Link(to) }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_list;

    fn file<'a>(tree: &'a [Entry], path: &str) -> Option<&'a str> {
        tree.iter().find_map(|e| match &e.node {
            Node::File(t) if e.path.as_os_str() == path => Some(t.as_str()),
            _ => None,
        })
    }

    #[test]
    fn a_device_reads_as_rxe_does() {
        let devs = parse_list("rxe0=127.0.0.1,rxe1=10.1.2.3").unwrap();
        let tree =
            class_tree(&devs, |d| PortView { ifname: (d.name == "rxe0").then(|| "lo".to_string()), ..port_view(d) });
        assert_eq!(file(&tree, "infiniband/rxe0/ports/1/gids/0"), Some("0000:0000:0000:0000:0000:ffff:7f00:0001\n"));
        assert_eq!(file(&tree, "infiniband/rxe0/ports/1/gids/15"), Some("0000:0000:0000:0000:0000:0000:0000:0000\n"));
        assert_eq!(file(&tree, "infiniband/rxe1/node_guid"), Some("0200:0aff:fe01:0203\n"));
        assert_eq!(file(&tree, "infiniband/rxe0/ports/1/state"), Some("4: ACTIVE\n"));
        assert_eq!(file(&tree, "infiniband/rxe0/ports/1/cap_mask"), Some("0x04010000\n"));
        assert_eq!(file(&tree, "infiniband_verbs/uverbs1/ibdev"), Some("rxe1\n"));
        assert_eq!(file(&tree, "infiniband_verbs/uverbs1/dev"), Some("231:193\n"));
        assert_eq!(file(&tree, "infiniband/rxe0/ports/1/gid_attrs/ndevs/0"), Some("lo\n"));
        assert!(file(&tree, "infiniband/rxe1/ports/1/gid_attrs/ndevs/0").is_none());
        let net: Vec<_> = tree.iter().filter(|e| e.path.to_string_lossy().contains("/device/net/")).collect();
        assert_eq!(net.len(), 1, "only rxe0 has an interface");
        assert_eq!(net[0].path, PathBuf::from("infiniband/rxe0/device/net/lo"));
        assert_eq!(net[0].node, Node::Link("/sys/class/net/lo".into()));
    }

    #[test]
    fn a_native_ib_device_reads_as_an_ib_port() {
        let devs = parse_list("mlx0=ib:ibq0a:0x0a01").unwrap();
        let mac = [0x02, 0x88, 0, 0, 0x0a, 0x01];
        let view = PortView {
            ifname: Some("ibq0a".into()),
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x88, 0, 0xff, 0xfe, 0, 0x0a, 0x01],
            guid_be: ib_guid_be(mac),
            ib: Some(IbView { lid: 0x0a01, sm_lid: 0 }),
        };
        let tree = class_tree(&devs, |_| view.clone());
        assert_eq!(file(&tree, "infiniband/mlx0/ports/1/link_layer"), Some("InfiniBand\n"));
        assert_eq!(file(&tree, "infiniband/mlx0/ports/1/lid"), Some("0xa01\n"));
        assert_eq!(file(&tree, "infiniband/mlx0/ports/1/sm_lid"), Some("0x0\n"));
        assert_eq!(file(&tree, "infiniband/mlx0/ports/1/cap_mask"), Some("0x00010000\n"));
        assert_eq!(file(&tree, "infiniband/mlx0/ports/1/gid_attrs/types/0"), Some("IB/RoCE v1\n"));
        assert_eq!(file(&tree, "infiniband/mlx0/ports/1/gids/0"), Some("fe80:0000:0000:0000:0088:00ff:fe00:0a01\n"));
        // The GUID is the port's EUI-64, the GID's interface identifier.
        assert_eq!(file(&tree, "infiniband/mlx0/node_guid"), Some("0088:00ff:fe00:0a01\n"));
        assert!(tree.iter().any(|e| e.path.as_os_str() == "infiniband/mlx0/device/net/ibq0a"));
        // An interface that is not there: no GID, no GUID, the LID given.
        let gone = port_view(&parse_list("x=ib:ibq-none0").unwrap()[0]);
        assert_eq!((gone.gid, gone.guid_be, gone.ifname), ([0; 16], 0, None));
        assert_eq!(port_view(&parse_list("x=ib:ibq-none0:7").unwrap()[0]).ib, Some(IbView { lid: 7, sm_lid: 0 }));
    }

    #[test]
    fn the_guid_matches_the_library() {
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(guid_of(a).to_ne_bytes(), [0x02, 0x00, 127, 0xff, 0xfe, 0, 0, 1]);
    }

    #[test]
    fn the_active_mtu_follows_the_interface_as_rxe_sets_it() {
        // rxe: the netdev MTU less 80 bytes of headers, rounded down to an IB MTU.
        assert_eq!(rxe_active_mtu(1500), 3);
        assert_eq!(rxe_active_mtu(1104), 3);
        assert_eq!(rxe_active_mtu(1103), 2);
        assert_eq!(rxe_active_mtu(2128), 4);
        assert_eq!(rxe_active_mtu(4175), 4);
        assert_eq!(rxe_active_mtu(4176), 5);
        assert_eq!(rxe_active_mtu(9000), 5);
        assert_eq!(rxe_active_mtu(65536), 5);
        assert_eq!(rxe_active_mtu(576), 1);
        assert_eq!(rxe_active_mtu(0), 1);
        if let Some(m) = netdev_mtu("lo") {
            assert!(m >= 1280, "lo's MTU {m}");
        }
    }

    #[test]
    fn loopback_addresses_belong_to_lo() {
        // 127.0.0.1 is configured on lo; 127.0.0.77 is lo's without being configured.
        let lo = interface_of("127.0.0.1".parse().unwrap(), 0).expect("an interface for 127.0.0.1");
        assert_eq!(interface_of("127.0.0.77".parse().unwrap(), 0).as_deref(), Some(lo.as_str()));
        assert_eq!(interface_of("192.0.2.200".parse().unwrap(), 0), None, "TEST-NET-1 is nobody's");
    }
}
