//! The pacer: when may the next packet of a QP leave at its current rate.
//!
//! It models a serializer at the rate: each packet occupies the link for
//! bytes·8/rate seconds. The debt is kept exactly, in bits × 10^9 (bit·ns at
//! 1 b/s), so n back-to-back packets leave at exactly
//! ceil(total bits · 10^9 / rate) ns after the first: rounding never
//! accumulates, however long the run. Idle or late time earns credit only
//! up to the burst allowance (none by default: exact pacing).

use crate::Instant;
use core::time::Duration;

const NS_PER_S: u128 = 1_000_000_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pacer {
    rate_bps: u64,
    /// The debt is measured from here.
    anchor: Instant,
    /// Bits × 10^9 not yet drained at `anchor`; below zero by at most the
    /// burst allowance (and the sub-nanosecond part of the last packet,
    /// kept to avoid drift).
    debt: i128,
    /// Link time a late or idle sender may make up for.
    burst: Duration,
}

impl Pacer {
    /// A pacer at `rate_bps` (at least 1 b/s), with the link free.
    pub fn new(rate_bps: u64) -> Pacer {
        Pacer::with_burst(rate_bps, Duration::ZERO)
    }

    /// A pacer that lets a sender which comes late (or idles) send up to
    /// `burst` of link time at once to catch up: what real sockets need,
    /// where wake-ups are late by tens of microseconds.
    pub fn with_burst(rate_bps: u64, burst: Duration) -> Pacer {
        Pacer { rate_bps: rate_bps.max(1), anchor: Instant::ZERO, debt: 0, burst }
    }

    pub fn rate(&self) -> u64 {
        self.rate_bps
    }

    /// The earliest instant at or after `now` at which the next packet may leave.
    pub fn next_send_at(&self, now: Instant) -> Instant {
        now.max(self.busy_until())
    }

    /// Whether a rate change at `t` would leave the next departure where
    /// it is: the link is idle by then (strictly after `busy_until`, to be
    /// safe: a change at that instant keeps the sub-nanosecond remainder
    /// a moment longer) and no burst credit, which accrues at the rate, is
    /// kept.
    pub fn idle_at(&self, t: Instant) -> bool {
        self.burst.is_zero() && t > self.busy_until()
    }

    /// A packet of `bytes` left at `at` (normally [`Self::next_send_at`]).
    pub fn on_sent(&mut self, at: Instant, bytes: usize) {
        self.settle(at);
        let bits = (bytes as u128).saturating_mul(8 * NS_PER_S);
        self.debt = self.debt.saturating_add(i128::try_from(bits).unwrap_or(i128::MAX));
    }

    /// A new rate from `now` on: what is still owed drains at the new rate
    /// (§5 pitfall 4: a rate change re-paces the already-scheduled send).
    pub fn set_rate(&mut self, now: Instant, rate_bps: u64) {
        self.settle(now);
        self.rate_bps = rate_bps.max(1);
    }

    fn busy_until(&self) -> Instant {
        if self.debt <= 0 {
            return self.anchor;
        }
        let ns = (self.debt as u128).div_ceil(u128::from(self.rate_bps));
        Instant::from_nanos(self.anchor.as_nanos().saturating_add(u64::try_from(ns).unwrap_or(u64::MAX)))
    }

    /// Moves the anchor to `t`, draining the debt at the current rate.
    fn settle(&mut self, t: Instant) {
        if t <= self.anchor {
            return;
        }
        let drained = u128::from(t.as_nanos() - self.anchor.as_nanos()) * u128::from(self.rate_bps);
        let credit = self.burst.as_nanos() as i128 * i128::from(self.rate_bps);
        let debt = self.debt.saturating_sub(i128::try_from(drained).unwrap_or(i128::MAX));
        // Without an allowance, idle time ends the debt at zero, keeping the
        // sub-nanosecond remainder only while the link stays busy.
        self.debt = if credit == 0 {
            if t > self.busy_until() {
                0
            } else {
                debt
            }
        } else {
            debt.max(-credit)
        };
        self.anchor = t;
    }
}
