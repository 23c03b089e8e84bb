//! The bottleneck itself, without I/O or clock: a byte-counted FIFO that
//! drains at a fixed rate, marks CE with RED on enqueue and drops at its
//! tail. The router feeds it packets and the time; the tests feed it
//! virtual time, so its arithmetic is checked exactly.

use rdma_fabric::switch::{ecn_capable, Red};
use rdma_transport::sim::{mark_ce, Rng};
use std::collections::VecDeque;
use std::time::Duration;

/// What happened to a packet offered to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Queued {
        marked: bool,
    },
    /// The buffer had no room for it (drop-tail).
    Dropped,
}

/// A packet waiting to leave, with the time it arrived.
#[derive(Debug)]
struct Queued {
    arrived: Duration,
    packet: Vec<u8>,
}

/// The egress queue of a rate-limited link.
#[derive(Debug)]
pub struct Bottleneck {
    rate_bps: u64,
    buffer_bytes: u64,
    /// `None`: no marking, drop-tail only.
    red: Option<Red>,
    rng: Rng,
    queue: VecDeque<Queued>,
    bytes: u64,
    /// When the link finishes sending what it has started: the head may
    /// start no earlier. Times count from the router's start.
    link_free_at: Duration,
    pub marks: u64,
    pub drops: u64,
}

impl Bottleneck {
    /// A link of `rate_bps` with `buffer_bytes` of queue; `red` marks
    /// ECN-capable packets (IPv4 and IPv6) by the queue they find.
    pub fn new(rate_bps: u64, buffer_bytes: u64, red: Option<Red>, seed: u64) -> Bottleneck {
        Bottleneck {
            rate_bps: rate_bps.max(1),
            buffer_bytes,
            red,
            rng: Rng::new(seed),
            queue: VecDeque::new(),
            bytes: 0,
            link_free_at: Duration::ZERO,
            marks: 0,
            drops: 0,
        }
    }

    /// Bytes waiting.
    pub fn queued_bytes(&self) -> u64 {
        self.bytes
    }

    /// Offers `packet` (an IP packet) arriving at `now`. Marking looks at
    /// the queue the packet finds, as a switch's egress marking does.
    pub fn admit(&mut self, now: Duration, mut packet: Vec<u8>) -> Admit {
        let len = packet.len() as u64;
        if self.bytes + len > self.buffer_bytes {
            self.drops += 1;
            return Admit::Dropped;
        }
        let mut marked = false;
        if let Some(red) = self.red {
            if ecn_capable(&packet) && red.should_mark(self.bytes, &mut self.rng) {
                mark_ce(&mut packet);
                self.marks += 1;
                marked = true;
            }
        }
        self.bytes += len;
        self.queue.push_back(Queued { arrived: now, packet });
        Admit::Queued { marked }
    }

    /// When the head of the queue may leave: when the link is free, or when
    /// it arrived if the link was idle then. `None` when empty.
    pub fn next_departure(&self) -> Option<Duration> {
        self.queue.front().map(|q| q.arrived.max(self.link_free_at))
    }

    /// Takes the head if it may leave at `now`, and books the link for its
    /// serialisation time. The booking starts at the departure time, not
    /// at `now`: a late wake-up sends a short burst instead of losing
    /// capacity, so the long-run rate is exact.
    pub fn pop(&mut self, now: Duration) -> Option<Vec<u8>> {
        let at = self.next_departure()?;
        if now < at {
            return None;
        }
        let q = self.queue.pop_front()?;
        let len = q.packet.len() as u64;
        self.bytes -= len;
        self.link_free_at = at + self.serialisation(len);
        Some(q.packet)
    }

    /// The time `len` bytes take on the link.
    pub fn serialisation(&self, len: u64) -> Duration {
        Duration::from_nanos((len * 8 * 1_000_000_000).div_ceil(self.rate_bps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 20-byte IPv4 header with a valid checksum, ECN bits `ecn`, and `pad` bytes after it.
    fn ipv4(ecn: u8, pad: usize) -> Vec<u8> {
        let mut p = vec![0u8; 20 + pad];
        p[0] = 0x45;
        p[1] = ecn;
        p[2..4].copy_from_slice(&((20 + pad) as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 77, 1, 1]);
        p[16..20].copy_from_slice(&[10, 77, 2, 1]);
        let sum = rdma_wire::ipv4::checksum(&p[..20]);
        p[10..12].copy_from_slice(&sum.to_be_bytes());
        p
    }

    const ALWAYS: Red = Red { kmin_bytes: 1000, kmax_bytes: 2000, pmax: 1.0 };

    #[test]
    fn drains_at_exactly_the_rate_when_backlogged() {
        // 1000-byte packets at 8 Mb/s: one per millisecond.
        let mut b = Bottleneck::new(8_000_000, 1 << 20, None, 1);
        for _ in 0..10 {
            b.admit(Duration::ZERO, ipv4(0, 980));
        }
        let mut departures = Vec::new();
        // Poll late and irregularly: departures stay on the 1 ms grid.
        let mut now = Duration::ZERO;
        while departures.len() < 10 {
            let at = b.next_departure().unwrap();
            now = now.max(at) + Duration::from_micros(now.as_micros() as u64 % 7 * 50);
            let p = b.pop(now).expect("due");
            assert_eq!(p.len(), 1000);
            departures.push(at);
        }
        let expect: Vec<Duration> = (0..10).map(Duration::from_millis).collect();
        assert_eq!(departures, expect);
        assert_eq!(b.queued_bytes(), 0);
    }

    #[test]
    fn an_idle_link_sends_at_arrival() {
        let mut b = Bottleneck::new(8_000_000, 1 << 20, None, 1);
        b.admit(Duration::from_millis(5), ipv4(0, 980));
        assert_eq!(b.pop(Duration::from_millis(4)), None);
        assert!(b.pop(Duration::from_millis(5)).is_some());
        // The next one, arriving while the link is still busy, waits for it.
        b.admit(Duration::from_micros(5_500), ipv4(0, 980));
        assert_eq!(b.next_departure(), Some(Duration::from_millis(6)));
    }

    #[test]
    fn red_marks_only_ect_packets_above_kmin_and_fixes_the_checksum() {
        let mut b = Bottleneck::new(1_000_000, 1 << 20, Some(ALWAYS), 1);
        // Below Kmin: no mark.
        assert_eq!(b.admit(Duration::ZERO, ipv4(2, 980)), Admit::Queued { marked: false });
        assert_eq!(b.admit(Duration::ZERO, ipv4(2, 980)), Admit::Queued { marked: false });
        // Queue at 2000 > Kmin with pmax 1 ... at Kmax: always.
        assert_eq!(b.admit(Duration::ZERO, ipv4(2, 980)), Admit::Queued { marked: true });
        // Not ECN-capable: never marked.
        assert_eq!(b.admit(Duration::ZERO, ipv4(0, 980)), Admit::Queued { marked: false });
        assert_eq!(b.marks, 1);
        let mut out = Vec::new();
        while let Some(p) = b.pop(Duration::from_secs(1)) {
            out.push(p);
        }
        assert_eq!(out[2][1] & 3, 3, "CE set");
        assert_eq!(rdma_wire::ipv4::checksum(&out[2][..20]), 0, "header checksum still valid");
        assert_eq!(out[3][1] & 3, 0);
    }

    #[test]
    fn marking_rate_follows_the_red_line() {
        // pmax 0.5 between 10 kB and 20 kB: at 15 kB, p = 0.25.
        let red = Red { kmin_bytes: 10_000, kmax_bytes: 20_000, pmax: 0.5 };
        let mut b = Bottleneck::new(1_000_000, 1 << 30, Some(red), 7);
        for _ in 0..15 {
            b.admit(Duration::ZERO, ipv4(0, 980));
        }
        let n = 20_000;
        let mut marked = 0;
        for _ in 0..n {
            if b.admit(Duration::ZERO, ipv4(1, 980)) == (Admit::Queued { marked: true }) {
                marked += 1;
            }
            b.queue.pop_back();
            b.bytes -= 1000;
        }
        // Binomial(20000, 0.25): sd ≈ 61; allow 5 sd.
        assert!((marked as i64 - 5000).abs() < 310, "marked {marked} of {n}");
    }

    #[test]
    fn drops_at_the_tail_when_the_buffer_is_full() {
        let mut b = Bottleneck::new(1_000_000, 2500, Some(ALWAYS), 1);
        assert!(matches!(b.admit(Duration::ZERO, ipv4(2, 980)), Admit::Queued { .. }));
        assert!(matches!(b.admit(Duration::ZERO, ipv4(2, 980)), Admit::Queued { .. }));
        assert_eq!(b.admit(Duration::ZERO, ipv4(2, 980)), Admit::Dropped);
        assert_eq!((b.drops, b.queued_bytes()), (1, 2000));
        // Room again once the head has left.
        b.pop(Duration::from_secs(1));
        assert!(matches!(b.admit(Duration::from_secs(1), ipv4(2, 980)), Admit::Queued { .. }));
    }

    #[test]
    fn serialisation_time_rounds_up() {
        let b = Bottleneck::new(3, 1, None, 1);
        assert_eq!(b.serialisation(1), Duration::from_nanos(2_666_666_667));
    }
}
