//! Bodies of the fuzz targets that exercise code of this crate (the thin
//! `fuzz_target!` wrappers live in `fuzz/`). Each is also run over its
//! checked-in seed corpus by an ordinary test (`tests/fuzz_corpus_*.rs`).
//! Every oracle panics on a violation; nothing else may panic.

use crate::io_stats::IoStats;
use crate::udp::split_datagram;
use rdma_transport::{Endpoint, Instant};
use rdma_wire::{DatagramHeaders, IdentRecovery, RoceV2Packet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Input layout of [`udp_receive`]: a flags byte, then 10 bytes of
/// parameters, then the datagram as a UDP socket hands it up.
pub const UDP_RECEIVE_HEADER: usize = 11;

/// Flag bits of [`udp_receive`]'s first byte.
pub mod udp_flags {
    /// The device is IPv6 (else IPv4).
    pub const IPV6: u8 = 1;
    /// UDP_GRO coalesced the datagram: parameters 0..2 are the segment size (LE).
    pub const GRO: u8 = 2;
    /// The sender's family differs from the device's (a case the kernel never hands up).
    pub const OTHER_FAMILY: u8 = 4;
    /// The datagram is misplaced in its buffer: parameter 6 is its offset,
    /// parameter 7 bytes more than the buffer holds are claimed.
    pub const MISPLACED: u8 = 8;
    /// The datagram may be merged without saying so (a shared port's GRO
    /// just went off): cut where a run of one QP's packets would begin.
    pub const MAYBE_MERGED: u8 = 16;
}

/// The UDP receive path after the socket: GRO splitting, each packet
/// handed to the engine with the headers the socket reported
/// ([`DatagramHeaders`]), and the engine's IPv4 Identification recovery.
/// Input: see [`UDP_RECEIVE_HEADER`] and [`udp_flags`]; parameters 2..4
/// are the sender's port, 4..6 the low bytes of its address, 8 the TOS /
/// traffic class it arrived with, 9 its TTL / hop limit.
///
/// Oracles: every packet handed on lies in the buffer; the packets put
/// together are the datagram; no more packets than segments; a datagram
/// outside its buffer is dropped whole. The engine given the typed headers
/// ends exactly as an engine given the same packets with those headers
/// written in front of them ([`DatagramHeaders::emit`], parsed by
/// `handle_packet`): the same packets counted, the same drops by reason,
/// CNPs, CE marks and Identifications recovered; a packet no IP header
/// can carry (an IPv6 sender on an IPv4 device) is dropped as malformed.
/// An Identification the solver recovers makes the ICRC check out when
/// written into the header; CE is counted on exactly the packets past the
/// ICRC check when the TOS says CE. Returns the packets past the ICRC
/// check (so that a test can see its packets were not all dropped, which
/// would make the comparison vacuous).
pub fn udp_receive(data: &[u8]) -> u64 {
    if data.len() < UDP_RECEIVE_HEADER {
        return 0;
    }
    let (flags, p, body) = (data[0], &data[1..UDP_RECEIVE_HEADER], &data[UDP_RECEIVE_HEADER..]);
    let v6 = flags & udp_flags::IPV6 != 0;
    let seg = (flags & udp_flags::GRO != 0).then(|| usize::from(u16::from_le_bytes([p[0], p[1]])));
    let port = u16::from_le_bytes([p[2], p[3]]);
    let (local, src_ip): (IpAddr, IpAddr) = if v6 {
        (
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).into(),
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, p[4].into(), p[5].into()).into(),
        )
    } else {
        (Ipv4Addr::new(127, 0, 0, 1).into(), Ipv4Addr::new(127, 1, p[4], p[5]).into())
    };
    let src_ip = match (flags & udp_flags::OTHER_FAMILY != 0, src_ip) {
        (false, ip) => ip,
        (true, IpAddr::V4(v4)) => IpAddr::V6(v4.to_ipv6_mapped()),
        (true, IpAddr::V6(_)) => IpAddr::V4(Ipv4Addr::new(127, 1, p[4], p[5])),
    };
    let headers =
        DatagramHeaders { src: SocketAddr::new(src_ip, port), dst: local, traffic_class: p[8], hop_limit: p[9] };
    let (at, len) = if flags & udp_flags::MISPLACED != 0 {
        (usize::from(p[6] % 64), body.len() + usize::from(p[7] % 4))
    } else {
        (0, body.len())
    };
    let mut buf = vec![0u8; 64 + body.len()];
    buf[at..at + body.len()].copy_from_slice(body);
    if flags & udp_flags::MISPLACED != 0 {
        buf.truncate(at + body.len());
    }
    let fits = at + len <= buf.len();

    let mut stats = IoStats::default();
    let mut packets: Vec<Vec<u8>> = Vec::new();
    let buf_range = buf.as_ptr_range();
    let maybe_merged = flags & udp_flags::MAYBE_MERGED != 0;
    let n = split_datagram(&buf, at, len, seg, maybe_merged, &mut stats, |pkt| {
        let r = pkt.as_ptr_range();
        assert!(r.start >= buf_range.start && r.end <= buf_range.end, "a packet outside its buffer");
        packets.push(pkt.to_vec());
    });
    assert_eq!(n, packets.len());
    let segments = match crate::udp::rx_segment_size(seg, buf.get(at..at + len).unwrap_or(&[]), maybe_merged) {
        Some(s) => len.div_ceil(s),
        None => 1,
    };
    assert!(n <= segments, "{n} packets from {segments} segments");
    if !fits {
        assert_eq!((n, stats.truncated), (0, 1), "a misplaced datagram is dropped whole");
        return 0;
    }
    assert_eq!((n, stats.datagrams_received as usize), (segments, segments), "every segment handed on and counted");
    assert!(packets.concat() == buf[at..at + len], "the packets put together are the datagram");

    // The same packets with their headers written in front, where a header can carry them.
    let whole: Vec<Option<Vec<u8>>> = packets
        .iter()
        .map(|pkt| {
            let mut l3 = vec![0u8; headers.headers_len()];
            headers.emit(pkt.len(), &mut l3).ok()?;
            l3.extend_from_slice(pkt);
            Some(l3)
        })
        .collect();
    let unfit = whole.iter().filter(|w| w.is_none()).count() as u64;
    if src_ip.is_ipv6() && local.is_ipv4() {
        assert_eq!(unfit, n as u64, "an IPv6 sender on an IPv4 device has no header");
    }

    // Identification recovery, checked against the header it implies.
    let mut recovery = IdentRecovery::new();
    let (mut recovered, mut icrc_ok) = (0, 0);
    for l3 in whole.iter().flatten() {
        let Ok(p) = RoceV2Packet::new_checked(&l3[..]) else { continue };
        let (computed, carried) = (p.computed_icrc(), p.transport().icrc());
        if computed == carried {
            icrc_ok += 1;
        }
        if computed == carried || p.ipv4().is_none() {
            continue;
        }
        if let Some(ident) = recovery.recover(l3.len(), computed, carried) {
            recovered += 1;
            let mut fixed = l3.clone();
            fixed[4..6].copy_from_slice(&ident.to_be_bytes());
            fixed[10..12].copy_from_slice(&[0, 0]);
            let sum = rdma_wire::ipv4::checksum(&fixed[..20]);
            fixed[10..12].copy_from_slice(&sum.to_be_bytes());
            let p = RoceV2Packet::new_checked(&fixed[..]).expect("only the Identification changed");
            assert!(p.icrc_ok(), "Identification {ident} recovered, but the ICRC does not check out with it");
        }
    }
    // Two engines with no QP: one given the typed headers, one the packets
    // with headers; every packet is counted, and dropped or a CNP, alike.
    let (mut typed, mut parsed) = (Endpoint::new(local), Endpoint::new(local));
    typed.set_ipv4_ident_unknown(true);
    parsed.set_ipv4_ident_unknown(true);
    for (pkt, l3) in packets.iter().zip(&whole) {
        typed.handle_datagram(Instant::from_nanos(0), &headers, pkt);
        if let Some(l3) = l3 {
            parsed.handle_packet(Instant::from_nanos(0), l3);
        }
    }
    let (t, mut w) = (typed.stats(), parsed.stats());
    assert_eq!(t.packets_received, n as u64);
    assert_eq!(t.drops.values().sum::<u64>() + t.cnps_received, n as u64, "every packet accounted for: {t:?}");
    if unfit > 0 {
        w.packets_received += unfit;
        *w.drops.entry(rdma_transport::Drop::Malformed).or_default() += unfit;
    }
    assert_eq!(
        (t.packets_received, &t.drops, t.cnps_received, t.ecn_ce_received, t.ipv4_ident_recovered),
        (w.packets_received, &w.drops, w.cnps_received, w.ecn_ce_received, w.ipv4_ident_recovered),
        "typed headers and written ones end differently"
    );
    assert_eq!(t.ipv4_ident_recovered, recovered, "the engine recovers what the solver does");
    let ce = if headers.ecn() == 3 { icrc_ok + recovered } else { 0 };
    assert_eq!(t.ecn_ce_received, ce, "CE counted on every packet past the ICRC check, and only then");
    icrc_ok + recovered
}
