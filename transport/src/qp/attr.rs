//! The QP's attributes and the handles they name: its service type and
//! state, the path MTU and address vector, the queue capacities, what
//! `create_qp` and `modify_qp` take (`ibv_qp_init_attr`, `ibv_qp_attr`)
//! and the parameters in force. The state machine that checks and applies
//! them is [`super::Qp`]; the requester, completer and responder read them.

use crate::memory::{Access, Pd};
use core::net::IpAddr;

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
