//! The completer: acknowledgements and responses coming back to the
//! requester become work completions, retransmissions or errors.
//!
//! Rules (IBTA 9.7.5 and what rxe does):
//! - an ACK for PSN p acknowledges every request packet up to p; a READ or
//!   atomic it covers whose response has not arrived was lost: that is an
//!   implied NAK, and the requester goes back to it;
//! - a response (READ or atomic) implicitly acknowledges every earlier
//!   SEND and WRITE;
//! - an ACK or response for a PSN not outstanding is a ghost: ignored;
//! - PSN sequence error NAK and the local ACK timeout go back N and spend
//!   one of `retry_cnt`; an RNR NAK waits the NAK's timer and spends one of
//!   `rnr_retry` (7 = forever); the other NAKs fail the request and move the
//!   QP to the error state, flushing what is queued.

use crate::cq::CqTable;
use crate::framing::scatter;
use crate::memory::MemoryTable;
use crate::qp::{Qp, QpState};
use crate::send_queue::SendWqe;
use crate::stats::{Drop, Stats};
use crate::time::{local_ack_timeout, Instant};
use crate::timers::Timer;
use crate::wr::{SendOp, WcStatus, WorkCompletion};
use rdma_wire::{NakCode, Operation, Psn, Syndrome, TransportPacket};

impl Qp {
    fn completion_for(&self, w: &SendWqe, status: WcStatus) -> WorkCompletion {
        let mut wc = WorkCompletion::new(w.wr.wr_id, status, w.wr.op.wc_opcode(), self.num);
        if status == WcStatus::Success {
            wc.byte_len = w.wr.length() as u32;
        }
        wc
    }

    /// Completes the WQE at the front of the send queue successfully.
    pub(crate) fn complete_front(&mut self, cqs: &mut CqTable) {
        let Some(w) = self.req.sq.retire_front() else { return };
        if w.wr.signaled || self.init.sq_sig_all {
            cqs.push(self.init.send_cq, self.completion_for(&w, WcStatus::Success));
        }
        cqs.pool.recycle(w.wr.sg_list);
        if let Some(d) = w.wr.inline_data {
            cqs.pool.recycle_inline(d);
        }
    }

    /// Fails the front WQE with `status`, flushes every other send and
    /// receive request and moves the QP to the error state.
    pub(crate) fn fail(&mut self, status: WcStatus, cqs: &mut CqTable) {
        tracing::debug!(qpn = self.num, ?status, "QP moves to the error state");
        if let Some(w) = self.req.sq.retire_front() {
            cqs.push(self.init.send_cq, self.completion_for(&w, status));
        }
        self.state = QpState::Err;
        self.flush(cqs);
    }

    /// Completes every queued request with WR_FLUSH_ERR (the QP is in ERR).
    pub(crate) fn flush(&mut self, cqs: &mut CqTable) {
        let flushed: Vec<SendWqe> = self.req.sq.drain().collect();
        for w in flushed {
            cqs.push(self.init.send_cq, self.completion_for(&w, WcStatus::WrFlushErr));
        }
        self.timers.stop(Timer::Retransmit);
        self.timers.stop(Timer::RnrWait);
        self.timers.stop(Timer::HeldAck);
        // A SEND in progress holds a receive WQE (its own or the SRQ's):
        // it is flushed with the rest, not lost.
        let taken = self.resp.abandon_message();
        let own = if self.init.srq.is_none() { self.rq.drain(..).collect() } else { Vec::new() };
        for r in taken.into_iter().chain(own) {
            let wc = WorkCompletion::new(r.wr_id, WcStatus::WrFlushErr, crate::wr::WcOpcode::Recv, self.num);
            cqs.push(self.init.recv_cq, wc);
        }
    }

    /// Forward progress refills the retry budgets: they count failed
    /// attempts in a row, not over the QP's life.
    fn refill_retries(&mut self) {
        self.req.retries.refill(&self.params);
    }

    /// Progress was made: the retry budgets refill and the timer restarts.
    fn progressed(&mut self, now: Instant) {
        self.refill_retries();
        let rto = if self.req.outstanding() { local_ack_timeout(self.params.timeout).map(|d| now + d) } else { None };
        self.timers.set_opt(Timer::Retransmit, rto);
    }

    /// Acknowledges every packet up to and including `psn`. Returns false
    /// if it stopped at a READ or atomic whose response is missing (an
    /// implied NAK, already acted on).
    fn ack_through(&mut self, psn: Psn, cqs: &mut CqTable, stats: &mut Stats) -> bool {
        while let Some(w) = self.req.sq.front() {
            if !w.started || psn.distance_from(w.first_psn) >= Psn::HALF {
                break; // the WQE starts after psn
            }
            if w.wr.op.writes_local() {
                // Covered by an ACK but its response never came: go back to it.
                tracing::debug!(qpn = self.num, psn = w.first_psn.value(), "implied NAK");
                let from = self.req.sq.comp_psn();
                self.recover_gap(from, cqs, stats);
                return false;
            }
            if w.last_psn().distance_from(w.first_psn) <= psn.distance_from(w.first_psn) {
                let next = w.last_psn().next();
                self.req.sq.acknowledge_before(next);
                self.complete_front(cqs);
            } else {
                self.req.sq.acknowledge_before(psn.next());
                break;
            }
        }
        let comp = self.req.sq.comp_psn();
        self.req.sq.cursor_not_before(comp);
        true
    }

    fn go_back(&mut self, psn: Psn, stats: &mut Stats) {
        if self.req.sq.rewind_to(psn) {
            stats.retransmits += 1;
            self.req.retransmits += 1;
        }
    }

    /// Goes back to `psn` after a gap in the responses, unless it already
    /// did for this PSN and nothing has arrived since.
    fn recover_gap(&mut self, psn: Psn, cqs: &mut CqTable, stats: &mut Stats) {
        if !self.req.retries.start_recovery(psn) {
            tracing::trace!(qpn = self.num, psn = psn.value(), "already recovering from this PSN");
            stats.drop(Drop::DuplicateResponse, self.num);
            return;
        }
        stats.implied_naks += 1;
        self.retry_or_fail(psn, cqs, stats);
    }

    /// Spends one transport retry, or fails the QP when none is left.
    fn retry_or_fail(&mut self, psn: Psn, cqs: &mut CqTable, stats: &mut Stats) {
        if self.req.retries.spend_transport() {
            self.go_back(psn, stats);
        } else {
            self.fail(WcStatus::RetryExcErr, cqs);
        }
    }

    /// Handles an ACK, NAK, READ response or atomic ACK for this QP.
    pub(crate) fn handle_response(
        &mut self,
        now: Instant,
        p: &TransportPacket<&[u8]>,
        mrs: &MemoryTable,
        cqs: &mut CqTable,
        stats: &mut Stats,
    ) {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            stats.drop(Drop::QpNotReady, self.num);
            return;
        }
        let bth = p.bth();
        let psn = bth.psn();
        let op = p.info().operation;
        if !self.req.sq.is_outstanding(psn) {
            tracing::trace!(
                qpn = self.num,
                psn = psn.value(),
                comp = self.req.sq.comp_psn().value(),
                next = self.req.sq.next_psn().value(),
                "ghost"
            );
            stats.drop(Drop::GhostResponse, self.num);
            return;
        }
        if op == Operation::Acknowledge {
            let Some(aeth) = p.aeth() else { return };
            match aeth.syndrome() {
                Syndrome::Ack(_) => {
                    if self.ack_through(psn, cqs, stats) {
                        self.progressed(now);
                    }
                }
                Syndrome::RnrNak(timer) => {
                    stats.rnr_naks_received += 1;
                    if psn != self.req.sq.comp_psn() {
                        if !self.ack_through(psn.sub(1), cqs, stats) {
                            return;
                        }
                        self.refill_retries();
                    }
                    if !self.req.retries.spend_rnr() {
                        self.fail(WcStatus::RnrRetryExcErr, cqs);
                        return;
                    }
                    self.timers.set(Timer::RnrWait, now + timer.duration());
                    self.timers.stop(Timer::Retransmit);
                    self.go_back(psn, stats);
                }
                Syndrome::Nak(code) => {
                    stats.naks_received += 1;
                    if psn != self.req.sq.comp_psn() {
                        if !self.ack_through(psn.sub(1), cqs, stats) {
                            return;
                        }
                        self.refill_retries();
                    }
                    let status = match code {
                        NakCode::PsnSequenceError => {
                            self.retry_or_fail(psn, cqs, stats);
                            return;
                        }
                        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                        _ => WcStatus::RemInvReqErr,
                    };
                    self.fail(status, cqs);
                }
                Syndrome::Reserved(_) => stats.drop(Drop::BadResponse, self.num),
            }
            return;
        }

        // A READ response or an atomic ACK: find the request it answers.
        let Some(i) = self.req.sq.position_of(psn) else {
            stats.drop(Drop::GhostResponse, self.num);
            return;
        };
        let wants_read = op == Operation::RdmaReadResponse;
        let Some(answered) = self.req.sq.get(i) else { return };
        let is_match = match answered.wr.op {
            SendOp::RdmaRead { .. } => wants_read,
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => op == Operation::AtomicAcknowledge,
            _ => false,
        };
        if !is_match {
            stats.drop(Drop::BadResponse, self.num);
            return;
        }
        // Earlier SENDs and WRITEs are implicitly acknowledged; an earlier
        // READ or atomic still open means its response was lost.
        if self.req.sq.iter().take(i).any(|w| w.wr.op.writes_local()) {
            let from = self.req.sq.comp_psn();
            self.recover_gap(from, cqs, stats);
            return;
        }
        for _ in 0..i {
            self.complete_front(cqs);
        }
        let Some(first) = self.req.sq.front().map(|w| w.first_psn) else { return };
        let comp = self.req.sq.comp_psn();
        if first.distance_from(comp) < Psn::HALF {
            self.req.sq.acknowledge_before(first);
        }
        let comp = self.req.sq.comp_psn();
        if psn != comp {
            if psn.distance_from(comp) < Psn::HALF {
                // Responses before this one were lost.
                let from = comp;
                self.recover_gap(from, cqs, stats);
            } else {
                stats.drop(Drop::DuplicateResponse, self.num);
            }
            return;
        }
        let Some(w) = self.req.sq.front() else { return };
        let k = psn.distance_from(w.first_psn);
        let mtu = u64::from(self.params.mtu.bytes());
        let done = match w.wr.op {
            SendOp::RdmaRead { .. } => {
                let expected = (w.wr.length() - (u64::from(k) * mtu).min(w.wr.length())).min(mtu);
                if p.payload().len() as u64 != expected {
                    stats.drop(Drop::BadResponse, self.num);
                    self.fail(WcStatus::BadRespErr, cqs);
                    return;
                }
                if scatter(mrs, self.init.pd, &w.wr.sg_list, u64::from(k) * mtu, p.payload()).is_err() {
                    self.fail(WcStatus::LocProtErr, cqs);
                    return;
                }
                k + 1 == w.npkts
            }
            _ => {
                let orig = p.atomic_ack_eth().map_or(0, |a| a.orig());
                if scatter(mrs, self.init.pd, &w.wr.sg_list, 0, &orig.to_ne_bytes()).is_err() {
                    self.fail(WcStatus::LocProtErr, cqs);
                    return;
                }
                true
            }
        };
        self.req.sq.acknowledge_before(psn.next());
        if done {
            self.complete_front(cqs);
        }
        let comp = self.req.sq.comp_psn();
        self.req.sq.cursor_not_before(comp);
        self.progressed(now);
    }

    /// The local ACK timer fired.
    pub(crate) fn handle_ack_timeout(&mut self, cqs: &mut CqTable, stats: &mut Stats) {
        self.timers.stop(Timer::Retransmit);
        if !self.req.outstanding() || !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return;
        }
        stats.timeouts += 1;
        tracing::debug!(
            qpn = self.num,
            psn = self.req.sq.comp_psn().value(),
            retries_left = self.req.retries.transport_left(),
            "local ACK timeout"
        );
        let from = self.req.sq.comp_psn();
        self.retry_or_fail(from, cqs, stats);
    }
}
