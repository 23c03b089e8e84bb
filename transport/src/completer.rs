//! The completer: acknowledgements and responses coming back to the
//! requester become work completions, retransmissions or errors.
//!
//! Rules (IBTA 9.7.5 and what rxe does):
//! - an ACK for PSN p acknowledges every request packet up to p; a READ or
//!   atomic it covers whose response has not arrived was lost: that is an
//!   implied NAK, and the requester goes back to it;
//! - a response (READ or atomic) implicitly acknowledges every earlier
//!   SEND and WRITE; a FLUSH and an ATOMIC WRITE are answered by a READ
//!   response without payload (IBTA 1.5 annex A19, as rxe answers them);
//! - an ACK or response for a PSN not outstanding is a ghost: ignored;
//! - PSN sequence error NAK and the local ACK timeout go back N and spend
//!   one of `retry_cnt`; an RNR NAK waits the NAK's timer and spends one of
//!   `rnr_retry` (7 = forever); the other NAKs fail the request and move the
//!   QP to the error state, flushing what is queued.

use crate::cq::CqTable;
use crate::framing::scatter;
use crate::memory::{MemoryTable, Pd};
use crate::qp::attr::{CqId, QpParams, QpState};
use crate::retry::RetryBudget;
use crate::send_queue::{SendQueue, SendWqe};
use crate::stats::{Drop, Stats};
use crate::time::{local_ack_timeout, Instant};
use crate::timers::{Timer, Timers};
use crate::wr::{SendOp, WcStatus, WorkCompletion};
use rdma_wire::{NakCode, Operation, Psn, Syndrome, TransportPacket};

/// The completer: the part of a QP it works on, borrowed field by field
/// (`Qp::completer`): the send queue and its PSN window, the retry
/// budgets, the local ACK and RNR timers, and what it reads of the QP's
/// identity and attributes. Not the receive side nor the responder: when a
/// request fails, it says so ([`Failed`]) and the QP moves to the error
/// state and flushes both sides.
pub(crate) struct Completer<'a> {
    pub(crate) num: u32,
    /// READ responses and atomic ACKs scatter into buffers of this PD.
    pub(crate) pd: Pd,
    pub(crate) send_cq: CqId,
    pub(crate) sq_sig_all: bool,
    /// Only read: moving the QP to the error state is the QP's job.
    pub(crate) state: QpState,
    pub(crate) params: &'a QpParams,
    pub(crate) sq: &'a mut SendQueue,
    pub(crate) retries: &'a mut RetryBudget,
    /// The requester's count of go-back-Ns (for the driver).
    pub(crate) retransmits: &'a mut u64,
    /// The completer arms and stops only [`Timer::Retransmit`] and
    /// [`Timer::RnrWait`].
    pub(crate) timers: &'a mut Timers,
}

/// The completer failed the request at the front of the send queue (its
/// completion is out): the QP must now move to the error state and flush
/// (`Qp::enter_error`). Nothing else happens after a failure.
#[must_use]
#[derive(Debug)]
pub(crate) struct Failed;

impl Completer<'_> {
    fn completion_for(&self, w: &SendWqe, status: WcStatus) -> WorkCompletion {
        let mut wc = WorkCompletion::new(w.wr.wr_id, status, w.wr.op.wc_opcode(), self.num);
        if status == WcStatus::Success {
            // As rxe's wqe->dma.length: a FLUSH's range, an ATOMIC WRITE's 8 bytes.
            wc.byte_len = match w.wr.op {
                SendOp::Flush { len, .. } => len as u32,
                SendOp::AtomicWrite { .. } => 8,
                _ => w.wr.length() as u32,
            };
        }
        wc
    }

    /// Completes the WQE at the front of the send queue successfully.
    pub(crate) fn complete_front(&mut self, cqs: &mut CqTable) {
        let Some(w) = self.sq.retire_front() else { return };
        if w.wr.signaled || self.sq_sig_all {
            cqs.push(self.send_cq, self.completion_for(&w, WcStatus::Success));
        }
        cqs.pool.recycle(w.wr.sg_list);
        if let Some(d) = w.wr.inline_data {
            cqs.pool.recycle_inline(d);
        }
    }

    /// UC and UD requests complete once sent, and local operations once
    /// executed: completes those at the front.
    pub(crate) fn complete_sent(&mut self, cqs: &mut CqTable) {
        while self.sq.front().is_some_and(|w| w.sent) {
            self.complete_front(cqs);
        }
    }

    /// The request at the requester's cursor failed locally: the requests
    /// before it complete first, then it fails with `status`.
    pub(crate) fn fail_at_cursor(&mut self, status: WcStatus, cqs: &mut CqTable) -> Failed {
        for _ in 0..self.sq.before_cursor() {
            self.complete_front(cqs);
        }
        self.fail(status, cqs)
    }

    /// Fails the front WQE with `status`; the QP is to move to the error
    /// state.
    pub(crate) fn fail(&mut self, status: WcStatus, cqs: &mut CqTable) -> Failed {
        tracing::debug!(qpn = self.num, ?status, "QP moves to the error state");
        if let Some(w) = self.sq.retire_front() {
            cqs.push(self.send_cq, self.completion_for(&w, status));
        }
        Failed
    }

    /// Completes every queued send request with WR_FLUSH_ERR (the QP is
    /// in ERR) and stops the send side's timers.
    pub(crate) fn flush(&mut self, cqs: &mut CqTable) {
        let flushed: Vec<SendWqe> = self.sq.drain().collect();
        for w in flushed {
            cqs.push(self.send_cq, self.completion_for(&w, WcStatus::WrFlushErr));
        }
        self.timers.stop(Timer::Retransmit);
        self.timers.stop(Timer::RnrWait);
    }

    /// Forward progress refills the retry budgets: they count failed
    /// attempts in a row, not over the QP's life.
    fn refill_retries(&mut self) {
        self.retries.refill(self.params);
    }

    /// Progress was made: the retry budgets refill and the timer restarts.
    fn progressed(&mut self, now: Instant) {
        self.refill_retries();
        let rto = if self.sq.outstanding() { local_ack_timeout(self.params.timeout).map(|d| now + d) } else { None };
        self.timers.set_opt(Timer::Retransmit, rto);
    }

    /// Acknowledges every packet up to and including `psn`. Returns false
    /// if it stopped at a READ or atomic whose response is missing (an
    /// implied NAK, already acted on).
    fn ack_through(&mut self, psn: Psn, cqs: &mut CqTable, stats: &mut Stats) -> Result<bool, Failed> {
        while let Some(w) = self.sq.front() {
            if w.wr.op.is_local() {
                // A local operation takes no PSN: done, it completes in
                // order; not yet executed, nothing after it has started.
                if !w.sent {
                    break;
                }
                self.complete_front(cqs);
                continue;
            }
            if !w.started || psn.distance_from(w.first_psn) >= Psn::HALF {
                break; // the WQE starts after psn
            }
            if w.wr.op.expects_response() {
                // Covered by an ACK but its response never came: go back to it.
                tracing::debug!(qpn = self.num, psn = w.first_psn.value(), "implied NAK");
                let from = self.sq.comp_psn();
                self.recover_gap(from, cqs, stats)?;
                return Ok(false);
            }
            if w.last_psn().distance_from(w.first_psn) <= psn.distance_from(w.first_psn) {
                let next = w.last_psn().next();
                self.sq.acknowledge_before(next);
                self.complete_front(cqs);
            } else {
                self.sq.acknowledge_before(psn.next());
                break;
            }
        }
        let comp = self.sq.comp_psn();
        self.sq.cursor_not_before(comp);
        Ok(true)
    }

    fn go_back(&mut self, psn: Psn, stats: &mut Stats) {
        if self.sq.rewind_to(psn) {
            stats.retransmits += 1;
            *self.retransmits += 1;
        }
    }

    /// Goes back to `psn` after a gap in the responses, unless it already
    /// did for this PSN and nothing has arrived since.
    fn recover_gap(&mut self, psn: Psn, cqs: &mut CqTable, stats: &mut Stats) -> Result<(), Failed> {
        if !self.retries.start_recovery(psn) {
            tracing::trace!(qpn = self.num, psn = psn.value(), "already recovering from this PSN");
            stats.drop(Drop::DuplicateResponse, self.num);
            return Ok(());
        }
        stats.implied_naks += 1;
        self.retry_or_fail(psn, cqs, stats)
    }

    /// Spends one transport retry, or fails the QP when none is left.
    fn retry_or_fail(&mut self, psn: Psn, cqs: &mut CqTable, stats: &mut Stats) -> Result<(), Failed> {
        if self.retries.spend_transport() {
            self.go_back(psn, stats);
            Ok(())
        } else {
            Err(self.fail(WcStatus::RetryExcErr, cqs))
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
    ) -> Result<(), Failed> {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            stats.drop(Drop::QpNotReady, self.num);
            return Ok(());
        }
        let bth = p.bth();
        let psn = bth.psn();
        let op = p.info().operation;
        if !self.sq.is_outstanding(psn) {
            tracing::trace!(
                qpn = self.num,
                psn = psn.value(),
                comp = self.sq.comp_psn().value(),
                next = self.sq.next_psn().value(),
                "ghost"
            );
            stats.drop(Drop::GhostResponse, self.num);
            return Ok(());
        }
        if op == Operation::Acknowledge {
            let Some(aeth) = p.aeth() else { return Ok(()) };
            match aeth.syndrome() {
                Syndrome::Ack(_) => {
                    if self.ack_through(psn, cqs, stats)? {
                        self.progressed(now);
                    }
                }
                Syndrome::RnrNak(timer) => {
                    stats.rnr_naks_received += 1;
                    if psn != self.sq.comp_psn() {
                        if !self.ack_through(psn.sub(1), cqs, stats)? {
                            return Ok(());
                        }
                        self.refill_retries();
                    }
                    if !self.retries.spend_rnr() {
                        return Err(self.fail(WcStatus::RnrRetryExcErr, cqs));
                    }
                    self.timers.set(Timer::RnrWait, now + timer.duration());
                    self.timers.stop(Timer::Retransmit);
                    self.go_back(psn, stats);
                }
                Syndrome::Nak(code) => {
                    stats.naks_received += 1;
                    if psn != self.sq.comp_psn() {
                        if !self.ack_through(psn.sub(1), cqs, stats)? {
                            return Ok(());
                        }
                        self.refill_retries();
                    }
                    let status = match code {
                        NakCode::PsnSequenceError => {
                            return self.retry_or_fail(psn, cqs, stats);
                        }
                        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                        _ => WcStatus::RemInvReqErr,
                    };
                    return Err(self.fail(status, cqs));
                }
                Syndrome::Reserved(_) => stats.drop(Drop::BadResponse, self.num),
            }
            return Ok(());
        }

        // A READ response or an atomic ACK: find the request it answers.
        let Some(i) = self.sq.position_of(psn) else {
            stats.drop(Drop::GhostResponse, self.num);
            return Ok(());
        };
        let wants_read = op == Operation::RdmaReadResponse;
        let Some(answered) = self.sq.get(i) else { return Ok(()) };
        let is_match = match answered.wr.op {
            SendOp::RdmaRead { .. } => wants_read,
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => op == Operation::AtomicAcknowledge,
            // Answered by an RDMA READ RESPONSE ONLY (rxe_resp.c:
            // send_read_response_ack); a payload in it is checked below.
            SendOp::Flush { .. } | SendOp::AtomicWrite { .. } => wants_read,
            _ => false,
        };
        if !is_match {
            stats.drop(Drop::BadResponse, self.num);
            return Ok(());
        }
        // Earlier SENDs and WRITEs are implicitly acknowledged; an earlier
        // READ or atomic still open means its response was lost.
        if self.sq.iter().take(i).any(|w| w.wr.op.expects_response()) {
            let from = self.sq.comp_psn();
            return self.recover_gap(from, cqs, stats);
        }
        for _ in 0..i {
            self.complete_front(cqs);
        }
        let Some(first) = self.sq.front().map(|w| w.first_psn) else { return Ok(()) };
        let comp = self.sq.comp_psn();
        if first.distance_from(comp) < Psn::HALF {
            self.sq.acknowledge_before(first);
        }
        let comp = self.sq.comp_psn();
        if psn != comp {
            if psn.distance_from(comp) < Psn::HALF {
                // Responses before this one were lost.
                let from = comp;
                self.recover_gap(from, cqs, stats)?;
            } else {
                stats.drop(Drop::DuplicateResponse, self.num);
            }
            return Ok(());
        }
        let Some(w) = self.sq.front() else { return Ok(()) };
        let k = psn.distance_from(w.first_psn);
        let mtu = u64::from(self.params.mtu.bytes());
        let done = match w.wr.op {
            SendOp::RdmaRead { .. } => {
                let expected = (w.wr.length() - (u64::from(k) * mtu).min(w.wr.length())).min(mtu);
                if p.payload().len() as u64 != expected {
                    stats.drop(Drop::BadResponse, self.num);
                    return Err(self.fail(WcStatus::BadRespErr, cqs));
                }
                if scatter(mrs, self.pd, &w.wr.sg_list, u64::from(k) * mtu, p.payload()).is_err() {
                    return Err(self.fail(WcStatus::LocProtErr, cqs));
                }
                k + 1 == w.npkts
            }
            SendOp::Flush { .. } | SendOp::AtomicWrite { .. } => {
                // One READ RESPONSE ONLY with no payload completes it.
                if !p.payload().is_empty() || p.info().position != rdma_wire::Position::Only {
                    stats.drop(Drop::BadResponse, self.num);
                    return Err(self.fail(WcStatus::BadRespErr, cqs));
                }
                true
            }
            _ => {
                let orig = p.atomic_ack_eth().map_or(0, |a| a.orig());
                if scatter(mrs, self.pd, &w.wr.sg_list, 0, &orig.to_ne_bytes()).is_err() {
                    return Err(self.fail(WcStatus::LocProtErr, cqs));
                }
                true
            }
        };
        self.sq.acknowledge_before(psn.next());
        if done {
            self.complete_front(cqs);
            // Executed local operations right behind it complete with it.
            self.complete_sent(cqs);
        }
        let comp = self.sq.comp_psn();
        self.sq.cursor_not_before(comp);
        self.progressed(now);
        Ok(())
    }

    /// The local ACK timer fired.
    pub(crate) fn handle_ack_timeout(&mut self, cqs: &mut CqTable, stats: &mut Stats) -> Result<(), Failed> {
        self.timers.stop(Timer::Retransmit);
        if !self.sq.outstanding() || !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return Ok(());
        }
        stats.timeouts += 1;
        tracing::debug!(
            qpn = self.num,
            psn = self.sq.comp_psn().value(),
            retries_left = self.retries.transport_left(),
            "local ACK timeout"
        );
        let from = self.sq.comp_psn();
        self.retry_or_fail(from, cqs, stats)
    }
}
