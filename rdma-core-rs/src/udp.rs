//! The RoCE v2 backend over UDP sockets.
//!
//! The engine builds whole IP packets because the ICRC covers the IP and
//! UDP headers; through a UDP socket the kernel writes those headers
//! itself, so this backend sends only the part after the UDP header and
//! makes the kernel write what the engine assumed:
//!
//! - IPv4 with DF (`IP_PMTUDISC_DO`) and Identification 0, which Linux
//!   writes for an unconnected socket with DF set (checked on captured
//!   packets by the `wire_capture` test), no IP options;
//! - the QP's UDP source port (rxe's 0xC000..0xFFFF hash of the QPN): one
//!   send socket per source port, bound to the device address;
//! - destination port 4791.
//!
//! Receiving, one socket bound to the device address and port 4791 takes
//! every packet; the IP and UDP headers are rebuilt in front of the
//! datagram from what the socket reports (addresses, ports, length). The
//! one covered field the socket hides, the sender's IPv4 Identification,
//! is recovered from the ICRC (`rdma_wire::ident`); the engine is told so
//! with `Endpoint::set_ipv4_ident_unknown`.
//!
//! System calls are batched: `recvmmsg` and `sendmmsg` of up to [`BATCH`]
//! datagrams.

use crate::faults::{FaultConfig, Faults};
use rdma_transport::{Endpoint, Instant, Transmit, MAX_PACKET};
use rdma_wire::ROCE_V2_PORT;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};

/// Datagrams per system call.
pub const BATCH: usize = 32;

/// Room in front of a received datagram for the rebuilt IP and UDP headers.
const HEADROOM: usize = 48;

const SOCKET_BUFFER: usize = 8 << 20;

/// Counters of the socket layer (the engine counts the rest).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoStats {
    pub datagrams_received: u64,
    pub datagrams_sent: u64,
    pub recv_syscalls: u64,
    pub send_syscalls: u64,
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
    rx_bufs: Vec<Box<[u8]>>,
    tx_bufs: Vec<Box<[u8]>>,
    tx_meta: Vec<Transmit>,
    /// Destination addresses of a send batch (kept to avoid an allocation per batch).
    tx_addrs: Vec<SockAddr>,
    faults: Option<Faults>,
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
    pub fn bind(local: IpAddr, scope_id: u32, faults: Option<FaultConfig>) -> io::Result<UdpIo> {
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
        let buf = || vec![0u8; HEADROOM + MAX_PACKET].into_boxed_slice();
        Ok(UdpIo {
            local,
            scope_id,
            rx,
            tx: HashMap::new(),
            rx_bufs: (0..BATCH).map(|_| buf()).collect(),
            tx_bufs: (0..BATCH).map(|_| buf()).collect(),
            tx_meta: Vec::with_capacity(BATCH),
            tx_addrs: Vec::with_capacity(BATCH),
            faults: faults.filter(|f| f.is_active()).map(Faults::new),
            stats: IoStats::default(),
        })
    }

    /// The receive socket, for `poll(2)` and readiness notification.
    pub fn rx_fd(&self) -> RawFd {
        self.rx.as_raw_fd()
    }

    /// Makes sure a socket sends from UDP port `want` (or the next free
    /// port of 0xC000..0xFFFF) and returns the port it got.
    pub fn reserve_port(&mut self, want: u16) -> io::Result<u16> {
        if let Some(t) = self.tx.get_mut(&want) {
            t.users += 1;
            return Ok(want);
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

    /// Receives what is waiting (one `recvmmsg`) and hands each packet,
    /// headers rebuilt, to the engine. Returns the number of datagrams.
    pub fn receive(&mut self, ep: &mut Endpoint, now: Instant) -> io::Result<usize> {
        let mut names: [MaybeUninit<libc::sockaddr_storage>; BATCH] = [MaybeUninit::uninit(); BATCH];
        let mut iovs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..BATCH {
            let b = &mut self.rx_bufs[i][HEADROOM..];
            iovs[i] = libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() };
            msgs[i].msg_hdr.msg_name = names[i].as_mut_ptr().cast();
            msgs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            msgs[i].msg_hdr.msg_iov = &mut iovs[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: every pointer refers to live buffers of the stated sizes.
        let n = unsafe {
            libc::recvmmsg(
                self.rx.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        self.stats.recv_syscalls += 1;
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let n = n as usize;
        let hl = ip_header_len(self.local);
        for i in 0..n {
            self.stats.datagrams_received += 1;
            let len = msgs[i].msg_len as usize;
            if msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.stats.truncated += 1;
                tracing::debug!(len, "oversized datagram dropped");
                continue;
            }
            // SAFETY: the kernel wrote msg_namelen bytes of a socket address.
            let src = unsafe { SockAddr::new(*names[i].as_ptr(), msgs[i].msg_hdr.msg_namelen).as_socket() };
            let Some(src) = src else { continue };
            let start = HEADROOM - hl - 8;
            let buf = &mut self.rx_bufs[i];
            rebuild_headers(&mut buf[start..HEADROOM], src, self.local, len);
            ep.handle_packet(now, &buf[start..HEADROOM + len]);
        }
        Ok(n)
    }

    /// Sends everything the engine has to send, in `sendmmsg` batches.
    /// Returns the number of packets.
    pub fn transmit(&mut self, ep: &mut Endpoint, now: Instant) -> io::Result<usize> {
        let mut total = 0;
        loop {
            self.tx_meta.clear();
            while self.tx_meta.len() < BATCH {
                let i = self.tx_meta.len();
                match ep.poll_transmit(now, &mut self.tx_bufs[i][..MAX_PACKET]) {
                    Some(t) => self.tx_meta.push(t),
                    None => break,
                }
            }
            let k = self.tx_meta.len();
            if k == 0 {
                break;
            }
            total += k;
            self.send_built(k);
            if k < BATCH {
                break;
            }
        }
        if let Some(f) = &mut self.faults {
            if let Some((bytes, dest, port)) = f.take_held() {
                if let Some(t) = self.tx.get(&port) {
                    send_one(&t.socket, &bytes, dest, self.scope_id, &mut self.stats);
                }
            }
        }
        Ok(total)
    }

    /// Sends `tx_bufs[..k]` as described by `tx_meta`, grouping runs that
    /// leave from the same source port into one `sendmmsg`.
    fn send_built(&mut self, k: usize) {
        let hl = ip_header_len(self.local);
        if let Some(f) = &mut self.faults {
            for i in 0..k {
                let t = self.tx_meta[i];
                let body = &mut self.tx_bufs[i][hl + 8..t.len];
                for (bytes, dest) in f.apply(body, t.dest, t.src_port, &mut self.stats) {
                    if let Some(s) = self.tx.get(&t.src_port) {
                        send_one(&s.socket, &bytes, dest, self.scope_id, &mut self.stats);
                    }
                }
            }
            return;
        }
        let mut i = 0;
        while i < k {
            let port = self.tx_meta[i].src_port;
            let mut j = i + 1;
            while j < k && self.tx_meta[j].src_port == port {
                j += 1;
            }
            match self.tx.get(&port) {
                Some(s) => send_many(
                    &s.socket,
                    &self.tx_bufs[i..j],
                    &self.tx_meta[i..j],
                    (hl, self.scope_id),
                    &mut self.tx_addrs,
                    &mut self.stats,
                ),
                None => {
                    self.stats.send_errors += (j - i) as u64;
                    tracing::warn!(port, "no socket for UDP source port: packets not sent");
                }
            }
            i = j;
        }
    }
}

/// Writes the IPv4 (DF, Identification 0, TTL 64) or IPv6 header and the
/// UDP header (checksum 0) of a received datagram of `len` bytes.
fn rebuild_headers(h: &mut [u8], src: SocketAddr, local: IpAddr, len: usize) {
    let udp_len = (8 + len) as u16;
    let (ip, udp) = h.split_at_mut(h.len() - 8);
    match (src.ip(), local) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            ip[0] = 0x45;
            ip[1] = 0;
            ip[2..4].copy_from_slice(&(udp_len + 20).to_be_bytes());
            ip[4..6].copy_from_slice(&[0, 0]);
            ip[6..8].copy_from_slice(&[0x40, 0]);
            ip[8] = 64;
            ip[9] = 17;
            ip[10..12].copy_from_slice(&[0, 0]);
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            // The kernel checked the real one; the parser checks this one.
            let sum = rdma_wire::ipv4::checksum(&ip[..20]);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            ip[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
            ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
            ip[6] = 17;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&v6(s).octets());
            ip[24..40].copy_from_slice(&v6(d).octets());
        }
    }
    udp[0..2].copy_from_slice(&src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&ROCE_V2_PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[6..8].copy_from_slice(&[0, 0]);
}

fn send_one(socket: &Socket, bytes: &[u8], dest: IpAddr, scope_id: u32, stats: &mut IoStats) {
    stats.send_syscalls += 1;
    match socket.send_to(bytes, &sock_addr(dest, ROCE_V2_PORT, scope_id)) {
        Ok(_) => stats.datagrams_sent += 1,
        Err(e) => {
            stats.send_errors += 1;
            tracing::warn!(error = %e, %dest, "send failed");
        }
    }
}

fn send_many(
    socket: &Socket,
    bufs: &[Box<[u8]>],
    meta: &[Transmit],
    (hl, scope_id): (usize, u32),
    addrs: &mut Vec<SockAddr>,
    stats: &mut IoStats,
) {
    let n = meta.len();
    addrs.clear();
    let mut iovs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
    let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    // One address for a run to one destination (the common case), else one each.
    let same_dest = meta.iter().all(|t| t.dest == meta[0].dest);
    if same_dest {
        addrs.push(sock_addr(meta[0].dest, ROCE_V2_PORT, scope_id));
    } else {
        addrs.extend(meta.iter().map(|t| sock_addr(t.dest, ROCE_V2_PORT, scope_id)));
    }
    for i in 0..n {
        let body = &bufs[i][hl + 8..meta[i].len];
        iovs[i] = libc::iovec { iov_base: body.as_ptr() as *mut _, iov_len: body.len() };
        let a = &addrs[if same_dest { 0 } else { i }];
        msgs[i].msg_hdr.msg_name = a.as_ptr() as *mut _;
        msgs[i].msg_hdr.msg_namelen = a.len();
        msgs[i].msg_hdr.msg_iov = &mut iovs[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    let mut sent = 0;
    while sent < n {
        stats.send_syscalls += 1;
        // SAFETY: the headers point at live buffers and addresses.
        let r = unsafe { libc::sendmmsg(socket.as_raw_fd(), msgs[sent..].as_mut_ptr(), (n - sent) as u32, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // This one packet failed (for example EMSGSIZE): count it and go on.
            stats.send_errors += 1;
            tracing::warn!(error = %e, "send failed");
            sent += 1;
            continue;
        }
        stats.datagrams_sent += r as u64;
        sent += r as usize;
    }
}
