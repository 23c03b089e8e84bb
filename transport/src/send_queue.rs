//! A QP's send queue: its work requests in order, the requester's cursor
//! (the next packet to put on the wire) and the PSN window (the oldest
//! unacknowledged PSN and the next new one).
//!
//! The requester starts WQEs and moves the cursor forward; the completer
//! retires WQEs from the front, moves the window and sends the cursor back
//! (go-back-N). Both go through these methods, which keep the invariants
//! in one place: a started WQE owns the PSNs `first_psn .. first_psn +
//! npkts`; WQEs start in order; the cursor never points into a retired
//! WQE nor before the window.

use crate::wr::SendWr;
use rdma_wire::Psn;
use std::collections::VecDeque;

/// A send work request on its way.
#[derive(Debug, Clone)]
pub struct SendWqe {
    pub wr: SendWr,
    /// The first PSN, once the WQE has started.
    pub first_psn: Psn,
    /// How many PSNs it takes (packets, or READ response packets).
    pub npkts: u32,
    pub started: bool,
    /// For UC and UD: every packet has been sent, so it can complete; for
    /// a local operation (any QP type): it was executed.
    pub sent: bool,
    /// A local operation that failed while requests before it were still
    /// outstanding: it fails with this status once they have completed.
    pub local_error: Option<crate::wr::WcStatus>,
}

impl SendWqe {
    fn new(wr: SendWr) -> SendWqe {
        SendWqe { wr, first_psn: Psn::new(0), npkts: 0, started: false, sent: false, local_error: None }
    }

    pub fn contains(&self, psn: Psn) -> bool {
        self.started && psn.in_window(self.first_psn, self.npkts)
    }

    pub fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts - 1)
    }
}

/// The WQEs, the cursor and the PSN window of one QP.
#[derive(Debug)]
pub(crate) struct SendQueue {
    wqes: VecDeque<SendWqe>,
    /// Next WQE (index into `wqes`) and packet within it to transmit.
    cursor_wqe: usize,
    cursor_pkt: u32,
    /// The PSN the next new WQE starts at.
    next_psn: Psn,
    /// The oldest PSN not yet acknowledged.
    comp_psn: Psn,
}

impl SendQueue {
    /// An empty queue whose first WQE starts at `sq_psn`.
    pub(crate) fn new(sq_psn: Psn) -> SendQueue {
        SendQueue { wqes: VecDeque::new(), cursor_wqe: 0, cursor_pkt: 0, next_psn: sq_psn, comp_psn: sq_psn }
    }

    pub(crate) fn len(&self) -> usize {
        self.wqes.len()
    }

    /// Asks the cache for the WQEs an ACK or the next packet reads: the
    /// oldest and the one at the cursor (not their SGE lists, which are
    /// behind a pointer in the WQE: reading it now would wait for the
    /// line this asks for).
    pub(crate) fn prefetch(&self) {
        for w in [self.wqes.front(), self.wqes.get(self.cursor_wqe)].into_iter().flatten() {
            crate::prefetch::lines_of(w);
        }
    }

    /// Queues a posted request (not started: it takes its PSNs when the
    /// requester reaches it).
    pub(crate) fn push(&mut self, wr: SendWr) {
        self.wqes.push_back(SendWqe::new(wr));
    }

    pub(crate) fn front(&self) -> Option<&SendWqe> {
        self.wqes.front()
    }

    pub(crate) fn get(&self, i: usize) -> Option<&SendWqe> {
        self.wqes.get(i)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &SendWqe> {
        self.wqes.iter()
    }

    /// The oldest PSN not yet acknowledged.
    pub(crate) fn comp_psn(&self) -> Psn {
        self.comp_psn
    }

    /// The PSN the next new WQE starts at.
    pub(crate) fn next_psn(&self) -> Psn {
        self.next_psn
    }

    /// Whether any transmitted packet awaits an acknowledgement.
    pub(crate) fn outstanding(&self) -> bool {
        self.comp_psn != self.next_psn
    }

    /// Whether `psn` has been sent and is not yet acknowledged.
    pub(crate) fn is_outstanding(&self, psn: Psn) -> bool {
        psn.distance_from(self.comp_psn) < self.next_psn.distance_from(self.comp_psn)
    }

    /// How many WQEs lie before the cursor (sent, or in a READ's case
    /// requested, in full).
    pub(crate) fn before_cursor(&self) -> usize {
        self.cursor_wqe
    }

    /// The WQE at the cursor, its index, the packet within it and the PSN
    /// that packet takes (the next new PSN for a WQE not started).
    pub(crate) fn at_cursor(&self) -> Option<(usize, &SendWqe, u32, Psn)> {
        let w = self.wqes.get(self.cursor_wqe)?;
        let psn = if w.started { w.first_psn.add(self.cursor_pkt) } else { self.next_psn };
        Some((self.cursor_wqe, w, self.cursor_pkt, psn))
    }

    /// Starts the WQE at the cursor: it takes the next `npkts` PSNs.
    pub(crate) fn start_at_cursor(&mut self, npkts: u32) {
        let first = self.next_psn;
        let Some(w) = self.wqes.get_mut(self.cursor_wqe) else { return };
        debug_assert!(!w.started, "a WQE starts once");
        w.first_psn = first;
        w.npkts = npkts;
        w.started = true;
        self.next_psn = first.add(npkts);
    }

    /// A packet of the WQE at the cursor left. When it was the WQE's last
    /// (or a READ request, which asks for all its PSNs at once) the cursor
    /// moves to the next WQE, and a WQE that completes once sent (UC, UD:
    /// `done_when_sent`) is marked so.
    pub(crate) fn advance_cursor(&mut self, whole: bool, done_when_sent: bool) {
        if whole {
            if done_when_sent {
                if let Some(w) = self.wqes.get_mut(self.cursor_wqe) {
                    w.sent = true;
                }
            }
            self.cursor_wqe += 1;
            self.cursor_pkt = 0;
        } else {
            self.cursor_pkt += 1;
        }
    }

    /// The local operation at the cursor (BIND_MW, LOCAL_INV: no PSNs)
    /// was executed: it is marked sent (it completes once at the front)
    /// and the cursor moves to the next WQE.
    pub(crate) fn finish_local_at_cursor(&mut self) {
        if let Some(w) = self.wqes.get_mut(self.cursor_wqe) {
            debug_assert!(w.wr.op.is_local());
            w.sent = true;
            self.cursor_wqe += 1;
            self.cursor_pkt = 0;
        }
    }

    /// The local operation at the cursor failed with `status` while
    /// requests before it are outstanding: it fails once they complete.
    pub(crate) fn fail_local_at_cursor_later(&mut self, status: crate::wr::WcStatus) {
        if let Some(w) = self.wqes.get_mut(self.cursor_wqe) {
            w.local_error = Some(status);
        }
    }

    /// READ and atomic WQEs started and not yet completed, before the cursor.
    pub(crate) fn rd_atomic_in_flight(&self) -> usize {
        self.wqes.iter().take(self.cursor_wqe).filter(|w| w.started && w.wr.op.uses_rd_atomic()).count()
    }

    /// The index of the started WQE that holds `psn`.
    pub(crate) fn position_of(&self, psn: Psn) -> Option<usize> {
        self.wqes.iter().position(|w| w.contains(psn))
    }

    /// Moves the cursor back to `psn` (go-back-N). Returns false if no
    /// started WQE holds that PSN.
    pub(crate) fn rewind_to(&mut self, psn: Psn) -> bool {
        match self.position_of(psn) {
            Some(i) => {
                self.cursor_wqe = i;
                self.cursor_pkt = psn.distance_from(self.wqes[i].first_psn);
                true
            }
            None => false,
        }
    }

    /// Everything before `psn` is acknowledged: the window starts there.
    pub(crate) fn acknowledge_before(&mut self, psn: Psn) {
        self.comp_psn = psn;
    }

    /// Moves a cursor that points before `psn` (acknowledged: after a
    /// go-back-N, the ACKs of the first copies came) up to it, so that
    /// nothing acknowledged is sent again: to `psn` inside its WQE, or to
    /// the first WQE not started when every sent PSN is acknowledged.
    pub(crate) fn cursor_not_before(&mut self, psn: Psn) {
        let Some((.., cursor)) = self.at_cursor() else { return };
        let behind = psn.distance_from(cursor);
        if behind != 0 && behind < Psn::HALF && !self.rewind_to(psn) {
            // The first WQE not started, past executed local operations
            // (which take no PSNs and never start).
            self.cursor_wqe =
                self.wqes.iter().position(|w| !(w.started || w.wr.op.is_local() && w.sent)).unwrap_or(self.wqes.len());
            self.cursor_pkt = 0;
        }
    }

    /// Takes the front WQE out (it completed, or failed). A cursor inside
    /// it continues at the start of the next one.
    pub(crate) fn retire_front(&mut self) -> Option<SendWqe> {
        let w = self.wqes.pop_front()?;
        if self.cursor_wqe == 0 {
            self.cursor_pkt = 0;
        } else {
            self.cursor_wqe -= 1;
        }
        Some(w)
    }

    /// Takes every WQE out (to flush them), the cursor back at the start.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = SendWqe> + '_ {
        self.cursor_wqe = 0;
        self.cursor_pkt = 0;
        self.wqes.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wr::SendOp;

    fn wr(id: u64) -> SendWr {
        SendWr {
            wr_id: id,
            op: SendOp::Send,
            sg_list: Vec::new(),
            signaled: true,
            solicited: false,
            inline_data: None,
            ud: None,
            xrc_srqn: 0,
        }
    }

    /// Starts and sends WQEs of 3, 1 and 2 packets from PSN 10.
    fn three_sent() -> SendQueue {
        let mut q = SendQueue::new(Psn::new(10));
        for (i, n) in [3, 1, 2].into_iter().enumerate() {
            q.push(wr(i as u64));
            q.start_at_cursor(n);
            for k in 0..n {
                q.advance_cursor(k + 1 == n, false);
            }
        }
        q
    }

    #[test]
    fn wqes_take_consecutive_psns_and_the_cursor_walks_them() {
        let mut q = SendQueue::new(Psn::new(10));
        q.push(wr(0));
        q.push(wr(1));
        assert_eq!(q.at_cursor().map(|c| (c.0, c.2, c.3)), Some((0, 0, Psn::new(10))));
        q.start_at_cursor(3);
        q.advance_cursor(false, false);
        assert_eq!(q.at_cursor().map(|c| (c.0, c.2, c.3)), Some((0, 1, Psn::new(11))));
        q.advance_cursor(false, false);
        q.advance_cursor(true, false);
        assert_eq!(q.at_cursor().map(|c| (c.0, c.3)), Some((1, Psn::new(13))));
        q.start_at_cursor(1);
        assert_eq!(q.next_psn(), Psn::new(14));
        assert!(q.is_outstanding(Psn::new(10)) && q.is_outstanding(Psn::new(13)));
        assert!(!q.is_outstanding(Psn::new(14)) && !q.is_outstanding(Psn::new(9)));
    }

    #[test]
    fn go_back_n_and_retiring_keep_the_cursor_inside_the_window() {
        let mut q = three_sent();
        assert_eq!(q.before_cursor(), 3);
        assert!(q.rewind_to(Psn::new(11)));
        assert_eq!(q.at_cursor().map(|c| (c.0, c.2, c.3)), Some((0, 1, Psn::new(11))));
        assert!(!q.rewind_to(Psn::new(16)), "PSN 16 was never sent");
        // The first WQE is acknowledged while the cursor is inside it: the
        // cursor continues at the start of the next one.
        q.acknowledge_before(Psn::new(13));
        assert_eq!(q.retire_front().map(|w| w.wr.wr_id), Some(0));
        assert_eq!(q.at_cursor().map(|c| (c.0, c.2, c.3)), Some((0, 0, Psn::new(13))));
        q.acknowledge_before(Psn::new(14));
        assert_eq!(q.retire_front().map(|w| w.wr.wr_id), Some(1));
        assert_eq!(q.at_cursor().map(|c| (c.0, c.2, c.3)), Some((0, 0, Psn::new(14))));
        // The first packet of the last WQE is acknowledged too: the cursor
        // moves up to the second, not sending the first again.
        q.acknowledge_before(Psn::new(15));
        q.cursor_not_before(Psn::new(15));
        assert_eq!(q.at_cursor().map(|c| (c.0, c.2, c.3)), Some((0, 1, Psn::new(15))));
        // A cursor already past the PSN stays where it is.
        q.cursor_not_before(Psn::new(14));
        assert_eq!(q.at_cursor().map(|c| c.3), Some(Psn::new(15)));
        // Everything acknowledged: the cursor goes past the started WQEs.
        q.acknowledge_before(Psn::new(16));
        q.cursor_not_before(Psn::new(16));
        assert_eq!(q.before_cursor(), 1);
        assert!(q.at_cursor().is_none());
        assert_eq!(q.drain().map(|w| w.wr.wr_id).collect::<Vec<_>>(), vec![2]);
        assert!(q.at_cursor().is_none());
    }

    #[test]
    fn wrapping_psns_stay_in_order() {
        let mut q = SendQueue::new(Psn::new(0xff_fffe));
        q.push(wr(0));
        q.start_at_cursor(4);
        assert_eq!(q.next_psn(), Psn::new(2));
        assert!(q.is_outstanding(Psn::new(0xff_ffff)) && q.is_outstanding(Psn::new(1)));
        assert_eq!(q.position_of(Psn::new(1)), Some(0));
        assert_eq!(q.get(0).map(SendWqe::last_psn), Some(Psn::new(1)));
    }
}
