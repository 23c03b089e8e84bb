//! Virtual time. The engine never reads a clock: every call that depends on
//! time takes `now`, so a test can drive it through hours in microseconds
//! and replay a run exactly.

use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point in time, in nanoseconds since an arbitrary epoch chosen by the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);

    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time since `earlier`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.as_nanos().min(u128::from(u64::MAX)) as u64))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_since(earlier)
    }
}

/// The IBTA local ACK timeout: 4.096 us x 2^exponent; exponent 0 means no timeout.
pub fn local_ack_timeout(exponent: u8) -> Option<Duration> {
    (exponent != 0).then(|| Duration::from_nanos(4096u64 << exponent.min(31)))
}

/// Durations as whole nanoseconds, at least 1 so that no periodic timer can
/// stand still.
pub(crate) fn period_ns(d: core::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// `t + ns`, or `None` past the end of time (a saturated timer would fire forever).
pub(crate) fn later(t: Instant, ns: u64) -> Option<Instant> {
    t.as_nanos().checked_add(ns).map(Instant::from_nanos)
}
