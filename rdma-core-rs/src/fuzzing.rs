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
/// ICRC check when the TOS says CE.
pub fn udp_receive(data: &[u8]) {
    if data.len() < UDP_RECEIVE_HEADER {
        return;
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
    let n = split_datagram(&buf, at, len, seg, &mut stats, |pkt| {
        let r = pkt.as_ptr_range();
        assert!(r.start >= buf_range.start && r.end <= buf_range.end, "a packet outside its buffer");
        packets.push(pkt.to_vec());
    });
    assert_eq!(n, packets.len());
    let segments = match seg {
        Some(s) if s > 0 && s < len => len.div_ceil(s),
        _ => 1,
    };
    assert!(n <= segments, "{n} packets from {segments} segments");
    if !fits {
        assert_eq!((n, stats.truncated), (0, 1), "a misplaced datagram is dropped whole");
        return;
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
}

/// Flag bits of [`frame_receive`]'s first byte.
pub mod frame_flags {
    /// Native IB frames (EtherType 0x88B5), else RoCE v1 (0x8915).
    pub const IB: u8 = 1;
    /// Address every packet that parses to the device (its GID or LID)
    /// and make its CRCs right before it is delivered, so that inputs
    /// reach past the address and CRC checks.
    pub const FIX_CRCS: u8 = 2;
}

/// Frames a [`frame_receive`] input holds at most.
pub const FRAME_RECEIVE_MAX_FRAMES: usize = 64;

/// A link that hands out the frames it was given, then nothing.
struct ReplayLink {
    frames: std::collections::VecDeque<Vec<u8>>,
    kind: rdma_transport::LinkKind,
    sent: usize,
}

impl rdma_link::Link for ReplayLink {
    fn caps(&self) -> rdma_link::LinkCaps {
        rdma_link::LinkCaps { kind: self.kind, max_frame: 1 << 16, segmentation_offload: false, by_reference: false }
    }
    fn mac(&self) -> rdma_link::Mac {
        [2, 0, 0, 0, 0, 1]
    }
    fn send(&mut self, _frame: &[u8]) -> std::io::Result<()> {
        self.sent += 1;
        Ok(())
    }
    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<Option<rdma_link::FrameMeta>> {
        let Some(f) = self.frames.pop_front() else { return Ok(None) };
        let n = f.len().min(buf.len());
        buf[..n].copy_from_slice(&f[..n]);
        // A runt has no source address: zeros (the driver drops it anyway).
        let mut src = [0u8; 6];
        if let Some(s) = f.get(6..12) {
            src.copy_from_slice(s);
        }
        Ok(Some(rdma_link::FrameMeta { len: n, src, arrival: std::time::SystemTime::UNIX_EPOCH, traffic_class: None }))
    }
    fn fd(&self) -> std::os::fd::RawFd {
        -1
    }
}

/// What the wire crate says of one packet, independently of the engine.
#[derive(Default)]
struct Verdicts {
    malformed: u64,
    vcrc: u64,
    icrc: u64,
}

/// The raw-frame receive path: the frame driver takes Ethernet frames from
/// a link and hands the engine (a RoCE v1 or native IB device, LID 1) the
/// packet of each frame of its EtherType. Input: a flags byte
/// ([`frame_flags`]), then frames, each a little-endian u16 length and
/// that many bytes (at most [`FRAME_RECEIVE_MAX_FRAMES`]).
///
/// Oracles: no panic; the engine is handed exactly the frames of its
/// EtherType (its packet counter), no other; the packets it drops as
/// malformed, with a bad VCRC or with a bad ICRC are exactly those the
/// wire crate's own parsers find so (in that order of checks); with
/// [`frame_flags::FIX_CRCS`] no packet that parses is dropped for a CRC;
/// the driver's frame counter agrees; nothing is sent in reply to a
/// packet for a QP the device does not have.
pub fn frame_receive(data: &[u8]) {
    use rdma_transport::{Drop, LinkKind};
    use rdma_wire::{IbPacket, RoceV1Packet};
    let Some((&flags, mut rest)) = data.split_first() else { return };
    let kind = if flags & frame_flags::IB != 0 { LinkKind::Ib } else { LinkKind::RoceV1 };
    let ethertype = rdma_link::ethertype(kind).expect("a frame kind");
    let mut frames = std::collections::VecDeque::new();
    while rest.len() >= 2 && frames.len() < FRAME_RECEIVE_MAX_FRAMES {
        let n = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let mut f = rest[2..2 + n].to_vec();
        rest = &rest[2 + n..];
        if flags & frame_flags::FIX_CRCS != 0 && f.len() > 14 {
            fix_crcs(kind, &mut f[14..]);
        }
        frames.push_back(f);
    }
    let (mut mine, mut want) = (0u64, Verdicts::default());
    for f in &frames {
        if f.len() < 14 || u16::from_be_bytes([f[12], f[13]]) != ethertype {
            continue;
        }
        mine += 1;
        let p = &f[14..];
        match kind {
            LinkKind::Ib => match IbPacket::new_checked(p) {
                Err(_) => want.malformed += 1,
                Ok(q) if !q.vcrc_ok() => want.vcrc += 1,
                Ok(q) if !q.icrc_ok() => want.icrc += 1,
                Ok(_) => {}
            },
            _ => match RoceV1Packet::new_checked(p) {
                Err(_) => want.malformed += 1,
                Ok(q) if !q.icrc_ok() => want.icrc += 1,
                Ok(_) => {}
            },
        }
    }
    let mut ep = Endpoint::with_seed(rdma_link::gid_of_mac([2, 0, 0, 0, 0, 1]), 1);
    ep.set_link(kind, 1);
    let link = ReplayLink { frames, kind, sent: 0 };
    let mut io = crate::frames::FrameIo::new(Box::new(link)).expect("a frame link");
    let now = Instant::from_nanos(0);
    while io.receive(&mut ep, now).expect("a replay link cannot fail") > 0 {}
    let s = ep.stats();
    let drop = |d: Drop| s.drops.get(&d).copied().unwrap_or(0);
    assert_eq!(s.packets_received, mine, "the engine gets exactly the frames of its EtherType");
    assert_eq!(io.stats.datagrams_received, mine, "the driver counts them");
    assert_eq!(drop(Drop::Malformed), want.malformed, "malformed packets, as the wire crate finds them");
    assert_eq!(drop(Drop::VcrcMismatch), want.vcrc, "VCRC failures");
    assert_eq!(drop(Drop::IcrcMismatch), want.icrc, "ICRC failures");
    if flags & frame_flags::FIX_CRCS != 0 {
        assert_eq!(want.vcrc + want.icrc, 0, "fixed CRCs check out");
        let misaddressed = drop(Drop::LidMismatch) + drop(Drop::GidMismatch);
        assert_eq!(misaddressed, 0, "packets addressed to the device are not dropped as another's");
    }
    let mut buf = vec![0u8; rdma_transport::MAX_PACKET];
    assert!(ep.poll_transmit(now, &mut buf).is_none(), "a device without QPs answers nothing");
}

/// Addresses a packet that parses to the fuzz body's device (DLID 1, or
/// its GID) and rewrites its ICRC (and VCRC), in place.
fn fix_crcs(kind: rdma_transport::LinkKind, p: &mut [u8]) {
    use rdma_wire::{IbPacket, RoceV1Packet};
    match kind {
        rdma_transport::LinkKind::Ib => {
            if IbPacket::new_checked(&*p).is_err() {
                return;
            }
            p[2..4].copy_from_slice(&1u16.to_be_bytes());
            IbPacket::reseal(p);
        }
        _ => {
            if RoceV1Packet::new_checked(&*p).is_err() {
                return;
            }
            let std::net::IpAddr::V6(me) = rdma_link::gid_of_mac([2, 0, 0, 0, 0, 1]) else { return };
            p[24..40].copy_from_slice(&me.octets());
            let Ok(q) = RoceV1Packet::new_checked(&*p) else { return };
            let end = 40 + usize::from(q.grh().payload_len());
            let icrc = q.computed_icrc();
            p[end - 4..end].copy_from_slice(&icrc.to_le_bytes());
        }
    }
}
