//! The requester: turns send work requests into request packets.
//!
//! Each posted request becomes a [`SendWqe`] that owns a fixed range of
//! PSNs once it starts. A cursor (WQE, packet within it) says what goes on
//! the wire next; go-back-N retransmission just moves the cursor back to
//! the first unacknowledged PSN. A READ restarted in the middle is
//! re-issued for the part whose responses are missing, as the IBTA asks.

use crate::framing::{gather, Framer, PayloadRef};
use crate::memory::{Access, AccessError, MemoryTable, Pd};
use crate::qp::attr::{QpParams, QpState, QpType};
use crate::retry::RetryBudget;
use crate::send_queue::SendQueue;
use crate::time::{local_ack_timeout, Instant};
use crate::timers::{Timer, Timers};
use crate::wr::{SendOp, SendWr, WcStatus};
use rdma_wire::{AtomicEthRepr, BthRepr, DethRepr, FethRepr, Opcode, Psn, RethRepr, Transport, TransportRepr};

/// The requester asks for an ACK at least this often (and on the last
/// packet of every message), so that the sender's window keeps moving.
pub const ACK_REQ_EVERY: u32 = 16;

/// An RC requester sends no packet more than this many PSNs past the
/// oldest unacknowledged one (rxe's `RXE_MAX_UNACKED_PSNS`). It bounds what
/// a go-back-N resends: without it, a receiver slower than this sender
/// (kernel Soft-RoCE under emulation, in the lab) drops a packet, gets the
/// whole queue again, drops more, and the sender runs out of retries.
pub const MAX_UNACKED_PSNS: u32 = 128;

/// How recently a QP must have sent a request for its responder to hold a
/// lone ACK for company ([`crate::Endpoint::set_ack_delay`]).
const CONVERSING: core::time::Duration = core::time::Duration::from_millis(1);

pub use crate::send_queue::SendWqe;

/// The requester's state: the send queue it shares with the completer,
/// the retry budgets the completer spends, and what it needs itself.
#[derive(Debug)]
pub struct Requester {
    pub(crate) sq: SendQueue,
    pub(crate) retries: RetryBudget,
    /// Packets since the last one that asked for an ACK.
    since_ack_req: u32,
    /// Ask for an ACK on every packet: a window-based controller (HPCC)
    /// runs, which moves its window and reads its telemetry per ACK, and
    /// whose window would otherwise wait for an ACK only its edge asks for.
    pub(crate) ack_each: bool,
    /// Counted at the endpoint; kept here to tell the driver.
    pub retransmits: u64,
    /// When this QP last sent a request packet (see [`Requester::sent_lately`]).
    last_sent: Option<Instant>,
}

impl Requester {
    /// Whether the packet the requester sent last asked for an ACK
    /// (its counter of packets since an AckReq starts over on one).
    pub(crate) fn asked_for_ack(&self) -> bool {
        self.since_ack_req == 0
    }

    pub fn new(sq_psn: Psn) -> Requester {
        Requester {
            sq: SendQueue::new(sq_psn),
            retries: RetryBudget::default(),
            since_ack_req: 0,
            ack_each: false,
            retransmits: 0,
            last_sent: None,
        }
    }

    /// Whether this QP sent a request within [`CONVERSING`]: its
    /// responder holds a lone ACK for company only then
    /// (`Qp::responder_transmit`).
    pub(crate) fn sent_lately(&self, now: Instant) -> bool {
        self.last_sent.is_some_and(|t| now.saturating_since(t) < CONVERSING)
    }

    /// Whether any transmitted packet awaits an acknowledgement.
    pub fn outstanding(&self) -> bool {
        self.sq.outstanding()
    }

    /// Whether an RC packet at `next` would be too far past the oldest
    /// unacknowledged PSN.
    fn window_full(&self, t: QpType, next: Psn) -> bool {
        let comp = self.sq.comp_psn();
        t.reliable() && next != comp && next.distance_from(comp) >= MAX_UNACKED_PSNS
    }
}

/// PSNs a message of `len` bytes takes at this MTU.
pub(crate) fn packets_for(len: u64, mtu: u32) -> u32 {
    len.div_ceil(u64::from(mtu)).max(1) as u32
}

/// The opcode of packet `k` of `n` of a SEND or WRITE on this service.
fn data_opcode(t: QpType, op: &SendOp, k: u32, n: u32) -> Opcode {
    let (first, only) = (k == 0, n == 1);
    let last = k + 1 == n;
    // The RC opcode (IBTA table 38); UC and XRC put their service's high
    // bits over the same low five bits.
    let rc = match op {
        SendOp::Send => match (only, first, last) {
            (true, ..) => Opcode::RC_SEND_ONLY,
            (_, true, _) => Opcode::RC_SEND_FIRST,
            (_, _, true) => Opcode::RC_SEND_LAST,
            _ => Opcode::RC_SEND_MIDDLE,
        },
        SendOp::SendWithImm { .. } => match (only, first, last) {
            (true, ..) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            (_, true, _) => Opcode::RC_SEND_FIRST,
            (_, _, true) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
            _ => Opcode::RC_SEND_MIDDLE,
        },
        SendOp::SendWithInv { .. } => match (only, first, last) {
            (true, ..) => Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
            (_, true, _) => Opcode::RC_SEND_FIRST,
            (_, _, true) => Opcode::RC_SEND_LAST_WITH_INVALIDATE,
            _ => Opcode::RC_SEND_MIDDLE,
        },
        SendOp::RdmaWrite { .. } => match (only, first, last) {
            (true, ..) => Opcode::RC_RDMA_WRITE_ONLY,
            (_, true, _) => Opcode::RC_RDMA_WRITE_FIRST,
            (_, _, true) => Opcode::RC_RDMA_WRITE_LAST,
            _ => Opcode::RC_RDMA_WRITE_MIDDLE,
        },
        SendOp::RdmaWriteWithImm { .. } => match (only, first, last) {
            (true, ..) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            (_, true, _) => Opcode::RC_RDMA_WRITE_FIRST,
            (_, _, true) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
            _ => Opcode::RC_RDMA_WRITE_MIDDLE,
        },
        SendOp::RdmaRead { .. } => Opcode::RC_RDMA_READ_REQUEST,
        SendOp::CompareSwap { .. } => Opcode::RC_COMPARE_SWAP,
        SendOp::FetchAdd { .. } => Opcode::RC_FETCH_ADD,
        SendOp::Flush { .. } => Opcode::RC_FLUSH,
        SendOp::AtomicWrite { .. } => Opcode::RC_ATOMIC_WRITE,
        // Local operations never reach the wire (`Requester::transmit`).
        SendOp::LocalInv { .. } | SendOp::BindMw { .. } => unreachable!("a local operation has no opcode"),
    };
    match t {
        QpType::Rc => rc,
        QpType::XrcSend | QpType::XrcRecv => rc.on(Transport::Xrc),
        QpType::Uc => rc.on(Transport::Uc),
        QpType::Ud if matches!(op, SendOp::SendWithImm { .. }) => Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
        QpType::Ud => Opcode::UD_SEND_ONLY,
    }
}

/// What the requester may see and change of its QP, borrowed field by
/// field from it (`Qp::requester_parts`): its identity, attributes and
/// state (read only) and the timers it arms. The send queue, its cursor
/// and the retry budgets are the [`Requester`]'s own.
pub(crate) struct ReqQp<'a> {
    pub(crate) num: u32,
    pub(crate) qp_type: QpType,
    /// Local buffers are checked against this PD.
    pub(crate) pd: Pd,
    pub(crate) state: QpState,
    pub(crate) params: &'a QpParams,
    pub(crate) src_port: u16,
    pub(crate) ecn_capable: bool,
    /// The requester arms [`Timer::Retransmit`] and ends [`Timer::RnrWait`].
    pub(crate) timers: &'a mut Timers,
}

/// What [`Requester::transmit`] did.
#[derive(Debug)]
pub(crate) enum ReqOutcome {
    /// Nothing to send now.
    Idle,
    /// A packet of `len` bytes is in the buffer, for `dest`; its payload
    /// is in memory instead when `payload` says where.
    Sent { len: usize, dest: core::net::IpAddr, payload: Option<PayloadRef> },
    /// The WQE at the head of the cursor failed locally: complete it with
    /// this status and move the QP to the error state.
    LocalError(WcStatus),
    /// The WQE at the cursor is a local operation (BIND_MW, LOCAL_INV)
    /// whose turn has come: the endpoint executes it on its memory table
    /// (`crate::window::verbs::execute_local`), then `Qp::local_done` or
    /// `Qp::fail_at_cursor`.
    Local(SendOp),
}

/// Checks every local buffer of a request before it starts.
fn check_local(mrs: &MemoryTable, pd: Pd, wr: &SendWr) -> Result<(), AccessError> {
    if wr.inline_data.is_some() {
        return Ok(());
    }
    let needed = if wr.op.writes_local() { Access::LOCAL_WRITE } else { Access::NONE };
    for s in &wr.sg_list {
        mrs.check(s.lkey, pd, s.addr, u64::from(s.length), needed)?;
    }
    Ok(())
}

impl Requester {
    /// Whether [`Requester::transmit`] would send a request packet now (a
    /// request waits, and neither the QP's state, an RNR wait (`rnr_wait`)
    /// nor the RC window holds it): a held ACK that must go first need not
    /// leave otherwise.
    pub(crate) fn ready(&self, state: QpState, qp_type: QpType, rnr_wait: bool) -> bool {
        let may_send = state == QpState::Rts || (state == QpState::Sqd && self.outstanding());
        if !may_send || rnr_wait {
            return false;
        }
        let Some((.., next)) = self.sq.at_cursor() else { return false };
        !self.window_full(qp_type, next)
    }

    /// Writes the next request packet into `buf`, if there is one to send.
    #[inline] // into `Qp::requester_transmit`: one call per packet
    pub(crate) fn transmit(
        &mut self,
        qp: &mut ReqQp<'_>,
        now: Instant,
        mrs: &MemoryTable,
        framer: &Framer,
        buf: &mut [u8],
    ) -> ReqOutcome {
        let may_send = qp.state == QpState::Rts || (qp.state == QpState::Sqd && self.outstanding());
        if !may_send {
            return ReqOutcome::Idle;
        }
        if qp.timers.is_running(Timer::RnrWait, now) {
            return ReqOutcome::Idle;
        }
        qp.timers.stop(Timer::RnrWait);
        let mtu = qp.params.mtu.bytes();
        let t = qp.qp_type;
        // Local operations take no PSN and send nothing. An executed one
        // the cursor meets again (after a go-back-N) is stepped over.
        while let Some((_, wqe, ..)) = self.sq.at_cursor() {
            if !wqe.wr.op.is_local() {
                break;
            }
            if wqe.sent {
                self.sq.advance_cursor(true, false);
                continue;
            }
            if let Some(status) = wqe.local_error {
                // It failed behind outstanding requests: it fails once they
                // have completed, and nothing after it starts.
                if self.sq.before_cursor() == 0 {
                    return ReqOutcome::LocalError(status);
                }
                return ReqOutcome::Idle;
            }
            if qp.state == QpState::Sqd {
                return ReqOutcome::Idle; // drained: no new requests start
            }
            // LOCAL_INV waits until every earlier request has completed
            // (rxe_req.c rxe_wqe_is_fenced: the local invalidate fence, IBA
            // 10.6.5.1, mandatory in rxe); a bind does not wait.
            if matches!(wqe.wr.op, SendOp::LocalInv { .. }) && self.sq.before_cursor() != 0 {
                return ReqOutcome::Idle;
            }
            return ReqOutcome::Local(wqe.wr.op);
        }
        let Some((_, wqe, _, next)) = self.sq.at_cursor() else { return ReqOutcome::Idle };
        if self.window_full(t, next) {
            return ReqOutcome::Idle; // the window is full: wait for ACKs
        }
        if !wqe.started {
            if qp.state == QpState::Sqd {
                return ReqOutcome::Idle; // drained: no new requests start
            }
            if wqe.wr.op.uses_rd_atomic() && self.sq.rd_atomic_in_flight() >= usize::from(qp.params.max_rd_atomic) {
                return ReqOutcome::Idle; // wait for a READ or atomic to complete
            }
            if let Err(e) = check_local(mrs, qp.pd, &wqe.wr) {
                tracing::debug!(qpn = qp.num, wr_id = wqe.wr.wr_id, error = %e, "local protection error");
                return ReqOutcome::LocalError(WcStatus::LocProtErr);
            }
            let npkts = match wqe.wr.op {
                SendOp::CompareSwap { .. }
                | SendOp::FetchAdd { .. }
                | SendOp::Flush { .. }
                | SendOp::AtomicWrite { .. } => 1,
                _ => packets_for(wqe.wr.length(), mtu),
            };
            self.sq.start_at_cursor(npkts);
        }
        let Some((_, wqe, k, psn)) = self.sq.at_cursor() else { return ReqOutcome::Idle };
        let n = wqe.npkts;
        let len = wqe.wr.length();
        let opcode = data_opcode(t, &wqe.wr.op, k, n);
        let info = opcode.info().expect("requester opcodes are in the table");
        let last = info.position.ends() || !info.has_payload;
        self.since_ack_req += 1;
        let ack_req = t.reliable() && (last || self.ack_each || self.since_ack_req >= ACK_REQ_EVERY);
        if ack_req {
            self.since_ack_req = 0;
        }
        let dest_qp = match (&wqe.wr.ud, t) {
            (Some(ud), QpType::Ud) => ud.remote_qpn,
            _ => qp.params.dest_qp,
        };
        let mut tr = TransportRepr::new(BthRepr {
            opcode,
            solicited: wqe.wr.solicited
                && last
                && matches!(info.operation, rdma_wire::Operation::Send | rdma_wire::Operation::RdmaWrite),
            mig_req: false,
            pad_count: 0,
            pkey: qp.params.pkey,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req,
            psn,
        });
        if t == QpType::XrcSend {
            tr.xrc_srq = Some(wqe.wr.xrc_srqn & 0xff_ffff);
        }
        let offset = u64::from(k) * u64::from(mtu);
        let mut payload_len = 0usize;
        // The 8 bytes an ATOMIC WRITE carries (from the request, not from memory).
        let mut atomic_value = None;
        match wqe.wr.op {
            SendOp::RdmaRead { remote_addr, rkey } => {
                tr.reth = Some(RethRepr { va: remote_addr + offset, rkey, dma_len: (len - offset.min(len)) as u32 });
            }
            SendOp::CompareSwap { remote_addr, rkey, compare, swap } => {
                tr.atomic_eth = Some(AtomicEthRepr { va: remote_addr, rkey, swap_add: swap, compare });
            }
            SendOp::FetchAdd { remote_addr, rkey, add } => {
                tr.atomic_eth = Some(AtomicEthRepr { va: remote_addr, rkey, swap_add: add, compare: 0 });
            }
            SendOp::Flush { remote_addr, rkey, len, placement, selectivity } => {
                // post_send checked len <= 2^31.
                tr.feth = Some(FethRepr { placement, selectivity });
                tr.reth = Some(RethRepr { va: remote_addr, rkey, dma_len: len as u32 });
            }
            SendOp::AtomicWrite { remote_addr, rkey, value } => {
                tr.reth = Some(RethRepr { va: remote_addr, rkey, dma_len: 8 });
                payload_len = 8;
                atomic_value = Some(value);
            }
            op => {
                payload_len = (len - offset).min(u64::from(mtu)) as usize;
                if let SendOp::RdmaWrite { remote_addr, rkey } | SendOp::RdmaWriteWithImm { remote_addr, rkey, .. } = op
                {
                    if k == 0 {
                        tr.reth = Some(RethRepr { va: remote_addr, rkey, dma_len: len as u32 });
                    }
                }
                if info.has_immediate() {
                    tr.imm_dt = match op {
                        SendOp::SendWithImm { imm } | SendOp::RdmaWriteWithImm { imm, .. } => Some(imm),
                        _ => None,
                    };
                }
                if info.has_invalidate() {
                    if let SendOp::SendWithInv { invalidate_rkey } = op {
                        tr.ieth = Some(invalidate_rkey);
                    }
                }
                if let (QpType::Ud, Some(ud)) = (t, &wqe.wr.ud) {
                    // A Q_Key with the high bit set means "use the QP's own" (ibv_post_send(3)).
                    let qkey = if ud.remote_qkey & 0x8000_0000 != 0 { qp.params.qkey } else { ud.remote_qkey };
                    tr.deth = Some(DethRepr { qkey, src_qp: qp.num });
                }
            }
        }
        let av = match (&wqe.wr.ud, qp.params.av) {
            (Some(ud), _) if t == QpType::Ud => crate::qp::attr::AddressVector {
                dest: ud.dest,
                hop_limit: ud.hop_limit,
                traffic_class: ud.traffic_class,
                dlid: ud.dlid,
                sl: ud.sl,
            },
            (_, Some(av)) => av,
            _ => return ReqOutcome::LocalError(WcStatus::LocQpOpErr),
        }
        .for_data(qp.ecn_capable);
        let wr = &wqe.wr;
        let by_ref = match (&wr.inline_data, atomic_value) {
            (Some(_), _) | (_, Some(_)) => Ok(None),
            (None, None) => framer.payload_ref(mrs, qp.pd, &wr.sg_list, offset, payload_len),
        };
        let written = by_ref.and_then(|r| match r {
            Some(src) => {
                let (n, p) = framer.frame_by_ref(buf, &av, qp.src_port, &tr, src);
                Ok((n, Some(p)))
            }
            None => framer
                .frame(buf, &av, qp.src_port, &tr, payload_len, |dst| match (&wr.inline_data, atomic_value) {
                    (_, Some(v)) => {
                        dst.copy_from_slice(&v);
                        Ok(())
                    }
                    (Some(d), None) => {
                        dst.copy_from_slice(&d[offset as usize..offset as usize + dst.len()]);
                        Ok(())
                    }
                    (None, None) => gather(mrs, qp.pd, &wr.sg_list, offset, dst),
                })
                .map(|n| (n, None)),
        });
        let (len, payload) = match written {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(qpn = qp.num, error = %e, "local protection error while gathering");
                return ReqOutcome::LocalError(WcStatus::LocProtErr);
            }
        };

        // Advance the cursor: a READ request covers all its remaining PSNs.
        let is_read = matches!(wr.op, SendOp::RdmaRead { .. });
        self.sq.advance_cursor(is_read || k + 1 >= n, !t.reliable());
        if t.reliable() && !qp.timers.is_armed(Timer::Retransmit) {
            qp.timers.set_opt(Timer::Retransmit, local_ack_timeout(qp.params.timeout).map(|d| now + d));
        }
        self.last_sent = Some(now);
        ReqOutcome::Sent { len, dest: av.dest, payload }
    }
}
