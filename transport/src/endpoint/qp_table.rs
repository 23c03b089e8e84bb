//! The endpoint's QPs by number, in pages of 64 consecutive QPNs.
//!
//! A device hands its QPNs out in sequence from a random start
//! ([`crate::qpn_alloc`]), so its QPs fill a few pages side by side, and a
//! page is found by its distance from the first (a binary search when QPs
//! came and went and left gaps). A lookup then reads the page's header and
//! the one line that holds the QP's pointer: two lines whose addresses
//! follow from the QPN, where a B-tree of a host's 510 QPs walked three
//! levels of nodes, each a line of keys and a line of children, before the
//! QP; in a fabric of 256 such hosts those nodes are cold at every packet
//! (docs/performance.md). A bit per slot keeps walks and the search for
//! the next QP from reading empty slots.
//!
//! Everything iterates in QPN order, as the ordered map it replaces did:
//! the transmit walk and the timers go in that order.

use crate::qp::Qp;

const PAGE_BITS: u32 = 6;
const PAGE: usize = 1 << PAGE_BITS;

#[derive(Debug)]
struct Page {
    /// QPN >> PAGE_BITS of every QP in the page.
    number: u32,
    /// Which slots hold a QP.
    used: u64,
    slots: [Option<Box<Qp>>; PAGE],
}

impl Page {
    fn new(number: u32) -> Page {
        Page { number, used: 0, slots: std::array::from_fn(|_| None) }
    }

    fn first_qpn(&self) -> u32 {
        self.number << PAGE_BITS
    }

    /// The used slot numbers at or after `from` (a slot number), in order.
    fn used_from(&self, from: usize) -> Bits {
        Bits(self.used & (u64::MAX << from))
    }

    /// The QPN of the page's first QP (a page in the table has one).
    fn first_used(&self) -> u32 {
        self.first_qpn() | self.used.trailing_zeros()
    }

    /// The QPN of the page's last QP.
    fn last_used(&self) -> u32 {
        self.first_qpn() | (63 - self.used.leading_zeros())
    }
}

/// The set bits of a word, lowest first.
struct Bits(u64);

impl Iterator for Bits {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let i = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(i)
    }
}

impl DoubleEndedIterator for Bits {
    fn next_back(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let i = 63 - self.0.leading_zeros() as usize;
        self.0 &= !(1 << i);
        Some(i)
    }
}

fn split(qpn: u32) -> (u32, usize) {
    (qpn >> PAGE_BITS, (qpn as usize) & (PAGE - 1))
}

/// QPs by QPN (see the module's comment).
#[derive(Debug, Default)]
pub(crate) struct QpTable {
    /// Pages that hold at least one QP, by page number.
    pages: Vec<Page>,
    len: usize,
}

impl QpTable {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The index in `pages` of page `number`: where its distance from the
    /// first page says (no gaps), or by search.
    #[inline]
    fn page(&self, number: u32) -> Result<usize, usize> {
        let first = match self.pages.first() {
            Some(p) => p.number,
            None => return Err(0),
        };
        let guess = number.wrapping_sub(first) as usize;
        if guess < self.pages.len() && self.pages[guess].number == number {
            return Ok(guess);
        }
        self.pages.binary_search_by_key(&number, |p| p.number)
    }

    #[inline]
    pub fn get(&self, qpn: u32) -> Option<&Qp> {
        let (number, slot) = split(qpn);
        let i = self.page(number).ok()?;
        self.pages[i].slots[slot].as_deref()
    }

    #[inline]
    pub fn get_mut(&mut self, qpn: u32) -> Option<&mut Qp> {
        let (number, slot) = split(qpn);
        let i = self.page(number).ok()?;
        self.pages[i].slots[slot].as_deref_mut()
    }

    pub fn contains_key(&self, qpn: u32) -> bool {
        self.get(qpn).is_some()
    }

    /// Puts `qp` under `qpn`, giving back the QP it replaces.
    pub fn insert(&mut self, qpn: u32, qp: Box<Qp>) -> Option<Box<Qp>> {
        let (number, slot) = split(qpn);
        let i = match self.page(number) {
            Ok(i) => i,
            Err(i) => {
                self.pages.insert(i, Page::new(number));
                i
            }
        };
        let page = &mut self.pages[i];
        page.used |= 1 << slot;
        let old = page.slots[slot].replace(qp);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    pub fn remove(&mut self, qpn: u32) -> Option<Box<Qp>> {
        let (number, slot) = split(qpn);
        let i = self.page(number).ok()?;
        let page = &mut self.pages[i];
        let qp = page.slots[slot].take()?;
        page.used &= !(1 << slot);
        self.len -= 1;
        if page.used == 0 {
            self.pages.remove(i);
        }
        Some(qp)
    }

    /// The first QPN at or after `from`, if any.
    pub fn first_from(&self, from: u32) -> Option<u32> {
        let (number, slot) = split(from);
        let start = match self.page(number) {
            Ok(i) => {
                let page = &self.pages[i];
                if let Some(s) = page.used_from(slot).next() {
                    return Some(page.first_qpn() | s as u32);
                }
                i + 1
            }
            Err(i) => i,
        };
        // A page after it is never empty.
        self.pages.get(start).map(Page::first_used)
    }

    /// The first QPN at or after `from`, or else the first of all.
    pub fn first_from_wrapping(&self, from: u32) -> Option<u32> {
        self.first_from(from).or_else(|| self.first())
    }

    /// The last QPN before `before`, or else the last of all.
    pub fn last_before_wrapping(&self, before: u32) -> Option<u32> {
        let (number, slot) = split(before);
        let end = match self.page(number) {
            Ok(i) => {
                let page = &self.pages[i];
                let below = page.used & ((1u64 << slot) - 1);
                if let Some(s) = Bits(below).next_back() {
                    return Some(page.first_qpn() | s as u32);
                }
                i
            }
            Err(i) => i,
        };
        let page = if end > 0 { self.pages.get(end - 1) } else { None }.or_else(|| self.pages.last())?;
        Some(page.last_used())
    }

    pub fn first(&self) -> Option<u32> {
        self.pages.first().map(Page::first_used)
    }

    /// The QPs in QPN order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Qp)> + '_ {
        self.pages.iter().flat_map(|p| {
            p.used_from(0).map(move |s| (p.first_qpn() | s as u32, p.slots[s].as_deref().expect("a used slot")))
        })
    }

    pub fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        self.pages.iter().flat_map(|p| p.used_from(0).map(move |s| p.first_qpn() | s as u32))
    }

    pub fn values(&self) -> impl Iterator<Item = &Qp> + '_ {
        self.iter().map(|(_, q)| q)
    }

    /// The QPs in QPN order, to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u32, &mut Qp)> + '_ {
        self.pages.iter_mut().flat_map(|p| PageMut {
            first: p.first_qpn(),
            used: p.used,
            slots: &mut p.slots[..],
            skipped: 0,
        })
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Qp> + '_ {
        self.iter_mut().map(|(_, q)| q)
    }
}

/// A page's QPs to change, found by the used bits (empty slots unread).
struct PageMut<'a> {
    first: u32,
    used: u64,
    /// The slots from number `skipped` on.
    slots: &'a mut [Option<Box<Qp>>],
    skipped: usize,
}

impl<'a> Iterator for PageMut<'a> {
    type Item = (u32, &'a mut Qp);
    fn next(&mut self) -> Option<Self::Item> {
        let s = Bits(self.used).next()?;
        self.used &= self.used - 1;
        let slots = std::mem::take(&mut self.slots);
        let (slot, rest) = slots[s - self.skipped..].split_first_mut()?;
        (self.slots, self.skipped) = (rest, s + 1);
        Some((self.first | s as u32, slot.as_deref_mut().expect("a used slot")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Pd;
    use crate::qp::{CqId, QpInitAttr, QpType};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn qp(qpn: u32) -> Box<Qp> {
        Box::new(Qp::new(qpn, QpInitAttr::new(QpType::Rc, Pd(1), CqId(0))))
    }

    /// QPNs as a device makes them (runs in sequence) and stray ones far
    /// away, in a 24-bit space, so pages come with and without gaps.
    fn qpn() -> impl Strategy<Value = u32> {
        prop_oneof![4 => 0x1000u32..0x1100, 1 => 0u32..0x100, 1 => 0u32..(1 << 24)]
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32),
        Remove(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![2 => qpn().prop_map(Op::Insert), 1 => qpn().prop_map(Op::Remove)]
    }

    proptest! {
        /// Every answer is the ordered map's (the structure it replaced),
        /// after any inserts and removals.
        #[test]
        fn answers_as_an_ordered_map_does(ops in proptest::collection::vec(op(), 0..300), probes in proptest::collection::vec(qpn(), 1..40)) {
            let (mut t, mut m) = (QpTable::default(), BTreeMap::new());
            for op in ops {
                match op {
                    Op::Insert(n) => {
                        let old = t.insert(n, qp(n)).map(|q| q.num);
                        prop_assert_eq!(old, m.insert(n, n));
                    }
                    Op::Remove(n) => prop_assert_eq!(t.remove(n).map(|q| q.num), m.remove(&n)),
                }
                prop_assert_eq!(t.len(), m.len());
                prop_assert_eq!(t.is_empty(), m.is_empty());
            }
            let keys: Vec<u32> = m.keys().copied().collect();
            prop_assert_eq!(t.keys().collect::<Vec<_>>(), keys.clone());
            prop_assert_eq!(t.iter().map(|(k, q)| (k, q.num)).collect::<Vec<_>>(), keys.iter().map(|&k| (k, k)).collect::<Vec<_>>());
            prop_assert_eq!(t.values().map(|q| q.num).collect::<Vec<_>>(), keys.clone());
            for (k, q) in t.iter_mut() {
                prop_assert_eq!(k, q.num);
                q.opens = k;
            }
            prop_assert_eq!(t.values_mut().map(|q| q.opens).collect::<Vec<_>>(), keys.clone());
            prop_assert_eq!(t.first(), m.keys().next().copied());
            for &p in probes.iter().chain(&keys) {
                for p in [p, p.wrapping_add(1), p.wrapping_sub(1)] {
                    prop_assert_eq!(t.get(p).map(|q| q.num), m.get(&p).copied());
                    prop_assert_eq!(t.get_mut(p).map(|q| q.num), m.get(&p).copied());
                    prop_assert_eq!(t.contains_key(p), m.contains_key(&p));
                    let from = m.range(p..).next().map(|(&k, _)| k);
                    prop_assert_eq!(t.first_from(p), from);
                    prop_assert_eq!(t.first_from_wrapping(p), from.or_else(|| m.keys().next().copied()));
                    let before = m.range(..p).next_back().or_else(|| m.iter().next_back()).map(|(&k, _)| k);
                    prop_assert_eq!(t.last_before_wrapping(p), before);
                }
            }
        }
    }

    #[test]
    fn a_device_of_consecutive_qpns_is_found_without_search() {
        let mut t = QpTable::default();
        for n in 0x2_0000..0x2_0000 + 510 {
            t.insert(n, qp(n));
        }
        assert_eq!(t.pages.len(), 8);
        for n in 0x2_0000..0x2_0000 + 510u32 {
            let (number, _) = split(n);
            let guess = number.wrapping_sub(t.pages[0].number) as usize;
            assert_eq!(t.pages[guess].number, number);
            assert_eq!(t.get(n).map(|q| q.num), Some(n));
        }
        // Emptying a page removes it; the pages after it are then found by search.
        for n in 0x2_0040..0x2_0080 {
            t.remove(n);
        }
        assert_eq!(t.pages.len(), 7);
        assert_eq!(t.get(0x2_0100).map(|q| q.num), Some(0x2_0100));
        assert_eq!(t.first_from(0x2_0040), Some(0x2_0080));
        assert_eq!(t.last_before_wrapping(0x2_0080), Some(0x2_003f));
    }
}
