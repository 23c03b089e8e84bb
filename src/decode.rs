//! Finding the RDMA packet in a captured frame: RoCE v2 (UDP port 4791
//! over IPv4 or IPv6), RoCE v1 (EtherType 0x8915) and native InfiniBand
//! (LINKTYPE_INFINIBAND, ERF records of type 21 as `ibdump` writes them,
//! or Ethernet frames of EtherType 0x88B5 from the raw IB backend),
//! behind Ethernet, Linux cooked or raw-IP framing.

use crate::capture::linktype;
use rdma_wire::ethernet::{ETHERTYPE_IB, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ROCE_V1};
use rdma_wire::{EthernetRepr, IbPacket, RoceV1Packet, RoceV2Packet, ROCE_V2_PORT};

/// The kind of RDMA packet a frame holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    RoceV2,
    RoceV1,
    Ib,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::RoceV2 => "roce_v2",
            Kind::RoceV1 => "roce_v1",
            Kind::Ib => "ib",
        }
    }
}

/// What a frame holds.
#[derive(Debug)]
pub enum Decoded<'a> {
    /// Not RDMA traffic (ARP, TCP, other UDP ports, ...).
    NotRdma,
    RoceV2(RoceV2Packet<&'a [u8]>),
    RoceV1(RoceV1Packet<&'a [u8]>),
    Ib(IbPacket<&'a [u8]>),
    /// A frame that is RDMA traffic by its framing (port 4791, EtherType
    /// 0x8915, an InfiniBand link) but does not parse.
    Malformed {
        kind: Kind,
        error: rdma_wire::Error,
    },
}

impl Decoded<'_> {
    /// The kind of RDMA packet, or `None` for frames that are not RDMA.
    pub fn kind(&self) -> Option<Kind> {
        match self {
            Decoded::NotRdma => None,
            Decoded::RoceV2(_) => Some(Kind::RoceV2),
            Decoded::RoceV1(_) => Some(Kind::RoceV1),
            Decoded::Ib(_) => Some(Kind::Ib),
            Decoded::Malformed { kind, .. } => Some(*kind),
        }
    }
}

/// Decodes one frame captured on a link of type `link`.
pub fn decode(link: u32, frame: &[u8]) -> Decoded<'_> {
    match link {
        linktype::INFINIBAND => ib(frame),
        linktype::ERF => erf(frame),
        linktype::ETHERNET => match EthernetRepr::parse(frame) {
            Ok((eth, off)) => by_ethertype(eth.ethertype, &frame[off..]),
            Err(_) => Decoded::NotRdma,
        },
        // Linux cooked capture v1: 16-byte header, protocol at 14.
        linktype::LINUX_SLL if frame.len() >= 16 => {
            by_ethertype(u16::from_be_bytes([frame[14], frame[15]]), &frame[16..])
        }
        // Linux cooked capture v2: 20-byte header, protocol at 0.
        linktype::LINUX_SLL2 if frame.len() >= 20 => {
            by_ethertype(u16::from_be_bytes([frame[0], frame[1]]), &frame[20..])
        }
        linktype::RAW | linktype::IPV4 | linktype::IPV6 => roce_v2(frame),
        _ => Decoded::NotRdma,
    }
}

fn by_ethertype(ethertype: u16, payload: &[u8]) -> Decoded<'_> {
    match ethertype {
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => roce_v2(payload),
        ETHERTYPE_ROCE_V1 => match RoceV1Packet::new_checked(payload) {
            Ok(p) => Decoded::RoceV1(p),
            Err(error) => Decoded::Malformed { kind: Kind::RoceV1, error },
        },
        ETHERTYPE_IB => ib(payload),
        _ => Decoded::NotRdma,
    }
}

fn ib(packet: &[u8]) -> Decoded<'_> {
    match IbPacket::new_checked(packet) {
        Ok(p) => Decoded::Ib(p),
        Err(error) => Decoded::Malformed { kind: Kind::Ib, error },
    }
}

/// ERF type of an InfiniBand data packet (from the LRH on).
const ERF_TYPE_INFINIBAND: u8 = 21;

/// An ERF record: a 16-byte header (timestamp, type, flags, record and
/// wire lengths), 8 bytes per extension header when the type's top bit
/// says one follows, then the packet. Only type 21 is RDMA here; type 25
/// (IB link packets) and the rest are other traffic.
fn erf(record: &[u8]) -> Decoded<'_> {
    let Some(&ty) = record.get(8) else { return Decoded::NotRdma };
    let mut at = 16;
    let mut more = ty & 0x80 != 0;
    while more {
        let Some(&ext) = record.get(at) else { return Decoded::NotRdma };
        more = ext & 0x80 != 0;
        at += 8;
    }
    if ty & 0x7f != ERF_TYPE_INFINIBAND || record.len() < at {
        return Decoded::NotRdma;
    }
    // The record length may round the packet up; the LRH gives its length.
    ib(&record[at..])
}

/// The UDP destination port of an IP packet, if it is UDP and the header
/// is there to read; used to tell RoCE v2 from other traffic before the
/// strict parse, so that a broken RoCE packet is reported, not skipped.
fn udp_dst_port(ip: &[u8]) -> Option<u16> {
    let (proto, l4) = match ip.first()? >> 4 {
        4 => (*ip.get(9)?, usize::from(ip[0] & 0x0f) * 4),
        6 => (*ip.get(6)?, 40),
        _ => return None,
    };
    (proto == 17).then(|| Some(u16::from_be_bytes([*ip.get(l4 + 2)?, *ip.get(l4 + 3)?])))?
}

fn roce_v2(ip: &[u8]) -> Decoded<'_> {
    if udp_dst_port(ip) != Some(ROCE_V2_PORT) {
        return Decoded::NotRdma;
    }
    match RoceV2Packet::new_checked(ip) {
        Ok(p) => Decoded::RoceV2(p),
        Err(error) => Decoded::Malformed { kind: Kind::RoceV2, error },
    }
}
