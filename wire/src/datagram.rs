//! A RoCE v2 packet as a UDP socket hands it up: the kernel has taken off
//! the IP and UDP headers (and checked them), the packet starts at its
//! BTH, and the fields of those headers that the transport needs come as
//! typed values beside it ([`DatagramHeaders`]), the way quinn-udp passes
//! its receive metadata. Nothing makes the headers up again to parse them:
//! the ICRC is computed from these values ([`crate::icrc::roce_v2_datagram`]),
//! and [`DatagramHeaders::emit`] writes real headers only where a person or
//! a consumer sees them (a capture file, the 40 bytes in front of a UD
//! receive, which carry the IP header as on rxe).

use crate::error::{check_len, Error};
use crate::udp::ROCE_V2_PORT;
use crate::Result;
use core::net::{IpAddr, SocketAddr};

const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;

/// What a UDP socket reports of a received RoCE v2 packet besides its
/// bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DatagramHeaders {
    /// The sender's address and UDP source port.
    pub src: SocketAddr,
    /// The address it was sent to: the device's, or the multicast group
    /// it was sent to. Its family is the socket's, which the headers take
    /// for the packet's: an IPv4 sender reported on an IPv6 socket (an
    /// IPv4-mapped address) is written as IPv6.
    pub dst: IpAddr,
    /// The IPv4 TOS / IPv6 traffic class (DSCP and ECN) it arrived with.
    pub traffic_class: u8,
    /// The IPv4 TTL / IPv6 hop limit it arrived with.
    pub hop_limit: u8,
}

/// How the IP and UDP headers are written: as on the wire, or with the
/// fields the ICRC does not cover set to ones (IBTA A17.4.2).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Wire,
    IcrcMasked,
}

impl DatagramHeaders {
    /// Bytes of the IP header: 20 (IPv4, no options) or 40 (IPv6).
    pub fn ip_header_len(&self) -> usize {
        if self.dst.is_ipv4() {
            IPV4_LEN
        } else {
            IPV6_LEN
        }
    }

    /// Bytes of the IP and UDP headers.
    pub fn headers_len(&self) -> usize {
        self.ip_header_len() + UDP_LEN
    }

    /// The ECN bits it arrived with.
    pub fn ecn(&self) -> u8 {
        self.traffic_class & 3
    }

    /// The sender's address as the transport compares it with a GID: an
    /// IPv4-mapped IPv6 address is the IPv4 address.
    pub fn source(&self) -> IpAddr {
        self.src.ip().to_canonical()
    }

    /// Checks that headers of this family carry a packet of `packet_len`
    /// bytes (BTH through ICRC): an IPv6 sender cannot come through an
    /// IPv4 socket, and the lengths must fit their fields. Returns the
    /// UDP length.
    pub fn check(&self, packet_len: usize) -> Result<u16> {
        if self.dst.is_ipv4() && self.src.is_ipv6() {
            return Err(Error::InvalidField { header: "IPv4", field: "source address family", value: 6 });
        }
        let ip_len = if self.dst.is_ipv4() { IPV4_LEN } else { 0 };
        packet_len
            .checked_add(UDP_LEN + ip_len)
            .and_then(|l| u16::try_from(l).ok())
            .map(|l| l - ip_len as u16)
            .ok_or(Error::PayloadTooLarge(packet_len))
    }

    /// Writes the IPv4 (DF set, Identification 0, no options) or IPv6
    /// header and the UDP header (checksum 0) of a packet of `packet_len`
    /// bytes after UDP, with the traffic class and hop limit it arrived
    /// with, into the start of `out`. Returns the bytes written.
    ///
    /// The Identification a UDP socket does not report is written as 0,
    /// which is what a sender with DF set and no fragmentation usually
    /// puts there; a receiver that must know it recovers it from the
    /// ICRC ([`crate::IdentRecovery`]).
    pub fn emit(&self, packet_len: usize, out: &mut [u8]) -> Result<usize> {
        self.write(packet_len, out, Form::Wire)
    }

    pub(crate) fn write(&self, packet_len: usize, out: &mut [u8], form: Form) -> Result<usize> {
        let udp_len = self.check(packet_len)?;
        let hl = self.headers_len();
        check_len("IP and UDP headers", out, hl)?;
        let masked = form == Form::IcrcMasked;
        let (tos, ttl) = if masked { (0xff, 0xff) } else { (self.traffic_class, self.hop_limit) };
        let (ip, udp) = out[..hl].split_at_mut(hl - UDP_LEN);
        match (self.src.ip(), self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                ip[0] = 0x45;
                ip[1] = tos;
                ip[2..4].copy_from_slice(&(udp_len + IPV4_LEN as u16).to_be_bytes());
                ip[4..6].copy_from_slice(&[0, 0]);
                ip[6..8].copy_from_slice(&[0x40, 0]);
                ip[8] = ttl;
                ip[9] = 17;
                ip[12..16].copy_from_slice(&s.octets());
                ip[16..20].copy_from_slice(&d.octets());
                if masked {
                    ip[10..12].copy_from_slice(&[0xff, 0xff]);
                } else {
                    ip[10..12].copy_from_slice(&[0, 0]);
                    let sum = crate::ipv4::checksum(&ip[..IPV4_LEN]);
                    ip[10..12].copy_from_slice(&sum.to_be_bytes());
                }
            }
            (s, d) => {
                let v6 = |a: IpAddr| match a {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                    IpAddr::V6(v6) => v6,
                };
                let first: [u8; 4] =
                    if masked { [0x6f, 0xff, 0xff, 0xff] } else { [0x60 | (tos >> 4), tos << 4, 0, 0] };
                ip[0..4].copy_from_slice(&first);
                ip[4..6].copy_from_slice(&udp_len.to_be_bytes());
                ip[6] = 17;
                ip[7] = ttl;
                ip[8..24].copy_from_slice(&v6(s).octets());
                ip[24..40].copy_from_slice(&v6(d).octets());
            }
        }
        udp[0..2].copy_from_slice(&self.src.port().to_be_bytes());
        udp[2..4].copy_from_slice(&ROCE_V2_PORT.to_be_bytes());
        udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
        udp[6..8].copy_from_slice(if masked { &[0xff, 0xff] } else { &[0, 0] });
        Ok(hl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Ipv4, Ipv6, Udp};

    fn headers(src: &str, dst: &str) -> DatagramHeaders {
        DatagramHeaders { src: src.parse().unwrap(), dst: dst.parse().unwrap(), traffic_class: 0x8b, hop_limit: 63 }
    }

    #[test]
    fn emitted_headers_parse_back_to_the_values() {
        let h = headers("10.0.0.2:49152", "10.0.0.1");
        let mut out = [0u8; 28];
        assert_eq!(h.emit(100, &mut out), Ok(28));
        let ip = Ipv4::new_checked(&out[..]).unwrap();
        assert!(ip.checksum_ok());
        assert_eq!((ip.src().to_string(), ip.dst().to_string()), ("10.0.0.2".into(), "10.0.0.1".into()));
        assert_eq!((ip.ecn(), out[1], out[8]), (3, 0x8b, 63));
        assert_eq!(usize::from(u16::from_be_bytes([out[2], out[3]])), 128);
        let udp = Udp::new_checked(&out[20..]).unwrap();
        assert_eq!((udp.src_port(), udp.dst_port(), usize::from(udp.len())), (49152, ROCE_V2_PORT, 108));

        let h = headers("10.0.0.2:1", "::ffff:10.0.0.1");
        let mut out = [0u8; 48];
        assert_eq!(h.emit(100, &mut out), Ok(48));
        let ip = Ipv6::new_checked(&out[..]).unwrap();
        assert_eq!((ip.traffic_class(), ip.hop_limit()), (0x8b, 63));
        assert_eq!(ip.src().to_string(), "::ffff:10.0.0.2", "an IPv4 sender on an IPv6 socket is mapped");
        assert_eq!(h.source().to_string(), "10.0.0.2");
    }

    #[test]
    fn what_no_header_can_carry_is_refused() {
        let mut out = [0u8; 48];
        assert!(headers("[fd00::2]:1", "10.0.0.1").emit(100, &mut out).is_err(), "IPv6 sender, IPv4 socket");
        assert_eq!(headers("10.0.0.2:1", "10.0.0.1").emit(65_507, &mut out), Ok(28));
        assert_eq!(headers("10.0.0.2:1", "10.0.0.1").emit(65_508, &mut out), Err(Error::PayloadTooLarge(65_508)));
        assert_eq!(headers("[fd00::2]:1", "fd00::1").emit(65_527, &mut out), Ok(48));
        assert!(headers("[fd00::2]:1", "fd00::1").emit(65_528, &mut out).is_err());
        assert!(headers("[fd00::2]:1", "fd00::1").emit(10, &mut out[..47]).is_err(), "a short buffer");
    }
}
