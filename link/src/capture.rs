//! Capture over any link: every frame the device sends and receives, in a
//! file Wireshark 4.0 (Debian 12's tshark) decodes. On a RoCE v2 (UDP)
//! link, IP packets in made-up Ethernet frames, as [`IpTap`] writes them.
//!
//! The format is the engine's (`rdma_transport::capture`):
//!
//! - RoCE v1: classic pcap of Ethernet frames (LINKTYPE_ETHERNET); tshark
//!   decodes EtherType 0x8915 as RoCE (GRH first).
//! - Native IB: classic pcap of LINKTYPE_ERF (197) records of ERF type 21
//!   (an InfiniBand packet from the LRH on, VCRC included), which is what
//!   Mellanox's `ibdump` writes. tshark 4.0 cannot read
//!   LINKTYPE_INFINIBAND (247), and decodes 0x88B5 frames as GRH-first,
//!   which is wrong for LRH-first packets; ERF it decodes fully.
//!
//! Only frames of the link's EtherType are recorded (an interface also
//! carries ARP, IPv6 neighbour discovery and the like, which are not the
//! device's). Records are buffered, and written out every [`FLUSH_EVERY`]
//! frames, at the end of each burst the driver sends or receives
//! ([`Link::flush`]: a capture is whole on disk as soon as the traffic
//! stops, whoever holds the device then), and when the link is dropped.

use crate::{FrameMeta, Link, LinkCaps, Mac, ETH_HEADER};
use rdma_transport::capture::CaptureWriter;
use rdma_transport::LinkKind;
use std::fs::File;
use std::io::{self, BufWriter};
use std::os::fd::RawFd;
use std::path::Path;
use std::time::SystemTime;

/// Records between flushes.
pub const FLUSH_EVERY: u64 = 64;

/// Writes the records of one capture file (the engine's
/// [`CaptureWriter`], buffered, flushed every [`FLUSH_EVERY`] records).
#[derive(Debug)]
pub struct PcapSink {
    out: CaptureWriter<BufWriter<File>>,
    records: u64,
}

impl PcapSink {
    /// Creates `path` for frames of `kind` (see the module documentation).
    pub fn create(path: &Path, kind: LinkKind) -> io::Result<PcapSink> {
        let file = File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("capture file {}: {e}", path.display())))?;
        Ok(PcapSink { out: CaptureWriter::new(BufWriter::new(file), kind)?, records: 0 })
    }

    /// Records one Ethernet frame seen at `at`.
    pub fn record(&mut self, at: SystemTime, frame: &[u8]) -> io::Result<()> {
        let since = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        self.out.frame(since, frame)?;
        self.records += 1;
        if self.records % FLUSH_EVERY == 0 {
            self.out.flush()?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl Drop for PcapSink {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}

/// The capture of the UDP backend, which is no frame link: the RoCE v2
/// packets the engine sends and receives, whole IP packets, in Ethernet
/// frames (made-up MAC addresses) of a classic pcap. The device sends from
/// unconnected sockets while it captures, so Linux writes IPv4
/// Identification 0, what the engine's packets say. A received IPv4
/// packet's Identification, which a UDP socket does not show, is solved
/// from its ICRC (as the engine does) and written in, with the header
/// checksum, so that the capture's ICRCs check.
pub struct IpTap {
    sink: PcapSink,
    recovery: rdma_wire::IdentRecovery,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for IpTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpTap").field("sink", &self.sink).finish_non_exhaustive()
    }
}

impl IpTap {
    pub fn create(path: &Path) -> io::Result<IpTap> {
        let sink = PcapSink::create(path, LinkKind::RoceV2)?;
        Ok(IpTap { sink, recovery: rdma_wire::IdentRecovery::new(), scratch: Vec::new() })
    }

    /// A packet sent, IP header through ICRC.
    pub fn sent(&mut self, l3: &[u8]) {
        self.record(l3, [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1]);
    }

    /// A packet received (BTH through ICRC) with the headers its socket
    /// reported, which the capture writes in front of it.
    pub fn received(&mut self, headers: &rdma_wire::DatagramHeaders, packet: &[u8]) {
        self.scratch.clear();
        self.scratch.resize(headers.headers_len(), 0);
        if let Err(e) = headers.emit(packet.len(), &mut self.scratch) {
            tracing::debug!(error = %e, "capture: a received packet no IP header can carry, left out");
            return;
        }
        self.scratch.extend_from_slice(packet);
        if let Ok(p) = rdma_wire::RoceV2Packet::new_checked(&self.scratch[..]) {
            let (computed, carried) = (p.computed_icrc(), p.transport().icrc());
            if p.ipv4().is_some() && computed != carried {
                if let Some(ident) = self.recovery.recover(self.scratch.len(), computed, carried) {
                    self.scratch[4..6].copy_from_slice(&ident.to_be_bytes());
                    self.scratch[10..12].fill(0);
                    let sum = rdma_wire::ipv4::checksum(&self.scratch[..20]);
                    self.scratch[10..12].copy_from_slice(&sum.to_be_bytes());
                }
            }
        }
        let packet = std::mem::take(&mut self.scratch);
        self.record(&packet, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        self.scratch = packet;
    }

    fn record(&mut self, l3: &[u8], dst: Mac, src: Mac) {
        let ethertype: u16 = if l3.first().is_some_and(|b| b >> 4 == 6) { 0x86dd } else { 0x0800 };
        let mut frame = Vec::with_capacity(ETH_HEADER + l3.len());
        frame.extend_from_slice(&dst);
        frame.extend_from_slice(&src);
        frame.extend_from_slice(&ethertype.to_be_bytes());
        frame.extend_from_slice(l3);
        if let Err(e) = self.sink.record(SystemTime::now(), &frame) {
            tracing::warn!(error = %e, "capture: a packet could not be written");
        }
    }

    /// The end of a burst: the records go to the file.
    pub fn flush(&mut self) {
        if let Err(e) = self.sink.flush() {
            tracing::warn!(error = %e, "capture: could not flush");
        }
    }
}

/// A link whose frames, both ways, are also written to a capture file.
#[derive(Debug)]
pub struct CaptureLink<L> {
    inner: L,
    recorder: Recorder,
}

/// How a capture link records: Ethernet frames of one EtherType, or, on a
/// RoCE v2 (UDP) link, IP packets as [`IpTap`] writes them (received ones
/// with the headers their socket reported).
#[derive(Debug)]
enum Recorder {
    Frames {
        sink: PcapSink,
        ethertype: [u8; 2],
        /// Records written since the last flush.
        dirty: bool,
    },
    Ip(IpTap),
}

impl<L: Link> CaptureLink<L> {
    pub fn new(inner: L, path: &Path) -> io::Result<CaptureLink<L>> {
        let kind = inner.caps().kind;
        let recorder = match crate::ethertype(kind) {
            Some(t) => {
                Recorder::Frames { sink: PcapSink::create(path, kind)?, ethertype: t.to_be_bytes(), dirty: false }
            }
            None => Recorder::Ip(IpTap::create(path)?),
        };
        Ok(CaptureLink { inner, recorder })
    }

    fn record(&mut self, at: SystemTime, frame: &[u8]) {
        let Recorder::Frames { sink, ethertype, dirty } = &mut self.recorder else { return };
        if frame.get(12..14) != Some(&ethertype[..]) {
            return;
        }
        if let Err(e) = sink.record(at, frame) {
            tracing::warn!(error = %e, "capture: a frame could not be written");
        }
        *dirty = true;
    }
}

impl<L: Link> Link for CaptureLink<L> {
    fn caps(&self) -> LinkCaps {
        self.inner.caps()
    }
    fn mac(&self) -> Mac {
        self.inner.mac()
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.inner.send(frame)?;
        match &mut self.recorder {
            Recorder::Ip(tap) => tap.sent(frame),
            Recorder::Frames { .. } => self.record(SystemTime::now(), frame),
        }
        Ok(())
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<FrameMeta>> {
        let m = self.inner.recv(buf)?;
        if let Some(m) = m {
            match (&mut self.recorder, &m.datagram) {
                (Recorder::Ip(tap), Some(h)) => tap.received(h, &buf[..m.len]),
                (Recorder::Ip(_), None) => {}
                (Recorder::Frames { .. }, _) => self.record(m.arrival, &buf[..m.len]),
            }
        }
        Ok(m)
    }
    fn fd(&self) -> RawFd {
        self.inner.fd()
    }
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.recorder {
            Recorder::Frames { sink, dirty, .. } => {
                if std::mem::take(dirty) {
                    sink.flush()?;
                }
            }
            Recorder::Ip(tap) => tap.flush(),
        }
        self.inner.flush()
    }
    fn fault_counts(&self) -> crate::FaultCounts {
        self.inner.fault_counts()
    }
    fn join_group(&mut self, mgid: std::net::IpAddr) -> io::Result<()> {
        self.inner.join_group(mgid)
    }
    fn leave_group(&mut self, mgid: std::net::IpAddr) {
        self.inner.leave_group(mgid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inproc::InProcessLink;

    fn frame(dst: Mac, src: Mac, ethertype: u16, tag: u8) -> Vec<u8> {
        crate::test_frame(dst, src, ethertype, tag, 60)
    }

    /// The records of a classic pcap file: its link type and each record's bytes.
    fn read_pcap(bytes: &[u8]) -> (u32, Vec<Vec<u8>>) {
        let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        assert_eq!(word(0), 0xa1b2_c3d4, "classic pcap, microseconds");
        let (link_type, mut at, mut records) = (word(20), 24, Vec::new());
        while at < bytes.len() {
            let len = word(at + 8) as usize;
            records.push(bytes[at + 16..at + 16 + len].to_vec());
            at += 16 + len;
        }
        (link_type, records)
    }

    #[test]
    fn a_capture_link_records_the_frames_of_its_ethertype_both_ways() {
        let (ma, mb) = ([2, 0, 0, 0, 9, 1], [2, 0, 0, 0, 9, 2]);
        let path = std::env::temp_dir().join(format!("capture-link-test-{}.pcap", std::process::id()));
        let a = InProcessLink::join("capture-test", ma, LinkKind::RoceV1).unwrap();
        let mut b = InProcessLink::join("capture-test", mb, LinkKind::RoceV1).unwrap();
        let mut a = CaptureLink::new(a, &path).unwrap();
        let (sent, arp, back) = (frame(mb, ma, 0x8915, 1), frame(mb, ma, 0x0806, 2), frame(ma, mb, 0x8915, 3));
        a.send(&sent).unwrap();
        a.send(&arp).unwrap();
        b.send(&back).unwrap();
        let mut buf = [0u8; 128];
        let m = a.recv(&mut buf).unwrap().expect("the frame from b");
        assert_eq!((m.src, &buf[..m.len]), (mb, &back[..]), "the wrapper passes frames through");
        a.flush().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let (link_type, records) = read_pcap(&bytes);
        assert_eq!(link_type, rdma_transport::capture::LINKTYPE_ETHERNET);
        assert_eq!(records, [sent, back], "the ARP frame is not the device's");
    }
}
