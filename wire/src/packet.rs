//! Whole packets: what comes in front of the transport packet, and the
//! ICRC (and, for native IB, the VCRC) over all of it.
//!
//! | packet | layout |
//! |---|---|
//! | [`RoceV2Packet`] | IPv4 or IPv6, UDP to port 4791, transport packet |
//! | [`RoceV1Packet`] | GRH (Ethernet type 0x8915), transport packet |
//! | [`IbPacket`] | LRH, GRH if LNH says so, transport packet, VCRC |

use crate::bth::pad_for;
use crate::error::check_len;
use crate::ipv4::{Ipv4, Ipv4Repr, PROTOCOL_UDP};
use crate::ipv6::{Grh, GrhRepr, Ipv6, Ipv6Repr, NEXT_HEADER_IBA};
use crate::lrh::{Lnh, Lrh, LrhRepr};
use crate::transport_packet::{finish_with_icrc, TransportPacket, TransportRepr, ICRC_LEN};

const BTH_LEN: usize = 12;
use crate::opcode::OpcodeInfo;
use crate::udp::{Udp, UdpRepr, ROCE_V2_PORT};
use crate::{vcrc, Error, Result};

/// A checked view of a RoCE v2 packet, from the IP header through the ICRC.
/// Bytes after the end the IP header gives (Ethernet padding) are ignored.
#[derive(Debug, Clone, Copy)]
pub struct RoceV2Packet<T: AsRef<[u8]>> {
    buffer: T,
    ip_len: usize,
    end: usize,
    info: &'static OpcodeInfo,
}

impl<T: AsRef<[u8]>> RoceV2Packet<T> {
    /// Checks the IP header (version, lengths, checksum for IPv4, no
    /// fragments), that UDP goes to port 4791 with a consistent length, and
    /// the transport packet inside (see [`TransportPacket::new_checked`]).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        check_len("IP", b, 1)?;
        let (ip_len, ip_payload, proto) = match b[0] >> 4 {
            4 => {
                let h = Ipv4::new_checked(b)?;
                (Ipv4::<&[u8]>::LEN, h.check()?, h.protocol())
            }
            6 => {
                let h = Ipv6::new_checked(b)?;
                let (_, payload) = Ipv6Repr::parse(&h)?;
                (Ipv6::<&[u8]>::LEN, payload, h.next_header())
            }
            v => return Err(Error::BadVersion { header: "IP", version: v }),
        };
        if proto != PROTOCOL_UDP {
            return Err(Error::NotTransport { header: "IP", value: u32::from(proto) });
        }
        let end = ip_len + ip_payload;
        let udp = Udp::new_checked(&b[ip_len..end])?;
        let (_, udp_payload) = UdpRepr::parse(&udp)?;
        if udp.dst_port() != ROCE_V2_PORT {
            return Err(Error::NotTransport { header: "UDP", value: u32::from(udp.dst_port()) });
        }
        if udp_payload != end - ip_len - Udp::<&[u8]>::LEN {
            return Err(Error::LengthMismatch { header: "UDP", claimed: udp_payload + 8, actual: end - ip_len });
        }
        let info = TransportPacket::new_checked(&b[ip_len + Udp::<&[u8]>::LEN..end])?.info();
        Ok(RoceV2Packet { buffer, ip_len, end, info })
    }

    fn b(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.end]
    }

    /// The packet from the IP header through the ICRC.
    pub fn as_bytes(&self) -> &[u8] {
        self.b()
    }

    /// The IPv4 header, if this is RoCE v2 over IPv4.
    pub fn ipv4(&self) -> Option<Ipv4<&[u8]>> {
        (self.ip_len == Ipv4::<&[u8]>::LEN).then(|| Ipv4::new_unchecked(self.b()))
    }

    /// The IPv6 header, if this is RoCE v2 over IPv6.
    pub fn ipv6(&self) -> Option<Ipv6<&[u8]>> {
        (self.ip_len == Ipv6::<&[u8]>::LEN).then(|| Ipv6::new_unchecked(self.b()))
    }

    pub fn udp(&self) -> Udp<&[u8]> {
        Udp::new_unchecked(&self.b()[self.ip_len..])
    }

    /// The transport packet, BTH through ICRC.
    pub fn transport(&self) -> TransportPacket<&[u8]> {
        TransportPacket::new_prechecked(&self.b()[self.ip_len + Udp::<&[u8]>::LEN..], self.info)
    }

    /// The ICRC this packet should carry.
    pub fn computed_icrc(&self) -> u32 {
        let b = self.b();
        crate::icrc::roce_v2(&b[..b.len() - ICRC_LEN]).expect("headers checked")
    }

    /// Whether the carried ICRC is right.
    pub fn icrc_ok(&self) -> bool {
        self.computed_icrc() == self.transport().icrc()
    }
}

/// The network header in front of a RoCE v2 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    V4(Ipv4Repr),
    V6(Ipv6Repr),
}

impl IpRepr {
    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => Ipv4::<&[u8]>::LEN,
            IpRepr::V6(_) => Ipv6::<&[u8]>::LEN,
        }
    }
}

/// An owned RoCE v2 packet header stack. The payload is passed to
/// [`RoceV2Repr::emit`] separately; lengths, checksum, pad and ICRC are
/// derived when emitting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceV2Repr {
    pub ip: IpRepr,
    pub udp: UdpRepr,
    pub transport: TransportRepr,
}

impl RoceV2Repr {
    /// Reads the headers of a checked packet; the payload is
    /// `packet.transport().payload()`.
    pub fn parse<T: AsRef<[u8]>>(p: &RoceV2Packet<T>) -> Result<RoceV2Repr> {
        let ip = match (p.ipv4(), p.ipv6()) {
            (Some(h), _) => IpRepr::V4(Ipv4Repr::parse(&h)?.0),
            (_, Some(h)) => IpRepr::V6(Ipv6Repr::parse(&h)?.0),
            _ => unreachable!("a checked packet is IPv4 or IPv6"),
        };
        let udp = UdpRepr::parse(&p.udp())?.0;
        let transport = TransportRepr::parse(&p.transport())?;
        Ok(RoceV2Repr { ip, udp, transport })
    }

    /// Bytes the packet takes with `payload_len` bytes of payload.
    pub fn buffer_len(&self, payload_len: usize) -> Result<usize> {
        Ok(self.ip.header_len() + Udp::<&[u8]>::LEN + self.transport.packet_len(payload_len)?)
    }

    /// Offset of the payload in the emitted packet.
    pub fn payload_offset(&self) -> Result<usize> {
        Ok(self.ip.header_len() + Udp::<&[u8]>::LEN + self.transport.header_len()?)
    }

    /// Writes the whole packet, IP header through ICRC, copying `payload`
    /// into place. Returns its length.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize> {
        let at = self.payload_offset()?;
        let total = self.buffer_len(payload.len())?;
        if buf.len() < total {
            return Err(Error::BufferTooSmall { needed: total, available: buf.len() });
        }
        buf[at..at + payload.len()].copy_from_slice(payload);
        self.emit_in_place(buf, payload.len())
    }

    /// Writes the headers, pad and ICRC around `payload_len` bytes of
    /// payload that are already at [`Self::payload_offset`] in `buf` (for
    /// example read there straight from a memory region). The ICRC is
    /// computed in one pass over the finished packet. Returns its length.
    pub fn emit_in_place(&self, buf: &mut [u8], payload_len: usize) -> Result<usize> {
        let info = self.transport.check()?;
        let total = self.headers_len(info) + payload_len + pad_for(payload_len) + ICRC_LEN;
        if buf.len() < total {
            return Err(Error::BufferTooSmall { needed: total, available: buf.len() });
        }
        let end = self.emit_headers_for(info, buf, payload_len)? + payload_len;
        Ok(finish_with_icrc(buf, end, payload_len, |b| crate::icrc::roce_v2(b).expect("headers written")))
    }

    /// Writes only the headers, IP through the last extension header, of a
    /// packet with `payload_len` bytes of payload (lengths and pad count
    /// included): for a sender that keeps the payload apart, for example
    /// in the memory region it is sent from. Finish such a packet with
    /// [`crate::icrc::roce_v2_split`]. Returns the length of the headers.
    pub fn emit_headers(&self, buf: &mut [u8], payload_len: usize) -> Result<usize> {
        self.emit_headers_for(self.transport.check()?, buf, payload_len)
    }

    /// IP through the last extension header, for headers checked against `info`.
    fn headers_len(&self, info: &OpcodeInfo) -> usize {
        self.ip.header_len() + Udp::<&[u8]>::LEN + BTH_LEN + info.ext_len()
    }

    /// [`Self::emit_headers`] for headers already checked against `info`.
    fn emit_headers_for(&self, info: &OpcodeInfo, buf: &mut [u8], payload_len: usize) -> Result<usize> {
        let ip_len = self.ip.header_len();
        let t = ip_len + Udp::<&[u8]>::LEN;
        let hdr_len = self.headers_len(info);
        let total = hdr_len + payload_len + pad_for(payload_len) + ICRC_LEN;
        if buf.len() < hdr_len {
            return Err(Error::BufferTooSmall { needed: hdr_len, available: buf.len() });
        }
        let l4 = total - ip_len;
        match &self.ip {
            IpRepr::V4(h) => h.emit(buf, l4)?,
            IpRepr::V6(h) => h.emit(buf, l4)?,
        }
        self.udp.emit(&mut buf[ip_len..], l4 - Udp::<&[u8]>::LEN)?;
        Ok(t + self.transport.emit_headers_for(info, &mut buf[t..], payload_len)?)
    }
}

/// Checks a GRH in front of a transport packet: version 6, next header
/// 0x1B and a payload length that fits. Returns the payload length.
fn check_grh(b: &[u8]) -> Result<usize> {
    let grh = Grh::new_checked(b)?;
    let (_, len) = GrhRepr::parse(&grh)?;
    if grh.next_header() != NEXT_HEADER_IBA {
        return Err(Error::NotTransport { header: "GRH", value: u32::from(grh.next_header()) });
    }
    Ok(len)
}

/// A checked view of a RoCE v1 packet, from the GRH through the ICRC.
#[derive(Debug, Clone, Copy)]
pub struct RoceV1Packet<T: AsRef<[u8]>> {
    buffer: T,
    end: usize,
}

impl<T: AsRef<[u8]>> RoceV1Packet<T> {
    pub fn new_checked(buffer: T) -> Result<Self> {
        let len = check_grh(buffer.as_ref())?;
        let end = Grh::<&[u8]>::LEN + len;
        TransportPacket::new_checked(&buffer.as_ref()[Grh::<&[u8]>::LEN..end])?;
        Ok(RoceV1Packet { buffer, end })
    }
    fn b(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.end]
    }
    pub fn grh(&self) -> Grh<&[u8]> {
        Grh::new_unchecked(self.b())
    }
    pub fn transport(&self) -> TransportPacket<&[u8]> {
        TransportPacket::new_checked(&self.b()[Grh::<&[u8]>::LEN..]).expect("checked in new_checked")
    }
    pub fn computed_icrc(&self) -> u32 {
        let b = self.b();
        crate::icrc::roce_v1(&b[..b.len() - ICRC_LEN]).expect("headers checked")
    }
    pub fn icrc_ok(&self) -> bool {
        self.computed_icrc() == self.transport().icrc()
    }
}

/// An owned RoCE v1 header stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceV1Repr {
    pub grh: GrhRepr,
    pub transport: TransportRepr,
}

impl RoceV1Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &RoceV1Packet<T>) -> Result<RoceV1Repr> {
        Ok(RoceV1Repr { grh: GrhRepr::parse(&p.grh())?.0, transport: TransportRepr::parse(&p.transport())? })
    }

    pub fn buffer_len(&self, payload_len: usize) -> Result<usize> {
        Ok(Grh::<&[u8]>::LEN + self.transport.packet_len(payload_len)?)
    }

    /// Offset of the payload in the emitted packet.
    pub fn payload_offset(&self) -> Result<usize> {
        Ok(Grh::<&[u8]>::LEN + self.transport.header_len()?)
    }

    /// Writes the GRH through the ICRC; the GRH's next header is set to 0x1B.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize> {
        let at = self.payload_offset()?;
        let total = self.buffer_len(payload.len())?;
        if buf.len() < total {
            return Err(Error::BufferTooSmall { needed: total, available: buf.len() });
        }
        buf[at..at + payload.len()].copy_from_slice(payload);
        self.emit_in_place(buf, payload.len())
    }

    /// Writes the headers, pad and ICRC around `payload_len` bytes of
    /// payload already at [`Self::payload_offset`] in `buf`. Returns the
    /// packet's length.
    pub fn emit_in_place(&self, buf: &mut [u8], payload_len: usize) -> Result<usize> {
        let total = self.buffer_len(payload_len)?;
        if buf.len() < total {
            return Err(Error::BufferTooSmall { needed: total, available: buf.len() });
        }
        let g = Grh::<&[u8]>::LEN;
        GrhRepr { next_header: NEXT_HEADER_IBA, ..self.grh }.emit(buf, total - g)?;
        let hdr = self.transport.emit_headers(&mut buf[g..], payload_len)?;
        let end = g + hdr + payload_len;
        Ok(finish_with_icrc(buf, end, payload_len, |b| crate::icrc::roce_v1(b).expect("headers written")))
    }
}

/// Length of the VCRC field.
pub const VCRC_LEN: usize = 2;

/// A checked view of a native InfiniBand packet, from the LRH through the
/// VCRC. Bytes after the VCRC are ignored.
#[derive(Debug, Clone, Copy)]
pub struct IbPacket<T: AsRef<[u8]>> {
    buffer: T,
    /// End of the ICRC (the LRH's PktLen in bytes).
    icrc_end: usize,
}

impl<T: AsRef<[u8]>> IbPacket<T> {
    /// Checks the LRH (version 0, an IBA transport next header, a packet
    /// length that fits with its VCRC), the GRH if present (consistent
    /// with the LRH length) and the transport packet.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        let lrh = Lrh::new_checked(b)?;
        let (repr, len) = LrhRepr::parse(&lrh)?;
        if len + VCRC_LEN > b.len() || len < Lrh::<&[u8]>::LEN {
            return Err(Error::LengthMismatch { header: "LRH", claimed: len + VCRC_LEN, actual: b.len() });
        }
        let l = Lrh::<&[u8]>::LEN;
        let transport_start = match repr.lnh {
            Lnh::IbaLocal => l,
            Lnh::IbaGlobal => {
                let grh_payload = check_grh(&b[l..len])?;
                if l + Grh::<&[u8]>::LEN + grh_payload != len {
                    return Err(Error::LengthMismatch {
                        header: "GRH",
                        claimed: grh_payload,
                        actual: len - l - Grh::<&[u8]>::LEN,
                    });
                }
                l + Grh::<&[u8]>::LEN
            }
            other => return Err(Error::NotTransport { header: "LRH", value: u32::from(other.bits()) }),
        };
        TransportPacket::new_checked(&b[transport_start..len])?;
        Ok(IbPacket { buffer, icrc_end: len })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The packet from the LRH through the VCRC.
    pub fn as_bytes(&self) -> &[u8] {
        &self.b()[..self.icrc_end + VCRC_LEN]
    }

    pub fn lrh(&self) -> Lrh<&[u8]> {
        Lrh::new_unchecked(self.b())
    }

    pub fn grh(&self) -> Option<Grh<&[u8]>> {
        (self.lrh().lnh() == Lnh::IbaGlobal).then(|| Grh::new_unchecked(&self.b()[Lrh::<&[u8]>::LEN..]))
    }

    fn transport_start(&self) -> usize {
        Lrh::<&[u8]>::LEN + if self.grh().is_some() { Grh::<&[u8]>::LEN } else { 0 }
    }

    pub fn transport(&self) -> TransportPacket<&[u8]> {
        TransportPacket::new_checked(&self.b()[self.transport_start()..self.icrc_end]).expect("checked in new_checked")
    }

    pub fn computed_icrc(&self) -> u32 {
        crate::icrc::ib(&self.b()[..self.icrc_end - ICRC_LEN]).expect("headers checked")
    }

    pub fn icrc_ok(&self) -> bool {
        self.computed_icrc() == self.transport().icrc()
    }

    /// The VCRC as carried.
    pub fn vcrc(&self) -> u16 {
        vcrc::from_wire([self.b()[self.icrc_end], self.b()[self.icrc_end + 1]])
    }

    /// The VCRC this packet should carry.
    pub fn computed_vcrc(&self) -> u16 {
        vcrc::vcrc(&self.b()[..self.icrc_end])
    }

    pub fn vcrc_ok(&self) -> bool {
        self.vcrc() == self.computed_vcrc()
    }
}

impl IbPacket<&mut [u8]> {
    /// Rewrites the ICRC and VCRC of the IB packet at the start of `buf`
    /// over its current bytes, if it parses (what a test or fuzz body does
    /// after changing a header); false if it does not.
    pub fn reseal(buf: &mut [u8]) -> bool {
        let Ok(p) = IbPacket::new_checked(&*buf) else { return false };
        let (end, icrc) = (p.icrc_end, p.computed_icrc());
        buf[end - ICRC_LEN..end].copy_from_slice(&crate::Icrc::wire_bytes(icrc));
        let v = vcrc::vcrc(&buf[..end]);
        buf[end..end + 2].copy_from_slice(&vcrc::wire_bytes(v));
        true
    }
}

/// An owned native IB header stack. The LRH's LNH is derived from whether a
/// GRH is present, and the GRH's next header is set to 0x1B, on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IbRepr {
    pub lrh: LrhRepr,
    pub grh: Option<GrhRepr>,
    pub transport: TransportRepr,
}

impl IbRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &IbPacket<T>) -> Result<IbRepr> {
        Ok(IbRepr {
            lrh: LrhRepr::parse(&p.lrh())?.0,
            grh: match p.grh() {
                Some(g) => Some(GrhRepr::parse(&g)?.0),
                None => None,
            },
            transport: TransportRepr::parse(&p.transport())?,
        })
    }

    /// Bytes from the LRH through the VCRC.
    pub fn buffer_len(&self, payload_len: usize) -> Result<usize> {
        let grh = if self.grh.is_some() { Grh::<&[u8]>::LEN } else { 0 };
        Ok(Lrh::<&[u8]>::LEN + grh + self.transport.packet_len(payload_len)? + VCRC_LEN)
    }

    /// Offset of the payload in the emitted packet.
    pub fn payload_offset(&self) -> Result<usize> {
        let grh = if self.grh.is_some() { Grh::<&[u8]>::LEN } else { 0 };
        Ok(Lrh::<&[u8]>::LEN + grh + self.transport.header_len()?)
    }

    /// Writes the LRH through the VCRC, computing both CRCs.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize> {
        let at = self.payload_offset()?;
        let total = self.buffer_len(payload.len())?;
        if buf.len() < total {
            return Err(Error::BufferTooSmall { needed: total, available: buf.len() });
        }
        buf[at..at + payload.len()].copy_from_slice(payload);
        self.emit_in_place(buf, payload.len())
    }

    /// Writes the LRH, GRH, transport headers, pad, ICRC and VCRC around
    /// `payload_len` bytes of payload already at [`Self::payload_offset`]
    /// in `buf`. Returns the packet's length (through the VCRC).
    pub fn emit_in_place(&self, buf: &mut [u8], payload_len: usize) -> Result<usize> {
        let total = self.buffer_len(payload_len)?;
        if buf.len() < total {
            return Err(Error::BufferTooSmall { needed: total, available: buf.len() });
        }
        let icrc_end = total - VCRC_LEN;
        let lnh = if self.grh.is_some() { Lnh::IbaGlobal } else { Lnh::IbaLocal };
        LrhRepr { lnh, ..self.lrh }.emit(buf, icrc_end)?;
        let mut t = Lrh::<&[u8]>::LEN;
        if let Some(g) = &self.grh {
            GrhRepr { next_header: NEXT_HEADER_IBA, ..*g }.emit(&mut buf[t..], icrc_end - t - Grh::<&[u8]>::LEN)?;
            t += Grh::<&[u8]>::LEN;
        }
        let hdr = self.transport.emit_headers(&mut buf[t..], payload_len)?;
        let end = t + hdr + payload_len;
        let end = finish_with_icrc(buf, end, payload_len, |b| crate::icrc::ib(b).expect("headers written"));
        debug_assert_eq!(end, icrc_end);
        let v = vcrc::vcrc(&buf[..icrc_end]);
        buf[icrc_end..total].copy_from_slice(&vcrc::wire_bytes(v));
        Ok(total)
    }
}
