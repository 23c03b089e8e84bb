//! The queue pair: its type, the IBTA state machine with the attribute
//! rules of `ibv_modify_qp`, and the state the requester, completer and
//! responder share. Each of the three works on a narrow view of the QP,
//! borrowed field by field here (`requester_parts`, `completer`,
//! `responder_parts`), so that its signature says what it can touch; what
//! one needs of another comes in as a value (the responder's `conversing`)
//! and what only the QP may do (move to ERR, flush both sides) goes out
//! as an outcome (`FatalNak`, `Failed`).

use crate::completer::{Completer, Failed};
use crate::cq::CqTable;
use crate::error::VerbsError;
use crate::framing::{Framer, PayloadRef};
use crate::memory::MemoryTable;
use crate::memory::{Access, Pd};
use crate::requester::{ReqOutcome, ReqQp, Requester};
use crate::responder::{AckHold, RespCtx, RespQp, Responder};
pub use crate::stats::QpStats;
use crate::time::Instant;
use crate::timers::{Timer, Timers};
use crate::wr::{RecvWr, WcStatus};
use core::net::IpAddr;
use rdma_wire::Psn;
use std::collections::VecDeque;

/// The transport service of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    Rc,
    Uc,
    Ud,
    /// XRC initiator (`IBV_QPT_XRC_SEND`): a send queue only; each request
    /// names the remote XRC SRQ (IBTA annex A14, docs/xrc.md).
    XrcSend,
    /// XRC target (`IBV_QPT_XRC_RECV`): the receive side only, in an XRC
    /// domain; requests land in the XRC SRQ their XRCETH names.
    XrcRecv,
}

impl QpType {
    /// Acknowledged, with the RC requester/responder/completer: RC and XRC.
    #[inline]
    pub fn reliable(self) -> bool {
        matches!(self, QpType::Rc | QpType::XrcSend | QpType::XrcRecv)
    }
}

/// An XRC domain (`ibv_xrcd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct XrcdId(pub u32);

/// `ibv_qp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    Reset,
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained: no new requests start.
    Sqd,
    /// Send queue error (UC/UD): the send queue stopped, receives go on.
    Sqe,
    Err,
}

impl QpState {
    /// Whether a QP in this state accepts packets on its receive side.
    pub(crate) fn receives(self) -> bool {
        matches!(self, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe)
    }
}

/// `ibv_mtu`: the path MTU, the largest payload of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    Mtu256 = 1,
    Mtu512 = 2,
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl Mtu {
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
    /// The MTU of exactly `bytes` bytes.
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096].into_iter().find(|m| m.bytes() == bytes)
    }
}

/// Where a connected QP sends (the address vector of `ibv_ah_attr`).
///
/// Over RoCE (v2 and v1) the peer is its GID, `dest`. Over native
/// InfiniBand it is its LID, `dlid`, with the service level `sl`; a GRH
/// (and so `dest`, `hop_limit` and `traffic_class`) goes with the packet
/// only when `dest` is set (not unspecified), as `is_global` in verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressVector {
    /// The peer's GID (for RoCE v2, its IP address).
    pub dest: IpAddr,
    /// IPv4 TTL / IPv6 hop limit (`grh.hop_limit`).
    pub hop_limit: u8,
    /// DSCP and ECN bits (`grh.traffic_class`).
    pub traffic_class: u8,
    /// The peer port's LID (native IB only; `ah_attr.dlid`).
    pub dlid: u16,
    /// Service level (native IB only; `ah_attr.sl`).
    pub sl: u8,
}

impl AddressVector {
    pub fn new(dest: IpAddr) -> AddressVector {
        AddressVector { dest, hop_limit: 64, traffic_class: 0, dlid: 0, sl: 0 }
    }

    /// A native IB local route to the port with LID `dlid` (no GRH).
    pub fn lid(dlid: u16, sl: u8) -> AddressVector {
        AddressVector { dlid, sl, ..AddressVector::new(IpAddr::V6(core::net::Ipv6Addr::UNSPECIFIED)) }
    }

    /// Whether packets to this address carry a GRH on native IB.
    pub fn is_global(&self) -> bool {
        !self.dest.is_unspecified()
    }

    /// The address vector a data packet (a request, a READ response)
    /// leaves with: ECN-capable transport, ECT(0), when `ecn_capable` and
    /// the traffic class leaves the ECN bits to the sender (00), so that a
    /// congested switch marks it CE instead of dropping it (RFC 3168, as
    /// DCQCN expects). ACKs and NAKs keep the traffic class as given.
    pub fn for_data(self, ecn_capable: bool) -> AddressVector {
        if ecn_capable && self.traffic_class & ECN_MASK == 0 {
            AddressVector { traffic_class: self.traffic_class | ECN_ECT0, ..self }
        } else {
            self
        }
    }
}

/// The ECN bits of a traffic class (the low two).
pub const ECN_MASK: u8 = 0b11;
/// ECN-capable transport, codepoint ECT(0).
pub const ECN_ECT0: u8 = 0b10;
/// Congestion experienced.
pub const ECN_CE: u8 = 0b11;

/// Capacities of a QP's queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> QpCap {
        QpCap { max_send_wr: 256, max_recv_wr: 256, max_send_sge: 8, max_recv_sge: 8, max_inline_data: 256 }
    }
}

/// A completion queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqId(pub usize);

/// A shared receive queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SrqId(pub usize);

/// What `create_qp` takes (`ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    pub qp_type: QpType,
    pub pd: Pd,
    pub send_cq: CqId,
    pub recv_cq: CqId,
    pub srq: Option<SrqId>,
    pub cap: QpCap,
    /// Every send request generates a completion, signaled or not.
    pub sq_sig_all: bool,
}

impl QpInitAttr {
    /// A QP of `qp_type` in `pd` completing into `cq` both ways, with no
    /// SRQ, the default capacities and only signaled sends completing.
    pub fn new(qp_type: QpType, pd: Pd, cq: CqId) -> QpInitAttr {
        QpInitAttr { qp_type, pd, send_cq: cq, recv_cq: cq, srq: None, cap: QpCap::default(), sq_sig_all: false }
    }
}

/// Attributes for `modify_qp` (`ibv_qp_attr`). A field set to `Some` is in
/// the attribute mask; which ones a transition requires follows
/// `ibv_modify_qp(3)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpAttr {
    pub qp_state: Option<QpState>,
    pub pkey_index: Option<u16>,
    pub port_num: Option<u8>,
    pub qp_access_flags: Option<Access>,
    pub qkey: Option<u32>,
    pub path_mtu: Option<Mtu>,
    pub dest_qp_num: Option<u32>,
    pub rq_psn: Option<u32>,
    pub sq_psn: Option<u32>,
    pub av: Option<AddressVector>,
    /// Local ACK timeout exponent: 4.096 us x 2^timeout, 0 = none.
    pub timeout: Option<u8>,
    pub retry_cnt: Option<u8>,
    /// 7 means retry forever.
    pub rnr_retry: Option<u8>,
    /// The RNR NAK timer code this QP's responder advertises.
    pub min_rnr_timer: Option<u8>,
    pub max_rd_atomic: Option<u8>,
    pub max_dest_rd_atomic: Option<u8>,
}

/// The attributes in force on a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpParams {
    pub access: Access,
    pub qkey: u32,
    pub mtu: Mtu,
    pub dest_qp: u32,
    pub av: Option<AddressVector>,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub pkey: u16,
}

impl Default for QpParams {
    fn default() -> QpParams {
        QpParams {
            access: Access::NONE,
            qkey: 0,
            mtu: Mtu::Mtu1024,
            dest_qp: 0,
            av: None,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            pkey: 0xffff,
        }
    }
}

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
    pub(crate) cc: Option<Box<crate::cc::wired::QpCc>>,
    /// The XRC domain of an XRC_RECV QP.
    pub xrcd: Option<XrcdId>,
    /// An XRC_RECV QP's target for the packet being handled (and the READ
    /// responses it queued): the named XRC SRQ, its PD and its CQ.
    pub(crate) xrc_target: Option<(SrqId, Pd, CqId)>,
    /// Handles `ibv_open_qp` gave to this XRC_RECV QP besides its own:
    /// each destroy takes one, the last removes the QP.
    pub(crate) opens: u32,
    /// The deadline the endpoint's agenda has this QP under (a cell: the
    /// agenda refreshes from `&self`, see `endpoint/agenda.rs`).
    pub(crate) indexed_deadline: core::cell::Cell<Option<Instant>>,
}

impl Qp {
    /// The QP's next deadline: its own timers' and congestion control's.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let cc = self.cc.as_deref().and_then(crate::cc::wired::QpCc::next_timer);
        self.timers.next().into_iter().chain(cc).min()
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
            indexed_deadline: core::cell::Cell::new(None),
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
