//! The RoCE v2 backend over UDP sockets.
//!
//! The engine builds whole IP packets because the ICRC covers the IP and
//! UDP headers; through a UDP socket the kernel writes those headers
//! itself, so this backend sends only the part after the UDP header and
//! makes the kernel write what the engine assumed:
//!
//! - IPv4 with DF (`IP_PMTUDISC_DO`) and Identification 0, which Linux
//!   writes for an unconnected socket with DF set, no IP options (checked
//!   on captured packets by the `wire_capture` test);
//! - the QP's UDP source port (rxe's 0xC000..0xFFFF hash of the QPN): one
//!   send socket per source port, bound to the device address;
//! - destination port 4791.
//!
//! Receiving, one socket bound to the device address and port 4791 takes
//! every packet; the IP and UDP headers are rebuilt in front of each packet
//! from what the socket reports (addresses, ports, length). The one covered
//! field the socket hides, the sender's IPv4 Identification, is recovered
//! from the ICRC (`rdma_wire::ident`); the engine is told so with
//! `Endpoint::set_ipv4_ident_unknown`.
//!
//! System calls are batched and offloaded ([`send`], [`recv`]): runs of
//! equal-sized packets leave as one UDP_SEGMENT (GSO) send each, several
//! per `sendmmsg`; the receive socket takes UDP_GRO super-datagrams and
//! plain datagrams alike, [`BATCH`] per `recvmmsg`.

mod recv;
mod send;

use crate::faults::{FaultConfig, Faults};
use rdma_transport::{Transmit, MAX_PACKET};
use rdma_wire::ROCE_V2_PORT;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};

/// Datagrams per `recvmmsg`.
pub const BATCH: usize = 32;

/// Packets built per round of sending: four GSO runs of 4 KiB packets.
pub const TX_BATCH: usize = 64;

/// Send sockets (UDP source ports) per device; more QPs share them.
pub const MAX_TX_SOCKETS: usize = 16;

/// Room in front of a received datagram for the rebuilt IP and UDP headers.
const HEADROOM: usize = 48;

/// The largest datagram UDP_GRO hands up.
const GRO_MAX: usize = 65536;

const SOCKET_BUFFER: usize = 8 << 20;

/// Counters of the socket layer (the engine counts the rest).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Packets received (a GRO datagram counts each packet in it).
    pub datagrams_received: u64,
    /// Packets sent (a GSO send counts each segment).
    pub datagrams_sent: u64,
    pub recv_syscalls: u64,
    pub send_syscalls: u64,
    /// Sends of more than one segment (UDP_SEGMENT).
    pub gso_sends: u64,
    /// Received datagrams that held more than one packet (UDP_GRO).
    pub gro_receives: u64,
    /// Datagrams longer than any RoCE packet, dropped.
    pub truncated: u64,
    /// Packets the kernel refused to send (counted and traced; the
    /// transport retransmits).
    pub send_errors: u64,
    /// Packets the fault injector dropped, duplicated, reordered, corrupted.
    pub injected_losses: u64,
    pub injected_duplicates: u64,
    pub injected_reorders: u64,
    pub injected_corruptions: u64,
}

/// What the kernel offloads for this backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offloads {
    /// Runs of equal-sized packets leave as one UDP_SEGMENT send.
    pub gso: bool,
    /// The receive socket takes UDP_GRO super-datagrams.
    pub gro: bool,
}

/// A send socket and how many QPs use it.
struct TxSocket {
    socket: Socket,
    users: usize,
}

/// The sockets and buffers of one device.
pub struct UdpIo {
    local: IpAddr,
    scope_id: u32,
    rx: Socket,
    tx: HashMap<u16, TxSocket>,
    rx_ring: recv::RxRing,
    tx_bufs: Vec<Box<[u8]>>,
    tx_meta: Vec<Transmit>,
    /// Destination addresses of a send (kept to avoid an allocation per send).
    tx_addrs: Vec<SockAddr>,
    shifts: send::ShiftCache,
    faults: Option<Faults>,
    offloads: Offloads,
    pub stats: IoStats,
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
    // Best effort: as root the FORCE variants pass net.core.*mem_max.
    let fd = socket.as_raw_fd();
    let size = SOCKET_BUFFER as i32;
    if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, size).is_err() {
        let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    }
    if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, size).is_err() {
        let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    }
}

impl UdpIo {
    /// Binds `local`:4791 (`scope_id` for an IPv6 link-local address).
    /// `offload` asks for UDP GSO and GRO; each is used only where the
    /// kernel takes it.
    pub fn bind(local: IpAddr, scope_id: u32, faults: Option<FaultConfig>, offload: bool) -> io::Result<UdpIo> {
        let rx = Socket::new(domain(local), Type::DGRAM, Some(Protocol::UDP))?;
        common_options(&rx, local)?;
        if local.is_ipv6() {
            setsockopt_int(rx.as_raw_fd(), libc::IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)?;
        }
        grow_buffers(&rx);
        rx.set_nonblocking(true)?;
        rx.bind(&sock_addr(local, ROCE_V2_PORT, scope_id)).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot bind UDP {local} port {ROCE_V2_PORT} for RoCE v2: {e}"))
        })?;
        let gro = offload && setsockopt_int(rx.as_raw_fd(), libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
        let faults = faults.filter(|f| f.is_active()).map(Faults::new);
        // Injected faults act on single packets, so they send one by one.
        let offloads = Offloads { gso: offload && faults.is_none(), gro };
        tracing::debug!(%local, gso = offloads.gso, gro = offloads.gro, "UDP backend bound");
        Ok(UdpIo {
            local,
            scope_id,
            rx_ring: recv::RxRing::new(if gro { GRO_MAX } else { MAX_PACKET }),
            rx,
            tx: HashMap::new(),
            tx_bufs: (0..TX_BATCH).map(|_| vec![0u8; MAX_PACKET].into_boxed_slice()).collect(),
            tx_meta: Vec::with_capacity(TX_BATCH),
            tx_addrs: Vec::with_capacity(TX_BATCH),
            shifts: send::ShiftCache::default(),
            faults,
            offloads,
            stats: IoStats::default(),
        })
    }

    /// The receive socket, for `poll(2)` and readiness notification.
    pub fn rx_fd(&self) -> RawFd {
        self.rx.as_raw_fd()
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
            match self.open_tx(port) {
                Ok(socket) => {
                    self.tx.insert(port, TxSocket { socket, users: 1 });
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

    fn open_tx(&self, port: u16) -> io::Result<Socket> {
        let s = Socket::new(domain(self.local), Type::DGRAM, Some(Protocol::UDP))?;
        common_options(&s, self.local)?;
        grow_buffers(&s);
        s.bind(&sock_addr(self.local, port, self.scope_id))?;
        Ok(s)
    }
}
