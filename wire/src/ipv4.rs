//! IPv4 as RoCE v2 carries it: a 20-byte header, no options, no fragments.

use crate::error::check_len;
use crate::field::*;
use crate::{Error, Result};
use core::net::Ipv4Addr;

/// IP protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;

header_view!(
    /// A view of an IPv4 header.
    Ipv4, 20, "IPv4"
);

impl<T: AsRef<[u8]>> Ipv4<T> {
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }
    /// Header length in bytes (IHL x 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[0] & 0x0f) * 4
    }
    pub fn dscp(&self) -> u8 {
        self.b()[1] >> 2
    }
    pub fn ecn(&self) -> u8 {
        self.b()[1] & 0x3
    }
    pub fn total_len(&self) -> u16 {
        u16_at(self.b(), 2)
    }
    pub fn ident(&self) -> u16 {
        u16_at(self.b(), 4)
    }
    pub fn dont_frag(&self) -> bool {
        self.b()[6] & 0x40 != 0
    }
    pub fn more_frags(&self) -> bool {
        self.b()[6] & 0x20 != 0
    }
    pub fn frag_offset(&self) -> u16 {
        u16_at(self.b(), 6) & 0x1fff
    }
    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }
    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }
    pub fn checksum(&self) -> u16 {
        u16_at(self.b(), 10)
    }
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32_at(self.b(), 12))
    }
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32_at(self.b(), 16))
    }
    /// Whether the header checksum is right.
    pub fn checksum_ok(&self) -> bool {
        checksum(&self.b()[..Self::LEN]) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4<T> {
    /// Recomputes the header checksum.
    pub fn fill_checksum(&mut self) {
        set_u16(self.bm(), 10, 0);
        let c = checksum(&self.b()[..Self::LEN]);
        set_u16(self.bm(), 10, c);
    }
}

/// The Internet checksum (RFC 1071) of `data`, summed four bytes at a time.
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum = 0u64;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        sum += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let mut tail = words.remainder().chunks_exact(2);
    for c in &mut tail {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = tail.remainder() {
        sum += u64::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An owned IPv4 header. The total length and the checksum are not kept:
/// they are derived from the payload when the header is emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    pub dscp: u8,
    /// The two ECN bits (0b11 = congestion experienced).
    pub ecn: u8,
    /// Identification. Covered by the ICRC; kernel Soft-RoCE sets it nonzero.
    pub ident: u16,
    pub dont_frag: bool,
    pub ttl: u8,
    pub protocol: u8,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
}

impl<T: AsRef<[u8]>> Ipv4<T> {
    /// Checks what [`Ipv4Repr::parse`] checks without building the
    /// representation: version 4, no options, a total length that fits,
    /// not a fragment, a good checksum. Returns the payload length.
    pub fn check(&self) -> Result<usize> {
        if self.version() != 4 {
            return Err(Error::BadVersion { header: "IPv4", version: self.version() });
        }
        if self.header_len() != Self::LEN {
            return Err(Error::InvalidField {
                header: "IPv4",
                field: "IHL (options are not used by RoCE)",
                value: self.header_len() as u64 / 4,
            });
        }
        let total = usize::from(self.total_len());
        if total < Self::LEN || total > self.b().len() {
            return Err(Error::LengthMismatch { header: "IPv4", claimed: total, actual: self.b().len() });
        }
        if self.more_frags() || self.frag_offset() != 0 {
            return Err(Error::InvalidField {
                header: "IPv4",
                field: "fragment",
                value: u64::from(u16_at(self.b(), 6)),
            });
        }
        if !self.checksum_ok() {
            return Err(Error::InvalidField {
                header: "IPv4",
                field: "header checksum",
                value: u64::from(self.checksum()),
            });
        }
        Ok(total - Self::LEN)
    }
}

impl Ipv4Repr {
    /// Reads a header, checking version, length fields, checksum and that
    /// the packet is not a fragment (see [`Ipv4::check`]). Returns the
    /// header and the payload length its total-length field gives.
    pub fn parse<T: AsRef<[u8]>>(h: &Ipv4<T>) -> Result<(Ipv4Repr, usize)> {
        let payload_len = h.check()?;
        let repr = Ipv4Repr {
            dscp: h.dscp(),
            ecn: h.ecn(),
            ident: h.ident(),
            dont_frag: h.dont_frag(),
            ttl: h.ttl(),
            protocol: h.protocol(),
            src: h.src(),
            dst: h.dst(),
        };
        Ok((repr, payload_len))
    }

    /// Writes the 20-byte header for `payload_len` bytes of payload,
    /// checksum included.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<()> {
        check_len("IPv4", buf, Ipv4::<&[u8]>::LEN)?;
        let total = payload_len + Ipv4::<&[u8]>::LEN;
        let total = u16::try_from(total).map_err(|_| Error::PayloadTooLarge(payload_len))?;
        buf[0] = 0x45;
        buf[1] = (self.dscp << 2) | (self.ecn & 3);
        set_u16(buf, 2, total);
        set_u16(buf, 4, self.ident);
        set_u16(buf, 6, if self.dont_frag { 0x4000 } else { 0 });
        buf[8] = self.ttl;
        buf[9] = self.protocol;
        set_u32(buf, 12, self.src.into());
        set_u32(buf, 16, self.dst.into());
        Ipv4::new_unchecked(&mut buf[..20]).fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The IPv4 header of rc_pingpong.pcap frame 11 (kernel Soft-RoCE).
    const HDR: &str = "4500042c954a400040118cc60a4d000c0a4d000b";

    #[test]
    fn parses_and_re_emits_a_captured_header() {
        let bytes = hex::decode(HDR).unwrap();
        let mut packet = bytes.clone();
        packet.resize(0x42c, 0);
        let (r, payload_len) = Ipv4Repr::parse(&Ipv4::new_checked(&packet[..]).unwrap()).unwrap();
        assert_eq!(payload_len, 0x42c - 20);
        assert_eq!(r.ident, 0x954a);
        assert!(r.dont_frag);
        assert_eq!(r.ttl, 64);
        assert_eq!(r.src, Ipv4Addr::new(10, 77, 0, 12));
        let mut out = [0u8; 20];
        r.emit(&mut out, payload_len).unwrap();
        assert_eq!(&out[..], &bytes[..]);
    }

    #[test]
    fn rejects_a_bad_checksum() {
        let mut packet = hex::decode(HDR).unwrap();
        packet.resize(0x42c, 0);
        packet[11] ^= 1;
        let err = Ipv4Repr::parse(&Ipv4::new_checked(&packet[..]).unwrap()).unwrap_err();
        assert!(matches!(err, Error::InvalidField { field: "header checksum", .. }), "{err}");
    }

    #[test]
    fn rejects_a_total_length_beyond_the_buffer() {
        let packet = hex::decode(HDR).unwrap();
        let err = Ipv4Repr::parse(&Ipv4::new_checked(&packet[..]).unwrap()).unwrap_err();
        assert_eq!(err, Error::LengthMismatch { header: "IPv4", claimed: 0x42c, actual: 20 });
    }
}
