//! Soft devices and their GIDs.
//!
//! A soft device is what `rdma link add rxe0 type rxe netdev eth0` makes in
//! the kernel: a RoCE v2 device bound to a local IP address, whose GID
//! table holds, at index 0, the GID derived from that address
//! (IPv4-mapped for IPv4). [`Device::new`] makes one; [`devices`] lists
//! those of this process, as `ibv_get_device_list` does.
//!
//! A device can also send raw frames instead ([`Backend`]): RoCE v1 or
//! native InfiniBand on a network interface ([`Device::on_netdev`]: its GID
//! is the link-local EUI-64 GID of the interface's MAC, as RoCE v1 makes
//! it), or on an in-process fabric ([`Device::in_process`]).

use crate::error::{Error, Result};
use rdma_link::faults::FaultConfig;
use rdma_link::udp::IoDriver;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::Duration;

/// A 128-bit global identifier (`union ibv_gid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The RoCE v2 GID of an IP address.
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IP address a RoCE v2 GID stands for.
    pub fn to_ip(self) -> IpAddr {
        Ipv6Addr::from(self.0).to_canonical()
    }

    /// The 32 hex digits the libibverbs examples exchange (`gid_to_wire_gid`).
    pub fn to_wire_hex(self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses the form [`Gid::to_wire_hex`] writes.
    pub fn from_wire_hex(s: &str) -> Option<Gid> {
        if s.len() != 32 || !s.is_ascii() {
            return None;
        }
        let mut g = [0u8; 16];
        for (i, b) in g.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Gid(g))
    }

    pub fn is_zero(self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Display for Gid {
    /// As `inet_ntop(AF_INET6)` prints it, which is what the examples show.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ipv6Addr::from(self.0).fmt(f)
    }
}

/// How a device's engine makes progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Progress {
    /// Only inside the application's calls (post, poll, wait), like UCX's
    /// and libfabric's manual progress: no thread, no spinning core. A
    /// passive peer (the target of WRITEs and READs) must still call
    /// [`crate::Context::progress`] or wait on something now and then.
    #[default]
    Manual,
    /// A background thread that sleeps on the socket and answers peers
    /// when the application is busy elsewhere, as a NIC would.
    Thread,
}

/// What a device's packets travel over.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Backend {
    /// RoCE v2 over UDP sockets bound to the device address (the default).
    #[default]
    Udp,
    /// Raw Ethernet frames on this network interface (AF_PACKET; needs
    /// root), framed as [`DeviceConfig::link`] says.
    Netdev(String),
    /// Frames between the devices of this process that name the same
    /// fabric: no root, no interface.
    InProcess(String),
}

/// Options of a device.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    /// What the packets travel over.
    pub backend: Backend,
    /// Their framing: RoCE v2 for [`Backend::Udp`]; RoCE v1 or native IB
    /// for the frame backends.
    pub link: rdma_transport::LinkKind,
    /// The port's LID on native IB (`--lid`): 1 to 0xBFFF (unicast). 0
    /// on a network interface: the LID the subnet manager assigned, from
    /// the port agent's record, else the LID plan (see
    /// [`Device::on_netdev`]).
    pub lid: u16,
    /// Records every packet the device sends and receives: Ethernet pcap
    /// for RoCE v2 (UDP: sends then leave from unconnected sockets and
    /// copied, not by reference) and RoCE v1, ERF type-21 records for IB
    /// (see `link::capture`).
    pub pcap: Option<std::path::PathBuf>,
    pub progress: Progress,
    /// Faults injected on every packet the device sends.
    pub faults: FaultConfig,
    /// The scope of an IPv6 link-local address (an interface index).
    pub scope_id: u32,
    /// Adaptive polling: blocking waits busy-poll this long before they
    /// sleep on the socket, so that an answer that comes quickly is seen
    /// at busy-poll latency, and an idle wait costs no CPU after it.
    pub spin: Duration,
    /// How long a lone ACK may wait to leave with the next packet sent
    /// (`Endpoint::set_ack_delay`): in a ping-pong the ACK then goes out
    /// right after the reply (in a system call of its own) instead of
    /// ahead of it, off the reply's critical path. Only QPs that are
    /// sending themselves hold ACKs, so the target of a one-way stream
    /// still ACKs at once. A held
    /// ACK never strands: with manual progress a small thread sends those
    /// whose delay is up while the application is not calling (at most
    /// about a millisecond late), and destroying a QP sends its held ACKs
    /// first. Zero: every ACK at once, as rxe does.
    pub ack_delay: Duration,
    /// With an ACK delay, a held ACK leaves ahead of its QP's next request
    /// instead of right after it (`Endpoint::set_ack_before_requests`):
    /// the order hardware gives, which some applications count on (the
    /// drop-in libibverbs sets it). Off by default.
    pub ack_before_requests: bool,
    /// One datagram per packet: no UDP GSO on send, no GRO on receive
    /// (for comparison, and what a fault-injecting device does anyway).
    pub plain_datagrams: bool,
    /// Send every packet with `sendto` from unconnected sockets. By
    /// default each send socket of the socket driver connects to its first
    /// peer, which saves a route lookup per send; for IPv4 the send path
    /// then learns the Identification the kernel writes (the ICRC covers
    /// it) with a probe, and falls back to this by itself where it cannot.
    /// The io_uring driver and fault injection always send unconnected.
    /// For comparison (rdma-perf `--unconnected`).
    pub unconnected_sends: bool,
    /// The system calls that move packets: plain sockets (the default) or
    /// io_uring (see [`IoDriver`]).
    pub io_driver: IoDriver,
    /// Data packets (requests, READ responses) leave ECN-capable, ECT(0),
    /// when their QP's traffic class leaves the ECN bits at 00, so that a
    /// congested switch marks them instead of dropping them; ACKs keep the
    /// traffic class as given (`Endpoint::set_ecn_capable`). On by default.
    pub ecn_capable: bool,
    /// DCQCN on every RC/UC QP (`Endpoint::set_congestion_control`): a
    /// reaction point that CNPs cut and a pacer that holds data packets to
    /// its rate. `None` (the default): off; CNPs received are then only
    /// counted. The notification point (CNPs sent for CE-marked data) runs
    /// either way.
    pub congestion_control: Option<rdma_transport::cc::DcqcnParams>,
    /// Any congestion controller (`Endpoint::set_controller`): TIMELY,
    /// or DCQCN as a factory. When set it replaces `congestion_control`.
    pub controller: Option<std::sync::Arc<dyn rdma_transport::cc::ControllerFactory>>,
    /// Shares the device's UDP port with the other processes of the host
    /// that open it (as on a NIC: one address, one GID; see
    /// [`crate::share`]): each process binds the port with `SO_REUSEPORT`,
    /// makes its QPs in a range of its own, and the kernel steers each
    /// packet to the process of its destination. Off by default: the
    /// device then binds the port alone (a second process gets
    /// EADDRINUSE), with UDP GRO, which a shared port cannot use.
    pub shared: bool,
    /// Drives the UDP backend through the frame driver, as a
    /// `rdma_link::Link` like every other link (one packet a call), so
    /// that `faults` and `pcap` are the link wrappers' (`FaultLink`,
    /// `CaptureLink`) as on the frame backends (IP multicast through the
    /// link too). Slower: no GSO, GRO, io_uring, connected sockets or
    /// payloads by reference; no shared port. For comparison and tests;
    /// off by default.
    pub udp_as_link: bool,
    /// A simulated longer, slower link: every packet the device sends
    /// waits for its serialisation at `rate_bps` and for `latency`
    /// (`rdma_link::delay::DelayLink`, in real time, over any link; the UDP
    /// backend then runs as a link, see `udp_as_link`). Zero: none.
    pub delay: rdma_link::delay::DelayConfig,
    /// The engines (shards) the device runs, each on a thread of its own:
    /// 1 is one engine driven by the application's own calls, the lowest
    /// latency for a few QPs. More spread the device's QPs over
    /// that many engines, for throughput on many QPs
    /// (docs/multi-core-device.md): each engine has its own socket on the
    /// device's port (a shared port, so the kernel steers each packet to
    /// the engine of its QP) and its own progress thread. UDP backend only.
    /// 0, the default: `SOFTROCE_THREADS` where it is set and the backend
    /// can (the UDP backend's own driver), else 1
    /// ([`DeviceConfig::engines`]), so that an application (and a test
    /// suite) runs on several engines unchanged.
    pub threads: usize,
}

impl DeviceConfig {
    /// The default of [`DeviceConfig::spin`].
    pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
    /// The default of [`DeviceConfig::ack_delay`]: 20 µs, about a
    /// loopback round trip, so that a ping-pong's reply carries its ACK.
    pub const DEFAULT_ACK_DELAY: Duration = Duration::from_micros(20);
}

impl DeviceConfig {
    /// The part of this configuration the UDP backend binds with.
    pub(crate) fn udp(&self) -> rdma_link::udp::UdpConfig {
        rdma_link::udp::UdpConfig {
            scope_id: self.scope_id,
            plain_datagrams: self.plain_datagrams,
            plain_receive: false,
            shared: self.shared,
            faults: self.faults,
            io_driver: self.io_driver,
            pcap: self.pcap.clone(),
            unconnected_sends: self.unconnected_sends,
            ecn_capable: self.ecn_capable,
            as_link: self.udp_as_link,
        }
    }
}

impl Default for DeviceConfig {
    fn default() -> DeviceConfig {
        DeviceConfig {
            backend: Backend::Udp,
            link: rdma_transport::LinkKind::RoceV2,
            lid: 0,
            pcap: None,
            progress: Progress::default(),
            faults: FaultConfig::default(),
            scope_id: 0,
            spin: DeviceConfig::DEFAULT_SPIN,
            ack_delay: DeviceConfig::DEFAULT_ACK_DELAY,
            ack_before_requests: false,
            plain_datagrams: false,
            unconnected_sends: false,
            io_driver: IoDriver::Sockets,
            ecn_capable: true,
            congestion_control: None,
            controller: None,
            shared: false,
            udp_as_link: false,
            delay: rdma_link::delay::DelayConfig::default(),
            threads: 0,
        }
    }
}

impl DeviceConfig {
    /// The engines the device runs: [`DeviceConfig::threads`], or for 0
    /// what it says.
    pub fn engines(&self) -> usize {
        match self.threads {
            0 if self.backend == Backend::Udp && !self.udp_as_link && !self.delay.is_active() => {
                DeviceConfig::threads_from_env()
            }
            0 => 1,
            n => n,
        }
    }

    /// `SOFTROCE_THREADS`: the engines a device runs when its
    /// configuration does not say (1 to [`MAX_THREADS`]; unset: 1). A value
    /// that is not such a number is said (once per process) and read as 1.
    pub fn threads_from_env() -> usize {
        let Ok(v) = std::env::var("SOFTROCE_THREADS") else { return 1 };
        match v.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_THREADS).contains(&n) => n,
            _ => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    eprintln!(
                        "softroce: SOFTROCE_THREADS={v:?} is not a number of engines (1 to {MAX_THREADS}): using 1"
                    )
                });
                1
            }
        }
    }
}

/// A soft RoCE v2 device: a name and the local address it is bound to.
#[derive(Debug, Clone)]
pub struct Device {
    name: String,
    addr: IpAddr,
    config: DeviceConfig,
    /// Native IB on a managed port: what its agent published.
    port: Option<rdma_link::ib_port::IbPortRecord>,
}

/// What `ibv_query_port` reports of a device's port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// The port's LID (native IB; 0 on RoCE).
    pub lid: u16,
    /// The subnet manager's LID (0: none).
    pub sm_lid: u16,
    pub lmc: u8,
    pub state: rdma_link::ib_port::PortState,
    /// The MTU the subnet manager's configuration leaves active, if known.
    pub active_mtu: Option<rdma_transport::qp::Mtu>,
}

static DEVICES: Mutex<Vec<Device>> = Mutex::new(Vec::new());

/// The devices made in this process, like `ibv_get_device_list`.
pub fn devices() -> Vec<Device> {
    DEVICES.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

impl Device {
    /// Makes a device `name` bound to `addr` (like `rdma link add NAME type
    /// rxe netdev …`), with default options, and adds it to [`devices`].
    pub fn new(name: &str, addr: IpAddr) -> Result<Device> {
        Device::with_config(name, addr, DeviceConfig::default())
    }

    pub fn with_config(name: &str, addr: IpAddr, config: DeviceConfig) -> Result<Device> {
        Device::make(name, addr, config, None)
    }

    /// Checks and lists a device (a port record only for a managed IB port).
    fn make(
        name: &str,
        addr: IpAddr,
        config: DeviceConfig,
        port: Option<rdma_link::ib_port::IbPortRecord>,
    ) -> Result<Device> {
        if addr.is_unspecified() || addr.is_multicast() {
            return Err(Error::InvalidArgument(format!(
                "device {name}: {addr} cannot be a device address (it must be one local unicast address)"
            )));
        }
        config.faults.validate().map_err(Error::InvalidArgument)?;
        check_backend(name, addr, &config)?;
        let d = Device { name: name.to_string(), addr, config, port };
        let mut list = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|o| o.name != d.name);
        list.push(d.clone());
        Ok(d)
    }

    /// A device that sends `config.link` frames (RoCE v1 or native IB) on
    /// the network interface `netdev`; its GID is the EUI-64 GID of the
    /// interface's MAC. Opening it needs `CAP_NET_RAW`.
    ///
    /// Native IB with `config.lid` 0 takes the LID a subnet manager gave
    /// the port, from the record its port agent publishes
    /// ([`rdma_link::ib_port`]; an error naming the interface if the
    /// port is not ACTIVE yet), or without an agent the LID plan's
    /// ([`rdma_link::default_lid`]). A LID given (`--lid`) wins, and
    /// the record is not read.
    pub fn on_netdev(name: &str, netdev: &str, config: DeviceConfig) -> Result<Device> {
        use rdma_link::ib_port::{self, IbPortRecord};
        let mac = rdma_link::raw::interface_mac(netdev)?;
        let mut config = DeviceConfig { backend: Backend::Netdev(netdev.to_string()), ..config };
        let mut port = None;
        if config.link == rdma_transport::LinkKind::Ib && config.lid == 0 {
            let guid = ib_port::port_guid(mac);
            port = IbPortRecord::read(guid).map_err(std::io::Error::from)?;
            config.lid = match &port {
                Some(r) => r.usable_lid().map_err(std::io::Error::from)?,
                None => rdma_link::default_lid(mac),
            };
            tracing::debug!(netdev, lid = config.lid, managed = port.is_some(), "IB port LID");
        }
        Device::make(name, rdma_link::gid_of_mac(mac), config, port)
    }

    /// The port as its agent published it (native IB on a managed port).
    pub fn ib_port(&self) -> Option<&rdma_link::ib_port::IbPortRecord> {
        self.port.as_ref()
    }

    /// `ibv_query_port`: the port's LID, SM LID, state and active MTU.
    /// A port no agent manages reports itself ACTIVE with no SM, and the
    /// MTU its link can carry is known only when it opens (None here).
    pub fn query_port(&self) -> PortAttr {
        match &self.port {
            Some(r) => PortAttr {
                lid: r.lid,
                sm_lid: r.sm_lid,
                lmc: r.lmc,
                state: r.state,
                active_mtu: rdma_transport::qp::Mtu::from_bytes(r.mtu),
            },
            None => PortAttr {
                lid: self.lid(),
                sm_lid: 0,
                lmc: 0,
                state: rdma_link::ib_port::PortState::Active,
                active_mtu: None,
            },
        }
    }

    /// A device that sends `config.link` frames on the in-process fabric
    /// `fabric`, with the MAC address `mac` (its GID is made from it).
    pub fn in_process(name: &str, fabric: &str, mac: rdma_link::Mac, config: DeviceConfig) -> Result<Device> {
        let config = DeviceConfig { backend: Backend::InProcess(fabric.to_string()), ..config };
        Device::with_config(name, rdma_link::gid_of_mac(mac), config)
    }

    /// `ibv_get_device_name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    /// The GID at `index`: only index 0, the RoCE v2 GID of the address.
    pub fn gid(&self, index: u32) -> Result<Gid> {
        match index {
            0 => Ok(Gid::from_ip(self.addr)),
            _ => Err(Error::InvalidArgument(format!(
                "device {}: no GID at index {index} (index 0 holds the RoCE v2 GID of {})",
                self.name, self.addr
            ))),
        }
    }

    /// The port's LID (native IB; 0 on RoCE).
    pub fn lid(&self) -> u16 {
        if self.config.link == rdma_transport::LinkKind::Ib {
            self.config.lid
        } else {
            0
        }
    }
}

/// The most engines a device runs ([`DeviceConfig::threads`]): each takes
/// one of the shared port's 128 slots.
pub const MAX_THREADS: usize = 32;

/// Checks that the backend, the framing and the LID go together.
fn check_backend(name: &str, addr: IpAddr, config: &DeviceConfig) -> Result<()> {
    use rdma_transport::LinkKind;
    let bad = |why: String| Err(Error::InvalidArgument(format!("device {name}: {why}")));
    match (&config.backend, config.link) {
        (Backend::Udp, LinkKind::RoceV2) => {}
        (Backend::Udp, k) => return bad(format!("{} frames need a frame backend (a netdev or in-process)", k.name())),
        (_, LinkKind::RoceV2) => return bad("RoCE v2 goes over the UDP backend".into()),
        (Backend::Netdev(n) | Backend::InProcess(n), _) if n.is_empty() => {
            return bad("the frame backend needs a name".into())
        }
        _ => {}
    }
    if (config.udp_as_link || config.delay.is_active()) && config.shared {
        return bad("a shared port needs the UDP backend's own driver (udp_as_link and delay off)".into());
    }
    if config.threads > MAX_THREADS {
        return bad(format!("threads {} is out of range (1 to {MAX_THREADS}, or 0 for the default)", config.threads));
    }
    if config.engines() > 1 && (config.backend != Backend::Udp || config.udp_as_link || config.delay.is_active()) {
        return bad(format!(
            "threads {}: several engines need the UDP backend's own driver (udp_as_link and delay off)",
            config.threads
        ));
    }
    if config.link == LinkKind::Ib && !(1..=0xbfff).contains(&config.lid) {
        return bad(format!("LID {} is not a unicast LID (1 to 0xBFFF); pass --lid", config.lid));
    }
    if config.backend != Backend::Udp && rdma_link::mac_of_gid(addr).is_none() {
        return bad(format!("{addr} is not a link-local EUI-64 GID made from a MAC"));
    }
    Ok(())
}

/// Bits of the 32-bit `device_cap_flags` (`ibv_query_device`), with the
/// values of rdma-core's `libibverbs/verbs.h` (`enum ibv_device_cap_flags`),
/// for the memory windows this stack has: type 1 and type 2B, as kernel
/// Soft-RoCE advertises them (rxe_param.h `RXE_DEVICE_CAP_FLAGS`:
/// `IB_DEVICE_MEM_WINDOW | IB_DEVICE_MEM_WINDOW_TYPE_2B`).
pub mod device_cap {
    /// `IBV_DEVICE_MEM_WINDOW`: memory windows (type 1).
    pub const MEM_WINDOW: u32 = 1 << 17;
    /// `IBV_DEVICE_MEM_WINDOW_TYPE_2A`: type 2A windows (bound to a QP
    /// number). Not reported: this stack's type 2 windows are type 2B.
    pub const MEM_WINDOW_TYPE_2A: u32 = 1 << 23;
    /// `IBV_DEVICE_MEM_WINDOW_TYPE_2B`: type 2B windows (bound to a QP).
    pub const MEM_WINDOW_TYPE_2B: u32 = 1 << 24;
    /// What [`crate::Context::device_cap_flags`] reports.
    pub const ALL: u32 = MEM_WINDOW | MEM_WINDOW_TYPE_2B;
}

/// Bits of `device_cap_flags_ex` (`ibv_query_device_ex`) with the values
/// of rdma-core's `kernel-headers/rdma/ib_user_verbs.h`
/// (`IB_UVERBS_DEVICE_*`), for the capabilities this stack has beyond the
/// 32-bit `device_cap_flags`. Kernel Soft-RoCE (rxe_param.h) advertises
/// the same three on 64-bit hosts.
pub mod device_cap_ex {
    /// `IB_UVERBS_DEVICE_FLUSH_GLOBAL`: FLUSH with placement type global.
    pub const FLUSH_GLOBAL: u64 = 1 << 38;
    /// `IB_UVERBS_DEVICE_FLUSH_PERSISTENT`: FLUSH with placement type
    /// persistent. Ordinary memory has no persistence domain of its own
    /// here: a persistent FLUSH makes earlier writes visible, as a global
    /// one does (docs/flush-atomic-write.md).
    pub const FLUSH_PERSISTENT: u64 = 1 << 39;
    /// `IB_UVERBS_DEVICE_ATOMIC_WRITE`: `IBV_WR_ATOMIC_WRITE`.
    pub const ATOMIC_WRITE: u64 = 1 << 40;
    /// Every bit above, as [`crate::Context::device_cap_flags_ex`] reports them.
    pub const ALL: u64 = FLUSH_GLOBAL | FLUSH_PERSISTENT | ATOMIC_WRITE;
}

/// On-demand paging capabilities (libibverbs' `ibv_odp_general_caps` and
/// `ibv_odp_transport_cap_bits`, verbs.h), as [`crate::Context::odp_caps`]
/// reports them in an [`OdpCaps`] (docs/odp.md).
pub mod odp {
    /// `IBV_ODP_SUPPORT`: regions may be registered with
    /// `IBV_ACCESS_ON_DEMAND` ([`crate::ProtectionDomain::reg_mr_on_demand`]).
    pub const SUPPORT: u64 = 1 << 0;
    /// `IBV_ODP_SUPPORT_IMPLICIT`: the whole address space
    /// ([`crate::ProtectionDomain::reg_mr_implicit`]).
    pub const SUPPORT_IMPLICIT: u64 = 1 << 1;
    /// `IBV_ODP_SUPPORT_SEND`: a SEND's gather list may be on demand.
    pub const SEND: u32 = 1 << 0;
    /// `IBV_ODP_SUPPORT_RECV`: a receive buffer may be on demand.
    pub const RECV: u32 = 1 << 1;
    /// `IBV_ODP_SUPPORT_WRITE`: an RDMA WRITE's target (and source).
    pub const WRITE: u32 = 1 << 2;
    /// `IBV_ODP_SUPPORT_READ`: an RDMA READ's source (and target).
    pub const READ: u32 = 1 << 3;
    /// `IBV_ODP_SUPPORT_ATOMIC`: compare-and-swap and fetch-and-add.
    pub const ATOMIC: u32 = 1 << 4;
    /// `IBV_ODP_SUPPORT_SRQ_RECV`: a receive buffer posted to an SRQ.
    pub const SRQ_RECV: u32 = 1 << 5;
    /// `IBV_ODP_SUPPORT_FLUSH` (newer rdma-core headers, not 44's
    /// verbs.h): FLUSH.
    pub const FLUSH: u32 = 1 << 6;
    /// `IBV_ODP_SUPPORT_ATOMIC_WRITE` (as [`FLUSH`]): ATOMIC WRITE.
    pub const ATOMIC_WRITE: u32 = 1 << 7;
    /// What RC QPs do with on-demand memory here: everything.
    pub const RC: u32 = SEND | RECV | WRITE | READ | ATOMIC | SRQ_RECV | FLUSH | ATOMIC_WRITE;
    /// XRC: SEND (into XRC SRQs), WRITE, READ and atomics; no FLUSH or
    /// ATOMIC WRITE (annex A14 has no opcodes for them), no QP receive queue.
    pub const XRC: u32 = SEND | WRITE | READ | ATOMIC | SRQ_RECV;
    /// UC: the operations UC has.
    pub const UC: u32 = SEND | RECV | WRITE | SRQ_RECV;
    /// UD: the operations UD has.
    pub const UD: u32 = SEND | RECV | SRQ_RECV;
}

/// `struct ibv_odp_caps` of `ibv_query_device_ex` (plus `xrc_odp_caps`,
/// which follows it there): bits of [`odp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OdpCaps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
    /// XRC: RC's operations that XRC has (docs/xrc.md).
    pub xrc_odp_caps: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_of_ipv4_and_ipv6() {
        let g = Gid::from_ip("127.0.0.2".parse().unwrap());
        assert_eq!(g.to_wire_hex(), "00000000000000000000ffff7f000002");
        assert_eq!(g.to_string(), "::ffff:127.0.0.2");
        assert_eq!(g.to_ip(), "127.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(Gid::from_wire_hex(&g.to_wire_hex()), Some(g));
        let g6 = Gid::from_ip("fe80::5054:ff:fe77:1".parse().unwrap());
        assert_eq!(g6.to_wire_hex(), "fe80000000000000505400fffe770001");
        assert_eq!(Gid::from_wire_hex("zz"), None);
        assert_eq!(Gid::from_wire_hex("g0000000000000000000ffff7f000002"), None);
    }

    #[test]
    fn refuses_unspecified_addresses_and_other_gid_indexes() {
        assert!(Device::new("bad", "0.0.0.0".parse().unwrap()).is_err());
        let d = Device::new("rxe-test", "127.0.0.1".parse().unwrap()).unwrap();
        assert!(d.gid(1).unwrap_err().to_string().contains("index 1"));
        assert!(devices().iter().any(|x| x.name() == "rxe-test"));
    }
}
