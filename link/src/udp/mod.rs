//! The RoCE v2 backend over UDP sockets.
//!
//! The engine builds whole IP packets because the ICRC covers the IP and
//! UDP headers; through a UDP socket the kernel writes those headers
//! itself, so this backend sends only the part after the UDP header and
//! makes the kernel write what the engine assumed:
//!
//! - IPv4 with DF (`IP_PMTUDISC_DO`), no IP options, and the
//!   Identification Linux writes: 0 for an unconnected socket, and for a
//!   connected one the number the send path has learned ([`connected`];
//!   checked on captured packets by the `wire_capture` test);
//! - the QP's UDP source port (rxe's 0xC000..0xFFFF hash of the QPN): one
//!   send socket per source port, bound to the device address;
//! - destination port 4791;
//! - the TOS (IPv6: traffic class) byte the engine wrote: the QP's traffic
//!   class, DSCP and ECN, with ECT(0) on data packets by default
//!   (`DeviceConfig::ecn_capable`). A source port has one send socket per
//!   TOS it sends with ([`TxPort`], up to [`TOS_PER_PORT`]), each set to
//!   that TOS, so that neither data packets (ECT) nor ACKs (not ECT) need
//!   an `IP_TOS` / `IPV6_TCLASS` control message: one makes Linux's UDP
//!   send skip the connected socket's cached route (`udp_sendmsg` clears
//!   `connected` for IP-level control messages), which cost a busy round
//!   trip 0.2-0.3 us. A TOS past those takes the control message. A GSO
//!   message only groups packets of one TOS. The ICRC masks the byte, so a
//!   wrong one would go unnoticed: the `wire_capture` test checks it.
//! - the IPv4 TTL / IPv6 hop limit the engine wrote (the address vector's)
//!   travels the same way, both ways: an `IP_TTL` / `IPV6_HOPLIMIT` control
//!   message on send (none for 64, which every send socket is set to; IPv4
//!   TTL 0, which Linux refuses, leaves as 1) and `IP_RECVTTL` /
//!   `IPV6_RECVHOPLIMIT` on receive, so that the header a UD receive
//!   shows in its GRH area has the TTL the packet came with.
//!   The receive side asks for it once the device has a UD QP, or a
//!   capture (`UdpIo::want_hop_limits`): before, the header says 64.
//!
//! Receiving, one socket bound to the device address and port 4791 takes
//! every packet; each packet goes to the engine from its BTH on, with what
//! the socket reports of the headers the kernel took off as typed values
//! (`rdma_wire::DatagramHeaders`: addresses, ports, and the TOS that
//! `IP_RECVTOS` / `IPV6_RECVTCLASS` hand up with each datagram, in a control
//! message next to UDP_GRO's, with either driver; nothing is rebuilt to be
//! parsed again): the engine takes the ECN bits from them and counts CE
//! marks per device and per QP
//! (`Stats::ecn_ce_received`, `QueuePair::stats`). The one covered
//! field the socket hides, the sender's IPv4 Identification, is recovered
//! from the ICRC (`rdma_wire::ident`); the engine is told so with
//! `Endpoint::set_ipv4_ident_unknown`.
//!
//! System calls are batched and offloaded ([`send`], [`recv`]): runs of
//! equal-sized packets leave as one UDP_SEGMENT (GSO) send each, several
//! per `sendmmsg`; the receive socket takes UDP_GRO super-datagrams and
//! plain datagrams alike, [`BATCH`] per `recvmmsg`. The io_uring driver
//! (`uring`, [`IoDriver::IoUring`]) moves the same messages with a
//! multishot receive into registered buffers and one `io_uring_enter`
//! per round of sending.

mod connected;
mod multicast;
mod recv;
mod send;
mod shared_port;
mod uring;

pub use multicast::group_ip;
pub use recv::split_datagram;

use crate::faults::{DatagramFaults, FaultConfig};
use crate::io_stats::IoStats;
use rdma_transport::{RegionMemory, Transmit, MAX_PACKET};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};

/// Datagrams per `recvmmsg`.
pub const BATCH: usize = 32;

/// Packets built per round of sending: four GSO runs of 4 KiB packets.
pub const TX_BATCH: usize = 64;

/// Full rounds of [`TX_BATCH`] packets one [`UdpIo::transmit`] call may
/// send (about 1 MiB at a 4 KiB MTU). The device lock is held while it
/// sends, and a QP can have megabytes of READ responses queued: without a
/// bound, receive, timers and the application (an unrelated QP's ACK)
/// waited for all of them. The caller comes back at once for the rest
/// ([`UdpIo::sends_left`]).
pub const TX_BATCHES_PER_CALL: usize = 4;

/// Send sockets (UDP source ports) per device; more QPs share them.
pub const MAX_TX_SOCKETS: usize = 16;

/// The largest datagram UDP_GRO hands up.
const GRO_MAX: usize = 65536;

const SOCKET_BUFFER: usize = 8 << 20;

/// The receive buffer of a send socket (the kernel doubles it): send
/// sockets are never read, and a drop-all filter keeps datagrams out, but
/// the connected-send probe's timestamp copy must fit in the error queue,
/// which is charged to it.
const TX_SOCKET_RCVBUF: usize = 4096;

/// What the kernel offloads for this backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offloads {
    /// Runs of equal-sized packets leave as one UDP_SEGMENT send.
    pub gso: bool,
    /// The receive socket takes UDP_GRO super-datagrams.
    pub gro: bool,
}

/// Which system calls move the packets. Both drivers use the same
/// sockets, offloads and packet layout, and pass the same tests.
///
/// The environment variable `SOFTROCE_IO_DRIVER` (`io-uring` or
/// `sockets`), when set, overrides the configured choice, so that a whole
/// test suite or an unchanged application runs on either driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoDriver {
    /// `recvmmsg` / `sendmmsg` on the sockets: the default, because on
    /// loopback it measured faster than io_uring (README, Performance).
    #[default]
    Sockets,
    /// io_uring: a multishot `recvmsg` over a ring of registered buffers,
    /// and every send of a round in one `io_uring_enter`. Where the kernel
    /// lacks it (multishot `recvmsg` and provided-buffer rings came in
    /// Linux 6.0) or forbids it, the device falls back to sockets with a
    /// warning; [`crate::Context::io_driver`] says which one runs.
    IoUring,
}

impl IoDriver {
    /// The name used by `SOFTROCE_IO_DRIVER`, rdma-perf's `--io` and reports.
    pub fn name(self) -> &'static str {
        match self {
            IoDriver::IoUring => "io-uring",
            IoDriver::Sockets => "sockets",
        }
    }
}

impl std::str::FromStr for IoDriver {
    type Err = String;
    fn from_str(s: &str) -> Result<IoDriver, String> {
        match s {
            "io-uring" | "io_uring" | "uring" => Ok(IoDriver::IoUring),
            "sockets" | "socket" => Ok(IoDriver::Sockets),
            other => Err(format!("unknown I/O driver '{other}' (expected io-uring or sockets)")),
        }
    }
}

/// The driver in use and its state.
enum Driver {
    Sockets(recv::RxRing),
    Uring(Box<uring::Uring>),
}

/// Send sockets per source port, one per TOS (see the module's comment):
/// data packets' and ACKs' of two traffic classes fit.
pub(super) const TOS_PER_PORT: usize = 4;

/// A send socket: the TOS it is set to, and its connection.
struct TxSocket {
    socket: Socket,
    tos: u8,
    conn: connected::Connection,
}

/// One UDP source port: how many QPs use it, and its send sockets, the
/// first set to the device's data TOS (opened when the port is reserved)
/// and the others opened as other TOS values come, all bound to the port
/// with SO_REUSEPORT. Packets of one QP keep their order across them:
/// a round's messages go in order, socket after socket.
struct TxPort {
    users: usize,
    sockets: Vec<TxSocket>,
}

/// A send socket: its port, and its place in [`TxPort::sockets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct SocketId {
    pub(super) port: u16,
    pub(super) lane: usize,
}

/// The sockets and buffers of one device.
pub struct UdpIo {
    // Declared first, dropped first: an io_uring ring ends its requests
    // before the sockets, buffers and batch they point at go.
    driver: Driver,
    local: IpAddr,
    scope_id: u32,
    /// The TOS / traffic class of each port's first send socket: that of
    /// data packets of a QP with traffic class 0 (ECT(0) by default).
    sock_tos: u8,
    rx: Socket,
    /// The port's membership when the host's processes share it.
    member: Option<crate::share::Member>,
    /// Whether received datagrams bring their TTL / hop limit
    /// ([`UdpIo::want_hop_limits`]).
    hop_limits: bool,
    tx: HashMap<u16, TxPort>,
    /// Whether ports may open sockets for other TOS values (cleared when
    /// the kernel refuses one).
    more_sockets: bool,
    tx_bufs: Vec<Box<[u8]>>,
    tx_meta: Vec<Transmit>,
    /// The regions a round's packets send their payloads from, and where
    /// their bytes are while locked (kept to avoid an allocation per round).
    tx_regions: Vec<RegionMemory>,
    tx_spans: Vec<(usize, usize)>,
    /// Destination addresses of a send (kept to avoid an allocation per send).
    tx_addrs: Vec<SockAddr>,
    shifts: send::ShiftCache,
    /// The messages of a round of sending (see `send::Batch`).
    batch: Option<Box<send::Batch>>,
    /// The fault injector (rdma-link's, the frame links' dice), when one is configured.
    faults: Option<DatagramFaults<(IpAddr, IpMarks)>>,
    /// `DeviceConfig::pcap`: every packet sent and received, recorded.
    capture: Option<crate::capture::IpTap>,
    offloads: Offloads,
    /// Whether send sockets connect to their first peer (see [`connected`]).
    connect: bool,
    /// Where IPv4 probes go (see `connected::probe`).
    sink: Option<(Socket, SockAddr)>,
    /// The last `transmit` stopped on its budget with packets left.
    tx_left: bool,
    /// The IP multicast groups joined, and their sockets ([`multicast`]).
    mcast: multicast::Groups,
    pub stats: IoStats,
}

fn driver_kind(d: &Driver) -> IoDriver {
    match d {
        Driver::Sockets(_) => IoDriver::Sockets,
        Driver::Uring(_) => IoDriver::IoUring,
    }
}

/// Sets up the driver `want` asks for (or `SOFTROCE_IO_DRIVER` names):
/// io_uring falls back to sockets, with the reason traced.
fn open_driver(want: IoDriver, rx: &Socket, capacity: usize) -> io::Result<Driver> {
    let want = match std::env::var("SOFTROCE_IO_DRIVER") {
        Ok(v) if !v.is_empty() => v
            .parse()
            .map_err(|e: String| io::Error::new(io::ErrorKind::InvalidInput, format!("SOFTROCE_IO_DRIVER: {e}")))?,
        _ => want,
    };
    if want == IoDriver::IoUring {
        match uring::Uring::new(rx.as_raw_fd(), capacity) {
            Ok(u) => return Ok(Driver::Uring(Box::new(u))),
            Err(e) => tracing::warn!(error = %e, "io_uring is unavailable: using the socket driver"),
        }
    }
    Ok(Driver::Sockets(recv::RxRing::new(capacity)))
}

fn ip_header_len(local: IpAddr) -> usize {
    if local.is_ipv4() {
        20
    } else {
        40
    }
}

fn domain(local: IpAddr) -> Domain {
    if local.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    }
}

fn sock_addr(ip: IpAddr, port: u16, scope_id: u32) -> SockAddr {
    match ip {
        IpAddr::V4(v4) => SocketAddr::new(v4.into(), port).into(),
        IpAddr::V6(v6) => SocketAddrV6::new(v6, port, 0, scope_id).into(),
    }
}

/// Room for three small control messages (CMSG_SPACE of up to 8 bytes
/// each, 24 bytes), aligned: a UDP_SEGMENT size, a TOS and a TTL.
type Control = [u64; 9];

/// Room one control message of up to 8 bytes takes (CMSG_SPACE(8)).
const CMSG_SPACE_8: usize = 24;
const _: () = assert!(std::mem::size_of::<Control>() >= 3 * CMSG_SPACE_8);

/// Appends `value` as a control message of `h` (level, type) in `room`,
/// after the `h.msg_controllen` bytes already there (0 for the first:
/// callers start from a zeroed header). At most three per header.
fn set_control_message<T: Copy>(h: &mut libc::msghdr, room: &mut Control, level: i32, kind: i32, value: T) {
    const { assert!(std::mem::size_of::<T>() <= 8) };
    let len = std::mem::size_of::<T>() as u32;
    let at = h.msg_controllen;
    // SAFETY: CMSG_SPACE(len) <= CMSG_SPACE_8, checked against `at` below,
    // so the header and its data lie inside `room`; `at` is a multiple of
    // the cmsghdr alignment (a sum of CMSG_SPACEs), and `room` is aligned.
    unsafe {
        let space = libc::CMSG_SPACE(len) as usize;
        assert!(at + space <= std::mem::size_of::<Control>(), "more control messages than room");
        h.msg_control = room.as_mut_ptr().cast();
        h.msg_controllen = at + space;
        let c = room.as_mut_ptr().cast::<u8>().add(at).cast::<libc::cmsghdr>();
        (*c).cmsg_level = level;
        (*c).cmsg_type = kind;
        (*c).cmsg_len = libc::CMSG_LEN(len) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<T>(), value);
    }
}

/// The TTL / hop limit every send socket is set to ([`UdpIo::open_tx`]),
/// so that packets with this one, the engine's default, need no control
/// message, whatever the system's default (`net.ipv4.ip_default_ttl`).
const DEFAULT_HOP_LIMIT: u8 = 64;

/// The fields of the IP header the engine wrote that the kernel must
/// write too, from control messages: the send socket's own header has
/// neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IpMarks {
    /// IPv4 TOS / IPv6 traffic class: DSCP and ECN.
    pub tos: u8,
    /// IPv4 TTL / IPv6 hop limit.
    pub hop_limit: u8,
}

impl IpMarks {
    /// The marks in the IP header at the start of `packet`.
    fn of(packet: &[u8]) -> IpMarks {
        match packet {
            [v, tos, _, _, _, _, _, _, ttl, ..] if v >> 4 == 4 => IpMarks { tos: *tos, hop_limit: *ttl },
            [a, b, _, _, _, _, _, hop_limit, ..] => IpMarks { tos: (a << 4) | (b >> 4), hop_limit: *hop_limit },
            _ => IpMarks { tos: 0, hop_limit: DEFAULT_HOP_LIMIT },
        }
    }
}

/// Attaches the IPv4 TOS or IPv6 traffic class and the TTL / hop limit of
/// `marks` as control messages of `h` (the family of the sending socket is
/// the destination's: sockets are IPv6-only). Values equal to the send
/// socket's own (`sock_tos`, TTL [`DEFAULT_HOP_LIMIT`]) need none: the
/// common case costs nothing in the kernel.
fn set_ip_marks(h: &mut libc::msghdr, room: &mut Control, dest: IpAddr, marks: IpMarks, sock_tos: u8) {
    let (tos, hop_limit) = (marks.tos, marks.hop_limit);
    // All take an int; Linux accepts IP_TOS on sendmsg for UDP and keeps
    // its ECN bits (only TCP sockets mask them).
    match dest {
        IpAddr::V4(_) => {
            if tos != sock_tos {
                set_control_message(h, room, libc::IPPROTO_IP, libc::IP_TOS, i32::from(tos));
            }
            // Linux refuses IP_TTL 0 (EINVAL); TTL 1 is what a TTL of 0
            // would do anyway: the next hop takes it, no router passes it.
            if hop_limit != DEFAULT_HOP_LIMIT {
                set_control_message(h, room, libc::IPPROTO_IP, libc::IP_TTL, i32::from(hop_limit.max(1)));
            }
        }
        IpAddr::V6(_) => {
            if tos != sock_tos {
                set_control_message(h, room, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, i32::from(tos));
            }
            if hop_limit != DEFAULT_HOP_LIMIT {
                set_control_message(h, room, libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT, i32::from(hop_limit));
            }
        }
    }
}

fn setsockopt_int(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: a plain int option on a socket we own.
    let r = unsafe {
        libc::setsockopt(fd, level, name, (&value as *const i32).cast(), std::mem::size_of::<i32>() as libc::socklen_t)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Linux's `UDP_NO_CHECK6_RX`: accept IPv6 UDP datagrams with checksum 0,
/// which RoCE v2 senders (rxe, ConnectX) send.
const UDP_NO_CHECK6_RX: i32 = 102;

fn common_options(socket: &Socket, local: IpAddr) -> io::Result<()> {
    let fd = socket.as_raw_fd();
    if local.is_ipv4() {
        // DF set: what RoCE v2 peers send, and what makes Linux write
        // Identification 0 for an unconnected socket.
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)?;
    } else {
        socket.set_only_v6(true)?;
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IP_PMTUDISC_DO)?;
    }
    Ok(())
}

fn grow_buffers(socket: &Socket) {
    grow_recv_buffer(socket);
    grow_send_buffer(socket);
}

fn grow_recv_buffer(socket: &Socket) {
    // Best effort: as root the FORCE variants pass net.core.*mem_max.
    if setsockopt_int(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, SOCKET_BUFFER as i32).is_err() {
        let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    }
}

fn grow_send_buffer(socket: &Socket) {
    if setsockopt_int(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, SOCKET_BUFFER as i32).is_err() {
        let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    }
}

/// Makes a send socket refuse every datagram sent to it: anyone can send
/// to its port, and nothing reads it. A classic BPF program of one
/// instruction, `ret #0` (accept 0 bytes), drops each one before it is
/// queued (counted in the socket's drops). The error queue, which the
/// connected-send probe reads, does not pass the filter.
fn refuse_datagrams(socket: &Socket) -> io::Result<()> {
    const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
    socket.attach_filter(&[libc::sock_filter { code: BPF_RET_K, jt: 0, jf: 0, k: 0 }])?;
    socket.set_recv_buffer_size(TX_SOCKET_RCVBUF)
}

/// What the UDP backend is told when it binds: the part of a device's
/// configuration (`rdma_core_rs::DeviceConfig`, which says what each field
/// means for a device) that concerns its sockets.
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// The scope of an IPv6 link-local address (an interface index).
    pub scope_id: u32,
    /// One datagram per packet: no UDP GSO on send, no GRO on receive.
    pub plain_datagrams: bool,
    /// Share port 4791 of the address with the other processes of the
    /// host that open the same device ([`crate::share`]).
    pub shared: bool,
    /// Faults injected on every packet sent.
    pub faults: FaultConfig,
    /// The system calls that move packets.
    pub io_driver: IoDriver,
    /// Records every packet sent and received (pcap).
    pub pcap: Option<std::path::PathBuf>,
    /// Every packet with `sendto` from unconnected sockets.
    pub unconnected_sends: bool,
    /// Data packets leave ECT(0) where their traffic class leaves the ECN
    /// bits at 00 (the send sockets' TOS).
    pub ecn_capable: bool,
}

impl Default for UdpConfig {
    /// A device's defaults: ECN-capable data packets, the rest off.
    fn default() -> UdpConfig {
        UdpConfig {
            scope_id: 0,
            plain_datagrams: false,
            shared: false,
            faults: FaultConfig::default(),
            io_driver: IoDriver::Sockets,
            pcap: None,
            unconnected_sends: false,
            ecn_capable: true,
        }
    }
}

impl UdpIo {
    /// Binds `local`:4791 with the options of `cfg`: its `scope_id` (an
    /// IPv6 link-local address), faults, offloads (UDP GSO and GRO, each
    /// used only where the kernel takes it), connected sends and driver.
    pub fn bind(local: IpAddr, cfg: &UdpConfig) -> io::Result<UdpIo> {
        let (scope_id, offload) = (cfg.scope_id, !cfg.plain_datagrams);
        let rx = Socket::new(domain(local), Type::DGRAM, Some(Protocol::UDP))?;
        common_options(&rx, local)?;
        if local.is_ipv6() {
            setsockopt_int(rx.as_raw_fd(), libc::IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)?;
        }
        grow_buffers(&rx);
        rx.set_nonblocking(true)?;
        let member = shared_port::bind_rx(&rx, local, scope_id, cfg.shared, offload)?;
        // A shared port's member takes GRO only while alone (it sets it).
        let gro =
            offload && (member.is_some() || setsockopt_int(rx.as_raw_fd(), libc::SOL_UDP, libc::UDP_GRO, 1).is_ok());
        // Every datagram's TOS comes up as a control message: its ECN bits
        // reach the engine in the datagram's headers.
        let (level, name) = if local.is_ipv4() {
            (libc::IPPROTO_IP, libc::IP_RECVTOS)
        } else {
            (libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS)
        };
        if let Err(e) = setsockopt_int(rx.as_raw_fd(), level, name, 1) {
            tracing::warn!(error = %e, "cannot receive the TOS of datagrams: ECN marks will not be seen");
        }
        let faults = Some(cfg.faults).filter(|f| f.is_active()).map(DatagramFaults::new);
        // Injected faults act on single packets, so they send one by one.
        let offloads = Offloads { gso: offload && faults.is_none(), gro };
        let capacity = if gro { GRO_MAX } else { MAX_PACKET };
        // A shared socket must close when its member leaves (io_uring's
        // armed receive holds it open until the ring's teardown ends).
        let driver = if member.is_some() {
            shared_port::note_socket_driver(cfg.io_driver);
            Driver::Sockets(recv::RxRing::new(capacity))
        } else {
            open_driver(cfg.io_driver, &rx, capacity)?
        };
        let capture = cfg.pcap.as_deref().map(crate::capture::IpTap::create).transpose()?;
        let mcast = multicast::Groups::new(match &driver {
            Driver::Uring(u) => u.fd(),
            Driver::Sockets(_) => -1,
        })?;
        // A capture needs the IPv4 Identification the engine wrote (0): unconnected sends.
        let mut connect =
            !cfg.unconnected_sends && faults.is_none() && capture.is_none() && matches!(driver, Driver::Sockets(_));
        // IPv4 probes go to a sink of the device's own (made here, in the
        // caller's network namespace, like every other socket of the device).
        let mut sink = None;
        if connect && local.is_ipv4() {
            match send::open_sink(local) {
                Ok(s) => sink = Some(s),
                Err(e) => {
                    tracing::info!(error = %e, "cannot open the probe sink: sending from unconnected sockets");
                    connect = false;
                }
            }
        }
        tracing::debug!(%local, gso = offloads.gso, gro = offloads.gro, connect, driver = driver_kind(&driver).name(), "UDP backend bound");
        let mut io = UdpIo {
            local,
            scope_id,
            // Data packets of a QP with traffic class 0, the common case.
            sock_tos: if cfg.ecn_capable { rdma_transport::qp::ECN_ECT0 } else { 0 },
            driver,
            batch: Some(Box::new(send::Batch::new())),
            rx,
            member,
            hop_limits: false,
            tx: HashMap::new(),
            more_sockets: true,
            tx_bufs: (0..TX_BATCH).map(|_| vec![0u8; MAX_PACKET].into_boxed_slice()).collect(),
            tx_meta: Vec::with_capacity(TX_BATCH),
            tx_regions: Vec::new(),
            tx_spans: Vec::new(),
            tx_addrs: Vec::with_capacity(TX_BATCH),
            shifts: send::ShiftCache::default(),
            faults,
            capture,
            offloads,
            connect,
            sink,
            tx_left: false,
            mcast,
            stats: IoStats::default(),
        };
        if io.capture.is_some() {
            // A capture shows received packets as they came.
            io.want_hop_limits();
        }
        Ok(io)
    }

    /// The receive socket: readable when a datagram arrives (with either
    /// driver), for readiness notification.
    pub fn rx_fd(&self) -> RawFd {
        self.rx.as_raw_fd()
    }

    /// What a blocking wait sleeps on in `poll(2)`: the receive socket and
    /// an epoll set of the multicast group sockets and, with io_uring, the
    /// ring (readable when completions wait).
    pub fn wait_fds(&self) -> [RawFd; 2] {
        [self.rx.as_raw_fd(), self.mcast.fd()]
    }

    /// Whether this device sends payloads straight from their memory
    /// regions ([`rdma_transport::Endpoint::set_payload_by_reference`]).
    /// Both drivers do, holding the regions locked until the kernel has
    /// read them: the socket driver across its `sendmmsg`, io_uring until
    /// every send of the round has completed. Fault injection does not (it
    /// works on whole packets). On io_uring, payloads in the caller's own
    /// memory (`reg_mr_raw`) are copied all the same: see
    /// [`UdpIo::payload_by_reference`].
    pub fn sends_by_reference(&self) -> bool {
        // A capture records whole packets.
        self.faults.is_none() && self.capture.is_none()
    }

    /// Whether this payload leaves by reference. io_uring copies the
    /// caller's own memory: if its ring broke with sends still queued, the
    /// driver keeps the regions those sends read alive for as long as the
    /// kernel may read them (see `Uring::send`), which it can do for memory
    /// it owns but not for the caller's.
    pub(super) fn payload_by_reference(&self, memory: &RegionMemory) -> bool {
        self.sends_by_reference() && !(matches!(self.driver, Driver::Uring(_)) && memory.is_callers())
    }

    /// The driver in use ([`IoDriver::IoUring`] or [`IoDriver::Sockets`]).
    pub fn driver(&self) -> IoDriver {
        driver_kind(&self.driver)
    }

    /// Whether received packets may wait for [`UdpIo::receive`] without a
    /// new readiness event (io_uring: completions taken while sending, or
    /// the kernel's deferred receive work).
    pub fn receives_pending(&mut self) -> bool {
        match &mut self.driver {
            Driver::Sockets(_) => false,
            Driver::Uring(u) => u.has_work(),
        }
    }

    /// Whether the last [`UdpIo::transmit`] stopped on its budget
    /// ([`TX_BATCHES_PER_CALL`]) with packets left to send.
    pub fn sends_left(&self) -> bool {
        self.tx_left
    }

    /// Whether work waits that no readiness event announces: received
    /// packets ([`UdpIo::receives_pending`]) or sends left by the transmit
    /// budget ([`UdpIo::sends_left`]). The caller must not sleep first.
    pub fn has_pending(&mut self) -> bool {
        self.tx_left || self.receives_pending()
    }

    /// The offloads in use (GSO turns itself off if the kernel refuses it).
    pub fn offloads(&self) -> Offloads {
        self.offloads
    }

    /// Makes sure a socket sends from UDP port `want` (or the next free
    /// port of 0xC000..0xFFFF) and returns the port it got. Past
    /// [`MAX_TX_SOCKETS`] QPs share the least used socket: the source port
    /// is flow entropy for ECMP, not an identity (peers demultiplex by
    /// QPN), and shared sockets let one `sendmmsg` carry many QPs.
    pub fn reserve_port(&mut self, want: u16) -> io::Result<u16> {
        if let Some(t) = self.tx.get_mut(&want) {
            t.users += 1;
            return Ok(want);
        }
        if self.tx.len() >= MAX_TX_SOCKETS {
            if let Some((&port, t)) = self.tx.iter_mut().min_by_key(|(&p, t)| (t.users, p)) {
                t.users += 1;
                return Ok(port);
            }
        }
        let mut port = want;
        let mut last_err = None;
        for _ in 0..0x4000 {
            if let Some(t) = self.tx.get_mut(&port) {
                t.users += 1;
                return Ok(port);
            }
            match self.open_tx(port, self.sock_tos) {
                Ok(socket) => {
                    let first = TxSocket { socket, tos: self.sock_tos, conn: connected::Connection::default() };
                    self.tx.insert(port, TxPort { users: 1, sockets: vec![first] });
                    return Ok(port);
                }
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => last_err = Some(e),
                Err(e) => return Err(e),
            }
            port = 0xc000 | (port.wrapping_add(1) & 0x3fff);
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("no free UDP source port in 0xC000..0xFFFF")))
    }

    /// Gives back a port taken with [`UdpIo::reserve_port`].
    pub fn release_port(&mut self, port: u16) {
        if let Some(t) = self.tx.get_mut(&port) {
            t.users -= 1;
            if t.users == 0 {
                self.tx.remove(&port);
            }
        }
    }

    /// From now on, received datagrams bring their TTL / hop limit. Only
    /// a UD receive shows it (in its GRH
    /// area), so the device asks for it when its first UD QP is created:
    /// the control message costs every received datagram about 0.1 us
    /// of a busy round trip. Until then it is taken as 64.
    pub fn want_hop_limits(&mut self) {
        if self.hop_limits {
            return;
        }
        self.hop_limits = true;
        let (level, name) = if self.local.is_ipv4() {
            (libc::IPPROTO_IP, libc::IP_RECVTTL)
        } else {
            (libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT)
        };
        if let Err(e) = setsockopt_int(self.rx.as_raw_fd(), level, name, 1) {
            tracing::warn!(error = %e, "cannot receive the TTL of datagrams: received headers will say 64");
        }
    }

    /// The send socket of `port` for packets with `tos`: the one set to
    /// it, opened now if the port has room for another, else the first
    /// (the packet then carries its TOS in a control message). `None` for
    /// a port not reserved.
    pub(super) fn socket_for(&mut self, port: u16, tos: u8) -> Option<SocketId> {
        let p = self.tx.get(&port)?;
        if let Some(lane) = p.sockets.iter().position(|t| t.tos == tos) {
            return Some(SocketId { port, lane });
        }
        if p.sockets.len() >= TOS_PER_PORT || !self.more_sockets {
            return Some(SocketId { port, lane: 0 });
        }
        match self.open_tx(port, tos) {
            Ok(socket) => {
                let p = self.tx.get_mut(&port)?;
                p.sockets.push(TxSocket { socket, tos, conn: connected::Connection::default() });
                tracing::debug!(port, tos, "send socket opened for a TOS of its own");
                Some(SocketId { port, lane: p.sockets.len() - 1 })
            }
            Err(e) => {
                // Correct all the same, with a control message per packet.
                tracing::info!(port, tos, error = %e, "cannot open a send socket per TOS: other TOS values take a control message");
                self.more_sockets = false;
                Some(SocketId { port, lane: 0 })
            }
        }
    }

    fn tx_socket_mut(&mut self, id: SocketId) -> Option<&mut TxSocket> {
        self.tx.get_mut(&id.port)?.sockets.get_mut(id.lane)
    }

    /// A send socket bound to `port`, set to `tos`.
    fn open_tx(&self, port: u16, tos: u8) -> io::Result<Socket> {
        let s = Socket::new(domain(self.local), Type::DGRAM, Some(Protocol::UDP))?;
        common_options(&s, self.local)?;
        // A TTL of our own, not the system's: packets with it need no
        // control message (`set_ip_marks`).
        let (level, name) = if self.local.is_ipv4() {
            (libc::IPPROTO_IP, libc::IP_TTL)
        } else {
            (libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS)
        };
        setsockopt_int(s.as_raw_fd(), level, name, i32::from(DEFAULT_HOP_LIMIT))?;
        // And a TOS of our own: that of data packets, by default.
        let (level, name) = if self.local.is_ipv4() {
            (libc::IPPROTO_IP, libc::IP_TOS)
        } else {
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
        };
        setsockopt_int(s.as_raw_fd(), level, name, i32::from(tos))?;
        multicast::send_options(&s, self.local, self.scope_id)?;
        // A port's sockets share it (each before its bind); a port another
        // user or program holds without the option stays refused.
        s.set_reuse_port(true)?;
        grow_send_buffer(&s);
        refuse_datagrams(&s)?;
        s.bind(&sock_addr(self.local, port, self.scope_id))?;
        Ok(s)
    }
}
