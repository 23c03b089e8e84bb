//! The IB CM connection state machine (REQ/REP/RTU, REJ, DREQ/DREP), sans
//! IO. It drives a [`CmHost`] (an [`Endpoint`], or the engines of a device): QPs with
//! `modify_qp`, MADs with `gsi_send`/`poll_mad`/`poll_mad_timeout`. The
//! GSI retransmits MADs; the CM keeps only its time-wait timer.
//!
//! One connection shares one transaction ID from REQ to RTU (as Linux
//! does), so the GSI matches REP to REQ and RTU to REP and stops their
//! retransmission. A DREQ and its DREP share another.
//!
//! PSNs follow rdma_cm (§3.4 of the CM notes): the starting PSN a side
//! advertises (REQ or REP) is the one it *receives* from (its RTR
//! `rq_psn`); it sends from the peer's (its RTS `sq_psn`). The passive
//! side moves its QP to RTS before the REP leaves, as librdmacm does, so
//! its first data may precede the RTU.
//!
//! A repeated REQ while the consumer decides gets an MRA; an MRA received
//! for our REQ or REP stretches that send's retransmission timer. A REQ
//! from a peer whose QP (and CA GUID) is still connected under another
//! communication ID is stale: REJ 10, and the old connection is torn down.
//!
//! SIDR (service ID resolution, for UD QPs) is in `sidr.rs`.
//!
//! A passive connection whose QP receives the peer's data before the RTU
//! is established then (IB's "communication established").
//!
//! The consumer may move its QP itself (rdma_cm's "external QP":
//! [`ConnParams::consumer_moves_qp`]): the CM then names the QP in its
//! messages and never modifies it; [`Cm::init_qp_attr`] gives the
//! attributes for each state (Linux's `ib_cm_init_qp_attr`), the active
//! side gets [`CmEvent::ConnectResponse`] for the REP and sends the RTU
//! with [`Cm::establish`].
//!
//! Not here yet: LAP/APR (not used on RoCE), and a real time-wait (a
//! fixed [`CmConfig::timewait`] instead of the packet lifetime).

use crate::endpoint::Endpoint;
use crate::memory::Access;
use crate::qp::{AddressVector, Mtu, QpAttr, QpState};
use crate::time::Instant;
use core::net::IpAddr;
use core::time::Duration;
pub use host::CmHost;
use rdma_wire::cm::{
    msg, transport_type, CmMadRepr, CmMessage, DrepRepr, DreqRepr, MraRepr, PathRepr, RejReason, RejRepr, RepRepr,
    ReqRepr, RtuRepr, DREP_PRIVATE_DATA_LEN, DREQ_PRIVATE_DATA_LEN, MRA_PRIVATE_DATA_LEN, REJ_ARI_LEN,
    REJ_PRIVATE_DATA_LEN, REP_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN, RTU_PRIVATE_DATA_LEN, SIDR_REP_PRIVATE_DATA_LEN,
    SIDR_REQ_PRIVATE_DATA_LEN,
};
use rdma_wire::mad::{Mad, MAD_LEN};
use std::collections::{HashMap, VecDeque};

mod host;
mod receive;
mod sidr;

/// A connection, named by its local communication ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId(pub u32);

/// What the consumer learns from [`Cm::poll_event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a listened service: answer with [`Cm::accept`] or [`Cm::reject`].
    ConnectRequest {
        id: ConnId,
        from: IpAddr,
        service_id: u64,
        /// The active side's QPN.
        remote_qpn: u32,
        private_data: [u8; REQ_PRIVATE_DATA_LEN],
    },
    /// The QP is in RTS and connected to `remote_qpn`.
    Established { id: ConnId, qpn: u32, remote_qpn: u32 },
    /// Active, the consumer moving its QP: the REP arrived. Take the QP
    /// to RTR and RTS ([`Cm::init_qp_attr`]), then [`Cm::establish`].
    ConnectResponse { id: ConnId, remote_qpn: u32 },
    Rejected {
        id: ConnId,
        reason: RejReason,
        /// The REJ's private data (148 bytes, zero-padded by the peer).
        private_data: Box<[u8; REJ_PRIVATE_DATA_LEN]>,
    },
    /// The peer never answered (REQ or REP retries ran out).
    TimedOut { id: ConnId },
    /// DREQ/DREP done (or the DREQ timed out); the QP is in ERR.
    Disconnected { id: ConnId },
    /// A QP transition the CM asked for failed (e.g. values from the peer
    /// the QP refuses); the QP is moved to ERR and a REJ sent.
    QpError { id: ConnId },
    /// The time-wait after a disconnect ended: the connection is forgotten.
    TimewaitExit { id: ConnId },
    /// A SIDR_REQ for a listened service: answer with [`Cm::sidr_reply`].
    SidrRequest { id: ConnId, from: IpAddr, service_id: u64, private_data: Box<[u8; SIDR_REQ_PRIVATE_DATA_LEN]> },
    /// The answer to our [`Cm::sidr_request`] (`id` is its request ID).
    SidrReply {
        id: ConnId,
        /// See `rdma_wire::cm::sidr_status`.
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: Box<[u8; SIDR_REP_PRIVATE_DATA_LEN]>,
    },
}

/// Settings of one CM.
#[derive(Debug, Clone, Copy)]
pub struct CmConfig {
    /// How long a REQ, REP or DREQ waits for its answer before the GSI
    /// sends it again.
    pub response_timeout: Duration,
    /// Retries of those sends.
    pub max_retries: u8,
    /// How long a closed connection is remembered to answer duplicates.
    pub timewait: Duration,
    /// First local communication ID handed out (differs per node so that
    /// peers do not see the same IDs after a restart).
    pub first_comm_id: u32,
    pub ca_guid: u64,
    /// Connections (any state, time-wait included) past which a new REQ
    /// is dropped unanswered: what a flood of REQs with fresh
    /// communication IDs can make this CM hold.
    pub max_connections: usize,
    /// Fixed top bits of every local communication ID (and SIDR request
    /// ID): on a device that several processes share, the host steers a
    /// peer's replies to the process by them (see rdma-core-rs's `share`).
    pub comm_id_prefix: Option<CommIdPrefix>,
}

/// The top `bits` bits of a local communication ID, set to `value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommIdPrefix {
    pub value: u32,
    pub bits: u32,
}

impl CommIdPrefix {
    /// `id` with its top bits replaced by the prefix.
    pub fn apply(self, id: u32) -> u32 {
        let low = u32::MAX.checked_shr(self.bits).unwrap_or(0);
        (id & low) | (self.value.checked_shl(32 - self.bits).unwrap_or(0) & !low)
    }
}

impl Default for CmConfig {
    fn default() -> CmConfig {
        CmConfig {
            response_timeout: Duration::from_millis(50),
            max_retries: 3,
            timewait: Duration::from_millis(100),
            first_comm_id: 0x1000,
            ca_guid: 0,
            max_connections: MAX_CONNECTIONS,
            comm_id_prefix: None,
        }
    }
}

/// What a side puts into its REQ or REP and its QP.
#[derive(Debug, Clone, Copy)]
pub struct ConnParams {
    pub starting_psn: u32,
    /// RDMA READ/atomic requests we accept at once (our max_dest_rd_atomic).
    pub responder_resources: u8,
    /// RDMA READ/atomic requests we issue at once (our max_rd_atomic).
    pub initiator_depth: u8,
    pub path_mtu: Mtu,
    /// Local ACK timeout exponent the peer should... and we use.
    pub local_ack_timeout: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub min_rnr_timer: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// Access flags given to the QP at INIT if the CM moves it there.
    pub access: Access,
    /// The consumer moves the QP through its states (with
    /// [`Cm::init_qp_attr`]); the CM never modifies it, not even to ERR.
    pub consumer_moves_qp: bool,
    /// The vendor ID field of our REQ or REP: where Linux carries the
    /// ECE vendor ID (`rdma_set_local_ece`).
    pub vendor_id: u32,
}

impl Default for ConnParams {
    fn default() -> ConnParams {
        ConnParams {
            starting_psn: 0,
            responder_resources: 1,
            initiator_depth: 1,
            path_mtu: Mtu::Mtu1024,
            local_ack_timeout: 14,
            retry_count: 7,
            rnr_retry_count: 7,
            min_rnr_timer: 12,
            hop_limit: 64,
            traffic_class: 0,
            access: Access::ALL,
            consumer_moves_qp: false,
            vendor_id: 0,
        }
    }
}

/// The values a connection's QP takes at INIT, RTR and RTS, as the REQ
/// and REP settle them (what Linux's `ib_cm_init_qp_attr` reads from its
/// cm_id): the CM applies them itself, or hands them to a consumer that
/// moves its own QP.
#[derive(Debug, Clone, Copy)]
struct QpPlan {
    access: Access,
    path_mtu: Mtu,
    /// Ours: the PSN we advertised and receive from.
    rq_psn: u32,
    /// The peer's advertised PSN, which we send from.
    sq_psn: u32,
    max_dest_rd_atomic: u8,
    max_rd_atomic: u8,
    min_rnr_timer: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    hop_limit: u8,
    traffic_class: u8,
}

impl QpPlan {
    /// The attributes (and only those) that take the QP to `state`:
    /// INIT, RTR or RTS; `None` for any other state.
    fn attr(&self, ep: &Endpoint, peer: IpAddr, remote_qpn: u32, state: QpState) -> Option<QpAttr> {
        Some(match state {
            QpState::Init => QpAttr {
                qp_state: Some(QpState::Init),
                pkey_index: Some(0),
                port_num: Some(1),
                qp_access_flags: Some(self.access),
                ..QpAttr::default()
            },
            QpState::Rtr => QpAttr {
                qp_state: Some(QpState::Rtr),
                path_mtu: Some(self.path_mtu),
                dest_qp_num: Some(remote_qpn),
                rq_psn: Some(self.rq_psn),
                av: Some(AddressVector {
                    hop_limit: self.hop_limit,
                    traffic_class: self.traffic_class,
                    ..ep.route(peer)
                }),
                max_dest_rd_atomic: Some(self.max_dest_rd_atomic),
                min_rnr_timer: Some(self.min_rnr_timer),
                ..QpAttr::default()
            },
            QpState::Rts => QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(self.sq_psn),
                timeout: Some(self.timeout),
                retry_cnt: Some(self.retry_cnt),
                rnr_retry: Some(self.rnr_retry),
                max_rd_atomic: Some(self.max_rd_atomic),
                ..QpAttr::default()
            },
            _ => return None,
        })
    }

    /// Passive: what the REQ asks for, before the consumer's answer
    /// (Linux's values in REQ_RCVD: the REQ's depths swapped, its MTU,
    /// its PSN to send from; our receive PSN is the consumer's to pick).
    fn from_req(req: &ReqRepr, min_rnr_timer: u8) -> QpPlan {
        QpPlan {
            access: Access::ALL,
            path_mtu: mtu_from_wire(req.path_mtu).unwrap_or(Mtu::Mtu1024),
            rq_psn: 0,
            sq_psn: req.starting_psn,
            max_dest_rd_atomic: req.initiator_depth,
            max_rd_atomic: req.responder_resources,
            min_rnr_timer,
            timeout: req.primary_path.local_ack_timeout,
            retry_cnt: req.retry_count,
            rnr_retry: req.rnr_retry_count,
            hop_limit: req.primary_path.hop_limit,
            traffic_class: req.primary_path.traffic_class,
        }
    }

    /// Active: what our REQ offered and the REP answered (swapped: the
    /// peer's responder resources are our initiator depth).
    fn from_rep(p: &ConnParams, rep: &RepRepr) -> QpPlan {
        QpPlan {
            access: p.access,
            path_mtu: p.path_mtu,
            // rdma_cm: we receive from the PSN we advertised.
            rq_psn: p.starting_psn,
            sq_psn: rep.starting_psn,
            max_dest_rd_atomic: rep.initiator_depth,
            max_rd_atomic: rep.responder_resources,
            min_rnr_timer: p.min_rnr_timer,
            timeout: p.local_ack_timeout,
            retry_cnt: p.retry_count,
            rnr_retry: rep.rnr_retry_count,
            hop_limit: p.hop_limit,
            traffic_class: p.traffic_class,
        }
    }
}

/// Counters of what the CM could not use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmStats {
    /// MADs that are not CM messages or do not parse.
    pub malformed: u64,
    /// Sound CM messages for no connection or in the wrong state.
    pub unexpected: u64,
    /// REPs sent again for a repeated REQ.
    pub rep_resent: u64,
    /// MRAs sent for a REQ repeated while the consumer decides.
    pub mra_sent: u64,
    /// MRAs received that stretched one of our sends.
    pub mra_received: u64,
    /// REQs refused as stale (REJ 10).
    pub stale_rejected: u64,
    /// Passive connections established by the peer's first data packet
    /// (its RTU lost or late).
    pub established_by_data: u64,
    /// REJs sent again for a repeated REQ the consumer had rejected.
    pub rej_resent: u64,
    /// REQs and SIDR_REQs dropped unanswered because their service had
    /// its backlog of requests waiting for the consumer (the peer retries,
    /// as after Linux's ucma backlog).
    pub backlog_dropped: u64,
    /// REQs dropped unanswered because the CM held `max_connections`.
    pub table_full: u64,
    /// GET/SET MADs of a class no one here serves, answered with
    /// GET_RESP status "unsupported method/attribute" (as Linux's MAD layer).
    pub unsupported_answered: u64,
}

/// Requests a listened service may have waiting for the consumer's
/// answer (`ConnectRequest`, `SidrRequest` not yet accepted or rejected)
/// unless `listen_with_backlog` says fewer: Linux's default
/// `net.rdma_ucm.max_backlog`.
pub const DEFAULT_BACKLOG: u32 = 1024;

/// Default [`CmConfig::max_connections`].
pub const MAX_CONNECTIONS: usize = 1 << 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Active: REQ sent, waiting for REP or REJ.
    ReqSent,
    /// Active, the consumer moving its QP: REP reported, waiting for
    /// `establish` (which sends the RTU).
    RepRcvd,
    /// Passive: REQ reported, waiting for `accept`/`reject`.
    ReqRcvd,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    Established,
    DreqSent,
    /// Closed; kept until `until` to answer duplicates.
    TimeWait {
        until: Instant,
    },
    /// Passive: the consumer rejected the REQ; kept until `until` to
    /// answer its repeats with the same REJ, then forgotten silently (the
    /// consumer already let the request go: no time-wait event).
    Rejected {
        until: Instant,
    },
}

#[derive(Debug, Clone)]
struct Conn {
    local_id: u32,
    remote_id: u32,
    peer: IpAddr,
    qpn: Option<u32>,
    remote_qpn: u32,
    state: State,
    /// The REQ/REP/RTU transaction ID.
    tid: u64,
    dreq_tid: u64,
    params: ConnParams,
    /// Passive: the REQ, whose fields the QP takes.
    req: Option<ReqRepr>,
    /// Passive: the REP or REJ that answered the REQ, to send again on a
    /// repeated REQ.
    reply: Option<[u8; MAD_LEN]>,
    /// The last DREP sent, to send again on a repeated DREQ.
    drep: Option<[u8; MAD_LEN]>,
    /// Active: the REP's private data, for the consumer.
    rep_private_data: Option<Box<[u8; REP_PRIVATE_DATA_LEN]>>,
    /// What the QP takes, once the REQ (passive) or REP (active) settled it.
    plan: Option<QpPlan>,
    /// The vendor ID of the peer's REQ or REP (its ECE vendor ID).
    remote_vendor_id: u32,
    /// The peer's CA GUID (from its REQ or REP): with its QPN, what stale
    /// connections are recognised by.
    remote_ca_guid: u64,
    /// Negotiated: our max_rd_atomic.
    initiator_depth: u8,
}

/// Errors of the consumer-facing calls (never of network input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmError {
    NoSuchConn(ConnId),
    /// The call does not fit the connection's state.
    WrongState(ConnId),
    PrivateDataTooLong,
    Verbs(crate::error::VerbsError),
}

impl From<crate::error::VerbsError> for CmError {
    fn from(e: crate::error::VerbsError) -> CmError {
        CmError::Verbs(e)
    }
}

/// The CM of one endpoint. It owns the endpoint's MAD receive queue:
/// [`Cm::process`] takes every MAD and counts what is not CM.
#[derive(Debug, Clone)]
pub struct Cm {
    config: CmConfig,
    conns: Vec<Conn>,
    /// Listened services and their backlogs.
    listens: HashMap<u64, u32>,
    events: VecDeque<CmEvent>,
    next_id: u32,
    stats: CmStats,
    sidr: sidr::SidrTable,
    /// The latest time `process` or `handle_timeout` was given: when the
    /// consumer's calls between them happen.
    now: Instant,
}

fn gid(a: IpAddr) -> core::net::Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

fn mtu_from_wire(v: u8) -> Option<Mtu> {
    [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu4096].into_iter().find(|m| *m as u8 == v)
}

/// The service timeout our MRAs name: 24, about 68.7 s, as Linux sends.
pub const MRA_SERVICE_TIMEOUT: u8 = 24;

/// 4.096 µs × 2^`exp` (a CM timeout field), capped at exponent 31.
pub fn cm_time(exp: u8) -> Duration {
    Duration::from_nanos(4096u64 << exp.min(31))
}

/// Linux's `cm_convert_to_ms`: 4.096 µs × 2^`t`, taken as 2^(t − 8) ms.
pub fn cm_convert_to_ms(t: u8) -> Duration {
    Duration::from_millis(1u64 << t.saturating_sub(8).min(31))
}

/// The longest a REQ may make us wait per try for its next step: the
/// exponent 23 (about 33 s, and 9 minutes over 15 retries). The field goes
/// to 31 (2.3 hours a try): a peer naming it would pin a connection slot
/// for a day and a half with a REQ it never follows up.
pub const MAX_PEER_RESPONSE_TIMEOUT: Duration = Duration::from_millis(1 << 15);

/// How long a REQ's sender asked us to wait for it, capped.
fn peer_timeout(req: &ReqRepr) -> Duration {
    cm_convert_to_ms(req.local_cm_response_timeout).min(MAX_PEER_RESPONSE_TIMEOUT)
}

/// The CM response timeout exponent (4.096 µs × 2^x) covering `d`.
fn timeout_exp(d: Duration) -> u8 {
    let ns = d.as_nanos();
    (0u8..31).find(|x| 4096u128 << x >= ns).unwrap_or(31)
}

fn emit(tid: u64, message: CmMessage) -> [u8; MAD_LEN] {
    let mut b = [0u8; MAD_LEN];
    let repr = CmMadRepr { transaction_id: tid, attribute_modifier: 0, message };
    // Our own Reprs always fit a 256-byte MAD.
    if let Ok(mut m) = Mad::new_checked(&mut b[..]) {
        let _ = repr.emit(&mut m);
    }
    b
}

fn pad<const N: usize>(data: &[u8]) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    out.get_mut(..data.len())?.copy_from_slice(data);
    Some(out)
}

fn rej_mad(tid: u64, local_id: u32, remote_id: u32, rejected: u8, reason: RejReason) -> [u8; MAD_LEN] {
    emit(
        tid,
        CmMessage::Rej(RejRepr {
            local_comm_id: local_id,
            remote_comm_id: remote_id,
            message_rejected: rejected,
            ari_length: 0,
            reason,
            ari: [0; REJ_ARI_LEN],
            private_data: [0; REJ_PRIVATE_DATA_LEN],
        }),
    )
}

impl Cm {
    pub fn new(config: CmConfig) -> Cm {
        Cm {
            config,
            conns: Vec::new(),
            listens: HashMap::new(),
            events: VecDeque::new(),
            next_id: config.first_comm_id.max(1),
            stats: CmStats::default(),
            sidr: sidr::SidrTable::default(),
            now: Instant::ZERO,
        }
    }

    pub fn stats(&self) -> CmStats {
        self.stats
    }

    /// Listens for `service_id` with the default backlog ([`DEFAULT_BACKLOG`]).
    pub fn listen(&mut self, service_id: u64) {
        self.listen_with_backlog(service_id, DEFAULT_BACKLOG);
    }

    /// Listens for `service_id`; at most `backlog` of its requests wait for
    /// the consumer at once (0 or above [`DEFAULT_BACKLOG`]: that, as ucma
    /// clamps `rdma_listen`'s), more are dropped unanswered.
    pub fn listen_with_backlog(&mut self, service_id: u64, backlog: u32) {
        let backlog = if backlog == 0 { DEFAULT_BACKLOG } else { backlog.min(DEFAULT_BACKLOG) };
        self.listens.insert(service_id, backlog);
    }

    /// Whether `service_id` is listened and its backlog has room for one
    /// more request; counts the drop if it has none.
    fn backlog_room(&mut self, service_id: u64) -> bool {
        let Some(&backlog) = self.listens.get(&service_id) else { return false };
        let waiting = self
            .conns
            .iter()
            .filter(|c| c.state == State::ReqRcvd && c.req.is_some_and(|r| r.service_id == service_id))
            .count()
            + self.sidr.waiting(service_id);
        if waiting < backlog as usize {
            return true;
        }
        tracing::debug!(service_id, backlog, "backlog full: request dropped unanswered");
        self.stats.backlog_dropped += 1;
        false
    }

    /// Stops listening: REQs for `service_id` get REJ 8 again.
    pub fn unlisten(&mut self, service_id: u64) {
        self.listens.remove(&service_id);
    }

    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// Connections not yet forgotten (time-wait included).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// The CM's own timer: the end of the earliest time-wait.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns
            .iter()
            .filter_map(|c| match c.state {
                State::TimeWait { until } | State::Rejected { until } => Some(until),
                _ => None,
            })
            .min()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let events = &mut self.events;
        self.conns.retain(|c| match c.state {
            State::TimeWait { until } if until <= now => {
                events.push_back(CmEvent::TimewaitExit { id: ConnId(c.local_id) });
                false
            }
            State::Rejected { until } => until > now,
            _ => true,
        });
    }

    /// Passive: the REQ a [`CmEvent::ConnectRequest`] reported, while the
    /// connection exists (its counters, retry counts, path, private data).
    pub fn request(&self, id: ConnId) -> Option<&ReqRepr> {
        self.conns.iter().find(|c| c.local_id == id.0)?.req.as_ref()
    }

    /// Active: the private data of the REP that established `id`.
    pub fn rep_private_data(&self, id: ConnId) -> Option<&[u8; REP_PRIVATE_DATA_LEN]> {
        self.conns.iter().find(|c| c.local_id == id.0)?.rep_private_data.as_deref()
    }

    /// Active: what the REP offered — (its responder resources, its
    /// initiator depth), i.e. our (initiator depth, responder resources).
    pub fn negotiated_depths(&self, id: ConnId) -> Option<(u8, u8)> {
        let c = self.conns.iter().find(|c| c.local_id == id.0)?;
        Some((c.initiator_depth, c.params.responder_resources))
    }

    /// The attributes that take connection `id`'s QP to `state` (INIT,
    /// RTR or RTS), as Linux's `ib_cm_init_qp_attr` gives them: INIT from
    /// the start; RTR and RTS once the REQ (passive) or the REP (active)
    /// is in. For a consumer that moves its own QP; the receive PSN of a
    /// passive side before its `accept` is 0 (the consumer picks it: the
    /// RDMA CM puts its ID's PSN there, as Linux's `rdma_init_qp_attr`).
    pub fn init_qp_attr(&self, ep: &Endpoint, id: ConnId, state: QpState) -> Result<QpAttr, CmError> {
        let c = &self.conns[self.find(id)?];
        let ready = matches!(c.state, State::ReqRcvd | State::RepRcvd | State::RepSent | State::Established);
        match (state, c.plan) {
            (QpState::Init, None) if c.state == State::ReqSent => Ok(QpAttr {
                qp_state: Some(QpState::Init),
                pkey_index: Some(0),
                port_num: Some(1),
                qp_access_flags: Some(c.params.access),
                ..QpAttr::default()
            }),
            (QpState::Init | QpState::Rtr | QpState::Rts, Some(plan)) if ready => {
                plan.attr(ep, c.peer, c.remote_qpn, state).ok_or(CmError::WrongState(id))
            }
            _ => Err(CmError::WrongState(id)),
        }
    }

    /// Active, the consumer moving its QP: after [`CmEvent::ConnectResponse`]
    /// (and the QP in RTS), sends the RTU. The connection is established;
    /// no event follows (librdmacm's `rdma_establish`).
    pub fn establish(&mut self, host: &mut dyn CmHost, id: ConnId) -> Result<(), CmError> {
        let i = self.find(id)?;
        let c = &self.conns[i];
        if c.state != State::RepRcvd {
            return Err(CmError::WrongState(id));
        }
        let rtu = emit(
            c.tid,
            CmMessage::Rtu(RtuRepr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                private_data: [0; RTU_PRIVATE_DATA_LEN],
            }),
        );
        self.send(host, c.peer, rtu, false);
        self.conns[i].state = State::Established;
        Ok(())
    }

    /// The vendor ID of the peer's REQ (passive) or REP (active): its ECE
    /// vendor ID, 0 from a peer that sets none.
    pub fn remote_vendor_id(&self, id: ConnId) -> Option<u32> {
        Some(self.conns.iter().find(|c| c.local_id == id.0)?.remote_vendor_id)
    }

    /// Forgets a connection at once, whatever its state (the consumer
    /// destroyed its ID): no event, no message. The QP is the consumer's.
    pub fn forget(&mut self, id: ConnId) {
        self.conns.retain(|c| c.local_id != id.0);
    }

    fn alloc_id(&mut self) -> u32 {
        // Skip 0 (means "unknown" in a REJ) and IDs still in use.
        loop {
            let id = match self.config.comm_id_prefix {
                Some(p) => p.apply(self.next_id),
                None => self.next_id,
            };
            self.next_id = self.next_id.wrapping_add(1);
            if id != 0 && !self.conns.iter().any(|c| c.local_id == id) {
                return id;
            }
        }
    }

    fn find(&self, id: ConnId) -> Result<usize, CmError> {
        self.conns.iter().position(|c| c.local_id == id.0).ok_or(CmError::NoSuchConn(id))
    }

    /// A REP waits for its RTU as long as the REQ asked (its local CM
    /// response timeout, `max_cm_retries` times), as Linux's passive side,
    /// but no longer than [`MAX_PEER_RESPONSE_TIMEOUT`] per try.
    ///
    /// Returns the transaction ID it went with: the REQ's, or a fresh one
    /// where the REQ's was 0 (the GSI's "pick one"), which the connection
    /// must then know its REP's timeout report by.
    fn send_rep(host: &mut dyn CmHost, dest: IpAddr, rep: [u8; MAD_LEN], req: &ReqRepr) -> Option<u64> {
        host.gsi().gsi_send(dest, rep, Some(peer_timeout(req)), req.max_cm_retries).ok()
    }

    fn send(&self, host: &mut dyn CmHost, dest: IpAddr, mad: [u8; MAD_LEN], expect: bool) {
        let timeout = expect.then_some(self.config.response_timeout);
        // Refused only if that transaction already waits for its answer:
        // then the copy in flight does the job.
        let _ = host.gsi().gsi_send(dest, mad, timeout, if expect { self.config.max_retries } else { 0 });
    }

    fn to_init(host: &mut dyn CmHost, qpn: u32, access: Access) -> Result<(), CmError> {
        let state = host.qp_state(qpn)?;
        if state == QpState::Reset {
            let init = QpAttr {
                qp_state: Some(QpState::Init),
                pkey_index: Some(0),
                port_num: Some(1),
                qp_access_flags: Some(access),
                ..QpAttr::default()
            };
            host.modify_qp(qpn, &init)?;
        }
        Ok(())
    }

    /// Active side: moves `qpn` to INIT if it is in RESET and sends a REQ
    /// for `service_id` to `dest`.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        &mut self,
        host: &mut dyn CmHost,
        qpn: u32,
        dest: IpAddr,
        service_id: u64,
        private_data: &[u8],
        params: ConnParams,
    ) -> Result<ConnId, CmError> {
        let private_data = pad::<REQ_PRIVATE_DATA_LEN>(private_data).ok_or(CmError::PrivateDataTooLong)?;
        if !params.consumer_moves_qp {
            Self::to_init(host, qpn, params.access)?;
        }
        let local_id = self.alloc_id();
        let exp = timeout_exp(self.config.response_timeout);
        let ib = host.gsi().link() == crate::framing::LinkKind::Ib;
        let req = ReqRepr {
            local_comm_id: local_id,
            vendor_id: params.vendor_id & 0xff_ffff,
            service_id,
            local_ca_guid: self.config.ca_guid,
            local_qkey: 0,
            local_qpn: qpn,
            responder_resources: params.responder_resources,
            local_eecn: 0,
            initiator_depth: params.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: exp,
            transport_service_type: transport_type::RC,
            end_to_end_flow_control: false,
            starting_psn: params.starting_psn,
            local_cm_response_timeout: exp,
            retry_count: params.retry_count,
            pkey: 0xffff,
            path_mtu: params.path_mtu as u8,
            rdc_exists: false,
            rnr_retry_count: params.rnr_retry_count,
            max_cm_retries: self.config.max_retries.min(15),
            srq: false,
            extended_transport_type: 0,
            primary_path: PathRepr {
                // RoCE: the permissive LID, as rdma_cm writes; native IB:
                // the LIDs of the route.
                local_lid: if ib { host.gsi().lid() } else { 0xffff },
                remote_lid: if ib { host.gsi().route(dest).dlid } else { 0xffff },
                local_gid: gid(host.gsi().local_addr()),
                remote_gid: gid(dest),
                traffic_class: params.traffic_class,
                hop_limit: params.hop_limit,
                local_ack_timeout: params.local_ack_timeout,
                ..PathRepr::ZERO
            },
            alternate_path: PathRepr::ZERO,
            sap_supported: false,
            private_data,
        };
        let tid = host.gsi().gsi_send(
            dest,
            emit(0, CmMessage::Req(req)),
            Some(self.config.response_timeout),
            self.config.max_retries,
        )?;
        self.conns.push(Conn {
            local_id,
            remote_id: 0,
            peer: dest.to_canonical(),
            qpn: Some(qpn),
            remote_qpn: 0,
            state: State::ReqSent,
            tid,
            dreq_tid: 0,
            params,
            req: None,
            reply: None,
            drep: None,
            rep_private_data: None,
            plan: None,
            remote_vendor_id: 0,
            remote_ca_guid: 0,
            initiator_depth: 0,
        });
        Ok(ConnId(local_id))
    }

    /// Passive side: takes `qpn` (RESET or INIT) to RTR with the REQ's
    /// fields and sends the REP. The depths are the smaller of ours and
    /// what the REQ offers, swapped (its initiator depth bounds our
    /// responder resources and the reverse).
    pub fn accept(
        &mut self,
        host: &mut dyn CmHost,
        id: ConnId,
        qpn: u32,
        private_data: &[u8],
        params: ConnParams,
    ) -> Result<(), CmError> {
        let i = self.find(id)?;
        let c = &self.conns[i];
        let (State::ReqRcvd, Some(req)) = (c.state, c.req) else {
            return Err(CmError::WrongState(id));
        };
        let private_data = pad::<REP_PRIVATE_DATA_LEN>(private_data).ok_or(CmError::PrivateDataTooLong)?;
        let responder_resources = params.responder_resources.min(req.initiator_depth);
        let initiator_depth = params.initiator_depth.min(req.responder_resources);
        let (peer, tid, remote_id) = (c.peer, c.tid, c.remote_id);
        // Checked on receipt of the REQ.
        let mtu = mtu_from_wire(req.path_mtu).unwrap_or(Mtu::Mtu1024).min_by_bytes(params.path_mtu);
        let plan = QpPlan {
            access: params.access,
            path_mtu: mtu,
            rq_psn: params.starting_psn,
            max_dest_rd_atomic: responder_resources,
            max_rd_atomic: initiator_depth,
            ..QpPlan::from_req(&req, params.min_rnr_timer)
        };
        if !params.consumer_moves_qp {
            // RTS before the REP leaves, as librdmacm does: the active side
            // may send as soon as it has the REP, before our RTU arrives.
            let remote_qpn = req.local_qpn;
            let moved = Self::to_init(host, qpn, params.access).and_then(|_| {
                for state in [QpState::Rtr, QpState::Rts] {
                    let attr = plan.attr(host.gsi(), peer, remote_qpn, state).expect("RTR and RTS have attributes");
                    host.modify_qp(qpn, &attr)?;
                }
                Ok(())
            });
            if let Err(e) = moved {
                // The consumer's QP is not usable: the peer must not wait.
                self.send(host, peer, rej_mad(tid, id.0, remote_id, msg::REQ, RejReason::NO_QP), false);
                self.conns.remove(i);
                return Err(e);
            }
        }
        let rep = emit(
            tid,
            CmMessage::Rep(RepRepr {
                local_comm_id: id.0,
                remote_comm_id: remote_id,
                local_qkey: 0,
                local_qpn: qpn,
                vendor_id: params.vendor_id & 0xff_ffff,
                local_eecn: 0,
                starting_psn: params.starting_psn,
                responder_resources,
                initiator_depth,
                target_ack_delay: 0,
                failover_accepted: 0,
                end_to_end_flow_control: false,
                rnr_retry_count: params.rnr_retry_count,
                srq: false,
                local_ca_guid: self.config.ca_guid,
                private_data,
            }),
        );
        let mut rep = rep;
        let c = &mut self.conns[i];
        if let Some(used) = Self::send_rep(host, peer, rep, &req) {
            c.tid = used;
            Mad::new_unchecked(&mut rep[..]).set_transaction_id(used);
        }
        c.qpn = Some(qpn);
        c.state = State::RepSent;
        c.reply = Some(rep);
        c.params = params;
        c.plan = Some(plan);
        c.initiator_depth = initiator_depth;
        Ok(())
    }

    /// Passive side: refuses a reported REQ, with up to 148 bytes of
    /// private data for the peer.
    pub fn reject(
        &mut self,
        host: &mut dyn CmHost,
        id: ConnId,
        reason: RejReason,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let private_data = pad::<REJ_PRIVATE_DATA_LEN>(private_data).ok_or(CmError::PrivateDataTooLong)?;
        let i = self.find(id)?;
        let c = &self.conns[i];
        if c.state != State::ReqRcvd {
            return Err(CmError::WrongState(id));
        }
        let rej = emit(
            c.tid,
            CmMessage::Rej(RejRepr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                message_rejected: msg::REQ,
                ari_length: 0,
                reason,
                ari: [0; REJ_ARI_LEN],
                private_data,
            }),
        );
        self.send(host, c.peer, rej, false);
        let until = self.now + self.rejected_for(c.req.as_ref());
        let c = &mut self.conns[i];
        c.state = State::Rejected { until };
        c.reply = Some(rej);
        Ok(())
    }

    /// How long a rejected REQ is remembered: through every repeat the
    /// peer may still send (its CM response timeout, its retries), so that
    /// a lost REJ's repeat gets the REJ again, never a second request; at
    /// least the time-wait.
    fn rejected_for(&self, req: Option<&ReqRepr>) -> Duration {
        let repeats = req.map_or(Duration::ZERO, |r| peer_timeout(r) * (u32::from(r.max_cm_retries) + 1));
        repeats.max(self.config.timewait)
    }

    /// Either side: moves the QP to ERR and sends a DREQ. After the
    /// peer's DREQ (answered already, DISCONNECTED reported) it only moves
    /// the QP to ERR, as `rdma_disconnect` does then.
    pub fn disconnect(&mut self, host: &mut dyn CmHost, id: ConnId) -> Result<(), CmError> {
        let i = self.find(id)?;
        let c = &self.conns[i];
        if matches!(c.state, State::TimeWait { .. }) && c.drep.is_some() {
            host.to_err(c.moved_qpn());
            return Ok(());
        }
        if c.state != State::Established {
            return Err(CmError::WrongState(id));
        }
        host.to_err(c.moved_qpn());
        let dreq = emit(
            0,
            CmMessage::Dreq(DreqRepr {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                remote_qpn: c.remote_qpn,
                private_data: [0; DREQ_PRIVATE_DATA_LEN],
            }),
        );
        let peer = c.peer;
        let tid = host.gsi().gsi_send(peer, dreq, Some(self.config.response_timeout), self.config.max_retries)?;
        let c = &mut self.conns[i];
        c.dreq_tid = tid;
        c.state = State::DreqSent;
        Ok(())
    }
}

impl Conn {
    /// The QP the CM moves (to ERR, on the way out): none where the
    /// consumer moves its own.
    fn moved_qpn(&self) -> Option<u32> {
        if self.params.consumer_moves_qp {
            None
        } else {
            self.qpn
        }
    }
}

trait MinByBytes {
    fn min_by_bytes(self, other: Self) -> Self;
}

impl MinByBytes for Mtu {
    fn min_by_bytes(self, other: Mtu) -> Mtu {
        if self.bytes() <= other.bytes() {
            self
        } else {
            other
        }
    }
}
