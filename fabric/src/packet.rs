//! A packet on the fabric's links, with its payload left in the sender's
//! memory region.
//!
//! A switch reads a packet's headers (to route it, mark it, stamp it) and
//! never its payload, yet the payload is most of its bytes: copied into
//! every queued packet, it made the queues' bytes the simulator's working
//! set, cold by the time a packet left (docs/performance.md, "The misses
//! counted": at 128 hosts some 40 % of the last-level read misses were the
//! receiver's ICRC check over a payload that had waited in the queues). So a RoCE v2
//! data packet travels as its headers, pad and ICRC (sealed when it was
//! sent) and a reference to its payload ([`PayloadRef`]), and is made whole
//! where a host receives it.
//!
//! The payload is read twice, when the packet is sealed and when it is
//! delivered: the bytes delivered are the bytes sent as long as the
//! sender's region does not change in between. The fabric's hosts send
//! from and write into one zeroed region (`host::Host`): incoming WRITEs
//! land in the range a host sends from, but every byte ever written is
//! zero, so its contents never change. Were they to change, the receiver's ICRC check would drop the packet
//! (counted as a bad ICRC; up to CRC-32's collisions). Neither read touches
//! the region's bytes while it has held only zeros, nor does the receiver's
//! write of them ([`rdma_transport::RegionMemory::zeroed`]). (The
//! `all_to_all` bench's data mode fills every host's region with one
//! pattern: WRITEs go from offset 0 to offset 0, so again nothing changes.)
//!
//! Under `--threads` a packet leaving for another partition is made whole
//! before it goes ([`Packet::make_whole`], by the sender's thread): the
//! receiving thread never reads a region another thread may be writing. A
//! payload from a region that has held only zeros (every payload of the
//! CLI's scenarios; not the bench's data mode) leaves as its length alone,
//! with no allocation and no copy, and is written out as zeros where it is
//! delivered.

use rdma_transport::PayloadRef;
use smallvec::SmallVec;

/// A packet's bytes in hand, inline up to [`INLINE`] bytes: a data
/// packet's headers, pad and ICRC, or a whole ACK or CNP, sit in the event
/// or queue slot that holds the packet, so a hop reads them where it
/// already is instead of from an allocation of their own, gone cold while
/// the packet waited (docs/performance.md). Longer ones go on the heap:
/// with INT, any trailer with a stamp (24 bytes a hop); an immediate or
/// atomic header; IB frames and payloads carried whole.
pub type Bytes = SmallVec<[u8; INLINE]>;

/// RoCE v2 over IPv4: 20 + 8 + 12 (BTH) + 16 (RETH) + 4 (ICRC), and an
/// empty INT trailer.
pub const INLINE: usize = 64;

#[derive(Debug, Clone)]
pub struct Packet {
    /// The bytes in hand: a whole packet, or with `payload` its headers,
    /// then its pad and ICRC, then whatever the fabric appends (INT).
    bytes: Bytes,
    payload: Option<Payload>,
}

/// A payload not among a packet's bytes.
#[derive(Debug, Clone)]
enum Payload {
    /// In the sender's region.
    Region(PayloadRef),
    /// `len` zero bytes that go at `at`: a payload made whole while its
    /// region held only zeros.
    Zeros { at: usize, len: usize },
}

impl Payload {
    /// Where the payload goes among the packet's bytes, and its length.
    fn span(&self) -> (usize, usize) {
        match self {
            Payload::Region(p) => (p.at, p.len),
            Payload::Zeros { at, len } => (*at, *len),
        }
    }
}

impl From<Vec<u8>> for Packet {
    /// A packet whole in `bytes`.
    fn from(bytes: Vec<u8>) -> Packet {
        Packet { bytes: Bytes::from_vec(bytes), payload: None }
    }
}

impl From<&[u8]> for Packet {
    /// A packet whole in `bytes` (copied).
    fn from(bytes: &[u8]) -> Packet {
        Packet { bytes: Bytes::from_slice(bytes), payload: None }
    }
}

impl Packet {
    /// A packet whose headers, pad and ICRC are `bytes` and whose payload
    /// goes at `payload.at` (sealed: the ICRC covers it).
    pub fn by_reference(bytes: &[u8], payload: PayloadRef) -> Packet {
        debug_assert!(payload.at <= bytes.len());
        Packet { bytes: Bytes::from_slice(bytes), payload: Some(Payload::Region(payload)) }
    }

    /// The bytes in hand, from the first header on: the headers the
    /// switches read and change, then (by reference) the pad and ICRC, and
    /// any INT trailer. The payload (if by reference) is not among them, so
    /// these are the whole packet only if [`Packet::is_whole`].
    pub fn headers(&self) -> &[u8] {
        &self.bytes
    }

    pub fn headers_mut(&mut self) -> &mut Bytes {
        &mut self.bytes
    }

    pub fn is_whole(&self) -> bool {
        self.payload.is_none()
    }

    /// Whether the payload is still to be read from the sender's region
    /// (what [`Packet::make_whole`] ends).
    pub fn refers_to_region(&self) -> bool {
        matches!(self.payload, Some(Payload::Region(_)))
    }

    /// The bytes the packet takes on a link: what queues and links count.
    pub fn wire_len(&self) -> usize {
        self.bytes.len() + self.payload.as_ref().map_or(0, |p| p.span().1)
    }

    /// The whole packet: its bytes, with the payload read from its region
    /// (or written out as zeros) into `scratch` if it is not among them.
    pub fn whole<'a>(&'a self, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        let Some(p) = &self.payload else { return &self.bytes };
        let (at, len) = p.span();
        scratch.clear();
        scratch.extend_from_slice(&self.bytes[..at]);
        scratch.resize(at + len, 0);
        if let Payload::Region(p) = p {
            p.memory.read(p.offset, &mut scratch[at..]);
        }
        scratch.extend_from_slice(&self.bytes[at..]);
        scratch
    }

    /// Makes the packet independent of the sender's region (for a packet
    /// that leaves the sender's thread): the payload read into the
    /// packet's own bytes, or, if the region has held only zeros, kept as
    /// its length (the bytes it would read).
    pub fn make_whole(&mut self) {
        match &self.payload {
            Some(Payload::Region(p)) if p.memory.holds_only_zeros() => {
                self.payload = Some(Payload::Zeros { at: p.at, len: p.len });
            }
            Some(Payload::Region(_)) => self.materialise(),
            Some(Payload::Zeros { .. }) | None => {}
        }
    }

    /// Puts the whole packet among its own bytes.
    fn materialise(&mut self) {
        if self.payload.is_none() {
            return;
        }
        let mut whole = Vec::with_capacity(self.wire_len());
        self.whole(&mut whole);
        (self.bytes, self.payload) = (Bytes::from_vec(whole), None);
    }

    /// The packet's bytes, whole (for paths that keep them: IB frames).
    pub fn into_bytes(mut self) -> Vec<u8> {
        self.materialise();
        self.bytes.into_vec()
    }
}

#[cfg(test)]
mod tests {
    use crate::fabric::{deliver, next_packet, SCRATCH};
    use crate::host::{connect, Host};
    use crate::int::{stamp, EchoTable};
    use crate::switch::{Admit, Red, Switch};
    use rdma_transport::cc::HopTelemetry;
    use rdma_transport::sim::Rng;
    use rdma_transport::{Drop, Instant, SendOp, SendWr, Sge};
    use std::net::Ipv4Addr;

    fn pair() -> Vec<Host> {
        (0..2).map(|i| Host::new(i, Ipv4Addr::new(10, 0, 0, 1 + i as u8), 7, None)).collect()
    }

    /// Host 0 WRITEs `len` bytes from the start of its region to host 1's.
    fn write(hosts: &mut [Host], qpn: u32, len: u32) {
        let (src, dst) = (&hosts[0], &hosts[1]);
        let wr = SendWr::new(
            1,
            SendOp::RdmaWrite { remote_addr: dst.va, rkey: dst.rkey },
            vec![Sge { addr: src.va, length: len, lkey: src.lkey }],
        );
        hosts[0].ep.post_send(qpn, wr).expect("the QP is connected");
    }

    fn region(host: &Host, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        host.memory.read(0, &mut out);
        out
    }

    /// Host 0's packets to host 1 through one switch port that marks
    /// every data packet CE, on a fabric with INT: the packets as they
    /// reach host 1, whole, and what the switch held at its fullest.
    fn through_a_switch(hosts: &mut [Host]) -> (Vec<Vec<u8>>, u64) {
        let mut sw = Switch::new(1, Red { kmin_bytes: 0, kmax_bytes: 0, pmax: 1.0 }, 1 << 20);
        sw.routes.set_port(hosts[1].addr, 0);
        let mut int = EchoTable::default();
        let (mut tx, mut rx) = (vec![0; SCRATCH], Vec::new());
        let (now, mut rng) = (Instant::ZERO, Rng::new(1));
        let mut wire_len = 0;
        while let Some(p) = next_packet(&mut hosts[0].ep, now, &mut tx, Some(&int), 0) {
            wire_len += p.wire_len() as u64;
            assert!(matches!(sw.admit(p, 0), Admit::Queued { port: 0, .. }));
            assert_eq!(sw.queued_bytes, wire_len, "queues count the payload left behind");
        }
        let (mut arrived, peak) = (Vec::new(), sw.queued_bytes);
        while let Some((mut p, _)) = sw.dequeue(0, false, &mut rng) {
            stamp(p.headers_mut(), HopTelemetry { queue_bytes: 1, tx_bytes: 2, timestamp: now, rate_bps: 3 });
            let mut whole = p.clone();
            whole.make_whole();
            assert!(whole.is_whole());
            let bytes = whole.headers();
            assert_eq!(bytes[1] & 3, 3, "marked CE on the way");
            assert_eq!(bytes.last(), Some(&1), "an INT trailer of one stamp");
            arrived.push(bytes.to_vec());
            deliver(&mut hosts[1], 1, Some(&mut int), now, p, &mut rx);
        }
        assert_eq!(sw.queued_bytes, 0);
        (arrived, peak)
    }

    #[test]
    fn a_packet_sent_by_reference_arrives_as_the_engine_writes_it_whole() {
        let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        // Two identical pairs, one sending payloads by reference.
        let (mut by_ref, mut whole) = (pair(), pair());
        whole[0].ep.set_payload_by_reference(false);
        let mut qpns = Vec::new();
        for hosts in [&mut by_ref, &mut whole] {
            hosts[0].memory.write(0, &pattern);
            let (qpn, _) = connect(hosts, 0, 1);
            write(hosts, qpn, pattern.len() as u32);
            qpns.push(qpn);
        }
        assert_eq!(qpns[0], qpns[1]);
        // Sealed alike: the same packets, by reference or not.
        let (mut a, mut b) = (vec![0; SCRATCH], vec![0; SCRATCH]);
        let (mut sa, mut sb) = (Vec::new(), Vec::new());
        let mut by_ref_sent = 0;
        for _ in 0..4 {
            let p = next_packet(&mut by_ref[0].ep, Instant::ZERO, &mut a, None, 0).expect("4 packets");
            let w = next_packet(&mut whole[0].ep, Instant::ZERO, &mut b, None, 0).expect("4 packets");
            assert!(w.is_whole());
            by_ref_sent += usize::from(!p.is_whole());
            assert_eq!(p.wire_len(), w.wire_len());
            assert_eq!(p.whole(&mut sa), w.whole(&mut sb));
            deliver(&mut by_ref[1], 1, None, Instant::ZERO, p, &mut sa);
            deliver(&mut whole[1], 1, None, Instant::ZERO, w, &mut sb);
        }
        assert_eq!(by_ref_sent, 4, "4 KiB in 1 KiB packets, each payload by reference");
        // A second WRITE of each, through a marking, stamping switch.
        for hosts in [&mut by_ref, &mut whole] {
            write(hosts, qpns[0], pattern.len() as u32);
        }
        let (via_ref, peak_ref) = through_a_switch(&mut by_ref);
        let (via_whole, peak_whole) = through_a_switch(&mut whole);
        assert_eq!(via_ref.len(), 4, "the second WRITE's packets");
        assert_eq!(via_ref, via_whole, "the same bytes arrive, CE marks and INT stamps included");
        assert_eq!(peak_ref, peak_whole);
        for hosts in [&by_ref, &whole] {
            assert_eq!(region(&hosts[1], pattern.len()), pattern);
            assert_eq!(hosts[1].ep.stats().drops_for(Drop::IcrcMismatch), 0);
        }
        assert_eq!(by_ref[1].rx_data_bytes, whole[1].rx_data_bytes);
        let counted: u64 = by_ref[1].rx_data_bytes.values().sum();
        assert!(counted >= 8 * 1024, "the payloads are counted though they travelled by reference: {counted}");
    }

    #[test]
    fn a_payload_changed_before_delivery_is_dropped_not_taken() {
        let mut hosts = pair();
        hosts[0].memory.write(0, &[0x5a; 1024]);
        let (qpn, _) = connect(&mut hosts, 0, 1);
        write(&mut hosts, qpn, 1024);
        let mut buf = vec![0; SCRATCH];
        let p = next_packet(&mut hosts[0].ep, Instant::ZERO, &mut buf, None, 0).expect("the WRITE");
        assert!(!p.is_whole());
        // The sender's region changes while the packet is on its way.
        hosts[0].memory.write(100, &[1]);
        deliver(&mut hosts[1], 1, None, Instant::ZERO, p, &mut Vec::new());
        assert_eq!(hosts[1].ep.stats().drops_for(Drop::IcrcMismatch), 1);
        assert_eq!(region(&hosts[1], 1024), vec![0; 1024], "nothing placed");
    }

    /// `--threads`: a payload from a region that has held only zeros
    /// leaves its region as its length (no copy), and arrives as the bytes
    /// sent even when the region changes after it left (by reference, the
    /// test above shows, such a packet is dropped).
    #[test]
    fn a_payload_of_zeros_made_whole_is_kept_as_its_length_and_arrives_as_sent() {
        let mut hosts = pair();
        let (qpn, _) = connect(&mut hosts, 0, 1);
        write(&mut hosts, qpn, 1024);
        let mut buf = vec![0; SCRATCH];
        let mut p = next_packet(&mut hosts[0].ep, Instant::ZERO, &mut buf, None, 0).expect("the WRITE");
        assert!(p.refers_to_region());
        let sent = p.whole(&mut Vec::new()).to_vec();
        let in_hand = p.headers().len();
        p.make_whole();
        assert!(!p.refers_to_region(), "independent of the region");
        assert_eq!(p.headers().len(), in_hand, "no payload copied in");
        assert_eq!(p.wire_len(), sent.len());
        hosts[0].memory.write(0, &[0x5a; 1024]);
        assert_eq!(p.whole(&mut Vec::new()), &sent[..]);
        assert_eq!(p.clone().into_bytes(), sent);
        deliver(&mut hosts[1], 1, None, Instant::ZERO, p, &mut Vec::new());
        assert_eq!(hosts[1].ep.stats().drops_for(Drop::IcrcMismatch), 0);
        assert_eq!(hosts[1].rx_data_bytes.values().sum::<u64>(), sent.len() as u64, "taken, and counted");
    }
}
