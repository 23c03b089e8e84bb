//! Handing out QP numbers: from a range (all of them, or the part of a
//! shared device one process owns), starting at a random point so that a
//! blind peer cannot guess them, skipping the numbers in use.

use crate::error::VerbsError;
use crate::rng::Rng;

/// The lowest QPN a created QP gets: QPs 0 and 1 are the SMI and GSI, and
/// rxe numbers from 0x11.
pub(crate) const FIRST_QPN: u32 = 0x11;
/// The first QPN is drawn from this many numbers above [`FIRST_QPN`].
const QPN_START_SPREAD: u32 = 1 << 22;
/// One past the highest QPN a created QP gets (0xFFFFFF is multicast's).
pub(crate) const QPN_END: u32 = 0xff_ffff;

#[derive(Debug, Clone)]
pub(crate) struct QpnAllocator {
    next: u32,
    range: std::ops::Range<u32>,
}

impl QpnAllocator {
    /// Every QPN a created QP may have, from a random first one (defence
    /// in depth, like the keys').
    pub(crate) fn new(rng: &mut Rng) -> QpnAllocator {
        QpnAllocator { next: FIRST_QPN + rng.below(u64::from(QPN_START_SPREAD)) as u32, range: FIRST_QPN..QPN_END }
    }

    /// The QPNs handed out.
    pub(crate) fn range(&self) -> std::ops::Range<u32> {
        self.range.clone()
    }

    /// Hands out QPNs from `range` only (clamped to the QPNs a created QP
    /// may have), starting at the point of it that follows from the random
    /// first QPN. `in_use`: whether QPs exist (then the range is fixed).
    pub(crate) fn set_range(&mut self, range: std::ops::Range<u32>, in_use: bool) -> Result<(), VerbsError> {
        let range = range.start.max(FIRST_QPN)..range.end.min(QPN_END);
        if range.is_empty() || in_use {
            let attr = if range.is_empty() { "qpn range (empty)" } else { "qpn range (QPs exist)" };
            return Err(VerbsError::InvalidAttribute { qpn: 0, attr, value: u64::from(range.start) });
        }
        self.next = range.start + (self.next - FIRST_QPN) % (range.end - range.start);
        self.range = range;
        Ok(())
    }

    /// The next free QPN, `taken` telling which are in use (`used` of them).
    pub(crate) fn allocate(&mut self, used: usize, taken: impl Fn(u32) -> bool) -> Result<u32, VerbsError> {
        let range = self.range.clone();
        if used >= range.len() {
            return Err(VerbsError::QpnsExhausted { start: range.start, end: range.end });
        }
        let next = |q: u32| if q + 1 >= range.end { range.start } else { q + 1 };
        let mut qpn = self.next;
        while taken(qpn) {
            qpn = next(qpn);
        }
        self.next = next(qpn);
        Ok(qpn)
    }
}
