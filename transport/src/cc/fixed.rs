//! Fixed-point α and g. The state holds no floating point, so a trajectory
//! is the same integers on every machine and every run (§5 pitfall 1 asks
//! for reproducible tie-breaks; this is the arithmetic half of that).

/// The rate-reduction factor α in [0, 1], in units of 2^-32.
///
/// 32 fractional bits keep the truncation error of n decay steps below
/// n·2^-32 (2.3e-7 after 1000 steps), far inside the 6 digits of §2.3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Alpha(u64);

impl Alpha {
    pub const FRAC_BITS: u32 = 32;
    pub const ZERO: Alpha = Alpha(0);
    pub const ONE: Alpha = Alpha(1 << Self::FRAC_BITS);

    /// From raw units of 2^-32, clamped to [0, 1].
    pub const fn from_raw(raw: u64) -> Alpha {
        Alpha(if raw > Self::ONE.0 { Self::ONE.0 } else { raw })
    }

    /// `num / den`, rounded down and clamped to [0, 1]; `den == 0` gives 1.
    pub const fn from_ratio(num: u64, den: u64) -> Alpha {
        if den == 0 || num >= den {
            return Self::ONE;
        }
        Alpha(((num as u128) << Self::FRAC_BITS).wrapping_div(den as u128) as u64)
    }

    pub const fn raw(self) -> u64 {
        self.0
    }

    /// For display and test tolerances only; the state never uses it.
    pub fn to_f64(self) -> f64 {
        self.0 as f64 / Self::ONE.0 as f64
    }

    /// α ← (1 − g)·α, truncating.
    pub fn decay(self, g: Gain) -> Alpha {
        Alpha(self.0 - g.of(self.0))
    }

    /// α ← (1 − g)·α + g, truncating each product; never above 1.
    pub fn raise(self, g: Gain) -> Alpha {
        Alpha::from_raw(self.decay(g).0 + g.of(Self::ONE.0))
    }

    /// `rate · (1 − α / 2^shift)`, rounded up so that a cut never overshoots.
    pub fn cut(self, rate: u64, shift: u32) -> u64 {
        let cut = (u128::from(rate) * u128::from(self.0)) >> (Self::FRAC_BITS + shift.min(63));
        rate - cut as u64
    }
}

/// The EWMA gain g as a fraction `num / den` (paper 1/256, NVIDIA 5/1024).
///
/// A fraction rather than a power of two because NVIDIA's `dce_tcp_g` = 1019
/// means a decay factor of 1019/1024, i.e. g = 5/1024.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gain {
    pub num: u32,
    pub den: u32,
}

impl Gain {
    pub const fn new(num: u32, den: u32) -> Gain {
        Gain { num, den }
    }

    /// `floor(x · g)` for `x ≤ 2^32`; a zero denominator or g > 1 is read as g = 1.
    fn of(self, x: u64) -> u64 {
        if self.den == 0 {
            return x;
        }
        let den = u128::from(self.den);
        let num = u128::from(self.num).min(den);
        (u128::from(x) * num / den) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raise_from_one_stays_one_and_cut_halves() {
        let g = Gain::new(1, 256);
        assert_eq!(Alpha::ONE.raise(g), Alpha::ONE);
        assert_eq!(Alpha::ONE.cut(40_000_000_000, 1), 20_000_000_000);
        assert_eq!(Alpha::ZERO.cut(40_000_000_000, 1), 40_000_000_000);
    }

    #[test]
    fn degenerate_gains_do_not_panic() {
        for g in [Gain::new(0, 0), Gain::new(9, 1), Gain::new(u32::MAX, u32::MAX)] {
            assert_eq!(Alpha::ONE.decay(g), Alpha::ZERO);
            assert_eq!(Alpha::ZERO.raise(g), Alpha::ONE);
        }
        assert_eq!(Alpha::ONE.decay(Gain::new(0, 5)), Alpha::ONE);
        assert_eq!(Alpha::from_ratio(1, 0), Alpha::ONE);
        assert_eq!(Alpha::ONE.cut(u64::MAX, 200), u64::MAX - 1);
        assert_eq!(Alpha::ONE.cut(u64::MAX, 0), 0);
    }
}
