//! Receiving: one `recvmmsg` of up to [`BATCH`] datagrams, each either one
//! RoCE packet or, with UDP_GRO, a run of packets of one size from one
//! sender that the kernel coalesced (the segment size comes in a control
//! message). Every packet is handed to the engine in place: its IP and UDP
//! headers are rebuilt in the bytes just before it, which for the second
//! packet of a run on are the tail of the packet before, already handled.

use super::{ip_header_len, Driver, IoStats, UdpIo, BATCH, HEADROOM};
use rdma_transport::{Endpoint, Instant};
use rdma_wire::ROCE_V2_PORT;
use socket2::SockAddr;
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

/// Room for the UDP_GRO control message (an int), aligned for cmsghdr.
const CMSG_ROOM: usize = 64;

/// The receive buffers, allocated once.
pub(super) struct RxRing {
    bufs: Vec<Box<[u8]>>,
    control: Vec<[u64; CMSG_ROOM / 8]>,
}

impl RxRing {
    /// `capacity`: the longest datagram taken (longer ones are dropped as truncated).
    pub(super) fn new(capacity: usize) -> RxRing {
        RxRing {
            bufs: (0..BATCH).map(|_| vec![0u8; HEADROOM + capacity].into_boxed_slice()).collect(),
            control: vec![[0; CMSG_ROOM / 8]; BATCH],
        }
    }
}

/// The segment size of a UDP_GRO datagram, if the control message says one.
pub(super) fn gro_segment_size(hdr: &libc::msghdr) -> Option<usize> {
    // SAFETY: `hdr` is the header recvmmsg filled in; the CMSG macros stay
    // within msg_control / msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let size = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(size).ok().filter(|&s| s > 0);
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    None
}

impl UdpIo {
    /// Receives what is waiting (one `recvmmsg`) and hands each packet,
    /// headers rebuilt, to the engine. Returns the number of datagrams.
    pub fn receive(&mut self, ep: &mut Endpoint, now: Instant) -> io::Result<usize> {
        let rx_ring = match &mut self.driver {
            Driver::Sockets(ring) => ring,
            Driver::Uring(u) => return u.receive(ep, now, self.local, &mut self.stats),
        };
        let mut names: [MaybeUninit<libc::sockaddr_storage>; BATCH] = [MaybeUninit::uninit(); BATCH];
        // SAFETY: all-zero iovec and mmsghdr are valid (null pointers, zero lengths).
        let mut iovs: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        let RxRing { bufs, control } = rx_ring;
        for i in 0..BATCH {
            let b = &mut bufs[i][HEADROOM..];
            iovs[i] = libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() };
            let h = &mut msgs[i].msg_hdr;
            h.msg_name = names[i].as_mut_ptr().cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            if self.offloads.gro {
                h.msg_control = control[i].as_mut_ptr().cast();
                h.msg_controllen = CMSG_ROOM;
            }
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
        for (i, m) in msgs.iter().enumerate().take(n) {
            let len = m.msg_len as usize;
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.stats.datagrams_received += 1;
                self.stats.truncated += 1;
                tracing::debug!(len, "oversized datagram dropped");
                continue;
            }
            // SAFETY: the kernel wrote msg_namelen bytes of a socket address.
            let src = unsafe { SockAddr::new(*names[i].as_ptr(), m.msg_hdr.msg_namelen).as_socket() };
            let Some(src) = src else { continue };
            let seg = gro_segment_size(&m.msg_hdr);
            deliver(ep, now, &mut bufs[i], HEADROOM, len, seg, src, self.local, &mut self.stats);
        }
        Ok(n)
    }
}

/// Hands the packets of one datagram (`len` bytes at `buf[at..]`, cut
/// every `seg` bytes if UDP_GRO coalesced it) to the engine, each with its
/// IP and UDP headers rebuilt in the `ip_header_len + 8` bytes before it.
#[allow(clippy::too_many_arguments)]
pub(super) fn deliver(
    ep: &mut Endpoint,
    now: Instant,
    buf: &mut [u8],
    mut at: usize,
    len: usize,
    seg: Option<usize>,
    src: SocketAddr,
    local: IpAddr,
    stats: &mut IoStats,
) {
    let hl = ip_header_len(local);
    let seg = seg.filter(|&s| s < len).unwrap_or(len.max(1));
    if seg < len {
        stats.gro_receives += 1;
    }
    let end = at + len;
    loop {
        let this = seg.min(end - at);
        let start = at - hl - 8;
        rebuild_headers(&mut buf[start..at], src, local, this);
        stats.datagrams_received += 1;
        ep.handle_packet(now, &buf[start..at + this]);
        at += this;
        if at >= end {
            break;
        }
    }
}

/// Writes the IPv4 (DF, Identification 0, TTL 64) or IPv6 header and the
/// UDP header (checksum 0) of a received packet of `len` bytes after UDP.
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
