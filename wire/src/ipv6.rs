//! The IPv6 header, which is also the InfiniBand GRH: IBTA 8.3 gives the
//! GRH exactly the IPv6 layout (IPVer, TClass, FlowLabel, PayLen, NxtHdr,
//! HopLmt, SGID, DGID), so one view and one representation serve both.

use crate::error::check_len;
use crate::field::*;
use crate::{Error, Result};
use core::net::Ipv6Addr;

/// Next-header value of the IB transport behind a GRH (IBTA 8.3.1).
pub const NEXT_HEADER_IBA: u8 = 0x1b;
/// Next-header value of UDP behind an IPv6 header.
pub const NEXT_HEADER_UDP: u8 = 17;

header_view!(
    /// A view of an IPv6 header or a GRH.
    Ipv6, 40, "IPv6/GRH"
);

/// The GRH is an IPv6 header in all but its next-header value.
pub type Grh<T> = Ipv6<T>;
/// An owned GRH.
pub type GrhRepr = Ipv6Repr;

impl<T: AsRef<[u8]>> Ipv6<T> {
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }
    pub fn traffic_class(&self) -> u8 {
        ((u16_at(self.b(), 0) >> 4) & 0xff) as u8
    }
    pub fn flow_label(&self) -> u32 {
        u32_at(self.b(), 0) & 0x000f_ffff
    }
    pub fn payload_len(&self) -> u16 {
        u16_at(self.b(), 4)
    }
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }
    pub fn src(&self) -> Ipv6Addr {
        Ipv6Addr::from(addr_at(self.b(), 8))
    }
    pub fn dst(&self) -> Ipv6Addr {
        Ipv6Addr::from(addr_at(self.b(), 24))
    }
}

fn addr_at(b: &[u8], at: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    a
}

/// An owned IPv6 header or GRH; the payload length is derived on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    pub traffic_class: u8,
    pub flow_label: u32,
    pub next_header: u8,
    pub hop_limit: u8,
    /// Source address (the SGID in a GRH).
    pub src: Ipv6Addr,
    /// Destination address (the DGID in a GRH).
    pub dst: Ipv6Addr,
}

impl Ipv6Repr {
    /// Reads a header; returns it and the payload length it gives, which
    /// must fit the buffer. The IP version must be 6.
    pub fn parse<T: AsRef<[u8]>>(h: &Ipv6<T>) -> Result<(Ipv6Repr, usize)> {
        if h.version() != 6 {
            return Err(Error::BadVersion { header: Ipv6::<T>::NAME, version: h.version() });
        }
        let payload = usize::from(h.payload_len());
        let available = h.b().len() - Ipv6::<T>::LEN;
        if payload > available {
            return Err(Error::LengthMismatch { header: Ipv6::<T>::NAME, claimed: payload, actual: available });
        }
        Ok((
            Ipv6Repr {
                traffic_class: h.traffic_class(),
                flow_label: h.flow_label(),
                next_header: h.next_header(),
                hop_limit: h.hop_limit(),
                src: h.src(),
                dst: h.dst(),
            },
            payload,
        ))
    }

    /// Writes the 40-byte header for `payload_len` bytes of payload.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<()> {
        check_len(Ipv6::<&[u8]>::NAME, buf, Ipv6::<&[u8]>::LEN)?;
        let len = u16::try_from(payload_len).map_err(|_| Error::PayloadTooLarge(payload_len))?;
        let word0 = (6u32 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & 0x000f_ffff);
        set_u32(buf, 0, word0);
        set_u16(buf, 4, len);
        buf[6] = self.next_header;
        buf[7] = self.hop_limit;
        buf[8..24].copy_from_slice(&self.src.octets());
        buf[24..40].copy_from_slice(&self.dst.octets());
        Ok(())
    }
}
