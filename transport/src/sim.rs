//! A deterministic simulated network for the engine: endpoints joined by
//! links with latency, bandwidth, loss, duplication, reordering and bit
//! corruption, all driven by a seeded generator and a virtual clock, so a
//! seed replays a run exactly. A pcap writer records what was sent
//! (Ethernet/IP/UDP/RoCE), for `rdma-dump` and Wireshark.
//!
//! It is the test bed of the transport, and built to grow: a link is a
//! queue with a serialisation rate, the shape a switch port takes in the
//! congestion-control and InfiniBand-link work.

use crate::capture::CaptureWriter;
use crate::endpoint::{Endpoint, MAX_PACKET};
use crate::framing::LinkKind;
use crate::memory::{Access, Pd, RegionMemory};
use crate::qp::{AddressVector, CqId, Mtu, QpAttr, QpCap, QpInitAttr, QpState, QpType};
use crate::time::Instant;
use core::net::IpAddr;
use core::time::Duration;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;

pub use crate::rng::Rng;

/// One direction of a link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Propagation delay.
    pub latency: Duration,
    /// Serialisation rate in bits per second; 0 = infinitely fast.
    pub bandwidth_bps: u64,
    /// Probability that a packet is lost.
    pub loss: f64,
    /// Probability that a packet arrives twice.
    pub duplicate: f64,
    /// Probability that a packet is held back by `reorder_delay`, letting later ones pass.
    pub reorder: f64,
    pub reorder_delay: Duration,
    /// Probability that one bit of a packet is flipped.
    pub corrupt: f64,
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig {
            latency: Duration::from_micros(5),
            bandwidth_bps: 100_000_000_000,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(20),
            corrupt: 0.0,
        }
    }
}

/// What the links did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
    pub undeliverable: u64,
    /// Packets whose payload the endpoint gave by reference (see
    /// [`crate::Endpoint::set_payload_by_reference`]), assembled here as a
    /// scattered send would put them on the wire.
    pub by_reference: u64,
}

/// A decision the test makes about a packet before the link's own faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Deliver,
    Drop,
    /// Deliver it marked CE (congestion experienced), as a congested
    /// switch would: only an ECN-capable packet (ECT(0) or ECT(1)) is
    /// marked, the IPv4 header checksum is fixed (the ICRC masks the ECN
    /// bits); any other packet is delivered as it is.
    MarkCe,
    /// Deliver it this much later than the link would, letting later
    /// packets pass it (as two sockets of one receiver may be read in
    /// either order).
    Delay(Duration),
}

/// (virtual time, sender index, packet) -> verdict.
type Filter = Box<dyn FnMut(Instant, usize, &[u8]) -> Verdict>;

/// Sets the ECN bits of an ECN-capable IP packet to CE; see [`Verdict::MarkCe`].
pub fn mark_ce(packet: &mut [u8]) {
    match packet.first().map(|b| b >> 4) {
        Some(4) if packet.len() >= 20 && packet[1] & 3 != 0 => {
            packet[1] |= 3;
            packet[10..12].copy_from_slice(&[0, 0]);
            let sum = rdma_wire::ipv4::checksum(&packet[..20]);
            packet[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        // IPv6: the traffic class straddles bytes 0 and 1, ECN in bits 4-5 of byte 1.
        Some(6) if packet.len() >= 40 && packet[1] & 0x30 != 0 => packet[1] |= 0x30,
        _ => {}
    }
}

/// A packet on a link: (arrival, sequence number for ties, destination, bytes).
type InFlight = Reverse<(Instant, u64, usize, Vec<u8>)>;

/// Endpoints on a simulated network. Every pair talks over a link with the
/// same [`LinkConfig`]; endpoints are found by their local address.
pub struct Sim {
    pub now: Instant,
    endpoints: Vec<Endpoint>,
    config: LinkConfig,
    rng: Rng,
    /// (arrival, sequence, destination index, packet)
    in_flight: BinaryHeap<InFlight>,
    seq: u64,
    /// When each sender's link is free again (serialisation).
    busy_until: Vec<Instant>,
    pub stats: LinkStats,
    pcap: Option<Capture>,
    filter: Option<Filter>,
}

/// A capture asked for, begun once the link kind is known.
enum Capture {
    Waiting(Box<dyn Write>),
    Writing(CaptureWriter<Box<dyn Write>>),
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("now", &self.now)
            .field("endpoints", &self.endpoints.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Sim {
    pub fn new(seed: u64, config: LinkConfig) -> Sim {
        Sim {
            now: Instant::ZERO,
            endpoints: Vec::new(),
            config,
            rng: Rng::new(seed),
            in_flight: BinaryHeap::new(),
            seq: 0,
            busy_until: Vec::new(),
            stats: LinkStats::default(),
            pcap: None,
            filter: None,
        }
    }

    /// Records every packet sent into `out`: Ethernet frames for RoCE, ERF
    /// records for native IB (see [`crate::capture`]). The format follows
    /// the endpoints' link kind, so the file is begun at the first packet.
    pub fn capture(&mut self, out: Box<dyn Write>) -> std::io::Result<()> {
        self.pcap = Some(Capture::Waiting(out));
        Ok(())
    }

    /// Lets a test decide the fate of specific packets (by sender index and
    /// bytes) before the random faults apply.
    pub fn set_filter(&mut self, mut f: impl FnMut(usize, &[u8]) -> Verdict + 'static) {
        self.filter = Some(Box::new(move |_, i, p| f(i, p)));
    }

    /// [`Sim::set_filter`] that is also told the virtual time at which each
    /// packet leaves its sender (for tests of pacing and trajectories).
    pub fn set_tap(&mut self, f: impl FnMut(Instant, usize, &[u8]) -> Verdict + 'static) {
        self.filter = Some(Box::new(f));
    }

    pub fn clear_filter(&mut self) {
        self.filter = None;
    }

    pub fn set_config(&mut self, config: LinkConfig) {
        self.config = config;
    }

    pub fn add_endpoint(&mut self, ep: Endpoint) -> usize {
        self.endpoints.push(ep);
        self.busy_until.push(Instant::ZERO);
        self.endpoints.len() - 1
    }

    pub fn ep(&mut self, i: usize) -> &mut Endpoint {
        &mut self.endpoints[i]
    }

    /// The endpoint a packet goes to: by its DLID on native IB (the LRH's
    /// bytes 2 and 3), else by its destination GID or IP address.
    fn index_of(&self, addr: IpAddr, packet: &[u8]) -> Option<usize> {
        if self.endpoints.first().is_some_and(|e| e.link() == LinkKind::Ib) {
            let dlid = u16::from_be_bytes([*packet.get(2)?, *packet.get(3)?]);
            return self.endpoints.iter().position(|e| e.lid() == dlid);
        }
        let addr = addr.to_canonical();
        self.endpoints.iter().position(|e| e.local_addr().to_canonical() == addr)
    }

    /// Whether a packet goes to a multicast group: by its DLID on native
    /// IB, else by its destination GID or IP address.
    fn is_multicast(&self, addr: IpAddr, packet: &[u8]) -> bool {
        if self.endpoints.first().is_some_and(|e| e.link() == LinkKind::Ib) {
            let dlid = u16::from_be_bytes([packet.get(2).copied().unwrap_or(0), packet.get(3).copied().unwrap_or(0)]);
            return crate::mcast::is_multicast_lid(dlid);
        }
        crate::mcast::is_multicast_gid(addr)
    }

    fn record(&mut self, packet: &[u8]) {
        let link = self.endpoints.first().map_or(LinkKind::RoceV2, |e| e.link());
        if let Some(Capture::Waiting(_)) = self.pcap {
            let Some(Capture::Waiting(out)) = self.pcap.take() else { unreachable!("matched") };
            match CaptureWriter::new(out, link) {
                Ok(w) => self.pcap = Some(Capture::Writing(w)),
                Err(e) => tracing::warn!(error = %e, "sim capture: the file header could not be written"),
            }
        }
        let Some(Capture::Writing(w)) = self.pcap.as_mut() else { return };
        let ethertype: [u8; 2] = match link {
            LinkKind::RoceV1 => rdma_wire::ethernet::ETHERTYPE_ROCE_V1.to_be_bytes(),
            LinkKind::Ib => rdma_wire::ethernet::ETHERTYPE_IB.to_be_bytes(),
            LinkKind::RoceV2 if packet[0] >> 4 == 6 => [0x86, 0xdd],
            LinkKind::RoceV2 => [0x08, 0x00],
        };
        let mut frame = Vec::with_capacity(14 + packet.len());
        frame.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01]);
        frame.extend_from_slice(&ethertype);
        frame.extend_from_slice(packet);
        let _ = w.frame(Duration::from_nanos(self.now.as_nanos()), &frame);
    }

    /// Moves every packet the endpoints want to send onto the links.
    fn transmit_all(&mut self) {
        let mut buf = vec![0u8; MAX_PACKET];
        for i in 0..self.endpoints.len() {
            let span = tracing::debug_span!("ep", addr = %self.endpoints[i].local_addr());
            let _g = span.enter();
            while let Some(tx) = self.endpoints[i].poll_transmit(self.now, &mut buf) {
                tracing::trace!(len = tx.wire_len(), "sent");
                let packet = match &tx.payload {
                    None => buf[..tx.len].to_vec(),
                    Some(p) => {
                        self.stats.by_reference += 1;
                        let mut payload = vec![0u8; p.len];
                        p.memory.read(p.offset, &mut payload);
                        p.seal(&mut buf[..tx.len], &payload);
                        [&buf[..p.at], &payload[..], &buf[p.at..tx.len]].concat()
                    }
                };
                self.stats.sent += 1;
                self.record(&packet);
                // A multicast packet floods, as a switch without snooping
                // would: every other endpoint gets it and keeps it only
                // for groups it has members in.
                let dsts: Vec<usize> = if self.is_multicast(tx.dest, &packet) {
                    (0..self.endpoints.len()).filter(|&d| d != i).collect()
                } else {
                    self.index_of(tx.dest, &packet).into_iter().collect()
                };
                if dsts.is_empty() {
                    self.stats.undeliverable += 1;
                    continue;
                }
                let mut packet = packet;
                let mut held = Duration::ZERO;
                if let Some(f) = self.filter.as_mut() {
                    match f(self.now, i, &packet) {
                        Verdict::Drop => {
                            self.stats.lost += 1;
                            continue;
                        }
                        Verdict::MarkCe => mark_ce(&mut packet),
                        Verdict::Delay(d) => held = d,
                        Verdict::Deliver => {}
                    }
                }
                let last = dsts.len() - 1;
                for (k, &dst) in dsts.iter().enumerate() {
                    let copy = if k == last { std::mem::take(&mut packet) } else { packet.clone() };
                    self.launch(i, dst, copy, held);
                }
            }
        }
    }

    /// Puts one packet on the link from `src` to `dst`, applying faults;
    /// it arrives `held` later than the link alone would deliver it.
    fn launch(&mut self, src: usize, dst: usize, mut packet: Vec<u8>, held: Duration) {
        let c = self.config;
        let serialise = if c.bandwidth_bps == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos((packet.len() as u64 * 8 * 1_000_000_000).div_ceil(c.bandwidth_bps))
        };
        let start = self.now.max(self.busy_until[src]);
        self.busy_until[src] = start + serialise;
        if self.rng.chance(c.loss) {
            tracing::trace!(len = packet.len(), "link: lost");
            self.stats.lost += 1;
            return;
        }
        if self.rng.chance(c.corrupt) {
            let bit = self.rng.below(packet.len() as u64 * 8);
            packet[(bit / 8) as usize] ^= 1 << (bit % 8);
            tracing::trace!(bit, "link: corrupted");
            self.stats.corrupted += 1;
        }
        let mut arrive = start + serialise + c.latency + held;
        if self.rng.chance(c.reorder) {
            arrive += c.reorder_delay;
            tracing::trace!("link: held back");
            self.stats.reordered += 1;
        }
        if self.rng.chance(c.duplicate) {
            self.stats.duplicated += 1;
            self.seq += 1;
            self.in_flight.push(Reverse((arrive + Duration::from_nanos(1), self.seq, dst, packet.clone())));
        }
        self.seq += 1;
        self.in_flight.push(Reverse((arrive, self.seq, dst, packet)));
    }

    /// When something next happens: a packet arrives or a timer fires.
    pub fn next_event(&self) -> Option<Instant> {
        let arrival = self.in_flight.peek().map(|Reverse((t, ..))| *t);
        let timer = self.endpoints.iter().filter_map(|e| e.poll_timeout()).min();
        arrival.into_iter().chain(timer).min()
    }

    /// Sends what is ready, then advances to the next event and handles
    /// it. Returns false when nothing will ever happen again.
    pub fn step(&mut self) -> bool {
        self.transmit_all();
        let Some(t) = self.next_event() else { return false };
        self.now = self.now.max(t);
        while let Some(Reverse((at, ..))) = self.in_flight.peek() {
            if *at > self.now {
                break;
            }
            let Reverse((_, _, dst, packet)) = self.in_flight.pop().expect("peeked");
            self.stats.delivered += 1;
            let span = tracing::debug_span!("ep", addr = %self.endpoints[dst].local_addr());
            let _g = span.enter();
            self.endpoints[dst].handle_packet(self.now, &packet);
        }
        for e in &mut self.endpoints {
            if e.poll_timeout().is_some_and(|d| d <= self.now) {
                let span = tracing::debug_span!("ep", addr = %e.local_addr());
                let _g = span.enter();
                e.handle_timeout(self.now);
            }
        }
        self.transmit_all();
        true
    }

    /// Steps until `done` holds, nothing is left to do, or `limit` of
    /// virtual time has passed. Returns whether `done` held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Sim) -> bool) -> bool {
        let end = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            if self.next_event().is_some_and(|t| t > end) || !self.step() {
                return done(self);
            }
        }
    }

    /// Steps until nothing is left to do or `limit` has passed.
    pub fn run_idle(&mut self, limit: Duration) {
        self.run_until(limit, |_| false);
    }
}

/// One side of a connected QP pair built by [`connect`].
#[derive(Debug, Clone)]
pub struct Side {
    pub ep: usize,
    pub qpn: u32,
    pub pd: Pd,
    pub send_cq: CqId,
    pub recv_cq: CqId,
    /// A registered buffer with every access right.
    pub mem: RegionMemory,
    pub va: u64,
    pub lkey: u32,
    pub rkey: u32,
}

/// How [`connect`] sets up the pair.
#[derive(Debug, Clone, Copy)]
pub struct PairConfig {
    pub qp_type: QpType,
    pub mtu: Mtu,
    pub mem_len: usize,
    pub a_psn: u32,
    pub b_psn: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub cap: QpCap,
    /// The link kind of both endpoints: RoCE v2 (127.0.0.1 and .2), RoCE
    /// v1 (GIDs fe80::1 and fe80::2), or native IB (LIDs 1 and 2, local
    /// routes without a GRH).
    pub link: LinkKind,
}

impl Default for PairConfig {
    fn default() -> PairConfig {
        PairConfig {
            qp_type: QpType::Rc,
            mtu: Mtu::Mtu1024,
            mem_len: 1 << 20,
            a_psn: 0x10,
            b_psn: 0x20,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            cap: QpCap { max_send_wr: 4096, max_recv_wr: 4096, ..QpCap::default() },
            link: LinkKind::RoceV2,
        }
    }
}

/// Adds two endpoints (127.0.0.1 and 127.0.0.2, or as [`PairConfig::link`]
/// says) and connects one QP on each, through the same RESET, INIT, RTR,
/// RTS steps an application takes.
pub fn connect(sim: &mut Sim, cfg: PairConfig) -> (Side, Side) {
    let addrs: [IpAddr; 2] = match cfg.link {
        LinkKind::RoceV2 => [[127, 0, 0, 1].into(), [127, 0, 0, 2].into()],
        _ => [[0xfe80, 0, 0, 0, 0, 0, 0, 1].into(), [0xfe80, 0, 0, 0, 0, 0, 0, 2].into()],
    };
    let mut sides = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let mut ep = Endpoint::with_seed(*addr, i as u64);
        ep.set_link(cfg.link, i as u16 + 1);
        let pd = ep.alloc_pd();
        let send_cq = ep.create_cq(65536);
        let recv_cq = ep.create_cq(65536);
        let mem = RegionMemory::zeroed(cfg.mem_len);
        let va = 0x7f00_0000_0000 + (i as u64) * 0x1_0000_0000;
        let (lkey, rkey) = ep.reg_mr(pd, va, mem.clone(), Access::ALL);
        let qpn = ep
            .create_qp(QpInitAttr {
                qp_type: cfg.qp_type,
                pd,
                send_cq,
                recv_cq,
                srq: None,
                cap: cfg.cap,
                sq_sig_all: false,
            })
            .expect("CQs exist");
        let idx = sim.add_endpoint(ep);
        sides.push(Side { ep: idx, qpn, pd, send_cq, recv_cq, mem, va, lkey, rkey });
    }
    let psns = [cfg.a_psn, cfg.b_psn];
    for i in 0..2 {
        let (me, peer) = (&sides[i], &sides[1 - i]);
        let ep = sim.ep(me.ep);
        let av = match cfg.link {
            LinkKind::Ib => AddressVector::lid(2 - i as u16, 0),
            _ => AddressVector::new(addrs[1 - i]),
        };
        bring_up_av(ep, me.qpn, av, peer.qpn, psns[1 - i], psns[i], &cfg);
    }
    let b = sides.pop().expect("two sides");
    let a = sides.pop().expect("two sides");
    (a, b)
}

/// Takes a QP through RESET, INIT, RTR and RTS as an application does:
/// towards `peer_qpn` at `peer` (ignored for UD), expecting `rq_psn` and
/// starting at `sq_psn`, with the timers and limits of `cfg`.
pub fn bring_up(ep: &mut Endpoint, qpn: u32, peer: IpAddr, peer_qpn: u32, rq_psn: u32, sq_psn: u32, cfg: &PairConfig) {
    bring_up_av(ep, qpn, AddressVector::new(peer), peer_qpn, rq_psn, sq_psn, cfg)
}

/// [`bring_up`] towards the peer `av` names (a GID, or a LID on native IB).
pub fn bring_up_av(
    ep: &mut Endpoint,
    qpn: u32,
    av: AddressVector,
    peer_qpn: u32,
    rq_psn: u32,
    sq_psn: u32,
    cfg: &PairConfig,
) {
    let ud = cfg.qp_type == QpType::Ud;
    let init = QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: (!ud).then_some(Access::ALL),
        qkey: ud.then_some(0x1111_1111),
        ..QpAttr::default()
    };
    ep.modify_qp(qpn, &init).expect("RESET to INIT");
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        path_mtu: Some(cfg.mtu),
        dest_qp_num: (!ud).then_some(peer_qpn),
        rq_psn: Some(rq_psn),
        av: (!ud).then_some(av),
        max_dest_rd_atomic: Some(cfg.max_rd_atomic),
        min_rnr_timer: Some(cfg.min_rnr_timer),
        ..QpAttr::default()
    };
    ep.modify_qp(qpn, &rtr).expect("INIT to RTR");
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(sq_psn),
        timeout: Some(cfg.timeout),
        retry_cnt: Some(cfg.retry_cnt),
        rnr_retry: Some(cfg.rnr_retry),
        max_rd_atomic: Some(cfg.max_rd_atomic),
        ..QpAttr::default()
    };
    ep.modify_qp(qpn, &rts).expect("RTR to RTS");
}
