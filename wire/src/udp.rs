//! UDP as RoCE v2 uses it: destination port 4791, checksum usually zero.

use crate::error::check_len;
use crate::field::*;
use crate::{Error, Result};

/// The IANA port of RoCE v2.
pub const ROCE_V2_PORT: u16 = 4791;

header_view!(
    /// A view of a UDP header.
    Udp, 8, "UDP"
);

impl<T: AsRef<[u8]>> Udp<T> {
    pub fn src_port(&self) -> u16 {
        u16_at(self.b(), 0)
    }
    pub fn dst_port(&self) -> u16 {
        u16_at(self.b(), 2)
    }
    /// The length field: header plus payload, in bytes.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        u16_at(self.b(), 4)
    }
    pub fn checksum(&self) -> u16 {
        u16_at(self.b(), 6)
    }
}

/// An owned UDP header. The length is derived on emit; the checksum is kept
/// as it was (RoCE v2 senders put 0 there, IPv6 included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Per-QP entropy (0xC000..=0xFFFF from kernel Soft-RoCE).
    pub src_port: u16,
    pub dst_port: u16,
    pub checksum: u16,
}

impl UdpRepr {
    /// Reads a header; returns it and the payload length its length field
    /// gives, which must fit the buffer.
    pub fn parse<T: AsRef<[u8]>>(h: &Udp<T>) -> Result<(UdpRepr, usize)> {
        let len = usize::from(h.len());
        if len < Udp::<T>::LEN || len > h.b().len() {
            return Err(Error::LengthMismatch { header: "UDP", claimed: len, actual: h.b().len() });
        }
        Ok((UdpRepr { src_port: h.src_port(), dst_port: h.dst_port(), checksum: h.checksum() }, len - Udp::<T>::LEN))
    }

    /// Writes the 8-byte header for `payload_len` bytes of payload.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<()> {
        check_len("UDP", buf, Udp::<&[u8]>::LEN)?;
        let len = u16::try_from(payload_len + 8).map_err(|_| Error::PayloadTooLarge(payload_len))?;
        set_u16(buf, 0, self.src_port);
        set_u16(buf, 2, self.dst_port);
        set_u16(buf, 4, len);
        set_u16(buf, 6, self.checksum);
        Ok(())
    }
}
