//! A link direction: a serialisation rate and a propagation delay.

use core::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub rate_bps: u64,
    pub delay: Duration,
}

impl Link {
    pub fn new(rate_bps: u64, delay: Duration) -> Link {
        Link { rate_bps: rate_bps.max(1), delay }
    }

    /// Time to put `bytes` on the wire, rounded up to whole nanoseconds so
    /// a port never runs faster than its rate.
    pub fn serialise(&self, bytes: usize) -> Duration {
        Duration::from_nanos((bytes as u64 * 8 * 1_000_000_000).div_ceil(self.rate_bps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forty_gig_takes_200ns_per_kilobyte() {
        let l = Link::new(40_000_000_000, Duration::from_micros(1));
        assert_eq!(l.serialise(1000), Duration::from_nanos(200));
        assert_eq!(l.serialise(1001), Duration::from_nanos(201));
    }
}
