//! The agenda's index of every QP's deadline, ordered by time: a 4-ary
//! min-heap over one contiguous array, with lazy removal.
//!
//! Each QP gets a slot when the index is built (the agenda rebuilds it
//! whenever a QP is made or destroyed, so the slots of a device's QPs are
//! `0..n` whatever their QPNs). The slot table holds each QP's current
//! deadline; moving a deadline rewrites its slot and pushes a new heap
//! entry, leaving the old one behind. An entry counts only while its slot
//! still holds its QPN and time, so checking one reads the dense slot
//! table, never the QP (cold in a device of hundreds of QPs); stale
//! entries are dropped as they reach the top, and the heap is rebuilt from
//! the slots when they outnumber the live ones, which bounds its size by
//! the QPs the device has.
//!
//! A `BTreeSet` of (time, QPN) did a removal and an insert per moved
//! deadline, walking nodes spread over the heap of the process; a host of a
//! 256-host all-to-all moves one or two deadlines per packet.

use crate::time::Instant;

/// One QP's place in the index.
#[derive(Debug, Clone, Copy)]
struct Slot {
    qpn: u32,
    deadline: Option<Instant>,
}

/// A heap entry: QP `qpn` (slot `slot`) is due at `at`, if still current.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    at: Instant,
    qpn: u32,
    slot: u32,
}

/// Children per heap node: four 16-byte entries share a cache line.
const ARITY: usize = 4;

#[derive(Debug, Default)]
pub(super) struct Deadlines {
    slots: Vec<Slot>,
    /// Min-heap by (time, QPN); may hold stale entries.
    heap: Vec<Entry>,
    /// Slots with a deadline (what a rebuilt heap holds).
    live: usize,
}

impl Deadlines {
    /// Forgets every QP.
    pub fn clear(&mut self) {
        self.slots.clear();
        self.heap.clear();
        self.live = 0;
    }

    /// Indexes QP `qpn` with `deadline`; returns its slot.
    pub fn add(&mut self, qpn: u32, deadline: Option<Instant>) -> u32 {
        let slot = self.slots.len() as u32;
        self.slots.push(Slot { qpn, deadline });
        if let Some(at) = deadline {
            self.live += 1;
            self.push(Entry { at, qpn, slot });
        }
        slot
    }

    /// Whether slot `slot` is QP `qpn`'s.
    pub fn holds(&self, slot: u32, qpn: u32) -> bool {
        self.slots.get(slot as usize).is_some_and(|s| s.qpn == qpn)
    }

    /// The deadline slot `slot` is indexed under.
    #[cfg(test)]
    pub fn get(&self, slot: u32) -> Option<Instant> {
        self.slots[slot as usize].deadline
    }

    /// Moves slot `slot`'s deadline to `deadline`.
    pub fn set(&mut self, slot: u32, deadline: Option<Instant>) {
        let s = &mut self.slots[slot as usize];
        if s.deadline == deadline {
            return;
        }
        match (s.deadline.is_some(), deadline.is_some()) {
            (false, true) => self.live += 1,
            (true, false) => self.live -= 1,
            _ => {}
        }
        s.deadline = deadline;
        let qpn = s.qpn;
        if let Some(at) = deadline {
            self.push(Entry { at, qpn, slot });
        }
        // Stale entries beyond the live ones: start again from the slots.
        if self.heap.len() > 2 * self.live + 64 {
            self.rebuild();
        }
    }

    /// The earliest deadline of any QP.
    pub fn earliest(&mut self) -> Option<Instant> {
        while let Some(&top) = self.heap.first() {
            if self.current(top) {
                return Some(top.at);
            }
            self.pop();
        }
        None
    }

    /// The QPN at the top of the heap, current or not: a hint of the QP
    /// whose timer comes next, for a prefetch.
    pub fn first_hint(&self) -> Option<u32> {
        self.heap.first().map(|e| e.qpn)
    }

    /// Calls `f` with the QPN of every QP due at or before `now`, in no
    /// particular order (a QPN may come twice).
    pub fn for_each_due(&self, now: Instant, mut f: impl FnMut(u32)) {
        // Only the subtrees under entries at or before `now` can hold more.
        let mut stack: Vec<usize> = Vec::new();
        if self.heap.first().is_some_and(|e| e.at <= now) {
            stack.push(0);
        }
        while let Some(i) = stack.pop() {
            let e = self.heap[i];
            if self.current(e) {
                f(e.qpn);
            }
            let first = ARITY * i + 1;
            for c in first..(first + ARITY).min(self.heap.len()) {
                if self.heap[c].at <= now {
                    stack.push(c);
                }
            }
        }
    }

    fn current(&self, e: Entry) -> bool {
        let s = self.slots[e.slot as usize];
        s.qpn == e.qpn && s.deadline == Some(e.at)
    }

    fn push(&mut self, e: Entry) {
        let mut i = self.heap.len();
        self.heap.push(e);
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if self.heap[parent] <= e {
                break;
            }
            self.heap[i] = self.heap[parent];
            i = parent;
        }
        self.heap[i] = e;
    }

    fn pop(&mut self) {
        let Some(last) = self.heap.pop() else { return };
        if !self.heap.is_empty() {
            self.sift_down(0, last);
        }
    }

    /// Puts `e` at `i` or below, restoring the heap order under `i`.
    fn sift_down(&mut self, mut i: usize, e: Entry) {
        let n = self.heap.len();
        loop {
            let first = ARITY * i + 1;
            if first >= n {
                break;
            }
            let last = (first + ARITY).min(n);
            let mut min = first;
            for c in first + 1..last {
                if self.heap[c] < self.heap[min] {
                    min = c;
                }
            }
            if self.heap[min] >= e {
                break;
            }
            self.heap[i] = self.heap[min];
            i = min;
        }
        self.heap[i] = e;
    }

    fn rebuild(&mut self) {
        self.heap.clear();
        for (slot, s) in self.slots.iter().enumerate() {
            if let Some(at) = s.deadline {
                self.heap.push(Entry { at, qpn: s.qpn, slot: slot as u32 });
            }
        }
        for i in (0..self.heap.len() / ARITY + 1).rev() {
            if i < self.heap.len() {
                self.sift_down(i, self.heap[i]);
            }
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
        /// Rebuild with this many QPs, each given a deadline from the list.
        Build(Vec<Option<u16>>),
        /// Moves the deadline of QP (index mod count).
        Set(usize, Option<u16>),
        /// Asks who is due at this time.
        Due(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        let t = proptest::option::weighted(0.8, 0u16..200);
        prop_oneof![
            1 => proptest::collection::vec(t.clone(), 0..40).prop_map(Op::Build),
            12 => (any::<usize>(), t).prop_map(|(i, t)| Op::Set(i, t)),
            3 => (0u16..220).prop_map(Op::Due),
        ]
    }

    proptest! {
        /// Against an ordered set of (time, QPN), the structure it replaced.
        #[test]
        fn answers_as_an_ordered_set_does(ops in proptest::collection::vec(op(), 1..300), base in 0u32..1 << 24) {
            let mut d = Deadlines::default();
            let mut model: BTreeSet<(Instant, u32)> = BTreeSet::new();
            let mut qps: Vec<(u32, u32, Option<Instant>)> = Vec::new(); // (qpn, slot, deadline)
            let at = |t: Option<u16>| t.map(|t| Instant::from_nanos(u64::from(t)));
            for op in ops {
                match op {
                    Op::Build(ts) => {
                        d.clear();
                        model.clear();
                        qps.clear();
                        for (i, t) in ts.into_iter().enumerate() {
                            // QPNs far apart and out of order, as a long-lived device has.
                            let qpn = base.wrapping_add((i as u32).wrapping_mul(40_503)) & 0xff_ffff;
                            let slot = d.add(qpn, at(t));
                            qps.push((qpn, slot, at(t)));
                            if let Some(t) = at(t) {
                                model.insert((t, qpn));
                            }
                        }
                    }
                    Op::Set(i, t) if !qps.is_empty() => {
                        let n = qps.len();
                        let q = &mut qps[i % n];
                        if let Some(old) = q.2 {
                            model.remove(&(old, q.0));
                        }
                        q.2 = at(t);
                        if let Some(new) = q.2 {
                            model.insert((new, q.0));
                        }
                        d.set(q.1, q.2);
                        prop_assert_eq!(d.get(q.1), q.2);
                    }
                    Op::Set(..) => {}
                    Op::Due(now) => {
                        let now = Instant::from_nanos(u64::from(now));
                        let mut got = Vec::new();
                        d.for_each_due(now, |q| got.push(q));
                        got.sort_unstable();
                        got.dedup();
                        let mut want: Vec<u32> = model.range(..=(now, u32::MAX)).map(|&(_, q)| q).collect();
                        want.sort_unstable();
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(d.earliest(), model.first().map(|&(t, _)| t));
                prop_assert!(d.heap.len() <= 2 * d.live + 65, "heap {} live {}", d.heap.len(), d.live);
            }
        }
    }

    #[test]
    fn a_rebuilt_heap_orders_every_node_the_root_included() {
        // Slot 0 holds the latest deadline: a rebuild that left the root
        // unsifted would answer it first.
        let mut d = Deadlines::default();
        let at = |t: u64| Some(Instant::from_nanos(t));
        let slots: Vec<u32> = (0..20u32).map(|q| d.add(q, at(10_000 - u64::from(q)))).collect();
        // Moving one deadline back and forth leaves stale entries until a rebuild.
        for round in 0..200u64 {
            d.set(slots[19], at(20_000 + round % 2));
        }
        assert!(d.heap.len() < 200, "rebuilt: {}", d.heap.len());
        assert_eq!(d.earliest(), at(10_000 - 18));
        let mut due = Vec::new();
        d.for_each_due(Instant::from_nanos(9_990), |q| due.push(q));
        due.sort_unstable();
        assert_eq!(due, (10..19).collect::<Vec<u32>>());
    }

    #[test]
    fn a_deadline_moved_back_and_forth_leaves_a_bounded_heap() {
        let mut d = Deadlines::default();
        let slots: Vec<u32> = (0..10).map(|q| d.add(q, Some(Instant::from_nanos(1000)))).collect();
        for round in 0..10_000u64 {
            d.set(slots[(round % 10) as usize], Some(Instant::from_nanos(1000 + round)));
        }
        assert!(d.heap.len() <= 2 * 10 + 64, "{}", d.heap.len());
        assert_eq!(d.earliest(), Some(Instant::from_nanos(1000 + 9_990)));
    }
}
