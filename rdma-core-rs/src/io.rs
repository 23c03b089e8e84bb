//! A device's backend: the UDP driver of RoCE v2, or the frame driver of
//! a [`rdma_link::Link`] (RoCE v1, native IB). A closed enum rather
//! than a trait object: see [`crate::link`] for why, and for the seam.

use crate::frames::FrameIo;
use rdma_link::io_stats::IoStats;
use rdma_link::udp::{IoDriver, Offloads, UdpIo};
use rdma_transport::{Endpoint, Instant};
use std::io;
use std::os::fd::RawFd;

// One per device, inside its state: the UDP driver stays inline (no
// pointer to chase on the path of every packet) though it is larger.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Io {
    Udp(UdpIo),
    Frames(FrameIo),
}

impl Io {
    #[inline]
    pub(crate) fn receive(&mut self, ep: &mut Endpoint, now: Instant) -> io::Result<usize> {
        match self {
            Io::Udp(u) => u.receive(ep, now),
            Io::Frames(f) => f.receive(ep, now),
        }
    }

    #[inline]
    pub(crate) fn transmit(&mut self, ep: &mut Endpoint, now: Instant) -> io::Result<usize> {
        match self {
            Io::Udp(u) => u.transmit(ep, now),
            Io::Frames(f) => f.transmit(ep, now),
        }
    }

    /// Whether this is a frame link (RoCE v1, native IB), not UDP.
    #[inline]
    pub(crate) fn is_frames(&self) -> bool {
        matches!(self, Io::Frames(_))
    }

    /// io_uring: receives reaped while sending.
    #[inline]
    pub(crate) fn receives_pending(&mut self) -> bool {
        match self {
            Io::Udp(u) => u.receives_pending(),
            Io::Frames(_) => false,
        }
    }

    #[inline]
    pub(crate) fn has_pending(&mut self) -> bool {
        match self {
            Io::Udp(u) => u.has_pending(),
            Io::Frames(_) => false,
        }
    }

    #[inline]
    pub(crate) fn sends_left(&self) -> bool {
        match self {
            Io::Udp(u) => u.sends_left(),
            Io::Frames(f) => f.sends_left(),
        }
    }

    /// What a blocking wait sleeps on (a negative fd is skipped).
    pub(crate) fn wait_fds(&self) -> [RawFd; 2] {
        match self {
            Io::Udp(u) => u.wait_fds(),
            Io::Frames(f) => [f.fd(), -1],
        }
    }

    /// Readable when packets wait (for `wait_async`).
    pub(crate) fn rx_fd(&self) -> RawFd {
        match self {
            Io::Udp(u) => u.rx_fd(),
            Io::Frames(f) => f.fd(),
        }
    }

    pub(crate) fn stats(&self) -> IoStats {
        match self {
            Io::Udp(u) => u.stats.clone(),
            Io::Frames(f) => f.stats(),
        }
    }

    /// The largest frame the link carries, for a frame link.
    pub(crate) fn max_frame(&self) -> Option<usize> {
        match self {
            Io::Udp(_) => None,
            Io::Frames(f) => f.max_frame(),
        }
    }

    pub(crate) fn offloads(&self) -> Offloads {
        match self {
            Io::Udp(u) => u.offloads(),
            Io::Frames(_) => Offloads { gso: false, gro: false },
        }
    }

    pub(crate) fn driver(&self) -> IoDriver {
        match self {
            Io::Udp(u) => u.driver(),
            Io::Frames(_) => IoDriver::Sockets,
        }
    }

    /// A UDP source port for a new QP: a frame link has none to reserve
    /// (RoCE v1 and IB packets carry no UDP header), so any is fine.
    pub(crate) fn reserve_port(&mut self, want: u16) -> io::Result<u16> {
        match self {
            Io::Udp(u) => u.reserve_port(want),
            Io::Frames(_) => Ok(want),
        }
    }

    /// Received packets bring their TTL / hop limit from now on (a frame
    /// link has it in every frame already).
    pub(crate) fn want_hop_limits(&mut self) {
        if let Io::Udp(u) = self {
            u.want_hop_limits()
        }
    }

    /// The device receives packets sent to the multicast group `gid`
    /// (counted; see `UdpIo::join_group`). Frame links get multicast
    /// frames broadcast, so they have nothing to join.
    pub(crate) fn join_group(&mut self, gid: std::net::IpAddr) -> io::Result<()> {
        match self {
            Io::Udp(u) => u.join_group(gid),
            // The link's own (frame links: nothing to join).
            Io::Frames(f) => f.join_group(gid),
        }
    }

    pub(crate) fn leave_group(&mut self, gid: std::net::IpAddr) {
        match self {
            Io::Udp(u) => u.leave_group(gid),
            Io::Frames(f) => f.leave_group(gid),
        }
    }

    pub(crate) fn release_port(&mut self, port: u16) {
        if let Io::Udp(u) = self {
            u.release_port(port)
        }
    }

    /// The device's membership of its shared port, if it shares it.
    pub(crate) fn member(&self) -> Option<&rdma_link::share::Member> {
        match self {
            Io::Udp(u) => u.member(),
            Io::Frames(_) => None,
        }
    }

    /// The shared port's slot this socket holds, if it shares the port.
    pub(crate) fn slot(&self) -> Option<u8> {
        self.member().map(|m| m.slot())
    }
}
