//! Local Route Header (IBTA 7.7): the 8-byte link header of a native
//! InfiniBand packet.

use crate::error::check_len;
use crate::field::*;
use crate::{Error, Result};

header_view!(
    /// A view of an LRH.
    Lrh, 8, "LRH"
);

/// Link Next Header: what follows the LRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lnh {
    /// 0b00: raw packet (non-IBA transport).
    Raw,
    /// 0b01: raw IPv6.
    RawIpv6,
    /// 0b10: IBA local: the BTH follows.
    IbaLocal,
    /// 0b11: IBA global: a GRH, then the BTH.
    IbaGlobal,
}

impl Lnh {
    pub const fn from_bits(b: u8) -> Lnh {
        match b & 3 {
            0 => Lnh::Raw,
            1 => Lnh::RawIpv6,
            2 => Lnh::IbaLocal,
            _ => Lnh::IbaGlobal,
        }
    }
    pub const fn bits(self) -> u8 {
        match self {
            Lnh::Raw => 0,
            Lnh::RawIpv6 => 1,
            Lnh::IbaLocal => 2,
            Lnh::IbaGlobal => 3,
        }
    }
}

impl<T: AsRef<[u8]>> Lrh<T> {
    /// Virtual lane (15 is the management lane).
    pub fn vl(&self) -> u8 {
        self.b()[0] >> 4
    }
    /// Link version; must be 0.
    pub fn lver(&self) -> u8 {
        self.b()[0] & 0x0f
    }
    /// Service level.
    pub fn sl(&self) -> u8 {
        self.b()[1] >> 4
    }
    pub fn lnh(&self) -> Lnh {
        Lnh::from_bits(self.b()[1])
    }
    pub fn dlid(&self) -> u16 {
        u16_at(self.b(), 2)
    }
    /// Packet length in 4-byte words, from the LRH through the ICRC (the
    /// VCRC is not counted).
    pub fn pkt_len(&self) -> u16 {
        u16_at(self.b(), 4) & 0x07ff
    }
    pub fn slid(&self) -> u16 {
        u16_at(self.b(), 6)
    }
}

/// An owned LRH; the packet length is derived on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LrhRepr {
    pub vl: u8,
    pub sl: u8,
    pub lnh: Lnh,
    pub dlid: u16,
    pub slid: u16,
}

impl LrhRepr {
    /// Reads an LRH; returns it and the packet length in bytes (LRH through
    /// ICRC) that its PktLen field gives.
    pub fn parse<T: AsRef<[u8]>>(h: &Lrh<T>) -> Result<(LrhRepr, usize)> {
        if h.lver() != 0 {
            return Err(Error::BadVersion { header: "LRH", version: h.lver() });
        }
        let len = usize::from(h.pkt_len()) * 4;
        Ok((LrhRepr { vl: h.vl(), sl: h.sl(), lnh: h.lnh(), dlid: h.dlid(), slid: h.slid() }, len))
    }

    /// Writes the LRH for a packet of `packet_len` bytes from the LRH
    /// through the ICRC; the length must be a multiple of four.
    pub fn emit(&self, buf: &mut [u8], packet_len: usize) -> Result<()> {
        check_len("LRH", buf, 8)?;
        if packet_len % 4 != 0 || packet_len / 4 > 0x7ff {
            return Err(Error::InvalidField { header: "LRH", field: "PktLen", value: packet_len as u64 });
        }
        buf[0] = self.vl << 4;
        buf[1] = (self.sl << 4) | self.lnh.bits();
        set_u16(buf, 2, self.dlid);
        set_u16(buf, 4, (packet_len / 4) as u16);
        set_u16(buf, 6, self.slid);
        Ok(())
    }
}
