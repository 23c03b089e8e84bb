//! Ethernet II framing, with at most one 802.1Q tag, as far as captures and
//! raw-socket backends need it.

use crate::error::check_len;
use crate::field::*;
use crate::Result;

pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// RoCE v1: a GRH directly in an Ethernet frame.
pub const ETHERTYPE_ROCE_V1: u16 = 0x8915;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// Native InfiniBand packets (LRH through VCRC) carried in Ethernet frames
/// by the raw-frame backend: the IEEE local experimental EtherType 1.
pub const ETHERTYPE_IB: u16 = 0x88b5;
/// Reserved for emulated IB link-level flow-control packets: local
/// experimental EtherType 2.
pub const ETHERTYPE_IB_LINK: u16 = 0x88b6;

/// An owned Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    /// The 802.1Q tag control information, if the frame is tagged.
    pub vlan_tci: Option<u16>,
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Reads the header of `frame`; returns it and the offset of the payload.
    pub fn parse(frame: &[u8]) -> Result<(EthernetRepr, usize)> {
        check_len("Ethernet", frame, 14)?;
        let mut dst = [0u8; 6];
        let mut src = [0u8; 6];
        dst.copy_from_slice(&frame[0..6]);
        src.copy_from_slice(&frame[6..12]);
        let ethertype = u16_at(frame, 12);
        if ethertype == ETHERTYPE_VLAN {
            check_len("Ethernet 802.1Q", frame, 18)?;
            let repr = EthernetRepr { dst, src, vlan_tci: Some(u16_at(frame, 14)), ethertype: u16_at(frame, 16) };
            return Ok((repr, 18));
        }
        Ok((EthernetRepr { dst, src, vlan_tci: None, ethertype }, 14))
    }

    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        if self.vlan_tci.is_some() {
            18
        } else {
            14
        }
    }

    /// Writes the header; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        check_len("Ethernet", buf, self.header_len())?;
        buf[0..6].copy_from_slice(&self.dst);
        buf[6..12].copy_from_slice(&self.src);
        match self.vlan_tci {
            Some(tci) => {
                set_u16(buf, 12, ETHERTYPE_VLAN);
                set_u16(buf, 14, tci);
                set_u16(buf, 16, self.ethertype);
            }
            None => set_u16(buf, 12, self.ethertype),
        }
        Ok(self.header_len())
    }
}
