//! The endpoint: one soft RDMA device's worth of state (memory regions,
//! completion queues, shared receive queues, queue pairs) behind a
//! sans-IO interface, in the style of quinn-proto:
//!
//! - [`Endpoint::handle_packet`]: a received IP packet (RoCE v2);
//! - [`Endpoint::poll_transmit`]: the next packet to send, written into
//!   the caller's buffer;
//! - [`Endpoint::poll_timeout`] / [`Endpoint::handle_timeout`]: the next
//!   deadline, and what to do when it passes;
//! - [`Endpoint::poll_cq`]: work completions.
//!
//! The endpoint never reads a clock or touches a socket; drivers (UDP,
//! raw packets, the simulator in [`crate::sim`]) are loops around it.

pub use crate::cq::CqTable;
use crate::error::VerbsError;
pub use crate::events::AsyncEvent;
use crate::framing::{Framer, PayloadRef};
use crate::memory::{Access, MemoryRegion, MemoryTable, Pd, RegionMemory};
use crate::qp::{CqId, Qp, QpAttr, QpInitAttr, QpParams, QpState, QpType, SrqId, ECN_CE, ECN_MASK};
use crate::requester::{ReqOutcome, SendWqe};
use crate::responder::RespCtx;
use crate::rng::Rng;
pub use crate::srq::SrqTable;
use crate::stats::QpStats;
pub use crate::stats::{Drop, Stats};
use crate::time::Instant;
use crate::wr::{RecvWr, SendOp, SendWr, WorkCompletion};
use core::net::IpAddr;
use core::time::Duration;
use rdma_wire::{IdentRecovery, Operation, RoceV2Packet, Transport};
use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};

/// A packet [`Endpoint::poll_transmit`] wrote.
#[derive(Debug, Clone)]
pub struct Transmit {
    /// Bytes written, IP header through ICRC; without the payload when
    /// `payload` is set.
    pub len: usize,
    pub dest: IpAddr,
    pub src_port: u16,
    /// A held ACK released by the packets sent before it in this round
    /// (see [`Endpoint::set_ack_delay`]). [`Endpoint::poll_transmit_fresh`]
    /// stops short of these, so that a driver can send the packets before
    /// them first.
    pub released_ack: bool,
    /// The payload, when the packet carries it by reference (see
    /// [`Endpoint::set_payload_by_reference`]): the buffer then holds the
    /// headers and room for pad and ICRC, and the driver sends the
    /// payload from the region and seals the packet.
    pub payload: Option<PayloadRef>,
}

impl Transmit {
    /// Bytes the packet takes on the wire from the IP header on.
    pub fn wire_len(&self) -> usize {
        self.len + self.payload.as_ref().map_or(0, |p| p.len)
    }
}

/// Packets a QP sends in a row before the next QP's turn: runs long enough
/// for a driver to hand the kernel as one segmented send (UDP GSO), short
/// enough that no QP waits long.
pub const TX_BURST: u32 = 16;

/// The default partition, with full membership.
pub const DEFAULT_PKEY: u16 = 0xffff;
/// Entries a port's P_Key table can hold.
pub const MAX_PKEYS: usize = 16;

/// The lowest QPN a created QP gets (below are the special QPs).
const FIRST_QPN: u32 = 0x11;
/// The first QPN is drawn from this many numbers above [`FIRST_QPN`].
const QPN_START_SPREAD: u32 = 1 << 22;

/// A buffer this large holds any packet the engine writes (4 KiB MTU).
pub const MAX_PACKET: usize = 40 + 8 + 12 + 28 + 4096 + 4;

/// One soft RDMA device.
#[derive(Debug)]
pub struct Endpoint {
    framer: Framer,
    mrs: MemoryTable,
    next_pd: u32,
    qps: BTreeMap<u32, Qp>,
    next_qpn: u32,
    cqs: CqTable,
    srqs: SrqTable,
    stats: Stats,
    /// Round-robin cursor over QPs for transmission.
    rr: u32,
    /// Packets the QP at `rr` has sent in its current turn.
    burst: u32,
    /// How long a lone ACK may wait for other packets to leave with.
    ack_delay: Duration,
    /// `poll_transmit` has handed out a packet since it last returned `None`.
    sending: bool,
    /// The last `poll_transmit_fresh` found no new packet on any QP.
    fresh_done: bool,
    /// The last round of `poll_transmit` found nothing to send and nothing
    /// has happened since that could change it (see [`Endpoint::touch`]):
    /// an idle poll then costs a comparison, not a walk over every QP.
    tx_idle: bool,
    /// [`Endpoint::poll_timeout`]'s answer while nothing has changed.
    deadline: Cell<Option<Option<Instant>>>,
    /// Held ACKs leave in the next round of `poll_transmit` ([`Endpoint::release_acks`]).
    release: bool,
    events: VecDeque<AsyncEvent>,
    ident_recovery: Option<IdentRecovery>,
    /// The port's P_Key table (`ibv_query_pkey`); a QP's `pkey_index` picks one.
    pkeys: Vec<u16>,
    /// New QPs send data packets ECN-capable ([`Endpoint::set_ecn_capable`]).
    ecn_capable: bool,
}

impl Endpoint {
    /// A device bound to `local`, its RoCE v2 GID, whose QP numbers and
    /// memory keys are drawn from the operating system's randomness.
    pub fn new(local: IpAddr) -> Endpoint {
        Endpoint::with_rng(local, Rng::from_os())
    }

    /// A device whose QP numbers and keys follow from `seed`: the same
    /// seed gives the same numbers, for simulations that must reproduce.
    pub fn with_seed(local: IpAddr, seed: u64) -> Endpoint {
        Endpoint::with_rng(local, Rng::new(seed))
    }

    fn with_rng(local: IpAddr, mut rng: Rng) -> Endpoint {
        // QPs 0 and 1 are the SMI and GSI, and rxe numbers from 0x11; the
        // first QPN is drawn at random above that, so that a blind peer
        // cannot guess it (defence in depth, like the keys').
        let next_qpn = FIRST_QPN + rng.below(u64::from(QPN_START_SPREAD)) as u32;
        Endpoint {
            framer: Framer { local, by_ref: false },
            mrs: MemoryTable::with_rng(rng),
            next_pd: 1,
            qps: BTreeMap::new(),
            next_qpn,
            cqs: CqTable::default(),
            srqs: SrqTable::default(),
            stats: Stats::default(),
            rr: 0,
            burst: 0,
            ack_delay: Duration::ZERO,
            sending: false,
            fresh_done: false,
            tx_idle: false,
            deadline: Cell::new(None),
            release: false,
            events: VecDeque::new(),
            ident_recovery: None,
            pkeys: vec![DEFAULT_PKEY],
            ecn_capable: true,
        }
    }

    /// Sets the port's P_Key table (at most [`MAX_PKEYS`] entries, none 0
    /// or 0x8000, the invalid keys). Bit 15 of each key says whether the
    /// port is a full member of that partition; QPs pick one with their
    /// `pkey_index` when they next move to INIT.
    pub fn set_pkey_table(&mut self, pkeys: &[u16]) -> Result<(), VerbsError> {
        if pkeys.is_empty() || pkeys.len() > MAX_PKEYS || pkeys.iter().any(|&k| k & 0x7fff == 0) {
            return Err(VerbsError::InvalidAttribute {
                qpn: 0,
                attr: "P_Key table (1 to 16 keys, none 0x0000 or 0x8000)",
                value: pkeys.len() as u64,
            });
        }
        self.pkeys = pkeys.to_vec();
        Ok(())
    }

    /// `ibv_query_pkey`.
    pub fn query_pkey(&self, index: u16) -> Option<u16> {
        self.pkeys.get(usize::from(index)).copied()
    }

    /// Tells the endpoint that the IPv4 Identification of received packets
    /// is unknown (a UDP socket does not show it) and that handle_packet
    /// gets it as 0: the ICRC check then solves for the value instead.
    pub fn set_ipv4_ident_unknown(&mut self, unknown: bool) {
        self.ident_recovery = unknown.then(IdentRecovery::new);
    }

    /// Whether data packets (requests and READ responses) leave
    /// ECN-capable, ECT(0), when their QP's traffic class has ECN bits 00
    /// (see [`crate::AddressVector::for_data`]); ACKs and NAKs never are.
    /// On by default. Applies to every QP, existing and new.
    pub fn set_ecn_capable(&mut self, on: bool) {
        self.ecn_capable = on;
        for qp in self.qps.values_mut() {
            qp.ecn_capable = on;
        }
    }

    /// The UDP source port a QP sends from (rxe's hash of the QPN by default).
    pub fn qp_src_port(&self, qpn: u32) -> Result<u16, VerbsError> {
        Ok(self.qps.get(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?.src_port)
    }

    /// Changes a QP's UDP source port, for a driver that could not bind the
    /// default one. The ICRC covers the port, so the driver must send from it.
    pub fn set_qp_src_port(&mut self, qpn: u32, port: u16) -> Result<(), VerbsError> {
        self.touch();
        self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?.src_port = port;
        Ok(())
    }

    pub fn local_addr(&self) -> IpAddr {
        self.framer.local
    }

    pub fn stats(&self) -> Stats {
        let mut s = self.stats.clone();
        s.cq_overruns = self.cqs.overruns();
        s.completions = self.cqs.delivered();
        s
    }

    /// The PSN the responder of `qpn` expects next: for the engine fuzz
    /// target's oracles, which must tell in-sequence requests from duplicates.
    #[doc(hidden)]
    pub fn expected_psn(&self, qpn: u32) -> Option<u32> {
        self.qps.get(&qpn).map(|q| q.resp.epsn.value())
    }

    /// Responses the responder of `qpn` has queued and not yet sent: for
    /// the engine fuzz target's bound on queues.
    #[doc(hidden)]
    pub fn queued_responses(&self, qpn: u32) -> usize {
        self.qps.get(&qpn).map_or(0, |q| q.resp.out.len())
    }

    /// Work completions delivered so far (cheap: no copy of the counters).
    pub fn completions_delivered(&self) -> u64 {
        self.cqs.delivered()
    }

    pub fn alloc_pd(&mut self) -> Pd {
        self.next_pd += 1;
        Pd(self.next_pd - 1)
    }

    /// Registers `memory` at address `va`; returns (lkey, rkey).
    pub fn reg_mr(&mut self, pd: Pd, va: u64, memory: RegionMemory, access: Access) -> (u32, u32) {
        self.mrs.register(pd, va, memory, access)
    }

    pub fn dereg_mr(&mut self, key: u32) -> bool {
        self.mrs.deregister(key)
    }

    /// The region behind a key.
    pub fn mr(&self, key: u32) -> Option<&MemoryRegion> {
        self.mrs.get(key)
    }

    pub fn create_cq(&mut self, depth: usize) -> CqId {
        self.cqs.create(depth)
    }

    /// Takes up to `max` completions, oldest first.
    pub fn poll_cq(&mut self, cq: CqId, max: usize) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        self.poll_cq_into(cq, max, &mut out);
        out
    }

    /// Appends up to `max` completions, oldest first, to `out` (no
    /// allocation once `out` has room); returns how many.
    pub fn poll_cq_into(&mut self, cq: CqId, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        self.cqs.poll_into(cq, max, out)
    }

    /// Completions waiting in a CQ.
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.cqs.queued(cq)
    }

    pub fn create_srq(&mut self, pd: Pd, max_wr: u32, limit: u32) -> SrqId {
        self.srqs.create(pd, max_wr, limit)
    }

    /// Arms the SRQ limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`).
    pub fn arm_srq(&mut self, srq: SrqId, limit: u32) -> Result<(), VerbsError> {
        self.srqs.arm(srq, limit)
    }

    pub fn post_srq_recv(&mut self, srq: SrqId, wr: RecvWr) -> Result<(), VerbsError> {
        self.srqs.post(srq, wr)
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        if let Some(id) = self.srqs.take_limit_event() {
            return Some(AsyncEvent::SrqLimitReached(id));
        }
        self.events.pop_front()
    }

    pub fn create_qp(&mut self, init: QpInitAttr) -> Result<u32, VerbsError> {
        self.touch();
        for cq in [init.send_cq, init.recv_cq] {
            if !self.cqs.exists(cq) {
                return Err(VerbsError::NoSuchCq(cq.0));
            }
        }
        if let Some(srq) = init.srq.filter(|&s| !self.srqs.exists(s)) {
            return Err(VerbsError::NoSuchSrq(srq.0));
        }
        let mut qpn = self.next_qpn;
        while qpn < FIRST_QPN || self.qps.contains_key(&qpn) {
            qpn = (qpn + 1) & 0xff_ffff;
        }
        self.next_qpn = (qpn + 1) & 0xff_ffff;
        let mut qp = Qp::new(qpn, init);
        qp.ecn_capable = self.ecn_capable;
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        self.touch();
        self.qps.remove(&qpn).map(|_| ()).ok_or(VerbsError::NoSuchQp(qpn))
    }

    /// `ibv_modify_qp`. Moving to ERR flushes every queued request.
    pub fn modify_qp(&mut self, qpn: u32, attr: &QpAttr) -> Result<(), VerbsError> {
        self.touch();
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let pkey = match attr.pkey_index {
            Some(i) => Some(*self.pkeys.get(usize::from(i)).ok_or(VerbsError::InvalidAttribute {
                qpn,
                attr: "pkey_index (past the end of the P_Key table)",
                value: u64::from(i),
            })?),
            None => None,
        };
        qp.modify(attr)?;
        if let Some(pkey) = pkey {
            qp.params.pkey = pkey;
        }
        if qp.state == QpState::Err {
            qp.flush(&mut self.cqs);
        }
        self.settle_cq_errors();
        Ok(())
    }

    /// `ibv_query_qp`: the state and the attributes in force.
    pub fn query_qp(&self, qpn: u32) -> Result<(QpState, QpParams), VerbsError> {
        let qp = self.qps.get(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        Ok((qp.state, qp.params))
    }

    /// The counters of one QP.
    pub fn qp_stats(&self, qpn: u32) -> Result<QpStats, VerbsError> {
        Ok(self.qps.get(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?.stats)
    }

    /// `ibv_post_send`: checks the request against the QP and queues it.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        self.touch();
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let t = qp.init.qp_type;
        let cap = qp.init.cap;
        if !matches!(qp.state, QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err) {
            return Err(VerbsError::WrongState { qpn, what: "a send", state: qp.state });
        }
        if wr.sg_list.len() > cap.max_send_sge as usize {
            return Err(VerbsError::TooManySge { qpn, n: wr.sg_list.len(), max: cap.max_send_sge });
        }
        if let Some(d) = &wr.inline_data {
            if d.len() > cap.max_inline_data as usize {
                return Err(VerbsError::InlineTooLarge { qpn, len: d.len(), max: cap.max_inline_data });
            }
        }
        if qp.req.sq.len() >= cap.max_send_wr as usize {
            return Err(VerbsError::QueueFull { qpn, queue: "send", depth: cap.max_send_wr });
        }
        let op_name = match wr.op {
            SendOp::Send => "SEND",
            SendOp::SendWithImm { .. } => "SEND_WITH_IMM",
            SendOp::SendWithInv { .. } => "SEND_WITH_INV",
            SendOp::RdmaWrite { .. } => "RDMA_WRITE",
            SendOp::RdmaWriteWithImm { .. } => "RDMA_WRITE_WITH_IMM",
            SendOp::RdmaRead { .. } => "RDMA_READ",
            SendOp::CompareSwap { .. } => "ATOMIC_CMP_AND_SWP",
            SendOp::FetchAdd { .. } => "ATOMIC_FETCH_AND_ADD",
        };
        let supported = match t {
            QpType::Rc => true,
            QpType::Uc => !wr.op.writes_local() && !matches!(wr.op, SendOp::SendWithInv { .. }),
            QpType::Ud => matches!(wr.op, SendOp::Send | SendOp::SendWithImm { .. }),
        };
        if !supported {
            return Err(VerbsError::UnsupportedOp { qpn, op: op_name, qp_type: t });
        }
        let len = wr.length();
        let max = match t {
            QpType::Ud => u64::from(qp.params.mtu.bytes()),
            _ => 1 << 31,
        };
        if len > max {
            return Err(VerbsError::MessageTooLong { qpn, len, max });
        }
        if wr.op.is_atomic() && len != 8 {
            return Err(VerbsError::InvalidAttribute { qpn, attr: "atomic sg_list length (must be 8)", value: len });
        }
        if t == QpType::Ud && wr.ud.is_none() {
            return Err(VerbsError::MissingUdDest(qpn));
        }
        qp.req.sq.push_back(SendWqe { wr, first_psn: rdma_wire::Psn::new(0), npkts: 0, started: false, sent: false });
        if qp.state == QpState::Err {
            qp.flush(&mut self.cqs);
            self.settle_cq_errors();
        }
        Ok(())
    }

    /// [`Endpoint::post_send`] of a copy of `wr`, made without allocating
    /// in steady state (finished requests' lists and inline buffers are reused).
    pub fn post_send_copy(&mut self, qpn: u32, wr: &SendWr) -> Result<(), VerbsError> {
        let sg_list = self.cqs.pool.copy_sges(&wr.sg_list);
        let inline_data = wr.inline_data.as_deref().map(|d| self.cqs.pool.copy_inline(d));
        self.post_send(qpn, SendWr { sg_list, inline_data, ..*wr })
    }

    /// [`Endpoint::post_recv`] of a copy of `wr` (see [`Endpoint::post_send_copy`]).
    pub fn post_recv_copy(&mut self, qpn: u32, wr: &RecvWr) -> Result<(), VerbsError> {
        let sg_list = self.cqs.pool.copy_sges(&wr.sg_list);
        self.post_recv(qpn, RecvWr { wr_id: wr.wr_id, sg_list })
    }

    /// [`Endpoint::post_srq_recv`] of a copy of `wr` (see [`Endpoint::post_send_copy`]).
    pub fn post_srq_recv_copy(&mut self, srq: SrqId, wr: &RecvWr) -> Result<(), VerbsError> {
        let sg_list = self.cqs.pool.copy_sges(&wr.sg_list);
        self.post_srq_recv(srq, RecvWr { wr_id: wr.wr_id, sg_list })
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        if qp.init.srq.is_some() {
            return Err(VerbsError::QpHasSrq(qpn));
        }
        if qp.state == QpState::Reset {
            return Err(VerbsError::WrongState { qpn, what: "a receive", state: qp.state });
        }
        let cap = qp.init.cap;
        if wr.sg_list.len() > cap.max_recv_sge as usize {
            return Err(VerbsError::TooManySge { qpn, n: wr.sg_list.len(), max: cap.max_recv_sge });
        }
        if qp.rq.len() >= cap.max_recv_wr as usize {
            return Err(VerbsError::QueueFull { qpn, queue: "receive", depth: cap.max_recv_wr });
        }
        qp.rq.push_back(wr);
        if qp.state == QpState::Err {
            qp.flush(&mut self.cqs);
            self.settle_cq_errors();
        }
        Ok(())
    }

    /// Handles one received RoCE v2 packet (IP header through ICRC).
    /// Anything wrong with it is counted and traced, never returned: a
    /// network peer cannot make the endpoint fail.
    pub fn handle_packet(&mut self, now: Instant, l3: &[u8]) {
        self.receive(now, l3);
        self.settle_cq_errors();
    }

    /// Raises the event of every CQ that overflowed since the last call,
    /// and moves the QPs that use it to the error state (their flushed
    /// requests are lost with the CQ, and counted as overruns).
    fn settle_cq_errors(&mut self) {
        while let Some(cq) = self.cqs.take_overflowed() {
            tracing::warn!(cq = cq.0, "completion queue overrun: the CQ and its QPs are in error");
            self.events.push_back(AsyncEvent::CqError(cq));
            for (&qpn, qp) in self.qps.iter_mut() {
                if qp.state != QpState::Err && (qp.init.send_cq == cq || qp.init.recv_cq == cq) {
                    qp.state = QpState::Err;
                    qp.flush(&mut self.cqs);
                    self.events.push_back(AsyncEvent::QpFatal(qpn));
                }
            }
        }
    }

    fn receive(&mut self, now: Instant, l3: &[u8]) {
        self.touch();
        self.stats.packets_received += 1;
        let p = match RoceV2Packet::new_checked(l3) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "malformed packet");
                self.stats.drop(Drop::Malformed, 0);
                return;
            }
        };
        let (computed, carried) = (p.computed_icrc(), p.transport().icrc());
        if computed != carried {
            // Behind a UDP socket the IPv4 Identification is unknown (taken
            // as 0): solve for it rather than skip the check (see rdma_wire::ident).
            let recovered = match (&mut self.ident_recovery, p.ipv4()) {
                (Some(r), Some(_)) => r.recover(l3.len(), computed, carried).is_some(),
                _ => false,
            };
            if !recovered {
                self.stats.drop(Drop::IcrcMismatch, 0);
                return;
            }
            self.stats.ipv4_ident_recovered += 1;
        }
        let (src, ecn, ip_len) = match (p.ipv4(), p.ipv6()) {
            (Some(h), _) => (IpAddr::V4(h.src()), h.ecn(), 20),
            (_, Some(h)) => (IpAddr::V6(h.src()).to_canonical(), h.traffic_class() & 3, 40),
            _ => unreachable!("a checked packet is IPv4 or IPv6"),
        };
        let ce = ecn & ECN_MASK == ECN_CE;
        if ce {
            self.stats.ecn_ce_received += 1;
        }
        let t = p.transport();
        let bth = t.bth();
        let qpn = bth.dest_qp();
        if t.info().transport == Transport::Cnp {
            // The rate-control hook of the reaction point (the DCQCN issue fills it).
            self.stats.cnps_received += 1;
            tracing::debug!(qpn, "CNP received");
            return;
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.stats.drop(Drop::UnknownQp, qpn);
            return;
        };
        if bth.pkey() & 0x7fff != qp.params.pkey & 0x7fff {
            self.stats.drop(Drop::PkeyMismatch, qpn);
            return;
        }
        // Bit 15 is the membership: two limited members of a partition
        // may not talk to each other (IBTA 10.9.3).
        if bth.pkey() & 0x8000 == 0 && qp.params.pkey & 0x8000 == 0 {
            self.stats.drop(Drop::PkeyLimitedMembers, qpn);
            return;
        }
        let transport_ok = matches!(
            (t.info().transport, qp.init.qp_type),
            (Transport::Rc, QpType::Rc) | (Transport::Uc, QpType::Uc) | (Transport::Ud, QpType::Ud)
        );
        if !transport_ok {
            self.stats.drop(Drop::WrongTransport, qpn);
            return;
        }
        if qp.init.qp_type != QpType::Ud && qp.params.av.is_some_and(|av| av.dest.to_canonical() != src) {
            self.stats.drop(Drop::AddressMismatch, qpn);
            return;
        }
        // Counted for the QP only once the packet is known to be its own.
        if ce {
            qp.stats.ecn_ce_received += 1;
            tracing::trace!(qpn, "CE-marked packet received");
        }
        let was_error = qp.state == QpState::Err;
        let is_response = matches!(
            t.info().operation,
            Operation::Acknowledge | Operation::AtomicAcknowledge | Operation::RdmaReadResponse
        );
        if is_response {
            qp.handle_response(now, &t, &self.mrs, &mut self.cqs, &mut self.stats);
        } else {
            let mut ctx = RespCtx {
                mrs: &self.mrs,
                cqs: &mut self.cqs,
                srqs: &mut self.srqs,
                stats: &mut self.stats,
                ip_header: &l3[..ip_len],
            };
            qp.handle_request(&t, &mut ctx);
        }
        if !was_error && qp.state == QpState::Err {
            self.events.push_back(AsyncEvent::QpFatal(qpn));
        }
    }

    /// Lets a lone positive ACK wait up to `delay` for company: it leaves
    /// with the next packet this endpoint sends (after it, in the same
    /// round of `poll_transmit` calls), or covers later requests too, or
    /// leaves alone when `delay` has passed ([`Endpoint::poll_timeout`]
    /// says when). Only a QP that sent a request itself within the last
    /// millisecond holds ACKs (a ping-pong, or traffic both ways): the
    /// passive side of a one-way stream ACKs at once, so a requester that
    /// waits for each completion is never slowed. Zero (the default of the
    /// engine, as rxe) sends every ACK at once. NAKs, READ responses and
    /// atomic ACKs never wait.
    pub fn set_ack_delay(&mut self, delay: Duration) {
        self.touch();
        self.ack_delay = delay;
    }

    /// Lets every held ACK leave in the next round of `poll_transmit`
    /// without waiting for its delay: for a driver about to destroy a QP,
    /// or to stop driving the endpoint for a while.
    pub fn release_acks(&mut self) {
        self.touch();
        self.release = true;
    }

    /// Lets packets carry payloads of [`crate::framing::BY_REF_MIN`] bytes
    /// or more by reference to their memory region instead of a copy in
    /// the packet buffer (see [`Transmit::payload`]): for a driver that
    /// hands the kernel the headers, the region's bytes and the trailer
    /// as one scattered send, and so copies each byte once. Off by default:
    /// every packet is then whole in its buffer.
    pub fn set_payload_by_reference(&mut self, on: bool) {
        self.framer.by_ref = on;
    }

    /// Whether some QP holds a lone ACK back for company (see
    /// [`Endpoint::set_ack_delay`]): a driver that may stop calling must
    /// then make sure that `poll_timeout` is honoured, or call
    /// [`Endpoint::release_acks`]. Walks every QP.
    pub fn holds_acks(&self) -> bool {
        self.qps.values().any(|q| q.resp.ack_held_since.is_some())
    }

    /// Writes the next packet to send into `buf` (at least [`MAX_PACKET`]
    /// bytes). QPs take turns of up to [`TX_BURST`] packets; within a QP,
    /// responses go before requests. Call it until it returns `None`: that
    /// ends a round, and held ACKs leave at the end of a round that sent
    /// anything.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if self.idle_until_later(now) {
            return None;
        }
        let first = if std::mem::take(&mut self.fresh_done) { None } else { self.next_packet(now, buf, self.release) };
        let t = first.or_else(|| {
            if self.sending && !self.ack_delay.is_zero() {
                self.next_packet(now, buf, true)
            } else {
                None
            }
        });
        self.sending = t.is_some();
        self.tx_idle = t.is_none();
        if t.is_none() {
            self.release = false;
        }
        self.settle_cq_errors();
        t
    }

    /// [`Endpoint::poll_transmit`] without the held ACKs that a round
    /// releases: `None` here means that only those may be left, and the
    /// `poll_transmit` calls after it give them. A driver calls this first
    /// to send a lone reply before those ACKs are even built.
    pub fn poll_transmit_fresh(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if self.idle_until_later(now) {
            return None;
        }
        // The round is not over: `sending` stays as it is for the release.
        let t = self.next_packet(now, buf, self.release);
        if t.is_some() {
            self.sending = true;
        }
        // Every QP was just asked: the next `poll_transmit` need not ask again.
        self.fresh_done = t.is_none();
        self.settle_cq_errors();
        t
    }

    /// Whether the last round found nothing and no timer is due yet: a
    /// poll then costs this comparison. Otherwise the QPs are about to be
    /// walked, and sending arms timers (a QP that fails stops its own), so
    /// the cached deadline is dropped.
    fn idle_until_later(&mut self, now: Instant) -> bool {
        if self.tx_idle && self.poll_timeout().is_none_or(|d| now < d) {
            return true;
        }
        self.deadline.set(None);
        false
    }

    /// Records that something happened which may give a QP packets to send
    /// or change a timer: the next `poll_transmit` looks at every QP again,
    /// and `poll_timeout` recomputes. Every `&mut self` entry point that
    /// can do either calls it; posting a receive and polling a CQ cannot.
    fn touch(&mut self) {
        self.tx_idle = false;
        self.fresh_done = false;
        self.deadline.set(None);
    }

    fn next_packet(&mut self, now: Instant, buf: &mut [u8], flush: bool) -> Option<Transmit> {
        for _ in 0..self.qps.len() {
            let qpn = match self.qps.range(self.rr..).next().or_else(|| self.qps.iter().next()) {
                Some((&k, _)) => k,
                None => return None,
            };
            match self.transmit_from(qpn, now, buf, flush) {
                Some(t) => {
                    // Stay on this QP for a burst, then give the next its turn.
                    self.burst += 1;
                    if self.burst >= TX_BURST {
                        (self.rr, self.burst) = (qpn.wrapping_add(1), 0);
                    } else {
                        self.rr = qpn;
                    }
                    return Some(t);
                }
                None => (self.rr, self.burst) = (qpn.wrapping_add(1), 0),
            }
        }
        None
    }

    /// The next packet of one QP: a response first, else a request.
    fn transmit_from(&mut self, qpn: u32, now: Instant, buf: &mut [u8], flush: bool) -> Option<Transmit> {
        let qp = self.qps.get_mut(&qpn).expect("key from the map");
        if let Some((len, dest, payload)) =
            qp.responder_transmit(now, (self.ack_delay, flush), &self.mrs, &self.framer, buf)
        {
            self.stats.packets_sent += 1;
            if std::mem::take(&mut qp.resp.fatal) && qp.state != QpState::Err {
                // The NAK that ends a READ whose region went is out.
                qp.state = QpState::Err;
                qp.flush(&mut self.cqs);
                self.events.push_back(AsyncEvent::QpFatal(qpn));
            }
            // Past the first pass of a round only held lone ACKs are left
            // (anything else left in that pass); a release sends anything.
            let released_ack = flush && !self.release;
            return Some(Transmit { len, dest, src_port: qp.src_port, released_ack, payload });
        }
        match qp.requester_transmit(now, &self.mrs, &self.framer, buf) {
            ReqOutcome::Idle => None,
            ReqOutcome::LocalError(status) => {
                // Complete what was before the failing request first.
                for _ in 0..qp.req.cursor_wqe {
                    qp.complete_front(&mut self.cqs);
                }
                qp.fail(status, &mut self.cqs);
                self.events.push_back(AsyncEvent::QpFatal(qpn));
                None
            }
            ReqOutcome::Sent { len, dest, payload } => {
                // UC and UD requests complete once sent.
                while qp.req.sq.front().is_some_and(|w| w.sent) {
                    qp.complete_front(&mut self.cqs);
                }
                self.stats.packets_sent += 1;
                Some(Transmit { len, dest, src_port: qp.src_port, released_ack: false, payload })
            }
        }
    }

    /// The next time [`Endpoint::handle_timeout`] has work, or when a
    /// waiting QP may send again.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if let Some(cached) = self.deadline.get() {
            return cached;
        }
        let d = self.ack_delay;
        let t =
            self.qps.values().flat_map(|q| [q.req.rto_deadline, q.req.rnr_until, q.resp.ack_due(d)]).flatten().min();
        self.deadline.set(Some(t));
        t
    }

    /// Fires every timer that is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.touch();
        for (&qpn, qp) in self.qps.iter_mut() {
            if qp.req.rto_deadline.is_some_and(|t| t <= now) {
                let was_error = qp.state == QpState::Err;
                qp.handle_ack_timeout(&mut self.cqs, &mut self.stats);
                if !was_error && qp.state == QpState::Err {
                    self.events.push_back(AsyncEvent::QpFatal(qpn));
                }
            }
        }
        self.settle_cq_errors();
    }
}
