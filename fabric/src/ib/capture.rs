//! A capture of the frames a fabric puts on its IB links (data and VL15
//! packets, flow-control packets), written as a pcap of ERF records by the engine's
//! [`rdma_transport::capture::CaptureWriter`]: type 21 for IB packets,
//! type 25 for link packets, as Mellanox's ibdump writes them and tshark
//! reads them (reference §5).

use rdma_transport::capture::CaptureWriter;
pub use rdma_transport::capture::{ERF_INFINIBAND, ERF_INFINIBAND_LINK};
use rdma_transport::{Instant, LinkKind};
use std::io::Write;
use std::time::Duration;

/// One captured frame: when it left, which kind, its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    pub at: Instant,
    pub erf_type: u8,
    pub bytes: Vec<u8>,
}

/// Writes `frames` as a pcap of ERF records.
pub fn write_pcap(w: &mut dyn Write, frames: &[Captured]) -> std::io::Result<()> {
    let mut out = CaptureWriter::new(w, LinkKind::Ib)?;
    for f in frames {
        out.ib_packet(Duration::from_nanos(f.at.as_nanos()), f.erf_type, &f.bytes)?;
    }
    out.flush()
}
