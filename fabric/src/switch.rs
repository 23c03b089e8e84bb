//! A switch: routing by destination IP, and per output port two queues
//! counted in bytes: a strict-priority control queue (ACKs, NAKs, CNPs: the
//! packets that are not ECN-capable, HPCC's never-marked queue 0, §1.1) and
//! the data queue with RED-style ECN marking at dequeue (§1.1). Both share
//! the port's drop-tail buffer limit.
//!
//! With PFC on (§3.3), data is the lossless priority: each ingress port
//! counts the data bytes it brought in that are still queued anywhere in
//! the switch; crossing XOFF asks the fabric to pause the upstream, falling
//! to XON asks it to resume, and a data packet is dropped only when it would
//! take its ingress past XOFF + headroom. Lossless data is then bounded by
//! those ingress limits rather than by the egress drop-tail (as in a shared
//! buffer with reserved headroom); control stays lossy under the port limit.

use crate::lines::Lined;
use crate::multipath::{pick, Multipath};
use crate::packet::Packet;
use crate::pfc::PfcConfig;
use crate::routes::RouteTable;
use rdma_transport::sim::{mark_ce, Rng};
use std::collections::VecDeque;
use std::net::Ipv4Addr;

/// RED/ECN marking parameters of an egress queue (§1.1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Red {
    pub kmin_bytes: u64,
    pub kmax_bytes: u64,
    pub pmax: f64,
}

impl Red {
    /// The paper's 40G values: 5 KB / 200 KB / 1 % (§1.5).
    pub const PAPER: Red = Red { kmin_bytes: 5_000, kmax_bytes: 200_000, pmax: 0.01 };

    /// The marking probability p(q) for a queue of `q` bytes.
    pub fn probability(&self, q: u64) -> f64 {
        if q <= self.kmin_bytes {
            0.0
        } else if q <= self.kmax_bytes {
            self.pmax * (q - self.kmin_bytes) as f64 / (self.kmax_bytes - self.kmin_bytes).max(1) as f64
        } else {
            1.0
        }
    }

    pub fn should_mark(&self, q: u64, rng: &mut Rng) -> bool {
        rng.chance(self.probability(q))
    }
}

/// Whether an IP packet is ECN-capable (ECT(0), ECT(1) or already CE).
pub fn ecn_capable(packet: &[u8]) -> bool {
    match packet.first().map(|b| b >> 4) {
        Some(4) => packet.len() >= 20 && packet[1] & 3 != 0,
        Some(6) => packet.len() >= 40 && packet[1] & 0x30 != 0,
        _ => false,
    }
}

/// The IPv4 destination of a packet.
pub fn ipv4_dst(packet: &[u8]) -> Option<Ipv4Addr> {
    (packet.len() >= 20 && packet[0] >> 4 == 4).then(|| Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]))
}

/// The IPv4 source of a packet.
pub fn ipv4_src(packet: &[u8]) -> Option<Ipv4Addr> {
    (packet.len() >= 20 && packet[0] >> 4 == 4).then(|| Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]))
}

/// The RoCE v2 5-tuple hash ECMP uses: FNV-1a over source and destination
/// address, protocol and UDP ports. Deterministic, and the UDP source port
/// (per QP) is the entropy, as in real RoCE fabrics.
pub fn flow_hash(packet: &[u8]) -> Option<u64> {
    let ihl = usize::from(packet.first()? & 0xf) * 4;
    if packet[0] >> 4 != 4 || packet.len() < ihl + 4 || packet[9] != 17 {
        return None;
    }
    let key = [&packet[12..20], &packet[9..10], &packet[ihl..ihl + 4]];
    Some(
        key.iter()
            .flat_map(|k| k.iter())
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)),
    )
}

/// One output port's queues.
#[derive(Debug, Default)]
pub struct Egress {
    control: VecDeque<Lined<Packet>>,
    /// Data packets and the ingress port each came in on.
    data: VecDeque<Lined<(Packet, usize)>>,
    control_bytes: u64,
    data_bytes: u64,
    pub drops: u64,
    pub marks: u64,
    /// Data packets that left through this port.
    pub data_sent: u64,
}

impl Egress {
    /// Bytes in the data queue: what RED looks at and what the reports show.
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.control.is_empty() && self.data.is_empty()
    }
}

/// PFC state of one ingress port for the data priority.
#[derive(Debug, Default, Clone, Copy)]
pub struct Ingress {
    /// Data bytes that came in here and are still queued in the switch.
    pub bytes: u64,
    /// Whether the upstream has been told to pause (and not yet to resume).
    pub xoff: bool,
    /// Bumped at every XOFF, so a stale refresh chain stops.
    pub generation: u64,
    /// The most bytes ever held, to compare with XOFF + headroom.
    pub peak_bytes: u64,
}

/// What happened to a packet offered to a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Queued on egress `port`; `pause`: the ingress just crossed XOFF.
    Queued {
        port: usize,
        pause: bool,
    },
    Dropped,
    /// No route to the destination.
    Unroutable,
}

#[derive(Debug)]
pub struct Switch {
    pub red: Red,
    /// Per port, shared by its two queues.
    pub buffer_bytes: u64,
    /// A switch-wide pool every egress queue draws from, as in switches
    /// whose ports share one packet buffer: a lossy packet is dropped when
    /// the switch's total would exceed it, even if its port has room.
    /// `None`: each port has `buffer_bytes` of its own.
    pub shared_bytes: Option<u64>,
    /// Bytes queued on every egress port together.
    pub queued_bytes: u64,
    /// Next hops by destination, and equal-cost groups where there is
    /// more than one: chosen by [`Self::multipath`] (per flow by
    /// [`flow_hash`] by default).
    pub routes: RouteTable,
    pub multipath: Multipath,
    /// This switch's own generator for spraying: seeded per switch, so a
    /// run replays and one switch's draws do not shift another's.
    pub spray_rng: Rng,
    pub egress: Vec<Egress>,
    pub ingress: Vec<Ingress>,
    pub pfc: Option<PfcConfig>,
    /// The LFT and SL2VL of an IB switch (`--link ib`).
    pub ib: Option<crate::ib::IbSwitch>,
}

impl Switch {
    pub fn new(ports: usize, red: Red, buffer_bytes: u64) -> Switch {
        Switch {
            red,
            buffer_bytes,
            shared_bytes: None,
            queued_bytes: 0,
            routes: RouteTable::default(),
            multipath: Multipath::Ecmp,
            spray_rng: Rng::new(0),
            egress: (0..ports).map(|_| Egress::default()).collect(),
            ingress: vec![Ingress::default(); ports],
            pfc: None,
            ib: None,
        }
    }

    /// The egress port for `packet`: one of its equal-cost group as
    /// [`Self::multipath`] picks (by 5-tuple hash, at random, or the port
    /// with the fewest queued bytes), else the single route.
    pub fn route(&mut self, packet: &[u8]) -> Option<usize> {
        let dst = ipv4_dst(packet)?;
        let route = self.routes.get(dst)?;
        if let (Some(g), Some(h)) = (route.group, flow_hash(packet)) {
            if !g.is_empty() {
                let egress = &self.egress;
                let load = |p: usize| egress[p].data_bytes + egress[p].control_bytes;
                return Some(pick(self.multipath, g, h, load, &mut self.spray_rng));
            }
        }
        route.port
    }

    /// Routes and enqueues a packet that came in on `in_port`, or drops it:
    /// drop-tail on the egress port, or with PFC, data beyond XOFF + headroom.
    pub fn admit(&mut self, packet: Packet, in_port: usize) -> Admit {
        let Some(port) = self.route(packet.headers()) else {
            return Admit::Unroutable;
        };
        let len = packet.wire_len() as u64;
        let data = ecn_capable(packet.headers());
        let q = &mut self.egress[port];
        if let (true, Some(pfc)) = (data, self.pfc) {
            let ing = &mut self.ingress[in_port];
            if ing.bytes + len > pfc.xoff_bytes + pfc.headroom_bytes {
                q.drops += 1;
                return Admit::Dropped;
            }
            ing.bytes += len;
            ing.peak_bytes = ing.peak_bytes.max(ing.bytes);
            self.queued_bytes += len;
            q.data_bytes += len;
            q.data.push_back(Lined((packet, in_port)));
            let pause = !ing.xoff && ing.bytes >= pfc.xoff_bytes;
            if pause {
                ing.xoff = true;
                ing.generation += 1;
            }
            return Admit::Queued { port, pause };
        }
        // Lossy: with PFC the control queue has the port limit to itself.
        let used = if self.pfc.is_some() { q.control_bytes } else { q.control_bytes + q.data_bytes };
        let pool_full = self.shared_bytes.is_some_and(|pool| self.queued_bytes + len > pool);
        if used + len > self.buffer_bytes || pool_full {
            q.drops += 1;
            return Admit::Dropped;
        }
        self.queued_bytes += len;
        if data {
            q.data_bytes += len;
            q.data.push_back(Lined((packet, in_port)));
        } else {
            q.control_bytes += len;
            q.control.push_back(Lined(packet));
        }
        Admit::Queued { port, pause: false }
    }

    /// The next packet to leave `port`: control first, then data unless
    /// `data_paused`; a data packet is marked CE with p(q), q the data
    /// queue's bytes as it leaves (marking at dequeue, as both reference
    /// simulators do, §1.1). The second value is an ingress port whose
    /// bytes just fell to XON, so the fabric sends it a resume.
    pub fn dequeue(&mut self, port: usize, data_paused: bool, rng: &mut Rng) -> Option<(Packet, Option<usize>)> {
        let red = self.red;
        let q = &mut self.egress[port];
        if let Some(Lined(p)) = q.control.pop_front() {
            q.control_bytes -= p.wire_len() as u64;
            self.queued_bytes -= p.wire_len() as u64;
            return Some((p, None));
        }
        if data_paused {
            return None;
        }
        let Lined((mut p, in_port)) = q.data.pop_front()?;
        let depth = q.data_bytes;
        let len = p.wire_len() as u64;
        q.data_bytes -= len;
        self.queued_bytes -= len;
        q.data_sent += 1;
        if red.should_mark(depth, rng) {
            mark_ce(p.headers_mut());
            q.marks += 1;
        }
        let mut resume = None;
        if let Some(pfc) = self.pfc {
            let ing = &mut self.ingress[in_port];
            ing.bytes -= len;
            if ing.xoff && ing.bytes <= pfc.xon_bytes {
                ing.xoff = false;
                resume = Some(in_port);
            }
        }
        Some((p, resume))
    }

    /// Asks the cache for the packet egress `port` sends next (a hint:
    /// the packet was written when it was queued, and on a busy fabric
    /// its lines are cold by the time the port frees; the dequeue waited
    /// for them). Changes nothing.
    pub fn prefetch_head(&self, port: usize) {
        let Some(q) = self.egress.get(port) else { return };
        if let Some(p) = q.control.front() {
            rdma_transport::prefetch::lines_of(p);
        } else if let Some(p) = q.data.front() {
            rdma_transport::prefetch::lines_of(p);
        }
    }

    /// Every packet queued on any port.
    pub fn queued_packets_mut(&mut self) -> impl Iterator<Item = &mut Packet> {
        self.egress
            .iter_mut()
            .flat_map(|q| q.control.iter_mut().map(|l| &mut l.0).chain(q.data.iter_mut().map(|l| &mut l.0 .0)))
    }

    /// Whether egress `port` has data waiting.
    pub fn has_data(&self, port: usize) -> bool {
        !self.egress[port].data.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal IPv4/UDP header from 10.0.0.9 to 10.0.0.1, port 4791.
    fn udp(src_port: u16) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 0, 0, 9]);
        p[16..20].copy_from_slice(&[10, 0, 0, 1]);
        p[20..22].copy_from_slice(&src_port.to_be_bytes());
        p[22..24].copy_from_slice(&4791u16.to_be_bytes());
        p
    }

    #[test]
    fn a_shared_buffer_drops_when_the_switch_is_full_though_the_port_has_room() {
        // Two egress ports of 100 bytes each, 150 bytes for the switch.
        let mut sw = Switch::new(2, Red::PAPER, 100);
        sw.shared_bytes = Some(150);
        let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        sw.routes.set_port(a, 0);
        sw.routes.set_port(b, 1);
        let to = |dst: Ipv4Addr, len: usize| {
            let mut p = udp(1);
            p.resize(len, 0);
            p[16..20].copy_from_slice(&dst.octets());
            Packet::from(p)
        };
        assert!(matches!(sw.admit(to(a, 50), 0), Admit::Queued { port: 0, .. }));
        assert!(matches!(sw.admit(to(a, 50), 0), Admit::Queued { port: 0, .. }));
        assert!(matches!(sw.admit(to(b, 50), 0), Admit::Queued { port: 1, .. }));
        // Port 1 holds 50 of its 100, but the switch holds 150 of 150.
        assert_eq!(sw.admit(to(b, 40), 0), Admit::Dropped);
        assert_eq!(sw.queued_bytes, 150);
        // Room again once something leaves, on any port.
        let mut rng = Rng::new(1);
        assert!(sw.dequeue(0, false, &mut rng).is_some());
        assert_eq!(sw.queued_bytes, 100);
        assert!(matches!(sw.admit(to(b, 40), 0), Admit::Queued { port: 1, .. }));
        // Without the pool, only the port's own limit counts.
        sw.shared_bytes = None;
        assert!(matches!(sw.admit(to(a, 50), 0), Admit::Queued { port: 0, .. }));
        assert_eq!(sw.queued_bytes, 190);
    }

    /// A packet without a flow hash (not UDP) takes the single route; a
    /// destination with only a group has none for it.
    #[test]
    fn a_packet_without_a_flow_hash_takes_the_single_route() {
        let mut sw = Switch::new(5, Red::PAPER, 1000);
        let mut tcp = udp(49152);
        tcp[9] = 6;
        let dst = Ipv4Addr::new(10, 0, 0, 1);
        sw.routes.set_group(dst, vec![1, 2, 3]);
        assert_eq!(sw.route(&tcp), None, "a group only: no route without a hash");
        assert!(matches!(sw.route(&udp(49152)), Some(1..=3)));
        sw.routes.set_port(dst, 4);
        assert_eq!(sw.route(&tcp), Some(4));
        sw.routes.set_group(dst, Vec::new());
        assert_eq!(sw.route(&udp(49152)), Some(4), "an empty group: the single route");
    }

    #[test]
    fn ecmp_spreads_source_ports_and_is_deterministic() {
        let mut sw = Switch::new(5, Red::PAPER, 1000);
        let dst = Ipv4Addr::new(10, 0, 0, 1);
        sw.routes.set_port(dst, 0);
        sw.routes.set_group(dst, vec![0, 1, 2, 3]);
        let mut count = [0u32; 4];
        for port in 49152..49152 + 400 {
            let p = udp(port);
            let chosen = sw.route(&p).unwrap();
            assert_eq!(sw.route(&p), Some(chosen), "the same flow always takes the same path");
            count[chosen] += 1;
        }
        assert!(count.iter().all(|&c| (60..=140).contains(&c)), "{count:?}");
        // Not UDP: the single route.
        let mut tcp = udp(1);
        tcp[9] = 6;
        assert_eq!(sw.route(&tcp), Some(0));
        assert_eq!(flow_hash(&udp(7)), flow_hash(&udp(7)));
        assert_ne!(flow_hash(&udp(7)), flow_hash(&udp(8)));
    }

    #[test]
    fn red_matches_the_reference_table() {
        // §2.4: 5 KB / 200 KB / 1 %.
        let r = Red::PAPER;
        assert_eq!(r.probability(5_000), 0.0);
        assert!((r.probability(50_000) - 0.00231).abs() < 1e-5);
        assert!((r.probability(100_000) - 0.00487).abs() < 1e-5);
        assert!((r.probability(200_000) - 0.01).abs() < 1e-12);
        assert_eq!(r.probability(201_000), 1.0);
    }
}
