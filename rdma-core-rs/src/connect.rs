//! Bringing a QP up (RESET, INIT, RTR, RTS) towards a peer whose QPN, PSN
//! and GID were exchanged out of band: the sequence every verbs example
//! writes by hand, with the attributes each QP type requires.

use crate::device::Gid;
use crate::error::Result;
use crate::qp::{AhAttr, QueuePair};
use rdma_transport::{Access, LinkKind, Mtu, QpAttr, QpState, QpType};

/// What the peer told us out of band (the libibverbs examples' `pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerInfo {
    pub qpn: u32,
    /// The first PSN the peer sends with.
    pub psn: u32,
    pub gid: Gid,
}

/// The attributes of the transitions, with the defaults of the examples
/// and perftest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    pub mtu: Mtu,
    /// Remote access granted to the peer (`qp_access_flags`).
    pub access: Access,
    /// Local ACK timeout exponent: 4.096 us x 2^timeout.
    pub timeout: u8,
    pub retry_cnt: u8,
    /// 7: retry forever.
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    /// Outstanding READs and atomics, each way.
    pub max_rd_atomic: u8,
    /// UD only.
    pub qkey: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sgid_index: u32,
    /// Native IB: the peer port's LID (the exchanges' LID field) and the
    /// service level of the path. Ignored on RoCE.
    pub dlid: u16,
    pub sl: u8,
    /// Native IB: send a GRH (the peer's GID) with every packet, as for a
    /// route through an IB router; off, packets carry only the LRH.
    pub ib_global: bool,
    /// The entry of the port's P_Key table (its partition) the QP sends
    /// and accepts: 0, the first, unless a subnet manager put the port in
    /// several partitions (`rdma-sm --partition`).
    pub pkey_index: u16,
}

impl Default for ConnectOptions {
    fn default() -> ConnectOptions {
        ConnectOptions {
            mtu: Mtu::Mtu1024,
            access: Access::ALL,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            qkey: 0x1111_1111,
            hop_limit: 64,
            traffic_class: 0,
            sgid_index: 0,
            dlid: 0,
            sl: 0,
            ib_global: false,
            pkey_index: 0,
        }
    }
}

impl QueuePair {
    /// RESET to INIT: for UD the Q_Key, otherwise the remote access flags.
    pub fn to_init(&self, opts: &ConnectOptions) -> Result<()> {
        let ud = self.qp_type() == QpType::Ud;
        self.modify(&QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(opts.pkey_index),
            port_num: Some(1),
            qp_access_flags: (!ud).then_some(opts.access),
            qkey: ud.then_some(opts.qkey),
            ..QpAttr::default()
        })
    }

    /// INIT to RTR (towards `peer`) and RTR to RTS (sending from `local_psn`).
    pub fn to_rts(&self, local_psn: u32, peer: &PeerInfo, opts: &ConnectOptions) -> Result<()> {
        let t = self.qp_type();
        let connected = t != QpType::Ud;
        let rc = t.reliable();
        let ah = AhAttr {
            dgid: peer.gid,
            sgid_index: opts.sgid_index,
            hop_limit: opts.hop_limit,
            traffic_class: opts.traffic_class,
        };
        let mut av = ah.to_av();
        if self.ctx.link_kind() == LinkKind::Ib {
            if connected && !(1..=0xbfff).contains(&opts.dlid) {
                return Err(crate::Error::InvalidArgument(format!(
                    "QP {:#x}: the peer's LID {} is not a unicast LID (native IB addresses by LID)",
                    self.qp_num(),
                    opts.dlid
                )));
            }
            (av.dlid, av.sl) = (opts.dlid, opts.sl);
            if !opts.ib_global {
                av.dest = std::net::Ipv6Addr::UNSPECIFIED.into();
            }
        }
        self.modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            path_mtu: connected.then_some(opts.mtu),
            dest_qp_num: connected.then_some(peer.qpn),
            rq_psn: connected.then_some(peer.psn),
            av: connected.then_some(av),
            max_dest_rd_atomic: rc.then_some(opts.max_rd_atomic),
            min_rnr_timer: rc.then_some(opts.min_rnr_timer),
            ..QpAttr::default()
        })?;
        self.modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(local_psn),
            timeout: rc.then_some(opts.timeout),
            retry_cnt: rc.then_some(opts.retry_cnt),
            rnr_retry: rc.then_some(opts.rnr_retry),
            max_rd_atomic: rc.then_some(opts.max_rd_atomic),
            ..QpAttr::default()
        })
    }

    /// RESET through RTS in one call.
    pub fn connect(&self, local_psn: u32, peer: &PeerInfo, opts: &ConnectOptions) -> Result<()> {
        self.to_init(opts)?;
        self.to_rts(local_psn, peer, opts)
    }
}
