//! The event queue's order: a calendar of the near future. Nearly every
//! event a fabric schedules is due within a link delay or two (a port
//! frees, a packet arrives), so events go into buckets of [`WIDTH_NS`] of
//! simulated time, and only the bucket due now is put in order. In a
//! 256-host all-to-all a binary heap over every pending event (1,100 to
//! 6,500) was 13 % of the time, its lower levels gone from the caches
//! between two pops; the bucket due now is a small part of them, and the
//! other buckets are only appended to. The bucket due now is sorted once
//! when the ring turns to it and taken from its end: a heap of its 10-40
//! events cost a sift of mispredicted branches at every pop (6 % of that
//! run). Events scheduled for it or before it while it is being taken,
//! which are few, wait in a small heap beside it. Events beyond the
//! ring's horizon wait in a heap of their own and move into the ring as
//! it turns.
//!
//! The order is exactly a heap's: time, then the order scheduled.

use rdma_transport::Instant;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Simulated time a bucket spans: 2^SHIFT ns.
const SHIFT: u32 = 3;
pub const WIDTH_NS: u64 = 1 << SHIFT;
/// Buckets in the ring (a power of two): the horizon is 4 us.
const BUCKETS: usize = 512;
const WORDS: usize = BUCKETS / 64;

/// (due, order scheduled, slot): unique, so nothing ties.
type Key = (Instant, u64, usize);

#[derive(Debug)]
pub struct Calendar {
    /// The bucket due now as the ring held it when it turned there,
    /// sorted latest first (the next is at the end).
    run: Vec<Key>,
    /// What was scheduled for the bucket due now, or one before it, after
    /// the ring turned there: a min-heap.
    now: BinaryHeap<Reverse<Key>>,
    /// The number of the bucket `now` holds (time / WIDTH_NS).
    at: u64,
    /// Buckets `at + 1 ..= at + BUCKETS - 1`, unsorted, at index `bucket % BUCKETS`.
    ring: Vec<Vec<Key>>,
    /// Which of `ring` are not empty.
    filled: [u64; WORDS],
    in_ring: usize,
    /// Buckets `at + BUCKETS` on.
    later: BinaryHeap<Reverse<Key>>,
    seq: u64,
    /// Room for sorting the run (kept, so that a turn allocates nothing).
    sorted: Vec<Key>,
}

impl Default for Calendar {
    fn default() -> Calendar {
        Calendar {
            run: Vec::new(),
            now: BinaryHeap::new(),
            at: 0,
            ring: vec![Vec::new(); BUCKETS],
            filled: [0; WORDS],
            in_ring: 0,
            later: BinaryHeap::new(),
            seq: 0,
            sorted: Vec::new(),
        }
    }
}

fn bucket(t: Instant) -> u64 {
    t.as_nanos() >> SHIFT
}

impl Calendar {
    /// Adds `slot`, due at `at`: it comes out after everything due
    /// earlier, or at `at` and added before it.
    pub fn push(&mut self, at: Instant, slot: usize) {
        self.seq += 1;
        self.place((at, self.seq, slot));
    }

    fn place(&mut self, key: Key) {
        let b = bucket(key.0);
        if b <= self.at {
            self.now.push(Reverse(key));
        } else if b - self.at < BUCKETS as u64 {
            let i = (b % BUCKETS as u64) as usize;
            self.ring[i].push(key);
            self.filled[i / 64] |= 1 << (i % 64);
            self.in_ring += 1;
        } else {
            self.later.push(Reverse(key));
        }
    }

    /// The earliest: its time and slot. Turns the ring to it if the
    /// bucket due now is empty. (Events scheduled afterwards for a time
    /// before that bucket, as the fabric's timers do when they fire
    /// first, go into the small heap beside it: still in order.)
    pub fn peek(&mut self) -> Option<(Instant, usize)> {
        if self.run.is_empty() && self.now.is_empty() {
            self.turn();
        }
        self.peek_now()
    }

    /// The earliest's key if the bucket due now has it, and whether it is
    /// the run's (else the heap's).
    #[inline]
    fn first_now(&self) -> Option<(Key, bool)> {
        match (self.run.last(), self.now.peek()) {
            (Some(r), Some(Reverse(h))) if h < r => Some((*h, false)),
            (Some(r), _) => Some((*r, true)),
            (None, Some(Reverse(h))) => Some((*h, false)),
            (None, None) => None,
        }
    }

    /// The earliest's slot if the bucket due now has it (no turning: a
    /// hint for `&self`).
    pub fn peek_now(&self) -> Option<(Instant, usize)> {
        self.first_now().map(|((t, _, slot), _)| (t, slot))
    }

    /// The slot that comes out after the earliest, if it is in the same
    /// bucket (a hint: `None` says nothing about later buckets).
    pub fn second(&self) -> Option<usize> {
        let (_, from_run) = self.first_now()?;
        // The heap's second is one of the root's two children.
        let heap_second = || self.now.as_slice().get(1..self.now.len().min(3))?.iter().max().map(|r| r.0);
        let (run, heap) = if from_run {
            (self.run.len().checked_sub(2).map(|i| self.run[i]), self.now.peek().map(|r| r.0))
        } else {
            (self.run.last().copied(), heap_second())
        };
        match (run, heap) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
        .map(|(_, _, slot)| slot)
    }

    /// Takes the earliest out: its time and slot.
    pub fn pop(&mut self) -> Option<(Instant, usize)> {
        self.peek()?;
        let ((t, _, slot), from_run) = self.first_now()?;
        if from_run {
            self.run.pop();
        } else {
            self.now.pop();
        }
        Some((t, slot))
    }

    /// Events held (the tests' check of the bookkeeping).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.run.len() + self.now.len() + self.in_ring + self.later.len()
    }

    /// Moves `now` to the next bucket with events (the ring's next filled
    /// one, or the first of `later`), bringing the events of `later` that
    /// the ring now reaches into it.
    fn turn(&mut self) {
        let next = if self.in_ring > 0 {
            self.next_filled()
        } else if let Some(Reverse((t, ..))) = self.later.peek() {
            bucket(*t)
        } else {
            return;
        };
        self.at = next;
        let i = (next % BUCKETS as u64) as usize;
        if self.filled[i / 64] & (1 << (i % 64)) != 0 {
            self.filled[i / 64] &= !(1 << (i % 64));
            // The run is empty: the bucket's Vec becomes the run, and the
            // run's (empty, with its capacity) takes the bucket's place.
            let keys = std::mem::replace(&mut self.ring[i], std::mem::take(&mut self.run));
            self.in_ring -= keys.len();
            self.run = keys;
            self.sort_run();
        }
        while let Some(&Reverse(key)) = self.later.peek() {
            if bucket(key.0) - self.at >= BUCKETS as u64 {
                break;
            }
            self.later.pop();
            self.place(key);
        }
    }

    /// Puts the run latest first. A bucket spans [`WIDTH_NS`] instants,
    /// and a bucket's keys of one instant lie in it in the order scheduled
    /// (those the ring brought in from `later`, which pops them in order,
    /// come before any scheduled into the bucket directly: that is only
    /// possible once the bucket is within the ring's horizon, and the turn
    /// that brought it there moved them). So ordering by the instant
    /// alone, keeping that order among equals, is ordering by (instant,
    /// order scheduled): a counting sort over the bucket's instants, with
    /// no comparisons of keys. At 256 hosts a bucket holds 10-40 events,
    /// and a comparison sort of them was 4-5 % of the run, its branches
    /// mispredicted; a handful is left to insertion.
    fn sort_run(&mut self) {
        const SMALL: usize = 8;
        if self.run.len() <= SMALL {
            // Keys are unique (the order scheduled), so unstable is exact.
            self.run.sort_unstable_by(|a, b| b.cmp(a));
            return;
        }
        let instant = |k: &Key| (k.0.as_nanos() & (WIDTH_NS - 1)) as usize;
        let mut count = [0usize; WIDTH_NS as usize];
        for k in &self.run {
            count[instant(k)] += 1;
        }
        // Latest instant first; within one, latest scheduled first: the
        // keys walked backwards land at rising places.
        let mut place = [0usize; WIDTH_NS as usize];
        let mut at = 0;
        for i in (0..WIDTH_NS as usize).rev() {
            place[i] = at;
            at += count[i];
        }
        self.sorted.clear();
        self.sorted.resize(self.run.len(), (Instant::ZERO, 0, 0));
        for k in self.run.iter().rev() {
            let i = instant(k);
            self.sorted[place[i]] = *k;
            place[i] += 1;
        }
        std::mem::swap(&mut self.run, &mut self.sorted);
        debug_assert!(self.run.windows(2).all(|w| w[0] > w[1]), "a bucket's keys out of schedule order");
    }

    /// The slot `n` places after the earliest in the run of the bucket
    /// due now (a hint for prefetching: events scheduled into the bucket
    /// since it turned are not counted).
    pub fn ahead(&self, n: usize) -> Option<usize> {
        let i = self.run.len().checked_sub(n + 1)?;
        Some(self.run[i].2)
    }

    /// The number of the first filled bucket after `at` (there is one).
    fn next_filled(&self) -> u64 {
        let start = ((self.at + 1) % BUCKETS as u64) as usize;
        // Scan the bitmap from `start`, wrapping once.
        for step in 0..=WORDS {
            let w = (start / 64 + step) % WORDS;
            let mut bits = self.filled[w];
            if step == 0 {
                bits &= !0u64 << (start % 64);
            } else if step == WORDS {
                bits &= !(!0u64 << (start % 64));
            }
            if bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                let ahead = (i + BUCKETS - start) % BUCKETS;
                return self.at + 1 + ahead as u64;
            }
        }
        unreachable!("in_ring > 0 yet no bucket filled")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// Pushes (at the time popped last plus a delay: most near, some past
    /// the horizon), peeks (which turn the ring to the next event, so
    /// that later pushes may fall before the bucket due now, as the
    /// fabric's timers make them) and pops, against a sorted set of
    /// (time, order pushed). Returns how many pushes fell before the
    /// current bucket.
    fn check(ops: &[(u8, u64)]) -> usize {
        let mut cal = Calendar::default();
        let mut model = BTreeSet::new();
        let (mut now, mut before) = (0, 0);
        for (n, &(op, d)) in ops.iter().enumerate() {
            if op == 2 {
                assert_eq!(cal.peek(), model.first().copied());
            } else if op == 1 {
                before += usize::from(bucket(Instant::from_nanos(now + d)) < cal.at);
                let t = Instant::from_nanos(now + d);
                cal.push(t, n);
                model.insert((t, n));
            } else {
                let want = model.pop_first();
                assert_eq!(cal.peek(), want);
                assert_eq!(cal.pop(), want);
                if let Some((t, _)) = want {
                    now = t.as_nanos();
                }
                if let Some(s) = cal.second() {
                    assert_eq!(Some(s), model.iter().nth(1).map(|&(_, s)| s));
                }
            }
            assert_eq!(cal.len(), model.len());
        }
        while let Some(want) = model.pop_first() {
            assert_eq!(cal.pop(), Some(want));
        }
        assert_eq!(cal.pop(), None);
        before
    }

    fn delay() -> impl Strategy<Value = u64> {
        prop_oneof![
            6 => 0u64..64,
            3 => 0u64..4000,
            1 => 0u64..200_000,
        ]
    }

    proptest! {
        #[test]
        fn pops_in_time_then_push_order(ops in proptest::collection::vec((0u8..3, delay()), 0..600)) {
            check(&ops);
        }
    }

    /// Crowded buckets (most pushes a few ns ahead, more pushes than
    /// pops), so that turns sort runs of more than a handful: the
    /// counting sort's path.
    fn crowded() -> impl Strategy<Value = (u8, u64)> {
        let op = prop_oneof![7 => Just(1u8), 2 => Just(0u8), 1 => Just(2u8)];
        let d = prop_oneof![8 => 0u64..40, 1 => 0u64..8000];
        (op, d)
    }

    proptest! {
        #[test]
        fn crowded_buckets_pop_in_time_then_push_order(ops in proptest::collection::vec(crowded(), 0..800)) {
            check(&ops);
        }
    }

    /// A bucket of 24 keys over its 8 instants, a third of them brought
    /// in from beyond the horizon (in time order, not push order) before
    /// the rest were pushed into it directly.
    #[test]
    fn a_full_bucket_comes_out_in_time_then_push_order() {
        let mut cal = Calendar::default();
        let base = WIDTH_NS * BUCKETS as u64 * 2;
        let mut model = BTreeSet::new();
        let mut slot = 0;
        for i in (0..8u64).rev() {
            cal.push(Instant::from_nanos(base + i), slot);
            model.insert((Instant::from_nanos(base + i), slot));
            slot += 1;
        }
        // Turn the ring near the bucket (a key just before it), so the
        // first eight move into it.
        cal.push(Instant::from_nanos(base - 1), slot);
        assert_eq!(cal.pop(), Some((Instant::from_nanos(base - 1), slot)));
        slot += 1;
        for i in 0..16u64 {
            let t = Instant::from_nanos(base + (i * 5) % 8);
            cal.push(t, slot);
            model.insert((t, slot));
            slot += 1;
        }
        let popped: Vec<_> = std::iter::from_fn(|| cal.pop()).collect();
        assert_eq!(popped, model.into_iter().collect::<Vec<_>>());
    }

    /// The path the fabric takes when timers fire before the next event:
    /// pushes for a time before the bucket a peek turned to.
    #[test]
    fn pushes_before_the_current_bucket_come_out_first() {
        // Push at 100, pop it; push at 5,000; peek (turns to 5,000);
        // then push at 100 + 10 and 100 + 20.
        let ops = [(1, 100), (0, 0), (1, 4_900), (2, 0), (1, 10), (1, 20), (0, 0), (0, 0), (0, 0)];
        assert_eq!(check(&ops), 2, "both fell before the current bucket");
    }

    #[test]
    fn crosses_the_horizon_and_wraps_the_ring() {
        let mut cal = Calendar::default();
        let horizon = WIDTH_NS * BUCKETS as u64;
        for (slot, t) in [5 * horizon + 3, 7, horizon - 1, horizon, 2 * horizon + 9, 7].into_iter().enumerate() {
            cal.push(Instant::from_nanos(t), slot);
        }
        let order: Vec<_> = std::iter::from_fn(|| cal.pop()).map(|(t, s)| (t.as_nanos(), s)).collect();
        assert_eq!(order, [(7, 1), (7, 5), (horizon - 1, 2), (horizon, 3), (2 * horizon + 9, 4), (5 * horizon + 3, 0)]);
    }
}
