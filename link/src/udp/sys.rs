//! Socket plumbing the parts of the UDP backend share: addresses,
//! options, buffer sizes and control messages. A leaf.

use socket2::{Domain, SockAddr, Socket};
use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};

pub(super) const SOCKET_BUFFER: usize = 8 << 20;

/// The receive buffer of a send socket (the kernel doubles it): send
/// sockets are never read, and a drop-all filter keeps datagrams out, but
/// the connected-send probe's timestamp copy must fit in the error queue,
/// which is charged to it.
pub(super) const TX_SOCKET_RCVBUF: usize = 4096;

/// A send socket: its port, and its place in `TxPort::sockets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct SocketId {
    pub(super) port: u16,
    pub(super) lane: usize,
}

pub(super) fn ip_header_len(local: IpAddr) -> usize {
    if local.is_ipv4() {
        20
    } else {
        40
    }
}

pub(super) fn domain(local: IpAddr) -> Domain {
    if local.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    }
}

pub(super) fn sock_addr(ip: IpAddr, port: u16, scope_id: u32) -> SockAddr {
    match ip {
        IpAddr::V4(v4) => SocketAddr::new(v4.into(), port).into(),
        IpAddr::V6(v6) => SocketAddrV6::new(v6, port, 0, scope_id).into(),
    }
}

/// Room for three small control messages (CMSG_SPACE of up to 8 bytes
/// each, 24 bytes), aligned: a UDP_SEGMENT size, a TOS and a TTL.
pub(super) type Control = [u64; 9];

/// Room one control message of up to 8 bytes takes (CMSG_SPACE(8)).
pub(super) const CMSG_SPACE_8: usize = 24;

const _: () = assert!(std::mem::size_of::<Control>() >= 3 * CMSG_SPACE_8);

/// Appends `value` as a control message of `h` (level, type) in `room`,
/// after the `h.msg_controllen` bytes already there (0 for the first:
/// callers start from a zeroed header). At most three per header.
pub(super) fn set_control_message<T: Copy>(h: &mut libc::msghdr, room: &mut Control, level: i32, kind: i32, value: T) {
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

/// The TTL / hop limit every send socket is set to (`UdpIo::open_tx`),
/// so that packets with this one, the engine's default, need no control
/// message, whatever the system's default (`net.ipv4.ip_default_ttl`).
pub(super) const DEFAULT_HOP_LIMIT: u8 = 64;

/// The fields of the IP header the engine wrote that the kernel must
/// write too, from control messages: the send socket's own header has
/// neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct IpMarks {
    /// IPv4 TOS / IPv6 traffic class: DSCP and ECN.
    pub tos: u8,
    /// IPv4 TTL / IPv6 hop limit.
    pub hop_limit: u8,
}

impl IpMarks {
    /// The marks in the IP header at the start of `packet`.
    pub(super) fn of(packet: &[u8]) -> IpMarks {
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
pub(super) fn set_ip_marks(h: &mut libc::msghdr, room: &mut Control, dest: IpAddr, marks: IpMarks, sock_tos: u8) {
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

pub(super) fn setsockopt_int(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
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
pub(super) const UDP_NO_CHECK6_RX: i32 = 102;

pub(super) fn common_options(socket: &Socket, local: IpAddr) -> io::Result<()> {
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

pub(super) fn grow_buffers(socket: &Socket) {
    grow_recv_buffer(socket);
    grow_send_buffer(socket);
}

pub(super) fn grow_recv_buffer(socket: &Socket) {
    // Best effort: as root the FORCE variants pass net.core.*mem_max.
    if setsockopt_int(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, SOCKET_BUFFER as i32).is_err() {
        let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    }
}

pub(super) fn grow_send_buffer(socket: &Socket) {
    if setsockopt_int(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, SOCKET_BUFFER as i32).is_err() {
        let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    }
}

/// Makes a send socket refuse every datagram sent to it: anyone can send
/// to its port, and nothing reads it. A classic BPF program of one
/// instruction, `ret #0` (accept 0 bytes), drops each one before it is
/// queued (counted in the socket's drops). The error queue, which the
/// connected-send probe reads, does not pass the filter.
pub(super) fn refuse_datagrams(socket: &Socket) -> io::Result<()> {
    const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
    socket.attach_filter(&[libc::sock_filter { code: BPF_RET_K, jt: 0, jf: 0, k: 0 }])?;
    socket.set_recv_buffer_size(TX_SOCKET_RCVBUF)
}
