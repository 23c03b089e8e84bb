//! Connected send sockets, and the IPv4 Identification they write.
//!
//! A send on a connected UDP socket skips the route lookup that every
//! `sendto` on an unconnected one makes: on loopback about 0.6 us of an
//! 8-byte RC round trip (README, Performance). So each send socket of the
//! socket driver is connected to the first peer it sends to; packets for
//! other peers still leave through it with their address (`sendto` on a
//! connected UDP socket is allowed, and takes the same numbering).
//!
//! IPv6 has no Identification, so that is all it needs. In IPv4 the ICRC
//! covers the Identification, and Linux writes a fixed one (0, with DF)
//! only on unconnected sockets: a connected socket numbers its datagrams
//! from a random start (`ip_select_ident_segs`), one number per send call
//! (a UDP_SEGMENT send takes one, and its segments count up from it, as
//! they count up from 0 on an unconnected socket). The engine builds
//! every packet with Identification 0 and the send path corrects each
//! ICRC by one XOR for the number the kernel will write
//! (`rdma_wire::IdentShift`), which it must therefore know:
//!
//! - A **probe** learns it: an empty datagram sent from the socket to a
//!   sink socket of the device, with a transmit timestamp asked for
//!   (SOF_TIMESTAMPING_TX_SCHED, taken as the packet enters the device
//!   queue), comes back on the socket's error queue with the IP header the
//!   kernel wrote. The next send then carries that number plus one.
//! - A socket whose number is in doubt is probed before it sends again:
//!   after any failed send (a refused call may or may not have taken a
//!   number), and every [`CHECK_EVERY`] sends, when the probe also checks
//!   the prediction. A wrong prediction is counted
//!   (`IoStats::ident_mismatches`): the packets since the last check
//!   failed the peer's ICRC check and the transport resends them.
//! - Where probing does not work (a kernel without timestamps on send,
//!   `net.core.tstamp_allow_data=0` for an unprivileged process) or the
//!   prediction was wrong [`MAX_MISMATCHES`] times, the device disconnects
//!   its IPv4 sockets and sends as before, unconnected, Identification 0.
//!
//! Only the socket driver connects: io_uring may issue a send again after
//! the ones behind it (a send that found the buffer full waits for room),
//! and so number it out of order; fault injection sends single datagrams
//! that it drops, duplicates and reorders itself.

use super::sys::{set_control_message, Control};
use socket2::{SockAddr, Socket};
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;

/// Sends between two probes that check an IPv4 socket's numbering.
pub(super) const CHECK_EVERY: u32 = 4096;

/// Wrong predictions after which a device stops connecting IPv4 sockets.
pub(super) const MAX_MISMATCHES: u64 = 3;

/// A send socket's connection.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Connection {
    /// The peer the socket is connected to.
    pub(super) peer: Option<IpAddr>,
    /// IPv4: the Identification of the socket's next datagram; `None`
    /// until a probe has said it (and again after a failed send).
    pub(super) next_ident: Option<u16>,
    /// Sends since the last probe.
    pub(super) sends: u32,
}

impl Connection {
    /// Takes the number of one send call, if the socket numbers its
    /// datagrams (connected IPv4 with a known next number).
    pub(super) fn take_ident(&mut self) -> Option<u16> {
        let id = self.next_ident?;
        self.next_ident = Some(id.wrapping_add(1));
        self.sends += 1;
        Some(id)
    }
}

/// Undoes `connect`: the socket sends unconnected again (Identification 0).
pub(super) fn disconnect(socket: &Socket) -> io::Result<()> {
    // SAFETY: an AF_UNSPEC address dissolves a UDP socket's association.
    let mut addr: libc::sockaddr = unsafe { std::mem::zeroed() };
    addr.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
    // SAFETY: `addr` is a valid sockaddr of the length given.
    let r =
        unsafe { libc::connect(socket.as_raw_fd(), &addr, std::mem::size_of::<libc::sockaddr>() as libc::socklen_t) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Learns the Identification `socket` (connected IPv4) writes: sends an
/// empty datagram to `sink` with a transmit timestamp asked for, and reads
/// the IP header the kernel wrote back from the error queue. Returns the
/// probe's own number: the socket's next send carries that plus one.
///
/// Errors of kind `Unsupported`, `InvalidData`, `InvalidInput` or
/// `PermissionDenied` ([`is_permanent`]) say that probing cannot work here;
/// others (a send refused) may pass.
pub(super) fn probe(socket: &Socket, sink: &Socket, sink_addr: &SockAddr) -> io::Result<u16> {
    let fd = socket.as_raw_fd();
    drain_error_queue(fd);
    let mut control = Control::default();
    // SAFETY: an all-zero msghdr is valid; every pointer set below points
    // at live memory of the stated length.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_name = sink_addr.as_ptr() as *mut _;
    h.msg_namelen = sink_addr.len();
    set_control_message(&mut h, &mut control, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, libc::SOF_TIMESTAMPING_TX_SCHED);
    // A connected socket reports an ICMP error from its peer (port
    // unreachable) on its next send, which clears it: try again then.
    let mut tries = 0;
    // SAFETY: as above.
    while unsafe { libc::sendmsg(fd, &h, 0) } < 0 {
        tries += 1;
        if tries == 3 {
            return Err(io::Error::last_os_error());
        }
    }
    // The looped copy: link header, IPv4 header (20 bytes: this backend
    // sets no options), UDP header, no payload.
    let mut data = [0u8; 128];
    let mut room = [0u64; 32];
    let mut iov = libc::iovec { iov_base: data.as_mut_ptr().cast(), iov_len: data.len() };
    // SAFETY: as above.
    let mut r: libc::msghdr = unsafe { std::mem::zeroed() };
    r.msg_iov = &mut iov;
    r.msg_iovlen = 1;
    r.msg_control = room.as_mut_ptr().cast();
    r.msg_controllen = std::mem::size_of_val(&room);
    // SAFETY: as above. The copy is queued during the sendmsg (the
    // timestamp is taken as the packet enters the device queue).
    let n = unsafe { libc::recvmsg(fd, &mut r, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    drain(sink);
    if n < 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("no transmit timestamp came back: {}", io::Error::last_os_error()),
        ));
    }
    let n = n as usize;
    let ip = n.checked_sub(28).map(|at| &data[at..n]);
    match ip {
        Some(ip) if ip[0] == 0x45 && ip[9] == libc::IPPROTO_UDP as u8 && u16::from_be_bytes([ip[24], ip[25]]) == 8 => {
            Ok(u16::from_be_bytes([ip[4], ip[5]]))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the timestamp's copy of the probe is not an IPv4/UDP header: {:02x?}", &data[..n]),
        )),
    }
}

/// Whether a [`probe`] error says that probing cannot work on this host.
pub(super) fn is_permanent(e: &io::Error) -> bool {
    use io::ErrorKind::*;
    matches!(e.kind(), Unsupported | InvalidData | InvalidInput | PermissionDenied)
}

/// Empties the error queue of `fd` (left-overs of an earlier probe).
fn drain_error_queue(fd: i32) {
    let mut data = [0u8; 128];
    loop {
        // SAFETY: receives into `data`, of its length.
        let n =
            unsafe { libc::recv(fd, data.as_mut_ptr().cast(), data.len(), libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if n < 0 {
            return;
        }
    }
}

/// Empties the sink of the probes it received.
fn drain(sink: &Socket) {
    let mut data = [std::mem::MaybeUninit::new(0u8); 16];
    while sink.recv(&mut data).is_ok() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Protocol, Type};
    use std::net::SocketAddr;

    fn udp(addr: &str) -> Socket {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        s.bind(&addr.parse::<SocketAddr>().unwrap().into()).unwrap();
        s.set_nonblocking(true).unwrap();
        s
    }

    /// The probe's answer is the number the kernel writes next, through
    /// plain sends, a UDP_SEGMENT send and further probes alike: checked
    /// with a second probe, which reads the kernel's header itself.
    #[test]
    fn a_probe_predicts_the_identification_of_the_next_send() {
        let (peer, sink, s) = (udp("127.0.0.1:0"), udp("127.0.0.1:0"), udp("127.0.0.1:0"));
        let df = libc::IP_PMTUDISC_DO;
        // SAFETY: a plain int option.
        unsafe {
            libc::setsockopt(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, (&df as *const i32).cast(), 4)
        };
        s.connect(&peer.local_addr().unwrap()).unwrap();
        let sink_addr = sink.local_addr().unwrap();
        let first = match probe(&s, &sink, &sink_addr) {
            Ok(id) => id,
            Err(e) => {
                eprintln!("SKIPPED: this kernel gives no transmit timestamps with data: {e}");
                return;
            }
        };
        // Three plain sends take three numbers.
        for _ in 0..3 {
            s.send(b"x").unwrap();
        }
        let after_plain = probe(&s, &sink, &sink_addr).unwrap();
        assert_eq!(after_plain, first.wrapping_add(4), "the probe, then three sends");
        // A UDP_SEGMENT send of 5 segments takes one number.
        let payload = [7u8; 50];
        let mut iov = libc::iovec { iov_base: payload.as_ptr() as *mut _, iov_len: payload.len() };
        let mut control = Control::default();
        // SAFETY: as in `probe`.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        super::super::batch::set_segment_size(&mut h, &mut control, 10);
        // SAFETY: the header points at live buffers of the stated sizes.
        assert_eq!(unsafe { libc::sendmsg(s.as_raw_fd(), &h, 0) }, 50, "{}", io::Error::last_os_error());
        let after_gso = probe(&s, &sink, &sink_addr).unwrap();
        assert_eq!(after_gso, after_plain.wrapping_add(2), "the probe, then one number for the GSO send");
        // Disconnected, the socket writes 0 again, and a probe says so.
        disconnect(&s).unwrap();
        assert_eq!(probe(&s, &sink, &sink_addr).unwrap(), 0, "unconnected with DF: Identification 0");
    }
}
