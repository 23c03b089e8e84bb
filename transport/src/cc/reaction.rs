//! The reaction point: one QP's sending rate under DCQCN (§1.3 paper, §1.4
//! NVIDIA). Driven by explicit events and times; owns no clock and no timer.
//!
//! Same-instant order (§5 pitfall 1): timers due at or before an event's
//! `now` run before the event; among timers, α ticks first, then the NVIDIA
//! decrease check, then the increase timer. A cut restarts the increase
//! timer, so an increase due at the instant of a cut does not happen.
//!
//! α ticks are evaluated lazily when something reads α (§5 pitfall 4): they
//! never appear in [`ReactionPoint::next_timer`], so an idle QP costs no
//! events, and the result is the same integers as ticking eagerly.

use super::fixed::Alpha;
use super::params::{DcqcnParams, RpVariant};
use crate::time::{later, period_ns};
use crate::Instant;
use std::sync::Arc;

/// DCQCN reaction-point state of one QP. Rates in bits per second.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReactionPoint {
    /// Shared by the device's QPs (`ControllerFactory::build_shared`).
    p: Arc<DcqcnParams>,
    rate: u64,
    target: u64,
    alpha: Alpha,
    /// The next α tick, applied lazily.
    alpha_next: Option<Instant>,
    /// NVIDIA: a CNP arrived in the current α period (binary feedback).
    alpha_cnp: bool,
    /// NVIDIA: origin of the decrease-check grid, set by the first CNP.
    decrease_origin: Option<Instant>,
    /// NVIDIA: the next decrease check, only while a CNP waits for it.
    decrease_at: Option<Instant>,
    increase_at: Option<Instant>,
    t_stage: u32,
    bc_stage: u32,
    bytes: u64,
    /// The latest time seen; an event from the past is taken as happening now.
    now: Instant,
    cnps_received: u64,
    rate_cuts: u64,
}

impl ReactionPoint {
    /// A flow starts at line rate, with no slow start (§1.3).
    pub fn new(params: DcqcnParams) -> ReactionPoint {
        ReactionPoint::shared(Arc::new(params))
    }

    /// As [`ReactionPoint::new`], reading parameters others share.
    pub fn shared(params: Arc<DcqcnParams>) -> ReactionPoint {
        let line = params.ceiling_bps();
        let alpha = params.initial_alpha;
        ReactionPoint::with_state(params, line, line, alpha)
    }

    /// A QP in a given state, as the §2.1 variant starts; rates are clamped.
    pub fn from_state(params: DcqcnParams, rate_bps: u64, target_bps: u64, alpha: Alpha) -> ReactionPoint {
        ReactionPoint::with_state(Arc::new(params), rate_bps, target_bps, alpha)
    }

    fn with_state(params: Arc<DcqcnParams>, rate_bps: u64, target_bps: u64, alpha: Alpha) -> ReactionPoint {
        let mut rp = ReactionPoint {
            p: params,
            rate: 0,
            target: 0,
            alpha,
            alpha_next: None,
            alpha_cnp: false,
            decrease_origin: None,
            decrease_at: None,
            increase_at: None,
            t_stage: 0,
            bc_stage: 0,
            bytes: 0,
            now: Instant::ZERO,
            cnps_received: 0,
            rate_cuts: 0,
        };
        rp.rate = rp.clamp(rate_bps);
        rp.target = rp.clamp(target_bps);
        rp
    }

    pub fn params(&self) -> &DcqcnParams {
        &self.p
    }

    /// The current rate R_C, bits per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// The target rate R_T, bits per second.
    pub fn target_rate(&self) -> u64 {
        self.target
    }

    /// α as of the last event or timer call.
    pub fn alpha(&self) -> Alpha {
        self.alpha
    }

    pub fn cnps_received(&self) -> u64 {
        self.cnps_received
    }

    pub fn rate_cuts(&self) -> u64 {
        self.rate_cuts
    }

    /// (T-stage, BC-stage): increase events since the last cut.
    pub fn stages(&self) -> (u32, u32) {
        (self.t_stage, self.bc_stage)
    }

    /// When [`Self::on_timer`] next has work: a rate increase or an NVIDIA
    /// decrease check. `None` at line rate with nothing pending.
    pub fn next_timer(&self) -> Option<Instant> {
        [self.decrease_at, self.increase_at].into_iter().flatten().min()
    }

    /// The next timer that may cut the rate (an NVIDIA decrease check):
    /// the increase timers before it only raise the rate, so they can be
    /// left for [`Self::on_timer`], [`Self::on_cnp`] or
    /// [`Self::on_bytes_sent`] to catch up on, in order.
    pub fn next_cut_check(&self) -> Option<Instant> {
        self.decrease_at
    }

    /// Runs every timer due at or before `now`, in time order.
    pub fn on_timer(&mut self, now: Instant) {
        let now = now.max(self.now);
        while let Some(t) = self.next_timer().filter(|&t| t <= now) {
            self.alpha_until(t);
            if self.decrease_at == Some(t) {
                self.decrease_check(t);
            } else {
                self.increase_timer(t);
            }
        }
        self.alpha_until(now);
        self.now = now;
    }

    /// A CNP for this QP arrived.
    pub fn on_cnp(&mut self, now: Instant) {
        self.on_timer(now);
        let now = self.now;
        self.cnps_received = self.cnps_received.saturating_add(1);
        let g = self.p.g;
        match self.p.variant {
            RpVariant::Paper => {
                // Cut with the old α, then update it (§5 pitfall 1).
                self.target = self.rate;
                self.rate = self.cut(self.rate);
                self.alpha = self.alpha.raise(g);
                self.after_cut(now);
                self.alpha_next = later(now, period_ns(self.p.alpha_interval));
            }
            RpVariant::Nvidia => match self.decrease_origin {
                None => {
                    // HPCC `cnp_received_mlx`: α starts over and this CNP does
                    // not count as feedback for the first α period.
                    self.alpha = self.p.initial_alpha;
                    self.alpha_cnp = false;
                    self.alpha_next = later(now, period_ns(self.p.alpha_interval));
                    self.decrease_origin = Some(now);
                    self.decrease_at = later(now, period_ns(self.p.rate_decrease_interval));
                    if let Some(r) = self.p.rate_on_first_cnp_bps {
                        self.rate = self.clamp(r);
                        self.target = self.rate;
                    }
                }
                Some(origin) => {
                    self.alpha_cnp = true;
                    if self.decrease_at.is_none() {
                        // The check at `now` itself, if any, already ran.
                        let d = period_ns(self.p.rate_decrease_interval);
                        let n = (now.as_nanos() - origin.as_nanos()) / d + 1;
                        self.decrease_at = n.checked_mul(d).and_then(|x| later(origin, x));
                    }
                }
            },
        }
    }

    /// `n` bytes left on this QP; drives the paper's byte counter.
    pub fn on_bytes_sent(&mut self, n: u64, now: Instant) {
        self.on_timer(now);
        let b = self.p.byte_counter;
        if self.p.variant != RpVariant::Paper || b == 0 {
            return;
        }
        self.bytes = self.bytes.saturating_add(n);
        while self.bytes >= b {
            self.bytes -= b;
            self.bc_stage = self.bc_stage.saturating_add(1);
            if self.at_line_rate() {
                // Further increases change nothing but the stage count.
                let rest = u32::try_from(self.bytes / b).unwrap_or(u32::MAX);
                self.bc_stage = self.bc_stage.saturating_add(rest);
                self.bytes %= b;
                break;
            }
            self.increase();
        }
    }

    fn decrease_check(&mut self, t: Instant) {
        self.decrease_at = None;
        let clamp = self.p.clamp_target_rate || (self.p.clamp_target_after_time_inc && self.t_stage != 0);
        if clamp {
            self.target = self.rate;
        }
        self.rate = self.cut(self.rate);
        self.after_cut(t);
    }

    fn after_cut(&mut self, t: Instant) {
        self.t_stage = 0;
        self.bc_stage = 0;
        self.bytes = 0;
        self.increase_at = later(t, period_ns(self.p.rate_increase_interval));
        self.rate_cuts = self.rate_cuts.saturating_add(1);
    }

    fn increase_timer(&mut self, t: Instant) {
        self.increase_at = later(t, period_ns(self.p.rate_increase_interval));
        match self.p.variant {
            // htsim counts the event first: F timer events of fast recovery.
            RpVariant::Paper => {
                self.t_stage = self.t_stage.saturating_add(1);
                self.increase();
            }
            // HPCC `RateIncEventTimerMlx`: the stage counts after the step.
            RpVariant::Nvidia => {
                self.increase();
                self.t_stage = self.t_stage.saturating_add(1);
            }
        }
        if self.at_line_rate() {
            self.increase_at = None;
        }
    }

    /// One increase step: fast recovery, additive or hyper increase.
    fn increase(&mut self) {
        let f = self.p.fast_recovery_steps;
        let step = match self.p.variant {
            RpVariant::Paper => {
                let (t, b) = (self.t_stage, self.bc_stage);
                if t.max(b) <= f {
                    0
                } else if t.min(b) > f {
                    u64::from(t.min(b) - f).saturating_mul(self.p.hai_rate_bps)
                } else {
                    self.p.ai_rate_bps
                }
            }
            RpVariant::Nvidia => match self.t_stage.cmp(&f) {
                core::cmp::Ordering::Less => 0,
                core::cmp::Ordering::Equal => self.p.ai_rate_bps,
                core::cmp::Ordering::Greater => self.p.hai_rate_bps,
            },
        };
        self.target = self.clamp(self.target.saturating_add(step));
        self.rate = self.clamp(midpoint(self.rate, self.target));
    }

    /// A cut by α/2^shift, but never below `min_dec_factor_pct` of the rate.
    fn cut(&self, rate: u64) -> u64 {
        let keep = (u128::from(rate) * u128::from(self.p.min_dec_factor_pct.min(100)) / 100) as u64;
        self.clamp(self.alpha.cut(rate, self.p.cut_shift).max(keep))
    }

    fn clamp(&self, r: u64) -> u64 {
        r.clamp(self.p.floor_bps(), self.p.ceiling_bps())
    }

    fn at_line_rate(&self) -> bool {
        self.rate == self.p.ceiling_bps() && self.target == self.p.ceiling_bps()
    }

    /// Applies the α ticks due at or before `t`.
    fn alpha_until(&mut self, t: Instant) {
        let k = period_ns(self.p.alpha_interval);
        let g = self.p.g;
        while let Some(at) = self.alpha_next.filter(|&at| at <= t) {
            if !self.alpha_cnp && self.alpha.decay(g) == self.alpha {
                // A fixed point: skip to the first tick after `t`, on the grid.
                let n = (t.as_nanos() - at.as_nanos()) / k + 1;
                self.alpha_next = n.checked_mul(k).and_then(|x| later(at, x));
                break;
            }
            self.alpha = if core::mem::take(&mut self.alpha_cnp) { self.alpha.raise(g) } else { self.alpha.decay(g) };
            self.alpha_next = later(at, k);
        }
    }
}

/// Half-way from `rate` to `target`, rounded towards `target` so that the
/// rate reaches it instead of stopping one b/s short.
fn midpoint(rate: u64, target: u64) -> u64 {
    if target >= rate {
        rate + (target - rate).div_ceil(2)
    } else {
        rate - (rate - target).div_ceil(2)
    }
}
