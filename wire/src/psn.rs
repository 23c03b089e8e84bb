//! Packet sequence numbers: 24-bit, wrapping, ordered within a half window.

use core::cmp::Ordering;
use core::fmt;

/// A 24-bit packet sequence number.
///
/// Arithmetic wraps modulo 2^24. Ordering follows the IBTA rule used by every
/// implementation: `a` is before `b` when `b - a (mod 2^24)` lies in
/// `1..2^23`, so comparisons are only meaningful for PSNs less than half the
/// space apart (the transport never has more outstanding than that).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Number of distinct PSNs.
    pub const MODULUS: u32 = 1 << 24;
    /// Half the space: the largest distance at which order is defined.
    pub const HALF: u32 = 1 << 23;
    /// The mask of a PSN's 24 bits.
    pub const MASK: u32 = Self::MODULUS - 1;

    /// A PSN from the low 24 bits of `v` (the upper bits are discarded).
    #[inline]
    pub const fn new(v: u32) -> Psn {
        Psn(v & Self::MASK)
    }

    /// The 24-bit value.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n`, wrapping.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub const fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }

    /// `self - n`, wrapping.
    #[inline]
    pub const fn sub(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_sub(n))
    }

    /// The next PSN.
    #[inline]
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// Forward distance from `earlier` to `self`, modulo 2^24.
    #[inline]
    pub const fn distance_from(self, earlier: Psn) -> u32 {
        self.0.wrapping_sub(earlier.0) & Self::MASK
    }

    /// Signed distance `self - other` in `-2^23 ..= 2^23 - 1`.
    #[inline]
    pub const fn diff(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back to sign-extend it.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Whether `self` lies in `[start, start + len)`, modulo 2^24.
    #[inline]
    pub const fn in_window(self, start: Psn, len: u32) -> bool {
        self.distance_from(start) < len
    }
}

impl PartialOrd for Psn {
    fn partial_cmp(&self, other: &Psn) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Psn {
    /// Half-window order. Not a total order over all of 2^24 (no such order
    /// exists for wrapping numbers); consistent for PSNs closer than 2^23.
    fn cmp(&self, other: &Psn) -> Ordering {
        self.diff(*other).cmp(&0)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_24_bits() {
        assert_eq!(Psn::new(0xff_ffff).next(), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), Psn::new(0xff_ffff));
        assert_eq!(Psn::new(0x1_000_005).value(), 5);
    }

    #[test]
    fn orders_across_the_wrap() {
        let last = Psn::new(0xff_fffe);
        let first = Psn::new(1);
        assert!(last < first);
        assert_eq!(first.diff(last), 3);
        assert_eq!(last.diff(first), -3);
        assert_eq!(first.distance_from(last), 3);
    }

    #[test]
    fn half_window_boundary() {
        let a = Psn::new(0);
        assert!(a < Psn::new(Psn::HALF - 1));
        // Exactly half the space away reads as "before": the diff is -2^23.
        assert!(Psn::new(Psn::HALF) < a);
    }

    #[test]
    fn window_membership() {
        let start = Psn::new(0xff_fff0);
        assert!(Psn::new(0xff_fff0).in_window(start, 32));
        assert!(Psn::new(0x00_000f).in_window(start, 32));
        assert!(!Psn::new(0x00_0010).in_window(start, 32));
        assert!(!Psn::new(0xff_ffef).in_window(start, 32));
    }
}
