//! The links: what a device's packets travel over, every backend behind
//! one seam, apart from the verbs and the link driver (which live in
//! `rdma-core-rs`), so that a tool that only moves frames (the subnet
//! manager, `rdma-sm`) needs nothing else.
//!
//! - [`Link`], a trait, is a link: it moves whole frames of one framing
//!   and reports typed metadata for each frame it receives
//!   ([`FrameMeta`]: source, arrival time, traffic class when the link
//!   knows it apart from the frame, a RoCE v2 packet's IP and UDP
//!   headers), declares what it can do ([`LinkCaps`]) and gives a file
//!   descriptor that is readable while frames wait, for blocking waits.
//!   Implementations: [`udp::UdpIo`] (RoCE v2 over UDP sockets),
//!   [`raw::RawLink`] (AF_PACKET on a named network interface, through `pnet`),
//!   [`inproc::InProcessLink`] (queues between devices of one process),
//!   and two wrappers over any link, [`capture::CaptureLink`] (pcap/ERF
//!   recording) and [`faults::FaultLink`] (loss, duplication, reordering,
//!   corruption).
//! - [`udp::UdpIo`], the UDP backend of RoCE v2 (GSO/GRO, io_uring,
//!   connected and per-TOS sockets, by-reference payloads, multicast
//!   groups, a port shared by the processes of a host: [`share`]). It is
//!   a `Link` (one packet a call, the kernel writing and taking off the IP
//!   and UDP headers: see the trait), and it has a loop of its own with
//!   the engine, which a device runs by default: datagrams (received ones
//!   with their headers as typed values, `rdma_wire::DatagramHeaders`),
//!   runs of segments and scattered payloads, which one packet a call
//!   would give up. That loop takes this crate's fault injector
//!   ([`faults::DatagramFaults`]) and capture ([`capture::IpTap`]). A
//!   device's backend (`rdma_core_rs`'s `io::Io`) is a closed enum of that
//!   loop and the driver of every `Link`: the calls stay direct (no vtable
//!   on the path the round-trip figures measure).
//!
//! Besides the links: the IB port record a port agent publishes
//! ([`ib_port`]), neighbour (ARP) resolution ([`neigh`]), and the
//! addressing rules every frame link shares (EUI-64 GIDs of MACs, the LID
//! plan, frame sizes per MTU, EtherTypes).

pub mod capture;
pub mod delay;
pub mod faults;
#[doc(hidden)]
pub mod fuzzing;
pub mod ib_port;
pub mod inproc;
pub mod io_stats;
pub mod neigh;
pub mod raw;
pub mod route;
pub mod share;
pub mod udp;
pub mod wait;

use rdma_transport::LinkKind;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::RawFd;

/// An Ethernet MAC address.
pub type Mac = [u8; 6];

/// The broadcast MAC address.
pub const BROADCAST: Mac = [0xff; 6];

/// Bytes of the Ethernet header the frame links use (untagged).
pub const ETH_HEADER: usize = 14;

/// What a fault injector did, by kind ([`Link::fault_counts`]; a device
/// reports them in its `IoStats`). The injector is [`faults`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub losses: u64,
    pub duplicates: u64,
    pub reorders: u64,
    pub corruptions: u64,
}

/// What a link can do, declared rather than found out by special cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkCaps {
    /// The framing of the packets the link carries.
    pub kind: LinkKind,
    /// The largest frame, Ethernet header included, it can carry.
    pub max_frame: usize,
    /// Whether one send may hand it a run of frames to segment (UDP GSO).
    pub segmentation_offload: bool,
    /// Whether it can send a payload from a memory region by reference.
    pub by_reference: bool,
}

/// What a link tells about a frame it received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameMeta {
    /// Bytes of the frame in the caller's buffer.
    pub len: usize,
    /// The sender's MAC address.
    pub src: Mac,
    /// When the link took the frame in (for captures and latency).
    pub arrival: std::time::SystemTime,
    /// The traffic class (DSCP and ECN) when the link carries it apart
    /// from the frame; `None` when it is in the frame's own headers (GRH).
    pub traffic_class: Option<u8>,
    /// On a RoCE v2 (UDP) link, whose frames arrive without their IP and
    /// UDP headers: those headers as the socket reported them.
    pub datagram: Option<rdma_wire::DatagramHeaders>,
}

/// A link that moves the frames of one framing ([`LinkCaps::kind`]).
/// Sends and receives never block.
///
/// - RoCE v1 and native IB: Ethernet frames (header included) both ways;
///   [`FrameMeta::src`] is the sender's MAC.
/// - RoCE v2 ([`udp::UdpIo`]): the kernel writes and takes off the IP and
///   UDP headers. `send` takes the packet as the engine builds it, from
///   its IP header (whose destination, TOS and TTL, and the UDP source
///   port, say where and how it leaves); `recv` gives the packet from its
///   BTH on, with the headers in [`FrameMeta::datagram`]. No MAC.
pub trait Link: Send {
    /// What the link can do.
    fn caps(&self) -> LinkCaps;
    /// The link's own MAC address (the source of the frames it sends).
    fn mac(&self) -> Mac;
    /// Sends one frame (Ethernet header included). An error means the
    /// frame was not sent (the transport retransmits).
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;
    /// Takes the next waiting frame into `buf`, if any.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<FrameMeta>>;
    /// Readable while frames wait (or may wait: a spurious wake-up is fine).
    fn fd(&self) -> RawFd;
    /// The end of a burst of sends or receives: a link that buffers
    /// something (a capture file) writes it out. Nothing by default.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// What a fault injector in this link (or under it) did; none by
    /// default.
    fn fault_counts(&self) -> FaultCounts {
        FaultCounts::default()
    }
    /// Receives what is sent to the multicast group of GID `mgid` from now
    /// on; each join is counted and needs one [`Link::leave_group`]. A
    /// frame link has nothing to join (multicast frames are broadcast);
    /// the UDP link joins the IP group.
    fn join_group(&mut self, mgid: IpAddr) -> io::Result<()> {
        let _ = mgid;
        Ok(())
    }
    /// Gives back one [`Link::join_group`].
    fn leave_group(&mut self, mgid: IpAddr) {
        let _ = mgid;
    }
}

impl Link for Box<dyn Link> {
    fn caps(&self) -> LinkCaps {
        (**self).caps()
    }
    fn mac(&self) -> Mac {
        (**self).mac()
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        (**self).send(frame)
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<FrameMeta>> {
        (**self).recv(buf)
    }
    fn fd(&self) -> RawFd {
        (**self).fd()
    }
    fn flush(&mut self) -> io::Result<()> {
        (**self).flush()
    }
    fn fault_counts(&self) -> FaultCounts {
        (**self).fault_counts()
    }
    fn join_group(&mut self, mgid: IpAddr) -> io::Result<()> {
        (**self).join_group(mgid)
    }
    fn leave_group(&mut self, mgid: IpAddr) {
        (**self).leave_group(mgid)
    }
}

/// Bytes at the start of a frame of `kind` that address it on its link
/// (the Ethernet header; on RoCE v2 the IP and UDP headers): a fault
/// injector corrupts only what follows, so that a flipped bit never sends
/// a frame elsewhere, and the receiver's CRC check catches it.
pub fn addressing_len(kind: LinkKind, frame: &[u8]) -> usize {
    match kind {
        LinkKind::RoceV2 if frame.first().is_some_and(|b| b >> 4 == 6) => 48,
        LinkKind::RoceV2 => 28,
        LinkKind::RoceV1 | LinkKind::Ib => ETH_HEADER,
    }
}

/// The link-local GID of a port with MAC address `mac`: fe80::/64 with the
/// modified EUI-64 interface identifier (RoCE v1's GID 0, and the port
/// GID of an emulated IB port whose GUID is made from the MAC).
pub fn gid_of_mac(mac: Mac) -> IpAddr {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8] = mac[0] ^ 0x02;
    g[9] = mac[1];
    g[10] = mac[2];
    g[11] = 0xff;
    g[12] = 0xfe;
    g[13] = mac[3];
    g[14] = mac[4];
    g[15] = mac[5];
    IpAddr::V6(Ipv6Addr::from(g))
}

/// The MAC address a link-local EUI-64 GID was made from, if it is one.
pub fn mac_of_gid(gid: IpAddr) -> Option<Mac> {
    let IpAddr::V6(v6) = gid else { return None };
    let g = v6.octets();
    if g[..8] != [0xfe, 0x80, 0, 0, 0, 0, 0, 0] || g[11] != 0xff || g[12] != 0xfe {
        return None;
    }
    Some([g[8] ^ 0x02, g[9], g[10], g[13], g[14], g[15]])
}

/// The LID plan of ports nobody assigned a LID to (no `--lid`, no subnet
/// manager): the low 14 bits of the MAC (never 0). Route resolution on
/// native IB takes a peer's LID from its GID by this plan when nothing
/// better is known, as a fabric without a subnet administrator must.
pub fn default_lid(mac: Mac) -> u16 {
    u16::from_be_bytes([mac[4] & 0x3f, mac[5]]).max(1)
}

/// The largest frame (Ethernet header included) a packet of a QP with
/// path MTU `mtu` can make: a full payload under the largest header stack.
pub fn frame_for_mtu(mtu: rdma_transport::qp::Mtu) -> usize {
    ETH_HEADER + rdma_transport::MAX_PACKET - 4096 + mtu.bytes() as usize
}

/// The largest path MTU whose packets fit frames of `max_frame` bytes
/// (Ethernet header included); 256, the smallest, if none does.
pub fn max_mtu_for_frame(max_frame: usize) -> rdma_transport::qp::Mtu {
    use rdma_transport::qp::Mtu;
    [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512]
        .into_iter()
        .find(|&m| frame_for_mtu(m) <= max_frame)
        .unwrap_or(Mtu::Mtu256)
}

/// The EtherType of the frames that carry packets of `kind`.
pub fn ethertype(kind: LinkKind) -> Option<u16> {
    match kind {
        LinkKind::RoceV1 => Some(rdma_wire::ethernet::ETHERTYPE_ROCE_V1),
        LinkKind::Ib => Some(rdma_wire::ethernet::ETHERTYPE_IB),
        LinkKind::RoceV2 => None,
    }
}

/// A frame for the links' tests: `len` bytes of `tag` behind an Ethernet
/// header from `src` to `dst` with `ethertype`.
#[cfg(test)]
pub(crate) fn test_frame(dst: Mac, src: Mac, ethertype: u16, tag: u8, len: usize) -> Vec<u8> {
    let mut f = vec![tag; len];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&ethertype.to_be_bytes());
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_mtu_is_the_one_modify_qp_accepts() {
        use rdma_transport::qp::Mtu;
        // A 1500-byte interface (1514-byte frames) carries 1024, as rxe's.
        assert_eq!(max_mtu_for_frame(ETH_HEADER + 1500), Mtu::Mtu1024);
        assert_eq!(max_mtu_for_frame(frame_for_mtu(Mtu::Mtu2048)), Mtu::Mtu2048);
        assert_eq!(max_mtu_for_frame(frame_for_mtu(Mtu::Mtu2048) - 1), Mtu::Mtu1024);
        assert_eq!(max_mtu_for_frame(ETH_HEADER + 9000), Mtu::Mtu4096);
        assert_eq!(max_mtu_for_frame(100), Mtu::Mtu256);
    }

    #[test]
    fn eui64_gids_and_macs_round_trip() {
        let mac = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
        let gid = gid_of_mac(mac);
        assert_eq!(gid.to_string(), "fe80::5054:ff:fe12:3456", "the kernel's RoCE v1 GID of that MAC");
        assert_eq!(mac_of_gid(gid), Some(mac));
        assert_eq!(mac_of_gid("fe80::1".parse().unwrap()), None, "not an EUI-64 identifier");
        assert_eq!(mac_of_gid("10.0.0.1".parse().unwrap()), None);
    }
}
