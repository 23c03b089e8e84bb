//! The UDP backend as a [`Link`], one packet a call: what a device uses
//! when it drives its UDP backend through the frame driver, like every
//! other link, so that the link wrappers (fault injection, capture) apply
//! to it as to them ([`UdpConfig::as_link`](super::UdpConfig::as_link)).
//! The batched path (`recv.rs`, `send.rs`: GSO runs, GRO, payloads by
//! reference, io_uring) is the device's default; this one gives those up,
//! as its capabilities say.

use super::rx::{recv_datagram, Control};
use super::sys::IpMarks;
use super::UdpIo;
use crate::{FrameMeta, Link, LinkCaps, Mac};
use rdma_transport::{LinkKind, MAX_PACKET};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, RawFd};
use std::time::SystemTime;

/// Where a packet the engine built goes: its destination and UDP source
/// port, read from its IP and UDP headers, and the bytes after them.
fn addressing(packet: &[u8]) -> Option<(IpAddr, u16, &[u8])> {
    let (dest, hl) = match packet.first()? >> 4 {
        4 => (IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(packet.get(16..20)?).ok()?)), 20),
        6 => (IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(packet.get(24..40)?).ok()?)), 40),
        _ => return None,
    };
    let port = u16::from_be_bytes([*packet.get(hl)?, *packet.get(hl + 1)?]);
    Some((dest, port, packet.get(hl + 8..)?))
}

impl Link for UdpIo {
    fn caps(&self) -> LinkCaps {
        // Whole packets, one a call: no segmentation offload, nothing by
        // reference. No Ethernet header: the largest frame is a packet.
        LinkCaps { kind: LinkKind::RoceV2, max_frame: MAX_PACKET, segmentation_offload: false, by_reference: false }
    }

    fn mac(&self) -> Mac {
        [0; 6]
    }

    /// Sends the packet from the send socket of its UDP source port (the
    /// ICRC covers the port), opened the first time the port is seen.
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let (dest, port, body) = addressing(frame).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "not an IPv4 or IPv6 packet with a UDP header")
        })?;
        let marks = IpMarks::of(frame);
        if !self.tx.contains_key(&port) {
            self.open_port(port)?;
        }
        let Some(id) = self.socket_for(port, marks.tos) else {
            return Err(io::Error::other(format!("no send socket for UDP port {port}")));
        };
        let (scope_id, socket) = (self.scope_id, &self.tx[&id.port].sockets[id.lane]);
        if super::batch::send_one(socket, body, (dest, marks), scope_id, &mut self.stats) {
            Ok(())
        } else {
            Err(io::Error::other("the kernel refused the datagram"))
        }
    }

    /// Takes the next datagram of the receive socket, or of a multicast
    /// group's: the packet from its BTH, and the sender, destination, TOS
    /// and TTL the socket reported.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<FrameMeta>> {
        let meta = |len, src, control: Control, dst| FrameMeta {
            len,
            src: [0; 6],
            arrival: SystemTime::now(),
            traffic_class: Some(control.tos),
            datagram: Some(control.headers(src, dst)),
        };
        if let Some((len, src, control)) = recv_datagram(self.rx.as_raw_fd(), buf, &mut self.stats)? {
            return Ok(Some(meta(len, src, control, self.local)));
        }
        Ok(self.mcast.recv_one(buf, &mut self.stats).map(|(len, src, control, group)| meta(len, src, control, group)))
    }

    /// Readable when a datagram waits on the receive socket or a group's
    /// (an epoll set of them all, see `Groups`).
    fn fd(&self) -> RawFd {
        self.mcast.fd()
    }

    fn join_group(&mut self, mgid: IpAddr) -> io::Result<()> {
        UdpIo::join_group(self, mgid)
    }

    fn leave_group(&mut self, mgid: IpAddr) {
        UdpIo::leave_group(self, mgid)
    }
}
