//! In-band network telemetry (INT) for HPCC: switches stamp data packets,
//! the receiving NIC echoes the stamps in its ACKs, and the sending NIC
//! hands the echo to the QP's congestion controller
//! ([`rdma_transport::Endpoint::congestion_telemetry`]) before the ACK.
//!
//! With INT on, every packet a host puts on the fabric carries a trailer
//! after its ICRC (as HPCC's own simulator carries an INT header): zero
//! or more hop records, then one byte: the record count, with the top bit
//! set on an echo. Switches add a record to data packets (the ECN-capable
//! ones) at egress; the fabric strips the trailer before a host's engine
//! sees the packet, so the engines parse and check exactly what they
//! sent. The trailer's bytes count in every queue and on every link.
//!
//! A record is 24 bytes: timestamp (ns, 8), bytes the port has sent (8),
//! data bytes queued at the port (4), line rate (Mb/s, 4). HPCC packs a
//! hop into 8 bytes with wrapping fields; the wider record costs more link
//! time than HPCC's (72 bytes over 3 hops against 24), never less.

use crate::packet::Bytes;
use crate::switch::ecn_capable;
use rdma_transport::cc::HopTelemetry;
use rdma_transport::{Endpoint, Instant};
use rdma_wire::{Bth, Opcode, Psn};

/// Bytes per hop record.
pub const HOP_LEN: usize = 24;
/// The most hops a trailer records: later switches leave it as it is.
pub const MAX_HOPS: usize = 8;
const ECHO: u8 = 0x80;

/// An empty trailer, put on a packet as its host sends it.
pub fn start(packet: &mut Bytes) {
    packet.push(0);
}

/// A switch egress stamps a data packet leaving at `now` with `queue_bytes`
/// of data still queued, after `tx_bytes` sent in all, at `rate_bps`.
/// Packets that are not data, echoes and full trailers pass unchanged.
pub fn stamp(packet: &mut Bytes, hop: HopTelemetry) {
    let Some(&count) = packet.last() else { return };
    if count & ECHO != 0 || usize::from(count) >= MAX_HOPS || !ecn_capable(packet) {
        return;
    }
    packet.pop();
    record(packet, &hop);
    packet.push(count + 1);
}

/// Per host, the last stamps its data packets from each peer QP brought,
/// keyed by (host, peer address, peer QPN): what the host's ACKs to that
/// QP echo (HPCC's receiver echoes the stamps of the packet it ACKs; an
/// ACK for several packets echoes the last one's).
#[derive(Debug, Default)]
pub struct EchoTable {
    latest: rustc_hash::FxHashMap<(usize, [u8; 4], u32), Vec<HopTelemetry>>,
}

impl EchoTable {
    pub fn remember(&mut self, host: usize, peer: [u8; 4], peer_qpn: u32, hops: Vec<HopTelemetry>) {
        self.latest.insert((host, peer, peer_qpn), hops);
    }

    pub fn latest(&self, host: usize, peer: [u8; 4], peer_qpn: u32) -> &[HopTelemetry] {
        self.latest.get(&(host, peer, peer_qpn)).map_or(&[], Vec::as_slice)
    }
}

impl EchoTable {
    /// A packet host `h` sends: an ACK gets the echo of the last stamps
    /// from the QP it acknowledges, anything else an empty trailer.
    pub fn on_send(&self, h: usize, packet: &mut Bytes) {
        let ack_for = bth(packet).filter(|b| b.opcode() == Opcode::RC_ACKNOWLEDGE).map(|b| b.dest_qp());
        match ack_for {
            Some(qpn) => {
                let peer = [packet[16], packet[17], packet[18], packet[19]];
                echo(packet, self.latest(h, peer, qpn));
            }
            None => start(packet),
        }
    }

    /// A packet that reached host `h` at `now`: the trailer comes off; a
    /// data packet's stamps are kept for the ACKs to its sender, an ACK's
    /// echo goes to the QP it is for, before the ACK itself.
    pub fn on_arrive(&mut self, h: usize, ep: &mut Endpoint, now: Instant, packet: &mut Bytes) {
        let Some(trailer) = strip(packet) else {
            debug_assert!(false, "a packet on an INT fabric without a trailer");
            return;
        };
        let Some((qpn, psn)) = qpn_psn(packet) else { return };
        if trailer.echo {
            ep.congestion_telemetry(now, qpn, psn, &trailer.hops);
        } else if ecn_capable(packet) {
            let Ok((_, params)) = ep.query_qp(qpn) else { return };
            let peer = [packet[12], packet[13], packet[14], packet[15]];
            self.remember(h, peer, params.dest_qp, trailer.hops);
        }
    }
}

/// A switch egress port (`port`, `queue_bytes` of data still queued)
/// stamps a packet leaving it at `now`.
pub fn stamp_at_egress(packet: &mut Bytes, port: &crate::topology::Port, queue_bytes: u64, now: Instant) {
    let hop = HopTelemetry { queue_bytes, tx_bytes: port.tx_bytes, timestamp: now, rate_bps: port.link.rate_bps };
    stamp(packet, hop);
}

/// What a trailer held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trailer {
    pub echo: bool,
    pub hops: Vec<HopTelemetry>,
}

/// Takes the trailer off a packet that reached a host; `None` if the
/// packet has none that fits (a fabric bug: every host packet gets one).
pub fn strip(packet: &mut Bytes) -> Option<Trailer> {
    let count = *packet.last()?;
    let n = usize::from(count & !ECHO);
    let start = packet.len().checked_sub(1 + n * HOP_LEN)?;
    let hops = packet[start..packet.len() - 1]
        .chunks_exact(HOP_LEN)
        .map(|r| {
            let u64_at = |i: usize| u64::from_be_bytes(r[i..i + 8].try_into().expect("8 bytes"));
            let u32_at = |i: usize| u32::from_be_bytes(r[i..i + 4].try_into().expect("4 bytes"));
            HopTelemetry {
                timestamp: Instant::from_nanos(u64_at(0)),
                tx_bytes: u64_at(8),
                queue_bytes: u64::from(u32_at(16)),
                rate_bps: u64::from(u32_at(20)) * 1_000_000,
            }
        })
        .collect();
    packet.truncate(start);
    Some(Trailer { echo: count & ECHO != 0, hops })
}

/// An echo trailer carrying `hops`, in place of `start`'s empty one.
pub fn echo(packet: &mut Bytes, hops: &[HopTelemetry]) {
    let hops = &hops[..hops.len().min(MAX_HOPS)];
    for h in hops {
        record(packet, h);
    }
    packet.push(ECHO | hops.len() as u8);
}

fn record(packet: &mut Bytes, hop: &HopTelemetry) {
    packet.extend_from_slice(&hop.timestamp.as_nanos().to_be_bytes());
    packet.extend_from_slice(&hop.tx_bytes.to_be_bytes());
    packet.extend_from_slice(&(hop.queue_bytes.min(u64::from(u32::MAX)) as u32).to_be_bytes());
    packet.extend_from_slice(&((hop.rate_bps / 1_000_000).min(u64::from(u32::MAX)) as u32).to_be_bytes());
}

/// The BTH of a RoCE v2 packet over IPv4 (no trailer): where a NIC reads
/// the QP an ACK is for and the PSN it names.
pub fn bth(packet: &[u8]) -> Option<Bth<&[u8]>> {
    let ihl = usize::from(packet.first()? & 0xf) * 4;
    if packet[0] >> 4 != 4 || packet.len() < ihl + 8 || packet[9] != 17 {
        return None;
    }
    Bth::new_checked(&packet[ihl + 8..]).ok()
}

/// The destination QP and PSN of a packet's BTH.
pub fn qpn_psn(packet: &[u8]) -> Option<(u32, Psn)> {
    bth(packet).map(|b| (b.dest_qp(), b.psn()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(i: u64) -> HopTelemetry {
        HopTelemetry {
            timestamp: Instant::from_nanos(1_000 + i),
            tx_bytes: 1 << (33 + i),
            queue_bytes: 4096 * i,
            rate_bps: 100_000_000_000,
        }
    }

    /// An IPv4 packet with ECT(0), as the engine sends data.
    fn data() -> Bytes {
        let mut p = Bytes::from_elem(0, 60);
        p[0] = 0x45;
        p[1] = 0x02;
        p[9] = 17;
        p
    }

    #[test]
    fn stamps_travel_and_come_off_whole() {
        let mut p = data();
        let bare = p.clone();
        start(&mut p);
        stamp(&mut p, hop(1));
        stamp(&mut p, hop(2));
        assert_eq!(p.len(), bare.len() + 1 + 2 * HOP_LEN);
        let t = strip(&mut p).unwrap();
        assert_eq!(p, bare);
        assert_eq!(t, Trailer { echo: false, hops: vec![hop(1), hop(2)] });
    }

    #[test]
    fn control_packets_echoes_and_full_trailers_are_not_stamped() {
        let mut ack = data();
        ack[1] = 0; // Not-ECT: an ACK.
        start(&mut ack);
        stamp(&mut ack, hop(1));
        assert_eq!(strip(&mut ack).unwrap().hops, vec![]);
        let mut e = data();
        echo(&mut e, &[hop(1)]);
        stamp(&mut e, hop(2));
        assert_eq!(strip(&mut e).unwrap(), Trailer { echo: true, hops: vec![hop(1)] });
        let mut full = data();
        start(&mut full);
        for i in 0..MAX_HOPS as u64 + 2 {
            stamp(&mut full, hop(i));
        }
        assert_eq!(strip(&mut full).unwrap().hops.len(), MAX_HOPS);
    }
}
