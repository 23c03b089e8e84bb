//! A capture of the native IB frames a fabric puts on its links (VL15
//! packets and flow-control packets; data frames carry the engine's RoCE
//! packet behind the LRH, see [`super::frame`], and are not captured),
//! written as a pcap of ERF records (link type 197): type 21 for IB
//! packets, type 25 for link packets, as Mellanox's ibdump writes them
//! and tshark reads them (reference §5).

use rdma_transport::Instant;
use std::io::Write;

pub const LINKTYPE_ERF: u32 = 197;
pub const ERF_INFINIBAND: u8 = 21;
pub const ERF_INFINIBAND_LINK: u8 = 25;

/// One captured frame: when it left, which kind, its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    pub at: Instant,
    pub erf_type: u8,
    pub bytes: Vec<u8>,
}

/// Writes `frames` as a pcap of ERF records.
pub fn write_pcap(w: &mut dyn Write, frames: &[Captured]) -> std::io::Result<()> {
    let mut h = Vec::with_capacity(24);
    h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&4u16.to_le_bytes());
    h.extend_from_slice(&0i32.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&65535u32.to_le_bytes());
    h.extend_from_slice(&LINKTYPE_ERF.to_le_bytes());
    w.write_all(&h)?;
    for f in frames {
        // tshark 4.0's column code reads a link packet as if it had an LRH
        // and flags a bare 6-byte one malformed before its fields are
        // decoded; padding the record to 128 bytes avoids that (§5).
        let mut bytes = f.bytes.clone();
        if f.erf_type == ERF_INFINIBAND_LINK && bytes.len() < 128 {
            bytes.resize(128, 0);
        }
        let f = Captured { bytes, ..f.clone() };
        let ns = f.at.as_nanos();
        let (secs, sub) = (ns / 1_000_000_000, ns % 1_000_000_000);
        // ERF timestamp: seconds in the high 32 bits, a binary fraction below.
        let frac = (u128::from(sub) << 32) / 1_000_000_000;
        let mut rec = Vec::with_capacity(16 + f.bytes.len());
        rec.extend_from_slice(&((secs << 32) | frac as u64).to_le_bytes());
        rec.push(f.erf_type);
        rec.push(0x04); // flags: varying record length
        rec.extend_from_slice(&((16 + f.bytes.len()) as u16).to_be_bytes());
        rec.extend_from_slice(&0u16.to_be_bytes());
        rec.extend_from_slice(&(f.bytes.len() as u16).to_be_bytes());
        rec.extend_from_slice(&f.bytes);
        let mut p = Vec::with_capacity(16);
        p.extend_from_slice(&(secs as u32).to_le_bytes());
        p.extend_from_slice(&((sub / 1000) as u32).to_le_bytes());
        p.extend_from_slice(&(rec.len() as u32).to_le_bytes());
        p.extend_from_slice(&(rec.len() as u32).to_le_bytes());
        w.write_all(&p)?;
        w.write_all(&rec)?;
    }
    Ok(())
}
