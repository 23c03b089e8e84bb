//! Which QPs the endpoint has to look at again, so that a poll costs what
//! changed rather than a walk over every QP (a device with thousands of
//! QPs, as a host of a large simulated all-to-all has, would otherwise pay
//! for all of them on every packet).
//!
//! Two sets, both fed by the entry points that change a QP:
//! - **stale**: QPs whose next deadline must be computed again before
//!   [`Agenda::earliest`] or [`Agenda::due`] answer; the answers come from
//!   an index of every QP's deadline ordered by time ([`Deadlines`]: each
//!   QP keeps its slot there, so a refresh that finds the deadline
//!   unchanged costs one comparison);
//! - **ready**: QPs that may have a packet to send. A QP leaves it when it
//!   has nothing; it comes back when something happens to it or when its
//!   deadline passes (the only ways a QP with nothing to send gets
//!   something: the same rule the endpoint's idle test always relied on).
//!
//! The ready set is bits over the span of the device's QPNs
//! ([`QpnBits`]): its QPs sit close together, so a host of hundreds of QPs
//! keeps them in a cache line or two where a B-tree walked cold nodes.
//!
//! An entry point that cannot say which QPs it changed marks them all, as
//! do QP creation and destruction (so the index never holds a QP that is
//! gone).
//!
//! Only a device with more than [`WALK_MAX_QPS`] QPs keeps it up: with
//! fewer, the endpoint walks every QP as it always did, which costs less
//! than the bookkeeping (the single-QP path stays as fast as before).

use super::deadlines::Deadlines;
use super::qp_table::QpTable;
use super::qpn_bits::QpnBits;
use crate::time::Instant;

/// A device with at most this many QPs keeps no agenda: it walks every
/// QP, as the engine did before the agenda (`Endpoint::agenda_on`).
/// With few QPs the walk is the cheaper: the agenda's sets and index cost
/// a one-QP device about 390 instructions a packet (+6 % on an 8-byte
/// SEND, `scripts/callgrind.sh`), and in `examples/engine_packets` with
/// up to 64 busy QPs the walk stays cheaper still (posting in windows, a
/// round finds a QP with a packet at once). Where a device sends a packet
/// a poll and most of its QPs wait for ACKs (the fabric's all-to-all)
/// every poll that finds nothing walks them all: there the agenda saves
/// 1 % of all instructions at 6 QPs a host, 11 % at 14 and 34 % at 30,
/// and loses nothing at 2 (docs/performance.md). 8 sits between.
/// Crossing it either way is safe: QP creation and destruction mark
/// every QP, so the agenda starts over whenever it comes into use. Either
/// way the same QPs send in the same order (`Endpoint::set_agenda_threshold`
/// lets tests check it); only the cost differs.
pub(super) const WALK_MAX_QPS: usize = 8;

/// Stale QPs listed one by one up to this many; past it, all are (a
/// driver that never asks for its deadline must not grow the list).
const STALE_LIST: usize = 64;

#[derive(Debug, Default)]
pub(super) struct Agenda {
    /// Every QP's deadline, by time then QPN.
    deadlines: Deadlines,
    /// QPs to refresh (may repeat).
    stale: Vec<u32>,
    all_stale: bool,
    /// QPs that may have a packet to send, in QPN order.
    ready: QpnBits,
    all_ready: bool,
}

impl Agenda {
    /// Something happened to QP `qpn`: its deadline and what it may send changed.
    pub fn mark(&mut self, qpn: u32) {
        self.mark_stale(qpn);
        self.ready.insert(qpn);
    }

    /// QP `qpn`'s deadline may have changed (it was asked for a packet).
    pub fn mark_stale(&mut self, qpn: u32) {
        if self.all_stale || self.stale.last() == Some(&qpn) {
            return;
        }
        if self.stale.len() >= STALE_LIST {
            self.all_stale = true;
            self.stale.clear();
        } else {
            self.stale.push(qpn);
        }
    }

    /// Anything may have changed on any QP.
    pub fn mark_all(&mut self) {
        (self.all_stale, self.all_ready) = (true, true);
        self.stale.clear();
    }

    /// Computes the deadlines of the stale QPs again (of every QP after
    /// [`Agenda::mark_all`]).
    pub fn refresh(&mut self, qps: &QpTable) {
        if std::mem::take(&mut self.all_stale) {
            self.rebuild(qps);
            return;
        }
        for i in 0..self.stale.len() {
            let qpn = self.stale[i];
            // A QPN nobody has (a post to a wrong QPN) was never indexed.
            let Some(qp) = qps.get(qpn) else { continue };
            let slot = qp.agenda_slot.get();
            if !self.deadlines.holds(slot, qpn) {
                // Not indexed since the last rebuild (the agenda was off
                // while QPs came and went): index every QP afresh.
                self.rebuild(qps);
                return;
            }
            self.deadlines.set(slot, qp.next_deadline());
        }
        self.stale.clear();
    }

    fn rebuild(&mut self, qps: &QpTable) {
        self.stale.clear();
        self.deadlines.clear();
        for (qpn, qp) in qps.iter() {
            qp.agenda_slot.set(self.deadlines.add(qpn, qp.next_deadline()));
        }
    }

    /// The earliest deadline of any QP (as of the last refresh).
    pub fn earliest(&mut self) -> Option<Instant> {
        self.deadlines.earliest()
    }

    /// The QP whose deadline is likely the earliest (the index's top, which
    /// may be stale): a hint for a prefetch.
    pub fn earliest_hint(&self) -> Option<u32> {
        self.deadlines.first_hint()
    }

    /// The QPs whose deadline is at or before `now`, in QPN order (as of
    /// the last refresh).
    pub fn due(&self, now: Instant) -> Vec<u32> {
        let mut due = Vec::new();
        self.deadlines.for_each_due(now, |qpn| due.push(qpn));
        due.sort_unstable();
        due.dedup();
        due
    }

    /// Makes every QP whose deadline has passed ready (after a refresh).
    pub fn wake_due(&mut self, now: Instant) {
        let ready = &mut self.ready;
        self.deadlines.for_each_due(now, |qpn| ready.insert(qpn));
    }

    /// The first ready QP at or after `from` in QPN order, wrapping round.
    pub fn next_ready(&mut self, from: u32, qps: &QpTable) -> Option<u32> {
        if std::mem::take(&mut self.all_ready) {
            self.ready.clear();
            qps.keys().for_each(|qpn| self.ready.insert(qpn));
        }
        // A destroyed QP may still be listed: it is skipped and forgotten.
        while let Some(qpn) = self.peek_ready(from) {
            if qps.contains_key(qpn) {
                return Some(qpn);
            }
            self.ready.remove(qpn);
        }
        None
    }

    /// The QP [`Self::next_ready`] would give from `from`, without its
    /// bookkeeping (a hint for a prefetch: a destroyed QP may be listed).
    pub fn peek_ready(&self, from: u32) -> Option<u32> {
        self.ready.next_from(from).or_else(|| self.ready.first())
    }

    /// The ready QP after `qpn` in QPN order (wrapping), if another is ready.
    pub fn ready_after(&self, qpn: u32) -> Option<u32> {
        self.peek_ready(qpn.wrapping_add(1)).filter(|&n| n != qpn)
    }

    /// QP `qpn` sent a packet in a round that asked every QP: it may have more.
    pub fn sent(&mut self, qpn: u32) {
        self.ready.insert(qpn);
    }

    /// QP `qpn` had nothing to send.
    pub fn idle(&mut self, qpn: u32) {
        self.ready.remove(qpn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Pd;
    use crate::qp::{CqId, QpInitAttr, QpType};
    use crate::timers::Timer;

    fn qps(nums: &[u32]) -> QpTable {
        let mut t = QpTable::default();
        for &n in nums {
            t.insert(n, Box::new(crate::qp::Qp::new(n, QpInitAttr::new(QpType::Rc, Pd(1), CqId(0)))));
        }
        t
    }

    #[test]
    fn the_ready_qp_after_another_wraps_and_is_never_itself() {
        let map = qps(&[10, 20, 30]);
        let mut a = Agenda::default();
        a.mark_all();
        assert_eq!(a.next_ready(0, &map), Some(10));
        assert_eq!(a.ready_after(10), Some(20));
        assert_eq!(a.ready_after(25), Some(30));
        assert_eq!(a.ready_after(30), Some(10));
        a.idle(20);
        a.idle(30);
        assert_eq!(a.ready_after(10), None);
        assert_eq!(a.ready_after(u32::MAX), Some(10));
    }

    #[test]
    fn ready_qps_come_in_qpn_order_from_the_cursor_and_wrap() {
        let map = qps(&[10, 20, 30, 40]);
        let mut a = Agenda::default();
        a.mark_all();
        assert_eq!(a.next_ready(25, &map), Some(30), "every QP is ready after mark_all");
        a.idle(30);
        a.idle(40);
        a.idle(10);
        assert_eq!(a.next_ready(25, &map), Some(20), "wraps round to the one left");
        a.idle(20);
        assert_eq!(a.next_ready(0, &map), None);
        a.mark(40);
        assert_eq!(a.next_ready(0, &map), Some(40));
        let fewer = qps(&[10, 20, 30]);
        assert_eq!(a.next_ready(0, &fewer), None, "a destroyed QP is forgotten");
    }

    #[test]
    fn deadlines_are_recomputed_only_for_stale_qps() {
        let at = Instant::from_nanos;
        let mut map = qps(&[10, 20, 30]);
        map.get_mut(20).unwrap().timers.set(Timer::Retransmit, at(500));
        map.get_mut(30).unwrap().timers.set(Timer::RnrWait, at(100));
        let mut a = Agenda::default();
        a.mark_all();
        a.refresh(&map);
        assert_eq!(a.earliest(), Some(at(100)));
        assert_eq!(a.due(at(500)), vec![20, 30], "QPN order, not deadline order");
        // A change nobody reported is not seen; a reported one is.
        map.get_mut(10).unwrap().timers.set(Timer::Retransmit, at(50));
        a.refresh(&map);
        assert_eq!(a.earliest(), Some(at(100)));
        a.mark_stale(10);
        a.refresh(&map);
        assert_eq!(a.earliest(), Some(at(50)));
        map.get_mut(30).unwrap().timers.stop(Timer::RnrWait);
        a.mark_stale(30);
        a.refresh(&map);
        assert_eq!(a.due(at(1_000)), vec![10, 20]);
        map.remove(10);
        a.mark_all(); // as destroy_qp does
        a.refresh(&map);
        assert_eq!((a.earliest(), a.due(at(1_000))), (Some(at(500)), vec![20]));
        while let Some(q) = a.next_ready(0, &map) {
            a.idle(q);
        }
        a.wake_due(at(499));
        assert_eq!(a.next_ready(0, &map), None, "nothing due before 500");
        a.wake_due(at(500));
        assert_eq!(a.next_ready(0, &map), Some(20));
    }

    /// What a lossy run of `pairs` RC QP pairs did (DCQCN off): every
    /// completion in the order polled with its time, the link's counters
    /// and both endpoints' counters. `walk_max`: the threshold in force.
    fn lossy_run(walk_max: usize, pairs: usize, seed: u64) -> impl PartialEq + std::fmt::Debug {
        type Done = Vec<(Instant, u32, u64, crate::wr::WcStatus)>;
        use crate::sim::{bring_up, connect, LinkConfig, PairConfig, Sim};
        use crate::wr::{RecvWr, SendOp, SendWr, Sge};
        let link = LinkConfig { loss: 0.02, reorder: 0.02, duplicate: 0.01, ..LinkConfig::default() };
        let cfg = PairConfig {
            cap: crate::qp::QpCap { max_send_wr: 64, max_recv_wr: 64, ..Default::default() },
            ..PairConfig::default()
        };
        let mut sim = Sim::new(seed, link);
        let (a, b) = connect(&mut sim, cfg);
        sim.ep(a.ep).set_agenda_threshold(walk_max);
        sim.ep(b.ep).set_agenda_threshold(walk_max);
        let mut qps = vec![(a.qpn, b.qpn)];
        for _ in 1..pairs {
            let mut make = |s: &crate::sim::Side| {
                let init =
                    QpInitAttr { recv_cq: s.recv_cq, cap: cfg.cap, ..QpInitAttr::new(QpType::Rc, s.pd, s.send_cq) };
                sim.ep(s.ep).create_qp(init).unwrap()
            };
            let (qa, qb) = (make(&a), make(&b));
            bring_up(sim.ep(a.ep), qa, [127, 0, 0, 2].into(), qb, cfg.b_psn, cfg.a_psn, &cfg);
            bring_up(sim.ep(b.ep), qb, [127, 0, 0, 1].into(), qa, cfg.a_psn, cfg.b_psn, &cfg);
            qps.push((qa, qb));
        }
        // Uneven work: pair i gets 4 + 3i messages, SENDs and WRITEs of
        // up to three 1 KiB packets, so QPs fall idle at different times.
        for (i, &(qa, qb)) in qps.iter().enumerate() {
            for m in 0..(4 + 3 * i as u64) {
                let len = 100 + (m as u32 * 997) % 3000;
                let local = vec![Sge { addr: a.va + m * 4096, length: len, lkey: a.lkey }];
                let op = if m % 2 == 0 {
                    let sg = vec![Sge { addr: b.va + m * 4096, length: 4096, lkey: b.lkey }];
                    sim.ep(b.ep).post_recv(qb, RecvWr { wr_id: m, sg_list: sg }).unwrap();
                    SendOp::Send
                } else {
                    SendOp::RdmaWrite { remote_addr: b.va + m * 4096, rkey: b.rkey }
                };
                sim.ep(a.ep).post_send(qa, SendWr::new(m, op, local)).unwrap();
            }
        }
        let mut done = Vec::new();
        for _ in 0..200_000 {
            if !sim.step() {
                break;
            }
            for w in sim.ep(a.ep).poll_cq(a.send_cq, 64) {
                done.push((sim.now, w.qp_num, w.wr_id, w.status));
            }
        }
        let messages: u64 = (0..pairs as u64).map(|i| 4 + 3 * i).sum();
        assert_eq!(done.len() as u64, messages, "every request completes");
        assert!(done.iter().all(|d| d.3 == crate::wr::WcStatus::Success), "{done:?}");
        assert!(sim.stats.lost > 0 && sim.stats.reordered > 0, "a lossy run: {:?}", sim.stats);
        let stats = (sim.ep(a.ep).stats(), sim.ep(b.ep).stats());
        let done: Done = done;
        (done, sim.stats, stats)
    }

    #[test]
    fn the_agenda_sends_what_the_walk_sends() {
        // The same QPs asked in the same turns, so the same packets: with
        // the agenda always in use and never, a lossy run is the same run.
        for seed in 1..=3 {
            let (walk, agenda) = (lossy_run(usize::MAX, 12, seed), lossy_run(0, 12, seed));
            assert!(walk == agenda, "seed {seed}: the walk {walk:?}\nthe agenda {agenda:?}");
        }
        // And a run of one QP to nine crosses the threshold as it grows.
        assert!(lossy_run(WALK_MAX_QPS, 9, 4) == lossy_run(usize::MAX, 9, 4));
    }
}
