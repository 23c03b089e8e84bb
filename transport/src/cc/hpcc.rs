//! HPCC (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM
//! 2019): a window from in-band network telemetry. Every switch egress a
//! data packet crosses stamps it with its queue length, the bytes it has
//! sent, the time and its line rate; the receiver echoes the stamps in its
//! ACK; the sender computes how loaded the most loaded link of its path is
//! and sets its window so that the link runs at a target utilisation η
//! with no standing queue. The QP sends at W/T (paced).
//!
//! The paper's Algorithm 1, on every ACK that carries telemetry:
//!
//! ```text
//! MeasureInflight(ack):
//!   u = 0
//!   for each hop i:
//!     txRate = (ack.L[i].txBytes − L[i].txBytes) / (ack.L[i].ts − L[i].ts)
//!     u' = min(ack.L[i].qlen, L[i].qlen) / (ack.L[i].B · T) + txRate / ack.L[i].B
//!     if u' > u: u = u'; τ = ack.L[i].ts − L[i].ts
//!   τ = min(τ, T)
//!   U = (1 − τ/T)·U + τ/T·u
//! ComputeWind(U, updateWc):
//!   if U ≥ η or incStage ≥ maxStage:
//!     W = Wc / (U/η) + W_AI;  if updateWc: incStage = 0, Wc = W
//!   else:
//!     W = Wc + W_AI;          if updateWc: incStage += 1, Wc = W
//! NewAck(ack):
//!   if ack.seq > lastUpdateSeq: W = ComputeWind(MeasureInflight(ack), true); lastUpdateSeq = snd_nxt
//!   else:                       W = ComputeWind(MeasureInflight(ack), false)
//!   R = W / T;  L = ack.L
//! ```
//!
//! W stays within [1 KiB, W_init = line rate · T]. As the paper's NIC,
//! the QP both paces at W/T and keeps at most W bytes unacknowledged
//! ([`Controller::window_bytes`]).

use core::any::Any;
use core::time::Duration;

use super::controller::{Controller, ControllerFactory, Event, HopTelemetry};
use crate::Instant;
use rdma_wire::Psn;

/// HPCC's knobs. Rates in bits per second, windows in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HpccParams {
    /// The NIC's line rate: W_init = line rate · T, and the ceiling.
    pub line_rate_bps: u64,
    /// T: the base round trip of the network (the paper's 'base RTT').
    pub base_rtt: Duration,
    /// η: the target utilisation of the most loaded link.
    pub eta: f64,
    /// How many once-per-RTT additive steps before a multiplicative one
    /// even below η (the paper's maxStage).
    pub max_stage: u32,
    /// W_AI: the additive increase, bytes.
    pub w_ai_bytes: f64,
    /// The smallest window, bytes (a packet's worth).
    pub min_window_bytes: f64,
    /// As [`super::DcqcnParams::pacer_burst`]: zero paces exactly.
    pub pacer_burst: Duration,
}

impl HpccParams {
    /// The paper's values: η = 0.95, maxStage = 5, and W_AI =
    /// W_init · (1 − η) / N for N = `expected_flows`, the most flows the
    /// operator expects on one link (§3.3). HPCC's project page notes that
    /// its simulations ran with maxStage = 0 and calls the paper's 5 a
    /// typo; the issue that asked for HPCC names 5, so 5 it is (a field).
    pub fn new(line_rate_bps: u64, base_rtt: Duration, expected_flows: u32) -> HpccParams {
        let eta = 0.95;
        let w_init = line_rate_bps as f64 / 8.0 * base_rtt.as_secs_f64();
        HpccParams {
            line_rate_bps,
            base_rtt,
            eta,
            max_stage: 5,
            w_ai_bytes: w_init * (1.0 - eta) / f64::from(expected_flows.max(1)),
            min_window_bytes: 1024.0,
            pacer_burst: Duration::ZERO,
        }
    }

    /// W_init: a full bandwidth-delay product of the NIC, bytes.
    pub fn initial_window(&self) -> f64 {
        self.line_rate_bps as f64 / 8.0 * self.t_secs()
    }

    fn t_secs(&self) -> f64 {
        self.base_rtt.as_secs_f64().max(1e-9)
    }
}

/// One QP's HPCC state.
#[derive(Debug, Clone, PartialEq)]
pub struct Hpcc {
    p: HpccParams,
    /// W: the window in force, bytes.
    window: f64,
    /// Wc: the reference window, moved once per round trip.
    reference: f64,
    /// U: the smoothed utilisation of the most loaded hop.
    utilisation: f64,
    inc_stage: u32,
    /// The `next` PSN at the last move of Wc; `None`: not moved yet.
    last_update: Option<Psn>,
    /// The last echo's stamps, one per hop.
    last: Vec<HopTelemetry>,
    rate: u64,
    cuts: u64,
    echoes: u64,
}

impl Hpcc {
    pub fn new(p: HpccParams) -> Hpcc {
        let w = p.initial_window();
        Hpcc {
            p,
            window: w,
            reference: w,
            utilisation: 0.0,
            inc_stage: 0,
            last_update: None,
            last: Vec::new(),
            rate: p.line_rate_bps.max(1),
            cuts: 0,
            echoes: 0,
        }
    }

    pub fn params(&self) -> &HpccParams {
        &self.p
    }

    /// W, bytes.
    pub fn window(&self) -> f64 {
        self.window
    }

    /// U as of the last echo.
    pub fn utilisation(&self) -> f64 {
        self.utilisation
    }

    /// Echoes taken in so far.
    pub fn echoes(&self) -> u64 {
        self.echoes
    }

    /// MeasureInflight: U after this echo; `None` when the previous stamps
    /// cannot be compared with these (the first echo, or a path of another
    /// length: spraying), which are then only remembered.
    fn measure(&self, hops: &[HopTelemetry]) -> Option<f64> {
        if self.last.len() != hops.len() {
            return None;
        }
        let t = self.p.t_secs();
        let (mut u, mut tau) = (0.0f64, None);
        for (now, before) in hops.iter().zip(&self.last) {
            let dt = now.timestamp.saturating_since(before.timestamp).as_secs_f64();
            let b = now.rate_bps.max(1) as f64;
            if dt <= 0.0 {
                continue;
            }
            let tx_rate = now.tx_bytes.saturating_sub(before.tx_bytes) as f64 * 8.0 / dt;
            let q = now.queue_bytes.min(before.queue_bytes) as f64 * 8.0;
            let hop = q / (b * t) + tx_rate / b;
            if hop > u {
                (u, tau) = (hop, Some(dt));
            }
        }
        let Some(tau) = tau else { return Some(self.utilisation) };
        let w = tau.min(t) / t;
        Some((1.0 - w) * self.utilisation + w * u)
    }

    /// ComputeWind.
    fn compute(&mut self, u: f64, update_reference: bool) -> f64 {
        let eta = self.p.eta;
        let w = if u >= eta || self.inc_stage >= self.p.max_stage {
            let w = self.reference / (u / eta) + self.p.w_ai_bytes;
            if update_reference {
                self.inc_stage = 0;
            }
            w
        } else {
            let w = self.reference + self.p.w_ai_bytes;
            if update_reference {
                self.inc_stage += 1;
            }
            w
        };
        let w = w.clamp(self.p.min_window_bytes.min(self.p.initial_window()), self.p.initial_window());
        if update_reference {
            self.reference = w;
        }
        w
    }

    /// NewAck: one echo of `hops` on a response naming `acked`, while the
    /// QP's next PSN is `next`.
    pub fn on_echo(&mut self, hops: &[HopTelemetry], acked: Psn, next: Psn) {
        self.echoes += 1;
        let u = self.measure(hops);
        self.last.clear();
        self.last.extend_from_slice(hops);
        let Some(u) = u else { return };
        self.utilisation = u;
        let update = self.last_update.is_none_or(|seq| acked > seq);
        if update {
            self.last_update = Some(next);
        }
        let before = self.rate;
        self.window = self.compute(u, update);
        let rate = self.window * 8.0 / self.p.t_secs();
        self.rate = (rate.round() as u64).clamp(1, self.p.line_rate_bps.max(1));
        if self.rate < before {
            self.cuts += 1;
        }
    }
}

impl Controller for Hpcc {
    fn on_event(&mut self, _now: Instant, event: Event<'_>) {
        if let Event::Telemetry { hops, acked, next } = event {
            self.on_echo(hops, acked, next);
        }
    }

    fn on_timer(&mut self, _now: Instant) {}

    fn next_timer(&self) -> Option<Instant> {
        None
    }

    fn rate_bps(&self) -> u64 {
        self.rate
    }

    fn rate_cuts(&self) -> u64 {
        self.cuts
    }

    fn window_bytes(&self) -> Option<u64> {
        Some(self.window as u64)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl ControllerFactory for HpccParams {
    fn build(&self) -> Box<dyn Controller> {
        Box::new(Hpcc::new(*self))
    }

    fn name(&self) -> &'static str {
        "hpcc"
    }

    fn pacer_burst(&self) -> Duration {
        self.pacer_burst
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1_000_000_000;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn at(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    /// 100 Gb/s NIC, T = 8 µs: W_init = 100 KB. W_AI = 100,000 · 0.05 / 50
    /// = 100 bytes.
    fn params() -> HpccParams {
        HpccParams::new(100 * G, us(8), 50)
    }

    fn hop(ns: u64, tx: u64, q: u64) -> HopTelemetry {
        HopTelemetry { queue_bytes: q, tx_bytes: tx, timestamp: at(ns), rate_bps: 100 * G }
    }

    #[test]
    fn the_papers_values_and_the_initial_window() {
        let p = params();
        assert_eq!((p.eta, p.max_stage), (0.95, 5));
        assert!((p.initial_window() - 100_000.0).abs() < 1e-6);
        assert!((p.w_ai_bytes - 100.0).abs() < 1e-9);
        let h = Hpcc::new(p);
        assert_eq!(h.rate_bps(), 100 * G);
        assert!((h.window() - 100_000.0).abs() < 1e-6);
    }

    #[test]
    fn the_first_echo_is_only_remembered() {
        let mut h = Hpcc::new(params());
        h.on_echo(&[hop(0, 0, 50_000)], Psn::new(1), Psn::new(10));
        assert_eq!((h.rate_bps(), h.rate_cuts(), h.utilisation()), (100 * G, 0, 0.0));
    }

    /// One hop, 8 µs apart (τ = T, so U = u): the link sent 100 KB (line
    /// rate: txRate/B = 1) and held min(25 KB, 25 KB) = 25 KB, 2 µs of
    /// line rate: 25,000·8 / (100e9 · 8e-6) = 0.25. U = 1.25 ≥ η:
    /// W = Wc / (U/η) + W_AI = 100,000 / (1.25/0.95) + 100 = 76,100 bytes;
    /// rate = 76,100 · 8 / 8 µs = 76.1 Gb/s.
    #[test]
    fn a_loaded_link_with_a_queue_cuts_the_window_multiplicatively() {
        let mut h = Hpcc::new(params());
        h.on_echo(&[hop(0, 0, 25_000)], Psn::new(1), Psn::new(10));
        h.on_echo(&[hop(8_000, 100_000, 25_000)], Psn::new(2), Psn::new(20));
        assert!((h.utilisation() - 1.25).abs() < 1e-9, "U {}", h.utilisation());
        assert!((h.window() - 76_100.0).abs() < 1e-6, "W {}", h.window());
        assert_eq!(h.rate_bps(), 76_100_000_000);
        assert_eq!(h.rate_cuts(), 1);
        // Wc moved (PSN 2 passed None), so the next echo in the same round
        // trip starts from 76,100: same load again, W = 76,100·0.76 + 100.
        h.on_echo(&[hop(16_000, 200_000, 25_000)], Psn::new(3), Psn::new(30));
        // acked 3 is not past next 20 at the last move: Wc stays 76,100.
        assert!((h.window() - (76_100.0 / (1.25 / 0.95) + 100.0)).abs() < 1e-6, "W {}", h.window());
    }

    /// τ < T weighs the new sample by τ/T: 4 µs apart, half the link's
    /// rate sent (50 KB in 8 µs would be line rate; 25 KB in 4 µs is
    /// line rate too: u = 1), no queue. U = (1 − 0.5)·0 + 0.5·1 = 0.5 < η:
    /// additive, W = Wc + W_AI, capped at W_init.
    #[test]
    fn below_eta_the_window_grows_additively_and_stays_under_w_init() {
        let mut h = Hpcc::new(params());
        h.on_echo(&[hop(0, 0, 0)], Psn::new(1), Psn::new(10));
        h.on_echo(&[hop(4_000, 50_000, 0)], Psn::new(2), Psn::new(20));
        assert!((h.utilisation() - 0.5).abs() < 1e-9, "U {}", h.utilisation());
        assert_eq!(h.window(), h.params().initial_window(), "W_init + W_AI is capped at W_init");
        assert_eq!(h.rate_cuts(), 0);
    }

    /// After maxStage additive steps, the next once-per-RTT update is
    /// multiplicative even below η: W = Wc / (U/η) + W_AI, which grows W
    /// when U < η.
    #[test]
    fn max_stage_additive_steps_then_a_multiplicative_one() {
        let mut h = Hpcc::new(HpccParams { max_stage: 2, ..params() });
        h.reference = 50_000.0;
        h.on_echo(&[hop(0, 0, 0)], Psn::new(0), Psn::new(0));
        // u = 0.5 each time (τ = T: 50 KB in 8 µs of a 100 KB/8 µs link),
        // and every echo passes the last update's PSN: Wc moves each time.
        for (i, expect) in [(1u32, 50_100.0), (2, 50_200.0)] {
            h.on_echo(&[hop(8_000 * u64::from(i), 50_000 * u64::from(i), 0)], Psn::new(i), Psn::new(i));
            assert!((h.window() - expect).abs() < 1e-6, "step {i}: W {}", h.window());
        }
        // incStage = 2 = maxStage: W = 50,200 / (0.5/0.95) + 100 = 95,480.
        h.on_echo(&[hop(24_000, 150_000, 0)], Psn::new(3), Psn::new(3));
        assert!((h.window() - 95_480.0).abs() < 1e-6, "W {}", h.window());
    }

    /// The most loaded hop decides, and a path of another length (packet
    /// spraying) is remembered, not compared.
    #[test]
    fn the_busiest_hop_decides_and_a_new_path_is_not_compared() {
        let mut h = Hpcc::new(params());
        h.on_echo(&[hop(0, 0, 0), hop(0, 0, 0)], Psn::new(1), Psn::new(10));
        // Hop 0 at half rate (u 0.5), hop 1 at line rate (u 1; its 12.5 KB
        // counts only once it is there at both stamps: min(0, 12.5 KB) = 0).
        h.on_echo(&[hop(8_000, 50_000, 0), hop(8_000, 100_000, 12_500)], Psn::new(11), Psn::new(20));
        assert!((h.utilisation() - 1.0).abs() < 1e-9, "U {}", h.utilisation());
        // Both hops again 8 µs on, hop 1 still holding 12.5 KB: u = 1 + 0.125.
        h.on_echo(&[hop(16_000, 100_000, 0), hop(16_000, 200_000, 12_500)], Psn::new(21), Psn::new(30));
        assert!((h.utilisation() - 1.125).abs() < 1e-9, "U {}", h.utilisation());
        let before = h.clone();
        h.on_echo(&[hop(24_000, 300_000, 0)], Psn::new(31), Psn::new(40));
        assert_eq!((h.window(), h.utilisation()), (before.window(), before.utilisation()));
        assert_eq!(h.echoes(), 4);
    }
}
