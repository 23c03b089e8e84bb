//! The RDMA CM's objects and how they hold each other: a device's tables
//! name its IDs, an ID names its device and its event channel, a channel
//! queues events that name IDs. Their types live here together, below
//! the files that give them behaviour (`device.rs`, `id.rs`, `event.rs`,
//! `dispatch.rs`), so that those files use this one and not each other.

use crate::context::Context;
use crate::qp::QueuePair;
use rdma_link::share::Services;
use rdma_transport::cm::{Cm, ConnId};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex, Weak};

/// A listening ID and where it listens, or (`listening` false) an ID
/// bound to the port that has not called `listen` yet.
pub(super) struct Listener {
    pub(super) id: Weak<IdShared>,
    pub(super) addr: IpAddr,
    pub(super) listening: bool,
}

/// A REQ (or SIDR_REQ) for a port an ID has bound but not listened on yet,
/// kept until that ID listens (then reported) or goes (then refused).
pub(super) struct HeldRequest {
    pub(super) conn: ConnId,
    pub(super) from: IpAddr,
    pub(super) service_id: u64,
    pub(super) remote_qpn: Option<u32>,
    pub(super) private_data: Vec<u8>,
}

pub(crate) struct Core {
    pub(crate) cm: Cm,
    /// Connections by the CM's communication ID.
    pub(crate) conns: HashMap<u32, Weak<IdShared>>,
    pub(super) listeners: HashMap<u64, Vec<Listener>>,
    /// Requests for bound ports not yet listened on (see [`HeldRequest`]).
    pub(super) held: Vec<HeldRequest>,
}

/// A connection whose ID the application dropped.
pub(super) struct Buried {
    pub(super) conn: ConnId,
    pub(super) connected: bool,
    /// A request reported and never answered.
    pub(super) requested: bool,
    pub(super) ud: bool,
}

pub(crate) struct CmDevice {
    pub(crate) ctx: Context,
    pub(crate) addr: IpAddr,
    /// Where REQs for this process's ports are steered, on a shared port.
    pub(super) services: Option<Services>,
    pub(super) core: Mutex<Core>,
    /// Dropped IDs' connections, for the next round (innermost lock: it is
    /// taken from `Drop`, which may run anywhere).
    pub(super) graveyard: Mutex<Vec<Buried>>,
}

/// `enum rdma_cm_event_type`, with librdmacm's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum EventType {
    AddrResolved = 0,
    AddrError = 1,
    RouteResolved = 2,
    RouteError = 3,
    ConnectRequest = 4,
    ConnectResponse = 5,
    ConnectError = 6,
    Unreachable = 7,
    Rejected = 8,
    Established = 9,
    Disconnected = 10,
    DeviceRemoval = 11,
    MulticastJoin = 12,
    MulticastError = 13,
    AddrChange = 14,
    TimewaitExit = 15,
}

/// `rdma_cm_event.param`: the connection parameters of CONNECT_REQUEST
/// and ESTABLISHED, the private data of every connection event, the UD
/// peer of an ESTABLISHED on RDMA_PS_UDP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventParam {
    /// As the message carried it: fixed length, zero-padded (56 bytes
    /// for a REQ, 196 for a REP, 148 for a REJ), as librdmacm reports it.
    pub private_data: Vec<u8>,
    /// Already swapped for this side (a REQ's initiator depth is the
    /// responder resources asked of us).
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// The peer's QPN.
    pub qp_num: u32,
    /// UD (SIDR): the peer's Q_Key.
    pub qkey: u32,
    /// MULTICAST_JOIN: the group's MGID.
    pub mgid: Option<crate::device::Gid>,
}

/// An event (`struct rdma_cm_event`). [`CmEvent::ack`] or dropping it is
/// `rdma_ack_cm_event`.
#[derive(Debug, Clone)]
pub struct CmEvent {
    pub event: EventType,
    /// For CONNECT_REQUEST, a new ID for the connection; else the ID the
    /// event is about.
    pub id: CmId,
    /// For CONNECT_REQUEST, the listening ID.
    pub listen_id: Option<CmId>,
    /// 0, or what went wrong: the REJ reason for REJECTED, `-ETIMEDOUT`
    /// (-110) for UNREACHABLE, as librdmacm reports them.
    pub status: i32,
    pub param: EventParam,
}

pub(crate) struct ChannelShared {
    pub(super) queue: Mutex<VecDeque<CmEvent>>,
    /// An eventfd (semaphore mode) counting the queued events, for
    /// channels made with [`EventChannel::with_fd`]: written and read
    /// under the queue's lock, so its count is the queue's length.
    pub(super) fd: Option<OwnedFd>,
    pub(super) ready: Condvar,
    /// The devices of this channel's IDs: what a waiter drives.
    pub(super) devices: Mutex<Vec<Weak<CmDevice>>>,
}

/// `enum rdma_port_space`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// RDMA_PS_TCP: reliable connected QPs.
    Tcp,
    /// RDMA_PS_UDP: unreliable datagram QPs, resolved with SIDR.
    Udp,
    /// Another port space, by number (RDMA_PS_IB 0x13F, ...).
    Other(u16),
}

/// `struct rdma_conn_param`. 0xFF in the two depths means the device
/// maximum ([`MAX_RD_ATOMIC`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParam {
    /// Up to 56 bytes in a connect, 196 in an accept.
    pub private_data: Vec<u8>,
    /// RDMA READs/atomics we accept at once from the peer.
    pub responder_resources: u8,
    /// RDMA READs/atomics we issue at once.
    pub initiator_depth: u8,
    pub flow_control: bool,
    /// Transport retries (at most 7); ignored on accept.
    pub retry_count: u8,
    /// RNR retries the peer makes (7: forever).
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// The application's own QP (librdmacm's `conn_param.qp_num` on an ID
    /// without a QP, an "external QP"): the CM names it in the REQ or REP
    /// and never moves it. The application takes it through INIT, RTR and
    /// RTS with [`CmId::init_qp_attr`]; the active side then gets
    /// CONNECT_RESPONSE instead of ESTABLISHED and calls
    /// [`CmId::establish`]. Ignored on an ID with a QP.
    pub qp_num: Option<u32>,
}

/// Where an ID is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Idle,
    AddrResolved,
    RouteResolved,
    Bound,
    Listening,
    /// Passive: reported in a CONNECT_REQUEST, not yet accepted.
    ConnectRequest,
    /// Active: REQ sent. Passive: REP sent.
    Connecting,
    Connected,
    Disconnected,
}

pub(crate) struct IdInner {
    pub(crate) ps: PortSpace,
    pub(crate) channel: Arc<ChannelShared>,
    pub(crate) dev: Option<Arc<CmDevice>>,
    pub(crate) local: Option<SocketAddr>,
    pub(crate) remote: Option<SocketAddr>,
    pub(crate) phase: Phase,
    pub(crate) conn: Option<ConnId>,
    pub(crate) qp: Option<Arc<QueuePair>>,
    /// The number of a QP made elsewhere on this ID's device and handed to
    /// the CM with [`CmId::set_qp_num`] (when `qp` is None).
    pub(crate) ext_qpn: Option<u32>,
    pub(crate) tos: u8,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the local ACK timeout (4.096 us x
    /// 2^t) the CM gives the QP at RTS; [`ACK_TIMEOUT`] when not set.
    pub(crate) ack_timeout: Option<u8>,
    /// The service this ID claimed on a shared port (`bind_addr`), given
    /// back when it goes.
    pub(crate) claimed: Option<u64>,
    /// The PSN this ID advertises in its REQ or REP and receives from,
    /// drawn when the ID is made (the kernel's `id_priv->seq_num`):
    /// [`CmId::init_qp_attr`] gives it before the REP exists.
    pub(crate) seq_num: u32,
    /// The application's own QP, named in connect or accept
    /// ([`ConnParam::qp_num`]): the CM never moves it.
    pub(crate) own_qpn: Option<u32>,
    /// `rdma_set_local_ece`: (vendor ID, options); the vendor ID goes in
    /// the REQ or REP.
    pub(crate) local_ece: (u32, u32),
}

pub(crate) struct IdShared {
    pub(super) inner: Mutex<IdInner>,
}

/// A CM ID. Cheap to clone: clones are the same ID (events name it).
#[derive(Clone)]
pub struct CmId {
    pub(super) shared: Arc<IdShared>,
}
