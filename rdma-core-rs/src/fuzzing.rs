//! Bodies of the fuzz targets that exercise code of this crate (the thin
//! `fuzz_target!` wrappers live in `fuzz/`). Each is also run over its
//! checked-in seed corpus by an ordinary test (`tests/fuzz_corpus_*.rs`).
//! Every oracle panics on a violation; nothing else may panic.

use crate::io_stats::IoStats;
use crate::udp::{split_datagram, RxMeta, HEADROOM};
use rdma_transport::{Endpoint, Instant};
use rdma_wire::{IdentRecovery, RoceV2Packet, ROCE_V2_PORT};
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

/// The UDP receive path after the socket: GRO splitting, the IP and UDP
/// headers rebuilt in front of each packet, and the engine's IPv4
/// Identification recovery. Input: see [`UDP_RECEIVE_HEADER`] and
/// [`udp_flags`]; parameters 2..4 are the sender's port, 4..6 the low
/// bytes of its address, 8 the TOS / traffic class it arrived with, 9 its
/// TTL / hop limit.
///
/// Oracles: every packet handed on lies in the buffer, with headers whose
/// lengths, addresses and ports agree with it; the packets' bodies put
/// together are the datagram; no more packets than segments; the rebuilt
/// headers carry the TOS and the TTL; the engine counts a CE mark on
/// exactly the packets it accepts past the ICRC check when the TOS says CE; an
/// Identification recovered makes the ICRC check out when written into
/// the header; the engine counts every packet it is handed, and recovers
/// exactly those.
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
    let src = SocketAddr::new(src_ip, port);
    let (tos, hop_limit) = (p[8], p[9]);
    let (at, len) = if flags & udp_flags::MISPLACED != 0 {
        (usize::from(p[6] % 64), body.len() + usize::from(p[7] % 4))
    } else {
        (HEADROOM, body.len())
    };
    let mut buf = vec![0u8; HEADROOM + body.len()];
    buf[HEADROOM..].copy_from_slice(body);
    let orig = buf.clone();
    let hl = if local.is_ipv4() { 20 } else { 40 };
    let fits = at >= hl + 8 && at + len <= buf.len();
    let consistent = local.is_ipv4() == src_ip.is_ipv4() || local.is_ipv6();

    let mut stats = IoStats::default();
    let mut bodies = Vec::with_capacity(len);
    let mut packets = Vec::new();
    let buf_range = buf.as_ptr_range();
    let n = split_datagram(&mut buf, at, len, seg, RxMeta { src, tos, hop_limit }, local, &mut stats, |pkt| {
        let r = pkt.as_ptr_range();
        assert!(r.start >= buf_range.start && r.end <= buf_range.end, "a packet outside its buffer");
        check_headers(pkt, hl, src, (tos, hop_limit), local);
        bodies.extend_from_slice(&pkt[hl + 8..]);
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
    assert_eq!(stats.datagrams_received as usize, segments, "every segment counted");
    assert_eq!(n as u64 + stats.truncated, segments as u64, "every segment handed on or counted as truncated");
    if consistent && n == segments {
        assert!(bodies == orig[at..at + len], "the packets put together are the datagram");
    } else if !consistent {
        assert_eq!(n, 0, "an IPv6 sender on an IPv4 device is dropped");
    }
    assert!(bodies.len() <= len, "more bytes out than in");

    // Identification recovery, checked against the header it implies.
    let mut recovery = IdentRecovery::new();
    let (mut recovered, mut icrc_ok) = (0, 0);
    for pkt in &packets {
        let Ok(p) = RoceV2Packet::new_checked(&pkt[..]) else { continue };
        let (computed, carried) = (p.computed_icrc(), p.transport().icrc());
        if computed == carried {
            icrc_ok += 1;
        }
        if computed == carried || p.ipv4().is_none() {
            continue;
        }
        if let Some(ident) = recovery.recover(pkt.len(), computed, carried) {
            recovered += 1;
            let mut fixed = pkt.clone();
            fixed[4..6].copy_from_slice(&ident.to_be_bytes());
            fixed[10..12].copy_from_slice(&[0, 0]);
            let sum = rdma_wire::ipv4::checksum(&fixed[..20]);
            fixed[10..12].copy_from_slice(&sum.to_be_bytes());
            let p = RoceV2Packet::new_checked(&fixed[..]).expect("only the Identification changed");
            assert!(p.icrc_ok(), "Identification {ident} recovered, but the ICRC does not check out with it");
        }
    }
    // The engine, with no QP: every packet is counted, and dropped or a CNP.
    let mut ep = Endpoint::new(local);
    ep.set_ipv4_ident_unknown(true);
    for pkt in &packets {
        ep.handle_packet(Instant::from_nanos(0), pkt);
    }
    let s = ep.stats();
    assert_eq!(s.packets_received, n as u64);
    assert_eq!(s.drops.values().sum::<u64>() + s.cnps_received, n as u64, "every packet accounted for: {s:?}");
    assert_eq!(s.ipv4_ident_recovered, recovered, "the engine recovers what the solver does");
    let ce = if tos & 3 == 3 { icrc_ok + recovered } else { 0 };
    assert_eq!(s.ecn_ce_received, ce, "CE counted on every packet past the ICRC check, and only then");
}

/// The rebuilt headers of one packet agree with its length and the datagram's sender.
fn check_headers(pkt: &[u8], hl: usize, src: SocketAddr, (tos, hop_limit): (u8, u8), local: IpAddr) {
    assert!(pkt.len() >= hl + 8, "a packet without room for its headers");
    let be = |at: usize| usize::from(u16::from_be_bytes([pkt[at], pkt[at + 1]]));
    let udp = &pkt[hl..];
    assert_eq!(be(hl + 4), udp.len(), "UDP length");
    assert_eq!(be(hl), usize::from(src.port()), "UDP source port");
    assert_eq!(be(hl + 2), usize::from(ROCE_V2_PORT), "UDP destination port");
    match (src.ip(), local) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            assert_eq!(pkt[0], 0x45);
            assert_eq!(pkt[1], tos, "IPv4 TOS");
            assert_eq!(pkt[8], hop_limit, "IPv4 TTL");
            assert_eq!(be(2), pkt.len(), "IPv4 total length");
            assert_eq!(rdma_wire::ipv4::checksum(&pkt[..20]), 0, "IPv4 header checksum");
            assert_eq!((&pkt[12..16], &pkt[16..20]), (&s.octets()[..], &d.octets()[..]));
        }
        (_, IpAddr::V6(d)) => {
            assert_eq!(pkt[0] >> 4, 6);
            assert_eq!((pkt[0] << 4) | (pkt[1] >> 4), tos, "IPv6 traffic class");
            assert_eq!(pkt[7], hop_limit, "IPv6 hop limit");
            assert_eq!(be(4), pkt.len() - 40, "IPv6 payload length");
            assert_eq!(&pkt[24..40], &d.octets()[..]);
        }
        (IpAddr::V6(_), IpAddr::V4(_)) => panic!("an IPv6 sender's packet handed on by an IPv4 device"),
    }
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
