//! An ordered set of QP numbers as bits over the span the numbers occupy,
//! for the agenda's ready QPs.
//!
//! A device hands its QPNs out in sequence from a random point
//! (`qpn_alloc`), so the QPs it holds sit close together: a host of a
//! 256-host all-to-all has 510 QPs in a span of 510 numbers, whose ready
//! bits fill 8 words, one cache line. A B-tree of the same numbers
//! spreads them over dozens of nodes, and every insert, removal and
//! search walked three levels of them, cold on a host the simulator had
//! not visited for a while.
//!
//! Two summary levels above the bits (a bit per non-empty word, and a bit
//! per non-empty summary word) keep a search short however wide the span
//! grows: a device that made and destroyed QPs for long may hold numbers
//! far apart (the whole 24-bit space is 2 MiB of bits, 32 KiB of summary,
//! 512 bytes of top level; a search reads at most a word of each level
//! plus a scan of the top one).

/// QP numbers are 24 bits; larger values name no QP and are not kept.
const QPN_LIMIT: u32 = 1 << 24;

#[derive(Debug, Default, Clone)]
pub(super) struct QpnBits {
    /// The QPN of bit 0 of `words[0]` (a multiple of 64).
    base: u32,
    /// Bit `i` of `words[w]`: QPN `base + 64 w + i` is in the set.
    words: Vec<u64>,
    /// Bit `j` of `summary[s]`: `words[64 s + j]` is not zero.
    summary: Vec<u64>,
    /// Bit `k` of `top[t]`: `summary[64 t + k]` is not zero.
    top: Vec<u64>,
    /// QPNs in the set.
    len: usize,
}

impl QpnBits {
    /// Adds `qpn` (a value of 2^24 or more names no QP: ignored).
    pub fn insert(&mut self, qpn: u32) {
        if qpn >= QPN_LIMIT {
            return;
        }
        if self.len == 0 {
            // Empty: the span starts over here (no rebase of old zeros).
            self.clear();
        }
        if self.words.is_empty() {
            self.base = qpn & !63;
        } else if qpn < self.base {
            self.rebase(qpn & !63);
        }
        let idx = (qpn - self.base) as usize;
        let w = idx / 64;
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
            self.summary.resize(self.words.len().div_ceil(64), 0);
            self.top.resize(self.summary.len().div_ceil(64), 0);
        }
        let (was, bit) = (self.words[w], 1 << (idx % 64));
        self.words[w] = was | bit;
        self.len += usize::from(was & bit == 0);
        if was == 0 {
            let s = w / 64;
            let sw = self.summary[s];
            self.summary[s] = sw | 1 << (w % 64);
            if sw == 0 {
                self.top[s / 64] |= 1 << (s % 64);
            }
        }
    }

    /// Takes `qpn` out (nothing if it is not in).
    pub fn remove(&mut self, qpn: u32) {
        let Some(idx) = qpn.checked_sub(self.base).map(|i| i as usize) else { return };
        let w = idx / 64;
        let Some(word) = self.words.get_mut(w) else { return };
        let bit = 1 << (idx % 64);
        self.len -= usize::from(*word & bit != 0);
        *word &= !bit;
        if *word == 0 {
            let s = w / 64;
            self.summary[s] &= !(1 << (w % 64));
            if self.summary[s] == 0 {
                self.top[s / 64] &= !(1 << (s % 64));
            }
        }
    }

    /// Empties the set, keeping its memory; the next insert sets the base.
    pub fn clear(&mut self) {
        self.words.clear();
        self.summary.clear();
        self.top.clear();
        self.len = 0;
    }

    /// The smallest QPN in the set at or after `from`.
    pub fn next_from(&self, from: u32) -> Option<u32> {
        let idx = from.saturating_sub(self.base) as usize;
        let w = idx / 64;
        let here = *self.words.get(w)? & (!0u64 << (idx % 64));
        let (w, word) = if here != 0 { (w, here) } else { self.next_word(w + 1).map(|w| (w, self.words[w]))? };
        Some(self.base + (w * 64 + word.trailing_zeros() as usize) as u32)
    }

    /// The smallest QPN in the set.
    pub fn first(&self) -> Option<u32> {
        self.next_from(0)
    }

    /// The first non-empty word at or after `w`.
    fn next_word(&self, w: usize) -> Option<usize> {
        let s = w / 64;
        let here = *self.summary.get(s)? & (!0u64 << (w % 64));
        if here != 0 {
            return Some(s * 64 + here.trailing_zeros() as usize);
        }
        let s = self.next_summary(s + 1)?;
        Some(s * 64 + self.summary[s].trailing_zeros() as usize)
    }

    /// The first non-empty summary word at or after `s`.
    fn next_summary(&self, s: usize) -> Option<usize> {
        let t = s / 64;
        let here = *self.top.get(t)? & (!0u64 << (s % 64));
        if here != 0 {
            return Some(t * 64 + here.trailing_zeros() as usize);
        }
        let (t, word) = self.top.iter().enumerate().skip(t + 1).find(|(_, &x)| x != 0)?;
        Some(t * 64 + word.trailing_zeros() as usize)
    }

    /// Moves bit 0 down to `base` (below the current one): the words shift
    /// up and the summaries are made again. Rare: only a QPN below every
    /// one the set has held since it was last empty.
    fn rebase(&mut self, base: u32) {
        let shift = ((self.base - base) / 64) as usize;
        self.words.splice(0..0, std::iter::repeat_n(0, shift));
        self.base = base;
        self.summary.clear();
        self.summary.resize(self.words.len().div_ceil(64), 0);
        self.top.clear();
        self.top.resize(self.summary.len().div_ceil(64), 0);
        for (w, _) in self.words.iter().enumerate().filter(|(_, &x)| x != 0) {
            self.summary[w / 64] |= 1 << (w % 64);
            self.top[w / 4096] |= 1 << ((w / 64) % 64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32),
        Remove(u32),
        Clear,
    }

    /// QPNs near a random point (as a device hands them out), some far
    /// below and above it (rebasing, wide spans), and some past 24 bits.
    fn qpn() -> impl Strategy<Value = u32> {
        prop_oneof![
            8 => 0x40_0000u32..0x40_0000 + 600,
            2 => 0x40_0000u32 - 70_000..0x40_0000 + 300_000,
            1 => 0u32..QPN_LIMIT,
            1 => prop_oneof![Just(0u32), Just(QPN_LIMIT - 1), Just(QPN_LIMIT), Just(u32::MAX)],
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => qpn().prop_map(Op::Insert),
            4 => qpn().prop_map(Op::Remove),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        /// After any sequence of inserts, removals and clears, every
        /// search answers what an ordered set of the same QPNs (those
        /// below 2^24) answers.
        #[test]
        fn answers_as_an_ordered_set(ops in proptest::collection::vec(op(), 1..200), probes in proptest::collection::vec(qpn(), 1..40)) {
            let (mut bits, mut model) = (QpnBits::default(), BTreeSet::new());
            for op in ops {
                match op {
                    Op::Insert(q) => {
                        bits.insert(q);
                        if q < QPN_LIMIT {
                            model.insert(q);
                        }
                    }
                    Op::Remove(q) => {
                        bits.remove(q);
                        model.remove(&q);
                    }
                    Op::Clear => {
                        bits.clear();
                        model.clear();
                    }
                }
                prop_assert_eq!(bits.first(), model.first().copied());
                prop_assert_eq!(bits.len, model.len());
                for &p in &probes {
                    prop_assert_eq!(bits.next_from(p), model.range(p..).next().copied(), "next from {:#x}", p);
                }
            }
        }
    }

    #[test]
    fn searches_cross_empty_words_summaries_and_top_words() {
        let mut b = QpnBits::default();
        let base = 0x10_0000;
        // Far apart: another word, another summary word, another top word.
        let qpns = [base + 3, base + 64 * 5, base + 64 * 64 * 3 + 1, base + 64 * 64 * 64 * 2 + 63];
        for q in qpns {
            b.insert(q);
        }
        assert_eq!(b.first(), Some(qpns[0]));
        for w in qpns.windows(2) {
            assert_eq!(b.next_from(w[0] + 1), Some(w[1]), "after {:#x}", w[0]);
        }
        assert_eq!(b.next_from(qpns[3] + 1), None);
        // Below every one: a rebase keeps them all.
        b.insert(base - 1000);
        assert_eq!(b.first(), Some(base - 1000));
        assert_eq!(b.next_from(base - 999), Some(qpns[0]));
        assert_eq!(b.next_from(qpns[2]), Some(qpns[2]));
        for q in qpns {
            b.remove(q);
        }
        assert_eq!(b.next_from(base - 999), None);
        assert_eq!(b.first(), Some(base - 1000));
    }
}
