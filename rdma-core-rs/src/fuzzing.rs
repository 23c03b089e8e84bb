//! Bodies of the fuzz targets that exercise code of this crate (the thin
//! `fuzz_target!` wrappers live in `fuzz/`; the UDP receive path's is in
//! `rdma_link::fuzzing`). Each is also run over its
//! checked-in seed corpus by an ordinary test (`tests/fuzz_corpus_*.rs`).
//! Every oracle panics on a violation; nothing else may panic.

use rdma_transport::{Endpoint, Instant};

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
        Ok(Some(rdma_link::FrameMeta {
            len: n,
            src,
            arrival: std::time::SystemTime::UNIX_EPOCH,
            traffic_class: None,
            datagram: None,
        }))
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
