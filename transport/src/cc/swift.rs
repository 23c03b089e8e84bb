//! Swift (Kumar et al., "Swift: Delay is Simple and Effective for
//! Congestion Control in the Datacenter", SIGCOMM 2020): a congestion
//! window from delay alone, against a target that grows as the window
//! shrinks (flow scaling), so that many flows share a bottleneck fairly
//! with a small queue. Like TIMELY it needs nothing from the switches.
//!
//! The paper's Algorithm 1, on every ACK that brings an RTT sample:
//!
//! ```text
//! target = base_target + fs(cwnd),  fs(c) = clamp(α/√c + β_fs, 0, fs_range),
//!          α = fs_range / (1/√fs_min_cwnd − 1/√fs_max_cwnd), β_fs = −α/√fs_max_cwnd
//! delay < target:  cwnd += ai · acked / cwnd   (cwnd ≥ 1)
//!                  cwnd += ai · acked          (cwnd < 1)
//! otherwise, at most once per RTT:
//!                  cwnd *= max(1 − β · (delay − target)/delay, 1 − max_mdf)
//! cwnd within [min_cwnd, max_cwnd]; below one packet the QP paces one
//! packet every rtt / cwnd.
//! ```
//!
//! Here the delay is the engine's RTT sample (Swift separates fabric from
//! host delay with NIC timestamps; this has one clock, so its target is
//! one), the window is [`Controller::window_bytes`] (packets of `mtu`), and
//! the hop-count term of the target is left out (no TTL is read back).

use core::any::Any;
use core::time::Duration;

use super::controller::{Controller, ControllerFactory, Event};
use crate::Instant;

/// Swift's knobs; windows in packets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwiftParams {
    /// The NIC's rate: a window of one packet or more sends at it.
    pub line_rate_bps: u64,
    /// Bytes a window packet stands for (the path MTU's payload).
    pub mtu_bytes: u32,
    /// The target delay with the window at `fs_max_cwnd` or more.
    pub base_target: Duration,
    /// Flow scaling: the most the target grows (at `fs_min_cwnd` or less).
    pub fs_range: Duration,
    pub fs_min_cwnd: f64,
    pub fs_max_cwnd: f64,
    /// Additive increase, packets per round trip.
    pub ai: f64,
    /// β: how hard the excess delay cuts.
    pub beta: f64,
    /// The largest cut at once (0.5: to half).
    pub max_mdf: f64,
    pub min_cwnd: f64,
    pub max_cwnd: f64,
}

impl SwiftParams {
    /// The paper's shape with values for a path whose unloaded RTT is
    /// `base_rtt`: the target starts 25 % above it, flow scaling adds up
    /// to twice it between 0.1 and 100 packets (the paper's window range),
    /// ai 1 packet, β 0.8, max_mdf 0.5, and the window from 0.001 packets
    /// to one bandwidth-delay product.
    pub fn new(line_rate_bps: u64, base_rtt: Duration, mtu_bytes: u32) -> SwiftParams {
        let bdp = line_rate_bps as f64 / 8.0 * base_rtt.as_secs_f64() / f64::from(mtu_bytes.max(1));
        SwiftParams {
            line_rate_bps,
            mtu_bytes,
            base_target: base_rtt + base_rtt / 4,
            fs_range: base_rtt * 2,
            fs_min_cwnd: 0.1,
            fs_max_cwnd: 100.0,
            ai: 1.0,
            beta: 0.8,
            max_mdf: 0.5,
            min_cwnd: 0.001,
            max_cwnd: bdp.max(1.0),
        }
    }

    /// The target delay for a window of `cwnd` packets.
    pub fn target(&self, cwnd: f64) -> Duration {
        let range = self.fs_range.as_secs_f64();
        let (lo, hi) = (self.fs_min_cwnd.max(1e-9), self.fs_max_cwnd.max(1e-9));
        let alpha = range / (1.0 / lo.sqrt() - 1.0 / hi.sqrt());
        let beta = -alpha / hi.sqrt();
        let fs = (alpha / cwnd.max(1e-9).sqrt() + beta).clamp(0.0, range);
        self.base_target + Duration::from_secs_f64(fs)
    }
}

/// One QP's Swift state.
#[derive(Debug, Clone, PartialEq)]
pub struct Swift {
    p: SwiftParams,
    /// The window, packets.
    cwnd: f64,
    /// The last RTT sample (the pacing interval's base below one packet).
    rtt: Option<Duration>,
    last_decrease: Option<Instant>,
    cuts: u64,
    samples: u64,
}

impl Swift {
    pub fn new(p: SwiftParams) -> Swift {
        Swift { cwnd: p.max_cwnd, p, rtt: None, last_decrease: None, cuts: 0, samples: 0 }
    }

    pub fn params(&self) -> &SwiftParams {
        &self.p
    }

    /// The window, packets.
    pub fn cwnd(&self) -> f64 {
        self.cwnd
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// One RTT sample at `now` on an ACK that acknowledged `acked` packets.
    pub fn on_sample(&mut self, now: Instant, delay: Duration, acked: u32) {
        self.samples += 1;
        self.rtt = Some(delay);
        let target = self.p.target(self.cwnd);
        let n = f64::from(acked.max(1));
        if delay < target {
            self.cwnd += if self.cwnd >= 1.0 { self.p.ai * n / self.cwnd } else { self.p.ai * n };
        } else if self.last_decrease.is_none_or(|t| now.saturating_since(t) >= delay) {
            let d = delay.as_secs_f64();
            let excess = (d - target.as_secs_f64()) / d;
            self.cwnd *= (1.0 - self.p.beta * excess).max(1.0 - self.p.max_mdf);
            self.last_decrease = Some(now);
            self.cuts += 1;
        }
        self.cwnd = self.cwnd.clamp(self.p.min_cwnd, self.p.max_cwnd);
    }
}

impl Controller for Swift {
    fn on_event(&mut self, now: Instant, event: Event<'_>) {
        if let Event::Ack { packets, rtt: Some(rtt) } = event {
            self.on_sample(now, rtt, packets);
        }
    }

    fn on_timer(&mut self, _now: Instant) {}

    fn next_timer(&self) -> Option<Instant> {
        None
    }

    /// Line rate with a window of a packet or more; below, one packet
    /// every rtt / cwnd.
    fn rate_bps(&self) -> u64 {
        let line = self.p.line_rate_bps.max(1);
        match self.rtt {
            Some(rtt) if self.cwnd < 1.0 => {
                let bps = self.cwnd * f64::from(self.p.mtu_bytes) * 8.0 / rtt.as_secs_f64().max(1e-9);
                (bps.round() as u64).clamp(1, line)
            }
            _ => line,
        }
    }

    fn rate_cuts(&self) -> u64 {
        self.cuts
    }

    fn window_bytes(&self) -> Option<u64> {
        Some((self.cwnd.max(1.0) * f64::from(self.p.mtu_bytes)) as u64)
    }

    fn wants_rtt(&self) -> bool {
        true
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl ControllerFactory for SwiftParams {
    fn build(&self) -> Box<dyn Controller> {
        Box::new(Swift::new(*self))
    }

    fn name(&self) -> &'static str {
        "swift"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn at(n: u64) -> Instant {
        Instant::from_nanos(n * 1000)
    }

    /// 100 Gb/s, base RTT 10 µs, MTU 4096: BDP = 125,000 / 4096 = 30.5
    /// packets; target 12.5 µs at 100 packets and more, fs_range 20 µs.
    fn params() -> SwiftParams {
        SwiftParams::new(100_000_000_000, us(10), 4096)
    }

    fn at_cwnd(c: f64) -> Swift {
        Swift { cwnd: c, ..Swift::new(params()) }
    }

    #[test]
    fn flow_scaling_grows_the_target_as_the_window_shrinks() {
        let p = params();
        // α = 20 µs / (1/√0.1 − 1/√100) = 20 / (3.1623 − 0.1) = 6.5306 µs;
        // β_fs = −α/10 = −0.65306 µs.
        assert_eq!(p.target(100.0), us(12) + Duration::from_nanos(500));
        let t1 = p.target(1.0).as_nanos() as f64 / 1000.0; // 12.5 + 6.5306 − 0.6531
        assert!((t1 - 18.3775).abs() < 0.001, "{t1}");
        let t = p.target(0.01).as_nanos() as f64 / 1000.0;
        assert!((t - 32.5).abs() < 0.002, "capped at fs_range: {t}");
    }

    #[test]
    fn below_target_the_window_grows_by_ai_over_cwnd_per_packet_acked() {
        let mut s = at_cwnd(10.0);
        s.on_sample(at(0), us(11), 2);
        assert!((s.cwnd() - 10.2).abs() < 1e-9, "{}", s.cwnd());
        let mut s = at_cwnd(0.5);
        s.on_sample(at(0), us(11), 1);
        assert!((s.cwnd() - 1.5).abs() < 1e-9, "below one packet: + ai per packet: {}", s.cwnd());
    }

    /// cwnd 20: target = 12.5 + 6.5306/√20 − 0.6531 = 13.3072 µs. A 20 µs
    /// sample: factor 1 − 0.8 · (20 − 13.3072)/20 = 0.73229; 20 · that =
    /// 14.6457. A second one within that RTT does not cut again; one after
    /// it does. A huge delay cuts by max_mdf only.
    #[test]
    fn above_target_it_cuts_once_per_rtt_by_at_most_max_mdf() {
        let mut s = at_cwnd(20.0);
        s.on_sample(at(100), us(20), 1);
        assert!((s.cwnd() - 14.6457).abs() < 1e-3, "{}", s.cwnd());
        let after = s.cwnd();
        s.on_sample(at(110), us(20), 1);
        assert_eq!(s.cwnd(), after, "within one RTT of the cut");
        s.on_sample(at(121), us(20), 1);
        assert!(s.cwnd() < after);
        assert_eq!(s.rate_cuts(), 2);
        let mut s = at_cwnd(20.0);
        s.on_sample(at(0), us(10_000), 1);
        assert!((s.cwnd() - 10.0).abs() < 1e-9, "max_mdf 0.5: {}", s.cwnd());
    }

    #[test]
    fn below_one_packet_it_paces_and_the_window_is_one_packet() {
        let mut s = at_cwnd(0.25);
        s.on_sample(at(0), us(1000), 1); // a cut: 0.25 · 0.5
        assert!((s.cwnd() - 0.125).abs() < 1e-9);
        // One 4096-byte packet every 1000 µs / 0.125 = 8 ms: 4.096 Mb/s.
        assert_eq!(s.rate_bps(), 4_096_000);
        assert_eq!(s.window_bytes(), Some(4096));
        let full = Swift::new(params());
        assert_eq!(full.rate_bps(), 100_000_000_000);
        assert!((full.cwnd() - 125_000.0 / 4096.0).abs() < 1e-6, "starts at one BDP");
    }
}
