//! A switch: routing by destination IP, and per output port two queues
//! counted in bytes: a strict-priority control queue (ACKs, NAKs, CNPs: the
//! packets that are not ECN-capable, HPCC's never-marked queue 0, §1.1) and
//! the data queue with RED-style ECN marking at dequeue (§1.1). Both share
//! the port's drop-tail buffer limit.

use rdma_transport::sim::{mark_ce, Rng};
use std::collections::{HashMap, VecDeque};
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

/// One output port's queues.
#[derive(Debug, Default)]
pub struct Egress {
    control: VecDeque<Vec<u8>>,
    data: VecDeque<Vec<u8>>,
    control_bytes: u64,
    data_bytes: u64,
    pub drops: u64,
    pub marks: u64,
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

/// What happened to a packet offered to a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Queued(usize),
    Dropped,
    /// No route to the destination.
    Unroutable,
}

#[derive(Debug)]
pub struct Switch {
    pub red: Red,
    /// Per port, shared by its two queues.
    pub buffer_bytes: u64,
    pub routes: HashMap<Ipv4Addr, usize>,
    pub egress: Vec<Egress>,
}

impl Switch {
    pub fn new(ports: usize, red: Red, buffer_bytes: u64) -> Switch {
        Switch { red, buffer_bytes, routes: HashMap::new(), egress: (0..ports).map(|_| Egress::default()).collect() }
    }

    /// Routes and enqueues a packet, or drops it when the port's buffer is full (drop-tail).
    pub fn admit(&mut self, packet: Vec<u8>) -> Admit {
        let Some(port) = ipv4_dst(&packet).and_then(|d| self.routes.get(&d).copied()) else {
            return Admit::Unroutable;
        };
        let q = &mut self.egress[port];
        let len = packet.len() as u64;
        if q.control_bytes + q.data_bytes + len > self.buffer_bytes {
            q.drops += 1;
            return Admit::Dropped;
        }
        if ecn_capable(&packet) {
            q.data_bytes += len;
            q.data.push_back(packet);
        } else {
            q.control_bytes += len;
            q.control.push_back(packet);
        }
        Admit::Queued(port)
    }

    /// The next packet to leave `port`: control first; a data packet is
    /// marked CE with p(q), q the data queue's bytes as it leaves (marking
    /// at dequeue, as both reference simulators do, §1.1).
    pub fn dequeue(&mut self, port: usize, rng: &mut Rng) -> Option<Vec<u8>> {
        let red = self.red;
        let q = &mut self.egress[port];
        if let Some(p) = q.control.pop_front() {
            q.control_bytes -= p.len() as u64;
            return Some(p);
        }
        let mut p = q.data.pop_front()?;
        let depth = q.data_bytes;
        q.data_bytes -= p.len() as u64;
        if red.should_mark(depth, rng) {
            mark_ce(&mut p);
            q.marks += 1;
        }
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
