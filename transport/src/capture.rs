//! Capture files that Wireshark 4.0 (Debian 12's tshark) decodes, for the
//! three link kinds; one writer shared by the simulator, the frame links'
//! capture wrapper and the fabric.
//!
//! - RoCE v2 and v1: classic pcap of Ethernet frames (LINKTYPE_ETHERNET).
//! - Native IB: classic pcap of LINKTYPE_ERF (197) records, ERF type 21
//!   for a packet from the LRH on (VCRC included) and type 25 for a link
//!   (flow-control) packet, which is what Mellanox's `ibdump` writes.
//!   tshark 4.0 cannot read LINKTYPE_INFINIBAND (247), and decodes 0x88B5
//!   Ethernet frames as GRH-first, which is wrong for LRH-first packets;
//!   ERF it decodes fully.

use crate::LinkKind;
use std::io::{self, Write};
use std::time::Duration;

/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// LINKTYPE_ERF.
pub const LINKTYPE_ERF: u32 = 197;
/// ERF type of an InfiniBand data packet (starting at the LRH).
pub const ERF_INFINIBAND: u8 = 21;
/// ERF type of an InfiniBand link packet (flow control).
pub const ERF_INFINIBAND_LINK: u8 = 25;
/// ERF flag: a variable-length record.
const ERF_FLAG_VLEN: u8 = 0x04;
/// tshark 4.0's column code reads a link packet as if it had an LRH and
/// flags a bare 6-byte one malformed before decoding its fields; link
/// packet records are padded to this length (the reference's §5).
const ERF_LINK_RECORD_MIN: usize = 128;

/// Writes one capture file: Ethernet frames, or ERF records of IB packets.
/// The classic pcap framing (a 24-byte file header, a 16-byte header per
/// record, little-endian, microseconds) is written here directly: the
/// `pcap-file` crate's writer cannot be flushed without being consumed.
pub struct CaptureWriter<W: Write> {
    out: W,
    erf: bool,
    record: Vec<u8>,
}

impl<W: Write> std::fmt::Debug for CaptureWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureWriter").field("erf", &self.erf).finish()
    }
}

impl<W: Write> CaptureWriter<W> {
    /// A capture of a link of `kind` (ERF for native IB, Ethernet
    /// otherwise); the file header is written at once.
    pub fn new(out: W, kind: LinkKind) -> io::Result<CaptureWriter<W>> {
        let erf = kind == LinkKind::Ib;
        let mut out = out;
        let mut h = [0u8; 24];
        h[..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes()); // magic: microseconds
        h[4..6].copy_from_slice(&2u16.to_le_bytes()); // version 2.4
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // zone and sigfigs 0
        h[16..20].copy_from_slice(&65535u32.to_le_bytes()); // snaplen
        h[20..].copy_from_slice(&(if erf { LINKTYPE_ERF } else { LINKTYPE_ETHERNET }).to_le_bytes());
        out.write_all(&h)?;
        Ok(CaptureWriter { out, erf, record: Vec::new() })
    }

    /// Whether records are ERF (a native IB capture).
    pub fn is_erf(&self) -> bool {
        self.erf
    }

    /// Records an Ethernet frame seen `at` (since the Unix epoch, or since
    /// a simulation began). In an ERF capture the frame's IB packet is
    /// recorded, without the 14-byte Ethernet header that carried it.
    pub fn frame(&mut self, at: Duration, frame: &[u8]) -> io::Result<()> {
        if self.erf {
            return self.ib_packet(at, ERF_INFINIBAND, frame.get(14..).unwrap_or_default());
        }
        self.write(at, frame)
    }

    /// Records an IB packet (from the LRH on) as an ERF record of
    /// `erf_type` ([`ERF_INFINIBAND`] or [`ERF_INFINIBAND_LINK`]). Only for
    /// an ERF capture.
    pub fn ib_packet(&mut self, at: Duration, erf_type: u8, packet: &[u8]) -> io::Result<()> {
        debug_assert!(self.erf, "an IB packet in an Ethernet capture");
        let mut rec = std::mem::take(&mut self.record);
        rec.clear();
        let padded = if erf_type == ERF_INFINIBAND_LINK { packet.len().max(ERF_LINK_RECORD_MIN) } else { packet.len() };
        // ERF timestamp: seconds in the high 32 bits, a binary fraction below.
        let frac = (u64::from(at.subsec_nanos()) << 32) / 1_000_000_000;
        rec.extend_from_slice(&((at.as_secs() << 32) | frac).to_le_bytes());
        rec.extend_from_slice(&[erf_type, ERF_FLAG_VLEN]);
        rec.extend_from_slice(&((16 + padded) as u16).to_be_bytes()); // record length
        rec.extend_from_slice(&0u16.to_be_bytes()); // loss counter
        rec.extend_from_slice(&(padded as u16).to_be_bytes()); // wire length
        rec.extend_from_slice(packet);
        rec.resize(16 + padded, 0);
        let r = self.write(at, &rec);
        self.record = rec;
        r
    }

    fn write(&mut self, at: Duration, data: &[u8]) -> io::Result<()> {
        let mut h = [0u8; 16];
        h[..4].copy_from_slice(&(at.as_secs() as u32).to_le_bytes());
        h[4..8].copy_from_slice(&at.subsec_micros().to_le_bytes());
        h[8..12].copy_from_slice(&(data.len() as u32).to_le_bytes()); // captured
        h[12..].copy_from_slice(&(data.len() as u32).to_le_bytes()); // on the wire
        self.out.write_all(&h)?;
        self.out.write_all(data)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The writer, for a test to read back.
    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_erf_record_holds_the_ib_packet_behind_a_16_byte_header() {
        let mut w = CaptureWriter::new(Vec::new(), LinkKind::Ib).unwrap();
        let at = Duration::new(3, 500_000_000);
        w.frame(at, &[[0xaa; 14].as_slice(), &[1, 2, 3, 4]].concat()).unwrap();
        w.ib_packet(at, ERF_INFINIBAND_LINK, &[9; 6]).unwrap();
        let out = w.into_inner();
        assert_eq!(u32::from_le_bytes(out[20..24].try_into().unwrap()), LINKTYPE_ERF);
        // Record 1: pcap header (16), then ERF: ts, type 21, flags, rlen 20, lctr, wlen 4, the packet.
        let r = &out[24 + 16..24 + 16 + 20];
        assert_eq!(u64::from_le_bytes(r[..8].try_into().unwrap()), (3 << 32) | (1 << 31));
        assert_eq!(&r[8..16], &[21, 4, 0, 20, 0, 0, 0, 4]);
        assert_eq!(&r[16..], &[1, 2, 3, 4]);
        // Record 2: a link packet padded to 128 bytes.
        let r = &out[24 + 36 + 16..];
        assert_eq!(&r[8..16], &[25, 4, 0, 144, 0, 0, 0, 128]);
        assert_eq!(&r[16..22], &[9; 6]);
        assert_eq!(r.len(), 144);
    }

    #[test]
    fn roce_captures_are_ethernet_frames() {
        let mut w = CaptureWriter::new(Vec::new(), LinkKind::RoceV1).unwrap();
        w.frame(Duration::from_micros(7), &[5; 60]).unwrap();
        let out = w.into_inner();
        assert_eq!(u32::from_le_bytes(out[20..24].try_into().unwrap()), 1);
        assert_eq!(u32::from_le_bytes(out[24 + 4..24 + 8].try_into().unwrap()), 7, "microseconds");
        assert_eq!(&out[24 + 16..], &[5; 60]);
    }
}
