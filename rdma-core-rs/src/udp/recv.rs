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

/// The receive buffers and the `recvmmsg` headers that point into them,
/// set up once: a poll that finds nothing costs the system call alone, and
/// a receive resets only the fields the kernel wrote in the headers it used.
pub(super) struct RxRing {
    bufs: Vec<Box<[u8]>>,
    control: Box<[[u64; CMSG_ROOM / 8]; BATCH]>,
    names: Box<[MaybeUninit<libc::sockaddr_storage>; BATCH]>,
    iovs: Box<[libc::iovec; BATCH]>,
    msgs: Box<[libc::mmsghdr; BATCH]>,
    gro: bool,
}

// SAFETY: the raw pointers in `iovs` and `msgs` point into the heap blocks
// this struct owns (never reallocated), so they move with it between threads.
unsafe impl Send for RxRing {}

const NAME_LEN: libc::socklen_t = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;

impl RxRing {
    /// `capacity`: the longest datagram taken (longer ones are dropped as
    /// truncated); `gro`: the socket hands up UDP_GRO control messages.
    pub(super) fn new(capacity: usize, gro: bool) -> RxRing {
        // SAFETY: all-zero iovec and mmsghdr are valid (null pointers, zero lengths).
        let (iovs, msgs) = unsafe { (Box::new(std::mem::zeroed()), Box::new(std::mem::zeroed())) };
        let mut ring = RxRing {
            bufs: (0..BATCH).map(|_| vec![0u8; HEADROOM + capacity].into_boxed_slice()).collect(),
            control: Box::new([[0; CMSG_ROOM / 8]; BATCH]),
            names: Box::new([MaybeUninit::uninit(); BATCH]),
            iovs,
            msgs,
            gro,
        };
        for i in 0..BATCH {
            let b = &mut ring.bufs[i][HEADROOM..];
            ring.iovs[i] = libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() };
            let h = &mut ring.msgs[i].msg_hdr;
            h.msg_name = ring.names[i].as_mut_ptr().cast();
            h.msg_iov = &mut ring.iovs[i];
            h.msg_iovlen = 1;
            if gro {
                h.msg_control = ring.control[i].as_mut_ptr().cast();
            }
            ring.reset(i);
        }
        ring
    }

    /// Gives header `i` back its buffer sizes, which the kernel overwrote.
    fn reset(&mut self, i: usize) {
        let m = &mut self.msgs[i];
        m.msg_len = 0;
        m.msg_hdr.msg_namelen = NAME_LEN;
        m.msg_hdr.msg_controllen = if self.gro { CMSG_ROOM } else { 0 };
        m.msg_hdr.msg_flags = 0;
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
        // SAFETY: every pointer refers to live buffers of the stated sizes.
        let n = unsafe {
            libc::recvmmsg(
                self.rx.as_raw_fd(),
                rx_ring.msgs.as_mut_ptr(),
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
        for i in 0..n {
            let m = &rx_ring.msgs[i];
            let (len, flags, namelen) = (m.msg_len as usize, m.msg_hdr.msg_flags, m.msg_hdr.msg_namelen);
            let seg = gro_segment_size(&m.msg_hdr);
            if flags & libc::MSG_TRUNC != 0 {
                self.stats.datagrams_received += 1;
                self.stats.truncated += 1;
                tracing::debug!(len, "oversized datagram dropped");
            } else {
                // SAFETY: the kernel wrote msg_namelen bytes of a socket address.
                let src = unsafe { SockAddr::new(*rx_ring.names[i].as_ptr(), namelen).as_socket() };
                if let Some(src) = src {
                    deliver(ep, now, &mut rx_ring.bufs[i], HEADROOM, len, seg, src, self.local, &mut self.stats);
                }
            }
            rx_ring.reset(i);
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
