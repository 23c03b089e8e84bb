//! The Invariant CRC (IBTA 7.8.1 and the RoCE v2 annex A17.4.2).
//!
//! The ICRC is the Ethernet CRC-32 (reflected polynomial 0xEDB88320, initial
//! value all ones, final complement) over every byte of the packet that no
//! switch or router may change, with the variant fields replaced by ones:
//!
//! | packet | bytes hashed, in order |
//! |---|---|
//! | IB local (LNH=2) | LRH with VL set to 0xF, BTH with byte 4 set to 0xFF, rest |
//! | IB global (LNH=3) | 8 x 0xFF for the LRH, GRH with TClass, FlowLabel and HopLmt set to ones, BTH (byte 4 = 0xFF), rest |
//! | RoCE v1 | as IB global: 8 x 0xFF, masked GRH, masked BTH, rest |
//! | RoCE v2 / IPv4 | 8 x 0xFF, IPv4 header with TOS, TTL and checksum set to ones, UDP header with checksum set to ones, masked BTH, rest |
//! | RoCE v2 / IPv6 | 8 x 0xFF, IPv6 header with traffic class, flow label and hop limit set to ones, UDP with checksum set to ones, masked BTH, rest |
//!
//! "Rest" is every extension header, the payload and the pad bytes. The
//! value goes on the wire least-significant byte first. These rules were
//! checked on every RoCE packet of the kernel Soft-RoCE captures in
//! `tests/fixtures/golden` (see its README).
//!
//! [`Icrc`] hashes the masked headers from a small stack copy and then
//! streams the rest, so a packet is emitted and its ICRC computed in one pass
//! over the payload.

use crate::bth::BTH_VARIANT_BYTE;
use crate::datagram::{DatagramHeaders, Form};
use crate::error::check_len;
use crate::lrh::Lnh;
use crate::Result;

const BTH_LEN: usize = 12;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;
const LRH_LEN: usize = 8;
/// The ICRC field itself.
const ICRC_BYTES: usize = 4;

/// A fresh CRC-32 hasher. `crc32fast::Hasher::new` looks up the CPU's
/// features on every call; a clone of one made once does not, and short
/// packets (ACKs) make that lookup a noticeable part of their cost.
fn hasher() -> crc32fast::Hasher {
    static PROTOTYPE: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    PROTOTYPE.get_or_init(crc32fast::Hasher::new).clone()
}

/// A running ICRC computation.
#[derive(Clone)]
pub struct Icrc {
    hasher: crc32fast::Hasher,
}

impl core::fmt::Debug for Icrc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Icrc").finish_non_exhaustive()
    }
}

/// Room for the largest masked header stack: 8 bytes standing in for the
/// LRH, an IPv6 header or GRH, UDP, BTH.
const MASKED_MAX: usize = LRH_LEN + IPV6_LEN + UDP_LEN + BTH_LEN;

/// The masked headers of a packet, ready to hash, and how many bytes of
/// the packet they stand for.
struct Masked {
    bytes: [u8; MASKED_MAX],
    len: usize,
    consumed: usize,
}

/// Sets the variant fields of an IPv6 header or GRH to ones: traffic class,
/// flow label (the 28 bits after the version) and hop limit.
fn mask_ipv6_like(h: &mut [u8]) {
    h[0] |= 0x0f;
    h[1] = 0xff;
    h[2] = 0xff;
    h[3] = 0xff;
    h[7] = 0xff;
}

fn mask_bth(bth: &mut [u8]) {
    bth[BTH_VARIANT_BYTE] = 0xff;
}

/// RoCE v2: `headers` starts at the IP header.
fn masked_roce_v2(headers: &[u8]) -> Result<Masked> {
    check_len("IP", headers, 1)?;
    let ip_len = if headers[0] >> 4 == 6 { IPV6_LEN } else { IPV4_LEN };
    let consumed = ip_len + UDP_LEN + BTH_LEN;
    check_len("RoCE v2 headers", headers, consumed)?;
    let mut bytes = [0xffu8; MASKED_MAX];
    let body = &mut bytes[LRH_LEN..LRH_LEN + consumed];
    body.copy_from_slice(&headers[..consumed]);
    if ip_len == IPV4_LEN {
        body[1] = 0xff; // TOS (DSCP and ECN)
        body[8] = 0xff; // TTL
        body[10] = 0xff; // header checksum
        body[11] = 0xff;
    } else {
        mask_ipv6_like(body);
    }
    body[ip_len + 6] = 0xff; // UDP checksum
    body[ip_len + 7] = 0xff;
    mask_bth(&mut body[ip_len + UDP_LEN..]);
    Ok(Masked { bytes, len: LRH_LEN + consumed, consumed })
}

/// RoCE v1, or a global IB packet after its LRH: `headers` starts at the GRH.
fn masked_global(headers: &[u8]) -> Result<Masked> {
    let consumed = IPV6_LEN + BTH_LEN;
    check_len("GRH headers", headers, consumed)?;
    let mut bytes = [0xffu8; MASKED_MAX];
    bytes[LRH_LEN..LRH_LEN + consumed].copy_from_slice(&headers[..consumed]);
    mask_ipv6_like(&mut bytes[LRH_LEN..]);
    mask_bth(&mut bytes[LRH_LEN + IPV6_LEN..]);
    Ok(Masked { bytes, len: LRH_LEN + consumed, consumed })
}

/// Native IB: `headers` starts at the LRH.
fn masked_ib(headers: &[u8]) -> Result<Masked> {
    check_len("LRH", headers, LRH_LEN)?;
    if Lnh::from_bits(headers[1]) == Lnh::IbaGlobal {
        let mut m = masked_global(&headers[LRH_LEN..])?;
        m.consumed += LRH_LEN;
        return Ok(m);
    }
    let consumed = LRH_LEN + BTH_LEN;
    check_len("IB headers", headers, consumed)?;
    let mut bytes = [0u8; MASKED_MAX];
    bytes[..consumed].copy_from_slice(&headers[..consumed]);
    bytes[0] |= 0xf0; // VL
    mask_bth(&mut bytes[LRH_LEN..]);
    Ok(Masked { bytes, len: consumed, consumed })
}

/// The ICRC of a packet whose headers are masked in `m` and whose bytes
/// after them are `packet[m.consumed..]`.
///
/// Why the stack block: crc32fast (1.5) folds inputs of 128 bytes and more
/// four 16-byte lanes at a time, shorter ones one lane at a time, and a
/// tail under 16 bytes with a table. The masked headers are too short for
/// the fast kernel on their own, so the first bytes after them are copied
/// into the same block to make one kernel-sized call, and the rest of the
/// packet goes in a second one. (Packing a small packet whole into one
/// zero-led block of 16-byte lanes instead measured 28 instructions more
/// per 8-byte SEND, so small packets take two plain calls.)
fn whole(m: Masked, packet: &[u8]) -> u32 {
    const BLOCK: usize = 192;
    const KERNEL_MIN: usize = 128; // below this crc32fast folds one lane at a time
    let rest = &packet[m.consumed..];
    let mut hasher = hasher();
    if m.len + rest.len() < KERNEL_MIN {
        // An ACK or a small message: nothing to gain from the block copy.
        hasher.update(&m.bytes[..m.len]);
        hasher.update(rest);
        return hasher.finalize();
    }
    let mut block = [0u8; BLOCK];
    block[..m.len].copy_from_slice(&m.bytes[..m.len]);
    let take = rest.len().min(BLOCK - m.len);
    block[m.len..m.len + take].copy_from_slice(&rest[..take]);
    hasher.update(&block[..m.len + take]);
    hasher.update(&rest[take..]);
    hasher.finalize()
}

impl Icrc {
    fn over(m: Masked) -> Icrc {
        let mut hasher = hasher();
        hasher.update(&m.bytes[..m.len]);
        Icrc { hasher }
    }

    /// Starts the ICRC of a RoCE v2 packet. `headers` begins at the IP
    /// header (IPv4 without options, or IPv6) and holds at least the IP,
    /// UDP and BTH headers; those are hashed masked, and nothing after the
    /// BTH is consumed. Feed the rest with [`Icrc::update`].
    pub fn begin_roce_v2(headers: &[u8]) -> Result<Icrc> {
        Ok(Icrc::over(masked_roce_v2(headers)?))
    }

    /// Starts the ICRC of a native InfiniBand packet. `headers` begins at
    /// the LRH and holds the LRH, the GRH if the LRH says one follows, and
    /// the BTH.
    pub fn begin_ib(headers: &[u8]) -> Result<Icrc> {
        Ok(Icrc::over(masked_ib(headers)?))
    }

    /// Starts the ICRC of a RoCE v1 packet (or of the part of a global IB
    /// packet after its LRH). `headers` begins at the GRH and holds the GRH
    /// and the BTH.
    pub fn begin_global(headers: &[u8]) -> Result<Icrc> {
        Ok(Icrc::over(masked_global(headers)?))
    }

    /// Feeds bytes that the ICRC covers as they are (extension headers,
    /// payload, pad).
    #[inline]
    pub fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    /// The ICRC value. Put it on the wire with [`Icrc::wire_bytes`].
    #[inline]
    pub fn finish(self) -> u32 {
        self.hasher.finalize()
    }

    /// The four bytes an ICRC value occupies on the wire (least significant first).
    #[inline]
    pub const fn wire_bytes(icrc: u32) -> [u8; 4] {
        icrc.to_le_bytes()
    }

    /// Reads an ICRC value from its four wire bytes.
    #[inline]
    pub fn from_wire(bytes: [u8; 4]) -> u32 {
        u32::from_le_bytes(bytes)
    }
}

/// The ICRC of a whole RoCE v2 packet: `l3` runs from the IP header to the
/// last pad byte (the ICRC field itself excluded).
pub fn roce_v2(l3: &[u8]) -> Result<u32> {
    Ok(whole(masked_roce_v2(l3)?, l3))
}

/// The ICRC of a RoCE v2 packet whose payload lies apart from its
/// headers: `headers` runs from the IP header to the end of the transport
/// headers, `payload` is the payload, and the pad (zeros up to a multiple
/// of four bytes) is hashed after it, as a whole packet's would be.
pub fn roce_v2_split(headers: &[u8], payload: &[u8]) -> Result<u32> {
    let m = masked_roce_v2(headers)?;
    let mut hasher = hasher();
    hasher.update(&m.bytes[..m.len]);
    hasher.update(&headers[m.consumed..]);
    hasher.update(payload);
    hasher.update(&[0u8; 3][..crate::bth::pad_for(payload.len())]);
    Ok(hasher.finalize())
}

/// The ICRC of a RoCE v2 packet that came through a UDP socket: its IP
/// and UDP headers as the socket reported them ([`DatagramHeaders`]),
/// `packet` from the BTH to the last pad byte (the ICRC field itself
/// excluded). The same value as [`roce_v2`] over the packet with those
/// headers in front, without writing them.
pub fn roce_v2_datagram(headers: &DatagramHeaders, packet: &[u8]) -> Result<u32> {
    check_len("BTH", packet, BTH_LEN)?;
    let mut bytes = [0xffu8; MASKED_MAX];
    let hl = headers.write(packet.len() + ICRC_BYTES, &mut bytes[LRH_LEN..], Form::IcrcMasked)?;
    let bth = &mut bytes[LRH_LEN + hl..LRH_LEN + hl + BTH_LEN];
    bth.copy_from_slice(&packet[..BTH_LEN]);
    mask_bth(bth);
    Ok(whole(Masked { bytes, len: LRH_LEN + hl + BTH_LEN, consumed: BTH_LEN }, packet))
}

/// The ICRC of a whole native IB packet: `packet` runs from the LRH to the
/// last pad byte.
pub fn ib(packet: &[u8]) -> Result<u32> {
    Ok(whole(masked_ib(packet)?, packet))
}

/// The ICRC of a whole RoCE v1 packet: `packet` runs from the GRH to the
/// last pad byte.
pub fn roce_v1(packet: &[u8]) -> Result<u32> {
    Ok(whole(masked_global(packet)?, packet))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_and_whole_packet_agree_at_every_length() {
        let mut p = vec![0u8; 700];
        p[0] = 0x45;
        for (i, b) in p.iter_mut().enumerate().skip(1) {
            *b = (i * 31 + 7) as u8;
        }
        for end in [40, 41, 60, 100, 127, 128, 191, 192, 193, 250, 700] {
            let mut s = Icrc::begin_roce_v2(&p[..end]).unwrap();
            s.update(&p[40..end]); // IPv4 + UDP + BTH = 40 bytes
            assert_eq!(s.finish(), roce_v2(&p[..end]).unwrap(), "length {end}");
        }
    }
}
