//! TIMELY (Mittal et al., SIGCOMM 2015): rate control from RTT samples
//! alone, so it needs nothing from switches (no ECN, no CNPs) and runs
//! over any network the engine's packets cross, real sockets included.
//!
//! The control law is the paper's Algorithm 1, applied on every RTT
//! sample (a completion event):
//!
//! ```text
//! new_rtt_diff = new_rtt − prev_rtt;  prev_rtt = new_rtt
//! rtt_diff     = (1 − α)·rtt_diff + α·new_rtt_diff
//! gradient     = rtt_diff / min_rtt
//! new_rtt < T_low:   rate += δ
//! new_rtt > T_high:  rate *= 1 − β·(1 − T_high/new_rtt)
//! gradient ≤ 0:      rate += N·δ   (N = 5 from the 5th sample in a row with gradient ≤ 0, else 1)
//! otherwise:         rate *= 1 − β·gradient
//! ```
//!
//! The first sample has no predecessor: it counts as its own (a diff of
//! zero), as the authors' published code does. The rate stays within
//! [`TimelyParams::min_rate_bps`, line rate]. Values are in
//! docs/congestion-control.md, with their sources.

use core::any::Any;
use core::time::Duration;

use super::controller::{Controller, ControllerFactory, Event};
use crate::Instant;

/// TIMELY's knobs. Rates in bits per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimelyParams {
    /// The ceiling, and the rate a flow starts at.
    pub line_rate_bps: u64,
    /// The floor.
    pub min_rate_bps: u64,
    /// α: EWMA weight of a new RTT difference.
    pub ewma_alpha: f64,
    /// β: multiplicative decrease factor.
    pub beta: f64,
    /// δ: additive increment.
    pub additive_increment_bps: u64,
    /// Samples in a row with a non-positive gradient before hyperactive
    /// increase (N = 5) starts.
    pub hai_threshold: u32,
    /// Below this RTT the rate only grows (no gradient looked at).
    pub t_low: Duration,
    /// Above this RTT the rate is cut in proportion to the excess.
    pub t_high: Duration,
    /// The path's RTT without queues: the gradient's unit.
    pub min_rtt: Duration,
    /// As [`super::DcqcnParams::pacer_burst`]: zero paces exactly.
    pub pacer_burst: Duration,
}

impl TimelyParams {
    /// The authors' recommended values (their published `getNewRate`):
    /// α = 0.02, β = 0.8, HAI after 5, δ = 10 Mb/s per 10 Gb/s of line
    /// rate, T_high = 1 ms, T_low = 0 (per-packet pacing, as here);
    /// `min_rtt` is the path's, which only the caller knows.
    pub const fn new(line_rate_bps: u64, min_rtt: Duration) -> TimelyParams {
        TimelyParams {
            line_rate_bps,
            min_rate_bps: 10_000_000,
            ewma_alpha: 0.02,
            beta: 0.8,
            additive_increment_bps: line_rate_bps / 1000,
            hai_threshold: 5,
            t_low: Duration::ZERO,
            t_high: Duration::from_millis(1),
            min_rtt,
            pacer_burst: Duration::ZERO,
        }
    }

    fn floor(&self) -> u64 {
        self.min_rate_bps.max(1).min(self.ceiling())
    }

    fn ceiling(&self) -> u64 {
        self.line_rate_bps.max(1)
    }
}

/// One QP's TIMELY state.
#[derive(Debug, Clone, PartialEq)]
pub struct Timely {
    p: TimelyParams,
    rate: u64,
    prev_rtt: Option<Duration>,
    /// The smoothed RTT difference, nanoseconds.
    rtt_diff_ns: f64,
    /// Samples in a row whose gradient was not positive.
    calm: u32,
    cuts: u64,
    samples: u64,
}

impl Timely {
    pub fn new(p: TimelyParams) -> Timely {
        Timely { rate: p.ceiling(), p, prev_rtt: None, rtt_diff_ns: 0.0, calm: 0, cuts: 0, samples: 0 }
    }

    pub fn params(&self) -> &TimelyParams {
        &self.p
    }

    /// The smoothed RTT difference over `min_rtt`, as of the last sample.
    pub fn gradient(&self) -> f64 {
        self.rtt_diff_ns / nanos(self.p.min_rtt).max(1.0)
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// One RTT sample: Algorithm 1.
    pub fn on_rtt(&mut self, rtt: Duration) {
        self.samples += 1;
        let prev = self.prev_rtt.replace(rtt).unwrap_or(rtt);
        let new_diff = nanos(rtt) - nanos(prev);
        let a = self.p.ewma_alpha.clamp(0.0, 1.0);
        self.rtt_diff_ns = (1.0 - a) * self.rtt_diff_ns + a * new_diff;
        let gradient = self.gradient();
        self.calm = if gradient <= 0.0 { self.calm.saturating_add(1) } else { 0 };
        let rate = self.rate as f64;
        let delta = self.p.additive_increment_bps as f64;
        let new = if rtt < self.p.t_low {
            rate + delta
        } else if rtt > self.p.t_high {
            self.cuts += 1;
            rate * (1.0 - self.p.beta * (1.0 - nanos(self.p.t_high) / nanos(rtt)))
        } else if gradient <= 0.0 {
            let n = if self.calm >= self.p.hai_threshold { 5.0 } else { 1.0 };
            rate + n * delta
        } else {
            self.cuts += 1;
            rate * (1.0 - self.p.beta * gradient)
        };
        // Rounded, so that 5e9 · 0.84 is 4.2084e9 and not one b/s less;
        // `as` saturates (a negative product is 0), then the floor applies.
        self.rate = (new.round() as u64).clamp(self.p.floor(), self.p.ceiling());
    }
}

fn nanos(d: Duration) -> f64 {
    d.as_nanos() as f64
}

impl Controller for Timely {
    fn on_event(&mut self, _now: Instant, event: Event<'_>) {
        if let Event::Ack { rtt: Some(rtt), .. } = event {
            self.on_rtt(rtt);
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

    fn wants_rtt(&self) -> bool {
        true
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl ControllerFactory for TimelyParams {
    fn build(&self) -> Box<dyn Controller> {
        Box::new(Timely::new(*self))
    }

    fn name(&self) -> &'static str {
        "timely"
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

    /// 10 Gb/s, min RTT 20 µs, T_low 50 µs, T_high 500 µs (the paper's
    /// evaluation thresholds), α = 0.5 so that hand arithmetic stays short.
    fn params() -> TimelyParams {
        TimelyParams { ewma_alpha: 0.5, t_low: us(50), t_high: us(500), ..TimelyParams::new(10 * G, us(20)) }
    }

    fn at_rate(rate: u64) -> Timely {
        Timely { rate, ..Timely::new(params()) }
    }

    #[test]
    fn below_t_low_the_rate_grows_by_delta() {
        let mut t = at_rate(5 * G);
        t.on_rtt(us(30));
        // δ = 10 Gb/s / 1000 = 10 Mb/s.
        assert_eq!(t.rate_bps(), 5_010_000_000);
        assert_eq!(t.rate_cuts(), 0);
    }

    #[test]
    fn above_t_high_the_cut_is_proportional_to_the_excess() {
        let mut t = at_rate(5 * G);
        t.on_rtt(us(1000));
        // 5e9 · (1 − 0.8 · (1 − 500/1000)) = 5e9 · 0.6 = 3e9.
        assert_eq!(t.rate_bps(), 3 * G);
        assert_eq!(t.rate_cuts(), 1);
    }

    #[test]
    fn a_rising_rtt_cuts_by_beta_times_the_gradient() {
        let mut t = at_rate(5 * G);
        t.on_rtt(us(60)); // first sample: diff 0, gradient 0 → +δ
        assert_eq!(t.rate_bps(), 5_010_000_000);
        t.on_rtt(us(68));
        // rtt_diff = 0.5·0 + 0.5·8 µs = 4 µs; gradient = 4/20 = 0.2;
        // 5.01e9 · (1 − 0.8·0.2) = 5.01e9 · 0.84 = 4.2084e9.
        assert!((t.gradient() - 0.2).abs() < 1e-12);
        assert_eq!(t.rate_bps(), 4_208_400_000);
        t.on_rtt(us(64));
        // rtt_diff = 0.5·4 + 0.5·(−4) = 0 µs: gradient 0 → +δ.
        assert_eq!(t.rate_bps(), 4_218_400_000);
        assert_eq!(t.rate_cuts(), 1);
    }

    #[test]
    fn five_calm_samples_in_a_row_switch_to_hyperactive_increase() {
        let mut t = at_rate(G);
        let mut rates = Vec::new();
        for rtt in [100, 90, 80, 70, 60, 55] {
            t.on_rtt(us(rtt));
            rates.push(t.rate_bps());
        }
        // Gradients 0, then negative: +δ four times, then +5δ from the 5th.
        let m = 1_000_000;
        assert_eq!(rates, vec![1_010 * m, 1_020 * m, 1_030 * m, 1_040 * m, 1_090 * m, 1_140 * m]);
        // A rising sample whose smoothed difference still falls
        // (−7.1875 µs · 0.5 + 3 µs · 0.5 < 0) keeps the streak.
        t.on_rtt(us(58));
        assert_eq!(t.rate_bps(), 1_190 * m);
        // A sharp rise turns the gradient positive: a cut, and the streak ends.
        t.on_rtt(us(80));
        assert_eq!(t.rate_cuts(), 1);
        t.on_rtt(us(60));
        assert_eq!(t.calm, 1);
    }

    #[test]
    fn the_rate_stays_between_the_floor_and_the_line() {
        let mut t = at_rate(10 * G);
        t.on_rtt(us(60));
        assert_eq!(t.rate_bps(), 10 * G, "never above the line");
        t.on_rtt(us(460));
        // gradient = 0.5·400/20 = 10: 1 − 8 < 0, so the floor.
        assert_eq!(t.rate_bps(), 10_000_000);
        assert!(t.wants_rtt() && t.next_timer().is_none());
    }

    #[test]
    fn only_acks_with_samples_move_it() {
        let mut t = Timely::new(params());
        let now = Instant::ZERO;
        t.on_event(now, Event::Cnp);
        t.on_event(now, Event::Sent { bytes: 1 << 20 });
        t.on_event(now, Event::Ack { packets: 16, rtt: None });
        assert_eq!((t.samples(), t.rate_bps()), (0, 10 * G));
        t.on_event(now, Event::Ack { packets: 16, rtt: Some(us(2000)) });
        // 10e9 · (1 − 0.8·(1 − 500/2000)) = 10e9 · 0.4.
        assert_eq!((t.samples(), t.rate_bps()), (1, 4 * G));
    }
}
