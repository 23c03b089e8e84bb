//! The responder: validates and executes incoming requests, and answers
//! them with ACKs, NAKs, READ responses and atomic ACKs.
//!
//! Every packet goes through named steps, in order, as in rxe:
//! 1. `check_psn`: in sequence, duplicate, or ahead (PSN sequence error);
//! 2. `check_op_sequence`: a multi-packet message goes first, middle..., last;
//! 3. `check_resources`: a receive WQE for a SEND (else RNR NAK);
//! 4. `check_length`: packet sizes against the MTU and the buffers;
//! 5. `check_rkey`: key, protection domain, bounds and access of RDMA targets;
//! 6. `execute`: copy, read or atomically update, then complete and ACK.
//!
//! Every drop and NAK is counted by reason in [`Stats`] and traced.
//!
//! Responses leave in PSN order through one queue, so an ACK never
//! overtakes the READ response before it; consecutive ACKs coalesce. ACK
//! credits are advertised as "unlimited" (code 31), as rxe does: the
//! receive queue is not flow-controlled by credits, and a SEND with no
//! receive WQE gets an RNR NAK instead.

use crate::cq::CqTable;
use crate::framing::{scatter, sge_len, Framer, PayloadRef};
use crate::memory::{Access, MemoryTable, Pd, RegionMemory};
use crate::net_header::NetHeader;
use crate::qp::attr::{CqId, QpParams, QpState, QpType, SrqId};
use crate::requester::packets_for;
use crate::resources::{read_matches, Executed, Resource, Resources};
use crate::srq::SrqTable;
use crate::stats::{Drop, Stats};
use crate::timers::{Timer, Timers};
use crate::wr::{wc_flags, RecvWr, Sge, WcOpcode, WcStatus, WorkCompletion};
use rdma_wire::{
    AethRepr, AtomicAckEthRepr, BthRepr, NakCode, Opcode, Operation, Position, Psn, RethRepr, RnrTimer, Syndrome,
    Transport, TransportPacket, TransportRepr,
};
use std::collections::VecDeque;

/// The longest message IBTA allows (a RETH's DMA length above it is an
/// invalid request).
const MAX_MESSAGE: u64 = 1 << 31;

/// A message being received over several packets.
#[derive(Debug, Clone)]
enum InMessage {
    /// A SEND being received into `recv`, whose buffers belong to `pd`.
    Send {
        recv: RecvWr,
        pd: Pd,
        offset: u64,
    },
    Write {
        rkey: u32,
        va: u64,
        remaining: u64,
        total: u64,
    },
}

/// One answer waiting to go out. READ responses and atomic ACKs name the
/// responder resource they answer (its first PSN, `origin`): a replay of
/// that resource takes the place of the answer still queued for it.
#[derive(Debug, Clone)]
pub(crate) enum Response {
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: u32,
    },
    Read {
        psn: Psn,
        rkey: u32,
        va: u64,
        remaining: u64,
        first: bool,
        msn: u32,
        origin: Psn,
        /// Answers a duplicate of a request already answered once (see
        /// [`Response::uses_new_resource`]).
        replay: bool,
    },
    Atomic {
        psn: Psn,
        orig: u64,
        msn: u32,
        origin: Psn,
        replay: bool,
    },
    /// The answer to a FLUSH or an ATOMIC WRITE: an RDMA READ RESPONSE
    /// ONLY without payload (rxe_resp.c: `send_read_response_ack`).
    /// `rd_atomic`: whether it holds one of the `max_dest_rd_atomic`
    /// resources (an ATOMIC WRITE does, a FLUSH does not: rxe's requester
    /// does not count FLUSHes against its limit).
    Empty {
        psn: Psn,
        msn: u32,
        origin: Psn,
        rd_atomic: bool,
        replay: bool,
    },
}

impl Response {
    /// The responder resource this answers, if it is a READ or atomic answer.
    fn origin(&self) -> Option<Psn> {
        match self {
            Response::Ack { .. } => None,
            Response::Read { origin, .. } | Response::Atomic { origin, .. } | Response::Empty { origin, .. } => {
                Some(*origin)
            }
        }
    }

    /// Whether this answer carries the result of a READ or atomic (one of
    /// the `max_dest_rd_atomic` resources).
    fn holds_rd_atomic(&self) -> bool {
        match self {
            Response::Ack { .. } => false,
            Response::Read { .. } | Response::Atomic { .. } => true,
            Response::Empty { rd_atomic, .. } => *rd_atomic,
        }
    }

    /// Whether this answer took a new responder resource, and so counts
    /// against `max_dest_rd_atomic` while it waits: the first answer to a
    /// READ or atomic does (its request is outstanding at the requester
    /// until the answer gets there); a replay for a duplicate does not.
    /// The requester may have completed the request a replay answers (its
    /// first answer was on the way when the ACK timer fired) and posted
    /// new ones in its place, within its limit; a resource is replayed at
    /// most once at a time, so replays queued are bounded by the resources
    /// remembered.
    fn uses_new_resource(&self) -> bool {
        match self {
            Response::Ack { .. } => false,
            Response::Read { replay, .. } | Response::Atomic { replay, .. } | Response::Empty { replay, .. } => {
                self.holds_rd_atomic() && !replay
            }
        }
    }
}

/// Responder state of a QP.
#[derive(Debug)]
pub struct Responder {
    pub(crate) epsn: Psn,
    msn: u32,
    cur: Option<InMessage>,
    /// A PSN sequence error NAK went out; no other until the expected PSN arrives.
    nak_sent: bool,
    pub(crate) out: VecDeque<Response>,
    /// The READs and atomics executed last, for replay (`max_dest_rd_atomic`).
    resources: Resources,
    /// A READ response found its region gone or no longer readable and
    /// answered with a NAK: the QP moves to the error state once it is sent.
    fatal: bool,
    /// UC: drop packets until the next FIRST or ONLY.
    uc_resync: bool,
    /// The rkey a SEND with invalidate just completed with, checked and
    /// not yet invalidated (`Qp::take_invalidation`).
    pub(crate) invalidate: Option<u32>,
}

impl Responder {
    pub fn new(rq_psn: Psn) -> Responder {
        Responder {
            epsn: rq_psn,
            msn: 0,
            cur: None,
            nak_sent: false,
            out: VecDeque::new(),
            resources: Resources::default(),
            fatal: false,
            uc_resync: false,
            invalidate: None,
        }
    }

    /// Drops the message in progress and every queued answer (the QP is
    /// going to the error state); returns the receive WQE a SEND in
    /// progress had taken, so that it can be flushed.
    fn abandon_message(&mut self) -> Option<RecvWr> {
        self.out.clear();
        self.resources.clear();
        match self.cur.take() {
            Some(InMessage::Send { recv, .. }) => Some(recv),
            _ => None,
        }
    }

    /// READ responses and atomic ACKs queued for requests answered for the
    /// first time: the responder resources in use.
    fn answers_queued(&self) -> usize {
        self.out.iter().filter(|r| r.uses_new_resource()).count()
    }

    /// Queues a replay of a remembered resource. A resource is answered at
    /// most once at a time, however often it is asked: if an answer is
    /// still queued for it that has not yet passed the PSN asked for, that
    /// answer covers the request; if it has, it restarts from that PSN
    /// (the requester missed what was sent).
    fn replay(&mut self, answer: Response) {
        let origin = answer.origin();
        match self.out.iter_mut().find(|r| r.origin() == origin) {
            Some(queued) => {
                let (Response::Read { psn: at, first, replay, .. }, Response::Read { psn: asked, .. }) =
                    (&mut *queued, &answer)
                else {
                    return; // an atomic's answer is still queued: it answers this too
                };
                if asked.diff(*at) < 0 {
                    // It goes on as the answer it replaces: a first answer
                    // restarted still holds its resource.
                    let replay = *replay;
                    *queued = answer;
                    if let Response::Read { replay: r, .. } = queued {
                        *r = replay;
                    }
                } else if asked == at {
                    // Asked from exactly where the answer is: it goes on
                    // from there as the response to that request, anew.
                    *first = true;
                }
            }
            None => self.out.push_back(answer),
        }
    }

    fn ack(&mut self, psn: Psn, syndrome: Syndrome) {
        let msn = self.msn;
        if syndrome.is_ack() {
            if let Some(Response::Ack { syndrome: s, .. }) = self.out.back() {
                if s.is_ack() {
                    self.out.pop_back(); // coalesce: the newer ACK covers it
                }
            }
        }
        self.out.push_back(Response::Ack { psn, syndrome, msn });
    }

    fn nak(&mut self, psn: Psn, code: NakCode) {
        self.ack(psn, Syndrome::Nak(code));
    }
}

/// What the responder needs from the endpoint.
pub(crate) struct RespCtx<'a> {
    pub mrs: &'a MemoryTable,
    pub cqs: &'a mut CqTable,
    pub srqs: &'a mut SrqTable,
    pub stats: &'a mut Stats,
    /// The network header of the packet (for the GRH area of UD receives).
    pub net: NetHeader<'a>,
    /// What a UD receive of this packet reports as its `sl` (see
    /// [`crate::wr::roce_packet_type`]).
    pub sl: u8,
}

/// Why a request is answered with a NAK (or, on UC/UD, silently dropped).
enum Fail {
    Nak(NakCode, Drop),
    Rnr,
    Drop(Drop),
}

/// What the responder may see and change of its QP, borrowed field by
/// field from it (`Qp::responder_parts`): its identity, attributes and
/// state, the receive queue, and the held-ACK timer. Not the send queue,
/// the requester or congestion control: what the responder needs of those
/// comes in as values (`conversing`) or goes out as outcomes
/// ([`FatalNak`], [`Responder::take_fatal`]).
pub(crate) struct RespQp<'a> {
    pub(crate) num: u32,
    pub(crate) qp_type: QpType,
    /// The QP's PD: RDMA targets are checked against it, and so are its
    /// own receive buffers (an SRQ's are checked against the SRQ's).
    pub(crate) pd: Pd,
    pub(crate) srq: Option<SrqId>,
    pub(crate) recv_cq: CqId,
    /// Only read: moving the QP to the error state is the QP's job.
    pub(crate) state: QpState,
    pub(crate) params: &'a QpParams,
    pub(crate) src_port: u16,
    pub(crate) ecn_capable: bool,
    pub(crate) rq: &'a mut VecDeque<RecvWr>,
    /// The responder arms and stops only [`Timer::HeldAck`].
    pub(crate) timers: &'a mut Timers,
}

impl RespQp<'_> {
    fn recv_completion(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode, byte_len: u32) -> WorkCompletion {
        WorkCompletion { byte_len, ..WorkCompletion::new(wr_id, status, opcode, self.num) }
    }

    /// Takes a receive WQE from the QP's receive queue or its SRQ, with
    /// the PD its buffers are checked against (the SRQ's, for an SRQ).
    fn take_recv(&mut self, ctx: &mut RespCtx<'_>) -> Option<(RecvWr, Pd)> {
        match self.srq {
            Some(srq) => ctx.srqs.take(srq, &mut ctx.cqs.pool.srq_finished),
            None => self.rq.pop_front().map(|r| (r, self.pd)),
        }
    }

    /// Keeps a finished receive's scatter list for the copies of new
    /// posts: in the pool it was copied from (for a receive taken from an
    /// SRQ, the SRQ table's, shared by every engine, which takes it at the
    /// engine's next take from an SRQ).
    fn recycle_recv(&self, ctx: &mut RespCtx<'_>, sges: Vec<Sge>) {
        match self.srq {
            Some(_) => ctx.cqs.pool.srq_finished.push(sges),
            None => ctx.cqs.pool.recycle(sges),
        }
    }

    /// The responder resources this QP advertises (`max_dest_rd_atomic`).
    fn rd_atomic_capacity(&self) -> usize {
        usize::from(self.params.max_dest_rd_atomic.max(1))
    }

    /// Checks an RDMA target: the QP must allow the access, and the key,
    /// PD, bounds and region access must allow it (a memory window's rkey:
    /// the window's, see [`MemoryTable::check_remote`]).
    fn check_rkey<'m>(
        &self,
        rkey: u32,
        va: u64,
        len: u64,
        needed: Access,
        ctx: &RespCtx<'m>,
    ) -> Result<(&'m crate::memory::MemoryRegion, usize), ()> {
        if !self.params.access.contains(needed) {
            tracing::debug!(qpn = self.num, ?needed, "QP access flags forbid this operation");
            return Err(());
        }
        ctx.mrs.check_remote(rkey, self.pd, self.num, va, len, needed).map_err(|e| {
            tracing::debug!(qpn = self.num, error = %e, "rkey check failed");
        })
    }
}

/// An RC request answered with a NAK that ends the connection (invalid
/// request, remote access or operational error). The QP moves to the
/// error state and flushes; the answers of earlier requests that carry a
/// result are kept ([`Responder::take_result_answers`]) and the NAK is
/// queued after them ([`Responder::queue_fatal_nak`]), as the flush drops
/// every other response queued before it.
#[must_use]
pub(crate) struct FatalNak {
    psn: Psn,
    code: NakCode,
}

/// How a lone positive ACK may be held back ([`Responder::transmit`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AckHold {
    /// The endpoint's ACK delay (zero: never hold).
    pub(crate) hold: core::time::Duration,
    /// Send a held ACK now.
    pub(crate) flush: bool,
    /// The QP's requester sent lately: only then is company expected soon.
    pub(crate) conversing: bool,
}

impl Responder {
    /// Takes the queued answers that carry a result (see
    /// [`Response::holds_rd_atomic`]) out of the queue, in order, before a
    /// fatal NAK's flush drops the queue ([`Responder::restore_answers`]).
    pub(crate) fn take_result_answers(&mut self) -> VecDeque<Response> {
        let mut kept = VecDeque::new();
        for r in self.out.drain(..) {
            if r.holds_rd_atomic() || matches!(r, Response::Empty { .. }) {
                kept.push_back(r);
            }
        }
        kept
    }

    /// The positive ACK owed for requests already executed, taken from the
    /// queued answers (the last covers every earlier one), for a QP its
    /// consumer moves to ERR (see [`crate::qp::Qp::flush_owing_ack`]).
    pub(crate) fn take_owed_ack(&mut self) -> Option<Response> {
        let i = self.out.iter().rposition(|r| matches!(r, Response::Ack { syndrome, .. } if syndrome.is_ack()))?;
        self.out.remove(i)
    }

    /// Puts answers taken by [`Responder::take_result_answers`] back, ahead
    /// of the fatal NAK queued next.
    pub(crate) fn restore_answers(&mut self, answers: VecDeque<Response>) {
        debug_assert!(self.out.is_empty(), "the flush left nothing queued");
        self.out = answers;
    }

    /// Queues the NAK of a [`FatalNak`], once the QP is in the error state
    /// and flushed.
    pub(crate) fn queue_fatal_nak(&mut self, f: FatalNak) {
        self.nak(f.psn, f.code);
    }

    /// Completes the receive requests with WR_FLUSH_ERR (the QP is in
    /// ERR) and drops every queued answer.
    pub(crate) fn flush(&mut self, qp: &mut RespQp<'_>, cqs: &mut CqTable) {
        qp.timers.stop(Timer::HeldAck);
        // A SEND in progress holds a receive WQE (its own or the SRQ's):
        // it is flushed with the rest, not lost.
        let taken = self.abandon_message();
        let own = if qp.srq.is_none() { qp.rq.drain(..).collect() } else { Vec::new() };
        for r in taken.into_iter().chain(own) {
            let wc = WorkCompletion::new(r.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, qp.num);
            cqs.push(qp.recv_cq, wc);
        }
    }

    /// Whether no response waits to go out.
    pub(crate) fn is_idle(&self) -> bool {
        self.out.is_empty()
    }

    /// Whether a READ response is next to go (the pacer gates it as data).
    pub(crate) fn read_first(&self) -> bool {
        matches!(self.out.front(), Some(Response::Read { .. }))
    }

    /// Whether a READ response ended with a NAK that ends the connection
    /// (see `check_read_source`); clears it.
    pub(crate) fn take_fatal(&mut self) -> bool {
        std::mem::take(&mut self.fatal)
    }

    /// Handles a request packet addressed to this QP.
    #[inline] // into `Qp::handle_request`: one call per packet, as before the view
    pub(crate) fn handle_request(
        &mut self,
        qp: &mut RespQp<'_>,
        p: &TransportPacket<&[u8]>,
        ctx: &mut RespCtx<'_>,
    ) -> Option<FatalNak> {
        if !qp.state.receives() {
            ctx.stats.drop(Drop::QpNotReady, qp.num);
            return None;
        }
        match qp.qp_type {
            QpType::Ud => self.receive_ud(qp, p, ctx),
            QpType::Uc => self.receive_uc(qp, p, ctx),
            QpType::Rc | QpType::XrcRecv => return self.receive_rc(qp, p, ctx),
            // No receive side: the endpoint never hands it a request.
            QpType::XrcSend => ctx.stats.drop(Drop::WrongTransport, qp.num),
        }
        None
    }

    #[inline] // the common case, into `handle_request`
    fn receive_rc(
        &mut self,
        qp: &mut RespQp<'_>,
        p: &TransportPacket<&[u8]>,
        ctx: &mut RespCtx<'_>,
    ) -> Option<FatalNak> {
        let bth = p.bth();
        let psn = bth.psn();
        tracing::trace!(qpn = qp.num, psn = psn.value(), epsn = self.epsn.value(), opcode = %bth.opcode(), "request");
        // 1. check_psn
        let d = psn.diff(self.epsn);
        if d > 0 {
            tracing::trace!(
                qpn = qp.num,
                psn = psn.value(),
                epsn = self.epsn.value(),
                "request ahead of the expected PSN"
            );
            ctx.stats.drop(Drop::PsnOutOfSequence, qp.num);
            if !self.nak_sent {
                self.nak_sent = true;
                ctx.stats.naks_sent += 1;
                let epsn = self.epsn;
                self.nak(epsn, NakCode::PsnSequenceError);
            }
            return None;
        }
        if d < 0 {
            self.duplicate_rc(qp, p, ctx);
            return None;
        }
        self.nak_sent = false;
        match self.execute(qp, p, ctx) {
            Ok(()) => {}
            Err(Fail::Rnr) => {
                ctx.stats.rnr_naks_sent += 1;
                ctx.stats.drop(Drop::NoReceiveWqe, qp.num);
                let timer = RnrTimer::new(qp.params.min_rnr_timer);
                self.ack(psn, Syndrome::RnrNak(timer));
                // The requester retries from this PSN after the timer: the
                // packets already in flight behind it are dropped silently,
                // as after a PSN sequence error NAK. Answered with a NAK of
                // their own, each RNR episode spent one of the requester's
                // transport retries (no progress refills it while the same
                // PSN is refused), and a receiver slow to post its receives
                // (qperf's rc_bw server on a busy host) made the sender fail
                // with RetryExcErr though its rnr_retry was 7 (forever).
                self.nak_sent = true;
            }
            Err(Fail::Nak(code, why)) => {
                ctx.stats.naks_sent += 1;
                ctx.stats.drop(why, qp.num);
                // An invalid request, a remote access error or an
                // operational error ends the connection on the responder
                // too, as in rxe: a peer cannot go on probing keys and
                // bounds for free.
                tracing::debug!(qpn = qp.num, ?code, "NAK: the responder QP moves to the error state");
                return Some(FatalNak { psn, code });
            }
            Err(Fail::Drop(why)) => ctx.stats.drop(why, qp.num),
        }
        None
    }

    /// A request with a PSN already seen: re-ACK a SEND or WRITE; answer
    /// a READ or atomic again only if it matches a remembered responder
    /// resource (a READ from memory, an atomic with its saved result, never
    /// run twice); drop any other.
    fn duplicate_rc(&mut self, qp: &mut RespQp<'_>, p: &TransportPacket<&[u8]>, ctx: &mut RespCtx<'_>) {
        ctx.stats.duplicates += 1;
        let psn = p.bth().psn();
        let mtu = u64::from(qp.params.mtu.bytes());
        let msn = self.msn;
        match p.info().operation {
            Operation::RdmaReadRequest => {
                let Some(reth) = p.reth() else { return };
                let r = RethRepr::parse(&reth);
                let len = u64::from(r.dma_len);
                let Some(res) = self.resources.find(psn).filter(|res| read_matches(res, psn, r.rkey, r.va, len, mtu))
                else {
                    ctx.stats.drop(Drop::DuplicateUnknown, qp.num);
                    return;
                };
                // The region may have gone or changed since the READ ran.
                if len > 0 && qp.check_rkey(r.rkey, r.va, len, Access::REMOTE_READ, ctx).is_err() {
                    ctx.stats.drop(Drop::RkeyViolation, qp.num);
                    return;
                }
                let first = true;
                let answer = Response::Read {
                    psn,
                    rkey: r.rkey,
                    va: r.va,
                    remaining: len,
                    first,
                    msn,
                    origin: res.first,
                    replay: true,
                };
                self.replay(answer);
            }
            Operation::CompareSwap | Operation::FetchAdd => match self.resources.find(psn) {
                Some(Resource { first, what: Executed::Atomic { orig }, .. }) if first == psn => {
                    self.replay(Response::Atomic { psn, orig, msn, origin: first, replay: true });
                }
                _ => ctx.stats.drop(Drop::DuplicateUnknown, qp.num),
            },
            // Answered again from the remembered resource, never executed
            // twice (rxe_resp.c: duplicate_request, oA19-14/15).
            Operation::Flush | Operation::AtomicWrite => match self.resources.find(psn) {
                Some(Resource { first, what: what @ (Executed::Flush | Executed::AtomicWrite), .. })
                    if first == psn && (what == Executed::Flush) == (p.info().operation == Operation::Flush) =>
                {
                    let rd_atomic = what == Executed::AtomicWrite;
                    self.replay(Response::Empty { psn, msn, origin: first, rd_atomic, replay: true });
                }
                _ => ctx.stats.drop(Drop::DuplicateUnknown, qp.num),
            },
            _ => {
                let last = self.epsn.sub(1);
                self.ack(last, Syndrome::ACK_UNLIMITED);
            }
        }
    }

    /// Steps 2 to 6 for an in-sequence RC or UC request.
    fn execute(&mut self, qp: &mut RespQp<'_>, p: &TransportPacket<&[u8]>, ctx: &mut RespCtx<'_>) -> Result<(), Fail> {
        let info = p.info();
        let bth = p.bth();
        let psn = bth.psn();
        let mtu = u64::from(qp.params.mtu.bytes());
        let payload = p.payload();
        let rc = qp.qp_type.reliable();

        // 2. check_op_sequence
        let continuing = !info.position.starts();
        let ok = match (&self.cur, info.operation) {
            (Some(InMessage::Send { .. }), Operation::Send) => continuing,
            (Some(InMessage::Write { .. }), Operation::RdmaWrite) => continuing,
            (None, _) => !continuing,
            _ => false,
        };
        if !ok {
            return Err(Fail::Nak(NakCode::InvalidRequest, Drop::OpcodeOutOfSequence));
        }
        // An XRC request naming no XRC SRQ of the target's domain (the
        // endpoint looked it up: `srq` is that SRQ, or none).
        if qp.qp_type == QpType::XrcRecv && qp.srq.is_none() {
            return Err(Fail::Nak(NakCode::InvalidRequest, Drop::XrcSrqInvalid));
        }

        // 4. check_length (packet against the MTU)
        let full_size_needed = matches!(info.position, Position::First | Position::Middle);
        if payload.len() as u64 > mtu || (full_size_needed && payload.len() as u64 != mtu) {
            return Err(Fail::Nak(NakCode::InvalidRequest, Drop::BadLength));
        }

        match info.operation {
            Operation::Send => {
                // 3. check_resources
                let (recv, pd, offset) = match self.cur.take() {
                    Some(InMessage::Send { recv, pd, offset }) => (recv, pd, offset),
                    _ => match qp.take_recv(ctx) {
                        Some((r, pd)) => (r, pd, 0),
                        None => return Err(if rc { Fail::Rnr } else { Fail::Drop(Drop::NoReceiveWqe) }),
                    },
                };
                let end = offset + payload.len() as u64;
                // A SEND with invalidate names a key this QP may invalidate,
                // checked before anything is placed: else NAK Invalid
                // Request and nothing changes (docs/memory-windows.md).
                if let Some(rkey) = p.ieth() {
                    if let Err(e) = ctx.mrs.check_invalidate(rkey, qp.pd, Some(qp.num)) {
                        tracing::debug!(qpn = qp.num, error = %e, "SEND with invalidate refused");
                        let wc = qp.recv_completion(recv.wr_id, WcStatus::RemInvReqErr, WcOpcode::Recv, 0);
                        ctx.cqs.push(qp.recv_cq, wc);
                        return Err(Fail::Nak(NakCode::InvalidRequest, Drop::InvalidateRefused));
                    }
                }
                if end > sge_len(&recv.sg_list) {
                    let wc = qp.recv_completion(recv.wr_id, WcStatus::LocLenErr, WcOpcode::Recv, 0);
                    ctx.cqs.push(qp.recv_cq, wc);
                    return Err(Fail::Nak(NakCode::InvalidRequest, Drop::ReceiveTooSmall));
                }
                // 6. execute
                if scatter(ctx.mrs, pd, &recv.sg_list, offset, payload).is_err() {
                    let wc = qp.recv_completion(recv.wr_id, WcStatus::LocProtErr, WcOpcode::Recv, 0);
                    ctx.cqs.push(qp.recv_cq, wc);
                    return Err(Fail::Nak(NakCode::RemoteOperationalError, Drop::ReceiveBufferFault));
                }
                if info.position.ends() {
                    let mut wc = qp.recv_completion(recv.wr_id, WcStatus::Success, WcOpcode::Recv, end as u32);
                    wc.solicited = p.bth().solicited();
                    if let Some(imm) = p.imm_dt() {
                        wc.imm_data = Some(imm);
                        wc.wc_flags |= wc_flags::WITH_IMM;
                    }
                    if let Some(rkey) = p.ieth() {
                        wc.invalidated_rkey = Some(rkey);
                        wc.wc_flags |= wc_flags::WITH_INV;
                        // Checked above; the endpoint applies it once this
                        // packet is handled (`Qp::take_invalidation`).
                        self.invalidate = Some(rkey);
                    }
                    ctx.cqs.push(qp.recv_cq, wc);
                    qp.recycle_recv(ctx, recv.sg_list);
                    self.msn = (self.msn + 1) & 0xff_ffff;
                } else {
                    self.cur = Some(InMessage::Send { recv, pd, offset: end });
                }
            }
            Operation::RdmaWrite => {
                let (rkey, va, remaining, total) = match self.cur.take() {
                    Some(InMessage::Write { rkey, va, remaining, total }) => (rkey, va, remaining, total),
                    _ => {
                        let r = RethRepr::parse(&p.reth().expect("WRITE FIRST/ONLY carry a RETH"));
                        let len = u64::from(r.dma_len);
                        if len > MAX_MESSAGE {
                            return Err(Fail::Nak(NakCode::InvalidRequest, Drop::BadLength));
                        }
                        // 5. check_rkey (a zero-length WRITE checks nothing, IBTA 9.4.4)
                        if len > 0 && qp.check_rkey(r.rkey, r.va, len, Access::REMOTE_WRITE, ctx).is_err() {
                            return Err(Fail::Nak(NakCode::RemoteAccessError, Drop::RkeyViolation));
                        }
                        (r.rkey, r.va, len, len)
                    }
                };
                let n = payload.len() as u64;
                if n > remaining || (info.position.ends() && n != remaining) {
                    return Err(Fail::Nak(NakCode::InvalidRequest, Drop::BadLength));
                }
                // A WRITE with immediate consumes a receive WQE at its last packet.
                let recv = if info.has_immediate() {
                    match qp.take_recv(ctx) {
                        Some((r, _)) => Some(r),
                        None => {
                            // The retry resends this packet: the last one of a
                            // longer WRITE continues the message, while an
                            // ONLY packet starts it again with its RETH.
                            if !info.position.starts() {
                                self.cur = Some(InMessage::Write { rkey, va, remaining, total });
                            }
                            return Err(if rc { Fail::Rnr } else { Fail::Drop(Drop::NoReceiveWqe) });
                        }
                    }
                } else {
                    None
                };
                if n > 0 {
                    let found = if crate::window::is_window_key(rkey) {
                        // A window may have been invalidated since the first packet.
                        ctx.mrs.check_remote(rkey, qp.pd, qp.num, va, n, Access::REMOTE_WRITE).ok()
                    } else {
                        match ctx.mrs.get(rkey) {
                            Some(r) => r.offset_of(va, n).map(|at| (r, at)),
                            None => None,
                        }
                    };
                    let Some((region, at)) = found else {
                        return Err(Fail::Nak(NakCode::RemoteAccessError, Drop::RkeyViolation));
                    };
                    if region.memory.try_write(at, payload).is_err() {
                        // An on-demand page that is not there (docs/odp.md).
                        tracing::debug!(qpn = qp.num, rkey, va, "WRITE: on-demand page not mapped or not writable");
                        return Err(Fail::Nak(NakCode::RemoteAccessError, Drop::PageFault));
                    }
                }
                if info.position.ends() {
                    if let Some(recv) = recv {
                        let mut wc =
                            qp.recv_completion(recv.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm, total as u32);
                        wc.imm_data = p.imm_dt();
                        wc.wc_flags |= wc_flags::WITH_IMM;
                        wc.solicited = p.bth().solicited();
                        ctx.cqs.push(qp.recv_cq, wc);
                        qp.recycle_recv(ctx, recv.sg_list);
                    }
                    self.msn = (self.msn + 1) & 0xff_ffff;
                } else {
                    self.cur = Some(InMessage::Write { rkey, va: va + n, remaining: remaining - n, total });
                }
            }
            Operation::RdmaReadRequest if rc => {
                let r = RethRepr::parse(&p.reth().expect("READ carries a RETH"));
                let len = u64::from(r.dma_len);
                if len > MAX_MESSAGE {
                    return Err(Fail::Nak(NakCode::InvalidRequest, Drop::BadLength));
                }
                self.check_rd_atomic_limit(qp)?;
                if len > 0 && qp.check_rkey(r.rkey, r.va, len, Access::REMOTE_READ, ctx).is_err() {
                    return Err(Fail::Nak(NakCode::RemoteAccessError, Drop::RkeyViolation));
                }
                self.msn = (self.msn + 1) & 0xff_ffff;
                let msn = self.msn;
                let npsn = packets_for(len, mtu as u32);
                let read = Executed::Read { rkey: r.rkey, va: r.va, len };
                self.resources.remember(Resource { first: psn, npsn, what: read }, qp.rd_atomic_capacity());
                self.out.push_back(Response::Read {
                    psn,
                    rkey: r.rkey,
                    va: r.va,
                    remaining: len,
                    first: true,
                    msn,
                    origin: psn,
                    replay: false,
                });
                self.epsn = psn.add(npsn);
                return Ok(());
            }
            Operation::CompareSwap | Operation::FetchAdd if rc => {
                let a = p.atomic_eth().expect("atomics carry an AtomicETH");
                self.check_rd_atomic_limit(qp)?;
                if a.va() % 8 != 0 {
                    return Err(Fail::Nak(NakCode::InvalidRequest, Drop::MisalignedAtomic));
                }
                let Ok((region, at)) = qp.check_rkey(a.rkey(), a.va(), 8, Access::REMOTE_ATOMIC, ctx) else {
                    return Err(Fail::Nak(NakCode::RemoteAccessError, Drop::RkeyViolation));
                };
                let (swap_add, compare) = (a.swap_add(), a.compare());
                let cas = info.operation == Operation::CompareSwap;
                let orig = region.memory.try_atomic(at, |v| {
                    if cas {
                        if v == compare {
                            swap_add
                        } else {
                            v
                        }
                    } else {
                        v.wrapping_add(swap_add)
                    }
                });
                let Ok(orig) = orig else {
                    tracing::debug!(qpn = qp.num, va = a.va(), "atomic: on-demand page not mapped or not writable");
                    return Err(Fail::Nak(NakCode::RemoteAccessError, Drop::PageFault));
                };
                let atomic = Resource { first: psn, npsn: 1, what: Executed::Atomic { orig } };
                self.resources.remember(atomic, qp.rd_atomic_capacity());
                self.msn = (self.msn + 1) & 0xff_ffff;
                let msn = self.msn;
                self.out.push_back(Response::Atomic { psn, orig, msn, origin: psn, replay: false });
                self.epsn = psn.next();
                return Ok(());
            }
            Operation::Flush if rc => return self.execute_flush(qp, p, ctx),
            Operation::AtomicWrite if rc => return self.execute_atomic_write(qp, p, ctx),
            _ => return Err(Fail::Nak(NakCode::InvalidRequest, Drop::UnsupportedOpcode)),
        }
        self.epsn = psn.next();
        if rc && bth.ack_req() {
            self.ack(psn, Syndrome::ACK_UNLIMITED);
        }
        Ok(())
    }

    /// A FLUSH (IBTA 1.5 annex A19), checked as rxe checks it
    /// (rxe_resp.c: check_qp_attr_access, check_rkey, process_flush):
    /// - the QP must allow each placement type asked for
    ///   (`IBV_ACCESS_FLUSH_GLOBAL` / `_PERSISTENT` in its access flags),
    ///   else NAK Invalid Request;
    /// - a reserved selectivity level (2, 3) is an invalid request (rxe
    ///   range-checks it and then flushes the whole region);
    /// - the rkey's region, in the QP's PD, must allow the same placement
    ///   types, and hold the range (for the range level; the region level
    ///   names the whole region and its RETH range is not checked), else
    ///   NAK Remote Access Error.
    ///
    /// Then every earlier write to the region is made visible
    /// ([`RegionMemory::flush`]) and the FLUSH is answered with an RDMA
    /// READ RESPONSE ONLY without payload. It is remembered as a responder
    /// resource (a duplicate is answered again) but does not count
    /// against `max_dest_rd_atomic`, as rxe's requester does not count it.
    fn execute_flush(
        &mut self,
        qp: &mut RespQp<'_>,
        p: &TransportPacket<&[u8]>,
        ctx: &mut RespCtx<'_>,
    ) -> Result<(), Fail> {
        let psn = p.bth().psn();
        let (Some(feth), Some(reth)) = (p.feth(), p.reth()) else {
            return Err(Fail::Nak(NakCode::InvalidRequest, Drop::Malformed));
        };
        let (placement, selectivity) = (feth.placement(), feth.selectivity());
        let r = RethRepr::parse(&reth);
        let mut needed = Access::NONE;
        if placement & rdma_wire::feth::PLACEMENT_GLOBAL != 0 {
            needed = needed | Access::FLUSH_GLOBAL;
        }
        if placement & rdma_wire::feth::PLACEMENT_PERSISTENT != 0 {
            needed = needed | Access::FLUSH_PERSISTENT;
        }
        if !qp.params.access.contains(needed) {
            tracing::debug!(qpn = qp.num, placement, "FLUSH: the QP's access flags forbid this placement type");
            return Err(Fail::Nak(NakCode::InvalidRequest, Drop::UnsupportedOpcode));
        }
        if selectivity > rdma_wire::feth::SELECTIVITY_MR {
            return Err(Fail::Nak(NakCode::InvalidRequest, Drop::Malformed));
        }
        let len = u64::from(r.dma_len);
        if len > MAX_MESSAGE {
            return Err(Fail::Nak(NakCode::InvalidRequest, Drop::BadLength));
        }
        let whole = selectivity == rdma_wire::feth::SELECTIVITY_MR;
        let checked = match ctx.mrs.get(r.rkey) {
            Some(region) if whole => ctx.mrs.check(r.rkey, qp.pd, region.va, region.len, needed),
            // Through a window, the whole of the window (not of its region).
            _ if crate::window::is_window_key(r.rkey) => {
                let (va, len) = match ctx.mrs.windows.get(r.rkey).and_then(|w| w.binding) {
                    Some(b) if whole => (b.addr, b.len),
                    _ => (r.va, len),
                };
                ctx.mrs.check_remote(r.rkey, qp.pd, qp.num, va, len, needed)
            }
            _ => ctx.mrs.check(r.rkey, qp.pd, r.va, len, needed),
        };
        let (region, at) = match checked {
            Ok(found) => found,
            Err(e) => {
                tracing::debug!(qpn = qp.num, error = %e, "FLUSH: rkey check failed");
                return Err(Fail::Nak(NakCode::RemoteAccessError, Drop::RkeyViolation));
            }
        };
        if selectivity == rdma_wire::feth::SELECTIVITY_MR {
            // The whole region (for implicit ODP, the address space): no
            // page is named, none is checked.
            region.memory.flush();
        } else if region.memory.try_flush(at, len as usize).is_err() {
            tracing::debug!(qpn = qp.num, va = r.va, len, "FLUSH: on-demand range not mapped");
            return Err(Fail::Nak(NakCode::RemoteAccessError, Drop::PageFault));
        }
        let flushed = Resource { first: psn, npsn: 1, what: Executed::Flush };
        self.resources.remember(flushed, qp.rd_atomic_capacity());
        self.msn = (self.msn + 1) & 0xff_ffff;
        let msn = self.msn;
        self.out.push_back(Response::Empty { psn, msn, origin: psn, rd_atomic: false, replay: false });
        self.epsn = psn.next();
        Ok(())
    }

    /// An ATOMIC WRITE (IBTA 1.5 annex A19), checked in rxe's order
    /// (rxe_resp.c, rxe_mr.c: rxe_mr_do_atomic_write):
    /// - the QP must allow remote writes, else NAK Invalid Request;
    /// - it takes a responder resource (`max_dest_rd_atomic`), else NAK
    ///   Invalid Request;
    /// - the rkey's region, in the QP's PD, must allow remote writes and
    ///   hold the RETH's range, else NAK Remote Access Error;
    /// - the RETH's length and the payload must both be 8 bytes, and the
    ///   address 8-byte aligned, else NAK Invalid Request.
    ///
    /// Then the 8 payload bytes are stored as one ([`RegionMemory::atomic_write`])
    /// and the request is answered with an RDMA READ RESPONSE ONLY without
    /// payload. Nothing is written when any check fails.
    fn execute_atomic_write(
        &mut self,
        qp: &mut RespQp<'_>,
        p: &TransportPacket<&[u8]>,
        ctx: &mut RespCtx<'_>,
    ) -> Result<(), Fail> {
        let psn = p.bth().psn();
        let Some(reth) = p.reth() else { return Err(Fail::Nak(NakCode::InvalidRequest, Drop::Malformed)) };
        let r = RethRepr::parse(&reth);
        if !qp.params.access.contains(Access::REMOTE_WRITE) {
            tracing::debug!(qpn = qp.num, "ATOMIC WRITE: the QP's access flags forbid remote writes");
            return Err(Fail::Nak(NakCode::InvalidRequest, Drop::UnsupportedOpcode));
        }
        self.check_rd_atomic_limit(qp)?;
        let len = u64::from(r.dma_len);
        if len > MAX_MESSAGE {
            return Err(Fail::Nak(NakCode::InvalidRequest, Drop::BadLength));
        }
        let (region, at) = match ctx.mrs.check_remote(r.rkey, qp.pd, qp.num, r.va, len, Access::REMOTE_WRITE) {
            Ok(found) => found,
            Err(e) => {
                tracing::debug!(qpn = qp.num, error = %e, "ATOMIC WRITE: rkey check failed");
                return Err(Fail::Nak(NakCode::RemoteAccessError, Drop::RkeyViolation));
            }
        };
        let Ok(value) = <[u8; 8]>::try_from(p.payload()) else {
            return Err(Fail::Nak(NakCode::InvalidRequest, Drop::BadLength));
        };
        if len != 8 {
            return Err(Fail::Nak(NakCode::InvalidRequest, Drop::BadLength));
        }
        if r.va % 8 != 0 {
            return Err(Fail::Nak(NakCode::InvalidRequest, Drop::MisalignedAtomic));
        }
        if region.memory.try_atomic_write(at, value).is_err() {
            tracing::debug!(qpn = qp.num, va = r.va, "ATOMIC WRITE: on-demand page not mapped or not writable");
            return Err(Fail::Nak(NakCode::RemoteAccessError, Drop::PageFault));
        }
        let written = Resource { first: psn, npsn: 1, what: Executed::AtomicWrite };
        self.resources.remember(written, qp.rd_atomic_capacity());
        self.msn = (self.msn + 1) & 0xff_ffff;
        let msn = self.msn;
        self.out.push_back(Response::Empty { psn, msn, origin: psn, rd_atomic: true, replay: false });
        self.epsn = psn.next();
        Ok(())
    }

    /// A new READ or atomic needs a free responder resource. A requester
    /// that honours the advertised `max_dest_rd_atomic` never has more
    /// answers outstanding than that, and every answer still queued here is
    /// outstanding at the requester; so one past the limit is a protocol
    /// violation, answered with NAK Invalid Request as IBTA allows (rxe
    /// instead serves it and leaves the limit to the requester). This
    /// bounds the answers one QP can have queued.
    fn check_rd_atomic_limit(&self, qp: &RespQp<'_>) -> Result<(), Fail> {
        if self.answers_queued() >= qp.rd_atomic_capacity() {
            tracing::debug!(qpn = qp.num, limit = qp.rd_atomic_capacity(), "READ or atomic past max_dest_rd_atomic");
            return Err(Fail::Nak(NakCode::InvalidRequest, Drop::TooManyReads));
        }
        Ok(())
    }

    /// UC: no ACKs, no NAKs, no retries. A gap drops the rest of the message
    /// in progress; its receive WQE stays for the next message.
    fn receive_uc(&mut self, qp: &mut RespQp<'_>, p: &TransportPacket<&[u8]>, ctx: &mut RespCtx<'_>) {
        let psn = p.bth().psn();
        if psn != self.epsn {
            ctx.stats.drop(Drop::PsnOutOfSequence, qp.num);
            if let Some(InMessage::Send { recv, .. }) = self.cur.take() {
                match qp.srq {
                    Some(srq) => ctx.srqs.give_back(srq, recv),
                    None => qp.rq.push_front(recv),
                }
            }
            self.uc_resync = true;
        }
        self.epsn = psn.next();
        if self.uc_resync {
            if !p.info().position.starts() {
                ctx.stats.drop(Drop::UcMessageDropped, qp.num);
                return;
            }
            self.uc_resync = false;
        }
        if let Err(Fail::Nak(_, why) | Fail::Drop(why)) = self.execute(qp, p, ctx) {
            ctx.stats.drop(why, qp.num);
            self.cur = None;
            self.uc_resync = true;
        }
        self.epsn = psn.next();
    }

    /// UD: one packet per message, checked against the QP's Q_Key. The
    /// first 40 bytes of the receive buffer get the GRH (for IPv4, the
    /// IPv4 header in its last 20 bytes), as libibverbs applications expect.
    fn receive_ud(&mut self, qp: &mut RespQp<'_>, p: &TransportPacket<&[u8]>, ctx: &mut RespCtx<'_>) {
        let Some(deth) = p.deth() else { return };
        if deth.qkey() != qp.params.qkey {
            ctx.stats.drop(Drop::QkeyMismatch, qp.num);
            return;
        }
        let Some((recv, pd)) = qp.take_recv(ctx) else {
            ctx.stats.drop(Drop::NoReceiveWqe, qp.num);
            return;
        };
        let payload = p.payload();
        let total = 40 + payload.len() as u64;
        if total > sge_len(&recv.sg_list) {
            let wc = qp.recv_completion(recv.wr_id, WcStatus::LocLenErr, WcOpcode::Recv, 0);
            ctx.cqs.push(qp.recv_cq, wc);
            ctx.stats.drop(Drop::ReceiveTooSmall, qp.num);
            return;
        }
        let grh = ctx.net.grh_area();
        let ok = scatter(ctx.mrs, pd, &recv.sg_list, 0, &grh).is_ok()
            && scatter(ctx.mrs, pd, &recv.sg_list, 40, payload).is_ok();
        let status = if ok { WcStatus::Success } else { WcStatus::LocProtErr };
        let mut wc = qp.recv_completion(recv.wr_id, status, WcOpcode::Recv, if ok { total as u32 } else { 0 });
        wc.src_qp = deth.src_qp();
        wc.sl = ctx.sl;
        wc.solicited = p.bth().solicited();
        wc.wc_flags |= wc_flags::GRH;
        if let Some(imm) = p.imm_dt() {
            wc.imm_data = Some(imm);
            wc.wc_flags |= wc_flags::WITH_IMM;
        }
        ctx.cqs.push(qp.recv_cq, wc);
        qp.recycle_recv(ctx, recv.sg_list);
    }

    /// Writes the next response packet into `buf`, if one is waiting.
    ///
    /// A lone positive ACK is held for up to `hold` (since it was first
    /// held), so that it leaves with the next packet this endpoint sends
    /// anyway (`flush`) or covers more requests: a ping-pong's ACK then
    /// follows the reply instead of going ahead of it.
    pub(crate) fn transmit(
        &mut self,
        qp: &mut RespQp<'_>,
        now: crate::Instant,
        AckHold { hold, flush, conversing }: AckHold,
        mrs: &MemoryTable,
        framer: &Framer,
        buf: &mut [u8],
    ) -> Option<(usize, core::net::IpAddr, Option<PayloadRef>)> {
        let av = qp.params.av?;
        let lone_ack = self.out.len() == 1
            && matches!(self.out.front(), Some(Response::Ack { syndrome, .. }) if syndrome.is_ack());
        // Only a QP that is itself sending can expect company soon; the
        // passive target of a one-way stream ACKs at once, so that a
        // requester waiting for each completion never waits for `hold`.
        // Whether to hold is decided when the ACK is first held back.
        if lone_ack && !hold.is_zero() && !flush {
            if !qp.timers.is_armed(Timer::HeldAck) && conversing {
                qp.timers.set(Timer::HeldAck, now + hold);
            }
            if qp.timers.is_running(Timer::HeldAck, now) {
                return None;
            }
        }
        let mtu = u64::from(qp.params.mtu.bytes());
        let checked = self.check_read_source(qp, mrs, mtu);
        let resp = self.out.front_mut()?;
        let mut bth =
            BthRepr { pkey: qp.params.pkey, ..BthRepr::new(Opcode::RC_ACKNOWLEDGE, qp.params.dest_qp, Psn::new(0)) };
        let ack = |syndrome, msn| Some(AethRepr { syndrome, msn });
        // The MSN of a READ response, should its bytes fault.
        let mut read_msn = 0;
        let (mut tr, payload_src, done) = match resp {
            Response::Ack { psn, syndrome, msn } => {
                bth.psn = *psn;
                let mut t = TransportRepr::new(bth);
                t.aeth = ack(*syndrome, *msn);
                (t, None, true)
            }
            Response::Atomic { psn, orig, msn, .. } => {
                bth.psn = *psn;
                bth.opcode = Opcode::RC_ATOMIC_ACKNOWLEDGE;
                let mut t = TransportRepr::new(bth);
                t.aeth = ack(Syndrome::ACK_UNLIMITED, *msn);
                t.atomic_ack_eth = Some(AtomicAckEthRepr { orig: *orig });
                (t, None, true)
            }
            Response::Empty { psn, msn, .. } => {
                bth.psn = *psn;
                bth.opcode = Opcode::RC_RDMA_READ_RESPONSE_ONLY;
                let mut t = TransportRepr::new(bth);
                t.aeth = ack(Syndrome::ACK_UNLIMITED, *msn);
                (t, None, true)
            }
            Response::Read { psn, rkey, va, remaining, first, msn, .. } => {
                let n = (*remaining).min(mtu);
                let last = n == *remaining;
                bth.psn = *psn;
                bth.opcode = match (*first, last) {
                    (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                    (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                    (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                };
                let mut t = TransportRepr::new(bth);
                if *first || last {
                    t.aeth = ack(Syndrome::ACK_UNLIMITED, *msn);
                }
                let src = (*rkey, *va, n as usize);
                read_msn = *msn;
                *psn = psn.next();
                *va += n;
                *remaining -= n;
                *first = false;
                (t, Some(src), last)
            }
        };
        if qp.qp_type == QpType::XrcRecv {
            // The XRC transport's responses: the RC codes under XRC's prefix.
            tr.bth.opcode = tr.bth.opcode.on(Transport::Xrc);
        }
        // Where a READ response's bytes are, as `check_read_source` found
        // them (the region still allows it). They travel by reference when
        // the framer takes them so.
        // READ responses are data (ECN-capable); ACKs keep the traffic class.
        let av = if payload_src.is_some() { av.for_data(qp.ecn_capable) } else { av };
        let n = payload_src.map_or(0, |s| s.2);
        let src = payload_src.filter(|s| s.2 > 0).and(checked);
        if let Some((memory, at)) = src.filter(|(m, _)| framer.takes_by_ref(n) && !m.is_on_demand()) {
            let (len, p) = framer.frame_by_ref(buf, &av, qp.src_port, &tr, (memory.clone(), at, n));
            self.responded(qp, done);
            return Some((len, av.dest, Some(p)));
        }
        let framed = framer.frame(buf, &av, qp.src_port, &tr, n, |dst| match src {
            Some((memory, at)) => memory.try_read(at, dst),
            None => Ok(()),
        });
        match framed {
            Ok(len) => {
                self.responded(qp, done);
                Some((len, av.dest, None))
            }
            Err(e) => {
                // An on-demand page gone since the READ was checked: the
                // response becomes NAK Remote Access Error for this PSN, as
                // for a region gone (`check_read_source`), sent now.
                tracing::debug!(qpn = qp.num, error = %e, "READ response: on-demand page not mapped");
                self.send_read_fault(qp, framer, buf, tr.bth.psn, read_msn)
            }
        }
    }

    /// The READ response packet for `psn` could not read its on-demand
    /// bytes: it goes out as NAK Remote Access Error instead, now, and
    /// the QP goes to the error state (kept apart, and cold, so that the
    /// transmit path of ordinary regions stays as it was).
    #[cold]
    #[inline(never)]
    fn send_read_fault(
        &mut self,
        qp: &mut RespQp<'_>,
        framer: &Framer,
        buf: &mut [u8],
        psn: Psn,
        msn: u32,
    ) -> Option<(usize, core::net::IpAddr, Option<PayloadRef>)> {
        self.fail_read(psn, msn);
        let av = qp.params.av?;
        let ack = if qp.qp_type == QpType::XrcRecv { Opcode::XRC_ACKNOWLEDGE } else { Opcode::RC_ACKNOWLEDGE };
        let bth = BthRepr { pkey: qp.params.pkey, ..BthRepr::new(ack, qp.params.dest_qp, psn) };
        let mut t = TransportRepr::new(bth);
        t.aeth = Some(AethRepr { syndrome: Syndrome::Nak(NakCode::RemoteAccessError), msn });
        let len = framer.frame(buf, &av, qp.src_port, &t, 0, |_| Ok::<(), ()>(())).ok()?;
        self.responded(qp, true);
        Some((len, av.dest, None))
    }

    /// The front READ response cannot go on: it becomes NAK Remote Access
    /// Error for `psn` and the QP goes to the error state once it is sent.
    fn fail_read(&mut self, psn: Psn, msn: u32) {
        self.out.clear();
        self.out.push_back(Response::Ack { psn, syndrome: Syndrome::Nak(NakCode::RemoteAccessError), msn });
        self.fatal = true;
    }

    /// Looks the region of the front READ response up again before its next
    /// packet: the application may have deregistered it (or registered
    /// another region under a new key) since the READ was checked. Rather
    /// than send bytes it may no longer read, or zeros under a success
    /// status, the response becomes a NAK Remote Access Error for the PSN
    /// it had reached, and the QP goes to the error state once it is sent.
    /// Returns where the packet's bytes are (region and offset), once
    /// checked, so that they are looked up once per packet.
    fn check_read_source<'m>(
        &mut self,
        qp: &RespQp<'_>,
        mrs: &'m MemoryTable,
        mtu: u64,
    ) -> Option<(&'m RegionMemory, usize)> {
        let pd = qp.pd;
        let allowed = qp.params.access.contains(Access::REMOTE_READ);
        let Some(Response::Read { psn, rkey, va, remaining, msn, .. }) = self.out.front() else { return None };
        let n = (*remaining).min(mtu);
        if n == 0 {
            return None;
        }
        if allowed {
            if let Ok((r, at)) = mrs.check_remote(*rkey, pd, qp.num, *va, n, Access::REMOTE_READ) {
                return Some((&r.memory, at));
            }
        }
        tracing::debug!(qpn = qp.num, rkey, "READ response: the region is gone or no longer readable");
        let (psn, msn) = (*psn, *msn);
        self.fail_read(psn, msn);
        None
    }

    /// The front response has sent a packet: `done` if it was its last.
    fn responded(&mut self, qp: &mut RespQp<'_>, done: bool) {
        if done {
            self.out.pop_front();
            if self.out.is_empty() {
                qp.timers.stop(Timer::HeldAck);
            }
        }
    }
}
