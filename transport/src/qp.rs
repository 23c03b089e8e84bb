//! The queue pair: the IBTA state machine with the attribute rules of
//! `ibv_modify_qp` (the attributes and the QP's type are in `attr`), and
//! the state the requester, completer and responder share. Each of the
//! three works on a narrow view of the QP, borrowed field by field here
//! (`requester_parts`, `completer`, `responder_parts`), so that its
//! signature says what it can touch; what one needs of another comes in as
//! a value (the responder's `conversing`) and what only the QP may do (move
//! to ERR, flush both sides) goes out as an outcome (`FatalNak`, `Failed`).

use crate::completer::{Completer, Failed};
use crate::cq::CqTable;
use crate::error::VerbsError;
use crate::framing::{Framer, PayloadRef};
use crate::memory::MemoryTable;
use crate::memory::Pd;
use crate::requester::{ReqOutcome, ReqQp, Requester};
use crate::responder::{AckHold, RespCtx, RespQp, Responder};
pub use crate::stats::QpStats;
use crate::time::Instant;
use crate::timers::{Timer, Timers};
use crate::wr::{RecvWr, WcStatus};
use core::net::IpAddr;
use rdma_wire::Psn;
use std::collections::VecDeque;

pub(crate) mod attr;

pub use attr::{
    AddressVector, CqId, Mtu, QpAttr, QpCap, QpInitAttr, QpParams, QpState, QpType, SrqId, XrcdId, ECN_CE, ECN_ECT0,
    ECN_MASK,
};

/// A queue pair.
#[derive(Debug)]
pub struct Qp {
    pub num: u32,
    pub init: QpInitAttr,
    pub state: QpState,
    pub params: QpParams,
    /// Per-QP UDP source port (0xC000..=0xFFFF), for ECMP entropy as rxe does.
    pub src_port: u16,
    pub rq: VecDeque<RecvWr>,
    pub(crate) req: Requester,
    pub(crate) resp: Responder,
    /// The requester's, completer's and responder's timers.
    pub(crate) timers: Timers,
    /// Data packets leave ECN-capable (see [`AddressVector::for_data`]).
    pub ecn_capable: bool,
    pub stats: QpStats,
    /// Notification point, owed CNPs, reaction point and pacer; `None`
    /// until the QP sees CE-marked data or congestion control is turned on.
    /// In the QP, not behind a box: a paced packet and a pacer release read
    /// it on QPs that are cold in a large fabric, and a pointer chase fewer
    /// was 4 % of the time per hop at 256 hosts (docs/performance.md).
    pub(crate) cc: Option<crate::cc::wired::QpCc>,
    /// The XRC domain of an XRC_RECV QP.
    pub xrcd: Option<XrcdId>,
    /// An XRC_RECV QP's target for the packet being handled (and the READ
    /// responses it queued): the named XRC SRQ, its PD and its CQ.
    pub(crate) xrc_target: Option<(SrqId, Pd, CqId)>,
    /// Handles `ibv_open_qp` gave to this XRC_RECV QP besides its own:
    /// each destroy takes one, the last removes the QP.
    pub(crate) opens: u32,
    /// This QP's slot in the endpoint agenda's deadline index (a cell: the
    /// agenda refreshes from `&self`, see `endpoint/deadlines.rs`).
    pub(crate) agenda_slot: core::cell::Cell<u32>,
}

impl Qp {
    /// The QP's next deadline: its timer table's earliest (congestion
    /// control's deadlines included).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Asks the cache for this QP in two steps, as a simulator that knows
    /// its next events does: shallow, the QP's own lines (its congestion
    /// state and DCQCN's controller among them); `deep`, one event later,
    /// what it points to, its oldest WQEs, which reads the QP itself.
    pub(crate) fn prefetch(&self, deep: bool) {
        if deep {
            self.req.sq.prefetch();
        } else {
            crate::prefetch::lines_of(self);
        }
    }

    pub(crate) fn new(num: u32, init: QpInitAttr) -> Qp {
        // UD has no path MTU: its messages go up to the port's MTU, which
        // for a soft device is the largest there is (as rxe takes the port's
        // active MTU).
        let params = match init.qp_type {
            QpType::Ud => QpParams { mtu: Mtu::Mtu4096, ..QpParams::default() },
            _ => QpParams::default(),
        };
        Qp {
            num,
            init,
            state: QpState::Reset,
            params,
            src_port: 0xc000 | ((num.wrapping_mul(0x9e37_79b1) >> 18) as u16 & 0x3fff),
            rq: VecDeque::new(),
            req: Requester::new(Psn::new(0)),
            resp: Responder::new(Psn::new(0)),
            timers: Timers::default(),
            ecn_capable: true,
            stats: QpStats::default(),
            cc: None,
            xrcd: None,
            xrc_target: None,
            opens: 0,
            agenda_slot: core::cell::Cell::new(u32::MAX),
        }
    }

    /// Applies `attr` (the `ibv_modify_qp` rules): checks that the state
    /// transition is allowed, that the attributes it requires are there
    /// and that every value is in range, then sets them. Nothing changes if
    /// anything is wrong.
    pub(crate) fn modify(&mut self, attr: &QpAttr) -> Result<(), VerbsError> {
        use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
        let qpn = self.num;
        let from = self.state;
        let to = attr.qp_state.unwrap_or(from);
        let t = self.init.qp_type;
        let allowed = matches!(
            (from, to),
            (_, Reset)
                | (_, QpState::Err)
                | (Reset, Init)
                | (Init, Init)
                | (Init, Rtr)
                | (Rtr, Rts)
                | (Rts, Rts)
                | (Rts, Sqd)
                | (Sqd, Sqd)
                | (Sqd, Rts)
                | (Sqe, Rts)
        );
        if !allowed {
            return Err(VerbsError::InvalidTransition { qpn, from, to });
        }
        let missing = |attr: &'static str| VerbsError::MissingAttribute { qpn, from, to, attr };
        let required: &[(&'static str, bool)] = match (from, to, t) {
            (Reset, Init, QpType::Ud) => &[
                ("pkey_index", attr.pkey_index.is_some()),
                ("port_num", attr.port_num.is_some()),
                ("qkey", attr.qkey.is_some()),
            ],
            (Reset, Init, _) => &[
                ("pkey_index", attr.pkey_index.is_some()),
                ("port_num", attr.port_num.is_some()),
                ("qp_access_flags", attr.qp_access_flags.is_some()),
            ],
            // As the kernel's qp_state_table: an XRC initiator has no
            // receive side, so neither max_dest_rd_atomic nor min_rnr_timer.
            (Init, Rtr, QpType::Rc | QpType::XrcRecv) => &[
                ("av", attr.av.is_some()),
                ("path_mtu", attr.path_mtu.is_some()),
                ("dest_qp_num", attr.dest_qp_num.is_some()),
                ("rq_psn", attr.rq_psn.is_some()),
                ("max_dest_rd_atomic", attr.max_dest_rd_atomic.is_some()),
                ("min_rnr_timer", attr.min_rnr_timer.is_some()),
            ],
            (Init, Rtr, QpType::Uc | QpType::XrcSend) => &[
                ("av", attr.av.is_some()),
                ("path_mtu", attr.path_mtu.is_some()),
                ("dest_qp_num", attr.dest_qp_num.is_some()),
                ("rq_psn", attr.rq_psn.is_some()),
            ],
            (Rtr, Rts, QpType::Rc | QpType::XrcSend) => &[
                ("sq_psn", attr.sq_psn.is_some()),
                ("timeout", attr.timeout.is_some()),
                ("retry_cnt", attr.retry_cnt.is_some()),
                ("rnr_retry", attr.rnr_retry.is_some()),
                ("max_rd_atomic", attr.max_rd_atomic.is_some()),
            ],
            (Rtr, Rts, _) => &[("sq_psn", attr.sq_psn.is_some())],
            _ => &[],
        };
        if let Some((name, _)) = required.iter().find(|(_, present)| !present) {
            return Err(missing(name));
        }
        let bad = |attr: &'static str, value: u64| VerbsError::InvalidAttribute { qpn, attr, value };
        let check = |v: Option<u8>, max: u8, name: &'static str| match v {
            Some(x) if x > max => Err(bad(name, u64::from(x))),
            _ => Ok(()),
        };
        check(attr.timeout, 31, "timeout")?;
        check(attr.retry_cnt, 7, "retry_cnt")?;
        check(attr.rnr_retry, 7, "rnr_retry")?;
        check(attr.min_rnr_timer, 31, "min_rnr_timer")?;
        check(attr.port_num.map(|p| p.saturating_sub(1)), 0, "port_num (the soft device has port 1)")?;
        if attr.port_num == Some(0) {
            return Err(bad("port_num (the soft device has port 1)", 0));
        }
        for (v, name) in [(attr.dest_qp_num, "dest_qp_num"), (attr.rq_psn, "rq_psn"), (attr.sq_psn, "sq_psn")] {
            if let Some(x) = v.filter(|&x| x > 0xff_ffff) {
                return Err(bad(name, u64::from(x)));
            }
        }
        if t == QpType::Ud && (attr.av.is_some() || attr.dest_qp_num.is_some()) {
            return Err(bad("av/dest_qp_num (a UD QP is given its destination per send)", 0));
        }

        // All checked: apply.
        let p = &mut self.params;
        if let Some(v) = attr.qp_access_flags {
            p.access = v;
        }
        if let Some(v) = attr.qkey {
            p.qkey = v;
        }
        if let Some(v) = attr.path_mtu {
            p.mtu = v;
        }
        if let Some(v) = attr.dest_qp_num {
            p.dest_qp = v;
        }
        if let Some(v) = attr.av {
            p.av = Some(v);
        }
        if let Some(v) = attr.timeout {
            p.timeout = v;
        }
        if let Some(v) = attr.retry_cnt {
            p.retry_cnt = v;
        }
        if let Some(v) = attr.rnr_retry {
            p.rnr_retry = v;
        }
        if let Some(v) = attr.min_rnr_timer {
            p.min_rnr_timer = v;
        }
        if let Some(v) = attr.max_rd_atomic {
            p.max_rd_atomic = v.max(1);
        }
        if let Some(v) = attr.max_dest_rd_atomic {
            p.max_dest_rd_atomic = v.max(1);
        }
        if let Some(v) = attr.rq_psn {
            self.resp = Responder::new(Psn::new(v));
            self.timers.stop(Timer::HeldAck);
        }
        if let Some(v) = attr.sq_psn {
            self.req = Requester::new(Psn::new(v));
            self.timers.stop(Timer::Retransmit);
            self.timers.stop(Timer::RnrWait);
        }
        if to == Reset {
            self.req = Requester::new(Psn::new(0));
            self.resp = Responder::new(Psn::new(0));
            self.timers = Timers::default();
            // Congestion control outlives a reset: its deadlines stay armed.
            if let Some(cc) = self.cc.as_ref() {
                cc.arm(&mut self.timers);
            }
            self.rq.clear();
        }
        if to == Rts && from == Rtr {
            self.req.retries.refill(&self.params);
        }
        self.state = to;
        Ok(())
    }

    /// The responder and the part of the QP it may touch, borrowed apart.
    #[inline]
    fn responder_parts(&mut self) -> (&mut Responder, RespQp<'_>) {
        let (srq, pd, recv_cq) = match self.xrc_target {
            Some((srq, pd, cq)) => (Some(srq), pd, cq),
            None => (self.init.srq, self.init.pd, self.init.recv_cq),
        };
        let view = RespQp {
            num: self.num,
            qp_type: self.init.qp_type,
            pd,
            srq,
            recv_cq,
            state: self.state,
            params: &self.params,
            src_port: self.src_port,
            ecn_capable: self.ecn_capable,
            rq: &mut self.rq,
            timers: &mut self.timers,
        };
        (&mut self.resp, view)
    }

    /// Handles a request packet addressed to this QP. A NAK that ends the
    /// connection moves the QP to the error state here, where the send
    /// queue is flushed too.
    pub(crate) fn handle_request(&mut self, p: &rdma_wire::TransportPacket<&[u8]>, ctx: &mut RespCtx<'_>) {
        let (resp, mut view) = self.responder_parts();
        if let Some(nak) = resp.handle_request(&mut view, p, ctx) {
            // The answers of earlier requests that carry a result (READ,
            // atomic, FLUSH and ATOMIC_WRITE responses) were executed and
            // go out before the NAK, as a NIC sends them in PSN order; the
            // plain ACKs the NAK covers are dropped with the rest.
            let results = self.resp.take_result_answers();
            self.enter_error(ctx.cqs);
            self.resp.restore_answers(results);
            self.resp.queue_fatal_nak(nak);
        }
    }

    /// Writes the next response packet into `buf`, if one is waiting (see
    /// [`Responder::transmit`]). Whether the requester sent lately, which
    /// decides whether a lone ACK may wait for company, is read here.
    pub(crate) fn responder_transmit(
        &mut self,
        now: Instant,
        (hold, flush): (core::time::Duration, bool),
        mrs: &MemoryTable,
        framer: &Framer,
        buf: &mut [u8],
    ) -> Option<(usize, IpAddr, Option<PayloadRef>)> {
        // Nothing to answer (most calls): no view, no clock reading.
        if self.resp.is_idle() {
            return None;
        }
        // A QP in ERR has nothing to hold an ACK for (see `flush_owing_ack`).
        let flush = flush || self.state == QpState::Err;
        // Read only when it can matter: a lone ACK that may be held.
        let conversing = !hold.is_zero() && !flush && self.req.sent_lately(now);
        let (resp, mut view) = self.responder_parts();
        resp.transmit(&mut view, now, AckHold { hold, flush, conversing }, mrs, framer, buf)
    }

    /// A READ response ended with a NAK that ends the connection (its
    /// region went): once that NAK is out, the QP moves to the error state
    /// and flushes. Returns whether it did.
    pub(crate) fn fail_after_fatal_response(&mut self, cqs: &mut CqTable) -> bool {
        if self.resp.take_fatal() && self.state != QpState::Err {
            self.enter_error(cqs);
            return true;
        }
        false
    }

    /// The requester and the part of the QP it may touch, borrowed apart.
    #[inline]
    fn requester_parts(&mut self) -> (&mut Requester, ReqQp<'_>) {
        let view = ReqQp {
            num: self.num,
            qp_type: self.init.qp_type,
            pd: self.init.pd,
            state: self.state,
            params: &self.params,
            src_port: self.src_port,
            ecn_capable: self.ecn_capable,
            timers: &mut self.timers,
        };
        (&mut self.req, view)
    }

    /// Whether [`Qp::requester_transmit`] would send a request packet now
    /// (see [`Requester::ready`]).
    pub(crate) fn request_ready(&self, now: Instant) -> bool {
        self.req.ready(self.state, self.init.qp_type, self.timers.is_running(Timer::RnrWait, now))
    }

    /// Writes the next request packet into `buf`, if there is one to send.
    pub(crate) fn requester_transmit(
        &mut self,
        now: Instant,
        mrs: &MemoryTable,
        framer: &Framer,
        buf: &mut [u8],
    ) -> ReqOutcome {
        let (req, mut view) = self.requester_parts();
        req.transmit(&mut view, now, mrs, framer, buf)
    }

    /// The rkey a SEND with invalidate on this QP just named, checked by
    /// the responder, for the endpoint to invalidate.
    pub(crate) fn take_invalidation(&mut self) -> Option<u32> {
        self.resp.invalidate.take()
    }

    /// The local operation (BIND_MW, LOCAL_INV) at the requester's cursor
    /// was executed: the cursor moves past it, and it completes as soon as
    /// everything before it has.
    pub(crate) fn local_done(&mut self, cqs: &mut CqTable) {
        self.req.sq.finish_local_at_cursor();
        self.completer().complete_sent(cqs);
    }

    /// UC and UD requests complete once sent: completes those at the front.
    pub(crate) fn complete_sent(&mut self, cqs: &mut CqTable) {
        // RC requests complete on their ACKs: no view for every RC packet.
        if !self.init.qp_type.reliable() {
            self.completer().complete_sent(cqs);
        }
    }

    /// The request at the requester's cursor failed locally (`status`):
    /// the requests before it complete, it fails, and the QP moves to the
    /// error state.
    pub(crate) fn fail_at_cursor(&mut self, status: WcStatus, cqs: &mut CqTable) {
        let f = self.completer().fail_at_cursor(status, cqs);
        self.failed(f, cqs);
    }

    /// The completer and the part of the QP it may touch, borrowed apart.
    #[inline]
    fn completer(&mut self) -> Completer<'_> {
        Completer {
            num: self.num,
            pd: self.init.pd,
            send_cq: self.init.send_cq,
            sq_sig_all: self.init.sq_sig_all,
            state: self.state,
            params: &self.params,
            sq: &mut self.req.sq,
            retries: &mut self.req.retries,
            retransmits: &mut self.req.retransmits,
            timers: &mut self.timers,
        }
    }

    /// Handles an ACK, NAK, READ response or atomic ACK for this QP.
    pub(crate) fn handle_response(
        &mut self,
        now: Instant,
        p: &rdma_wire::TransportPacket<&[u8]>,
        mrs: &MemoryTable,
        cqs: &mut CqTable,
        stats: &mut crate::stats::Stats,
    ) {
        if let Err(f) = self.completer().handle_response(now, p, mrs, cqs, stats) {
            self.failed(f, cqs);
        }
    }

    /// The local ACK timer fired.
    pub(crate) fn handle_ack_timeout(&mut self, cqs: &mut CqTable, stats: &mut crate::stats::Stats) {
        if let Err(f) = self.completer().handle_ack_timeout(cqs, stats) {
            self.failed(f, cqs);
        }
    }

    /// The completer failed a request: the QP moves to the error state.
    fn failed(&mut self, _: Failed, cqs: &mut CqTable) {
        self.enter_error(cqs);
    }

    /// Moves the QP to the error state and flushes it.
    fn enter_error(&mut self, cqs: &mut CqTable) {
        self.state = QpState::Err;
        self.flush(cqs);
    }

    /// The consumer moved the QP to ERR (`ibv_modify_qp`, or the CM on
    /// the way to a DREQ): its queues flush, but the ACK owed for the
    /// requests it executed (their receives completed here) still goes
    /// out. A NIC would have sent it long before; this engine may hold a
    /// lone ACK back for company, and without it the peer would flush a
    /// request that arrived (libfabric's `fi_pingpong` saw its last SEND
    /// flushed when the server disconnected right after receiving it).
    /// Returns whether that ACK waits to be sent.
    pub(crate) fn flush_owing_ack(&mut self, cqs: &mut CqTable) -> bool {
        let owed = self.resp.take_owed_ack();
        self.flush(cqs);
        match owed {
            Some(ack) => {
                self.resp.restore_answers([ack].into());
                true
            }
            None => false,
        }
    }

    /// Completes every queued request with WR_FLUSH_ERR (the QP is in
    /// ERR): the send queue's, then the receive side's.
    pub(crate) fn flush(&mut self, cqs: &mut CqTable) {
        self.completer().flush(cqs);
        let (resp, mut view) = self.responder_parts();
        resp.flush(&mut view, cqs);
    }

    /// Whether the receive side accepts packets.
    pub fn can_receive(&self) -> bool {
        self.state.receives()
    }
}
